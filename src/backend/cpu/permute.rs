//! Per-query values written in z-order, moved to the caller's input order afterwards
//! through the memory of buffers the job is done with (the positions, once the walk is
//! over).
//!
//! Written straight from the leaf pass, a small row (k = 1: an index and a distance)
//! lands on a random line of each output array: a line fetched and written back per
//! value, a third of a k = 1 walk. Here the z-ordered values are first dealt out to
//! partitions of the input order (a few hundred sequential streams), then each
//! partition is written within its own cache-sized region of the arrays.

use rayon::prelude::*;

use super::par::{DisjointSlice, chunk_ranges};
use crate::base::Elem;

/// Below this many rows the leaf pass writes the arrays in input order itself (they
/// stay in cache there).
pub(crate) const MIN_ROWS: usize = 1 << 16;

/// Input rows per partition, at least (2^14: 128 KiB of 8-byte values, within L2; 2^12 and
/// 2^16 measured alike at 1e6 points, 2^12 12% slower at 4e6); more above 2^26
/// rows, so that at most 2^12 streams are written at once.
const PART_ROWS_LOG2: u32 = 14;
const MAX_PARTS_LOG2: u32 = 12;

/// Rows per block of the deal: their slots are kept in a stack array, read once per array.
const BLOCK: usize = 2048;

/// Whether the lanes of a move fit into `columns` spent columns of `col_bytes`-byte
/// elements (n each): the deal's u32 lane, then one lane per array of the given value
/// bytes (4 or 8). An 8-byte lane takes an 8-byte column; 4-byte lanes share one, two
/// to a column.
pub(crate) fn fits(columns: usize, col_bytes: usize, lane_bytes: &[usize]) -> bool {
    let eight = lane_bytes.iter().filter(|&&b| b == 8).count();
    let four = 1 + lane_bytes.iter().filter(|&&b| b == 4).count();
    if lane_bytes.iter().any(|&b| b != 4 && b != 8) {
        return false;
    }
    match col_bytes {
        8 => eight + four.div_ceil(2) <= columns,
        4 => eight == 0 && four <= columns,
        _ => false,
    }
}

/// The lanes `fits` counted, cut from the spent columns.
pub(crate) struct Lanes<'c> {
    eight: Vec<&'c mut [u32]>,
    four: Vec<&'c mut [u32]>,
}

impl<'c> Lanes<'c> {
    /// Lanes of `n` values from `cols`: the first `eight` columns (of 8-byte elements)
    /// whole, the rest as `n`-word lanes.
    pub(crate) fn new<T: Elem>(cols: &'c mut [Vec<T>], n: usize, eight: usize) -> Self {
        assert!(cols.iter().all(|c| c.len() >= n) && (eight == 0 || size_of::<T>() == 8));
        let (c8, c4) = cols.split_at_mut(eight.min(cols.len()));
        let eight = c8.iter_mut().map(|c| words(&mut c[..n])).collect();
        let four = c4.iter_mut().flat_map(|c| words(&mut c[..n]).chunks_exact_mut(n.max(1))).collect();
        Self { eight, four }
    }

    /// A lane of `n` values of `L` (4 or 8 bytes), if one is left.
    pub(crate) fn take<L: Elem>(&mut self) -> Option<&'c mut [L]> {
        let w = match size_of::<L>() {
            4 => self.four.pop()?,
            8 => self.eight.pop()?,
            _ => return None,
        };
        assert!(align_of::<L>() <= size_of::<L>() && (w.as_ptr() as usize).is_multiple_of(align_of::<L>()));
        let len = w.len() * 4 / size_of::<L>();
        // SAFETY: the same bytes, aligned for L (checked), every bit pattern a value of L
        // (`Elem`: plain data); the borrow of the column is carried over.
        Some(unsafe { std::slice::from_raw_parts_mut(w.as_mut_ptr().cast::<L>(), len) })
    }
}

/// The bytes of `col` as u32 words.
fn words<T: Elem>(col: &mut [T]) -> &mut [u32] {
    assert!(size_of::<T>().is_multiple_of(4) && align_of::<T>() >= 4);
    let len = std::mem::size_of_val(col) / 4;
    // SAFETY: the same bytes, aligned for u32, every bit pattern a u32; the borrow of
    // `col` is carried over.
    unsafe { std::slice::from_raw_parts_mut(col.as_mut_ptr().cast::<u32>(), len) }
}

