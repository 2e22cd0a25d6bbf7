//! Device arrays on MPI contexts, computed on each rank's device (the CUDA emulator, whose
//! memory is host memory, so this runs without a GPU): every call equals one serial CPU
//! call on all ranks' particles concatenated in rank order — kNN bit for bit (self and
//! separate queries, f32 and f64, periodic and open, k = 1, 16, 133, balanced, very
//! unbalanced and empty ranks), FoF labels, catalogue rows and members (the GADGET-4
//! snapshot included) — and the collective error rules hold with device arrays: a host
//! pointer passed as device memory, a rank whose device cannot be used, NaN on one rank;
//! ranks may mix host and device arrays. Radius queries and DBSCAN on device arrays, and
//! type masks on device arrays (staged through host memory), equal the serial calls too.
//! Run under `mpirun -np 1..4` (`make test-mpi`).

#[path = "../common/require.rs"]
#[allow(dead_code)]
mod require;

use std::ffi::{CStr, c_void};

use mpi::traits::*;
use ztree::__emulator::*;

fn lcg(s: &mut u64) -> f64 {
    *s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (*s >> 11) as f64 / (1u64 << 53) as f64
}

fn message(ctx: *mut ztree_context) -> String {
    unsafe { CStr::from_ptr(ztree_last_error(ctx)) }.to_string_lossy().into_owned()
}

const NONE: ztree_array = ztree_array { data: std::ptr::null(), dtype: 0, stride: 0 };

/// The particles of every rank, the same on every rank (a fixed seed): clustered, with
/// exact duplicates, in the unit box.
struct Global {
    pos: Vec<[f64; 3]>,
    vel: Vec<[f32; 3]>,
    mass: Vec<f64>,
    scalar: Vec<f64>,
    ids: Vec<u64>,
}

fn global(n: usize, seed: u64) -> Global {
    let mut s = seed;
    let mut pos: Vec<[f64; 3]> = Vec::with_capacity(n);
    for i in 0..n {
        let p = if i % 7 == 6 {
            pos[i - 1]
        } else if i % 3 == 0 {
            let c = (i % 5) as f64 * 0.17 + 0.1;
            [c + 0.01 * lcg(&mut s), c + 0.01 * lcg(&mut s), 0.5 + 0.01 * lcg(&mut s)]
        } else {
            [lcg(&mut s), lcg(&mut s), lcg(&mut s)]
        };
        pos.push(p);
    }
    Global {
        vel: (0..n).map(|_| [lcg(&mut s) as f32 - 0.5, lcg(&mut s) as f32 - 0.5, lcg(&mut s) as f32 - 0.5]).collect(),
        mass: (0..n).map(|_| 0.5 + lcg(&mut s)).collect(),
        scalar: (0..n).map(|i| if i % 11 == 0 { -0.0 } else { lcg(&mut s) - 0.5 }).collect(),
        ids: (0..n as u64).map(|i| 7_000_000_000 + 3 * i).collect(),
        pos,
    }
}

/// Where each rank's share starts, for `n` particles over `size` ranks.
fn layout(kind: &str, n: usize, size: usize) -> Vec<usize> {
    let share: Vec<usize> = match kind {
        "balanced" => (0..size).map(|r| n / size + usize::from(r < n % size)).collect(),
        // Rank 0 holds 85%, the others the rest.
        "unbalanced" => {
            let first = if size == 1 { n } else { n * 85 / 100 };
            let rest = n - first;
            (0..size).map(|r| if r == 0 { first } else { rest / (size - 1) + usize::from(r - 1 < rest % (size - 1).max(1)) }).collect()
        }
        // Odd ranks hold nothing.
        "empty ranks" => {
            let holders = size.div_ceil(2);
            let mut h = 0;
            (0..size)
                .map(|r| {
                    if r % 2 == 1 {
                        0
                    } else {
                        h += 1;
                        n / holders + usize::from(h - 1 < n % holders)
                    }
                })
                .collect()
        }
        // Everything on the last rank.
        _ => (0..size).map(|r| if r + 1 == size { n } else { 0 }).collect(),
    };
    let mut off = vec![0];
    for s in share {
        off.push(off.last().unwrap() + s);
    }
    off
}

