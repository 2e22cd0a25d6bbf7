//! Answering queries shipped from other ranks from this rank's tree: the sources within
//! each query's ball, at most k, by (squared distance, global index).

use super::super::comm::{Outbox, Wire, put_real};
use super::ship::RemoteQueries;
use super::{OwnedSources, Wanted};
use crate::backend::Backend;
use crate::backend::cpu::Cpu;
use crate::geom::Real;
use crate::geom::metric::{Open, Periodic};
use crate::input::Domain;
use crate::pipeline::Prepared;

/// For each query of `qs` (with squared radii `r2`), this rank's sources within the
/// radius, at most `k` (`first[q]` ranked first among equal distances): rows of `k`
/// local source indices (-1 pads) and squared distances.
pub(super) fn ball<T: Real, const D: usize>(
    pool: &rayon::ThreadPool,
    domain: &Domain<D>,
    zs: &Prepared<Cpu, T, D>,
    qs: &[[T; D]],
    r2: &[T],
    first: Option<&[u32]>,
    k: usize,
) -> (Vec<i64>, Vec<T>) {
    let r = pool.install(|| match domain {
        Domain::Open => Cpu.knn_ball_query(&Open, zs, qs, r2, first, k),
        Domain::Periodic(l) => Cpu.knn_ball_query(&Periodic::<T, D>::new(l), zs, qs, r2, first, k),
    });
    r.expect("the CPU ball query cannot fail")
}

/// The replies to the queries in `rq`, one message per asking rank: per query, a u32
/// count, then (squared distance, global index, mass, scalar) per candidate.
pub(super) fn answer<T: Real, const D: usize>(
    pool: &rayon::ThreadPool,
    domain: &Domain<D>,
    zs: Option<&Prepared<Cpu, T, D>>,
    own: &OwnedSources<T, D>,
    rq: &RemoteQueries<T, D>,
    k: usize,
    want: Wanted,
) -> Outbox {
    let kr = k.min(own.pos.len());
    let (idx, d2) = match zs {
        Some(zs) if kr > 0 && !rq.pos.is_empty() => ball(pool, domain, zs, &rq.pos, &rq.r2, None, kr),
        _ => (Vec::new(), Vec::new()),
    };
    let mut replies = vec![Vec::new(); rq.from.len() - 1];
    for (r, b) in replies.iter_mut().enumerate() {
        for q in rq.from[r]..rq.from[r + 1] {
            let row = if kr == 0 || idx.is_empty() { 0..0 } else { q * kr..(q + 1) * kr };
            let m = row.clone().take_while(|&j| idx[j] >= 0).count();
            (m as u32).put(b);
            for j in row.take(m) {
                let s = idx[j] as usize;
                put_real(d2[j], b);
                own.gidx[s].put(b);
                if want.mass {
                    own.mass[s].put(b);
                }
                if want.scalar {
                    own.scalar[s].put(b);
                }
            }
        }
    }
    Outbox::from_parts(replies)
}
