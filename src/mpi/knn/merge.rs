//! Merging on a query's owner: its own k best and every reply, cut to the k best by
//! (squared distance, global index) — the single-rank order — then the reductions with
//! the same formulas and summation order as the single-rank leaf pass.

use rayon::prelude::*;

use super::super::comm::{Reader, Received};
use super::ship::Shipped;
use super::{OwnedSources, Rows, Wanted, answer::ball};
use crate::backend::cpu::Cpu;
use crate::geom::Real;
use crate::input::Domain;
use crate::knn::reduce;
use crate::pipeline::Prepared;

/// A neighbour candidate: squared distance, global index, mass, scalar.
type Cand<T> = (T, u64, f64, f64);

#[allow(clippy::too_many_arguments)]
pub(super) fn merge<T: Real, const D: usize>(
    pool: &rayon::ThreadPool,
    domain: &Domain<D>,
    zs: Option<&Prepared<Cpu, T, D>>,
    own: &OwnedSources<T, D>,
    own_q: &[[T; D]],
    s: &Shipped,
    recv: &Received,
    k: usize,
    want: Wanted,
    self_query: bool,
    rows: &mut Rows<T>,
) {
    let nb = s.boundary.len();
    // This rank's own k best of each boundary query: kept from the local pass when the
    // lists were asked for, else from the local tree (all within the own k-th distance).
    let (b_idx, b_d2): (Vec<i64>, Vec<T>) = if want.lists {
        s.boundary.iter().flat_map(|&q| (q as usize * k..(q as usize + 1) * k).map(|j| (rows.idx[j], rows.d2[j]))).unzip()
    } else {
        match zs {
            Some(zs) => {
                let qs: Vec<[T; D]> = s.boundary.iter().map(|&q| own_q[q as usize]).collect();
                let r2: Vec<T> = s.boundary.iter().map(|&q| rows.kth_d2[q as usize]).collect();
                // In a self-query the query is its own local source (its own first neighbour).
                let me: Option<Vec<u32>> = self_query.then(|| s.boundary.clone());
                ball(pool, domain, zs, &qs, &r2, me.as_deref(), k)
            }
            None => (vec![-1; nb * k], vec![T::INFINITY; nb * k]),
        }
    };
    let mut readers: Vec<Reader<'_>> = (0..recv.offsets.len() - 1).map(|r| Reader::new(recv.from(r))).collect();
    let mut is_boundary = vec![false; own_q.len()];
    let mut cands: Vec<Cand<T>> = Vec::new();
    for (bq, &q) in s.boundary.iter().enumerate() {
        let q = q as usize;
        is_boundary[q] = true;
        cands.clear();
        for j in bq * k..(bq + 1) * k {
            if b_idx[j] >= 0 {
                let u = b_idx[j] as usize;
                cands.push((b_d2[j], own.gidx[u], if want.mass { own.mass[u] } else { 0.0 }, if want.scalar { own.scalar[u] } else { 0.0 }));
            }
        }
        for &t in &s.targets[q] {
            let rd = &mut readers[t as usize];
            let m = rd.get::<u32>();
            for _ in 0..m {
                let d2 = rd.real::<T>();
                let g = rd.get::<u64>();
                let ms = if want.mass { rd.get::<f64>() } else { 0.0 };
                let sc = if want.scalar { rd.get::<f64>() } else { 0.0 };
                cands.push((d2, g, ms, sc));
            }
        }
        // (distance², not self, global index): in a self-query a point comes first.
        let me = if self_query { own.gidx[q] } else { u64::MAX };
        cands.sort_unstable_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then((a.1 != me).cmp(&(b.1 != me))).then(a.1.cmp(&b.1)));
        cands.truncate(k);
        let m = cands.len();
        let kth2 = if m == k { cands[k - 1].0 } else { T::INFINITY };
        rows.kth_d2[q] = kth2;
        if want.lists {
            for j in 0..k {
                rows.idx[q * k + j] = if j < m { cands[j].1 as i64 } else { -1 };
                rows.d2[q * k + j] = if j < m { cands[j].0 } else { T::INFINITY };
            }
        }
        if want.density {
            let mass = want.mass.then(|| cands.iter().map(|c| c.2).sum::<f64>());
            rows.density[q] = reduce::density::<D>(mass, m, k, kth2.sqrt().to_f64());
        }
        if want.scalar_mean {
            rows.smean[q] = reduce::mean(cands.iter().map(|c| c.3));
        }
    }
    // Interior rows of the lists still hold local indices: make them global.
    if want.lists {
        pool.install(|| {
            rows.idx.par_chunks_mut(k).zip(is_boundary.par_iter()).for_each(|(row, &b)| {
                if !b {
                    for v in row.iter_mut().filter(|v| **v >= 0) {
                        *v = own.gidx[*v as usize] as i64;
                    }
                }
            })
        });
    }
}
