//! FoF benchmark: ztree (labels + catalogue) against kiddo + union–find (Rust, labels
//! only) and scipy query_pairs + connected_components / scikit-learn DBSCAN(min_samples=1)
//! (Python, from .venv) on the same points, b = 0.2 in the periodic unit box, plus the
//! GADGET-4 snapshot in ../shared/data/gadget4-64-z1. Prints a table with ratios, the
//! targets, ztree's stage breakdown and peak memory per particle.
//!
//! cargo bench --bench fof -- [--n 1e6,4e6] [--dists uniform,clustered] [--threads 2]
//!                            [--reps 3] [--skip-slow] [--no-peers] [--no-gadget]

mod common;

use std::path::PathBuf;
use std::time::Instant;

use common::*;
use rayon::prelude::*;
use ztree::{CatalogueOrder, Config, Context, Domain, FofFields, FofParams, FofStats, LinkingLength, ParticleIds, Real, TreeParams};

#[global_allocator]
static ALLOC: CountingAlloc = CountingAlloc;

const B: f64 = 0.2;

struct Args {
    ns: Vec<usize>,
    dists: Vec<Dist>,
    threads: usize,
    skip_slow: bool,
    peers: bool,
    gadget: bool,
    reps: usize,
    tree: TreeParams,
}

fn parse() -> Args {
    let mut a = Args {
        ns: vec![1_000_000, 4_000_000],
        dists: vec![Dist::Uniform, Dist::Clustered],
        threads: 0,
        skip_slow: false,
        peers: true,
        gadget: true,
        reps: 3,
        tree: TreeParams::default(),
    };
    let v: Vec<String> = std::env::args().skip(1).collect();
    let mut i = 0;
    let num = |s: &str| s.parse::<f64>().unwrap() as usize;
    while i < v.len() {
        let next = || v[i + 1].clone();
        match v[i].as_str() {
            "--n" => a.ns = next().split(',').map(num).collect(),
            "--threads" => a.threads = num(&next()),
            "--reps" => a.reps = num(&next()).max(1),
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
            "--no-peers" => {
                a.peers = false;
                i -= 1;
            }
            "--no-gadget" => {
                a.gadget = false;
                i -= 1;
            }
            "--bench" => i -= 1,
            x => panic!("unknown argument {x}"),
        }
        i += 2;
    }
    a
}

/// Runs ztree FoF with catalogue; returns (best seconds, stats of that run, peak bytes
/// per particle beyond inputs and the labels output, groups).
fn run_ztree<T: Real>(
    ctx: &Context,
    pts: &[[T; 3]],
    box_len: f64,
    params: &FofParams,
    ids: Option<&dyn ParticleIds>,
    pmass: f64,
    reps: usize,
) -> (f64, FofStats, f64, usize) {
    let mut labels = vec![0i64; pts.len()];
    let fields = FofFields { velocities: None, masses: None, particle_mass: pmass, ids };
    let mut best = (f64::INFINITY, None, 0usize, 0usize);
    for _ in 0..reps {
        let base = mem_mark();
        let t = Instant::now();
        let (cat, stats) = ctx.fof_into(&Domain::Periodic([box_len; 3]), pts, &fields, params, &mut labels).unwrap();
        let dt = t.elapsed().as_secs_f64();
        let peak = mem_peak_since(base);
        if dt < best.0 {
            best = (dt, Some(stats), peak, cat.len());
        }
    }
    (best.0, best.1.unwrap(), best.2 as f64 / pts.len() as f64, best.3)
}

