//! Friends-of-friends on the CPU (docs/DESIGN.md §5): the node–node test and the plane
//! passes; the point-pair passes are in `fof_leaf`.
//!
//! Node–node test for a pair of nodes A, B (f64 box bounds, conservative):
//! - both nodes already in one group (each internally connected, same root): drop;
//! - `d_min(A, B) > l`: drop;
//! - `d_max(A, B) <= l`: every point of A is linked to every point of B, so A ∪ B is one
//!   group: put all points of both into one group, mark both internally connected, drop;
//! - otherwise refine to the children.
//!
//! A node whose own diagonal is at most `l` is internally connected. Each unordered pair of
//! nodes is handled once (from the node with the smaller index).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use rayon::prelude::*;

use super::Cpu;
use super::walk::{Candidates, walk_leaves, walk_plane};
use crate::fof::union_find::UnionFind;
use crate::geom::Real;
use crate::geom::metric::Metric;
use crate::pipeline::{Lists, Prepared};

/// The state of one linking: the union–find over z-ordered points and, per node, whether
/// all its points are known to be in one group (or will be once the thread that set the
/// flag has finished linking them; the walk only ends after that).
pub(crate) struct Links {
    pub uf: UnionFind,
    pub flags: Vec<AtomicBool>,
}

impl Links {
    pub fn new(n: usize, nodes: usize) -> Self {
        Self { uf: UnionFind::new(n), flags: (0..nodes).into_par_iter().map(|_| AtomicBool::new(false)).collect() }
    }
}

pub(super) struct Job<'a, T: Real, const D: usize> {
    pub zs: &'a Prepared<Cpu, T, D>,
    /// l², and l² shrunk / widened by a relative 1e-12 for the conservative node tests.
    pub l2: f64,
    pub l2_lo: f64,
    pub l2_hi: f64,
    /// l widened by a relative 1e-12 (coordinate windows).
    pub l_hi: f64,
    pub box_len: Option<[f64; D]>,
    pub uf: &'a UnionFind,
    /// Per node: all its points are known to be in one group (see `Links`).
    pub flags: &'a [AtomicBool],
}

impl<'a, T: Real, const D: usize> Job<'a, T, D> {
    pub fn new(zs: &'a Prepared<Cpu, T, D>, l: f64, box_len: Option<[f64; D]>, links: &'a Links) -> Self {
        Job {
            zs,
            l2: l * l,
            l2_lo: l * l * (1.0 - 1e-12),
            l2_hi: l * l * (1.0 + 1e-12),
            l_hi: l * (1.0 + 1e-12),
            box_len,
            uf: &links.uf,
            flags: &links.flags,
        }
    }
}

/// Per-task scratch of the walk.
pub(super) struct Scratch<const D: usize> {
    /// f64 copies of the points of the probing leaf and of the target leaf.
    pub(super) xp: [Vec<f64>; D],
    pub(super) xq: [Vec<f64>; D],
    pub(super) d2: Vec<f64>,
    pub(super) hits: Vec<u32>,
    /// Probe points that may be within l of the target's box.
    pub(super) sel: Vec<u32>,
    pub(super) perm: Vec<u32>,
    /// The leaves whose points `xp` and `xq` hold (usize::MAX: none).
    pub(super) xp_node: usize,
    pub(super) xq_node: usize,
}

impl<const D: usize> Scratch<D> {
    pub(super) fn new() -> Self {
        Self {
            xp: std::array::from_fn(|_| Vec::new()),
            xq: std::array::from_fn(|_| Vec::new()),
            d2: Vec::new(),
            hits: Vec::new(),
            sel: Vec::new(),
            perm: Vec::new(),
            xp_node: usize::MAX,
            xq_node: usize::MAX,
        }
    }
}

#[inline(always)]
pub(super) fn to_f64<T: Real, const D: usize>(p: &[T; D]) -> [f64; D] {
    std::array::from_fn(|d| p[d].to_f64())
}

