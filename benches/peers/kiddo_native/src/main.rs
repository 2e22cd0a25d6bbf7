//! kiddo 6.3 as a peer in ztree's side-by-side benchmark (`benches/peers/run.py`).
//!
//! ```text
//! kiddo_native knn <points.npy> <k> <threads> <box>   self-query, full neighbour lists
//! kiddo_native fof <points.npy> <link> <threads> <box> fixed-radius queries + union-find
//! ```
//! `points.npy`: C-order (N, 3) `<f4` or `<f8` (the tree and the distances use that type).
//! `box` > 0: periodic cube [0, box)^3 (kiddo's periodic boundary condition); 0: open.
//!
//! Timed region: points in memory -> tree (parallel construction) -> for kNN the full lists
//! (u32 indices and squared distances, kiddo's native output, in flat arrays), for FoF a
//! label per point (the root of its union-find set). Queries go through kiddo's batch API
//! on a rayon pool of `threads`. Counting groups for the checksum happens after the clock.
//! Prints one line `RESULT {json}`: secs, build_secs, the checksum (mean k-th distance, or
//! groups with >= 20 members and the largest group) and the peak resident memory over the
//! timed region (`VmHWM` after resetting it through /proc/self/clear_refs); with
//! `PEER_CALLS=N`, also `later_secs`, the median of N - 1 repeats of the call.
use std::fs;
use std::num::NonZeroUsize;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Instant;

use kiddo::{ImmutableKdTree, QueryResultItem, SquaredEuclidean};
use rayon::prelude::*;

/// Coordinates of an (N, 3) .npy file, as f32 or f64.
enum Points {
    F32(Vec<[f32; 3]>),
    F64(Vec<[f64; 3]>),
}

fn read_npy(path: &str) -> Points {
    let bytes = fs::read(path).unwrap_or_else(|e| panic!("{path}: {e}"));
    assert!(bytes.len() > 10 && &bytes[..6] == b"\x93NUMPY", "{path}: not a .npy file");
    let (hlen, start) = match bytes[6] {
        1 => (u16::from_le_bytes([bytes[8], bytes[9]]) as usize, 10),
        _ => (u32::from_le_bytes(bytes[8..12].try_into().unwrap()) as usize, 12),
    };
    let header = std::str::from_utf8(&bytes[start..start + hlen]).expect("npy header");
    assert!(header.contains("'fortran_order': False"), "{path}: Fortran order");
    let shape = header.split("'shape': (").nth(1).and_then(|s| s.split(')').next()).expect("npy shape");
    let dims: Vec<usize> = shape.split(',').filter_map(|s| s.trim().parse().ok()).collect();
    assert!(dims.len() == 2 && dims[1] == 3, "{path}: want shape (N, 3), got ({shape})");
    let data = &bytes[start + hlen..];
    if header.contains("'<f8'") {
        assert_eq!(data.len(), dims[0] * 24, "{path}: size");
        let c = |b: &[u8]| f64::from_le_bytes(b.try_into().unwrap());
        Points::F64(data.chunks_exact(24).map(|p| [c(&p[0..8]), c(&p[8..16]), c(&p[16..24])]).collect())
    } else if header.contains("'<f4'") {
        assert_eq!(data.len(), dims[0] * 12, "{path}: size");
        let c = |b: &[u8]| f32::from_le_bytes(b.try_into().unwrap());
        Points::F32(data.chunks_exact(12).map(|p| [c(&p[0..4]), c(&p[4..8]), c(&p[8..12])]).collect())
    } else {
        panic!("{path}: dtype must be <f4 or <f8 ({header})");
    }
}

/// A field of /proc/self/status in bytes (VmRSS, VmHWM); 0 where unavailable.
fn status_bytes(field: &str) -> u64 {
    let s = fs::read_to_string("/proc/self/status").unwrap_or_default();
    s.lines()
        .find(|l| l.starts_with(field))
        .and_then(|l| l.split_whitespace().nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |kb| kb * 1024)
}

