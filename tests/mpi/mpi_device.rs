//! Device arrays on an MPI context (staged through host copies) give exactly the host
//! arrays' results: kNN (every output) and FoF (labels, catalogue, members), on every rank,
//! with a rank without particles. The device is the CUDA emulator (its memory is host
//! memory), so this runs without a GPU. Run under `mpirun -np 1..4` (`make test-mpi`).

use std::ffi::{CStr, c_void};

use mpi::traits::*;
use ztree::__emulator::*;

fn lcg(s: &mut u64) -> f64 {
    *s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
    (*s >> 11) as f64 / (1u64 << 53) as f64
}

fn status(ctx: *mut ztree_context, s: ztree_status, what: &str) {
    assert_eq!(s, ztree_status::ZTREE_OK, "{what}: {:?}", unsafe { CStr::from_ptr(ztree_last_error(ctx)) });
}

fn knn_words(ctx: *mut ztree_context, p: &ztree_particles, kp: &ztree_knn_params) -> Vec<u64> {
    let mut o: ztree_knn_output = unsafe { std::mem::zeroed() };
    status(ctx, unsafe { ztree_knn(ctx, p, std::ptr::null(), kp, &mut o) }, "kNN");
    let (nq, k) = (o.n_queries as usize, kp.k as usize);
    let mut w: Vec<u64> = unsafe { std::slice::from_raw_parts(o.indices, nq * k) }.iter().map(|&v| v as u64).collect();
    w.extend(unsafe { std::slice::from_raw_parts(o.distances, nq * k) }.iter().map(|v| v.to_bits()));
    w.extend(unsafe { std::slice::from_raw_parts(o.density, nq) }.iter().map(|v| v.to_bits()));
    w.extend(unsafe { std::slice::from_raw_parts(o.scalar_mean, nq) }.iter().map(|v| v.to_bits()));
    w.push(nq as u64);
    w
}

fn fof_words(ctx: *mut ztree_context, p: &ztree_particles, fp: &ztree_fof_params) -> Vec<u64> {
    let mut o: ztree_fof_output = unsafe { std::mem::zeroed() };
    status(ctx, unsafe { ztree_fof(ctx, p, fp, &mut o) }, "FoF");
    let n = p.count as usize;
    let nh = o.n_halos as usize;
    let mut w: Vec<u64> = if n > 0 { unsafe { std::slice::from_raw_parts(o.labels, n) }.iter().map(|&v| v as u64).collect() } else { Vec::new() };
    for h in unsafe { std::slice::from_raw_parts(o.halos, nh) } {
        w.extend([h.tag as u64, h.count as u64, h.mass.to_bits(), h.vel_dispersion.to_bits(), h.inertia_radius.to_bits()]);
        w.extend(h.pos.iter().chain(&h.vel).map(|v| v.to_bits()));
    }
    let offsets = unsafe { std::slice::from_raw_parts(o.member_offsets, nh + 1) };
    w.extend(unsafe { std::slice::from_raw_parts(o.member_indices, offsets[nh] as usize) }.iter().map(|&v| v as u64));
    w.extend([o.n_groups_total as u64, nh as u64, o.linking_length.to_bits()]);
    w
}

fn main() {
    let universe = mpi::initialize().expect("MPI");
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    emulate_devices(true);
    let mut cfg: ztree_config = unsafe { std::mem::zeroed() };
    ztree_config_default(&mut cfg);
    cfg.periodic = 1;
    cfg.box_size = [1.0; 3];
    cfg.threads = 1;
    let comm_f = unsafe { mpi::ffi::MPI_Comm_c2f(world.as_raw()) };
    let mut ctx = std::ptr::null_mut();
    assert_eq!(ztree_create_mpi(&cfg, comm_f, &mut ctx), ztree_status::ZTREE_OK);

    // This rank's particles (rank 1 of 3 or more has none): f32 positions in an array of
    // structs with velocities, f64 masses, u64 ids.
    let n = if size >= 3 && rank == 1 { 0 } else { 1500 + 300 * rank };
    let mut s = 1 + rank as u64;
    let aos: Vec<f32> = (0..n * 6)
        .map(|i| if i % 6 < 3 { (if i % 18 < 6 { 0.4 + 0.02 * lcg(&mut s) } else { lcg(&mut s) }) as f32 } else { (lcg(&mut s) - 0.5) as f32 })
        .collect();
    let mass: Vec<f64> = (0..n).map(|_| 0.5 + lcg(&mut s)).collect();
    let scalar: Vec<f64> = (0..n).map(|_| lcg(&mut s)).collect();
    let ids: Vec<u64> = (0..n as u64).map(|i| 1_000_000 * rank as u64 + i).collect();
    let arr = |p: *const c_void, dtype: i32, stride: i64| ztree_array { data: p, dtype, stride };
    let f = |off: usize| arr(unsafe { aos.as_ptr().add(off) } as *const c_void, ZTREE_DTYPE_F32, 24);
    let host = ztree_particles {
        count: n as i64,
        memory: ZTREE_MEMORY_HOST,
        pos: [f(0), f(1), f(2)],
        vel: [f(3), f(4), f(5)],
        mass: arr(mass.as_ptr() as *const c_void, ZTREE_DTYPE_F64, 0),
        ids: arr(ids.as_ptr() as *const c_void, ZTREE_DTYPE_U64, 0),
    };
    let device = ztree_particles { memory: ZTREE_MEMORY_CUDA_DEVICE, ..host };

    let mut failures = 0;
    for k in [1, 16] {
        let kp = ztree_knn_params {
            k,
            outputs: ZTREE_KNN_INDICES | ZTREE_KNN_DISTANCES | ZTREE_KNN_DENSITY | ZTREE_KNN_SCALAR_MEAN,
            order: ZTREE_ORDER_INPUT,
            scalar: arr(scalar.as_ptr() as *const c_void, ZTREE_DTYPE_F64, 0),
            cuda_stream: std::ptr::null_mut(),
            kth_hint: arr(std::ptr::null(), 0, 0),
        };
        let want = knn_words(ctx, &host, &kp);
        let got = knn_words(ctx, &device, &kp);
        if got != want {
            eprintln!("rank {rank}: kNN k = {k}: device arrays differ from host arrays");
            failures += 1;
        }
    }
    let fp = ztree_fof_params {
        linking_length: 0.0,
        b: 0.2,
        min_members: 2,
        order: ZTREE_CATALOGUE_GADGET,
        members: 1,
        gather: 1,
        cuda_stream: std::ptr::null_mut(),
    };
    let want = fof_words(ctx, &host, &fp);
    let got = fof_words(ctx, &device, &fp);
    if got != want {
        eprintln!("rank {rank}: FoF: device arrays differ from host arrays");
        failures += 1;
    }
    ztree_destroy(ctx);
    let mut total = 0;
    world.all_reduce_into(&failures, &mut total, mpi::collective::SystemOperation::sum());
    if rank == 0 {
        println!("mpi_device: {size} ranks, {total} failures");
    }
    assert_eq!(total, 0);
}
