//! The C ABI's structs and constants (mirrored in include/ztree.h by cbindgen and in
//! include/ztree.f90 by hand). Integer fields stand in for enums on input so that no
//! value a C caller passes can be undefined behaviour.

use std::ffi::{c_char, c_void};

/// Element type of an array (`ztree_array::dtype`).
pub const ZTREE_DTYPE_NONE: i32 = 0;
/// 32-bit float.
pub const ZTREE_DTYPE_F32: i32 = 1;
/// 64-bit float.
pub const ZTREE_DTYPE_F64: i32 = 2;
/// 32-bit signed integer.
pub const ZTREE_DTYPE_I32: i32 = 3;
/// 64-bit signed integer.
pub const ZTREE_DTYPE_I64: i32 = 4;
/// 32-bit unsigned integer.
pub const ZTREE_DTYPE_U32: i32 = 5;
/// 64-bit unsigned integer (ids at most INT64_MAX).
pub const ZTREE_DTYPE_U64: i32 = 6;
/// 8-bit unsigned integer (particle types).
pub const ZTREE_DTYPE_U8: i32 = 7;

/// Memory space of particle arrays (`ztree_particles::memory`).
pub const ZTREE_MEMORY_HOST: i32 = 0;
/// CUDA device memory (the arrays of one device).
pub const ZTREE_MEMORY_CUDA_DEVICE: i32 = 1;

/// kNN outputs wanted (`ztree_knn_params::outputs`, a bit mask).
pub const ZTREE_KNN_INDICES: u32 = 1;
/// The neighbours' distances (`ztree_knn_output::distances`).
pub const ZTREE_KNN_DISTANCES: u32 = 2;
/// The distance to the k-th neighbour (`ztree_knn_output::kth_distance`).
pub const ZTREE_KNN_KTH_DISTANCE: u32 = 4;
/// k (or the neighbours' mass) over the k-ball's volume (`ztree_knn_output::density`).
pub const ZTREE_KNN_DENSITY: u32 = 8;
/// The mean of `ztree_knn_params::scalar` over the neighbours.
pub const ZTREE_KNN_SCALAR_MEAN: u32 = 16;
/// Which query each row is (`ztree_knn_output::permutation`, with `ZTREE_ORDER_ZORDER`).
pub const ZTREE_KNN_PERMUTATION: u32 = 32;

/// Row order of per-query outputs (`ztree_knn_params::order`).
pub const ZTREE_ORDER_INPUT: i32 = 0;
/// Rows in z-order (faster to write; `ZTREE_KNN_PERMUTATION` says which query each is).
pub const ZTREE_ORDER_ZORDER: i32 = 1;

/// Row order of the halo catalogue (`ztree_fof_params::order`).
pub const ZTREE_CATALOGUE_ZORDER: i32 = 0;
/// GADGET's order: member count descending, ties by tag.
pub const ZTREE_CATALOGUE_GADGET: i32 = 1;

/// Status of every call. `ztree_last_error` explains any status other than `ZTREE_OK`.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ztree_status {
    /// Success.
    ZTREE_OK = 0,
    /// A required pointer was NULL.
    ZTREE_ERR_NULL_POINTER = 1,
    /// An argument or parameter is invalid (k < 1, linking length <= 0, bad config, ...).
    ZTREE_ERR_INVALID_ARGUMENT = 2,
    /// A coordinate or field value is NaN or infinite.
    ZTREE_ERR_NON_FINITE = 3,
    /// A point lies outside the periodic box [0, L).
    ZTREE_ERR_OUTSIDE_BOX = 4,
    /// Counts or sizes are inconsistent or too large.
    ZTREE_ERR_SIZE = 5,
    /// An array has an element type that is not allowed there.
    ZTREE_ERR_DTYPE = 6,
    /// The request needs something this build or call does not provide (CUDA arrays,
    /// a second communicator feature, ...).
    #[allow(dead_code)] // returned by builds without MPI or CUDA
    ZTREE_ERR_UNSUPPORTED = 7,
    /// kNN with zero source particles.
    ZTREE_ERR_NO_SOURCES = 8,
    /// An internal error (a bug): the message says what; the handle stays usable.
    ZTREE_ERR_INTERNAL = 9,
    /// An MPI call failed, or the ranks disagree on the parameters of a collective call.
    ZTREE_ERR_MPI = 10,
    /// Another rank of the communicator reported an error in this collective call (its own
    /// status and message say which); nothing was computed on any rank.
    ZTREE_ERR_REMOTE = 11,
    /// Memory ran out, or the call would need more than `ztree_config::memory_limit`
    /// (the message says how much); nothing was changed.
    ZTREE_ERR_MEMORY = 12,
    /// CUDA device arrays were passed, but this process has no usable CUDA device (no
    /// driver, no device, or no NVRTC 12 or 13 to be found); the message says which.
    ZTREE_ERR_NO_DEVICE = 13,
    /// A CUDA call failed (launch, copy, kernel compilation); the message says which.
    ZTREE_ERR_DEVICE = 14,
}

