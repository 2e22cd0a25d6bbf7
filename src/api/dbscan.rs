//! `Context::dbscan`: DBSCAN composed from the exact jobs, with O(n) memory beyond one kNN
//! pass and no neighbour lists kept:
//! 1. core test: a self kNN with k = min_pts; a point is core when its k nearest are all
//!    within ε (FoF's f64 test on each candidate);
//! 2. clusters: FoF over the core points (a view, nothing copied) with linking length ε;
//! 3. border points: a kNN from the other points to the core points, nearest first;
//! 4. tags, the catalogue and the member lists from the final labels.
//!
//! The kNN ranks candidates by distance in the input precision, FoF's test is in f64:
//! where a decision rests on distances within rounding of ε or of each other (a lattice
//! of spacing ε, exact duplicates at ε, f32 input), the query is asked again with twice
//! the candidates until the decision is certain, so results are exact in every case.

use rayon::prelude::*;

use super::Context;
use crate::dbscan::{BorderPoints, Dbscan, DbscanCatalogue, DbscanParams, DbscanStats, PointClass};
use crate::error::{Result, check_len};
use crate::fof::catalogue::{Member, Row, assemble, reduce_group};
use crate::fof::{CatalogueOrder, FofFields, FofParams, LinkingLength};
use crate::geom::Real;
use crate::geom::metric::{Metric, Open, Periodic, min_image};
use crate::input::subset::Subset;
use crate::input::validate::check_point;
use crate::input::{Domain, PointSource};
use crate::knn::{KnnOutput, KnnParams, SourceFields};

impl Context {
    /// DBSCAN clusters of `points` (see [`crate::dbscan`] for the definitions): per
    /// particle a cluster tag (the minimum id, or input index, of its members) or -1, the
    /// class of each particle, and the catalogue of clusters with at least
    /// `params.min_members` members.
    pub fn dbscan<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        params: &DbscanParams,
    ) -> Result<Dbscan<D>> {
        let n = points.len();
        let mut labels = vec![0i64; n];
        let mut class = vec![PointClass::Noise; n];
        let (catalogue, stats) = self.dbscan_into(domain, points, fields, params, &mut labels, Some(&mut class))?;
        Ok(Dbscan { labels, class, catalogue, stats })
    }

    /// [`Context::dbscan`] into caller buffers: `labels` (and `class`, when given) of
    /// `points.len()` entries.
    pub fn dbscan_into<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        params: &DbscanParams,
        labels: &mut [i64],
        class: Option<&mut [PointClass]>,
    ) -> Result<(DbscanCatalogue<D>, DbscanStats)> {
        self.pool.install(|| run(self, domain, points, fields, params, labels, class))
    }
}

/// Distances in f64 as FoF evaluates them, and how far the kNN's distances (in the input
/// precision) may be from them.
struct Exact<'a, T, const D: usize, P: ?Sized> {
    points: &'a P,
    periodic: Option<Periodic<f64, D>>,
    /// Absolute and relative error of a kNN distance.
    err_abs: f64,
    err_rel: f64,
    _t: std::marker::PhantomData<T>,
}

impl<T: Real, const D: usize, P: PointSource<T, D> + ?Sized> Exact<'_, T, D, P> {
    fn pos(&self, i: usize) -> [f64; D] {
        let p = self.points.point(i);
        std::array::from_fn(|d| p[d].to_f64())
    }
    fn d2(&self, i: usize, j: usize) -> f64 {
        let (a, b) = (self.pos(i), self.pos(j));
        match &self.periodic {
            Some(m) => m.dist2(&a, &b),
            None => Metric::<f64, D>::dist2(&Open, &a, &b),
        }
    }
    /// The least f64 distance of a point the kNN ranked at distance `d` or beyond.
    fn lower(&self, d: f64) -> f64 {
        d - self.err_abs - self.err_rel * d
    }
}

