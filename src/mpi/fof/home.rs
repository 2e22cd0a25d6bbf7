//! The catalogue of a distributed FoF call. A group held by one rank is reduced there; the
//! members of a group spread over ranks are sent to its home rank (the rank of its
//! smallest fragment id: its first particle in z-order) and reduced there. Either way the
//! row comes from `fof::catalogue::reduce_group` over all the group's members in ascending
//! global index, exactly as in a single-rank call, so rows are bit-identical for any rank
//! count. Rows can then be gathered on rank 0.

use std::collections::HashMap;

use super::super::comm::{Comm, Outbox, Reader, Wire};
use super::super::{CommStats, On};
use super::Local;
use super::edges::Groups;
use crate::backend::dist::{DistOps, Fragments, GroupFields};
use crate::base::Timings;
use crate::error::Result;
use crate::fof::catalogue::{Member, Row, assemble, reduce_group};
use crate::fof::{Catalogue, CatalogueOrder, FofParams};
use crate::geom::Real;

/// Where the catalogue rows of a distributed FoF call end up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CatalogueScope {
    /// Each halo on one rank: the rank holding its first particle in z-order.
    #[default]
    Distributed,
    /// The whole catalogue on rank 0 (other ranks get an empty one).
    Root,
}

fn put_row<const D: usize>(r: &Row<D>, b: &mut Vec<u8>) {
    r.tag.put(b);
    r.count.put(b);
    r.mass.put(b);
    r.centre.iter().for_each(|c| c.put(b));
    r.radius.put(b);
    r.vel.iter().for_each(|c| c.put(b));
    r.disp.put(b);
}

fn get_row<const D: usize>(rd: &mut Reader<'_>) -> Row<D> {
    Row {
        tag: rd.get(),
        count: rd.get(),
        mass: rd.get(),
        centre: std::array::from_fn(|_| rd.get()),
        radius: rd.get(),
        vel: std::array::from_fn(|_| rd.get()),
        disp: rd.get(),
    }
}

/// A member on its way to its group's home: global index and what the row reads.
fn put_member<const D: usize>(g: u64, m: &Member<D>, b: &mut Vec<u8>) {
    g.put(b);
    m.pos.iter().for_each(|c| c.put(b));
    m.vel.iter().for_each(|c| c.put(b));
    m.mass.put(b);
    m.tag.put(b);
}

fn get_member<const D: usize>(rd: &mut Reader<'_>) -> (u64, Member<D>) {
    let g = rd.get();
    (g, Member { pos: std::array::from_fn(|_| rd.get()), vel: std::array::from_fn(|_| rd.get()), mass: rd.get(), tag: rd.get() })
}

/// The catalogue of rows in z-order of their homes, each with its member list (empty
/// unless `members`).
fn build_catalogue<const D: usize>(rows: Vec<(Row<D>, Vec<i64>)>, order: CatalogueOrder, vel: bool, members: bool) -> Catalogue<D> {
    let (rows, lists): (Vec<Row<D>>, Vec<Vec<i64>>) = rows.into_iter().unzip();
    let offsets: Vec<u64> = std::iter::once(0)
        .chain(lists.iter().scan(0u64, |acc, l| {
            *acc += l.len() as u64;
            Some(*acc)
        }))
        .collect();
    let fill = |g: usize, dst: &mut [i64]| dst.copy_from_slice(&lists[g]);
    assemble(rows, order, vel, members.then_some((&offsets[..], &fill as &(dyn Fn(usize, &mut [i64]) + Sync))))
}

/// The whole catalogue on rank 0, rows in global z-order (or GADGET order).
pub(crate) fn gather_root<const D: usize>(
    comm: &Comm,
    cat: Catalogue<D>,
    order: CatalogueOrder,
    vel: bool,
    members: bool,
    cs: &mut CommStats,
) -> Result<Catalogue<D>> {
    let mut sends = vec![Vec::new(); comm.size()];
    let b = &mut sends[0];
    for g in 0..cat.len() {
        let row = Row {
            tag: cat.tag[g],
            count: cat.count[g],
            mass: cat.mass[g],
            centre: cat.centre[g],
            radius: cat.inertia_radius[g],
            vel: if vel { cat.velocity[g] } else { [0.0; D] },
            disp: if vel { cat.dispersion[g] } else { 0.0 },
        };
        put_row(&row, b);
        let m = cat.members(g);
        (m.len() as u64).put(b);
        m.iter().for_each(|x| x.put(b));
    }
    let recv = comm.exchange("catalogue gather", &Outbox::from_parts(sends), cs)?;
    if comm.rank() != 0 {
        return Ok(build_catalogue(Vec::new(), order, vel, members));
    }
    let mut rows: Vec<(Row<D>, Vec<i64>)> = Vec::new();
    for r in 0..comm.size() {
        let mut rd = Reader::new(recv.from(r));
        while !rd.done() {
            let row = get_row::<D>(&mut rd);
            let nm: u64 = rd.get();
            rows.push((row, (0..nm).map(|_| rd.get()).collect()));
        }
    }
    Ok(build_catalogue(rows, order, vel, members))
}

