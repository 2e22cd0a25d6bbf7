//! Per-halo sums over the members about a centre: the circular-velocity peak, angular
//! momentum and Bullock spin, kinetic energy, the one-dimensional velocity dispersion and
//! the shape (inertia tensor eigenvalues and eigenvectors, simple and reduced).
//!
//! Definitions (members' positions `x` relative to the centre, minimum image; velocities
//! `u = v - v̄` relative to the mass-weighted mean; f64 sums in ascending member order):
//! - `v_max = max_k sqrt(G M(<= r_k) / r_k)` over the members' distances `r_k > 0` (`M`
//!   the members' mass within), `r_vmax` where it peaks (the first, if several);
//! - `J = Σ m x × u` (in 2D the z component alone), Bullock's spin
//!   `λ' = |J| / (sqrt(2) M V R)`, `V = sqrt(G M / R)`, for the caller's `(M, R)` (e.g.
//!   M_200c and R_200c) or the members' mass and the farthest member's distance;
//! - kinetic energy `K = Σ m |u|² / 2`; `σ_1D = sqrt(Σ m |u|² / (D Σ m))`;
//! - shape: the eigenvalues (descending) and unit eigenvectors of `Σ m x xᵀ / Σ m`, and of
//!   the reduced tensor `Σ m x xᵀ / r² / Σ m` (members at the centre left out).

/// The dynamics of one halo.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Dynamics<const D: usize> {
    /// Peak circular velocity of the members' cumulative mass profile.
    pub vmax: f64,
    /// Where it peaks.
    pub r_vmax: f64,
    /// Angular momentum about the centre (components x, y, z; 2D: z only, in `[2]`).
    pub angular_momentum: [f64; 3],
    /// Bullock's spin parameter λ'.
    pub spin: f64,
    /// Kinetic energy in the halo's frame.
    pub kinetic_energy: f64,
    /// One-dimensional velocity dispersion.
    pub sigma_1d: f64,
    /// Eigenvalues of the inertia tensor per unit mass, descending.
    pub inertia: [f64; D],
    /// Their unit eigenvectors (`inertia_axes[k]` belongs to `inertia[k]`; the component
    /// of largest magnitude positive).
    pub inertia_axes: [[f64; D]; D],
    /// The reduced tensor's eigenvalues, descending.
    pub reduced_inertia: [f64; D],
    /// Its eigenvectors.
    pub reduced_axes: [[f64; D]; D],
}

/// The dynamics of members `x` (relative to the centre), `u` (relative to the mean
/// velocity), masses `m`; `(mass, radius)` for the spin, or the members' own.
pub(crate) fn dynamics<const D: usize>(x: &[[f64; D]], u: &[[f64; D]], m: &[f64], g: f64, virial: Option<(f64, f64)>) -> Dynamics<D> {
    let n = x.len();
    let r: Vec<f64> = x.iter().map(|p| p.iter().map(|c| c * c).sum::<f64>().sqrt()).collect();
    // The circular velocity at every member's distance, members at one distance together.
    let mut order: Vec<usize> = (0..n).collect();
    order.sort_by(|&a, &b| r[a].total_cmp(&r[b]).then(a.cmp(&b)));
    let (mut inside, mut vmax, mut r_vmax) = (0.0f64, 0.0f64, 0.0f64);
    let mut k = 0;
    while k < n {
        let rk = r[order[k]];
        while k < n && r[order[k]] == rk {
            inside += m[order[k]];
            k += 1;
        }
        if rk > 0.0 {
            let v = (g * inside / rk).sqrt();
            if v > vmax {
                vmax = v;
                r_vmax = rk;
            }
        }
    }
    let mut j = [0.0f64; 3];
    let (mut kin, mut mass) = (0.0f64, 0.0f64);
    let mut t = [[0.0f64; D]; D];
    let mut tr = [[0.0f64; D]; D];
    let mut mass_r = 0.0f64;
    for i in 0..n {
        let (p, v, w) = (x[i], u[i], m[i]);
        if D == 3 {
            j[0] += w * (p[1] * v[2] - p[2] * v[1]);
            j[1] += w * (p[2] * v[0] - p[0] * v[2]);
        }
        j[2] += w * (p[0] * v[1] - p[1] * v[0]);
        kin += 0.5 * w * v.iter().map(|c| c * c).sum::<f64>();
        mass += w;
        let r2 = r[i] * r[i];
        for a in 0..D {
            for b in 0..D {
                t[a][b] += w * p[a] * p[b];
                if r2 > 0.0 {
                    tr[a][b] += w * p[a] * p[b] / r2;
                }
            }
        }
        if r2 > 0.0 {
            mass_r += w;
        }
    }
    for a in 0..D {
        for b in 0..D {
            t[a][b] /= mass;
            tr[a][b] = if mass_r > 0.0 { tr[a][b] / mass_r } else { 0.0 };
        }
    }
    let (big_m, big_r) = virial.unwrap_or((mass, r.iter().copied().fold(0.0, f64::max)));
    let jn = j.iter().map(|c| c * c).sum::<f64>().sqrt();
    let spin = if big_m > 0.0 && big_r > 0.0 { jn / (std::f64::consts::SQRT_2 * big_m * (g * big_m / big_r).sqrt() * big_r) } else { 0.0 };
    let (inertia, inertia_axes) = eigen(t);
    let (reduced_inertia, reduced_axes) = eigen(tr);
    Dynamics {
        vmax,
        r_vmax,
        angular_momentum: j,
        spin,
        kinetic_energy: kin,
        sigma_1d: (2.0 * kin / (D as f64 * mass)).sqrt(),
        inertia,
        inertia_axes,
        reduced_inertia,
        reduced_axes,
    }
}

