//! Distributed FoF equals single-rank FoF: labels exactly, the catalogue row for row
//! (every field bit for bit).

use crate::common::scatter::{Layout, SPREADS, Spread, layout, make_identical};
use crate::common::*;
use mpi::traits::*;
use ztree::{Catalogue, CatalogueOrder, CatalogueScope, Config, Context, Dist, Domain, FofFields, FofParams, LinkingLength, Real, TreeParams};

struct Case<'a> {
    label: String,
    l: f64,
    min_members: usize,
    order: CatalogueOrder,
    lay: &'a Layout,
    with_ids: bool,
}

/// Whether row `g` of `got` equals row `w` of `want` in every field, bit for bit (the rows
/// do not depend on how members are split). Every case passes velocities.
fn same_row<const D: usize>(got: &Catalogue<D>, g: usize, want: &Catalogue<D>, w: usize) -> bool {
    let bits = |v: &[f64]| v.iter().map(|x| x.to_bits()).collect::<Vec<u64>>();
    let mut ok = got.tag[g] == want.tag[w] && got.count[g] == want.count[w] && got.members(g) == want.members(w);
    ok &= got.mass[g].to_bits() == want.mass[w].to_bits() && got.inertia_radius[g].to_bits() == want.inertia_radius[w].to_bits();
    ok &= bits(&got.centre[g]) == bits(&want.centre[w]);
    ok &= got.velocity.len() == got.len() && want.velocity.len() == want.len();
    ok && bits(&got.velocity[g]) == bits(&want.velocity[w]) && got.dispersion[g].to_bits() == want.dispersion[w].to_bits()
}

/// Rows compared in tag order (the z-order of rows inside a run of identical keys may
/// differ between decompositions); GADGET order is compared as is.
fn compare<const D: usize>(label: &str, got: &Catalogue<D>, want: &Catalogue<D>) -> usize {
    if got.len() != want.len() {
        eprintln!("{label}: {} rows, expected {}", got.len(), want.len());
        return 1;
    }
    let order = |c: &Catalogue<D>| -> Vec<usize> {
        let mut o: Vec<usize> = (0..c.len()).collect();
        if c.order == CatalogueOrder::ZOrder {
            o.sort_by_key(|&g| c.tag[g]);
        }
        o
    };
    let (og, ow) = (order(got), order(want));
    let mut bad = 0;
    for (&g, &w) in og.iter().zip(&ow) {
        let ok = same_row(got, g, want, w);
        if !ok {
            if bad < 3 {
                eprintln!(
                    "{label}: row tag {} count {} vs tag {} count {}; mass {} vs {}; centre {:?} vs {:?}; radius {} vs {}",
                    got.tag[g],
                    got.count[g],
                    want.tag[w],
                    want.count[w],
                    got.mass[g],
                    want.mass[w],
                    got.centre[g],
                    want.centre[w],
                    got.inertia_radius[g],
                    want.inertia_radius[w]
                );
            }
            bad += 1;
        }
    }
    bad
}

