//! Z-order: validation of input points, Morton keys, and a parallel radix sort that
//! carries the permutation (DESIGN.md §1 step 3).
//!
//! Keys only shape the tree; every distance is computed from the original coordinates,
//! so results are exact whatever the quantisation. Runs of identical keys longer than a
//! leaf (a dense cluster in an open domain stretched by far outliers) are refined with a
//! second key over the run's own bounding box, so the tree never degrades to brute force.

use rayon::prelude::*;

use crate::error::{Error, Result};
use crate::par::{SharedMut, chunk_ranges};
use crate::points::{Bounds, Domain, PointSource};
use crate::real::Real;

/// Bits of one coordinate in a key: 21 in 3D (63-bit keys), 32 in 2D.
pub const fn bits_per_dim(d: usize) -> u32 {
    if d == 2 { 32 } else { 21 }
}

/// Checks every coordinate (finite; inside `[0, L)` for a periodic box) and returns the
/// bounding box. The error names the first bad point in input order, whatever the
/// thread count.
pub fn scan_points<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    pts: &P,
    what: &'static str,
    domain: &Domain<D>,
) -> Result<Bounds<D>> {
    let n = pts.len();
    let box_len = domain.box_lengths();
    let chunks = chunk_ranges(n, rayon::current_num_threads() * 4);
    let partial: Vec<std::result::Result<Bounds<D>, Error>> = chunks
        .into_par_iter()
        .map(|r| {
            let mut b = Bounds::<D>::EMPTY;
            for i in r {
                let p = pts.point(i);
                let mut q = [0.0f64; D];
                for d in 0..D {
                    let v = p[d].to_f64();
                    if !p[d].is_finite() {
                        return Err(Error::NonFinite { what, index: i, dim: d, value: v });
                    }
                    if let Some(l) = box_len
                        && !(v >= 0.0 && v < l[d])
                    {
                        return Err(Error::OutsideBox { what, index: i, dim: d, value: v, length: l[d] });
                    }
                    q[d] = v;
                }
                b.include(&q);
            }
            Ok(b)
        })
        .collect();
    let mut all = Bounds::<D>::EMPTY;
    for r in partial {
        all = all.merge(&r?);
    }
    Ok(all)
}

/// Maps coordinates to integer cells and Morton keys.
#[derive(Clone, Copy, Debug)]
pub struct Quantizer<const D: usize> {
    lo: [f64; D],
    scale: [f64; D],
}

impl<const D: usize> Quantizer<D> {
    const MAX_CELL: u64 = (1u64 << bits_per_dim(D)) - 1;

    /// Cells over the periodic box, or over `bounds` (the global bounding box) when open.
    pub fn new(domain: &Domain<D>, bounds: &Bounds<D>) -> Self {
        let cells = (1u64 << bits_per_dim(D)) as f64;
        match domain {
            Domain::Periodic(l) => Self { lo: [0.0; D], scale: std::array::from_fn(|d| cells / l[d]) },
            Domain::Open => Self::over(bounds),
        }
    }

    /// Cells over a box (used for the open domain and to refine runs of equal keys).
    pub fn over(bounds: &Bounds<D>) -> Self {
        let cells = (1u64 << bits_per_dim(D)) as f64;
        let mut scale = [0.0; D];
        for d in 0..D {
            let ext = bounds.hi[d] - bounds.lo[d];
            // Padded a little so the top face maps inside; a flat dimension gets one cell.
            scale[d] = if ext > 0.0 && ext.is_finite() { cells / (ext * (1.0 + 1e-9)) } else { 0.0 };
        }
        Self { lo: bounds.lo, scale }
    }

    /// Position of `x` on dimension `d`'s cell axis, before flooring and clamping.
    #[inline(always)]
    pub fn cell_coord(&self, d: usize, x: f64) -> f64 {
        (x - self.lo[d]) * self.scale[d]
    }

