//! A context bound to an MPI communicator: every call is collective over it.

use mpi::topology::SimpleCommunicator;

use super::radius::{list_request, prefill};
use super::subset::{FieldViews, check_subset, scatter_labels};
use super::{Config, Context};
use crate::backend::cpu::{Cpu, DisjointSlice};
use crate::dbscan::{DbscanCatalogue, DbscanParams, DbscanStats, PointClass};
use crate::error::{Error, Result, check_len};
use crate::fof::{Catalogue, FofFields, FofParams, FofStats};
use crate::geom::Real;
use crate::input::subset::Subset;
use crate::input::{Domain, PointSource};
use crate::knn::{KnnOutput, KnnParams, OutputOrder, SourceFields, check_call as check_knn_call};
use crate::mpi::{CatalogueScope, Comm, DistFofStats, DistKnnStats, DistRadiusStats, DistStats, On};
use crate::pipeline::KnnSinks;
use crate::pipeline::knn::KnnFields;
use crate::pipeline::radius::{RadiusFields, RadiusSinks};
use crate::radius::check_call;
use crate::radius::{Radius, RadiusOutput, RadiusParams, SearchRadius};

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
        knn_host(self.on(), domain, points, None::<&P>, fields, params, out, None)
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
        knn_host(self.on(), domain, sources, Some(queries), fields, params, out, None)
    }

    /// [`Dist::knn`] (`queries` None: the self-query) between subsets of each rank's
    /// particles (see `Context::knn_subset`): neighbour indices are global input indices
    /// of the whole source sets; a query left out keeps a row that is not computed.
    pub fn knn_subset<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        sources: crate::KnnSubset<'_, S>,
        queries: Option<crate::KnnSubset<'_, Q>>,
        fields: &SourceFields<'_>,
        params: &KnnParams,
        out: &mut KnnOutput<'_, T>,
    ) -> Result<crate::knn::KnnStats> {
        super::knn_subset::knn_subset(super::subset::Runner::Dist(self.on()), domain, sources, queries, fields, params, out)
    }

    /// Collective radius self-query: the particles (over all ranks) within the radius of
    /// every particle this rank passes, itself included (see [`crate::radius`]): per-query
    /// outputs into `out` in this rank's input order; list entries are global indices.
    pub fn radius_self<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &SourceFields<'_>,
        params: &RadiusParams<'_>,
        out: &mut RadiusOutput<'_>,
    ) -> Result<(Radius, DistRadiusStats)> {
        radius_host(self.on(), domain, points, None::<&P>, fields, params, out, None)
    }

    /// Collective radius query with a separate query set: the sources (over all ranks)
    /// within the radius of every query this rank passes. Every rank passes its sources and
    /// its queries (either may be empty); list entries are global source indices.
    #[allow(clippy::too_many_arguments)]
    pub fn radius<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        sources: &S,
        queries: &Q,
        fields: &SourceFields<'_>,
        params: &RadiusParams<'_>,
        out: &mut RadiusOutput<'_>,
    ) -> Result<(Radius, DistRadiusStats)> {
        radius_host(self.on(), domain, sources, Some(queries), fields, params, out, None)
    }

    /// [`Dist::radius`] between subsets of each rank's particles (see
    /// `Context::radius_subset`): list entries are global input indices of the whole
    /// source sets; a query left out gets count -1, NaN sums and an empty list.
    #[allow(clippy::too_many_arguments)]
    pub fn radius_subset<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        sources: crate::KnnSubset<'_, S>,
        queries: Option<crate::KnnSubset<'_, Q>>,
        fields: &SourceFields<'_>,
        params: &RadiusParams<'_>,
        out: &mut RadiusOutput<'_>,
    ) -> Result<Radius> {
        super::radius_subset::radius_subset(super::subset::Runner::Dist(self.on()), domain, sources, queries, fields, params, out)
    }

    /// Collective DBSCAN over the particles of all ranks (see [`crate::dbscan`]): labels
    /// and classes in this rank's input order, identical to one single-rank call on the
    /// ranks' particles concatenated in rank order (tags, member lists: global indices).
    /// The catalogue is spread over the ranks (each cluster on the rank that passed its
    /// first core point) or gathered on rank 0 (`scope`); rows in z-order come in the
    /// order of their first core points' global indices.
    #[allow(clippy::too_many_arguments)]
    pub fn dbscan<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        params: &DbscanParams,
        scope: CatalogueScope,
        labels: &mut [i64],
        class: Option<&mut [PointClass]>,
    ) -> Result<(DbscanCatalogue<D>, DbscanStats)> {
        super::dist_dbscan::dbscan_host(self.on(), domain, points, fields, params, scope, labels, class, None)
    }

    /// [`Dist::dbscan`] over a subset of each rank's particles (`subset`: strictly
    /// ascending input indices): the others take no part (label -1, class noise); tags
    /// without ids and member lists are global input indices of the whole sets.
    #[allow(clippy::too_many_arguments)]
    pub fn dbscan_subset<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        params: &DbscanParams,
        subset: &[u32],
        scope: CatalogueScope,
        labels: &mut [i64],
        class: Option<&mut [PointClass]>,
    ) -> Result<(DbscanCatalogue<D>, DbscanStats)> {
        super::dist_dbscan::dbscan_subset_host(self.on(), domain, points, fields, params, subset, scope, labels, class)
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
        fof_host(self.on(), domain, points, fields, params, scope, labels, None)
    }

    /// [`Dist::fof`] over a subset of each rank's particles (`subset`: strictly ascending
    /// input indices, e.g. the dark-matter particles): the others take no part (label
    /// -1); tags without ids and member lists are global input indices of the whole sets.
    #[allow(clippy::too_many_arguments)]
    pub fn fof_subset<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        params: &FofParams,
        subset: &[u32],
        scope: CatalogueScope,
        labels: &mut [i64],
    ) -> Result<(Catalogue<D>, DistFofStats)> {
        fof_subset_host(self.on(), domain, points, fields, params, subset, scope, labels)
    }
}

