//! The C ABI (docs/DESIGN.md §8): a thin layer over the safe core. Every exported function
//! catches panics, checks every pointer and size before use, and returns a
//! `ztree_status`; `ztree_last_error` gives the message. Input arrays are only read;
//! outputs go to caller arrays or to buffers owned by the context.

#![allow(non_camel_case_types)]
#![allow(clippy::missing_safety_doc)]
// C entry points take raw pointers by contract (checked for NULL, never freed unless
// handed over); marking them `unsafe` would change nothing for C callers.
#![allow(clippy::not_unsafe_ptr_arg_deref)]

pub(crate) mod abi;
pub(crate) mod dbscan;
#[cfg(feature = "cuda")]
pub(crate) mod device;
#[cfg(feature = "cuda")]
mod device_dbscan;
#[cfg(feature = "cuda")]
mod device_radius;
pub(crate) mod fof;
mod halo;
mod input;
pub(crate) mod knn;
mod out;
pub(crate) mod radius;
#[cfg(feature = "cuda")]
mod staged;
pub mod types;
#[allow(dead_code)] // read by cbindgen (the header's ZTREE_VERSION_* macros)
pub mod version;

use std::cell::RefCell;
use std::ffi::{CStr, CString, c_char};
use std::panic::{AssertUnwindSafe, catch_unwind};

pub use types::*;

use crate::api::{Config, Context, TreeParams};
use crate::error::Error;

/// A failure on its way to C: status and message.
#[derive(Debug)]
pub(crate) struct Fail {
    status: ztree_status,
    message: String,
}

pub(crate) fn fail(status: ztree_status, message: impl Into<String>) -> Fail {
    Fail { status, message: message.into() }
}

impl From<Error> for Fail {
    fn from(e: Error) -> Self {
        use ztree_status::*;
        let status = match &e {
            Error::NonFinite { .. } | Error::NonFiniteValue { .. } => ZTREE_ERR_NON_FINITE,
            Error::OutsideBox { .. } => ZTREE_ERR_OUTSIDE_BOX,
            Error::LengthMismatch { .. } | Error::TooManyPoints { .. } => ZTREE_ERR_SIZE,
            Error::NoSources => ZTREE_ERR_NO_SOURCES,
            Error::ThreadPool(_) => ZTREE_ERR_INTERNAL,
            Error::Mpi(_) => ZTREE_ERR_MPI,
            Error::RemoteRank { .. } => ZTREE_ERR_REMOTE,
            Error::OutOfMemory { .. } => ZTREE_ERR_MEMORY,
            Error::NoDevice(_) => ZTREE_ERR_NO_DEVICE,
            Error::Device(_) => ZTREE_ERR_DEVICE,
            _ => ZTREE_ERR_INVALID_ARGUMENT,
        };
        fail(status, e.to_string())
    }
}

/// The opaque handle: create once, reuse every time step, destroy at the end.
pub struct ztree_context {
    pub(crate) core: Context,
    pub(crate) config: ztree_config,
    /// The duplicate of the communicator given to `ztree_create_mpi` (None: serial).
    pub(crate) comm: out::CommSlot,
    pub(crate) last_error: CString,
    pub(crate) buffers: out::Buffers,
    /// The device and device output buffers of the last call on device arrays.
    #[cfg(feature = "cuda")]
    pub(crate) device: device::DeviceState,
    pub(crate) stats: ztree_stats,
}

thread_local! {
    /// Errors of calls without a usable context (e.g. a failed `ztree_create`).
    static THREAD_ERROR: RefCell<CString> = RefCell::new(CString::default());
}

fn to_cstring(s: &str) -> CString {
    CString::new(s.replace('\0', " ")).unwrap_or_default()
}

fn set_thread_error(msg: &str) {
    THREAD_ERROR.with(|e| *e.borrow_mut() = to_cstring(msg));
}

fn panic_message(p: Box<dyn std::any::Any + Send>) -> String {
    if let Some(s) = p.downcast_ref::<&str>() {
        s.to_string()
    } else if let Some(s) = p.downcast_ref::<String>() {
        s.clone()
    } else {
        "unknown panic".to_string()
    }
}

/// Runs `f` with panics caught; records the message of a failure on `ctx` (when given)
/// and for the calling thread.
pub(crate) fn guard(ctx: *mut ztree_context, f: impl FnOnce() -> Result<(), Fail>) -> ztree_status {
    let r = match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => r,
        Err(p) => Err(fail(ztree_status::ZTREE_ERR_INTERNAL, format!("internal error (please report): {}", panic_message(p)))),
    };
    match r {
        Ok(()) => ztree_status::ZTREE_OK,
        Err(e) => {
            set_thread_error(&e.message);
            if !ctx.is_null() {
                // SAFETY: non-null handles come from `ztree_create*` and are not shared
                // between threads during a call (documented).
                unsafe { (*ctx).last_error = to_cstring(&e.message) };
            }
            e.status
        }
    }
}