    /// Lower corner of the box holding every point whose cell on dimension `d` is `c`
    /// (up to rounding; callers pad it); `None` for a flat dimension (all one cell).
    pub fn cell_lo(&self, d: usize, c: u64) -> Option<f64> {
        (self.scale[d] > 0.0).then(|| self.lo[d] + c as f64 / self.scale[d])
    }

    #[inline(always)]
    pub fn key(&self, p: &[f64; D]) -> u64 {
        let cell: [u64; D] = std::array::from_fn(|d| {
            let c = (p[d] - self.lo[d]) * self.scale[d];
            // `as` saturates (NaN -> 0), and the clamp keeps rounding at the top face inside.
            (c as u64).min(Self::MAX_CELL)
        });
        morton(&cell)
    }
}

#[inline(always)]
fn spread3(mut x: u64) -> u64 {
    x &= 0x1f_ffff;
    x = (x | x << 32) & 0x001f_0000_0000_ffff;
    x = (x | x << 16) & 0x001f_0000_ff00_00ff;
    x = (x | x << 8) & 0x100f_00f0_0f00_f00f;
    x = (x | x << 4) & 0x10c3_0c30_c30c_30c3;
    x = (x | x << 2) & 0x1249_2492_4924_9249;
    x
}

/// Inverse of `spread3`: every third bit, compacted.
fn compact3(mut x: u64) -> u64 {
    x &= 0x1249_2492_4924_9249;
    x = (x | x >> 2) & 0x10c3_0c30_c30c_30c3;
    x = (x | x >> 4) & 0x100f_00f0_0f00_f00f;
    x = (x | x >> 8) & 0x001f_0000_ff00_00ff;
    x = (x | x >> 16) & 0x001f_0000_0000_ffff;
    x = (x | x >> 32) & 0x1f_ffff;
    x
}

fn compact2(mut x: u64) -> u64 {
    x &= 0x5555_5555_5555_5555;
    x = (x | x >> 1) & 0x3333_3333_3333_3333;
    x = (x | x >> 2) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | x >> 4) & 0x00ff_00ff_00ff_00ff;
    x = (x | x >> 8) & 0x0000_ffff_0000_ffff;
    x = (x | x >> 16) & 0x0000_0000_ffff_ffff;
    x
}

/// Cell coordinates of a Morton key (inverse of [`morton`]).
pub fn unmorton<const D: usize>(key: u64) -> [u64; D] {
    match D {
        2 => std::array::from_fn(|d| compact2(key >> (1 - d))),
        3 => std::array::from_fn(|d| compact3(key >> (2 - d))),
        _ => unreachable!("ztree supports 2 and 3 dimensions"),
    }
}

#[inline(always)]
fn spread2(mut x: u64) -> u64 {
    x &= 0xffff_ffff;
    x = (x | x << 16) & 0x0000_ffff_0000_ffff;
    x = (x | x << 8) & 0x00ff_00ff_00ff_00ff;
    x = (x | x << 4) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | x << 2) & 0x3333_3333_3333_3333;
    x = (x | x << 1) & 0x5555_5555_5555_5555;
    x
}

/// Interleaves cell coordinates, the first dimension in the most significant bit.
#[inline(always)]
pub fn morton<const D: usize>(cell: &[u64; D]) -> u64 {
    match D {
        2 => spread2(cell[0]) << 1 | spread2(cell[1]),
        3 => spread3(cell[0]) << 2 | spread3(cell[1]) << 1 | spread3(cell[2]),
        _ => unreachable!("ztree supports 2 and 3 dimensions"),
    }
}

/// The bit length of the smallest Morton cell holding both keys (0 when equal).
#[inline(always)]
pub fn level_of(a: u64, b: u64) -> u8 {
    (64 - (a ^ b).leading_zeros()) as u8
}

