//! Helpers for data-parallel loops on the CPU.

use std::marker::PhantomData;

/// A mutable slice that several rayon tasks write at the same time, each at positions
/// no other task writes. It carries the slice's length and lifetime: every write is
/// bounds-checked, and the slice cannot outlive the borrow it came from. What it cannot
/// check, disjointness between tasks, is the caller's promise (hence `unsafe`).
pub(crate) struct DisjointSlice<'a, T> {
    ptr: *mut T,
    len: usize,
    _borrow: PhantomData<&'a mut [T]>,
}

// SAFETY: tasks write disjoint elements (the contract of `write` and `slice_mut`), so
// sharing the slice is sharing `&mut` access to disjoint parts, which needs `T: Send`.
unsafe impl<T: Send> Send for DisjointSlice<'_, T> {}
unsafe impl<T: Send> Sync for DisjointSlice<'_, T> {}

impl<'a, T> DisjointSlice<'a, T> {
    pub fn new(s: &'a mut [T]) -> Self {
        Self { ptr: s.as_mut_ptr(), len: s.len(), _borrow: PhantomData }
    }

    /// Writes element `i`.
    ///
    /// # Safety
    /// No other task reads or writes element `i` during the stage.
    #[inline(always)]
    pub unsafe fn write(&self, i: usize, v: T) {
        assert!(i < self.len, "DisjointSlice: index {i} out of bounds ({})", self.len);
        // SAFETY: in bounds (checked); exclusive by the caller's promise.
        unsafe { self.ptr.add(i).write(v) }
    }

    /// Hints the cache that elements `i .. i + len` will be written soon (rows written in
    /// input order from a z-ordered loop land at scattered addresses: a write miss per
    /// row stalls the loop unless its line was fetched while the previous row was worked
    /// on). A no-op out of bounds and off x86-64.
    #[inline(always)]
    pub fn prefetch(&self, i: usize, len: usize) {
        #[cfg(target_arch = "x86_64")]
        if i <= self.len && len <= self.len - i {
            use std::arch::x86_64::{_MM_HINT_T0, _mm_prefetch};
            let bytes = len * std::mem::size_of::<T>();
            let mut off = 0;
            while off < bytes {
                // SAFETY: a prefetch never faults; the address lies inside the slice.
                unsafe { _mm_prefetch::<_MM_HINT_T0>((self.ptr.add(i) as *const i8).add(off)) };
                off += 64;
            }
            // The last line, when the rows do not start on a line boundary.
            if bytes > 0 {
                unsafe { _mm_prefetch::<_MM_HINT_T0>((self.ptr.add(i) as *const i8).add(bytes - 1)) };
            }
        }
        #[cfg(not(target_arch = "x86_64"))]
        let _ = (i, len);
    }

    /// Elements `i .. i + len` as a slice of their own.
    ///
    /// # Safety
    /// No other task touches these elements while the returned slice lives.
    #[inline(always)]
    #[allow(clippy::mut_from_ref)]
    pub unsafe fn slice_mut(&self, i: usize, len: usize) -> &mut [T] {
        assert!(i <= self.len && len <= self.len - i, "DisjointSlice: range {i}..{} out of bounds ({})", i + len, self.len);
        // SAFETY: in bounds (checked); exclusive by the caller's promise.
        unsafe { std::slice::from_raw_parts_mut(self.ptr.add(i), len) }
    }
}

/// Splits `0..n` into about `parts` contiguous ranges of nearly equal size.
pub(crate) fn chunk_ranges(n: usize, parts: usize) -> Vec<std::ops::Range<usize>> {
    let parts = parts.max(1).min(n.max(1));
    let base = n / parts;
    let rem = n % parts;
    let mut out = Vec::with_capacity(parts);
    let mut lo = 0;
    for p in 0..parts {
        let len = base + usize::from(p < rem);
        out.push(lo..lo + len);
        lo += len;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    #[test]
    fn disjoint_writes_land() {
        let mut v = vec![0u32; 1000];
        let s = DisjointSlice::new(&mut v);
        (0..1000).into_par_iter().for_each(|i| unsafe { s.write(i, i as u32 * 2) });
        assert!(v.iter().enumerate().all(|(i, &x)| x == i as u32 * 2));
    }

    #[test]
    #[should_panic(expected = "out of bounds")]
    fn writes_are_bounds_checked() {
        let mut v = vec![0u8; 4];
        let s = DisjointSlice::new(&mut v);
        unsafe { s.write(4, 1) };
    }

    #[test]
    fn chunks_cover_the_range() {
        for (n, p) in [(0, 3), (1, 4), (10, 3), (1000, 7)] {
            let c = chunk_ranges(n, p);
            assert_eq!(c.first().unwrap().start, 0);
            assert_eq!(c.last().unwrap().end, n);
            assert!(c.windows(2).all(|w| w[0].end == w[1].start));
        }
    }
}
