//! The host driver: the stage order of every job, written once over any back end.
//!
//! - `prepare`: validate → keys → sort → gather → levels/refine → types → planes;
//! - `knn`: prepare, fields into z-order, the walk down the planes, the leaf pass;
//! - `fof`: prepare, the leaves' own pairs, the walk, the leaf pass, contraction, the
//!   catalogue.
//!
//! Each stage is a `Backend` method; this module only orders them, times them and keeps
//! the small host-side state (plane sizes, statistics).

pub(crate) mod catalogue;
pub(crate) mod fof;
pub(crate) mod knn;
pub(crate) mod knn_host;
pub(crate) mod planes;
mod prepare;
pub(crate) mod radius;
mod tree;
#[cfg(test)]
mod tree_tests;

pub(crate) use prepare::{Prepared, prepare, prepare_with_keys};
pub(crate) use tree::{Plane, PointTypes, Tree};

use crate::backend::{Backend, Elem};

/// Interaction lists of one plane in CSR form: receiving node `a` (its index within the
/// plane) interacts with the source nodes `items[offsets[a] .. offsets[a + 1]]` (global
/// node indices).
pub(crate) struct Lists<B: Backend> {
    pub offsets: B::Buf<u32>,
    pub items: B::Buf<u32>,
}

/// Where the kNN leaf pass writes: caller arrays, rows in input order (or z-order).
pub(crate) struct KnnSinks<'a, B: Backend + 'a, T: Elem> {
    pub indices: Option<B::Out<'a, i64>>,
    pub distances: Option<B::Out<'a, T>>,
    /// Squared distances (the exact values neighbours are ranked by); +inf pads.
    pub d2: Option<B::Out<'a, T>>,
    pub kth: Option<B::Out<'a, T>>,
    /// Squared distance to the k-th neighbour (+inf when fewer than k).
    pub kth_d2: Option<B::Out<'a, T>>,
    pub density: Option<B::Out<'a, f64>>,
    pub scalar_mean: Option<B::Out<'a, f64>>,
    /// Which query each row is (its input index).
    pub permutation: Option<B::Out<'a, i64>>,
    /// Rows in z-order (else in the queries' input order).
    pub zorder: bool,
}

impl<'a, B: Backend + 'a, T: Elem> Default for KnnSinks<'a, B, T> {
    fn default() -> Self {
        Self { indices: None, distances: None, d2: None, kth: None, kth_d2: None, density: None, scalar_mean: None, permutation: None, zorder: false }
    }
}

/// One timed stage of a call: `f`, then the back end's end of stage (where the CUDA back end
/// may wait for the stage's device work), billed to `name` in `timings`.
pub(crate) fn stage<B: Backend, R>(b: &B, timings: &mut crate::base::Timings, name: &'static str, f: impl FnOnce() -> R) -> R {
    timings.time(name, || {
        let r = f();
        b.end_stage();
        r
    })
}