#[allow(clippy::too_many_arguments)]
fn run_case<T: Real, const D: usize>(
    dist: &Dist,
    reference: &Context,
    global: &[[T; D]],
    vel: &[[T; D]],
    masses: &[f64],
    ids: &[i64],
    case: &Case<'_>,
    periodic: Option<[f64; D]>,
) -> usize {
    let rank = dist.rank();
    let domain = periodic.map_or(Domain::Open, Domain::Periodic);
    let params = FofParams { linking_length: LinkingLength::Absolute(case.l), min_members: case.min_members, order: case.order, members: true };
    type Picked<T, const D: usize> = (Vec<[T; D]>, Vec<[T; D]>, Vec<f64>, Vec<i64>);
    let pick = |idx: &[usize]| -> Picked<T, D> {
        (
            idx.iter().map(|&i| global[i]).collect(),
            idx.iter().map(|&i| vel[i]).collect(),
            idx.iter().map(|&i| masses[i]).collect(),
            idx.iter().map(|&i| ids[i]).collect(),
        )
    };
    let (cp, cv, cm, ci) = pick(&case.lay.order);
    let fields = FofFields { velocities: Some(&cv), masses: Some(&cm), particle_mass: 1.0, ids: case.with_ids.then_some(&ci as _) };
    let want = reference.fof(&domain, &cp, &fields, &params).unwrap();
    let (mp, mv, mm, mi) = pick(case.lay.mine(rank));
    let fields = FofFields { velocities: Some(&mv), masses: Some(&mm), particle_mass: 1.0, ids: case.with_ids.then_some(&mi as _) };
    let mut labels = vec![0i64; mp.len()];
    let (cat, stats) =
        dist.fof(&domain, &mp, &fields, &params, CatalogueScope::Root, &mut labels).unwrap_or_else(|e| panic!("{}: rank {rank}: {e}", case.label));
    let lo = case.lay.offsets[rank];
    let mut bad = (0..mp.len()).filter(|&i| labels[i] != want.labels[lo + i]).count();
    if bad > 0 {
        eprintln!("{}: rank {rank}: {bad} labels differ", case.label);
    }
    if stats.groups != want.catalogue.len() || stats.groups_total != want.stats.groups_total {
        eprintln!("{}: stats groups {} / {} vs {} / {}", case.label, stats.groups, stats.groups_total, want.catalogue.len(), want.stats.groups_total);
        bad += 1;
    }
    if rank == 0 {
        bad += compare(&case.label, &cat, &want.catalogue);
    } else if !cat.is_empty() {
        eprintln!("{}: rank {rank} holds rows with CatalogueScope::Root", case.label);
        bad += 1;
    }
    // The distributed scope: every halo exactly once over the ranks, each row equal to the
    // single-rank catalogue's row of its tag.
    let (cat_d, _) = dist.fof(&domain, &mp, &fields, &params, CatalogueScope::Distributed, &mut labels).unwrap();
    let by_tag: std::collections::HashMap<i64, usize> = want.catalogue.tag.iter().enumerate().map(|(w, &t)| (t, w)).collect();
    let unequal = (0..cat_d.len()).filter(|&g| by_tag.get(&cat_d.tag[g]).is_none_or(|&w| !same_row(&cat_d, g, &want.catalogue, w))).count();
    if unequal > 0 {
        eprintln!("{}: rank {rank}: {unequal} distributed-scope rows differ from the single-rank rows", case.label);
        bad += unequal;
    }
    let mut tags = crate::gather_all(&cat_d.tag);
    tags.sort_unstable();
    let mut want_tags = want.catalogue.tag.clone();
    want_tags.sort_unstable();
    if tags != want_tags {
        eprintln!(
            "{}: the distributed catalogue's tags over the ranks ({} rows) are not the single-rank tags ({})",
            case.label,
            tags.len(),
            want_tags.len()
        );
        bad += 1;
    }
    bad
}

