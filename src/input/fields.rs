//! Per-particle fields beside the positions: scalars (masses, a field to average),
//! vectors (velocities) and particle ids. Read in place in the caller's input order, in
//! any precision: f32 positions with f64 velocities and masses (the usual GADGET/HACC
//! layout) are fine.

use rayon::prelude::*;

use super::{PointSource, SoaPoints};
use crate::geom::Real;

/// A per-source scalar field, read at ingest (f32 or f64 slices, or your own accessor).
pub trait ScalarField: Sync {
    /// Number of values.
    fn len(&self) -> usize;
    /// Value `i`, as f64.
    fn get(&self, i: usize) -> f64;
    /// Whether there is no value.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ScalarField for [f64] {
    fn len(&self) -> usize {
        <[f64]>::len(self)
    }
    fn get(&self, i: usize) -> f64 {
        self[i]
    }
}

macro_rules! impl_field_via_slice {
    ($($t:ty),*) => {$(
        impl ScalarField for $t {
            fn len(&self) -> usize {
                <[_]>::len(self)
            }
            fn get(&self, i: usize) -> f64 {
                self[i] as f64
            }
        }
    )*};
}
impl_field_via_slice!(Vec<f64>, Vec<f32>, &[f64], &[f32]);

impl ScalarField for [f32] {
    fn len(&self) -> usize {
        <[f32]>::len(self)
    }
    fn get(&self, i: usize) -> f64 {
        self[i] as f64
    }
}

/// Particle ids for halo tags (the minimum id of a group). Implemented for slices and
/// vectors of i32, i64, u32 and u64; u64 ids must be at most `i64::MAX`.
pub trait ParticleIds: Sync {
    /// Number of ids.
    fn len(&self) -> usize;
    /// Id `i`, as i64.
    fn id(&self, i: usize) -> i64;
    /// Whether there is no id.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The first id that does not fit an i64, if any.
    fn first_unrepresentable(&self) -> Option<usize> {
        None
    }
}

/// Implements `ParticleIds` for `[T]`, `Vec<T>` and `&[T]`; `$check` finds the first id
/// that does not fit an i64 (only u64 can have one).
macro_rules! impl_ids {
    ($t:ty, $check:expr) => {
        impl_ids!(@one [$t], $t, $check);
        impl_ids!(@one Vec<$t>, $t, $check);
        impl_ids!(@one &[$t], $t, $check);
    };
    (@one $s:ty, $t:ty, $check:expr) => {
        impl ParticleIds for $s {
            fn len(&self) -> usize {
                <[$t]>::len(self)
            }
            #[inline(always)]
            fn id(&self, i: usize) -> i64 {
                self[i] as i64
            }
            fn first_unrepresentable(&self) -> Option<usize> {
                let check: fn(&[$t]) -> Option<usize> = $check;
                check(self)
            }
        }
    };
}
impl_ids!(u8, |_| None);
impl_ids!(i32, |_| None);
impl_ids!(i64, |_| None);
impl_ids!(u32, |_| None);
impl_ids!(u64, |v| v.par_iter().position_first(|&x| x > i64::MAX as u64));

/// A per-particle vector of `D` components (velocities), read as f64 whatever its storage
/// precision. Implemented for the same containers as `PointSource`, in f32 and f64.
pub trait VectorField<const D: usize>: Sync {
    /// Number of vectors.
    fn len(&self) -> usize;
    /// Vector `i`, as f64.
    fn get(&self, i: usize) -> [f64; D];
    /// Whether there is no vector.
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl<T: Real, const D: usize> VectorField<D> for [[T; D]] {
    fn len(&self) -> usize {
        <[[T; D]]>::len(self)
    }
    #[inline(always)]
    fn get(&self, i: usize) -> [f64; D] {
        self[i].map(|v| v.to_f64())
    }
}

impl<T: Real, const D: usize> VectorField<D> for Vec<[T; D]> {
    fn len(&self) -> usize {
        Vec::len(self)
    }
    #[inline(always)]
    fn get(&self, i: usize) -> [f64; D] {
        self[i].map(|v| v.to_f64())
    }
}

impl<T: Real, const D: usize> VectorField<D> for &[[T; D]] {
    fn len(&self) -> usize {
        <[[T; D]]>::len(self)
    }
    #[inline(always)]
    fn get(&self, i: usize) -> [f64; D] {
        self[i].map(|v| v.to_f64())
    }
}

impl<T: Real, const D: usize> VectorField<D> for SoaPoints<'_, T, D> {
    fn len(&self) -> usize {
        PointSource::<T, D>::len(self)
    }
    #[inline(always)]
    fn get(&self, i: usize) -> [f64; D] {
        PointSource::<T, D>::point(self, i).map(|v| v.to_f64())
    }
}
