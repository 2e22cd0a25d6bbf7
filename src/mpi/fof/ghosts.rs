//! The FoF decomposition exchange: every particle to the owner of its key, and a ghost
//! copy (position, global index) to every other rank whose key range comes within the
//! linking length, in the same all-to-all.

use super::super::comm::SliceWriter;
use super::super::decomp::Decomp;
use super::super::route::{Arrival, Keys, route};
use super::super::{CommStats, On};
use crate::api::Timings;
use crate::error::Result;
use crate::fof::FofFields;
use crate::geom::Real;
use crate::input::PointSource;

/// What a rank links: its owned particles (global order) followed by the ghosts.
pub(super) struct Local<T, const D: usize> {
    /// Owned positions, then ghost positions.
    pub pos: Vec<[T; D]>,
    /// Their keys under the agreed quantizer.
    pub keys: Vec<u64>,
    pub n_own: usize,
    /// Per owned particle: global input index, tag (id, or the global index), mass,
    /// velocity (the last two when given).
    pub gidx: Vec<u64>,
    pub tag: Vec<i64>,
    pub mass: Vec<f64>,
    pub vel: Vec<[f64; D]>,
    /// Per ghost: its global input index.
    pub ghost_gidx: Vec<u64>,
}

/// How this rank's input was routed (for sending labels back).
pub(super) struct Route {
    pub owners: Vec<u32>,
    pub from_count: Vec<usize>,
    pub n_ghost: usize,
    pub exported: usize,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn exchange<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    on: On<'_>,
    decomp: &Decomp<D>,
    keys: &Keys,
    points: &P,
    fields: &FofFields<'_, D>,
    l: f64,
    cs: &mut CommStats,
    timings: &mut Timings,
) -> Result<(Local<T, D>, Route)> {
    use rayon::prelude::*;
    let me = on.comm.rank();
    let owners: Vec<u32> = on.ctx.pool.install(|| keys.keys.par_iter().map(|&k| decomp.owner(k) as u32).collect());
    let (has_vel, has_mass) = (fields.velocities.is_some(), fields.masses.is_some());
    let tsz = std::mem::size_of::<T>();
    let own_rec = D * tsz + 16 + if has_mass { 8 } else { 0 } + if has_vel { D * 8 } else { 0 };
    let ghost_rec = D * tsz + 8;
    let exported = std::sync::atomic::AtomicUsize::new(0);
    let arr = timings.time("dist exchange", || {
        route(
            on,
            "decompose+ghosts",
            &owners,
            own_rec,
            |i, w: &mut SliceWriter<'_>| {
                let g = keys.offset + i as u64;
                points.point(i).iter().for_each(|&c| w.real(c));
                w.put(g);
                w.put(fields.ids.map_or(g as i64, |ids| ids.id(i)));
                if let Some(m) = fields.masses {
                    w.put(m.get(i));
                }
                if let Some(v) = fields.velocities {
                    v.get(i).iter().for_each(|&c| w.put(c));
                }
            },
            ghost_rec,
            Some(|i: usize, near: &mut Vec<u32>| {
                let x = points.point(i);
                let xf: [f64; D] = std::array::from_fn(|d| x[d].to_f64());
                decomp.near_ranks(&xf, keys.keys[i], l, owners[i] as usize, near);
                exported.fetch_add(near.len(), std::sync::atomic::Ordering::Relaxed);
            }),
            |i, w: &mut SliceWriter<'_>| {
                points.point(i).iter().for_each(|&c| w.real(c));
                w.put(keys.offset + i as u64);
            },
            cs,
        )
    })?;
    let t = std::time::Instant::now();
    let n_own = arr.owned();
    let mut loc = Local {
        pos: Vec::with_capacity(n_own),
        keys: Vec::with_capacity(n_own),
        n_own,
        gidx: Vec::with_capacity(n_own),
        tag: Vec::with_capacity(n_own),
        mass: Vec::with_capacity(if has_mass { n_own } else { 0 }),
        vel: Vec::with_capacity(if has_vel { n_own } else { 0 }),
        ghost_gidx: Vec::new(),
    };
    let mut ghost_pos: Vec<[T; D]> = Vec::new();
    arr.visit(me, |rec| match rec {
        Arrival::Stayer(i) => {
            let g = keys.offset + i as u64;
            loc.keys.push(keys.keys[i]);
            loc.pos.push(points.point(i));
            loc.gidx.push(g);
            loc.tag.push(fields.ids.map_or(g as i64, |ids| ids.id(i)));
            if let Some(m) = fields.masses {
                loc.mass.push(m.get(i));
            }
            if let Some(v) = fields.velocities {
                loc.vel.push(v.get(i));
            }
        }
        Arrival::Owned(rd) => {
            let x: [T; D] = std::array::from_fn(|_| rd.real::<T>());
            loc.keys.push(decomp.quant.key(&std::array::from_fn(|d| x[d].to_f64())));
            loc.pos.push(x);
            loc.gidx.push(rd.get());
            loc.tag.push(rd.get());
            if has_mass {
                loc.mass.push(rd.get());
            }
            if has_vel {
                loc.vel.push(std::array::from_fn(|_| rd.get::<f64>()));
            }
        }
        Arrival::Ghost(rd) => {
            ghost_pos.push(std::array::from_fn(|_| rd.real::<T>()));
            loc.ghost_gidx.push(rd.get());
        }
    });
    let n_ghost = ghost_pos.len();
    loc.keys.extend(ghost_pos.iter().map(|x| decomp.quant.key(&std::array::from_fn(|d| x[d].to_f64()))));
    loc.pos.extend_from_slice(&ghost_pos);
    timings.stages.push(("dist parse", t.elapsed().as_secs_f64()));
    Ok((loc, Route { owners, from_count: arr.from_count, n_ghost, exported: exported.into_inner() }))
}
