//! Leaves of coincident points: a leaf whose queries all sit on one point and whose search
//! radius is 0 (at least k sources lie exactly there). Every query's k neighbours are then
//! at distance 0, so they are the k sources of smallest rank on that point — the query
//! itself first in a self-query, then the smallest input indices — found once per point
//! rather than by a scan of every coincident source per query (quadratic in their number:
//! 11,824 points on one spot took seconds at k = 32).

use super::{KnnJob, Scratch};
use crate::backend::cpu::Cpu;
use crate::geom::Real;
use crate::geom::metric::Metric;
use crate::pipeline::KnnSinks;

// Tests: the leaves answered here, per worker thread (`take_same_leaves`).
#[cfg(test)]
thread_local! {
    static SAME_LEAVES: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}

/// Tests: the leaves `pool`'s threads answered here since the last call, reset.
#[cfg(test)]
pub(in super::super) fn take_same_leaves(pool: &rayon::ThreadPool) -> u64 {
    pool.broadcast(|_| SAME_LEAVES.take()).into_iter().sum()
}

/// Per-task scratch: the sources on the last point answered, smallest input index first.
pub(in super::super) struct SamePoint<T, const D: usize> {
    at: Option<[T; D]>,
    /// The `k + 1` sources of smallest input index at `at` (all when fewer), ascending.
    best: Vec<u32>,
    row: Vec<u32>,
    zeros: Vec<T>,
}

impl<T, const D: usize> SamePoint<T, D> {
    pub(in super::super) fn new() -> Self {
        Self { at: None, best: Vec::new(), row: Vec::new(), zeros: Vec::new() }
    }
}

impl<T: Real, const D: usize> KnnJob<'_, T, D> {
    /// Answers every query of leaf `a` when they all sit on one point with at least k
    /// sources at distance 0 (`r2` = 0 says the node test found them); false otherwise,
    /// and the leaf pass runs as usual. `s.eval` holds the leaf's candidates with their
    /// d_min² (every source at distance 0 lies in one with d_min² <= 0).
    pub(in super::super) fn same_point_leaf<M: Metric<T, D>>(
        &self,
        metric: &M,
        a: usize,
        r2: T,
        s: &mut Scratch<T, D>,
        sinks: &KnnSinks<'_, Cpu, T>,
    ) -> bool {
        let kk = self.kk;
        let tree = &self.zs.tree;
        let (lo, hi) = tree.qry_box(a);
        if r2 != T::ZERO || kk == 0 || lo != hi {
            return false;
        }
        let p = *lo;
        let sorig = &self.zs.src_orig;
        let sp = &s.same;
        if sp.at != Some(p) {
            let pos = &self.zs.src_pos;
            let best = &mut s.same.best;
            best.clear();
            for &(dm, b) in &s.eval {
                if dm > T::ZERO {
                    continue;
                }
                let (s0, sn) = (tree.src_start[b as usize], tree.src_count[b as usize]);
                best.extend((s0..s0 + sn).filter(|&z| metric.dist2(&p, &std::array::from_fn(|d| pos[d][z as usize])) == T::ZERO));
            }
            if best.len() < kk {
                s.same.at = None;
                return false;
            }
            if best.len() > kk + 1 {
                best.select_nth_unstable_by_key(kk, |&z| sorig[z as usize]);
                best.truncate(kk + 1);
            }
            best.sort_unstable_by_key(|&z| sorig[z as usize]);
            s.same.at = Some(p);
        }
        let same = &mut s.same;
        same.zeros.resize(kk, T::ZERO);
        let self_query = self.zs.qry.is_none();
        let qorig = self.zs.queries().1;
        let (q0, qn) = tree.qry_range(a);
        for q in q0..q0 + qn {
            same.row.clear();
            if self_query {
                // Itself first, then the others by input index.
                same.row.push(q);
                same.row.extend(same.best.iter().copied().filter(|&z| z != q).take(kk - 1));
            } else {
                same.row.extend_from_slice(&same.best[..kk]);
            }
            let row = if sinks.zorder { q as usize } else { qorig[q as usize] as usize };
            self.emit(row, &same.zeros, &same.row, sinks);
        }
        s.last_kth = 0.0;
        #[cfg(test)]
        SAME_LEAVES.with(|c| c.set(c.get() + 1));
        true
    }
}
