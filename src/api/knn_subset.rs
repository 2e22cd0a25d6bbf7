//! kNN between subsets of the caller's particles (type masks in the C API): the job runs
//! on views of the selected sources and queries, then its rows go to the selected
//! queries' rows and its neighbour indices become the caller's. A query left out keeps a
//! row that is not computed: indices -1, distances +inf, density and mean NaN.

use rayon::prelude::*;

use super::Context;
use super::subset::{KnnSubset, Runner, check_subset};
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::input::subset::Subset;
use crate::input::{Domain, PointSource, ScalarField};
use crate::knn::{KnnOutput, KnnParams, KnnStats, OutputOrder, SourceFields};

impl Context {
    /// kNN between subsets of the caller's particles (type masks in the C API): the
    /// sources at `sources.sel`, the queries at `queries.sel` (`queries` None: of the
    /// sources' points, a self-query when the selections are equal — every query then its
    /// own first neighbour). Rows are the caller's queries in input order
    /// (`OutputOrder::Input` only); a query left out keeps a row that is not computed:
    /// indices -1, distances +inf, density and mean NaN. Neighbour indices are the
    /// sources' input indices; `fields` are per source point of the caller (all of them).
    pub fn knn_subset<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        sources: KnnSubset<'_, S>,
        queries: Option<KnnSubset<'_, Q>>,
        fields: &SourceFields<'_>,
        params: &KnnParams,
        out: &mut KnnOutput<'_, T>,
    ) -> Result<KnnStats> {
        knn_subset(Runner::Serial(self), domain, sources, queries, fields, params, out)
    }
}

