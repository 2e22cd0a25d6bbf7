//! Jobs on a subset of the caller's particles (a type mask, or any ascending index list):
//! the job runs on views of the caller's arrays (`input::subset::Subset`, nothing copied)
//! and its results come back in the caller's indices: labels of the other particles are
//! -1, tags that are indices (no ids given) and member lists name input indices.

use rayon::prelude::*;

use super::Context;
use crate::dbscan::{DbscanCatalogue, DbscanParams, DbscanStats, PointClass};
use crate::error::{Error, Result, check_len};
use crate::fof::{Catalogue, FofFields, FofParams, FofStats};
use crate::geom::Real;
use crate::input::subset::Subset;
use crate::input::{Domain, ParticleIds, PointSource, ScalarField, VectorField};

/// How a subset job runs on its views: serially, or collectively over MPI (its indices
/// then already the caller's global indices).
#[derive(Clone, Copy)]
pub(crate) enum Runner<'a> {
    Serial(&'a Context),
    #[cfg(feature = "mpi")]
    Dist(crate::mpi::On<'a>),
}

impl Runner<'_> {
    pub(crate) fn pool(&self) -> &rayon::ThreadPool {
        match self {
            Runner::Serial(c) => &c.pool,
            #[cfg(feature = "mpi")]
            Runner::Dist(on) => &on.ctx.pool,
        }
    }

    /// Whether `b` holds on every rank (serially: `b`).
    pub(crate) fn all(&self, b: bool) -> bool {
        match self {
            Runner::Serial(_) => b,
            #[cfg(feature = "mpi")]
            Runner::Dist(on) => on.comm.max_u64(&[u64::from(!b)])[0] == 0,
        }
    }

    /// This rank's checks, agreed with the other ranks' (serially: as they are).
    pub(crate) fn agree(&self, checks: Result<()>) -> Result<()> {
        match self {
            Runner::Serial(_) => checks,
            #[cfg(feature = "mpi")]
            Runner::Dist(on) => on.comm.agree(checks),
        }
    }
}

/// Checks that `subset` is strictly ascending and inside `0..n`.
pub(super) fn check_subset(subset: &[u32], n: usize) -> Result<()> {
    let bad = subset.par_windows(2).any(|w| w[0] >= w[1]) || subset.last().is_some_and(|&l| l as usize >= n);
    if bad {
        return Err(Error::InvalidParameter { name: "subset", why: format!("must be strictly ascending indices below the {n} particles") });
    }
    Ok(())
}

/// Views of the fields at `subset`, kept alive beside the `FofFields` that borrow them.
pub(super) struct FieldViews<'a, const D: usize> {
    vel: Option<Subset<'a, dyn VectorField<D> + 'a>>,
    mass: Option<Subset<'a, dyn ScalarField + 'a>>,
    ids: Option<Subset<'a, dyn ParticleIds + 'a>>,
    particle_mass: f64,
}

impl<'a, const D: usize> FieldViews<'a, D> {
    pub(super) fn new(f: &FofFields<'a, D>, subset: &'a [u32]) -> Self {
        Self {
            vel: f.velocities.map(|v| Subset::new(v, subset)),
            mass: f.masses.map(|m| Subset::new(m, subset)),
            ids: f.ids.map(|i| Subset::new(i, subset)),
            particle_mass: f.particle_mass,
        }
    }
    pub(super) fn fields(&self) -> FofFields<'_, D> {
        FofFields {
            velocities: self.vel.as_ref().map(|v| v as &dyn VectorField<D>),
            masses: self.mass.as_ref().map(|m| m as &dyn ScalarField),
            particle_mass: self.particle_mass,
            ids: self.ids.as_ref().map(|i| i as &dyn ParticleIds),
        }
    }
}

