//! Device arrays at the C face: `ztree_knn` and `ztree_fof` on CUDA device particles call
//! the Rust API's device entry points (`Context::knn_device`, `Dist::knn_device`, ...) on
//! the device the arrays live on, on the caller's stream, and the per-particle results go
//! into caller device arrays or context-owned device buffers that grow on demand (a
//! pointer the context returned before means that buffer again).

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

use super::fof::Checked as FofChecked;
use super::input::{Strided, StridedPoints, domain};
use super::knn::{Args, Checked};
use super::out::fill_stats;
use super::types::*;
use super::{Fail, fail, ztree_context};
use crate::api::device::{CudaDevice, DeviceArray, DeviceFofFields, DeviceKnnFields, DeviceKnnOutput, DeviceOut, DevicePoints};
use crate::backend::cuda::backend::{DevField, DevPoints, FieldType};
use crate::backend::cuda::device::{DevBuf, DevPtr, Device};
use crate::backend::cuda::prims::Strided as DevStrided;
use crate::error::Error;
use crate::geom::Real;
use crate::knn::OutputOrder;
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
    Counts,
    ScalarSum,
    ListOffsets,
    ListIndices,
    ListDistances,
    Classes,
}
const SLOTS: usize = 13;

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
/// Test hooks of builds with the emulator: "device" pointers must be emulated device
/// allocations, as the driver requires device memory (`STRICT`); this process's device
/// cannot be used (`FAIL`), as on a node whose GPU is lost.
#[cfg(feature = "cuda-emu")]
pub(crate) static STRICT: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
#[cfg(feature = "cuda-emu")]
pub(crate) static FAIL: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The emulator's answer to "is this device memory, and is the device usable" (tests).
fn emulated_checks(ptr: DevPtr) -> Result<(), Fail> {
    #[cfg(feature = "cuda-emu")]
    {
        use std::sync::atomic::Ordering::Relaxed;
        if FAIL.load(Relaxed) {
            return Err(fail(ZTREE_ERR_NO_DEVICE, "CUDA device arrays given, but this process's device cannot be used (emulated failure)"));
        }
        if STRICT.load(Relaxed) && ptr != 0 && !crate::backend::cuda::emu::is_device_memory(ptr) {
            return Err(fail(ZTREE_ERR_INVALID_ARGUMENT, format!("the pointer {ptr:#x} is not CUDA device memory (emulated device)")));
        }
    }
    let _ = ptr;
    Ok(())
}

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
    pub(crate) fn device(&mut self, ptr: DevPtr, stream: *mut c_void) -> Result<Arc<dyn Device>, Fail> {
        // No pointer (a rank or call without particles): the device used last, else device 0.
        let ordinal = match (emulated(), ptr) {
            (true, _) => {
                emulated_checks(ptr)?;
                -1
            }
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
    pub(crate) fn output(&mut self, dev: &Arc<dyn Device>, slot: Slot, caller: *mut c_void, bytes: usize) -> Result<DevPtr, Fail> {
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

/// A device output: the slot's pointer (`Slot::output`) as a `DeviceOut`.
///
/// # Safety
/// `ptr` is `len` elements of device memory (the caller's or the context's), written only
/// by this call.
pub(crate) unsafe fn sink<'a, V>(ptr: Option<DevPtr>, len: usize) -> Option<DeviceOut<'a, V>> {
    // SAFETY: the caller's promise.
    ptr.map(|p| unsafe { DeviceOut::new(p as *mut V, len) })
}

/// `ztree_knn`'s outputs on the device: the caller's arrays or the context's (sized for
/// `rows` list entries and `nq` queries).
struct KnnSlots {
    idx: Option<DevPtr>,
    dist: Option<DevPtr>,
    kth: Option<DevPtr>,
    dens: Option<DevPtr>,
    mean: Option<DevPtr>,
    perm: Option<DevPtr>,
}

impl KnnSlots {
    fn new(st: &mut DeviceState, dev: &Arc<dyn Device>, a: &Args, o: &ztree_knn_output, rows: usize, nq: usize) -> Result<Self, Fail> {
        let want = |bit: u32| a.prm.outputs & bit != 0;
        let mut slot = |on: bool, s: Slot, caller: *mut c_void, bytes: usize| -> Result<Option<DevPtr>, Fail> {
            if on { st.output(dev, s, caller, bytes).map(Some) } else { Ok(None) }
        };
        Ok(Self {
            idx: slot(want(ZTREE_KNN_INDICES), Slot::Indices, o.indices.cast(), rows * 8)?,
            dist: slot(want(ZTREE_KNN_DISTANCES), Slot::Distances, o.distances.cast(), rows * 8)?,
            kth: slot(want(ZTREE_KNN_KTH_DISTANCE), Slot::Kth, o.kth_distance.cast(), nq * 8)?,
            dens: slot(want(ZTREE_KNN_DENSITY), Slot::Density, o.density.cast(), nq * 8)?,
            mean: slot(want(ZTREE_KNN_SCALAR_MEAN), Slot::ScalarMean, o.scalar_mean.cast(), nq * 8)?,
            perm: slot(want(ZTREE_KNN_PERMUTATION), Slot::Permutation, o.permutation.cast(), nq * 8)?,
        })
    }

    /// The outputs as the API takes them (f32 distances widened into the doubles).
    ///
    /// # Safety
    /// The slots' memory is written only by the call.
    unsafe fn output<'a, T: Real>(&self, rows: usize, nq: usize, order: OutputOrder) -> DeviceKnnOutput<'a, T> {
        let wide = |p: Option<DevPtr>, len: usize| -> Option<DeviceOut<'a, T>> {
            // SAFETY: the slot holds `len` f64 (C's doubles).
            p.map(|p| unsafe { if T::IS_F64 { DeviceOut::new(p as *mut T, len) } else { DeviceOut::widened(p as *mut f64, len) } })
        };
        // SAFETY: the caller's promise, for each slot of its documented size.
        unsafe {
            DeviceKnnOutput {
                indices: sink(self.idx, rows),
                distances: wide(self.dist, rows),
                kth_distance: wide(self.kth, nq),
                density: sink(self.dens, nq),
                scalar_mean: sink(self.mean, nq),
                order,
                permutation: sink(self.perm, nq),
            }
        }
    }

    /// Where the results are, into the caller's output struct.
    fn hand_over(&self, o: &mut ztree_knn_output) {
        let ptr = |p: Option<DevPtr>, old: *mut f64| p.map_or(old, |p| p as *mut f64);
        if let Some(p) = self.idx {
            o.indices = p as *mut i64;
        }
        o.distances = ptr(self.dist, o.distances);
        o.kth_distance = ptr(self.kth, o.kth_distance);
        o.density = ptr(self.dens, o.density);
        o.scalar_mean = ptr(self.mean, o.scalar_mean);
        if let Some(p) = self.perm {
            o.permutation = p as *mut i64;
        }
    }
}

pub(crate) fn device_points<'a, T: Real, const D: usize>(p: &'a StridedPoints<T, D>, n: usize) -> DevicePoints<'a, T, D> {
    DevicePoints { pts: dev_points(p, n) }
}