/// A strided array of `count` elements, read in place and never written:
/// element `i` is at byte offset `i * stride` from `data`. `stride = 0` means packed
/// (the element size). Struct-of-arrays (`x[i]`) and array-of-structs
/// (`P[i].Pos[0]`, stride `sizeof(P[0])`) both work.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ztree_array {
    /// The first element (NULL: the array is absent).
    pub data: *const c_void,
    /// One of `ZTREE_DTYPE_*`.
    pub dtype: i32,
    /// Bytes between consecutive elements (>= 0; 0 = packed).
    pub stride: i64,
}

/// Particles as a caller holds them. Optional arrays have `data = NULL`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ztree_particles {
    /// Bytes of this struct as the caller's header declares it: set by `ztree_particles_init` (C) or
    /// by the Fortran type's default initialisation; checked by every call.
    pub struct_size: usize,
    /// Number of particles (>= 0).
    pub count: i64,
    /// `ZTREE_MEMORY_HOST`, or `ZTREE_MEMORY_CUDA_DEVICE` for device arrays (the CUDA
    /// back end; per-particle outputs then in device memory; `ZTREE_ERR_NO_DEVICE` where
    /// there is no GPU).
    pub memory: i32,
    /// Positions x, y, z (z unused in 2D): f32 or f64, all the same type.
    pub pos: [ztree_array; 3],
    /// Velocities (optional; same type as the positions): FoF catalogue velocities.
    pub vel: [ztree_array; 3],
    /// Masses (optional; f32 or f64): kNN mass density, FoF catalogue masses.
    pub mass: ztree_array,
    /// Particle ids (optional; i32, i64, u32 or u64): FoF halo tags are minimum ids.
    pub ids: ztree_array,
    /// Particle types (optional; u8, i32, u32 or i64, e.g. GADGET's PartType 0-5), read
    /// when a job's type mask is not 0: a particle takes part when bit `type` of the mask
    /// is set (types outside 0-31 never do).
    pub types: ztree_array,
}

/// Configuration of a context (fill with `ztree_config_default`, then change fields).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ztree_config {
    /// Bytes of this struct as the caller's header declares it: set by `ztree_config_init` (C) or
    /// by the Fortran type's default initialisation; checked by every call.
    pub struct_size: usize,
    /// 2 or 3.
    pub dims: i32,
    /// 0: open domain (bounding box); 1: periodic box `[0, box_size[d])`.
    pub periodic: i32,
    /// Periodic box lengths (finite, > 0; the third unused in 2D). Ignored when open.
    pub box_size: [f64; 3],
    /// Worker threads; 0 = `OMP_NUM_THREADS` when set, else the cores this process may run
    /// on (its affinity mask and cgroup quota).
    pub threads: i32,
    /// Tree shape: leaf size 0 (automatic: 96 for kNN with k >= 2, 48 for k = 1, 64 for
    /// FoF, on the CPU and the GPU; results never depend on it), coarsening 8, top target
    /// 2048, super group 32.
    pub leaf_size: i32,
    /// Capacity ratio of consecutive planes.
    pub coarsening: i32,
    /// Stop coarsening at about this many top nodes.
    pub top_target: i32,
    /// Top nodes grouped per super node of the walk's start.
    pub super_group: i32,
    /// Regularisation: split nodes larger than this many times the volume of typical
    /// dense nodes (20); 0 turns it off.
    pub max_volume_factor: f64,
    /// Mass of every particle when `ztree_particles::mass` is not given (1): FoF halo
    /// masses and the kNN mass density.
    pub particle_mass: f64,
    /// Most bytes one call may allocate (scratch plus context-owned outputs, as
    /// `ztree_knn_bytes`/`ztree_fof_bytes` estimate them); a call that would need more
    /// returns `ZTREE_ERR_MEMORY` before allocating. 0 = no limit.
    pub memory_limit: i64,
}