fn check_config(c: &ztree_config) -> Result<Config, Fail> {
    let bad = |m: String| Err(fail(ztree_status::ZTREE_ERR_INVALID_ARGUMENT, m));
    if c.dims != 2 && c.dims != 3 {
        return bad(format!("config.dims must be 2 or 3 (got {})", c.dims));
    }
    if c.periodic != 0 && c.periodic != 1 {
        return bad(format!("config.periodic must be 0 or 1 (got {})", c.periodic));
    }
    if c.periodic == 1 {
        for d in 0..c.dims as usize {
            let l = c.box_size[d];
            if !(l.is_finite() && l > 0.0) {
                return bad(format!("config.box_size[{d}] must be finite and > 0 for a periodic box (got {l})"));
            }
        }
        crate::input::domain::check_aspect(&c.box_size[..c.dims as usize])?;
    }
    if c.memory_limit < 0 {
        return bad(format!("config.memory_limit must be >= 0 bytes (0 = no limit; got {})", c.memory_limit));
    }
    if c.threads < 0 {
        return bad(format!("config.threads must be >= 0 (got {})", c.threads));
    }
    if !(c.particle_mass.is_finite() && c.particle_mass > 0.0) {
        return bad(format!("config.particle_mass must be finite and > 0 (got {})", c.particle_mass));
    }
    let pos = |name: &str, v: i32| {
        if v < 1 {
            Err(fail(
                ztree_status::ZTREE_ERR_INVALID_ARGUMENT,
                format!("config.{name} must be >= 1{} (got {v})", if name == "leaf_size" { ", or 0 for automatic" } else { "" }),
            ))
        } else {
            Ok(v as usize)
        }
    };
    let tree = TreeParams {
        leaf_size: if c.leaf_size == 0 { 0 } else { pos("leaf_size", c.leaf_size)? },
        coarsening: pos("coarsening", c.coarsening)?,
        top_target: pos("top_target", c.top_target)?,
        super_group: pos("super_group", c.super_group)?,
        max_volume_factor: c.max_volume_factor,
    };
    tree.validate()?;
    Ok(Config { threads: c.threads as usize, tree })
}

fn create(cfg: *const ztree_config, comm_f: Option<i32>, out: *mut *mut ztree_context) -> Result<(), Fail> {
    if out.is_null() {
        return Err(fail(ztree_status::ZTREE_ERR_NULL_POINTER, "ztree_create: out is NULL"));
    }
    // SAFETY: checked non-null.
    unsafe { out.write(std::ptr::null_mut()) };
    // The communicator first, so that a bad configuration on one rank is an error on all.
    #[cfg(feature = "mpi")]
    let comm = comm_f.map(crate::mpi::Comm::from_fortran).transpose()?;
    #[cfg(not(feature = "mpi"))]
    let comm: out::CommSlot = match comm_f {
        Some(_) => {
            return Err(fail(ztree_status::ZTREE_ERR_UNSUPPORTED, "ztree_create_mpi: this build of ztree has no MPI support (cargo feature `mpi`)"));
        }
        None => None,
    };
    let local = (|| {
        if cfg.is_null() {
            return Err(fail(ztree_status::ZTREE_ERR_NULL_POINTER, "ztree_create: cfg is NULL (fill one with ztree_config_init)"));
        }
        // SAFETY: checked non-null; a ztree_config starts with its size.
        let c = unsafe { abi::read_in(cfg) }?;
        let core = Context::new(check_config(&c)?)?;
        Ok((c, core, out::Proposal { words: input::config_words(&c), optional: Vec::new() }))
    })();
    // Every rank's configuration valid and the shared part (dimensions, box) the same.
    let ((c, core, _), _) = out::agree_args(&comm, "ztree_create_mpi", local, |l| &l.2)?;
    let ctx = Box::new(ztree_context {
        core,
        config: c,
        comm,
        last_error: CString::default(),
        buffers: out::Buffers::default(),
        #[cfg(feature = "cuda")]
        device: Default::default(),
        stats: out::empty_stats(),
    });
    // SAFETY: checked non-null.
    unsafe { out.write(Box::into_raw(ctx)) };
    Ok(())
}

/// Creates a context for serial use. On failure `*out` is NULL and
/// `ztree_last_error(NULL)` explains.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_create(cfg: *const ztree_config, out: *mut *mut ztree_context) -> ztree_status {
    guard(std::ptr::null_mut(), || create(cfg, None, out))
}

/// Creates a context for a communicator, given as its Fortran handle (`MPI_Comm_c2f` in
/// C, the integer in Fortran) so that this header needs no mpi.h. Collective: every rank
/// of the communicator calls it (ztree duplicates the communicator). Every `ztree_knn` and
/// `ztree_fof` on the context is then collective too: each rank passes the particles it
/// holds (any number, zero included) and gets the results for exactly those particles, in
/// its input order, identical to one serial call on all ranks' particles concatenated in
/// rank order. Indices in results are such global indices: the particle counts of the
/// lower ranks plus the index on its rank. Destroy the context before MPI_Finalize.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_create_mpi(cfg: *const ztree_config, comm_f: i32, out: *mut *mut ztree_context) -> ztree_status {
    guard(std::ptr::null_mut(), || create(cfg, Some(comm_f), out))
}

