//! The CPU back end: every stage data-parallel with rayon on the calling context's thread
//! pool (the caller runs the pipeline inside `pool.install`). Buffers are host vectors.

mod bitonic;
mod cand;
pub(crate) mod catalogue;
#[cfg_attr(not(feature = "mpi"), allow(dead_code))]
mod dist;
mod fof;
mod fof_leaf;
#[cfg(test)]
mod fof_tests;
mod ingest;
mod knn;
mod knn_leaf;
mod knn_rows;
#[cfg(test)]
mod knn_tests;
pub(crate) mod par;
pub(crate) mod permute;
pub(crate) mod planes;
mod radius;
mod simd;
mod sort;
mod topk;
mod topk16;
pub(crate) mod tree;
mod walk;

use crate::backend::{Backend, Elem, LeafJob};
use crate::base::TreeParams;
use crate::error::Result;
use crate::geom::Real;
use crate::geom::metric::Metric;
use crate::input::{ParticleIds, ScalarField, VectorField};
use crate::pipeline::catalogue::{CatalogueRequest, Counted, GroupRows, Grouped, MemberLists};
use crate::pipeline::knn::LeafFields;
use crate::pipeline::{KnnSinks, Lists, PointTypes, Prepared, Tree};
use rayon::prelude::*;

pub(crate) use par::DisjointSlice;
#[cfg(all(test, any(feature = "cuda", feature = "cuda-emu")))]
pub(crate) use sort::radix_sort;

/// Tests: every process-wide knob of the CPU back end at its default (`crate::test_knobs`).
#[cfg(test)]
pub(crate) fn reset_test_knobs() {
    simd::force(None);
    knn_leaf::reset_test_knobs();
}

/// The CPU back end.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct Cpu;

impl Backend for Cpu {
    type Buf<T: Elem> = Vec<T>;
    type Out<'a, T: Elem> = DisjointSlice<'a, T>;
    type Scalar<'a> = &'a dyn ScalarField;
    type Vectors<'a, const D: usize> = &'a dyn VectorField<D>;
    type Ids<'a> = &'a dyn ParticleIds;
    type Links = fof::Links;
    type TreePlan = planes::TreePlan;

