//! The distribution layer's per-particle work on the CPU (`DistOps`, backend/dist.rs):
//! host vectors, parallel over chunks of rows.

use std::borrow::Cow;

use rayon::prelude::*;

use super::par::{DisjointSlice, chunk_ranges, filled};
use super::{Cpu, knn};
use crate::backend::dist::{DistOps, Fragments, GroupFields, MergeJob, MergeRows, Reach, widened_radius};
use crate::base::Elem;
use crate::error::Result;
use crate::fof::catalogue::{Member, Row, reduce_group};
use crate::geom::Real;
use crate::geom::decomp::Decomp;
use crate::geom::metric::Metric;
use crate::input::{ParticleIds, ScalarField, VectorField};
use crate::knn::reduce;
use crate::pipeline::Prepared;

const NONE: u32 = u32::MAX;

/// Columns of f64 as one per-particle vector field.
impl<const D: usize> VectorField<D> for [Vec<f64>; D] {
    fn len(&self) -> usize {
        self[0].len()
    }
    fn get(&self, i: usize) -> [f64; D] {
        std::array::from_fn(|d| self[d][i])
    }
}

/// Stable grouping of `n` rows by a destination in `0 .. ranks`: a parallel counting sort.
fn group_rows_by(n: usize, ranks: usize, dest: impl Fn(usize) -> usize + Sync) -> (Vec<u32>, Vec<usize>) {
    let parts = chunk_ranges(n, rayon::current_num_threads().max(1) * 4);
    let counts: Vec<Vec<usize>> = parts
        .par_iter()
        .map(|r| {
            let mut c = vec![0usize; ranks];
            r.clone().for_each(|i| c[dest(i)] += 1);
            c
        })
        .collect();
    let totals: Vec<usize> = (0..ranks).map(|d| counts.iter().map(|c| c[d]).sum()).collect();
    // Where each part writes each destination's rows.
    let mut at = vec![vec![0usize; ranks]; parts.len()];
    let mut base = 0;
    for d in 0..ranks {
        for (p, c) in counts.iter().enumerate() {
            at[p][d] = base;
            base += c[d];
        }
    }
    let mut rows = vec![0u32; n];
    let out = DisjointSlice::new(&mut rows);
    parts.par_iter().zip(at.par_iter_mut()).for_each(|(r, at)| {
        for i in r.clone() {
            let d = dest(i);
            // SAFETY: the parts' ranges per destination are disjoint (laid out above).
            unsafe { out.write(at[d], i as u32) };
            at[d] += 1;
        }
    });
    (rows, totals)
}

impl DistOps for Cpu {
    fn filled<T: Elem>(&self, n: usize, v: T) -> Result<Vec<T>> {
        Ok(filled(n, v))
    }

    fn key_histogram(&self, keys: &Vec<u64>, shapes: &[(u128, u128, u32)], bins: usize) -> Result<Vec<u64>> {
        let zero = || vec![0u64; shapes.len() * bins];
        Ok(keys
            .par_chunks(1 << 16)
            .fold(zero, |mut h, chunk| {
                for &k in chunk {
                    let k = k as u128;
                    for (a, &(lo, hi, shift)) in shapes.iter().enumerate() {
                        if k >= lo && k < hi {
                            h[a * bins + ((k - lo) >> shift) as usize] += 1;
                        }
                    }
                }
                h
            })
            .reduce(zero, |mut a, b| {
                a.iter_mut().zip(&b).for_each(|(x, y)| *x += y);
                a
            }))
    }

    fn key_owners(&self, keys: &Vec<u64>, starts: &[u128]) -> Result<Vec<u32>> {
        let s = &starts[1..];
        Ok(keys.par_iter().map(|&k| s.partition_point(|&x| x <= k as u128) as u32).collect())
    }

    fn group_by_rank(&self, dest: &Vec<u32>, ranks: usize) -> Result<(Vec<u32>, Vec<usize>)> {
        Ok(group_rows_by(dest.len(), ranks, |i| dest[i] as usize))
    }

