//! The first stages of every job: validate → keys (one stage in a periodic box) → sort →
//! levels → gather → refine → types → planes → tree (docs/DESIGN.md §1); a self-query with
//! no runs to refine chooses its planes before the gather.

use crate::backend::{Backend, Ingest};
use crate::base::{Timings, TreeParams};
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::geom::morton::Quantizer;
use crate::input::Domain;

use super::{PointTypes, Tree};

/// Points in z-order (one column per dimension) and their input indices.
pub(crate) type ZOrdered<B, T, const D: usize> = ([<B as Backend>::Buf<T>; D], <B as Backend>::Buf<u32>);

/// Largest number of points (sources + queries) in one call on one rank.
pub(crate) const MAX_POINTS: usize = (u32::MAX - 1) as usize;

/// Points in z-order, with the tree over them.
pub(crate) struct Prepared<B: Backend, T: Real, const D: usize> {
    /// Sources in z-order, one array per dimension.
    pub src_pos: [B::Buf<T>; D],
    /// Input index of each z-ordered source.
    pub src_orig: B::Buf<u32>,
    /// Queries in z-order and their input indices; None in a self-query (the sources are
    /// the queries).
    pub qry: Option<ZOrdered<B, T, D>>,
    pub tree: Tree<B, T, D>,
}

impl<B: Backend, T: Real, const D: usize> Prepared<B, T, D> {
    /// The queries in z-order and their input indices.
    pub fn queries(&self) -> (&[B::Buf<T>; D], &B::Buf<u32>) {
        match &self.qry {
            Some((p, o)) => (p, o),
            None => (&self.src_pos, &self.src_orig),
        }
    }
    pub fn n_sources(&self) -> usize {
        B::len(&self.src_orig)
    }
    /// The count the kNN node test must find within a receiving node's radius for `k`
    /// neighbours per query. In a self-query every point is its own first neighbour
    /// (distance 0, first by the tie rule), so k = 1 needs nothing beyond it: 0, for which
    /// the test keeps only the sources whose boxes touch the node (r_A = 0).
    pub fn knn_node_k(&self, k: usize) -> usize {
        let kk = k.min(self.n_sources());
        if self.qry.is_none() && kk == 1 { 0 } else { kk }
    }
    /// Bytes held (positions, permutations, nodes).
    pub fn bytes(&self) -> usize {
        let pos = |p: &[B::Buf<T>; D]| p.iter().map(|v| B::bytes(v)).sum::<usize>();
        let q = self.qry.as_ref().map_or(0, |(p, o)| pos(p) + B::bytes(o));
        pos(&self.src_pos) + B::bytes(&self.src_orig) + q + self.tree.bytes()
    }
}

/// Validates, sorts and builds the tree over `sources` (and `queries`, jointly, when
/// given: one tree adapted to both distributions).
pub(crate) fn prepare<B, T, const D: usize, S, Q>(
    b: &B,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    params: &TreeParams,
    timings: &mut Timings,
) -> Result<Prepared<B, T, D>>
where
    T: Real,
    S: ?Sized,
    Q: ?Sized,
    B: Ingest<S, T, D> + Ingest<Q, T, D>,
{
    crate::input::validate::check_domain::<T, D>(domain)?;
    let (ns, nq) = (len_of(b, sources), queries.map_or(0, |q| len_of(b, q)));
    let n = ns + nq;
    if n > MAX_POINTS {
        return Err(Error::TooManyPoints { got: n, max: MAX_POINTS });
    }
    // In a periodic box the box sets the cells, not the points' bounds: the points are
    // checked and keyed in one pass.
    let periodic = matches!(domain, Domain::Periodic(_));
    let quant = if periodic {
        Quantizer::new(domain, &crate::input::Bounds::EMPTY)
    } else {
        let bounds = super::stage(b, timings, "validate", || -> Result<_> {
            let mut bd = b.scan(sources, "sources", domain)?;
            if let Some(q) = queries {
                bd = bd.merge(&b.scan(q, "queries", domain)?);
            }
            Ok(bd)
        })?;
        Quantizer::new(domain, &bounds)
    };
    let keys = super::stage(b, timings, "keys", || -> Result<_> {
        let mut keys = b.zeros(n)?;
        if periodic {
            b.scan_keys_into(sources, "sources", domain, &quant, &mut keys, 0)?;
            if let Some(q) = queries {
                b.scan_keys_into(q, "queries", domain, &quant, &mut keys, ns)?;
            }
        } else {
            b.keys_into(sources, &quant, &mut keys, 0)?;
            if let Some(q) = queries {
                b.keys_into(q, &quant, &mut keys, ns)?;
            }
        }
        Ok(keys)
    })?;
    finish(b, sources, queries, keys, params, timings)
}

