! A simulation's analysis module: ztree on MPI_COMM_WORLD through mpi_f08.
module halos
  use, intrinsic :: iso_c_binding
  use mpi_f08
  use ztree
  implicit none
contains
  subroutine open_ztree(ctx)
    type(c_ptr), intent(out) :: ctx
    type(ztree_config) :: cfg
    integer(c_int) :: st
    st = ztree_config_init(cfg)
    cfg%periodic = 1
    cfg%box_size = 1.0d0
    cfg%threads = 1
    st = ztree_create_mpi(cfg, MPI_COMM_WORLD%MPI_VAL, ctx)
    if (st /= ZTREE_OK) error stop 'ztree_create_mpi failed'
  end subroutine

  !> The same particles on every run: rank r holds a slab of a clumpy set (f32 positions,
  !> f64 velocities, i64 ids, f32 masses: the GADGET layout).
  subroutine particles(pos, vel, ids, m)
    real(c_float), allocatable, intent(out) :: pos(:, :), m(:)
    real(c_double), allocatable, intent(out) :: vel(:, :)
    integer(c_int64_t), allocatable, intent(out) :: ids(:)
    integer :: rank, size, ierr, i, n
    call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
    call MPI_Comm_size(MPI_COMM_WORLD, size, ierr)
    n = 3000
    allocate(pos(3, n), vel(3, n), ids(n), m(n))
    do i = 1, n
      ids(i) = int(rank, c_int64_t) * n + i
      pos(1, i) = real(modulo(ids(i) * 0.6180339887d0, 1.0d0), c_float)
      pos(2, i) = real(modulo(ids(i) * 0.7548776662d0, 1.0d0), c_float)
      pos(3, i) = real(modulo(ids(i) * 0.5698402910d0, 1.0d0), c_float)
      if (mod(ids(i), 10_c_int64_t) == 0) pos(:, i) = 0.5 + 0.001 * (pos(:, i) - 0.5)
      vel(:, i) = 1.0d0 * mod(ids(i), 7_c_int64_t)
      m(i) = 1.0
    end do
  end subroutine
end module
