//! FoF against brute-force oracles: partitions compared exactly as sets of members, over
//! many shapes, sizes, precisions, dimensions, boundary conditions and thread counts; the
//! catalogue against a direct f64 computation per group; bad input.

use crate::common::*;
use ztree::{CatalogueOrder, Config, Context, Domain, Error, FofFields, FofParams, LinkingLength, Real, TreeParams};

fn small_tree(threads: usize, leaf: usize) -> Context {
    Context::new(Config { threads, tree: TreeParams { leaf_size: leaf, top_target: 16, super_group: 4, ..Default::default() } }).unwrap()
}

/// The linking rule of the spec, by hand: f64 from the input coordinates, minimum image
/// per dimension (subtract L once when |dx| > L/2), `(dx² + dy²) + dz² <= l²`.
fn linked<T: Real, const D: usize>(a: &[T; D], b: &[T; D], box_len: Option<[f64; D]>, l2: f64) -> bool {
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
    s <= l2
}

struct Dsu(Vec<usize>);
impl Dsu {
    fn new(n: usize) -> Self {
        Dsu((0..n).collect())
    }
    fn find(&mut self, mut x: usize) -> usize {
        while self.0[x] != x {
            self.0[x] = self.0[self.0[x]];
            x = self.0[x];
        }
        x
    }
    fn union(&mut self, a: usize, b: usize) {
        let (a, b) = (self.find(a), self.find(b));
        if a != b {
            let (lo, hi) = if a < b { (a, b) } else { (b, a) };
            self.0[hi] = lo;
        }
    }
    /// Per element: the smallest member of its set.
    fn canon(mut self) -> Vec<usize> {
        let n = self.0.len();
        (0..n).map(|i| self.find(i)).collect()
    }
}

/// Oracle partition: per point, the smallest input index of its group. All pairs for small
/// inputs, a cell grid (cells at least l wide) for large ones.
fn oracle<T: Real, const D: usize>(pts: &[[T; D]], box_len: Option<[f64; D]>, l: f64) -> Vec<usize> {
    let n = pts.len();
    let l2 = l * l;
    let mut dsu = Dsu::new(n);
    let grid: Option<[usize; D]> = box_len.and_then(|bl| {
        let c: [usize; D] = std::array::from_fn(|d| ((bl[d] / l).floor() as usize).min(256));
        (n > 3000 && c.iter().all(|&c| c >= 3)).then_some(c)
    });
    match (grid, box_len) {
        (Some(cells), Some(bl)) => {
            let cell_of =
                |p: &[T; D]| -> [usize; D] { std::array::from_fn(|d| ((p[d].to_f64() / bl[d] * cells[d] as f64) as usize).min(cells[d] - 1)) };
            let flat = |c: &[usize; D]| -> usize {
                let mut f = 0;
                for d in (0..D).rev() {
                    f = f * cells[d] + c[d];
                }
                f
            };
            let total: usize = cells.iter().product();
            let mut buckets: Vec<Vec<usize>> = vec![Vec::new(); total];
            for (i, p) in pts.iter().enumerate() {
                buckets[flat(&cell_of(p))].push(i);
            }
            let nb = 3usize.pow(D as u32);
            for (i, p) in pts.iter().enumerate() {
                let c = cell_of(p);
                for k in 0..nb {
                    let mut kk = k;
                    let o: [usize; D] = std::array::from_fn(|d| {
                        let s = kk % 3;
                        kk /= 3;
                        (c[d] + cells[d] + s - 1) % cells[d]
                    });
                    for &j in &buckets[flat(&o)] {
                        if j > i && linked(p, &pts[j], box_len, l2) {
                            dsu.union(i, j);
                        }
                    }
                }
            }
        }
        _ => {
            for i in 0..n {
                for j in i + 1..n {
                    if linked(&pts[i], &pts[j], box_len, l2) {
                        dsu.union(i, j);
                    }
                }
            }
        }
    }
    dsu.canon()
}

/// Canonical partition of ztree labels (min_members = 1: every point has a label).
fn canon_labels(labels: &[i64]) -> Vec<usize> {
    let mut first: std::collections::HashMap<i64, usize> = std::collections::HashMap::new();
    labels
        .iter()
        .enumerate()
        .map(|(i, &t)| {
            assert!(t >= 0, "point {i} has no label with min_members = 1");
            *first.entry(t).or_insert(i)
        })
        .collect()
}

