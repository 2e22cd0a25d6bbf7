//! Host drivers of the FoF kernels (kernels/fof.cu): the union–find and node flags on the
//! device, the leaves' own pairs, the node passes (decide -> scan -> keep), the leaf–leaf
//! pass and the contraction into roots.

use std::sync::Arc;

use super::backend::Cuda;
use super::device::{Arg, BLOCK, DevBuf, Device, blocks};
use super::prims::{self, instance};
use super::walk::{Cands, WARPS, candidates, keep_decided, metric_arg, tree_arg};
use crate::error::Result;
use crate::geom::Real;
use crate::geom::metric::Metric;
use crate::pipeline::{Lists, Prepared};

/// The state of one linking on the device: the union–find over z-indices and, per node,
/// whether all its points are known to be in one group.
pub(crate) struct DevLinks {
    parent: DevBuf<u32>,
    flags: DevBuf<u32>,
    /// Nodes connected whole, their points still to be linked (at most every node once),
    /// and their number.
    pending: DevBuf<u32>,
    npending: DevBuf<u32>,
}

/// `ZtFof<T>`: l² and its conservative bounds (the CPU's `fof::Job`), positions, state.
fn fof_arg<T: Real, const D: usize>(zs: &Prepared<Cuda, T, D>, l: f64, links: &DevLinks) -> Arg {
    let (l2, l2_lo, l2_hi) = (l * l, l * l * (1.0 - 1e-12), l * l * (1.0 + 1e-12));
    let p = |d: usize| zs.src_pos[d.min(D - 1)].ptr();
    Arg::Words(vec![
        l2.to_bits(),
        l2_lo.to_bits(),
        l2_hi.to_bits(),
        p(0),
        p(1),
        p(2),
        links.parent.ptr(),
        links.flags.ptr(),
        links.pending.ptr(),
        links.npending.ptr(),
    ])
}

pub(crate) fn begin<T: Real, const D: usize>(cuda: &Cuda, zs: &Prepared<Cuda, T, D>) -> Result<DevLinks> {
    let nodes = zs.tree.num_nodes();
    Ok(DevLinks {
        parent: prims::iota(&cuda.dev, zs.n_sources())?,
        flags: DevBuf::zeros(&cuda.dev, nodes)?,
        pending: DevBuf::new(&cuda.dev, nodes)?,
        npending: DevBuf::zeros(&cuda.dev, 1)?,
    })
}

/// Links the points of the nodes a kernel connected whole (see `zt_connect`).
fn flush<T: Real, const D: usize>(dev: &Arc<dyn Device>, zs: &Prepared<Cuda, T, D>, links: &DevLinks) -> Result<()> {
    let count = links.npending.to_vec()?[0] as usize;
    if count == 0 {
        return Ok(());
    }
    let t = &zs.tree;
    let args = [t.src_start.arg(), t.src_count.arg(), links.parent.arg(), links.pending.arg(), Arg::U32(count as u32)];
    // SAFETY: zt_fof_flush(src_start, src_count, parent[n], pending[count], count).
    unsafe { dev.launch("fof", "zt_fof_flush", blocks(count, WARPS)?, &args)? };
    // SAFETY: the counter, one u32.
    unsafe { dev.zero(links.npending.ptr(), 4) }
}

/// Every leaf's own pairs, then the flags of every plane, leaves up.
pub(crate) fn leaf_self<T: Real, const D: usize, M: Metric<f64, D>>(
    dev: &Arc<dyn Device>,
    metric: &M,
    zs: &Prepared<Cuda, T, D>,
    l: f64,
    links: &DevLinks,
) -> Result<()> {
    let t = &zs.tree;
    let leaves = t.leaves();
    assert_eq!(leaves.first, 0);
    let kernel = instance::<T, D>(["zt_fof_leaf_self_f32_2", "zt_fof_leaf_self_f32_3", "zt_fof_leaf_self_f64_2", "zt_fof_leaf_self_f64_3"])?;
    let args = [tree_arg(t), metric_arg::<f64, D>(metric.box_len()), fof_arg(zs, l, links), Arg::U32(leaves.len as u32)];
    // SAFETY: zt_fof_leaf_self_*(tree, metric, job, num_leaves).
    unsafe { dev.launch("fof", kernel, blocks(leaves.len, WARPS)?, &args)? };
    flush(dev, zs, links)?;
    let flags = if T::IS_F64 { "zt_fof_flags_f64" } else { "zt_fof_flags_f32" };
    for (p, plane) in t.planes.iter().enumerate() {
        let args = [tree_arg(t), fof_arg(zs, l, links), Arg::U32(plane.first as u32), Arg::U32(plane.len as u32), Arg::U32((p == 0) as u32)];
        // SAFETY: zt_fof_flags_*(tree, job, first, len, leaves): nodes first .. first + len.
        unsafe { dev.launch("fof", flags, blocks(plane.len, BLOCK as usize)?, &args)? };
    }
    Ok(())
}

