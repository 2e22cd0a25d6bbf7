//! Radius queries on device arrays (`Context::radius_device`): the CUDA back end's passes,
//! per-query outputs in the caller's device arrays, the lists in host memory.

use std::marker::PhantomData;

use super::Context;
use super::device::{CudaDevice, DeviceArray, DeviceOut, DevicePoints};
use crate::backend::cuda::backend::{Cuda, DevField, DevOut, FieldType};
use crate::backend::cuda::catalogue::{field_max, first_bad};
use crate::backend::cuda::device::{DevBuf, HeldMemory};
use crate::backend::cuda::prims::{self, Strided};
use crate::error::{Error, Result, check_len};
use crate::geom::Real;
use crate::input::Domain;
use crate::pipeline::radius::{RadiusFields, RadiusSinks};
use crate::radius::{NeighbourLists, Radius, RadiusParams, RadiusStats, SearchRadius, list_bytes};

/// Per-source fields and per-query radii of a device radius call (f32 or f64 arrays).
#[derive(Clone, Copy, Debug, Default)]
pub struct DeviceRadiusFields<'a> {
    /// Source masses for the density (absent: `particle_mass` each).
    pub masses: Option<DeviceArray<'a>>,
    /// The mass of every source when `masses` is absent (None: 1).
    pub particle_mass: Option<f64>,
    /// The per-source scalar summed and averaged over the neighbours.
    pub scalar: Option<DeviceArray<'a>>,
    /// One radius per query, in the queries' input order (finite, >= 0): e.g. the SPH
    /// smoothing length. Absent: the fixed radius of the parameters.
    pub radii: Option<DeviceArray<'a>>,
}

/// Where a device radius call writes its per-query values (input order; each optional).
#[derive(Default)]
pub struct DeviceRadiusOutput<'a> {
    /// Neighbours within the radius (a self-query counts the point itself).
    pub counts: Option<DeviceOut<'a, i64>>,
    /// Sum of the scalar over the neighbours (0 without any).
    pub scalar_sum: Option<DeviceOut<'a, f64>>,
    /// Its mean (NaN without any neighbour).
    pub scalar_mean: Option<DeviceOut<'a, f64>>,
    /// SPH density (`crate::radius::sph_kernel` over h = the query's radius).
    pub density: Option<DeviceOut<'a, f64>>,
}

impl Context {
    /// Radius query on device arrays, on `device` (`queries = None`: a self-query): the
    /// per-query outputs into the device arrays of `out`, the neighbour lists (when
    /// `params.lists`) in host memory. Results equal [`Context::radius`] on the same
    /// points bit for bit. `params.radius` must be `Fixed`; per-query radii come as
    /// `fields.radii`.
    #[allow(clippy::too_many_arguments)]
    pub fn radius_device<T: Real, const D: usize>(
        &self,
        device: &CudaDevice,
        domain: &Domain<D>,
        sources: &DevicePoints<'_, T, D>,
        queries: Option<&DevicePoints<'_, T, D>>,
        fields: &DeviceRadiusFields<'_>,
        params: &RadiusParams,
        out: &DeviceRadiusOutput<'_>,
    ) -> Result<Radius> {
        let cuda = Cuda { dev: device.dev.clone() };
        let _held = HeldMemory::new(&*cuda.dev);
        let base = cuda.dev.tracker().reset_peak();
        let (ns, nq) = (sources.len(), queries.map_or(sources.len(), |q| q.len()));
        let fixed = check(&cuda, ns, nq, fields, params, out)?;
        let max_radius = match fields.radii {
            Some(r) if nq > 0 => field_max(&cuda.dev, &r.field)?,
            Some(_) => 0.0,
            None => fixed,
        };
        let req = super::radius::list_request(params);
        if ns == 0 || nq == 0 {
            return empty::<T, D>(&cuda, domain, (ns, nq), params, out, max_radius);
        }
        let counts_z: Option<DevBuf<u32>> = if req.is_some() { Some(DevBuf::new(&cuda.dev, nq)?) } else { None };
        let sinks = RadiusSinks::<Cuda> {
            counts: out.counts.as_ref().map(|o| clone_out(&o.out)),
            scalar_sum: out.scalar_sum.as_ref().map(|o| clone_out(&o.out)),
            scalar_mean: out.scalar_mean.as_ref().map(|o| clone_out(&o.out)),
            density: out.density.as_ref().map(|o| clone_out(&o.out)),
            // SAFETY: a buffer of nq u32, written by this call only.
            counts_z: counts_z.as_ref().map(|b| unsafe { DevOut::new(b.ptr(), nq) }),
        };
        // Without masses every source weighs the particle mass (1: the density counts).
        let constant = match (out.density.is_some(), fields.masses, fields.particle_mass) {
            (true, None, Some(m)) if m != 1.0 => Some(prims::fill_f64(&cuda.dev, ns, m)?),
            _ => None,
        };
        let masses = fields.masses.filter(|_| out.density.is_some()).map(|m| m.field).or(constant.as_ref().map(|b| DevField {
            a: Strided { data: b.ptr(), stride: 0 },
            ty: FieldType::F64,
            n: ns,
            _borrow: PhantomData,
        }));
        let rf = RadiusFields::<Cuda> {
            masses,
            scalar: fields.scalar.filter(|_| out.scalar_sum.is_some() || out.scalar_mean.is_some()).map(|s| s.field),
            radii: fields.radii.map(|r| r.field),
            fixed,
            count_limit: params.count_limit,
        };
        let (mut stats, lists) = self
            .pool
            .install(|| crate::pipeline::radius::run(&cuda, domain, &sources.pts, queries.map(|q| &q.pts), &rf, &self.config.tree, &sinks, req))?;
        stats.max_radius = max_radius;
        stats.scratch_bytes = cuda.dev.tracker().peak() - base;
        Ok(Radius { lists, stats })
    }
}

