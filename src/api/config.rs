//! Configuration of a context: threads and the shape of the plane hierarchy.

pub use crate::base::TreeParams;

/// Configuration of a [`Context`](crate::Context).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Config {
    /// Worker threads; 0 = `OMP_NUM_THREADS` when set, else the cores this process is
    /// bound to.
    pub threads: usize,
    /// Shape of the plane hierarchy.
    pub tree: TreeParams,
}
