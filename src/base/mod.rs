//! The bottom of the crate, below geometry and the back ends: the element types buffers
//! hold, the tree's shape parameters and the stage timings every layer records.

mod elem;
mod params;
mod timings;

pub use elem::Elem;
pub(crate) use params::LeafJob;
pub use params::TreeParams;
pub use timings::{Timings, WalkStats};
