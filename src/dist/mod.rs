//! Distributed kNN and FoF over MPI (DESIGN.md §6).
//!
//! Every rank passes the particles it owns, in its own decomposition (any sizes, zero
//! allowed). A call then:
//! 1. agrees on the inputs (every rank validates its own; if any fails, all return an
//!    error) and on the domain (the periodic box, or the global bounding box);
//! 2. cuts the Morton curve into one key range per rank ([`decomp`]) and moves every
//!    particle to the owner of its key in one all-to-all — for FoF together with the
//!    *ghosts*: copies of the particles within the linking length of another rank's
//!    range, so every linked pair meets on the owner of one of its ends;
//! 3. runs the single-rank tree and dual walk on what it owns;
//! 4. settles what crosses ranks: kNN queries whose k-ball reaches another rank's range
//!    are sent there and answered with the candidates inside the ball; FoF groups linked
//!    through ghosts become edges resolved by a global union–find;
//! 5. sends per-particle results back to the rank and input position they came from.
//!
//! Ties are broken by the global input index (rank offset + index on that rank), so
//! results are identical to a single-rank call on the ranks' inputs concatenated in rank
//! order, whatever the number of ranks.

mod catalogue;
pub mod comm;
mod decomp;
pub(crate) mod fof;
pub(crate) mod knn;

use mpi::topology::SimpleCommunicator;
use rayon::prelude::*;

use crate::context::{Config, Context, Timings};
use crate::error::{Error, Result};
use crate::par::{SharedMut, chunk_ranges};
use crate::points::{Bounds, Domain, PointSource};
use crate::real::Real;
use crate::zorder::{Quantizer, scan_points};

pub use comm::{Comm, CommStage, CommStats};
use comm::{Outbox, SliceWriter, Wire};
use decomp::{Decomp, global_bounds};
pub use catalogue::CatalogueScope;
pub use fof::DistFofStats;
pub use knn::DistKnnStats;

/// A [`Context`] bound to a communicator: every call is collective over it.
pub struct Dist {
    ctx: Context,
    comm: Comm,
}

impl Dist {
    /// Takes ownership of `comm`; pass a duplicate of the simulation's communicator
    /// (`comm.duplicate()`) so ztree's messages never mix with the caller's.
    pub fn new(config: Config, comm: SimpleCommunicator) -> Result<Self> {
        Ok(Self { ctx: Context::new(config)?, comm: Comm::new(comm) })
    }

    pub fn comm(&self) -> &Comm {
        &self.comm
    }

    pub fn context(&self) -> &Context {
        &self.ctx
    }

    pub(crate) fn on(&self) -> On<'_> {
        On { ctx: &self.ctx, comm: &self.comm }
    }
}

/// A context and a communicator, borrowed for one collective call.
#[derive(Clone, Copy)]
pub(crate) struct On<'a> {
    pub ctx: &'a Context,
    pub comm: &'a Comm,
}

/// What every rank must agree on before a collective call; mismatches are an error on all
/// ranks rather than a hang or a wrong answer.
fn agree_params(comm: &Comm, what: &str, local: Result<Vec<u64>>) -> Result<()> {
    let v = comm.agree(local)?;
    // Exact on all 64 bits (the words include f64 bit patterns): min(v) = !max(!v).
    let hi = comm.max_u64(&v);
    let lo_inv = comm.max_u64(&v.iter().map(|&x| !x).collect::<Vec<_>>());
    if hi.iter().zip(&lo_inv).any(|(h, l)| *h != !*l) {
        return Err(Error::Mpi(format!("the ranks disagree on the parameters of this {what} call (domain, k, requested outputs or fields must match on every rank)")));
    }
    Ok(())
}

/// Parameters of a domain as numbers, for `agree_params`.
fn domain_words<const D: usize>(domain: &Domain<D>) -> Vec<u64> {
    match domain {
        Domain::Open => vec![0],
        Domain::Periodic(l) => std::iter::once(1).chain(l.iter().map(|x| x.to_bits())).collect(),
    }
}

