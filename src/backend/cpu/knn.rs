//! kNN on the CPU (docs/DESIGN.md §4): the node–node test and the plane passes; the leaf
//! pass is in `knn_leaf`.
//!
//! Node–node test for a receiving node A: `r_A` is the smallest radius such that the
//! candidate sources B with `d_max(A, B) <= r_A` hold at least k points; A keeps the
//! candidates with `d_min(A, B) <= r_A`.

use super::Cpu;
use super::knn_leaf::Scratch;
use super::walk::{Candidates, walk_leaves, walk_plane};
use crate::geom::Real;
use crate::geom::metric::{Metric, Open};
use crate::geom::real::fmax;
use crate::pipeline::{KnnSinks, Lists, Prepared, Tree};

/// What the kNN passes of one call share.
pub(super) struct KnnJob<'a, T: Real, const D: usize> {
    pub zs: &'a Prepared<Cpu, T, D>,
    /// Neighbours per row, and how many are selected: `kk = min(k, sources)` (rows are
    /// padded beyond it, so k beyond the sources costs no more than k = sources).
    pub k: usize,
    pub kk: usize,
    /// Source masses and scalar in z-order, when the reductions need them.
    pub masses: Option<&'a [f64]>,
    pub scalar: Option<&'a [f64]>,
    /// The caller's k-th distance guesses by query in z-order (`KnnParams::kth_hint`).
    pub kth_hint: Option<&'a [f64]>,
}

/// The node–node test (k only: the count from `Prepared::knn_node_k`).
#[derive(Clone, Copy)]
pub(super) struct KnnNodeTest {
    pub k: usize,
}

pub(super) fn node_pass<T: Real, const D: usize, M: Metric<T, D>>(
    metric: &M,
    tree: &Tree<Cpu, T, D>,
    k: usize,
    parent: usize,
    lists: &Lists<Cpu>,
) -> Lists<Cpu> {
    let t = KnnNodeTest { k };
    let plane = tree.planes[parent - 1];
    let caps = leaf_caps(metric, tree, k, parent - 1);
    walk_plane(tree, parent, lists, Scratch::<T, D>::new, |a, cands, s, out| {
        let r2 = t.select(metric, tree, a, cands, s, caps[a - plane.first]);
        out.extend(s.eval.iter().filter(|e| e.0 <= r2).map(|e| e.1));
    })
}

/// For every node of plane `p` (≥ 1): the largest k-count radius² of its leaves — a
/// leaf's own d_max² when it holds k sources, else its k-count radius² among the leaves
/// of its parent (+inf where those hold fewer than k). Every query of the node has k
/// sources within it, so it caps the node's radius: a node's own k-count radius is at least its own diagonal (its d_max
/// to itself), far beyond the k-th distances of its queries when it holds many more
/// than k points (uniform 1e6, k = 16: plane 1 kept 127 of 2048 nodes, and each leaf was
/// handed ~1000 candidate leaves). 0 for every node when k = 0.
pub(super) fn leaf_caps<T: Real, const D: usize, M: Metric<T, D>>(metric: &M, tree: &Tree<Cpu, T, D>, k: usize, p: usize) -> Vec<T> {
    use rayon::prelude::*;
    if k == 0 {
        return vec![T::ZERO; tree.planes[p].len];
    }
    let parents = tree.planes[1];
    // Per plane-1 node: the largest k-count radius² of its leaves with queries.
    let mut caps: Vec<T> = (parents.first..parents.first + parents.len)
        .into_par_iter()
        .map_init(Vec::<(T, u32)>::new, |near, pn| {
            let kids = tree.children(pn);
            let mut cap = T::ZERO;
            for a in kids.clone() {
                if tree.qry_range(a).1 == 0 {
                    continue;
                }
                let (alo, ahi) = tree.qry_box(a);
                // A leaf holding k sources: its own d_max (the siblings' count is rarely
                // smaller, and this skips their sort).
                if tree.src_count[a] as usize >= k {
                    let r = metric.box_max2(alo, ahi, &tree.src_lo[a], &tree.src_hi[a]);
                    cap = fmax(r, cap);
                    continue;
                }
                near.clear();
                near.extend(
                    kids.clone()
                        .filter(|&b| tree.src_count[b] > 0)
                        .map(|b| (metric.box_max2(alo, ahi, &tree.src_lo[b], &tree.src_hi[b]), tree.src_count[b])),
                );
                near.sort_unstable_by(|x, y| x.0.partial_cmp(&y.0).unwrap_or(std::cmp::Ordering::Equal));
                let mut sum = 0usize;
                let mut r = T::INFINITY;
                for &(d, c) in near.iter() {
                    sum += c as usize;
                    if sum >= k {
                        r = d;
                        break;
                    }
                }
                cap = fmax(r, cap);
            }
            cap
        })
        .collect();
    // Up the planes: the largest over the children with queries.
    for q in 2..=p {
        let (below, plane) = (tree.planes[q - 1], tree.planes[q]);
        caps = (plane.first..plane.first + plane.len)
            .map(|n| tree.children(n).filter(|&c| tree.qry_range(c).1 > 0).map(|c| caps[c - below.first]).fold(T::ZERO, fmax))
            .collect();
    }
    caps
}

