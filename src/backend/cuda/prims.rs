//! Host drivers of the device primitives: Morton keys of strided caller arrays, key
//! levels, exclusive scans, the stable radix sort with permutation. Each queues kernels
//! from kernels/ on a `Device`; only a few words come back to the host (the key spread).

use std::sync::Arc;

use super::device::{Arg, BLOCK, DevBuf, DevPtr, Device, blocks};
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::geom::morton::{CUT_MIN, Quantizer, cut_mask};

/// A caller's array on the device: element `i` at `data + i * stride` (0: packed).
#[derive(Clone, Copy, Debug)]
pub(crate) struct Strided {
    pub data: DevPtr,
    pub stride: i64,
}

impl Strided {
    /// Element `i` onwards (elements of `size` bytes).
    pub(crate) fn at(self, i: usize, size: usize) -> Strided {
        let stride = if self.stride == 0 { size as i64 } else { self.stride };
        Strided { data: self.data + (i as i64 * stride) as u64, stride: self.stride }
    }
    fn arg(self) -> Arg {
        Arg::Words(vec![self.data, self.stride as u64])
    }
}

/// `n` elements of `size` bytes of a strided device array (the caller's descriptor covers
/// them), packed on the host.
pub(crate) fn download_strided(dev: &Arc<dyn Device>, a: Strided, n: usize, size: usize) -> Result<Vec<u8>> {
    if n == 0 {
        return Ok(Vec::new());
    }
    let stride = if a.stride == 0 { size } else { a.stride as usize };
    let mut raw = vec![0u8; (n - 1) * stride + size];
    // SAFETY: the descriptor covers `n` elements of device memory (checked at the API).
    unsafe { dev.download(&mut raw, a.data)? };
    let mut out = Vec::with_capacity(n * size);
    for i in 0..n {
        out.extend_from_slice(&raw[i * stride..i * stride + size]);
    }
    Ok(out)
}

/// Points per thread of zt_check (`ZT_CHECK_ITEMS` in kernels/keys.cu).
const CHECK_ITEMS: usize = 16;
/// Keys per radix-sort tile (`ZT_TILE` in kernels/sort.cu).
const SORT_TILE: usize = 2048;

fn len_u32(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::TooManyPoints { got: n, max: u32::MAX as usize })
}

