//! The Rust public API, in one place: the context a simulation keeps, its configuration,
//! and the kNN and FoF calls (serial here, distributed in `dist` with the `mpi` feature).

pub(crate) mod config;
mod context;
mod dbscan;
#[cfg(feature = "cuda")]
mod dbscan_device;
#[cfg(feature = "cuda")]
pub(crate) mod device;
#[cfg(feature = "mpi")]
pub(crate) mod dist;
#[cfg(feature = "mpi")]
pub(crate) mod dist_dbscan;
mod fof;
mod halo;
mod halo_properties;
mod knn;
pub(crate) mod knn_subset;
mod radius;
#[cfg(feature = "cuda")]
pub(crate) mod radius_device;
pub(crate) mod radius_subset;
pub(crate) mod subset;

pub use crate::base::{Timings, WalkStats};
pub use config::{Config, TreeParams};
pub use context::Context;
#[cfg(feature = "mpi")]
pub use dist::Dist;
pub use subset::KnnSubset;
