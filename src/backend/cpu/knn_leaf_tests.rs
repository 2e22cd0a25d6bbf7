//! Unit tests of the kNN leaf pass's private parts.

use super::*;

/// `LeafBoxes::min2` gives the bits of `Open::box_min2` for each box (queries inside,
/// outside and on the faces; degenerate boxes), 0 for an unbounded box, +inf for the
/// empty pad, and never more than the distance to a point of the box (its corners).
fn bounds_match<T: Real, const D: usize>() {
    let mut rng = super::super::knn_tests::Rng(0x9E37_79B9_7F4A_7C15);
    let mut r = || rng.f64();
    for round in 0..200 {
        let mut boxes = LeafBoxes { lo: [[T::INFINITY; B]; D], hi: [[T::INFINITY; B]; D], sh: [[T::ZERO; B]; D] };
        let mut want = [T::INFINITY; B];
        let q: [T; D] = std::array::from_fn(|_| T::from_f64(r()));
        for i in 0..B - 1 {
            let (lo, hi): ([T; D], [T; D]) = if i == 5 {
                (std::array::from_fn(|_| T::NEG_INFINITY), std::array::from_fn(|_| T::INFINITY))
            } else {
                let a: [T; D] = std::array::from_fn(|d| match (round + i + d) % 4 {
                    0 => q[d],
                    _ => T::from_f64(r()),
                });
                let b: [T; D] = std::array::from_fn(|d| if i == 3 { a[d] } else { T::from_f64(r()) });
                (std::array::from_fn(|d| if a[d] < b[d] { a[d] } else { b[d] }), std::array::from_fn(|d| if a[d] < b[d] { b[d] } else { a[d] }))
            };
            for d in 0..D {
                boxes.lo[d][i] = lo[d];
                boxes.hi[d][i] = hi[d];
            }
            want[i] = if i == 5 { T::ZERO } else { Open.box_min2(&q, &q, &lo, &hi) };
            if i != 5 {
                for corner in 0..1usize << D {
                    let p: [T; D] = std::array::from_fn(|d| if corner >> d & 1 == 1 { hi[d] } else { lo[d] });
                    assert!(want[i] <= Open.dist2(&q, &p), "{} D {D}: bound above a corner's distance", T::NAME);
                }
            }
        }
        let got = boxes.min2::<false>(&q);
        let zero_shifts = boxes.min2::<true>(&q);
        for i in 0..B {
            assert_eq!(got[i].to_f64().to_bits(), want[i].to_f64().to_bits(), "{} D {D} round {round} box {i}", T::NAME);
            assert_eq!(zero_shifts[i].to_f64().to_bits(), want[i].to_f64().to_bits(), "{} D {D} round {round} box {i}: zero shifts", T::NAME);
        }
        // Shifted (a periodic box of length 1): never above the shifted distance to a
        // corner or to a point inside; 0 for the unbounded box, +inf for the pad.
        for i in 0..B {
            for d in 0..D {
                boxes.sh[d][i] = T::from_f64([0.0, -1.0, 1.0][(round + 2 * i + d) % 3]);
            }
        }
        let got = boxes.min2::<true>(&q);
        assert_eq!(got[5], T::ZERO);
        assert_eq!(got[B - 1], T::INFINITY);
        for i in (0..B - 1).filter(|&i| i != 5) {
            let dist = |p: &[T; D]| {
                (0..D).fold(T::ZERO, |a, d| {
                    let x = (q[d] - p[d]) + boxes.sh[d][i];
                    a + x * x
                })
            };
            for corner in 0..1usize << D {
                let p: [T; D] = std::array::from_fn(|d| if corner >> d & 1 == 1 { boxes.hi[d][i] } else { boxes.lo[d][i] });
                assert!(got[i] <= dist(&p), "{} D {D} round {round} box {i}: shifted bound above a corner's distance", T::NAME);
            }
            for _ in 0..4 {
                let p: [T; D] = std::array::from_fn(|d| {
                    let (lo, hi) = (boxes.lo[d][i], boxes.hi[d][i]);
                    let x = lo + T::from_f64(r()) * (hi - lo);
                    if x < lo {
                        lo
                    } else if x > hi {
                        hi
                    } else {
                        x
                    }
                });
                assert!(got[i] <= dist(&p), "{} D {D} round {round} box {i}: shifted bound above a point's distance", T::NAME);
            }
        }
    }
}

#[test]
fn leaf_box_bounds_match_the_metric() {
    bounds_match::<f64, 3>();
    bounds_match::<f32, 3>();
    bounds_match::<f64, 2>();
    bounds_match::<f32, 2>();
}

/// `f32_below` is the largest f32 at most `x`: at zero, subnormals, exact f32 values,
/// values between two f32, past `f32::MAX` and at +inf.
#[test]
fn f32_below_is_the_largest_f32_not_above() {
    let mut rng = super::super::knn_tests::Rng(0x2545_F491_4F6C_DD1D);
    let mut xs = vec![0.0, f64::from(f32::from_bits(1)), 1e-45, 1.0, 1.0 + 1e-12, 0.1, 3e38, f64::from(f32::MAX), 1e39, f64::MAX, f64::INFINITY];
    for _ in 0..100_000 {
        let e = rng.f64() * 80.0 - 40.0;
        xs.push(rng.f64() * 10f64.powf(e));
    }
    for x in xs {
        let f = f32_below(x);
        assert!(f as f64 <= x, "{x}: {f} is above");
        let up = f.next_up();
        assert!(up as f64 > x || f == f32::INFINITY, "{x}: {up} is not above");
    }
}
