//! The per-element maths every back end shares: the coordinate types, the metric (minimum
//! image, distances, box bounds) and Morton keys. The CUDA kernels mirror these
//! definitions; keep the two in step.

#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) mod decomp;
pub(crate) mod metric;
pub(crate) mod morton;
pub(crate) mod real;

pub use real::Real;

/// A xorshift64 stream seeded with `s` (non-zero): the tests' cheap reproducible values.
#[cfg(test)]
pub(crate) fn xorshift(mut s: u64) -> impl FnMut() -> u64 {
    move || {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        s
    }
}

/// Values uniform in [0, 1) from `xorshift(s)`.
#[cfg(test)]
pub(crate) fn unit_xorshift(s: u64) -> impl FnMut() -> f64 {
    let mut next = xorshift(s);
    move || (next() >> 11) as f64 / (1u64 << 53) as f64
}
