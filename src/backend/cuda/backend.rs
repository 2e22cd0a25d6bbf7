//! `impl Backend for Cuda`: the pipeline's stages over device buffers.
//!
//! On the device: input checks and bounds, Morton keys of the caller's strided arrays, the
//! stable radix sort with permutation, the gap levels, the gathers of positions and fields
//! into z-order, the refinement of runs of identical keys (`refine`), the split into
//! sources and queries, plane construction (`tree`), the kNN walk (`walk`), the FoF
//! linking (`fof`), the catalogue (`catalogue`) and the FoF field checks; the distribution
//! layer's work in `dist`.

use std::marker::PhantomData;
use std::sync::Arc;

use super::device::{DevBuf, DevPtr, Device};
use super::prims::{self, Strided};
use super::{catalogue, fof, refine, tree, walk};
use crate::backend::{Backend, Elem, Ingest, LeafJob};
use crate::base::TreeParams;
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::geom::metric::Metric;
use crate::geom::morton::Quantizer;
use crate::input::{Bounds, Domain};
use crate::pipeline::catalogue::{CatalogueRequest, Counted, GroupRows, Grouped, MemberLists};
use crate::pipeline::knn::LeafFields;
use crate::pipeline::planes::{HostTree, host_tree};
use crate::pipeline::{KnnSinks, Lists, PointTypes, Prepared, Tree};

/// The CUDA back end on one device (real or emulated).
pub(crate) struct Cuda {
    pub dev: Arc<dyn Device>,
}

/// A caller's device array written by a stage (per-query or per-particle results).
pub(crate) struct DevOut<'a, T> {
    pub ptr: DevPtr,
    pub len: usize,
    /// The array holds f64 though the stage computes `T` (f32 points, the C API's doubles):
    /// the kernel writes each value widened, with no f32 array between.
    pub wide: bool,
    _borrow: PhantomData<&'a mut [T]>,
}

impl<T> DevOut<'_, T> {
    /// # Safety
    /// `ptr` is device memory of `len` elements of `T`, not otherwise used during the call.
    pub(crate) unsafe fn new(ptr: DevPtr, len: usize) -> Self {
        Self { ptr, len, wide: false, _borrow: PhantomData }
    }
    /// # Safety
    /// `ptr` is device memory of `len` f64 elements, not otherwise used during the call.
    pub(crate) unsafe fn new_wide(ptr: DevPtr, len: usize) -> Self {
        Self { ptr, len, wide: true, _borrow: PhantomData }
    }
}

/// Element types of caller fields on the device.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum FieldType {
    F32,
    F64,
    I32,
    I64,
    U32,
    U64,
}

impl FieldType {
    fn size(self) -> usize {
        match self {
            FieldType::F32 | FieldType::I32 | FieldType::U32 => 4,
            _ => 8,
        }
    }
}

/// A caller's per-particle field on the device (masses, a scalar, one velocity component,
/// ids), in input order.
#[derive(Clone, Copy, Debug)]
pub(crate) struct DevField<'a> {
    pub a: Strided,
    pub ty: FieldType,
    pub n: usize,
    pub _borrow: PhantomData<&'a [u8]>,
}

/// A caller's positions on the device: `n` points, one strided array per dimension.
pub(crate) struct DevPoints<'a, T, const D: usize> {
    pub pos: [Strided; D],
    pub n: usize,
    pub _borrow: PhantomData<&'a [T]>,
}

