//! kNN API: bad input, reductions, output orders, thread-count independence, and contexts
//! on concurrent threads. (The cross-check against scipy's cKDTree is in tests/tools.)

use crate::common::*;
use ztree::{
    Config, Context, Domain, Error, FofFields, FofParams, KnnOutput, KnnParams, LinkingLength, OutputOrder, SoaPoints, SourceFields, TreeParams,
};

fn ctx(threads: usize) -> Context {
    Context::new(Config { threads, tree: TreeParams { leaf_size: 8, top_target: 32, ..Default::default() } }).unwrap()
}

#[test]
fn bad_input_is_an_error_not_a_panic() {
    let c = ctx(2);
    let good: Vec<[f64; 3]> = vec![[0.1, 0.2, 0.3], [0.5, 0.5, 0.5], [0.9, 0.1, 0.4]];
    let k1 = KnnParams::new(1);
    let none = SourceFields::default();
    let mut nan = good.clone();
    nan[1][2] = f64::NAN;
    let run = |src: &Vec<[f64; 3]>, dom: Domain<3>, k: usize| {
        let mut kth = vec![0.0f64; src.len()];
        c.knn_self(&dom, src, &none, &KnnParams::new(k), &mut KnnOutput { kth_distance: Some(&mut kth), ..Default::default() })
    };
    assert!(matches!(run(&nan, Domain::Open, 1), Err(Error::NonFinite { index: 1, dim: 2, .. })));
    let mut inf = good.clone();
    inf[2][0] = f64::NEG_INFINITY;
    assert!(matches!(run(&inf, Domain::Open, 1), Err(Error::NonFinite { index: 2, dim: 0, .. })));
    let mut out_of_box = good.clone();
    out_of_box[0][1] = 1.0; // the box is [0, 1): 1.0 is outside
    assert!(matches!(run(&out_of_box, Domain::periodic_cube(1.0), 1), Err(Error::OutsideBox { index: 0, dim: 1, .. })));
    out_of_box[0][1] = -1e-9;
    assert!(matches!(run(&out_of_box, Domain::periodic_cube(1.0), 1), Err(Error::OutsideBox { .. })));
    assert!(matches!(run(&good, Domain::Open, 0), Err(Error::InvalidK(0))));
    assert!(matches!(run(&good, Domain::Periodic([1.0, 0.0, 1.0]), 1), Err(Error::InvalidBox { dim: 1, .. })));
    assert!(matches!(run(&good, Domain::Periodic([1.0, 1.0, f64::NAN]), 1), Err(Error::InvalidBox { dim: 2, .. })));
    assert!(matches!(run(&good, Domain::Periodic([-1.0, 1.0, 1.0]), 1), Err(Error::InvalidBox { dim: 0, .. })));
    // Needle-shaped periodic boxes are refused (their cells would be needles); 100:1 is fine.
    assert!(matches!(run(&good, Domain::Periodic([1.0, 1.0, 100.5]), 1), Err(Error::BoxAspect { .. })));
    assert!(run(&good, Domain::Periodic([1.0, 1.0, 100.0]), 1).is_ok());
    assert!(matches!(run(&good, Domain::Periodic([1e150, 1.0, 1.0]), 1), Err(Error::BoxAspect { .. })));
    let empty: Vec<[f64; 3]> = Vec::new();
    assert!(matches!(run(&empty, Domain::Open, 1), Err(Error::NoSources)));
    // Queries with NaN are reported as queries.
    let mut q = good.clone();
    q[0][0] = f64::NAN;
    let mut kth = vec![0.0; 3];
    let r = c.knn(&Domain::Open, &good, &q, &none, &k1, &mut KnnOutput { kth_distance: Some(&mut kth), ..Default::default() });
    match r {
        Err(e @ Error::NonFinite { what: "queries", index: 0, .. }) => assert!(e.to_string().contains("queries")),
        other => panic!("unexpected {other:?}"),
    }
    // Output arrays of the wrong size, untouched.
    let mut short = vec![7i64; 5];
    let r = c.knn_self(&Domain::Open, &good, &none, &KnnParams::new(2), &mut KnnOutput { indices: Some(&mut short), ..Default::default() });
    assert!(matches!(r, Err(Error::LengthMismatch { got: 5, expected: 6, .. })));
    assert_eq!(short, vec![7; 5]);
    // Mismatched struct-of-arrays lengths.
    let (x, y, z) = (vec![0.1f32; 4], vec![0.1f32; 4], vec![0.1f32; 3]);
    assert!(matches!(SoaPoints::new([&x, &y, &z]), Err(Error::LengthMismatch { .. })));
    // Masses of the wrong length or not finite.
    let masses = vec![1.0f64; 2];
    let f = SourceFields { masses: Some(&masses), scalar: None };
    let mut dens = vec![0.0; 3];
    let r = c.knn_self(&Domain::Open, &good, &f, &k1, &mut KnnOutput { density: Some(&mut dens), ..Default::default() });
    assert!(matches!(r, Err(Error::LengthMismatch { .. })));
    let masses = vec![1.0f64, f64::NAN, 1.0];
    let f = SourceFields { masses: Some(&masses), scalar: None };
    let r = c.knn_self(&Domain::Open, &good, &f, &k1, &mut KnnOutput { density: Some(&mut dens), ..Default::default() });
    assert!(matches!(r, Err(Error::NonFiniteValue { index: 1, .. })));
    // Scalar mean without a scalar.
    let mut sm = vec![0.0; 3];
    let r = c.knn_self(&Domain::Open, &good, &none, &k1, &mut KnnOutput { scalar_mean: Some(&mut sm), ..Default::default() });
    assert!(matches!(r, Err(Error::InvalidParameter { .. })));
    // Bad tree parameters.
    assert!(Context::new(Config { threads: 1, tree: TreeParams { leaf_size: (1 << 20) + 1, ..Default::default() } }).is_err());
    assert!(Context::new(Config { threads: 1, tree: TreeParams { leaf_size: 0, ..Default::default() } }).is_ok(), "0: automatic");
    assert!(Context::new(Config { threads: 1, tree: TreeParams { coarsening: 1, ..Default::default() } }).is_err());
    // Errors have readable messages.
    assert!(Error::OutsideBox { what: "sources", index: 3, dim: 1, value: 2.0, length: 1.0 }.to_string().contains("outside the periodic box"));
}

