//! The few collectives the distributed calls use, over rsmpi, with the bytes and messages
//! of every stage counted. Columns (particles, results) go by one `MPI_Alltoallv` of raw
//! bytes at explicit displacements (`all_to_all_raw`, from host or device memory); the
//! small host messages (FoF edges, catalogue members and rows) are byte buffers of
//! fixed-size records (`Wire`).

use mpi::collective::SystemOperation;
use mpi::datatype::{Partition, PartitionMut};
use mpi::topology::SimpleCommunicator;
use mpi::traits::*;

use crate::error::{Error, Result};

/// Communication of one stage of a distributed call, on this rank.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommStage {
    /// The stage's name.
    pub name: &'static str,
    /// Payload bytes this rank sent to other ranks (not counting what it kept).
    pub bytes_sent: u64,
    /// Point-to-point messages this rank sent (non-empty payloads to other ranks).
    pub messages: u64,
}

/// Communication of a whole call, stage by stage (this rank's share).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct CommStats {
    /// Per stage, in call order.
    pub stages: Vec<CommStage>,
}

impl CommStats {
    fn add(&mut self, name: &'static str, bytes: u64, messages: u64) {
        if let Some(s) = self.stages.iter_mut().find(|s| s.name == name) {
            s.bytes_sent += bytes;
            s.messages += messages;
        } else {
            self.stages.push(CommStage { name, bytes_sent: bytes, messages });
        }
    }
    /// Bytes over all stages.
    pub fn bytes_sent(&self) -> u64 {
        self.stages.iter().map(|s| s.bytes_sent).sum()
    }
    /// Messages over all stages.
    pub fn messages(&self) -> u64 {
        self.stages.iter().map(|s| s.messages).sum()
    }
    /// Bytes of the stages whose name starts with `prefix`.
    pub fn bytes_of(&self, prefix: &str) -> u64 {
        self.stages.iter().filter(|s| s.name.starts_with(prefix)).map(|s| s.bytes_sent).sum()
    }
}

/// A plain value with a fixed little-endian encoding.
pub(crate) trait Wire: Copy {
    const SIZE: usize;
    fn put(self, out: &mut Vec<u8>);
    fn get(b: &[u8]) -> Self;
}

macro_rules! wire_num {
    ($($t:ty),*) => {$(
        impl Wire for $t {
            const SIZE: usize = std::mem::size_of::<$t>();
            #[inline(always)]
            fn put(self, out: &mut Vec<u8>) {
                out.extend_from_slice(&self.to_le_bytes());
            }
            #[inline(always)]
            fn get(b: &[u8]) -> Self {
                <$t>::from_le_bytes(b[..Self::SIZE].try_into().unwrap())
            }
        }
    )*};
}
wire_num!(u8, u32, u64, i64, f32, f64);

/// Sequential reader over one received message.
pub(crate) struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf, at: 0 }
    }
    #[inline(always)]
    pub fn get<W: Wire>(&mut self) -> W {
        let v = W::get(&self.buf[self.at..]);
        self.at += W::SIZE;
        v
    }
    pub fn done(&self) -> bool {
        self.at >= self.buf.len()
    }
}

/// Bytes received from every rank in one exchange.
pub(crate) struct Received {
    pub buf: Vec<u8>,
    /// Message from rank `r` is `buf[offsets[r]..offsets[r + 1]]`.
    pub offsets: Vec<usize>,
}

impl Received {
    pub fn from(&self, r: usize) -> &[u8] {
        &self.buf[self.offsets[r]..self.offsets[r + 1]]
    }
}

/// A communicator (a duplicate of the caller's) with this rank's place in it.
pub struct Comm {
    comm: SimpleCommunicator,
    pub(crate) rank: usize,
    pub(crate) size: usize,
}

impl Comm {
    /// Takes ownership of `comm` (pass a duplicate of the caller's communicator).
    pub fn new(comm: SimpleCommunicator) -> Self {
        let rank = comm.rank() as usize;
        let size = comm.size() as usize;
        Self { comm, rank, size }
    }

    pub fn rank(&self) -> usize {
        self.rank
    }

    pub fn size(&self) -> usize {
        self.size
    }

