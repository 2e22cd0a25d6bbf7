//! The k <= 16 best candidates of one query in AVX-512 registers: the leaf pass's
//! selection at its AVX-512 level (`TopK` elsewhere).
//!
//! A run's candidates are offered in one call that keeps the 16 distances² (two zmm of
//! f64, one of f32) and z-indices (one zmm) in registers. Each offer is a sorted
//! insertion without branches: its slot is the count of held distances below it (one
//! compare mask per register), the distances behind it move up one lane through
//! `max(previous lane, min(lane, d2))`, the z-indices through a lane shift and two
//! blends. An offer beyond the 16th distance changes nothing, so offers are not
//! re-tested against the shrinking threshold (a mispredicted branch each in `TopK`'s
//! use). Equal distances (rare) take their places by rank, found by a scalar loop.
//!
//! All 16 lanes are kept sorted, also for k < 16: the first k are the selection, the
//! rest the next nearest seen (never read). Lanes not yet filled hold +inf.

use std::any::TypeId;

use crate::geom::Real;

/// Lanes held (entries of the selection and after it).
pub(super) const LANES: usize = 16;

#[repr(C, align(64))]
pub(crate) struct TopK16<T> {
    d: [T; LANES],
    z: [u32; LANES],
    /// Offers so far, up to `LANES`: the filled lanes.
    n: usize,
    k: usize,
}

impl<T: Real> TopK16<T> {
    pub(crate) fn new() -> Self {
        Self { d: [T::INFINITY; LANES], z: [0; LANES], n: 0, k: 1 }
    }

    /// Empties the selection for `1 <= k <= LANES`.
    #[inline(always)]
    pub(crate) fn reset(&mut self, k: usize) {
        assert!((1..=LANES).contains(&k));
        self.d = [T::INFINITY; LANES];
        self.n = 0;
        self.k = k;
    }

    /// Held entries: the first min(offers, k) lanes.
    #[inline(always)]
    fn held(&self) -> usize {
        self.n.min(self.k)
    }

    /// The k-th distance² (+inf before k are held).
    #[inline(always)]
    pub(crate) fn kth(&self) -> T {
        self.d[self.k - 1]
    }

    /// The held distances², in order.
    #[inline(always)]
    pub(crate) fn d2s(&self) -> &[T] {
        &self.d[..self.held()]
    }

    /// The held sources' z-indices, matching `d2s`.
    #[inline(always)]
    pub(crate) fn zs(&self) -> &[u32] {
        &self.z[..self.held()]
    }

    /// Offers the sources `base + i` at distance² `d2[i]` for each bit i of `m`, in
    /// order of i; `rank(z)` breaks ties.
    ///
    /// # Safety
    /// The CPU must have AVX-512F (call it from code compiled for it).
    #[cfg(target_arch = "x86_64")]
    #[inline(always)]
    pub(crate) unsafe fn offer_run(&mut self, d2: &[T], m: u64, base: u32, rank: &impl Fn(u32) -> u32) {
        assert!(m == 0 || (64 - m.leading_zeros()) as usize <= d2.len());
        // T is f64 or f32 (`Real` is sealed): the typed kernels by a cast.
        // SAFETY: the casts reinterpret `T` as the type it is; AVX-512F by the contract.
        unsafe {
            if TypeId::of::<T>() == TypeId::of::<f64>() {
                let me = &mut *(self as *mut Self as *mut TopK16<f64>);
                offer_f64(me, std::slice::from_raw_parts(d2.as_ptr() as *const f64, d2.len()), m, base, rank);
            } else {
                debug_assert!(TypeId::of::<T>() == TypeId::of::<f32>());
                let me = &mut *(self as *mut Self as *mut TopK16<f32>);
                offer_f32(me, std::slice::from_raw_parts(d2.as_ptr() as *const f32, d2.len()), m, base, rank);
            }
        }
    }
}

