//! Distributed DBSCAN on host arrays, composed from the distributed jobs as the serial one
//! (`api::dbscan`) is from the serial ones:
//! 1. core test: a distributed radius self-count within ε (its ghosts reach ε);
//! 2. clusters: distributed FoF over the core points (a view), their global indices as
//!    ids, so a cluster's *key* is its smallest core global index (min_pts = 2: FoF's
//!    groups of two or more over all points, keyed by their smallest global index);
//! 3. border points: a distributed radius query from the other points to the core
//!    points, nearest first with ties by global index (the single-rank order); the key of
//!    the nearest core point is fetched from the rank that passed it;
//! 4. the catalogue: every member goes to the rank that passed its cluster's key point,
//!    which reduces the row from the members in ascending global index (the single-rank
//!    order, so rows are bit for bit the serial ones); the tags go back to the members.

use rayon::prelude::*;

use super::dist::{fof_host, radius_host};
use crate::dbscan::{BorderPoints, DbscanCatalogue, DbscanParams, DbscanStats, PointClass};
use crate::error::{Result, check_len};
use crate::fof::catalogue::{Member, Row, assemble, reduce_group};
use crate::fof::{CatalogueOrder, FofFields, FofParams, LinkingLength};
use crate::geom::Real;
use crate::geom::metric::min_image;
use crate::input::subset::Subset;
use crate::input::{Domain, PointSource};
use crate::knn::SourceFields;
use crate::mpi::comm::{Outbox, Reader, Wire};
use crate::mpi::{CatalogueScope, CommStats, On, agree_params};
use crate::radius::{ListOrder, RadiusOutput, RadiusParams};

const NONE: u64 = u64::MAX;

/// Every rank's first global index, and the total (`counts`: per rank).
fn prefix(counts: &[u64]) -> Vec<u64> {
    std::iter::once(0)
        .chain(counts.iter().scan(0u64, |a, &c| {
            *a += c;
            Some(*a)
        }))
        .collect()
}

/// The rank whose input rows hold global index `g` (`offsets`: every rank's first).
fn rank_of(offsets: &[u64], g: u64) -> usize {
    offsets.partition_point(|&o| o <= g) - 1
}

fn param_words<T: Real, const D: usize>(domain: &Domain<D>, fields: &FofFields<'_, D>, params: &DbscanParams, scope: CatalogueScope) -> Vec<u64> {
    let (kind, eps) = match params.eps {
        LinkingLength::Absolute(x) => (0, x),
        LinkingLength::Relative(b) => (1, b),
    };
    let mut w = vec![
        kind,
        eps.to_bits(),
        params.min_pts as u64,
        params.min_members as u64,
        params.order as u64,
        params.members as u64,
        (params.border == BorderPoints::Noise) as u64,
        scope as u64,
        fields.velocities.is_some() as u64,
        fields.masses.is_some() as u64,
        fields.ids.is_some() as u64,
        fields.particle_mass.to_bits(),
        std::mem::size_of::<T>() as u64,
    ];
    w.extend(crate::mpi::domain_words(domain));
    w
}

