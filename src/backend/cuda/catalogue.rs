//! The FoF catalogue's sub-stages on the device (`pipeline::catalogue` runs them; kernels
//! in kernels/catalogue.cu): group sizes, kept groups, members sorted into canonical
//! order, one row per group reduced, labels written into the caller's device array. The
//! rows (one per kept group) and, when asked for, the member lists come to the host: they
//! are the catalogue.

use std::borrow::Cow;
use std::sync::Arc;

use super::backend::{Cuda, DevField, DevOut, FieldType};
use super::device::{Arg, BLOCK, DevBuf, Device, blocks};
use super::prims::{self, instance};
use super::walk::{WARPS, counts_to_offsets};
use crate::error::Result;
use crate::fof::catalogue::Row;
use crate::geom::Real;
use crate::pipeline::Prepared;
use crate::pipeline::catalogue::{CatalogueRequest, Counted, GroupRows, Grouped, MemberLists};

/// `ZtField`: a caller field by input index (type code as in kernels/catalogue.cu).
pub(crate) fn field_words(f: Option<&DevField<'_>>) -> [u64; 3] {
    match f {
        None => [0, 0, 0],
        Some(f) => {
            let ty = match f.ty {
                FieldType::F32 => 1,
                FieldType::F64 => 2,
                FieldType::I32 => 3,
                FieldType::I64 => 4,
                FieldType::U32 => 5,
                FieldType::U64 => 6,
            };
            [f.a.data, f.a.stride as u64, ty]
        }
    }
}

fn launch_points(dev: &Arc<dyn Device>, kernel: &'static str, n: usize, args: &[Arg]) -> Result<()> {
    // SAFETY: every zt_cat_* kernel launched here takes (roots[n], n, ...) with arrays of n
    // points, as the callers below pass them.
    unsafe { dev.launch("catalogue", kernel, blocks(n, BLOCK as usize)?, args) }
}

/// Root -> kept group on the device (`slot`: group index, `u32::MAX` when not kept) and
/// the kept groups' sizes (`ng + 1`, turned into offsets by `order`).
pub(crate) struct Slots {
    slot: DevBuf<u32>,
    sizes: Option<DevBuf<u32>>,
}

/// The kept groups' members in canonical order: `keys` = group << 32 | input index,
/// sorted; `members_z` their z-indices; group g at `offsets[g]..offsets[g + 1]`.
pub(crate) struct Members {
    offsets: DevBuf<u32>,
    keys: DevBuf<u64>,
    members_z: DevBuf<u32>,
}

/// Group sizes, the groups, the kept groups and their slots.
pub(crate) fn count(cuda: &Cuda, roots: &DevBuf<u32>, min_members: usize) -> Result<Counted<Slots>> {
    let dev = &cuda.dev;
    let n = roots.len();
    let n32 = Arg::U32(n as u32);
    let min = Arg::U32(min_members.min(u32::MAX as usize) as u32);
    let cnt: DevBuf<u32> = DevBuf::zeros(dev, n)?;
    launch_points(dev, "zt_cat_count", n, &[roots.arg(), n32.clone(), cnt.arg()])?;
    let (is_root, is_kept): (DevBuf<u32>, DevBuf<u32>) = (DevBuf::new(dev, n + 1)?, DevBuf::new(dev, n + 1)?);
    launch_points(dev, "zt_cat_flags", n, &[roots.arg(), n32.clone(), cnt.arg(), min.clone(), is_root.arg(), is_kept.arg()])?;
    let groups_total = counts_to_offsets(dev, &is_root, n)?;
    let ng = counts_to_offsets(dev, &is_kept, n)?;
    let (slot, sizes): (DevBuf<u32>, DevBuf<u32>) = (DevBuf::new(dev, n)?, DevBuf::new(dev, ng + 1)?);
    launch_points(dev, "zt_cat_slots", n, &[roots.arg(), n32, cnt.arg(), min, is_kept.arg(), slot.arg(), sizes.arg()])?;
    // Sizes, flags and slots: 4 words per point.
    Ok(Counted { slots: Slots { slot, sizes: Some(sizes) }, groups_total, kept: ng, scratch_bytes: 16 * n })
}