#[test]
fn zero_queries_is_fine() {
    let c = ctx(1);
    let src: Vec<[f32; 2]> = vec![[0.5, 0.5]];
    let q: Vec<[f32; 2]> = Vec::new();
    let st = c.knn(&Domain::Open, &src, &q, &SourceFields::default(), &KnnParams::new(3), &mut KnnOutput::default()).unwrap();
    assert_eq!(st.queries, 0);
}

#[test]
fn reductions_match_the_oracle() {
    let c = ctx(2);
    let mut rng = Rng::new(77);
    let l = [1.0, 1.0, 1.0];
    let pts: Vec<[f64; 3]> = points(Shape::Clustered, 3000, l, &mut rng);
    let masses: Vec<f64> = (0..pts.len()).map(|i| 1.0 + (i % 7) as f64).collect();
    let scalar: Vec<f32> = (0..pts.len()).map(|i| (i as f32).sin()).collect();
    for &k in &[1usize, 8, 33] {
        let n = pts.len();
        let (mut kth, mut dens, mut dens_m, mut mean) = (vec![0.0f64; n], vec![0.0; n], vec![0.0; n], vec![0.0; n]);
        let fields = SourceFields { masses: None, scalar: Some(&scalar) };
        c.knn_self(
            &Domain::Periodic(l),
            &pts,
            &fields,
            &KnnParams::new(k),
            &mut KnnOutput { kth_distance: Some(&mut kth), density: Some(&mut dens), scalar_mean: Some(&mut mean), ..Default::default() },
        )
        .unwrap();
        let fm = SourceFields { masses: Some(&masses), scalar: None };
        c.knn_self(&Domain::Periodic(l), &pts, &fm, &KnnParams::new(k), &mut KnnOutput { density: Some(&mut dens_m), ..Default::default() }).unwrap();
        let (idx, dist) = brute_knn(&pts, None, k, Some(l));
        for q in 0..n {
            let row = &idx[q * k..(q + 1) * k];
            let r = dist[q * k + k - 1];
            assert_eq!(kth[q].to_bits(), r.to_bits(), "kth of {q}");
            let vol = 4.0 / 3.0 * std::f64::consts::PI * r * r * r;
            assert_eq!(dens[q], k as f64 / vol, "density of {q}");
            let msum: f64 = row.iter().map(|&i| masses[i as usize]).sum();
            let want = msum / vol;
            assert!(dens_m[q] == want || (dens_m[q] - want).abs() <= 1e-12 * want.abs(), "mass density of {q}: {} vs {want}", dens_m[q]);
            let smean: f64 = row.iter().map(|&i| scalar[i as usize] as f64).sum::<f64>() / k as f64;
            assert!((mean[q] - smean).abs() <= 1e-12, "scalar mean of {q}");
        }
    }
}

