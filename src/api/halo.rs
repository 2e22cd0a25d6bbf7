//! Halo properties on a context: the potential-minimum centres and most bound particles of
//! a FoF catalogue's halos (`halo::potential`), and spherical-overdensity masses around
//! centres from radius lists (`halo::so`).

use rayon::prelude::*;

use super::Context;
use crate::error::{Error, Result};
use crate::fof::{Catalogue, FofFields};
use crate::geom::Real;
use crate::geom::metric::min_image;
use crate::halo::dynamics::{Dynamics, dynamics};
use crate::halo::potential::{Gravity, Members, minimum, potential_energy};
use crate::halo::screen::{SCREEN_MAX, screen};
use crate::halo::so::so_from_profile;
use crate::halo::{HaloCentres, SoColumn, SoParams};
use crate::input::{Domain, PointSource, ScalarField};
use crate::knn::SourceFields;
use crate::radius::{ListOrder, RadiusOutput, RadiusParams, SearchRadius};

/// Per halo: the potential-minimum member and its potential; the most bound member and its
/// energy (with velocities).
type Centre = (usize, f64, Option<(usize, f64)>);

impl Context {
    /// The potential-minimum member of every halo of `catalogue` (which must carry member
    /// lists, `FofParams::members`, from a call on the same `points` and `fields`), and with
    /// velocities the most bound member: exactly the particles a brute-force f64 sum over
    /// each halo's members finds (see [`crate::halo::Gravity`] for the definition).
    pub fn halo_centres<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        catalogue: &Catalogue<D>,
        gravity: Gravity,
    ) -> Result<HaloCentres<D>> {
        let with_vel = fields.velocities.is_some() && catalogue.velocity.len() == catalogue.len();
        Ok(self.centres_and_energy(domain, points, fields, catalogue, gravity, with_vel, false)?.0)
    }

    /// The centres, the most bound members when `most_bound`, and the potential energies
    /// when `energy`.
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn centres_and_energy<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        catalogue: &Catalogue<D>,
        gravity: Gravity,
        most_bound: bool,
        energy: bool,
    ) -> Result<(HaloCentres<D>, Vec<f64>)> {
        domain.validate()?;
        if !(gravity.g.is_finite() && gravity.g > 0.0) {
            return Err(Error::InvalidParameter { name: "gravity.g", why: format!("must be finite and > 0 (got {})", gravity.g) });
        }
        if !(gravity.softening.is_finite() && gravity.softening >= 0.0) {
            return Err(Error::InvalidParameter { name: "gravity.softening", why: format!("must be finite and >= 0 (got {})", gravity.softening) });
        }
        let n = points.len();
        fields.validate(n)?;
        let rows = catalogue.len();
        if catalogue.member_offsets.len() != rows + 1 {
            return Err(Error::InvalidParameter { name: "catalogue", why: "has no member lists (FofParams::members)".into() });
        }
        if let Some(&i) = catalogue.member_indices.iter().find(|&&i| i < 0 || i as usize >= n) {
            return Err(Error::InvalidParameter { name: "catalogue", why: format!("member index {i} is not one of the {n} points") });
        }
        let with_vel = most_bound && fields.velocities.is_some() && catalogue.velocity.len() == rows;
        if most_bound && !with_vel {
            return Err(Error::InvalidParameter { name: "velocities", why: "the most bound member needs the particles' velocities".into() });
        }
        let box_len = domain.box_lengths();
        let pos_of = |i: usize| -> [f64; D] {
            let p = points.point(i);
            std::array::from_fn(|d| p[d].to_f64())
        };
        let per: Vec<(Centre, f64)> = self.pool.install(|| {
            (0..rows)
                .into_par_iter()
                .map(|g| {
                    let m = &catalogue.member_indices[catalogue.member_offsets[g] as usize..catalogue.member_offsets[g + 1] as usize];
                    let x0 = pos_of(m[0] as usize);
                    let pos: Vec<[f64; D]> = m
                        .iter()
                        .map(|&i| {
                            let p = pos_of(i as usize);
                            match box_len {
                                Some(l) => std::array::from_fn(|d| x0[d] + min_image(p[d] - x0[d], l[d], 0.5 * l[d])),
                                None => p,
                            }
                        })
                        .collect();
                    let mass: Vec<f64> = m.iter().map(|&i| fields.masses.map_or(fields.particle_mass, |f| f.get(i as usize))).collect();
                    let members = Members { pos: &pos, mass: &mass };
                    let kin: Option<Vec<f64>> = with_vel.then(|| {
                        let (v, vbar) = (fields.velocities.unwrap(), catalogue.velocity[g]);
                        m.iter()
                            .map(|&i| {
                                let u = v.get(i as usize);
                                0.5 * (0..D).map(|d| (u[d] - vbar[d]) * (u[d] - vbar[d])).sum::<f64>()
                            })
                            .collect()
                    });
                    let ((pm, phi), mbp, w) = if m.len() <= SCREEN_MAX {
                        let s = screen(&members, gravity, kin.as_deref());
                        (s.minimum, s.most_bound, s.energy)
                    } else {
                        let mbp = kin.as_ref().map(|kin| minimum(&members, gravity, |k| kin[k]));
                        let w = if energy { potential_energy(&members, gravity) } else { 0.0 };
                        (minimum(&members, gravity, |_| 0.0), mbp, w)
                    };
                    ((m[pm] as usize, phi, mbp.map(|(k, e)| (m[k] as usize, e))), w)
                })
                .collect()
        });
        let mut out = HaloCentres::<D>::default();
        let energies = if energy { per.iter().map(|p| p.1).collect() } else { Vec::new() };
        for ((pm, phi, mbp), _) in per {
            out.potential_min.push(pm as i64);
            out.potential_min_pos.push(pos_of(pm));
            out.potential.push(phi);
            if let Some((b, e)) = mbp {
                out.most_bound.push(b as i64);
                out.most_bound_energy.push(e);
            }
        }
        Ok((out, energies))
    }

    /// Spherical-overdensity masses and radii around `centres` (rounded to the points'
    /// precision), counting every particle of `points` (see [`crate::halo::Overdensity`]
    /// and `halo::so` for the definition); `masses` as in FoF (absent: `particle_mass`
    /// each). `first_guess[c]`, when given, is a radius to start the search at (e.g.
    /// from the halo's FoF mass); the search radius doubles until every definition's
    /// crossing lies inside it.
    #[allow(clippy::too_many_arguments)]
    pub fn spherical_overdensity<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        masses: Option<&dyn ScalarField>,
        particle_mass: f64,
        centres: &[[f64; D]],
        first_guess: Option<&[f64]>,
        params: &SoParams,
    ) -> Result<Vec<SoColumn>> {
        domain.validate()?;
        for (name, v) in [("rho_crit", params.rho_crit), ("omega_m", params.omega_m), ("particle_mass", particle_mass)] {
            if !(v.is_finite() && v > 0.0) {
                return Err(Error::InvalidParameter { name, why: format!("must be finite and > 0 (got {v})") });
            }
        }
        let n = points.len();
        if let Some(m) = masses {
            crate::input::validate::check_scalar("masses", m, n)?;
        }
        let nc = centres.len();
        let defs = &params.definitions;
        let rho: Vec<f64> = defs.iter().map(|d| d.threshold(params.rho_crit, params.omega_m)).collect();
        let mut cols: Vec<SoColumn> =
            defs.iter().map(|&definition| SoColumn { definition, mass: vec![0.0; nc], radius: vec![0.0; nc], count: vec![0; nc] }).collect();
        if nc == 0 || defs.is_empty() {
            return Ok(cols);
        }
        let rho_min = rho.iter().copied().fold(f64::INFINITY, f64::min);
        let mean_spacing = match domain.box_lengths() {
            Some(l) => (l.iter().product::<f64>() / n.max(1) as f64).powf(1.0 / D as f64),
            None => 0.0,
        };
        let half_box = domain.box_lengths().map(|l| 0.5 * l.iter().copied().fold(f64::INFINITY, f64::min));
        // Start: the guess, or the radius holding a few particles at the lowest threshold.
        let start =
            |c: usize| first_guess.map_or((3.0 * 32.0 * particle_mass / (4.0 * std::f64::consts::PI * rho_min)).cbrt(), |g| g[c]).max(mean_spacing);
        let mut search: Vec<f64> = (0..nc).map(start).collect();
        let mut pending: Vec<usize> = (0..nc).collect();
        let mass_of = |j: usize| masses.map_or(particle_mass, |m| m.get(j));
        while !pending.is_empty() {
            let q: Vec<[T; D]> = pending.iter().map(|&c| centres[c].map(T::from_f64)).collect();
            let radii: Vec<f64> = pending.iter().map(|&c| search[c]).collect();
            let p = RadiusParams {
                radius: SearchRadius::PerQuery(&radii),
                lists: Some(ListOrder::Distance),
                list_distances: true,
                max_list_bytes: 0,
                count_limit: 0,
            };
            let r = self.radius(domain, points, &q, &SourceFields::default(), &p, &mut RadiusOutput::default())?;
            let lists = r.lists.expect("lists were asked for");
            let mut next = Vec::new();
            for (k, &c) in pending.iter().enumerate() {
                let (a, b) = (lists.offsets[k] as usize, lists.offsets[k + 1] as usize);
                let profile: Vec<(f64, f64)> = (a..b).map(|e| (lists.distances[e], mass_of(lists.indices[e] as usize))).collect();
                let complete = b - a == n;
                let found: Vec<Option<(f64, f64, usize)>> = rho.iter().map(|&r| so_from_profile(&profile, r, complete)).collect();
                if found.iter().all(|f| f.is_some()) {
                    for (col, f) in cols.iter_mut().zip(found) {
                        let (m, r, cnt) = f.unwrap();
                        col.mass[c] = m;
                        col.radius[c] = r;
                        col.count[c] = cnt as u64;
                    }
                } else if half_box.is_some_and(|h| search[c] >= h) {
                    return Err(Error::InvalidParameter {
                        name: "rho_crit",
                        why: format!("the overdensity is not reached within half the box around centre {c} (rho_crit or omega_m too small?)"),
                    });
                } else {
                    search[c] = half_box.map_or(2.0 * search[c], |h| (2.0 * search[c]).min(h));
                    next.push(c);
                }
            }
            pending = next;
        }
        Ok(cols)
    }

    /// Sums over each halo's members about `centres[row]` (e.g. the potential minima of
    /// [`Context::halo_centres`]): v_max and r_vmax, angular momentum and Bullock's spin,
    /// kinetic energy, σ_1D and the shape (see [`crate::halo::Dynamics`]). `catalogue` must
    /// carry member lists and mean velocities (velocities in `fields`); `virial`, when
    /// given (e.g. the 200c column of [`Context::spherical_overdensity`] around the same
    /// centres), supplies the spin's M and R where its mass is non-zero.
    #[allow(clippy::too_many_arguments)]
    pub fn halo_dynamics<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        catalogue: &Catalogue<D>,
        centres: &[[f64; D]],
        g: f64,
        virial: Option<&SoColumn>,
    ) -> Result<Vec<Dynamics<D>>> {
        domain.validate()?;
        if !(g.is_finite() && g > 0.0) {
            return Err(Error::InvalidParameter { name: "g", why: format!("must be finite and > 0 (got {g})") });
        }
        let n = points.len();
        fields.validate(n)?;
        let rows = catalogue.len();
        let Some(vel) = fields.velocities.filter(|_| catalogue.velocity.len() == rows) else {
            return Err(Error::InvalidParameter {
                name: "velocities",
                why: "halo dynamics need the particles' velocities and the catalogue's".into(),
            });
        };
        if catalogue.member_offsets.len() != rows + 1 {
            return Err(Error::InvalidParameter { name: "catalogue", why: "has no member lists (FofParams::members)".into() });
        }
        crate::error::check_len("centres", centres.len(), rows)?;
        if let Some(v) = virial {
            crate::error::check_len("virial masses", v.mass.len(), rows)?;
        }
        let box_len = domain.box_lengths();
        Ok(self.pool.install(|| {
            (0..rows)
                .into_par_iter()
                .map(|h| {
                    let m = &catalogue.member_indices[catalogue.member_offsets[h] as usize..catalogue.member_offsets[h + 1] as usize];
                    let c = centres[h];
                    let x: Vec<[f64; D]> = m
                        .iter()
                        .map(|&i| {
                            let p = points.point(i as usize);
                            std::array::from_fn(|d| {
                                let dx = p[d].to_f64() - c[d];
                                box_len.map_or(dx, |l| min_image(dx, l[d], 0.5 * l[d]))
                            })
                        })
                        .collect();
                    let vbar = catalogue.velocity[h];
                    let u: Vec<[f64; D]> = m
                        .iter()
                        .map(|&i| {
                            let v = vel.get(i as usize);
                            std::array::from_fn(|d| v[d] - vbar[d])
                        })
                        .collect();
                    let w: Vec<f64> = m.iter().map(|&i| fields.masses.map_or(fields.particle_mass, |f| f.get(i as usize))).collect();
                    let vir = virial.map(|v| (v.mass[h], v.radius[h])).filter(|v| v.0 > 0.0 && v.1 > 0.0);
                    dynamics(&x, &u, &w, g, vir)
                })
                .collect()
        }))
    }
}
