//! What a kNN call is: its parameters, outputs and statistics.

use crate::base::{Timings, WalkStats};
use crate::error::{Error, Result, check_len};
use crate::input::ScalarField;
use crate::input::validate::check_scalar;

/// Per-source fields used by the reductions.
#[derive(Clone, Copy, Default)]
pub struct SourceFields<'a> {
    /// Particle masses: the density becomes (sum of neighbour masses) / (volume of the k-ball).
    pub masses: Option<&'a dyn ScalarField>,
    /// A scalar whose mean over the k neighbours is wanted.
    pub scalar: Option<&'a dyn ScalarField>,
}

/// Where rows of per-query outputs go.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum OutputOrder {
    /// Row `i` belongs to query `i` of the caller's input.
    #[default]
    Input,
    /// Rows in z-order; `KnnOutput::permutation` says which input query each row is.
    ZOrder,
}

/// Caller-owned output arrays; leave a field `None` if it is not wanted. Lists have
/// `n_queries * k` entries (row-major), summaries `n_queries`.
#[derive(Default)]
pub struct KnnOutput<'a, T> {
    /// Input index of each neighbour (nearest first); -1 pads rows with fewer than k sources.
    pub indices: Option<&'a mut [i64]>,
    /// Distances, ascending; +inf pads.
    pub distances: Option<&'a mut [T]>,
    /// Distance to the k-th neighbour (+inf when fewer than k sources).
    pub kth_distance: Option<&'a mut [T]>,
    /// k / volume of the k-ball, or the neighbours' mass over it when masses are given.
    pub density: Option<&'a mut [f64]>,
    /// Mean of `SourceFields::scalar` over the neighbours.
    pub scalar_mean: Option<&'a mut [f64]>,
    /// Rows in the queries' input order (default) or in z-order.
    pub order: OutputOrder,
    /// With `OutputOrder::ZOrder`: the input index of the query in each row.
    pub permutation: Option<&'a mut [i64]>,
}

/// Parameters of a kNN call.
#[derive(Clone, Copy, Default)]
pub struct KnnParams<'a> {
    /// Neighbours per query, at least 1. Larger than the number of sources is allowed:
    /// rows are padded and `KnnStats::padded_queries` says how many.
    pub k: usize,
    /// Optional, per query (input order): a guess of the distance to its k-th neighbour —
    /// typically the previous time step's `kth_distance` output (or a smoothing length
    /// that tracks it). The CPU search starts within it and widens only where it holds
    /// fewer than k sources, so a close guess saves most of the candidates a query would
    /// otherwise take; the results are the same whatever it holds. Values that are not
    /// finite and positive (+inf from a padded row, 0, NaN) mean "no guess" for that
    /// query. Its length must be the number of queries. In a distributed call it travels
    /// with its query (ranks may differ in giving one); the CUDA back end ignores it.
    pub kth_hint: Option<&'a dyn ScalarField>,
}

impl std::fmt::Debug for KnnParams<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KnnParams").field("k", &self.k).field("kth_hint", &self.kth_hint.map(|h| h.len())).finish()
    }
}

impl KnnParams<'_> {
    /// Parameters with `k` neighbours and no hint.
    pub fn new(k: usize) -> Self {
        Self { k, kth_hint: None }
    }

    /// The one check of `k` every entry point runs.
    pub(crate) fn validate(&self) -> Result<()> {
        if self.k == 0 {
            return Err(Error::InvalidK(0));
        }
        Ok(())
    }
}

/// What a kNN call did.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct KnnStats {
    /// Source points.
    pub sources: usize,
    /// Query points (the sources in a self-query).
    pub queries: usize,
    /// Queries with fewer than k neighbours (all of them when there are fewer than k sources).
    pub padded_queries: usize,
    /// Seconds per stage.
    pub timings: Timings,
    /// Nodes per plane, leaves first, super nodes last.
    pub nodes_per_plane: Vec<usize>,
    /// Interaction-list sizes of the walk.
    pub walk: WalkStats,
    /// Bytes of ztree's own buffers for this call (z-ordered points, tree, fields).
    pub scratch_bytes: usize,
}

/// Owned result of [`crate::Context::knn_lists`].
#[derive(Clone, Debug, PartialEq)]
pub struct KnnLists<T> {
    /// Neighbours per query (the row length).
    pub k: usize,
    /// Row `q` is `indices[q * k .. (q + 1) * k]`: source input indices, nearest first,
    /// -1 where there are fewer than k sources.
    pub indices: Vec<i64>,
    /// The distances of the same entries (+inf in padding).
    pub distances: Vec<T>,
    /// What the call did.
    pub stats: KnnStats,
}

/// Checks `k`, every requested output's length for `nq` queries, and the per-source fields
/// of `ns` sources (finite values). Shared by the serial and the distributed calls.
pub(crate) fn check_call<T>(ns: usize, nq: usize, params: &KnnParams, fields: &SourceFields<'_>, out: &KnnOutput<'_, T>) -> Result<()> {
    params.validate()?;
    let k = params.k;
    let rows = nq.checked_mul(k).ok_or(Error::InvalidParameter { name: "k", why: "n_queries * k overflows".into() })?;
    if let Some(o) = &out.indices {
        check_len("indices output", o.len(), rows)?;
    }
    if let Some(o) = &out.distances {
        check_len("distances output", o.len(), rows)?;
    }
    if let Some(o) = &out.kth_distance {
        check_len("kth_distance output", o.len(), nq)?;
    }
    if let Some(o) = &out.density {
        check_len("density output", o.len(), nq)?;
    }
    if let Some(o) = &out.scalar_mean {
        check_len("scalar_mean output", o.len(), nq)?;
        if fields.scalar.is_none() {
            return Err(Error::InvalidParameter { name: "scalar_mean", why: "requested without a source scalar field".into() });
        }
    }
    if let Some(o) = &out.permutation {
        check_len("permutation output", o.len(), nq)?;
    }
    if let Some(h) = params.kth_hint {
        // Any value is allowed (it is a guess), only the length is checked.
        check_len("kth_hint", h.len(), nq)?;
    }
    for (what, f) in [("masses", fields.masses), ("scalar field", fields.scalar)] {
        if let Some(f) = f {
            check_scalar(what, f, ns)?;
        }
    }
    Ok(())
}
