//! The kNN leaf kernel at every vector level this CPU has, against brute force: the same
//! neighbours, distances and tie order (self first, then smaller input index) at each.
//! (The point sets serve `fof_tests` too; tests that force a level hold
//! `crate::test_knobs`.)

use super::simd::{self, Simd};
use crate::geom::Real;
use crate::geom::metric::{Metric, Open, Periodic};
use crate::{Config, Context, Domain, KnnOutput, KnnParams, SourceFields, TreeParams};

pub(super) struct Rng(pub(super) u64);
impl Rng {
    pub(super) fn f64(&mut self) -> f64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        (self.0 >> 11) as f64 / (1u64 << 53) as f64
    }
}

pub(super) fn points<T: Real>(shape: &str, n: usize, seed: u64) -> Vec<[T; 3]> {
    let mut r = Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1);
    let mut centres = Vec::new();
    for _ in 0..8 {
        centres.push([r.f64(), r.f64(), r.f64()]);
    }
    (0..n)
        .map(|i| {
            let p: [f64; 3] = match shape {
                "uniform" => [r.f64(), r.f64(), r.f64()],
                // Tight clumps (many leaves with tiny boxes) and a thin background.
                "clustered" if i % 5 != 0 => {
                    let c = centres[i % 8];
                    std::array::from_fn(|d| (c[d] + 0.01 * (r.f64() - 0.5)).rem_euclid(1.0))
                }
                "clustered" => [r.f64(), r.f64(), r.f64()],
                // Exact duplicates of a few positions, and points on a coarse lattice.
                "duplicates" => {
                    let c = centres[i % 3];
                    if i % 2 == 0 { c } else { std::array::from_fn(|_| (r.f64() * 8.0).floor() / 8.0) }
                }
                _ => unreachable!(),
            };
            std::array::from_fn(|d| T::from_f64(p[d]))
        })
        .collect()
}

/// Brute force with the library's own distance formula.
fn brute<T: Real, M: Metric<T, 3>>(metric: &M, pts: &[[T; 3]], k: usize) -> (Vec<i64>, Vec<T>) {
    let (mut idx, mut dist) = (Vec::new(), Vec::new());
    for (qi, q) in pts.iter().enumerate() {
        let mut all: Vec<(T, usize, usize)> = pts.iter().enumerate().map(|(i, s)| (metric.dist2(q, s), usize::from(i != qi), i)).collect();
        // A total order (the indices differ): the k first after a selection are the k
        // first of a full sort, at a fraction of its cost.
        let by = |a: &(T, usize, usize), b: &(T, usize, usize)| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2));
        if k > 0 && k < all.len() {
            all.select_nth_unstable_by(k - 1, by);
            all.truncate(k);
        }
        all.sort_by(by);
        for j in 0..k {
            idx.push(all.get(j).map_or(-1, |e| e.2 as i64));
            dist.push(all.get(j).map_or(T::INFINITY, |e| e.0.sqrt()));
        }
    }
    (idx, dist)
}

/// Brute force for `pts` in the unit box (periodic or open).
fn brute_answer<T: Real>(pts: &[[T; 3]], periodic: bool, k: usize) -> (Vec<i64>, Vec<T>) {
    if periodic { brute(&Periodic::<T, 3>::new(&[1.0; 3]), pts, k) } else { brute(&Open, pts, k) }
}

/// The search on `ctx`: (indices, distances), `k` per row.
fn search<T: Real>(ctx: &Context, pts: &[[T; 3]], periodic: bool, k: usize) -> (Vec<i64>, Vec<T>) {
    search_with(ctx, pts, periodic, KnnParams::new(k))
}

/// `search` with any parameters.
fn search_with<T: Real>(ctx: &Context, pts: &[[T; 3]], periodic: bool, params: KnnParams<'_>) -> (Vec<i64>, Vec<T>) {
    let domain = if periodic { Domain::Periodic([1.0; 3]) } else { Domain::Open };
    let k = params.k;
    let (mut idx, mut dist) = (vec![0i64; pts.len() * k], vec![T::ZERO; pts.len() * k]);
    let mut out = KnnOutput { indices: Some(&mut idx), distances: Some(&mut dist), ..Default::default() };
    ctx.knn_self(&domain, pts, &SourceFields::default(), &params, &mut out).unwrap();
    (idx, dist)
}

/// Asserts that `got` equals `want` bit for bit.
fn assert_same<T: Real>(got: &(Vec<i64>, Vec<T>), want: &(Vec<i64>, Vec<T>), what: &str) {
    assert!(got.0 == want.0, "{what}: indices differ");
    let same = got.1.iter().zip(&want.1).all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits());
    assert!(same, "{what}: distances differ");
}

