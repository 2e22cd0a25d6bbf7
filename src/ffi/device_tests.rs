//! `ztree_knn` on device arrays (the emulated device, whose memory is host memory) equals
//! the same call on host arrays: every output, f32 and f64, self and separate queries,
//! input and z-order, caller and context-owned outputs (reused across calls).

use std::ffi::c_void;

use super::EMULATE;
use crate::ffi::abi::Versioned;
use crate::ffi::knn::ztree_knn;
use crate::ffi::types::*;
use crate::ffi::{ztree_create, ztree_destroy, ztree_last_error};

struct Pts<T> {
    xyz: Vec<T>,
    mass: Vec<f64>,
    scalar: Vec<f32>,
}

fn points<T: Copy>(n: usize, seed: u64, conv: fn(f64) -> T) -> Pts<T> {
    let mut s = seed;
    let mut r = move || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    // Clustered with duplicates: every 7th point repeats the previous one.
    let mut xyz = Vec::new();
    for i in 0..n {
        let p = [r(), r(), r()].map(|v| if i % 3 == 0 { 0.3 + 0.01 * v } else { v });
        if i % 7 == 6 {
            let l = xyz.len();
            xyz.extend_from_within(l - 3..l);
        } else {
            xyz.extend(p.map(conv));
        }
    }
    Pts { xyz, mass: (0..n).map(|_| 0.5 + r()).collect(), scalar: (0..n).map(|_| r() as f32).collect() }
}

fn particles<T>(p: &Pts<T>, dtype: i32, memory: i32) -> ztree_particles {
    let n = p.mass.len();
    let size = size_of::<T>() as i64;
    let arr = |d: usize| ztree_array { data: unsafe { p.xyz.as_ptr().add(d) } as *const c_void, dtype, stride: 3 * size };
    let none = ztree_array { data: std::ptr::null(), dtype: 0, stride: 0 };
    ztree_particles {
        struct_size: size_of::<ztree_particles>(),
        count: n as i64,
        memory,
        pos: [arr(0), arr(1), arr(2)],
        vel: [none; 3],
        mass: ztree_array { data: p.mass.as_ptr() as *const c_void, dtype: ZTREE_DTYPE_F64, stride: 0 },
        ids: none,
        types: none,
    }
}

/// Copies of every output of one call (pointers may be context buffers, reused later).
fn run(
    ctx: *mut crate::ffi::ztree_context,
    src: &ztree_particles,
    qry: Option<&ztree_particles>,
    kp: &ztree_knn_params,
    o: &mut ztree_knn_output,
) -> Vec<Vec<u64>> {
    let s = unsafe { ztree_knn(ctx, src, qry.map_or(std::ptr::null(), |q| q as *const _), kp, o) };
    assert_eq!(s, ztree_status::ZTREE_OK, "{:?}", unsafe { std::ffi::CStr::from_ptr(ztree_last_error(ctx)) });
    let (nq, k) = (o.n_queries as usize, kp.k as usize);
    let bits = |p: *const f64, n: usize| unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let ints = |p: *const i64, n: usize| unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|&v| v as u64).collect::<Vec<_>>();
    vec![
        ints(o.indices, nq * k),
        bits(o.distances, nq * k),
        bits(o.kth_distance, nq),
        bits(o.density, nq),
        bits(o.scalar_mean, nq),
        ints(o.permutation, nq),
    ]
}

/// A serial context in the periodic unit box whose device calls run on the emulator.
fn emulated_context(particle_mass: f64) -> *mut crate::ffi::ztree_context {
    EMULATE.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut cfg = ztree_config::defaults();
    cfg.periodic = 1;
    cfg.box_size = [1.0; 3];
    cfg.particle_mass = particle_mass;
    let mut ctx = std::ptr::null_mut();
    assert_eq!(ztree_create(&cfg, &mut ctx), ztree_status::ZTREE_OK);
    ctx
}

