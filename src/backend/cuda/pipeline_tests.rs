//! The whole pipeline on the CUDA back end equals the CPU back end: kNN (self and separate
//! queries, every output) and FoF with its catalogue, on random and adversarial inputs, f32
//! and f64, 2D and 3D, periodic and open — on every device the tests can reach.

use std::marker::PhantomData;
use std::sync::Arc;

use super::backend::{Cuda, DevField, DevOut, DevPoints, FieldType};
use super::device::{DevBuf, Device};
use super::prims::Strided;
use super::tests::devices;
use crate::backend::cpu::{Cpu, DisjointSlice};
use crate::base::TreeParams;
use crate::fof::catalogue::CatalogueOrder;
use crate::geom::Real;
use crate::input::Domain;
use crate::pipeline::KnnSinks;
use crate::pipeline::catalogue::CatalogueRequest;
use crate::pipeline::knn::KnnFields;

struct Lcg(u64);
impl Lcg {
    fn unit(&mut self) -> f64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

/// Point sets that stress the tree and the walks, in a box of side `l`.
pub(super) fn inputs<const D: usize>(l: f64) -> Vec<(&'static str, Vec<[f64; D]>)> {
    let mut r = Lcg(99);
    let uniform: Vec<[f64; D]> = (0..2500).map(|_| std::array::from_fn(|_| r.unit() * l)).collect();
    // Clumps: 80% of points in a few tight balls.
    let centres: Vec<[f64; D]> = (0..6).map(|_| std::array::from_fn(|_| r.unit() * l)).collect();
    let clustered: Vec<[f64; D]> = (0..2500)
        .map(|i| {
            if i % 5 == 0 {
                std::array::from_fn(|_| r.unit() * l)
            } else {
                std::array::from_fn(|d| (centres[i % 6][d] + (r.unit() - 0.5) * 0.02 * l).rem_euclid(l))
            }
        })
        .collect();
    // Duplicates: 40 positions, each many times (runs of identical keys get refined).
    let dups: Vec<[f64; D]> = (0..1500).map(|i| std::array::from_fn(|d| ((i % 40) as f64 * 0.37 + d as f64 * 0.11).rem_euclid(1.0) * l)).collect();
    // A lattice with spacing exactly l / 16, faces included (points at 0).
    let side: usize = if D == 2 { 16 } else { 12 };
    let lattice: Vec<[f64; D]> =
        (0..side.pow(D as u32)).map(|i| std::array::from_fn(|d| ((i / side.pow(d as u32)) % side) as f64 * (l / 16.0))).collect();
    // Points on the box faces: 0 and the largest value below l.
    let below = l * (1.0 - f64::EPSILON);
    let faces: Vec<[f64; D]> = (0..800)
        .map(|i| {
            std::array::from_fn(|d| match (i + d) % 3 {
                0 => 0.0,
                1 => below,
                _ => r.unit() * l,
            })
        })
        .collect();
    // Distinct points closer than a cell of the global key (runs of identical keys that
    // the refinement re-keys over their own box), among uniform ones.
    let side = l * if D == 3 { 2e-7 } else { 1e-10 };
    let tight: Vec<[f64; D]> =
        (0..500)
            .map(|i| {
                if i % 5 == 0 {
                    std::array::from_fn(|_| r.unit() * l)
                } else {
                    std::array::from_fn(|d| 0.3 * l + d as f64 * 0.1 * l + r.unit() * side)
                }
            })
            .collect();
    vec![
        ("uniform", uniform),
        ("clustered", clustered),
        ("duplicates", dups),
        ("lattice", lattice),
        ("faces", faces),
        ("tight", tight),
        ("tiny", vec![[0.5 * l; D], [0.25 * l; D]]),
        ("one", vec![[0.3 * l; D]]),
    ]
}

/// Device copies of points (array of structs, a pad element per point).
pub(super) struct OnDevice<T: Real> {
    buf: DevBuf<T>,
    n: usize,
}
impl<T: Real> OnDevice<T> {
    pub(super) fn new<const D: usize>(dev: &Arc<dyn Device>, pts: &[[T; D]]) -> Self {
        let aos: Vec<T> = pts.iter().flat_map(|p| p.iter().copied().chain(std::iter::once(T::ZERO))).collect();
        Self { buf: DevBuf::from_slice(dev, &aos).unwrap(), n: pts.len() }
    }
    pub(super) fn points<const D: usize>(&self) -> DevPoints<'_, T, D> {
        let stride = ((D + 1) * size_of::<T>()) as i64;
        DevPoints {
            pos: std::array::from_fn(|d| Strided { data: self.buf.ptr() + (d * size_of::<T>()) as u64, stride }),
            n: self.n,
            _borrow: PhantomData,
        }
    }
}

