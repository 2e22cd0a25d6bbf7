//! Halo properties beyond the FoF catalogue's (docs/DESIGN.md §5, "Halo properties"): the
//! potential-minimum centre and the most bound particle by a bounded tree walk over each
//! halo's members (`potential`), and spherical-overdensity masses and radii around
//! centres, counting every particle (`so`), and sums over the members about a centre:
//! v_max, angular momentum and spin, kinetic energy, dispersion and shape (`dynamics`).
//! What a job is here; the calls are `Context::halo_centres`,
//! `Context::spherical_overdensity` and `Context::halo_dynamics`.

pub(crate) mod dynamics;
pub(crate) mod potential;
pub(crate) mod so;

pub use dynamics::Dynamics;
pub use potential::Gravity;
pub use so::{MIN_PARTICLES, Overdensity};

/// Centres of the halos of a catalogue (one entry per row).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HaloCentres<const D: usize> {
    /// Input index of the member with the lowest potential among the halo's members.
    pub potential_min: Vec<i64>,
    /// Its position (as given, in f64).
    pub potential_min_pos: Vec<[f64; D]>,
    /// Its potential `φ = -G Σ_{j ≠ i} m_j / sqrt(r² + ε²)` over the members.
    pub potential: Vec<f64>,
    /// With velocities: the input index of the most bound member (lowest
    /// `φ + |v - v̄|² / 2`, v̄ the halo's mean velocity); empty without.
    pub most_bound: Vec<i64>,
    /// Its `φ + |v - v̄|² / 2`; empty without velocities.
    pub most_bound_energy: Vec<f64>,
}

/// The cosmology an SO call needs, at the step's scale factor, in the caller's units.
#[derive(Clone, Debug, PartialEq)]
pub struct SoParams {
    /// The critical density ρ_crit(a).
    pub rho_crit: f64,
    /// The matter density parameter Ω_m(a).
    pub omega_m: f64,
    /// The definitions wanted.
    pub definitions: Vec<Overdensity>,
}

/// One SO definition's masses and radii, one per centre (0 and 0 with fewer than
/// `MIN_PARTICLES` particles inside).
#[derive(Clone, Debug, PartialEq)]
pub struct SoColumn {
    /// Which definition.
    pub definition: Overdensity,
    /// M_Δ: the mass of every particle within R_Δ.
    pub mass: Vec<f64>,
    /// R_Δ.
    pub radius: Vec<f64>,
    /// Particles within R_Δ.
    pub count: Vec<u64>,
}
