//! Device arrays at the C face (serial contexts): `ztree_knn` on CUDA device particles runs
//! the CUDA back end on the device the arrays live on, on the caller's stream, and writes
//! its per-query results into caller device arrays or context-owned device buffers that
//! grow on demand (a pointer the context returned before means that buffer again).

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

use super::fof::Checked as FofChecked;
use super::input::{Strided, StridedPoints, domain};
use super::knn::{Args, Checked};
use super::out::fill_stats;
use super::types::*;
use super::{Fail, fail, ztree_context};
use crate::backend::cuda::backend::{Cuda, DevField, DevOut, DevPoints, FieldType};
use crate::backend::cuda::device::{DevBuf, DevPtr, Device, HeldMemory};
use crate::backend::cuda::prims::{self, Strided as DevStrided};
use crate::error::Error;
use crate::fof::catalogue::CatalogueRequest;
use crate::fof::{Catalogue, FofStats};
use crate::geom::Real;
use crate::knn::OutputOrder;
use crate::pipeline::KnnSinks;
use crate::pipeline::knn::KnnFields;
use ztree_status::*;

/// Outputs a context can own on the device.
#[derive(Clone, Copy)]
pub(crate) enum Slot {
    Indices,
    Distances,
    Kth,
    Density,
    ScalarMean,
    Permutation,
    Labels,
}
const SLOTS: usize = 7;

/// The device of a context's last device call and the output buffers it owns there.
#[derive(Default)]
pub(crate) struct DeviceState {
    /// (device ordinal, -1 for the emulator; the caller's stream).
    key: Option<(i32, usize)>,
    dev: Option<Arc<dyn Device>>,
    slots: [Option<DevBuf<u8>>; SLOTS],
}

/// Test hook of builds with the emulator: when set, "device" calls run on the emulated
/// device, whose memory is host memory. Not in shipped builds.
#[cfg(feature = "cuda-emu")]
pub(crate) static EMULATE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

fn emulated() -> bool {
    #[cfg(feature = "cuda-emu")]
    return EMULATE.load(std::sync::atomic::Ordering::Relaxed);
    #[cfg(not(feature = "cuda-emu"))]
    false
}

/// Ok when device arrays can be used in this process; `ZTREE_ERR_NO_DEVICE` saying why not.
pub(crate) fn usable(what: &str) -> Result<(), Fail> {
    if emulated() {
        return Ok(());
    }
    crate::backend::cuda::driver::device_count()
        .map(|_| ())
        .map_err(|e| fail(ZTREE_ERR_NO_DEVICE, format!("{what}: CUDA device arrays given, but {e}")))
}

impl DeviceState {
    /// The device holding `ptr`, working on `stream`; output buffers of another device or
    /// stream are dropped.
    fn device(&mut self, ptr: DevPtr, stream: *mut c_void) -> Result<Arc<dyn Device>, Fail> {
        // No pointer (a rank or call without particles): the device used last, else device 0.
        let ordinal = match (emulated(), ptr) {
            (true, _) => -1,
            (false, 0) => self.key.map_or(0, |k| k.0),
            (false, p) => crate::backend::cuda::driver::CudaDevice::ordinal_of(p)?,
        };
        let key = (ordinal, stream as usize);
        if self.key != Some(key) || self.dev.is_none() {
            self.slots = Default::default();
            let dev: Arc<dyn Device> = if ordinal < 0 {
                #[cfg(feature = "cuda-emu")]
                {
                    Arc::new(crate::backend::cuda::emu::EmuDevice::default())
                }
                #[cfg(not(feature = "cuda-emu"))]
                unreachable!("the emulator exists only in builds with it")
            } else {
                Arc::new(crate::backend::cuda::driver::CudaDevice::open(ordinal, stream)?)
            };
            self.dev = Some(dev);
            self.key = Some(key);
        }
        Ok(self.dev.clone().unwrap())
    }

