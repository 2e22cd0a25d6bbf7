//! Lock-free union–find for FoF groups.

use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use rayon::prelude::*;

/// Lock-free union–find over z-order indices. Every parent pointer points to a smaller
/// (or the same) index, so the root of a set is its smallest member.
pub(crate) struct UnionFind {
    parent: Vec<AtomicU32>,
}

impl UnionFind {
    pub fn new(n: usize) -> Self {
        Self { parent: (0..n as u32).into_par_iter().map(AtomicU32::new).collect() }
    }

    /// The root of `x`, halving the path on the way (benign races: every store writes an
    /// ancestor, and only non-roots are written).
    #[inline(always)]
    pub fn find(&self, mut x: u32) -> u32 {
        loop {
            let p = self.parent[x as usize].load(Relaxed);
            if p == x {
                return x;
            }
            let g = self.parent[p as usize].load(Relaxed);
            if g == p {
                return p;
            }
            self.parent[x as usize].store(g, Relaxed);
            x = g;
        }
    }

    /// Merges the sets of roots (or members) `a` and `b`: the larger root is hooked under
    /// the smaller with a compare-and-swap, retried when another thread got there first.
    /// Returns the smaller root at the time of the hook (a hint; it may since have been
    /// hooked under an even smaller one).
    #[inline]
    pub fn union_roots(&self, mut a: u32, mut b: u32) -> u32 {
        loop {
            if a == b {
                return a;
            }
            let (lo, hi) = if a < b { (a, b) } else { (b, a) };
            match self.parent[hi as usize].compare_exchange(hi, lo, Relaxed, Relaxed) {
                Ok(_) => return lo,
                Err(_) => {
                    a = self.find(hi);
                    b = self.find(lo);
                }
            }
        }
    }

    /// Hooks `x` under `root` (< x) with a plain store: for a point no other thread can
    /// reach yet (a singleton, its set being built by this thread alone).
    #[inline(always)]
    pub fn hook_fresh(&self, x: u32, root: u32) {
        debug_assert!(root < x && self.parent[x as usize].load(Relaxed) == x);
        self.parent[x as usize].store(root, Relaxed);
    }

    #[inline]
    pub fn union(&self, a: u32, b: u32) -> u32 {
        let (ra, rb) = (self.find(a), self.find(b));
        self.union_roots(ra, rb)
    }

    /// Final contraction: every entry becomes its root.
    pub fn contract(self) -> Vec<u32> {
        (0..self.parent.len() as u32).into_par_iter().for_each(|z| {
            let r = self.find(z);
            self.parent[z as usize].store(r, Relaxed);
        });
        self.parent.into_iter().map(AtomicU32::into_inner).collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Concurrent unions from several threads give the components of the edge list, each
    /// rooted at its smallest member, whatever the interleaving.
    #[test]
    fn concurrent_unions_give_components_rooted_at_the_smallest() {
        let n: u32 = if cfg!(miri) { 40 } else { 5000 };
        let mut s = 3u64;
        let mut next = || {
            s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            (s >> 33) as u32
        };
        let edges: Vec<(u32, u32)> = (0..n / 2).map(|_| (next() % n, next() % n)).collect();
        let uf = UnionFind::new(n as usize);
        edges.par_iter().for_each(|&(a, b)| {
            uf.union(a, b);
        });
        let roots = uf.contract();
        // Sequential reference: label propagation to the minimum until stable.
        let mut lab: Vec<u32> = (0..n).collect();
        loop {
            let mut changed = false;
            for &(a, b) in &edges {
                let m = lab[a as usize].min(lab[b as usize]);
                for x in [a, b] {
                    if lab[x as usize] != m {
                        lab[x as usize] = m;
                        changed = true;
                    }
                }
            }
            if !changed {
                break;
            }
        }
        assert_eq!(roots, lab);
    }
}
