//! Distributed FoF on any back end. Every particle moves to the owner of its key; each rank
//! then sends ghost copies (position, global index) of its particles within the linking
//! length of another rank's key range there, so every linked pair is found on the owner
//! of one of its ends, and links what it owns together with the ghosts it received. A
//! local group restricted to the owned particles is a *fragment*; a fragment that reached
//! a ghost becomes an *edge* to the ghost's owner, which names the ghost's own fragment;
//! the edges (few: only groups crossing rank boundaries) are gathered on every rank and
//! resolved by one union–find (`edges`). The members of a group spread over ranks are
//! sent to its *home* rank (the rank holding its first particle in z-order), which reduces
//! its row from all of them (`home`), so each halo appears exactly once and its row is the
//! single-rank one.

mod edges;
mod home;

use super::agree::{agree_params, domain_words};
use super::decomp;
use super::route::{agree_points, back, forward, plan_of, plan_to};
use super::{CommStats, DistStats, On};
use crate::backend::dist::{DistOps, Reach};
use crate::backend::{Backend, Ingest};
use crate::base::Timings;
use crate::error::Result;
use crate::fof::{Catalogue, FofParams, FofStats, LinkingLength};
use crate::geom::Real;
use crate::input::Domain;

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

/// A distributed FoF call's caller fields, as the back end reads them (input order).
pub(crate) struct Fields<'a, B: Backend + 'a, const D: usize> {
    pub velocities: Option<B::Vectors<'a, D>>,
    pub masses: Option<B::Scalar<'a>>,
    /// The mass of every particle when `masses` is absent.
    pub particle_mass: f64,
    pub ids: Option<B::Ids<'a>>,
}

/// What a rank links and reduces: its owned particles in global order (positions, keys,
/// global index, tag, mass, velocity), then the ghosts it received.
pub(super) struct Local<B: Backend, T: Real, const D: usize> {
    pub n_own: usize,
    pub gidx: B::Buf<u64>,
    pub tag: B::Buf<i64>,
    pub mass: Option<B::Buf<f64>>,
    pub vel: Option<[B::Buf<f64>; D]>,
    /// Owned positions followed by the ghosts'.
    pub pos: B::Buf<[T; D]>,
    /// The ghosts' global indices, and how many came from each rank (rank order).
    pub ghost_gidx: B::Buf<u64>,
    pub ghost_from: Vec<usize>,
}

fn param_words<T: Real, const D: usize>(
    domain: &Domain<D>,
    flags: [bool; 3],
    particle_mass: f64,
    params: &FofParams,
    scope: CatalogueScope,
) -> Vec<u64> {
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
        flags[0] as u64,
        flags[1] as u64,
        flags[2] as u64,
        particle_mass.to_bits(),
        std::mem::size_of::<T>() as u64,
    ];
    w.extend(domain_words(domain));
    w
}

