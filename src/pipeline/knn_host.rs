//! A kNN call into host arrays on the CPU back end: the pipeline's kNN job with the tail
//! of the call around it — the output rows prefaulted, and rows asked for in input order
//! written in z-order by the leaf pass, then moved through the dead positions' memory
//! (`permute`) where every array's lanes fit there.

use super::KnnSinks;
use super::knn::KnnFields;
use crate::backend::Backend;
use crate::backend::cpu::{Cpu, DisjointSlice, permute};
use crate::base::TreeParams;
use crate::error::Result;
use crate::geom::Real;
use crate::input::{Domain, PointSource};
use crate::knn::{KnnOutput, KnnParams, KnnStats, OutputOrder, SourceFields};

/// Runs a checked kNN call (at least one source) into `out`.
pub(crate) fn run<T: Real, const D: usize, S: PointSource<T, D> + ?Sized, Q: PointSource<T, D> + ?Sized>(
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    fields: &SourceFields<'_>,
    params: &KnnParams,
    tree: &TreeParams,
    out: &mut KnnOutput<'_, T>,
) -> Result<KnnStats> {
    let nq = queries.map_or(sources.len(), |q| q.len());
    // Rows in input order are written in z-order by the leaf pass and moved afterwards,
    // through the positions' memory (`permute`), where every array's lanes fit there.
    let lanes = moved_lanes(out, params.k)
        .filter(|l| out.order == OutputOrder::Input && nq >= permute::MIN_ROWS && !l.is_empty() && permute::fits(D, size_of::<T>(), l));
    let moved = lanes.is_some();
    let (mut stats, zs) = {
        let t = std::time::Instant::now();
        let sinks = sinks(out, out.order == OutputOrder::ZOrder || moved, !moved);
        let outputs = t.elapsed().as_secs_f64();
        let kf = KnnFields::<Cpu> { masses: fields.masses, scalar: fields.scalar, kth_hint: params.kth_hint };
        let (mut stats, zs) = super::knn::run(&Cpu, domain, sources, queries, &kf, params.k, tree, &sinks)?;
        // The prefault of fresh output rows is part of the call (~10% of a 1e6 k = 16 call
        // on the development VM): a stage of its own, so the stages add up to the call.
        stats.timings.stages.insert(0, ("outputs", outputs));
        (stats, zs)
    };
    if let Some(lanes) = lanes {
        let t = std::time::Instant::now();
        let (mut pos, orig) = match zs.qry {
            Some(q) => q,
            None => (zs.src_pos, zs.src_orig),
        };
        rows_to_input_order(&orig, &mut pos, out, &lanes);
        if let Some(p) = out.permutation.as_deref_mut() {
            // Rows now in input order: row r is query r.
            Cpu.row_queries(None, nq, &DisjointSlice::new(p))?;
        }
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
/// first: the pass writes their rows in scattered order); the permutation with them
/// unless the rows are moved afterwards.
fn sinks<'a, T: Real>(o: &'a mut KnnOutput<'_, T>, zorder: bool, permutation: bool) -> KnnSinks<'a, Cpu, T> {
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
        permutation: o.permutation.as_deref_mut().filter(|_| permutation).map(DisjointSlice::new),
        zorder,
        ..Default::default()
    }
}
