//! kNN on a context: self-query, separate queries, owned neighbour lists.

use super::Context;
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::input::{Domain, PointSource};
use crate::knn::{KnnLists, KnnOutput, KnnParams, KnnStats, SourceFields, check_call};

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
    let nq = queries.map_or(ns, |q| q.len());
    check_call(ns, nq, params, fields, out)?;
    crate::pipeline::knn_host::run(domain, sources, queries, fields, params, &ctx.config.tree, out)
}
