//! Strided caller arrays as ztree inputs. Every check happens before the first read;
//! after that, reads are unaligned loads inside the caller's `count` elements.

use std::marker::PhantomData;

use super::types::*;
use super::{Fail, fail};
use crate::geom::Real;
use crate::input::{ParticleIds, PointSource, ScalarField, VectorField, prefetch_addr};

/// One checked strided array.
#[derive(Clone, Copy)]
pub(crate) struct Strided {
    base: *const u8,
    stride: usize,
    len: usize,
    dtype: i32,
}

// SAFETY: the caller guarantees the array stays valid and unmodified during the call;
// ztree only reads it.
unsafe impl Send for Strided {}
unsafe impl Sync for Strided {}

pub(crate) fn dtype_size(dtype: i32) -> Option<usize> {
    match dtype {
        ZTREE_DTYPE_F32 | ZTREE_DTYPE_I32 | ZTREE_DTYPE_U32 => Some(4),
        ZTREE_DTYPE_F64 | ZTREE_DTYPE_I64 | ZTREE_DTYPE_U64 => Some(8),
        ZTREE_DTYPE_U8 => Some(1),
        _ => None,
    }
}

pub(crate) fn dtype_name(dtype: i32) -> &'static str {
    match dtype {
        ZTREE_DTYPE_F32 => "f32",
        ZTREE_DTYPE_F64 => "f64",
        ZTREE_DTYPE_I32 => "i32",
        ZTREE_DTYPE_I64 => "i64",
        ZTREE_DTYPE_U32 => "u32",
        ZTREE_DTYPE_U64 => "u64",
        ZTREE_DTYPE_U8 => "u8",
        ZTREE_DTYPE_NONE => "none",
        _ => "unknown",
    }
}

impl Strided {
    /// Checks `a` as an array of `len` elements of one of `allowed`; None when absent
    /// (`data == NULL`) and not required.
    pub fn new(a: &ztree_array, len: usize, what: &str, allowed: &[i32], required: bool) -> Result<Option<Self>, Fail> {
        if a.data.is_null() {
            if required && len > 0 {
                return Err(fail(ztree_status::ZTREE_ERR_NULL_POINTER, format!("{what}: data is NULL")));
            }
            return Ok(None);
        }
        if !allowed.contains(&a.dtype) {
            let names: Vec<&str> = allowed.iter().map(|&d| dtype_name(d)).collect();
            return Err(fail(
                ztree_status::ZTREE_ERR_DTYPE,
                format!("{what}: element type {} ({}) is not allowed here (allowed: {})", a.dtype, dtype_name(a.dtype), names.join(", ")),
            ));
        }
        let size = dtype_size(a.dtype).unwrap();
        if a.stride < 0 {
            return Err(fail(ztree_status::ZTREE_ERR_INVALID_ARGUMENT, format!("{what}: negative stride {}", a.stride)));
        }
        let stride = if a.stride == 0 { size } else { a.stride as usize };
        if len > 0 && (len - 1).checked_mul(stride).and_then(|x| x.checked_add(size)).is_none_or(|x| x > isize::MAX as usize) {
            return Err(fail(ztree_status::ZTREE_ERR_SIZE, format!("{what}: {len} elements of stride {stride} overflow the address space")));
        }
        Ok(Some(Self { base: a.data as *const u8, stride, len, dtype: a.dtype }))
    }

    /// An array of no elements.
    pub fn empty(dtype: i32) -> Self {
        Self { base: std::ptr::NonNull::<u64>::dangling().as_ptr().cast(), stride: dtype_size(dtype).unwrap_or(8), len: 0, dtype }
    }

    #[inline(always)]
    fn read<V: Copy>(&self, i: usize) -> V {
        debug_assert!(i < self.len);
        // SAFETY: `new` checked the pointer and that `len` elements of `stride` bytes fit;
        // the caller promises they are readable. Unaligned loads accept any layout.
        unsafe { self.base.add(i * self.stride).cast::<V>().read_unaligned() }
    }

    /// The address and byte stride (for device arrays, which ztree never reads on the host).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub fn raw(&self) -> (u64, i64) {
        (self.base as u64, self.stride as i64)
    }
    pub fn dtype(&self) -> i32 {
        self.dtype
    }

    #[inline(always)]
    pub fn get_f64(&self, i: usize) -> f64 {
        match self.dtype {
            ZTREE_DTYPE_F32 => self.read::<f32>(i) as f64,
            ZTREE_DTYPE_F64 => self.read::<f64>(i),
            ZTREE_DTYPE_I32 => self.read::<i32>(i) as f64,
            ZTREE_DTYPE_I64 => self.read::<i64>(i) as f64,
            ZTREE_DTYPE_U32 => self.read::<u32>(i) as f64,
            _ => self.read::<u64>(i) as f64,
        }
    }
}

/// `D` strided coordinate arrays of element type `T`.
pub(crate) struct StridedPoints<T, const D: usize> {
    pub arrays: [Strided; D],
    _t: PhantomData<T>,
}