fn params(l: LinkingLength, min_members: usize) -> FofParams {
    FofParams { linking_length: l, min_members, ..Default::default() }
}

/// Runs FoF and checks the partition against the oracle; returns the labels.
fn check<T: Real, const D: usize>(c: &Context, pts: &[[T; D]], box_len: Option<[f64; D]>, l: f64, label: &str) -> Vec<i64> {
    let domain = box_len.map_or(Domain::Open, Domain::Periodic);
    let v = pts.to_vec();
    let res = c.fof(&domain, &v, &FofFields::default(), &params(LinkingLength::Absolute(l), 1)).unwrap_or_else(|e| panic!("{label}: {e}"));
    let got = canon_labels(&res.labels);
    let exp = oracle(pts, box_len, l);
    if got != exp {
        let bad = (0..pts.len()).find(|&i| got[i] != exp[i]).unwrap();
        panic!("{label}: partitions differ first at point {bad} ({:?}): ztree group of {}, oracle group of {}", pts[bad], got[bad], exp[bad]);
    }
    // Without ids the tag is the smallest input index of the group.
    for (i, &t) in res.labels.iter().enumerate() {
        assert_eq!(t as usize, exp[i], "{label}: tag of point {i}");
    }
    let ngroups = (0..pts.len()).filter(|&i| exp[i] == i).count();
    assert_eq!(res.stats.groups_total, ngroups, "{label}: group count");
    assert_eq!(res.catalogue.len(), ngroups, "{label}: catalogue rows");
    res.labels
}

fn sweep<T: Real, const D: usize>(seed0: u64) {
    let ctxs = [small_tree(2, 4), small_tree(1, 8)];
    let sizes = [0usize, 1, 2, 3, 7, 40, 300, 1500];
    let mut seed = seed0;
    for &shape in &SHAPES {
        for &n in &sizes {
            for &periodic in &[false, true] {
                if periodic && shape == Shape::GaussianOutliers {
                    continue;
                }
                seed += 1;
                let mut rng = Rng::new(seed);
                let bl: [f64; D] = std::array::from_fn(|d| 1.0 + 0.5 * d as f64);
                let pts: Vec<[T; D]> = points(shape, n, bl, &mut rng);
                let vol: f64 = bl.iter().product();
                let sep = (vol / n.max(1) as f64).powf(1.0 / D as f64);
                // b = 0.05: leaves many l long (the leaf pass's sort-and-sweep path);
                // 0.2 and 0.7: short leaves, all pairs.
                for (k, &b) in [0.05f64, 0.2, 0.7].iter().enumerate() {
                    let l = if shape == Shape::GaussianOutliers { b * 2e-3 } else { b * sep };
                    let c = &ctxs[(k + n) % 2];
                    let label = format!("{} D={D} {shape:?} n={n} periodic={periodic} l={l}", T::NAME);
                    check(c, &pts, periodic.then_some(bl), l, &label);
                }
            }
        }
    }
}

#[test]
fn fof_exact_f64_3d() {
    sweep::<f64, 3>(100);
}

#[test]
fn fof_exact_f32_3d() {
    sweep::<f32, 3>(200);
}

#[test]
fn fof_exact_f64_2d() {
    sweep::<f64, 2>(300);
}

#[test]
fn fof_exact_f32_2d() {
    sweep::<f32, 2>(400);
}