/// kiddo fixed-radius queries (periodic) and a union–find: labels only.
fn run_kiddo(pts: &[[f64; 3]], link: f64, box_len: f64) -> (f64, usize) {
    use kiddo::{ImmutableKdTree, SquaredEuclidean};
    let t = Instant::now();
    let tree: ImmutableKdTree<f64, 3> = ImmutableKdTree::new_from_slice_parallel(pts).unwrap();
    let bs = [box_len; 3];
    let n = pts.len();
    // Edges i < j, found in parallel; then a sequential union–find.
    let edges: Vec<Vec<(u32, u32)>> = (0..n)
        .into_par_iter()
        .chunks(4096)
        .map(|chunk| {
            let mut e = Vec::new();
            for i in chunk {
                let res = tree.query(&pts[i]).periodic_boundary_condition(&bs).within::<SquaredEuclidean<f64>>(link * link).unsorted().execute();
                for r in res {
                    let j = r.item as usize;
                    if j > i {
                        e.push((i as u32, j as u32));
                    }
                }
            }
            e
        })
        .collect();
    let mut parent: Vec<u32> = (0..n as u32).collect();
    fn find(p: &mut [u32], mut x: u32) -> u32 {
        while p[x as usize] != x {
            let g = p[p[x as usize] as usize];
            p[x as usize] = g;
            x = g;
        }
        x
    }
    for chunk in &edges {
        for &(a, b) in chunk {
            let (ra, rb) = (find(&mut parent, a), find(&mut parent, b));
            if ra != rb {
                let (lo, hi) = if ra < rb { (ra, rb) } else { (rb, ra) };
                parent[hi as usize] = lo;
            }
        }
    }
    let groups = (0..n as u32).filter(|&i| find(&mut parent, i) == i).count();
    (t.elapsed().as_secs_f64(), groups)
}

fn gadget_dir() -> Option<PathBuf> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/gadget4-64-z1");
    d.join("pos.f32").exists().then_some(d)
}

struct Line {
    data: String,
    n: usize,
    t64: Option<f64>,
    t32: f64,
    bytes: f64,
    groups: usize,
    peers: Vec<(String, f64)>,
}