/// A rank's particles as the C API takes them: positions f32 (array of structs with the
/// velocities) or f64 (struct of arrays), masses f64, ids u64; on the host or in emulated
/// device memory (kept alive by `keep`).
struct Particles {
    p: ztree_particles,
    _keep: Vec<DeviceMemory>,
    _host: (Vec<f32>, Vec<f64>),
}

fn particles(g: &Global, lo: usize, hi: usize, f32_pos: bool, device: bool) -> Particles {
    let n = hi - lo;
    let aos: Vec<f32> =
        (lo..hi).flat_map(|i| [g.pos[i][0] as f32, g.pos[i][1] as f32, g.pos[i][2] as f32, g.vel[i][0], g.vel[i][1], g.vel[i][2]]).collect();
    let soa: Vec<f64> = (0..3).flat_map(|d| (lo..hi).map(move |i| g.pos[i][d])).collect();
    let mut keep = Vec::new();
    let mut place = |bytes: *const c_void, len: usize| -> *const c_void {
        if !device || len == 0 {
            return bytes;
        }
        let m = DeviceMemory::from_slice(unsafe { std::slice::from_raw_parts(bytes as *const u8, len) });
        let p = m.ptr();
        keep.push(m);
        p
    };
    let aos_p = place(aos.as_ptr() as *const c_void, aos.len() * 4);
    let soa_p = place(soa.as_ptr() as *const c_void, soa.len() * 8);
    let mass_p = place(g.mass[lo..hi].as_ptr() as *const c_void, n * 8);
    let ids_p = place(g.ids[lo..hi].as_ptr() as *const c_void, n * 8);
    let arr = |p: *const c_void, at: usize, dtype: i32, stride: i64| ztree_array {
        data: unsafe { (p as *const u8).add(at) } as *const c_void,
        dtype,
        stride,
    };
    let pos = if f32_pos {
        [arr(aos_p, 0, ZTREE_DTYPE_F32, 24), arr(aos_p, 4, ZTREE_DTYPE_F32, 24), arr(aos_p, 8, ZTREE_DTYPE_F32, 24)]
    } else {
        [arr(soa_p, 0, ZTREE_DTYPE_F64, 0), arr(soa_p, 8 * n, ZTREE_DTYPE_F64, 0), arr(soa_p, 16 * n, ZTREE_DTYPE_F64, 0)]
    };
    let vel = [arr(aos_p, 12, ZTREE_DTYPE_F32, 24), arr(aos_p, 16, ZTREE_DTYPE_F32, 24), arr(aos_p, 20, ZTREE_DTYPE_F32, 24)];
    let p = ztree_particles {
        struct_size: size_of::<ztree_particles>(),
        count: n as i64,
        memory: if device { ZTREE_MEMORY_CUDA_DEVICE } else { ZTREE_MEMORY_HOST },
        pos: if n == 0 { pos.map(|a| ztree_array { data: std::ptr::null(), ..a }) } else { pos },
        vel: if n == 0 { [NONE; 3] } else { vel },
        mass: if n == 0 { NONE } else { arr(mass_p, 0, ZTREE_DTYPE_F64, 0) },
        ids: if n == 0 { NONE } else { arr(ids_p, 0, ZTREE_DTYPE_U64, 0) },
        types: NONE,
    };
    Particles { p, _keep: keep, _host: (aos, soa) }
}

/// Every kNN output of one call (context-owned arrays), as bits.
fn knn_rows(
    ctx: *mut ztree_context,
    src: &ztree_particles,
    qry: Option<&ztree_particles>,
    kp: &ztree_knn_params,
) -> Result<Vec<Vec<u64>>, (ztree_status, String)> {
    let mut o = ztree_knn_output::defaults();
    let s = unsafe { ztree_knn(ctx, src, qry.map_or(std::ptr::null(), |q| q as *const _), kp, &mut o) };
    if s != ztree_status::ZTREE_OK {
        return Err((s, message(ctx)));
    }
    let (nq, k) = (o.n_queries as usize, kp.k as usize);
    let f = |p: *const f64, n: usize| {
        if n == 0 || p.is_null() { Vec::new() } else { unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|v| v.to_bits()).collect() }
    };
    let i = |p: *const i64, n: usize| {
        if n == 0 || p.is_null() { Vec::new() } else { unsafe { std::slice::from_raw_parts(p, n) }.iter().map(|&v| v as u64).collect() }
    };
    Ok(vec![i(o.indices, nq * k), f(o.distances, nq * k), f(o.kth_distance, nq), f(o.density, nq), f(o.scalar_mean, nq)])
}

