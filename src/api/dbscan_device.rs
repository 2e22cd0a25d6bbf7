//! DBSCAN on device arrays (`Context::dbscan_device`): the neighbour work of
//! `api::dbscan` on the CUDA back end — the core count (a device radius count), the
//! clusters (device FoF over the core points, gathered into scratch columns) and the
//! border points' nearest core points (device radius lists) — then the same bookkeeping
//! and catalogue as the host call (`dbscan::finish`) on the host, from copies of the
//! positions and fields; labels and classes go back into the caller's device arrays.

use std::marker::PhantomData;
use std::time::Instant;

use super::Context;
use super::dbscan::{Found, finish, row_of_tag};
use super::device::{CudaDevice, DeviceFofFields, DeviceOut, DevicePoints};
use super::radius_device::{DeviceRadiusFields, DeviceRadiusOutput};
use crate::backend::cuda::backend::{Cuda, DevField, DevPoints, FieldType};
use crate::backend::cuda::device::{DevBuf, HeldMemory};
use crate::backend::cuda::prims::{self, Strided};
use crate::dbscan::{DbscanCatalogue, DbscanParams, DbscanStats, PointClass};
use crate::error::{Error, Result, check_len};
use crate::fof::{Catalogue, CatalogueOrder, FofFields, FofParams, LinkingLength};
use crate::geom::Real;
use crate::input::{Domain, ParticleIds, ScalarField, VectorField};
use crate::radius::{ListOrder, RadiusParams};

impl Context {
    /// DBSCAN on device arrays, on `device` (see [`crate::dbscan`]): labels (and classes,
    /// as `PointClass` bytes) into the device arrays, the catalogue on the host; equal to
    /// [`Context::dbscan`] on the same points.
    #[allow(clippy::too_many_arguments)]
    pub fn dbscan_device<T: Real, const D: usize>(
        &self,
        device: &CudaDevice,
        domain: &Domain<D>,
        points: &DevicePoints<'_, T, D>,
        fields: &DeviceFofFields<'_, D>,
        params: &DbscanParams,
        labels: &DeviceOut<'_, i64>,
        class: Option<&DeviceOut<'_, i8>>,
    ) -> Result<(DbscanCatalogue<D>, DbscanStats)> {
        let cuda = Cuda { dev: device.dev.clone() };
        let _held = HeldMemory::new(&*cuda.dev);
        let base = cuda.dev.tracker().reset_peak();
        let (cat, mut stats) = run(self, device, &cuda, domain, points, fields, params, labels, class)?;
        stats.scratch_bytes = cuda.dev.tracker().peak() - base;
        Ok((cat, stats))
    }
}

/// Scratch columns holding the selected points (`sel`, ascending input indices) in order.
struct Gathered<T: Real, const D: usize> {
    cols: Vec<DevBuf<T>>,
    n: usize,
}

impl<T: Real, const D: usize> Gathered<T, D> {
    fn new(cuda: &Cuda, pts: &DevPoints<'_, T, D>, sel: &[u32]) -> Result<Self> {
        let perm = DevBuf::from_slice(&cuda.dev, sel)?;
        let mut cols = Vec::with_capacity(D);
        for d in 0..D {
            let out: DevBuf<T> = DevBuf::new(&cuda.dev, sel.len())?;
            prims::gather(&cuda.dev, pts.pos[d], &perm, 0, pts.n, &out)?;
            cols.push(out);
        }
        Ok(Self { cols, n: sel.len() })
    }
    fn points(&self) -> DevicePoints<'_, T, D> {
        let pos = std::array::from_fn(|d| Strided { data: self.cols[d].ptr(), stride: 0 });
        DevicePoints { pts: DevPoints { pos, n: self.n, _borrow: PhantomData } }
    }
}

fn out<T>(b: &DevBuf<T>) -> DeviceOut<'_, T>
where
    T: crate::base::Elem,
{
    // SAFETY: a scratch buffer of `len` elements, written by one call.
    unsafe { DeviceOut::new(b.ptr() as *mut T, b.len()) }
}