/// The slot of an offer at `x` with z-index `zx`: `below` held distances are below x
/// (lanes `0..below`); the equal ones after them (lanes flagged in `eq`, contiguous
/// from `below`) come first when their rank is smaller.
#[cfg(target_arch = "x86_64")]
#[inline(never)]
fn slot_among_equal(z: &[u32; LANES], below: usize, eq: u32, zx: u32, rank: &impl Fn(u32) -> u32) -> usize {
    let mut pos = below;
    let rx = rank(zx);
    while pos < LANES && eq & (1 << pos) != 0 && rank(z[pos]) < rx {
        pos += 1;
    }
    pos
}

/// The z-indices after an offer with z-index `zx`. Its slot is the count of lanes whose
/// distance is below its own (`lt`), past those with an equal one (`eq`) and a smaller
/// rank; lanes from the slot on take the previous lane's index, the slot takes zx.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn place_z(z: std::arch::x86_64::__m512i, lt: u32, eq: u32, zx: u32, rank: &impl Fn(u32) -> u32) -> std::arch::x86_64::__m512i {
    use std::arch::x86_64::*;
    let mut pos = lt.count_ones() as usize;
    if eq != 0 {
        let mut zs = [0u32; LANES];
        // SAFETY: an unaligned store of one zmm into a 64-byte array.
        unsafe { _mm512_storeu_si512(zs.as_mut_ptr() as *mut __m512i, z) };
        pos = slot_among_equal(&zs, pos, eq, zx, rank);
    }
    let zp = _mm512_alignr_epi32::<15>(z, z);
    let z = _mm512_mask_blend_epi32(!((1u32 << pos) - 1) as u16, z, zp);
    _mm512_mask_set1_epi32(z, (1u32 << pos) as u16, zx as i32)
}

/// `TopK16::offer_run` for f64.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn offer_f64(t: &mut TopK16<f64>, d2: &[f64], mut m: u64, base: u32, rank: &impl Fn(u32) -> u32) {
    use std::arch::x86_64::*;
    // SAFETY: aligned loads and stores of the 64-byte aligned arrays (two zmm of f64, one
    // of u32); the loop reads d2[i] for bits of m, all inside d2 (checked by the caller).
    unsafe {
        let mut d0 = _mm512_load_pd(t.d.as_ptr());
        let mut d1 = _mm512_load_pd(t.d.as_ptr().add(8));
        let mut z = _mm512_load_si512(t.z.as_ptr() as *const __m512i);
        let neg = _mm512_set1_pd(f64::NEG_INFINITY);
        let mut n = t.n;
        // Lanes holding entries of the selection (ties are looked up only there).
        let sel = (1u32 << t.k) - 1;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            let xs = *d2.get_unchecked(i);
            let x = _mm512_set1_pd(xs);
            let zx = base + i as u32;
            let lt = _mm512_cmp_pd_mask::<_CMP_LT_OQ>(d0, x) as u32 | ((_mm512_cmp_pd_mask::<_CMP_LT_OQ>(d1, x) as u32) << 8);
            let eq =
                (_mm512_cmp_pd_mask::<_CMP_EQ_OQ>(d0, x) as u32 | ((_mm512_cmp_pd_mask::<_CMP_EQ_OQ>(d1, x) as u32) << 8)) & sel & ((1u32 << n) - 1);
            z = place_z(z, lt, eq, zx, rank);
            // Distances: max(previous lane, min(lane, x)).
            let p0 = _mm512_castsi512_pd(_mm512_alignr_epi64::<7>(_mm512_castpd_si512(d0), _mm512_castpd_si512(neg)));
            let p1 = _mm512_castsi512_pd(_mm512_alignr_epi64::<7>(_mm512_castpd_si512(d1), _mm512_castpd_si512(d0)));
            d0 = _mm512_max_pd(p0, _mm512_min_pd(d0, x));
            d1 = _mm512_max_pd(p1, _mm512_min_pd(d1, x));
            n = (n + 1).min(LANES);
        }
        _mm512_store_pd(t.d.as_mut_ptr(), d0);
        _mm512_store_pd(t.d.as_mut_ptr().add(8), d1);
        _mm512_store_si512(t.z.as_mut_ptr() as *mut __m512i, z);
        t.n = n;
    }
}

