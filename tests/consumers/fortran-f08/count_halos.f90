program count_halos
  use halos
  implicit none
  type(c_ptr) :: ctx
  real(c_float), allocatable :: pos(:, :), m(:)
  real(c_double), allocatable :: vel(:, :)
  integer(c_int64_t), allocatable :: ids(:), labels(:)
  integer(c_int64_t) :: n_halos, total
  type(ztree_particles) :: p
  type(ztree_halo), allocatable :: cat(:)
  integer :: ierr, rank
  integer(c_int) :: st
  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call open_ztree(ctx)
  call particles(pos, vel, ids, m)
  allocate(labels(size(ids)))
  p = ztree_particles_xyz(pos)
  call ztree_set_velocities(p, vel)
  call ztree_set_ids(p, ids)
  call ztree_set_masses(p, m)
  st = ztree_f_fof_labels(ctx, p, 0.002d0, 0.0d0, 20, labels, n_halos, cat)
  if (st /= ZTREE_OK) error stop 'fof failed'
  call MPI_Allreduce(n_halos, total, 1, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD, ierr)
  if (rank == 0) print '(a, i0, a)', 'Fortran mpi_f08 consumer: ', total, ' halo(s)'
  if (total /= 1) error stop 'expected one halo'
  st = ztree_destroy(ctx)
  call MPI_Finalize(ierr)
end program
