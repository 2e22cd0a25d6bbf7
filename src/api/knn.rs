//! kNN on a context: self-query, separate queries, owned neighbour lists.

use rayon::prelude::*;

use super::Context;
use crate::backend::cpu::{Cpu, DisjointSlice};
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::input::{Domain, PointSource};
use crate::knn::{KnnLists, KnnOutput, KnnParams, KnnStats, OutputOrder, SourceFields, check_call};
use crate::pipeline::KnnSinks;
use crate::pipeline::knn::KnnFields;

impl Context {
    /// Self-query: the k nearest points of every point (itself first, at distance 0).
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
        let params = KnnParams::new(k);
        params.validate()?;
        let nq = queries.map_or(sources.len(), |q| q.len());
        let len = nq.checked_mul(k).ok_or(Error::InvalidParameter { name: "k", why: "n_queries * k overflows".into() })?;
        let mut indices = vec![0i64; len];
        let mut distances = vec![T::ZERO; len];
        let mut out = KnnOutput { indices: Some(&mut indices), distances: Some(&mut distances), ..Default::default() };
        let fields = SourceFields::default();
        let stats = match queries {
            None => self.knn_self(domain, sources, &fields, &params, &mut out)?,
            Some(q) => self.knn(domain, sources, q, &fields, &params, &mut out)?,
        };
        Ok(KnnLists { k, indices, distances, stats })
    }
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
    params.validate()?;
    let ns = sources.len();
    if ns == 0 {
        return Err(Error::NoSources);
    }
    check_call(ns, queries.map_or(ns, |q| q.len()), params, fields, out)?;
    let (stats, zs) = {
        let t = std::time::Instant::now();
        let sinks = sinks(out);
        let outputs = t.elapsed().as_secs_f64();
        let kf = KnnFields::<Cpu> { masses: fields.masses, scalar: fields.scalar, kth_hint: params.kth_hint };
        let (mut stats, zs) = crate::pipeline::knn::run(&Cpu, domain, sources, queries, &kf, params.k, &ctx.config.tree, &sinks)?;
        // The prefault of fresh output rows is part of the call (~10% of a 1e6 k = 16 call
        // on the development VM): a stage of its own, so the stages add up to the call.
        stats.timings.stages.insert(0, ("outputs", outputs));
        (stats, zs)
    };
    // Which query each row is: the z-order's input indices, or (rows in input order) the
    // identity.
    if let Some(p) = out.permutation.as_deref_mut() {
        match out.order {
            OutputOrder::ZOrder => p.par_iter_mut().zip(zs.queries().1.par_iter()).for_each(|(p, &o)| *p = o as i64),
            OutputOrder::Input => p.par_iter_mut().enumerate().for_each(|(i, p)| *p = i as i64),
        }
    }
    Ok(stats)
}

/// The caller's output arrays as sinks of the leaf pass (the two row arrays prefaulted
/// first: the pass writes their rows in scattered order).
fn sinks<'a, T: Real>(o: &'a mut KnnOutput<'_, T>) -> KnnSinks<'a, Cpu, T> {
    if let Some(s) = o.indices.as_deref_mut() {
        crate::backend::cpu::par::prefault(s);
    }
    if let Some(s) = o.distances.as_deref_mut() {
        crate::backend::cpu::par::prefault(s);
    }
    KnnSinks {
        indices: o.indices.as_deref_mut().map(DisjointSlice::new),
        distances: o.distances.as_deref_mut().map(DisjointSlice::new),
        kth: o.kth_distance.as_deref_mut().map(DisjointSlice::new),
        density: o.density.as_deref_mut().map(DisjointSlice::new),
        scalar_mean: o.scalar_mean.as_deref_mut().map(DisjointSlice::new),
        zorder: o.order == OutputOrder::ZOrder,
        ..Default::default()
    }
}
