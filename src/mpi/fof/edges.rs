//! From local groups to global ones. A *fragment* is a local group restricted to the
//! owned particles. A fragment that reached a ghost becomes an edge (fragment, ghost) sent
//! to the ghost's owner, which replaces the ghost by the ghost's own fragment. The edges,
//! which exist only for groups crossing ranks, are gathered on every rank with the count
//! and tag of every fragment on an edge, and every rank runs the same union–find over
//! them: the root of a set is its smallest global fragment id (the group's home).

use std::collections::HashMap;

use super::super::CommStats;
use super::super::comm::{Comm, Outbox, Reader, Wire};
use super::super::decomp::Decomp;
use super::ghosts::Local;
use crate::api::Timings;
use crate::error::Result;
use crate::fof::union_find::UnionFind;
use crate::geom::Real;

const NONE: u32 = u32::MAX;

/// The fragments of this rank.
pub(super) struct Fragments {
    pub n_frag: usize,
    /// Fragment of each owned particle (owned order).
    pub frag_of_particle: Vec<u32>,
    /// Owned particles in z-order, and their fragments.
    pub zo: Vec<u32>,
    pub frag_z: Vec<u32>,
    /// Per rank: (local fragment, ghost global index) pairs for the ghosts it owns.
    edges_out: Vec<Vec<u8>>,
}

/// Fragments from the local linking (`linked`: z-ordered input indices and roots; None
/// when this rank holds nothing), numbered in z-order of their first particle.
pub(super) fn fragments<T: Real, const D: usize>(linked: Option<(&[u32], &[u32])>, local: &Local<T, D>, decomp: &Decomp<D>) -> Fragments {
    let n_own = local.n_own;
    let mut f = Fragments {
        n_frag: 0,
        frag_of_particle: vec![NONE; n_own],
        zo: Vec::with_capacity(n_own),
        frag_z: Vec::with_capacity(n_own),
        edges_out: vec![Vec::new(); decomp.ranks()],
    };
    let Some((orig, roots)) = linked else { return f };
    let nu = orig.len();
    let mut frag_of_root = vec![NONE; nu];
    for z in 0..nu {
        let u = orig[z] as usize;
        if u < n_own {
            let r = roots[z] as usize;
            if frag_of_root[r] == NONE {
                frag_of_root[r] = f.n_frag as u32;
                f.n_frag += 1;
            }
            f.frag_z.push(frag_of_root[r]);
            f.zo.push(u as u32);
            f.frag_of_particle[u] = frag_of_root[r];
        }
    }
    // Fragments reaching ghosts: an edge to the ghost's owner for each such ghost.
    for z in 0..nu {
        let u = orig[z] as usize;
        if u >= n_own {
            let fr = frag_of_root[roots[z] as usize];
            if fr != NONE {
                let o = decomp.owner(local.keys[u]);
                (fr as u64).put(&mut f.edges_out[o]);
                local.ghost_gidx[u - n_own].put(&mut f.edges_out[o]);
            }
        }
    }
    f
}

/// Every fragment's group, resolved over all ranks.
pub(super) struct Groups {
    /// Per local fragment: the group's member count and home (global fragment id).
    pub count: Vec<u64>,
    pub home: Vec<u64>,
    /// Per local fragment: the group's label (tag, or -1 below `min_members`).
    pub label: Vec<i64>,
    /// Per local fragment: whether its group spans other ranks' fragments.
    pub on_edge: Vec<bool>,
    /// The fragment counts of all ranks.
    pub frag_counts: Vec<u64>,
    /// Connected components over all ranks (singletons included).
    pub total: usize,
    pub n_edges: usize,
}

impl Groups {
    /// The rank holding global fragment `f`.
    pub fn rank_of(&self, f: u64) -> usize {
        let mut acc = 0;
        for (r, &c) in self.frag_counts.iter().enumerate() {
            acc += c;
            if f < acc {
                return r;
            }
        }
        self.frag_counts.len() - 1
    }
}

