//! Distributed kNN self-query. Each rank answers the queries it owns against its own
//! sources; a query whose k-th neighbour ball reaches another rank's key range is sent
//! there (position and squared radius), and that rank replies with its sources inside the
//! ball (at most k). The owner merges by (squared distance, global index), the single-rank
//! order, so lists are bit-identical to a single-rank call. Only the merged summaries (or
//! lists, when asked for) travel back to the rank that passed the particle.

use rayon::prelude::*;

use super::comm::{Outbox, Reader, Wire, put_real};
use super::{Decomp, Dist, DistStats, On, agree_params, agree_points, domain_words, route_records};
use crate::context::Timings;
use crate::error::{Error, Result};
use crate::knn::{KnnOutput, KnnParams, KnnStats, OutputOrder, ScalarField, Sinks, SourceFields, check_call, run_sinks};
use crate::par::SharedMut;
use crate::points::{Domain, PointSource};
use crate::real::Real;

/// What a distributed kNN call did on this rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DistKnnStats {
    /// The local walk over this rank's own particles.
    pub local: KnnStats,
    pub dist: DistStats,
    /// Of this rank's queries, those with fewer than k neighbours in the whole set.
    pub padded_queries: usize,
}

/// A neighbour candidate: squared distance, global index, mass, scalar.
type Cand<T> = (T, u64, f64, f64);

/// Which outputs the caller asked for (the same on every rank).
#[derive(Clone, Copy)]
struct Wanted {
    lists: bool,
    kth: bool,
    density: bool,
    scalar_mean: bool,
}

impl Dist {
    /// Collective self-query: the k nearest particles (over all ranks) of every particle
    /// this rank passes, written to `out` in this rank's input order. Neighbour indices are
    /// global input indices: rank offset (the particle counts of lower ranks) + index on
    /// that rank. `out.order` must be `OutputOrder::Input`.
    pub fn knn_self<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &SourceFields<'_>,
        params: &KnnParams,
        out: &mut KnnOutput<'_, T>,
    ) -> Result<DistKnnStats> {
        knn_self(self.on(), domain, points, fields, params, out)
    }
}

fn check_inputs<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(dist: On<'_>, points: &P, fields: &SourceFields<'_>, k: usize, out: &KnnOutput<'_, T>) -> Result<()> {
    let n = points.len();
    if k == 0 {
        return Err(Error::InvalidK(0));
    }
    if out.order != OutputOrder::Input || out.permutation.is_some() {
        return Err(Error::InvalidParameter { name: "order", why: "z-order rows are per rank: distributed calls return rows in input order".into() });
    }
    dist.ctx.pool.install(|| check_call(n, n, k, fields, out))
}

