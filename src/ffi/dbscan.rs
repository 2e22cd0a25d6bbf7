//! `ztree_dbscan` and `ztree_dbscan_bytes`: argument checks, the agreement on MPI
//! contexts, dispatch on dimension and element type, and the hand-over of the catalogue.

use super::input::{
    Strided, StridedPoints, StridedVectors, config_words, count_of, domain, length_or_b, null, pos_dtype, positions, presence, select, types_of,
    vectors,
};
use super::out::{Bytes, Proposal, agree_args, dest, fill_stats, reserve};
use super::types::*;
use super::{Fail, abi, fail, guard, ztree_context};
use crate::dbscan::{BorderPoints, DbscanCatalogue, DbscanParams, DbscanStats, PointClass};
use crate::fof::{CatalogueOrder, FofFields, LinkingLength};
use crate::geom::Real;
use crate::input::{ParticleIds, ScalarField, VectorField};
use ztree_status::*;

/// Scratch bytes per particle beyond inputs and outputs: the core counts and the border
/// points' lists (fewer than min_pts entries each, and an offset) come on top.
const SCRATCH_PER_PARTICLE: usize = 128;

// The header's class values are the Rust enum's.
const _: () = assert!(
    PointClass::Noise as i8 == ZTREE_POINT_NOISE && PointClass::Border as i8 == ZTREE_POINT_BORDER && PointClass::Core as i8 == ZTREE_POINT_CORE
);

/// DBSCAN clusters of `particles` (definitions: docs/c-api.md): per particle a cluster tag
/// or -1, optionally its class, and the catalogue of clusters. Results are the same for
/// any thread count. Collective on an MPI context: labels and classes equal one serial
/// call's on the ranks' particles concatenated in rank order (tags and member lists are
/// global indices); each cluster's row is on the rank that passed its first core point,
/// or all on rank 0 with `gather`. Device arrays: computed on their device on serial
/// contexts (labels and classes in device memory, the catalogue on the host), staged
/// through host memory on MPI contexts and with a type mask.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ztree_dbscan(
    ctx: *mut ztree_context,
    particles: *const ztree_particles,
    params: *const ztree_dbscan_params,
    out: *mut ztree_dbscan_output,
) -> ztree_status {
    // SAFETY: the pointers are checked in `entry`.
    guard(ctx, || unsafe { entry(ctx, particles, params, out, None) })
}

/// The bytes `ztree_dbscan` with these arguments would allocate (scratch, the kNN rows of
/// the core test, context-owned labels and classes, the catalogue at its largest and the
/// member lists): an upper estimate, the number `ztree_config::memory_limit` is compared
/// with. Checks the arguments like `ztree_dbscan`; computes nothing; not collective.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ztree_dbscan_bytes(
    ctx: *mut ztree_context,
    particles: *const ztree_particles,
    params: *const ztree_dbscan_params,
    out: *const ztree_dbscan_output,
    bytes: *mut i64,
) -> ztree_status {
    guard(ctx, || {
        if bytes.is_null() {
            return Err(null("ztree_dbscan_bytes: bytes"));
        }
        // SAFETY: checked non-null; `entry` only reads `out` when sizing.
        unsafe { entry(ctx, particles, params, out as *mut _, Some(&mut *bytes)) }
    })
}

unsafe fn entry(
    ctx: *mut ztree_context,
    particles: *const ztree_particles,
    params: *const ztree_dbscan_params,
    out: *mut ztree_dbscan_output,
    size: Option<&mut i64>,
) -> Result<(), Fail> {
    if ctx.is_null() {
        return Err(null("ztree_dbscan: ctx"));
    }
    // SAFETY: non-null handles come from `ztree_create*`.
    let ctx = unsafe { &mut *ctx };
    let dims = ctx.config.dims as usize;
    let args = (|| {
        if particles.is_null() || params.is_null() || out.is_null() {
            return Err(null("ztree_dbscan: particles, params or out"));
        }
        // SAFETY: checked non-null; the structs start with their sizes.
        let (p, prm, o) = unsafe { (abi::read_in(particles)?, abi::read_in(params)?, abi::read_in(out.cast_const())?) };
        let dtype = pos_dtype(&p, dims, "particles")?;
        Ok((p, prm, dtype, o))
    })();
    let (p, prm, dtype, mut o) = match args {
        Ok(a) => a,
        Err(e) if size.is_some() => return Err(e),
        Err(e) => return agree_args(&ctx.comm, "DBSCAN", Err::<Proposal, _>(e), |p| p).map(|_| ()),
    };
    let sizing = size.is_some();
    #[cfg(feature = "cuda")]
    if !sizing && super::staged::dbscan_needed(ctx, &p, &prm) {
        let o = super::staged::dbscan(ctx, &p, &prm, dtype, o, dims)?;
        // SAFETY: checked non-null in `args`; `o` keeps the caller's layout.
        return unsafe { abi::write_out(out, &o) };
    }
    dispatch(ctx, &p, &prm, dtype, &mut o, size)?;
    if sizing {
        return Ok(());
    }
    // SAFETY: checked non-null in `args`; `o` keeps the caller's layout.
    unsafe { abi::write_out(out, &o) }
}