/// Points on a line exactly l apart are linked (inclusive rule); just over l apart they are not.
#[test]
fn fof_chains_at_and_just_over_l() {
    let c = small_tree(2, 4);
    let l = 1.0 / 64.0;
    // Exactly l apart (exact in binary): one group, open and periodic (wrapping the box).
    let chain: Vec<[f64; 3]> = (0..64).map(|i| [i as f64 * l, 0.5, 0.25]).collect();
    let lab = check(&c, &chain, None, l, "exact chain open");
    assert!(lab.iter().all(|&t| t == 0), "exact chain must be one group");
    let lab = check(&c, &chain, Some([1.0; 3]), l, "exact chain periodic");
    assert!(lab.iter().all(|&t| t == 0));
    let chain32: Vec<[f32; 3]> = chain.iter().map(|p| [p[0] as f32, p[1] as f32, p[2] as f32]).collect();
    let lab = check(&c, &chain32, Some([1.0; 3]), l, "exact chain f32");
    assert!(lab.iter().all(|&t| t == 0));
    // A chain in every dimension, shuffled.
    for d in 0..3 {
        let mut pts: Vec<[f64; 3]> = (0..64)
            .map(|i| {
                let mut p = [0.3, 0.6, 0.9];
                p[d] = i as f64 * l;
                p
            })
            .collect();
        let mut rng = Rng::new(d as u64);
        for i in (1..pts.len()).rev() {
            pts.swap(i, rng.below(i + 1));
        }
        let lab = check(&c, &pts, Some([1.0; 3]), l, &format!("shuffled chain dim {d}"));
        assert!(lab.iter().all(|&t| t == lab[0]));
    }
    // Just over l apart: every point alone.
    let gap = l * (1.0 + 1e-12);
    let chain: Vec<[f64; 3]> = (0..50).map(|i| [i as f64 * gap, 0.5, 0.25]).collect();
    let lab = check(&c, &chain, None, l, "chain just over l");
    assert!(lab.iter().enumerate().all(|(i, &t)| t == i as i64), "no links just over l");
    // Next float above l in f32 coordinates.
    let l32 = 0.125f32;
    let mut pts: Vec<[f32; 2]> = vec![[0.0, 0.0]];
    for _ in 0..7 {
        let last = pts.last().unwrap()[0];
        let mut x = last + l32;
        while ((x as f64) - (last as f64)) <= l32 as f64 {
            x = f32::from_bits(x.to_bits() + 1);
        }
        pts.push([x, 0.0]);
    }
    let lab = check(&c, &pts, None, l32 as f64, "f32 chain one ulp over");
    assert!(lab.iter().enumerate().all(|(i, &t)| t == i as i64));
}

/// Groups across every face, edge and corner of a periodic box.
#[test]
fn fof_groups_wrap_faces_and_corners() {
    let bl = [1.0, 2.0, 0.5];
    for threads in [1usize, 2] {
        let c = small_tree(threads, 4);
        let mut rng = Rng::new(77);
        let mut pts: Vec<[f64; 3]> = Vec::new();
        // A small blob at the corner, the edge midpoints, face centres and the centre of
        // the box (the first seven straddle faces, edges or the corner).
        for k in 0..8 {
            let centre: [f64; 3] = std::array::from_fn(|d| if k >> d & 1 == 1 { 0.5 * bl[d] } else { 0.0 });
            for _ in 0..12 {
                let p: [f64; 3] = std::array::from_fn(|d| (centre[d] + (rng.f64() - 0.5) * 0.04).rem_euclid(bl[d]));
                pts.push(std::array::from_fn(|d| if p[d] >= bl[d] { 0.0 } else { p[d] }));
            }
        }
        for &l in &[0.01, 0.02, 0.05] {
            check(&c, &pts, Some(bl), l, &format!("wrap blobs l={l}"));
        }
        // The corner blob is one group at l = 0.05 only through the wrap.
        let corner: Vec<[f64; 3]> = vec![
            [0.001, 0.001, 0.001],
            [bl[0] - 0.001, bl[1] - 0.001, bl[2] - 0.001],
            [0.001, bl[1] - 0.001, 0.001],
            [bl[0] - 0.001, 0.001, bl[2] - 0.001],
        ];
        let lab = check(&c, &corner, Some(bl), 0.01, "corner");
        assert!(lab.iter().all(|&t| t == 0));
        let lab = check(&c, &corner, None, 0.01, "corner open");
        assert!(lab.iter().enumerate().all(|(i, &t)| t == i as i64));
        let c32: Vec<[f32; 3]> = corner.iter().map(|p| [p[0] as f32, p[1] as f32, p[2] as f32]).collect();
        check(&c, &c32, Some(bl), 0.01, "corner f32");
    }
}

