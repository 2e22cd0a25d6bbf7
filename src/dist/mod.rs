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

pub mod comm;
mod decomp;
pub(crate) mod fof;
pub(crate) mod knn;

use mpi::topology::SimpleCommunicator;
use rayon::prelude::*;

use crate::context::{Config, Context, Timings};
use crate::error::{Error, Result};
use crate::par::chunk_ranges;
use crate::points::{Bounds, Domain, PointSource};
use crate::real::Real;
use crate::zorder::{Quantizer, scan_points};

pub use comm::{Comm, CommStage, CommStats};
use decomp::{Decomp, global_bounds};
pub use fof::{CatalogueScope, DistFofStats};
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
    let lo = comm.min_f64(&v.iter().map(|&x| x as f64).collect::<Vec<_>>());
    let neg: Vec<f64> = v.iter().map(|&x| -(x as f64)).collect();
    let hi = comm.min_f64(&neg);
    if lo.iter().zip(&hi).any(|(a, b)| *a != -*b) {
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

/// Encodes records for every destination, in input order, in parallel over chunks:
/// `enc(i, bufs)` appends particle `i`'s records to the buffers of its destinations.
fn route<F>(n: usize, ranks: usize, enc: F) -> Vec<Vec<u8>>
where
    F: Fn(usize, &mut [Vec<u8>], &mut Vec<u32>) + Sync,
{
    let parts: Vec<Vec<Vec<u8>>> = chunk_ranges(n, rayon::current_num_threads() * 4)
        .into_par_iter()
        .map(|r| {
            let mut bufs = vec![Vec::new(); ranks];
            let mut scratch = Vec::new();
            for i in r {
                enc(i, &mut bufs, &mut scratch);
            }
            bufs
        })
        .collect();
    (0..ranks)
        .map(|d| {
            let mut out = Vec::with_capacity(parts.iter().map(|p| p[d].len()).sum());
            for p in &parts {
                out.extend_from_slice(&p[d]);
            }
            out
        })
        .collect()
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
