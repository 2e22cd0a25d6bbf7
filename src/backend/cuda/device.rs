//! The device the CUDA back end drives: allocate, copy, launch. Two implementations: the
//! real GPU (`driver`, through the CUDA driver API and NVRTC) and the emulator (`emu`, the
//! same kernel sources compiled for the CPU), so the back end's host logic is one code
//! path, tested in CI on the emulator and on a GPU wherever there is one.

use std::marker::PhantomData;
use std::sync::Arc;

use crate::base::Elem;
use crate::error::{Error, Result};

/// A device address.
pub(crate) type DevPtr = u64;

/// A kernel argument, passed by value (pointers are `Ptr`).
#[derive(Clone, Debug)]
pub(crate) enum Arg {
    U32(u32),
    Ptr(DevPtr),
    /// A `#[repr(C)]` struct by value, as 8-byte words (`ZtQuant`, `ZtStrided`).
    Words(Vec<u64>),
}

impl Arg {
    /// The argument's bytes, for a `void*` in the launch's parameter array.
    pub(crate) fn as_ptr(&self) -> *mut std::ffi::c_void {
        match self {
            Arg::U32(v) => v as *const u32 as *mut _,
            Arg::Ptr(v) => v as *const u64 as *mut _,
            Arg::Words(w) => w.as_ptr() as *mut _,
        }
    }
}

/// Two u32 fields of a by-value kernel struct in one 8-byte word of `Arg::Words`, `lo`
/// first in memory.
pub(crate) fn u32_pair(lo: u32, hi: u32) -> u64 {
    let mut b = [0u8; 8];
    b[..4].copy_from_slice(&lo.to_ne_bytes());
    b[4..].copy_from_slice(&hi.to_ne_bytes());
    u64::from_ne_bytes(b)
}

/// Threads per block of every kernel (`ZT_BLOCK` in kernels/zt_cuda.cuh).
pub(crate) const BLOCK: u32 = 256;
/// Warps per block of the kNN leaf kernel (`ZT_LEAF_WARPS`): its registers allow five
/// warps per SM sub-partition, which blocks of four fill and blocks of eight do not.
pub(crate) const LEAF_WARPS: u32 = 4;

/// The device memory a `Device` has handed out: live bytes, and the most live at once since
/// the last `reset_peak` (the device scratch of one call, reported in its statistics).
#[derive(Default)]
pub(crate) struct AllocTracker {
    state: std::sync::Mutex<Allocs>,
    /// Bytes copied to the host and to the device so far (what crosses PCIe).
    to_host: std::sync::atomic::AtomicU64,
    to_device: std::sync::atomic::AtomicU64,
}

#[derive(Default)]
struct Allocs {
    sizes: std::collections::HashMap<DevPtr, usize>,
    live: usize,
    peak: usize,
}

impl AllocTracker {
    fn state(&self) -> std::sync::MutexGuard<'_, Allocs> {
        self.state.lock().unwrap_or_else(|e| e.into_inner())
    }
    pub(crate) fn on_alloc(&self, p: DevPtr, bytes: usize) {
        let mut s = self.state();
        s.sizes.insert(p, bytes);
        s.live += bytes;
        s.peak = s.peak.max(s.live);
    }
    /// The bytes of `p` (None: not handed out here).
    pub(crate) fn on_free(&self, p: DevPtr) -> Option<usize> {
        let mut s = self.state();
        let b = s.sizes.remove(&p)?;
        s.live -= b;
        Some(b)
    }
    /// Starts a new peak at the live bytes, which it returns.
    pub(crate) fn reset_peak(&self) -> usize {
        let mut s = self.state();
        s.peak = s.live;
        s.live
    }
    pub(crate) fn peak(&self) -> usize {
        self.state().peak
    }
    /// Counts a copy of `bytes` to the host (`to_host`) or to the device.
    pub(crate) fn on_copy(&self, bytes: usize, to_host: bool) {
        let c = if to_host { &self.to_host } else { &self.to_device };
        c.fetch_add(bytes as u64, std::sync::atomic::Ordering::Relaxed);
    }
    /// Bytes copied to the host and to the device since the tracker was made.
    pub(crate) fn copied(&self) -> (u64, u64) {
        use std::sync::atomic::Ordering::Relaxed;
        (self.to_host.load(Relaxed), self.to_device.load(Relaxed))
    }
}