/// Collective friends-of-friends over the particles of all ranks: this rank's labels (in
/// its input order, into `labels`) and its share of the catalogue. `global_of`: per
/// particle, the global index that names it in tags (without ids) and member lists
/// (ascending as the particles' own: a subset's caller indices); None: its own.
/// `checks`: this rank's own checks of its arguments, agreed with the others'.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<B, T, const D: usize, P>(
    on: On<'_>,
    b: &B,
    domain: &Domain<D>,
    points: &P,
    fields: &Fields<'_, B, D>,
    params: &FofParams,
    scope: CatalogueScope,
    labels: &B::Out<'_, i64>,
    global_of: Option<&B::Buf<u64>>,
    checks: Result<()>,
) -> Result<(Catalogue<D>, DistFofStats)>
where
    T: Real,
    P: ?Sized + Sync,
    B: DistOps + Ingest<P, T, D> + Ingest<<B as Backend>::Buf<[T; D]>, T, D>,
{
    let (comm, pool) = (on.comm, &on.ctx.pool);
    let me = comm.rank();
    let flags = [fields.velocities.is_some(), fields.masses.is_some(), fields.ids.is_some()];
    agree_params(comm, "FoF", checks.map(|_| param_words::<T, D>(domain, flags, fields.particle_mass, params, scope)))?;
    let mut timings = Timings::default();
    let mut cs = CommStats::default();
    let (quant, keys, _) = timings.time("dist keys", || agree_points(on, b, domain, points, None::<&P>))?;
    // Resolved with the global count, so b means the same on every rank.
    let l = comm.agree(params.linking_length.resolve(domain, keys.total as usize))?;
    if keys.total == 0 {
        let stats = DistFofStats { local: FofStats { linking_length: l, ..Default::default() }, ..Default::default() };
        return Ok((Catalogue::empty(params.order, flags[0]), stats));
    }
    let decomp = timings.time("dist split", || decomp::build(comm, b, domain, quant, &[&keys.keys], keys.total))?;

    // Owned particles to their ranks, then ghosts to the ranks within the linking length.
    let local = timings.time("dist exchange", || -> Result<_> {
        let owners = comm.agree(b.key_owners(&keys.keys, decomp.starts()))?;
        let route = plan_to(on, b, &owners)?;
        let (pos, gidx, tag, mass, vel) = comm.agree(pool.install(|| -> Result<_> {
            let pos = b.gather_rows(points, &route.rows)?;
            let gidx = match global_of {
                Some(g) => b.gather(g, &route.rows, 1)?,
                None => b.offset_rows(&route.rows, keys.offset)?,
            };
            // Without ids a particle's tag is its global index: made where it lands.
            let tag = fields.ids.map(|ids| b.gather_ids(ids, &route.rows)).transpose()?;
            let mass = fields.masses.map(|m| b.gather_scalar(m, &route.rows)).transpose()?;
            let vel = fields.velocities.map(|v| b.gather_vectors(v, &route.rows)).transpose()?;
            Ok((pos, gidx, tag, mass, vel))
        }))?;
        let own_pos = forward(on, b, "decompose", &route, &pos, &mut cs)?;
        drop(pos);
        let gidx = forward(on, b, "decompose", &route, &gidx, &mut cs)?;
        let tag = match tag {
            Some(t) => forward(on, b, "decompose", &route, &t, &mut cs)?,
            None => comm.agree(b.to_i64(&gidx))?,
        };
        let mass = mass.map(|m| forward(on, b, "decompose", &route, &m, &mut cs)).transpose()?;
        let vel = match vel {
            Some(v) => {
                let mut out = Vec::with_capacity(D);
                for c in &v {
                    out.push(forward(on, b, "decompose", &route, c, &mut cs)?);
                }
                Some(out.try_into().unwrap_or_else(|_| unreachable!()))
            }
            None => None,
        };
        let n_own = B::len(&gidx);
        let own_keys = comm.agree(pool.install(|| -> Result<_> {
            let mut k = b.zeros(n_own)?;
            b.keys_into(&own_pos, &decomp.quant, &mut k, 0)?;
            Ok(k)
        }))?;
        let (grows, gcounts) = comm.agree(pool.install(|| b.near_pairs(&decomp, me, &own_pos, Some(&own_keys), Reach::Fixed(l))))?;
        let ghosts = plan_of(on, grows, gcounts);
        let gpos = forward(on, b, "ghosts", &ghosts, &comm.agree(b.gather(&own_pos, &ghosts.rows, 1))?, &mut cs)?;
        let ghost_gidx = forward(on, b, "ghosts", &ghosts, &comm.agree(b.gather(&gidx, &ghosts.rows, 1))?, &mut cs)?;
        let exported = ghosts.exported(me);
        let (local, local_keys) = comm.agree(pool.install(|| -> Result<_> {
            let mut gkeys = b.zeros(B::len(&ghost_gidx))?;
            b.keys_into(&gpos, &decomp.quant, &mut gkeys, 0)?;
            let pos = b.append(own_pos, &gpos)?;
            let local = Local { n_own, gidx, tag, mass, vel, pos, ghost_gidx, ghost_from: ghosts.recv.clone() };
            Ok((local, b.append(own_keys, &gkeys)?))
        }))?;
        Ok((local, local_keys, route, exported))
    })?;
    let (local, local_keys, route, exported) = local;
    drop(keys);
    let n_ghost = B::len(&local.ghost_gidx);
    let mut lt = Timings::default();
    let n_local = local.n_own + n_ghost;
    let linked = comm.agree(if n_local == 0 {
        Ok(None)
    } else {
        pool.install(|| crate::pipeline::fof::link(b, domain, &local.pos, Some(local_keys), l, &on.ctx.config.tree, &mut lt)).map(Some)
    })?;
    timings.stages.append(&mut lt.stages);
    let mut local_stats = FofStats { particles: local.n_own, linking_length: l, ..Default::default() };
    let frags = timings.time("dist fragments", || {
        comm.agree(match &linked {
            Some((zs, roots, _)) => pool.install(|| b.fof_fragments(&zs.src_orig, roots, local.n_own)),
            None => Ok(crate::backend::dist::Fragments { n_frag: 0, frag_of: b.zeros(0)?, edge_ghost: Vec::new(), edge_frag: Vec::new() }),
        })
    })?;
    if let Some((zs, _, walk)) = linked {
        local_stats.nodes_per_plane = zs.tree.planes.iter().map(|p| p.len).collect();
        local_stats.walk = walk;
        local_stats.scratch_bytes = zs.bytes() + 4 * n_local;
    }
    let groups = edges::resolve(on, b, &frags, &local, params.min_members as u64, &mut cs, &mut timings)?;

    // The catalogue: rows reduced on the home ranks, optionally gathered on rank 0.
    let mut cat = home::catalogue(on, b, &local, &frags, &groups, fields.particle_mass, domain.box_lengths(), params, &mut cs, &mut timings)?;
    let (n_rows, in_groups) = (cat.len() as u64, cat.count.iter().sum::<u64>());
    if scope == CatalogueScope::Root {
        cat = timings.time("dist gather", || home::gather_root(comm, cat, params.order, flags[0], params.members, &mut cs))?;
    }
    let totals = comm.sum_u64(&[n_rows, in_groups]);

    // Labels back to the ranks (and input rows) the particles came from.
    timings.time("dist labels", || -> Result<()> {
        let mine = comm.agree(b.gather(&groups.label, &frags.frag_of, 1))?;
        let back_here = back(on, b, "results", &route, &mine, 1, &mut cs)?;
        comm.agree(b.scatter_out(labels, &route.rows, &back_here, 1))
    })?;
    local_stats.groups_total = frags.n_frag;
    local_stats.timings = Timings { stages: timings.stages.clone() };
    Ok((
        cat,
        DistFofStats {
            local: local_stats,
            dist: DistStats { timings, comm: cs, owned: local.n_own, imported: n_ghost, exported },
            groups_total: groups.total,
            groups: totals[0] as usize,
            particles_in_groups: totals[1] as usize,
            edges: groups.n_edges,
        },
    ))
}
