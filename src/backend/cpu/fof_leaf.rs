//! The FoF point-pair passes on the CPU: pairs inside one leaf (all pairs, as bit-mask
//! rows up to 64 points, or a sweep along the longest side of a leaf many linking lengths
//! long) and pairs between two leaves (a vectorised point–box filter, then point
//! distances, with shortcuts when a leaf is internally connected).
//!
//! Points are linked when `d² <= l²`, evaluated in f64 from the input coordinates with the
//! periodic minimum image per dimension, summed as `(dx² + dy²) + dz²`.
//!
//! Both passes are compiled twice, for the baseline and with AVX2 (`#[target_feature]`
//! wrappers around one `#[inline(always)]` body, picked by `simd::level()` per leaf): the
//! open-space mask block then takes four distances per 256-bit vector instead of two.
//! The same IEEE operations run in both, so the links are the same.

use std::sync::atomic::Ordering::Relaxed;

use super::fof::{Job, Scratch};
use super::simd::{self, Simd};
use crate::geom::Real;
use crate::geom::metric::{Metric, Open, distances, distances_block_at};

/// The extent (in linking lengths) along its longest side above which a leaf's own pairs
/// are found by a sweep along that side.
const SWEEP_MIN: f64 = 12.0;

/// Points per distance block of the bit-mask paths (leaves of at most 64 points).
const W: usize = 8;

/// The mask of the `W` points `base ..` of the columns within `l2` of `p`: open-space
/// distances as `distances_block_at::<f64, D, W, Open>` (the same operations in the same
/// order) and `le_mask`, held in SSE2 registers (x86-64's baseline) — the vectoriser mixed
/// scalar and vector lanes in this block, with shuffles between them.
///
/// # Safety
/// Each `cols[d]` must point to at least `base + W` readable elements.
#[inline(always)]
unsafe fn open_mask<const D: usize>(p: &[f64; D], cols: &[*const f64; D], base: usize, l2: f64) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if D > 0 {
        use std::arch::x86_64::*;
        let mut m = 0u32;
        // SAFETY: each load reads two points inside the columns (the caller).
        unsafe {
            let t = _mm_set1_pd(l2);
            for c in 0..W / 2 {
                let at = base + 2 * c;
                let dx = _mm_sub_pd(_mm_set1_pd(p[0]), _mm_loadu_pd(cols[0].add(at)));
                let mut acc = _mm_mul_pd(dx, dx);
                for d in 1..D {
                    let dx = _mm_sub_pd(_mm_set1_pd(p[d]), _mm_loadu_pd(cols[d].add(at)));
                    acc = _mm_add_pd(acc, _mm_mul_pd(dx, dx));
                }
                m |= (_mm_movemask_pd(_mm_cmple_pd(acc, t)) as u32) << (2 * c);
            }
        }
        return m;
    }
    // SAFETY: the caller's guarantee.
    f64::le_mask(&unsafe { distances_block_at::<f64, D, W, Open>(&Open, p, cols, base) }, l2)
}

/// Squared distances from the first `d2.len()` points of the columns `xs` to the box
/// `[lo, hi]` (lower bounds of their distances to any point inside it).
#[inline(always)]
fn point_box_d2<M: Metric<f64, D>, const D: usize>(metric: &M, xs: &[Vec<f64>; D], lo: &[f64; D], hi: &[f64; D], d2: &mut [f64]) {
    let n = d2.len();
    for d in 0..D {
        for (o, &x) in d2.iter_mut().zip(&xs[d][..n]) {
            let g = metric.gap_range(x, x, lo[d], hi[d], d).0;
            *o = if d == 0 { g * g } else { *o + g * g };
        }
    }
}