pub(crate) trait Device: Send + Sync {
    /// The memory this device has handed out.
    fn tracker(&self) -> &AllocTracker;
    /// "CUDA device 0 (NVIDIA H100 ...)" or "emulator" (test messages so far).
    #[cfg_attr(not(test), allow(dead_code))]
    fn describe(&self) -> String;
    /// `bytes` of uninitialised device memory (at least 256-byte aligned).
    fn alloc(&self, bytes: usize) -> Result<DevPtr>;
    /// # Safety
    /// `p` came from `alloc` on this device and is not used afterwards.
    unsafe fn free(&self, p: DevPtr);
    /// # Safety
    /// `dst .. dst + src.len()` is device memory of this device.
    unsafe fn upload(&self, dst: DevPtr, src: &[u8]) -> Result<()>;
    /// Waits for the work queued before it.
    /// # Safety
    /// `src .. src + dst.len()` is device memory of this device.
    unsafe fn download(&self, dst: &mut [u8], src: DevPtr) -> Result<()>;
    /// # Safety
    /// `dst .. dst + bytes` is device memory of this device.
    unsafe fn zero(&self, dst: DevPtr, bytes: usize) -> Result<()>;
    /// Queues `kernel` (an `extern "C"` name from kernels/`module`.cu) over `grid` blocks
    /// of `BLOCK` threads.
    /// # Safety
    /// The arguments match the kernel's parameters and every pointer is valid for what
    /// the kernel does with it.
    unsafe fn launch(&self, module: &'static str, kernel: &'static str, grid: u32, args: &[Arg]) -> Result<()> {
        // SAFETY: as this function's.
        unsafe { self.launch_block(module, kernel, grid, BLOCK, args) }
    }
    /// `launch` with `block` threads per block (a kernel built for that size).
    /// # Safety
    /// As `launch`'s.
    unsafe fn launch_block(&self, module: &'static str, kernel: &'static str, grid: u32, block: u32, args: &[Arg]) -> Result<()>;
    /// Warps per block of the kNN leaf kernel (`ZT_LEAF_WARPS` in kernels/knn.cu, which the
    /// module was compiled with).
    fn leaf_warps(&self) -> u32 {
        LEAF_WARPS
    }
    /// The end of a stage of a call (`Backend::end_stage`): the real device waits there for
    /// the stage's work when asked to (`ZTREE_CUDA_SYNC_STAGES=1`), so that the stage
    /// breakdown bills each stage its own device time; otherwise nothing.
    fn end_stage(&self) {}
    /// Waits for the work queued so far (the emulator runs each launch to its end, so it
    /// has nothing to wait for).
    fn wait(&self) -> Result<()> {
        Ok(())
    }
    /// `true` at the start of a call, `false` at its end (`HeldMemory`; holds nest): the
    /// real device keeps the memory the call frees for its later allocations, and at the
    /// outermost end waits for its stream and hands that memory back.
    fn hold_memory(&self, hold: bool) {
        let _ = hold;
    }
}

/// The memory a call frees kept for the call's later allocations while this lives
/// (`Device::hold_memory`).
pub(crate) struct HeldMemory<'a>(&'a dyn Device);

impl<'a> HeldMemory<'a> {
    pub(crate) fn new(dev: &'a dyn Device) -> Self {
        dev.hold_memory(true);
        Self(dev)
    }
}

impl Drop for HeldMemory<'_> {
    fn drop(&mut self) {
        self.0.hold_memory(false);
    }
}

/// The bytes of plain data (`Elem`: integers, floats and arrays of them).
pub(crate) fn bytes_of<E: Elem>(v: &[E]) -> &[u8] {
    // SAFETY: `Elem` types are plain data with no padding.
    unsafe { std::slice::from_raw_parts(v.as_ptr().cast(), size_of_val(v)) }
}

/// `n` elements of `T` in device memory, freed on drop.
pub(crate) struct DevBuf<T: Elem> {
    dev: Arc<dyn Device>,
    ptr: DevPtr,
    len: usize,
    _t: PhantomData<T>,
}

impl<T: Elem> DevBuf<T> {
    /// Uninitialised (the kernels write before they read).
    pub(crate) fn new(dev: &Arc<dyn Device>, len: usize) -> Result<Self> {
        let bytes = len.checked_mul(size_of::<T>()).ok_or(Error::OutOfMemory { what: "device buffer", bytes: u64::MAX })?;
        let ptr = dev.alloc(bytes.max(1))?;
        Ok(Self { dev: dev.clone(), ptr, len, _t: PhantomData })
    }
    pub(crate) fn zeros(dev: &Arc<dyn Device>, len: usize) -> Result<Self> {
        let b = Self::new(dev, len)?;
        if len > 0 {
            // SAFETY: the buffer is `len` elements of this device.
            unsafe { dev.zero(b.ptr, len * size_of::<T>())? };
        }
        Ok(b)
    }
    pub(crate) fn from_slice(dev: &Arc<dyn Device>, v: &[T]) -> Result<Self> {
        let b = Self::new(dev, v.len())?;
        if !v.is_empty() {
            // SAFETY: the buffer holds `v.len()` elements.
            unsafe { dev.upload(b.ptr, bytes_of(v))? };
        }
        Ok(b)
    }
    pub(crate) fn to_vec(&self) -> Result<Vec<T>> {
        let mut v = vec![T::FILL; self.len];
        if self.len > 0 {
            // SAFETY: as in `from_slice`; every bit pattern of the `Elem` types is valid.
            unsafe { self.dev.download(std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), self.len * size_of::<T>()), self.ptr)? };
        }
        Ok(v)
    }
    pub(crate) fn ptr(&self) -> DevPtr {
        self.ptr
    }
    pub(crate) fn arg(&self) -> Arg {
        Arg::Ptr(self.ptr)
    }
    pub(crate) fn len(&self) -> usize {
        self.len
    }
}

impl<T: Elem> Drop for DevBuf<T> {
    fn drop(&mut self) {
        // SAFETY: allocated by `new` on this device, dropped once.
        unsafe { self.dev.free(self.ptr) }
    }
}

/// Blocks covering `n` items at `per_block` items each.
pub(crate) fn blocks(n: usize, per_block: usize) -> Result<u32> {
    u32::try_from(n.div_ceil(per_block)).map_err(|_| Error::TooManyPoints { got: n, max: u32::MAX as usize })
}
