//! Radius queries against brute force: counts, lists (both orders, with distances), sums,
//! means and the SPH density, for a fixed radius and one per query, self and separate
//! queries; over shapes (duplicates, lattices at exactly the radius, faces and periodic
//! wrap, lines, outliers), precisions, dimensions, thread counts and leaf sizes. Sums are
//! compared bit for bit: ztree adds from +0 in ascending source index, as the oracle does.

use crate::common::*;
use ztree::radius::sph_kernel;
use ztree::{Config, Context, Domain, Error, ListOrder, RadiusOutput, RadiusParams, Real, SourceFields, TreeParams};

fn ctx(threads: usize, leaf: usize) -> Context {
    Context::new(Config { threads, tree: TreeParams { leaf_size: leaf, top_target: 16, super_group: 4, ..Default::default() } }).unwrap()
}

/// FoF's test by hand: f64 from the input coordinates, minimum image per dimension.
fn d2<T: Real, const D: usize>(a: &[T; D], b: &[T; D], box_len: Option<[f64; D]>) -> f64 {
    let mut s = 0.0f64;
    for d in 0..D {
        let mut x = a[d].to_f64() - b[d].to_f64();
        if let Some(l) = box_len {
            if x > 0.5 * l[d] {
                x -= l[d];
            } else if x < -0.5 * l[d] {
                x += l[d];
            }
        }
        s += x * x;
    }
    s
}

/// Every query's neighbours by brute force: (source index, d²) ascending by index.
fn brute<T: Real, const D: usize>(src: &[[T; D]], qry: &[[T; D]], radii: &[f64], box_len: Option<[f64; D]>) -> Vec<Vec<(usize, f64)>> {
    qry.iter().zip(radii).map(|(q, &r)| (0..src.len()).map(|j| (j, d2(q, &src[j], box_len))).filter(|e| e.1 <= r * r).collect()).collect()
}

struct Outputs<T> {
    counts: Vec<i64>,
    sum: Vec<f64>,
    mean: Vec<f64>,
    density: Vec<f64>,
    lists: ztree::NeighbourLists,
    _t: std::marker::PhantomData<T>,
}

#[allow(clippy::too_many_arguments)]
fn run<T: Real, const D: usize>(
    c: &Context,
    src: &[[T; D]],
    qry: Option<&[[T; D]]>,
    radii: Option<&Vec<f64>>,
    fixed: f64,
    box_len: Option<[f64; D]>,
    order: ListOrder,
    fields: (&[f64], &[f64]),
) -> Outputs<T> {
    let nq = qry.map_or(src.len(), |q| q.len());
    let dom = box_len.map_or(Domain::Open, Domain::Periodic);
    let (mut counts, mut sum, mut mean, mut density) = (vec![-7i64; nq], vec![-7.0; nq], vec![-7.0; nq], vec![-7.0; nq]);
    let mut out = RadiusOutput { counts: Some(&mut counts), scalar_sum: Some(&mut sum), scalar_mean: Some(&mut mean), density: Some(&mut density) };
    let f = SourceFields { masses: Some(&fields.0), scalar: Some(&fields.1) };
    let mut p = match radii {
        Some(r) => RadiusParams::per_query(r),
        None => RadiusParams::new(fixed),
    }
    .with_lists(order);
    p.list_distances = true;
    let r = match qry {
        None => c.radius_self(&dom, src, &f, &p, &mut out),
        Some(q) => c.radius(&dom, src, q, &f, &p, &mut out),
    }
    .unwrap();
    let lists = r.lists.unwrap();
    assert_eq!(r.stats.pairs, lists.indices.len() as u64);
    Outputs { counts, sum, mean, density, lists, _t: Default::default() }
}

