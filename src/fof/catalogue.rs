//! The FoF group catalogue (docs/DESIGN.md §5, paper IV-B): its rows and definitions.
//! The pipeline reduces it (`pipeline::catalogue`, each sub-stage on the back end).
//!
//! A group's row depends only on its members, never on how they are split over threads
//! or ranks: every sum runs over the members in one canonical order, ascending global
//! input index (the index in the single-rank call on all ranks' particles concatenated in
//! rank order), with the member of the smallest index as the reference point. Back ends
//! and the distributed merge all call `reduce_group` with the members in that order, so
//! catalogues are bit-identical for any rank and thread count.
//!
//! Definitions (m = particle mass, w = m / max m, sums over the group's members in
//! canonical order; x_0 = the position of the first member):
//! - mass: `M = Σ m`;
//! - centre of mass: `x_cm = x_0 + Σ w (x - x_0) / Σ w`, with `x - x_0` the periodic
//!   minimum image (the box length is subtracted once when `|dx| > L/2`), then wrapped
//!   into `[0, L)`. A group must be smaller than half the box in every dimension for this
//!   to be meaningful (always the case for halos). The weights are the masses scaled by
//!   the largest, so that no product overflows whatever the masses' magnitude;
//! - inertia radius: `sqrt(Σ w |x - x_cm|² / Σ w)` (minimum image);
//! - mean velocity: `v_m = Σ w v / Σ w`;
//! - velocity dispersion: the 3D (all-component) dispersion
//!   `sigma = sqrt(Σ w |v - v_m|² / Σ w)`; divide by `sqrt(D)` for the one-dimensional one;
//! - tag: the minimum particle id of the group when ids are given, else its smallest input
//!   index.

use crate::geom::metric::min_image;

/// Order of the catalogue's rows.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum CatalogueOrder {
    /// Z-order of the groups' first particles (cheapest; independent of the thread count
    /// like every order here).
    #[default]
    ZOrder,
    /// GADGET's order: member count descending, ties by tag (minimum id) ascending.
    Gadget,
}

/// The groups with at least `min_members` members, one row per group (struct of arrays).
#[derive(Clone, Debug, PartialEq)]
pub struct Catalogue<const D: usize> {
    /// The order of the rows.
    pub order: CatalogueOrder,
    /// Halo tag: minimum particle id, or smallest input index without ids.
    pub tag: Vec<i64>,
    /// Member count.
    pub count: Vec<u64>,
    /// Total mass.
    pub mass: Vec<f64>,
    /// Centre of mass (inside the periodic box when there is one).
    pub centre: Vec<[f64; D]>,
    /// `sqrt(<|x - x_cm|²>_m)`.
    pub inertia_radius: Vec<f64>,
    /// Mass-weighted mean velocity; empty when no velocities were given.
    pub velocity: Vec<[f64; D]>,
    /// 3D velocity dispersion `sqrt(<|v - v_m|²>_m)`; empty without velocities.
    pub dispersion: Vec<f64>,
    /// With `FofParams::members`: group `g`'s members are
    /// `member_indices[member_offsets[g]..member_offsets[g + 1]]` (input indices,
    /// ascending). Both empty otherwise.
    pub member_offsets: Vec<u64>,
    /// The members of every group, group after group (see `member_offsets`).
    pub member_indices: Vec<i64>,
}

impl<const D: usize> Catalogue<D> {
    /// A catalogue without rows (`velocities`: whether the call had velocities).
    pub fn empty(order: CatalogueOrder, velocities: bool) -> Self {
        let _ = velocities;
        Self {
            order,
            tag: Vec::new(),
            count: Vec::new(),
            mass: Vec::new(),
            centre: Vec::new(),
            inertia_radius: Vec::new(),
            velocity: Vec::new(),
            dispersion: Vec::new(),
            member_offsets: Vec::new(),
            member_indices: Vec::new(),
        }
    }

    /// Number of groups.
    pub fn len(&self) -> usize {
        self.tag.len()
    }

    /// Whether there is no group.
    pub fn is_empty(&self) -> bool {
        self.tag.is_empty()
    }

    /// Members (input indices, ascending) of group `g`; empty unless requested.
    pub fn members(&self, g: usize) -> &[i64] {
        if self.member_offsets.is_empty() {
            return &[];
        }
        &self.member_indices[self.member_offsets[g] as usize..self.member_offsets[g + 1] as usize]
    }
}

/// One member as the row reduction reads it.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Member<const D: usize> {
    pub pos: [f64; D],
    pub vel: [f64; D],
    pub mass: f64,
    pub tag: i64,
}

/// One catalogue row.
#[derive(Clone, Copy, Debug, PartialEq)]
pub(crate) struct Row<const D: usize> {
    pub tag: i64,
    pub count: u64,
    pub mass: f64,
    pub centre: [f64; D],
    pub radius: f64,
    pub vel: [f64; D],
    pub disp: f64,
}

/// The row of a group of `n >= 1` members, `member(i)` in canonical order (ascending
/// global input index). The one definition every back end and the distributed merge use.
pub(crate) fn reduce_group<const D: usize>(n: usize, member: impl Fn(usize) -> Member<D>, box_len: Option<[f64; D]>, has_vel: bool) -> Row<D> {
    // Compiled twice: without velocities their sums are not computed at all.
    if has_vel { reduce_group_with::<D, true>(n, member, box_len) } else { reduce_group_with::<D, false>(n, member, box_len) }
}

