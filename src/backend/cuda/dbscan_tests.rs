//! `Context::dbscan_device` equals `Context::dbscan` on the same points: labels, classes,
//! the catalogue and the counts, for min_pts 2 (FoF's groups), 3 and 10, both border rules,
//! with and without velocities, masses and ids, f32 and f64, 2D and 3D, periodic and open,
//! on the adversarial inputs of the pipeline tests.

use std::sync::Arc;

use super::device::{DevBuf, Device};
use super::pipeline_tests::{cast, inputs};
use super::tests::devices;
use crate::api::device::{CudaDevice, DeviceArray, DeviceFofFields, DeviceOut, DevicePoints, DeviceType};
use crate::dbscan::{BorderPoints, DbscanParams, PointClass};
use crate::fof::{CatalogueOrder, FofFields, LinkingLength};
use crate::geom::Real;
use crate::input::{Domain, ParticleIds, ScalarField, VectorField};
use crate::{Config, Context};

fn case<T: Real, const D: usize>(dev: &Arc<dyn Device>, name: &str, domain: &Domain<D>, pts: &[[T; D]], params: &DbscanParams, with_fields: bool) {
    let ctx = Context::new(Config::default()).unwrap();
    let n = pts.len();
    let vel: Vec<[f32; D]> = (0..n).map(|i| std::array::from_fn(|d| ((i * 7 + d * 3) % 13) as f32 * 0.25 - 1.5)).collect();
    let masses: Vec<f64> = (0..n).map(|i| 0.5 + (i % 5) as f64 * 0.5).collect();
    let ids: Vec<u64> = (0..n as u64).map(|i| (i * 7919) % (n as u64).max(1) + 100).collect();
    // Host.
    let hf = if with_fields {
        FofFields::<D> {
            velocities: Some(&vel as &dyn VectorField<D>),
            masses: Some(&masses as &dyn ScalarField),
            particle_mass: 1.0,
            ids: Some(&ids as &dyn ParticleIds),
        }
    } else {
        FofFields { velocities: None, masses: None, particle_mass: 2.5, ids: None }
    };
    let (mut hl, mut hc) = (vec![0i64; n], vec![PointClass::Noise; n]);
    let (hcat, hst) = ctx.dbscan_into(domain, &pts.to_vec(), &hf, params, &mut hl, Some(&mut hc)).unwrap();
    // Device: positions as array of structs, velocities interleaved.
    let aos: Vec<T> = pts.iter().flat_map(|p| p.iter().copied()).collect();
    let dpos = DevBuf::from_slice(dev, &aos).unwrap();
    let flat: Vec<f32> = vel.iter().flat_map(|v| v.iter().copied()).collect();
    let (dvel, dmass, dids) =
        (DevBuf::from_slice(dev, &flat).unwrap(), DevBuf::from_slice(dev, &masses).unwrap(), DevBuf::from_slice(dev, &ids).unwrap());
    let (dl, dc): (DevBuf<i64>, DevBuf<u8>) = (DevBuf::new(dev, n).unwrap(), DevBuf::new(dev, n).unwrap());
    let size = size_of::<T>();
    // SAFETY (each view): emulated device buffers of the stated lengths and strides.
    let (points, fields, labels, class) = unsafe {
        let points = DevicePoints::<T, D>::new(std::array::from_fn(|d| (dpos.ptr() as usize + d * size) as *const T), n, D * size);
        let fields = if with_fields {
            DeviceFofFields::<D> {
                velocities: Some(std::array::from_fn(|d| DeviceArray::new((dvel.ptr() as usize + 4 * d) as *const _, DeviceType::F32, n, 4 * D))),
                masses: Some(DeviceArray::new(dmass.ptr() as *const _, DeviceType::F64, n, 0)),
                particle_mass: 1.0,
                ids: Some(DeviceArray::new(dids.ptr() as *const _, DeviceType::U64, n, 0)),
            }
        } else {
            DeviceFofFields { particle_mass: 2.5, ..Default::default() }
        };
        (points, fields, DeviceOut::new(dl.ptr() as *mut i64, n), DeviceOut::new(dc.ptr() as *mut i8, n))
    };
    let device = CudaDevice::from_device(dev.clone());
    let (gcat, gst) = ctx.dbscan_device(&device, domain, &points, &fields, params, &labels, Some(&class)).unwrap();
    let what = format!("{}: DBSCAN {name}, {} in {D}D, {domain:?}, {params:?}, fields {with_fields}", dev.describe(), T::NAME);
    assert_eq!(dl.to_vec().unwrap(), hl, "{what}: labels");
    assert_eq!(dc.to_vec().unwrap(), hc.iter().map(|&c| c as i8 as u8).collect::<Vec<_>>(), "{what}: classes");
    assert_eq!(gcat, hcat, "{what}: catalogue");
    assert_eq!((gst.core, gst.border, gst.noise, gst.clusters_total), (hst.core, hst.border, hst.noise, hst.clusters_total), "{what}: counts");
}

