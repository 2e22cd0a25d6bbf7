//! DBSCAN against a verifier of the rules on the explicit ε-graph (built by brute force):
//! core iff |N_ε| >= min_pts; core points share a cluster iff ε-connected through core
//! points; each border point is in the cluster of its nearest core point (ties: the
//! smaller index); noise has no core neighbour; tags are the smallest member index. Over
//! shapes (duplicates, lattices at spacing ε, faces and periodic wrap, lines, clumps of
//! exactly min_pts), precisions, dimensions and thread counts; min_pts = 2 against FoF.

use crate::common::*;
use ztree::{
    BorderPoints, CatalogueOrder, Config, Context, DbscanParams, Domain, Error, FofFields, FofParams, LinkingLength, PointClass, Real, TreeParams,
};

fn ctx(threads: usize, leaf: usize) -> Context {
    Context::new(Config { threads, tree: TreeParams { leaf_size: leaf, top_target: 16, super_group: 4, ..Default::default() } }).unwrap()
}

/// FoF's link by hand: f64 from the input coordinates, minimum image per dimension.
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

fn params(eps: f64, min_pts: usize) -> DbscanParams {
    DbscanParams {
        eps: LinkingLength::Absolute(eps),
        min_pts,
        min_members: 1,
        order: CatalogueOrder::ZOrder,
        members: true,
        border: BorderPoints::NearestCore,
    }
}

/// Checks every DBSCAN rule on the explicit ε-graph; returns the number of core points.
fn verify<T: Real, const D: usize>(
    pts: &[[T; D]],
    box_len: Option<[f64; D]>,
    eps: f64,
    min_pts: usize,
    labels: &[i64],
    class: &[PointClass],
    what: &str,
) -> usize {
    let n = pts.len();
    let eps2 = eps * eps;
    let nbrs: Vec<Vec<usize>> = (0..n).map(|i| (0..n).filter(|&j| d2(&pts[i], &pts[j], box_len) <= eps2).collect()).collect();
    let core: Vec<bool> = nbrs.iter().map(|v| v.len() >= min_pts).collect();
    // Clusters of the core points: components of the core-core ε-graph.
    let mut root: Vec<usize> = (0..n).collect();
    fn find(r: &mut [usize], mut x: usize) -> usize {
        while r[x] != x {
            r[x] = r[r[x]];
            x = r[x];
        }
        x
    }
    for i in 0..n {
        if core[i] {
            for &j in &nbrs[i] {
                if core[j] {
                    let (a, b) = (find(&mut root, i), find(&mut root, j));
                    root[a.max(b)] = a.min(b);
                }
            }
        }
    }
    let comp: Vec<usize> = (0..n).map(|i| find(&mut root, i)).collect();
    // Each point's expected cluster (its core component, or its nearest core point's).
    let mut expect: Vec<Option<usize>> = vec![None; n];
    for i in 0..n {
        if core[i] {
            expect[i] = Some(comp[i]);
        } else if let Some(&c) = nbrs[i]
            .iter()
            .filter(|&&j| core[j])
            .min_by(|&&a, &&b| d2(&pts[i], &pts[a], box_len).total_cmp(&d2(&pts[i], &pts[b], box_len)).then(a.cmp(&b)))
        {
            expect[i] = Some(comp[c]);
        }
    }
    // Expected tags: the smallest member index per cluster.
    let mut tag = vec![usize::MAX; n];
    for i in 0..n {
        if let Some(c) = expect[i] {
            tag[c] = tag[c].min(i);
        }
    }
    for i in 0..n {
        let want_class = if core[i] {
            PointClass::Core
        } else if expect[i].is_some() {
            PointClass::Border
        } else {
            PointClass::Noise
        };
        assert_eq!(class[i], want_class, "{what}: class of point {i} ({} neighbours, min_pts {min_pts})", nbrs[i].len());
        let want = expect[i].map_or(-1, |c| tag[c] as i64);
        assert_eq!(labels[i], want, "{what}: label of point {i} ({want_class:?})");
    }
    core.iter().filter(|&&c| c).count()
}

fn run<T: Real, const D: usize>(c: &Context, pts: &[[T; D]], box_len: Option<[f64; D]>, p: &DbscanParams) -> ztree::Dbscan<D> {
    let dom = box_len.map_or(Domain::Open, Domain::Periodic);
    c.dbscan(&dom, pts, &FofFields::default(), p).unwrap()
}

