//! The CUDA back end (docs/DESIGN.md §CUDA): kernels in kernels/*.cu, compiled at run time
//! by NVRTC for the real device, or for the CPU by the emulator (feature `cuda-emu`), both
//! behind the `Device` trait so that the host logic is shared and tested without a GPU.
//!
//! Built so far: the device layer (real and emulated), the kernel sources and their NVRTC
//! build, and the first primitives of the prepare stage (keys, levels, scan, radix sort).
//! The Backend implementation over them is the next step; until it exists, device arrays
//! are refused with a clear status (`ZTREE_ERR_NO_DEVICE` without a GPU).

#![cfg_attr(any(test, not(feature = "cuda")), allow(dead_code))]

pub(crate) mod backend;
pub(crate) mod device;
#[cfg(feature = "cuda")]
pub(crate) mod driver;
#[cfg(feature = "cuda-emu")]
pub(crate) mod emu;
pub(crate) mod fof;
pub(crate) mod prims;
pub(crate) mod sources;
pub(crate) mod walk;
#[cfg(all(test, any(feature = "cuda", feature = "cuda-emu")))]
mod tests;
#[cfg(all(test, feature = "cuda"))]
mod nvrtc_check;
#[cfg(all(test, any(feature = "cuda", feature = "cuda-emu")))]
mod pipeline_tests;