#[test]
fn zorder_output_with_permutation() {
    let c = ctx(2);
    let mut rng = Rng::new(3);
    let pts: Vec<[f32; 3]> = points(Shape::Uniform, 2000, [1.0; 3], &mut rng);
    let k = 5;
    let n = pts.len();
    let (mut zi, mut zd, mut perm) = (vec![0i64; n * k], vec![0.0f32; n * k], vec![0i64; n]);
    c.knn_self(
        &Domain::Open,
        &pts,
        &SourceFields::default(),
        &KnnParams::new(k),
        &mut KnnOutput {
            indices: Some(&mut zi),
            distances: Some(&mut zd),
            order: OutputOrder::ZOrder,
            permutation: Some(&mut perm),
            ..Default::default()
        },
    )
    .unwrap();
    let lists = c.knn_lists(&Domain::Open, &pts, None, k).unwrap();
    let mut seen = vec![false; n];
    for r in 0..n {
        let q = perm[r] as usize;
        assert!(!seen[q]);
        seen[q] = true;
        assert_eq!(&zi[r * k..(r + 1) * k], &lists.indices[q * k..(q + 1) * k]);
        assert_eq!(&zd[r * k..(r + 1) * k], &lists.distances[q * k..(q + 1) * k]);
    }
}

/// Rows in input order at k = 1 over enough queries (>= 2^16) are written in z-order and
/// moved afterwards through the spent positions, where their lanes fit. Every output
/// array equals the z-order call's rows put in place by its permutation, and sampled
/// queries equal brute force: f64 and f32, self and separate queries, clustered points
/// and points with copies, for sets of arrays that are moved and sets that are not (no lanes
/// left for them: written in place).
#[test]
fn moved_rows_equal_zorder_rows_and_brute_force() {
    // Which arrays a call asks for: lists (indices and distances), k-th distance,
    // density, scalar mean.
    type Asked = (bool, bool, bool, bool);
    fn check<T: ztree::Real>(c: &Context, (shape, duplicated): (Shape, bool), separate: bool, asked: Asked, moved: bool, rng: &mut Rng) {
        let n = 70_000;
        let mut pts: Vec<[T; 3]> = points(shape, n, [1.0; 3], rng);
        if duplicated {
            // Every third point a copy of an earlier one (pairs and small runs of
            // identical points; ties broken by input index).
            for i in (2..n).step_by(3) {
                pts[i] = pts[rng.below(i)];
            }
        }
        let qry: Vec<[T; 3]> = points(Shape::Clustered, n + 17, [1.0; 3], rng);
        let nq = if separate { qry.len() } else { n };
        let masses: Vec<f64> = (0..n).map(|i| 1.0 + (i % 5) as f64).collect();
        let scalar: Vec<f32> = (0..n).map(|i| (i as f32 * 0.37).cos()).collect();
        let fields = SourceFields { masses: Some(&masses), scalar: Some(&scalar) };
        let (lists, kth, dens, mean) = asked;
        let run = |order: OutputOrder| {
            let (mut i, mut d, mut k, mut de, mut m, mut perm) =
                (vec![7i64; nq], vec![T::from_f64(7.0); nq], vec![T::from_f64(7.0); nq], vec![7.0f64; nq], vec![7.0f64; nq], vec![7i64; nq]);
            let mut out = KnnOutput {
                indices: lists.then_some(&mut i[..]),
                distances: lists.then_some(&mut d[..]),
                kth_distance: kth.then_some(&mut k[..]),
                density: dens.then_some(&mut de[..]),
                scalar_mean: mean.then_some(&mut m[..]),
                order,
                permutation: Some(&mut perm),
            };
            let st = if separate {
                c.knn(&Domain::Open, &pts, &qry, &fields, &KnnParams::new(1), &mut out).unwrap()
            } else {
                c.knn_self(&Domain::Open, &pts, &fields, &KnnParams::new(1), &mut out).unwrap()
            };
            let was_moved = st.timings.stages.iter().any(|s| s.0 == "rows");
            let b = |v: &[T]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<u64>>();
            let f = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
            ((i, b(&d), b(&k), f(&de), f(&m)), perm, was_moved)
        };
        let what = format!("{shape:?}, duplicated {duplicated}, {}, separate {separate}, asked {asked:?}", std::any::type_name::<T>());
        let (got, perm, was_moved) = run(OutputOrder::Input);
        assert_eq!(was_moved, moved, "{what}: moved");
        assert!(perm.iter().enumerate().all(|(r, &p)| p == r as i64), "{what}: permutation");
        let (z, zperm, z_moved) = run(OutputOrder::ZOrder);
        assert!(!z_moved);
        for r in 0..nq {
            let q = zperm[r] as usize;
            let g = (got.0[q], got.1[q], got.2[q], got.3[q], got.4[q]);
            let w = (z.0[r], z.1[r], z.2[r], z.3[r], z.4[r]);
            assert_eq!(g, w, "{what}: row {r} (query {q})");
        }
        if lists {
            let mut sample: Vec<usize> = (0..300).map(|_| rng.below(nq)).collect();
            sample.extend([0, nq - 1]);
            let qs: Vec<[T; 3]> = sample.iter().map(|&q| if separate { qry[q] } else { pts[q] }).collect();
            let (bi, bd) = brute_knn(&pts, Some(&qs), 1, None);
            for (j, &q) in sample.iter().enumerate() {
                // A self-query's first neighbour is the query itself, duplicates or not.
                let want = if separate { (bi[j], bd[j].to_f64().to_bits()) } else { (q as i64, 0f64.to_bits()) };
                assert_eq!((got.0[q], got.1[q]), want, "{what}: query {q} against brute force");
            }
        }
    }
    let c = ctx(2);
    let mut rng = Rng::new(2026);
    for shape in [(Shape::Clustered, false), (Shape::Uniform, true)] {
        for separate in [false, true] {
            // f64 columns: lists (+ k-th distance), or k-th distance and density, are moved;
            // all four sets are too many lanes.
            check::<f64>(&c, shape, separate, (true, false, false, false), true, &mut rng);
            check::<f64>(&c, shape, separate, (true, true, false, false), true, &mut rng);
            check::<f64>(&c, shape, separate, (false, true, true, false), true, &mut rng);
            check::<f64>(&c, shape, separate, (true, true, true, true), false, &mut rng);
            // f32 columns: lists are moved; a density (8 bytes) is not.
            check::<f32>(&c, shape, separate, (true, false, false, false), true, &mut rng);
            check::<f32>(&c, shape, separate, (false, true, false, false), true, &mut rng);
            check::<f32>(&c, shape, separate, (false, true, true, false), false, &mut rng);
        }
    }
}

