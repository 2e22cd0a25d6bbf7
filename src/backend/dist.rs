//! What the distribution layer (`crate::mpi`) asks of a back end, beyond the pipeline's
//! stages: the per-particle work of a distributed call, done where the particles are.
//!
//! A distributed call moves particles and results between ranks as *columns*: one buffer
//! per quantity (a coordinate, the global index, a mass, a result), its rows ordered by
//! destination rank. The back end computes the keys' owners, orders rows by destination,
//! gathers and scatters the columns, finds the points whose balls reach other ranks, and
//! answers and merges the kNN queries that cross ranks; the distribution layer only moves
//! the columns' bytes between ranks (`mpi::route`) and keeps the small host-side state
//! (splitters, edges between ranks' groups). On the CPU a column is a `Vec`; on a GPU it
//! is device memory, and only the bytes that go to other ranks cross to the host.

use std::borrow::Cow;

use super::{Backend, Elem};
use crate::error::Result;
use crate::geom::Real;
use crate::geom::decomp::Decomp;
use crate::geom::metric::Metric;
use crate::pipeline::Prepared;

/// The radius around each row's point within which other ranks' ranges are looked for.
pub(crate) enum Reach<'a, B: Backend, T: Elem> {
    /// One radius for every row (FoF: the linking length).
    Fixed(f64),
    /// Per row, a squared radius (kNN: the k-th distance² among the rank's own sources),
    /// widened by more than the rounding of distances in `T` (see `widened_radius`).
    Squared(&'a B::Buf<T>),
}

/// The radius of a ball of squared radius `r2` (computed in `T`) around `x`, widened so
/// that no point a rounded distance puts inside is missed: relative `64 ε` on the radius,
/// and `64 ε` times the largest coordinate magnitude (or box length, `span`).
pub(crate) fn widened_radius<const D: usize>(r2: f64, x: &[f64; D], span: f64, eps: f64) -> f64 {
    let mag = x.iter().fold(span, |a, &b| a.max(b.abs()));
    r2.sqrt() * (1.0 + 64.0 * eps) + 64.0 * eps * mag
}

/// The kNN merge on a query's owner: the inputs of `DistOps::knn_merge`.
pub(crate) struct MergeJob<'a, B: Backend, T: Elem> {
    pub k: usize,
    /// The boundary queries (rows of the own queries whose balls reach other ranks),
    /// ascending.
    pub boundary: &'a B::Buf<u32>,
    /// Per boundary query: its own k best among this rank's sources (`k` local source
    /// indices, -1 pads, and their squared distances).
    pub own_idx: &'a B::Buf<i64>,
    pub own_d2: &'a B::Buf<T>,
    /// The (query row, rank) pairs the queries were shipped as, grouped by rank, and per
    /// pair the number of candidates its rank sent back; the candidates of all pairs are
    /// concatenated in pair order.
    pub pair_rows: &'a B::Buf<u32>,
    pub reply_counts: &'a B::Buf<u32>,
    pub reply_d2: &'a B::Buf<T>,
    pub reply_gidx: &'a B::Buf<u64>,
    pub reply_mass: Option<&'a B::Buf<f64>>,
    pub reply_scalar: Option<&'a B::Buf<f64>>,
    /// This rank's sources: global index, mass and scalar (by local source index).
    pub gidx: &'a B::Buf<u64>,
    pub mass: Option<&'a B::Buf<f64>>,
    pub scalar: Option<&'a B::Buf<f64>>,
    /// In a self-query, each query's own global index ranks first among equal distances.
    pub self_query: bool,
}

/// Per own query, the rows a merge completes (the local pass's results, in the queries'
/// owned order): squared k-th distance, density, scalar mean, and the lists (`k` global
/// source indices and squared distances) when wanted.
pub(crate) struct MergeRows<'a, B: Backend, T: Elem> {
    pub kth_d2: &'a mut B::Buf<T>,
    pub density: Option<&'a mut B::Buf<f64>>,
    pub scalar_mean: Option<&'a mut B::Buf<f64>>,
    pub idx: Option<&'a mut B::Buf<i64>>,
    pub d2: Option<&'a mut B::Buf<T>>,
}

