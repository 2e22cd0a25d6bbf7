//! The distribution layer's per-particle work on the device (`DistOps`, backend/dist.rs;
//! kernels/dist.cu). Columns stay in device memory; what comes to the host is what the
//! host must decide on or what goes to other ranks anyway: histogram bins, counts per
//! rank, the FoF edges and the fragments on them, the kept groups' ranges and the members
//! of groups spread over ranks. The near-rank test (`Decomp::near_ranks`) runs on the
//! device too (`zd_near_*`), giving the pair rows directly.

use std::borrow::Cow;
use std::marker::PhantomData;
use std::sync::Arc;

use super::backend::{Cuda, DevField, DevOut, DevPoints, FieldType};
use super::catalogue::{field_words, job_words};
use super::device::{Arg, BLOCK, DevBuf, DevPtr, Device, blocks, u32_pair};
use super::prims::{self, Strided, instance};
use super::walk::{counts_to_offsets, metric_arg, tree_arg};
use crate::backend::dist::{DistOps, Fragments, GroupFields, MergeJob, MergeRows, Reach};
use crate::backend::{Backend, Elem, Ingest};
use crate::error::{Error, Result};
use crate::fof::catalogue::Row;
use crate::geom::Real;
use crate::geom::decomp::Decomp;
use crate::geom::metric::Metric;
use crate::geom::morton::Quantizer;
use crate::input::{Bounds, Domain};
use crate::pipeline::Prepared;

const NONE: u32 = u32::MAX;

fn n32(n: usize) -> Result<u32> {
    u32::try_from(n).map_err(|_| Error::TooManyPoints { got: n, max: u32::MAX as usize })
}

/// Queues `kernel` of kernels/dist.cu over `n` threads.
fn launch(dev: &Arc<dyn Device>, kernel: &'static str, n: usize, args: &[Arg]) -> Result<()> {
    if n == 0 {
        return Ok(());
    }
    // SAFETY: every zd_* kernel launched here checks its thread index against the count it
    // is given, and the callers below pass buffers of the lengths the kernels read.
    unsafe { dev.launch("dist", kernel, blocks(n, BLOCK as usize)?, args) }
}

/// Elements of 4 or 8 bytes: the kernels move them as u32 or u64.
fn width_of<T: Elem>() -> Result<u32> {
    match size_of::<T>() {
        4 => Ok(4),
        8 => Ok(8),
        s => Err(Error::Device(format!("no column kernel for {s}-byte elements"))),
    }
}

/// How the column kernels move elements of `T`: as words of 8 bytes (or 4, for sizes that
/// are not a multiple of 8: f32 points), so many per element, and the kernels' suffix.
fn words_of<T: Elem>() -> (usize, &'static str, &'static str) {
    let s = size_of::<T>();
    // Whole 4-byte words only (u8 columns have no column kernel).
    assert!(s.is_multiple_of(4), "no column kernel for {s}-byte elements");
    if s.is_multiple_of(8) { (s / 8, "zd_gather8", "zd_scatter8") } else { (s / 4, "zd_gather4", "zd_scatter4") }
}

/// A device column as a packed strided array.
fn col<T: Elem>(b: &DevBuf<T>) -> Strided {
    Strided { data: b.ptr(), stride: size_of::<T>() as i64 }
}

impl Cuda {
    /// The flags' exclusive scan in place (`flags`: n + 1 entries) and the flagged count.
    fn scan_flags(&self, flags: &DevBuf<u32>, n: usize) -> Result<usize> {
        counts_to_offsets(&self.dev, flags, n)
    }

    /// The rows whose flag is set, ascending.
    fn flagged_rows(&self, flags: &DevBuf<u32>, n: usize) -> Result<DevBuf<u32>> {
        let at: DevBuf<u32> = DevBuf::new(&self.dev, n + 1)?;
        self.copy(flags, &at, n)?;
        let m = self.scan_flags(&at, n)?;
        let out = DevBuf::new(&self.dev, m)?;
        launch(&self.dev, "zd_compact_flagged", n, &[flags.arg(), at.arg(), Arg::U32(n32(n)?), out.arg()])?;
        Ok(out)
    }

    fn copy<T: Elem>(&self, src: &DevBuf<T>, dst: &DevBuf<T>, n: usize) -> Result<()> {
        self.copy_elems::<T>(src.ptr(), dst.ptr(), n)
    }

    /// `n` consecutive elements of `T` from device address `src` to `dst` (the column
    /// gather over the identity rows).
    fn copy_elems<T: Elem>(&self, src: DevPtr, dst: DevPtr, n: usize) -> Result<()> {
        if n == 0 {
            return Ok(());
        }
        let iota = prims::iota(&self.dev, n)?;
        let (w, k, _) = words_of::<T>();
        launch(&self.dev, k, n * w, &[Arg::Ptr(src), iota.arg(), Arg::U32(n32(n)?), Arg::U32(n32(w)?), Arg::Ptr(dst)])
    }

