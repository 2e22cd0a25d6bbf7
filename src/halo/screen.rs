//! One halo's potential minimum, most bound member and potential energy from one pass of
//! direct sums, for halos up to `SCREEN_MAX` members (above: the bounded tree walk of
//! `potential`).
//!
//! Every member's `S_i = Σ_{j≠i} m_j / sqrt(r_ij² + ε²)` is screened with a known
//! relative error bound: on x86-64 CPUs with AVX2 (3-D) in single precision, eight lanes
//! with `rsqrt` and a Newton step (each term within 1e-5 of the definition's); elsewhere
//! in f64 in eight interleaved partial sums (the definition's terms bit for bit, only
//! their order differs: within `2 (n - 1) u S_i`). The members whose value
//! `-G S_i + extra_i`, widened by that bound, can still reach the smallest are summed again
//! in the definition's order, and the smallest of those is the answer: the brute-force
//! particle and its bits. The same sums give the most bound member (extra = the specific
//! kinetic energy) and the potential energy `½ Σ m_i φ_i`.

use rayon::prelude::*;

use super::potential::{Gravity, Members, direct_sum};

/// Halos up to this many members take the direct pass (about 2.7e8 pair terms at most).
pub(crate) const SCREEN_MAX: usize = 16384;
/// Interleaved partial sums.
const LANES: usize = 8;
/// Members above which one halo's sums run in parallel.
const PARALLEL_MIN: usize = 2048;

/// What one pass gives.
pub(crate) struct Screened {
    /// The potential-minimum member and its φ.
    pub minimum: (usize, f64),
    /// With kinetic energies: the most bound member and its energy.
    pub most_bound: Option<(usize, f64)>,
    /// `½ Σ m_i φ_i`, within the screening's relative error bound (1e-5 at most).
    pub energy: f64,
}

/// `S_i` in interleaved order (see the module).
fn screen_sum<const D: usize>(cols: &[Vec<f64>; D], mass: &[f64], eps2: f64, i: usize) -> f64 {
    let n = mass.len();
    let x: [f64; D] = std::array::from_fn(|d| cols[d][i]);
    let full = n / LANES * LANES;
    let mut acc = [0.0f64; LANES];
    for (c, mc) in mass[..full].chunks_exact(LANES).enumerate() {
        let base = c * LANES;
        let mut r2 = [0.0f64; LANES];
        for d in 0..D {
            let col: &[f64; LANES] = cols[d][base..base + LANES].try_into().expect("a whole chunk");
            for l in 0..LANES {
                let dx = x[d] - col[l];
                r2[l] += dx * dx;
            }
        }
        for l in 0..LANES {
            let t = mc[l] / (r2[l] + eps2).sqrt();
            acc[l] += if base + l == i { 0.0 } else { t };
        }
    }
    let mut s = 0.0;
    for j in full..n {
        if j != i {
            let mut r2 = 0.0;
            for d in 0..D {
                let dx = x[d] - cols[d][j];
                r2 += dx * dx;
            }
            s += mass[j] / (r2 + eps2).sqrt();
        }
    }
    acc.iter().sum::<f64>() + s
}

/// The member minimising `-G S_i + extra_i` by the definition's sums, among those the
/// screening values `s` leave possible; ties to the earlier member.
fn pick<const D: usize>(m: &Members<'_, D>, grav: Gravity, s: &[f64], rel: f64, extra: impl Fn(usize) -> f64) -> (usize, f64) {
    let n = s.len();
    let eps2 = grav.softening * grav.softening;
    // `rel`: the screening sums' relative error bound; plus the rounding of -G S + extra.
    let bounds: Vec<(f64, f64)> = (0..n)
        .map(|i| {
            let v = -grav.g * s[i] + extra(i);
            let w = rel * grav.g * s[i] + 4.0 * f64::EPSILON * v.abs();
            (v - w, v + w)
        })
        .collect();
    let upper = bounds.iter().map(|b| b.1).fold(f64::INFINITY, f64::min);
    let mut best = (usize::MAX, f64::INFINITY);
    for (i, &(lo, _)) in bounds.iter().enumerate() {
        // Coincident members without softening: S = inf, -inf for every such member.
        if lo <= upper || lo.is_nan() || upper.is_nan() {
            let v = -grav.g * direct_sum(m, eps2, i) + extra(i);
            if best.0 == usize::MAX || v < best.1 {
                best = (i, v);
            }
        }
    }
    best
}

