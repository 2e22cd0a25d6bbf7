//! `ztree_fof` and `ztree_fof_bytes`: argument checks, the agreement on MPI contexts,
//! dispatch on dimension and element type, and the hand-over of the catalogue.

use super::input::{
    Strided, StridedPoints, StridedVectors, config_words, count_of, domain, length_or_b, null, pos_dtype, positions, presence, select, types_of,
    vectors,
};
use super::out::{Bytes, DistInfo, Proposal, agree_args, dest, fill_stats, reserve};
use super::types::*;
use super::{Fail, abi, fail, guard, ztree_context};
use crate::fof::{Catalogue, CatalogueOrder, FofFields, FofParams, FofStats, LinkingLength};
use crate::geom::Real;
use crate::input::{ParticleIds, ScalarField, VectorField};
use ztree_status::*;

/// Scratch bytes per particle beyond inputs and outputs: measured peaks (BENCHMARKS.md: at
/// most 47 B serial, 105 B per owned particle distributed) with margin.
const SCRATCH_PER_PARTICLE: usize = 96;
const SCRATCH_PER_PARTICLE_MPI: usize = 256;

/// Friends-of-friends halos of `particles`: per-particle halo tags and the catalogue. On
/// an MPI context every rank checks its arguments and then all agree, as in `ztree_knn`.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ztree_fof(
    ctx: *mut ztree_context,
    particles: *const ztree_particles,
    params: *const ztree_fof_params,
    out: *mut ztree_fof_output,
) -> ztree_status {
    // SAFETY: the pointers are checked in `entry`.
    guard(ctx, || unsafe { entry(ctx, particles, params, out, None) })
}

/// The bytes `ztree_fof` with these arguments would allocate on this rank (scratch, the
/// context-owned labels when `out->labels` is NULL, the catalogue at its largest and the
/// member lists): an upper estimate, the number `ztree_config::memory_limit` is compared
/// with. Checks the arguments like `ztree_fof`; computes nothing; not collective.
#[unsafe(no_mangle)]
pub unsafe extern "C" fn ztree_fof_bytes(
    ctx: *mut ztree_context,
    particles: *const ztree_particles,
    params: *const ztree_fof_params,
    out: *const ztree_fof_output,
    bytes: *mut i64,
) -> ztree_status {
    guard(ctx, || {
        if bytes.is_null() {
            return Err(null("ztree_fof_bytes: bytes"));
        }
        // SAFETY: checked non-null; `entry` only reads `out` when sizing.
        unsafe { entry(ctx, particles, params, out as *mut _, Some(&mut *bytes)) }
    })
}

unsafe fn entry(
    ctx: *mut ztree_context,
    particles: *const ztree_particles,
    params: *const ztree_fof_params,
    out: *mut ztree_fof_output,
    size: Option<&mut i64>,
) -> Result<(), Fail> {
    if ctx.is_null() {
        return Err(null("ztree_fof: ctx"));
    }
    // SAFETY: non-null handles come from `ztree_create*`.
    let ctx = unsafe { &mut *ctx };
    let dims = ctx.config.dims as usize;
    let args = (|| {
        if particles.is_null() || params.is_null() || out.is_null() {
            return Err(null("ztree_fof: particles, params or out"));
        }
        // SAFETY: checked non-null; the structs start with their sizes.
        let (p, prm, o) = unsafe { (abi::read_in(particles)?, abi::read_in(params)?, abi::read_in(out.cast_const())?) };
        let dtype = pos_dtype(&p, dims, "particles")?;
        Ok((p, prm, dtype, o))
    })();
    let (p, prm, dtype, mut o) = match args {
        Ok(a) => a,
        Err(e) if size.is_some() => return Err(e),
        Err(e) => return agree_args(&ctx.comm, "FoF", Err::<Proposal, _>(e), |p| p).map(|_| ()),
    };
    let sizing = size.is_some();
    #[cfg(feature = "cuda")]
    if !sizing && super::staged::fof_needed(&p, &prm) {
        let o = super::staged::fof(ctx, &p, &prm, dtype, o, dims)?;
        // SAFETY: checked non-null in `args`; `o` keeps the caller's layout.
        return unsafe { abi::write_out(out, &o) };
    }
    dispatch(ctx, &p, &prm, dtype, &mut o, size)?;
    if sizing {
        return Ok(());
    }
    // SAFETY: checked non-null in `args`; `o` keeps the caller's layout.
    unsafe { abi::write_out(out, &o) }
}

