//! Exact k-nearest neighbours (DESIGN.md §4).
//!
//! Node–node test for a receiving node A: `r_A` is the smallest radius such that the
//! candidate sources B with `d_max(A, B) <= r_A` hold at least k points; A keeps the
//! candidates with `d_min(A, B) <= r_A`. Leaf pass: each query walks its leaf's kept
//! sources in increasing `d_min`, keeping the k best in a sorted buffer, ties broken by
//! the smaller source input index.

use rayon::prelude::*;

use crate::backend::cpu::Cpu;
use crate::context::{Context, Timings};
use crate::driver::{ZSet, prepare};
use crate::error::{Error, Result};
use crate::par::SharedMut;
use crate::points::{Domain, PointSource};
use crate::real::Real;
use crate::tree::Tree;
use crate::walk::{Candidates, Metric, Open, Periodic, WalkStats, dual_walk};

/// A per-source scalar field, read at ingest (f32 or f64 slices, or your own accessor).
pub trait ScalarField: Sync {
    fn len(&self) -> usize;
    fn get(&self, i: usize) -> f64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

impl ScalarField for [f64] {
    fn len(&self) -> usize {
        <[f64]>::len(self)
    }
    fn get(&self, i: usize) -> f64 {
        self[i]
    }
}

macro_rules! impl_field_via_slice {
    ($($t:ty),*) => {$(
        impl ScalarField for $t {
            fn len(&self) -> usize {
                <[_]>::len(self)
            }
            fn get(&self, i: usize) -> f64 {
                self[i] as f64
            }
        }
    )*};
}
impl_field_via_slice!(Vec<f64>, Vec<f32>, &[f64], &[f32]);

impl ScalarField for [f32] {
    fn len(&self) -> usize {
        <[f32]>::len(self)
    }
    fn get(&self, i: usize) -> f64 {
        self[i] as f64
    }
}

/// Per-source fields used by the reductions.
#[derive(Clone, Copy, Default)]
pub struct SourceFields<'a> {
    /// Particle masses: the density becomes (sum of neighbour masses) / (volume of the k-ball).
    pub masses: Option<&'a dyn ScalarField>,
    /// A scalar whose mean over the k neighbours is wanted.
    pub scalar: Option<&'a dyn ScalarField>,
}

/// Where rows of per-query outputs go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputOrder {
    /// Row `i` belongs to query `i` of the caller's input.
    #[default]
    Input,
    /// Rows in z-order; `KnnOutput::permutation` says which input query each row is.
    ZOrder,
}

/// Caller-owned output arrays; leave a field `None` if it is not wanted. Lists have
/// `n_queries * k` entries (row-major), summaries `n_queries`.
#[derive(Default)]
pub struct KnnOutput<'a, T> {
    /// Input index of each neighbour (nearest first); -1 pads rows with fewer than k sources.
    pub indices: Option<&'a mut [i64]>,
    /// Distances, ascending; +inf pads.
    pub distances: Option<&'a mut [T]>,
    /// Distance to the k-th neighbour (+inf when fewer than k sources).
    pub kth_distance: Option<&'a mut [T]>,
    /// k / volume of the k-ball, or the neighbours' mass over it when masses are given.
    pub density: Option<&'a mut [f64]>,
    /// Mean of `SourceFields::scalar` over the neighbours.
    pub scalar_mean: Option<&'a mut [f64]>,
    pub order: OutputOrder,
    /// With `OutputOrder::ZOrder`: the input index of the query in each row.
    pub permutation: Option<&'a mut [i64]>,
}

/// Parameters of a kNN call.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KnnParams {
    /// Neighbours per query, at least 1. Larger than the number of sources is allowed:
    /// rows are padded and `KnnStats::padded_queries` says how many.
    pub k: usize,
}

/// What a kNN call did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KnnStats {
    pub sources: usize,
    pub queries: usize,
    /// Queries with fewer than k neighbours (all of them when there are fewer than k sources).
    pub padded_queries: usize,
    pub timings: Timings,
    /// Nodes per plane, leaves first, super nodes last.
    pub nodes_per_plane: Vec<usize>,
    pub walk: WalkStats,
    /// Bytes of ztree's own buffers for this call (z-ordered points, tree, fields).
    pub scratch_bytes: usize,
}

/// Owned result of [`Context::knn_lists`].
#[derive(Clone, Debug, PartialEq)]
pub struct KnnLists<T> {
    pub k: usize,
    pub indices: Vec<i64>,
    pub distances: Vec<T>,
    pub stats: KnnStats,
}

