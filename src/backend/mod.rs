//! Back ends: the data-parallel stages of the pipeline over buffers the back end owns.
//!
//! The host driver (`crate::pipeline`) orders the stages; a back end implements each one.
//! Buffers are the back end's own type (`Backend::Buf`): host vectors for the CPU, device
//! memory for CUDA. Nothing between two stages needs a host slice, so a device back end
//! keeps all particle-sized data on the device; only small things (plane sizes, the
//! catalogue) come back to the host.
//!
//! Reading the caller's particles is a separate trait, `Ingest<P>`, generic over the
//! caller's representation `P` (any `PointSource` on the CPU, strided device arrays on a
//! GPU), so the CPU's per-point reads stay monomorphised.

pub(crate) mod cpu;
pub(crate) mod cuda;
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
pub(crate) mod dist;

#[cfg(feature = "mpi")]
pub(crate) use dist::DistOps;

pub(crate) use crate::base::Elem;
use crate::base::{LeafJob, TreeParams};
use crate::error::Result;
use crate::geom::Real;
use crate::geom::metric::Metric;
use crate::geom::morton::Quantizer;
use crate::input::{Bounds, Domain};
use crate::pipeline::catalogue::{CatalogueRequest, Counted, GroupRows, Grouped, MemberLists};
use crate::pipeline::knn::LeafFields;
use crate::pipeline::radius::{ListRequest, Radii, RadiusSinks, ZFields};
use crate::pipeline::{KnnSinks, Lists, PointTypes, Prepared, Tree};
use crate::radius::NeighbourLists;

/// The stages of the pipeline, in the order `pipeline` runs them.
pub(crate) trait Backend: Sync + Sized {
    /// A buffer of `len` elements owned by the back end.
    type Buf<T: Elem>: Send + Sync;
    /// A caller's output array of `T` (per-query or per-particle results), written by
    /// several workers at disjoint positions during one stage.
    type Out<'a, T: Elem>: Sync
    where
        Self: 'a;
    /// A caller's per-particle scalar (masses, the field to average), in input order.
    type Scalar<'a>: Copy + Sync;
    /// A caller's per-particle vectors (velocities), in input order.
    type Vectors<'a, const D: usize>: Copy + Sync;
    /// A caller's particle ids, in input order.
    type Ids<'a>: Copy + Sync;
    /// The state of one FoF linking (union–find, per-node connectivity).
    type Links: Send + Sync;
    /// What `plan_tree` chose before the positions exist (the CPU: every plane's node
    /// starts; a back end that chooses the planes with the nodes: nothing).
    type TreePlan;

    #[allow(dead_code)] // for messages and statistics once a second back end exists
    fn name(&self) -> &'static str;
    /// Called at the end of each timed stage of a call (`pipeline::stage`): the CUDA back
    /// end may wait there for the stage's device work (see `Device::end_stage`).
    fn end_stage(&self) {}
    /// The leaf size for `job` when the caller leaves it to ztree (`TreeParams::leaf_size`
    /// 0): jz-tree's 48 unless a back end measured better.
    fn auto_leaf_size(&self, job: LeafJob) -> usize {
        let _ = job;
        48
    }
    fn len<T: Elem>(b: &Self::Buf<T>) -> usize;
    /// Bytes held by a buffer.
    fn bytes<T: Elem>(b: &Self::Buf<T>) -> usize;
    #[allow(dead_code)]
    fn download<T: Elem>(&self, b: &Self::Buf<T>) -> Result<Vec<T>>;
    /// `n` zeros.
    fn zeros<T: Elem>(&self, n: usize) -> Result<Self::Buf<T>>;
    /// `n` elements for a stage that writes every one of them: in the memory of one of
    /// the `spent` buffers (taken from it) where the back end can reuse it, else zeros
    /// (the spent buffers it cannot reuse are then freed first).
    /// (On the CPU fresh memory costs a page fault per 4 KiB in a first call, and the
    /// allocator may not hand freed memory on.)
    fn overwritten<T: Elem>(&self, n: usize, spent: &mut Vec<Self::Buf<u64>>) -> Result<Self::Buf<T>> {
        let _ = spent;
        self.zeros(n)
    }
    /// `overwritten` for each of `D` columns.
    fn overwritten_array<T: Elem, const D: usize>(&self, n: usize, spent: &mut Vec<Self::Buf<u64>>) -> Result<[Self::Buf<T>; D]> {
        let mut v = Vec::with_capacity(D);
        for _ in 0..D {
            v.push(self.overwritten(n, spent)?);
        }
        Ok(v.try_into().unwrap_or_else(|_| unreachable!()))
    }

