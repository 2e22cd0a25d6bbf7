//! Distributed kNN equals single-rank kNN, bit for bit.

use crate::common::scatter::{Layout, SPREADS, Spread, layout, make_identical};
use crate::common::*;
use mpi::traits::*;
use ztree::{Config, Context, Dist, Domain, KnnOutput, KnnParams, Real, SourceFields, TreeParams};

struct Case<'a> {
    label: String,
    k: usize,
    periodic: Option<[f64; 3]>,
    lay: &'a Layout,
}

fn run_case<T: Real, const D: usize>(
    dist: &Dist,
    reference: &Context,
    global: &[[T; D]],
    masses: &[f64],
    scalar: &[f64],
    case: &Case<'_>,
    periodic: Option<[f64; D]>,
) -> usize {
    let rank = dist.rank();
    let k = case.k;
    let domain = periodic.map_or(Domain::Open, Domain::Periodic);
    // The single-rank reference on the concatenation.
    let cat: Vec<[T; D]> = case.lay.order.iter().map(|&i| global[i]).collect();
    let cm: Vec<f64> = case.lay.order.iter().map(|&i| masses[i]).collect();
    let csc: Vec<f64> = case.lay.order.iter().map(|&i| scalar[i]).collect();
    let n = cat.len();
    let (mut ri, mut rd, mut rk, mut rdens, mut rs) = (vec![0i64; n * k], vec![T::ZERO; n * k], vec![T::ZERO; n], vec![0.0; n], vec![0.0; n]);
    let fields = SourceFields { masses: Some(&cm), scalar: Some(&csc) };
    let mut out = KnnOutput {
        indices: Some(&mut ri),
        distances: Some(&mut rd),
        kth_distance: Some(&mut rk),
        density: Some(&mut rdens),
        scalar_mean: Some(&mut rs),
        ..Default::default()
    };
    reference.knn_self(&domain, &cat, &fields, &KnnParams::new(k), &mut out).unwrap();
    // The distributed call on this rank's share.
    let lo = case.lay.offsets[rank];
    let mine = case.lay.mine(rank);
    let pts: Vec<[T; D]> = mine.iter().map(|&i| global[i]).collect();
    let m: Vec<f64> = mine.iter().map(|&i| masses[i]).collect();
    let sc: Vec<f64> = mine.iter().map(|&i| scalar[i]).collect();
    let nm = pts.len();
    let (mut di, mut dd, mut dk, mut ddens, mut ds) = (vec![0i64; nm * k], vec![T::ZERO; nm * k], vec![T::ZERO; nm], vec![0.0; nm], vec![0.0; nm]);
    let fields = SourceFields { masses: Some(&m), scalar: Some(&sc) };
    let mut out = KnnOutput {
        indices: Some(&mut di),
        distances: Some(&mut dd),
        kth_distance: Some(&mut dk),
        density: Some(&mut ddens),
        scalar_mean: Some(&mut ds),
        ..Default::default()
    };
    if std::env::var_os("ZTREE_DEBUG_COMM").is_some() {
        eprintln!("rank {rank}: case {}", case.label);
    }
    let st = dist.knn_self(&domain, &pts, &fields, &KnnParams::new(k), &mut out).unwrap_or_else(|e| panic!("{}: rank {rank}: {e}", case.label));
    let mut bad = 0;
    for q in 0..nm {
        let g = lo + q;
        // Self first, duplicates included (the serial rule, checked on its own too).
        let same = di[q * k] == g as i64
            && di[q * k..(q + 1) * k] == ri[g * k..(g + 1) * k]
            && dd[q * k..(q + 1) * k].iter().zip(&rd[g * k..(g + 1) * k]).all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits())
            && dk[q].to_f64().to_bits() == rk[g].to_f64().to_bits()
            && ddens[q].to_bits() == rdens[g].to_bits()
            && (ds[q].to_bits() == rs[g].to_bits());
        if !same {
            if bad < 3 {
                eprintln!(
                    "{}: rank {rank} row {q} (global {g}) differs:\n  dist {:?} {:?}\n  ref  {:?} {:?}\n  kth {:?} vs {:?}, density {} vs {}",
                    case.label,
                    &di[q * k..(q + 1) * k],
                    &dd[q * k..(q + 1) * k],
                    &ri[g * k..(g + 1) * k],
                    &rd[g * k..(g + 1) * k],
                    dk[q],
                    rk[g],
                    ddens[q],
                    rdens[g]
                );
            }
            bad += 1;
        }
    }
    let _ = st;
    // Summaries only (no lists): the boundary candidates then come from another pass.
    // With k-th distance hints (exact, too small, too large, none) on every rank but the
    // first: they travel with their points and change nothing.
    let (mut sk, mut sdens, mut ss) = (vec![T::ZERO; nm], vec![0.0; nm], vec![0.0; nm]);
    let mut out = KnnOutput { kth_distance: Some(&mut sk), density: Some(&mut sdens), scalar_mean: Some(&mut ss), ..Default::default() };
    let hint: Vec<f64> = (0..nm).map(|q| rk[lo + q].to_f64() * [1.0, 0.7, 1.3, f64::NAN, 0.0][q % 5]).collect();
    let params = KnnParams { k, kth_hint: (rank > 0).then_some(&hint as &dyn ztree::ScalarField) };
    dist.knn_self(&domain, &pts, &fields, &params, &mut out).unwrap();
    let summary_bad = (0..nm)
        .filter(|&q| {
            let g = lo + q;
            sk[q].to_f64().to_bits() != rk[g].to_f64().to_bits() || sdens[q].to_bits() != rdens[g].to_bits() || ss[q].to_bits() != rs[g].to_bits()
        })
        .count();
    if summary_bad > 0 {
        eprintln!("{}: rank {rank}: {summary_bad} summary-only rows differ", case.label);
    }
    bad + summary_bad
}