/// Identical points, lattices with spacing exactly l, tiny inputs.
#[test]
fn fof_degenerate_inputs() {
    let c = small_tree(2, 4);
    let same: Vec<[f64; 3]> = vec![[0.25, 0.5, 0.75]; 100];
    let lab = check(&c, &same, None, 1e-9, "identical");
    assert!(lab.iter().all(|&t| t == 0));
    let same32: Vec<[f32; 2]> = vec![[0.0, 0.0]; 33];
    check(&c, &same32, Some([1.0; 2]), 0.1, "identical f32 2D at the origin");
    // Lattice of spacing exactly l: everything linked (through the wrap too).
    let side = 12;
    let l = 1.0 / 16.0;
    let lat: Vec<[f64; 3]> =
        (0..side * side * side).map(|i| [(i % side) as f64 * l, ((i / side) % side) as f64 * l, (i / side / side) as f64 * l]).collect();
    let lab = check(&c, &lat, None, l, "lattice open");
    assert!(lab.iter().all(|&t| t == 0));
    check(&c, &lat, Some([1.0; 3]), l, "lattice periodic");
    // Just under the spacing: nothing linked.
    let lab = check(&c, &lat, None, l * (1.0 - 1e-12), "lattice under l");
    assert!(lab.iter().enumerate().all(|(i, &t)| t == i as i64));
    let full: Vec<[f32; 3]> = (0..16 * 16 * 16).map(|i| [(i % 16) as f32 / 16.0, ((i / 16) % 16) as f32 / 16.0, (i / 256) as f32 / 16.0]).collect();
    let lab = check(&c, &full, Some([1.0; 3]), l, "full periodic lattice f32");
    assert!(lab.iter().all(|&t| t == 0));
    for n in 0..4 {
        let pts: Vec<[f64; 3]> = (0..n).map(|i| [0.1 * i as f64, 0.2, 0.3]).collect();
        for &l in &[0.05, 0.1, 0.3] {
            check(&c, &pts, None, l, &format!("tiny n={n} l={l}"));
            check(&c, &pts, Some([1.0; 3]), l, &format!("tiny periodic n={n} l={l}"));
        }
    }
}

/// Leaves on both sides of the 64 points the leaf passes hold as bit masks (up to 64:
/// adjacency rows and hit masks; above: the per-pair path), 64 exactly included: every
/// shape, open and periodic, f64 and f32, at linking lengths that link a few, most and
/// all pairs of a leaf.
#[test]
fn fof_exact_around_the_64_point_leaf_masks() {
    for (i, &leaf) in [48usize, 64, 65, 96].iter().enumerate() {
        let c = small_tree(2, leaf);
        for (k, &shape) in SHAPES.iter().enumerate() {
            for periodic in [false, true] {
                if periodic && shape == Shape::GaussianOutliers {
                    continue;
                }
                let mut rng = Rng::new(4000 + 100 * i as u64 + 2 * k as u64 + periodic as u64);
                let bl = [1.0, 1.25, 0.75];
                let pts: Vec<[f64; 3]> = points(shape, 2000, bl, &mut rng);
                let sep = (bl.iter().product::<f64>() / 2000.0).cbrt();
                for b in [0.1, 0.35, 1.5] {
                    let l = if shape == Shape::GaussianOutliers { b * 2e-3 } else { b * sep };
                    let label = format!("leaf {leaf} {shape:?} periodic={periodic} b={b}");
                    check(&c, &pts, periodic.then_some(bl), l, &label);
                    let p32: Vec<[f32; 3]> =
                        pts.iter().map(|p| std::array::from_fn(|d| if p[d] as f32 >= bl[d] as f32 { 0.0 } else { p[d] as f32 })).collect();
                    check(&c, &p32, periodic.then_some(bl), l, &format!("{label} f32"));
                }
            }
        }
    }
}

/// Larger sets (cell-grid oracle) with the default tree, identical labels for 1, 2, 4 threads.
#[test]
fn fof_bigger_sets_and_thread_independence() {
    let ctxs: Vec<Context> = [1usize, 2, 4].iter().map(|&t| Context::new(Config { threads: t, ..Default::default() }).unwrap()).collect();
    let small: Vec<Context> = [1usize, 2, 4].iter().map(|&t| small_tree(t, 8)).collect();
    for (k, &shape) in [Shape::Uniform, Shape::Clustered, Shape::Faces].iter().enumerate() {
        let mut rng = Rng::new(900 + k as u64);
        let bl = [1.0, 1.5, 0.75];
        let pts: Vec<[f64; 3]> = points(shape, 30_000, bl, &mut rng);
        let l = 0.2 * (bl.iter().product::<f64>() / pts.len() as f64).cbrt();
        for set in [&ctxs, &small] {
            let first = check(&set[0], &pts, Some(bl), l, &format!("{shape:?} 30k"));
            for c in &set[1..] {
                let res = c.fof(&Domain::Periodic(bl), &pts, &FofFields::default(), &params(LinkingLength::Absolute(l), 1)).unwrap();
                assert_eq!(res.labels, first, "{shape:?}: labels depend on the thread count");
            }
        }
        let p32: Vec<[f32; 3]> = pts.iter().map(|p| std::array::from_fn(|d| if p[d] as f32 >= bl[d] as f32 { 0.0 } else { p[d] as f32 })).collect();
        check(&ctxs[1], &p32, Some(bl), l, &format!("{shape:?} 30k f32"));
    }
}

