//! Moving columns between ranks: the agreed keys of a call, the plan of an exchange (which
//! rows go to which rank, in what order), and the exchange of one column of a plan, out
//! to the ranks or its results back. A column lives in the back end's buffers; a rank's
//! own rows never leave them, and a device column's rows for other ranks pass through
//! host copies unless MPI is told to read device memory (`cuda_aware`).

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

/// Whether MPI is handed device pointers (a CUDA-aware MPI): only when
/// `ZTREE_CUDA_AWARE_MPI=1`. Not by default, even where the MPI says it is CUDA-aware
/// (`MPIX_Query_cuda_support`): ztree's device buffers come from a stream-ordered memory
/// pool, which some transports cannot map (CUDA IPC handles of pool memory), so the
/// caller opts in for an MPI known to take them.
pub(crate) fn cuda_aware() -> bool {
    static AWARE: std::sync::OnceLock<bool> = std::sync::OnceLock::new();
    *AWARE.get_or_init(|| std::env::var("ZTREE_CUDA_AWARE_MPI").is_ok_and(|v| v == "1"))
}

/// The offsets of consecutive runs of lengths `v` (`v.len() + 1` of them).
fn prefix(v: &[usize]) -> Vec<usize> {
    let mut out = Vec::with_capacity(v.len() + 1);
    out.push(0);
    for &x in v {
        out.push(out.last().unwrap() + x);
    }
    out
}

/// Sends `send` (`send_lens[r]` rows of `width` elements for rank r, in rank order) and
/// returns what arrived (`recv_lens[r]` rows from rank r, in rank order). This rank's own
/// rows are copied where they live; MPI reads and writes host columns in place, device
/// columns in place with a CUDA-aware MPI, else through host copies of the other ranks'
/// rows alone. Collective; a failure to stage the bytes on any rank is every rank's error.
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
    let (comm, me, p) = (on.comm, on.comm.rank(), on.comm.size());
    let rows = |v: &[usize]| v.iter().map(|&l| l * width).collect::<Vec<usize>>();
    let (sl, rl) = (rows(send_lens), rows(recv_lens));
    let (so, ro) = (prefix(&sl), prefix(&rl));
    let size = std::mem::size_of::<T>();
    debug_assert_eq!(send_lens[me], recv_lens[me], "a rank keeps the rows it sends itself");
    // The landing column, this rank's own rows in it.
    let mut recv = comm.agree(b.landing::<T>(ro[p]).and_then(|mut r| {
        b.copy_range(send, so[me], &mut r, ro[me], sl[me])?;
        Ok(r)
    }))?;
    // What MPI moves: the other ranks' rows (this rank's count 0).
    let bytes =
        |v: &[usize], mine: bool| -> Vec<u64> { v.iter().enumerate().map(|(r, &x)| if r == me && !mine { 0 } else { (x * size) as u64 }).collect() };
    let (send_bytes, recv_bytes) = (bytes(&sl, false), bytes(&rl, false));
    // Device addresses for a CUDA-aware MPI, taken once the device's queued work (the
    // column, the own rows' copy) is done.
    let aware = cuda_aware();
    let (send_dev, recv_dev) = comm.agree(if aware { b.device_ptr(send).and_then(|s| Ok((s, b.device_ptr(&recv)?))) } else { Ok((None, None)) })?;
    // Send side: the column itself (host, or device with a CUDA-aware MPI), or a host copy
    // of the rows before and after this rank's own. (Every rank agrees on its staging,
    // whatever it needed: ranks with host and with device columns make the same
    // collectives.)
    let direct = b.host_slice(send).map(|h| h.as_ptr().cast::<u8>()).or(send_dev.map(|d| d as *const u8));
    let staged_send: Vec<T> = comm.agree(match direct {
        Some(_) => Ok(Vec::new()),
        None => (|| {
            let mut v = vec![T::FILL; so[p] - sl[me]];
            b.download_range(send, 0, &mut v[..so[me]])?;
            b.download_range(send, so[me + 1], &mut v[so[me]..])?;
            Ok(v)
        })(),
    })?;
    let skip = |off: &[usize], own: usize| -> Vec<u64> { (0..p).map(|r| ((if r > me { off[r] - own } else { off[r] }) * size) as u64).collect() };
    let (sptr, sat) = match direct {
        Some(ptr) => (ptr, bytes(&so[..p], true)),
        None => (staged_send.as_ptr().cast::<u8>(), skip(&so, sl[me])),
    };
    // Receive side likewise.
    let through_host = b.host_slice_mut(&mut recv).is_none() && recv_dev.is_none();
    let mut staged_recv: Vec<T> = if through_host { vec![T::FILL; ro[p] - rl[me]] } else { Vec::new() };
    let (rptr, rat): (*mut u8, Vec<u64>) = if through_host {
        (staged_recv.as_mut_ptr().cast(), skip(&ro, rl[me]))
    } else {
        let ptr = match b.host_slice_mut(&mut recv) {
            Some(h) => h.as_mut_ptr().cast(),
            None => recv_dev.expect("device memory, CUDA-aware") as *mut u8,
        };
        (ptr, bytes(&ro[..p], true))
    };
    // SAFETY: every range lies in its buffer (the displacements are the prefix sums of
    // the lengths, this rank's own skipped), which lives until the call returns.
    let done = unsafe { comm.all_to_all_raw(name, sptr, &send_bytes, &sat, rptr, &recv_bytes, &rat, cs) };
    if done.is_none() {
        // Beyond MPI's int: through host copies, in rounds.
        let host = comm.agree(b.to_host(send))?;
        // SAFETY: `Elem` types are plain data.
        let sb = unsafe { std::slice::from_raw_parts(host.as_ptr().cast::<u8>(), std::mem::size_of_val(&host[..])) };
        let mut all = vec![T::FILL; ro[p]];
        // SAFETY: as above.
        let rb = unsafe { std::slice::from_raw_parts_mut(all.as_mut_ptr().cast::<u8>(), std::mem::size_of_val(&all[..])) };
        comm.all_to_all_bytes(name, sb, &bytes(&sl, true), rb, &bytes(&rl, true), cs);
        return comm.agree(b.upload_host(all));
    }
    comm.agree(if through_host {
        (|| {
            b.upload_range(&mut recv, 0, &staged_recv[..ro[me]])?;
            b.upload_range(&mut recv, ro[me + 1], &staged_recv[ro[me]..])
        })()
    } else {
        Ok(())
    })?;
    Ok(recv)
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
