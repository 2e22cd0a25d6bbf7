//! The FoF call's inputs and results: linking length, particle ids, fields, parameters,
//! statistics.

use super::catalogue::{Catalogue, CatalogueOrder};
use crate::base::{Timings, WalkStats};
use crate::error::{Error, Result};
use crate::input::validate::{check_ids, check_masses, check_vectors};
use crate::input::{Domain, ParticleIds, ScalarField, VectorField};

/// The linking length of a FoF call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum LinkingLength {
    /// An absolute length, in the units of the coordinates (finite, > 0).
    Absolute(f64),
    /// `b` times the mean inter-particle separation `(V / N)^(1/D)`, with `V` the volume
    /// (area in 2D) of the periodic box and `N` the number of particles of the call
    /// (GADGET uses b = 0.2, HACC 0.168). An open domain has no volume: use `Absolute`
    /// there.
    Relative(f64),
}

impl LinkingLength {
    /// The absolute linking length for `n` particles in `domain`.
    pub fn resolve<const D: usize>(&self, domain: &Domain<D>, n: usize) -> Result<f64> {
        let bad = |why: String| Err(Error::InvalidParameter { name: "linking_length", why });
        let l = match *self {
            LinkingLength::Absolute(l) => l,
            LinkingLength::Relative(b) => {
                if !(b.is_finite() && b > 0.0) {
                    return bad(format!("the relative linking length b must be finite and > 0 (got {b})"));
                }
                let Some(len) = domain.box_lengths() else {
                    return bad("a relative linking length b * (V/N)^(1/3) needs the box volume V, and an open domain has none: \
                         give an absolute linking length, or a periodic box"
                        .into());
                };
                if n == 0 {
                    return Ok(f64::INFINITY);
                }
                let vol: f64 = len.iter().product();
                b * (vol / n as f64).powf(1.0 / D as f64)
            }
        };
        if !(l.is_finite() && l > 0.0) {
            return bad(format!("the linking length must be finite and > 0 (got {l})"));
        }
        Ok(l)
    }
}

/// Per-particle data used by the catalogue (all in the caller's input order, read in
/// place). Everything is optional.
#[derive(Clone, Copy)]
pub struct FofFields<'a, const D: usize> {
    /// Velocities (f32 or f64, whatever the positions' precision): the catalogue then has
    /// mean velocities and velocity dispersions.
    pub velocities: Option<&'a dyn VectorField<D>>,
    /// Per-particle masses (finite, > 0). Without them every particle has
    /// `particle_mass`.
    pub masses: Option<&'a dyn ScalarField>,
    /// The mass of every particle when `masses` is `None` (finite, > 0; default 1).
    pub particle_mass: f64,
    /// Particle ids: a group's tag is then its minimum id (a stable halo tag across
    /// ranks and steps), else its smallest input index.
    pub ids: Option<&'a dyn ParticleIds>,
}

impl<const D: usize> FofFields<'_, D> {
    /// The one check of the fields of `n` particles every entry point runs.
    pub(crate) fn validate(&self, n: usize) -> Result<()> {
        if let Some(v) = self.velocities {
            check_vectors("velocities", v, n)?;
        }
        if let Some(m) = self.masses {
            check_masses(m, n)?;
        } else if !(self.particle_mass.is_finite() && self.particle_mass > 0.0) {
            return Err(Error::InvalidParameter { name: "particle_mass", why: format!("must be finite and > 0 (got {})", self.particle_mass) });
        }
        if let Some(ids) = self.ids {
            check_ids(ids, n)?;
        }
        Ok(())
    }
}

impl<const D: usize> Default for FofFields<'_, D> {
    fn default() -> Self {
        Self { velocities: None, masses: None, particle_mass: 1.0, ids: None }
    }
}

/// Parameters of a FoF call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FofParams {
    /// The linking length, absolute or relative to the mean spacing.
    pub linking_length: LinkingLength,
    /// Groups with fewer members get no tag (label -1) and no catalogue entry; at least 1.
    pub min_members: usize,
    /// Order of the catalogue rows.
    pub order: CatalogueOrder,
    /// Also return the members (input indices) of every catalogue group.
    pub members: bool,
}

impl FofParams {
    /// The one check of the parameters every entry point runs (the linking length is
    /// checked when resolved).
    pub(crate) fn validate(&self) -> Result<()> {
        if self.min_members < 1 {
            return Err(Error::InvalidParameter { name: "min_members", why: "must be at least 1".into() });
        }
        Ok(())
    }
}

impl Default for FofParams {
    /// b = 0.2, 20 members, z-order, no member lists.
    fn default() -> Self {
        Self { linking_length: LinkingLength::Relative(0.2), min_members: 20, order: CatalogueOrder::ZOrder, members: false }
    }
}

/// What a FoF call did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct FofStats {
    /// Particles linked (this call's points).
    pub particles: usize,
    /// The absolute linking length used.
    pub linking_length: f64,
    /// Connected components, singletons included.
    pub groups_total: usize,
    /// Groups with at least `min_members` members (the catalogue's rows).
    pub groups: usize,
    /// Particles in those groups.
    pub particles_in_groups: usize,
    /// Seconds per stage.
    pub timings: Timings,
    /// Nodes per plane, leaves first, super nodes last.
    pub nodes_per_plane: Vec<usize>,
    /// Interaction-list sizes of the walk.
    pub walk: WalkStats,
    /// Largest bytes of ztree's own buffers held at once (z-ordered points, tree,
    /// union–find, catalogue scratch), excluding the outputs.
    pub scratch_bytes: usize,
}

/// Owned result of [`crate::Context::fof`].
#[derive(Clone, Debug, PartialEq)]
pub struct Fof<const D: usize> {
    /// Per particle, in input order: its group's tag, or -1 when it is in no group with
    /// at least `min_members` members.
    pub labels: Vec<i64>,
    /// The groups with at least `min_members` members.
    pub catalogue: Catalogue<D>,
    /// What the call did.
    pub stats: FofStats,
}
