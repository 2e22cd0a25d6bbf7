//! A stable parallel radix sort of 64-bit keys that carries a permutation.

use rayon::prelude::*;

use super::par::{DisjointSlice, chunk_ranges, filled};
use crate::geom::morton::{CUT_MIN, cut_mask};

/// Stable parallel radix sort of `keys`, applying the same permutation to `vals`; above
/// `CUT_MIN` keys, the keys are first cut to their `keep` highest varying bits (the lower
/// bits cleared, in the sorted output too; `geom::morton::bits_kept`).
pub(crate) fn radix_sort(keys: &mut Vec<u64>, vals: &mut Vec<u32>, keep: u32) {
    debug_assert_eq!(keys.len(), vals.len());
    let src: &[u32] = vals;
    if let Some((v, _)) = sort_with(keys, keep, |i| src[i]) {
        *vals = v;
    }
}

/// `radix_sort` of `keys` with `0, 1, .., n - 1` as the values: returns the permutation
/// (the input index of each sorted key), and the input keys' buffer when the sorted keys
/// went to another (its memory is mapped in: a later stage may reuse it). The first pass
/// writes the indices itself, so no index array is made and read first (a fresh array
/// costs a page fault per 4 KiB).
pub(crate) fn radix_sort_indices(keys: &mut Vec<u64>, keep: u32) -> (Vec<u32>, Option<Vec<u64>>) {
    let n = keys.len();
    sort_with(keys, keep, |i| i as u32).unwrap_or_else(|| (super::par::iota(n), None))
}

/// The sort, with the values read through `val(i)` by the first pass; the permuted
/// values (and the input keys' buffer when the sorted keys are in another), or None when
/// the keys were already in order (all equal) and the values stay.
///
/// One parallel MSD pass on the top 11 varying bits splits the keys into buckets; each
/// bucket is then sorted on its own (in parallel over buckets) by a cache-local LSD radix
/// sort on the remaining bits. Digits on which all keys (of a bucket) agree are skipped.
fn sort_with(keys: &mut Vec<u64>, keep: u32, val: impl Fn(usize) -> u32 + Sync) -> Option<(Vec<u32>, Option<Vec<u64>>)> {
    const BITS: u32 = 11;
    const RADIX: usize = 1 << BITS;
    let n = keys.len();
    if n <= CUT_MIN {
        let mut vals: Vec<u32> = (0..n).map(&val).collect();
        local_sort(keys, &mut vals, &mut Vec::new(), &mut Vec::new());
        return Some((vals, None));
    }
    let k0 = keys[0];
    let diff = keys.par_iter().fold(|| 0u64, |a, &k| a | (k ^ k0)).reduce(|| 0, |a, b| a | b);
    if diff == 0 {
        return None;
    }
    let top = 64 - diff.leading_zeros(); // bits above `top` are equal in every key
    let shift = top.saturating_sub(BITS);
    let mask = cut_mask(diff, keep);
    // Buckets by the cut key (stable for the cut keys whatever `keep`).
    let digit = |k: u64| (((k & mask) >> shift) as usize) & (RADIX - 1);
    // Several chunks per thread: a thread held up (a busy machine) leaves chunks to the
    // others instead of stalling the pass.
    let chunks = chunk_ranges(n, 4 * rayon::current_num_threads());
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
    let mut kb = filled(n, 0u64);
    let mut vb = filled(n, 0u32);
    // Inside a bucket the cut keys differ only in bits low..shift. Where those fit in 32
    // bits (below 2^25 points: `bits_kept` is then 43), each key travels packed with its
    // value in one word, and the buckets are sorted with the spent input keys as their
    // second buffer: no per-bucket scratch arrays (a clustered set's large buckets took
    // fresh pages, a fault per 4 KiB, in every first call) and 8 bytes moved per pass
    // instead of 12.
    let low = top.saturating_sub(keep.max(1));
    let width = shift.saturating_sub(low);
    let packed = shift > 0 && width <= 32;
    {
        let dk = DisjointSlice::new(&mut kb);
        let dv = DisjointSlice::new(&mut vb);
        let field = if width == 0 { 0 } else { u64::MAX >> (64 - width) };
        chunks.par_iter().zip(offs.par_iter_mut()).for_each(|(r, off)| {
            for i in r.clone() {
                let k = src_k[i];
                let d = digit(k);
                let pos = off[d] as usize;
                off[d] += 1;
                // SAFETY: the prefix sums give every (chunk, digit) a disjoint output range.
                unsafe {
                    if packed {
                        dk.write(pos, (((k & mask) >> low) & field) << 32 | u64::from(val(i)));
                    } else {
                        dk.write(pos, k & mask);
                        dv.write(pos, val(i));
                    }
                }
            }
        });
    }
    if packed {
        // The bits above the top varying one, common to every key.
        let above = if top == 64 { 0 } else { k0 & !(u64::MAX >> (64 - top)) };
        let parts: Vec<_> = buckets(&mut kb, &bucket_start)
            .into_iter()
            .zip(buckets(keys, &bucket_start))
            .zip(buckets(&mut vb, &bucket_start))
            .enumerate()
            .filter(|(_, ((k, _), _))| !k.is_empty())
            .collect();
        parts.into_par_iter().for_each(|(d, ((k, scratch), v))| {
            packed_sort(k, scratch);
            let high = above | (d as u64) << shift;
            for (k, v) in k.iter_mut().zip(v) {
                *v = *k as u32;
                *k = high | (*k >> 32) << low;
            }
        });
    } else if shift > 0 {
        // Disjoint bucket slices, sorted in parallel.
        let parts: Vec<_> = buckets(&mut kb, &bucket_start).into_iter().zip(buckets(&mut vb, &bucket_start)).filter(|(k, _)| k.len() > 1).collect();
        parts.into_par_iter().for_each_init(|| (Vec::new(), Vec::new()), |(tk, tv), (k, v)| local_sort(k, v, tk, tv));
    }
    let input = std::mem::replace(keys, kb);
    Some((vb, Some(input)))
}

