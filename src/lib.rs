//! # ztree
//!
//! Exact k-nearest-neighbour search and friends-of-friends halo finding for particle
//! simulations, on a z-ordered plane tree with dual tree walks (the jz-tree algorithm).
//!
//! ```
//! use ztree::{Config, Context, Domain};
//! let pts: Vec<[f64; 3]> = (0..1000).map(|i| {
//!     let t = i as f64;
//!     [(t * 0.618).fract(), (t * 0.414).fract(), (t * 0.732).fract()]
//! }).collect();
//! let ctx = Context::new(Config::default()).unwrap();
//! let res = ctx.knn_lists(&Domain::Periodic([1.0; 3]), &pts, None, 8).unwrap();
//! assert_eq!(res.indices[0], 0); // a point is its own first neighbour
//! ```
//!
//! Map of the crate (docs/DESIGN.md has the design):
//! - `api`: `Context`, `Config`, the Rust entry points (serial; `Dist` over MPI);
//! - `input`: how particles, fields and the domain are described, and their checks;
//! - `geom`: the per-element maths (metric, minimum image, Morton keys);
//! - `knn`, `fof`: what a job is (parameters, outputs, statistics, reductions);
//! - `pipeline`: the stage order, written once; `backend`: the stages (CPU);
//! - `mpi`: the distribution layer; `ffi`: the C ABI.

#![warn(missing_docs)]

// Unit tests share the integration tests' helpers, which name the crate `ztree`.
#[cfg(test)]
extern crate self as ztree;

mod api;
mod backend;
mod base;
pub mod dbscan;
mod error;
mod ffi;
mod fof;
mod geom;
pub mod halo;
mod input;
mod knn;
#[cfg(feature = "mpi")]
mod mpi;
mod pipeline;
pub mod radius;
// The Rust code blocks of the documentation, compiled and run as doc tests
// (scripts/check_doc_examples.py checks that every page with one is named here).
#[cfg(doctest)]
#[doc = include_str!("../README.md")]
struct ReadmeExamples;
#[cfg(doctest)]
#[doc = include_str!("../docs/rust-api.md")]
struct RustApiGuideExamples;
/// The integration tests' helpers (point sets, oracles, the skip-or-fail rule of tests
/// with prerequisites), shared with the unit tests.
#[cfg(test)]
#[path = "../tests/common/mod.rs"]
pub(crate) mod test_common;
#[cfg(test)]
mod test_knobs;
#[cfg(test)]
pub(crate) use test_common::require as test_require;

#[cfg(feature = "mpi")]
pub use api::Dist;
#[cfg(feature = "cuda")]
pub use api::device::{CudaDevice, DeviceArray, DeviceFofFields, DeviceKnnFields, DeviceKnnOutput, DeviceOut, DevicePoints, DeviceType};
#[cfg(feature = "cuda")]
pub use api::radius_device::{DeviceRadiusFields, DeviceRadiusOutput};
pub use api::{Config, Context, KnnSubset, Timings, TreeParams, WalkStats};
pub use dbscan::{BorderPoints, Dbscan, DbscanCatalogue, DbscanParams, DbscanStats, PointClass};
pub use error::{Error, Result};
pub use fof::{Catalogue, CatalogueOrder, Fof, FofFields, FofParams, FofStats, LinkingLength};
pub use geom::Real;
pub use input::{Domain, ParticleIds, PointSource, ScalarField, SoaPoints, VectorField};
pub use knn::{KnnLists, KnnOutput, KnnParams, KnnStats, OutputOrder, SourceFields};
pub use radius::{ListOrder, NeighbourLists, Radius, RadiusOutput, RadiusParams, RadiusStats, SearchRadius};
/// Test hooks of builds with the CUDA emulator (feature `cuda-emu`, never shipped): the C
/// API and a switch that runs "device" calls on the emulated device, whose memory is host
/// memory, for tests that cannot reach the crate's internals (the MPI tests).
#[cfg(all(feature = "cuda-emu", feature = "cuda"))]
#[doc(hidden)]
#[allow(missing_docs)] // test hooks: the C API's own items, documented in the header
pub mod __emulator {
    pub use crate::ffi::abi::Versioned;
    pub use crate::ffi::dbscan::ztree_dbscan;
    pub use crate::ffi::fof::ztree_fof;
    pub use crate::ffi::knn::ztree_knn;
    pub use crate::ffi::radius::ztree_radius;
    pub use crate::ffi::types::*;
    #[cfg(feature = "mpi")]
    pub use crate::ffi::ztree_create_mpi;
    pub use crate::ffi::{ztree_context, ztree_create, ztree_destroy, ztree_last_error};

    /// Device calls on the emulator from now on (`true`) or on real devices.
    pub fn emulate_devices(on: bool) {
        crate::ffi::device::EMULATE.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// Device pointers must be emulated device allocations (`DeviceMemory`), as a driver
    /// requires (`true`), or may be any host memory (`false`, the default).
    pub fn strict_device_pointers(on: bool) {
        crate::ffi::device::STRICT.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// This process's device cannot be used from now on (`true`): device calls fail with
    /// `ZTREE_ERR_NO_DEVICE`.
    pub fn fail_devices(on: bool) {
        crate::ffi::device::FAIL.store(on, std::sync::atomic::Ordering::Relaxed);
    }

    /// A handle on the emulated device, for the Rust API's device calls.
    pub fn emulated_device() -> crate::CudaDevice {
        crate::CudaDevice::from_device(std::sync::Arc::new(crate::backend::cuda::emu::EmuDevice::default()))
    }

    /// A copy of host data in emulated device memory, freed on drop.
    pub struct DeviceMemory {
        ptr: u64,
        bytes: usize,
    }

    impl DeviceMemory {
        /// `v`'s bytes in emulated device memory.
        pub fn from_slice<T: Copy>(v: &[T]) -> Self {
            let bytes = std::mem::size_of_val(v);
            let ptr = crate::backend::cuda::emu::alloc_device(bytes).expect("emulated device memory");
            // SAFETY: the allocation holds `bytes` bytes; `v` is plain data of that size.
            unsafe { std::ptr::copy_nonoverlapping(v.as_ptr().cast::<u8>(), ptr as *mut u8, bytes) };
            Self { ptr, bytes }
        }
        /// The allocation's start.
        pub fn ptr(&self) -> *const std::ffi::c_void {
            self.ptr as *const std::ffi::c_void
        }
    }

    impl Drop for DeviceMemory {
        fn drop(&mut self) {
            // SAFETY: allocated by `alloc_device(bytes)`, dropped once.
            unsafe { crate::backend::cuda::emu::free_device(self.ptr, self.bytes) }
        }
    }
}

#[cfg(feature = "mpi")]
pub use mpi::{CatalogueScope, CommStage, CommStats, DistFofStats, DistKnnStats, DistRadiusStats, DistStats};