#[test]
fn knn_on_device_arrays_equals_host_arrays() {
    let ctx = emulated_context(2.0);
    let all = ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES | ZTREE_KNN_KTH_DISTANCE | ZTREE_KNN_DENSITY | ZTREE_KNN_SCALAR_MEAN | ZTREE_KNN_PERMUTATION;
    let p64 = points::<f64>(3000, 1, |v| v);
    let p32 = points::<f32>(3000, 2, |v| v as f32);
    let q64 = points::<f64>(500, 3, |v| v);
    let q32 = points::<f32>(500, 4, |v| v as f32);
    for (name, dtype, src, qry) in [
        ("f64 self", ZTREE_DTYPE_F64, particles(&p64, ZTREE_DTYPE_F64, 0), None),
        ("f32 self", ZTREE_DTYPE_F32, particles(&p32, ZTREE_DTYPE_F32, 0), None),
        ("f64 queries", ZTREE_DTYPE_F64, particles(&p64, ZTREE_DTYPE_F64, 0), Some(particles(&q64, ZTREE_DTYPE_F64, 0))),
        ("f32 queries", ZTREE_DTYPE_F32, particles(&p32, ZTREE_DTYPE_F32, 0), Some(particles(&q32, ZTREE_DTYPE_F32, 0))),
    ] {
        let _ = dtype;
        let scalar = if name.starts_with("f64") { p64.scalar.as_ptr() } else { p32.scalar.as_ptr() };
        for (k, order, masses) in [(1, ZTREE_ORDER_INPUT, true), (16, ZTREE_ORDER_ZORDER, false), (40, ZTREE_ORDER_INPUT, false)] {
            let kp = ztree_knn_params {
                struct_size: size_of::<ztree_knn_params>(),
                k,
                outputs: all,
                order,
                scalar: ztree_array { data: scalar as *const c_void, dtype: ZTREE_DTYPE_F32, stride: 0 },
                cuda_stream: std::ptr::null_mut(),
                kth_hint: ztree_array { data: std::ptr::null(), dtype: 0, stride: 0 },
                source_type_mask: 0,
                query_type_mask: 0,
            };
            let mut src = src;
            if !masses {
                src.mass.data = std::ptr::null(); // the constant particle mass
            }
            let mut host_out = ztree_knn_output::defaults();
            let host = run(ctx, &src, qry.as_ref(), &kp, &mut host_out);
            let (mut dsrc, mut dqry) = (src, qry);
            dsrc.memory = ZTREE_MEMORY_CUDA_DEVICE;
            if let Some(q) = dqry.as_mut() {
                q.memory = ZTREE_MEMORY_CUDA_DEVICE;
            }
            // Context-owned device outputs, twice through one output struct (the second
            // call recognises the context's own pointers), then caller "device" arrays.
            let mut dev_out = ztree_knn_output::defaults();
            for round in 0..2 {
                let dev = run(ctx, &dsrc, dqry.as_ref(), &kp, &mut dev_out);
                for (j, (d, h)) in dev.iter().zip(&host).enumerate() {
                    let first = d.iter().zip(h).position(|(a, b)| a != b);
                    assert!(
                        first.is_none(),
                        "{name}, k = {k}, order {order}, round {round}: output {j} differs at {first:?}: {:?} vs {:?}",
                        first.map(|i| d[i]),
                        first.map(|i| h[i])
                    );
                }
            }
            let (nq, ku) = (host_out.n_queries as usize, k as usize);
            let (mut idx, mut dist, mut kth) = (vec![0i64; nq * ku], vec![0f64; nq * ku], vec![0f64; nq]);
            let (mut den, mut mean, mut perm) = (vec![0f64; nq], vec![0f64; nq], vec![0i64; nq]);
            let mut caller_out = ztree_knn_output::defaults();
            caller_out.indices = idx.as_mut_ptr();
            caller_out.distances = dist.as_mut_ptr();
            caller_out.kth_distance = kth.as_mut_ptr();
            caller_out.density = den.as_mut_ptr();
            caller_out.scalar_mean = mean.as_mut_ptr();
            caller_out.permutation = perm.as_mut_ptr();
            let dev = run(ctx, &dsrc, dqry.as_ref(), &kp, &mut caller_out);
            assert_eq!(caller_out.indices, idx.as_mut_ptr(), "written into the caller's array");
            assert!(dev == host, "{name}, k = {k}: caller device arrays differ from host outputs");
        }
    }
    ztree_destroy(ctx);
}

