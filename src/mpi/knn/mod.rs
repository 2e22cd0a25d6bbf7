//! Distributed kNN: the self-query, or a separate query set. Sources (and queries) move to
//! the owners of their keys; each rank builds one tree over what it owns and answers its
//! own queries from it; a query whose k-th neighbour ball reaches another rank's key range
//! is shipped there (`ship`), answered from that rank's tree with its sources inside the
//! ball (`answer`), and merged on the query's owner by (squared distance, global index),
//! the single-rank order (`merge`). Only the merged summaries (or lists, when asked for)
//! travel back to the rank that passed the query.

mod answer;
mod merge;
mod ship;

use rayon::prelude::*;

use super::agree::{agree_params, domain_words};
use super::comm::SliceWriter;
use super::decomp::Decomp;
use super::route::{Arrival, Arrivals, Returned, agree_points, for_each_input, route, send_back};
use super::{CommStats, DistStats, On};
use crate::api::Timings;
use crate::backend::cpu::{Cpu, DisjointSlice};
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::input::{Domain, PointSource, ScalarField};
use crate::knn::{KnnOutput, KnnParams, KnnStats, OutputOrder, SourceFields, check_call};
use crate::pipeline::KnnSinks;
use crate::pipeline::knn::KnnFields;

/// What a distributed kNN call did on this rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DistKnnStats {
    /// The local pass over this rank's own sources and queries.
    pub local: KnnStats,
    /// The distribution layer's stages and communication.
    pub dist: DistStats,
    /// Of this rank's queries, those with fewer than k neighbours in the whole set.
    pub padded_queries: usize,
}

/// Which outputs the caller asked for (the same on every rank).
#[derive(Clone, Copy)]
pub(super) struct Wanted {
    pub lists: bool,
    pub kth: bool,
    pub density: bool,
    pub scalar_mean: bool,
    pub mass: bool,
    pub scalar: bool,
    /// Some rank passed `KnnParams::kth_hint` (the others send "no guess").
    pub hint: bool,
}

/// The sources this rank owns after the decomposition, in global index order.
pub(super) struct OwnedSources<T, const D: usize> {
    pub pos: Vec<[T; D]>,
    pub gidx: Vec<u64>,
    pub mass: Vec<f64>,
    pub scalar: Vec<f64>,
    /// The k-th distance guesses of the owned points (self-queries).
    pub hint: Vec<f64>,
}

/// Per owned query: the results of the local pass, completed by the merge. List rows hold
/// local source indices after the local pass and global indices after `to_global`.
pub(super) struct Rows<T> {
    pub kth_d2: Vec<T>,
    pub density: Vec<f64>,
    pub smean: Vec<f64>,
    pub idx: Vec<i64>,
    pub d2: Vec<T>,
}

