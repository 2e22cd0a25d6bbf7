//! Radius queries on the device (kernels/radius.cu): `impl RadiusPasses for Cuda`.
//!
//! Counts come from one leaf kernel (a lane per query). Sums, means and densities need
//! each query's neighbours in ascending source input index (the CPU's order, so the sums
//! are its bits): the kernel fills them as entries, a radix sort on (row, source index)
//! orders them and one thread per query reduces its row — in chunks of queries whose
//! entries fit `SUM_CHUNK`. The lists are filled the same way by input-order row, sorted
//! by index (and stably by distance for nearest-first lists), and returned in host memory.

use std::sync::Arc;
use std::sync::atomic::AtomicUsize;
use std::sync::atomic::Ordering::Relaxed;

use super::backend::Cuda;
use super::device::{Arg, BLOCK, DevBuf, Device, blocks};
use super::prims::{self, instance};
use super::walk::{WARPS, counts_to_offsets, keep_decided, lists_arg, metric_arg, tree_arg};
use crate::backend::RadiusPasses;
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::geom::metric::Metric;
use crate::pipeline::radius::{ListRequest, Radii, RadiusSinks, ZFields};
use crate::pipeline::{Lists, Prepared};
use crate::radius::{ListOrder, NeighbourLists};

/// Most entries (neighbour pairs) the sums hold at once: 16 bytes each for the entries and
/// 24 for the sort (about 2.7 GB at the default). Tests lower it to sum in many chunks.
pub(crate) static SUM_CHUNK: AtomicUsize = AtomicUsize::new(SUM_CHUNK_DEFAULT);
pub(crate) const SUM_CHUNK_DEFAULT: usize = 1 << 26;

/// `ZtRadii`.
fn radii_arg(r: &Radii<'_, Cuda>) -> Arg {
    let per_query = r.per_query.map_or(0, |b| b.ptr());
    Arg::Words(vec![r.fixed.to_bits(), per_query, if per_query != 0 { r.node_max.ptr() } else { 0 }, r.count_limit])
}

/// The leaf kernel's mode (`ZtRadJob::flags`).
const FILL: u64 = 1;
const BULK: u64 = 2;
const BY_INPUT: u64 = 4;

/// Where the leaf kernel writes: counts (counting) or the entries of rows (filling).
#[derive(Default)]
struct LeafJob {
    counts: u64,
    counts_z: u64,
    pairs: u64,
    row_off: u64,
    ent: [u64; 3],
    base: u64,
    z_range: (u32, u32),
    flags: u64,
}

/// Entries of `n` neighbour pairs: source z-index, distance², row.
struct Entries {
    j: DevBuf<u32>,
    d2: DevBuf<f64>,
    row: DevBuf<u32>,
}

impl Entries {
    fn new(dev: &Arc<dyn Device>, n: usize) -> Result<Self> {
        Ok(Self { j: DevBuf::new(dev, n)?, d2: DevBuf::new(dev, n)?, row: DevBuf::new(dev, n)? })
    }
    fn ptrs(&self) -> [u64; 3] {
        [self.j.ptr(), self.d2.ptr(), self.row.ptr()]
    }
    fn len(&self) -> usize {
        self.j.len()
    }
}

fn n32(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::TooManyPoints { got: n, max: u32::MAX as usize })
}

/// One launch of the leaf kernel over every leaf, with the leaf-level kept lists.
fn leaf_kernel<T: Real, const D: usize, M: Metric<f64, D>>(
    dev: &Arc<dyn Device>,
    metric: &M,
    zs: &Prepared<Cuda, T, D>,
    radii: &Radii<'_, Cuda>,
    kept: &Lists<Cuda>,
    job: &LeafJob,
) -> Result<()> {
    let t = &zs.tree;
    let (qpos, qorig) = zs.queries();
    let p3 = |p: &[DevBuf<T>; D]| -> [u64; 3] { std::array::from_fn(|d| p[d.min(D - 1)].ptr()) };
    let (sp, qp) = (p3(&zs.src_pos), p3(qpos));
    let mut words = vec![sp[0], sp[1], sp[2], qp[0], qp[1], qp[2], qorig.ptr(), job.counts, job.counts_z, job.pairs, job.row_off];
    words.extend(job.ent);
    words.extend([job.base, job.z_range.0 as u64 | (job.z_range.1 as u64) << 32, job.flags]);
    let leaves = t.leaves();
    let kernel = instance::<T, D>(["zt_radius_leaf_f32_2", "zt_radius_leaf_f32_3", "zt_radius_leaf_f64_2", "zt_radius_leaf_f64_3"])?;
    let args =
        [tree_arg(t), metric_arg::<f64, D>(metric.box_len()), radii_arg(radii), Arg::Words(words), Arg::U32(leaves.len as u32), lists_arg(kept)];
    // SAFETY: zt_radius_leaf_*(tree, metric, radii, job, num_leaves, kept lists of the
    // leaves): the outputs hold a value per query (counts by input index, counts_z by
    // z-index), the entries `row_off[row + 1] - row_off[row]` per row from `base`.
    unsafe { dev.launch("radius", kernel, blocks(leaves.len, WARPS)?, &args) }
}

