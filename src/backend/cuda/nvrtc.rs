//! NVRTC, opened at run time by ztree itself: CUDA 12's (`libnvrtc.so.12`) or CUDA 13's
//! (`libnvrtc.so.13`), from the loader path, `ZTREE_NVRTC` (a file), or a CUDA toolkit
//! (`CUDA_HOME`, `CUDA_PATH`, /usr/local/cuda). cudarc's own loader only knows CUDA 12's
//! names, and GPU machines with a CUDA 13 driver often ship only NVRTC 13. The device
//! loads CUBIN for its own architecture (`compile_cubin`), which any NVRTC of the driver's
//! major version makes loadable; PTX (`compile_ptx`) is only the ptxas check's input.

use std::ffi::{CStr, CString, c_char, c_int, c_void};
use std::sync::OnceLock;

use libloading::Library;

type Prog = *mut c_void;

/// The NVRTC entry points used, and the library they live in.
struct Nvrtc {
    _lib: Library,
    /// NVRTC's builtins, opened beside a library found by path (NVRTC opens them by name).
    _builtins: Vec<Library>,
    version: (i32, i32),
    create: unsafe extern "C" fn(*mut Prog, *const c_char, *const c_char, c_int, *const *const c_char, *const *const c_char) -> c_int,
    compile: unsafe extern "C" fn(Prog, c_int, *const *const c_char) -> c_int,
    ptx_size: unsafe extern "C" fn(Prog, *mut usize) -> c_int,
    ptx: unsafe extern "C" fn(Prog, *mut c_char) -> c_int,
    cubin_size: unsafe extern "C" fn(Prog, *mut usize) -> c_int,
    cubin: unsafe extern "C" fn(Prog, *mut c_char) -> c_int,
    log_size: unsafe extern "C" fn(Prog, *mut usize) -> c_int,
    log: unsafe extern "C" fn(Prog, *mut c_char) -> c_int,
    destroy: unsafe extern "C" fn(*mut Prog) -> c_int,
    error: unsafe extern "C" fn(c_int) -> *const c_char,
}

/// Where NVRTC is looked for, in order.
fn candidates() -> Vec<String> {
    let names = ["libnvrtc.so.12", "libnvrtc.so.13", "libnvrtc.so"];
    let mut c: Vec<String> = std::env::var("ZTREE_NVRTC").into_iter().collect();
    c.extend(names.iter().map(|s| s.to_string()));
    let mut dirs: Vec<String> = ["CUDA_HOME", "CUDA_PATH"].iter().filter_map(|v| std::env::var(v).ok()).map(|d| format!("{d}/lib64")).collect();
    dirs.push("/usr/local/cuda/lib64".into());
    for d in dirs {
        c.extend(names.iter().map(|n| format!("{d}/{n}")));
    }
    c
}

fn open(path: &str) -> Result<Nvrtc, String> {
    // SAFETY: loading NVRTC runs no initialisation with preconditions; the symbols are
    // NVRTC's documented C entry points with these signatures (CUDA 12 and 13 alike).
    unsafe {
        let lib = Library::new(path).map_err(|e| e.to_string())?;
        // NVRTC opens libnvrtc-builtins.so.X.Y by name when it compiles; one already loaded
        // under that name is found first, so a toolkit off the loader path works too.
        let mut builtins = Vec::new();
        if let Some(dir) = std::path::Path::new(path).parent().filter(|d| !d.as_os_str().is_empty()) {
            for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
                let name = e.file_name().to_string_lossy().into_owned();
                if name.starts_with("libnvrtc-builtins.so.") {
                    builtins.extend(Library::new(e.path()).ok());
                }
            }
        }
        macro_rules! sym {
            ($name:literal) => {
                *lib.get($name).map_err(|e| format!("{path}: {e}"))?
            };
        }
        let version_fn: unsafe extern "C" fn(*mut c_int, *mut c_int) -> c_int = sym!(b"nvrtcVersion\0");
        let (mut major, mut minor) = (0, 0);
        version_fn(&mut major, &mut minor);
        Ok(Nvrtc {
            version: (major, minor),
            create: sym!(b"nvrtcCreateProgram\0"),
            compile: sym!(b"nvrtcCompileProgram\0"),
            ptx_size: sym!(b"nvrtcGetPTXSize\0"),
            ptx: sym!(b"nvrtcGetPTX\0"),
            cubin_size: sym!(b"nvrtcGetCUBINSize\0"),
            cubin: sym!(b"nvrtcGetCUBIN\0"),
            log_size: sym!(b"nvrtcGetProgramLogSize\0"),
            log: sym!(b"nvrtcGetProgramLog\0"),
            destroy: sym!(b"nvrtcDestroyProgram\0"),
            error: sym!(b"nvrtcGetErrorString\0"),
            _lib: lib,
            _builtins: builtins,
        })
    }
}