impl Context {
    /// Self-query: the k nearest points of every point (itself included, distance 0).
    pub fn knn_self<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &SourceFields<'_>,
        params: &KnnParams,
        out: &mut KnnOutput<'_, T>,
    ) -> Result<KnnStats> {
        self.pool.install(|| run::<T, D, P, P>(self, domain, points, None, fields, params, out))
    }

    /// The k nearest sources of every query.
    pub fn knn<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        sources: &S,
        queries: &Q,
        fields: &SourceFields<'_>,
        params: &KnnParams,
        out: &mut KnnOutput<'_, T>,
    ) -> Result<KnnStats> {
        self.pool.install(|| run(self, domain, sources, Some(queries), fields, params, out))
    }

    /// Convenience: full neighbour lists in input order (`queries = None`: self-query).
    pub fn knn_lists<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        sources: &P,
        queries: Option<&P>,
        k: usize,
    ) -> Result<KnnLists<T>> {
        let nq = queries.map_or(sources.len(), |q| q.len());
        let len = nq.checked_mul(k).ok_or(Error::InvalidParameter { name: "k", why: "n_queries * k overflows".into() })?;
        if k == 0 {
            return Err(Error::InvalidK(0));
        }
        let mut indices = vec![0i64; len];
        let mut distances = vec![T::ZERO; len];
        let mut out = KnnOutput { indices: Some(&mut indices), distances: Some(&mut distances), ..Default::default() };
        let params = KnnParams { k };
        let fields = SourceFields::default();
        let stats = match queries {
            None => self.knn_self(domain, sources, &fields, &params, &mut out)?,
            Some(q) => self.knn(domain, sources, q, &fields, &params, &mut out)?,
        };
        Ok(KnnLists { k, indices, distances, stats })
    }
}

fn check_len(what: &'static str, got: usize, expected: usize) -> Result<()> {
    if got != expected { Err(Error::LengthMismatch { what, got, expected }) } else { Ok(()) }
}

fn run<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
    ctx: &Context,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &SourceFields<'_>,
    params: &KnnParams,
    out: &mut KnnOutput<'_, T>,
) -> Result<KnnStats> {
    let k = params.k;
    if k == 0 {
        return Err(Error::InvalidK(0));
    }
    let ns = sources.len();
    if ns == 0 {
        return Err(Error::NoSources);
    }
    let nq = queries.map_or(ns, |q| q.len());
    let rows = nq.checked_mul(k).ok_or(Error::InvalidParameter { name: "k", why: "n_queries * k overflows".into() })?;
    if let Some(o) = &out.indices {
        check_len("indices output", o.len(), rows)?;
    }
    if let Some(o) = &out.distances {
        check_len("distances output", o.len(), rows)?;
    }
    if let Some(o) = &out.kth_distance {
        check_len("kth_distance output", o.len(), nq)?;
    }
    if let Some(o) = &out.density {
        check_len("density output", o.len(), nq)?;
    }
    if let Some(o) = &out.scalar_mean {
        check_len("scalar_mean output", o.len(), nq)?;
        if fields.scalar.is_none() {
            return Err(Error::InvalidParameter { name: "scalar_mean", why: "requested without a source scalar field".into() });
        }
    }
    if let Some(o) = &out.permutation {
        check_len("permutation output", o.len(), nq)?;
    }
    for (what, f) in [("masses", fields.masses), ("scalar field", fields.scalar)] {
        if let Some(f) = f {
            check_len(what, f.len(), ns)?;
            if let Some(i) = (0..ns).into_par_iter().find_first(|&i| !f.get(i).is_finite()) {
                return Err(Error::NonFiniteValue { what, index: i, value: f.get(i) });
            }
        }
    }
    let mut timings = Timings::default();
    let zs = prepare(&Cpu, domain, sources, queries, &ctx.config.tree, &mut timings)?;
    let gather_field = |f: Option<&dyn ScalarField>| f.map(|f| zs.src_orig.par_iter().map(|&i| f.get(i as usize)).collect::<Vec<f64>>());
    let (masses, scalar) = timings.time("fields", || (gather_field(fields.masses), gather_field(fields.scalar)));
    let job = Job { zs: &zs, k, masses: masses.as_deref(), scalar: scalar.as_deref() };
    let sinks = Sinks::new(out);
    let walk = timings.time("walk", || match domain {
        Domain::Open => job.walk(Open, &sinks),
        Domain::Periodic(l) => job.walk(Periodic::<T, D>::new(l), &sinks),
    });
    if out.order == OutputOrder::ZOrder
        && let Some(p) = out.permutation.as_deref_mut()
    {
        let (_, orig) = zs.queries();
        p.par_iter_mut().zip(orig.par_iter()).for_each(|(p, &o)| *p = o as i64);
    }
    let scratch_bytes = zs.bytes() + 8 * (masses.as_ref().map_or(0, |m| m.len()) + scalar.as_ref().map_or(0, |m| m.len()));
    Ok(KnnStats {
        sources: ns,
        queries: nq,
        padded_queries: if ns < k { nq } else { 0 },
        timings,
        nodes_per_plane: zs.tree.planes.iter().map(|p| p.len).collect(),
        walk,
        scratch_bytes,
    })
}

