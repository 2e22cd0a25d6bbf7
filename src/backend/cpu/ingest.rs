//! The CPU's first stages: reading the caller's points (validation, keys, gather into
//! z-order), gap levels, the refinement of dense key runs, and the split of a joint set
//! into sources and queries.
//!
//! Runs of identical keys longer than a leaf (a dense cluster in an open domain stretched
//! by far outliers) are refined with a second key over the run's own bounding box, so the
//! tree never degrades to brute force.

use rayon::prelude::*;

use super::Cpu;
use super::par::{DisjointSlice, chunk_ranges, filled};
use super::simd::{self, Simd};
use crate::backend::Ingest;
use crate::error::{Error, Result};
use crate::geom::Real;
use crate::geom::morton::{Quantizer, level_of};
use crate::input::validate::check_point;
use crate::input::{Bounds, Domain, PointSource, ScalarField};

impl<T: Real, const D: usize, P: PointSource<T, D> + ?Sized> Ingest<P, T, D> for Cpu {
    fn count(&self, pts: &P) -> usize {
        pts.len()
    }

    fn scan(&self, pts: &P, what: &'static str, domain: &Domain<D>) -> Result<Bounds<D>> {
        let n = pts.len();
        let box_len = domain.box_lengths();
        let chunks = chunk_ranges(n, rayon::current_num_threads() * 4);
        let partial: Vec<Result<Bounds<D>>> = chunks
            .into_par_iter()
            .map(|r| {
                // The AVX2 pass only tells whether the chunk is clean (and its bounds);
                // the checked loop below names the first bad point.
                #[cfg(target_arch = "x86_64")]
                if simd::level() >= Simd::Avx2 {
                    // SAFETY: `level()` returns a level only when the CPU has its features.
                    if let Some(b) = unsafe { clean_bounds_avx2(pts, r.clone(), box_len.as_ref()) } {
                        return Ok(b);
                    }
                }
                let mut b = Bounds::<D>::EMPTY;
                for i in r {
                    b.include(&check_point(&pts.point(i), i, what, box_len.as_ref())?);
                }
                Ok(b)
            })
            .collect();
        // The first error in input order, whatever the thread count.
        let mut all = Bounds::<D>::EMPTY;
        for r in partial {
            all = all.merge(&r?);
        }
        Ok(all)
    }

    fn keys_into(&self, pts: &P, quant: &Quantizer<D>, keys: &mut Vec<u64>, at: usize) -> Result<()> {
        let n = pts.len();
        let level = simd::level();
        keys[at..at + n].par_chunks_mut(KEY_CHUNK).enumerate().for_each(|(c, out)| {
            let first = c * KEY_CHUNK;
            match level {
                // SAFETY: `level()` returns a level only when the CPU has its features.
                #[cfg(target_arch = "x86_64")]
                Simd::Avx2 | Simd::Avx512 => unsafe { keys_avx2(pts, quant, first, out) },
                _ => {
                    for (j, k) in out.iter_mut().enumerate() {
                        let p = pts.point(first + j);
                        *k = quant.key(&std::array::from_fn(|d| p[d].to_f64()));
                    }
                }
            }
        });
        Ok(())
    }

    fn scan_keys_into(&self, pts: &P, what: &'static str, domain: &Domain<D>, quant: &Quantizer<D>, keys: &mut Vec<u64>, at: usize) -> Result<()> {
        // One pass over the points: each chunk is checked, then keyed while it is still
        // in cache (the separate passes read the caller's positions twice).
        let n = pts.len();
        let box_len = domain.box_lengths();
        let level = simd::level();
        let checked: Vec<Result<()>> = keys[at..at + n]
            .par_chunks_mut(KEY_CHUNK)
            .enumerate()
            .map(|(c, out)| {
                let r = c * KEY_CHUNK..c * KEY_CHUNK + out.len();
                #[cfg(target_arch = "x86_64")]
                if level >= Simd::Avx2 {
                    // SAFETY: `level()` returns a level only when the CPU has its features.
                    if unsafe { checked_keys_avx2(pts, quant, r.start, out, box_len.as_ref()) } {
                        return Ok(());
                    }
                }
                for (k, i) in out.iter_mut().zip(r) {
                    let p = check_point(&pts.point(i), i, what, box_len.as_ref())?;
                    *k = quant.key(&p);
                }
                Ok(())
            })
            .collect();
        // The first error in input order, whatever the thread count.
        checked.into_iter().collect()
    }

    fn gather_rows(&self, pts: &P, rows: &Vec<u32>) -> Result<Vec<[T; D]>> {
        Ok(rows.par_iter().map(|&r| pts.point(r as usize)).collect())
    }