    /// Where output `slot` goes: the caller's device array, or (NULL, or the pointer the
    /// context returned before) a context buffer of at least `bytes`.
    fn output(&mut self, dev: &Arc<dyn Device>, slot: Slot, caller: *mut c_void, bytes: usize) -> Result<DevPtr, Fail> {
        let s = &mut self.slots[slot as usize];
        let own = s.as_ref().map(|b| b.ptr());
        if !caller.is_null() && Some(caller as DevPtr) != own {
            return Ok(caller as DevPtr);
        }
        if s.as_ref().is_none_or(|b| b.len() < bytes) {
            *s = None; // freed before the larger one is taken
            *s = Some(DevBuf::new(dev, bytes.max(1))?);
        }
        Ok(s.as_ref().unwrap().ptr())
    }
}

fn dev_strided(s: &Strided) -> DevStrided {
    let (data, stride) = s.raw();
    DevStrided { data, stride }
}

fn dev_points<'a, T: Real, const D: usize>(p: &'a StridedPoints<T, D>, n: usize) -> DevPoints<'a, T, D> {
    DevPoints { pos: std::array::from_fn(|d| dev_strided(&p.arrays[d])), n, _borrow: PhantomData }
}

fn dev_field<'a>(s: &'a Strided, n: usize) -> DevField<'a> {
    let ty = match s.dtype() {
        ZTREE_DTYPE_F32 => FieldType::F32,
        ZTREE_DTYPE_F64 => FieldType::F64,
        ZTREE_DTYPE_I32 => FieldType::I32,
        ZTREE_DTYPE_I64 => FieldType::I64,
        ZTREE_DTYPE_U32 => FieldType::U32,
        _ => FieldType::U64,
    };
    DevField { a: dev_strided(s), ty, n, _borrow: PhantomData }
}

/// # Safety
/// `out` is only written: `len` elements of device memory (the caller's or the context's).
unsafe fn sink<'a, V>(ptr: Option<DevPtr>, len: usize) -> Option<DevOut<'a, V>> {
    // SAFETY: the caller's promise.
    ptr.map(|p| unsafe { DevOut::new(p, len) })
}

