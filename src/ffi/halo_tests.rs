//! `ztree_fof` with halo property columns: every column equals `Context::halo_properties`
//! on the same particles, host and (staged) device arrays; the checks of the new
//! parameters; callers compiled against the layouts before the columns.

use std::ffi::c_void;

use super::ztree_gadget_cosmology;
use crate::ffi::abi::Versioned;
use crate::ffi::fof::ztree_fof;
use crate::ffi::types::*;
use crate::ffi::{ztree_context, ztree_create, ztree_destroy, ztree_last_error};
use crate::halo::{Gravity, HaloColumns, HaloRequest};
use crate::{BorderPoints, CatalogueOrder, Config, Context, DbscanParams, Domain, FofFields, FofParams, LinkingLength};

const L: f64 = 10.0;

/// Clumps (two across the box faces) in a uniform background, velocities, masses, types.
struct Cloud {
    xyz: Vec<f64>,
    vel: Vec<f64>,
    mass: Vec<f64>,
    types: Vec<u8>,
}

fn cloud(n: usize) -> Cloud {
    let mut s = 0x2545_F491_4F6C_DD1Du64;
    let mut r = move || {
        s = s.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (s >> 11) as f64 / (1u64 << 53) as f64
    };
    let centres = [[0.05, 5.0, 9.97], [5.0, 5.0, 5.0], [9.9, 0.1, 3.0], [2.0, 7.0, 1.0]];
    let mut xyz = Vec::with_capacity(3 * n);
    for i in 0..n {
        let p: [f64; 3] = if i % 5 == 4 {
            [r() * L, r() * L, r() * L]
        } else {
            let c = centres[i % 4];
            let rad = 0.3 * r() * r();
            std::array::from_fn(|d| (c[d] + rad * (2.0 * r() - 1.0)).rem_euclid(L) % L)
        };
        xyz.extend(p);
    }
    Cloud {
        vel: (0..3 * n).map(|_| 2.0 * r() - 1.0).collect(),
        mass: (0..n).map(|i| 1.0 + (i % 3) as f64).collect(),
        types: (0..n).map(|i| [1u8, 1, 4, 1, 0, 5][i % 6]).collect(),
        xyz,
    }
}

fn particles(c: &Cloud) -> ztree_particles {
    let arr = |v: &Vec<f64>, d: usize| ztree_array { data: unsafe { v.as_ptr().add(d) } as *const c_void, dtype: ZTREE_DTYPE_F64, stride: 24 };
    let mut p = ztree_particles::defaults();
    p.count = c.mass.len() as i64;
    p.pos = [arr(&c.xyz, 0), arr(&c.xyz, 1), arr(&c.xyz, 2)];
    p.vel = [arr(&c.vel, 0), arr(&c.vel, 1), arr(&c.vel, 2)];
    p.mass = ztree_array { data: c.mass.as_ptr() as *const c_void, dtype: ZTREE_DTYPE_F64, stride: 0 };
    p.types = ztree_array { data: c.types.as_ptr() as *const c_void, dtype: ZTREE_DTYPE_U8, stride: 0 };
    p
}

fn context() -> *mut ztree_context {
    let mut cfg = ztree_config::defaults();
    cfg.periodic = 1;
    cfg.box_size = [L; 3];
    let mut ctx = std::ptr::null_mut();
    assert_eq!(ztree_create(&cfg, &mut ctx), ztree_status::ZTREE_OK);
    ctx
}

fn params() -> ztree_fof_params {
    let mut fp = ztree_fof_params::defaults();
    fp.linking_length = 0.05;
    fp.min_members = 20;
    fp.order = ZTREE_CATALOGUE_GADGET;
    fp.columns = ZTREE_COLUMN_CENTRE | ZTREE_COLUMN_MOST_BOUND | ZTREE_COLUMN_SO | ZTREE_COLUMN_DYNAMICS | ZTREE_COLUMN_TYPES;
    fp.gravity_constant = 43.0;
    fp.softening = 0.002;
    fp.rho_crit = 27.7;
    fp.omega_m = 0.3;
    fp
}

fn call(ctx: *mut ztree_context, p: &ztree_particles, fp: &ztree_fof_params, o: &mut ztree_fof_output) -> ztree_status {
    unsafe { ztree_fof(ctx, p, fp, o) }
}

fn message(ctx: *mut ztree_context) -> String {
    unsafe { std::ffi::CStr::from_ptr(ztree_last_error(ctx)) }.to_string_lossy().into_owned()
}

