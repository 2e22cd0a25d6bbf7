//! A context bound to an MPI communicator: every call is collective over it.

use mpi::topology::SimpleCommunicator;

use super::{Config, Context};
use crate::backend::cpu::{Cpu, DisjointSlice};
use crate::error::{Error, Result, check_len};
use crate::fof::{Catalogue, FofFields, FofParams};
use crate::geom::Real;
use crate::input::{Domain, PointSource};
use crate::knn::{KnnOutput, KnnParams, OutputOrder, SourceFields, check_call};
use crate::mpi::{CatalogueScope, Comm, DistFofStats, DistKnnStats, DistStats, On};
use crate::pipeline::KnnSinks;
use crate::pipeline::knn::KnnFields;

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
        knn_host(self.on(), domain, points, None::<&P>, fields, params, out)
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
        knn_host(self.on(), domain, sources, Some(queries), fields, params, out)
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
        fof_host(self.on(), domain, points, fields, params, scope, labels)
    }
}

/// Collective kNN on host arrays, on the CPU back end (`Dist::knn_self`, `Dist::knn`, and
/// the C face's MPI contexts with host arrays).
pub(crate) fn knn_host<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
    on: On<'_>,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &SourceFields<'_>,
    params: &KnnParams,
    out: &mut KnnOutput<'_, T>,
) -> Result<DistKnnStats> {
    let (ns, nq) = (sources.len(), queries.map_or(sources.len(), |q| q.len()));
    let checks = (|| -> Result<()> {
        if out.order != OutputOrder::Input || out.permutation.is_some() {
            return Err(Error::InvalidParameter {
                name: "order",
                why: "z-order rows are per rank: distributed calls return rows in input order".into(),
            });
        }
        on.ctx.pool.install(|| check_call(ns, nq, params, fields, out))
    })();
    if on.comm.size() == 1 {
        // One rank: the serial engine gives the same results without the exchanges.
        checks?;
        let local = match queries {
            None => on.ctx.knn_self(domain, sources, fields, params, out)?,
            Some(q) => on.ctx.knn(domain, sources, q, fields, params, out)?,
        };
        let dist = DistStats { timings: local.timings.clone(), owned: ns, ..Default::default() };
        return Ok(DistKnnStats { padded_queries: local.padded_queries, local, dist });
    }
    let sinks = KnnSinks::<Cpu, T> {
        indices: out.indices.as_deref_mut().map(DisjointSlice::new),
        distances: out.distances.as_deref_mut().map(DisjointSlice::new),
        kth: out.kth_distance.as_deref_mut().map(DisjointSlice::new),
        density: out.density.as_deref_mut().map(DisjointSlice::new),
        scalar_mean: out.scalar_mean.as_deref_mut().map(DisjointSlice::new),
        ..Default::default()
    };
    let kf = KnnFields::<Cpu> { masses: fields.masses, scalar: fields.scalar, kth_hint: params.kth_hint };
    crate::mpi::knn::run(on, &Cpu, domain, sources, queries, &kf, params.k, &sinks, checks)
}

/// Collective FoF on host arrays, on the CPU back end (`Dist::fof`, and the C face's MPI
/// contexts with host arrays).
pub(crate) fn fof_host<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    on: On<'_>,
    domain: &Domain<D>,
    points: &P,
    fields: &FofFields<'_, D>,
    params: &FofParams,
    scope: CatalogueScope,
    labels: &mut [i64],
) -> Result<(Catalogue<D>, DistFofStats)> {
    let n = points.len();
    let checks = (|| -> Result<()> {
        params.validate()?;
        check_len("labels output", labels.len(), n)?;
        on.ctx.pool.install(|| fields.validate(n))
    })();
    if on.comm.size() == 1 {
        // One rank: the serial engine gives the same results without the exchanges.
        checks?;
        let (cat, local) = on.ctx.fof_into(domain, points, fields, params, labels)?;
        let stats = DistFofStats {
            dist: DistStats { timings: local.timings.clone(), owned: n, ..Default::default() },
            groups_total: local.groups_total,
            groups: local.groups,
            particles_in_groups: local.particles_in_groups,
            edges: 0,
            local,
        };
        return Ok((cat, stats));
    }
    let f = crate::mpi::fof::Fields::<Cpu, D> {
        velocities: fields.velocities,
        masses: fields.masses,
        particle_mass: fields.particle_mass,
        ids: fields.ids,
    };
    crate::mpi::fof::run(on, &Cpu, domain, points, &f, params, scope, &DisjointSlice::new(labels), checks)
}
