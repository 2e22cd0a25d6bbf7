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

// Clears the bits of every key below bit `low` (0 < low < 64): the sort then orders by
// the bits the tree keeps, as the CPU's (geom::morton::bits_kept), and its passes over
// the cleared digits are skipped.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_key_cut(u64* keys, u32 n, u32 low) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i < n) keys[i] &= ~((1ull << low) - 1ull);
}
ZT_EXPORT(zt_key_cut)

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
// among the tile's keys with that digit (in tile order: stable). The tile is first put in
// digit order in shared memory, so that consecutive threads write consecutive addresses
// (runs of one digit) rather than one scattered word each: the writes coalesce.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_radix_scatter(const u64* keys, const u32* vals, u32 n, u32 shift,
                                                                        const u32* offsets, u64* keys_out, u32* vals_out) {
    __shared__ u32 seen[ZT_RADIX];                 // keys of each digit in earlier rounds
    __shared__ u32 warp_base[ZT_WARPS][ZT_RADIX];  // per round: keys of each digit in earlier warps
    __shared__ u32 local_start[ZT_RADIX];          // where each digit's run starts in the tile
    __shared__ u32 out_shift[ZT_RADIX];            // global position of a digit's run minus its local start
    __shared__ u64 tile_keys[ZT_TILE];
    __shared__ u32 tile_vals[ZT_TILE];
    const unsigned full = 0xffffffffu;
    u32 t = threadIdx.x, lane = t & 31, warp = t >> 5;
    u32 base = blockIdx.x * ZT_TILE;
    u32 tile_n = n - base < ZT_TILE ? n - base : ZT_TILE;
    seen[t] = 0;
    u64 key[ZT_ITEMS];
    u32 rank_in_digit[ZT_ITEMS];
    for (u32 j = 0; j < ZT_ITEMS; ++j) {
        for (u32 w = 0; w < ZT_WARPS; ++w) warp_base[w][t] = 0;
        __syncthreads();
        u32 i = j * ZT_BLOCK + t;
        bool valid = i < tile_n;
        key[j] = valid ? keys[base + i] : 0;
        u32 digit = valid ? (u32)(key[j] >> shift) & (ZT_RADIX - 1) : ZT_RADIX;  // invalid: its own class
        u32 peers = __match_any_sync(full, digit);
        u32 rank = __popc(peers & ((1u << lane) - 1));
        if (valid && rank == 0) warp_base[warp][digit] = __popc(peers);
        __syncthreads();
        // Thread t turns digit t's per-warp counts into offsets within the round.
        u32 run = 0;
        for (u32 w = 0; w < ZT_WARPS; ++w) {
            u32 c = warp_base[w][t];
            warp_base[w][t] = run;
            run += c;
        }
        __syncthreads();
        rank_in_digit[j] = valid ? seen[digit] + warp_base[warp][digit] + rank : 0;
        __syncthreads();
        seen[t] += run;
    }
    u32 total;
    u32 start = zt_block_exclusive_scan(seen[t], &total);
    local_start[t] = start;
    out_shift[t] = offsets[t * gridDim.x + blockIdx.x] - start;
    __syncthreads();
    for (u32 j = 0; j < ZT_ITEMS; ++j) {
        u32 i = j * ZT_BLOCK + t;
        if (i < tile_n) {
            u32 at = local_start[(u32)(key[j] >> shift) & (ZT_RADIX - 1)] + rank_in_digit[j];
            tile_keys[at] = key[j];
            tile_vals[at] = vals[base + i];
        }
    }
    __syncthreads();
    for (u32 p = t; p < tile_n; p += ZT_BLOCK) {
        u64 k = tile_keys[p];
        u32 at = out_shift[(u32)(k >> shift) & (ZT_RADIX - 1)] + p;
        keys_out[at] = k;
        vals_out[at] = tile_vals[p];
    }
}
ZT_EXPORT(zt_radix_scatter)
