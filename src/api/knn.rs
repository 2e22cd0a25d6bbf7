//! kNN on a context: self-query, separate queries, owned neighbour lists.

use rayon::prelude::*;

use super::Context;
use crate::backend::cpu::{Cpu, DisjointSlice, permute};
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::input::{Domain, PointSource};
use crate::knn::{KnnLists, KnnOutput, KnnParams, KnnStats, OutputOrder, SourceFields, check_call};
use crate::pipeline::KnnSinks;
use crate::pipeline::knn::KnnFields;

impl Context {
    /// Self-query: the k nearest points of every point (itself first, at distance 0).
    pub fn knn_self<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &SourceFields<'_>,
        params: &KnnParams,
        out: &mut KnnOutput<'_, T>,
    ) -> Result<KnnStats> {
        self.pool.install(|| run::<T, D, P, P>(self, domain, points, None, fields, params, out))
    }

    /// The k nearest sources of every query.
    pub fn knn<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        sources: &S,
        queries: &Q,
        fields: &SourceFields<'_>,
        params: &KnnParams,
        out: &mut KnnOutput<'_, T>,
    ) -> Result<KnnStats> {
        self.pool.install(|| run(self, domain, sources, Some(queries), fields, params, out))
    }

    /// Convenience: full neighbour lists in input order (`queries = None`: self-query).
    pub fn knn_lists<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        sources: &P,
        queries: Option<&P>,
        k: usize,
    ) -> Result<KnnLists<T>> {
        let params = KnnParams::new(k);
        params.validate()?;
        let nq = queries.map_or(sources.len(), |q| q.len());
        let len = nq.checked_mul(k).ok_or(Error::InvalidParameter { name: "k", why: "n_queries * k overflows".into() })?;
        let mut indices = vec![0i64; len];
        let mut distances = vec![T::ZERO; len];
        let mut out = KnnOutput { indices: Some(&mut indices), distances: Some(&mut distances), ..Default::default() };
        let fields = SourceFields::default();
        let stats = match queries {
            None => self.knn_self(domain, sources, &fields, &params, &mut out)?,
            Some(q) => self.knn(domain, sources, q, &fields, &params, &mut out)?,
        };
        Ok(KnnLists { k, indices, distances, stats })
    }
}

fn run<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
    ctx: &Context,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &SourceFields<'_>,
    params: &KnnParams,
    out: &mut KnnOutput<'_, T>,
) -> Result<KnnStats> {
    params.validate()?;
    let ns = sources.len();
    if ns == 0 {
        return Err(Error::NoSources);
    }
    let nq = queries.map_or(ns, |q| q.len());
    check_call(ns, nq, params, fields, out)?;
    // Rows in input order are written in z-order by the leaf pass and moved afterwards,
    // through the positions' memory (`permute`), where every array's lanes fit there.
    let lanes = moved_lanes(out, params.k)
        .filter(|l| out.order == OutputOrder::Input && nq >= permute::MIN_ROWS && !l.is_empty() && permute::fits(D, size_of::<T>(), l));
    let moved = lanes.is_some();
    let (mut stats, zs) = {
        let t = std::time::Instant::now();
        let sinks = sinks(out, out.order == OutputOrder::ZOrder || moved);
        let outputs = t.elapsed().as_secs_f64();
        let kf = KnnFields::<Cpu> { masses: fields.masses, scalar: fields.scalar, kth_hint: params.kth_hint };
        let (mut stats, zs) = crate::pipeline::knn::run(&Cpu, domain, sources, queries, &kf, params.k, &ctx.config.tree, &sinks)?;
        // The prefault of fresh output rows is part of the call (~10% of a 1e6 k = 16 call
        // on the development VM): a stage of its own, so the stages add up to the call.
        stats.timings.stages.insert(0, ("outputs", outputs));
        (stats, zs)
    };
    // Which query each row is: the z-order's input indices, or (rows in input order) the
    // identity.
    if let Some(p) = out.permutation.as_deref_mut() {
        match out.order {
            OutputOrder::ZOrder => p.par_iter_mut().zip(zs.queries().1.par_iter()).for_each(|(p, &o)| *p = o as i64),
            OutputOrder::Input => p.par_iter_mut().enumerate().for_each(|(i, p)| *p = i as i64),
        }
    }
    if let Some(lanes) = lanes {
        let t = std::time::Instant::now();
        let (mut pos, orig) = match zs.qry {
            Some(q) => q,
            None => (zs.src_pos, zs.src_orig),
        };
        rows_to_input_order(&orig, &mut pos, out, &lanes);
        stats.timings.stages.push(("rows", t.elapsed().as_secs_f64()));
    }
    Ok(stats)
}

