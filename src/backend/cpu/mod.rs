//! The CPU back end: every stage data-parallel with rayon on the context's thread pool.

use crate::backend::Backend;
use crate::error::Result;
use crate::points::{Bounds, Domain, PointSource};
use crate::real::Real;
use crate::tree::{PointTypes, Tree, TreeParams};

#[derive(Clone, Copy, Debug, Default)]
pub struct Cpu;

impl Backend for Cpu {
    fn name(&self) -> &'static str {
        "cpu"
    }

    fn scan<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(&self, pts: &P, what: &'static str, domain: &Domain<D>) -> Result<Bounds<D>> {
        crate::zorder::scan_points(pts, what, domain)
    }

    fn sort_keys(&self, keys: &mut Vec<u64>, vals: &mut Vec<u32>) {
        crate::zorder::radix_sort(keys, vals)
    }

    fn build_tree<T: Real, const D: usize>(
        &self,
        levels: &[u8],
        types: PointTypes<'_>,
        src_pos: &[Vec<T>; D],
        qry_pos: &[Vec<T>; D],
        params: &TreeParams,
    ) -> Tree<T, D> {
        crate::tree::build(levels, types, src_pos, qry_pos, params)
    }
}