impl Cuda {
    fn host<T: Elem>(&self, b: &DevBuf<T>) -> Result<Vec<T>> {
        b.to_vec()
    }
    fn dev<T: Elem>(&self, v: &[T]) -> Result<DevBuf<T>> {
        DevBuf::from_slice(&self.dev, v)
    }
    fn host_arr<T: Elem, const D: usize>(&self, a: &[DevBuf<T>; D]) -> Result<[Vec<T>; D]> {
        let mut v = Vec::with_capacity(D);
        for b in a {
            v.push(b.to_vec()?);
        }
        Ok(v.try_into().unwrap_or_else(|_| unreachable!()))
    }
    fn fetch(&self, a: Strided, n: usize, size: usize) -> Result<Vec<u8>> {
        prims::download_strided(&self.dev, a, n, size)
    }
    pub(crate) fn fetch_f64(&self, f: &DevField<'_>) -> Result<Vec<f64>> {
        let raw = self.fetch(f.a, f.n, f.ty.size())?;
        let c4 = |c: &[u8]| <[u8; 4]>::try_from(c).unwrap();
        let c8 = |c: &[u8]| <[u8; 8]>::try_from(c).unwrap();
        Ok(match f.ty {
            FieldType::F32 => raw.chunks_exact(4).map(|c| f32::from_ne_bytes(c4(c)) as f64).collect(),
            FieldType::F64 => raw.chunks_exact(8).map(|c| f64::from_ne_bytes(c8(c))).collect(),
            other => return Err(Error::Device(format!("a real field of type {other:?}"))),
        })
    }
    /// An integer field (ids) on the host, as i64 (u64 ids checked to fit).
    pub(crate) fn fetch_ids(&self, f: &DevField<'_>) -> Result<Vec<i64>> {
        let raw = self.fetch(f.a, f.n, f.ty.size())?;
        let c4 = |c: &[u8]| <[u8; 4]>::try_from(c).unwrap();
        let c8 = |c: &[u8]| <[u8; 8]>::try_from(c).unwrap();
        Ok(match f.ty {
            FieldType::I32 => raw.chunks_exact(4).map(|c| i32::from_ne_bytes(c4(c)) as i64).collect(),
            FieldType::U32 => raw.chunks_exact(4).map(|c| u32::from_ne_bytes(c4(c)) as i64).collect(),
            FieldType::I64 | FieldType::U64 => raw.chunks_exact(8).map(|c| i64::from_ne_bytes(c8(c))).collect(),
            other => return Err(Error::Device(format!("an integer field of type {other:?}"))),
        })
    }
    /// Checks device fields as the host checks them (src/input/validate.rs), on the device;
    /// only a failing element comes to the host, for the message.
    pub(crate) fn validate_fof_fields<const D: usize>(
        &self,
        vel: Option<&[DevField<'_>; D]>,
        masses: Option<&DevField<'_>>,
        particle_mass: f64,
        ids: Option<&DevField<'_>>,
        n: usize,
    ) -> Result<()> {
        let one = |f: &DevField<'_>, i: usize| -> Result<f64> { Ok(self.fetch_f64(&DevField { a: f.a.at(i, f.ty.size()), n: 1, ..*f })?[0]) };
        if let Some(v) = vel {
            let mut first = None::<usize>;
            for f in v {
                first = match (first, catalogue::first_bad(&self.dev, f, 0)?) {
                    (Some(a), Some(b)) => Some(a.min(b)),
                    (a, b) => a.or(b),
                };
            }
            if let Some(i) = first {
                for (d, f) in v.iter().enumerate() {
                    let x = one(f, i)?;
                    if !x.is_finite() {
                        return Err(Error::NonFinite { what: "velocities", index: i, dim: d, value: x });
                    }
                }
            }
        }
        match masses {
            Some(m) => {
                if let Some(i) = catalogue::first_bad(&self.dev, m, 0)? {
                    return Err(Error::NonFiniteValue { what: "masses", index: i, value: one(m, i)? });
                }
                if let Some(i) = catalogue::first_bad(&self.dev, m, 1)? {
                    return Err(Error::InvalidParameter { name: "masses", why: format!("mass {i} is {} (masses must be > 0)", one(m, i)?) });
                }
            }
            None if !(particle_mass.is_finite() && particle_mass > 0.0) => {
                return Err(Error::InvalidParameter { name: "particle_mass", why: format!("must be finite and > 0 (got {particle_mass})") });
            }
            None => {}
        }
        if let Some(f) = ids.filter(|f| f.ty == FieldType::U64)
            && let Some(i) = catalogue::first_bad(&self.dev, f, 2)?
        {
            return Err(Error::InvalidParameter { name: "ids", why: format!("id {i} does not fit a signed 64-bit integer") });
        }
        debug_assert!(vel.into_iter().flatten().chain(masses).chain(ids).all(|f| f.n == n), "a field of another length");
        Ok(())
    }
    pub(crate) fn fetch_points<T: Real, const D: usize>(&self, p: &DevPoints<'_, T, D>) -> Result<Vec<[T; D]>> {
        let mut coords = Vec::with_capacity(D);
        for d in 0..D {
            let raw = self.fetch(p.pos[d], p.n, size_of::<T>())?;
            // SAFETY: each chunk holds one `T` (f32 or f64: any bits are a value).
            coords.push(raw.chunks_exact(size_of::<T>()).map(|c| unsafe { std::ptr::read_unaligned(c.as_ptr().cast::<T>()) }).collect::<Vec<T>>());
        }
        Ok((0..p.n).map(|i| std::array::from_fn(|d| coords[d][i])).collect())
    }
    fn dev_tree<T: Real, const D: usize>(&self, t: HostTree<T, D>) -> Result<Tree<Cuda, T, D>> {
        // The kernels read query columns: a self-query tree's are its source columns.
        let shared = t.shares_queries();
        let q = |qry: &Vec<u32>, src: &Vec<u32>| self.dev(if shared { src } else { qry });
        let qb = |qry: &Vec<[T; D]>, src: &Vec<[T; D]>| self.dev(if shared { src } else { qry });
        Ok(Tree {
            planes: t.planes,
            start: self.dev(&t.start)?,
            src_start: self.dev(&t.src_start)?,
            src_count: self.dev(&t.src_count)?,
            qry_start: q(&t.qry_start, &t.src_start)?,
            qry_count: q(&t.qry_count, &t.src_count)?,
            src_lo: self.dev(&t.src_lo)?,
            src_hi: self.dev(&t.src_hi)?,
            qry_lo: qb(&t.qry_lo, &t.src_lo)?,
            qry_hi: qb(&t.qry_hi, &t.src_hi)?,
            child_start: self.dev(&t.child_start)?,
            child_count: self.dev(&t.child_count)?,
            level_caps: t.level_caps,
        })
    }
}

impl Backend for Cuda {
    type Buf<T: Elem> = DevBuf<T>;
    type Out<'a, T: Elem> = DevOut<'a, T>;
    type Scalar<'a> = DevField<'a>;
    type Vectors<'a, const D: usize> = [DevField<'a>; D];
    type Ids<'a> = DevField<'a>;
    type Links = fof::DevLinks;
    type TreePlan = ();