/// The call for the context's dimensions and the positions' element type.
pub(crate) fn dispatch(
    ctx: &mut ztree_context,
    p: &ztree_particles,
    prm: &ztree_dbscan_params,
    dtype: i32,
    o: &mut ztree_dbscan_output,
    size: Option<&mut i64>,
) -> Result<(), Fail> {
    match (ctx.config.dims, dtype) {
        (2, ZTREE_DTYPE_F32) => typed::<f32, 2>(ctx, p, prm, dtype, o, size),
        (2, _) => typed::<f64, 2>(ctx, p, prm, dtype, o, size),
        (_, ZTREE_DTYPE_F32) => typed::<f32, 3>(ctx, p, prm, dtype, o, size),
        _ => typed::<f64, 3>(ctx, p, prm, dtype, o, size),
    }
}

/// The arguments after every check that needs no allocation.
pub(crate) struct Checked<T: Real, const D: usize> {
    pub n: usize,
    pub pos: StridedPoints<T, D>,
    pub vel: Option<StridedVectors<D>>,
    pub masses: Option<Strided>,
    pub ids: Option<Strided>,
    types: Option<Strided>,
    /// The cluster property columns asked for.
    pub(crate) columns: Option<super::halo::Asked>,
    /// Whether the caller asked for the member lists (the columns need them in any case).
    pub members_out: bool,
    pub params: DbscanParams,
    pub classes: bool,
    pub bytes: Bytes,
    proposal: Proposal,
}

fn check<T: Real, const D: usize>(
    c: &ztree_config,
    p: &ztree_particles,
    prm: &ztree_dbscan_params,
    dtype: i32,
    o: &ztree_dbscan_output,
    distributed: bool,
) -> Result<Checked<T, D>, Fail> {
    let n = count_of(p, "particles")?;
    let pos = positions::<T, D>(p, n, "particles")?;
    let vel = vectors::<D>(&p.vel, n, "particles.vel")?;
    let masses = Strided::new(&p.mass, n, "particles.mass", &[ZTREE_DTYPE_F32, ZTREE_DTYPE_F64], false)?;
    let ids = Strided::new(&p.ids, n, "particles.ids", &[ZTREE_DTYPE_I32, ZTREE_DTYPE_I64, ZTREE_DTYPE_U32, ZTREE_DTYPE_U64], false)?;
    let types = types_of(p, n, prm.type_mask)?;
    let bad = |m: String| Err(fail(ZTREE_ERR_INVALID_ARGUMENT, m));
    let eps = length_or_b("eps", prm.eps, prm.b)?;
    if prm.min_pts < 1 {
        return bad(format!("min_pts must be at least 1 (got {})", prm.min_pts));
    }
    if prm.min_members < 0 {
        return bad(format!("min_members must be >= 0 (0 or 1: every cluster; got {})", prm.min_members));
    }
    let order = match prm.order {
        ZTREE_CATALOGUE_ZORDER => CatalogueOrder::ZOrder,
        ZTREE_CATALOGUE_GADGET => CatalogueOrder::Gadget,
        x => return bad(format!("unknown catalogue order {x}")),
    };
    let border = match prm.border {
        ZTREE_DBSCAN_BORDER_NEAREST => BorderPoints::NearestCore,
        ZTREE_DBSCAN_BORDER_NOISE => BorderPoints::Noise,
        x => return bad(format!("unknown border rule {x} (ZTREE_DBSCAN_BORDER_NEAREST or _NOISE)")),
    };
    let columns = super::halo::check(p, &super::halo::column_params!(prm), n, vel.is_some(), distributed)?;
    let members_out = prm.members != 0;
    let params = DbscanParams {
        eps,
        min_pts: prm.min_pts as usize,
        min_members: (prm.min_members as usize).max(1),
        order,
        members: members_out || columns.is_some(),
        border,
    };
    let classes = prm.classes != 0;
    let mut bytes = Bytes::default();
    bytes.add(n, SCRATCH_PER_PARTICLE);
    bytes.add(n, 16 + params.min_pts.min(n.max(1)) * 8);
    if o.labels.is_null() {
        bytes.add(n, 8);
    }
    if classes && o.point_class.is_null() {
        bytes.add(n, 1);
    }
    bytes.add(n / params.min_members + 1, std::mem::size_of::<ztree_cluster>());
    if params.members {
        bytes.add(n + n / params.min_members + 1, 8);
    }
    if columns.is_some() {
        bytes.add(n, super::halo::BYTES_PER_PARTICLE);
        bytes.add(n / params.min_members + 1, super::halo::BYTES_PER_ROW);
    }
    let mut words = config_words(c);
    words.extend([
        dtype as u64,
        eps_bits(eps),
        prm.min_pts as u64,
        prm.min_members as u64,
        prm.order as u64,
        prm.members as u64,
        prm.border as u64,
        prm.classes as u64,
        prm.type_mask as u64,
        (prm.gather != 0) as u64,
    ]);
    words.extend(super::halo::column_params!(prm).words());
    if types.is_some() {
        bytes.add(n, 13); // the subset's indices, labels and classes
    }
    let optional = vec![presence(&vel, n), presence(&masses, n), presence(&ids, n)];
    Ok(Checked { n, pos, vel, masses, ids, types, columns, members_out, params, classes, bytes, proposal: Proposal { words, optional } })
}