#[allow(clippy::too_many_arguments)]
fn check<T: Real, const D: usize>(
    src: &[[T; D]],
    qry: &[[T; D]],
    radii: &[f64],
    box_len: Option<[f64; D]>,
    order: ListOrder,
    fields: (&[f64], &[f64]),
    o: &Outputs<T>,
    what: &str,
) {
    let want = brute(src, qry, radii, box_len);
    assert_eq!(o.lists.offsets.len(), qry.len() + 1, "{what}: offsets");
    for (q, w) in want.iter().enumerate() {
        assert_eq!(o.counts[q], w.len() as i64, "{what}: count of query {q}");
        let mut e = w.clone();
        if order == ListOrder::Distance {
            e.sort_by(|a, b| a.1.total_cmp(&b.1).then(a.0.cmp(&b.0)));
        }
        let got: Vec<i64> = o.lists.of(q).to_vec();
        let exp: Vec<i64> = e.iter().map(|x| x.0 as i64).collect();
        assert_eq!(got, exp, "{what}: list of query {q}");
        let (a, b) = (o.lists.offsets[q] as usize, o.lists.offsets[q + 1] as usize);
        let dist: Vec<f64> = e.iter().map(|x| x.1.sqrt()).collect();
        assert_eq!(&o.lists.distances[a..b], &dist[..], "{what}: distances of query {q}");
        let s = w.iter().fold(0.0, |a, x| a + fields.1[x.0]);
        assert_eq!(o.sum[q].to_bits(), s.to_bits(), "{what}: sum of query {q}");
        if w.is_empty() {
            assert!(o.mean[q].is_nan(), "{what}: mean of an empty query");
        } else {
            assert_eq!(o.mean[q], s / w.len() as f64, "{what}: mean of query {q}");
        }
        let rho = w.iter().fold(0.0, |a, x| a + fields.0[x.0] * sph_kernel::<D>(x.1.sqrt(), radii[q]));
        assert_eq!(o.density[q].to_bits(), rho.to_bits(), "{what}: density of query {q}");
    }
}

fn sweep<T: Real, const D: usize>(seed0: u64) {
    let c = ctx(2, 8);
    let mut seed = seed0;
    for &shape in &SHAPES {
        for periodic in [false, true] {
            if periodic && shape == Shape::GaussianOutliers {
                continue;
            }
            for &n in &[1usize, 9, 400] {
                seed += 1;
                let mut rng = Rng::new(seed);
                let l = [1.0; D];
                let src: Vec<[T; D]> = points(shape, n, l, &mut rng);
                let qry: Vec<[T; D]> = points(shape, n / 2 + 3, l, &mut rng);
                let box_len = periodic.then_some(l);
                let masses: Vec<f64> = (0..n).map(|_| 0.5 + rng.f64()).collect();
                let scalar: Vec<f64> = (0..n).map(|_| rng.f64() - 0.3).collect();
                let sep = (1.0 / n as f64).powf(1.0 / D as f64);
                let scale = if shape == Shape::GaussianOutliers { 2e-3 } else { 1.0 };
                for (i, r) in [0.0, 0.7 * sep, sep, 2.5 * sep].into_iter().enumerate() {
                    let r = r * scale;
                    let order = if i % 2 == 0 { ListOrder::Distance } else { ListOrder::Index };
                    let what = format!("{shape:?} n={n} periodic={periodic} r={r} {}D f{} {order:?}", D, 8 * std::mem::size_of::<T>());
                    let o = run(&c, &src, None, None, r, box_len, order, (&masses, &scalar));
                    check(&src, &src, &vec![r; n], box_len, order, (&masses, &scalar), &o, &format!("self {what}"));
                    // Separate queries, one radius each (some 0, some exactly the spacing).
                    let radii: Vec<f64> = (0..qry.len()).map(|q| [0.0, sep, 0.5 * sep, 3.0 * sep][(q + i) % 4] * scale).collect();
                    let o = run(&c, &src, Some(&qry), Some(&radii), 0.0, box_len, order, (&masses, &scalar));
                    check(&src, &qry, &radii, box_len, order, (&masses, &scalar), &o, &format!("queries {what}"));
                }
            }
        }
    }
}

#[test]
fn radius_matches_brute_force_f64_3d() {
    sweep::<f64, 3>(100);
}

#[test]
fn radius_matches_brute_force_f32_3d() {
    sweep::<f32, 3>(200);
}

#[test]
fn radius_matches_brute_force_f64_2d() {
    sweep::<f64, 2>(300);
}

#[test]
fn radius_matches_brute_force_f32_2d() {
    sweep::<f32, 2>(400);
}

