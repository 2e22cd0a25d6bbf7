//! Host driver of the catalogue kernels (kernels/catalogue.cu): group sizes, kept groups,
//! members sorted into canonical order on the device, one row per group reduced on the
//! device, labels written into the caller's device array. The rows (one per kept group)
//! and, when asked for, the member lists come to the host: they are the catalogue.

use std::sync::Arc;

use super::backend::{Cuda, DevField, DevOut, FieldType};
use super::device::{Arg, BLOCK, DevBuf, Device, blocks};
use super::prims::{self, instance};
use super::walk::{WARPS, counts_to_offsets};
use crate::base::Timings;
use crate::error::Result;
use crate::fof::catalogue::{self, Catalogue, CatalogueRequest, ReduceStats, Row};
use crate::geom::Real;
use crate::pipeline::Prepared;

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

pub(crate) fn reduce<T: Real, const D: usize>(
    cuda: &Cuda,
    zs: &Prepared<Cuda, T, D>,
    roots: &DevBuf<u32>,
    req: &CatalogueRequest<'_, Cuda, D>,
    labels: &DevOut<'_, i64>,
    timings: &mut Timings,
) -> Result<(Catalogue<D>, ReduceStats)> {
    let dev = &cuda.dev;
    let n = roots.len();
    assert_eq!(labels.len, n, "one label per particle");
    let n32 = Arg::U32(n as u32);
    let min = Arg::U32(req.min_members.min(u32::MAX as usize) as u32);
    // 1. Group sizes, the groups, the kept groups and their slots.
    let (slot, sizes, groups_total, ng) = crate::pipeline::stage(cuda, timings, "count", || -> Result<_> {
        let cnt: DevBuf<u32> = DevBuf::zeros(dev, n)?;
        launch_points(dev, "zt_cat_count", n, &[roots.arg(), n32.clone(), cnt.arg()])?;
        let (is_root, is_kept): (DevBuf<u32>, DevBuf<u32>) = (DevBuf::new(dev, n + 1)?, DevBuf::new(dev, n + 1)?);
        launch_points(dev, "zt_cat_flags", n, &[roots.arg(), n32.clone(), cnt.arg(), min.clone(), is_root.arg(), is_kept.arg()])?;
        let groups_total = counts_to_offsets(dev, &is_root, n)?;
        let ng = counts_to_offsets(dev, &is_kept, n)?;
        let (slot, sizes): (DevBuf<u32>, DevBuf<u32>) = (DevBuf::new(dev, n)?, DevBuf::new(dev, ng + 1)?);
        launch_points(dev, "zt_cat_slots", n, &[roots.arg(), n32.clone(), cnt.arg(), min.clone(), is_kept.arg(), slot.arg(), sizes.arg()])?;
        Ok((slot, sizes, groups_total, ng))
    })?;
    // 2. The members of kept groups in canonical order: (group, input index).
    let (offsets, keys, members_z) = crate::pipeline::stage(cuda, timings, "group order", || -> Result<_> {
        let at: DevBuf<u32> = DevBuf::new(dev, n + 1)?;
        launch_points(dev, "zt_cat_member_flags", n, &[roots.arg(), n32.clone(), slot.arg(), at.arg()])?;
        let total = counts_to_offsets(dev, &at, n)?;
        let (mut keys, mut mz): (DevBuf<u64>, DevBuf<u32>) = (DevBuf::new(dev, total)?, DevBuf::new(dev, total)?);
        launch_points(dev, "zt_cat_member_keys", n, &[roots.arg(), n32.clone(), slot.arg(), zs.src_orig.arg(), at.arg(), keys.arg(), mz.arg()])?;
        prims::sort_pairs(dev, &mut keys, &mut mz, 64)?;
        counts_to_offsets(dev, &sizes, ng)?;
        Ok((sizes, keys, mz))
    })?;
    // 3. One row per group.
    let (rows, tag_dev) = crate::pipeline::stage(cuda, timings, "reduce", || -> Result<_> {
        let pos: [u64; 3] = std::array::from_fn(|d| zs.src_pos[d.min(D - 1)].ptr());
        let job = job_words::<D>(pos, 1, req.velocities.as_ref(), req.masses.as_ref(), req.ids.as_ref(), req.particle_mass, req.box_len);
        reduce_rows::<T, D>(cuda, job, &keys, &members_z, &offsets, ng)
    })?;
    // 4. Labels in input order, into the caller's device array.
    crate::pipeline::stage(cuda, timings, "labels", || {
        launch_points(dev, "zt_cat_labels", n, &[roots.arg(), n32.clone(), slot.arg(), zs.src_orig.arg(), tag_dev.arg(), Arg::Ptr(labels.ptr)])
    })?;
    // 5. Order and member lists (on the host: the catalogue is the host's).
    let particles_in_groups = keys.len();
    let cat = crate::pipeline::stage(cuda, timings, "order", || -> Result<_> {
        let member_lists: Option<(Vec<u64>, Vec<i64>)> = if req.members {
            let off: Vec<u64> = offsets.to_vec()?.into_iter().map(u64::from).collect();
            // The sorted keys' low words: each group's input indices, ascending.
            let orig: Vec<i64> = keys.to_vec()?.into_iter().map(|k| (k & 0xffff_ffff) as i64).collect();
            Some((off, orig))
        } else {
            None
        };
        let fill = |g: usize, dst: &mut [i64]| {
            let (off, orig) = member_lists.as_ref().unwrap();
            dst.copy_from_slice(&orig[off[g] as usize..off[g + 1] as usize]);
        };
        Ok(catalogue::assemble(
            rows,
            req.order,
            req.velocities.is_some(),
            member_lists.as_ref().map(|(off, _)| (&off[..], &fill as &(dyn Fn(usize, &mut [i64]) + Sync))),
        ))
    })?;
    // Device scratch: sizes, flags and slots (4 words per point), keys and z of the members.
    let scratch_bytes = 16 * n + 12 * particles_in_groups + ng * std::mem::size_of::<Row<D>>();
    Ok((cat, ReduceStats { groups_total, particles_in_groups, scratch_bytes }))
}

/// The first element of a caller field failing check `mode` (0: not finite, 1: <= 0, 2: a
/// u64 beyond i64), if any.
pub(crate) fn first_bad(dev: &Arc<dyn Device>, f: &DevField<'_>, mode: u32) -> Result<Option<usize>> {
    let first: DevBuf<u32> = DevBuf::from_slice(dev, &[u32::MAX])?;
    let args = [Arg::Words(field_words(Some(f)).to_vec()), Arg::U32(f.n as u32), Arg::U32(mode), first.arg()];
    // SAFETY: zt_field_first_bad(field of f.n elements, n, mode, first[1]).
    unsafe { dev.launch("catalogue", "zt_field_first_bad", blocks(f.n, BLOCK as usize)?, &args)? };
    let i = first.to_vec()?[0];
    Ok((i != u32::MAX).then_some(i as usize))
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
