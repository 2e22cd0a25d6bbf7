//! Jobs on a subset of the particles (a type mask in the C API) against the same job on a
//! copy of that subset: the same groups, tags and rows, in the caller's input indices.

use crate::common::*;
use ztree::{CatalogueOrder, Config, Context, DbscanParams, Domain, FofFields, FofParams, LinkingLength, PointClass};

#[test]
fn fof_and_dbscan_on_a_subset_equal_the_copied_subset() {
    let ctx = Context::new(Config { threads: 2, ..Default::default() }).unwrap();
    let mut rng = Rng::new(31);
    let n = 30_000;
    let pts: Vec<[f32; 3]> = points(Shape::Clustered, n, [1.0; 3], &mut rng);
    let mass: Vec<f64> = (0..n).map(|i| 1.0 + (i % 3) as f64).collect();
    let ids: Vec<u64> = (0..n as u64).map(|i| 7 * i + 3).collect();
    // Types as a simulation has them: 0 gas, 1 dark matter, 4 stars.
    let ptype: Vec<u8> = (0..n).map(|_| [0u8, 1, 1, 4][rng.below(4)]).collect();
    let dom = Domain::Periodic([1.0; 3]);
    for mask in [1u32 << 1, 1 << 4, (1 << 0) | (1 << 4)] {
        let subset: Vec<u32> = (0..n as u32).filter(|&i| mask >> ptype[i as usize] & 1 == 1).collect();
        let copy: Vec<[f32; 3]> = subset.iter().map(|&i| pts[i as usize]).collect();
        let cmass: Vec<f64> = subset.iter().map(|&i| mass[i as usize]).collect();
        let cids: Vec<u64> = subset.iter().map(|&i| ids[i as usize]).collect();
        for with_ids in [false, true] {
            let fields = FofFields::<3> { masses: Some(&mass), ids: with_ids.then_some(&ids as &dyn ztree::ParticleIds), ..Default::default() };
            let cfields = FofFields::<3> { masses: Some(&cmass), ids: with_ids.then_some(&cids as &dyn ztree::ParticleIds), ..Default::default() };
            // A tag that is an index names the subset's position in the copy, the input
            // index in the subset call.
            let tag = |t: i64| if t < 0 || with_ids { t } else { subset[t as usize] as i64 };
            let fp = FofParams { linking_length: LinkingLength::Absolute(0.004), min_members: 5, order: CatalogueOrder::Gadget, members: true };
            let mut labels = vec![0i64; n];
            let (cat, _) = ctx.fof_subset_into(&dom, &pts[..], &fields, &fp, &subset, &mut labels).unwrap();
            let want = ctx.fof(&dom, &copy[..], &cfields, &fp).unwrap();
            assert!(want.catalogue.len() > 10);
            for (j, &i) in subset.iter().enumerate() {
                assert_eq!(labels[i as usize], tag(want.labels[j]), "mask {mask:#x}");
            }
            assert_eq!(labels.iter().filter(|&&l| l >= 0).count(), want.labels.iter().filter(|&&l| l >= 0).count(), "others are -1");
            assert_eq!(cat.tag, want.catalogue.tag.iter().map(|&t| tag(t)).collect::<Vec<_>>());
            assert_eq!((&cat.count, &cat.mass, &cat.centre), (&want.catalogue.count, &want.catalogue.mass, &want.catalogue.centre));
            let members: Vec<i64> = want.catalogue.member_indices.iter().map(|&j| subset[j as usize] as i64).collect();
            assert_eq!(cat.member_indices, members);

            let dp = DbscanParams { eps: LinkingLength::Absolute(0.006), min_pts: 6, min_members: 2, members: true, ..Default::default() };
            let mut dl = vec![0i64; n];
            let mut dc = vec![PointClass::Core; n];
            let (dcat, _) = ctx.dbscan_subset_into(&dom, &pts[..], &fields, &dp, &subset, &mut dl, Some(&mut dc)).unwrap();
            let dwant = ctx.dbscan(&dom, &copy[..], &cfields, &dp).unwrap();
            assert!(dwant.stats.border > 0 && dwant.catalogue.len() > 10);
            for (j, &i) in subset.iter().enumerate() {
                assert_eq!((dl[i as usize], dc[i as usize]), (tag(dwant.labels[j]), dwant.class[j]));
            }
            for i in 0..n {
                if mask >> ptype[i] & 1 == 0 {
                    assert_eq!((dl[i], dc[i]), (-1, PointClass::Noise));
                }
            }
            assert_eq!(dcat.rows.count, dwant.catalogue.rows.count);
            assert_eq!(dcat.max_radius, dwant.catalogue.max_radius);
        }
    }
    // Bad subsets are errors.
    let mut labels = vec![0i64; n];
    let fp = FofParams { linking_length: LinkingLength::Absolute(0.004), ..Default::default() };
    for bad in [vec![3u32, 3], vec![5, 2], vec![n as u32]] {
        assert!(ctx.fof_subset_into(&dom, &pts[..], &FofFields::default(), &fp, &bad, &mut labels).is_err());
    }
}

