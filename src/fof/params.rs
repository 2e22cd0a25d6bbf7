//! The FoF call's inputs and results: linking length, particle ids, fields, parameters,
//! statistics.

use rayon::prelude::*;

use crate::catalogue::{Catalogue, CatalogueOrder};
use crate::context::Timings;
use crate::error::{Error, Result};
use crate::knn::ScalarField;
use crate::points::{Domain, PointSource};
use crate::real::Real;
use crate::walk::WalkStats;

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
                    return bad(
                        "a relative linking length b * (V/N)^(1/3) needs the box volume V, and an open domain has none: \
                         give an absolute linking length, or a periodic box"
                            .into(),
                    );
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

/// Particle ids for halo tags (the minimum id of a group). Implemented for slices and
/// vectors of i32, i64, u32 and u64; u64 ids must be at most `i64::MAX`.
pub trait ParticleIds: Sync {
    fn len(&self) -> usize;
    fn id(&self, i: usize) -> i64;
    fn is_empty(&self) -> bool {
        self.len() == 0
    }
    /// The first id that does not fit an i64, if any.
    fn first_unrepresentable(&self) -> Option<usize> {
        None
    }
}

/// Implements `ParticleIds` for `[T]`, `Vec<T>` and `&[T]`; `$check` finds the first id
/// that does not fit an i64 (only u64 can have one).
macro_rules! impl_ids {
    ($t:ty, $check:expr) => {
        impl_ids!(@one [$t], $t, $check);
        impl_ids!(@one Vec<$t>, $t, $check);
        impl_ids!(@one &[$t], $t, $check);
    };
    (@one $s:ty, $t:ty, $check:expr) => {
        impl ParticleIds for $s {
            fn len(&self) -> usize {
                <[$t]>::len(self)
            }
            #[inline(always)]
            fn id(&self, i: usize) -> i64 {
                self[i] as i64
            }
            fn first_unrepresentable(&self) -> Option<usize> {
                let check: fn(&[$t]) -> Option<usize> = $check;
                check(self)
            }
        }
    };
}
impl_ids!(i32, |_| None);
impl_ids!(i64, |_| None);
impl_ids!(u32, |_| None);
impl_ids!(u64, |v| v.par_iter().position_first(|&x| x > i64::MAX as u64));

/// Per-particle data used by the catalogue (all in the caller's input order, read in
/// place). Everything is optional.
#[derive(Clone, Copy)]
pub struct FofFields<'a, T: Real, const D: usize> {
    /// Velocities: the catalogue then has mean velocities and velocity dispersions.
    pub velocities: Option<&'a dyn PointSource<T, D>>,
    /// Per-particle masses (finite). Without them every particle has `particle_mass`.
    pub masses: Option<&'a dyn ScalarField>,
    /// The mass of every particle when `masses` is `None` (finite, > 0; default 1).
    pub particle_mass: f64,
    /// Particle ids: a group's tag is then its minimum id (a stable halo tag across
    /// ranks and steps), else its smallest input index.
    pub ids: Option<&'a dyn ParticleIds>,
}

impl<T: Real, const D: usize> Default for FofFields<'_, T, D> {
    fn default() -> Self {
        Self { velocities: None, masses: None, particle_mass: 1.0, ids: None }
    }
}

/// Parameters of a FoF call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct FofParams {
    pub linking_length: LinkingLength,
    /// Groups with fewer members get no tag (label -1) and no catalogue entry; at least 1.
    pub min_members: usize,
    /// Order of the catalogue rows.
    pub order: CatalogueOrder,
    /// Also return the members (input indices) of every catalogue group.
    pub members: bool,
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
    pub particles: usize,
    /// The absolute linking length used.
    pub linking_length: f64,
    /// Connected components, singletons included.
    pub groups_total: usize,
    /// Groups with at least `min_members` members (the catalogue's rows).
    pub groups: usize,
    /// Particles in those groups.
    pub particles_in_groups: usize,
    pub timings: Timings,
    /// Nodes per plane, leaves first, super nodes last.
    pub nodes_per_plane: Vec<usize>,
    pub walk: WalkStats,
    /// Largest bytes of ztree's own buffers held at once (z-ordered points, tree,
    /// union–find, catalogue scratch), excluding the outputs.
    pub scratch_bytes: usize,
}

/// Owned result of [`Context::fof`].
#[derive(Clone, Debug, PartialEq)]
pub struct Fof<const D: usize> {
    /// Per particle, in input order: its group's tag, or -1 when it is in no group with
    /// at least `min_members` members.
    pub labels: Vec<i64>,
    pub catalogue: Catalogue<D>,
    pub stats: FofStats,
}
