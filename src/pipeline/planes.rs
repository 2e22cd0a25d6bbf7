//! The plane logic both back ends share, on the host: the regularisation's level cap
//! from the nodes' cells, its relaxation from plane to plane, and the super plane over
//! the top plane (a few thousand nodes: built on the host for either back end). A host
//! tree is the CPU back end's `Tree`; the device back end builds its super plane in one.

use rayon::prelude::*;

use super::{Plane, PointTypes, Tree};
use crate::backend::Backend;
use crate::backend::cpu::Cpu;
use crate::base::TreeParams;
use crate::error::Result;
use crate::geom::real::{Real, fmax, fmin};

/// A tree whose node arrays are host vectors.
pub(crate) type HostTree<T, const D: usize> = Tree<Cpu, T, D>;

impl<T: Real, const D: usize> HostTree<T, D> {
    /// Children of `node`: global node indices (empty for leaves).
    #[inline(always)]
    pub fn children(&self, node: usize) -> std::ops::Range<usize> {
        let s = self.child_start[node] as usize;
        s..s + self.child_count[node] as usize
    }

    /// Whether the query columns are the source columns (a self-query tree built without
    /// its own query columns).
    #[inline(always)]
    pub fn shares_queries(&self) -> bool {
        self.qry_count.len() < self.src_count.len()
    }

    /// The queries of `node`: (first, count) in the query arrays.
    #[inline(always)]
    pub fn qry_range(&self, node: usize) -> (u32, u32) {
        if self.shares_queries() { (self.src_start[node], self.src_count[node]) } else { (self.qry_start[node], self.qry_count[node]) }
    }

    /// The tight bounds of the queries of `node`.
    #[inline(always)]
    pub fn qry_box(&self, node: usize) -> (&[T; D], &[T; D]) {
        if self.shares_queries() { (&self.src_lo[node], &self.src_hi[node]) } else { (&self.qry_lo[node], &self.qry_hi[node]) }
    }
}

/// A regularisation level cap one coarsening step up (cells `coarsening` times larger;
/// none yet: the largest).
pub(crate) fn relaxed(cap: Option<u8>, params: &TreeParams) -> Option<u8> {
    let step = (params.coarsening as f64).log2().ceil() as u8;
    Some(cap.map_or(u8::MAX - 64, |c| c.saturating_add(step).min(u8::MAX - 64)))
}

/// The regularisation cap from every node's (primary bit length of its cell, point count)
/// (the device back end reduces the nodes on the device and calls this too).
pub(crate) fn cap_from_cells(nodes: &[(u8, u32)], n: usize, params: &TreeParams) -> Option<u8> {
    // Nodes with the same (bit length, count) are interchangeable here: group them (one
    // sort of packed integers, not a comparison sort of all nodes by a computed density:
    // 3e6 leaves at 1e8 points made that the bulk of the GPU's tree stage), then take
    // the groups densest first (count per volume, the volume of a cell of bit length g
    // being 2^g; ties by (g, count), so the order is one and the same everywhere).
    // Small counts (the leaves' plane, where the nodes are many): a histogram instead.
    let max_c = nodes.par_iter().map(|x| x.1).max().unwrap_or(0) as usize;
    if max_c < 1 << 12 && nodes.len() > 1 << 12 {
        let w = max_c + 1;
        let mut hist = vec![0u64; 65 * w];
        for &(g, c) in nodes {
            hist[g.min(64) as usize * w + c as usize] += 1;
        }
        let groups = hist.iter().enumerate().filter(|e| *e.1 > 0).map(|(i, &m)| ((i / w) as u8, (i % w) as u32, m)).collect();
        return cap_from_groups(groups, n, params);
    }
    let mut keys: Vec<u64> = nodes.par_iter().map(|&(g, c)| (g as u64) << 32 | c as u64).collect();
    keys.par_sort_unstable();
    let mut groups: Vec<(u8, u32, u64)> = Vec::new();
    for k in keys {
        let (g, c) = ((k >> 32) as u8, k as u32);
        match groups.last_mut() {
            Some(last) if last.0 == g && last.1 == c => last.2 += 1,
            _ => groups.push((g, c, 1)),
        }
    }
    cap_from_groups(groups, n, params)
}

