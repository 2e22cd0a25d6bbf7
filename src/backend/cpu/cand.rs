//! Buffered selection of the k best neighbour candidates of one query (the kNN leaf
//! pass's larger k), by (distance², rank) as in `topk`.
//!
//! Candidates within the threshold are appended unsorted, a whole block of sources at a
//! time without a branch (every source is written and the end advances only past those
//! in the mask; with AVX2 the block is compressed by two vector permutes). When the
//! buffer holds enough, it is cut to its k best and the threshold drops to their k-th
//! distance; at the end the best k are ordered. Selection and order work on integer keys
//! (a distance², quantised, with the entry's index in the low bits). Up to `NET_MAX_K`
//! they run on bitonic networks (`bitonic`, 32-bit keys: the distance² as a fixed-point
//! fraction of the query's bound in the high bits): the fresh keys are sorted and merged
//! with the kept ones, sorted since the last cut — no branch depends on the data (the standard
//! library's selection and sort mispredicted about 44 times per query at k = 64, half of
//! the leaf pass's mispredicts). Above, the standard selection: the buffer is cut at 2k,
//! the kept left unordered. Against keeping a sorted array, this drops the per-candidate
//! insertion (k/2 moves and a mispredicted loop exit each), which took half the leaf pass
//! at k = 64; against a heap (k > 256 before), O(log k) mispredicted steps per candidate.

use super::bitonic;
use super::simd::{self, Simd};
use crate::geom::Real;

/// Up to this k the selections run on bitonic networks (`bitonic`); above, on the
/// standard library's selection and sort.
const NET_MAX_K: usize = 256;

pub(crate) struct CandBuf<T> {
    /// Held distances² and z-indices (the first `n`: the `kn` kept at the last cut, then
    /// the fresh ones), sized for a cut's worth plus one block written past the end.
    d: Vec<T>,
    z: Vec<u32>,
    n: usize,
    kn: usize,
    k: usize,
    /// Held entries that trigger a cut to k.
    cap: usize,
    /// The k-th distance² after the last cut (+inf before the first).
    kth: T,
    /// The selection: distances² ascending and their z-indices.
    out_d: Vec<T>,
    out_z: Vec<u32>,
    /// The low bits of a sort key that hold the entry's index (enough for every entry).
    ib: u32,
    /// Networks: a distance² times `scale` (rounded down, at most `qmax`) is the high part
    /// of its key; `scale` 0: the top bits of its f32 representation instead (no finite
    /// bound was given).
    scale: f64,
    qmax: u32,
    /// The sort keys of `select`.
    keys: Vec<u64>,
    /// Networks (k <= `NET_MAX_K`): the kept entries' keys, sorted and padded with
    /// `u32::MAX` to `p` (a power of two >= k); the fresh entries' keys, padded to `q` (a
    /// power of two > k + one block: a cut always has k entries).
    net: bool,
    level: Simd,
    p: usize,
    q: usize,
    kept: Vec<u32>,
    fresh: Vec<u32>,
    block: usize,
}

impl<T: Real> CandBuf<T> {
    pub(crate) fn new() -> Self {
        Self {
            d: Vec::new(),
            z: Vec::new(),
            n: 0,
            kn: 0,
            k: 0,
            cap: 0,
            kth: T::INFINITY,
            out_d: Vec::new(),
            out_z: Vec::new(),
            ib: 0,
            scale: 0.0,
            qmax: 0,
            keys: Vec::new(),
            net: false,
            level: Simd::Base,
            p: 0,
            q: 0,
            kept: Vec::new(),
            fresh: Vec::new(),
            block: 0,
        }
    }