    // ---- prepare: keys -> sort -> levels -> gather -> refine -> types -> planes -> tree ----

    /// Stable sort of `keys`; returns the permutation (the input index of each sorted key).
    /// A buffer of the sort's own that it no longer needs may go to `spent`.
    fn sort_keys(&self, keys: &mut Self::Buf<u64>, spent: &mut Vec<Self::Buf<u64>>) -> Result<Self::Buf<u32>>;
    /// Levels of the gaps between consecutive sorted keys (see `geom::morton`).
    fn levels(&self, keys: &Self::Buf<u64>) -> Result<Self::Buf<u8>>;
    /// Re-sorts runs of more than `max_run` identical keys by a key over the run's own
    /// bounding box (ties keep their order), permuting `perm` and `pos` alike, and gives
    /// the runs' internal gaps secondary levels.
    fn refine_runs<T: Real, const D: usize>(
        &self,
        keys: &Self::Buf<u64>,
        perm: &mut Self::Buf<u32>,
        levels: &mut Self::Buf<u8>,
        pos: &mut [Self::Buf<T>; D],
        max_run: usize,
    ) -> Result<()>;
    /// Splits merged z-ordered points into sources (`perm < ns`) and queries: their
    /// positions, input indices, and the per-position source prefix count.
    #[allow(clippy::type_complexity)]
    fn split_types<T: Real, const D: usize>(
        &self,
        pos: [Self::Buf<T>; D],
        perm: Self::Buf<u32>,
        ns: usize,
    ) -> Result<([Self::Buf<T>; D], Self::Buf<u32>, [Self::Buf<T>; D], Self::Buf<u32>, Self::Buf<u32>)>;
    /// Whether some run of identical keys is longer than `max_run` (then `refine_runs` has
    /// work, and it needs the positions gathered first). A back end may answer true
    /// when it does not tell.
    fn has_long_runs(&self, levels: &Self::Buf<u8>, max_run: usize) -> Result<bool>;
    /// The planes of the tree as chosen from the gap levels alone, over `n` merged points
    /// (see `Backend::TreePlan`). `spent_keys`: the sort keys, no longer needed (a back end
    /// may build its per-gap scratch in them instead of in fresh memory).
    /// `spent_keys` may be handed on to `spent` afterwards.
    fn plan_tree(
        &self,
        levels: &Self::Buf<u8>,
        n: usize,
        types: PointTypes<'_, Self>,
        params: &TreeParams,
        spent_keys: Self::Buf<u64>,
        spent: &mut Vec<Self::Buf<u64>>,
    ) -> Result<Self::TreePlan>;
    /// The plane hierarchy over the z-ordered points, on the planes of `plan` (made with
    /// the same levels, types and parameters).
    fn build_tree<T: Real, const D: usize>(
        &self,
        plan: Self::TreePlan,
        levels: &Self::Buf<u8>,
        types: PointTypes<'_, Self>,
        src_pos: &[Self::Buf<T>; D],
        qry_pos: Option<&[Self::Buf<T>; D]>,
        params: &TreeParams,
    ) -> Result<Tree<Self, T, D>>;
    /// A caller scalar in the z-order of `orig` (input indices).
    fn gather_scalar(&self, f: Self::Scalar<'_>, orig: &Self::Buf<u32>) -> Result<Self::Buf<f64>>;

    // ---- the dual walk ----

    /// Interaction lists of the super plane: every super node with queries against every
    /// super node with sources.
    fn walk_start<T: Real, const D: usize>(&self, tree: &Tree<Self, T, D>) -> Result<Lists<Self>>;

    // ---- kNN ----

    /// Moves the interaction lists of plane `parent` one plane down: each child keeps the
    /// candidate sources within its k-count radius.
    fn knn_node_pass<T: Real, const D: usize, M: Metric<T, D>>(
        &self,
        metric: &M,
        tree: &Tree<Self, T, D>,
        k: usize,
        parent: usize,
        lists: &Lists<Self>,
    ) -> Result<Lists<Self>>;
    /// The leaf pass: the k nearest sources of every query, written to `sinks`; returns
    /// the candidate leaf pairs seen.
    #[allow(clippy::too_many_arguments)]
    fn knn_leaf_pass<T: Real, const D: usize, M: Metric<T, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        k: usize,
        fields: &LeafFields<'_, Self>,
        lists: &Lists<Self>,
        sinks: &KnnSinks<'_, Self, T>,
    ) -> Result<u64>;
    // ---- FoF ----

