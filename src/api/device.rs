//! Device arrays: kNN and FoF on particles in CUDA device memory, computed on the device
//! the caller names (the CUDA back end), on a serial context or over a communicator. The C
//! face's device calls come here too, so host and device, serial and distributed, share
//! one route below the FFI.

use std::ffi::c_void;
use std::marker::PhantomData;
use std::sync::Arc;

use super::Context;
use crate::backend::cuda::backend::{Cuda, DevField, DevOut, DevPoints, FieldType};
use crate::backend::cuda::device::{Device, HeldMemory};
use crate::backend::cuda::prims::{self, Strided};
use crate::error::{Error, Result, check_len};
use crate::fof::{Catalogue, FofParams, FofStats};
use crate::geom::Real;
use crate::input::Domain;
use crate::knn::{KnnStats, OutputOrder};
use crate::pipeline::KnnSinks;
use crate::pipeline::catalogue::CatalogueRequest;
use crate::pipeline::knn::KnnFields;

/// A CUDA device a context computes on, with the stream its work is queued on. Kernels
/// are compiled for the device by NVRTC the first time they are used in the process.
#[derive(Clone)]
pub struct CudaDevice {
    pub(crate) dev: Arc<dyn Device>,
}

impl std::fmt::Debug for CudaDevice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CudaDevice").field("device", &self.dev.describe()).finish()
    }
}

impl CudaDevice {
    /// The CUDA devices this process can use, or why it can use none (no driver, no
    /// device, no NVRTC).
    pub fn count() -> Result<usize> {
        crate::backend::cuda::driver::device_count()
    }

    /// Device `ordinal`, its work queued on `stream` (null: the default stream). A call
    /// waits for the stream before it returns.
    ///
    /// # Safety
    /// `stream` is null or a `CUstream` (`cudaStream_t`) of that device that outlives the
    /// handle.
    pub unsafe fn open(ordinal: i32, stream: *mut c_void) -> Result<Self> {
        let dev = crate::backend::cuda::driver::CudaDevice::open(ordinal, stream)?;
        Ok(Self { dev: Arc::new(dev) })
    }

    /// Bytes copied from this device to the host and from the host to it by ztree's calls
    /// on this handle so far (what crosses PCIe, or NVLink-C2C): per call, the difference
    /// of two readings.
    pub fn copied_bytes(&self) -> (u64, u64) {
        self.dev.tracker().copied()
    }

    pub(crate) fn from_device(dev: Arc<dyn Device>) -> Self {
        Self { dev }
    }

    fn cuda(&self) -> Cuda {
        Cuda { dev: self.dev.clone() }
    }
}

/// Element types of device arrays.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DeviceType {
    /// 32-bit float.
    F32,
    /// 64-bit float.
    F64,
    /// 32-bit signed integer.
    I32,
    /// 64-bit signed integer.
    I64,
    /// 32-bit unsigned integer.
    U32,
    /// 64-bit unsigned integer.
    U64,
}

/// An array in device memory, read in place: element `i` at byte offset `i * stride` from
/// its start (stride 0: packed).
#[derive(Clone, Copy, Debug)]
pub struct DeviceArray<'a> {
    pub(crate) field: DevField<'a>,
}

impl<'a> DeviceArray<'a> {
    /// # Safety
    /// `ptr .. ptr + (len - 1) * stride + size` is device memory of the device the call
    /// runs on, holding `len` elements of `ty`, unchanged while the array is in use.
    pub unsafe fn new(ptr: *const c_void, ty: DeviceType, len: usize, stride: usize) -> Self {
        let ty = match ty {
            DeviceType::F32 => FieldType::F32,
            DeviceType::F64 => FieldType::F64,
            DeviceType::I32 => FieldType::I32,
            DeviceType::I64 => FieldType::I64,
            DeviceType::U32 => FieldType::U32,
            DeviceType::U64 => FieldType::U64,
        };
        Self { field: DevField { a: Strided { data: ptr as u64, stride: stride as i64 }, ty, n: len, _borrow: PhantomData } }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.field.n
    }

    /// Whether there is no element.
    pub fn is_empty(&self) -> bool {
        self.field.n == 0
    }
}

/// Points in device memory: one strided array per dimension, of `T`.
pub struct DevicePoints<'a, T: Real, const D: usize> {
    pub(crate) pts: DevPoints<'a, T, D>,
}