/// Sorts the entries by (row, source input index); returns the sorted slots' entries.
fn sort_by_row_and_index(dev: &Arc<dyn Device>, ent: &Entries, src_orig: &DevBuf<u32>) -> Result<DevBuf<u32>> {
    let n = ent.len();
    let mut keys: DevBuf<u64> = DevBuf::new(dev, n)?;
    let mut vals: DevBuf<u32> = DevBuf::new(dev, n)?;
    let args = [ent.row.arg(), ent.j.arg(), src_orig.arg(), Arg::U32(n32(n)?), keys.arg(), vals.arg()];
    // SAFETY: zt_radius_row_index_keys(row[n], j[n], src_orig, n, keys[n], vals[n]).
    unsafe { dev.launch("radius", "zt_radius_row_index_keys", blocks(n, BLOCK as usize)?, &args)? };
    prims::sort_pairs(dev, &mut keys, &mut vals, 64)?;
    Ok(vals)
}

/// Stable re-sort of the slots `vals` by the key a kernel computes from each slot's entry.
fn resort(dev: &Arc<dyn Device>, kernel: &'static str, column: u64, vals: &mut DevBuf<u32>) -> Result<()> {
    let n = vals.len();
    let mut keys: DevBuf<u64> = DevBuf::new(dev, n)?;
    // SAFETY: zt_radius_d2_keys(d2[n], vals[n], n, keys[n]) or zt_radius_row_keys(row[n], ..).
    unsafe { dev.launch("radius", kernel, blocks(n, BLOCK as usize)?, &[Arg::Ptr(column), vals.arg(), Arg::U32(n32(n)?), keys.arg()])? };
    prims::sort_pairs(dev, &mut keys, vals, 64)
}

/// The sums, means and densities of every query, chunk by chunk (`counts` holds the
/// z-order counts, `nq + 1` entries, and is turned into offsets).
#[allow(clippy::too_many_arguments)]
fn sums<T: Real, const D: usize, M: Metric<f64, D>>(
    dev: &Arc<dyn Device>,
    metric: &M,
    zs: &Prepared<Cuda, T, D>,
    radii: &Radii<'_, Cuda>,
    fields: &ZFields<'_, Cuda>,
    kept: &Lists<Cuda>,
    sinks: &RadiusSinks<'_, Cuda>,
    counts: &DevBuf<u32>,
) -> Result<()> {
    let nq = counts.len() - 1;
    let total = counts_to_offsets(dev, counts, nq)?;
    // Chunks of consecutive queries (z-order) of at most SUM_CHUNK entries, or one query.
    let chunk = SUM_CHUNK.load(Relaxed);
    let chunks: Vec<(usize, usize)> = if total <= chunk {
        vec![(0, nq)]
    } else {
        let off = counts.to_vec()?;
        let mut v = Vec::new();
        let mut z0 = 0;
        while z0 < nq {
            let cap = off[z0] as usize + chunk;
            let z1 = (z0 + 1).max(off.partition_point(|&o| o as usize <= cap) - 1).min(nq);
            v.push((z0, z1));
            z0 = z1;
        }
        v
    };
    let base_of = |z: usize| -> Result<u32> {
        let mut b = [0u8; 4];
        // SAFETY: offset z of the nq + 1 offsets.
        unsafe { dev.download(&mut b, counts.ptr() + 4 * z as u64)? };
        Ok(u32::from_ne_bytes(b))
    };
    for (z0, z1) in chunks {
        let (b0, b1) = (base_of(z0)?, base_of(z1)?);
        let m = (b1 - b0) as usize;
        let ent = Entries::new(dev, m)?;
        let job =
            LeafJob { row_off: counts.ptr(), ent: ent.ptrs(), base: b0 as u64, z_range: (z0 as u32, z1 as u32), flags: FILL, ..Default::default() };
        leaf_kernel(dev, metric, zs, radii, kept, &job)?;
        let vals = sort_by_row_and_index(dev, &ent, &zs.src_orig)?;
        let out = |o: &Option<super::backend::DevOut<'_, f64>>| o.as_ref().map_or(0, |o| o.ptr);
        let words = vec![
            counts.ptr(),
            vals.ptr(),
            ent.j.ptr(),
            ent.d2.ptr(),
            if sinks.density.is_some() { fields.masses.map_or(0, |b| b.ptr()) } else { 0 },
            fields.scalar.map_or(0, |b| b.ptr()),
            zs.queries().1.ptr(),
            out(&sinks.scalar_sum),
            out(&sinks.scalar_mean),
            out(&sinks.density),
            b0 as u64,
            z0 as u64 | (z1 as u64) << 32,
        ];
        let kernel = if D == 2 { "zt_radius_sums_2" } else { "zt_radius_sums_3" };
        // SAFETY: zt_radius_sums_D(sums job, radii): rows z0 .. z1 of the offsets, their
        // sorted entries, the outputs by query input index.
        unsafe { dev.launch("radius", kernel, blocks(z1 - z0, BLOCK as usize)?, &[Arg::Words(words), radii_arg(radii)])? };
    }
    Ok(())
}

