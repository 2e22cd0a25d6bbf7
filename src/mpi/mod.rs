//! The distribution layer (docs/DESIGN.md §6): distributed kNN and FoF as a layer over the
//! single-rank pipeline.
//!
//! Every rank passes the particles it owns, in its own decomposition (any sizes, zero
//! allowed). A call then:
//! 1. agrees on the inputs (`agree`: every rank validates its own; if any fails, all
//!    return an error) and on the domain (the periodic box, or the global bounding box);
//! 2. cuts the Morton curve into one key range per rank (`decomp`, from key histograms
//!    computed where the particles are) and moves every particle to the owner of its key
//!    (`route`: one column at a time, only other ranks' rows through MPI) — for FoF then
//!    the *ghosts*, copies of the particles within the linking length of another rank's
//!    range, so every linked pair meets on the owner of one of its ends;
//! 3. runs the pipeline (one tree per call) on what it owns;
//! 4. settles what crosses ranks: kNN queries whose k-ball reaches another rank's range
//!    are sent there, answered by ball queries on that rank's tree and merged on their
//!    owner (`knn`); FoF groups linked through ghosts become edges resolved by a global
//!    union–find, and the rows of groups spread over ranks are reduced on a home rank
//!    (`fof::{edges, home}`);
//! 5. sends per-particle results back to the rank and input position they came from.
//!
//! Every step is generic over the back end (`B: DistOps`): with device arrays the columns
//! stay in device memory and the per-particle work runs on the GPU.
//!
//! Ties are broken by the global input index (rank offset + index on that rank), so
//! results are identical to a single-rank call on the ranks' inputs concatenated in rank
//! order, whatever the number of ranks.

mod agree;
pub(crate) use agree::{agree_params, agree_presence, domain_words};
pub(crate) mod comm;
mod decomp;
pub(crate) mod fof;
pub(crate) mod knn;
pub(crate) mod radius;
mod route;

use crate::api::Context;
use crate::base::Timings;

pub(crate) use comm::Comm;
pub use comm::{CommStage, CommStats};
pub use fof::{CatalogueScope, DistFofStats};
pub use knn::DistKnnStats;
pub use radius::DistRadiusStats;

/// A context and a communicator, borrowed for one collective call.
#[derive(Clone, Copy)]
pub(crate) struct On<'a> {
    pub ctx: &'a Context,
    pub comm: &'a Comm,
}

impl On<'_> {
    /// The global input indices of this rank's particles at `sel` (of its `n`): the
    /// counts of the lower ranks plus the index on the rank. Collective.
    pub(crate) fn global_indices(&self, n: usize, sel: &[u32]) -> Vec<u64> {
        use rayon::prelude::*;
        let lo: u64 = self.comm.all_gather_u64(n as u64)[..self.comm.rank()].iter().sum();
        self.ctx.pool.install(|| sel.par_iter().map(|&i| lo + i as u64).collect())
    }
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
