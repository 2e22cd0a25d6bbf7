//! The shape of the plane hierarchy, and what a tree is built for.

use crate::error::{Error, Result};

/// Shape parameters of the plane hierarchy (jz-tree's defaults, but for the leaf size).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct TreeParams {
    /// Most points of one type in a leaf (except chunks of identical points, which are
    /// also cut at this size). 0 (the default): chosen per job — 96 for kNN with k >= 2,
    /// 48 for k = 1, 64 for FoF, on the CPU and the GPU. Results never depend on it.
    pub leaf_size: usize,
    /// Capacity ratio between consecutive planes.
    pub coarsening: usize,
    /// Stop coarsening once a plane has at most this many nodes.
    pub top_target: usize,
    /// Top nodes per super node.
    pub super_group: usize,
    /// Split nodes far larger in volume than typical dense nodes (paper II-D); 0 turns
    /// regularisation off. jz-tree uses 20.
    pub max_volume_factor: f64,
}

impl Default for TreeParams {
    fn default() -> Self {
        Self { leaf_size: 0, coarsening: 8, top_target: 2048, super_group: 32, max_volume_factor: 20.0 }
    }
}

/// What a tree is built for, when the leaf size is chosen automatically.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) enum LeafJob {
    Knn { k: usize },
    Fof,
}

impl TreeParams {
    /// These parameters with the leaf size resolved: `leaf_size`, or `auto` when it is 0.
    pub(crate) fn with_auto_leaf(&self, auto: usize) -> TreeParams {
        if self.leaf_size == 0 { TreeParams { leaf_size: auto, ..*self } } else { *self }
    }

    /// Checks every parameter (what `Context::new` checks): an error names the first bad one.
    pub fn validate(&self) -> Result<()> {
        let bad = |name, why: &str| Err(Error::InvalidParameter { name, why: why.to_string() });
        if self.leaf_size > 1 << 20 {
            return bad("leaf_size", "must be in 0..=2^20 (0: automatic)");
        }
        if self.coarsening < 2 {
            return bad("coarsening", "must be at least 2");
        }
        if self.top_target < 1 {
            return bad("top_target", "must be at least 1");
        }
        if self.super_group < 1 {
            return bad("super_group", "must be at least 1");
        }
        if !(self.max_volume_factor == 0.0 || (self.max_volume_factor.is_finite() && self.max_volume_factor >= 1.0)) {
            return bad("max_volume_factor", "must be 0 (off) or a finite number >= 1");
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::Backend;
    use crate::backend::cpu::Cpu;

    #[test]
    fn an_automatic_leaf_size_is_chosen_per_job_and_an_explicit_one_kept() {
        assert_eq!(TreeParams::default().leaf_size, 0);
        assert!(TreeParams::default().validate().is_ok());
        assert_eq!(Cpu.auto_leaf_size(LeafJob::Knn { k: 16 }), 96);
        assert_eq!(Cpu.auto_leaf_size(LeafJob::Knn { k: 8 }), 96);
        assert_eq!(Cpu.auto_leaf_size(LeafJob::Knn { k: 2 }), 96);
        assert_eq!(Cpu.auto_leaf_size(LeafJob::Knn { k: 1 }), 48);
        assert_eq!(Cpu.auto_leaf_size(LeafJob::Fof), 64);
        let auto = TreeParams::default().with_auto_leaf(64);
        assert_eq!(auto, TreeParams { leaf_size: 64, ..TreeParams::default() });
        let mine = TreeParams { leaf_size: 8, ..TreeParams::default() };
        assert_eq!(mine.with_auto_leaf(64), mine);
    }
}