/// Eigenvalues (descending) and unit eigenvectors of a symmetric matrix, by Jacobi
/// rotations; each vector's component of largest magnitude made positive.
pub(crate) fn eigen<const D: usize>(mut a: [[f64; D]; D]) -> ([f64; D], [[f64; D]; D]) {
    let mut v = [[0.0f64; D]; D];
    for (i, row) in v.iter_mut().enumerate() {
        row[i] = 1.0;
    }
    for _ in 0..64 {
        let off: f64 = (0..D).flat_map(|p| (0..D).filter(move |&q| q != p).map(move |q| (p, q))).map(|(p, q)| a[p][q] * a[p][q]).sum();
        let diag: f64 = (0..D).map(|p| a[p][p] * a[p][p]).sum();
        if off <= 1e-30 * diag || off == 0.0 {
            break;
        }
        for p in 0..D {
            for q in p + 1..D {
                if a[p][q] == 0.0 {
                    continue;
                }
                let theta = (a[q][q] - a[p][p]) / (2.0 * a[p][q]);
                let t = theta.signum() / (theta.abs() + (theta * theta + 1.0).sqrt());
                let t = if theta == 0.0 { 1.0 } else { t };
                let (c, s) = (1.0 / (t * t + 1.0).sqrt(), t / (t * t + 1.0).sqrt());
                for k in 0..D {
                    let (akp, akq) = (a[k][p], a[k][q]);
                    a[k][p] = c * akp - s * akq;
                    a[k][q] = s * akp + c * akq;
                }
                for k in 0..D {
                    let (apk, aqk) = (a[p][k], a[q][k]);
                    a[p][k] = c * apk - s * aqk;
                    a[q][k] = s * apk + c * aqk;
                }
                for row in v.iter_mut() {
                    let (vp, vq) = (row[p], row[q]);
                    row[p] = c * vp - s * vq;
                    row[q] = s * vp + c * vq;
                }
            }
        }
    }
    let mut idx: [usize; D] = std::array::from_fn(|i| i);
    idx.sort_by(|&x, &y| a[y][y].total_cmp(&a[x][x]).then(x.cmp(&y)));
    let values = idx.map(|i| a[i][i]);
    let vectors = idx.map(|i| {
        let mut e: [f64; D] = std::array::from_fn(|k| v[k][i]);
        let big = (0..D).max_by(|&x, &y| e[x].abs().total_cmp(&e[y].abs()).then(y.cmp(&x))).unwrap_or(0);
        if e[big] < 0.0 {
            e = e.map(|c| -c);
        }
        e
    });
    (values, vectors)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn eigen_of_known_matrices() {
        // A rotated diagonal matrix: eigenvalues 5, 2, 1.
        let (c, s) = (0.6f64, 0.8f64);
        let r = [[c, -s, 0.0], [s, c, 0.0], [0.0, 0.0, 1.0]];
        let d = [5.0, 1.0, 2.0];
        let a: [[f64; 3]; 3] = std::array::from_fn(|i| std::array::from_fn(|j| (0..3).map(|k| r[i][k] * d[k] * r[j][k]).sum()));
        let (vals, vecs) = eigen(a);
        for (v, want) in vals.iter().zip([5.0, 2.0, 1.0]) {
            assert!((v - want).abs() < 1e-12, "{vals:?}");
        }
        // The first axis is the first column of r, sign-fixed.
        assert!((vecs[0][0] - 0.6).abs() < 1e-12 && (vecs[0][1] - 0.8).abs() < 1e-12, "{vecs:?}");
        assert!((vecs[1][2] - 1.0).abs() < 1e-12);
        // A · e = λ e for each pair.
        for k in 0..3 {
            for i in 0..3 {
                let ae: f64 = (0..3).map(|j| a[i][j] * vecs[k][j]).sum();
                assert!((ae - vals[k] * vecs[k][i]).abs() < 1e-12);
            }
        }
    }

    /// A ring of unit masses in the xy plane rotating at unit speed: J = Σ m r v along z,
    /// v_max at the ring, σ_1D and the shape of a disc.
    #[test]
    fn rotating_ring() {
        let n = 1000;
        let x: Vec<[f64; 3]> =
            (0..n).map(|i| i as f64 * 2.0 * std::f64::consts::PI / n as f64).map(|a| [2.0 * a.cos(), 2.0 * a.sin(), 0.0]).collect();
        let u: Vec<[f64; 3]> = x.iter().map(|p| [-p[1] / 2.0, p[0] / 2.0, 0.0]).collect();
        let m = vec![1.0; n];
        let d = dynamics(&x, &u, &m, 1.0, None);
        assert!((d.angular_momentum[2] - 2.0 * n as f64).abs() < 1e-9 && d.angular_momentum[0].abs() < 1e-9);
        assert!((d.vmax - (n as f64 / 2.0).sqrt()).abs() < 1e-9 && (d.r_vmax - 2.0).abs() < 1e-12);
        assert!((d.kinetic_energy - 0.5 * n as f64).abs() < 1e-9);
        assert!((d.sigma_1d - (1.0f64 / 3.0).sqrt()).abs() < 1e-12);
        assert!((d.inertia[0] - 2.0).abs() < 1e-9 && (d.inertia[1] - 2.0).abs() < 1e-9 && d.inertia[2].abs() < 1e-12, "{:?}", d.inertia);
        assert!((d.reduced_inertia[0] - 0.5).abs() < 1e-9 && d.reduced_inertia[2].abs() < 1e-12);
        // λ' = J / (sqrt(2) M V R), V = sqrt(G M / R), M = n, R = 2.
        let want = 2.0 * n as f64 / (std::f64::consts::SQRT_2 * n as f64 * (n as f64 / 2.0).sqrt() * 2.0);
        assert!((d.spin - want).abs() < 1e-12);
    }
}
