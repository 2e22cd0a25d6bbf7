//! `ztree_knn` and `ztree_knn_bytes`: argument checks, the agreement on MPI contexts,
//! dispatch on dimension and element type, and the hand-over of results.

use super::input::{Constant, Strided, StridedPoints, config_words, count_of, domain, null, pos_dtype, positions, presence, select, types_of};
use super::out::{Bytes, DistInfo, Proposal, agree_args, dest, fill_stats, try_vec};
use super::types::*;
use super::{Fail, abi, fail, guard, ztree_context};
use crate::api::KnnSubset;
use crate::api::knn_subset::knn_subset;
use crate::api::subset::Runner;
use crate::geom::Real;
use crate::input::ScalarField;
use crate::knn::{KnnOutput, KnnParams, OutputOrder, SourceFields};
use ztree_status::*;

/// Scratch bytes per source or query point, beyond inputs and outputs: measured peaks
/// (BENCHMARKS.md: at most 47 B serial, 150 B per owned point distributed) with margin.
const SCRATCH_PER_POINT: usize = 96;
const SCRATCH_PER_POINT_MPI: usize = 256;

/// Finds `k` nearest neighbours of every query (or of every source when `queries` is
/// NULL: a self-query, where each particle is its own first neighbour, ahead of any
/// duplicate). Array sizes: see `ztree_knn_output`. On an MPI context every rank checks
/// its arguments and then all agree: a rejection on any rank makes every rank return in
/// this call (that rank with its own status, the others with `ZTREE_ERR_REMOTE`).
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ztree_knn(
    ctx: *mut ztree_context,
    sources: *const ztree_particles,
    queries: *const ztree_particles,
    params: *const ztree_knn_params,
    out: *mut ztree_knn_output,
) -> ztree_status {
    // SAFETY: the pointers are checked in `entry`.
    guard(ctx, || unsafe { entry(ctx, sources, queries, params, out, None) })
}

/// The bytes `ztree_knn` with these arguments would allocate on this rank (scratch plus
/// the context-owned outputs for the output pointers that are NULL in `out`): an upper
/// estimate, the number `ztree_config::memory_limit` is compared with. Checks the
/// arguments like `ztree_knn`; computes and allocates nothing; not collective.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ztree_knn_bytes(
    ctx: *mut ztree_context,
    sources: *const ztree_particles,
    queries: *const ztree_particles,
    params: *const ztree_knn_params,
    out: *const ztree_knn_output,
    bytes: *mut i64,
) -> ztree_status {
    guard(ctx, || {
        if bytes.is_null() {
            return Err(null("ztree_knn_bytes: bytes"));
        }
        // SAFETY: checked non-null; `entry` only reads `out` when sizing.
        unsafe { entry(ctx, sources, queries, params, out as *mut _, Some(&mut *bytes)) }
    })
}

/// The arguments as plain values.
pub(crate) struct Args {
    pub src: ztree_particles,
    pub qry: Option<ztree_particles>,
    pub prm: ztree_knn_params,
    pub dtype: i32,
}

