//! Building the plane hierarchy on the CPU (docs/DESIGN.md §2): the nodes of the planes
//! that `planes::plan` chose from the levels of the gaps between z-sorted points.

use rayon::prelude::*;

use super::Cpu;
use super::par::DisjointSlice;
use super::planes::{TreePlan, TypeCounts};
use crate::base::TreeParams;
use crate::geom::real::{Real, fmax, fmin};
use crate::pipeline::planes::{push_super_plane, union_box};
use crate::pipeline::{Plane, PointTypes, Tree};

/// The nodes of the planned planes over the z-ordered points (`src_pos`/`qry_pos`: the
/// sources and queries, the same arrays in a self-query), and the super plane above.
pub(crate) fn build<T: Real, const D: usize>(
    plan: TreePlan,
    types: PointTypes<'_, Cpu>,
    src_pos: &[Vec<T>; D],
    qry_pos: &[Vec<T>; D],
    params: &TreeParams,
) -> Tree<Cpu, T, D> {
    let mut tree = Tree {
        planes: Vec::new(),
        start: Vec::new(),
        src_start: Vec::new(),
        src_count: Vec::new(),
        qry_start: Vec::new(),
        qry_count: Vec::new(),
        src_lo: Vec::new(),
        src_hi: Vec::new(),
        qry_lo: Vec::new(),
        qry_hi: Vec::new(),
        child_start: Vec::new(),
        child_count: Vec::new(),
        level_caps: Vec::new(),
    };
    // Every node at once: the columns then grow without a copy (and the fresh page
    // faults of each doubling: ~40 ms of the tree stage for 4e6 clustered points).
    let top = plan.planes.last().map_or(0, |p| p.starts.len());
    let nodes = plan.planes.iter().map(|p| p.starts.len()).sum::<usize>() + top.div_ceil(params.super_group.max(1));
    reserve_nodes(&mut tree, nodes, !matches!(types, PointTypes::Same));
    for p in &plan.planes {
        push_plane(&mut tree, &p.starts, plan.n, types, src_pos, qry_pos, p.capacity);
        tree.level_caps.push(p.level_cap);
    }
    push_super_plane(&mut tree, params.super_group);
    tree
}