/// `s` cut into the buckets that `bucket_start` (ascending, ending at `s.len()`) bounds.
fn buckets<'a, T>(mut s: &'a mut [T], bucket_start: &[usize]) -> Vec<&'a mut [T]> {
    bucket_start
        .windows(2)
        .map(|w| {
            let (head, tail) = std::mem::take(&mut s).split_at_mut(w[1] - w[0]);
            s = tail;
            head
        })
        .collect()
}

/// Stable serial sort of packed records (a key in the high 32 bits, its value in the low
/// 32) by their keys, with `scratch` (as long) as the second buffer; the result ends in
/// `recs`. Small runs by insertion, up to `MSD_MAX` one MSD pass, above that LSD passes
/// on the 8-bit digits in which the keys differ.
fn packed_sort(recs: &mut [u64], scratch: &mut [u64]) {
    let n = recs.len();
    if n <= 32 {
        for i in 1..n {
            let r = recs[i];
            let mut j = i;
            while j > 0 && recs[j - 1] >> 32 > r >> 32 {
                recs[j] = recs[j - 1];
                j -= 1;
            }
            recs[j] = r;
        }
        return;
    }
    let k0 = recs[0] >> 32;
    let diff = recs.iter().fold(0u64, |a, &r| a | (r >> 32 ^ k0));
    if diff == 0 {
        return;
    }
    let digit = |r: u64, sh: u32| ((r >> sh) & 0xff) as usize;
    if n <= MSD_MAX {
        // One counting pass on the top 8 differing bits, then each sub-bucket.
        let sh = 32 + (64 - diff.leading_zeros()).saturating_sub(8);
        let mut start = [0usize; 257];
        for &r in recs.iter() {
            start[digit(r, sh) + 1] += 1;
        }
        for d in 0..256 {
            start[d + 1] += start[d];
        }
        let mut at = start;
        for &r in recs.iter() {
            let d = digit(r, sh);
            scratch[at[d]] = r;
            at[d] += 1;
        }
        recs.copy_from_slice(scratch);
        for d in 0..256 {
            let (a, b) = (start[d], start[d + 1]);
            if b - a > 1 {
                packed_sort(&mut recs[a..b], &mut scratch[a..b]);
            }
        }
        return;
    }
    // The digits on which the keys differ, and all their histograms in one read.
    let mut shifts = [0u32; 4];
    let mut passes = 0;
    for d in 0..4 {
        if (diff >> (8 * d)) & 0xff != 0 {
            shifts[passes] = 32 + 8 * d;
            passes += 1;
        }
    }
    let shifts = &shifts[..passes];
    let mut counts = [[0usize; 256]; 4];
    for &r in recs.iter() {
        for (c, &sh) in counts.iter_mut().zip(shifts) {
            c[digit(r, sh)] += 1;
        }
    }
    let mut in_scratch = false;
    for (c, &sh) in counts.iter().zip(shifts) {
        let (src, dst): (&[u64], &mut [u64]) = if in_scratch { (&*scratch, &mut *recs) } else { (&*recs, &mut *scratch) };
        let mut start = [0usize; 256];
        let mut sum = 0;
        for d in 0..256 {
            start[d] = sum;
            sum += c[d];
        }
        for &r in &src[..n] {
            let d = digit(r, sh);
            let at = start[d];
            debug_assert!(at < n);
            // SAFETY: the counts are this pass's digit histogram of these n records, so
            // the running starts stay below n = dst.len().
            unsafe { *dst.get_unchecked_mut(at) = r };
            start[d] = at + 1;
        }
        in_scratch = !in_scratch;
    }
    if in_scratch {
        recs.copy_from_slice(scratch);
    }
}