/// Collective DBSCAN (`Dist::dbscan`): this rank's labels and classes in its input order;
/// the catalogue spread over the ranks (each cluster on the rank that passed its first
/// core point) or gathered on rank 0. The stats count this rank's particles, and the
/// clusters of all ranks. `global_of`: per point, the global index that names it in tags
/// (without ids) and member lists, ascending as the points' own (a subset's: the caller's
/// indices); None: the points' own global indices.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dbscan_host<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    on: On<'_>,
    domain: &Domain<D>,
    points: &P,
    fields: &FofFields<'_, D>,
    params: &DbscanParams,
    scope: CatalogueScope,
    labels: &mut [i64],
    class: Option<&mut [PointClass]>,
    global_of: Option<&[u64]>,
) -> Result<(DbscanCatalogue<D>, DbscanStats)> {
    let comm = on.comm;
    let n = points.len();
    let checks = (|| -> Result<()> {
        domain.validate()?;
        params.validate()?;
        check_len("labels output", labels.len(), n)?;
        if let Some(c) = class.as_deref() {
            check_len("class output", c.len(), n)?;
        }
        on.ctx.pool.install(|| fields.validate(n))
    })();
    if comm.size() == 1 && global_of.is_none() {
        checks?;
        return on.ctx.dbscan_into(domain, points, fields, params, labels, class);
    }
    agree_params(comm, "DBSCAN", checks.map(|_| param_words::<T, D>(domain, fields, params, scope)))?;
    let counts = comm.all_gather_u64(n as u64);
    let offsets = prefix(&counts);
    let (me, total) = (comm.rank(), offsets[counts.len()]);
    let lo = offsets[me];
    let eps = comm.agree(params.eps.resolve(domain, total as usize))?;
    let mut stats = DbscanStats { particles: n, eps, ..Default::default() };
    let mut cs = CommStats::default();
    let fof_params =
        |min_members| FofParams { linking_length: LinkingLength::Absolute(eps), min_members, order: CatalogueOrder::ZOrder, members: false };

    // Per particle: its cluster's key, or NONE; and whether it is core.
    let mut key = vec![NONE; n];
    let core: Vec<bool>;
    let mut border = vec![false; n];
    if params.min_pts == 2 {
        let t = std::time::Instant::now();
        let mut tags = vec![0i64; n];
        let (_, fst) = fof_host(on, domain, points, &FofFields::default(), &fof_params(2), CatalogueScope::Distributed, &mut tags, None)?;
        stats.scratch_bytes = fst.local.scratch_bytes + 8 * n;
        key.par_iter_mut().zip(tags.par_iter()).for_each(|(k, &t)| *k = if t < 0 { NONE } else { t as u64 });
        core = tags.par_iter().map(|&t| t >= 0).collect();
        stats.timings.stages.push(("clusters", t.elapsed().as_secs_f64()));
    } else {
        let t = std::time::Instant::now();
        let mut nbrs = vec![0i64; n];
        let (r, _) = radius_host(
            on,
            domain,
            points,
            None::<&P>,
            &SourceFields::default(),
            &RadiusParams { count_limit: params.min_pts as u64, ..RadiusParams::new(eps) },
            &mut RadiusOutput { counts: Some(&mut nbrs), ..Default::default() },
            None,
        )?;
        stats.scratch_bytes = r.stats.scratch_bytes + 8 * n;
        core = nbrs.par_iter().map(|&c| c as usize >= params.min_pts).collect();
        // Only a point with another point within ε can be a border point.
        let lonely: Vec<bool> = nbrs.par_iter().map(|&c| c <= 1).collect();
        drop(nbrs);
        let sel_core: Vec<u32> = (0..n as u32).filter(|&i| core[i as usize]).collect();
        stats.timings.stages.push(("core", t.elapsed().as_secs_f64()));

        let t = std::time::Instant::now();
        let ids: Vec<i64> = sel_core.iter().map(|&i| (lo + i as u64) as i64).collect();
        let view = Subset::new(points, &sel_core);
        let mut core_keys = vec![0i64; sel_core.len()];
        let ff = FofFields { ids: Some(&ids), ..Default::default() };
        let (_, fst) = fof_host(on, domain, &view, &ff, &fof_params(1), CatalogueScope::Distributed, &mut core_keys, None)?;
        stats.scratch_bytes = stats.scratch_bytes.max(fst.local.scratch_bytes + 16 * sel_core.len());
        for (j, &i) in sel_core.iter().enumerate() {
            key[i as usize] = core_keys[j] as u64;
        }
        stats.timings.stages.push(("clusters", t.elapsed().as_secs_f64()));

        // Border points: the key of the nearest core point within ε, from its rank.
        let t = std::time::Instant::now();
        let sel_other: Vec<u32> = (0..n as u32).filter(|&i| !core[i as usize] && !lonely[i as usize]).collect();
        let (sources, queries) = (Subset::new(points, &sel_core), Subset::new(points, &sel_other));
        let p = RadiusParams::new(eps).with_lists(ListOrder::Distance);
        let (r, _) = radius_host(on, domain, &sources, Some(&queries), &SourceFields::default(), &p, &mut RadiusOutput::default(), None)?;
        let lists = r.lists.expect("lists were asked for");
        stats.scratch_bytes = stats.scratch_bytes.max(r.stats.scratch_bytes + 8 * (lists.indices.len() + lists.offsets.len()));
        let core_counts = comm.all_gather_u64(sel_core.len() as u64);
        let core_offsets = prefix(&core_counts);
        let nearest: Vec<(u32, u64)> = (0..sel_other.len()).filter_map(|q| lists.of(q).first().map(|&c| (sel_other[q], c as u64))).collect();
        drop(lists);
        let mut asks = vec![Vec::new(); comm.size()];
        let mut asked_by_rank: Vec<Vec<u32>> = vec![Vec::new(); comm.size()];
        for &(i, c) in &nearest {
            let r = rank_of(&core_offsets, c);
            (c - core_offsets[r]).put(&mut asks[r]);
            asked_by_rank[r].push(i);
        }
        let got = comm.exchange("border keys", &Outbox::from_parts(asks), &mut cs)?;
        let replies: Vec<Vec<u8>> = (0..comm.size())
            .map(|r| {
                let mut rd = Reader::new(got.from(r));
                let mut out = Vec::new();
                while !rd.done() {
                    let j: u64 = rd.get();
                    (core_keys[j as usize] as u64).put(&mut out);
                }
                out
            })
            .collect();
        let back = comm.exchange("border keys", &Outbox::from_parts(replies), &mut cs)?;
        for (r, asked) in asked_by_rank.iter().enumerate() {
            let mut rd = Reader::new(back.from(r));
            for &i in asked {
                let k: u64 = rd.get();
                border[i as usize] = true;
                if params.border == BorderPoints::NearestCore {
                    key[i as usize] = k;
                }
            }
        }
        stats.timings.stages.push(("border", t.elapsed().as_secs_f64()));
    }
    stats.core = core.par_iter().filter(|&&c| c).count();
    stats.border = border.par_iter().filter(|&&b| b).count();
    stats.noise = n - stats.core - stats.border;
    if let Some(cl) = class {
        cl.par_iter_mut().zip(core.par_iter().zip(border.par_iter())).for_each(|(c, (&k, &b))| {
            *c = if k {
                PointClass::Core
            } else if b {
                PointClass::Border
            } else {
                PointClass::Noise
            }
        });
    }

    let t = std::time::Instant::now();
    let (cat, clusters) = catalogue(on, points, fields, params, scope, domain.box_lengths(), &offsets, &key, &core, labels, global_of, &mut cs)?;
    stats.clusters_total = clusters;
    stats.timings.stages.push(("catalogue", t.elapsed().as_secs_f64()));
    Ok((cat, stats))
}

