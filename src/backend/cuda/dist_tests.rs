//! The distribution layer's per-particle work on the device (`DistOps` for `Cuda`,
//! kernels/dist.cu) against the CPU's, operation by operation, bit for bit, on every device
//! the tests can reach: owners, histograms, rows by rank, the ranks near each point, column
//! gathers and scatters, the kNN ball queries and merges, and the FoF fragments and rows.

use std::marker::PhantomData;
use std::sync::Arc;

use super::backend::{Cuda, DevField, DevOut, FieldType};
use super::device::{DevBuf, Device};
use super::pipeline_tests::inputs;
use super::tests::devices;
use crate::backend::cpu::{Cpu, DisjointSlice};
use crate::backend::dist::{DistOps, GroupFields, MergeJob, MergeRows, Reach};
use crate::base::Elem;
use crate::base::{Timings, TreeParams};
use crate::geom::Real;
use crate::geom::decomp::Decomp;
use crate::geom::metric::{Open, Periodic};
use crate::geom::morton::{Quantizer, bits_per_dim};
use crate::input::{Bounds, Domain};

fn host<T: Elem>(b: &DevBuf<T>) -> Vec<T> {
    b.to_vec().unwrap()
}
fn dev<T: Elem>(d: &Arc<dyn Device>, v: &[T]) -> DevBuf<T> {
    DevBuf::from_slice(d, v).unwrap()
}
fn cols<T: Real, const D: usize>(pts: &[[f64; D]]) -> Vec<[T; D]> {
    pts.iter().map(|p| p.map(T::from_f64)).collect()
}
fn dev_cols<T: Real, const D: usize>(d: &Arc<dyn Device>, c: &[[T; D]]) -> DevBuf<[T; D]> {
    dev(d, c)
}
fn bits<T: Real>(v: &[T]) -> Vec<u64> {
    v.iter().map(|x| x.key_bits()).collect()
}

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A decomposition of `pts`' key space into `ranks` ranges at random splitters (some
/// empty ranges too).
fn decomp_of<const D: usize>(domain: &Domain<D>, pts: &[[f64; D]], ranks: usize, rng: &mut Rng) -> (Decomp<D>, Vec<u64>) {
    let mut b = Bounds::<D>::EMPTY;
    pts.iter().for_each(|p| b.include(p));
    let quant = Quantizer::new(domain, &b);
    let keys: Vec<u64> = pts.iter().map(|p| quant.key(p)).collect();
    let mut sorted = keys.clone();
    sorted.sort_unstable();
    let end: u128 = 1u128 << (D as u32 * bits_per_dim(D));
    let mut starts = vec![0u128];
    for _ in 1..ranks {
        let s = if sorted.is_empty() || rng.below(5) == 0 {
            rng.below(u64::MAX) as u128 % end
        } else {
            sorted[rng.below(sorted.len() as u64) as usize] as u128
        };
        starts.push(s);
    }
    starts.sort_unstable();
    starts.push(end);
    (Decomp::from_starts(quant, domain.box_lengths(), starts), keys)
}