#[allow(clippy::too_many_arguments)]
fn run<T: Real, const D: usize>(
    ctx: &Context,
    device: &CudaDevice,
    cuda: &Cuda,
    domain: &Domain<D>,
    points: &DevicePoints<'_, T, D>,
    fields: &DeviceFofFields<'_, D>,
    params: &DbscanParams,
    labels: &DeviceOut<'_, i64>,
    class: Option<&DeviceOut<'_, i8>>,
) -> Result<(DbscanCatalogue<D>, DbscanStats)> {
    domain.validate()?;
    params.validate()?;
    let n = points.len();
    let eps = params.eps.resolve(domain, n)?;
    check_len("labels output", labels.len(), n)?;
    if let Some(c) = class {
        check_len("class output", c.len(), n)?;
    }
    check_fields(cuda, fields, n)?;
    let mut stats = DbscanStats { particles: n, eps, ..Default::default() };
    if n == 0 {
        let rows = Catalogue::empty(params.order, fields.velocities.is_some());
        return Ok((DbscanCatalogue { rows, core_count: vec![], max_radius: vec![] }, stats));
    }
    crate::input::validate::check_domain::<T, D>(domain)?;

    const NONE: u32 = u32::MAX;
    let fof_params =
        |min_members| FofParams { linking_length: LinkingLength::Absolute(eps), min_members, order: CatalogueOrder::ZOrder, members: false };
    let mut comp = vec![NONE; n];
    let mut n_comp = 0usize;
    let mut nearest: Vec<(u32, u32)> = Vec::new();
    let core: Vec<bool>;
    if params.min_pts == 2 {
        // FoF's groups of two or more: their points are the core points.
        let t = Instant::now();
        let lab: DevBuf<i64> = DevBuf::new(&cuda.dev, n)?;
        let (cat, _) = ctx.fof_device(device, domain, points, &DeviceFofFields::default(), &fof_params(2), &out(&lab))?;
        let lab = lab.to_vec()?;
        let row_of = row_of_tag(&cat.tag, n);
        n_comp = cat.len();
        comp.iter_mut().zip(&lab).for_each(|(c, &l)| *c = if l < 0 { NONE } else { row_of[l as usize] });
        core = comp.iter().map(|&c| c != NONE).collect();
        stats.timings.stages.push(("clusters", t.elapsed().as_secs_f64()));
    } else {
        // 1. The core test: a device count with the limit min_pts.
        let t = Instant::now();
        let counts: DevBuf<i64> = DevBuf::new(&cuda.dev, n)?;
        let rp = RadiusParams { count_limit: params.min_pts as u64, ..RadiusParams::new(eps) };
        let ro = DeviceRadiusOutput { counts: Some(out(&counts)), ..Default::default() };
        ctx.radius_device(device, domain, points, None, &DeviceRadiusFields::default(), &rp, &ro)?;
        let counts = counts.to_vec()?;
        core = counts.iter().map(|&c| c as usize >= params.min_pts).collect();
        let sel_core: Vec<u32> = (0..n as u32).filter(|&i| core[i as usize]).collect();
        let sel_other: Vec<u32> = (0..n as u32).filter(|&i| !core[i as usize] && counts[i as usize] > 1).collect();
        stats.timings.stages.push(("core", t.elapsed().as_secs_f64()));

        // 2. Clusters: device FoF over the core points (view index order = input order).
        let t = Instant::now();
        let core_pts = (!sel_core.is_empty()).then(|| Gathered::<T, D>::new(cuda, &points.pts, &sel_core)).transpose()?;
        if let Some(g) = &core_pts {
            let lab: DevBuf<i64> = DevBuf::new(&cuda.dev, g.n)?;
            let (cat, _) = ctx.fof_device(device, domain, &g.points(), &DeviceFofFields::default(), &fof_params(1), &out(&lab))?;
            let row_of = row_of_tag(&cat.tag, g.n);
            n_comp = cat.len();
            for (j, &l) in lab.to_vec()?.iter().enumerate() {
                comp[sel_core[j] as usize] = row_of[l as usize];
            }
        }
        stats.timings.stages.push(("clusters", t.elapsed().as_secs_f64()));

        // 3. Border points: the nearest core point within ε, the first of a nearest-first list.
        let t = Instant::now();
        if let (Some(g), false) = (&core_pts, sel_other.is_empty()) {
            let others = Gathered::<T, D>::new(cuda, &points.pts, &sel_other)?;
            let rp = RadiusParams::new(eps).with_lists(ListOrder::Distance);
            let r =
                ctx.radius_device(device, domain, &g.points(), Some(&others.points()), &DeviceRadiusFields::default(), &rp, &Default::default())?;
            let lists = r.lists.expect("lists were asked for");
            nearest = (0..sel_other.len()).filter_map(|q| lists.of(q).first().map(|&c| (sel_other[q], sel_core[c as usize]))).collect();
        }
        stats.timings.stages.push(("border", t.elapsed().as_secs_f64()));
    }

    // 4. The catalogue on the host, from copies of the positions and fields.
    let t = Instant::now();
    let host = HostFields::fetch(cuda, points, fields)?;
    stats.timings.stages.push(("download", t.elapsed().as_secs_f64()));
    let mut lab = vec![0i64; n];
    let mut cls = vec![PointClass::Noise; n];
    let found = Found { comp, core, n_comp, nearest };
    let cat = finish(&host.pts, &host.fof_fields(fields.particle_mass), params, domain.box_lengths(), found, &mut lab, Some(&mut cls), &mut stats);
    let t = Instant::now();
    // SAFETY: the caller's device arrays of n elements (checked), written only here.
    unsafe {
        cuda.dev.upload(labels.out.ptr, crate::backend::cuda::device::bytes_of(&lab))?;
        if let Some(c) = class {
            let bytes: Vec<u8> = cls.iter().map(|&c| c as i8 as u8).collect();
            cuda.dev.upload(c.out.ptr, &bytes)?;
        }
    }
    stats.timings.stages.push(("upload", t.elapsed().as_secs_f64()));
    Ok((cat, stats))
}