/// This rank's catalogue rows, in global z-order of their homes.
#[allow(clippy::too_many_arguments)]
pub(super) fn catalogue<B: DistOps, T: Real, const D: usize>(
    on: On<'_>,
    b: &B,
    local: &Local<B, T, D>,
    frags: &Fragments<B>,
    groups: &Groups<B>,
    particle_mass: f64,
    box_len: Option<[f64; D]>,
    params: &FofParams,
    cs: &mut CommStats,
    timings: &mut Timings,
) -> Result<Catalogue<D>> {
    let (comm, pool, me) = (on.comm, &on.ctx.pool, on.comm.rank());
    let has_vel = local.vel.is_some();
    let min = params.min_members as u64;
    let fields = GroupFields { pos: &local.pos, vel: local.vel.as_ref(), mass: local.mass.as_ref(), particle_mass, tag: &local.tag, box_len };
    // Kept fragments (groups of at least `min` members over all ranks), in fragment order
    // (z-order of their first particle): a whole group is reduced here, the members of a
    // group spread over ranks go to its home.
    let local_rows = timings.time("catalogue", || {
        comm.agree(pool.install(|| -> Result<_> {
            let kept = b.kept_fragments(&groups.count, min)?;
            let (whole, split): (Vec<u32>, Vec<u32>) = kept.iter().partition(|f| !groups.home_of.contains_key(f));
            // One grouping for both: the whole groups first, then the split ones.
            let nw = whole.len();
            let selected: Vec<u32> = whole.iter().chain(&split).copied().collect();
            let group_of = b.select_groups(&frags.frag_of, frags.n_frag, &selected)?;
            let (all_offsets, all_members) = b.group_members(&group_of, selected.len())?;
            let rows = b.group_rows(&all_members, &all_offsets[..=nw], &fields)?;
            let ids = if params.members {
                let whole_members = b.upload_host((0..all_offsets[nw] as u32).collect())?;
                Some((all_offsets[..=nw].to_vec(), b.to_host(&b.gather(&local.gidx, &b.gather(&all_members, &whole_members, 1)?, 1)?)?.into_owned()))
            } else {
                None
            };
            let mut out: Vec<(u64, Row<D>, Vec<i64>)> = Vec::with_capacity(rows.len());
            for (g, row) in rows.into_iter().enumerate() {
                let m = ids.as_ref().map_or(Vec::new(), |(o, gi)| gi[o[g] as usize..o[g + 1] as usize].iter().map(|&x| x as i64).collect());
                out.push((groups.frag_base + whole[g] as u64, row, m));
            }
            // The members of split groups, for their homes.
            let (lo, hi) = (all_offsets[nw], all_offsets[selected.len()]);
            let members = b.gather(&all_members, &b.upload_host((lo as u32..hi as u32).collect())?, 1)?;
            let offsets: Vec<u64> = all_offsets[nw..].iter().map(|&o| o - lo).collect();
            let host = |v: &B::Buf<f64>| -> Result<Vec<f64>> { Ok(b.to_host(&b.gather(v, &members, 1)?)?.into_owned()) };
            let pos = b.to_host(&b.gather(&local.pos, &members, 1)?)?.into_owned();
            let vel: Option<Vec<Vec<f64>>> = local.vel.as_ref().map(|v| v.iter().map(host).collect::<Result<_>>()).transpose()?;
            let mass = local.mass.as_ref().map(host).transpose()?;
            let tag = b.to_host(&b.gather(&local.tag, &members, 1)?)?.into_owned();
            let gidx = b.to_host(&b.gather(&local.gidx, &members, 1)?)?.into_owned();
            let mut sent = Vec::with_capacity(split.len());
            for (g, &f) in split.iter().enumerate() {
                let home = groups.home_of[&f];
                let ms: Vec<(u64, Member<D>)> = (offsets[g] as usize..offsets[g + 1] as usize)
                    .map(|j| {
                        let m = Member {
                            pos: std::array::from_fn(|d| pos[j][d].to_f64()),
                            vel: vel.as_ref().map_or([0.0; D], |v| std::array::from_fn(|d| v[d][j])),
                            mass: mass.as_ref().map_or(particle_mass, |m| m[j]),
                            tag: tag[j],
                        };
                        (gidx[j], m)
                    })
                    .collect();
                sent.push((home, ms));
            }
            Ok((out, sent))
        }))
    })?;
    let (mut rows, sent) = local_rows;
    let mut split: HashMap<u64, Vec<(u64, Member<D>)>> = HashMap::new();
    let mut to_home: Vec<Vec<u8>> = vec![Vec::new(); comm.size()];
    for (home, ms) in sent {
        if groups.rank_of(home) == me {
            split.entry(home).or_default().extend(ms);
        } else {
            let b = &mut to_home[groups.rank_of(home)];
            home.put(b);
            (ms.len() as u64).put(b);
            ms.iter().for_each(|(g, m)| put_member(*g, m, b));
        }
    }
    let recv = timings.time("dist catalogue", || comm.exchange("catalogue members", &Outbox::from_parts(to_home), cs))?;
    for r in 0..comm.size() {
        let mut rd = Reader::new(recv.from(r));
        while !rd.done() {
            let home: u64 = rd.get();
            let nm: u64 = rd.get();
            let e = split.entry(home).or_default();
            for _ in 0..nm {
                e.push(get_member(&mut rd));
            }
        }
    }
    for (home, mut ms) in split {
        ms.sort_unstable_by_key(|m| m.0);
        let row = reduce_group(ms.len(), |i| ms[i].1, box_len, has_vel);
        let ids = if params.members { ms.iter().map(|m| m.0 as i64).collect() } else { Vec::new() };
        rows.push((home, row, ids));
    }
    rows.sort_unstable_by_key(|r| r.0);
    Ok(build_catalogue(rows.into_iter().map(|(_, r, m)| (r, m)).collect(), params.order, has_vel, params.members))
}
