//! The catalogue stage of a FoF job, once for every back end: count the members of each
//! root and keep the groups of at least `min_members`, put the kept groups' members in
//! group order, reduce one row per group, write every particle's label, then order the
//! rows (and member lists). The back ends implement each sub-stage (`Backend::catalogue_*`);
//! the row definitions are `fof::catalogue`'s.

use std::borrow::Cow;

use super::{Prepared, stage};
use crate::backend::Backend;
use crate::base::Timings;
use crate::error::Result;
use crate::fof::catalogue::{Catalogue, CatalogueOrder, Row, assemble};
use crate::geom::Real;

/// What the catalogue stage reads besides the points and their roots.
pub(crate) struct CatalogueRequest<'a, B: Backend + 'a, const D: usize> {
    pub box_len: Option<[f64; D]>,
    pub velocities: Option<B::Vectors<'a, D>>,
    pub masses: Option<B::Scalar<'a>>,
    pub particle_mass: f64,
    pub ids: Option<B::Ids<'a>>,
    pub min_members: usize,
    pub order: CatalogueOrder,
    pub members: bool,
}

/// What the catalogue stage did.
pub(crate) struct ReduceStats {
    pub groups_total: usize,
    pub particles_in_groups: usize,
    pub scratch_bytes: usize,
}

/// The groups after counting: the back end's map from roots to kept groups (`slots`).
pub(crate) struct Counted<S> {
    pub slots: S,
    /// Groups of any size (roots).
    pub groups_total: usize,
    /// Groups of at least `min_members`: the rows.
    pub kept: usize,
    pub scratch_bytes: usize,
}

/// The kept groups' members in group order (the back end's arrays).
pub(crate) struct Grouped<M> {
    pub members: M,
    pub particles_in_groups: usize,
    pub scratch_bytes: usize,
}

/// One row per kept group (groups in z-order of their roots), their tags in the back
/// end's memory for the labels.
pub(crate) struct GroupRows<B: Backend, const D: usize> {
    pub rows: Vec<Row<D>>,
    pub tags: B::Buf<i64>,
    pub scratch_bytes: usize,
}

/// Writes group `g`'s members' input indices into `out`.
pub(crate) type FillMembers<'a> = Box<dyn Fn(usize, &mut [i64]) + Sync + 'a>;

/// Each kept group's members' input indices: group `g`'s `offsets[g + 1] - offsets[g]`
/// of them written, ascending, by `fill(g, out)`.
pub(crate) struct MemberLists<'a> {
    pub offsets: Cow<'a, [u64]>,
    pub fill: FillMembers<'a>,
}

/// The catalogue of the groups `roots` describe (every z-ordered point's root: the
/// z-index of its group's first point), and each particle's label (input order) in
/// `labels`.
pub(crate) fn reduce<B: Backend, T: Real, const D: usize>(
    b: &B,
    zs: &Prepared<B, T, D>,
    roots: &B::Buf<u32>,
    req: &CatalogueRequest<'_, B, D>,
    labels: &B::Out<'_, i64>,
    timings: &mut Timings,
) -> Result<(Catalogue<D>, ReduceStats)> {
    let mut counted = stage(b, timings, "count", || b.catalogue_count(roots, req.min_members))?;
    let grouped = stage(b, timings, "group order", || b.catalogue_order(zs, roots, &mut counted))?;
    let rows = stage(b, timings, "reduce", || b.catalogue_rows(zs, &grouped.members, counted.kept, req))?;
    stage(b, timings, "labels", || b.catalogue_labels(zs, roots, &counted.slots, &rows.tags, labels))?;
    let scratch_bytes = counted.scratch_bytes + grouped.scratch_bytes + rows.scratch_bytes;
    let has_vel = req.velocities.is_some();
    let cat = stage(b, timings, "order", || -> Result<_> {
        let lists = if req.members { Some(b.catalogue_members(zs, &grouped.members)?) } else { None };
        Ok(assemble(rows.rows, req.order, has_vel, lists.as_ref().map(|l| (&l.offsets[..], &*l.fill))))
    })?;
    Ok((cat, ReduceStats { groups_total: counted.groups_total, particles_in_groups: grouped.particles_in_groups, scratch_bytes }))
}
