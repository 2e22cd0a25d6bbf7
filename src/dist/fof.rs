//! Distributed FoF. Each rank links what it owns together with ghost copies of the
//! particles within the linking length of its key range (sent in the decomposition's
//! all-to-all), so every linked pair is found on the owner of one of its ends. A local
//! group containing a ghost becomes an *edge* to the ghost's owner, which names the
//! ghost's own local group; the edges (few: only groups crossing rank boundaries) are
//! gathered on every rank and resolved by one union–find. The catalogue row of a group
//! spread over ranks is merged on its *home* rank (the rank holding its first particle in
//! z-order) from per-rank partial rows, combined with the parallel-axis theorem, so each
//! halo appears exactly once.

use std::collections::HashMap;

use rayon::prelude::*;

use super::comm::{Outbox, Reader, Wire};
use super::{Decomp, Dist, DistStats, On, agree_params, agree_points, domain_words, route_records};
use super::catalogue::{CatalogueScope, Part, build_catalogue, gather_root, merge, partial_rows};
use crate::catalogue::Catalogue;
use crate::context::Timings;
use crate::error::{Error, Result, check_len};
use crate::fof::{FofFields, FofParams, FofStats, LinkingLength, link, validate_fields};
use crate::points::{Domain, PointSource};
use crate::real::Real;

/// What a distributed FoF call did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DistFofStats {
    /// The local linking over owned particles and ghosts.
    pub local: FofStats,
    pub dist: DistStats,
    /// Connected components over all ranks, singletons included.
    pub groups_total: usize,
    /// Catalogue rows over all ranks.
    pub groups: usize,
    pub particles_in_groups: usize,
    /// Cross-rank edges resolved by the global union–find.
    pub edges: usize,
}

const NONE: u32 = u32::MAX;

impl Dist {
    /// Collective friends-of-friends over the particles of all ranks. `labels` gets, in
    /// this rank's input order, each particle's halo tag (the group's minimum particle id,
    /// or its minimum global input index without ids) or -1. The catalogue is spread over
    /// the ranks or gathered on rank 0 (`scope`); member lists hold global input indices.
    pub fn fof<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, T, D>,
        params: &FofParams,
        scope: CatalogueScope,
        labels: &mut [i64],
    ) -> Result<(Catalogue<D>, DistFofStats)> {
        fof(self.on(), domain, points, fields, params, scope, labels)
    }
}

