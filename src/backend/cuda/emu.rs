//! The emulated device: kernels/*.cu compiled for the CPU with kernels/emu/cuda_emu.hpp
//! (built by build.rs under the `cuda-emu` feature), device memory in host memory.

use std::alloc::Layout;
use std::ffi::{CString, c_char, c_int, c_void};

use super::device::{AllocTracker, Arg, DevPtr, Device};
use crate::error::{Error, Result};

unsafe extern "C" {
    fn zt_emu_launch(name: *const c_char, gx: u32, gy: u32, gz: u32, bx: u32, by: u32, bz: u32, args: *mut *mut c_void) -> c_int;
}

type LaunchFn = unsafe extern "C" fn(*const c_char, u32, u32, u32, u32, u32, u32, *mut *mut c_void) -> c_int;

/// The environment variable naming a shared library of the kernels to use instead of the
/// ones linked in: the checked build (`make test-emu-check`: sanitizers and the interleaved
/// schedule), which then needs no second build of the crate.
pub(crate) const CHECKED_KERNELS_ENV: &str = "ZTREE_EMU_KERNELS";

/// Whether the kernels come from `ZTREE_EMU_KERNELS` (tests keep their cases few there).
#[cfg_attr(not(test), allow(dead_code))]
pub(crate) fn checked_kernels() -> bool {
    std::env::var_os(CHECKED_KERNELS_ENV).is_some()
}

/// The launch entry point: the linked kernels', or those of the library `ZTREE_EMU_KERNELS`
/// names (loaded once and kept for the process's life).
fn launcher() -> Result<LaunchFn> {
    static LAUNCH: std::sync::OnceLock<std::result::Result<LaunchFn, String>> = std::sync::OnceLock::new();
    LAUNCH
        .get_or_init(|| {
            let Some(path) = std::env::var_os(CHECKED_KERNELS_ENV) else { return Ok(zt_emu_launch as LaunchFn) };
            // SAFETY: the library is the emulator's kernels built from kernels/emu (its
            // initialisers register kernels only); it is never unloaded.
            let lib = unsafe { libloading::Library::new(&path) }.map_err(|e| format!("{CHECKED_KERNELS_ENV}={}: {e}", path.to_string_lossy()))?;
            // SAFETY: zt_emu_launch has this signature in kernels/emu/all_kernels.cpp.
            let f = unsafe { lib.get::<LaunchFn>(b"zt_emu_launch\0") }.map(|s| *s).map_err(|e| format!("zt_emu_launch: {e}"))?;
            std::mem::forget(lib);
            Ok(f)
        })
        .clone()
        .map_err(Error::Device)
}

/// The emulator; allocations are tracked so that `free` knows their size.
#[derive(Default)]
pub(crate) struct EmuDevice {
    live: AllocTracker,
    /// Launches so far, by kernel (tests: how many a call makes).
    launches: std::sync::Mutex<std::collections::BTreeMap<&'static str, u64>>,
}

impl EmuDevice {
    /// Launches by kernel since the last call, and their total.
    #[cfg_attr(not(test), allow(dead_code))]
    pub(crate) fn take_launches(&self) -> (std::collections::BTreeMap<&'static str, u64>, u64) {
        let m = std::mem::take(&mut *self.launches.lock().unwrap_or_else(|e| e.into_inner()));
        let total = m.values().sum();
        (m, total)
    }
}

const ALIGN: usize = 256;

/// Every emulated device allocation (start, bytes), so that a caller pointer can be told
/// device memory or not, as the driver tells it (`is_device_memory`).
static ALLOCATIONS: std::sync::Mutex<std::collections::BTreeMap<usize, usize>> = std::sync::Mutex::new(std::collections::BTreeMap::new());

fn allocations() -> std::sync::MutexGuard<'static, std::collections::BTreeMap<usize, usize>> {
    ALLOCATIONS.lock().unwrap_or_else(|e| e.into_inner())
}