/// `search` against brute force at every vector level the CPU has (the levels' top-k
/// kinds differ: `TopK16` at AVX-512 for 2 <= k <= 16).
fn every_level<T: Real>(ctx: &Context, pts: &[[T; 3]], periodic: bool, k: usize, what: &str) {
    let want = brute_answer(pts, periodic, k);
    for level in Simd::available() {
        simd::force(Some(level));
        let got = search(ctx, pts, periodic, k);
        simd::force(None);
        assert_same(&got, &want, &format!("{what} {level:?}"));
    }
}

/// The guessed first radius (`knn_leaf`) at fixed factors: 0 (it misses for nearly every
/// query: the second pass does the work), below 1 (misses often), about right, and far
/// too large (never below the bound: one pass). Both passes must have run.
fn guesses<T: Real>() {
    use super::knn_leaf::{FORCED_GUESS, take_counts};
    use std::sync::atomic::Ordering;
    let _knobs = crate::test_knobs::hold();
    let ctx = Context::new(Config { threads: 2, tree: TreeParams { leaf_size: 8, ..TreeParams::default() } }).unwrap();
    let mut counts = [0u64; 2];
    for factor in [0.0, 0.6, 1.0, 1.3, 1e30] {
        FORCED_GUESS.store(f64::to_bits(factor), Ordering::Relaxed);
        for shape in ["uniform", "clustered", "duplicates"] {
            let pts = points::<T>(shape, 900, 11);
            for periodic in [false, true] {
                for k in [1usize, 2, 8, 16, 28, 40, 64] {
                    let what = format!("{shape} guess factor {factor} periodic {periodic} k {k}");
                    every_level(&ctx, &pts, periodic, k, &what);
                }
            }
        }
        let ([held, missed], _) = take_counts(&ctx.pool);
        if factor == 0.0 {
            assert!(missed > 10 * held, "factor 0: {held} held, {missed} missed");
        }
        counts = [counts[0] + held, counts[1] + missed];
    }
    assert!(counts[0] > 0 && counts[1] > 0, "both passes: {counts:?}");
}

/// Kept leaves stored a few at a time (`keep_leaves` / `keep_rest`): the scans that reach
/// past the stored ones must store and visit the rest, in both top-k kinds, both passes
/// of the guess and both metrics.
fn kept_in_parts<T: Real>() {
    use super::knn_leaf::{FORCED_KEPT_FIRST, take_counts};
    use std::sync::atomic::Ordering;
    let _knobs = crate::test_knobs::hold();
    let ctx = Context::new(Config { threads: 2, tree: TreeParams { leaf_size: 8, ..TreeParams::default() } }).unwrap();
    for first in [8, 16] {
        FORCED_KEPT_FIRST.store(first, Ordering::Relaxed);
        for shape in ["uniform", "clustered", "duplicates"] {
            let pts = points::<T>(shape, 900, 5);
            for periodic in [false, true] {
                for k in [1usize, 2, 8, 16, 28, 40] {
                    let what = format!("{shape} kept first {first} periodic {periodic} k {k}");
                    every_level(&ctx, &pts, periodic, k, &what);
                }
            }
        }
    }
    assert!(take_counts(&ctx.pool).1 > 100, "the rest was never stored");
}

#[test]
fn kept_leaves_in_parts_equal_brute_force_f64() {
    kept_in_parts::<f64>();
}

#[test]
fn kept_leaves_in_parts_equal_brute_force_f32() {
    kept_in_parts::<f32>();
}

#[test]
fn guessed_radius_equals_brute_force_f64() {
    guesses::<f64>();
}

#[test]
fn guessed_radius_equals_brute_force_f32() {
    guesses::<f32>();
}

fn check<T: Real>() {
    let _knobs = crate::test_knobs::hold();
    let ctx = Context::new(Config { threads: 2, tree: TreeParams { leaf_size: 8, ..TreeParams::default() } }).unwrap();
    for shape in ["uniform", "clustered", "duplicates"] {
        let pts = points::<T>(shape, 1200, 7);
        for periodic in [false, true] {
            for k in [1usize, 2, 7, 9, 16, 29, 40, 64, 133, 256, 257] {
                let want = brute_answer(&pts, periodic, k);
                for level in Simd::available() {
                    simd::force(Some(level));
                    let got = search(&ctx, &pts, periodic, k);
                    simd::force(None);
                    assert_same(&got, &want, &format!("{shape} {level:?} periodic {periodic} k {k}"));
                }
            }
        }
    }
}