/// Owners, rows by rank, histograms and near-rank pairs of `pts` in `domain`, for each
/// rank count and ball radius, CUDA against CPU.
fn owners_case<const D: usize>(cuda: &Cuda, domain: &Domain<D>, ranks_list: &[usize], reaches: &[f64], rng: &mut Rng) {
    let d = &cuda.dev;
    for (name, pts) in inputs::<D>(1.0) {
        let what = format!("{name}, D = {D}, {}", if domain.box_lengths().is_some() { "periodic" } else { "open" });
        for &ranks in ranks_list {
            let (decomp, keys) = decomp_of(domain, &pts, ranks, rng);
            let dk = dev(d, &keys);
            let owners = Cpu.key_owners(&keys, decomp.starts()).unwrap();
            assert_eq!(host(&cuda.key_owners(&dk, decomp.starts()).unwrap()), owners, "{what} {ranks}: owners");
            let (rows, counts) = Cpu.group_by_rank(&owners, ranks).unwrap();
            let (drows, dcounts) = cuda.group_by_rank(&dev(d, &owners), ranks).unwrap();
            assert_eq!((host(&drows), dcounts), (rows, counts), "{what} {ranks}: rows by rank");
            let shapes: Vec<(u128, u128, u32)> = decomp
                .starts()
                .windows(2)
                .filter(|w| w[1] > w[0])
                .map(|w| (w[0], w[1], (128 - (w[1] - w[0]).leading_zeros()).saturating_sub(8)))
                .collect();
            assert_eq!(cuda.key_histogram(&dk, &shapes, 256).unwrap(), Cpu.key_histogram(&keys, &shapes, 256).unwrap(), "{what}: histogram");
            // The ranks within each point's ball, fixed and per-row radii, f32 and f64.
            for &reach in reaches {
                let c = cols::<f64, D>(&pts);
                let dc = dev_cols(d, &c);
                for me in 0..ranks {
                    let want = Cpu.near_pairs(&decomp, me, &c, Some(&keys), Reach::Fixed(reach)).unwrap();
                    let got = cuda.near_pairs(&decomp, me, &dc, Some(&dk), Reach::Fixed(reach)).unwrap();
                    assert_eq!((host(&got.0), got.1), want, "{what} {ranks} ranks, radius {reach}, rank {me}");
                    let r2: Vec<f64> = (0..pts.len()).map(|i| (reach * (i % 3) as f64).powi(2)).collect();
                    let want = Cpu.near_pairs(&decomp, me, &c, None, Reach::Squared(&r2)).unwrap();
                    let got = cuda.near_pairs(&decomp, me, &dc, None, Reach::Squared(&dev(d, &r2))).unwrap();
                    assert_eq!((host(&got.0), got.1), want, "{what} {ranks} ranks, per-row radii {reach}, rank {me}");
                }
                let c32 = cols::<f32, D>(&pts);
                let r2: Vec<f32> = (0..pts.len()).map(|i| (reach as f32 * (i % 4) as f32).powi(2)).collect();
                let want = Cpu.near_pairs(&decomp, 0, &c32, None, Reach::Squared(&r2)).unwrap();
                let got = cuda.near_pairs(&decomp, 0, &dev_cols(d, &c32), None, Reach::Squared(&dev(d, &r2))).unwrap();
                assert_eq!((host(&got.0), got.1), want, "{what} f32 per-row radii {reach}");
            }
        }
    }
}

#[test]
fn owners_histograms_and_rows_by_rank_equal_the_cpu() {
    let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
    for d in devices() {
        let cuda = Cuda { dev: d.clone() };
        if super::emu::checked_kernels() {
            // Under the sanitizers and the interleaved schedule every kernel once, in each
            // dimension (its variants), is what counts; the cases below are for the values.
            owners_case::<3>(&cuda, &Domain::Periodic([1.0; 3]), &[3], &[0.05], &mut rng);
            owners_case::<2>(&cuda, &Domain::Open, &[3], &[0.05], &mut rng);
            continue;
        }
        owners_case::<3>(&cuda, &Domain::Periodic([1.0; 3]), &[1, 2, 3, 7], &[0.0, 1e-3, 0.05, 0.6], &mut rng);
        owners_case::<3>(&cuda, &Domain::Open, &[3, 7], &[1e-3, 0.05], &mut rng);
        owners_case::<2>(&cuda, &Domain::Periodic([1.0; 2]), &[3, 7], &[1e-3, 0.05], &mut rng);
        owners_case::<2>(&cuda, &Domain::Open, &[2, 5], &[1e-3, 0.3], &mut rng);
    }
}

