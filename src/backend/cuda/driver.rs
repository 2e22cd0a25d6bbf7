//! The real GPU, through the CUDA driver API (cudarc, loaded at run time: no CUDA is
//! needed to build or to run on machines without a GPU) and NVRTC (`nvrtc`, CUDA 12 or 13).
//!
//! Work is queued on the caller's stream (the null stream when none is given). Modules
//! are compiled once per device and process, for the device's own architecture.

use std::collections::HashMap;
use std::ffi::{CString, c_void};
use std::sync::{Mutex, OnceLock};

use cudarc::driver::{result, sys};

use super::device::{AllocTracker, Arg, DevPtr, Device, LEAF_WARPS};
use super::{nvrtc, sources};
use crate::error::{Error, Result};

/// One device and the stream the caller's work goes on.
pub(crate) struct CudaDevice {
    ordinal: i32,
    ctx: sys::CUcontext,
    stream: sys::CUstream,
    /// The device's memory pool (`DevicePool`), shared by the process's handles on it.
    pool: &'static DevicePool,
    #[cfg_attr(not(test), allow(dead_code))] // read by `describe`
    name: String,
    allocs: AllocTracker,
    /// ZTREE_CUDA_KERNEL_TIMES set: every launch waited for and timed, per kernel (calls,
    /// seconds), printed to stderr when the device goes. A tuning aid: it serialises the
    /// stream.
    kernel_times: Option<Mutex<HashMap<&'static str, (u64, f64)>>>,
    /// Warps per block of the kNN leaf kernel: `LEAF_WARPS`, or ZTREE_CUDA_LEAF_WARPS (1 to
    /// 8; a tuning aid: the kernels are then compiled for it).
    leaf_warps: u32,
    /// ZTREE_CUDA_SYNC_STAGES=1: the stream waited for at the end of every stage of a
    /// call, so that `ztree_get_stats` bills each stage its own device time (a few
    /// microseconds per stage; without it a stage's tail shows in the next stage, the
    /// last one's in the next call).
    sync_stages: bool,
    /// ZTREE_CUDA_SERIAL=1: every driver operation of every handle in the process under
    /// one lock (`gate`). A diagnostic: several threads each with their own handle on one
    /// GPU crashed or hung inside the driver (H200, driver 580; see docs/DESIGN.md).
    serial: bool,
}

// SAFETY: a CUcontext and a CUstream may be used from any thread (the driver API is
// thread-safe; the context is made current on the calling thread before each use).
unsafe impl Send for CudaDevice {}
unsafe impl Sync for CudaDevice {}

fn device_err(what: &str, e: impl std::fmt::Debug) -> Error {
    Error::Device(format!("{what}: {e:?}"))
}

/// The CUDA devices this process can use; `NoDevice` (saying why) when there is no driver,
/// no NVRTC or no device. Never panics (cudarc would, called without a driver).
pub(crate) fn device_count() -> Result<usize> {
    // SAFETY: only probes whether the library can be loaded.
    if !unsafe { sys::is_culib_present() } {
        return Err(Error::NoDevice("no CUDA driver (libcuda.so) on this machine".into()));
    }
    if let Err(why) = nvrtc::version() {
        return Err(Error::NoDevice(format!("{why} (ztree compiles its kernels with NVRTC at run time)")));
    }
    result::init().map_err(|e| Error::NoDevice(format!("the CUDA driver did not initialise: {e:?}")))?;
    let count = result::device::get_count().map_err(|e| Error::NoDevice(format!("{e:?}")))?;
    if count <= 0 {
        return Err(Error::NoDevice("the CUDA driver reports no device".into()));
    }
    Ok(count as usize)
}

/// ztree's memory pool on one device: every handle on the device allocates from it (not
/// from the device's default pool, which belongs to the whole process). It is created
/// once per device and process and never destroyed, like the retained context and the
/// module cache: with a pool per handle, destroyed with it, several threads working on
/// one GPU each with its own handle crashed (SIGSEGV) or hung inside the driver's stream
/// waits in 5 of 6 runs of the device tests on four threads (H200, driver 580; every
/// test alone passed).
///
/// During a call it keeps what the call frees (`hold_memory`): at the driver's default
/// release threshold, 0, freed pool memory goes back to the system at every stream
/// synchronisation, and a call waits several times (list lengths, the top plane, the
/// checks), so a later stage mapped the memory again (~5% of a kNN call, H200). When the
/// last call in flight on the device ends the pool is trimmed to ZTREE_CUDA_POOL_KEEP=bytes
/// (or `max`; default 0), which it keeps between calls: the simulation has its memory back
/// when the call returns.
pub(crate) struct DevicePool {
    handle: sys::CUmemoryPool,
    keep: u64,
    /// Calls in flight on the device, over all handles (`hold_memory(true)` not yet closed;
    /// holds nest).
    holds: std::sync::atomic::AtomicU32,
}

