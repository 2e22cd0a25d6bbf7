//! DBSCAN (density-based clusters, e.g. galaxies from star particles): what a job is —
//! parameters, point classes, the cluster catalogue and statistics. The stages are in
//! `api::dbscan`, composed from the exact kNN and FoF jobs.
//!
//! The ε-neighbourhood `N(p)` of a point is every point `q` (itself included) with
//! `d(p, q) <= ε`, evaluated exactly as FoF's link (`d² <= ε²` in f64 from the input
//! coordinates, periodic minimum image). A point is *core* when `|N(p)| >= min_pts`.
//! Core points within ε of each other are in one cluster (the connected components of
//! the core points under FoF's link). A non-core point with a core point in `N(p)` is a
//! *border* point of the cluster of its nearest core point (ties: the smaller input
//! index), so results never depend on threads, ranks or back end; the others are noise.
//! With `min_pts = 2` the clusters are FoF's groups of two or more.

use crate::base::Timings;
use crate::error::{Error, Result};
use crate::fof::{Catalogue, CatalogueOrder, LinkingLength};

/// What becomes of border points.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BorderPoints {
    /// In the cluster of their nearest core point (classic DBSCAN, made deterministic).
    #[default]
    NearestCore,
    /// Noise (DBSCAN*: clusters are their core points only); their class stays `Border`.
    Noise,
}

/// Parameters of a DBSCAN call.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct DbscanParams {
    /// ε: absolute, or relative to the mean spacing of the call's particles (periodic
    /// boxes), as FoF's linking length.
    pub eps: LinkingLength,
    /// Points in an ε-neighbourhood (the point itself included) that make a point core;
    /// at least 1 (HACC's galaxies: 10; 2 gives FoF's groups).
    pub min_pts: usize,
    /// Clusters with fewer members get no tag (label -1) and no catalogue row; at least 1.
    pub min_members: usize,
    /// Row order of the catalogue.
    pub order: CatalogueOrder,
    /// Also return each cluster's members (input indices, ascending).
    pub members: bool,
    /// Border points: in a cluster, or noise (DBSCAN*).
    pub border: BorderPoints,
}

impl Default for DbscanParams {
    /// ε = 0.2 mean spacings, min_pts 10, every cluster, z-order, no member lists.
    fn default() -> Self {
        Self {
            eps: LinkingLength::Relative(0.2),
            min_pts: 10,
            min_members: 1,
            order: CatalogueOrder::ZOrder,
            members: false,
            border: BorderPoints::NearestCore,
        }
    }
}

impl DbscanParams {
    /// The one check of the parameters every entry point runs (ε is checked when resolved).
    pub(crate) fn validate(&self) -> Result<()> {
        if self.min_pts < 1 {
            return Err(Error::InvalidParameter { name: "min_pts", why: "must be at least 1".into() });
        }
        if self.min_members < 1 {
            return Err(Error::InvalidParameter { name: "min_members", why: "must be at least 1".into() });
        }
        Ok(())
    }
}

/// The class of a point (`class` output).
#[repr(i8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointClass {
    /// No core point within ε, and not core.
    Noise = 0,
    /// Not core, with a core point within ε.
    Border = 1,
    /// At least `min_pts` points within ε.
    Core = 2,
}

/// The clusters with at least `min_members` members: the FoF catalogue's columns (count,
/// mass, centre of mass, velocity, dispersion, inertia radius, member lists), plus the
/// core members and the distance of the farthest member from the centre, per row.
#[derive(Clone, Debug, PartialEq)]
pub struct DbscanCatalogue<const D: usize> {
    /// The FoF-style columns; `tag` is the minimum id (or input index) of the members.
    pub rows: Catalogue<D>,
    /// Core points among each cluster's members.
    pub core_count: Vec<u64>,
    /// Distance from the centre of mass to the farthest member (minimum image).
    pub max_radius: Vec<f64>,
}

impl<const D: usize> DbscanCatalogue<D> {
    /// Clusters in the catalogue.
    pub fn len(&self) -> usize {
        self.rows.len()
    }
    /// Whether there is no cluster.
    pub fn is_empty(&self) -> bool {
        self.rows.is_empty()
    }
}

/// What a DBSCAN call did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DbscanStats {
    /// Particles of the call.
    pub particles: usize,
    /// The absolute ε used.
    pub eps: f64,
    /// Core, border and noise points (border points count as border with DBSCAN* too;
    /// particles outside a subset as noise).
    pub core: usize,
    /// See `core`.
    pub border: usize,
    /// See `core`.
    pub noise: usize,
    /// Clusters of any size (before `min_members`).
    pub clusters_total: usize,
    /// Seconds per stage.
    pub timings: Timings,
    /// Largest bytes of ztree's own buffers held at once, outputs excluded.
    pub scratch_bytes: usize,
}

/// Owned result of [`crate::Context::dbscan`].
#[derive(Clone, Debug, PartialEq)]
pub struct Dbscan<const D: usize> {
    /// Per particle (input order): its cluster's tag, or -1 (noise, or a cluster below
    /// `min_members`).
    pub labels: Vec<i64>,
    /// Per particle: core, border or noise.
    pub class: Vec<PointClass>,
    /// The clusters with at least `min_members` members.
    pub catalogue: DbscanCatalogue<D>,
    /// What the call did.
    pub stats: DbscanStats,
}