// ---------------------------------------------------------------------------------------
// Catalogue

struct Expected {
    members: Vec<usize>,
    mass: f64,
    centre: [f64; 3],
    radius: f64,
    vel: [f64; 3],
    disp: f64,
    tag: i64,
}

fn expected_groups(pts: &[[f64; 3]], vel: &[[f64; 3]], mass: &[f64], ids: &[i64], bl: [f64; 3], l: f64, min: usize) -> Vec<Expected> {
    let canon = oracle(pts, Some(bl), l);
    let mut groups: std::collections::BTreeMap<usize, Vec<usize>> = Default::default();
    for (i, &c) in canon.iter().enumerate() {
        groups.entry(c).or_default().push(i);
    }
    groups
        .into_values()
        .filter(|m| m.len() >= min)
        .map(|m| {
            let x0 = pts[m[0]];
            let off = |i: usize| -> [f64; 3] {
                std::array::from_fn(|d| {
                    let mut x = pts[i][d] - x0[d];
                    if x > bl[d] / 2.0 {
                        x -= bl[d];
                    } else if x < -bl[d] / 2.0 {
                        x += bl[d];
                    }
                    x
                })
            };
            let mt: f64 = m.iter().map(|&i| mass[i]).sum();
            let co: [f64; 3] = std::array::from_fn(|d| m.iter().map(|&i| mass[i] * off(i)[d]).sum::<f64>() / mt);
            let centre = std::array::from_fn(|d| (x0[d] + co[d]).rem_euclid(bl[d]));
            let r2: f64 = m.iter().map(|&i| mass[i] * (0..3).map(|d| (off(i)[d] - co[d]).powi(2)).sum::<f64>()).sum::<f64>() / mt;
            let vm: [f64; 3] = std::array::from_fn(|d| m.iter().map(|&i| mass[i] * vel[i][d]).sum::<f64>() / mt);
            let v2: f64 = m.iter().map(|&i| mass[i] * (0..3).map(|d| (vel[i][d] - vm[d]).powi(2)).sum::<f64>()).sum::<f64>() / mt;
            let tag = m.iter().map(|&i| ids[i]).min().unwrap();
            Expected { members: m, mass: mt, centre, radius: r2.sqrt(), vel: vm, disp: v2.sqrt(), tag }
        })
        .collect()
}

fn close(a: f64, b: f64, tol: f64) -> bool {
    (a - b).abs() <= tol * (1.0 + a.abs().max(b.abs()))
}

