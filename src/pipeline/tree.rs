//! The plane hierarchy (docs/DESIGN.md §2) as data: a tree of fixed depth whose node
//! arrays live in the back end's buffers. Back ends build it (`Backend::build_tree`).
//!
//! Plane `p` (capacity `n_p = leaf_size * coarsening^p`) splits the sorted points at every
//! gap whose Morton cell holds more than `n_p` points of one type. Splits of plane `p+1`
//! are a subset of those of plane `p`, so every node's children are a contiguous run of
//! nodes one plane down. The top plane has at most about `top_target` nodes; above it sits
//! a plane of "super nodes" grouping `super_group` top nodes each, where the walk starts.

use crate::backend::Backend;
use crate::geom::Real;

/// Which points are sources and which are queries, in merged z-order.
pub(crate) enum PointTypes<'a, B: Backend> {
    /// Every point is both (self-query, FoF).
    Same,
    /// `src_prefix[i]` = number of sources among the first `i` points (length n + 1).
    Joint { src_prefix: &'a B::Buf<u32> },
}

impl<B: Backend> Clone for PointTypes<'_, B> {
    fn clone(&self) -> Self {
        *self
    }
}
impl<B: Backend> Copy for PointTypes<'_, B> {}

/// One plane: nodes `first .. first + len` of the tree's node arrays.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Plane {
    pub first: usize,
    pub len: usize,
    /// Most points of one type per node (the super plane reports the top plane's times
    /// the group size).
    pub capacity: u64,
}

/// Node arrays (struct of arrays, all planes in one buffer each; plane 0 = leaves, the
/// last plane = super nodes).
pub(crate) struct Tree<B: Backend, T: Real, const D: usize> {
    pub planes: Vec<Plane>,
    /// First merged z-position of the node.
    pub start: B::Buf<u32>,
    pub src_start: B::Buf<u32>,
    pub src_count: B::Buf<u32>,
    /// The query columns (`qry_*`) may be empty when the queries are the sources
    /// (self-query, FoF): the CPU builds them so (they would copy the source columns, ~100
    /// bytes per node); read them through `Tree::qry_range` / `Tree::qry_box`.
    pub qry_start: B::Buf<u32>,
    pub qry_count: B::Buf<u32>,
    /// Tight bounds of the node's sources (empty box, lo > hi, when it has none).
    pub src_lo: B::Buf<[T; D]>,
    pub src_hi: B::Buf<[T; D]>,
    /// Tight bounds of the node's queries.
    pub qry_lo: B::Buf<[T; D]>,
    pub qry_hi: B::Buf<[T; D]>,
    /// Children: global node indices `child_start .. child_start + child_count` (leaves: 0).
    pub child_start: B::Buf<u32>,
    pub child_count: B::Buf<u32>,
    /// Largest primary level kept by regularisation, per plane (None: not needed).
    pub level_caps: Vec<Option<u8>>,
}

impl<B: Backend, T: Real, const D: usize> Tree<B, T, D> {
    pub fn num_nodes(&self) -> usize {
        self.planes.last().map_or(0, |p| p.first + p.len)
    }
    pub fn leaves(&self) -> Plane {
        self.planes[0]
    }
    pub fn super_plane(&self) -> Plane {
        *self.planes.last().unwrap()
    }
    /// Bytes held by the node arrays.
    pub fn bytes(&self) -> usize {
        let u = [&self.start, &self.src_start, &self.src_count, &self.qry_start, &self.qry_count, &self.child_start, &self.child_count];
        let b = [&self.src_lo, &self.src_hi, &self.qry_lo, &self.qry_hi];
        u.iter().map(|x| B::bytes(*x)).sum::<usize>() + b.iter().map(|x| B::bytes(*x)).sum::<usize>()
    }
}