fn run<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    ctx: &Context,
    domain: &Domain<D>,
    points: &P,
    fields: &FofFields<'_, D>,
    params: &DbscanParams,
    labels: &mut [i64],
    class: Option<&mut [PointClass]>,
) -> Result<(DbscanCatalogue<D>, DbscanStats)> {
    domain.validate()?;
    params.validate()?;
    let n = points.len();
    let eps = params.eps.resolve(domain, n)?;
    check_len("labels output", labels.len(), n)?;
    if let Some(c) = class.as_deref() {
        check_len("class output", c.len(), n)?;
    }
    fields.validate(n)?;
    let mut stats = DbscanStats { particles: n, eps, ..Default::default() };
    let empty =
        |order| DbscanCatalogue { rows: crate::fof::Catalogue::empty(order, fields.velocities.is_some()), core_count: vec![], max_radius: vec![] };
    if n == 0 {
        return Ok((empty(params.order), stats));
    }
    // The points' check (finite, inside a periodic box) and their largest coordinate.
    crate::input::validate::check_domain::<T, D>(domain)?;
    let box_len = domain.box_lengths();
    let max_abs = (0..n)
        .into_par_iter()
        .map(|i| check_point(&points.point(i), i, "points", box_len.as_ref()).map(|p| p.iter().fold(0.0f64, |a, c| a.max(c.abs()))))
        .try_reduce(|| 0.0, |a, b| Ok(a.max(b)))?;
    let max_abs = box_len.map_or(max_abs, |l| l.iter().fold(max_abs, |a, &b| a.max(b)));
    // Rounding of a distance computed in T: a few units in the last place of the largest
    // coordinate (differences, periodic shifts) and of the distance (squares, sums, root).
    let unit = if T::IS_F64 { 1e-14 } else { 1e-6 };
    let ex =
        Exact { points, periodic: box_len.map(|l| Periodic::new(&l)), err_abs: 4.0 * unit * max_abs, err_rel: 4.0 * unit, _t: Default::default() };
    let eps2 = eps * eps;

    const NONE: u32 = u32::MAX;
    let fof_params =
        |min_members| FofParams { linking_length: LinkingLength::Absolute(eps), min_members, order: CatalogueOrder::ZOrder, members: false };
    let mut comp = vec![NONE; n];
    let mut n_comp = 0usize;
    // Per non-core point (in input order): its nearest core point within ε, or NONE.
    let mut nearest: Vec<(u32, u32)> = Vec::new();
    let core: Vec<bool>;
    if params.min_pts == 2 {
        // A point is core when any other point is within ε: when its FoF group has two
        // members or more. The clusters are those groups, and there are no border points.
        let t = std::time::Instant::now();
        let (cat, fst) = ctx.fof_into(domain, points, &FofFields::default(), &fof_params(2), labels)?;
        stats.scratch_bytes = stats.scratch_bytes.max(fst.scratch_bytes + 4 * n);
        let mut row_of = vec![NONE; n];
        for (r, &tag) in cat.tag.iter().enumerate() {
            row_of[tag as usize] = r as u32;
        }
        n_comp = cat.len();
        comp.par_iter_mut().zip(labels.par_iter()).for_each(|(c, &l)| *c = if l < 0 { NONE } else { row_of[l as usize] });
        core = comp.par_iter().map(|&c| c != NONE).collect();
        stats.timings.stages.push(("clusters", t.elapsed().as_secs_f64()));
    } else {
        // 1. The core test.
        let t = std::time::Instant::now();
        let cp = core_points(ctx, domain, &ex, params.min_pts, eps, eps2)?;
        stats.rechecked += cp.rechecked;
        stats.scratch_bytes = stats.scratch_bytes.max(cp.bytes);
        core = cp.core;
        let sel_core: Vec<u32> = (0..n as u32).filter(|&i| core[i as usize]).collect();
        stats.timings.stages.push(("core", t.elapsed().as_secs_f64()));

        // 2. Clusters of the core points: FoF's components over the view, in z-order.
        let t = std::time::Instant::now();
        if !sel_core.is_empty() {
            let view = Subset::new(points, &sel_core);
            let mut core_labels = vec![0i64; sel_core.len()];
            let (cat, fst) = ctx.fof_into(domain, &view, &FofFields::default(), &fof_params(1), &mut core_labels)?;
            stats.scratch_bytes = stats.scratch_bytes.max(cp.bytes + fst.scratch_bytes + 8 * sel_core.len());
            // Without ids a core group's tag is its smallest view index: the row it has.
            let mut row_of = vec![NONE; sel_core.len()];
            for (r, &tag) in cat.tag.iter().enumerate() {
                row_of[tag as usize] = r as u32;
            }
            n_comp = cat.len();
            for (j, &l) in core_labels.iter().enumerate() {
                comp[sel_core[j] as usize] = row_of[l as usize];
            }
        }
        stats.timings.stages.push(("clusters", t.elapsed().as_secs_f64()));

        // 3. Border points: the cluster of the nearest core point within ε. A point found
        // non-core in the first kNN pass holds its whole ε-neighbourhood among its
        // candidates (the k-th lies beyond ε): the nearest core point is one of them.
        let t = std::time::Instant::now();
        let k = cp.k;
        let from_lists: Vec<(u32, u32)> = (0..n)
            .into_par_iter()
            .filter(|&i| !core[i] && cp.listed[i])
            .filter_map(|i| {
                let (mut best, mut best_j) = (f64::INFINITY, NONE);
                for &j in &cp.lists[i * k..(i + 1) * k] {
                    let j = j as usize;
                    if core[j] {
                        let d2 = ex.d2(i, j);
                        if d2 <= eps2 && (d2 < best || (d2 == best && (j as u32) < best_j)) {
                            (best, best_j) = (d2, j as u32);
                        }
                    }
                }
                (best_j != NONE).then_some((i as u32, best_j))
            })
            .collect();
        drop(cp.lists);
        nearest = from_lists;
        // The others (decided in a later, wider pass): a kNN to the core points.
        let sel_other: Vec<u32> = (0..n as u32).filter(|&i| !core[i as usize] && !cp.listed[i as usize]).collect();
        if !sel_other.is_empty() && !sel_core.is_empty() {
            let mut near = vec![NONE; sel_other.len()];
            let (rechecked, bytes) = nearest_core(ctx, domain, &ex, &sel_core, &sel_other, eps2, &mut near)?;
            stats.rechecked += rechecked;
            stats.scratch_bytes = stats.scratch_bytes.max(bytes);
            nearest.extend(sel_other.iter().zip(&near).filter(|(_, c)| **c != NONE).map(|(&i, &c)| (i, c)));
        }
        stats.timings.stages.push(("border", t.elapsed().as_secs_f64()));
    }
    stats.clusters_total = n_comp;
    stats.border = nearest.len();
    if params.border == BorderPoints::NearestCore {
        for &(i, c) in &nearest {
            comp[i as usize] = comp[c as usize];
        }
    }
    stats.core = core.par_iter().filter(|&&c| c).count();
    stats.noise = n - stats.core - stats.border;
    if let Some(cl) = class {
        cl.par_iter_mut().zip(core.par_iter()).for_each(|(c, &k)| *c = if k { PointClass::Core } else { PointClass::Noise });
        for &(i, _) in &nearest {
            cl[i as usize] = PointClass::Border;
        }
    }

    // 4. Members (ascending input index), tags, rows.
    let t = std::time::Instant::now();
    let cat = catalogue(points, fields, params, box_len, &comp, &core, n_comp, labels);
    stats.timings.stages.push(("catalogue", t.elapsed().as_secs_f64()));
    Ok((cat, stats))
}

