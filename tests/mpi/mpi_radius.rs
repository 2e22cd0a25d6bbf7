//! Distributed radius queries equal single-rank ones: counts and lists exactly, sums,
//! means and densities bit for bit.

use crate::common::scatter::{Layout, SPREADS, Spread, layout, make_identical};
use crate::common::*;
use mpi::traits::*;
use ztree::{Config, Context, Dist, Domain, ListOrder, NeighbourLists, RadiusOutput, RadiusParams, Real, ScalarField, SourceFields, TreeParams};

/// Per-query outputs of one call.
struct Got {
    counts: Vec<i64>,
    sum: Vec<f64>,
    mean: Vec<f64>,
    density: Vec<f64>,
    lists: Option<NeighbourLists>,
}

fn outputs(n: usize) -> (Vec<i64>, Vec<f64>, Vec<f64>, Vec<f64>) {
    (vec![-7; n], vec![-7.0; n], vec![-7.0; n], vec![-7.0; n])
}

/// Radius per query: `r` scaled by a pattern (some zero) when `per_query`.
fn radii(n: usize, r: f64, per_query: bool, offset: usize) -> Option<Vec<f64>> {
    per_query.then(|| (0..n).map(|i| r * [1.0, 0.0, 1.7, 0.4, 1.0][(i + offset) % 5]).collect())
}

#[allow(clippy::too_many_arguments)]
fn call<T: Real, const D: usize>(
    dist: Option<&Dist>,
    reference: &Context,
    domain: &Domain<D>,
    src: &[[T; D]],
    qry: Option<&[[T; D]]>,
    masses: &[f64],
    scalar: &[f64],
    r: f64,
    radii: Option<&Vec<f64>>,
    order: ListOrder,
) -> Got {
    let nq = qry.map_or(src.len(), |q| q.len());
    let (mut counts, mut sum, mut mean, mut density) = outputs(nq);
    let fields = SourceFields { masses: Some(&masses), scalar: Some(&scalar) };
    let mut p = match radii {
        Some(v) => RadiusParams::per_query(v as &dyn ScalarField),
        None => RadiusParams::new(r),
    }
    .with_lists(order);
    p.list_distances = order == ListOrder::Distance;
    let mut out = RadiusOutput { counts: Some(&mut counts), scalar_sum: Some(&mut sum), scalar_mean: Some(&mut mean), density: Some(&mut density) };
    let lists = match (dist, qry) {
        (Some(d), None) => d.radius_self(domain, src, &fields, &p, &mut out).map(|r| r.0.lists),
        (Some(d), Some(q)) => d.radius(domain, src, q, &fields, &p, &mut out).map(|r| r.0.lists),
        (None, None) => reference.radius_self(domain, src, &fields, &p, &mut out).map(|r| r.lists),
        (None, Some(q)) => reference.radius(domain, src, q, &fields, &p, &mut out).map(|r| r.lists),
    }
    .unwrap_or_else(|e| panic!("radius call failed: {e}"));
    Got { counts, sum, mean, density, lists }
}

/// Rows of `got` (this rank's queries) against rows `lo..` of the reference.
fn compare(label: &str, rank: usize, got: &Got, want: &Got, lo: usize) -> usize {
    let bits = |x: f64| if x.is_nan() { u64::MAX } else { x.to_bits() };
    let (gl, wl) = (got.lists.as_ref().unwrap(), want.lists.as_ref().unwrap());
    let mut bad = 0;
    for q in 0..got.counts.len() {
        let g = lo + q;
        let same = got.counts[q] == want.counts[g]
            && bits(got.sum[q]) == bits(want.sum[g])
            && bits(got.mean[q]) == bits(want.mean[g])
            && bits(got.density[q]) == bits(want.density[g])
            && gl.of(q) == wl.of(g)
            && (gl.distances.is_empty()
                || gl.distances[gl.offsets[q] as usize..gl.offsets[q + 1] as usize]
                    .iter()
                    .zip(&wl.distances[wl.offsets[g] as usize..wl.offsets[g + 1] as usize])
                    .all(|(a, b)| a.to_bits() == b.to_bits()));
        if !same {
            if bad < 3 {
                eprintln!(
                    "{label}: rank {rank} query {q} (global {g}): count {} vs {}, sum {} vs {}, density {} vs {}\n  list {:?}\n  want {:?}",
                    got.counts[q],
                    want.counts[g],
                    got.sum[q],
                    want.sum[g],
                    got.density[q],
                    want.density[g],
                    gl.of(q),
                    wl.of(g)
                );
            }
            bad += 1;
        }
    }
    bad
}