/// Separate queries: sources spread by one layout, queries by another; every rank's rows
/// must equal the single-rank call on both sets concatenated in rank order.
#[allow(clippy::too_many_arguments)]
fn run_queries<T: Real, const D: usize>(
    dist: &Dist,
    reference: &Context,
    src: &[[T; D]],
    qry: &[[T; D]],
    masses: &[f64],
    slay: &Layout,
    qlay: &Layout,
    k: usize,
    periodic: Option<[f64; D]>,
    label: &str,
) -> usize {
    let rank = dist.rank();
    let domain = periodic.map_or(Domain::Open, Domain::Periodic);
    let cs: Vec<[T; D]> = slay.order.iter().map(|&i| src[i]).collect();
    let cm: Vec<f64> = slay.order.iter().map(|&i| masses[i]).collect();
    let cq: Vec<[T; D]> = qlay.order.iter().map(|&i| qry[i]).collect();
    let nq = cq.len();
    let (mut ri, mut rd, mut rdens) = (vec![0i64; nq * k], vec![T::ZERO; nq * k], vec![0.0; nq]);
    let fields = SourceFields { masses: Some(&cm), scalar: None };
    let mut out = KnnOutput { indices: Some(&mut ri), distances: Some(&mut rd), density: Some(&mut rdens), ..Default::default() };
    reference.knn(&domain, &cs, &cq, &fields, &KnnParams::new(k), &mut out).unwrap();
    let ms: Vec<[T; D]> = slay.mine(rank).iter().map(|&i| src[i]).collect();
    let mm: Vec<f64> = slay.mine(rank).iter().map(|&i| masses[i]).collect();
    let mq: Vec<[T; D]> = qlay.mine(rank).iter().map(|&i| qry[i]).collect();
    let nm = mq.len();
    let (mut di, mut dd, mut ddens) = (vec![0i64; nm * k], vec![T::ZERO; nm * k], vec![0.0; nm]);
    let fields = SourceFields { masses: Some(&mm), scalar: None };
    let mut out = KnnOutput { indices: Some(&mut di), distances: Some(&mut dd), density: Some(&mut ddens), ..Default::default() };
    dist.knn(&domain, &ms, &mq, &fields, &KnnParams::new(k), &mut out).unwrap_or_else(|e| panic!("{label}: rank {rank}: {e}"));
    let lo = qlay.offsets[rank];
    let mut bad = 0;
    for q in 0..nm {
        let g = lo + q;
        let same = di[q * k..(q + 1) * k] == ri[g * k..(g + 1) * k]
            && dd[q * k..(q + 1) * k].iter().zip(&rd[g * k..(g + 1) * k]).all(|(a, b)| a.to_f64().to_bits() == b.to_f64().to_bits())
            && ddens[q].to_bits() == rdens[g].to_bits();
        if !same {
            if bad < 3 {
                eprintln!("{label}: rank {rank} query {q} (global {g}): {:?} vs {:?}", &di[q * k..(q + 1) * k], &ri[g * k..(g + 1) * k]);
            }
            bad += 1;
        }
    }
    // Summaries only: the own candidates of boundary queries come from the local tree.
    // With hints (the k-th distances, scaled) on the odd ranks.
    let mut sdens = vec![0.0; nm];
    let fields = SourceFields { masses: Some(&mm), scalar: None };
    let mut out = KnnOutput { density: Some(&mut sdens), ..Default::default() };
    let hint: Vec<f64> = (0..nm).map(|q| rd[(lo + q) * k + k - 1].to_f64() * [1.0, 0.8, 1.2][q % 3]).collect();
    let params = KnnParams { k, kth_hint: (rank % 2 == 1).then_some(&hint as &dyn ztree::ScalarField) };
    dist.knn(&domain, &ms, &mq, &fields, &params, &mut out).unwrap();
    bad + (0..nm).filter(|&q| sdens[q].to_bits() != rdens[lo + q].to_bits()).count()
}