    /// Empties the buffer for a selection of `k >= 1` fed in blocks of at most `block`,
    /// of distances² at most `bound` (which sets the keys' resolution: a looser bound only
    /// means more ties to order exactly; +inf when none is known).
    #[inline(always)]
    pub(crate) fn reset(&mut self, k: usize, block: usize, bound: T) {
        assert!(k >= 1);
        self.net = k <= NET_MAX_K;
        let len = if self.net {
            self.level = simd::level();
            self.p = k.next_power_of_two().max(8);
            self.q = (k + block).next_power_of_two();
            if self.kept.len() < self.p || self.fresh.len() < self.q {
                self.kept.resize(self.p, u32::MAX);
                self.fresh.resize(self.q, u32::MAX);
            }
            self.kept[..self.p].fill(u32::MAX);
            self.cap = self.q - block + 1;
            k + self.q + block
        } else {
            self.cap = 2 * k;
            self.cap + block
        };
        self.ib = usize::BITS - (len - 1).leading_zeros();
        if self.net {
            // Below every padding key (u32::MAX), whatever the index bits.
            debug_assert!((1..=16).contains(&self.ib));
            self.qmax = (1u32 << (32 - self.ib)) - 2;
            let b = bound.to_f64();
            self.scale = if b > 0.0 && b < f64::INFINITY { self.qmax as f64 / b } else { 0.0 };
        }
        if self.d.len() < len {
            self.d.resize(len, T::INFINITY);
            self.z.resize(len, 0);
        }
        self.n = 0;
        self.kn = 0;
        self.k = k;
        self.block = block;
        self.kth = T::INFINITY;
    }

    /// Offers the sources `base + i` at distances² `d2[i]` for the bits `i` set in `mask`
    /// (each within the current threshold). Returns true when the buffer was cut and the
    /// threshold (`kth`) dropped.
    /// `AVX`: only in code compiled with AVX2 (then the block is compressed by vector
    /// permutes).
    #[inline(always)]
    pub(crate) fn offer<const B: usize, const AVX: bool>(&mut self, d2: &[T; B], base: u32, mask: u32, rank: &impl Fn(u32) -> u32) -> bool {
        debug_assert!(self.n < self.cap && self.n + B <= self.d.len() && B <= self.block);
        #[cfg(target_arch = "x86_64")]
        if AVX && B == 8 {
            // SAFETY: AVX2 (the caller's promise); n < cap before the block, and the
            // buffer holds cap + B entries.
            unsafe { compress::block8(d2.as_ptr(), self.d.as_mut_ptr().add(self.n), self.z.as_mut_ptr().add(self.n), base, mask) };
            self.n += (mask & 0xFF).count_ones() as usize;
            if self.n < self.cap {
                return false;
            }
            self.cut(rank);
            return true;
        }
        let mut n = self.n;
        for (i, &x) in d2.iter().enumerate() {
            // SAFETY: n < cap before the block, and the buffer holds cap + B entries.
            unsafe {
                *self.d.get_unchecked_mut(n) = x;
                *self.z.get_unchecked_mut(n) = base + i as u32;
            }
            n += ((mask >> i) & 1) as usize;
        }
        self.n = n;
        if n < self.cap {
            return false;
        }
        self.cut(rank);
        true
    }

    /// Cuts the buffer to its k best and lowers the threshold to their largest distance².
    #[inline(never)]
    fn cut(&mut self, rank: &impl Fn(u32) -> u32) {
        debug_assert!(self.n > self.k);
        let k = self.k;
        if !self.net {
            // Unordered: only `finish` orders them.
            self.select(rank, false);
            self.d[..k].copy_from_slice(&self.out_d);
            self.z[..k].copy_from_slice(&self.out_z);
            self.n = k;
            self.kth = self.out_d.iter().fold(T::ZERO, |m, &x| if x > m { x } else { m });
            return;
        }
        let in_order = self.merge_fresh(rank);
        // The kept, in order, to the front; their keys index them there (the same
        // quantised distances, from the keys when they are in the result's order).
        self.d[..k].copy_from_slice(&self.out_d);
        self.z[..k].copy_from_slice(&self.out_z);
        let low = (1u32 << self.ib) - 1;
        for i in 0..self.p {
            self.kept[i] = if i >= k {
                u32::MAX
            } else if in_order {
                (self.kept[i] & !low) | i as u32
            } else {
                self.key(self.out_d[i], i)
            };
        }
        self.n = k;
        self.kn = k;
        self.cap = k + self.q - self.block + 1;
        self.kth = self.out_d[k - 1];
    }

