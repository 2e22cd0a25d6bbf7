//! Distributed DBSCAN equals single-rank DBSCAN: labels and classes exactly, the
//! catalogue row for row (every field bit for bit, member lists included).

use crate::common::scatter::{Layout, SPREADS, Spread, layout, make_identical};
use crate::common::*;
use mpi::traits::*;
use ztree::{
    BorderPoints, CatalogueOrder, CatalogueScope, Config, Context, DbscanCatalogue, DbscanParams, Dist, Domain, FofFields, LinkingLength, PointClass,
    Real, TreeParams,
};

/// Row `g` of `got` against row `w` of `want`, every field bit for bit.
fn same_row<const D: usize>(got: &DbscanCatalogue<D>, g: usize, want: &DbscanCatalogue<D>, w: usize) -> bool {
    let (a, b) = (&got.rows, &want.rows);
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
    a.tag[g] == b.tag[w]
        && a.count[g] == b.count[w]
        && a.members(g) == b.members(w)
        && a.mass[g].to_bits() == b.mass[w].to_bits()
        && bits(&a.centre[g]) == bits(&b.centre[w])
        && a.inertia_radius[g].to_bits() == b.inertia_radius[w].to_bits()
        && a.velocity.get(g).map(|v| bits(v)) == b.velocity.get(w).map(|v| bits(v))
        && a.dispersion.get(g).map(|x| x.to_bits()) == b.dispersion.get(w).map(|x| x.to_bits())
        && got.core_count[g] == want.core_count[w]
        && got.max_radius[g].to_bits() == want.max_radius[w].to_bits()
}

/// `got`'s rows each equal the reference row of the same tag; with `whole`, also every
/// reference row present (in the same order for GADGET order).
fn compare<const D: usize>(label: &str, got: &DbscanCatalogue<D>, want: &DbscanCatalogue<D>, whole: bool) -> usize {
    if whole && got.len() != want.len() {
        eprintln!("{label}: {} rows, expected {}", got.len(), want.len());
        return 1;
    }
    let mut bad = 0;
    for g in 0..got.len() {
        let w = if whole && got.rows.order == CatalogueOrder::Gadget { Some(g) } else { want.rows.tag.iter().position(|&t| t == got.rows.tag[g]) };
        if !w.is_some_and(|w| same_row(got, g, want, w)) {
            if bad < 3 {
                eprintln!("{label}: row {g} (tag {}, count {}) has no equal reference row", got.rows.tag[g], got.rows.count[g]);
            }
            bad += 1;
        }
    }
    bad
}

struct Case<'a> {
    label: String,
    eps: f64,
    min_pts: usize,
    border: BorderPoints,
    order: CatalogueOrder,
    scope: CatalogueScope,
    lay: &'a Layout,
}