/// Resets the peak resident set size (Linux >= 4.0), so VmHWM measures from here.
fn reset_peak() {
    let _ = fs::write("/proc/self/clear_refs", "5");
}

/// Raw output pointer shared by the batch visitor: each query index writes only its rows.
struct Rows<T>(*mut T);
unsafe impl<T> Sync for Rows<T> {}
unsafe impl<T> Send for Rows<T> {}
impl<T> Rows<T> {
    /// SAFETY: `i` in bounds, and no other thread writes element `i`.
    unsafe fn set(&self, i: usize, v: T) {
        unsafe { *self.0.add(i) = v }
    }
}

/// The kNN and FoF drivers for one coordinate type (kiddo's trees are concrete per type).
macro_rules! drivers {
    ($A:ty, $start:ident, $knn:ident, $fof:ident) => {
        /// The timed region's start: resident bytes before, the clock, the tree and its
        /// build time (the peak-memory mark is reset first).
        fn $start(pts: &[[$A; 3]]) -> (u64, Instant, ImmutableKdTree<$A, 3>, f64) {
            let rss0 = status_bytes("VmRSS");
            reset_peak();
            let t0 = Instant::now();
            let tree: ImmutableKdTree<$A, 3> = ImmutableKdTree::new_from_slice_parallel(pts).expect("tree");
            (rss0, t0, tree, t0.elapsed().as_secs_f64())
        }

        fn $knn(pts: &[[$A; 3]], k: usize, box_len: f64) -> (f64, String) {
            let n = pts.len();
            let kk = NonZeroUsize::new(k).expect("k >= 1");
            let bs = [box_len as $A; 3];
            let (rss0, t0, tree, build) = $start(pts);
            let mut idx = vec![0u32; n * k];
            let mut d2 = vec![0.0 as $A; n * k];
            let (ip, dp) = (Rows(idx.as_mut_ptr()), Rows(d2.as_mut_ptr()));
            let write = |i: usize, res: &[QueryResultItem<(), u32, $A>]| {
                // SAFETY: row i of each output is written by the visitor of query i only.
                for (j, r) in res.iter().take(k).enumerate() {
                    unsafe {
                        ip.set(i * k + j, r.item);
                        dp.set(i * k + j, r.distance);
                    }
                }
            };
            let batch = tree.query_batch(pts);
            // One neighbour: kiddo's own single-nearest query, as its users ask for it
            // (`KIDDO_NEAREST_N=1` keeps nearest_n(1), for comparison).
            let one = k == 1 && std::env::var_os("KIDDO_NEAREST_N").is_none();
            if one && box_len > 0.0 {
                batch
                    .periodic_boundary_condition(&bs)
                    .nearest_one::<SquaredEuclidean<$A>>()
                    .for_each(|i, res| write(i, std::slice::from_ref(&res)));
            } else if one {
                batch.nearest_one::<SquaredEuclidean<$A>>().for_each(|i, res| write(i, std::slice::from_ref(&res)));
            } else if box_len > 0.0 {
                batch
                    .periodic_boundary_condition(&bs)
                    .nearest_n::<SquaredEuclidean<$A>>(kk)
                    .for_each(|i, res| write(i, &res));
            } else {
                batch
                    .nearest_n::<SquaredEuclidean<$A>>(kk)
                    .for_each(|i, res| write(i, &res));
            }
            let secs = t0.elapsed().as_secs_f64();
            let peak = status_bytes("VmHWM");
            let mean_kth = (0..n).map(|i| (d2[i * k + k - 1] as f64).sqrt()).sum::<f64>() / n as f64;
            std::hint::black_box(&idx);
            let body = format!(
                "\"secs\": {secs:.6}, \"build_secs\": {build:.6}, \"mean_kth\": {mean_kth:.17e}, \
                 \"rss_before\": {rss0}, \"peak_rss\": {peak}"
            );
            (secs, body)
        }

        fn $fof(pts: &[[$A; 3]], link: f64, box_len: f64) -> (f64, String) {
            let n = pts.len();
            assert!(n < u32::MAX as usize);
            let r2 = (link * link) as $A;
            let bs = [box_len as $A; 3];
            let (rss0, t0, tree, build) = $start(pts);
            let parent: Vec<AtomicU32> = (0..n as u32).into_par_iter().map(AtomicU32::new).collect();
            let link_row = |i: usize, res: &[QueryResultItem<(), u32, $A>]| {
                for r in res {
                    if r.item as usize > i {
                        union(&parent, i as u32, r.item);
                    }
                }
            };
            let batch = tree.query_batch(pts);
            if box_len > 0.0 {
                batch
                    .periodic_boundary_condition(&bs)
                    .within::<SquaredEuclidean<$A>>(r2)
                    .unsorted()
                    .for_each(|i, res| link_row(i, &res));
            } else {
                batch
                    .within::<SquaredEuclidean<$A>>(r2)
                    .unsorted()
                    .for_each(|i, res| link_row(i, &res));
            }
            let labels: Vec<u32> = (0..n as u32).into_par_iter().map(|i| find(&parent, i)).collect();
            let secs = t0.elapsed().as_secs_f64();
            let peak = status_bytes("VmHWM");
            (secs, group_summary(&labels, secs, build, rss0, peak))
        }
    };
}

