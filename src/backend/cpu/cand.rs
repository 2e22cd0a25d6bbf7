//! Buffered selection of the k best neighbour candidates of one query (the kNN leaf
//! pass's larger k), by (distance², rank) as in `topk`.
//!
//! Candidates within the threshold are appended unsorted, a whole block of sources at a
//! time without a branch (each source is written, and the end advances only past those in
//! the mask). When the buffer holds 2k, it is cut to its k best (left unordered) and the
//! threshold drops to their k-th distance; at the end the best k are taken once and
//! ordered. Both select among the held entries as integers (`select`); only the end
//! sorts them. Against keeping a sorted array, this drops the
//! per-candidate insertion (k/2 moves and a mispredicted loop exit each), which took half
//! the leaf pass at k = 64; against a heap (k > 256 before), O(log k) mispredicted steps
//! per candidate.

use crate::geom::Real;

pub(crate) struct CandBuf<T> {
    /// Held distances² and z-indices (the first `n`), sized for `cap` plus one block
    /// written past the end.
    d: Vec<T>,
    z: Vec<u32>,
    n: usize,
    k: usize,
    /// Held entries that trigger a cut to k.
    cap: usize,
    /// The k-th distance² after the last cut (+inf before the first).
    kth: T,
    /// The selection: distances² ascending and their z-indices.
    out_d: Vec<T>,
    out_z: Vec<u32>,
    /// The low bits of a sort key that hold the entry's index (enough for `cap` + a
    /// block).
    ib: u32,
    /// The sort keys of `select`.
    keys: Vec<u64>,
}

impl<T: Real> CandBuf<T> {
    pub(crate) fn new() -> Self {
        Self { d: Vec::new(), z: Vec::new(), n: 0, k: 0, cap: 0, kth: T::INFINITY, out_d: Vec::new(), out_z: Vec::new(), ib: 0, keys: Vec::new() }
    }

    /// Empties the buffer for a selection of `k >= 1` fed in blocks of at most `block`.
    #[inline(always)]
    pub(crate) fn reset(&mut self, k: usize, block: usize) {
        assert!(k >= 1);
        let cap = 2 * k;
        let len = cap + block;
        self.ib = usize::BITS - (len - 1).leading_zeros();
        if self.d.len() < len {
            self.d.resize(len, T::INFINITY);
            self.z.resize(len, 0);
        }
        self.n = 0;
        self.k = k;
        self.cap = cap;
        self.kth = T::INFINITY;
    }

    /// Offers the sources `base + i` at distances² `d2[i]` for the bits `i` set in `mask`
    /// (each within the current threshold). Returns true when the buffer was cut and the
    /// threshold (`kth`) dropped.
    #[inline(always)]
    pub(crate) fn offer<const B: usize>(&mut self, d2: &[T; B], base: u32, mask: u32, rank: &impl Fn(u32) -> u32) -> bool {
        debug_assert!(self.n < self.cap && self.n + B <= self.d.len());
        let mut n = self.n;
        for (i, &x) in d2.iter().enumerate() {
            // SAFETY: n < cap before the block, and the buffer holds cap + B entries.
            unsafe {
                *self.d.get_unchecked_mut(n) = x;
                *self.z.get_unchecked_mut(n) = base + i as u32;
            }
            n += ((mask >> i) & 1) as usize;
        }
        self.n = n;
        if n < self.cap {
            return false;
        }
        self.cut(rank);
        true
    }

    /// Cuts the buffer to its k best, unordered (only `finish` orders them), and lowers
    /// the threshold to their largest distance².
    fn cut(&mut self, rank: &impl Fn(u32) -> u32) {
        debug_assert!(self.n > self.k);
        self.select(rank, false);
        let k = self.k;
        self.d[..k].copy_from_slice(&self.out_d);
        self.z[..k].copy_from_slice(&self.out_z);
        self.n = k;
        self.kth = self.out_d.iter().fold(T::ZERO, |m, &x| if x > m { x } else { m });
    }

    /// How many entries are held (at least k once the buffer was cut).
    #[inline(always)]
    pub(crate) fn held(&self) -> usize {
        self.n
    }

    /// The threshold after the last cut (+inf before the first).
    #[inline(always)]
    pub(crate) fn kth(&self) -> T {
        self.kth
    }

    /// Selects and sorts the result.
    #[inline(always)]
    pub(crate) fn finish(&mut self, rank: &impl Fn(u32) -> u32) {
        self.select(rank, true);
    }