/// A row with DBSCAN's own columns and the members' global indices.
struct Cluster<const D: usize> {
    row: Row<D>,
    core: u64,
    max_radius: f64,
    members: Vec<i64>,
}

/// Members to the ranks of their clusters' keys, the rows reduced there, the tags back
/// into `labels`. Returns the rows (spread, or on rank 0) and the clusters of all ranks.
#[allow(clippy::too_many_arguments)]
fn catalogue<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    on: On<'_>,
    points: &P,
    fields: &FofFields<'_, D>,
    params: &DbscanParams,
    scope: CatalogueScope,
    box_len: Option<[f64; D]>,
    offsets: &[u64],
    key: &[u64],
    core: &[bool],
    labels: &mut [i64],
    global_of: Option<&[u64]>,
    cs: &mut CommStats,
) -> Result<(DbscanCatalogue<D>, usize)> {
    let comm = on.comm;
    let (p, lo) = (comm.size(), offsets[comm.rank()]);
    let has_vel = fields.velocities.is_some();
    // Members, by home rank: key, global index, position, velocity, mass, id, core.
    let mut sends = vec![Vec::new(); p];
    let mut sent: Vec<Vec<u32>> = vec![Vec::new(); p];
    for (i, &k) in key.iter().enumerate() {
        if k == NONE {
            continue;
        }
        let r = rank_of(offsets, k);
        let b = &mut sends[r];
        let g = global_of.map_or(lo + i as u64, |v| v[i]);
        k.put(b);
        g.put(b);
        let x = points.point(i);
        (0..D).for_each(|d| x[d].to_f64().put(b));
        if let Some(v) = fields.velocities {
            v.get(i).iter().for_each(|&c| c.put(b));
        }
        fields.masses.map_or(fields.particle_mass, |m| m.get(i)).put(b);
        fields.ids.map_or(g as i64, |ids| ids.id(i)).put(b);
        (core[i] as u8).put(b);
        sent[r].push(i as u32);
    }
    let got = comm.exchange("catalogue members", &Outbox::from_parts(sends), cs)?;
    // (key, global index, member, core, source rank, position in its message)
    let mut recs: Vec<(u64, u64, Member<D>, bool, u32, u32)> = Vec::new();
    for r in 0..p {
        let mut rd = Reader::new(got.from(r));
        let mut at = 0u32;
        while !rd.done() {
            let k: u64 = rd.get();
            let g: u64 = rd.get();
            let pos: [f64; D] = std::array::from_fn(|_| rd.get());
            let vel: [f64; D] = if has_vel { std::array::from_fn(|_| rd.get()) } else { [0.0; D] };
            let mass: f64 = rd.get();
            let tag: i64 = rd.get();
            let c: u8 = rd.get();
            recs.push((k, g, Member { pos, vel, mass, tag }, c != 0, r as u32, at));
            at += 1;
        }
    }
    drop(got);
    recs.par_sort_unstable_by_key(|r| (r.0, r.1));
    let mut runs = vec![0usize];
    for i in 1..recs.len() {
        if recs[i].0 != recs[i - 1].0 {
            runs.push(i);
        }
    }
    if recs.is_empty() {
        runs.clear();
    } else {
        runs.push(recs.len());
    }
    let all: Vec<Option<Cluster<D>>> = runs
        .par_windows(2)
        .map(|w| {
            let m = &recs[w[0]..w[1]];
            if m.len() < params.min_members {
                return None;
            }
            let row = reduce_group(m.len(), |i| m[i].2, box_len, has_vel);
            let mut r2 = 0.0f64;
            for rec in m {
                let mut s = 0.0;
                for d in 0..D {
                    let mut x = rec.2.pos[d] - row.centre[d];
                    if let Some(l) = box_len {
                        x = min_image(x, l[d], 0.5 * l[d]);
                    }
                    s += x * x;
                }
                r2 = r2.max(s);
            }
            let core = m.iter().filter(|r| r.3).count() as u64;
            let members = if params.members { m.iter().map(|r| r.1 as i64).collect() } else { Vec::new() };
            Some(Cluster { row, core, max_radius: r2.sqrt(), members })
        })
        .collect();
    let clusters_here = runs.len().saturating_sub(1) as u64;
    // Tags back to the members, in the order they came.
    let mut count_from = vec![0usize; p];
    recs.iter().for_each(|r| count_from[r.4 as usize] += 1);
    let mut replies: Vec<Vec<i64>> = count_from.iter().map(|&c| vec![-1i64; c]).collect();
    for (c, w) in all.iter().zip(runs.windows(2)) {
        let tag = c.as_ref().map_or(-1, |c| c.row.tag);
        for rec in &recs[w[0]..w[1]] {
            replies[rec.4 as usize][rec.5 as usize] = tag;
        }
    }
    drop(recs);
    let msgs: Vec<Vec<u8>> = replies
        .iter()
        .map(|v| {
            let mut b = Vec::with_capacity(8 * v.len());
            v.iter().for_each(|&x| x.put(&mut b));
            b
        })
        .collect();
    let back = comm.exchange("catalogue labels", &Outbox::from_parts(msgs), cs)?;
    labels.par_iter_mut().for_each(|l| *l = -1);
    for (r, idx) in sent.iter().enumerate() {
        let mut rd = Reader::new(back.from(r));
        for &i in idx {
            labels[i as usize] = rd.get();
        }
    }
    let mut kept: Vec<Cluster<D>> = all.into_iter().flatten().collect();
    let clusters = comm.sum_u64(&[clusters_here])[0] as usize;
    if scope == CatalogueScope::Root {
        kept = gather_root(on, kept, cs)?;
    }
    Ok((build(kept, params, has_vel), clusters))
}

