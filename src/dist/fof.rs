//! Distributed FoF (placeholder while the kNN half is tested).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CatalogueScope {
    #[default]
    Distributed,
    Root,
}
#[derive(Clone, Debug, Default, PartialEq)]
pub struct DistFofStats;