/// The agreed quantizer and this rank's keys, plus the total particle count.
struct Keys<const D: usize> {
    quant: Quantizer<D>,
    keys: Vec<u64>,
    total: u64,
    /// Global input index of this rank's first particle.
    offset: u64,
}

/// Validates this rank's points (collectively: all ranks fail if one does) and computes
/// the keys over the agreed domain.
fn agree_points<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(dist: On<'_>, domain: &Domain<D>, points: &P, checks: Result<()>) -> Result<Keys<D>> {
    let comm = dist.comm;
    let local = checks.and_then(|_| domain.validate()).and_then(|_| dist.ctx.pool.install(|| scan_points(points, "points", domain)));
    let bounds: Bounds<D> = comm.agree(local)?;
    let gb = global_bounds(comm, &bounds);
    let quant = Quantizer::new(domain, &gb);
    let keys: Vec<u64> = dist.ctx.pool.install(|| {
        (0..points.len())
            .into_par_iter()
            .map(|i| {
                let p = points.point(i);
                quant.key(&std::array::from_fn(|d| p[d].to_f64()))
            })
            .collect()
    });
    let counts = comm.all_gather_u64(points.len() as u64);
    let total = counts.iter().sum();
    let offset = counts[..comm.rank()].iter().sum();
    Ok(Keys { quant, keys, total, offset })
}

/// Lays out the decomposition's messages in one buffer, in parallel over chunks of the
/// input: to each rank, a u64 count of owned records, the owned records (input order),
/// then the ghost records (input order). Particle `i` goes to `owner[i]`, and as a ghost
/// to the ranks `near(i)` lists; `own`/`ghost` encode records of exactly
/// `own_size`/`ghost_size` bytes. Particles that stay on this rank (`owner[i] == me`) are
/// not encoded: the caller reads them in place.
#[allow(clippy::too_many_arguments)]
fn route_records<O, N, G>(n: usize, p: usize, me: usize, owner: &[u32], own_size: usize, own: O, ghost_size: usize, near: Option<N>, ghost: G) -> Outbox
where
    O: Fn(usize, &mut SliceWriter<'_>) + Sync,
    N: Fn(usize, &mut Vec<u32>) + Sync,
    G: Fn(usize, &mut SliceWriter<'_>) + Sync,
{
    let chunks = chunk_ranges(n, rayon::current_num_threads() * 4);
    // Pass 1: owned counts and ghost destinations per chunk.
    let counted: Vec<(Vec<usize>, Vec<(u32, u32)>)> = chunks
        .par_iter()
        .map(|r| {
            let mut cnt = vec![0usize; p];
            let mut gh = Vec::new();
            let mut scratch = Vec::new();
            for i in r.clone() {
                if owner[i] as usize != me {
                    cnt[owner[i] as usize] += 1;
                }
                if let Some(near) = &near {
                    near(i, &mut scratch);
                    gh.extend(scratch.iter().map(|&s| (i as u32, s)));
                }
            }
            (cnt, gh)
        })
        .collect();
    let gcount = |c: usize| {
        let mut g = vec![0usize; p];
        counted[c].1.iter().for_each(|&(_, s)| g[s as usize] += 1);
        g
    };
    let gcounts: Vec<Vec<usize>> = (0..chunks.len()).map(gcount).collect();
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
    let out = SharedMut::new(&mut buf);
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

/// Common stage timing and communication bookkeeping of a distributed call.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DistStats {
    /// Wall time of every stage on this rank, in call order (local walk stages included).
    pub timings: Timings,
    /// Bytes and messages this rank sent, per stage.
    pub comm: CommStats,
    /// Particles this rank owned after the decomposition.
    pub owned: usize,
    /// FoF: ghost copies received; kNN: queries received from other ranks.
    pub imported: usize,
    /// FoF: particles this rank sent as ghosts; kNN: its queries sent to other ranks.
    pub exported: usize,
}
