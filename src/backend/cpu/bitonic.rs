//! Branch-free sorting of small arrays of `u32` keys (the kNN candidate buffer's sort
//! keys): bitonic networks in vector registers, eight keys to an AVX2 vector (native
//! unsigned 32-bit min and max; a lane permute, a min, a max and a blend per stage inside
//! a vector).
//!
//! A comparison sort's branches on such keys are random (about one mispredict per key
//! and level); a network's are not. Keys are distinct in use, so every method sorts them
//! the same way; the baseline build uses the standard library's sort. (The networks ran
//! on 64-bit keys before: four to an AVX2 vector, with a compare and two blends for each
//! min/max pair, or eight to an AVX-512 one. 32-bit keys halve the vectors and need no
//! blends for min/max, so the AVX-512 level runs this AVX2 code too.)
//!
//! The networks are the "flip" form of bitonic sort (every stage ascending): merging two
//! sorted halves of a block compares element `i` with its mirror `s - 1 - i`, then
//! half-cleaners at distances s/4, ..., 1 finish the block. They are written once over
//! `Lanes`, the vector type (one, today), with every stage unrolled.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

use super::simd::Simd;

/// Sorts `x` ascending (length a power of two, at least 8) at vector level `level`.
pub(crate) fn sort(x: &mut [u32], level: Simd) {
    assert!(x.len().is_power_of_two() && x.len() >= 8);
    #[cfg(target_arch = "x86_64")]
    if level >= Simd::Avx2 {
        // SAFETY: `level` is at most what the CPU has (`simd::level`), so AVX2.
        return unsafe { sort_avx2(x) };
    }
    let _ = level;
    x.sort_unstable();
}