#[allow(clippy::too_many_arguments)]
fn self_case<T: Real, const D: usize>(
    dist: &Dist,
    reference: &Context,
    global: &[[T; D]],
    masses: &[f64],
    scalar: &[f64],
    lay: &Layout,
    r: f64,
    per_query: bool,
    order: ListOrder,
    periodic: Option<[f64; D]>,
    label: &str,
) -> usize {
    let rank = dist.rank();
    let domain = periodic.map_or(Domain::Open, Domain::Periodic);
    let pick = |v: &[f64], idx: &[usize]| -> Vec<f64> { idx.iter().map(|&i| v[i]).collect() };
    let cat: Vec<[T; D]> = lay.order.iter().map(|&i| global[i]).collect();
    let all_radii = radii(global.len(), r, per_query, 0);
    let cr = all_radii.as_ref().map(|v| pick(v, &lay.order));
    let want = call(None, reference, &domain, &cat, None, &pick(masses, &lay.order), &pick(scalar, &lay.order), r, cr.as_ref(), order);
    let mine = lay.mine(rank);
    let pts: Vec<[T; D]> = mine.iter().map(|&i| global[i]).collect();
    let mr = all_radii.as_ref().map(|v| pick(v, mine));
    let got = call(Some(dist), reference, &domain, &pts, None, &pick(masses, mine), &pick(scalar, mine), r, mr.as_ref(), order);
    compare(label, rank, &got, &want, lay.offsets[rank])
}

#[allow(clippy::too_many_arguments)]
fn query_case<T: Real, const D: usize>(
    dist: &Dist,
    reference: &Context,
    src: &[[T; D]],
    qry: &[[T; D]],
    masses: &[f64],
    slay: &Layout,
    qlay: &Layout,
    r: f64,
    per_query: bool,
    periodic: Option<[f64; D]>,
    label: &str,
) -> usize {
    let rank = dist.rank();
    let domain = periodic.map_or(Domain::Open, Domain::Periodic);
    let pick = |v: &[f64], idx: &[usize]| -> Vec<f64> { idx.iter().map(|&i| v[i]).collect() };
    let scalar: Vec<f64> = masses.iter().map(|m| m * 3.0 - 1.0).collect();
    let all_radii = radii(qry.len(), r, per_query, 3);
    let cs: Vec<[T; D]> = slay.order.iter().map(|&i| src[i]).collect();
    let cq: Vec<[T; D]> = qlay.order.iter().map(|&i| qry[i]).collect();
    let cr = all_radii.as_ref().map(|v| pick(v, &qlay.order));
    let want =
        call(None, reference, &domain, &cs, Some(&cq), &pick(masses, &slay.order), &pick(&scalar, &slay.order), r, cr.as_ref(), ListOrder::Index);
    let ms: Vec<[T; D]> = slay.mine(rank).iter().map(|&i| src[i]).collect();
    let mq: Vec<[T; D]> = qlay.mine(rank).iter().map(|&i| qry[i]).collect();
    let mr = all_radii.as_ref().map(|v| pick(v, qlay.mine(rank)));
    let (mm, msc) = (pick(masses, slay.mine(rank)), pick(&scalar, slay.mine(rank)));
    let got = call(Some(dist), reference, &domain, &ms, Some(&mq), &mm, &msc, r, mr.as_ref(), ListOrder::Index);
    compare(label, rank, &got, &want, qlay.offsets[rank])
}

