//! Friends-of-friends halo finding (docs/DESIGN.md §5): what a job is — the linking
//! length, fields, parameters, statistics, the catalogue's definitions and the union–find
//! shared by the back ends and the distributed layer. The stage order is in
//! `pipeline::fof`, the stages in the back ends.
//!
//! Two particles are *linked* when their distance is at most the linking length `l`
//! (inclusive: `d² <= l²`, evaluated in f64 from the input coordinates whatever their
//! precision, with the periodic minimum image per dimension). Groups are the connected
//! components of that graph. A group's root is the z-index of its first point, whatever
//! the number of threads or the scheduling.

pub(crate) mod catalogue;
mod params;
pub(crate) mod union_find;

pub use catalogue::{Catalogue, CatalogueOrder};
pub use params::{Fof, FofFields, FofParams, FofStats, LinkingLength};
