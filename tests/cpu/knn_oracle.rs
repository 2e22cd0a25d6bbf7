//! kNN against a brute-force oracle, bit for bit, over many shapes, sizes, k, precisions,
//! dimensions and boundary conditions.

use crate::common::*;
use ztree::{Config, Context, Domain, Real, TreeParams};

fn ctx(threads: usize, leaf: usize) -> Context {
    Context::new(Config { threads, tree: TreeParams { leaf_size: leaf, top_target: 16, super_group: 4, ..Default::default() } }).unwrap()
}

fn check<T: Real, const D: usize>(c: &Context, src: &[[T; D]], qry: Option<&[[T; D]]>, k: usize, periodic: Option<[f64; D]>, label: &str) {
    let domain = periodic.map_or(Domain::Open, Domain::Periodic);
    let src_v = src.to_vec();
    let qry_v = qry.map(|q| q.to_vec());
    let res = c.knn_lists(&domain, &src_v, qry_v.as_ref(), k).unwrap_or_else(|e| panic!("{label}: {e}"));
    let (ei, ed) = brute_knn(src, qry, k, periodic);
    let nq = qry.map_or(src.len(), |q| q.len());
    for q in 0..nq {
        let r = q * k..(q + 1) * k;
        assert_eq!(res.indices[r.clone()], ei[r.clone()], "{label}: indices of query {q}");
        let got: Vec<u64> = res.distances[r.clone()].iter().map(|d| d.to_f64().to_bits()).collect();
        let exp: Vec<u64> = ed[r.clone()].iter().map(|d| d.to_f64().to_bits()).collect();
        assert_eq!(got, exp, "{label}: distances of query {q}");
    }
    assert_eq!(res.stats.padded_queries, if src.len() < k { nq } else { 0 }, "{label}: padded count");
}

fn sweep<T: Real, const D: usize>(seed0: u64) {
    let c = ctx(2, 8);
    let sizes = [1usize, 2, 3, 7, 17, 50, 300, 1500];
    let mut seed = seed0;
    for &shape in &SHAPES {
        for &n in &sizes {
            for &periodic in &[false, true] {
                if periodic && shape == Shape::GaussianOutliers {
                    continue;
                }
                seed += 1;
                let mut rng = Rng::new(seed);
                let l: [f64; D] = std::array::from_fn(|d| 1.0 + 0.5 * d as f64);
                let src: Vec<[T; D]> = points(shape, n, l, &mut rng);
                let box_len = periodic.then_some(l);
                for &k in &[1usize, 4, 16] {
                    let label = format!("{} D={D} {shape:?} n={n} periodic={periodic} k={k} self", T::NAME);
                    check(&c, &src, None, k, box_len, &label);
                }
                // Separate queries, some drawn from another shape.
                let nq = 1 + rng.below(n + 20);
                let qshape = if rng.below(2) == 0 { shape } else { Shape::Uniform };
                let qry: Vec<[T; D]> = points(if periodic && qshape == Shape::GaussianOutliers { Shape::Uniform } else { qshape }, nq, l, &mut rng);
                let k = [1usize, 5, 16, 64][rng.below(4)];
                let label = format!("{} D={D} {shape:?} n={n} periodic={periodic} k={k} queries={nq}", T::NAME);
                check(&c, &src, Some(&qry), k, box_len, &label);
            }
        }
    }
}

#[test]
fn knn_exact_f64_3d() {
    sweep::<f64, 3>(1000);
}

#[test]
fn knn_exact_f32_3d() {
    sweep::<f32, 3>(2000);
}

#[test]
fn knn_exact_f64_2d() {
    sweep::<f64, 2>(3000);
}

#[test]
fn knn_exact_f32_2d() {
    sweep::<f32, 2>(4000);
}

#[test]
fn knn_large_k_and_default_tree() {
    // The default tree: its leaf size chosen per job (48 at k = 1, 64 above on the CPU).
    let c = Context::new(Config { threads: 2, ..Default::default() }).unwrap();
    let mut rng = Rng::new(7);
    for &shape in &[Shape::Uniform, Shape::Clustered, Shape::Lattice] {
        let pts: Vec<[f64; 3]> = points(shape, 4000, [1.0; 3], &mut rng);
        for &k in &[1usize, 2, 16, 29, 64, 200, 600] {
            check(&c, &pts, None, k, Some([1.0; 3]), &format!("{shape:?} k={k} periodic"));
            check(&c, &pts[..1000], Some(&pts[1000..]), k, None, &format!("{shape:?} k={k} open queries"));
        }
    }
}