/// Rows `lo .. hi` of a serial call's outputs (k entries per row for the lists).
fn slice_rows(all: &[Vec<u64>], lo: usize, hi: usize, k: usize) -> Vec<Vec<u64>> {
    all.iter()
        .enumerate()
        .map(|(j, v)| match (v.is_empty(), j < 2) {
            (true, _) => Vec::new(),
            (false, true) => v[lo * k..hi * k].to_vec(),
            (false, false) => v[lo..hi].to_vec(),
        })
        .collect()
}

fn knn_params(k: i32, scalar: &ztree_array) -> ztree_knn_params {
    ztree_knn_params {
        struct_size: size_of::<ztree_knn_params>(),
        k,
        outputs: ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES | ZTREE_KNN_KTH_DISTANCE | ZTREE_KNN_DENSITY | ZTREE_KNN_SCALAR_MEAN,
        order: ZTREE_ORDER_INPUT,
        scalar: *scalar,
        cuda_stream: std::ptr::null_mut(),
        kth_hint: NONE,
        source_type_mask: 0,
        query_type_mask: 0,
    }
}

/// The FoF call's labels, rows and members (context-owned), as bits.
#[allow(clippy::type_complexity)]
fn fof_rows(ctx: *mut ztree_context, p: &ztree_particles, fp: &ztree_fof_params) -> Result<(Vec<i64>, Vec<Vec<u64>>), (ztree_status, String)> {
    let mut o = ztree_fof_output::defaults();
    let s = unsafe { ztree_fof(ctx, p, fp, &mut o) };
    if s != ztree_status::ZTREE_OK {
        return Err((s, message(ctx)));
    }
    let n = p.count as usize;
    let labels = if n > 0 { unsafe { std::slice::from_raw_parts(o.labels, n) }.to_vec() } else { Vec::new() };
    let nh = o.n_halos as usize;
    let offsets = unsafe { std::slice::from_raw_parts(o.member_offsets, nh + 1) };
    let members = unsafe { std::slice::from_raw_parts(o.member_indices, offsets[nh] as usize) };
    let rows = unsafe { std::slice::from_raw_parts(o.halos, nh) }
        .iter()
        .enumerate()
        .map(|(h, r)| {
            let mut w = vec![r.tag as u64, r.count as u64, r.mass.to_bits(), r.vel_dispersion.to_bits(), r.inertia_radius.to_bits()];
            w.extend(r.pos.iter().chain(&r.vel).map(|v| v.to_bits()));
            w.extend(members[offsets[h] as usize..offsets[h + 1] as usize].iter().map(|&m| m as u64));
            w
        })
        .collect();
    Ok((labels, rows))
}

fn contexts(world: &mpi::topology::SimpleCommunicator, periodic: bool) -> (*mut ztree_context, *mut ztree_context) {
    let mut cfg = ztree_config::defaults();
    cfg.periodic = periodic as i32;
    cfg.box_size = [1.0; 3];
    cfg.threads = 1;
    cfg.particle_mass = 2.5;
    let comm_f = unsafe { mpi::ffi::MPI_Comm_c2f(world.as_raw()) };
    let (mut dist, mut serial) = (std::ptr::null_mut(), std::ptr::null_mut());
    assert_eq!(ztree_create_mpi(&cfg, comm_f, &mut dist), ztree_status::ZTREE_OK);
    assert_eq!(ztree_create(&cfg, &mut serial), ztree_status::ZTREE_OK);
    (dist, serial)
}

fn sum(world: &mpi::topology::SimpleCommunicator, v: usize) -> usize {
    let mut t = 0u64;
    world.all_reduce_into(&(v as u64), &mut t, mpi::collective::SystemOperation::sum());
    t as usize
}

