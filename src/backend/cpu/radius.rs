//! Radius queries on the CPU (docs/DESIGN.md §5): the node test and the leaf passes.
//!
//! Node test for receiving node A and source node B: keep B when
//! `d_min(A, B)² <= r_A²`, `r_A` the largest radius of A's queries. Point test: FoF's,
//! `d² <= r²` in f64 from the input coordinates, so every bound is exact (box bounds are
//! rounded like point distances, and rounding is monotone: `metric`).
//!
//! Each query's neighbours are gathered per query leaf from the candidate leaves; sums
//! run from +0 in ascending source input index, so they depend on nothing but the inputs (not on
//! the tree, threads or back end). Lists take two passes: the first counts (and reduces),
//! the caller sizes the lists, the second writes each query's entries at its offset.

use super::Cpu;
use super::par::DisjointSlice;
use super::simd::{self, Simd};
use super::walk::{Candidates, walk_leaves, walk_plane};
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::geom::metric::Metric;
use crate::pipeline::radius::{ListRequest, Radii, RadiusSinks, ZFields};
use crate::pipeline::{Lists, Prepared, Tree};
use crate::radius::{ListOrder, NeighbourLists, sph_kernel};
use std::mem::MaybeUninit;

/// The per-node largest radius, leaves up (empty with a fixed radius).
pub(crate) fn node_max<T: Real, const D: usize>(tree: &Tree<Cpu, T, D>, per_query: Option<&[f64]>) -> Vec<f64> {
    use rayon::prelude::*;
    let Some(r) = per_query else { return Vec::new() };
    let mut out = vec![0.0f64; tree.num_nodes()];
    let lv = tree.leaves();
    out[lv.first..lv.first + lv.len].par_iter_mut().enumerate().for_each(|(i, m)| {
        let (s, c) = tree.qry_range(lv.first + i);
        *m = r[s as usize..(s + c) as usize].iter().fold(0.0f64, |a, &b| a.max(b));
    });
    for p in 1..tree.planes.len() {
        let pl = tree.planes[p];
        for n in pl.first..pl.first + pl.len {
            out[n] = tree.children(n).fold(0.0f64, |a, c| a.max(out[c]));
        }
    }
    out
}

/// Where the filling pass writes: query `i`'s entries from `offsets[i]` (input order),
/// into arrays not yet initialised (every entry is written once).
struct ListSinks<'a> {
    offsets: &'a [i64],
    indices: DisjointSlice<'a, MaybeUninit<i64>>,
    distances: Option<DisjointSlice<'a, MaybeUninit<f64>>>,
    order: ListOrder,
}

pub(crate) struct RadiusJob<'a, T: Real, const D: usize> {
    pub zs: &'a Prepared<Cpu, T, D>,
    pub radii: &'a Radii<'a, Cpu>,
    /// Source masses and scalar in z-order.
    pub masses: Option<&'a [f64]>,
    pub scalar: Option<&'a [f64]>,
}

/// Per-task scratch: the kept candidate leaves of a query leaf, one query's distances to
/// a leaf, its neighbours (distance², source z-index), and the pairs found.
#[derive(Default)]
pub(crate) struct Scratch {
    leaves: Vec<u32>,
    /// Distances² from the query to one leaf's points.
    d2: Vec<f64>,
    near: Vec<(f64, u32)>,
    pairs: u64,
}

