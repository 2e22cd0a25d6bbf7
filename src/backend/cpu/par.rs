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

    /// Reads element `i`.
    ///
    /// # Safety
    /// No other task writes element `i` during the stage.
    #[inline(always)]
    pub unsafe fn read(&self, i: usize) -> T
    where
        T: Copy,
    {
        assert!(i < self.len, "DisjointSlice: index {i} out of bounds ({})", self.len);
        // SAFETY: in bounds (checked); not written meanwhile by the caller's promise.
        unsafe { self.ptr.add(i).read() }
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

/// The indices `i < n` (ascending) for which `keep(i)`, in parallel over contiguous
/// chunks: a plain loop per chunk, then one copy of the chunks' results. (rayon's
/// `filter().collect()` over millions of indices took several times longer.)
pub(crate) fn filter_indices(n: usize, keep: impl Fn(usize) -> bool + Sync) -> Vec<u32> {
    use rayon::prelude::*;
    let parts: Vec<Vec<u32>> = chunk_ranges(n, 4 * rayon::current_num_threads())
        .into_par_iter()
        .map(|r| {
            let mut v = Vec::new();
            for i in r {
                if keep(i) {
                    v.push(i as u32);
                }
            }
            v
        })
        .collect();
    parts.concat()
}

/// `0, 1, .., n - 1`, written in parallel.
pub(crate) fn iota(n: usize) -> Vec<u32> {
    use rayon::prelude::*;
    (0..n as u32).into_par_iter().collect()
}

/// `vec![v; n]`, written by the pool's threads in parallel above 64 Ki elements. A fresh
/// array costs a page fault per 4 KiB on first touch (~1.5 µs each on the development VM,
/// most of the cost of filling it); `vec!` takes them all on one thread, and `calloc`
/// from a worker thread's malloc arena also zeroes them there with one serial memset.
pub(crate) fn filled<T: Copy + Send + Sync>(n: usize, v: T) -> Vec<T> {
    if n < 1 << 16 {
        return vec![v; n];
    }
    let mut out = Vec::with_capacity(n);
    rayon::iter::ParallelExtend::par_extend(&mut out, rayon::iter::repeat_n(v, n));
    out
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

/// Maps in the pages of an output array the call is about to write in full, in parallel
/// chunks, before the pass that writes it in scattered order: one madvise per chunk
/// instead of a page fault per page inside the hot loop (a fresh array costs a fault per
/// 4 KiB; rows in input order touch them at random). Contents are unchanged
/// (MADV_POPULATE_WRITE faults pages in as a write would, without writing). A no-op off
/// Linux on x86-64 and AArch64, on kernels before 5.14 and where the chunks are not page
/// aligned (pages above 4 KiB): the call fails and is ignored; and below 1 MiB.
/// With `ZTREE_HUGEPAGES=1` the 2 MiB-aligned interior is first advised to use
/// transparent huge pages: the kNN walk into reused arrays is 8-12% shorter, but on the
/// development VM a fresh array's first touch then cost more than that (off by default).
pub(crate) fn prefault<T: Send>(s: &mut [T]) {
    #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
    prefault_with(s, huge_pages_wanted());
    #[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
    let _ = s;
}

/// `prefault`, with or without the huge-page advice.
#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
fn prefault_with<T: Send>(s: &mut [T], huge: bool) {
    use rayon::prelude::*;
    const PAGE: usize = 4096;
    const MADV_POPULATE_WRITE: i32 = 23;
    unsafe extern "C" {
        fn madvise(addr: *mut std::ffi::c_void, len: usize, advice: i32) -> i32;
    }
    let (p, bytes) = (s.as_mut_ptr() as usize, std::mem::size_of_val(s));
    if bytes < 1 << 20 {
        return;
    }
    // A few chunks per thread, of 256 KiB to 4 MiB (1e6 labels, 7.6 MiB, are 8 chunks
    // on 2 threads).
    let chunk = (bytes / (4 * rayon::current_num_threads().max(1))).clamp(256 << 10, 4 << 20) / PAGE * PAGE;
    let (a, e) = (p.div_ceil(PAGE) * PAGE, (p + bytes) / PAGE * PAGE);
    // On request, huge pages for the 2 MiB-aligned interior first (where THP is
    // `madvise`-only): rows written in input order then cost a TLB miss per 2 MiB,
    // not per 4 KiB.
    const HUGE: usize = 2 << 20;
    const MADV_HUGEPAGE: i32 = 14;
    let (ha, he) = (p.div_ceil(HUGE) * HUGE, (p + bytes) / HUGE * HUGE);
    if he > ha && huge {
        // SAFETY: as below; the advice changes only how the pages are backed.
        unsafe { madvise(ha as *mut _, he - ha, MADV_HUGEPAGE) };
    }
    (a..e).into_par_iter().step_by(chunk).for_each(|c| {
        // SAFETY: whole pages inside the caller's array, which this call borrows
        // mutably; the advice only maps them in.
        unsafe { madvise(c as *mut _, chunk.min(e - c), MADV_POPULATE_WRITE) };
    });
}

/// Whether `prefault` asks for transparent huge pages (`ZTREE_HUGEPAGES=1`; read once).
#[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
fn huge_pages_wanted() -> bool {
    static WANTED: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *WANTED.get_or_init(|| std::env::var_os("ZTREE_HUGEPAGES").is_some_and(|v| v == "1"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use rayon::prelude::*;

    /// Prefaulting keeps the contents, on written pages and on fresh (untouched) ones,
    /// and at an array that does not start or end on a page boundary.
    #[test]
    fn prefault_keeps_contents() {
        #[cfg(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64")))]
        let runs: [fn(&mut [u64]); 3] = [prefault, |s| prefault_with(s, false), |s| prefault_with(s, true)];
        #[cfg(not(all(target_os = "linux", any(target_arch = "x86_64", target_arch = "aarch64"))))]
        let runs: [fn(&mut [u64]); 1] = [prefault];
        for run in runs {
            let n = 3 << 20;
            let mut v: Vec<u64> = (0..n as u64).map(|i| i.wrapping_mul(0x9E37_79B9_7F4A_7C15)).collect();
            run(&mut v[1..n - 1]);
            assert!(v.iter().enumerate().all(|(i, &x)| x == (i as u64).wrapping_mul(0x9E37_79B9_7F4A_7C15)));
            let mut z = vec![0u64; 5 << 20];
            run(&mut z[3..]);
            assert!(z.iter().all(|&x| x == 0));
        }
    }

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
    fn filter_indices_keeps_the_order() {
        for n in [0usize, 1, 7, 10_000] {
            let want: Vec<u32> = (0..n as u32).filter(|i| i % 3 == 1 || i % 7 == 0).collect();
            assert_eq!(filter_indices(n, |i| i % 3 == 1 || i % 7 == 0), want);
        }
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

    #[test]
    fn filled_is_vec_macro() {
        for n in [0usize, 5, (1 << 16) - 1, 1 << 16, 200_003] {
            let v = filled(n, 7u64);
            assert_eq!(v.len(), n);
            assert!(v.iter().all(|&x| x == 7));
            assert_eq!(filled(n, -1.5f32), vec![-1.5f32; n]);
        }
    }
}
