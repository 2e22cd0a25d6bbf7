//! The CUDA back end (docs/DESIGN.md §7): kernels in kernels/*.cu, compiled at run time
//! by NVRTC for the real device, or for the CPU by the emulator (feature `cuda-emu`), both
//! behind the `Device` trait so that the host logic is shared and tested without a GPU.
//!
//! `device` (the trait, `DevBuf`), `driver` (a GPU through the driver API and NVRTC),
//! `emu` (the emulator), `sources` (the embedded kernel sources), `prims` (keys, scan, sort,
//! gathers), `walk` (candidates and the kNN passes), `fof` (the FoF linking), `refine`
//! (runs of identical keys), `tree` (plane construction), `catalogue` (the FoF catalogue), `radius` (radius queries),
//! `backend` (`impl Backend for Cuda`).

#![cfg_attr(any(test, not(feature = "cuda")), allow(dead_code))]

pub(crate) mod backend;
pub(crate) mod catalogue;
#[cfg(all(test, feature = "cuda-emu"))]
mod dbscan_tests;
pub(crate) mod device;
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
mod dist;
#[cfg(all(test, any(feature = "cuda", feature = "cuda-emu")))]
mod dist_tests;
#[cfg(feature = "cuda")]
pub(crate) mod driver;
#[cfg(feature = "cuda-emu")]
pub(crate) mod emu;
pub(crate) mod fof;
#[cfg(feature = "cuda")]
pub(crate) mod nvrtc;
#[cfg(all(test, feature = "cuda"))]
mod nvrtc_check;
#[cfg(all(test, any(feature = "cuda", feature = "cuda-emu")))]
mod pipeline_tests;
pub(crate) mod prims;
mod radius;
#[cfg(all(test, any(feature = "cuda", feature = "cuda-emu")))]
mod radius_tests;
pub(crate) mod refine;
pub(crate) mod sources;
#[cfg(all(test, any(feature = "cuda", feature = "cuda-emu")))]
mod tests;
pub(crate) mod tree;
pub(crate) mod walk;

/// Tests: the device node test's sizes at their defaults (`crate::test_knobs`).
#[cfg(test)]
pub(crate) fn reset_test_knobs() {
    walk::reset_test_knobs();
    radius::SUM_CHUNK.store(radius::SUM_CHUNK_DEFAULT, std::sync::atomic::Ordering::Relaxed);
}
