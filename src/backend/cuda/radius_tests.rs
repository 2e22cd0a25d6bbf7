//! Radius queries on the CUDA back end equal the CPU back end bit for bit: counts (exact
//! and limited), the scalar's sums and means, SPH densities, and the lists in both orders
//! with distances — fixed and per-query radii, self and separate queries, f32 and f64, 2D
//! and 3D, periodic and open, on the adversarial inputs of the pipeline tests.

use std::marker::PhantomData;
use std::sync::Arc;

use super::backend::{Cuda, DevField, DevOut, FieldType};
use super::device::{DevBuf, Device};
use super::pipeline_tests::{OnDevice, cast, inputs, trace};
use super::prims::Strided;
use super::tests::devices;
use crate::backend::cpu::{Cpu, DisjointSlice};
use crate::base::TreeParams;
use crate::geom::Real;
use crate::input::{Domain, ScalarField};
use crate::pipeline::radius::{ListRequest, RadiusFields, RadiusSinks};
use crate::radius::{ListOrder, NeighbourLists};

/// What one case asks for.
#[derive(Clone, Copy, Debug)]
struct Ask {
    /// Per-query radii (between 0 and 2r, some 0) instead of r for all.
    per_query: bool,
    /// Counts stop here (counts only).
    count_limit: u64,
    /// Scalar sums and means, densities with masses.
    sums: bool,
    lists: Option<ListRequest>,
}

fn out<T: crate::base::Elem>(b: &DevBuf<T>) -> DevOut<'_, T> {
    // SAFETY: the buffer is `len` elements, written only by this call.
    unsafe { DevOut::new(b.ptr(), b.len()) }
}

fn field(b: &DevBuf<f64>) -> DevField<'_> {
    DevField { a: Strided { data: b.ptr(), stride: 0 }, ty: FieldType::F64, n: b.len(), _borrow: PhantomData }
}

