//! Distances (docs/DESIGN.md §4): the minimum image, point distances and box bounds.
//!
//! Every squared distance is computed in one precision `T` as `(dx*dx + dy*dy) + dz*dz`
//! with no fused multiply-add. Box bounds are built from the same rounded operations as
//! point distances on the box corners, and rounding is monotone, so for any `q` in box A
//! and `s` in box B: `box_min2(A, B) <= dist2(q, s) <= box_max2(A, B)` holds for the
//! computed values.

use super::real::Real;

/// The minimum image of a difference `x` in a periodic dimension of length `l`
/// (`h = l / 2`): the box length is subtracted (added) once when `x > h` (`x < -h`).
/// `|x| = L/2` exactly is left as it is. The one definition used by distances and by the
/// catalogue's centre-of-mass offsets.
#[inline(always)]
pub(crate) fn min_image<T: Real>(x: T, l: T, h: T) -> T {
    // Two selects rather than an if-else chain: the same values, and vector code.
    let a = if x > h { x - l } else { x };
    if x < -h { x + l } else { a }
}

/// Distance geometry: open space or a periodic box.
pub(crate) trait Metric<T: Real, const D: usize>: Copy + Send + Sync {
    /// Whether differences take the minimum image (a periodic box).
    const PERIODIC: bool = false;

    /// The per-dimension difference `a - b` (minimum image when periodic).
    fn diff(&self, a: T, b: T, d: usize) -> T;

    /// Lower and upper bound of `|q_d - s_d|` (minimum image) for `q_d` in `[alo, ahi]`,
    /// `s_d` in `[blo, bhi]`.
    fn gap_range(&self, alo: T, ahi: T, blo: T, bhi: T, d: usize) -> (T, T);

    /// The periodic box lengths (None: open).
    fn box_len(&self) -> Option<[f64; D]>;

    /// Whether every difference between a point of box A and one of box B is already its
    /// own minimum image, so that `Open`'s plain differences give the same values (always
    /// in open space).
    #[inline(always)]
    fn no_wrap(&self, _alo: &[T; D], _ahi: &[T; D], _blo: &[T; D], _bhi: &[T; D]) -> bool {
        true
    }

    /// When every difference `a_d - b_d` between a point of box A and one of box B takes
    /// the same minimum image in each dimension: the shift it adds per dimension (0, -L
    /// or +L), so that `(a_d - b_d) + shift_d` is the metric's difference, bit for bit.
    /// None when some dimension mixes images. (Open space: zero shifts.)
    #[inline(always)]
    fn shift(&self, _alo: &[T; D], _ahi: &[T; D], _blo: &[T; D], _bhi: &[T; D]) -> Option<[T; D]> {
        Some([T::ZERO; D])
    }

    #[inline(always)]
    fn dist2(&self, a: &[T; D], b: &[T; D]) -> T {
        let mut s = T::ZERO;
        for d in 0..D {
            let x = self.diff(a[d], b[d], d);
            s = s + x * x;
        }
        s
    }

    #[inline(always)]
    fn box_min2(&self, alo: &[T; D], ahi: &[T; D], blo: &[T; D], bhi: &[T; D]) -> T {
        let mut s = T::ZERO;
        for d in 0..D {
            let g = self.gap_range(alo[d], ahi[d], blo[d], bhi[d], d).0;
            s = s + g * g;
        }
        s
    }

    #[inline(always)]
    fn box_max2(&self, alo: &[T; D], ahi: &[T; D], blo: &[T; D], bhi: &[T; D]) -> T {
        let mut s = T::ZERO;
        for d in 0..D {
            let g = self.gap_range(alo[d], ahi[d], blo[d], bhi[d], d).1;
            s = s + g * g;
        }
        s
    }
}

/// Open space.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Open;

impl<T: Real, const D: usize> Metric<T, D> for Open {
    fn box_len(&self) -> Option<[f64; D]> {
        None
    }
    #[inline(always)]
    fn diff(&self, a: T, b: T, _d: usize) -> T {
        a - b
    }
    #[inline(always)]
    fn gap_range(&self, alo: T, ahi: T, blo: T, bhi: T, _d: usize) -> (T, T) {
        // One instruction each (`max1`): as selects, LLVM made some of them branches,
        // mispredicted in the node test (2.8 per query on clustered points).
        let lo = (alo - bhi).max1(blo - ahi).max1(T::ZERO);
        let hi = (ahi - blo).max1(bhi - alo);
        (lo, hi)
    }
}

/// Periodic box `[0, L_d)`.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Periodic<T, const D: usize> {
    pub len: [T; D],
    pub half: [T; D],
}