/// Stable parallel radix sort of `keys`, applying the same permutation to `vals`.
///
/// One parallel MSD pass on the top 11 varying bits splits the keys into buckets; each
/// bucket is then sorted on its own (in parallel over buckets) by a cache-local LSD radix
/// sort on the remaining bits. Digits on which all keys (of a bucket) agree are skipped.
pub fn radix_sort(keys: &mut Vec<u64>, vals: &mut Vec<u32>) {
    const BITS: u32 = 11;
    const RADIX: usize = 1 << BITS;
    let n = keys.len();
    debug_assert_eq!(n, vals.len());
    if n <= 4096 {
        local_sort(keys, vals, &mut Vec::new(), &mut Vec::new());
        return;
    }
    let k0 = keys[0];
    let diff = keys.par_iter().fold(|| 0u64, |a, &k| a | (k ^ k0)).reduce(|| 0, |a, b| a | b);
    if diff == 0 {
        return;
    }
    let top = 64 - diff.leading_zeros(); // bits above `top` are equal in every key
    let shift = top.saturating_sub(BITS);
    let digit = |k: u64| ((k >> shift) as usize) & (RADIX - 1);
    let chunks = chunk_ranges(n, rayon::current_num_threads());
    let src_k: &[u64] = keys;
    let hists: Vec<Vec<u32>> = chunks
        .par_iter()
        .map(|r| {
            let mut h = vec![0u32; RADIX];
            for &k in &src_k[r.clone()] {
                h[digit(k)] += 1;
            }
            h
        })
        .collect();
    let mut offs: Vec<Vec<u32>> = vec![vec![0u32; RADIX]; chunks.len()];
    let mut bucket_start = vec![0usize; RADIX + 1];
    let mut sum = 0u32;
    for d in 0..RADIX {
        bucket_start[d] = sum as usize;
        for c in 0..chunks.len() {
            offs[c][d] = sum;
            sum += hists[c][d];
        }
    }
    bucket_start[RADIX] = n;
    let mut kb = vec![0u64; n];
    let mut vb = vec![0u32; n];
    let dk = SharedMut::new(&mut kb);
    let dv = SharedMut::new(&mut vb);
    let src_v: &[u32] = vals;
    chunks.par_iter().zip(offs.par_iter_mut()).for_each(|(r, off)| {
        for i in r.clone() {
            let k = src_k[i];
            let d = digit(k);
            let pos = off[d] as usize;
            off[d] += 1;
            // SAFETY: the prefix sums give every (chunk, digit) a disjoint output range.
            unsafe {
                dk.write(pos, k);
                dv.write(pos, src_v[i]);
            }
        }
    });
    if shift > 0 {
        // Disjoint bucket slices, sorted in parallel.
        let mut parts: Vec<(&mut [u64], &mut [u32])> = Vec::with_capacity(RADIX);
        let (mut kr, mut vr) = (&mut kb[..], &mut vb[..]);
        for d in 0..RADIX {
            let len = bucket_start[d + 1] - bucket_start[d];
            let (kh, kt) = std::mem::take(&mut kr).split_at_mut(len);
            let (vh, vt) = std::mem::take(&mut vr).split_at_mut(len);
            (kr, vr) = (kt, vt);
            if len > 1 {
                parts.push((kh, vh));
            }
        }
        parts.into_par_iter().for_each_init(
            || (Vec::new(), Vec::new()),
            |(tk, tv), (k, v)| local_sort(k, v, tk, tv),
        );
    }
    std::mem::swap(keys, &mut kb);
    std::mem::swap(vals, &mut vb);
}