    /// The network sort key of held entry `i` at distance² `d`: the distance quantised
    /// (monotone: a larger distance never gets a smaller one) above the index.
    #[inline(always)]
    fn key(&self, d: T, i: usize) -> u32 {
        let q = if self.scale > 0.0 { fixed(d, self.scale, self.qmax) } else { (d.to_f64() as f32).to_bits() >> self.ib };
        (q.min(self.qmax) << self.ib) | i as u32
    }

    /// Networks: the best min(k, n) held entries, in order, into `out_d`/`out_z`; the
    /// fresh keys are sorted and merged into `kept` (the best p of all, in key order).
    /// Returns whether the kept keys are in the result's order (else the exact selection
    /// ordered the result).
    fn merge_fresh(&mut self, rank: &impl Fn(u32) -> u32) -> bool {
        let (n, kn, k, p, q) = (self.n, self.kn, self.k, self.p, self.q);
        let low = (1u64 << self.ib) - 1;
        // The fresh keys padded to a power of two, at least p (the merge takes p).
        let sz = (n - kn).next_power_of_two().max(p);
        debug_assert!(sz <= q);
        let (d, fresh) = (&self.d[kn..n], &mut self.fresh[..sz]);
        let qz = KeyQuant { ib: self.ib, scale: self.scale, qmax: self.qmax };
        #[cfg(target_arch = "x86_64")]
        if self.level >= Simd::Avx2 {
            // SAFETY: `level` is at most what the CPU has (`simd::level`).
            unsafe { fresh_keys_avx2(d, &mut fresh[..n - kn], kn as u32, qz) };
        } else {
            fresh_keys(d, &mut fresh[..n - kn], kn as u32, qz);
        }
        #[cfg(not(target_arch = "x86_64"))]
        fresh_keys(d, &mut fresh[..n - kn], kn as u32, qz);
        fresh[n - kn..].fill(u32::MAX);
        bitonic::sort(&mut self.fresh[..sz], self.level);
        let next = if kn == 0 {
            // Nothing kept yet (all padding): the p best are the fresh ones'.
            self.kept[..p].copy_from_slice(&self.fresh[..p]);
            if sz > p { self.fresh[p] } else { u32::MAX }
        } else {
            bitonic::merge_low(&mut self.kept[..p], &self.fresh[..sz], self.level)
        };
        let m = n.min(k);
        let keys = &mut self.kept[..p];
        // Keys order by the distance truncated to its high bits, then by position: where
        // two truncated distances are equal, the order is by (distance², rank) instead —
        // within the best k by sorting each run, and across the k-th (which of them are
        // kept) by the exact selection over all held entries.
        let trunc = |x: u32| x >> self.ib;
        let straddles = n > k && trunc(keys[k - 1]) == trunc(if k < p { keys[k] } else { next });
        if straddles {
            self.select(rank, true);
            return false;
        }
        let (d, z) = (&self.d, &self.z);
        // Whether any two neighbours share a truncated distance (one pass without a branch
        // per key, folded as an integer so that it vectorises: they rarely do).
        let shared = keys[..m].iter().zip(&keys[1..m.max(1)]).fold(0u32, |e, (&a, &b)| e | (trunc(a) == trunc(b)) as u32) != 0;
        if shared {
            let mut a = 0;
            for j in 1..=m {
                if j == m || trunc(keys[j]) != trunc(keys[a]) {
                    if j - a > 1 {
                        sort_run(&mut keys[a..j], low, d, z, rank);
                    }
                    a = j;
                }
            }
        }
        self.out_d.clear();
        self.out_z.clear();
        // (Every key's index is a held entry's: below n <= d.len(), z.len().)
        debug_assert!(keys[..m].iter().all(|&x| ((x as u64 & low) as usize) < n));
        // SAFETY: as above.
        self.out_d.extend(keys[..m].iter().map(|&x| unsafe { *d.get_unchecked((x as u64 & low) as usize) }));
        self.out_z.extend(keys[..m].iter().map(|&x| unsafe { *z.get_unchecked((x as u64 & low) as usize) }));
        true
    }