/// The node pass from plane `parent`: the pairs each child keeps for the next plane.
#[allow(clippy::too_many_arguments)]
pub(crate) fn node_pass<T: Real, const D: usize, M: Metric<f64, D>>(
    dev: &Arc<dyn Device>,
    metric: &M,
    zs: &Prepared<Cuda, T, D>,
    l: f64,
    links: &DevLinks,
    parent: usize,
    lists: &Lists<Cuda>,
) -> Result<Lists<Cuda>> {
    let t = &zs.tree;
    let cp = t.planes[parent - 1];
    let kernel = instance::<T, D>(["zt_fof_decide_f32_2", "zt_fof_decide_f32_3", "zt_fof_decide_f64_2", "zt_fof_decide_f64_3"])?;
    keep_decided(dev, t, parent, lists, |cands, doff, keep, counts| {
        let args = [
            tree_arg(t),
            metric_arg::<f64, D>(metric.box_len()),
            fof_arg(zs, l, links),
            Arg::U32(cp.first as u32),
            Arg::U32(cp.len as u32),
            cands.arg(),
            doff.arg(),
            keep.arg(),
            counts.arg(),
        ];
        // SAFETY: zt_fof_decide_*(tree, metric, job, child_first, child_len, cands, doff[child_len + 1], keep[decisions], cnt[child_len]).
        unsafe { dev.launch("fof", kernel, blocks(cp.len, WARPS)?, &args)? };
        flush(dev, zs, links)
    })
}

/// Point pairs between different leaves; returns the candidate leaf pairs seen.
pub(crate) fn leaf_pass<T: Real, const D: usize, M: Metric<f64, D>>(
    dev: &Arc<dyn Device>,
    metric: &M,
    zs: &Prepared<Cuda, T, D>,
    l: f64,
    links: &DevLinks,
    lists: &Lists<Cuda>,
) -> Result<u64> {
    let t = &zs.tree;
    let leaves = t.leaves();
    let cands: Cands = candidates(dev, t, 1, lists)?;
    let pairs: DevBuf<u64> = DevBuf::zeros(dev, 1)?;
    let kernel = instance::<T, D>(["zt_fof_leaf_pass_f32_2", "zt_fof_leaf_pass_f32_3", "zt_fof_leaf_pass_f64_2", "zt_fof_leaf_pass_f64_3"])?;
    let args = [tree_arg(t), metric_arg::<f64, D>(metric.box_len()), fof_arg(zs, l, links), Arg::U32(leaves.len as u32), cands.arg(), pairs.arg()];
    // SAFETY: zt_fof_leaf_pass_*(tree, metric, job, num_leaves, cands, pairs[1]).
    unsafe { dev.launch("fof", kernel, blocks(leaves.len, WARPS)?, &args)? };
    flush(dev, zs, links)?;
    Ok(pairs.to_vec()?[0])
}

/// Every point's root: the z-index of its group's first point.
pub(crate) fn contract(dev: &Arc<dyn Device>, links: DevLinks) -> Result<DevBuf<u32>> {
    let n = links.parent.len();
    let roots: DevBuf<u32> = DevBuf::new(dev, n)?;
    // SAFETY: zt_fof_roots(parent[n], n, roots[n]).
    unsafe { dev.launch("fof", "zt_fof_roots", blocks(n, BLOCK as usize)?, &[links.parent.arg(), Arg::U32(n as u32), roots.arg()])? };
    Ok(roots)
}
