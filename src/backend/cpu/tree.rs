//! Building the plane hierarchy on the CPU (docs/DESIGN.md §2) from the levels of the
//! gaps between z-sorted points.

use rayon::prelude::*;

use super::Cpu;
use super::par::{DisjointSlice, filter_indices};
use crate::api::TreeParams;
use crate::geom::real::{Real, fmax, fmin};
use crate::pipeline::{Plane, PointTypes, Tree};

impl<T: Real, const D: usize> Tree<Cpu, T, D> {
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

/// Per-type counts and starts of merged point ranges.
trait TypeCounts {
    fn counts(&self, a: usize, b: usize) -> (u32, u32);
    fn starts(&self, a: usize) -> (u32, u32);
}

impl TypeCounts for PointTypes<'_, Cpu> {
    /// (sources, queries) among merged points `[a, b)`.
    #[inline(always)]
    fn counts(&self, a: usize, b: usize) -> (u32, u32) {
        match self {
            PointTypes::Same => ((b - a) as u32, (b - a) as u32),
            PointTypes::Joint { src_prefix } => {
                let s = src_prefix[b] - src_prefix[a];
                (s, (b - a) as u32 - s)
            }
        }
    }
    /// First source and first query at or after merged position `a`.
    #[inline(always)]
    fn starts(&self, a: usize) -> (u32, u32) {
        match self {
            PointTypes::Same => (a as u32, a as u32),
            PointTypes::Joint { src_prefix } => (src_prefix[a], a as u32 - src_prefix[a]),
        }
    }
}

/// For each gap, the smallest plane capacity that does NOT split it by counts: gap `i`
/// is split on plane `p` iff `n_p < split_cap[i]`. Built in `scratch` (the spent sort
/// keys: memory already mapped in, where fresh memory costs a page fault per 4 KiB).
///
/// The gap's Morton cell is the run of points between the nearest gaps with a strictly
/// higher level on either side (found with two monotone-stack passes); a gap is split when
/// its cell holds more than `n_p` points of one type. Gaps between identical keys (level 0)
/// lie in a cell that cannot be split further; such runs are cut into chunks of `n_p`
/// points, aligned at the run's start so that chunks nest across planes.
pub(crate) fn split_caps<'s>(levels: &[u8], types: PointTypes<'_, Cpu>, params: &TreeParams, scratch: &'s mut Vec<u64>) -> &'s [u32] {
    let m = levels.len();
    if scratch.len() < m {
        *scratch = vec![0; m];
    }
    // SAFETY: m u64 are 2m u32 (alignment 8 >= 4; every bit pattern is a u32), borrowed
    // from `scratch` for the returned lifetime.
    let words = unsafe { std::slice::from_raw_parts_mut(scratch.as_mut_ptr().cast::<u32>(), 2 * m) };
    // Both halves are written in full by the stack passes before they are read.
    let (first, last) = words.split_at_mut(m);
    // Without secondary levels (no refined runs: the usual case) the stack fits a u64.
    if levels.par_iter().any(|&l| (1..65).contains(&l)) {
        nearest_higher_both::<u128>(levels, first, last);
    } else {
        nearest_higher_both::<u64>(levels, first, last);
    }
    let leaf = params.leaf_size as u64;
    let c = params.coarsening as u64;
    first
        .par_iter_mut()
        .zip(last.par_iter())
        .enumerate()
        .for_each(|(i, (cap, &b))| {
            let (a, b) = (*cap as usize, b as usize);
            let (s, q) = types.counts(a, b + 1);
            let count = s.max(q) as u64;
            *cap = if levels[i] != 0 || count <= leaf {
                count.min(u32::MAX as u64) as u32
            } else {
                // Identical keys: split every n_p points from the run start, for n_p < run size.
                let total = (b + 1 - a) as u64;
                let t = (i + 1 - a) as u64;
                let mut np = leaf;
                let mut best = 0u64;
                while np < total && t.is_multiple_of(np) {
                    best = np + 1;
                    np = np.saturating_mul(c);
                }
                best as u32
            };
        });
    &*first
}

