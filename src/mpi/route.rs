//! Moving particles to the owners of their keys and results back: the agreed keys of a
//! call, the routing exchange (one buffer laid out in parallel; particles already on
//! their owner are read in place), and the return of per-particle results to the rank and
//! input position each particle came from.

use rayon::prelude::*;

use super::comm::{Outbox, Reader, Received, SliceWriter, Wire};
use super::decomp::global_bounds;
use super::{CommStats, On};
use crate::backend::Ingest;
use crate::backend::cpu::{Cpu, DisjointSlice, par::chunk_ranges};
use crate::error::Result;
use crate::geom::Real;
use crate::geom::morton::Quantizer;
use crate::input::{Bounds, Domain, PointSource};

/// This rank's Morton keys of one point set under the agreed quantizer, with the set's
/// global count and this rank's global index offset.
pub(crate) struct Keys {
    pub keys: Vec<u64>,
    pub total: u64,
    /// Global input index of this rank's first point (counts of the lower ranks).
    pub offset: u64,
}

/// Validates this rank's sources and queries (collectively: if one rank fails, all do)
/// and computes their keys over the agreed domain (the periodic box, or the bounding box
/// of every rank's points).
pub(crate) fn agree_points<T, const D: usize, S, Q>(
    on: On<'_>,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    checks: Result<()>,
) -> Result<(Quantizer<D>, Keys, Option<Keys>)>
where
    T: Real,
    S: PointSource<T, D> + ?Sized,
    Q: PointSource<T, D> + ?Sized,
{
    let comm = on.comm;
    let local = checks.and_then(|_| crate::input::validate::check_domain::<T, D>(domain)).and_then(|_| {
        on.ctx.pool.install(|| {
            let mut b = Cpu.scan(sources, "sources", domain)?;
            if let Some(q) = queries {
                b = b.merge(&Cpu.scan(q, "queries", domain)?);
            }
            Ok(b)
        })
    });
    let bounds: Bounds<D> = comm.agree(local)?;
    let quant = Quantizer::new(domain, &global_bounds(comm, &bounds));
    let keyed = |n: usize, keys_into: &(dyn Fn(&mut Vec<u64>) -> Result<()> + Sync)| -> Result<Keys> {
        let mut keys = vec![0u64; n];
        on.ctx.pool.install(|| keys_into(&mut keys))?;
        let counts = comm.all_gather_u64(n as u64);
        Ok(Keys { keys, total: counts.iter().sum(), offset: counts[..comm.rank()].iter().sum() })
    };
    let sk = keyed(sources.len(), &|k| Cpu.keys_into(sources, &quant, k, 0))?;
    let qk = match queries {
        Some(q) => Some(keyed(q.len(), &|k| Cpu.keys_into(q, &quant, k, 0))?),
        None => None,
    };
    Ok((quant, sk, qk))
}

/// What arrived on this rank in a routing exchange.
pub(crate) struct Arrivals {
    pub recv: Received,
    /// Owned records from each rank, in rank order (this rank's own: its stayers).
    pub from_count: Vec<usize>,
    /// Input indices of this rank's particles that stay here, ascending.
    pub stay: Vec<u32>,
}

impl Arrivals {
    /// Number of owned records (stayers included).
    pub fn owned(&self) -> usize {
        self.from_count.iter().sum()
    }

    /// Visits the records in their global order (ranks in order, each rank's in its input
    /// order): `Arrival::Stayer(i)` for this rank's particle `i`, read in place, and
    /// `Arrival::Owned(reader)` for a received record; then `Arrival::Ghost(reader)` for
    /// every ghost record after the owned ones of each message.
    pub fn visit(&self, me: usize, mut f: impl FnMut(Arrival<'_, '_>)) {
        for (r, &cnt) in self.from_count.iter().enumerate() {
            let mut rd = Reader::new(&self.recv.from(r)[8..]);
            if r == me {
                self.stay.iter().for_each(|&i| f(Arrival::Stayer(i as usize)));
            } else {
                for _ in 0..cnt {
                    f(Arrival::Owned(&mut rd));
                }
            }
            while !rd.done() {
                f(Arrival::Ghost(&mut rd));
            }
        }
    }
}

