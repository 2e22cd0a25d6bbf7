//! Exact k-nearest neighbours (docs/DESIGN.md §4): what a job is — parameters, outputs,
//! statistics, and the per-query reductions. The stage order is in `pipeline::knn`, the
//! stages in the back ends.

mod params;
pub(crate) mod reduce;

pub(crate) use params::check_call;
pub use params::{KnnLists, KnnOutput, KnnParams, KnnStats, OutputOrder, SourceFields};
