//! The key ranges of a distributed call as geometry: rank r owns the Morton keys
//! `starts[r] .. starts[r + 1]`; which rank owns a key, and which ranks' ranges come within
//! a radius of a point (conservatively: boxes covering each range, and a table of coarse
//! cells whose whole neighbourhood one rank owns). The ranges themselves are chosen by the
//! distribution layer (`mpi::decomp`); every back end reads them from here.

use crate::geom::morton::{Quantizer, bits_per_dim, morton, unmorton};

/// The key ranges of all ranks and the spatial boxes covering them.
pub(crate) struct Decomp<const D: usize> {
    pub quant: Quantizer<D>,
    box_len: Option<[f64; D]>,
    /// Rank r owns keys `starts[r] .. starts[r + 1]`; `starts[size]` is the end of key space.
    starts: Vec<u128>,
    /// Per rank: boxes (padded outwards) holding every point its key range can hold.
    regions: Vec<Vec<[[f64; D]; 2]>>,
    /// Half the smallest periodic box length (infinite when open).
    half_box: f64,
    interior: Interior,
}

/// Coarse cells (in Morton order) whose 3^D neighbourhood lies in one rank's key range:
/// a point in such a cell has no other rank within `max_r` (one cell width).
struct Interior {
    shift: u32,
    max_r: f64,
    flags: Vec<bool>,
}

/// Size of the interior table: 2^15 cells (32^3 in 3D, 181^2 in 2D).
const INTERIOR_BITS: u32 = 15;

impl<const D: usize> Decomp<D> {
    /// The ranges `starts` (`starts[0] = 0`, `starts[ranks]` = the end of key space) under
    /// `quant`, in a periodic domain (`box_len`) or an open one.
    pub fn from_starts(quant: Quantizer<D>, box_len: Option<[f64; D]>, starts: Vec<u128>) -> Self {
        let ranks = starts.len() - 1;
        let regions = (0..ranks).map(|r| region_boxes(&quant, box_len.is_some(), starts[r], starts[r + 1])).collect();
        let half_box = box_len.map_or(f64::INFINITY, |l| l.iter().fold(f64::INFINITY, |a, &b| a.min(b)) / 2.0);
        let interior = interior_table(&quant, box_len.is_some(), &starts);
        Self { quant, box_len, starts, regions, half_box, interior }
    }

    /// Per rank, the boxes (lower, upper corner) covering its key range.
    pub fn regions(&self) -> &[Vec<[[f64; D]; 2]>] {
        &self.regions
    }

    /// Half the smallest periodic box length (infinite when open).
    pub fn half_box(&self) -> f64 {
        self.half_box
    }

    /// The periodic box lengths (None: an open domain).
    pub fn box_len(&self) -> Option<[f64; D]> {
        self.box_len
    }

    /// The coarse cells whose whole neighbourhood one rank owns: their keys' shift, the
    /// largest radius the table answers for, and one flag per cell (by key >> shift).
    pub fn interior(&self) -> (u32, f64, &[bool]) {
        (self.interior.shift, self.interior.max_r, &self.interior.flags)
    }

    /// Rank r owns keys `starts()[r] .. starts()[r + 1]`.
    pub fn starts(&self) -> &[u128] {
        &self.starts
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.starts.len() - 1
    }

    /// Fills `out` with the ranks other than `owner` whose key range may hold a point within
    /// `radius` (inclusive) of `p`, a point owned by `owner`. Conservative:
    /// may name a rank holding no such point, never misses one.
    pub fn near_ranks(&self, p: &[f64; D], key: u64, radius: f64, owner: usize, out: &mut Vec<u32>) {
        out.clear();
        let size = self.starts.len() - 1;
        if size == 1 {
            return;
        }
        let r = radius * (1.0 + 1e-9);
        // Most points sit in a coarse cell whose neighbours all belong to their owner.
        if r <= self.interior.max_r && self.interior.flags[(key >> self.interior.shift) as usize] {
            return;
        }
        let bits = bits_per_dim(D);
        let max_cell = (1i64 << bits) - 1;
        let half_box = self.half_box;
        // Cells spanned by the cube [p - r, p + r], padded by two cells for rounding.
        let mut qlo = [0i64; D];
        let mut qhi = [0i64; D];
        #[allow(clippy::neg_cmp_op_on_partial_ord)] // a NaN radius wraps too
        let mut wraps = !(r < half_box);
        for d in 0..D {
            let lo = (self.quant.cell_coord(d, p[d] - r) - 2.0).floor();
            let hi = (self.quant.cell_coord(d, p[d] + r) + 2.0).floor();
            if !(lo.is_finite() && hi.is_finite()) {
                wraps = true;
                break;
            }
            let (mut lo, mut hi) = (lo.max(-(1i64 << 62) as f64) as i64, hi.min((1i64 << 62) as f64) as i64);
            if self.box_len.is_some() {
                wraps |= lo < 0 || hi > max_cell;
            } else {
                lo = lo.clamp(0, max_cell);
                hi = hi.clamp(0, max_cell);
            }
            qlo[d] = lo;
            qhi[d] = hi;
        }
        let mut cand_lo = 0usize;
        let mut cand_hi = size - 1;
        if !wraps {
            // The smallest level at which the cube touches at most two cells per dimension.
            // Morton order grows with every coordinate, so the all-low and all-high corner
            // cells bound the keys of all of those cells; if they lie in the owner's
            // range, no other rank is near.
            let g = (0..D).map(|d| 64 - ((qhi[d] - qlo[d]) as u64).leading_zeros()).max().unwrap();
            let lo_cell: [u64; D] = std::array::from_fn(|d| (qlo[d] as u64) >> g);
            let hi_cell: [u64; D] = std::array::from_fn(|d| (qhi[d] as u64) >> g);
            let klo = (morton(&lo_cell) as u128) << (D as u32 * g);
            let khi = (morton(&hi_cell) as u128 + 1) << (D as u32 * g);
            if klo >= self.starts[owner] && khi <= self.starts[owner + 1] {
                return;
            }
            cand_lo = self.starts[1..].partition_point(|&s| s <= klo);
            cand_hi = self.starts[1..].partition_point(|&s| s < khi).min(size - 1);
        }
        let r2 = r * r;
        for s in cand_lo..=cand_hi {
            if s != owner && self.regions[s].iter().any(|b| self.box_dist2(p, b) <= r2) {
                out.push(s as u32);
            }
        }
    }