/// ZTREE_TEST_TRACE: each device call's case on stderr as it starts (run with
/// --nocapture; which case a hang or crash on a GPU stopped in).
pub(super) fn trace(what: std::fmt::Arguments<'_>) {
    if std::env::var_os("ZTREE_TEST_TRACE").is_some() {
        eprintln!("device call: {what}");
    }
}

fn out<T: crate::base::Elem>(b: &DevBuf<T>) -> DevOut<'_, T> {
    // SAFETY: the buffer is `len` elements, written only by this call.
    unsafe { DevOut::new(b.ptr(), b.len()) }
}

fn knn_case<T: Real, const D: usize>(dev: &Arc<dyn Device>, name: &str, domain: &Domain<D>, pts: &[[T; D]], qry: Option<&[[T; D]]>, k: usize) {
    // One leaf size for both back ends (their automatic choices differ), so that the
    // planes can be compared too.
    knn_case_with(dev, name, domain, pts, qry, k, &TreeParams { leaf_size: 48, ..TreeParams::default() });
}

fn knn_case_with<T: Real, const D: usize>(
    dev: &Arc<dyn Device>,
    name: &str,
    domain: &Domain<D>,
    pts: &[[T; D]],
    qry: Option<&[[T; D]]>,
    k: usize,
    params: &TreeParams,
) {
    let params = *params;
    let nq = qry.map_or(pts.len(), |q| q.len());
    // CPU.
    let (mut ci, mut cd2, mut ck) = (vec![0i64; nq * k], vec![T::ZERO; nq * k], vec![T::ZERO; nq]);
    let cpu_stats = {
        let sinks = KnnSinks::<Cpu, T> {
            indices: Some(DisjointSlice::new(&mut ci)),
            d2: Some(DisjointSlice::new(&mut cd2)),
            kth_d2: Some(DisjointSlice::new(&mut ck)),
            ..Default::default()
        };
        let f = KnnFields::<Cpu> { masses: None, scalar: None, kth_hint: None };
        let q: Option<&Vec<[T; D]>> = None;
        match qry {
            None => crate::pipeline::knn::run(&Cpu, domain, &pts.to_vec(), q, &f, k, &params, &sinks).unwrap().0,
            Some(qq) => crate::pipeline::knn::run(&Cpu, domain, &pts.to_vec(), Some(&qq.to_vec()), &f, k, &params, &sinks).unwrap().0,
        }
    };
    // Device.
    let cuda = Cuda { dev: dev.clone() };
    let src = OnDevice::new(dev, pts);
    let q_dev = qry.map(|q| OnDevice::new(dev, q));
    let (gi, gd2, gk): (DevBuf<i64>, DevBuf<T>, DevBuf<T>) =
        (DevBuf::new(dev, nq * k).unwrap(), DevBuf::new(dev, nq * k).unwrap(), DevBuf::new(dev, nq).unwrap());
    let sinks = KnnSinks::<Cuda, T> { indices: Some(out(&gi)), d2: Some(out(&gd2)), kth_d2: Some(out(&gk)), ..Default::default() };
    let f = KnnFields::<Cuda> { masses: None, scalar: None, kth_hint: None };
    let qp = q_dev.as_ref().map(|q| q.points::<D>());
    trace(format_args!("kNN {name} {} {D}D k={k} leaf={} {domain:?} n={}", T::NAME, params.leaf_size, pts.len()));
    let dev_stats = crate::pipeline::knn::run(&cuda, domain, &src.points::<D>(), qp.as_ref(), &f, k, &params, &sinks).unwrap().0;
    let what = format!("{}: kNN {name}, {} in {D}D, k = {k}, {domain:?}", dev.describe(), T::NAME);
    assert_eq!(gi.to_vec().unwrap(), ci, "{what}: indices");
    let bits = |v: &[T]| v.iter().map(|x| x.key_bits()).collect::<Vec<_>>();
    assert_eq!(bits(&gd2.to_vec().unwrap()), bits(&cd2), "{what}: squared distances");
    assert_eq!(bits(&gk.to_vec().unwrap()), bits(&ck), "{what}: k-th distance");
    assert_eq!(dev_stats.nodes_per_plane, cpu_stats.nodes_per_plane, "{what}: planes");
}

