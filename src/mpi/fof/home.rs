//! The catalogue of a distributed FoF call: per-rank partial rows of the groups (sums that
//! merge with the parallel-axis theorem), merged on each group's home rank, and
//! optionally gathered on rank 0.

use std::collections::HashMap;

use super::super::comm::{Comm, Outbox, Reader, Wire};
use super::super::{CommStats, On};
use super::edges::{Fragments, Groups};
use super::ghosts::Local;
use crate::api::Timings;
use crate::backend::cpu::{DisjointSlice, catalogue};
use crate::error::Result;
use crate::fof::{Catalogue, CatalogueOrder, FofParams};
use crate::geom::Real;
use crate::geom::metric::min_image;
use crate::input::{ParticleIds, PointSource, ScalarField};

const NONE: u32 = u32::MAX;

/// Where the catalogue rows of a distributed FoF call end up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CatalogueScope {
    /// Each halo on one rank: the rank holding its first particle in z-order.
    #[default]
    Distributed,
    /// The whole catalogue on rank 0 (other ranks get an empty one).
    Root,
}

/// A catalogue row as partial sums that merge exactly (parallel-axis theorem).
#[derive(Clone, Copy)]
struct Part<const D: usize> {
    pub tag: i64,
    pub count: u64,
    pub mass: f64,
    pub centre: [f64; D],
    /// Σ m |x - centre|² (= mass · inertia_radius²).
    s_x: f64,
    vel: [f64; D],
    /// Σ m |v - vel|².
    s_v: f64,
}

impl<const D: usize> Part<D> {
    fn put(&self, b: &mut Vec<u8>) {
        self.tag.put(b);
        self.count.put(b);
        self.mass.put(b);
        self.centre.iter().for_each(|c| c.put(b));
        self.s_x.put(b);
        self.vel.iter().for_each(|c| c.put(b));
        self.s_v.put(b);
    }
    fn get(rd: &mut Reader<'_>) -> Self {
        Self {
            tag: rd.get(),
            count: rd.get(),
            mass: rd.get(),
            centre: std::array::from_fn(|_| rd.get()),
            s_x: rd.get(),
            vel: std::array::from_fn(|_| rd.get()),
            s_v: rd.get(),
        }
    }
}

/// Merges partial rows (the first is the reference for the periodic minimum image).
fn merge<const D: usize>(parts: &[Part<D>], box_len: Option<[f64; D]>) -> Part<D> {
    let c0 = parts[0].centre;
    let mass: f64 = parts.iter().map(|p| p.mass).sum();
    let off = |p: &Part<D>| -> [f64; D] {
        std::array::from_fn(|d| {
            let dx = p.centre[d] - c0[d];
            match box_len {
                Some(l) => min_image(dx, l[d], 0.5 * l[d]),
                None => dx,
            }
        })
    };
    let mut mean = [0.0f64; D];
    let mut vel = [0.0f64; D];
    for p in parts {
        let o = off(p);
        for d in 0..D {
            mean[d] += p.mass * o[d];
            vel[d] += p.mass * p.vel[d];
        }
    }
    mean.iter_mut().for_each(|m| *m /= mass);
    vel.iter_mut().for_each(|v| *v /= mass);
    let (mut s_x, mut s_v) = (0.0, 0.0);
    for p in parts {
        let o = off(p);
        let (mut qx, mut qv) = (0.0, 0.0);
        for d in 0..D {
            qx += (o[d] - mean[d]).powi(2);
            qv += (p.vel[d] - vel[d]).powi(2);
        }
        s_x += p.s_x + p.mass * qx;
        s_v += p.s_v + p.mass * qv;
    }
    let centre = std::array::from_fn(|d| {
        let c = c0[d] + mean[d];
        match box_len {
            Some(l) => {
                let w = c.rem_euclid(l[d]);
                if w >= l[d] { 0.0 } else { w }
            }
            None => c,
        }
    });
    Part { tag: parts.iter().map(|p| p.tag).min().unwrap(), count: parts.iter().map(|p| p.count).sum(), mass, centre, s_x, vel, s_v }
}