/// Stable serial LSD radix sort (8-bit digits) of one bucket, with scratch buffers.
fn local_sort(keys: &mut [u64], vals: &mut [u32], tk: &mut Vec<u64>, tv: &mut Vec<u32>) {
    let n = keys.len();
    if n < 2 {
        return;
    }
    if n <= 32 {
        // Insertion sort: stable, fast for tiny buckets.
        for i in 1..n {
            let (k, v) = (keys[i], vals[i]);
            let mut j = i;
            while j > 0 && keys[j - 1] > k {
                keys[j] = keys[j - 1];
                vals[j] = vals[j - 1];
                j -= 1;
            }
            keys[j] = k;
            vals[j] = v;
        }
        return;
    }
    let k0 = keys[0];
    let diff = keys.iter().fold(0u64, |a, &k| a | (k ^ k0));
    tk.clear();
    tk.resize(n, 0);
    tv.clear();
    tv.resize(n, 0);
    let mut in_scratch = false;
    let mut shift = 0;
    while shift < 64 {
        if (diff >> shift) & 0xff == 0 {
            shift += 8;
            continue;
        }
        let (sk, sv, dk, dv): (&mut [u64], &mut [u32], &mut [u64], &mut [u32]) =
            if in_scratch { (&mut tk[..], &mut tv[..], &mut *keys, &mut *vals) } else { (&mut *keys, &mut *vals, &mut tk[..], &mut tv[..]) };
        let mut count = [0usize; 257];
        for &k in sk.iter() {
            count[((k >> shift) & 0xff) as usize + 1] += 1;
        }
        for d in 0..256 {
            count[d + 1] += count[d];
        }
        for i in 0..n {
            let k = sk[i];
            let d = ((k >> shift) & 0xff) as usize;
            dk[count[d]] = k;
            dv[count[d]] = sv[i];
            count[d] += 1;
        }
        in_scratch = !in_scratch;
        shift += 8;
    }
    if in_scratch {
        keys.copy_from_slice(tk);
        vals.copy_from_slice(tv);
    }
}

/// Levels of the gaps between consecutive sorted points: 64 + bit length of the primary
/// key difference; for gaps inside a refined run, the bit length of the secondary key
/// difference (1..=63); 0 between points whose keys are identical.
pub fn primary_levels(keys: &[u64]) -> Vec<u8> {
    if keys.len() < 2 {
        return Vec::new();
    }
    keys.par_windows(2)
        .map(|w| if w[0] == w[1] { 0 } else { 64 + level_of(w[0], w[1]) })
        .collect()
}

/// Refines runs of identical primary keys longer than `max_run`: the run is re-sorted by
/// a Morton key over its own bounding box (stable: ties keep input order) and its internal
/// gaps get secondary levels. `coord(v)` returns the position of the point with value `v`.
pub fn refine_runs<const D: usize>(
    keys: &[u64],
    vals: &mut [u32],
    levels: &mut [u8],
    max_run: usize,
    coord: impl Fn(u32) -> [f64; D] + Sync,
) {
    let n = keys.len();
    // Find the long runs (disjoint), then refine them in parallel, each one serially.
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    while start < n {
        let mut end = start + 1;
        while end < n && keys[end] == keys[start] {
            end += 1;
        }
        if end - start > max_run {
            runs.push((start, end));
        }
        start = end;
    }
    let mut parts: Vec<(&mut [u32], &mut [u8])> = Vec::with_capacity(runs.len());
    let (mut v_rest, mut v_off) = (vals, 0);
    let (mut l_rest, mut l_off) = (levels, 0);
    for &(s0, e0) in &runs {
        // Points s0..e0 and their internal gaps s0..e0-1.
        let (_, tail) = std::mem::take(&mut v_rest).split_at_mut(s0 - v_off);
        let (run_v, tail) = tail.split_at_mut(e0 - s0);
        (v_rest, v_off) = (tail, e0);
        let (_, tail) = std::mem::take(&mut l_rest).split_at_mut(s0 - l_off);
        let (run_l, tail) = tail.split_at_mut(e0 - 1 - s0);
        (l_rest, l_off) = (tail, e0 - 1);
        parts.push((run_v, run_l));
    }
    parts.into_par_iter().with_max_len(1).for_each(|(v, l)| refine_one(v, l, &coord));
}