/// Every result of one `ztree_fof` as comparable words.
fn fof_words(ctx: *mut crate::ffi::ztree_context, p: &ztree_particles, fp: &ztree_fof_params, o: &mut ztree_fof_output) -> Vec<u64> {
    let s = unsafe { crate::ffi::fof::ztree_fof(ctx, p, fp, o) };
    assert_eq!(s, ztree_status::ZTREE_OK, "{:?}", unsafe { std::ffi::CStr::from_ptr(ztree_last_error(ctx)) });
    let n = p.count as usize;
    let nh = o.n_halos as usize;
    let mut w: Vec<u64> = unsafe { std::slice::from_raw_parts(o.labels, n) }.iter().map(|&v| v as u64).collect();
    for h in unsafe { std::slice::from_raw_parts(o.halos, nh) } {
        w.extend([h.tag as u64, h.count as u64, h.mass.to_bits(), h.vel_dispersion.to_bits(), h.inertia_radius.to_bits()]);
        w.extend(h.pos.iter().chain(&h.vel).map(|v| v.to_bits()));
    }
    let offsets = unsafe { std::slice::from_raw_parts(o.member_offsets, nh + 1) };
    w.extend(offsets.iter().map(|&v| v as u64));
    w.extend(unsafe { std::slice::from_raw_parts(o.member_indices, offsets[nh] as usize) }.iter().map(|&v| v as u64));
    w.extend([o.linking_length.to_bits(), o.n_groups_total as u64, nh as u64]);
    w
}

#[test]
fn fof_on_device_arrays_equals_host_arrays() {
    let ctx = emulated_context(1.0);
    let p32 = points::<f32>(4000, 7, |v| v as f32);
    let p64 = points::<f64>(4000, 8, |v| v);
    let vel: Vec<f32> = p32.xyz.iter().map(|v| v * 3.0 - 1.0).collect();
    let ids_u64: Vec<u64> = (0..4000u64).map(|i| (i * 7919) % 4000 + 17).collect();
    let ids_i32: Vec<i32> = (0..4000i32).map(|i| 4000 - i).collect();
    for (name, mut p) in [("f32", particles(&p32, ZTREE_DTYPE_F32, 0)), ("f64", particles(&p64, ZTREE_DTYPE_F64, 0))] {
        for (with_fields, b) in [(true, 0.2), (false, 0.4)] {
            if with_fields {
                for d in 0..3 {
                    p.vel[d] = ztree_array { data: unsafe { vel.as_ptr().add(d) } as *const c_void, dtype: ZTREE_DTYPE_F32, stride: 12 };
                }
                p.ids = ztree_array { data: ids_u64.as_ptr() as *const c_void, dtype: ZTREE_DTYPE_U64, stride: 0 };
            } else {
                p.mass.data = std::ptr::null();
                p.ids = ztree_array { data: ids_i32.as_ptr() as *const c_void, dtype: ZTREE_DTYPE_I32, stride: 0 };
            }
            let fp = ztree_fof_params {
                struct_size: size_of::<ztree_fof_params>(),
                linking_length: 0.0,
                b,
                min_members: 2,
                order: ZTREE_CATALOGUE_GADGET,
                members: 1,
                gather: 0,
                cuda_stream: std::ptr::null_mut(),
                type_mask: 0,
                ..ztree_fof_params::defaults()
            };
            let mut ho = ztree_fof_output::defaults();
            let host = fof_words(ctx, &p, &fp, &mut ho);
            assert!(ho.n_halos > 3, "{name}: a test with halos");
            let mut dp = p;
            dp.memory = ZTREE_MEMORY_CUDA_DEVICE;
            let mut dout = ztree_fof_output::defaults();
            for round in 0..2 {
                assert!(fof_words(ctx, &dp, &fp, &mut dout) == host, "{name}, b = {b}, round {round}: device FoF differs from host FoF");
            }
            let mut labels = vec![0i64; 4000];
            let mut cout = ztree_fof_output::defaults();
            cout.labels = labels.as_mut_ptr();
            assert!(fof_words(ctx, &dp, &fp, &mut cout) == host, "{name}, b = {b}: caller labels differ");
            assert_eq!(cout.labels, labels.as_mut_ptr());
        }
    }
    ztree_destroy(ctx);
}

