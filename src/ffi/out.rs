//! What every call shares: the context's output buffers (fallible, never dangling), the
//! statistics handed to C, the memory estimate and limit, and the one agreement step that
//! makes a rejected argument on any rank an error on every rank.

use std::ffi::c_char;

use super::types::*;
use super::{Fail, fail};
use crate::api::Timings;
use ztree_status::*;

/// Output buffers owned by a context, grown on demand and reused across calls.
#[derive(Default)]
pub(crate) struct Buffers {
    pub indices: Vec<i64>,
    pub distances: Vec<f64>,
    pub kth: Vec<f64>,
    pub density: Vec<f64>,
    pub scalar_mean: Vec<f64>,
    pub permutation: Vec<i64>,
    pub labels: Vec<i64>,
    pub halos: Vec<ztree_halo>,
    pub member_offsets: Vec<i64>,
    pub member_indices: Vec<i64>,
    pub classes: Vec<i8>,
    pub clusters: Vec<ztree_cluster>,
    pub counts: Vec<i64>,
    pub scalar_sum: Vec<f64>,
    pub list_offsets: Vec<i64>,
    pub list_indices: Vec<i64>,
    pub list_distances: Vec<f64>,
    /// The halo property columns of `ztree_fof`.
    pub columns: super::halo::ColumnBuffers,
}

/// The context's communicator (None: a serial context).
#[cfg(feature = "mpi")]
pub(crate) type CommSlot = Option<crate::mpi::Comm>;
#[cfg(not(feature = "mpi"))]
pub(crate) type CommSlot = Option<std::convert::Infallible>;

/// This rank's view of a call's arguments: the parameter words every rank must share, and
/// which optional arrays it has (`None`: no particles, so either is fine).
pub(crate) struct Proposal {
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    pub words: Vec<u64>,
    pub optional: Vec<Option<bool>>,
}

/// The agreement at the start of every call on an MPI context, run after this rank checked
/// every argument (`r`: what it prepared, with its `proposal`, or why it rejects them): if
/// any rank rejected its arguments, every rank returns in this call — that rank with its
/// own status, the others with `ZTREE_ERR_REMOTE` — and if the words or the optional arrays
/// differ between ranks, every rank returns `ZTREE_ERR_MPI`. Nothing else is collective
/// before it, so the next call pairs up again. Returns `r`'s value and which optional
/// arrays the call has. Serial contexts: `r` as it is.
pub(crate) fn agree_args<V>(comm: &CommSlot, what: &str, r: Result<V, Fail>, proposal: impl FnOnce(&V) -> &Proposal) -> Result<(V, Vec<bool>), Fail> {
    let v = match r {
        Ok(v) => v,
        Err(f) => {
            #[cfg(feature = "mpi")]
            if let Some(c) = comm {
                // Tells the other ranks; this rank's own failure is what it returns.
                let _ = crate::mpi::agree_params(c, what, Err(crate::error::Error::Mpi(String::new())));
            }
            return Err(f);
        }
    };
    let p = proposal(&v);
    #[cfg(feature = "mpi")]
    if let Some(c) = comm {
        crate::mpi::agree_params(c, what, Ok(p.words.clone()))?;
        let present = crate::mpi::agree_presence(c, what, &p.optional)?;
        return Ok((v, present));
    }
    let _ = (comm, what);
    let present = p.optional.iter().map(|f| f.unwrap_or(false)).collect();
    Ok((v, present))
}

/// `len` elements of `fill`, or `ZTREE_ERR_MEMORY`.
pub(crate) fn try_vec<V: Clone>(len: usize, fill: V, what: &str) -> Result<Vec<V>, Fail> {
    let mut v = Vec::new();
    reserve(&mut v, len, what)?;
    v.resize(len, fill);
    Ok(v)
}

