//! The per-element maths every back end shares: the coordinate types, the metric (minimum
//! image, distances, box bounds) and Morton keys. The CUDA kernels mirror these
//! definitions; keep the two in step.

pub(crate) mod metric;
pub(crate) mod morton;
pub(crate) mod real;

pub use real::Real;
