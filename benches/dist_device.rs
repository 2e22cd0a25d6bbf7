//! What crosses PCIe in a distributed call on device arrays: every rank's particles in
//! (emulated) device memory, `Dist::knn_device` and `Dist::fof_device`, and the bytes the
//! call copied between the device and the host (the emulator counts exactly the copies a
//! GPU would make: the same host code drives both), per particle, against what a staged
//! call (every input array to the host, the host call, every output back) would copy.
//! Run under mpirun on 1 to 4 ranks; flags: [--n 1e6] [--k 16] [--spread slabs|keys].
//!
//!   cargo bench --bench dist_device --features cuda-emu --no-run
//!   mpirun -np 2 target/release/deps/dist_device-*

mod common;

use common::{Dist as Shape, generate};
use mpi::traits::*;
use ztree::__emulator::{DeviceMemory, emulated_device};
use ztree::{
    CatalogueScope, Config, DeviceFofFields, DeviceKnnFields, DeviceKnnOutput, DeviceOut, DevicePoints, Dist, Domain, FofParams, LinkingLength,
};

fn sum_all<C: Communicator>(c: &C, v: u64) -> u64 {
    let mut o = 0u64;
    c.all_reduce_into(&v, &mut o, mpi::collective::SystemOperation::sum());
    o
}

fn main() {
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let mut n = 1_000_000usize;
    let mut k = 16usize;
    let mut keys = false;
    let args: Vec<String> = std::env::args().skip(1).filter(|s| s != "--bench").collect();
    for w in args.windows(2) {
        match w[0].as_str() {
            "--n" => n = w[1].parse::<f64>().unwrap() as usize,
            "--k" => k = w[1].parse::<f64>().unwrap() as usize,
            "--spread" => keys = w[1] == "keys",
            _ => {}
        }
    }
    let dist = Dist::new(Config { threads: 1, ..Default::default() }, world.duplicate()).unwrap();
    let global = generate(Shape::Clustered, n, 42);
    // x-slabs, as a simulation's spatial decomposition, or (`--spread keys`) equal shares
    // of the Morton order, close to ztree's own decomposition (few particles move).
    let mine: Vec<[f32; 3]> = if keys {
        let key = |p: &[f64; 3]| {
            let c = p.map(|x| ((x * (1u64 << 21) as f64) as u64).min((1 << 21) - 1));
            (0..21).rev().fold(0u64, |k, b| (k << 3) | ((c[0] >> b) & 1) << 2 | ((c[1] >> b) & 1) << 1 | ((c[2] >> b) & 1))
        };
        let mut order: Vec<(u64, usize)> = global.iter().enumerate().map(|(i, p)| (key(p), i)).collect();
        order.sort_unstable();
        order[rank * n / size..(rank + 1) * n / size].iter().map(|&(_, i)| global[i].map(|c| c as f32)).collect()
    } else {
        let (lo, hi) = (rank as f64 / size as f64, (rank + 1) as f64 / size as f64);
        global.iter().filter(|p| p[0] >= lo && p[0] < hi).map(|p| p.map(|c| c as f32)).collect()
    };
    drop(global);
    let m = mine.len();
    let device = emulated_device();
    let pos = DeviceMemory::from_slice(&mine);
    let vel = DeviceMemory::from_slice(&vec![[0.25f32; 3]; m]);
    let mass = DeviceMemory::from_slice(&vec![1.5f64; m]);
    let ids = DeviceMemory::from_slice(&(0..m as u64).collect::<Vec<u64>>());
    let base = pos.ptr() as *const f32;
    // SAFETY (every device array below): emulated device memory of the sizes given.
    let pts = unsafe { DevicePoints::<f32, 3>::new([base, base.add(1), base.add(2)], m, 12) };
    let domain = Domain::Periodic([1.0; 3]);
    let per = |b: u64| b as f64 / n as f64;
    if rank == 0 {
        println!(
            "ztree device arrays over MPI: N = {n:.1e} clustered (f32), {size} rank(s), input spread {}, the CUDA emulator's copies (a GPU's), bytes per particle",
            if keys { "Morton shares" } else { "x-slabs" }
        );
        println!("| call | to host | to device | total | of which MPI's (sent / received) | staged call (inputs down, outputs up) |");
        println!("|---|---|---|---|---|---|");
    }
    let measure = |name: &str, staged: f64, call: &dyn Fn() -> u64| {
        world.barrier();
        let (h0, d0) = device.copied_bytes();
        let sent = call();
        let (h1, d1) = device.copied_bytes();
        let (h, d, m) = (sum_all(&world, h1 - h0), sum_all(&world, d1 - d0), sum_all(&world, sent));
        if rank == 0 {
            println!("| {name} | {:.2} | {:.2} | {:.2} | {:.2} | {staged:.1} |", per(h), per(d), per(h + d), per(m));
        }
    };
    // kNN, the density only and the full lists.
    let dens = DeviceMemory::from_slice(&vec![0.0f64; m]);
    let knn_fields = DeviceKnnFields::default();
    let density = || {
        // SAFETY: `dens` holds m doubles.
        let out = DeviceKnnOutput::<f32> { density: Some(unsafe { DeviceOut::new(dens.ptr() as *mut f64, m) }), ..Default::default() };
        dist.knn_device(&device, &domain, &pts, None, &knn_fields, k, &out).unwrap().dist.comm.bytes_sent()
    };
    measure(&format!("kNN k = {k}, density"), 12.0 + 8.0, &density);
    let idx = DeviceMemory::from_slice(&vec![0i64; m * k]);
    let d2 = DeviceMemory::from_slice(&vec![0.0f64; m * k]);
    let lists = || {
        // SAFETY: `idx` and `d2` hold m * k values.
        let out = DeviceKnnOutput::<f32> {
            indices: Some(unsafe { DeviceOut::new(idx.ptr() as *mut i64, m * k) }),
            distances: Some(unsafe { DeviceOut::widened(d2.ptr() as *mut f64, m * k) }),
            ..Default::default()
        };
        dist.knn_device(&device, &domain, &pts, None, &knn_fields, k, &out).unwrap().dist.comm.bytes_sent()
    };
    measure(&format!("kNN k = {k}, lists"), 12.0 + 16.0 * k as f64, &lists);
    // FoF with the catalogue (velocities, masses, ids), the labels on the device.
    let labels = DeviceMemory::from_slice(&vec![0i64; m]);
    // SAFETY: the fields hold m values of the types given.
    let fields = unsafe {
        DeviceFofFields::<3> {
            velocities: Some([0, 1, 2].map(|d| ztree::DeviceArray::new((vel.ptr() as *const f32).add(d).cast(), ztree::DeviceType::F32, m, 12))),
            masses: Some(ztree::DeviceArray::new(mass.ptr(), ztree::DeviceType::F64, m, 0)),
            particle_mass: 1.0,
            ids: Some(ztree::DeviceArray::new(ids.ptr(), ztree::DeviceType::U64, m, 0)),
        }
    };
    let params = FofParams { linking_length: LinkingLength::Relative(0.2), min_members: 20, ..Default::default() };
    let fof = || {
        // SAFETY: `labels` holds m values.
        let out = unsafe { DeviceOut::new(labels.ptr() as *mut i64, m) };
        dist.fof_device(&device, &domain, &pts, &fields, &params, CatalogueScope::Distributed, &out).unwrap().1.dist.comm.bytes_sent()
    };
    measure("FoF + catalogue (velocities, masses, ids)", 12.0 + 12.0 + 8.0 + 8.0 + 8.0, &fof);
}
