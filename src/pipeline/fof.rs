//! The FoF job's stage order: prepare, the leaves' own pairs, the walk down the planes,
//! the leaf pass, contraction into roots; then the catalogue.

use super::catalogue::{self, CatalogueRequest};
use crate::backend::{Backend, Ingest};
use crate::base::LeafJob;
use crate::base::{Timings, TreeParams, WalkStats};
use crate::error::Result;
use crate::fof::FofStats;
use crate::fof::catalogue::Catalogue;
use crate::geom::Real;
use crate::geom::metric::{Metric, Open, Periodic};
use crate::input::Domain;

use super::{Prepared, prepare, prepare_with_keys};

/// Runs a FoF job on `n >= 1` checked points with linking length `l`: the catalogue, and
/// every particle's label (input order) written to `labels`.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<B, T, const D: usize, P>(
    b: &B,
    domain: &Domain<D>,
    points: &P,
    l: f64,
    req: &CatalogueRequest<'_, B, D>,
    params: &TreeParams,
    labels: &B::Out<'_, i64>,
) -> Result<(Catalogue<D>, FofStats)>
where
    T: Real,
    P: ?Sized,
    B: Ingest<P, T, D>,
{
    let mut timings = Timings::default();
    let (zs, roots, walk) = link(b, domain, points, None, l, params, &mut timings)?;
    let (cat, cstats) = catalogue::reduce(b, &zs, &roots, req, labels, &mut timings)?;
    let n = zs.n_sources();
    // The union–find and the catalogue's scratch are never held at once.
    let link_bytes = 4 * n + zs.tree.num_nodes();
    let stats = FofStats {
        particles: n,
        linking_length: l,
        groups_total: cstats.groups_total,
        groups: cat.len(),
        particles_in_groups: cstats.particles_in_groups,
        timings,
        nodes_per_plane: zs.tree.planes.iter().map(|p| p.len).collect(),
        walk,
        scratch_bytes: zs.bytes() + link_bytes.max(B::bytes(&roots) + cstats.scratch_bytes),
    };
    Ok((cat, stats))
}

/// What `link` returns: the prepared points and tree, each z-ordered point's root, and
/// the walk's counts.
pub(crate) type Linked<B, T, const D: usize> = (Prepared<B, T, D>, <B as Backend>::Buf<u32>, WalkStats);

/// Links `points` (or, with `keys`, points already validated and keyed by the caller):
/// the root (z-index of its group's first point) of every z-ordered point.
pub(crate) fn link<B, T, const D: usize, P>(
    b: &B,
    domain: &Domain<D>,
    points: &P,
    keys: Option<B::Buf<u64>>,
    l: f64,
    params: &TreeParams,
    timings: &mut Timings,
) -> Result<Linked<B, T, D>>
where
    T: Real,
    P: ?Sized,
    B: Ingest<P, T, D>,
{
    let params = &params.with_auto_leaf(b.auto_leaf_size(LeafJob::Fof));
    let zs = match keys {
        Some(k) => prepare_with_keys(b, points, k, params, timings)?,
        None => prepare(b, domain, points, None::<&P>, params, timings)?,
    };
    let links = super::stage(b, timings, "init", || b.fof_begin(&zs))?;
    let walk = match domain {
        Domain::Open => walk(b, &Open, &zs, l, &links, timings)?,
        Domain::Periodic(len) => walk(b, &Periodic::<f64, D>::new(len), &zs, l, &links, timings)?,
    };
    let roots = super::stage(b, timings, "contract", || b.fof_contract(links))?;
    Ok((zs, roots, walk))
}

fn walk<B: Backend, T: Real, const D: usize, M: Metric<f64, D>>(
    b: &B,
    metric: &M,
    zs: &Prepared<B, T, D>,
    l: f64,
    links: &B::Links,
    timings: &mut Timings,
) -> Result<WalkStats> {
    super::stage(b, timings, "leaf self", || b.fof_leaf_self(metric, zs, l, links))?;
    super::stage(b, timings, "walk", || {
        let mut stats = WalkStats::default();
        let tree = &zs.tree;
        let mut lists = b.walk_start(tree)?;
        stats.list_entries.push(B::len(&lists.items) as u64);
        for parent in (2..tree.planes.len()).rev() {
            lists = b.fof_node_pass(metric, zs, l, links, parent, &lists)?;
            stats.list_entries.push(B::len(&lists.items) as u64);
        }
        stats.list_entries.push(b.fof_leaf_pass(metric, zs, l, links, &lists)?);
        Ok(stats)
    })
}