    fn gather_into(&self, pts: &P, perm: &Vec<u32>, first: u32, out: &mut [Vec<T>; D]) -> Result<()> {
        let n = pts.len() as u32;
        let outs: [DisjointSlice<'_, T>; D] = {
            let mut it = out.iter_mut();
            std::array::from_fn(|_| DisjointSlice::new(it.next().unwrap()))
        };
        // The points are read in random order: each is prefetched a few iterations ahead,
        // so that several cache (and TLB) misses are under way at once.
        const AHEAD: usize = 16;
        const CHUNK: usize = 4096;
        perm.par_chunks(CHUNK).enumerate().for_each(|(c, chunk)| {
            for (j, &v) in chunk.iter().enumerate() {
                if let Some(&w) = chunk.get(j + AHEAD)
                    && w >= first
                    && w - first < n
                {
                    pts.prefetch((w - first) as usize);
                }
                if v >= first && v - first < n {
                    let p = pts.point((v - first) as usize);
                    for d in 0..D {
                        // SAFETY: each z is written by one task only.
                        unsafe { outs[d].write(c * CHUNK + j, p[d]) }
                    }
                }
            }
        });
        Ok(())
    }
}

/// `check_point`'s test of one coordinate as one expression (no early exit: it
/// vectorises): `|v| <= MAX_COORD` is false for NaN and infinities too.
#[inline(always)]
fn passes<T: Real>(v: f64, periodic: bool, l: f64) -> bool {
    // (Bitwise, not short-circuit: no branch, so the key loop vectorises.)
    (v.abs() <= T::MAX_COORD) & (!periodic | ((v >= 0.0) & (v < l)))
}

/// The bounds of points `r`, or None when one of them fails `check_point` (not finite,
/// outside the box, or too large: the one test `|v| <= MAX_COORD` is false for NaN and
/// infinities too). Compiled with AVX2: straight compares, minima and maxima that
/// vectorise, with no early exit.
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn clean_bounds_avx2<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    pts: &P,
    r: std::ops::Range<usize>,
    box_len: Option<&[f64; D]>,
) -> Option<Bounds<D>> {
    let mut b = Bounds::<D>::EMPTY;
    let mut ok = true;
    let l = box_len.copied().unwrap_or([f64::INFINITY; D]);
    let periodic = box_len.is_some();
    for i in r {
        let p = pts.point(i);
        for d in 0..D {
            let v = p[d].to_f64();
            ok &= passes::<T>(v, periodic, l[d]);
            b.lo[d] = if v < b.lo[d] { v } else { b.lo[d] };
            b.hi[d] = if v > b.hi[d] { v } else { b.hi[d] };
        }
    }
    ok.then_some(b)
}

/// Points per task of the key loop.
const KEY_CHUNK: usize = 4096;

/// Keys of points `first ..` into `out`, compiled with AVX2: the cell arithmetic and bit
/// interleaving run on four points at once (the stage ~2.5x faster than the baseline loop).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn keys_avx2<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(pts: &P, quant: &Quantizer<D>, first: usize, out: &mut [u64]) {
    for (j, k) in out.iter_mut().enumerate() {
        let p = pts.point(first + j);
        *k = quant.key_vectorisable(&std::array::from_fn(|d| p[d].to_f64()));
    }
}

/// `keys_avx2` with `clean_bounds_avx2`'s test in the same loop (no bounds): false when a
/// point fails it (the keys are then not all valid).
#[cfg(target_arch = "x86_64")]
#[target_feature(enable = "avx2")]
unsafe fn checked_keys_avx2<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
    pts: &P,
    quant: &Quantizer<D>,
    first: usize,
    out: &mut [u64],
    box_len: Option<&[f64; D]>,
) -> bool {
    let l = box_len.copied().unwrap_or([f64::INFINITY; D]);
    let periodic = box_len.is_some();
    let mut ok = true;
    for (j, k) in out.iter_mut().enumerate() {
        let p = pts.point(first + j);
        let x: [f64; D] = std::array::from_fn(|d| p[d].to_f64());
        for d in 0..D {
            ok &= passes::<T>(x[d], periodic, l[d]);
        }
        *k = quant.key_vectorisable(&x);
    }
    ok
}

/// Levels of the gaps between consecutive sorted points: 64 + bit length of the key
/// difference; 0 between points whose keys are identical. (Gaps inside a refined run get
/// the bit length of their secondary key difference, 1..=63.)
pub(crate) fn levels(keys: &[u64]) -> Vec<u8> {
    if keys.len() < 2 {
        return Vec::new();
    }
    keys.par_windows(2).map(|w| if w[0] == w[1] { 0 } else { 64 + level_of(w[0], w[1]) }).collect()
}