/// The subset call on either runner.
pub(crate) fn knn_subset<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
    runner: Runner<'_>,
    domain: &Domain<D>,
    sources: KnnSubset<'_, S>,
    queries: Option<KnnSubset<'_, Q>>,
    fields: &SourceFields<'_>,
    params: &KnnParams,
    out: &mut KnnOutput<'_, T>,
) -> Result<KnnStats> {
    let ns = sources.points.len();
    let nq = queries.as_ref().map_or(ns, |q| q.points.len());
    let qsel = queries.as_ref().map_or(sources.sel, |q| q.sel);
    let pool = runner.pool();
    let checks = pool.install(|| -> Result<()> {
        crate::knn::check_call(ns, nq, params, fields, out)?;
        if out.order != OutputOrder::Input || out.permutation.is_some() {
            return Err(Error::InvalidParameter { name: "order", why: "kNN between subsets writes rows in input order only".into() });
        }
        check_subset(sources.sel, ns).and(check_subset(qsel, nq))
    });
    runner.agree(checks)?;
    // Over MPI the collective call finds whether any rank selected a source.
    if matches!(runner, Runner::Serial(_)) && sources.sel.is_empty() {
        return Err(Error::NoSources);
    }
    let k = params.k;
    let m = qsel.len();
    let rows = m.checked_mul(k).ok_or(Error::InvalidParameter { name: "k", why: "n_queries * k overflows".into() })?;
    // The selected queries' rows, then scattered to theirs.
    let mut idx = out.indices.as_ref().map(|_| vec![0i64; rows]);
    let mut dist = out.distances.as_ref().map(|_| vec![T::ZERO; rows]);
    let mut kth = out.kth_distance.as_ref().map(|_| vec![T::ZERO; m]);
    let mut dens = out.density.as_ref().map(|_| vec![0.0f64; m]);
    let mut mean = out.scalar_mean.as_ref().map(|_| vec![0.0f64; m]);
    let mut sub = KnnOutput {
        indices: idx.as_deref_mut(),
        distances: dist.as_deref_mut(),
        kth_distance: kth.as_deref_mut(),
        density: dens.as_deref_mut(),
        scalar_mean: mean.as_deref_mut(),
        order: OutputOrder::Input,
        permutation: None,
    };
    let (masses, scalar) = (fields.masses.map(|f| Subset::new(f, sources.sel)), fields.scalar.map(|f| Subset::new(f, sources.sel)));
    let sfields = SourceFields { masses: masses.as_ref().map(|f| f as &dyn ScalarField), scalar: scalar.as_ref().map(|f| f as &dyn ScalarField) };
    let hint = params.kth_hint.map(|h| Subset::new(h, qsel));
    let sp = KnnParams { k, kth_hint: hint.as_ref().map(|h| h as &dyn ScalarField) };
    let src = Subset::new(sources.points, sources.sel);
    // A self-query when every rank's selections are equal (one rank's own could be by
    // chance: none selected, say).
    let same = runner.all(queries.is_none() && qsel == sources.sel);
    let (stats, global) = match &queries {
        _ if same => run_views::<T, D, S, S>(runner, domain, &src, None, &sfields, &sp, &mut sub, ns, sources.sel)?,
        None => run_views(runner, domain, &src, Some(&Subset::new(sources.points, qsel)), &sfields, &sp, &mut sub, ns, sources.sel)?,
        Some(q) => run_views(runner, domain, &src, Some(&Subset::new(q.points, qsel)), &sfields, &sp, &mut sub, ns, sources.sel)?,
    };
    pool.install(|| {
        // Neighbour entries name view indices (serial) or already the caller's (over MPI).
        let ssel = (!global).then_some(sources.sel);
        // Row of query i: the selected query j's, or not computed.
        let mut row_of = vec![u32::MAX; nq];
        for (j, &i) in qsel.iter().enumerate() {
            row_of[i as usize] = j as u32;
        }
        if let (Some(o), Some(s)) = (out.indices.as_deref_mut(), &idx) {
            o.par_chunks_mut(k).zip(row_of.par_iter()).for_each(|(r, &j)| match j {
                u32::MAX => r.fill(-1),
                j => r.iter_mut().zip(&s[j as usize * k..(j as usize + 1) * k]).for_each(|(o, &v)| {
                    *o = match ssel {
                        _ if v < 0 => -1,
                        Some(sel) => sel[v as usize] as i64,
                        None => v,
                    }
                }),
            });
        }
        if let (Some(o), Some(s)) = (out.distances.as_deref_mut(), &dist) {
            o.par_chunks_mut(k).zip(row_of.par_iter()).for_each(|(r, &j)| match j {
                u32::MAX => r.fill(T::INFINITY),
                j => r.copy_from_slice(&s[j as usize * k..(j as usize + 1) * k]),
            });
        }
        if let (Some(o), Some(s)) = (out.kth_distance.as_deref_mut(), &kth) {
            o.par_iter_mut().zip(row_of.par_iter()).for_each(|(o, &j)| *o = if j == u32::MAX { T::INFINITY } else { s[j as usize] });
        }
        for (o, s) in [(out.density.as_deref_mut(), &dens), (out.scalar_mean.as_deref_mut(), &mean)] {
            if let (Some(o), Some(s)) = (o, s) {
                o.par_iter_mut().zip(row_of.par_iter()).for_each(|(o, &j)| *o = if j == u32::MAX { f64::NAN } else { s[j as usize] });
            }
        }
    });
    Ok(stats)
}

/// The job on the views; whether its neighbour entries are already the caller's indices.
#[allow(clippy::too_many_arguments)]
fn run_views<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
    runner: Runner<'_>,
    domain: &Domain<D>,
    src: &Subset<'_, S>,
    qry: Option<&Subset<'_, Q>>,
    fields: &SourceFields<'_>,
    params: &KnnParams,
    out: &mut KnnOutput<'_, T>,
    ns: usize,
    sel: &[u32],
) -> Result<(KnnStats, bool)> {
    let serial = |c: &Context, out: &mut KnnOutput<'_, T>| match qry {
        None => c.knn_self(domain, src, fields, params, out),
        Some(q) => c.knn(domain, src, q, fields, params, out),
    };
    match runner {
        Runner::Serial(c) => {
            let _ = (ns, sel);
            Ok((serial(c, out)?, false))
        }
        #[cfg(feature = "mpi")]
        Runner::Dist(on) if on.comm.size() == 1 => Ok((serial(on.ctx, out)?, false)),
        #[cfg(feature = "mpi")]
        Runner::Dist(on) => {
            // Neighbour entries name the caller's global source indices (`ns`: this rank's
            // whole source set).
            let g = on.global_indices(ns, sel);
            let st = super::dist::knn_host(on, domain, src, qry, fields, params, out, Some(&g))?;
            let mut local = st.local.clone();
            local.timings = st.dist.timings.clone();
            local.padded_queries = st.padded_queries;
            Ok((local, true))
        }
    }
}
