//! The FoF catalogue's sub-stages on the CPU (`pipeline::catalogue` runs them): members
//! gathered into group order (groups in z-order of their roots, members in z-order: a
//! stable counting sort done in parallel over contiguous z-ranges), then each group
//! reduced on its own, all sums in f64 and in z-order, so the catalogue does not depend
//! on the number of threads. Definitions in `crate::fof::catalogue`.

use std::borrow::Cow;
use std::sync::atomic::{AtomicU32, Ordering::Relaxed};

use rayon::prelude::*;

use super::Cpu;
use super::par::{DisjointSlice, chunk_ranges};
use super::sort::local_sort;
use crate::fof::catalogue::{self, Member, Row};
use crate::geom::Real;
use crate::input::{ParticleIds, ScalarField, VectorField};
use crate::pipeline::catalogue::{Counted, GroupRows, Grouped, MemberLists};

/// Everything the row reduction reads.
pub(crate) struct RowInputs<'a, T: Real, const D: usize> {
    /// Positions in z-order.
    pub pos: &'a [Vec<T>; D],
    /// Input index of each z-ordered point.
    pub orig: &'a [u32],
    pub box_len: Option<[f64; D]>,
    pub velocities: Option<&'a dyn VectorField<D>>,
    pub masses: Option<&'a dyn ScalarField>,
    pub particle_mass: f64,
    pub ids: Option<&'a dyn ParticleIds>,
}

/// Root -> kept group: `slot[root]` is the group's index (`NONE`: not kept; only roots
/// are read); the kept groups' sizes.
pub(crate) struct Slots {
    slot: Vec<u32>,
    counts: Vec<u32>,
}

impl Slots {
    #[inline]
    fn of(&self, roots: &[u32], z: usize) -> u32 {
        self.slot[roots[z] as usize]
    }
}

/// The kept groups' members (z-indices), group `g` at `offsets[g]..offsets[g + 1]`.
pub(crate) struct Members {
    offsets: Vec<u64>,
    members: Vec<u32>,
}

const NONE: u32 = u32::MAX;

/// Groups above this many members are put in canonical order by a radix sort (over the
/// input indices' varying digits); smaller ones by a comparison sort of packed integers.
const RADIX_MIN: usize = 256;

/// Per-task scratch of the group reductions.
#[derive(Default)]
struct GroupScratch<const D: usize> {
    /// (input index << 32 | place in the group's z-ordered members), ascending.
    by_orig: Vec<u64>,
    /// The members' positions, in z-order.
    pos: Vec<[f64; D]>,
    /// Radix sort: input indices and places, and their scratch.
    keys: Vec<u64>,
    places: Vec<u32>,
    tk: Vec<u64>,
    tv: Vec<u32>,
}

/// Members per root; runs of equal roots (common in z-order) cost one atomic add. Then
/// the groups (roots) and kept groups per part, each part numbering its kept groups in
/// z-order of their roots from its offset: the counts become the root -> group map, the
/// kept sizes go to `counts`. Two passes over the roots.
pub(crate) fn count(roots: &[u32], min_members: usize) -> Counted<Slots> {
    let n = roots.len();
    let parts = chunk_ranges(n, rayon::current_num_threads().max(1) * 4);
    let cnt: Vec<AtomicU32> = (0..n).into_par_iter().map(|_| AtomicU32::new(0)).collect();
    parts.par_iter().for_each(|rg| {
        let mut cur = roots[rg.start];
        let mut c = 0u32;
        for &x in &roots[rg.clone()] {
            if x != cur {
                cnt[cur as usize].fetch_add(c, Relaxed);
                cur = x;
                c = 0;
            }
            c += 1;
        }
        cnt[cur as usize].fetch_add(c, Relaxed);
    });
    let min = min_members.min(u32::MAX as usize) as u32;
    let tallies: Vec<(usize, usize)> = parts
        .par_iter()
        .map(|rg| rg.clone().filter(|&z| roots[z] as usize == z).fold((0, 0), |(g, k), z| (g + 1, k + usize::from(cnt[z].load(Relaxed) >= min))))
        .collect();
    let groups_total = tallies.iter().map(|t| t.0).sum::<usize>();
    let first: Vec<usize> = tallies.iter().scan(0, |acc, t| Some(std::mem::replace(acc, *acc + t.1))).collect();
    let ng = tallies.iter().map(|t| t.1).sum::<usize>();
    let mut counts = vec![0u32; ng];
    let out = DisjointSlice::new(&mut counts);
    parts.par_iter().zip(&first).for_each(|(rg, &g0)| {
        let mut g = g0;
        for z in rg.clone().filter(|&z| roots[z] as usize == z) {
            let c = cnt[z].load(Relaxed);
            if c >= min {
                // SAFETY: part p numbers groups first[p] .. first[p] + its kept count.
                unsafe { out.write(g, c) };
                cnt[z].store(g as u32, Relaxed);
                g += 1;
            } else {
                cnt[z].store(NONE, Relaxed);
            }
        }
    });
    let slot: Vec<u32> = cnt.into_iter().map(AtomicU32::into_inner).collect();
    Counted { slots: Slots { slot, counts }, groups_total, kept: ng, scratch_bytes: 4 * n }
}