    fn upload<T: Elem>(&self, v: &[T]) -> Result<DevBuf<T>> {
        DevBuf::from_slice(&self.dev, v)
    }
}

/// A column of points on the device as caller points (the pipeline reads it like the
/// caller's strided arrays).
impl<T: Real, const D: usize> Ingest<DevBuf<[T; D]>, T, D> for Cuda {
    fn count(&self, pts: &DevBuf<[T; D]>) -> usize {
        pts.len()
    }
    fn scan(&self, pts: &DevBuf<[T; D]>, what: &'static str, domain: &Domain<D>) -> Result<Bounds<D>> {
        self.scan(&points(pts), what, domain)
    }
    fn keys_into(&self, pts: &DevBuf<[T; D]>, quant: &Quantizer<D>, keys: &mut DevBuf<u64>, at: usize) -> Result<()> {
        self.keys_into(&points(pts), quant, keys, at)
    }
    fn gather_rows(&self, pts: &DevBuf<[T; D]>, rows: &DevBuf<u32>) -> Result<DevBuf<[T; D]>> {
        self.gather(pts, rows, 1)
    }
    fn gather_into(&self, pts: &DevBuf<[T; D]>, perm: &DevBuf<u32>, first: u32, out: &mut [DevBuf<T>; D]) -> Result<()> {
        self.gather_into(&points(pts), perm, first, out)
    }
}

/// A column of points as D strided arrays.
pub(super) fn points<T: Real, const D: usize>(pts: &DevBuf<[T; D]>) -> DevPoints<'_, T, D> {
    let stride = size_of::<[T; D]>() as i64;
    DevPoints { pos: std::array::from_fn(|d| Strided { data: pts.ptr() + (d * size_of::<T>()) as u64, stride }), n: pts.len(), _borrow: PhantomData }
}

/// Caller points at input rows as one column of points (kernels/dist.cu
/// `zd_gather_points`).
pub(super) fn gather_points<T: Real, const D: usize>(dev: &Arc<dyn Device>, p: &DevPoints<'_, T, D>, rows: &DevBuf<u32>) -> Result<DevBuf<[T; D]>> {
    let out = DevBuf::new(dev, rows.len())?;
    let kernel = instance::<T, D>(["zd_gather_points_f32_2", "zd_gather_points_f32_3", "zd_gather_points_f64_2", "zd_gather_points_f64_3"])?;
    let a = |d: usize| Arg::Words(vec![p.pos[d.min(D - 1)].data, p.pos[d.min(D - 1)].stride as u64]);
    launch(dev, kernel, rows.len(), &[a(0), a(1), a(2), rows.arg(), Arg::U32(n32(rows.len())?), out.arg()])?;
    Ok(out)
}

impl DistOps for Cuda {
    fn filled<T: Elem>(&self, n: usize, v: T) -> Result<DevBuf<T>> {
        let b = DevBuf::new(&self.dev, n)?;
        let mut word = [0u8; 8];
        // SAFETY: `Elem` types are plain data; `v`'s bytes fit the word (4 or 8 bytes).
        let bytes = unsafe { std::slice::from_raw_parts((&v as *const T).cast::<u8>(), size_of::<T>()) };
        let w = width_of::<T>()?;
        word[..w as usize].copy_from_slice(bytes);
        if w == 4 {
            launch(&self.dev, "zd_fill4", n, &[b.arg(), Arg::U32(n32(n)?), Arg::U32(u32::from_ne_bytes(word[..4].try_into().unwrap()))])?;
        } else {
            launch(&self.dev, "zd_fill8", n, &[b.arg(), Arg::U32(n32(n)?), Arg::Words(vec![u64::from_ne_bytes(word)])])?;
        }
        Ok(b)
    }

    fn key_histogram(&self, keys: &DevBuf<u64>, shapes: &[(u128, u128, u32)], bins: usize) -> Result<Vec<u64>> {
        let words: Vec<u64> = shapes.iter().flat_map(|&(lo, hi, shift)| [lo as u64, (hi - 1) as u64, shift as u64]).collect();
        let table = self.upload(&words)?;
        let out: DevBuf<u64> = DevBuf::zeros(&self.dev, shapes.len() * bins)?;
        let args = [keys.arg(), Arg::U32(n32(keys.len())?), table.arg(), Arg::U32(n32(shapes.len())?), Arg::U32(n32(bins)?), out.arg()];
        launch(&self.dev, "zd_key_hist", keys.len(), &args)?;
        out.to_vec()
    }