/// Collective FoF over a subset of each rank's particles, on host arrays (`Dist::fof_subset`
/// and the C face's MPI contexts with a type mask).
#[allow(clippy::too_many_arguments)]
pub(crate) fn fof_subset_host<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    on: On<'_>,
    domain: &Domain<D>,
    points: &P,
    fields: &FofFields<'_, D>,
    params: &FofParams,
    subset: &[u32],
    scope: CatalogueScope,
    labels: &mut [i64],
) -> Result<(Catalogue<D>, DistFofStats)> {
    let n = points.len();
    let checks = (|| -> Result<()> {
        params.validate()?;
        check_len("labels output", labels.len(), n)?;
        on.ctx.pool.install(|| fields.validate(n).and(check_subset(subset, n)))
    })();
    on.comm.agree(checks)?;
    if on.comm.size() == 1 {
        let (cat, local) = on.ctx.fof_subset_into(domain, points, fields, params, subset, labels)?;
        return Ok((cat, serial_fof_stats(local, n)));
    }
    // Tags without ids and member lists name the caller's global indices.
    let global = on.global_indices(n, subset);
    let views = FieldViews::new(fields, subset);
    let mut sub = vec![0i64; subset.len()];
    let (cat, mut st) = fof_host(on, domain, &Subset::new(points, subset), &views.fields(), params, scope, &mut sub, Some(&global))?;
    on.ctx.pool.install(|| scatter_labels(&sub, subset, labels, false));
    st.local.particles = n;
    Ok((cat, st))
}

/// The stats of a one-rank call that ran the serial engine.
fn serial_fof_stats(local: FofStats, n: usize) -> DistFofStats {
    DistFofStats {
        dist: DistStats { timings: local.timings.clone(), owned: n, ..Default::default() },
        groups_total: local.groups_total,
        groups: local.groups,
        particles_in_groups: local.particles_in_groups,
        edges: 0,
        local,
    }
}

/// Collective kNN on host arrays, on the CPU back end (`Dist::knn_self`, `Dist::knn`, and
/// the C face's MPI contexts with host arrays).
#[allow(clippy::too_many_arguments)]
pub(crate) fn knn_host<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
    on: On<'_>,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &SourceFields<'_>,
    params: &KnnParams,
    out: &mut KnnOutput<'_, T>,
    src_global: Option<&Vec<u64>>,
) -> Result<DistKnnStats> {
    let (ns, nq) = (sources.len(), queries.map_or(sources.len(), |q| q.len()));
    let checks = (|| -> Result<()> {
        if out.order != OutputOrder::Input || out.permutation.is_some() {
            return Err(Error::InvalidParameter {
                name: "order",
                why: "z-order rows are per rank: distributed calls return rows in input order".into(),
            });
        }
        on.ctx.pool.install(|| check_knn_call(ns, nq, params, fields, out))
    })();
    if on.comm.size() == 1 && src_global.is_none() {
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
    crate::mpi::knn::run(on, &Cpu, domain, sources, queries, &kf, params.k, &sinks, src_global, checks)
}

/// Collective FoF on host arrays, on the CPU back end (`Dist::fof`, and the C face's MPI
/// contexts with host arrays).
#[allow(clippy::too_many_arguments)]
pub(crate) fn fof_host<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    on: On<'_>,
    domain: &Domain<D>,
    points: &P,
    fields: &FofFields<'_, D>,
    params: &FofParams,
    scope: CatalogueScope,
    labels: &mut [i64],
    global_of: Option<&Vec<u64>>,
) -> Result<(Catalogue<D>, DistFofStats)> {
    let n = points.len();
    let checks = (|| -> Result<()> {
        params.validate()?;
        check_len("labels output", labels.len(), n)?;
        on.ctx.pool.install(|| fields.validate(n))
    })();
    if on.comm.size() == 1 && global_of.is_none() {
        // One rank: the serial engine gives the same results without the exchanges.
        checks?;
        let (cat, local) = on.ctx.fof_into(domain, points, fields, params, labels)?;
        return Ok((cat, serial_fof_stats(local, n)));
    }
    let f = crate::mpi::fof::Fields::<Cpu, D> {
        velocities: fields.velocities,
        masses: fields.masses,
        particle_mass: fields.particle_mass,
        ids: fields.ids,
    };
    crate::mpi::fof::run(on, &Cpu, domain, points, &f, params, scope, &DisjointSlice::new(labels), global_of, checks)
}