/// The first threshold of a query expects this many times k sources (see `estimate_r2`).
const ESTIMATE_FACTOR: f64 = 3.0;

/// Output pointers shared by the leaf tasks (each query row written by one task).
struct Sinks<T> {
    indices: Option<SharedMut<i64>>,
    distances: Option<SharedMut<T>>,
    kth: Option<SharedMut<T>>,
    density: Option<SharedMut<f64>>,
    scalar_mean: Option<SharedMut<f64>>,
    zorder: bool,
}

impl<T: Real> Sinks<T> {
    fn new(o: &mut KnnOutput<'_, T>) -> Self {
        Self {
            indices: o.indices.as_deref_mut().map(SharedMut::new),
            distances: o.distances.as_deref_mut().map(SharedMut::new),
            kth: o.kth_distance.as_deref_mut().map(SharedMut::new),
            density: o.density.as_deref_mut().map(SharedMut::new),
            scalar_mean: o.scalar_mean.as_deref_mut().map(SharedMut::new),
            zorder: o.order == OutputOrder::ZOrder,
        }
    }
}

struct Job<'a, T: Real, const D: usize> {
    zs: &'a ZSet<T, D>,
    k: usize,
    masses: Option<&'a [f64]>,
    scalar: Option<&'a [f64]>,
}

