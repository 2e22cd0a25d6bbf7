//! Radius queries on a context: self-query or separate queries, per-query outputs in the
//! caller's arrays, neighbour lists owned by the result.

use super::Context;
use crate::backend::cpu::{Cpu, DisjointSlice};
use crate::error::Result;
use crate::geom::Real;
use crate::input::{Domain, PointSource};
use crate::knn::SourceFields;
use crate::pipeline::radius::{ListRequest, RadiusFields, RadiusSinks};
use crate::radius::{NeighbourLists, Radius, RadiusOutput, RadiusParams, RadiusStats, SearchRadius, check_call, list_bytes};

impl Context {
    /// The sources within the radius of every point, the point itself included
    /// (see [`crate::radius`]).
    pub fn radius_self<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &SourceFields<'_>,
        params: &RadiusParams,
        out: &mut RadiusOutput<'_>,
    ) -> Result<Radius> {
        self.pool.install(|| run::<T, D, P, P>(self, domain, points, None, fields, params, out))
    }

    /// The sources within the radius of every query.
    pub fn radius<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        sources: &S,
        queries: &Q,
        fields: &SourceFields<'_>,
        params: &RadiusParams,
        out: &mut RadiusOutput<'_>,
    ) -> Result<Radius> {
        self.pool.install(|| run(self, domain, sources, Some(queries), fields, params, out))
    }
}

fn run<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
    ctx: &Context,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &SourceFields<'_>,
    params: &RadiusParams,
    out: &mut RadiusOutput<'_>,
) -> Result<Radius> {
    let ns = sources.len();
    let nq = queries.map_or(ns, |q| q.len());
    check_call(ns, nq, params, fields, out)?;
    prefill(out);
    let (fixed, radii) = match params.radius {
        SearchRadius::Fixed(r) => (r, None),
        SearchRadius::PerQuery(v) => (0.0, Some(v)),
    };
    let max_radius = radii.map_or(fixed, |v| (0..nq).map(|i| v.get(i)).fold(0.0, f64::max));
    let req = list_request(params);
    if ns == 0 || nq == 0 {
        // Nothing to search (the points are still checked).
        crate::input::validate::check_domain::<T, D>(domain)?;
        let lists = req.map(|_| NeighbourLists { offsets: vec![0; nq + 1], indices: Vec::new(), distances: Vec::new() });
        if let Some(r) = req.filter(|r| r.max_bytes > 0 && list_bytes(nq, 0, r.distances) > r.max_bytes) {
            return Err(crate::Error::OutOfMemory { what: "the neighbour lists (over the memory limit)", bytes: list_bytes(nq, 0, r.distances) });
        }
        let stats = RadiusStats { sources: ns, queries: nq, max_radius, ..Default::default() };
        return Ok(Radius { lists, stats });
    }
    let mut counts_z = if req.is_some() { vec![0u32; nq] } else { Vec::new() };
    let sinks = RadiusSinks::<Cpu> {
        counts: out.counts.as_deref_mut().map(DisjointSlice::new),
        scalar_sum: out.scalar_sum.as_deref_mut().map(DisjointSlice::new),
        scalar_mean: out.scalar_mean.as_deref_mut().map(DisjointSlice::new),
        density: out.density.as_deref_mut().map(DisjointSlice::new),
        counts_z: req.is_some().then(|| DisjointSlice::new(&mut counts_z)),
    };
    let rf = RadiusFields::<Cpu> { masses: fields.masses, scalar: fields.scalar, radii, fixed, count_limit: params.count_limit };
    let (mut stats, lists) = crate::pipeline::radius::run(&Cpu, domain, sources, queries, &rf, &ctx.config.tree, &sinks, req)?;
    stats.max_radius = max_radius;
    Ok(Radius { lists, stats })
}

/// The values a query no leaf pass reaches keeps: count 0, sums 0, mean NaN.
pub(crate) fn prefill(out: &mut RadiusOutput<'_>) {
    for o in [out.counts.as_deref_mut()].into_iter().flatten() {
        o.fill(0);
    }
    for o in [out.scalar_sum.as_deref_mut(), out.density.as_deref_mut()].into_iter().flatten() {
        o.fill(0.0);
    }
    if let Some(o) = out.scalar_mean.as_deref_mut() {
        o.fill(f64::NAN);
    }
}

/// What the lists need, when asked for.
pub(crate) fn list_request(params: &RadiusParams<'_>) -> Option<ListRequest> {
    params.lists.map(|order| ListRequest { order, distances: params.list_distances, max_bytes: params.max_list_bytes })
}