/// Room for `len` more elements (at least one, so that a pointer into `v` is never
/// dangling), or `ZTREE_ERR_MEMORY`.
pub(crate) fn reserve<V>(v: &mut Vec<V>, len: usize, what: &str) -> Result<(), Fail> {
    v.try_reserve(len.max(1))
        .map_err(|_| fail(ZTREE_ERR_MEMORY, format!("out of memory: {what} needs {} bytes", (len as u128) * std::mem::size_of::<V>() as u128)))
}

/// A caller array of `len` elements, or the context buffer grown to `len` (fallibly; its
/// pointer valid even when `len` is 0). A pointer this buffer handed out before (an output
/// struct reused without resetting it) means the buffer again, whatever its size now.
///
/// # Safety
/// A non-null `ptr` that is not the buffer's must point to `len` writable elements.
pub(crate) unsafe fn dest<'a, V: Copy + Default>(ptr: *mut V, buf: &'a mut Vec<V>, len: usize, what: &str) -> Result<&'a mut [V], Fail> {
    if ptr.is_null() || (buf.capacity() > 0 && ptr == buf.as_mut_ptr()) {
        buf.clear();
        reserve(buf, len, what)?;
        buf.resize(len, V::default());
        Ok(buf.as_mut_slice())
    } else {
        // SAFETY: per the function contract.
        Ok(unsafe { std::slice::from_raw_parts_mut(ptr, len) })
    }
}

/// Bytes a call needs, accumulated without overflow.
#[derive(Clone, Copy, Default)]
pub(crate) struct Bytes(pub u128);

impl Bytes {
    pub fn add(&mut self, count: usize, each: usize) {
        self.0 += count as u128 * each as u128;
    }
    /// For the C side (saturating).
    pub fn as_i64(self) -> i64 {
        self.0.min(i64::MAX as u128) as i64
    }
    /// `ZTREE_ERR_MEMORY` when over `limit` (0: no limit) or beyond the address space.
    pub fn check(self, limit: i64, what: &str) -> Result<(), Fail> {
        if self.0 > isize::MAX as u128 {
            return Err(fail(ZTREE_ERR_MEMORY, format!("{what} would need about {} bytes, more than this machine can address", self.0)));
        }
        if limit > 0 && self.0 > limit as u128 {
            return Err(fail(ZTREE_ERR_MEMORY, format!("{what} would need about {} bytes, more than config.memory_limit = {limit}", self.0)));
        }
        Ok(())
    }
}

pub(crate) fn empty_stats() -> ztree_stats {
    ztree_stats {
        struct_size: std::mem::size_of::<ztree_stats>(),
        n_stages: 0,
        stage_name: [[0; 16]; ZTREE_MAX_STAGES],
        stage_seconds: [0.0; ZTREE_MAX_STAGES],
        total_seconds: 0.0,
        scratch_bytes: 0,
        particles: 0,
        queries: 0,
        halos: 0,
        bytes_sent: 0,
        messages: 0,
        owned: 0,
    }
}

/// What an MPI context adds to the statistics of a call.
#[cfg(feature = "mpi")]
pub(crate) type DistInfo = crate::mpi::DistStats;
#[cfg(not(feature = "mpi"))]
pub(crate) type DistInfo = ();

pub(crate) fn fill_stats(t: &Timings, scratch: usize, particles: usize, queries: usize, halos: usize, dist: Option<&DistInfo>) -> ztree_stats {
    let mut s = empty_stats();
    for (i, (name, secs)) in t.stages.iter().take(ZTREE_MAX_STAGES).enumerate() {
        for (j, b) in name.bytes().take(15).enumerate() {
            s.stage_name[i][j] = b as c_char;
        }
        s.stage_seconds[i] = *secs;
        s.n_stages = i as i32 + 1;
    }
    s.total_seconds = t.total();
    s.scratch_bytes = scratch as i64;
    s.particles = particles as i64;
    s.queries = queries as i64;
    s.halos = halos as i64;
    #[cfg(feature = "mpi")]
    if let Some(d) = dist {
        s.bytes_sent = d.comm.bytes_sent() as i64;
        s.messages = d.comm.messages() as i64;
        s.owned = d.owned as i64;
    }
    let _ = dist;
    s
}
