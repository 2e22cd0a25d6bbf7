//! The floating-point element types ztree accepts for coordinates (f32, f64).

use std::fmt::Debug;
use std::ops::{Add, Mul, Neg, Sub};

/// A coordinate type. Distances are computed in this precision (docs/DESIGN.md §4): the
/// per-dimension difference, the minimum image, and `(dx*dx + dy*dy) + dz*dz` with no
/// fused multiply-add (Rust never contracts `a*b + c` on its own). Implemented for `f32`
/// and `f64` only (sealed).
pub trait Real:
    sealed::Sealed
    + crate::base::Elem
    + Copy
    + Send
    + Sync
    + Debug
    + Default
    + PartialOrd
    + Add<Output = Self>
    + Sub<Output = Self>
    + Mul<Output = Self>
    + Neg<Output = Self>
    + 'static
{
    /// Zero.
    const ZERO: Self;
    /// Positive infinity (the distance of a padded neighbour row).
    const INFINITY: Self;
    /// Negative infinity.
    const NEG_INFINITY: Self;
    /// "f32" or "f64", for messages.
    const NAME: &'static str;
    /// Whether `Self` is f64 (outputs in f64 can then be written in place).
    const IS_F64: bool;
    /// Largest coordinate magnitude (and periodic box length) accepted: squared distances
    /// of points this far apart, summed over three dimensions, stay finite in `Self`.
    const MAX_COORD: f64;
    /// Exact widening (f32) or identity (f64).
    fn to_f64(self) -> f64;
    /// Rounds to nearest.
    fn from_f64(v: f64) -> Self;
    /// Neither NaN nor infinite.
    fn is_finite(self) -> bool;
    /// Absolute value.
    fn abs(self) -> Self;
    /// Correctly rounded square root.
    fn sqrt(self) -> Self;
    /// `self / 2`.
    fn half(self) -> Self;
    /// `fmax` / `fmin` as one scalar instruction (maxsd / minsd on x86-64): never a
    /// branch. For scalar code only: the vectoriser cannot widen them.
    fn max1(self, o: Self) -> Self;
    /// `fmin` as one scalar instruction (see `max1`).
    fn min1(self, o: Self) -> Self;
    /// Bits whose unsigned order is the order of non-negative values (for sort keys).
    fn key_bits(self) -> u64;
    /// Inverse of `key_bits`.
    fn from_key_bits(b: u64) -> Self;
    /// Bit i set when `x[i] <= thr` (compare + move-mask on x86-64, whose SSE2 is baseline).
    fn le_mask<const W: usize>(x: &[Self; W], thr: Self) -> u32;
    /// `le_mask` with 256-bit compares.
    ///
    /// # Safety
    /// The CPU must have AVX (call it from code compiled for AVX2 or above: it inlines
    /// there).
    unsafe fn le_mask_avx<const W: usize>(x: &[Self; W], thr: Self) -> u32;
    /// Bit i set when `x[i] < v`.
    fn lt_mask<const W: usize>(x: &[Self; W], v: Self) -> u32;
    /// `lt_mask` with 256-bit compares.
    ///
    /// # Safety
    /// As `le_mask_avx`.
    unsafe fn lt_mask_avx<const W: usize>(x: &[Self; W], v: Self) -> u32;
    /// For each i, how many entries of `x` are below `x[i]` (equal ones count neither
    /// way), into `out`: one broadcast and a vector compare per entry, the counts kept in
    /// vector lanes.
    ///
    /// # Safety
    /// The CPU must have AVX2 (call it from code compiled for AVX2 or above).
    unsafe fn less_counts_avx<const C: usize>(x: &[Self; C], out: &mut [u64; C]);
    /// Open-space squared distances from `q` to the `W` points `s0 .. s0 + W` of the
    /// columns `pos` into `out` (the same operations as `metric::distances_block_at` with
    /// `Open`), and `le_mask` of them: 256-bit vectors written whole, so the later reads
    /// of `out` forward from the stores (the vectoriser split a block into 4 + 2 + 1 + 1
    /// lanes and read it back across the pieces: a store-forwarding stall per block).
    ///
    /// # Safety
    /// The CPU must have AVX (as `le_mask_avx`); each `pos[d]` must point to at least
    /// `s0 + W` readable elements.
    unsafe fn open_block_avx<const D: usize, const W: usize>(q: &[Self; D], pos: &[*const Self; D], s0: usize, thr: Self, out: &mut [Self; W])
    -> u32;
    /// `open_block_avx` with each difference then shifted by `sh[d]` (the same operations
    /// as `metric::shifted_block_at`): a periodic box's minimum image where it is one
    /// shift for every pair of two boxes.
    ///
    /// # Safety
    /// As `open_block_avx`.
    unsafe fn shifted_block_avx<const D: usize, const W: usize>(
        q: &[Self; D],
        pos: &[*const Self; D],
        s0: usize,
        sh: &[Self; D],
        thr: Self,
        out: &mut [Self; W],
    ) -> u32;
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

macro_rules! impl_real {
    ($t:ty, $name:expr, $max_coord:expr, $cmp_mask:ident, $cmp_mask_avx:ident, $less_counts_avx:ident, $open_block_avx:ident, $set:ident, $get:ident, $max:ident, $min:ident) => {
        impl Real for $t {
            const ZERO: Self = 0.0;
            const MAX_COORD: f64 = $max_coord;
            const INFINITY: Self = <$t>::INFINITY;
            const NEG_INFINITY: Self = <$t>::NEG_INFINITY;
            const NAME: &'static str = $name;
            const IS_F64: bool = std::mem::size_of::<$t>() == 8;
            #[inline(always)]
            fn to_f64(self) -> f64 {
                self as f64
            }
            #[inline(always)]
            fn from_f64(v: f64) -> Self {
                v as $t
            }
            #[inline(always)]
            fn is_finite(self) -> bool {
                <$t>::is_finite(self)
            }
            #[inline(always)]
            fn abs(self) -> Self {
                <$t>::abs(self)
            }
            #[inline(always)]
            fn sqrt(self) -> Self {
                <$t>::sqrt(self)
            }
            #[inline(always)]
            fn half(self) -> Self {
                self * 0.5
            }
            #[inline(always)]
            fn key_bits(self) -> u64 {
                self.to_bits() as u64
            }
            #[inline(always)]
            fn from_key_bits(b: u64) -> Self {
                <$t>::from_bits(b as _)
            }
            #[inline(always)]
            fn max1(self, o: Self) -> Self {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: SSE2 is part of x86-64. (max(a, b) is a when a > b, else b:
                // `fmax`'s value for every non-NaN pair, signed zeros included.)
                return unsafe { std::arch::x86_64::$get(std::arch::x86_64::$max(std::arch::x86_64::$set(self), std::arch::x86_64::$set(o))) };
                #[cfg(not(target_arch = "x86_64"))]
                return if self > o { self } else { o };
            }
            #[inline(always)]
            fn min1(self, o: Self) -> Self {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: as `max1`.
                return unsafe { std::arch::x86_64::$get(std::arch::x86_64::$min(std::arch::x86_64::$set(self), std::arch::x86_64::$set(o))) };
                #[cfg(not(target_arch = "x86_64"))]
                return if self < o { self } else { o };
            }
            #[inline(always)]
            fn le_mask<const W: usize>(x: &[Self; W], thr: Self) -> u32 {
                $cmp_mask::<W, false>(x, thr)
            }
            #[inline(always)]
            unsafe fn le_mask_avx<const W: usize>(x: &[Self; W], thr: Self) -> u32 {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the caller guarantees AVX.
                return unsafe { $cmp_mask_avx::<W, false>(x, thr) };
                #[cfg(not(target_arch = "x86_64"))]
                return $cmp_mask::<W, false>(x, thr);
            }
            #[inline(always)]
            fn lt_mask<const W: usize>(x: &[Self; W], v: Self) -> u32 {
                $cmp_mask::<W, true>(x, v)
            }
            #[inline(always)]
            unsafe fn lt_mask_avx<const W: usize>(x: &[Self; W], v: Self) -> u32 {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the caller guarantees AVX.
                return unsafe { $cmp_mask_avx::<W, true>(x, v) };
                #[cfg(not(target_arch = "x86_64"))]
                return $cmp_mask::<W, true>(x, v);
            }
            #[inline(always)]
            unsafe fn less_counts_avx<const C: usize>(x: &[Self; C], out: &mut [u64; C]) {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the caller guarantees AVX2.
                unsafe {
                    $less_counts_avx(x, out)
                };
                #[cfg(not(target_arch = "x86_64"))]
                less_counts_scalar(x, out);
            }
            #[inline(always)]
            unsafe fn open_block_avx<const D: usize, const W: usize>(
                q: &[Self; D],
                pos: &[*const Self; D],
                s0: usize,
                thr: Self,
                out: &mut [Self; W],
            ) -> u32 {
                // SAFETY: the caller's guarantees.
                unsafe {
                    #[cfg(target_arch = "x86_64")]
                    return $open_block_avx::<D, W, false>(q, pos, s0, &[0.0; D], thr, out);
                    #[cfg(not(target_arch = "x86_64"))]
                    {
                        *out =
                            crate::geom::metric::distances_block_at::<Self, D, W, crate::geom::metric::Open>(&crate::geom::metric::Open, q, pos, s0);
                        return $cmp_mask::<W, false>(out, thr);
                    }
                }
            }
            #[inline(always)]
            unsafe fn shifted_block_avx<const D: usize, const W: usize>(
                q: &[Self; D],
                pos: &[*const Self; D],
                s0: usize,
                sh: &[Self; D],
                thr: Self,
                out: &mut [Self; W],
            ) -> u32 {
                // SAFETY: the caller's guarantees.
                unsafe {
                    #[cfg(target_arch = "x86_64")]
                    return $open_block_avx::<D, W, true>(q, pos, s0, sh, thr, out);
                    #[cfg(not(target_arch = "x86_64"))]
                    {
                        *out = crate::geom::metric::shifted_block_at::<Self, D, W>(q, pos, s0, sh);
                        return $cmp_mask::<W, false>(out, thr);
                    }
                }
            }
        }
    };
}

/// `le_mask`, or with `LT` `lt_mask`, for f64: two lanes per SSE2 compare.
#[inline(always)]
fn cmp_mask_f64<const W: usize, const LT: bool>(x: &[f64; W], thr: f64) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if W.is_multiple_of(2) {
        use std::arch::x86_64::*;
        let mut m = 0u32;
        // SAFETY: SSE2 is part of x86-64; every load reads two elements inside `x`.
        unsafe {
            let t = _mm_set1_pd(thr);
            for c in 0..W / 2 {
                let v = _mm_loadu_pd(x.as_ptr().add(2 * c));
                let c2 = if LT { _mm_cmplt_pd(v, t) } else { _mm_cmple_pd(v, t) };
                m |= (_mm_movemask_pd(c2) as u32) << (2 * c);
            }
        }
        return m;
    }
    let mut m = 0u32;
    for (i, &v) in x.iter().enumerate() {
        m |= ((if LT { v < thr } else { v <= thr }) as u32) << i;
    }
    m
}

/// `le_mask`, or with `LT` `lt_mask`, for f32: four lanes per SSE compare.
#[inline(always)]
fn cmp_mask_f32<const W: usize, const LT: bool>(x: &[f32; W], thr: f32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if W.is_multiple_of(4) {
        use std::arch::x86_64::*;
        let mut m = 0u32;
        // SAFETY: SSE is part of x86-64; every load reads four elements inside `x`.
        unsafe {
            let t = _mm_set1_ps(thr);
            for c in 0..W / 4 {
                let v = _mm_loadu_ps(x.as_ptr().add(4 * c));
                let c2 = if LT { _mm_cmplt_ps(v, t) } else { _mm_cmple_ps(v, t) };
                m |= (_mm_movemask_ps(c2) as u32) << (4 * c);
            }
        }
        return m;
    }
    let mut m = 0u32;
    for (i, &v) in x.iter().enumerate() {
        m |= ((if LT { v < thr } else { v <= thr }) as u32) << i;
    }
    m
}
/// `le_mask`, or with `LT` `lt_mask`, for f64 with AVX: four lanes per compare.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn cmp_mask_f64_avx<const W: usize, const LT: bool>(x: &[f64; W], thr: f64) -> u32 {
    use std::arch::x86_64::*;
    if !W.is_multiple_of(4) {
        return cmp_mask_f64::<W, LT>(x, thr);
    }
    let t = _mm256_set1_pd(thr);
    let mut m = 0u32;
    for c in 0..W / 4 {
        // SAFETY: every load reads four elements inside `x`.
        let v = unsafe { _mm256_loadu_pd(x.as_ptr().add(4 * c)) };
        let c2 = if LT { _mm256_cmp_pd::<_CMP_LT_OQ>(v, t) } else { _mm256_cmp_pd::<_CMP_LE_OQ>(v, t) };
        m |= (_mm256_movemask_pd(c2) as u32) << (4 * c);
    }
    m
}

