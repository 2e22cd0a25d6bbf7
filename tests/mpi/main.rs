//! Distributed kNN and FoF against single-rank results, in one binary (one build of the
//! library's generic code both call). Run under `mpirun -np 1..4` (`make test-mpi`); also
//! runs as a one-rank singleton under `cargo test`. MPI initialises once per process.

#[path = "../common/mod.rs"]
mod common;
#[path = "mpi_fof.rs"]
mod mpi_fof;
#[path = "mpi_knn.rs"]
mod mpi_knn;

use mpi::traits::*;

fn main() {
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    let failures = mpi_knn::run(&world) + mpi_fof::run(&world);
    if failures > 0 {
        world.abort(1);
    }
}