/// Parameters of `ztree_knn`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ztree_knn_params {
    /// Bytes of this struct as the caller's header declares it: set by `ztree_knn_params_init` (C) or
    /// by the Fortran type's default initialisation; checked by every call.
    pub struct_size: usize,
    /// Neighbours per query (>= 1; more than the sources pads rows with -1 / +inf).
    pub k: i32,
    /// Which outputs to compute: `ZTREE_KNN_*` bits.
    pub outputs: u32,
    /// `ZTREE_ORDER_INPUT` or `ZTREE_ORDER_ZORDER` (rows in z-order; ask for
    /// `ZTREE_KNN_PERMUTATION` to learn which query each row is).
    pub order: i32,
    /// Per-source scalar (f32 or f64) averaged over the neighbours for
    /// `ZTREE_KNN_SCALAR_MEAN`.
    pub scalar: ztree_array,
    /// The CUDA stream (`cudaStream_t` / `CUstream`) device work is queued on when the
    /// particles are device arrays; NULL: the default stream. Ignored for host arrays.
    /// The call waits for the stream before it returns (its outputs are then ready, and
    /// its scratch memory handed back).
    pub cuda_stream: *mut c_void,
    /// Optional (`data = NULL`: none), f32 or f64, one per query in input order: a guess
    /// of each query's k-th neighbour distance, typically the previous step's
    /// `kth_distance` output. The search starts within it and widens where it holds fewer
    /// than k sources, so the results are the same whatever it holds (values that are not
    /// finite and positive mean "no guess"); a close guess makes the call faster. Read by
    /// host calls, serial or distributed (ranks may differ in giving one); device calls
    /// ignore it.
    pub kth_hint: ztree_array,
    /// The sources taking part: bit t selects type t of `sources.types`; 0: all.
    pub source_type_mask: u32,
    /// The queries taking part (of `queries.types`, or of `sources.types` in a
    /// self-query); 0: all. A query left out keeps its row, not computed: indices -1,
    /// distances +inf, density and mean NaN. Masks need `ZTREE_ORDER_INPUT` (device
    /// arrays: staged through host memory).
    pub query_type_mask: u32,
}

/// Outputs of `ztree_knn`. For each output requested in `ztree_knn_params::outputs`:
/// pass a caller array of the right size, or NULL to have the context provide one (valid
/// until the next call on the context); on return the pointer says where the results are.
/// A pointer the context returned before means the context's buffer again, so an output
/// struct can be reused without resetting it. Outputs not requested are left alone.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ztree_knn_output {
    /// Bytes of this struct as the caller's header declares it: set by `ztree_knn_output_init` (C) or
    /// by the Fortran type's default initialisation; checked by every call.
    pub struct_size: usize,
    /// `n_queries * k` source indices (input order), nearest first; -1 pads.
    pub indices: *mut i64,
    /// `n_queries * k` distances, ascending; +inf pads.
    pub distances: *mut f64,
    /// `n_queries` distances to the k-th neighbour (+inf when fewer than k sources).
    pub kth_distance: *mut f64,
    /// `n_queries` densities: k (or the neighbours' mass) over the volume of the k-ball.
    pub density: *mut f64,
    /// `n_queries` means of `ztree_knn_params::scalar` over the neighbours.
    pub scalar_mean: *mut f64,
    /// `n_queries` input indices of the query in each row (with `ZTREE_ORDER_ZORDER`).
    pub permutation: *mut i64,
    /// Out: number of queries (rows).
    pub n_queries: i64,
    /// Out: queries with fewer than k neighbours.
    pub padded_queries: i64,
}

/// One halo of the FoF catalogue.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ztree_halo {
    /// Minimum particle id of the group (or smallest input index without ids).
    pub tag: i64,
    /// Member count.
    pub count: i64,
    /// Total mass.
    pub mass: f64,
    /// Centre of mass (inside the periodic box).
    pub pos: [f64; 3],
    /// Mass-weighted mean velocity (0 without velocities).
    pub vel: [f64; 3],
    /// Velocity dispersion sqrt(<|v - v_mean|^2>_m) (0 without velocities).
    pub vel_dispersion: f64,
    /// sqrt(<|x - x_cm|^2>_m).
    pub inertia_radius: f64,
}