/// Whether some run of identical keys holds more than `max_run` points (`refine_runs` has
/// work): `max_run` or more level-0 gaps in a row.
pub(crate) fn has_long_runs(levels: &[u8], max_run: usize) -> bool {
    // Per chunk: (leading level-0 gaps, trailing ones, the longest run inside, length).
    let parts: Vec<(usize, usize, usize, usize)> = chunk_ranges(levels.len(), rayon::current_num_threads() * 4)
        .into_par_iter()
        .map(|r| {
            let c = &levels[r];
            let lead = c.iter().position(|&l| l != 0).unwrap_or(c.len());
            let trail = c.iter().rev().position(|&l| l != 0).unwrap_or(c.len());
            let (mut run, mut longest) = (0usize, 0usize);
            for &l in c {
                run = if l == 0 { run + 1 } else { 0 };
                longest = longest.max(run);
            }
            (lead, trail, longest, c.len())
        })
        .collect();
    // Runs across chunk borders: the zeros carried from the chunks before.
    let mut carry = 0;
    for (lead, trail, longest, len) in parts {
        if longest >= max_run || carry + lead >= max_run {
            return true;
        }
        carry = if lead == len { carry + len } else { trail };
    }
    false
}

/// Refines runs of identical keys longer than `max_run`: each run is re-sorted by a Morton
/// key over its own bounding box (stable: ties keep their z-order, which inside a run is
/// input order), permuting `perm` and the z-ordered positions alike, and its internal gaps
/// get secondary levels.
pub(crate) fn refine_runs<T: Real, const D: usize>(keys: &[u64], perm: &mut [u32], levels: &mut [u8], pos: &mut [Vec<T>; D], max_run: usize) {
    let n = keys.len();
    let mut runs: Vec<(usize, usize)> = Vec::new();
    let mut start = 0;
    while start < n {
        let mut end = start + 1;
        while end < n && keys[end] == keys[start] {
            end += 1;
        }
        if end - start > max_run {
            runs.push((start, end));
        }
        start = end;
    }
    if runs.is_empty() {
        return;
    }
    // Disjoint pieces of every array, one per run, refined in parallel.
    let perm_s = DisjointSlice::new(perm);
    let lev_s = DisjointSlice::new(levels);
    let pos_s: [DisjointSlice<'_, T>; D] = {
        let mut it = pos.iter_mut();
        std::array::from_fn(|_| DisjointSlice::new(it.next().unwrap()))
    };
    runs.into_par_iter().with_max_len(1).for_each(|(s0, e0)| {
        // SAFETY: runs are disjoint; each task touches only its run's points and gaps.
        let (v, l) = unsafe { (perm_s.slice_mut(s0, e0 - s0), lev_s.slice_mut(s0, e0 - 1 - s0)) };
        let p: [&mut [T]; D] = std::array::from_fn(|d| unsafe { pos_s[d].slice_mut(s0, e0 - s0) });
        refine_one(v, l, p);
    });
}

fn refine_one<T: Real, const D: usize>(perm: &mut [u32], levels: &mut [u8], pos: [&mut [T]; D]) {
    let m = perm.len();
    let pts: Vec<[f64; D]> = (0..m).map(|i| std::array::from_fn(|d| pos[d][i].to_f64())).collect();
    let mut bounds = Bounds::<D>::EMPTY;
    for p in &pts {
        bounds.include(p);
    }
    if (0..D).all(|d| bounds.hi[d] == bounds.lo[d]) {
        return; // truly identical points: chunked into leaves by the tree
    }
    let q = Quantizer::<D>::over(&bounds);
    let mut keys: Vec<u64> = pts.iter().map(|p| q.key(p)).collect();
    let mut order: Vec<u32> = (0..m as u32).collect();
    super::sort::radix_sort(&mut keys, &mut order, 64); // stable: ties keep their order
    let old: Vec<u32> = order.iter().map(|&i| perm[i as usize]).collect();
    perm.copy_from_slice(&old);
    for col in pos {
        let old: Vec<T> = order.iter().map(|&i| col[i as usize]).collect();
        col.copy_from_slice(&old);
    }
    for (i, l) in levels.iter_mut().enumerate() {
        *l = level_of(keys[i], keys[i + 1]);
    }
}