/// Subsets (every third point not a source, every fourth not a query) against the serial
/// subset call on the concatenation: list entries are global caller indices.
fn subset_case(dist: &Dist, reference: &Context, global: &[[f64; 3]], lay: &Layout, r: f64, label: &str) -> usize {
    let rank = dist.rank();
    let domain = Domain::Periodic([1.0, 1.5, 2.0]);
    let cat: Vec<[f64; 3]> = lay.order.iter().map(|&i| global[i]).collect();
    let is_src = |g: usize| g % 3 != 2;
    let is_qry = |g: usize| g % 4 != 1;
    let sel = |n: usize, lo: usize, f: &dyn Fn(usize) -> bool| -> Vec<u32> { (0..n as u32).filter(|&j| f(lo + j as usize)).collect() };
    let p = RadiusParams::new(r).with_lists(ListOrder::Distance);
    let f = SourceFields::default();
    let run = |pts: &[[f64; 3]], lo: usize, on: Option<&Dist>| -> (Vec<i64>, NeighbourLists) {
        let (ss, qs) = (sel(pts.len(), lo, &is_src), sel(pts.len(), lo, &is_qry));
        let mut counts = vec![0i64; pts.len()];
        let mut out = RadiusOutput { counts: Some(&mut counts), ..Default::default() };
        let src = ztree::KnnSubset { points: pts, sel: &ss };
        let qry = Some(ztree::KnnSubset { points: pts, sel: &qs[..] });
        let r = match on {
            Some(d) => d.radius_subset(&domain, src, qry, &f, &p, &mut out),
            None => reference.radius_subset(&domain, src, qry, &f, &p, &mut out),
        }
        .unwrap_or_else(|e| panic!("{label}: {e}"));
        (counts, r.lists.unwrap())
    };
    let (wc, wl) = run(&cat, 0, None);
    let pts: Vec<[f64; 3]> = lay.mine(rank).iter().map(|&i| global[i]).collect();
    let lo = lay.offsets[rank];
    let (gc, gl) = run(&pts, lo, Some(dist));
    let bad = (0..pts.len()).filter(|&q| gc[q] != wc[lo + q] || gl.of(q) != wl.of(lo + q)).count();
    if bad > 0 {
        eprintln!("{label}: rank {rank}: {bad} subset rows differ");
    }
    bad
}