/// Up to this many keys a bucket is sorted from its top varying digit down (`msd_sort`):
/// a bucket of a hundred keys differs in four or five 8-bit digits, and the LSD passes'
/// 256-entry histograms and prefix sums per digit then cost more than the keys
/// themselves, while one MSD pass leaves sub-buckets of a few keys. Measured (43-bit
/// keys, 2 threads, interleaved): random keys at 262k (buckets of ~128) 35-45% faster,
/// at 1e6 and 2.1M within noise; 2048 was slower on the clustered 4e6 set (larger buckets
/// that one pass does not break up recurse several levels).
const MSD_MAX: usize = 256;

/// Stable serial MSD radix sort of a small bucket: one counting pass on the top 8 bits in
/// which the keys differ (`diff`: the OR of every key XOR the first, nonzero), then each
/// sub-bucket on its own (insertion sort up to 32 keys).
fn msd_sort(keys: &mut [u64], vals: &mut [u32], diff: u64, tk: &mut Vec<u64>, tv: &mut Vec<u32>) {
    let n = keys.len();
    let shift = (64 - diff.leading_zeros()).saturating_sub(8);
    let digit = |k: u64| ((k >> shift) & 0xff) as usize;
    let mut start = [0u32; 257];
    for &k in keys.iter() {
        start[digit(k) + 1] += 1;
    }
    for d in 0..256 {
        start[d + 1] += start[d];
    }
    tk.clear();
    tk.resize(n, 0);
    tv.clear();
    tv.resize(n, 0);
    let mut at = start;
    for (&k, &v) in keys.iter().zip(vals.iter()) {
        let d = digit(k);
        tk[at[d] as usize] = k;
        tv[at[d] as usize] = v;
        at[d] += 1;
    }
    keys.copy_from_slice(tk);
    vals.copy_from_slice(tv);
    for d in 0..256 {
        let (a, b) = (start[d] as usize, start[d + 1] as usize);
        if b - a > 1 {
            local_sort(&mut keys[a..b], &mut vals[a..b], tk, tv);
        }
    }
}