drivers!(f32, start_f32, knn_f32, fof_f32);
drivers!(f64, start_f64, knn_f64, fof_f64);

/// Radius self-query: per point the points within r (`within`, unsorted), counted, and
/// with `lists` kept as one vector per point (as scipy's `query_ball_point` returns them).
fn radius_f64(pts: &[[f64; 3]], r: f64, box_len: f64, lists: bool) -> (f64, String) {
    let n = pts.len();
    let (rss0, t0, tree, build) = start_f64(pts);
    let r2 = r * r;
    let bs = [box_len; 3];
    let counts: Vec<AtomicU32> = (0..n).into_par_iter().map(|_| AtomicU32::new(0)).collect();
    let kept: Vec<std::sync::Mutex<Vec<u32>>> = if lists { (0..n).into_par_iter().map(|_| std::sync::Mutex::new(Vec::new())).collect() } else { Vec::new() };
    let row = |i: usize, res: &[QueryResultItem<(), u32, f64>]| {
        counts[i].store(res.len() as u32, Ordering::Relaxed);
        if lists {
            *kept[i].lock().unwrap() = res.iter().map(|x| x.item).collect();
        }
    };
    let batch = tree.query_batch(pts);
    if box_len > 0.0 {
        batch.periodic_boundary_condition(&bs).within::<SquaredEuclidean<f64>>(r2).unsorted().for_each(|i, res| row(i, &res));
    } else {
        batch.within::<SquaredEuclidean<f64>>(r2).unsorted().for_each(|i, res| row(i, &res));
    }
    let secs = t0.elapsed().as_secs_f64();
    let peak = status_bytes("VmHWM");
    let pairs: u64 = counts.iter().map(|c| c.load(Ordering::Relaxed) as u64).sum();
    std::hint::black_box(&kept);
    (secs, format!("\"secs\": {secs:.6}, \"build_secs\": {build:.6}, \"pairs\": {pairs}, \"rss_before\": {rss0}, \"peak_rss\": {peak}"))
}

/// The FoF checksum (after the clock): groups, groups with >= 20 members, the largest.
fn group_summary(labels: &[u32], secs: f64, build: f64, rss0: u64, peak: u64) -> String {
    let mut count = vec![0u32; labels.len()];
    for &l in labels {
        count[l as usize] += 1;
    }
    let groups = count.iter().filter(|&&c| c > 0).count();
    let groups20 = count.iter().filter(|&&c| c >= 20).count();
    let largest = count.iter().copied().max().unwrap_or(0);
    format!(
        "\"secs\": {secs:.6}, \"build_secs\": {build:.6}, \"groups\": {groups}, \"groups20\": {groups20}, \
         \"largest\": {largest}, \"rss_before\": {rss0}, \"peak_rss\": {peak}"
    )
}