/// Splits merged z-ordered points into sources (`perm[z] < ns`) and queries.
#[allow(clippy::type_complexity)]
pub(crate) fn split_types<T: Real, const D: usize>(
    pos: [Vec<T>; D],
    perm: Vec<u32>,
    ns: usize,
) -> ([Vec<T>; D], Vec<u32>, [Vec<T>; D], Vec<u32>, Vec<u32>) {
    let n = perm.len();
    let nq = n - ns;
    let mut prefix = Vec::with_capacity(n + 1);
    let mut s = 0u32;
    prefix.push(0);
    for &v in &perm {
        s += u32::from((v as usize) < ns);
        prefix.push(s);
    }
    let mut spos: [Vec<T>; D] = std::array::from_fn(|_| filled(ns, T::ZERO));
    let mut qpos: [Vec<T>; D] = std::array::from_fn(|_| filled(nq, T::ZERO));
    let mut sorig = filled(ns, 0u32);
    let mut qorig = filled(nq, 0u32);
    {
        let sp: [DisjointSlice<'_, T>; D] = {
            let mut it = spos.iter_mut();
            std::array::from_fn(|_| DisjointSlice::new(it.next().unwrap()))
        };
        let qp: [DisjointSlice<'_, T>; D] = {
            let mut it = qpos.iter_mut();
            std::array::from_fn(|_| DisjointSlice::new(it.next().unwrap()))
        };
        let so = DisjointSlice::new(&mut sorig);
        let qo = DisjointSlice::new(&mut qorig);
        perm.par_iter().enumerate().with_min_len(1024).for_each(|(z, &v)| {
            let v = v as usize;
            // SAFETY: the prefix count gives every source (query) its own slot.
            unsafe {
                if v < ns {
                    let j = prefix[z] as usize;
                    for d in 0..D {
                        sp[d].write(j, pos[d][z]);
                    }
                    so.write(j, v as u32);
                } else {
                    let j = z - prefix[z] as usize;
                    for d in 0..D {
                        qp[d].write(j, pos[d][z]);
                    }
                    qo.write(j, (v - ns) as u32);
                }
            }
        });
    }
    (spos, sorig, qpos, qorig, prefix)
}

/// `f` in the z-order of `orig`.
pub(crate) fn gather_scalar(f: &dyn ScalarField, orig: &[u32]) -> Vec<f64> {
    orig.par_iter().with_min_len(1024).map(|&i| f.get(i as usize)).collect()
}

#[allow(dead_code)]
fn _unused(_: Error) {}

#[cfg(test)]
mod tests {
    use super::super::simd::{self, Simd};
    use super::*;

    /// A spent u64 buffer of the right length becomes an 8-byte column in place (its
    /// memory, no copy); other lengths and element sizes get zeros, the spent buffers
    /// freed first.
    #[test]
    fn overwritten_reuses_spent_buffers_of_its_layout() {
        use crate::backend::Backend;
        let mut spent = vec![vec![7u64; 10], vec![1u64; 1000]];
        let ptr = spent[1].as_ptr() as usize;
        let col: Vec<f64> = Cpu.overwritten(1000, &mut spent).unwrap();
        assert_eq!((col.as_ptr() as usize, col.len()), (ptr, 1000));
        assert_eq!(spent.len(), 1);
        let cols: [Vec<f64>; 2] = Cpu.overwritten_array(10, &mut spent).unwrap();
        assert_eq!((cols[0].len(), cols[1].clone(), spent.len()), (10, vec![0.0; 10], 0));
        let mut spent = vec![vec![7u64; 10]];
        let z: Vec<f32> = Cpu.overwritten(10, &mut spent).unwrap();
        assert_eq!((z, spent.len()), (vec![0.0f32; 10], 0));
        let mut spent = vec![vec![7u64; 10]];
        let z: Vec<i64> = Cpu.overwritten(11, &mut spent).unwrap();
        assert_eq!((z, spent.len()), (vec![0i64; 11], 0));
    }

    /// `has_long_runs` against the runs of identical sorted keys themselves (the
    /// condition `refine_runs` refines), with runs across the chunks' borders, at the
    /// array's ends and of every length around the limit.
    #[test]
    fn long_runs_are_the_runs_refine_runs_refines() {
        let mut next = crate::geom::xorshift(11u64);
        for case in 0..400 {
            let n = [0, 1, 2, 5, 47, 48, 49, 97, 1000, 5003][case % 10];
            let mut keys = Vec::with_capacity(n);
            let mut k = 0u64;
            while keys.len() < n {
                k += 1 + next() % 1000;
                let run = match next() % 4 {
                    0 => 1 + (next() % 60) as usize,
                    _ => 1 + (next() % 3) as usize,
                };
                keys.extend(std::iter::repeat_n(k, run.min(n - keys.len())));
            }
            let lv = levels(&keys);
            for max_run in [1, 2, 7, 47, 48, 49] {
                let mut want = false;
                let mut start = 0;
                while start < n {
                    let end = (start..n).find(|&e| keys[e] != keys[start]).unwrap_or(n);
                    want |= end - start > max_run;
                    start = end;
                }
                assert_eq!(has_long_runs(&lv, max_run), want, "n {n}, case {case}, max_run {max_run}");
            }
        }
    }