impl<T: Real, const D: usize> Periodic<T, D> {
    pub fn new(box_len: &[f64; D]) -> Self {
        let len: [T; D] = std::array::from_fn(|d| T::from_f64(box_len[d]));
        Self { len, half: std::array::from_fn(|d| len[d].half()) }
    }
}

impl<T: Real, const D: usize> Metric<T, D> for Periodic<T, D> {
    const PERIODIC: bool = true;
    fn box_len(&self) -> Option<[f64; D]> {
        Some(std::array::from_fn(|d| self.len[d].to_f64()))
    }
    #[inline(always)]
    fn diff(&self, a: T, b: T, d: usize) -> T {
        min_image(a - b, self.len[d], self.half[d])
    }
    /// Rounding is monotone, so a point difference lies between the rounded box-corner
    /// differences; within [-h, h] `min_image` leaves it as it is.
    #[inline(always)]
    fn no_wrap(&self, alo: &[T; D], ahi: &[T; D], blo: &[T; D], bhi: &[T; D]) -> bool {
        // Without a branch: in the leaf pass's keep step its outcome is random.
        (0..D).fold(true, |ok, d| ok & (ahi[d] - blo[d] <= self.half[d]) & (alo[d] - bhi[d] >= -self.half[d]))
    }
    /// Rounding is monotone, so the differences lie within [alo - bhi, ahi - blo] as
    /// rounded; `min_image` subtracts L from all of them when that range lies above h,
    /// adds it below -h, and leaves them within [-h, h].
    #[inline(always)]
    fn shift(&self, alo: &[T; D], ahi: &[T; D], blo: &[T; D], bhi: &[T; D]) -> Option<[T; D]> {
        // (Selects and bit operations, no branch: in the leaf pass's keep step the
        // outcomes are random.)
        let mut sh = [T::ZERO; D];
        let mut one = true;
        for d in 0..D {
            let (lo, hi, h, l) = (alo[d] - bhi[d], ahi[d] - blo[d], self.half[d], self.len[d]);
            let (above, below) = (lo > h, hi < -h);
            one &= above | below | ((lo >= -h) & (hi <= h));
            let s = if below { l } else { T::ZERO };
            sh[d] = if above { -l } else { s };
        }
        one.then_some(sh)
    }
    #[inline(always)]
    fn gap_range(&self, alo: T, ahi: T, blo: T, bhi: T, d: usize) -> (T, T) {
        let lo = (alo - bhi).max1(blo - ahi).max1(T::ZERO);
        let hi = (ahi - blo).max1(bhi - alo);
        let l = self.len[d];
        let h = self.half[d];
        // |dx| ranges over [lo, hi]; its minimum image min(|dx|, L - |dx|) is a tent.
        let min = lo.min1(l - hi).max1(T::ZERO);
        // The tent's top over [lo, hi]: hi when hi <= h, L - lo when lo > h, else h — the
        // smallest of the three in every case (h = L/2 exactly, and L - lo rounds to at
        // least h when lo <= h), without a branch.
        let max = hi.min1(l - lo).min1(h);
        (min, max)
    }
}

/// Squared distances from `q` to points `s0 .. s0 + out.len()` of `pos` (one array per
/// dimension), summed as `(dx*dx + dy*dy) + dz*dz` (a vectorisable loop).
#[inline(always)]
pub(crate) fn distances<T: Real, const D: usize, M: Metric<T, D>>(metric: &M, q: &[T; D], pos: &[Vec<T>; D], s0: usize, out: &mut [T]) {
    let n = out.len();
    for d in 0..D {
        let xs = &pos[d][s0..s0 + n];
        let qd = q[d];
        if d == 0 {
            for (o, &x) in out.iter_mut().zip(xs) {
                let dx = metric.diff(qd, x, d);
                *o = dx * dx;
            }
        } else {
            for (o, &x) in out.iter_mut().zip(xs) {
                let dx = metric.diff(qd, x, d);
                *o = *o + dx * dx;
            }
        }
    }
}