fn fof_case<T: Real, const D: usize>(dev: &Arc<dyn Device>, name: &str, domain: &Domain<D>, pts: &[[T; D]], l: f64) {
    let params = TreeParams { leaf_size: 48, ..TreeParams::default() };
    let n = pts.len();
    // Velocities, masses and ids as a code holds them: f32 velocities, f64 masses, u64 ids.
    let mut r = Lcg(5);
    let vel: Vec<[f32; D]> = (0..n).map(|_| std::array::from_fn(|_| (r.unit() - 0.5) as f32)).collect();
    let mass: Vec<f64> = (0..n).map(|_| 0.5 + r.unit()).collect();
    let ids: Vec<u64> = (0..n as u64).map(|i| (i * 7919) % (n as u64) + 1000).collect();
    let box_len = match domain {
        Domain::Periodic(l) => Some(*l),
        Domain::Open => None,
    };
    // CPU.
    let mut cl = vec![0i64; n];
    let (ccat, _) = {
        let req = CatalogueRequest::<Cpu, D> {
            box_len,
            velocities: Some(&vel),
            masses: Some(&mass),
            particle_mass: 1.0,
            ids: Some(&ids),
            min_members: 2,
            order: CatalogueOrder::Gadget,
            members: true,
        };
        crate::pipeline::fof::run(&Cpu, domain, &pts.to_vec(), l, &req, &params, &DisjointSlice::new(&mut cl)).unwrap()
    };
    // Device.
    let cuda = Cuda { dev: dev.clone() };
    let src = OnDevice::new(dev, pts);
    let dvel = DevBuf::from_slice(dev, &vel).unwrap();
    let dmass = DevBuf::from_slice(dev, &mass).unwrap();
    let dids = DevBuf::from_slice(dev, &ids).unwrap();
    let field = |data: u64, stride: i64, ty: FieldType| DevField { a: Strided { data, stride }, ty, n, _borrow: PhantomData };
    let req = CatalogueRequest::<Cuda, D> {
        box_len,
        velocities: Some(std::array::from_fn(|d| field(dvel.ptr() + 4 * d as u64, 4 * D as i64, FieldType::F32))),
        masses: Some(field(dmass.ptr(), 0, FieldType::F64)),
        particle_mass: 1.0,
        ids: Some(field(dids.ptr(), 8, FieldType::U64)),
        min_members: 2,
        order: CatalogueOrder::Gadget,
        members: true,
    };
    let labels: DevBuf<i64> = DevBuf::new(dev, n).unwrap();
    trace(format_args!("FoF {name} {} {D}D {domain:?} n={n}", T::NAME));
    let (gcat, _) = crate::pipeline::fof::run(&cuda, domain, &src.points::<D>(), l, &req, &params, &out(&labels)).unwrap();
    let what = format!("{}: FoF {name}, {} in {D}D, l = {l}, {domain:?}", dev.describe(), T::NAME);
    assert_eq!(labels.to_vec().unwrap(), cl, "{what}: labels");
    assert_eq!(gcat, ccat, "{what}: catalogue");
}

pub(super) fn cast<T: Real, const D: usize>(p: &[[f64; D]]) -> Vec<[T; D]> {
    p.iter().map(|x| std::array::from_fn(|d| T::from_f64(x[d]))).collect()
}