// SAFETY: a CUmemoryPool may be used from any thread (the driver API is thread-safe).
unsafe impl Send for DevicePool {}
unsafe impl Sync for DevicePool {}

fn create_pool(dev: sys::CUdevice, ordinal: i32) -> Result<DevicePool> {
    let keep: u64 = match std::env::var("ZTREE_CUDA_POOL_KEEP") {
        Err(_) => 0,
        Ok(v) if v == "max" => u64::MAX,
        Ok(v) => v.parse().map_err(|_| Error::Device(format!("ZTREE_CUDA_POOL_KEEP={v}: want a byte count or `max`")))?,
    };
    // SAFETY: `dev` came from cuDeviceGet.
    let pools = unsafe { result::device::get_attribute(dev, sys::CUdevice_attribute::CU_DEVICE_ATTRIBUTE_MEMORY_POOLS_SUPPORTED) }.unwrap_or(0);
    if pools == 0 {
        return Err(Error::NoDevice(format!("CUDA device {ordinal} has no stream-ordered memory pools (ztree allocates from one)")));
    }
    // SAFETY: zeroed is a valid CUmemPoolProps (no handle types, no limit, reserved zero).
    let mut props: sys::CUmemPoolProps = unsafe { std::mem::zeroed() };
    props.allocType = sys::CUmemAllocationType::CU_MEM_ALLOCATION_TYPE_PINNED;
    props.handleTypes = sys::CUmemAllocationHandleType::CU_MEM_HANDLE_TYPE_NONE;
    props.location = sys::CUmemLocation { type_: sys::CUmemLocationType::CU_MEM_LOCATION_TYPE_DEVICE, id: ordinal };
    // SAFETY: `props` is a valid description of device memory on `ordinal`.
    let pool = unsafe { result::mem_pool::create(&props) }.map_err(|e| device_err("cuMemPoolCreate", e))?;
    if let Err(e) = set_release_threshold(pool, keep) {
        // SAFETY: created above, nothing allocated from it, seen by no other thread.
        let _ = unsafe { result::mem_pool::destroy(pool) };
        return Err(e);
    }
    Ok(DevicePool { handle: pool, keep, holds: Default::default() })
}

fn set_release_threshold(pool: sys::CUmemoryPool, mut bytes: u64) -> Result<()> {
    // SAFETY: a live pool; the attribute takes a u64 (cuuint64_t).
    unsafe { result::mem_pool::set_attribute(pool, sys::CUmemPool_attribute::CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, (&mut bytes as *mut u64).cast()) }
        .map_err(|e| device_err("cuMemPoolSetAttribute", e))
}

