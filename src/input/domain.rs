//! The space the points live in, and axis-aligned bounds.

use crate::error::{Error, Result};

/// Longest over shortest periodic box length accepted. The Morton cells of a periodic box
/// follow its shape (so that they tile it and wrap with it); far beyond this ratio they are
/// needles, and the walk slows down with the ratio (2.4x at 100:1 against a cube).
pub(crate) const MAX_BOX_ASPECT: f64 = 100.0;

/// `BoxAspect` when the periodic box lengths `l` (finite, > 0) are too elongated.
pub(crate) fn check_aspect(l: &[f64]) -> Result<()> {
    let (lo, hi) = l.iter().fold((f64::INFINITY, 0.0f64), |(a, b), &x| (a.min(x), b.max(x)));
    if hi > MAX_BOX_ASPECT * lo {
        return Err(Error::BoxAspect { ratio: hi / lo, max: MAX_BOX_ASPECT });
    }
    Ok(())
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
    /// A periodic cube of side `l`.
    pub fn periodic_cube(l: f64) -> Self {
        Domain::Periodic([l; D])
    }

    /// Checks the box lengths (finite, positive, not too elongated).
    pub fn validate(&self) -> Result<()> {
        if let Domain::Periodic(l) = self {
            for (dim, &len) in l.iter().enumerate() {
                if !(len.is_finite() && len > 0.0) {
                    return Err(Error::InvalidBox { dim, length: len });
                }
            }
            check_aspect(l)?;
        }
        Ok(())
    }

    /// The periodic box lengths, `None` when open.
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
}