fn all<T: Real, const D: usize>(dev: &Arc<dyn Device>, step: usize) {
    let l = 10.0;
    for (name, pts) in inputs::<D>(l) {
        let pts: Vec<[f64; D]> = pts.into_iter().step_by(step).collect();
        let pts = cast::<T, D>(&pts);
        let inside: Vec<[T; D]> = pts.iter().map(|p| std::array::from_fn(|d| if p[d].to_f64() >= l { T::from_f64(0.0) } else { p[d] })).collect();
        // ε = the lattice's spacing: points at exactly ε.
        let eps = LinkingLength::Absolute(l / 16.0);
        for (i, (min_pts, border)) in
            [(2, BorderPoints::NearestCore), (3, BorderPoints::NearestCore), (10, BorderPoints::Noise), (4, BorderPoints::NearestCore)]
                .into_iter()
                .enumerate()
        {
            let order = if i % 2 == 0 { CatalogueOrder::Gadget } else { CatalogueOrder::ZOrder };
            let params = DbscanParams { eps, min_pts, min_members: 1 + i % 3, order, members: true, border };
            let domain = if i % 2 == 0 { Domain::Periodic([l; D]) } else { Domain::Open };
            case::<T, D>(dev, name, &domain, &inside, &params, i != 1);
        }
    }
}

#[test]
fn dbscan_on_the_device_equals_the_host() {
    for dev in devices() {
        all::<f64, 3>(&dev, 3);
        all::<f32, 3>(&dev, 2);
        all::<f32, 2>(&dev, 4);
    }
}

/// Device DBSCAN through the checks: nothing, a bad min_pts, an output of the wrong length.
#[test]
fn dbscan_on_the_device_checks_its_arguments() {
    for dev in devices() {
        let ctx = Context::new(Config::default()).unwrap();
        let device = CudaDevice::from_device(dev.clone());
        let labels: DevBuf<i64> = DevBuf::new(&dev, 4).unwrap();
        // SAFETY: emulated device buffers of the stated lengths (none for no points).
        let (none, out) = unsafe { (DevicePoints::<f64, 3>::new([std::ptr::null(); 3], 0, 0), DeviceOut::new(labels.ptr() as *mut i64, 0)) };
        let domain = Domain::Periodic([1.0; 3]);
        let p = DbscanParams { eps: LinkingLength::Absolute(0.1), min_pts: 5, ..Default::default() };
        let (cat, st) = ctx.dbscan_device(&device, &domain, &none, &DeviceFofFields::default(), &p, &out, None).unwrap();
        assert!(cat.is_empty() && st.particles == 0);
        let bad = DbscanParams { min_pts: 0, ..p };
        assert!(ctx.dbscan_device(&device, &domain, &none, &DeviceFofFields::default(), &bad, &out, None).is_err());
        let pts = DevBuf::from_slice(&dev, &[0.1f64, 0.2, 0.3, 0.4, 0.5, 0.6]).unwrap();
        // SAFETY: two points of the emulated device.
        let two =
            unsafe { DevicePoints::<f64, 3>::new([pts.ptr() as *const f64, (pts.ptr() + 8) as *const f64, (pts.ptr() + 16) as *const f64], 2, 24) };
        let e = ctx.dbscan_device(&device, &domain, &two, &DeviceFofFields::default(), &p, &out, None).unwrap_err();
        assert!(e.to_string().contains("labels"), "{e}");
    }
}
