//! Distributed kNN on any back end: the self-query, or a separate query set. Sources (and
//! queries) move to the owners of their keys; each rank builds one tree over what it owns
//! and answers its own queries from it; a query whose k-th neighbour ball reaches another
//! rank's key range is shipped there, answered from that rank's tree with its sources
//! inside the ball, and merged on the query's owner by (squared distance, global index),
//! the single-rank order (`DistOps::knn_merge`). Only the merged summaries (or lists, when
//! asked for) travel back to the rank that passed the query.

use super::agree::{agree_params, domain_words};
use super::decomp;
use super::route::{Plan, agree_points, back, exchange, forward, plan_of, plan_to};
use super::{CommStats, DistStats, On};
use crate::backend::dist::{DistOps, MergeJob, MergeRows, Reach};
use crate::backend::{Backend, Ingest};
use crate::base::Timings;
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::geom::metric::{Metric, Open, Periodic};
use crate::input::Domain;
use crate::knn::KnnStats;
use crate::pipeline::knn::KnnFields;
use crate::pipeline::{KnnSinks, Prepared};

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

/// Which outputs and fields the call has (the same on every rank).
#[derive(Clone, Copy)]
struct Wanted {
    lists: bool,
    kth: bool,
    density: bool,
    scalar_mean: bool,
    mass: bool,
    scalar: bool,
    /// Some rank passed a k-th distance hint (the others send "no guess").
    hint: bool,
}

/// One point set on its owner: positions and per-row fields, in global index order.
struct Owned<B: DistOps, T: Real, const D: usize> {
    pos: B::Buf<[T; D]>,
    gidx: B::Buf<u64>,
    mass: Option<B::Buf<f64>>,
    scalar: Option<B::Buf<f64>>,
    hint: Option<B::Buf<f64>>,
    plan: Plan<B>,
}