fn sweep<T: Real, const D: usize>(seed0: u64) {
    let c = ctx(2, 8);
    let mut seed = seed0;
    for &shape in &SHAPES {
        for periodic in [false, true] {
            if periodic && shape == Shape::GaussianOutliers {
                continue;
            }
            for &n in &[1usize, 7, 300, 900] {
                seed += 1;
                let mut rng = Rng::new(seed);
                let l = [1.0; D];
                let pts: Vec<[T; D]> = points(shape, n, l, &mut rng);
                let box_len = periodic.then_some(l);
                let sep = (1.0 / n as f64).powf(1.0 / D as f64);
                for (eps, min_pts) in [(0.6 * sep, 2), (1.0 * sep, 3), (1.5 * sep, 10), (sep, 5)] {
                    let eps = if shape == Shape::GaussianOutliers { eps * 2e-3 } else { eps };
                    let r = run(&c, &pts, box_len, &params(eps, min_pts));
                    let what = format!("{shape:?} n={n} periodic={periodic} eps={eps} min_pts={min_pts} {}D f{}", D, 8 * std::mem::size_of::<T>());
                    let core = verify(&pts, box_len, eps, min_pts, &r.labels, &r.class, &what);
                    assert_eq!(r.stats.core, core, "{what}: core count");
                    // The catalogue's rows: one per cluster, counts as the labels say.
                    let rows = &r.catalogue.rows;
                    let mut tags: Vec<i64> = r.labels.iter().copied().filter(|&l| l >= 0).collect();
                    tags.sort_unstable();
                    tags.dedup();
                    assert_eq!(rows.len(), tags.len(), "{what}: rows");
                    for g in 0..rows.len() {
                        let m = rows.members(g);
                        assert_eq!(m.len() as u64, rows.count[g], "{what}: members");
                        assert!(m.iter().all(|&i| r.labels[i as usize] == rows.tag[g]) && m[0] == rows.tag[g], "{what}: member labels");
                        let cores = m.iter().filter(|&&i| r.class[i as usize] == PointClass::Core).count() as u64;
                        assert_eq!(r.catalogue.core_count[g], cores, "{what}: core members");
                    }
                }
            }
        }
    }
}

#[test]
fn dbscan_rules_hold_f64_3d() {
    sweep::<f64, 3>(100);
}

#[test]
fn dbscan_rules_hold_f32_3d() {
    sweep::<f32, 3>(200);
}

#[test]
fn dbscan_rules_hold_f64_2d() {
    sweep::<f64, 2>(300);
}

#[test]
fn dbscan_rules_hold_f32_2d() {
    sweep::<f32, 2>(400);
}

/// A lattice of spacing exactly ε: every point has its 2D + 1 lattice neighbours at
/// distance ε (inclusive), and min_pts around that count flips core points.
#[test]
fn dbscan_lattice_at_exactly_eps() {
    let c = ctx(2, 8);
    for periodic in [false, true] {
        let side = 12;
        let eps = 1.0 / side as f64;
        let pts: Vec<[f64; 3]> =
            (0..side * side * side).map(|i| [(i % side) as f64 * eps, ((i / side) % side) as f64 * eps, (i / side / side) as f64 * eps]).collect();
        let box_len = periodic.then_some([1.0; 3]);
        for min_pts in [2, 4, 6, 7, 8] {
            let r = run(&c, &pts, box_len, &params(eps, min_pts));
            verify(&pts, box_len, eps, min_pts, &r.labels, &r.class, &format!("lattice periodic={periodic} min_pts={min_pts}"));
        }
        // f32 lattice: distances at ε up to rounding, decided by FoF's f64 test.
        let p32: Vec<[f32; 3]> = pts.iter().map(|p| p.map(|x| x as f32)).collect();
        for min_pts in [6, 7] {
            let r = run(&c, &p32, box_len, &params(eps, min_pts));
            verify(&p32, box_len, eps, min_pts, &r.labels, &r.class, &format!("f32 lattice periodic={periodic} min_pts={min_pts}"));
        }
        // ε a hair below the f32 lattice's f64 spacing: every decision is within f32
        // rounding of ε, decided by the f64 test.
        let h = d2(&p32[0], &p32[1], box_len).sqrt();
        for (e, min_pts) in [(h * (1.0 - 1e-9), 2), (h * (1.0 - 1e-9), 3), (h * (1.0 - 1e-9), 7), (h, 7)] {
            let r = run(&c, &p32, box_len, &params(e, min_pts));
            verify(&p32, box_len, e, min_pts, &r.labels, &r.class, &format!("f32 lattice, eps {e}, periodic={periodic} min_pts={min_pts}"));
        }
    }
}

