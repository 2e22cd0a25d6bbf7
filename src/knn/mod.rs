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
use crate::error::{Error, Result, check_len};
use crate::par::SharedMut;
use crate::points::{Domain, PointSource};
use crate::real::Real;
use crate::tree::Tree;
use crate::walk::{Candidates, Metric, Open, Periodic, WalkStats, dual_walk};

mod leaf;
use leaf::Scratch;

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

/// Checks `k`, every requested output's length for `nq` queries, and the per-source fields
/// of `ns` sources (finite values). Shared by the serial and the distributed calls.
pub(crate) fn check_call<T>(ns: usize, nq: usize, k: usize, fields: &SourceFields<'_>, out: &KnnOutput<'_, T>) -> Result<()> {
    if k == 0 {
        return Err(Error::InvalidK(0));
    }
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
    Ok(())
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
    check_call(ns, queries.map_or(ns, |q| q.len()), k, fields, out)?;
    let sinks = Sinks::new(out);
    let mut stats = run_sinks(domain, sources, queries, fields, k, &ctx.config.tree, &sinks)?;
    if out.order == OutputOrder::ZOrder
        && let Some(p) = out.permutation.as_deref_mut()
    {
        let orig = std::mem::take(&mut stats.1);
        p.par_iter_mut().zip(orig.par_iter()).for_each(|(p, &o)| *p = o as i64);
    }
    Ok(stats.0)
}

/// The kNN pipeline behind every entry point (checked inputs, outputs behind `sinks`);
/// also returns the queries' input indices in z-order when the sinks are in z-order.
pub(crate) fn run_sinks<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &SourceFields<'_>,
    k: usize,
    tree_params: &crate::tree::TreeParams,
    sinks: &Sinks<T>,
) -> Result<(KnnStats, Vec<u32>)> {
    let ns = sources.len();
    let nq = queries.map_or(ns, |q| q.len());
    let mut timings = Timings::default();
    let zs = prepare(&Cpu, domain, sources, queries, tree_params, &mut timings)?;
    let gather_field = |f: Option<&dyn ScalarField>| f.map(|f| zs.src_orig.par_iter().map(|&i| f.get(i as usize)).collect::<Vec<f64>>());
    let (masses, scalar) = timings.time("fields", || (gather_field(fields.masses), gather_field(fields.scalar)));
    let job = Job { zs: &zs, k, masses: masses.as_deref(), scalar: scalar.as_deref() };
    let walk = timings.time("walk", || match domain {
        Domain::Open => job.walk(Open, sinks),
        Domain::Periodic(l) => job.walk(Periodic::<T, D>::new(l), sinks),
    });
    let perm = if sinks.zorder { zs.queries().1.to_vec() } else { Vec::new() };
    let scratch_bytes = zs.bytes() + 8 * (masses.as_ref().map_or(0, |m| m.len()) + scalar.as_ref().map_or(0, |m| m.len()));
    let stats = KnnStats {
        sources: ns,
        queries: nq,
        padded_queries: if ns < k { nq } else { 0 },
        timings,
        nodes_per_plane: zs.tree.planes.iter().map(|p| p.len).collect(),
        walk,
        scratch_bytes,
    };
    Ok((stats, perm))
}

/// Output pointers shared by the leaf tasks (each query row written by one task).
#[derive(Default)]
pub(crate) struct Sinks<T> {
    pub indices: Option<SharedMut<i64>>,
    pub distances: Option<SharedMut<T>>,
    /// Squared distances (the exact values neighbours are ranked by); +inf pads.
    pub d2: Option<SharedMut<T>>,
    pub kth: Option<SharedMut<T>>,
    /// Squared distance to the k-th neighbour (+inf when fewer than k).
    pub kth_d2: Option<SharedMut<T>>,
    pub density: Option<SharedMut<f64>>,
    pub scalar_mean: Option<SharedMut<f64>>,
    pub zorder: bool,
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
            ..Default::default()
        }
    }
}

struct Job<'a, T: Real, const D: usize> {
    zs: &'a ZSet<T, D>,
    k: usize,
    masses: Option<&'a [f64]>,
    scalar: Option<&'a [f64]>,
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

}