/// The field checks of the host call, on the device.
fn check_fields<const D: usize>(cuda: &Cuda, fields: &DeviceFofFields<'_, D>, n: usize) -> Result<()> {
    let real = |what: &'static str, f: &DevField<'_>| -> Result<()> {
        check_len(what, f.n, n)?;
        if !matches!(f.ty, FieldType::F32 | FieldType::F64) {
            return Err(Error::InvalidParameter { name: what, why: "must be f32 or f64".into() });
        }
        Ok(())
    };
    if let Some(v) = &fields.velocities {
        for a in v {
            real("velocities", &a.field)?;
        }
    }
    if let Some(m) = &fields.masses {
        real("masses", &m.field)?;
    }
    if let Some(i) = &fields.ids {
        check_len("ids", i.len(), n)?;
        if matches!(i.field.ty, FieldType::F32 | FieldType::F64) {
            return Err(Error::InvalidParameter { name: "ids", why: "must be integers".into() });
        }
    }
    let vel = fields.velocities.map(|v| v.map(|a| a.field));
    cuda.validate_fof_fields(vel.as_ref(), fields.masses.as_ref().map(|m| &m.field), fields.particle_mass, fields.ids.as_ref().map(|i| &i.field), n)
}

/// Host copies of the positions and the catalogue's fields.
struct HostFields<T: Real, const D: usize> {
    pts: Vec<[T; D]>,
    vel: Option<[Vec<f64>; D]>,
    masses: Option<Vec<f64>>,
    ids: Option<Vec<i64>>,
}

impl<T: Real, const D: usize> HostFields<T, D> {
    fn fetch(cuda: &Cuda, points: &DevicePoints<'_, T, D>, fields: &DeviceFofFields<'_, D>) -> Result<Self> {
        let pts = cuda.fetch_points(&points.pts)?;
        let vel = match &fields.velocities {
            Some(v) => {
                let mut cols = Vec::with_capacity(D);
                for a in v {
                    cols.push(cuda.fetch_f64(&a.field)?);
                }
                Some(cols.try_into().unwrap_or_else(|_| unreachable!()))
            }
            None => None,
        };
        let masses = fields.masses.as_ref().map(|m| cuda.fetch_f64(&m.field)).transpose()?;
        let ids = fields.ids.as_ref().map(|i| cuda.fetch_ids(&i.field)).transpose()?;
        Ok(Self { pts, vel, masses, ids })
    }

    fn fof_fields(&self, particle_mass: f64) -> FofFields<'_, D> {
        FofFields {
            velocities: self.vel.as_ref().map(|v| v as &dyn VectorField<D>),
            masses: self.masses.as_ref().map(|m| m as &dyn ScalarField),
            particle_mass,
            ids: self.ids.as_ref().map(|i| i as &dyn ParticleIds),
        }
    }
}