fn clone_out<'a, T>(o: &DevOut<'a, T>) -> DevOut<'a, T> {
    // SAFETY: the caller's array for this call; the stages write disjoint parts of it.
    unsafe { DevOut::new(o.ptr, o.len) }
}

/// The checks of the arguments (lengths, the radius, the fields' values on the device);
/// returns the fixed radius (0 with per-query radii).
fn check(cuda: &Cuda, ns: usize, nq: usize, fields: &DeviceRadiusFields<'_>, params: &RadiusParams, out: &DeviceRadiusOutput<'_>) -> Result<f64> {
    let fixed = match params.radius {
        SearchRadius::Fixed(r) if fields.radii.is_some() => {
            let _ = r;
            0.0
        }
        SearchRadius::Fixed(r) if r.is_finite() && r >= 0.0 => r,
        SearchRadius::Fixed(r) => return Err(Error::InvalidParameter { name: "radius", why: format!("must be finite and >= 0 (got {r})") }),
        SearchRadius::PerQuery(_) => {
            return Err(Error::InvalidParameter { name: "radius", why: "device calls take per-query radii as a device array (fields.radii)".into() });
        }
    };
    let sums = out.scalar_sum.is_some() || out.scalar_mean.is_some() || out.density.is_some();
    if params.count_limit > 0 && (params.lists.is_some() || sums) {
        return Err(Error::InvalidParameter { name: "count_limit", why: "limits counts only: not with lists, sums, means or density".into() });
    }
    if params.list_distances && params.lists.is_none() {
        return Err(Error::InvalidParameter { name: "list_distances", why: "asked for without neighbour lists".into() });
    }
    let lens = [
        ("counts output", out.counts.as_ref().map(|o| o.len())),
        ("scalar_sum output", out.scalar_sum.as_ref().map(|o| o.len())),
        ("scalar_mean output", out.scalar_mean.as_ref().map(|o| o.len())),
        ("density output", out.density.as_ref().map(|o| o.len())),
    ];
    for (what, len) in lens {
        if let Some(len) = len {
            check_len(what, len, nq)?;
        }
    }
    if (out.scalar_sum.is_some() || out.scalar_mean.is_some()) && fields.scalar.is_none() {
        return Err(Error::InvalidParameter { name: "scalar_sum", why: "scalar sums or means requested without a source scalar field".into() });
    }
    let real = |what: &'static str, f: &DeviceArray<'_>, n: usize, mode: u32| -> Result<()> {
        check_len(what, f.len(), n)?;
        if !matches!(f.field.ty, FieldType::F32 | FieldType::F64) {
            return Err(Error::InvalidParameter { name: what, why: "must be f32 or f64".into() });
        }
        if n == 0 {
            return Ok(());
        }
        if let Some(i) = first_bad(&cuda.dev, &f.field, mode)? {
            let size = if f.field.ty == FieldType::F32 { 4 } else { 8 };
            let v = cuda.fetch_f64(&DevField { a: f.field.a.at(i, size), n: 1, ..f.field })?[0];
            return Err(if mode == 3 && v.is_finite() {
                Error::InvalidParameter { name: what, why: format!("radius {i} must be finite and >= 0 (got {v})") }
            } else {
                Error::NonFiniteValue { what, index: i, value: v }
            });
        }
        Ok(())
    };
    for (what, f) in [("masses", fields.masses.filter(|_| out.density.is_some())), ("scalar field", fields.scalar)] {
        if let Some(f) = f {
            real(what, &f, ns, 0)?;
        }
    }
    if let Some(r) = &fields.radii {
        real("radii", r, nq, 3)?;
    }
    Ok(fixed)
}

/// No sources or no queries: every query's empty values (count 0, sums 0, mean NaN) and
/// empty lists; the points are still checked.
fn empty<T: Real, const D: usize>(
    cuda: &Cuda,
    domain: &Domain<D>,
    (ns, nq): (usize, usize),
    params: &RadiusParams,
    out: &DeviceRadiusOutput<'_>,
    max_radius: f64,
) -> Result<Radius> {
    crate::input::validate::check_domain::<T, D>(domain)?;
    let req = super::radius::list_request(params);
    if let Some(r) = req.filter(|r| r.max_bytes > 0 && list_bytes(nq, 0, r.distances) > r.max_bytes) {
        return Err(Error::OutOfMemory { what: "the neighbour lists (over the memory limit)", bytes: list_bytes(nq, 0, r.distances) });
    }
    if nq > 0 {
        // SAFETY (each): the caller's array of nq elements, checked.
        if let Some(o) = &out.counts {
            unsafe { cuda.dev.zero(o.out.ptr, 8 * nq)? };
        }
        for o in [&out.scalar_sum, &out.density].into_iter().flatten() {
            unsafe { cuda.dev.zero(o.out.ptr, 8 * nq)? };
        }
        if let Some(o) = &out.scalar_mean {
            unsafe { prims::fill_f64_at(&cuda.dev, o.out.ptr, nq, f64::NAN)? };
        }
    }
    let lists = req.map(|_| NeighbourLists { offsets: vec![0; nq + 1], indices: Vec::new(), distances: Vec::new() });
    Ok(Radius { lists, stats: RadiusStats { sources: ns, queries: nq, max_radius, ..Default::default() } })
}