/// kNN between type subsets equals kNN between copied subsets: a self-query on one type,
/// queries of one type among sources of another, separate query points; rows of the
/// queries left out are not computed, and indices are the caller's.
#[test]
fn knn_between_subsets_equals_the_copied_subsets() {
    use ztree::{KnnOutput, KnnParams, KnnSubset, SourceFields};
    let ctx = Context::new(Config { threads: 2, ..Default::default() }).unwrap();
    let mut rng = Rng::new(41);
    let n = 20_000;
    let pts: Vec<[f64; 3]> = points(Shape::Clustered, n, [1.0; 3], &mut rng);
    let qpts: Vec<[f64; 3]> = points(Shape::Uniform, 3000, [1.0; 3], &mut rng);
    let mass: Vec<f64> = (0..n).map(|i| 1.0 + (i % 5) as f64).collect();
    let ptype: Vec<u8> = (0..n).map(|_| [0u8, 1, 1, 4][rng.below(4)]).collect();
    let qtype: Vec<u8> = (0..qpts.len()).map(|_| [1u8, 4][rng.below(2)]).collect();
    let pick = |t: &[u8], mask: u32| -> Vec<u32> { (0..t.len() as u32).filter(|&i| mask >> t[i as usize] & 1 == 1).collect() };
    let copy = |p: &[[f64; 3]], sel: &[u32]| -> Vec<[f64; 3]> { sel.iter().map(|&i| p[i as usize]).collect() };
    let dom = Domain::Periodic([1.0; 3]);
    let k = 8;
    // (sources' mask, queries' mask, separate query points)
    for (sm, qm, separate) in [(1u32 << 1, 1u32 << 1, false), (1 << 1, 1 << 4, false), (1 << 4, 1 << 1, true), ((1 << 0) | (1 << 4), 1 << 4, true)] {
        let ssel = pick(&ptype, sm);
        let (qall, qt) = if separate { (&qpts, &qtype) } else { (&pts, &ptype) };
        let qsel = pick(qt, qm);
        let nq = qall.len();
        let (mut idx, mut dist, mut kth, mut dens) = (vec![0i64; nq * k], vec![0.0; nq * k], vec![0.0; nq], vec![0.0; nq]);
        let mut out = KnnOutput {
            indices: Some(&mut idx),
            distances: Some(&mut dist),
            kth_distance: Some(&mut kth),
            density: Some(&mut dens),
            ..Default::default()
        };
        let fields = SourceFields { masses: Some(&mass), scalar: None };
        let src = KnnSubset { points: &pts[..], sel: &ssel };
        let qry = (separate || qsel != ssel).then_some(KnnSubset { points: &qall[..], sel: &qsel[..] });
        ctx.knn_subset(&dom, src, qry, &fields, &KnnParams::new(k), &mut out).unwrap();
        // The same on copies.
        let (cs, cq) = (copy(&pts, &ssel), copy(qall, &qsel));
        let cmass: Vec<f64> = ssel.iter().map(|&i| mass[i as usize]).collect();
        let m = qsel.len();
        let (mut widx, mut wdist, mut wkth, mut wdens) = (vec![0i64; m * k], vec![0.0; m * k], vec![0.0; m], vec![0.0; m]);
        let mut wout = KnnOutput {
            indices: Some(&mut widx),
            distances: Some(&mut wdist),
            kth_distance: Some(&mut wkth),
            density: Some(&mut wdens),
            ..Default::default()
        };
        let cf = SourceFields { masses: Some(&cmass), scalar: None };
        if !separate && sm == qm {
            ctx.knn_self(&dom, &cs[..], &cf, &KnnParams::new(k), &mut wout).unwrap();
        } else {
            ctx.knn(&dom, &cs[..], &cq[..], &cf, &KnnParams::new(k), &mut wout).unwrap();
        }
        let what = format!("masks {sm:#x} / {qm:#x}, separate {separate}");
        let mut row = vec![usize::MAX; nq];
        for (j, &i) in qsel.iter().enumerate() {
            row[i as usize] = j;
        }
        for i in 0..nq {
            let r = &idx[i * k..(i + 1) * k];
            match row[i] {
                usize::MAX => {
                    assert!(r.iter().all(|&x| x == -1) && dist[i * k..(i + 1) * k].iter().all(|d| d.is_infinite()), "{what}: row {i} left out");
                    assert!(kth[i].is_infinite() && dens[i].is_nan(), "{what}: row {i} left out");
                }
                j => {
                    let want: Vec<i64> = widx[j * k..(j + 1) * k].iter().map(|&x| ssel[x as usize] as i64).collect();
                    assert_eq!(r, &want[..], "{what}: row {i}");
                    assert_eq!(&dist[i * k..(i + 1) * k], &wdist[j * k..(j + 1) * k], "{what}: distances of row {i}");
                    assert_eq!((kth[i], dens[i]), (wkth[j], wdens[j]), "{what}: row {i}");
                }
            }
        }
    }
    // No sources selected: an error, as kNN without sources.
    let mut idx = vec![0i64; n];
    let mut out = KnnOutput { indices: Some(&mut idx), ..Default::default() };
    let none: Vec<u32> = Vec::new();
    let all: Vec<u32> = (0..n as u32).collect();
    let e = ctx.knn_subset(
        &dom,
        KnnSubset { points: &pts[..], sel: &none },
        Some(KnnSubset { points: &pts[..], sel: &all[..] }),
        &SourceFields::default(),
        &KnnParams::new(1),
        &mut out,
    );
    assert!(matches!(e, Err(ztree::Error::NoSources)));
}