/// A lattice of spacing exactly r (in binary: r = 1/8): every axis neighbour is at
/// exactly r and is counted (the test is inclusive), the diagonals are not.
#[test]
fn radius_lattice_at_exactly_r() {
    let side = 8;
    let pts: Vec<[f64; 3]> =
        (0..side * side * side).map(|i| [(i % side) as f64 / 8.0, ((i / side) % side) as f64 / 8.0, (i / (side * side)) as f64 / 8.0]).collect();
    let c = ctx(2, 8);
    let mut counts = vec![0i64; pts.len()];
    let mut out = RadiusOutput { counts: Some(&mut counts), ..Default::default() };
    c.radius_self(&Domain::periodic_cube(1.0), &pts, &SourceFields::default(), &RadiusParams::new(0.125), &mut out).unwrap();
    assert!(counts.iter().all(|&n| n == 7), "periodic lattice: self and 6 axis neighbours each");
    let mut out = RadiusOutput { counts: Some(&mut counts), ..Default::default() };
    c.radius_self(&Domain::Open, &pts, &SourceFields::default(), &RadiusParams::new(0.125), &mut out).unwrap();
    assert_eq!(counts[0], 4, "open lattice: a corner has 3 axis neighbours");
    assert_eq!(counts.iter().sum::<i64>(), (pts.len() + 2 * 3 * 7 * 64) as i64);
}

/// Results do not depend on threads or the tree's shape; counts alone (the shortcut for
/// leaves wholly inside the radius) equal the lists' lengths.
#[test]
fn radius_independent_of_threads_and_tree() {
    let mut rng = Rng::new(9);
    let pts: Vec<[f32; 3]> = points(Shape::Clustered, 40_000, [1.0; 3], &mut rng);
    let masses: Vec<f64> = (0..pts.len()).map(|_| rng.f64()).collect();
    let scalar: Vec<f64> = (0..pts.len()).map(|_| rng.f64()).collect();
    let h: Vec<f64> = (0..pts.len()).map(|_| 0.01 + 0.02 * rng.f64()).collect();
    let mut first: Option<Outputs<f32>> = None;
    for (threads, leaf) in [(1, 0), (2, 0), (4, 16), (3, 200)] {
        let c = ctx(threads, leaf);
        let o = run(&c, &pts, None, Some(&h), 0.0, Some([1.0; 3]), ListOrder::Distance, (&masses, &scalar));
        let mut counts = vec![0i64; pts.len()];
        let mut out = RadiusOutput { counts: Some(&mut counts), ..Default::default() };
        c.radius_self(&Domain::periodic_cube(1.0), &pts, &SourceFields::default(), &RadiusParams::per_query(&h), &mut out).unwrap();
        assert_eq!(counts, o.counts, "counts alone, threads={threads} leaf={leaf}");
        if let Some(f) = &first {
            assert_eq!(o.lists, f.lists, "lists, threads={threads} leaf={leaf}");
            assert_eq!(o.counts, f.counts);
            assert!(o.sum.iter().zip(&f.sum).all(|(a, b)| a.to_bits() == b.to_bits()), "sums, threads={threads} leaf={leaf}");
            assert!(o.density.iter().zip(&f.density).all(|(a, b)| a.to_bits() == b.to_bits()), "density, threads={threads} leaf={leaf}");
        } else {
            assert!(o.counts.iter().all(|&n| n >= 1));
            first = Some(o);
        }
    }
}

