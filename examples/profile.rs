//! A profiling driver over the Rust API: one job on points from a .npy file (N x 3, f32
//! or f64, little endian), repeated, with the stage breakdown of each run. For perf,
//! callgrind and quick A/B checks of the hot path; the peer comparison is
//! benches/peers/.
//!
//! cargo run --release --example profile -- knn FILE K [--box L] [--threads T] [--reps R] [--zorder] [--huge] [--leaf N] [--coarsening C] [--volume-factor V]
//! cargo run --release --example profile -- fof FILE LINK [--box L] [--threads T] [--reps R] [--leaf N] [--coarsening C] [--volume-factor V]
//! (`--huge`: the kNN outputs madvise(MADV_HUGEPAGE)d before first touch, Linux.)

use std::time::Instant;

use ztree::{Config, Context, Domain, FofFields, FofParams, KnnOutput, KnnParams, LinkingLength, Real, SourceFields, TreeParams};

fn read_npy(path: &str) -> (Vec<f64>, bool) {
    let b = std::fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert_eq!(&b[..6], b"\x93NUMPY", "{path}: not a .npy file");
    let hlen = u16::from_le_bytes([b[8], b[9]]) as usize;
    let header = std::str::from_utf8(&b[10..10 + hlen]).unwrap();
    let f32 = header.contains("<f4");
    assert!(f32 || header.contains("<f8"), "{path}: want <f4 or <f8, header {header}");
    let data = &b[10 + hlen..];
    let v = if f32 {
        data.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap()) as f64).collect()
    } else {
        data.chunks_exact(8).map(|c| f64::from_le_bytes(c.try_into().unwrap())).collect()
    };
    (v, f32)
}

fn stages(t: &ztree::Timings) -> String {
    t.stages.iter().map(|(n, s)| format!("{n} {s:.4}")).collect::<Vec<_>>().join(", ")
}

fn run<T: Real>(ctx: &Context, job: &str, pts: &[[T; 3]], arg: f64, domain: &Domain<3>, reps: usize, zorder: bool) {
    let a: Vec<String> = std::env::args().collect();
    // --hint: from the second run on, each query's k-th distance from the run before is
    // passed as `KnnParams::kth_hint`; --jitter F: before each later run every coordinate
    // moves by up to F times the point's own k-th distance (a time step's motion).
    let use_hint = a.iter().any(|x| x == "--hint");
    let jitter = a.iter().position(|x| x == "--jitter").map(|i| a[i + 1].parse::<f64>().unwrap());
    let mut moved: Vec<[T; 3]> = pts.to_vec();
    let mut kth: Vec<f64> = Vec::new();
    let mut rng = 0x9e3779b97f4a7c15u64;
    // Outputs allocated once, as a simulation reuses its arrays: only the first run pays
    // the page faults of fresh memory.
    let (k, n) = (arg as usize, pts.len());
    let (mut idx, mut dist) = if job == "knn" { (vec![0i64; n * k], vec![T::ZERO; n * k]) } else { (Vec::new(), Vec::new()) };
    if std::env::args().any(|x| x == "--huge") {
        unsafe extern "C" {
            fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
        }
        for (p, bytes) in [(idx.as_mut_ptr() as usize, idx.len() * 8), (dist.as_mut_ptr() as usize, dist.len() * std::mem::size_of::<T>())] {
            if bytes < 2 * 4096 {
                continue;
            }
            let a = p.div_ceil(4096) * 4096;
            // SAFETY: a hint on pages inside the vector's allocation.
            unsafe { madvise(a as *mut _, (p + bytes - a) / 4096 * 4096, 14) };
        }
    }
    for _ in 0..reps {
        if let (Some(f), false) = (jitter, kth.is_empty()) {
            for (p, &h) in moved.iter_mut().zip(&kth) {
                for c in p.iter_mut() {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let u = (rng >> 11) as f64 / (1u64 << 53) as f64 * 2.0 - 1.0;
                    let mut x = c.to_f64() + f * h * u;
                    if let Domain::Periodic(l) = domain {
                        x = x.rem_euclid(l[0]);
                    }
                    *c = T::from_f64(x);
                    // (Rounding to T can land on L itself.)
                    if matches!(domain, Domain::Periodic(l) if c.to_f64() >= l[0]) {
                        *c = T::ZERO;
                    }
                }
            }
        }
        let t = Instant::now();
        if job == "knn" {
            let order = if zorder { ztree::OutputOrder::ZOrder } else { ztree::OutputOrder::Input };
            let mut out = KnnOutput { indices: Some(&mut idx), distances: Some(&mut dist), order, ..Default::default() };
            let hint = (use_hint && !kth.is_empty()).then_some(&kth as &dyn ztree::ScalarField);
            let st = ctx.knn_self(domain, &moved[..], &SourceFields::default(), &KnnParams { k, kth_hint: hint }, &mut out).unwrap();
            let secs = t.elapsed().as_secs_f64();
            kth = dist.chunks(k).map(|r| r[k - 1].to_f64()).collect();
            let mean_kth: f64 = kth.iter().sum::<f64>() / n as f64;
            println!(
                "knn {secs:.3} s | {} | planes {:?} | lists {:?} | mean kth {mean_kth:.12e}",
                stages(&st.timings),
                st.nodes_per_plane,
                st.walk.list_entries
            );
        } else {
            let params = FofParams { linking_length: LinkingLength::Absolute(arg), min_members: 20, ..Default::default() };
            let f = ctx.fof(domain, pts, &FofFields::default(), &params).unwrap();
            let secs = t.elapsed().as_secs_f64();
            println!("fof {secs:.3} s | {} | planes {:?} | groups >= 20: {}", stages(&f.stats.timings), f.stats.nodes_per_plane, f.stats.groups);
        }
    }
}

fn main() {
    let a: Vec<String> = std::env::args().skip(1).collect();
    if a.len() < 3 || !matches!(a[0].as_str(), "knn" | "fof") {
        eprintln!("usage: profile knn FILE K [options] | profile fof FILE LINK [options] (options: see the head of examples/profile.rs)");
        std::process::exit(2);
    }
    let (job, path, arg) = (a[0].clone(), a[1].clone(), a[2].parse::<f64>().unwrap());
    let opt = |name: &str| a.iter().position(|x| x == name).map(|i| a[i + 1].parse::<f64>().unwrap());
    let domain = opt("--box").map_or(Domain::Open, |l| Domain::Periodic([l; 3]));
    let threads = opt("--threads").unwrap_or(0.0) as usize;
    let reps = opt("--reps").unwrap_or(3.0) as usize;
    let zorder = a.iter().any(|x| x == "--zorder");
    let mut tree = TreeParams::default();
    if let Some(l) = opt("--leaf") {
        tree.leaf_size = l as usize;
    }
    if let Some(c) = opt("--coarsening") {
        tree.coarsening = c as usize;
    }
    if let Some(v) = opt("--volume-factor") {
        tree.max_volume_factor = v;
    }
    let ctx = Context::new(Config { threads, tree }).unwrap();
    let (v, f32) = read_npy(&path);
    if f32 {
        let pts: Vec<[f32; 3]> = v.chunks_exact(3).map(|c| [c[0] as f32, c[1] as f32, c[2] as f32]).collect();
        run(&ctx, &job, &pts, arg, &domain, reps, zorder);
    } else {
        let pts: Vec<[f64; 3]> = v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
        run(&ctx, &job, &pts, arg, &domain, reps, zorder);
    }
}