impl<T: Real, const D: usize> RadiusJob<'_, T, D> {
    #[inline(always)]
    fn node_r(&self, a: usize) -> f64 {
        if self.radii.per_query.is_some() { self.radii.node_max[a] } else { self.radii.fixed }
    }

    #[inline(always)]
    fn src_box(&self, n: usize) -> ([f64; D], [f64; D]) {
        let t = &self.zs.tree;
        (t.src_lo[n].map(|v| v.to_f64()), t.src_hi[n].map(|v| v.to_f64()))
    }

    #[inline(always)]
    fn qry_box(&self, n: usize) -> ([f64; D], [f64; D]) {
        let (lo, hi) = self.zs.tree.qry_box(n);
        (lo.map(|v| v.to_f64()), hi.map(|v| v.to_f64()))
    }

    pub fn node_pass<M: Metric<f64, D>>(&self, metric: &M, parent: usize, lists: &Lists<Cpu>) -> Lists<Cpu> {
        walk_plane(&self.zs.tree, parent, lists, || (), |a, cands, _s, out| self.push_reached(metric, a, cands, out))
    }

    /// Appends to `out` the candidates of node `a` its queries may reach (the node test).
    fn push_reached<M: Metric<f64, D>>(&self, metric: &M, a: usize, cands: &Candidates<'_>, out: &mut Vec<u32>) {
        let (alo, ahi) = self.qry_box(a);
        let r = self.node_r(a);
        let r2 = r * r;
        for &b in cands.nodes {
            let (blo, bhi) = self.src_box(b as usize);
            if metric.box_min2(&alo, &ahi, &blo, &bhi) <= r2 {
                out.push(b);
            }
        }
    }

    /// Calls `each(z, near)` for every query z of leaf `a` with its neighbours (distance²,
    /// source z-index; in no particular order), or `count(z, n)` with their number only
    /// when `count_only` (sources of a leaf wholly within the radius are then counted
    /// without distances).
    #[allow(clippy::too_many_arguments)]
    fn leaf_queries<M: Metric<f64, D>>(
        &self,
        metric: &M,
        a: usize,
        cands: &Candidates<'_>,
        s: &mut Scratch,
        count_only: bool,
        each: impl FnMut(usize, &[(f64, u32)]),
        count: impl FnMut(usize, u64),
    ) {
        match simd::level() {
            // SAFETY: `level()` returns a level only when the CPU has its features.
            #[cfg(target_arch = "x86_64")]
            Simd::Avx2 | Simd::Avx512 => unsafe { self.leaf_queries_avx2(metric, a, cands, s, count_only, each, count) },
            _ => self.leaf_queries_at(metric, a, cands, s, count_only, each, count),
        }
    }

    #[cfg(target_arch = "x86_64")]
    #[target_feature(enable = "avx2,fma,bmi1,bmi2,popcnt,lzcnt")]
    #[allow(clippy::too_many_arguments)]
    unsafe fn leaf_queries_avx2<M: Metric<f64, D>>(
        &self,
        metric: &M,
        a: usize,
        cands: &Candidates<'_>,
        s: &mut Scratch,
        count_only: bool,
        each: impl FnMut(usize, &[(f64, u32)]),
        count: impl FnMut(usize, u64),
    ) {
        self.leaf_queries_at(metric, a, cands, s, count_only, each, count)
    }

    /// The body of `leaf_queries`, compiled at the baseline and with AVX2 (the same IEEE
    /// operations: identical results).
    #[inline(always)]
    #[allow(clippy::too_many_arguments)]
    fn leaf_queries_at<M: Metric<f64, D>>(
        &self,
        metric: &M,
        a: usize,
        cands: &Candidates<'_>,
        s: &mut Scratch,
        count_only: bool,
        mut each: impl FnMut(usize, &[(f64, u32)]),
        mut count: impl FnMut(usize, u64),
    ) {
        let mut leaves = std::mem::take(&mut s.leaves);
        leaves.clear();
        self.push_reached(metric, a, cands, &mut leaves);
        let t = &self.zs.tree;
        let (qpos, _) = self.zs.queries();
        let (q0, qn) = t.qry_range(a);
        let sp = &self.zs.src_pos;
        for z in q0 as usize..(q0 + qn) as usize {
            let x: [f64; D] = std::array::from_fn(|d| qpos[d][z].to_f64());
            let r = self.radii.per_query.map_or(self.radii.fixed, |r| r[z]);
            let r2 = r * r;
            s.near.clear();
            let mut n = 0u64;
            let limit = if count_only && self.radii.count_limit > 0 { self.radii.count_limit } else { u64::MAX };
            for &b in &leaves {
                if n >= limit {
                    break;
                }
                let b = b as usize;
                let (blo, bhi) = self.src_box(b);
                if metric.box_min2(&x, &x, &blo, &bhi) > r2 {
                    continue;
                }
                let (s0, sc) = (t.src_start[b] as usize, t.src_count[b] as usize);
                if count_only && metric.box_max2(&x, &x, &blo, &bhi) <= r2 {
                    n += sc as u64;
                    continue;
                }
                let d2 = &mut s.d2;
                leaf_distances(metric, &x, &blo, &bhi, sp, s0, sc, d2);
                if count_only {
                    n += d2.iter().filter(|&&v| v <= r2).count() as u64;
                } else {
                    // Masks of 8 compares, then only the hits' bits.
                    for (c, chunk) in d2.chunks(8).enumerate() {
                        let mut m = 0u32;
                        for (i, &v) in chunk.iter().enumerate() {
                            m |= ((v <= r2) as u32) << i;
                        }
                        while m != 0 {
                            let k = c * 8 + m.trailing_zeros() as usize;
                            s.near.push((d2[k], (s0 + k) as u32));
                            m &= m - 1;
                        }
                    }
                }
            }
            if count_only {
                let n = n.min(limit);
                s.pairs += n;
                count(z, n);
            } else {
                s.pairs += s.near.len() as u64;
                each(z, &s.near);
            }
        }
        s.leaves = leaves;
    }

    /// The first pass: counts and reductions. Returns the pairs within the radius.
    pub fn count_pass<M: Metric<f64, D>>(&self, metric: &M, lists: &Lists<Cpu>, sinks: &RadiusSinks<'_, Cpu>) -> u64 {
        let orig = self.zs.queries().1;
        let src_orig = &self.zs.src_orig;
        let count_only = sinks.scalar_sum.is_none() && sinks.scalar_mean.is_none() && sinks.density.is_none();
        let pairs = std::sync::atomic::AtomicU64::new(0);
        let write_count = |z: usize, n: u64| {
            let i = orig[z] as usize;
            // SAFETY: every query is visited once, by the one task holding its leaf; rows
            // are distinct per query.
            unsafe {
                if let Some(c) = &sinks.counts {
                    c.write(i, n as i64);
                }
                if let Some(c) = &sinks.counts_z {
                    c.write(z, n as u32);
                }
            }
        };
        walk_leaves(&self.zs.tree, lists, Scratch::default, |a, cands, s| {
            let before = s.pairs;
            let mut near_sorted: Vec<(u32, f64)> = Vec::new();
            self.leaf_queries(
                metric,
                a,
                cands,
                s,
                count_only,
                |z, near| {
                    write_count(z, near.len() as u64);
                    // Sums in ascending source input index.
                    near_sorted.clear();
                    near_sorted.extend(near.iter().map(|&(d2, j)| (j, d2)));
                    near_sorted.sort_unstable_by_key(|e| src_orig[e.0 as usize]);
                    let i = orig[z] as usize;
                    if let Some(sc) = self.scalar {
                        let sum = near_sorted.iter().fold(0.0, |a, e| a + sc[e.0 as usize]);
                        // SAFETY: as above.
                        unsafe {
                            if let Some(o) = &sinks.scalar_sum {
                                o.write(i, sum);
                            }
                            if let Some(o) = &sinks.scalar_mean {
                                o.write(i, if near.is_empty() { f64::NAN } else { sum / near.len() as f64 });
                            }
                        }
                    }
                    if let Some(o) = &sinks.density {
                        let h = self.radii.per_query.map_or(self.radii.fixed, |r| r[z]);
                        let rho =
                            near_sorted.iter().fold(0.0, |a, e| a + self.masses.map_or(1.0, |m| m[e.0 as usize]) * sph_kernel::<D>(e.1.sqrt(), h));
                        // SAFETY: as above.
                        unsafe { o.write(i, rho) };
                    }
                },
                write_count,
            );
            pairs.fetch_add(s.pairs - before, std::sync::atomic::Ordering::Relaxed);
        });
        pairs.into_inner()
    }

    /// The second pass: every query's entries, ordered, at its offset.
    fn fill_pass<M: Metric<f64, D>>(&self, metric: &M, lists: &Lists<Cpu>, out: &ListSinks<'_>) {
        let orig = self.zs.queries().1;
        let src_orig = &self.zs.src_orig;
        walk_leaves(&self.zs.tree, lists, Scratch::default, |a, cands, s| {
            let mut row: Vec<(f64, u32)> = Vec::new();
            let (mut ids, mut tmp): (Vec<u32>, Vec<u32>) = (Vec::new(), Vec::new());
            self.leaf_queries(
                metric,
                a,
                cands,
                s,
                false,
                |z, near| {
                    let i = orig[z] as usize;
                    let off = out.offsets[i] as usize;
                    // Every entry of the lists is written once (they are not initialised):
                    // the walk reproduces the counting pass's counts, checked.
                    assert_eq!(out.offsets[i + 1] as usize - off, near.len(), "the count pass counted query {i} differently");
                    if out.order == ListOrder::Index && out.distances.is_none() {
                        // Indices alone: a sort of plain integers.
                        ids.clear();
                        ids.extend(near.iter().map(|&(_, j)| src_orig[j as usize]));
                        sort_u32(&mut ids, &mut tmp);
                        for (k, &idx) in ids.iter().enumerate() {
                            // SAFETY: as below.
                            unsafe { out.indices.write(off + k, MaybeUninit::new(idx as i64)) };
                        }
                        return;
                    }
                    row.clear();
                    row.extend(near.iter().map(|&(d2, j)| (d2, src_orig[j as usize])));
                    match out.order {
                        ListOrder::Distance => row.sort_unstable_by(|x, y| x.0.total_cmp(&y.0).then(x.1.cmp(&y.1))),
                        ListOrder::Index => row.sort_unstable_by_key(|e| e.1),
                    }
                    for (k, &(d2, idx)) in row.iter().enumerate() {
                        // SAFETY: query i owns entries offsets[i] .. offsets[i + 1], and
                        // only this task visits it.
                        unsafe {
                            out.indices.write(off + k, MaybeUninit::new(idx as i64));
                            if let Some(d) = &out.distances {
                                d.write(off + k, MaybeUninit::new(d2.sqrt()));
                            }
                        }
                    }
                },
                |_, _| unreachable!("the fill pass gathers neighbours"),
            );
        });
    }
}

