//! The kNN job's stage order: prepare, fields into z-order, the walk down the planes, the
//! leaf pass (which writes every query's neighbours and reductions to the sinks).

use crate::backend::{Backend, Ingest};
use crate::base::LeafJob;
use crate::base::{Timings, TreeParams, WalkStats};
use crate::error::Result;
use crate::geom::Real;
use crate::geom::metric::{Metric, Open, Periodic};
use crate::input::Domain;
use crate::knn::KnnStats;

use super::{KnnSinks, Prepared, prepare};

/// The caller's per-source fields (and per-query k-th distance guesses), as the back end
/// reads them.
pub(crate) struct KnnFields<'a, B: Backend + 'a> {
    pub masses: Option<B::Scalar<'a>>,
    pub scalar: Option<B::Scalar<'a>>,
    /// `KnnParams::kth_hint`, in the queries' input order.
    pub kth_hint: Option<B::Scalar<'a>>,
}

/// The fields of a kNN job in z-order, as the leaf pass reads them: masses and scalar
/// by source, the k-th distance guesses by query.
pub(crate) struct LeafFields<'a, B: Backend> {
    pub masses: Option<&'a B::Buf<f64>>,
    pub scalar: Option<&'a B::Buf<f64>>,
    pub kth_hint: Option<&'a B::Buf<f64>>,
}

/// Runs a kNN job (inputs already checked; at least one source) and returns its
/// statistics with the prepared tree, which a distributed call reuses to answer queries
/// from other ranks.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<B, T, const D: usize, S, Q>(
    b: &B,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &KnnFields<'_, B>,
    k: usize,
    params: &TreeParams,
    sinks: &KnnSinks<'_, B, T>,
) -> Result<(KnnStats, Prepared<B, T, D>)>
where
    T: Real,
    S: ?Sized,
    Q: ?Sized,
    B: Ingest<S, T, D> + Ingest<Q, T, D>,
{
    let mut timings = Timings::default();
    let params = &params.with_auto_leaf(b.auto_leaf_size(LeafJob::Knn { k }));
    let zs = prepare(b, domain, sources, queries, params, &mut timings)?;
    let (masses, scalar, hint) = super::stage(b, &mut timings, "fields", || -> Result<_> {
        let g = |f: Option<B::Scalar<'_>>| f.map(|f| b.gather_scalar(f, &zs.src_orig)).transpose();
        let hint = fields.kth_hint.map(|f| b.gather_scalar(f, zs.queries().1)).transpose()?;
        Ok((g(fields.masses)?, g(fields.scalar)?, hint))
    })?;
    let f = LeafFields { masses: masses.as_ref(), scalar: scalar.as_ref(), kth_hint: hint.as_ref() };
    let walk = super::stage(b, &mut timings, "walk", || match domain {
        Domain::Open => walk(b, &Open, &zs, k, &f, sinks),
        Domain::Periodic(l) => walk(b, &Periodic::<T, D>::new(l), &zs, k, &f, sinks),
    })?;
    let ns = zs.n_sources();
    let nq = B::len(zs.queries().1);
    if let Some(p) = &sinks.permutation {
        // Which query each row is: the z-order's input indices, or the identity.
        super::stage(b, &mut timings, "permutation", || b.row_queries(sinks.zorder.then(|| zs.queries().1), nq, p))?;
    }
    let field_bytes = [&masses, &scalar, &hint].iter().map(|f| f.as_ref().map_or(0, |f| B::bytes(f))).sum::<usize>();
    let stats = KnnStats {
        sources: ns,
        queries: nq,
        padded_queries: if ns < k { nq } else { 0 },
        timings,
        nodes_per_plane: zs.tree.planes.iter().map(|p| p.len).collect(),
        walk,
        scratch_bytes: zs.bytes() + field_bytes,
    };
    Ok((stats, zs))
}

/// The walk: start at the super plane, one node pass per plane, then the leaf pass.
fn walk<B: Backend, T: Real, const D: usize, M: Metric<T, D>>(
    b: &B,
    metric: &M,
    zs: &Prepared<B, T, D>,
    k: usize,
    fields: &LeafFields<'_, B>,
    sinks: &KnnSinks<'_, B, T>,
) -> Result<WalkStats> {
    let mut stats = WalkStats::default();
    let tree = &zs.tree;
    let mut lists = b.walk_start(tree)?;
    stats.list_entries.push(B::len(&lists.items) as u64);
    let node_k = zs.knn_node_k(k);
    for parent in (2..tree.planes.len()).rev() {
        lists = b.knn_node_pass(metric, tree, node_k, parent, &lists)?;
        stats.list_entries.push(B::len(&lists.items) as u64);
    }
    stats.list_entries.push(b.knn_leaf_pass(metric, zs, k, fields, &lists, sinks)?);
    Ok(stats)
}