/// For each gap, the nearest gap with a strictly higher level: on the left, + 1, in
/// `first` (0 when none), on the right in `last` (`levels.len()` when none). The two
/// monotone-stack passes are independent: they run side by side.
fn nearest_higher_both<B: LevelBits>(levels: &[u8], first: &mut [u32], last: &mut [u32]) {
    let m = levels.len();
    rayon::join(
        || {
            let mut stack = NearestHigher::<B>::new();
            for (i, (f, &l)) in first.iter_mut().zip(levels).enumerate() {
                *f = stack.push(l, i as u32).map_or(0, |t| t + 1);
            }
        },
        || {
            let mut stack = NearestHigher::<B>::new();
            for (i, (e, &l)) in last.iter_mut().zip(levels).enumerate().rev() {
                *e = stack.push(l, i as u32).unwrap_or(m as u32);
            }
        },
    );
}

/// A monotone stack of (level, gap): pushing a gap returns the nearest gap pushed before
/// it with a strictly higher level. The levels on the stack strictly decrease, so each
/// level is on it at most once: the stack is a bit set of levels (with the latest gap of
/// each), and a push clears the levels up to its own and takes the lowest level left —
/// no loop, so no mispredicted loop exit per gap (~2x faster than popping one by one).
/// Levels are at most 128 (`ingest::levels`): below 128 in the bit set, 128 (above every
/// other, so never popped by a lower one) on its own.
struct NearestHigher<B: LevelBits> {
    levels: B,
    gap: [u32; 128],
    /// The latest gap of level 128, if any: below every entry of the bit set.
    top: Option<u32>,
}

impl<B: LevelBits> NearestHigher<B> {
    fn new() -> Self {
        Self { levels: B::EMPTY, gap: [0; 128], top: None }
    }
    #[inline(always)]
    fn push(&mut self, level: u8, gap: u32) -> Option<u32> {
        if level >= 128 {
            debug_assert!(level == 128);
            self.levels = B::EMPTY;
            self.top = Some(gap);
            return None;
        }
        let bit = B::bit(level);
        self.levels.clear_through(bit);
        let nearest = match self.levels.lowest() {
            Some(b) => Some(self.gap[b as usize]),
            None => self.top,
        };
        self.levels.insert(bit);
        self.gap[bit as usize] = gap;
        nearest
    }
}

/// The level set of `NearestHigher`: u128 holds every level below 128; u64 the levels 0
/// and 65..=127 only (bits 0 and 1..=63: no secondary levels, no refined run), half the
/// work (the two stack passes were ~5 ms of a 1e6-point tree build with u128).
trait LevelBits: Copy {
    const EMPTY: Self;
    /// The bit of a level below 128.
    fn bit(level: u8) -> u32;
    /// Bits 0..=bit off.
    fn clear_through(&mut self, bit: u32);
    fn lowest(self) -> Option<u32>;
    fn insert(&mut self, bit: u32);
}

/// `LevelBits` for an unsigned integer, `bit` mapping a level below 128 to its bit.
macro_rules! level_bits {
    ($t:ty, $bit:expr) => {
        impl LevelBits for $t {
            const EMPTY: Self = 0;
            #[inline(always)]
            fn bit(level: u8) -> u32 {
                let bit: fn(u8) -> u32 = $bit;
                bit(level)
            }
            #[inline(always)]
            fn clear_through(&mut self, bit: u32) {
                // 2 << (width - 1) is 0: all off.
                *self &= !((2 as $t) << bit).wrapping_sub(1);
            }
            #[inline(always)]
            fn lowest(self) -> Option<u32> {
                (self != 0).then(|| self.trailing_zeros())
            }
            #[inline(always)]
            fn insert(&mut self, bit: u32) {
                *self |= (1 as $t) << bit;
            }
        }
    };
}
level_bits!(u128, |level| level as u32);
level_bits!(u64, |level| {
    debug_assert!(level == 0 || level > 64);
    level.saturating_sub(64) as u32
});