    /// How many entries are held (at least k once the buffer was cut).
    #[inline(always)]
    pub(crate) fn held(&self) -> usize {
        self.n
    }

    /// The threshold after the last cut (+inf before the first).
    #[inline(always)]
    pub(crate) fn kth(&self) -> T {
        self.kth
    }

    /// Selects and sorts the result.
    #[inline(always)]
    pub(crate) fn finish(&mut self, rank: &impl Fn(u32) -> u32) {
        if self.net {
            self.merge_fresh(rank);
        } else {
            self.select(rank, true);
        }
    }

    /// The best min(k, n) held entries, in order, into `out_d`/`out_z`: the entries are
    /// sorted as integers — a distance²'s bits (ordered as the distances, all >= 0) with
    /// the lowest `ib` replaced by the entry's index; the k-th selected first when there
    /// are more — and then each run of equal truncated distances (rare: ties, or f64
    /// distances within 2^(ib - 52) relative; f32 distances lose nothing up to ib = 29)
    /// by (distance², rank). Not `ordered` (a cut), the sort is skipped when no other
    /// entry shares the k-th key's truncated distance: the k smallest keys are then the k
    /// best (every other entry is farther), in no particular order.
    fn select(&mut self, rank: &impl Fn(u32) -> u32, ordered: bool) {
        let (n, k, ib) = (self.n, self.k, self.ib);
        debug_assert!(n <= 1 << ib);
        let low = (1u64 << ib) - 1;
        self.keys.clear();
        self.keys.extend(self.d[..n].iter().enumerate().map(|(i, x)| (x.to_f64().to_bits() & !low) | i as u64));
        // Only the best k need sorting: those below the k-th key's truncated distance,
        // and all those equal to it (on either side of the k-th: their order is decided
        // below).
        let mut n = n;
        if n > k {
            self.keys.select_nth_unstable(k - 1);
            let v = self.keys[k - 1] >> ib;
            let mut e = k;
            for j in k..n {
                if self.keys[j] >> ib == v {
                    self.keys.swap(e, j);
                    e += 1;
                }
            }
            n = e;
        }
        let keys = &mut self.keys[..n];
        let (d, z) = (&self.d, &self.z);
        if ordered || n > k {
            keys.sort_unstable();
            let mut a = 0;
            for j in 1..=n {
                if j == n || keys[j] >> ib != keys[a] >> ib {
                    if j - a > 1 {
                        sort_run(&mut keys[a..j], low, d, z, rank);
                    }
                    a = j;
                }
            }
        }
        let m = n.min(k);
        self.out_d.clear();
        self.out_z.clear();
        self.out_d.extend(keys[..m].iter().map(|&x| d[(x & low) as usize]));
        self.out_z.extend(keys[..m].iter().map(|&x| z[(x & low) as usize]));
    }

    /// The result's distances² (ascending) and z-indices (after `finish`).
    #[inline(always)]
    pub(crate) fn d2s(&self) -> &[T] {
        &self.out_d
    }

    #[inline(always)]
    pub(crate) fn zs(&self) -> &[u32] {
        &self.out_z
    }
}

/// A block of eight candidates written compressed: the entries in the mask, in order, at
/// the front (the rest of the eight slots hold leftovers).
#[cfg(target_arch = "x86_64")]
mod compress {
    use std::arch::x86_64::*;

