//! The kNN leaf pass: for each query of a leaf, its k best sources by (distance², input
//! index) among the kept source leaves, visited nearest first, with a threshold that
//! starts at a bound from the previous query and shrinks to the current k-th distance
//! once k candidates are held. Results are written straight into the output rows.
//!
//! The per-query loop is compiled for the baseline, AVX2 and AVX-512 (see `simd`); the
//! AVX-512 version (2 <= k <= 16) keeps the best candidates in registers (`TopK16`).

use super::Cpu;
use super::cand::CandBuf;
use super::knn::KnnJob;
use super::simd::{self, Simd};
use super::topk::TopK;
use super::topk16::{self, TopK16};
use crate::geom::Real;
use crate::geom::metric::{Metric, Open, distances_block_at, shifted_block_at};
use crate::pipeline::KnnSinks;

#[path = "knn_kept.rs"]
mod kept;
#[path = "knn_same.rs"]
mod same;
#[cfg(test)]
use kept::f32_below;
use kept::{Kept, LeafBoxes};
#[cfg(test)]
pub(super) use same::take_same_leaves;

/// Sources per distance block of the leaf scan.
const B: usize = 8;

/// Blocks per mask run of the sorted (small k) leaf scan (`RUN * B` bits in a u64; a
/// leaf of up to 64 points is one run: per run, one mispredicted exit each of the block
/// loop and of the loop over the mask. 8 against 4: walk 3-8% faster; 12 in a u128: slower).
const RUN: usize = 8;

/// Kept leaves sorted and stored before a leaf's queries up to `SORTED_MAX_K`; the rest
/// when a query reaches them (`keep_rest`). Uniform 1e6, k = 16: a leaf keeps ~150 and
/// its queries reach at most the first 48; clustered: ~100, 2% of queries past the first
/// 64 (periodic walk -3%, clustered -1%). At k = 32 with 128 first the walk was 2%
/// slower: all are stored there.
const KEPT_FIRST: usize = 64;

/// The run mask of the distances at or below `t` (stale blocks included: the caller
/// masks them off).
#[inline(always)]
fn run_mask<T: Real, const AVX: bool>(d2r: &[[T; B]; RUN], t: T) -> u64 {
    let mut m = 0u64;
    for (j, d2b) in d2r.iter().enumerate() {
        // SAFETY: AVX only in the AVX2 and AVX-512 versions.
        m |= (if AVX { unsafe { T::le_mask_avx(d2b, t) } } else { T::le_mask(d2b, t) } as u64) << (j * B);
    }
    m
}

/// Output rows are prefetched this many queries ahead (rows in input order lie at
/// scattered addresses: a TLB walk and a line fill each), from `FIRST_LINES_MIN_K` on,
/// after the first line of every row of the leaf was prefetched at its start...
const PF: usize = 2;

/// ... and below it this many ahead, with no prefetch at the leaf's start: the queries
/// are short there, and that burst of scattered prefetches (two per query) held up the
/// scan more than it saved (walk at k = 1: 0.74x clustered 1e6, 0.66x clustered 4e6,
/// 0.92x uniform; k = 2: 0.87x, k = 4: 0.96x; k = 8: 1.03-1.07x, k = 16: 1.06-1.13x,
/// so kept there).
const PF_SHORT: usize = 4;
const FIRST_LINES_MIN_K: usize = 8;

/// Up to this node-test count a leaf's radius is also capped by its own points
/// (`own_radius`; at larger k that bound is no tighter than the k-count radius).
const OWN_MAX_K: usize = 8;

/// Up to this k the best candidates are kept sorted as they come (`TopK`); above, they
/// are buffered and selected in bulk (`CandBuf`). Measured crossover (1e6, f64, with
/// `CandBuf` on bitonic networks): `TopK` 20% faster at k = 16 on uniform points (level
/// on clustered), 5-20% at k = 24; `CandBuf` 7-35% at k = 32.
const SORTED_MAX_K: usize = 28;

