//! Host drivers of the walk kernels (kernels/walk.cu, knn.cu): the candidates of a plane
//! pass, the kNN node test with its kept lists, and the kNN leaf kernel. Every list stays
//! on the device; only list lengths (one word per pass) come back.

use std::sync::Arc;
use std::sync::atomic::AtomicU32;
use std::sync::atomic::Ordering::Relaxed;

use super::backend::{Cuda, DevOut};
use super::device::{Arg, BLOCK, DevBuf, DevPtr, Device, blocks, u32_pair};
use super::prims::{self, instance};
use crate::error::Result;
use crate::geom::Real;
use crate::geom::metric::{Metric, Periodic};
use crate::pipeline::{KnnSinks, Lists, Prepared, Tree};

/// Warps per block (`ZT_WARPS`): the warp-per-node kernels' grid is `blocks(n, WARPS)`.
pub(crate) const WARPS: usize = BLOCK as usize / 32;

/// Most candidates for which the kNN node test counts pairwise (`ZT_DMAX_CACHE` in
/// kernels/knn.cu; more take the bisection). Tests lower it to run the bisection on small
/// inputs: both give the same radius, so other tests running meanwhile are unaffected.
pub(crate) static PAIRWISE_MAX: AtomicU32 = AtomicU32::new(128);

/// Longest kept list the kNN leaf kernel sorts nearest first (`ZT_KEPT_SORTED` in
/// kernels/knn.cu; longer ones are walked in list order). Tests lower it to walk lists
/// unsorted: the same result, pruned less.
pub(crate) static SORTED_MAX: AtomicU32 = AtomicU32::new(256);

/// Tests: `PAIRWISE_MAX` and `SORTED_MAX` as shipped.
#[cfg(test)]
pub(super) fn reset_test_knobs() {
    PAIRWISE_MAX.store(128, Relaxed);
    SORTED_MAX.store(256, Relaxed);
}

/// A metric as the kernels take it (`ZtMetric<T, D>` by value: `len[3]`, `half[3]` in T,
/// then a u32 flag), from the box lengths (None: open).
pub(crate) fn metric_arg<T: Real, const D: usize>(box_len: Option<[f64; D]>) -> Arg {
    let p = Periodic::<T, D>::new(&box_len.unwrap_or([1.0; D]));
    let mut bytes: Vec<u8> = Vec::new();
    for v in [&p.len, &p.half] {
        for d in 0..3 {
            bytes.extend_from_slice(&v[d.min(D - 1)].key_bits().to_ne_bytes()[..size_of::<T>()]);
        }
    }
    bytes.extend_from_slice(&(box_len.is_some() as u32).to_ne_bytes());
    Arg::Words(words(&bytes))
}

fn words(bytes: &[u8]) -> Vec<u64> {
    let mut b = bytes.to_vec();
    b.resize(b.len().div_ceil(8) * 8, 0);
    b.chunks_exact(8).map(|c| u64::from_ne_bytes(c.try_into().unwrap())).collect()
}

/// `ZtTree<T>`: the node arrays.
pub(crate) fn tree_arg<T: Real, const D: usize>(t: &Tree<Cuda, T, D>) -> Arg {
    Arg::Words(vec![
        t.src_start.ptr(),
        t.src_count.ptr(),
        t.qry_start.ptr(),
        t.qry_count.ptr(),
        t.src_lo.ptr(),
        t.src_hi.ptr(),
        t.qry_lo.ptr(),
        t.qry_hi.ptr(),
        t.child_start.ptr(),
        t.child_count.ptr(),
    ])
}

pub(crate) fn lists_arg(l: &Lists<Cuda>) -> Arg {
    Arg::Words(vec![l.offsets.ptr(), l.items.ptr()])
}

fn read_u32(dev: &Arc<dyn Device>, p: DevPtr) -> Result<u32> {
    let mut b = [0u8; 4];
    // SAFETY: `p` is one u32 of device memory (the callers' buffers are long enough).
    unsafe { dev.download(&mut b, p)? };
    Ok(u32::from_ne_bytes(b))
}