/// Subsets (type masks): sources every point but each third, queries every point but each
/// fourth (or the same selection: a self-query among them), against the serial subset
/// call on the concatenation; neighbour indices are global caller indices, rows left out
/// not computed.
fn subset_case<T: Real, const D: usize>(
    dist: &Dist,
    reference: &Context,
    global: &[[T; D]],
    lay: &Layout,
    k: usize,
    same: bool,
    label: &str,
) -> usize {
    let rank = dist.rank();
    let domain = Domain::Open;
    let is_src = |g: usize| g % 3 != 2;
    let is_qry = |g: usize| if same { is_src(g) } else { g % 4 != 1 };
    let sel = |n: usize, lo: usize, f: &dyn Fn(usize) -> bool| -> Vec<u32> { (0..n as u32).filter(|&j| f(lo + j as usize)).collect() };
    type Rows<T> = (Vec<i64>, Vec<T>, Vec<T>, Vec<f64>, Vec<f64>);
    let run = |pts: &[[T; D]], lo: usize, on: Option<&Dist>| -> Rows<T> {
        let n = pts.len();
        let (ss, qs) = (sel(n, lo, &is_src), sel(n, lo, &is_qry));
        let masses: Vec<f64> = (0..n).map(|i| 1.0 + ((lo + i) % 7) as f64).collect();
        let scalar: Vec<f64> = (0..n).map(|i| ((lo + i) % 5) as f64 - 2.0).collect();
        let fields = SourceFields { masses: Some(&masses), scalar: Some(&scalar) };
        let (mut i, mut d, mut kth, mut den, mut mean) = (vec![0i64; n * k], vec![T::ZERO; n * k], vec![T::ZERO; n], vec![0.0; n], vec![0.0; n]);
        let mut out = KnnOutput {
            indices: Some(&mut i),
            distances: Some(&mut d),
            kth_distance: Some(&mut kth),
            density: Some(&mut den),
            scalar_mean: Some(&mut mean),
            ..Default::default()
        };
        let src = ztree::KnnSubset { points: pts, sel: &ss };
        let qry = (!same).then_some(ztree::KnnSubset { points: pts, sel: &qs[..] });
        match on {
            Some(dd) => dd.knn_subset(&domain, src, qry, &fields, &KnnParams::new(k), &mut out),
            None => reference.knn_subset(&domain, src, qry, &fields, &KnnParams::new(k), &mut out),
        }
        .unwrap_or_else(|e| panic!("{label}: rank {rank}: {e}"));
        (i, d, kth, den, mean)
    };
    let cat: Vec<[T; D]> = lay.order.iter().map(|&i| global[i]).collect();
    let w = run(&cat, 0, None);
    let pts: Vec<[T; D]> = lay.mine(rank).iter().map(|&i| global[i]).collect();
    let lo = lay.offsets[rank];
    let g = run(&pts, lo, Some(dist));
    let bits = |v: &[T]| v.iter().map(|x| x.to_f64().to_bits()).collect::<Vec<u64>>();
    let bad = (0..pts.len())
        .filter(|&q| {
            let (a, b) = (q * k..(q + 1) * k, (lo + q) * k..(lo + q + 1) * k);
            g.0[a.clone()] != w.0[b.clone()]
                || bits(&g.1[a]) != bits(&w.1[b])
                || g.2[q].to_f64().to_bits() != w.2[lo + q].to_f64().to_bits()
                || g.3[q].to_bits() != w.3[lo + q].to_bits()
                || g.4[q].to_bits() != w.4[lo + q].to_bits()
        })
        .count();
    if bad > 0 {
        eprintln!("{label}: rank {rank}: {bad} subset rows differ");
    }
    bad
}