/// Clumps of exactly min_pts identical points far apart: core at min_pts, noise above.
#[test]
fn dbscan_clumps_of_exactly_min_pts() {
    let c = ctx(2, 8);
    for m in [2usize, 3, 10, 33] {
        let mut pts: Vec<[f64; 3]> = Vec::new();
        for g in 0..20 {
            let x = 0.02 + 0.045 * g as f64;
            pts.extend(std::iter::repeat_n([x, 0.5, 0.5], m));
        }
        for (min_pts, clusters) in [(m, 20), (m + 1, 0)] {
            let r = run(&c, &pts, Some([1.0; 3]), &params(0.01, min_pts));
            verify(&pts, Some([1.0; 3]), 0.01, min_pts, &r.labels, &r.class, &format!("clumps of {m}, min_pts {min_pts}"));
            assert_eq!(r.catalogue.len(), clusters);
        }
    }
}

/// A border point exactly ε from two core points of different clusters joins the cluster
/// of the smaller index, whatever the thread count. (Binary-exact coordinates: the two
/// distances are equal.)
#[test]
fn dbscan_border_ties_are_defined() {
    let eps = 0.125;
    // Core C2 at x = 0.625 (index 0) with 5 points at 0.75; core C1 at 0.375 (index 6)
    // with 5 points at 0.25; B at 0.5: neighbours B, C1, C2 only (3 < min_pts = 4).
    let mut pts: Vec<[f64; 2]> = vec![[0.625, 0.5]];
    pts.extend(std::iter::repeat_n([0.75, 0.5], 5));
    pts.push([0.375, 0.5]);
    pts.extend(std::iter::repeat_n([0.25, 0.5], 5));
    pts.push([0.5, 0.5]);
    // D: ε/2 above C2, nothing else near: a border point of C2 alone.
    pts.push([0.625, 0.5625]);
    for threads in [1, 2] {
        let c = ctx(threads, 4);
        let r = run(&c, &pts, None, &params(eps, 4));
        verify(&pts, None, eps, 4, &r.labels, &r.class, "border ties");
        assert_eq!((r.class[0], r.class[6], r.class[12], r.class[13]), (PointClass::Core, PointClass::Core, PointClass::Border, PointClass::Border));
        assert_eq!((r.labels[12], r.labels[13], r.labels[6]), (0, 0, 6), "the tie goes to the core point of smaller index");
        // DBSCAN*: border points are noise; the rest is unchanged.
        let star = DbscanParams { border: BorderPoints::Noise, ..params(eps, 4) };
        let s = run(&c, &pts, None, &star);
        assert_eq!((s.labels[12], s.labels[13], s.class[12]), (-1, -1, PointClass::Border));
        assert_eq!(&s.labels[..12], &r.labels[..12]);
    }
}

/// min_pts = 2 is FoF with groups of two or more: the same labels, exactly.
#[test]
fn dbscan_min_pts_2_is_fof() {
    let c = ctx(2, 0);
    let mut rng = Rng::new(77);
    for shape in [Shape::Clustered, Shape::Uniform, Shape::Duplicates, Shape::Faces] {
        let pts: Vec<[f32; 3]> = points(shape, 20_000, [1.0; 3], &mut rng);
        let dom = Domain::Periodic([1.0; 3]);
        let fof = c
            .fof(
                &dom,
                &pts[..],
                &FofFields::default(),
                &FofParams { linking_length: LinkingLength::Relative(0.2), min_members: 2, ..Default::default() },
            )
            .unwrap();
        let db = c
            .dbscan(&dom, &pts[..], &FofFields::default(), &DbscanParams { eps: LinkingLength::Relative(0.2), min_pts: 2, ..Default::default() })
            .unwrap();
        assert_eq!(db.labels, fof.labels, "{shape:?}");
        assert_eq!(db.stats.border, 0);
        assert_eq!(db.catalogue.len(), fof.catalogue.len());
        assert_eq!(db.catalogue.rows.count, fof.catalogue.count, "{shape:?}: rows in the same z-order");
        assert_eq!(db.catalogue.rows.tag, fof.catalogue.tag);
        assert_eq!(db.catalogue.rows.centre, fof.catalogue.centre);
    }
}

/// The same results for any thread count and tree shape, on a larger clustered set.
#[test]
fn dbscan_independent_of_threads_and_tree() {
    let mut rng = Rng::new(5);
    let pts: Vec<[f32; 3]> = points(Shape::Clustered, 60_000, [1.0; 3], &mut rng);
    let dom = Domain::Periodic([1.0; 3]);
    let p = DbscanParams { eps: LinkingLength::Relative(0.2), min_pts: 10, order: CatalogueOrder::Gadget, members: true, ..Default::default() };
    let base = ctx(1, 0).dbscan(&dom, &pts[..], &FofFields::default(), &p).unwrap();
    assert!(base.stats.core > 1000 && base.stats.border > 100 && base.catalogue.len() > 10, "{:?}", base.stats);
    for (threads, leaf) in [(2, 0), (2, 16), (3, 200)] {
        let r = ctx(threads, leaf).dbscan(&dom, &pts[..], &FofFields::default(), &p).unwrap();
        assert_eq!(r.labels, base.labels);
        assert_eq!(r.class, base.class);
        assert_eq!(r.catalogue, base.catalogue);
    }
}