    fn near_pairs<T: Real, const D: usize>(
        &self,
        decomp: &Decomp<D>,
        me: usize,
        pos: &Vec<[T; D]>,
        keys: Option<&Vec<u64>>,
        reach: Reach<'_, Self, T>,
    ) -> Result<(Vec<u32>, Vec<usize>)> {
        let n = pos.len();
        let eps = if T::IS_F64 { f64::EPSILON } else { f32::EPSILON as f64 };
        let span = decomp.box_len().map_or(0.0, |l| l.iter().fold(0.0f64, |a, &b| a.max(b)));
        // Per chunk: its (row, rank) pairs in row order.
        let parts = chunk_ranges(n, rayon::current_num_threads().max(1) * 4);
        let pairs: Vec<Vec<(u32, u32)>> = parts
            .par_iter()
            .map(|r| {
                let (mut out, mut near) = (Vec::new(), Vec::new());
                for i in r.clone() {
                    let x: [f64; D] = std::array::from_fn(|d| pos[i][d].to_f64());
                    let radius = match &reach {
                        Reach::Fixed(l) => *l,
                        Reach::Squared(r2) => widened_radius(r2[i].to_f64(), &x, span, eps),
                    };
                    let key = keys.map_or_else(|| decomp.quant.key(&x), |k| k[i]);
                    decomp.near_ranks(&x, key, radius, me, &mut near);
                    out.extend(near.iter().map(|&s| (i as u32, s)));
                }
                out
            })
            .collect();
        let flat: Vec<(u32, u32)> = pairs.into_iter().flatten().collect();
        let (order, counts) = group_rows_by(flat.len(), decomp.ranks(), |j| flat[j].1 as usize);
        Ok((order.iter().map(|&j| flat[j as usize].0).collect(), counts))
    }

    fn gather<T: Elem>(&self, src: &Vec<T>, rows: &Vec<u32>, width: usize) -> Result<Vec<T>> {
        if width == 1 {
            return Ok(rows.par_iter().map(|&r| src[r as usize]).collect());
        }
        let mut out = filled(rows.len() * width, T::FILL);
        if width > 0 {
            out.par_chunks_mut(width).zip(rows.par_iter()).for_each(|(o, &r)| {
                let r = r as usize * width;
                o.copy_from_slice(&src[r..r + width]);
            });
        }
        Ok(out)
    }

    fn offset_rows(&self, rows: &Vec<u32>, offset: u64) -> Result<Vec<u64>> {
        Ok(rows.par_iter().map(|&r| offset + r as u64).collect())
    }

    fn append<T: Elem>(&self, mut a: Vec<T>, b: &Vec<T>) -> Result<Vec<T>> {
        a.try_reserve_exact(b.len()).map_err(|_| crate::error::Error::OutOfMemory { what: "columns", bytes: (8 * (a.len() + b.len())) as u64 })?;
        a.extend_from_slice(b);
        Ok(a)
    }

    fn segment_sums(&self, v: &Vec<u32>, segments: &[usize]) -> Result<Vec<usize>> {
        let mut at = 0;
        Ok(segments
            .iter()
            .map(|&len| {
                let s = v[at..at + len].iter().map(|&x| x as usize).sum();
                at += len;
                s
            })
            .collect())
    }

    fn sqrt<T: Real>(&self, v: &Vec<T>) -> Result<Vec<T>> {
        Ok(v.par_iter().map(|&x| x.sqrt()).collect())
    }

    fn landing<T: Elem>(&self, n: usize) -> Result<Vec<T>> {
        Ok(vec![T::FILL; n])
    }