/// The guessed radius² of a query starts at this multiple of the previous query's k-th
/// distance², and adapts: up by `GUESS_MISS` when it held fewer than k sources (the
/// query is then scanned again), down by `GUESS_HIT` when it held them.
const GUESS_START: f64 = 1.3;
const GUESS_MISS: f64 = 1.25;
const GUESS_HIT: f64 = 0.99;
const GUESS_RANGE: (f64, f64) = (1.0, 4.0);

/// The guess is used from this k on (with the caller's hints, at every k).
const GUESS_MIN_K: usize = 8;

/// With the caller's k-th distance hint h, the guessed radius² is h² times a factor that
/// starts here and adapts as the other one does (a hint is usually close: the previous
/// step's k-th distance of a particle that moved a little; 1% up covers its rounding).
const HINT_START: f64 = 1.02;
const HINT_MISS: f64 = 1.1;
const HINT_HIT: f64 = 0.995;
const HINT_RANGE: (f64, f64) = (1.0001, 4.0);

/// Tests: a fixed guess factor (f64 bits; `u64::MAX`: none, adaptive).
#[cfg(test)]
pub(super) static FORCED_GUESS: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(u64::MAX);
/// Tests: how many kept leaves `keep_leaves` stores first (0: `KEPT_FIRST`; a multiple of
/// `B`, at every k).
#[cfg(test)]
pub(super) static FORCED_KEPT_FIRST: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
// Tests: how many queries the guess held (0) and missed (1), and how many times the rest
// of the kept leaves was stored, per worker thread, so that a test reads the counts of
// its own context's pool alone (`take_counts`), not those of tests running beside it.
#[cfg(test)]
thread_local! {
    pub(super) static GUESS_COUNTS: std::cell::Cell<[u64; 2]> = const { std::cell::Cell::new([0; 2]) };
    pub(super) static KEPT_RESTS: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
}
#[cfg(test)]
pub(super) fn reset_test_knobs() {
    FORCED_GUESS.store(u64::MAX, std::sync::atomic::Ordering::Relaxed);
    FORCED_KEPT_FIRST.store(0, std::sync::atomic::Ordering::Relaxed);
}
/// Tests: the guess counts (held, missed) and kept-rest count of `pool`'s threads since the
/// last call, reset.
#[cfg(test)]
pub(super) fn take_counts(pool: &rayon::ThreadPool) -> ([u64; 2], u64) {
    pool.broadcast(|_| (GUESS_COUNTS.take(), KEPT_RESTS.take()))
        .into_iter()
        .fold(([0; 2], 0), |(g, r), (tg, tr)| ([g[0] + tg[0], g[1] + tg[1]], r + tr))
}

/// Per-task scratch of the walk.
pub(crate) struct Scratch<T, const D: usize> {
    /// d_min² from the receiving node to each candidate group's source node.
    pub(crate) gmin: Vec<T>,
    /// Evaluated candidates that may be kept: (d_min², node).
    pub(crate) eval: Vec<(T, u32)>,
    /// In a periodic box, per `eval` entry: whether its group's source node needs the
    /// minimum image against the receiving node (else neither does the entry).
    pub(crate) eval_wrap: Vec<bool>,
    /// Smallest-d_max candidates holding >= k sources: (d_max², count), ascending.
    pub(crate) near: Vec<(T, u32)>,
    /// The kept leaves of the current leaf, nearest first.
    kept: Vec<Kept<T, D>>,
    /// The boxes of the kept leaves, `B` to a record (see `LeafBoxes`).
    boxes: Vec<LeafBoxes<T, D>>,
    /// Sort keys of the kept leaves.
    order: Vec<u64>,
    /// Whether any kept leaf needs the minimum image (`Kept::wrap`).
    any_wrap: bool,
    /// The best candidates of the current query, k <= `SORTED_MAX_K`...
    best: TopK<T>,
    /// ... or above.
    cand: CandBuf<T>,
    /// At the AVX-512 level up to 16 (`use16`).
    best16: TopK16<T>,
    /// The previous query's k-th distance² (+inf when it had fewer than k), and the
    /// factor that turns it into the next query's guessed radius² (`leaf_queries`).
    last_kth: f64,
    guess: f64,
    /// The factor that turns a caller's hint² into the guessed radius².
    hint_factor: f64,
    /// Leaves of coincident points (`same_point_leaf`).
    same: same::SamePoint<T, D>,
}

