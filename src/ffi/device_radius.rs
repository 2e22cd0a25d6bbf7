//! `ztree_radius` on device arrays (serial contexts): `Context::radius_device` on the
//! device the arrays live on, the per-query outputs in caller or context-owned device
//! arrays, the lists copied into context-owned device arrays.

use std::ffi::c_void;

use super::device::{Slot, device_array, device_points, sink};
use super::input::domain;
use super::out::fill_stats;
use super::radius::{Args, Checked};
use super::types::*;
use super::{Fail, ztree_context};
use crate::api::device::CudaDevice;
use crate::api::radius_device::{DeviceRadiusFields, DeviceRadiusOutput};
use crate::backend::cuda::device::{DevPtr, Device};
use crate::geom::Real;
use crate::radius::{RadiusParams, SearchRadius};

/// Copies `v` into the context's device slot `slot`; returns its pointer.
fn upload<V: crate::base::Elem>(st: &mut super::device::DeviceState, dev: &std::sync::Arc<dyn Device>, slot: Slot, v: &[V]) -> Result<DevPtr, Fail> {
    let bytes = size_of_val(v);
    let p = st.output(dev, slot, std::ptr::null_mut(), bytes)?;
    if bytes > 0 {
        // SAFETY: the slot holds at least `bytes`; `V` is plain data.
        unsafe { dev.upload(p, std::slice::from_raw_parts(v.as_ptr().cast::<u8>(), bytes))? };
    }
    Ok(p)
}

pub(crate) fn radius<T: Real, const D: usize>(
    ctx: &mut ztree_context,
    a: &Args,
    o: &mut ztree_radius_output,
    checked: Result<Checked<T, D>, Fail>,
) -> Result<(), Fail> {
    let c = checked?;
    let limit = ctx.config.memory_limit;
    c.bytes.check(limit, "this radius call")?;
    let dev = ctx.device.device(c.sp.arrays[0].raw().0, a.prm.cuda_stream)?;
    let want = |bit: u32| a.prm.outputs & bit != 0;
    let nq = c.nq;
    let st = &mut ctx.device;
    let mut slot = |on: bool, s: Slot, caller: *mut c_void| -> Result<Option<DevPtr>, Fail> {
        if on { st.output(&dev, s, caller, nq * 8).map(Some) } else { Ok(None) }
    };
    let counts = slot(want(ZTREE_RADIUS_COUNTS), Slot::Counts, o.counts.cast())?;
    let sum = slot(want(ZTREE_RADIUS_SCALAR_SUM), Slot::ScalarSum, o.scalar_sum.cast())?;
    let mean = slot(want(ZTREE_RADIUS_SCALAR_MEAN), Slot::ScalarMean, o.scalar_mean.cast())?;
    let density = slot(want(ZTREE_RADIUS_DENSITY), Slot::Density, o.density.cast())?;
    let device = CudaDevice::from_device(dev.clone());
    let fields = DeviceRadiusFields {
        masses: if want(ZTREE_RADIUS_DENSITY) { c.masses.as_ref().map(|m| device_array(m, c.ns)) } else { None },
        particle_mass: Some(ctx.config.particle_mass),
        scalar: c.scalar.as_ref().map(|s| device_array(s, c.ns)),
        radii: c.radii.as_ref().map(|r| device_array(r, nq)),
    };
    let lists = want(ZTREE_RADIUS_LISTS);
    let params = RadiusParams {
        radius: SearchRadius::Fixed(a.prm.radius),
        lists: lists.then_some(c.order),
        list_distances: want(ZTREE_RADIUS_DISTANCES),
        max_list_bytes: if limit > 0 { (limit as u128).saturating_sub(c.bytes.0).max(1) as u64 } else { 0 },
        count_limit: a.prm.count_limit.max(0) as u64,
    };
    // SAFETY: every slot is a caller device array of nq elements or a context buffer sized
    // above, written only by this call.
    let out = unsafe {
        DeviceRadiusOutput { counts: sink(counts, nq), scalar_sum: sink(sum, nq), scalar_mean: sink(mean, nq), density: sink(density, nq) }
    };
    let sp = device_points(&c.sp, c.ns);
    let qp = c.qp.as_ref().map(|q| device_points(q, nq));
    let dom = domain::<D>(&ctx.config);
    let r = ctx.core.radius_device(&device, &dom, &sp, qp.as_ref(), &fields, &params, &out)?;
    if let Some(l) = &r.lists {
        o.offsets = upload(&mut ctx.device, &dev, Slot::ListOffsets, &l.offsets)? as *const i64;
        o.indices = upload(&mut ctx.device, &dev, Slot::ListIndices, &l.indices)? as *const i64;
        o.distances = if want(ZTREE_RADIUS_DISTANCES) {
            upload(&mut ctx.device, &dev, Slot::ListDistances, &l.distances)? as *const f64
        } else {
            std::ptr::null()
        };
    }
    if let Some(p) = counts {
        o.counts = p as *mut i64;
    }
    if let Some(p) = sum {
        o.scalar_sum = p as *mut f64;
    }
    if let Some(p) = mean {
        o.scalar_mean = p as *mut f64;
    }
    if let Some(p) = density {
        o.density = p as *mut f64;
    }
    o.n_queries = nq as i64;
    o.n_pairs = r.stats.pairs as i64;
    ctx.stats = fill_stats(&r.stats.timings, r.stats.scratch_bytes, c.ns, nq, 0, None);
    Ok(())
}
