//! Agreement before a collective call: every rank checks its own arguments, then all ranks
//! learn whether any rank failed and whether they all passed the same parameters, so a
//! bad argument on one rank is an error on every rank in the same call, never a hang.

use super::Comm;
use crate::error::{Error, Result};
use crate::input::Domain;

/// Every rank learns whether any rank's `local` check failed (that rank gets its own
/// error, the others `RemoteRank`) and, if none did, whether all ranks passed the same
/// parameter words (`Mpi` error otherwise). Collective.
pub(crate) fn agree_params(comm: &Comm, what: &str, local: Result<Vec<u64>>) -> Result<()> {
    let v = comm.agree(local)?;
    // Same length everywhere first (the words are compared element-wise).
    let len = comm.max_u64(&[v.len() as u64, !(v.len() as u64)]);
    if len[0] != !len[1] {
        return Err(disagree(what));
    }
    // Exact on all 64 bits (the words include f64 bit patterns): min(v) = !max(!v).
    let hi = comm.max_u64(&v);
    let lo_inv = comm.max_u64(&v.iter().map(|&x| !x).collect::<Vec<_>>());
    if hi.iter().zip(&lo_inv).any(|(h, l)| *h != !*l) {
        return Err(disagree(what));
    }
    Ok(())
}

fn disagree(what: &str) -> Error {
    Error::Mpi(format!(
        "the ranks disagree on the parameters of this {what} call (domain, dimensions, element type, k, requested outputs or fields must match on every rank)"
    ))
}

/// A domain as parameter words.
pub(crate) fn domain_words<const D: usize>(domain: &Domain<D>) -> Vec<u64> {
    let mut w = vec![D as u64];
    match domain {
        Domain::Open => w.push(0),
        Domain::Periodic(l) => w.extend(std::iter::once(1).chain(l.iter().map(|x| x.to_bits()))),
    }
    w
}

/// Agrees on optional fields given on some ranks: `Some(present)` from a rank that has
/// particles, `None` (either is fine) from one that has none. Every rank learns whether
/// each field is present; `Mpi` error when ranks with particles disagree. Collective.
pub(crate) fn agree_presence(comm: &Comm, what: &str, flags: &[Option<bool>]) -> Result<Vec<bool>> {
    let mut v: Vec<u64> = flags.iter().map(|f| (*f == Some(true)) as u64).collect();
    v.extend(flags.iter().map(|f| (*f == Some(false)) as u64));
    let m = comm.max_u64(&v);
    let (yes, no) = m.split_at(flags.len());
    if yes.iter().zip(no).any(|(y, n)| *y == 1 && *n == 1) {
        return Err(Error::Mpi(format!(
            "the ranks disagree on which optional arrays (masses, velocities, ids) this {what} call has: give them on every rank that has particles"
        )));
    }
    Ok(yes.iter().map(|&y| y == 1).collect())
}