/// Group offsets, then a stable parallel counting sort of the kept members.
pub(crate) fn order(roots: &[u32], slots: &Slots) -> Grouped<Members> {
    let n = roots.len();
    let counts = &slots.counts;
    let ng = counts.len();
    let gid = |z: usize| slots.of(roots, z);
    let mut offsets = Vec::with_capacity(ng + 1);
    let mut acc = 0u64;
    offsets.push(0u64);
    for &c in counts {
        acc += c as u64;
        offsets.push(acc);
    }
    let total = acc as usize;
    // Few chunks when there are many groups (the cursor table is chunks x groups).
    let np = (n / ng.max(1) / 2).clamp(1, rayon::current_num_threads().max(1));
    let parts = chunk_ranges(n, np);
    let np = parts.len();
    // cursors[p * ng + g]: members of group g in chunk p; then where chunk p writes.
    let mut cursors = vec![0u32; np * ng];
    let cur = DisjointSlice::new(&mut cursors);
    parts.par_iter().enumerate().for_each(|(p, rg)| {
        // SAFETY: chunk p owns row p.
        let row = unsafe { cur.slice_mut(p * ng, ng) };
        for z in rg.clone() {
            let g = gid(z);
            if g != NONE {
                row[g as usize] += 1;
            }
        }
    });
    (0..ng).into_par_iter().for_each(|g| {
        let mut o = offsets[g] as u32;
        for p in 0..np {
            // SAFETY: column g is touched by this task only.
            let c = unsafe { &mut cur.slice_mut(p * ng + g, 1)[0] };
            let v = *c;
            *c = o;
            o += v;
        }
    });
    let mut members = super::par::filled(total, 0u32);
    let mem = DisjointSlice::new(&mut members);
    parts.par_iter().enumerate().for_each(|(p, rg)| {
        // SAFETY: chunk p owns row p of the cursors; cursor ranges are disjoint.
        let row = unsafe { cur.slice_mut(p * ng, ng) };
        for z in rg.clone() {
            let g = gid(z);
            if g != NONE {
                let c = &mut row[g as usize];
                unsafe { mem.write(*c as usize, z as u32) };
                *c += 1;
            }
        }
    });
    let scratch_bytes = cursors.len() * 4 + 4 * total;
    Grouped { members: Members { offsets, members }, particles_in_groups: total, scratch_bytes }
}

