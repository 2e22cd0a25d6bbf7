//! The device primitives against the CPU's definitions, on every device this test process
//! can reach: the emulator (feature `cuda-emu`) and a real GPU when one is present.

use std::sync::Arc;

use super::device::{DevBuf, Device};
use super::prims::{self, Strided};
use crate::geom::Real;
use crate::geom::morton::{Quantizer, level_of};
use crate::input::{Bounds, Domain};

pub(super) fn devices() -> Vec<Arc<dyn Device>> {
    let mut v: Vec<Arc<dyn Device>> = Vec::new();
    // ZTREE_TEST_REAL_DEVICE_ONLY: on a GPU machine, test the GPU alone (the emulator's
    // runs are CI's and cost the GPU's time there).
    #[cfg(feature = "cuda-emu")]
    if std::env::var_os("ZTREE_TEST_REAL_DEVICE_ONLY").is_none() {
        v.push(Arc::new(super::emu::EmuDevice::default()));
    }
    #[cfg(feature = "cuda")]
    match super::driver::CudaDevice::open(0, std::ptr::null_mut()) {
        Ok(d) => v.push(Arc::new(d)),
        Err(e) => {
            crate::test_require::require_hardware(&format!("CUDA GPU for the device tests ({e})"), "gpu", false);
        }
    }
    // In CI the emulator must be there (make test builds it): an empty list is a failure.
    assert!(!v.is_empty(), "no device to test on: build with --features cuda-emu");
    v
}

struct Lcg(u64);
impl Lcg {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        self.0 >> 11
    }
    fn unit(&mut self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 42) as f64
    }
}

/// Points that probe the cell function: random, on cell faces, at the box's faces and
/// beyond them (clamped), duplicates, and (for the open quantiser) a degenerate axis.
fn probe_points<const D: usize>(n: usize, l: f64, seed: u64) -> Vec<[f64; D]> {
    let mut r = Lcg(seed);
    let cells = (1u64 << crate::geom::morton::bits_per_dim(D)) as f64;
    (0..n)
        .map(|i| {
            std::array::from_fn(|d| match (i + d) % 7 {
                0 => (r.next() % 4096) as f64 * l / 4096.0,          // on coarse cell faces
                1 => (r.next() % (cells as u64)) as f64 * l / cells, // on finest cell faces
                2 => l - l * f64::EPSILON * (r.next() % 4) as f64,   // at the top face
                3 => -(r.unit() * l * 1e-3),                         // just below the box
                4 => l * (1.0 + r.unit()),                           // above it
                5 if i % 11 == 0 => f64::NAN,                        // (never passed validation; cell 0 on both)
                _ => r.unit() * l,
            })
        })
        .collect()
}

fn check_keys<T: Real, const D: usize>(dev: &Arc<dyn Device>, quant: &Quantizer<D>, pts: &[[f64; D]]) {
    let n = pts.len();
    // The points as the caller holds them: array of structs, D coordinates and a pad.
    let width = D + 1;
    let mut aos: Vec<T> = vec![T::ZERO; n * width];
    for (i, p) in pts.iter().enumerate() {
        for d in 0..D {
            aos[i * width + d] = T::from_f64(p[d]);
        }
    }
    let buf: DevBuf<T> = DevBuf::from_slice(dev, &aos).unwrap();
    let stride = (width * size_of::<T>()) as i64;
    let pos: [Strided; D] = std::array::from_fn(|d| Strided { data: buf.ptr() + (d * size_of::<T>()) as u64, stride });
    let keys: DevBuf<u64> = DevBuf::new(dev, n).unwrap();
    prims::keys::<T, D>(dev, pos, n, quant, keys.ptr()).unwrap();
    let got = keys.to_vec().unwrap();
    for (i, p) in pts.iter().enumerate() {
        let want = quant.key(&std::array::from_fn(|d| T::from_f64(p[d]).to_f64()));
        assert_eq!(got[i], want, "{}: key of point {i} {:?} ({}, {D}D)", dev.describe(), p, T::NAME);
    }
}