fn eps_bits(e: LinkingLength) -> u64 {
    match e {
        LinkingLength::Absolute(l) => l.to_bits(),
        LinkingLength::Relative(b) => !b.to_bits(),
    }
}

fn typed<T: Real, const D: usize>(
    ctx: &mut ztree_context,
    p: &ztree_particles,
    prm: &ztree_dbscan_params,
    dtype: i32,
    o: &mut ztree_dbscan_output,
    size: Option<&mut i64>,
) -> Result<(), Fail> {
    let checked = check::<T, D>(&ctx.config, p, prm, dtype, o, ctx.comm.is_some());
    if let Some(s) = size {
        *s = checked?.bytes.as_i64();
        return Ok(());
    }
    // Device arrays (serial contexts): the CUDA back end.
    #[cfg(feature = "cuda")]
    if p.memory == ZTREE_MEMORY_CUDA_DEVICE {
        return super::device_dbscan::dbscan(ctx, prm, o, checked);
    }
    let limit = ctx.config.memory_limit;
    let b = &mut ctx.buffers;
    let ready = checked.and_then(|c| {
        c.bytes.check(limit, "this DBSCAN call")?;
        // SAFETY: the header documents that caller `labels` and `point_class` arrays have
        // `count` entries.
        let labels = unsafe { dest(o.labels, &mut b.labels, c.n, "DBSCAN labels")? };
        let class = if c.classes { Some(unsafe { dest(o.point_class, &mut b.classes, c.n, "DBSCAN classes")? }) } else { None };
        Ok((c, labels, class))
    });
    let ((c, labels, class), _) = agree_args(&ctx.comm, "DBSCAN", ready, |r| &r.0.proposal)?;
    let fields = FofFields::<D> {
        velocities: c.vel.as_ref().map(|v| v as &dyn VectorField<D>),
        masses: c.masses.as_ref().map(|m| m as &dyn ScalarField),
        particle_mass: ctx.config.particle_mass,
        ids: c.ids.as_ref().map(|i| i as &dyn ParticleIds),
    };
    let labels_ptr = labels.as_mut_ptr();
    let class_ptr = class.as_ref().map_or(std::ptr::null_mut(), |s| s.as_ptr() as *mut i8);
    // Classes are written as `PointClass` (an i8): every byte first set to a valid one.
    let class = class.map(|s| {
        s.fill(ZTREE_POINT_NOISE);
        // SAFETY: `PointClass` is `repr(i8)` and every element now holds a valid value.
        unsafe { std::slice::from_raw_parts_mut(s.as_mut_ptr().cast::<PointClass>(), s.len()) }
    });
    let dom = domain::<D>(&ctx.config);
    let subset = c.types.as_ref().map(|t| select(t, prm.type_mask));
    let (cat, stats) = match (&ctx.comm, &subset) {
        #[cfg(feature = "mpi")]
        (Some(comm), _) => {
            let on = crate::mpi::On { ctx: &ctx.core, comm };
            let scope = if prm.gather != 0 { crate::mpi::CatalogueScope::Root } else { crate::mpi::CatalogueScope::Distributed };
            match &subset {
                Some(s) => crate::api::dist_dbscan::dbscan_subset_host(on, &dom, &c.pos, &fields, &c.params, s, scope, labels, class)?,
                None => crate::api::dist_dbscan::dbscan_host(on, &dom, &c.pos, &fields, &c.params, scope, labels, class, None)?,
            }
        }
        (_, Some(s)) => ctx.core.dbscan_subset_into(&dom, &c.pos, &fields, &c.params, s, labels, class)?,
        (_, None) => ctx.core.dbscan_into(&dom, &c.pos, &fields, &c.params, labels, class)?,
    };
    let props = match &c.columns {
        Some(a) => Some((super::halo::compute(&ctx.core, &dom, &c.pos, &fields, &cat.rows, a)?, a.columns)),
        None => None,
    };
    hand_over(ctx, o, &cat, &stats, (labels_ptr, class_ptr), c.classes, c.members_out, c.n)?;
    super::halo::set_columns!(o, super::halo::hand_over(&mut ctx.buffers.columns, props.as_ref().map(|(p, k)| (p, *k)))?);
    Ok(())
}

