//! How particle data is described to ztree (read in place, never written) and the
//! domain it lives in.

use crate::error::{Error, Result};
use crate::real::Real;

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

/// The space the points live in.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Domain<const D: usize> {
    /// No boundary: the domain is the bounding box of all points.
    Open,
    /// Periodic box `[0, L_d)` in each dimension (non-cubic allowed). Distances use the
    /// minimum image.
    Periodic([f64; D]),
}

impl<const D: usize> Domain<D> {
    pub fn periodic_cube(l: f64) -> Self {
        Domain::Periodic([l; D])
    }

    pub fn validate(&self) -> Result<()> {
        if let Domain::Periodic(l) = self {
            for (dim, &len) in l.iter().enumerate() {
                if !(len.is_finite() && len > 0.0) {
                    return Err(Error::InvalidBox { dim, length: len });
                }
            }
        }
        Ok(())
    }

    pub fn box_lengths(&self) -> Option<[f64; D]> {
        match self {
            Domain::Open => None,
            Domain::Periodic(l) => Some(*l),
        }
    }
}

/// Axis-aligned bounding box in f64.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Bounds<const D: usize> {
    pub lo: [f64; D],
    pub hi: [f64; D],
}

impl<const D: usize> Bounds<D> {
    pub const EMPTY: Self = Self { lo: [f64::INFINITY; D], hi: [f64::NEG_INFINITY; D] };

    pub fn include(&mut self, p: &[f64; D]) {
        for d in 0..D {
            self.lo[d] = self.lo[d].min(p[d]);
            self.hi[d] = self.hi[d].max(p[d]);
        }
    }

    pub fn merge(mut self, o: &Self) -> Self {
        for d in 0..D {
            self.lo[d] = self.lo[d].min(o.lo[d]);
            self.hi[d] = self.hi[d].max(o.hi[d]);
        }
        self
    }

    pub fn is_empty(&self) -> bool {
        self.lo[0] > self.hi[0]
    }
}
