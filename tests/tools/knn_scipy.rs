//! kNN and radius queries against scipy's cKDTree, an independent implementation (needs the Python venv
//! that `make bootstrap` creates; skipped without it locally, a failure in CI).

use crate::common::*;
use ztree::{Config, Context, Domain, TreeParams};

fn ctx(threads: usize) -> Context {
    Context::new(Config { threads, tree: TreeParams { leaf_size: 8, top_target: 16, super_group: 4, ..Default::default() } }).unwrap()
}

/// scipy's cKDTree as an independent implementation: distances agree to rounding and,
/// where the k-th and (k+1)-th distances differ, the neighbour index sets are equal.
#[test]
fn agrees_with_scipy_ckdtree() {
    let py = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    if !require("scipy in .venv (run `make bootstrap`)", py.exists()) {
        return;
    }
    let c = ctx(2);
    let mut rng = Rng::new(21);
    for (shape, periodic, k) in [(Shape::Uniform, false, 16usize), (Shape::Clustered, true, 8), (Shape::GaussianOutliers, false, 5)] {
        let pts: Vec<[f64; 3]> = points(shape, 4000, [1.0; 3], &mut rng);
        let dir = std::env::temp_dir().join(format!("ztree-scipy-{}-{shape:?}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let f = dir.join("pts.f64");
        std::fs::write(&f, pts.iter().flat_map(|p| p.iter().flat_map(|v| v.to_le_bytes())).collect::<Vec<u8>>()).unwrap();
        let script = format!(
            "import numpy as np\nfrom scipy.spatial import cKDTree\np=np.fromfile('{}',dtype='<f8').reshape(-1,3)\nt=cKDTree(p{})\nd,i=t.query(p,k={})\nd.astype('<f8').tofile('{}')\ni.astype('<i8').tofile('{}')\n",
            f.display(),
            if periodic { ", boxsize=1.0" } else { "" },
            k + 1,
            dir.join("d").display(),
            dir.join("i").display()
        );
        let st = std::process::Command::new(&py).arg("-c").arg(script).status().unwrap();
        assert!(st.success());
        let sd: Vec<f64> = std::fs::read(dir.join("d")).unwrap().chunks(8).map(|b| f64::from_le_bytes(b.try_into().unwrap())).collect();
        let si: Vec<i64> = std::fs::read(dir.join("i")).unwrap().chunks(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect();
        let _ = std::fs::remove_dir_all(&dir);
        let dom = if periodic { Domain::periodic_cube(1.0) } else { Domain::Open };
        let ours = c.knn_lists(&dom, &pts, None, k).unwrap();
        let mut compared = 0;
        for q in 0..pts.len() {
            for j in 0..k {
                let (a, b) = (ours.distances[q * k + j], sd[q * (k + 1) + j]);
                assert!((a - b).abs() <= 1e-12 * (1.0 + b), "{shape:?} q={q} j={j}: {a} vs scipy {b}");
            }
            if sd[q * (k + 1) + k - 1] < sd[q * (k + 1) + k] {
                let mut x: Vec<i64> = ours.indices[q * k..(q + 1) * k].to_vec();
                let mut y: Vec<i64> = si[q * (k + 1)..q * (k + 1) + k].to_vec();
                x.sort();
                y.sort();
                assert_eq!(x, y, "{shape:?} q={q}: neighbour sets differ from scipy");
                compared += 1;
            }
        }
        assert!(compared > pts.len() / 2, "too few untied queries compared");
    }
}

/// Radius queries against scipy's `cKDTree.query_ball_point` (self and separate queries,
/// open and periodic, a radius per query): the same neighbour sets, except where a
/// distance lies within rounding of the radius (scipy's test is its own arithmetic).
#[test]
fn radius_agrees_with_scipy_query_ball_point() {
    use ztree::{ListOrder, RadiusOutput, RadiusParams, SourceFields};
    let py = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(".venv/bin/python");
    if !require("scipy in .venv (run `make bootstrap`)", py.exists()) {
        return;
    }
    let c = ctx(2);
    let mut rng = Rng::new(33);
    for (shape, periodic) in [(Shape::Uniform, false), (Shape::Clustered, true), (Shape::Duplicates, false)] {
        let src: Vec<[f64; 3]> = points(shape, 3000, [1.0; 3], &mut rng);
        let qry: Vec<[f64; 3]> = points(Shape::Uniform, 500, [1.0; 3], &mut rng);
        let radii: Vec<f64> = (0..qry.len()).map(|_| 0.02 + 0.08 * rng.f64()).collect();
        let dir = std::env::temp_dir().join(format!("ztree-scipy-ball-{}-{shape:?}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let write = |name: &str, v: &[f64]| std::fs::write(dir.join(name), v.iter().flat_map(|x| x.to_le_bytes()).collect::<Vec<u8>>()).unwrap();
        write("s", &src.concat());
        write("q", &qry.concat());
        write("r", &radii);
        let script = format!(
            "import numpy as np\nfrom scipy.spatial import cKDTree\nd='{}'\ns=np.fromfile(d+'/s',dtype='<f8').reshape(-1,3)\nq=np.fromfile(d+'/q',dtype='<f8').reshape(-1,3)\nr=np.fromfile(d+'/r',dtype='<f8')\nt=cKDTree(s{})\nfor name,pts,rad in (('self',s,0.05),('qry',q,r)):\n    l=t.query_ball_point(pts,rad,return_sorted=True)\n    np.array([len(x) for x in l],dtype='<i8').tofile(d+'/'+name+'_n')\n    np.concatenate([np.array(x,dtype='<i8') for x in l]).tofile(d+'/'+name+'_i')\n",
            dir.display(),
            if periodic { ", boxsize=1.0" } else { "" },
        );
        let st = std::process::Command::new(&py).arg("-c").arg(script).status().unwrap();
        assert!(st.success());
        let read = |name: &str| -> Vec<i64> {
            std::fs::read(dir.join(name)).unwrap().chunks(8).map(|b| i64::from_le_bytes(b.try_into().unwrap())).collect()
        };
        let dom = if periodic { Domain::periodic_cube(1.0) } else { Domain::Open };
        let f = SourceFields::default();
        let box_len = periodic.then_some([1.0; 3]);
        for (name, q, rad) in [("self", &src, None), ("qry", &qry, Some(&radii))] {
            let (sn, si) = (read(&format!("{name}_n")), read(&format!("{name}_i")));
            let p = match rad {
                Some(r) => RadiusParams::per_query(r),
                None => RadiusParams::new(0.05),
            }
            .with_lists(ListOrder::Index);
            let r = if name == "self" {
                c.radius_self(&dom, &src, &f, &p, &mut RadiusOutput::default())
            } else {
                c.radius(&dom, &src, q, &f, &p, &mut RadiusOutput::default())
            }
            .unwrap();
            let lists = r.lists.unwrap();
            let mut off = 0usize;
            let mut compared = 0;
            for i in 0..q.len() {
                let theirs = &si[off..off + sn[i] as usize];
                off += sn[i] as usize;
                let rr = rad.map_or(0.05, |r| r[i]);
                // Sources within rounding of the radius may go either way.
                let near_edge = |j: &i64| (dist2(&q[i], &src[*j as usize], box_len).sqrt() - rr).abs() <= 1e-12;
                let a: Vec<i64> = lists.of(i).iter().copied().filter(|j| !near_edge(j)).collect();
                let b: Vec<i64> = theirs.iter().copied().filter(|j| !near_edge(j)).collect();
                assert_eq!(a, b, "{shape:?} {name} query {i}: neighbours differ from scipy");
                compared += a.len();
            }
            assert!(compared > q.len(), "{shape:?} {name}: too few neighbours compared");
        }
        let _ = std::fs::remove_dir_all(&dir);
    }
}