#[test]
fn results_are_bit_identical_for_1_2_4_threads() {
    let mut rng = Rng::new(11);
    for shape in [Shape::Clustered, Shape::Lattice, Shape::Duplicates] {
        let pts: Vec<[f64; 3]> = points(shape, 30_000, [1.0; 3], &mut rng);
        let q: Vec<[f64; 3]> = points(Shape::Uniform, 5_000, [1.0; 3], &mut rng);
        let runs: Vec<_> = [1, 2, 4]
            .iter()
            .map(|&t| {
                let c = ctx(t);
                let a = c.knn_lists(&Domain::periodic_cube(1.0), &pts, None, 12).unwrap();
                let b = c.knn_lists(&Domain::Open, &pts, Some(&q), 7).unwrap();
                (
                    a.indices,
                    a.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>(),
                    b.indices,
                    b.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>(),
                )
            })
            .collect();
        assert!(runs.windows(2).all(|w| w[0] == w[1]), "{shape:?}: thread counts disagree");
    }
}

#[test]
fn soa_input_equals_aos_input() {
    let c = ctx(2);
    let mut rng = Rng::new(9);
    let pts: Vec<[f64; 3]> = points(Shape::Clustered, 5000, [1.0; 3], &mut rng);
    let (x, y, z): (Vec<f64>, Vec<f64>, Vec<f64>) =
        (pts.iter().map(|p| p[0]).collect(), pts.iter().map(|p| p[1]).collect(), pts.iter().map(|p| p[2]).collect());
    let soa = SoaPoints::new([&x, &y, &z]).unwrap();
    let a = c.knn_lists(&Domain::Open, &pts, None, 9).unwrap();
    let b = c.knn_lists(&Domain::Open, &soa, None, 9).unwrap();
    assert_eq!(a.indices, b.indices);
    assert_eq!(a.distances, b.distances);
}

