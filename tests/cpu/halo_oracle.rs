//! Halo centres and spherical-overdensity masses against brute force: the potential
//! minimum and the most bound member of every FoF halo (the same particle as an O(n²) f64
//! sum over the members, unwrapped about the first member), and SO masses, radii and
//! counts from every particle's distance to the centre, on clustered periodic points
//! (halos across the box faces), f32 and f64, 1 and 2 threads.

use crate::common::{Rng, Shape, points};
use ztree::halo::{Gravity, HaloColumns, HaloRequest, MIN_PARTICLES, Overdensity, SoParams};
use ztree::{Config, Context, Domain, FofFields, FofParams, LinkingLength, Real};

fn min_image(x: f64, l: f64) -> f64 {
    if x > 0.5 * l {
        x - l
    } else if x < -0.5 * l {
        x + l
    } else {
        x
    }
}

/// The first member with the smallest `-G Σ_{j≠i} m_j / sqrt(r² + ε²) + extra_i`.
fn brute_min(pos: &[[f64; 3]], mass: &[f64], g: Gravity, extra: &[f64]) -> usize {
    let eps2 = g.softening * g.softening;
    let mut best = (0usize, f64::INFINITY);
    for i in 0..pos.len() {
        let mut s = 0.0f64;
        for j in 0..pos.len() {
            if j != i {
                let r2: f64 = (0..3).map(|d| (pos[i][d] - pos[j][d]).powi(2)).sum();
                s += mass[j] / (r2 + eps2).sqrt();
            }
        }
        let v = -g.g * s + extra[i];
        if i == 0 || v < best.1 {
            best = (i, v);
        }
    }
    best.0
}

/// SO by the definition, from every particle's distance (minimum image) to `c`.
fn brute_so(pts: &[[f64; 3]], mass: &[f64], l: f64, c: [f64; 3], rho: f64) -> (f64, f64, u64) {
    let mut prof: Vec<(f64, f64)> =
        pts.iter().zip(mass).map(|(p, &m)| ((0..3).map(|d| min_image(p[d] - c[d], l).powi(2)).sum::<f64>().sqrt(), m)).collect();
    prof.sort_by(|a, b| a.0.total_cmp(&b.0));
    let (mut inside, mut count, mut k) = (0.0, 0usize, 0);
    let vol = |r: f64| 4.0 / 3.0 * std::f64::consts::PI * r * r * r;
    while k < prof.len() {
        let r = prof[k].0;
        let (mut m, mut n) = (inside, count);
        while k < prof.len() && prof[k].0 == r {
            m += prof[k].1;
            n += 1;
            k += 1;
        }
        if r > 0.0 && m / vol(r) < rho {
            return if count < MIN_PARTICLES {
                (0.0, 0.0, 0)
            } else {
                (inside, (3.0 * inside / (4.0 * std::f64::consts::PI * rho)).cbrt(), count as u64)
            };
        }
        inside = m;
        count = n;
    }
    panic!("the profile never falls below the threshold");
}