/// Every case on `world`; rank 0 prints the summary. Returns the failures over all ranks.
pub fn run(world: &mpi::topology::SimpleCommunicator) -> usize {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    let config = Config { threads: 2, tree: TreeParams { leaf_size: 16, top_target: 8, super_group: 4, ..Default::default() } };
    let dist = Dist::new(config, world.duplicate()).unwrap();
    let reference = Context::new(config).unwrap();
    let (mut failures, mut cases) = (0usize, 0usize);
    let l = [1.0, 1.5, 2.0];
    let shapes = [Shape::Uniform, Shape::Clustered, Shape::Duplicates, Shape::Lattice, Shape::GaussianOutliers];
    for (si, &shape) in shapes.iter().enumerate() {
        for periodic in [false, true] {
            if periodic && shape == Shape::GaussianOutliers {
                continue;
            }
            let n = [1500, 1200, 1500, 1000, 1000][si];
            let mut rng = Rng::new(300 + si as u64 * 5 + periodic as u64);
            let global: Vec<[f64; 3]> = points(shape, n, l, &mut rng);
            let masses: Vec<f64> = (0..n).map(|_| 0.5 + rng.f64()).collect();
            let scalar: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
            // About 12 neighbours at the mean density; the lattice's spacing exactly.
            let spacing = (l.iter().product::<f64>() / n as f64).cbrt();
            let r = if shape == Shape::Lattice { l[0] / (n as f64).powf(1.0 / 3.0).ceil() } else { 1.4 * spacing };
            for (pi, &spread) in SPREADS.iter().enumerate() {
                let xs: Vec<f64> = global.iter().map(|p| p[0]).collect();
                let lay = layout(spread, &xs, size, &mut Rng::new(11 + pi as u64));
                let mut g = global.clone();
                if spread == Spread::IdenticalOnFirst {
                    make_identical(&mut g, &lay);
                }
                let per = periodic.then_some(l);
                let label = format!("{shape:?} periodic={periodic} {spread:?} n={n}");
                failures += self_case::<f64, 3>(&dist, &reference, &g, &masses, &scalar, &lay, r, false, ListOrder::Distance, per, &label);
                failures +=
                    self_case::<f64, 3>(&dist, &reference, &g, &masses, &scalar, &lay, r, true, ListOrder::Index, per, &format!("{label} per-query"));
                let g32: Vec<[f32; 3]> = g.iter().map(|p| p.map(|c| if (c as f32) as f64 >= 1.0 { 0.0 } else { c as f32 })).collect();
                failures +=
                    self_case::<f32, 3>(&dist, &reference, &g32, &masses, &scalar, &lay, r, true, ListOrder::Distance, None, &format!("{label} f32"));
                let g2: Vec<[f64; 2]> = g.iter().map(|p| [p[0], p[1]]).collect();
                let per2 = periodic.then_some([l[0], l[1]]);
                failures += self_case::<f64, 2>(
                    &dist,
                    &reference,
                    &g2,
                    &masses,
                    &scalar,
                    &lay,
                    r * 0.5,
                    false,
                    ListOrder::Distance,
                    per2,
                    &format!("{label} 2D"),
                );
                cases += 4;
                if periodic {
                    failures += subset_case(&dist, &reference, &g, &lay, r, &format!("{label} subsets"));
                    cases += 1;
                }
            }
        }
    }
    // Separate queries, spread independently of the sources.
    for (si, &shape) in [Shape::Uniform, Shape::Clustered].iter().enumerate() {
        for periodic in [false, true] {
            let mut rng = Rng::new(700 + si as u64 * 3 + periodic as u64);
            let src: Vec<[f64; 3]> = points(shape, 1500, l, &mut rng);
            let qry: Vec<[f64; 3]> = points(Shape::Uniform, 900, l, &mut rng);
            let masses: Vec<f64> = (0..src.len()).map(|_| 0.5 + rng.f64()).collect();
            let r = 1.4 * (l.iter().product::<f64>() / 1500.0).cbrt();
            for (pi, (&ss, &qs)) in SPREADS.iter().zip(SPREADS.iter().rev()).enumerate() {
                let sx: Vec<f64> = src.iter().map(|p| p[0]).collect();
                let qx: Vec<f64> = qry.iter().map(|p| p[1]).collect();
                let slay = layout(ss, &sx, size, &mut Rng::new(41 + pi as u64));
                let qlay = layout(qs, &qx, size, &mut Rng::new(43 + pi as u64));
                for per_query in [false, true] {
                    let label = format!("queries {shape:?} periodic={periodic} {ss:?}/{qs:?} per_query={per_query}");
                    failures +=
                        query_case::<f64, 3>(&dist, &reference, &src, &qry, &masses, &slay, &qlay, r, per_query, periodic.then_some(l), &label);
                    cases += 1;
                }
            }
        }
    }
    // Tiny sets and an empty one.
    for n in [0usize, 1, 2, 5] {
        let mut rng = Rng::new(n as u64 + 50);
        let g: Vec<[f64; 3]> = points(Shape::Uniform, n, [1.0; 3], &mut rng);
        let xs: Vec<f64> = g.iter().map(|p| p[0]).collect();
        let lay = layout(Spread::Random, &xs, size, &mut rng);
        let ones = vec![1.0; n];
        failures += self_case::<f64, 3>(&dist, &reference, &g, &ones, &ones, &lay, 0.5, false, ListOrder::Distance, None, &format!("tiny n={n}"));
        cases += 1;
    }
    let total = crate::sum_all(failures);
    if rank == 0 {
        println!("mpi_radius: {size} ranks, {cases} cases, {total} differing rows");
    }
    total
}