fn nvrtc() -> Result<&'static Nvrtc, String> {
    static LIB: OnceLock<Result<Nvrtc, String>> = OnceLock::new();
    LIB.get_or_init(|| {
        let tried = candidates();
        tried.iter().find_map(|p| open(p).ok()).ok_or_else(|| format!("NVRTC (libnvrtc.so.12 or .13, CUDA 12 or 13) not found: tried {}; put a CUDA toolkit's lib64 on LD_LIBRARY_PATH or name the file in ZTREE_NVRTC", tried.join(", ")))
    })
    .as_ref()
    .map_err(Clone::clone)
}

/// NVRTC's version, or why there is none.
pub(crate) fn version() -> Result<(i32, i32), String> {
    nvrtc().map(|n| n.version)
}

/// PTX of `src` (named `name` in messages) compiled with `options`; the compiler's log on
/// failure (the ptxas check's input; the device loads CUBIN).
#[cfg(test)]
pub(crate) fn compile_ptx(src: &str, name: &str, options: &[String]) -> Result<String, String> {
    let mut ptx = compile(src, name, options, false)?;
    while ptx.last() == Some(&0) {
        ptx.pop();
    }
    Ok(String::from_utf8_lossy(&ptx).into_owned())
}

/// Machine code (CUBIN) of `src` for the real architecture `options` name (`sm_XY`). Unlike
/// PTX it loads on a driver older than this NVRTC (within one CUDA major version).
pub(crate) fn compile_cubin(src: &str, name: &str, options: &[String]) -> Result<Vec<u8>, String> {
    compile(src, name, options, true)
}

fn compile(src: &str, name: &str, options: &[String], cubin: bool) -> Result<Vec<u8>, String> {
    let n = nvrtc()?;
    let csrc = CString::new(src).map_err(|e| e.to_string())?;
    let cname = CString::new(name).map_err(|e| e.to_string())?;
    let copts: Vec<CString> = options.iter().map(|o| CString::new(o.as_str())).collect::<Result<_, _>>().map_err(|e| e.to_string())?;
    let popts: Vec<*const c_char> = copts.iter().map(|o| o.as_ptr()).collect();
    let err = |code: c_int| -> String {
        // SAFETY: nvrtcGetErrorString returns a static NUL-terminated string.
        unsafe { CStr::from_ptr((n.error)(code)) }.to_string_lossy().into_owned()
    };
    let mut prog: Prog = std::ptr::null_mut();
    // SAFETY: NUL-terminated source and name, no headers (the sources are flattened).
    let rc = unsafe { (n.create)(&mut prog, csrc.as_ptr(), cname.as_ptr(), 0, std::ptr::null(), std::ptr::null()) };
    if rc != 0 {
        return Err(format!("nvrtcCreateProgram: {}", err(rc)));
    }
    let (size, get, what) = if cubin { (n.cubin_size, n.cubin, "nvrtcGetCUBIN") } else { (n.ptx_size, n.ptx, "nvrtcGetPTX") };
    // SAFETY (all calls below): `prog` is a live program, destroyed once at the end; the
    // buffers have the sizes NVRTC reported.
    let out = unsafe {
        let rc = (n.compile)(prog, popts.len() as c_int, popts.as_ptr());
        if rc != 0 {
            let mut len = 0usize;
            (n.log_size)(prog, &mut len);
            let mut log = vec![0u8; len.max(1)];
            (n.log)(prog, log.as_mut_ptr().cast());
            Err(format!("{}: {}", err(rc), String::from_utf8_lossy(&log).trim_end_matches('\0')))
        } else {
            let mut len = 0usize;
            let rc = size(prog, &mut len);
            let mut image = vec![0u8; len.max(1)];
            let rc = if rc == 0 { get(prog, image.as_mut_ptr().cast()) } else { rc };
            if rc != 0 || len == 0 { Err(format!("{what}: {}", err(rc))) } else { Ok(image) }
        }
    };
    // SAFETY: as above.
    unsafe { (n.destroy)(&mut prog) };
    out
}