/// Collective radius query on host arrays, on the CPU back end (`Dist::radius_self`,
/// `Dist::radius`, and the C face's MPI contexts with host arrays). `src_global`: the
/// global index each source's list entries name (a subset's caller indices).
#[allow(clippy::too_many_arguments)]
pub(crate) fn radius_host<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
    on: On<'_>,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &SourceFields<'_>,
    params: &RadiusParams<'_>,
    out: &mut RadiusOutput<'_>,
    src_global: Option<&Vec<u64>>,
) -> Result<(Radius, DistRadiusStats)> {
    let (ns, nq) = (sources.len(), queries.map_or(sources.len(), |q| q.len()));
    let checks = on.ctx.pool.install(|| check_call(ns, nq, params, fields, out));
    if on.comm.size() == 1 && src_global.is_none() {
        // One rank: the serial engine gives the same results without the exchanges.
        checks?;
        let r = match queries {
            None => on.ctx.radius_self(domain, sources, fields, params, out)?,
            Some(q) => on.ctx.radius(domain, sources, q, fields, params, out)?,
        };
        let dist = DistStats { timings: r.stats.timings.clone(), owned: ns, ..Default::default() };
        let local = r.stats.clone();
        return Ok((r, DistRadiusStats { local, dist }));
    }
    if checks.is_ok() {
        prefill(out);
    }
    let (fixed, radii) = match params.radius {
        SearchRadius::Fixed(r) => (r, None),
        SearchRadius::PerQuery(v) => (0.0, Some(v)),
    };
    let sinks = RadiusSinks::<Cpu> {
        counts: out.counts.as_deref_mut().map(DisjointSlice::new),
        scalar_sum: out.scalar_sum.as_deref_mut().map(DisjointSlice::new),
        scalar_mean: out.scalar_mean.as_deref_mut().map(DisjointSlice::new),
        density: out.density.as_deref_mut().map(DisjointSlice::new),
        counts_z: None,
    };
    let rf = RadiusFields::<Cpu> { masses: fields.masses, scalar: fields.scalar, radii, fixed, count_limit: params.count_limit };
    let (mut st, lists) = crate::mpi::radius::run(on, &Cpu, domain, sources, queries, &rf, &sinks, list_request(params), src_global, checks)?;
    st.local.max_radius = f64::from_bits(on.comm.max_u64(&[radii.map_or(fixed, |v| (0..nq).map(|i| v.get(i)).fold(0.0, f64::max)).to_bits()])[0]);
    Ok((Radius { lists, stats: st.local.clone() }, st))
}

#[cfg(feature = "cuda")]
mod device {
    use super::*;
    use crate::api::device::DeviceKnnFields;
    use crate::api::device::{CudaDevice, DeviceFofFields, DeviceKnnOutput, DeviceOut, DevicePoints, check_fof, check_knn, knn_parts};
    use crate::backend::cuda::backend::Cuda;
    use crate::backend::cuda::device::HeldMemory;
    use crate::knn::KnnStats;

    impl Dist {
        /// Collective kNN on device arrays, each rank on its `device`: the k nearest
        /// sources (over all ranks) of every query this rank passes (`queries = None`: the
        /// self-query), into this rank's device outputs, in its input order; neighbour
        /// indices are global source indices. Ranks may mix device and host calls.
        #[allow(clippy::too_many_arguments)]
        pub fn knn_device<T: Real, const D: usize>(
            &self,
            device: &CudaDevice,
            domain: &Domain<D>,
            sources: &DevicePoints<'_, T, D>,
            queries: Option<&DevicePoints<'_, T, D>>,
            fields: &DeviceKnnFields<'_>,
            k: usize,
            out: &DeviceKnnOutput<'_, T>,
        ) -> Result<DistKnnStats> {
            knn_device(self.on(), device, domain, sources, queries, fields, k, out, Ok(()))
        }