/// kNN on device arrays against the serial call, over layouts, element types, domains, k
/// and query sets. Returns the failures on this rank.
fn knn_cases(world: &mpi::topology::SimpleCommunicator) -> usize {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let (g, q) = (global(1800, 11), global(700, 12));
    let mut failures = 0;
    for periodic in [true, false] {
        let (dist, serial) = contexts(world, periodic);
        for (kind, ks) in [("balanced", &[1, 16, 133][..]), ("unbalanced", &[16][..]), ("empty ranks", &[1, 16][..]), ("one rank", &[16, 133][..])] {
            let (so, qo) = (layout(kind, g.pos.len(), size), layout(kind, q.pos.len(), size));
            for f32_pos in [true, false] {
                for &k in ks {
                    for separate in [false, true] {
                        let what =
                            format!("kNN {kind}, {}, periodic {periodic}, k {k}, separate queries {separate}", if f32_pos { "f32" } else { "f64" });
                        let all_s = particles(&g, 0, g.pos.len(), f32_pos, false);
                        let all_q = particles(&q, 0, q.pos.len(), f32_pos, false);
                        let scalar_all = ztree_array { data: g.scalar.as_ptr() as *const c_void, dtype: ZTREE_DTYPE_F64, stride: 0 };
                        let want = knn_rows(serial, &all_s.p, separate.then_some(&all_q.p), &knn_params(k, &scalar_all)).expect("the serial call");
                        let mine_s = particles(&g, so[rank], so[rank + 1], f32_pos, true);
                        let mine_q = particles(&q, qo[rank], qo[rank + 1], f32_pos, true);
                        let sc = DeviceMemory::from_slice(&g.scalar[so[rank]..so[rank + 1]]);
                        let scalar = ztree_array {
                            data: if so[rank] == so[rank + 1] { std::ptr::null() } else { sc.ptr() },
                            dtype: ZTREE_DTYPE_F64,
                            stride: 0,
                        };
                        let got = knn_rows(dist, &mine_s.p, separate.then_some(&mine_q.p), &knn_params(k, &scalar));
                        let (lo, hi) = if separate { (qo[rank], qo[rank + 1]) } else { (so[rank], so[rank + 1]) };
                        match got {
                            Ok(rows) if rows == slice_rows(&want, lo, hi, k as usize) => {}
                            Ok(_) => {
                                eprintln!("rank {rank}: {what}: the device rows differ from the serial CPU call's");
                                failures += 1;
                            }
                            Err((s, m)) => {
                                eprintln!("rank {rank}: {what}: {s:?}: {m}");
                                failures += 1;
                            }
                        }
                    }
                }
            }
        }
        ztree_destroy(dist);
        ztree_destroy(serial);
    }
    failures
}

/// FoF with the catalogue on device arrays against the serial call: labels, and every row
/// with its members, gathered on rank 0 and spread over the ranks (`host_rank0`: rank 0
/// passes host arrays, the others device arrays).
#[allow(clippy::too_many_arguments)]
fn fof_case(
    world: &mpi::topology::SimpleCommunicator,
    dist: *mut ztree_context,
    serial: *mut ztree_context,
    g: &Global,
    kind: &str,
    fp: &ztree_fof_params,
    f32_pos: bool,
    host_rank0: bool,
) -> usize {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let off = layout(kind, g.pos.len(), size);
    let mix = if host_rank0 { ", rank 0 on the host" } else { "" };
    let what = format!("FoF {kind}, min {}, {}{mix}", fp.min_members, if f32_pos { "f32" } else { "f64" });
    let all = particles(g, 0, g.pos.len(), f32_pos, false);
    let (want_labels, want_rows) = fof_rows(serial, &all.p, fp).expect("the serial call");
    let mine = particles(g, off[rank], off[rank + 1], f32_pos, !(host_rank0 && rank == 0));
    let mut failures = 0;
    for gather in [1, 0] {
        let fpg = ztree_fof_params { gather, ..*fp };
        match fof_rows(dist, &mine.p, &fpg) {
            Ok((labels, rows)) => {
                if labels[..] != want_labels[off[rank]..off[rank + 1]] {
                    eprintln!("rank {rank}: {what}, gather {gather}: labels differ");
                    failures += 1;
                }
                if gather == 1 && rank == 0 && rows != want_rows {
                    eprintln!("rank {rank}: {what}: the catalogue on rank 0 differs ({} rows, expected {})", rows.len(), want_rows.len());
                    failures += 1;
                }
                if gather == 1 && rank != 0 && !rows.is_empty() {
                    eprintln!("rank {rank}: {what}: rows on a rank other than 0 with gather");
                    failures += 1;
                }
                if gather == 0 {
                    // Each row once over the ranks, each equal to the serial row of its tag.
                    let bad = rows.iter().filter(|r| !want_rows.iter().any(|w| w == *r)).count();
                    if bad > 0 {
                        eprintln!("rank {rank}: {what}: {bad} distributed rows differ from the serial rows");
                        failures += 1;
                    }
                    if sum(world, rows.len()) != want_rows.len() {
                        eprintln!("rank {rank}: {what}: the ranks hold {} rows, expected {}", sum(world, rows.len()), want_rows.len());
                        failures += 1;
                    }
                }
            }
            Err((s, m)) => {
                eprintln!("rank {rank}: {what}: {s:?}: {m}");
                failures += 1;
            }
        }
    }
    failures
}