/// Replaces `low` (sorted, length P a power of two, at least 8) by the P smallest keys
/// of `low` and `high[..P]` (sorted, `high.len() >= P`), sorted; returns the next
/// smallest key of the union of `low` and `high` (`u32::MAX` when there is none), at
/// vector level `level`.
pub(crate) fn merge_low(low: &mut [u32], high: &[u32], level: Simd) -> u32 {
    let p = low.len();
    // The vector code reads p keys of `high`.
    assert!(p.is_power_of_two() && p >= 8 && high.len() >= p);
    let after = high.get(p).copied().unwrap_or(u32::MAX);
    #[cfg(target_arch = "x86_64")]
    if level >= Simd::Avx2 {
        // SAFETY: as in `sort`.
        return unsafe { merge_low_avx2(low, high) }.min(after);
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
    unsafe fn load(p: *const u32, v: usize) -> Self;
    unsafe fn store(self, p: *mut u32, v: usize);
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
    unsafe fn least(self) -> u32;
}

/// Eight keys (AVX2).
#[cfg(target_arch = "x86_64")]
#[derive(Clone, Copy)]
struct Y(__m256i);

#[cfg(target_arch = "x86_64")]
impl Y {
    /// One compare-exchange stage: each lane against the lane `partner` moved there;
    /// lanes set in `UPPER` take the larger of the pair, the others the smaller.
    #[inline(always)]
    unsafe fn with<const UPPER: i32>(self, partner: __m256i) -> Self {
        unsafe { Y(_mm256_blend_epi32::<UPPER>(_mm256_min_epu32(self.0, partner), _mm256_max_epu32(self.0, partner))) }
    }
    /// Partners at distance 4 (the other 128-bit half), 2 and 1, and mirrored in fours.
    #[inline(always)]
    unsafe fn d4(self) -> Self {
        unsafe { self.with::<0xF0>(_mm256_permute4x64_epi64::<0x4E>(self.0)) }
    }
    #[inline(always)]
    unsafe fn d2(self) -> Self {
        unsafe { self.with::<0xCC>(_mm256_shuffle_epi32::<0x4E>(self.0)) }
    }
    #[inline(always)]
    unsafe fn d1(self) -> Self {
        unsafe { self.with::<0xAA>(_mm256_shuffle_epi32::<0xB1>(self.0)) }
    }
    #[inline(always)]
    unsafe fn m4(self) -> Self {
        unsafe { self.with::<0xCC>(_mm256_shuffle_epi32::<0x1B>(self.0)) }
    }
    /// Partners mirrored in eight.
    #[inline(always)]
    unsafe fn m8(self) -> Self {
        unsafe { self.with::<0xF0>(self.reverse().0) }
    }
}

#[cfg(target_arch = "x86_64")]
impl Lanes for Y {
    const LANES: usize = 8;
    #[inline(always)]
    unsafe fn load(p: *const u32, v: usize) -> Self {
        unsafe { Y(_mm256_loadu_si256(p.add(8 * v) as *const __m256i)) }
    }
    #[inline(always)]
    unsafe fn store(self, p: *mut u32, v: usize) {
        unsafe { _mm256_storeu_si256(p.add(8 * v) as *mut __m256i, self.0) }
    }
    #[inline(always)]
    unsafe fn minmax(self, b: Self) -> (Self, Self) {
        unsafe { (Y(_mm256_min_epu32(self.0, b.0)), Y(_mm256_max_epu32(self.0, b.0))) }
    }
    #[inline(always)]
    unsafe fn reverse(self) -> Self {
        unsafe { Y(_mm256_permutevar8x32_epi32(self.0, _mm256_setr_epi32(7, 6, 5, 4, 3, 2, 1, 0))) }
    }
    #[inline(always)]
    unsafe fn clean(self) -> Self {
        unsafe { self.d4().d2().d1() }
    }
    #[inline(always)]
    unsafe fn sorted(self) -> Self {
        // Pairs, then mirrors in fours and the pairs again, then mirrors in eight and the
        // half-cleaners at 2 and 1.
        unsafe { self.d1().m4().d1().m8().d2().d1() }
    }
    #[inline(always)]
    unsafe fn max_keys() -> Self {
        unsafe { Y(_mm256_set1_epi32(-1)) }
    }
    #[inline(always)]
    unsafe fn least(self) -> u32 {
        unsafe {
            let m = _mm_min_epu32(_mm256_castsi256_si128(self.0), _mm256_extracti128_si256::<1>(self.0));
            let m = _mm_min_epu32(m, _mm_shuffle_epi32::<0x4E>(m));
            let m = _mm_min_epu32(m, _mm_shuffle_epi32::<0xB1>(m));
            _mm_cvtsi128_si32(m) as u32
        }
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
unsafe fn sort_n<V: Lanes, const N: usize>(p: *mut u32) {
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
unsafe fn clean_mem<V: Lanes>(p: *mut u32, nv: usize, mut dv: usize) {
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
unsafe fn sort_with<V: Lanes>(x: &mut [u32]) {
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
unsafe fn merge_low_n<V: Lanes, const N: usize>(p: *mut u32, h: *const u32) -> V {
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
unsafe fn merge_low_with<V: Lanes>(low: &mut [u32], high: &[u32]) -> u32 {
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
unsafe fn sort_avx2(x: &mut [u32]) {
    unsafe { sort_with::<Y>(x) }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn merge_low_avx2(low: &mut [u32], high: &[u32]) -> u32 {
    unsafe { merge_low_with::<Y>(low, high) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(n: usize, seed: u64, levels: u64) -> Vec<u32> {
        let mut x = seed | 1;
        (0..n)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                (x % levels) as u32
            })
            .collect()
    }

    #[test]
    fn sorts_and_merges_as_the_standard_sort() {
        for a in Simd::available() {
            for n in [8usize, 16, 32, 64, 128, 256, 512, 1024] {
                for (r, levels) in [3u64, 1000, u64::MAX].into_iter().enumerate() {
                    let mut x = keys(n, 7 + n as u64 + r as u64, levels);
                    if r == 0 {
                        x[n / 2] = u32::MAX;
                    }
                    let mut want = x.clone();
                    want.sort_unstable();
                    sort(&mut x, a);
                    assert_eq!(x, want, "sort n {n} levels {levels} {a:?}");
                    for extra in [0usize, 1, n] {
                        let mut hi = keys(n + extra, 99 + n as u64, levels);
                        hi.sort_unstable();
                        let mut all: Vec<u32> = x.iter().chain(&hi).copied().collect();
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