/// The call for the context's dimensions and the positions' element type.
pub(crate) fn dispatch(
    ctx: &mut ztree_context,
    p: &ztree_particles,
    prm: &ztree_fof_params,
    dtype: i32,
    o: &mut ztree_fof_output,
    size: Option<&mut i64>,
) -> Result<(), Fail> {
    match (ctx.config.dims, dtype) {
        (2, ZTREE_DTYPE_F32) => typed::<f32, 2>(ctx, p, prm, dtype, o, size),
        (2, _) => typed::<f64, 2>(ctx, p, prm, dtype, o, size),
        (_, ZTREE_DTYPE_F32) => typed::<f32, 3>(ctx, p, prm, dtype, o, size),
        _ => typed::<f64, 3>(ctx, p, prm, dtype, o, size),
    }
}

/// The arguments after every check that needs no allocation.
pub(crate) struct Checked<T: Real, const D: usize> {
    pub n: usize,
    pub pos: StridedPoints<T, D>,
    pub vel: Option<StridedVectors<D>>,
    pub masses: Option<Strided>,
    pub ids: Option<Strided>,
    /// With a type mask: the particle types.
    pub types: Option<Strided>,
    /// The halo property columns asked for.
    pub(crate) columns: Option<super::halo::Asked>,
    /// Whether the caller asked for the member lists (the columns need them in any case).
    pub members_out: bool,
    pub params: FofParams,
    pub bytes: Bytes,
    proposal: Proposal,
}

impl<T: Real, const D: usize> Checked<T, D> {
    /// What the ranks of an MPI context agree on.
    #[cfg(feature = "cuda")]
    pub(crate) fn proposal(&self) -> &Proposal {
        &self.proposal
    }
}

fn check<T: Real, const D: usize>(
    c: &ztree_config,
    p: &ztree_particles,
    prm: &ztree_fof_params,
    dtype: i32,
    o: &ztree_fof_output,
    distributed: bool,
) -> Result<Checked<T, D>, Fail> {
    let n = count_of(p, "particles")?;
    let pos = positions::<T, D>(p, n, "particles")?;
    let vel = vectors::<D>(&p.vel, n, "particles.vel")?;
    let masses = Strided::new(&p.mass, n, "particles.mass", &[ZTREE_DTYPE_F32, ZTREE_DTYPE_F64], false)?;
    let ids = Strided::new(&p.ids, n, "particles.ids", &[ZTREE_DTYPE_I32, ZTREE_DTYPE_I64, ZTREE_DTYPE_U32, ZTREE_DTYPE_U64], false)?;
    let types = types_of(p, n, prm.type_mask)?;
    let bad = |m: String| Err(fail(ZTREE_ERR_INVALID_ARGUMENT, m));
    let link = length_or_b("linking_length", prm.linking_length, prm.b)?;
    if prm.min_members < 1 {
        return bad(format!("min_members must be at least 1 (got {})", prm.min_members));
    }
    let order = match prm.order {
        ZTREE_CATALOGUE_ZORDER => CatalogueOrder::ZOrder,
        ZTREE_CATALOGUE_GADGET => CatalogueOrder::Gadget,
        x => return bad(format!("unknown catalogue order {x}")),
    };
    let columns = super::halo::check(p, &super::halo::column_params!(prm), n, vel.is_some(), distributed)?;
    let members_out = prm.members != 0;
    let params = FofParams { linking_length: link, min_members: prm.min_members as usize, order, members: members_out || columns.is_some() };

    let mut bytes = Bytes::default();
    bytes.add(n, if distributed { SCRATCH_PER_PARTICLE_MPI } else { SCRATCH_PER_PARTICLE });
    if o.labels.is_null() {
        bytes.add(n, 8);
    }
    // At most n / min_members rows here (rank 0 may get more rows when gathering).
    bytes.add(n / params.min_members + 1, std::mem::size_of::<ztree_halo>());
    if params.members {
        bytes.add(n + n / params.min_members + 1, 8);
    }
    if columns.is_some() {
        bytes.add(n, super::halo::BYTES_PER_PARTICLE);
        bytes.add(n / params.min_members + 1, super::halo::BYTES_PER_ROW);
    }

    let mut words = config_words(c);
    let (kind, len) = match link {
        LinkingLength::Absolute(l) => (0, l),
        LinkingLength::Relative(b) => (1, b),
    };
    words.extend([
        dtype as u64,
        kind,
        len.to_bits(),
        prm.min_members as u64,
        prm.order as u64,
        params.members as u64,
        (prm.gather != 0) as u64,
        prm.type_mask as u64,
    ]);
    words.extend(super::halo::column_params!(prm).words());
    let optional = vec![presence(&vel, n), presence(&masses, n), presence(&ids, n)];
    if types.is_some() {
        bytes.add(n, 12); // the subset's indices and labels
    }
    Ok(Checked { n, pos, vel, masses, ids, types, columns, members_out, params, bytes, proposal: Proposal { words, optional } })
}

