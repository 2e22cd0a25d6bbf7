! ztree Fortran interface: bind(C) mirrors of include/ztree.h and small wrappers that
! take Fortran arrays. CMake: link ZTree::fortran (the package compiles this module once,
! in a library of your build); otherwise compile this file into your program.
!
!   use ztree
!   type(ztree_config) :: cfg
!   type(c_ptr) :: ctx
!   ierr = ztree_config_init(cfg); cfg%periodic = 1; cfg%box_size = 1.0d0
!   ierr = ztree_create_mpi(cfg, MPI_COMM_WORLD, ctx)     ! use mpi (or ztree_create(cfg, ctx))
!   ierr = ztree_create_mpi(cfg, MPI_COMM_WORLD%MPI_VAL, ctx)  ! use mpi_f08
!   ierr = ztree_f_knn_density(ctx, pos, 16, density)        ! pos(3, n), real(4) or real(8)
!   ierr = ztree_f_knn_density(ctx, pos, 16, density, kth, kth_hint=kth_prev)  ! a time step on
!   p = ztree_particles_xyz(pos); call ztree_set_velocities(p, vel); call ztree_set_masses(p, m)
!   ierr = ztree_f_fof_labels(ctx, p, 0.0d0, 0.2d0, 20, labels, n_halos, halos)
!   ierr = ztree_f_fof_labels(ctx, pos, 0.0d0, 0.2d0, 20, labels, n_halos)
!   ierr = ztree_destroy(ctx)
module ztree
  use, intrinsic :: iso_c_binding
  implicit none
  private

  ! Status codes (enum ztree_status).
  integer(c_int), parameter, public :: ZTREE_OK = 0, ZTREE_ERR_NULL_POINTER = 1, &
    ZTREE_ERR_INVALID_ARGUMENT = 2, ZTREE_ERR_NON_FINITE = 3, ZTREE_ERR_OUTSIDE_BOX = 4, &
    ZTREE_ERR_SIZE = 5, ZTREE_ERR_DTYPE = 6, ZTREE_ERR_UNSUPPORTED = 7, &
    ZTREE_ERR_NO_SOURCES = 8, ZTREE_ERR_INTERNAL = 9, ZTREE_ERR_MPI = 10, ZTREE_ERR_REMOTE = 11, &
    ZTREE_ERR_MEMORY = 12, ZTREE_ERR_NO_DEVICE = 13, ZTREE_ERR_DEVICE = 14
  integer(c_int32_t), parameter, public :: ZTREE_DTYPE_NONE = 0, ZTREE_DTYPE_F32 = 1, &
    ZTREE_DTYPE_F64 = 2, ZTREE_DTYPE_I32 = 3, ZTREE_DTYPE_I64 = 4, ZTREE_DTYPE_U32 = 5, &
    ZTREE_DTYPE_U64 = 6, ZTREE_DTYPE_U8 = 7
  integer(c_int32_t), parameter, public :: ZTREE_MEMORY_HOST = 0, ZTREE_MEMORY_CUDA_DEVICE = 1
  integer(c_int32_t), parameter, public :: ZTREE_KNN_INDICES = 1, ZTREE_KNN_DISTANCES = 2, &
    ZTREE_KNN_KTH_DISTANCE = 4, ZTREE_KNN_DENSITY = 8, ZTREE_KNN_SCALAR_MEAN = 16, &
    ZTREE_KNN_PERMUTATION = 32
  integer(c_int32_t), parameter, public :: ZTREE_ORDER_INPUT = 0, ZTREE_ORDER_ZORDER = 1
  integer(c_int32_t), parameter, public :: ZTREE_CATALOGUE_ZORDER = 0, ZTREE_CATALOGUE_GADGET = 1
  integer(c_int32_t), parameter, public :: ZTREE_DBSCAN_BORDER_NEAREST = 0, ZTREE_DBSCAN_BORDER_NOISE = 1
  integer(c_int32_t), parameter, public :: ZTREE_RADIUS_COUNTS = 1, ZTREE_RADIUS_LISTS = 2, ZTREE_RADIUS_DISTANCES = 4, &
                                           ZTREE_RADIUS_SCALAR_SUM = 8, ZTREE_RADIUS_SCALAR_MEAN = 16, ZTREE_RADIUS_DENSITY = 32
  integer(c_int32_t), parameter, public :: ZTREE_LIST_BY_DISTANCE = 0, ZTREE_LIST_BY_INDEX = 1
  integer(c_int8_t), parameter, public :: ZTREE_POINT_NOISE = 0, ZTREE_POINT_BORDER = 1, ZTREE_POINT_CORE = 2
  ! Halo property columns (ztree_fof_params%columns) and the SO definitions' places in a
  ! so_mass / so_radius row (0-based, as in C: Fortran index + 1).
  integer(c_int32_t), parameter, public :: ZTREE_COLUMN_CENTRE = 1, ZTREE_COLUMN_MOST_BOUND = 2, &
    ZTREE_COLUMN_SO = 4, ZTREE_COLUMN_DYNAMICS = 8, ZTREE_COLUMN_TYPES = 16
  integer(c_int32_t), parameter, public :: ZTREE_SO_DEFINITIONS = 4, ZTREE_SO_200C = 0, &
    ZTREE_SO_500C = 1, ZTREE_SO_200M = 2, ZTREE_SO_VIR = 3

  type, bind(C), public :: ztree_array
    type(c_ptr) :: data = c_null_ptr
    integer(c_int32_t) :: dtype = 0
    integer(c_int64_t) :: stride = 0
  end type

  type, bind(C), public :: ztree_particles
    !> sizeof the struct in this module's layout (checked by the library and by the tests).
    integer(c_size_t) :: struct_size = 240_c_size_t
    integer(c_int64_t) :: count = 0
    integer(c_int32_t) :: memory = 0
    type(ztree_array) :: pos(3)
    type(ztree_array) :: vel(3)
    type(ztree_array) :: mass
    type(ztree_array) :: ids
    !> Particle types (e.g. GADGET's PartType), read by jobs with a type_mask.
    type(ztree_array) :: types
  end type

  type, bind(C), public :: ztree_config
    !> Set by ztree_config_init.
    integer(c_size_t) :: struct_size
    integer(c_int32_t) :: dims, periodic
    real(c_double) :: box_size(3)
    integer(c_int32_t) :: threads, leaf_size, coarsening, top_target, super_group
    real(c_double) :: max_volume_factor, particle_mass
    integer(c_int64_t) :: memory_limit
  end type

  type, bind(C), public :: ztree_knn_params
    !> sizeof the struct in this module's layout (checked by the library and by the tests).
    integer(c_size_t) :: struct_size = 88_c_size_t
    integer(c_int32_t) :: k = 1
    integer(c_int32_t) :: outputs = 0   ! uint32_t bit mask in C
    integer(c_int32_t) :: order = 0
    type(ztree_array) :: scalar
    !> CUDA stream for device arrays (c_null_ptr: the default stream).
    type(c_ptr) :: cuda_stream = c_null_ptr
    !> Optional per-query guess of the k-th neighbour distance (e.g. the previous step's
    !> kth_distance output): a faster call, the same results whatever it holds.
    type(ztree_array) :: kth_hint
    !> Bit t selects sources (queries) of type t (particles%types); 0: all (uint32_t in C).
    integer(c_int32_t) :: source_type_mask = 0, query_type_mask = 0
  end type

  type, bind(C), public :: ztree_knn_output
    !> sizeof the struct in this module's layout (checked by the library and by the tests).
    integer(c_size_t) :: struct_size = 72_c_size_t
    type(c_ptr) :: indices = c_null_ptr, distances = c_null_ptr, kth_distance = c_null_ptr, &
                   density = c_null_ptr, scalar_mean = c_null_ptr, permutation = c_null_ptr
    integer(c_int64_t) :: n_queries = 0, padded_queries = 0
  end type

  type, bind(C), public :: ztree_halo
    integer(c_int64_t) :: tag, count
    real(c_double) :: mass, pos(3), vel(3), vel_dispersion, inertia_radius
  end type

  type, bind(C), public :: ztree_fof_params
    !> sizeof the struct in this module's layout (checked by the library and by the tests).
    integer(c_size_t) :: struct_size = 88_c_size_t
    real(c_double) :: linking_length = 0, b = 0
    integer(c_int32_t) :: min_members = 20, order = 0, members = 0
    !> MPI contexts: 0 = each halo on one rank; 1 = the whole catalogue on rank 0.
    integer(c_int32_t) :: gather = 0
    !> CUDA stream for device arrays (c_null_ptr: the default stream).
    type(c_ptr) :: cuda_stream = c_null_ptr
    !> Bit t selects particles of type t (particles%types); 0: all (uint32_t in C).
    integer(c_int32_t) :: type_mask = 0
    !> Halo property columns (ZTREE_COLUMN_* bits; uint32_t in C), G, Plummer softening,
    !> rho_crit and Omega_m at the step's scale factor (ztree_gadget_cosmology).
    integer(c_int32_t) :: columns = 0
    real(c_double) :: gravity_constant = 0, softening = 0, rho_crit = 0, omega_m = 0
  end type

  type, bind(C), public :: ztree_fof_output
    !> sizeof the struct in this module's layout (checked by the library and by the tests).
    integer(c_size_t) :: struct_size = 240_c_size_t
    type(c_ptr) :: labels = c_null_ptr
    integer(c_int64_t) :: n_halos = 0
    type(c_ptr) :: halos = c_null_ptr, member_offsets = c_null_ptr, member_indices = c_null_ptr
    real(c_double) :: linking_length = 0
    integer(c_int64_t) :: n_groups_total = 0
    !> Halo property columns (c_f_pointer with n_halos rows; c_null_ptr when not asked).
    type(c_ptr) :: centre_index = c_null_ptr, centre_pos = c_null_ptr, centre_potential = c_null_ptr, &
      most_bound_index = c_null_ptr, most_bound_energy = c_null_ptr, so_mass = c_null_ptr, &
      so_radius = c_null_ptr, vmax = c_null_ptr, r_vmax = c_null_ptr, angular_momentum = c_null_ptr, &
      spin = c_null_ptr, kinetic_energy = c_null_ptr, potential_energy = c_null_ptr, &
      vel_dispersion_1d = c_null_ptr, inertia = c_null_ptr, inertia_axes = c_null_ptr, &
      reduced_inertia = c_null_ptr, reduced_axes = c_null_ptr
    integer(c_int64_t) :: n_types = 0
    type(c_ptr) :: len_type = c_null_ptr, mass_type = c_null_ptr, offset_type = c_null_ptr
  end type

  type, bind(C), public :: ztree_dbscan_params
    !> sizeof the struct in this module's layout (checked by the library and by the tests).
    integer(c_size_t) :: struct_size = 104_c_size_t
    !> Give eps (absolute) or b (relative to the mean spacing), the other 0.
    real(c_double) :: eps = 0, b = 0
    integer(c_int32_t) :: min_pts = 10, min_members = 0, order = 0, members = 0
    !> ZTREE_DBSCAN_BORDER_NEAREST or ZTREE_DBSCAN_BORDER_NOISE (DBSCAN*).
    integer(c_int32_t) :: border = 0
    !> Non-zero: also return each point's class.
    integer(c_int32_t) :: classes = 0
    !> Bit t selects particles of type t (particles%types); 0: all (uint32_t in C).
    integer(c_int32_t) :: type_mask = 0
    !> MPI contexts: non-zero gathers the catalogue on rank 0.
    integer(c_int32_t) :: gather = 0
    !> The CUDA stream for device arrays (c_null_ptr: the default stream).
    type(c_ptr) :: cuda_stream = c_null_ptr
    !> Cluster property columns, as ztree_fof_params's.
    integer(c_int32_t) :: columns = 0
    real(c_double) :: gravity_constant = 0, softening = 0, rho_crit = 0, omega_m = 0
  end type

  type, bind(C), public :: ztree_cluster
    integer(c_int64_t) :: tag, count, core_count
    real(c_double) :: mass, pos(3), vel(3), vel_dispersion, inertia_radius, max_radius
  end type

  type, bind(C), public :: ztree_dbscan_output
    !> sizeof the struct in this module's layout (checked by the library and by the tests).
    integer(c_size_t) :: struct_size = 272_c_size_t
    type(c_ptr) :: labels = c_null_ptr, point_class = c_null_ptr
    integer(c_int64_t) :: n_clusters = 0
    type(c_ptr) :: clusters = c_null_ptr, member_offsets = c_null_ptr, member_indices = c_null_ptr
    real(c_double) :: eps = 0
    integer(c_int64_t) :: n_core = 0, n_border = 0, n_noise = 0, n_clusters_total = 0
    !> Cluster property columns, as ztree_fof_output's (n_clusters rows).
    type(c_ptr) :: centre_index = c_null_ptr, centre_pos = c_null_ptr, centre_potential = c_null_ptr, &
      most_bound_index = c_null_ptr, most_bound_energy = c_null_ptr, so_mass = c_null_ptr, &
      so_radius = c_null_ptr, vmax = c_null_ptr, r_vmax = c_null_ptr, angular_momentum = c_null_ptr, &
      spin = c_null_ptr, kinetic_energy = c_null_ptr, potential_energy = c_null_ptr, &
      vel_dispersion_1d = c_null_ptr, inertia = c_null_ptr, inertia_axes = c_null_ptr, &
      reduced_inertia = c_null_ptr, reduced_axes = c_null_ptr
    integer(c_int64_t) :: n_types = 0
    type(c_ptr) :: len_type = c_null_ptr, mass_type = c_null_ptr, offset_type = c_null_ptr
  end type

  type, bind(C), public :: ztree_radius_params
    !> sizeof the struct in this module's layout (checked by the library and by the tests).
    integer(c_size_t) :: struct_size = 96_c_size_t
    !> The radius of every query when radii is absent (d <= radius, inclusive).
    real(c_double) :: radius = 0
    !> Optional radius per query (e.g. the smoothing length).
    type(ztree_array) :: radii = ztree_array(c_null_ptr, 0, 0_c_int64_t)
    !> ZTREE_RADIUS_* bits (uint32_t in C).
    integer(c_int32_t) :: outputs = 0
    integer(c_int32_t) :: list_order = 0
    type(ztree_array) :: scalar = ztree_array(c_null_ptr, 0, 0_c_int64_t)
    !> Counts only: a count stops at this many; 0: exact counts.
    integer(c_int64_t) :: count_limit = 0
    !> Bit t selects sources / queries of type t; 0: all (uint32_t in C).
    integer(c_int32_t) :: source_type_mask = 0, query_type_mask = 0
    !> The CUDA stream for device arrays (c_null_ptr: the default stream).
    type(c_ptr) :: cuda_stream = c_null_ptr
  end type

  type, bind(C), public :: ztree_radius_output
    !> sizeof the struct in this module's layout (checked by the library and by the tests).
    integer(c_size_t) :: struct_size = 80_c_size_t
    type(c_ptr) :: counts = c_null_ptr, scalar_sum = c_null_ptr, scalar_mean = c_null_ptr, density = c_null_ptr
    !> Context-owned lists: query q's neighbours are indices(offsets(q)+1 : offsets(q+1)).
    type(c_ptr) :: offsets = c_null_ptr, indices = c_null_ptr, distances = c_null_ptr
    integer(c_int64_t) :: n_queries = 0, n_pairs = 0
  end type

  type, bind(C), public :: ztree_stats
    !> sizeof the struct in this module's layout (checked by the library and by the tests).
    integer(c_size_t) :: struct_size = 848_c_size_t
    integer(c_int32_t) :: n_stages
    character(kind=c_char) :: stage_name(16, 32)
    real(c_double) :: stage_seconds(32), total_seconds
    integer(c_int64_t) :: scratch_bytes, particles, queries, halos
    !> MPI contexts: bytes and messages this rank sent; particles it owned.
    integer(c_int64_t) :: bytes_sent, messages, owned
  end type

  public :: ztree_config_init, ztree_create, ztree_create_mpi, ztree_destroy, ztree_knn, &
            ztree_fof, ztree_get_stats, ztree_last_error, ztree_version, ztree_particles_xyz, &
            ztree_set_velocities, ztree_set_masses, ztree_set_ids, ztree_knn_bytes, ztree_fof_bytes, &
            ztree_f_knn_density, ztree_f_fof_labels, ztree_stage_name, ztree_cuda_device_count, &
            ztree_dbscan, ztree_dbscan_bytes, ztree_f_dbscan_labels, ztree_set_types, &
            ztree_radius, ztree_f_radius, ztree_gadget_cosmology

  interface
    !> CUDA devices ztree can use here (0 without a driver, a device or NVRTC 12 or 13).
    integer(c_int32_t) function ztree_cuda_device_count() bind(C, name="ztree_cuda_device_count")
      import :: c_int32_t
    end function
    integer(c_int) function c_config_init_size(cfg, size) bind(C, name="ztree_config_init_size")
      import :: c_int, c_size_t, ztree_config
      type(ztree_config), intent(out) :: cfg
      integer(c_size_t), value :: size
    end function
    integer(c_int) function ztree_create(cfg, ctx) bind(C, name="ztree_create")
      import :: c_int, c_ptr, ztree_config
      type(ztree_config), intent(in) :: cfg
      type(c_ptr), intent(out) :: ctx
    end function
    integer(c_int) function ztree_create_mpi(cfg, comm_f, ctx) bind(C, name="ztree_create_mpi")
      import :: c_int, c_int32_t, c_ptr, ztree_config
      type(ztree_config), intent(in) :: cfg
      integer(c_int32_t), value :: comm_f
      type(c_ptr), intent(out) :: ctx
    end function
    integer(c_int) function ztree_destroy(ctx) bind(C, name="ztree_destroy")
      import :: c_int, c_ptr
      type(c_ptr), value :: ctx
    end function
    integer(c_int) function ztree_knn(ctx, sources, queries, params, out) bind(C, name="ztree_knn")
      import :: c_int, c_ptr, ztree_particles, ztree_knn_params, ztree_knn_output
      type(c_ptr), value :: ctx
      type(ztree_particles), intent(in) :: sources
      type(c_ptr), value :: queries   ! c_null_ptr for a self-query, else c_loc(a ztree_particles)
      type(ztree_knn_params), intent(in) :: params
      type(ztree_knn_output), intent(inout) :: out
    end function
    integer(c_int) function ztree_fof(ctx, particles, params, out) bind(C, name="ztree_fof")
      import :: c_int, c_ptr, ztree_particles, ztree_fof_params, ztree_fof_output
      type(c_ptr), value :: ctx
      type(ztree_particles), intent(in) :: particles
      type(ztree_fof_params), intent(in) :: params
      type(ztree_fof_output), intent(inout) :: out
    end function
    !> G, comoving rho_crit(a) and Omega_m(a) in a GADGET run's internal units.
    integer(c_int) function ztree_gadget_cosmology(unit_length_in_cm, unit_mass_in_g, &
        unit_velocity_in_cm_per_s, omega0, omega_lambda, a, g, rho_crit, omega_m) &
        bind(C, name="ztree_gadget_cosmology")
      import :: c_int, c_double
      real(c_double), value :: unit_length_in_cm, unit_mass_in_g, unit_velocity_in_cm_per_s
      real(c_double), value :: omega0, omega_lambda, a
      real(c_double), intent(out) :: g, rho_crit, omega_m
    end function
    integer(c_int) function ztree_dbscan(ctx, particles, params, out) bind(C, name="ztree_dbscan")
      import :: c_int, c_ptr, ztree_particles, ztree_dbscan_params, ztree_dbscan_output
      type(c_ptr), value :: ctx
      type(ztree_particles), intent(in) :: particles
      type(ztree_dbscan_params), intent(in) :: params
      type(ztree_dbscan_output), intent(inout) :: out
    end function
    integer(c_int) function ztree_radius(ctx, sources, queries, params, out) bind(C, name="ztree_radius")
      import :: c_int, c_ptr, ztree_particles, ztree_radius_params, ztree_radius_output
      type(c_ptr), value :: ctx
      type(ztree_particles), intent(in) :: sources
      !> c_null_ptr for a self-query, or c_loc of a ztree_particles.
      type(c_ptr), value :: queries
      type(ztree_radius_params), intent(in) :: params
      type(ztree_radius_output), intent(inout) :: out
    end function
    integer(c_int) function ztree_dbscan_bytes(ctx, particles, params, out, bytes) bind(C, name="ztree_dbscan_bytes")
      import :: c_int, c_int64_t, c_ptr, ztree_particles, ztree_dbscan_params, ztree_dbscan_output
      type(c_ptr), value :: ctx
      type(ztree_particles), intent(in) :: particles
      type(ztree_dbscan_params), intent(in) :: params
      type(ztree_dbscan_output), intent(in) :: out
      integer(c_int64_t), intent(out) :: bytes
    end function
    integer(c_int) function ztree_knn_bytes(ctx, sources, queries, params, out, bytes) bind(C, name="ztree_knn_bytes")
      import :: c_int, c_int64_t, c_ptr, ztree_particles, ztree_knn_params, ztree_knn_output
      type(c_ptr), value :: ctx
      type(ztree_particles), intent(in) :: sources
      type(c_ptr), value :: queries
      type(ztree_knn_params), intent(in) :: params
      type(ztree_knn_output), intent(in) :: out
      integer(c_int64_t), intent(out) :: bytes
    end function
    integer(c_int) function ztree_fof_bytes(ctx, particles, params, out, bytes) bind(C, name="ztree_fof_bytes")
      import :: c_int, c_int64_t, c_ptr, ztree_particles, ztree_fof_params, ztree_fof_output
      type(c_ptr), value :: ctx
      type(ztree_particles), intent(in) :: particles
      type(ztree_fof_params), intent(in) :: params
      type(ztree_fof_output), intent(in) :: out
      integer(c_int64_t), intent(out) :: bytes
    end function
    integer(c_int) function ztree_get_stats(ctx, out) bind(C, name="ztree_get_stats")
      import :: c_int, c_ptr, ztree_stats
      type(c_ptr), value :: ctx
      type(ztree_stats), intent(out) :: out
    end function
    type(c_ptr) function c_last_error(ctx) bind(C, name="ztree_last_error")
      import :: c_ptr
      type(c_ptr), value :: ctx
    end function
    type(c_ptr) function c_version() bind(C, name="ztree_version")
      import :: c_ptr
    end function
    integer(c_size_t) function c_strlen(s) bind(C, name="strlen")
      import :: c_size_t, c_ptr
      type(c_ptr), value :: s
    end function
  end interface

  !> Particles from pos(3, n), real(4) or real(8), read in place.
  interface ztree_particles_xyz
    module procedure particles_xyz_f64, particles_xyz_f32
  end interface
  !> Velocities vel(3, n), real(4) or real(8) whatever the positions' kind.
  interface ztree_set_velocities
    module procedure set_velocities_f64, set_velocities_f32
  end interface
  !> Masses m(n), real(4) or real(8).
  interface ztree_set_masses
    module procedure set_masses_f64, set_masses_f32
  end interface
  !> Particle types(n), integer(1) (GADGET's PartType) or integer(4): jobs with a
  !> type_mask take the particles of the selected types only.
  interface ztree_set_types
    module procedure set_types_i8, set_types_i32
  end interface
  !> Particle ids(n), integer(4) or integer(8): FoF halo tags become minimum ids.
  interface ztree_set_ids
    module procedure set_ids_i64, set_ids_i32
  end interface
  !> kNN density of particles given as pos(3, n) (real(4) or real(8)) or as a
  !> ztree_particles with masses, velocities or ids attached.
  interface ztree_f_knn_density
    module procedure knn_density_particles, knn_density_f64, knn_density_f32
  end interface
  !> FoF halo tags of particles given as pos(3, n) (real(4) or real(8)) or as a
  !> ztree_particles (masses, velocities and ids then enter the catalogue).
  interface ztree_f_fof_labels
    module procedure fof_labels_particles, fof_labels_f64, fof_labels_f32
  end interface
  !> DBSCAN cluster tags (-1: noise) of particles given as pos(3, n) (real(4) or real(8))
  !> or as a ztree_particles; optionally each point's class and a copy of the catalogue.
  interface ztree_f_dbscan_labels
    module procedure dbscan_labels_particles, dbscan_labels_f64, dbscan_labels_f32
  end interface
  !> Radius self-query of particles given as pos(3, n) (real(4) or real(8)) or as a
  !> ztree_particles (with masses for the density): per particle the neighbours within
  !> radius (or within h(i), one radius each), itself included, and the SPH density.
  interface ztree_f_radius
    module procedure radius_particles, radius_f64, radius_f32
  end interface

contains

  !> The defaults of a configuration: 3D, open domain, unit box, all cores, jz-tree's tree
  !> parameters, particle mass 1. (The other types are initialised by their declaration.)
  integer(c_int) function ztree_config_init(cfg) result(ierr)
    type(ztree_config), intent(out) :: cfg
    ierr = c_config_init_size(cfg, c_sizeof(cfg))
  end function

  function c_to_f(s) result(f)
    type(c_ptr), intent(in) :: s
    character(len=:), allocatable :: f
    character(kind=c_char), pointer :: chars(:)
    integer :: n, i
    n = int(c_strlen(s))
    call c_f_pointer(s, chars, [n])
    allocate(character(len=n) :: f)
    do i = 1, n
      f(i:i) = chars(i)
    end do
  end function

  !> Message of the last failed call on ctx (c_null_ptr: on this thread).
  function ztree_last_error(ctx) result(msg)
    type(c_ptr), intent(in) :: ctx
    character(len=:), allocatable :: msg
    msg = c_to_f(c_last_error(ctx))
  end function

  function ztree_version() result(v)
    character(len=:), allocatable :: v
    v = c_to_f(c_version())
  end function

  !> Name of stage i (1-based) of a ztree_stats.
  function ztree_stage_name(st, i) result(name)
    type(ztree_stats), intent(in) :: st
    integer, intent(in) :: i
    character(len=:), allocatable :: name
    integer :: j
    name = ''
    do j = 1, 16
      if (st%stage_name(j, i) == c_null_char) exit
      name = name // st%stage_name(j, i)
    end do
  end function

  !> Particles from a pos(3, n) array (the usual Fortran layout), read in place.
  function particles_xyz_f64(pos) result(p)
    real(c_double), intent(in), target, contiguous :: pos(:, :)
    type(ztree_particles) :: p
    integer :: d
    p%count = size(pos, 2, kind=c_int64_t)
    p%memory = ZTREE_MEMORY_HOST
    do d = 1, 3
      if (size(pos, 2) > 0 .and. d <= size(pos, 1)) p%pos(d)%data = c_loc(pos(d, 1))
      p%pos(d)%dtype = ZTREE_DTYPE_F64
      p%pos(d)%stride = int(size(pos, 1), c_int64_t) * 8
    end do
  end function

  function particles_xyz_f32(pos) result(p)
    real(c_float), intent(in), target, contiguous :: pos(:, :)
    type(ztree_particles) :: p
    integer :: d
    p%count = size(pos, 2, kind=c_int64_t)
    p%memory = ZTREE_MEMORY_HOST
    do d = 1, 3
      if (size(pos, 2) > 0 .and. d <= size(pos, 1)) p%pos(d)%data = c_loc(pos(d, 1))
      p%pos(d)%dtype = ZTREE_DTYPE_F32
      p%pos(d)%stride = int(size(pos, 1), c_int64_t) * 4
    end do
  end function

  subroutine set_velocities_f64(p, vel)
    type(ztree_particles), intent(inout) :: p
    real(c_double), intent(in), target, contiguous :: vel(:, :)
    integer :: d
    do d = 1, 3
      p%vel(d) = ztree_array(c_null_ptr, ZTREE_DTYPE_F64, int(size(vel, 1), c_int64_t) * 8)
      if (size(vel, 2) > 0 .and. d <= size(vel, 1)) p%vel(d)%data = c_loc(vel(d, 1))
    end do
  end subroutine

  subroutine set_velocities_f32(p, vel)
    type(ztree_particles), intent(inout) :: p
    real(c_float), intent(in), target, contiguous :: vel(:, :)
    integer :: d
    do d = 1, 3
      p%vel(d) = ztree_array(c_null_ptr, ZTREE_DTYPE_F32, int(size(vel, 1), c_int64_t) * 4)
      if (size(vel, 2) > 0 .and. d <= size(vel, 1)) p%vel(d)%data = c_loc(vel(d, 1))
    end do
  end subroutine

  subroutine set_masses_f64(p, m)
    type(ztree_particles), intent(inout) :: p
    real(c_double), intent(in), target, contiguous :: m(:)
    p%mass = ztree_array(c_null_ptr, ZTREE_DTYPE_F64, 8)
    if (size(m) > 0) p%mass%data = c_loc(m(1))
  end subroutine

  subroutine set_masses_f32(p, m)
    type(ztree_particles), intent(inout) :: p
    real(c_float), intent(in), target, contiguous :: m(:)
    p%mass = ztree_array(c_null_ptr, ZTREE_DTYPE_F32, 4)
    if (size(m) > 0) p%mass%data = c_loc(m(1))
  end subroutine

  subroutine set_ids_i64(p, ids)
    type(ztree_particles), intent(inout) :: p
    integer(c_int64_t), intent(in), target, contiguous :: ids(:)
    p%ids = ztree_array(c_null_ptr, ZTREE_DTYPE_I64, 8)
    if (size(ids) > 0) p%ids%data = c_loc(ids(1))
  end subroutine

  subroutine set_types_i8(p, types)
    type(ztree_particles), intent(inout) :: p
    integer(c_int8_t), intent(in), target, contiguous :: types(:)
    p%types = ztree_array(c_null_ptr, ZTREE_DTYPE_U8, 1)
    if (size(types) > 0) p%types%data = c_loc(types(1))
  end subroutine

  subroutine set_types_i32(p, types)
    type(ztree_particles), intent(inout) :: p
    integer(c_int32_t), intent(in), target, contiguous :: types(:)
    p%types = ztree_array(c_null_ptr, ZTREE_DTYPE_I32, 4)
    if (size(types) > 0) p%types%data = c_loc(types(1))
  end subroutine

  subroutine set_ids_i32(p, ids)
    type(ztree_particles), intent(inout) :: p
    integer(c_int32_t), intent(in), target, contiguous :: ids(:)
    p%ids = ztree_array(c_null_ptr, ZTREE_DTYPE_I32, 4)
    if (size(ids) > 0) p%ids%data = c_loc(ids(1))
  end subroutine

  !> kNN density (k, or the neighbours' mass, over the volume of the k-ball) of every
  !> particle, and optionally the k-th neighbour distance.
  integer(c_int) function knn_density_particles(ctx, p, k, density, kth, kth_hint) result(ierr)
    type(c_ptr), intent(in) :: ctx
    type(ztree_particles), intent(in) :: p
    integer, intent(in) :: k
    real(c_double), intent(out), target :: density(:)
    real(c_double), intent(out), target, optional :: kth(:)
    real(c_double), intent(in), target, optional :: kth_hint(:)
    type(ztree_knn_params) :: prm
    type(ztree_knn_output) :: out
    prm%k = int(k, c_int32_t)
    prm%outputs = ZTREE_KNN_DENSITY
    if (size(density, kind=c_int64_t) < p%count) then
      ierr = ZTREE_ERR_SIZE
      return
    end if
    if (size(density) > 0) out%density = c_loc(density(1))
    if (present(kth)) then
      if (size(kth, kind=c_int64_t) < p%count) then
        ierr = ZTREE_ERR_SIZE
        return
      end if
      prm%outputs = ior(prm%outputs, ZTREE_KNN_KTH_DISTANCE)
      if (size(kth) > 0) out%kth_distance = c_loc(kth(1))
    end if
    if (present(kth_hint)) then
      if (size(kth_hint, kind=c_int64_t) < p%count) then
        ierr = ZTREE_ERR_SIZE
        return
      end if
      if (size(kth_hint) > 0) prm%kth_hint = ztree_array(c_loc(kth_hint(1)), ZTREE_DTYPE_F64, 0_c_int64_t)
    end if
    ierr = ztree_knn(ctx, p, c_null_ptr, prm, out)
  end function

  integer(c_int) function knn_density_f64(ctx, pos, k, density, kth, kth_hint) result(ierr)
    type(c_ptr), intent(in) :: ctx
    real(c_double), intent(in), target, contiguous :: pos(:, :)
    integer, intent(in) :: k
    real(c_double), intent(out), target :: density(:)
    real(c_double), intent(out), target, optional :: kth(:)
    real(c_double), intent(in), target, optional :: kth_hint(:)
    ierr = knn_density_particles(ctx, particles_xyz_f64(pos), k, density, kth, kth_hint)
  end function

  integer(c_int) function knn_density_f32(ctx, pos, k, density, kth, kth_hint) result(ierr)
    type(c_ptr), intent(in) :: ctx
    real(c_float), intent(in), target, contiguous :: pos(:, :)
    integer, intent(in) :: k
    real(c_double), intent(out), target :: density(:)
    real(c_double), intent(out), target, optional :: kth(:)
    real(c_double), intent(in), target, optional :: kth_hint(:)
    ierr = knn_density_particles(ctx, particles_xyz_f32(pos), k, density, kth, kth_hint)
  end function

  !> FoF halo tags (-1: in no halo). Give linking_length (absolute) or b (relative,
  !> periodic boxes), the other 0. Optionally a copy of the catalogue (GADGET order).
  integer(c_int) function fof_labels_particles(ctx, p, linking_length, b, min_members, labels, &
                                               n_halos, halos) result(ierr)
    type(c_ptr), intent(in) :: ctx
    type(ztree_particles), intent(in) :: p
    real(c_double), intent(in) :: linking_length, b
    integer, intent(in) :: min_members
    integer(c_int64_t), intent(out), target :: labels(:)
    integer(c_int64_t), intent(out) :: n_halos
    type(ztree_halo), allocatable, intent(out), optional :: halos(:)
    type(ztree_fof_params) :: prm
    type(ztree_fof_output) :: out
    type(ztree_halo), pointer :: h(:)
    n_halos = 0
    if (size(labels, kind=c_int64_t) < p%count) then
      ierr = ZTREE_ERR_SIZE
      return
    end if
    prm%linking_length = linking_length
    prm%b = b
    prm%min_members = int(min_members, c_int32_t)
    prm%order = ZTREE_CATALOGUE_GADGET
    if (size(labels) > 0) out%labels = c_loc(labels(1))
    ierr = ztree_fof(ctx, p, prm, out)
    if (ierr /= ZTREE_OK) return
    n_halos = out%n_halos
    if (present(halos)) then
      allocate(halos(n_halos))
      if (n_halos > 0) then
        call c_f_pointer(out%halos, h, [n_halos])
        halos = h
      end if
    end if
  end function

  integer(c_int) function fof_labels_f64(ctx, pos, linking_length, b, min_members, labels, &
                                         n_halos, halos) result(ierr)
    type(c_ptr), intent(in) :: ctx
    real(c_double), intent(in), target, contiguous :: pos(:, :)
    real(c_double), intent(in) :: linking_length, b
    integer, intent(in) :: min_members
    integer(c_int64_t), intent(out), target :: labels(:)
    integer(c_int64_t), intent(out) :: n_halos
    type(ztree_halo), allocatable, intent(out), optional :: halos(:)
    ierr = fof_labels_particles(ctx, particles_xyz_f64(pos), linking_length, b, min_members, labels, n_halos, halos)
  end function

  integer(c_int) function fof_labels_f32(ctx, pos, linking_length, b, min_members, labels, &
                                         n_halos, halos) result(ierr)
    type(c_ptr), intent(in) :: ctx
    real(c_float), intent(in), target, contiguous :: pos(:, :)
    real(c_double), intent(in) :: linking_length, b
    integer, intent(in) :: min_members
    integer(c_int64_t), intent(out), target :: labels(:)
    integer(c_int64_t), intent(out) :: n_halos
    type(ztree_halo), allocatable, intent(out), optional :: halos(:)
    ierr = fof_labels_particles(ctx, particles_xyz_f32(pos), linking_length, b, min_members, labels, n_halos, halos)
  end function

  !> DBSCAN: give eps (absolute) or b (relative, periodic boxes), the other 0; min_pts
  !> points within eps (itself included) make a point core. Clusters in GADGET order.
  integer(c_int) function dbscan_labels_particles(ctx, p, eps, b, min_pts, labels, n_clusters, &
                                                  point_class, clusters) result(ierr)
    type(c_ptr), intent(in) :: ctx
    type(ztree_particles), intent(in) :: p
    real(c_double), intent(in) :: eps, b
    integer, intent(in) :: min_pts
    integer(c_int64_t), intent(out), target :: labels(:)
    integer(c_int64_t), intent(out) :: n_clusters
    integer(c_int8_t), intent(out), target, optional :: point_class(:)
    type(ztree_cluster), allocatable, intent(out), optional :: clusters(:)
    type(ztree_dbscan_params) :: prm
    type(ztree_dbscan_output) :: out
    type(ztree_cluster), pointer :: c(:)
    n_clusters = 0
    if (size(labels, kind=c_int64_t) < p%count) then
      ierr = ZTREE_ERR_SIZE
      return
    end if
    prm%eps = eps
    prm%b = b
    prm%min_pts = int(min_pts, c_int32_t)
    prm%order = ZTREE_CATALOGUE_GADGET
    if (size(labels) > 0) out%labels = c_loc(labels(1))
    if (present(point_class)) then
      if (size(point_class, kind=c_int64_t) < p%count) then
        ierr = ZTREE_ERR_SIZE
        return
      end if
      prm%classes = 1
      if (size(point_class) > 0) out%point_class = c_loc(point_class(1))
    end if
    ierr = ztree_dbscan(ctx, p, prm, out)
    if (ierr /= ZTREE_OK) return
    n_clusters = out%n_clusters
    if (present(clusters)) then
      allocate(clusters(n_clusters))
      if (n_clusters > 0) then
        call c_f_pointer(out%clusters, c, [n_clusters])
        clusters = c
      end if
    end if
  end function

  integer(c_int) function dbscan_labels_f64(ctx, pos, eps, b, min_pts, labels, n_clusters, &
                                            point_class, clusters) result(ierr)
    type(c_ptr), intent(in) :: ctx
    real(c_double), intent(in), target, contiguous :: pos(:, :)
    real(c_double), intent(in) :: eps, b
    integer, intent(in) :: min_pts
    integer(c_int64_t), intent(out), target :: labels(:)
    integer(c_int64_t), intent(out) :: n_clusters
    integer(c_int8_t), intent(out), target, optional :: point_class(:)
    type(ztree_cluster), allocatable, intent(out), optional :: clusters(:)
    ierr = dbscan_labels_particles(ctx, particles_xyz_f64(pos), eps, b, min_pts, labels, n_clusters, point_class, clusters)
  end function

  integer(c_int) function dbscan_labels_f32(ctx, pos, eps, b, min_pts, labels, n_clusters, &
                                            point_class, clusters) result(ierr)
    type(c_ptr), intent(in) :: ctx
    real(c_float), intent(in), target, contiguous :: pos(:, :)
    real(c_double), intent(in) :: eps, b
    integer, intent(in) :: min_pts
    integer(c_int64_t), intent(out), target :: labels(:)
    integer(c_int64_t), intent(out) :: n_clusters
    integer(c_int8_t), intent(out), target, optional :: point_class(:)
    type(ztree_cluster), allocatable, intent(out), optional :: clusters(:)
    ierr = dbscan_labels_particles(ctx, particles_xyz_f32(pos), eps, b, min_pts, labels, n_clusters, point_class, clusters)
  end function

  !> counts(n) and density(n) (each optional) of the self-query within radius, or within
  !> h(i) when h is present (the SPH smoothing length: the kernel's support).
  integer(c_int) function radius_particles(ctx, p, radius, counts, density, h) result(ierr)
    type(c_ptr), intent(in) :: ctx
    type(ztree_particles), intent(in) :: p
    real(c_double), intent(in) :: radius
    integer(c_int64_t), intent(out), target, optional :: counts(:)
    real(c_double), intent(out), target, optional :: density(:)
    real(c_double), intent(in), target, optional :: h(:)
    type(ztree_radius_params) :: prm
    type(ztree_radius_output) :: out
    prm%radius = radius
    if (present(h)) then
      if (size(h, kind=c_int64_t) < p%count) then
        ierr = ZTREE_ERR_SIZE
        return
      end if
      if (size(h) > 0) prm%radii = ztree_array(c_loc(h(1)), ZTREE_DTYPE_F64, 0_c_int64_t)
    end if
    if (present(counts)) then
      if (size(counts, kind=c_int64_t) < p%count) then
        ierr = ZTREE_ERR_SIZE
        return
      end if
      prm%outputs = ior(prm%outputs, ZTREE_RADIUS_COUNTS)
      if (size(counts) > 0) out%counts = c_loc(counts(1))
    end if
    if (present(density)) then
      if (size(density, kind=c_int64_t) < p%count) then
        ierr = ZTREE_ERR_SIZE
        return
      end if
      prm%outputs = ior(prm%outputs, ZTREE_RADIUS_DENSITY)
      if (size(density) > 0) out%density = c_loc(density(1))
    end if
    ierr = ztree_radius(ctx, p, c_null_ptr, prm, out)
  end function

  integer(c_int) function radius_f64(ctx, pos, radius, counts, density, h) result(ierr)
    type(c_ptr), intent(in) :: ctx
    real(c_double), intent(in), target, contiguous :: pos(:, :)
    real(c_double), intent(in) :: radius
    integer(c_int64_t), intent(out), target, optional :: counts(:)
    real(c_double), intent(out), target, optional :: density(:)
    real(c_double), intent(in), target, optional :: h(:)
    ierr = radius_particles(ctx, particles_xyz_f64(pos), radius, counts, density, h)
  end function

  integer(c_int) function radius_f32(ctx, pos, radius, counts, density, h) result(ierr)
    type(c_ptr), intent(in) :: ctx
    real(c_float), intent(in), target, contiguous :: pos(:, :)
    real(c_double), intent(in) :: radius
    integer(c_int64_t), intent(out), target, optional :: counts(:)
    real(c_double), intent(out), target, optional :: density(:)
    real(c_double), intent(in), target, optional :: h(:)
    ierr = radius_particles(ctx, particles_xyz_f32(pos), radius, counts, density, h)
  end function

end module ztree