/// Parameters of `ztree_fof`. Give exactly one of `linking_length` (absolute) and `b`
/// (relative: b * (V/N)^(1/dims), periodic boxes only); the other must be 0.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ztree_fof_params {
    /// Bytes of this struct as the caller's header declares it: set by `ztree_fof_params_init` (C) or
    /// by the Fortran type's default initialisation; checked by every call.
    pub struct_size: usize,
    /// Absolute linking length (> 0), or 0 to use `b`.
    pub linking_length: f64,
    /// Linking length relative to the mean spacing (> 0), or 0 to use `linking_length`.
    pub b: f64,
    /// Smallest group that gets a tag and a catalogue row (>= 1; GADGET 32, HACC 20).
    pub min_members: i32,
    /// `ZTREE_CATALOGUE_ZORDER` or `ZTREE_CATALOGUE_GADGET` (count descending).
    pub order: i32,
    /// Non-zero: also return each halo's members.
    pub members: i32,
    /// MPI contexts: 0 = each halo is returned by exactly one rank (the one holding its
    /// first particle in z-order); non-zero = the whole catalogue on rank 0 (other ranks
    /// get none). Ignored by serial contexts.
    pub gather: i32,
    /// The CUDA stream for device arrays (see `ztree_knn_params::cuda_stream`).
    pub cuda_stream: *mut c_void,
    /// The particles taking part: bit t selects type t of `ztree_particles::types`; 0: all.
    /// The others get label -1 and are in no halo; indices stay input indices (device
    /// arrays: staged through host memory).
    pub type_mask: u32,
    /// Halo property columns to compute (`ZTREE_COLUMN_*` bits; 0: the `ztree_halo` rows
    /// only); they come back in `ztree_fof_output`. Serial contexts (device arrays are
    /// staged through host memory).
    pub columns: u32,
    /// The gravitational constant in the caller's units (> 0 with the centre, most bound
    /// and dynamics columns; `ztree_gadget_cosmology` gives GADGET's).
    pub gravity_constant: f64,
    /// Plummer softening length of the potential (>= 0).
    pub softening: f64,
    /// The critical density at the step's scale factor, in the units of the positions and
    /// masses (comoving positions: comoving density; > 0 with `ZTREE_COLUMN_SO`).
    pub rho_crit: f64,
    /// Ω_m at the step's scale factor (> 0 with `ZTREE_COLUMN_SO`).
    pub omega_m: f64,
}

/// `ztree_fof_params::columns`: the potential-minimum member (`centre_*` outputs).
pub const ZTREE_COLUMN_CENTRE: u32 = 1;
/// The most bound member, `φ + |v - v_mean|²/2` lowest (`most_bound_*`; needs velocities).
pub const ZTREE_COLUMN_MOST_BOUND: u32 = 2;
/// Spherical overdensities around the potential minimum (`so_mass`, `so_radius`).
pub const ZTREE_COLUMN_SO: u32 = 4;
/// v_max, angular momentum, spin, energies, σ_1D and shape (needs velocities).
pub const ZTREE_COLUMN_DYNAMICS: u32 = 8;
/// Count, mass and group-ordered offset per particle type (needs `ztree_particles::types`).
pub const ZTREE_COLUMN_TYPES: u32 = 16;
/// SO definitions per halo in `so_mass` / `so_radius`, in this order: 200 ρ_crit, 500 ρ_crit,
/// 200 ρ_mean, the Bryan & Norman virial overdensity (GADGET-4's TopHat200).
pub const ZTREE_SO_DEFINITIONS: i32 = 4;
/// Index of M_200c in a `so_mass` row.
pub const ZTREE_SO_200C: i32 = 0;
/// Index of M_500c.
pub const ZTREE_SO_500C: i32 = 1;
/// Index of M_200m.
pub const ZTREE_SO_200M: i32 = 2;
/// Index of M_vir.
pub const ZTREE_SO_VIR: i32 = 3;

