//! Small helpers for data-parallel loops that write disjoint elements of one buffer.

/// A raw pointer that may be shared between rayon tasks. Every user must guarantee that
/// concurrent tasks write disjoint elements and that the buffer outlives the tasks.
#[derive(Clone, Copy)]
pub(crate) struct SharedMut<T>(pub *mut T);

unsafe impl<T: Send> Send for SharedMut<T> {}
unsafe impl<T: Send> Sync for SharedMut<T> {}

impl<T> SharedMut<T> {
    pub fn new(s: &mut [T]) -> Self {
        Self(s.as_mut_ptr())
    }
    /// # Safety
    /// `i` in bounds of the buffer this was made from, and no other task touches element `i`.
    #[inline(always)]
    pub unsafe fn write(self, i: usize, v: T) {
        unsafe { self.0.add(i).write(v) }
    }
    /// # Safety
    /// As for `write`, for the whole range `[i, i + len)`.
    #[inline(always)]
    pub unsafe fn slice_mut<'a>(self, i: usize, len: usize) -> &'a mut [T] {
        unsafe { std::slice::from_raw_parts_mut(self.0.add(i), len) }
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
