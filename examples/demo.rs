//! A Rust demo (`cargo run --release --example demo`; `make demo` runs the C in-situ
//! driver): a clustered particle set like a cosmological snapshot, kNN density and k-th neighbour radius for every
//! particle, with timings per stage.

use std::time::Instant;

use ztree::{Config, Context, Domain, KnnOutput, KnnParams, SourceFields};

fn main() {
    let n: usize = std::env::args().nth(1).and_then(|s| s.parse::<f64>().ok()).map_or(2_000_000, |v| v as usize);
    let k = 16;
    let pts = clustered(n, 7);
    let ctx = Context::new(Config::default()).expect("context");
    println!("ztree {} demo: {n} clustered particles in a periodic unit box, k = {k}, {} threads", env!("CARGO_PKG_VERSION"), ctx.threads());
    let mut kth = vec![0.0f32; n];
    let mut density = vec![0.0f64; n];
    for step in 0..3 {
        let t = Instant::now();
        let stats = ctx
            .knn_self(
                &Domain::periodic_cube(1.0),
                &pts,
                &SourceFields::default(),
                &KnnParams::new(k),
                &mut KnnOutput { kth_distance: Some(&mut kth), density: Some(&mut density), ..Default::default() },
            )
            .expect("knn");
        let dt = t.elapsed().as_secs_f64();
        let stages: Vec<String> = stats.timings.stages.iter().map(|(s, t)| format!("{s} {:.1} ms", t * 1e3)).collect();
        println!("step {step}: {dt:.3} s ({:.2e} particles/s) | {}", n as f64 / dt, stages.join(", "));
    }
    let mut sorted = density.clone();
    sorted.sort_by(f64::total_cmp);
    let q = |f: f64| sorted[((n - 1) as f64 * f) as usize];
    println!(
        "density / mean: 10% {:.2}  50% {:.2}  90% {:.2}  99.9% {:.2}",
        q(0.1) / n as f64,
        q(0.5) / n as f64,
        q(0.9) / n as f64,
        q(0.999) / n as f64
    );
    let rmax = kth.iter().copied().fold(0.0f32, f32::max);
    let rmin = kth.iter().copied().fold(f32::INFINITY, f32::min);
    println!("k-th neighbour radius: min {rmin:.3e}, max {rmax:.3e} (mean spacing {:.3e})", (1.0 / n as f64).cbrt());
}

/// 35% uniform background and 65% in halos with a power-law mass function.
fn clustered(n: usize, seed: u64) -> Vec<[f32; 3]> {
    let mut s = seed;
    let mut u = move || {
        s = s.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = s;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        ((z ^ (z >> 31)) >> 11) as f64 / (1u64 << 53) as f64
    };
    let mut pts = Vec::with_capacity(n);
    while pts.len() < n * 35 / 100 {
        pts.push([u() as f32, u() as f32, u() as f32]);
    }
    while pts.len() < n {
        let m = ((20f64.powf(-0.9) * (1.0 - u())).powf(-1.0 / 0.9) as usize).clamp(1, n - pts.len());
        let c = [u(), u(), u()];
        let rv = 0.4 * (m as f64).cbrt() / (n as f64).cbrt();
        for _ in 0..m {
            let r = rv * u() * u();
            let (a, b) = (2.0 * u() - 1.0, 2.0 * std::f64::consts::PI * u());
            let st = (1.0 - a * a).sqrt();
            let p = [c[0] + r * st * b.cos(), c[1] + r * st * b.sin(), c[2] + r * a];
            pts.push(p.map(|v| {
                let w = v.rem_euclid(1.0) as f32;
                if w >= 1.0 { 0.0 } else { w }
            }));
        }
    }
    pts
}
