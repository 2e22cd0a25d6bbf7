//! Moving columns between ranks: the agreed keys of a call, the plan of an exchange (which
//! rows go to which rank, in what order), and the exchange of one column of a plan, out
//! to the ranks or its results back. A column lives in the back end's buffers; only the
//! bytes for other ranks pass through host memory (the CPU's columns are host memory
//! already, read in place).

use super::decomp::global_bounds;
use super::{CommStats, On};
use crate::backend::{DistOps, Elem, Ingest};
use crate::error::Result;
use crate::geom::Real;
use crate::geom::morton::Quantizer;
use crate::input::{Bounds, Domain};

/// This rank's Morton keys of one point set under the agreed quantizer, with the set's
/// global count and this rank's global index offset.
pub(crate) struct Keys<B: DistOps> {
    pub keys: B::Buf<u64>,
    pub total: u64,
    /// Global input index of this rank's first point (counts of the lower ranks).
    pub offset: u64,
}

/// Validates this rank's sources and queries (collectively: if one rank fails, all do)
/// and computes their keys over the agreed domain (the periodic box, or the bounding box
/// of every rank's points).
#[allow(clippy::type_complexity)]
pub(crate) fn agree_points<B, T, const D: usize, S, Q>(
    on: On<'_>,
    b: &B,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
) -> Result<(Quantizer<D>, Keys<B>, Option<Keys<B>>)>
where
    T: Real,
    S: ?Sized + Sync,
    Q: ?Sized + Sync,
    B: DistOps + Ingest<S, T, D> + Ingest<Q, T, D>,
{
    let comm = on.comm;
    let local = crate::input::validate::check_domain::<T, D>(domain).and_then(|_| {
        on.ctx.pool.install(|| {
            let mut bounds = b.scan(sources, "sources", domain)?;
            if let Some(q) = queries {
                bounds = bounds.merge(&b.scan(q, "queries", domain)?);
            }
            Ok(bounds)
        })
    });
    let bounds: Bounds<D> = comm.agree(local)?;
    let quant = Quantizer::new(domain, &global_bounds(comm, &bounds));
    let keyed = |n: usize, keys_into: &(dyn Fn(&mut B::Buf<u64>) -> Result<()> + Sync)| -> Result<Keys<B>> {
        let keys = comm.agree(on.ctx.pool.install(|| {
            let mut keys = b.zeros(n)?;
            keys_into(&mut keys)?;
            Ok(keys)
        }))?;
        let counts = comm.all_gather_u64(n as u64);
        Ok(Keys { keys, total: counts.iter().sum(), offset: counts[..comm.rank()].iter().sum() })
    };
    let sk = keyed(Ingest::<S, T, D>::count(b, sources), &|k| b.keys_into(sources, &quant, k, 0))?;
    let qk = match queries {
        Some(q) => Some(keyed(Ingest::<Q, T, D>::count(b, q), &|k| b.keys_into(q, &quant, k, 0))?),
        None => None,
    };
    Ok((quant, sk, qk))
}

/// The plan of one exchange: this rank's rows grouped by destination rank (ascending rows
/// within each, so every rank receives rows in the global order of their senders), how
/// many go to each rank and how many come from each.
pub(crate) struct Plan<B: DistOps> {
    pub rows: B::Buf<u32>,
    pub send: Vec<usize>,
    pub recv: Vec<usize>,
}

impl<B: DistOps> Plan<B> {
    /// Rows this rank sends to other ranks.
    pub fn exported(&self, me: usize) -> usize {
        self.send.iter().enumerate().filter(|&(r, _)| r != me).map(|(_, &c)| c).sum()
    }
}

/// The plan sending each row `i` to rank `dest[i]`. Collective.
pub(crate) fn plan_to<B: DistOps>(on: On<'_>, b: &B, dest: &B::Buf<u32>) -> Result<Plan<B>> {
    let ranks = on.comm.size();
    let (rows, send) = on.comm.agree(on.ctx.pool.install(|| b.group_by_rank(dest, ranks)))?;
    Ok(plan_of(on, rows, send))
}

/// The plan of rows already grouped by destination (`send[r]` rows for rank r). Collective.
pub(crate) fn plan_of<B: DistOps>(on: On<'_>, rows: B::Buf<u32>, send: Vec<usize>) -> Plan<B> {
    let recv = on.comm.all_to_all_u64(&send.iter().map(|&c| c as u64).collect::<Vec<_>>()).into_iter().map(|c| c as usize).collect();
    Plan { rows, send, recv }
}

/// Sends `send` (`send_lens[r]` rows of `width` elements for rank r, in rank order) and
/// returns what arrived (`recv_lens[r]` rows from rank r, in rank order). Collective; a
/// failure to stage the bytes on any rank is every rank's error.
#[allow(clippy::too_many_arguments)]
pub(crate) fn exchange<B: DistOps, T: Elem>(
    on: On<'_>,
    b: &B,
    name: &'static str,
    send: &B::Buf<T>,
    send_lens: &[usize],
    recv_lens: &[usize],
    width: usize,
    cs: &mut CommStats,
) -> Result<B::Buf<T>> {
    let comm = on.comm;
    let host = comm.agree(b.to_host(send))?;
    let size = std::mem::size_of::<T>() * width;
    let bytes = |lens: &[usize]| lens.iter().map(|&l| (l * size) as u64).collect::<Vec<u64>>();
    let total: usize = recv_lens.iter().sum::<usize>() * width;
    let mut recv: Vec<T> = vec![T::FILL; total];
    // SAFETY: `Elem` types are plain data: their bytes may be read and written as such.
    let (sb, rb) = unsafe {
        (
            std::slice::from_raw_parts(host.as_ptr().cast::<u8>(), std::mem::size_of_val(&host[..])),
            std::slice::from_raw_parts_mut(recv.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(&recv[..])),
        )
    };
    comm.all_to_all_bytes(name, sb, &bytes(send_lens), rb, &bytes(recv_lens), cs);
    drop(host);
    comm.agree(b.upload_host(recv))
}

/// A plan's column, gathered in plan order by the caller, to the ranks of the plan.
pub(crate) fn forward<B: DistOps, T: Elem>(
    on: On<'_>,
    b: &B,
    name: &'static str,
    plan: &Plan<B>,
    col: &B::Buf<T>,
    cs: &mut CommStats,
) -> Result<B::Buf<T>> {
    exchange(on, b, name, col, &plan.send, &plan.recv, 1, cs)
}

/// Results of the rows a plan brought here (`width` elements per row, in arrival order)
/// back to the ranks they came from: each rank gets its rows' results in plan order.
pub(crate) fn back<B: DistOps, T: Elem>(
    on: On<'_>,
    b: &B,
    name: &'static str,
    plan: &Plan<B>,
    res: &B::Buf<T>,
    width: usize,
    cs: &mut CommStats,
) -> Result<B::Buf<T>> {
    exchange(on, b, name, res, &plan.recv, &plan.send, width, cs)
}
