//! Which gaps split each plane of the CPU's tree (docs/DESIGN.md §2), from the levels of
//! the gaps between z-sorted points alone: per gap the smallest capacity that keeps it
//! whole, then plane by plane the count splits, the regularisation's level cap, and the
//! relaxations that keep planes from repeating. `tree::build` makes the nodes.

use rayon::prelude::*;

use super::Cpu;
use super::par::filter_indices;
use crate::base::TreeParams;
use crate::pipeline::PointTypes;
use crate::pipeline::planes::{cap_from_cells, relaxed};

/// Per-type counts and starts of merged point ranges.
pub(super) trait TypeCounts {
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
    // In chunks of the three slices, without bounds checks, and for a self-query or FoF
    // without a per-gap match on the point types (the loop took 4x a plain read of
    // `first` and `last` as an indexed iterator with the match inside).
    const CHUNK: usize = 1 << 14;
    first.par_chunks_mut(CHUNK).zip(last.par_chunks(CHUNK)).zip(levels.par_chunks(CHUNK)).enumerate().for_each(|(ci, ((caps, last), levels))| {
        match types {
            PointTypes::Same => fill_caps(ci * CHUNK, caps, last, levels, leaf, c, |a, b| (b - a) as u64),
            PointTypes::Joint { .. } => fill_caps(ci * CHUNK, caps, last, levels, leaf, c, |a, b| {
                let (s, q) = types.counts(a, b);
                s.max(q) as u64
            }),
        }
    });
    &*first
}