/// `counts[..n]` (with room for one more) into offsets of n + 1 entries; returns the total.
pub(crate) fn counts_to_offsets(dev: &Arc<dyn Device>, counts: &DevBuf<u32>, n: usize) -> Result<usize> {
    assert_eq!(counts.len(), n + 1);
    // SAFETY: the last element of `counts`.
    unsafe { dev.zero(counts.ptr() + 4 * n as u64, 4)? };
    prims::exclusive_scan(dev, counts.ptr(), n + 1)?;
    Ok(read_u32(dev, counts.ptr() + 4 * n as u64)? as usize)
}

/// The candidates of the pass from plane `parent` (`ZtCands`).
pub(crate) struct Cands {
    pub(crate) coff: DevBuf<u32>,
    pub(crate) cand: DevBuf<u32>,
    pub(crate) parent_of: DevBuf<u32>,
}

impl Cands {
    pub(crate) fn arg(&self) -> Arg {
        Arg::Words(vec![self.coff.ptr(), self.cand.ptr(), self.parent_of.ptr()])
    }
}

/// For every parent of plane `parent`, the children with sources of the nodes in its list
/// (count -> scan -> fill), and the parent of each node one plane down.
pub(crate) fn candidates<T: Real, const D: usize>(dev: &Arc<dyn Device>, t: &Tree<Cuda, T, D>, parent: usize, lists: &Lists<Cuda>) -> Result<Cands> {
    let (pp, cp) = (t.planes[parent], t.planes[parent - 1]);
    let coff: DevBuf<u32> = DevBuf::new(dev, pp.len + 1)?;
    let base = [t.child_start.arg(), t.child_count.arg(), t.src_count.arg(), Arg::U32(pp.len as u32), lists_arg(lists)];
    let mut args = base.to_vec();
    args.push(coff.arg());
    // SAFETY: zt_cand_count(child_start, child_count, src_count, parent_len, lists of the plane, cnt[parent_len]).
    unsafe { dev.launch("walk", "zt_cand_count", blocks(pp.len, WARPS)?, &args)? };
    let total = counts_to_offsets(dev, &coff, pp.len)?;
    let cand: DevBuf<u32> = DevBuf::new(dev, total)?;
    let mut args = base.to_vec();
    args.extend([coff.arg(), cand.arg()]);
    // SAFETY: zt_cand_fill(.., coff[parent_len + 1], cand[total]).
    unsafe { dev.launch("walk", "zt_cand_fill", blocks(pp.len, WARPS)?, &args)? };
    let parent_of: DevBuf<u32> = DevBuf::new(dev, cp.len)?;
    let args =
        [t.child_start.arg(), t.child_count.arg(), Arg::U32(pp.first as u32), Arg::U32(pp.len as u32), Arg::U32(cp.first as u32), parent_of.arg()];
    // SAFETY: zt_parent_of(..): the children of plane `parent` are the nodes of plane `parent - 1`.
    unsafe { dev.launch("walk", "zt_parent_of", blocks(pp.len, BLOCK as usize)?, &args)? };
    Ok(Cands { coff, cand, parent_of })
}

/// A node pass whose per-job decide kernel (warp per child of plane `parent - 1`) flags
/// the candidates each child keeps: `decide(cands, doff, keep, counts)` launches it (one
/// flag per child and candidate of its parent at `keep[doff[child] ..]`, the number kept at
/// `counts[child]`); then the kept candidates are compacted into the next plane's lists.
pub(crate) fn keep_decided<T: Real, const D: usize>(
    dev: &Arc<dyn Device>,
    t: &Tree<Cuda, T, D>,
    parent: usize,
    lists: &Lists<Cuda>,
    decide: impl FnOnce(&Cands, &DevBuf<u32>, &DevBuf<u8>, &DevBuf<u32>) -> Result<()>,
) -> Result<Lists<Cuda>> {
    let cp = t.planes[parent - 1];
    let cands = candidates(dev, t, parent, lists)?;
    // One decision per (child, candidate of its parent).
    let doff: DevBuf<u32> = DevBuf::new(dev, cp.len + 1)?;
    // SAFETY: zt_child_cand_count(child_len, cands, out[child_len]).
    unsafe { dev.launch("walk", "zt_child_cand_count", blocks(cp.len, BLOCK as usize)?, &[Arg::U32(cp.len as u32), cands.arg(), doff.arg()])? };
    let decisions = counts_to_offsets(dev, &doff, cp.len)?;
    let keep: DevBuf<u8> = DevBuf::new(dev, decisions)?;
    let counts: DevBuf<u32> = DevBuf::new(dev, cp.len + 1)?;
    decide(&cands, &doff, &keep, &counts)?;
    let total = counts_to_offsets(dev, &counts, cp.len)?;
    let items: DevBuf<u32> = DevBuf::new(dev, total)?;
    let args = [Arg::U32(cp.len as u32), cands.arg(), doff.arg(), keep.arg(), counts.arg(), items.arg()];
    // SAFETY: zt_cand_keep(child_len, cands, doff, keep, offsets[child_len + 1], items[total]).
    unsafe { dev.launch("walk", "zt_cand_keep", blocks(cp.len, WARPS)?, &args)? };
    Ok(Lists { offsets: counts, items })
}