#[test]
fn knn_more_neighbours_than_sources_pads() {
    let c = ctx(1, 4);
    let pts: Vec<[f32; 3]> = vec![[0.1, 0.2, 0.3], [0.4, 0.5, 0.6], [0.1, 0.2, 0.3]];
    check(&c, &pts, None, 5, None, "k > n");
    let q: Vec<[f32; 3]> = vec![[0.9, 0.9, 0.9]];
    check(&c, &pts, Some(&q), 7, Some([1.0; 3]), "k > n periodic");
}

#[test]
fn knn_bigger_random_sets_both_boundaries() {
    let c = Context::new(Config { threads: 2, tree: TreeParams { leaf_size: 16, top_target: 64, ..Default::default() } }).unwrap();
    for seed in 0..3 {
        let mut rng = Rng::new(100 + seed);
        for &shape in &[Shape::Uniform, Shape::Clustered, Shape::GaussianOutliers] {
            let pts: Vec<[f64; 3]> = points(shape, 20_000, [2.0, 1.0, 3.0], &mut rng);
            let periodic = (shape != Shape::GaussianOutliers).then_some([2.0, 1.0, 3.0]);
            // Check a subset of queries against brute force to keep the oracle cheap.
            let qry: Vec<[f64; 3]> = pts.iter().step_by(37).copied().collect();
            check(&c, &pts, Some(&qry), 16, periodic, &format!("{shape:?} 20k seed {seed}"));
        }
    }
}

/// A point is its own first neighbour in a self-query, ahead of exact duplicates with a
/// smaller index, even when there are more duplicates than k; then ties by smaller index.
#[test]
fn self_comes_first_among_duplicates() {
    let c = ctx(2, 4);
    let mut pts: Vec<[f64; 3]> = vec![[0.5, 0.5, 0.5]; 40];
    pts.extend((0..200).map(|i| [(i as f64 * 0.618).fract(), (i as f64 * 0.414).fract(), (i as f64 * 0.732).fract()]));
    for k in [1usize, 3, 64] {
        let r = c.knn_lists(&Domain::Open, &pts, None, k).unwrap();
        for q in 0..pts.len() {
            assert_eq!(r.indices[q * k], q as i64, "k={k}: point {q} is not its own first neighbour");
        }
        // Point 39 (a duplicate) with k = 3: itself, then the smallest other indices.
        if k == 3 {
            assert_eq!(&r.indices[39 * 3..40 * 3], &[39, 0, 1]);
        }
    }
}

/// Most points on one spot, the heavy-duplicate shape that once made kNN quadratic:
/// self-queries and separate queries (some on the spot, some on groups of exactly k and
/// k - 1 sources) equal brute force, f32 and f64, 2D and 3D, open and periodic, on one
/// and two threads.
#[test]
fn coincident_spots_equal_brute_force() {
    fn case<T: Real, const D: usize>(threads: usize, k: usize, periodic: bool) {
        let mut rng = Rng::new(4242 + k as u64);
        let l: [f64; D] = std::array::from_fn(|d| [26.5, 0.3, 0.3][d]);
        let spot = |f: [f64; 3]| -> [T; D] { std::array::from_fn(|d| T::from_f64(f[d] * l[d])) };
        let (a, b, c) = (spot([0.4, 0.5, 0.5]), spot([0.0, 0.0, 0.0]), spot([0.9, 0.25, 0.75]));
        let mut src: Vec<[T; D]> = points(Shape::Uniform, 300, l, &mut rng);
        src.extend(std::iter::repeat_n(a, 700).chain(std::iter::repeat_n(b, k)).chain(std::iter::repeat_n(c, k.saturating_sub(1))));
        for i in (1..src.len()).rev() {
            src.swap(i, rng.below(i + 1));
        }
        let mut qry: Vec<[T; D]> = points(Shape::Uniform, 50, l, &mut rng);
        qry.extend([a, a, b, c, a]);
        let box_len = periodic.then_some(l);
        let label = format!("{} D={D} threads {threads} k {k} periodic {periodic}", T::NAME);
        check(&ctx(threads, 0), &src, None, k, box_len, &format!("{label} self"));
        check(&ctx(threads, 8), &src, Some(&qry), k, box_len, &format!("{label} queries"));
    }
    for k in [1usize, 2, 16, 32, 33] {
        for periodic in [false, true] {
            case::<f64, 3>(1 + k % 2, k, periodic);
            case::<f32, 3>(2, k, periodic);
            case::<f64, 2>(1, k, periodic);
        }
    }
}