#[allow(clippy::too_many_arguments)]
fn radius_case<T: Real, const D: usize>(
    dev: &Arc<dyn Device>,
    name: &str,
    domain: &Domain<D>,
    pts: &[[T; D]],
    qry: Option<&[[T; D]]>,
    r: f64,
    ask: Ask,
    params: &TreeParams,
) {
    let (ns, nq) = (pts.len(), qry.map_or(pts.len(), |q| q.len()));
    let masses: Vec<f64> = (0..ns).map(|i| 0.5 + (i % 7) as f64 * 0.25).collect();
    let scalar: Vec<f64> = (0..ns).map(|i| ((i * 37) % 101) as f64 * 0.1 - 3.3).collect();
    let radii: Vec<f64> = (0..nq).map(|i| if i % 11 == 0 { 0.0 } else { r * ((i * 13) % 17) as f64 / 8.0 }).collect();
    let fixed = if ask.per_query { 0.0 } else { r };

    // CPU.
    let (mut c_counts, mut c_cz) = (vec![0i64; nq], vec![0u32; nq]);
    let (mut c_sum, mut c_mean, mut c_rho) = (vec![0.0f64; nq], vec![f64::NAN; nq], vec![0.0f64; nq]);
    let (c_stats, c_lists) = {
        let sinks = RadiusSinks::<Cpu> {
            counts: Some(DisjointSlice::new(&mut c_counts)),
            scalar_sum: ask.sums.then(|| DisjointSlice::new(&mut c_sum)),
            scalar_mean: ask.sums.then(|| DisjointSlice::new(&mut c_mean)),
            density: ask.sums.then(|| DisjointSlice::new(&mut c_rho)),
            counts_z: ask.lists.map(|_| DisjointSlice::new(&mut c_cz)),
        };
        let f = RadiusFields::<Cpu> {
            masses: ask.sums.then_some(&masses as &dyn ScalarField),
            scalar: ask.sums.then_some(&scalar as &dyn ScalarField),
            radii: ask.per_query.then_some(&radii as &dyn ScalarField),
            fixed,
            count_limit: ask.count_limit,
        };
        let q: Option<Vec<[T; D]>> = qry.map(|q| q.to_vec());
        crate::pipeline::radius::run(&Cpu, domain, &pts.to_vec(), q.as_ref(), &f, params, &sinks, ask.lists).unwrap()
    };

    // Device.
    let cuda = Cuda { dev: dev.clone() };
    let src = OnDevice::new(dev, pts);
    let q_dev = qry.map(|q| OnDevice::new(dev, q));
    let (dm, ds, dr) =
        (DevBuf::from_slice(dev, &masses).unwrap(), DevBuf::from_slice(dev, &scalar).unwrap(), DevBuf::from_slice(dev, &radii).unwrap());
    let g_counts: DevBuf<i64> = DevBuf::new(dev, nq).unwrap();
    let g_cz: DevBuf<u32> = DevBuf::new(dev, nq).unwrap();
    let (g_sum, g_mean, g_rho): (DevBuf<f64>, DevBuf<f64>, DevBuf<f64>) =
        (DevBuf::new(dev, nq).unwrap(), DevBuf::new(dev, nq).unwrap(), DevBuf::new(dev, nq).unwrap());
    let sinks = RadiusSinks::<Cuda> {
        counts: Some(out(&g_counts)),
        scalar_sum: ask.sums.then(|| out(&g_sum)),
        scalar_mean: ask.sums.then(|| out(&g_mean)),
        density: ask.sums.then(|| out(&g_rho)),
        counts_z: ask.lists.map(|_| out(&g_cz)),
    };
    let f = RadiusFields::<Cuda> {
        masses: ask.sums.then(|| field(&dm)),
        scalar: ask.sums.then(|| field(&ds)),
        radii: ask.per_query.then(|| field(&dr)),
        fixed,
        count_limit: ask.count_limit,
    };
    let qp = q_dev.as_ref().map(|q| q.points::<D>());
    trace(format_args!("radius {name} {} {D}D {domain:?} n={ns} {ask:?}", T::NAME));
    let (g_stats, g_lists) = crate::pipeline::radius::run(&cuda, domain, &src.points::<D>(), qp.as_ref(), &f, params, &sinks, ask.lists).unwrap();

    let what = format!("{}: radius {name}, {} in {D}D, r = {r}, {domain:?}, {ask:?}", dev.describe(), T::NAME);
    assert_eq!(g_counts.to_vec().unwrap(), c_counts, "{what}: counts");
    assert_eq!(g_stats.pairs, c_stats.pairs, "{what}: pairs");
    assert_eq!(g_stats.nodes_per_plane, c_stats.nodes_per_plane, "{what}: planes");
    if ask.lists.is_some() {
        assert_eq!(g_cz.to_vec().unwrap(), c_cz, "{what}: z-order counts");
    }
    if ask.sums {
        let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
        assert_eq!(bits(&g_sum.to_vec().unwrap()), bits(&c_sum), "{what}: scalar sums");
        assert_eq!(bits(&g_mean.to_vec().unwrap()), bits(&c_mean), "{what}: scalar means");
        assert_eq!(bits(&g_rho.to_vec().unwrap()), bits(&c_rho), "{what}: densities");
        assert!(c_rho.iter().any(|&v| v > 0.0) || nq < 3, "{what}: the densities were computed");
    }
    let lists_of = |l: Option<NeighbourLists>| l.map(|l| (l.offsets, l.indices, l.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>()));
    assert_eq!(lists_of(g_lists), lists_of(c_lists), "{what}: lists");
}

fn asks() -> Vec<Ask> {
    let lists = |order, distances| Some(ListRequest { order, distances, max_bytes: 0 });
    vec![
        Ask { per_query: false, count_limit: 0, sums: false, lists: lists(ListOrder::Distance, true) },
        Ask { per_query: false, count_limit: 5, sums: false, lists: None },
        Ask { per_query: true, count_limit: 0, sums: true, lists: lists(ListOrder::Index, false) },
        Ask { per_query: true, count_limit: 0, sums: false, lists: lists(ListOrder::Distance, false) },
        Ask { per_query: false, count_limit: 0, sums: true, lists: None },
    ]
}

fn all_cases<T: Real, const D: usize>(dev: &Arc<dyn Device>, params: &TreeParams, step: usize) {
    let l = 10.0;
    for (name, pts) in inputs::<D>(l) {
        let pts: Vec<[f64; D]> = pts.into_iter().step_by(step).collect();
        let pts = cast::<T, D>(&pts);
        let inside: Vec<[T; D]> = pts.iter().map(|p| std::array::from_fn(|d| if p[d].to_f64() >= l { T::from_f64(0.0) } else { p[d] })).collect();
        // The lattice's spacing: points at exactly the radius.
        let r = l / 16.0;
        for (i, ask) in asks().into_iter().enumerate() {
            let domain = if i % 2 == 0 { Domain::Periodic([l; D]) } else { Domain::Open };
            radius_case::<T, D>(dev, name, &domain, &inside, None, r, ask, params);
        }
        let q: Vec<[T; D]> =
            inside.iter().take(200).map(|p| std::array::from_fn(|d| T::from_f64((p[d].to_f64() + 0.013 * l).rem_euclid(l) * 0.999))).collect();
        for ask in asks() {
            radius_case::<T, D>(dev, name, &Domain::Periodic([l; D]), &inside, Some(&q), r, ask, params);
        }
    }
}