impl CudaDevice {
    /// Device `ordinal`, work on `stream` (null: the default stream). Fails with
    /// `NoDevice` when there is no driver, no device or no NVRTC, never panics.
    pub(crate) fn open(ordinal: i32, stream: *mut c_void) -> Result<Self> {
        let count = device_count()? as i32;
        if ordinal < 0 || ordinal >= count {
            return Err(Error::NoDevice(format!("CUDA device {ordinal} asked for, {count} present")));
        }
        let dev = result::device::get(ordinal).map_err(|e| device_err("cuDeviceGet", e))?;
        // Retained once per device and never released: the module cache lives in this
        // context for the whole process (the context the CUDA runtime shares, too). The
        // memory pool, likewise (`DevicePool`).
        static CONTEXTS: OnceLock<Mutex<HashMap<i32, usize>>> = OnceLock::new();
        static POOLS: OnceLock<Mutex<HashMap<i32, &'static DevicePool>>> = OnceLock::new();
        let mut contexts = CONTEXTS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        let ctx = match contexts.get(&ordinal) {
            Some(&c) => c as sys::CUcontext,
            None => {
                // SAFETY: `dev` came from cuDeviceGet.
                let c = unsafe { result::primary_ctx::retain(dev) }.map_err(|e| device_err("cuDevicePrimaryCtxRetain", e))?;
                contexts.insert(ordinal, c as usize);
                c
            }
        };
        // SAFETY: the context of `ordinal`, retained above.
        unsafe { result::ctx::set_current(ctx) }.map_err(|e| device_err("cuCtxSetCurrent", e))?;
        let mut pools = POOLS.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        let pool = match pools.get(&ordinal) {
            Some(&p) => p,
            None => {
                let p: &'static DevicePool = Box::leak(Box::new(create_pool(dev, ordinal)?));
                pools.insert(ordinal, p);
                p
            }
        };
        drop((pools, contexts));
        let name = result::device::get_name(dev).unwrap_or_else(|_| "unknown".into());
        let kernel_times = std::env::var_os("ZTREE_CUDA_KERNEL_TIMES").map(|_| Mutex::default());
        let sync_stages = std::env::var("ZTREE_CUDA_SYNC_STAGES").is_ok_and(|v| v == "1");
        let leaf_warps =
            std::env::var("ZTREE_CUDA_LEAF_WARPS").ok().and_then(|v| v.parse().ok()).filter(|w| (1..=8).contains(w)).unwrap_or(LEAF_WARPS);
        let serial = std::env::var("ZTREE_CUDA_SERIAL").is_ok_and(|v| v == "1");
        Ok(Self {
            ordinal,
            ctx,
            stream: stream as sys::CUstream,
            pool,
            name,
            allocs: AllocTracker::default(),
            kernel_times,
            leaf_warps,
            sync_stages,
            serial,
        })
    }

    /// The device a caller's pointer lives on; an error when it is not device memory.
    pub(crate) fn ordinal_of(ptr: DevPtr) -> Result<i32> {
        device_count()?;
        let mut ordinal: i32 = -1;
        // SAFETY: writes one int; fails cleanly for pointers the driver does not know.
        let r = unsafe {
            sys::cuPointerGetAttribute((&mut ordinal as *mut i32).cast(), sys::CUpointer_attribute::CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL, ptr)
        };
        if r != sys::CUresult::CUDA_SUCCESS || ordinal < 0 {
            return Err(Error::InvalidParameter { name: "memory", why: format!("the pointer {ptr:#x} is not CUDA device memory ({r:?})") });
        }
        Ok(ordinal)
    }