/// `le_mask`, or with `LT` `lt_mask`, for f32 with AVX: eight lanes per compare.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn cmp_mask_f32_avx<const W: usize, const LT: bool>(x: &[f32; W], thr: f32) -> u32 {
    use std::arch::x86_64::*;
    if !W.is_multiple_of(8) {
        return cmp_mask_f32::<W, LT>(x, thr);
    }
    let t = _mm256_set1_ps(thr);
    let mut m = 0u32;
    for c in 0..W / 8 {
        // SAFETY: every load reads eight elements inside `x`.
        let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * c)) };
        let c2 = if LT { _mm256_cmp_ps::<_CMP_LT_OQ>(v, t) } else { _mm256_cmp_ps::<_CMP_LE_OQ>(v, t) };
        m |= (_mm256_movemask_ps(c2) as u32) << (8 * c);
    }
    m
}

/// `Real::less_counts_avx` one entry at a time (its fallback).
#[inline]
fn less_counts_scalar<T: Real, const C: usize>(x: &[T; C], out: &mut [u64; C]) {
    for i in 0..C {
        out[i] = x.iter().filter(|&&v| v < x[i]).count() as u64;
    }
}

/// `Real::less_counts_avx` for one type: `$lanes` per vector, counts in lanes of the same
/// width (a true compare is all ones: subtracting it adds one).
macro_rules! less_counts_avx {
    ($name:ident, $t:ty, $lanes:expr, $lane:ty, $v:ty, $set1:ident, $loadu:ident, $cmp:ident, $cast:ident, $sub:ident) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx2")]
        #[inline]
        unsafe fn $name<const C: usize>(x: &[$t; C], out: &mut [u64; C]) {
            use std::arch::x86_64::*;
            if C % $lanes != 0 || C > 64 {
                return less_counts_scalar(x, out);
            }
            // (At most 64 entries: 16 vectors; C = 16 f64 keeps all in registers.)
            let mut v: [$v; 16] = [$set1(0.0); 16];
            let mut acc = [_mm256_setzero_si256(); 16];
            let n = C / $lanes;
            for c in 0..n {
                // SAFETY: each load reads `$lanes` entries inside `x`.
                v[c] = unsafe { $loadu(x.as_ptr().add(c * $lanes)) };
            }
            for j in 0..C {
                let b = $set1(x[j]);
                for c in 0..n {
                    // Lane i: x[j] < x[i].
                    let lt = $cast($cmp::<_CMP_LT_OQ>(b, v[c]));
                    acc[c] = $sub(acc[c], lt);
                }
            }
            let mut counts = [0 as $lane; C];
            for c in 0..n {
                // SAFETY: each store writes `$lanes` lanes inside `counts`.
                unsafe { _mm256_storeu_si256(counts.as_mut_ptr().add(c * $lanes) as *mut __m256i, acc[c]) };
            }
            for i in 0..C {
                out[i] = counts[i] as u64;
            }
        }
    };
}

