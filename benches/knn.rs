//! kNN benchmark: ztree against kiddo (Rust) and scipy / pykdtree / scikit-learn
//! (Python, from .venv) on the same points. Prints a table with ratios and ztree's stage
//! breakdown and peak memory per point.
//!
//! cargo bench --bench knn -- [--n 1e6,4e6] [--k 16] [--dists uniform,clustered,outliers]
//!                            [--threads 2] [--reps 3] [--skip-slow] [--no-peers]

mod common;

use std::num::NonZero;
use std::time::Instant;

use common::*;
use ztree::{Config, Context, Domain, KnnOutput, KnnParams, Real, SourceFields, TreeParams};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

struct Args {
    ns: Vec<usize>,
    k: usize,
    dists: Vec<Dist>,
    threads: usize,
    skip_slow: bool,
    peers: bool,
    reps: usize,
    tree: TreeParams,
    summary: bool,
}

fn parse() -> Args {
    let mut a = Args {
        ns: vec![1_000_000, 4_000_000],
        k: 16,
        dists: vec![Dist::Uniform, Dist::Clustered, Dist::Outliers],
        threads: 0,
        skip_slow: false,
        peers: true,
        reps: 3,
        tree: TreeParams::default(),
        summary: false,
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    let num = |s: &str| s.parse::<f64>().unwrap() as usize;
    while i < v.len() {
        let next = || v[i + 1].clone();
        match v[i].as_str() {
            "--n" => a.ns = next().split(',').map(num).collect(),
            "--k" => a.k = num(&next()),
            "--threads" => a.threads = num(&next()),
            "--reps" => a.reps = num(&next()),
            "--leaf" => a.tree.leaf_size = num(&next()),
            "--coarsening" => a.tree.coarsening = num(&next()),
            "--dists" => {
                a.dists = next()
                    .split(',')
                    .map(|s| match s {
                        "uniform" => Dist::Uniform,
                        "clustered" => Dist::Clustered,
                        "outliers" => Dist::Outliers,
                        _ => panic!("unknown distribution {s}"),
                    })
                    .collect()
            }
            "--skip-slow" => {
                a.skip_slow = true;
                i -= 1;
            }
            "--summary" => {
                a.summary = true;
                i -= 1;
            }
            "--no-peers" => {
                a.peers = false;
                i -= 1;
            }
            "--bench" => i -= 1,
            x => panic!("unknown argument {x}"),
        }
        i += 2;
    }
    a
}

/// Runs ztree self-query kNN (full lists, as the peers return lists) and returns (best
/// seconds, stats of that run, peak bytes per point beyond inputs and outputs).
fn run_ztree<T: Real>(ctx: &Context, pts: &[[T; 3]], k: usize, reps: usize, summary: bool) -> (f64, ztree::KnnStats, f64) {
    let n = pts.len();
    let rows = if summary { 0 } else { n * k };
    let mut idx = vec![0i64; rows];
    let mut dist = vec![T::ZERO; rows];
    let mut kth = vec![T::ZERO; n];
    let mut best = (f64::INFINITY, None, 0usize);
    for _ in 0..reps {
        let base = mem_mark();
        let t = Instant::now();
        let mut out = if summary {
            KnnOutput { kth_distance: Some(&mut kth), ..Default::default() }
        } else {
            KnnOutput { indices: Some(&mut idx), distances: Some(&mut dist), ..Default::default() }
        };
        let stats = ctx.knn_self(&Domain::Open, pts, &SourceFields::default(), &KnnParams::new(k), &mut out).unwrap();
        let dt = t.elapsed().as_secs_f64();
        let peak = mem_peak_since(base);
        if dt < best.0 {
            best = (dt, Some(stats), peak);
        }
    }
    (best.0, best.1.unwrap(), best.2 as f64 / n as f64)
}

fn run_kiddo(pts: &[[f64; 3]], k: usize) -> f64 {
    use kiddo::{ImmutableKdTree, SquaredEuclidean};
    let t = Instant::now();
    let tree: ImmutableKdTree<f64, 3> = ImmutableKdTree::new_from_slice_parallel(pts).unwrap();
    let res = tree.query_batch(pts).nearest_n::<SquaredEuclidean<f64>>(NonZero::new(k).unwrap()).execute();
    let dt = t.elapsed().as_secs_f64();
    assert_eq!(res.len(), pts.len());
    dt
}

fn main() {
    let args = parse();
    let ctx = Context::new(Config { threads: args.threads, tree: args.tree }).unwrap();
    println!("# ztree kNN benchmark: self-query, k = {}, {} threads, open domain, tree build included", args.k, ctx.threads());
    println!(
        "# ztree: best of {} runs, {} in input order; peers run once",
        args.reps,
        if args.summary { "k-th neighbour distance only" } else { "full neighbour lists (indices + distances)" }
    );
    println!();
    println!("| distribution | N | ztree f64 (s) | ztree f32 (s) | queries/s f64 | peak B/pt f64 | peer | peer (s) | peer / ztree f64 |");
    println!("|---|---|---|---|---|---|---|---|---|");
    let mut breakdowns = Vec::new();
    for &n in &args.ns {
        for &dist in &args.dists {
            let pts = generate(dist, n, 42 + n as u64);
            let (t64, s64, b64) = run_ztree::<f64>(&ctx, &pts, args.k, args.reps, args.summary);
            let p32: Vec<[f32; 3]> = pts.iter().map(|p| [p[0] as f32, p[1] as f32, p[2] as f32]).collect();
            let (t32, s32, b32) = run_ztree::<f32>(&ctx, &p32, args.k, args.reps, args.summary);
            drop(p32);
            let mut peers: Vec<(String, f64)> = Vec::new();
            if args.peers {
                peers.push(("kiddo".into(), run_kiddo(&pts, args.k)));
                let mut extra = vec![args.k.to_string()];
                if args.skip_slow || n > 2_000_000 {
                    extra.push("--skip-slow".into());
                }
                peers.extend(python_peers("knn", &pts, &extra));
            }
            let qps = n as f64 / t64;
            let row = format!("| {} | {n} | {t64:.3} | {t32:.3} | {qps:.3e} | {b64:.0} |", dist.name());
            if peers.is_empty() {
                println!("{row} - | - | - |");
            }
            for (i, (name, t)) in peers.iter().enumerate() {
                let lead = if i == 0 { row.clone() } else { "| | | | | | |".to_string() };
                println!("{lead} {name} | {t:.3} | {:.1}x |", t / t64);
            }
            breakdowns.push((dist.name(), n, "f64", s64, b64));
            breakdowns.push((dist.name(), n, "f32", s32, b32));
        }
    }
    println!();
    println!("Stage breakdown (seconds) and memory:");
    for (d, n, p, s, b) in breakdowns {
        let st: Vec<String> = s.timings.stages.iter().map(|(k, v)| format!("{k} {v:.3}")).collect();
        println!(
            "  {d:9} N={n:<8} {p}: {} | nodes/plane {:?} | list entries {:?} | peak {b:.0} B/pt beyond inputs+outputs",
            st.join(", "),
            s.nodes_per_plane,
            s.walk.list_entries
        );
    }
}