fn slice<'a, V>(p: *const V, n: usize) -> &'a [V] {
    assert!(!p.is_null());
    unsafe { std::slice::from_raw_parts(p, n) }
}

#[test]
fn columns_equal_the_rust_call() {
    let c = cloud(6000);
    let n = c.mass.len();
    let p = particles(&c);
    let ctx = context();
    let fp = params();
    let mut o = ztree_fof_output::defaults();
    assert_eq!(call(ctx, &p, &fp, &mut o), ztree_status::ZTREE_OK, "{}", message(ctx));
    let nh = o.n_halos as usize;
    assert!(nh >= 4, "{nh} halos");
    assert!(o.member_offsets.is_null() && o.member_indices.is_null(), "members were not asked for");

    // The Rust API on the same particles.
    let rs = Context::new(Config::default()).unwrap();
    let pts: Vec<[f64; 3]> = c.xyz.chunks(3).map(|v| [v[0], v[1], v[2]]).collect();
    let vel: Vec<[f64; 3]> = c.vel.chunks(3).map(|v| [v[0], v[1], v[2]]).collect();
    let fields = FofFields::<3> { velocities: Some(&vel), masses: Some(&c.mass), particle_mass: 1.0, ids: None };
    let domain = Domain::Periodic([L; 3]);
    let fof = rs
        .fof(
            &domain,
            &pts,
            &fields,
            &FofParams { linking_length: LinkingLength::Absolute(0.05), min_members: 20, order: CatalogueOrder::Gadget, members: true },
        )
        .unwrap();
    let all = HaloColumns { centre: true, most_bound: true, so: true, dynamics: true, types: true };
    let req = HaloRequest { columns: all, gravity: Gravity { g: 43.0, softening: 0.002 }, rho_crit: 27.7, omega_m: 0.3, types: Some(&c.types) };
    let h = rs.halo_properties(&domain, &pts, &fields, &fof.catalogue, &req).unwrap();
    assert_eq!(fof.catalogue.len(), nh);
    assert_eq!(slice(o.centre_index, nh), &h.centres.potential_min[..]);
    assert_eq!(slice(o.centre_pos, 3 * nh), &h.centres.potential_min_pos.concat()[..]);
    assert_eq!(slice(o.centre_potential, nh), &h.centres.potential[..]);
    assert_eq!(slice(o.most_bound_index, nh), &h.centres.most_bound[..]);
    assert_eq!(slice(o.most_bound_energy, nh), &h.centres.most_bound_energy[..]);
    let (so_m, so_r) = (slice(o.so_mass, 4 * nh), slice(o.so_radius, 4 * nh));
    for (k, col) in h.so.iter().enumerate() {
        for g in 0..nh {
            assert_eq!((so_m[4 * g + k], so_r[4 * g + k]), (col.mass[g], col.radius[g]), "SO {k} of halo {g}");
        }
    }
    assert!(so_m.chunks(4).all(|m| m[ZTREE_SO_500C as usize] <= m[ZTREE_SO_200C as usize]), "M500c <= M200c");
    let d = &h.dynamics;
    assert_eq!(slice(o.vmax, nh), &d.iter().map(|x| x.vmax).collect::<Vec<_>>()[..]);
    assert_eq!(slice(o.r_vmax, nh), &d.iter().map(|x| x.r_vmax).collect::<Vec<_>>()[..]);
    assert_eq!(slice(o.angular_momentum, 3 * nh), &d.iter().flat_map(|x| x.angular_momentum).collect::<Vec<_>>()[..]);
    assert_eq!(slice(o.spin, nh), &d.iter().map(|x| x.spin).collect::<Vec<_>>()[..]);
    assert_eq!(slice(o.kinetic_energy, nh), &d.iter().map(|x| x.kinetic_energy).collect::<Vec<_>>()[..]);
    assert_eq!(slice(o.potential_energy, nh), &h.potential_energy[..]);
    assert_eq!(slice(o.vel_dispersion_1d, nh), &d.iter().map(|x| x.sigma_1d).collect::<Vec<_>>()[..]);
    assert_eq!(slice(o.inertia, 3 * nh), &d.iter().flat_map(|x| x.inertia).collect::<Vec<_>>()[..]);
    assert_eq!(slice(o.inertia_axes, 9 * nh), &d.iter().flat_map(|x| x.inertia_axes.concat()).collect::<Vec<_>>()[..]);
    assert_eq!(slice(o.reduced_inertia, 3 * nh), &d.iter().flat_map(|x| x.reduced_inertia).collect::<Vec<_>>()[..]);
    assert_eq!(slice(o.reduced_axes, 9 * nh), &d.iter().flat_map(|x| x.reduced_axes.concat()).collect::<Vec<_>>()[..]);
    let t = h.types.as_ref().unwrap();
    assert_eq!(o.n_types, 6);
    assert_eq!(slice(o.len_type, 6 * nh), &t.count[..]);
    assert_eq!(slice(o.mass_type, 6 * nh), &t.mass[..]);
    assert_eq!(slice(o.offset_type, 6 * nh), &t.offset[..]);
    let halos = slice(o.halos, nh);
    for g in 0..nh {
        assert_eq!(slice(o.len_type, 6 * nh)[6 * g..6 * g + 6].iter().sum::<i64>(), halos[g].count, "halo {g}: the types add up");
    }

    // Members asked for as well: the same columns; then no columns: every column NULL.
    let mut fm = fp;
    fm.members = 1;
    let mut om = ztree_fof_output::defaults();
    assert_eq!(call(ctx, &p, &fm, &mut om), ztree_status::ZTREE_OK, "{}", message(ctx));
    assert_eq!(slice(om.centre_index, nh), &h.centres.potential_min[..]);
    assert_eq!(slice(om.member_offsets, nh + 1)[nh] as usize, fof.catalogue.member_indices.len());
    let mut plain = fp;
    plain.columns = 0;
    assert_eq!(call(ctx, &p, &plain, &mut om), ztree_status::ZTREE_OK, "{}", message(ctx));
    assert!(om.centre_index.is_null() && om.so_mass.is_null() && om.vmax.is_null() && om.len_type.is_null() && om.n_types == 0);
    // Only the SO column: it needs the centres, but hands out no centre column.
    let mut so_only = fp;
    so_only.columns = ZTREE_COLUMN_SO;
    assert_eq!(call(ctx, &p, &so_only, &mut om), ztree_status::ZTREE_OK, "{}", message(ctx));
    assert!(om.centre_index.is_null() && om.vmax.is_null());
    assert_eq!(slice(om.so_mass, 4 * nh), so_m);
    let _ = n;
    ztree_destroy(ctx);
}