    /// The fused check and keys of a periodic box equal `keys_into` on clean points, and
    /// name the same bad point as `scan` (the first in input order), at every vector level.
    #[test]
    fn scan_keys_is_scan_then_keys_at_every_level() {
        let mut u = crate::geom::unit_xorshift(11);
        let n = 20_000;
        let mut pts: Vec<[f64; 3]> = (0..n).map(|_| [u(), u(), u()]).collect();
        pts[5] = [0.0, -0.0, 0.5];
        pts[n - 1] = [1.0 - f64::EPSILON, 0.0, 0.999_999_999];
        let per = Domain::periodic_cube(1.0);
        let quant = Quantizer::new(&per, &Bounds::EMPTY);
        // Bad points in two chunks (the first in input order is named), and the last
        // point alone bad.
        let mut bad = pts.clone();
        bad[9_000][2] = 1.0;
        bad[13_000][0] = f64::NAN;
        let mut last = pts.clone();
        last[n - 1][1] = -1e-300;
        let _knobs = crate::test_knobs::hold();
        for l in Simd::available() {
            simd::force(Some(l));
            let mut want = vec![0u64; n + 3];
            Cpu.keys_into(pts.as_slice(), &quant, &mut want, 3).unwrap();
            let mut got = vec![0u64; n + 3];
            Cpu.scan_keys_into(pts.as_slice(), "sources", &per, &quant, &mut got, 3).unwrap();
            assert_eq!(got, want, "{l:?}");
            for (b, name) in [(&bad, "bad"), (&last, "last")] {
                let want = Cpu.scan(b.as_slice(), "sources", &per).unwrap_err().to_string();
                let got = Cpu.scan_keys_into(b.as_slice(), "sources", &per, &quant, &mut vec![0u64; n], 0).unwrap_err().to_string();
                assert_eq!(got, want, "{l:?}, {name}");
            }
        }
        simd::force(None);
    }

    /// The scan at every vector level: the bounds of clean points (signed zeros among
    /// them) equal a checked loop's, and with bad points in several chunks the error
    /// names the first in input order, as the checked loop does.
    #[test]
    fn scan_is_the_checked_loop_at_every_level() {
        let mut u = crate::geom::unit_xorshift(7);
        let mut pts: Vec<[f64; 3]> = (0..50_000).map(|_| [u(), u(), u()]).collect();
        pts[3] = [0.0, -0.0, 0.5];
        pts[40_000] = [-0.0, 0.0, 0.0];
        let per = Domain::periodic_cube(1.0);
        let checked = |pts: &[[f64; 3]], dom: &Domain<3>| -> Result<Bounds<3>> {
            let mut b = Bounds::<3>::EMPTY;
            for (i, p) in pts.iter().enumerate() {
                b.include(&check_point(p, i, "sources", dom.box_lengths().as_ref())?);
            }
            Ok(b)
        };
        let want = checked(&pts, &per).unwrap();
        let mut bad = pts.clone();
        bad[31_000][1] = f64::NAN;
        bad[45_000][0] = 1.0;
        let mut out = pts.clone();
        out[20_000][2] = 1.0;
        out[30_000][0] = f64::INFINITY;
        let _knobs = crate::test_knobs::hold();
        for l in Simd::available() {
            simd::force(Some(l));
            for dom in [per, Domain::Open] {
                let b = Cpu.scan(pts.as_slice(), "sources", &dom).unwrap();
                assert_eq!((b.lo, b.hi), (want.lo, want.hi), "{l:?}");
            }
            assert!(matches!(Cpu.scan(bad.as_slice(), "sources", &per), Err(Error::NonFinite { index: 31_000, dim: 1, .. })), "{l:?}");
            assert!(matches!(Cpu.scan(out.as_slice(), "sources", &per), Err(Error::OutsideBox { index: 20_000, dim: 2, .. })), "{l:?}");
            assert!(matches!(Cpu.scan(out.as_slice(), "sources", &Domain::Open), Err(Error::NonFinite { index: 30_000, dim: 0, .. })), "{l:?}");
        }
        simd::force(None);
    }
}