fn fof_cases(world: &mpi::topology::SimpleCommunicator) -> usize {
    let g = global(2500, 21);
    let mut failures = 0;
    for periodic in [true, false] {
        let (dist, serial) = contexts(world, periodic);
        for kind in ["balanced", "unbalanced", "empty ranks", "one rank"] {
            for (min, f32_pos) in [(2, true), (20, false)] {
                let fp = ztree_fof_params {
                    struct_size: size_of::<ztree_fof_params>(),
                    linking_length: if periodic { 0.0 } else { 0.02 },
                    b: if periodic { 0.2 } else { 0.0 },
                    min_members: min,
                    order: ZTREE_CATALOGUE_GADGET,
                    members: 1,
                    gather: 1,
                    cuda_stream: std::ptr::null_mut(),
                    type_mask: 0,
                    ..ztree_fof_params::defaults()
                };
                failures += fof_case(world, dist, serial, &g, kind, &fp, f32_pos, false);
                if kind == "balanced" {
                    // Ranks mixing host (rank 0) and device arrays.
                    failures += fof_case(world, dist, serial, &g, kind, &fp, f32_pos, true);
                }
            }
        }
        ztree_destroy(dist);
        ztree_destroy(serial);
    }
    failures
}

/// FoF on the GADGET-4 snapshot in device memory, split over the ranks: the serial call's
/// groups and rows, and GADGET-4's number of groups.
fn gadget4(world: &mpi::topology::SimpleCommunicator) -> usize {
    let dir = std::path::PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/gadget4-64-z1");
    if !require::require(&format!("the GADGET-4 snapshot at {}", dir.display()), dir.join("pos.f32").exists()) {
        return 0;
    }
    let read = |name: &str| std::fs::read(dir.join(name)).unwrap();
    let f32s = |b: Vec<u8>| b.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect::<Vec<f32>>();
    let (pos, vel) = (f32s(read("pos.f32")), f32s(read("vel.f32")));
    let ids: Vec<u32> = read("ids.u32").chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
    let n_groups = read("GroupLen.i32").len() / 4;
    let n = ids.len();
    let g = Global {
        pos: pos.chunks_exact(3).map(|c| [c[0] as f64, c[1] as f64, c[2] as f64]).collect(),
        vel: vel.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect(),
        mass: vec![4.075161606358443; n],
        scalar: vec![0.0; n],
        ids: ids.iter().map(|&i| i as u64).collect(),
    };
    let mut cfg = ztree_config::defaults();
    cfg.periodic = 1;
    cfg.box_size = [50.0; 3];
    cfg.threads = 1;
    let comm_f = unsafe { mpi::ffi::MPI_Comm_c2f(world.as_raw()) };
    let (mut dist, mut serial) = (std::ptr::null_mut(), std::ptr::null_mut());
    assert_eq!(ztree_create_mpi(&cfg, comm_f, &mut dist), ztree_status::ZTREE_OK);
    assert_eq!(ztree_create(&cfg, &mut serial), ztree_status::ZTREE_OK);
    let fp = ztree_fof_params {
        struct_size: size_of::<ztree_fof_params>(),
        linking_length: 0.15625,
        b: 0.0,
        min_members: 32,
        order: ZTREE_CATALOGUE_GADGET,
        members: 1,
        gather: 1,
        cuda_stream: std::ptr::null_mut(),
        type_mask: 0,
        ..ztree_fof_params::defaults()
    };
    let mut failures = fof_case(world, dist, serial, &g, "balanced", &fp, true, false);
    let (_, rows) = fof_rows(serial, &particles(&g, 0, n, true, false).p, &fp).unwrap();
    if rows.len() != n_groups {
        eprintln!("GADGET-4: {} groups, GADGET-4 has {n_groups}", rows.len());
        failures += 1;
    }
    ztree_destroy(dist);
    ztree_destroy(serial);
    failures
}