/// Tests: take the portable f64 screening even where AVX2 is present.
#[cfg(test)]
pub(crate) static PORTABLE_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Every member's screening sum and the relative error bound of each against the
/// definition's sum: AVX2 single precision where the CPU has it (3-D), else f64.
fn sums<const D: usize>(m: &Members<'_, D>, eps2: f64) -> (Vec<f64>, f64) {
    let n = m.pos.len();
    #[cfg(target_arch = "x86_64")]
    {
        #[cfg(test)]
        let portable = PORTABLE_ONLY.load(std::sync::atomic::Ordering::Relaxed);
        #[cfg(not(test))]
        let portable = false;
        if D == 3
            && !portable
            && std::arch::is_x86_feature_detected!("avx2")
            && std::arch::is_x86_feature_detected!("fma")
            && let Some(s) = avx2::sums(m, eps2)
        {
            return (s, avx2::REL_ERROR);
        }
    }
    let cols: [Vec<f64>; D] = std::array::from_fn(|d| m.pos.iter().map(|p| p[d]).collect());
    let s = if n >= PARALLEL_MIN {
        (0..n).into_par_iter().map(|i| screen_sum(&cols, m.mass, eps2, i)).collect()
    } else {
        (0..n).map(|i| screen_sum(&cols, m.mass, eps2, i)).collect()
    };
    // Two sums of the same n - 1 positive terms in different orders differ by at most
    // 2 (n - 1) u S: doubled.
    (s, 4.0 * n as f64 * f64::EPSILON)
}

/// The pass over one halo of at most `SCREEN_MAX` members (`g > 0`).
pub(crate) fn screen<const D: usize>(m: &Members<'_, D>, grav: Gravity, kinetic: Option<&[f64]>) -> Screened {
    let eps2 = grav.softening * grav.softening;
    let (s, rel) = sums(m, eps2);
    let minimum = pick(m, grav, &s, rel, |_| 0.0);
    let most_bound = kinetic.map(|k| pick(m, grav, &s, rel, |i| k[i]));
    // Within `rel` of the definition's.
    let energy = -0.5 * grav.g * s.iter().zip(m.mass).map(|(s, w)| s * w).sum::<f64>();
    Screened { minimum, most_bound, energy }
}

/// Single-precision screening with AVX2: differences in f64 (no cancellation), then
/// squares, `rsqrt` with one Newton step and products in f32, eight lanes, added in f64.
#[cfg(target_arch = "x86_64")]
mod avx2 {
    use super::{Members, PARALLEL_MIN};
    use rayon::prelude::*;
    use std::arch::x86_64::*;

    /// Each term's relative error against the definition's f64 term: the f32 rounding of
    /// the scaled differences, squares, sums, mass and product (a few 6e-8 each) and the
    /// Newton step after `rsqrt` (1.5 · (3.7e-4)² ≈ 2e-7 plus its own roundings), with
    /// margin; the f64 additions add `n u`, far below.
    pub(super) const REL_ERROR: f64 = 1e-5;

    /// Every member's sum, or None where the scaled values leave f32's normal range.
    pub(super) fn sums<const D: usize>(m: &Members<'_, D>, eps2: f64) -> Option<Vec<f64>> {
        if D != 3 {
            return None;
        }
        let n = m.pos.len();
        // Scale lengths by the halo's extent and masses by the largest, so that every
        // f32 value is of order one.
        let mut ext = 0.0f64;
        for p in m.pos {
            for d in 0..D {
                ext = ext.max((p[d] - m.pos[0][d]).abs());
            }
        }
        let len = if ext > 0.0 { 2.0 * ext } else { 1.0 };
        let mmax = m.mass.iter().copied().fold(0.0f64, f64::max);
        let mmin = m.mass.iter().copied().fold(f64::INFINITY, f64::min);
        let eps2_s = eps2 / (len * len);
        if !(mmax > 0.0 && mmin / mmax > 1e-30 && (eps2_s == 0.0 || (1e-30..1e30).contains(&eps2_s)) && len.is_finite()) {
            return None;
        }
        let cols: [Vec<f64>; 3] = std::array::from_fn(|d| m.pos.iter().map(|p| (p[d] - m.pos[0][d]) / len).collect());
        let ms: Vec<f32> = m.mass.iter().map(|&w| (w / mmax) as f32).collect();
        let back = mmax / len;
        let one = |i: usize| {
            // SAFETY: the caller checked AVX2 and FMA.
            back * unsafe { sum_one(&cols, &ms, eps2_s as f32, i) }
        };
        Some(if n >= PARALLEL_MIN { (0..n).into_par_iter().map(one).collect() } else { (0..n).map(one).collect() })
    }

