// Stable LSD radix sort of 64-bit keys carrying a u32 value (the permutation), 8 bits per
// pass: per-tile digit counts -> an exclusive scan of the counts, digit-major -> a stable
// scatter (ranks within a warp from __match_any_sync, across warps through shared counts).
// Passes on which every key has the same digit are skipped by the host (zt_key_spread).
#include "zt_block.cuh"

#define ZT_RADIX 256
#define ZT_ITEMS 8
#define ZT_TILE (ZT_BLOCK * ZT_ITEMS)

// OR of key ^ keys[0] over all keys: the bits on which some keys differ.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_key_spread(const u64* keys, u32 n, u64* spread) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    u64 d = i < n ? keys[i] ^ keys[0] : 0;
    const unsigned full = 0xffffffffu;
    for (int o = 16; o > 0; o >>= 1) d |= __shfl_xor_sync(full, d, o);
    if ((threadIdx.x & 31) == 0 && d) atomicOr(spread, d);
}
ZT_EXPORT(zt_key_spread)

// counts[digit * gridDim.x + block]: how many keys of each tile have each digit.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_radix_counts(const u64* keys, u32 n, u32 shift, u32* counts) {
    __shared__ u32 hist[ZT_RADIX];
    hist[threadIdx.x] = 0;
    __syncthreads();
    u32 base = blockIdx.x * ZT_TILE;
    for (u32 j = 0; j < ZT_ITEMS; ++j) {
        u32 i = base + j * ZT_BLOCK + threadIdx.x;
        if (i < n) atomicAdd(&hist[(u32)(keys[i] >> shift) & (ZT_RADIX - 1)], 1u);
    }
    __syncthreads();
    counts[threadIdx.x * gridDim.x + blockIdx.x] = hist[threadIdx.x];
}
ZT_EXPORT(zt_radix_counts)

// Writes every key and value of the tile to offsets[digit * gridDim.x + block] + its rank
// among the tile's keys with that digit (in tile order: stable).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_radix_scatter(const u64* keys, const u32* vals, u32 n, u32 shift,
                                                                        const u32* offsets, u64* keys_out, u32* vals_out) {
    __shared__ u32 next[ZT_RADIX];             // where the tile's next key of each digit goes
    __shared__ u32 warp_base[ZT_WARPS][ZT_RADIX];  // per round: keys of each digit in earlier warps
    __shared__ u32 round_total[ZT_RADIX];
    const unsigned full = 0xffffffffu;
    u32 t = threadIdx.x, lane = t & 31, warp = t >> 5;
    next[t] = offsets[t * gridDim.x + blockIdx.x];
    u32 base = blockIdx.x * ZT_TILE;
    for (u32 j = 0; j < ZT_ITEMS; ++j) {
        for (u32 w = 0; w < ZT_WARPS; ++w) warp_base[w][t] = 0;
        __syncthreads();
        u32 i = base + j * ZT_BLOCK + t;
        bool valid = i < n;
        u64 key = valid ? keys[i] : 0;
        u32 digit = valid ? (u32)(key >> shift) & (ZT_RADIX - 1) : ZT_RADIX;  // invalid: its own class
        u32 peers = __match_any_sync(full, digit);
        u32 rank = __popc(peers & ((1u << lane) - 1));
        bool leader = rank == 0;
        if (valid && leader) warp_base[warp][digit] = __popc(peers);
        __syncthreads();
        // Thread t turns digit t's per-warp counts into offsets within the round.
        u32 run = 0;
        for (u32 w = 0; w < ZT_WARPS; ++w) {
            u32 c = warp_base[w][t];
            warp_base[w][t] = run;
            run += c;
        }
        round_total[t] = run;
        __syncthreads();
        if (valid) {
            u32 at = next[digit] + warp_base[warp][digit] + rank;
            keys_out[at] = key;
            vals_out[at] = vals[i];
        }
        __syncthreads();
        next[t] += round_total[t];
        __syncthreads();
    }
}
ZT_EXPORT(zt_radix_scatter)