/// Collective kNN. `queries = None`: the self-query. `src_global`: per source, the global
/// index its neighbour entries name (ascending as the sources' own global indices: a
/// subset's caller indices); None: its own. `checks`: this rank's own checks of its
/// arguments, agreed with the others'. Results for this rank's queries in its input
/// order, into `out`; neighbour indices are global source indices.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<B, T, const D: usize, S, Q>(
    on: On<'_>,
    b: &B,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &KnnFields<'_, B>,
    k: usize,
    out: &KnnSinks<'_, B, T>,
    src_global: Option<&B::Buf<u64>>,
    checks: Result<()>,
) -> Result<DistKnnStats>
where
    T: Real,
    S: ?Sized + Sync,
    Q: ?Sized + Sync,
    B: DistOps + Ingest<S, T, D> + Ingest<Q, T, D> + Ingest<<B as Backend>::Buf<[T; D]>, T, D>,
{
    let (comm, pool) = (on.comm, &on.ctx.pool);
    let nq = match queries {
        Some(q) => Ingest::<Q, T, D>::count(b, q),
        None => Ingest::<S, T, D>::count(b, sources),
    };
    let mut want = Wanted {
        lists: out.indices.is_some() || out.distances.is_some(),
        kth: out.kth.is_some(),
        density: out.density.is_some(),
        scalar_mean: out.scalar_mean.is_some(),
        mass: fields.masses.is_some(),
        scalar: fields.scalar.is_some(),
        hint: false,
    };
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
    want.hint = comm.max_u64(&[fields.kth_hint.is_some() as u64])[0] == 1;
    let mut timings = Timings::default();
    let mut cs = CommStats::default();
    let (quant, skeys, qkeys) = timings.time("dist keys", || agree_points(on, b, domain, sources, queries))?;
    let total_sources = skeys.total;
    if total_sources == 0 {
        return Err(Error::NoSources);
    }
    let decomp = timings.time("dist split", || {
        let total = skeys.total + qkeys.as_ref().map_or(0, |q| q.total);
        let sets: Vec<&B::Buf<u64>> = std::iter::once(&skeys.keys).chain(qkeys.as_ref().map(|q| &q.keys)).collect();
        decomp::build(comm, b, domain, quant, &sets, total)
    })?;

    // Sources (and queries) to the owners of their keys.
    let self_hint = want.hint && queries.is_none();
    let own = timings.time("dist exchange", || -> Result<Owned<B, T, D>> {
        let owners = comm.agree(b.key_owners(&skeys.keys, decomp.starts()))?;
        let plan = plan_to(on, b, &owners)?;
        let n = B::len(&plan.rows);
        let cols = comm.agree(pool.install(|| -> Result<_> {
            let pos = b.gather_rows(sources, &plan.rows)?;
            let gidx = match src_global {
                Some(g) => b.gather(g, &plan.rows, 1)?,
                None => b.offset_rows(&plan.rows, skeys.offset)?,
            };
            let mass = fields.masses.filter(|_| want.mass).map(|m| b.gather_scalar(m, &plan.rows)).transpose()?;
            let scalar = fields.scalar.filter(|_| want.scalar).map(|s| b.gather_scalar(s, &plan.rows)).transpose()?;
            let hint = self_hint.then(|| hints(b, fields, &plan.rows, n)).transpose()?;
            Ok((pos, gidx, mass, scalar, hint))
        }))?;
        send_owned(on, b, "decompose", plan, cols, &mut cs)
    })?;
    drop(skeys);
    let own_q = match (queries, qkeys) {
        (Some(q), Some(qk)) => Some(timings.time("dist exchange", || -> Result<Owned<B, T, D>> {
            let owners = comm.agree(b.key_owners(&qk.keys, decomp.starts()))?;
            let plan = plan_to(on, b, &owners)?;
            let n = B::len(&plan.rows);
            let cols = comm.agree(pool.install(|| -> Result<_> {
                let pos = b.gather_rows(q, &plan.rows)?;
                let gidx = b.offset_rows(&plan.rows, qk.offset)?;
                let hint = want.hint.then(|| hints(b, fields, &plan.rows, n)).transpose()?;
                Ok((pos, gidx, None, None, hint))
            }))?;
            send_owned(on, b, "decompose queries", plan, cols, &mut cs)
        })?),
        _ => None,
    };
    let qset = own_q.as_ref().unwrap_or(&own);
    let (ns_own, no) = (B::len(&own.gidx), B::len(&qset.gidx));

    // Local pass: exact among this rank's own sources, one tree.
    let mut rows = comm.agree(alloc_rows(b, no, k, want))?;
    let local_pass = if ns_own == 0 || no == 0 {
        Ok(None)
    } else {
        let sinks = KnnSinks::<B, T> {
            kth_d2: Some(b.out_of(&mut rows.kth_d2)),
            density: rows.density.as_mut().map(|v| b.out_of(v)),
            scalar_mean: rows.smean.as_mut().map(|v| b.out_of(v)),
            indices: rows.idx.as_mut().map(|v| b.out_of(v)),
            d2: rows.d2.as_mut().map(|v| b.out_of(v)),
            ..Default::default()
        };
        let kf = KnnFields::<B> {
            masses: own.mass.as_ref().map(|m| b.scalar_of(m)),
            scalar: own.scalar.as_ref().map(|s| b.scalar_of(s)),
            kth_hint: qset.hint.as_ref().map(|h| b.scalar_of(h)),
        };
        let q = own_q.as_ref().map(|q| &q.pos);
        pool.install(|| crate::pipeline::knn::run(b, domain, &own.pos, q, &kf, k, &on.ctx.config.tree, &sinks)).map(Some)
    };
    // Agreed, so a local failure never strands the other ranks in the next exchange.
    let (local, zs) = match comm.agree(local_pass)? {
        Some((st, zs)) => (st, Some(zs)),
        None => (KnnStats::default(), None),
    };
    timings.stages.extend(local.timings.stages.iter().cloned());
    let self_query = queries.is_none();
    let (imported, exported) = match domain {
        Domain::Open => cross(on, b, &Open, &decomp, &own, qset, zs.as_ref(), k, self_query, &mut rows, &mut timings, &mut cs)?,
        Domain::Periodic(l) => {
            cross(on, b, &Periodic::<T, D>::new(l), &decomp, &own, qset, zs.as_ref(), k, self_query, &mut rows, &mut timings, &mut cs)?
        }
    };
    drop(zs);

    // Results back to the ranks (and input rows) the queries came from.
    timings.time("dist results", || -> Result<()> {
        let plan = &qset.plan;
        let send = |name, v: &B::Buf<T>, w, o: &Option<B::Out<'_, T>>, cs: &mut CommStats| -> Result<()> {
            if let Some(o) = o {
                let r = back(on, b, name, plan, &comm.agree(b.sqrt(v))?, w, cs)?;
                comm.agree(b.scatter_out(o, &plan.rows, &r, w))?;
            }
            Ok(())
        };
        send("results", &rows.kth_d2, 1, &out.kth, &mut cs)?;
        if let Some(d2) = &rows.d2 {
            send("results", d2, k, &out.distances, &mut cs)?;
        }
        for (v, o) in [(&rows.density, &out.density), (&rows.smean, &out.scalar_mean)] {
            if let (Some(v), Some(o)) = (v, o) {
                let r = back(on, b, "results", plan, v, 1, &mut cs)?;
                comm.agree(b.scatter_out(o, &plan.rows, &r, 1))?;
            }
        }
        if let (Some(idx), Some(o)) = (&rows.idx, &out.indices) {
            let r = back(on, b, "results", plan, idx, k, &mut cs)?;
            comm.agree(b.scatter_out(o, &plan.rows, &r, k))?;
        }
        Ok(())
    })?;
    Ok(DistKnnStats {
        local,
        dist: DistStats { timings, comm: cs, owned: ns_own, imported, exported },
        padded_queries: if (total_sources as usize) < k { nq } else { 0 },
    })
}