/// What an exchange does with a column's rows: a landing column, row ranges copied on the
/// device, downloaded and uploaded; the same elements as on the CPU.
#[test]
fn row_ranges_equal_the_cpu() {
    for d in devices() {
        let cuda = Cuda { dev: d.clone() };
        let src: Vec<[f32; 3]> = (0..1000).map(|i| [i as f32, -(i as f32), 0.5 * i as f32]).collect();
        let ids: Vec<u64> = (0..777).map(|i| i * 3 + 1).collect();
        let (dsrc, dids) = (dev(&d, &src), dev(&d, &ids));
        for (from, to, len) in [(0usize, 0usize, 0usize), (0, 5, 1000 - 5), (123, 0, 400), (999, 999, 1)] {
            let len = len.min(1000 - from).min(1000 - to);
            let mut want: Vec<[f32; 3]> = Cpu.landing(1000).unwrap();
            want.fill([7.0; 3]);
            Cpu.copy_range(&src, from, &mut want, to, len).unwrap();
            let mut got: DevBuf<[f32; 3]> = cuda.landing(1000).unwrap();
            cuda.upload_range(&mut got, 0, &vec![[7.0f32; 3]; 1000]).unwrap();
            cuda.copy_range(&dsrc, from, &mut got, to, len).unwrap();
            assert_eq!(host(&got), want, "copy {from} -> {to}, {len} rows");
            let mut part = vec![[0.0f32; 3]; len];
            cuda.download_range(&got, to, &mut part).unwrap();
            assert_eq!(part, src[from..from + len], "download {to}, {len} rows");
        }
        let mut l: DevBuf<u64> = cuda.landing(777).unwrap();
        cuda.upload_range(&mut l, 0, &ids[..300]).unwrap();
        cuda.copy_range(&dids, 300, &mut l, 300, 477).unwrap();
        assert_eq!(host(&l), ids, "upload then copy");
        assert!(cuda.host_slice(&l).is_none() && cuda.device_ptr(&l).unwrap().is_some());
        assert!(Cpu.host_slice(&ids).is_some() && Cpu.device_ptr(&ids).unwrap().is_none());
    }
}

