//! Friends-of-friends halo finding (DESIGN.md §5).
//!
//! Two particles are *linked* when their distance is at most the linking length `l`
//! (inclusive: `d² <= l²`, evaluated in f64 from the input coordinates whatever their
//! precision, with the periodic minimum image per dimension: the box length is subtracted
//! once when `|dx| > L/2`). Groups are the connected components of that graph.
//!
//! The search runs on the plane tree with the dual walk of [`crate::walk`]. Node–node test
//! for a pair of nodes A, B (f64 box bounds, conservative):
//! - both nodes already in one group (each internally connected, same root): drop;
//! - `d_min(A, B) > l`: drop;
//! - `d_max(A, B) <= l`: every point of A is linked to every point of B, so A ∪ B is one
//!   group: put all points of both into one group, mark both internally connected, drop;
//! - otherwise refine to the children.
//!
//! A node whose own diagonal is at most `l` is internally connected. Each unordered pair of
//! nodes is handled once (from the node with the smaller index). The leaf pass links point
//! pairs within `l`, skipping points already in the group of the other leaf.
//!
//! Groups are kept in a lock-free union–find over z-order indices whose roots are always
//! the smallest index of their set, so a group's final label is the z-index of its first
//! point, whatever the number of threads or the scheduling. The catalogue is then reduced
//! in z-order ([`crate::catalogue`]).

use std::sync::atomic::{AtomicBool, Ordering::Relaxed};

use rayon::prelude::*;

use crate::backend::cpu::Cpu;
use crate::catalogue::{self, Catalogue};
use crate::context::{Context, Timings};
use crate::driver::{ZSet, prepare};
use crate::error::{Error, Result, check_len};
use crate::points::{Domain, PointSource};
use crate::real::Real;
use crate::walk::{Candidates, Metric, Open, Periodic, WalkStats, distances, dual_walk};

mod params;
mod union_find;
pub use params::*;
use union_find::UnionFind;

impl Context {
    /// Friends-of-friends groups of `points`: per-particle labels (input order) and the
    /// group catalogue.
    pub fn fof<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, T, D>,
        params: &FofParams,
    ) -> Result<Fof<D>> {
        let mut labels = vec![0i64; points.len()];
        let (catalogue, stats) = self.fof_into(domain, points, fields, params, &mut labels)?;
        Ok(Fof { labels, catalogue, stats })
    }

    /// As [`Context::fof`], writing the labels into a caller-owned slice of `points.len()`
    /// entries.
    pub fn fof_into<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, T, D>,
        params: &FofParams,
        labels: &mut [i64],
    ) -> Result<(Catalogue<D>, FofStats)> {
        self.pool.install(|| run(self, domain, points, fields, params, labels))
    }
}

pub(crate) fn validate_fields<T: Real, const D: usize>(f: &FofFields<'_, T, D>, n: usize) -> Result<()> {
    if let Some(v) = f.velocities {
        check_len("velocities", v.len(), n)?;
        if let Some((i, d)) = (0..n).into_par_iter().find_map_first(|i| {
            let p = v.point(i);
            (0..D).find(|&d| !p[d].is_finite()).map(|d| (i, d))
        }) {
            return Err(Error::NonFinite { what: "velocities", index: i, dim: d, value: v.point(i)[d].to_f64() });
        }
    }
    if let Some(m) = f.masses {
        check_len("masses", m.len(), n)?;
        if let Some(i) = (0..n).into_par_iter().find_first(|&i| !m.get(i).is_finite()) {
            return Err(Error::NonFiniteValue { what: "masses", index: i, value: m.get(i) });
        }
    } else if !(f.particle_mass.is_finite() && f.particle_mass > 0.0) {
        return Err(Error::InvalidParameter { name: "particle_mass", why: format!("must be finite and > 0 (got {})", f.particle_mass) });
    }
    if let Some(ids) = f.ids {
        check_len("ids", ids.len(), n)?;
        if let Some(i) = ids.first_unrepresentable() {
            return Err(Error::InvalidParameter { name: "ids", why: format!("id {i} does not fit a signed 64-bit integer") });
        }
    }
    Ok(())
}