/// `out[k]` = the metric's distance² from `x` to source `s0 + k` for `k < sc` (the point
/// of `x` in box A, the sources in box B = [blo, bhi]). Where every difference takes one
/// minimum image (always in open space) the shift is added to plain differences, bit for
/// bit the metric's value, in a loop the compiler vectorises.
#[allow(clippy::too_many_arguments)]
#[inline(always)]
fn leaf_distances<T: Real, const D: usize, M: Metric<f64, D>>(
    metric: &M,
    x: &[f64; D],
    blo: &[f64; D],
    bhi: &[f64; D],
    sp: &[Vec<T>; D],
    s0: usize,
    sc: usize,
    out: &mut Vec<f64>,
) {
    out.clear();
    out.resize(sc, 0.0);
    let cols: [&[T]; D] = std::array::from_fn(|d| &sp[d][s0..s0 + sc]);
    match metric.shift(x, x, blo, bhi) {
        Some(sh) => {
            for (k, o) in out.iter_mut().enumerate() {
                let mut acc = 0.0f64;
                for d in 0..D {
                    let t = (x[d] - cols[d][k].to_f64()) + sh[d];
                    acc += t * t;
                }
                *o = acc;
            }
        }
        None => {
            for (k, o) in out.iter_mut().enumerate() {
                let y: [f64; D] = std::array::from_fn(|d| cols[d][k].to_f64());
                *o = metric.dist2(x, &y);
            }
        }
    }
}