/// `TopK16::offer_run` for f32.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx512f")]
#[inline]
fn offer_f32(t: &mut TopK16<f32>, d2: &[f32], mut m: u64, base: u32, rank: &impl Fn(u32) -> u32) {
    use std::arch::x86_64::*;
    // SAFETY: as in `offer_f64` (one zmm of f32).
    unsafe {
        let mut d = _mm512_load_ps(t.d.as_ptr());
        let mut z = _mm512_load_si512(t.z.as_ptr() as *const __m512i);
        let neg = _mm512_castps_si512(_mm512_set1_ps(f32::NEG_INFINITY));
        let mut n = t.n;
        let sel = (1u32 << t.k) - 1;
        while m != 0 {
            let i = m.trailing_zeros() as usize;
            m &= m - 1;
            let xs = *d2.get_unchecked(i);
            let x = _mm512_set1_ps(xs);
            let zx = base + i as u32;
            let lt = _mm512_cmp_ps_mask::<_CMP_LT_OQ>(d, x) as u32;
            let eq = (_mm512_cmp_ps_mask::<_CMP_EQ_OQ>(d, x) as u32) & sel & ((1u32 << n) - 1);
            z = place_z(z, lt, eq, zx, rank);
            let p = _mm512_castsi512_ps(_mm512_alignr_epi32::<15>(_mm512_castps_si512(d), neg));
            d = _mm512_max_ps(p, _mm512_min_ps(d, x));
            n = (n + 1).min(LANES);
        }
        _mm512_store_ps(t.d.as_mut_ptr(), d);
        _mm512_store_si512(t.z.as_mut_ptr() as *mut __m512i, z);
        t.n = n;
    }
}

#[cfg(all(test, target_arch = "x86_64"))]
mod tests {
    use super::{LANES, TopK16};
    use crate::geom::Real;

    /// Against a full sort, for every k, with many ties (and ties at the k-th place),
    /// some infinite distances, runs of up to 64 offers with random masks, and offers
    /// beyond the current k-th distance (which must change nothing).
    fn against_sort<T: Real>() {
        if !crate::test_require::require_hardware("AVX-512F CPU (TopK16 runs only there)", "avx512", std::arch::is_x86_feature_detected!("avx512f")) {
            return;
        }
        let mut x = 0x2545_F491_4F6C_DD1Du64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut t = TopK16::<T>::new();
        for k in 1..=LANES {
            for round in 0..60 {
                let n = (next() % 300) as usize;
                let (levels, inf) = if round % 2 == 0 { (40, 29) } else { (1 << 40, u64::MAX) };
                let d: Vec<T> = (0..n).map(|_| if next() % inf == 0 { T::INFINITY } else { T::from_f64((next() % levels) as f64 * 0.125) }).collect();
                // Ranks: a permutation of the z-indices.
                let rank = |z: u32| (z.wrapping_mul(2_654_435_761)) ^ 0x5555;
                let mut offered = Vec::new();
                t.reset(k);
                let mut at = 0;
                while at < n {
                    let len = ((next() % 64) as usize + 1).min(n - at);
                    let m = if round % 3 == 0 { u64::MAX >> (64 - len) } else { next() & (u64::MAX >> (64 - len)) };
                    // SAFETY: AVX-512F checked above.
                    unsafe { t.offer_run(&d[at..at + len], m, at as u32, &rank) };
                    for i in 0..len {
                        if m >> i & 1 == 1 {
                            offered.push((d[at + i], rank((at + i) as u32)));
                        }
                    }
                    at += len;
                    let mut want = offered.clone();
                    want.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
                    want.truncate(k);
                    let got: Vec<(T, u32)> = t.d2s().iter().zip(t.zs()).map(|(&d, &z)| (d, rank(z))).collect();
                    assert_eq!(got, want, "k {k} round {round} at {at}");
                    let kth = if want.len() == k { want[k - 1].0 } else { T::INFINITY };
                    assert_eq!(t.kth(), kth);
                }
            }
        }
    }

    #[test]
    fn keeps_the_k_smallest_by_distance_then_rank_f64() {
        against_sort::<f64>();
    }

    #[test]
    fn keeps_the_k_smallest_by_distance_then_rank_f32() {
        against_sort::<f32>();
    }
}