    /// For each mask of `lanes` lanes: the indices of the 32-bit parts of its set lanes
    /// (`parts` to a lane), in order, a byte each.
    const fn table<const M: usize>(lanes: usize, parts: usize) -> [u64; M] {
        let mut t = [0u64; M];
        let mut m = 0;
        while m < M {
            let (mut v, mut o, mut i) = (0u64, 0, 0);
            while i < lanes {
                let mut j = 0;
                while (m >> i) & 1 == 1 && j < parts {
                    v |= ((parts * i + j) as u64) << (8 * o);
                    (o, j) = (o + 1, j + 1);
                }
                i += 1;
            }
            t[m] = v;
            m += 1;
        }
        t
    }

    /// Eight 32-bit lanes (z-indices, f32 distances); four 64-bit lanes (f64 distances).
    const LANES8: [u64; 256] = table(8, 1);
    const LANES4X2: [u64; 16] = table(4, 2);

    #[inline(always)]
    unsafe fn lanes(bytes: u64) -> __m256i {
        unsafe { _mm256_cvtepu8_epi32(_mm_cvtsi64_si128(bytes as i64)) }
    }

    /// Writes the masked ones of eight distances² (f32 or f64) to `d` and of the sources
    /// `base..base + 8` to `z`. Needs AVX2, and room for eight entries at both.
    #[inline(always)]
    pub(super) unsafe fn block8<T>(d2: *const T, d: *mut T, z: *mut u32, base: u32, mask: u32) {
        unsafe {
            let m = (mask & 0xFF) as usize;
            let zl = lanes(LANES8[m]);
            let zv = _mm256_add_epi32(_mm256_set1_epi32(base as i32), _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7));
            _mm256_storeu_si256(z as *mut __m256i, _mm256_permutevar8x32_epi32(zv, zl));
            if std::mem::size_of::<T>() == 4 {
                let v = _mm256_loadu_si256(d2 as *const __m256i);
                _mm256_storeu_si256(d as *mut __m256i, _mm256_permutevar8x32_epi32(v, zl));
            } else {
                debug_assert!(std::mem::size_of::<T>() == 8);
                let (lo, hi) = (m & 15, m >> 4);
                let v0 = _mm256_loadu_si256(d2 as *const __m256i);
                let v1 = _mm256_loadu_si256((d2 as *const u8).add(32) as *const __m256i);
                _mm256_storeu_si256(d as *mut __m256i, _mm256_permutevar8x32_epi32(v0, lanes(LANES4X2[lo])));
                let d1 = (d as *mut u8).add(8 * lo.count_ones() as usize);
                _mm256_storeu_si256(d1 as *mut __m256i, _mm256_permutevar8x32_epi32(v1, lanes(LANES4X2[hi])));
            }
        }
    }
}

/// How a distance² becomes the high part of a network key (`CandBuf::key`).
#[derive(Clone, Copy)]
struct KeyQuant {
    ib: u32,
    scale: f64,
    qmax: u32,
}

