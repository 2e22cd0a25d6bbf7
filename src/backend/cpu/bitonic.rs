//! Branch-free sorting of small arrays of non-negative `i64` keys (the kNN candidate
//! buffer's sort keys): bitonic networks in vector registers, four keys to an AVX2
//! vector or eight to an AVX-512 one (native 64-bit min and max, a lane permute and a
//! masked blend per stage inside a vector).
//!
//! A comparison sort's branches on such keys are random (about one mispredict per key
//! and level); a network's are not. Keys are distinct in use, so every method sorts them
//! the same way; the baseline build uses the standard library's sort.
//!
//! The networks are the "flip" form of bitonic sort (every stage ascending): merging two
//! sorted halves of a block compares element `i` with its mirror `s - 1 - i`, then
//! half-cleaners at distances s/4, ..., 1 finish the block. They are written once over
//! `Lanes`, the vector type, and compiled per instruction set.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::simd::Simd;

/// Sorts `x` ascending (length a power of two, at least 4) at vector level `level`.
pub(crate) fn sort(x: &mut [i64], level: Simd) {
    assert!(x.len().is_power_of_two() && x.len() >= 4);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: `level` is at most what the CPU has (`simd::level`).
        match level {
            Simd::Avx512 if x.len() >= 8 => return unsafe { sort_avx512(x) },
            Simd::Avx2 | Simd::Avx512 => return unsafe { sort_avx2(x) },
            Simd::Base => {}
        }
    }
    let _ = level;
    x.sort_unstable();
}

/// Replaces `low` (sorted, length P a power of two, at least 4) by the P smallest keys
/// of `low` and `high[..P]` (sorted, `high.len() >= P`), sorted; returns the next
/// smallest key of the union of `low` and `high` (`i64::MAX` when there is none), at
/// vector level `level`.
pub(crate) fn merge_low(low: &mut [i64], high: &[i64], level: Simd) -> i64 {
    let p = low.len();
    // The vector code reads p keys of `high`.
    assert!(p.is_power_of_two() && p >= 4 && high.len() >= p);
    let after = high.get(p).copied().unwrap_or(i64::MAX);
    #[cfg(target_arch = "x86_64")]
    {
        // SAFETY: as in `sort`.
        match level {
            Simd::Avx512 if p >= 8 => return unsafe { merge_low_avx512(low, high) }.min(after),
            Simd::Avx2 | Simd::Avx512 => return unsafe { merge_low_avx2(low, high) }.min(after),
            Simd::Base => {}
        }
    }
    let _ = level;
    // The P smallest are the smaller of each mirrored pair (a bitonic sequence); the next
    // one is the smallest of the larger ones.
    let mut next = after;
    for i in 0..p {
        let (a, b) = (low[i], high[p - 1 - i]);
        low[i] = a.min(b);
        next = next.min(a.max(b));
    }
    low.sort_unstable();
    next
}

/// A vector of `LANES` keys and the network steps inside one. Every method needs the
/// instruction set of its type (the callers' `#[target_feature]`).
#[cfg(target_arch = "x86_64")]
trait Lanes: Copy {
    const LANES: usize;
    unsafe fn load(p: *const i64, v: usize) -> Self;
    unsafe fn store(self, p: *mut i64, v: usize);
    /// Lane-wise (min, max).
    unsafe fn minmax(self, b: Self) -> (Self, Self);
    /// The lanes in reverse order.
    unsafe fn reverse(self) -> Self;
    /// A bitonic vector sorted (the half-cleaners inside it).
    unsafe fn clean(self) -> Self;
    /// The vector sorted.
    unsafe fn sorted(self) -> Self;
    unsafe fn max_keys() -> Self;
    /// The smallest lane.
    unsafe fn least(self) -> i64;
}

/// Four keys (AVX2: min and max by compare and blend).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Y(__m256i);

#[cfg(target_arch = "x86_64")]
impl Y {
    /// One compare-exchange stage: each lane against the lane `PERM` puts there; lanes set
    /// in `upper` take the larger of the pair, the others the smaller.
    #[inline(always)]
    unsafe fn within<const PERM: i32>(self, upper: __m256i) -> Self {
        unsafe {
            let p = _mm256_permute4x64_epi64::<PERM>(self.0);
            // Lower lanes take p when v > p; upper lanes when !(v > p) (p when equal: the same).
            let take = _mm256_xor_si256(_mm256_cmpgt_epi64(self.0, p), upper);
            Y(_mm256_blendv_epi8(self.0, p, take))
        }
    }

