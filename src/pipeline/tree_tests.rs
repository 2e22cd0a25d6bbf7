//! Plane hierarchy invariants on random and adversarial inputs (docs/DESIGN.md §2), for
//! the trees every back end must build. (A unit test: it reads the tree's internals.)

use crate::test_common as common;

use common::*;

use super::prepare;
use crate::backend::cpu::Cpu;
use crate::base::{Timings, TreeParams};
use crate::geom::Real;
use crate::input::Domain;

fn check<T: Real, const D: usize>(pts: &[[T; D]], queries: Option<&[[T; D]]>, domain: Domain<D>, params: &TreeParams, label: &str) {
    let mut t = Timings::default();
    let src = pts.to_vec();
    let qry = queries.map(|q| q.to_vec());
    let zs = prepare(&Cpu, &domain, &src, qry.as_ref(), params, &mut t).unwrap();
    let tree = &zs.tree;
    let (qpos, _) = zs.queries();
    // A self-query tree keeps no query columns of its own.
    assert_eq!(tree.shares_queries(), queries.is_none() && !pts.is_empty(), "{label}: query columns");
    let ns = pts.len();
    let nq = queries.map_or(ns, |q| q.len());
    // The z-ordered permutation is a permutation.
    let mut seen = vec![false; ns];
    for &o in &zs.src_orig {
        assert!(!seen[o as usize], "{label}: source {o} twice in z-order");
        seen[o as usize] = true;
    }
    for (p, plane) in tree.planes.iter().enumerate() {
        let is_super = p + 1 == tree.planes.len();
        // No plane repeats the one below (the build relaxes and goes on instead).
        if p > 0 && !is_super {
            assert!(plane.len < tree.planes[p - 1].len, "{label}: plane {p} repeats plane {}: {:?}", p - 1, tree.planes);
        }
        let (mut s_next, mut q_next) = (0u32, 0u32);
        for node in plane.first..plane.first + plane.len {
            // Every point in exactly one node per plane: ranges tile the arrays in order.
            assert_eq!(tree.src_start[node], s_next, "{label}: plane {p} node {node} source range not contiguous");
            let (qs, qc) = tree.qry_range(node);
            assert_eq!(qs, q_next, "{label}: plane {p} node {node} query range not contiguous");
            s_next += tree.src_count[node];
            q_next += qc;
            let count = tree.src_count[node].max(qc) as u64;
            // Runs of identical points are cut into chunks of the capacity too.
            if !is_super && count > plane.capacity {
                panic!("{label}: plane {p} node {node} holds {count} > capacity {}", plane.capacity);
            }
            // Boxes contain their points.
            for (start, cnt, lo, hi, pos) in [
                (tree.src_start[node], tree.src_count[node], &tree.src_lo[node], &tree.src_hi[node], &zs.src_pos),
                (qs, qc, tree.qry_box(node).0, tree.qry_box(node).1, qpos),
            ] {
                for i in start as usize..(start + cnt) as usize {
                    for d in 0..D {
                        let v = pos[d][i];
                        assert!(lo[d] <= v && v <= hi[d], "{label}: plane {p} node {node} box misses a point");
                    }
                }
            }
            // Children are contiguous on the plane below and cover exactly this node.
            if p > 0 {
                let below = tree.planes[p - 1];
                let kids = tree.children(node);
                assert!(!kids.is_empty(), "{label}: plane {p} node {node} has no children");
                assert!(kids.start >= below.first && kids.end <= below.first + below.len);
                assert_eq!(tree.src_start[kids.start], tree.src_start[node]);
                assert_eq!(tree.qry_range(kids.start).0, qs);
                let sc: u32 = kids.clone().map(|c| tree.src_count[c]).sum();
                let kqc: u32 = kids.clone().map(|c| tree.qry_range(c).1).sum();
                assert_eq!((sc, kqc), (tree.src_count[node], qc), "{label}: children do not cover node");
            } else {
                assert!(tree.children(node).is_empty());
            }
        }
        assert_eq!((s_next as usize, q_next as usize), (ns, nq), "{label}: plane {p} does not cover all points");
    }
    // Consecutive child ranges of consecutive parents: every node of a plane has exactly one parent.
    for p in 1..tree.planes.len() {
        let plane = tree.planes[p];
        let mut next = tree.planes[p - 1].first;
        for node in plane.first..plane.first + plane.len {
            let kids = tree.children(node);
            assert_eq!(kids.start, next, "{label}: plane {p} children not nested in order");
            next = kids.end;
        }
        assert_eq!(next, tree.planes[p - 1].first + tree.planes[p - 1].len);
    }
}

