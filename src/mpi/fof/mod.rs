//! Distributed FoF. Each rank links what it owns together with ghost copies of the
//! particles within the linking length of its key range (`ghosts`), so every linked pair
//! is found on the owner of one of its ends. A local group containing a ghost becomes an
//! *edge* to the ghost's owner, which names the ghost's own local group; the edges (few:
//! only groups crossing rank boundaries) are gathered on every rank and resolved by one
//! union–find (`edges`). The members of a group spread over ranks are sent to its *home*
//! rank (the rank holding its first particle in z-order), which reduces its row from all
//! of them (`home`), so each halo appears exactly once and its row is the single-rank one.

mod edges;
mod ghosts;
mod home;

use super::agree::{agree_params, domain_words};
use super::decomp::Decomp;
use super::route::{Returned, agree_points, for_each_input, send_back};
use super::{CommStats, DistStats, On};
use crate::api::Timings;
use crate::backend::cpu::Cpu;
use crate::error::{Result, check_len};
use crate::fof::{Catalogue, FofFields, FofParams, FofStats, LinkingLength};
use crate::geom::Real;
use crate::input::{Domain, PointSource};

pub use home::CatalogueScope;

/// What a distributed FoF call did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DistFofStats {
    /// The local linking over owned particles and ghosts.
    pub local: FofStats,
    /// The distribution layer's stages and communication.
    pub dist: DistStats,
    /// Connected components over all ranks, singletons included.
    pub groups_total: usize,
    /// Catalogue rows over all ranks.
    pub groups: usize,
    /// Particles in catalogue groups, over all ranks.
    pub particles_in_groups: usize,
    /// Cross-rank edges resolved by the global union–find.
    pub edges: usize,
}

fn param_words<T: Real, const D: usize>(domain: &Domain<D>, fields: &FofFields<'_, D>, params: &FofParams, scope: CatalogueScope) -> Vec<u64> {
    let (ll_kind, ll) = match params.linking_length {
        LinkingLength::Absolute(x) => (0, x),
        LinkingLength::Relative(b) => (1, b),
    };
    let mut w = vec![
        params.min_members as u64,
        params.order as u64,
        params.members as u64,
        scope as u64,
        ll_kind,
        ll.to_bits(),
        fields.velocities.is_some() as u64,
        fields.masses.is_some() as u64,
        fields.ids.is_some() as u64,
        fields.particle_mass.to_bits(),
        std::mem::size_of::<T>() as u64,
    ];
    w.extend(domain_words(domain));
    w
}

/// Collective friends-of-friends over the particles of all ranks: this rank's labels (in
/// its input order) and its share of the catalogue.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    on: On<'_>,
    domain: &Domain<D>,
    points: &P,
    fields: &FofFields<'_, D>,
    params: &FofParams,
    scope: CatalogueScope,
    labels: &mut [i64],
) -> Result<(Catalogue<D>, DistFofStats)> {
    let (comm, pool) = (on.comm, &on.ctx.pool);
    let (p, me, n) = (comm.size(), comm.rank(), points.len());
    let checks = (|| -> Result<()> {
        params.validate()?;
        check_len("labels output", labels.len(), n)?;
        pool.install(|| fields.validate(n))
    })();
    if p == 1 {
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
    agree_params(comm, "FoF", checks.map(|_| param_words::<T, D>(domain, fields, params, scope)))?;
    let mut timings = Timings::default();
    let mut cs = CommStats::default();
    let (quant, keys, _) = timings.time("dist keys", || agree_points(on, domain, points, None::<&P>, Ok(())))?;
    // Resolved with the global count, so b means the same on every rank.
    let l = comm.agree(params.linking_length.resolve(domain, keys.total as usize))?;
    if keys.total == 0 {
        let stats = DistFofStats { local: FofStats { linking_length: l, ..Default::default() }, ..Default::default() };
        return Ok((Catalogue::empty(params.order, fields.velocities.is_some()), stats));
    }
    let decomp = timings.time("dist split", || Decomp::build(comm, pool, domain, quant, &keys.keys, keys.total));

    // Owned particles and ghosts to their ranks; local linking over both.
    let (local, route) = ghosts::exchange(on, &decomp, &keys, points, fields, l, &mut cs, &mut timings)?;
    drop(keys);
    let mut lt = Timings::default();
    let linked = comm.agree(if local.pos.is_empty() {
        Ok(None)
    } else {
        let keys = local.keys.clone();
        pool.install(|| crate::pipeline::fof::link(&Cpu, domain, &local.pos, Some(keys), l, &on.ctx.config.tree, &mut lt)).map(Some)
    })?;
    timings.stages.append(&mut lt.stages);
    let mut local_stats = FofStats { particles: local.n_own, linking_length: l, ..Default::default() };
    let frags =
        timings.time("dist fragments", || edges::fragments(linked.as_ref().map(|(zs, roots, _)| (&zs.src_orig[..], &roots[..])), &local, &decomp));
    if let Some((zs, _, walk)) = linked {
        local_stats.nodes_per_plane = zs.tree.planes.iter().map(|p| p.len).collect();
        local_stats.walk = walk;
        local_stats.scratch_bytes = zs.bytes() + 4 * local.pos.len();
    }
    let groups = edges::resolve(comm, &frags, &local, params.min_members as u64, &mut cs, &mut timings)?;

    // The catalogue: rows reduced on the home ranks, optionally gathered on rank 0.
    let mut cat = home::catalogue(
        on,
        &local,
        &frags,
        &groups,
        (fields.velocities.is_some(), fields.masses.is_some()),
        fields.particle_mass,
        domain.box_lengths(),
        params,
        &mut cs,
        &mut timings,
    )?;
    let (n_rows, in_groups) = (cat.len() as u64, cat.count.iter().sum::<u64>());
    if scope == CatalogueScope::Root {
        cat = timings.time("dist gather", || home::gather_root(comm, cat, params.order, fields.velocities.is_some(), params.members, &mut cs))?;
    }
    let totals = comm.sum_u64(&[n_rows, in_groups]);

    // Labels back to the ranks (and input rows) the particles came from.
    let label_of = |u: usize| groups.label[frags.frag_of_particle[u] as usize];
    let recv =
        timings.time("dist results", || send_back(on, "results", &route.from_count, |u, b| super::comm::Wire::put(label_of(u), b), &mut cs))?;
    timings.time("dist labels", || {
        for_each_input(me, &route.owners, &route.from_count, &recv, |i, from| {
            labels[i] = match from {
                Returned::Here(u) => label_of(u),
                Returned::From(rd) => rd.get(),
            }
        })
    });
    local_stats.groups_total = frags.n_frag;
    local_stats.timings = Timings { stages: timings.stages.clone() };
    Ok((
        cat,
        DistFofStats {
            local: local_stats,
            dist: DistStats { timings, comm: cs, owned: local.n_own, imported: route.n_ghost, exported: route.exported },
            groups_total: groups.total,
            groups: totals[0] as usize,
            particles_in_groups: totals[1] as usize,
            edges: groups.n_edges,
        },
    ))
}
