//! Branch-free sorting of small arrays of non-negative `i64` keys (the kNN candidate
//! buffer's sort keys): bitonic networks in AVX2 registers, four keys to a vector.
//!
//! A comparison sort's branches on such keys are random (about one mispredict per key
//! and level); a network's are not. Keys are distinct in use, so every method sorts them
//! the same way; the baseline build uses the standard library's sort.
//!
//! The networks are the "flip" form of bitonic sort (every stage ascending): merging two
//! sorted halves of a block compares element `i` with its mirror `s - 1 - i`, then
//! half-cleaners at distances s/4, ..., 1 finish the block.

#[cfg(target_arch = "x86_64")]
use std::arch::x86_64::*;

/// Sorts `x` ascending (length a power of two, at least 4). `avx2`: the CPU has AVX2.
pub(crate) fn sort(x: &mut [i64], avx2: bool) {
    assert!(x.len().is_power_of_two() && x.len() >= 4);
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: `avx2` is set only where the CPU has AVX2 (`simd::level`).
        unsafe { sort_avx2(x) };
        return;
    }
    let _ = avx2;
    x.sort_unstable();
}

/// Replaces `low` (sorted, length P a power of two, at least 4) by the P smallest keys
/// of `low` and `high[..P]` (sorted, `high.len() >= P`), sorted; returns the next
/// smallest key of the union of `low` and `high` (`i64::MAX` when there is none).
/// `avx2`: the CPU has AVX2.
pub(crate) fn merge_low(low: &mut [i64], high: &[i64], avx2: bool) -> i64 {
    let p = low.len();
    // The vector code reads p keys of `high`.
    assert!(p.is_power_of_two() && p >= 4 && high.len() >= p);
    let after = high.get(p).copied().unwrap_or(i64::MAX);
    #[cfg(target_arch = "x86_64")]
    if avx2 {
        // SAFETY: as in `sort`.
        return unsafe { merge_low_avx2(low, high) }.min(after);
    }
    let _ = avx2;
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

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn load(p: *const i64, v: usize) -> __m256i {
    unsafe { _mm256_loadu_si256(p.add(4 * v) as *const __m256i) }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn store(p: *mut i64, v: usize, x: __m256i) {
    unsafe { _mm256_storeu_si256(p.add(4 * v) as *mut __m256i, x) }
}

/// Lane-wise (min, max) of two vectors.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn minmax(a: __m256i, b: __m256i) -> (__m256i, __m256i) {
    unsafe {
        let gt = _mm256_cmpgt_epi64(a, b);
        (_mm256_blendv_epi8(a, b, gt), _mm256_blendv_epi8(b, a, gt))
    }
}

/// The lanes in reverse order.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn reverse(v: __m256i) -> __m256i {
    unsafe { _mm256_permute4x64_epi64::<0x1B>(v) }
}

/// One compare-exchange stage inside a vector: each lane against the lane `PERM` puts
/// there; lanes set in `upper` take the larger of the pair, the others the smaller.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn within<const PERM: i32>(v: __m256i, upper: __m256i) -> __m256i {
    unsafe {
        let p = _mm256_permute4x64_epi64::<PERM>(v);
        // Lower lanes take p when v > p; upper lanes when !(v > p) (p when equal: the same).
        let take = _mm256_xor_si256(_mm256_cmpgt_epi64(v, p), upper);
        _mm256_blendv_epi8(v, p, take)
    }
}

/// Lanes 1 and 3, lanes 2 and 3 (the upper lane of each pair at distance 1 and 2).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn uppers() -> (__m256i, __m256i) {
    unsafe { (_mm256_setr_epi64x(0, -1, 0, -1), _mm256_setr_epi64x(0, 0, -1, -1)) }
}

/// The half-cleaners at distances 2 and 1 inside a vector (a bitonic vector sorted).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn clean4(v: __m256i, u1: __m256i, u2: __m256i) -> __m256i {
    unsafe { within::<0xB1>(within::<0x4E>(v, u2), u1) }
}