    /// Duplicates the communicator whose Fortran handle is `f` (how C and Fortran callers
    /// pass it, so the C header needs no mpi.h). MPI must be initialised.
    pub(crate) fn from_fortran(f: i32) -> Result<Self> {
        if !mpi::is_initialized() || mpi::is_finalized() {
            return Err(Error::Mpi("MPI is not initialised (or already finalised): call MPI_Init before ztree_create_mpi".into()));
        }
        use mpi::ffi;
        use mpi::raw::FromRaw;
        // SAFETY: MPI is initialised; f2c maps any integer to a handle or MPI_COMM_NULL,
        // which is rejected before use. The duplicate is owned by the returned value.
        unsafe {
            let c = ffi::RSMPI_Comm_f2c(f);
            if c == ffi::RSMPI_COMM_NULL {
                return Err(Error::Mpi(format!("communicator handle {f} is MPI_COMM_NULL")));
            }
            let mut dup = std::mem::MaybeUninit::<ffi::MPI_Comm>::uninit();
            let rc = ffi::MPI_Comm_dup(c, dup.as_mut_ptr());
            if rc != ffi::MPI_SUCCESS as i32 {
                return Err(Error::Mpi(format!("MPI_Comm_dup failed on communicator handle {f} (error {rc})")));
            }
            Ok(Self::new(SimpleCommunicator::from_raw(dup.assume_init())))
        }
    }

    /// Frees the duplicated communicator, or leaks it when MPI is already finalised
    /// (freeing it then would abort the program).
    pub(crate) fn release(self) {
        if mpi::is_finalized() {
            std::mem::forget(self.comm);
        }
    }

    /// Every rank learns whether any rank failed: this rank's own error, or `RemoteRank`
    /// naming the lowest failing rank. Collective: every rank must call it.
    pub(crate) fn agree<R>(&self, r: Result<R>) -> Result<R> {
        let mine = if r.is_err() { self.rank as u64 } else { u64::MAX };
        let mut first = u64::MAX;
        self.comm.all_reduce_into(&mine, &mut first, SystemOperation::min());
        match r {
            Err(e) => Err(e),
            Ok(_) if first != u64::MAX => Err(Error::RemoteRank { rank: first as usize }),
            Ok(v) => Ok(v),
        }
    }

    pub(crate) fn sum_u64(&self, v: &[u64]) -> Vec<u64> {
        let mut out = vec![0u64; v.len()];
        self.comm.all_reduce_into(v, &mut out[..], SystemOperation::sum());
        out
    }

    pub(crate) fn max_u64(&self, v: &[u64]) -> Vec<u64> {
        let mut out = vec![0u64; v.len()];
        self.comm.all_reduce_into(v, &mut out[..], SystemOperation::max());
        out
    }

    pub(crate) fn min_f64(&self, v: &[f64]) -> Vec<f64> {
        let mut out = vec![0f64; v.len()];
        self.comm.all_reduce_into(v, &mut out[..], SystemOperation::min());
        out
    }

    /// `v` from every rank, in rank order.
    pub(crate) fn all_gather_u64(&self, v: u64) -> Vec<u64> {
        let mut out = vec![0u64; self.size];
        self.comm.all_gather_into(&v, &mut out[..]);
        out
    }

    /// Every rank's message, concatenated in rank order, on every rank.
    pub(crate) fn all_gather_bytes(&self, name: &'static str, msg: &[u8], stats: &mut CommStats) -> Result<Received> {
        let lens = self.all_gather_u64(msg.len() as u64);
        let total: u64 = lens.iter().sum();
        if total > i32::MAX as u64 {
            return Err(Error::Mpi(format!("{name}: {total} bytes to gather on every rank (more than 2 GiB)")));
        }
        let counts: Vec<i32> = lens.iter().map(|&l| l as i32).collect();
        let offsets = prefix(&lens);
        let displs: Vec<i32> = offsets[..self.size].iter().map(|&o| o as i32).collect();
        let mut buf = Vec::with_capacity((total as usize).max(1));
        buf.resize(total as usize, 0u8);
        // A real allocation even when empty (see `exchange`).
        let mut own = Vec::with_capacity(msg.len().max(1));
        own.extend_from_slice(msg);
        {
            let mut part = PartitionMut::new(&mut buf[..], &counts[..], &displs[..]);
            self.comm.all_gather_varcount_into(&own[..], &mut part);
        }
        stats.add(name, msg.len() as u64 * (self.size as u64 - 1), if msg.is_empty() { 0 } else { self.size as u64 - 1 });
        Ok(Received { buf, offsets: offsets.iter().map(|&o| o as usize).collect() })
    }