/// `ztree_knn` on device arrays (serial contexts; checked by `knn::check`).
pub(crate) fn knn<T: Real, const D: usize>(ctx: &mut ztree_context, a: &Args, o: &mut ztree_knn_output, c: Checked<T, D>) -> Result<(), Fail> {
    let want = |bit: u32| a.prm.outputs & bit != 0;
    c.bytes.check(ctx.config.memory_limit, "this kNN call")?;
    if c.ns == 0 {
        return Err(Error::NoSources.into());
    }
    let (rows, nq) = (c.rows, c.nq);
    let st = &mut ctx.device;
    let dev = st.device(c.sp.arrays[0].raw().0, a.prm.cuda_stream)?;
    let _held = HeldMemory::new(&*dev);
    let cuda = Cuda { dev: dev.clone() };
    let mut slot = |on: bool, s: Slot, caller: *mut c_void, bytes: usize| -> Result<Option<DevPtr>, Fail> {
        if on { st.output(&dev, s, caller, bytes).map(Some) } else { Ok(None) }
    };
    let idx = slot(want(ZTREE_KNN_INDICES), Slot::Indices, o.indices.cast(), rows * 8)?;
    let dist = slot(want(ZTREE_KNN_DISTANCES), Slot::Distances, o.distances.cast(), rows * 8)?;
    let kth = slot(want(ZTREE_KNN_KTH_DISTANCE), Slot::Kth, o.kth_distance.cast(), nq * 8)?;
    let dens = slot(want(ZTREE_KNN_DENSITY), Slot::Density, o.density.cast(), nq * 8)?;
    let mean = slot(want(ZTREE_KNN_SCALAR_MEAN), Slot::ScalarMean, o.scalar_mean.cast(), nq * 8)?;
    let perm = slot(want(ZTREE_KNN_PERMUTATION), Slot::Permutation, o.permutation.cast(), nq * 8)?;
    // f32 distances are widened into the f64 outputs by the kernel that computes them.
    let narrow = T::NAME == "f32";
    // The statistics' scratch is the device memory the call holds at most beyond what was
    // live before (the context's output buffers): from here on.
    let base = dev.tracker().reset_peak();

    // The fields: masses (or the constant particle mass) for the density, the scalar.
    let masses = if want(ZTREE_KNN_DENSITY) { c.masses.as_ref().map(|m| dev_field(m, c.ns)) } else { None };
    let constant = if want(ZTREE_KNN_DENSITY) && masses.is_none() && ctx.config.particle_mass != 1.0 {
        Some(prims::fill_f64(&dev, c.ns, ctx.config.particle_mass)?)
    } else {
        None
    };
    let masses = masses.or(constant.as_ref().map(|b| DevField {
        a: DevStrided { data: b.ptr(), stride: 0 },
        ty: FieldType::F64,
        n: c.ns,
        _borrow: PhantomData,
    }));
    let scalar = c.scalar.as_ref().map(|s| dev_field(s, c.ns));
    for (what, f) in [("masses", &masses), ("scalar field", &scalar)] {
        if let Some(f) = f {
            crate::input::validate::check_scalar(what, &cuda.fetch_f64(f)?, c.ns)?;
        }
    }

    // SAFETY (all sinks): each pointer is a caller device array of the documented size or
    // a context buffer sized above, written only by this call.
    let sinks = unsafe {
        KnnSinks::<Cuda, T> {
            indices: sink(idx, rows),
            distances: if narrow { dist.map(|p| DevOut::new_wide(p, rows)) } else { sink(dist, rows) },
            kth: if narrow { kth.map(|p| DevOut::new_wide(p, nq)) } else { sink(kth, nq) },
            density: sink(dens, nq),
            scalar_mean: sink(mean, nq),
            zorder: c.order == OutputOrder::ZOrder,
            ..Default::default()
        }
    };
    let sp = dev_points(&c.sp, c.ns);
    let qp = c.qp.as_ref().map(|q| dev_points(q, nq));
    let fields = KnnFields::<Cuda> { masses, scalar, kth_hint: None };
    let dom = domain::<D>(&ctx.config);
    let core = &ctx.core;
    let (mut stats, zs) = core.pool.install(|| crate::pipeline::knn::run(&cuda, &dom, &sp, qp.as_ref(), &fields, c.k, &core.config.tree, &sinks))?;
    stats.scratch_bytes = dev.tracker().peak() - base;
    if let Some(p) = perm {
        // Which query each row is: the z-order's input indices, or the identity.
        match c.order {
            OutputOrder::ZOrder => prims::u32_to_i64(&dev, zs.queries().1, p)?,
            OutputOrder::Input => prims::u32_to_i64(&dev, &prims::iota(&dev, nq)?, p)?,
        }
    }
    let ptr = |p: Option<DevPtr>, old: *mut f64| p.map_or(old, |p| p as *mut f64);
    if let Some(p) = idx {
        o.indices = p as *mut i64;
    }
    o.distances = ptr(dist, o.distances);
    o.kth_distance = ptr(kth, o.kth_distance);
    o.density = ptr(dens, o.density);
    o.scalar_mean = ptr(mean, o.scalar_mean);
    if let Some(p) = perm {
        o.permutation = p as *mut i64;
    }
    o.n_queries = nq as i64;
    o.padded_queries = stats.padded_queries as i64;
    ctx.stats = fill_stats(&stats.timings, stats.scratch_bytes, c.ns, nq, 0, None);
    Ok(())
}

