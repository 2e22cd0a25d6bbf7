//! The host-side driver: orders the stages of a call (validate, keys, sort, gather,
//! planes) on a back end. kNN and FoF both start here.

use rayon::prelude::*;

use crate::backend::Backend;
use crate::context::Timings;
use crate::error::{Error, Result};
use crate::par::SharedMut;
use crate::points::{Domain, PointSource};
use crate::real::Real;
use crate::tree::{PointTypes, Tree, TreeParams};
use crate::zorder::{Quantizer, primary_levels, refine_runs};

/// Largest number of points (sources + queries) in one call on one rank.
pub const MAX_POINTS: usize = (u32::MAX - 1) as usize;

/// Points in z-order, with the tree over them.
pub struct ZSet<T: Real, const D: usize> {
    /// Sources in z-order, one array per dimension.
    pub src_pos: [Vec<T>; D],
    /// Input index of each z-ordered source.
    pub src_orig: Vec<u32>,
    /// Queries in z-order; empty in a self-query (use the sources).
    pub qry_pos: [Vec<T>; D],
    pub qry_orig: Vec<u32>,
    pub self_query: bool,
    pub tree: Tree<T, D>,
}

impl<T: Real, const D: usize> ZSet<T, D> {
    pub fn queries(&self) -> (&[Vec<T>; D], &[u32]) {
        if self.self_query { (&self.src_pos, &self.src_orig) } else { (&self.qry_pos, &self.qry_orig) }
    }
    /// Bytes held (positions, permutations, nodes).
    pub fn bytes(&self) -> usize {
        let pos = |p: &[Vec<T>; D]| p.iter().map(|v| v.capacity() * std::mem::size_of::<T>()).sum::<usize>();
        pos(&self.src_pos) + pos(&self.qry_pos) + 4 * (self.src_orig.capacity() + self.qry_orig.capacity()) + self.tree.bytes()
    }
}

/// Validates, sorts and builds the tree over `sources` (and `queries`, jointly, when given).
pub fn prepare<B: Backend, T: Real, const D: usize, S, Q>(
    backend: &B,
    domain: &Domain<D>,
    sources: &S,
    queries: Option<&Q>,
    params: &TreeParams,
    timings: &mut Timings,
) -> Result<ZSet<T, D>>
where
    S: PointSource<T, D> + ?Sized,
    Q: PointSource<T, D> + ?Sized,
{
    domain.validate()?;
    let ns = sources.len();
    let nq = queries.map_or(0, |q| q.len());
    let n = ns + nq;
    if n > MAX_POINTS {
        return Err(Error::TooManyPoints { got: n, max: MAX_POINTS });
    }
    let bounds = timings.time("validate", || -> Result<_> {
        let mut b = backend.scan(sources, "sources", domain)?;
        if let Some(q) = queries {
            b = b.merge(&backend.scan(q, "queries", domain)?);
        }
        Ok(b)
    })?;
    let quant = Quantizer::new(domain, &bounds);
    let coord = |v: u32| merged_point(sources, queries, v);
    let keys = timings.time("keys", || (0..n as u32).into_par_iter().map(|v| quant.key(&coord(v))).collect::<Vec<u64>>());
    finish(backend, sources, queries, keys, params, timings)
}

/// Point `v` of the merged index (sources `0..ns`, then queries), in f64.
#[inline(always)]
fn merged_point<T: Real, const D: usize, S, Q>(sources: &S, queries: Option<&Q>, v: u32) -> [f64; D]
where
    S: PointSource<T, D> + ?Sized,
    Q: PointSource<T, D> + ?Sized,
{
    let (v, ns) = (v as usize, sources.len());
    let p = if v < ns { sources.point(v) } else { queries.unwrap().point(v - ns) };
    std::array::from_fn(|d| p[d].to_f64())
}