/// The half-cleaners of distances `d = 4 * dv, ..., 4` then 2 and 1 over `nv` vectors at
/// `p` (each block of `2 * dv` vectors bitonic on entry, sorted on exit).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn clean(p: *mut i64, nv: usize, mut dv: usize, u1: __m256i, u2: __m256i) {
    unsafe {
        while dv >= 1 {
            for a in 0..nv {
                if a & dv == 0 {
                    let (lo, hi) = minmax(load(p, a), load(p, a | dv));
                    store(p, a, lo);
                    store(p, a | dv, hi);
                }
            }
            dv /= 2;
        }
        for a in 0..nv {
            store(p, a, clean4(load(p, a), u1, u2));
        }
    }
}

/// Mirrored pairs of vectors inside each block of `SV` (the first stage of merging its
/// two sorted halves).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn mirror<const N: usize, const SV: usize>(v: &mut [__m256i; N]) {
    for b in 0..N / SV {
        for la in 0..SV / 2 {
            let (a, m) = (b * SV + la, b * SV + SV - 1 - la);
            // SAFETY: AVX2 in every caller.
            let (lo, hi) = unsafe { minmax(v[a], reverse(v[m])) };
            v[a] = lo;
            v[m] = unsafe { reverse(hi) };
        }
    }
}

/// Half-cleaners between vectors `DV` apart.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn half<const N: usize, const DV: usize>(v: &mut [__m256i; N]) {
    for b in 0..N / (2 * DV) {
        for j in 0..DV {
            let a = b * 2 * DV + j;
            // SAFETY: AVX2 in every caller.
            let (lo, hi) = unsafe { minmax(v[a], v[a + DV]) };
            v[a] = lo;
            v[a + DV] = hi;
        }
    }
}

/// Every vector's own half-cleaners (distances 2 and 1).
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn clean_each<const N: usize>(v: &mut [__m256i; N]) {
    unsafe {
        let (u1, u2) = uppers();
        for x in v.iter_mut() {
            *x = clean4(*x, u1, u2);
        }
    }
}

/// The keys of `N` vectors (a power of two, at most 32), sorted. Every stage is spelt
/// out with constant bounds, so the compiler unrolls it all: no branch depends on the
/// stage, and the keys stay in registers (or spill slots). (Written as loops over the
/// distances, even over constant arrays, the stages were not unrolled: 13% more
/// instructions and twice the mispredicts in the k = 64 leaf pass.)
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sort_regs<const N: usize>(v: &mut [__m256i; N]) {
    unsafe {
        let (u1, u2) = uppers();
        // Each vector: pairs (0 1)(2 3), then mirrors (0 3)(1 2), then (0 1)(2 3).
        for x in v.iter_mut() {
            *x = clean4(within::<0x1B>(within::<0xB1>(*x, u1), u2), u1, u2);
        }
        // Blocks of 2, 4, ... vectors: mirrored pairs, then half-cleaners.
        if N >= 2 {
            mirror::<N, 2>(v);
            clean_each(v);
        }
        if N >= 4 {
            mirror::<N, 4>(v);
            half::<N, 1>(v);
            clean_each(v);
        }
        if N >= 8 {
            mirror::<N, 8>(v);
            half::<N, 2>(v);
            half::<N, 1>(v);
            clean_each(v);
        }
        if N >= 16 {
            mirror::<N, 16>(v);
            half::<N, 4>(v);
            half::<N, 2>(v);
            half::<N, 1>(v);
            clean_each(v);
        }
        if N >= 32 {
            mirror::<N, 32>(v);
            half::<N, 8>(v);
            half::<N, 4>(v);
            half::<N, 2>(v);
            half::<N, 1>(v);
            clean_each(v);
        }
    }
}