/// Collective kNN. `queries = None`: the self-query. Results for this rank's queries in
/// its input order; neighbour indices are global source indices.
pub(crate) fn run<T, const D: usize, S, Q>(
    on: On<'_>,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &SourceFields<'_>,
    params: &KnnParams,
    out: &mut KnnOutput<'_, T>,
) -> Result<DistKnnStats>
where
    T: Real,
    S: PointSource<T, D> + ?Sized,
    Q: PointSource<T, D> + ?Sized,
{
    let (comm, pool) = (on.comm, &on.ctx.pool);
    let (p, me, k) = (comm.size(), comm.rank(), params.k);
    let (ns, nq) = (sources.len(), queries.map_or(sources.len(), |q| q.len()));
    let mut want = Wanted {
        lists: out.indices.is_some() || out.distances.is_some(),
        kth: out.kth_distance.is_some(),
        density: out.density.is_some(),
        scalar_mean: out.scalar_mean.is_some(),
        mass: fields.masses.is_some(),
        scalar: fields.scalar.is_some(),
        hint: false,
    };
    let checks = (|| -> Result<()> {
        if out.order != OutputOrder::Input || out.permutation.is_some() {
            return Err(Error::InvalidParameter {
                name: "order",
                why: "z-order rows are per rank: distributed calls return rows in input order".into(),
            });
        }
        pool.install(|| check_call(ns, nq, params, fields, out))
    })();
    if p == 1 {
        // One rank: the serial engine gives the same results without the exchanges.
        checks?;
        let local = match queries {
            None => on.ctx.knn_self(domain, sources, fields, params, out)?,
            Some(q) => on.ctx.knn(domain, sources, q, fields, params, out)?,
        };
        let dist = DistStats { timings: local.timings.clone(), owned: ns, ..Default::default() };
        return Ok(DistKnnStats { padded_queries: local.padded_queries, local, dist });
    }
    let words = [
        k as u64,
        want.lists as u64,
        want.kth as u64,
        want.density as u64,
        want.scalar_mean as u64,
        want.mass as u64,
        want.scalar as u64,
        queries.is_some() as u64,
        std::mem::size_of::<T>() as u64,
    ];
    agree_params(comm, "kNN", checks.map(|_| words.iter().copied().chain(domain_words(domain)).collect()))?;
    // The hints travel with their points when any rank has them (a rank without sends
    // NaN, "no guess"): they change no result, so the ranks need not agree on them.
    want.hint = comm.max_u64(&[params.kth_hint.is_some() as u64])[0] == 1;
    let hint_of = |i: usize| params.kth_hint.map_or(f64::NAN, |h| h.get(i));
    let mut timings = Timings::default();
    let mut cs = CommStats::default();
    let (quant, skeys, qkeys) = timings.time("dist keys", || agree_points(on, domain, sources, queries, Ok(())))?;
    if skeys.total == 0 {
        return Err(Error::NoSources);
    }
    let decomp = timings.time("dist split", || match &qkeys {
        None => Decomp::build(comm, pool, domain, quant, &skeys.keys, skeys.total),
        Some(qk) => {
            let all: Vec<u64> = skeys.keys.iter().chain(&qk.keys).copied().collect();
            Decomp::build(comm, pool, domain, quant, &all, skeys.total + qk.total)
        }
    });

    // Sources (and queries) to the owners of their keys.
    let owner_of = |keys: &[u64]| -> Vec<u32> { pool.install(|| keys.par_iter().map(|&k| decomp.owner(k) as u32).collect()) };
    let s_owner = owner_of(&skeys.keys);
    let self_hint = want.hint && queries.is_none();
    let rec = D * std::mem::size_of::<T>() + 8 + 8 * (want.mass as usize + want.scalar as usize + self_hint as usize);
    let s_arr = timings.time("dist exchange", || {
        route(
            on,
            "decompose",
            &s_owner,
            rec,
            |i, w| {
                sources.point(i).iter().for_each(|&c| w.real(c));
                w.put(skeys.offset + i as u64);
                if let Some(m) = fields.masses {
                    w.put(m.get(i));
                }
                if let Some(s) = fields.scalar {
                    w.put(s.get(i));
                }
                if self_hint {
                    w.put(hint_of(i));
                }
            },
            0,
            None::<fn(usize, &mut Vec<u32>)>,
            |_, _| {},
            &mut cs,
        )
    })?;
    let own = own_sources(&s_arr, me, sources, skeys.offset, fields, self_hint.then_some(&hint_of), want);
    drop(s_arr.recv);
    let q_route = match queries {
        None => None,
        Some(q) => {
            let q_owner = owner_of(&qkeys.as_ref().unwrap().keys);
            let rec = D * std::mem::size_of::<T>() + 8 * want.hint as usize;
            let arr = timings.time("dist exchange", || {
                let put = |i: usize, w: &mut SliceWriter<'_>| {
                    q.point(i).iter().for_each(|&c| w.real(c));
                    if want.hint {
                        w.put(hint_of(i));
                    }
                };
                route(on, "decompose queries", &q_owner, rec, put, 0, None::<fn(usize, &mut Vec<u32>)>, |_, _| {}, &mut cs)
            })?;
            let mut pos = Vec::with_capacity(arr.owned());
            let mut hint = Vec::with_capacity(if want.hint { arr.owned() } else { 0 });
            arr.visit(me, |rec| match rec {
                Arrival::Stayer(i) => {
                    pos.push(q.point(i));
                    if want.hint {
                        hint.push(hint_of(i));
                    }
                }
                Arrival::Owned(rd) => {
                    pos.push(std::array::from_fn(|_| rd.real::<T>()));
                    if want.hint {
                        hint.push(rd.get());
                    }
                }
                Arrival::Ghost(_) => {}
            });
            Some((q_owner, arr.from_count, arr.stay.len(), pos, hint))
        }
    };
    let own_q: &[[T; D]] = q_route.as_ref().map_or(&own.pos, |q| &q.3);
    let no = own_q.len();

    // Local pass: exact among this rank's own sources, one tree.
    let mut rows = Rows {
        kth_d2: vec![T::INFINITY; no],
        density: vec![0.0; if want.density { no } else { 0 }],
        smean: vec![0.0; if want.scalar_mean { no } else { 0 }],
        idx: vec![-1; if want.lists { no * k } else { 0 }],
        d2: vec![T::INFINITY; if want.lists { no * k } else { 0 }],
    };
    let local_pass = if own.pos.is_empty() || no == 0 {
        Ok(None)
    } else {
        let sinks = KnnSinks::<Cpu, T> {
            kth_d2: Some(DisjointSlice::new(&mut rows.kth_d2)),
            density: want.density.then(|| DisjointSlice::new(&mut rows.density)),
            scalar_mean: want.scalar_mean.then(|| DisjointSlice::new(&mut rows.smean)),
            indices: want.lists.then(|| DisjointSlice::new(&mut rows.idx)),
            d2: want.lists.then(|| DisjointSlice::new(&mut rows.d2)),
            ..Default::default()
        };
        let hint: &Vec<f64> = q_route.as_ref().map_or(&own.hint, |q| &q.4);
        let kf = KnnFields::<Cpu> {
            masses: want.mass.then_some(&own.mass as &dyn ScalarField),
            scalar: want.scalar.then_some(&own.scalar as &dyn ScalarField),
            kth_hint: want.hint.then_some(hint as &dyn ScalarField),
        };
        let q = q_route.as_ref().map(|q| &q.3);
        pool.install(|| crate::pipeline::knn::run(&Cpu, domain, &own.pos, q, &kf, k, &on.ctx.config.tree, &sinks)).map(Some)
    };
    // Agreed, so a local failure never strands the other ranks in the next exchange.
    let local = comm.agree(local_pass)?;
    let (local_stats, zs) = match local {
        Some((st, zs)) => (st, Some(zs)),
        None => (KnnStats::default(), None),
    };
    timings.stages.extend(local_stats.timings.stages.iter().cloned());

    // Boundary queries to the ranks their k-balls reach; answers from this rank's tree.
    let shipped = timings.time("dist near", || ship::targets(pool, &decomp, domain, own_q, &rows.kth_d2, me));
    let rq = timings.time("dist queries", || ship::ship(comm, own_q, &rows.kth_d2, &shipped, &mut cs))?;
    let replies = timings.time("dist serve", || answer::answer(pool, domain, zs.as_ref(), &own, &rq, k, want));
    let recv = timings.time("dist replies", || comm.exchange("knn replies", &replies, &mut cs))?;
    drop(replies);
    timings.time("dist merge", || merge::merge(pool, domain, zs.as_ref(), &own, own_q, &shipped, &recv, k, want, queries.is_none(), &mut rows));
    drop(recv);

    // Results back to the ranks (and input rows) the queries came from.
    let (owners, from_count): (&[u32], &[usize]) = match &q_route {
        None => (&s_owner, &s_arr.from_count),
        Some(q) => (&q.0, &q.1),
    };
    let put = |u: usize, b: &mut Vec<u8>| {
        use super::comm::{Wire, put_real};
        if want.kth {
            put_real(rows.kth_d2[u].sqrt(), b);
        }
        if want.density {
            rows.density[u].put(b);
        }
        if want.scalar_mean {
            rows.smean[u].put(b);
        }
        if want.lists {
            for j in u * k..(u + 1) * k {
                rows.idx[j].put(b);
                put_real(rows.d2[j].sqrt(), b);
            }
        }
    };
    let recv = timings.time("dist results", || send_back(on, "results", from_count, put, &mut cs))?;
    timings.time("dist output", || {
        for_each_input(me, owners, from_count, &recv, |i, from| write_row(i, from, &rows, k, want, out));
    });
    let imported = rq.pos.len();
    Ok(DistKnnStats {
        local: local_stats,
        dist: DistStats { timings, comm: cs, owned: own.pos.len(), imported, exported: shipped.exported },
        padded_queries: if (skeys.total as usize) < k { nq } else { 0 },
    })
}