#[test]
fn fof_catalogue_matches_direct_computation() {
    let bl = [1.0, 1.0, 2.0];
    let c = small_tree(2, 8);
    for seed in 0..3u64 {
        let mut rng = Rng::new(500 + seed);
        let mut pts: Vec<[f64; 3]> = points(Shape::Clustered, 6000, bl, &mut rng);
        // Blobs straddling faces and a corner.
        for centre in [[0.0, 0.5, 1.0], [0.5, 0.0, 0.3], [0.2, 0.7, 0.0], [0.0, 0.0, 0.0]] {
            for _ in 0..150 {
                let p: [f64; 3] = std::array::from_fn(|d| (centre[d] + rng.normal() * 0.01).rem_euclid(bl[d]));
                pts.push(std::array::from_fn(|d| if p[d] >= bl[d] { 0.0 } else { p[d] }));
            }
        }
        let n = pts.len();
        let vel: Vec<[f64; 3]> = (0..n).map(|_| [rng.normal() * 100.0, rng.normal() * 50.0 + 10.0, rng.normal()]).collect();
        let mass: Vec<f64> = (0..n).map(|_| 0.5 + rng.f64()).collect();
        let ids: Vec<i64> = (0..n).map(|i| 1_000_000 - 7 * i as i64 + (i as i64 % 13) * 1000).collect();
        let l = 0.2 * (2.0 / n as f64).cbrt();
        let min = 20;
        let exp = expected_groups(&pts, &vel, &mass, &ids, bl, l, min);
        assert!(exp.len() > 5, "test needs groups (got {})", exp.len());
        assert!(
            exp.iter().any(|e| e.members.iter().any(|&i| pts[i][0] < 0.05) && e.members.iter().any(|&i| pts[i][0] > 0.95)),
            "a group must straddle x = 0"
        );
        for order in [CatalogueOrder::ZOrder, CatalogueOrder::Gadget] {
            let fields = FofFields { velocities: Some(&vel), masses: Some(&mass), particle_mass: 1.0, ids: Some(&ids) };
            let p = FofParams { linking_length: LinkingLength::Absolute(l), min_members: min, order, members: true };
            let res = c.fof(&Domain::Periodic(bl), &pts, &fields, &p).unwrap();
            let cat = &res.catalogue;
            assert_eq!(cat.len(), exp.len());
            assert_eq!(res.stats.particles_in_groups, exp.iter().map(|e| e.members.len()).sum::<usize>());
            for e in &exp {
                let g = cat.tag.iter().position(|&t| t == e.tag).expect("group tag missing");
                let mut got: Vec<i64> = cat.members(g).to_vec();
                got.sort();
                let want: Vec<i64> = e.members.iter().map(|&i| i as i64).collect();
                assert_eq!(got, want, "members of group tag {}", e.tag);
                for &i in &e.members {
                    assert_eq!(res.labels[i], e.tag);
                }
                assert_eq!(cat.count[g], e.members.len() as u64);
                assert!(close(cat.mass[g], e.mass, 1e-12));
                for d in 0..3 {
                    let mut dc = cat.centre[g][d] - e.centre[d];
                    dc -= (dc / bl[d]).round() * bl[d];
                    assert!(dc.abs() < 1e-12, "centre {d}: {} vs {}", cat.centre[g][d], e.centre[d]);
                    assert!(cat.centre[g][d] >= 0.0 && cat.centre[g][d] < bl[d]);
                    assert!(close(cat.velocity[g][d], e.vel[d], 1e-10));
                }
                assert!(close(cat.inertia_radius[g], e.radius, 1e-9), "radius {} vs {}", cat.inertia_radius[g], e.radius);
                assert!(close(cat.dispersion[g], e.disp, 1e-10));
            }
            let in_group: std::collections::HashSet<usize> = exp.iter().flat_map(|e| e.members.iter().copied()).collect();
            for i in 0..n {
                if !in_group.contains(&i) {
                    assert_eq!(res.labels[i], -1, "point {i} is in no kept group");
                }
            }
            match order {
                CatalogueOrder::Gadget => {
                    for g in 1..cat.len() {
                        assert!(cat.count[g - 1] > cat.count[g] || (cat.count[g - 1] == cat.count[g] && cat.tag[g - 1] < cat.tag[g]));
                    }
                }
                CatalogueOrder::ZOrder => {}
            }
        }
        // Single particle mass, no velocities, no ids: tags are smallest input indices.
        let p = FofParams { linking_length: LinkingLength::Absolute(l), min_members: min, order: CatalogueOrder::Gadget, members: false };
        let fields = FofFields { particle_mass: 2.5, ..Default::default() };
        let res = c.fof(&Domain::Periodic(bl), &pts, &fields, &p).unwrap();
        assert!(res.catalogue.velocity.is_empty() && res.catalogue.dispersion.is_empty() && res.catalogue.member_offsets.is_empty());
        for e in &exp {
            let g = res.catalogue.tag.iter().position(|&t| t == e.members[0] as i64).unwrap();
            assert_eq!(res.catalogue.mass[g], 2.5 * e.members.len() as f64);
        }
    }
}

#[test]
fn fof_ids_of_every_integer_type() {
    let c = small_tree(2, 4);
    let mut rng = Rng::new(3);
    let pts: Vec<[f32; 3]> = points(Shape::Clustered, 2000, [1.0; 3], &mut rng);
    let l = 0.2 * (1.0f64 / 2000.0).cbrt();
    let base: Vec<u32> = (0..2000u32).map(|i| 5000 + (i * 7919) % 2000).collect();
    let p = FofParams { linking_length: LinkingLength::Absolute(l), min_members: 5, ..Default::default() };
    let r32 = {
        let v: Vec<i32> = base.iter().map(|&x| x as i32).collect();
        c.fof(&Domain::Periodic([1.0; 3]), &pts, &FofFields { ids: Some(&v), ..Default::default() }, &p).unwrap()
    };
    let ru32 = c.fof(&Domain::Periodic([1.0; 3]), &pts, &FofFields { ids: Some(&base), ..Default::default() }, &p).unwrap();
    let v64: Vec<i64> = base.iter().map(|&x| x as i64).collect();
    let r64 = c.fof(&Domain::Periodic([1.0; 3]), &pts, &FofFields { ids: Some(&v64), ..Default::default() }, &p).unwrap();
    let vu64: Vec<u64> = base.iter().map(|&x| x as u64).collect();
    let s: &[u64] = &vu64;
    let ru64 = c.fof(&Domain::Periodic([1.0; 3]), &pts, &FofFields { ids: Some(&s), ..Default::default() }, &p).unwrap();
    assert!(r32.catalogue.len() > 3);
    assert_eq!(r32.labels, ru32.labels);
    assert_eq!(r32.labels, r64.labels);
    assert_eq!(r32.labels, ru64.labels);
    let big = vec![u64::MAX; 2000];
    let e = c.fof(&Domain::Periodic([1.0; 3]), &pts, &FofFields { ids: Some(&big), ..Default::default() }, &p).unwrap_err();
    assert!(matches!(e, Error::InvalidParameter { name: "ids", .. }), "{e}");
}