    fn name(&self) -> &'static str {
        "cuda"
    }
    fn end_stage(&self) {
        self.dev.end_stage();
    }
    /// FoF's leaf passes cost less per point with 64-point leaves (fewer leaf pairs, the
    /// warp's lanes fuller). kNN (k >= 2) with 96 as on the CPU: on an H200, uniform 1e6 to
    /// 1e8, 0.84-1.09x the time of jz-tree's 48 (0.94x geometric mean), the leaves' second
    /// and third 32-query rounds fuller (BENCHMARKS.md); k = 1 keeps 48.
    fn auto_leaf_size(&self, job: LeafJob) -> usize {
        match job {
            LeafJob::Fof => 64,
            LeafJob::Knn { k } if k < 2 => 48,
            LeafJob::Knn { .. } => 96,
        }
    }
    fn len<T: Elem>(b: &DevBuf<T>) -> usize {
        b.len()
    }
    fn bytes<T: Elem>(b: &DevBuf<T>) -> usize {
        b.len() * size_of::<T>()
    }
    fn download<T: Elem>(&self, b: &DevBuf<T>) -> Result<Vec<T>> {
        b.to_vec()
    }
    fn zeros<T: Elem>(&self, n: usize) -> Result<DevBuf<T>> {
        DevBuf::zeros(&self.dev, n)
    }
    fn sort_keys(&self, keys: &mut DevBuf<u64>, _spent: &mut Vec<DevBuf<u64>>) -> Result<DevBuf<u32>> {
        let mut perm = prims::iota(&self.dev, keys.len())?;
        // Cut to the bits the tree uses, as the CPU sorts them (the same tree).
        prims::sort_pairs(&self.dev, keys, &mut perm, crate::geom::morton::bits_kept(keys.len()))?;
        Ok(perm)
    }
    fn levels(&self, keys: &DevBuf<u64>) -> Result<DevBuf<u8>> {
        prims::levels(&self.dev, keys)
    }
    fn refine_runs<T: Real, const D: usize>(
        &self,
        keys: &DevBuf<u64>,
        perm: &mut DevBuf<u32>,
        levels: &mut DevBuf<u8>,
        pos: &mut [DevBuf<T>; D],
        max_run: usize,
    ) -> Result<()> {
        refine::refine_runs(&self.dev, keys, perm, levels, pos, max_run)
    }
    #[allow(clippy::type_complexity)]
    fn split_types<T: Real, const D: usize>(
        &self,
        pos: [DevBuf<T>; D],
        perm: DevBuf<u32>,
        ns: usize,
    ) -> Result<([DevBuf<T>; D], DevBuf<u32>, [DevBuf<T>; D], DevBuf<u32>, DevBuf<u32>)> {
        prims::split_types(&self.dev, &pos, &perm, ns)
    }
    fn has_long_runs(&self, _levels: &DevBuf<u8>, _max_run: usize) -> Result<bool> {
        // Not told on the device: the pipeline then gathers before `refine_runs`, as
        // it always did here (the device's scratch is not fresh host pages).
        Ok(true)
    }
    fn plan_tree(
        &self,
        _levels: &DevBuf<u8>,
        _n: usize,
        _types: PointTypes<'_, Self>,
        _params: &TreeParams,
        spent_keys: DevBuf<u64>,
        _spent: &mut Vec<DevBuf<u64>>,
    ) -> Result<()> {
        // The device chooses the planes as it makes the nodes (`tree::build`).
        drop(spent_keys);
        Ok(())
    }
    fn build_tree<T: Real, const D: usize>(
        &self,
        _plan: (),
        levels: &DevBuf<u8>,
        types: PointTypes<'_, Self>,
        src_pos: &[DevBuf<T>; D],
        qry_pos: Option<&[DevBuf<T>; D]>,
        params: &TreeParams,
    ) -> Result<Tree<Self, T, D>> {
        let points = src_pos[0].len() + qry_pos.map_or(0, |q| q[0].len());
        if points > 0 {
            return tree::build(self, levels, types, src_pos, qry_pos, params);
        }
        // No points: the CPU's empty tree, staged.
        let prefix = match types {
            PointTypes::Same => None,
            PointTypes::Joint { src_prefix } => Some(self.host(src_prefix)?),
        };
        let htypes = match &prefix {
            None => PointTypes::Same,
            Some(p) => PointTypes::Joint { src_prefix: p },
        };
        let qp = qry_pos.map(|q| self.host_arr(q)).transpose()?;
        let hlevels = self.host(levels)?;
        self.dev_tree(host_tree(&hlevels, htypes, &self.host_arr(src_pos)?, qp.as_ref(), params)?)
    }
    fn gather_scalar(&self, f: DevField<'_>, orig: &DevBuf<u32>) -> Result<DevBuf<f64>> {
        match f.ty {
            FieldType::F32 | FieldType::F64 => prims::gather_field(&self.dev, f.a, f.ty == FieldType::F64, orig),
            other => Err(Error::Device(format!("a real field of type {other:?}"))),
        }
    }

    fn walk_start<T: Real, const D: usize>(&self, tree: &Tree<Self, T, D>) -> Result<Lists<Self>> {
        walk::walk_start(self, tree)
    }
    fn knn_node_pass<T: Real, const D: usize, M: Metric<T, D>>(
        &self,
        metric: &M,
        tree: &Tree<Self, T, D>,
        k: usize,
        parent: usize,
        lists: &Lists<Self>,
    ) -> Result<Lists<Self>> {
        Ok(walk::knn_keep(&self.dev, metric, tree, k, parent, lists, None)?.0)
    }
    fn knn_leaf_pass<T: Real, const D: usize, M: Metric<T, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        k: usize,
        fields: &LeafFields<'_, Self>,
        lists: &Lists<Self>,
        sinks: &KnnSinks<'_, Self, T>,
    ) -> Result<u64> {
        // The k-th distance guesses are not used here (the kernels bound each leaf's
        // queries together); results never depend on them.
        walk::knn_leaf_pass(&self.dev, metric, zs, k, fields.masses, fields.scalar, lists, sinks)
    }
    fn fof_begin<T: Real, const D: usize>(&self, zs: &Prepared<Self, T, D>) -> Result<Self::Links> {
        fof::begin(self, zs)
    }
    fn fof_leaf_self<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        l: f64,
        links: &Self::Links,
    ) -> Result<()> {
        fof::leaf_self(&self.dev, metric, zs, l, links)
    }
    fn fof_node_pass<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        l: f64,
        links: &Self::Links,
        parent: usize,
        lists: &Lists<Self>,
    ) -> Result<Lists<Self>> {
        fof::node_pass(&self.dev, metric, zs, l, links, parent, lists)
    }
    fn fof_leaf_pass<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        l: f64,
        links: &Self::Links,
        lists: &Lists<Self>,
    ) -> Result<u64> {
        fof::leaf_pass(&self.dev, metric, zs, l, links, lists)
    }
    fn fof_contract(&self, links: Self::Links) -> Result<DevBuf<u32>> {
        fof::contract(&self.dev, links)
    }
    fn row_queries(&self, orig: Option<&DevBuf<u32>>, n: usize, out: &DevOut<'_, i64>) -> Result<()> {
        match orig {
            Some(o) => prims::u32_to_i64(&self.dev, o, out.ptr),
            None => prims::u32_to_i64(&self.dev, &prims::iota(&self.dev, n)?, out.ptr),
        }
    }
    type GroupSlots = catalogue::Slots;
    type GroupMembers = catalogue::Members;
    fn catalogue_count(&self, roots: &DevBuf<u32>, min_members: usize) -> Result<Counted<catalogue::Slots>> {
        catalogue::count(self, roots, min_members)
    }
    fn catalogue_order<T: Real, const D: usize>(
        &self,
        zs: &Prepared<Self, T, D>,
        roots: &DevBuf<u32>,
        counted: &mut Counted<catalogue::Slots>,
    ) -> Result<Grouped<catalogue::Members>> {
        catalogue::order(self, zs, roots, counted)
    }
    fn catalogue_rows<T: Real, const D: usize>(
        &self,
        zs: &Prepared<Self, T, D>,
        members: &catalogue::Members,
        kept: usize,
        req: &CatalogueRequest<'_, Self, D>,
    ) -> Result<GroupRows<Self, D>> {
        catalogue::rows(self, zs, members, kept, req)
    }
    fn catalogue_labels<T: Real, const D: usize>(
        &self,
        zs: &Prepared<Self, T, D>,
        roots: &DevBuf<u32>,
        slots: &catalogue::Slots,
        tags: &DevBuf<i64>,
        labels: &DevOut<'_, i64>,
    ) -> Result<()> {
        catalogue::labels(self, zs, roots, slots, tags, labels)
    }
    fn catalogue_members<'a, T: Real, const D: usize>(
        &'a self,
        _zs: &'a Prepared<Self, T, D>,
        members: &'a catalogue::Members,
    ) -> Result<MemberLists<'a>> {
        catalogue::member_lists(members)
    }
}

