//! `ztree_radius` and `ztree_radius_bytes`: argument checks, dispatch on dimension and
//! element type, and the hand-over of the per-query outputs and the lists.

use super::input::{Constant, Strided, StridedPoints, config_words, count_of, domain, null, pos_dtype, positions, presence, select, types_of};
use super::out::{Bytes, Proposal, agree_args, dest, fill_stats};
use super::types::*;
use super::{Fail, abi, fail, guard, ztree_context};
use crate::KnnSubset;
use crate::api::radius_subset::radius_subset;
use crate::api::subset::Runner;
use crate::geom::Real;
use crate::input::ScalarField;
use crate::knn::SourceFields;
use crate::radius::{ListOrder, RadiusOutput, RadiusParams, SearchRadius};
use ztree_status::*;

/// Scratch bytes per source or query point beyond inputs and outputs (the kNN's
/// measured peak with margin: the same z-ordered points and tree).
const SCRATCH_PER_POINT: usize = 96;

const KNOWN: u32 =
    ZTREE_RADIUS_COUNTS | ZTREE_RADIUS_LISTS | ZTREE_RADIUS_DISTANCES | ZTREE_RADIUS_SCALAR_SUM | ZTREE_RADIUS_SCALAR_MEAN | ZTREE_RADIUS_DENSITY;

/// For every query (every source when `queries` is NULL: a self-query, each particle its
/// own neighbour), the sources within its radius (`d <= r`, FoF's test): counts, lists,
/// scalar sums and means, SPH density (definitions: docs/c-api.md). Collective on an MPI
/// context (results equal one serial call on the ranks' particles concatenated in rank
/// order; list entries are global source indices). Device arrays are computed on their
/// device on serial contexts (staged through host memory on MPI contexts and with type
/// masks), every output (the lists too) in device memory.
/// Lists over `ztree_config::memory_limit` are `ZTREE_ERR_MEMORY`, found by the counting
/// pass before they are allocated.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ztree_radius(
    ctx: *mut ztree_context,
    sources: *const ztree_particles,
    queries: *const ztree_particles,
    params: *const ztree_radius_params,
    out: *mut ztree_radius_output,
) -> ztree_status {
    // SAFETY: the pointers are checked in `entry`.
    guard(ctx, || unsafe { entry(ctx, sources, queries, params, out, None) })
}

/// The bytes `ztree_radius` would allocate before its lists (scratch and the
/// context-owned per-query outputs): the lists' size is known only after the counting
/// pass (`n_pairs` of a previous call times 8, or 16 with distances, is a guide). Checks
/// the arguments like `ztree_radius`; computes nothing; not collective.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ztree_radius_bytes(
    ctx: *mut ztree_context,
    sources: *const ztree_particles,
    queries: *const ztree_particles,
    params: *const ztree_radius_params,
    out: *const ztree_radius_output,
    bytes: *mut i64,
) -> ztree_status {
    guard(ctx, || {
        if bytes.is_null() {
            return Err(null("ztree_radius_bytes: bytes"));
        }
        // SAFETY: checked non-null; `entry` only reads `out` when sizing.
        unsafe { entry(ctx, sources, queries, params, out as *mut _, Some(&mut *bytes)) }
    })
}

pub(crate) struct Args {
    pub src: ztree_particles,
    pub qry: Option<ztree_particles>,
    pub prm: ztree_radius_params,
    pub dtype: i32,
}

unsafe fn entry(
    ctx: *mut ztree_context,
    sources: *const ztree_particles,
    queries: *const ztree_particles,
    params: *const ztree_radius_params,
    out: *mut ztree_radius_output,
    size: Option<&mut i64>,
) -> Result<(), Fail> {
    if ctx.is_null() {
        return Err(null("ztree_radius: ctx"));
    }
    // SAFETY: non-null handles come from `ztree_create*`.
    let ctx = unsafe { &mut *ctx };
    let dims = ctx.config.dims as usize;
    let args = (|| {
        if sources.is_null() || params.is_null() || out.is_null() {
            return Err(null("ztree_radius: sources, params or out"));
        }
        // SAFETY: checked non-null; the structs start with their sizes.
        let (src, prm, o) = unsafe { (abi::read_in(sources)?, abi::read_in(params)?, abi::read_in(out.cast_const())?) };
        let qry = if queries.is_null() { None } else { Some(unsafe { abi::read_in(queries) }?) };
        let dtype = pos_dtype(&src, dims, "sources")?;
        if let Some(q) = &qry
            && pos_dtype(q, dims, "queries")? != dtype
        {
            return Err(fail(ZTREE_ERR_DTYPE, "queries: positions must have the same element type as the sources"));
        }
        if qry.is_some_and(|q| q.memory != src.memory) {
            return Err(fail(ZTREE_ERR_INVALID_ARGUMENT, "queries and sources must be in the same memory space"));
        }
        Ok((Args { src, qry, prm, dtype }, o))
    })();
    let (args, mut o) = match args {
        Ok(a) => a,
        Err(e) if size.is_some() => return Err(e),
        Err(e) => return agree_args(&ctx.comm, "radius", Err::<Proposal, _>(e), |p| p).map(|_| ()),
    };
    let sizing = size.is_some();
    #[cfg(feature = "cuda")]
    if !sizing && super::staged::radius_needed(ctx, &args) {
        let o = super::staged::radius(ctx, &args, o, dims)?;
        // SAFETY: checked non-null in `args`; `o` keeps the caller's layout.
        return unsafe { abi::write_out(out, &o) };
    }
    dispatch(ctx, &args, &mut o, size)?;
    if sizing {
        return Ok(());
    }
    // SAFETY: checked non-null in `args`; `o` keeps the caller's layout.
    unsafe { abi::write_out(out, &o) }
}

