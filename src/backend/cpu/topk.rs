//! The k best neighbour candidates of one query, kept sorted by (distance², rank).
//!
//! The rank orders equal distances (0 for the query itself in a self-query, else the
//! source's input index + 1); it is looked up from the z-index only when two distances
//! tie. Distances and z-indices are kept in two arrays. Up to k = 256 the buffer is a
//! sorted array; up to k = 32 it fills unsorted and is sorted once when full (each
//! entry's place counted by vector compares), after which its insertion is branch-free:
//! the slot is the count of held distances below the new one (vector compares over the
//! whole, padded array) and the entries behind it move by one through vector min/max and
//! selects — the branchy insertion it replaced mispredicted once per taken candidate;
//! above, entries move one by one from the back. For larger k it is a max-heap (O(log k)
//! per candidate, even for k = N), sorted once at the end.

use crate::geom::Real;

/// Above this k, the buffer is a heap (the array costs O(k) per taken candidate; the heap
/// keeps k = N out of quadratic time).
const LINEAR_MAX: usize = 256;

/// Above this k the array's insertion is a scalar loop (the vector steps cost k/8 each).
const VECTOR_MAX: usize = 32;

/// Vector width of the array steps (elements; 8 fills an AVX2 f32 or an AVX-512 f64).
const W: usize = 8;

pub(crate) struct TopK<T> {
    /// Array mode: entry j at `d[1 + j]`, `z[1 + j]`; `d[0]` = -inf is a pad the shift
    /// reads; slots from n on hold +inf (they never count as smaller), through one pad
    /// slot after the `cap` entries. Heap mode: entry j at `d[j]`, `z[j]`.
    d: Vec<T>,
    z: Vec<u32>,
    n: usize,
    k: usize,
    /// k rounded up to a multiple of `W` (array mode).
    cap: usize,
}

/// Whether `(d2, rank(z))` orders before `(bd, rank(bz))`.
#[inline(always)]
fn before<T: Real>(d2: T, z: u32, bd: T, bz: u32, rank: &impl Fn(u32) -> u32) -> bool {
    d2 < bd || (d2 == bd && rank(z) < rank(bz))
}

/// The order of two (distance², z-index) entries by `before`.
fn order<T: Real>(a: &(T, u32), b: &(T, u32), rank: &impl Fn(u32) -> u32) -> std::cmp::Ordering {
    if before(a.0, a.1, b.0, b.1, rank) {
        std::cmp::Ordering::Less
    } else if before(b.0, b.1, a.0, a.1, rank) {
        std::cmp::Ordering::Greater
    } else {
        std::cmp::Ordering::Equal
    }
}

impl<T: Real> TopK<T> {
    pub(crate) fn new() -> Self {
        Self { d: Vec::new(), z: Vec::new(), n: 0, k: 0, cap: 0 }
    }

    /// Empties the buffer for a selection of `k >= 1`.
    #[inline(always)]
    pub(crate) fn reset(&mut self, k: usize) {
        assert!(k >= 1);
        let cap = k.div_ceil(W) * W;
        if self.d.len() < cap + 2 || self.z.len() < cap + 2 {
            self.d.resize(cap + 2, T::INFINITY);
            self.z.resize(cap + 2, 0);
        }
        if k <= LINEAR_MAX {
            self.d[..cap + 2].fill(T::INFINITY);
            self.d[0] = T::NEG_INFINITY;
        }
        self.n = 0;
        self.k = k;
        self.cap = cap;
    }

    #[inline(always)]
    pub(crate) fn len(&self) -> usize {
        self.n
    }

    /// The k-th distance² (only when full).
    #[inline(always)]
    pub(crate) fn kth(&self) -> T {
        if self.k <= LINEAR_MAX { self.d[self.k] } else { self.d[0] }
    }

