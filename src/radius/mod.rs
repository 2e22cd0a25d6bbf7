//! Radius queries (docs/DESIGN.md §5, "Radius queries"): for every query, the sources
//! within a radius — fixed, or one per query (an SPH smoothing length) — by FoF's
//! inclusive f64 test, `d² <= r²`. What a job is: parameters, outputs, statistics and the
//! SPH kernel; the stage order is in `pipeline::radius`, the passes in the back ends.
//!
//! In a self-query every point is its own neighbour (distance 0), as in scipy's
//! `query_ball_point` on the tree's own points and in SPH sums.

use crate::base::{Timings, WalkStats};
use crate::error::{Error, Result, check_len};
use crate::input::ScalarField;
use crate::input::validate::check_scalar;
use crate::knn::SourceFields;

/// The search radius of every query.
#[derive(Clone, Copy)]
pub enum SearchRadius<'a> {
    /// One radius for all queries (finite, >= 0).
    Fixed(f64),
    /// Query `i`'s radius is `get(i)` (input order; finite, >= 0), e.g. the smoothing
    /// length.
    PerQuery(&'a dyn ScalarField),
}

impl std::fmt::Debug for SearchRadius<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SearchRadius::Fixed(r) => write!(f, "Fixed({r})"),
            SearchRadius::PerQuery(v) => write!(f, "PerQuery(len {})", v.len()),
        }
    }
}

/// The order of each query's neighbour list.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListOrder {
    /// Nearest first; equal distances by ascending source index.
    #[default]
    Distance,
    /// Ascending source index.
    Index,
}

/// Parameters of a radius query.
#[derive(Clone, Copy, Debug)]
pub struct RadiusParams<'a> {
    /// Fixed, or per query.
    pub radius: SearchRadius<'a>,
    /// Neighbour lists (CSR, owned by the result) in this order; None: no lists.
    pub lists: Option<ListOrder>,
    /// With lists: each entry's distance too.
    pub list_distances: bool,
    /// Most bytes the lists (offsets, indices, distances) may take, 0 = no limit: the
    /// counting pass sizes them first, and more is `Error::OutOfMemory` before anything
    /// is allocated for them.
    pub max_list_bytes: u64,
    /// Counts only (no lists, sums or density): a query's count stops once it reaches
    /// this many, so the count is `min(true count, limit)` and dense regions cost less
    /// (DBSCAN's core test: `min_pts`). 0: exact counts.
    pub count_limit: u64,
}

impl<'a> RadiusParams<'a> {
    /// A fixed radius, no lists.
    pub fn new(radius: f64) -> Self {
        Self { radius: SearchRadius::Fixed(radius), lists: None, list_distances: false, max_list_bytes: 0, count_limit: 0 }
    }

    /// One radius per query.
    pub fn per_query(radii: &'a dyn ScalarField) -> Self {
        Self { radius: SearchRadius::PerQuery(radii), ..Self::new(0.0) }
    }

    /// With neighbour lists in `order`.
    pub fn with_lists(self, order: ListOrder) -> Self {
        Self { lists: Some(order), ..self }
    }
}

/// Caller-owned per-query outputs (input order, one value per query); leave a field
/// `None` if it is not wanted.
#[derive(Default)]
pub struct RadiusOutput<'a> {
    /// Neighbours within the radius (a self-query counts the point itself).
    pub counts: Option<&'a mut [i64]>,
    /// Sum of `SourceFields::scalar` over the neighbours.
    pub scalar_sum: Option<&'a mut [f64]>,
    /// Its mean (NaN where a query has no neighbour).
    pub scalar_mean: Option<&'a mut [f64]>,
    /// SPH density: `sum_j m_j W(|x_i - x_j|, h_i)` with the cubic spline `W` of support
    /// `h_i` = the query's radius ([`sph_kernel`]), masses from `SourceFields::masses` or
    /// 1 each. 0 for a query of radius 0.
    pub density: Option<&'a mut [f64]>,
}

/// Neighbour lists in CSR form: query `q`'s neighbours are entries
/// `offsets[q] .. offsets[q + 1]` (queries in input order).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct NeighbourLists {
    /// `n_queries + 1` offsets, from 0 to the number of entries.
    pub offsets: Vec<i64>,
    /// Source input indices.
    pub indices: Vec<i64>,
    /// Their distances, in f64 as the test computes them, whatever the input precision
    /// (empty unless `RadiusParams::list_distances`).
    pub distances: Vec<f64>,
}

impl NeighbourLists {
    /// The neighbour indices of query `q`.
    pub fn of(&self, q: usize) -> &[i64] {
        &self.indices[self.offsets[q] as usize..self.offsets[q + 1] as usize]
    }
}

/// What a radius query did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct RadiusStats {
    /// Source points.
    pub sources: usize,
    /// Query points (the sources in a self-query).
    pub queries: usize,
    /// (query, source) pairs within the radius.
    pub pairs: u64,
    /// The largest radius.
    pub max_radius: f64,
    /// Seconds per stage.
    pub timings: Timings,
    /// Nodes per plane, leaves first.
    pub nodes_per_plane: Vec<usize>,
    /// Interaction-list sizes of the walk.
    pub walk: WalkStats,
    /// Bytes of ztree's own buffers (z-ordered points, tree, fields), lists excluded.
    pub scratch_bytes: usize,
}

