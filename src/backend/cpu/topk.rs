//! The k best neighbour candidates of one query (k <= 32), kept sorted by (distance²,
//! rank); larger k are selected in bulk (`cand`).
//!
//! The rank orders equal distances (0 for the query itself in a self-query, else the
//! source's input index + 1); it is looked up from the z-index only when two distances
//! tie. Distances and z-indices are kept in two arrays. The buffer fills unsorted and is
//! sorted once when full (each entry's place counted by vector compares), after which
//! its insertion is branch-free: the slot is the count of held distances below the new
//! one (vector compares over the whole, padded array) and the entries behind it move by
//! one through vector min/max and selects — the branchy insertion it replaced
//! mispredicted once per taken candidate.

use crate::geom::Real;

/// The largest k (the vector steps cost k/8 each).
pub(crate) const MAX_K: usize = 32;

/// Vector width of the array steps (elements; 8 fills an AVX2 f32 or an AVX-512 f64).
const W: usize = 8;

pub(crate) struct TopK<T> {
    /// Entry j at `d[1 + j]`, `z[1 + j]`; `d[0]` = -inf is a pad the shift reads; slots
    /// from n on hold +inf (they never count as smaller), through one pad slot after the
    /// `cap` entries. Fixed arrays: every index below is provably in bounds (no checks in
    /// the insertion's loops).
    d: [T; LEN],
    z: [u32; LEN],
    n: usize,
    k: usize,
    /// k rounded up to a multiple of `W`.
    cap: usize,
}

/// The arrays' length: `MAX_K` entries, the pad before them and the one after.
const LEN: usize = MAX_K + 2;

/// Slot numbers, for the insertion's vector compares (a constant vector per block, not
/// one built from the block's index).
const SLOT: [u32; LEN] = {
    let mut a = [0u32; LEN];
    let mut i = 0;
    while i < LEN {
        a[i] = i as u32;
        i += 1;
    }
    a
};

/// Whether `(d2, rank(z))` orders before `(bd, rank(bz))`.
#[inline(always)]
fn before<T: Real>(d2: T, z: u32, bd: T, bz: u32, rank: &impl Fn(u32) -> u32) -> bool {
    d2 < bd || (d2 == bd && rank(z) < rank(bz))
}

impl<T: Real> TopK<T> {
    pub(crate) fn new() -> Self {
        Self { d: [T::INFINITY; LEN], z: [0; LEN], n: 0, k: 0, cap: 0 }
    }

    /// Empties the buffer for a selection of `1 <= k <= MAX_K`.
    #[inline(always)]
    pub(crate) fn reset(&mut self, k: usize) {
        assert!((1..=MAX_K).contains(&k));
        let cap = k.div_ceil(W) * W;
        self.d[..cap + 2].fill(T::INFINITY);
        self.d[0] = T::NEG_INFINITY;
        self.n = 0;
        self.k = k;
        self.cap = cap;
    }

    /// The k-th distance² (only when full; `k` as in `reset`).
    #[inline(always)]
    pub(crate) fn kth(&self, k: usize) -> T {
        debug_assert!(k == self.k);
        self.d[k.min(MAX_K)]
    }