/// The first `n` points of the columns `xs` whose open-space squared distance to the box
/// `[lo, hi]` is at most `thr`, written to `sel` in order; returns how many. Four points
/// per 256-bit vector with the operations of `point_box_d2::<Open>` (`maxpd` as
/// `max1`, the same operand order; `(gx² + gy²) + gz²`), so it selects the same points.
/// (`max1` is a scalar instruction the vectoriser cannot widen: that loop ran scalar.)
///
/// # Safety
/// The CPU must have AVX; each column and `sel` must hold at least `n` elements.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn open_box_select_avx<const D: usize>(xs: &[Vec<f64>; D], n: usize, lo: &[f64; D], hi: &[f64; D], thr: f64, sel: &mut [u32]) -> usize {
    use std::arch::x86_64::*;
    debug_assert!(xs.iter().all(|c| c.len() >= n) && sel.len() >= n);
    let mut nsel = 0;
    let mut i = 0;
    // SAFETY: loads of four points at i + 4 <= n, inside every column; AVX (the caller).
    unsafe {
        let (t, zero) = (_mm256_set1_pd(thr), _mm256_setzero_pd());
        while i + 4 <= n {
            let mut acc = zero;
            for d in 0..D {
                let x = _mm256_loadu_pd(xs[d].as_ptr().add(i));
                let g = _mm256_max_pd(_mm256_max_pd(_mm256_sub_pd(x, _mm256_set1_pd(hi[d])), _mm256_sub_pd(_mm256_set1_pd(lo[d]), x)), zero);
                let g2 = _mm256_mul_pd(g, g);
                acc = if d == 0 { g2 } else { _mm256_add_pd(acc, g2) };
            }
            let m = _mm256_movemask_pd(_mm256_cmp_pd::<_CMP_LE_OQ>(acc, t)) as usize;
            for j in 0..4 {
                *sel.get_unchecked_mut(nsel) = (i + j) as u32;
                nsel += (m >> j) & 1;
            }
            i += 4;
        }
    }
    for k in i..n {
        let mut v = 0.0;
        for d in 0..D {
            let g = <Open as Metric<f64, D>>::gap_range(&Open, xs[d][k], xs[d][k], lo[d], hi[d], d).0;
            v = if d == 0 { g * g } else { v + g * g };
        }
        sel[nsel] = k as u32;
        nsel += usize::from(v <= thr);
    }
    nsel
}

/// Without AVX the AVX2 build's path is never taken (`plain && AVX`).
#[cfg(not(target_arch = "x86_64"))]
#[inline(always)]
unsafe fn open_box_select_avx<const D: usize>(_: &[Vec<f64>; D], _: usize, _: &[f64; D], _: &[f64; D], _: f64, _: &mut [u32]) -> usize {
    unreachable!("AVX on a CPU without it")
}