/// A subset (a type mask: every point but each third) against the serial subset call on
/// the concatenation: labels (-1 for the others), the gathered catalogue row for row and
/// the distributed one tag for tag; tags without ids and member lists name global caller
/// indices.
#[allow(clippy::too_many_arguments)]
fn subset_case(
    dist: &Dist,
    reference: &Context,
    global: &[[f64; 3]],
    vel: &[[f64; 3]],
    masses: &[f64],
    ids: &[i64],
    lay: &Layout,
    l: f64,
    with_ids: bool,
    label: &str,
) -> usize {
    let rank = dist.rank();
    let domain = Domain::Periodic([1.0, 1.5, 2.0]);
    let order = if with_ids { CatalogueOrder::Gadget } else { CatalogueOrder::ZOrder };
    let params = FofParams { linking_length: LinkingLength::Absolute(l), min_members: 2, order, members: true };
    type Picked = (Vec<[f64; 3]>, Vec<[f64; 3]>, Vec<f64>, Vec<i64>);
    let pick = |idx: &[usize]| -> Picked {
        (
            idx.iter().map(|&i| global[i]).collect(),
            idx.iter().map(|&i| vel[i]).collect(),
            idx.iter().map(|&i| masses[i]).collect(),
            idx.iter().map(|&i| ids[i]).collect(),
        )
    };
    let sel = |n: usize, lo: usize| -> Vec<u32> { (0..n as u32).filter(|&j| (lo + j as usize) % 3 != 1).collect() };
    let (cp, cv, cm, ci) = pick(&lay.order);
    let fields = FofFields { velocities: Some(&cv), masses: Some(&cm), particle_mass: 1.0, ids: with_ids.then_some(&ci as _) };
    let mut want_labels = vec![0i64; cp.len()];
    let (want, _) = reference.fof_subset_into(&domain, &cp, &fields, &params, &sel(cp.len(), 0), &mut want_labels).unwrap();
    let (mp, mv, mm, mi) = pick(lay.mine(rank));
    let fields = FofFields { velocities: Some(&mv), masses: Some(&mm), particle_mass: 1.0, ids: with_ids.then_some(&mi as _) };
    let lo = lay.offsets[rank];
    let mine = sel(mp.len(), lo);
    let mut labels = vec![0i64; mp.len()];
    let (cat, _) = dist
        .fof_subset(&domain, &mp, &fields, &params, &mine, CatalogueScope::Root, &mut labels)
        .unwrap_or_else(|e| panic!("{label}: rank {rank}: {e}"));
    let mut bad = (0..mp.len()).filter(|&i| labels[i] != want_labels[lo + i]).count();
    if bad > 0 {
        eprintln!("{label}: rank {rank}: {bad} subset labels differ");
    }
    if rank == 0 {
        bad += compare(label, &cat, &want);
    }
    let (cat_d, _) = dist.fof_subset(&domain, &mp, &fields, &params, &mine, CatalogueScope::Distributed, &mut labels).unwrap();
    let by_tag: std::collections::HashMap<i64, usize> = want.tag.iter().enumerate().map(|(w, &t)| (t, w)).collect();
    bad += (0..cat_d.len()).filter(|&g| by_tag.get(&cat_d.tag[g]).is_none_or(|&w| !same_row(&cat_d, g, &want, w))).count();
    let n_rows = crate::sum_all(cat_d.len());
    if n_rows != want.len() {
        eprintln!("{label}: {n_rows} distributed subset rows, expected {}", want.len());
        bad += 1;
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
    let shapes = [Shape::Clustered, Shape::Uniform, Shape::Faces, Shape::Duplicates, Shape::Line, Shape::Identical, Shape::Lattice];
    for (si, &shape) in shapes.iter().enumerate() {
        for periodic in [false, true] {
            let mut rng = Rng::new(500 + si as u64 * 11 + periodic as u64);
            let n = [4000, 3000, 1500, 2000, 1200, 600, 1728][si];
            let global: Vec<[f64; 3]> = points(shape, n, l, &mut rng);
            let vel: Vec<[f64; 3]> = (0..n).map(|_| [rng.normal(), rng.normal(), rng.normal()]).collect();
            let masses: Vec<f64> = (0..n).map(|_| 0.5 + rng.f64()).collect();
            let mut ids: Vec<i64> = (0..n as i64).map(|i| 1000 + 3 * i).collect();
            for i in (1..n).rev() {
                ids.swap(i, rng.below(i + 1));
            }
            // Linking lengths: sparse groups, and one that links across ranks widely.
            let spacing = (l[0] * l[1] * l[2] / n as f64).cbrt();
            for (pi, &spread) in SPREADS.iter().enumerate() {
                let xs: Vec<f64> = global.iter().map(|p| p[0]).collect();
                let lay = layout(spread, &xs, size, &mut Rng::new(17 + pi as u64));
                let mut g = global.clone();
                if spread == Spread::IdenticalOnFirst {
                    make_identical(&mut g, &lay);
                }
                for (j, b) in [0.2, 0.6].into_iter().enumerate() {
                    let case = Case {
                        label: format!("{shape:?} periodic={periodic} {spread:?} b={b}"),
                        l: b * spacing,
                        min_members: [1, 5][j],
                        order: [CatalogueOrder::ZOrder, CatalogueOrder::Gadget][j],
                        lay: &lay,
                        with_ids: j == 1,
                    };
                    failures += run_case::<f64, 3>(&dist, &reference, &g, &vel, &masses, &ids, &case, periodic.then_some(l));
                    cases += 1;
                }
                let g32: Vec<[f32; 3]> = g.iter().map(|p| p.map(|c| c as f32)).collect();
                let v32: Vec<[f32; 3]> = vel.iter().map(|p| p.map(|c| c as f32)).collect();
                let case = Case {
                    label: format!("{shape:?} {spread:?} f32 open"),
                    l: 0.5 * spacing,
                    min_members: 3,
                    order: CatalogueOrder::ZOrder,
                    lay: &lay,
                    with_ids: true,
                };
                failures += run_case::<f32, 3>(&dist, &reference, &g32, &v32, &masses, &ids, &case, None);
                let g2: Vec<[f64; 2]> = g.iter().map(|p| [p[0], p[1]]).collect();
                let v2: Vec<[f64; 2]> = vel.iter().map(|p| [p[0], p[1]]).collect();
                let sp2 = (l[0] * l[1] / n as f64).sqrt();
                let case = Case {
                    label: format!("{shape:?} {spread:?} 2D"),
                    l: 0.4 * sp2,
                    min_members: 2,
                    order: CatalogueOrder::Gadget,
                    lay: &lay,
                    with_ids: false,
                };
                failures += run_case::<f64, 2>(&dist, &reference, &g2, &v2, &masses, &ids, &case, periodic.then_some([l[0], l[1]]));
                cases += 2;
                // Type masks, with and without ids.
                if periodic {
                    for with_ids in [false, true] {
                        let label = format!("{shape:?} {spread:?} subset ids={with_ids}");
                        failures += subset_case(&dist, &reference, &g, &vel, &masses, &ids, &lay, 0.5 * spacing, with_ids, &label);
                        cases += 1;
                    }
                }
            }
        }
    }
    // A chain through the whole periodic box: one group spanning every rank.
    let n = 3000;
    let chain: Vec<[f64; 3]> = (0..n)
        .map(|i| {
            let t = i as f64 / n as f64;
            [t * l[0], (0.3 + 0.2 * (6.0 * t).sin()).rem_euclid(1.0) * l[1], (t * 3.0 * l[2]).rem_euclid(l[2])]
        })
        .collect();
    let vel = vec![[0.0; 3]; n];
    let masses = vec![1.0; n];
    let ids: Vec<i64> = (0..n as i64).rev().collect();
    for (pi, &spread) in SPREADS.iter().enumerate() {
        let xs: Vec<f64> = chain.iter().map(|p| p[0]).collect();
        let lay = layout(spread, &xs, size, &mut Rng::new(3 + pi as u64));
        let case = Case { label: format!("chain {spread:?}"), l: 0.01, min_members: 10, order: CatalogueOrder::Gadget, lay: &lay, with_ids: true };
        failures += run_case::<f64, 3>(&dist, &reference, &chain, &vel, &masses, &ids, &case, Some(l));
        cases += 1;
    }
    // Two particles exactly half a box apart, on the first and the last rank: the merged
    // centre keeps the +L/2 minimum image, as the single-rank catalogue does.
    {
        let global = vec![[0.25f64, 0.5, 0.5], [0.75, 0.5, 0.5]];
        let mine: Vec<[f64; 3]> = (0..2).filter(|&i| (i == 0 && rank == 0) || (i == 1 && rank == size - 1)).map(|i| global[i]).collect();
        let params = FofParams { linking_length: LinkingLength::Absolute(0.6), min_members: 2, order: CatalogueOrder::ZOrder, members: false };
        let domain = Domain::periodic_cube(1.0);
        let want = reference.fof(&domain, &global, &FofFields::default(), &params).unwrap();
        let mut labels = vec![0i64; mine.len()];
        let (cat, _) = dist.fof(&domain, &mine, &FofFields::default(), &params, CatalogueScope::Root, &mut labels).unwrap();
        cases += 1;
        if rank == 0 && (cat.len() != 1 || cat.centre[0] != want.catalogue.centre[0] || want.catalogue.centre[0] != [0.5, 0.5, 0.5]) {
            eprintln!("half-box pair: centre {:?}, single rank {:?}", cat.centre, want.catalogue.centre);
            failures += 1;
        }
    }
    let total = crate::sum_all(failures);
    if rank == 0 {
        println!("mpi_fof: {size} ranks, {cases} cases, {total} failures");
    }
    total
}