fn main() {
    let args = parse();
    let ctx = Context::new(Config { threads: args.threads, tree: args.tree }).unwrap();
    println!(
        "# ztree FoF benchmark: b = {B}, periodic box, {} threads; ztree = sort + tree + walk + contraction + catalogue (min 20 members; GADGET: 32)",
        ctx.threads()
    );
    println!("# ztree: best of {} runs; peers (labels only) run once", args.reps);
    println!();
    let mut lines: Vec<Line> = Vec::new();
    let mut breakdowns: Vec<(String, FofStats, f64)> = Vec::new();
    for &n in &args.ns {
        for &dist in &args.dists {
            let pts = generate(dist, n, 42 + n as u64);
            let link = B * (1.0 / n as f64).cbrt();
            let params = FofParams { linking_length: LinkingLength::Relative(B), min_members: 20, order: CatalogueOrder::ZOrder, members: false };
            let (t64, s64, b64, g64) = run_ztree::<f64>(&ctx, &pts, 1.0, &params, None, 1.0, args.reps);
            let p32: Vec<[f32; 3]> = pts.iter().map(|p| std::array::from_fn(|d| if p[d] as f32 >= 1.0 { 0.0 } else { p[d] as f32 })).collect();
            let (t32, s32, b32, _) = run_ztree::<f32>(&ctx, &p32, 1.0, &params, None, 1.0, args.reps);
            drop(p32);
            let mut peers = Vec::new();
            if args.peers {
                let (tk, _) = run_kiddo(&pts, link, 1.0);
                peers.push(("kiddo+union-find".to_string(), tk));
                let mut extra = vec![format!("{link:.17e}"), "1.0".to_string()];
                if args.skip_slow || n > 2_000_000 {
                    extra.push("--skip-slow".into());
                }
                peers.extend(python_peers("fof", &pts, &extra));
            }
            let label = format!("{} {n}", dist.name());
            breakdowns.push((format!("{label} f64"), s64, b64));
            breakdowns.push((format!("{label} f32"), s32, b32));
            lines.push(Line { data: dist.name().to_string(), n, t64: Some(t64), t32, bytes: b64, groups: g64, peers });
        }
    }
    if args.gadget {
        match gadget_dir() {
            None => println!("note: GADGET-4 snapshot not found at ../shared/data/gadget4-64-z1; skipped"),
            Some(dir) => {
                let raw = std::fs::read(dir.join("pos.f32")).unwrap();
                let f: Vec<f32> = raw.chunks_exact(4).map(|c| f32::from_le_bytes(c.try_into().unwrap())).collect();
                let pos: Vec<[f32; 3]> = f.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect();
                let raw = std::fs::read(dir.join("ids.u32")).unwrap();
                let ids: Vec<u32> = raw.chunks_exact(4).map(|c| u32::from_le_bytes(c.try_into().unwrap())).collect();
                let (bl, link) = (50.0, 0.15625);
                let params =
                    FofParams { linking_length: LinkingLength::Absolute(link), min_members: 32, order: CatalogueOrder::Gadget, members: false };
                let (t32, s32, b32, g32) = run_ztree::<f32>(&ctx, &pos, bl, &params, Some(&ids), 4.075161606358443, args.reps.max(5));
                let p64: Vec<[f64; 3]> = pos.iter().map(|p| [p[0] as f64, p[1] as f64, p[2] as f64]).collect();
                let mut peers = Vec::new();
                if args.peers {
                    peers.push(("kiddo+union-find".to_string(), run_kiddo(&p64, link, bl).0));
                    let mut extra = vec![format!("{link}"), format!("{bl}")];
                    if args.skip_slow {
                        extra.push("--skip-slow".into());
                    }
                    peers.extend(python_peers("fof", &p64, &extra));
                }
                breakdowns.push(("gadget4-64 f32".to_string(), s32, b32));
                lines.push(Line { data: "GADGET-4 z=1 (f32)".into(), n: pos.len(), t64: None, t32, bytes: b32, groups: g32, peers });
            }
        }
    }
    println!("| data | N | groups | ztree f64 (s) | ztree f32 (s) | peak B/pt | peer | peer (s) | peer / ztree |");
    println!("|---|---|---|---|---|---|---|---|---|");
    for l in &lines {
        let t = l.t64.unwrap_or(l.t32);
        let row = format!(
            "| {} | {} | {} | {} | {:.3} | {:.0} |",
            l.data,
            l.n,
            l.groups,
            l.t64.map_or("-".to_string(), |x| format!("{x:.3}")),
            l.t32,
            l.bytes
        );
        if l.peers.is_empty() {
            println!("{row} - | - | - |");
        }
        for (i, (name, pt)) in l.peers.iter().enumerate() {
            let lead = if i == 0 { row.clone() } else { "| | | | | | |".to_string() };
            println!("{lead} {name} | {pt:.3} | {:.1}x |", pt / t);
        }
    }
    println!();
    println!("Targets:");
    for l in &lines {
        let t = l.t64.unwrap_or(l.t32);
        let fastest = l.peers.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        if l.data == "clustered" && l.n == 4_000_000 {
            let ok_speed = fastest / t >= 5.0;
            println!(
                "  clustered 4e6: {t:.3} s (target <= 0.5 s: {}), fastest peer / ztree = {} (target >= 5x: {})",
                if t <= 0.5 { "met" } else { "MISSED" },
                if fastest.is_finite() { format!("{:.1}x", fastest / t) } else { "n/a".into() },
                if !fastest.is_finite() {
                    "n/a"
                } else if ok_speed {
                    "met"
                } else {
                    "MISSED"
                }
            );
        }
        if l.data.starts_with("GADGET") {
            println!("  GADGET-4 snapshot: {:.4} s (target <= 0.06 s: {})", l.t32, if l.t32 <= 0.06 { "met" } else { "MISSED" });
        }
    }
    let worst = lines.iter().map(|l| l.bytes).fold(0.0f64, f64::max);
    println!(
        "  peak memory: at most {worst:.0} B/particle beyond inputs and outputs (target < 100: {})",
        if worst < 100.0 { "met" } else { "MISSED" }
    );
    println!();
    println!("Stage breakdown (seconds) and memory:");
    for (name, s, b) in breakdowns {
        let st: Vec<String> = s.timings.stages.iter().map(|(k, v)| format!("{k} {v:.3}")).collect();
        println!(
            "  {name:22}: {} | total {:.3} | l = {:.4e}, {} groups >= min ({} in all) | nodes/plane {:?} | list entries {:?} | peak {b:.0} B/pt",
            st.join(", "),
            s.timings.total(),
            s.linking_length,
            s.groups,
            s.groups_total,
            s.nodes_per_plane,
            s.walk.list_entries
        );
    }
}