/// One array moved: its z-ordered values dealt to their slots in a lane, then collected
/// into input order.
pub(crate) trait Move: Sync {
    /// The values of z-ordered rows `z0..` to their `slots`.
    fn deal(&self, z0: usize, slots: &[u32]);
    /// The values of slots `s0..` to their input rows `ids`.
    fn collect(&self, s0: usize, ids: &[u32]);
}

/// An array of one value per row (`E`), and its lane (`L`: `enc` stores a value, `dec`
/// reads it back).
pub(crate) struct Moved<'a, E, L, F, G> {
    rows: DisjointSlice<'a, E>,
    lane: DisjointSlice<'a, L>,
    enc: F,
    dec: G,
}

impl<'a, E: Elem, L: Elem, F: Fn(E) -> L + Sync, G: Fn(L) -> E + Sync> Moved<'a, E, L, F, G> {
    pub(crate) fn new(rows: &'a mut [E], lane: &'a mut [L], enc: F, dec: G) -> Self {
        assert!(lane.len() >= rows.len());
        Self { rows: DisjointSlice::new(rows), lane: DisjointSlice::new(lane), enc, dec }
    }
}

impl<E: Elem, L: Elem, F: Fn(E) -> L + Sync, G: Fn(L) -> E + Sync> Move for Moved<'_, E, L, F, G> {
    #[inline(never)]
    fn deal(&self, z0: usize, slots: &[u32]) {
        for (i, &s) in slots.iter().enumerate() {
            // SAFETY: the deal reads each row once and writes each slot once (slots are
            // a permutation); the collection, which writes the rows, comes after it.
            unsafe { self.lane.write(s as usize, (self.enc)(self.rows.read(z0 + i))) };
        }
    }
    #[inline(never)]
    fn collect(&self, s0: usize, ids: &[u32]) {
        for (i, &r) in ids.iter().enumerate() {
            // SAFETY: ids are a permutation: each row written once, each slot read by
            // its partition alone.
            unsafe { self.rows.write(r as usize, (self.dec)(self.lane.read(s0 + i))) };
        }
    }
}

