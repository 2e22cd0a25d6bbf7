//! The rules every input obeys, checked before any work: coordinates finite (and inside
//! `[0, L)` in a periodic box), fields as long as the points and finite, ids that fit an
//! i64. Errors name the array and the first bad element in input order.

use rayon::prelude::*;

use super::{Domain, ParticleIds, ScalarField, VectorField};
use crate::error::{Error, Result, check_len};
use crate::geom::Real;

/// Point `p` (input index `i` of `what`) as f64, or why it is not acceptable.
#[inline(always)]
pub(crate) fn check_point<T: Real, const D: usize>(p: &[T; D], i: usize, what: &'static str, box_len: Option<&[f64; D]>) -> Result<[f64; D]> {
    let mut q = [0.0f64; D];
    for d in 0..D {
        let v = p[d].to_f64();
        if !p[d].is_finite() {
            return Err(Error::NonFinite { what, index: i, dim: d, value: v });
        }
        if let Some(l) = box_len
            && !(v >= 0.0 && v < l[d])
        {
            return Err(Error::OutsideBox { what, index: i, dim: d, value: v, length: l[d] });
        }
        if v.abs() > T::MAX_COORD {
            return Err(Error::TooLarge { what, index: i, dim: d, value: v, limit: T::MAX_COORD, elem: T::NAME });
        }
        q[d] = v;
    }
    Ok(q)
}

/// The domain is valid and its box lengths are small enough for `T` (see
/// `Real::MAX_COORD`).
pub(crate) fn check_domain<T: Real, const D: usize>(domain: &Domain<D>) -> Result<()> {
    domain.validate()?;
    if let Some(l) = domain.box_lengths()
        && let Some(dim) = (0..D).find(|&d| l[d] > T::MAX_COORD)
    {
        return Err(Error::BoxTooLarge { dim, length: l[dim], limit: T::MAX_COORD, elem: T::NAME });
    }
    Ok(())
}

/// A per-particle scalar of `n` entries, all finite.
pub(crate) fn check_scalar(what: &'static str, f: &dyn ScalarField, n: usize) -> Result<()> {
    check_len(what, f.len(), n)?;
    if let Some(i) = (0..n).into_par_iter().find_first(|&i| !f.get(i).is_finite()) {
        return Err(Error::NonFiniteValue { what, index: i, value: f.get(i) });
    }
    Ok(())
}

/// Masses: `n` entries, finite and > 0 (a zero or negative mass has no centre of mass).
pub(crate) fn check_masses(f: &dyn ScalarField, n: usize) -> Result<()> {
    check_scalar("masses", f, n)?;
    if let Some(i) = (0..n).into_par_iter().find_first(|&i| f.get(i) <= 0.0) {
        return Err(Error::InvalidParameter { name: "masses", why: format!("mass {i} is {} (masses must be > 0)", f.get(i)) });
    }
    Ok(())
}

/// Velocities (or any vector field): `n` entries, finite.
pub(crate) fn check_vectors<const D: usize>(what: &'static str, v: &dyn VectorField<D>, n: usize) -> Result<()> {
    check_len(what, v.len(), n)?;
    if let Some((i, d)) = (0..n).into_par_iter().find_map_first(|i| {
        let p = v.get(i);
        (0..D).find(|&d| !p[d].is_finite()).map(|d| (i, d))
    }) {
        return Err(Error::NonFinite { what, index: i, dim: d, value: v.get(i)[d] });
    }
    Ok(())
}

/// Ids: `n` entries, each representable as an i64.
pub(crate) fn check_ids(ids: &dyn ParticleIds, n: usize) -> Result<()> {
    check_len("ids", ids.len(), n)?;
    if let Some(i) = ids.first_unrepresentable() {
        return Err(Error::InvalidParameter { name: "ids", why: format!("id {i} does not fit a signed 64-bit integer") });
    }
    Ok(())
}