impl RadiusPasses for Cuda {
    fn radius_node_max<T: Real, const D: usize>(&self, zs: &Prepared<Cuda, T, D>, per_query: Option<&DevBuf<f64>>) -> Result<DevBuf<f64>> {
        let Some(r) = per_query else { return DevBuf::new(&self.dev, 0) };
        let t = &zs.tree;
        let out: DevBuf<f64> = DevBuf::new(&self.dev, t.num_nodes())?;
        let lv = t.leaves();
        let args = [t.qry_start.arg(), t.qry_count.arg(), r.arg(), Arg::U32(lv.first as u32), Arg::U32(lv.len as u32), out.arg()];
        // SAFETY: zt_radius_max_leaves(qry_start, qry_count, per_query, first, len, out[nodes]).
        unsafe { self.dev.launch("radius", "zt_radius_max_leaves", blocks(lv.len, BLOCK as usize)?, &args)? };
        for p in &t.planes[1..] {
            let args = [t.child_start.arg(), t.child_count.arg(), Arg::U32(p.first as u32), Arg::U32(p.len as u32), out.arg()];
            // SAFETY: zt_radius_max_up(child_start, child_count, first, len, out[nodes]).
            unsafe { self.dev.launch("radius", "zt_radius_max_up", blocks(p.len, BLOCK as usize)?, &args)? };
        }
        Ok(out)
    }