/// The lists of the super plane: every super node with queries sees every super node with
/// sources (small: computed on the host from the super plane's counts).
pub(crate) fn walk_start<T: Real, const D: usize>(cuda: &Cuda, t: &Tree<Cuda, T, D>) -> Result<Lists<Cuda>> {
    let top = t.super_plane();
    let range = |b: &DevBuf<u32>| -> Result<Vec<u32>> {
        let mut v = vec![0u32; top.len];
        // SAFETY: nodes `top.first .. top.first + top.len` of a node array.
        unsafe { cuda.dev.download(bytemuck_u32(&mut v), b.ptr() + 4 * top.first as u64)? };
        Ok(v)
    };
    let (sc, qc) = (range(&t.src_count)?, range(&t.qry_count)?);
    let sources: Vec<u32> = (0..top.len).filter(|&i| sc[i] > 0).map(|i| (top.first + i) as u32).collect();
    let mut offsets: Vec<u32> = Vec::with_capacity(top.len + 1);
    let mut items: Vec<u32> = Vec::new();
    offsets.push(0u32);
    for &q in &qc {
        if q > 0 {
            items.extend_from_slice(&sources);
        }
        offsets.push(items.len() as u32);
    }
    Ok(Lists { offsets: DevBuf::from_slice(&cuda.dev, &offsets)?, items: DevBuf::from_slice(&cuda.dev, &items)? })
}

fn bytemuck_u32(v: &mut [u32]) -> &mut [u8] {
    // SAFETY: u32 has no invalid bit patterns and no padding.
    unsafe { std::slice::from_raw_parts_mut(v.as_mut_ptr().cast(), size_of_val(v)) }
}

/// The kNN node test of the pass from plane `parent`: each child's kept candidates (the
/// next plane's lists) and its squared search radius; `pairs`, when given, adds up the
/// candidates seen by children with queries.
pub(crate) fn knn_keep<T: Real, const D: usize, M: Metric<T, D>>(
    dev: &Arc<dyn Device>,
    metric: &M,
    t: &Tree<Cuda, T, D>,
    k: usize,
    parent: usize,
    lists: &Lists<Cuda>,
    pairs: Option<&DevBuf<u64>>,
) -> Result<(Lists<Cuda>, DevBuf<T>)> {
    let cp = t.planes[parent - 1];
    let cands = candidates(dev, t, parent, lists)?;
    let counts: DevBuf<u32> = DevBuf::new(dev, cp.len + 1)?;
    let r2: DevBuf<T> = DevBuf::new(dev, cp.len)?;
    let m = metric_arg::<T, D>(metric.box_len());
    let select = instance::<T, D>(["zt_knn_select_f32_2", "zt_knn_select_f32_3", "zt_knn_select_f64_2", "zt_knn_select_f64_3"])?;
    let head = [tree_arg(t), m, Arg::U32(cp.first as u32), Arg::U32(cp.len as u32), cands.arg()];
    let mut args = head.to_vec();
    args.extend([Arg::U32(k as u32), Arg::U32(PAIRWISE_MAX.load(Relaxed)), counts.arg(), r2.arg(), Arg::Ptr(pairs.map_or(0, |p| p.ptr()))]);
    // SAFETY: zt_knn_select_*(tree, metric, child_first, child_len, cands, k, pairwise_max,
    // cnt[child_len], r2[child_len], pairs).
    unsafe { dev.launch("knn", select, blocks(cp.len, WARPS)?, &args)? };
    let total = counts_to_offsets(dev, &counts, cp.len)?;
    let items: DevBuf<u32> = DevBuf::new(dev, total)?;
    let keep = instance::<T, D>(["zt_knn_keep_f32_2", "zt_knn_keep_f32_3", "zt_knn_keep_f64_2", "zt_knn_keep_f64_3"])?;
    let mut args = head.to_vec();
    args.extend([r2.arg(), counts.arg(), items.arg()]);
    // SAFETY: zt_knn_keep_*(.., r2[child_len], offsets[child_len + 1], items[total]).
    unsafe { dev.launch("knn", keep, blocks(cp.len, WARPS)?, &args)? };
    Ok((Lists { offsets: counts, items }, r2))
}