    /// Squared distance from `p` to a box (minimum image in a periodic domain).
    fn box_dist2(&self, p: &[f64; D], b: &[[f64; D]; 2]) -> f64 {
        let mut s = 0.0;
        for d in 0..D {
            let gap = |x: f64| (b[0][d] - x).max(x - b[1][d]).max(0.0);
            let g = match self.box_len {
                None => gap(p[d]),
                Some(l) => gap(p[d]).min(gap(p[d] - l[d])).min(gap(p[d] + l[d])),
            };
            s += g * g;
        }
        s
    }
}

fn interior_table<const D: usize>(quant: &Quantizer<D>, periodic: bool, starts: &[u128]) -> Interior {
    let bits = bits_per_dim(D);
    let level = INTERIOR_BITS / D as u32;
    let shift = D as u32 * (bits - level);
    let n1 = 1usize << level;
    let ncell = 1usize << (D as u32 * level);
    const MIXED: u16 = u16::MAX;
    let owner = |k: u128| starts[1..].partition_point(|&s| s <= k);
    // Owner of every cell (plain x-major index), MIXED when a splitter cuts it.
    let plain = |c: &[u64; D]| c.iter().fold(0usize, |a, &x| a * n1 + x as usize);
    let mut own = vec![MIXED; ncell];
    for m in 0..ncell as u64 {
        let lo = (m as u128) << shift;
        let hi = ((m + 1) as u128) << shift;
        let (a, b) = (owner(lo), owner(hi - 1));
        own[plain(&unmorton::<D>(m))] = if a == b { a.min(MIXED as usize - 1) as u16 } else { MIXED };
    }
    // Min and max over each cell's 3^D neighbourhood (separable; wrapped when periodic).
    let filter = |src: &[u16], pick: fn(u16, u16) -> u16| -> Vec<u16> {
        let mut cur = src.to_vec();
        for d in 0..D {
            let stride = n1.pow((D - 1 - d) as u32);
            let next: Vec<u16> = (0..ncell)
                .map(|i| {
                    let c = (i / stride) % n1;
                    let mut v = cur[i];
                    if c > 0 {
                        v = pick(v, cur[i - stride]);
                    } else if periodic {
                        v = pick(v, cur[i + (n1 - 1) * stride]);
                    }
                    if c + 1 < n1 {
                        v = pick(v, cur[i + stride]);
                    } else if periodic {
                        v = pick(v, cur[i - (n1 - 1) * stride]);
                    }
                    v
                })
                .collect();
            cur = next;
        }
        cur
    };
    let lo = filter(&own, u16::min);
    let hi = filter(&own, u16::max);
    let flags = (0..ncell as u64)
        .map(|m| {
            let i = plain(&unmorton::<D>(m));
            own[i] != MIXED && lo[i] == own[i] && hi[i] == own[i]
        })
        .collect();
    // One cell width in every dimension (flat dimensions are all one cell: no limit).
    let width = (0..D).filter_map(|d| Some(quant.cell_lo(d, 1u64 << (bits - level))? - quant.cell_lo(d, 0)?)).fold(f64::INFINITY, f64::min);
    Interior { shift, max_r: width * (1.0 - 1e-6), flags }
}

/// Boxes covering the key range `[a, b)`: its maximal aligned Morton blocks, padded.
fn region_boxes<const D: usize>(quant: &Quantizer<D>, periodic: bool, mut a: u128, b: u128) -> Vec<[[f64; D]; 2]> {
    let bits = bits_per_dim(D);
    let top = 1u64 << bits;
    let mut out = Vec::new();
    while a < b {
        let mut lev = 0u32;
        while lev < bits {
            let w = 1u128 << (D as u32 * (lev + 1));
            if a.is_multiple_of(w) && a + w <= b { lev += 1 } else { break }
        }
        let cell = unmorton::<D>((a >> (D as u32 * lev)) as u64);
        let mut bx = [[0.0; D]; 2];
        for d in 0..D {
            let c0 = cell[d] << lev;
            let c1 = c0 + (1u64 << lev);
            let (lo, hi) = match (quant.cell_lo(d, c0), quant.cell_lo(d, c1)) {
                (Some(lo), Some(hi)) => {
                    let pad = 0.01 * (hi - lo) / (1u64 << lev) as f64 + 1e-12 * (lo.abs() + hi.abs());
                    (lo - pad, hi + pad)
                }
                _ => (f64::NEG_INFINITY, f64::INFINITY),
            };
            // Keys are clamped into the grid in an open domain: the edge cells reach out.
            bx[0][d] = if c0 == 0 && !periodic { f64::NEG_INFINITY } else { lo };
            bx[1][d] = if c1 == top && !periodic { f64::INFINITY } else { hi };
        }
        out.push(bx);
        a += 1u128 << (D as u32 * lev);
    }
    out
}
