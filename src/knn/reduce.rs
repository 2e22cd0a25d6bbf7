//! The per-query reductions over a query's neighbours, one definition for every back end
//! and for the distributed merge. Sums run over the neighbours in rank order (nearest
//! first), so every caller gets the same bits.

/// Volume of a ball of radius `r` in `D` dimensions (area in 2D).
#[inline(always)]
pub(crate) fn ball_volume<const D: usize>(r: f64) -> f64 {
    if D == 2 { std::f64::consts::PI * r * r } else { 4.0 / 3.0 * std::f64::consts::PI * r * r * r }
}

/// The density at a query: the neighbours' mass (`m` when no masses are given) over the
/// volume of the ball reaching the k-th neighbour at distance `kth`; 0 when fewer than
/// `k` neighbours exist (`m < k`).
#[inline(always)]
pub(crate) fn density<const D: usize>(mass: Option<f64>, m: usize, k: usize, kth: f64) -> f64 {
    if m < k {
        return 0.0;
    }
    mass.unwrap_or(m as f64) / ball_volume::<D>(kth)
}

/// Mean of a scalar over the neighbours (in rank order).
#[inline(always)]
pub(crate) fn mean(values: impl ExactSizeIterator<Item = f64>) -> f64 {
    let m = values.len();
    values.sum::<f64>() / m as f64
}