/// The keys of entries `base, base + 1, ..` at distances² `d`, into `out` (as long).
#[inline(always)]
fn fresh_keys<T: Real>(d: &[T], out: &mut [u32], base: u32, q: KeyQuant) {
    let KeyQuant { ib, scale, qmax } = q;
    // (The mode chosen once: plain loops, which vectorise.)
    if scale > 0.0 {
        for (i, (o, &x)) in out.iter_mut().zip(d).enumerate() {
            *o = (fixed(x, scale, qmax) << ib) | (base + i as u32);
        }
    } else {
        for (i, (o, &x)) in out.iter_mut().zip(d).enumerate() {
            *o = (((x.to_f64() as f32).to_bits() >> ib).min(qmax) << ib) | (base + i as u32);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn fresh_keys_avx2<T: Real>(d: &[T], out: &mut [u32], base: u32, q: KeyQuant) {
    fresh_keys(d, out, base, q)
}

/// `d` (>= 0, or +inf) times `scale` (> 0, finite), rounded down and capped at `qmax`
/// (< 2^31): monotone in `d`.
#[inline(always)]
fn fixed<T: Real>(d: T, scale: f64, qmax: u32) -> u32 {
    // In [0, qmax] whatever `d` (a NaN goes to 0 through max), so the conversion below
    // is in range.
    let x = (d.to_f64() * scale).max(0.0).min(qmax as f64);
    // SAFETY: x is finite and in [0, qmax], qmax < 2^31.
    unsafe { x.to_int_unchecked::<i32>() as u32 }
}

/// Orders a run of sort keys (entry index in the bits `low`) by (distance², rank).
#[inline(never)]
fn sort_run<T: Real, K: Copy + Into<u64>>(run: &mut [K], low: u64, d: &[T], z: &[u32], rank: &impl Fn(u32) -> u32) {
    run.sort_unstable_by(|&a, &b| {
        let (ia, ib) = ((a.into() & low) as usize, (b.into() & low) as usize);
        d[ia].partial_cmp(&d[ib]).unwrap_or(std::cmp::Ordering::Equal).then_with(|| rank(z[ia]).cmp(&rank(z[ib])))
    });
}

#[cfg(test)]
mod tests {
    use super::CandBuf;
    use crate::geom::Real;

    /// Against a full sort, with ties and thresholds as the leaf pass applies them.
    fn check<T: Real>(avx: bool) {
        let mut x = 777u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut c = CandBuf::<T>::new();
        for k in [1usize, 2, 29, 33, 64, 100, 256, 300, 600, 40] {
            for round in 0..30 {
                let n = (next() % (3 * k as u64 + 100)) as usize;
                // Many ties, all equal, or distinct (almost surely in f64).
                let levels = [40, 1, 1 << 40][round % 3];
                let d: Vec<T> = (0..n).map(|_| T::from_f64((next() % levels) as f64 * 0.5)).collect();
                let rank = |z: u32| (n as u32) - z;
                let init = if round % 4 == 0 { T::INFINITY } else { T::from_f64(levels as f64 * 0.3) };
                let mut thr = init;
                // The keys' bound: the threshold, or (round 5 of 10) one far too tight,
                // which only makes more keys tie.
                let bound = if round % 10 == 5 { T::from_f64(init.to_f64() / 8.0) } else { init };
                c.reset(k, 8, bound);
                for b0 in (0..n).step_by(8) {
                    let blk: [T; 8] = std::array::from_fn(|i| if b0 + i < n { d[b0 + i] } else { T::INFINITY });
                    let mut m = 0u32;
                    for (i, &v) in blk.iter().enumerate() {
                        m |= ((b0 + i < n && v <= thr) as u32) << i;
                    }
                    #[cfg(target_arch = "x86_64")]
                    let cut = if avx { c.offer::<8, true>(&blk, b0 as u32, m, &rank) } else { c.offer::<8, false>(&blk, b0 as u32, m, &rank) };
                    #[cfg(not(target_arch = "x86_64"))]
                    let cut = c.offer::<8, false>(&blk, b0 as u32, m, &rank);
                    if cut {
                        assert!(c.kth() <= thr);
                        thr = c.kth();
                    }
                }
                c.finish(&rank);
                let mut want: Vec<(T, u32)> = d.iter().enumerate().filter(|e| *e.1 <= init).map(|(z, &dd)| (dd, rank(z as u32))).collect();
                want.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
                want.truncate(k);
                let got: Vec<(T, u32)> = c.d2s().iter().zip(c.zs()).map(|(&dd, &z)| (dd, rank(z))).collect();
                assert!(
                    got == want,
                    "{} k {k} n {n} round {round} got {:?} want {:?}",
                    T::NAME,
                    got.iter().map(|e| (e.0.to_f64(), e.1)).collect::<Vec<_>>(),
                    want.iter().map(|e| (e.0.to_f64(), e.1)).collect::<Vec<_>>()
                );
            }
        }
    }

    #[test]
    fn keeps_the_k_best_by_distance_then_rank() {
        let mut levels = vec![false];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            levels.push(true);
        }
        for avx in levels {
            check::<f64>(avx);
            check::<f32>(avx);
        }
    }
}