/// `cap_from_cells` from the cells grouped: (bit length, count, how many nodes), each
/// pair once, in any order (the GPU builds them as a histogram).
pub(crate) fn cap_from_groups(mut groups: Vec<(u8, u32, u64)>, n: usize, params: &TreeParams) -> Option<u8> {
    let max_g = groups.iter().map(|x| x.0).max().unwrap_or(0);
    let dens = |&(g, c, _): &(u8, u32, u64)| (c as f64).log2() - g as f64;
    groups.sort_by(|a, b| dens(b).total_cmp(&dens(a)).then((a.0, a.1).cmp(&(b.0, b.1))));
    // The densest nodes holding 90% of the points: their mean volume.
    let want = (0.9 * n as f64).ceil() as u64;
    let (mut acc, mut vol, mut cnt) = (0u64, 0.0f64, 0u64);
    for (g, c, m) in groups {
        if acc >= want {
            break;
        }
        // Nodes of the group are taken while fewer than `want` points are.
        let t = if c == 0 { m } else { m.min((want - acc).div_ceil(c as u64)) };
        acc += t * c as u64;
        vol += t as f64 * (g as f64).exp2();
        cnt += t;
    }
    let mean = vol / cnt.max(1) as f64;
    let cap = (params.max_volume_factor * mean).log2().floor().clamp(0.0, 63.0) as u8;
    if max_g > cap { Some(cap) } else { None }
}

/// Puts the super plane above the top plane of a host tree: `group` top nodes per super
/// node, their counts summed and boxes joined.
pub(crate) fn push_super_plane<T: Real, const D: usize>(tree: &mut HostTree<T, D>, group: usize) {
    let top = *tree.planes.last().unwrap();
    let queries = !tree.shares_queries();
    let first = tree.start.len();
    let len = top.len.div_ceil(group);
    for g in 0..len {
        let c0 = top.first + g * group;
        let c1 = (c0 + group).min(top.first + top.len);
        let mut b = ([T::INFINITY; D], [T::NEG_INFINITY; D], [T::INFINITY; D], [T::NEG_INFINITY; D]);
        let (mut sc, mut qc) = (0, 0);
        for c in c0..c1 {
            union_box(&mut b.0, &mut b.1, &tree.src_lo[c], &tree.src_hi[c]);
            sc += tree.src_count[c];
            if queries {
                union_box(&mut b.2, &mut b.3, &tree.qry_lo[c], &tree.qry_hi[c]);
                qc += tree.qry_count[c];
            }
        }
        tree.start.push(tree.start[c0]);
        tree.src_start.push(tree.src_start[c0]);
        tree.src_count.push(sc);
        tree.src_lo.push(b.0);
        tree.src_hi.push(b.1);
        if queries {
            tree.qry_start.push(tree.qry_start[c0]);
            tree.qry_count.push(qc);
            tree.qry_lo.push(b.2);
            tree.qry_hi.push(b.3);
        }
        tree.child_start.push(c0 as u32);
        tree.child_count.push((c1 - c0) as u32);
    }
    tree.planes.push(Plane { first, len, capacity: top.capacity.saturating_mul(group as u64) });
    tree.level_caps.push(None);
}

#[inline]
pub(crate) fn union_box<T: Real, const D: usize>(lo: &mut [T; D], hi: &mut [T; D], l: &[T; D], h: &[T; D]) {
    for d in 0..D {
        lo[d] = fmin(lo[d], l[d]);
        hi[d] = fmax(hi[d], h[d]);
    }
}

/// The host tree of z-ordered points (`levels`: the gaps' levels), planned and built by
/// the CPU back end: what a device back end stages when it has nothing to launch over.
pub(crate) fn host_tree<T: Real, const D: usize>(
    levels: &Vec<u8>,
    types: PointTypes<'_, Cpu>,
    src_pos: &[Vec<T>; D],
    qry_pos: Option<&[Vec<T>; D]>,
    params: &TreeParams,
) -> Result<HostTree<T, D>> {
    let plan = Cpu.plan_tree(levels, 0, types, params, Vec::new(), &mut Vec::new())?;
    Cpu.build_tree(plan, levels, types, src_pos, qry_pos, params)
}
