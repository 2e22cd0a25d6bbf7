//! Distributed radius queries on any back end with the radius passes. Sources (and
//! queries) move to the owners of their keys; each rank then sends ghost copies of its
//! sources within the largest radius of the call to every other rank whose key range they
//! may reach (as FoF's ghosts), merges them with its own sources in global index order,
//! and answers its own queries from one tree over both. Sums add in ascending source index
//! on one rank as on many, so every result is the single-rank one bit for bit. Per-query
//! results, and the lists (global source indices), travel back to the query's rank.

use super::agree::{agree_params, domain_words};
use super::decomp;
use super::route::{Plan, agree_points, back, exchange, forward, plan_of, plan_to};
use super::{CommStats, DistStats, On};
use crate::backend::dist::{DistOps, Reach};
use crate::backend::{Backend, Ingest, RadiusPasses};
use crate::base::Timings;
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::input::Domain;
use crate::pipeline::radius::{ListRequest, RadiusFields, RadiusSinks};
use crate::radius::{ListOrder, NeighbourLists, RadiusStats, list_bytes};

/// What a distributed radius call did on this rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DistRadiusStats {
    /// The local pass over this rank's own queries, its own sources and the ghosts.
    pub local: RadiusStats,
    /// The distribution layer's stages and communication (`imported`: ghost sources
    /// received; `exported`: ghost copies sent).
    pub dist: DistStats,
}

/// One point set on its owner, in global index order.
struct Owned<B: DistOps, T: Real, const D: usize> {
    pos: B::Buf<[T; D]>,
    gidx: B::Buf<u64>,
    mass: Option<B::Buf<f64>>,
    scalar: Option<B::Buf<f64>>,
    radius: Option<B::Buf<f64>>,
    plan: Plan<B>,
}