    /// `v[r]` to rank r; returns what every rank sent here, in rank order.
    pub(crate) fn all_to_all_u64(&self, v: &[u64]) -> Vec<u64> {
        let mut out = vec![0u64; self.size];
        self.comm.all_to_all_into(v, &mut out[..]);
        out
    }

    /// All-to-all of byte messages (message `r` of `out` goes to rank `r`; the own message
    /// is copied locally).
    pub(crate) fn exchange(&self, name: &'static str, out: &Outbox, stats: &mut CommStats) -> Result<Received> {
        let p = self.size;
        debug_assert_eq!(out.offsets.len(), p + 1);
        let send_lens: Vec<u64> = (0..p).map(|r| out.len_to(r) as u64).collect();
        let recv_lens = self.all_to_all_u64(&send_lens);
        let roff = prefix(&recv_lens);
        // Zeroed (calloc'd, so untouched pages cost nothing): MPI writes into initialised
        // bytes only.
        let mut buf = vec![0u8; roff[p] as usize];
        self.all_to_all_bytes(name, &out.buf, &send_lens, &mut buf, &recv_lens, stats);
        Ok(Received { buf, offsets: roff.iter().map(|&o| o as usize).collect() })
    }

    /// All-to-all between raw buffers, MPI reading and writing them where they are (host
    /// memory, or device memory for a CUDA-aware MPI): `send_lens[r]` bytes for rank r at
    /// `send + send_at[r]`, `recv_lens[r]` bytes from rank r to `recv + recv_at[r]`.
    /// `None` when a count or displacement does not fit MPI's `int` (the caller then
    /// takes `all_to_all_bytes`, which splits the exchange in rounds). Collective.
    ///
    /// # Safety
    /// The ranges lie in the buffers, which MPI may read (send) and write (recv).
    #[allow(clippy::too_many_arguments)]
    pub(crate) unsafe fn all_to_all_raw(
        &self,
        name: &'static str,
        send: *const u8,
        send_lens: &[u64],
        send_at: &[u64],
        recv: *mut u8,
        recv_lens: &[u64],
        recv_at: &[u64],
        stats: &mut CommStats,
    ) -> Option<()> {
        let limit = i32::MAX as u64;
        let big = send_lens.iter().chain(send_at).chain(recv_lens).chain(recv_at).fold(0u64, |a, &b| a.max(b));
        if self.max_u64(&[big])[0] > limit {
            return None;
        }
        let i = |v: &[u64]| v.iter().map(|&x| x as i32).collect::<Vec<i32>>();
        let (sc, sd, rc, rd) = (i(send_lens), i(send_at), i(recv_lens), i(recv_at));
        // Never a dangling or null pointer: OpenMPI's MPI_IN_PLACE is (void *) 1.
        let (one_s, mut one_r) = (0u8, 0u8);
        let send = if send.is_null() || send as usize == 1 { &one_s as *const u8 } else { send };
        let recv = if recv.is_null() || recv as usize == 1 { &mut one_r as *mut u8 } else { recv };
        use mpi::ffi;
        use mpi::raw::AsRaw;
        // SAFETY: the caller's promise; the count and displacement arrays have one entry
        // per rank.
        unsafe {
            ffi::MPI_Alltoallv(
                send.cast(),
                sc.as_ptr(),
                sd.as_ptr(),
                ffi::RSMPI_UINT8_T,
                recv.cast(),
                rc.as_ptr(),
                rd.as_ptr(),
                ffi::RSMPI_UINT8_T,
                self.comm.as_raw(),
            );
        }
        let (bytes, msgs) = (0..self.size).filter(|&r| r != self.rank && send_lens[r] > 0).fold((0u64, 0u64), |(b, m), r| (b + send_lens[r], m + 1));
        stats.add(name, bytes, msgs);
        Some(())
    }