less_counts_avx!(less_counts_f64_avx, f64, 4, u64, __m256d, _mm256_set1_pd, _mm256_loadu_pd, _mm256_cmp_pd, _mm256_castpd_si256, _mm256_sub_epi64);
less_counts_avx!(less_counts_f32_avx, f32, 8, u32, __m256, _mm256_set1_ps, _mm256_loadu_ps, _mm256_cmp_ps, _mm256_castps_si256, _mm256_sub_epi32);

/// `Real::open_block_avx` for one type: `$lanes` per vector, `$v` the vector type.
macro_rules! open_block_avx {
    ($name:ident, $t:ty, $lanes:expr, $v:ty, $set1:ident, $loadu:ident, $storeu:ident, $sub:ident, $mul:ident, $add:ident, $cmp:ident, $movemask:ident, $fallback:ident) => {
        #[cfg(target_arch = "x86_64")]
        #[target_feature(enable = "avx")]
        #[inline]
        /// (`SHIFT`: each difference plus `sh[d]`; else `sh` is not read.)
        unsafe fn $name<const D: usize, const W: usize, const SHIFT: bool>(
            q: &[$t; D],
            pos: &[*const $t; D],
            s0: usize,
            sh: &[$t; D],
            thr: $t,
            out: &mut [$t; W],
        ) -> u32 {
            use std::arch::x86_64::*;
            if W % $lanes != 0 || D == 0 {
                // SAFETY: the caller's guarantees.
                *out = unsafe {
                    if SHIFT {
                        crate::geom::metric::shifted_block_at::<$t, D, W>(q, pos, s0, sh)
                    } else {
                        crate::geom::metric::distances_block_at::<$t, D, W, crate::geom::metric::Open>(&crate::geom::metric::Open, q, pos, s0)
                    }
                };
                return $fallback::<W, false>(out, thr);
            }
            let t = $set1(thr);
            let mut m = 0u32;
            for c in 0..W / $lanes {
                let at = s0 + c * $lanes;
                // SAFETY: each load reads `$lanes` points inside the columns (the caller);
                // the store writes `$lanes` elements inside `out`.
                unsafe {
                    let mut dx = $sub($set1(q[0]), $loadu(pos[0].add(at)));
                    if SHIFT {
                        dx = $add(dx, $set1(sh[0]));
                    }
                    let mut acc: $v = $mul(dx, dx);
                    for d in 1..D {
                        let mut dx = $sub($set1(q[d]), $loadu(pos[d].add(at)));
                        if SHIFT {
                            dx = $add(dx, $set1(sh[d]));
                        }
                        acc = $add(acc, $mul(dx, dx));
                    }
                    $storeu(out.as_mut_ptr().add(c * $lanes), acc);
                    m |= ($movemask($cmp::<_CMP_LE_OQ>(acc, t)) as u32) << (c * $lanes);
                }
            }
            m
        }
    };
}