fn push_plane<T: Real, const D: usize>(
    tree: &mut Tree<Cpu, T, D>,
    starts: &[u32],
    n: usize,
    types: PointTypes<'_, Cpu>,
    src_pos: &[Vec<T>; D],
    qry_pos: &[Vec<T>; D],
    capacity: u64,
) {
    let first = tree.start.len();
    let len = starts.len();
    let below = tree.planes.last().copied();
    let end_of = |j: usize| if j + 1 < len { starts[j + 1] as usize } else { n };
    // In a self-query the queries are the sources: no query columns (`Tree::qry_range`).
    let same = matches!(types, PointTypes::Same);
    // Every column is grown by the plane, then the plane's nodes are written in place in
    // parallel: no per-plane table of nodes to copy from (at k = 1 the leaves' plane of
    // a clustered 1e6 set made 6.5 MB of them, fresh pages in a first call).
    tree.start.extend_from_slice(starts);
    let empty = ([T::INFINITY; D], [T::NEG_INFINITY; D]);
    let m = first + len;
    for v in [&mut tree.src_start, &mut tree.src_count, &mut tree.child_start, &mut tree.child_count] {
        v.resize(m, 0);
    }
    tree.src_lo.resize(m, empty.0);
    tree.src_hi.resize(m, empty.1);
    if !same {
        tree.qry_start.resize(m, 0);
        tree.qry_count.resize(m, 0);
        tree.qry_lo.resize(m, empty.0);
        tree.qry_hi.resize(m, empty.1);
    }
    let (src_lo, new_src_lo) = tree.src_lo.split_at_mut(first);
    let (src_hi, new_src_hi) = tree.src_hi.split_at_mut(first);
    let (qry_lo, new_qry_lo) = tree.qry_lo.split_at_mut(if same { 0 } else { first });
    let (qry_hi, new_qry_hi) = tree.qry_hi.split_at_mut(if same { 0 } else { first });
    let (below_start, src_lo, src_hi, qry_lo, qry_hi) = (&tree.start[..first], &*src_lo, &*src_hi, &*qry_lo, &*qry_hi);
    let out = (
        DisjointSlice::new(&mut tree.src_start[first..]),
        DisjointSlice::new(&mut tree.src_count[first..]),
        DisjointSlice::new(new_src_lo),
        DisjointSlice::new(new_src_hi),
        DisjointSlice::new(&mut tree.child_start[first..]),
        DisjointSlice::new(&mut tree.child_count[first..]),
    );
    let out_qry = (
        DisjointSlice::new(if same { &mut [] } else { &mut tree.qry_start[first..] }),
        DisjointSlice::new(if same { &mut [] } else { &mut tree.qry_count[first..] }),
        DisjointSlice::new(new_qry_lo),
        DisjointSlice::new(new_qry_hi),
    );
    (0..len).into_par_iter().for_each(|j| {
        let a = starts[j] as usize;
        let (ss, qs) = types.starts(a);
        let (sc, qc) = types.counts(a, end_of(j));
        let (sb, qb, children) = match below {
            None => {
                let sb = points_box(src_pos, ss as usize, sc as usize);
                let qb = if same { sb } else { points_box(qry_pos, qs as usize, qc as usize) };
                (sb, qb, (0, 0))
            }
            Some(bp) => {
                let below_starts = &below_start[bp.first..bp.first + bp.len];
                let c0 = below_starts.partition_point(|&s| s < starts[j]);
                let c1 = below_starts.partition_point(|&s| (s as usize) < end_of(j));
                let (mut sb, mut qb) = (empty, empty);
                for c in bp.first + c0..bp.first + c1 {
                    union_box(&mut sb.0, &mut sb.1, &src_lo[c], &src_hi[c]);
                    if !same {
                        union_box(&mut qb.0, &mut qb.1, &qry_lo[c], &qry_hi[c]);
                    }
                }
                (sb, qb, ((bp.first + c0) as u32, (c1 - c0) as u32))
            }
        };
        // SAFETY: node j of the new plane is this task's alone; the columns were grown to
        // hold the plane (the query columns only outside a self-query, where `same` skips
        // them).
        unsafe {
            out.0.write(j, ss);
            out.1.write(j, sc);
            out.2.write(j, sb.0);
            out.3.write(j, sb.1);
            out.4.write(j, children.0);
            out.5.write(j, children.1);
            if !same {
                out_qry.0.write(j, qs);
                out_qry.1.write(j, qc);
                out_qry.2.write(j, qb.0);
                out_qry.3.write(j, qb.1);
            }
        }
    });
    tree.planes.push(Plane { first, len, capacity });
}

fn reserve_nodes<T: Real, const D: usize>(tree: &mut Tree<Cpu, T, D>, n: usize, queries: bool) {
    for v in [&mut tree.start, &mut tree.src_start, &mut tree.src_count, &mut tree.child_start, &mut tree.child_count] {
        v.reserve_exact(n);
    }
    for v in [&mut tree.src_lo, &mut tree.src_hi] {
        v.reserve_exact(n);
    }
    if queries {
        tree.qry_start.reserve_exact(n);
        tree.qry_count.reserve_exact(n);
        tree.qry_lo.reserve_exact(n);
        tree.qry_hi.reserve_exact(n);
    }
}

fn points_box<T: Real, const D: usize>(pos: &[Vec<T>; D], start: usize, count: usize) -> ([T; D], [T; D]) {
    let mut lo = [T::INFINITY; D];
    let mut hi = [T::NEG_INFINITY; D];
    for d in 0..D {
        for &v in &pos[d][start..start + count] {
            lo[d] = fmin(lo[d], v);
            hi[d] = fmax(hi[d], v);
        }
    }
    (lo, hi)
}