/// The collective error rules with device arrays: a bad rank returns its own status, the
/// others `ZTREE_ERR_REMOTE`, all in the same call; the next call works. And ranks mixing
/// host and device arrays get the serial call's results.
fn errors(world: &mpi::topology::SimpleCommunicator) -> usize {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let g = global(1200, 31);
    let off = layout("balanced", g.pos.len(), size);
    let (dist, serial) = contexts(world, true);
    let kp = knn_params(8, &NONE);
    let kp = ztree_knn_params { outputs: ZTREE_KNN_INDICES | ZTREE_KNN_DENSITY, ..kp };
    let all = particles(&g, 0, g.pos.len(), false, false);
    let want = knn_rows(serial, &all.p, None, &kp).unwrap();
    let want = slice_rows(&want, off[rank], off[rank + 1], 8);
    let mut failures = 0;
    let mut expect = |what: &str, bad_rank: usize, bad_status: ztree_status, got: Result<Vec<Vec<u64>>, (ztree_status, String)>| {
        let wanted = if rank == bad_rank { bad_status } else { ztree_status::ZTREE_ERR_REMOTE };
        match got {
            Err((s, _)) if s == wanted => {}
            Err((s, m)) => {
                eprintln!("rank {rank}: {what}: {s:?} ({m}), expected {wanted:?}");
                failures += 1;
            }
            Ok(_) => {
                eprintln!("rank {rank}: {what}: succeeded, expected {wanted:?}");
                failures += 1;
            }
        }
    };
    let last = size - 1;
    // A host pointer passed as device memory on the last rank.
    strict_device_pointers(true);
    let p = if rank == last { particles(&g, off[rank], off[rank + 1], false, false) } else { particles(&g, off[rank], off[rank + 1], false, true) };
    let p_dev = ztree_particles { memory: ZTREE_MEMORY_CUDA_DEVICE, ..p.p };
    expect("a host pointer as device memory", last, ztree_status::ZTREE_ERR_INVALID_ARGUMENT, knn_rows(dist, &p_dev, None, &kp));
    // A rank whose device cannot be used.
    fail_devices(rank == 0);
    let d = particles(&g, off[rank], off[rank + 1], false, true);
    expect("a device that cannot be used", 0, ztree_status::ZTREE_ERR_NO_DEVICE, knn_rows(dist, &d.p, None, &kp));
    fail_devices(false);
    // NaN on the last rank.
    let mut h = Global { pos: g.pos.clone(), vel: g.vel.clone(), mass: g.mass.clone(), scalar: g.scalar.clone(), ids: g.ids.clone() };
    h.pos[off[last]][1] = f64::NAN;
    let nan = particles(&h, off[rank], off[rank + 1], false, true);
    expect("NaN on one rank", last, ztree_status::ZTREE_ERR_NON_FINITE, knn_rows(dist, &nan.p, None, &kp));
    // The next call works, and a mix of host (rank 0) and device arrays (the others) gives
    // the serial call's rows.
    for mixed in [false, true] {
        let p = particles(&g, off[rank], off[rank + 1], false, !(mixed && rank == 0));
        match knn_rows(dist, &p.p, None, &kp) {
            Ok(rows) if rows == want => {}
            Ok(_) => {
                eprintln!("rank {rank}: after the errors (mixed {mixed}): rows differ from the serial call's");
                failures += 1;
            }
            Err((s, m)) => {
                eprintln!("rank {rank}: after the errors (mixed {mixed}): {s:?}: {m}");
                failures += 1;
            }
        }
    }
    strict_device_pointers(false);
    ztree_destroy(dist);
    ztree_destroy(serial);
    failures
}