/// DBSCAN's clusters take the same columns, over their members (core and border points),
/// the SO masses counting every particle of the call, the stars' clusters among all types.
#[test]
fn dbscan_columns_equal_the_rust_call() {
    let c = cloud(6000);
    let p = particles(&c);
    let ctx = context();
    let fp = params();
    let mut dp = ztree_dbscan_params::defaults();
    dp.eps = 0.05;
    dp.min_pts = 5;
    dp.min_members = 10;
    dp.order = ZTREE_CATALOGUE_GADGET;
    dp.type_mask = 1 << 1;
    dp.columns = fp.columns;
    dp.gravity_constant = fp.gravity_constant;
    dp.softening = fp.softening;
    dp.rho_crit = fp.rho_crit;
    dp.omega_m = fp.omega_m;
    let mut o = ztree_dbscan_output::defaults();
    let s = unsafe { crate::ffi::dbscan::ztree_dbscan(ctx, &p, &dp, &mut o) };
    assert_eq!(s, ztree_status::ZTREE_OK, "{}", message(ctx));
    let nc = o.n_clusters as usize;
    assert!(nc >= 3, "{nc} clusters");
    assert!(o.member_offsets.is_null(), "members were not asked for");

    let rs = Context::new(Config::default()).unwrap();
    let pts: Vec<[f64; 3]> = c.xyz.chunks(3).map(|v| [v[0], v[1], v[2]]).collect();
    let vel: Vec<[f64; 3]> = c.vel.chunks(3).map(|v| [v[0], v[1], v[2]]).collect();
    let fields = FofFields::<3> { velocities: Some(&vel), masses: Some(&c.mass), particle_mass: 1.0, ids: None };
    let domain = Domain::Periodic([L; 3]);
    let subset: Vec<u32> = (0..c.types.len() as u32).filter(|&i| c.types[i as usize] == 1).collect();
    let params = DbscanParams {
        eps: LinkingLength::Absolute(0.05),
        min_pts: 5,
        min_members: 10,
        order: CatalogueOrder::Gadget,
        members: true,
        border: BorderPoints::NearestCore,
    };
    let mut labels = vec![0i64; pts.len()];
    let (cat, _) = rs.dbscan_subset_into(&domain, &pts, &fields, &params, &subset, &mut labels, None).unwrap();
    let all = HaloColumns { centre: true, most_bound: true, so: true, dynamics: true, types: true };
    let req = HaloRequest { columns: all, gravity: Gravity { g: 43.0, softening: 0.002 }, rho_crit: 27.7, omega_m: 0.3, types: Some(&c.types) };
    let h = rs.halo_properties(&domain, &pts, &fields, &cat.rows, &req).unwrap();
    assert_eq!(cat.len(), nc);
    assert_eq!(slice(o.centre_index, nc), &h.centres.potential_min[..]);
    assert_eq!(slice(o.most_bound_index, nc), &h.centres.most_bound[..]);
    assert_eq!(slice(o.so_mass, 4 * nc), &(0..4 * nc).map(|k| h.so[k % 4].mass[k / 4]).collect::<Vec<_>>()[..]);
    assert_eq!(slice(o.vmax, nc), &h.dynamics.iter().map(|x| x.vmax).collect::<Vec<_>>()[..]);
    assert_eq!(slice(o.potential_energy, nc), &h.potential_energy[..]);
    // Every member is of type 1: one column of the per-type sums holds them all.
    assert_eq!(o.n_types, 2);
    let lt = slice(o.len_type, 2 * nc);
    let clusters = slice(o.clusters, nc);
    assert!((0..nc).all(|k| lt[2 * k] == 0 && lt[2 * k + 1] == clusters[k].count));
    // SO counts the other types too: more mass than the clusters' own members hold.
    assert!((0..nc).any(|k| slice(o.so_mass, 4 * nc)[4 * k] > clusters[k].mass));
    // Without columns: NULL again.
    dp.columns = 0;
    assert_eq!(unsafe { crate::ffi::dbscan::ztree_dbscan(ctx, &p, &dp, &mut o) }, ztree_status::ZTREE_OK);
    assert!(o.centre_index.is_null() && o.so_mass.is_null() && o.len_type.is_null());
    ztree_destroy(ctx);
}

