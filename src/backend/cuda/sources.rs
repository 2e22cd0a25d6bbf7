//! The kernel sources, embedded in the library: NVRTC compiles them at run time on the
//! device the caller's arrays live on, so the library needs no CUDA toolkit to build.

/// Every kernel module: kernels/`name`.cu.
pub(crate) const MODULES: &[(&str, &str)] = &[
    ("keys", include_str!("../../../kernels/keys.cu")),
    ("scan", include_str!("../../../kernels/scan.cu")),
    ("sort", include_str!("../../../kernels/sort.cu")),
    ("refine", include_str!("../../../kernels/refine.cu")),
    ("tree", include_str!("../../../kernels/tree.cu")),
    ("walk", include_str!("../../../kernels/walk.cu")),
    ("knn", include_str!("../../../kernels/knn.cu")),
    ("fof", include_str!("../../../kernels/fof.cu")),
    ("radius", include_str!("../../../kernels/radius.cu")),
    ("catalogue", include_str!("../../../kernels/catalogue.cu")),
    ("dist", include_str!("../../../kernels/dist.cu")),
    ("conformance", include_str!("../../../kernels/conformance.cu")),
];

/// The headers the modules include (the emulator's own header is never needed on the
/// device: it sits behind `#if !defined(__CUDACC__)`).
const HEADERS: &[(&str, &str)] = &[
    ("zt_cuda.cuh", include_str!("../../../kernels/zt_cuda.cuh")),
    ("zt_geom.cuh", include_str!("../../../kernels/zt_geom.cuh")),
    ("zt_block.cuh", include_str!("../../../kernels/zt_block.cuh")),
    ("zt_walk.cuh", include_str!("../../../kernels/zt_walk.cuh")),
    ("zt_field.cuh", include_str!("../../../kernels/zt_field.cuh")),
];

/// NVRTC options every module is compiled with: no multiply-add contraction, so that the
/// device computes every distance exactly as the CPU does; 128-bit integers (the ranks' key
/// ranges in kernels/dist.cu).
pub(crate) const NVRTC_OPTIONS: &[&str] = &["--fmad=false", "--std=c++17", "--device-int128"];

/// Module `name`'s source with its `#include "header"` lines replaced by the headers'
/// text (each once), for NVRTC, which sees no files.
pub(crate) fn flattened(name: &str) -> Option<String> {
    let (_, src) = MODULES.iter().find(|(n, _)| *n == name)?;
    let mut out = String::new();
    let mut seen = Vec::new();
    inline(src, &mut out, &mut seen);
    Some(out)
}

fn inline(src: &str, out: &mut String, seen: &mut Vec<&'static str>) {
    for line in src.lines() {
        let header = line.trim().strip_prefix("#include \"").and_then(|r| r.strip_suffix('"'));
        match header.and_then(|h| HEADERS.iter().find(|(n, _)| *n == h)) {
            Some((n, text)) => {
                if !seen.contains(n) {
                    seen.push(n);
                    inline(text, out, seen);
                }
            }
            None if line.trim() == "#pragma once" => {}
            None => {
                out.push_str(line);
                out.push('\n');
            }
        }
    }
}
