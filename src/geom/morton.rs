//! Morton (z-order) keys (docs/DESIGN.md §1 step 3): coordinates quantised to integer cells
//! over the domain, bits interleaved.
//!
//! Keys only shape the tree; every distance is computed from the original coordinates,
//! so results are exact whatever the quantisation.

use crate::input::{Bounds, Domain};

/// How many of the highest varying key bits the tree needs for `n` points: enough for
/// cells ~2^18 times smaller than the mean volume per point (a denser cluster's points
/// share keys, and runs of identical keys longer than a leaf are refined by position),
/// rounded so that the CPU's LSD passes use whole 8-bit digits after its 11-bit MSD pass.
/// At 1e6-4e6 points: 43 bits, four LSD passes where the full 63 took seven. Both back
/// ends sort keys cut to these bits (more than `CUT_MIN` keys), so their trees agree.
pub(crate) fn bits_kept(n: usize) -> u32 {
    let want = (usize::BITS - n.leading_zeros()) + 18;
    (11 + 8 * want.saturating_sub(11).div_ceil(8)).min(64)
}

/// Up to this many keys the sorts keep every bit (`bits_kept`).
pub(crate) const CUT_MIN: usize = 4096;

/// The mask that cuts keys to their `keep` highest varying bits, `diff` being the bits on
/// which some keys differ (the OR of `k ^ k0`); all ones when nothing is cut. Both back
/// ends' sorts cut with it (above `CUT_MIN` keys), so their keys agree.
pub(crate) fn cut_mask(diff: u64, keep: u32) -> u64 {
    let top = 64 - diff.leading_zeros();
    let low = top.saturating_sub(keep.max(1));
    if low == 0 { u64::MAX } else { !((1u64 << low) - 1) }
}

/// Bits of one coordinate in a key: 21 in 3D (63-bit keys), 32 in 2D.
pub(crate) const fn bits_per_dim(d: usize) -> u32 {
    if d == 2 { 32 } else { 21 }
}

/// Maps coordinates to integer cells and Morton keys.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Quantizer<const D: usize> {
    lo: [f64; D],
    scale: [f64; D],
}

impl<const D: usize> Quantizer<D> {
    const MAX_CELL: u64 = (1u64 << bits_per_dim(D)) - 1;

    /// Cells over the periodic box, or over `bounds` (the global bounding box) when open.
    pub fn new(domain: &Domain<D>, bounds: &Bounds<D>) -> Self {
        let cells = (1u64 << bits_per_dim(D)) as f64;
        match domain {
            Domain::Periodic(l) => Self { lo: [0.0; D], scale: std::array::from_fn(|d| cells / l[d]) },
            Domain::Open => Self::over(bounds),
        }
    }

    /// Cubic cells over a box (used for the open domain and to refine runs of equal keys):
    /// one scale for every dimension, set by the longest extent. Per-dimension scales
    /// would stretch the cells like the box, and a rod or slab of points would then get
    /// leaves as long as the rod is (a 1 x 1 x 1e6 rod: leaves 1e5 long, kNN 40x slower).
    pub fn over(bounds: &Bounds<D>) -> Self {
        let cells = (1u64 << bits_per_dim(D)) as f64;
        let ext = (0..D).map(|d| bounds.hi[d] - bounds.lo[d]).filter(|e| e.is_finite()).fold(0.0f64, f64::max);
        // Padded a little so the top face maps inside; all points equal: one cell.
        let s = if ext > 0.0 { cells / (ext * (1.0 + 1e-9)) } else { 0.0 };
        Self { lo: bounds.lo, scale: [s; D] }
    }

    /// The cell origin and cells per unit length of each dimension (for the device
    /// kernels, which compute the same cells).
    #[cfg_attr(not(feature = "cuda"), allow(dead_code))]
    pub fn parts(&self) -> ([f64; D], [f64; D]) {
        (self.lo, self.scale)
    }

    /// Position of `x` on dimension `d`'s cell axis, before flooring and clamping.
    #[inline(always)]
    pub fn cell_coord(&self, d: usize, x: f64) -> f64 {
        (x - self.lo[d]) * self.scale[d]
    }