    fn key_owners(&self, keys: &DevBuf<u64>, starts: &[u128]) -> Result<DevBuf<u32>> {
        let words: Vec<u64> = starts[1..].iter().flat_map(|&s| [(s >> 64) as u64, s as u64]).collect();
        let table = self.upload(&words)?;
        let out = DevBuf::new(&self.dev, keys.len())?;
        launch(
            &self.dev,
            "zd_key_owner",
            keys.len(),
            &[keys.arg(), Arg::U32(n32(keys.len())?), table.arg(), Arg::U32(n32(starts.len() - 1)?), out.arg()],
        )?;
        Ok(out)
    }

    fn group_by_rank(&self, dest: &DevBuf<u32>, ranks: usize) -> Result<(DevBuf<u32>, Vec<usize>)> {
        let n = dest.len();
        let mut keys: DevBuf<u64> = DevBuf::new(&self.dev, n)?;
        let mut rows: DevBuf<u32> = DevBuf::new(&self.dev, n)?;
        let counts: DevBuf<u32> = DevBuf::zeros(&self.dev, ranks)?;
        launch(&self.dev, "zd_dest_keys", n, &[dest.arg(), Arg::U32(n32(n)?), keys.arg(), rows.arg(), counts.arg()])?;
        prims::sort_pairs(&self.dev, &mut keys, &mut rows, 64)?;
        Ok((rows, counts.to_vec()?.into_iter().map(|c| c as usize).collect()))
    }

    fn near_pairs<T: Real, const D: usize>(
        &self,
        decomp: &Decomp<D>,
        me: usize,
        pos: &DevBuf<[T; D]>,
        keys: Option<&DevBuf<u64>>,
        reach: Reach<'_, Self, T>,
    ) -> Result<(DevBuf<u32>, Vec<usize>)> {
        let n = pos.len();
        let own_keys;
        let keys = match keys {
            Some(k) => k,
            None => {
                let mut k = DevBuf::new(&self.dev, n)?;
                self.keys_into(pos, &decomp.quant, &mut k, 0)?;
                own_keys = k;
                &own_keys
            }
        };
        // kernels/dist.cu `zd_near_ranks`, the twin of `Decomp::near_ranks`: the ranges,
        // their boxes and the interior table on the device; the pairs counted, written as
        // (rank << 32 | row) and sorted.
        let (shift, max_r, interior) = decomp.interior();
        let table = self.upload(&interior.iter().map(|&f| f as u8).collect::<Vec<u8>>())?;
        let starts = self.upload(&decomp.starts().iter().flat_map(|&s| [(s >> 64) as u64, s as u64]).collect::<Vec<u64>>())?;
        let mut box_at = vec![0u32];
        let mut boxes: Vec<f64> = Vec::new();
        for r in decomp.regions() {
            for b in r {
                boxes.extend(b[0]);
                boxes.extend(b[1]);
            }
            box_at.push(n32(boxes.len() / (2 * D))?);
        }
        let (box_at, boxes) = (self.upload(&box_at)?, self.upload(&boxes)?);
        let eps = if T::IS_F64 { f64::EPSILON } else { f32::EPSILON as f64 };
        let box_len = decomp.box_len();
        let span = box_len.map_or(0.0, |l| l.iter().fold(0.0f64, |a, &b| a.max(b)));
        let (lo, scale) = decomp.quant.parts();
        let mut g: Vec<u64> = vec![starts.ptr(), box_at.ptr(), boxes.ptr(), table.ptr()];
        g.extend((0..3).map(|d| if d < D { lo[d].to_bits() } else { 0 }));
        g.extend((0..3).map(|d| if d < D { scale[d].to_bits() } else { 0 }));
        g.extend((0..3).map(|d| box_len.filter(|_| d < D).map_or(0, |l| l[d].to_bits())));
        g.extend([decomp.half_box().to_bits(), max_r.to_bits(), span.to_bits(), eps.to_bits()]);
        g.push(u32_pair(n32(decomp.ranks())?, shift));
        g.push(u32_pair(box_len.is_some() as u32, n32(me)?));
        let (r2, fixed) = match &reach {
            Reach::Fixed(l) => (0u64, *l),
            Reach::Squared(r2) => (r2.ptr(), 0.0),
        };
        let kernel = instance::<T, D>(["zd_near_f32_2", "zd_near_f32_3", "zd_near_f64_2", "zd_near_f64_3"])?;
        let counts: DevBuf<u32> = DevBuf::new(&self.dev, n + 1)?;
        let run = |pass: u32, at: &DevBuf<u32>, pairs: DevPtr| {
            let args = [
                pos.arg(),
                keys.arg(),
                Arg::U32(n32(n)?),
                Arg::Ptr(r2),
                Arg::Words(vec![fixed.to_bits()]),
                Arg::Words(g.clone()),
                Arg::U32(pass),
                counts.arg(),
                at.arg(),
                Arg::Ptr(pairs),
            ];
            launch(&self.dev, kernel, n, &args)
        };
        run(0, &counts, 0)?;
        let total = self.scan_flags(&counts, n)?;
        let mut pairs: DevBuf<u64> = DevBuf::new(&self.dev, total)?;
        run(1, &counts, pairs.ptr())?;
        let mut order = prims::iota(&self.dev, total)?;
        prims::sort_pairs(&self.dev, &mut pairs, &mut order, 64)?;
        let rows: DevBuf<u32> = DevBuf::new(&self.dev, total)?;
        let per_rank: DevBuf<u32> = DevBuf::zeros(&self.dev, decomp.ranks())?;
        launch(&self.dev, "zd_pair_rows", total, &[pairs.arg(), Arg::U32(n32(total)?), rows.arg(), per_rank.arg()])?;
        Ok((rows, per_rank.to_vec()?.into_iter().map(|c| c as usize).collect()))
    }