/// Destroys a context and every buffer it owns. NULL is allowed (no-op).
#[unsafe(no_mangle)]
pub extern "C" fn ztree_destroy(ctx: *mut ztree_context) -> ztree_status {
    guard(std::ptr::null_mut(), || {
        if !ctx.is_null() {
            // SAFETY: handles come from Box::into_raw in `create`; destroy is called once.
            #[allow(unused_mut)]
            let mut ctx = unsafe { Box::from_raw(ctx) };
            #[cfg(feature = "mpi")]
            if let Some(c) = ctx.comm.take() {
                c.release();
            }
            drop(ctx);
        }
        Ok(())
    })
}

/// The message of the last failed call on `ctx`, or, with `ctx = NULL`, of the last
/// failed call on this thread (e.g. `ztree_create`). Empty when none; valid until the
/// next call on the same context (thread).
#[unsafe(no_mangle)]
pub extern "C" fn ztree_last_error(ctx: *const ztree_context) -> *const c_char {
    if ctx.is_null() {
        return THREAD_ERROR.with(|e| e.borrow().as_ptr());
    }
    // SAFETY: non-null handles come from `ztree_create*`.
    unsafe { (*ctx).last_error.as_ptr() }
}

/// A static description of a status code.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_status_string(s: ztree_status) -> *const c_char {
    let m: &'static CStr = match s {
        ztree_status::ZTREE_OK => c"ok",
        ztree_status::ZTREE_ERR_NULL_POINTER => c"a required pointer is NULL",
        ztree_status::ZTREE_ERR_INVALID_ARGUMENT => c"invalid argument",
        ztree_status::ZTREE_ERR_NON_FINITE => c"non-finite coordinate or value",
        ztree_status::ZTREE_ERR_OUTSIDE_BOX => c"point outside the periodic box",
        ztree_status::ZTREE_ERR_SIZE => c"inconsistent or too large sizes",
        ztree_status::ZTREE_ERR_DTYPE => c"element type not allowed",
        ztree_status::ZTREE_ERR_UNSUPPORTED => c"not supported by this build or call",
        ztree_status::ZTREE_ERR_NO_SOURCES => c"no source particles",
        ztree_status::ZTREE_ERR_INTERNAL => c"internal error",
        ztree_status::ZTREE_ERR_MPI => c"MPI error",
        ztree_status::ZTREE_ERR_REMOTE => c"another rank reported an error",
        ztree_status::ZTREE_ERR_MEMORY => c"out of memory or over the memory limit",
        ztree_status::ZTREE_ERR_NO_DEVICE => c"no usable CUDA device",
        ztree_status::ZTREE_ERR_DEVICE => c"CUDA error",
    };
    m.as_ptr()
}

/// The number of CUDA devices ztree can use in this process: 0 without a CUDA driver, a
/// device, or NVRTC (`libnvrtc.so.12` or `.13`: loader path, `ZTREE_NVRTC`, or a CUDA
/// toolkit's lib64 under `CUDA_HOME`, `CUDA_PATH` or /usr/local/cuda), or in a build without the
/// CUDA back end. Never fails.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_cuda_device_count() -> i32 {
    #[cfg(feature = "cuda")]
    if let Ok(Ok(n)) = std::panic::catch_unwind(crate::backend::cuda::driver::device_count) {
        return n as i32;
    }
    0
}

/// The library version, "MAJOR.MINOR.PATCH" (compare with the ZTREE_VERSION_* macros
/// of the header you compiled against).
#[unsafe(no_mangle)]
pub extern "C" fn ztree_version() -> *const c_char {
    version::VERSION_CSTR.as_ptr()
}

/// Statistics of the last successful call on `ctx`.
#[unsafe(no_mangle)]
pub extern "C" fn ztree_get_stats(ctx: *const ztree_context, out: *mut ztree_stats) -> ztree_status {
    guard(std::ptr::null_mut(), || {
        if ctx.is_null() || out.is_null() {
            return Err(fail(ztree_status::ZTREE_ERR_NULL_POINTER, "ztree_get_stats: ctx or out is NULL"));
        }
        // SAFETY: checked non-null; a ztree_stats starts with its size.
        let mut s = unsafe { abi::read_in(out) }?;
        let size = s.struct_size;
        // SAFETY: checked non-null (handles come from `ztree_create*`).
        s = unsafe { (*ctx).stats };
        s.struct_size = size;
        // SAFETY: `out` holds the caller's layout, as `read_in` checked.
        unsafe { abi::write_out(out, &s) }
    })
}