/// Every rank's clusters on rank 0, in rank order.
fn gather_root<const D: usize>(on: On<'_>, kept: Vec<Cluster<D>>, cs: &mut CommStats) -> Result<Vec<Cluster<D>>> {
    let comm = on.comm;
    let mut sends = vec![Vec::new(); comm.size()];
    let b = &mut sends[0];
    for c in &kept {
        let r = &c.row;
        r.tag.put(b);
        r.count.put(b);
        r.mass.put(b);
        r.centre.iter().for_each(|&x| x.put(b));
        r.radius.put(b);
        r.vel.iter().for_each(|&x| x.put(b));
        r.disp.put(b);
        c.core.put(b);
        c.max_radius.put(b);
        (c.members.len() as u64).put(b);
        c.members.iter().for_each(|&m| m.put(b));
    }
    drop(kept);
    let got = comm.exchange("catalogue gather", &Outbox::from_parts(sends), cs)?;
    let mut out = Vec::new();
    for r in 0..comm.size() {
        let mut rd = Reader::new(got.from(r));
        while !rd.done() {
            let row = Row {
                tag: rd.get(),
                count: rd.get(),
                mass: rd.get(),
                centre: std::array::from_fn(|_| rd.get()),
                radius: rd.get(),
                vel: std::array::from_fn(|_| rd.get()),
                disp: rd.get(),
            };
            let (core, max_radius) = (rd.get(), rd.get());
            let nm: u64 = rd.get();
            out.push(Cluster { row, core, max_radius, members: (0..nm).map(|_| rd.get()).collect() });
        }
    }
    Ok(out)
}