    fn gather<T: Elem>(&self, src: &DevBuf<T>, rows: &DevBuf<u32>, width: usize) -> Result<DevBuf<T>> {
        let n = rows.len();
        let out = DevBuf::new(&self.dev, n * width)?;
        let (w, k, _) = words_of::<T>();
        launch(&self.dev, k, n * width * w, &[src.arg(), rows.arg(), Arg::U32(n32(n)?), Arg::U32(n32(width * w)?), out.arg()])?;
        Ok(out)
    }

    fn offset_rows(&self, rows: &DevBuf<u32>, offset: u64) -> Result<DevBuf<u64>> {
        let out = DevBuf::new(&self.dev, rows.len())?;
        launch(&self.dev, "zd_offset_rows", rows.len(), &[rows.arg(), Arg::U32(n32(rows.len())?), Arg::Words(vec![offset]), out.arg()])?;
        Ok(out)
    }

    fn append<T: Elem>(&self, a: DevBuf<T>, b: &DevBuf<T>) -> Result<DevBuf<T>> {
        let (na, nb) = (a.len(), b.len());
        let out = DevBuf::new(&self.dev, na + nb)?;
        for (src, at, n) in [(&a, 0, na), (b, na, nb)] {
            self.copy_elems::<T>(src.ptr(), out.ptr() + (at * size_of::<T>()) as u64, n)?;
        }
        Ok(out)
    }

    fn segment_sums(&self, v: &DevBuf<u32>, segments: &[usize]) -> Result<Vec<usize>> {
        let host = v.to_vec()?;
        let mut at = 0;
        Ok(segments
            .iter()
            .map(|&len| {
                let s = host[at..at + len].iter().map(|&x| x as usize).sum();
                at += len;
                s
            })
            .collect())
    }

    fn sqrt<T: Real>(&self, v: &DevBuf<T>) -> Result<DevBuf<T>> {
        let out = DevBuf::new(&self.dev, v.len())?;
        let k = if T::IS_F64 { "zd_sqrt_f64" } else { "zd_sqrt_f32" };
        launch(&self.dev, k, v.len(), &[v.arg(), Arg::U32(n32(v.len())?), out.arg()])?;
        Ok(out)
    }

    fn landing<T: Elem>(&self, n: usize) -> Result<DevBuf<T>> {
        DevBuf::new(&self.dev, n)
    }