#[test]
fn every_vector_level_equals_brute_force_f64() {
    check::<f64>();
}

#[test]
fn every_vector_level_equals_brute_force_f32() {
    check::<f32>();
}

/// Coincident points: most points on one spot, groups of exactly k, k - 1, k + 1 and 3k
/// points (one on the box's corner: periodic images), their input indices interleaved
/// with each other and a uniform background. The leaves answered by the tie rule
/// (`knn_same`) must equal brute force at every vector level, and must have run.
fn coincident<T: Real>() {
    let _knobs = crate::test_knobs::hold();
    let ctx = Context::new(Config { threads: 2, tree: TreeParams { leaf_size: 8, ..TreeParams::default() } }).unwrap();
    let spots = [[0.3, 0.6, 0.2], [0.7, 0.1, 0.9], [0.0, 0.0, 0.0], [0.5, 0.5, 0.5], [0.25, 0.75, 0.125]];
    for k in [1usize, 3, 8, 17, 32] {
        let mut r = Rng(77 + k as u64);
        let mut pts: Vec<[T; 3]> = Vec::new();
        for (spot, copies) in spots.iter().zip([600, k, k - 1, k + 1, 3 * k]) {
            pts.extend(std::iter::repeat_n(spot.map(T::from_f64), copies));
        }
        pts.extend((0..300).map(|_| std::array::from_fn(|_| T::from_f64(r.f64()))));
        for i in (1..pts.len()).rev() {
            pts.swap(i, (r.f64() * (i + 1) as f64) as usize);
        }
        for periodic in [false, true] {
            every_level(&ctx, &pts, periodic, k, &format!("{} coincident k {k} periodic {periodic}", T::NAME));
            assert!(super::knn_leaf::take_same_leaves(&ctx.pool) > 0, "k {k}: no leaf was answered by the tie rule");
        }
    }
}

#[test]
fn coincident_points_equal_brute_force_f64() {
    coincident::<f64>();
}

#[test]
fn coincident_points_equal_brute_force_f32() {
    coincident::<f32>();
}

/// Leaves larger than one run of distance blocks (`knn_leaf::RUN`): the scan's runs,
/// their masks' top bits and the last, partial run of a leaf.
fn large_leaves<T: Real>() {
    for leaf_size in [64usize, 96, 200] {
        let ctx = Context::new(Config { threads: 2, tree: TreeParams { leaf_size, ..TreeParams::default() } }).unwrap();
        for shape in ["uniform", "clustered", "duplicates"] {
            let pts = points::<T>(shape, 1500, 5);
            for periodic in [false, true] {
                for k in [1usize, 2, 16, 28, 40] {
                    let what = format!("{shape} leaf {leaf_size} periodic {periodic} k {k}");
                    assert_same(&search(&ctx, &pts, periodic, k), &brute_answer(&pts, periodic, k), &what);
                }
            }
        }
    }
}

#[test]
fn large_leaves_equal_brute_force_f64() {
    large_leaves::<f64>();
}

#[test]
fn large_leaves_equal_brute_force_f32() {
    large_leaves::<f32>();
}

