//! Distributed kNN, FoF, radius queries and DBSCAN against single-rank results, in one binary (one build of the
//! library's generic code both call). Run under `mpirun -np 1..4` (`make test-mpi`); also
//! runs as a one-rank singleton under `cargo test`. MPI initialises once per process.

#[path = "../common/mod.rs"]
mod common;
mod mpi_dbscan;
mod mpi_fof;
mod mpi_knn;
mod mpi_radius;

use mpi::traits::*;

fn main() {
    // A panic on one rank aborts the process, so mpirun ends the others rather than
    // leaving them waiting in the next collective.
    let report = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        report(info);
        std::process::abort();
    }));
    let universe = mpi::initialize().expect("MPI initialises once");
    let world = universe.world();
    // `ZTREE_MPI_ONLY=radius` (say) runs one suite while working on it.
    let only = std::env::var("ZTREE_MPI_ONLY").ok();
    let on = |name: &str| only.as_deref().is_none_or(|o| o == name);
    type Suite = fn(&mpi::topology::SimpleCommunicator) -> usize;
    let suites: [(&str, Suite); 4] = [("knn", mpi_knn::run), ("fof", mpi_fof::run), ("radius", mpi_radius::run), ("dbscan", mpi_dbscan::run)];
    let failures: usize = suites.iter().filter(|(name, _)| on(name)).map(|(_, run)| run(&world)).sum();
    if failures > 0 {
        world.abort(1);
    }
}

/// The sum of `v` over every rank (a collective: every rank calls it).
pub fn sum_all(v: usize) -> usize {
    let world = mpi::topology::SimpleCommunicator::world();
    let mut out = 0u64;
    world.all_reduce_into(&(v as u64), &mut out, mpi::collective::SystemOperation::sum());
    out as usize
}

/// Every rank's `v`, concatenated in rank order (a collective: every rank calls it).
pub fn gather_all(v: &[i64]) -> Vec<i64> {
    let world = mpi::topology::SimpleCommunicator::world();
    let mut counts = vec![0i32; world.size() as usize];
    world.all_gather_into(&(v.len() as i32), &mut counts[..]);
    let displs: Vec<i32> = counts
        .iter()
        .scan(0, |acc, &c| {
            let d = *acc;
            *acc += c;
            Some(d)
        })
        .collect();
    let mut out = vec![0i64; counts.iter().sum::<i32>() as usize];
    let mut part = mpi::datatype::PartitionMut::new(&mut out[..], counts, displs);
    world.all_gather_varcount_into(v, &mut part);
    out
}