/// `prepare` after the keys: sort, levels, gather, tree. `keys` may come from any
/// quantizer over the points (a distributed call passes the global one's): keys only
/// shape the tree, never a result.
pub(crate) fn finish<B: Backend, T: Real, const D: usize, S, Q>(
    backend: &B,
    sources: &S,
    queries: Option<&Q>,
    mut keys: Vec<u64>,
    params: &TreeParams,
    timings: &mut Timings,
) -> Result<ZSet<T, D>>
where
    S: PointSource<T, D> + ?Sized,
    Q: PointSource<T, D> + ?Sized,
{
    let ns = sources.len();
    let n = keys.len();
    let coord = |v: u32| merged_point(sources, queries, v);
    let mut idx: Vec<u32> = (0..n as u32).collect();
    timings.time("sort", || backend.sort_keys(&mut keys, &mut idx));
    let levels = timings.time("levels", || {
        let mut levels = primary_levels(&keys);
        refine_runs::<D>(&keys, &mut idx, &mut levels, params.leaf_size, coord);
        levels
    });
    drop(keys);
    let (src_pos, src_orig, qry_pos, qry_orig, src_prefix) = timings.time("gather", || gather(&idx, ns, sources, queries));
    drop(idx);
    let types = match &src_prefix {
        None => PointTypes::Same,
        Some(p) => PointTypes::Joint { src_prefix: p },
    };
    let tree = timings.time("tree", || {
        let qp = if queries.is_some() { &qry_pos } else { &src_pos };
        backend.build_tree(&levels, types, &src_pos, qp, params)
    });
    Ok(ZSet { src_pos, src_orig, qry_pos, qry_orig, self_query: queries.is_none(), tree })
}

type Gathered<T, const D: usize> = ([Vec<T>; D], Vec<u32>, [Vec<T>; D], Vec<u32>, Option<Vec<u32>>);

/// Copies points into z-order (struct of arrays) and splits sources from queries.
fn gather<T: Real, const D: usize, S, Q>(idx: &[u32], ns: usize, sources: &S, queries: Option<&Q>) -> Gathered<T, D>
where
    S: PointSource<T, D> + ?Sized,
    Q: PointSource<T, D> + ?Sized,
{
    let n = idx.len();
    let Some(queries) = queries else {
        let mut pos: [Vec<T>; D] = std::array::from_fn(|_| vec![T::ZERO; n]);
        let ptrs: [SharedMut<T>; D] = std::array::from_fn(|d| SharedMut::new(&mut pos[d]));
        idx.par_iter().enumerate().for_each(|(z, &v)| {
            let p = sources.point(v as usize);
            for d in 0..D {
                // SAFETY: each z is written by one task only.
                unsafe { ptrs[d].write(z, p[d]) }
            }
        });
        return (pos, idx.to_vec(), std::array::from_fn(|_| Vec::new()), Vec::new(), None);
    };
    let nq = n - ns;
    let mut prefix = Vec::with_capacity(n + 1);
    let mut s = 0u32;
    prefix.push(0);
    for &v in idx {
        s += u32::from((v as usize) < ns);
        prefix.push(s);
    }
    let mut spos: [Vec<T>; D] = std::array::from_fn(|_| vec![T::ZERO; ns]);
    let mut qpos: [Vec<T>; D] = std::array::from_fn(|_| vec![T::ZERO; nq]);
    let mut sorig = vec![0u32; ns];
    let mut qorig = vec![0u32; nq];
    let sp: [SharedMut<T>; D] = std::array::from_fn(|d| SharedMut::new(&mut spos[d]));
    let qp: [SharedMut<T>; D] = std::array::from_fn(|d| SharedMut::new(&mut qpos[d]));
    let so = SharedMut::new(&mut sorig);
    let qo = SharedMut::new(&mut qorig);
    idx.par_iter().enumerate().for_each(|(z, &v)| {
        let v = v as usize;
        // SAFETY: the prefix count gives every source (query) its own slot.
        unsafe {
            if v < ns {
                let j = prefix[z] as usize;
                let p = sources.point(v);
                for d in 0..D {
                    sp[d].write(j, p[d]);
                }
                so.write(j, v as u32);
            } else {
                let j = z - prefix[z] as usize;
                let p = queries.point(v - ns);
                for d in 0..D {
                    qp[d].write(j, p[d]);
                }
                qo.write(j, (v - ns) as u32);
            }
        }
    });
    (spos, sorig, qpos, qorig, Some(prefix))
}
