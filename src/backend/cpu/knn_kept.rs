//! The kept leaves of a receiving leaf for the kNN leaf pass: gathered nearest first,
//! with their boxes by dimension for the queries' vector bound tests.

use super::super::knn::KnnJob;
use super::{B, KEPT_FIRST, SORTED_MAX_K, Scratch};
#[cfg(test)]
use super::{FORCED_KEPT_FIRST, KEPT_RESTS};
use crate::geom::Real;
use crate::geom::metric::Metric;
use crate::geom::real::fmax;

/// A kept leaf, as the leaf pass reads it (one record: one bounds check and a line or two
/// per leaf).
#[derive(Clone, Copy)]
pub(super) struct Kept<T, const D: usize> {
    pub(super) lo: [T; D],
    pub(super) hi: [T; D],
    /// d_min² from the receiving leaf (ascending along the list), rounded down.
    pub(super) min: T,
    pub(super) start: u32,
    pub(super) count: u32,
    /// Whether it needs the minimum image per difference against the receiving leaf:
    /// some dimension mixes images. Else its differences take one `shift` per dimension
    /// (`Metric::shift`; zero where none wraps): the same values, fewer operations.
    pub(super) wrap: bool,
    pub(super) shift: [T; D],
    /// Whether some shift is not zero (else the open distances are these, bit for bit).
    pub(super) shifted: bool,
}

/// The boxes of `B` consecutive kept leaves by dimension, for vector code: a query's
/// lower bounds to all of them at once. Leaves that need the minimum image per
/// difference have an unbounded box (bound 0: their own test decides), the pads past the
/// last leaf an empty one at +inf (bound +inf).
#[derive(Clone, Copy)]
pub(super) struct LeafBoxes<T, const D: usize> {
    pub(super) lo: [[T; B]; D],
    pub(super) hi: [[T; B]; D],
    /// The leaves' shifts (`Kept::shift`), read in a periodic box only.
    pub(super) sh: [[T; B]; D],
}

impl<T: Real, const D: usize> LeafBoxes<T, D> {
    /// Squared distances from `q` to the boxes: lower bounds of `q`'s computed distances
    /// to the points inside (the same differences, rounded the same way, and never more
    /// than a point's). `SHIFT` (a periodic box): for the shifted differences
    /// `(q_d - p_d) + sh_d`, monotone in p_d, so over the box they lie between their
    /// values at the box's faces, as rounded; else the open differences.
    #[inline(always)]
    pub(super) fn min2<const SHIFT: bool>(&self, q: &[T; D]) -> [T; B] {
        let mut s = [T::ZERO; B];
        for d in 0..D {
            for i in 0..B {
                let (below, above) = if SHIFT {
                    (-((q[d] - self.lo[d][i]) + self.sh[d][i]), (q[d] - self.hi[d][i]) + self.sh[d][i])
                } else {
                    (self.lo[d][i] - q[d], q[d] - self.hi[d][i])
                };
                let g = fmax(fmax(below, above), T::ZERO);
                s[i] = s[i] + g * g;
            }
        }
        s
    }
}

/// The largest f32 at most `x` (x >= 0, not NaN).
#[inline(always)]
pub(super) fn f32_below(x: f64) -> f32 {
    let f = x as f32;
    // One step down when rounding went up (no branch: its outcome is random). For
    // x >= 0, f >= 0, and it is above x only when positive (+inf included), so the
    // next f32 down is the previous bit pattern.
    f32::from_bits(f.to_bits() - u32::from(f as f64 > x))
}