/// The statistics of a device call report the device memory it held at most (outputs
/// excluded): measured from the device's allocations, the same on the emulator as on a GPU.
/// Prints the bytes per particle (BENCHMARKS.md quotes them) and holds them under bounds.
#[test]
fn device_scratch_per_particle_is_reported() {
    use crate::ffi::fof::ztree_fof;
    use crate::ffi::ztree_get_stats;
    let ctx = emulated_context(1.0);
    let n = 20_000;
    let p32 = points::<f32>(n, 7, |v| v as f32);
    let mut src = particles(&p32, ZTREE_DTYPE_F32, ZTREE_MEMORY_CUDA_DEVICE);
    src.mass.data = std::ptr::null();
    let stats = || {
        let mut st = ztree_stats::defaults();
        assert_eq!(ztree_get_stats(ctx, &mut st), ztree_status::ZTREE_OK);
        st.scratch_bytes as f64 / n as f64
    };
    let kp = ztree_knn_params { k: 16, outputs: ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES, ..Versioned::defaults() };
    let mut o = ztree_knn_output::defaults();
    let s = unsafe { ztree_knn(ctx, &src, std::ptr::null(), &kp, &mut o) };
    assert_eq!(s, ztree_status::ZTREE_OK);
    let knn = stats();
    let fp = ztree_fof_params {
        struct_size: size_of::<ztree_fof_params>(),
        linking_length: 0.0,
        b: 0.2,
        min_members: 20,
        order: ZTREE_CATALOGUE_ZORDER,
        members: 0,
        gather: 0,
        cuda_stream: std::ptr::null_mut(),
        type_mask: 0,
        ..ztree_fof_params::defaults()
    };
    let mut fo = ztree_fof_output::defaults();
    assert_eq!(unsafe { ztree_fof(ctx, &src, &fp, &mut fo) }, ztree_status::ZTREE_OK);
    let fof = stats();
    eprintln!("device scratch per particle, f32, {n} clustered points: kNN k = 16 {knn:.0} B, FoF b = 0.2 + catalogue {fof:.0} B");
    // Positions, permutation and keys alone are ~24 B; the f32 distances staged for the f64
    // outputs 64 B at k = 16.
    assert!(knn > 24.0 && knn < 400.0, "kNN device scratch {knn} B/particle");
    assert!(fof > 24.0 && fof < 200.0, "FoF device scratch {fof} B/particle");
    ztree_destroy(ctx);
}

/// Every output of one `ztree_radius` as comparable words (lists read where the call put
/// them: the emulated device's memory is host memory).
fn radius_words(ctx: *mut crate::ffi::ztree_context, s: &ztree_particles, q: Option<&ztree_particles>, rp: &ztree_radius_params) -> Vec<u64> {
    let mut o = ztree_radius_output::defaults();
    let st = unsafe { crate::ffi::radius::ztree_radius(ctx, s, q.map_or(std::ptr::null(), |q| q as *const _), rp, &mut o) };
    assert_eq!(st, ztree_status::ZTREE_OK, "{:?}", unsafe { std::ffi::CStr::from_ptr(ztree_last_error(ctx)) });
    let nq = o.n_queries as usize;
    let f = |p: *const f64, n: usize| unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let i = |p: *const i64, n: usize| unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|&v| v as u64).collect::<Vec<_>>();
    let mut w = if o.counts.is_null() { vec![] } else { i(o.counts, nq) };
    for p in [o.scalar_sum, o.scalar_mean, o.density] {
        if !p.is_null() {
            w.extend(f(p, nq));
        }
    }
    let off = i(o.offsets, nq + 1);
    let m = off[nq] as usize;
    w.extend(&off);
    w.extend(i(o.indices, m));
    if !o.distances.is_null() {
        w.extend(f(o.distances, m));
    }
    w.push(o.n_pairs as u64);
    assert!(o.n_pairs > 0);
    w
}

