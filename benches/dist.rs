//! Distributed benchmark: FoF with catalogue (b = 0.2, 20 members) and kNN density
//! (k = 16) on clustered points in the periodic unit box, over however many ranks it is
//! started on. Prints, on rank 0, the time of each job (slowest rank, best of `--reps`),
//! the serial engine's time on the same points for comparison (1 rank only), the stage
//! breakdown (slowest rank per stage), bytes communicated per particle by kind, and peak
//! memory per owned particle.
//!
//! cargo bench --bench dist --no-run, then e.g.
//!   mpirun -np 1 target/release/deps/dist-* --threads 2
//!   mpirun -np 2 target/release/deps/dist-* --threads 1
//! Flags: [--n 4e6] [--k 16] [--reps 3] [--threads T] [--spread slabs|random] [--no-knn]

mod common;

use std::time::Instant;

use common::{CountingAlloc, Dist as Shape, generate, mem_mark, mem_peak_since};
use mpi::traits::*;
use ztree::{CatalogueScope, Config, Context, Dist, Domain, FofFields, FofParams, KnnOutput, KnnParams, LinkingLength, SourceFields, Timings};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

struct Args {
    n: usize,
    k: usize,
    reps: usize,
    threads: usize,
    slabs: bool,
    knn: bool,
}

fn parse() -> Args {
    let mut a = Args { n: 4_000_000, k: 16, reps: 3, threads: 1, slabs: true, knn: true };
    let mut v: Vec<String> = std::env::args().skip(1).filter(|s| s != "--bench").collect();
    if let Some(j) = v.iter().position(|s| s == "--no-knn") {
        a.knn = false;
        v.remove(j);
    }
    let num = |s: &str| s.parse::<f64>().expect("a number") as usize;
    let mut i = 0;
    while i + 1 < v.len() {
        match v[i].as_str() {
            "--n" => a.n = num(&v[i + 1]),
            "--k" => a.k = num(&v[i + 1]),
            "--reps" => a.reps = num(&v[i + 1]).max(1),
            "--threads" => a.threads = num(&v[i + 1]),
            "--spread" => a.slabs = v[i + 1] == "slabs",
            x => panic!("unknown flag {x}"),
        }
        i += 2;
    }
    a
}

/// The slowest rank's value.
fn max_all<C: Communicator>(c: &C, v: f64) -> f64 {
    let mut o = 0.0;
    c.all_reduce_into(&v, &mut o, mpi::collective::SystemOperation::max());
    o
}

fn sum_all<C: Communicator>(c: &C, v: u64) -> u64 {
    let mut o = 0u64;
    c.all_reduce_into(&v, &mut o, mpi::collective::SystemOperation::sum());
    o
}

