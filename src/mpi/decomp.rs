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

use super::comm::Comm;
use crate::backend::DistOps;
use crate::error::Result;
pub(crate) use crate::geom::decomp::Decomp;
use crate::geom::morton::{Quantizer, bits_per_dim};
use crate::input::{Bounds, Domain};

/// Allowed imbalance of a rank's particle count, relative to N/P.
const BALANCE: f64 = 1.0 / 256.0;
/// log2 of the histogram bins per splitter and round.
const BIN_BITS: u32 = 12;

/// The domain's bounding box agreed by all ranks (empty ranks contribute nothing).
pub(crate) fn global_bounds<const D: usize>(comm: &Comm, local: &Bounds<D>) -> Bounds<D> {
    let mut v = Vec::with_capacity(2 * D);
    v.extend_from_slice(&local.lo);
    v.extend(local.hi.iter().map(|h| -h));
    let g = comm.min_f64(&v);
    Bounds { lo: std::array::from_fn(|d| g[d]), hi: std::array::from_fn(|d| -g[D + d]) }
}

/// The decomposition of a call: splitters from a global histogram of every rank's keys
/// (`keys`: this rank's key sets under `quant`; `total`: the global count). Collective.
pub(crate) fn build<B: DistOps, const D: usize>(
    comm: &Comm,
    b: &B,
    domain: &Domain<D>,
    quant: Quantizer<D>,
    keys: &[&B::Buf<u64>],
    total: u64,
) -> Result<Decomp<D>> {
    let key_end: u128 = 1u128 << (D as u32 * bits_per_dim(D));
    let mut starts = vec![0u128];
    starts.extend(splitters(comm, b, keys, total, key_end)?);
    starts.push(key_end);
    for r in 1..starts.len() {
        starts[r] = starts[r].max(starts[r - 1]);
    }
    Ok(Decomp::from_starts(quant, domain.box_lengths(), starts))
}

/// The P - 1 interior splitters (see the module docs).
fn splitters<B: DistOps>(comm: &Comm, b: &B, keys: &[&B::Buf<u64>], total: u64, key_end: u128) -> Result<Vec<u128>> {
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
        let local = (|| -> Result<Vec<u64>> {
            let mut hist = vec![0u64; active.len() * nb];
            for k in keys {
                let h = b.key_histogram(k, &shape, nb)?;
                hist.iter_mut().zip(&h).for_each(|(x, y)| *x += y);
            }
            Ok(hist)
        })();
        // Agreed first: a rank whose histogram failed must not leave the others waiting.
        let hist = comm.agree(local)?;
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
    Ok(sp.iter().map(|s| s.at.unwrap()).collect())
}