/// Partial rows of the kept fragments present on this rank, in z-order of their first
/// particle here: (local fragment, row, member global indices when asked for).
#[allow(clippy::too_many_arguments)]
fn partial_rows<T: Real, const D: usize>(
    pool: &rayon::ThreadPool,
    pos: &[[T; D]],
    sel: &[u32],
    sel_frag: &[u32],
    n_frag: usize,
    tag: &Vec<i64>,
    gidx: &[u64],
    mass: Option<&Vec<f64>>,
    vel: Option<&Vec<[T; D]>>,
    particle_mass: f64,
    box_len: Option<[f64; D]>,
    members: bool,
) -> Vec<(usize, Part<D>, Vec<i64>)> {
    if sel.is_empty() {
        return Vec::new();
    }
    // Roots in the selection's z-order: the index of each fragment's first selected point.
    let mut first = vec![NONE; n_frag];
    let mut roots = Vec::with_capacity(sel.len());
    let mut frags = Vec::new();
    for (j, &f) in sel_frag.iter().enumerate() {
        let f = f as usize;
        if first[f] == NONE {
            first[f] = j as u32;
            frags.push(f);
        }
        roots.push(first[f]);
    }
    let soa: [Vec<T>; D] = std::array::from_fn(|d| sel.iter().map(|&u| pos[u as usize][d]).collect());
    let mut scratch = vec![0i64; pos.len()];
    let scratch = DisjointSlice::new(&mut scratch);
    let red = catalogue::Reduce {
        pos: &soa,
        orig: sel,
        roots: &roots,
        box_len,
        velocities: vel.map(|v| v as &dyn PointSource<T, D>),
        masses: mass.map(|m| m as &dyn ScalarField),
        particle_mass,
        ids: Some(tag as &dyn ParticleIds),
        min_members: 1,
        order: CatalogueOrder::ZOrder,
        members,
    };
    let mut t = Timings::default();
    let (cat, _) = pool.install(|| catalogue::reduce(&red, &scratch, &mut t));
    (0..cat.len())
        .map(|g| {
            let part = Part {
                tag: cat.tag[g],
                count: cat.count[g],
                mass: cat.mass[g],
                centre: cat.centre[g],
                s_x: cat.mass[g] * cat.inertia_radius[g] * cat.inertia_radius[g],
                vel: if vel.is_some() { cat.velocity[g] } else { [0.0; D] },
                s_v: if vel.is_some() { cat.mass[g] * cat.dispersion[g] * cat.dispersion[g] } else { 0.0 },
            };
            let m = if members { cat.members(g).iter().map(|&u| gidx[u as usize] as i64).collect() } else { Vec::new() };
            (frags[g], part, m)
        })
        .collect()
}

fn build_catalogue<const D: usize>(mut rows: Vec<(Part<D>, Vec<i64>)>, order: CatalogueOrder, vel: bool, members: bool) -> Catalogue<D> {
    if order == CatalogueOrder::Gadget {
        rows.sort_by(|a, b| b.0.count.cmp(&a.0.count).then(a.0.tag.cmp(&b.0.tag)));
    }
    let mut c = Catalogue::empty(order, vel);
    if members {
        c.member_offsets.push(0);
    }
    for (r, m) in rows {
        c.tag.push(r.tag);
        c.count.push(r.count);
        c.mass.push(r.mass);
        c.centre.push(r.centre);
        c.inertia_radius.push((r.s_x / r.mass).sqrt());
        if vel {
            c.velocity.push(r.vel);
            c.dispersion.push((r.s_v / r.mass).sqrt());
        }
        if members {
            c.member_indices.extend(m);
            c.member_offsets.push(c.member_indices.len() as u64);
        }
    }
    c
}

/// The whole catalogue on rank 0, rows in global z-order (or GADGET order).
pub(crate) fn gather_root<const D: usize>(comm: &Comm, cat: Catalogue<D>, order: CatalogueOrder, vel: bool, members: bool, cs: &mut CommStats) -> Result<Catalogue<D>> {
    let mut sends = vec![Vec::new(); comm.size()];
    let b = &mut sends[0];
    for g in 0..cat.len() {
        let part = Part {
            tag: cat.tag[g],
            count: cat.count[g],
            mass: cat.mass[g],
            centre: cat.centre[g],
            s_x: cat.mass[g] * cat.inertia_radius[g].powi(2),
            vel: if vel { cat.velocity[g] } else { [0.0; D] },
            s_v: if vel { cat.mass[g] * cat.dispersion[g].powi(2) } else { 0.0 },
        };
        // Radius and dispersion travel as such (bit-exact), not as sums.
        part.put(b);
        cat.inertia_radius[g].put(b);
        (if vel { cat.dispersion[g] } else { 0.0 }).put(b);
        let m = cat.members(g);
        (m.len() as u64).put(b);
        m.iter().for_each(|x| x.put(b));
    }
    let recv = comm.exchange("catalogue gather", &Outbox::from_parts(sends), cs)?;
    let mut out = Catalogue::empty(order, vel);
    if members {
        out.member_offsets.push(0);
    }
    if comm.rank() != 0 {
        return Ok(out);
    }
    let mut rows: Vec<(Part<D>, f64, f64, Vec<i64>)> = Vec::new();
    for r in 0..comm.size() {
        let mut rd = Reader::new(recv.from(r));
        while !rd.done() {
            let part = Part::<D>::get(&mut rd);
            let radius: f64 = rd.get();
            let disp: f64 = rd.get();
            let nm: u64 = rd.get();
            rows.push((part, radius, disp, (0..nm).map(|_| rd.get()).collect()));
        }
    }
    if order == CatalogueOrder::Gadget {
        rows.sort_by(|a, b| b.0.count.cmp(&a.0.count).then(a.0.tag.cmp(&b.0.tag)));
    }
    for (r, radius, disp, m) in rows {
        out.tag.push(r.tag);
        out.count.push(r.count);
        out.mass.push(r.mass);
        out.centre.push(r.centre);
        out.inertia_radius.push(radius);
        if vel {
            out.velocity.push(r.vel);
            out.dispersion.push(disp);
        }
        if members {
            out.member_indices.extend(m);
            out.member_offsets.push(out.member_indices.len() as u64);
        }
    }
    Ok(out)
}

