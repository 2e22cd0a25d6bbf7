//! `ztree_knn` and `ztree_fof`: checks, dispatch on dimension and element type, and
//! the hand-over of results to caller arrays or context-owned buffers.

use std::ffi::c_char;

use super::input::{Strided, StridedPoints, StridedVectors};
use super::{Fail, fail, guard, ztree_context};
use super::types::*;
use crate::api::Timings;
use crate::fof::{CatalogueOrder, FofFields, FofParams, LinkingLength};
use crate::geom::Real;
use crate::input::{Domain, ParticleIds, ScalarField, VectorField};
use crate::knn::{KnnOutput, KnnParams, OutputOrder, SourceFields};
use ztree_status::*;

/// Output buffers owned by a context, grown on demand and reused across calls.
#[derive(Default)]
pub(crate) struct Buffers {
    indices: Vec<i64>,
    distances: Vec<f64>,
    kth: Vec<f64>,
    density: Vec<f64>,
    scalar_mean: Vec<f64>,
    permutation: Vec<i64>,
    labels: Vec<i64>,
    halos: Vec<ztree_halo>,
    member_offsets: Vec<i64>,
    member_indices: Vec<i64>,
}

pub(crate) fn empty_stats() -> ztree_stats {
    ztree_stats {
        n_stages: 0,
        stage_name: [[0; 16]; ZTREE_MAX_STAGES],
        stage_seconds: [0.0; ZTREE_MAX_STAGES],
        total_seconds: 0.0,
        scratch_bytes: 0,
        particles: 0,
        queries: 0,
        halos: 0,
        bytes_sent: 0,
        messages: 0,
        owned: 0,
    }
}

/// What an MPI context adds to the statistics of a call.
#[cfg(feature = "mpi")]
type DistInfo = crate::mpi::DistStats;
#[cfg(not(feature = "mpi"))]
type DistInfo = ();

#[cfg(feature = "mpi")]
fn add_comm_stats(s: &mut ztree_stats, d: &crate::mpi::DistStats) {
    s.bytes_sent = d.comm.bytes_sent() as i64;
    s.messages = d.comm.messages() as i64;
    s.owned = d.owned as i64;
}

fn fill_stats(t: &Timings, scratch: usize, particles: usize, queries: usize, halos: usize) -> ztree_stats {
    let mut s = empty_stats();
    for (i, (name, secs)) in t.stages.iter().take(ZTREE_MAX_STAGES).enumerate() {
        for (j, b) in name.bytes().take(15).enumerate() {
            s.stage_name[i][j] = b as c_char;
        }
        s.stage_seconds[i] = *secs;
        s.n_stages = i as i32 + 1;
    }
    s.total_seconds = t.total();
    s.scratch_bytes = scratch as i64;
    s.particles = particles as i64;
    s.queries = queries as i64;
    s.halos = halos as i64;
    s
}

fn null(what: &str) -> Fail {
    fail(ZTREE_ERR_NULL_POINTER, format!("{what} is NULL"))
}

fn count_of(p: &ztree_particles, what: &str) -> Result<usize, Fail> {
    if p.memory == ZTREE_MEMORY_CUDA_DEVICE {
        return Err(fail(ZTREE_ERR_UNSUPPORTED, format!("{what}: CUDA device arrays need the CUDA back end, which this build does not have; pass host arrays")));
    }
    if p.memory != ZTREE_MEMORY_HOST {
        return Err(fail(ZTREE_ERR_INVALID_ARGUMENT, format!("{what}: unknown memory space {}", p.memory)));
    }
    if p.count < 0 {
        return Err(fail(ZTREE_ERR_SIZE, format!("{what}: negative count {}", p.count)));
    }
    usize::try_from(p.count).map_err(|_| fail(ZTREE_ERR_SIZE, format!("{what}: count {} too large", p.count)))
}

/// The positions' element type (all dimensions alike).
fn pos_dtype(p: &ztree_particles, dims: usize, what: &str) -> Result<i32, Fail> {
    let t = p.pos[0].dtype;
    if t != ZTREE_DTYPE_F32 && t != ZTREE_DTYPE_F64 {
        return Err(fail(ZTREE_ERR_DTYPE, format!("{what}: positions must be f32 or f64 (pos[0].dtype = {t})")));
    }
    for d in 1..dims {
        if p.pos[d].dtype != t {
            return Err(fail(ZTREE_ERR_DTYPE, format!("{what}: pos[{d}] has element type {} but pos[0] has {t}; all coordinates must share one type", p.pos[d].dtype)));
        }
    }
    Ok(t)
}