    /// Lower corner of the box holding every point whose cell on dimension `d` is `c`
    /// (up to rounding; callers pad it); `None` when every point is in one cell.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub fn cell_lo(&self, d: usize, c: u64) -> Option<f64> {
        (self.scale[d] > 0.0).then(|| self.lo[d] + c as f64 / self.scale[d])
    }

    #[inline(always)]
    pub fn key(&self, p: &[f64; D]) -> u64 {
        let cell: [u64; D] = std::array::from_fn(|d| {
            let c = self.cell_coord(d, p[d]);
            // `as` saturates (NaN -> 0), and the clamp keeps rounding at the top face inside.
            (c as u64).min(Self::MAX_CELL)
        });
        morton(&cell)
    }

    /// `key` in operations that vector units have before AVX-512 (which alone converts
    /// f64 to 64-bit integers): the cell coordinate clamped to [0, MAX_CELL] in floating
    /// point (NaN to 0), floored, and read from the low bits of floor + 2^52 (exact below
    /// 2^52). The same keys as `key` (a unit test checks); for loops compiled with AVX2,
    /// where it vectorises (elsewhere `floor` may be a library call).
    #[inline(always)]
    pub fn key_vectorisable(&self, p: &[f64; D]) -> u64 {
        const TWO52: f64 = 4_503_599_627_370_496.0;
        let cell: [u64; D] = std::array::from_fn(|d| {
            let c = self.cell_coord(d, p[d]);
            let c = if c > 0.0 { c } else { 0.0 };
            let c = if c < Self::MAX_CELL as f64 { c } else { Self::MAX_CELL as f64 };
            (c.floor() + TWO52).to_bits() & ((1u64 << 52) - 1)
        });
        morton(&cell)
    }
}

#[inline(always)]
fn spread3(mut x: u64) -> u64 {
    x &= 0x1f_ffff;
    x = (x | x << 32) & 0x001f_0000_0000_ffff;
    x = (x | x << 16) & 0x001f_0000_ff00_00ff;
    x = (x | x << 8) & 0x100f_00f0_0f00_f00f;
    x = (x | x << 4) & 0x10c3_0c30_c30c_30c3;
    x = (x | x << 2) & 0x1249_2492_4924_9249;
    x
}

/// Inverse of `spread3`: every third bit, compacted.
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
fn compact3(mut x: u64) -> u64 {
    x &= 0x1249_2492_4924_9249;
    x = (x | x >> 2) & 0x10c3_0c30_c30c_30c3;
    x = (x | x >> 4) & 0x100f_00f0_0f00_f00f;
    x = (x | x >> 8) & 0x001f_0000_ff00_00ff;
    x = (x | x >> 16) & 0x001f_0000_0000_ffff;
    x = (x | x >> 32) & 0x1f_ffff;
    x
}

#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
fn compact2(mut x: u64) -> u64 {
    x &= 0x5555_5555_5555_5555;
    x = (x | x >> 1) & 0x3333_3333_3333_3333;
    x = (x | x >> 2) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | x >> 4) & 0x00ff_00ff_00ff_00ff;
    x = (x | x >> 8) & 0x0000_ffff_0000_ffff;
    x = (x | x >> 16) & 0x0000_0000_ffff_ffff;
    x
}

/// Cell coordinates of a Morton key (inverse of [`morton`]).
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) fn unmorton<const D: usize>(key: u64) -> [u64; D] {
    match D {
        2 => std::array::from_fn(|d| compact2(key >> (1 - d))),
        3 => std::array::from_fn(|d| compact3(key >> (2 - d))),
        _ => unreachable!("ztree supports 2 and 3 dimensions"),
    }
}

#[inline(always)]
fn spread2(mut x: u64) -> u64 {
    x &= 0xffff_ffff;
    x = (x | x << 16) & 0x0000_ffff_0000_ffff;
    x = (x | x << 8) & 0x00ff_00ff_00ff_00ff;
    x = (x | x << 4) & 0x0f0f_0f0f_0f0f_0f0f;
    x = (x | x << 2) & 0x3333_3333_3333_3333;
    x = (x | x << 1) & 0x5555_5555_5555_5555;
    x
}

/// Interleaves cell coordinates, the first dimension in the most significant bit.
#[inline(always)]
pub(crate) fn morton<const D: usize>(cell: &[u64; D]) -> u64 {
    match D {
        2 => spread2(cell[0]) << 1 | spread2(cell[1]),
        3 => spread3(cell[0]) << 2 | spread3(cell[1]) << 1 | spread3(cell[2]),
        _ => unreachable!("ztree supports 2 and 3 dimensions"),
    }
}