fn run<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    ctx: &Context,
    domain: &Domain<D>,
    points: &P,
    fields: &FofFields<'_, T, D>,
    params: &FofParams,
    labels: &mut [i64],
) -> Result<(Catalogue<D>, FofStats)> {
    domain.validate()?;
    let n = points.len();
    if params.min_members < 1 {
        return Err(Error::InvalidParameter { name: "min_members", why: "must be at least 1".into() });
    }
    let l = params.linking_length.resolve(domain, n)?;
    check_len("labels output", labels.len(), n)?;
    validate_fields(fields, n)?;
    let mut timings = Timings::default();
    if n == 0 {
        // Still validate the points' container (nothing to check) and return empty.
        let stats = FofStats { linking_length: l, timings, ..Default::default() };
        return Ok((Catalogue::empty(params.order, fields.velocities.is_some()), stats));
    }
    let (zs, roots, walk) = link(domain, points, None, l, &ctx.config.tree, &mut timings)?;
    let uf_bytes = 4 * n + zs.tree.num_nodes();
    let red = catalogue::Reduce {
        pos: &zs.src_pos,
        orig: &zs.src_orig,
        roots: &roots,
        box_len: domain.box_lengths(),
        velocities: fields.velocities,
        masses: fields.masses,
        particle_mass: fields.particle_mass,
        ids: fields.ids,
        min_members: params.min_members,
        order: params.order,
        members: params.members,
    };
    let (cat, cstats) = catalogue::reduce(&red, labels, &mut timings);
    let stats = FofStats {
        particles: n,
        linking_length: l,
        groups_total: cstats.groups_total,
        groups: cat.len(),
        particles_in_groups: cstats.particles_in_groups,
        timings,
        nodes_per_plane: zs.tree.planes.iter().map(|p| p.len).collect(),
        walk,
        scratch_bytes: zs.bytes() + uf_bytes.max(4 * n + cstats.scratch_bytes),
    };
    Ok((cat, stats))
}

/// Sorts, builds the tree and links: the root (z-index of its group's first point) of
/// every z-ordered point. `keys`: the points' Morton keys when the caller has them (the
/// points are then taken as validated).
pub(crate) fn link<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    domain: &Domain<D>,
    points: &P,
    keys: Option<Vec<u64>>,
    l: f64,
    tree_params: &crate::tree::TreeParams,
    timings: &mut Timings,
) -> Result<(ZSet<T, D>, Vec<u32>, WalkStats)> {
    let n = points.len();
    let zs = match keys {
        Some(k) if n <= crate::driver::MAX_POINTS => crate::driver::finish(&Cpu, points, None::<&P>, k, tree_params, timings)?,
        _ => prepare(&Cpu, domain, points, None::<&P>, tree_params, timings)?,
    };
    let uf = timings.time("init", || UnionFind::new(n));
    let flags: Vec<AtomicBool> = (0..zs.tree.num_nodes()).map(|_| AtomicBool::new(false)).collect();
    let job = Job { zs: &zs, l2: l * l, l2_lo: l * l * (1.0 - 1e-12), l2_hi: l * l * (1.0 + 1e-12), l_hi: l * (1.0 + 1e-12), box_len: domain.box_lengths(), uf: &uf, flags: &flags };
    let walk = match domain {
        Domain::Open => job.walk(Open, timings),
        Domain::Periodic(len) => job.walk(Periodic::<f64, D>::new(len), timings),
    };
    drop(flags);
    let roots = timings.time("contract", || uf.contract());
    Ok((zs, roots, walk))
}

struct Job<'a, T: Real, const D: usize> {
    zs: &'a ZSet<T, D>,
    /// l², and l² shrunk / widened by a relative 1e-12 for the conservative node tests.
    l2: f64,
    l2_lo: f64,
    l2_hi: f64,
    /// l widened by a relative 1e-12 (coordinate windows).
    l_hi: f64,
    box_len: Option<[f64; D]>,
    uf: &'a UnionFind,
    /// Per node: all its points are known to be in one group (or will be once the thread
    /// that set the flag has finished linking them; the walk only ends after that).
    flags: &'a [AtomicBool],
}