/// Whether `p` lies in an emulated device allocation.
pub(crate) fn is_device_memory(p: DevPtr) -> bool {
    let p = p as usize;
    allocations().range(..=p).next_back().is_some_and(|(&start, &len)| p < start + len)
}

/// `bytes` of emulated device memory, filled with a pattern (a kernel that reads what it
/// never wrote shows), registered as device memory.
pub(crate) fn alloc_device(bytes: usize) -> Result<DevPtr> {
    let layout =
        Layout::from_size_align(bytes.max(1), ALIGN).map_err(|_| Error::OutOfMemory { what: "emulated device buffer", bytes: bytes as u64 })?;
    // SAFETY: the layout has non-zero size.
    let p = unsafe { std::alloc::alloc(layout) };
    if p.is_null() {
        return Err(Error::OutOfMemory { what: "emulated device buffer", bytes: bytes as u64 });
    }
    // SAFETY: `p` holds `layout.size()` bytes.
    unsafe { p.write_bytes(0xa5, layout.size()) };
    allocations().insert(p as usize, layout.size());
    Ok(p as DevPtr)
}

/// Frees an `alloc_device` allocation of `bytes`.
///
/// # Safety
/// `p` came from `alloc_device(bytes)` and is not used afterwards.
pub(crate) unsafe fn free_device(p: DevPtr, bytes: usize) {
    allocations().remove(&(p as usize));
    // SAFETY: allocated by `alloc_device` with this size and alignment.
    unsafe { std::alloc::dealloc(p as *mut u8, Layout::from_size_align_unchecked(bytes.max(1), ALIGN)) }
}

impl Device for EmuDevice {
    fn tracker(&self) -> &AllocTracker {
        &self.live
    }
    fn describe(&self) -> String {
        "CUDA emulator (kernels compiled for the CPU)".into()
    }

    fn alloc(&self, bytes: usize) -> Result<DevPtr> {
        let p = alloc_device(bytes)?;
        self.live.on_alloc(p, bytes.max(1));
        Ok(p)
    }

    unsafe fn free(&self, p: DevPtr) {
        if let Some(size) = self.live.on_free(p) {
            // SAFETY: allocated by `alloc` with this size.
            unsafe { free_device(p, size) }
        }
    }

    unsafe fn upload(&self, dst: DevPtr, src: &[u8]) -> Result<()> {
        self.live.on_copy(src.len(), false);
        // SAFETY: the caller guarantees `dst` holds `src.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src.as_ptr(), dst as *mut u8, src.len()) };
        Ok(())
    }

    unsafe fn download(&self, dst: &mut [u8], src: DevPtr) -> Result<()> {
        self.live.on_copy(dst.len(), true);
        // SAFETY: the caller guarantees `src` holds `dst.len()` bytes.
        unsafe { std::ptr::copy_nonoverlapping(src as *const u8, dst.as_mut_ptr(), dst.len()) };
        Ok(())
    }

    unsafe fn zero(&self, dst: DevPtr, bytes: usize) -> Result<()> {
        // SAFETY: the caller guarantees `dst` holds `bytes` bytes.
        unsafe { (dst as *mut u8).write_bytes(0, bytes) };
        Ok(())
    }

    unsafe fn launch_block(&self, _module: &'static str, kernel: &'static str, grid: u32, block: u32, args: &[Arg]) -> Result<()> {
        let mut ptrs: Vec<*mut c_void> = args.iter().map(Arg::as_ptr).collect();
        let name = CString::new(kernel).map_err(|_| Error::Device(format!("bad kernel name {kernel}")))?;
        *self.launches.lock().unwrap_or_else(|e| e.into_inner()).entry(kernel).or_default() += 1;
        // SAFETY: the caller guarantees the arguments match the kernel.
        let launch = launcher()?;
        match unsafe { launch(name.as_ptr(), grid, 1, 1, block, 1, 1, ptrs.as_mut_ptr()) } {
            0 => Ok(()),
            1 => Err(Error::Device(format!("emulator: no kernel named {kernel}"))),
            code => Err(Error::Device(format!("emulator: launch of {kernel} failed ({code})"))),
        }
    }
}