pub(super) fn leaf_pass<T: Real, const D: usize, M: Metric<T, D>>(
    metric: &M,
    job: &KnnJob<'_, T, D>,
    lists: &Lists<Cpu>,
    sinks: &KnnSinks<'_, Cpu, T>,
) -> u64 {
    let tree = &job.zs.tree;
    let t = KnnNodeTest { k: job.zs.knn_node_k(job.k) };
    walk_leaves(tree, lists, Scratch::<T, D>::new, |a, cands: &Candidates<'_>, s| {
        let r2 = t.select(metric, tree, a, cands, s, job.own_radius(metric, a, t.k));
        job.keep_leaves(metric, a, r2, s);
        job.leaf(metric, a, r2, s, sinks);
    })
}

impl KnnNodeTest {
    /// The node–node test: returns r_A² and leaves in `s.eval` every candidate that may be
    /// kept, with its d_min². Candidate groups are visited nearest first (the receiving
    /// parent's own children first), and a whole group is skipped when its source node is
    /// already farther than the current radius: its children cannot be kept, nor can they
    /// lower the radius (their d_max is at least their d_min). So the result equals a full
    /// evaluation of every candidate. `cap`: a radius² already known to hold k sources
    /// for every query of A (+inf when none is); r_A² is at most it.
    #[inline]
    pub(super) fn select<T: Real, const D: usize, M: Metric<T, D>>(
        &self,
        metric: &M,
        tree: &Tree<Cpu, T, D>,
        a: usize,
        c: &Candidates<'_>,
        s: &mut Scratch<T, D>,
        cap: T,
    ) -> T {
        let (alo, ahi) = tree.qry_box(a);
        s.gmin.clear();
        for &b in c.sources {
            let b = b as usize;
            s.gmin.push(metric.box_min2(alo, ahi, &tree.src_lo[b], &tree.src_hi[b]));
        }
        let first = c.sources.iter().position(|&b| b == c.parent).unwrap_or_else(|| {
            let mut best = 0;
            for g in 1..s.gmin.len() {
                if s.gmin[g] < s.gmin[best] {
                    best = g;
                }
            }
            best
        });
        s.near.clear();
        s.eval.clear();
        s.eval_wrap.clear();
        let mut sum = 0u64;
        let mut r = self.eval_source(metric, tree, alo, ahi, c, first, s, &mut sum, cap);
        for g in 0..c.sources.len() {
            if g != first && s.gmin[g] <= r {
                r = self.eval_source(metric, tree, alo, ahi, c, g, s, &mut sum, cap);
            }
        }
        r
    }