#[test]
fn column_moves_equal_the_cpu() {
    let mut rng = Rng(77);
    for d in devices() {
        let cuda = Cuda { dev: d.clone() };
        for n in [0usize, 1, 7, 1000] {
            let v8: Vec<u64> = (0..n * 3).map(|_| rng.next()).collect();
            let v4: Vec<f32> = (0..n * 3).map(|_| rng.next() as f32 / 7.0).collect();
            let rows: Vec<u32> = (0..n as u32).rev().filter(|r| r % 3 != 1).collect();
            let dr = dev(&d, &rows);
            for w in [1usize, 3] {
                let got = host(&cuda.gather(&dev(&d, &v8), &dr, w).unwrap());
                assert_eq!(got, Cpu.gather(&v8, &rows, w).unwrap(), "gather8 n {n} w {w}");
                let got = host(&cuda.gather(&dev(&d, &v4), &dr, w).unwrap());
                assert_eq!(bits(&got), bits(&Cpu.gather(&v4, &rows, w).unwrap()), "gather4 n {n} w {w}");
                // Scatter into an output (f64, and f32 widened into f64 as the C API does).
                let vals: Vec<f32> = (0..rows.len() * w).map(|i| i as f32 * 0.5).collect();
                let mut want = vec![0.0f32; n * w];
                Cpu.scatter_out(&DisjointSlice::new(&mut want), &rows, &vals, w).unwrap();
                let out64: DevBuf<f64> = DevBuf::zeros(&d, n * w).unwrap();
                // SAFETY: `out64` holds n * w doubles.
                let wide = unsafe { DevOut::<f32>::new_wide(out64.ptr(), n * w) };
                cuda.scatter_out(&wide, &rows_dev(&d, &rows), &dev(&d, &vals), w).unwrap();
                assert_eq!(host(&out64), want.iter().map(|&x| x as f64).collect::<Vec<_>>(), "scatter wide n {n} w {w}");
            }
            assert_eq!(host(&cuda.offset_rows(&dr, 1 << 40).unwrap()), Cpu.offset_rows(&rows, 1 << 40).unwrap());
            let a: Vec<u32> = (0..n as u32).collect();
            assert_eq!(host(&cuda.append(dev(&d, &a), &dr).unwrap()), Cpu.append(a.clone(), &rows).unwrap());
            let r2: Vec<f64> = (0..n).map(|i| i as f64 * 1.7).collect();
            assert_eq!(bits(&host(&cuda.sqrt(&dev(&d, &r2)).unwrap())), bits(&Cpu.sqrt(&r2).unwrap()));
            let seg = [n / 3, n / 3, n - 2 * (n / 3)];
            let c: Vec<u32> = (0..n as u32).map(|i| i % 5).collect();
            assert_eq!(cuda.segment_sums(&dev(&d, &c), &seg).unwrap(), Cpu.segment_sums(&c, &seg).unwrap());
            assert_eq!(host(&cuda.filled(n, -3i64).unwrap()), vec![-3i64; n]);
            assert_eq!(host(&cuda.to_i64(&dev(&d, &v8[..n])).unwrap()), Cpu.to_i64(&v8[..n].to_vec()).unwrap());
            assert_eq!(host(&cuda.distinct_rows(&dev(&d, &[3u32, 1, 3, 0]), 5).unwrap()), vec![0, 1, 3]);
            // Ids of every type at input rows.
            let ids: Vec<i32> = (0..n as i32).map(|i| i * 7 - 3).collect();
            let di = dev(&d, &ids.iter().map(|&x| x as u32).collect::<Vec<u32>>());
            let f = DevField { a: super::prims::Strided { data: di.ptr(), stride: 4 }, ty: FieldType::I32, n, _borrow: PhantomData };
            let want: Vec<i64> = rows.iter().map(|&r| ids[r as usize] as i64).collect();
            assert_eq!(host(&cuda.gather_ids(f, &dr).unwrap()), want);
            // Valid prefixes of index rows, compacted.
            let k = 4;
            let idx: Vec<i64> = (0..n * k).map(|i| if (i % k) < (i / k) % (k + 1) { i as i64 } else { -1 }).collect();
            let counts = Cpu.row_counts(&idx, k).unwrap();
            let dcounts = cuda.row_counts(&dev(&d, &idx), k).unwrap();
            assert_eq!(host(&dcounts), counts);
            assert_eq!(host(&cuda.compact_rows(&dev(&d, &idx), &dcounts, k).unwrap()), Cpu.compact_rows(&idx, &counts, k).unwrap());
            let pos_idx: Vec<i64> = (0..n as i64).collect();
            assert_eq!(host(&cuda.index_rows(&dev(&d, &pos_idx)).unwrap()), Cpu.index_rows(&pos_idx).unwrap());
            // Local indices made global, but for the skipped rows.
            let gidx: Vec<u64> = (0..n as u64 * k as u64).map(|i| 1000 + 3 * i).collect();
            let skip: Vec<u32> = (0..n as u32).filter(|r| r % 4 == 2).collect();
            let mut want = idx.clone();
            Cpu.globalize_rows(&mut want, k, &gidx, &skip).unwrap();
            let mut got = dev(&d, &idx);
            cuda.globalize_rows(&mut got, k, &dev(&d, &gidx), &dev(&d, &skip)).unwrap();
            assert_eq!(host(&got), want);
            let sorted: Vec<u64> = (0..n as u64).map(|i| i * 3 + 1).collect();
            let values: Vec<u64> = (0..n as u64).rev().map(|i| i * 3 + 1).collect();
            assert_eq!(host(&cuda.find_rows(&dev(&d, &sorted), &dev(&d, &values)).unwrap()), Cpu.find_rows(&sorted, &values).unwrap());
        }
    }
}

fn rows_dev(d: &Arc<dyn Device>, rows: &[u32]) -> DevBuf<u32> {
    dev(d, rows)
}