fn dtype_of<T: Real>() -> i32 {
    if T::NAME == "f32" { ZTREE_DTYPE_F32 } else { ZTREE_DTYPE_F64 }
}

fn positions<T: Real, const D: usize>(p: &ztree_particles, n: usize, what: &str) -> Result<StridedPoints<T, D>, Fail> {
    let mut arrays = Vec::with_capacity(D);
    for d in 0..D {
        let a = Strided::new(&p.pos[d], n, &format!("{what}.pos[{d}]"), &[dtype_of::<T>()], true)?;
        // Absent only when there are no particles.
        arrays.push(a.unwrap_or_else(|| Strided::empty(dtype_of::<T>())));
    }
    Ok(StridedPoints::new(std::array::from_fn(|d| arrays[d])))
}

fn domain<const D: usize>(c: &ztree_config) -> Domain<D> {
    if c.periodic == 1 { Domain::Periodic(std::array::from_fn(|d| c.box_size[d])) } else { Domain::Open }
}

/// A caller array of `len` elements, or the context buffer grown to `len`.
///
/// # Safety
/// A non-null `ptr` must point to `len` writable elements.
unsafe fn dest<'a, V: Copy + Default>(ptr: *mut V, buf: &'a mut Vec<V>, len: usize) -> &'a mut [V] {
    if ptr.is_null() {
        buf.clear();
        buf.resize(len, V::default());
        buf.as_mut_slice()
    } else {
        // SAFETY: per the function contract.
        unsafe { std::slice::from_raw_parts_mut(ptr, len) }
    }
}

/// Finds `k` nearest neighbours of every query (or of every source when `queries` is
/// NULL: a self-query, where each particle is its own nearest neighbour). Array sizes:
/// see `ztree_knn_output`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ztree_knn(
    ctx: *mut ztree_context,
    sources: *const ztree_particles,
    queries: *const ztree_particles,
    params: *const ztree_knn_params,
    out: *mut ztree_knn_output,
) -> ztree_status {
    guard(ctx, || {
        if ctx.is_null() {
            return Err(null("ztree_knn: ctx"));
        }
        if sources.is_null() || params.is_null() || out.is_null() {
            return Err(null("ztree_knn: sources, params or out"));
        }
        // SAFETY: checked non-null; the structs are plain data.
        let (ctx, src, prm, o) = unsafe { (&mut *ctx, sources.read(), params.read(), &mut *out) };
        let qry = if queries.is_null() { None } else { Some(unsafe { queries.read() }) };
        let dims = ctx.config.dims as usize;
        let t = pos_dtype(&src, dims, "sources")?;
        if let Some(q) = &qry
            && pos_dtype(q, dims, "queries")? != t
        {
            return Err(fail(ZTREE_ERR_DTYPE, "queries: positions must have the same element type as the sources"));
        }
        match (dims, t) {
            (2, ZTREE_DTYPE_F32) => knn_typed::<f32, 2>(ctx, &src, qry.as_ref(), &prm, o),
            (2, _) => knn_typed::<f64, 2>(ctx, &src, qry.as_ref(), &prm, o),
            (_, ZTREE_DTYPE_F32) => knn_typed::<f32, 3>(ctx, &src, qry.as_ref(), &prm, o),
            _ => knn_typed::<f64, 3>(ctx, &src, qry.as_ref(), &prm, o),
        }
    })
}