/// The catalogue's columns against a direct computation from the labels.
#[test]
fn dbscan_catalogue_columns() {
    let mut rng = Rng::new(9);
    let bl = [1.0; 3];
    let pts: Vec<[f64; 3]> = points(Shape::Clustered, 5000, bl, &mut rng);
    let mass: Vec<f64> = (0..pts.len()).map(|i| 1.0 + (i % 7) as f64).collect();
    let ids: Vec<i64> = (0..pts.len() as i64).map(|i| 1_000_000 - 3 * i).collect();
    let vel: Vec<[f64; 3]> = (0..pts.len()).map(|i| [i as f64 * 1e-3, 1.0, -(i as f64)]).collect();
    let fields = FofFields::<3> { masses: Some(&mass), ids: Some(&ids), velocities: Some(&vel), particle_mass: 1.0 };
    let p = DbscanParams { eps: LinkingLength::Relative(0.3), min_pts: 5, min_members: 8, members: true, ..Default::default() };
    let r = ctx(2, 0).dbscan(&Domain::Periodic(bl), &pts[..], &fields, &p).unwrap();
    let cat = &r.catalogue;
    assert!(cat.len() > 5);
    for g in 0..cat.len() {
        let m = cat.rows.members(g);
        assert!(m.len() >= 8);
        assert_eq!(cat.rows.tag[g], m.iter().map(|&i| ids[i as usize]).min().unwrap());
        let mt: f64 = m.iter().map(|&i| mass[i as usize]).sum();
        assert!((cat.rows.mass[g] - mt).abs() <= 1e-12 * mt);
        // Every member within max_radius of the centre, one at it.
        let c = cat.rows.centre[g];
        let far = m.iter().map(|&i| d2(&pts[i as usize], &c, Some(bl)).sqrt()).fold(0.0, f64::max);
        assert!((far - cat.max_radius[g]).abs() <= 1e-12, "{far} {}", cat.max_radius[g]);
        assert!(cat.rows.velocity[g][1] > 0.999999 && cat.rows.velocity[g][1] < 1.000001);
    }
    for i in 0..pts.len() {
        if r.labels[i] >= 0 {
            assert!(r.class[i] != PointClass::Noise);
        }
    }
}

#[test]
fn dbscan_bad_input_is_an_error() {
    let c = ctx(1, 0);
    let pts = vec![[0.5f64, 0.5, 0.5]; 10];
    let dom = Domain::Periodic([1.0; 3]);
    let bad = |p: DbscanParams| c.dbscan(&dom, &pts[..], &FofFields::default(), &p).unwrap_err();
    assert!(matches!(bad(DbscanParams { min_pts: 0, ..params(0.1, 2) }), Error::InvalidParameter { name: "min_pts", .. }));
    assert!(matches!(bad(DbscanParams { min_members: 0, ..params(0.1, 2) }), Error::InvalidParameter { name: "min_members", .. }));
    assert!(matches!(bad(params(-1.0, 2)), Error::InvalidParameter { .. }));
    assert!(matches!(bad(params(f64::NAN, 2)), Error::InvalidParameter { .. }));
    let mut nan = pts.clone();
    nan[3][1] = f64::NAN;
    assert!(matches!(c.dbscan(&dom, &nan[..], &FofFields::default(), &params(0.1, 2)), Err(Error::NonFinite { .. })));
    let mut out = pts.clone();
    out[2][0] = 1.5;
    assert!(matches!(c.dbscan(&dom, &out[..], &FofFields::default(), &params(0.1, 2)), Err(Error::OutsideBox { .. })));
    // Empty and single inputs.
    let none: Vec<[f64; 3]> = Vec::new();
    let r = c.dbscan(&dom, &none[..], &FofFields::default(), &params(0.1, 2)).unwrap();
    assert!(r.labels.is_empty() && r.catalogue.is_empty());
    let r = c.dbscan(&dom, &pts[..1], &FofFields::default(), &params(0.1, 1)).unwrap();
    assert_eq!((r.labels[0], r.class[0]), (0, PointClass::Core));
}