impl crate::backend::RadiusPasses for Cpu {
    fn radius_node_max<T: Real, const D: usize>(&self, zs: &Prepared<Cpu, T, D>, per_query: Option<&Vec<f64>>) -> Result<Vec<f64>> {
        Ok(node_max(&zs.tree, per_query.map(|v| v.as_slice())))
    }

    fn radius_node_pass<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Cpu, T, D>,
        radii: &Radii<'_, Cpu>,
        parent: usize,
        lists: &Lists<Cpu>,
    ) -> Result<Lists<Cpu>> {
        Ok(RadiusJob { zs, radii, masses: None, scalar: None }.node_pass(metric, parent, lists))
    }

    fn radius_count_pass<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Cpu, T, D>,
        radii: &Radii<'_, Cpu>,
        fields: &ZFields<'_, Cpu>,
        lists: &Lists<Cpu>,
        sinks: &RadiusSinks<'_, Cpu>,
    ) -> Result<u64> {
        let job = RadiusJob { zs, radii, masses: fields.masses.map(|v| v.as_slice()), scalar: fields.scalar.map(|v| v.as_slice()) };
        Ok(job.count_pass(metric, lists, sinks))
    }

    fn radius_lists<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Cpu, T, D>,
        radii: &Radii<'_, Cpu>,
        lists: &Lists<Cpu>,
        sinks: &RadiusSinks<'_, Cpu>,
        pairs: u64,
        req: ListRequest,
    ) -> Result<NeighbourLists> {
        let orig = zs.queries().1;
        let nq = orig.len();
        let bytes = crate::radius::list_bytes(nq, pairs, req.distances);
        if req.max_bytes > 0 && bytes > req.max_bytes {
            return Err(Error::OutOfMemory { what: "the neighbour lists (over the memory limit)", bytes });
        }
        let counts_z = sinks.counts_z.as_ref().expect("lists need the z-order counts");
        // Counts in input order, then their prefix sum.
        let mut offsets = try_vec(nq + 1, 0i64, bytes)?;
        for (z, &i) in orig.iter().enumerate() {
            // SAFETY: the counting pass is over; nothing else touches the counts.
            offsets[i as usize + 1] = unsafe { counts_z.read(z) } as i64;
        }
        for i in 0..nq {
            offsets[i + 1] += offsets[i];
        }
        assert_eq!(offsets[nq] as u64, pairs, "the counts add up to the pairs");
        // Not initialised: the filling pass writes every entry once, into pages mapped in
        // first by parallel madvise calls (not one fault per 4 KiB in the hot loop).
        let m = pairs as usize;
        let mut indices: Vec<i64> = uninit_vec(m, bytes)?;
        let mut distances: Vec<f64> = if req.distances { uninit_vec(m, bytes)? } else { Vec::new() };
        super::par::prefault(&mut indices.spare_capacity_mut()[..m]);
        if req.distances {
            super::par::prefault(&mut distances.spare_capacity_mut()[..m]);
        }
        {
            let out = ListSinks {
                offsets: &offsets,
                indices: DisjointSlice::new(&mut indices.spare_capacity_mut()[..m]),
                distances: req.distances.then(|| DisjointSlice::new(&mut distances.spare_capacity_mut()[..m])),
                order: req.order,
            };
            RadiusJob { zs, radii, masses: None, scalar: None }.fill_pass(metric, lists, &out);
        }
        // SAFETY: the filling pass wrote entries offsets[i] .. offsets[i + 1] of every query
        // i (the counts of the counting pass, which the same walk reproduces), and those
        // ranges cover 0 .. m.
        unsafe {
            indices.set_len(m);
            if req.distances {
                distances.set_len(m);
            }
        }
        Ok(NeighbourLists { offsets, indices, distances })
    }
}