/// Squared distances from `q` to the `W` points `s0 .. s0 + W` of the columns `pos`, the
/// same sums as `distances` in a fixed-size block (straight vector code, no remainder
/// loop, no bounds checks: the leaf pass's inner loop, where the bounds are known).
///
/// # Safety
/// Each `pos[d]` must point to at least `s0 + W` readable elements.
#[inline(always)]
pub(crate) unsafe fn distances_block_at<T: Real, const D: usize, const W: usize, M: Metric<T, D>>(
    metric: &M,
    q: &[T; D],
    pos: &[*const T; D],
    s0: usize,
) -> [T; W] {
    // The first dimension apart: a select on it in the loop defeats the vectoriser.
    let mut out = [T::ZERO; W];
    // SAFETY (each block read): W elements from s0 lie inside the column (the caller).
    let xs: [T; W] = unsafe { std::ptr::read_unaligned(pos[0].add(s0) as *const [T; W]) };
    for i in 0..W {
        let dx = metric.diff(q[0], xs[i], 0);
        out[i] = dx * dx;
    }
    for d in 1..D {
        let xs: [T; W] = unsafe { std::ptr::read_unaligned(pos[d].add(s0) as *const [T; W]) };
        for i in 0..W {
            let dx = metric.diff(q[d], xs[i], d);
            out[i] = out[i] + dx * dx;
        }
    }
    out
}

