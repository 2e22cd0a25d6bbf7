! Fortran test of the ztree module: kNN density, FoF, DBSCAN and radius queries against
! brute force, and errors.
program test_fortran
  use, intrinsic :: iso_c_binding
  use, intrinsic :: ieee_arithmetic
  use ztree
  implicit none
  integer, parameter :: n = 600, k = 5
  real(c_double), target :: pos(3, n)
  real(c_double), target :: density(n), kth(n), density2(n), kth2(n), hint(n)
  integer(c_int64_t), target :: labels(n)
  integer(c_int64_t) :: n_halos, parent(n), ri, rj
  type(ztree_config) :: cfg
  type(c_ptr) :: ctx
  integer(c_int) :: st
  integer :: i, j, fails
  real(c_double) :: d2(n), r, dx(3), l
  type(ztree_halo), allocatable :: halos(:)
  type(ztree_cluster), allocatable :: clusters(:)
  integer(c_int64_t), target :: labels2(n)
  integer(c_int8_t), target :: cls(n)
  integer(c_int64_t) :: n_clusters
  integer :: cnt
  integer(c_int64_t), allocatable, target :: rcounts(:)
  real(c_double), allocatable, target :: rdens(:), hsml(:)

  fails = 0
  call random_seed()
  call random_number(pos)
  pos(:, 1:100) = 0.5d0 + (pos(:, 1:100) - 0.5d0) * 0.02d0   ! one clump
  call check_struct_sizes()
  st = ztree_config_init(cfg)
  call check(st == ZTREE_OK .and. cfg%struct_size == c_sizeof(cfg) .and. cfg%dims == 3, 'config init')
  cfg%periodic = 1
  cfg%box_size = 1.0d0
  cfg%leaf_size = 8
  cfg%top_target = 16
  st = ztree_create(cfg, ctx)
  call check(st == ZTREE_OK, 'create')

  st = ztree_f_knn_density(ctx, pos, k, density, kth)
  call check(st == ZTREE_OK, 'knn: ' // ztree_last_error(ctx))
  do i = 1, n
    do j = 1, n
      dx = pos(:, i) - pos(:, j)
      where (dx > 0.5d0) dx = dx - 1.0d0
      where (dx < -0.5d0) dx = dx + 1.0d0
      d2(j) = (dx(1) * dx(1) + dx(2) * dx(2)) + dx(3) * dx(3)
    end do
    r = sqrt(kth_smallest(d2, k))
    call check(kth(i) == r, 'kth distance')
    call check(abs(density(i) - k / (4.0d0 / 3.0d0 * acos(-1.0d0) * r**3)) <= 1d-12 * density(i), 'density')
  end do

  ! The k-th distances as the next call's guess (exact, then 0.8 times them): the same
  ! densities and k-th distances, bit for bit.
  do j = 1, 2
    hint = kth * merge(1.0d0, 0.8d0, j == 1)
    st = ztree_f_knn_density(ctx, pos, k, density2, kth2, kth_hint=hint)
    call check(st == ZTREE_OK, 'hinted knn: ' // ztree_last_error(ctx))
    call check(all(density2 == density) .and. all(kth2 == kth), 'hinted results differ')
  end do

  l = 0.01d0
  st = ztree_f_fof_labels(ctx, pos, l, 0.0d0, 1, labels, n_halos, halos)
  call check(st == ZTREE_OK, 'fof: ' // ztree_last_error(ctx))
  do i = 1, n
    parent(i) = i
  end do
  do i = 1, n
    do j = i + 1, n
      dx = pos(:, i) - pos(:, j)
      where (dx > 0.5d0) dx = dx - 1.0d0
      where (dx < -0.5d0) dx = dx + 1.0d0
      if ((dx(1) * dx(1) + dx(2) * dx(2)) + dx(3) * dx(3) <= l * l) then
        ri = root(int(i, c_int64_t))
        rj = root(int(j, c_int64_t))
        parent(max(ri, rj)) = min(ri, rj)
      end if
    end do
  end do
  do i = 1, n
    do j = 1, n
      call check((labels(i) == labels(j)) .eqv. (root(int(i, c_int64_t)) == root(int(j, c_int64_t))), 'partition')
    end do
  end do
  call check(sum(halos%count) == n, 'catalogue counts')

  ! DBSCAN: min_pts = 2 is FoF with groups of two or more; the core test by brute force.
  st = ztree_f_fof_labels(ctx, pos, l, 0.0d0, 2, labels, n_halos)
  labels2 = labels
  st = ztree_f_dbscan_labels(ctx, pos, l, 0.0d0, 2, labels, n_clusters)
  call check(st == ZTREE_OK, 'dbscan: ' // ztree_last_error(ctx))
  call check(all(labels == labels2) .and. n_clusters == n_halos, 'dbscan min_pts 2 = FoF')
  st = ztree_f_dbscan_labels(ctx, pos, l, 0.0d0, 5, labels, n_clusters, cls, clusters)
  call check(st == ZTREE_OK .and. size(clusters) == n_clusters, 'dbscan min_pts 5')
  do i = 1, n
    cnt = 0
    do j = 1, n
      dx = pos(:, i) - pos(:, j)
      where (dx > 0.5d0) dx = dx - 1.0d0
      where (dx < -0.5d0) dx = dx + 1.0d0
      if ((dx(1) * dx(1) + dx(2) * dx(2)) + dx(3) * dx(3) <= l * l) cnt = cnt + 1
    end do
    call check((cnt >= 5) .eqv. (cls(i) == ZTREE_POINT_CORE), 'core test')
    call check((labels(i) >= 0) .eqv. (cls(i) /= ZTREE_POINT_NOISE), 'noise has no tag')
  end do
  call check(sum(clusters%count) == count(labels >= 0), 'dbscan catalogue counts')

  ! Radius self-query: counts within l (itself included) by brute force, the same with
  ! one radius per particle, and the SPH density positive everywhere.
  allocate(rcounts(n), rdens(n), hsml(n))
  st = ztree_f_radius(ctx, pos, l, counts=rcounts)
  call check(st == ZTREE_OK, 'radius: ' // ztree_last_error(ctx))
  do i = 1, n
    cnt = 0
    do j = 1, n
      dx = pos(:, i) - pos(:, j)
      where (dx > 0.5d0) dx = dx - 1.0d0
      where (dx < -0.5d0) dx = dx + 1.0d0
      if ((dx(1) * dx(1) + dx(2) * dx(2)) + dx(3) * dx(3) <= l * l) cnt = cnt + 1
    end do
    call check(rcounts(i) == cnt, 'radius count')
  end do
  hsml = l
  labels = rcounts
  st = ztree_f_radius(ctx, pos, 0.0d0, counts=rcounts, density=rdens, h=hsml)
  call check(st == ZTREE_OK .and. all(rcounts == labels) .and. all(rdens > 0), 'radius with h: ' // ztree_last_error(ctx))

  ! Halo property columns through ztree_fof: each halo's potential minimum by brute force
  ! over its members, and the per-type counts adding up to the member counts.
  block
    type(ztree_particles) :: pp
    type(ztree_fof_params) :: fp
    type(ztree_fof_output) :: fo
    integer(c_int64_t), pointer :: cidx(:), offs(:), mem(:), lent(:)
    real(c_double), pointer :: so(:)
    integer(c_int32_t), target :: ptype(n)
    real(c_double) :: phi, best, g, rho_crit, omega_m
    integer(c_int64_t) :: h, a, b, at
    ptype = 1
    ptype(1:n:4) = 4
    pp = ztree_particles_xyz(pos)
    call ztree_set_types(pp, ptype)
    st = ztree_gadget_cosmology(3.085678d24, 1.989d43, 1d5, 0.308d0, 0.692d0, 1.0d0, g, rho_crit, omega_m)
    call check(st == ZTREE_OK .and. abs(g - 43.0187d0) < 1d-3, 'gadget cosmology')
    fp%linking_length = l
    fp%min_members = 5
    fp%members = 1
    fp%columns = ior(ior(ZTREE_COLUMN_CENTRE, ZTREE_COLUMN_SO), ZTREE_COLUMN_TYPES)
    fp%gravity_constant = 1.0d0
    fp%rho_crit = 1.0d4   ! 200 Omega_m rho_crit: 1000 times the mean density
    fp%omega_m = 0.3d0
    st = ztree_fof(ctx, pp, fp, fo)
    call check(st == ZTREE_OK .and. fo%n_halos > 0, 'fof with columns: ' // ztree_last_error(ctx))
    if (st /= ZTREE_OK) fo%n_halos = 0
    call c_f_pointer(fo%centre_index, cidx, [fo%n_halos])
    call c_f_pointer(fo%member_offsets, offs, [fo%n_halos + 1])
    call c_f_pointer(fo%member_indices, mem, [offs(fo%n_halos + 1)])
    call c_f_pointer(fo%so_mass, so, [ZTREE_SO_DEFINITIONS * fo%n_halos])
    call c_f_pointer(fo%len_type, lent, [fo%n_types * fo%n_halos])
    call check(fo%n_types == 5 .and. c_associated(fo%so_mass) .and. .not. c_associated(fo%vmax), 'the columns asked for')
    do h = 1, fo%n_halos
      best = huge(1.0d0)
      at = -1
      do a = offs(h) + 1, offs(h + 1)
        phi = 0
        do b = offs(h) + 1, offs(h + 1)
          if (b == a) cycle
          dx = pos(:, mem(b) + 1) - pos(:, mem(a) + 1)
          where (dx > 0.5d0) dx = dx - 1.0d0
          where (dx < -0.5d0) dx = dx + 1.0d0
          phi = phi - 1.0d0 / sqrt((dx(1) * dx(1) + dx(2) * dx(2)) + dx(3) * dx(3))
        end do
        if (phi < best) then
          best = phi
          at = mem(a)
        end if
      end do
      call check(cidx(h) == at, 'potential minimum')
      call check(sum(lent((h - 1) * 5 + 1:h * 5)) == offs(h + 1) - offs(h), 'per-type counts')
      call check(so((h - 1) * ZTREE_SO_DEFINITIONS + 1) >= so((h - 1) * ZTREE_SO_DEFINITIONS + 2), 'M200c >= M500c')
    end do
  end block

  pos(2, 7) = ieee_value(1.0d0, ieee_quiet_nan)
  st = ztree_f_knn_density(ctx, pos, k, density)
  call check(st == ZTREE_ERR_NON_FINITE, 'NaN is reported')
  call check(index(ztree_last_error(ctx), 'point 6') > 0, 'message names the point: ' // ztree_last_error(ctx))
  st = ztree_destroy(ctx)
  if (fails > 0) then
    print *, 'test_fortran: ', fails, ' checks failed'
    stop 1
  end if
  print '(a)', 'test_fortran: all checks passed'

contains

  ! Each type's declared struct_size is its size in this module's layout (the library
  ! reads and writes that many bytes).
  subroutine check_struct_sizes()
    type(ztree_particles) :: p
    type(ztree_knn_params) :: kp
    type(ztree_knn_output) :: ko
    type(ztree_fof_params) :: fp
    type(ztree_fof_output) :: fo
    type(ztree_stats) :: s
    type(ztree_dbscan_params) :: dp
    type(ztree_dbscan_output) :: dout
    type(ztree_radius_params) :: rp
    type(ztree_radius_output) :: ro
    call check(p%struct_size == c_sizeof(p), 'ztree_particles%struct_size')
    call check(kp%struct_size == c_sizeof(kp), 'ztree_knn_params%struct_size')
    call check(ko%struct_size == c_sizeof(ko), 'ztree_knn_output%struct_size')
    call check(fp%struct_size == c_sizeof(fp), 'ztree_fof_params%struct_size')
    call check(fo%struct_size == c_sizeof(fo), 'ztree_fof_output%struct_size')
    call check(s%struct_size == c_sizeof(s), 'ztree_stats%struct_size')
    call check(dp%struct_size == c_sizeof(dp), 'ztree_dbscan_params%struct_size')
    call check(dout%struct_size == c_sizeof(dout), 'ztree_dbscan_output%struct_size')
    call check(rp%struct_size == c_sizeof(rp), 'ztree_radius_params%struct_size')
    call check(ro%struct_size == c_sizeof(ro), 'ztree_radius_output%struct_size')
  end subroutine

  subroutine check(ok, what)
    logical, intent(in) :: ok
    character(len=*), intent(in) :: what
    if (.not. ok) then
      fails = fails + 1
      if (fails < 20) print *, 'check failed: ', what
    end if
  end subroutine

  recursive function root(i) result(r)
    integer(c_int64_t), intent(in) :: i
    integer(c_int64_t) :: r
    r = i
    do while (parent(r) /= r)
      r = parent(r)
    end do
  end function

  function kth_smallest(a, kk) result(v)
    real(c_double), intent(in) :: a(:)
    integer, intent(in) :: kk
    real(c_double) :: v, b(size(a))
    integer :: m, p
    b = a
    do m = 1, kk
      p = minloc(b, 1)
      v = b(p)
      b(p) = huge(1.0d0)
    end do
  end function

end program test_fortran
