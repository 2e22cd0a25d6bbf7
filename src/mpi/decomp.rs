//! Domain decomposition of a distributed call: the ranks agree on the domain (the periodic
//! box, or the global bounding box), cut the Morton curve into one contiguous key range
//! per rank with a global histogram sample sort, and can then tell, for any point and
//! radius, which other ranks' ranges come within that radius.
//!
//! Splitters: every rank histograms its keys in 4096 bins over the current interval of
//! each splitter (a whole Morton cell); the bins are summed over ranks and each splitter
//! moves to the bin edge nearest its target count. A splitter stops at the first (the
//! coarsest) cell edge that leaves its rank within `BALANCE` of N/P particles, otherwise it
//! zooms into the bin holding its target. So rank ranges are unions of the coarsest cells
//! the balance allows, and no cell of the coarsest tree plane straddles two ranks unless
//! balance needs it. Particles with one key never split across ranks.

use rayon::prelude::*;

use crate::geom::morton::{Quantizer, bits_per_dim, morton, unmorton};
use crate::input::{Bounds, Domain};

use super::comm::Comm;

/// Allowed imbalance of a rank's particle count, relative to N/P.
const BALANCE: f64 = 1.0 / 256.0;
/// log2 of the histogram bins per splitter and round.
const BIN_BITS: u32 = 12;

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

/// The domain's bounding box agreed by all ranks (empty ranks contribute nothing).
pub(crate) fn global_bounds<const D: usize>(comm: &Comm, local: &Bounds<D>) -> Bounds<D> {
    let mut v = Vec::with_capacity(2 * D);
    v.extend_from_slice(&local.lo);
    v.extend(local.hi.iter().map(|h| -h));
    let g = comm.min_f64(&v);
    Bounds { lo: std::array::from_fn(|d| g[d]), hi: std::array::from_fn(|d| -g[D + d]) }
}

impl<const D: usize> Decomp<D> {
    /// Collective. `keys` are this rank's keys under `quant`; `total` is the global count.
    pub fn build(comm: &Comm, pool: &rayon::ThreadPool, domain: &Domain<D>, quant: Quantizer<D>, keys: &[u64], total: u64) -> Self {
        let key_end: u128 = 1u128 << (D as u32 * bits_per_dim(D));
        let mut starts = vec![0u128];
        starts.extend(splitters::<D>(comm, pool, keys, total, key_end));
        starts.push(key_end);
        for r in 1..starts.len() {
            starts[r] = starts[r].max(starts[r - 1]);
        }
        let box_len = domain.box_lengths();
        let regions = (0..comm.size()).map(|r| region_boxes(&quant, box_len.is_some(), starts[r], starts[r + 1])).collect();
        let half_box = box_len.map_or(f64::INFINITY, |l| l.iter().fold(f64::INFINITY, |a, &b| a.min(b)) / 2.0);
        let interior = interior_table(&quant, box_len.is_some(), &starts);
        Self { quant, box_len, starts, regions, half_box, interior }
    }

    /// Number of ranks.
    pub fn ranks(&self) -> usize {
        self.starts.len() - 1
    }

    /// The rank owning `key`.
    #[inline]
    pub fn owner(&self, key: u64) -> usize {
        self.starts[1..].partition_point(|&s| s <= key as u128)
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

/// The P - 1 interior splitters (see the module docs).
fn splitters<const D: usize>(comm: &Comm, pool: &rayon::ThreadPool, keys: &[u64], total: u64, key_end: u128) -> Vec<u128> {
    struct Split {
        lo: u128,
        width_bits: u32,
        below: u64,
        target: u64,
        at: Option<u128>,
    }
    let p = comm.size() as u64;
    let tol = ((total as f64 / p as f64) * BALANCE).max(1.0) as u64;
    let width_bits = key_end.trailing_zeros();
    let mut sp: Vec<Split> =
        (1..p).map(|j| Split { lo: 0, width_bits, below: 0, target: ((total as u128 * j as u128) / p as u128) as u64, at: None }).collect();
    loop {
        let active: Vec<usize> = (0..sp.len()).filter(|&j| sp[j].at.is_none()).collect();
        // Every rank holds the same splitter state, so all agree on when to stop.
        if active.is_empty() {
            break;
        }
        let nb = 1usize << BIN_BITS;
        let shape: Vec<(u128, u128, u32)> = active
            .iter()
            .map(|&j| {
                let s = &sp[j];
                let shift = s.width_bits.saturating_sub(BIN_BITS);
                (s.lo, s.lo + (1u128 << s.width_bits), shift)
            })
            .collect();
        let hist = pool.install(|| {
            keys.par_chunks(1 << 16)
                .fold(
                    || vec![0u64; active.len() * nb],
                    |mut h, chunk| {
                        for &k in chunk {
                            let k = k as u128;
                            for (a, &(lo, hi, shift)) in shape.iter().enumerate() {
                                if k >= lo && k < hi {
                                    h[a * nb + ((k - lo) >> shift) as usize] += 1;
                                }
                            }
                        }
                        h
                    },
                )
                .reduce(
                    || vec![0u64; active.len() * nb],
                    |mut a, b| {
                        a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                        a
                    },
                )
        });
        let hist = comm.sum_u64(&hist);
        for (a, &j) in active.iter().enumerate() {
            let s = &mut sp[j];
            let (lo, _, shift) = shape[a];
            let bins = (1usize << (s.width_bits - shift)).min(nb);
            let h = &hist[a * nb..a * nb + bins];
            // Edge nearest the target; the bin holding it.
            let mut cum = s.below;
            let (mut best_e, mut best_err) = (0usize, s.target.abs_diff(cum));
            let mut hold = (bins - 1, 0u64);
            let mut held = false;
            for (b, &c) in h.iter().enumerate() {
                if !held && cum + c > s.target {
                    hold = (b, cum);
                    held = true;
                }
                cum += c;
                if s.target.abs_diff(cum) < best_err {
                    best_err = s.target.abs_diff(cum);
                    best_e = b + 1;
                }
            }
            if best_err <= tol || shift == 0 || !held {
                s.at = Some(lo + ((best_e as u128) << shift));
            } else {
                s.lo = lo + ((hold.0 as u128) << shift);
                s.width_bits = shift;
                s.below = hold.1;
            }
        }
    }
    sp.iter().map(|s| s.at.unwrap()).collect()
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