/// The leaf pass: the node test of plane 1's lists, then every query's k nearest sources
/// and reductions into the sinks. Returns the candidate leaf pairs seen.
#[allow(clippy::too_many_arguments)]
pub(crate) fn knn_leaf_pass<T: Real, const D: usize, M: Metric<T, D>>(
    dev: &Arc<dyn Device>,
    metric: &M,
    zs: &Prepared<Cuda, T, D>,
    k: usize,
    masses: Option<&DevBuf<f64>>,
    scalar: Option<&DevBuf<f64>>,
    lists: &Lists<Cuda>,
    sinks: &KnnSinks<'_, Cuda, T>,
) -> Result<u64> {
    let t = &zs.tree;
    let kk = k.min(zs.n_sources());
    let pairs: DevBuf<u64> = DevBuf::zeros(dev, 1)?;
    let (kept, r2) = knn_keep(dev, metric, t, zs.knn_node_k(k), 1, lists, Some(&pairs))?;
    let (qpos, qorig) = zs.queries();
    let pos3 = |p: &[DevBuf<T>; D]| -> [u64; 3] { std::array::from_fn(|d| p[d.min(D - 1)].ptr()) };
    let (sp, qp) = (pos3(&zs.src_pos), pos3(qpos));
    let mut job = vec![sp[0], sp[1], sp[2], zs.src_orig.ptr(), qp[0], qp[1], qp[2], qorig.ptr()];
    job.push(masses.map_or(0, |b| b.ptr()));
    job.push(if sinks.scalar_mean.is_some() { scalar.map_or(0, |b| b.ptr()) } else { 0 });
    job.push(u32_pair(k as u32, kk as u32));
    job.push(u32_pair(zs.qry.is_none() as u32, sinks.zorder as u32));
    job.push(u32_pair(SORTED_MAX.load(Relaxed), 0));
    // T arrays, and the f64 arrays of widened values (`DevOut::wide`) after them.
    let p = |o: &Option<DevOut<'_, T>>, wide: bool| o.as_ref().filter(|o| o.wide == wide).map_or(0, |o| o.ptr);
    let mean = if scalar.is_some() { sinks.scalar_mean.as_ref().map_or(0, |o| o.ptr) } else { 0 };
    let (dist, kth) = (&sinks.distances, &sinks.kth);
    let out = vec![
        sinks.indices.as_ref().map_or(0, |o| o.ptr),
        p(dist, false),
        p(&sinks.d2, false),
        p(kth, false),
        p(&sinks.kth_d2, false),
        sinks.density.as_ref().map_or(0, |o| o.ptr),
        mean,
        p(dist, true),
        p(kth, true),
    ];
    debug_assert!(![&sinks.d2, &sinks.kth_d2].iter().any(|o| o.as_ref().is_some_and(|o| o.wide)), "squared distances are never widened");
    let leaves = t.leaves();
    let kernel = instance::<T, D>(["zt_knn_leaf_f32_2", "zt_knn_leaf_f32_3", "zt_knn_leaf_f64_2", "zt_knn_leaf_f64_3"])?;
    let args = [
        tree_arg(t),
        metric_arg::<T, D>(metric.box_len()),
        Arg::U32(leaves.len as u32),
        lists_arg(&kept),
        r2.arg(),
        Arg::Words(job),
        Arg::Words(out),
    ];
    // SAFETY: zt_knn_leaf_*(tree, metric, num_leaves, kept lists, r2[num_leaves], job, outputs):
    // the sinks hold k values per query row (or one), checked by the API.
    let warps = dev.leaf_warps();
    unsafe { dev.launch_block("knn", kernel, blocks(leaves.len, warps as usize)?, warps * 32, &args)? };
    Ok(pairs.to_vec()?[0])
}