impl<'a, T: Real, const D: usize> DevicePoints<'a, T, D> {
    /// Coordinate `d` of point `i` at byte offset `i * stride` from `coords[d]` (stride 0:
    /// packed; array of structs: the struct's size).
    ///
    /// # Safety
    /// Each `coords[d]` points to `len` elements of `T` of device memory of the device the
    /// call runs on, `stride` bytes apart, unchanged while the points are in use.
    pub unsafe fn new(coords: [*const T; D], len: usize, stride: usize) -> Self {
        Self {
            pts: DevPoints { pos: std::array::from_fn(|d| Strided { data: coords[d] as u64, stride: stride as i64 }), n: len, _borrow: PhantomData },
        }
    }

    /// Number of points.
    pub fn len(&self) -> usize {
        self.pts.n
    }

    /// Whether there is no point.
    pub fn is_empty(&self) -> bool {
        self.pts.n == 0
    }
}

/// An output array in device memory, written by one call.
pub struct DeviceOut<'a, T> {
    pub(crate) out: DevOut<'a, T>,
}

impl<'a, T> DeviceOut<'a, T> {
    /// # Safety
    /// `ptr` is device memory of `len` elements of `T` of the device the call runs on, not
    /// otherwise used during the call.
    pub unsafe fn new(ptr: *mut T, len: usize) -> Self {
        // SAFETY: the caller's promise.
        Self { out: unsafe { DevOut::new(ptr as u64, len) } }
    }

    /// An array of f64 receiving values computed in `T` (f32 distances into doubles, as the
    /// C API returns them), widened by the kernel that writes them.
    ///
    /// # Safety
    /// `ptr` is device memory of `len` f64 of the device the call runs on, not otherwise
    /// used during the call.
    pub unsafe fn widened(ptr: *mut f64, len: usize) -> Self {
        // SAFETY: the caller's promise.
        Self { out: unsafe { DevOut::new_wide(ptr as u64, len) } }
    }

    /// Number of elements.
    pub fn len(&self) -> usize {
        self.out.len
    }

    /// Whether there is no element.
    pub fn is_empty(&self) -> bool {
        self.out.len == 0
    }
}

/// Per-source fields of a device kNN call (f32 or f64 arrays, in the sources' order).
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceKnnFields<'a> {
    /// Masses for the density (absent: `particle_mass` each).
    pub masses: Option<DeviceArray<'a>>,
    /// The mass of every source when `masses` is absent (1: the density counts neighbours).
    pub particle_mass: Option<f64>,
    /// The per-source scalar averaged over the neighbours (`scalar_mean`).
    pub scalar: Option<DeviceArray<'a>>,
}

/// Where a device kNN call writes (every output optional; rows of `k` per query).
#[derive(Default)]
pub struct DeviceKnnOutput<'a, T> {
    /// Neighbour indices (source input indices, global ones on a communicator), -1 pads.
    pub indices: Option<DeviceOut<'a, i64>>,
    /// Their distances, +inf pads.
    pub distances: Option<DeviceOut<'a, T>>,
    /// The distance to the k-th neighbour.
    pub kth_distance: Option<DeviceOut<'a, T>>,
    /// k (or the neighbours' mass) over the volume of the k-ball.
    pub density: Option<DeviceOut<'a, f64>>,
    /// The mean of `DeviceKnnFields::scalar` over the neighbours.
    pub scalar_mean: Option<DeviceOut<'a, f64>>,
    /// Rows in the queries' input order (default) or in z-order (serial calls only).
    pub order: OutputOrder,
    /// With `OutputOrder::ZOrder`: the input index of the query in each row.
    pub permutation: Option<DeviceOut<'a, i64>>,
}

/// Per-particle fields of a device FoF call, in the particles' order.
#[derive(Clone, Copy, Debug)]
pub struct DeviceFofFields<'a, const D: usize> {
    /// Velocities (f32 or f64 per component): catalogue velocities and dispersions.
    pub velocities: Option<[DeviceArray<'a>; D]>,
    /// Masses (f32 or f64; absent: `particle_mass` each).
    pub masses: Option<DeviceArray<'a>>,
    /// The mass of every particle when `masses` is absent.
    pub particle_mass: f64,
    /// Particle ids (any integer type; u64 at most `i64::MAX`): halo tags are minimum ids.
    pub ids: Option<DeviceArray<'a>>,
}

impl<const D: usize> Default for DeviceFofFields<'_, D> {
    fn default() -> Self {
        Self { velocities: None, masses: None, particle_mass: 1.0, ids: None }
    }
}