    fn radius_node_pass<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Cuda, T, D>,
        radii: &Radii<'_, Cuda>,
        parent: usize,
        lists: &Lists<Cuda>,
    ) -> Result<Lists<Cuda>> {
        let t = &zs.tree;
        let cp = t.planes[parent - 1];
        let kernel = instance::<T, D>(["zt_radius_decide_f32_2", "zt_radius_decide_f32_3", "zt_radius_decide_f64_2", "zt_radius_decide_f64_3"])?;
        keep_decided(&self.dev, t, parent, lists, |cands, doff, keep, counts| {
            let args = [
                tree_arg(t),
                metric_arg::<f64, D>(metric.box_len()),
                radii_arg(radii),
                Arg::U32(cp.first as u32),
                Arg::U32(cp.len as u32),
                cands.arg(),
                doff.arg(),
                keep.arg(),
                counts.arg(),
            ];
            // SAFETY: zt_radius_decide_*(tree, metric, radii, child_first, child_len, cands,
            // doff[child_len + 1], keep[decisions], cnt[child_len]).
            unsafe { self.dev.launch("radius", kernel, blocks(cp.len, WARPS)?, &args) }
        })
    }

    fn radius_count_pass<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Cuda, T, D>,
        radii: &Radii<'_, Cuda>,
        fields: &ZFields<'_, Cuda>,
        lists: &Lists<Cuda>,
        sinks: &RadiusSinks<'_, Cuda>,
    ) -> Result<u64> {
        let dev = &self.dev;
        let kept = self.radius_node_pass(metric, zs, radii, 1, lists)?;
        let nq = zs.queries().1.len();
        let pairs: DevBuf<u64> = DevBuf::zeros(dev, 1)?;
        let with_sums = sinks.scalar_sum.is_some() || sinks.scalar_mean.is_some() || sinks.density.is_some();
        // The sums need the z-order counts for their offsets, whether the lists do or not.
        let own: Option<DevBuf<u32>> = if with_sums { Some(DevBuf::new(dev, nq + 1)?) } else { None };
        let counts_z = own.as_ref().map(|b| b.ptr()).or(sinks.counts_z.as_ref().map(|o| o.ptr)).unwrap_or(0);
        let job = LeafJob { counts: sinks.counts.as_ref().map_or(0, |o| o.ptr), counts_z, pairs: pairs.ptr(), flags: BULK, ..Default::default() };
        leaf_kernel(dev, metric, zs, radii, &kept, &job)?;
        let pairs = pairs.to_vec()?[0];
        if let Some(counts) = own {
            if let Some(o) = &sinks.counts_z {
                // SAFETY: zt_radius_copy_u32(in[nq], nq, out[nq]).
                unsafe {
                    dev.launch("radius", "zt_radius_copy_u32", blocks(nq, BLOCK as usize)?, &[counts.arg(), Arg::U32(nq as u32), Arg::Ptr(o.ptr)])?
                };
            }
            if pairs > u32::MAX as u64 {
                return Err(Error::OutOfMemory { what: "the sums' neighbour pairs on the device (2^32 or more)", bytes: pairs * 16 });
            }
            sums(dev, metric, zs, radii, fields, &kept, sinks, &counts)?;
        }
        Ok(pairs)
    }

    fn radius_lists<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Cuda, T, D>,
        radii: &Radii<'_, Cuda>,
        lists: &Lists<Cuda>,
        sinks: &RadiusSinks<'_, Cuda>,
        pairs: u64,
        req: ListRequest,
    ) -> Result<NeighbourLists> {
        let dev = &self.dev;
        let qorig = zs.queries().1;
        let nq = qorig.len();
        let bytes = crate::radius::list_bytes(nq, pairs, req.distances);
        if req.max_bytes > 0 && bytes > req.max_bytes {
            return Err(Error::OutOfMemory { what: "the neighbour lists (over the memory limit)", bytes });
        }
        if pairs > u32::MAX as u64 {
            return Err(Error::OutOfMemory { what: "the neighbour lists on the device (2^32 entries or more)", bytes });
        }
        let counts_z = sinks.counts_z.as_ref().expect("lists need the z-order counts");
        // Offsets by query input index.
        let offsets: DevBuf<u32> = DevBuf::new(dev, nq + 1)?;
        let args = [Arg::Ptr(counts_z.ptr), qorig.arg(), Arg::U32(nq as u32), offsets.arg()];
        // SAFETY: zt_radius_counts_by_input(counts_z[nq], qorig[nq], nq, out[nq + 1]).
        unsafe { dev.launch("radius", "zt_radius_counts_by_input", blocks(nq, BLOCK as usize)?, &args)? };
        let total = counts_to_offsets(dev, &offsets, nq)?;
        assert_eq!(total as u64, pairs, "the counts add up to the pairs");
        let ent = Entries::new(dev, total)?;
        let kept = self.radius_node_pass(metric, zs, radii, 1, lists)?;
        let job = LeafJob { row_off: offsets.ptr(), ent: ent.ptrs(), z_range: (0, nq as u32), flags: FILL | BY_INPUT, ..Default::default() };
        leaf_kernel(dev, metric, zs, radii, &kept, &job)?;
        let mut vals = sort_by_row_and_index(dev, &ent, &zs.src_orig)?;
        if req.order == ListOrder::Distance {
            resort(dev, "zt_radius_d2_keys", ent.d2.ptr(), &mut vals)?;
            resort(dev, "zt_radius_row_keys", ent.row.ptr(), &mut vals)?;
        }
        let idx: DevBuf<u32> = DevBuf::new(dev, total)?;
        let d2: Option<DevBuf<f64>> = if req.distances { Some(DevBuf::new(dev, total)?) } else { None };
        let args = [
            vals.arg(),
            ent.j.arg(),
            ent.d2.arg(),
            zs.src_orig.arg(),
            Arg::U32(n32(total)?),
            idx.arg(),
            Arg::Ptr(d2.as_ref().map_or(0, |b| b.ptr())),
        ];
        // SAFETY: zt_radius_gather_entries(vals[n], j, d2, src_orig, n, idx[n], d2 out[n] or null).
        unsafe { dev.launch("radius", "zt_radius_gather_entries", blocks(total, BLOCK as usize)?, &args)? };
        drop(ent);
        let offsets = offsets.to_vec()?.into_iter().map(|o| o as i64).collect();
        let indices = idx.to_vec()?.into_iter().map(|i| i as i64).collect();
        let distances = match d2 {
            Some(b) => b.to_vec()?.into_iter().map(f64::sqrt).collect(),
            None => Vec::new(),
        };
        Ok(NeighbourLists { offsets, indices, distances })
    }
}