/// Tiny leaves (several planes on a few hundred points), every output, f32 and f64.
#[test]
fn radius_on_the_device_equals_the_cpu_small() {
    let small = TreeParams { leaf_size: 8, coarsening: 4, ..TreeParams::default() };
    for dev in devices() {
        all_cases::<f64, 3>(&dev, &small, 6);
        all_cases::<f32, 2>(&dev, &small, 6);
    }
}

/// The leaf size the back ends choose, on half of every input.
#[test]
fn radius_on_the_device_equals_the_cpu() {
    for dev in devices() {
        all_cases::<f32, 3>(&dev, &TreeParams::default(), 2);
        all_cases::<f64, 2>(&dev, &TreeParams::default(), 2);
    }
}

/// Sums in chunks: the same bits as in one piece.
#[test]
fn radius_sums_in_chunks_equal_the_cpu() {
    let _knobs = crate::test_knobs::hold();
    super::radius::SUM_CHUNK.store(97, std::sync::atomic::Ordering::Relaxed);
    let l = 10.0;
    for dev in devices() {
        let (name, pts) = inputs::<3>(l).into_iter().nth(1).unwrap();
        let ask = Ask { per_query: true, count_limit: 0, sums: true, lists: None };
        radius_case::<f64, 3>(&dev, name, &Domain::Periodic([l; 3]), &pts, None, l / 16.0, ask, &TreeParams::default());
    }
    super::radius::SUM_CHUNK.store(super::radius::SUM_CHUNK_DEFAULT, std::sync::atomic::Ordering::Relaxed);
}