#[test]
fn keys_equal_the_cpu_quantiser() {
    for dev in devices() {
        for &l in &[1.0, 100.0, 3.7e5] {
            let p3 = probe_points::<3>(3000, l, 7);
            let p2 = probe_points::<2>(3000, l, 8);
            let periodic3 = Quantizer::new(&Domain::Periodic([l, l * 0.5, l]), &Bounds::EMPTY);
            let open3 = Quantizer::over(&Bounds { lo: [0.1 * l, -0.2 * l, 0.0], hi: [0.9 * l, 0.7 * l, 0.0] });
            let periodic2 = Quantizer::new(&Domain::Periodic([l, l]), &Bounds::EMPTY);
            let open2 = Quantizer::over(&Bounds { lo: [0.0, 0.5 * l], hi: [l, 0.5 * l] });
            for q in [&periodic3, &open3] {
                check_keys::<f64, 3>(&dev, q, &p3);
                check_keys::<f32, 3>(&dev, q, &p3);
            }
            for q in [&periodic2, &open2] {
                check_keys::<f64, 2>(&dev, q, &p2);
                check_keys::<f32, 2>(&dev, q, &p2);
            }
        }
    }
}

#[test]
fn levels_equal_the_cpu_levels() {
    for dev in devices() {
        let mut r = Lcg(3);
        for n in [0usize, 1, 2, 255, 256, 257, 5000] {
            let mut keys: Vec<u64> = (0..n).map(|_| r.next() % 64 * (1 << (r.next() % 40))).collect();
            keys.sort_unstable();
            let want: Vec<u8> = keys.windows(2).map(|w| if w[0] == w[1] { 0 } else { 64 + level_of(w[0], w[1]) }).collect();
            let got = prims::levels(&dev, &DevBuf::from_slice(&dev, &keys).unwrap()).unwrap().to_vec().unwrap();
            assert_eq!(got, want, "{}: n = {n}", dev.describe());
        }
    }
}

#[test]
fn exclusive_scan_is_a_prefix_sum() {
    for dev in devices() {
        let mut r = Lcg(5);
        // One block: inside, at and past its tiles (4096) and its limit; two levels above
        // it, and with a small limit for one block (100), the recursion: 70,000 -> 274
        // totals -> 2.
        let max = prims::SCAN_ONE_BLOCK_MAX;
        let cases = [1usize, 31, 32, 255, 256, 257, 4095, 4096, 4097, 8193, max - 1, max, max + 1, 70_000].map(|n| (n, max));
        for (n, one_block_max) in cases.into_iter().chain([(70_000, 100), (257, 100), (100, 100)]) {
            let v: Vec<u32> = (0..n).map(|i| if i % 5 == 0 { 0 } else { (r.next() % 1000) as u32 }).collect();
            // Scanned within a larger buffer whose neighbours must stay untouched.
            let mut padded = vec![7u32; n + 2];
            padded[1..=n].copy_from_slice(&v);
            let buf = DevBuf::from_slice(&dev, &padded).unwrap();
            prims::exclusive_scan_with(&dev, buf.ptr() + 4, n, one_block_max).unwrap();
            let mut want: Vec<u32> = v
                .iter()
                .scan(0u32, |s, &x| {
                    let e = *s;
                    *s += x;
                    Some(e)
                })
                .collect();
            want.insert(0, 7);
            want.push(7);
            assert_eq!(buf.to_vec().unwrap(), want, "{}: n = {n}, one block up to {one_block_max}", dev.describe());
        }
    }
}

