//! The plain element types buffers hold.

/// Plain element types a back end's buffers hold. (`pub` in a private module: nameable
/// only inside the crate, usable as a supertrait of the public `Real`.)
///
/// # Safety
/// Plain data: every bit pattern of the type's size is a value of it (a back end may
/// reuse a spent buffer's memory for another element type of the same size and alignment).
pub unsafe trait Elem: Copy + Send + Sync + std::fmt::Debug + 'static {
    /// The value new buffers are filled with.
    const FILL: Self;
}
macro_rules! elem {
    // SAFETY: integers and floats: every bit pattern is a value.
    ($($t:ty),*) => {$(unsafe impl Elem for $t { const FILL: Self = 0 as $t; })*};
}
elem!(u8, u32, u64, i64, f32, f64);
// SAFETY: an array of plain data is plain data.
unsafe impl<T: Elem, const D: usize> Elem for [T; D] {
    const FILL: Self = [T::FILL; D];
}