    fn host_slice<'a, T: Elem>(&self, b: &'a Vec<T>) -> Option<&'a [T]> {
        Some(b)
    }

    fn host_slice_mut<'a, T: Elem>(&self, b: &'a mut Vec<T>) -> Option<&'a mut [T]> {
        Some(b)
    }

    fn device_ptr<T: Elem>(&self, _b: &Vec<T>) -> Result<Option<u64>> {
        Ok(None)
    }

    fn download_range<T: Elem>(&self, b: &Vec<T>, at: usize, out: &mut [T]) -> Result<()> {
        out.copy_from_slice(&b[at..at + out.len()]);
        Ok(())
    }

    fn upload_range<T: Elem>(&self, b: &mut Vec<T>, at: usize, data: &[T]) -> Result<()> {
        b[at..at + data.len()].copy_from_slice(data);
        Ok(())
    }

    fn copy_range<T: Elem>(&self, src: &Vec<T>, from: usize, dst: &mut Vec<T>, to: usize, len: usize) -> Result<()> {
        dst[to..to + len].copy_from_slice(&src[from..from + len]);
        Ok(())
    }

    fn to_host<'a, T: Elem>(&self, b: &'a Vec<T>) -> Result<Cow<'a, [T]>> {
        Ok(Cow::Borrowed(&b[..]))
    }

    fn upload_host<T: Elem>(&self, v: Vec<T>) -> Result<Vec<T>> {
        Ok(v)
    }

    fn scalar_of<'a>(&self, b: &'a Vec<f64>) -> &'a dyn ScalarField {
        b
    }
    fn out_of<'a, T: Elem>(&self, b: &'a mut Vec<T>) -> DisjointSlice<'a, T> {
        DisjointSlice::new(b)
    }

    fn gather_vectors<const D: usize>(&self, v: &dyn VectorField<D>, rows: &Vec<u32>) -> Result<[Vec<f64>; D]> {
        let aos: Vec<[f64; D]> = rows.par_iter().map(|&r| v.get(r as usize)).collect();
        Ok(std::array::from_fn(|d| aos.par_iter().map(|x| x[d]).collect()))
    }

    fn gather_ids(&self, ids: &dyn ParticleIds, rows: &Vec<u32>) -> Result<Vec<i64>> {
        Ok(rows.par_iter().map(|&r| ids.id(r as usize)).collect())
    }

    fn scatter_out<T: Elem>(&self, out: &DisjointSlice<'_, T>, rows: &Vec<u32>, vals: &Vec<T>, width: usize) -> Result<()> {
        if width == 1 {
            // SAFETY: `rows` are distinct input rows: each output element is written once.
            rows.par_iter().zip(vals.par_iter()).for_each(|(&r, &v)| unsafe { out.write(r as usize, v) });
        } else if width > 0 {
            vals.par_chunks(width).zip(rows.par_iter()).for_each(|(v, &r)| {
                // SAFETY: `rows` are distinct input rows: each output row is written once.
                unsafe { out.slice_mut(r as usize * width, width).copy_from_slice(v) };
            });
        }
        Ok(())
    }

    fn ball_query<T: Real, const D: usize, M: Metric<T, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        queries: &Vec<[T; D]>,
        r2: &Vec<T>,
        first: Option<&Vec<u32>>,
        k: usize,
    ) -> Result<(Vec<i64>, Vec<T>)> {
        Ok(knn::ball_query(metric, zs, queries, r2, first.map(|f| &f[..]), k))
    }

    fn row_counts(&self, idx: &Vec<i64>, width: usize) -> Result<Vec<u32>> {
        if width == 0 {
            return Ok(Vec::new());
        }
        Ok(idx.par_chunks(width).map(|r| r.iter().take_while(|&&x| x >= 0).count() as u32).collect())
    }

    fn index_rows(&self, idx: &Vec<i64>) -> Result<Vec<u32>> {
        Ok(idx.par_iter().map(|&i| i as u32).collect())
    }

    fn distinct_rows(&self, rows: &Vec<u32>, n: usize) -> Result<Vec<u32>> {
        let mut seen = vec![false; n];
        rows.iter().for_each(|&r| seen[r as usize] = true);
        Ok((0..n as u32).filter(|&r| seen[r as usize]).collect())
    }

    fn compact_rows<T: Elem>(&self, v: &Vec<T>, counts: &Vec<u32>, width: usize) -> Result<Vec<T>> {
        let mut out = Vec::with_capacity(counts.iter().map(|&c| c as usize).sum());
        for (r, &c) in counts.iter().enumerate() {
            out.extend_from_slice(&v[r * width..r * width + c as usize]);
        }
        Ok(out)
    }

    fn knn_merge<T: Real, const D: usize>(&self, job: &MergeJob<'_, Self, T>, rows: MergeRows<'_, Self, T>) -> Result<()> {
        let k = job.k;
        let nb = job.boundary.len();
        // Per boundary query, its pairs (in pair order) and where their candidates start.
        let mut at = Vec::with_capacity(job.pair_rows.len() + 1);
        at.push(0usize);
        for &c in job.reply_counts.iter() {
            at.push(at.last().unwrap() + c as usize);
        }
        let place = |q: u32| job.boundary.binary_search(&q).expect("a shipped query is a boundary query");
        let (pair_order, starts) = {
            let (order, counts) = group_rows_by(job.pair_rows.len(), nb, |j| place(job.pair_rows[j]));
            let mut s = vec![0usize; nb + 1];
            for b in 0..nb {
                s[b + 1] = s[b] + counts[b];
            }
            (order, s)
        };
        type Cand<T> = (T, u64, f64, f64);
        let results: Vec<Vec<Cand<T>>> = (0..nb)
            .into_par_iter()
            .map(|b| {
                let q = job.boundary[b] as usize;
                let mut cands: Vec<Cand<T>> = Vec::new();
                for j in b * k..(b + 1) * k {
                    if job.own_idx[j] >= 0 {
                        let u = job.own_idx[j] as usize;
                        cands.push((job.own_d2[j], job.gidx[u], job.mass.map_or(0.0, |m| m[u]), job.scalar.map_or(0.0, |s| s[u])));
                    }
                }
                for &p in &pair_order[starts[b]..starts[b + 1]] {
                    for e in at[p as usize]..at[p as usize + 1] {
                        cands.push((
                            job.reply_d2[e],
                            job.reply_gidx[e],
                            job.reply_mass.map_or(0.0, |m| m[e]),
                            job.reply_scalar.map_or(0.0, |s| s[e]),
                        ));
                    }
                }
                // (distance², not self, global index): in a self-query a point comes first.
                let me = if job.self_query { job.gidx[q] } else { u64::MAX };
                cands.sort_unstable_by(|a, b| a.0.partial_cmp(&b.0).unwrap().then((a.1 != me).cmp(&(b.1 != me))).then(a.1.cmp(&b.1)));
                cands.truncate(k);
                cands
            })
            .collect();
        let MergeRows { kth_d2, mut density, mut scalar_mean, mut idx, mut d2 } = rows;
        for (b, cands) in results.iter().enumerate() {
            let q = job.boundary[b] as usize;
            let m = cands.len();
            let kth2 = if m == k { cands[k - 1].0 } else { T::INFINITY };
            kth_d2[q] = kth2;
            if let (Some(idx), Some(d2)) = (idx.as_deref_mut(), d2.as_deref_mut()) {
                for j in 0..k {
                    idx[q * k + j] = if j < m { cands[j].1 as i64 } else { -1 };
                    d2[q * k + j] = if j < m { cands[j].0 } else { T::INFINITY };
                }
            }
            if let Some(dens) = density.as_deref_mut() {
                let mass = job.mass.map(|_| cands.iter().map(|c| c.2).sum::<f64>());
                dens[q] = reduce::density::<D>(mass, m, k, kth2.sqrt().to_f64());
            }
            if let Some(sm) = scalar_mean.as_deref_mut() {
                sm[q] = reduce::mean(cands.iter().map(|c| c.3));
            }
        }
        Ok(())
    }

    fn globalize_rows(&self, idx: &mut Vec<i64>, width: usize, gidx: &Vec<u64>, skip: &Vec<u32>) -> Result<()> {
        if width == 0 {
            return Ok(());
        }
        let mut skipped = vec![false; idx.len() / width];
        skip.iter().for_each(|&r| skipped[r as usize] = true);
        idx.par_chunks_mut(width).zip(skipped.par_iter()).for_each(|(row, &s)| {
            if !s {
                for v in row.iter_mut().filter(|v| **v >= 0) {
                    *v = gidx[*v as usize] as i64;
                }
            }
        });
        Ok(())
    }

    fn fof_fragments(&self, orig: &Vec<u32>, roots: &Vec<u32>, n_own: usize) -> Result<Fragments<Self>> {
        let nu = orig.len();
        let mut frag_of_root = vec![NONE; nu];
        let mut frag_of = vec![NONE; n_own];
        let mut n_frag = 0usize;
        for z in 0..nu {
            let u = orig[z] as usize;
            if u < n_own {
                let r = roots[z] as usize;
                if frag_of_root[r] == NONE {
                    frag_of_root[r] = n_frag as u32;
                    n_frag += 1;
                }
                frag_of[u] = frag_of_root[r];
            }
        }
        let mut edges: Vec<(u32, u32)> = (0..nu)
            .filter(|&z| orig[z] as usize >= n_own)
            .filter_map(|z| {
                let f = frag_of_root[roots[z] as usize];
                (f != NONE).then(|| (orig[z] - n_own as u32, f))
            })
            .collect();
        edges.sort_unstable();
        Ok(Fragments { n_frag, frag_of, edge_ghost: edges.iter().map(|e| e.0).collect(), edge_frag: edges.iter().map(|e| e.1).collect() })
    }

    fn fragment_sums(&self, frag_of: &Vec<u32>, tag: &Vec<i64>, n_frag: usize) -> Result<(Vec<u64>, Vec<i64>)> {
        let mut count = vec![0u64; n_frag];
        let mut min_tag = vec![i64::MAX; n_frag];
        for (&f, &t) in frag_of.iter().zip(tag) {
            count[f as usize] += 1;
            min_tag[f as usize] = min_tag[f as usize].min(t);
        }
        Ok((count, min_tag))
    }

    fn scatter_host<T: Elem>(&self, dst: &mut Vec<T>, rows: &[u32], vals: &[T]) -> Result<()> {
        rows.iter().zip(vals).for_each(|(&r, &v)| dst[r as usize] = v);
        Ok(())
    }

    fn fragment_labels(&self, count: &Vec<u64>, tag: &Vec<i64>, min: u64) -> Result<Vec<i64>> {
        Ok(count.par_iter().zip(tag.par_iter()).map(|(&c, &t)| if c >= min { t } else { -1 }).collect())
    }

    fn kept_fragments(&self, count: &Vec<u64>, min: u64) -> Result<Vec<u32>> {
        Ok((0..count.len() as u32).filter(|&f| count[f as usize] >= min).collect())
    }

    fn select_groups(&self, frag_of: &Vec<u32>, n_frag: usize, frags: &[u32]) -> Result<Vec<u32>> {
        let mut place = vec![NONE; n_frag];
        frags.iter().enumerate().for_each(|(g, &f)| place[f as usize] = g as u32);
        Ok(frag_of.par_iter().map(|&f| place[f as usize]).collect())
    }

    fn group_members(&self, group_of: &Vec<u32>, n_groups: usize) -> Result<(Vec<u64>, Vec<u32>)> {
        let mut offsets = vec![0u64; n_groups + 1];
        group_of.iter().filter(|&&g| g != NONE).for_each(|&g| offsets[g as usize + 1] += 1);
        for g in 0..n_groups {
            offsets[g + 1] += offsets[g];
        }
        let mut fill = offsets.clone();
        let mut members = vec![0u32; offsets[n_groups] as usize];
        for (p, &g) in group_of.iter().enumerate() {
            if g != NONE {
                members[fill[g as usize] as usize] = p as u32;
                fill[g as usize] += 1;
            }
        }
        Ok((offsets, members))
    }

    fn group_rows<T: Real, const D: usize>(&self, members: &Vec<u32>, offsets: &[u64], f: &GroupFields<'_, Self, T, D>) -> Result<Vec<Row<D>>> {
        let member = |p: usize| Member {
            pos: std::array::from_fn(|d| f.pos[p][d].to_f64()),
            vel: f.vel.map_or([0.0; D], |v| std::array::from_fn(|d| v[d][p])),
            mass: f.mass.map_or(f.particle_mass, |m| m[p]),
            tag: f.tag[p],
        };
        Ok((0..offsets.len() - 1)
            .into_par_iter()
            .map(|g| {
                let m = &members[offsets[g] as usize..offsets[g + 1] as usize];
                reduce_group(m.len(), |i| member(m[i] as usize), f.box_len, f.vel.is_some())
            })
            .collect())
    }

    fn find_rows(&self, sorted: &Vec<u64>, values: &Vec<u64>) -> Result<Vec<u32>> {
        Ok(values.par_iter().map(|&v| sorted.partition_point(|&x| x < v) as u32).collect())
    }

    fn to_i64(&self, v: &Vec<u64>) -> Result<Vec<i64>> {
        Ok(v.par_iter().map(|&x| x as i64).collect())
    }
}