    /// The process-wide driver lock when `serial` (operations do not nest: each takes it
    /// once, at its start).
    fn gate(&self) -> Option<std::sync::MutexGuard<'static, ()>> {
        static GATE: Mutex<()> = Mutex::new(());
        self.serial.then(|| GATE.lock().unwrap_or_else(|e| e.into_inner()))
    }

    fn current(&self) -> Result<()> {
        // SAFETY: the primary context is retained for the life of `self`.
        unsafe { result::ctx::set_current(self.ctx) }.map_err(|e| device_err("cuCtxSetCurrent", e))
    }

    /// The function `kernel` of `module`, compiling the module on first use.
    fn function(&self, module: &'static str, kernel: &'static str) -> Result<sys::CUfunction> {
        static CACHE: OnceLock<Mutex<HashMap<(i32, &'static str), usize>>> = OnceLock::new();
        let mut cache = CACHE.get_or_init(Default::default).lock().unwrap_or_else(|e| e.into_inner());
        let m = match cache.get(&(self.ordinal, module)) {
            Some(&m) => m as sys::CUmodule,
            None => {
                let m = self.compile(module)?;
                cache.insert((self.ordinal, module), m as usize);
                m
            }
        };
        let name = CString::new(kernel).map_err(|e| device_err("kernel name", e))?;
        // SAFETY: `m` is a loaded module of this device's primary context.
        unsafe { result::module::get_function(m, name) }.map_err(|e| device_err(kernel, e))
    }

    fn compile(&self, module: &'static str) -> Result<sys::CUmodule> {
        let src = sources::flattened(module).ok_or_else(|| Error::Device(format!("no kernel module {module}")))?;
        let dev = result::device::get(self.ordinal).map_err(|e| device_err("cuDeviceGet", e))?;
        use sys::CUdevice_attribute::*;
        // SAFETY: `dev` came from cuDeviceGet.
        let (major, minor) = unsafe {
            (
                result::device::get_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR).map_err(|e| device_err("compute capability", e))?,
                result::device::get_attribute(dev, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR).map_err(|e| device_err("compute capability", e))?,
            )
        };
        let mut options: Vec<String> = sources::NVRTC_OPTIONS.iter().map(|s| s.to_string()).collect();
        // ZTREE_NVRTC_OPTIONS: more options, space-separated (tuning: `-DZT_PASS=8`).
        options.extend(std::env::var("ZTREE_NVRTC_OPTIONS").unwrap_or_default().split_whitespace().map(String::from));
        options.push(format!("-DZT_LEAF_WARPS={}", self.leaf_warps));
        // Machine code for this device's own architecture, not PTX: PTX from an NVRTC newer
        // than the driver does not load, CUBIN does (and needs no JIT at load).
        options.push(format!("--gpu-architecture=sm_{major}{minor}"));
        let cubin = nvrtc::compile_cubin(&src, &format!("{module}.cu"), &options)
            .map_err(|e| Error::Device(format!("NVRTC could not compile kernels/{module}.cu: {e}")))?;
        self.current()?;
        // SAFETY: a CUBIN image NVRTC produced, alive for the call.
        unsafe { result::module::load_data(cubin.as_ptr().cast()) }
            .map_err(|e| Error::Device(format!("loading kernels/{module}.cu (sm_{major}{minor}): {e:?}")))
    }

    /// Waits for the stream, then hands the pool's unused memory beyond `keep` bytes back
    /// (memory whose free is still queued cannot go: hence the wait). Errors are the
    /// stream's and come back from its next operation.
    fn trim(&self, keep: u64) {
        if self.current().is_ok() {
            // SAFETY: the stream and the pool belong to this device's context, current.
            unsafe {
                let _ = result::stream::synchronize(self.stream);
                let _ = result::mem_pool::trim_to(self.pool.handle, usize::try_from(keep).unwrap_or(usize::MAX));
            }
        }
    }
}

impl Device for CudaDevice {
    fn tracker(&self) -> &AllocTracker {
        &self.allocs
    }
    fn describe(&self) -> String {
        format!("CUDA device {} ({})", self.ordinal, self.name)
    }

    fn alloc(&self, bytes: usize) -> Result<DevPtr> {
        let _gate = self.gate();
        self.current()?;
        // SAFETY: the context is current; stream-ordered allocation on the caller's stream.
        let try_alloc = || unsafe { result::mem_pool::alloc_async(self.pool.handle, bytes.max(1), self.stream) };
        let p = match try_alloc() {
            // The pool may hold freed memory the call kept (`hold_memory`) in pieces too
            // small: let it go and try once more.
            Err(e) if e.0 == sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => {
                self.trim(0);
                try_alloc()
            }
            r => r,
        }
        .map_err(|e| match e.0 {
            sys::CUresult::CUDA_ERROR_OUT_OF_MEMORY => Error::OutOfMemory { what: "device buffer", bytes: bytes as u64 },
            _ => device_err("cuMemAllocFromPoolAsync", e),
        })?;
        self.allocs.on_alloc(p, bytes.max(1));
        Ok(p)
    }

    unsafe fn free(&self, p: DevPtr) {
        let _gate = self.gate();
        self.allocs.on_free(p);
        if self.current().is_ok() {
            // SAFETY: allocated on this stream by `alloc`; errors cannot be reported from drop.
            let _ = unsafe { result::free_async(p, self.stream) };
        }
    }

    unsafe fn upload(&self, dst: DevPtr, src: &[u8]) -> Result<()> {
        self.tracker().on_copy(src.len(), false);
        let _gate = self.gate();
        self.current()?;
        // SAFETY: the caller guarantees the range; synchronous so `src` may go at once.
        unsafe {
            result::memcpy_htod_async(dst, src, self.stream).map_err(|e| device_err("cuMemcpyHtoDAsync", e))?;
            result::stream::synchronize(self.stream).map_err(|e| device_err("cuStreamSynchronize", e))
        }
    }

