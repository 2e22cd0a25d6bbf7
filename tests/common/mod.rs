//! Shared test helpers: a seeded generator of adversarial point sets and brute-force oracles.
#![allow(dead_code)]

use ztree::Real;

pub mod require;
pub mod scatter;

#[allow(unused_imports)] // each test crate that includes this module uses some of them
pub use require::{require, require_hardware};

pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ 0xD1B5_4A32_D192_ED03)
    }
    pub fn next_u64(&mut self) -> u64 {
        // splitmix64
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    /// Uniform in [0, 1).
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
    pub fn normal(&mut self) -> f64 {
        let u = self.f64().max(1e-300);
        let v = self.f64();
        (-2.0 * u.ln()).sqrt() * (2.0 * std::f64::consts::PI * v).cos()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    Uniform,
    Clustered,
    Identical,
    Lattice,
    GaussianOutliers,
    /// Points on and near every face of the box (periodic wrap).
    Faces,
    /// Many exact duplicates of a few positions.
    Duplicates,
    /// All points on a line (degenerate extent in other dimensions).
    Line,
}

pub const SHAPES: [Shape; 8] =
    [Shape::Uniform, Shape::Clustered, Shape::Identical, Shape::Lattice, Shape::GaussianOutliers, Shape::Faces, Shape::Duplicates, Shape::Line];

/// `n` points of `shape` inside `[0, l)` per dimension (the Gaussian with outliers may
/// leave the box; only use it for open domains).
pub fn points<T: Real, const D: usize>(shape: Shape, n: usize, l: [f64; D], rng: &mut Rng) -> Vec<[T; D]> {
    let mut out = Vec::with_capacity(n);
    let centres: Vec<[f64; D]> = (0..8).map(|_| std::array::from_fn(|d| rng.f64() * l[d])).collect();
    let side = (n.max(1) as f64).powf(1.0 / D as f64).ceil() as usize;
    for i in 0..n {
        let p: [f64; D] = match shape {
            Shape::Uniform => std::array::from_fn(|d| rng.f64() * l[d]),
            Shape::Clustered => {
                if rng.below(5) == 0 {
                    std::array::from_fn(|d| rng.f64() * l[d])
                } else {
                    let c = centres[rng.below(centres.len())];
                    let w = 0.01 * (1 + rng.below(4)) as f64;
                    std::array::from_fn(|d| (c[d] + rng.normal() * w * l[d]).rem_euclid(l[d]))
                }
            }
            Shape::Identical => std::array::from_fn(|d| 0.3 * l[d]),
            Shape::Lattice => {
                // Spacing exactly 1/side of the box; many exact distance ties.
                let mut j = i;
                std::array::from_fn(|d| {
                    let c = j % side;
                    j /= side;
                    c as f64 * l[d] / side as f64
                })
            }
            Shape::GaussianOutliers => {
                if i % 97 == 5 {
                    std::array::from_fn(|d| 0.5 * l[d] + if rng.below(2) == 0 { 1e6 } else { -1e6 } * rng.f64())
                } else {
                    std::array::from_fn(|d| 0.5 * l[d] + rng.normal() * 1e-3 * l[d])
                }
            }
            Shape::Faces => std::array::from_fn(|d| match rng.below(4) {
                0 => 0.0,
                1 => (rng.f64() * 1e-6) * l[d],
                2 => (1.0 - rng.f64() * 1e-6) * l[d],
                _ => rng.f64() * l[d],
            }),
            Shape::Duplicates => centres[rng.below(3)],
            Shape::Line => {
                let t = rng.f64();
                std::array::from_fn(|d| if d == 0 { t * l[d] } else { 0.25 * l[d] })
            }
        };
        // Round into T and keep inside [0, L) after rounding.
        out.push(std::array::from_fn(|d| {
            let mut v = T::from_f64(p[d]);
            if shape != Shape::GaussianOutliers && v.to_f64() >= l[d] {
                v = T::ZERO;
            }
            v
        }));
    }
    out
}

/// The distance arithmetic of DESIGN.md §4, done by hand.
pub fn dist2<T: Real, const D: usize>(a: &[T; D], b: &[T; D], box_len: Option<[f64; D]>) -> T {
    let mut s = T::ZERO;
    for d in 0..D {
        let mut x = a[d] - b[d];
        if let Some(l) = box_len {
            let lt = T::from_f64(l[d]);
            let h = lt.half();
            if x > h {
                x = x - lt;
            } else if x < -h {
                x = x + lt;
            }
        }
        s = s + x * x;
    }
    s
}

/// Brute-force kNN: for each query, (input index, distance) of the k nearest sources,
/// ties by smaller index, padded with (-1, inf). With `qry = None` (a self-query) each
/// point is its own first neighbour, ahead of any duplicate.
pub fn brute_knn<T: Real, const D: usize>(src: &[[T; D]], qry: Option<&[[T; D]]>, k: usize, box_len: Option<[f64; D]>) -> (Vec<i64>, Vec<T>) {
    let self_query = qry.is_none();
    let qry = qry.unwrap_or(src);
    let mut idx = Vec::with_capacity(qry.len() * k);
    let mut dist = Vec::with_capacity(qry.len() * k);
    let mut all: Vec<(T, usize)> = Vec::with_capacity(src.len());
    for (qi, q) in qry.iter().enumerate() {
        all.clear();
        all.extend(src.iter().enumerate().map(|(i, s)| (dist2(q, s, box_len), i)));
        let me = if self_query { qi } else { usize::MAX };
        let by = |a: &(T, usize), b: &(T, usize)| a.0.partial_cmp(&b.0).unwrap().then((a.1 != me).cmp(&(b.1 != me))).then(a.1.cmp(&b.1));
        let kk = k.min(all.len());
        if kk > 0 && kk < all.len() {
            all.select_nth_unstable_by(kk - 1, by);
        }
        all[..kk].sort_by(by);
        for j in 0..k {
            if j < kk {
                idx.push(all[j].1 as i64);
                dist.push(all[j].0.sqrt());
            } else {
                idx.push(-1);
                dist.push(T::INFINITY);
            }
        }
    }
    (idx, dist)
}