#[test]
fn fof_relative_linking_length() {
    let c = small_tree(2, 8);
    let mut rng = Rng::new(11);
    let bl = [2.0, 1.0, 1.0];
    let pts: Vec<[f64; 3]> = points(Shape::Clustered, 3000, bl, &mut rng);
    let p = FofParams { linking_length: LinkingLength::Relative(0.2), min_members: 1, ..Default::default() };
    let res = c.fof(&Domain::Periodic(bl), &pts, &FofFields::default(), &p).unwrap();
    let l = 0.2 * (2.0f64 / 3000.0).powf(1.0 / 3.0);
    assert!((res.stats.linking_length - l).abs() < 1e-15);
    assert_eq!(canon_labels(&res.labels), oracle(&pts, Some(bl), res.stats.linking_length));
    // 2D: the mean separation is sqrt(A / N).
    let p2: Vec<[f64; 2]> = points(Shape::Uniform, 400, [1.0, 4.0], &mut rng);
    let res = c.fof(&Domain::Periodic([1.0, 4.0]), &p2, &FofFields::default(), &p).unwrap();
    assert!((res.stats.linking_length - 0.2 * (4.0f64 / 400.0).sqrt()).abs() < 1e-15);
}

#[test]
fn fof_bad_input_is_an_error() {
    let c = small_tree(1, 4);
    let pts: Vec<[f64; 3]> = vec![[0.1, 0.2, 0.3], [0.2, 0.2, 0.3], [0.9, 0.9, 0.9]];
    let per = Domain::Periodic([1.0; 3]);
    let f0 = FofFields::<3>::default();
    let abs = |l| params(LinkingLength::Absolute(l), 1);
    for l in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        assert!(matches!(c.fof(&per, &pts, &f0, &abs(l)), Err(Error::InvalidParameter { name: "linking_length", .. })), "l = {l}");
    }
    for b in [0.0, -0.2, f64::NAN] {
        assert!(c.fof(&per, &pts, &f0, &params(LinkingLength::Relative(b), 1)).is_err(), "b = {b}");
    }
    let e = c.fof(&Domain::Open, &pts, &f0, &params(LinkingLength::Relative(0.2), 1)).unwrap_err();
    let msg = e.to_string();
    assert!(msg.contains("absolute") && msg.contains("box"), "{msg}");
    assert!(matches!(c.fof(&per, &pts, &f0, &abs(0.1).with_min(0)), Err(Error::InvalidParameter { name: "min_members", .. })));
    let v2: Vec<[f64; 3]> = vec![[0.0; 3]; 2];
    assert!(matches!(c.fof(&per, &pts, &FofFields { velocities: Some(&v2), ..f0 }, &abs(0.1)), Err(Error::LengthMismatch { .. })));
    let vnan: Vec<[f64; 3]> = vec![[0.0, 0.0, 0.0], [0.0, f64::NAN, 0.0], [0.0; 3]];
    assert!(matches!(c.fof(&per, &pts, &FofFields { velocities: Some(&vnan), ..f0 }, &abs(0.1)), Err(Error::NonFinite { index: 1, dim: 1, .. })));
    let m2 = vec![1.0f64; 2];
    assert!(matches!(c.fof(&per, &pts, &FofFields { masses: Some(&m2), ..f0 }, &abs(0.1)), Err(Error::LengthMismatch { .. })));
    let minf = vec![1.0f64, 1.0, f64::INFINITY];
    assert!(matches!(c.fof(&per, &pts, &FofFields { masses: Some(&minf), ..f0 }, &abs(0.1)), Err(Error::NonFiniteValue { index: 2, .. })));
    let ids = vec![1i64; 4];
    assert!(matches!(c.fof(&per, &pts, &FofFields { ids: Some(&ids), ..f0 }, &abs(0.1)), Err(Error::LengthMismatch { .. })));
    assert!(c.fof(&per, &pts, &FofFields { particle_mass: f64::NAN, ..f0 }, &abs(0.1)).is_err());
    let nan_pts: Vec<[f64; 3]> = vec![[0.1, 0.2, 0.3], [f64::NAN, 0.2, 0.3]];
    assert!(matches!(c.fof(&per, &nan_pts, &f0, &abs(0.1)), Err(Error::NonFinite { .. })));
    let outside: Vec<[f64; 3]> = vec![[0.1, 0.2, 1.0]];
    assert!(matches!(c.fof(&per, &outside, &f0, &abs(0.1)), Err(Error::OutsideBox { .. })));
    assert!(matches!(c.fof(&Domain::Periodic([1.0, 0.0, 1.0]), &pts, &f0, &abs(0.1)), Err(Error::InvalidBox { .. })));
    let mut short = vec![0i64; 2];
    assert!(matches!(c.fof_into(&per, &pts, &f0, &abs(0.1), &mut short), Err(Error::LengthMismatch { .. })));
    // Zero particles: valid, empty.
    let none: Vec<[f64; 3]> = Vec::new();
    for d in [Domain::Open, per] {
        let r = c.fof(&d, &none, &f0, &abs(0.1)).unwrap();
        assert!(r.labels.is_empty() && r.catalogue.is_empty());
    }
    let r = c.fof(&per, &none, &f0, &params(LinkingLength::Relative(0.2), 20)).unwrap();
    assert!(r.catalogue.is_empty());
}