/// Ball queries from shipped positions against a tree, and the merge of the answers: the
/// device's against the CPU's on the same points.
fn ball_and_merge<T: Real, const D: usize>(d: &Arc<dyn Device>, name: &str, domain: &Domain<D>, pts: &[[f64; D]]) {
    let cuda = Cuda { dev: d.clone() };
    let params = TreeParams { leaf_size: 8, ..TreeParams::default() };
    let c = cols::<T, D>(pts);
    let dc = dev_cols(d, &c);
    let mut t = Timings::default();
    let zs = crate::pipeline::prepare(&Cpu, domain, &c, None::<&Vec<[T; D]>>, &params, &mut t).unwrap();
    let dzs = crate::pipeline::prepare(&cuda, domain, &dc, None::<&DevBuf<[T; D]>>, &params, &mut t).unwrap();
    let n = pts.len();
    // Queries: the points themselves, shifted a little, with radii of several sizes.
    let q: Vec<[T; D]> = c.clone();
    let r2: Vec<T> = (0..n).map(|i| T::from_f64([0.0, 1e-4, 2e-3, 0.05, f64::INFINITY][i % 5])).collect();
    let first: Vec<u32> = (0..n as u32).collect();
    for k in [1usize, 3, 16, 40] {
        for own in [false, true] {
            let f = own.then_some(&first);
            let (wi, wd) = match domain {
                Domain::Open => Cpu.ball_query(&Open, &zs, &q, &r2, f, k).unwrap(),
                Domain::Periodic(l) => Cpu.ball_query(&Periodic::<T, D>::new(l), &zs, &q, &r2, f, k).unwrap(),
            };
            let (dq, dr2, df) = (dev_cols(d, &q), dev(d, &r2), dev(d, &first));
            let dfo = own.then_some(&df);
            let (gi, gd) = match domain {
                Domain::Open => cuda.ball_query(&Open, &dzs, &dq, &dr2, dfo, k).unwrap(),
                Domain::Periodic(l) => cuda.ball_query(&Periodic::<T, D>::new(l), &dzs, &dq, &dr2, dfo, k).unwrap(),
            };
            assert_eq!(host(&gi), wi, "{name} {} k {k} own {own}: ball indices", T::NAME);
            assert_eq!(bits(&host(&gd)), bits(&wd), "{name} {} k {k}: ball distances", T::NAME);
        }
        // The merge: every third query a boundary query with two "remote" answer rows
        // (made of the local answers' candidates, with other global indices).
        let boundary: Vec<u32> = (0..n as u32).filter(|q| q % 3 == 0).collect();
        let (own_idx, own_d2) = Cpu.ball_query(&Open, &zs, &q, &r2, None, k).unwrap();
        let own_idx = Cpu.gather(&own_idx, &boundary, k).unwrap();
        let own_d2 = Cpu.gather(&own_d2, &boundary, k).unwrap();
        let pair_rows: Vec<u32> = boundary.iter().flat_map(|&b| [b, b]).collect::<Vec<_>>();
        let mut pair_rows = pair_rows;
        pair_rows.sort_by_key(|&r| (r % 2, r));
        let reply_counts: Vec<u32> = (0..pair_rows.len() as u32).map(|j| j % (k as u32 + 1)).collect();
        let total: usize = reply_counts.iter().map(|&c| c as usize).sum();
        let reply_d2: Vec<T> = (0..total).map(|e| T::from_f64([0.0, 1e-3, 1e-3, 0.01][e % 4])).collect();
        let reply_gidx: Vec<u64> = (0..total as u64).map(|e| 1_000_000 + (e * 7919) % 1000).collect();
        let reply_mass: Vec<f64> = (0..total).map(|e| 1.0 + e as f64).collect();
        let gidx: Vec<u64> = (0..n as u64).map(|i| 2 * i).collect();
        let mass: Vec<f64> = (0..n).map(|i| 0.5 + i as f64).collect();
        let scalar: Vec<f64> = (0..n).map(|i| if i % 7 == 0 { -0.0 } else { i as f64 - 3.0 }).collect();
        for self_query in [false, true] {
            let job = MergeJob::<Cpu, T> {
                k,
                boundary: &boundary,
                own_idx: &own_idx,
                own_d2: &own_d2,
                pair_rows: &pair_rows,
                reply_counts: &reply_counts,
                reply_d2: &reply_d2,
                reply_gidx: &reply_gidx,
                reply_mass: Some(&reply_mass),
                reply_scalar: Some(&reply_mass),
                gidx: &gidx,
                mass: Some(&mass),
                scalar: Some(&scalar),
                self_query,
            };
            let (mut kth, mut dens, mut sm, mut li, mut ld) = (vec![T::ZERO; n], vec![0.0; n], vec![0.0; n], vec![0i64; n * k], vec![T::ZERO; n * k]);
            Cpu.knn_merge::<T, D>(
                &job,
                MergeRows { kth_d2: &mut kth, density: Some(&mut dens), scalar_mean: Some(&mut sm), idx: Some(&mut li), d2: Some(&mut ld) },
            )
            .unwrap();
            let bufs = (dev(d, &boundary), dev(d, &own_idx), dev(d, &own_d2), dev(d, &pair_rows), dev(d, &reply_counts));
            let rbufs = (dev(d, &reply_d2), dev(d, &reply_gidx), dev(d, &reply_mass), dev(d, &gidx), dev(d, &mass), dev(d, &scalar));
            let djob = MergeJob::<Cuda, T> {
                k,
                boundary: &bufs.0,
                own_idx: &bufs.1,
                own_d2: &bufs.2,
                pair_rows: &bufs.3,
                reply_counts: &bufs.4,
                reply_d2: &rbufs.0,
                reply_gidx: &rbufs.1,
                reply_mass: Some(&rbufs.2),
                reply_scalar: Some(&rbufs.2),
                gidx: &rbufs.3,
                mass: Some(&rbufs.4),
                scalar: Some(&rbufs.5),
                self_query,
            };
            let zero_t = vec![T::ZERO; n];
            let (mut gk, mut gdn, mut gsm, mut gli, mut gld) =
                (dev(d, &zero_t), dev(d, &vec![0.0; n]), dev(d, &vec![0.0; n]), dev(d, &vec![0i64; n * k]), dev(d, &vec![T::ZERO; n * k]));
            cuda.knn_merge::<T, D>(
                &djob,
                MergeRows { kth_d2: &mut gk, density: Some(&mut gdn), scalar_mean: Some(&mut gsm), idx: Some(&mut gli), d2: Some(&mut gld) },
            )
            .unwrap();
            let what = format!("{name} {} k {k} self {self_query}: merge", T::NAME);
            assert_eq!(bits(&host(&gk)), bits(&kth), "{what} kth");
            assert_eq!(host(&gli), li, "{what} lists");
            assert_eq!(bits(&host(&gld)), bits(&ld), "{what} list distances");
            assert_eq!(bits(&host(&gdn)), bits(&dens), "{what} density");
            assert_eq!(bits(&host(&gsm)), bits(&sm), "{what} scalar mean");
        }
    }
}