/// Moves every array of `arrays` (n values each, row z in z-order) to input order: the
/// value of row z to row `orig[z]` (a permutation of `0..n`), with `ids` (n) as the
/// deal's own lane.
pub(crate) fn to_input_order(orig: &[u32], ids: &mut [u32], arrays: &[&dyn Move]) {
    let n = orig.len();
    assert!(ids.len() >= n && n <= u32::MAX as usize);
    let ids = &mut ids[..n];
    let bits = usize::BITS - n.saturating_sub(1).leading_zeros();
    let shift = PART_ROWS_LOG2.max(bits.saturating_sub(MAX_PARTS_LOG2));
    let np = (n >> shift) + 1;
    let chunks = chunk_ranges(n, 4 * rayon::current_num_threads());
    let hists: Vec<Vec<u32>> = chunks
        .par_iter()
        .map(|r| {
            let mut h = vec![0u32; np];
            for &o in &orig[r.clone()] {
                h[(o >> shift) as usize] += 1;
            }
            h
        })
        .collect();
    // Each chunk's first slot in each partition: partitions in input order, chunks
    // (z-order) within one.
    let mut offs = vec![vec![0u32; np]; chunks.len()];
    let mut starts = Vec::with_capacity(np + 1);
    let mut sum = 0u32;
    for p in 0..np {
        starts.push(sum as usize);
        for c in 0..chunks.len() {
            offs[c][p] = sum;
            sum += hists[c][p];
        }
    }
    starts.push(n);
    {
        let di = DisjointSlice::new(&mut *ids);
        chunks.par_iter().zip(offs.par_iter_mut()).for_each(|(r, off)| {
            let mut slots = [0u32; BLOCK];
            let mut z0 = r.start;
            while z0 < r.end {
                let z1 = (z0 + BLOCK).min(r.end);
                for (s, &o) in slots.iter_mut().zip(&orig[z0..z1]) {
                    let p = (o >> shift) as usize;
                    *s = off[p];
                    off[p] += 1;
                    // SAFETY: the prefix sums give every (chunk, partition) its own slots.
                    unsafe { di.write(*s as usize, o) };
                }
                for a in arrays {
                    a.deal(z0, &slots[..z1 - z0]);
                }
                z0 = z1;
            }
        });
    }
    let ids: &[u32] = ids;
    starts.par_windows(2).for_each(|w| {
        for a in arrays {
            a.collect(w[0], &ids[w[0]..w[1]]);
        }
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::geom::xorshift;

    /// Values land where a plain scatter puts them, for permutations of many sizes (one
    /// partition, several, the last partial; across several deal blocks), with i64
    /// values in u32 lanes (-1 as u32::MAX) and f64 / f32 values in lanes of their own,
    /// cut from f64 and f32 columns.
    #[test]
    fn moved_values_equal_a_plain_scatter() {
        let mut next = xorshift(0x2545_f491_4f6c_dd1d);
        for &n in &[1usize, 2, 7, 2049, 4095, 4096, 4097, 50_000, 300_001] {
            // A random permutation (Fisher-Yates).
            let mut orig: Vec<u32> = (0..n as u32).collect();
            for i in (1..n).rev() {
                orig.swap(i, (next() % (i as u64 + 1)) as usize);
            }
            let idx: Vec<i64> = (0..n).map(|i| if i % 5 == 0 { -1 } else { (next() % n as u64) as i64 }).collect();
            let d64: Vec<f64> = (0..n).map(|_| next() as f64 * 1e-9).collect();
            let d32: Vec<f32> = d64.iter().map(|&v| v as f32).collect();
            // f64 columns: the u32 lanes of the deal and of the indices share one, the
            // distances take one (one column left over). f32 columns: one lane each.
            assert!(fits(3, 8, &[4, 8]) && fits(3, 4, &[4, 4]));
            check(&orig, &idx, &d64, vec![vec![f64::NAN; n]; 3], 1, true);
            check(&orig, &idx, &d32, vec![vec![f32::NAN; n]; 3], 0, false);
        }
    }

    /// Moves `idx` and `vals` through lanes cut from `cols` (`eight` whole 8-byte
    /// columns) and compares them with a plain scatter; `spare`: whether a u32 lane is left.
    fn check<C: Elem, V: Elem + PartialEq>(orig: &[u32], idx: &[i64], vals: &[V], mut cols: Vec<Vec<C>>, eight: usize, spare: bool) {
        let n = orig.len();
        let (want_idx, want_vals) = (scatter(orig, idx), scatter(orig, vals));
        let mut lanes = Lanes::new(&mut cols, n, eight);
        let ids = lanes.take::<u32>().unwrap();
        let (mut a, mut b) = (idx.to_vec(), vals.to_vec());
        let (la, lb) = (lanes.take::<u32>().unwrap(), lanes.take::<V>().unwrap());
        assert_eq!(lanes.take::<u32>().is_some(), spare);
        {
            let ma = Moved::new(&mut a, la, |v: i64| v as u32, |l: u32| if l == u32::MAX { -1 } else { l as i64 });
            let mb = Moved::new(&mut b, lb, |v| v, |v| v);
            to_input_order(orig, ids, &[&ma, &mb]);
        }
        let what = format!("n {n}, {}-byte columns", size_of::<C>());
        assert!(a == want_idx, "{what}: indices");
        assert!(b == want_vals, "{what}: values");
    }

    /// Row i of `z` to row `orig[i]`.
    fn scatter<V: Copy>(orig: &[u32], z: &[V]) -> Vec<V> {
        let mut w = z.to_vec();
        for (i, &o) in orig.iter().enumerate() {
            w[o as usize] = z[i];
        }
        w
    }

    #[test]
    fn fits_counts_the_lanes() {
        // f64 columns, 3D: the deal's u32 lane shares a column with another.
        assert!(fits(3, 8, &[4, 8]));
        assert!(fits(3, 8, &[4, 8, 8]));
        assert!(fits(3, 8, &[4, 4, 4, 8]));
        assert!(!fits(3, 8, &[4, 8, 8, 8]));
        assert!(!fits(3, 8, &[8, 8, 8]));
        assert!(fits(2, 8, &[4, 8]));
        assert!(!fits(2, 8, &[4, 8, 8]));
        // f32 columns: one u32 lane each, no 8-byte lane.
        assert!(fits(3, 4, &[4, 4]));
        assert!(!fits(3, 4, &[4, 4, 4]));
        assert!(!fits(3, 4, &[8]));
        assert!(!fits(2, 4, &[4, 4]));
        assert!(!fits(3, 8, &[2]));
    }
}
