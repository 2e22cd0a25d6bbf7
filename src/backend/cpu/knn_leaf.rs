//! The kNN leaf pass: for each query of a leaf, a first threshold (from the leaf's
//! density or the previous query's k-th distance), the kept source leaves within it, their
//! points' distances, and a short candidate buffer cut to the best k by (distance², input
//! index). Results are written straight into the output rows.

use super::Cpu;
use super::knn::KnnJob;
use crate::geom::Real;
use crate::geom::metric::{Metric, distances};
use crate::knn::reduce;
use crate::pipeline::{KnnSinks, Tree};

/// The first threshold of a query expects this many times k sources (see `estimate_r2`).
const ESTIMATE_FACTOR: f64 = 1.5;

/// Per-task scratch of the walk.
pub(crate) struct Scratch<T, const D: usize> {
    /// d_min² from the receiving node to each candidate group's source node.
    pub(crate) gmin: Vec<T>,
    /// Evaluated candidates that may be kept: (d_min², node).
    pub(crate) eval: Vec<(T, u32)>,
    /// Smallest-d_max candidates holding >= k sources: (d_max², count), ascending.
    pub(crate) near: Vec<(T, u32)>,
    /// Boxes and source ranges of the kept leaves of the current leaf (struct of arrays).
    klo: [Vec<T>; D],
    khi: [Vec<T>; D],
    kstart: Vec<u32>,
    kcount: Vec<u32>,
    knear: usize,
    /// Point–box distance² from the current query to each kept leaf.
    pb: Vec<T>,
    /// Kept leaves within the current threshold.
    visit: Vec<u32>,
    /// Neighbour candidates of the current query as sort keys (see `cand_key`).
    cand: Vec<u128>,
    ncand: usize,
    /// Distances² from the query to one source leaf, and which of them pass.
    d2: Vec<T>,
    hits: Vec<u32>,
}

impl<T: Real, const D: usize> Scratch<T, D> {
    pub(crate) fn new() -> Self {
        Self {
            gmin: Vec::new(),
            eval: Vec::new(),
            near: Vec::new(),
            klo: std::array::from_fn(|_| Vec::new()),
            khi: std::array::from_fn(|_| Vec::new()),
            kstart: Vec::new(),
            kcount: Vec::new(),
            knear: 0,
            pb: Vec::new(),
            visit: Vec::new(),
            cand: Vec::new(),
            ncand: 0,
            d2: Vec::new(),
            hits: Vec::new(),
        }
    }
}

/// A neighbour candidate as one integer whose order is (distance², rank, z-index):
/// distance² bits (non-negative floats order like their bits), then the rank among equal
/// distances — 0 for the query itself in a self-query (a point is its own first
/// neighbour, duplicates included), else input index + 1 (ties by smaller index) — then
/// the z-index.
#[inline(always)]
fn cand_key<T: Real>(d2: T, rank: u32, z: u32) -> u128 {
    (d2.key_bits() as u128) << 64 | (rank as u128) << 32 | z as u128
}

/// The source input index of a candidate key (`query` for the self rank 0).
#[inline(always)]
fn cand_index(key: u128, query: usize) -> i64 {
    match (key >> 32) as u32 {
        0 => query as i64,
        r => (r - 1) as i64,
    }
}

#[inline(always)]
fn cand_d2<T: Real>(key: u128) -> T {
    T::from_key_bits((key >> 64) as u64)
}

