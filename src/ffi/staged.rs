//! Device arrays in the calls the CUDA back end does not compute yet — a type mask on any
//! job, radius queries and DBSCAN on an MPI context — are staged: the rank's particles and
//! per-particle parameter arrays are copied to host memory, the host call runs (the same
//! collective as a host rank's, so ranks may mix), and its per-particle outputs are copied
//! to the caller's device arrays or the context's device buffers, as a device call leaves
//! them. Results are the host call's; the cost is the copies across the bus.

use std::ffi::c_void;
use std::sync::Arc;

use super::device::{DeviceState, Slot};
use super::out::{Proposal, agree_args};
use super::types::*;
use super::{Fail, ztree_context};
use crate::backend::cuda::device::{DevPtr, Device};
use crate::backend::cuda::prims::{self, Strided as DevStrided};

/// The device the rank's arrays live on, and the host copies made of them.
struct Staging {
    dev: Arc<dyn Device>,
    keep: Vec<Vec<u8>>,
}

fn elem_size(dtype: i32) -> Option<usize> {
    match dtype {
        ZTREE_DTYPE_U8 => Some(1),
        ZTREE_DTYPE_F32 | ZTREE_DTYPE_I32 | ZTREE_DTYPE_U32 => Some(4),
        ZTREE_DTYPE_F64 | ZTREE_DTYPE_I64 | ZTREE_DTYPE_U64 => Some(8),
        _ => None,
    }
}

impl Staging {
    fn new(ctx: &mut ztree_context, p: &ztree_particles, stream: *mut c_void) -> Result<Self, Fail> {
        Ok(Self { dev: ctx.device.device(p.pos[0].data as DevPtr, stream)?, keep: Vec::new() })
    }

    /// A host copy of `n` elements of a device array (packed); an absent array, or one of
    /// an element type the host call refuses before reading it, as it is.
    fn array(&mut self, a: &ztree_array, n: usize) -> Result<ztree_array, Fail> {
        let Some(size) = elem_size(a.dtype).filter(|_| !a.data.is_null() && a.stride >= 0) else { return Ok(*a) };
        let v = prims::download_strided(&self.dev, DevStrided { data: a.data as u64, stride: a.stride }, n, size)?;
        let out = ztree_array { data: v.as_ptr().cast(), dtype: a.dtype, stride: 0 };
        self.keep.push(v);
        Ok(out)
    }

    /// Host copies of the particles' arrays.
    fn particles(&mut self, p: &ztree_particles, dims: usize) -> Result<ztree_particles, Fail> {
        let n = usize::try_from(p.count).unwrap_or(0);
        let mut h = *p;
        h.memory = ZTREE_MEMORY_HOST;
        for d in 0..dims {
            h.pos[d] = self.array(&p.pos[d], n)?;
            h.vel[d] = self.array(&p.vel[d], n)?;
        }
        h.mass = self.array(&p.mass, n)?;
        h.ids = self.array(&p.ids, n)?;
        h.types = self.array(&p.types, n)?;
        Ok(h)
    }

    /// `len` values at `host` into the caller's device array `caller`, or the context's
    /// device buffer `slot` (NULL, or the pointer the context returned before).
    fn upload<V>(&self, st: &mut DeviceState, slot: Slot, caller: *mut V, host: *const V, len: usize) -> Result<*mut V, Fail> {
        let bytes = len * size_of::<V>();
        let p = st.output(&self.dev, slot, caller.cast(), bytes)?;
        if bytes > 0 {
            // SAFETY: `host` holds `len` values (an output of the host call); the
            // destination at least `bytes`.
            unsafe { self.dev.upload(p, std::slice::from_raw_parts(host.cast::<u8>(), bytes))? };
        }
        Ok(p as *mut V)
    }
}

fn on_device(p: &ztree_particles) -> bool {
    p.memory == ZTREE_MEMORY_CUDA_DEVICE
}

/// A failure before the host call's agreement: every rank's error, as the host call's.
fn agreed<R>(ctx: &ztree_context, job: &str, e: Fail) -> Result<R, Fail> {
    agree_args(&ctx.comm, job, Err::<Proposal, _>(e), |p| p)?;
    unreachable!("an agreement on an error fails")
}

pub(crate) fn knn_needed(a: &super::knn::Args) -> bool {
    (on_device(&a.src) || a.qry.as_ref().is_some_and(on_device)) && (a.prm.source_type_mask | a.prm.query_type_mask) != 0
}

