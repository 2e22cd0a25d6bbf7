//! `ztree_dbscan` on device arrays (serial contexts): `Context::dbscan_device` on the
//! device the arrays live on; labels and classes in caller or context-owned device arrays,
//! the catalogue on the host.

use super::dbscan::{Checked, hand_over};
use super::device::{Slot, device_array, device_points};
use super::input::domain;
use super::types::*;
use super::{Fail, ztree_context};
use crate::api::device::{CudaDevice, DeviceFofFields, DeviceOut};
use crate::geom::Real;

pub(crate) fn dbscan<T: Real, const D: usize>(
    ctx: &mut ztree_context,
    prm: &ztree_dbscan_params,
    o: &mut ztree_dbscan_output,
    checked: Result<Checked<T, D>, Fail>,
) -> Result<(), Fail> {
    let c = checked?;
    c.bytes.check(ctx.config.memory_limit, "this DBSCAN call")?;
    let n = c.n;
    let dev = ctx.device.device(c.pos.arrays[0].raw().0, prm.cuda_stream)?;
    let labels = ctx.device.output(&dev, Slot::Labels, o.labels.cast(), n * 8)?;
    let class = if c.classes { Some(ctx.device.output(&dev, Slot::Classes, o.point_class.cast(), n)?) } else { None };
    let device = CudaDevice::from_device(dev);
    let fields = DeviceFofFields::<D> {
        velocities: c.vel.as_ref().map(|v| std::array::from_fn(|d| device_array(&v.0[d], n))),
        masses: c.masses.as_ref().map(|m| device_array(m, n)),
        particle_mass: ctx.config.particle_mass,
        ids: c.ids.as_ref().map(|i| device_array(i, n)),
    };
    let pts = device_points(&c.pos, n);
    // SAFETY: `labels` is n i64 and `class` n bytes of device memory (the caller's or the
    // context's, sized above), written only by this call.
    let (lab_out, class_out) = unsafe { (DeviceOut::new(labels as *mut i64, n), class.map(|p| DeviceOut::new(p as *mut i8, n))) };
    let dom = domain::<D>(&ctx.config);
    let (cat, stats) = ctx.core.dbscan_device(&device, &dom, &pts, &fields, &c.params, &lab_out, class_out.as_ref())?;
    hand_over(ctx, o, &cat, &stats, (labels as *mut i64, class.map_or(std::ptr::null_mut(), |p| p as *mut i8)), c.classes, c.params.members, n)
}
