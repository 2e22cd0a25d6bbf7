//! The halo property columns of `ztree_fof` (`ztree_fof_params::columns`): their argument
//! checks, their computation over the FoF catalogue, their context-owned buffers, and
//! `ztree_gadget_cosmology` (G, ρ_crit and Ω_m in GADGET's internal units).

use super::input::Strided;
use super::out::reserve;
use super::types::*;
use super::{Fail, fail, guard};
use crate::fof::{Catalogue, FofFields};
use crate::geom::Real;
use crate::halo::{Gravity, HaloColumns, HaloProperties, HaloRequest};
use crate::input::{Domain, PointSource};
use ztree_status::*;

// The header's SO indices are the places of the definitions in `Overdensity::ALL`, the
// order of `HaloProperties::so` and of each `so_mass` row.
const _: () = {
    use crate::halo::Overdensity;
    assert!(ZTREE_SO_DEFINITIONS as usize == Overdensity::ALL.len());
    assert!(matches!(Overdensity::ALL[ZTREE_SO_200C as usize], Overdensity::Crit200));
    assert!(matches!(Overdensity::ALL[ZTREE_SO_500C as usize], Overdensity::Crit500));
    assert!(matches!(Overdensity::ALL[ZTREE_SO_200M as usize], Overdensity::Mean200));
    assert!(matches!(Overdensity::ALL[ZTREE_SO_VIR as usize], Overdensity::Virial));
};

/// Every column bit.
const ALL_COLUMNS: u32 = ZTREE_COLUMN_CENTRE | ZTREE_COLUMN_MOST_BOUND | ZTREE_COLUMN_SO | ZTREE_COLUMN_DYNAMICS | ZTREE_COLUMN_TYPES;

/// Bytes per particle and per catalogue row the columns may take beyond the catalogue:
/// member lists and each halo's unwrapped copy (positions, masses, energies, its tree),
/// the SO search's neighbour lists; the columns themselves, the per-type ones at 32 types.
pub(crate) const BYTES_PER_PARTICLE: usize = 160;
pub(crate) const BYTES_PER_ROW: usize = 8 * 48 + 24 * 32;

/// The columns asked for, checked: what `Context::halo_properties` needs.
pub(crate) struct Asked {
    pub columns: HaloColumns,
    pub gravity: Gravity,
    pub rho_crit: f64,
    pub omega_m: f64,
    /// The particle types (`ZTREE_COLUMN_TYPES`).
    pub types: Option<Strided>,
}

/// The column parameters, as `ztree_fof_params` and `ztree_dbscan_params` both carry them.
#[derive(Clone, Copy)]
pub(crate) struct ColumnParams {
    pub columns: u32,
    pub gravity_constant: f64,
    pub softening: f64,
    pub rho_crit: f64,
    pub omega_m: f64,
}

macro_rules! column_params {
    ($prm:expr) => {
        $crate::ffi::halo::ColumnParams {
            columns: $prm.columns,
            gravity_constant: $prm.gravity_constant,
            softening: $prm.softening,
            rho_crit: $prm.rho_crit,
            omega_m: $prm.omega_m,
        }
    };
}
pub(crate) use column_params;

impl ColumnParams {
    /// What the ranks of a call agree on.
    pub(crate) fn words(&self) -> [u64; 5] {
        [self.columns as u64, self.gravity_constant.to_bits(), self.softening.to_bits(), self.rho_crit.to_bits(), self.omega_m.to_bits()]
    }
}

