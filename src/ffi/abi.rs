//! Structs that can grow: each struct passed by pointer starts with `struct_size`, the
//! `sizeof` of the struct in the header the caller compiled against. New fields are only
//! ever appended, so the library reads the fields a caller's layout has and gives every
//! later field its default; it writes (outputs, statistics) only those fields. A size that
//! matches no layout this library knows (an uninitialised struct, or one from a newer
//! header) is `ZTREE_ERR_INVALID_ARGUMENT` naming the struct. The `ztree_*_init`
//! functions of the header pass `sizeof` from the caller's header to the `*_init_size`
//! functions here.

use super::types::*;
use super::{Fail, fail, guard};
use crate::api::TreeParams;
use std::mem::size_of;
use ztree_status::*;

/// One layout a struct has had: its `sizeof` in the header that declared it, and the bytes
/// its fields occupy (the offset of the first field appended after it; tail padding is
/// not copied, since a later field may sit there).
#[derive(Clone, Copy)]
pub struct Layout {
    /// `sizeof` the struct.
    pub size: usize,
    /// Bytes of its fields.
    pub fields: usize,
}

/// The layout of the current header: everything.
const fn current<T>() -> Layout {
    Layout { size: size_of::<T>(), fields: size_of::<T>() }
}

/// A C struct with a leading `struct_size`.
pub trait Versioned: Copy + 'static {
    /// The struct's name in the header.
    const NAME: &'static str;
    /// Every layout the library reads, oldest first; the last is the current header's.
    const LAYOUTS: &'static [Layout];
    /// The defaults `ztree_<name>_init` fills in (with `struct_size` of the current layout).
    fn defaults() -> Self;
    /// The `struct_size` field.
    fn size(&self) -> usize;
    /// Sets the `struct_size` field.
    fn set_size(&mut self, size: usize);
}

fn layout_of<T: Versioned>(size: usize) -> Result<Layout, Fail> {
    match T::LAYOUTS.iter().find(|l| l.size == size) {
        Some(l) => Ok(*l),
        None => {
            let known: Vec<String> = T::LAYOUTS.iter().map(|l| l.size.to_string()).collect();
            Err(fail(
                ZTREE_ERR_INVALID_ARGUMENT,
                format!(
                    "{name}.struct_size is {size}, not the size of any {name} this library knows ({} bytes): initialise the struct with \
                     {name}_init (C; Fortran types are initialised by their declaration), or compile against this library's header",
                    known.join(" or "),
                    name = T::NAME
                ),
            ))
        }
    }
}

/// Reads the caller's struct: the fields its layout has, defaults for the rest; the value
/// keeps the caller's `struct_size`, so `write_out` writes back no more than it has.
///
/// # Safety
/// `p` is non-null and points to a readable struct that starts with a `usize`; if that
/// size is a known layout's, that many bytes are readable.
pub(crate) unsafe fn read_in<T: Versioned>(p: *const T) -> Result<T, Fail> {
    // SAFETY: every versioned struct starts with its size (checked by `layouts_match`).
    let size = unsafe { p.cast::<usize>().read_unaligned() };
    let layout = layout_of::<T>(size)?;
    let mut v = T::defaults();
    // SAFETY: the caller's struct has at least `layout.fields` bytes (its size says so);
    // `v` is a whole T, and every field of these plain-data structs takes any bits.
    unsafe { std::ptr::copy_nonoverlapping(p.cast::<u8>(), (&mut v as *mut T).cast::<u8>(), layout.fields) };
    v.set_size(size);
    Ok(v)
}

/// Writes `v` into the caller's struct: the fields of the caller's layout (`v.size()`, as
/// `read_in` left it, or checked by `write_new`).
///
/// # Safety
/// `p` points to a writable struct of at least the layout's `fields` bytes.
pub(crate) unsafe fn write_out<T: Versioned>(p: *mut T, v: &T) -> Result<(), Fail> {
    let layout = layout_of::<T>(v.size())?;
    // SAFETY: as documented; `v` is a whole T.
    unsafe { std::ptr::copy_nonoverlapping((v as *const T).cast::<u8>(), p.cast::<u8>(), layout.fields) };
    Ok(())
}

