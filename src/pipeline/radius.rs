//! The radius job's stage order: prepare (sources and queries jointly, or a self-query),
//! fields and radii into z-order, the largest radius per node, the walk down the planes,
//! the counting leaf pass (counts and reductions), then, for lists, the offsets and the
//! filling pass.

use crate::backend::{Ingest, RadiusPasses};
use crate::base::{LeafJob, Timings, TreeParams, WalkStats};
use crate::error::Result;
use crate::geom::Real;
use crate::geom::metric::{Metric, Open, Periodic};
use crate::input::Domain;
use crate::radius::{ListOrder, NeighbourLists, RadiusStats};

use super::{Lists, Prepared, prepare};

/// The radii of one call as the passes read them: one for all, or per query in z-order;
/// per node (every plane) the largest of its queries' (empty with a fixed radius).
pub(crate) struct Radii<'a, B: RadiusPasses> {
    pub fixed: f64,
    pub per_query: Option<&'a B::Buf<f64>>,
    pub node_max: B::Buf<f64>,
    /// Counts stop at this many (0: exact).
    pub count_limit: u64,
}

/// Per-query outputs in the queries' input order.
pub(crate) struct RadiusSinks<'a, B: RadiusPasses + 'a> {
    pub counts: Option<B::Out<'a, i64>>,
    pub scalar_sum: Option<B::Out<'a, f64>>,
    pub scalar_mean: Option<B::Out<'a, f64>>,
    pub density: Option<B::Out<'a, f64>>,
    /// Counts by query in z-order, for the lists' offsets.
    pub counts_z: Option<B::Out<'a, u32>>,
}

impl<'a, B: RadiusPasses + 'a> Default for RadiusSinks<'a, B> {
    fn default() -> Self {
        Self { counts: None, scalar_sum: None, scalar_mean: None, density: None, counts_z: None }
    }
}

/// The sources' masses and scalar in z-order, as the counting pass reads them.
pub(crate) struct ZFields<'a, B: RadiusPasses> {
    pub masses: Option<&'a B::Buf<f64>>,
    pub scalar: Option<&'a B::Buf<f64>>,
}

/// The caller's fields and radius, as the back end reads them.
pub(crate) struct RadiusFields<'a, B: RadiusPasses + 'a> {
    pub masses: Option<B::Scalar<'a>>,
    pub scalar: Option<B::Scalar<'a>>,
    /// None: `fixed` for every query.
    pub radii: Option<B::Scalar<'a>>,
    pub fixed: f64,
    /// Counts stop at this many (0: exact; counts only).
    pub count_limit: u64,
}

/// What the lists need: their order, whether with distances, and the byte ceiling.
#[derive(Clone, Copy, Debug)]
pub(crate) struct ListRequest {
    pub order: ListOrder,
    pub distances: bool,
    pub max_bytes: u64,
}

/// Runs a checked radius job; the sinks were set to their empty values by the caller
/// (queries no leaf pass reaches keep them).
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<B, T, const D: usize, S, Q>(
    b: &B,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &RadiusFields<'_, B>,
    params: &TreeParams,
    sinks: &RadiusSinks<'_, B>,
    lists: Option<ListRequest>,
) -> Result<(RadiusStats, Option<NeighbourLists>)>
where
    T: Real,
    S: ?Sized,
    Q: ?Sized,
    B: Ingest<S, T, D> + Ingest<Q, T, D> + RadiusPasses,
{
    let mut timings = Timings::default();
    let params = &params.with_auto_leaf(b.auto_leaf_size(LeafJob::Fof));
    let zs = prepare(b, domain, sources, queries, params, &mut timings)?;
    let (masses, scalar, radii) = super::stage(b, &mut timings, "fields", || -> Result<_> {
        let g = |f: Option<B::Scalar<'_>>| f.map(|f| b.gather_scalar(f, &zs.src_orig)).transpose();
        let r = fields.radii.map(|f| b.gather_scalar(f, zs.queries().1)).transpose()?;
        Ok((g(fields.masses)?, g(fields.scalar)?, r))
    })?;
    let node_max = super::stage(b, &mut timings, "radii", || b.radius_node_max(&zs, radii.as_ref()))?;
    let radii = Radii::<B> { fixed: fields.fixed, per_query: radii.as_ref(), node_max, count_limit: fields.count_limit };
    let lf = ZFields::<B> { masses: masses.as_ref(), scalar: scalar.as_ref() };
    let (walk, pairs, out_lists) = match domain {
        Domain::Open => walk(b, &Open, &zs, &radii, &lf, sinks, lists, &mut timings)?,
        Domain::Periodic(l) => walk(b, &Periodic::<f64, D>::new(l), &zs, &radii, &lf, sinks, lists, &mut timings)?,
    };
    let field_bytes = [&masses, &scalar].iter().map(|f| f.as_ref().map_or(0, |f| B::bytes(f))).sum::<usize>()
        + radii.per_query.map_or(0, |r| B::bytes(r))
        + B::bytes(&radii.node_max);
    let stats = RadiusStats {
        sources: zs.n_sources(),
        queries: B::len(zs.queries().1),
        pairs,
        max_radius: 0.0,
        timings,
        nodes_per_plane: zs.tree.planes.iter().map(|p| p.len).collect(),
        walk,
        scratch_bytes: zs.bytes() + field_bytes,
    };
    Ok((stats, out_lists))
}

#[allow(clippy::too_many_arguments, clippy::type_complexity)]
fn walk<B: RadiusPasses, T: Real, const D: usize, M: Metric<f64, D>>(
    b: &B,
    metric: &M,
    zs: &Prepared<B, T, D>,
    radii: &Radii<'_, B>,
    fields: &ZFields<'_, B>,
    sinks: &RadiusSinks<'_, B>,
    lists: Option<ListRequest>,
    timings: &mut Timings,
) -> Result<(WalkStats, u64, Option<NeighbourLists>)> {
    let mut stats = WalkStats::default();
    let tree = &zs.tree;
    let leaf_lists: Lists<B> = super::stage(b, timings, "walk", || -> Result<_> {
        let mut l = b.walk_start(tree)?;
        stats.list_entries.push(B::len(&l.items) as u64);
        for parent in (2..tree.planes.len()).rev() {
            l = b.radius_node_pass(metric, zs, radii, parent, &l)?;
            stats.list_entries.push(B::len(&l.items) as u64);
        }
        Ok(l)
    })?;
    let pairs = super::stage(b, timings, "leaves", || b.radius_count_pass(metric, zs, radii, fields, &leaf_lists, sinks))?;
    stats.list_entries.push(B::len(&leaf_lists.items) as u64);
    let out = match lists {
        None => None,
        Some(req) => Some(super::stage(b, timings, "lists", || b.radius_lists(metric, zs, radii, &leaf_lists, sinks, pairs, req))?),
    };
    Ok((stats, pairs, out))
}
