//! What a caller hands to ztree: positions, per-particle fields and ids, the domain, and
//! the checks every input passes before any work starts.

pub(crate) mod domain;
mod fields;
mod points;
pub(crate) mod subset;
pub(crate) mod validate;

pub(crate) use domain::Bounds;
pub use domain::Domain;
pub use fields::{ParticleIds, ScalarField, VectorField};
pub(crate) use points::prefetch_addr;
pub use points::{PointSource, SoaPoints};