/// `prepare` with the keys given (computed under any quantizer over the points: keys
/// only shape the tree, never a result). The points are taken as validated.
pub(crate) fn prepare_with_keys<B, T, const D: usize, S>(
    b: &B,
    sources: &S,
    keys: B::Buf<u64>,
    params: &TreeParams,
    timings: &mut Timings,
) -> Result<Prepared<B, T, D>>
where
    T: Real,
    S: ?Sized,
    B: Ingest<S, T, D>,
{
    if B::len(&keys) > MAX_POINTS {
        return Err(Error::TooManyPoints { got: B::len(&keys), max: MAX_POINTS });
    }
    finish(b, sources, None::<&S>, keys, params, timings)
}

fn len_of<B: Ingest<P, T, D>, P: ?Sized, T: Real, const D: usize>(b: &B, p: &P) -> usize {
    b.count(p)
}

/// Sort, levels, gather, refine, types, planes, tree.
fn finish<B, T, const D: usize, S, Q>(
    b: &B,
    sources: &S,
    queries: Option<&Q>,
    mut keys: B::Buf<u64>,
    params: &TreeParams,
    timings: &mut Timings,
) -> Result<Prepared<B, T, D>>
where
    T: Real,
    S: ?Sized,
    Q: ?Sized,
    B: Ingest<S, T, D> + Ingest<Q, T, D>,
{
    // The job resolved an automatic leaf size (TreeParams::with_auto_leaf) before this.
    debug_assert!(params.leaf_size > 0, "leaf size 0 reached the tree build");
    let n = B::len(&keys);
    let ns = b.count(sources);
    // Buffers the sort and the plane choice are done with: the gather may write the
    // positions into them (every one is written) rather than into fresh memory.
    let mut spent = Vec::new();
    let mut perm = super::stage(b, timings, "sort", || b.sort_keys(&mut keys, &mut spent))?;
    let (mut levels, long_runs) = super::stage(b, timings, "levels", || -> Result<_> {
        let levels = b.levels(&keys)?;
        let long = b.has_long_runs(&levels, params.leaf_size)?;
        Ok((levels, long))
    })?;
    // A self-query with no runs to refine chooses its planes before the gather: the
    // spent keys (their per-gap scratch) are then freed before the positions are made,
    // 8 bytes a point less at the call's peak, and as many fewer fresh pages in a first
    // call. (`planned`: the plan, or the keys to plan with after the gather.)
    let planned = if queries.is_none() && !long_runs {
        Ok(super::stage(b, timings, "planes", || b.plan_tree(&levels, n, PointTypes::Same, params, keys, &mut spent))?)
    } else {
        Err(keys)
    };
    let mut pos = super::stage(b, timings, "gather", || -> Result<[B::Buf<T>; D]> {
        let mut pos: [B::Buf<T>; D] = b.overwritten_array(n, &mut spent)?;
        b.gather_into(sources, &perm, 0, &mut pos)?;
        if let Some(q) = queries {
            b.gather_into(q, &perm, ns as u32, &mut pos)?;
        }
        Ok(pos)
    })?;
    drop(spent);
    let plan = match planned {
        Ok(plan) => plan,
        Err(keys) => {
            if long_runs {
                super::stage(b, timings, "refine", || b.refine_runs(&keys, &mut perm, &mut levels, &mut pos, params.leaf_size))?;
            }
            if queries.is_some() {
                // The keys go before the split copies the positions (the peak is there).
                drop(keys);
                let (spos, sorig, qpos, qorig, prefix) = super::stage(b, timings, "types", || b.split_types(pos, perm, ns))?;
                let types = PointTypes::Joint { src_prefix: &prefix };
                let plan =
                    super::stage(b, timings, "planes", || -> Result<_> { b.plan_tree(&levels, n, types, params, b.zeros(0)?, &mut Vec::new()) })?;
                let tree = super::stage(b, timings, "tree", || b.build_tree(plan, &levels, types, &spos, Some(&qpos), params))?;
                return Ok(Prepared { src_pos: spos, src_orig: sorig, qry: Some((qpos, qorig)), tree });
            }
            super::stage(b, timings, "planes", || b.plan_tree(&levels, n, PointTypes::Same, params, keys, &mut Vec::new()))?
        }
    };
    let tree = super::stage(b, timings, "tree", || b.build_tree(plan, &levels, PointTypes::Same, &pos, None, params))?;
    Ok(Prepared { src_pos: pos, src_orig: perm, qry: None, tree })
}