/// The bit length of the smallest Morton cell holding both keys (0 when equal).
#[inline(always)]
pub(crate) fn level_of(a: u64, b: u64) -> u8 {
    (64 - (a ^ b).leading_zeros()) as u8
}

#[cfg(test)]
mod tests {
    use super::*;

    fn lcg(s: &mut u64) -> u64 {
        *s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        *s >> 11
    }

    #[test]
    fn morton_orders_by_interleaved_bits() {
        assert_eq!(morton(&[1u64, 0, 0]), 4);
        assert_eq!(morton(&[0u64, 1, 0]), 2);
        assert_eq!(morton(&[0u64, 0, 1]), 1);
        assert_eq!(morton(&[(1u64 << 21) - 1; 3]), (1u64 << 63) - 1);
        assert_eq!(morton(&[1u64, 0]), 2);
        assert_eq!(morton(&[u32::MAX as u64; 2]), u64::MAX);
        // Bit b of dimension d lands at bit D*b + (D-1-d).
        for b in 0..21 {
            assert_eq!(morton(&[0, 1u64 << b, 0]), 1u64 << (3 * b + 1));
        }
    }

    #[test]
    fn unmorton_inverts_morton() {
        let mut s = 5u64;
        for _ in 0..1000 {
            let c3 = [lcg(&mut s) & 0x1f_ffff, lcg(&mut s) & 0x1f_ffff, lcg(&mut s) & 0x1f_ffff];
            assert_eq!(unmorton::<3>(morton(&c3)), c3);
            let c2 = [lcg(&mut s) & 0xffff_ffff, lcg(&mut s) & 0xffff_ffff];
            assert_eq!(unmorton::<2>(morton(&c2)), c2);
        }
    }

    /// The vectorisable key equals the plain one everywhere: random points in and out of
    /// the range, exact cell boundaries and their neighbours, the top face, NaN and
    /// infinities, in 2D and 3D.
    #[test]
    fn key_vectorisable_equals_key() {
        let mut s = 11u64;
        let q3 = Quantizer::<3>::new(&Domain::Periodic([1.0, 2.5, 1e3]), &Bounds::EMPTY);
        let q2 = Quantizer::<2>::over(&Bounds { lo: [-3.0, 7.0], hi: [5.0, 7.5] });
        let mut edge = vec![0.0, -0.0, 1.0, 2.5, 1e3, -1e-300, 5e-324, f64::NAN, f64::INFINITY, f64::NEG_INFINITY, -3.0, 5.0, 7.0, 7.5];
        for c in [0u64, 1, 2, 1 << 20, (1 << 21) - 1, 1 << 21, (1 << 32) - 1, 1 << 32] {
            for scale in [1.0 / (1u64 << 21) as f64, 2.5 / (1u64 << 21) as f64, 8.0 / (1u64 << 32) as f64] {
                let x = c as f64 * scale;
                edge.extend([x, x.next_up(), x.next_down(), x - 3.0, (x - 3.0).next_down(), x + 7.0]);
            }
        }
        let check = |p: [f64; 3]| {
            assert_eq!(q3.key_vectorisable(&p), q3.key(&p), "3D {p:?}");
            let p2 = [p[0], p[1]];
            assert_eq!(q2.key_vectorisable(&p2), q2.key(&p2), "2D {p2:?}");
        };
        for &a in &edge {
            for &b in &edge {
                check([a, b, a]);
                check([b, a, 1e3 * a]);
            }
        }
        for _ in 0..20000 {
            let u = |s: &mut u64| (lcg(s) as f64 / (1u64 << 53) as f64) * 1.2 - 0.1;
            check([u(&mut s), 2.5 * u(&mut s), 1e3 * u(&mut s)]);
        }
    }

    #[test]
    fn quantizer_keeps_points_in_range() {
        let q = Quantizer::<3>::new(&Domain::Periodic([1.0, 2.0, 3.0]), &Bounds::EMPTY);
        assert_eq!(q.key(&[0.0; 3]), 0);
        let top = q.key(&[f64::from_bits(1.0f64.to_bits() - 1), 2.0 - 1e-16, 3.0 - 1e-15]);
        assert_eq!(top, (1u64 << 63) - 1);
        let b = Bounds { lo: [5.0, 5.0], hi: [5.0, 6.0] };
        let q2 = Quantizer::<2>::over(&b);
        assert_eq!(q2.key(&[5.0, 5.0]), 0);
        assert!(q2.key(&[5.0, 6.0]) > 0);
    }
}