fn knn_typed<T: Real, const D: usize>(
    ctx: &mut ztree_context,
    src: &ztree_particles,
    qry: Option<&ztree_particles>,
    prm: &ztree_knn_params,
    o: &mut ztree_knn_output,
) -> Result<(), Fail> {
    let ns = count_of(src, "sources")?;
    let sp = positions::<T, D>(src, ns, "sources")?;
    let (nq, qp) = match qry {
        Some(q) => {
            let nq = count_of(q, "queries")?;
            (nq, Some(positions::<T, D>(q, nq, "queries")?))
        }
        None => (ns, None),
    };
    if prm.k < 1 {
        return Err(fail(ZTREE_ERR_INVALID_ARGUMENT, format!("k must be at least 1 (got {})", prm.k)));
    }
    let k = prm.k as usize;
    let known = ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES | ZTREE_KNN_KTH_DISTANCE | ZTREE_KNN_DENSITY | ZTREE_KNN_SCALAR_MEAN | ZTREE_KNN_PERMUTATION;
    if prm.outputs & !known != 0 {
        return Err(fail(ZTREE_ERR_INVALID_ARGUMENT, format!("unknown output bits {:#x}", prm.outputs & !known)));
    }
    let order = match prm.order {
        ZTREE_ORDER_INPUT => OutputOrder::Input,
        ZTREE_ORDER_ZORDER => OutputOrder::ZOrder,
        x => return Err(fail(ZTREE_ERR_INVALID_ARGUMENT, format!("unknown order {x}"))),
    };
    let want = |bit: u32| prm.outputs & bit != 0;
    let rows = nq.checked_mul(k).filter(|&r| r <= isize::MAX as usize / 8).ok_or_else(|| fail(ZTREE_ERR_SIZE, "n_queries * k is too large"))?;
    let masses = Strided::new(&src.mass, ns, "sources.mass", &[ZTREE_DTYPE_F32, ZTREE_DTYPE_F64], false)?;
    let scalar = if want(ZTREE_KNN_SCALAR_MEAN) {
        Some(Strided::new(&prm.scalar, ns, "params.scalar", &[ZTREE_DTYPE_F32, ZTREE_DTYPE_F64], true)?.ok_or_else(|| null("params.scalar.data (needed for ZTREE_KNN_SCALAR_MEAN)"))?)
    } else {
        None
    };
    let fields = SourceFields {
        masses: if want(ZTREE_KNN_DENSITY) { masses.as_ref().map(|m| m as &dyn ScalarField) } else { None },
        scalar: scalar.as_ref().map(|s| s as &dyn ScalarField),
    };
    // Distances are computed in T and handed out as f64.
    let mut dist_t: Vec<T> = if want(ZTREE_KNN_DISTANCES) { vec![T::ZERO; rows] } else { Vec::new() };
    let mut kth_t: Vec<T> = if want(ZTREE_KNN_KTH_DISTANCE) { vec![T::ZERO; nq] } else { Vec::new() };
    let b = &mut ctx.buffers;
    // SAFETY (all `dest` calls): the header documents the sizes of caller arrays.
    let indices = if want(ZTREE_KNN_INDICES) { Some(unsafe { dest(o.indices, &mut b.indices, rows) }) } else { None };
    let density = if want(ZTREE_KNN_DENSITY) { Some(unsafe { dest(o.density, &mut b.density, nq) }) } else { None };
    let scalar_mean = if want(ZTREE_KNN_SCALAR_MEAN) { Some(unsafe { dest(o.scalar_mean, &mut b.scalar_mean, nq) }) } else { None };
    let permutation = if want(ZTREE_KNN_PERMUTATION) { Some(unsafe { dest(o.permutation, &mut b.permutation, nq) }) } else { None };
    let ptrs = (
        indices.as_ref().map(|s| s.as_ptr() as *mut i64),
        density.as_ref().map(|s| s.as_ptr() as *mut f64),
        scalar_mean.as_ref().map(|s| s.as_ptr() as *mut f64),
        permutation.as_ref().map(|s| s.as_ptr() as *mut i64),
    );
    let mut kout = KnnOutput {
        indices,
        distances: want(ZTREE_KNN_DISTANCES).then_some(&mut dist_t[..]),
        kth_distance: want(ZTREE_KNN_KTH_DISTANCE).then_some(&mut kth_t[..]),
        density,
        scalar_mean,
        order,
        permutation,
    };
    let kp = KnnParams { k };
    let dom = domain::<D>(&ctx.config);
    #[allow(unused_mut)]
    let mut comm_stats: Option<DistInfo> = None;
    #[cfg(feature = "mpi")]
    let stats = match (&ctx.comm, &qp) {
        (Some(comm), _) => {
            let on = crate::mpi::On { ctx: &ctx.core, comm };
            let st = crate::mpi::knn::run(on, &dom, &sp, qp.as_ref(), &fields, &kp, &mut kout)?;
            let mut local = st.local.clone();
            local.timings = st.dist.timings.clone();
            local.padded_queries = st.padded_queries;
            comm_stats = Some(st.dist);
            local
        }
        (None, None) => ctx.core.knn_self(&dom, &sp, &fields, &kp, &mut kout)?,
        (None, Some(q)) => ctx.core.knn(&dom, &sp, q, &fields, &kp, &mut kout)?,
    };
    #[cfg(not(feature = "mpi"))]
    let stats = match &qp {
        None => ctx.core.knn_self(&dom, &sp, &fields, &kp, &mut kout)?,
        Some(q) => ctx.core.knn(&dom, &sp, q, &fields, &kp, &mut kout)?,
    };
    drop(kout);
    if want(ZTREE_KNN_DISTANCES) {
        let d = unsafe { dest(o.distances, &mut ctx.buffers.distances, rows) };
        d.iter_mut().zip(&dist_t).for_each(|(d, s)| *d = s.to_f64());
        o.distances = d.as_mut_ptr();
    }
    if want(ZTREE_KNN_KTH_DISTANCE) {
        let d = unsafe { dest(o.kth_distance, &mut ctx.buffers.kth, nq) };
        d.iter_mut().zip(&kth_t).for_each(|(d, s)| *d = s.to_f64());
        o.kth_distance = d.as_mut_ptr();
    }
    if let Some(p) = ptrs.0 {
        o.indices = p;
    }
    if let Some(p) = ptrs.1 {
        o.density = p;
    }
    if let Some(p) = ptrs.2 {
        o.scalar_mean = p;
    }
    if let Some(p) = ptrs.3 {
        o.permutation = p;
    }
    o.n_queries = nq as i64;
    o.padded_queries = stats.padded_queries as i64;
    let extra = (dist_t.capacity() + kth_t.capacity()) * std::mem::size_of::<T>();
    ctx.stats = fill_stats(&stats.timings, stats.scratch_bytes + extra, ns, nq, 0);
    #[cfg(feature = "mpi")]
    if let Some(d) = &comm_stats {
        add_comm_stats(&mut ctx.stats, d);
    }
    let _ = &comm_stats;
    Ok(())
}