impl Context {
    /// kNN on device arrays, on `device`: the k nearest sources of every query (`queries =
    /// None`: a self-query), written into the device outputs of `out`.
    #[allow(clippy::too_many_arguments)]
    pub fn knn_device<T: Real, const D: usize>(
        &self,
        device: &CudaDevice,
        domain: &Domain<D>,
        sources: &DevicePoints<'_, T, D>,
        queries: Option<&DevicePoints<'_, T, D>>,
        fields: &DeviceKnnFields<'_>,
        k: usize,
        out: &DeviceKnnOutput<'_, T>,
    ) -> Result<KnnStats> {
        let cuda = device.cuda();
        let _held = HeldMemory::new(&*cuda.dev);
        let base = cuda.dev.tracker().reset_peak();
        check_knn(&cuda, sources, queries, fields, k, out)?;
        let (sinks, kf, _constant) = knn_parts(&cuda, sources.len(), fields, out)?;
        if sources.is_empty() {
            return Err(Error::NoSources);
        }
        let (mut stats, _) = self
            .pool
            .install(|| crate::pipeline::knn::run(&cuda, domain, &sources.pts, queries.map(|q| &q.pts), &kf, k, &self.config.tree, &sinks))?;
        stats.scratch_bytes = cuda.dev.tracker().peak() - base;
        Ok(stats)
    }

    /// Friends-of-friends on device arrays, on `device`: labels into the device array
    /// `labels` (input order), the catalogue on the host.
    pub fn fof_device<T: Real, const D: usize>(
        &self,
        device: &CudaDevice,
        domain: &Domain<D>,
        points: &DevicePoints<'_, T, D>,
        fields: &DeviceFofFields<'_, D>,
        params: &FofParams,
        labels: &DeviceOut<'_, i64>,
    ) -> Result<(Catalogue<D>, FofStats)> {
        let cuda = device.cuda();
        let _held = HeldMemory::new(&*cuda.dev);
        let n = points.len();
        check_fof(&cuda, domain, n, fields, params, labels)?;
        let l = params.linking_length.resolve(domain, n)?;
        if n == 0 {
            let stats = FofStats { linking_length: l, ..Default::default() };
            return Ok((Catalogue::empty(params.order, fields.velocities.is_some()), stats));
        }
        let req = CatalogueRequest::<Cuda, D> {
            box_len: domain.box_lengths(),
            velocities: fields.velocities.map(|v| v.map(|a| a.field)),
            masses: fields.masses.map(|m| m.field),
            particle_mass: fields.particle_mass,
            ids: fields.ids.map(|i| i.field),
            min_members: params.min_members,
            order: params.order,
            members: params.members,
        };
        let base = cuda.dev.tracker().reset_peak();
        let (cat, mut stats) =
            self.pool.install(|| crate::pipeline::fof::run(&cuda, domain, &points.pts, l, &req, &self.config.tree, &labels.out))?;
        stats.scratch_bytes = cuda.dev.tracker().peak() - base;
        Ok((cat, stats))
    }
}

/// The checks of a device kNN call's arguments (lengths, k, the fields' values, on the
/// device).
pub(crate) fn check_knn<T: Real, const D: usize>(
    cuda: &Cuda,
    sources: &DevicePoints<'_, T, D>,
    queries: Option<&DevicePoints<'_, T, D>>,
    fields: &DeviceKnnFields<'_>,
    k: usize,
    out: &DeviceKnnOutput<'_, T>,
) -> Result<()> {
    if k == 0 {
        return Err(Error::InvalidK(0));
    }
    let (ns, nq) = (sources.len(), queries.map_or(sources.len(), |q| q.len()));
    let rows = nq.checked_mul(k).ok_or(Error::InvalidParameter { name: "k", why: "n_queries * k overflows".into() })?;
    let lens = [
        ("indices output", out.indices.as_ref().map(|o| o.len()), rows),
        ("distances output", out.distances.as_ref().map(|o| o.len()), rows),
        ("kth_distance output", out.kth_distance.as_ref().map(|o| o.len()), nq),
        ("density output", out.density.as_ref().map(|o| o.len()), nq),
        ("scalar_mean output", out.scalar_mean.as_ref().map(|o| o.len()), nq),
        ("permutation output", out.permutation.as_ref().map(|o| o.len()), nq),
    ];
    for (what, got, want) in lens {
        if let Some(got) = got {
            check_len(what, got, want)?;
        }
    }
    if out.scalar_mean.is_some() && fields.scalar.is_none() {
        return Err(Error::InvalidParameter { name: "scalar_mean", why: "requested without a source scalar field".into() });
    }
    for (what, f) in [("masses", fields.masses), ("scalar field", fields.scalar)] {
        if let Some(f) = f {
            check_len(what, f.len(), ns)?;
            if !matches!(f.field.ty, FieldType::F32 | FieldType::F64) {
                return Err(Error::InvalidParameter { name: what, why: "must be f32 or f64".into() });
            }
            if let Some(i) = crate::backend::cuda::catalogue::first_bad(&cuda.dev, &f.field, 0)? {
                let v = cuda.fetch_f64(&DevField { a: f.field.a.at(i, if f.field.ty == FieldType::F32 { 4 } else { 8 }), n: 1, ..f.field })?[0];
                return Err(Error::NonFiniteValue { what, index: i, value: v });
            }
        }
    }
    Ok(())
}

