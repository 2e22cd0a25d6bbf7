//! Back ends implement the data-parallel stages; the driver (`crate::driver`) orders them.
//! The CPU back end uses rayon. A CUDA back end (DESIGN.md §7) implements the same trait
//! over device buffers.

pub mod cpu;

use crate::points::{Bounds, Domain, PointSource};
use crate::real::Real;
use crate::tree::{PointTypes, Tree, TreeParams};
use crate::error::Result;

/// The stages of one call that a back end provides.
pub trait Backend {
    fn name(&self) -> &'static str;

    /// Validates points (finite, inside a periodic box) and returns their bounding box.
    fn scan<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(&self, pts: &P, what: &'static str, domain: &Domain<D>) -> Result<Bounds<D>>;

    /// Stable sort of `keys`, carrying `vals`.
    fn sort_keys(&self, keys: &mut Vec<u64>, vals: &mut Vec<u32>);

    /// Builds the plane hierarchy over z-sorted points.
    fn build_tree<T: Real, const D: usize>(
        &self,
        levels: &[u8],
        types: PointTypes<'_>,
        src_pos: &[Vec<T>; D],
        qry_pos: &[Vec<T>; D],
        params: &TreeParams,
    ) -> Tree<T, D>;
}