pub(crate) fn typed<T: Real, const D: usize>(
    ctx: &mut ztree_context,
    p: &ztree_particles,
    prm: &ztree_fof_params,
    dtype: i32,
    o: &mut ztree_fof_output,
    size: Option<&mut i64>,
) -> Result<(), Fail> {
    let checked = check::<T, D>(&ctx.config, p, prm, dtype, o, ctx.comm.is_some());
    if let Some(s) = size {
        *s = checked?.bytes.as_i64();
        return Ok(());
    }
    // Device arrays: the CUDA back end, serial or distributed (a failed check goes to the
    // call's agreement as it is).
    #[cfg(feature = "cuda")]
    if p.memory == ZTREE_MEMORY_CUDA_DEVICE {
        return super::device::fof(ctx, o, checked, prm);
    }
    let limit = ctx.config.memory_limit;
    let b = &mut ctx.buffers;
    // Every allocation that can be sized before the agreement happens before it.
    let ready = checked.and_then(|c| {
        c.bytes.check(limit, "this FoF call")?;
        // SAFETY: the header documents that a caller `labels` array has `count` entries.
        let labels = unsafe { dest(o.labels, &mut b.labels, c.n, "FoF labels")? };
        b.halos.clear();
        reserve(&mut b.halos, c.n / c.params.min_members + 1, "the FoF catalogue")?;
        b.member_offsets.clear();
        b.member_indices.clear();
        if c.members_out {
            reserve(&mut b.member_offsets, c.n / c.params.min_members + 1, "FoF member offsets")?;
            reserve(&mut b.member_indices, c.n, "FoF member indices")?;
        }
        Ok((c, labels))
    });
    let ((mut c, labels), present) = agree_args(&ctx.comm, "FoF", ready, |r| &r.0.proposal)?;
    // A rank without particles takes the other ranks' optional arrays, empty.
    if present[0] && c.vel.is_none() {
        c.vel = Some(StridedVectors([Strided::empty(ZTREE_DTYPE_F64); D]));
    }
    if present[1] && c.masses.is_none() {
        c.masses = Some(Strided::empty(ZTREE_DTYPE_F64));
    }
    if present[2] && c.ids.is_none() {
        c.ids = Some(Strided::empty(ZTREE_DTYPE_I64));
    }
    let fields = FofFields::<D> {
        velocities: c.vel.as_ref().map(|v| v as &dyn VectorField<D>),
        masses: c.masses.as_ref().map(|m| m as &dyn ScalarField),
        particle_mass: ctx.config.particle_mass,
        ids: c.ids.as_ref().map(|i| i as &dyn ParticleIds),
    };
    let dom = domain::<D>(&ctx.config);
    let labels_ptr = labels.as_mut_ptr();
    #[allow(unused_mut)]
    let mut dist: Option<DistInfo> = None;
    let (cat, stats) = match &ctx.comm {
        #[cfg(feature = "mpi")]
        Some(comm) => {
            let on = crate::mpi::On { ctx: &ctx.core, comm };
            let scope = if prm.gather != 0 { crate::mpi::CatalogueScope::Root } else { crate::mpi::CatalogueScope::Distributed };
            let (cat, st) = match &c.types {
                Some(t) => crate::api::dist::fof_subset_host(on, &dom, &c.pos, &fields, &c.params, &select(t, prm.type_mask), scope, labels)?,
                None => crate::api::dist::fof_host(on, &dom, &c.pos, &fields, &c.params, scope, labels, None)?,
            };
            let mut local = st.local.clone();
            local.timings = st.dist.timings.clone();
            local.groups_total = st.groups_total;
            dist = Some(st.dist);
            (cat, local)
        }
        _ => match &c.types {
            Some(t) => {
                let subset = select(t, prm.type_mask);
                ctx.core.fof_subset_into(&dom, &c.pos, &fields, &c.params, &subset, labels)?
            }
            None => ctx.core.fof_into(&dom, &c.pos, &fields, &c.params, labels)?,
        },
    };
    let props = match &c.columns {
        Some(a) => Some((super::halo::compute(&ctx.core, &dom, &c.pos, &fields, &cat, a)?, a.columns)),
        None => None,
    };
    hand_over(ctx, o, &cat, &stats, labels_ptr, c.n, c.members_out, dist.as_ref(), props.as_ref().map(|(p, k)| (p, *k)))
}