impl<T: Real, const D: usize> Job<'_, T, D> {
    /// Every leaf's own pairs, in parallel over leaves (small leaves are connected whole),
    /// then the upper nodes whose children are all connected and in one group. The walk
    /// then knows which nodes are internally connected.
    pub fn leaf_self_pass<M: Metric<f64, D>>(&self, metric: &M) {
        let tree = &self.zs.tree;
        let lv = tree.leaves();
        (lv.first..lv.first + lv.len).into_par_iter().with_min_len(16).for_each_init(Scratch::<D>::new, |s, a| {
            if !self.self_pair(metric, a) {
                self.leaf_self(metric, a, s);
            }
        });
        for p in 1..tree.planes.len() {
            let pl = tree.planes[p];
            (pl.first..pl.first + pl.len).into_par_iter().with_min_len(16).for_each(|n| {
                let kids = tree.children(n);
                if !kids.is_empty() && kids.clone().all(|c| self.connected(c)) {
                    let r = self.uf.find(tree.src_start[n]);
                    if kids.clone().all(|c| self.uf.find(tree.src_start[c]) == r) {
                        self.flags[n].store(true, Relaxed);
                    }
                }
            });
        }
    }

    pub fn node_pass<M: Metric<f64, D>>(&self, metric: &M, parent: usize, lists: &Lists<Cpu>) -> Lists<Cpu> {
        walk_plane(
            &self.zs.tree,
            parent,
            lists,
            || (),
            |a, cands, _s, out| {
                if self.has_self_pair(cands) && !self.self_pair(metric, a) {
                    out.push(a as u32);
                }
                let ab = self.bx(a);
                self.for_pairs(metric, a, cands, |b| {
                    if self.node_pair(metric, a, &ab, b) {
                        out.push(b as u32);
                    }
                });
            },
        )
    }

    /// The leaves' own pairs are done; only pairs with other leaves remain.
    pub fn leaf_pass<M: Metric<f64, D>>(&self, metric: &M, lists: &Lists<Cpu>) -> u64 {
        walk_leaves(&self.zs.tree, lists, Scratch::<D>::new, |a, cands, s| {
            let ab = self.bx(a);
            self.for_pairs(metric, a, cands, |b| {
                if self.node_pair(metric, a, &ab, b) {
                    self.leaf_pair(metric, a, b, s);
                }
            });
        })
    }

    /// among them, are candidates of `a`).
    #[inline(always)]
    fn has_self_pair(&self, c: &Candidates<'_>) -> bool {
        c.sources.contains(&c.parent)
    }

    /// Calls `f(b)` for every candidate `b > a` (each unordered pair once). A whole
    /// group of candidates is skipped when its source node (which holds them all) is
    /// farther than l from `a`, or in `a`'s group with both internally connected.
    #[inline(always)]
    fn for_pairs<M: Metric<f64, D>>(&self, metric: &M, a: usize, c: &Candidates<'_>, mut f: impl FnMut(usize)) {
        let (alo, ahi) = self.bx(a);
        let ca = self.connected(a);
        let fa = self.zs.tree.src_start[a];
        for g in 0..c.sources.len() {
            let grp = c.group(g);
            // Groups are ascending runs of children.
            if grp.last().is_none_or(|&b| (b as usize) <= a) {
                continue;
            }
            let src = c.sources[g] as usize;
            if src != c.parent as usize {
                let (slo, shi) = self.bx(src);
                if metric.box_min2(&alo, &ahi, &slo, &shi) > self.l2_hi {
                    continue;
                }
                if ca && self.connected(src) && self.uf.find(fa) == self.uf.find(self.zs.tree.src_start[src]) {
                    continue;
                }
            }
            let from = grp.partition_point(|&b| (b as usize) <= a);
            for &b in &grp[from..] {
                f(b as usize);
            }
        }
    }

    #[inline(always)]
    pub(super) fn bx(&self, n: usize) -> ([f64; D], [f64; D]) {
        let t = &self.zs.tree;
        (to_f64(&t.src_lo[n]), to_f64(&t.src_hi[n]))
    }

    #[inline(always)]
    pub(super) fn connected(&self, n: usize) -> bool {
        self.flags[n].load(Relaxed)
    }

    /// Pair of `a` with itself: true when it is resolved (a is internally connected).
    #[inline]
    fn self_pair<M: Metric<f64, D>>(&self, metric: &M, a: usize) -> bool {
        if self.connected(a) {
            return true;
        }
        let (lo, hi) = self.bx(a);
        if metric.box_max2(&lo, &hi, &lo, &hi) <= self.l2_lo {
            self.connect(a, self.zs.tree.src_start[a]);
            return true;
        }
        false
    }

    /// Node–node test for `a != b` (`ab`: a's box, `bx(a)`, read once per `a`): true
    /// when the pair must be refined.
    #[inline]
    fn node_pair<M: Metric<f64, D>>(&self, metric: &M, a: usize, ab: &([f64; D], [f64; D]), b: usize) -> bool {
        let (alo, ahi) = ab;
        let (blo, bhi) = self.bx(b);
        if metric.box_min2(alo, ahi, &blo, &bhi) > self.l2_hi {
            return false;
        }
        let t = &self.zs.tree;
        let (fa, fb) = (t.src_start[a], t.src_start[b]);
        let (ca, cb) = (self.connected(a), self.connected(b));
        if ca && cb && self.uf.find(fa) == self.uf.find(fb) {
            return false;
        }
        if metric.box_max2(alo, ahi, &blo, &bhi) <= self.l2_lo {
            self.connect(b, fb);
            self.connect(a, fb);
            return false;
        }
        true
    }

    /// Puts every point of `node` into the group of point `anchor` and marks the node
    /// (and its descendants) internally connected.
    pub(super) fn connect(&self, node: usize, anchor: u32) {
        let t = &self.zs.tree;
        if self.flags[node].load(Relaxed) || self.flags[node].swap(true, Relaxed) {
            self.uf.union(t.src_start[node], anchor);
            return;
        }
        let kids = t.children(node);
        if kids.is_empty() {
            let s0 = t.src_start[node];
            let mut r = self.uf.find(anchor);
            for z in s0..s0 + t.src_count[node] {
                let rz = self.uf.find(z);
                if rz != r {
                    r = self.uf.union_roots(rz, r);
                }
            }
        } else {
            for c in kids {
                self.connect(c, anchor);
            }
        }
    }

    /// Links point `i` with the points `b0 + j` for every `j` of `hits` (all within l of it).
    #[inline]
    pub(super) fn link_hits(&self, i: u32, b0: u32, hits: impl Iterator<Item = u32>) {
        let mut r = self.uf.find(i);
        for j in hits {
            let rj = self.uf.find(b0 + j);
            if rj != r {
                r = self.uf.union_roots(rj, r);
            }
        }
    }
}