/// Outputs of `ztree_fof`. `labels`: a caller array of `count` entries, or NULL to use a
/// context-owned one (a `labels` pointer the context returned before counts as NULL).
/// Everything else is context-owned and valid until the next call; with `members`,
/// `member_offsets` always has `n_halos + 1` entries, and no pointer dangles, even with no
/// particles or no halos.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ztree_fof_output {
    /// Bytes of this struct as the caller's header declares it: set by `ztree_fof_output_init` (C) or
    /// by the Fortran type's default initialisation; checked by every call.
    pub struct_size: usize,
    /// Per particle (input order): its halo's tag, or -1.
    pub labels: *mut i64,
    /// Out: number of catalogue rows returned on this rank.
    pub n_halos: i64,
    /// Out: `n_halos` rows (context-owned).
    pub halos: *const ztree_halo,
    /// With `members`: halo h's members (input indices, ascending) are
    /// `member_indices[member_offsets[h] .. member_offsets[h + 1]]`.
    pub member_offsets: *const i64,
    /// See `member_offsets`.
    pub member_indices: *const i64,
    /// The absolute linking length used.
    pub linking_length: f64,
    /// Connected components including singletons.
    pub n_groups_total: i64,
    /// `ZTREE_COLUMN_CENTRE`: per halo, the input index of the member with the lowest
    /// potential among the members (HACC `fof_halo_center`, GADGET-4 `GroupPos` with
    /// SUBFIND); NULL when not asked for. Every column is context-owned, `n_halos` rows.
    pub centre_index: *const i64,
    /// Its position (3 per row, as given; 2-D contexts: z = 0).
    pub centre_pos: *const f64,
    /// Its potential `-G Σ_j m_j / sqrt(r² + ε²)` over the other members.
    pub centre_potential: *const f64,
    /// `ZTREE_COLUMN_MOST_BOUND`: the input index of the most bound member.
    pub most_bound_index: *const i64,
    /// Its `φ + |v - v_mean|² / 2`.
    pub most_bound_energy: *const f64,
    /// `ZTREE_COLUMN_SO`: `ZTREE_SO_DEFINITIONS` masses per row, every particle within the
    /// radius counted (0 where not found: fewer than 5 particles inside).
    pub so_mass: *const f64,
    /// The radii, as `so_mass`.
    pub so_radius: *const f64,
    /// `ZTREE_COLUMN_DYNAMICS`: peak circular velocity of the members' mass profile
    /// about the potential minimum.
    pub vmax: *const f64,
    /// Where it peaks.
    pub r_vmax: *const f64,
    /// Angular momentum about the centre in the halo's frame (3 per row).
    pub angular_momentum: *const f64,
    /// Bullock's spin λ' (M and R: M_200c and R_200c with `ZTREE_COLUMN_SO`, else the
    /// members' mass and farthest distance).
    pub spin: *const f64,
    /// Kinetic energy in the halo's frame.
    pub kinetic_energy: *const f64,
    /// Potential energy `½ Σ_i m_i φ_i` among the members (direct sums up to 16384
    /// members, relative error below 1e-5; a monopole tree walk above, below 1e-3).
    pub potential_energy: *const f64,
    /// One-dimensional velocity dispersion.
    pub vel_dispersion_1d: *const f64,
    /// Eigenvalues of the inertia tensor per unit mass, descending (3 per row).
    pub inertia: *const f64,
    /// Their unit eigenvectors (9 per row: vector k at `[9 h + 3 k ..]`).
    pub inertia_axes: *const f64,
    /// The reduced (1/r²-weighted) tensor's eigenvalues (3 per row).
    pub reduced_inertia: *const f64,
    /// Its eigenvectors (9 per row).
    pub reduced_axes: *const f64,
    /// `ZTREE_COLUMN_TYPES`: entries per row of the per-type columns (the largest type
    /// among the members, plus one).
    pub n_types: i64,
    /// Members per type (GADGET-4 `GroupLenType`), `n_types` per row.
    pub len_type: *const i64,
    /// Their mass (`GroupMassType`).
    pub mass_type: *const f64,
    /// Members of the type in the rows before (`GroupOffsetType`).
    pub offset_type: *const i64,
}

/// Most stages `ztree_stats` reports.
pub const ZTREE_MAX_STAGES: usize = 32;

/// Statistics of the last call on a context.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ztree_stats {
    /// Bytes of this struct as the caller's header declares it: set by `ztree_stats_init` (C) or
    /// by the Fortran type's default initialisation; checked by every call.
    pub struct_size: usize,
    /// Stages reported in `stage_name` and `stage_seconds`.
    pub n_stages: i32,
    /// NUL-terminated stage names ("sort", "tree", "walk", ...).
    pub stage_name: [[c_char; 16]; ZTREE_MAX_STAGES],
    /// Wall-clock seconds of each stage.
    pub stage_seconds: [f64; ZTREE_MAX_STAGES],
    /// Wall-clock seconds of the whole call.
    pub total_seconds: f64,
    /// Bytes of ztree's own buffers for the call (excluding outputs).
    pub scratch_bytes: i64,
    /// Particles (sources) of the call on this rank.
    pub particles: i64,
    /// Queries of the call on this rank (kNN).
    pub queries: i64,
    /// Catalogue rows returned on this rank (FoF).
    pub halos: i64,
    /// MPI contexts: bytes and point-to-point messages this rank sent in the call
    /// (0 for serial contexts), and the particles it owned after the decomposition.
    pub bytes_sent: i64,
    /// See `bytes_sent`.
    pub messages: i64,
    /// See `bytes_sent`.
    pub owned: i64,
}