fn find(parent: &[AtomicU32], mut x: u32) -> u32 {
    loop {
        let p = parent[x as usize].load(Ordering::Relaxed);
        if p == x {
            return x;
        }
        let g = parent[p as usize].load(Ordering::Relaxed);
        if g != p {
            // Path halving; losing the race only loses a shortcut.
            let _ = parent[x as usize].compare_exchange_weak(p, g, Ordering::Relaxed, Ordering::Relaxed);
        }
        x = g;
    }
}

/// Joins the sets of a and b: the larger root goes under the smaller, by CAS.
fn union(parent: &[AtomicU32], a: u32, b: u32) {
    let (mut a, mut b) = (a, b);
    loop {
        a = find(parent, a);
        b = find(parent, b);
        if a == b {
            return;
        }
        let (lo, hi) = if a < b { (a, b) } else { (b, a) };
        if parent[hi as usize].compare_exchange(hi, lo, Ordering::AcqRel, Ordering::Relaxed).is_ok() {
            return;
        }
    }
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.len() != 6 || !matches!(args[1].as_str(), "knn" | "fof" | "radius") {
        eprintln!(
            "usage: kiddo_native knn <points.npy> <k> <threads> <box>\n       kiddo_native fof <points.npy> <link> <threads> <box>\n       \
             kiddo_native radius <points.npy> <r:counts|r:lists> <threads> <box>"
        );
        std::process::exit(2);
    }
    let threads: usize = args[4].parse().expect("threads");
    let box_len: f64 = args[5].parse().expect("box");
    rayon::ThreadPoolBuilder::new().num_threads(threads).build_global().expect("rayon pool");
    let pts = read_npy(&args[2]);
    let (dtype, n) = match &pts {
        Points::F32(p) => ("f32", p.len()),
        Points::F64(p) => ("f64", p.len()),
    };
    let run = || if args[1] == "knn" {
        let k: usize = args[3].parse().expect("k");
        match &pts {
            Points::F32(p) => knn_f32(p, k, box_len),
            Points::F64(p) => knn_f64(p, k, box_len),
        }
    } else if args[1] == "radius" {
        let (r, mode) = args[3].split_once(':').expect("r:mode");
        match &pts {
            Points::F64(p) => radius_f64(p, r.parse().expect("radius"), box_len, mode == "lists"),
            Points::F32(_) => panic!("radius: f64 points only"),
        }
    } else {
        let link: f64 = args[3].parse().expect("link");
        match &pts {
            Points::F32(p) => fof_f32(p, link, box_len),
            Points::F64(p) => fof_f64(p, link, box_len),
        }
    };
    let (_, mut body) = run();
    // PEER_CALLS=N (N > 1): N - 1 more calls after the first, as a simulation calls every
    // time step; `later_secs` is their median.
    let calls: usize = std::env::var("PEER_CALLS").ok().and_then(|c| c.parse().ok()).unwrap_or(1).clamp(1, 100);
    if calls > 1 {
        let mut later: Vec<f64> = (1..calls).map(|_| run().0).collect();
        later.sort_by(f64::total_cmp);
        let m = later.len();
        let med = if m % 2 == 1 { later[m / 2] } else { 0.5 * (later[m / 2 - 1] + later[m / 2]) };
        body.push_str(&format!(", \"later_secs\": {med:.6}"));
    }
    println!("RESULT {{\"peer\": \"kiddo-native\", \"n\": {n}, \"dtype\": \"{dtype}\", \"threads\": {threads}, {body}}}");
}