/// The k-th distance guesses of the rows (`rows`: input rows in plan order); NaN ("no
/// guess") on a rank that has none.
fn hints<B: DistOps>(b: &B, fields: &KnnFields<'_, B>, rows: &B::Buf<u32>, n: usize) -> Result<B::Buf<f64>> {
    match fields.kth_hint {
        Some(h) => b.gather_scalar(h, rows),
        None => b.filled(n, f64::NAN),
    }
}

/// The gathered columns of a plan to their owners.
type Cols<B, T, const D: usize> = (
    <B as Backend>::Buf<[T; D]>,
    <B as Backend>::Buf<u64>,
    Option<<B as Backend>::Buf<f64>>,
    Option<<B as Backend>::Buf<f64>>,
    Option<<B as Backend>::Buf<f64>>,
);

fn send_owned<B: DistOps, T: Real, const D: usize>(
    on: On<'_>,
    b: &B,
    name: &'static str,
    plan: Plan<B>,
    (pos, gidx, mass, scalar, hint): Cols<B, T, D>,
    cs: &mut CommStats,
) -> Result<Owned<B, T, D>> {
    let moved = forward(on, b, name, &plan, &pos, cs)?;
    drop(pos);
    let opt = |c: Option<B::Buf<f64>>, cs: &mut CommStats| c.map(|c| forward(on, b, name, &plan, &c, cs)).transpose();
    Ok(Owned {
        pos: moved,
        gidx: forward(on, b, name, &plan, &gidx, cs)?,
        mass: opt(mass, cs)?,
        scalar: opt(scalar, cs)?,
        hint: opt(hint, cs)?,
        plan,
    })
}

/// Per own query: the local pass's results, completed by the merge. List rows hold local
/// source indices after the local pass and global indices after the merge.
struct Rows<B: Backend, T: Real> {
    kth_d2: B::Buf<T>,
    density: Option<B::Buf<f64>>,
    smean: Option<B::Buf<f64>>,
    idx: Option<B::Buf<i64>>,
    d2: Option<B::Buf<T>>,
}

fn alloc_rows<B: DistOps, T: Real>(b: &B, no: usize, k: usize, want: Wanted) -> Result<Rows<B, T>> {
    let lists = no.checked_mul(k).ok_or(Error::InvalidParameter { name: "k", why: "n_queries * k overflows".into() })?;
    Ok(Rows {
        kth_d2: b.filled(no, T::INFINITY)?,
        density: want.density.then(|| b.zeros(no)).transpose()?,
        smean: want.scalar_mean.then(|| b.zeros(no)).transpose()?,
        idx: want.lists.then(|| b.filled(lists, -1i64)).transpose()?,
        d2: want.lists.then(|| b.filled(lists, T::INFINITY)).transpose()?,
    })
}