#[allow(clippy::too_many_arguments)]
fn run_case<T: Real, const D: usize>(
    dist: &Dist,
    reference: &Context,
    global: &[[T; D]],
    vel: &[[f64; D]],
    masses: &[f64],
    ids: &[i64],
    case: &Case<'_>,
    periodic: Option<[f64; D]>,
) -> usize {
    let rank = dist.rank();
    if std::env::var_os("ZTREE_DEBUG_COMM").is_some() {
        eprintln!("rank {rank}: case {}", case.label);
    }
    let domain = periodic.map_or(Domain::Open, Domain::Periodic);
    let params = DbscanParams {
        eps: LinkingLength::Absolute(case.eps),
        min_pts: case.min_pts,
        min_members: 3,
        order: case.order,
        members: true,
        border: case.border,
    };
    let lay = case.lay;
    type Cols<T, const D: usize> = (Vec<[T; D]>, Vec<[f64; D]>, Vec<f64>, Vec<i64>);
    let pick = |idx: &[usize]| -> Cols<T, D> {
        (
            idx.iter().map(|&i| global[i]).collect(),
            idx.iter().map(|&i| vel[i]).collect(),
            idx.iter().map(|&i| masses[i]).collect(),
            idx.iter().map(|&i| ids[i]).collect(),
        )
    };
    let (cp, cv, cm, ci) = pick(&lay.order);
    let fields = FofFields { velocities: Some(&cv), masses: Some(&cm), ids: Some(&ci), ..Default::default() };
    let want = reference.dbscan(&domain, &cp, &fields, &params).unwrap();
    let (mp, mv, mm, mi) = pick(lay.mine(rank));
    let fields = FofFields { velocities: Some(&mv), masses: Some(&mm), ids: Some(&mi), ..Default::default() };
    let n = mp.len();
    let (mut labels, mut class) = (vec![7i64; n], vec![PointClass::Core; n]);
    let (cat, _) = dist
        .dbscan(&domain, &mp, &fields, &params, case.scope, &mut labels, Some(&mut class))
        .unwrap_or_else(|e| panic!("{}: rank {rank}: {e}", case.label));
    let lo = lay.offsets[rank];
    let mut bad = (0..n).filter(|&i| labels[i] != want.labels[lo + i] || class[i] != want.class[lo + i]).count();
    if bad > 0 {
        eprintln!("{}: rank {rank}: {bad} labels or classes differ", case.label);
    }
    let rows = crate::sum_all(cat.len());
    match case.scope {
        CatalogueScope::Root if rank == 0 => bad += compare(&case.label, &cat, &want.catalogue, true),
        CatalogueScope::Root => bad += !cat.is_empty() as usize,
        _ => {
            bad += compare(&case.label, &cat, &want.catalogue, false);
            if rank == 0 && rows != want.catalogue.len() {
                eprintln!("{}: {rows} rows over the ranks, expected {}", case.label, want.catalogue.len());
                bad += 1;
            }
        }
    }
    bad
}