/// Moves the rows of `pts` (with their fields) to the owners of their keys.
#[allow(clippy::too_many_arguments)]
fn to_owners<B, T, const D: usize, P>(
    on: On<'_>,
    b: &B,
    name: &'static str,
    pts: &P,
    keys: &B::Buf<u64>,
    offset: u64,
    global: Option<&B::Buf<u64>>,
    starts: &[u128],
    fields: [Option<B::Scalar<'_>>; 3],
    cs: &mut CommStats,
) -> Result<Owned<B, T, D>>
where
    T: Real,
    P: ?Sized + Sync,
    B: DistOps + Ingest<P, T, D>,
{
    let (comm, pool) = (on.comm, &on.ctx.pool);
    let owners = comm.agree(b.key_owners(keys, starts))?;
    let plan = plan_to(on, b, &owners)?;
    let (pos, gidx, cols) = comm.agree(pool.install(|| -> Result<_> {
        let pos = b.gather_rows(pts, &plan.rows)?;
        let gidx = match global {
            Some(g) => b.gather(g, &plan.rows, 1)?,
            None => b.offset_rows(&plan.rows, offset)?,
        };
        let mut cols = Vec::with_capacity(3);
        for f in fields {
            cols.push(f.map(|f| b.gather_scalar(f, &plan.rows)).transpose()?);
        }
        Ok((pos, gidx, cols))
    }))?;
    let pos = forward(on, b, name, &plan, &pos, cs)?;
    let gidx = forward(on, b, name, &plan, &gidx, cs)?;
    let mut moved = Vec::with_capacity(3);
    for c in cols {
        moved.push(c.map(|c| forward(on, b, name, &plan, &c, cs)).transpose()?);
    }
    let [mass, scalar, radius]: [Option<B::Buf<f64>>; 3] = moved.try_into().unwrap_or_else(|_| unreachable!());
    Ok(Owned { pos, gidx, mass, scalar, radius, plan })
}

/// Per own query: the local pass's outputs.
struct Rows<B: Backend> {
    counts: Option<B::Buf<i64>>,
    sum: Option<B::Buf<f64>>,
    mean: Option<B::Buf<f64>>,
    density: Option<B::Buf<f64>>,
    counts_z: Option<B::Buf<u32>>,
}

/// Collective radius query. `queries = None`: the self-query. `src_global`: per source,
/// the global index its list entries name (ascending as the sources' own global indices:
/// a subset's caller indices); None: its own. `checks`: this rank's own checks of its
/// arguments, agreed with the others'. Per-query results for this rank's
/// queries in its input order, into `out` (set to their empty values by the caller);
/// list entries are global source indices.
#[allow(clippy::too_many_arguments)]
pub(crate) fn run<B, T, const D: usize, S, Q>(
    on: On<'_>,
    b: &B,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &RadiusFields<'_, B>,
    out: &RadiusSinks<'_, B>,
    lists: Option<ListRequest>,
    src_global: Option<&B::Buf<u64>>,
    checks: Result<()>,
) -> Result<(DistRadiusStats, Option<NeighbourLists>)>
where
    T: Real,
    S: ?Sized + Sync,
    Q: ?Sized + Sync,
    B: DistOps + RadiusPasses + Ingest<S, T, D> + Ingest<Q, T, D> + Ingest<<B as Backend>::Buf<[T; D]>, T, D>,
{
    let (comm, pool, me) = (on.comm, &on.ctx.pool, on.comm.rank());
    let want = [out.counts.is_some(), out.scalar_sum.is_some(), out.scalar_mean.is_some(), out.density.is_some()];
    let list_word = match lists {
        None => 0,
        Some(r) => 1 + (r.order == ListOrder::Index) as u64 + 2 * r.distances as u64,
    };
    let mut words = vec![
        fields.radii.is_some() as u64,
        if fields.radii.is_some() { 0 } else { fields.fixed.to_bits() },
        list_word,
        fields.masses.is_some() as u64,
        fields.scalar.is_some() as u64,
        queries.is_some() as u64,
        std::mem::size_of::<T>() as u64,
        fields.count_limit,
    ];
    words.extend(want.iter().map(|&w| w as u64));
    agree_params(comm, "radius", checks.map(|_| words.into_iter().chain(domain_words(domain)).collect()))?;
    let mut timings = Timings::default();
    let mut cs = CommStats::default();
    let (quant, skeys, qkeys) = timings.time("dist keys", || agree_points(on, b, domain, sources, queries))?;
    let q_total = qkeys.as_ref().map_or(skeys.total, |q| q.total);
    let nq_here = match queries {
        Some(q) => Ingest::<Q, T, D>::count(b, q),
        None => Ingest::<S, T, D>::count(b, sources),
    };
    let empty_lists = |nq: usize| -> Result<Option<NeighbourLists>> {
        let Some(r) = lists else { return Ok(None) };
        let bytes = list_bytes(nq, 0, r.distances);
        comm.agree(if r.max_bytes > 0 && bytes > r.max_bytes {
            Err(Error::OutOfMemory { what: "the neighbour lists (over the memory limit)", bytes })
        } else {
            Ok(Some(NeighbourLists { offsets: vec![0; nq + 1], indices: Vec::new(), distances: Vec::new() }))
        })
    };
    if skeys.total == 0 || q_total == 0 {
        // Nothing to search: every query keeps its empty values.
        let stats = RadiusStats { sources: 0, queries: nq_here, ..Default::default() };
        return Ok((DistRadiusStats { local: stats, dist: DistStats { timings, ..Default::default() } }, empty_lists(nq_here)?));
    }
    let decomp = timings.time("dist split", || {
        let sets: Vec<&B::Buf<u64>> = std::iter::once(&skeys.keys).chain(qkeys.as_ref().map(|q| &q.keys)).collect();
        decomp::build(comm, b, domain, quant, &sets, skeys.total + qkeys.as_ref().map_or(0, |q| q.total))
    })?;

    // Sources (and queries) to the owners of their keys.
    let self_query = queries.is_none();
    let own = timings.time("dist exchange", || {
        let radius = if self_query { fields.radii } else { None };
        to_owners(
            on,
            b,
            "decompose",
            sources,
            &skeys.keys,
            skeys.offset,
            src_global,
            decomp.starts(),
            [fields.masses, fields.scalar, radius],
            &mut cs,
        )
    })?;
    drop(skeys);
    let own_q = match (queries, qkeys) {
        (Some(q), Some(qk)) => Some(timings.time("dist exchange", || {
            to_owners(on, b, "decompose queries", q, &qk.keys, qk.offset, None, decomp.starts(), [None, None, fields.radii], &mut cs)
        })?),
        _ => None,
    };
    let qset = own_q.as_ref().unwrap_or(&own);

    // Ghost sources within the call's largest radius of another rank's range.
    let local_max = match &qset.radius {
        Some(r) => comm.agree(b.to_host(r).map(|h| h.iter().fold(0.0f64, |a, &x| a.max(x))))?,
        None => fields.fixed,
    };
    // Radii are >= 0, so their bit patterns order as the values do.
    let reach = f64::from_bits(comm.max_u64(&[local_max.to_bits()])[0]);
    let (src, exported, imported) = timings.time("dist ghosts", || -> Result<_> {
        let (grows, gcounts) = comm.agree(pool.install(|| b.near_pairs(&decomp, me, &own.pos, None, Reach::Fixed(reach))))?;
        let ghosts = plan_of(on, grows, gcounts);
        let col = |v: &B::Buf<f64>, cs: &mut CommStats| -> Result<B::Buf<f64>> {
            forward(on, b, "ghosts", &ghosts, &comm.agree(b.gather(v, &ghosts.rows, 1))?, cs)
        };
        let gpos = forward(on, b, "ghosts", &ghosts, &comm.agree(b.gather(&own.pos, &ghosts.rows, 1))?, &mut cs)?;
        let ggidx = forward(on, b, "ghosts", &ghosts, &comm.agree(b.gather(&own.gidx, &ghosts.rows, 1))?, &mut cs)?;
        let gmass = own.mass.as_ref().map(|m| col(m, &mut cs)).transpose()?;
        let gscalar = own.scalar.as_ref().map(|s| col(s, &mut cs)).transpose()?;
        let imported = B::len(&ggidx);
        // Own sources and ghosts in one set, in global index order.
        let src = comm.agree(pool.install(|| -> Result<_> {
            let order = b.merge_order(&own.gidx, &ggidx)?;
            let joined = |o: &Option<B::Buf<f64>>, g: &Option<B::Buf<f64>>| match (o, g) {
                (Some(o), Some(g)) => b.gather_joined(o, g, &order).map(Some),
                _ => Ok(None),
            };
            let (mass, scalar) = (joined(&own.mass, &gmass)?, joined(&own.scalar, &gscalar)?);
            Ok((b.gather_joined(&own.pos, &gpos, &order)?, b.gather_joined(&own.gidx, &ggidx, &order)?, mass, scalar))
        }))?;
        Ok((src, ghosts.exported(me), imported))
    })?;
    let (src_pos, src_gidx, src_mass, src_scalar) = src;

    // The local pass: this rank's queries against its sources and ghosts.
    let nq = B::len(&qset.gidx);
    let mut rows = comm.agree((|| -> Result<Rows<B>> {
        Ok(Rows {
            // Always: this rank's queries' pairs come from them.
            counts: Some(b.zeros(nq)?),
            sum: want[1].then(|| b.zeros(nq)).transpose()?,
            mean: want[2].then(|| b.filled(nq, f64::NAN)).transpose()?,
            density: want[3].then(|| b.zeros(nq)).transpose()?,
            counts_z: lists.is_some().then(|| b.zeros(nq)).transpose()?,
        })
    })())?;
    let ns_local = B::len(&src_gidx);
    let local_pass = if ns_local == 0 || nq == 0 {
        Ok(None)
    } else {
        let sinks = RadiusSinks::<B> {
            counts: rows.counts.as_mut().map(|v| b.out_of(v)),
            scalar_sum: rows.sum.as_mut().map(|v| b.out_of(v)),
            scalar_mean: rows.mean.as_mut().map(|v| b.out_of(v)),
            density: rows.density.as_mut().map(|v| b.out_of(v)),
            counts_z: rows.counts_z.as_mut().map(|v| b.out_of(v)),
        };
        let rf = RadiusFields::<B> {
            masses: src_mass.as_ref().map(|m| b.scalar_of(m)),
            scalar: src_scalar.as_ref().map(|s| b.scalar_of(s)),
            radii: qset.radius.as_ref().map(|r| b.scalar_of(r)),
            fixed: fields.fixed,
            count_limit: fields.count_limit,
        };
        let params = &on.ctx.config.tree;
        pool.install(|| crate::pipeline::radius::run(b, domain, &src_pos, Some(&qset.pos), &rf, params, &sinks, lists)).map(Some)
    };
    // Agreed, so a local failure never strands the other ranks in the next exchange.
    let (mut local, local_lists) = match comm.agree(local_pass)? {
        Some((st, l)) => (st, l),
        None => (RadiusStats { sources: ns_local, queries: nq, ..Default::default() }, None),
    };
    drop(src_pos);
    timings.stages.extend(local.timings.stages.iter().cloned());

    // Results back to the ranks (and input rows) the queries came from.
    let plan = &qset.plan;
    let back_lists = timings.time("dist results", || -> Result<Option<NeighbourLists>> {
        let send = |name, v: &Option<B::Buf<f64>>, o: &Option<B::Out<'_, f64>>, cs: &mut CommStats| -> Result<()> {
            if let (Some(v), Some(o)) = (v, o) {
                let r = back(on, b, name, plan, v, 1, cs)?;
                comm.agree(b.scatter_out(o, &plan.rows, &r, 1))?;
            }
            Ok(())
        };
        if let (Some(v), Some(o)) = (&rows.counts, &out.counts) {
            let r = back(on, b, "results", plan, v, 1, &mut cs)?;
            comm.agree(b.scatter_out(o, &plan.rows, &r, 1))?;
        }
        send("results", &rows.sum, &out.scalar_sum, &mut cs)?;
        send("results", &rows.mean, &out.scalar_mean, &mut cs)?;
        send("results", &rows.density, &out.density, &mut cs)?;
        match lists {
            None => Ok(None),
            Some(req) => {
                let ll = local_lists.unwrap_or_else(|| NeighbourLists { offsets: vec![0; nq + 1], indices: Vec::new(), distances: Vec::new() });
                list_back(on, b, plan, &src_gidx, ll, req, nq_here, &mut cs).map(Some)
            }
        }
    })?;
    // The pairs of this rank's own queries: per rank they came from, the sum of counts.
    let counts = comm.agree(b.to_host(rows.counts.as_ref().expect("counts are always made")).map(|c| c.into_owned()))?;
    let counts: Vec<u64> = counts.iter().map(|&c| c as u64).collect();
    let sums: Vec<u64> = segment_sums(&plan.recv, &counts).into_iter().map(|s| s as u64).collect();
    local.pairs = comm.all_to_all_u64(&sums).iter().sum();
    local.queries = nq_here;
    let dist = DistStats { timings, comm: cs, owned: B::len(&own.gidx), imported, exported };
    Ok((DistRadiusStats { local, dist }, back_lists))
}

