//! Plane construction on the device (kernels/tree.cu), the same planes as the CPU's
//! (`cpu::planes::plan`, whose loop this mirrors): split capacities of every gap, the
//! splits of each plane by stream compaction, the node arrays with their bounds. Only
//! node-sized data comes to the host: each plane's per-node cell sizes for the
//! regularisation cap (a histogram, or the cells, for the CPU's own rule), and the top
//! plane for the super nodes (one copy each way).

use std::sync::Arc;

use super::backend::Cuda;
use super::device::{Arg, BLOCK, DevBuf, DevPtr, Device, blocks, bytes_of, u32_pair};
use super::walk::{WARPS, counts_to_offsets};
use crate::base::Elem;
use crate::base::TreeParams;
use crate::error::Result;
use crate::geom::Real;
use crate::pipeline::planes::{HostTree, cap_from_cells, cap_from_groups, push_super_plane, relaxed};
use crate::pipeline::{Plane, PointTypes, Tree};

/// Fan-out and depth limit of the max pyramid (`ZT_PYR`, `ZT_PYR_DEPTH`).
const PYR: usize = 256;
const PYR_DEPTH: usize = 5;
/// Largest (bit length, count) histogram the regularisation cap is reduced to on the
/// device (planes of capacity up to 1007 points).
const HIST_MAX_BINS: usize = 1 << 16;
/// Words each block of `zt_copy_segments` copies (`ZT_SEG_WORDS`).
const SEG_WORDS: usize = 1024;

/// One plane's node arrays.
struct PlaneBufs<T: Elem, const D: usize> {
    u: [DevBuf<u32>; 7],
    boxes: [DevBuf<[T; D]>; 4],
}

// Indices into `PlaneBufs::u` (the `ZtPlaneOut` order, boxes between qry_count and child_start).
const START: usize = 0;

impl<T: Real, const D: usize> PlaneBufs<T, D> {
    fn new(dev: &Arc<dyn Device>, len: usize) -> Result<Self> {
        let u = [(); 7].map(|_| DevBuf::new(dev, len));
        let b = [(); 4].map(|_| DevBuf::new(dev, len));
        let mut uu = Vec::with_capacity(7);
        for x in u {
            uu.push(x?);
        }
        let mut bb = Vec::with_capacity(4);
        for x in b {
            bb.push(x?);
        }
        Ok(Self { u: uu.try_into().unwrap_or_else(|_| unreachable!()), boxes: bb.try_into().unwrap_or_else(|_| unreachable!()) })
    }
    /// `ZtPlaneOut<T>`.
    fn out_arg(&self) -> Arg {
        let u = |i: usize| self.u[i].ptr();
        Arg::Words(vec![u(0), u(1), u(2), u(3), u(4), self.boxes[0].ptr(), self.boxes[1].ptr(), self.boxes[2].ptr(), self.boxes[3].ptr(), u(5), u(6)])
    }
    fn len(&self) -> usize {
        self.u[START].len()
    }
}

/// The gaps among `idx` (all gaps `0 .. len` when None) that split a plane of `capacity`
/// (by counts, or by level above `lim`), ascending.
#[allow(clippy::too_many_arguments)]
fn select_splits(
    dev: &Arc<dyn Device>,
    idx: Option<&DevBuf<u32>>,
    len: usize,
    caps: &DevBuf<u32>,
    levels: &DevBuf<u8>,
    capacity: u64,
    lim: u32,
) -> Result<DevBuf<u32>> {
    let flags: DevBuf<u32> = DevBuf::new(dev, len + 1)?;
    let head = [Arg::Ptr(idx.map_or(0, |b| b.ptr())), Arg::U32(len as u32), caps.arg(), levels.arg(), Arg::Words(vec![capacity]), Arg::U32(lim)];
    let mut args = head.to_vec();
    args.push(flags.arg());
    // SAFETY: zt_split_flags(idx[len] or null, len, caps[gaps], levels[gaps], capacity, lim, flags[len]).
    unsafe { dev.launch("tree", "zt_split_flags", blocks(len, BLOCK as usize)?, &args)? };
    let total = counts_to_offsets(dev, &flags, len)?;
    let out: DevBuf<u32> = DevBuf::new(dev, total)?;
    let mut args = head.to_vec();
    args.extend([flags.arg(), out.arg()]);
    // SAFETY: zt_split_scatter(.., offsets[len + 1], out[total]).
    unsafe { dev.launch("tree", "zt_split_scatter", blocks(len, BLOCK as usize)?, &args)? };
    Ok(out)
}