    /// All-to-all of `send` (`send_lens[r]` bytes for rank r, in rank order) into `recv`
    /// (`recv_lens[r]` bytes from rank r, in rank order; every rank's lengths agree with
    /// its peers'). One round straight between the buffers when every count fits MPI's
    /// `int`; otherwise in rounds of bounded size. Collective.
    pub(crate) fn all_to_all_bytes(
        &self,
        name: &'static str,
        send: &[u8],
        send_lens: &[u64],
        recv: &mut [u8],
        recv_lens: &[u64],
        stats: &mut CommStats,
    ) {
        let p = self.size;
        let (soff, roff) = (prefix(send_lens), prefix(recv_lens));
        debug_assert!(soff[p] as usize <= send.len() && roff[p] as usize <= recv.len());
        // Never a dangling empty-slice pointer: OpenMPI's MPI_IN_PLACE is (void *) 1.
        let (one_s, mut one_r) = ([0u8; 1], [0u8; 1]);
        let send = if send.is_empty() { &one_s[..] } else { send };
        let recv = if recv.is_empty() { &mut one_r[..] } else { recv };
        let limit = i32::MAX as u64;
        let fits = self.max_u64(&[soff[p].max(roff[p])])[0] <= limit;
        let to_i32 = |v: &[u64]| v.iter().map(|&x| x as i32).collect::<Vec<i32>>();
        if fits {
            let spart = Partition::new(send, to_i32(send_lens), to_i32(&soff[..p]));
            let mut rpart = PartitionMut::new(recv, to_i32(recv_lens), to_i32(&roff[..p]));
            self.comm.all_to_all_varcount_into(&spart, &mut rpart);
        } else {
            let longest = self.max_u64(&[send_lens.iter().copied().chain(recv_lens.iter().copied()).max().unwrap_or(0)])[0];
            let chunk = (limit / p as u64).max(1);
            for round in 0..longest.div_ceil(chunk) {
                let part = |len: u64| -> u64 { len.saturating_sub(round * chunk).min(chunk) };
                let sc: Vec<u64> = send_lens.iter().map(|&l| part(l)).collect();
                let rc: Vec<u64> = recv_lens.iter().map(|&l| part(l)).collect();
                let mut sbuf = Vec::with_capacity((sc.iter().sum::<u64>() as usize).max(1));
                for r in 0..p {
                    let from = (soff[r] + (round * chunk).min(send_lens[r])) as usize;
                    sbuf.extend_from_slice(&send[from..from + sc[r] as usize]);
                }
                let (sdispl, rdispl) = (prefix(&sc), prefix(&rc));
                let mut rbuf = vec![0u8; (rdispl[p] as usize).max(1)];
                if sbuf.is_empty() {
                    sbuf.push(0);
                }
                {
                    let spart = Partition::new(&sbuf[..], to_i32(&sc), to_i32(&sdispl[..p]));
                    let mut rpart = PartitionMut::new(&mut rbuf[..], to_i32(&rc), to_i32(&rdispl[..p]));
                    self.comm.all_to_all_varcount_into(&spart, &mut rpart);
                }
                for r in 0..p {
                    let dst = (roff[r] + round * chunk) as usize;
                    recv[dst..dst + rc[r] as usize].copy_from_slice(&rbuf[rdispl[r] as usize..rdispl[r + 1] as usize]);
                }
            }
        }
        let (bytes, msgs) = (0..p).filter(|&r| r != self.rank && send_lens[r] > 0).fold((0u64, 0u64), |(b, m), r| (b + send_lens[r], m + 1));
        stats.add(name, bytes, msgs);
    }
}

/// Messages for every rank in one buffer: message `r` is `buf[offsets[r]..offsets[r + 1]]`.
pub(crate) struct Outbox {
    pub buf: Vec<u8>,
    pub offsets: Vec<usize>,
}

impl Outbox {
    /// Concatenates per-rank messages.
    pub fn from_parts(parts: Vec<Vec<u8>>) -> Self {
        let mut offsets = Vec::with_capacity(parts.len() + 1);
        offsets.push(0);
        let total = parts.iter().map(|p| p.len()).sum::<usize>();
        let mut buf = Vec::with_capacity(total.max(1));
        for m in parts {
            buf.extend_from_slice(&m);
            offsets.push(buf.len());
        }
        Self { buf, offsets }
    }

    pub fn len_to(&self, r: usize) -> usize {
        self.offsets[r + 1] - self.offsets[r]
    }
}

fn prefix(v: &[u64]) -> Vec<u64> {
    let mut out = Vec::with_capacity(v.len() + 1);
    let mut s = 0;
    out.push(0);
    for &x in v {
        s += x;
        out.push(s);
    }
    out
}
