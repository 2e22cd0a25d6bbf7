// Block-level primitives for blocks of ZT_BLOCK threads (no CUB: NVRTC has no headers).
#pragma once
#include "zt_cuda.cuh"

// Exclusive prefix sum of one value per thread over the block; the block's total in
// `*total`. Every thread of the block must call it.
ZT_HD u32 zt_block_exclusive_scan(u32 v, u32* total) {
    __shared__ u32 warp_sums[ZT_WARPS];
    const unsigned full = 0xffffffffu;
    u32 lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    u32 x = v;
    for (u32 o = 1; o < 32; o <<= 1) {
        u32 y = __shfl_up_sync(full, x, o);
        if (lane >= o) x += y;
    }
    if (lane == 31) warp_sums[warp] = x;
    __syncthreads();
    if (warp == 0) {
        u32 s = lane < ZT_WARPS ? warp_sums[lane] : 0;
        for (u32 o = 1; o < ZT_WARPS; o <<= 1) {
            u32 y = __shfl_up_sync(full, s, o);
            if (lane >= o) s += y;
        }
        if (lane < ZT_WARPS) warp_sums[lane] = s;
    }
    __syncthreads();
    u32 excl = x - v + (warp ? warp_sums[warp - 1] : 0);
    *total = warp_sums[ZT_WARPS - 1];
    __syncthreads();  // warp_sums is reused by the next call
    return excl;
}

// The warp of this thread across the grid (warp-per-item kernels) and its lane.
ZT_HD u32 zt_grid_warp() { return blockIdx.x * ZT_WARPS + (threadIdx.x >> 5); }
ZT_HD u32 zt_lane() { return threadIdx.x & 31; }

// Sum over the warp, returned to every lane. Every lane of the warp must call it.
template <class V>
ZT_HD V zt_warp_sum(V v) {
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

// Exclusive prefix sum over the warp's lanes; the warp's total in `*total`.
ZT_HD u32 zt_warp_exclusive_scan(u32 v, u32* total) {
    u32 lane = threadIdx.x & 31, x = v;
    for (u32 o = 1; o < 32; o <<= 1) {
        u32 y = __shfl_up_sync(0xffffffffu, x, o);
        if (lane >= o) x += y;
    }
    *total = __shfl_sync(0xffffffffu, x, 31);
    return x - v;
}

// Warp-wide append, in lane order: the slot at *base of this lane's item when `keep`, and
// *base moved past the warp's kept items. Every lane of the warp must call it.
ZT_HD u32 zt_warp_append(bool keep, u32* base) {
    unsigned mask = __ballot_sync(0xffffffffu, keep);
    u32 at = *base + __popc(mask & ((1u << (threadIdx.x & 31)) - 1u));
    *base += __popc(mask);
    return at;
}
