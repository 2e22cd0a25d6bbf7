//! kNN API: bad input, reductions, output orders, thread-count independence, and contexts
//! on concurrent threads. (The cross-check against scipy's cKDTree is in tests/tools.)

use crate::common::*;
use ztree::{Config, Context, Domain, Error, FofFields, FofParams, KnnOutput, KnnParams, LinkingLength, OutputOrder, SoaPoints, SourceFields, TreeParams};

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
        c.knn_self(&Domain::Periodic(l), &pts, &fields, &KnnParams::new(k), &mut KnnOutput {
            kth_distance: Some(&mut kth),
            density: Some(&mut dens),
            scalar_mean: Some(&mut mean),
            ..Default::default()
        })
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
    c.knn_self(&Domain::Open, &pts, &SourceFields::default(), &KnnParams::new(k), &mut KnnOutput {
        indices: Some(&mut zi),
        distances: Some(&mut zd),
        order: OutputOrder::ZOrder,
        permutation: Some(&mut perm),
        ..Default::default()
    })
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
                (a.indices, a.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>(), b.indices, b.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>())
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
    let (x, y, z): (Vec<f64>, Vec<f64>, Vec<f64>) = (pts.iter().map(|p| p[0]).collect(), pts.iter().map(|p| p[1]).collect(), pts.iter().map(|p| p[2]).collect());
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
        (a.indices, a.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>(), b.indices, b.distances.iter().map(|d| d.to_bits()).collect::<Vec<_>>(), f.labels, f.catalogue)
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