impl<T: Real, const D: usize> KnnJob<'_, T, D> {
    /// Gathers the boxes and source ranges of the candidate leaves of receiving leaf `a`
    /// with d_min² <= r2, nearest (to `a`) first: the k-th distance of a query then
    /// shrinks early and most farther leaves are skipped whole.
    ///
    /// The order only sets the speed (results never depend on it), so the leaves are
    /// sorted by one integer: d_min² rounded down to f32, then the node. The rounded
    /// values, still lower bounds and now ascending, are what the leaf pass compares.
    ///
    /// Up to `SORTED_MAX_K` only the nearest `KEPT_FIRST` are sorted and stored here; the
    /// leaf pass asks for the rest (`keep_rest`) when a query reaches them, which few do.
    pub(in super::super) fn keep_leaves<M: Metric<T, D>>(&self, metric: &M, a: usize, r2: T, s: &mut Scratch<T, D>) {
        let tree = &self.zs.tree;
        let (alo, ahi) = tree.qry_box(a);
        s.order.clear();
        s.any_wrap = false;
        for (i, &(dm, b)) in s.eval.iter().enumerate() {
            if dm <= r2 {
                s.order.push(((f32_below(dm.to_f64()).to_bits() as u64) << 32) | b as u64);
                // The leaf pass picks its metric once for all kept leaves. (A leaf of a
                // group that needs no minimum image needs none either.)
                if M::PERIODIC && s.eval_wrap[i] {
                    let b = b as usize;
                    s.any_wrap |= !metric.no_wrap(alo, ahi, &tree.src_lo[b], &tree.src_hi[b]);
                }
            }
        }
        s.kept.clear();
        s.boxes.clear();
        let first = if self.kk <= SORTED_MAX_K { KEPT_FIRST } else { usize::MAX };
        #[cfg(test)]
        let first = match FORCED_KEPT_FIRST.load(std::sync::atomic::Ordering::Relaxed) {
            0 => first,
            f => f,
        };
        if s.order.len() > first {
            s.order.select_nth_unstable(first - 1);
        }
        let first = s.order.len().min(first);
        self.store_kept(metric, a, first, s);
    }

    /// Sorts and stores the kept leaves after those `keep_leaves` stored.
    #[inline(never)]
    pub(super) fn keep_rest<M: Metric<T, D>>(&self, metric: &M, a: usize, s: &mut Scratch<T, D>) {
        #[cfg(test)]
        KEPT_RESTS.with(|c| c.set(c.get() + 1));
        self.store_kept(metric, a, s.order.len(), s);
    }

    /// Sorts the keys `s.order[s.kept.len() .. end]` (all below the later ones) and
    /// appends their leaves to `s.kept` and `s.boxes` (`s.kept.len()` a multiple of `B`).
    fn store_kept<M: Metric<T, D>>(&self, metric: &M, a: usize, end: usize, s: &mut Scratch<T, D>) {
        let tree = &self.zs.tree;
        let (alo, ahi) = tree.qry_box(a);
        let from = s.kept.len();
        debug_assert!(from.is_multiple_of(B));
        s.order[from..end].sort_unstable();
        let pad = LeafBoxes { lo: [[T::INFINITY; B]; D], hi: [[T::INFINITY; B]; D], sh: [[T::ZERO; B]; D] };
        for j in from..end {
            let key = s.order[j];
            let b = key as u32 as usize;
            let (lo, hi) = (tree.src_lo[b], tree.src_hi[b]);
            // (Without a leaf that needs the minimum image the pass runs in open space.)
            let shift = if M::PERIODIC && s.any_wrap { metric.shift(alo, ahi, &lo, &hi) } else { Some([T::ZERO; D]) };
            let wrap = shift.is_none();
            let shift = shift.unwrap_or([T::ZERO; D]);
            s.kept.push(Kept {
                lo,
                hi,
                min: T::from_f64(f32::from_bits((key >> 32) as u32) as f64),
                start: tree.src_start[b],
                count: tree.src_count[b],
                wrap,
                shift,
                shifted: shift.iter().any(|&x| x != T::ZERO),
            });
            if j % B == 0 {
                s.boxes.push(pad);
            }
            let r = s.boxes.last_mut().unwrap();
            for d in 0..D {
                (r.lo[d][j % B], r.hi[d][j % B]) = if wrap { (T::NEG_INFINITY, T::INFINITY) } else { (lo[d], hi[d]) };
                if M::PERIODIC {
                    r.sh[d][j % B] = shift[d];
                }
            }
        }
    }
}