/// The catalogue into the context's buffers, and where everything is into `o`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn hand_over<const D: usize>(
    ctx: &mut ztree_context,
    o: &mut ztree_dbscan_output,
    cat: &DbscanCatalogue<D>,
    stats: &DbscanStats,
    (labels_ptr, class_ptr): (*mut i64, *mut i8),
    classes: bool,
    members: bool,
    n: usize,
) -> Result<(), Fail> {
    let b = &mut ctx.buffers;
    let rows = &cat.rows;
    b.clusters.clear();
    reserve(&mut b.clusters, rows.len(), "the DBSCAN catalogue")?;
    b.clusters.extend((0..rows.len()).map(|g| {
        let mut h = ztree_cluster {
            tag: rows.tag[g],
            count: rows.count[g] as i64,
            core_count: cat.core_count[g] as i64,
            mass: rows.mass[g],
            inertia_radius: rows.inertia_radius[g],
            max_radius: cat.max_radius[g],
            ..Default::default()
        };
        h.pos[..D].copy_from_slice(&rows.centre[g]);
        if !rows.velocity.is_empty() {
            h.vel[..D].copy_from_slice(&rows.velocity[g]);
            h.vel_dispersion = rows.dispersion[g];
        }
        h
    }));
    if members {
        b.member_offsets.clear();
        b.member_indices.clear();
        reserve(&mut b.member_offsets, rows.len() + 1, "DBSCAN member offsets")?;
        reserve(&mut b.member_indices, rows.member_indices.len(), "DBSCAN member indices")?;
        if rows.member_offsets.is_empty() {
            b.member_offsets.push(0);
        }
        b.member_offsets.extend(rows.member_offsets.iter().map(|&x| x as i64));
        b.member_indices.extend_from_slice(&rows.member_indices);
    }
    o.labels = labels_ptr;
    if classes {
        o.point_class = class_ptr;
    }
    o.n_clusters = rows.len() as i64;
    o.clusters = b.clusters.as_ptr();
    o.member_offsets = if members { b.member_offsets.as_ptr() } else { std::ptr::null() };
    o.member_indices = if members { b.member_indices.as_ptr() } else { std::ptr::null() };
    o.eps = stats.eps;
    o.n_core = stats.core as i64;
    o.n_border = stats.border as i64;
    o.n_noise = stats.noise as i64;
    o.n_clusters_total = stats.clusters_total as i64;
    // No columns unless the caller sets them after this (never a previous call's).
    super::halo::set_columns!(o, super::halo::ColumnPointers::default());
    ctx.stats = fill_stats(&stats.timings, stats.scratch_bytes, n, 0, rows.len(), None);
    Ok(())
}
