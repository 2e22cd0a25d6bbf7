//! The single-process integration tests, one crate (each crate builds its own copy of the
//! library's generic code it calls: one crate instead of five saves minutes of every
//! `make test`). By need: `cpu` (nothing but the crate), `data` (../shared/data),
//! `tools` (the Python venv: scipy). Run one group with e.g. `cargo test --test host knn_oracle`.

mod common;

#[path = "cpu/dbscan_oracle.rs"]
mod dbscan_oracle;
#[path = "data/fof_gadget.rs"]
mod fof_gadget;
#[path = "cpu/fof_oracle.rs"]
mod fof_oracle;
#[path = "data/halo_gadget.rs"]
mod halo_gadget;
#[path = "cpu/halo_oracle.rs"]
mod halo_oracle;
#[path = "cpu/knn_api.rs"]
mod knn_api;
#[path = "cpu/knn_oracle.rs"]
mod knn_oracle;
#[path = "tools/knn_scipy.rs"]
mod knn_scipy;
#[path = "cpu/radius_oracle.rs"]
mod radius_oracle;
#[path = "cpu/subset.rs"]
mod subset;