    /// The best min(k, n) held entries, in order, into `out_d`/`out_z`: the entries are
    /// sorted as integers — a distance²'s bits (ordered as the distances, all >= 0) with
    /// the lowest `ib` replaced by the entry's index; the k-th selected first when there
    /// are more — and then each run of equal truncated distances (rare: ties, or f64
    /// distances within 2^(ib - 52) relative; f32 distances lose nothing up to ib = 29)
    /// by (distance², rank). Not `ordered` (a cut), the sort is skipped when no other
    /// entry shares the k-th key's truncated distance: the k smallest keys are then the k
    /// best (every other entry is farther), in no particular order.
    #[inline(always)]
    fn select(&mut self, rank: &impl Fn(u32) -> u32, ordered: bool) {
        let (n, k, ib) = (self.n, self.k, self.ib);
        debug_assert!(n <= 1 << ib);
        let low = (1u64 << ib) - 1;
        self.keys.clear();
        self.keys.extend(self.d[..n].iter().enumerate().map(|(i, x)| (x.to_f64().to_bits() & !low) | i as u64));
        // Only the best k need sorting: those below the k-th key's truncated distance,
        // and all those equal to it (on either side of the k-th: their order is decided
        // below).
        let mut n = n;
        if n > k {
            self.keys.select_nth_unstable(k - 1);
            let v = self.keys[k - 1] >> ib;
            let mut e = k;
            for j in k..n {
                if self.keys[j] >> ib == v {
                    self.keys.swap(e, j);
                    e += 1;
                }
            }
            n = e;
        }
        let keys = &mut self.keys[..n];
        let (d, z) = (&self.d, &self.z);
        if ordered || n > k {
            keys.sort_unstable();
            let mut a = 0;
            for j in 1..=n {
                if j == n || keys[j] >> ib != keys[a] >> ib {
                    if j - a > 1 {
                        sort_run(&mut keys[a..j], low, d, z, rank);
                    }
                    a = j;
                }
            }
        }
        let m = n.min(k);
        self.out_d.clear();
        self.out_z.clear();
        self.out_d.extend(keys[..m].iter().map(|&x| d[(x & low) as usize]));
        self.out_z.extend(keys[..m].iter().map(|&x| z[(x & low) as usize]));
    }

    /// The result's distances² (ascending) and z-indices (after `finish`).
    #[inline(always)]
    pub(crate) fn d2s(&self) -> &[T] {
        &self.out_d
    }

    #[inline(always)]
    pub(crate) fn zs(&self) -> &[u32] {
        &self.out_z
    }
}

/// Orders a run of sort keys (entry index in the bits `low`) by (distance², rank).
#[inline(never)]
fn sort_run<T: Real>(run: &mut [u64], low: u64, d: &[T], z: &[u32], rank: &impl Fn(u32) -> u32) {
    run.sort_unstable_by(|&a, &b| {
        let (ia, ib) = ((a & low) as usize, (b & low) as usize);
        d[ia].partial_cmp(&d[ib]).unwrap_or(std::cmp::Ordering::Equal).then_with(|| rank(z[ia]).cmp(&rank(z[ib])))
    });
}

#[cfg(test)]
mod tests {
    use super::CandBuf;
    use crate::geom::Real;

    /// Against a full sort, with ties and thresholds as the leaf pass applies them.
    fn check<T: Real>() {
        let mut x = 777u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut c = CandBuf::<T>::new();
        for k in [1usize, 2, 29, 33, 64, 100, 256, 300, 600, 40] {
            for round in 0..30 {
                let n = (next() % (3 * k as u64 + 100)) as usize;
                // Many ties, all equal, or distinct (almost surely in f64).
                let levels = [40, 1, 1 << 40][round % 3];
                let d: Vec<T> = (0..n).map(|_| T::from_f64((next() % levels) as f64 * 0.5)).collect();
                let rank = |z: u32| (n as u32) - z;
                let init = if round % 4 == 0 { T::INFINITY } else { T::from_f64(levels as f64 * 0.3) };
                let mut thr = init;
                c.reset(k, 8);
                for b0 in (0..n).step_by(8) {
                    let blk: [T; 8] = std::array::from_fn(|i| if b0 + i < n { d[b0 + i] } else { T::INFINITY });
                    let mut m = 0u32;
                    for (i, &v) in blk.iter().enumerate() {
                        m |= ((b0 + i < n && v <= thr) as u32) << i;
                    }
                    if c.offer(&blk, b0 as u32, m, &rank) {
                        assert!(c.kth() <= thr);
                        thr = c.kth();
                    }
                }
                c.finish(&rank);
                let mut want: Vec<(T, u32)> = d.iter().enumerate().filter(|e| *e.1 <= init).map(|(z, &dd)| (dd, rank(z as u32))).collect();
                want.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
                want.truncate(k);
                let got: Vec<(T, u32)> = c.d2s().iter().zip(c.zs()).map(|(&dd, &z)| (dd, rank(z))).collect();
                assert!(got == want, "{} k {k} n {n} round {round} got {:?} want {:?}", T::NAME, got.iter().map(|e| (e.0.to_f64(), e.1)).collect::<Vec<_>>(), want.iter().map(|e| (e.0.to_f64(), e.1)).collect::<Vec<_>>());
            }
        }
    }

    #[test]
    fn keeps_the_k_best_by_distance_then_rank() {
        check::<f64>();
        check::<f32>();
    }
}