/// The instantiation of a kernel for `T` and `D` among its f32 2D, f32 3D, f64 2D and
/// f64 3D versions.
pub(crate) fn instance<T: Real, const D: usize>(names: [&'static str; 4]) -> Result<&'static str> {
    match (T::NAME, D) {
        ("f32", 2) => Ok(names[0]),
        ("f32", 3) => Ok(names[1]),
        ("f64", 2) => Ok(names[2]),
        ("f64", 3) => Ok(names[3]),
        _ => Err(Error::Device(format!("no instance of {} for {} in {D}D", names[0], T::NAME))),
    }
}

/// Morton keys of `n` points into `keys[..n]`, cells as `quant` (src/geom/morton.rs).
/// `keys` is device memory for `n` keys (a buffer, or a part of one).
pub(crate) fn keys<T: Real, const D: usize>(dev: &Arc<dyn Device>, pos: [Strided; D], n: usize, quant: &Quantizer<D>, keys: DevPtr) -> Result<()> {
    let kernel = instance::<T, D>(["zt_keys_f32_2", "zt_keys_f32_3", "zt_keys_f64_2", "zt_keys_f64_3"])?;
    let (lo, scale) = quant.parts();
    let mut q = [0u64; 6];
    for d in 0..D {
        q[d] = lo[d].to_bits();
        q[3 + d] = scale[d].to_bits();
    }
    let z = if D == 3 { pos[D - 1] } else { pos[0] };
    let args = [pos[0].arg(), pos[1].arg(), z.arg(), Arg::U32(len_u32(n)?), Arg::Words(q.to_vec()), Arg::Ptr(keys)];
    // SAFETY: the argument list is zt_keys_*'s; `pos` covers `n` points (the caller's
    // descriptors, checked by the caller), `keys` holds `n` keys.
    unsafe { dev.launch("keys", kernel, blocks(n, BLOCK as usize)?, &args) }
}

/// `0, 1, .., n - 1`.
pub(crate) fn iota(dev: &Arc<dyn Device>, n: usize) -> Result<DevBuf<u32>> {
    let out = DevBuf::new(dev, n)?;
    // SAFETY: zt_iota(out[n], n).
    unsafe { dev.launch("scan", "zt_iota", blocks(n, BLOCK as usize)?, &[out.arg(), Arg::U32(len_u32(n)?)])? };
    Ok(out)
}

/// The checks of `validate::check_point` over `n` points and the bounding box of the good
/// ones: the first bad point's index (if any) and, per dimension, the min and max.
#[allow(clippy::type_complexity)]
pub(crate) fn check_points<T: Real, const D: usize>(
    dev: &Arc<dyn Device>,
    pos: [Strided; D],
    n: usize,
    box_len: Option<[f64; D]>,
) -> Result<(Option<usize>, [f64; D], [f64; D])> {
    let kernel = instance::<T, D>(["zt_check_f32_2", "zt_check_f32_3", "zt_check_f64_2", "zt_check_f64_3"])?;
    // Order-preserving encodings of doubles (kernels/keys.cu zt_order_enc) and back.
    let enc = |v: f64| {
        let b = (v + 0.0).to_bits();
        if b >> 63 == 1 { !b } else { b | 1 << 63 }
    };
    let dec = |e: u64| f64::from_bits(if e >> 63 == 1 { e & !(1 << 63) } else { !e });
    // lo[3], hi[3] and the first bad index (a u32 in word 6) in one buffer: one upload and
    // one download (each a wait for the device).
    let lo_inf = enc(f64::INFINITY);
    let hi_inf = enc(f64::NEG_INFINITY);
    let out: DevBuf<u64> = DevBuf::from_slice(dev, &[lo_inf, lo_inf, lo_inf, hi_inf, hi_inf, hi_inf, u64::MAX])?;
    let (lo, hi, first) = (out.ptr(), out.ptr() + 24, out.ptr() + 48);
    let mut words = vec![0u64; 5];
    if let Some(l) = box_len {
        for d in 0..D {
            words[d] = l[d].to_bits();
        }
        words[4] = 1;
    }
    words[3] = T::MAX_COORD.to_bits();
    let z = if D == 3 { pos[D - 1] } else { pos[0] };
    let args = [pos[0].arg(), pos[1].arg(), z.arg(), Arg::U32(len_u32(n)?), Arg::Words(words), Arg::Ptr(first), Arg::Ptr(lo), Arg::Ptr(hi)];
    // SAFETY: zt_check_*(x, y, z, n, box, first[1], lo[3], hi[3]); `pos` covers n points.
    unsafe { dev.launch("keys", kernel, blocks(n, BLOCK as usize * CHECK_ITEMS)?, &args)? };
    let all = out.to_vec()?;
    let (l, h, f) = (&all[0..3], &all[3..6], all[6] as u32);
    Ok(((f != u32::MAX).then_some(f as usize), std::array::from_fn(|d| dec(l[d])), std::array::from_fn(|d| dec(h[d]))))
}

/// Levels of the gaps between consecutive sorted keys (`n - 1` of them).
pub(crate) fn levels(dev: &Arc<dyn Device>, keys: &DevBuf<u64>) -> Result<DevBuf<u8>> {
    let n = keys.len();
    let out = DevBuf::new(dev, n.saturating_sub(1))?;
    if n >= 2 {
        let args = [keys.arg(), Arg::U32(len_u32(n)?), out.arg()];
        // SAFETY: zt_levels(keys[n], n, levels[n - 1]).
        unsafe { dev.launch("keys", "zt_levels", blocks(n - 1, BLOCK as usize)?, &args)? };
    }
    Ok(out)
}

/// Arrays up to this length are scanned by one block in one launch (4 tiles of
/// `ZT_BLOCK * ZT_SCAN_ITEMS` in kernels/scan.cu): a kNN call at 1e6 made ~72 scan
/// launches with the two-level scan alone, most of them on the planes' small arrays.
pub(crate) const SCAN_ONE_BLOCK_MAX: usize = 4 * 256 * 16;

/// In-place exclusive prefix sum of `v[..n]`; returns nothing (the total is the caller's
/// to read, e.g. from an extra zero element at the end).
pub(crate) fn exclusive_scan(dev: &Arc<dyn Device>, v: DevPtr, n: usize) -> Result<()> {
    exclusive_scan_with(dev, v, n, SCAN_ONE_BLOCK_MAX)
}

/// `exclusive_scan` with arrays up to `one_block_max` scanned by one block (tests take a
/// small one to reach the two-level scan's recursion on small arrays).
pub(crate) fn exclusive_scan_with(dev: &Arc<dyn Device>, v: DevPtr, n: usize, one_block_max: usize) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // (At least 1: the recursion ends once the totals fit one block.)
    if n <= one_block_max.clamp(1, SCAN_ONE_BLOCK_MAX) {
        // SAFETY: zt_scan_one_block(v[n], n), in place, one block.
        return unsafe { dev.launch("scan", "zt_scan_one_block", 1, &[Arg::Ptr(v), Arg::U32(len_u32(n)?)]) };
    }
    let nb = blocks(n, BLOCK as usize)?;
    let totals: DevBuf<u32> = DevBuf::new(dev, nb as usize)?;
    let args = [Arg::Ptr(v), Arg::U32(len_u32(n)?), Arg::Ptr(v), totals.arg()];
    // SAFETY: zt_scan_blocks(in[n], n, out[n], totals[nb]), in place.
    unsafe { dev.launch("scan", "zt_scan_blocks", nb, &args)? };
    exclusive_scan_with(dev, totals.ptr(), nb as usize, one_block_max)?;
    let args = [Arg::Ptr(v), Arg::U32(len_u32(n)?), totals.arg()];
    // SAFETY: zt_scan_add(out[n], n, offsets[nb]).
    unsafe { dev.launch("scan", "zt_scan_add", nb, &args)? };
    Ok(())
}

/// Stable sort of `keys`, applying the same permutation to `vals` (LSD radix, 8 bits per
/// pass, passes on which every key agrees skipped); above `CUT_MIN` keys, the keys are
/// first cut to their `keep` highest varying bits (the lower bits cleared, in the sorted
/// output too), as the CPU's `radix_sort` does: 6 passes instead of 8 for the tree's keys
/// at 1e6-1e7 points.
pub(crate) fn sort_pairs(dev: &Arc<dyn Device>, keys: &mut DevBuf<u64>, vals: &mut DevBuf<u32>, keep: u32) -> Result<()> {
    let n = keys.len();
    assert_eq!(n, vals.len());
    if n < 2 {
        return Ok(());
    }
    let n32 = len_u32(n)?;
    let spread: DevBuf<u64> = DevBuf::zeros(dev, 1)?;
    // SAFETY: zt_key_spread(keys[n], n, spread[1]).
    unsafe { dev.launch("sort", "zt_key_spread", blocks(n, BLOCK as usize)?, &[keys.arg(), Arg::U32(n32), spread.arg()])? };
    let mut diff = spread.to_vec()?[0];
    let mask = if n > CUT_MIN { cut_mask(diff, keep) } else { u64::MAX };
    if mask != u64::MAX {
        let low = mask.trailing_zeros();
        // SAFETY: zt_key_cut(keys[n], n, low), 0 < low < 64.
        unsafe { dev.launch("sort", "zt_key_cut", blocks(n, BLOCK as usize)?, &[keys.arg(), Arg::U32(n32), Arg::U32(low)])? };
        diff &= mask;
    }
    let nb = blocks(n, SORT_TILE)?;
    let counts: DevBuf<u32> = DevBuf::new(dev, 256 * nb as usize)?;
    let mut keys_alt: DevBuf<u64> = DevBuf::new(dev, n)?;
    let mut vals_alt: DevBuf<u32> = DevBuf::new(dev, n)?;
    for shift in (0..64).step_by(8) {
        if (diff >> shift) & 0xff == 0 {
            continue;
        }
        // SAFETY: zt_radix_counts(keys[n], n, shift, counts[256 * nb]).
        unsafe { dev.launch("sort", "zt_radix_counts", nb, &[keys.arg(), Arg::U32(n32), Arg::U32(shift), counts.arg()])? };
        exclusive_scan(dev, counts.ptr(), counts.len())?;
        let args = [keys.arg(), vals.arg(), Arg::U32(n32), Arg::U32(shift), counts.arg(), keys_alt.arg(), vals_alt.arg()];
        // SAFETY: zt_radix_scatter(keys[n], vals[n], n, shift, offsets[256 * nb], keys_out[n], vals_out[n]).
        unsafe { dev.launch("sort", "zt_radix_scatter", nb, &args)? };
        std::mem::swap(keys, &mut keys_alt);
        std::mem::swap(vals, &mut vals_alt);
    }
    Ok(())
}

/// `out[z] = a[perm[z] - first]` for every z whose `perm[z]` is in `first .. first + count`
/// (one coordinate of the caller's points, into z-order).
pub(crate) fn gather<T: Real>(dev: &Arc<dyn Device>, a: Strided, perm: &DevBuf<u32>, first: u32, count: usize, out: &DevBuf<T>) -> Result<()> {
    let n = perm.len();
    assert!(out.len() >= n);
    let kernel = match T::NAME {
        "f32" => "zt_gather_f32",
        "f64" => "zt_gather_f64",
        other => return Err(Error::Device(format!("no gather kernel for {other}"))),
    };
    let args = [a.arg(), perm.arg(), Arg::U32(len_u32(n)?), Arg::U32(first), Arg::U32(len_u32(count)?), out.arg()];
    // SAFETY: zt_gather_*(a[count], perm[n], n, first, count, out[n]).
    unsafe { dev.launch("keys", kernel, blocks(n, BLOCK as usize)?, &args) }
}

/// `out[z] = field[orig[z]]` as f64 for a caller's f32 (`f64 = false`) or f64 field.
pub(crate) fn gather_field(dev: &Arc<dyn Device>, a: Strided, f64_field: bool, orig: &DevBuf<u32>) -> Result<DevBuf<f64>> {
    let n = orig.len();
    let out = DevBuf::new(dev, n)?;
    let kernel = if f64_field { "zt_gather_field_f64" } else { "zt_gather_field_f32" };
    // SAFETY: zt_gather_field_*(a, orig[n], n, out[n]); `a` covers every index in `orig`.
    unsafe { dev.launch("keys", kernel, blocks(n, BLOCK as usize)?, &[a.arg(), orig.arg(), Arg::U32(len_u32(n)?), out.arg()])? };
    Ok(out)
}

/// Splits merged z-ordered points into sources (`perm < ns`) and queries, in z-order each:
/// their positions, input indices, and the source prefix count (`n + 1` entries).
#[allow(clippy::type_complexity)]
pub(crate) fn split_types<T: Real, const D: usize>(
    dev: &Arc<dyn Device>,
    pos: &[DevBuf<T>; D],
    perm: &DevBuf<u32>,
    ns: usize,
) -> Result<([DevBuf<T>; D], DevBuf<u32>, [DevBuf<T>; D], DevBuf<u32>, DevBuf<u32>)> {
    let n = perm.len();
    let nq = n - ns;
    let (n32, ns32) = (len_u32(n)?, len_u32(ns)?);
    let prefix: DevBuf<u32> = DevBuf::new(dev, n + 1)?;
    let grid = blocks(n + 1, BLOCK as usize)?;
    // SAFETY: zt_source_flags(perm[n], n, ns, flags[n + 1]).
    unsafe { dev.launch("scan", "zt_source_flags", grid, &[perm.arg(), Arg::U32(n32), Arg::U32(ns32), prefix.arg()])? };
    exclusive_scan(dev, prefix.ptr(), n + 1)?;
    let (sorig, qorig): (DevBuf<u32>, DevBuf<u32>) = (DevBuf::new(dev, ns)?, DevBuf::new(dev, nq)?);
    // SAFETY: zt_split_orig(perm[n], prefix[n + 1], n, ns, sorig[ns], qorig[nq]).
    unsafe { dev.launch("scan", "zt_split_orig", grid, &[perm.arg(), prefix.arg(), Arg::U32(n32), Arg::U32(ns32), sorig.arg(), qorig.arg()])? };
    let kernel = if T::NAME == "f32" { "zt_split_pos_f32" } else { "zt_split_pos_f64" };
    let mut sp = Vec::with_capacity(D);
    let mut qp = Vec::with_capacity(D);
    for p in pos {
        let (s, q): (DevBuf<T>, DevBuf<T>) = (DevBuf::new(dev, ns)?, DevBuf::new(dev, nq)?);
        // SAFETY: zt_split_pos_*(pos[n], perm[n], prefix[n + 1], n, ns, spos[ns], qpos[nq]).
        unsafe { dev.launch("scan", kernel, grid, &[p.arg(), perm.arg(), prefix.arg(), Arg::U32(n32), Arg::U32(ns32), s.arg(), q.arg()])? };
        sp.push(s);
        qp.push(q);
    }
    let arr = |v: Vec<DevBuf<T>>| -> [DevBuf<T>; D] { v.try_into().unwrap_or_else(|_| unreachable!()) };
    Ok((arr(sp), sorig, arr(qp), qorig, prefix))
}

/// `out[i] = in[i] as i64`.
pub(crate) fn u32_to_i64(dev: &Arc<dyn Device>, input: &DevBuf<u32>, out: DevPtr) -> Result<()> {
    let n = input.len();
    // SAFETY: zt_u32_to_i64(in[n], n, out[n]); `out` holds n i64 (the caller's promise).
    unsafe { dev.launch("scan", "zt_u32_to_i64", blocks(n, BLOCK as usize)?, &[input.arg(), Arg::U32(len_u32(n)?), Arg::Ptr(out)]) }
}

/// `n` copies of `v`.
pub(crate) fn fill_f64(dev: &Arc<dyn Device>, n: usize, v: f64) -> Result<DevBuf<f64>> {
    let out = DevBuf::new(dev, n)?;
    // SAFETY: the buffer holds n f64.
    unsafe { fill_f64_at(dev, out.ptr(), n, v)? };
    Ok(out)
}

/// `out[..n] = v`.
///
/// # Safety
/// `out` is `n` f64 of device memory.
pub(crate) unsafe fn fill_f64_at(dev: &Arc<dyn Device>, out: DevPtr, n: usize, v: f64) -> Result<()> {
    // SAFETY: zt_fill_f64(out[n], n, v).
    unsafe { dev.launch("scan", "zt_fill_f64", blocks(n, BLOCK as usize)?, &[Arg::Ptr(out), Arg::U32(len_u32(n)?), Arg::Words(vec![v.to_bits()])]) }
}