/// Fills the caller's struct of `size` bytes with the defaults.
fn init<T: Versioned>(p: *mut T, size: usize) -> ztree_status {
    guard(std::ptr::null_mut(), || {
        if p.is_null() {
            return Err(fail(ZTREE_ERR_NULL_POINTER, format!("{}_init: the struct pointer is NULL", T::NAME)));
        }
        let mut v = T::defaults();
        v.set_size(size);
        // SAFETY: checked non-null; the caller says the struct has `size` bytes (checked
        // against the known layouts by `write_out`).
        unsafe { write_out(p, &v) }
    })
}

macro_rules! versioned {
    ($t:ident, [$($old:expr),*], $defaults:expr) => {
        impl Versioned for $t {
            const NAME: &'static str = stringify!($t);
            const LAYOUTS: &'static [Layout] = &[$($old,)* current::<$t>()];
            fn defaults() -> Self {
                $defaults
            }
            fn size(&self) -> usize {
                self.struct_size
            }
            fn set_size(&mut self, size: usize) {
                self.struct_size = size;
            }
        }

    };
}

const NO_ARRAY: ztree_array = ztree_array { data: std::ptr::null(), dtype: ZTREE_DTYPE_NONE, stride: 0 };

/// The first layout of the growable ABI (library 0.3.0, tests/c/abi-0.3): `sizeof` and
/// the end of its last field, where the next field starts.
const fn first(size: usize) -> Layout {
    Layout { size, fields: size }
}

versioned!(
    ztree_particles,
    [first(216)],
    ztree_particles {
        struct_size: size_of::<Self>(),
        count: 0,
        memory: ZTREE_MEMORY_HOST,
        pos: [NO_ARRAY; 3],
        vel: [NO_ARRAY; 3],
        mass: NO_ARRAY,
        ids: NO_ARRAY,
        types: NO_ARRAY,
    }
);

versioned!(ztree_config, [], {
    let t = TreeParams::default();
    ztree_config {
        struct_size: size_of::<Self>(),
        dims: 3,
        periodic: 0,
        box_size: [1.0; 3],
        threads: 0,
        leaf_size: t.leaf_size as i32,
        coarsening: t.coarsening as i32,
        top_target: t.top_target as i32,
        super_group: t.super_group as i32,
        max_volume_factor: t.max_volume_factor,
        particle_mass: 1.0,
        memory_limit: 0,
    }
});

versioned!(
    ztree_knn_params,
    [first(80)],
    ztree_knn_params {
        struct_size: size_of::<Self>(),
        k: 0,
        outputs: 0,
        order: ZTREE_ORDER_INPUT,
        scalar: NO_ARRAY,
        cuda_stream: std::ptr::null_mut(),
        kth_hint: NO_ARRAY,
        source_type_mask: 0,
        query_type_mask: 0,
    }
);

versioned!(
    ztree_knn_output,
    [],
    ztree_knn_output {
        struct_size: size_of::<Self>(),
        indices: std::ptr::null_mut(),
        distances: std::ptr::null_mut(),
        kth_distance: std::ptr::null_mut(),
        density: std::ptr::null_mut(),
        scalar_mean: std::ptr::null_mut(),
        permutation: std::ptr::null_mut(),
        n_queries: 0,
        padded_queries: 0,
    }
);