pub(crate) fn knn_self<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    dist: On<'_>,
    domain: &Domain<D>,
    points: &P,
    fields: &SourceFields<'_>,
    params: &KnnParams,
    out: &mut KnnOutput<'_, T>,
) -> Result<DistKnnStats> {
    let comm = dist.comm;
    let pool = &dist.ctx.pool;
    let (p, me, n, k) = (comm.size(), comm.rank(), points.len(), params.k);
    let mut timings = Timings::default();
    let mut cs = super::CommStats::default();
    let want = Wanted {
        lists: out.indices.is_some() || out.distances.is_some(),
        kth: out.kth_distance.is_some(),
        density: out.density.is_some(),
        scalar_mean: out.scalar_mean.is_some(),
    };
    let (has_mass, has_scalar) = (fields.masses.is_some(), fields.scalar.is_some());
    let checks = check_inputs(dist, points, fields, k, out);
    if p == 1 {
        // One rank: the serial engine gives the same results without the exchanges.
        checks?;
        let local = dist.ctx.knn_self(domain, points, fields, params, out)?;
        let dist = DistStats { timings: local.timings.clone(), owned: n, ..Default::default() };
        return Ok(DistKnnStats { padded_queries: local.padded_queries, local, dist });
    }
    let mut words = vec![k as u64, has_mass as u64, has_scalar as u64, want.lists as u64, want.kth as u64, want.density as u64, want.scalar_mean as u64];
    words.extend(domain_words(domain));
    agree_params(comm, "kNN", checks.map(|_| words))?;
    let keys = timings.time("dist keys", || agree_points(dist, domain, points, Ok(())))?;
    if keys.total == 0 {
        return Err(Error::NoSources);
    }
    let decomp = timings.time("dist split", || Decomp::build(comm, pool, domain, keys.quant, &keys.keys, keys.total));

    // Every particle to the owner of its key, in input order.
    let owners: Vec<u32> = pool.install(|| keys.keys.par_iter().map(|&k| decomp.owner(k) as u32).collect());
    drop(keys.keys);
    let rec = D * std::mem::size_of::<T>() + 8 + 8 * (has_mass as usize + has_scalar as usize);
    let outbox = pool.install(|| {
        route_records(
            n,
            p,
            me,
            &owners,
            rec,
            |i, w| {
                points.point(i).iter().for_each(|&c| w.real(c));
                w.put(keys.offset + i as u64);
                if let Some(m) = fields.masses {
                    w.put(m.get(i));
                }
                if let Some(s) = fields.scalar {
                    w.put(s.get(i));
                }
            },
            0,
            None::<fn(usize, &mut Vec<u32>)>,
            |_, _| {},
        )
    });
    let recv = timings.time("dist exchange", || comm.exchange("decompose", &outbox, &mut cs))?;
    drop(outbox);
    let mut from_count: Vec<usize> = (0..p).map(|r| u64::get(recv.from(r)) as usize).collect();
    // This rank's own particles that stay: read in place, between lower and higher ranks'.
    let stay: Vec<u32> = (0..n as u32).filter(|&i| owners[i as usize] as usize == me).collect();
    from_count[me] = stay.len();
    let no: usize = from_count.iter().sum();
    let mut own_pos: Vec<[T; D]> = Vec::with_capacity(no);
    let mut own_gidx: Vec<u64> = Vec::with_capacity(no);
    let mut own_mass: Vec<f64> = Vec::with_capacity(if has_mass { no } else { 0 });
    let mut own_scalar: Vec<f64> = Vec::with_capacity(if has_scalar { no } else { 0 });
    for (r, &cnt) in from_count.iter().enumerate() {
        let mut rd = Reader::new(&recv.from(r)[8..]);
        if r == me {
            for &i in &stay {
                let i = i as usize;
                own_pos.push(points.point(i));
                own_gidx.push(keys.offset + i as u64);
                if let Some(m) = fields.masses {
                    own_mass.push(m.get(i));
                }
                if let Some(s) = fields.scalar {
                    own_scalar.push(s.get(i));
                }
            }
            continue;
        }
        for _ in 0..cnt {
            own_pos.push(std::array::from_fn(|_| rd.real::<T>()));
            own_gidx.push(rd.get());
            if has_mass {
                own_mass.push(rd.get());
            }
            if has_scalar {
                own_scalar.push(rd.get());
            }
        }
    }
    drop(recv);
    let no = own_pos.len();
    let own_fields = SourceFields {
        masses: has_mass.then_some(&own_mass as &dyn ScalarField),
        scalar: has_scalar.then_some(&own_scalar as &dyn ScalarField),
    };
    let tree = &dist.ctx.config.tree;

    // Local pass: exact among this rank's own particles.
    let mut kth_d2 = vec![T::INFINITY; no];
    let mut density = vec![0.0f64; if want.density { no } else { 0 }];
    let mut smean = vec![0.0f64; if want.scalar_mean { no } else { 0 }];
    let mut l_idx = vec![-1i64; if want.lists { no * k } else { 0 }];
    let mut l_d2 = vec![T::INFINITY; if want.lists { no * k } else { 0 }];
    let mut local = KnnStats::default();
    if no > 0 {
        let sinks = Sinks {
            kth_d2: Some(SharedMut::new(&mut kth_d2)),
            density: want.density.then(|| SharedMut::new(&mut density)),
            scalar_mean: want.scalar_mean.then(|| SharedMut::new(&mut smean)),
            indices: want.lists.then(|| SharedMut::new(&mut l_idx)),
            d2: want.lists.then(|| SharedMut::new(&mut l_d2)),
            ..Default::default()
        };
        local = comm.agree(pool.install(|| run_sinks(domain, &own_pos, None::<&Vec<[T; D]>>, &own_fields, k, tree, &sinks)))?.0;
        timings.stages.extend(local.timings.stages.iter().cloned());
    } else {
        // Every rank takes part in each agreement, so a local failure never strands the others.
        comm.agree(Ok(()))?;
    }

    // Queries whose k-ball reaches other ranks, and where to send them.
    let eps = if std::mem::size_of::<T>() == 4 { f32::EPSILON as f64 } else { f64::EPSILON };
    let span = domain.box_lengths().map_or(0.0, |l| l.iter().fold(0.0f64, |a, &b| a.max(b)));
    let targets: Vec<Vec<u32>> = timings.time("dist near", || {
        pool.install(|| {
            (0..no)
                .into_par_iter()
                .map_init(Vec::new, |scr, q| {
                    let x: [f64; D] = std::array::from_fn(|d| own_pos[q][d].to_f64());
                    let mag = x.iter().fold(span, |a, &b| a.max(b.abs()));
                    // Distances in T carry rounding: widen the ball by more than it.
                    let r = kth_d2[q].to_f64().sqrt() * (1.0 + 64.0 * eps) + 64.0 * eps * mag;
                    decomp.near_ranks(&x, decomp.quant.key(&x), r, me, scr);
                    scr.clone()
                })
                .collect()
        })
    });
    let boundary: Vec<u32> = (0..no as u32).filter(|&q| !targets[q as usize].is_empty()).collect();

    // Ship the boundary queries; answer the ones shipped here.
    let mut sends = vec![Vec::new(); p];
    for &q in &boundary {
        for &s in &targets[q as usize] {
            let b = &mut sends[s as usize];
            for c in own_pos[q as usize] {
                put_real(c, b);
            }
            put_real(kth_d2[q as usize], b);
        }
    }
    let exported = boundary.iter().map(|&q| targets[q as usize].len()).sum();
    let recv = timings.time("dist queries", || comm.exchange("knn queries", &Outbox::from_parts(std::mem::take(&mut sends)), &mut cs))?;
    let mut rq_pos: Vec<[T; D]> = Vec::new();
    let mut rq_r2: Vec<T> = Vec::new();
    let mut rq_from = vec![0usize; p + 1];
    for r in 0..p {
        let mut rd = Reader::new(recv.from(r));
        while !rd.done() {
            rq_pos.push(std::array::from_fn(|_| rd.real::<T>()));
            rq_r2.push(rd.real::<T>());
        }
        rq_from[r + 1] = rq_pos.len();
    }
    let nr = rq_pos.len();
    let kr = k.min(no);
    // One pass over this rank's sources answers the queries shipped here and, unless the
    // lists were kept from the local pass, gives the own candidates of the boundary
    // queries (one tree build instead of two).
    let own_from_pass = !want.lists && !boundary.is_empty();
    let nb = if own_from_pass { boundary.len() } else { 0 };
    let mut all_idx = vec![-1i64; (nb + nr) * kr];
    let mut all_d2 = vec![T::INFINITY; (nb + nr) * kr];
    let served = if nb + nr > 0 && kr > 0 {
        let mut qs: Vec<[T; D]> = Vec::with_capacity(nb + nr);
        if own_from_pass {
            qs.extend(boundary.iter().map(|&q| own_pos[q as usize]));
        }
        qs.extend_from_slice(&rq_pos);
        let sinks = Sinks { indices: Some(SharedMut::new(&mut all_idx)), d2: Some(SharedMut::new(&mut all_d2)), ..Default::default() };
        pool.install(|| run_sinks(domain, &own_pos, Some(&qs), &SourceFields::default(), kr, tree, &sinks)).map(|st| Some(st.0))
    } else {
        Ok(None)
    };
    if let Some(st) = comm.agree(served)? {
        timings.stages.push(("dist serve", st.timings.total()));
    }
    let (r_idx, r_d2) = (&all_idx[nb * kr..], &all_d2[nb * kr..]);
    // This rank's own candidates of the boundary queries (k per row, padded).
    let (b_idx, b_d2) = if want.lists {
        let mut bi = Vec::with_capacity(boundary.len() * k);
        let mut bd = Vec::with_capacity(boundary.len() * k);
        for &q in &boundary {
            let q = q as usize;
            bi.extend_from_slice(&l_idx[q * k..(q + 1) * k]);
            bd.extend_from_slice(&l_d2[q * k..(q + 1) * k]);
        }
        (bi, bd)
    } else {
        let mut bi = vec![-1i64; boundary.len() * k];
        let mut bd = vec![T::INFINITY; boundary.len() * k];
        for b in 0..nb {
            bi[b * k..b * k + kr].copy_from_slice(&all_idx[b * kr..(b + 1) * kr]);
            bd[b * k..b * k + kr].copy_from_slice(&all_d2[b * kr..(b + 1) * kr]);
        }
        (bi, bd)
    };
    let mut replies = vec![Vec::new(); p];
    for r in 0..p {
        let b = &mut replies[r];
        for q in rq_from[r]..rq_from[r + 1] {
            let row = q * kr..(q + 1) * kr;
            let m = (row.clone()).take_while(|&j| r_idx[j] >= 0 && r_d2[j] <= rq_r2[q]).count();
            (m as u32).put(b);
            for j in row.take(m) {
                let s = r_idx[j] as usize;
                put_real(r_d2[j], b);
                own_gidx[s].put(b);
                if has_mass {
                    own_mass[s].put(b);
                }
                if has_scalar {
                    own_scalar[s].put(b);
                }
            }
        }
    }
    drop(sends);
    let recv = timings.time("dist replies", || comm.exchange("knn replies", &Outbox::from_parts(std::mem::take(&mut replies)), &mut cs))?;
    drop(replies);

    // Merge: the k best of the own and remote candidates, in the single-rank order.
    timings.time("dist merge", || {
        let mut readers: Vec<Reader<'_>> = (0..p).map(|r| Reader::new(recv.from(r))).collect();
        let mut cands: Vec<Cand<T>> = Vec::new();
        for (bq, &q) in boundary.iter().enumerate() {
            let q = q as usize;
            cands.clear();
            for j in 0..k {
                let s = b_idx[bq * k + j];
                if s >= 0 {
                    let s = s as usize;
                    cands.push((b_d2[bq * k + j], own_gidx[s], if has_mass { own_mass[s] } else { 0.0 }, if has_scalar { own_scalar[s] } else { 0.0 }));
                }
            }
            for &s in &targets[q] {
                let rd = &mut readers[s as usize];
                let m = rd.get::<u32>();
                for _ in 0..m {
                    let d2 = rd.real::<T>();
                    let g = rd.get::<u64>();
                    let ms = if has_mass { rd.get::<f64>() } else { 0.0 };
                    let sc = if has_scalar { rd.get::<f64>() } else { 0.0 };
                    cands.push((d2, g, ms, sc));
                }
            }
            cands.sort_unstable_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then(a.1.cmp(&b.1)));
            cands.truncate(k);
            let m = cands.len();
            let kth2 = if m == k { cands[k - 1].0 } else { T::INFINITY };
            kth_d2[q] = kth2;
            if want.lists {
                for j in 0..k {
                    l_idx[q * k + j] = if j < m { cands[j].1 as i64 } else { -1 };
                    l_d2[q * k + j] = if j < m { cands[j].0 } else { T::INFINITY };
                }
            }
            // The same formulas, in the same order, as the single-rank leaf pass (knn::leaf::emit).
            if want.density {
                let mass = if has_mass { cands.iter().map(|c| c.2).sum::<f64>() } else { m as f64 };
                let r = kth2.sqrt().to_f64();
                let vol = if D == 2 { std::f64::consts::PI * r * r } else { 4.0 / 3.0 * std::f64::consts::PI * r * r * r };
                density[q] = if m < k { 0.0 } else { mass / vol };
            }
            if want.scalar_mean {
                smean[q] = cands.iter().map(|c| c.3).sum::<f64>() / m as f64;
            }
        }
    });
    // Interior rows of the lists still hold local indices: make them global.
    if want.lists {
        let bset: std::collections::HashSet<u32> = boundary.iter().copied().collect();
        pool.install(|| {
            l_idx.par_chunks_mut(k).enumerate().for_each(|(q, row)| {
                if !bset.contains(&(q as u32)) {
                    for v in row.iter_mut().filter(|v| **v >= 0) {
                        *v = own_gidx[*v as usize] as i64;
                    }
                }
            })
        });
    }

    // Results back to the ranks (and input rows) the particles came from.
    let mut back = vec![Vec::new(); p];
    let mut q = 0;
    for (r, &cnt) in from_count.iter().enumerate() {
        let b = &mut back[r];
        for _ in 0..cnt {
            if want.kth {
                put_real(kth_d2[q].sqrt(), b);
            }
            if want.density {
                density[q].put(b);
            }
            if want.scalar_mean {
                smean[q].put(b);
            }
            if want.lists {
                for j in 0..k {
                    l_idx[q * k + j].put(b);
                    put_real(l_d2[q * k + j].sqrt(), b);
                }
            }
            q += 1;
        }
    }
    let recv = timings.time("dist results", || comm.exchange("results", &Outbox::from_parts(std::mem::take(&mut back)), &mut cs))?;
    drop(back);
    let mut readers: Vec<Reader<'_>> = (0..p).map(|r| Reader::new(recv.from(r))).collect();
    for (i, &o) in owners.iter().enumerate() {
        let rd = &mut readers[o as usize];
        if want.kth {
            out.kth_distance.as_deref_mut().unwrap()[i] = rd.real();
        }
        if want.density {
            out.density.as_deref_mut().unwrap()[i] = rd.get();
        }
        if want.scalar_mean {
            out.scalar_mean.as_deref_mut().unwrap()[i] = rd.get();
        }
        if want.lists {
            for j in 0..k {
                let g: i64 = rd.get();
                let d: T = rd.real();
                if let Some(o) = out.indices.as_deref_mut() {
                    o[i * k + j] = g;
                }
                if let Some(o) = out.distances.as_deref_mut() {
                    o[i * k + j] = d;
                }
            }
        }
    }
    Ok(DistKnnStats {
        local,
        dist: DistStats { timings, comm: cs, owned: no, imported: nr, exported },
        padded_queries: if (keys.total as usize) < k { n } else { 0 },
    })
}