/// The local lists (rows in arrival order, local source indices) back to the queries'
/// ranks, as global source indices in the queries' input order.
#[allow(clippy::too_many_arguments)]
fn list_back<B: DistOps>(
    on: On<'_>,
    b: &B,
    plan: &Plan<B>,
    src_gidx: &B::Buf<u64>,
    mut ll: NeighbourLists,
    req: ListRequest,
    nq_here: usize,
    cs: &mut CommStats,
) -> Result<NeighbourLists> {
    let comm = on.comm;
    let gidx = comm.agree(b.to_host(src_gidx))?;
    for i in ll.indices.iter_mut() {
        *i = gidx[*i as usize] as i64;
    }
    drop(gidx);
    let counts: Vec<u64> = ll.offsets.windows(2).map(|w| (w[1] - w[0]) as u64).collect();
    // Entries per rank the rows came from (rows arrive grouped by rank).
    let send_lens = segment_sums(&plan.recv, &counts);
    let back_counts =
        comm.agree(b.to_host(&back(on, b, "list counts", plan, &comm.agree(b.upload_host(counts))?, 1, cs)?).map(|c| c.into_owned()))?;
    let recv_lens = segment_sums(&plan.send, &back_counts);
    let total: u64 = back_counts.iter().sum();
    let bytes = list_bytes(nq_here, total, req.distances);
    comm.agree(if req.max_bytes > 0 && bytes > req.max_bytes {
        Err(Error::OutOfMemory { what: "the neighbour lists (over the memory limit)", bytes })
    } else {
        Ok(())
    })?;
    let idx = exchange(on, b, "lists", &comm.agree(b.upload_host(std::mem::take(&mut ll.indices)))?, &send_lens, &recv_lens, 1, cs)?;
    let dist = if req.distances {
        Some(exchange(on, b, "lists", &comm.agree(b.upload_host(std::mem::take(&mut ll.distances)))?, &send_lens, &recv_lens, 1, cs)?)
    } else {
        None
    };
    drop(ll);
    // Rows in plan order to the input order.
    let rows = comm.agree(b.to_host(&plan.rows).map(|r| r.into_owned()))?;
    let mut offsets = vec![0i64; nq_here + 1];
    for (j, &r) in rows.iter().enumerate() {
        offsets[r as usize + 1] = back_counts[j] as i64;
    }
    for q in 0..nq_here {
        offsets[q + 1] += offsets[q];
    }
    let idx = comm.agree(b.to_host(&idx).map(|v| v.into_owned()))?;
    let dist = dist.map(|d| b.to_host(&d).map(|v| v.into_owned())).transpose();
    let dist = comm.agree(dist)?;
    let mut indices = vec![0i64; total as usize];
    let mut distances = if req.distances { vec![0f64; total as usize] } else { Vec::new() };
    let mut at = 0usize;
    for (j, &r) in rows.iter().enumerate() {
        let (c, o) = (back_counts[j] as usize, offsets[r as usize] as usize);
        indices[o..o + c].copy_from_slice(&idx[at..at + c]);
        if let Some(d) = &dist {
            distances[o..o + c].copy_from_slice(&d[at..at + c]);
        }
        at += c;
    }
    Ok(NeighbourLists { offsets, indices, distances })
}

/// The sums of consecutive runs of `per_row`, `lens[r]` rows each (rows grouped by rank).
fn segment_sums(lens: &[usize], per_row: &[u64]) -> Vec<usize> {
    let mut at = 0;
    lens.iter()
        .map(|&l| {
            let s = per_row[at..at + l].iter().sum::<u64>() as usize;
            at += l;
            s
        })
        .collect()
}