    /// Lanes 1 and 3, lanes 2 and 3 (the upper lane of each pair at distance 1 and 2).
    #[inline(always)]
    unsafe fn uppers() -> (__m256i, __m256i) {
        unsafe { (_mm256_setr_epi64x(0, -1, 0, -1), _mm256_setr_epi64x(0, 0, -1, -1)) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for Y {
    const LANES: usize = 4;
    #[inline(always)]
    unsafe fn load(p: *const i64, v: usize) -> Self {
        unsafe { Y(_mm256_loadu_si256(p.add(4 * v) as *const __m256i)) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut i64, v: usize) {
        unsafe { _mm256_storeu_si256(p.add(4 * v) as *mut __m256i, self.0) }
    }
    #[inline(always)]
    unsafe fn minmax(self, b: Self) -> (Self, Self) {
        unsafe {
            let gt = _mm256_cmpgt_epi64(self.0, b.0);
            (Y(_mm256_blendv_epi8(self.0, b.0, gt)), Y(_mm256_blendv_epi8(b.0, self.0, gt)))
        }
    }
    #[inline(always)]
    unsafe fn reverse(self) -> Self {
        unsafe { Y(_mm256_permute4x64_epi64::<0x1B>(self.0)) }
    }
    #[inline(always)]
    unsafe fn clean(self) -> Self {
        unsafe {
            let (u1, u2) = Self::uppers();
            self.within::<0x4E>(u2).within::<0xB1>(u1)
        }
    }
    #[inline(always)]
    unsafe fn sorted(self) -> Self {
        // Pairs (0 1)(2 3), then mirrors (0 3)(1 2), then the half-cleaners.
        unsafe {
            let (u1, u2) = Self::uppers();
            self.within::<0xB1>(u1).within::<0x1B>(u2).clean()
        }
    }
    #[inline(always)]
    unsafe fn max_keys() -> Self {
        unsafe { Y(_mm256_set1_epi64x(i64::MAX)) }
    }
    #[inline(always)]
    unsafe fn least(self) -> i64 {
        let mut m = [0i64; 4];
        unsafe { _mm256_storeu_si256(m.as_mut_ptr() as *mut __m256i, self.0) };
        m[0].min(m[1]).min(m[2].min(m[3]))
    }
}

/// Eight keys (AVX-512F).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Z(__m512i);

#[cfg(target_arch = "x86_64")]
impl Z {
    /// The lane each lane pairs with: at distances 4, 2 and 1, and mirrored in fours and
    /// in eight.
    const D4: [i64; 8] = [4, 5, 6, 7, 0, 1, 2, 3];
    const D2: [i64; 8] = [2, 3, 0, 1, 6, 7, 4, 5];
    const D1: [i64; 8] = [1, 0, 3, 2, 5, 4, 7, 6];
    const M4: [i64; 8] = [3, 2, 1, 0, 7, 6, 5, 4];
    const M8: [i64; 8] = [7, 6, 5, 4, 3, 2, 1, 0];

    /// Each lane against lane `idx[i]`; lanes set in `UPPER` take the larger of the pair.
    #[inline(always)]
    unsafe fn within<const UPPER: u8>(self, idx: [i64; 8]) -> Self {
        unsafe {
            let p = _mm512_permutexvar_epi64(_mm512_loadu_si512(idx.as_ptr() as *const _), self.0);
            Z(_mm512_mask_blend_epi64(UPPER, _mm512_min_epi64(self.0, p), _mm512_max_epi64(self.0, p)))
        }
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for Z {
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn load(p: *const i64, v: usize) -> Self {
        unsafe { Z(_mm512_loadu_si512(p.add(8 * v) as *const _)) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut i64, v: usize) {
        unsafe { _mm512_storeu_si512(p.add(8 * v) as *mut _, self.0) }
    }
    #[inline(always)]
    unsafe fn minmax(self, b: Self) -> (Self, Self) {
        unsafe { (Z(_mm512_min_epi64(self.0, b.0)), Z(_mm512_max_epi64(self.0, b.0))) }
    }
    #[inline(always)]
    unsafe fn reverse(self) -> Self {
        unsafe { Z(_mm512_permutexvar_epi64(_mm512_loadu_si512(Self::M8.as_ptr() as *const _), self.0)) }
    }
    #[inline(always)]
    unsafe fn clean(self) -> Self {
        unsafe { self.within::<0xF0>(Self::D4).within::<0xCC>(Self::D2).within::<0xAA>(Self::D1) }
    }
    #[inline(always)]
    unsafe fn sorted(self) -> Self {
        // Pairs, then mirrors in fours and the pairs again, then mirrors in eight.
        unsafe { self.within::<0xAA>(Self::D1).within::<0xCC>(Self::M4).within::<0xAA>(Self::D1).within::<0xF0>(Self::M8).within::<0xCC>(Self::D2).within::<0xAA>(Self::D1) }
    }
    #[inline(always)]
    unsafe fn max_keys() -> Self {
        unsafe { Z(_mm512_set1_epi64(i64::MAX)) }
    }
    #[inline(always)]
    unsafe fn least(self) -> i64 {
        unsafe { _mm512_reduce_min_epi64(self.0) }
    }
}

/// Mirrored pairs of vectors inside each block of `SV` (the first stage of merging its
/// two sorted halves).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn mirror<V: Lanes, const N: usize, const SV: usize>(v: &mut [V; N]) {
    for b in 0..N / SV {
        for la in 0..SV / 2 {
            let (a, m) = (b * SV + la, b * SV + SV - 1 - la);
            // SAFETY: the vector type's instruction set in every caller.
            let (lo, hi) = unsafe { v[a].minmax(v[m].reverse()) };
            v[a] = lo;
            v[m] = unsafe { hi.reverse() };
        }
    }
}

/// Half-cleaners between vectors `DV` apart.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn half<V: Lanes, const N: usize, const DV: usize>(v: &mut [V; N]) {
    for b in 0..N / (2 * DV) {
        for j in 0..DV {
            let a = b * 2 * DV + j;
            // SAFETY: the vector type's instruction set in every caller.
            let (lo, hi) = unsafe { v[a].minmax(v[a + DV]) };
            v[a] = lo;
            v[a + DV] = hi;
        }
    }
}

/// Every vector's own half-cleaners.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn clean_each<V: Lanes, const N: usize>(v: &mut [V; N]) {
    for x in v.iter_mut() {
        // SAFETY: the vector type's instruction set in every caller.
        *x = unsafe { x.clean() };
    }
}

/// The keys of `N` vectors (a power of two, at most 32), sorted. Every stage is spelt
/// out with constant bounds, so the compiler unrolls it all: no branch depends on the
/// stage, and the keys stay in registers (or spill slots). (Written as loops over the
/// distances, even over constant arrays, the stages were not unrolled: 13% more
/// instructions and twice the mispredicts in the k = 64 leaf pass.)
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sort_regs<V: Lanes, const N: usize>(v: &mut [V; N]) {
    unsafe {
        for x in v.iter_mut() {
            *x = x.sorted();
        }
        // Blocks of 2, 4, ... vectors: mirrored pairs, then half-cleaners.
        if N >= 2 {
            mirror::<V, N, 2>(v);
            clean_each(v);
        }
        if N >= 4 {
            mirror::<V, N, 4>(v);
            half::<V, N, 1>(v);
            clean_each(v);
        }
        if N >= 8 {
            mirror::<V, N, 8>(v);
            half::<V, N, 2>(v);
            half::<V, N, 1>(v);
            clean_each(v);
        }
        if N >= 16 {
            mirror::<V, N, 16>(v);
            half::<V, N, 4>(v);
            half::<V, N, 2>(v);
            half::<V, N, 1>(v);
            clean_each(v);
        }
        if N >= 32 {
            mirror::<V, N, 32>(v);
            half::<V, N, 8>(v);
            half::<V, N, 4>(v);
            half::<V, N, 2>(v);
            half::<V, N, 1>(v);
            clean_each(v);
        }
    }
}

/// A bitonic sequence of `N` vectors (at most 32) sorted.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn clean_regs<V: Lanes, const N: usize>(v: &mut [V; N]) {
    unsafe {
        if N >= 32 {
            half::<V, N, 16>(v);
        }
        if N >= 16 {
            half::<V, N, 8>(v);
        }
        if N >= 8 {
            half::<V, N, 4>(v);
        }
        if N >= 4 {
            half::<V, N, 2>(v);
        }
        if N >= 2 {
            half::<V, N, 1>(v);
        }
        clean_each(v);
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sort_n<V: Lanes, const N: usize>(p: *mut i64) {
    unsafe {
        let mut v: [V; N] = std::array::from_fn(|a| V::load(p, a));
        sort_regs(&mut v);
        for (a, x) in v.iter().enumerate() {
            x.store(p, a);
        }
    }
}

/// Half-cleaners of distances `dv, dv / 2, ..., 1` vectors over `nv` vectors at `p`,
/// then inside each vector (each block of `2 * dv` vectors bitonic on entry, sorted on
/// exit).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn clean_mem<V: Lanes>(p: *mut i64, nv: usize, mut dv: usize) {
    unsafe {
        while dv >= 1 {
            for a in 0..nv {
                if a & dv == 0 {
                    let (lo, hi) = V::load(p, a).minmax(V::load(p, a | dv));
                    lo.store(p, a);
                    hi.store(p, a | dv);
                }
            }
            dv /= 2;
        }
        for a in 0..nv {
            V::load(p, a).clean().store(p, a);
        }
    }
}

/// `sort` of `x` (a power of two, at least one vector) in vectors of `V`: in registers
/// up to 32 vectors, else stage by stage through memory.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sort_with<V: Lanes>(x: &mut [i64]) {
    let nv = x.len() / V::LANES;
    let p = x.as_mut_ptr();
    unsafe {
        match nv {
            1 => return sort_n::<V, 1>(p),
            2 => return sort_n::<V, 2>(p),
            4 => return sort_n::<V, 4>(p),
            8 => return sort_n::<V, 8>(p),
            16 => return sort_n::<V, 16>(p),
            32 => return sort_n::<V, 32>(p),
            _ => {}
        }
        for a in 0..nv {
            V::load(p, a).sorted().store(p, a);
        }
        // Blocks of sv = 2, 4, ... vectors: mirrored pairs, then half-cleaners.
        let mut sv = 2;
        while sv <= nv {
            for b in (0..nv).step_by(sv) {
                for la in 0..sv / 2 {
                    let (a, m) = (b + la, b + sv - 1 - la);
                    let (lo, hi) = V::load(p, a).minmax(V::load(p, m).reverse());
                    lo.store(p, a);
                    hi.reverse().store(p, m);
                }
            }
            clean_mem::<V>(p, nv, sv / 4);
            sv *= 2;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn merge_low_n<V: Lanes, const N: usize>(p: *mut i64, h: *const i64) -> V {
    unsafe {
        let mut next = V::max_keys();
        let mut v: [V; N] = std::array::from_fn(|a| V::load(p, a));
        for a in 0..N {
            let (lo, hi) = v[a].minmax(V::load(h, N - 1 - a).reverse());
            v[a] = lo;
            next = next.minmax(hi).0;
        }
        clean_regs(&mut v);
        for (a, x) in v.iter().enumerate() {
            x.store(p, a);
        }
        next
    }
}

/// `merge_low` (before `high[p]`) in vectors of `V`.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn merge_low_with<V: Lanes>(low: &mut [i64], high: &[i64]) -> i64 {
    let nv = low.len() / V::LANES;
    let (p, h) = (low.as_mut_ptr(), high.as_ptr());
    unsafe {
        let next = match nv {
            1 => merge_low_n::<V, 1>(p, h),
            2 => merge_low_n::<V, 2>(p, h),
            4 => merge_low_n::<V, 4>(p, h),
            8 => merge_low_n::<V, 8>(p, h),
            16 => merge_low_n::<V, 16>(p, h),
            _ => {
                let mut next = V::max_keys();
                for a in 0..nv {
                    let (lo, hi) = V::load(p, a).minmax(V::load(h, nv - 1 - a).reverse());
                    lo.store(p, a);
                    next = next.minmax(hi).0;
                }
                clean_mem::<V>(p, nv, nv / 2);
                next
            }
        };
        next.least()
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sort_avx2(x: &mut [i64]) {
    unsafe { sort_with::<Y>(x) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f")]
unsafe fn sort_avx512(x: &mut [i64]) {
    unsafe { sort_with::<Z>(x) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn merge_low_avx2(low: &mut [i64], high: &[i64]) -> i64 {
    unsafe { merge_low_with::<Y>(low, high) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2,avx512f")]
unsafe fn merge_low_avx512(low: &mut [i64], high: &[i64]) -> i64 {
    unsafe { merge_low_with::<Z>(low, high) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize, seed: u64, levels: u64) -> Vec<i64> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                ((x % levels) as i64) & i64::MAX
            })
            .collect()
    }

    #[test]
    fn sorts_and_merges_as_the_standard_sort() {
        for a in Simd::available() {
            for n in [4usize, 8, 16, 32, 64, 128, 256, 512] {
                for (r, levels) in [3u64, 1000, u64::MAX].into_iter().enumerate() {
                    let mut x = keys(n, 7 + n as u64 + r as u64, levels);
                    if r == 0 {
                        x[n / 2] = i64::MAX;
                    }
                    let mut want = x.clone();
                    want.sort_unstable();
                    sort(&mut x, a);
                    assert_eq!(x, want, "sort n {n} levels {levels} {a:?}");
                    for extra in [0usize, 1, n] {
                        let mut hi = keys(n + extra, 99 + n as u64, levels);
                        hi.sort_unstable();
                        let mut all: Vec<i64> = x.iter().chain(&hi).copied().collect();
                        all.sort_unstable();
                        let mut lo = x.clone();
                        let next = merge_low(&mut lo, &hi, a);
                        assert_eq!(lo, all[..n], "merge n {n} extra {extra} {a:?}");
                        assert_eq!(next, all[n], "next n {n} extra {extra} {a:?}");
                    }
                }
            }
        }
    }
}
