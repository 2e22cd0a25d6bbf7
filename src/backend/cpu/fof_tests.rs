//! The FoF point-pair passes at every vector level this CPU has, against brute force: the
//! same groups at each (uniform, clustered, duplicates, a lattice at exactly the linking
//! length; open and periodic; f32 and f64; small, default and large leaves).

use super::knn_tests::{Rng, points};
use super::simd::{self, Simd};
use crate::geom::Real;
use crate::geom::metric::{Metric, Open, Periodic};
use crate::{Config, Context, Domain, FofFields, FofParams, LinkingLength, TreeParams};

/// Each point's group as the smallest index in it (a canonical form of a partition).
fn canonical(labels: &[i64]) -> Vec<usize> {
    let mut first = std::collections::HashMap::new();
    labels.iter().enumerate().map(|(i, &l)| *first.entry(l).or_insert(i)).collect()
}

/// Groups by all pairs within `l` (the library's rule: f64 from the input coordinates,
/// minimum image, `d² <= l²`), in the same canonical form.
fn brute<T: Real, M: Metric<f64, 3>>(metric: &M, pts: &[[T; 3]], l: f64) -> Vec<usize> {
    let x: Vec<[f64; 3]> = pts.iter().map(|p| std::array::from_fn(|d| p[d].to_f64())).collect();
    let mut up: Vec<usize> = (0..x.len()).collect();
    fn root(up: &mut [usize], mut i: usize) -> usize {
        while up[i] != i {
            up[i] = up[up[i]];
            i = up[i];
        }
        i
    }
    for i in 0..x.len() {
        for j in i + 1..x.len() {
            if metric.dist2(&x[i], &x[j]) <= l * l {
                let (a, b) = (root(&mut up, i), root(&mut up, j));
                up[a.max(b)] = a.min(b);
            }
        }
    }
    (0..x.len()).map(|i| root(&mut up, i)).collect()
}

/// Two lattices, in shuffled order with every tenth point repeated: 8 x 8 x 8 points of
/// spacing `l` (neighbours at exactly l: one group) and 6 x 6 x 6 of spacing l + 1/1024
/// (none linked). Every coordinate is a multiple of 1/1024, exact in f32 and f64.
fn lattice<T: Real>(l: f64, seed: u64) -> Vec<[T; 3]> {
    let mut r = Rng(seed | 1);
    let grid = |m: usize, origin: f64, step: f64| {
        (0..m * m * m).map(move |i| [i % m, i / m % m, i / (m * m)].map(|c| T::from_f64(origin + c as f64 * step)))
    };
    let mut v: Vec<[T; 3]> = grid(8, 0.0625, l).chain(grid(6, 0.5, l + 1.0 / 1024.0)).collect();
    for i in (0..v.len()).step_by(10) {
        v.push(v[i]);
    }
    for i in (1..v.len()).rev() {
        v.swap(i, (r.f64() * (i + 1) as f64) as usize);
    }
    v
}

fn check<T: Real>() {
    let _knobs = crate::test_knobs::hold();
    // 200: leaves over 64 points, long ones found by the sweep.
    for leaf_size in [0, 8, 48, 200] {
        let ctx = Context::new(Config { threads: 2, tree: TreeParams { leaf_size, ..TreeParams::default() } }).unwrap();
        for shape in ["uniform", "clustered", "duplicates", "lattice"] {
            // 5/64 and 1/32 are exact in f32 and f64: lattice neighbours at exactly l.
            let l = if shape == "uniform" { 0.078125 } else { 0.03125 };
            let pts = if shape == "lattice" { lattice::<T>(l, 3) } else { points::<T>(shape, 1200, 11) };
            for periodic in [false, true] {
                let domain = if periodic { Domain::Periodic([1.0; 3]) } else { Domain::Open };
                let want = if periodic { brute(&Periodic::<f64, 3>::new(&[1.0; 3]), &pts, l) } else { brute(&Open, &pts, l) };
                // Neither every point alone nor all in one group, so the links matter.
                let groups = want.iter().enumerate().filter(|&(i, &g)| g == i).count();
                assert!(groups > 1 && groups < pts.len() * 3 / 4, "{shape}: {groups} groups of {} points", pts.len());
                let params = FofParams { linking_length: LinkingLength::Absolute(l), min_members: 1, ..FofParams::default() };
                for level in Simd::available() {
                    simd::force(Some(level));
                    let got = ctx.fof(&domain, &pts[..], &FofFields::default(), &params);
                    simd::force(None);
                    let got = canonical(&got.unwrap().labels);
                    assert!(got == want, "{} {shape} leaf {leaf_size} periodic {periodic} {level:?}: groups differ", T::NAME);
                }
            }
        }
    }
}

#[test]
fn every_vector_level_finds_the_brute_force_groups_f64() {
    check::<f64>();
}

#[test]
fn every_vector_level_finds_the_brute_force_groups_f32() {
    check::<f32>();
}