#[test]
fn radius_on_device_arrays_equals_host_arrays() {
    let ctx = emulated_context(1.5);
    let all = ZTREE_RADIUS_COUNTS | ZTREE_RADIUS_LISTS | ZTREE_RADIUS_SCALAR_SUM | ZTREE_RADIUS_SCALAR_MEAN | ZTREE_RADIUS_DENSITY;
    let p64 = points::<f64>(3000, 11, |v| v);
    let p32 = points::<f32>(3000, 12, |v| v as f32);
    let q64 = points::<f64>(400, 13, |v| v);
    let radii: Vec<f32> = (0..3000).map(|i| 0.01 + (i % 7) as f32 * 0.005).collect();
    for (name, src, qry, scalar) in [
        ("f64 self", particles(&p64, ZTREE_DTYPE_F64, 0), None, p64.scalar.as_ptr()),
        ("f32 self", particles(&p32, ZTREE_DTYPE_F32, 0), None, p32.scalar.as_ptr()),
        ("f64 queries", particles(&p64, ZTREE_DTYPE_F64, 0), Some(particles(&q64, ZTREE_DTYPE_F64, 0)), p64.scalar.as_ptr()),
    ] {
        for (per_query, order, distances) in [(false, ZTREE_LIST_BY_DISTANCE, true), (true, ZTREE_LIST_BY_INDEX, false)] {
            let mut rp = ztree_radius_params::defaults();
            rp.radius = 0.03;
            rp.outputs = all | if distances { ZTREE_RADIUS_DISTANCES } else { 0 };
            rp.list_order = order;
            rp.scalar = ztree_array { data: scalar as *const c_void, dtype: ZTREE_DTYPE_F32, stride: 0 };
            if per_query {
                rp.radii = ztree_array { data: radii.as_ptr() as *const c_void, dtype: ZTREE_DTYPE_F32, stride: 0 };
            }
            let (qry, src) = (qry.filter(|_| !per_query), src);
            let host = radius_words(ctx, &src, qry.as_ref(), &rp);
            let (mut dsrc, mut dqry) = (src, qry);
            dsrc.memory = ZTREE_MEMORY_CUDA_DEVICE;
            if let Some(q) = dqry.as_mut() {
                q.memory = ZTREE_MEMORY_CUDA_DEVICE;
            }
            let dev = radius_words(ctx, &dsrc, dqry.as_ref(), &rp);
            let first = dev.iter().zip(&host).position(|(a, b)| a != b);
            assert!(first.is_none() && dev.len() == host.len(), "{name}, per-query {per_query}: device differs from host at {first:?}");
        }
    }
    // Mixed memory spaces are refused.
    let mut rp = ztree_radius_params::defaults();
    rp.radius = 0.03;
    rp.outputs = ZTREE_RADIUS_COUNTS;
    let mut dsrc = particles(&p64, ZTREE_DTYPE_F64, 0);
    dsrc.memory = ZTREE_MEMORY_CUDA_DEVICE;
    let hq = particles(&q64, ZTREE_DTYPE_F64, 0);
    let mut o = ztree_radius_output::defaults();
    assert_eq!(unsafe { crate::ffi::radius::ztree_radius(ctx, &dsrc, &hq, &rp, &mut o) }, ztree_status::ZTREE_ERR_INVALID_ARGUMENT);
    ztree_destroy(ctx);
}

/// Every result of one `ztree_dbscan` as comparable words.
fn dbscan_words(ctx: *mut crate::ffi::ztree_context, p: &ztree_particles, dp: &ztree_dbscan_params) -> Vec<u64> {
    let mut o = ztree_dbscan_output::defaults();
    let s = unsafe { crate::ffi::dbscan::ztree_dbscan(ctx, p, dp, &mut o) };
    assert_eq!(s, ztree_status::ZTREE_OK, "{:?}", unsafe { std::ffi::CStr::from_ptr(ztree_last_error(ctx)) });
    let n = p.count as usize;
    let nc = o.n_clusters as usize;
    let mut w: Vec<u64> = unsafe { std::slice::from_raw_parts(o.labels, n) }.iter().map(|&v| v as u64).collect();
    w.extend(unsafe { std::slice::from_raw_parts(o.point_class, n) }.iter().map(|&v| v as u64));
    for h in unsafe { std::slice::from_raw_parts(o.clusters, nc) } {
        w.extend([h.tag as u64, h.count as u64, h.core_count as u64, h.mass.to_bits(), h.max_radius.to_bits(), h.inertia_radius.to_bits()]);
        w.extend(h.pos.iter().chain(&h.vel).map(|v| v.to_bits()));
    }
    let offsets = unsafe { std::slice::from_raw_parts(o.member_offsets, nc + 1) };
    w.extend(offsets.iter().map(|&v| v as u64));
    w.extend(unsafe { std::slice::from_raw_parts(o.member_indices, offsets[nc] as usize) }.iter().map(|&v| v as u64));
    w.extend([o.eps.to_bits(), o.n_core as u64, o.n_border as u64, o.n_noise as u64, o.n_clusters_total as u64, nc as u64]);
    assert!(o.n_core > 0 && nc > 0);
    w
}