/// Checks the column parameters (`None`: no columns).
pub(crate) fn check(p: &ztree_particles, prm: &ColumnParams, n: usize, has_vel: bool, distributed: bool) -> Result<Option<Asked>, Fail> {
    let bad = |m: String| Err(fail(ZTREE_ERR_INVALID_ARGUMENT, m));
    let c = prm.columns;
    if c == 0 {
        return Ok(None);
    }
    if c & !ALL_COLUMNS != 0 {
        return bad(format!("columns: unknown bits {:#x} (the ZTREE_COLUMN_* bits are {ALL_COLUMNS:#x})", c & !ALL_COLUMNS));
    }
    if distributed {
        return Err(fail(ZTREE_ERR_UNSUPPORTED, "columns: halo property columns are computed on serial contexts only".to_string()));
    }
    let columns = HaloColumns {
        centre: c & ZTREE_COLUMN_CENTRE != 0,
        most_bound: c & ZTREE_COLUMN_MOST_BOUND != 0,
        so: c & ZTREE_COLUMN_SO != 0,
        dynamics: c & ZTREE_COLUMN_DYNAMICS != 0,
        types: c & ZTREE_COLUMN_TYPES != 0,
    };
    if columns.needs_centres() && !(prm.gravity_constant.is_finite() && prm.gravity_constant > 0.0) {
        return bad(format!("gravity_constant must be finite and > 0 for these columns (got {})", prm.gravity_constant));
    }
    if !(prm.softening.is_finite() && prm.softening >= 0.0) {
        return bad(format!("softening must be finite and >= 0 (got {})", prm.softening));
    }
    if columns.so {
        for (name, v) in [("rho_crit", prm.rho_crit), ("omega_m", prm.omega_m)] {
            if !(v.is_finite() && v > 0.0) {
                return bad(format!("{name} must be finite and > 0 with ZTREE_COLUMN_SO (got {v})"));
            }
        }
    }
    if (columns.most_bound || columns.dynamics) && !has_vel && n > 0 {
        return Err(fail(ZTREE_ERR_NULL_POINTER, "particles.vel is NULL, but the most bound and dynamics columns need velocities".to_string()));
    }
    let types = if columns.types {
        if p.types.data.is_null() && n > 0 {
            return Err(fail(ZTREE_ERR_NULL_POINTER, "particles.types is NULL, but ZTREE_COLUMN_TYPES needs the types".to_string()));
        }
        let t = Strided::new(&p.types, n, "particles.types", &[ZTREE_DTYPE_U8, ZTREE_DTYPE_I32, ZTREE_DTYPE_U32, ZTREE_DTYPE_I64], false)?;
        Some(t.unwrap_or(Strided::empty(ZTREE_DTYPE_U8)))
    } else {
        None
    };
    Ok(Some(Asked {
        columns,
        gravity: Gravity { g: if columns.needs_centres() { prm.gravity_constant } else { 1.0 }, softening: prm.softening },
        rho_crit: prm.rho_crit,
        omega_m: prm.omega_m,
        types,
    }))
}

/// The columns of the halos of `cat` (which has member lists).
pub(crate) fn compute<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    ctx: &crate::Context,
    dom: &Domain<D>,
    points: &P,
    fields: &FofFields<'_, D>,
    cat: &Catalogue<D>,
    asked: &Asked,
) -> crate::Result<HaloProperties<D>> {
    let request = HaloRequest {
        columns: asked.columns,
        gravity: asked.gravity,
        rho_crit: asked.rho_crit,
        omega_m: asked.omega_m,
        types: asked.types.as_ref().map(|t| t as &dyn crate::input::ParticleIds),
    };
    ctx.halo_properties(dom, points, fields, cat, &request)
}

/// The columns' context-owned buffers.
#[derive(Default)]
pub(crate) struct ColumnBuffers {
    centre_index: Vec<i64>,
    centre_pos: Vec<f64>,
    centre_potential: Vec<f64>,
    most_bound_index: Vec<i64>,
    most_bound_energy: Vec<f64>,
    so_mass: Vec<f64>,
    so_radius: Vec<f64>,
    vmax: Vec<f64>,
    r_vmax: Vec<f64>,
    angular_momentum: Vec<f64>,
    spin: Vec<f64>,
    kinetic_energy: Vec<f64>,
    potential_energy: Vec<f64>,
    vel_dispersion_1d: Vec<f64>,
    inertia: Vec<f64>,
    inertia_axes: Vec<f64>,
    reduced_inertia: Vec<f64>,
    reduced_axes: Vec<f64>,
    len_type: Vec<i64>,
    mass_type: Vec<f64>,
    offset_type: Vec<i64>,
}

/// `src` into `buf` (reserved fallibly for its exact length), its pointer, or NULL when
/// the column was not computed.
fn put<V: Copy>(buf: &mut Vec<V>, (len, src): (usize, impl Iterator<Item = V>), asked: bool, what: &str) -> Result<*const V, Fail> {
    buf.clear();
    if !asked {
        return Ok(std::ptr::null());
    }
    reserve(buf, len, what)?;
    buf.extend(src);
    Ok(buf.as_ptr())
}

/// Vectors of D components as 3 per row (z = 0 in 2-D).
fn xyz<const D: usize>(v: &[f64; D]) -> [f64; 3] {
    std::array::from_fn(|d| if d < D { v[d] } else { 0.0 })
}

