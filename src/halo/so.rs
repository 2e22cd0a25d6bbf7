//! Spherical overdensity masses and radii around given centres, counting every particle
//! (not only a halo's members).
//!
//! Definition: with M(r) the mass of all particles at distance `<= r` from the centre
//! (periodic minimum image), walking outwards from the centre, R_Δ is where the mean
//! enclosed density first falls to ρ_Δ: at the first distinct distance r_k whose enclosed
//! density `M(r_k) / (4/3 π r_k³)` is below ρ_Δ, `R_Δ = (3 M_in / (4 π ρ_Δ))^(1/3)` with
//! `M_in = M(r_{k-1})` the mass inside (so `r_{k-1} <= R_Δ < r_k`), and `M_Δ = M_in`.
//! Fewer than `MIN_PARTICLES` particles inside: `M_Δ = R_Δ = 0` (GADGET-4's rule).

use std::f64::consts::PI;

/// GADGET-4's smallest number of particles inside an SO radius.
///
/// cbindgen:ignore
pub const MIN_PARTICLES: usize = 5;

/// A spherical-overdensity threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Overdensity {
    /// 200 times the critical density (GADGET-4 `Group_M_Crit200`, HACC `sod_halo_mass`).
    Crit200,
    /// 500 times the critical density (`Group_M_Crit500`).
    Crit500,
    /// 200 times the mean matter density (`Group_M_Mean200`).
    Mean200,
    /// The virial overdensity of Bryan & Norman (1998) relative to the critical density,
    /// `18π² + 82x - 39x²`, `x = Ω_m(a) - 1` (GADGET-4 `Group_M_TopHat200`'s definition).
    Virial,
}

/// cbindgen:ignore
impl Overdensity {
    /// Every definition, in this order.
    pub const ALL: [Overdensity; 4] = [Overdensity::Crit200, Overdensity::Crit500, Overdensity::Mean200, Overdensity::Virial];

    /// The threshold density ρ_Δ for `rho_crit` and `omega_m` at the step's scale factor.
    pub fn threshold(self, rho_crit: f64, omega_m: f64) -> f64 {
        match self {
            Overdensity::Crit200 => 200.0 * rho_crit,
            Overdensity::Crit500 => 500.0 * rho_crit,
            Overdensity::Mean200 => 200.0 * omega_m * rho_crit,
            Overdensity::Virial => {
                let x = omega_m - 1.0;
                (18.0 * PI * PI + 82.0 * x - 39.0 * x * x) * rho_crit
            }
        }
    }
}

/// The SO mass and radius from the particles around a centre: `(distance, mass)` sorted by
/// distance. `None` when the enclosed density is still at or above `rho` at the last
/// particle and there may be more beyond (`complete` false: the search radius must grow);
/// with every particle in the profile the crossing lies beyond the last one.
/// `Some((0, 0, 0))` with fewer than `MIN_PARTICLES` inside. Returns (mass, radius,
/// particles inside).
pub(crate) fn so_from_profile(profile: &[(f64, f64)], rho: f64, complete: bool) -> Option<(f64, f64, usize)> {
    let (mut mass, mut count) = (0.0f64, 0usize);
    let mut k = 0;
    while k < profile.len() {
        // Every particle at this distance at once.
        let r = profile[k].0;
        let (mut m, mut c) = (mass, count);
        while k < profile.len() && profile[k].0 == r {
            m += profile[k].1;
            c += 1;
            k += 1;
        }
        let density = if r > 0.0 { m / (4.0 / 3.0 * PI * r * r * r) } else { f64::INFINITY };
        if density < rho {
            if count < MIN_PARTICLES {
                return Some((0.0, 0.0, 0));
            }
            return Some((mass, (3.0 * mass / (4.0 * PI * rho)).cbrt(), count));
        }
        mass = m;
        count = c;
    }
    if !complete {
        return None;
    }
    if count < MIN_PARTICLES { Some((0.0, 0.0, 0)) } else { Some((mass, (3.0 * mass / (4.0 * PI * rho)).cbrt(), count)) }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A uniform ball: the crossing where its density meets the threshold, the mass inside.
    #[test]
    fn profile_crossings() {
        // Unit masses at r = 1..=100: enclosed density k / (4/3 π k³) falls as 1/k².
        let p: Vec<(f64, f64)> = (1..=100).map(|k| (k as f64, 1.0)).collect();
        let density = |k: f64| k / (4.0 / 3.0 * PI * k * k * k);
        // Between the densities at k = 10 and 11: the crossing is at k = 11, 10 inside.
        let rho = 0.5 * (density(10.0) + density(11.0));
        let (m, r, c) = so_from_profile(&p, rho, false).unwrap();
        assert_eq!((m, c), (10.0, 10));
        assert!((10.0..11.0).contains(&r), "{r}");
        // Fewer than five inside: zero.
        let rho_high = 4.5 / (4.0 / 3.0 * PI * 64.0);
        assert_eq!(so_from_profile(&p, rho_high, false), Some((0.0, 0.0, 0)));
        // Never below: the search must grow.
        assert_eq!(so_from_profile(&p, 1e-9, false), None);
        // Unless every particle is there: the crossing lies beyond the last.
        let (m, r, c) = so_from_profile(&p, 1e-9, true).unwrap();
        assert_eq!((m, c), (100.0, 100));
        assert!(r > 100.0);
        // Ties at one distance count together.
        let t = vec![(0.0, 1.0), (1.0, 1.0), (1.0, 1.0), (1.0, 1.0), (1.0, 1.0), (1.0, 1.0), (2.0, 1.0)];
        let rho_t = 6.0 / (4.0 / 3.0 * PI);
        let (m, r, c) = so_from_profile(&t, rho_t, false).unwrap();
        assert_eq!((m, c), (6.0, 6));
        assert!(r > 0.999 && r < 2.0, "{r}");
    }

    #[test]
    fn thresholds() {
        assert_eq!(Overdensity::Crit200.threshold(2.0, 0.3), 400.0);
        assert_eq!(Overdensity::Mean200.threshold(2.0, 0.5), 200.0);
        // Bryan & Norman at Ω_m = 1: 18π².
        assert!((Overdensity::Virial.threshold(1.0, 1.0) - 18.0 * PI * PI).abs() < 1e-12);
        // At Ω_m = 0.3: about 101 relative to critical.
        let v = Overdensity::Virial.threshold(1.0, 0.3);
        assert!((v - 101.1).abs() < 0.5, "{v}");
    }
}