/// A bitonic sequence of `N` vectors (at most 32) sorted.
#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn clean_regs<const N: usize>(v: &mut [__m256i; N]) {
    unsafe {
        if N >= 32 {
            half::<N, 16>(v);
        }
        if N >= 16 {
            half::<N, 8>(v);
        }
        if N >= 8 {
            half::<N, 4>(v);
        }
        if N >= 4 {
            half::<N, 2>(v);
        }
        if N >= 2 {
            half::<N, 1>(v);
        }
        clean_each(v);
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn sort_n<const N: usize>(p: *mut i64) {
    unsafe {
        let mut v: [__m256i; N] = std::array::from_fn(|a| load(p, a));
        sort_regs(&mut v);
        for (a, x) in v.iter().enumerate() {
            store(p, a, *x);
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn sort_avx2(x: &mut [i64]) {
    let n = x.len();
    let nv = n / 4;
    let p = x.as_mut_ptr();
    unsafe {
        match nv {
            1 => return sort_n::<1>(p),
            2 => return sort_n::<2>(p),
            4 => return sort_n::<4>(p),
            8 => return sort_n::<8>(p),
            16 => return sort_n::<16>(p),
            32 => return sort_n::<32>(p),
            _ => {}
        }
        let (u1, u2) = uppers();
        for a in 0..nv {
            let v = within::<0xB1>(load(p, a), u1);
            store(p, a, clean4(within::<0x1B>(v, u2), u1, u2));
        }
        // Blocks of s = 8, 16, ... keys (sv vectors): mirrored pairs, then half-cleaners.
        let mut sv = 2;
        while sv <= nv {
            for b in (0..nv).step_by(sv) {
                for la in 0..sv / 2 {
                    let (a, m) = (b + la, b + sv - 1 - la);
                    let (lo, hi) = minmax(load(p, a), reverse(load(p, m)));
                    store(p, a, lo);
                    store(p, m, reverse(hi));
                }
            }
            clean(p, nv, sv / 4, u1, u2);
            sv *= 2;
        }
    }
}

#[cfg(target_arch = "x86_64")]
#[inline(always)]
unsafe fn merge_low_n<const N: usize>(p: *mut i64, h: *const i64) -> __m256i {
    unsafe {
        let mut next = _mm256_set1_epi64x(i64::MAX);
        let mut v: [__m256i; N] = std::array::from_fn(|a| load(p, a));
        for a in 0..N {
            let (lo, hi) = minmax(v[a], reverse(load(h, N - 1 - a)));
            v[a] = lo;
            next = minmax(next, hi).0;
        }
        clean_regs(&mut v);
        for (a, x) in v.iter().enumerate() {
            store(p, a, *x);
        }
        next
    }
}

#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn merge_low_avx2(low: &mut [i64], high: &[i64]) -> i64 {
    let nv = low.len() / 4;
    let (p, h) = (low.as_mut_ptr(), high.as_ptr());
    unsafe {
        let next = match nv {
            1 => merge_low_n::<1>(p, h),
            2 => merge_low_n::<2>(p, h),
            4 => merge_low_n::<4>(p, h),
            8 => merge_low_n::<8>(p, h),
            16 => merge_low_n::<16>(p, h),
            _ => {
                let (u1, u2) = uppers();
                let mut next = _mm256_set1_epi64x(i64::MAX);
                for a in 0..nv {
                    let (lo, hi) = minmax(load(p, a), reverse(load(h, nv - 1 - a)));
                    store(p, a, lo);
                    next = minmax(next, hi).0;
                }
                clean(p, nv, nv / 2, u1, u2);
                next
            }
        };
        let mut m = [0i64; 4];
        _mm256_storeu_si256(m.as_mut_ptr() as *mut __m256i, next);
        m[0].min(m[1]).min(m[2].min(m[3]))
    }
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
        let mut avx = vec![false];
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            avx.push(true);
        }
        for &a in &avx {
            for n in [4usize, 8, 16, 32, 64, 128, 256, 512] {
                for (r, levels) in [3u64, 1000, u64::MAX].into_iter().enumerate() {
                    let mut x = keys(n, 7 + n as u64 + r as u64, levels);
                    if r == 0 {
                        x[n / 2] = i64::MAX;
                    }
                    let mut want = x.clone();
                    want.sort_unstable();
                    sort(&mut x, a);
                    assert_eq!(x, want, "sort n {n} levels {levels} avx2 {a}");
                    for extra in [0usize, 1, n] {
                        let mut hi = keys(n + extra, 99 + n as u64, levels);
                        hi.sort_unstable();
                        let mut all: Vec<i64> = x.iter().chain(&hi).copied().collect();
                        all.sort_unstable();
                        let mut lo = x.clone();
                        let next = merge_low(&mut lo, &hi, a);
                        assert_eq!(lo, all[..n], "merge n {n} extra {extra} avx2 {a}");
                        assert_eq!(next, all[n], "next n {n} extra {extra} avx2 {a}");
                    }
                }
            }
        }
    }
}