versioned!(
    ztree_fof_params,
    [first(48), Layout { size: 56, fields: 52 }],
    ztree_fof_params {
        struct_size: size_of::<Self>(),
        linking_length: 0.0,
        b: 0.0,
        min_members: 0,
        order: ZTREE_CATALOGUE_ZORDER,
        members: 0,
        gather: 0,
        cuda_stream: std::ptr::null_mut(),
        type_mask: 0,
        columns: 0,
        gravity_constant: 0.0,
        softening: 0.0,
        rho_crit: 0.0,
        omega_m: 0.0,
    }
);

versioned!(
    ztree_fof_output,
    [first(std::mem::offset_of!(ztree_fof_output, centre_index))],
    ztree_fof_output {
        struct_size: size_of::<Self>(),
        labels: std::ptr::null_mut(),
        n_halos: 0,
        halos: std::ptr::null(),
        member_offsets: std::ptr::null(),
        member_indices: std::ptr::null(),
        linking_length: 0.0,
        n_groups_total: 0,
        centre_index: std::ptr::null(),
        centre_pos: std::ptr::null(),
        centre_potential: std::ptr::null(),
        most_bound_index: std::ptr::null(),
        most_bound_energy: std::ptr::null(),
        so_mass: std::ptr::null(),
        so_radius: std::ptr::null(),
        vmax: std::ptr::null(),
        r_vmax: std::ptr::null(),
        angular_momentum: std::ptr::null(),
        spin: std::ptr::null(),
        kinetic_energy: std::ptr::null(),
        potential_energy: std::ptr::null(),
        vel_dispersion_1d: std::ptr::null(),
        inertia: std::ptr::null(),
        inertia_axes: std::ptr::null(),
        reduced_inertia: std::ptr::null(),
        reduced_axes: std::ptr::null(),
        n_types: 0,
        len_type: std::ptr::null(),
        mass_type: std::ptr::null(),
        offset_type: std::ptr::null(),
    }
);

versioned!(ztree_stats, [], super::out::empty_stats());

versioned!(
    ztree_radius_params,
    [first(std::mem::offset_of!(ztree_radius_params, cuda_stream))],
    ztree_radius_params {
        struct_size: size_of::<Self>(),
        radius: 0.0,
        radii: NO_ARRAY,
        outputs: 0,
        list_order: ZTREE_LIST_BY_DISTANCE,
        scalar: NO_ARRAY,
        count_limit: 0,
        source_type_mask: 0,
        query_type_mask: 0,
        cuda_stream: std::ptr::null_mut(),
    }
);

versioned!(
    ztree_radius_output,
    [],
    ztree_radius_output {
        struct_size: size_of::<Self>(),
        counts: std::ptr::null_mut(),
        scalar_sum: std::ptr::null_mut(),
        scalar_mean: std::ptr::null_mut(),
        density: std::ptr::null_mut(),
        offsets: std::ptr::null(),
        indices: std::ptr::null(),
        distances: std::ptr::null(),
        n_queries: 0,
        n_pairs: 0,
    }
);

versioned!(
    ztree_dbscan_params,
    [first(std::mem::offset_of!(ztree_dbscan_params, cuda_stream)), first(std::mem::offset_of!(ztree_dbscan_params, columns))],
    ztree_dbscan_params {
        struct_size: size_of::<Self>(),
        eps: 0.0,
        b: 0.0,
        min_pts: 0,
        min_members: 0,
        order: ZTREE_CATALOGUE_ZORDER,
        members: 0,
        border: ZTREE_DBSCAN_BORDER_NEAREST,
        classes: 0,
        type_mask: 0,
        gather: 0,
        cuda_stream: std::ptr::null_mut(),
        columns: 0,
        gravity_constant: 0.0,
        softening: 0.0,
        rho_crit: 0.0,
        omega_m: 0.0,
    }
);

