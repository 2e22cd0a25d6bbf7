//! Which own queries reach other ranks, and shipping them there: each boundary query goes
//! to every rank whose key range its k-th neighbour ball may reach, with its position and
//! squared radius.

use rayon::prelude::*;

use super::super::CommStats;
use super::super::comm::{Comm, Outbox, Reader, put_real};
use super::super::decomp::Decomp;
use crate::error::Result;
use crate::geom::Real;
use crate::input::Domain;

/// The boundary queries of this rank and where they go.
pub(super) struct Shipped {
    /// Per own query: the other ranks its ball reaches (empty for interior queries).
    pub targets: Vec<Vec<u32>>,
    /// The own queries with targets, ascending.
    pub boundary: Vec<u32>,
    /// Query copies sent.
    pub exported: usize,
}

/// Queries other ranks shipped here, in rank order.
pub(super) struct RemoteQueries<T, const D: usize> {
    pub pos: Vec<[T; D]>,
    pub r2: Vec<T>,
    /// Queries from rank r are `from[r] .. from[r + 1]`.
    pub from: Vec<usize>,
}

/// The ranks each own query's ball (radius: its k-th distance in this rank's sources)
/// reaches. The ball is widened by more than the rounding of distances in `T`.
pub(super) fn targets<T: Real, const D: usize>(
    pool: &rayon::ThreadPool,
    decomp: &Decomp<D>,
    domain: &Domain<D>,
    qpos: &[[T; D]],
    kth_d2: &[T],
    me: usize,
) -> Shipped {
    let eps = if std::mem::size_of::<T>() == 4 { f32::EPSILON as f64 } else { f64::EPSILON };
    let span = domain.box_lengths().map_or(0.0, |l| l.iter().fold(0.0f64, |a, &b| a.max(b)));
    let targets: Vec<Vec<u32>> = pool.install(|| {
        qpos.par_iter()
            .zip(kth_d2.par_iter())
            .map_init(Vec::new, |scr, (q, &k2)| {
                let x: [f64; D] = std::array::from_fn(|d| q[d].to_f64());
                let mag = x.iter().fold(span, |a, &b| a.max(b.abs()));
                let r = k2.to_f64().sqrt() * (1.0 + 64.0 * eps) + 64.0 * eps * mag;
                decomp.near_ranks(&x, decomp.quant.key(&x), r, me, scr);
                scr.clone()
            })
            .collect()
    });
    let boundary: Vec<u32> = (0..qpos.len() as u32).filter(|&q| !targets[q as usize].is_empty()).collect();
    let exported = boundary.iter().map(|&q| targets[q as usize].len()).sum();
    Shipped { targets, boundary, exported }
}

/// Sends every boundary query (position, squared radius) to its targets and returns the
/// queries shipped here.
pub(super) fn ship<T: Real, const D: usize>(
    comm: &Comm,
    qpos: &[[T; D]],
    kth_d2: &[T],
    s: &Shipped,
    cs: &mut CommStats,
) -> Result<RemoteQueries<T, D>> {
    let mut sends = vec![Vec::new(); comm.size()];
    for &q in &s.boundary {
        for &t in &s.targets[q as usize] {
            let b = &mut sends[t as usize];
            qpos[q as usize].iter().for_each(|&c| put_real(c, b));
            put_real(kth_d2[q as usize], b);
        }
    }
    let recv = comm.exchange("knn queries", &Outbox::from_parts(sends), cs)?;
    let mut rq = RemoteQueries { pos: Vec::new(), r2: Vec::new(), from: vec![0] };
    for r in 0..comm.size() {
        let mut rd = Reader::new(recv.from(r));
        while !rd.done() {
            rq.pos.push(std::array::from_fn(|_| rd.real::<T>()));
            rq.r2.push(rd.real::<T>());
        }
        rq.from.push(rq.pos.len());
    }
    Ok(rq)
}
