//! The kNN output rows: prefetching a query's rows ahead of its scan and writing its
//! results (indices, distances, k-th distance, reductions) into them. Kept apart from
//! the leaf scan: this is the caller-facing layout, not the search.

use super::Cpu;
use super::knn::KnnJob;
use crate::geom::Real;
use crate::knn::reduce;
use crate::pipeline::KnnSinks;

impl<T: Real, const D: usize> KnnJob<'_, T, D> {
    /// Fetches the output rows of row `row` into the cache ahead of `emit`.
    #[inline(always)]
    pub(super) fn prefetch_rows(&self, row: usize, sinks: &KnnSinks<'_, Cpu, T>) {
        let k = self.k;
        if let Some(p) = &sinks.indices {
            p.prefetch(row * k, k);
        }
        if let Some(p) = &sinks.distances {
            p.prefetch(row * k, k);
        }
        if let Some(p) = &sinks.d2 {
            p.prefetch(row * k, k);
        }
        for p in [&sinks.kth, &sinks.kth_d2].into_iter().flatten() {
            p.prefetch(row, 1);
        }
        for p in [&sinks.density, &sinks.scalar_mean].into_iter().flatten() {
            p.prefetch(row, 1);
        }
    }

    /// Fetches the first line of the index and distance rows of row `row`.
    #[inline(always)]
    pub(super) fn prefetch_first(&self, row: usize, sinks: &KnnSinks<'_, Cpu, T>) {
        let k = self.k;
        if let Some(p) = &sinks.indices {
            p.prefetch(row * k, 1);
        }
        if let Some(p) = &sinks.distances {
            p.prefetch(row * k, 1);
        }
    }

    /// Writes the results of one query into row `row`.
    #[inline(always)]
    pub(super) fn emit(&self, row: usize, ed: &[T], ez: &[u32], sinks: &KnnSinks<'_, Cpu, T>) {
        let k = self.k;
        let sorig = &self.zs.src_orig;
        let m = ed.len();
        let kth2 = if m == k { ed[k - 1] } else { T::INFINITY };
        // SAFETY (all writes): row `row` belongs to this query alone; lengths were checked.
        unsafe {
            // Held entries, then the pads (straight loops: the square roots vectorise).
            if let Some(p) = &sinks.indices {
                let (held, pad) = p.slice_mut(row * k, k).split_at_mut(m);
                // (A raw pointer: the row's stores could alias the Vec's fields for all the
                // compiler knows, and it reloaded the pointer for every entry.)
                let so = sorig.as_ptr();
                for (o, &z) in held.iter_mut().zip(ez) {
                    // (Held z-indices are sources: inside `sorig`; the unsafe block's promise.)
                    debug_assert!((z as usize) < sorig.len());
                    *o = *so.add(z as usize) as i64;
                }
                pad.fill(-1);
            }
            if let Some(p) = &sinks.distances {
                let (held, pad) = p.slice_mut(row * k, k).split_at_mut(m);
                for (o, &d2) in held.iter_mut().zip(ed) {
                    *o = d2.sqrt();
                }
                pad.fill(T::INFINITY);
            }
            if let Some(p) = &sinks.d2 {
                let (held, pad) = p.slice_mut(row * k, k).split_at_mut(m);
                held.copy_from_slice(ed);
                pad.fill(T::INFINITY);
            }
            if let Some(p) = &sinks.kth_d2 {
                p.write(row, kth2);
            }
            let kth = kth2.sqrt();
            if let Some(p) = &sinks.kth {
                p.write(row, kth);
            }
            if let Some(p) = &sinks.density {
                let mass = self.masses.map(|ms| ez.iter().map(|&z| ms[z as usize]).sum::<f64>());
                p.write(row, reduce::density::<D>(mass, m, k, kth.to_f64()));
            }
            if let (Some(p), Some(sc)) = (&sinks.scalar_mean, self.scalar) {
                p.write(row, reduce::mean(ez.iter().map(|&z| sc[z as usize])));
            }
        }
    }
}