/// A subset (every third particle left out): labels and classes of the whole sets, tags
/// and member lists in the caller's global indices, as the serial subset call.
fn run_subset(dist: &Dist, reference: &Context, global: &[[f64; 3]], lay: &Layout, eps: f64, label: &str) -> usize {
    let rank = dist.rank();
    if std::env::var_os("ZTREE_DEBUG_COMM").is_some() {
        eprintln!("rank {rank}: case {label}");
    }
    let params = DbscanParams { eps: LinkingLength::Absolute(eps), min_pts: 4, min_members: 2, members: true, ..Default::default() };
    let keep = |g: usize| g % 3 != 1;
    let cat: Vec<[f64; 3]> = lay.order.iter().map(|&i| global[i]).collect();
    let sel: Vec<u32> = (0..cat.len() as u32).filter(|&g| keep(g as usize)).collect();
    let n_all = cat.len();
    let (mut wl, mut wc) = (vec![0i64; n_all], vec![PointClass::Core; n_all]);
    let (want, _) = reference.dbscan_subset_into(&Domain::Open, &cat, &FofFields::default(), &params, &sel, &mut wl, Some(&mut wc)).unwrap();
    let (lo, mine) = (lay.offsets[rank], lay.mine(rank));
    let pts: Vec<[f64; 3]> = mine.iter().map(|&i| global[i]).collect();
    let msel: Vec<u32> = (0..pts.len() as u32).filter(|&j| keep(lo + j as usize)).collect();
    let (mut labels, mut class) = (vec![7i64; pts.len()], vec![PointClass::Core; pts.len()]);
    let (got, _) = dist
        .dbscan_subset(&Domain::Open, &pts, &FofFields::default(), &params, &msel, CatalogueScope::Root, &mut labels, Some(&mut class))
        .unwrap_or_else(|e| panic!("{label}: rank {rank}: {e}"));
    let mut bad = (0..pts.len()).filter(|&j| labels[j] != wl[lo + j] || class[j] != wc[lo + j]).count();
    if bad > 0 {
        eprintln!("{label}: rank {rank}: {bad} labels or classes differ");
    }
    if rank == 0 {
        bad += compare(label, &got, &want, true);
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
    for (si, &shape) in [Shape::Clustered, Shape::Duplicates, Shape::Lattice, Shape::Uniform].iter().enumerate() {
        for periodic in [false, true] {
            let n = [1500, 1200, 1000, 1200][si];
            let mut rng = Rng::new(500 + si as u64 * 7 + periodic as u64);
            let global: Vec<[f64; 3]> = points(shape, n, l, &mut rng);
            let vel: Vec<[f64; 3]> = (0..n).map(|_| [rng.normal(), rng.normal(), rng.normal()]).collect();
            let masses: Vec<f64> = (0..n).map(|_| 0.5 + rng.f64()).collect();
            // Ids in reverse: tags differ from global indices.
            let ids: Vec<i64> = (0..n as i64).map(|i| 10_000 - 3 * i).collect();
            let spacing = (l.iter().product::<f64>() / n as f64).cbrt();
            let eps = if shape == Shape::Lattice { l[0] / (n as f64).powf(1.0 / 3.0).ceil() } else { 0.6 * spacing };
            for (pi, &spread) in SPREADS.iter().enumerate() {
                let xs: Vec<f64> = global.iter().map(|p| p[0]).collect();
                let lay = layout(spread, &xs, size, &mut Rng::new(17 + pi as u64));
                let mut g = global.clone();
                if spread == Spread::IdenticalOnFirst {
                    make_identical(&mut g, &lay);
                }
                let per = periodic.then_some(l);
                for (mi, &min_pts) in [2usize, 4, 10].iter().enumerate() {
                    let border = if mi == 1 && pi % 2 == 1 { BorderPoints::Noise } else { BorderPoints::NearestCore };
                    let order = if (pi + mi) % 2 == 0 { CatalogueOrder::ZOrder } else { CatalogueOrder::Gadget };
                    let scope = if (pi + mi) % 3 == 0 { CatalogueScope::Root } else { CatalogueScope::Distributed };
                    let case = Case {
                        label: format!("{shape:?} periodic={periodic} {spread:?} min_pts={min_pts} {border:?} {order:?} {scope:?}"),
                        eps,
                        min_pts,
                        border,
                        order,
                        scope,
                        lay: &lay,
                    };
                    failures += run_case::<f64, 3>(&dist, &reference, &g, &vel, &masses, &ids, &case, per);
                    cases += 1;
                }
                if !periodic {
                    failures += run_subset(&dist, &reference, &g, &lay, eps, &format!("subset {shape:?} {spread:?}"));
                    cases += 1;
                }
                // f32 and 2D once per spread.
                let g32: Vec<[f32; 3]> = g.iter().map(|p| p.map(|c| c as f32)).collect();
                let case = Case {
                    label: format!("{shape:?} {spread:?} f32"),
                    eps,
                    min_pts: 5,
                    border: BorderPoints::NearestCore,
                    order: CatalogueOrder::Gadget,
                    scope: CatalogueScope::Root,
                    lay: &lay,
                };
                failures += run_case::<f32, 3>(&dist, &reference, &g32, &vel, &masses, &ids, &case, None);
                let g2: Vec<[f64; 2]> = g.iter().map(|p| [p[0], p[1]]).collect();
                let v2: Vec<[f64; 2]> = vel.iter().map(|v| [v[0], v[1]]).collect();
                let case = Case { label: format!("{shape:?} {spread:?} 2D"), eps: eps * 0.5, min_pts: 3, scope: CatalogueScope::Distributed, ..case };
                failures += run_case::<f64, 2>(&dist, &reference, &g2, &v2, &masses, &ids, &case, periodic.then_some([l[0], l[1]]));
                cases += 2;
            }
        }
    }
    let total = crate::sum_all(failures);
    if rank == 0 {
        println!("mpi_dbscan: {size} ranks, {cases} cases, {total} failures");
    }
    total
}