/// The members of kept groups in canonical order: (group, input index) sorted.
pub(crate) fn order<T: Real, const D: usize>(
    cuda: &Cuda,
    zs: &Prepared<Cuda, T, D>,
    roots: &DevBuf<u32>,
    counted: &mut Counted<Slots>,
) -> Result<Grouped<Members>> {
    let dev = &cuda.dev;
    let n = roots.len();
    let n32 = Arg::U32(n as u32);
    let slot = &counted.slots.slot;
    let at: DevBuf<u32> = DevBuf::new(dev, n + 1)?;
    launch_points(dev, "zt_cat_member_flags", n, &[roots.arg(), n32.clone(), slot.arg(), at.arg()])?;
    let total = counts_to_offsets(dev, &at, n)?;
    let (mut keys, mut mz): (DevBuf<u64>, DevBuf<u32>) = (DevBuf::new(dev, total)?, DevBuf::new(dev, total)?);
    launch_points(dev, "zt_cat_member_keys", n, &[roots.arg(), n32, slot.arg(), zs.src_orig.arg(), at.arg(), keys.arg(), mz.arg()])?;
    prims::sort_pairs(dev, &mut keys, &mut mz, 64)?;
    let offsets = counted.slots.sizes.take().expect("the groups are ordered once");
    counts_to_offsets(dev, &offsets, counted.kept)?;
    Ok(Grouped { members: Members { offsets, keys, members_z: mz }, particles_in_groups: total, scratch_bytes: 12 * total })
}

/// One row per group, reduced on the device; the tags stay there for the labels.
pub(crate) fn rows<T: Real, const D: usize>(
    cuda: &Cuda,
    zs: &Prepared<Cuda, T, D>,
    m: &Members,
    ng: usize,
    req: &CatalogueRequest<'_, Cuda, D>,
) -> Result<GroupRows<Cuda, D>> {
    let pos: [u64; 3] = std::array::from_fn(|d| zs.src_pos[d.min(D - 1)].ptr());
    let job = job_words::<D>(pos, 1, req.velocities.as_ref(), req.masses.as_ref(), req.ids.as_ref(), req.particle_mass, req.box_len);
    let (rows, tags) = reduce_rows::<T, D>(cuda, job, &m.keys, &m.members_z, &m.offsets, ng)?;
    Ok(GroupRows { rows, tags, scratch_bytes: ng * std::mem::size_of::<Row<D>>() })
}

/// Labels in input order, into the caller's device array.
pub(crate) fn labels<T: Real, const D: usize>(
    cuda: &Cuda,
    zs: &Prepared<Cuda, T, D>,
    roots: &DevBuf<u32>,
    slots: &Slots,
    tags: &DevBuf<i64>,
    labels: &DevOut<'_, i64>,
) -> Result<()> {
    let n = roots.len();
    assert_eq!(labels.len, n, "one label per particle");
    let args = [roots.arg(), Arg::U32(n as u32), slots.slot.arg(), zs.src_orig.arg(), tags.arg(), Arg::Ptr(labels.ptr)];
    launch_points(&cuda.dev, "zt_cat_labels", n, &args)
}

/// The member lists on the host: the sorted keys' low words are each group's input
/// indices, ascending.
pub(crate) fn member_lists(m: &Members) -> Result<MemberLists<'static>> {
    let off: Vec<u64> = m.offsets.to_vec()?.into_iter().map(u64::from).collect();
    let orig: Vec<i64> = m.keys.to_vec()?.into_iter().map(|k| (k & 0xffff_ffff) as i64).collect();
    let starts = off.clone();
    let fill = move |g: usize, dst: &mut [i64]| dst.copy_from_slice(&orig[starts[g] as usize..starts[g + 1] as usize]);
    Ok(MemberLists { offsets: Cow::Owned(off), fill: Box::new(fill) })
}

/// The first element of a caller field failing check `mode` (0: not finite, 1: <= 0, 2: a
/// u64 beyond i64, 3: not finite or negative), if any.
pub(crate) fn first_bad(dev: &Arc<dyn Device>, f: &DevField<'_>, mode: u32) -> Result<Option<usize>> {
    let first: DevBuf<u32> = DevBuf::from_slice(dev, &[u32::MAX])?;
    let args = [Arg::Words(field_words(Some(f)).to_vec()), Arg::U32(f.n as u32), Arg::U32(mode), first.arg()];
    // SAFETY: zt_field_first_bad(field of f.n elements, n, mode, first[1]).
    unsafe { dev.launch("catalogue", "zt_field_first_bad", blocks(f.n, BLOCK as usize)?, &args)? };
    let i = first.to_vec()?[0];
    Ok((i != u32::MAX).then_some(i as usize))
}

