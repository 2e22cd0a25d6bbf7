//! `Context::dbscan`: DBSCAN composed from the exact jobs, with no neighbour lists kept
//! beyond the border points' (fewer than min_pts each):
//! 1. core test: a radius self-query with r = ε, counts only: a point is core when at
//!    least min_pts points (itself included) are within ε — FoF's f64 test, and a leaf
//!    wholly within ε of a point is counted without distances (ArborX's dense cells);
//! 2. clusters: FoF over the core points (a view, nothing copied) with linking length ε;
//! 3. border points: a radius query from the other points to the core points, each list
//!    nearest first with ties by index: its first entry is the nearest core point;
//! 4. tags, the catalogue and the member lists from the final labels.
//!
//! Every decision is the f64 test itself: exact in f32 and f64 with no rounding margin.

use rayon::prelude::*;

use super::Context;
use crate::dbscan::{BorderPoints, Dbscan, DbscanCatalogue, DbscanParams, DbscanStats, PointClass};
use crate::error::{Result, check_len};
use crate::fof::catalogue::{Member, Row, assemble, reduce_group};
use crate::fof::{CatalogueOrder, FofFields, FofParams, LinkingLength};
use crate::geom::Real;
use crate::geom::metric::min_image;
use crate::input::subset::Subset;
use crate::input::{Domain, PointSource};
use crate::knn::SourceFields;
use crate::radius::{ListOrder, RadiusOutput, RadiusParams};

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
    crate::input::validate::check_domain::<T, D>(domain)?;
    let box_len = domain.box_lengths();

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
        let row_of = row_of_tag(&cat.tag, n);
        n_comp = cat.len();
        comp.par_iter_mut().zip(labels.par_iter()).for_each(|(c, &l)| *c = if l < 0 { NONE } else { row_of[l as usize] });
        core = comp.par_iter().map(|&c| c != NONE).collect();
        stats.timings.stages.push(("clusters", t.elapsed().as_secs_f64()));
    } else {
        // 1. The core test: neighbours within ε, itself included.
        let t = std::time::Instant::now();
        let mut counts = vec![0i64; n];
        let r = ctx.radius_self(
            domain,
            points,
            &SourceFields::default(),
            &RadiusParams { count_limit: params.min_pts as u64, ..RadiusParams::new(eps) },
            &mut RadiusOutput { counts: Some(&mut counts), ..Default::default() },
        )?;
        stats.scratch_bytes = stats.scratch_bytes.max(r.stats.scratch_bytes + 8 * n);
        core = counts.par_iter().map(|&c| c as usize >= params.min_pts).collect();
        // Only a point with another point within ε can be a border point.
        let lonely: Vec<bool> = counts.par_iter().map(|&c| c <= 1).collect();
        drop(counts);
        let sel_core: Vec<u32> = (0..n as u32).filter(|&i| core[i as usize]).collect();
        stats.timings.stages.push(("core", t.elapsed().as_secs_f64()));

        // 2. Clusters of the core points: FoF's components over the view, in z-order.
        let t = std::time::Instant::now();
        if !sel_core.is_empty() {
            let view = Subset::new(points, &sel_core);
            let mut core_labels = vec![0i64; sel_core.len()];
            let (cat, fst) = ctx.fof_into(domain, &view, &FofFields::default(), &fof_params(1), &mut core_labels)?;
            stats.scratch_bytes = stats.scratch_bytes.max(fst.scratch_bytes + 8 * sel_core.len());
            // Without ids a core group's tag is its smallest view index: the row it has.
            let row_of = row_of_tag(&cat.tag, sel_core.len());
            n_comp = cat.len();
            for (j, &l) in core_labels.iter().enumerate() {
                comp[sel_core[j] as usize] = row_of[l as usize];
            }
        }
        stats.timings.stages.push(("clusters", t.elapsed().as_secs_f64()));

        // 3. Border points: the cluster of the nearest core point within ε. The views
        // keep the input order, so a list's ties by view index are ties by input index.
        let t = std::time::Instant::now();
        let sel_other: Vec<u32> = (0..n as u32).filter(|&i| !core[i as usize] && !lonely[i as usize]).collect();
        if !sel_other.is_empty() && !sel_core.is_empty() {
            let (sources, queries) = (Subset::new(points, &sel_core), Subset::new(points, &sel_other));
            let p = RadiusParams::new(eps).with_lists(ListOrder::Distance);
            let r = ctx.radius(domain, &sources, &queries, &SourceFields::default(), &p, &mut RadiusOutput::default())?;
            let lists = r.lists.expect("lists were asked for");
            stats.scratch_bytes = stats.scratch_bytes.max(r.stats.scratch_bytes + 8 * (lists.indices.len() + lists.offsets.len()));
            nearest = (0..sel_other.len()).filter_map(|q| lists.of(q).first().map(|&c| (sel_other[q], sel_core[c as usize]))).collect();
        }
        stats.timings.stages.push(("border", t.elapsed().as_secs_f64()));
    }
    let found = Found { comp, core, n_comp, nearest };
    Ok((finish(points, fields, params, box_len, found, labels, class, &mut stats), stats))
}

/// For a FoF catalogue made without ids over `n` points (each tag the smallest index of
/// its group), the row of each index that is a tag; `u32::MAX` for the others.
pub(crate) fn row_of_tag(tags: &[i64], n: usize) -> Vec<u32> {
    let mut row_of = vec![u32::MAX; n];
    for (r, &tag) in tags.iter().enumerate() {
        row_of[tag as usize] = r as u32;
    }
    row_of
}

/// What the neighbour stages found: each point's core flag and core component (`u32::MAX`
/// for none; components numbered in z-order of their first core point), and each border
/// point's nearest core point within ε (ascending border point).
pub(crate) struct Found {
    pub comp: Vec<u32>,
    pub core: Vec<bool>,
    pub n_comp: usize,
    pub nearest: Vec<(u32, u32)>,
}

/// Border points into their clusters (or not, DBSCAN*), the classes and counts, then the
/// labels and the catalogue (stage "catalogue").
#[allow(clippy::too_many_arguments)]
pub(crate) fn finish<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    points: &P,
    fields: &FofFields<'_, D>,
    params: &DbscanParams,
    box_len: Option<[f64; D]>,
    found: Found,
    labels: &mut [i64],
    class: Option<&mut [PointClass]>,
    stats: &mut DbscanStats,
) -> DbscanCatalogue<D> {
    let Found { mut comp, core, n_comp, nearest } = found;
    let n = comp.len();
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
    cat
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