/// Friends-of-friends halos of `particles`: per-particle halo tags and the catalogue.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ztree_fof(
    ctx: *mut ztree_context,
    particles: *const ztree_particles,
    params: *const ztree_fof_params,
    out: *mut ztree_fof_output,
) -> ztree_status {
    guard(ctx, || {
        if ctx.is_null() {
            return Err(null("ztree_fof: ctx"));
        }
        if particles.is_null() || params.is_null() || out.is_null() {
            return Err(null("ztree_fof: particles, params or out"));
        }
        // SAFETY: checked non-null; the structs are plain data.
        let (ctx, p, prm, o) = unsafe { (&mut *ctx, particles.read(), params.read(), &mut *out) };
        let dims = ctx.config.dims as usize;
        match (dims, pos_dtype(&p, dims, "particles")?) {
            (2, ZTREE_DTYPE_F32) => fof_typed::<f32, 2>(ctx, &p, &prm, o),
            (2, _) => fof_typed::<f64, 2>(ctx, &p, &prm, o),
            (_, ZTREE_DTYPE_F32) => fof_typed::<f32, 3>(ctx, &p, &prm, o),
            _ => fof_typed::<f64, 3>(ctx, &p, &prm, o),
        }
    })
}

fn fof_typed<T: Real, const D: usize>(ctx: &mut ztree_context, p: &ztree_particles, prm: &ztree_fof_params, o: &mut ztree_fof_output) -> Result<(), Fail> {
    let n = count_of(p, "particles")?;
    let pos = positions::<T, D>(p, n, "particles")?;
    // Velocities: f32 or f64 whatever the positions' type, one type for all components;
    // present when vel[0].data is set (with no particles nothing is read, NULLs are fine).
    let vel = if !p.vel[0].data.is_null() && n > 0 {
        let mut arrays = Vec::with_capacity(D);
        for d in 0..D {
            let a = Strided::new(&p.vel[d], n, &format!("particles.vel[{d}]"), &[ZTREE_DTYPE_F32, ZTREE_DTYPE_F64], true)?.ok_or_else(|| null("particles.vel"))?;
            if a.dtype() != p.vel[0].dtype {
                return Err(fail(ZTREE_ERR_DTYPE, format!("particles.vel[{d}] has element type {} but vel[0] has {}; all components must share one type", a.dtype(), p.vel[0].dtype)));
            }
            arrays.push(a);
        }
        Some(StridedVectors::<D>(std::array::from_fn(|d| arrays[d])))
    } else {
        None
    };
    let masses = Strided::new(&p.mass, n, "particles.mass", &[ZTREE_DTYPE_F32, ZTREE_DTYPE_F64], false)?;
    let ids = Strided::new(&p.ids, n, "particles.ids", &[ZTREE_DTYPE_I32, ZTREE_DTYPE_I64, ZTREE_DTYPE_U32, ZTREE_DTYPE_U64], false)?;
    let bad = |m: String| Err(fail(ZTREE_ERR_INVALID_ARGUMENT, m));
    let link = match (prm.linking_length, prm.b) {
        (l, b) if l.is_nan() || b.is_nan() => return bad(format!("linking_length ({l}) and b ({b}) must not be NaN")),
        (l, b) if l > 0.0 && b == 0.0 => LinkingLength::Absolute(l),
        (l, b) if l == 0.0 && b > 0.0 => LinkingLength::Relative(b),
        (l, b) => return bad(format!("give exactly one of linking_length (absolute, > 0) and b (relative, > 0), the other 0 (got linking_length = {l}, b = {b})")),
    };
    if prm.min_members < 1 {
        return bad(format!("min_members must be at least 1 (got {})", prm.min_members));
    }
    let order = match prm.order {
        ZTREE_CATALOGUE_ZORDER => CatalogueOrder::ZOrder,
        ZTREE_CATALOGUE_GADGET => CatalogueOrder::Gadget,
        x => return bad(format!("unknown catalogue order {x}")),
    };
    let fields = FofFields::<D> {
        velocities: vel.as_ref().map(|v| v as &dyn VectorField<D>),
        masses: masses.as_ref().map(|m| m as &dyn ScalarField),
        particle_mass: ctx.config.particle_mass,
        ids: ids.as_ref().map(|i| i as &dyn ParticleIds),
    };
    let params = FofParams { linking_length: link, min_members: prm.min_members as usize, order, members: prm.members != 0 };
    let dom = domain::<D>(&ctx.config);
    let b = &mut ctx.buffers;
    // SAFETY: the header documents that a caller `labels` array has `count` entries.
    let labels = unsafe { dest(o.labels, &mut b.labels, n) };
    let labels_ptr = labels.as_mut_ptr();
    #[allow(unused_mut)]
    let mut comm_stats: Option<DistInfo> = None;
    #[cfg(feature = "mpi")]
    let (cat, stats) = match &ctx.comm {
        Some(comm) => {
            let on = crate::mpi::On { ctx: &ctx.core, comm };
            let scope = if prm.gather != 0 { crate::mpi::CatalogueScope::Root } else { crate::mpi::CatalogueScope::Distributed };
            let (cat, st) = crate::mpi::fof::run(on, &dom, &pos, &fields, &params, scope, labels)?;
            let mut local = st.local.clone();
            local.timings = st.dist.timings.clone();
            local.groups_total = st.groups_total;
            comm_stats = Some(st.dist);
            (cat, local)
        }
        None => ctx.core.fof_into(&dom, &pos, &fields, &params, labels)?,
    };
    #[cfg(not(feature = "mpi"))]
    let (cat, stats) = ctx.core.fof_into(&dom, &pos, &fields, &params, labels)?;
    let b = &mut ctx.buffers;
    b.halos.clear();
    b.halos.extend((0..cat.len()).map(|g| {
        let mut h = ztree_halo { tag: cat.tag[g], count: cat.count[g] as i64, mass: cat.mass[g], inertia_radius: cat.inertia_radius[g], ..Default::default() };
        h.pos[..D].copy_from_slice(&cat.centre[g]);
        if !cat.velocity.is_empty() {
            h.vel[..D].copy_from_slice(&cat.velocity[g]);
            h.vel_dispersion = cat.dispersion[g];
        }
        h
    }));
    b.member_offsets.clear();
    b.member_indices.clear();
    if params.members {
        b.member_offsets.extend(cat.member_offsets.iter().map(|&x| x as i64));
        b.member_indices.extend_from_slice(&cat.member_indices);
    }
    o.labels = labels_ptr;
    o.n_halos = cat.len() as i64;
    o.halos = b.halos.as_ptr();
    o.member_offsets = if params.members { b.member_offsets.as_ptr() } else { std::ptr::null() };
    o.member_indices = if params.members { b.member_indices.as_ptr() } else { std::ptr::null() };
    o.linking_length = stats.linking_length;
    o.n_groups_total = stats.groups_total as i64;
    ctx.stats = fill_stats(&stats.timings, stats.scratch_bytes, n, 0, cat.len());
    #[cfg(feature = "mpi")]
    if let Some(d) = &comm_stats {
        add_comm_stats(&mut ctx.stats, d);
    }
    let _ = &comm_stats;
    Ok(())
}
