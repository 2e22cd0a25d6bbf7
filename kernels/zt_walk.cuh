// What the walk kernels share: the tree's node arrays as the kernels take them.
#pragma once
#include "zt_block.cuh"
#include "zt_geom.cuh"

// src/pipeline/tree.rs `Tree` on the device: per-node arrays over all planes (global node
// indices); a node's boxes are D values of T at `lo + D * node`.
template <class T>
struct ZtTree {
    const u32* src_start;
    const u32* src_count;
    const u32* qry_start;
    const u32* qry_count;
    const T* src_lo;
    const T* src_hi;
    const T* qry_lo;
    const T* qry_hi;
    const u32* child_start;
    const u32* child_count;
};

// An interaction list in CSR form (src/pipeline/mod.rs `Lists`): receiving node i of the
// plane sees the nodes items[offsets[i] .. offsets[i + 1]].
struct ZtLists {
    const u32* offsets;
    const u32* items;
};

// The candidates of one plane pass: for receiving parent p, the children with sources of
// every node of its list, in list order (cand[coff[p] .. coff[p + 1]]), and for each child
// plane node its parent's index in the parent plane.
struct ZtCands {
    const u32* coff;
    const u32* cand;
    const u32* parent_of;
};
