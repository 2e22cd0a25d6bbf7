//! Halo properties beyond the FoF catalogue's (docs/DESIGN.md §5, "Halo properties"): the
//! potential-minimum centre and the most bound particle by a bounded tree walk over each
//! halo's members (`potential`), and spherical-overdensity masses and radii around
//! centres, counting every particle (`so`), and sums over the members about a centre:
//! v_max, angular momentum and spin, kinetic energy, dispersion and shape (`dynamics`).
//! What a job is here; the calls are `Context::halo_properties` (the columns asked for,
//! in one call), and its parts `Context::halo_centres`, `Context::spherical_overdensity`
//! and `Context::halo_dynamics`.

pub(crate) mod dynamics;
pub(crate) mod potential;
pub(crate) mod screen;
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

/// The halo property columns a [`crate::Context::halo_properties`] call computes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct HaloColumns {
    /// The potential-minimum member: index, position and potential.
    pub centre: bool,
    /// The most bound member and its energy (needs velocities).
    pub most_bound: bool,
    /// M and R for 200c, 500c, 200m and virial around the potential minimum.
    pub so: bool,
    /// v_max, r_vmax, angular momentum, spin, kinetic and potential energy, σ_1D and
    /// the shape about the potential minimum (needs velocities).
    pub dynamics: bool,
    /// Member count, mass and group-ordered offset per particle type (needs types).
    pub types: bool,
}

impl HaloColumns {
    /// Whether any column needs the potential-minimum centres.
    pub fn needs_centres(&self) -> bool {
        self.centre || self.most_bound || self.so || self.dynamics
    }
}

/// What a [`crate::Context::halo_properties`] call is asked for, in the caller's units.
#[derive(Clone, Copy)]
pub struct HaloRequest<'a> {
    /// The columns.
    pub columns: HaloColumns,
    /// G and the Plummer softening (centres, energies, spin).
    pub gravity: Gravity,
    /// ρ_crit at the step's scale factor (SO).
    pub rho_crit: f64,
    /// Ω_m at the step's scale factor (SO: 200m and virial).
    pub omega_m: f64,
    /// Per-particle types, 0..=31 (GADGET's `PartType` numbers; the `types` column).
    pub types: Option<&'a dyn crate::input::ParticleIds>,
}

/// Per particle type and halo: rows of `n_types` entries, one row per halo.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct TypeSums {
    /// Entries per row: the largest type among the members, plus one.
    pub n_types: usize,
    /// Members of each type (GADGET-4 `GroupLenType`).
    pub count: Vec<i64>,
    /// Their mass (`GroupMassType`).
    pub mass: Vec<f64>,
    /// Members of that type in the halos before this one, in catalogue order
    /// (`GroupOffsetType`: where the halo's type-t particles start in a group-ordered file).
    pub offset: Vec<i64>,
}

/// The columns of [`crate::Context::halo_properties`]; those not asked for are empty.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct HaloProperties<const D: usize> {
    /// Centres (the most bound columns only with `most_bound`).
    pub centres: HaloCentres<D>,
    /// Spherical overdensities, in the order of [`Overdensity::ALL`].
    pub so: Vec<SoColumn>,
    /// Sums over the members about the potential minimum.
    pub dynamics: Vec<Dynamics<D>>,
    /// The members' potential energy `½ Σ m_i φ_i` (with `dynamics`).
    pub potential_energy: Vec<f64>,
    /// Per-type sums.
    pub types: Option<TypeSums>,
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

/// G, the critical density and Ω_m of a GADGET (or AREPO) run at one scale factor, in its
/// internal units (see [`gadget_cosmology`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Cosmology {
    /// The gravitational constant.
    pub g: f64,
    /// The comoving critical density ρ_crit(a) a³.
    pub rho_crit: f64,
    /// Ω_m(a).
    pub omega_m: f64,
}

/// G, ρ_crit(a) a³ and Ω_m(a) in the internal units of a GADGET run (its
/// `UnitLength_in_cm`, `UnitMass_in_g`, `UnitVelocity_in_cm_per_s`, h inside the units as
/// in GADGET's parameter files), `Omega0`, `OmegaLambda` and scale factor `a`, from
/// GADGET-4's cgs constants: comoving, as GADGET-4 computes its SO masses.
pub fn gadget_cosmology(
    unit_length_in_cm: f64,
    unit_mass_in_g: f64,
    unit_velocity_in_cm_per_s: f64,
    omega0: f64,
    omega_lambda: f64,
    a: f64,
) -> crate::Result<Cosmology> {
    /// GADGET-4's `GRAVITY` (cm³ g⁻¹ s⁻²) and `HUBBLE` (h s⁻¹).
    const GRAVITY: f64 = 6.6738e-8;
    const HUBBLE: f64 = 3.2407789e-18;
    for (name, v) in [
        ("unit_length_in_cm", unit_length_in_cm),
        ("unit_mass_in_g", unit_mass_in_g),
        ("unit_velocity_in_cm_per_s", unit_velocity_in_cm_per_s),
        ("omega0", omega0),
        ("a", a),
    ] {
        if !(v.is_finite() && v > 0.0) {
            return Err(crate::Error::InvalidParameter { name, why: format!("must be finite and > 0 (got {v})") });
        }
    }
    if !(omega_lambda.is_finite() && omega_lambda >= 0.0) {
        return Err(crate::Error::InvalidParameter { name: "omega_lambda", why: format!("must be finite and >= 0 (got {omega_lambda})") });
    }
    let unit_time = unit_length_in_cm / unit_velocity_in_cm_per_s;
    let g = GRAVITY / unit_length_in_cm.powi(3) * unit_mass_in_g * unit_time * unit_time;
    let h0 = HUBBLE * unit_time;
    let e2 = omega0 / (a * a * a) + (1.0 - omega0 - omega_lambda) / (a * a) + omega_lambda;
    if !(e2.is_finite() && e2 > 0.0) {
        return Err(crate::Error::InvalidParameter { name: "omega_lambda", why: format!("H(a)² is not positive at a = {a}") });
    }
    let rho_crit = 3.0 * h0 * h0 * e2 / (8.0 * std::f64::consts::PI * g) * a * a * a;
    Ok(Cosmology { g, rho_crit, omega_m: omega0 / (a * a * a) / e2 })
}