/// The subset's labels into the caller's (-1 elsewhere); tags that are view indices
/// become input indices.
pub(super) fn scatter_labels(sub: &[i64], subset: &[u32], labels: &mut [i64], index_tags: bool) {
    labels.par_iter_mut().for_each(|l| *l = -1);
    for (j, &l) in sub.iter().enumerate() {
        labels[subset[j] as usize] = if l >= 0 && index_tags { subset[l as usize] as i64 } else { l };
    }
}

/// Tags and member lists of a catalogue over the view, in input indices.
fn map_catalogue<const D: usize>(cat: &mut Catalogue<D>, subset: &[u32], index_tags: bool) {
    if index_tags {
        cat.tag.par_iter_mut().for_each(|t| *t = subset[*t as usize] as i64);
    }
    cat.member_indices.par_iter_mut().for_each(|i| *i = subset[*i as usize] as i64);
}

impl Context {
    /// [`Context::fof_into`] on the particles at `subset` (strictly ascending input
    /// indices, e.g. the dark-matter particles): the others get label -1 and take no
    /// part; tags and member lists are in input indices, `labels` has `points.len()`
    /// entries.
    pub fn fof_subset_into<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        params: &FofParams,
        subset: &[u32],
        labels: &mut [i64],
    ) -> Result<(Catalogue<D>, FofStats)> {
        let n = points.len();
        check_len("labels output", labels.len(), n)?;
        fields.validate(n)?;
        self.pool.install(|| check_subset(subset, n))?;
        let views = FieldViews::new(fields, subset);
        let mut sub = vec![0i64; subset.len()];
        let (mut cat, stats) = self.fof_into(domain, &Subset::new(points, subset), &views.fields(), params, &mut sub)?;
        self.pool.install(|| {
            scatter_labels(&sub, subset, labels, fields.ids.is_none());
            map_catalogue(&mut cat, subset, fields.ids.is_none());
        });
        Ok((cat, stats))
    }

    /// [`Context::dbscan_into`] on the particles at `subset` (strictly ascending input
    /// indices, e.g. the star particles): the others get label -1 and class noise, and
    /// are nobody's neighbours; tags and member lists are in input indices.
    #[allow(clippy::too_many_arguments)]
    pub fn dbscan_subset_into<T: Real, const D: usize, P: PointSource<T, D> + ?Sized>(
        &self,
        domain: &Domain<D>,
        points: &P,
        fields: &FofFields<'_, D>,
        params: &DbscanParams,
        subset: &[u32],
        labels: &mut [i64],
        class: Option<&mut [PointClass]>,
    ) -> Result<(DbscanCatalogue<D>, DbscanStats)> {
        let n = points.len();
        check_len("labels output", labels.len(), n)?;
        if let Some(c) = class.as_deref() {
            check_len("class output", c.len(), n)?;
        }
        fields.validate(n)?;
        self.pool.install(|| check_subset(subset, n))?;
        let views = FieldViews::new(fields, subset);
        let mut sub = vec![0i64; subset.len()];
        let mut sub_class = class.as_ref().map(|_| vec![PointClass::Noise; subset.len()]);
        let (mut cat, mut stats) =
            self.dbscan_into(domain, &Subset::new(points, subset), &views.fields(), params, &mut sub, sub_class.as_deref_mut())?;
        // The particles left out count as noise (their class).
        stats.noise += n - subset.len();
        stats.particles = n;
        self.pool.install(|| {
            scatter_labels(&sub, subset, labels, fields.ids.is_none());
            map_catalogue(&mut cat.rows, subset, fields.ids.is_none());
        });
        if let (Some(c), Some(s)) = (class, sub_class) {
            c.par_iter_mut().for_each(|x| *x = PointClass::Noise);
            for (j, &k) in s.iter().enumerate() {
                c[subset[j] as usize] = k;
            }
        }
        Ok((cat, stats))
    }
}

/// The sources or queries of a kNN between subsets: the points and the ascending input
/// indices taking part.
pub struct KnnSubset<'a, P: ?Sized> {
    /// All the caller's points.
    pub points: &'a P,
    /// The input indices taking part (strictly ascending).
    pub sel: &'a [u32],
}