#[test]
fn dbscan_on_device_arrays_equals_host_arrays() {
    let ctx = emulated_context(1.0);
    let p32 = points::<f32>(3000, 21, |v| v as f32);
    let p64 = points::<f64>(3000, 22, |v| v);
    let ids: Vec<i64> = (0..3000i64).map(|i| 5000 - i).collect();
    for (name, mut p) in [("f32", particles(&p32, ZTREE_DTYPE_F32, 0)), ("f64", particles(&p64, ZTREE_DTYPE_F64, 0))] {
        p.ids = ztree_array { data: ids.as_ptr() as *const c_void, dtype: ZTREE_DTYPE_I64, stride: 0 };
        for (min_pts, border) in [(2, ZTREE_DBSCAN_BORDER_NEAREST), (5, ZTREE_DBSCAN_BORDER_NEAREST), (8, ZTREE_DBSCAN_BORDER_NOISE)] {
            let mut dp = ztree_dbscan_params::defaults();
            dp.eps = 0.02;
            dp.min_pts = min_pts;
            dp.members = 1;
            dp.classes = 1;
            dp.border = border;
            dp.order = ZTREE_CATALOGUE_GADGET;
            let host = dbscan_words(ctx, &p, &dp);
            let mut dev = p;
            dev.memory = ZTREE_MEMORY_CUDA_DEVICE;
            let d = dbscan_words(ctx, &dev, &dp);
            assert!(d == host, "{name}, min_pts {min_pts}: device differs from host");
        }
    }
    ztree_destroy(ctx);
}

/// Type masks on device arrays (staged through host memory) equal the host calls: kNN,
/// FoF, radius queries and DBSCAN, outputs in context-owned device buffers.
#[test]
fn type_masks_on_device_arrays_equal_host_arrays() {
    let ctx = emulated_context(1.0);
    let p64 = points::<f64>(3000, 31, |v| v);
    let types: Vec<u8> = (0..3000).map(|i| [1u8, 4, 1, 0][i % 4]).collect();
    let mut host = particles(&p64, ZTREE_DTYPE_F64, 0);
    host.types = ztree_array { data: types.as_ptr() as *const c_void, dtype: ZTREE_DTYPE_U8, stride: 0 };
    let mut dev = host;
    dev.memory = ZTREE_MEMORY_CUDA_DEVICE;
    let bits = |p: *const f64, n: usize| unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|v| v.to_bits()).collect::<Vec<_>>();
    let ints = |p: *const i64, n: usize| unsafe { std::slice::from_raw_parts(p, n) }.to_vec();

    // kNN: the stars' dark-matter neighbours.
    let mut kp = ztree_knn_params::defaults();
    kp.k = 8;
    kp.outputs = ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES;
    kp.source_type_mask = 1 << 1;
    kp.query_type_mask = 1 << 4;
    let knn = |p: &ztree_particles| {
        let mut o = ztree_knn_output::defaults();
        assert_eq!(unsafe { ztree_knn(ctx, p, std::ptr::null(), &kp, &mut o) }, ztree_status::ZTREE_OK, "{:?}", unsafe {
            std::ffi::CStr::from_ptr(ztree_last_error(ctx))
        });
        (ints(o.indices, 3000 * 8), bits(o.distances, 3000 * 8))
    };
    let (h, d) = (knn(&host), knn(&dev));
    assert_eq!(d, h, "kNN with masks");
    assert!(h.0.iter().any(|&i| i >= 0) && h.0.contains(&-1));

    // FoF on the dark matter.
    let mut fp = ztree_fof_params::defaults();
    fp.linking_length = 0.02;
    fp.min_members = 2;
    fp.members = 1;
    fp.type_mask = 1 << 1;
    let (fh, fd) = (fof_words(ctx, &host, &fp, &mut ztree_fof_output::defaults()), fof_words(ctx, &dev, &fp, &mut ztree_fof_output::defaults()));
    assert_eq!(fd, fh, "FoF with a mask");

    // Radius counts and lists of the stars among the dark matter.
    let mut rp = ztree_radius_params::defaults();
    rp.radius = 0.03;
    rp.outputs = ZTREE_RADIUS_COUNTS | ZTREE_RADIUS_LISTS | ZTREE_RADIUS_DISTANCES;
    rp.source_type_mask = 1 << 1;
    rp.query_type_mask = 1 << 4;
    assert_eq!(radius_words(ctx, &dev, None, &rp), radius_words(ctx, &host, None, &rp), "radius with masks");

    // DBSCAN on the stars.
    let mut dp = ztree_dbscan_params::defaults();
    dp.eps = 0.03;
    dp.min_pts = 3;
    dp.members = 1;
    dp.classes = 1;
    dp.type_mask = 1 << 4;
    assert_eq!(dbscan_words(ctx, &dev, &dp), dbscan_words(ctx, &host, &dp), "DBSCAN with a mask");
    ztree_destroy(ctx);
}