fn case<T: Real>(threads: usize, seed: u64) {
    let l = 10.0;
    let mut rng = Rng::new(seed);
    // Clumps, some across the faces of the box.
    let mut pts: Vec<[T; 3]> = points::<T, 3>(Shape::Clustered, 6000, [l; 3], &mut rng);
    for i in 0..1500 {
        let c = [0.02 * rng.normal(), 5.0 + 0.05 * rng.normal(), 0.03 * rng.normal()];
        pts[i] = c.map(|v: f64| {
            let t = T::from_f64(v.rem_euclid(l));
            if t.to_f64() >= l { T::ZERO } else { t }
        });
    }
    let n = pts.len();
    let mass: Vec<f64> = (0..n).map(|i| 1.0 + (i % 4) as f64 * 0.25).collect();
    let vel: Vec<[f64; 3]> = (0..n).map(|_| [rng.normal(), rng.normal(), rng.normal()]).collect();
    let ctx = Context::new(Config { threads, ..Default::default() }).unwrap();
    let domain = Domain::Periodic([l; 3]);
    let fields = FofFields::<3> { velocities: Some(&vel), masses: Some(&mass), particle_mass: 1.0, ids: None };
    let fp = FofParams { linking_length: LinkingLength::Absolute(0.06), min_members: 20, members: true, ..Default::default() };
    let fof = ctx.fof(&domain, &pts, &fields, &fp).unwrap();
    let cat = &fof.catalogue;
    assert!(cat.len() >= 3 && cat.count.iter().any(|&c| c > 600), "{:?}", cat.count);
    let g = Gravity { g: 4.3, softening: 0.003 };
    let centres = ctx.halo_centres(&domain, &pts, &fields, cat, g).unwrap();
    let as_f64 = |p: &[T; 3]| p.map(|v| v.to_f64());
    for h in 0..cat.len() {
        let m: Vec<usize> =
            cat.member_indices[cat.member_offsets[h] as usize..cat.member_offsets[h + 1] as usize].iter().map(|&i| i as usize).collect();
        let x0 = as_f64(&pts[m[0]]);
        let pos: Vec<[f64; 3]> = m.iter().map(|&i| std::array::from_fn(|d| x0[d] + min_image(as_f64(&pts[i])[d] - x0[d], l))).collect();
        let ms: Vec<f64> = m.iter().map(|&i| mass[i]).collect();
        let pm = m[brute_min(&pos, &ms, g, &vec![0.0; m.len()])];
        assert_eq!(centres.potential_min[h], pm as i64, "halo {h} ({} members): potential minimum", m.len());
        assert_eq!(centres.potential_min_pos[h], as_f64(&pts[pm]));
        let vbar = cat.velocity[h];
        let kin: Vec<f64> = m.iter().map(|&i| 0.5 * (0..3).map(|d| (vel[i][d] - vbar[d]) * (vel[i][d] - vbar[d])).sum::<f64>()).collect();
        let mbp = m[brute_min(&pos, &ms, g, &kin)];
        assert_eq!(centres.most_bound[h], mbp as i64, "halo {h}: most bound");
    }
    // SO around the centres, every definition, against the definition on all particles.
    let so = SoParams { rho_crit: 0.5, omega_m: 0.3, definitions: Overdensity::ALL.to_vec() };
    let cols = ctx.spherical_overdensity(&domain, &pts, Some(&mass), 1.0, &centres.potential_min_pos, None, &so).unwrap();
    let p64: Vec<[f64; 3]> = pts.iter().map(as_f64).collect();
    let mut nonzero = 0;
    for col in &cols {
        let rho = col.definition.threshold(so.rho_crit, so.omega_m);
        for (h, &c) in centres.potential_min_pos.iter().enumerate() {
            let c = c.map(|v| T::from_f64(v).to_f64());
            let (m, r, cnt) = brute_so(&p64, &mass, l, c, rho);
            assert_eq!((col.mass[h], col.count[h]), (m, cnt), "{:?} of halo {h}", col.definition);
            assert!((col.radius[h] - r).abs() <= 1e-12 * r.max(1.0), "{:?} radius of halo {h}: {} vs {r}", col.definition, col.radius[h]);
            nonzero += (cnt > 0) as usize;
        }
    }
    assert!(nonzero > cols.len(), "the SO masses were found");

    // Dynamics about the potential minima, against direct sums (v_max, J, K, σ_1D, the
    // trace of the inertia tensor).
    let dy = ctx.halo_dynamics(&domain, &pts, &fields, cat, &centres.potential_min_pos, g.g, Some(&cols[0])).unwrap();
    for h in 0..cat.len() {
        let m: Vec<usize> =
            cat.member_indices[cat.member_offsets[h] as usize..cat.member_offsets[h + 1] as usize].iter().map(|&i| i as usize).collect();
        let c = centres.potential_min_pos[h];
        let vbar = cat.velocity[h];
        let x: Vec<[f64; 3]> = m.iter().map(|&i| std::array::from_fn(|d| min_image(as_f64(&pts[i])[d] - c[d], l))).collect();
        let u: Vec<[f64; 3]> = m.iter().map(|&i| std::array::from_fn(|d| vel[i][d] - vbar[d])).collect();
        let (mut j, mut k, mut mt, mut tr) = ([0.0f64; 3], 0.0f64, 0.0f64, 0.0f64);
        for (e, &i) in m.iter().enumerate() {
            let (p, v, w) = (x[e], u[e], mass[i]);
            j[0] += w * (p[1] * v[2] - p[2] * v[1]);
            j[1] += w * (p[2] * v[0] - p[0] * v[2]);
            j[2] += w * (p[0] * v[1] - p[1] * v[0]);
            k += 0.5 * w * (v[0] * v[0] + v[1] * v[1] + v[2] * v[2]);
            mt += w;
            tr += w * (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]);
        }
        // v_max by brute force over every member's radius.
        let r: Vec<f64> = x.iter().map(|p| (p[0] * p[0] + p[1] * p[1] + p[2] * p[2]).sqrt()).collect();
        let vmax = r
            .iter()
            .filter(|&&ri| ri > 0.0)
            .map(|&ri| (g.g * m.iter().zip(&r).filter(|(_, rj)| **rj <= ri).map(|(&i, _)| mass[i]).sum::<f64>() / ri).sqrt())
            .fold(0.0, f64::max);
        let d = &dy[h];
        let close = |a: f64, b: f64| (a - b).abs() <= 1e-9 * b.abs().max(1e-300);
        assert!((0..3).all(|a| (d.angular_momentum[a] - j[a]).abs() <= 1e-9 * (j[0].abs() + j[1].abs() + j[2].abs())), "halo {h}: J");
        assert!(close(d.kinetic_energy, k) && close(d.sigma_1d, (2.0 * k / (3.0 * mt)).sqrt()), "halo {h}: K, σ");
        assert!(close(d.vmax, vmax), "halo {h}: v_max {} vs {vmax}", d.vmax);
        assert!(close(d.inertia.iter().sum::<f64>(), tr / mt), "halo {h}: the inertia tensor's trace");
        assert!(d.inertia[0] >= d.inertia[1] && d.inertia[1] >= d.inertia[2] && d.spin > 0.0);
    }

    // Everything in one call: the same columns, the potential energy against the double
    // sum, and the per-type sums against the members' types.
    let types: Vec<u8> = (0..n).map(|i| [1u8, 1, 4, 0, 1][i % 5]).collect();
    let all = HaloColumns { centre: true, most_bound: true, so: true, dynamics: true, types: true };
    let req = HaloRequest { columns: all, gravity: g, rho_crit: so.rho_crit, omega_m: so.omega_m, types: Some(&types) };
    let props = ctx.halo_properties(&domain, &pts, &fields, cat, &req).unwrap();
    assert_eq!(props.centres.potential_min, centres.potential_min);
    assert_eq!(props.centres.most_bound, centres.most_bound);
    // The combined call starts its SO search from the FoF mass: the same masses and radii.
    for (a, b) in props.so.iter().zip(&cols) {
        assert_eq!((a.definition, &a.mass, &a.count), (b.definition, &b.mass, &b.count));
    }
    assert_eq!(props.dynamics, dy);
    let tsum = props.types.as_ref().unwrap();
    assert_eq!(tsum.n_types, 5);
    let mut before = [0i64; 5];
    for h in 0..cat.len() {
        let m: Vec<usize> =
            cat.member_indices[cat.member_offsets[h] as usize..cat.member_offsets[h + 1] as usize].iter().map(|&i| i as usize).collect();
        for t in 0..5 {
            let of_t: Vec<usize> = m.iter().copied().filter(|&i| types[i] as usize == t).collect();
            let row = h * 5 + t;
            assert_eq!(tsum.count[row], of_t.len() as i64, "halo {h}, type {t}: count");
            assert_eq!(tsum.mass[row], of_t.iter().map(|&i| mass[i]).sum::<f64>(), "halo {h}, type {t}: mass");
            assert_eq!(tsum.offset[row], before[t], "halo {h}, type {t}: offset");
            before[t] += of_t.len() as i64;
        }
        let x0 = as_f64(&pts[m[0]]);
        let pos: Vec<[f64; 3]> = m.iter().map(|&i| std::array::from_fn(|d| x0[d] + min_image(as_f64(&pts[i])[d] - x0[d], l))).collect();
        let eps2 = g.softening * g.softening;
        let mut w = 0.0;
        for (a, &i) in m.iter().enumerate() {
            let mut s = 0.0;
            for (b, &j) in m.iter().enumerate() {
                if a != b {
                    let r2: f64 = (0..3).map(|d| (pos[a][d] - pos[b][d]).powi(2)).sum();
                    s += mass[j] / (r2 + eps2).sqrt();
                }
            }
            w += mass[i] * s;
        }
        let w = -0.5 * g.g * w;
        let tol = if m.len() <= 16384 { 1e-5 } else { 1e-3 };
        assert!(((props.potential_energy[h] - w) / w).abs() <= tol, "halo {h} ({} members): W {} vs {w}", m.len(), props.potential_energy[h]);
    }
    // Only the per-type column: no centres computed.
    let req = HaloRequest { columns: HaloColumns { types: true, ..Default::default() }, ..req };
    let only = ctx.halo_properties(&domain, &pts, &fields, cat, &req).unwrap();
    assert!(only.centres.potential_min.is_empty() && only.so.is_empty() && only.types == props.types);
    // Missing inputs are errors naming them.
    let req = HaloRequest { columns: HaloColumns { types: true, ..Default::default() }, types: None, ..req };
    assert!(ctx.halo_properties(&domain, &pts, &fields, cat, &req).unwrap_err().to_string().contains("types"));
    let bad_types: Vec<u8> = (0..n).map(|i| if i == 17 { 32 } else { 0 }).collect();
    let req = HaloRequest { types: Some(&bad_types), ..req };
    assert!(ctx.halo_properties(&domain, &pts, &fields, cat, &req).unwrap_err().to_string().contains("particle 17"));
    let no_vel = FofFields::<3> { velocities: None, ..fields };
    let req = HaloRequest { columns: HaloColumns { dynamics: true, ..Default::default() }, ..req };
    assert!(ctx.halo_properties(&domain, &pts, &no_vel, cat, &req).unwrap_err().to_string().contains("velocities"));
}

