//! The floating-point element types ztree accepts for coordinates (f32, f64).

use std::fmt::Debug;
use std::ops::{Add, Mul, Neg, Sub};

/// A coordinate type. Distances are computed in this precision (docs/DESIGN.md §4): the
/// per-dimension difference, the minimum image, and `(dx*dx + dy*dy) + dz*dz` with no
/// fused multiply-add (Rust never contracts `a*b + c` on its own). Implemented for `f32`
/// and `f64` only (sealed).
pub trait Real:
    sealed::Sealed
    + crate::backend::Elem
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
    const ZERO: Self;
    const INFINITY: Self;
    const NEG_INFINITY: Self;
    const NAME: &'static str;
    /// Whether `Self` is f64 (outputs in f64 can then be written in place).
    const IS_F64: bool;
    /// Largest coordinate magnitude (and periodic box length) accepted: squared distances
    /// of points this far apart, summed over three dimensions, stay finite in `Self`.
    const MAX_COORD: f64;
    fn to_f64(self) -> f64;
    /// Rounds to nearest.
    fn from_f64(v: f64) -> Self;
    fn is_finite(self) -> bool;
    fn abs(self) -> Self;
    fn sqrt(self) -> Self;
    fn half(self) -> Self;
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
}

mod sealed {
    pub trait Sealed {}
    impl Sealed for f32 {}
    impl Sealed for f64 {}
}

macro_rules! impl_real {
    ($t:ty, $name:expr, $max_coord:expr, $le_mask:ident, $le_mask_avx:ident) => {
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
            fn le_mask<const W: usize>(x: &[Self; W], thr: Self) -> u32 {
                $le_mask(x, thr)
            }
            #[inline(always)]
            unsafe fn le_mask_avx<const W: usize>(x: &[Self; W], thr: Self) -> u32 {
                #[cfg(target_arch = "x86_64")]
                // SAFETY: the caller guarantees AVX.
                return unsafe { $le_mask_avx(x, thr) };
                #[cfg(not(target_arch = "x86_64"))]
                return $le_mask(x, thr);
            }
        }
    };
}

/// `le_mask` for f64: two lanes per SSE2 compare.
#[inline(always)]
fn le_mask_f64<const W: usize>(x: &[f64; W], thr: f64) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if W % 2 == 0 {
        use std::arch::x86_64::*;
        let mut m = 0u32;
        // SAFETY: SSE2 is part of x86-64; every load reads two elements inside `x`.
        unsafe {
            let t = _mm_set1_pd(thr);
            for c in 0..W / 2 {
                let v = _mm_loadu_pd(x.as_ptr().add(2 * c));
                m |= (_mm_movemask_pd(_mm_cmple_pd(v, t)) as u32) << (2 * c);
            }
        }
        return m;
    }
    let mut m = 0u32;
    for (i, &v) in x.iter().enumerate() {
        m |= ((v <= thr) as u32) << i;
    }
    m
}

/// `le_mask` for f32: four lanes per SSE compare.
#[inline(always)]
fn le_mask_f32<const W: usize>(x: &[f32; W], thr: f32) -> u32 {
    #[cfg(target_arch = "x86_64")]
    if W % 4 == 0 {
        use std::arch::x86_64::*;
        let mut m = 0u32;
        // SAFETY: SSE is part of x86-64; every load reads four elements inside `x`.
        unsafe {
            let t = _mm_set1_ps(thr);
            for c in 0..W / 4 {
                let v = _mm_loadu_ps(x.as_ptr().add(4 * c));
                m |= (_mm_movemask_ps(_mm_cmple_ps(v, t)) as u32) << (4 * c);
            }
        }
        return m;
    }
    let mut m = 0u32;
    for (i, &v) in x.iter().enumerate() {
        m |= ((v <= thr) as u32) << i;
    }
    m
}
/// `le_mask` for f64 with AVX: four lanes per compare.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn le_mask_f64_avx<const W: usize>(x: &[f64; W], thr: f64) -> u32 {
    use std::arch::x86_64::*;
    if W % 4 != 0 {
        return le_mask_f64(x, thr);
    }
    let t = _mm256_set1_pd(thr);
    let mut m = 0u32;
    for c in 0..W / 4 {
        // SAFETY: every load reads four elements inside `x`.
        let v = unsafe { _mm256_loadu_pd(x.as_ptr().add(4 * c)) };
        m |= (_mm256_movemask_pd(_mm256_cmp_pd::<_CMP_LE_OQ>(v, t)) as u32) << (4 * c);
    }
    m
}

/// `le_mask` for f32 with AVX: eight lanes per compare.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx")]
#[inline]
unsafe fn le_mask_f32_avx<const W: usize>(x: &[f32; W], thr: f32) -> u32 {
    use std::arch::x86_64::*;
    if W % 8 != 0 {
        return le_mask_f32(x, thr);
    }
    let t = _mm256_set1_ps(thr);
    let mut m = 0u32;
    for c in 0..W / 8 {
        // SAFETY: every load reads eight elements inside `x`.
        let v = unsafe { _mm256_loadu_ps(x.as_ptr().add(8 * c)) };
        m |= (_mm256_movemask_ps(_mm256_cmp_ps::<_CMP_LE_OQ>(v, t)) as u32) << (8 * c);
    }
    m
}

// (2 * MAX_COORD)^2 * 3 < MAX: 1.2e37 < 3.4e38 (f32), 1.2e301 < 1.8e308 (f64).
impl_real!(f32, "f32", 1e18, le_mask_f32, le_mask_f32_avx);
impl_real!(f64, "f64", 1e150, le_mask_f64, le_mask_f64_avx);

/// `max` that is cheap and branch-free for non-NaN values (ztree rejects NaN at ingest).
#[inline(always)]
pub(crate) fn fmax<T: Real>(a: T, b: T) -> T {
    if a > b { a } else { b }
}

#[inline(always)]
pub(crate) fn fmin<T: Real>(a: T, b: T) -> T {
    if a < b { a } else { b }
}