fn reduce_group_with<const D: usize, const VEL: bool>(n: usize, member: impl Fn(usize) -> Member<D>, box_len: Option<[f64; D]>) -> Row<D> {
    let has_vel = VEL;
    let first = member(0);
    let x0 = first.pos;
    let offset = |x: &[f64; D]| -> [f64; D] {
        std::array::from_fn(|d| {
            let dx = x[d] - x0[d];
            match box_len {
                Some(l) => min_image(dx, l[d], 0.5 * l[d]),
                None => dx,
            }
        })
    };
    // One read of each member (`member` may gather from scattered arrays): its offset
    // from the first member, mass and velocity are kept for the two sums below.
    let mut m_max = 0.0f64;
    let mut tag = i64::MAX;
    let mut held: Vec<([f64; D], f64)> = Vec::with_capacity(n);
    let mut vels: Vec<[f64; D]> = Vec::with_capacity(if has_vel { n } else { 0 });
    for i in 0..n {
        let m = if i == 0 { first } else { member(i) };
        m_max = m_max.max(m.mass);
        tag = tag.min(m.tag);
        held.push((offset(&m.pos), m.mass));
        if has_vel {
            vels.push(m.vel);
        }
    }
    let vel = |i: usize| if has_vel { vels[i] } else { [0.0; D] };
    let (mut m_tot, mut w_tot) = (0.0f64, 0.0f64);
    let mut s = [0.0f64; D];
    let mut sv = [0.0f64; D];
    // Each member's weight, computed once (it replaces the mass in `held`).
    for (i, (o, mass)) in held.iter_mut().enumerate() {
        let w = *mass / m_max;
        let v = vel(i);
        m_tot += *mass;
        w_tot += w;
        for d in 0..D {
            s[d] += w * o[d];
            if VEL {
                sv[d] += w * v[d];
            }
        }
        *mass = w;
    }
    let c_off: [f64; D] = std::array::from_fn(|d| s[d] / w_tot);
    let vm: [f64; D] = std::array::from_fn(|d| sv[d] / w_tot);
    let (mut r2, mut v2) = (0.0f64, 0.0f64);
    for (i, &(o, w)) in held.iter().enumerate() {
        let (mut qx, mut qv) = (0.0, 0.0);
        for d in 0..D {
            let e = o[d] - c_off[d];
            qx += e * e;
        }
        r2 += w * qx;
        if VEL {
            let v = vel(i);
            for d in 0..D {
                let e = v[d] - vm[d];
                qv += e * e;
            }
            v2 += w * qv;
        }
    }
    let centre: [f64; D] = std::array::from_fn(|d| {
        let c = x0[d] + c_off[d];
        match box_len {
            Some(l) => {
                let w = c.rem_euclid(l[d]);
                if w >= l[d] { 0.0 } else { w }
            }
            None => c,
        }
    });
    Row {
        tag,
        count: n as u64,
        mass: m_tot,
        centre,
        radius: (r2 / w_tot).sqrt(),
        vel: if has_vel { vm } else { [0.0; D] },
        disp: if has_vel { (v2 / w_tot).sqrt() } else { 0.0 },
    }
}

/// The catalogue from every kept group's row (groups in z-order of their roots): rows in
/// that order or GADGET's (by count, descending, then tag), and, when `members` is given
/// (`offsets`: the groups' member ranges, `fill(g, out)`: writes group g's members' input
/// indices, ascending), the member lists in the rows' order. Shared by the back ends.
#[allow(clippy::type_complexity)]
pub(crate) fn assemble<const D: usize>(
    mut rows: Vec<Row<D>>,
    order: CatalogueOrder,
    has_vel: bool,
    members: Option<(&[u64], &(dyn Fn(usize, &mut [i64]) + Sync))>,
) -> Catalogue<D> {
    use rayon::prelude::*;
    let ng = rows.len();
    let perm: Option<Vec<u32>> = (order == CatalogueOrder::Gadget).then(|| {
        let mut p: Vec<u32> = (0..ng as u32).collect();
        p.par_sort_unstable_by(|&a, &b| {
            let (ra, rb) = (&rows[a as usize], &rows[b as usize]);
            rb.count.cmp(&ra.count).then(ra.tag.cmp(&rb.tag)).then(a.cmp(&b))
        });
        p
    });
    let src = |i: usize| perm.as_ref().map_or(i, |p| p[i] as usize);
    let (member_offsets, member_indices) = match members {
        Some((offsets, fill)) => {
            let mut mo = Vec::with_capacity(ng + 1);
            mo.push(0u64);
            for i in 0..ng {
                let g = src(i);
                mo.push(mo[i] + (offsets[g + 1] - offsets[g]));
            }
            let mut mi = vec![0i64; mo[ng] as usize];
            // Each row's range, split off in order, filled in parallel.
            let mut parts: Vec<&mut [i64]> = Vec::with_capacity(ng);
            let mut rest = &mut mi[..];
            for i in 0..ng {
                let (head, tail) = rest.split_at_mut((mo[i + 1] - mo[i]) as usize);
                parts.push(head);
                rest = tail;
            }
            parts.into_par_iter().enumerate().for_each(|(i, dst)| fill(src(i), dst));
            (mo, mi)
        }
        None => (Vec::new(), Vec::new()),
    };
    if let Some(p) = &perm {
        let mut taken: Vec<Option<Row<D>>> = rows.drain(..).map(Some).collect();
        rows = p.iter().map(|&g| taken[g as usize].take().unwrap()).collect();
    }
    Catalogue {
        order,
        tag: rows.iter().map(|x| x.tag).collect(),
        count: rows.iter().map(|x| x.count).collect(),
        mass: rows.iter().map(|x| x.mass).collect(),
        centre: rows.iter().map(|x| x.centre).collect(),
        inertia_radius: rows.iter().map(|x| x.radius).collect(),
        velocity: if has_vel { rows.iter().map(|x| x.vel).collect() } else { Vec::new() },
        dispersion: if has_vel { rows.iter().map(|x| x.disp).collect() } else { Vec::new() },
        member_offsets,
        member_indices,
    }
}
