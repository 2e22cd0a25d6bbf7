//! Friends-of-friends on a context: labels and the halo catalogue.

use super::Context;
use crate::backend::cpu::{Cpu, DisjointSlice};
use crate::error::{Result, check_len};
use crate::fof::{Catalogue, Fof, FofFields, FofParams, FofStats};
use crate::geom::Real;
use crate::input::{Domain, PointSource};
use crate::pipeline::catalogue::CatalogueRequest;

impl Context {
    /// Friends-of-friends groups of `points`: per-particle labels (input order) and the
    /// group catalogue.
    pub fn fof<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        params: &FofParams,
    ) -> Result<Fof<D>> {
        let mut labels = vec![0i64; points.len()];
        let (catalogue, stats) = self.fof_into(domain, points, fields, params, &mut labels)?;
        Ok(Fof { labels, catalogue, stats })
    }

    /// As [`Context::fof`], writing the labels into a caller-owned slice of `points.len()`
    /// entries.
    pub fn fof_into<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        params: &FofParams,
        labels: &mut [i64],
    ) -> Result<(Catalogue<D>, FofStats)> {
        self.pool.install(|| run(self, domain, points, fields, params, labels))
    }
}

fn run<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    ctx: &Context,
    domain: &Domain<D>,
    points: &P,
    fields: &FofFields<'_, D>,
    params: &FofParams,
    labels: &mut [i64],
) -> Result<(Catalogue<D>, FofStats)> {
    domain.validate()?;
    params.validate()?;
    let n = points.len();
    let l = params.linking_length.resolve(domain, n)?;
    check_len("labels output", labels.len(), n)?;
    fields.validate(n)?;
    if n == 0 {
        let stats = FofStats { linking_length: l, ..Default::default() };
        return Ok((Catalogue::empty(params.order, fields.velocities.is_some()), stats));
    }
    let req = CatalogueRequest::<Cpu, D> {
        box_len: domain.box_lengths(),
        velocities: fields.velocities,
        masses: fields.masses,
        particle_mass: fields.particle_mass,
        ids: fields.ids,
        min_members: params.min_members,
        order: params.order,
        members: params.members,
    };
    let t = std::time::Instant::now();
    crate::backend::cpu::par::prefault(labels);
    let outputs = t.elapsed().as_secs_f64();
    let (cat, mut stats) = crate::pipeline::fof::run(&Cpu, domain, points, l, &req, &ctx.config.tree, &DisjointSlice::new(labels))?;
    // The labels' prefault as a stage of its own (see `knn::run`).
    stats.timings.stages.insert(0, ("outputs", outputs));
    Ok((cat, stats))
}