/// The call for the context's dimensions and the positions' element type.
pub(crate) fn dispatch(ctx: &mut ztree_context, a: &Args, o: &mut ztree_radius_output, size: Option<&mut i64>) -> Result<(), Fail> {
    match (ctx.config.dims, a.dtype) {
        (2, ZTREE_DTYPE_F32) => typed::<f32, 2>(ctx, a, o, size),
        (2, _) => typed::<f64, 2>(ctx, a, o, size),
        (_, ZTREE_DTYPE_F32) => typed::<f32, 3>(ctx, a, o, size),
        _ => typed::<f64, 3>(ctx, a, o, size),
    }
}

pub(crate) struct Checked<T: Real, const D: usize> {
    pub ns: usize,
    pub nq: usize,
    pub sp: StridedPoints<T, D>,
    pub qp: Option<StridedPoints<T, D>>,
    pub masses: Option<Strided>,
    pub scalar: Option<Strided>,
    pub radii: Option<Strided>,
    src_types: Option<Strided>,
    qry_types: Option<Strided>,
    pub order: ListOrder,
    pub bytes: Bytes,
    proposal: Proposal,
}

fn check<T: Real, const D: usize>(c: &ztree_config, a: &Args, o: &ztree_radius_output) -> Result<Checked<T, D>, Fail> {
    let (src, prm) = (&a.src, &a.prm);
    let bad = |m: String| Err(fail(ZTREE_ERR_INVALID_ARGUMENT, m));
    let ns = count_of(src, "sources")?;
    let sp = positions::<T, D>(src, ns, "sources")?;
    let (nq, qp) = match &a.qry {
        Some(q) => {
            let nq = count_of(q, "queries")?;
            (nq, Some(positions::<T, D>(q, nq, "queries")?))
        }
        None => (ns, None),
    };
    if prm.outputs & !KNOWN != 0 {
        return bad(format!("unknown output bits {:#x}", prm.outputs & !KNOWN));
    }
    let want = |bit: u32| prm.outputs & bit != 0;
    if want(ZTREE_RADIUS_DISTANCES) && !want(ZTREE_RADIUS_LISTS) {
        return bad("ZTREE_RADIUS_DISTANCES needs ZTREE_RADIUS_LISTS".into());
    }
    let order = match prm.list_order {
        ZTREE_LIST_BY_DISTANCE => ListOrder::Distance,
        ZTREE_LIST_BY_INDEX => ListOrder::Index,
        x => return bad(format!("unknown list order {x} (ZTREE_LIST_BY_DISTANCE or ZTREE_LIST_BY_INDEX)")),
    };
    let radii = Strided::new(&prm.radii, nq, "params.radii", &[ZTREE_DTYPE_F32, ZTREE_DTYPE_F64], false)?;
    if radii.is_none() && !(prm.radius.is_finite() && prm.radius >= 0.0) {
        return bad(format!("radius must be finite and >= 0 (got {})", prm.radius));
    }
    let masses = Strided::new(&src.mass, ns, "sources.mass", &[ZTREE_DTYPE_F32, ZTREE_DTYPE_F64], false)?;
    let scalar = if want(ZTREE_RADIUS_SCALAR_SUM) || want(ZTREE_RADIUS_SCALAR_MEAN) {
        let s = Strided::new(&prm.scalar, ns, "params.scalar", &[ZTREE_DTYPE_F32, ZTREE_DTYPE_F64], false)?;
        if s.is_none() && ns > 0 {
            return Err(null("params.scalar.data (needed for ZTREE_RADIUS_SCALAR_SUM / _MEAN)"));
        }
        s
    } else {
        None
    };
    let src_types = types_of(src, ns, prm.source_type_mask)?;
    let qry_types = types_of(a.qry.as_ref().unwrap_or(src), nq, prm.query_type_mask)?;
    let mut bytes = Bytes::default();
    bytes.add(ns + if a.qry.is_some() { nq } else { 0 }, SCRATCH_PER_POINT);
    if src_types.is_some() || qry_types.is_some() {
        bytes.add(ns + nq, 4); // the selections
        bytes.add(nq, 32); // the selected queries' outputs
    }
    if radii.is_some() {
        bytes.add(nq, 8);
    }
    if want(ZTREE_RADIUS_LISTS) {
        bytes.add(nq, 4); // the counts by query in z-order
    }
    for (bit, ptr_null) in [
        (ZTREE_RADIUS_COUNTS, o.counts.is_null()),
        (ZTREE_RADIUS_SCALAR_SUM, o.scalar_sum.is_null()),
        (ZTREE_RADIUS_SCALAR_MEAN, o.scalar_mean.is_null()),
        (ZTREE_RADIUS_DENSITY, o.density.is_null()),
    ] {
        if want(bit) && ptr_null {
            bytes.add(nq, 8);
        }
    }
    let mut words = config_words(c);
    if prm.count_limit < 0 {
        return bad(format!("count_limit must be >= 0 (got {})", prm.count_limit));
    }
    words.extend([a.dtype as u64, a.qry.is_some() as u64, prm.radius.to_bits(), prm.outputs as u64, prm.list_order as u64, prm.count_limit as u64]);
    words.extend([prm.source_type_mask as u64, prm.query_type_mask as u64]);
    let optional = vec![presence(&radii, nq), presence(&masses, ns), presence(&scalar, ns)];
    Ok(Checked { ns, nq, sp, qp, masses, scalar, radii, src_types, qry_types, order, bytes, proposal: Proposal { words, optional } })
}