versioned!(
    ztree_dbscan_output,
    [first(std::mem::offset_of!(ztree_dbscan_output, centre_index))],
    ztree_dbscan_output {
        struct_size: size_of::<Self>(),
        labels: std::ptr::null_mut(),
        point_class: std::ptr::null_mut(),
        n_clusters: 0,
        clusters: std::ptr::null(),
        member_offsets: std::ptr::null(),
        member_indices: std::ptr::null(),
        eps: 0.0,
        n_core: 0,
        n_border: 0,
        n_noise: 0,
        n_clusters_total: 0,
        centre_index: std::ptr::null(),
        centre_pos: std::ptr::null(),
        centre_potential: std::ptr::null(),
        most_bound_index: std::ptr::null(),
        most_bound_energy: std::ptr::null(),
        so_mass: std::ptr::null(),
        so_radius: std::ptr::null(),
        vmax: std::ptr::null(),
        r_vmax: std::ptr::null(),
        angular_momentum: std::ptr::null(),
        spin: std::ptr::null(),
        kinetic_energy: std::ptr::null(),
        potential_energy: std::ptr::null(),
        vel_dispersion_1d: std::ptr::null(),
        inertia: std::ptr::null(),
        inertia_axes: std::ptr::null(),
        reduced_inertia: std::ptr::null(),
        reduced_axes: std::ptr::null(),
        n_types: 0,
        len_type: std::ptr::null(),
        mass_type: std::ptr::null(),
        offset_type: std::ptr::null(),
    }
);

/// Fills a `ztree_config` of `size` bytes (`sizeof` in the caller's header) with its
/// defaults. C and C++ callers use `ztree_config_init(&s)`, which passes the size.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_config_init_size(s: *mut ztree_config, size: usize) -> ztree_status {
    init(s, size)
}

/// Fills a `ztree_particles` of `size` bytes (`sizeof` in the caller's header) with its
/// defaults. C and C++ callers use `ztree_particles_init(&s)`, which passes the size.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_particles_init_size(s: *mut ztree_particles, size: usize) -> ztree_status {
    init(s, size)
}

/// Fills a `ztree_knn_params` of `size` bytes (`sizeof` in the caller's header) with its
/// defaults. C and C++ callers use `ztree_knn_params_init(&s)`, which passes the size.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_knn_params_init_size(s: *mut ztree_knn_params, size: usize) -> ztree_status {
    init(s, size)
}

/// Fills a `ztree_knn_output` of `size` bytes (`sizeof` in the caller's header) with its
/// defaults. C and C++ callers use `ztree_knn_output_init(&s)`, which passes the size.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_knn_output_init_size(s: *mut ztree_knn_output, size: usize) -> ztree_status {
    init(s, size)
}

/// Fills a `ztree_fof_params` of `size` bytes (`sizeof` in the caller's header) with its
/// defaults. C and C++ callers use `ztree_fof_params_init(&s)`, which passes the size.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_fof_params_init_size(s: *mut ztree_fof_params, size: usize) -> ztree_status {
    init(s, size)
}

/// Fills a `ztree_fof_output` of `size` bytes (`sizeof` in the caller's header) with its
/// defaults. C and C++ callers use `ztree_fof_output_init(&s)`, which passes the size.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_fof_output_init_size(s: *mut ztree_fof_output, size: usize) -> ztree_status {
    init(s, size)
}

/// Fills a `ztree_stats` of `size` bytes (`sizeof` in the caller's header) with its
/// defaults. C and C++ callers use `ztree_stats_init(&s)`, which passes the size.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_stats_init_size(s: *mut ztree_stats, size: usize) -> ztree_status {
    init(s, size)
}

/// Fills a `ztree_dbscan_params` of `size` bytes (`sizeof` in the caller's header) with
/// its defaults. C and C++ callers use `ztree_dbscan_params_init(&s)`.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_dbscan_params_init_size(s: *mut ztree_dbscan_params, size: usize) -> ztree_status {
    init(s, size)
}

/// Fills a `ztree_dbscan_output` of `size` bytes (`sizeof` in the caller's header) with
/// its defaults. C and C++ callers use `ztree_dbscan_output_init(&s)`.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_dbscan_output_init_size(s: *mut ztree_dbscan_output, size: usize) -> ztree_status {
    init(s, size)
}