#[test]
fn column_arguments_are_checked() {
    let c = cloud(500);
    let p = particles(&c);
    let ctx = context();
    let bad = |fp: &ztree_fof_params, p: &ztree_particles, status: ztree_status, words: &str| {
        let mut o = ztree_fof_output::defaults();
        assert_eq!(call(ctx, p, fp, &mut o), status, "{}", message(ctx));
        assert!(message(ctx).contains(words), "{} lacks {words}", message(ctx));
    };
    let mut fp = params();
    fp.columns = 1 << 9;
    bad(&fp, &p, ztree_status::ZTREE_ERR_INVALID_ARGUMENT, "unknown bits");
    for g in [0.0, -1.0, f64::NAN, f64::INFINITY] {
        let mut fp = params();
        fp.gravity_constant = g;
        bad(&fp, &p, ztree_status::ZTREE_ERR_INVALID_ARGUMENT, "gravity_constant");
    }
    let mut fp = params();
    fp.softening = -0.1;
    bad(&fp, &p, ztree_status::ZTREE_ERR_INVALID_ARGUMENT, "softening");
    for (rho, om) in [(0.0, 0.3), (1.0, 0.0), (f64::NAN, 0.3)] {
        let mut fp = params();
        fp.rho_crit = rho;
        fp.omega_m = om;
        bad(&fp, &p, ztree_status::ZTREE_ERR_INVALID_ARGUMENT, if rho == 1.0 { "omega_m" } else { "rho_crit" });
    }
    // Without velocities: the most bound member and the dynamics cannot be computed.
    let mut nv = p;
    nv.vel = [ztree_array { data: std::ptr::null(), dtype: 0, stride: 0 }; 3];
    bad(&params(), &nv, ztree_status::ZTREE_ERR_NULL_POINTER, "velocities");
    let mut fp = params();
    fp.columns = ZTREE_COLUMN_CENTRE | ZTREE_COLUMN_SO;
    let mut o = ztree_fof_output::defaults();
    assert_eq!(call(ctx, &nv, &fp, &mut o), ztree_status::ZTREE_OK, "centres and SO need no velocities: {}", message(ctx));
    let mut nt = p;
    nt.types = ztree_array { data: std::ptr::null(), dtype: 0, stride: 0 };
    bad(&params(), &nt, ztree_status::ZTREE_ERR_NULL_POINTER, "types");
    // A type number no mask can select.
    let mut wrong = c.types.clone();
    wrong[3] = 40;
    let mut wt = p;
    wt.types.data = wrong.as_ptr() as *const c_void;
    bad(&params(), &wt, ztree_status::ZTREE_ERR_INVALID_ARGUMENT, "0..=31");
    // G is not needed for the per-type sums alone.
    let mut fp = params();
    fp.columns = ZTREE_COLUMN_TYPES;
    fp.gravity_constant = 0.0;
    assert_eq!(call(ctx, &p, &fp, &mut o), ztree_status::ZTREE_OK, "{}", message(ctx));
    ztree_destroy(ctx);
}