/// Stable serial LSD radix sort (8-bit digits) of one bucket, with scratch buffers.
pub(super) fn local_sort(keys: &mut [u64], vals: &mut [u32], tk: &mut Vec<u64>, tv: &mut Vec<u32>) {
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
    if diff == 0 {
        return;
    }
    if n <= MSD_MAX {
        msd_sort(keys, vals, diff, tk, tv);
        return;
    }
    // The digits on which the keys differ, and all their histograms in one read.
    let shifts: Vec<u32> = (0..8).map(|d| 8 * d).filter(|&sh| (diff >> sh) & 0xff != 0).collect();
    let mut counts = vec![[0u32; 256]; shifts.len()];
    for &k in keys.iter() {
        for (c, &sh) in counts.iter_mut().zip(&shifts) {
            c[((k >> sh) & 0xff) as usize] += 1;
        }
    }
    tk.clear();
    tk.resize(n, 0);
    tv.clear();
    tv.resize(n, 0);
    let mut in_scratch = false;
    for (c, &shift) in counts.iter().zip(&shifts) {
        let (sk, sv, dk, dv): (&mut [u64], &mut [u32], &mut [u64], &mut [u32]) =
            if in_scratch { (&mut tk[..], &mut tv[..], &mut *keys, &mut *vals) } else { (&mut *keys, &mut *vals, &mut tk[..], &mut tv[..]) };
        let mut start = [0usize; 256];
        let mut sum = 0usize;
        for d in 0..256 {
            start[d] = sum;
            sum += c[d] as usize;
        }
        let (sk, sv) = (&sk[..n], &sv[..n]);
        let (dk, dv) = (&mut dk[..n], &mut dv[..n]);
        for (&k, &v) in sk.iter().zip(sv) {
            let d = ((k >> shift) & 0xff) as usize;
            let at = start[d];
            debug_assert!(at < n);
            // SAFETY: the counts are this pass's digit histogram of these n keys, so the
            // running starts stay below n.
            unsafe {
                *dk.get_unchecked_mut(at) = k;
                *dv.get_unchecked_mut(at) = v;
            }
            start[d] = at + 1;
        }
        in_scratch = !in_scratch;
    }
    if in_scratch {
        keys.copy_from_slice(tk);
        vals.copy_from_slice(tv);
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
        let cases: &[(usize, u64)] = if cfg!(miri) {
            &[(0, u64::MAX), (7, 3), (300, 15), (4500, (1 << 63) | 0xff)]
        } else {
            &[
                (0, u64::MAX),
                (1, u64::MAX),
                (7, 3),
                (40, u64::MAX),
                (300, 0xffff_0000_00ff),
                (500, 15),
                (1000, 15),
                (5000, u64::MAX >> 1),
                (100_000, 0xff00),
                (70_000, (1 << 63) | 1),
                (200_000, u64::MAX),
            ]
        };
        for &(n, mask) in cases {
            let mut s = n as u64 + 1;
            let keys: Vec<u64> = (0..n).map(|_| (lcg(&mut s) << 11 ^ lcg(&mut s)) & mask).collect();
            for keep in [64, 20, 7] {
                let (mut k, mut v) = (keys.clone(), (0..n as u32).collect::<Vec<u32>>());
                radix_sort(&mut k, &mut v, keep);
                // Above 4096 keys: cut to the top `keep` varying bits, then a stable sort.
                let k0 = keys.first().copied().unwrap_or(0);
                let top = 64 - keys.iter().fold(0u64, |a, &x| a | (x ^ k0)).leading_zeros();
                let low = if n > 4096 { top.saturating_sub(keep) } else { 0 };
                let cut = |x: u64| if low == 0 { x } else { x & !((1u64 << low) - 1) };
                let mut expect: Vec<(u64, u32)> = keys.iter().map(|&x| cut(x)).zip(0..n as u32).collect();
                expect.sort_by_key(|p| p.0);
                let got: Vec<(u64, u32)> = k.into_iter().zip(v).collect();
                assert_eq!(got, expect, "n={n} mask={mask:x} keep={keep}");
            }
        }
    }

    /// Stability is by input position, whatever the values (here they fall as the input
    /// index rises), on both paths (packed where the kept bits under the top 11 fit in 32,
    /// pairs where they do not) and through every bucket size: clumps with long runs of
    /// equal cut keys (LSD passes), and few distinct keys repeated (buckets of 33-256 keys
    /// that one MSD pass splits, and runs of up to 32 sorted by insertion).
    #[test]
    fn radix_sort_is_stable_for_any_values() {
        let clumps = |n: usize, spread: u32| -> Vec<u64> {
            let mut s = n as u64 * 7 + 3;
            (0..n).map(|_| (lcg(&mut s) % 5) << 58 | lcg(&mut s) >> (53 - spread)).collect()
        };
        let repeats = |n: usize, distinct: u64, shift: u32| -> Vec<u64> {
            let mut s = n as u64 * 5 + 1;
            (0..n).map(|_| (lcg(&mut s) % distinct) << shift).collect()
        };
        let sets = [
            clumps(5000, 3),
            clumps(70_000, 40),
            clumps(150_000, 52),
            repeats(5000, 3000, 30),
            repeats(70_000, 1 << 16, 8),
            repeats(70_000, 40_000, 0),
        ];
        for keys in &sets {
            let n = keys.len();
            for keep in [64, 43, 30, 11, 5] {
                let (mut k, mut v) = (keys.clone(), (0..n as u32).rev().collect::<Vec<u32>>());
                radix_sort(&mut k, &mut v, keep);
                let k0 = keys[0];
                let top = 64 - keys.iter().fold(0u64, |a, &x| a | (x ^ k0)).leading_zeros();
                let low = top.saturating_sub(keep);
                let cut = |x: u64| if low == 0 { x } else { x & !((1u64 << low) - 1) };
                let mut expect: Vec<(u64, u32)> = keys.iter().map(|&x| cut(x)).zip((0..n as u32).rev()).collect();
                expect.sort_by_key(|p| p.0);
                let got: Vec<(u64, u32)> = k.into_iter().zip(v).collect();
                assert!(got == expect, "n={n} top={top} keep={keep}");
            }
        }
    }
}