    /// Offers source `z` at distance² `d2`; `rank(z)` breaks ties. Returns true when it
    /// was taken and the buffer is full (the k-th distance may have shrunk).
    ///
    /// `k`: as in `reset`, passed in so that the caller's loop-invariant value, not a
    /// reload of the field, sets the bounds (5 instructions less per offer).
    /// `AVX`: the caller runs with AVX2 (the slot's compares and the fill's sort use
    /// 256-bit vectors); it is unsafe to pass true otherwise.
    #[inline(always)]
    pub(crate) fn push<const AVX: bool>(&mut self, d2: T, z: u32, k: usize, rank: &impl Fn(u32) -> u32) -> bool {
        // (The mins state what `reset` ensures, k <= cap <= MAX_K, so that the compiler
        // sees every index in bounds.)
        let k = k.min(MAX_K);
        let (n, cap) = (self.n, (k.div_ceil(W) * W).min(MAX_K));
        debug_assert!(k >= 1 && n <= k && k <= cap && k == self.k && cap == self.cap);
        if n < k {
            // Filling: appended as they come, put in order once when full (one sort
            // costs less than k ordered insertions; nothing reads the order before).
            self.d[1 + n] = d2;
            self.z[1 + n] = z;
            self.n = n + 1;
            if n + 1 < k {
                return false;
            }
            if k > 1 {
                self.sort_held::<AVX>(rank);
            }
            return true;
        }
        if !before(d2, z, self.d[k], self.z[k], rank) {
            return false;
        }
        if k == 1 {
            self.d[1] = d2;
            self.z[1] = z;
            return true;
        }
        // The slot: entries below d2 (a compare mask and a bit count per W), then equal
        // ones of smaller rank (rare: scalar). The held entries are sorted, so any equal
        // one is the entry at the count.
        let mut pos = 0usize;
        for c in self.d[1..1 + MAX_K].chunks_exact(W).take(cap / W) {
            let c: &[T; W] = c.try_into().unwrap();
            // SAFETY: AVX only when the caller has it (the flag's contract).
            let m = if AVX { unsafe { T::lt_mask_avx(c, d2) } } else { T::lt_mask(c, d2) };
            pos += m.count_ones() as usize;
        }
        // (pos <= cap <= MAX_K: the min only spares a bounds check.)
        if self.d[1 + pos.min(MAX_K)] == d2 {
            while pos < n && self.d[1 + pos] == d2 && rank(self.z[1 + pos]) < rank(z) {
                pos += 1;
            }
        }
        // Entries from pos on move back by one (the last falls off when full), a block
        // of W at a time from the last block down, so each reads its predecessor before
        // that one is written. Sorted, the new distances are max(previous, min(current,
        // d2)) element by element (equal distances are interchangeable); the z-indices
        // take the previous one from the slot on, then z at the slot. Plain vector code:
        // no branch on the slot, and no unaligned copy the next insertion would have to
        // read back through the store buffer.
        let (d, zs) = (&mut self.d, &mut self.z);
        let p32 = pos as u32;
        for b in (0..cap / W).rev() {
            let c = b * W;
            let pd: [T; W] = d[c..c + W].try_into().unwrap();
            let cd: [T; W] = d[c + 1..c + 1 + W].try_into().unwrap();
            let pz: [u32; W] = zs[c..c + W].try_into().unwrap();
            let cz: [u32; W] = zs[c + 1..c + 1 + W].try_into().unwrap();
            let mut od = [T::ZERO; W];
            let mut oz = [0u32; W];
            for i in 0..W {
                let m = if cd[i] < d2 { cd[i] } else { d2 };
                od[i] = if pd[i] > m { pd[i] } else { m };
                oz[i] = if SLOT[c + i] < p32 { cz[i] } else { pz[i] };
            }
            d[c + 1..c + 1 + W].copy_from_slice(&od);
            zs[c + 1..c + 1 + W].copy_from_slice(&oz);
        }
        zs[1 + pos.min(MAX_K)] = z;
        // Entry k (shifted in from k - 1) is outside the selection.
        d[1 + k] = T::INFINITY;
        true
    }

    /// Puts the `n` held entries of the array in order: each entry's place is the count
    /// of held distances below it, counted for all entries at once (one broadcast and a
    /// vector compare per entry: the counts stay in vector lanes; fixed trip counts, so
    /// no loop exit to mispredict). Entries with equal distances (rare) share a place,
    /// which leaves a slot at +inf or out of order: then (as for a held +inf, which the
    /// leaf pass never offers) an insertion sort with their ranks.
    #[inline(always)]
    fn sort_held<const AVX: bool>(&mut self, rank: &impl Fn(u32) -> u32) {
        match self.cap {
            8 => self.sort_held_in::<8, AVX>(rank),
            16 => self.sort_held_in::<16, AVX>(rank),
            24 => self.sort_held_in::<24, AVX>(rank),
            _ => self.sort_held_in::<MAX_K, AVX>(rank),
        }
    }

    /// `sort_held` for `cap == C`.
    #[inline(always)]
    fn sort_held_in<const C: usize, const AVX: bool>(&mut self, rank: &impl Fn(u32) -> u32) {
        let n = self.n;
        debug_assert!(self.cap == C && n <= C);
        if n == 0 {
            return;
        }
        // Slots from n on hold +inf: they count below no entry, and all land on slot n.
        let d: [T; C] = self.d[1..1 + C].try_into().unwrap();
        let z: [u32; C] = self.z[1..1 + C].try_into().unwrap();
        let mut lt = [0u64; C];
        if AVX {
            // SAFETY: AVX2 by the flag's contract (the AVX2 and AVX-512 leaf passes).
            unsafe { T::less_counts_avx(&d, &mut lt) };
        } else {
            // Two sums (the even and the odd entries' compares) halve the chain of adds;
            // 64-bit lanes take an f64 compare's mask as it is.
            let (mut lt0, mut lt1) = ([0u64; C], [0u64; C]);
            for j in 0..C / 2 {
                let (a, b) = (d[2 * j], d[2 * j + 1]);
                for i in 0..C {
                    lt0[i] += (a < d[i]) as u64;
                    lt1[i] += (b < d[i]) as u64;
                }
            }
            for i in 0..C {
                lt[i] = lt0[i] + lt1[i];
            }
        }
        let mut od = [T::INFINITY; MAX_K + 1];
        let mut oz = [0u32; MAX_K + 1];
        for i in 0..C {
            // (lt <= C <= MAX_K: the min only spares a bounds check.)
            let at = (lt[i] as usize).min(MAX_K);
            od[at] = d[i];
            oz[at] = z[i];
        }
        let mut ordered = od[n - 1] < T::INFINITY;
        for i in 0..C - 1 {
            ordered &= (i + 1 >= n) | (od[i] < od[i + 1]);
        }
        if ordered {
            // All C slots, not the n held: a fixed-size copy stays inline (n bytes went to
            // two memcpy calls per query). Slots from n on are +inf in `od`, as they must be
            // in `d`; their z-indices are never read.
            self.d[1..1 + C].copy_from_slice(&od[..C]);
            self.z[1..1 + C].copy_from_slice(&oz[..C]);
        } else {
            self.insertion_sort(rank);
        }
    }