    /// Offers source `z` at distance² `d2`; `rank(z)` breaks ties. Returns true when it
    /// was taken and the buffer is full (the k-th distance may have shrunk).
    #[inline(always)]
    pub(crate) fn push(&mut self, d2: T, z: u32, rank: &impl Fn(u32) -> u32) -> bool {
        if self.k > LINEAR_MAX {
            return self.push_heap(d2, z, rank);
        }
        let (k, n, cap) = (self.k, self.n, self.cap);
        debug_assert!(k >= 1 && n <= k && cap + 2 <= self.d.len());
        if cap > VECTOR_MAX {
            if n == k && !before(d2, z, self.d[k], self.z[k], rank) {
                return false;
            }
            return self.push_scalar(d2, z, rank);
        }
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
                self.sort_held(rank);
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
        let (d, zs) = (&self.d[..cap + 1], &self.z[..cap + 1]);
        // The slot: entries below d2, then equal ones of smaller rank (rare: scalar).
        let mut lt = 0usize;
        let mut eq = false;
        for c in d[1..].chunks_exact(W) {
            for &x in c {
                lt += (x < d2) as usize;
                eq |= x == d2;
            }
        }
        let mut pos = lt;
        if eq {
            while pos < n && d[1 + pos] == d2 && rank(zs[1 + pos]) < rank(z) {
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
        let d = &mut self.d[..cap + 1];
        let zs = &mut self.z[..cap + 1];
        let p32 = pos as u32;
        let mut c = cap;
        while c > 0 {
            c -= W;
            let pd: [T; W] = d[c..c + W].try_into().unwrap();
            let cd: [T; W] = d[c + 1..c + 1 + W].try_into().unwrap();
            let pz: [u32; W] = zs[c..c + W].try_into().unwrap();
            let cz: [u32; W] = zs[c + 1..c + 1 + W].try_into().unwrap();
            let mut od = [T::ZERO; W];
            let mut oz = [0u32; W];
            for i in 0..W {
                let m = if cd[i] < d2 { cd[i] } else { d2 };
                od[i] = if pd[i] > m { pd[i] } else { m };
                oz[i] = if ((c + i) as u32) < p32 { cz[i] } else { pz[i] };
            }
            d[c + 1..c + 1 + W].copy_from_slice(&od);
            zs[c + 1..c + 1 + W].copy_from_slice(&oz);
        }
        zs[1 + pos] = z;
        // Entry k (shifted in from k - 1) is outside the selection.
        self.d[1 + k] = T::INFINITY;
        true
    }

    /// `push` for k above `VECTOR_MAX`: entries moved one by one from the back until the
    /// slot (few: candidates come roughly nearest first, so filling by insertion costs
    /// less than a sort when full).
    #[inline(always)]
    fn push_scalar(&mut self, d2: T, z: u32, rank: &impl Fn(u32) -> u32) -> bool {
        let (k, n) = (self.k, self.n);
        let (d, zs) = (&mut self.d[..k + 2], &mut self.z[..k + 2]);
        let mut i = if n == k { k - 1 } else { n };
        // SAFETY: 0 < i < k inside the loop, and both arrays hold k + 2 slots.
        unsafe {
            while i > 0 && before(d2, z, *d.get_unchecked(i), *zs.get_unchecked(i), rank) {
                *d.get_unchecked_mut(i + 1) = *d.get_unchecked(i);
                *zs.get_unchecked_mut(i + 1) = *zs.get_unchecked(i);
                i -= 1;
            }
        }
        d[i + 1] = d2;
        zs[i + 1] = z;
        d[1 + k] = T::INFINITY;
        self.n = (n + 1).min(k);
        self.n == k
    }

    /// Puts the `n` held entries of the array (k <= `VECTOR_MAX`) in order: each entry's
    /// place is the count of held distances below it (vector compares over the padded
    /// array; the pads are +inf and never count below a finite distance). Entries with
    /// equal distances (rare) share a place and need their ranks: then an insertion sort.
    #[inline(always)]
    fn sort_held(&mut self, rank: &impl Fn(u32) -> u32) {
        let (n, cap) = (self.n, self.cap);
        debug_assert!(cap <= VECTOR_MAX);
        let d = &self.d[1..1 + cap];
        let mut od = [T::INFINITY; VECTOR_MAX];
        let mut oz = [0u32; VECTOR_MAX];
        let mut seen = 0u64;
        for i in 0..n {
            let di = d[i];
            let mut lt = 0u32;
            for c in d.chunks_exact(W) {
                for &x in c {
                    lt += (x < di) as u32;
                }
            }
            let at = (lt as usize).min(VECTOR_MAX - 1);
            seen |= 1 << at;
            od[at] = di;
            oz[at] = self.z[1 + i];
        }
        if seen == (1u64 << n) - 1 {
            self.d[1..1 + n].copy_from_slice(&od[..n]);
            self.z[1..1 + n].copy_from_slice(&oz[..n]);
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

    /// `push` for large k: a max-heap by (distance², rank) once full.
    #[inline(never)]
    fn push_heap(&mut self, d2: T, z: u32, rank: &impl Fn(u32) -> u32) -> bool {
        let k = self.k;
        let (d, zs) = (&mut self.d[..k], &mut self.z[..k]);
        if self.n < k {
            d[self.n] = d2;
            zs[self.n] = z;
            self.n += 1;
            if self.n < k {
                return false;
            }
            for i in (0..k / 2).rev() {
                sift_down(d, zs, i, rank);
            }
            return true;
        }
        if !before(d2, z, d[0], zs[0], rank) {
            return false;
        }
        d[0] = d2;
        zs[0] = z;
        sift_down(d, zs, 0, rank);
        true
    }

    /// Puts the held candidates in order (needed after a heap was used).
    #[inline(always)]
    pub(crate) fn finish(&mut self, rank: &impl Fn(u32) -> u32) {
        if self.k > LINEAR_MAX {
            let n = self.n;
            let mut e: Vec<(T, u32)> = (0..n).map(|j| (self.d[j], self.z[j])).collect();
            e.sort_unstable_by(|a, b| order(a, b, rank));
            for (j, (dd, zz)) in e.into_iter().enumerate() {
                self.d[j] = dd;
                self.z[j] = zz;
            }
        } else if self.cap <= VECTOR_MAX && self.n < self.k {
            // Never filled: the entries are still in arrival order.
            self.sort_held(rank);
        }
    }

    /// The held distances² (in order after `finish`).
    #[inline(always)]
    pub(crate) fn d2s(&self) -> &[T] {
        let o = (self.k <= LINEAR_MAX) as usize;
        &self.d[o..o + self.n]
    }

    /// The held sources' z-indices, matching `d2s`.
    #[inline(always)]
    pub(crate) fn zs(&self) -> &[u32] {
        let o = (self.k <= LINEAR_MAX) as usize;
        &self.z[o..o + self.n]
    }
}

/// Restores the max-heap below `i`.
#[inline(always)]
fn sift_down<T: Real>(d: &mut [T], z: &mut [u32], mut i: usize, rank: &impl Fn(u32) -> u32) {
    let n = d.len();
    let (xd, xz) = (d[i], z[i]);
    loop {
        let mut c = 2 * i + 1;
        if c >= n {
            break;
        }
        if c + 1 < n && before(d[c], z[c], d[c + 1], z[c + 1], rank) {
            c += 1;
        }
        if !before(xd, xz, d[c], z[c], rank) {
            break;
        }
        d[i] = d[c];
        z[i] = z[c];
        i = c;
    }
    d[i] = xd;
    z[i] = xz;
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
        for k in [1usize, 2, 7, 8, 9, 16, 32, 33, 64, 133, 256, 257, 400, 3, 17] {
            for round in 0..40 {
                let n = (next() % 400) as usize;
                // Ranks are a permutation of the z-indices (here reversed). Even rounds:
                // many ties and some infinities; odd rounds: distinct distances (almost
                // surely), the path without rank lookups.
                let (levels, inf) = if round % 2 == 0 { (50, 23) } else { (1 << 40, u64::MAX) };
                let cands: Vec<(f64, u32)> = (0..n).map(|i| (if next() % inf == 0 { f64::INFINITY } else { (next() % levels) as f64 * 0.25 }, (n - i) as u32)).collect();
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
                    if t.push(d, r, &rank) {
                        assert_eq!(t.len(), k);
                        // The threshold is the k-th distance of all candidates so far.
                        let mut seen: Vec<f64> = cands[..=i].iter().map(|c| c.0).collect();
                        seen.sort_by(|a, b| a.partial_cmp(b).unwrap());
                        assert_eq!(t.kth(), seen[k - 1], "k {k}");
                        thr = t.kth();
                        if k <= 256 {
                            assert_eq!(t.kth(), *t.d2s().last().unwrap());
                        }
                    }
                }
                t.finish(&rank);
                let mut want: Vec<(f64, u32)> = cands.iter().map(|&(d, z)| (d, rank(z))).collect();
                want.sort_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
                want.truncate(k);
                let got: Vec<(f64, u32)> = t.d2s().iter().zip(t.zs()).map(|(&d, &z)| (d, rank(z))).collect();
                assert_eq!(got, want, "k {k} n {n}");
            }
        }
    }
}