fn param_words<T: Real, const D: usize>(domain: &Domain<D>, fields: &FofFields<'_, T, D>, params: &FofParams, scope: CatalogueScope) -> Vec<u64> {
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

#[allow(clippy::too_many_arguments)]
pub(crate) fn fof<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    dist: On<'_>,
    domain: &Domain<D>,
    points: &P,
    fields: &FofFields<'_, T, D>,
    params: &FofParams,
    scope: CatalogueScope,
    labels: &mut [i64],
) -> Result<(Catalogue<D>, DistFofStats)> {
    let comm = dist.comm;
    let pool = &dist.ctx.pool;
    let (p, me, n) = (comm.size(), comm.rank(), points.len());
    let mut timings = Timings::default();
    let mut cs = super::CommStats::default();
    let checks = (|| -> Result<()> {
        if params.min_members < 1 {
            return Err(Error::InvalidParameter { name: "min_members", why: "must be at least 1".into() });
        }
        check_len("labels output", labels.len(), n)?;
        pool.install(|| validate_fields(fields, n))
    })();
    if p == 1 {
        // One rank: the serial engine gives the same results without the exchanges.
        checks?;
        let (cat, local) = dist.ctx.fof_into(domain, points, fields, params, labels)?;
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
    agree_params(comm, "FoF", checks.map(|_| param_words(domain, fields, params, scope)))?;
    let keys = timings.time("dist keys", || agree_points(dist, domain, points, Ok(())))?;
    // Resolved with the global count, so b means the same on every rank.
    let l = comm.agree(params.linking_length.resolve(domain, keys.total as usize))?;
    let box_len = domain.box_lengths();
    let (has_vel, has_mass) = (fields.velocities.is_some(), fields.masses.is_some());
    if keys.total == 0 {
        let stats = DistFofStats { local: FofStats { linking_length: l, ..Default::default() }, ..Default::default() };
        return Ok((Catalogue::empty(params.order, has_vel), stats));
    }
    let decomp = timings.time("dist split", || Decomp::build(comm, pool, domain, keys.quant, &keys.keys, keys.total));

    // Owned records to the owner of each key, ghost copies to the ranks within l.
    let owners: Vec<u32> = pool.install(|| keys.keys.par_iter().map(|&k| decomp.owner(k) as u32).collect());
    let tsz = std::mem::size_of::<T>();
    let own_rec = D * tsz + 16 + if has_mass { 8 } else { 0 } + if has_vel { D * tsz } else { 0 };
    let mut lap = std::time::Instant::now();
    let ghost_rec = D * tsz + 8;
    let outbox = pool.install(|| {
        route_records(
            n,
            p,
            me,
            &owners,
            own_rec,
            |i, w| {
                let gidx = keys.offset + i as u64;
                points.point(i).iter().for_each(|&c| w.real(c));
                w.put(gidx);
                w.put(fields.ids.map_or(gidx as i64, |ids| ids.id(i)));
                if let Some(m) = fields.masses {
                    w.put(m.get(i));
                }
                if let Some(v) = fields.velocities {
                    v.point(i).iter().for_each(|&c| w.real(c));
                }
            },
            ghost_rec,
            Some(|i: usize, near: &mut Vec<u32>| {
                let x = points.point(i);
                let xf: [f64; D] = std::array::from_fn(|d| x[d].to_f64());
                decomp.near_ranks(&xf, keys.keys[i], l, owners[i] as usize, near);
            }),
            |i, w| {
                points.point(i).iter().for_each(|&c| w.real(c));
                w.put(keys.offset + i as u64);
            },
        )
    });
    let own_sent: usize = (0..p).map(|r| u64::get(&outbox.buf[outbox.offsets[r]..]) as usize).sum();
    let exported = (outbox.buf.len() - 8 * p - own_sent * own_rec) / ghost_rec;
    timings.lap("dist route", &mut lap);
    let recv = timings.time("dist exchange", || comm.exchange("decompose+ghosts", &outbox, &mut cs))?;
    drop(outbox);
    lap = std::time::Instant::now();
    let mut from_count = vec![0usize; p];
    let mut n_ghost = 0;
    for (r, cnt) in from_count.iter_mut().enumerate() {
        let m = recv.from(r);
        *cnt = u64::get(m) as usize;
        n_ghost += (m.len() - 8 - *cnt * own_rec) / ghost_rec;
    }
    // This rank's own particles that stay: read in place, between lower and higher ranks'.
    let stay: Vec<u32> = (0..n as u32).filter(|&i| owners[i as usize] as usize == me).collect();
    from_count[me] = stay.len();
    let n_own: usize = from_count.iter().sum();
    let mut pos: Vec<[T; D]> = Vec::with_capacity(n_own + n_ghost);
    let mut gidx: Vec<u64> = Vec::with_capacity(n_own);
    let mut tag: Vec<i64> = Vec::with_capacity(n_own);
    let mut mass: Vec<f64> = Vec::with_capacity(if has_mass { n_own } else { 0 });
    let mut vel: Vec<[T; D]> = Vec::with_capacity(if has_vel { n_own } else { 0 });
    let mut ghost_gidx: Vec<u64> = Vec::with_capacity(n_ghost);
    // Keys of the local set under the global quantizer (the stayers' are known).
    let mut ukeys: Vec<u64> = Vec::with_capacity(n_own + n_ghost);
    let mut ghost_pos: Vec<[T; D]> = Vec::with_capacity(n_ghost);
    for (r, &cnt) in from_count.iter().enumerate() {
        let mut rd = Reader::new(&recv.from(r)[8..]);
        if r == me {
            for &i in &stay {
                let i = i as usize;
                let g = keys.offset + i as u64;
                ukeys.push(keys.keys[i]);
                pos.push(points.point(i));
                gidx.push(g);
                tag.push(fields.ids.map_or(g as i64, |ids| ids.id(i)));
                if let Some(m) = fields.masses {
                    mass.push(m.get(i));
                }
                if let Some(v) = fields.velocities {
                    vel.push(v.point(i));
                }
            }
        }
        for _ in 0..(if r == me { 0 } else { cnt }) {
            let x: [T; D] = std::array::from_fn(|_| rd.real::<T>());
            ukeys.push(decomp.quant.key(&std::array::from_fn(|d| x[d].to_f64())));
            pos.push(x);
            gidx.push(rd.get());
            tag.push(rd.get());
            if has_mass {
                mass.push(rd.get());
            }
            if has_vel {
                vel.push(std::array::from_fn(|_| rd.real::<T>()));
            }
        }
        while !rd.done() {
            ghost_pos.push(std::array::from_fn(|_| rd.real::<T>()));
            ghost_gidx.push(rd.get());
        }
    }
    drop(recv);
    ukeys.extend(ghost_pos.iter().map(|x| decomp.quant.key(&std::array::from_fn(|d| x[d].to_f64()))));
    pos.extend_from_slice(&ghost_pos);
    drop(ghost_pos);
    drop(keys.keys);
    timings.lap("dist parse", &mut lap);

    // Local linking over owned particles and ghosts.
    let mut local = FofStats { particles: n_own, linking_length: l, ..Default::default() };
    let mut frag_of_particle = vec![NONE; n_own];
    let mut n_frag = 0usize;
    // Per fragment (local group restricted to owned particles): the ghosts it reached.
    let mut edges_out: Vec<Vec<u8>> = vec![Vec::new(); p];
    let mut zo: Vec<u32> = Vec::new(); // owned indices in z-order
    let mut frag_z: Vec<u32> = Vec::new(); // their fragments
    let mut lt = Timings::default();
    let tree_params = dist.ctx.config.tree;
    // Agreed, so a local failure never strands the other ranks in the next exchange.
    let linked = comm.agree(if pos.is_empty() { Ok(None) } else { pool.install(|| link(domain, &pos, Some(ukeys), l, &tree_params, &mut lt)).map(Some) })?;
    if let Some((zs, roots, walk)) = linked {
        lap = std::time::Instant::now();
        local.nodes_per_plane = zs.tree.planes.iter().map(|p| p.len).collect();
        local.walk = walk;
        local.scratch_bytes = zs.bytes() + 4 * pos.len();
        let nu = pos.len();
        let mut frag_of_root = vec![NONE; nu];
        zo.reserve(n_own);
        frag_z.reserve(n_own);
        for z in 0..nu {
            let u = zs.src_orig[z] as usize;
            if u < n_own {
                let r = roots[z] as usize;
                if frag_of_root[r] == NONE {
                    frag_of_root[r] = n_frag as u32;
                    n_frag += 1;
                }
                frag_z.push(frag_of_root[r]);
                zo.push(u as u32);
            }
        }
        // Fragments reaching ghosts: an edge to the ghost's owner for each such ghost.
        for z in 0..nu {
            let u = zs.src_orig[z] as usize;
            if u >= n_own {
                let f = frag_of_root[roots[z] as usize];
                if f != NONE {
                    let x: [f64; D] = std::array::from_fn(|d| pos[u][d].to_f64());
                    let o = decomp.owner(decomp.quant.key(&x));
                    (f as u64).put(&mut edges_out[o]);
                    ghost_gidx[u - n_own].put(&mut edges_out[o]);
                }
            }
        }
        timings.stages.extend(lt.stages);
    }
    pos.truncate(n_own);
    let frag_counts = comm.all_gather_u64(n_frag as u64);
    let frag_base: u64 = frag_counts[..me].iter().sum();
    let frag_rank = |f: u64| -> usize {
        let mut acc = 0;
        for (r, &c) in frag_counts.iter().enumerate() {
            acc += c;
            if f < acc {
                return r;
            }
        }
        p - 1
    };
    // Edges: (fragment here, ghost gidx) -> owner of the ghost, who names its fragment.
    for b in edges_out.iter_mut() {
        // Fragment ids become global before they leave.
        let mut out = Vec::with_capacity(b.len());
        let mut rd = Reader::new(b);
        while !rd.done() {
            (frag_base + rd.get::<u64>()).put(&mut out);
            rd.get::<u64>().put(&mut out);
        }
        *b = out;
    }
    let recv = timings.time("dist edges", || comm.exchange("fof edges", &Outbox::from_parts(std::mem::take(&mut edges_out)), &mut cs))?;
    drop(edges_out);
    let mut frag_count = vec![0u64; n_frag];
    let mut frag_tag = vec![i64::MAX; n_frag];
    for (&f, &u) in frag_z.iter().zip(&zo) {
        frag_count[f as usize] += 1;
        frag_tag[f as usize] = frag_tag[f as usize].min(tag[u as usize]);
        frag_of_particle[u as usize] = f;
    }
    let mut pairs = Vec::new();
    for r in 0..p {
        let mut rd = Reader::new(recv.from(r));
        while !rd.done() {
            let a: u64 = rd.get();
            let g: u64 = rd.get();
            let u = gidx.partition_point(|&x| x < g);
            debug_assert!(u < n_own && gidx[u] == g);
            let f = frag_of_particle[u];
            (a).put(&mut pairs);
            (frag_base + f as u64).put(&mut pairs);
        }
    }
    drop(recv);
    // Global resolution: every rank learns every edge and the count and tag of every
    // fragment on an edge, and runs the same union–find.
    let gathered = timings.time("dist resolve", || comm.all_gather_bytes("fof edge gather", &pairs, &mut cs))?;
    let mut ids: HashMap<u64, usize> = HashMap::new();
    let mut list: Vec<u64> = Vec::new();
    let mut edges: Vec<(usize, usize)> = Vec::new();
    {
        let mut rd = Reader::new(&gathered.buf);
        while !rd.done() {
            let a: u64 = rd.get();
            let b: u64 = rd.get();
            let mut id = |x: u64| *ids.entry(x).or_insert_with(|| {
                list.push(x);
                list.len() - 1
            });
            let (ia, ib) = (id(a), id(b));
            edges.push((ia, ib));
        }
    }
    drop(gathered);
    let n_edges = edges.len();
    // Counts and tags of the involved fragments this rank holds.
    let mut info = Vec::new();
    for &f in &list {
        if f >= frag_base && f < frag_base + n_frag as u64 {
            let lf = (f - frag_base) as usize;
            f.put(&mut info);
            frag_count[lf].put(&mut info);
            frag_tag[lf].put(&mut info);
        }
    }
    let infos = comm.all_gather_bytes("fof fragment info", &info, &mut cs)?;
    let mut parent: Vec<usize> = (0..list.len()).collect();
    fn find(parent: &mut [usize], mut x: usize) -> usize {
        while parent[x] != x {
            parent[x] = parent[parent[x]];
            x = parent[x];
        }
        x
    }
    for &(a, b) in &edges {
        let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
        if ra != rb {
            // Root: the smaller global fragment id (the group's home).
            if list[ra] < list[rb] { parent[rb] = ra } else { parent[ra] = rb }
        }
    }
    let mut set_count = vec![0u64; list.len()];
    let mut set_tag = vec![i64::MAX; list.len()];
    {
        let mut rd = Reader::new(&infos.buf);
        while !rd.done() {
            let f: u64 = rd.get();
            let c: u64 = rd.get();
            let t: i64 = rd.get();
            let r = find(&mut parent, ids[&f]);
            set_count[r] += c;
            set_tag[r] = set_tag[r].min(t);
        }
    }
    drop(infos);
    let merged_away: usize = (0..list.len()).filter(|&i| find(&mut parent, i) != i).count();
    // Per local fragment: final tag, total count, home fragment (global id).
    let min = params.min_members as u64;
    // Only fragments on an edge change; the others are whole groups (home: themselves).
    let (mut f_tag, mut f_count) = (frag_tag, frag_count);
    let mut f_home: HashMap<usize, u64> = HashMap::new();
    for i in 0..list.len() {
        let f = list[i];
        if f >= frag_base && f < frag_base + n_frag as u64 {
            let lf = (f - frag_base) as usize;
            let r = find(&mut parent, i);
            f_tag[lf] = set_tag[r];
            f_count[lf] = set_count[r];
            f_home.insert(lf, list[r]);
        }
    }
    let home_of = |f: usize| f_home.get(&f).copied().unwrap_or(frag_base + f as u64);
    let frag_label: Vec<i64> = (0..n_frag).map(|f| if f_count[f] >= min { f_tag[f] } else { -1 }).collect();

    // Catalogue: partial rows of the kept fragments, merged on the home ranks.
    let kept = |f: usize| f_count[f] >= min;
    let mut sel: Vec<u32> = Vec::new(); // owned, kept, in z-order
    let mut sel_frag: Vec<u32> = Vec::new();
    for (&f, &u) in frag_z.iter().zip(&zo) {
        if kept(f as usize) {
            sel.push(u);
            sel_frag.push(f);
        }
    }
    drop(frag_z);
    timings.lap("dist fragments", &mut lap);
    let cat_parts: Vec<(usize, Part<D>, Vec<i64>)> = timings.time("catalogue", || {
        partial_rows(pool, &pos, &sel, &sel_frag, n_frag, &tag, &gidx, has_mass.then_some(&mass), has_vel.then_some(&vel), fields.particle_mass, box_len, params.members)
    });
    let mut to_home: Vec<Vec<u8>> = vec![Vec::new(); p];
    let mut rows: Vec<(u64, Vec<Part<D>>, Vec<i64>)> = Vec::new(); // (home fragment, parts, members)
    let mut home_row: HashMap<u64, usize> = HashMap::new();
    for (f, part, members) in cat_parts {
        let home = home_of(f);
        let hr = frag_rank(home);
        if hr == me {
            let i = *home_row.entry(home).or_insert_with(|| {
                rows.push((home, Vec::new(), Vec::new()));
                rows.len() - 1
            });
            // The home fragment first: it is the reference of the merge.
            if home == frag_base + f as u64 { rows[i].1.insert(0, part) } else { rows[i].1.push(part) }
            rows[i].2.extend(members);
        } else {
            let b = &mut to_home[hr];
            home.put(b);
            part.put(b);
            (members.len() as u64).put(b);
            members.iter().for_each(|m| m.put(b));
        }
    }
    let recv = timings.time("dist catalogue", || comm.exchange("catalogue parts", &Outbox::from_parts(std::mem::take(&mut to_home)), &mut cs))?;
    drop(to_home);
    for r in 0..p {
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
    drop(recv);
    rows.sort_by_key(|r| r.0);
    let merged: Vec<(Part<D>, Vec<i64>)> = rows
        .into_iter()
        .map(|(_, parts, mut members)| {
            members.sort_unstable();
            (if parts.len() == 1 { parts[0] } else { merge(&parts, box_len) }, members)
        })
        .collect();
    let n_rows = merged.len() as u64;
    let in_groups: u64 = merged.iter().map(|r| r.0.count).sum();
    let mut cat = build_catalogue(merged, params.order, has_vel, params.members);
    if scope == CatalogueScope::Root {
        cat = timings.time("dist gather", || gather_root(comm, cat, params.order, has_vel, params.members, &mut cs))?;
    }
    let totals = comm.sum_u64(&[n_rows, in_groups]);

    // Labels back to the ranks (and input rows) the particles came from.
    lap = std::time::Instant::now();
    // The stayers' labels are written in place; the others travel back.
    let mut back = vec![Vec::new(); p];
    let mut u = 0;
    for (r, &cnt) in from_count.iter().enumerate() {
        if r == me {
            u += cnt;
            continue;
        }
        back[r].reserve(8 * cnt);
        for _ in 0..cnt {
            frag_label[frag_of_particle[u] as usize].put(&mut back[r]);
            u += 1;
        }
    }
    let recv = timings.time("dist results", || comm.exchange("results", &Outbox::from_parts(std::mem::take(&mut back)), &mut cs))?;
    let mut readers: Vec<Reader<'_>> = (0..p).map(|r| Reader::new(recv.from(r))).collect();
    let mut stay_u = from_count[..me].iter().sum::<usize>();
    for (i, &o) in owners.iter().enumerate() {
        labels[i] = if o as usize == me {
            stay_u += 1;
            frag_label[frag_of_particle[stay_u - 1] as usize]
        } else {
            readers[o as usize].get()
        };
    }
    timings.lap("dist labels", &mut lap);
    let frag_total: u64 = frag_counts.iter().sum();
    local.groups_total = n_frag;
    local.timings = Timings { stages: timings.stages.clone() };
    Ok((
        cat,
        DistFofStats {
            local,
            dist: DistStats { timings, comm: cs, owned: n_own, imported: n_ghost, exported },
            groups_total: (frag_total as usize) - merged_away,
            groups: totals[0] as usize,
            particles_in_groups: totals[1] as usize,
            edges: n_edges,
        },
    ))
}