/// The core test's results.
struct CorePoints {
    core: Vec<bool>,
    /// The first pass's candidates (`k` per point) and which points it decided.
    lists: Vec<i64>,
    k: usize,
    listed: Vec<bool>,
    rechecked: usize,
    bytes: usize,
}

/// Which points are core: a self kNN with `k = min_pts`, then the undecided queries again
/// with twice the candidates.
fn core_points<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    ctx: &Context,
    domain: &Domain<D>,
    ex: &Exact<'_, T, D, P>,
    min_pts: usize,
    eps: f64,
    eps2: f64,
) -> Result<CorePoints> {
    let n = ex.points.len();
    if n < min_pts {
        // Fewer points than min_pts: none is core, and all are each other's candidates.
        let lists = (0..n).flat_map(|_| 0..n as i64).collect();
        return Ok(CorePoints { core: vec![false; n], lists, k: n, listed: vec![true; n], rechecked: 0, bytes: 8 * n * n });
    }
    // None: undecided.
    let mut core: Vec<Option<bool>> = vec![None; n];
    let mut ask: Vec<u32> = (0..n as u32).collect();
    let (mut k, mut rechecked, mut bytes) = (min_pts, 0usize, 0usize);
    let mut first = true;
    let mut lists = Vec::new();
    let mut listed = Vec::new();
    while !ask.is_empty() {
        let rows = ask.len() * k;
        let mut idx = vec![0i64; rows];
        let mut kth = vec![T::ZERO; ask.len()];
        bytes = bytes.max(rows * 8 + ask.len() * std::mem::size_of::<T>());
        let mut out = KnnOutput { indices: Some(&mut idx), kth_distance: Some(&mut kth), ..Default::default() };
        let kp = KnnParams::new(k);
        if first {
            ctx.knn_self(domain, ex.points, &SourceFields::default(), &kp, &mut out)?;
        } else {
            ctx.knn(domain, ex.points, &Subset::new(ex.points, &ask), &SourceFields::default(), &kp, &mut out)?;
        }
        let all = k >= n;
        let decided: Vec<Option<bool>> = (0..ask.len())
            .into_par_iter()
            .map(|q| {
                let i = ask[q] as usize;
                let within = idx[q * k..(q + 1) * k].iter().filter(|&&j| ex.d2(i, j as usize) <= eps2).count();
                if within >= min_pts {
                    Some(true)
                } else if all || ex.lower(kth[q].to_f64()) > eps {
                    Some(false)
                } else {
                    None
                }
            })
            .collect();
        let mut again = Vec::new();
        for (q, d) in decided.into_iter().enumerate() {
            match d {
                Some(c) => core[ask[q] as usize] = Some(c),
                None => again.push(ask[q]),
            }
        }
        rechecked += if first { 0 } else { ask.len() };
        if first {
            listed = core.par_iter().map(|c| c.is_some()).collect();
            lists = idx;
        }
        ask = again;
        k = (2 * k).min(n);
        first = false;
    }
    Ok(CorePoints { core: core.into_iter().map(|c| c == Some(true)).collect(), lists, k: min_pts, listed, rechecked, bytes })
}