/// `Context::radius_device` equals `Context::radius` on the same points (separate queries
/// with per-query radii and every output; a self-query with a fixed radius and lists), and
/// refuses bad radii and host radii with the host's errors.
#[cfg(feature = "cuda-emu")]
#[test]
fn radius_device_api_equals_the_host_api() {
    use crate::api::device::{CudaDevice, DeviceArray, DeviceOut, DevicePoints, DeviceType};
    use crate::api::radius_device::{DeviceRadiusFields, DeviceRadiusOutput};
    use crate::radius::{RadiusOutput, RadiusParams, SearchRadius};
    use crate::{Config, Context, Error, SourceFields};
    let dev: Arc<dyn Device> = Arc::new(super::emu::EmuDevice::default());
    let device = CudaDevice::from_device(dev.clone());
    let ctx = Context::new(Config::default()).unwrap();
    let l = 10.0;
    let domain = Domain::Periodic([l; 3]);
    let (_, pts) = inputs::<3>(l).into_iter().nth(1).unwrap();
    let q: Vec<[f64; 3]> = pts.iter().take(700).map(|p| p.map(|c| (c + 0.31) % l)).collect();
    let (ns, nq) = (pts.len(), q.len());
    let masses: Vec<f64> = (0..ns).map(|i| 1.0 + (i % 3) as f64).collect();
    let scalar: Vec<f64> = (0..ns).map(|i| (i % 10) as f64).collect();
    let radii: Vec<f64> = (0..nq).map(|i| 0.2 + (i % 5) as f64 * 0.1).collect();
    let soa = |p: &[[f64; 3]]| -> [Vec<f64>; 3] { std::array::from_fn(|d| p.iter().map(|x| x[d]).collect()) };
    let (sp, qp) = (soa(&pts), soa(&q));
    let up = |v: &Vec<f64>| DevBuf::from_slice(&dev, v).unwrap();
    let (dsp, dqp): ([DevBuf<f64>; 3], [DevBuf<f64>; 3]) = (std::array::from_fn(|d| up(&sp[d])), std::array::from_fn(|d| up(&qp[d])));
    let (dm, ds, dr) = (up(&masses), up(&scalar), up(&radii));
    // SAFETY (every device view below): emulated device buffers of the stated lengths.
    let (src, qry) = unsafe {
        (
            DevicePoints::<f64, 3>::new(std::array::from_fn(|d| dsp[d].ptr() as *const f64), ns, 0),
            DevicePoints::<f64, 3>::new(std::array::from_fn(|d| dqp[d].ptr() as *const f64), nq, 0),
        )
    };
    let arr = |b: &DevBuf<f64>| unsafe { DeviceArray::new(b.ptr() as *const _, DeviceType::F64, b.len(), 0) };
    let fields = DeviceRadiusFields { masses: Some(arr(&dm)), particle_mass: None, scalar: Some(arr(&ds)), radii: Some(arr(&dr)) };
    let outs: [DevBuf<f64>; 3] = std::array::from_fn(|_| DevBuf::new(&dev, nq).unwrap());
    let counts: DevBuf<i64> = DevBuf::new(&dev, nq).unwrap();
    let out = unsafe {
        DeviceRadiusOutput {
            counts: Some(DeviceOut::new(counts.ptr() as *mut i64, nq)),
            scalar_sum: Some(DeviceOut::new(outs[0].ptr() as *mut f64, nq)),
            scalar_mean: Some(DeviceOut::new(outs[1].ptr() as *mut f64, nq)),
            density: Some(DeviceOut::new(outs[2].ptr() as *mut f64, nq)),
        }
    };
    let params = RadiusParams::new(0.0).with_lists(ListOrder::Distance);
    let g = ctx.radius_device(&device, &domain, &src, Some(&qry), &fields, &RadiusParams { list_distances: true, ..params }, &out).unwrap();
    let (mut hc, mut hs, mut hm, mut hd) = (vec![0i64; nq], vec![0.0; nq], vec![0.0; nq], vec![0.0; nq]);
    let hf = SourceFields { masses: Some(&masses as &dyn ScalarField), scalar: Some(&scalar as &dyn ScalarField) };
    let hp = RadiusParams { radius: SearchRadius::PerQuery(&radii), list_distances: true, ..params };
    let mut ho = RadiusOutput { counts: Some(&mut hc), scalar_sum: Some(&mut hs), scalar_mean: Some(&mut hm), density: Some(&mut hd) };
    let h = ctx
        .radius(
            &domain,
            &crate::SoaPoints::new([&sp[0][..], &sp[1], &sp[2]]).unwrap(),
            &crate::SoaPoints::new([&qp[0][..], &qp[1], &qp[2]]).unwrap(),
            &hf,
            &hp,
            &mut ho,
        )
        .unwrap();
    assert_eq!(counts.to_vec().unwrap(), hc, "counts");
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<_>>();
    for (o, hv) in outs.iter().zip([&hs, &hm, &hd]) {
        assert_eq!(bits(&o.to_vec().unwrap()), bits(hv), "sums, means, densities");
    }
    assert_eq!(g.lists, h.lists, "lists");
    assert_eq!((g.stats.pairs, g.stats.max_radius), (h.stats.pairs, h.stats.max_radius), "pairs and the largest radius");
    assert!(g.stats.pairs > 0);

    // Bad radii: the host's errors.
    let bad: DevBuf<f64> = DevBuf::from_slice(&dev, &(0..nq).map(|i| if i == 17 { -0.5 } else { 0.1 }).collect::<Vec<_>>()).unwrap();
    let fb = DeviceRadiusFields { radii: Some(arr(&bad)), ..Default::default() };
    let e = ctx.radius_device(&device, &domain, &src, Some(&qry), &fb, &RadiusParams::new(0.0), &DeviceRadiusOutput::default()).unwrap_err();
    assert!(e.to_string().contains("radius 17"), "{e}");
    let e =
        ctx.radius_device(&device, &domain, &src, None, &DeviceRadiusFields::default(), &RadiusParams::new(f64::NAN), &DeviceRadiusOutput::default());
    assert!(matches!(e, Err(Error::InvalidParameter { name: "radius", .. })), "{e:?}");
    let e = ctx.radius_device(&device, &domain, &src, Some(&qry), &DeviceRadiusFields::default(), &hp, &DeviceRadiusOutput::default());
    assert!(matches!(e, Err(Error::InvalidParameter { name: "radius", .. })), "{e:?}");

    // No queries: empty values; no sources: counts 0 and NaN means.
    let none = unsafe { DevicePoints::<f64, 3>::new([std::ptr::null(); 3], 0, 0) };
    let fs = DeviceRadiusFields { scalar: Some(arr(&ds)), ..Default::default() };
    let fs = DeviceRadiusFields { scalar: fs.scalar.map(|_| unsafe { DeviceArray::new(std::ptr::null(), DeviceType::F64, 0, 0) }), ..fs };
    let r = ctx
        .radius_device(&device, &domain, &none, Some(&qry), &fs, &RadiusParams::new(1.0).with_lists(ListOrder::Index), &out_mean(&outs[1], nq))
        .unwrap();
    assert_eq!(r.lists.unwrap().offsets, vec![0; nq + 1]);
    assert!(outs[1].to_vec().unwrap().iter().all(|v| v.is_nan()));
    fn out_mean(b: &DevBuf<f64>, nq: usize) -> DeviceRadiusOutput<'_> {
        // SAFETY: nq f64 of the emulated device.
        DeviceRadiusOutput { scalar_mean: Some(unsafe { DeviceOut::new(b.ptr() as *mut f64, nq) }), ..Default::default() }
    }
}