/// This rank's catalogue rows: the partial rows of its kept fragments, sent to the home
/// rank of their group and merged there (the home fragment's row is the reference of the
/// periodic merge), in global z-order of the homes.
#[allow(clippy::too_many_arguments)]
pub(super) fn catalogue<T: Real, const D: usize>(
    on: On<'_>,
    local: &Local<T, D>,
    frags: &Fragments,
    groups: &Groups,
    (has_vel, has_mass): (bool, bool),
    particle_mass: f64,
    box_len: Option<[f64; D]>,
    params: &FofParams,
    cs: &mut CommStats,
    timings: &mut Timings,
) -> Result<Catalogue<D>> {
    let (comm, me) = (on.comm, on.comm.rank());
    let kept = |f: usize| groups.count[f] >= params.min_members as u64;
    let mut sel: Vec<u32> = Vec::new(); // owned, kept, in z-order
    let mut sel_frag: Vec<u32> = Vec::new();
    for (&f, &u) in frags.frag_z.iter().zip(&frags.zo) {
        if kept(f as usize) {
            sel.push(u);
            sel_frag.push(f);
        }
    }
    let pos = &local.pos[..local.n_own];
    let parts = timings.time("catalogue", || {
        partial_rows(&on.ctx.pool, pos, &sel, &sel_frag, frags.n_frag, &local.tag, &local.gidx, has_mass.then_some(&local.mass), has_vel.then_some(&local.vel), particle_mass, box_len, params.members)
    });
    let mut to_home: Vec<Vec<u8>> = vec![Vec::new(); comm.size()];
    let mut rows: Vec<(u64, Vec<Part<D>>, Vec<i64>)> = Vec::new(); // (home fragment, parts, members)
    let mut home_row: HashMap<u64, usize> = HashMap::new();
    for (f, part, members) in parts {
        let home = groups.home[f];
        let hr = groups.rank_of(home);
        if hr == me {
            let i = *home_row.entry(home).or_insert_with(|| {
                rows.push((home, Vec::new(), Vec::new()));
                rows.len() - 1
            });
            // The home fragment first: it is the reference of the merge.
            if home == groups.frag_base + f as u64 { rows[i].1.insert(0, part) } else { rows[i].1.push(part) }
            rows[i].2.extend(members);
        } else {
            let b = &mut to_home[hr];
            home.put(b);
            part.put(b);
            (members.len() as u64).put(b);
            members.iter().for_each(|m| m.put(b));
        }
    }
    let recv = timings.time("dist catalogue", || comm.exchange("catalogue parts", &Outbox::from_parts(to_home), cs))?;
    for r in 0..comm.size() {
        let mut rd = Reader::new(recv.from(r));
        while !rd.done() {
            let home: u64 = rd.get();
            let part = Part::<D>::get(&mut rd);
            let nm: u64 = rd.get();
            let i = home_row[&home];
            rows[i].1.push(part);
            for _ in 0..nm {
                rows[i].2.push(rd.get());
            }
        }
    }
    rows.sort_by_key(|r| r.0);
    let merged: Vec<(Part<D>, Vec<i64>)> = rows
        .into_iter()
        .map(|(_, parts, mut members)| {
            members.sort_unstable();
            (if parts.len() == 1 { parts[0] } else { merge(&parts, box_len) }, members)
        })
        .collect();
    Ok(build_catalogue(merged, params.order, has_vel, params.members))
}