pub(crate) fn device_array(s: &Strided, n: usize) -> DeviceArray<'_> {
    DeviceArray { field: dev_field(s, n) }
}

/// `ztree_knn` on device arrays (checked by `knn::check`): serial contexts on the device the
/// arrays live on; MPI contexts after the call's one agreement (a failed check or setup
/// there is every rank's error), each rank on its own device.
pub(crate) fn knn<T: Real, const D: usize>(
    ctx: &mut ztree_context,
    a: &Args,
    o: &mut ztree_knn_output,
    checked: Result<Checked<T, D>, Fail>,
) -> Result<(), Fail> {
    let limit = ctx.config.memory_limit;
    let ready = checked.and_then(|c| {
        c.bytes.check(limit, "this kNN call")?;
        let dev = ctx.device.device(c.sp.arrays[0].raw().0, a.prm.cuda_stream)?;
        let slots = KnnSlots::new(&mut ctx.device, &dev, a, o, c.rows, c.nq)?;
        Ok((c, dev, slots))
    });
    let ((mut c, dev, slots), present) = super::out::agree_args(&ctx.comm, "kNN", ready, |r| r.0.proposal())?;
    // A rank without sources takes the other ranks' optional arrays, empty.
    if present[0] && c.masses.is_none() {
        c.masses = Some(Strided::empty(ZTREE_DTYPE_F64));
    }
    if present[1] && c.scalar.is_none() {
        c.scalar = Some(Strided::empty(ZTREE_DTYPE_F64));
    }
    let want = |bit: u32| a.prm.outputs & bit != 0;
    let device = CudaDevice::from_device(dev);
    let sp = device_points(&c.sp, c.ns);
    let qp = c.qp.as_ref().map(|q| device_points(q, c.nq));
    let fields = DeviceKnnFields {
        masses: if want(ZTREE_KNN_DENSITY) { c.masses.as_ref().map(|m| device_array(m, c.ns)) } else { None },
        particle_mass: Some(ctx.config.particle_mass),
        scalar: c.scalar.as_ref().map(|s| device_array(s, c.ns)),
    };
    // SAFETY: every slot is a caller device array of the documented size or a context
    // buffer sized above, written only by this call.
    let out = unsafe { slots.output::<T>(c.rows, c.nq, c.order) };
    let dom = domain::<D>(&ctx.config);
    #[allow(unused_mut)]
    let mut dist = None;
    let stats = match &ctx.comm {
        #[cfg(feature = "mpi")]
        Some(comm) => {
            let on = crate::mpi::On { ctx: &ctx.core, comm };
            let st = crate::api::dist::knn_device(on, &device, &dom, &sp, qp.as_ref(), &fields, c.k, &out, Ok(()))?;
            let mut local = st.local.clone();
            local.timings = st.dist.timings.clone();
            local.padded_queries = st.padded_queries;
            dist = Some(st.dist);
            local
        }
        _ => {
            if c.ns == 0 {
                return Err(Error::NoSources.into());
            }
            ctx.core.knn_device(&device, &dom, &sp, qp.as_ref(), &fields, c.k, &out)?
        }
    };
    slots.hand_over(o);
    o.n_queries = c.nq as i64;
    o.padded_queries = stats.padded_queries as i64;
    ctx.stats = fill_stats(&stats.timings, stats.scratch_bytes, c.ns, c.nq, 0, dist.as_ref());
    Ok(())
}