open_block_avx!(
    open_block_f64_avx,
    f64,
    4,
    __m256d,
    _mm256_set1_pd,
    _mm256_loadu_pd,
    _mm256_storeu_pd,
    _mm256_sub_pd,
    _mm256_mul_pd,
    _mm256_add_pd,
    _mm256_cmp_pd,
    _mm256_movemask_pd,
    cmp_mask_f64
);
open_block_avx!(
    open_block_f32_avx,
    f32,
    8,
    __m256,
    _mm256_set1_ps,
    _mm256_loadu_ps,
    _mm256_storeu_ps,
    _mm256_sub_ps,
    _mm256_mul_ps,
    _mm256_add_ps,
    _mm256_cmp_ps,
    _mm256_movemask_ps,
    cmp_mask_f32
);

// (2 * MAX_COORD)^2 * 3 < MAX: 1.2e37 < 3.4e38 (f32), 1.2e301 < 1.8e308 (f64).
impl_real!(
    f32,
    "f32",
    1e18,
    cmp_mask_f32,
    cmp_mask_f32_avx,
    less_counts_f32_avx,
    open_block_f32_avx,
    _mm_set_ss,
    _mm_cvtss_f32,
    _mm_max_ss,
    _mm_min_ss
);
impl_real!(
    f64,
    "f64",
    1e150,
    cmp_mask_f64,
    cmp_mask_f64_avx,
    less_counts_f64_avx,
    open_block_f64_avx,
    _mm_set_sd,
    _mm_cvtsd_f64,
    _mm_max_sd,
    _mm_min_sd
);