/// `split_caps` over gaps `base..base + caps.len()`: `caps` holds each gap's `first` on
/// entry (its cell's first point), `last` its cell's last gap; `count(a, b)` is the larger
/// per-type count among points `[a, b)`.
#[inline(always)]
fn fill_caps(base: usize, caps: &mut [u32], last: &[u32], levels: &[u8], leaf: u64, c: u64, count: impl Fn(usize, usize) -> u64) {
    for (j, ((cap, &b), &level)) in caps.iter_mut().zip(last).zip(levels).enumerate() {
        let (a, b) = (*cap as usize, b as usize);
        let n = count(a, b + 1);
        *cap = if level != 0 || n <= leaf {
            n.min(u32::MAX as u64) as u32
        } else {
            // Identical keys: split every n_p points from the run start, for n_p < run size.
            let total = (b + 1 - a) as u64;
            let t = (base + j + 1 - a) as u64;
            let mut np = leaf;
            let mut best = 0u64;
            while np < total && t.is_multiple_of(np) {
                best = np + 1;
                np = np.saturating_mul(c);
            }
            best as u32
        };
    }
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

/// The planes of a tree as chosen from the gap levels alone: each plane's node starts,
/// capacity and level cap (`build` then makes the nodes). The choice needs no positions,
/// so a self-query makes it before the points are gathered: its per-gap scratch (the
/// spent sort keys, 8 bytes a point) is then freed before the positions take their
/// memory, and a first call maps that much less fresh memory.
pub(crate) struct TreePlan {
    /// Merged points.
    pub(super) n: usize,
    pub(super) planes: Vec<PlannedPlane>,
}

pub(super) struct PlannedPlane {
    /// First merged z-position of each node.
    pub(super) starts: Vec<u32>,
    pub(super) capacity: u64,
    pub(super) level_cap: Option<u8>,
}

/// Chooses all planes over `n` merged points from the gap `levels`, with `spent_keys` as
/// the per-gap scratch (returned, spent again).
pub(crate) fn plan(levels: &[u8], n: usize, types: PointTypes<'_, Cpu>, params: &TreeParams, spent_keys: Vec<u64>) -> (TreePlan, Vec<u64>) {
    debug_assert!(n == 0 || levels.len() + 1 == n);
    let mut scratch = spent_keys;
    let caps = split_caps(levels, types, params, &mut scratch);
    let mut planes: Vec<PlannedPlane> = Vec::new();
    // Split gaps of the current plane (ascending).
    let mut splits: Vec<u32> = Vec::new();
    let mut capacity = params.leaf_size as u64;
    let mut prev_cap: Option<u8> = None;
    let mut iterations = 0;
    loop {
        let plane_idx = planes.len();
        let all = (plane_idx == 0).then_some(levels.len());
        let count_splits = select_splits(all, &splits, |i| caps[i] as u64 > capacity);
        let (cap, cells) = regularisation_cap(levels, &count_splits, n, params);
        let level_cap = cap.map(|c| prev_cap.map_or(c, |p| p.max(c))).or(prev_cap);
        let new_splits = match level_cap {
            // The leaves' plane: only the count nodes whose cell exceeds the cap hold gaps
            // above it (every gap's level is at most its node's cell's).
            Some(lc) if all.is_some() && !cells.is_empty() => {
                let v = with_level_splits(levels, &count_splits, &cells, lc);
                debug_assert_eq!(v, select_splits(all, &splits, |i| caps[i] as u64 > capacity || levels[i] > 64 + lc));
                v
            }
            Some(lc) => {
                let lim = 64 + lc;
                select_splits(all, &splits, |i| caps[i] as u64 > capacity || levels[i] > lim)
            }
            None => count_splits,
        };
        prev_cap = level_cap;
        let prev_len = planes.last().map(|p| p.starts.len());
        if plane_idx > 0 && new_splits.len() == splits.len() && splits.len() >= params.top_target && iterations < 64 && capacity <= u32::MAX as u64 {
            // The plane would repeat the one below: not pushed. Where the level cap keeps
            // nodes apart, it is relaxed by a step, or up to the lowest split it alone
            // keeps when that is farther (then at least two nodes merge); else the counts
            // do, and the capacity grows. (The device build does the same.)
            iterations += 1;
            let least = level_cap.and_then(|lc| {
                splits.iter().map(|&i| i as usize).filter(|&i| caps[i] as u64 <= capacity && levels[i] > 64 + lc).map(|i| levels[i] - 64).min()
            });
            match least {
                Some(l) => prev_cap = relaxed(prev_cap, params).map(|c| c.max(l)),
                None => capacity = capacity.saturating_mul(params.coarsening as u64),
            }
            continue;
        }
        iterations += 1;
        splits = new_splits;
        let starts: Vec<u32> = if n == 0 { Vec::new() } else { std::iter::once(0u32).chain(splits.iter().map(|&i| i + 1)).collect() };
        let len = starts.len();
        planes.push(PlannedPlane { starts, capacity, level_cap });
        let stalled = prev_len == Some(len) && len > params.top_target;
        if len <= params.top_target || planes.len() >= 24 || capacity > u32::MAX as u64 {
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
    (TreePlan { n, planes }, scratch)
}

/// The gaps kept as splits of a plane: chosen among all `n` gaps (`all`: the leaves'
/// plane) or among the plane below's `splits` (planes nest).
fn select_splits(all: Option<usize>, splits: &[u32], keep: impl Fn(usize) -> bool + Sync) -> Vec<u32> {
    match all {
        Some(n) => filter_indices(n, keep),
        None => splits.par_iter().copied().filter(|&i| keep(i as usize)).collect(),
    }
}

/// `splits` (a plane's count splits over all gaps, its nodes' `cells` as
/// `regularisation_cap` gives them) and every gap inside a node whose level exceeds the
/// level cap `lc`, ascending: the gaps `caps > capacity || level > 64 + lc` select, found
/// by scanning only the nodes whose cell is above the cap.
fn with_level_splits(levels: &[u8], splits: &[u32], cells: &[(u8, u32)], lc: u8) -> Vec<u32> {
    use super::par::chunk_ranges;
    let nseg = splits.len() + 1;
    debug_assert_eq!(cells.len(), nseg);
    let lim = 64 + lc;
    let parts: Vec<Vec<u32>> = chunk_ranges(nseg, 4 * rayon::current_num_threads())
        .into_par_iter()
        .map(|r| {
            let mut v = Vec::with_capacity(r.len());
            for s in r {
                if cells[s].0 > lc {
                    let a = if s == 0 { 0 } else { splits[s - 1] as usize + 1 };
                    let b = if s == nseg - 1 { levels.len() } else { splits[s] as usize };
                    v.extend((a..b).filter(|&i| levels[i] > lim).map(|i| i as u32));
                }
                if s < nseg - 1 {
                    v.push(splits[s]);
                }
            }
            v
        })
        .collect();
    parts.concat()
}

/// The regularisation level cap for a plane whose count-based splits are `splits`:
/// the bit length of a Morton cell about `max_volume_factor` times the mean volume of the
/// densest nodes holding 90% of the points. None when off or no node exceeds it. With it,
/// every node's (primary bit length of its cell, point count), in order (empty when off).
fn regularisation_cap(levels: &[u8], splits: &[u32], n: usize, params: &TreeParams) -> (Option<u8>, Vec<(u8, u32)>) {
    if params.max_volume_factor == 0.0 || n < 2 {
        return (None, Vec::new());
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
    (cap_from_cells(&nodes, n, params), nodes)
}

#[cfg(test)]
mod tests {
    use super::NearestHigher;

    /// Every push returns the nearest earlier gap with a strictly higher level (a scan
    /// back), on levels from every range `ingest::levels` gives: 0, secondary 1..=63,
    /// primary 65..=128, long runs of one level, and 127 / 128 at the top of the bit set.
    #[test]
    fn nearest_higher_equals_a_scan_back() {
        let mut next = crate::geom::xorshift(0x9e37_79b9_7f4a_7c15u64);
        for case in 0..7 {
            let n = 3000;
            let levels: Vec<u8> = (0..n)
                .map(|i| match case {
                    0 => (next() % 129) as u8,
                    1 => [0u8, 65, 66, 127, 128][(next() % 5) as usize],
                    2 => {
                        if i % 50 < 40 {
                            0
                        } else {
                            65 + (next() % 5) as u8
                        }
                    }
                    3 => (next() % 64) as u8,
                    4 => 128 - (next() % 3) as u8,
                    5 => {
                        if next().is_multiple_of(4) {
                            0
                        } else {
                            65 + (next() % 64) as u8
                        }
                    }
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