/// The largest element of a real field whose elements are all finite and >= 0.
pub(crate) fn field_max(dev: &Arc<dyn Device>, f: &DevField<'_>) -> Result<f64> {
    let max: DevBuf<u64> = DevBuf::zeros(dev, 1)?;
    let args = [Arg::Words(field_words(Some(f)).to_vec()), Arg::U32(f.n as u32), max.arg()];
    // SAFETY: zt_field_max(field of f.n elements, n, max[1]).
    unsafe { dev.launch("catalogue", "zt_field_max", blocks(f.n, BLOCK as usize)?, &args)? };
    Ok(f64::from_bits(max.to_vec()?[0]))
}

/// `ZtCatJob<T>`: positions (by member z-index, `pos_stride` elements apart), the fields
/// (by input index), the particle mass and the box.
pub(crate) fn job_words<const D: usize>(
    pos: [u64; 3],
    pos_stride: u32,
    vel: Option<&[DevField<'_>; D]>,
    masses: Option<&DevField<'_>>,
    ids: Option<&DevField<'_>>,
    particle_mass: f64,
    box_len: Option<[f64; D]>,
) -> Vec<u64> {
    let mut job: Vec<u64> = pos.to_vec();
    for d in 0..3 {
        job.extend(field_words(vel.filter(|_| d < D).map(|v| &v[d.min(D - 1)])));
    }
    job.extend(field_words(masses));
    job.extend(field_words(ids));
    job.push(particle_mass.to_bits());
    let len = box_len.unwrap_or([0.0; D]);
    job.extend((0..3).map(|d| if d < D { len[d].to_bits() } else { 0 }));
    job.push(super::device::u32_pair(box_len.is_some() as u32, pos_stride));
    job
}

/// One row per group (`offsets`: the `ng + 1` group ranges into the members, sorted by
/// `keys` = group << 32 | input index, at z-indices `members_z`), reduced on the device
/// with the CPU's operations in the CPU's order; and the groups' tags on the device.
pub(crate) fn reduce_rows<T: Real, const D: usize>(
    cuda: &Cuda,
    job: Vec<u64>,
    keys: &DevBuf<u64>,
    members_z: &DevBuf<u32>,
    offsets: &DevBuf<u32>,
    ng: usize,
) -> Result<(Vec<Row<D>>, DevBuf<i64>)> {
    let dev = &cuda.dev;
    let (tag, mass, radius, disp): (DevBuf<i64>, DevBuf<f64>, DevBuf<f64>, DevBuf<f64>) =
        (DevBuf::new(dev, ng)?, DevBuf::new(dev, ng)?, DevBuf::new(dev, ng)?, DevBuf::new(dev, ng)?);
    let (centre, vel): (DevBuf<f64>, DevBuf<f64>) = (DevBuf::new(dev, D * ng)?, DevBuf::new(dev, D * ng)?);
    let out = vec![tag.ptr(), mass.ptr(), centre.ptr(), radius.ptr(), vel.ptr(), disp.ptr()];
    let kernel = instance::<T, D>(["zt_cat_reduce_f32_2", "zt_cat_reduce_f32_3", "zt_cat_reduce_f64_2", "zt_cat_reduce_f64_3"])?;
    let args = [Arg::Words(job), keys.arg(), members_z.arg(), offsets.arg(), Arg::U32(ng as u32), Arg::Words(out)];
    if ng > 0 {
        // SAFETY: zt_cat_reduce_*(job, keys[total], zs[total], offsets[ng + 1], ng, rows of ng):
        // the fields cover every input index the keys name (checked at the API).
        unsafe { dev.launch("catalogue", kernel, blocks(ng, WARPS)?, &args)? };
    }
    let (t, m, r, ds, c, v, off) =
        (tag.to_vec()?, mass.to_vec()?, radius.to_vec()?, disp.to_vec()?, centre.to_vec()?, vel.to_vec()?, offsets.to_vec()?);
    let rows: Vec<Row<D>> = (0..ng)
        .map(|g| Row {
            tag: t[g],
            count: (off[g + 1] - off[g]) as u64,
            mass: m[g],
            centre: std::array::from_fn(|d| c[D * g + d]),
            radius: r[g],
            vel: std::array::from_fn(|d| v[D * g + d]),
            disp: ds[g],
        })
        .collect();
    Ok((rows, tag))
}