#[test]
fn radix_sort_is_stable_and_equals_the_cpu_sort() {
    for dev in devices() {
        let mut r = Lcg(11);
        for (n, distinct) in [
            (0usize, 1u64),
            (1, 1),
            (2, 1),
            (100, 7),
            (2047, 1 << 62),
            (2048, 300),
            (2049, 2),
            (4096, 1 << 62),
            (4097, 1 << 62),
            (20_000, 1 << 20),
            (20_000, 1),
        ] {
            // Few distinct values (long runs of ties) and keys spread over all 63 bits.
            let keys: Vec<u64> = (0..n).map(|_| (r.next() % distinct).wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 1).collect();
            let vals: Vec<u32> = (0..n as u32).collect();
            // Every bit kept; cut to the tree's bits (a digit split by the cut, 43 of 63
            // bits); cut inside the top digit (the last pass on a digit of 3 bits).
            for keep in [64, crate::geom::morton::bits_kept(n), 3] {
                let mut dk = DevBuf::from_slice(&dev, &keys).unwrap();
                let mut dv = DevBuf::from_slice(&dev, &vals).unwrap();
                prims::sort_pairs(&dev, &mut dk, &mut dv, keep).unwrap();
                let (mut ck, mut cv) = (keys.clone(), vals.clone());
                crate::backend::cpu::radix_sort(&mut ck, &mut cv, keep);
                // Above CUT_MIN keys the order is that of the cut keys.
                let top = 64 - keys.iter().fold(0u64, |a, &x| a | (x ^ keys[0])).leading_zeros();
                let low = if n > crate::geom::morton::CUT_MIN { top.saturating_sub(keep) } else { 0 };
                let cut = |x: u64| if low == 0 { x } else { x & !((1u64 << low) - 1) };
                let mut order: Vec<u32> = vals.clone();
                order.sort_by_key(|&i| cut(keys[i as usize])); // std's sort is stable
                assert_eq!(dv.to_vec().unwrap(), order, "{}: permutation, n = {n}, keep {keep}", dev.describe());
                assert_eq!(cv, order, "cpu permutation, n = {n}, keep {keep}");
                assert_eq!(dk.to_vec().unwrap(), ck, "{}: keys, n = {n}, keep {keep}", dev.describe());
            }
        }
    }
}

#[test]
fn keys_sort_gather_put_points_in_z_order_as_the_cpu_does() {
    // The prepare stage's first steps chained on the device: keys of strided f32 points,
    // the stable sort with permutation, the gather of each coordinate into z-order.
    for dev in devices() {
        let n = 5000;
        let pts = probe_points::<3>(n, 1.0, 21);
        let q = Quantizer::new(&Domain::Periodic([1.0; 3]), &Bounds::EMPTY);
        let aos: Vec<f32> = pts.iter().flat_map(|p| [p[0] as f32, p[1] as f32, p[2] as f32]).collect();
        let buf: DevBuf<f32> = DevBuf::from_slice(&dev, &aos).unwrap();
        let pos: [Strided; 3] = std::array::from_fn(|d| Strided { data: buf.ptr() + 4 * d as u64, stride: 12 });
        let mut keys: DevBuf<u64> = DevBuf::new(&dev, n).unwrap();
        prims::keys::<f32, 3>(&dev, pos, n, &q, keys.ptr()).unwrap();
        let mut perm = DevBuf::from_slice(&dev, &(0..n as u32).collect::<Vec<_>>()).unwrap();
        // Cut to the tree's bits, as the pipeline sorts them.
        prims::sort_pairs(&dev, &mut keys, &mut perm, crate::geom::morton::bits_kept(n)).unwrap();
        let perm_host = perm.to_vec().unwrap();
        let mut want_keys: Vec<u64> = pts.iter().map(|p| q.key(&std::array::from_fn(|d| p[d] as f32 as f64))).collect();
        let mut want_perm: Vec<u32> = (0..n as u32).collect();
        crate::backend::cpu::radix_sort(&mut want_keys, &mut want_perm, crate::geom::morton::bits_kept(n));
        assert_eq!(perm_host, want_perm, "{}", dev.describe());
        assert_eq!(keys.to_vec().unwrap(), want_keys);
        for d in 0..3 {
            let out: DevBuf<f32> = DevBuf::new(&dev, n).unwrap();
            prims::gather::<f32>(&dev, pos[d], &perm, 0, n, &out).unwrap();
            // Bit patterns: the probe points include NaN.
            let want: Vec<u32> = want_perm.iter().map(|&i| (pts[i as usize][d] as f32).to_bits()).collect();
            let got: Vec<u32> = out.to_vec().unwrap().iter().map(|v| v.to_bits()).collect();
            assert!(got == want, "{}: coordinate {d} differs", dev.describe());
        }
    }
}