    /// Member i's scaled sum; lanes at j = i add 0.
    #[target_feature(enable = "avx2,fma")]
    unsafe fn sum_one(cols: &[Vec<f64>; 3], ms: &[f32], eps2: f32, i: usize) -> f64 {
        let n = ms.len();
        let full = n / 8 * 8;
        let xi = [cols[0][i], cols[1][i], cols[2][i]];
        let (half, three_halves, e2) = (_mm256_set1_ps(0.5), _mm256_set1_ps(1.5), _mm256_set1_ps(eps2));
        let me = _mm256_set1_epi32(i as i32);
        let iota = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
        let (mut acc0, mut acc1) = (_mm256_setzero_pd(), _mm256_setzero_pd());
        let mut j = 0;
        while j < full {
            let mut r2 = e2;
            for d in 0..3 {
                let c = cols[d].as_ptr();
                let xd = _mm256_set1_pd(xi[d]);
                // SAFETY: j + 8 <= n, the column's length.
                let (lo, hi) = unsafe { (_mm256_loadu_pd(c.add(j)), _mm256_loadu_pd(c.add(j + 4))) };
                let dx = _mm256_set_m128(_mm256_cvtpd_ps(_mm256_sub_pd(xd, hi)), _mm256_cvtpd_ps(_mm256_sub_pd(xd, lo)));
                r2 = _mm256_fmadd_ps(dx, dx, r2);
            }
            let y = _mm256_rsqrt_ps(r2);
            let y = _mm256_mul_ps(y, _mm256_fnmadd_ps(_mm256_mul_ps(half, r2), _mm256_mul_ps(y, y), three_halves));
            // SAFETY: as above.
            let t = _mm256_mul_ps(unsafe { _mm256_loadu_ps(ms.as_ptr().add(j)) }, y);
            let own = _mm256_castsi256_ps(_mm256_cmpeq_epi32(_mm256_add_epi32(_mm256_set1_epi32(j as i32), iota), me));
            let t = _mm256_andnot_ps(own, t);
            acc0 = _mm256_add_pd(acc0, _mm256_cvtps_pd(_mm256_castps256_ps128(t)));
            acc1 = _mm256_add_pd(acc1, _mm256_cvtps_pd(_mm256_extractf128_ps::<1>(t)));
            j += 8;
        }
        let mut lanes = [0.0f64; 8];
        // SAFETY: eight f64 of room.
        unsafe {
            _mm256_storeu_pd(lanes.as_mut_ptr(), acc0);
            _mm256_storeu_pd(lanes.as_mut_ptr().add(4), acc1);
        }
        let mut s: f64 = lanes.iter().sum();
        for j in full..n {
            if j != i {
                let r2: f64 = (0..3).map(|d| (xi[d] - cols[d][j]) * (xi[d] - cols[d][j])).sum::<f64>() + eps2 as f64;
                s += ms[j] as f64 / r2.sqrt();
            }
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::halo::potential::minimum;

    /// Lattices (many ties), duplicates with and without softening, random clumps: the
    /// pass picks the particles and bits of the definition (`minimum` is checked against
    /// brute force in `potential`).
    #[test]
    fn screen_equals_the_definition() {
        let mut seed = 99u64;
        let mut r = move || {
            seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (seed >> 11) as f64 / (1u64 << 53) as f64
        };
        let mut sets: Vec<(Vec<[f64; 3]>, f64)> = Vec::new();
        for n in [1usize, 2, 7, 8, 9, 100, 1000, 3000] {
            let pos: Vec<[f64; 3]> = (0..n).map(|_| [r(), r(), r()].map(|v| v * v * 0.1)).collect();
            sets.push((pos, 0.001));
        }
        let lattice: Vec<[f64; 3]> = (0..1000).map(|i| [(i % 10) as f64, ((i / 10) % 10) as f64, (i / 100) as f64]).collect();
        sets.push((lattice, 0.5));
        let mut dups: Vec<[f64; 3]> = (0..600).map(|_| [r(), r(), r()]).collect();
        dups[300] = dups[17];
        dups[301] = dups[17];
        sets.push((dups.clone(), 0.0));
        sets.push((dups, 0.01));
        for portable in [false, true] {
            PORTABLE_ONLY.store(portable, std::sync::atomic::Ordering::Relaxed);
            for (pos, soft) in &sets {
                let n = pos.len();
                let mass: Vec<f64> = (0..n).map(|i| 1.0 + (i % 3) as f64).collect();
                let kin: Vec<f64> = (0..n).map(|_| r()).collect();
                let g = Gravity { g: 2.5, softening: *soft };
                let mm = Members { pos, mass: &mass };
                let got = screen(&mm, g, Some(&kin));
                assert_eq!(got.minimum, minimum(&mm, g, |_| 0.0), "n = {n}, ε = {soft}: minimum");
                assert_eq!(got.most_bound, Some(minimum(&mm, g, |i| kin[i])), "n = {n}, ε = {soft}: most bound");
                if got.energy.is_finite() {
                    let eps2 = soft * soft;
                    let w = -0.5 * g.g * (0..n).map(|i| mass[i] * direct_sum(&mm, eps2, i)).sum::<f64>();
                    assert!((got.energy - w).abs() <= 1e-5 * w.abs(), "n = {n}: energy {} vs {w}", got.energy);
                }
            }
        }
        PORTABLE_ONLY.store(false, std::sync::atomic::Ordering::Relaxed);
    }
}