    fn name(&self) -> &'static str {
        "cpu"
    }

    /// kNN on 96-point leaves (48 for k = 1), FoF on 64: the fastest sizes measured on
    /// clustered, uniform and cosmological points (docs/DESIGN.md §2 gives the figures).
    fn auto_leaf_size(&self, job: LeafJob) -> usize {
        match job {
            LeafJob::Knn { k } if k < 2 => 48,
            LeafJob::Knn { .. } => 96,
            LeafJob::Fof => 64,
        }
    }

    fn len<T: Elem>(b: &Vec<T>) -> usize {
        b.len()
    }

    fn bytes<T: Elem>(b: &Vec<T>) -> usize {
        b.capacity() * std::mem::size_of::<T>()
    }

    fn download<T: Elem>(&self, b: &Vec<T>) -> Result<Vec<T>> {
        Ok(b.clone())
    }

    fn zeros<T: Elem>(&self, n: usize) -> Result<Vec<T>> {
        Ok(par::filled(n, T::FILL))
    }

    fn overwritten<T: Elem>(&self, n: usize, spent: &mut Vec<Vec<u64>>) -> Result<Vec<T>> {
        if size_of::<T>() == size_of::<u64>()
            && align_of::<T>() == align_of::<u64>()
            && let Some(i) = spent.iter().position(|b| b.len() == n)
        {
            let mut b = std::mem::ManuallyDrop::new(spent.swap_remove(i));
            // SAFETY: T has u64's size and alignment, so the allocation's layout is the
            // one it was made with; `Elem` is plain data, so every element is a value.
            return Ok(unsafe { Vec::from_raw_parts(b.as_mut_ptr().cast::<T>(), b.len(), b.capacity()) });
        }
        // None fits (f32 columns): freed first, the allocator may then hand them on.
        spent.clear();
        self.zeros(n)
    }

    fn sort_keys(&self, keys: &mut Vec<u64>, spent: &mut Vec<Vec<u64>>) -> Result<Vec<u32>> {
        // Coarser keys: cells finer than the tree can use cost sort passes only.
        let (perm, input) = sort::radix_sort_indices(keys, crate::geom::morton::bits_kept(keys.len()));
        spent.extend(input);
        Ok(perm)
    }

    fn levels(&self, keys: &Vec<u64>) -> Result<Vec<u8>> {
        Ok(ingest::levels(keys))
    }

    fn refine_runs<T: Real, const D: usize>(
        &self,
        keys: &Vec<u64>,
        perm: &mut Vec<u32>,
        levels: &mut Vec<u8>,
        pos: &mut [Vec<T>; D],
        max_run: usize,
    ) -> Result<()> {
        ingest::refine_runs(keys, perm, levels, pos, max_run);
        Ok(())
    }

    fn split_types<T: Real, const D: usize>(
        &self,
        pos: [Vec<T>; D],
        perm: Vec<u32>,
        ns: usize,
    ) -> Result<([Vec<T>; D], Vec<u32>, [Vec<T>; D], Vec<u32>, Vec<u32>)> {
        Ok(ingest::split_types(pos, perm, ns))
    }

    fn has_long_runs(&self, levels: &Vec<u8>, max_run: usize) -> Result<bool> {
        Ok(ingest::has_long_runs(levels, max_run))
    }

    fn plan_tree(
        &self,
        levels: &Vec<u8>,
        n: usize,
        types: PointTypes<'_, Self>,
        params: &TreeParams,
        spent_keys: Vec<u64>,
        spent: &mut Vec<Vec<u64>>,
    ) -> Result<planes::TreePlan> {
        let (plan, scratch) = planes::plan(levels, n, types, params, spent_keys);
        spent.push(scratch);
        Ok(plan)
    }

    fn build_tree<T: Real, const D: usize>(
        &self,
        plan: planes::TreePlan,
        _levels: &Vec<u8>,
        types: PointTypes<'_, Self>,
        src_pos: &[Vec<T>; D],
        qry_pos: Option<&[Vec<T>; D]>,
        params: &TreeParams,
    ) -> Result<Tree<Self, T, D>> {
        Ok(tree::build(plan, types, src_pos, qry_pos.unwrap_or(src_pos), params))
    }

    fn gather_scalar(&self, f: &dyn ScalarField, orig: &Vec<u32>) -> Result<Vec<f64>> {
        Ok(ingest::gather_scalar(f, orig))
    }

    fn walk_start<T: Real, const D: usize>(&self, tree: &Tree<Self, T, D>) -> Result<Lists<Self>> {
        Ok(walk::walk_start(tree))
    }

    fn knn_node_pass<T: Real, const D: usize, M: Metric<T, D>>(
        &self,
        metric: &M,
        tree: &Tree<Self, T, D>,
        k: usize,
        parent: usize,
        lists: &Lists<Self>,
    ) -> Result<Lists<Self>> {
        Ok(knn::node_pass(metric, tree, k, parent, lists))
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
        let job = knn::KnnJob {
            zs,
            k,
            kk: k.min(zs.n_sources()),
            masses: fields.masses.map(|m| &m[..]),
            scalar: fields.scalar.map(|s| &s[..]),
            kth_hint: fields.kth_hint.map(|h| &h[..]),
        };
        Ok(knn::leaf_pass(metric, &job, lists, sinks))
    }

    fn fof_begin<T: Real, const D: usize>(&self, zs: &Prepared<Self, T, D>) -> Result<fof::Links> {
        Ok(fof::Links::new(zs.n_sources(), zs.tree.num_nodes()))
    }

    fn fof_leaf_self<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        l: f64,
        links: &fof::Links,
    ) -> Result<()> {
        fof::Job::new(zs, l, metric.box_len(), links).leaf_self_pass(metric);
        Ok(())
    }

    fn fof_node_pass<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        l: f64,
        links: &fof::Links,
        parent: usize,
        lists: &Lists<Self>,
    ) -> Result<Lists<Self>> {
        Ok(fof::Job::new(zs, l, metric.box_len(), links).node_pass(metric, parent, lists))
    }

    fn fof_leaf_pass<T: Real, const D: usize, M: Metric<f64, D>>(
        &self,
        metric: &M,
        zs: &Prepared<Self, T, D>,
        l: f64,
        links: &fof::Links,
        lists: &Lists<Self>,
    ) -> Result<u64> {
        Ok(fof::Job::new(zs, l, metric.box_len(), links).leaf_pass(metric, lists))
    }

    fn fof_contract(&self, links: fof::Links) -> Result<Vec<u32>> {
        Ok(links.uf.contract())
    }

    fn row_queries(&self, orig: Option<&Vec<u32>>, n: usize, out: &DisjointSlice<'_, i64>) -> Result<()> {
        // SAFETY: each row written once.
        match orig {
            Some(o) => o.par_iter().enumerate().for_each(|(r, &q)| unsafe { out.write(r, q as i64) }),
            None => (0..n).into_par_iter().for_each(|r| unsafe { out.write(r, r as i64) }),
        }
        Ok(())
    }
    type GroupSlots = catalogue::Slots;
    type GroupMembers = catalogue::Members;
    fn catalogue_count(&self, roots: &Vec<u32>, min_members: usize) -> Result<Counted<catalogue::Slots>> {
        Ok(catalogue::count(roots, min_members))
    }
    fn catalogue_order<T: Real, const D: usize>(
        &self,
        _zs: &Prepared<Self, T, D>,
        roots: &Vec<u32>,
        counted: &mut Counted<catalogue::Slots>,
    ) -> Result<Grouped<catalogue::Members>> {
        Ok(catalogue::order(roots, &counted.slots))
    }
    fn catalogue_rows<T: Real, const D: usize>(
        &self,
        zs: &Prepared<Self, T, D>,
        members: &catalogue::Members,
        _kept: usize,
        req: &CatalogueRequest<'_, Self, D>,
    ) -> Result<GroupRows<Self, D>> {
        let r = catalogue::RowInputs {
            pos: &zs.src_pos,
            orig: &zs.src_orig,
            box_len: req.box_len,
            velocities: req.velocities,
            masses: req.masses,
            particle_mass: req.particle_mass,
            ids: req.ids,
        };
        Ok(catalogue::rows(&r, members))
    }
    fn catalogue_labels<T: Real, const D: usize>(
        &self,
        zs: &Prepared<Self, T, D>,
        roots: &Vec<u32>,
        slots: &catalogue::Slots,
        tags: &Vec<i64>,
        labels: &DisjointSlice<'_, i64>,
    ) -> Result<()> {
        catalogue::labels(&zs.src_orig, roots, slots, tags, labels);
        Ok(())
    }
    fn catalogue_members<'a, T: Real, const D: usize>(
        &'a self,
        zs: &'a Prepared<Self, T, D>,
        members: &'a catalogue::Members,
    ) -> Result<MemberLists<'a>> {
        Ok(catalogue::member_lists(&zs.src_orig, members))
    }
}