    /// A union–find over `n` points (each its own group) and per-node flags.
    fn fof_begin<T: Real, const D: usize>(&self, zs: &Prepared<Self, T, D>) -> Result<Self::Links>;
    /// Each leaf's own point pairs, then the nodes whose children are all internally
    /// connected and in one group.
    fn fof_leaf_self<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        l: f64,
        links: &Self::Links,
    ) -> Result<()>;
    /// Moves the interaction lists of plane `parent` one plane down, linking node pairs
    /// that are entirely within `l` and dropping those farther than `l` or already joined.
    #[allow(clippy::too_many_arguments)]
    fn fof_node_pass<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        l: f64,
        links: &Self::Links,
        parent: usize,
        lists: &Lists<Self>,
    ) -> Result<Lists<Self>>;
    /// Point pairs between different leaves; returns the candidate leaf pairs seen.
    fn fof_leaf_pass<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        l: f64,
        links: &Self::Links,
        lists: &Lists<Self>,
    ) -> Result<u64>;
    /// Every point's root: the z-index of its group's first point.
    fn fof_contract(&self, links: Self::Links) -> Result<Self::Buf<u32>>;
    /// Writes `out[r]` = the input index of row `r`'s query: `orig[r]` (rows in z-order),
    /// or `r` (rows in input order, `orig` None).
    fn row_queries(&self, orig: Option<&Self::Buf<u32>>, n: usize, out: &Self::Out<'_, i64>) -> Result<()>;
    /// The catalogue's root -> kept group map (`pipeline::catalogue`).
    type GroupSlots: Send + Sync;
    /// The kept groups' members in group order.
    type GroupMembers: Send + Sync;
    /// Members per root; the groups (roots) and the kept ones (at least `min_members`),
    /// numbered in z-order of their roots.
    fn catalogue_count(&self, roots: &Self::Buf<u32>, min_members: usize) -> Result<Counted<Self::GroupSlots>>;
    /// The kept groups' members, group after group.
    fn catalogue_order<T: Real, const D: usize>(
        &self,
        zs: &Prepared<Self, T, D>,
        roots: &Self::Buf<u32>,
        counted: &mut Counted<Self::GroupSlots>,
    ) -> Result<Grouped<Self::GroupMembers>>;
    /// One row per kept group (`fof::catalogue::reduce_group` over its members in
    /// ascending input index).
    fn catalogue_rows<T: Real, const D: usize>(
        &self,
        zs: &Prepared<Self, T, D>,
        members: &Self::GroupMembers,
        kept: usize,
        req: &CatalogueRequest<'_, Self, D>,
    ) -> Result<GroupRows<Self, D>>;
    /// Every particle's label (input order): its kept group's tag, or -1.
    fn catalogue_labels<T: Real, const D: usize>(
        &self,
        zs: &Prepared<Self, T, D>,
        roots: &Self::Buf<u32>,
        slots: &Self::GroupSlots,
        tags: &Self::Buf<i64>,
        labels: &Self::Out<'_, i64>,
    ) -> Result<()>;
    /// The kept groups' members' input indices, on the host.
    fn catalogue_members<'a, T: Real, const D: usize>(
        &'a self,
        zs: &'a Prepared<Self, T, D>,
        members: &'a Self::GroupMembers,
    ) -> Result<MemberLists<'a>>;
}