fn typed<T: Real, const D: usize>(ctx: &mut ztree_context, a: &Args, o: &mut ztree_radius_output, size: Option<&mut i64>) -> Result<(), Fail> {
    let checked = check::<T, D>(&ctx.config, a, o);
    if let Some(s) = size {
        *s = checked?.bytes.as_i64();
        return Ok(());
    }
    // Device arrays (serial contexts): the CUDA back end.
    #[cfg(feature = "cuda")]
    if a.src.memory == ZTREE_MEMORY_CUDA_DEVICE {
        return super::device_radius::radius(ctx, a, o, checked);
    }
    let want = |bit: u32| a.prm.outputs & bit != 0;
    let limit = ctx.config.memory_limit;
    let b = &mut ctx.buffers;
    let ready = checked.and_then(|c| {
        c.bytes.check(limit, "this radius call")?;
        let nq = c.nq;
        // SAFETY (all `dest` calls): the header documents the sizes of caller arrays.
        let slot = |on: bool, p: *mut i64, buf: &mut Vec<i64>, what: &str| {
            if on { unsafe { dest(p, buf, nq, what) }.map(|s| Some(s.as_mut_ptr())) } else { Ok(None) }
        };
        let counts = slot(want(ZTREE_RADIUS_COUNTS), o.counts, &mut b.counts, "radius counts")?;
        let slot = |on: bool, p: *mut f64, buf: &mut Vec<f64>, what: &str| {
            if on { unsafe { dest(p, buf, nq, what) }.map(|s| Some(s.as_mut_ptr())) } else { Ok(None) }
        };
        let sum = slot(want(ZTREE_RADIUS_SCALAR_SUM), o.scalar_sum, &mut b.scalar_sum, "radius scalar sums")?;
        let mean = slot(want(ZTREE_RADIUS_SCALAR_MEAN), o.scalar_mean, &mut b.scalar_mean, "radius scalar means")?;
        let density = slot(want(ZTREE_RADIUS_DENSITY), o.density, &mut b.density, "radius densities")?;
        Ok((c, counts, sum, mean, density))
    });
    let ((c, counts, sum, mean, density), _) = agree_args(&ctx.comm, "radius", ready, |r| &r.0.proposal)?;
    let uniform = Constant { value: ctx.config.particle_mass, len: c.ns };
    let masses: Option<&dyn ScalarField> = match &c.masses {
        Some(m) => Some(m),
        None if ctx.config.particle_mass != 1.0 => Some(&uniform),
        None => None,
    };
    let fields =
        SourceFields { masses: if want(ZTREE_RADIUS_DENSITY) { masses } else { None }, scalar: c.scalar.as_ref().map(|s| s as &dyn ScalarField) };
    let radius = match &c.radii {
        Some(r) => SearchRadius::PerQuery(r),
        None => SearchRadius::Fixed(a.prm.radius),
    };
    let lists = want(ZTREE_RADIUS_LISTS);
    // The lists may take what the memory limit leaves after the rest of the call.
    let max_list_bytes = if limit > 0 { (limit as u128).saturating_sub(c.bytes.0).max(1) as u64 } else { 0 };
    let params = RadiusParams {
        radius,
        lists: lists.then_some(c.order),
        list_distances: want(ZTREE_RADIUS_DISTANCES),
        max_list_bytes,
        count_limit: a.prm.count_limit.max(0) as u64,
    };
    // SAFETY: each pointer is a distinct `nq`-element array from `dest` (a caller array or
    // a context buffer not otherwise borrowed until the call returns).
    let mk_i = |p: Option<*mut i64>| p.map(|p| unsafe { std::slice::from_raw_parts_mut(p, c.nq) });
    let mk_f = |p: Option<*mut f64>| p.map(|p| unsafe { std::slice::from_raw_parts_mut(p, c.nq) });
    let mut rout = RadiusOutput { counts: mk_i(counts), scalar_sum: mk_f(sum), scalar_mean: mk_f(mean), density: mk_f(density) };
    let dom = domain::<D>(&ctx.config);
    #[allow(unused_mut)]
    let mut dist = None;
    let masked = c.src_types.is_some() || c.qry_types.is_some();
    let r = match (&ctx.comm, &c.qp) {
        _ if masked => {
            let all = |n: usize| (0..n as u32).collect::<Vec<u32>>();
            let ssel = c.src_types.as_ref().map_or_else(|| all(c.ns), |t| select(t, a.prm.source_type_mask));
            let qsel = c.qry_types.as_ref().map_or_else(|| all(c.nq), |t| select(t, a.prm.query_type_mask));
            let runner = match &ctx.comm {
                #[cfg(feature = "mpi")]
                Some(comm) => Runner::Dist(crate::mpi::On { ctx: &ctx.core, comm }),
                _ => Runner::Serial(&ctx.core),
            };
            // A self-query when the selections are equal on every rank.
            let equal = runner.all(qsel == ssel);
            let src = KnnSubset { points: &c.sp, sel: &ssel };
            match &c.qp {
                Some(q) => radius_subset(runner, &dom, src, Some(KnnSubset { points: q, sel: &qsel[..] }), &fields, &params, &mut rout)?,
                None => radius_subset(
                    runner,
                    &dom,
                    src,
                    Some(KnnSubset { points: &c.sp, sel: &qsel[..] }).filter(|_| !equal),
                    &fields,
                    &params,
                    &mut rout,
                )?,
            }
        }
        #[cfg(feature = "mpi")]
        (Some(comm), _) => {
            let on = crate::mpi::On { ctx: &ctx.core, comm };
            let (mut r, st) = crate::api::dist::radius_host(on, &dom, &c.sp, c.qp.as_ref(), &fields, &params, &mut rout, None)?;
            r.stats.timings = st.dist.timings.clone();
            dist = Some(st.dist);
            r
        }
        (_, None) => ctx.core.radius_self(&dom, &c.sp, &fields, &params, &mut rout)?,
        (_, Some(q)) => ctx.core.radius(&dom, &c.sp, q, &fields, &params, &mut rout)?,
    };
    let b = &mut ctx.buffers;
    if let Some(l) = r.lists {
        b.list_offsets = l.offsets;
        b.list_indices = l.indices;
        b.list_distances = l.distances;
        // Never a dangling pointer, even for empty lists.
        b.list_indices.reserve(1);
        b.list_distances.reserve(1);
        o.offsets = b.list_offsets.as_ptr();
        o.indices = b.list_indices.as_ptr();
        o.distances = if want(ZTREE_RADIUS_DISTANCES) { b.list_distances.as_ptr() } else { std::ptr::null() };
    }
    if let Some(p) = counts {
        o.counts = p;
    }
    if let Some(p) = sum {
        o.scalar_sum = p;
    }
    if let Some(p) = mean {
        o.scalar_mean = p;
    }
    if let Some(p) = density {
        o.density = p;
    }
    o.n_queries = c.nq as i64;
    o.n_pairs = r.stats.pairs as i64;
    ctx.stats = fill_stats(&r.stats.timings, r.stats.scratch_bytes, c.ns, c.nq, 0, dist.as_ref());
    Ok(())
}
