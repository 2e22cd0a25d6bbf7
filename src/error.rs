//! Errors returned by every fallible ztree call.

use thiserror::Error;

/// Everything that can go wrong in a ztree call. Bad input is always reported with
/// enough context (which array, which point) to find the culprit; nothing panics.
#[derive(Debug, Clone, PartialEq, Error)]
pub enum Error {
    /// A coordinate is NaN or infinite.
    #[error("{what}: coordinate {dim} of point {index} is not finite ({value})")]
    NonFinite {
        /// Which point set ("sources", "queries", "points").
        what: &'static str,
        /// The point's index in the caller's input order.
        index: usize,
        /// The coordinate's dimension.
        dim: usize,
        /// The value found.
        value: f64,
    },
    /// A point of a periodic domain lies outside `[0, L)`.
    #[error("{what}: point {index} lies outside the periodic box: coordinate {dim} = {value}, box length {length} (coordinates must be in [0, L))")]
    OutsideBox {
        /// Which point set.
        what: &'static str,
        /// The point's index in the caller's input order.
        index: usize,
        /// The coordinate's dimension.
        dim: usize,
        /// The value found.
        value: f64,
        /// The box length in that dimension.
        length: f64,
    },
    /// A coordinate is so large that squared distances would overflow.
    #[error(
        "{what}: coordinate {dim} of point {index} is {value:e}, beyond the {limit:e} ztree accepts for {elem} positions (squared distances would overflow); rescale the coordinates"
    )]
    TooLarge {
        /// Which point set.
        what: &'static str,
        /// The point's index in the caller's input order.
        index: usize,
        /// The coordinate's dimension.
        dim: usize,
        /// The value found.
        value: f64,
        /// The largest magnitude accepted (`Real::MAX_COORD`).
        limit: f64,
        /// The element type ("f32" or "f64").
        elem: &'static str,
    },
    /// A periodic box length is so large that squared distances would overflow.
    #[error(
        "invalid box: length {length:e} in dimension {dim} is beyond the {limit:e} ztree accepts for {elem} positions (squared distances would overflow); rescale the coordinates"
    )]
    BoxTooLarge {
        /// The dimension.
        dim: usize,
        /// The box length given.
        length: f64,
        /// The largest length accepted.
        limit: f64,
        /// The element type.
        elem: &'static str,
    },
    /// A periodic box is too elongated for its cells.
    #[error(
        "periodic box aspect ratio {ratio:.3e} exceeds {max}: ztree's cells follow the box's shape and would be needles; use an open domain (cells are cubes there, any point set is fine) or a less elongated box"
    )]
    BoxAspect {
        /// Longest over shortest box length.
        ratio: f64,
        /// The largest ratio accepted.
        max: f64,
    },
    /// An allocation failed, or the call's estimate exceeds the memory ceiling.
    #[error("out of memory: {what} needs {bytes} bytes")]
    OutOfMemory {
        /// What needed the memory.
        what: &'static str,
        /// How many bytes.
        bytes: u64,
    },
    /// A periodic box length is not finite and positive.
    #[error("invalid box: length {length} in dimension {dim} (box lengths must be finite and > 0)")]
    InvalidBox {
        /// The dimension.
        dim: usize,
        /// The length given.
        length: f64,
    },
    /// `k` is 0.
    #[error("k must be at least 1 (got {0})")]
    InvalidK(usize),
    /// A kNN call without any source point (over all ranks).
    #[error("no source points: kNN needs at least one source")]
    NoSources,
    /// An array's length does not match the point count (or `count × k`).
    #[error("length mismatch: {what} has {got} entries, expected {expected}")]
    LengthMismatch {
        /// Which array.
        what: &'static str,
        /// Its length.
        got: usize,
        /// The length expected.
        expected: usize,
    },
    /// More points than one call on one rank takes (indices are 32-bit inside).
    #[error("too many points: {got} (at most {max} per call and rank)")]
    TooManyPoints {
        /// The count given.
        got: usize,
        /// The most accepted.
        max: usize,
    },
    /// A parameter is out of its range or inconsistent with another.
    #[error("invalid parameter {name}: {why}")]
    InvalidParameter {
        /// The parameter's name.
        name: &'static str,
        /// What is wrong with it.
        why: String,
    },
    /// A per-particle value (mass, velocity, scalar field) is not finite, or not valid.
    #[error("{what}: value {index} is not finite ({value})")]
    NonFiniteValue {
        /// Which field.
        what: &'static str,
        /// The particle's index in the caller's input order.
        index: usize,
        /// The value found.
        value: f64,
    },
    /// The worker threads could not be started.
    #[error("could not create a thread pool: {0}")]
    ThreadPool(String),
    /// An MPI operation failed, or the ranks passed different parameters.
    #[error("MPI: {0}")]
    Mpi(String),
    /// Device arrays were given but no usable CUDA device (driver, device, NVRTC) exists.
    #[error("no CUDA device: {0}")]
    NoDevice(String),
    /// A CUDA driver or NVRTC call failed.
    #[error("CUDA: {0}")]
    Device(String),
    /// Another rank of a collective call failed (its own error says why); nothing was
    /// computed on any rank.
    #[error("rank {rank} reported an error in this collective call (see the message on that rank); nothing was computed")]
    RemoteRank {
        /// The lowest rank that failed.
        rank: usize,
    },
}

/// The result of a ztree call.
pub type Result<T> = std::result::Result<T, Error>;

/// `Err(LengthMismatch)` unless `got == expected`.
pub(crate) fn check_len(what: &'static str, got: usize, expected: usize) -> Result<()> {
    if got != expected { Err(Error::LengthMismatch { what, got, expected }) } else { Ok(()) }
}