/// `KnnParams::kth_hint` changes nothing but the speed: hints exact, too small (every
/// query then takes the second pass), too large, garbage (NaN, +inf, 0, negative, the
/// wrong particle's, random) and mixed, given as f64 and as f32, with the guesses of both
/// kinds held and missed — the neighbours equal brute force bit for bit at every vector
/// level, small k included (where only a hint turns the guess on).
fn hinted<T: Real>() {
    use super::knn_leaf::take_counts;
    let _knobs = crate::test_knobs::hold();
    let mut counts = [0u64; 2];
    for leaf_size in [8usize, 0] {
        let ctx = Context::new(Config { threads: 2, tree: TreeParams { leaf_size, ..TreeParams::default() } }).unwrap();
        for shape in ["uniform", "clustered", "duplicates"] {
            let pts = points::<T>(shape, 900, 17);
            for periodic in [false, true] {
                for k in [1usize, 2, 5, 16, 28, 40] {
                    let want = brute_answer(&pts, periodic, k);
                    let kth: Vec<f64> = want.1.chunks(k).map(|r| r[k - 1].to_f64()).collect();
                    let mut rng = Rng(0x1234_5678 + k as u64);
                    let kinds: Vec<(&str, Vec<f64>)> = vec![
                        ("exact", kth.clone()),
                        ("half", kth.iter().map(|h| h * 0.5).collect()),
                        ("one and a half", kth.iter().map(|h| h * 1.5).collect()),
                        ("zero", vec![0.0; kth.len()]),
                        ("tiny", vec![1e-300; kth.len()]),
                        ("huge", vec![1e300; kth.len()]),
                        ("nan", vec![f64::NAN; kth.len()]),
                        ("inf", vec![f64::INFINITY; kth.len()]),
                        ("negative", kth.iter().map(|h| -h).collect()),
                        ("another particle's", kth.iter().rev().copied().collect()),
                        ("random", kth.iter().map(|h| h * 2.0 * rng.f64()).collect()),
                        ("mixed", kth.iter().enumerate().map(|(i, &h)| [h, f64::NAN, 0.0, 1e300, h * 0.9, f64::NEG_INFINITY][i % 6]).collect()),
                    ];
                    for (kind, hint) in &kinds {
                        let as_f32: Vec<f32> = hint.iter().map(|&h| h as f32).collect();
                        let fields: [&dyn crate::ScalarField; 2] = [hint, &as_f32];
                        for (i, h) in fields.into_iter().enumerate() {
                            let levels: Vec<Simd> = if i == 0 { Simd::available().to_vec() } else { vec![simd::level()] };
                            for level in levels {
                                simd::force(Some(level));
                                let got = search_with(&ctx, &pts, periodic, KnnParams { k, kth_hint: Some(h) });
                                simd::force(None);
                                let what = format!(
                                    "{} {shape} leaf {leaf_size} periodic {periodic} k {k} hint {kind} ({}) {level:?}",
                                    T::NAME,
                                    ["f64", "f32"][i]
                                );
                                assert_same(&got, &want, &what);
                            }
                        }
                    }
                }
            }
        }
        let ([held, missed], _) = take_counts(&ctx.pool);
        counts = [counts[0] + held, counts[1] + missed];
    }
    assert!(counts[0] > 0 && counts[1] > 0, "both passes: {counts:?}");
}

#[test]
fn hinted_searches_equal_brute_force_f64() {
    hinted::<f64>();
}

#[test]
fn hinted_searches_equal_brute_force_f32() {
    hinted::<f32>();
}

/// A separate query set with hints (the hint is per query, in the queries' input order),
/// and a hint of the wrong length: an error naming it, the outputs untouched.
#[test]
fn hints_follow_the_queries() {
    let ctx = Context::new(Config { threads: 2, tree: TreeParams { leaf_size: 8, ..TreeParams::default() } }).unwrap();
    let src = points::<f64>("clustered", 700, 3);
    let qry = points::<f64>("uniform", 300, 4);
    for k in [1usize, 3, 16, 40] {
        let run = |hint: Option<&dyn crate::ScalarField>| {
            let (mut idx, mut dist) = (vec![0i64; qry.len() * k], vec![0.0f64; qry.len() * k]);
            let mut out = KnnOutput { indices: Some(&mut idx), distances: Some(&mut dist), ..Default::default() };
            ctx.knn(&Domain::Open, &src, &qry, &SourceFields::default(), &KnnParams { k, kth_hint: hint }, &mut out).unwrap();
            (idx, dist)
        };
        let plain = run(None);
        // Brute force for the query set.
        for (qi, q) in qry.iter().enumerate() {
            let mut all: Vec<(f64, usize)> = src.iter().enumerate().map(|(i, s)| (Open.dist2(q, s), i)).collect();
            all.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
            for (j, &(d2, i)) in all.iter().take(k).enumerate() {
                assert_eq!(plain.0[qi * k + j], i as i64, "query {qi} k {k}");
                assert_eq!(plain.1[qi * k + j].to_bits(), d2.sqrt().to_bits(), "query {qi} k {k}");
            }
        }
        let kth: Vec<f64> = plain.1.chunks(k).map(|r| r[k - 1]).collect();
        let scaled: Vec<f64> = kth.iter().enumerate().map(|(i, h)| h * [0.7, 1.0, 1.2][i % 3]).collect();
        assert_same(&run(Some(&kth)), &plain, &format!("exact hints k {k}"));
        assert_same(&run(Some(&scaled)), &plain, &format!("scaled hints k {k}"));
    }
    let short = vec![1.0f64; qry.len() - 1];
    let mut idx = vec![7i64; qry.len() * 4];
    let r = ctx.knn(
        &Domain::Open,
        &src,
        &qry,
        &SourceFields::default(),
        &KnnParams { k: 4, kth_hint: Some(&short) },
        &mut KnnOutput { indices: Some(&mut idx), ..Default::default() },
    );
    let e = r.unwrap_err().to_string();
    assert!(e.contains("kth_hint"), "{e}");
    assert!(idx.iter().all(|&i| i == 7), "outputs written despite the error");
}