/// Per-task scratch of the walk.
struct Scratch<const D: usize> {
    /// f64 copies of the points of the probing leaf and of the target leaf.
    xp: [Vec<f64>; D],
    xq: [Vec<f64>; D],
    d2: Vec<f64>,
    hits: Vec<u32>,
    /// Probe points that may be within l of the target's box.
    sel: Vec<u32>,
    perm: Vec<u32>,
    /// The leaves whose points `xp` and `xq` hold (usize::MAX: none).
    xp_node: usize,
    xq_node: usize,
}

impl<const D: usize> Scratch<D> {
    fn new() -> Self {
        Self { xp: std::array::from_fn(|_| Vec::new()), xq: std::array::from_fn(|_| Vec::new()), d2: Vec::new(), hits: Vec::new(), sel: Vec::new(), perm: Vec::new(), xp_node: usize::MAX, xq_node: usize::MAX }
    }
}

#[inline(always)]
fn to_f64<T: Real, const D: usize>(p: &[T; D]) -> [f64; D] {
    std::array::from_fn(|d| p[d].to_f64())
}

impl<T: Real, const D: usize> Job<'_, T, D> {
    fn walk<M: Metric<f64, D>>(&self, metric: M, timings: &mut Timings) -> WalkStats {
        let tree = &self.zs.tree;
        // First every leaf's own pairs, in parallel over leaves (small leaves are
        // connected whole), then mark upper nodes whose children are all connected and in
        // one group. The walk then knows which nodes are internally connected.
        timings.time("leaf self", || {
            let lv = tree.leaves();
            (lv.first..lv.first + lv.len).into_par_iter().with_min_len(16).for_each_init(Scratch::<D>::new, |s, a| {
                if !self.self_pair(&metric, a) {
                    self.leaf_self(&metric, a, s);
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
        });
        timings.time("walk", || {
            dual_walk(
                tree,
                Scratch::<D>::new,
                |a, cands, _s, out| {
                    if self.has_self_pair(cands) && !self.self_pair(&metric, a) {
                        out.push(a as u32);
                    }
                    self.for_pairs(&metric, a, cands, |b| {
                        if self.node_pair(&metric, a, b) {
                            out.push(b as u32);
                        }
                    });
                },
                |a, cands, s| {
                    // The leaf's own pairs are done; only pairs with other leaves remain.
                    self.for_pairs(&metric, a, cands, |b| {
                        if self.node_pair(&metric, a, b) {
                            self.leaf_pair(&metric, a, b, s);
                        }
                    });
                },
            )
        })
    }

    /// Whether the receiving parent kept its pair with itself (then its children, `a`
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
    fn bx(&self, n: usize) -> ([f64; D], [f64; D]) {
        let t = &self.zs.tree;
        (to_f64(&t.src_lo[n]), to_f64(&t.src_hi[n]))
    }

    #[inline(always)]
    fn connected(&self, n: usize) -> bool {
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

    /// Node–node test for `a != b`: true when the pair must be refined.
    #[inline]
    fn node_pair<M: Metric<f64, D>>(&self, metric: &M, a: usize, b: usize) -> bool {
        let (alo, ahi) = self.bx(a);
        let (blo, bhi) = self.bx(b);
        if metric.box_min2(&alo, &ahi, &blo, &bhi) > self.l2_hi {
            return false;
        }
        let t = &self.zs.tree;
        let (fa, fb) = (t.src_start[a], t.src_start[b]);
        let (ca, cb) = (self.connected(a), self.connected(b));
        if ca && cb && self.uf.find(fa) == self.uf.find(fb) {
            return false;
        }
        if metric.box_max2(&alo, &ahi, &blo, &bhi) <= self.l2_lo {
            self.connect(b, fb);
            self.connect(a, fb);
            return false;
        }
        true
    }

    /// Puts every point of `node` into the group of point `anchor` and marks the node
    /// (and its descendants) internally connected.
    fn connect(&self, node: usize, anchor: u32) {
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

    /// Links point `i` with the points `b0 + hits[..]` (all within l of it).
    #[inline]
    fn link_hits(&self, i: u32, b0: u32, hits: &[u32]) {
        let mut r = self.uf.find(i);
        for &j in hits {
            let rj = self.uf.find(b0 + j);
            if rj != r {
                r = self.uf.union_roots(rj, r);
            }
        }
    }

    /// Squared distances (f64, minimum image) from `p` to the points in `xs` (f64
    /// copies, one array per dimension), summed as `(dx² + dy²) + dz²`; returns how many
    /// are within l, their offsets in `hits`.
    #[inline(always)]
    fn within<M: Metric<f64, D>>(&self, metric: &M, p: &[f64; D], xs: &[Vec<f64>; D], from: usize, d2: &mut [f64], hits: &mut [u32]) -> usize {
        distances(metric, p, xs, from, d2);
        let l2 = self.l2;
        let mut w = 0;
        for (j, &v) in d2.iter().enumerate() {
            hits[w] = j as u32;
            w += usize::from(v <= l2);
        }
        w
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
        for d in 0..D {
            x[d].clear();
            x[d].extend(self.zs.src_pos[d][n0..n0 + nn].iter().map(|v| v.to_f64()));
        }
        (n0, nn)
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
    fn leaf_self<M: Metric<f64, D>>(&self, metric: &M, a: usize, s: &mut Scratch<D>) {
        s.xq_node = usize::MAX;
        let (a0, an) = self.load(a, &mut s.xp, &mut s.xp_node);
        Self::size(s, an);
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
        let no_wrap = self.box_len.is_none_or(|l| hi[dim] - lo[dim] <= 0.5 * l[dim]);
        for k in 0..an {
            s.perm[k] = k as u32;
        }
        if no_wrap {
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
            if no_wrap {
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
                self.within(metric, &p, &s.xq, k + 1, &mut s.d2[..m], &mut s.hits[..m])
            };
            if w > 0 {
                let mut r = self.uf.find(a0 as u32 + s.perm[k]);
                for &h in &s.hits[..w] {
                    let rj = self.uf.find(a0 as u32 + s.perm[k + 1 + h as usize]);
                    if rj != r {
                        r = self.uf.union_roots(rj, r);
                    }
                }
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

    /// Point pairs between leaves `a` and `b` (a pair the node test could not resolve).
    /// The points of one leaf ("probe") are tested against the other ("target"), after a
    /// vectorised point–box filter. When the target is internally connected one link per
    /// probe point is enough, and none for probe points already in its group; when both
    /// are, one link in all.
    fn leaf_pair<M: Metric<f64, D>>(&self, metric: &M, a: usize, b: usize, s: &mut Scratch<D>) {
        let (ca, cb) = (self.connected(a), self.connected(b));
        let (p, q) = if ca && !cb { (b, a) } else { (a, b) };
        let q_conn = ca || cb;
        let both = ca && cb;
        let (p0, pn) = self.load(p, &mut s.xp, &mut s.xp_node);
        let (q0, qn) = self.load(q, &mut s.xq, &mut s.xq_node);
        Self::size(s, pn.max(qn));
        let (qlo, qhi) = self.bx(q);
        // Point–box lower bounds of the probe points, then the ones within l.
        let d2 = &mut s.d2[..pn];
        for d in 0..D {
            let (lo, hi) = (qlo[d], qhi[d]);
            for (o, &x) in d2.iter_mut().zip(&s.xp[d][..pn]) {
                let g = metric.gap_range(x, x, lo, hi, d).0;
                *o = if d == 0 { g * g } else { *o + g * g };
            }
        }
        let mut nsel = 0;
        for (k, &v) in d2.iter().enumerate() {
            s.sel[nsel] = k as u32;
            nsel += usize::from(v <= self.l2_hi);
        }
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
            let w = self.within(metric, &pt, &s.xq, 0, &mut s.d2[..qn], &mut s.hits[..qn]);
            if w > 0 {
                if q_conn {
                    self.uf.union(i, q0u);
                    if both {
                        return;
                    }
                } else {
                    self.link_hits(i, q0u, &s.hits[..w]);
                }
            }
        }
    }
}
