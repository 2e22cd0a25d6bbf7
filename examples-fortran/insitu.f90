! In-situ loop in Fortran: particles pos(3, n) on MPI ranks, kNN density and FoF halos
! every step through one reused ztree context (communicator passed as its integer handle).
! The calls are distributed over all ranks: each rank gets the density and halo tag of its
! own particles, and each halo of the global catalogue is returned by exactly one rank.
program insitu
  use, intrinsic :: iso_c_binding
  use mpi
  use ztree
  implicit none
  integer :: ierr, rank, nranks, step, i, d
  integer(c_int64_t) :: total_halos
  integer(c_int) :: st
  integer(c_int64_t) :: n, n_halos
  real(c_double), allocatable, target :: pos(:, :), vel(:, :), density(:)
  integer(c_int64_t), allocatable, target :: labels(:)
  type(ztree_halo), allocatable :: halos(:)
  type(ztree_config) :: cfg
  type(ztree_stats) :: stats
  type(c_ptr) :: ctx
  real(c_double) :: r(3), c(3)
  character(len=32) :: arg

  call MPI_Init(ierr)
  call MPI_Comm_rank(MPI_COMM_WORLD, rank, ierr)
  call MPI_Comm_size(MPI_COMM_WORLD, nranks, ierr)
  n = 200000
  if (command_argument_count() > 0) then
    call get_command_argument(1, arg)
    read (arg, *) n
  end if
  n = n / nranks
  allocate(pos(3, n), vel(3, n), density(n), labels(n))
  call random_seed()
  ! Clumps of 100 particles around random centres, plus a uniform background.
  do i = 1, int(n)
    if (mod(i, 100) == 1) call random_number(c)
    call random_number(r)
    if (mod(i, 3) == 0) then
      pos(:, i) = r
    else
      pos(:, i) = modulo(c + (r - 0.5d0) * 0.004d0, 1.0d0)
    end if
    call random_number(r)
    vel(:, i) = (r - 0.5d0) * 1d-4
  end do

  st = ztree_config_init(cfg)
  cfg%periodic = 1
  cfg%box_size = 1.0d0
  st = ztree_create_mpi(cfg, int(MPI_COMM_WORLD, c_int32_t), ctx)
  if (st /= ZTREE_OK) then
    print *, 'ztree_create_mpi: ', ztree_last_error(c_null_ptr)
    call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
  end if
  if (rank == 0) print '(a, a, a, i0, a, i0, a)', 'ztree ', ztree_version(), ' Fortran in-situ demo: ', &
      n * nranks, ' particles on ', nranks, ' ranks'

  do step = 1, 3
    do i = 1, int(n)
      do d = 1, 3
        pos(d, i) = modulo(pos(d, i) + vel(d, i), 1.0d0)
        if (pos(d, i) >= 1.0d0) pos(d, i) = 0.0d0
      end do
    end do
    st = ztree_f_knn_density(ctx, pos, 16, density)
    if (st /= ZTREE_OK) then
      print *, 'ztree_knn: ', ztree_last_error(ctx)
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
    st = ztree_f_fof_labels(ctx, pos, 0.0d0, 0.2d0, 20, labels, n_halos, halos)
    if (st /= ZTREE_OK) then
      print *, 'ztree_fof: ', ztree_last_error(ctx)
      call MPI_Abort(MPI_COMM_WORLD, 1, ierr)
    end if
    st = ztree_get_stats(ctx, stats)
    call MPI_Allreduce(n_halos, total_halos, 1, MPI_INTEGER8, MPI_SUM, MPI_COMM_WORLD, ierr)
    if (rank == 0) then
      print '(a, i0, a, i0, a, i0, a, f8.4, a, i0, a)', 'step ', step, ': particles ', n * nranks, &
          ' | halos (all ranks) ', total_halos, ' | FoF ', stats%total_seconds, ' s, ', &
          stats%bytes_sent, ' bytes sent (rank 0)'
    end if
  end do
  st = ztree_destroy(ctx)
  call MPI_Finalize(ierr)
end program insitu