/// The owned sources in global order: stayers read in place, the rest parsed.
fn own_sources<T: Real, const D: usize, S: PointSource<T, D> + ?Sized>(
    arr: &Arrivals,
    me: usize,
    sources: &S,
    offset: u64,
    fields: &SourceFields<'_>,
    hint: Option<&dyn Fn(usize) -> f64>,
    want: Wanted,
) -> OwnedSources<T, D> {
    let no = arr.owned();
    let mut own = OwnedSources {
        pos: Vec::with_capacity(no),
        gidx: Vec::with_capacity(no),
        mass: Vec::with_capacity(if want.mass { no } else { 0 }),
        scalar: Vec::with_capacity(if want.scalar { no } else { 0 }),
        hint: Vec::with_capacity(if hint.is_some() { no } else { 0 }),
    };
    arr.visit(me, |rec| match rec {
        Arrival::Stayer(i) => {
            own.pos.push(sources.point(i));
            own.gidx.push(offset + i as u64);
            if let Some(m) = fields.masses {
                own.mass.push(m.get(i));
            }
            if let Some(s) = fields.scalar {
                own.scalar.push(s.get(i));
            }
            if let Some(h) = hint {
                own.hint.push(h(i));
            }
        }
        Arrival::Owned(rd) => {
            own.pos.push(std::array::from_fn(|_| rd.real::<T>()));
            own.gidx.push(rd.get());
            if want.mass {
                own.mass.push(rd.get());
            }
            if want.scalar {
                own.scalar.push(rd.get());
            }
            if hint.is_some() {
                own.hint.push(rd.get());
            }
        }
        Arrival::Ghost(_) => {}
    });
    own
}

/// Writes the results of input query `i` into the caller's arrays.
fn write_row<T: Real>(i: usize, from: Returned<'_, '_>, rows: &Rows<T>, k: usize, want: Wanted, out: &mut KnnOutput<'_, T>) {
    match from {
        Returned::Here(u) => {
            if let Some(o) = out.kth_distance.as_deref_mut() {
                o[i] = rows.kth_d2[u].sqrt();
            }
            if let Some(o) = out.density.as_deref_mut() {
                o[i] = rows.density[u];
            }
            if let Some(o) = out.scalar_mean.as_deref_mut() {
                o[i] = rows.smean[u];
            }
            if want.lists {
                for j in 0..k {
                    if let Some(o) = out.indices.as_deref_mut() {
                        o[i * k + j] = rows.idx[u * k + j];
                    }
                    if let Some(o) = out.distances.as_deref_mut() {
                        o[i * k + j] = rows.d2[u * k + j].sqrt();
                    }
                }
            }
        }
        Returned::From(rd) => {
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
    }
}