/// Trees of many planes (the default top target leaves small sets with a leaf plane and
/// the super plane alone, so no node pass): the node tests' caps from the leaves below.
const DEEP: TreeParams = TreeParams { leaf_size: 8, coarsening: 4, top_target: 8, super_group: 2, max_volume_factor: 20.0 };

/// Every query of a node has k sources within the node's cap (brute force over the
/// sources), on every plane the node passes use, for self-queries and separate queries.
fn caps_hold<T: Real>() {
    use crate::base::Timings;
    use crate::pipeline::prepare;
    for shape in ["uniform", "clustered", "duplicates"] {
        let src = points::<T>(shape, 1500, 3);
        let qry = points::<T>(shape, 700, 4);
        for periodic in [false, true] {
            let domain = if periodic { Domain::Periodic([1.0; 3]) } else { Domain::Open };
            for separate in [false, true] {
                let zs = prepare(&super::Cpu, &domain, &src, separate.then_some(&qry), &DEEP, &mut Timings::default()).unwrap();
                let tree = &zs.tree;
                assert!(tree.planes.len() >= 4, "{shape}: a deep tree");
                let (qpos, _) = zs.queries();
                let sp: Vec<[T; 3]> = (0..zs.n_sources()).map(|z| std::array::from_fn(|d| zs.src_pos[d][z])).collect();
                // Every query's distances² to all sources, ascending (by z-index of the query).
                let sorted: Vec<Vec<T>> = (0..qpos[0].len())
                    .map(|z| {
                        let q: [T; 3] = std::array::from_fn(|d| qpos[d][z]);
                        let mut d2: Vec<T> =
                            sp.iter().map(|s| if periodic { Periodic::<T, 3>::new(&[1.0; 3]).dist2(&q, s) } else { Open.dist2(&q, s) }).collect();
                        d2.sort_by(|a, b| a.partial_cmp(b).unwrap());
                        d2
                    })
                    .collect();
                for k in [0usize, 1, 2, 5, 16, 40] {
                    let mut finite = 0;
                    for p in 1..tree.planes.len() - 1 {
                        let caps = if periodic {
                            super::knn::leaf_caps(&Periodic::<T, 3>::new(&[1.0; 3]), tree, k, p)
                        } else {
                            super::knn::leaf_caps(&Open, tree, k, p)
                        };
                        let plane = tree.planes[p];
                        for n in plane.first..plane.first + plane.len {
                            let cap = caps[n - plane.first];
                            finite += usize::from(cap < T::INFINITY);
                            let (q0, qn) = tree.qry_range(n);
                            for d2 in &sorted[q0 as usize..(q0 + qn) as usize] {
                                let kth = if k == 0 { T::ZERO } else { d2[k - 1] };
                                assert!(
                                    kth <= cap,
                                    "{shape} periodic {periodic} separate {separate} k {k} plane {p} node {n}: k-th {kth:?} beyond the cap {cap:?}"
                                );
                            }
                        }
                    }
                    // (A parent of leaves holds at most 4 × 8 points: beyond that no cap.)
                    assert!(finite > 0 || k > 32, "{shape} k {k}: some caps are finite");
                }
            }
        }
    }
}

#[test]
fn node_caps_hold_k_sources_f64() {
    caps_hold::<f64>();
}

#[test]
fn node_caps_hold_k_sources_f32() {
    caps_hold::<f32>();
}

/// Whole searches over trees of many planes against brute force.
#[test]
fn deep_trees_equal_brute_force() {
    let ctx = Context::new(Config { threads: 2, tree: DEEP }).unwrap();
    for shape in ["uniform", "clustered", "duplicates"] {
        let pts = points::<f64>(shape, 1500, 5);
        let pts32 = points::<f32>(shape, 1500, 5);
        for periodic in [false, true] {
            for k in [1usize, 2, 5, 16, 40] {
                assert_same(&search(&ctx, &pts, periodic, k), &brute_answer(&pts, periodic, k), &format!("f64 {shape} periodic {periodic} k {k}"));
                assert_same(
                    &search(&ctx, &pts32, periodic, k),
                    &brute_answer(&pts32, periodic, k),
                    &format!("f32 {shape} periodic {periodic} k {k}"),
                );
            }
        }
    }
}
