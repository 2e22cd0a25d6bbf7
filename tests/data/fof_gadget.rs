//! FoF on a real GADGET-4 snapshot (64³ particles, z ≈ 1) against GADGET-4's own group
//! catalogue: the same groups member for member, and the same counts, masses and centres
//! within float32 precision. The data lives in `../shared/data/gadget4-64-z1` next to the
//! repository; the test is skipped (with a message) when it is absent, and fails in CI.

use std::path::{Path, PathBuf};

use crate::common::require;

use ztree::{CatalogueOrder, Config, Context, Domain, FofFields, FofParams, LinkingLength};

fn data_dir() -> Option<PathBuf> {
    let d = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data/gadget4-64-z1");
    d.join("pos.f32").exists().then_some(d)
}

fn read<T, const W: usize>(dir: &Path, name: &str, f: fn([u8; W]) -> T) -> Vec<T> {
    let bytes = std::fs::read(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
    assert_eq!(bytes.len() % W, 0, "{name}: size");
    bytes.chunks_exact(W).map(|c| f(c.try_into().unwrap())).collect()
}

fn triples(v: Vec<f32>) -> Vec<[f32; 3]> {
    v.chunks_exact(3).map(|c| [c[0], c[1], c[2]]).collect()
}

#[test]
fn fof_matches_gadget4_catalogue() {
    let dir = data_dir();
    if !require("the GADGET-4 snapshot at ../shared/data/gadget4-64-z1", dir.is_some()) {
        return;
    }
    let dir = dir.unwrap();
    let pos = triples(read(&dir, "pos.f32", f32::from_le_bytes));
    let vel = triples(read(&dir, "vel.f32", f32::from_le_bytes));
    let ids: Vec<u32> = read(&dir, "ids.u32", u32::from_le_bytes);
    let glabel: Vec<i32> = read(&dir, "gadget_label.i32", i32::from_le_bytes);
    let glen: Vec<i32> = read(&dir, "GroupLen.i32", i32::from_le_bytes);
    let gmass: Vec<f32> = read(&dir, "GroupMass.f32", f32::from_le_bytes);
    let gpos = triples(read(&dir, "GroupPos.f32", f32::from_le_bytes));
    let n = 262_144;
    assert_eq!(pos.len(), n);
    assert_eq!(ids.len(), n);
    let (bl, l, min, pmass) = (50.0, 0.15625, 32, 4.075161606358443);

    // GADGET's groups as sorted id lists, in its catalogue order.
    let ng = glen.len();
    let mut gmembers: Vec<Vec<u32>> = vec![Vec::new(); ng];
    for (i, &g) in glabel.iter().enumerate() {
        if g >= 0 {
            gmembers[g as usize].push(ids[i]);
        }
    }
    for (g, m) in gmembers.iter_mut().enumerate() {
        m.sort_unstable();
        assert_eq!(m.len(), glen[g] as usize, "GADGET group {g}: label count vs GroupLen");
    }

    for threads in [1usize, 2] {
        let ctx = Context::new(Config { threads, ..Default::default() }).unwrap();
        let fields = FofFields { velocities: Some(&vel), masses: None, particle_mass: pmass, ids: Some(&ids) };
        let params = FofParams { linking_length: LinkingLength::Absolute(l), min_members: min, order: CatalogueOrder::Gadget, members: true };
        let t = std::time::Instant::now();
        let res = ctx.fof(&Domain::Periodic([bl; 3]), &pos, &fields, &params).unwrap();
        println!("{threads} threads: {:.3} s, {} groups", t.elapsed().as_secs_f64(), res.catalogue.len());
        let cat = &res.catalogue;
        assert_eq!(cat.len(), ng, "number of groups");
        assert_eq!(res.stats.particles_in_groups, glen.iter().map(|&x| x as usize).sum::<usize>());

        // Partition: the same sets of particle ids.
        let mut ours: Vec<Vec<u32>> = (0..cat.len())
            .map(|g| {
                let mut m: Vec<u32> = cat.members(g).iter().map(|&i| ids[i as usize]).collect();
                m.sort_unstable();
                m
            })
            .collect();
        // Labels agree with the member lists.
        for g in 0..cat.len() {
            for &i in cat.members(g) {
                assert_eq!(res.labels[i as usize], cat.tag[g]);
            }
            assert_eq!(cat.tag[g], *ours[g].iter().min().unwrap() as i64, "tag = minimum id");
        }
        assert_eq!(res.labels.iter().filter(|&&t| t >= 0).count(), res.stats.particles_in_groups);
        let mut theirs = gmembers.clone();
        ours.sort();
        theirs.sort();
        assert!(ours == theirs, "the partition differs from GADGET-4's");

        // Row by row in GADGET order (count descending), matched by id set: every row is at
        // GADGET-4's position but among groups of equal length, whose order GADGET-4 does
        // not fix (a rerun of GADGET-4 orders them differently); ztree orders those by
        // minimum id.
        let by_set: std::collections::HashMap<&[u32], usize> = gmembers.iter().enumerate().map(|(g, m)| (m.as_slice(), g)).collect();
        let mut moved_in_ties = 0;
        for g in 0..cat.len() {
            let mut m: Vec<u32> = cat.members(g).iter().map(|&i| ids[i as usize]).collect();
            m.sort_unstable();
            let k = by_set[m.as_slice()];
            assert_eq!(cat.count[g], glen[k] as u64);
            assert_eq!(cat.count[g], glen[g] as u64, "row {g} is not at GADGET-4's position (group {k}, lengths {} and {})", glen[k], glen[g]);
            moved_in_ties += usize::from(k != g);
            if g > 0 && cat.count[g] == cat.count[g - 1] {
                assert!(cat.tag[g - 1] < cat.tag[g], "rows {} and {g} of equal length are not in minimum-id order", g - 1);
            }
            let rel = (cat.mass[g] - gmass[k] as f64).abs() / gmass[k] as f64;
            assert!(rel < 1e-6, "mass of group {g}: {} vs {}", cat.mass[g], gmass[k]);
            for d in 0..3 {
                let mut dx = cat.centre[g][d] - gpos[k][d] as f64;
                dx -= (dx / bl).round() * bl;
                assert!(dx.abs() < 2e-5 * bl, "centre of group {g}, dim {d}: {} vs {}", cat.centre[g][d], gpos[k][d]);
            }
        }
        let ties = glen.windows(2).filter(|w| w[0] == w[1]).count();
        println!("{moved_in_ties} rows ordered differently from GADGET-4 among {ties} ties in GroupLen");
        assert!(glen.windows(2).all(|w| w[0] >= w[1]));
        assert!(cat.count.windows(2).all(|w| w[0] >= w[1]));
    }
}

/// DBSCAN with min_pts = 2 on both GADGET-4 boxes (z ≈ 1, and the more clustered z = 0)
/// gives GADGET-4's FoF groups, id set for id set; with min_pts = 10 every cluster lies
/// inside one of those groups.
#[test]
fn dbscan_min_pts_2_matches_gadget4_groups() {
    use ztree::{DbscanParams, PointClass};
    for name in ["gadget4-64-z1", "gadget4-64-z0-seed424242"] {
        let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../shared/data").join(name);
        if !require(&format!("the GADGET-4 snapshot at ../shared/data/{name}"), dir.join("pos.f32").exists()) {
            return;
        }
        let pos = triples(read(&dir, "pos.f32", f32::from_le_bytes));
        let ids: Vec<u32> = read(&dir, "ids.u32", u32::from_le_bytes);
        let glabel: Vec<i32> = read(&dir, "gadget_label.i32", i32::from_le_bytes);
        let mut theirs: Vec<Vec<u32>> = vec![Vec::new(); glabel.iter().map(|&g| g + 1).max().unwrap() as usize];
        for (i, &g) in glabel.iter().enumerate() {
            if g >= 0 {
                theirs[g as usize].push(ids[i]);
            }
        }
        let ctx = Context::new(Config::default()).unwrap();
        let fields = FofFields { velocities: None, masses: None, particle_mass: 1.0, ids: Some(&ids) };
        let dom = Domain::Periodic([50.0; 3]);
        let p = DbscanParams {
            eps: LinkingLength::Absolute(0.15625),
            min_pts: 2,
            min_members: 32,
            order: CatalogueOrder::Gadget,
            members: true,
            ..Default::default()
        };
        let t = std::time::Instant::now();
        let r = ctx.dbscan(&dom, &pos, &fields, &p).unwrap();
        println!("{name}: DBSCAN min_pts 2 in {:.3} s, {} clusters", t.elapsed().as_secs_f64(), r.catalogue.len());
        let cat = &r.catalogue.rows;
        let mut ours: Vec<Vec<u32>> = (0..cat.len())
            .map(|g| {
                let mut m: Vec<u32> = cat.members(g).iter().map(|&i| ids[i as usize]).collect();
                m.sort_unstable();
                m
            })
            .collect();
        for m in theirs.iter_mut() {
            m.sort_unstable();
        }
        ours.sort();
        theirs.sort();
        assert_eq!(ours.len(), theirs.len(), "{name}: clusters");
        assert!(ours == theirs, "{name}: DBSCAN min_pts = 2 differs from GADGET-4's FoF groups");
        assert_eq!(r.stats.border, 0);

        // min_pts = 10 (HACC's galaxies): clusters are subsets of the FoF groups at the
        // same ε, and every member of a cluster is core or within ε of one.
        let p10 = DbscanParams { min_pts: 10, min_members: 1, members: false, ..p };
        let r10 = ctx.dbscan(&dom, &pos, &fields, &p10).unwrap();
        let fof_all = ctx
            .fof(
                &dom,
                &pos,
                &fields,
                &FofParams { linking_length: LinkingLength::Absolute(0.15625), min_members: 1, order: CatalogueOrder::ZOrder, members: false },
            )
            .unwrap();
        let mut group_of: std::collections::HashMap<i64, i64> = std::collections::HashMap::new();
        for (i, &l) in r10.labels.iter().enumerate() {
            if l >= 0 {
                assert_ne!(r10.class[i], PointClass::Noise);
                let g = *group_of.entry(l).or_insert(fof_all.labels[i]);
                assert_eq!(g, fof_all.labels[i], "{name}: a min_pts = 10 cluster spans two FoF groups");
            }
        }
        println!(
            "{name}: min_pts 10: {} clusters, {} core, {} border, {} noise",
            r10.catalogue.len(),
            r10.stats.core,
            r10.stats.border,
            r10.stats.noise
        );
    }
}