/// GADGET-4's internal units: G and ρ_crit as it computes them, comoving at a < 1.
#[test]
fn gadget_cosmology_matches_gadget_units() {
    let (ul, um, uv) = (3.085678e24, 1.989e43, 1e5);
    let c = ztree::halo::gadget_cosmology(ul, um, uv, 0.308, 0.692, 1.0).unwrap();
    // G = 43.0187 (Mpc/h, 1e10 Msun/h, km/s); ρ_crit0 = 3 H0² / 8πG with H0 = 100.
    assert!((c.g - 43.0187).abs() < 1e-3, "G = {}", c.g);
    assert!((c.rho_crit - 3.0 * 100.0 * 100.0 / (8.0 * std::f64::consts::PI * c.g)).abs() < 1e-6 * c.rho_crit);
    assert!((c.omega_m - 0.308).abs() < 1e-12);
    // At a = 0.5 the comoving mean matter density is unchanged: Ω_m(a) ρ_crit(a) a³ = Ω_m ρ_crit0.
    let h = ztree::halo::gadget_cosmology(ul, um, uv, 0.308, 0.692, 0.5).unwrap();
    assert!((h.omega_m * h.rho_crit - 0.308 * c.rho_crit).abs() < 1e-12 * c.rho_crit);
    assert!(h.omega_m > 0.308 && h.omega_m < 1.0);
    assert!(ztree::halo::gadget_cosmology(ul, um, uv, 0.308, 0.692, 0.0).is_err());
    assert!(ztree::halo::gadget_cosmology(ul, um, -1.0, 0.308, 0.692, 1.0).is_err());
}

#[test]
fn halo_centres_and_so_equal_brute_force() {
    case::<f64>(1, 3);
    case::<f32>(2, 4);
}