/// `ztree_knn` staged; returns the output struct to write back.
pub(crate) fn knn(ctx: &mut ztree_context, a: &super::knn::Args, mut o: ztree_knn_output, dims: usize) -> Result<ztree_knn_output, Fail> {
    let staged = (|| -> Result<_, Fail> {
        let mut s = Staging::new(ctx, &a.src, a.prm.cuda_stream)?;
        let src = s.particles(&a.src, dims)?;
        let qry = a.qry.as_ref().map(|q| s.particles(q, dims)).transpose()?;
        let mut prm = a.prm;
        prm.scalar = s.array(&a.prm.scalar, usize::try_from(a.src.count).unwrap_or(0))?;
        // Device calls take no k-th distance hint.
        prm.kth_hint = ztree_array { data: std::ptr::null(), dtype: ZTREE_DTYPE_NONE, stride: 0 };
        Ok((s, super::knn::Args { src, qry, prm, dtype: a.dtype }))
    })();
    let (s, h) = match staged {
        Ok(x) => x,
        Err(e) => return agreed(ctx, "kNN", e),
    };
    let mut ho = o;
    ho.indices = std::ptr::null_mut();
    ho.distances = std::ptr::null_mut();
    ho.kth_distance = std::ptr::null_mut();
    ho.density = std::ptr::null_mut();
    ho.scalar_mean = std::ptr::null_mut();
    ho.permutation = std::ptr::null_mut();
    super::knn::dispatch(ctx, &h, &mut ho, None)?;
    let (nq, k) = (ho.n_queries as usize, h.prm.k.max(0) as usize);
    let want = |bit: u32| h.prm.outputs & bit != 0;
    let st = &mut ctx.device;
    if want(ZTREE_KNN_INDICES) {
        o.indices = s.upload(st, Slot::Indices, o.indices, ho.indices, nq * k)?;
    }
    if want(ZTREE_KNN_DISTANCES) {
        o.distances = s.upload(st, Slot::Distances, o.distances, ho.distances, nq * k)?;
    }
    if want(ZTREE_KNN_KTH_DISTANCE) {
        o.kth_distance = s.upload(st, Slot::Kth, o.kth_distance, ho.kth_distance, nq)?;
    }
    if want(ZTREE_KNN_DENSITY) {
        o.density = s.upload(st, Slot::Density, o.density, ho.density, nq)?;
    }
    if want(ZTREE_KNN_SCALAR_MEAN) {
        o.scalar_mean = s.upload(st, Slot::ScalarMean, o.scalar_mean, ho.scalar_mean, nq)?;
    }
    if want(ZTREE_KNN_PERMUTATION) {
        o.permutation = s.upload(st, Slot::Permutation, o.permutation, ho.permutation, nq)?;
    }
    o.n_queries = ho.n_queries;
    o.padded_queries = ho.padded_queries;
    Ok(o)
}

pub(crate) fn fof_needed(p: &ztree_particles, prm: &ztree_fof_params) -> bool {
    on_device(p) && (prm.type_mask != 0 || prm.columns != 0)
}

/// `ztree_fof` staged: the labels to the device, the catalogue on the host as always.
pub(crate) fn fof(
    ctx: &mut ztree_context,
    p: &ztree_particles,
    prm: &ztree_fof_params,
    dtype: i32,
    mut o: ztree_fof_output,
    dims: usize,
) -> Result<ztree_fof_output, Fail> {
    let staged = (|| -> Result<_, Fail> {
        let mut s = Staging::new(ctx, p, prm.cuda_stream)?;
        let h = s.particles(p, dims)?;
        Ok((s, h))
    })();
    let (s, h) = match staged {
        Ok(x) => x,
        Err(e) => return agreed(ctx, "FoF", e),
    };
    let caller = o.labels;
    o.labels = std::ptr::null_mut();
    super::fof::dispatch(ctx, &h, prm, dtype, &mut o, None)?;
    let n = usize::try_from(p.count).unwrap_or(0);
    o.labels = s.upload(&mut ctx.device, Slot::Labels, caller, o.labels, n)?;
    Ok(o)
}

pub(crate) fn radius_needed(ctx: &ztree_context, a: &super::radius::Args) -> bool {
    on_device(&a.src) && ((a.prm.source_type_mask | a.prm.query_type_mask) != 0 || ctx.comm.is_some())
}

