//! `Context::halo_properties`: the halo columns asked for, in one call over a FoF (or
//! DBSCAN) catalogue with member lists: potential-minimum centres first, then the
//! spherical overdensities and the dynamics about them, and the per-type sums.

use super::Context;
use crate::error::{Error, Result};
use crate::fof::{Catalogue, FofFields};
use crate::geom::Real;
use crate::halo::{HaloProperties, HaloRequest, Overdensity, SoParams, TypeSums};
use crate::input::{Domain, ParticleIds, PointSource};

/// The largest type number a `types` array may hold (a `u32` type mask's bits).
const MAX_TYPE: i64 = 31;

impl Context {
    /// The columns of `request` for every halo of `catalogue`, which must carry member
    /// lists (`FofParams::members`) from a call on the same `points` and `fields`. The
    /// SO search starts from the radius at which the halo's FoF mass would be M_200c;
    /// the spin's M and R are the 200c ones where those are computed and non-zero.
    pub fn halo_properties<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        catalogue: &Catalogue<D>,
        request: &HaloRequest<'_>,
    ) -> Result<HaloProperties<D>> {
        let cols = request.columns;
        let mut out = HaloProperties::<D>::default();
        if (cols.most_bound || cols.dynamics) && (fields.velocities.is_none() || catalogue.velocity.len() != catalogue.len()) {
            return Err(Error::InvalidParameter {
                name: "velocities",
                why: "the most bound member and the dynamics need the particles' velocities".into(),
            });
        }
        if cols.so {
            for (name, v) in [("rho_crit", request.rho_crit), ("omega_m", request.omega_m)] {
                if !(v.is_finite() && v > 0.0) {
                    return Err(Error::InvalidParameter { name, why: format!("must be finite and > 0 for the SO columns (got {v})") });
                }
            }
        }
        if cols.types {
            let Some(t) = request.types else {
                return Err(Error::InvalidParameter { name: "types", why: "the per-type columns need the particles' types".into() });
            };
            crate::error::check_len("types", t.len(), points.len())?;
            if let Some(i) = (0..t.len()).find(|&i| !(0..=MAX_TYPE).contains(&t.id(i))) {
                return Err(Error::InvalidParameter { name: "types", why: format!("type {} of particle {i} is not in 0..=31", t.id(i)) });
            }
        }
        if cols.needs_centres() {
            let (centres, energy) = self.centres_and_energy(domain, points, fields, catalogue, request.gravity, cols.most_bound, cols.dynamics)?;
            out.centres = centres;
            out.potential_energy = energy;
        }
        if cols.so {
            let params = SoParams { rho_crit: request.rho_crit, omega_m: request.omega_m, definitions: Overdensity::ALL.to_vec() };
            let rho200 = Overdensity::Crit200.threshold(request.rho_crit, request.omega_m);
            let guess: Vec<f64> = catalogue.mass.iter().map(|&m| (3.0 * m / (4.0 * std::f64::consts::PI * rho200)).cbrt()).collect();
            out.so = self.spherical_overdensity(
                domain,
                points,
                fields.masses,
                fields.particle_mass,
                &out.centres.potential_min_pos,
                Some(&guess),
                &params,
            )?;
        }
        if cols.dynamics {
            let virial = out.so.iter().find(|c| c.definition == Overdensity::Crit200);
            out.dynamics = self.halo_dynamics(domain, points, fields, catalogue, &out.centres.potential_min_pos, request.gravity.g, virial)?;
        }
        if cols.types {
            out.types = Some(type_sums(catalogue, fields, request.types.expect("checked above"))?);
        }
        if !cols.centre && !cols.so && !cols.dynamics {
            out.centres.potential_min.clear();
            out.centres.potential_min_pos.clear();
            out.centres.potential.clear();
        }
        Ok(out)
    }
}

/// Count, mass and group-ordered offset per type and halo.
fn type_sums<const D: usize>(catalogue: &Catalogue<D>, fields: &FofFields<'_, D>, types: &dyn ParticleIds) -> Result<TypeSums> {
    let rows = catalogue.len();
    if catalogue.member_offsets.len() != rows + 1 {
        return Err(Error::InvalidParameter { name: "catalogue", why: "has no member lists (FofParams::members)".into() });
    }
    let n_types = catalogue.member_indices.iter().map(|&i| types.id(i as usize) + 1).max().unwrap_or(1) as usize;
    let mut s = TypeSums { n_types, count: vec![0; rows * n_types], mass: vec![0.0; rows * n_types], offset: vec![0; rows * n_types] };
    let mut before = vec![0i64; n_types];
    for h in 0..rows {
        let row = h * n_types;
        for &i in &catalogue.member_indices[catalogue.member_offsets[h] as usize..catalogue.member_offsets[h + 1] as usize] {
            let t = types.id(i as usize) as usize;
            s.count[row + t] += 1;
            s.mass[row + t] += fields.masses.map_or(fields.particle_mass, |m| m.get(i as usize));
        }
        s.offset[row..row + n_types].copy_from_slice(&before);
        for (b, c) in before.iter_mut().zip(&s.count[row..row + n_types]) {
            *b += c;
        }
    }
    Ok(s)
}
