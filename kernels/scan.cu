// Exclusive prefix sums of u32 arrays (the "scan" of count -> scan -> insert): each block
// scans its tile and reports its total; the host scans the totals the same way and adds
// them back (src/backend/cuda/scan.rs).
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