#[test]
fn radius_edge_cases_and_errors() {
    let c = ctx(2, 0);
    let pts: Vec<[f64; 3]> = vec![[0.1, 0.2, 0.3], [0.1, 0.2, 0.3], [0.9, 0.9, 0.9]];
    let none: Vec<[f64; 3]> = Vec::new();
    let f = SourceFields::default();
    // No sources: every query has nothing; no queries: nothing to do.
    let mut counts = vec![5i64; 3];
    let mut out = RadiusOutput { counts: Some(&mut counts), ..Default::default() };
    let r = c.radius(&Domain::Open, &none, &pts, &f, &RadiusParams::new(1.0).with_lists(ListOrder::Index), &mut out).unwrap();
    assert_eq!(counts, vec![0; 3]);
    assert_eq!(r.lists.unwrap().offsets, vec![0; 4]);
    let mut out = RadiusOutput::default();
    let r = c.radius(&Domain::Open, &pts, &none, &f, &RadiusParams::new(1.0).with_lists(ListOrder::Index), &mut out).unwrap();
    assert_eq!(r.lists.unwrap().offsets, vec![0]);
    // Duplicates at distance 0.
    let mut counts = vec![0i64; 3];
    let mut out = RadiusOutput { counts: Some(&mut counts), ..Default::default() };
    c.radius_self(&Domain::Open, &pts, &f, &RadiusParams::new(0.0), &mut out).unwrap();
    assert_eq!(counts, vec![2, 2, 1]);
    // Bad radii and outputs.
    let bad = |p: &RadiusParams, out: &mut RadiusOutput| c.radius_self(&Domain::Open, &pts, &f, p, out).unwrap_err();
    for r in [-1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(bad(&RadiusParams::new(r), &mut RadiusOutput::default()), Error::InvalidParameter { name: "radius", .. }), "radius {r}");
    }
    let radii = vec![0.1, -0.1, 0.1];
    assert!(matches!(bad(&RadiusParams::per_query(&radii), &mut RadiusOutput::default()), Error::InvalidParameter { name: "radii", .. }));
    let short = vec![0.1; 2];
    assert!(matches!(bad(&RadiusParams::per_query(&short), &mut RadiusOutput::default()), Error::LengthMismatch { what: "radii", .. }));
    let mut c2 = vec![0i64; 2];
    assert!(matches!(bad(&RadiusParams::new(0.1), &mut RadiusOutput { counts: Some(&mut c2), ..Default::default() }), Error::LengthMismatch { .. }));
    let mut s = vec![0.0; 3];
    assert!(matches!(
        bad(&RadiusParams::new(0.1), &mut RadiusOutput { scalar_mean: Some(&mut s), ..Default::default() }),
        Error::InvalidParameter { .. }
    ));
    let p = RadiusParams { list_distances: true, ..RadiusParams::new(0.1) };
    assert!(matches!(bad(&p, &mut RadiusOutput::default()), Error::InvalidParameter { name: "list_distances", .. }));
    // Points outside the periodic box are named.
    let out_of_box = vec![[0.1, 0.2, 1.5]];
    let e = c.radius_self(&Domain::periodic_cube(1.0), &out_of_box, &f, &RadiusParams::new(0.1), &mut RadiusOutput::default()).unwrap_err();
    assert!(matches!(e, Error::OutsideBox { .. }), "{e}");
    // The lists' ceiling: refused before they are made, the counts computed.
    let mut rng = Rng::new(3);
    let many: Vec<[f64; 3]> = points(Shape::Uniform, 2000, [1.0; 3], &mut rng);
    let p = RadiusParams { max_list_bytes: 20_000, ..RadiusParams::new(0.2).with_lists(ListOrder::Distance) };
    let e = c.radius_self(&Domain::Open, &many, &f, &p, &mut RadiusOutput::default()).unwrap_err();
    assert!(matches!(e, Error::OutOfMemory { .. }), "{e}");
}

/// A count limit: every count is min(brute force, limit), on clustered, duplicate and
/// lattice points, open and periodic, fixed and per-query radii; refused with lists or
/// sums.
#[test]
fn radius_count_limit_is_the_capped_count() {
    let c = ctx(2, 16);
    let f = SourceFields::default();
    for (si, &shape) in [Shape::Clustered, Shape::Duplicates, Shape::Lattice, Shape::Uniform].iter().enumerate() {
        for periodic in [false, true] {
            let mut rng = Rng::new(70 + si as u64);
            let pts: Vec<[f64; 3]> = points(shape, 1200, [1.0; 3], &mut rng);
            let box_len = periodic.then_some([1.0; 3]);
            let domain = box_len.map_or(Domain::Open, Domain::Periodic);
            let r = if shape == Shape::Lattice { 1.0 / 11.0 } else { 0.08 };
            let radii: Vec<f64> = (0..pts.len()).map(|i| r * [1.0, 0.5, 1.5][i % 3]).collect();
            for per_query in [false, true] {
                let rr = if per_query { radii.clone() } else { vec![r; pts.len()] };
                let want = brute(&pts, &pts, &rr, box_len);
                for limit in [1u64, 2, 10, 50] {
                    let mut counts = vec![-1i64; pts.len()];
                    let base = if per_query { RadiusParams::per_query(&radii) } else { RadiusParams::new(r) };
                    let p = RadiusParams { count_limit: limit, ..base };
                    c.radius_self(&domain, &pts, &f, &p, &mut RadiusOutput { counts: Some(&mut counts), ..Default::default() }).unwrap();
                    for (q, w) in want.iter().enumerate() {
                        assert_eq!(
                            counts[q],
                            (w.len() as u64).min(limit) as i64,
                            "{shape:?} periodic={periodic} per_query={per_query} limit {limit} query {q}"
                        );
                    }
                }
            }
        }
    }
    let pts = vec![[0.1, 0.2, 0.3]; 3];
    let p = RadiusParams { count_limit: 2, ..RadiusParams::new(0.1).with_lists(ListOrder::Index) };
    let e = c.radius_self(&Domain::Open, &pts, &f, &p, &mut RadiusOutput::default()).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { name: "count_limit", .. }), "{e}");
}