    /// `sort_held` by comparisons.
    #[inline(never)]
    fn insertion_sort(&mut self, rank: &impl Fn(u32) -> u32) {
        let n = self.n;
        let (d, zs) = (&mut self.d[1..1 + n], &mut self.z[1..1 + n]);
        for i in 1..n {
            let (xd, xz) = (d[i], zs[i]);
            let mut j = i;
            while j > 0 && before(xd, xz, d[j - 1], zs[j - 1], rank) {
                d[j] = d[j - 1];
                zs[j] = zs[j - 1];
                j -= 1;
            }
            d[j] = xd;
            zs[j] = xz;
        }
    }

    /// Puts the held candidates in order (needed when the buffer never filled).
    #[inline(always)]
    pub(crate) fn finish<const AVX: bool>(&mut self, rank: &impl Fn(u32) -> u32) {
        if self.n < self.k {
            // Never filled: the entries are still in arrival order.
            self.sort_held::<AVX>(rank);
        }
    }

    /// The held distances² (in order after `finish`).
    #[inline(always)]
    pub(crate) fn d2s(&self) -> &[T] {
        &self.d[1..1 + self.n]
    }

    /// The held sources' z-indices, matching `d2s`.
    #[inline(always)]
    pub(crate) fn zs(&self) -> &[u32] {
        &self.z[1..1 + self.n]
    }
}

#[cfg(test)]
mod tests {
    use super::TopK;

    /// Against a full sort, for small and large k, with many ties and some infinite
    /// distances, one buffer reused across selections of different k.
    #[test]
    fn keeps_the_k_smallest_by_distance_then_rank() {
        let mut x = 12345u64;
        let mut next = || {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x
        };
        let mut t = TopK::new();
        #[cfg(target_arch = "x86_64")]
        let avx = std::arch::is_x86_feature_detected!("avx2");
        #[cfg(not(target_arch = "x86_64"))]
        let avx = false;
        for k in [1usize, 2, 7, 8, 9, 16, 24, 28, 32, 3, 17] {
            for round in 0..40 {
                let n = (next() % 400) as usize;
                // Ranks are a permutation of the z-indices (here reversed). Even rounds:
                // many ties and some infinities; odd rounds: distinct distances (almost
                // surely), the path without rank lookups.
                let (levels, inf) = if round % 2 == 0 { (50, 23) } else { (1 << 40, u64::MAX) };
                let cands: Vec<(f64, u32)> =
                    (0..n).map(|i| (if next() % inf == 0 { f64::INFINITY } else { (next() % levels) as f64 * 0.25 }, (n - i) as u32)).collect();
                let rank = |z: u32| n as u32 + 1 - z;
                // Rounds 0, 1 mod 4 offer only what is within the threshold, as the leaf
                // pass does; the others offer everything.
                let filter = round % 4 < 2;
                let mut thr = f64::INFINITY;
                t.reset(k);
                for (i, &(d, r)) in cands.iter().enumerate() {
                    if filter && d > thr {
                        continue;
                    }
                    // The vector slot search and fill sort (AVX2) where the CPU has them,
                    // else the baseline, by round.
                    let taken = if avx && round % 3 == 0 { t.push::<true>(d, r, k, &rank) } else { t.push::<false>(d, r, k, &rank) };
                    if taken {
                        assert_eq!(t.zs().len(), k);
                        // The threshold is the k-th distance of all candidates so far.
                        let mut seen: Vec<f64> = cands[..=i].iter().map(|c| c.0).collect();
                        seen.sort_by(|a, b| a.partial_cmp(b).unwrap());
                        assert_eq!(t.kth(k), seen[k - 1], "k {k}");
                        thr = t.kth(k);
                        assert_eq!(t.kth(k), *t.d2s().last().unwrap());
                    }
                }
                if avx && round % 3 == 0 {
                    t.finish::<true>(&rank)
                } else {
                    t.finish::<false>(&rank)
                }
                let mut want: Vec<(f64, u32)> = cands.iter().map(|&(d, z)| (d, rank(z))).collect();
                want.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
                want.truncate(k);
                let got: Vec<(f64, u32)> = t.d2s().iter().zip(t.zs()).map(|(&d, &z)| (d, rank(z))).collect();
                assert_eq!(got, want, "k {k} n {n}");
            }
        }
    }
}