/// One row per kept group.
pub(crate) fn rows<T: Real, const D: usize>(r: &RowInputs<'_, T, D>, m: &Members) -> GroupRows<Cpu, D> {
    let ng = m.offsets.len() - 1;
    let rows: Vec<Row<D>> = (0..ng)
        .into_par_iter()
        .with_min_len(8)
        .map_init(GroupScratch::default, |s, g| reduce_group(r, &m.members[m.offsets[g] as usize..m.offsets[g + 1] as usize], s))
        .collect();
    let tags = rows.iter().map(|r| r.tag).collect();
    // Per thread at most, for the largest group: packed keys 8, positions 8D, the radix
    // sort's keys, places and their scratch 24, the reduction's offsets and masses 8D + 8
    // (and velocities 8D).
    let largest = m.offsets.windows(2).map(|w| (w[1] - w[0]) as usize).max().unwrap_or(0);
    let vel = if r.velocities.is_some() { 8 * D } else { 0 };
    let per_thread = largest * (40 + 16 * D + vel) * rayon::current_num_threads().min(ng.max(1));
    GroupRows { rows, tags, scratch_bytes: ng * (std::mem::size_of::<Row<D>>() + 8) + per_thread }
}

/// Labels in input order: the kept group's tag, or -1.
pub(crate) fn labels(orig: &[u32], roots: &[u32], slots: &Slots, tags: &[i64], labels: &DisjointSlice<'_, i64>) {
    let n = roots.len();
    // Writes land at random input slots: each slot's line is fetched a few points ahead.
    const AHEAD: usize = 16;
    chunk_ranges(n, n.div_ceil(4096)).into_par_iter().for_each(|rg| {
        for z in rg.clone() {
            if z + AHEAD < rg.end {
                labels.prefetch(orig[z + AHEAD] as usize, 1);
            }
            let g = slots.of(roots, z);
            let v = if g == NONE { -1 } else { tags[g as usize] };
            // SAFETY: orig is a permutation: each input slot is written once.
            unsafe { labels.write(orig[z] as usize, v) };
        }
    });
}

/// The groups' members' input indices: each group's z-indices mapped and sorted.
pub(crate) fn member_lists<'a>(orig: &'a [u32], m: &'a Members) -> MemberLists<'a> {
    let fill = move |g: usize, dst: &mut [i64]| {
        for (d, &z) in dst.iter_mut().zip(&m.members[m.offsets[g] as usize..m.offsets[g + 1] as usize]) {
            *d = orig[z as usize] as i64;
        }
        dst.sort_unstable();
    };
    MemberLists { offsets: Cow::Borrowed(&m.offsets), fill: Box::new(fill) }
}

/// Reduces one group; `zs` are its members' z-indices (ascending). The members are put
/// in canonical order (ascending input index) first. Their positions are copied once, in
/// z-order (near-sequential reads), into `pos`: the reduction reads the members in input
/// order, which would be random reads of the z-ordered arrays.
fn reduce_group<T: Real, const D: usize>(r: &RowInputs<'_, T, D>, zs: &[u32], s: &mut GroupScratch<D>) -> Row<D> {
    let (by_orig, pos) = (&mut s.by_orig, &mut s.pos);
    pos.clear();
    pos.extend(zs.iter().map(|&z| std::array::from_fn(|d| r.pos[d][z as usize].to_f64())));
    // (input index, place in `zs`) packed in one integer, in ascending order.
    by_orig.clear();
    if zs.len() > RADIX_MIN {
        s.keys.clear();
        s.keys.extend(zs.iter().map(|&z| r.orig[z as usize] as u64));
        s.places.clear();
        s.places.extend(0..zs.len() as u32);
        local_sort(&mut s.keys, &mut s.places, &mut s.tk, &mut s.tv);
        by_orig.extend(s.keys.iter().zip(&s.places).map(|(&o, &j)| (o << 32) | j as u64));
    } else {
        by_orig.extend(zs.iter().enumerate().map(|(j, &z)| ((r.orig[z as usize] as u64) << 32) | j as u64));
        by_orig.sort_unstable();
    }
    let member = |i: usize| {
        let key = by_orig[i];
        let (o, j) = ((key >> 32) as usize, key as u32 as usize);
        Member {
            pos: pos[j],
            vel: r.velocities.map_or([0.0; D], |v| v.get(o)),
            mass: r.masses.map_or(r.particle_mass, |m| m.get(o)),
            tag: r.ids.map_or(o as i64, |ids| ids.id(o)),
        }
    };
    catalogue::reduce_group(zs.len(), member, r.box_len, r.velocities.is_some())
}