/// Radius counts and lists, DBSCAN labels and classes, and FoF with a type mask, on device
/// arrays over MPI (staged through host memory; rank 0 passes host arrays), against the
/// serial host calls on all particles. Returns the failures on this rank.
fn staged_cases(world: &mpi::topology::SimpleCommunicator) -> usize {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let g = global(1500, 41);
    let n = g.pos.len();
    let off = layout("balanced", n, size);
    let (lo, hi) = (off[rank], off[rank + 1]);
    let (dist, serial) = contexts(world, true);
    let all = particles(&g, 0, n, false, false);
    // Rank 0 passes host arrays (unless it is alone), the others device arrays.
    let mine = particles(&g, lo, hi, false, rank != 0 || size == 1);
    let mut failures = 0;
    let mut check = |what: &str, ok: bool| {
        if !ok {
            eprintln!("rank {rank}: {what} differs from the serial call");
            failures += 1;
        }
    };
    let ints = |p: *const i64, len: usize| if len == 0 { vec![] } else { unsafe { std::slice::from_raw_parts(p, len) }.to_vec() };
    // Radius counts and lists.
    let mut rp = ztree_radius_params::defaults();
    rp.radius = 0.05;
    rp.outputs = ZTREE_RADIUS_COUNTS | ZTREE_RADIUS_LISTS;
    rp.list_order = ZTREE_LIST_BY_INDEX;
    let radius = |ctx: *mut ztree_context, p: &ztree_particles| {
        let mut o = ztree_radius_output::defaults();
        let s = unsafe { ztree_radius(ctx, p, std::ptr::null(), &rp, &mut o) };
        assert_eq!(s, ztree_status::ZTREE_OK, "radius: {}", message(ctx));
        let nq = o.n_queries as usize;
        let offsets = ints(o.offsets, nq + 1);
        (ints(o.counts, nq), offsets.clone(), ints(o.indices, offsets[nq] as usize))
    };
    let (sc, so, si) = radius(serial, &all.p);
    let (dc, dof, di) = radius(dist, &mine.p);
    check("radius counts", dc == sc[lo..hi]);
    check("radius lists", (0..hi - lo).all(|q| di[dof[q] as usize..dof[q + 1] as usize] == si[so[lo + q] as usize..so[lo + q + 1] as usize]));
    // DBSCAN labels and classes (tags are minimum ids on both).
    let mut dp = ztree_dbscan_params::defaults();
    dp.eps = 0.05;
    dp.min_pts = 4;
    dp.classes = 1;
    let dbscan = |ctx: *mut ztree_context, p: &ztree_particles| {
        let mut o = ztree_dbscan_output::defaults();
        let s = unsafe { ztree_dbscan(ctx, p, &dp, &mut o) };
        assert_eq!(s, ztree_status::ZTREE_OK, "DBSCAN: {}", message(ctx));
        let m = p.count as usize;
        let classes = if m == 0 { vec![] } else { unsafe { std::slice::from_raw_parts(o.point_class, m) }.to_vec() };
        (ints(o.labels, m), classes, o.n_core)
    };
    let (sl, scl, score) = dbscan(serial, &all.p);
    let (dl, dcl, _) = dbscan(dist, &mine.p);
    check("DBSCAN labels", dl == sl[lo..hi]);
    check("DBSCAN classes", dcl == scl[lo..hi]);
    check("DBSCAN found clusters", score > 0 && sl.iter().any(|&l| l >= 0));
    ztree_destroy(dist);
    ztree_destroy(serial);
    failures
}

fn main() {
    let universe = mpi::initialize().expect("MPI");
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    emulate_devices(true);
    let mut failures = 0;
    for (name, run) in
        [("kNN", knn_cases as fn(&_) -> usize), ("FoF", fof_cases), ("GADGET-4", gadget4), ("errors", errors), ("staged", staged_cases)]
    {
        let f = sum(&world, run(&world));
        if rank == 0 {
            println!("mpi_device {name}: {size} ranks, {f} failures");
        }
        failures += f;
    }
    assert_eq!(failures, 0);
}