/// The catalogue of `kept` (ascending key order), in the order asked for.
fn build<const D: usize>(kept: Vec<Cluster<D>>, params: &DbscanParams, has_vel: bool) -> DbscanCatalogue<D> {
    let mut perm: Vec<usize> = (0..kept.len()).collect();
    if params.order == CatalogueOrder::Gadget {
        perm.sort_by(|&a, &b| kept[b].row.count.cmp(&kept[a].row.count).then(kept[a].row.tag.cmp(&kept[b].row.tag)).then(a.cmp(&b)));
    }
    let mut row_offsets = vec![0u64; perm.len() + 1];
    for (r, &k) in perm.iter().enumerate() {
        row_offsets[r + 1] = row_offsets[r] + kept[k].row.count;
    }
    let fill = |r: usize, out: &mut [i64]| out.copy_from_slice(&kept[perm[r]].members);
    let mut rows = assemble(
        perm.iter().map(|&k| kept[k].row).collect(),
        CatalogueOrder::ZOrder,
        has_vel,
        params.members.then_some((&row_offsets[..], &fill as &(dyn Fn(usize, &mut [i64]) + Sync))),
    );
    rows.order = params.order;
    DbscanCatalogue { core_count: perm.iter().map(|&k| kept[k].core).collect(), max_radius: perm.iter().map(|&k| kept[k].max_radius).collect(), rows }
}

/// Collective DBSCAN over a subset of each rank's particles (`subset`: strictly ascending
/// input indices; type masks in the C API): the others take no part (label -1, class
/// noise), and tags without ids and member lists are the caller's global indices, as
/// `Context::dbscan_subset_into` on one rank.
#[allow(clippy::too_many_arguments)]
pub(crate) fn dbscan_subset_host<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    on: On<'_>,
    domain: &Domain<D>,
    points: &P,
    fields: &FofFields<'_, D>,
    params: &DbscanParams,
    subset: &[u32],
    scope: CatalogueScope,
    labels: &mut [i64],
    class: Option<&mut [PointClass]>,
) -> Result<(DbscanCatalogue<D>, DbscanStats)> {
    let n = points.len();
    let checks = (|| -> Result<()> {
        check_len("labels output", labels.len(), n)?;
        if let Some(c) = class.as_deref() {
            check_len("class output", c.len(), n)?;
        }
        fields.validate(n)?;
        on.ctx.pool.install(|| super::subset::check_subset(subset, n))
    })();
    let checks = on.comm.agree(checks);
    let global = on.global_indices(n, subset);
    checks?;
    let views = super::subset::FieldViews::new(fields, subset);
    let mut sub = vec![0i64; subset.len()];
    let mut sub_class = class.as_ref().map(|_| vec![PointClass::Noise; subset.len()]);
    let (cat, mut stats) =
        dbscan_host(on, domain, &Subset::new(points, subset), &views.fields(), params, scope, &mut sub, sub_class.as_deref_mut(), Some(&global))?;
    stats.noise += n - subset.len();
    stats.particles = n;
    super::subset::scatter_labels(&sub, subset, labels, false);
    if let (Some(c), Some(s)) = (class, sub_class) {
        c.par_iter_mut().for_each(|x| *x = PointClass::Noise);
        for (j, &i) in subset.iter().enumerate() {
            c[i as usize] = s[j];
        }
    }
    Ok((cat, stats))
}