/// One record visited by `Arrivals::visit`.
pub(crate) enum Arrival<'a, 'b> {
    Stayer(usize),
    Owned(&'a mut Reader<'b>),
    Ghost(&'a mut Reader<'b>),
}

/// Sends every particle `i` of this rank to `owners[i]` as a record of `own_size` bytes
/// written by `own(i, w)`, and copies of it as ghosts (`ghost_size` bytes, `ghost(i, w)`)
/// to the ranks `near(i, out)` lists. Particles that stay (`owners[i] == me`) are not
/// encoded. One all-to-all, laid out in parallel over chunks of the input.
#[allow(clippy::too_many_arguments)]
pub(crate) fn route<O, N, G>(
    on: On<'_>,
    name: &'static str,
    owners: &[u32],
    own_size: usize,
    own: O,
    ghost_size: usize,
    near: Option<N>,
    ghost: G,
    cs: &mut CommStats,
) -> Result<Arrivals>
where
    O: Fn(usize, &mut SliceWriter<'_>) + Sync,
    N: Fn(usize, &mut Vec<u32>) + Sync,
    G: Fn(usize, &mut SliceWriter<'_>) + Sync,
{
    let (p, me, n) = (on.comm.size(), on.comm.rank(), owners.len());
    let outbox = on.ctx.pool.install(|| lay_out(n, p, me, owners, own_size, &own, ghost_size, near.as_ref(), &ghost));
    let recv = on.comm.exchange(name, &outbox, cs)?;
    drop(outbox);
    let mut from_count: Vec<usize> = (0..p).map(|r| u64::get(recv.from(r)) as usize).collect();
    let stay: Vec<u32> = (0..n as u32).filter(|&i| owners[i as usize] as usize == me).collect();
    from_count[me] = stay.len();
    Ok(Arrivals { recv, from_count, stay })
}

/// The routing outbox: to each rank, a u64 count of owned records, the owned records
/// (input order), then the ghost records (input order).
#[allow(clippy::too_many_arguments)]
fn lay_out<O, N, G>(n: usize, p: usize, me: usize, owner: &[u32], own_size: usize, own: &O, ghost_size: usize, near: Option<&N>, ghost: &G) -> Outbox
where
    O: Fn(usize, &mut SliceWriter<'_>) + Sync,
    N: Fn(usize, &mut Vec<u32>) + Sync,
    G: Fn(usize, &mut SliceWriter<'_>) + Sync,
{
    let chunks = chunk_ranges(n, rayon::current_num_threads() * 4);
    // Pass 1: owned counts and ghost destinations per chunk.
    // Per chunk: owned points per rank, and (point, rank) of each ghost copy.
    type Counted = (Vec<usize>, Vec<(u32, u32)>);
    let counted: Vec<Counted> = chunks
        .par_iter()
        .map(|r| {
            let mut cnt = vec![0usize; p];
            let mut gh = Vec::new();
            let mut scratch = Vec::new();
            for i in r.clone() {
                if owner[i] as usize != me {
                    cnt[owner[i] as usize] += 1;
                }
                if let Some(near) = near {
                    near(i, &mut scratch);
                    gh.extend(scratch.iter().map(|&s| (i as u32, s)));
                }
            }
            (cnt, gh)
        })
        .collect();
    let gcounts: Vec<Vec<usize>> = counted
        .iter()
        .map(|c| {
            let mut g = vec![0usize; p];
            c.1.iter().for_each(|&(_, s)| g[s as usize] += 1);
            g
        })
        .collect();
    let own_tot: Vec<usize> = (0..p).map(|r| counted.iter().map(|c| c.0[r]).sum()).collect();
    let ghost_tot: Vec<usize> = (0..p).map(|r| gcounts.iter().map(|g| g[r]).sum()).collect();
    let mut offsets = vec![0usize];
    for r in 0..p {
        offsets.push(offsets[r] + 8 + own_tot[r] * own_size + ghost_tot[r] * ghost_size);
    }
    // Where each chunk writes its records for each rank.
    let mut own_at = vec![vec![0usize; p]; chunks.len()];
    let mut ghost_at = vec![vec![0usize; p]; chunks.len()];
    for r in 0..p {
        let (mut o, mut g) = (offsets[r] + 8, offsets[r] + 8 + own_tot[r] * own_size);
        for c in 0..chunks.len() {
            own_at[c][r] = o;
            ghost_at[c][r] = g;
            o += counted[c].0[r] * own_size;
            g += gcounts[c][r] * ghost_size;
        }
    }
    let mut buf = vec![0u8; offsets[p].max(1)];
    buf.truncate(offsets[p]);
    for r in 0..p {
        (own_tot[r] as u64).write(&mut buf[offsets[r]..offsets[r] + 8]);
    }
    let out = DisjointSlice::new(&mut buf);
    chunks.par_iter().enumerate().for_each(|(c, r)| {
        let (mut oa, mut ga) = (own_at[c].clone(), ghost_at[c].clone());
        for i in r.clone() {
            let d = owner[i] as usize;
            if d == me {
                continue;
            }
            // SAFETY: the layout above gives every record its own byte range.
            own(i, &mut SliceWriter::new(unsafe { out.slice_mut(oa[d], own_size) }));
            oa[d] += own_size;
        }
        for &(i, s) in &counted[c].1 {
            let s = s as usize;
            // SAFETY: as above.
            ghost(i as usize, &mut SliceWriter::new(unsafe { out.slice_mut(ga[s], ghost_size) }));
            ga[s] += ghost_size;
        }
    });
    Outbox { buf, offsets }
}

/// Sends the result of every owned record that came from another rank back to it: `put(u,
/// buf)` appends the result of owned record `u` (records numbered in `Arrivals` order).
/// Stayers' results are not sent (read them in place with `for_each_input`).
pub(crate) fn send_back(
    on: On<'_>,
    name: &'static str,
    from_count: &[usize],
    put: impl Fn(usize, &mut Vec<u8>),
    cs: &mut CommStats,
) -> Result<Received> {
    let me = on.comm.rank();
    let mut back = vec![Vec::new(); from_count.len()];
    let mut u = 0;
    for (r, &cnt) in from_count.iter().enumerate() {
        if r != me {
            for j in u..u + cnt {
                put(j, &mut back[r]);
            }
        }
        u += cnt;
    }
    on.comm.exchange(name, &Outbox::from_parts(back), cs)
}

/// A result for input particle `i`: where to read it.
pub(crate) enum Returned<'a, 'b> {
    /// A stayer: owned record `u` on this rank.
    Here(usize),
    /// Sent back by its owner: the next result in this reader.
    From(&'a mut Reader<'b>),
}

/// Calls `f(i, where)` for every input particle `i` of this rank, in input order, after
/// `send_back`: stayers are owned records `from_count[..me].sum() ..` in input order.
pub(crate) fn for_each_input(me: usize, owners: &[u32], from_count: &[usize], recv: &Received, mut f: impl FnMut(usize, Returned<'_, '_>)) {
    let mut readers: Vec<Reader<'_>> = (0..from_count.len()).map(|r| Reader::new(recv.from(r))).collect();
    let mut su: usize = from_count[..me].iter().sum();
    for (i, &o) in owners.iter().enumerate() {
        if o as usize == me {
            f(i, Returned::Here(su));
            su += 1;
        } else {
            f(i, Returned::From(&mut readers[o as usize]));
        }
    }
}