/// What crosses ranks after the local pass: the boundary queries to the ranks their balls
/// reach, the answers from those ranks' trees, the merge. Returns the queries received
/// and sent.
#[allow(clippy::too_many_arguments)]
fn cross<B: DistOps, T: Real, const D: usize, M: Metric<T, D>>(
    on: On<'_>,
    b: &B,
    metric: &M,
    decomp: &decomp::Decomp<D>,
    own: &Owned<B, T, D>,
    qset: &Owned<B, T, D>,
    zs: Option<&Prepared<B, T, D>>,
    k: usize,
    self_query: bool,
    rows: &mut Rows<B, T>,
    timings: &mut Timings,
    cs: &mut CommStats,
) -> Result<(usize, usize)> {
    let (comm, pool) = (on.comm, &on.ctx.pool);
    let me = comm.rank();
    // Boundary queries to the ranks their k-balls reach.
    let (pair_rows, pair_counts) =
        timings.time("dist near", || comm.agree(pool.install(|| b.near_pairs(decomp, me, &qset.pos, None, Reach::Squared(&rows.kth_d2)))))?;
    let exported = B::len(&pair_rows);
    let ship = plan_of(on, pair_rows, pair_counts);
    let (rq_pos, rq_r2) = timings.time("dist queries", || -> Result<_> {
        let pos = forward(on, b, "knn queries", &ship, &comm.agree(b.gather(&qset.pos, &ship.rows, 1))?, cs)?;
        let r2 = forward(on, b, "knn queries", &ship, &comm.agree(b.gather(&rows.kth_d2, &ship.rows, 1))?, cs)?;
        Ok((pos, r2))
    })?;
    let nrq = B::len(&rq_r2);
    // Answers from this rank's tree: the sources within each ball, at most k.
    let kr = k.min(B::len(&own.gidx));
    let answers = timings.time("dist serve", || {
        comm.agree(pool.install(|| -> Result<_> {
            let (counts, d2, idx) = match zs {
                Some(zs) if kr > 0 && nrq > 0 => {
                    let (idx, d2) = b.ball_query(metric, zs, &rq_pos, &rq_r2, None, kr)?;
                    let counts = b.row_counts(&idx, kr)?;
                    let (d2, idx) = (b.compact_rows(&d2, &counts, kr)?, b.index_rows(&b.compact_rows(&idx, &counts, kr)?)?);
                    (counts, d2, idx)
                }
                _ => (b.filled(nrq, 0u32)?, b.zeros(0)?, b.zeros(0)?),
            };
            let gidx = b.gather(&own.gidx, &idx, 1)?;
            let mass = own.mass.as_ref().map(|m| b.gather(m, &idx, 1)).transpose()?;
            let scalar = own.scalar.as_ref().map(|s| b.gather(s, &idx, 1)).transpose()?;
            let per_rank = b.segment_sums(&counts, &ship.recv)?;
            Ok((counts, d2, gidx, mass, scalar, per_rank))
        }))
    })?;
    drop((rq_pos, rq_r2));
    let (counts, d2, gidx, mass, scalar, send_lens) = answers;
    let replies = timings.time("dist replies", || -> Result<_> {
        let reply_counts = back(on, b, "knn replies", &ship, &counts, 1, cs)?;
        let recv_lens = comm.agree(b.segment_sums(&reply_counts, &ship.send))?;
        let mv = |v: &B::Buf<_>, cs: &mut CommStats| exchange(on, b, "knn replies", v, &send_lens, &recv_lens, 1, cs);
        let d2 = mv(&d2, cs)?;
        let g = exchange(on, b, "knn replies", &gidx, &send_lens, &recv_lens, 1, cs)?;
        let m = mass.as_ref().map(|v| exchange(on, b, "knn replies", v, &send_lens, &recv_lens, 1, cs)).transpose()?;
        let s = scalar.as_ref().map(|v| exchange(on, b, "knn replies", v, &send_lens, &recv_lens, 1, cs)).transpose()?;
        Ok((reply_counts, d2, g, m, s))
    })?;
    drop((counts, d2, gidx, mass, scalar));
    let (reply_counts, reply_d2, reply_gidx, reply_mass, reply_scalar) = replies;
    timings.time("dist merge", || {
        comm.agree(pool.install(|| -> Result<()> {
            let boundary = b.distinct_rows(&ship.rows, B::len(&qset.gidx))?;
            // This rank's own k best of each boundary query: kept from the local pass when
            // the lists were asked for, else from the local tree (all within its own k-th
            // distance; in a self-query the query is its own local source).
            let nb = B::len(&boundary);
            let (own_idx, own_d2) = match (&rows.idx, &rows.d2, zs) {
                (Some(i), Some(d), _) => (b.gather(i, &boundary, k)?, b.gather(d, &boundary, k)?),
                (_, _, Some(zs)) if nb > 0 => {
                    let qs = b.gather(&qset.pos, &boundary, 1)?;
                    let r2 = b.gather(&rows.kth_d2, &boundary, 1)?;
                    b.ball_query(metric, zs, &qs, &r2, self_query.then_some(&boundary), k)?
                }
                _ => (b.filled(nb * k, -1i64)?, b.filled(nb * k, T::INFINITY)?),
            };
            let job = MergeJob {
                k,
                boundary: &boundary,
                own_idx: &own_idx,
                own_d2: &own_d2,
                pair_rows: &ship.rows,
                reply_counts: &reply_counts,
                reply_d2: &reply_d2,
                reply_gidx: &reply_gidx,
                reply_mass: reply_mass.as_ref(),
                reply_scalar: reply_scalar.as_ref(),
                gidx: &own.gidx,
                mass: own.mass.as_ref(),
                scalar: own.scalar.as_ref(),
                self_query,
            };
            let Rows { kth_d2, density, smean, idx, d2 } = rows;
            b.knn_merge::<T, D>(
                &job,
                MergeRows { kth_d2, density: density.as_mut(), scalar_mean: smean.as_mut(), idx: idx.as_mut(), d2: d2.as_mut() },
            )?;
            // Interior rows of the lists still hold local indices: make them global.
            if let Some(idx) = idx {
                b.globalize_rows(idx, k, &own.gidx, &boundary)?;
            }
            Ok(())
        }))
    })?;
    Ok((nrq, exported))
}