/// Builds all planes over `n` merged points. `src_pos`/`qry_pos` are the sources and
/// queries in z-order (the same arrays in a self-query).
pub(crate) fn build<T: Real, const D: usize>(
    levels: &[u8],
    types: PointTypes<'_, Cpu>,
    src_pos: &[Vec<T>; D],
    qry_pos: &[Vec<T>; D],
    params: &TreeParams,
    spent_keys: Vec<u64>,
) -> Tree<Cpu, T, D> {
    let has_points = !src_pos[0].is_empty() || !qry_pos[0].is_empty();
    let n = if has_points { levels.len() + 1 } else { 0 };
    let mut scratch = spent_keys;
    let caps = split_caps(levels, types, params, &mut scratch);
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
    // Split gaps of the current plane (ascending).
    let mut splits: Vec<u32> = Vec::new();
    let mut capacity = params.leaf_size as u64;
    let mut prev_cap: Option<u8> = None;
    let mut plane_idx = 0;
    let mut iterations = 0;
    loop {
        let all = (plane_idx == 0).then_some(levels.len());
        let count_splits = select_splits(all, &splits, |i| caps[i] as u64 > capacity);
        let level_cap = regularisation_cap(levels, &count_splits, n, params).map(|c| prev_cap.map_or(c, |p| p.max(c)));
        let level_cap = level_cap.or(prev_cap);
        let new_splits = match level_cap {
            Some(lc) => {
                let lim = 64 + lc;
                select_splits(all, &splits, |i| caps[i] as u64 > capacity || levels[i] > lim)
            }
            None => count_splits,
        };
        prev_cap = level_cap;
        let prev_len = tree.planes.last().map(|p| p.len);
        if plane_idx > 0 && new_splits.len() == splits.len() && splits.len() >= params.top_target && iterations < 64 && capacity <= u32::MAX as u64 {
            // The plane would repeat the one below: not pushed. Where the level cap keeps
            // nodes apart, it is relaxed by a step, or up to the lowest split it alone
            // keeps when that is farther (then at least two nodes merge); else the counts
            // do, and the capacity grows. (The device build does the same.)
            iterations += 1;
            let least = level_cap.and_then(|lc| splits.iter().map(|&i| i as usize).filter(|&i| caps[i] as u64 <= capacity && levels[i] > 64 + lc).map(|i| levels[i] - 64).min());
            match least {
                Some(l) => prev_cap = relaxed(prev_cap, params).map(|c| c.max(l)),
                None => capacity = capacity.saturating_mul(params.coarsening as u64),
            }
            continue;
        }
        iterations += 1;
        splits = new_splits;
        let starts: Vec<u32> =
            if n == 0 { Vec::new() } else { std::iter::once(0u32).chain(splits.iter().map(|&i| i + 1)).collect() };
        push_plane(&mut tree, &starts, n, types, src_pos, qry_pos, capacity);
        tree.level_caps.push(level_cap);
        let len = tree.planes.last().unwrap().len;
        plane_idx += 1;
        let stalled = prev_len == Some(len) && len > params.top_target;
        if len <= params.top_target || plane_idx >= 24 || capacity > u32::MAX as u64 {
            break;
        }
        if stalled {
            // Regularisation keeps too many nodes apart: relax it by one coarsening step per
            // plane (cells `coarsening` times larger), so the planes above still shrink
            // gradually. Dropping it at once made the next plane jump from ~16k nodes to
            // ~16 on a tiled 2.1M-particle box, and the first node pass test every pair of
            // the 16k nodes.
            prev_cap = relaxed(prev_cap, params);
        }
        capacity = capacity.saturating_mul(params.coarsening as u64);
    }
    push_super_plane(&mut tree, params.super_group);
    tree
}

/// A regularisation level cap one coarsening step up (cells `coarsening` times larger;
/// none yet: the largest).
pub(crate) fn relaxed(cap: Option<u8>, params: &TreeParams) -> Option<u8> {
    let step = (params.coarsening as f64).log2().ceil() as u8;
    Some(cap.map_or(u8::MAX - 64, |c| c.saturating_add(step).min(u8::MAX - 64)))
}

/// The gaps kept as splits of a plane: chosen among all `n` gaps (`all`: the leaves'
/// plane) or among the plane below's `splits` (planes nest).
fn select_splits(all: Option<usize>, splits: &[u32], keep: impl Fn(usize) -> bool + Sync) -> Vec<u32> {
    match all {
        Some(n) => filter_indices(n, keep),
        None => splits.par_iter().copied().filter(|&i| keep(i as usize)).collect(),
    }
}

