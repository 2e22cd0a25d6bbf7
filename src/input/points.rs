//! How particle positions are described to ztree: read in place, never written.

use crate::error::{Error, Result};
use crate::geom::Real;

/// Read-only access to `len()` points of dimension `D`. ztree reads each point once at
/// ingest (validation, keys, gather into z-order); implementations must be cheap per call.
pub trait PointSource<T: Real, const D: usize>: Sync {
    /// Number of points.
    fn len(&self) -> usize;
    /// Point `i`.
    fn point(&self, i: usize) -> [T; D];
    /// Whether there is no point.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// Hints the cache that point `i` will be read soon (the gather into z-order reads
    /// the points in random order). Reads nothing; a no-op by default.
    #[inline(always)]
    fn prefetch(&self, _i: usize) {}
}

/// Fetches the cache line holding `p` ahead of a read (a no-op off x86-64).
#[inline(always)]
pub(crate) fn prefetch_addr<T>(p: *const T) {
    #[cfg(target_arch = "x86_64")]
    // SAFETY: a prefetch is only a hint: it never faults and reads nothing, whatever the
    // address.
    unsafe {
        std::arch::x86_64::_mm_prefetch::<{ std::arch::x86_64::_MM_HINT_T0 }>(p as *const i8)
    }
    #[cfg(not(target_arch = "x86_64"))]
    let _ = p;
}

/// Array-of-structs: `points[i] = [x, y, z]`.
impl<T: Real, const D: usize> PointSource<T, D> for [[T; D]] {
    #[inline(always)]
    fn prefetch(&self, i: usize) {
        prefetch_addr(self.as_ptr().wrapping_add(i));
    }
    fn len(&self) -> usize {
        <[[T; D]]>::len(self)
    }
    #[inline(always)]
    fn point(&self, i: usize) -> [T; D] {
        self[i]
    }
}

impl<T: Real, const D: usize> PointSource<T, D> for &[[T; D]] {
    #[inline(always)]
    fn prefetch(&self, i: usize) {
        prefetch_addr(self.as_ptr().wrapping_add(i));
    }
    fn len(&self) -> usize {
        <[[T; D]]>::len(self)
    }
    #[inline(always)]
    fn point(&self, i: usize) -> [T; D] {
        self[i]
    }
}

impl<T: Real, const D: usize> PointSource<T, D> for Vec<[T; D]> {
    #[inline(always)]
    fn prefetch(&self, i: usize) {
        prefetch_addr(self.as_ptr().wrapping_add(i));
    }
    fn len(&self) -> usize {
        Vec::len(self)
    }
    #[inline(always)]
    fn point(&self, i: usize) -> [T; D] {
        self[i]
    }
}

/// Owned struct-of-arrays: one vector per dimension (the columns a distributed call
/// moves between ranks).
impl<T: Real, const D: usize> PointSource<T, D> for [Vec<T>; D] {
    fn len(&self) -> usize {
        self[0].len()
    }
    #[inline(always)]
    fn point(&self, i: usize) -> [T; D] {
        std::array::from_fn(|d| self[d][i])
    }
}

/// Struct-of-arrays: one slice per dimension (HACC style).
#[derive(Clone, Copy, Debug)]
pub struct SoaPoints<'a, T, const D: usize> {
    /// One slice of coordinates per dimension, all of the same length.
    pub coords: [&'a [T]; D],
}

impl<'a, T: Real, const D: usize> SoaPoints<'a, T, D> {
    /// All slices must have the same length.
    pub fn new(coords: [&'a [T]; D]) -> Result<Self> {
        let n = coords[0].len();
        for c in coords.iter() {
            if c.len() != n {
                return Err(Error::LengthMismatch { what: "coordinate array", got: c.len(), expected: n });
            }
        }
        Ok(Self { coords })
    }
}

impl<T: Real, const D: usize> PointSource<T, D> for SoaPoints<'_, T, D> {
    #[inline(always)]
    fn prefetch(&self, i: usize) {
        for c in &self.coords {
            prefetch_addr(c.as_ptr().wrapping_add(i));
        }
    }
    fn len(&self) -> usize {
        self.coords[0].len()
    }
    #[inline(always)]
    fn point(&self, i: usize) -> [T; D] {
        std::array::from_fn(|d| self.coords[d][i])
    }
}
