//! # ztree
//!
//! Exact k-nearest-neighbour search and friends-of-friends halo finding for particle
//! simulations, on a z-ordered plane tree with dual tree walks (the jz-tree algorithm).
//!
//! ```
//! use ztree::{Config, Context, Domain};
//! let pts: Vec<[f64; 3]> = (0..1000).map(|i| {
//!     let t = i as f64;
//!     [(t * 0.618).fract(), (t * 0.414).fract(), (t * 0.732).fract()]
//! }).collect();
//! let ctx = Context::new(Config::default()).unwrap();
//! let res = ctx.knn_lists(&Domain::Periodic([1.0; 3]), &pts, None, 8).unwrap();
//! assert_eq!(res.indices[0], 0); // a point is its own nearest neighbour
//! ```

pub mod backend;
pub mod catalogue;
pub mod context;
pub mod driver;
#[cfg(feature = "mpi")]
pub mod dist;
pub mod error;
pub mod ffi;
pub mod fof;
pub mod knn;
mod par;
pub mod points;
pub mod real;
pub mod tree;
pub mod walk;
pub mod zorder;

pub use catalogue::{Catalogue, CatalogueOrder};
pub use context::{Config, Context, Timings};
#[cfg(feature = "mpi")]
pub use dist::{CatalogueScope, CommStats, Dist, DistFofStats, DistKnnStats, DistStats};
pub use error::{Error, Result};
pub use fof::{Fof, FofFields, FofParams, FofStats, LinkingLength, ParticleIds};
pub use knn::{KnnLists, KnnOutput, KnnParams, KnnStats, OutputOrder, ScalarField, SourceFields};
pub use points::{Bounds, Domain, PointSource, SoaPoints};
pub use real::Real;
pub use tree::TreeParams;
