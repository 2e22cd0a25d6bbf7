// Exclusive prefix sums of u32 arrays (the "scan" of count -> scan -> insert): each block
// scans its tile and reports its total; the host scans the totals the same way and adds
// them back (src/backend/cuda/prims.rs `exclusive_scan`); arrays of up to
// `SCAN_ONE_BLOCK_MAX` entries, and the totals, by one block (`zt_scan_one_block`).
#include "zt_block.cuh"

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_scan_blocks(const u32* in, u32 n, u32* out, u32* block_totals) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    u32 v = i < n ? in[i] : 0;
    u32 total;
    u32 e = zt_block_exclusive_scan(v, &total);
    if (i < n) out[i] = e;
    if (threadIdx.x == 0) block_totals[blockIdx.x] = total;
}
ZT_EXPORT(zt_scan_blocks)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_scan_add(u32* out, u32 n, const u32* block_offsets) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i < n) out[i] += block_offsets[blockIdx.x];
}
ZT_EXPORT(zt_scan_add)

// One block scans all of v[..n] in place, tile by tile (ZT_BLOCK threads, ZT_SCAN_ITEMS
// consecutive items each), carrying the running total between tiles: the small arrays of
// the plane passes (and the block totals of large ones) in one launch, where the
// two-level scan takes three and its recursion five. Every thread runs every tile (the
// loop's bound and the carry are the same for all), so the block scan's barriers are
// reached by all. Each thread reads and writes only its own items: in place is safe.
// n is at most prims.rs `SCAN_ONE_BLOCK_MAX` (16,384; far from where t0 could wrap).
#define ZT_SCAN_ITEMS 16
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_scan_one_block(u32* v, u32 n) {
    u32 carry = 0;
    for (u32 t0 = 0; t0 < n; t0 += ZT_BLOCK * ZT_SCAN_ITEMS) {
        u32 base = t0 + threadIdx.x * ZT_SCAN_ITEMS;
        u32 x[ZT_SCAN_ITEMS];
        u32 sum = 0;
ZT_UNROLL
        for (u32 j = 0; j < ZT_SCAN_ITEMS; j++) {
            x[j] = base + j < n ? v[base + j] : 0;
            sum += x[j];
        }
        u32 total;
        u32 e = carry + zt_block_exclusive_scan(sum, &total);
ZT_UNROLL
        for (u32 j = 0; j < ZT_SCAN_ITEMS; j++) {
            if (base + j < n) v[base + j] = e;
            e += x[j];
        }
        carry += total;
    }
}
ZT_EXPORT(zt_scan_one_block)

// out[i] = i (the identity permutation the sort starts from).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_iota(u32* out, u32 n) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i < n) out[i] = i;
}
ZT_EXPORT(zt_iota)

// Index conversion for the C face's i64 outputs (f32 distances are widened by the kNN
// leaf kernel itself).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_u32_to_i64(const u32* in, u32 n, i64* out) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i < n) out[i] = (i64)in[i];
}
ZT_EXPORT(zt_u32_to_i64)
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_fill_f64(double* out, u32 n, double v) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i < n) out[i] = v;
}
ZT_EXPORT(zt_fill_f64)

// Splitting merged z-ordered points into sources (perm < ns) and queries
// (src/backend/cpu/ingest.rs `split_types`): flags -> exclusive scan (the source prefix
// count) -> each point to its slot.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_source_flags(const u32* perm, u32 n, u32 ns, u32* flags) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i < n) flags[i] = perm[i] < ns ? 1u : 0u;
    if (i == n) flags[i] = 0;
}
ZT_EXPORT(zt_source_flags)

extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_split_orig(const u32* perm, const u32* prefix, u32 n, u32 ns, u32* sorig, u32* qorig) {
    u32 z = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (z >= n) return;
    u32 v = perm[z];
    if (v < ns) sorig[prefix[z]] = v;
    else qorig[z - prefix[z]] = v - ns;
}
ZT_EXPORT(zt_split_orig)

template <class T>
__device__ void split_pos(const T* pos, const u32* perm, const u32* prefix, u32 n, u32 ns, T* spos, T* qpos) {
    u32 z = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (z >= n) return;
    if (perm[z] < ns) spos[prefix[z]] = pos[z];
    else qpos[z - prefix[z]] = pos[z];
}
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_split_pos_f32(const float* pos, const u32* perm, const u32* prefix, u32 n, u32 ns, float* spos, float* qpos) {
    split_pos<float>(pos, perm, prefix, n, ns, spos, qpos);
}
ZT_EXPORT(zt_split_pos_f32)
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_split_pos_f64(const double* pos, const u32* perm, const u32* prefix, u32 n, u32 ns, double* spos, double* qpos) {
    split_pos<double>(pos, perm, prefix, n, ns, spos, qpos);
}
ZT_EXPORT(zt_split_pos_f64)