impl<T: Real, const D: usize> Scratch<T, D> {
    pub(crate) fn new() -> Self {
        Self {
            gmin: Vec::new(),
            eval: Vec::new(),
            eval_wrap: Vec::new(),
            near: Vec::new(),
            kept: Vec::new(),
            boxes: Vec::new(),
            order: Vec::new(),
            any_wrap: false,
            best: TopK::new(),
            cand: CandBuf::new(),
            best16: TopK16::new(),
            last_kth: f64::INFINITY,
            guess: GUESS_START,
            hint_factor: HINT_START,
            same: same::SamePoint::new(),
        }
    }
}

impl<T: Real, const D: usize> KnnJob<'_, T, D> {
    /// Self-queries: a radius² within which every point of leaf `a` has k sources, to cap
    /// the leaf's search radius (+inf when the leaf holds fewer than k points, k = 0 or
    /// k > `OWN_MAX_K`). Each point's bound is the farther end of a run of k consecutive
    /// points of the leaf (in z-order, so usually close) that holds it — itself at
    /// distance 0, as in the results — the nearer of the run ending at it and the run
    /// starting at it. At small k this is far below the node test's k-count radius, which
    /// for a leaf holding k points is its own diagonal.
    pub(super) fn own_radius<M: Metric<T, D>>(&self, metric: &M, a: usize, k: usize) -> T {
        let zs = self.zs;
        let tree = &zs.tree;
        let (s0, sn) = (tree.src_start[a] as usize, tree.src_count[a] as usize);
        if k == 0 || k > OWN_MAX_K || sn < k || zs.qry.is_some() {
            return T::INFINITY;
        }
        debug_assert!(tree.qry_range(a) == (s0 as u32, sn as u32));
        let pos = &zs.src_pos;
        let p = |z: usize| -> [T; D] { std::array::from_fn(|d| pos[d][z]) };
        let run = |q: &[T; D], from: usize| {
            let mut far = T::ZERO;
            for z in from..from + k {
                let d2 = metric.dist2(q, &p(z));
                far = if d2 > far { d2 } else { far };
            }
            far
        };
        let mut r = T::ZERO;
        for z in s0..s0 + sn {
            let q = p(z);
            let before = run(&q, z.saturating_sub(k - 1).max(s0));
            let after = run(&q, z.min(s0 + sn - k));
            let b = if before < after { before } else { after };
            r = if b > r { b } else { r };
        }
        r
    }

    /// The leaf pass for the queries of leaf `a` over the kept leaves in `s` (`r2`: the
    /// leaf's search radius², within which every query has its k neighbours), at the
    /// process's vector level.
    pub(super) fn leaf<M: Metric<T, D>>(&self, metric: &M, a: usize, r2: T, s: &mut Scratch<T, D>, sinks: &KnnSinks<'_, Cpu, T>) {
        // In a periodic box most leaves keep no leaf that needs the minimum image: their
        // distances are the open space's, bit for bit, with fewer operations. (The first
        // threshold's distances to the previous query's neighbours, which may lie in other
        // leaves, are then open distances: never below the minimum image's, so still a
        // bound holding k sources.)
        if s.any_wrap {
            if !self.same_point_leaf(metric, a, r2, s, sinks) {
                self.leaf_at(metric, a, r2, s, sinks)
            }
        } else if !self.same_point_leaf(&Open, a, r2, s, sinks) {
            self.leaf_at(&Open, a, r2, s, sinks)
        }
    }

    #[inline(always)]
    fn leaf_at<M: Metric<T, D>>(&self, metric: &M, a: usize, r2: T, s: &mut Scratch<T, D>, sinks: &KnnSinks<'_, Cpu, T>) {
        match simd::level() {
            // SAFETY: `level()` returns a level only when the CPU has its features.
            // The AVX-512 version differs by `TopK16` (2 <= k <= 16); at other k it was
            // slower than the AVX2 one (k = 1: 17% on Zen 4), which runs there instead.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx512 if self.fits_topk16() => unsafe { self.leaf_avx512(metric, a, r2, s, sinks) },
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 | Simd::Avx512 => unsafe { self.leaf_avx2(metric, a, r2, s, sinks) },
            _ if self.guessing() => self.leaf_queries::<M, false, true, false>(metric, a, r2, s, sinks),
            _ => self.leaf_queries::<M, false, false, false>(metric, a, r2, s, sinks),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,popcnt,lzcnt")]
    unsafe fn leaf_avx2<M: Metric<T, D>>(&self, metric: &M, a: usize, r2: T, s: &mut Scratch<T, D>, sinks: &KnnSinks<'_, Cpu, T>) {
        if self.guessing() {
            self.leaf_queries::<M, true, true, false>(metric, a, r2, s, sinks)
        } else {
            self.leaf_queries::<M, true, false, false>(metric, a, r2, s, sinks)
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,popcnt,lzcnt,avx512f,avx512vl")]
    unsafe fn leaf_avx512<M: Metric<T, D>>(&self, metric: &M, a: usize, r2: T, s: &mut Scratch<T, D>, sinks: &KnnSinks<'_, Cpu, T>) {
        if self.guessing() {
            self.leaf_queries::<M, true, true, true>(metric, a, r2, s, sinks)
        } else {
            self.leaf_queries::<M, true, false, true>(metric, a, r2, s, sinks)
        }
    }

    /// Whether k is one `TopK16` (the AVX-512 version) selects: 2 <= k <= 16.
    #[inline(always)]
    fn fits_topk16(&self) -> bool {
        (2..=topk16::LANES).contains(&self.kk)
    }

    /// Whether the queries start within a guessed radius (`leaf_queries`): from
    /// `GUESS_MIN_K` on (below, the first pass costs more than it saves), or with the
    /// caller's hints.
    #[inline(always)]
    fn guessing(&self) -> bool {
        self.kk >= GUESS_MIN_K || self.kth_hint.is_some()
    }

    /// The leaf pass body; `AVX`: compiled into a function with AVX2 enabled; `GUESS`:
    /// `guessing()`; `AVX512`: with AVX-512F too (`TopK16` up to k = 16).
    #[inline(always)]
    fn leaf_queries<M: Metric<T, D>, const AVX: bool, const GUESS: bool, const AVX512: bool>(
        &self,
        metric: &M,
        a: usize,
        r2: T,
        s: &mut Scratch<T, D>,
        sinks: &KnnSinks<'_, Cpu, T>,
    ) {
        let zs = self.zs;
        let tree = &zs.tree;
        let (qpos, qorig) = zs.queries();
        let (spos, sorig) = (&zs.src_pos, &zs.src_orig);
        let self_query = zs.qry.is_none();
        let (q0, qn) = tree.qry_range(a);
        let (q0, qn) = (q0 as usize, qn as usize);
        let nsrc = spos[0].len();
        let sp: [*const T; D] = std::array::from_fn(|d| spos[d].as_ptr());
        let buffered = self.kk > SORTED_MAX_K;
        let use16 = AVX512 && cfg!(target_arch = "x86_64") && self.fits_topk16();
        // (A local: the offers' bounds come from one loop-invariant value.)
        let kk = self.kk;
        // The first line of every output row of the leaf: their pages' TLB walks run
        // side by side here rather than one per query in the loop.
        let pf = if kk >= FIRST_LINES_MIN_K {
            for q in q0..q0 + qn {
                self.prefetch_first(if sinks.zorder { q } else { qorig[q] as usize }, sinks);
            }
            PF
        } else {
            PF_SHORT
        };
        for q in q0..(q0 + pf).min(q0 + qn) {
            self.prefetch_rows(if sinks.zorder { q } else { qorig[q] as usize }, sinks);
        }
        // The distances of one run of blocks (entries outside the run's mask are stale,
        // never read: one buffer for the leaf, not one zeroed per run).
        let mut d2r = [[T::ZERO; B]; RUN];
        for q in q0..q0 + qn {
            if q + pf < q0 + qn {
                self.prefetch_rows(if sinks.zorder { q + pf } else { qorig[q + pf] as usize }, sinks);
            }
            let qp: [T; D] = std::array::from_fn(|d| qpos[d][q]);
            // The first threshold: the farthest of the previous query's k neighbours (a
            // z-order neighbour of this one, usually close) from this query. Those are k
            // sources within it, so it is always enough, and usually just above the true
            // k-th distance; r2 when it is larger (or there is no previous query).
            let mut thr = r2;
            let prev = if buffered {
                s.cand.zs()
            } else if use16 {
                s.best16.zs()
            } else {
                s.best.zs()
            };
            if prev.len() == self.kk {
                let mut far = T::ZERO;
                for &z in prev {
                    let z = z as usize;
                    debug_assert!(z < nsrc);
                    // SAFETY: held z-indices are sources (< nsrc): the blocks offer only the
                    // sources inside their leaf.
                    let p: [T; D] = std::array::from_fn(|d| unsafe { *sp[d].add(z) });
                    // Open distances, in a periodic box too: never below the minimum
                    // image's, so still a radius holding k sources, and cheaper.
                    let d2 = Open.dist2(&qp, &p);
                    far = if d2 > far { d2 } else { far };
                }
                if far < thr {
                    thr = far;
                }
            }
            // Ties by rank: the query itself first (a point is its own first neighbour,
            // duplicates included), then smaller input index.
            let self_z = if self_query { q } else { usize::MAX };
            let rank = |z: u32| if z as usize == self_z { 0 } else { sorig[z as usize] + 1 };
            if buffered {
                // (Every offer is within `thr`, which only shrinks from here.)
                s.cand.reset(self.kk, B, thr);
            } else if use16 {
                s.best16.reset(self.kk);
            } else {
                s.best.reset(self.kk);
            }
            // A guess below the bound: the previous query's k-th distance² times a
            // factor. The scan within it finds the same k best as the scan within the
            // bound whenever it finds k (every source not offered lies beyond the guess,
            // so beyond the k-th); when it finds fewer, a second scan offers the sources
            // between the guess and the bound. Fewer candidates pass a tighter threshold
            // (most insertions into the top-k are of sources later displaced).
            let wide = thr;
            #[cfg(test)]
            {
                let forced = FORCED_GUESS.load(std::sync::atomic::Ordering::Relaxed);
                if forced != u64::MAX {
                    s.guess = f64::from_bits(forced);
                }
            }
            // The caller's hint when it gave a usable one (finite, > 0), else the
            // previous query's k-th distance (from `GUESS_MIN_K` on).
            let hint = match self.kth_hint {
                Some(h) if h[q] > 0.0 && h[q] < f64::INFINITY => Some(h[q]),
                _ => None,
            };
            let guess = match hint {
                Some(h) => T::from_f64(h * h * s.hint_factor),
                None if self.kk >= GUESS_MIN_K => T::from_f64(s.last_kth * s.guess),
                None => T::INFINITY,
            };
            let two_pass = GUESS && guess < wide;
            if two_pass {
                thr = guess;
            }
            // Sources at or below `lo` were offered by the first pass.
            let (mut pass, mut lo) = (0, T::NEG_INFINITY);
            loop {
                // The kept leaves, `B` at a time: the query's bounds to their boxes by vector
                // code, then the leaves within the threshold in order (fewer, less random
                // branches than a box test per leaf).
                // (The stored leaves, then, when no leaf stopped the scan, the rest of them.)
                let mut c0 = 0;
                'leaves: loop {
                    let nk = s.kept.len();
                    for (i, boxes) in s.boxes[c0..].iter().enumerate() {
                        let j0 = (c0 + i) * B;
                        // Kept leaves come by ascending d_min to this leaf, a lower bound of the
                        // query's distance to them: past the threshold, no later leaf can hold a
                        // candidate.
                        if s.kept[j0].min > thr {
                            break 'leaves;
                        }
                        let bound = if M::PERIODIC { boxes.min2::<true>(&qp) } else { boxes.min2::<false>(&qp) };
                        // SAFETY: AVX only in the AVX2 and AVX-512 versions.
                        let mut lm = if AVX { unsafe { T::le_mask_avx(&bound, thr) } } else { T::le_mask(&bound, thr) };
                        if nk - j0 < B {
                            lm &= (1u32 << (nk - j0)) - 1;
                        }
                        while lm != 0 {
                            let i = lm.trailing_zeros() as usize;
                            lm &= lm - 1;
                            let kl = &s.kept[j0 + i];
                            if kl.min > thr {
                                break 'leaves;
                            }
                            if bound[i] > thr || (kl.wrap && metric.box_min2(&qp, &qp, &kl.lo, &kl.hi) > thr) {
                                continue;
                            }
                            // Blocks of B sources: distances and the mask of those within the threshold
                            // by vector code. A block may run past the leaf into the next sources
                            // (masked off); the last block of the array is computed one source at a
                            // time.
                            let s0 = kl.start as usize;
                            let cnt = kl.count as usize;
                            let wrap = kl.wrap;
                            let (shift, shifted) = (kl.shift, M::PERIODIC && kl.shifted);
                            // Open distances by AVX2, or shifted ones for a kept leaf whose
                            // shift is not zero (periodic box). (Macros, not closures: see
                            // `block!`.)
                            macro_rules! avx_block {
                                ($base:expr, $thr:expr, $d2b:expr) => {
                                    if shifted {
                                        T::shifted_block_avx(&qp, &sp, $base, &shift, $thr, $d2b)
                                    } else {
                                        T::open_block_avx(&qp, &sp, $base, $thr, $d2b)
                                    }
                                };
                            }
                            // (A macro, not a closure: a closure would be compiled without the AVX2
                            // features of the enclosing function and keep the vector block out of line.)
                            macro_rules! block {
                                ($base:expr, $thr:expr, $d2b:expr) => {{
                                    let (base, thr, d2b): (usize, T, &mut [T; B]) = ($base, $thr, $d2b);
                                    if base + B <= nsrc {
                                        // SAFETY: every column holds `nsrc >= base + B` points; AVX only
                                        // in the AVX2 and AVX-512 versions.
                                        unsafe {
                                            if AVX && !wrap {
                                                avx_block!(base, thr, d2b)
                                            } else {
                                                *d2b = if wrap {
                                                    distances_block_at::<T, D, B, M>(metric, &qp, &sp, base)
                                                } else if shifted {
                                                    shifted_block_at::<T, D, B>(&qp, &sp, base, &shift)
                                                } else {
                                                    distances_block_at::<T, D, B, Open>(&Open, &qp, &sp, base)
                                                };
                                                if AVX { T::le_mask_avx(d2b, thr) } else { T::le_mask(d2b, thr) }
                                            }
                                        }
                                    } else {
                                        *d2b = std::array::from_fn(|i| {
                                            if base + i < nsrc { metric.dist2(&qp, &std::array::from_fn(|d| spos[d][base + i])) } else { T::INFINITY }
                                        });
                                        T::le_mask(d2b, thr)
                                    }
                                }};
                            }
                            // The checks of `block!` settled once for the leaf: open distances by
                            // AVX2, every block inside the columns (all but the array's last leaf).
                            // (Its own loops: `fast` tested inside `block!` was not hoisted, +4%
                            // instructions.)
                            let fast = AVX && !wrap && s0 + cnt.next_multiple_of(B) <= nsrc;
                            if buffered {
                                // Above `SORTED_MAX_K` each block goes into the buffer without a branch.
                                let mut b0 = 0;
                                while b0 < cnt {
                                    let base = s0 + b0;
                                    let mut d2b = [T::ZERO; B];
                                    // SAFETY (`fast`): the block lies inside the columns; AVX2.
                                    let mut m = if fast { unsafe { avx_block!(base, thr, &mut d2b) } } else { block!(base, thr, &mut d2b) };
                                    if cnt - b0 < B {
                                        m &= (1u32 << (cnt - b0)) - 1;
                                    }
                                    if GUESS && pass == 1 {
                                        m &= !T::le_mask(&d2b, lo);
                                    }
                                    if s.cand.offer::<B, AVX>(&d2b, base as u32, m, &rank) {
                                        thr = s.cand.kth();
                                    }
                                    b0 += B;
                                }
                                continue;
                            }
                            // Up to `SORTED_MAX_K`: runs of up to `RUN` blocks, then the sources in the
                            // run's mask offered one by one, re-tested as the threshold shrinks. One
                            // mask per run rather than per block: the loop over its bits ends (a
                            // mispredicted branch) once per run.
                            let mut b0 = 0;
                            while b0 < cnt {
                                let left = cnt - b0;
                                let nb = left.div_ceil(B).min(RUN);
                                let mut m = 0u64;
                                if fast {
                                    for j in 0..nb {
                                        // SAFETY: `fast`: every block of the leaf lies inside the
                                        // columns, and the CPU has AVX2.
                                        m |= (unsafe { avx_block!(s0 + b0 + j * B, thr, &mut d2r[j]) } as u64) << (j * B);
                                    }
                                } else {
                                    for (j, d2b) in d2r.iter_mut().enumerate().take(nb) {
                                        m |= (block!(s0 + b0 + j * B, thr, d2b) as u64) << (j * B);
                                    }
                                }
                                if left < RUN * B {
                                    m &= (1u64 << left) - 1;
                                }
                                let d2f = d2r.as_flattened();
                                if use16 {
                                    // The first pass offered the sources at or below `lo`.
                                    if GUESS && pass == 1 {
                                        m &= !run_mask::<T, AVX>(&d2r, lo);
                                    }
                                    // SAFETY: `use16` only in the AVX-512 version.
                                    #[cfg(target_arch = "x86_64")]
                                    unsafe {
                                        s.best16.offer_run(d2f, m, (s0 + b0) as u32, &rank)
                                    };
                                    let kth = s.best16.kth();
                                    if kth < thr {
                                        thr = kth;
                                    }
                                    m = 0;
                                }
                                while m != 0 {
                                    let i = m.trailing_zeros() as usize;
                                    m &= m - 1;
                                    let d2 = d2f[i];
                                    if d2 <= thr && (!GUESS || d2 > lo) && s.best.push::<AVX>(d2, (s0 + b0 + i) as u32, kk, &rank) {
                                        thr = s.best.kth(kk);
                                    }
                                }
                                b0 += RUN * B;
                            }
                        }
                    }
                    if s.kept.len() == s.order.len() {
                        break;
                    }
                    c0 = s.boxes.len();
                    self.keep_rest(metric, a, s);
                }
                // After the pass within the guess: done when it held k (then the guess
                // shrinks a little), else (it grows) the pass beyond it.
                if !two_pass || pass == 1 {
                    break;
                }
                let held = if buffered {
                    s.cand.held() >= self.kk
                } else if use16 {
                    s.best16.zs().len() == self.kk
                } else {
                    s.best.zs().len() == self.kk
                };
                #[cfg(test)]
                GUESS_COUNTS.with(|c| {
                    let mut v = c.get();
                    v[usize::from(!held)] += 1;
                    c.set(v);
                });
                let (factor, hit, miss, range) = match hint {
                    Some(_) => (&mut s.hint_factor, HINT_HIT, HINT_MISS, HINT_RANGE),
                    None => (&mut s.guess, GUESS_HIT, GUESS_MISS, GUESS_RANGE),
                };
                if held {
                    *factor = (*factor * hit).max(range.0);
                    break;
                }
                *factor = (*factor * miss).min(range.1);
                (pass, lo, thr) = (1, guess, wide);
            }
            let row = if sinks.zorder { q } else { qorig[q] as usize };
            let (ed, ez) = if buffered {
                s.cand.finish(&rank);
                (s.cand.d2s(), s.cand.zs())
            } else if use16 {
                (s.best16.d2s(), s.best16.zs())
            } else {
                s.best.finish::<AVX>(&rank);
                (s.best.d2s(), s.best.zs())
            };
            if GUESS {
                s.last_kth = if ed.len() == self.kk { ed[self.kk - 1].to_f64() } else { f64::INFINITY };
            }
            self.emit(row, ed, ez, sinks);
        }
    }
}

#[cfg(test)]
#[path = "knn_leaf_tests.rs"]
mod tests;
