//! From local groups to global ones. A fragment that reached a ghost becomes an edge
//! (fragment, ghost) sent to the ghost's owner, which replaces the ghost by the ghost's
//! own fragment. The edges, which exist only for groups crossing ranks, are gathered on
//! every rank with the count and tag of every fragment on an edge, and every rank runs the
//! same union–find over them: the root of a set is its smallest global fragment id (the
//! group's home). Only the edges and the fragments on them pass through host memory.

use std::collections::HashMap;

use super::super::comm::{Outbox, Reader, Wire};
use super::super::{CommStats, On};
use super::Local;
use crate::backend::dist::{DistOps, Fragments};
use crate::base::Timings;
use crate::error::Result;
use crate::fof::union_find::UnionFind;
use crate::geom::Real;

/// Every fragment's group, resolved over all ranks.
pub(super) struct Groups<B: DistOps> {
    /// Per local fragment: its group's member count over all ranks, and its label (tag,
    /// or -1 below `min_members`).
    pub count: B::Buf<u64>,
    pub label: B::Buf<i64>,
    /// The local fragments whose group spans other ranks' fragments, and the group's home
    /// (its smallest global fragment id).
    pub home_of: HashMap<u32, u64>,
    /// Global id of this rank's first fragment; the fragment counts of all ranks.
    pub frag_base: u64,
    pub frag_counts: Vec<u64>,
    /// Connected components over all ranks (singletons included).
    pub total: usize,
    pub n_edges: usize,
}

impl<B: DistOps> Groups<B> {
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

pub(super) fn resolve<B: DistOps, T: Real, const D: usize>(
    on: On<'_>,
    b: &B,
    frags: &Fragments<B>,
    local: &Local<B, T, D>,
    min_members: u64,
    cs: &mut CommStats,
    timings: &mut Timings,
) -> Result<Groups<B>> {
    let comm = on.comm;
    let (p, me, n_frag) = (comm.size(), comm.rank(), frags.n_frag);
    let frag_counts = comm.all_gather_u64(n_frag as u64);
    let frag_base: u64 = frag_counts[..me].iter().sum();
    // Edges to the ghosts' owners (the rank each ghost came from), fragment ids made global.
    let ghost_gidx = comm.agree(
        b.upload_host(frags.edge_ghost.clone()).and_then(|rows| b.gather(&local.ghost_gidx, &rows, 1)).and_then(|g| Ok(b.to_host(&g)?.into_owned())),
    )?;
    let mut outs = vec![Vec::new(); p];
    let mut from_end = Vec::with_capacity(p);
    local.ghost_from.iter().fold(0usize, |acc, &c| {
        from_end.push(acc + c);
        acc + c
    });
    for ((&g, &f), &gg) in frags.edge_ghost.iter().zip(&frags.edge_frag).zip(&ghost_gidx) {
        let owner = from_end.partition_point(|&e| e <= g as usize);
        (frag_base + f as u64).put(&mut outs[owner]);
        gg.put(&mut outs[owner]);
    }
    let recv = timings.time("dist edges", || comm.exchange("fof edges", &Outbox::from_parts(outs), cs))?;
    // The ghost's own fragment replaces the ghost.
    let mut asked: Vec<(u64, u64)> = Vec::new();
    for r in 0..p {
        let mut rd = Reader::new(recv.from(r));
        while !rd.done() {
            asked.push((rd.get(), rd.get()));
        }
    }
    drop(recv);
    let their = comm.agree((|| -> Result<Vec<u32>> {
        let g = b.upload_host(asked.iter().map(|e| e.1).collect())?;
        let rows = b.find_rows(&local.gidx, &g)?;
        Ok(b.to_host(&b.gather(&frags.frag_of, &rows, 1)?)?.into_owned())
    })())?;
    let mut pairs = Vec::with_capacity(16 * asked.len());
    for (&(a, _), &f) in asked.iter().zip(&their) {
        a.put(&mut pairs);
        (frag_base + f as u64).put(&mut pairs);
    }
    let gathered = timings.time("dist resolve", || comm.all_gather_bytes("fof edge gather", &pairs, cs))?;
    // The fragments on edges, numbered in ascending global id so that the union–find's
    // root (its smallest index) is the smallest fragment id.
    let mut edges: Vec<(u64, u64)> = Vec::new();
    let mut rd = Reader::new(&gathered.buf);
    while !rd.done() {
        edges.push((rd.get(), rd.get()));
    }
    drop(gathered);
    let mut list: Vec<u64> = edges.iter().flat_map(|&(a, c)| [a, c]).collect();
    list.sort_unstable();
    list.dedup();
    let id = |f: u64| list.binary_search(&f).unwrap() as u32;
    let uf = UnionFind::new(list.len());
    for &(a, c) in &edges {
        uf.union(id(a), id(c));
    }
    // Counts and tags of the fragments on edges that this rank holds, for every rank.
    let mine: Vec<(usize, u64)> =
        list.iter().enumerate().filter(|&(_, &f)| f >= frag_base && f < frag_base + n_frag as u64).map(|(i, &f)| (i, f)).collect();
    let (mut count, mut tag) = comm.agree(b.fragment_sums(&frags.frag_of, &local.tag, n_frag))?;
    let lf: Vec<u32> = mine.iter().map(|&(_, f)| (f - frag_base) as u32).collect();
    let (mc, mt) = comm.agree((|| -> Result<(Vec<u64>, Vec<i64>)> {
        let rows = b.upload_host(lf.clone())?;
        Ok((b.to_host(&b.gather(&count, &rows, 1)?)?.into_owned(), b.to_host(&b.gather(&tag, &rows, 1)?)?.into_owned()))
    })())?;
    let mut info = Vec::with_capacity(24 * mine.len());
    for (j, &(_, f)) in mine.iter().enumerate() {
        f.put(&mut info);
        mc[j].put(&mut info);
        mt[j].put(&mut info);
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
    let mut home_of = HashMap::with_capacity(mine.len());
    let (mut nc, mut nt) = (Vec::with_capacity(mine.len()), Vec::with_capacity(mine.len()));
    for (&(i, _), &f) in mine.iter().zip(&lf) {
        let r = uf.find(i as u32) as usize;
        nc.push(set_count[r]);
        nt.push(set_tag[r]);
        home_of.insert(f, list[r]);
    }
    let label = comm.agree((|| -> Result<_> {
        b.scatter_host(&mut count, &lf, &nc)?;
        b.scatter_host(&mut tag, &lf, &nt)?;
        b.fragment_labels(&count, &tag, min_members)
    })())?;
    let frag_total: u64 = frag_counts.iter().sum();
    Ok(Groups { count, label, home_of, frag_base, frag_counts, total: frag_total as usize - merged_away, n_edges: edges.len() })
}
