//! Radius queries between subsets of the caller's particles (type masks in the C API):
//! the job runs on views of the selected sources and queries, then its per-query outputs
//! go to the selected queries' rows and its list entries become the caller's indices.
//! A query left out keeps a row that is not computed: count -1, sums, means and density
//! NaN, an empty list.

use rayon::prelude::*;

use super::Context;
use super::subset::{KnnSubset, Runner, check_subset};
use crate::error::Result;
use crate::geom::Real;
use crate::input::subset::Subset;
use crate::input::{Domain, PointSource, ScalarField};
use crate::knn::SourceFields;
use crate::radius::{NeighbourLists, Radius, RadiusOutput, RadiusParams, SearchRadius, check_call};

impl Context {
    /// Radius queries between subsets (see [`crate::radius`]): the sources at
    /// `sources.sel`, the queries at `queries.sel` (`queries` None: of the sources'
    /// points, a self-query when the selections are equal). Outputs per caller query in
    /// input order; a query left out gets count -1, NaN sums, means and density and an
    /// empty list. List entries are the sources' input indices; `fields` are per source
    /// of the caller, per-query radii per query of the caller (all of them).
    pub fn radius_subset<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        sources: KnnSubset<'_, S>,
        queries: Option<KnnSubset<'_, Q>>,
        fields: &SourceFields<'_>,
        params: &RadiusParams<'_>,
        out: &mut RadiusOutput<'_>,
    ) -> Result<Radius> {
        radius_subset(Runner::Serial(self), domain, sources, queries, fields, params, out)
    }
}

/// The subset call on either runner.
pub(crate) fn radius_subset<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
    runner: Runner<'_>,
    domain: &Domain<D>,
    sources: KnnSubset<'_, S>,
    queries: Option<KnnSubset<'_, Q>>,
    fields: &SourceFields<'_>,
    params: &RadiusParams<'_>,
    out: &mut RadiusOutput<'_>,
) -> Result<Radius> {
    let ns = sources.points.len();
    let nq = queries.as_ref().map_or(ns, |q| q.points.len());
    let qsel = queries.as_ref().map_or(sources.sel, |q| q.sel);
    let pool = runner.pool();
    let checks = pool.install(|| check_call(ns, nq, params, fields, out).and(check_subset(sources.sel, ns)).and(check_subset(qsel, nq)));
    runner.agree(checks)?;
    let m = qsel.len();
    let mut counts = out.counts.as_ref().map(|_| vec![0i64; m]);
    let mut sum = out.scalar_sum.as_ref().map(|_| vec![0.0f64; m]);
    let mut mean = out.scalar_mean.as_ref().map(|_| vec![0.0f64; m]);
    let mut dens = out.density.as_ref().map(|_| vec![0.0f64; m]);
    let mut sub = RadiusOutput {
        counts: counts.as_deref_mut(),
        scalar_sum: sum.as_deref_mut(),
        scalar_mean: mean.as_deref_mut(),
        density: dens.as_deref_mut(),
    };
    let (masses, scalar) = (fields.masses.map(|f| Subset::new(f, sources.sel)), fields.scalar.map(|f| Subset::new(f, sources.sel)));
    let sfields = SourceFields { masses: masses.as_ref().map(|f| f as &dyn ScalarField), scalar: scalar.as_ref().map(|f| f as &dyn ScalarField) };
    let radii = match params.radius {
        SearchRadius::PerQuery(v) => Some(Subset::new(v, qsel)),
        SearchRadius::Fixed(_) => None,
    };
    let sp = RadiusParams { radius: radii.as_ref().map_or(params.radius, |r| SearchRadius::PerQuery(r)), ..*params };
    let src = Subset::new(sources.points, sources.sel);
    // A self-query when every rank's selections are equal (one rank's own could be by
    // chance: none selected, say).
    let same = runner.all(queries.is_none() && qsel == sources.sel);
    let (mut r, global) = match &queries {
        _ if same => run_views::<T, D, S, S>(runner, domain, &src, None, &sfields, &sp, &mut sub, ns, sources.sel)?,
        None => run_views(runner, domain, &src, Some(&Subset::new(sources.points, qsel)), &sfields, &sp, &mut sub, ns, sources.sel)?,
        Some(q) => run_views(runner, domain, &src, Some(&Subset::new(q.points, qsel)), &sfields, &sp, &mut sub, ns, sources.sel)?,
    };
    pool.install(|| {
        let mut row_of = vec![u32::MAX; nq];
        for (j, &i) in qsel.iter().enumerate() {
            row_of[i as usize] = j as u32;
        }
        if let (Some(o), Some(s)) = (out.counts.as_deref_mut(), &counts) {
            o.par_iter_mut().zip(row_of.par_iter()).for_each(|(o, &j)| *o = if j == u32::MAX { -1 } else { s[j as usize] });
        }
        for (o, s) in [(out.scalar_sum.as_deref_mut(), &sum), (out.scalar_mean.as_deref_mut(), &mean), (out.density.as_deref_mut(), &dens)] {
            if let (Some(o), Some(s)) = (o, s) {
                o.par_iter_mut().zip(row_of.par_iter()).for_each(|(o, &j)| *o = if j == u32::MAX { f64::NAN } else { s[j as usize] });
            }
        }
        if let Some(l) = r.lists.take() {
            r.lists = Some(caller_rows(l, &row_of, (!global).then_some(sources.sel)));
        }
    });
    r.stats.queries = nq;
    Ok(r)
}

/// The view's lists (rows of the selected queries) as the caller's rows, entries mapped
/// through `sel` (None: already the caller's).
fn caller_rows(l: NeighbourLists, row_of: &[u32], sel: Option<&[u32]>) -> NeighbourLists {
    let nq = row_of.len();
    let mut offsets = vec![0i64; nq + 1];
    for (i, &j) in row_of.iter().enumerate() {
        offsets[i + 1] = offsets[i] + if j == u32::MAX { 0 } else { l.offsets[j as usize + 1] - l.offsets[j as usize] };
    }
    // Rows keep their order (both ascending), so the entries move as they are.
    let indices = match sel {
        Some(s) => l.indices.par_iter().map(|&v| s[v as usize] as i64).collect(),
        None => l.indices,
    };
    NeighbourLists { offsets, indices, distances: l.distances }
}

/// The job on the views; whether its list entries are already the caller's indices.
#[allow(clippy::too_many_arguments)]
fn run_views<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
    runner: Runner<'_>,
    domain: &Domain<D>,
    src: &Subset<'_, S>,
    qry: Option<&Subset<'_, Q>>,
    fields: &SourceFields<'_>,
    params: &RadiusParams<'_>,
    out: &mut RadiusOutput<'_>,
    ns: usize,
    sel: &[u32],
) -> Result<(Radius, bool)> {
    match runner {
        Runner::Serial(c) => {
            let r = match qry {
                None => c.radius_self(domain, src, fields, params, out)?,
                Some(q) => c.radius(domain, src, q, fields, params, out)?,
            };
            let _ = (ns, sel);
            Ok((r, false))
        }
        #[cfg(feature = "mpi")]
        Runner::Dist(on) => {
            // List entries name the caller's global source indices.
            let g = on.global_indices(ns, sel);
            let (r, _) = super::dist::radius_host(on, domain, src, qry, fields, params, out, Some(&g))?;
            Ok((r, true))
        }
    }
}