/// `n` copies of `v`, or `Error::OutOfMemory` (for lists of `bytes` in all).
fn try_vec<V: Clone>(n: usize, v: V, bytes: u64) -> Result<Vec<V>> {
    let mut out = uninit_vec(n, bytes)?;
    out.resize(n, v);
    Ok(out)
}

/// Room for `n` elements (length 0), or `Error::OutOfMemory`.
fn uninit_vec<V>(n: usize, bytes: u64) -> Result<Vec<V>> {
    let mut out = Vec::new();
    out.try_reserve_exact(n).map_err(|_| Error::OutOfMemory { what: "the neighbour lists", bytes })?;
    Ok(out)
}

/// Sorts `v` ascending: short rows by comparisons, long ones (dense regions: hundreds of
/// neighbours) by an LSD radix sort over the bytes the largest value has, through `tmp`.
fn sort_u32(v: &mut Vec<u32>, tmp: &mut Vec<u32>) {
    if v.len() <= 96 {
        v.sort_unstable();
        return;
    }
    let max = v.iter().copied().max().unwrap_or(0);
    let bytes = (32 - max.leading_zeros()).div_ceil(8);
    tmp.clear();
    tmp.resize(v.len(), 0);
    for b in 0..bytes {
        let shift = 8 * b;
        let mut count = [0usize; 257];
        for &x in v.iter() {
            count[((x >> shift) & 255) as usize + 1] += 1;
        }
        for i in 0..256 {
            count[i + 1] += count[i];
        }
        for &x in v.iter() {
            let d = ((x >> shift) & 255) as usize;
            tmp[count[d]] = x;
            count[d] += 1;
        }
        std::mem::swap(v, tmp);
    }
}