/// The regularisation level cap for a plane whose count-based splits are `splits`:
/// the bit length of a Morton cell about `max_volume_factor` times the mean volume of the
/// densest nodes holding 90% of the points. None when off or no node exceeds it.
fn regularisation_cap(levels: &[u8], splits: &[u32], n: usize, params: &TreeParams) -> Option<u8> {
    if params.max_volume_factor == 0.0 || n < 2 {
        return None;
    }
    let nseg = splits.len() + 1;
    // Per node: (primary bit length of its cell, point count).
    let nodes: Vec<(u8, u32)> = (0..nseg)
        .into_par_iter()
        .map(|s| {
            let a = if s == 0 { 0 } else { splits[s - 1] as usize + 1 };
            let b = if s == nseg - 1 { n } else { splits[s] as usize + 1 };
            let g = levels[a..b - 1].iter().copied().max().unwrap_or(0);
            (g.saturating_sub(64), (b - a) as u32)
        })
        .collect();
    cap_from_cells(&nodes, n, params)
}

/// The regularisation cap from every node's (primary bit length of its cell, point count)
/// (shared with the device back end, which reduces the nodes on the device).
pub(crate) fn cap_from_cells(nodes: &[(u8, u32)], n: usize, params: &TreeParams) -> Option<u8> {
    // Nodes with the same (bit length, count) are interchangeable here: group them (one
    // sort of packed integers, not a comparison sort of all nodes by a computed density:
    // 3e6 leaves at 1e8 points made that the bulk of the GPU's tree stage), then take
    // the groups densest first (count per volume, the volume of a cell of bit length g
    // being 2^g; ties by (g, count), so the order is one and the same everywhere).
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
    if first == 0 {
        // Room for the planes above too (together usually under the leaves' count): the
        // node arrays then grow without a copy and fresh page faults per doubling (~40 ms
        // of the tree stage for 4e6 clustered points).
        reserve_nodes(tree, 2 * len + 64, !same);
    }
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

pub(crate) fn push_super_plane<T: Real, const D: usize>(tree: &mut Tree<Cpu, T, D>, group: usize) {
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
fn union_box<T: Real, const D: usize>(lo: &mut [T; D], hi: &mut [T; D], l: &[T; D], h: &[T; D]) {
    for d in 0..D {
        lo[d] = fmin(lo[d], l[d]);
        hi[d] = fmax(hi[d], h[d]);
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

#[cfg(test)]
mod tests {
    use super::NearestHigher;

    /// Every push returns the nearest earlier gap with a strictly higher level (a scan
    /// back), on levels from every range `ingest::levels` gives: 0, secondary 1..=63,
    /// primary 65..=128, long runs of one level, and 127 / 128 at the top of the bit set.
    #[test]
    fn nearest_higher_equals_a_scan_back() {
        let mut s = 0x9e37_79b9_7f4a_7c15u64;
        let mut next = move || {
            s ^= s << 13;
            s ^= s >> 7;
            s ^= s << 17;
            s
        };
        for case in 0..7 {
            let n = 3000;
            let levels: Vec<u8> = (0..n)
                .map(|i| match case {
                    0 => (next() % 129) as u8,
                    1 => [0u8, 65, 66, 127, 128][(next() % 5) as usize],
                    2 => if i % 50 < 40 { 0 } else { 65 + (next() % 5) as u8 },
                    3 => (next() % 64) as u8,
                    4 => 128 - (next() % 3) as u8,
                    5 => if next() % 4 == 0 { 0 } else { 65 + (next() % 64) as u8 },
                    _ => (65 + (i % 17) as u8).min(128),
                })
                .collect();
            let primary = levels.iter().all(|&l| !(1..65).contains(&l));
            let mut stack = NearestHigher::<u128>::new();
            let mut stack64 = NearestHigher::<u64>::new();
            for (i, &l) in levels.iter().enumerate() {
                let want = (0..i).rev().find(|&j| levels[j] > l).map(|j| j as u32);
                assert_eq!(stack.push(l, i as u32), want, "case {case}, gap {i}, level {l}");
                if primary {
                    assert_eq!(stack64.push(l, i as u32), want, "u64 stack: case {case}, gap {i}, level {l}");
                }
            }
        }
    }
}