#[test]
fn planes_hold_their_invariants() {
    let params = [
        TreeParams { leaf_size: 4, coarsening: 2, top_target: 8, super_group: 3, ..Default::default() },
        TreeParams { leaf_size: 8, coarsening: 8, top_target: 16, super_group: 4, ..Default::default() },
        TreeParams { leaf_size: 48, ..TreeParams::default() },
        TreeParams { leaf_size: 5, coarsening: 3, top_target: 10, super_group: 2, max_volume_factor: 0.0 },
    ];
    let mut seed = 0;
    for shape in SHAPES {
        let sizes: &[usize] = if cfg!(miri) { &[0, 2, 60] } else { &[0, 1, 2, 9, 100, 3000] };
        for &n in sizes {
            for p in &params[..if cfg!(miri) { 2 } else { params.len() }] {
                seed += 1;
                let mut rng = Rng::new(seed);
                let l = [1.0, 2.0, 0.5];
                let pts: Vec<[f64; 3]> = points(shape, n, l, &mut rng);
                let domain = if shape == Shape::GaussianOutliers { Domain::Open } else { Domain::Periodic(l) };
                check(&pts, None, domain, p, &format!("{shape:?} n={n} {p:?}"));
                let q: Vec<[f64; 3]> = points(Shape::Clustered, n / 2 + 1, l, &mut rng);
                check(&pts, Some(&q), Domain::Open, p, &format!("{shape:?} n={n} joint {p:?}"));
                let p2: Vec<[f32; 2]> = points(shape, n, [1.0, 1.0], &mut rng);
                check(&p2, None, Domain::Open, p, &format!("{shape:?} n={n} 2D {p:?}"));
            }
        }
    }
}

#[test]
fn identical_points_are_chunked_into_leaves() {
    let pts = vec![[0.25f64; 3]; if cfg!(miri) { 100 } else { 1000 }];
    let params = TreeParams { leaf_size: 7, coarsening: 4, top_target: 4, super_group: 2, ..Default::default() };
    check(&pts, None, Domain::Open, &params, "identical");
    let mut t = Timings::default();
    let zs = prepare(&Cpu, &Domain::Open, &pts, None::<&Vec<[f64; 3]>>, &params, &mut t).unwrap();
    let leaves = zs.tree.leaves();
    assert_eq!(leaves.len, pts.len().div_ceil(7));
    // A run longer than a leaf is refined: the gather comes before the planes.
    assert_eq!(stage_order(&t), ["sort", "levels", "gather", "refine", "planes", "tree"]);
}

/// The stages of `prepare` after the keys, in order.
fn stage_order(t: &Timings) -> Vec<&'static str> {
    t.stages.iter().map(|s| s.0).skip_while(|&s| s != "sort").collect()
}

/// A self-query with no run to refine chooses its planes before the gather (its
/// per-gap scratch is freed before the positions are made); joint sets after the split.
#[test]
fn clean_self_queries_plan_before_the_gather() {
    let mut rng = Rng::new(9);
    let pts: Vec<[f64; 3]> = points(Shape::Clustered, 5000, [1.0; 3], &mut rng);
    let params = TreeParams { leaf_size: 48, ..TreeParams::default() };
    let mut t = Timings::default();
    prepare(&Cpu, &Domain::Open, &pts, None::<&Vec<[f64; 3]>>, &params, &mut t).unwrap();
    assert_eq!(stage_order(&t), ["sort", "levels", "planes", "gather", "tree"]);
    let mut t = Timings::default();
    prepare(&Cpu, &Domain::Open, &pts, Some(&pts), &params, &mut t).unwrap();
    assert_eq!(stage_order(&t), ["sort", "levels", "gather", "types", "planes", "tree"]);
}

#[test]
#[cfg_attr(miri, ignore = "20k points: too slow under Miri")]
fn far_outliers_do_not_collapse_the_tree() {
    // A dense Gaussian plus outliers 1e6 sigma away: keys are refined, so leaves stay small
    // and the tree has about n / leaf_size leaves rather than a few huge ones.
    let mut rng = Rng::new(5);
    let mut pts: Vec<[f64; 3]> = (0..20_000).map(|_| [rng.normal(), rng.normal(), rng.normal()]).collect();
    pts.push([1e6, -1e6, 1e6]);
    pts.push([-1e6, 1e6, -1e6]);
    let params = TreeParams { leaf_size: 48, ..TreeParams::default() };
    check(&pts, None, Domain::Open, &params, "outliers");
    let mut t = Timings::default();
    let zs = prepare(&Cpu, &Domain::Open, &pts, None::<&Vec<[f64; 3]>>, &params, &mut t).unwrap();
    let leaves = zs.tree.leaves();
    assert!(leaves.len > 20_000 / 48, "only {} leaves", leaves.len);
    let max_extent = (leaves.first..leaves.first + leaves.len)
        .filter(|&n| zs.tree.src_count[n] > 1)
        .map(|n| (0..3).map(|d| zs.tree.src_hi[n][d] - zs.tree.src_lo[n][d]).fold(0.0, f64::max))
        .filter(|&e| e < 1e3)
        .fold(0.0, f64::max);
    assert!(max_extent < 5.0, "a leaf of the Gaussian spans {max_extent}");
}