impl<T: Real, const D: usize> Job<'_, T, D> {
    /// Squared distances (f64, minimum image) from `p` to the points in `xs` (f64
    /// copies, one array per dimension), summed as `(dx² + dy²) + dz²`; returns how many
    /// are within l, their offsets in `hits`. `plain`: no pair needs the minimum image, so
    /// open-space differences give the same values with fewer operations.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn within<M: Metric<f64, D>>(
        &self,
        metric: &M,
        plain: bool,
        p: &[f64; D],
        xs: &[Vec<f64>; D],
        from: usize,
        d2: &mut [f64],
        hits: &mut [u32],
    ) -> usize {
        if plain {
            distances(&Open, p, xs, from, d2);
        } else {
            distances(metric, p, xs, from, d2);
        }
        let l2 = self.l2;
        let mut w = 0;
        for (j, &v) in d2.iter().enumerate() {
            hits[w] = j as u32;
            w += usize::from(v <= l2);
        }
        w
    }

    /// The points among the first `n <= 64` of the columns `cols` (padded to `n + W`
    /// points) within l of `p`, as a bit mask: distances by whole blocks, as in `within`.
    #[inline(always)]
    fn within_mask<M: Metric<f64, D>, const AVX: bool>(
        &self,
        metric: &M,
        plain: bool,
        p: &[f64; D],
        cols: &[*const f64; D],
        from: usize,
        n: usize,
    ) -> u64 {
        let mut row = 0u64;
        for (c, base) in (from..n).step_by(W).enumerate() {
            // SAFETY: the columns hold n + W points (the caller), base < n; AVX only in
            // the AVX2 build.
            let m = unsafe {
                if plain && AVX {
                    let mut d2 = [0.0; W];
                    f64::open_block_avx::<D, W>(p, cols, base, self.l2, &mut d2)
                } else if plain {
                    open_mask(p, cols, base, self.l2)
                } else {
                    f64::le_mask(&distances_block_at::<f64, D, W, M>(metric, p, cols, base), self.l2)
                }
            };
            row |= (m as u64) << (c * W);
        }
        // Bits past the n points (block padding) off.
        if n - from == 64 { row } else { row & ((1u64 << (n - from)) - 1) }
    }

    /// Copies the points of leaf `n` into `x` as f64; returns (first, count).
    #[inline(always)]
    fn load(&self, n: usize, x: &mut [Vec<f64>; D], held: &mut usize) -> (usize, usize) {
        let t = &self.zs.tree;
        let n0 = t.src_start[n] as usize;
        let nn = t.src_count[n] as usize;
        if *held == n {
            return (n0, nn);
        }
        *held = n;
        for (xd, col) in x.iter_mut().zip(&self.zs.src_pos) {
            xd.clear();
            xd.extend(col[n0..n0 + nn].iter().map(|v| v.to_f64()));
        }
        (n0, nn)
    }

    /// The points of leaf `n` (at most 64) as f64 columns readable to whole blocks of `W`
    /// past them: f64 points where they lie when that padding stays inside the arrays
    /// (the next leaf's points, masked off by the mask rows), else copies into `x` (as
    /// `load`) padded with zeros.
    #[inline(always)]
    fn block_cols(&self, n: usize, x: &mut [Vec<f64>; D], held: &mut usize) -> [*const f64; D] {
        let t = &self.zs.tree;
        let (n0, nn) = (t.src_start[n] as usize, t.src_count[n] as usize);
        if T::IS_F64 && n0 + nn + W <= self.zs.n_sources() {
            // T is f64 (Real is f32 or f64).
            return std::array::from_fn(|d| self.zs.src_pos[d][n0..].as_ptr().cast::<f64>());
        }
        self.load(n, x, held);
        for xd in x.iter_mut() {
            xd.resize(nn + W, 0.0);
        }
        std::array::from_fn(|d| x[d].as_ptr())
    }

    #[inline(always)]
    fn size(s: &mut Scratch<D>, n: usize) {
        if s.d2.len() < n {
            s.d2.resize(n, 0.0);
            s.hits.resize(n, 0);
            s.sel.resize(n, 0);
            s.perm.resize(n, 0);
        }
    }

    /// Point pairs inside leaf `a`; marks the leaf internally connected when it ends up
    /// in one group.
    pub(super) fn leaf_self<M: Metric<f64, D>>(&self, metric: &M, a: usize, s: &mut Scratch<D>) {
        match simd::level() {
            // SAFETY: `level()` returns a level only when the CPU has its features.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 | Simd::Avx512 => unsafe { self.leaf_self_avx2(metric, a, s) },
            _ => self.leaf_self_at::<M, false>(metric, a, s),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,popcnt,lzcnt")]
    unsafe fn leaf_self_avx2<M: Metric<f64, D>>(&self, metric: &M, a: usize, s: &mut Scratch<D>) {
        self.leaf_self_at::<M, true>(metric, a, s)
    }

    /// The body of `leaf_self`; `AVX`: compiled into a function with AVX2 enabled.
    #[inline(always)]
    fn leaf_self_at<M: Metric<f64, D>, const AVX: bool>(&self, metric: &M, a: usize, s: &mut Scratch<D>) {
        s.xq_node = usize::MAX;
        let t = &self.zs.tree;
        let (a0, an) = (t.src_start[a] as usize, t.src_count[a] as usize);
        if an == 0 {
            return;
        }
        // Sweep along the leaf's longest side: sorted by that coordinate, the partners of
        // a point within l lie in a window after it. Valid when no pair needs the periodic
        // wrap in that dimension (the leaf spans at most half the box there).
        let (lo, hi) = self.bx(a);
        let mut dim = 0;
        for d in 1..D {
            if hi[d] - lo[d] > hi[dim] - lo[dim] {
                dim = d;
            }
        }
        // A leaf only a few l long gains little from the sweep (most pairs are in the window
        // anyway): all pairs then, without the sort. Up to 64 points the bit-mask rows
        // beat the sweep even in a long sparse leaf (its sort and scalar windows cost more
        // than the vector blocks of all pairs: leaf self 5 -> 3 ms on GADGET-4 262k).
        let sweep = an > 64 && hi[dim] - lo[dim] > SWEEP_MIN * self.l_hi && self.box_len.is_none_or(|l| hi[dim] - lo[dim] <= 0.5 * l[dim]);
        // No pair needs the minimum image at all (the usual case): open-space differences,
        // the same values.
        let plain = metric.no_wrap(&lo, &hi, &lo, &hi);
        if !sweep && an <= 64 {
            let cols = self.block_cols(a, &mut s.xp, &mut s.xp_node);
            self.leaf_self_bits::<M, AVX>(metric, plain, a, a0, an, &cols);
            return;
        }
        self.load(a, &mut s.xp, &mut s.xp_node);
        Self::size(s, an);
        for k in 0..an {
            s.perm[k] = k as u32;
        }
        if sweep {
            let xs = &s.xp[dim];
            s.perm[..an].sort_unstable_by(|&i, &j| xs[i as usize].total_cmp(&xs[j as usize]));
        }
        for d in 0..D {
            s.xq[d].clear();
            s.xq[d].extend(s.perm[..an].iter().map(|&k| s.xp[d][k as usize]));
        }
        let mut one = true;
        let mut end = 0;
        for k in 0..an - 1 {
            end = end.max(k + 1);
            if sweep {
                let x = s.xq[dim][k];
                while end < an && s.xq[dim][end] - x <= self.l_hi {
                    end += 1;
                }
            } else {
                end = an;
            }
            let m = end - (k + 1);
            let w = if m == 0 {
                0
            } else {
                let p: [f64; D] = std::array::from_fn(|d| s.xq[d][k]);
                self.within(metric, plain, &p, &s.xq, k + 1, &mut s.d2[..m], &mut s.hits[..m])
            };
            if w > 0 {
                let perm = &s.perm[k + 1..];
                self.link_hits(a0 as u32 + s.perm[k], a0 as u32, s.hits[..w].iter().map(|&h| perm[h as usize]));
            } else {
                // The first point linked to no later point is linked to none.
                one &= k > 0;
            }
        }
        if one {
            let r = self.uf.find(a0 as u32);
            if (a0 + 1..a0 + an).all(|z| self.uf.find(z as u32) == r) {
                self.flags[a].store(true, Relaxed);
            }
        }
    }

    /// The pairs of a leaf of at most 64 points, all within reach of each other (no sweep):
    /// each point's partners after it as one 64-bit row, merged into groups held as bit
    /// sets (a union–find over the leaf with each root's members as a mask). Only
    /// partners outside the point's group so far are merged, one merge per group joined,
    /// and a point whose group already holds every later point needs no distances at all
    /// (in a dense leaf, most of them). The groups are then written into the union–find
    /// directly: in the leaf pass nothing else touches this leaf's points, so each is
    /// still a singleton — no find per link, no compare-and-swap per union.
    /// `cols`: the leaf's points as f64 columns, readable to `an + W` points.
    #[inline(always)]
    fn leaf_self_bits<M: Metric<f64, D>, const AVX: bool>(&self, metric: &M, plain: bool, a: usize, a0: usize, an: usize, cols: &[*const f64; D]) {
        fn root(up: &mut [u8; 64], mut x: usize) -> usize {
            while up[x] as usize != x {
                let p = up[x] as usize;
                up[x] = up[p];
                x = p;
            }
            x
        }
        // up[j]: j's parent within the leaf (a smaller point, or j for a root);
        // members[r]: the points of root r's group.
        let mut up = [0u8; 64];
        let mut members = [0u64; 64];
        for j in 0..an {
            up[j] = j as u8;
            members[j] = 1u64 << j;
        }
        let all = if an == 64 { u64::MAX } else { (1u64 << an) - 1 };
        let mut groups = an;
        for k in 0..an - 1 {
            if groups == 1 {
                break;
            }
            let mut rk = root(&mut up, k);
            let later = all & !((2u64 << k) - 1);
            if later & !members[rk] == 0 {
                continue;
            }
            // SAFETY: k < an, inside the columns (the caller).
            let p: [f64; D] = std::array::from_fn(|d| unsafe { *cols[d].add(k) });
            let row = self.within_mask::<M, AVX>(metric, plain, &p, cols, k + 1, an);
            let mut new = (row << (k + 1)) & !members[rk];
            while new != 0 {
                let rj = root(&mut up, new.trailing_zeros() as usize);
                let (lo, hi) = if rj < rk { (rj, rk) } else { (rk, rj) };
                up[hi] = lo as u8;
                members[lo] |= members[hi];
                new &= !members[lo];
                rk = lo;
                groups -= 1;
            }
        }
        if groups == 1 {
            self.flags[a].store(true, Relaxed);
        }
        for j in 1..an {
            let r = root(&mut up, j);
            if r != j {
                self.uf.hook_fresh((a0 + j) as u32, (a0 + r) as u32);
            }
        }
    }

    /// Point pairs between leaves `a` and `b` (a pair the node test could not resolve).
    /// The points of one leaf ("probe") are tested against the other ("target"), after a
    /// vectorised point–box filter. When the target is internally connected one link per
    /// probe point is enough, and none for probe points already in its group; when both
    /// are, one link in all.
    pub(super) fn leaf_pair<M: Metric<f64, D>>(&self, metric: &M, a: usize, b: usize, s: &mut Scratch<D>) {
        match simd::level() {
            // SAFETY: `level()` returns a level only when the CPU has its features.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 | Simd::Avx512 => unsafe { self.leaf_pair_avx2(metric, a, b, s) },
            _ => self.leaf_pair_at::<M, false>(metric, a, b, s),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,popcnt,lzcnt")]
    unsafe fn leaf_pair_avx2<M: Metric<f64, D>>(&self, metric: &M, a: usize, b: usize, s: &mut Scratch<D>) {
        self.leaf_pair_at::<M, true>(metric, a, b, s)
    }

    /// The body of `leaf_pair`; `AVX`: compiled into a function with AVX2 enabled.
    #[inline(always)]
    fn leaf_pair_at<M: Metric<f64, D>, const AVX: bool>(&self, metric: &M, a: usize, b: usize, s: &mut Scratch<D>) {
        let (ca, cb) = (self.connected(a), self.connected(b));
        let (p, q) = if ca && !cb { (b, a) } else { (a, b) };
        let q_conn = ca || cb;
        let both = ca && cb;
        let (p0, pn) = self.load(p, &mut s.xp, &mut s.xp_node);
        Self::size(s, pn.max(self.zs.tree.src_count[q] as usize));
        let (qlo, qhi) = self.bx(q);
        let (plo, phi) = self.bx(p);
        let plain = metric.no_wrap(&plo, &phi, &qlo, &qhi);
        // Point–box lower bounds of the probe points (open-space gaps when no pair wraps:
        // the same values, fewer operations), then the ones within l.
        let nsel = if plain && AVX {
            // SAFETY: AVX only in the AVX2 build; the columns and `sel` hold pn points.
            unsafe { open_box_select_avx(&s.xp, pn, &qlo, &qhi, self.l2_hi, &mut s.sel) }
        } else {
            let d2 = &mut s.d2[..pn];
            if plain {
                point_box_d2(&Open, &s.xp, &qlo, &qhi, d2);
            } else {
                point_box_d2(metric, &s.xp, &qlo, &qhi, d2);
            }
            let mut nsel = 0;
            for (k, &v) in d2.iter().enumerate() {
                s.sel[nsel] = k as u32;
                nsel += usize::from(v <= self.l2_hi);
            }
            nsel
        };
        // The target's points only when some probe point may reach them (often none).
        if nsel == 0 {
            return;
        }
        let t = &self.zs.tree;
        let (q0, qn) = (t.src_start[q] as usize, t.src_count[q] as usize);
        // Up to 64 target points: their hits as a bit mask (distances by whole blocks;
        // f64 points mostly read where they lie, no copy per pair). Larger targets are
        // read from the copies in `xq`.
        let cols = if qn <= 64 {
            Some(self.block_cols(q, &mut s.xq, &mut s.xq_node))
        } else {
            self.load(q, &mut s.xq, &mut s.xq_node);
            None
        };
        let q0u = q0 as u32;
        for si in 0..nsel {
            let k = s.sel[si] as usize;
            let i = (p0 + k) as u32;
            let pt: [f64; D] = std::array::from_fn(|d| s.xp[d][k]);
            if q_conn && self.uf.find(i) == self.uf.find(q0u) {
                if both {
                    return;
                }
                continue;
            }
            if metric.box_max2(&pt, &pt, &qlo, &qhi) <= self.l2_lo {
                self.connect(q, i);
                if both {
                    return;
                }
                continue;
            }
            if let Some(cols) = &cols {
                let mut hit = self.within_mask::<M, AVX>(metric, plain, &pt, cols, 0, qn);
                if hit == 0 {
                    continue;
                }
                if q_conn {
                    self.uf.union(i, q0u);
                    if both {
                        return;
                    }
                    continue;
                }
                self.link_hits(
                    i,
                    q0u,
                    std::iter::from_fn(|| {
                        let j = (hit != 0).then(|| hit.trailing_zeros());
                        hit &= hit.wrapping_sub(1);
                        j
                    }),
                );
                continue;
            }
            let w = self.within(metric, plain, &pt, &s.xq, 0, &mut s.d2[..qn], &mut s.hits[..qn]);
            if w > 0 {
                if q_conn {
                    self.uf.union(i, q0u);
                    if both {
                        return;
                    }
                } else {
                    self.link_hits(i, q0u, s.hits[..w].iter().copied());
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The register block gives the generic block's mask, in 2D and 3D, with points at
    /// exactly the linking length (a lattice of spacing l) and duplicates.
    fn open_mask_matches<const D: usize>() {
        let mut r = crate::geom::unit_xorshift(0x9E37_79B9_7F4A_7C15u64);
        let l = 0.25;
        let cols: [Vec<f64>; D] = std::array::from_fn(|_| (0..48).map(|i| if i % 3 == 0 { (i % 5) as f64 * l } else { r() }).collect());
        let ptrs: [*const f64; D] = std::array::from_fn(|d| cols[d].as_ptr());
        for base in 0..=40 {
            let p: [f64; D] = std::array::from_fn(|d| if base % 2 == 0 { cols[d][base] } else { r() });
            for l2 in [0.0, l * l, 0.1, f64::INFINITY] {
                // SAFETY: every column holds 48 >= base + W points.
                let want = f64::le_mask(&unsafe { distances_block_at::<f64, D, W, Open>(&Open, &p, &ptrs, base) }, l2);
                assert_eq!(unsafe { open_mask(&p, &ptrs, base, l2) }, want, "D {D} base {base} l2 {l2}");
            }
        }
    }

    /// The AVX point–box selection picks the points the scalar filter picks, in 2D and
    /// 3D, for every count (the vector body and its tail), with points inside the box,
    /// on its faces and exactly l from them.
    fn open_box_select_matches<const D: usize>() {
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx") {
            let mut r = crate::geom::unit_xorshift(0x2545_F491_4F6C_DD1Du64);
            let (lo, hi) = ([0.25; D], [0.5; D]);
            let l = 0.125;
            // On the grid of step l/2 from 0 to 7/8: inside, on faces, exactly l away.
            let cols: [Vec<f64>; D] = std::array::from_fn(|_| (0..70).map(|i| if i % 3 == 0 { (i % 8) as f64 * 0.125 } else { r() }).collect());
            for n in 0..=70 {
                for thr in [0.0, l * l, 2.0 * l * l, f64::INFINITY] {
                    let mut d2 = vec![0.0; n];
                    point_box_d2(&Open, &cols, &lo, &hi, &mut d2);
                    let want: Vec<u32> = (0..n as u32).filter(|&k| d2[k as usize] <= thr).collect();
                    let mut sel = vec![0u32; n];
                    // SAFETY: AVX checked above; the columns and `sel` hold n points.
                    let got = unsafe { open_box_select_avx(&cols, n, &lo, &hi, thr, &mut sel) };
                    assert_eq!(&sel[..got], &want[..], "D {D} n {n} thr {thr}");
                }
            }
        }
    }

    #[test]
    fn open_box_select_equals_scalar_filter() {
        open_box_select_matches::<3>();
        open_box_select_matches::<2>();
    }

    #[test]
    fn open_mask_equals_generic_block() {
        open_mask_matches::<3>();
        open_mask_matches::<2>();
    }
}