/// A D×D matrix's rows as 3×3 (the unused entries 0).
fn xyz9<const D: usize>(m: &[[f64; D]; D]) -> [f64; 9] {
    std::array::from_fn(|k| if k / 3 < D && k % 3 < D { m[k / 3][k % 3] } else { 0.0 })
}

/// The columns' pointers, as both output structs carry them (`set_columns!`).
#[derive(Clone, Copy)]
pub(crate) struct ColumnPointers {
    pub centre_index: *const i64,
    pub centre_pos: *const f64,
    pub centre_potential: *const f64,
    pub most_bound_index: *const i64,
    pub most_bound_energy: *const f64,
    pub so_mass: *const f64,
    pub so_radius: *const f64,
    pub vmax: *const f64,
    pub r_vmax: *const f64,
    pub angular_momentum: *const f64,
    pub spin: *const f64,
    pub kinetic_energy: *const f64,
    pub potential_energy: *const f64,
    pub vel_dispersion_1d: *const f64,
    pub inertia: *const f64,
    pub inertia_axes: *const f64,
    pub reduced_inertia: *const f64,
    pub reduced_axes: *const f64,
    pub n_types: i64,
    pub len_type: *const i64,
    pub mass_type: *const f64,
    pub offset_type: *const i64,
}

impl Default for ColumnPointers {
    fn default() -> Self {
        Self {
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
    }
}

/// Copies a `ColumnPointers` into an output struct with the same fields.
macro_rules! set_columns {
    ($o:expr, $c:expr) => {{
        let c: $crate::ffi::halo::ColumnPointers = $c;
        $o.centre_index = c.centre_index;
        $o.centre_pos = c.centre_pos;
        $o.centre_potential = c.centre_potential;
        $o.most_bound_index = c.most_bound_index;
        $o.most_bound_energy = c.most_bound_energy;
        $o.so_mass = c.so_mass;
        $o.so_radius = c.so_radius;
        $o.vmax = c.vmax;
        $o.r_vmax = c.r_vmax;
        $o.angular_momentum = c.angular_momentum;
        $o.spin = c.spin;
        $o.kinetic_energy = c.kinetic_energy;
        $o.potential_energy = c.potential_energy;
        $o.vel_dispersion_1d = c.vel_dispersion_1d;
        $o.inertia = c.inertia;
        $o.inertia_axes = c.inertia_axes;
        $o.reduced_inertia = c.reduced_inertia;
        $o.reduced_axes = c.reduced_axes;
        $o.n_types = c.n_types;
        $o.len_type = c.len_type;
        $o.mass_type = c.mass_type;
        $o.offset_type = c.offset_type;
    }};
}
pub(crate) use set_columns;

/// The computed columns into the buffers, and their pointers (the columns not asked for
/// NULL).
pub(crate) fn hand_over<const D: usize>(b: &mut ColumnBuffers, props: Option<(&HaloProperties<D>, HaloColumns)>) -> Result<ColumnPointers, Fail> {
    let mut o = ColumnPointers::default();
    let empty = HaloProperties::<D>::default();
    let (h, cols) = props.unwrap_or((&empty, HaloColumns::default()));
    let c = &h.centres;
    let (centre, mbp, so, dy) = (cols.centre, cols.most_bound, cols.so, cols.dynamics);
    o.centre_index = put(&mut b.centre_index, (c.potential_min.len(), c.potential_min.iter().copied()), centre, "the centre column")?;
    o.centre_pos = put(&mut b.centre_pos, (c.potential_min_pos.len() * 3, c.potential_min_pos.iter().flat_map(xyz)), centre, "the centre column")?;
    o.centre_potential = put(&mut b.centre_potential, (c.potential.len(), c.potential.iter().copied()), centre, "the centre column")?;
    o.most_bound_index = put(&mut b.most_bound_index, (c.most_bound.len(), c.most_bound.iter().copied()), mbp, "the most bound column")?;
    o.most_bound_energy =
        put(&mut b.most_bound_energy, (c.most_bound_energy.len(), c.most_bound_energy.iter().copied()), mbp, "the most bound column")?;
    let (rows, defs) = (h.so.first().map_or(0, |s| s.mass.len()), h.so.len().max(1));
    let so_at = |f: fn(&crate::halo::SoColumn) -> &Vec<f64>| (0..rows * h.so.len()).map(move |k| f(&h.so[k % defs])[k / defs]);
    o.so_mass = put(&mut b.so_mass, (rows * h.so.len(), so_at(|s| &s.mass)), so, "the SO columns")?;
    o.so_radius = put(&mut b.so_radius, (rows * h.so.len(), so_at(|s| &s.radius)), so, "the SO columns")?;
    let d = &h.dynamics;
    o.vmax = put(&mut b.vmax, (d.len(), d.iter().map(|x| x.vmax)), dy, "the dynamics columns")?;
    o.r_vmax = put(&mut b.r_vmax, (d.len(), d.iter().map(|x| x.r_vmax)), dy, "the dynamics columns")?;
    o.angular_momentum = put(&mut b.angular_momentum, (d.len() * 3, d.iter().flat_map(|x| x.angular_momentum)), dy, "the dynamics columns")?;
    o.spin = put(&mut b.spin, (d.len(), d.iter().map(|x| x.spin)), dy, "the dynamics columns")?;
    o.kinetic_energy = put(&mut b.kinetic_energy, (d.len(), d.iter().map(|x| x.kinetic_energy)), dy, "the dynamics columns")?;
    o.potential_energy = put(&mut b.potential_energy, (h.potential_energy.len(), h.potential_energy.iter().copied()), dy, "the dynamics columns")?;
    o.vel_dispersion_1d = put(&mut b.vel_dispersion_1d, (d.len(), d.iter().map(|x| x.sigma_1d)), dy, "the dynamics columns")?;
    o.inertia = put(&mut b.inertia, (d.len() * 3, d.iter().flat_map(|x| xyz(&x.inertia))), dy, "the dynamics columns")?;
    o.inertia_axes = put(&mut b.inertia_axes, (d.len() * 9, d.iter().flat_map(|x| xyz9(&x.inertia_axes))), dy, "the dynamics columns")?;
    o.reduced_inertia = put(&mut b.reduced_inertia, (d.len() * 3, d.iter().flat_map(|x| xyz(&x.reduced_inertia))), dy, "the dynamics columns")?;
    o.reduced_axes = put(&mut b.reduced_axes, (d.len() * 9, d.iter().flat_map(|x| xyz9(&x.reduced_axes))), dy, "the dynamics columns")?;
    let t = h.types.as_ref().filter(|_| cols.types);
    o.n_types = t.map_or(0, |t| t.n_types as i64);
    o.len_type =
        put(&mut b.len_type, (t.map_or(0, |t| t.count.len()), t.map_or(&[][..], |t| &t.count).iter().copied()), t.is_some(), "the per-type columns")?;
    o.mass_type =
        put(&mut b.mass_type, (t.map_or(0, |t| t.mass.len()), t.map_or(&[][..], |t| &t.mass).iter().copied()), t.is_some(), "the per-type columns")?;
    o.offset_type = put(
        &mut b.offset_type,
        (t.map_or(0, |t| t.offset.len()), t.map_or(&[][..], |t| &t.offset).iter().copied()),
        t.is_some(),
        "the per-type columns",
    )?;
    Ok(o)
}

/// G, the critical density and Ω_m at scale factor `a` in the internal units of a GADGET
/// (or AREPO) run: its `UnitLength_in_cm`, `UnitMass_in_g` and `UnitVelocity_in_cm_per_s`
/// (h inside the units, as GADGET's parameter files give them), `Omega0` and
/// `OmegaLambda`. `rho_crit` is comoving (ρ_crit(a) a³), for comoving positions, as
/// GADGET-4's SO masses are computed; G and H from GADGET-4's cgs constants. Any output
/// pointer may be NULL.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_gadget_cosmology(
    unit_length_in_cm: f64,
    unit_mass_in_g: f64,
    unit_velocity_in_cm_per_s: f64,
    omega0: f64,
    omega_lambda: f64,
    a: f64,
    g: *mut f64,
    rho_crit: *mut f64,
    omega_m: *mut f64,
) -> ztree_status {
    guard(std::ptr::null_mut(), || {
        let c = crate::halo::gadget_cosmology(unit_length_in_cm, unit_mass_in_g, unit_velocity_in_cm_per_s, omega0, omega_lambda, a)
            .map_err(|e| fail(ZTREE_ERR_INVALID_ARGUMENT, format!("ztree_gadget_cosmology: {e}")))?;
        for (p, v) in [(g, c.g), (rho_crit, c.rho_crit), (omega_m, c.omega_m)] {
            if !p.is_null() {
                // SAFETY: a non-null output pointer points to a writable double (documented).
                unsafe { p.write(v) };
            }
        }
        Ok(())
    })
}

#[cfg(test)]
#[path = "halo_tests.rs"]
mod tests;