/// Every case on `world`; rank 0 prints the summary. Returns the failures over all ranks.
pub fn run(world: &mpi::topology::SimpleCommunicator) -> usize {
    let (rank, size) = (world.rank() as usize, world.size() as usize);
    // Small leaves and top planes so that even these sizes have deep trees.
    let config = Config { threads: 2, tree: TreeParams { leaf_size: 16, top_target: 8, super_group: 4, ..Default::default() } };
    let dist = Dist::new(config, world.duplicate()).unwrap();
    let reference = Context::new(config).unwrap();
    let mut failures = 0usize;
    let mut cases = 0usize;
    let shapes = [Shape::Uniform, Shape::Clustered, Shape::Faces, Shape::Duplicates, Shape::GaussianOutliers, Shape::Identical];
    for (si, &shape) in shapes.iter().enumerate() {
        for periodic in [false, true] {
            if periodic && shape == Shape::GaussianOutliers {
                continue;
            }
            let l = [1.0, 1.5, 2.0];
            let mut rng = Rng::new(100 + si as u64 * 7 + periodic as u64);
            let n = [3000, 2500, 1200, 4000, 3000, 700][si];
            let mut global: Vec<[f64; 3]> = points(shape, n, l, &mut rng);
            let masses: Vec<f64> = (0..n).map(|_| 0.5 + rng.f64()).collect();
            let scalar: Vec<f64> = (0..n).map(|_| rng.normal()).collect();
            for (pi, &spread) in SPREADS.iter().enumerate() {
                let xs: Vec<f64> = global.iter().map(|p| p[0]).collect();
                let lay = layout(spread, &xs, size, &mut Rng::new(7 + pi as u64));
                let mut g = global.clone();
                if spread == Spread::IdenticalOnFirst {
                    make_identical(&mut g, &lay);
                }
                for k in [1usize, 7, 24] {
                    let case = Case {
                        label: format!("{shape:?} periodic={periodic} {spread:?} k={k} n={n} f64"),
                        k,
                        periodic: periodic.then_some(l),
                        lay: &lay,
                    };
                    failures += run_case::<f64, 3>(&dist, &reference, &g, &masses, &scalar, &case, case.periodic);
                    cases += 1;
                }
                // f32 and 2D once per spread.
                let g32: Vec<[f32; 3]> = g.iter().map(|p| p.map(|c| c as f32)).collect();
                let case = Case { label: format!("{shape:?} periodic={periodic} {spread:?} k=9 f32"), k: 9, periodic: None, lay: &lay };
                failures += run_case::<f32, 3>(&dist, &reference, &g32, &masses, &scalar, &case, None);
                let g2: Vec<[f64; 2]> = g.iter().map(|p| [p[0], p[1]]).collect();
                let case = Case { label: format!("{shape:?} periodic={periodic} {spread:?} k=5 2D"), k: 5, periodic: None, lay: &lay };
                failures += run_case::<f64, 2>(&dist, &reference, &g2, &masses, &scalar, &case, periodic.then_some([l[0], l[1]]));
                cases += 2;
                // Type masks, once per shape and spread.
                if !periodic {
                    let label = format!("{shape:?} {spread:?} subsets");
                    failures += subset_case::<f64, 3>(&dist, &reference, &g, &lay, 6, false, &label);
                    failures += subset_case::<f64, 3>(&dist, &reference, &g, &lay, 1, true, &format!("{label} self k=1"));
                    failures += subset_case::<f32, 3>(&dist, &reference, &g32, &lay, 13, true, &format!("{label} self f32"));
                    cases += 3;
                }
            }
            global.clear();
        }
    }
    // Separate query sets, spread independently of the sources (ranks with queries and no
    // sources, sources and no queries, neither).
    for (si, &shape) in [Shape::Uniform, Shape::Clustered, Shape::Faces, Shape::Duplicates].iter().enumerate() {
        for periodic in [false, true] {
            let l = [1.0, 1.5, 2.0];
            let mut rng = Rng::new(900 + si as u64 * 3 + periodic as u64);
            let src: Vec<[f64; 3]> = points(shape, 2000, l, &mut rng);
            let qry: Vec<[f64; 3]> = points(if si % 2 == 0 { Shape::Clustered } else { Shape::Uniform }, 1500, l, &mut rng);
            let masses: Vec<f64> = (0..src.len()).map(|_| 0.5 + rng.f64()).collect();
            for (pi, (&ss, &qs)) in SPREADS.iter().zip(SPREADS.iter().rev()).enumerate() {
                let sx: Vec<f64> = src.iter().map(|p| p[0]).collect();
                let qx: Vec<f64> = qry.iter().map(|p| p[1]).collect();
                let slay = layout(ss, &sx, size, &mut Rng::new(31 + pi as u64));
                let qlay = layout(qs, &qx, size, &mut Rng::new(37 + pi as u64));
                for k in [1usize, 11] {
                    let label = format!("queries {shape:?} periodic={periodic} sources {ss:?} queries {qs:?} k={k}");
                    failures += run_queries::<f64, 3>(&dist, &reference, &src, &qry, &masses, &slay, &qlay, k, periodic.then_some(l), &label);
                    cases += 1;
                }
                // Cast to f32, keeping coordinates that round up to the box face inside.
                let f32_in = |v: f64, len: f64| if (v as f32) as f64 >= len { 0.0 } else { v as f32 };
                let s32: Vec<[f32; 2]> = src.iter().map(|p| [f32_in(p[0], l[0]), f32_in(p[1], l[1])]).collect();
                let q32: Vec<[f32; 2]> = qry.iter().map(|p| [f32_in(p[0], l[0]), f32_in(p[1], l[1])]).collect();
                let label = format!("queries {shape:?} {ss:?}/{qs:?} f32 2D k=6");
                failures += run_queries::<f32, 2>(&dist, &reference, &s32, &q32, &masses, &slay, &qlay, 6, periodic.then_some([l[0], l[1]]), &label);
                cases += 1;
            }
        }
    }
    // Fewer points in total than k, and tiny sets: rows padded the same way.
    for n in [1usize, 2, 5] {
        let mut rng = Rng::new(n as u64);
        let g: Vec<[f64; 3]> = points(Shape::Uniform, n, [1.0; 3], &mut rng);
        let xs: Vec<f64> = g.iter().map(|p| p[0]).collect();
        let lay = layout(Spread::Random, &xs, size, &mut rng);
        let case = Case { label: format!("tiny n={n} k=8"), k: 8, periodic: None, lay: &lay };
        failures += run_case::<f64, 3>(&dist, &reference, &g, &vec![1.0; n], &vec![0.0; n], &case, None);
        cases += 1;
    }
    let total = crate::sum_all(failures);
    if rank == 0 {
        println!("mpi_knn: {size} ranks, {cases} cases, {total} differing rows");
    }
    total
}