/// The sinks and fields of a device kNN call (and the buffer of a constant particle mass
/// they may read, kept alive by the caller).
#[allow(clippy::type_complexity)]
pub(crate) fn knn_parts<'a, T: Real>(
    cuda: &Cuda,
    ns: usize,
    fields: &DeviceKnnFields<'a>,
    out: &'a DeviceKnnOutput<'a, T>,
) -> Result<(KnnSinks<'a, Cuda, T>, KnnFields<'a, Cuda>, Option<crate::backend::cuda::device::DevBuf<f64>>)> {
    let copy = |o: &Option<DeviceOut<'a, T>>| o.as_ref().map(|o| clone_out(&o.out));
    let sinks = KnnSinks::<Cuda, T> {
        indices: out.indices.as_ref().map(|o| clone_out(&o.out)),
        distances: copy(&out.distances),
        kth: copy(&out.kth_distance),
        density: out.density.as_ref().map(|o| clone_out(&o.out)),
        scalar_mean: out.scalar_mean.as_ref().map(|o| clone_out(&o.out)),
        permutation: out.permutation.as_ref().map(|o| clone_out(&o.out)),
        zorder: out.order == OutputOrder::ZOrder,
        ..Default::default()
    };
    // Without masses every source weighs the particle mass (1: the density counts).
    let constant = match (out.density.is_some(), fields.masses, fields.particle_mass) {
        (true, None, Some(m)) if m != 1.0 => Some(prims::fill_f64(&cuda.dev, ns, m)?),
        _ => None,
    };
    // SAFETY (the view of `constant`): the buffer outlives the call (returned with it).
    let masses = fields.masses.filter(|_| out.density.is_some()).map(|m| m.field).or(constant.as_ref().map(|b| DevField {
        a: Strided { data: b.ptr(), stride: 0 },
        ty: FieldType::F64,
        n: ns,
        _borrow: PhantomData,
    }));
    let kf = KnnFields::<Cuda> { masses, scalar: fields.scalar.map(|s| s.field), kth_hint: None };
    Ok((sinks, kf, constant))
}

fn clone_out<'a, T>(o: &DevOut<'a, T>) -> DevOut<'a, T> {
    // SAFETY: the same array the caller handed over for this call; the stages write
    // disjoint parts of it.
    unsafe { if o.wide { DevOut::new_wide(o.ptr, o.len) } else { DevOut::new(o.ptr, o.len) } }
}

/// The checks of a device FoF call's arguments (the fields' values on the device).
pub(crate) fn check_fof<const D: usize>(
    cuda: &Cuda,
    domain: &Domain<D>,
    n: usize,
    fields: &DeviceFofFields<'_, D>,
    params: &FofParams,
    labels: &DeviceOut<'_, i64>,
) -> Result<()> {
    domain.validate()?;
    params.validate()?;
    check_len("labels output", labels.len(), n)?;
    for (what, f) in
        [("masses", fields.masses), ("ids", fields.ids)].into_iter().chain(fields.velocities.iter().flatten().map(|v| ("velocities", Some(*v))))
    {
        if let Some(f) = f {
            check_len(what, f.len(), n)?;
        }
    }
    let vel = fields.velocities.map(|v| v.map(|a| a.field));
    cuda.validate_fof_fields(vel.as_ref(), fields.masses.map(|m| m.field).as_ref(), fields.particle_mass, fields.ids.map(|i| i.field).as_ref(), n)
}