/// The result of a radius query: statistics, and the lists when asked for.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Radius {
    /// The neighbour lists (with `RadiusParams::lists`).
    pub lists: Option<NeighbourLists>,
    /// What the call did.
    pub stats: RadiusStats,
}

/// The cubic spline kernel of SPH (Monaghan & Lattanzio 1985) with compact support `h`
/// (GADGET's convention: zero beyond `r = h`), normalised in `D` = 2 or 3 dimensions:
/// `W = σ/h^D · (1 - 6q² + 6q³)` for `q = r/h <= 1/2`, `σ/h^D · 2(1 - q)³` up to 1,
/// with `σ = 8/π` (3D) or `40/(7π)` (2D).
pub fn sph_kernel<const D: usize>(r: f64, h: f64) -> f64 {
    if h <= 0.0 || r > h {
        return 0.0;
    }
    let sigma = if D == 2 { 40.0 / (7.0 * std::f64::consts::PI) } else { 8.0 / std::f64::consts::PI };
    // Products written out (not `powi`): kernels/radius.cu computes the same operations.
    let (q, u) = (r / h, 1.0 - r / h);
    let w = if q <= 0.5 { 1.0 - 6.0 * q * q + 6.0 * q * q * q } else { 2.0 * (u * u * u) };
    sigma * w / if D == 2 { h * h } else { h * h * h }
}

/// Checks the radius, every requested output's length for `nq` queries, and the fields of
/// `ns` sources.
pub(crate) fn check_call(ns: usize, nq: usize, params: &RadiusParams, fields: &SourceFields<'_>, out: &RadiusOutput<'_>) -> Result<()> {
    match params.radius {
        SearchRadius::Fixed(r) => {
            if !(r.is_finite() && r >= 0.0) {
                return Err(Error::InvalidParameter { name: "radius", why: format!("must be finite and >= 0 (got {r})") });
            }
        }
        SearchRadius::PerQuery(v) => {
            check_len("radii", v.len(), nq)?;
            if let Some((i, r)) = (0..nq).map(|i| (i, v.get(i))).find(|(_, r)| !(r.is_finite() && *r >= 0.0)) {
                return Err(Error::InvalidParameter { name: "radii", why: format!("radius {i} must be finite and >= 0 (got {r})") });
            }
        }
    }
    if params.count_limit > 0 && (params.lists.is_some() || out.scalar_sum.is_some() || out.scalar_mean.is_some() || out.density.is_some()) {
        return Err(Error::InvalidParameter { name: "count_limit", why: "limits counts only: not with lists, sums, means or density".into() });
    }
    if params.list_distances && params.lists.is_none() {
        return Err(Error::InvalidParameter { name: "list_distances", why: "asked for without neighbour lists".into() });
    }
    for (what, o) in [("counts output", out.counts.as_ref().map(|o| o.len())), ("scalar_sum output", out.scalar_sum.as_ref().map(|o| o.len()))] {
        if let Some(len) = o {
            check_len(what, len, nq)?;
        }
    }
    for (what, o) in [("scalar_mean output", out.scalar_mean.as_ref().map(|o| o.len())), ("density output", out.density.as_ref().map(|o| o.len()))] {
        if let Some(len) = o {
            check_len(what, len, nq)?;
        }
    }
    if (out.scalar_sum.is_some() || out.scalar_mean.is_some()) && fields.scalar.is_none() {
        return Err(Error::InvalidParameter { name: "scalar_sum", why: "scalar sums or means requested without a source scalar field".into() });
    }
    for (what, f) in [("masses", fields.masses), ("scalar field", fields.scalar)] {
        if let Some(f) = f {
            check_scalar(what, f, ns)?;
        }
    }
    Ok(())
}

/// Bytes of lists with `entries` entries over `nq` queries.
pub(crate) fn list_bytes(nq: usize, entries: u64, distances: bool) -> u64 {
    (nq as u64 + 1) * 8 + entries * if distances { 16 } else { 8 }
}

#[cfg(test)]
mod tests {
    use super::sph_kernel;

    /// The kernel integrates to 1 over its support (a midpoint sum over shells / rings).
    #[test]
    fn kernel_is_normalised() {
        let n = 200_000;
        let h = 0.7;
        let (mut s3, mut s2) = (0.0, 0.0);
        for i in 0..n {
            let r = (i as f64 + 0.5) / n as f64 * h;
            let dr = h / n as f64;
            s3 += sph_kernel::<3>(r, h) * 4.0 * std::f64::consts::PI * r * r * dr;
            s2 += sph_kernel::<2>(r, h) * 2.0 * std::f64::consts::PI * r * dr;
        }
        assert!((s3 - 1.0).abs() < 1e-9, "3D: {s3}");
        assert!((s2 - 1.0).abs() < 1e-9, "2D: {s2}");
        assert_eq!(sph_kernel::<3>(h, h), 0.0);
        assert!(sph_kernel::<3>(0.5 * h, h) > 0.0);
        assert_eq!(sph_kernel::<3>(1.1 * h, h), 0.0);
    }
}