impl<T: Real, const D: usize> StridedPoints<T, D> {
    pub fn new(arrays: [Strided; D]) -> Self {
        Self { arrays, _t: PhantomData }
    }
}

impl<T: Real, const D: usize> PointSource<T, D> for StridedPoints<T, D> {
    fn len(&self) -> usize {
        self.arrays[0].len
    }
    #[inline(always)]
    fn prefetch(&self, i: usize) {
        for a in &self.arrays {
            prefetch_addr(a.base.wrapping_add(i.wrapping_mul(a.stride)));
        }
    }
    #[inline(always)]
    fn point(&self, i: usize) -> [T; D] {
        std::array::from_fn(|d| self.arrays[d].read::<T>(i))
    }
}

/// `D` strided arrays of f32 or f64 read as f64 vectors (velocities).
pub(crate) struct StridedVectors<const D: usize>(pub [Strided; D]);

impl<const D: usize> VectorField<D> for StridedVectors<D> {
    fn len(&self) -> usize {
        self.0[0].len
    }
    #[inline(always)]
    fn get(&self, i: usize) -> [f64; D] {
        std::array::from_fn(|d| self.0[d].get_f64(i))
    }
}

impl ScalarField for Strided {
    fn len(&self) -> usize {
        self.len
    }
    fn get(&self, i: usize) -> f64 {
        self.get_f64(i)
    }
}

impl ParticleIds for Strided {
    fn len(&self) -> usize {
        self.len
    }
    #[inline(always)]
    fn id(&self, i: usize) -> i64 {
        match self.dtype {
            ZTREE_DTYPE_I32 => self.read::<i32>(i) as i64,
            ZTREE_DTYPE_I64 => self.read::<i64>(i),
            ZTREE_DTYPE_U32 => self.read::<u32>(i) as i64,
            ZTREE_DTYPE_U8 => self.read::<u8>(i) as i64,
            _ => self.read::<u64>(i) as i64,
        }
    }
    fn first_unrepresentable(&self) -> Option<usize> {
        if self.dtype != ZTREE_DTYPE_U64 {
            return None;
        }
        (0..self.len).find(|&i| self.read::<u64>(i) > i64::MAX as u64)
    }
}

/// A length given as exactly one of an absolute value (`name`) and `b`, relative to the
/// mean spacing, the other 0: FoF's linking length and DBSCAN's ε.
pub(crate) fn length_or_b(name: &str, l: f64, b: f64) -> Result<crate::fof::LinkingLength, Fail> {
    use crate::fof::LinkingLength;
    let bad = |m: String| Err(fail(ztree_status::ZTREE_ERR_INVALID_ARGUMENT, m));
    match (l, b) {
        (l, b) if l.is_nan() || b.is_nan() => bad(format!("{name} ({l}) and b ({b}) must not be NaN")),
        (l, b) if l > 0.0 && l.is_finite() && b == 0.0 => Ok(LinkingLength::Absolute(l)),
        (l, b) if l == 0.0 && b > 0.0 && b.is_finite() => Ok(LinkingLength::Relative(b)),
        (l, b) => bad(format!("give exactly one of {name} (absolute, > 0) and b (relative, > 0), the other 0 (got {name} = {l}, b = {b})")),
    }
}

/// The particle types a job's `type_mask` reads: None for mask 0 (every particle);
/// required otherwise (where there are particles). On device arrays they are only checked
/// here; the call is staged through host memory (`staged`).
pub(crate) fn types_of(p: &ztree_particles, n: usize, mask: u32) -> Result<Option<Strided>, Fail> {
    if mask == 0 {
        return Ok(None);
    }
    if p.types.data.is_null() {
        if n > 0 {
            return Err(fail(ztree_status::ZTREE_ERR_NULL_POINTER, format!("particles.types is NULL, but type_mask ({mask:#x}) selects types")));
        }
        // A rank without particles may pass no types: it still takes the masked path, as
        // every other rank of the call does.
        return Ok(Some(Strided::empty(ZTREE_DTYPE_U8)));
    }
    Strided::new(&p.types, n, "particles.types", &[ZTREE_DTYPE_U8, ZTREE_DTYPE_I32, ZTREE_DTYPE_U32, ZTREE_DTYPE_I64], true)
}

/// The input indices, ascending, of the particles whose type is in `mask`.
pub(crate) fn select(types: &Strided, mask: u32) -> Vec<u32> {
    use rayon::prelude::*;
    (0..ParticleIds::len(types) as u32)
        .into_par_iter()
        .filter(|&i| {
            let t = types.id(i as usize);
            (0..32).contains(&t) && (mask >> t) & 1 == 1
        })
        .collect()
}

/// An optional array's presence for the agreement: with no particles, either is fine.
pub(crate) fn presence<A>(a: &Option<A>, n: usize) -> Option<bool> {
    (n > 0).then_some(a.is_some())
}

/// Every particle has the same mass (`ztree_config::particle_mass`).
pub(crate) struct Constant {
    pub value: f64,
    pub len: usize,
}

impl ScalarField for Constant {
    fn len(&self) -> usize {
        self.len
    }
    #[inline(always)]
    fn get(&self, _: usize) -> f64 {
        self.value
    }
}