/// `ztree_radius` staged: the per-query outputs and the lists to the device.
pub(crate) fn radius(ctx: &mut ztree_context, a: &super::radius::Args, mut o: ztree_radius_output, dims: usize) -> Result<ztree_radius_output, Fail> {
    let staged = (|| -> Result<_, Fail> {
        let mut s = Staging::new(ctx, &a.src, a.prm.cuda_stream)?;
        let src = s.particles(&a.src, dims)?;
        let qry = a.qry.as_ref().map(|q| s.particles(q, dims)).transpose()?;
        let mut prm = a.prm;
        let ns = usize::try_from(a.src.count).unwrap_or(0);
        let nq = a.qry.as_ref().map_or(ns, |q| usize::try_from(q.count).unwrap_or(0));
        prm.scalar = s.array(&a.prm.scalar, ns)?;
        prm.radii = s.array(&a.prm.radii, nq)?;
        Ok((s, super::radius::Args { src, qry, prm, dtype: a.dtype }))
    })();
    let (s, h) = match staged {
        Ok(x) => x,
        Err(e) => return agreed(ctx, "radius", e),
    };
    let mut ho = o;
    ho.counts = std::ptr::null_mut();
    ho.scalar_sum = std::ptr::null_mut();
    ho.scalar_mean = std::ptr::null_mut();
    ho.density = std::ptr::null_mut();
    super::radius::dispatch(ctx, &h, &mut ho, None)?;
    let nq = ho.n_queries as usize;
    let want = |bit: u32| h.prm.outputs & bit != 0;
    let st = &mut ctx.device;
    if want(ZTREE_RADIUS_COUNTS) {
        o.counts = s.upload(st, Slot::Counts, o.counts, ho.counts, nq)?;
    }
    if want(ZTREE_RADIUS_SCALAR_SUM) {
        o.scalar_sum = s.upload(st, Slot::ScalarSum, o.scalar_sum, ho.scalar_sum, nq)?;
    }
    if want(ZTREE_RADIUS_SCALAR_MEAN) {
        o.scalar_mean = s.upload(st, Slot::ScalarMean, o.scalar_mean, ho.scalar_mean, nq)?;
    }
    if want(ZTREE_RADIUS_DENSITY) {
        o.density = s.upload(st, Slot::Density, o.density, ho.density, nq)?;
    }
    if want(ZTREE_RADIUS_LISTS) {
        let pairs = ho.n_pairs as usize;
        o.offsets = s.upload(st, Slot::ListOffsets, std::ptr::null_mut(), ho.offsets, nq + 1)?;
        o.indices = s.upload(st, Slot::ListIndices, std::ptr::null_mut(), ho.indices, pairs)?;
        o.distances = if want(ZTREE_RADIUS_DISTANCES) {
            s.upload(st, Slot::ListDistances, std::ptr::null_mut(), ho.distances, pairs)?
        } else {
            std::ptr::null()
        };
    }
    o.n_queries = ho.n_queries;
    o.n_pairs = ho.n_pairs;
    Ok(o)
}

pub(crate) fn dbscan_needed(ctx: &ztree_context, p: &ztree_particles, prm: &ztree_dbscan_params) -> bool {
    on_device(p) && (prm.type_mask != 0 || prm.columns != 0 || ctx.comm.is_some())
}

/// `ztree_dbscan` staged: labels and classes to the device, the catalogue on the host.
pub(crate) fn dbscan(
    ctx: &mut ztree_context,
    p: &ztree_particles,
    prm: &ztree_dbscan_params,
    dtype: i32,
    mut o: ztree_dbscan_output,
    dims: usize,
) -> Result<ztree_dbscan_output, Fail> {
    let staged = (|| -> Result<_, Fail> {
        let mut s = Staging::new(ctx, p, prm.cuda_stream)?;
        let h = s.particles(p, dims)?;
        Ok((s, h))
    })();
    let (s, h) = match staged {
        Ok(x) => x,
        Err(e) => return agreed(ctx, "DBSCAN", e),
    };
    let (labels, class) = (o.labels, o.point_class);
    o.labels = std::ptr::null_mut();
    o.point_class = std::ptr::null_mut();
    super::dbscan::dispatch(ctx, &h, prm, dtype, &mut o, None)?;
    let n = usize::try_from(p.count).unwrap_or(0);
    o.labels = s.upload(&mut ctx.device, Slot::Labels, labels, o.labels, n)?;
    if prm.classes != 0 {
        o.point_class = s.upload(&mut ctx.device, Slot::Classes, class, o.point_class, n)?;
    }
    Ok(o)
}