#[test]
fn ball_queries_and_merges_equal_the_cpu() {
    for d in devices() {
        for (name, pts) in inputs::<3>(1.0).into_iter().take(5) {
            let pts = &pts[..pts.len().min(600)];
            ball_and_merge::<f64, 3>(&d, name, &Domain::Periodic([1.0; 3]), pts);
            ball_and_merge::<f32, 3>(&d, name, &Domain::Open, pts);
        }
        for (name, pts) in inputs::<2>(1.0).into_iter().take(3) {
            ball_and_merge::<f64, 2>(&d, name, &Domain::Open, &pts[..pts.len().min(400)]);
        }
    }
}

#[test]
fn fragments_and_group_rows_equal_the_cpu() {
    for d in devices() {
        let cuda = Cuda { dev: d.clone() };
        for (name, pts) in inputs::<3>(1.0) {
            let n = pts.len();
            let c = cols::<f64, 3>(&pts);
            let mut t = Timings::default();
            let domain = Domain::Periodic([1.0; 3]);
            let (zs, roots, _) = crate::pipeline::fof::link(&Cpu, &domain, &c, None, 0.03, &TreeParams::default(), &mut t).unwrap();
            // The first 70% of the rows are owned, the rest ghosts.
            let n_own = n * 7 / 10;
            let want = Cpu.fof_fragments(&zs.src_orig, &roots, n_own).unwrap();
            let got = cuda.fof_fragments(&dev(&d, &zs.src_orig), &dev(&d, &roots), n_own).unwrap();
            assert_eq!((got.n_frag, host(&got.frag_of)), (want.n_frag, want.frag_of.clone()), "{name}: fragments");
            assert_eq!((got.edge_ghost, got.edge_frag), (want.edge_ghost, want.edge_frag), "{name}: edges");
            let tag: Vec<i64> = (0..n_own as i64).map(|i| (i * 7919) % 1000 - 500).collect();
            let (count, mtag) = Cpu.fragment_sums(&want.frag_of, &tag, want.n_frag).unwrap();
            let (dcount, dtag) = cuda.fragment_sums(&got.frag_of, &dev(&d, &tag), want.n_frag).unwrap();
            assert_eq!((host(&dcount), host(&dtag)), (count.clone(), mtag.clone()), "{name}: fragment sums");
            for min in [1u64, 2, 20] {
                assert_eq!(host(&cuda.fragment_labels(&dcount, &dtag, min).unwrap()), Cpu.fragment_labels(&count, &mtag, min).unwrap());
                let kept = Cpu.kept_fragments(&count, min).unwrap();
                assert_eq!(cuda.kept_fragments(&dcount, min).unwrap(), kept, "{name}: kept");
                let sel: Vec<u32> = kept.iter().copied().filter(|f| f % 3 != 0).collect();
                let group_of = Cpu.select_groups(&want.frag_of, want.n_frag, &sel).unwrap();
                let dgroup_of = cuda.select_groups(&got.frag_of, want.n_frag, &sel).unwrap();
                assert_eq!(host(&dgroup_of), group_of, "{name}: groups");
                let (offsets, members) = Cpu.group_members(&group_of, sel.len()).unwrap();
                let (doffsets, dmembers) = cuda.group_members(&dgroup_of, sel.len()).unwrap();
                assert_eq!((doffsets.clone(), host(&dmembers)), (offsets.clone(), members.clone()), "{name}: members");
                let vel: [Vec<f64>; 3] = std::array::from_fn(|k| (0..n).map(|i| ((i * (k + 3)) % 17) as f64 - 8.0).collect());
                let dv: [DevBuf<f64>; 3] = std::array::from_fn(|k| dev(&d, &vel[k]));
                let mass: Vec<f64> = (0..n).map(|i| 1.0 + (i % 5) as f64).collect();
                let gtag: Vec<i64> = (0..n as i64).map(|i| 5000 - i).collect();
                let f = GroupFields::<Cpu, f64, 3> {
                    pos: &c,
                    vel: Some(&vel),
                    mass: Some(&mass),
                    particle_mass: 1.0,
                    tag: &gtag,
                    box_len: Some([1.0; 3]),
                };
                let rows = Cpu.group_rows(&members, &offsets, &f).unwrap();
                let (dc, dm, dt) = (dev_cols(&d, &c), dev(&d, &mass), dev(&d, &gtag));
                let df =
                    GroupFields::<Cuda, f64, 3> { pos: &dc, vel: Some(&dv), mass: Some(&dm), particle_mass: 1.0, tag: &dt, box_len: Some([1.0; 3]) };
                assert_eq!(cuda.group_rows(&dmembers, &doffsets, &df).unwrap(), rows, "{name}: rows");
            }
            let at: Vec<u32> = match want.n_frag {
                0 => vec![],
                1 => vec![0],
                f => vec![0, f as u32 - 1],
            };
            let vals = &[77u64, 99][..at.len()];
            let mut hc = count.clone();
            Cpu.scatter_host(&mut hc, &at, vals).unwrap();
            let mut dc = dcount;
            cuda.scatter_host(&mut dc, &at, vals).unwrap();
            assert_eq!(host(&dc), hc);
        }
    }
}