pub(crate) fn null(what: &str) -> Fail {
    fail(ztree_status::ZTREE_ERR_NULL_POINTER, format!("{what} is NULL"))
}

/// The particle count, after checking the memory space (CUDA device arrays: where a device
/// is usable, else `ZTREE_ERR_NO_DEVICE` saying why).
pub(crate) fn count_of(p: &ztree_particles, what: &str) -> Result<usize, Fail> {
    if p.memory == ZTREE_MEMORY_CUDA_DEVICE {
        #[cfg(feature = "cuda")]
        super::device::usable(what)?;
        #[cfg(not(feature = "cuda"))]
        return Err(fail(
            ztree_status::ZTREE_ERR_UNSUPPORTED,
            format!("{what}: CUDA device arrays need the CUDA back end, which this build does not have (cargo feature `cuda`); pass host arrays"),
        ));
    }
    count_value(p, what)
}

fn count_value(p: &ztree_particles, what: &str) -> Result<usize, Fail> {
    use ztree_status::*;
    if p.memory != ZTREE_MEMORY_HOST && p.memory != ZTREE_MEMORY_CUDA_DEVICE {
        return Err(fail(ZTREE_ERR_INVALID_ARGUMENT, format!("{what}: unknown memory space {}", p.memory)));
    }
    if p.count < 0 {
        return Err(fail(ZTREE_ERR_SIZE, format!("{what}: negative count {}", p.count)));
    }
    usize::try_from(p.count).map_err(|_| fail(ZTREE_ERR_SIZE, format!("{what}: count {} too large", p.count)))
}

/// The positions' element type (all dimensions alike).
pub(crate) fn pos_dtype(p: &ztree_particles, dims: usize, what: &str) -> Result<i32, Fail> {
    let t = p.pos[0].dtype;
    if t != ZTREE_DTYPE_F32 && t != ZTREE_DTYPE_F64 {
        return Err(fail(ztree_status::ZTREE_ERR_DTYPE, format!("{what}: positions must be f32 or f64 (pos[0].dtype = {t})")));
    }
    for d in 1..dims {
        if p.pos[d].dtype != t {
            return Err(fail(
                ztree_status::ZTREE_ERR_DTYPE,
                format!("{what}: pos[{d}] has element type {} but pos[0] has {t}; all coordinates must share one type", p.pos[d].dtype),
            ));
        }
    }
    Ok(t)
}

pub(crate) fn dtype_of<T: Real>() -> i32 {
    if T::NAME == "f32" { ZTREE_DTYPE_F32 } else { ZTREE_DTYPE_F64 }
}

/// The checked position arrays of `n` particles.
pub(crate) fn positions<T: Real, const D: usize>(p: &ztree_particles, n: usize, what: &str) -> Result<StridedPoints<T, D>, Fail> {
    let mut arrays = [Strided::empty(dtype_of::<T>()); D];
    for (d, a) in arrays.iter_mut().enumerate() {
        // Absent only when there are no particles.
        if let Some(s) = Strided::new(&p.pos[d], n, &format!("{what}.pos[{d}]"), &[dtype_of::<T>()], true)? {
            *a = s;
        }
    }
    Ok(StridedPoints::new(arrays))
}

/// Optional vectors (velocities): f32 or f64 whatever the positions' type, one type for
/// all components; present when `v[0].data` is set. With no particles nothing is read and
/// any pointers are accepted, as for positions (the call's other ranks decide).
pub(crate) fn vectors<const D: usize>(v: &[ztree_array; 3], n: usize, what: &str) -> Result<Option<StridedVectors<D>>, Fail> {
    if v[0].data.is_null() || n == 0 {
        return Ok(None);
    }
    let mut arrays = [Strided::empty(v[0].dtype); D];
    for (d, a) in arrays.iter_mut().enumerate() {
        let s = Strided::new(&v[d], n, &format!("{what}[{d}]"), &[ZTREE_DTYPE_F32, ZTREE_DTYPE_F64], true)?.ok_or_else(|| null(what))?;
        if s.dtype() != v[0].dtype {
            return Err(fail(
                ztree_status::ZTREE_ERR_DTYPE,
                format!("{what}[{d}] has element type {} but {what}[0] has {}; all components must share one type", s.dtype(), v[0].dtype),
            ));
        }
        *a = s;
    }
    Ok(Some(StridedVectors(arrays)))
}

pub(crate) fn domain<const D: usize>(c: &ztree_config) -> crate::input::Domain<D> {
    use crate::input::Domain;
    if c.periodic == 1 { Domain::Periodic(std::array::from_fn(|d| c.box_size[d])) } else { Domain::Open }
}

/// The configuration every rank must share, as agreement words.
pub(crate) fn config_words(c: &ztree_config) -> Vec<u64> {
    let mut w = vec![c.dims as u64, c.periodic as u64, c.particle_mass.to_bits()];
    if c.periodic == 1 {
        w.extend(c.box_size[..c.dims.clamp(0, 3) as usize].iter().map(|x| x.to_bits()));
    }
    w
}