/// `ztree_fof` on device arrays (serial contexts; checked by `fof::check`): labels into
/// the caller's device array or a context-owned one, the catalogue on the host.
pub(crate) fn fof<T: Real, const D: usize>(
    ctx: &mut ztree_context,
    o: &ztree_fof_output,
    c: &FofChecked<T, D>,
    stream: *mut c_void,
) -> Result<(Catalogue<D>, FofStats, *mut i64), Fail> {
    c.bytes.check(ctx.config.memory_limit, "this FoF call")?;
    let n = c.n;
    let dom = domain::<D>(&ctx.config);
    let l = c.params.linking_length.resolve(&dom, n)?;
    let st = &mut ctx.device;
    let dev = st.device(c.pos.arrays[0].raw().0, stream)?;
    let _held = HeldMemory::new(&*dev);
    let labels = st.output(&dev, Slot::Labels, o.labels.cast(), n * 8)?;
    let cuda = Cuda { dev: dev.clone() };
    let vel: Option<[DevField<'_>; D]> = c.vel.as_ref().map(|v| std::array::from_fn(|d| dev_field(&v.0[d], n)));
    let masses = c.masses.as_ref().map(|m| dev_field(m, n));
    let ids = c.ids.as_ref().map(|i| dev_field(i, n));
    let pm = ctx.config.particle_mass;
    cuda.validate_fof_fields(vel.as_ref(), masses.as_ref(), pm, ids.as_ref(), n)?;
    if n == 0 {
        let stats = FofStats { linking_length: l, ..Default::default() };
        return Ok((Catalogue::empty(c.params.order, vel.is_some()), stats, labels as *mut i64));
    }
    let req = CatalogueRequest::<Cuda, D> {
        box_len: dom.box_lengths(),
        velocities: vel,
        masses,
        particle_mass: pm,
        ids,
        min_members: c.params.min_members,
        order: c.params.order,
        members: c.params.members,
    };
    let pts = dev_points(&c.pos, n);
    // SAFETY: `labels` is n i64 of device memory, written only by this call.
    let out = unsafe { DevOut::new(labels, n) };
    let core = &ctx.core;
    let base = cuda.dev.tracker().reset_peak();
    let (cat, mut stats) = core.pool.install(|| crate::pipeline::fof::run(&cuda, &dom, &pts, l, &req, &core.config.tree, &out))?;
    stats.scratch_bytes = cuda.dev.tracker().peak() - base;
    Ok((cat, stats, labels as *mut i64))
}

// ---- MPI contexts: device arrays staged through host copies ----

/// Host copies of a caller's device arrays, alive for one call (8-byte aligned).
#[derive(Default)]
struct Staging {
    keep: Vec<Vec<u64>>,
}

impl Staging {
    /// A packed host copy of `n` elements of a device array (absent or empty arrays as given).
    fn array(&mut self, dev: &Arc<dyn Device>, a: &ztree_array, n: usize) -> Result<ztree_array, Fail> {
        let Some(size) = super::input::dtype_size(a.dtype) else { return Ok(*a) };
        if a.data.is_null() || n == 0 {
            return Ok(*a);
        }
        let raw = prims::download_strided(dev, DevStrided { data: a.data as DevPtr, stride: a.stride }, n, size)?;
        // Re-homed into u64 words: the host call reads the elements aligned.
        let mut packed = vec![0u64; raw.len().div_ceil(8)];
        // SAFETY: `packed` holds at least raw.len() bytes.
        unsafe { std::ptr::copy_nonoverlapping(raw.as_ptr(), packed.as_mut_ptr().cast::<u8>(), raw.len()) };
        let data = packed.as_ptr() as *const c_void;
        self.keep.push(packed);
        Ok(ztree_array { data, dtype: a.dtype, stride: 0 })
    }

    /// Host copies of every array of `p`.
    fn particles(&mut self, dev: &Arc<dyn Device>, p: &ztree_particles) -> Result<ztree_particles, Fail> {
        let n = p.count.max(0) as usize;
        let mut h = *p;
        h.memory = ZTREE_MEMORY_HOST;
        for d in 0..3 {
            h.pos[d] = self.array(dev, &p.pos[d], n)?;
            h.vel[d] = self.array(dev, &p.vel[d], n)?;
        }
        h.mass = self.array(dev, &p.mass, n)?;
        h.ids = self.array(dev, &p.ids, n)?;
        Ok(h)
    }
}

impl DeviceState {
    /// Copies `len` host elements into output `slot` on the device (see `output`).
    fn put<V>(&mut self, dev: &Arc<dyn Device>, slot: Slot, caller: *mut V, host: *const V, len: usize) -> Result<*mut V, Fail> {
        let bytes = len * size_of::<V>();
        let dst = self.output(dev, slot, caller.cast(), bytes)?;
        if bytes > 0 {
            // SAFETY: `host` is `len` elements the host call just wrote; `dst` holds `bytes`.
            unsafe { dev.upload(dst, std::slice::from_raw_parts(host.cast::<u8>(), bytes))? };
        }
        Ok(dst as *mut V)
    }
}

/// Runs `stage` (host copies of the device arrays); a failure there still takes part in the
/// call's one agreement, so no rank is left waiting.
fn staged<R>(
    ctx: &mut ztree_context,
    what: &str,
    stage: impl FnOnce(&mut ztree_context, &mut Staging) -> Result<R, Fail>,
) -> Result<(R, Staging), Fail> {
    let mut st = Staging::default();
    match stage(ctx, &mut st) {
        Ok(r) => Ok((r, st)),
        Err(e) => {
            super::out::agree_args(&ctx.comm, what, Err::<super::out::Proposal, _>(e), |p| p).map(|_| unreachable!("an error is never agreed away"))
        }
    }
}

/// `ztree_knn` with device arrays on an MPI context: host copies in, the host call (with its
/// agreement), the requested outputs copied to the device.
pub(crate) fn knn_staged<T: Real, const D: usize>(ctx: &mut ztree_context, a: &Args, o: &mut ztree_knn_output) -> Result<(), Fail> {
    let ((dev, host), _copies) = staged(ctx, "kNN", |ctx, st| {
        let dev = ctx.device.device(a.src.pos[0].data as DevPtr, a.prm.cuda_stream)?;
        let src = st.particles(&dev, &a.src)?;
        let qry = a.qry.as_ref().map(|q| st.particles(&dev, q)).transpose()?;
        let mut prm = a.prm;
        prm.scalar = st.array(&dev, &a.prm.scalar, a.src.count.max(0) as usize)?;
        Ok((dev, Args { src, qry, prm, dtype: a.dtype }))
    })?;
    // SAFETY: all-NULL outputs: the host call uses the context's host buffers.
    let mut h: ztree_knn_output = unsafe { std::mem::zeroed() };
    super::knn::typed::<T, D>(ctx, &host, &mut h, None)?;
    let want = |bit: u32| a.prm.outputs & bit != 0;
    let (rows, nq) = ((h.n_queries * a.prm.k as i64) as usize, h.n_queries as usize);
    let st = &mut ctx.device;
    if want(ZTREE_KNN_INDICES) {
        o.indices = st.put(&dev, Slot::Indices, o.indices, h.indices, rows)?;
    }
    if want(ZTREE_KNN_DISTANCES) {
        o.distances = st.put(&dev, Slot::Distances, o.distances, h.distances, rows)?;
    }
    if want(ZTREE_KNN_KTH_DISTANCE) {
        o.kth_distance = st.put(&dev, Slot::Kth, o.kth_distance, h.kth_distance, nq)?;
    }
    if want(ZTREE_KNN_DENSITY) {
        o.density = st.put(&dev, Slot::Density, o.density, h.density, nq)?;
    }
    if want(ZTREE_KNN_SCALAR_MEAN) {
        o.scalar_mean = st.put(&dev, Slot::ScalarMean, o.scalar_mean, h.scalar_mean, nq)?;
    }
    if want(ZTREE_KNN_PERMUTATION) {
        o.permutation = st.put(&dev, Slot::Permutation, o.permutation, h.permutation, nq)?;
    }
    o.n_queries = h.n_queries;
    o.padded_queries = h.padded_queries;
    Ok(())
}

/// `ztree_fof` with device arrays on an MPI context: host copies in, the host call, the
/// labels copied to the device (the catalogue stays on the host, as always).
pub(crate) fn fof_staged<T: Real, const D: usize>(
    ctx: &mut ztree_context,
    p: &ztree_particles,
    prm: &ztree_fof_params,
    dtype: i32,
    o: &mut ztree_fof_output,
) -> Result<(), Fail> {
    let ((dev, host), _copies) = staged(ctx, "FoF", |ctx, st| {
        let dev = ctx.device.device(p.pos[0].data as DevPtr, prm.cuda_stream)?;
        Ok((dev.clone(), st.particles(&dev, p)?))
    })?;
    // SAFETY: all-NULL outputs: the host call uses the context's host buffers.
    let mut h: ztree_fof_output = unsafe { std::mem::zeroed() };
    super::fof::typed::<T, D>(ctx, &host, prm, dtype, &mut h, None)?;
    let labels = ctx.device.put(&dev, Slot::Labels, o.labels, h.labels, p.count.max(0) as usize)?;
    *o = ztree_fof_output { labels, ..h };
    Ok(())
}

#[cfg(all(test, feature = "cuda-emu"))]
#[path = "device_tests.rs"]
mod tests;
