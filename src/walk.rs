//! The dual tree walk (DESIGN.md §3): interaction lists moved down the planes by a
//! per-algorithm node–node test, then a leaf pass. Also the box and point distance
//! bounds, written so that rounding can only make a test more inclusive.

use rayon::prelude::*;

use crate::real::{Real, fmax, fmin};
use crate::tree::Tree;

/// Distance geometry: open space or a periodic box. All squared distances are computed in
/// the input precision `T` as `(dx*dx + dy*dy) + dz*dz` (no fused multiply-add).
///
/// Box bounds are built from the same rounded operations as point distances on the box
/// corners, and rounding is monotone, so for any query `q` in box A and source `s` in box
/// B: `box_min2(A, B) <= dist2(q, s) <= box_max2(A, B)` holds for the computed values.
pub trait Metric<T: Real, const D: usize>: Copy + Send + Sync {
    /// The per-dimension difference `a - b` (minimum image when periodic).
    fn diff(&self, a: T, b: T, d: usize) -> T;

    /// Lower and upper bound of `|q_d - s_d|` (minimum image) for `q_d` in `[alo, ahi]`,
    /// `s_d` in `[blo, bhi]`.
    fn gap_range(&self, alo: T, ahi: T, blo: T, bhi: T, d: usize) -> (T, T);

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
pub struct Open;

impl<T: Real, const D: usize> Metric<T, D> for Open {
    #[inline(always)]
    fn diff(&self, a: T, b: T, _d: usize) -> T {
        a - b
    }
    #[inline(always)]
    fn gap_range(&self, alo: T, ahi: T, blo: T, bhi: T, _d: usize) -> (T, T) {
        let lo = fmax(fmax(alo - bhi, blo - ahi), T::ZERO);
        let hi = fmax(ahi - blo, bhi - alo);
        (lo, hi)
    }
}

/// Periodic box `[0, L_d)`: the difference takes the minimum image by subtracting the
/// box length once when `|dx| > L/2`.
#[derive(Clone, Copy, Debug)]
pub struct Periodic<T, const D: usize> {
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
    #[inline(always)]
    fn diff(&self, a: T, b: T, d: usize) -> T {
        let x = a - b;
        if x > self.half[d] {
            x - self.len[d]
        } else if x < -self.half[d] {
            x + self.len[d]
        } else {
            x
        }
    }
    #[inline(always)]
    fn gap_range(&self, alo: T, ahi: T, blo: T, bhi: T, d: usize) -> (T, T) {
        let lo = fmax(fmax(alo - bhi, blo - ahi), T::ZERO);
        let hi = fmax(ahi - blo, bhi - alo);
        let l = self.len[d];
        let h = self.half[d];
        // |dx| ranges over [lo, hi]; its minimum image min(|dx|, L - |dx|) is a tent.
        let min = fmax(fmin(lo, l - hi), T::ZERO);
        let max = if hi <= h {
            hi
        } else if lo > h {
            l - lo
        } else {
            h
        };
        (min, max)
    }
}

/// Squared distances from `q` to points `s0 .. s0 + out.len()` of `pos` (one array per
/// dimension), summed as `(dx*dx + dy*dy) + dz*dz` (vectorisable loop).
#[inline(always)]
pub(crate) fn distances<T: Real, const D: usize, M: Metric<T, D>>(metric: &M, q: &[T; D], spos: &[Vec<T>; D], s0: usize, out: &mut [T]) {
    let n = out.len();
    for d in 0..D {
        let xs = &spos[d][s0..s0 + n];
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

/// Interaction lists of one plane in CSR form: receiving node `a` (local index in its
/// plane) interacts with source nodes `items[offsets[a]..offsets[a + 1]]` (global indices).
#[derive(Default, Debug)]
pub struct Lists {
    pub offsets: Vec<u32>,
    pub items: Vec<u32>,
}

impl Lists {
    pub fn of(&self, a: usize) -> &[u32] {
        &self.items[self.offsets[a] as usize..self.offsets[a + 1] as usize]
    }
}

/// The candidate sources of the children of one receiving parent: the children (with
/// sources) of each source node in the parent's list, grouped by that source.
#[derive(Clone, Copy, Debug)]
pub struct Candidates<'a> {
    /// All candidate nodes; group `g` is `nodes[offsets[g]..offsets[g + 1]]`.
    pub nodes: &'a [u32],
    pub offsets: &'a [u32],
    /// The source node whose children form group `g`.
    pub sources: &'a [u32],
    /// The receiving parent.
    pub parent: u32,
}

impl Candidates<'_> {
    pub fn group(&self, g: usize) -> &[u32] {
        &self.nodes[self.offsets[g] as usize..self.offsets[g + 1] as usize]
    }
}

/// Statistics of one walk.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct WalkStats {
    /// Interaction-list entries per plane, from the top (super) plane down to the leaves
    /// (the leaf entry counts the candidate pairs handed to the leaf pass).
    pub list_entries: Vec<u64>,
}