    /// `eval_group` for group `g`. In a periodic box, a group whose source node needs no
    /// minimum image against A (nor then do its children, whose boxes lie inside it) takes
    /// the open space's box bounds: the same values (`Metric::no_wrap`) for fewer
    /// operations (uniform 1e6 periodic, k = 16: the node test's instructions were 2.1×
    /// the open domain's).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn eval_source<T: Real, const D: usize, M: Metric<T, D>>(
        &self,
        metric: &M,
        tree: &Tree<Cpu, T, D>,
        alo: &[T; D],
        ahi: &[T; D],
        c: &Candidates<'_>,
        g: usize,
        s: &mut Scratch<T, D>,
        sum: &mut u64,
        cap: T,
    ) -> T {
        if !M::PERIODIC {
            return self.eval_group(metric, tree, alo, ahi, c.group(g), s, sum, cap);
        }
        let b = c.sources[g] as usize;
        let open = metric.no_wrap(alo, ahi, &tree.src_lo[b], &tree.src_hi[b]);
        let r = if open {
            self.eval_group(&Open, tree, alo, ahi, c.group(g), s, sum, cap)
        } else {
            self.eval_group(metric, tree, alo, ahi, c.group(g), s, sum, cap)
        };
        s.eval_wrap.resize(s.eval.len(), !open);
        r
    }

    /// Adds one group of candidates to `s.eval` and the k-count radius; returns the radius.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn eval_group<T: Real, const D: usize, M: Metric<T, D>>(
        &self,
        metric: &M,
        tree: &Tree<Cpu, T, D>,
        alo: &[T; D],
        ahi: &[T; D],
        group: &[u32],
        s: &mut Scratch<T, D>,
        sum: &mut u64,
        cap: T,
    ) -> T {
        let k = self.k as u64;
        // A candidate whose d_max is past the cap cannot lower the radius below it, so
        // skipping its count (below) leaves the result unchanged.
        let radius = |s: &Scratch<T, D>, sum: u64| {
            let r = Self::radius(s, sum, k);
            if cap < r { cap } else { r }
        };
        // (The radius in a local, recomputed only when the set changes.)
        let mut r = radius(s, *sum);
        for &c in group {
            let cu = c as usize;
            let (blo, bhi) = (&tree.src_lo[cu], &tree.src_hi[cu]);
            let dmin = metric.box_min2(alo, ahi, blo, bhi);
            if dmin > r {
                continue;
            }
            s.eval.push((dmin, c));
            let dmax = metric.box_max2(alo, ahi, blo, bhi);
            if *sum >= k && dmax >= r {
                continue;
            }
            // Smallest set of candidates by d_max holding >= k sources.
            let cnt = tree.src_count[cu];
            let pos = s.near.partition_point(|x| x.0 <= dmax);
            s.near.insert(pos, (dmax, cnt));
            *sum += cnt as u64;
            while let Some(&(_, lc)) = s.near.last() {
                if *sum - (lc as u64) >= k {
                    *sum -= lc as u64;
                    s.near.pop();
                } else {
                    break;
                }
            }
            r = radius(s, *sum);
        }
        r
    }

    /// The k-count radius so far: the largest d_max of the smallest set holding >= k
    /// sources, 0 when k = 0 (nothing to find: only touching candidates are kept), +inf
    /// while fewer than k are held.
    #[inline(always)]
    fn radius<T: Real, const D: usize>(s: &Scratch<T, D>, sum: u64, k: u64) -> T {
        if sum >= k { s.near.last().map_or(T::ZERO, |x| x.0) } else { T::INFINITY }
    }
}

/// For each query (with its squared search radius), its sources within the radius, at
/// most `k`, by (distance², source input index): a descent from the super nodes that
/// opens every node whose box lies within the radius (box bounds never exceed a point
/// distance, so nothing within the radius is missed).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(super) fn ball_query<T: Real, const D: usize, M: Metric<T, D>>(
    metric: &M,
    zs: &Prepared<Cpu, T, D>,
    queries: &[[T; D]],
    r2: &[T],
    first: Option<&[u32]>,
    k: usize,
) -> (Vec<i64>, Vec<T>) {
    use rayon::prelude::*;
    let tree = &zs.tree;
    let top = tree.super_plane();
    let nq = r2.len();
    let mut idx = super::par::filled(nq * k, -1i64);
    let mut d2 = super::par::filled(nq * k, T::INFINITY);
    if k == 0 {
        return (idx, d2);
    }
    idx.par_chunks_mut(k).zip(d2.par_chunks_mut(k)).enumerate().for_each_init(
        || (Vec::<u32>::new(), Vec::<(T, u32)>::new()),
        |(stack, cand), (q, (ri, rd))| {
            let (p, r) = (&queries[q], r2[q]);
            stack.clear();
            cand.clear();
            stack.extend((top.first..top.first + top.len).map(|n| n as u32));
            while let Some(n) = stack.pop() {
                let n = n as usize;
                if tree.src_count[n] == 0 || metric.box_min2(p, p, &tree.src_lo[n], &tree.src_hi[n]) > r {
                    continue;
                }
                let kids = tree.children(n);
                if !kids.is_empty() {
                    stack.extend(kids.map(|c| c as u32));
                    continue;
                }
                let s0 = tree.src_start[n] as usize;
                for z in s0..s0 + tree.src_count[n] as usize {
                    let s: [T; D] = std::array::from_fn(|d| zs.src_pos[d][z]);
                    let dd = metric.dist2(p, &s);
                    if dd <= r {
                        cand.push((dd, zs.src_orig[z]));
                    }
                }
            }
            let own = first.map_or(u32::MAX, |f| f[q]);
            let by = |a: &(T, u32), b: &(T, u32)| a.0.partial_cmp(&b.0).unwrap().then((a.1 != own).cmp(&(b.1 != own))).then(a.1.cmp(&b.1));
            if cand.len() > k {
                cand.select_nth_unstable_by(k - 1, by);
                cand.truncate(k);
            }
            cand.sort_unstable_by(by);
            for (j, &(dd, o)) in cand.iter().enumerate() {
                ri[j] = o as i64;
                rd[j] = dd;
            }
        },
    );
    (idx, d2)
}
