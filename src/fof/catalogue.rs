//! The FoF group catalogue (docs/DESIGN.md §5, paper IV-B): its rows and definitions.
//! Back ends reduce it (`Backend::catalogue`).
//!
//! After the union–find is contracted every point carries its root, the z-index of its
//! group's first point. The members of each kept group are gathered into group order
//! (groups in z-order of their roots, members in z-order: a stable counting sort done in
//! parallel over contiguous z-ranges), then each group is reduced on its own, all sums in
//! f64 and in z-order, so the catalogue does not depend on the number of threads.
//!
//! Definitions (m = particle mass, M = Σ m, sums over the group's members):
//! - centre of mass: `x_cm = x_0 + Σ m (x - x_0) / M`, with `x_0` the group's first
//!   particle in z-order and `x - x_0` the periodic minimum image (the box length is
//!   subtracted once when `|dx| > L/2`), then wrapped into `[0, L)`. A group must be
//!   smaller than half the box in every dimension for this to be meaningful (always the
//!   case for halos);
//! - inertia radius: `sqrt(Σ m |x - x_cm|² / M)` (minimum image);
//! - mean velocity: `v_m = Σ m v / M`;
//! - velocity dispersion: the 3D (all-component) dispersion
//!   `sigma = sqrt(Σ m |v - v_m|² / M)`; divide by `sqrt(D)` for the one-dimensional one;
//! - tag: the minimum particle id of the group when ids are given, else its smallest input
//!   index.
//!
//! A group whose members have total mass 0 has NaN centre, radius and velocities.

use crate::backend::Backend;
use crate::geom::Real;

/// Order of the catalogue's rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CatalogueOrder {
    /// Z-order of the groups' first particles (cheapest; independent of the thread count
    /// like every order here).
    #[default]
    ZOrder,
    /// GADGET's order: member count descending, ties by tag (minimum id) ascending.
    Gadget,
}

/// The groups with at least `min_members` members, one row per group (struct of arrays).
#[derive(Clone, Debug, PartialEq)]
pub struct Catalogue<const D: usize> {
    pub order: CatalogueOrder,
    /// Halo tag: minimum particle id, or smallest input index without ids.
    pub tag: Vec<i64>,
    /// Member count.
    pub count: Vec<u64>,
    /// Total mass.
    pub mass: Vec<f64>,
    /// Centre of mass (inside the periodic box when there is one).
    pub centre: Vec<[f64; D]>,
    /// `sqrt(<|x - x_cm|²>_m)`.
    pub inertia_radius: Vec<f64>,
    /// Mass-weighted mean velocity; empty when no velocities were given.
    pub velocity: Vec<[f64; D]>,
    /// 3D velocity dispersion `sqrt(<|v - v_m|²>_m)`; empty without velocities.
    pub dispersion: Vec<f64>,
    /// With `FofParams::members`: group `g`'s members are
    /// `member_indices[member_offsets[g]..member_offsets[g + 1]]` (input indices,
    /// ascending). Both empty otherwise.
    pub member_offsets: Vec<u64>,
    pub member_indices: Vec<i64>,
}

impl<const D: usize> Catalogue<D> {
    pub fn empty(order: CatalogueOrder, velocities: bool) -> Self {
        let _ = velocities;
        Self {
            order,
            tag: Vec::new(),
            count: Vec::new(),
            mass: Vec::new(),
            centre: Vec::new(),
            inertia_radius: Vec::new(),
            velocity: Vec::new(),
            dispersion: Vec::new(),
            member_offsets: Vec::new(),
            member_indices: Vec::new(),
        }
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.tag.len()
    }

    pub fn is_empty(&self) -> bool {
        self.tag.is_empty()
    }

    /// Members (input indices, ascending) of group `g`; empty unless requested.
    pub fn members(&self, g: usize) -> &[i64] {
        if self.member_offsets.is_empty() {
            return &[];
        }
        &self.member_indices[self.member_offsets[g] as usize..self.member_offsets[g + 1] as usize]
    }
}

/// What the catalogue stage reads besides the points and their roots.
pub(crate) struct CatalogueRequest<'a, B: Backend + 'a, T: Real, const D: usize> {
    pub box_len: Option<[f64; D]>,
    pub velocities: Option<B::Vectors<'a, T, D>>,
    pub masses: Option<B::Scalar<'a>>,
    pub particle_mass: f64,
    pub ids: Option<B::Ids<'a>>,
    pub min_members: usize,
    pub order: CatalogueOrder,
    pub members: bool,
}

/// What the catalogue stage did.
pub(crate) struct ReduceStats {
    pub groups_total: usize,
    pub particles_in_groups: usize,
    pub scratch_bytes: usize,
}
