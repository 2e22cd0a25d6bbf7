//! The kNN leaf kernel at every vector level this CPU has, against brute force: the same
//! neighbours, distances and tie order (self first, then smaller input index) at each.
//! (The point sets and the level lock serve `fof_tests` too.)

use super::simd::{self, Simd};
use crate::geom::Real;
use crate::geom::metric::{Metric, Open, Periodic};
use crate::{Config, Context, Domain, KnnOutput, KnnParams, SourceFields, TreeParams};

/// Tests that force a level run one at a time (the level is process-wide).
pub(super) static FORCING: std::sync::Mutex<()> = std::sync::Mutex::new(());

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
        all.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)).then(a.2.cmp(&b.2)));
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
    let domain = if periodic { Domain::Periodic([1.0; 3]) } else { Domain::Open };
    let (mut idx, mut dist) = (vec![0i64; pts.len() * k], vec![T::ZERO; pts.len() * k]);
    let mut out = KnnOutput { indices: Some(&mut idx), distances: Some(&mut dist), ..Default::default() };
    ctx.knn_self(&domain, pts, &SourceFields::default(), &KnnParams { k }, &mut out).unwrap();
    (idx, dist)
}

/// Asserts that `got` equals `want` bit for bit.
fn assert_same<T: Real>(got: &(Vec<i64>, Vec<T>), want: &(Vec<i64>, Vec<T>), what: &str) {
    assert!(got.0 == want.0, "{what}: indices differ");
    let same = got.1.iter().zip(&want.1).all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits());
    assert!(same, "{what}: distances differ");
}

/// The guessed first radius (`knn_leaf`) at fixed factors: 0 (it misses for nearly every
/// query: the second pass does the work), below 1 (misses often), about right, and far
/// too large (never below the bound: one pass). Both passes must have run.
fn guesses<T: Real>() {
    use super::knn_leaf::{FORCED_GUESS, take_guess_counts};
    use std::sync::atomic::Ordering;
    let _one = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    let ctx = Context::new(Config { threads: 2, tree: TreeParams { leaf_size: 8, ..TreeParams::default() } }).unwrap();
    take_guess_counts();
    let mut counts = [0u64; 2];
    for factor in [0.0, 0.6, 1.0, 1.3, 1e30] {
        FORCED_GUESS.store(f64::to_bits(factor), Ordering::Relaxed);
        for shape in ["uniform", "clustered", "duplicates"] {
            let pts = points::<T>(shape, 900, 11);
            for periodic in [false, true] {
                for k in [1usize, 2, 8, 16, 28, 40, 64] {
                    let what = format!("{shape} guess factor {factor} periodic {periodic} k {k}");
                    assert_same(&search(&ctx, &pts, periodic, k), &brute_answer(&pts, periodic, k), &what);
                }
            }
        }
        let [held, missed] = take_guess_counts();
        if factor == 0.0 {
            assert!(missed > 10 * held, "factor 0: {held} held, {missed} missed");
        }
        counts = [counts[0] + held, counts[1] + missed];
    }
    FORCED_GUESS.store(u64::MAX, Ordering::Relaxed);
    assert!(counts[0] > 0 && counts[1] > 0, "both passes: {counts:?}");
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
    let _one = FORCING.lock().unwrap_or_else(|e| e.into_inner());
    let ctx = Context::new(Config { threads: 2, tree: TreeParams { leaf_size: 8, ..TreeParams::default() } }).unwrap();
    for shape in ["uniform", "clustered", "duplicates"] {
        let pts = points::<T>(shape, 1200, 7);
        for periodic in [false, true] {
            for k in [1usize, 16, 29, 40, 64, 133, 256, 257] {
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