fn all_cases<T: Real, const D: usize>(dev: &Arc<dyn Device>) {
    let l = 10.0;
    for (name, pts) in inputs::<D>(l) {
        let pts = cast::<T, D>(&pts);
        // f32 rounding can put a point on the box's top face: keep it inside.
        let inside: Vec<[T; D]> = pts.iter().map(|p| std::array::from_fn(|d| if p[d].to_f64() >= l { T::from_f64(0.0) } else { p[d] })).collect();
        for domain in [Domain::Periodic([l; D]), Domain::Open] {
            for k in [1, 16, 17, 133] {
                knn_case::<T, D>(dev, name, &domain, &inside, None, k);
            }
            // The GPU's own kNN leaf size (`auto_leaf_size`, k >= 2).
            knn_case_with::<T, D>(dev, name, &domain, &inside, None, 16, &TreeParams { leaf_size: 96, ..TreeParams::default() });
            fof_case::<T, D>(dev, name, &domain, &inside, l / 16.0);
        }
        // Separate queries (the first 300 points, shifted) and k beyond the sources.
        let q: Vec<[T; D]> =
            inside.iter().take(300).map(|p| std::array::from_fn(|d| T::from_f64((p[d].to_f64() + 0.013 * l).rem_euclid(l) * 0.999))).collect();
        knn_case::<T, D>(dev, name, &Domain::Periodic([l; D]), &inside, Some(&q), 16);
        knn_case::<T, D>(dev, name, &Domain::Open, &inside[..inside.len().min(40)], Some(&q), 64);
    }
}

/// Every kernel of the pipeline on small inputs (a few hundred points; tiny leaves, so that
/// the trees have several planes): kNN (k = 1, 16, 40; self and separate queries) and FoF
/// with the catalogue, f32 and f64, periodic and open, equal to the CPU. Small enough for
/// the emulator's checked build with the interleaved schedule (`make test-emu-check`).
#[test]
fn small_pipeline_on_the_device_equals_the_cpu() {
    let small = TreeParams { leaf_size: 8, coarsening: 4, ..TreeParams::default() };
    let l = 10.0;
    for dev in devices() {
        for (name, pts) in inputs::<3>(l).into_iter().take(4) {
            let pts: Vec<[f64; 3]> = pts.into_iter().step_by(9).take(300).collect();
            let p32 = cast::<f32, 3>(&pts);
            let inside: Vec<[f32; 3]> = p32.iter().map(|p| std::array::from_fn(|d| if p[d].to_f64() >= l { 0.0 } else { p[d] })).collect();
            for k in [1, 16, 40] {
                knn_case_with::<f64, 3>(&dev, name, &Domain::Periodic([l; 3]), &pts, None, k, &small);
                knn_case_with::<f32, 3>(&dev, name, &Domain::Open, &inside, None, k, &small);
            }
            let q: Vec<[f64; 3]> = pts.iter().take(60).map(|p| p.map(|c| (c + 0.013 * l).rem_euclid(l) * 0.999)).collect();
            knn_case_with::<f64, 3>(&dev, name, &Domain::Periodic([l; 3]), &pts, Some(&q), 16, &small);
            fof_case::<f64, 3>(&dev, name, &Domain::Periodic([l; 3]), &pts, l / 12.0);
            fof_case::<f32, 3>(&dev, name, &Domain::Open, &inside, l / 12.0);
        }
    }
}

/// The kNN kernels' other paths: the node test by bisection (more candidates than it
/// counts pairwise) and through the bound U with few candidates below it, and kept lists
/// walked unsorted (as lists longer than the kernel sorts are; forced by SORTED_MAX), on
/// tiny leaves with large k, every output still equal to the CPU's.
#[test]
fn knn_bisection_and_unsorted_kept_leaves_equal_the_cpu() {
    let tiny = TreeParams { leaf_size: 2, coarsening: 3, ..TreeParams::default() };
    let _knobs = crate::test_knobs::hold();
    for dev in devices() {
        // 0: bisection only; 2: the bound U with at most two candidates below it counted
        // pairwise, bisection below U otherwise; 128: as shipped.
        for pairwise in [0, 2, 128] {
            super::walk::PAIRWISE_MAX.store(pairwise, std::sync::atomic::Ordering::Relaxed);
            // Every kept list walked unsorted in the first round, sorted up to 256 after.
            super::walk::SORTED_MAX.store(if pairwise == 0 { 0 } else { 256 }, std::sync::atomic::Ordering::Relaxed);
            for (name, pts) in inputs::<3>(10.0).into_iter().take(3) {
                let pts = &pts[..800];
                let p32 = cast::<f32, 3>(pts);
                knn_case_with::<f64, 3>(&dev, name, &Domain::Periodic([10.0; 3]), pts, None, 133, &tiny);
                knn_case_with::<f32, 3>(&dev, name, &Domain::Open, &p32, None, 7, &tiny);
            }
        }
        super::walk::PAIRWISE_MAX.store(128, std::sync::atomic::Ordering::Relaxed);
        super::walk::SORTED_MAX.store(256, std::sync::atomic::Ordering::Relaxed);
    }
}