/// Border points of `ztree_dbscan` (`ztree_dbscan_params::border`): in the cluster of
/// their nearest core point (ties: the smaller index).
pub const ZTREE_DBSCAN_BORDER_NEAREST: i32 = 0;
/// Border points are noise (DBSCAN*); their class stays `ZTREE_POINT_BORDER`.
pub const ZTREE_DBSCAN_BORDER_NOISE: i32 = 1;

/// Point classes of `ztree_dbscan_output::point_class`: no core point within ε.
pub const ZTREE_POINT_NOISE: i8 = 0;
/// Not core, with a core point within ε.
pub const ZTREE_POINT_BORDER: i8 = 1;
/// At least `min_pts` points within ε (itself included).
pub const ZTREE_POINT_CORE: i8 = 2;

/// Parameters of `ztree_dbscan`. Give exactly one of `eps` (absolute) and `b` (relative:
/// b * (V/N)^(1/dims), periodic boxes only), the other 0, as FoF's linking length.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ztree_dbscan_params {
    /// Bytes of this struct as the caller's header declares it: set by
    /// `ztree_dbscan_params_init` (C) or by the Fortran type's default initialisation.
    pub struct_size: usize,
    /// ε, absolute (> 0), or 0 to use `b`. The test is inclusive (`d <= ε`), as FoF's.
    pub eps: f64,
    /// ε relative to the mean spacing (> 0), or 0 to use `eps`.
    pub b: f64,
    /// Points within ε (the point itself included) that make a point core (>= 1; HACC's
    /// galaxies: 10; 2 gives FoF's groups).
    pub min_pts: i32,
    /// Smallest cluster that gets a tag and a catalogue row (0 or 1: every cluster).
    pub min_members: i32,
    /// `ZTREE_CATALOGUE_ZORDER` or `ZTREE_CATALOGUE_GADGET` (count descending).
    pub order: i32,
    /// Non-zero: also return each cluster's members.
    pub members: i32,
    /// `ZTREE_DBSCAN_BORDER_NEAREST` (0) or `ZTREE_DBSCAN_BORDER_NOISE` (DBSCAN*).
    pub border: i32,
    /// Non-zero: also return each point's class (`ztree_dbscan_output::point_class`).
    pub classes: i32,
    /// The particles taking part: bit t selects type t of `ztree_particles::types`; 0: all.
    /// The others get label -1 and class noise, and are in no cluster.
    pub type_mask: u32,
    /// MPI contexts: non-zero gathers the whole catalogue on rank 0 (others get none);
    /// 0 leaves each cluster on the rank that passed its first core point.
    pub gather: i32,
    /// The CUDA stream for device arrays (see `ztree_knn_params::cuda_stream`).
    pub cuda_stream: *mut c_void,
    /// Cluster property columns, as `ztree_fof_params::columns` (serial contexts): over each
    /// cluster's members (core and border points), SO counting every particle of the call.
    pub columns: u32,
    /// As `ztree_fof_params::gravity_constant`.
    pub gravity_constant: f64,
    /// As `ztree_fof_params::softening`.
    pub softening: f64,
    /// As `ztree_fof_params::rho_crit`.
    pub rho_crit: f64,
    /// As `ztree_fof_params::omega_m`.
    pub omega_m: f64,
}

/// One cluster of the DBSCAN catalogue: the FoF columns and two of its own.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct ztree_cluster {
    /// Minimum particle id of the members (or smallest input index without ids).
    pub tag: i64,
    /// Member count (core and border points).
    pub count: i64,
    /// Core points among the members.
    pub core_count: i64,
    /// Total mass.
    pub mass: f64,
    /// Centre of mass (inside the periodic box).
    pub pos: [f64; 3],
    /// Mass-weighted mean velocity (0 without velocities).
    pub vel: [f64; 3],
    /// Velocity dispersion sqrt(<|v - v_mean|^2>_m) (0 without velocities).
    pub vel_dispersion: f64,
    /// sqrt(<|x - x_cm|^2>_m).
    pub inertia_radius: f64,
    /// Distance from the centre of mass to the farthest member.
    pub max_radius: f64,
}