/// Contexts on several threads at once (each context used by one thread, as the API asks)
/// give what one context alone gives: kNN lists through both selections (k = 12 sorted as
/// they come, k = 40 buffered) and FoF with its catalogue, each call repeated.
#[test]
fn contexts_on_concurrent_threads_equal_one_context() {
    let mut rng = Rng::new(21);
    let pts: Vec<[f64; 3]> = points(Shape::Clustered, 20_000, [1.0; 3], &mut rng);
    let q: Vec<[f64; 3]> = points(Shape::Uniform, 3_000, [1.0; 3], &mut rng);
    let fof = FofParams { linking_length: LinkingLength::Absolute(0.004), min_members: 2, ..Default::default() };
    let job = |c: &Context| {
        let a = c.knn_lists(&Domain::periodic_cube(1.0), &pts, None, 12).unwrap();
        let b = c.knn_lists(&Domain::Open, &pts, Some(&q), 40).unwrap();
        let f = c.fof(&Domain::periodic_cube(1.0), &pts, &FofFields::default(), &fof).unwrap();
        (
            a.indices,
            a.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>(),
            b.indices,
            b.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>(),
            f.labels,
            f.catalogue,
        )
    };
    let want = job(&ctx(2));
    assert!(want.5.len() > 10, "the FoF case should have groups");
    std::thread::scope(|s| {
        let runs: Vec<_> = (0..4)
            .map(|t| {
                let job = &job;
                s.spawn(move || {
                    let c = ctx(1 + t % 2);
                    (0..3).map(|_| job(&c)).collect::<Vec<_>>()
                })
            })
            .collect();
        for (t, r) in runs.into_iter().enumerate() {
            for (i, got) in r.join().unwrap().into_iter().enumerate() {
                assert!(got == want, "thread {t}, call {i}: differs from one context alone");
            }
        }
    });
}
