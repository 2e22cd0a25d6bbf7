//! A subset of the caller's particles, read in place: point `j` of the view is point
//! `sel[j]` of the caller's arrays (`sel` ascending, so the view's index order is the
//! caller's). Jobs on a particle-type mask, and the stages of DBSCAN, run on such views;
//! nothing of the caller's is copied.

use super::{ParticleIds, PointSource, ScalarField, VectorField};
use crate::geom::Real;

/// Points or a field of the caller, at the ascending indices `sel`.
#[derive(Clone, Copy)]
pub(crate) struct Subset<'a, P: ?Sized> {
    pub inner: &'a P,
    pub sel: &'a [u32],
}

impl<'a, P: ?Sized> Subset<'a, P> {
    pub fn new(inner: &'a P, sel: &'a [u32]) -> Self {
        Self { inner, sel }
    }
}

impl<T: Real, const D: usize, P: PointSource<T, D> + ?Sized> PointSource<T, D> for Subset<'_, P> {
    fn len(&self) -> usize {
        self.sel.len()
    }
    #[inline(always)]
    fn point(&self, i: usize) -> [T; D] {
        self.inner.point(self.sel[i] as usize)
    }
    #[inline(always)]
    fn prefetch(&self, i: usize) {
        if let Some(&s) = self.sel.get(i) {
            self.inner.prefetch(s as usize);
        }
    }
}

impl ScalarField for Subset<'_, dyn ScalarField + '_> {
    fn len(&self) -> usize {
        self.sel.len()
    }
    fn get(&self, i: usize) -> f64 {
        self.inner.get(self.sel[i] as usize)
    }
}

impl<const D: usize> VectorField<D> for Subset<'_, dyn VectorField<D> + '_> {
    fn len(&self) -> usize {
        self.sel.len()
    }
    fn get(&self, i: usize) -> [f64; D] {
        self.inner.get(self.sel[i] as usize)
    }
}

impl ParticleIds for Subset<'_, dyn ParticleIds + '_> {
    fn len(&self) -> usize {
        self.sel.len()
    }
    fn id(&self, i: usize) -> i64 {
        self.inner.id(self.sel[i] as usize)
    }
}