/// For each point of `other` (not core), the nearest core point (input index; ties: the
/// smaller) when it is within ε, else `u32::MAX`.
#[allow(clippy::too_many_arguments)]
fn nearest_core<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    ctx: &Context,
    domain: &Domain<D>,
    ex: &Exact<'_, T, D, P>,
    core: &[u32],
    other: &[u32],
    eps2: f64,
    nearest: &mut [u32],
) -> Result<(usize, usize)> {
    let sources = Subset::new(ex.points, core);
    let mut ask: Vec<u32> = (0..other.len() as u32).collect();
    let (mut k, mut rechecked, mut bytes) = (2usize.min(core.len()), 0usize, 0usize);
    let mut first = true;
    let eps = eps2.sqrt();
    while !ask.is_empty() {
        let qsel: Vec<u32> = ask.iter().map(|&q| other[q as usize]).collect();
        let queries = Subset::new(ex.points, &qsel);
        let rows = ask.len() * k;
        let mut idx = vec![0i64; rows];
        let mut kth = vec![T::ZERO; ask.len()];
        bytes = bytes.max(rows * 8 + ask.len() * (8 + std::mem::size_of::<T>()));
        let mut out = KnnOutput { indices: Some(&mut idx), kth_distance: Some(&mut kth), ..Default::default() };
        ctx.knn(domain, &sources, &queries, &SourceFields::default(), &KnnParams::new(k), &mut out)?;
        let all = k >= core.len();
        let decided: Vec<Option<u32>> = (0..ask.len())
            .into_par_iter()
            .map(|q| {
                let i = qsel[q] as usize;
                // The nearest candidate in FoF's metric, ties to the smaller input index
                // (the view's order is the input order).
                let (mut best, mut best_j) = (f64::INFINITY, u32::MAX);
                for &j in &idx[q * k..(q + 1) * k] {
                    let c = core[j as usize];
                    let d2 = ex.d2(i, c as usize);
                    if d2 < best || (d2 == best && c < best_j) {
                        (best, best_j) = (d2, c);
                    }
                }
                let lower = ex.lower(kth[q].to_f64());
                if all || lower > best.sqrt() {
                    Some(if best <= eps2 { best_j } else { u32::MAX })
                } else if lower > eps && best > eps2 {
                    Some(u32::MAX)
                } else {
                    None
                }
            })
            .collect();
        let mut again = Vec::new();
        for (q, d) in decided.into_iter().enumerate() {
            match d {
                Some(c) => nearest[ask[q] as usize] = c,
                None => again.push(ask[q]),
            }
        }
        rechecked += if first { 0 } else { ask.len() };
        ask = again;
        k = (2 * k).min(core.len());
        first = false;
    }
    Ok((rechecked, bytes))
}