/// The passes of a radius query (`pipeline::radius`).
pub(crate) trait RadiusPasses: Backend {
    /// Per node of every plane, the largest radius of its queries (`per_query` in
    /// z-order; None: a fixed radius, and nothing is made).
    fn radius_node_max<T: Real, const D: usize>(&self, zs: &Prepared<Self, T, D>, per_query: Option<&Self::Buf<f64>>) -> Result<Self::Buf<f64>>;
    /// Moves the interaction lists of plane `parent` one plane down: each child keeps the
    /// sources within its largest radius.
    fn radius_node_pass<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        radii: &Radii<'_, Self>,
        parent: usize,
        lists: &Lists<Self>,
    ) -> Result<Lists<Self>>;
    /// Counts and reductions of every query reached (masses and scalar in z-order);
    /// returns the pairs within the radius.
    fn radius_count_pass<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        radii: &Radii<'_, Self>,
        fields: &ZFields<'_, Self>,
        lists: &Lists<Self>,
        sinks: &RadiusSinks<'_, Self>,
    ) -> Result<u64>;
    /// The neighbour lists, sized from the counting pass's `sinks.counts_z` (`pairs`
    /// entries in all; more than `req.max_bytes` is `Error::OutOfMemory` before they are
    /// allocated).
    #[allow(clippy::too_many_arguments)]
    fn radius_lists<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        radii: &Radii<'_, Self>,
        lists: &Lists<Self>,
        sinks: &RadiusSinks<'_, Self>,
        pairs: u64,
        req: ListRequest,
    ) -> Result<NeighbourLists>;
}

/// Reading the caller's positions of representation `P`.
pub(crate) trait Ingest<P: ?Sized, T: Real, const D: usize>: Backend {
    fn count(&self, pts: &P) -> usize;
    /// Checks every point (finite; inside `[0, L)` when periodic) and returns the
    /// bounding box; the error names the first bad point in input order.
    fn scan(&self, pts: &P, what: &'static str, domain: &Domain<D>) -> Result<Bounds<D>>;
    /// Morton keys of the points, written to `keys[at .. at + len]`.
    fn keys_into(&self, pts: &P, quant: &Quantizer<D>, keys: &mut Self::Buf<u64>, at: usize) -> Result<()>;
    /// `scan` and `keys_into` in one, for a quantizer that needs no bounds (a periodic
    /// domain's): the points are checked as `scan` checks them, and their keys written.
    fn scan_keys_into(
        &self,
        pts: &P,
        what: &'static str,
        domain: &Domain<D>,
        quant: &Quantizer<D>,
        keys: &mut Self::Buf<u64>,
        at: usize,
    ) -> Result<()> {
        self.scan(pts, what, domain)?;
        self.keys_into(pts, quant, keys, at)
    }
    /// The points at input rows `rows`, as one column of points.
    #[cfg_attr(not(feature = "mpi"), allow(dead_code))]
    fn gather_rows(&self, pts: &P, rows: &Self::Buf<u32>) -> Result<Self::Buf<[T; D]>>;
    /// `out[d][z] = pts[perm[z] - first][d]` for every z with `perm[z]` in
    /// `first .. first + len`.
    fn gather_into(&self, pts: &P, perm: &Self::Buf<u32>, first: u32, out: &mut [Self::Buf<T>; D]) -> Result<()>;
}
