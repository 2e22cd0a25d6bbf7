//! Errors returned by every fallible ztree call.

use thiserror::Error;

/// Everything that can go wrong in a ztree call. Bad input is always reported with
/// enough context (which array, which point) to find the culprit; nothing panics.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Error {
    #[error("{what}: coordinate {dim} of point {index} is not finite ({value})")]
    NonFinite { what: &'static str, index: usize, dim: usize, value: f64 },
    #[error("{what}: point {index} lies outside the periodic box: coordinate {dim} = {value}, box length {length} (coordinates must be in [0, L))")]
    OutsideBox { what: &'static str, index: usize, dim: usize, value: f64, length: f64 },
    #[error(
        "{what}: coordinate {dim} of point {index} is {value:e}, beyond the {limit:e} ztree accepts for {elem} positions (squared distances would overflow); rescale the coordinates"
    )]
    TooLarge { what: &'static str, index: usize, dim: usize, value: f64, limit: f64, elem: &'static str },
    #[error(
        "invalid box: length {length:e} in dimension {dim} is beyond the {limit:e} ztree accepts for {elem} positions (squared distances would overflow); rescale the coordinates"
    )]
    BoxTooLarge { dim: usize, length: f64, limit: f64, elem: &'static str },
    #[error(
        "periodic box aspect ratio {ratio:.3e} exceeds {max}: ztree's cells follow the box's shape and would be needles; use an open domain (cells are cubes there, any point set is fine) or a less elongated box"
    )]
    BoxAspect { ratio: f64, max: f64 },
    #[error("out of memory: {what} needs {bytes} bytes")]
    OutOfMemory { what: &'static str, bytes: u64 },
    #[error("invalid box: length {length} in dimension {dim} (box lengths must be finite and > 0)")]
    InvalidBox { dim: usize, length: f64 },
    #[error("k must be at least 1 (got {0})")]
    InvalidK(usize),
    #[error("no source points: kNN needs at least one source")]
    NoSources,
    #[error("length mismatch: {what} has {got} entries, expected {expected}")]
    LengthMismatch { what: &'static str, got: usize, expected: usize },
    #[error("too many points: {got} (at most {max} per call and rank)")]
    TooManyPoints { got: usize, max: usize },
    #[error("invalid parameter {name}: {why}")]
    InvalidParameter { name: &'static str, why: String },
    #[error("{what}: value {index} is not finite ({value})")]
    NonFiniteValue { what: &'static str, index: usize, value: f64 },
    #[error("could not create a thread pool: {0}")]
    ThreadPool(String),
    #[error("MPI: {0}")]
    Mpi(String),
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    #[error("CUDA: {0}")]
    Device(String),
    #[error("rank {rank} reported an error in this collective call (see the message on that rank); nothing was computed")]
    RemoteRank { rank: usize },
}

pub type Result<T> = std::result::Result<T, Error>;

/// `Err(LengthMismatch)` unless `got == expected`.
pub(crate) fn check_len(what: &'static str, got: usize, expected: usize) -> Result<()> {
    if got != expected { Err(Error::LengthMismatch { what, got, expected }) } else { Ok(()) }
}