/// `max` for non-NaN values (ztree rejects NaN at ingest), written as a select so that
/// loops over arrays vectorise (`maxpd`). In scalar code LLVM may compile it into a branch;
/// where the operands vary unpredictably, use `Real::max1` / `min1` instead.
#[inline(always)]
pub(crate) fn fmax<T: Real>(a: T, b: T) -> T {
    if a > b { a } else { b }
}

/// `min` as `fmax`.
#[inline(always)]
pub(crate) fn fmin<T: Real>(a: T, b: T) -> T {
    if a < b { a } else { b }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::geom::metric::{Open, distances_block_at};

    /// The explicit AVX block gives the bits and mask of the generic block, in 2D and 3D.
    fn open_block_matches<T: Real, const D: usize>() {
        #[cfg(target_arch = "x86_64")]
        if !std::arch::is_x86_feature_detected!("avx") {
            return;
        }
        let mut r = crate::geom::unit_xorshift(0x2545_F491_4F6C_DD1Du64);
        let cols: [Vec<T>; D] = std::array::from_fn(|_| (0..40).map(|i| T::from_f64(if i % 7 == 0 { 0.5 } else { r() })).collect());
        let ptrs: [*const T; D] = std::array::from_fn(|d| cols[d].as_ptr());
        for s0 in 0..=32 {
            let q: [T; D] = std::array::from_fn(|d| if s0 % 3 == 0 { cols[d][s0] } else { T::from_f64(r()) });
            // SAFETY: every column holds 40 >= s0 + 8 points.
            let want: [T; 8] = unsafe { distances_block_at::<T, D, 8, Open>(&Open, &q, &ptrs, s0) };
            for thr in [T::ZERO, want[3], want[5], T::from_f64(0.2), T::INFINITY] {
                let mut got = [T::INFINITY; 8];
                // SAFETY: AVX checked above; the columns hold s0 + 8 points.
                let m = unsafe { T::open_block_avx(&q, &ptrs, s0, thr, &mut got) };
                assert!(got.iter().zip(&want).all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits()), "{} D {D} s0 {s0}", T::NAME);
                assert_eq!(m, T::le_mask(&want, thr), "{} D {D} s0 {s0}", T::NAME);
                // Shifted: against the generic shifted block.
                let sh: [T; D] = std::array::from_fn(|d| T::from_f64([0.0, -1.0, 1.0][(s0 + d) % 3]));
                // SAFETY: the columns hold s0 + 8 points.
                let want_sh: [T; 8] = unsafe { crate::geom::metric::shifted_block_at::<T, D, 8>(&q, &ptrs, s0, &sh) };
                // SAFETY: AVX checked above; the columns hold s0 + 8 points.
                let m = unsafe { T::shifted_block_avx(&q, &ptrs, s0, &sh, thr, &mut got) };
                assert!(got.iter().zip(&want_sh).all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits()), "{} D {D} s0 {s0} shifted", T::NAME);
                assert_eq!(m, T::le_mask(&want_sh, thr), "{} D {D} s0 {s0} shifted", T::NAME);
            }
        }
    }

    /// `le_mask` and `lt_mask`, baseline and AVX, and `less_counts_avx` against scalar
    /// compares, ties and infinities included, at widths with and without a vector tail.
    fn masks_match<T: Real, const W: usize>() {
        #[cfg(target_arch = "x86_64")]
        let avx = std::arch::is_x86_feature_detected!("avx");
        #[cfg(not(target_arch = "x86_64"))]
        let avx = false;
        let x: [T; W] = std::array::from_fn(|i| if i % 5 == 4 { T::INFINITY } else { T::from_f64((i % 3) as f64 * 0.5) });
        for v in [T::ZERO, T::from_f64(0.5), T::from_f64(0.7), T::INFINITY] {
            let le = (0..W).fold(0u32, |m, i| m | (u32::from(x[i] <= v) << i));
            let lt = (0..W).fold(0u32, |m, i| m | (u32::from(x[i] < v) << i));
            assert_eq!(T::le_mask(&x, v), le, "{} W {W}", T::NAME);
            assert_eq!(T::lt_mask(&x, v), lt, "{} W {W}", T::NAME);
            if avx {
                // SAFETY: AVX checked above.
                unsafe {
                    assert_eq!(T::le_mask_avx(&x, v), le, "{} W {W}", T::NAME);
                    assert_eq!(T::lt_mask_avx(&x, v), lt, "{} W {W}", T::NAME);
                }
            }
        }
        #[cfg(target_arch = "x86_64")]
        if std::arch::is_x86_feature_detected!("avx2") {
            let want: [u64; W] = std::array::from_fn(|i| x.iter().filter(|&&v| v < x[i]).count() as u64);
            let mut got = [u64::MAX; W];
            // SAFETY: AVX2 checked.
            unsafe { T::less_counts_avx(&x, &mut got) };
            assert_eq!(got, want, "{} W {W}", T::NAME);
        }
    }

    #[test]
    fn masks_equal_scalar_compares() {
        masks_match::<f64, 8>();
        masks_match::<f64, 3>();
        masks_match::<f32, 8>();
        masks_match::<f32, 16>();
        masks_match::<f32, 6>();
        masks_match::<f64, 16>();
        masks_match::<f64, 32>();
        masks_match::<f32, 24>();
    }

    #[test]
    fn open_block_avx_equals_generic_block() {
        open_block_matches::<f64, 3>();
        open_block_matches::<f64, 2>();
        open_block_matches::<f32, 3>();
        open_block_matches::<f32, 2>();
    }
}