/// Callers compiled against the layouts before the columns: their params carry no
/// columns, and nothing is written past their output struct.
#[test]
fn callers_of_the_older_layouts_still_work() {
    let c = cloud(2000);
    let p = particles(&c);
    let ctx = context();
    let mut fp = params();
    fp.struct_size = std::mem::offset_of!(ztree_fof_params, columns) + 4; // sizeof before: 56
    assert_eq!(fp.struct_size, 56);
    let mut o = ztree_fof_output::defaults();
    assert_eq!(call(ctx, &p, &fp, &mut o), ztree_status::ZTREE_OK, "{}", message(ctx));
    assert!(o.n_halos > 0 && o.centre_index.is_null() && o.so_mass.is_null(), "an older params struct asks for no columns");
    // An older output struct: the bytes after it stay as they were.
    let mut o = ztree_fof_output::defaults();
    o.struct_size = std::mem::offset_of!(ztree_fof_output, centre_index);
    let sentinel = 0x5a5a_5a5a_5a5a_5a5a_usize as *const f64;
    o.so_mass = sentinel;
    o.n_types = -7;
    assert_eq!(call(ctx, &p, &params(), &mut o), ztree_status::ZTREE_OK, "{}", message(ctx));
    assert!(o.n_halos > 0);
    assert_eq!((o.so_mass, o.n_types), (sentinel, -7), "written past the caller's struct");
    ztree_destroy(ctx);
}

#[test]
fn gadget_cosmology_from_c() {
    let (mut g, mut rho, mut om) = (0.0, 0.0, 0.0);
    let s = ztree_gadget_cosmology(3.085678e24, 1.989e43, 1e5, 0.308, 0.692, 1.0, &mut g, &mut rho, &mut om);
    assert_eq!(s, ztree_status::ZTREE_OK);
    let c = crate::halo::gadget_cosmology(3.085678e24, 1.989e43, 1e5, 0.308, 0.692, 1.0).unwrap();
    assert_eq!((g, rho, om), (c.g, c.rho_crit, c.omega_m));
    let s = ztree_gadget_cosmology(3.085678e24, 1.989e43, 1e5, 0.308, 0.692, 1.0, std::ptr::null_mut(), &mut rho, std::ptr::null_mut());
    assert_eq!(s, ztree_status::ZTREE_OK, "NULL outputs are skipped");
    let s = ztree_gadget_cosmology(3.085678e24, 1.989e43, 1e5, 0.308, 0.692, -0.5, &mut g, &mut rho, &mut om);
    assert_eq!(s, ztree_status::ZTREE_ERR_INVALID_ARGUMENT);
}

/// Device arrays (staged through host memory) give the host call's columns.
#[cfg(feature = "cuda-emu")]
#[test]
fn columns_on_device_arrays_equal_host_arrays() {
    crate::ffi::device::EMULATE.store(true, std::sync::atomic::Ordering::Relaxed);
    let c = cloud(3000);
    let host = particles(&c);
    let mut dev = host;
    dev.memory = ZTREE_MEMORY_CUDA_DEVICE;
    let ctx = context();
    let words = |p: &ztree_particles| {
        let mut o = ztree_fof_output::defaults();
        assert_eq!(call(ctx, p, &params(), &mut o), ztree_status::ZTREE_OK, "{}", message(ctx));
        let nh = o.n_halos as usize;
        let mut w: Vec<u64> = slice(o.centre_index, nh).iter().map(|&v| v as u64).collect();
        for (ptr, k) in
            [(o.so_mass, 4), (o.so_radius, 4), (o.vmax, 1), (o.potential_energy, 1), (o.inertia_axes, 9), (o.mass_type, o.n_types as usize)]
        {
            w.extend(slice(ptr, k * nh).iter().map(|v| v.to_bits()));
        }
        w.push(nh as u64);
        w
    };
    let (h, d) = (words(&host), words(&dev));
    assert!(h.len() > 10);
    assert_eq!(d, h);
    ztree_destroy(ctx);
}