/// Re-sorts one run of identical primary keys by a Morton key over the run's bounding box
/// (ties keep input order) and gives its internal gaps secondary levels.
fn refine_one<const D: usize>(vals: &mut [u32], levels: &mut [u8], coord: &(impl Fn(u32) -> [f64; D] + Sync)) {
    let pts: Vec<[f64; D]> = vals.iter().map(|&v| coord(v)).collect();
    let mut bounds = Bounds::<D>::EMPTY;
    for p in &pts {
        bounds.include(p);
    }
    if (0..D).all(|d| bounds.hi[d] == bounds.lo[d]) {
        return; // truly identical points: chunked into leaves by the tree
    }
    let q = Quantizer::<D>::over(&bounds);
    let mut keys: Vec<u64> = pts.iter().map(|p| q.key(p)).collect();
    let mut order: Vec<u32> = (0..vals.len() as u32).collect();
    radix_sort(&mut keys, &mut order); // stable: ties keep input order
    let old: Vec<u32> = order.iter().map(|&i| vals[i as usize]).collect();
    vals.copy_from_slice(&old);
    for (i, l) in levels.iter_mut().enumerate() {
        *l = level_of(keys[i], keys[i + 1]);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(s: &mut u64) -> u64 {
        *s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *s >> 11
    }

    #[test]
    fn radix_sort_matches_stable_comparison_sort() {
        for &(n, mask) in &[(0usize, u64::MAX), (1, u64::MAX), (7, 3), (1000, 15), (5000, u64::MAX >> 1), (100_000, 0xff00), (70_000, (1 << 63) | 1)] {
            let mut s = n as u64 + 1;
            let keys: Vec<u64> = (0..n).map(|_| (lcg(&mut s) << 11 ^ lcg(&mut s)) & mask).collect();
            let mut k = keys.clone();
            let mut v: Vec<u32> = (0..n as u32).collect();
            radix_sort(&mut k, &mut v);
            let mut expect: Vec<(u64, u32)> = keys.iter().copied().zip(0..n as u32).collect();
            expect.sort_by_key(|p| p.0);
            let got: Vec<(u64, u32)> = k.into_iter().zip(v).collect();
            assert_eq!(got, expect, "n={n} mask={mask:x}");
        }
    }

    #[test]
    fn morton_orders_by_interleaved_bits() {
        assert_eq!(morton(&[1u64, 0, 0]), 4);
        assert_eq!(morton(&[0u64, 1, 0]), 2);
        assert_eq!(morton(&[0u64, 0, 1]), 1);
        assert_eq!(morton(&[(1u64 << 21) - 1; 3]), (1u64 << 63) - 1);
        assert_eq!(morton(&[1u64, 0]), 2);
        assert_eq!(morton(&[u32::MAX as u64; 2]), u64::MAX);
        // Bit b of dimension d lands at bit D*b + (D-1-d).
        for b in 0..21 {
            assert_eq!(morton(&[0, 1u64 << b, 0]), 1u64 << (3 * b + 1));
        }
    }

    #[test]
    fn unmorton_inverts_morton() {
        let mut s = 5u64;
        for _ in 0..1000 {
            let c3 = [lcg(&mut s) & 0x1f_ffff, lcg(&mut s) & 0x1f_ffff, lcg(&mut s) & 0x1f_ffff];
            assert_eq!(unmorton::<3>(morton(&c3)), c3);
            let c2 = [lcg(&mut s) & 0xffff_ffff, lcg(&mut s) & 0xffff_ffff];
            assert_eq!(unmorton::<2>(morton(&c2)), c2);
        }
    }

    #[test]
    fn quantizer_keeps_points_in_range() {
        let q = Quantizer::<3>::new(&Domain::Periodic([1.0, 2.0, 3.0]), &Bounds::EMPTY);
        assert_eq!(q.key(&[0.0; 3]), 0);
        let top = q.key(&[f64::from_bits(1.0f64.to_bits() - 1), 2.0 - 1e-16, 3.0 - 1e-15]);
        assert_eq!(top, (1u64 << 63) - 1);
        let b = Bounds { lo: [5.0, 5.0], hi: [5.0, 6.0] };
        let q2 = Quantizer::<2>::over(&b);
        assert_eq!(q2.key(&[5.0, 5.0]), 0);
        assert!(q2.key(&[5.0, 6.0]) > 0);
    }
}
