// The plane-independent steps of a walk pass (src/backend/cpu/walk.rs `for_children`):
// the candidates of each receiving parent, by count -> scan -> insert, and the parent of
// each child-plane node. The per-job node tests that filter them are in knn.cu / fof.cu.
#include "zt_walk.cuh"

// Children with sources of node b, counted.
ZT_HD u32 zt_source_children(const u32* child_start, const u32* child_count, const u32* src_count, u32 b) {
    u32 s = child_start[b], e = s + child_count[b], c = 0;
    for (u32 x = s; x < e; ++x) c += src_count[x] > 0;
    return c;
}

// cnt[p] = the number of candidates of parent p (warp per parent; lanes over its list).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK)
    zt_cand_count(const u32* child_start, const u32* child_count, const u32* src_count, u32 parent_len, ZtLists l, u32* cnt) {
    u32 p = zt_grid_warp(), lane = zt_lane();
    if (p >= parent_len) return;
    u32 b0 = l.offsets[p], b1 = l.offsets[p + 1], total = 0;
    for (u32 i = b0; i < b1; i += 32) {
        u32 c = i + lane < b1 ? zt_source_children(child_start, child_count, src_count, l.items[i + lane]) : 0;
        total += zt_warp_sum(c);
    }
    if (lane == 0) cnt[p] = total;
}
ZT_EXPORT(zt_cand_count)

// The candidates of parent p at cand[coff[p] ..], in list order, each node's children in
// order (the order the CPU's candidate groups have).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK)
    zt_cand_fill(const u32* child_start, const u32* child_count, const u32* src_count, u32 parent_len, ZtLists l, const u32* coff, u32* cand) {
    u32 p = zt_grid_warp(), lane = zt_lane();
    if (p >= parent_len) return;
    u32 b0 = l.offsets[p], b1 = l.offsets[p + 1], base = coff[p];
    for (u32 i = b0; i < b1; i += 32) {
        u32 b = i + lane < b1 ? l.items[i + lane] : 0;
        u32 c = i + lane < b1 ? zt_source_children(child_start, child_count, src_count, b) : 0;
        u32 total, at = base + zt_warp_exclusive_scan(c, &total);
        if (c) {
            u32 s = child_start[b], e = s + child_count[b];
            for (u32 x = s; x < e; ++x)
                if (src_count[x] > 0) cand[at++] = x;
        }
        base += total;
    }
}
ZT_EXPORT(zt_cand_fill)

// parent_of[c - child_first] = p for every child c of parent node parent_first + p.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK)
    zt_parent_of(const u32* child_start, const u32* child_count, u32 parent_first, u32 parent_len, u32 child_first, u32* parent_of) {
    u32 p = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (p >= parent_len) return;
    u32 s = child_start[parent_first + p], e = s + child_count[parent_first + p];
    for (u32 c = s; c < e; ++c) parent_of[c - child_first] = p;
}
ZT_EXPORT(zt_parent_of)

// out[ai] = the number of candidates of child ai's parent.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_child_cand_count(u32 child_len, ZtCands c, u32* out) {
    u32 ai = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (ai >= child_len) return;
    u32 p = c.parent_of[ai];
    out[ai] = c.coff[p + 1] - c.coff[p];
}
ZT_EXPORT(zt_child_cand_count)

// The candidates each child keeps (keep[doff[ai] + i], set by a job's decide kernel), in
// candidate order, at items[offsets[ai] ..] (warp per child).
extern "C" __global__ void ZT_BOUNDS_2
    zt_cand_keep(u32 child_len, ZtCands c, const u32* doff, const u8* keep, const u32* offsets, u32* items) {
    u32 ai = zt_grid_warp(), lane = zt_lane();
    if (ai >= child_len) return;
    u32 base = offsets[ai];
    if (offsets[ai + 1] == base) return;
    u32 p = c.parent_of[ai], c0 = c.coff[p], mm = c.coff[p + 1] - c0;
    for (u32 i = 0; i < mm; i += 32) {
        bool k = i + lane < mm && keep[doff[ai] + i + lane];
        u32 at = zt_warp_append(k, &base);
        if (k) items[at] = c.cand[c0 + i + lane];
    }
}
ZT_EXPORT(zt_cand_keep)