/// The catalogue into the context's host buffers and the output struct.
#[allow(clippy::too_many_arguments)]
pub(crate) fn hand_over<const D: usize>(
    ctx: &mut ztree_context,
    o: &mut ztree_fof_output,
    cat: &Catalogue<D>,
    stats: &FofStats,
    labels_ptr: *mut i64,
    n: usize,
    members: bool,
    dist: Option<&DistInfo>,
    columns: Option<(&crate::halo::HaloProperties<D>, crate::halo::HaloColumns)>,
) -> Result<(), Fail> {
    // The catalogue is only as long as known now (gathered on rank 0, it can exceed what
    // was reserved): a failure here is this rank's alone, after the collective work.
    let b = &mut ctx.buffers;
    b.halos.clear();
    reserve(&mut b.halos, cat.len(), "the FoF catalogue")?;
    b.halos.extend((0..cat.len()).map(|g| {
        let mut h = ztree_halo {
            tag: cat.tag[g],
            count: cat.count[g] as i64,
            mass: cat.mass[g],
            inertia_radius: cat.inertia_radius[g],
            ..Default::default()
        };
        h.pos[..D].copy_from_slice(&cat.centre[g]);
        if !cat.velocity.is_empty() {
            h.vel[..D].copy_from_slice(&cat.velocity[g]);
            h.vel_dispersion = cat.dispersion[g];
        }
        h
    }));
    if members {
        b.member_offsets.clear();
        b.member_indices.clear();
        // Always n_halos + 1 offsets, the first 0.
        reserve(&mut b.member_offsets, cat.len() + 1, "FoF member offsets")?;
        reserve(&mut b.member_indices, cat.member_indices.len(), "FoF member indices")?;
        if cat.member_offsets.is_empty() {
            b.member_offsets.push(0);
        }
        b.member_offsets.extend(cat.member_offsets.iter().map(|&x| x as i64));
        b.member_indices.extend_from_slice(&cat.member_indices);
    }
    o.labels = labels_ptr;
    o.n_halos = cat.len() as i64;
    o.halos = b.halos.as_ptr();
    o.member_offsets = if members { b.member_offsets.as_ptr() } else { std::ptr::null() };
    o.member_indices = if members { b.member_indices.as_ptr() } else { std::ptr::null() };
    o.linking_length = stats.linking_length;
    o.n_groups_total = stats.groups_total as i64;
    super::halo::set_columns!(o, super::halo::hand_over(&mut ctx.buffers.columns, columns)?);
    ctx.stats = fill_stats(&stats.timings, stats.scratch_bytes, n, 0, cat.len(), dist);
    Ok(())
}