/// Radius queries between subsets equal the call on copies of them: counts, sums and
/// densities bit for bit, lists in the caller's indices; the queries left out are not
/// computed (count -1, NaN, empty list).
#[test]
fn radius_between_subsets_equals_the_copied_subsets() {
    use ztree::{KnnSubset, ListOrder, RadiusOutput, RadiusParams, ScalarField, SourceFields};
    let ctx = Context::new(Config { threads: 2, ..Default::default() }).unwrap();
    let mut rng = Rng::new(37);
    let n = 6000;
    let pts: Vec<[f64; 3]> = points(Shape::Clustered, n, [1.0; 3], &mut rng);
    let mass: Vec<f64> = (0..n).map(|i| 1.0 + (i % 5) as f64).collect();
    let h: Vec<f64> = (0..n).map(|_| 0.02 + 0.03 * rng.f64()).collect();
    let ptype: Vec<u8> = (0..n).map(|_| [0u8, 1, 1, 4][rng.below(4)]).collect();
    let dom = Domain::Periodic([1.0; 3]);
    let pick = |m: u32| -> Vec<u32> { (0..n as u32).filter(|&i| m >> ptype[i as usize] & 1 == 1).collect() };
    for (smask, qmask) in [(1u32 << 1, 1u32 << 1), (1 << 1, 1 << 4), ((1 << 0) | (1 << 4), 1 << 0)] {
        let (ssel, qsel) = (pick(smask), pick(qmask));
        let cs: Vec<[f64; 3]> = ssel.iter().map(|&i| pts[i as usize]).collect();
        let cq: Vec<[f64; 3]> = qsel.iter().map(|&i| pts[i as usize]).collect();
        let cm: Vec<f64> = ssel.iter().map(|&i| mass[i as usize]).collect();
        let ch: Vec<f64> = qsel.iter().map(|&i| h[i as usize]).collect();
        for per_query in [false, true] {
            fn base(r: &dyn ScalarField, per_query: bool) -> RadiusParams<'_> {
                if per_query { RadiusParams::per_query(r) } else { RadiusParams::new(0.03) }
            }
            // Reference: the copies.
            let (mut wc, mut wd) = (vec![0i64; qsel.len()], vec![0.0f64; qsel.len()]);
            let p = RadiusParams { list_distances: true, ..base(&ch, per_query).with_lists(ListOrder::Distance) };
            let cf = SourceFields { masses: Some(&cm), scalar: Some(&cm) };
            let mut out = RadiusOutput { counts: Some(&mut wc), density: Some(&mut wd), ..Default::default() };
            let want =
                if smask == qmask { ctx.radius_self(&dom, &cs, &cf, &p, &mut out) } else { ctx.radius(&dom, &cs, &cq, &cf, &p, &mut out) }.unwrap();
            let wl = want.lists.unwrap();
            // The subset call on the whole arrays.
            let (mut gc, mut gd) = (vec![7i64; n], vec![7.0f64; n]);
            let p = RadiusParams { list_distances: true, ..base(&h, per_query).with_lists(ListOrder::Distance) };
            let f = SourceFields { masses: Some(&mass), scalar: Some(&mass) };
            let mut out = RadiusOutput { counts: Some(&mut gc), density: Some(&mut gd), ..Default::default() };
            let got = ctx
                .radius_subset(
                    &dom,
                    KnnSubset { points: &pts, sel: &ssel },
                    Some(KnnSubset { points: &pts, sel: &qsel }).filter(|_| smask != qmask),
                    &f,
                    &p,
                    &mut out,
                )
                .unwrap();
            let gl = got.lists.unwrap();
            assert_eq!(gl.offsets.len(), n + 1);
            let mut j = 0;
            for i in 0..n {
                if qsel.get(j) == Some(&(i as u32)) {
                    assert_eq!(gc[i], wc[j], "count of query {i}");
                    assert_eq!(gd[i].to_bits(), wd[j].to_bits(), "density of query {i}");
                    let mapped: Vec<i64> = wl.of(j).iter().map(|&v| ssel[v as usize] as i64).collect();
                    assert_eq!(gl.of(i), &mapped[..], "list of query {i}");
                    let (a, b) = (gl.offsets[i] as usize, wl.offsets[j] as usize);
                    assert_eq!(gl.distances[a..a + mapped.len()], wl.distances[b..b + mapped.len()], "distances of query {i}");
                    j += 1;
                } else {
                    assert!(gc[i] == -1 && gd[i].is_nan() && gl.of(i).is_empty(), "query {i} left out");
                }
            }
        }
    }
}