/// `ztree_fof` on device arrays (checked by `fof::check`): labels into the caller's device
/// array or a context-owned one, the catalogue on the host; serial or distributed as
/// `knn`.
pub(crate) fn fof<T: Real, const D: usize>(
    ctx: &mut ztree_context,
    o: &mut ztree_fof_output,
    checked: Result<FofChecked<T, D>, Fail>,
    prm: &ztree_fof_params,
) -> Result<(), Fail> {
    let limit = ctx.config.memory_limit;
    let ready = checked.and_then(|c| {
        c.bytes.check(limit, "this FoF call")?;
        let dev = ctx.device.device(c.pos.arrays[0].raw().0, prm.cuda_stream)?;
        let labels = ctx.device.output(&dev, Slot::Labels, o.labels.cast(), c.n * 8)?;
        Ok((c, dev, labels))
    });
    let ((mut c, dev, labels), present) = super::out::agree_args(&ctx.comm, "FoF", ready, |r| r.0.proposal())?;
    // A rank without particles takes the other ranks' optional arrays, empty.
    if present[0] && c.vel.is_none() {
        c.vel = Some(super::input::StridedVectors([Strided::empty(ZTREE_DTYPE_F64); D]));
    }
    if present[1] && c.masses.is_none() {
        c.masses = Some(Strided::empty(ZTREE_DTYPE_F64));
    }
    if present[2] && c.ids.is_none() {
        c.ids = Some(Strided::empty(ZTREE_DTYPE_I64));
    }
    let n = c.n;
    let device = CudaDevice::from_device(dev);
    let fields = DeviceFofFields::<D> {
        velocities: c.vel.as_ref().map(|v| std::array::from_fn(|d| device_array(&v.0[d], n))),
        masses: c.masses.as_ref().map(|m| device_array(m, n)),
        particle_mass: ctx.config.particle_mass,
        ids: c.ids.as_ref().map(|i| device_array(i, n)),
    };
    let pts = device_points(&c.pos, n);
    // SAFETY: `labels` is n i64 of device memory, written only by this call.
    let out = unsafe { DeviceOut::new(labels as *mut i64, n) };
    let dom = domain::<D>(&ctx.config);
    #[allow(unused_mut)]
    let mut dist = None;
    let (cat, stats) = match &ctx.comm {
        #[cfg(feature = "mpi")]
        Some(comm) => {
            let on = crate::mpi::On { ctx: &ctx.core, comm };
            let scope = if prm.gather != 0 { crate::mpi::CatalogueScope::Root } else { crate::mpi::CatalogueScope::Distributed };
            let (cat, st) = crate::api::dist::fof_device(on, &device, &dom, &pts, &fields, &c.params, scope, &out, Ok(()))?;
            let mut local = st.local.clone();
            local.timings = st.dist.timings.clone();
            local.groups_total = st.groups_total;
            dist = Some(st.dist);
            (cat, local)
        }
        _ => ctx.core.fof_device(&device, &dom, &pts, &fields, &c.params, &out)?,
    };
    super::fof::hand_over(ctx, o, &cat, &stats, labels as *mut i64, n, c.params.members, dist.as_ref(), None)
}

#[cfg(all(test, feature = "cuda-emu"))]
#[path = "device_tests.rs"]
mod tests;