/// Per stage of rank 0's list, the slowest rank's time.
fn stages<C: Communicator>(c: &C, t: &Timings, names: &[&'static str]) -> Vec<(&'static str, f64)> {
    names.iter().map(|&n| (n, max_all(c, t.get(n)))).collect()
}

fn print_stages(title: &str, s: &[(&'static str, f64)]) {
    let parts: Vec<String> = s.iter().filter(|x| x.1 >= 0.0005).map(|(n, t)| format!("{n} {:.3}", t)).collect();
    println!("  {title}: {}", parts.join(" | "));
}

fn main() {
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let a = parse();
    let config = Config { threads: a.threads, ..Default::default() };
    let dist = Dist::new(config, world.duplicate()).unwrap();
    // Every rank generates the same global set and keeps its share: x-slabs (like a
    // simulation's spatial decomposition) or a random share.
    let global = generate(Shape::Clustered, a.n, 42);
    let mine: Vec<[f64; 3]> = if a.slabs {
        let (lo, hi) = (rank as f64 / size as f64, (rank + 1) as f64 / size as f64);
        global.iter().filter(|p| p[0] >= lo && p[0] < hi).copied().collect()
    } else {
        global.iter().enumerate().filter(|(i, _)| (i.wrapping_mul(2654435761) >> 7) % size == rank).map(|(_, p)| *p).collect()
    };
    let serial_pts = if size == 1 {
        Some(global)
    } else {
        drop(global);
        None
    };
    let n = mine.len();
    let domain = Domain::Periodic([1.0; 3]);
    if rank == 0 {
        println!(
            "ztree distributed benchmark: N = {:.1e} clustered, periodic unit box, {size} rank(s) x {} thread(s), input spread: {}, best of {}",
            a.n as f64,
            dist.context().threads(),
            if a.slabs { "x-slabs" } else { "random" },
            a.reps
        );
    }
    let data_bytes = (24 * a.n) as f64; // f64 positions: the particle data every job reads

    // FoF with catalogue.
    let params = FofParams { linking_length: LinkingLength::Relative(0.2), min_members: 20, ..Default::default() };
    let fields = FofFields::<3>::default();
    let mut labels = vec![0i64; n];
    let (mut best, mut best_stats, mut peak) = (f64::INFINITY, None, 0usize);
    for _ in 0..a.reps {
        world.barrier();
        let base = mem_mark();
        let t = Instant::now();
        let (cat, st) = dist.fof(&domain, &mine, &fields, &params, CatalogueScope::Distributed, &mut labels).unwrap();
        let el = max_all(&world, t.elapsed().as_secs_f64());
        peak = peak.max(mem_peak_since(base));
        drop(cat);
        if el < best {
            best = el;
            best_stats = Some(st);
        }
    }
    let st = best_stats.unwrap();
    let serial_fof = serial_pts.as_ref().map(|g| {
        let ctx = Context::new(config).unwrap();
        (0..a.reps)
            .map(|_| {
                let t = Instant::now();
                ctx.fof(&domain, g, &fields, &params).unwrap();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    });
    let total_bytes = sum_all(&world, st.dist.comm.bytes_sent()) as f64;
    let decomp_ghost = sum_all(&world, st.dist.comm.bytes_of("decompose")) as f64;
    let ghost_bytes = sum_all(&world, (st.dist.exported * 32) as u64) as f64;
    let msgs = sum_all(&world, st.dist.comm.messages());
    let peak_pp = max_all(&world, peak as f64 / st.dist.owned.max(1) as f64);
    let names: Vec<&'static str> = st.dist.timings.stages.iter().map(|s| s.0).collect();
    let fof_stages = stages(&world, &st.dist.timings, &names);
    if rank == 0 {
        println!(
            "\nFoF (b = 0.2, catalogue of groups >= 20): {:.3} s{}",
            best,
            serial_fof.map_or(String::new(), |s| format!(" (serial engine {s:.3} s, ratio {:.2})", best / s))
        );
        println!("  groups {} | cross-rank edges {} | messages {msgs}", st.groups, st.edges);
        println!(
            "  communicated per particle: total {:.2} B = particle moves {:.2} B + ghosts {:.2} B ({:.1}% of the 24 B/particle position data) + edges, catalogue and labels {:.2} B",
            total_bytes / a.n as f64,
            (decomp_ghost - ghost_bytes) / a.n as f64,
            ghost_bytes / a.n as f64,
            100.0 * ghost_bytes / data_bytes,
            (total_bytes - decomp_ghost) / a.n as f64
        );
        println!(
            "  beyond the particle moves: {:.2} B/particle = {:.1}% of the position data",
            (total_bytes - decomp_ghost + ghost_bytes) / a.n as f64,
            100.0 * (total_bytes - decomp_ghost + ghost_bytes) / data_bytes
        );
        println!("  peak memory {:.0} B per owned particle (slowest rank)", peak_pp);
        print_stages("stages (s, slowest rank)", &fof_stages);
    }

    if !a.knn {
        return;
    }
    // kNN density.
    let mut density = vec![0.0f64; n];
    let (mut best, mut best_stats, mut peak) = (f64::INFINITY, None, 0usize);
    for _ in 0..a.reps {
        world.barrier();
        let base = mem_mark();
        let t = Instant::now();
        let mut out = KnnOutput { density: Some(&mut density), ..Default::default() };
        let st = dist.knn_self(&domain, &mine, &SourceFields::default(), &KnnParams::new(a.k), &mut out).unwrap();
        let el = max_all(&world, t.elapsed().as_secs_f64());
        peak = peak.max(mem_peak_since(base));
        if el < best {
            best = el;
            best_stats = Some(st);
        }
    }
    let st = best_stats.unwrap();
    let serial_knn = serial_pts.as_ref().map(|g| {
        let ctx = Context::new(config).unwrap();
        let mut d = vec![0.0f64; g.len()];
        (0..a.reps)
            .map(|_| {
                let mut out = KnnOutput { density: Some(&mut d), ..Default::default() };
                let t = Instant::now();
                ctx.knn_self(&domain, g, &SourceFields::default(), &KnnParams::new(a.k), &mut out).unwrap();
                t.elapsed().as_secs_f64()
            })
            .fold(f64::INFINITY, f64::min)
    });
    let total_bytes = sum_all(&world, st.dist.comm.bytes_sent()) as f64;
    let decomp = sum_all(&world, st.dist.comm.bytes_of("decompose")) as f64;
    let shipped = sum_all(&world, st.dist.exported as u64);
    let msgs = sum_all(&world, st.dist.comm.messages());
    let peak_pp = max_all(&world, peak as f64 / st.dist.owned.max(1) as f64);
    let names: Vec<&'static str> = st.dist.timings.stages.iter().map(|s| s.0).collect();
    let knn_stages = stages(&world, &st.dist.timings, &names);
    if rank == 0 {
        println!(
            "\nkNN (k = {}, density only): {:.3} s{}",
            a.k,
            best,
            serial_knn.map_or(String::new(), |s| format!(" (serial engine {s:.3} s, ratio {:.2})", best / s))
        );
        println!("  queries sent to other ranks {shipped} ({:.2}% of N) | messages {msgs}", 100.0 * shipped as f64 / a.n as f64);
        println!(
            "  communicated per particle: total {:.2} B = particle moves {:.2} B + queries, replies and results {:.2} B",
            total_bytes / a.n as f64,
            decomp / a.n as f64,
            (total_bytes - decomp) / a.n as f64
        );
        println!("  peak memory {:.0} B per owned particle (slowest rank)", peak_pp);
        print_stages("stages (s, slowest rank)", &knn_stages);
    }
}