/// The lane bytes of each array the call writes, as `permute` moves them (indices as
/// u32), or None when a row holds more than one value (k > 1 with neighbour lists).
fn moved_lanes<T>(o: &KnnOutput<'_, T>, k: usize) -> Option<Vec<usize>> {
    let lists = o.indices.is_some() || o.distances.is_some();
    if lists && k != 1 {
        return None;
    }
    let b = size_of::<T>();
    let arrays =
        [(o.indices.is_some(), 4), (o.distances.is_some(), b), (o.kth_distance.is_some(), b), (o.density.is_some(), 8), (o.scalar_mean.is_some(), 8)];
    Some(arrays.iter().filter(|a| a.0).map(|a| a.1).collect())
}

/// Moves every array of `out` (one value per row: `moved_lanes`) from z-order (row z:
/// query `orig[z]`) to input order, with the dead position columns `pos` as the lanes
/// (`permute::fits` said they suffice).
fn rows_to_input_order<T: Real, const D: usize>(orig: &[u32], pos: &mut [Vec<T>; D], out: &mut KnnOutput<'_, T>, lane_bytes: &[usize]) {
    let n = orig.len();
    let eight = lane_bytes.iter().filter(|&&b| b == 8).count();
    let mut lanes = permute::Lanes::new(pos, n, eight);
    let fitted = "permute::fits counted the lanes";
    let ids = lanes.take::<u32>().expect(fitted);
    // Indices below 2^32 - 1 (MAX_POINTS), a pad's -1 as u32::MAX.
    let enc_idx = |v: i64| v as u32;
    let dec_idx = |l: u32| if l == u32::MAX { -1 } else { l as i64 };
    let same = |v| v;
    let idx = out.indices.as_deref_mut().map(|a| permute::Moved::new(a, lanes.take::<u32>().expect(fitted), enc_idx, dec_idx));
    let dist = out.distances.as_deref_mut().map(|a| permute::Moved::new(a, lanes.take::<T>().expect(fitted), same, same));
    let kth = out.kth_distance.as_deref_mut().map(|a| permute::Moved::new(a, lanes.take::<T>().expect(fitted), same, same));
    let dens = out.density.as_deref_mut().map(|a| permute::Moved::new(a, lanes.take::<f64>().expect(fitted), |v: f64| v, |v: f64| v));
    let mean = out.scalar_mean.as_deref_mut().map(|a| permute::Moved::new(a, lanes.take::<f64>().expect(fitted), |v: f64| v, |v: f64| v));
    let arrays: Vec<&dyn permute::Move> = [
        idx.as_ref().map(|m| m as &dyn permute::Move),
        dist.as_ref().map(|m| m as &dyn permute::Move),
        kth.as_ref().map(|m| m as &dyn permute::Move),
        dens.as_ref().map(|m| m as &dyn permute::Move),
        mean.as_ref().map(|m| m as &dyn permute::Move),
    ]
    .into_iter()
    .flatten()
    .collect();
    permute::to_input_order(orig, ids, &arrays);
}

/// The caller's output arrays as sinks of the leaf pass (the two row arrays prefaulted
/// first: the pass writes their rows in scattered order).
fn sinks<'a, T: Real>(o: &'a mut KnnOutput<'_, T>, zorder: bool) -> KnnSinks<'a, Cpu, T> {
    if let Some(s) = o.indices.as_deref_mut() {
        crate::backend::cpu::par::prefault(s);
    }
    if let Some(s) = o.distances.as_deref_mut() {
        crate::backend::cpu::par::prefault(s);
    }
    KnnSinks {
        indices: o.indices.as_deref_mut().map(DisjointSlice::new),
        distances: o.distances.as_deref_mut().map(DisjointSlice::new),
        kth: o.kth_distance.as_deref_mut().map(DisjointSlice::new),
        density: o.density.as_deref_mut().map(DisjointSlice::new),
        scalar_mean: o.scalar_mean.as_deref_mut().map(DisjointSlice::new),
        zorder,
        ..Default::default()
    }
}