        /// Collective friends-of-friends on device arrays, each rank on its `device`:
        /// labels into this rank's device array (input order), the catalogue on the host
        /// (spread over the ranks or on rank 0: `scope`).
        #[allow(clippy::too_many_arguments)]
        pub fn fof_device<T: Real, const D: usize>(
            &self,
            device: &CudaDevice,
            domain: &Domain<D>,
            points: &DevicePoints<'_, T, D>,
            fields: &DeviceFofFields<'_, D>,
            params: &FofParams,
            scope: CatalogueScope,
            labels: &DeviceOut<'_, i64>,
        ) -> Result<(Catalogue<D>, DistFofStats)> {
            fof_device(self.on(), device, domain, points, fields, params, scope, labels, Ok(()))
        }
    }

    /// Collective kNN on device arrays (`Dist::knn_device`, and the C face's MPI contexts
    /// with device arrays). `checks`: the caller's own checks, agreed with the others'.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn knn_device<T: Real, const D: usize>(
        on: On<'_>,
        device: &CudaDevice,
        domain: &Domain<D>,
        sources: &DevicePoints<'_, T, D>,
        queries: Option<&DevicePoints<'_, T, D>>,
        fields: &DeviceKnnFields<'_>,
        k: usize,
        out: &DeviceKnnOutput<'_, T>,
        checks: Result<()>,
    ) -> Result<DistKnnStats> {
        let cuda = Cuda { dev: device.dev.clone() };
        let _held = HeldMemory::new(&*cuda.dev);
        let base = cuda.dev.tracker().reset_peak();
        let checks = checks.and_then(|_| {
            if out.order != OutputOrder::Input || out.permutation.is_some() {
                return Err(Error::InvalidParameter {
                    name: "order",
                    why: "z-order rows are per rank: distributed calls return rows in input order".into(),
                });
            }
            check_knn(&cuda, sources, queries, fields, k, out)
        });
        if on.comm.size() == 1 {
            checks?;
            let local = on.ctx.knn_device(device, domain, sources, queries, fields, k, out)?;
            let dist = DistStats { timings: local.timings.clone(), owned: sources.len(), ..Default::default() };
            return Ok(DistKnnStats { padded_queries: local.padded_queries, local, dist });
        }
        let (parts, checks) = match checks.and_then(|_| knn_parts(&cuda, sources.len(), fields, out)) {
            Ok(p) => (Some(p), Ok(())),
            Err(e) => (None, Err(e)),
        };
        let empty = (KnnSinks::<Cuda, T>::default(), KnnFields::<Cuda> { masses: None, scalar: None, kth_hint: None });
        let (sinks, kf) = parts.as_ref().map_or((&empty.0, &empty.1), |p| (&p.0, &p.1));
        let mut st = crate::mpi::knn::run(on, &cuda, domain, &sources.pts, queries.map(|q| &q.pts), kf, k, sinks, None, checks)?;
        st.local = KnnStats { scratch_bytes: cuda.dev.tracker().peak() - base, ..st.local };
        Ok(st)
    }

    /// Collective FoF on device arrays (`Dist::fof_device`, and the C face's MPI contexts
    /// with device arrays).
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn fof_device<T: Real, const D: usize>(
        on: On<'_>,
        device: &CudaDevice,
        domain: &Domain<D>,
        points: &DevicePoints<'_, T, D>,
        fields: &DeviceFofFields<'_, D>,
        params: &FofParams,
        scope: CatalogueScope,
        labels: &DeviceOut<'_, i64>,
        checks: Result<()>,
    ) -> Result<(Catalogue<D>, DistFofStats)> {
        let cuda = Cuda { dev: device.dev.clone() };
        let _held = HeldMemory::new(&*cuda.dev);
        let checks = checks.and_then(|_| check_fof(&cuda, domain, points.len(), fields, params, labels));
        if on.comm.size() == 1 {
            checks?;
            let (cat, local) = on.ctx.fof_device(device, domain, points, fields, params, labels)?;
            let stats = DistFofStats {
                dist: DistStats { timings: local.timings.clone(), owned: points.len(), ..Default::default() },
                groups_total: local.groups_total,
                groups: local.groups,
                particles_in_groups: local.particles_in_groups,
                edges: 0,
                local,
            };
            return Ok((cat, stats));
        }
        let f = crate::mpi::fof::Fields::<Cuda, D> {
            velocities: fields.velocities.map(|v| v.map(|a| a.field)),
            masses: fields.masses.map(|m| m.field),
            particle_mass: fields.particle_mass,
            ids: fields.ids.map(|i| i.field),
        };
        crate::mpi::fof::run(on, &cuda, domain, &points.pts, &f, params, scope, &labels.out, None, checks)
    }
}
#[cfg(feature = "cuda")]
pub(crate) use device::{fof_device, knn_device};
