//! Refinement of runs of identical keys on the device (`cpu::ingest::refine_runs`): runs
//! longer than `max_run` are found by kernels (kernels/refine.cu); each is keyed over its
//! own bounding box, stably re-sorted, and its permutation, positions and internal gap
//! levels (secondary: below every primary level) rewritten, with the keys, sort and gather primitives. Long runs are rare (points
//! closer than a cell of the global key), so they are taken one after another.

use std::sync::Arc;

use super::device::{Arg, BLOCK, DevBuf, Device, blocks};
use super::prims::{self, Strided};
use super::tree::copy_into;
use super::walk::counts_to_offsets;
use crate::error::Result;
use crate::geom::Real;
use crate::geom::morton::Quantizer;
use crate::input::Bounds;

pub(crate) fn refine_runs<T: Real, const D: usize>(
    dev: &Arc<dyn Device>,
    keys: &DevBuf<u64>,
    perm: &mut DevBuf<u32>,
    levels: &mut DevBuf<u8>,
    pos: &mut [DevBuf<T>; D],
    max_run: usize,
) -> Result<()> {
    let n = keys.len();
    if n <= max_run {
        return Ok(());
    }
    let grid = blocks(n, BLOCK as usize)?;
    let len: DevBuf<u32> = DevBuf::new(dev, n)?;
    // SAFETY (the launches below): the kernels of kernels/refine.cu over n keys, with
    // arrays of n (+ 1 for scanned flags) entries.
    unsafe {
        dev.launch("refine", "zt_long_runs", grid, &[keys.arg(), Arg::U32(n as u32), Arg::U32(max_run.min(u32::MAX as usize) as u32), len.arg()])?
    };
    let at: DevBuf<u32> = DevBuf::new(dev, n + 1)?;
    unsafe { dev.launch("refine", "zt_run_flags", grid, &[len.arg(), Arg::U32(n as u32), at.arg()])? };
    let nruns = counts_to_offsets(dev, &at, n)?;
    if nruns == 0 {
        return Ok(());
    }
    let list: DevBuf<u32> = DevBuf::new(dev, 2 * nruns)?;
    unsafe { dev.launch("refine", "zt_run_list", grid, &[len.arg(), Arg::U32(n as u32), at.arg(), list.arg()])? };
    let list = list.to_vec()?;
    for run in list.chunks_exact(2) {
        let (s0, m) = (run[0] as usize, run[1] as usize);
        let part: [Strided; D] = std::array::from_fn(|d| Strided { data: pos[d].ptr() + (s0 * size_of::<T>()) as u64, stride: 0 });
        let (_, lo, hi) = prims::check_points::<T, D>(dev, part, m, None)?;
        if (0..D).all(|d| hi[d] == lo[d]) {
            continue; // truly identical points: chunked into leaves by the tree
        }
        let quant = Quantizer::<D>::over(&Bounds { lo, hi });
        let mut rkeys: DevBuf<u64> = DevBuf::new(dev, m)?;
        prims::keys::<T, D>(dev, part, m, &quant, rkeys.ptr())?;
        let mut order = prims::iota(dev, m)?;
        prims::sort_pairs(dev, &mut rkeys, &mut order, 64)?; // stable: ties keep their order
        let tmp: DevBuf<u32> = DevBuf::new(dev, m)?;
        let args = [Arg::Ptr(perm.ptr() + 4 * s0 as u64), order.arg(), Arg::U32(m as u32), tmp.arg()];
        // SAFETY: zt_permute_u32(perm + s0 [m], order[m], m, tmp[m]).
        unsafe { dev.launch("refine", "zt_permute_u32", blocks(m, BLOCK as usize)?, &args)? };
        copy_into(dev, &tmp, perm, s0)?;
        for d in 0..D {
            let t: DevBuf<T> = DevBuf::new(dev, m)?;
            prims::gather::<T>(dev, part[d], &order, 0, m, &t)?;
            copy_into(dev, &t, &pos[d], s0)?;
        }
        // SAFETY: zt_secondary_levels(keys[m], m, levels + s0 [m - 1]): the run's internal gaps.
        unsafe {
            dev.launch(
                "refine",
                "zt_secondary_levels",
                blocks(m - 1, BLOCK as usize)?,
                &[rkeys.arg(), Arg::U32(m as u32), Arg::Ptr(levels.ptr() + s0 as u64)],
            )?
        };
    }
    Ok(())
}