impl<T: Real, const D: usize> Ingest<DevPoints<'_, T, D>, T, D> for Cuda {
    fn count(&self, pts: &DevPoints<'_, T, D>) -> usize {
        pts.n
    }
    fn scan(&self, pts: &DevPoints<'_, T, D>, what: &'static str, domain: &Domain<D>) -> Result<Bounds<D>> {
        let box_len = domain.box_lengths();
        let (bad, lo, hi) = prims::check_points::<T, D>(&self.dev, pts.pos, pts.n, box_len)?;
        if let Some(i) = bad {
            // The host's own check on that one point names what is wrong with it.
            let one = DevPoints::<T, D> { pos: std::array::from_fn(|d| pts.pos[d].at(i, size_of::<T>())), n: 1, _borrow: PhantomData };
            let p = self.fetch_points(&one)?[0];
            crate::input::validate::check_point(&p, i, what, box_len.as_ref())?;
            return Err(Error::Device(format!("{what}: point {i} was flagged on the device but passes the host check")));
        }
        Ok(Bounds { lo, hi })
    }
    fn keys_into(&self, pts: &DevPoints<'_, T, D>, quant: &Quantizer<D>, keys: &mut DevBuf<u64>, at: usize) -> Result<()> {
        assert!(at + pts.n <= keys.len());
        prims::keys::<T, D>(&self.dev, pts.pos, pts.n, quant, keys.ptr() + (at * 8) as u64)
    }
    fn gather_rows(&self, pts: &DevPoints<'_, T, D>, rows: &DevBuf<u32>) -> Result<DevBuf<[T; D]>> {
        super::dist::gather_points(&self.dev, pts, rows)
    }
    fn gather_into(&self, pts: &DevPoints<'_, T, D>, perm: &DevBuf<u32>, first: u32, out: &mut [DevBuf<T>; D]) -> Result<()> {
        for (&col, o) in pts.pos.iter().zip(out.iter()) {
            prims::gather::<T>(&self.dev, col, perm, first, pts.n, o)?;
        }
        Ok(())
    }
}