/// Outputs of `ztree_dbscan`. `labels` and (with `classes`) `point_class`: caller arrays
/// of `count` entries, or NULL for context-owned ones (a pointer the context returned
/// before counts as NULL). Everything else is context-owned and valid until the next
/// call; with `members`, `member_offsets` always has `n_clusters + 1` entries.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ztree_dbscan_output {
    /// Bytes of this struct as the caller's header declares it: set by
    /// `ztree_dbscan_output_init` (C) or by the Fortran type's default initialisation.
    pub struct_size: usize,
    /// Per particle (input order): its cluster's tag, or -1 (noise, or a cluster below
    /// `min_members`).
    pub labels: *mut i64,
    /// With `classes`: per particle, `ZTREE_POINT_NOISE`, `_BORDER` or `_CORE`.
    pub point_class: *mut i8,
    /// Out: number of catalogue rows.
    pub n_clusters: i64,
    /// Out: `n_clusters` rows (context-owned).
    pub clusters: *const ztree_cluster,
    /// With `members`: cluster c's members (input indices, ascending) are
    /// `member_indices[member_offsets[c] .. member_offsets[c + 1]]`.
    pub member_offsets: *const i64,
    /// See `member_offsets`.
    pub member_indices: *const i64,
    /// Out: the absolute ε used.
    pub eps: f64,
    /// Out: core, border and noise points, and clusters of any size.
    pub n_core: i64,
    /// See `n_core`.
    pub n_border: i64,
    /// See `n_core`.
    pub n_noise: i64,
    /// See `n_core`.
    pub n_clusters_total: i64,
    /// The columns of `ztree_dbscan_params::columns`, as `ztree_fof_output`'s (per cluster,
    /// `n_clusters` rows; NULL when not asked for): the potential-minimum member.
    pub centre_index: *const i64,
    /// Its position (3 per row, as given; 2-D contexts: z = 0).
    pub centre_pos: *const f64,
    /// Its potential `-G Σ_j m_j / sqrt(r² + ε²)` over the other members.
    pub centre_potential: *const f64,
    /// `ZTREE_COLUMN_MOST_BOUND`: the input index of the most bound member.
    pub most_bound_index: *const i64,
    /// Its `φ + |v - v_mean|² / 2`.
    pub most_bound_energy: *const f64,
    /// `ZTREE_COLUMN_SO`: `ZTREE_SO_DEFINITIONS` masses per row, every particle within the
    /// radius counted (0 where not found: fewer than 5 particles inside).
    pub so_mass: *const f64,
    /// The radii, as `so_mass`.
    pub so_radius: *const f64,
    /// `ZTREE_COLUMN_DYNAMICS`: peak circular velocity of the members' mass profile
    /// about the potential minimum.
    pub vmax: *const f64,
    /// Where it peaks.
    pub r_vmax: *const f64,
    /// Angular momentum about the centre in the halo's frame (3 per row).
    pub angular_momentum: *const f64,
    /// Bullock's spin λ' (M and R: M_200c and R_200c with `ZTREE_COLUMN_SO`, else the
    /// members' mass and farthest distance).
    pub spin: *const f64,
    /// Kinetic energy in the halo's frame.
    pub kinetic_energy: *const f64,
    /// Potential energy `½ Σ_i m_i φ_i` among the members (direct sums up to 16384
    /// members, relative error below 1e-5; a monopole tree walk above, below 1e-3).
    pub potential_energy: *const f64,
    /// One-dimensional velocity dispersion.
    pub vel_dispersion_1d: *const f64,
    /// Eigenvalues of the inertia tensor per unit mass, descending (3 per row).
    pub inertia: *const f64,
    /// Their unit eigenvectors (9 per row: vector k at `[9 h + 3 k ..]`).
    pub inertia_axes: *const f64,
    /// The reduced (1/r²-weighted) tensor's eigenvalues (3 per row).
    pub reduced_inertia: *const f64,
    /// Its eigenvectors (9 per row).
    pub reduced_axes: *const f64,
    /// `ZTREE_COLUMN_TYPES`: entries per row of the per-type columns (the largest type
    /// among the members, plus one).
    pub n_types: i64,
    /// Members per type (GADGET-4 `GroupLenType`), `n_types` per row.
    pub len_type: *const i64,
    /// Their mass (`GroupMassType`).
    pub mass_type: *const f64,
    /// Members of the type in the rows before (`GroupOffsetType`).
    pub offset_type: *const i64,
}