/// Fills a `ztree_radius_params` of `size` bytes (`sizeof` in the caller's header) with
/// its defaults. C and C++ callers use `ztree_radius_params_init(&s)`.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_radius_params_init_size(s: *mut ztree_radius_params, size: usize) -> ztree_status {
    init(s, size)
}

/// Fills a `ztree_radius_output` of `size` bytes (`sizeof` in the caller's header) with
/// its defaults. C and C++ callers use `ztree_radius_output_init(&s)`.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_radius_output_init_size(s: *mut ztree_radius_output, size: usize) -> ztree_status {
    init(s, size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn layouts_ok<T: Versioned>() {
        let l = T::LAYOUTS;
        assert_eq!(l.last().unwrap().size, size_of::<T>(), "{}: the last layout is the current one", T::NAME);
        for w in l.windows(2) {
            assert!(w[0].size < w[1].size && w[0].fields <= w[0].size, "{}: layouts grow", T::NAME);
        }
        assert_eq!(T::defaults().size(), size_of::<T>());
    }

    #[test]
    fn layouts_match() {
        // `read_in` reads the size from offset 0 of every versioned struct.
        assert_eq!(std::mem::offset_of!(ztree_particles, struct_size), 0);
        assert_eq!(std::mem::offset_of!(ztree_config, struct_size), 0);
        assert_eq!(std::mem::offset_of!(ztree_knn_params, struct_size), 0);
        assert_eq!(std::mem::offset_of!(ztree_knn_output, struct_size), 0);
        assert_eq!(std::mem::offset_of!(ztree_fof_params, struct_size), 0);
        assert_eq!(std::mem::offset_of!(ztree_fof_output, struct_size), 0);
        assert_eq!(std::mem::offset_of!(ztree_stats, struct_size), 0);
        layouts_ok::<ztree_particles>();
        layouts_ok::<ztree_config>();
        layouts_ok::<ztree_knn_params>();
        layouts_ok::<ztree_knn_output>();
        layouts_ok::<ztree_fof_params>();
        layouts_ok::<ztree_fof_output>();
        layouts_ok::<ztree_stats>();
        layouts_ok::<ztree_dbscan_params>();
        layouts_ok::<ztree_dbscan_output>();
        layouts_ok::<ztree_radius_params>();
        layouts_ok::<ztree_radius_output>();
        // The first layouts end where the fields appended since start.
        assert_eq!(std::mem::offset_of!(ztree_particles, types), 216);
        assert_eq!(std::mem::offset_of!(ztree_fof_params, type_mask), 48);
        assert_eq!(std::mem::offset_of!(ztree_knn_params, source_type_mask), 80);
        assert_eq!(std::mem::offset_of!(ztree_dbscan_params, struct_size), 0);
        assert_eq!(std::mem::offset_of!(ztree_dbscan_output, struct_size), 0);
    }

    #[test]
    fn unknown_sizes_are_rejected_by_name() {
        let mut p = ztree_knn_params::defaults();
        for bad in [0usize, 8, size_of::<ztree_knn_params>() + 8] {
            p.struct_size = bad;
            // SAFETY: `p` is a whole struct.
            let e = unsafe { read_in(&p) }.unwrap_err();
            assert_eq!(e.status, ZTREE_ERR_INVALID_ARGUMENT);
            assert!(e.message.contains("ztree_knn_params.struct_size"), "{}", e.message);
        }
        assert_eq!(ztree_fof_output_init_size(&mut ztree_fof_output::defaults(), 12), ZTREE_ERR_INVALID_ARGUMENT);
        assert_eq!(ztree_fof_output_init_size(std::ptr::null_mut(), size_of::<ztree_fof_output>()), ZTREE_ERR_NULL_POINTER);
    }
}
