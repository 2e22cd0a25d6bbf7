//! The dual tree walk on the CPU (docs/DESIGN.md §3): interaction lists moved down the
//! planes by a per-job node–node test, then a leaf pass. Work is split over receiving
//! parents in contiguous chunks; each task keeps its own scratch.

use rayon::prelude::*;

use super::Cpu;
use super::par::chunk_ranges;
use crate::geom::Real;
use crate::pipeline::{Lists, Tree};

impl Lists<Cpu> {
    /// The source nodes of receiving node `a` (index within its plane).
    #[inline(always)]
    pub fn of(&self, a: usize) -> &[u32] {
        &self.items[self.offsets[a] as usize..self.offsets[a + 1] as usize]
    }
}

/// The candidate sources of the children of one receiving parent: the children (with
/// sources) of each source node in the parent's list, grouped by that source.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Candidates<'a> {
    /// All candidate nodes; group `g` is `nodes[offsets[g]..offsets[g + 1]]`.
    pub nodes: &'a [u32],
    pub offsets: &'a [u32],
    /// The source node whose children form group `g`.
    pub sources: &'a [u32],
    /// The receiving parent.
    pub parent: u32,
}

impl Candidates<'_> {
    pub fn group(&self, g: usize) -> &[u32] {
        &self.nodes[self.offsets[g] as usize..self.offsets[g + 1] as usize]
    }
}

/// The lists of the super plane: every super node with queries sees every super node
/// with sources.
pub(crate) fn walk_start<T: Real, const D: usize>(tree: &Tree<Cpu, T, D>) -> Lists<Cpu> {
    let top = tree.super_plane();
    let sources: Vec<u32> = (top.first..top.first + top.len).filter(|&b| tree.src_count[b] > 0).map(|b| b as u32).collect();
    let mut lists: Lists<Cpu> = Lists { offsets: Vec::<u32>::with_capacity(top.len + 1), items: Vec::<u32>::new() };
    lists.offsets.push(0);
    for a in top.first..top.first + top.len {
        if tree.qry_range(a).1 > 0 {
            lists.items.extend_from_slice(&sources);
        }
        lists.offsets.push(lists.items.len() as u32);
    }
    lists
}

/// Calls `visit(a, &candidates, scratch, sink)` for every child `a` (with queries and
/// candidates) of every node of plane `parent`, in parallel over contiguous chunks of
/// parents; the candidates of `a` are the children (with sources) of every source in its
/// parent's list. Returns what each chunk's sink collected, in plane order.
fn for_children<T, const D: usize, S, R, FI, FV>(tree: &Tree<Cpu, T, D>, parent: usize, lists: &Lists<Cpu>, init: FI, visit: FV) -> Vec<R>
where
    T: Real,
    S: Send,
    R: Send + Default,
    FI: Fn() -> S + Sync + Send,
    FV: Fn(usize, &Candidates<'_>, &mut S, &mut R) + Sync + Send,
{
    let pp = tree.planes[parent];
    let nchunks = (pp.len / 4).clamp(1, rayon::current_num_threads() * 64);
    chunk_ranges(pp.len, nchunks)
        .into_par_iter()
        .map_init(&init, |scratch, r| {
            let mut sink = R::default();
            let mut nodes: Vec<u32> = Vec::new();
            let mut offsets: Vec<u32> = Vec::new();
            for pl in r {
                let pn = pp.first + pl;
                let kids = tree.children(pn);
                if kids.is_empty() {
                    continue;
                }
                nodes.clear();
                offsets.clear();
                offsets.push(0);
                let sources = lists.of(pl);
                for &b in sources {
                    for c in tree.children(b as usize) {
                        if tree.src_count[c] > 0 {
                            nodes.push(c as u32);
                        }
                    }
                    offsets.push(nodes.len() as u32);
                }
                let cands = Candidates { nodes: &nodes, offsets: &offsets, sources, parent: pn as u32 };
                for a in kids {
                    visit(a, &cands, scratch, &mut sink);
                }
            }
            sink
        })
        .collect()
}

/// Per chunk of parents: the number of kept sources of each child (in plane order) and
/// the kept sources.
#[derive(Default)]
struct Kept {
    counts: Vec<u32>,
    items: Vec<u32>,
}

/// Moves the lists of plane `parent` one plane down: `node_test(a, &candidates, scratch,
/// kept)` appends the sources child `a` keeps. Only nodes with queries receive.
pub(crate) fn walk_plane<T, const D: usize, S, FI, FT>(
    tree: &Tree<Cpu, T, D>,
    parent: usize,
    lists: &Lists<Cpu>,
    init: FI,
    node_test: FT,
) -> Lists<Cpu>
where
    T: Real,
    S: Send,
    FI: Fn() -> S + Sync + Send,
    FT: Fn(usize, &Candidates<'_>, &mut S, &mut Vec<u32>) + Sync + Send,
{
    let child = tree.planes[parent - 1];
    let parts: Vec<Kept> = for_children(tree, parent, lists, init, |a, cands, scratch, kept: &mut Kept| {
        let before = kept.items.len();
        if tree.qry_range(a).1 > 0 && !cands.nodes.is_empty() {
            node_test(a, cands, scratch, &mut kept.items);
        }
        kept.counts.push((kept.items.len() - before) as u32);
    });
    let total: usize = parts.iter().map(|x| x.items.len()).sum();
    let mut next: Lists<Cpu> = Lists { offsets: Vec::<u32>::with_capacity(child.len + 1), items: Vec::<u32>::with_capacity(total) };
    next.offsets.push(0);
    for part in parts {
        let mut off = next.items.len() as u32;
        for c in part.counts {
            off += c;
            next.offsets.push(off);
        }
        next.items.extend_from_slice(&part.items);
    }
    debug_assert_eq!(next.offsets.len(), child.len + 1);
    next
}

/// The leaf pass: `leaf(a, &candidates, scratch)` for every leaf `a` with queries and
/// candidates, given the lists of plane 1. Returns the candidate pairs handed over.
pub(crate) fn walk_leaves<T, const D: usize, S, FI, FL>(tree: &Tree<Cpu, T, D>, lists: &Lists<Cpu>, init: FI, leaf: FL) -> u64
where
    T: Real,
    S: Send,
    FI: Fn() -> S + Sync + Send,
    FL: Fn(usize, &Candidates<'_>, &mut S) + Sync + Send,
{
    let parts: Vec<u64> = for_children(tree, 1, lists, init, |a, cands, scratch, pairs: &mut u64| {
        if tree.qry_range(a).1 > 0 && !cands.nodes.is_empty() {
            leaf(a, cands, scratch);
            *pairs += cands.nodes.len() as u64;
        }
    });
    parts.iter().sum()
}