impl<T: Real, const D: usize> KnnJob<'_, T, D> {
    /// Gathers the boxes and source ranges of the candidate leaves with d_min² <= r2.
    /// Those within the first threshold `est` come first (`s.knear` of them): most
    /// queries never look further.
    pub(super) fn keep_leaves(&self, tree: &Tree<Cpu, T, D>, r2: T, est: T, s: &mut Scratch<T, D>) {
        for d in 0..D {
            s.klo[d].clear();
            s.khi[d].clear();
        }
        s.kstart.clear();
        s.kcount.clear();
        for near in [true, false] {
            for &(dm, b) in &s.eval {
                if (dm <= est) == near && dm <= r2 {
                    let b = b as usize;
                    for d in 0..D {
                        s.klo[d].push(tree.src_lo[b][d]);
                        s.khi[d].push(tree.src_hi[b][d]);
                    }
                    s.kstart.push(tree.src_start[b]);
                    s.kcount.push(tree.src_count[b]);
                }
            }
            if near {
                s.knear = s.kstart.len();
            }
        }
    }

    /// An estimate of the squared k-th neighbour distance in leaf `a` from its source
    /// density, inflated for safety and capped at `r2`. Only a first threshold: a query
    /// that finds fewer than k sources within it is redone with `r2`.
    pub(super) fn estimate_r2(&self, tree: &Tree<Cpu, T, D>, a: usize, r2: T) -> T {
        let cnt = tree.src_count[a] as f64;
        if cnt < 2.0 {
            return r2;
        }
        let (lo, hi) = (&tree.src_lo[a], &tree.src_hi[a]);
        let vol: f64 = (0..D).map(|d| (hi[d] - lo[d]).to_f64()).product();
        let unit_ball = if D == 2 { std::f64::consts::PI } else { 4.0 / 3.0 * std::f64::consts::PI };
        // Radius holding about ESTIMATE_FACTOR * k sources at the leaf's density.
        let r = (ESTIMATE_FACTOR * self.kk as f64 * vol / (cnt * unit_ball)).powf(1.0 / D as f64);
        let e = T::from_f64(r * r);
        if e.is_finite() && e > T::ZERO && e < r2 { e } else { r2 }
    }

    /// The leaf pass for the queries of leaf `a` over the kept leaves in `s`.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn leaf<M: Metric<T, D>>(&self, metric: &M, a: usize, r2: T, est: T, s: &mut Scratch<T, D>, sinks: &KnnSinks<'_, Cpu, T>) {
        let zs = self.zs;
        let tree = &zs.tree;
        let (qpos, qorig) = zs.queries();
        // Selection size: at most the number of sources (rows are padded beyond it).
        let k = self.kk;
        let self_query = zs.qry.is_none();
        let q0 = tree.qry_start[a] as usize;
        let qn = tree.qry_count[a] as usize;
        let (knear, nk) = (s.knear, s.kstart.len());
        s.pb.resize(nk, T::ZERO);
        let four = T::from_f64(4.0);
        let slack = T::from_f64(1.0 + 1e-5);
        // The previous query (a z-order neighbour) and its k-th distance²: by the triangle
        // inequality, k sources lie within (its k-th distance + the distance between the
        // two queries) — a threshold that is always enough, often tighter than `est`.
        let mut prev: Option<([T; D], T)> = None;
        for q in q0..q0 + qn {
            let qp: [T; D] = std::array::from_fn(|d| qpos[d][q]);
            let bound = prev.map(|(pp, kth2)| {
                let r = kth2.sqrt() + metric.dist2(&qp, &pp).sqrt();
                r * r * slack
            });
            point_box_distances(metric, &qp, &s.klo, &s.khi, 0, &mut s.pb[..knear]);
            let mut thr = match bound {
                Some(b) if b < est => b,
                _ => est,
            };
            self.gather_candidates(metric, &qp, thr, knear, if self_query { q } else { usize::MAX }, s);
            if s.ncand < k && thr < r2 {
                point_box_distances(metric, &qp, &s.klo, &s.khi, knear, &mut s.pb[knear..nk]);
            }
            while s.ncand < k && thr < r2 {
                // The first threshold was too small: widen it (every neighbour lies within r2).
                thr = match bound {
                    Some(b) if b > thr && b < r2 => b,
                    _ if thr * four > thr && thr * four < r2 => thr * four,
                    _ => r2, // ends the loop (also when thr is 0)
                };
                self.gather_candidates(metric, &qp, thr, nk, if self_query { q } else { usize::MAX }, s);
            }
            let m = s.ncand.min(k);
            if s.ncand <= 2 * k {
                s.cand[..s.ncand].sort_unstable();
            } else {
                s.cand[..s.ncand].select_nth_unstable(k - 1);
                s.cand[..m].sort_unstable();
            }
            prev = (m == k).then(|| (qp, cand_d2::<T>(s.cand[k - 1])));
            self.emit(q, qorig[q] as usize, m, s, sinks);
        }
    }

    /// Collects into `s.cand[..s.ncand]` the sources within `thr` of `q` (squared), keeping
    /// the buffer short by cutting to the best k and tightening the threshold whenever it
    /// grows large. Which sources end up in the best k does not depend on the visiting order.
    #[inline]
    /// Only the first `nk` kept leaves are visited; `self_z` is the query's own z-index in a
    /// self-query (else usize::MAX).
    fn gather_candidates<M: Metric<T, D>>(&self, metric: &M, qp: &[T; D], thr: T, nk: usize, self_z: usize, s: &mut Scratch<T, D>) {
        let k = self.kk;
        let sorig = &self.zs.src_orig;
        let spos = &self.zs.src_pos;
        let mut thr = thr;
        let compact_at = (4 * k).max(64);
        // Branch-free selection of the kept leaves within the threshold.
        s.visit.resize(nk, 0);
        let mut nv = 0;
        for j in 0..nk {
            s.visit[nv] = j as u32;
            nv += usize::from(s.pb[j] <= thr);
        }
        let mut n = 0usize;
        for v in 0..nv {
            let j = s.visit[v] as usize;
            if s.pb[j] > thr {
                continue; // the threshold shrank since the selection
            }
            let s0 = s.kstart[j] as usize;
            let cnt = s.kcount[j] as usize;
            if s.d2.len() < cnt {
                s.d2.resize(cnt, T::ZERO);
                s.hits.resize(cnt, 0);
            }
            if s.cand.len() < n + cnt {
                s.cand.resize(n + cnt, 0);
            }
            let d2s = &mut s.d2[..cnt];
            distances(metric, qp, spos, s0, d2s);
            // Branch-free selection of the sources within the threshold, then their keys.
            let mut w = 0usize;
            for (jj, &d2) in d2s.iter().enumerate() {
                s.hits[w] = jj as u32;
                w += usize::from(d2 <= thr);
            }
            for (slot, &jj) in s.cand[n..n + w].iter_mut().zip(&s.hits[..w]) {
                let z = s0 + jj as usize;
                let rank = if z == self_z { 0 } else { sorig[z] + 1 };
                *slot = cand_key(d2s[jj as usize], rank, z as u32);
            }
            n += w;
            if n >= compact_at {
                s.cand[..n].select_nth_unstable(k - 1);
                n = k;
                thr = cand_d2(s.cand[k - 1]);
            }
        }
        s.ncand = n;
    }

    /// Writes the results of one query (z-index `q`, input index `orig`).
    #[inline]
    fn emit(&self, q: usize, orig: usize, m: usize, s: &Scratch<T, D>, sinks: &KnnSinks<'_, Cpu, T>) {
        let k = self.k;
        let row = if sinks.zorder { q } else { orig };
        // SAFETY (all writes): row `row` belongs to this query alone; lengths were checked.
        unsafe {
            if let Some(p) = &sinks.indices {
                let out = p.slice_mut(row * k, k);
                for j in 0..k {
                    out[j] = if j < m { cand_index(s.cand[j], orig) } else { -1 };
                }
            }
            if let Some(p) = &sinks.distances {
                let out = p.slice_mut(row * k, k);
                for j in 0..k {
                    out[j] = if j < m { cand_d2::<T>(s.cand[j]).sqrt() } else { T::INFINITY };
                }
            }
            if let Some(p) = &sinks.d2 {
                let out = p.slice_mut(row * k, k);
                for j in 0..k {
                    out[j] = if j < m { cand_d2::<T>(s.cand[j]) } else { T::INFINITY };
                }
            }
            if let Some(p) = &sinks.kth_d2 {
                p.write(row, if m == k { cand_d2::<T>(s.cand[k - 1]) } else { T::INFINITY });
            }
            let kth = if m == k { cand_d2::<T>(s.cand[k - 1]).sqrt() } else { T::INFINITY };
            if let Some(p) = &sinks.kth {
                p.write(row, kth);
            }
            if let Some(p) = &sinks.density {
                let mass = self.masses.map(|ms| s.cand[..m].iter().map(|&c| ms[c as u32 as usize]).sum::<f64>());
                p.write(row, reduce::density::<D>(mass, m, k, kth.to_f64()));
            }
            if let (Some(p), Some(sc)) = (&sinks.scalar_mean, self.scalar) {
                p.write(row, reduce::mean(s.cand[..m].iter().map(|&c| sc[c as u32 as usize])));
            }
        }
    }
}

/// Squared point–box lower bounds from `q` to every kept box (vectorisable loop).
#[inline(always)]
/// Boxes `from .. from + out.len()`.
fn point_box_distances<T: Real, const D: usize, M: Metric<T, D>>(metric: &M, q: &[T; D], lo: &[Vec<T>; D], hi: &[Vec<T>; D], from: usize, out: &mut [T]) {
    for d in 0..D {
        let qd = q[d];
        let to = from + out.len();
        let (l, h) = (&lo[d][from..to], &hi[d][from..to]);
        for ((o, &l), &h) in out.iter_mut().zip(l).zip(h) {
            let g = metric.gap_range(qd, qd, l, h, d).0;
            *o = if d == 0 { g * g } else { *o + g * g };
        }
    }
}