unsafe fn entry(
    ctx: *mut ztree_context,
    sources: *const ztree_particles,
    queries: *const ztree_particles,
    params: *const ztree_knn_params,
    out: *mut ztree_knn_output,
    size: Option<&mut i64>,
) -> Result<(), Fail> {
    if ctx.is_null() {
        return Err(null("ztree_knn: ctx"));
    }
    // SAFETY: non-null handles come from `ztree_create*`.
    let ctx = unsafe { &mut *ctx };
    let dims = ctx.config.dims as usize;
    let args = (|| {
        if sources.is_null() || params.is_null() || out.is_null() {
            return Err(null("ztree_knn: sources, params or out"));
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
        Ok((Args { src, qry, prm, dtype }, o))
    })();
    let (args, mut o) = match args {
        Ok(a) => a,
        Err(e) if size.is_some() => return Err(e),
        Err(e) => return agree_args(&ctx.comm, "kNN", Err::<Proposal, _>(e), |p| p).map(|_| ()),
    };
    let sizing = size.is_some();
    #[cfg(feature = "cuda")]
    if !sizing && super::staged::knn_needed(&args) {
        let o = super::staged::knn(ctx, &args, o, dims)?;
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
pub(crate) fn dispatch(ctx: &mut ztree_context, a: &Args, o: &mut ztree_knn_output, size: Option<&mut i64>) -> Result<(), Fail> {
    match (ctx.config.dims, a.dtype) {
        (2, ZTREE_DTYPE_F32) => typed::<f32, 2>(ctx, a, o, size),
        (2, _) => typed::<f64, 2>(ctx, a, o, size),
        (_, ZTREE_DTYPE_F32) => typed::<f32, 3>(ctx, a, o, size),
        _ => typed::<f64, 3>(ctx, a, o, size),
    }
}

/// The arguments after every check that needs no allocation.
pub(crate) struct Checked<T: Real, const D: usize> {
    pub ns: usize,
    pub nq: usize,
    pub k: usize,
    pub rows: usize,
    pub sp: StridedPoints<T, D>,
    pub qp: Option<StridedPoints<T, D>>,
    pub masses: Option<Strided>,
    pub scalar: Option<Strided>,
    /// `params.kth_hint` (host calls only).
    pub kth_hint: Option<Strided>,
    pub order: OutputOrder,
    /// The types of the sources and of the queries, when a mask selects them.
    pub src_types: Option<Strided>,
    pub qry_types: Option<Strided>,
    pub bytes: Bytes,
    proposal: Proposal,
}

impl<T: Real, const D: usize> Checked<T, D> {
    /// What the ranks of an MPI context agree on.
    #[cfg(feature = "cuda")]
    pub(crate) fn proposal(&self) -> &Proposal {
        &self.proposal
    }
}

const KNOWN: u32 =
    ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES | ZTREE_KNN_KTH_DISTANCE | ZTREE_KNN_DENSITY | ZTREE_KNN_SCALAR_MEAN | ZTREE_KNN_PERMUTATION;

fn check<T: Real, const D: usize>(c: &ztree_config, a: &Args, o: &ztree_knn_output, distributed: bool) -> Result<Checked<T, D>, Fail> {
    let (src, prm) = (&a.src, &a.prm);
    let ns = count_of(src, "sources")?;
    let sp = positions::<T, D>(src, ns, "sources")?;
    let (nq, qp) = match &a.qry {
        Some(q) => {
            if q.memory != src.memory {
                return Err(fail(ZTREE_ERR_INVALID_ARGUMENT, "queries and sources must be in the same memory space"));
            }
            let nq = count_of(q, "queries")?;
            (nq, Some(positions::<T, D>(q, nq, "queries")?))
        }
        None => (ns, None),
    };
    if prm.k < 1 {
        return Err(fail(ZTREE_ERR_INVALID_ARGUMENT, format!("k must be at least 1 (got {})", prm.k)));
    }
    let k = prm.k as usize;
    if prm.outputs & !KNOWN != 0 {
        return Err(fail(ZTREE_ERR_INVALID_ARGUMENT, format!("unknown output bits {:#x}", prm.outputs & !KNOWN)));
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
        // Required where there are sources (with none, the other ranks decide).
        let s = Strided::new(&prm.scalar, ns, "params.scalar", &[ZTREE_DTYPE_F32, ZTREE_DTYPE_F64], false)?;
        if s.is_none() && ns > 0 {
            return Err(null("params.scalar.data (needed for ZTREE_KNN_SCALAR_MEAN)"));
        }
        s
    } else {
        None
    };

    // Read only where it is used: host arrays (device calls take no hint).
    let kth_hint = if src.memory == ZTREE_MEMORY_HOST {
        Strided::new(&prm.kth_hint, nq, "params.kth_hint", &[ZTREE_DTYPE_F32, ZTREE_DTYPE_F64], false)?
    } else {
        None
    };

    let src_types = types_of(src, ns, prm.source_type_mask)?;
    let qry_types = match &a.qry {
        Some(q) => types_of(q, nq, prm.query_type_mask)?,
        None => types_of(src, ns, prm.query_type_mask)?,
    };
    let masked = src_types.is_some() || qry_types.is_some();
    if masked && order != OutputOrder::Input {
        return Err(fail(ZTREE_ERR_INVALID_ARGUMENT, "type masks need ZTREE_ORDER_INPUT"));
    }
    let mut bytes = Bytes::default();
    let t = std::mem::size_of::<T>();
    bytes.add(ns + if a.qry.is_some() { nq } else { 0 }, if distributed { SCRATCH_PER_POINT_MPI } else { SCRATCH_PER_POINT });
    if masked {
        // The selections, and the selected queries' rows before they are scattered.
        bytes.add(ns + nq, 8);
        bytes.add(rows, 8 + t);
        bytes.add(nq, 2 * t + 16);
    }
    if kth_hint.is_some() {
        bytes.add(nq, 8); // the hints in the queries' z-order
    }
    let lists = want(ZTREE_KNN_INDICES) || want(ZTREE_KNN_DISTANCES);
    if distributed && lists {
        bytes.add(rows, 8 + t); // the merged rows of the owned queries
    }
    if !T::IS_F64 {
        // f32 distances in T before the widening into the caller's doubles
        if want(ZTREE_KNN_DISTANCES) {
            bytes.add(rows, t);
        }
        if want(ZTREE_KNN_KTH_DISTANCE) {
            bytes.add(nq, t);
        }
    }
    for (bit, ptr_null, len) in [
        (ZTREE_KNN_INDICES, o.indices.is_null(), rows),
        (ZTREE_KNN_DISTANCES, o.distances.is_null(), rows),
        (ZTREE_KNN_KTH_DISTANCE, o.kth_distance.is_null(), nq),
        (ZTREE_KNN_DENSITY, o.density.is_null(), nq),
        (ZTREE_KNN_SCALAR_MEAN, o.scalar_mean.is_null(), nq),
        (ZTREE_KNN_PERMUTATION, o.permutation.is_null(), nq),
    ] {
        if want(bit) && ptr_null {
            bytes.add(len, 8);
        }
    }

    let mut words = config_words(c);
    words.extend([
        a.dtype as u64,
        a.qry.is_some() as u64,
        k as u64,
        prm.outputs as u64,
        prm.order as u64,
        prm.source_type_mask as u64,
        prm.query_type_mask as u64,
    ]);
    let optional = vec![if want(ZTREE_KNN_DENSITY) { presence(&masses, ns) } else { None }, presence(&scalar, ns)];
    Ok(Checked { ns, nq, k, rows, sp, qp, masses, scalar, kth_hint, order, src_types, qry_types, bytes, proposal: Proposal { words, optional } })
}

pub(crate) fn typed<T: Real, const D: usize>(
    ctx: &mut ztree_context,
    a: &Args,
    o: &mut ztree_knn_output,
    size: Option<&mut i64>,
) -> Result<(), Fail> {
    let checked = check::<T, D>(&ctx.config, a, o, ctx.comm.is_some());
    if let Some(s) = size {
        *s = checked?.bytes.as_i64();
        return Ok(());
    }
    // Device arrays: the CUDA back end, serial or distributed (a failed check goes to the
    // call's agreement as it is).
    #[cfg(feature = "cuda")]
    if a.src.memory == ZTREE_MEMORY_CUDA_DEVICE {
        return super::device::knn(ctx, a, o, checked);
    }
    let want = |bit: u32| a.prm.outputs & bit != 0;
    let limit = ctx.config.memory_limit;
    let b = &mut ctx.buffers;
    // Every allocation before the agreement, so that running out of memory on one rank is
    // an error on all of them. SAFETY (all `dest` calls): the header documents the sizes
    // of caller arrays.
    let ready = checked.and_then(|c| {
        c.bytes.check(limit, "this kNN call")?;
        let (rows, nq) = (c.rows, c.nq);
        // f32 distances go through a T buffer and are widened into the caller's doubles;
        // f64 ones are written in place.
        let dist_t: Vec<T> = if want(ZTREE_KNN_DISTANCES) && !T::IS_F64 { try_vec(rows, T::ZERO, "kNN distances")? } else { Vec::new() };
        let kth_t: Vec<T> = if want(ZTREE_KNN_KTH_DISTANCE) && !T::IS_F64 { try_vec(nq, T::ZERO, "kNN k-th distances")? } else { Vec::new() };
        let indices = unsafe { wanted(want(ZTREE_KNN_INDICES), o.indices, &mut b.indices, rows, "kNN indices")? };
        let distances = unsafe { wanted(want(ZTREE_KNN_DISTANCES), o.distances, &mut b.distances, rows, "kNN distances")? };
        let kth = unsafe { wanted(want(ZTREE_KNN_KTH_DISTANCE), o.kth_distance, &mut b.kth, nq, "kNN k-th distances")? };
        let density = unsafe { wanted(want(ZTREE_KNN_DENSITY), o.density, &mut b.density, nq, "kNN densities")? };
        let scalar_mean = unsafe { wanted(want(ZTREE_KNN_SCALAR_MEAN), o.scalar_mean, &mut b.scalar_mean, nq, "kNN scalar means")? };
        let permutation = unsafe { wanted(want(ZTREE_KNN_PERMUTATION), o.permutation, &mut b.permutation, nq, "kNN permutation")? };
        Ok((c, dist_t, kth_t, indices, distances, kth, density, scalar_mean, permutation))
    });
    let ((mut c, mut dist_t, mut kth_t, indices, distances, kth, density, scalar_mean, permutation), present) =
        agree_args(&ctx.comm, "kNN", ready, |r| &r.0.proposal)?;

    // A rank without sources takes the other ranks' optional arrays, empty.
    if present[0] && c.masses.is_none() {
        c.masses = Some(Strided::empty(ZTREE_DTYPE_F64));
    }
    if present[1] && c.scalar.is_none() {
        c.scalar = Some(Strided::empty(ZTREE_DTYPE_F64));
    }
    // Without per-particle masses every particle weighs config.particle_mass (the FoF rule).
    let uniform = Constant { value: ctx.config.particle_mass, len: c.ns };
    let masses: Option<&dyn ScalarField> = match &c.masses {
        Some(m) => Some(m),
        None if ctx.config.particle_mass != 1.0 => Some(&uniform),
        None => None,
    };
    let fields =
        SourceFields { masses: if want(ZTREE_KNN_DENSITY) { masses } else { None }, scalar: c.scalar.as_ref().map(|s| s as &dyn ScalarField) };
    let (p_idx, p_den, p_sm, p_perm) = (ptr_of(&indices), ptr_of(&density), ptr_of(&scalar_mean), ptr_of(&permutation));
    let (p_dist, p_kth) = (ptr_of(&distances), ptr_of(&kth));
    let (distances, kth) = if T::IS_F64 { (None, None) } else { (distances, kth) };
    let mut kout = KnnOutput {
        indices,
        // SAFETY (in_place): T is f64; the f64 slices were dropped above, the pointers are theirs.
        distances: if T::IS_F64 { p_dist.map(|p| unsafe { in_place::<T>(p, c.rows) }) } else { want(ZTREE_KNN_DISTANCES).then_some(&mut dist_t[..]) },
        kth_distance: if T::IS_F64 {
            p_kth.map(|p| unsafe { in_place::<T>(p, c.nq) })
        } else {
            want(ZTREE_KNN_KTH_DISTANCE).then_some(&mut kth_t[..])
        },
        density,
        scalar_mean,
        order: c.order,
        permutation,
    };
    let kp = KnnParams { k: c.k, kth_hint: c.kth_hint.as_ref().map(|h| h as &dyn ScalarField) };
    let dom = domain::<D>(&ctx.config);
    #[allow(unused_mut)]
    let mut dist: Option<DistInfo> = None;
    let masked = c.src_types.is_some() || c.qry_types.is_some();
    let stats = match (&ctx.comm, &c.qp) {
        // Type masks (host arrays: `check` refused device arrays).
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
                Some(q) => knn_subset(runner, &dom, src, Some(KnnSubset { points: q, sel: &qsel[..] }), &fields, &kp, &mut kout)?,
                // A self-query: the queries' selection over the sources' points.
                None => knn_subset(runner, &dom, src, Some(KnnSubset { points: &c.sp, sel: &qsel[..] }).filter(|_| !equal), &fields, &kp, &mut kout)?,
            }
        }
        #[cfg(feature = "mpi")]
        (Some(comm), _) => {
            let on = crate::mpi::On { ctx: &ctx.core, comm };
            let st = crate::api::dist::knn_host(on, &dom, &c.sp, c.qp.as_ref(), &fields, &kp, &mut kout, None)?;
            let mut local = st.local.clone();
            local.timings = st.dist.timings.clone();
            local.padded_queries = st.padded_queries;
            dist = Some(st.dist);
            local
        }
        (_, None) => ctx.core.knn_self(&dom, &c.sp, &fields, &kp, &mut kout)?,
        (_, Some(q)) => ctx.core.knn(&dom, &c.sp, q, &fields, &kp, &mut kout)?,
    };
    if let Some(d) = distances {
        d.iter_mut().zip(&dist_t).for_each(|(d, s)| *d = s.to_f64());
    }
    if let Some(d) = kth {
        d.iter_mut().zip(&kth_t).for_each(|(d, s)| *d = s.to_f64());
    }
    if let Some(p) = p_dist {
        o.distances = p;
    }
    if let Some(p) = p_kth {
        o.kth_distance = p;
    }
    if let Some(p) = p_idx {
        o.indices = p;
    }
    if let Some(p) = p_den {
        o.density = p;
    }
    if let Some(p) = p_sm {
        o.scalar_mean = p;
    }
    if let Some(p) = p_perm {
        o.permutation = p;
    }
    o.n_queries = c.nq as i64;
    o.padded_queries = stats.padded_queries as i64;
    let extra = (dist_t.capacity() + kth_t.capacity()) * std::mem::size_of::<T>();
    ctx.stats = fill_stats(&stats.timings, stats.scratch_bytes + extra, c.ns, c.nq, 0, dist.as_ref());
    Ok(())
}

/// An output slot when `on`: the caller's array or the context buffer (see `dest`).
///
/// # Safety
/// As `dest`.
unsafe fn wanted<'a, V: Copy + Default>(on: bool, ptr: *mut V, buf: &'a mut Vec<V>, len: usize, what: &str) -> Result<Option<&'a mut [V]>, Fail> {
    if on { unsafe { dest(ptr, buf, len, what) }.map(Some) } else { Ok(None) }
}

/// A caller's (or context-owned) f64 output array of `len` elements as `[T]`, for T = f64.
///
/// # Safety
/// `T` is f64 (`T::IS_F64`); `p` points to `len` f64 that nothing else touches while the
/// slice lives (the `&mut [f64]` it came from is no longer used).
unsafe fn in_place<'a, T: Real>(p: *mut f64, len: usize) -> &'a mut [T] {
    assert!(T::IS_F64 && std::mem::size_of::<T>() == std::mem::size_of::<f64>());
    // SAFETY: T is f64 (same size, alignment and representation); see the contract above.
    unsafe { std::slice::from_raw_parts_mut(p.cast::<T>(), len) }
}

fn ptr_of<V>(s: &Option<&mut [V]>) -> Option<*mut V> {
    s.as_ref().map(|s| s.as_ptr() as *mut V)
}