pub(super) fn resolve<T: Real, const D: usize>(
    comm: &Comm,
    frags: &Fragments,
    local: &Local<T, D>,
    min_members: u64,
    cs: &mut CommStats,
    timings: &mut Timings,
) -> Result<Groups> {
    let (p, me, n_frag) = (comm.size(), comm.rank(), frags.n_frag);
    let frag_counts = comm.all_gather_u64(n_frag as u64);
    let frag_base: u64 = frag_counts[..me].iter().sum();
    // Edges to the ghosts' owners, fragment ids made global before they leave.
    let outs: Vec<Vec<u8>> = frags
        .edges_out
        .iter()
        .map(|b| {
            let mut out = Vec::with_capacity(b.len());
            let mut rd = Reader::new(b);
            while !rd.done() {
                (frag_base + rd.get::<u64>()).put(&mut out);
                rd.get::<u64>().put(&mut out);
            }
            out
        })
        .collect();
    let recv = timings.time("dist edges", || comm.exchange("fof edges", &Outbox::from_parts(outs), cs))?;
    let mut count = vec![0u64; n_frag];
    let mut tag = vec![i64::MAX; n_frag];
    for (&f, &u) in frags.frag_z.iter().zip(&frags.zo) {
        count[f as usize] += 1;
        tag[f as usize] = tag[f as usize].min(local.tag[u as usize]);
    }
    // The ghost's own fragment replaces the ghost.
    let mut pairs = Vec::new();
    for r in 0..p {
        let mut rd = Reader::new(recv.from(r));
        while !rd.done() {
            let a: u64 = rd.get();
            let g: u64 = rd.get();
            let u = local.gidx[..local.n_own].partition_point(|&x| x < g);
            debug_assert!(u < local.n_own && local.gidx[u] == g);
            a.put(&mut pairs);
            (frag_base + frags.frag_of_particle[u] as u64).put(&mut pairs);
        }
    }
    drop(recv);
    let gathered = timings.time("dist resolve", || comm.all_gather_bytes("fof edge gather", &pairs, cs))?;
    // The fragments on edges, numbered in ascending global id so that the union–find's
    // root (its smallest index) is the smallest fragment id.
    let mut edges: Vec<(u64, u64)> = Vec::new();
    let mut rd = Reader::new(&gathered.buf);
    while !rd.done() {
        edges.push((rd.get(), rd.get()));
    }
    drop(gathered);
    let mut list: Vec<u64> = edges.iter().flat_map(|&(a, b)| [a, b]).collect();
    list.sort_unstable();
    list.dedup();
    let id = |f: u64| list.binary_search(&f).unwrap() as u32;
    let uf = UnionFind::new(list.len());
    for &(a, b) in &edges {
        uf.union(id(a), id(b));
    }
    // Counts and tags of the fragments on edges that this rank holds, for every rank.
    let mut info = Vec::new();
    for &f in &list {
        if f >= frag_base && f < frag_base + n_frag as u64 {
            let lf = (f - frag_base) as usize;
            f.put(&mut info);
            count[lf].put(&mut info);
            tag[lf].put(&mut info);
        }
    }
    let infos = comm.all_gather_bytes("fof fragment info", &info, cs)?;
    let mut set_count = vec![0u64; list.len()];
    let mut set_tag = vec![i64::MAX; list.len()];
    let mut rd = Reader::new(&infos.buf);
    while !rd.done() {
        let f: u64 = rd.get();
        let c: u64 = rd.get();
        let t: i64 = rd.get();
        let r = uf.find(id(f)) as usize;
        set_count[r] += c;
        set_tag[r] = set_tag[r].min(t);
    }
    let merged_away = (0..list.len() as u32).filter(|&i| uf.find(i) != i).count();
    // Only fragments on an edge change; the others are whole groups (home: themselves).
    let mut home: Vec<u64> = (0..n_frag as u64).map(|f| frag_base + f).collect();
    let mut edge_flag = vec![false; n_frag];
    let on_edge: HashMap<u64, u32> =
        list.iter().enumerate().filter(|(_, f)| **f >= frag_base && **f < frag_base + n_frag as u64).map(|(i, &f)| (f, i as u32)).collect();
    for (&f, &i) in &on_edge {
        let lf = (f - frag_base) as usize;
        let r = uf.find(i) as usize;
        tag[lf] = set_tag[r];
        count[lf] = set_count[r];
        home[lf] = list[r];
        edge_flag[lf] = true;
    }
    let label = (0..n_frag).map(|f| if count[f] >= min_members { tag[f] } else { -1 }).collect();
    let frag_total: u64 = frag_counts.iter().sum();
    Ok(Groups { count, home, label, on_edge: edge_flag, frag_counts, total: frag_total as usize - merged_away, n_edges: edges.len() })
}
