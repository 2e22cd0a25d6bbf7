//! How particle positions are described to ztree: read in place, never written.

use crate::error::{Error, Result};
use crate::geom::Real;

/// Read-only access to `len()` points of dimension `D`. ztree reads each point once at
/// ingest (validation, keys, gather into z-order); implementations must be cheap per call.
pub trait PointSource<T: Real, const D: usize>: Sync {
    fn len(&self) -> usize;
    fn point(&self, i: usize) -> [T; D];
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Array-of-structs: `points[i] = [x, y, z]`.
impl<T: Real, const D: usize> PointSource<T, D> for [[T; D]] {
    fn len(&self) -> usize {
        <[[T; D]]>::len(self)
    }
    #[inline(always)]
    fn point(&self, i: usize) -> [T; D] {
        self[i]
    }
}

impl<T: Real, const D: usize> PointSource<T, D> for &[[T; D]] {
    fn len(&self) -> usize {
        <[[T; D]]>::len(self)
    }
    #[inline(always)]
    fn point(&self, i: usize) -> [T; D] {
        self[i]
    }
}

impl<T: Real, const D: usize> PointSource<T, D> for Vec<[T; D]> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    #[inline(always)]
    fn point(&self, i: usize) -> [T; D] {
        self[i]
    }
}

/// Struct-of-arrays: one slice per dimension (HACC style).
#[derive(Clone, Copy, Debug)]
pub struct SoaPoints<'a, T, const D: usize> {
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
    fn len(&self) -> usize {
        self.coords[0].len()
    }
    #[inline(always)]
    fn point(&self, i: usize) -> [T; D] {
        std::array::from_fn(|d| self.coords[d][i])
    }
}