/// Per-task scratch of the walk.
struct Scratch<T, const D: usize> {
    /// d_min² from the receiving node to each candidate group's source node.
    gmin: Vec<T>,
    /// Evaluated candidates that may be kept: (d_min², node).
    eval: Vec<(T, u32)>,
    /// Smallest-d_max candidates holding >= k sources: (d_max², count), ascending.
    near: Vec<(T, u32)>,
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
    fn new() -> Self {
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

/// A neighbour candidate as one integer whose order is (distance², input index):
/// distance² bits (non-negative floats order like their bits), input index, z-index.
#[inline(always)]
fn cand_key<T: Real>(d2: T, orig: u32, z: u32) -> u128 {
    (d2.key_bits() as u128) << 64 | (orig as u128) << 32 | z as u128
}

#[inline(always)]
fn cand_d2<T: Real>(key: u128) -> T {
    T::from_key_bits((key >> 64) as u64)
}

impl<'a, T: Real, const D: usize> Job<'a, T, D> {
    fn walk<M: Metric<T, D>>(&self, metric: M, sinks: &Sinks<T>) -> WalkStats {
        let tree = &self.zs.tree;
        dual_walk(
            tree,
            || Scratch::<T, D>::new(),
            |a, cands, s, out| {
                let r2 = self.select(&metric, tree, a, cands, s);
                out.extend(s.eval.iter().filter(|e| e.0 <= r2).map(|e| e.1));
            },
            |a, cands, s| {
                let r2 = self.select(&metric, tree, a, cands, s);
                let est = self.estimate_r2(tree, a, r2);
                self.keep_leaves(tree, r2, est, s);
                self.leaf(&metric, a, r2, est, s, sinks);
            },
        )
    }

    /// The node–node test: returns r_A² and leaves in `s.eval` every candidate that may be
    /// kept, with its d_min². Candidate groups are visited nearest first (the receiving
    /// parent's own children first), and a whole group is skipped when its source node is
    /// already farther than the current radius: its children cannot be kept, nor can they
    /// lower the radius (their d_max is at least their d_min). So the result equals a full
    /// evaluation of every candidate.
    #[inline]
    fn select<M: Metric<T, D>>(&self, metric: &M, tree: &Tree<T, D>, a: usize, c: &Candidates<'_>, s: &mut Scratch<T, D>) -> T {
        let (alo, ahi) = (&tree.qry_lo[a], &tree.qry_hi[a]);
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
        let mut sum = 0u64;
        let mut r = self.eval_group(metric, tree, alo, ahi, c.group(first), s, &mut sum);
        for g in 0..c.sources.len() {
            if g != first && s.gmin[g] <= r {
                r = self.eval_group(metric, tree, alo, ahi, c.group(g), s, &mut sum);
            }
        }
        r
    }

    /// Adds one group of candidates to `s.eval` and the k-count radius; returns the radius.
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn eval_group<M: Metric<T, D>>(&self, metric: &M, tree: &Tree<T, D>, alo: &[T; D], ahi: &[T; D], group: &[u32], s: &mut Scratch<T, D>, sum: &mut u64) -> T {
        let k = self.k as u64;
        for &c in group {
            let cu = c as usize;
            let (blo, bhi) = (&tree.src_lo[cu], &tree.src_hi[cu]);
            let dmin = metric.box_min2(alo, ahi, blo, bhi);
            let radius = if *sum >= k { s.near.last().unwrap().0 } else { T::INFINITY };
            if dmin > radius {
                continue;
            }
            s.eval.push((dmin, c));
            let dmax = metric.box_max2(alo, ahi, blo, bhi);
            if *sum >= k && dmax >= radius {
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
        }
        if *sum >= k { s.near.last().unwrap().0 } else { T::INFINITY }
    }

    /// Gathers the boxes and source ranges of the candidate leaves with d_min² <= r2.
    /// Those within the first threshold `est` come first (`s.knear` of them): most
    /// queries never look further.
    fn keep_leaves(&self, tree: &Tree<T, D>, r2: T, est: T, s: &mut Scratch<T, D>) {
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
    fn estimate_r2(&self, tree: &Tree<T, D>, a: usize, r2: T) -> T {
        let cnt = tree.src_count[a] as f64;
        if cnt < 2.0 {
            return r2;
        }
        let (lo, hi) = (&tree.src_lo[a], &tree.src_hi[a]);
        let vol: f64 = (0..D).map(|d| (hi[d] - lo[d]).to_f64()).product();
        let unit_ball = if D == 2 { std::f64::consts::PI } else { 4.0 / 3.0 * std::f64::consts::PI };
        // Radius holding about ESTIMATE_FACTOR * k sources at the leaf's density.
        let r = (ESTIMATE_FACTOR * self.k as f64 * vol / (cnt * unit_ball)).powf(1.0 / D as f64);
        let e = T::from_f64(r * r);
        if e.is_finite() && e > T::ZERO && e < r2 { e } else { r2 }
    }

    /// The leaf pass for the queries of leaf `a` over the kept leaves in `s`.
    #[allow(clippy::too_many_arguments)]
    fn leaf<M: Metric<T, D>>(&self, metric: &M, a: usize, r2: T, est: T, s: &mut Scratch<T, D>, sinks: &Sinks<T>) {
        let zs = self.zs;
        let tree = &zs.tree;
        let (qpos, qorig) = zs.queries();
        let k = self.k;
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
            self.gather_candidates(metric, &qp, thr, knear, s);
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
                self.gather_candidates(metric, &qp, thr, nk, s);
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
    /// Only the first `nk` kept leaves are visited.
    fn gather_candidates<M: Metric<T, D>>(&self, metric: &M, qp: &[T; D], thr: T, nk: usize, s: &mut Scratch<T, D>) {
        let k = self.k;
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
                *slot = cand_key(d2s[jj as usize], sorig[z], z as u32);
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
    fn emit(&self, q: usize, orig: usize, m: usize, s: &Scratch<T, D>, sinks: &Sinks<T>) {
        let k = self.k;
        let row = if sinks.zorder { q } else { orig };
        // SAFETY (all writes): row `row` belongs to this query alone; lengths were checked.
        unsafe {
            if let Some(p) = sinks.indices {
                let out = p.slice_mut(row * k, k);
                for j in 0..k {
                    out[j] = if j < m { (s.cand[j] >> 32) as u32 as i64 } else { -1 };
                }
            }
            if let Some(p) = sinks.distances {
                let out = p.slice_mut(row * k, k);
                for j in 0..k {
                    out[j] = if j < m { cand_d2::<T>(s.cand[j]).sqrt() } else { T::INFINITY };
                }
            }
            let kth = if m == k { cand_d2::<T>(s.cand[k - 1]).sqrt() } else { T::INFINITY };
            if let Some(p) = sinks.kth {
                p.write(row, kth);
            }
            if let Some(p) = sinks.density {
                let mass = match self.masses {
                    Some(ms) => s.cand[..m].iter().map(|&c| ms[c as u32 as usize]).sum::<f64>(),
                    None => m as f64,
                };
                let r = kth.to_f64();
                let vol = if D == 2 { std::f64::consts::PI * r * r } else { 4.0 / 3.0 * std::f64::consts::PI * r * r * r };
                p.write(row, if m < k { 0.0 } else { mass / vol });
            }
            if let (Some(p), Some(sc)) = (sinks.scalar_mean, self.scalar) {
                let sum: f64 = s.cand[..m].iter().map(|&c| sc[c as u32 as usize]).sum();
                p.write(row, sum / m as f64);
            }
        }
    }
}

/// Squared distances from `q` to sources `s0 .. s0 + out.len()` (vectorisable loop).
#[inline(always)]
fn distances<T: Real, const D: usize, M: Metric<T, D>>(metric: &M, q: &[T; D], spos: &[Vec<T>; D], s0: usize, out: &mut [T]) {
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