/// `dst[at ..] = src` (whole 4-byte words).
pub(crate) fn copy_into<E: Elem>(dev: &Arc<dyn Device>, src: &DevBuf<E>, dst: &DevBuf<E>, at: usize) -> Result<()> {
    let words = src.len() * size_of::<E>() / 4;
    let args = [src.arg(), Arg::U32(words as u32), Arg::Ptr(dst.ptr() + (at * size_of::<E>()) as u64)];
    // SAFETY: zt_copy_words(src[words], words, dst + at): dst holds at + src.len() elements.
    unsafe { dev.launch("tree", "zt_copy_words", blocks(words, BLOCK as usize)?, &args) }
}

/// All planes over the merged z-ordered points (`levels`: the n - 1 gap levels, n >= 1).
pub(crate) fn build<T: Real, const D: usize>(
    cuda: &Cuda,
    levels: &DevBuf<u8>,
    types: PointTypes<'_, Cuda>,
    src_pos: &[DevBuf<T>; D],
    qry_pos: Option<&[DevBuf<T>; D]>,
    params: &TreeParams,
) -> Result<Tree<Cuda, T, D>> {
    let dev = &cuda.dev;
    let m = levels.len();
    let n = m + 1;
    let prefix = match types {
        PointTypes::Same => 0,
        PointTypes::Joint { src_prefix } => src_prefix.ptr(),
    };
    // The max pyramid over the levels, then every gap's split capacity.
    let mut pyr: Vec<DevBuf<u8>> = Vec::new();
    let mut lens = vec![m];
    while *lens.last().unwrap() > PYR && lens.len() < PYR_DEPTH {
        let below = *lens.last().unwrap();
        let up: DevBuf<u8> = DevBuf::new(dev, below.div_ceil(PYR))?;
        let src = pyr.last().map_or(levels.ptr(), |b| b.ptr());
        // SAFETY: zt_pyr_max(in[below], below, out[ceil(below / 256)]).
        unsafe { dev.launch("tree", "zt_pyr_max", blocks(up.len(), BLOCK as usize)?, &[Arg::Ptr(src), Arg::U32(below as u32), up.arg()])? };
        lens.push(up.len());
        pyr.push(up);
    }
    let mut words: Vec<u64> = std::iter::once(levels.ptr()).chain(pyr.iter().map(|b| b.ptr())).collect();
    words.resize(PYR_DEPTH, 0);
    let mut l5 = lens.iter().map(|&x| x as u32).collect::<Vec<_>>();
    l5.resize(PYR_DEPTH, 0);
    words.extend([u32_pair(l5[0], l5[1]), u32_pair(l5[2], l5[3]), u32_pair(l5[4], lens.len() as u32)]);
    let caps: DevBuf<u32> = DevBuf::new(dev, m)?;
    let pyramid = Arg::Words(words);
    let args = [pyramid.clone(), Arg::Ptr(prefix), Arg::Words(vec![params.leaf_size as u64]), Arg::Words(vec![params.coarsening as u64]), caps.arg()];
    // SAFETY: zt_split_caps(pyramid over levels[m], src_prefix[n + 1] or null, leaf, coarsening, caps[m]).
    unsafe { dev.launch("tree", "zt_split_caps", blocks(m, BLOCK as usize)?, &args)? };

    let pos3 = |p: &[DevBuf<T>; D]| -> Vec<u64> { (0..3).map(|d| if d < D { p[d].ptr() } else { 0 }).collect() };
    let (spos, qpos) = (pos3(src_pos), pos3(qry_pos.unwrap_or(src_pos)));
    let node_kernel =
        super::prims::instance::<T, D>(["zt_plane_nodes_f32_2", "zt_plane_nodes_f32_3", "zt_plane_nodes_f64_2", "zt_plane_nodes_f64_3"])?;
    let mut bufs: Vec<PlaneBufs<T, D>> = Vec::new();
    let mut planes: Vec<Plane> = Vec::new();
    let mut level_caps: Vec<Option<u8>> = Vec::new();
    let mut splits: Option<DevBuf<u32>> = None;
    let mut capacity = params.leaf_size as u64;
    let mut prev_cap: Option<u8> = None;
    let mut iterations = 0;
    loop {
        let (idx, len) = match &splits {
            None => (None, m),
            Some(s) => (Some(s), s.len()),
        };
        let count_splits = select_splits(dev, idx, len, &caps, levels, capacity, u32::MAX)?;
        let level_cap = regularisation_cap(dev, &pyramid, &count_splits, n, capacity, params)?.map(|c| prev_cap.map_or(c, |p| p.max(c)));
        let level_cap = level_cap.or(prev_cap);
        let new_splits = match level_cap {
            Some(lc) => select_splits(dev, idx, len, &caps, levels, capacity, 64 + lc as u32)?,
            None => count_splits,
        };
        prev_cap = level_cap;
        let prev_len = planes.last().map(|p| p.len);
        if idx.is_some() && new_splits.len() == len && len >= params.top_target && iterations < 64 && capacity <= u32::MAX as u64 {
            // As on the CPU: the plane would repeat the one below; not pushed. The lowest
            // split the level cap alone keeps: the least relaxation l that drops a split
            // (a binary search; fewer splits as l grows).
            iterations += 1;
            let mut least = None;
            if let Some(lc) = level_cap {
                let (mut lo, mut hi) = (lc as u32 + 1, (u8::MAX - 64) as u32);
                if select_splits(dev, idx, len, &caps, levels, capacity, 64 + hi)?.len() < len {
                    while lo < hi {
                        let mid = (lo + hi) / 2;
                        if select_splits(dev, idx, len, &caps, levels, capacity, 64 + mid)?.len() < len { hi = mid } else { lo = mid + 1 }
                    }
                    least = Some(lo as u8);
                }
            }
            match least {
                Some(l) => prev_cap = relaxed(prev_cap, params).map(|c| c.max(l)),
                None => capacity = capacity.saturating_mul(params.coarsening as u64),
            }
            continue;
        }
        iterations += 1;
        // The plane's nodes.
        let nodes = PlaneBufs::<T, D>::new(dev, new_splits.len() + 1)?;
        let below = match bufs.last() {
            Some(b) => {
                let bp = planes.last().unwrap();
                let bx = |i: usize| b.boxes[i].ptr();
                vec![b.u[START].ptr(), bx(0), bx(1), bx(2), bx(3), u32_pair(bp.first as u32, bp.len as u32)]
            }
            None => vec![0, 0, 0, 0, 0, 0],
        };
        let args = [
            new_splits.arg(),
            Arg::U32(new_splits.len() as u32),
            Arg::U32(n as u32),
            Arg::Ptr(prefix),
            Arg::Words(spos.clone()),
            Arg::Words(qpos.clone()),
            Arg::Words(below),
            nodes.out_arg(),
        ];
        // SAFETY: zt_plane_nodes_*(splits[nsplit], nsplit, n, src_prefix, positions, the plane
        // below (its own arrays), this plane's arrays of nsplit + 1 nodes).
        unsafe { dev.launch("tree", node_kernel, blocks(nodes.len(), BLOCK as usize)?, &args)? };
        let first = planes.last().map_or(0, |p| p.first + p.len);
        planes.push(Plane { first, len: nodes.len(), capacity });
        level_caps.push(level_cap);
        bufs.push(nodes);
        splits = Some(new_splits);
        let len = planes.last().unwrap().len;
        let stalled = prev_len == Some(len) && len > params.top_target;
        if len <= params.top_target || planes.len() >= 24 || capacity > u32::MAX as u64 {
            break;
        }
        if stalled {
            // As on the CPU: relax the regularisation by one coarsening step per plane.
            prev_cap = relaxed(prev_cap, params);
        }
        capacity = capacity.saturating_mul(params.coarsening as u64);
    }
    // The super plane, on the host from the top plane (small), which comes over in one
    // copy: its arrays gathered into one buffer on the device. (Eleven downloads, eleven
    // uploads and a copy launch per array and plane were ~0.5 ms of a 1e6 call: the
    // device waits for the host at each.)
    let top = *planes.last().unwrap();
    let tb = bufs.last().unwrap();
    let fields = |b: &PlaneBufs<T, D>| -> [(DevPtr, usize); 11] {
        let u = |i: usize| (b.u[i].ptr(), b.u[i].len());
        let x = |i: usize| (b.boxes[i].ptr(), b.boxes[i].len() * D * size_of::<T>() / 4);
        [u(0), u(1), u(2), u(3), u(4), x(0), x(1), x(2), x(3), u(5), u(6)]
    };
    let top_fields = fields(tb);
    let staging: DevBuf<u32> = DevBuf::new(dev, top_fields.iter().map(|f| f.1).sum())?;
    let mut segs = Vec::new();
    let mut at = 0;
    for (ptr, words) in top_fields {
        segs.push((ptr, staging.ptr() + 4 * at as u64, words));
        at += words;
    }
    copy_segments(dev, &segs)?;
    let words = staging.to_vec()?;
    let mut at = 0;
    let len = top.len;
    let mut host = HostTree::<T, D> {
        planes: vec![Plane { first: 0, ..top }],
        start: take(&words, &mut at, len),
        src_start: take(&words, &mut at, len),
        src_count: take(&words, &mut at, len),
        qry_start: take(&words, &mut at, len),
        qry_count: take(&words, &mut at, len),
        src_lo: take(&words, &mut at, len),
        src_hi: take(&words, &mut at, len),
        qry_lo: take(&words, &mut at, len),
        qry_hi: take(&words, &mut at, len),
        child_start: take(&words, &mut at, len),
        child_count: take(&words, &mut at, len),
        level_caps: Vec::new(),
    };
    push_super_plane(&mut host, params.super_group);
    let sp = *host.planes.last().unwrap();
    // The super plane's arrays, packed in field order, go up in one upload.
    let child_start: Vec<u32> = host.child_start[sp.first..].iter().map(|&c| c + top.first as u32).collect();
    let s = sp.first;
    let super_host: [&[u8]; 11] = [
        bytes_of(&host.start[s..]),
        bytes_of(&host.src_start[s..]),
        bytes_of(&host.src_count[s..]),
        bytes_of(&host.qry_start[s..]),
        bytes_of(&host.qry_count[s..]),
        bytes_of(&host.src_lo[s..]),
        bytes_of(&host.src_hi[s..]),
        bytes_of(&host.qry_lo[s..]),
        bytes_of(&host.qry_hi[s..]),
        bytes_of(&child_start),
        bytes_of(&host.child_count[s..]),
    ];
    let super_dev = DevBuf::from_slice(dev, &super_host.concat())?;
    planes.push(Plane { first: top.first + top.len, len: sp.len, capacity: sp.capacity });
    level_caps.push(None);
    // One array per field over all planes, filled by one launch.
    let total = planes.iter().map(|p| p.len).sum::<usize>();
    let out_u: Vec<DevBuf<u32>> = (0..7).map(|_| DevBuf::new(dev, total)).collect::<Result<_>>()?;
    let out_b: Vec<DevBuf<[T; D]>> = (0..4).map(|_| DevBuf::new(dev, total)).collect::<Result<_>>()?;
    let out_ptr = |f: usize| match f {
        0..=4 => out_u[f].ptr(),
        5..=8 => out_b[f - 5].ptr(),
        _ => out_u[f - 4].ptr(),
    };
    let word_size = |f: usize| if (5..=8).contains(&f) { D * size_of::<T>() / 4 } else { 1 };
    let mut segs = Vec::new();
    let mut first = 0;
    for b in &bufs {
        for (f, (ptr, words)) in fields(b).into_iter().enumerate() {
            segs.push((ptr, out_ptr(f) + (4 * first * word_size(f)) as u64, words));
        }
        first += b.len();
    }
    let mut src = super_dev.ptr();
    for (f, bytes) in super_host.iter().enumerate() {
        segs.push((src, out_ptr(f) + (4 * first * word_size(f)) as u64, bytes.len() / 4));
        src += bytes.len() as u64;
    }
    copy_segments(dev, &segs)?;
    let mut u = out_u.into_iter();
    let mut b = out_b.into_iter();
    let mut nu = || u.next().unwrap_or_else(|| unreachable!());
    let (start, src_start, src_count, qry_start, qry_count) = (nu(), nu(), nu(), nu(), nu());
    let (child_start, child_count) = (nu(), nu());
    let mut nb = || b.next().unwrap_or_else(|| unreachable!());
    let (src_lo, src_hi, qry_lo, qry_hi) = (nb(), nb(), nb(), nb());
    Ok(Tree { planes, start, src_start, src_count, qry_start, qry_count, src_lo, src_hi, qry_lo, qry_hi, child_start, child_count, level_caps })
}