/// The device metric (kernels/zt_geom.cuh `ZtMetric`) against `geom::metric` bit for bit:
/// point distances and box bounds, open and periodic (|dx| = L/2 exactly, wrapping,
/// overlapping and far boxes), f32 and f64, 2D and 3D.
fn check_metric<T: Real, const D: usize>(dev: &Arc<dyn Device>, l: f64) {
    use super::device::Arg;
    use crate::geom::metric::{Metric, Open, Periodic};
    let mut r = Lcg(31);
    let cases = 4000;
    let h = l / 2.0;
    // Coordinates on a coarse grid (exact halves of the box appear) and at random.
    let coord = |r: &mut Lcg, i: usize| match i % 3 {
        0 => (r.next() % 17) as f64 * l / 16.0,
        1 => h + (r.next() % 3) as f64 * l * 1e-7,
        _ => r.unit() * l,
    };
    let input: Vec<T> = (0..cases * 12).map(|i| T::from_f64(coord(&mut r, i).min(l * 0.999_999))).collect();
    let buf = DevBuf::from_slice(dev, &input).unwrap();
    for periodic in [false, true] {
        let p = Periodic::<T, D>::new(&[l; D]);
        let words = super::walk::metric_arg::<T, D>(periodic.then_some([l; D]));
        let out: DevBuf<T> = DevBuf::new(dev, 3 * cases).unwrap();
        let kernel =
            prims::instance::<T, D>(["zt_metric_probe_f32_2", "zt_metric_probe_f32_3", "zt_metric_probe_f64_2", "zt_metric_probe_f64_3"]).unwrap();
        // SAFETY: zt_metric_probe_*(in[12 n], n, metric, out[3 n]).
        unsafe { dev.launch("conformance", kernel, (cases as u32).div_ceil(256), &[buf.arg(), Arg::U32(cases as u32), words, out.arg()]).unwrap() };
        let got = out.to_vec().unwrap();
        for i in 0..cases {
            let c = &input[12 * i..12 * i + 12];
            let pt = |k: usize| -> [T; D] { std::array::from_fn(|d| c[3 * k + d]) };
            let (q, s, b0, b1) = (pt(0), pt(1), pt(2), pt(3));
            let lo = |a: &[T; D], b: &[T; D]| -> [T; D] { std::array::from_fn(|d| if a[d] < b[d] { a[d] } else { b[d] }) };
            let hi = |a: &[T; D], b: &[T; D]| -> [T; D] { std::array::from_fn(|d| if a[d] > b[d] { a[d] } else { b[d] }) };
            let want = if periodic {
                [
                    p.dist2(&q, &s),
                    p.box_min2(&lo(&q, &s), &hi(&q, &s), &lo(&b0, &b1), &hi(&b0, &b1)),
                    p.box_max2(&lo(&q, &s), &hi(&q, &s), &lo(&b0, &b1), &hi(&b0, &b1)),
                ]
            } else {
                let o = Open;
                [
                    o.dist2(&q, &s),
                    o.box_min2(&lo(&q, &s), &hi(&q, &s), &lo(&b0, &b1), &hi(&b0, &b1)),
                    o.box_max2(&lo(&q, &s), &hi(&q, &s), &lo(&b0, &b1), &hi(&b0, &b1)),
                ]
            };
            for j in 0..3 {
                assert_eq!(
                    got[3 * i + j].key_bits(),
                    want[j].key_bits(),
                    "{}: {} {D}D periodic {periodic}, case {i} output {j}: {:?} vs {:?}",
                    dev.describe(),
                    T::NAME,
                    got[3 * i + j],
                    want[j]
                );
            }
        }
    }
}

#[test]
fn metric_equals_the_cpu_metric() {
    for dev in devices() {
        for l in [1.0, 50.0, 3.0e4] {
            check_metric::<f64, 3>(&dev, l);
            check_metric::<f32, 3>(&dev, l);
            check_metric::<f64, 2>(&dev, l);
            check_metric::<f32, 2>(&dev, l);
        }
    }
}