/// `ztree_radius_params::outputs`: neighbours within the radius per query.
pub const ZTREE_RADIUS_COUNTS: u32 = 1;
/// The neighbour lists (CSR, context-owned).
pub const ZTREE_RADIUS_LISTS: u32 = 2;
/// With the lists: each entry's distance.
pub const ZTREE_RADIUS_DISTANCES: u32 = 4;
/// Sum of `ztree_radius_params::scalar` over the neighbours.
pub const ZTREE_RADIUS_SCALAR_SUM: u32 = 8;
/// Its mean (NaN for a query without neighbours).
pub const ZTREE_RADIUS_SCALAR_MEAN: u32 = 16;
/// SPH density: the sources' masses weighted by the cubic spline of support h = the
/// query's radius.
pub const ZTREE_RADIUS_DENSITY: u32 = 32;

/// `ztree_radius_params::list_order`: nearest first, equal distances by source index.
pub const ZTREE_LIST_BY_DISTANCE: i32 = 0;
/// Ascending source index.
pub const ZTREE_LIST_BY_INDEX: i32 = 1;

/// Parameters of `ztree_radius`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ztree_radius_params {
    /// Bytes of this struct as the caller's header declares it: set by
    /// `ztree_radius_params_init` (C) or by the Fortran type's default initialisation.
    pub struct_size: usize,
    /// The radius of every query (finite, >= 0) when `radii` is absent. A source is a
    /// neighbour when its distance is `<= radius` (FoF's inclusive f64 test).
    pub radius: f64,
    /// Optional (`data = NULL`: `radius` for all), f32 or f64, one per query in input
    /// order (finite, >= 0): e.g. the SPH smoothing length.
    pub radii: ztree_array,
    /// Which outputs to compute: `ZTREE_RADIUS_*` bits.
    pub outputs: u32,
    /// `ZTREE_LIST_BY_DISTANCE` or `ZTREE_LIST_BY_INDEX`.
    pub list_order: i32,
    /// Per-source scalar (f32 or f64) for `ZTREE_RADIUS_SCALAR_SUM` / `_MEAN`.
    pub scalar: ztree_array,
    /// Counts only: a count stops at this many (`min(true count, count_limit)`), so dense
    /// regions cost less (e.g. "at least min_pts neighbours"); 0: exact counts.
    pub count_limit: i64,
    /// The sources taking part, by type (bit t: type t of `sources.types`); 0: all.
    pub source_type_mask: u32,
    /// The queries taking part, by type (of `queries.types`, or the sources' in a
    /// self-query); 0: all. A query left out gets count -1, NaN sums, means and density,
    /// and an empty list.
    pub query_type_mask: u32,
    /// The CUDA stream for device arrays (see `ztree_knn_params::cuda_stream`).
    pub cuda_stream: *mut c_void,
}

/// Outputs of `ztree_radius`. Per-query arrays (`counts`, `scalar_sum`, `scalar_mean`,
/// `density`; input order) for the outputs requested: a caller array of `n_queries`
/// entries, or NULL for a context-owned one (a pointer the context returned before counts
/// as NULL). The lists are context-owned, valid until the next call on the context:
/// query q's neighbours (source input indices) are `indices[offsets[q] .. offsets[q + 1]]`.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct ztree_radius_output {
    /// Bytes of this struct as the caller's header declares it: set by
    /// `ztree_radius_output_init` (C) or by the Fortran type's default initialisation.
    pub struct_size: usize,
    /// Neighbours per query (a self-query counts the point itself).
    pub counts: *mut i64,
    /// Sum of the scalar over each query's neighbours (0 without any).
    pub scalar_sum: *mut f64,
    /// Mean of the scalar over each query's neighbours (NaN without any).
    pub scalar_mean: *mut f64,
    /// SPH density per query: `sum_j m_j W(r_ij, h)`, h the query's radius (masses from
    /// `sources.mass`, else `ztree_config::particle_mass`).
    pub density: *mut f64,
    /// With `ZTREE_RADIUS_LISTS`: `n_queries + 1` offsets into `indices` (context-owned).
    pub offsets: *const i64,
    /// `n_pairs` source input indices (context-owned).
    pub indices: *const i64,
    /// With `ZTREE_RADIUS_DISTANCES`: the distance of each entry (context-owned).
    pub distances: *const f64,
    /// Out: number of queries.
    pub n_queries: i64,
    /// Out: (query, source) pairs within the radius.
    pub n_pairs: i64,
}