/// `len` values of `E` from `words[*at ..]`, advancing `at`.
fn take<E: Elem>(words: &[u32], at: &mut usize, len: usize) -> Vec<E> {
    let n = len * size_of::<E>() / 4;
    let mut v = vec![E::FILL; len];
    // SAFETY: `n` words are `len` values of `E` (plain data, every bit pattern valid).
    unsafe { std::ptr::copy_nonoverlapping(words[*at..*at + n].as_ptr().cast::<u8>(), v.as_mut_ptr().cast::<u8>(), n * 4) };
    *at += n;
    v
}

/// Word copies (source, destination, words) in one launch (`zt_copy_segments`).
fn copy_segments(dev: &Arc<dyn Device>, segs: &[(DevPtr, DevPtr, usize)]) -> Result<()> {
    let mut table: Vec<u64> = Vec::with_capacity(4 * segs.len());
    let mut nblocks = 0u64;
    for &(src, dst, words) in segs {
        table.extend([src, dst, words as u64, nblocks]);
        nblocks += words.div_ceil(SEG_WORDS) as u64;
    }
    if nblocks == 0 {
        return Ok(());
    }
    let table = DevBuf::from_slice(dev, &table)?;
    let grid = u32::try_from(nblocks).map_err(|_| crate::error::Error::Device("copy too large for one launch".into()))?;
    // SAFETY: zt_copy_segments(table[4 * nseg], nseg): each row a source and destination
    // of `words` words each (device memory), its first block the blocks before it.
    unsafe { dev.launch("tree", "zt_copy_segments", grid, &[table.arg(), Arg::U32(segs.len() as u32)]) }
}