#[test]
fn pipeline_on_the_device_equals_the_cpu_f64_3d() {
    for dev in devices() {
        all_cases::<f64, 3>(&dev);
    }
}

#[test]
fn pipeline_on_the_device_equals_the_cpu_f32_3d() {
    for dev in devices() {
        all_cases::<f32, 3>(&dev);
    }
}

#[test]
fn pipeline_on_the_device_equals_the_cpu_f64_2d() {
    for dev in devices() {
        all_cases::<f64, 2>(&dev);
    }
}

#[test]
fn pipeline_on_the_device_equals_the_cpu_f32_2d() {
    for dev in devices() {
        all_cases::<f32, 2>(&dev);
    }
}

/// FoF on the GADGET-4 snapshot (../shared/data/gadget4-64-z1) through the device
/// pipeline: exactly GADGET-4's groups (the same id sets, in its catalogue order up to
/// ties), and the CPU back end's catalogue and labels bit for bit.
#[test]
fn gadget4_groups_on_the_device() {
    // ZTREE_GADGET4_DIR: where a copied test binary finds it (the GPU kit, .gpukit/).
    let dir = std::env::var_os("ZTREE_GADGET4_DIR")
        .map_or_else(|| std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/gadget4-64-z1"), std::path::PathBuf::from);
    if !crate::test_require::require(&format!("the GADGET-4 snapshot at {}", dir.display()), dir.join("pos.f32").exists()) {
        return;
    }
    fn read<T, const W: usize>(dir: &std::path::Path, name: &str, f: fn([u8; W]) -> T) -> Vec<T> {
        std::fs::read(dir.join(name)).unwrap().chunks_exact(W).map(|c| f(c.try_into().unwrap())).collect()
    }
    let triples = |v: Vec<f32>| v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect::<Vec<[f32; 3]>>();
    let pos = triples(read(&dir, "pos.f32", f32::from_le_bytes));
    let vel = triples(read(&dir, "vel.f32", f32::from_le_bytes));
    let ids: Vec<u32> = read(&dir, "ids.u32", u32::from_le_bytes);
    let glabel: Vec<i32> = read(&dir, "gadget_label.i32", i32::from_le_bytes);
    let glen: Vec<i32> = read(&dir, "GroupLen.i32", i32::from_le_bytes);
    let (bl, l, pmass, n) = (50.0, 0.15625, 4.075161606358443, pos.len());
    let domain = Domain::Periodic([bl; 3]);
    let params = TreeParams::default();

    let mut cl = vec![0i64; n];
    let req = CatalogueRequest::<Cpu, 3> {
        box_len: Some([bl; 3]),
        velocities: Some(&vel),
        masses: None,
        particle_mass: pmass,
        ids: Some(&ids),
        min_members: 32,
        order: CatalogueOrder::Gadget,
        members: true,
    };
    let (ccat, _) = crate::pipeline::fof::run(&Cpu, &domain, &pos, l, &req, &params, &DisjointSlice::new(&mut cl)).unwrap();

    for dev in devices() {
        let cuda = Cuda { dev: dev.clone() };
        let src = OnDevice::new(&dev, &pos);
        let dvel = DevBuf::from_slice(&dev, &vel).unwrap();
        let dids = DevBuf::from_slice(&dev, &ids).unwrap();
        let field = |data: u64, stride: i64, ty: FieldType| DevField { a: Strided { data, stride }, ty, n, _borrow: PhantomData };
        let req = CatalogueRequest::<Cuda, 3> {
            box_len: Some([bl; 3]),
            velocities: Some(std::array::from_fn(|d| field(dvel.ptr() + 4 * d as u64, 12, FieldType::F32))),
            masses: None,
            particle_mass: pmass,
            ids: Some(field(dids.ptr(), 0, FieldType::U32)),
            min_members: 32,
            order: CatalogueOrder::Gadget,
            members: true,
        };
        let labels: DevBuf<i64> = DevBuf::new(&dev, n).unwrap();
        let (cat, _) = crate::pipeline::fof::run(&cuda, &domain, &src.points::<3>(), l, &req, &params, &out(&labels)).unwrap();
        assert_eq!(cat, ccat, "{}: catalogue differs from the CPU back end's", dev.describe());
        assert_eq!(labels.to_vec().unwrap(), cl, "{}: labels", dev.describe());
        // GADGET-4's groups: the same id sets, and the same counts row by row.
        let set = |m: &mut Vec<u32>| {
            m.sort_unstable();
            m.clone()
        };
        let mut theirs: Vec<Vec<u32>> = vec![Vec::new(); glen.len()];
        for (i, &g) in glabel.iter().enumerate() {
            if g >= 0 {
                theirs[g as usize].push(ids[i]);
            }
        }
        let mut theirs: Vec<Vec<u32>> = theirs.iter_mut().map(set).collect();
        let mut ours: Vec<Vec<u32>> = (0..cat.len()).map(|g| set(&mut cat.members(g).iter().map(|&i| ids[i as usize]).collect())).collect();
        assert_eq!(cat.count.iter().map(|&c| c as i32).collect::<Vec<_>>(), glen, "{}: group sizes in GADGET order", dev.describe());
        ours.sort();
        theirs.sort();
        assert!(ours == theirs, "{}: the partition differs from GADGET-4's", dev.describe());
    }
}

fn scan_case<T: Real, const D: usize>(dev: &Arc<dyn Device>, pts: &[[T; D]], domain: &Domain<D>) {
    use crate::backend::Ingest;
    let want = Ingest::<Vec<[T; D]>, T, D>::scan(&Cpu, &pts.to_vec(), "sources", domain);
    let on = OnDevice::new(dev, pts);
    let got = Cuda { dev: dev.clone() }.scan(&on.points::<D>(), "sources", domain);
    let same = match (&got, &want) {
        // Numerically equal (the device reports -0.0 as 0.0; the quantiser treats them alike).
        (Ok(a), Ok(b)) => (0..D).all(|d| a.lo[d] == b.lo[d] && a.hi[d] == b.hi[d]),
        (Err(a), Err(b)) => a.to_string() == b.to_string(),
        _ => false,
    };
    assert!(same, "{}: {} {D}D {domain:?}: device {got:?}, host {want:?}", dev.describe(), T::NAME);
}

#[test]
fn input_checks_and_bounds_on_the_device_equal_the_host() {
    for dev in devices() {
        let mut r = Lcg(17);
        // 9000 points: three blocks of zt_check (4096 points each), the last one partial.
        let base: Vec<[f64; 3]> = (0..9000).map(|_| std::array::from_fn(|_| r.unit() * 4.0)).collect();
        // (position, value) spoilers: several bad points, the first in input order wins.
        let spoil: &[&[(usize, usize, f64)]] = &[
            &[],
            &[(2000, 1, f64::NAN), (2500, 0, f64::INFINITY)],
            &[(1500, 2, -1e-9), (8999, 0, 4.0)],
            &[(700, 0, 1e160), (900, 1, f64::NEG_INFINITY)],
            &[(0, 0, -0.0), (5, 1, 4.0 - 1e-12)],
            &[(8999, 2, 1e19)],
            &[(5000, 1, f64::NAN), (4200, 2, f64::INFINITY), (8500, 0, -3.0)],
        ];
        for s in spoil {
            let mut p = base.clone();
            for &(i, d, v) in *s {
                p[i][d] = v;
            }
            for domain in [Domain::Periodic([4.0; 3]), Domain::Open] {
                scan_case::<f64, 3>(&dev, &p, &domain);
                scan_case::<f32, 3>(&dev, &cast::<f32, 3>(&p), &domain);
                let p2: Vec<[f64; 2]> = p.iter().map(|x| [x[0], x[1]]).collect();
                let d2 = match domain {
                    Domain::Periodic(_) => Domain::Periodic([4.0; 2]),
                    Domain::Open => Domain::Open,
                };
                scan_case::<f64, 2>(&dev, &p2, &d2);
                scan_case::<f32, 2>(&dev, &cast::<f32, 2>(&p2), &d2);
            }
        }
        // No points: the empty box.
        scan_case::<f64, 3>(&dev, &[], &Domain::Open);
    }
}

/// The planes built on the device equal the CPU's node for node, bit for bit (ranges,
/// bounds, children, level caps), self and joint, with the default parameters, tiny leaves
/// and no regularisation.
#[test]
fn planes_on_the_device_equal_the_cpu_planes() {
    /// Returns whether the regularisation capped a plane.
    fn check<T: Real, const D: usize>(dev: &Arc<dyn Device>, name: &str, pts: &[[T; D]], qry: Option<&[[T; D]]>, params: &TreeParams) -> bool {
        let domain = Domain::Open;
        let mut timings = crate::base::Timings::default();
        let host = match qry {
            None => crate::pipeline::prepare(&Cpu, &domain, &pts.to_vec(), None::<&Vec<[T; D]>>, params, &mut timings).unwrap(),
            Some(q) => crate::pipeline::prepare(&Cpu, &domain, &pts.to_vec(), Some(&q.to_vec()), params, &mut timings).unwrap(),
        };
        let cuda = Cuda { dev: dev.clone() };
        let src = OnDevice::new(dev, pts);
        let q_dev = qry.map(|q| OnDevice::new(dev, q));
        let qp = q_dev.as_ref().map(|q| q.points::<D>());
        let got = crate::pipeline::prepare(&cuda, &domain, &src.points::<D>(), qp.as_ref(), params, &mut timings).unwrap();
        let (h, g) = (&host.tree, &got.tree);
        let what = format!("{}: planes of {name}, {} in {D}D, joint {}, {params:?}", dev.describe(), T::NAME, qry.is_some());
        assert_eq!(g.planes, h.planes, "{what}: planes");
        assert_eq!(g.level_caps, h.level_caps, "{what}: level caps");
        // The CPU's self-query tree reads its query columns from the source columns.
        let hq = |qry, src| if h.shares_queries() { src } else { qry };
        let u = [
            (&g.start, &h.start),
            (&g.src_start, &h.src_start),
            (&g.src_count, &h.src_count),
            (&g.qry_start, hq(&h.qry_start, &h.src_start)),
            (&g.qry_count, hq(&h.qry_count, &h.src_count)),
            (&g.child_start, &h.child_start),
            (&g.child_count, &h.child_count),
        ];
        for (i, (a, b)) in u.iter().enumerate() {
            assert_eq!(&a.to_vec().unwrap(), *b, "{what}: node array {i}");
        }
        let bits = |v: &[[T; D]]| v.iter().flat_map(|p| p.iter().map(|x| x.key_bits())).collect::<Vec<_>>();
        let hb = |qry, src| if h.shares_queries() { src } else { qry };
        for (i, (a, b)) in
            [(&g.src_lo, &h.src_lo), (&g.src_hi, &h.src_hi), (&g.qry_lo, hb(&h.qry_lo, &h.src_lo)), (&g.qry_hi, hb(&h.qry_hi, &h.src_hi))]
                .iter()
                .enumerate()
        {
            assert_eq!(bits(&a.to_vec().unwrap()), bits(b), "{what}: bounds {i}");
        }
        h.level_caps.iter().any(Option::is_some)
    }
    let jz = TreeParams { leaf_size: 48, ..TreeParams::default() };
    let variants = [jz, TreeParams { leaf_size: 2, coarsening: 3, top_target: 4, ..jz }, TreeParams { max_volume_factor: 0.0, ..jz }];
    for dev in devices() {
        let mut capped = false;
        for params in &variants {
            for (name, pts) in inputs::<3>(10.0) {
                let q: Vec<[f64; 3]> = pts.iter().take(300).map(|p| [p[1], p[2], p[0]]).collect();
                capped |= check::<f64, 3>(&dev, name, &pts, None, params);
                capped |= check::<f32, 3>(&dev, name, &cast::<f32, 3>(&pts), Some(&cast::<f32, 3>(&q)), params);
            }
            for (name, pts) in inputs::<2>(10.0).into_iter().take(3) {
                capped |= check::<f64, 2>(&dev, name, &pts, None, params);
            }
        }
        assert!(capped, "no case exercised the regularisation cap");
    }
}

/// The FoF field checks on the device give the host checks' errors (first bad element,
/// precedence of non-finite masses over non-positive ones, ids beyond i64), or none.
#[test]
fn field_checks_on_the_device_equal_the_host_checks() {
    use crate::input::validate::{check_ids, check_masses, check_vectors};
    let n = 1000;
    for dev in devices() {
        let cuda = Cuda { dev: dev.clone() };
        let vel_cases: [&[(usize, usize, f32)]; 3] = [&[], &[(700, 1, f32::NAN), (300, 2, f32::INFINITY)], &[(999, 0, f32::NEG_INFINITY)]];
        let mass_cases: [&[(usize, f64)]; 4] = [&[], &[(50, f64::NAN), (10, -1.0)], &[(20, 0.0)], &[(5, f64::INFINITY)]];
        let id_cases: [&[(usize, u64)]; 2] = [&[], &[(99, u64::MAX), (400, 1 << 63)]];
        for (vc, (mc, ic)) in vel_cases.iter().zip(mass_cases.iter().zip(id_cases.iter().cycle())) {
            let mut vel = vec![[0.5f32; 3]; n];
            for &(i, d, v) in *vc {
                vel[i][d] = v;
            }
            let mut mass = vec![1.0f64; n];
            for &(i, v) in *mc {
                mass[i] = v;
            }
            let mut ids: Vec<u64> = (0..n as u64).collect();
            for &(i, v) in *ic {
                ids[i] = v;
            }
            let host = check_vectors("velocities", &vel.iter().map(|p| p.map(f64::from)).collect::<Vec<[f64; 3]>>(), n)
                .and_then(|_| check_masses(&mass, n))
                .and_then(|_| check_ids(&ids, n));
            let (dv, dm, di) =
                (DevBuf::from_slice(&dev, &vel).unwrap(), DevBuf::from_slice(&dev, &mass).unwrap(), DevBuf::from_slice(&dev, &ids).unwrap());
            let field = |data: u64, stride: i64, ty: FieldType| DevField { a: Strided { data, stride }, ty, n, _borrow: PhantomData };
            let v: [DevField<'_>; 3] = std::array::from_fn(|d| field(dv.ptr() + 4 * d as u64, 12, FieldType::F32));
            let got =
                cuda.validate_fof_fields(Some(&v), Some(&field(dm.ptr(), 0, FieldType::F64)), 1.0, Some(&field(di.ptr(), 0, FieldType::U64)), n);
            assert_eq!(
                got.as_ref().map_err(|e| e.to_string()),
                host.as_ref().map_err(|e| e.to_string()),
                "{}: velocities {vc:?}, masses {mc:?}, ids {ic:?}",
                dev.describe()
            );
        }
        // No masses and a bad particle mass.
        assert!(cuda.validate_fof_fields::<3>(None, None, -1.0, None, n).unwrap_err().to_string().contains("particle_mass"));
    }
}

/// Launches per call, on the emulator (what a GPU pays per launch is latency, not work):
/// a kNN and a FoF call on 8,000 points, every array short enough for the one-block scan,
/// so the two-level scan never runs; the counts are printed for the record.
#[cfg(feature = "cuda-emu")]
#[test]
fn small_calls_scan_in_one_launch_each() {
    let emu = Arc::new(super::emu::EmuDevice::default());
    let dev: Arc<dyn Device> = emu.clone();
    let mut r = Lcg(17);
    let pts: Vec<[f64; 3]> = (0..8000).map(|_| std::array::from_fn(|_| r.unit())).collect();
    knn_case::<f64, 3>(&dev, "launch count", &Domain::Open, &pts, None, 16);
    let (knn, knn_total) = emu.take_launches();
    fof_case::<f64, 3>(&dev, "launch count", &Domain::Periodic([1.0; 3]), &pts, 0.02);
    let (fof, fof_total) = emu.take_launches();
    for (job, m, total) in [("kNN", &knn, knn_total), ("FoF", &fof, fof_total)] {
        eprintln!("{job}: {total} launches: {m:?}");
        assert!(m.get("zt_scan_one_block").copied().unwrap_or(0) > 0, "{job}: {m:?}");
        assert_eq!(m.get("zt_scan_blocks"), None, "{job}: a two-level scan on a small call");
    }
}