/// Runs the dual walk. For every plane from the super plane down, the candidates of a
/// receiving child `a` are the children (with sources) of every source in its parent's
/// list; `node_test(a, &candidates, scratch, kept)` appends the sources `a` keeps. On the
/// leaf plane `leaf(a, &candidates, scratch)` is called instead. Only nodes with queries
/// receive. Work is split over parents in contiguous chunks; scratch is per task.
pub fn dual_walk<T, const D: usize, S, FI, FT, FL>(tree: &Tree<T, D>, init: FI, node_test: FT, leaf: FL) -> WalkStats
where
    T: Real,
    S: Send,
    FI: Fn() -> S + Sync + Send,
    FT: Fn(usize, &Candidates<'_>, &mut S, &mut Vec<u32>) + Sync + Send,
    FL: Fn(usize, &Candidates<'_>, &mut S) + Sync + Send,
{
    let mut stats = WalkStats::default();
    let top = tree.super_plane();
    if top.len == 0 {
        return stats;
    }
    // Dense start: every super node with queries sees every super node with sources.
    let sources: Vec<u32> = (top.first..top.first + top.len).filter(|&b| tree.src_count[b] > 0).map(|b| b as u32).collect();
    let mut lists = Lists { offsets: Vec::with_capacity(top.len + 1), items: Vec::new() };
    lists.offsets.push(0);
    for a in top.first..top.first + top.len {
        if tree.qry_count[a] > 0 {
            lists.items.extend_from_slice(&sources);
        }
        lists.offsets.push(lists.items.len() as u32);
    }
    stats.list_entries.push(lists.items.len() as u64);
    let nplanes = tree.planes.len();
    for p in (0..nplanes - 1).rev() {
        let parent = tree.planes[p + 1];
        let child = tree.planes[p];
        let is_leaf = p == 0;
        let nchunks = (parent.len / 4).clamp(1, rayon::current_num_threads() * 64);
        let ranges = crate::par::chunk_ranges(parent.len, nchunks);
        let parts: Vec<(Vec<u32>, Vec<u32>, u64)> = ranges
            .into_par_iter()
            .map_init(&init, |scratch, r| {
                let mut counts = Vec::new();
                let mut items = Vec::new();
                let mut nodes: Vec<u32> = Vec::new();
                let mut offsets: Vec<u32> = Vec::new();
                let mut leaf_pairs = 0u64;
                for pl in r {
                    let pn = parent.first + pl;
                    let kids = tree.children(pn);
                    if kids.is_empty() {
                        continue;
                    }
                    nodes.clear();
                    offsets.clear();
                    offsets.push(0);
                    let sources = lists.of(pl);
                    for &b in sources {
                        for c in tree.children(b as usize) {
                            if tree.src_count[c] > 0 {
                                nodes.push(c as u32);
                            }
                        }
                        offsets.push(nodes.len() as u32);
                    }
                    let cands = Candidates { nodes: &nodes, offsets: &offsets, sources, parent: pn as u32 };
                    for a in kids {
                        let before = items.len();
                        if tree.qry_count[a] > 0 && !nodes.is_empty() {
                            if is_leaf {
                                leaf(a, &cands, scratch);
                                leaf_pairs += nodes.len() as u64;
                            } else {
                                node_test(a, &cands, scratch, &mut items);
                            }
                        }
                        counts.push((items.len() - before) as u32);
                    }
                }
                (counts, items, leaf_pairs)
            })
            .collect();
        if is_leaf {
            stats.list_entries.push(parts.iter().map(|x| x.2).sum());
            break;
        }
        let total: usize = parts.iter().map(|x| x.1.len()).sum();
        let mut next = Lists { offsets: Vec::with_capacity(child.len + 1), items: Vec::with_capacity(total) };
        next.offsets.push(0);
        for (counts, items, _) in parts {
            let mut off = next.items.len() as u32;
            for c in counts {
                off += c;
                next.offsets.push(off);
            }
            next.items.extend_from_slice(&items);
        }
        debug_assert_eq!(next.offsets.len(), child.len + 1);
        stats.list_entries.push(next.items.len() as u64);
        lists = next;
    }
    stats
}
