//! A context bound to an MPI communicator: every call is collective over it.

use mpi::topology::SimpleCommunicator;

use super::{Config, Context};
use crate::error::Result;
use crate::fof::{Catalogue, FofFields, FofParams};
use crate::geom::Real;
use crate::input::{Domain, PointSource};
use crate::knn::{KnnOutput, KnnParams, SourceFields};
use crate::mpi::{CatalogueScope, Comm, DistFofStats, DistKnnStats, On};

/// A [`Context`] bound to a communicator. Every rank passes the particles it holds (any
/// number, zero included) and gets the results for exactly those, in its input order,
/// identical to one single-rank call on all ranks' particles concatenated in rank order.
/// Indices in results are such global indices: the particle counts of the lower ranks
/// plus the index on the rank.
pub struct Dist {
    ctx: Context,
    comm: Comm,
}

impl Dist {
    /// Takes ownership of `comm`; pass a duplicate of the simulation's communicator
    /// (`comm.duplicate()`) so ztree's messages never mix with the caller's.
    pub fn new(config: Config, comm: SimpleCommunicator) -> Result<Self> {
        Ok(Self { ctx: Context::new(config)?, comm: Comm::new(comm) })
    }

    /// This rank's index in the communicator.
    pub fn rank(&self) -> usize {
        self.comm.rank()
    }

    /// Number of ranks.
    pub fn size(&self) -> usize {
        self.comm.size()
    }

    /// The context every call of this handle runs on.
    pub fn context(&self) -> &Context {
        &self.ctx
    }

    fn on(&self) -> On<'_> {
        On { ctx: &self.ctx, comm: &self.comm }
    }

    /// Collective self-query: the k nearest particles (over all ranks) of every particle
    /// this rank passes, written to `out` in this rank's input order. `out.order` must be
    /// `OutputOrder::Input`.
    pub fn knn_self<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &SourceFields<'_>,
        params: &KnnParams,
        out: &mut KnnOutput<'_, T>,
    ) -> Result<DistKnnStats> {
        crate::mpi::knn::run(self.on(), domain, points, None::<&P>, fields, params, out)
    }

    /// Collective kNN with a separate query set: the k nearest sources (over all ranks)
    /// of every query this rank passes. Every rank passes its sources and its queries
    /// (either may be empty); neighbour indices are global source indices.
    #[allow(clippy::too_many_arguments)]
    pub fn knn<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        sources: &S,
        queries: &Q,
        fields: &SourceFields<'_>,
        params: &KnnParams,
        out: &mut KnnOutput<'_, T>,
    ) -> Result<DistKnnStats> {
        crate::mpi::knn::run(self.on(), domain, sources, Some(queries), fields, params, out)
    }

    /// Collective friends-of-friends over the particles of all ranks. `labels` gets, in
    /// this rank's input order, each particle's halo tag (the group's minimum particle id,
    /// or its minimum global input index without ids) or -1. The catalogue is spread over
    /// the ranks or gathered on rank 0 (`scope`); member lists hold global input indices.
    pub fn fof<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        params: &FofParams,
        scope: CatalogueScope,
        labels: &mut [i64],
    ) -> Result<(Catalogue<D>, DistFofStats)> {
        crate::mpi::fof::run(self.on(), domain, points, fields, params, scope, labels)
    }
}