/// `distances_block_at` with each difference `q_d - s_d` then shifted by `sh[d]`: in a
/// periodic box, where every difference between two boxes takes the same minimum image in
/// each dimension (`Periodic::shift`), the same values as the periodic metric's.
///
/// # Safety
/// As `distances_block_at`.
#[inline(always)]
pub(crate) unsafe fn shifted_block_at<T: Real, const D: usize, const W: usize>(q: &[T; D], pos: &[*const T; D], s0: usize, sh: &[T; D]) -> [T; W] {
    let mut out = [T::ZERO; W];
    for d in 0..D {
        // SAFETY (each block read): W elements from s0 lie inside the column (the caller).
        let xs: [T; W] = unsafe { std::ptr::read_unaligned(pos[d].add(s0) as *const [T; W]) };
        for i in 0..W {
            let dx = (q[d] - xs[i]) + sh[d];
            out[i] = if d == 0 { dx * dx } else { out[i] + dx * dx };
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::geom::real::{fmax, fmin};

    #[test]
    fn min_image_keeps_half_box_differences() {
        assert_eq!(min_image(0.5f64, 1.0, 0.5), 0.5);
        assert_eq!(min_image(-0.5f64, 1.0, 0.5), -0.5);
        assert_eq!(min_image(0.75f64, 1.0, 0.5), -0.25);
        assert_eq!(min_image(-0.75f64, 1.0, 0.5), 0.25);
        let p = Periodic::<f32, 2>::new(&[2.0, 4.0]);
        assert_eq!(Metric::<f32, 2>::diff(&p, 1.5, 0.5, 0), 1.0);
        assert_eq!(Metric::<f32, 2>::diff(&p, 3.5, 0.5, 1), -1.0);
    }

    #[test]
    fn box_bounds_enclose_point_distances() {
        let p = Periodic::<f64, 3>::new(&[1.0, 2.0, 3.0]);
        let mut s = 7u64;
        let mut r = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 11) as f64 / (1u64 << 53) as f64
        };
        for _ in 0..2000 {
            let a: [f64; 3] = [r(), 2.0 * r(), 3.0 * r()];
            let b: [f64; 3] = [r(), 2.0 * r(), 3.0 * r()];
            let (alo, ahi) = (a.map(|x| x * 0.9), a);
            let (blo, bhi) = (b.map(|x| x * 0.95), b);
            for (q, t) in [(alo, blo), (ahi, bhi), (alo, bhi), (ahi, blo)] {
                let d = p.dist2(&q, &t);
                assert!(p.box_min2(&alo, &ahi, &blo, &bhi) <= d && d <= p.box_max2(&alo, &ahi, &blo, &bhi));
                let o = Metric::<f64, 3>::dist2(&Open, &q, &t);
                assert!(Open.box_min2(&alo, &ahi, &blo, &bhi) <= o && o <= Open.box_max2(&alo, &ahi, &blo, &bhi));
            }
        }
    }

    /// Where `no_wrap` holds, the periodic distance is bit for bit the open one, for the
    /// box corners and points inside (f32: differences round), including boxes that touch
    /// half a box length exactly.
    #[test]
    fn no_wrap_means_plain_differences() {
        let p = Periodic::<f32, 3>::new(&[1.0, 2.0, 4.0]);
        let mut s = 11u64;
        let mut r = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 40) as f32 / (1u64 << 24) as f32
        };
        let (mut held, mut wrapped) = (0, 0);
        for i in 0..20000 {
            let w = if i % 2 == 0 { 0.3 } else { 0.05 };
            let lo = |r: &mut dyn FnMut() -> f32| [r(), 2.0 * r(), 4.0 * r()];
            let (alo, blo) = (lo(&mut r), lo(&mut r));
            let mut blo = blo;
            if i % 7 == 0 {
                blo[0] = alo[0] + 0.5; // a face exactly half a box away
            }
            let ahi = [alo[0] + w * r(), alo[1] + 2.0 * w * r(), alo[2] + 4.0 * w * r()];
            let bhi = [blo[0] + w * r(), blo[1] + 2.0 * w * r(), blo[2] + 4.0 * w * r()];
            if !p.no_wrap(&alo, &ahi, &blo, &bhi) {
                wrapped += 1;
                continue;
            }
            held += 1;
            for _ in 0..4 {
                let t = r();
                // Inside the boxes (clamped: the interpolation may round past a face).
                let q: [f32; 3] = std::array::from_fn(|d| (alo[d] + t * (ahi[d] - alo[d])).clamp(alo[d], ahi[d]));
                let u = r();
                let b: [f32; 3] = std::array::from_fn(|d| (blo[d] + u * (bhi[d] - blo[d])).clamp(blo[d], bhi[d]));
                for (q, b) in [(q, b), (alo, bhi), (ahi, blo), (q, blo)] {
                    assert_eq!(p.dist2(&q, &b).to_bits(), Metric::<f32, 3>::dist2(&Open, &q, &b).to_bits());
                }
            }
        }
        assert!(held > 1000 && wrapped > 1000, "{held} {wrapped}");
    }

    /// Where `shift` gives one shift per dimension, the shifted differences and the
    /// shifted blocks are bit for bit the periodic metric's, for the box corners and points
    /// inside (boxes across the faces, touching half a box length exactly, and large ones
    /// that mix images: None).
    fn shift_matches<T: Real>() {
        let p = Periodic::<T, 3>::new(&[1.0, 2.0, 4.0]);
        let len = [1.0, 2.0, 4.0];
        let mut s = 13u64;
        let mut r = move || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 40) as f64 / (1u64 << 24) as f64
        };
        let (mut uniform, mut shifted, mut mixed) = (0, 0, 0);
        for i in 0..20000 {
            let w = [0.3, 0.05, 0.6][i % 3];
            let alo: [f64; 3] = std::array::from_fn(|d| len[d] * r());
            let mut blo: [f64; 3] = std::array::from_fn(|d| len[d] * r());
            if i % 7 == 0 {
                blo[0] = alo[0] + 0.5; // a face exactly half a box away
            }
            if i % 5 == 0 {
                blo[1] = 2.0 - 0.01 * r(); // at the top face
            }
            let ahi: [f64; 3] = std::array::from_fn(|d| (alo[d] + len[d] * w * r()).min(len[d] * 0.999));
            let bhi: [f64; 3] = std::array::from_fn(|d| (blo[d] + len[d] * w * r()).min(len[d] * 0.999));
            let blo: [f64; 3] = std::array::from_fn(|d| blo[d].min(bhi[d]));
            let t = |x: [f64; 3]| x.map(T::from_f64);
            let (alo, ahi, blo, bhi) = (t(alo), t(ahi), t(blo), t(bhi));
            let Some(sh) = p.shift(&alo, &ahi, &blo, &bhi) else {
                mixed += 1;
                continue;
            };
            uniform += 1;
            shifted += usize::from(sh.iter().any(|&x| x != T::ZERO));
            for _ in 0..4 {
                let (t, u) = (T::from_f64(r()), T::from_f64(r()));
                let inside =
                    |lo: &[T; 3], hi: &[T; 3], t: T| -> [T; 3] { std::array::from_fn(|d| fmin(fmax(lo[d] + t * (hi[d] - lo[d]), lo[d]), hi[d])) };
                let (q, b) = (inside(&alo, &ahi, t), inside(&blo, &bhi, u));
                for (q, b) in [(q, b), (alo, bhi), (ahi, blo), (q, blo), (alo, b)] {
                    for d in 0..3 {
                        assert_eq!(((q[d] - b[d]) + sh[d]).to_f64().to_bits(), p.diff(q[d], b[d], d).to_f64().to_bits());
                    }
                    let cols: [Vec<T>; 3] = std::array::from_fn(|d| vec![b[d]; 8]);
                    let ptrs: [*const T; 3] = std::array::from_fn(|d| cols[d].as_ptr());
                    // SAFETY: every column holds 8 points.
                    let got: [T; 8] = unsafe { shifted_block_at::<T, 3, 8>(&q, &ptrs, 0, &sh) };
                    assert!(got.iter().all(|g| g.to_f64().to_bits() == p.dist2(&q, &b).to_f64().to_bits()));
                }
            }
        }
        assert!(uniform > 1000 && shifted > 1000 && mixed > 1000, "{uniform} {shifted} {mixed}");
    }

    #[test]
    fn one_shift_per_dimension_is_the_minimum_image() {
        shift_matches::<f32>();
        shift_matches::<f64>();
    }
}