    fn host_slice<'a, T: Elem>(&self, _b: &'a DevBuf<T>) -> Option<&'a [T]> {
        None
    }

    fn host_slice_mut<'a, T: Elem>(&self, _b: &'a mut DevBuf<T>) -> Option<&'a mut [T]> {
        None
    }

    fn device_ptr<T: Elem>(&self, b: &DevBuf<T>) -> Result<Option<u64>> {
        self.dev.wait()?;
        Ok(Some(b.ptr()))
    }

    fn download_range<T: Elem>(&self, b: &DevBuf<T>, at: usize, out: &mut [T]) -> Result<()> {
        assert!(at + out.len() <= b.len());
        if out.is_empty() {
            return Ok(());
        }
        // SAFETY: the range lies in the buffer; every bit pattern of an `Elem` is a value.
        unsafe {
            self.dev.download(std::slice::from_raw_parts_mut(out.as_mut_ptr().cast::<u8>(), size_of_val(out)), b.ptr() + (at * size_of::<T>()) as u64)
        }
    }

    fn upload_range<T: Elem>(&self, b: &mut DevBuf<T>, at: usize, data: &[T]) -> Result<()> {
        assert!(at + data.len() <= b.len());
        if data.is_empty() {
            return Ok(());
        }
        // SAFETY: the range lies in the buffer.
        unsafe { self.dev.upload(b.ptr() + (at * size_of::<T>()) as u64, super::device::bytes_of(data)) }
    }

    fn copy_range<T: Elem>(&self, src: &DevBuf<T>, from: usize, dst: &mut DevBuf<T>, to: usize, len: usize) -> Result<()> {
        assert!(from + len <= src.len() && to + len <= dst.len());
        self.copy_elems::<T>(src.ptr() + (from * size_of::<T>()) as u64, dst.ptr() + (to * size_of::<T>()) as u64, len)
    }

    fn to_host<'a, T: Elem>(&self, b: &'a DevBuf<T>) -> Result<Cow<'a, [T]>> {
        Ok(Cow::Owned(b.to_vec()?))
    }

    fn upload_host<T: Elem>(&self, v: Vec<T>) -> Result<DevBuf<T>> {
        self.upload(&v)
    }

    fn scalar_of<'a>(&self, b: &'a DevBuf<f64>) -> DevField<'a> {
        DevField { a: col(b), ty: FieldType::F64, n: b.len(), _borrow: PhantomData }
    }

    fn out_of<'a, T: Elem>(&self, b: &'a mut DevBuf<T>) -> DevOut<'a, T> {
        // SAFETY: the buffer is `len` elements of `T` of this device, borrowed mutably.
        unsafe { DevOut::new(b.ptr(), b.len()) }
    }

    fn gather_vectors<const D: usize>(&self, v: [DevField<'_>; D], rows: &DevBuf<u32>) -> Result<[DevBuf<f64>; D]> {
        let mut out = Vec::with_capacity(D);
        for f in &v {
            out.push(self.gather_scalar(*f, rows)?);
        }
        Ok(out.try_into().unwrap_or_else(|_| unreachable!()))
    }

    fn gather_ids(&self, ids: DevField<'_>, rows: &DevBuf<u32>) -> Result<DevBuf<i64>> {
        let out = DevBuf::new(&self.dev, rows.len())?;
        launch(
            &self.dev,
            "zd_gather_ids",
            rows.len(),
            &[Arg::Words(field_words(Some(&ids)).to_vec()), rows.arg(), Arg::U32(n32(rows.len())?), out.arg()],
        )?;
        Ok(out)
    }

    fn scatter_out<T: Elem>(&self, out: &DevOut<'_, T>, rows: &DevBuf<u32>, vals: &DevBuf<T>, width: usize) -> Result<()> {
        let n = rows.len();
        let args = [Arg::Ptr(out.ptr), rows.arg(), Arg::U32(n32(n)?), Arg::U32(n32(width)?), vals.arg()];
        let k = match (out.wide, width_of::<T>()?) {
            (true, 4) => "zd_scatter_wide",
            (_, 4) => "zd_scatter4",
            _ => "zd_scatter8",
        };
        launch(&self.dev, k, n * width, &args)
    }

    fn ball_query<T: Real, const D: usize, M: Metric<T, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        queries: &DevBuf<[T; D]>,
        r2: &DevBuf<T>,
        first: Option<&DevBuf<u32>>,
        k: usize,
    ) -> Result<(DevBuf<i64>, DevBuf<T>)> {
        let nq = r2.len();
        let idx = self.filled(nq * k, -1i64)?;
        let d2 = self.filled(nq * k, T::INFINITY)?;
        if k == 0 || nq == 0 {
            return Ok((idx, d2));
        }
        let tree = &zs.tree;
        let nodes = tree.num_nodes();
        let parent: DevBuf<u32> = DevBuf::new(&self.dev, nodes)?;
        launch(&self.dev, "zd_parents", nodes, &[tree.child_start.arg(), tree.child_count.arg(), Arg::U32(n32(nodes)?), parent.arg()])?;
        let top = tree.super_plane();
        let p3 = |a: &[DevBuf<T>; D], d: usize| a[d.min(D - 1)].ptr();
        let Arg::Words(mut job) = tree_arg(tree) else { unreachable!() };
        job.push(parent.ptr());
        job.push(u32_pair(n32(top.first)?, n32(top.len)?));
        job.extend((0..3).map(|d| p3(&zs.src_pos, d)));
        job.push(zs.src_orig.ptr());
        job.push(queries.ptr());
        job.push(r2.ptr());
        job.push(first.map_or(0, |f| f.ptr()));
        job.push(u32_pair(n32(nq)?, n32(k)?));
        job.push(idx.ptr());
        job.push(d2.ptr());
        let kernel = instance::<T, D>(["zd_ball_f32_2", "zd_ball_f32_3", "zd_ball_f64_2", "zd_ball_f64_3"])?;
        launch(&self.dev, kernel, nq, &[Arg::Words(job), metric_arg::<T, D>(metric.box_len())])?;
        Ok((idx, d2))
    }

    fn row_counts(&self, idx: &DevBuf<i64>, width: usize) -> Result<DevBuf<u32>> {
        let nrows = idx.len().checked_div(width).unwrap_or(0);
        let out = DevBuf::new(&self.dev, nrows)?;
        launch(&self.dev, "zd_row_counts", nrows, &[idx.arg(), Arg::U32(n32(nrows)?), Arg::U32(n32(width)?), out.arg()])?;
        Ok(out)
    }

    fn index_rows(&self, idx: &DevBuf<i64>) -> Result<DevBuf<u32>> {
        let out = DevBuf::new(&self.dev, idx.len())?;
        launch(&self.dev, "zd_index_rows", idx.len(), &[idx.arg(), Arg::U32(n32(idx.len())?), out.arg()])?;
        Ok(out)
    }

    fn distinct_rows(&self, rows: &DevBuf<u32>, n: usize) -> Result<DevBuf<u32>> {
        let marks: DevBuf<u8> = DevBuf::zeros(&self.dev, n)?;
        launch(&self.dev, "zd_mark", rows.len(), &[rows.arg(), Arg::U32(n32(rows.len())?), marks.arg()])?;
        let flags: DevBuf<u32> = DevBuf::new(&self.dev, n + 1)?;
        launch(&self.dev, "zd_marked_flags", n, &[marks.arg(), Arg::U32(n32(n)?), flags.arg()])?;
        self.flagged_rows(&flags, n)
    }

    fn compact_rows<T: Elem>(&self, v: &DevBuf<T>, counts: &DevBuf<u32>, width: usize) -> Result<DevBuf<T>> {
        let nrows = counts.len();
        let starts: DevBuf<u32> = DevBuf::new(&self.dev, nrows + 1)?;
        self.copy(counts, &starts, nrows)?;
        let total = self.scan_flags(&starts, nrows)?;
        let out = DevBuf::new(&self.dev, total)?;
        let k = if width_of::<T>()? == 4 { "zd_compact4" } else { "zd_compact8" };
        launch(&self.dev, k, nrows * width, &[v.arg(), counts.arg(), starts.arg(), Arg::U32(n32(nrows)?), Arg::U32(n32(width)?), out.arg()])?;
        Ok(out)
    }

    fn knn_merge<T: Real, const D: usize>(&self, job: &MergeJob<'_, Self, T>, rows: MergeRows<'_, Self, T>) -> Result<()> {
        let (k, nb) = (job.k, job.boundary.len());
        if nb == 0 {
            return Ok(());
        }
        // Each boundary query's pairs and where each pair's candidates start: built on the
        // host from the pairs (one per shipped query copy) and their counts.
        let boundary = job.boundary.to_vec()?;
        let pair_rows = job.pair_rows.to_vec()?;
        let counts = job.reply_counts.to_vec()?;
        let mut entry_at = Vec::with_capacity(counts.len());
        counts.iter().fold(0u32, |acc, &c| {
            entry_at.push(acc);
            acc + c
        });
        let mut by_query: Vec<(u32, u32)> =
            pair_rows.iter().enumerate().map(|(j, &q)| (boundary.binary_search(&q).expect("a boundary query") as u32, j as u32)).collect();
        by_query.sort_unstable();
        let mut pair_start = vec![0u32; nb + 1];
        by_query.iter().for_each(|&(b, _)| pair_start[b as usize + 1] += 1);
        for b in 0..nb {
            pair_start[b + 1] += pair_start[b];
        }
        let pairs: Vec<u32> = by_query.iter().map(|p| p.1).collect();
        let (ps, pl, ea) = (self.upload(&pair_start)?, self.upload(&pairs)?, self.upload(&entry_at)?);
        let sd2: DevBuf<T> = DevBuf::new(&self.dev, nb * k)?;
        let (sg, sm, ss): (DevBuf<u64>, DevBuf<f64>, DevBuf<f64>) =
            (DevBuf::new(&self.dev, nb * k)?, DevBuf::new(&self.dev, nb * k)?, DevBuf::new(&self.dev, nb * k)?);
        let opt = |b: Option<&DevBuf<f64>>| b.map_or(0, |b| b.ptr());
        let mut w = vec![
            u32_pair(n32(nb)?, n32(k)?),
            job.boundary.ptr(),
            job.own_idx.ptr(),
            job.own_d2.ptr(),
            ps.ptr(),
            pl.ptr(),
            ea.ptr(),
            job.reply_counts.ptr(),
            job.reply_d2.ptr(),
            job.reply_gidx.ptr(),
            opt(job.reply_mass),
            opt(job.reply_scalar),
            job.gidx.ptr(),
            opt(job.mass),
            opt(job.scalar),
            job.self_query as u64,
            sd2.ptr(),
            sg.ptr(),
            sm.ptr(),
            ss.ptr(),
        ];
        w.push(rows.kth_d2.ptr());
        w.push(rows.density.as_ref().map_or(0, |b| b.ptr()));
        w.push(rows.scalar_mean.as_ref().map_or(0, |b| b.ptr()));
        w.push(rows.idx.as_ref().map_or(0, |b| b.ptr()));
        w.push(rows.d2.as_ref().map_or(0, |b| b.ptr()));
        let kernel = instance::<T, D>(["zd_merge_f32_2", "zd_merge_f32_3", "zd_merge_f64_2", "zd_merge_f64_3"])?;
        launch(&self.dev, kernel, nb, &[Arg::Words(w)])
    }

    fn globalize_rows(&self, idx: &mut DevBuf<i64>, width: usize, gidx: &DevBuf<u64>, skip: &DevBuf<u32>) -> Result<()> {
        let nrows = idx.len().checked_div(width).unwrap_or(0);
        let marks: DevBuf<u8> = DevBuf::zeros(&self.dev, nrows)?;
        launch(&self.dev, "zd_mark", skip.len(), &[skip.arg(), Arg::U32(n32(skip.len())?), marks.arg()])?;
        launch(&self.dev, "zd_globalize", nrows * width, &[idx.arg(), Arg::U32(n32(nrows)?), Arg::U32(n32(width)?), gidx.arg(), marks.arg()])
    }

    fn fof_fragments(&self, orig: &DevBuf<u32>, roots: &DevBuf<u32>, n_own: usize) -> Result<Fragments<Self>> {
        let nu = orig.len();
        let n_ghost = nu - n_own;
        let (nu32, own32) = (Arg::U32(n32(nu)?), Arg::U32(n32(n_own)?));
        let first = self.filled(nu, NONE)?;
        launch(&self.dev, "zd_frag_first", nu, &[orig.arg(), roots.arg(), nu32.clone(), own32.clone(), first.arg()])?;
        let at: DevBuf<u32> = DevBuf::new(&self.dev, nu + 1)?;
        launch(&self.dev, "zd_frag_starts", nu, &[orig.arg(), roots.arg(), nu32.clone(), own32.clone(), first.arg(), at.arg()])?;
        let n_frag = self.scan_flags(&at, nu)?;
        let frag_of: DevBuf<u32> = DevBuf::new(&self.dev, n_own)?;
        let ghost_frag: DevBuf<u32> = DevBuf::new(&self.dev, n_ghost)?;
        launch(&self.dev, "zd_frag_of", nu, &[orig.arg(), roots.arg(), nu32, own32, first.arg(), at.arg(), frag_of.arg(), ghost_frag.arg()])?;
        // The ghosts linked to an owned fragment: the edges.
        let flags: DevBuf<u32> = DevBuf::new(&self.dev, n_ghost + 1)?;
        launch(&self.dev, "zd_not_none", n_ghost, &[ghost_frag.arg(), Arg::U32(n32(n_ghost)?), flags.arg()])?;
        let edge_rows = self.flagged_rows(&flags, n_ghost)?;
        let edge_frag = self.gather(&ghost_frag, &edge_rows, 1)?.to_vec()?;
        Ok(Fragments { n_frag, frag_of, edge_ghost: edge_rows.to_vec()?, edge_frag })
    }

    fn fragment_sums(&self, frag_of: &DevBuf<u32>, tag: &DevBuf<i64>, n_frag: usize) -> Result<(DevBuf<u64>, DevBuf<i64>)> {
        let count: DevBuf<u64> = DevBuf::zeros(&self.dev, n_frag)?;
        let min_tag = self.filled(n_frag, i64::MAX)?;
        let n = frag_of.len();
        launch(&self.dev, "zd_frag_sums", n, &[frag_of.arg(), tag.arg(), Arg::U32(n32(n)?), count.arg(), min_tag.arg()])?;
        Ok((count, min_tag))
    }

    fn scatter_host<T: Elem>(&self, dst: &mut DevBuf<T>, rows: &[u32], vals: &[T]) -> Result<()> {
        if rows.is_empty() {
            return Ok(());
        }
        let (r, v) = (self.upload(rows)?, self.upload(vals)?);
        // SAFETY: `dst` is this device's buffer, borrowed mutably.
        let out = unsafe { DevOut::<T>::new(dst.ptr(), dst.len()) };
        self.scatter_out(&out, &r, &v, 1)
    }

    fn fragment_labels(&self, count: &DevBuf<u64>, tag: &DevBuf<i64>, min: u64) -> Result<DevBuf<i64>> {
        let out = DevBuf::new(&self.dev, count.len())?;
        launch(&self.dev, "zd_frag_labels", count.len(), &[count.arg(), tag.arg(), Arg::U32(n32(count.len())?), Arg::Words(vec![min]), out.arg()])?;
        Ok(out)
    }

    fn kept_fragments(&self, count: &DevBuf<u64>, min: u64) -> Result<Vec<u32>> {
        let n = count.len();
        let flags: DevBuf<u32> = DevBuf::new(&self.dev, n + 1)?;
        launch(&self.dev, "zd_count_flags", n, &[count.arg(), Arg::U32(n32(n)?), Arg::Words(vec![min]), flags.arg()])?;
        self.flagged_rows(&flags, n)?.to_vec()
    }

    fn select_groups(&self, frag_of: &DevBuf<u32>, n_frag: usize, frags: &[u32]) -> Result<DevBuf<u32>> {
        let mut place = self.filled(n_frag, NONE)?;
        let at: Vec<u32> = (0..frags.len() as u32).collect();
        self.scatter_host(&mut place, frags, &at)?;
        self.gather(&place, frag_of, 1)
    }

    fn group_members(&self, group_of: &DevBuf<u32>, n_groups: usize) -> Result<(Vec<u64>, DevBuf<u32>)> {
        let n = group_of.len();
        let flags: DevBuf<u32> = DevBuf::new(&self.dev, n + 1)?;
        launch(&self.dev, "zd_not_none", n, &[group_of.arg(), Arg::U32(n32(n)?), flags.arg()])?;
        let total = self.scan_flags(&flags, n)?;
        let mut keys: DevBuf<u64> = DevBuf::new(&self.dev, total)?;
        let mut pts: DevBuf<u32> = DevBuf::new(&self.dev, total)?;
        let counts: DevBuf<u32> = DevBuf::zeros(&self.dev, n_groups)?;
        launch(&self.dev, "zd_group_keys", n, &[group_of.arg(), flags.arg(), Arg::U32(n32(n)?), keys.arg(), pts.arg(), counts.arg()])?;
        prims::sort_pairs(&self.dev, &mut keys, &mut pts, 64)?;
        let mut offsets = Vec::with_capacity(n_groups + 1);
        offsets.push(0u64);
        for c in counts.to_vec()? {
            offsets.push(offsets.last().unwrap() + c as u64);
        }
        Ok((offsets, pts))
    }

    fn group_rows<T: Real, const D: usize>(&self, members: &DevBuf<u32>, offsets: &[u64], f: &GroupFields<'_, Self, T, D>) -> Result<Vec<Row<D>>> {
        let ng = offsets.len() - 1;
        if ng == 0 {
            return Ok(Vec::new());
        }
        // The catalogue's reduction kernel, with the points' own index as the input index:
        // keys (group << 32 | point), positions and fields by point.
        let groups: Vec<u32> = (0..ng).flat_map(|g| std::iter::repeat_n(g as u32, (offsets[g + 1] - offsets[g]) as usize)).collect();
        let pts = members.to_vec()?;
        let keys = self.upload(&groups.iter().zip(&pts).map(|(&g, &p)| (g as u64) << 32 | p as u64).collect::<Vec<u64>>())?;
        let off = self.upload(&offsets.iter().map(|&o| o as u32).collect::<Vec<u32>>())?;
        let vel: Option<[DevField<'_>; D]> = f.vel.map(|v| std::array::from_fn(|d| self.scalar_of(&v[d])));
        let mass = f.mass.map(|m| self.scalar_of(m));
        let ids = DevField { a: col(f.tag), ty: FieldType::I64, n: f.tag.len(), _borrow: PhantomData };
        let pos: [u64; 3] = std::array::from_fn(|d| f.pos.ptr() + (d.min(D - 1) * size_of::<T>()) as u64);
        let job = job_words::<D>(pos, D as u32, vel.as_ref(), mass.as_ref(), Some(&ids), f.particle_mass, f.box_len);
        Ok(super::catalogue::reduce_rows::<T, D>(self, job, &keys, members, &off, ng)?.0)
    }

    fn find_rows(&self, sorted: &DevBuf<u64>, values: &DevBuf<u64>) -> Result<DevBuf<u32>> {
        let out = DevBuf::new(&self.dev, values.len())?;
        let args = [sorted.arg(), Arg::U32(n32(sorted.len())?), values.arg(), Arg::U32(n32(values.len())?), out.arg()];
        launch(&self.dev, "zd_find_rows", values.len(), &args)?;
        Ok(out)
    }

    fn to_i64(&self, v: &DevBuf<u64>) -> Result<DevBuf<i64>> {
        let out: DevBuf<i64> = DevBuf::new(&self.dev, v.len())?;
        // The same bits: an i64 for every u64 below 2^63 (global indices).
        self.copy_elems::<u64>(v.ptr(), out.ptr(), v.len())?;
        Ok(out)
    }
}