/// Labels, and the rows of the clusters with at least `min_members` members.
#[allow(clippy::too_many_arguments)]
fn catalogue<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    points: &P,
    fields: &FofFields<'_, D>,
    params: &DbscanParams,
    box_len: Option<[f64; D]>,
    comp: &[u32],
    core: &[bool],
    n_comp: usize,
    labels: &mut [i64],
) -> DbscanCatalogue<D> {
    // Members of each cluster, ascending input index (a counting sort).
    let mut offsets = vec![0u64; n_comp + 1];
    for &c in comp {
        if c != u32::MAX {
            offsets[c as usize + 1] += 1;
        }
    }
    for c in 0..n_comp {
        offsets[c + 1] += offsets[c];
    }
    let mut fill = offsets.clone();
    let mut members = vec![0u32; offsets[n_comp] as usize];
    for (i, &c) in comp.iter().enumerate() {
        if c != u32::MAX {
            members[fill[c as usize] as usize] = i as u32;
            fill[c as usize] += 1;
        }
    }
    let id = |i: usize| fields.ids.map_or(i as i64, |ids| ids.id(i));
    let member = |i: usize| Member::<D> {
        pos: {
            let p = points.point(i);
            std::array::from_fn(|d| p[d].to_f64())
        },
        vel: fields.velocities.map_or([0.0; D], |v| v.get(i)),
        mass: fields.masses.map_or(fields.particle_mass, |m| m.get(i)),
        tag: id(i),
    };
    let has_vel = fields.velocities.is_some();
    let kept: Vec<u32> = (0..n_comp as u32).filter(|&c| (offsets[c as usize + 1] - offsets[c as usize]) as usize >= params.min_members).collect();
    let per: Vec<(Row<D>, u64, f64)> = kept
        .par_iter()
        .map(|&c| {
            let m = &members[offsets[c as usize] as usize..offsets[c as usize + 1] as usize];
            let row = reduce_group(m.len(), |i| member(m[i] as usize), box_len, has_vel);
            let mut r2 = 0.0f64;
            for &i in m {
                let p = member(i as usize).pos;
                let mut s = 0.0;
                for d in 0..D {
                    let mut x = p[d] - row.centre[d];
                    if let Some(l) = box_len {
                        x = min_image(x, l[d], 0.5 * l[d]);
                    }
                    s += x * x;
                }
                r2 = r2.max(s);
            }
            let n_core = m.iter().filter(|&&i| core[i as usize]).count() as u64;
            (row, n_core, r2.sqrt())
        })
        .collect();
    // Labels: the row's tag, -1 for noise and small clusters.
    let mut tag_of = vec![-1i64; n_comp];
    for (r, &c) in kept.iter().enumerate() {
        tag_of[c as usize] = per[r].0.tag;
    }
    labels.par_iter_mut().zip(comp.par_iter()).for_each(|(l, &c)| *l = if c == u32::MAX { -1 } else { tag_of[c as usize] });
    // Rows in z-order of the clusters' first core points, or GADGET's order.
    let mut perm: Vec<usize> = (0..kept.len()).collect();
    if params.order == CatalogueOrder::Gadget {
        perm.sort_by(|&a, &b| per[b].0.count.cmp(&per[a].0.count).then(per[a].0.tag.cmp(&per[b].0.tag)).then(a.cmp(&b)));
    }
    let rows: Vec<Row<D>> = perm.iter().map(|&r| per[r].0).collect();
    let mut row_offsets = vec![0u64; perm.len() + 1];
    for (r, &p) in perm.iter().enumerate() {
        row_offsets[r + 1] = row_offsets[r] + per[p].0.count;
    }
    let fill_members = |r: usize, out: &mut [i64]| {
        let c = kept[perm[r]] as usize;
        for (o, &i) in out.iter_mut().zip(&members[offsets[c] as usize..offsets[c + 1] as usize]) {
            *o = i as i64;
        }
    };
    let mut rows = assemble(
        rows,
        CatalogueOrder::ZOrder,
        has_vel,
        params.members.then_some((&row_offsets[..], &fill_members as &(dyn Fn(usize, &mut [i64]) + Sync))),
    );
    rows.order = params.order;
    DbscanCatalogue { rows, core_count: perm.iter().map(|&r| per[r].1).collect(), max_radius: perm.iter().map(|&r| per[r].2).collect() }
}