    unsafe fn download(&self, dst: &mut [u8], src: DevPtr) -> Result<()> {
        self.tracker().on_copy(dst.len(), true);
        let _gate = self.gate();
        self.current()?;
        // SAFETY: the caller guarantees the range; waits for the copy.
        unsafe {
            result::memcpy_dtoh_async(dst, src, self.stream).map_err(|e| device_err("cuMemcpyDtoHAsync", e))?;
            result::stream::synchronize(self.stream).map_err(|e| device_err("cuStreamSynchronize", e))
        }
    }

    unsafe fn zero(&self, dst: DevPtr, bytes: usize) -> Result<()> {
        let _gate = self.gate();
        self.current()?;
        // SAFETY: the caller guarantees the range.
        unsafe { result::memset_d8_async(dst, 0, bytes, self.stream) }.map_err(|e| device_err("cuMemsetD8Async", e))
    }

    fn leaf_warps(&self) -> u32 {
        self.leaf_warps
    }

    fn hold_memory(&self, hold: bool) {
        let _gate = self.gate();
        use std::sync::atomic::Ordering::SeqCst;
        if hold {
            if self.pool.holds.fetch_add(1, SeqCst) == 0 {
                // A failure only costs speed (the pool then releases at every wait).
                let _ = set_release_threshold(self.pool.handle, u64::MAX);
            }
        } else if self.pool.holds.fetch_sub(1, SeqCst) == 1 {
            // The last call in flight on the device. A call starting meanwhile may run at
            // this threshold (slower, not wrong); the trim hands back only unused memory.
            let _ = set_release_threshold(self.pool.handle, self.pool.keep);
            self.trim(self.pool.keep);
        }
    }

    fn wait(&self) -> Result<()> {
        let _gate = self.gate();
        self.current()?;
        // SAFETY: the stream belongs to this device's context, current above.
        unsafe { result::stream::synchronize(self.stream) }.map_err(|e| device_err("cuStreamSynchronize", e))
    }

    fn end_stage(&self) {
        let _gate = self.gate();
        if self.sync_stages && self.current().is_ok() {
            // SAFETY: the stream belongs to this device's context, current above. An
            // error here is the stream's and comes back from its next operation.
            let _ = unsafe { result::stream::synchronize(self.stream) };
        }
    }

    unsafe fn launch_block(&self, module: &'static str, kernel: &'static str, grid: u32, block: u32, args: &[Arg]) -> Result<()> {
        if grid == 0 {
            return Ok(());
        }
        let _gate = self.gate();
        let f = self.function(module, kernel)?;
        self.current()?;
        let mut ptrs: Vec<*mut c_void> = args.iter().map(Arg::as_ptr).collect();
        // SAFETY: the stream belongs to this device's context, current above.
        let sync = || unsafe { result::stream::synchronize(self.stream) }.map_err(|e| device_err("cuStreamSynchronize", e));
        if self.kernel_times.is_some() {
            sync()?; // the launch timed alone
        }
        let t0 = std::time::Instant::now();
        // SAFETY: the caller guarantees the arguments match the kernel.
        unsafe { result::launch_kernel(f, (grid, 1, 1), (block, 1, 1), 0, self.stream, &mut ptrs) }.map_err(|e| device_err(kernel, e))?;
        if let Some(times) = &self.kernel_times {
            sync()?;
            let mut t = times.lock().unwrap_or_else(|e| e.into_inner());
            let e = t.entry(kernel).or_default();
            e.0 += 1;
            e.1 += t0.elapsed().as_secs_f64();
        }
        Ok(())
    }
}

impl Drop for CudaDevice {
    fn drop(&mut self) {
        let Some(times) = &self.kernel_times else { return };
        let t = times.lock().unwrap_or_else(|e| e.into_inner());
        let mut rows: Vec<_> = t.iter().collect();
        rows.sort_by(|a, b| b.1.1.total_cmp(&a.1.1));
        let total: f64 = rows.iter().map(|r| r.1.1).sum();
        eprintln!("kernel times on {} (ZTREE_CUDA_KERNEL_TIMES; every launch waited for), {total:.4} s in all:", self.name);
        for (k, (n, s)) in rows {
            eprintln!("  {k:<32} {n:>7} launches {s:>10.4} s {:>5.1}%", 100.0 * s / total.max(1e-12));
        }
    }
}