/// A FoF rank's fragments: its local groups restricted to the particles it owns.
pub(crate) struct Fragments<B: Backend> {
    pub n_frag: usize,
    /// The fragment of each owned particle (owned order); fragments are numbered in
    /// z-order of their first owned particle.
    pub frag_of: B::Buf<u32>,
    /// Ghosts linked to an owned fragment (the edges to other ranks): the ghost's row
    /// among the ghosts, and the fragment, ascending by ghost row.
    pub edge_ghost: Vec<u32>,
    pub edge_frag: Vec<u32>,
}

/// What the rows of groups read: per point (owned order), its position, velocity, mass
/// and tag.
pub(crate) struct GroupFields<'a, B: Backend, T: Elem, const D: usize> {
    pub pos: &'a B::Buf<[T; D]>,
    pub vel: Option<&'a [B::Buf<f64>; D]>,
    pub mass: Option<&'a B::Buf<f64>>,
    /// The mass of every point when `mass` is absent.
    pub particle_mass: f64,
    pub tag: &'a B::Buf<i64>,
    pub box_len: Option<[f64; D]>,
}

/// The distribution layer's per-particle work (see the module docs).
pub(crate) trait DistOps: Backend {
    /// `n` copies of `v`.
    fn filled<T: Elem>(&self, n: usize, v: T) -> Result<Self::Buf<T>>;
    /// For each interval `(lo, hi, shift)` of `shapes`, the counts of the keys in
    /// `[lo, hi)` in `bins` bins of `2^shift` keys (bin `(key - lo) >> shift`), interval
    /// after interval.
    fn key_histogram(&self, keys: &Self::Buf<u64>, shapes: &[(u128, u128, u32)], bins: usize) -> Result<Vec<u64>>;
    /// The rank owning each key: the number of `starts[1..]` at or below it.
    fn key_owners(&self, keys: &Self::Buf<u64>, starts: &[u128]) -> Result<Self::Buf<u32>>;
    /// The rows grouped by their rank in `dest` (ascending rows within a rank), and how
    /// many go to each of the `ranks` ranks.
    fn group_by_rank(&self, dest: &Self::Buf<u32>, ranks: usize) -> Result<(Self::Buf<u32>, Vec<usize>)>;
    /// The rows of points `pos` (owned by rank `me`) whose ball (`reach`) may hold points
    /// of other ranks' key ranges, once per such rank: the rows grouped by rank (ascending
    /// within each) and the count per rank. Conservative, as `Decomp::near_ranks`.
    /// `keys`: the points' keys under `decomp.quant` when at hand.
    fn near_pairs<T: Real, const D: usize>(
        &self,
        decomp: &Decomp<D>,
        me: usize,
        pos: &Self::Buf<[T; D]>,
        keys: Option<&Self::Buf<u64>>,
        reach: Reach<'_, Self, T>,
    ) -> Result<(Self::Buf<u32>, Vec<usize>)>;
    /// Rows `rows` of `src`, each `width` elements: `out[j * w + i] = src[rows[j] * w + i]`.
    fn gather<T: Elem>(&self, src: &Self::Buf<T>, rows: &Self::Buf<u32>, width: usize) -> Result<Self::Buf<T>>;
    /// `offset + rows[j]`: global indices of input rows.
    fn offset_rows(&self, rows: &Self::Buf<u32>, offset: u64) -> Result<Self::Buf<u64>>;
    /// `a` followed by `b` (in `a`'s memory where the back end can grow it).
    fn append<T: Elem>(&self, a: Self::Buf<T>, b: &Self::Buf<T>) -> Result<Self::Buf<T>>;
    /// The sums of `v` over consecutive segments of the given lengths.
    fn segment_sums(&self, v: &Self::Buf<u32>, segments: &[usize]) -> Result<Vec<usize>>;
    /// Element-wise square roots.
    fn sqrt<T: Real>(&self, v: &Self::Buf<T>) -> Result<Self::Buf<T>>;
    /// A buffer for `n` elements that an exchange fills (zeroed on the CPU, where untouched
    /// pages cost nothing).
    fn landing<T: Elem>(&self, n: usize) -> Result<Self::Buf<T>>;
    /// The buffer's elements when they are host memory (the CPU's), for MPI in place.
    fn host_slice<'a, T: Elem>(&self, b: &'a Self::Buf<T>) -> Option<&'a [T]>;
    fn host_slice_mut<'a, T: Elem>(&self, b: &'a mut Self::Buf<T>) -> Option<&'a mut [T]>;
    /// The buffer's device address for a CUDA-aware MPI, once the device's queued work
    /// is done (MPI reads and writes it outside the stream's order); None: not device
    /// memory.
    fn device_ptr<T: Elem>(&self, b: &Self::Buf<T>) -> Result<Option<u64>>;
    /// `out.len()` elements of `b` from element `at`, into host memory.
    fn download_range<T: Elem>(&self, b: &Self::Buf<T>, at: usize, out: &mut [T]) -> Result<()>;
    /// `data` into `b` from element `at`.
    fn upload_range<T: Elem>(&self, b: &mut Self::Buf<T>, at: usize, data: &[T]) -> Result<()>;
    /// `len` elements of `src` from `from` into `dst` from `to` (where they live).
    fn copy_range<T: Elem>(&self, src: &Self::Buf<T>, from: usize, dst: &mut Self::Buf<T>, to: usize, len: usize) -> Result<()>;
    /// The buffer's elements in host memory (the CPU's: borrowed, no copy).
    fn to_host<'a, T: Elem>(&self, b: &'a Self::Buf<T>) -> Result<Cow<'a, [T]>>;
    /// A buffer holding `v` (the CPU's: `v` itself).
    fn upload_host<T: Elem>(&self, v: Vec<T>) -> Result<Self::Buf<T>>;
    /// Views of the back end's own buffers as the pipeline's caller fields and outputs.
    fn scalar_of<'a>(&self, b: &'a Self::Buf<f64>) -> Self::Scalar<'a>;
    fn out_of<'a, T: Elem>(&self, b: &'a mut Self::Buf<T>) -> Self::Out<'a, T>;
    /// Caller fields at input rows `rows`.
    fn gather_vectors<const D: usize>(&self, v: Self::Vectors<'_, D>, rows: &Self::Buf<u32>) -> Result<[Self::Buf<f64>; D]>;
    fn gather_ids(&self, ids: Self::Ids<'_>, rows: &Self::Buf<u32>) -> Result<Self::Buf<i64>>;
    /// `out[rows[j] * w + i] = vals[j * w + i]`: results into a caller's array.
    fn scatter_out<T: Elem>(&self, out: &Self::Out<'_, T>, rows: &Self::Buf<u32>, vals: &Self::Buf<T>, width: usize) -> Result<()>;

    // ---- kNN ----

    /// For each query (positions `queries`, squared radii `r2`), the sources of `zs`
    /// within the radius, at most `k`, by (distance², source input index) — `first[q]`,
    /// when given, ranked first among equal distances: rows of `k` source input indices
    /// (-1 pads) and squared distances (+inf pads).
    #[allow(clippy::too_many_arguments)]
    fn ball_query<T: Real, const D: usize, M: Metric<T, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        queries: &Self::Buf<[T; D]>,
        r2: &Self::Buf<T>,
        first: Option<&Self::Buf<u32>>,
        k: usize,
    ) -> Result<(Self::Buf<i64>, Self::Buf<T>)>;
    /// The number of leading valid entries (`>= 0`) of each row of `width` indices.
    fn row_counts(&self, idx: &Self::Buf<i64>, width: usize) -> Result<Self::Buf<u32>>;
    /// Indices known to be valid (`>= 0`) as rows.
    fn index_rows(&self, idx: &Self::Buf<i64>) -> Result<Self::Buf<u32>>;
    /// The distinct values of `rows` (each below `n`), ascending.
    fn distinct_rows(&self, rows: &Self::Buf<u32>, n: usize) -> Result<Self::Buf<u32>>;
    /// The first `counts[r]` entries of each row `r` of `width`, concatenated.
    fn compact_rows<T: Elem>(&self, v: &Self::Buf<T>, counts: &Self::Buf<u32>, width: usize) -> Result<Self::Buf<T>>;
    /// Merges every boundary query's own k best with the candidates other ranks sent:
    /// the k best by (distance², not itself, global index), then the k-th distance and
    /// the reductions as the single-rank leaf pass computes them.
    fn knn_merge<T: Real, const D: usize>(&self, job: &MergeJob<'_, Self, T>, rows: MergeRows<'_, Self, T>) -> Result<()>;
    /// Replaces the local source indices in the rows of `idx` (`width` each) that are not
    /// `skip` rows by their global indices `gidx`.
    fn globalize_rows(&self, idx: &mut Self::Buf<i64>, width: usize, gidx: &Self::Buf<u64>, skip: &Self::Buf<u32>) -> Result<()>;

    // ---- FoF ----

    /// The fragments of a local linking over `n_own` owned points followed by ghosts
    /// (`orig`: each z-ordered point's local row; `roots`: its root).
    fn fof_fragments(&self, orig: &Self::Buf<u32>, roots: &Self::Buf<u32>, n_own: usize) -> Result<Fragments<Self>>;
    /// Per fragment: member count and smallest tag.
    fn fragment_sums(&self, frag_of: &Self::Buf<u32>, tag: &Self::Buf<i64>, n_frag: usize) -> Result<(Self::Buf<u64>, Self::Buf<i64>)>;
    /// `dst[rows[j]] = vals[j]` (values in host memory: a few per call).
    fn scatter_host<T: Elem>(&self, dst: &mut Self::Buf<T>, rows: &[u32], vals: &[T]) -> Result<()>;
    /// Per fragment, its label: the tag when its group holds at least `min` members, else -1.
    fn fragment_labels(&self, count: &Self::Buf<u64>, tag: &Self::Buf<i64>, min: u64) -> Result<Self::Buf<i64>>;
    /// The fragments whose `count` is at least `min`, ascending.
    fn kept_fragments(&self, count: &Self::Buf<u64>, min: u64) -> Result<Vec<u32>>;
    /// Per point, the place of its fragment in `frags` (ascending), or `u32::MAX`.
    fn select_groups(&self, frag_of: &Self::Buf<u32>, n_frag: usize, frags: &[u32]) -> Result<Self::Buf<u32>>;
    /// The members of groups `0 .. n_groups` (`group_of`: each point's group or
    /// `u32::MAX`): their points sorted by group, then point, and the `n_groups + 1`
    /// offsets of the groups' ranges.
    fn group_members(&self, group_of: &Self::Buf<u32>, n_groups: usize) -> Result<(Vec<u64>, Self::Buf<u32>)>;
    /// The catalogue row of each group of `group_members`'s ranges, reduced over its
    /// members in ascending point order (`crate::fof::catalogue::reduce_group`).
    fn group_rows<T: Real, const D: usize>(
        &self,
        members: &Self::Buf<u32>,
        offsets: &[u64],
        fields: &GroupFields<'_, Self, T, D>,
    ) -> Result<Vec<crate::fof::catalogue::Row<D>>>;
    /// Per value of `values`, the row of `sorted` (ascending) that holds it.
    fn find_rows(&self, sorted: &Self::Buf<u64>, values: &Self::Buf<u64>) -> Result<Self::Buf<u32>>;
    /// The values as i64 (global indices as tags).
    fn to_i64(&self, v: &Self::Buf<u64>) -> Result<Self::Buf<i64>>;
    /// The rows of `a` followed by `b` in ascending order of their (distinct) values: row
    /// `i < a.len()` is `a[i]`, the others `b[i - a.len()]`. (Through host memory unless
    /// a back end does better: on the CPU that is its own memory.)
    fn merge_order(&self, a: &Self::Buf<u64>, b: &Self::Buf<u64>) -> Result<Self::Buf<u32>> {
        use rayon::prelude::*;
        let (a, b) = (self.to_host(a)?, self.to_host(b)?);
        let na = a.len();
        let mut order: Vec<u32> = (0..(na + b.len()) as u32).collect();
        order.par_sort_unstable_by_key(|&i| if (i as usize) < na { a[i as usize] } else { b[i as usize - na] });
        self.upload_host(order)
    }
    /// `out[j]` = row `order[j]` of `a` followed by `b`.
    fn gather_joined<T: Elem>(&self, a: &Self::Buf<T>, b: &Self::Buf<T>, order: &Self::Buf<u32>) -> Result<Self::Buf<T>> {
        use rayon::prelude::*;
        let (a, b, order) = (self.to_host(a)?, self.to_host(b)?, self.to_host(order)?);
        let na = a.len();
        let out: Vec<T> = order.par_iter().map(|&i| if (i as usize) < na { a[i as usize] } else { b[i as usize - na] }).collect();
        self.upload_host(out)
    }
}