trait WithMin {
    fn with_min(self, m: usize) -> Self;
}
impl WithMin for FofParams {
    fn with_min(mut self, m: usize) -> Self {
        self.min_members = m;
        self
    }
}

/// Two particles exactly half a box apart in x: the minimum image keeps +L/2 (it only
/// wraps when |dx| > L/2), so the centre lies between them at x = 0.5, not at the face.
#[test]
fn fof_centre_at_half_box_separation() {
    let c = small_tree(2, 4);
    let pts = vec![[0.25f64, 0.5, 0.5], [0.75, 0.5, 0.5]];
    let params = FofParams { linking_length: LinkingLength::Absolute(0.6), min_members: 2, order: CatalogueOrder::ZOrder, members: true };
    let r = c.fof(&Domain::periodic_cube(1.0), &pts, &FofFields::default(), &params).unwrap();
    assert_eq!(r.catalogue.len(), 1);
    assert_eq!(r.catalogue.centre[0], [0.5, 0.5, 0.5]);
    assert_eq!(r.catalogue.inertia_radius[0], 0.25);
}

/// The catalogue is bit-identical for 1, 2 and 4 threads and for any tree shape, with
/// masses and velocities of mixed magnitude (every sum runs in input order).
#[test]
fn fof_catalogue_identical_for_any_thread_count_and_tree() {
    let mut rng = Rng::new(77);
    let bl = [1.0, 1.0, 1.0];
    let pts: Vec<[f32; 3]> = points(Shape::Clustered, 20_000, bl, &mut rng);
    let vel: Vec<[f64; 3]> = (0..pts.len()).map(|_| [rng.normal() * 300.0, rng.normal(), rng.normal() * 1e-3]).collect();
    let mass: Vec<f64> = (0..pts.len()).map(|_| 10f64.powf(rng.f64() * 6.0 - 3.0)).collect();
    let fields = FofFields { velocities: Some(&vel), masses: Some(&mass), ..Default::default() };
    let p = FofParams { linking_length: LinkingLength::Relative(0.2), min_members: 5, order: CatalogueOrder::Gadget, members: true };
    let mut first: Option<ztree::Catalogue<3>> = None;
    for threads in [1usize, 2, 4] {
        for leaf in [4usize, 48] {
            let c = small_tree(threads, leaf);
            let r = c.fof(&Domain::Periodic(bl), &pts, &fields, &p).unwrap();
            assert!(r.catalogue.len() > 10);
            match &first {
                None => first = Some(r.catalogue),
                Some(f) => assert!(&r.catalogue == f, "threads {threads} leaf {leaf}: catalogue differs"),
            }
        }
    }
}