/// The regularisation cap of a plane whose count splits are `splits` (None when off):
/// each node's cell size reduced on the device, the cap decided by the CPU's rule.
fn regularisation_cap(
    dev: &Arc<dyn Device>,
    pyramid: &Arg,
    splits: &DevBuf<u32>,
    n: usize,
    capacity: u64,
    params: &TreeParams,
) -> Result<Option<u8>> {
    if params.max_volume_factor == 0.0 || n < 2 {
        return Ok(None);
    }
    let nseg = splits.len() + 1;
    let head = [pyramid.clone(), splits.arg(), Arg::U32(splits.len() as u32), Arg::U32(n as u32)];
    // Planes of small capacity (the leaves and the plane above: millions of nodes at 1e8
    // points) are counted per (bit length, count) on the device, so that the host gets a
    // histogram rather than every node to group (H100, kNN 1e8: a tree stage of 55-84 ms,
    // most of it the host grouping 3e6 nodes); a count above the capacity (none, usually)
    // falls back to the nodes.
    let cmax = capacity.min(HIST_MAX_BINS as u64) as usize;
    if 65 * (cmax + 1) <= HIST_MAX_BINS {
        let bins = 65 * (cmax + 1);
        let hist: DevBuf<u32> = DevBuf::zeros(dev, bins + 1)?;
        let mut args = head.to_vec();
        args.extend([Arg::Ptr(0), Arg::Ptr(0), hist.arg(), Arg::U32(cmax as u32)]);
        // SAFETY: zt_node_cells(pyramid, splits[nsplit], nsplit, n, -, -, hist[65 * (cmax + 1) + 1], cmax).
        unsafe { dev.launch("tree", "zt_node_cells", blocks(nseg, WARPS)?, &args)? };
        let h = hist.to_vec()?;
        if h[bins] == 0 {
            let groups = h[..bins]
                .iter()
                .enumerate()
                .filter(|(_, m)| **m > 0)
                .map(|(i, &m)| ((i / (cmax + 1)) as u8, (i % (cmax + 1)) as u32, m as u64))
                .collect();
            return Ok(cap_from_groups(groups, n, params));
        }
    }
    let (g, count): (DevBuf<u32>, DevBuf<u32>) = (DevBuf::new(dev, nseg)?, DevBuf::new(dev, nseg)?);
    let mut args = head.to_vec();
    args.extend([g.arg(), count.arg(), Arg::Ptr(0), Arg::U32(0)]);
    // SAFETY: zt_node_cells(pyramid over levels[n - 1], splits[nsplit], nsplit, n, g[nsplit + 1], count[nsplit + 1], -, -).
    unsafe { dev.launch("tree", "zt_node_cells", blocks(nseg, WARPS)?, &args)? };
    let cells: Vec<(u8, u32)> = g.to_vec()?.into_iter().zip(count.to_vec()?).map(|(g, c)| (g as u8, c)).collect();
    Ok(cap_from_cells(&cells, n, params))
}
