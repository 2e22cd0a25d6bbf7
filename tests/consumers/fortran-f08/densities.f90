program densities
  use halos
  implicit none
  type(c_ptr) :: ctx
  real(c_float), allocatable :: pos(:, :), m(:)
  real(c_double), allocatable :: vel(:, :), density(:)
  integer(c_int64_t), allocatable :: ids(:)
  integer :: ierr
  integer(c_int) :: st
  call MPI_Init(ierr)
  call open_ztree(ctx)
  call particles(pos, vel, ids, m)
  allocate(density(size(ids)))
  st = ztree_f_knn_density(ctx, pos, 16, density)
  if (st /= ZTREE_OK) error stop 'knn failed'
  if (.not. (density(10) > 100 * density(11))) error stop 'the clump is not denser'
  st = ztree_destroy(ctx)
  call MPI_Finalize(ierr)
end program
