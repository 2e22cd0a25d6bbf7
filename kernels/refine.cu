// Refinement of runs of identical Morton keys (src/backend/cpu/ingest.rs `refine_runs`):
// the runs longer than max_run are found here; each is re-keyed over its own bounding box
// and re-sorted by the host driver with the keys, sort and gather kernels.
#include "zt_cuda.cuh"

// len[i] = the length of the run of equal keys starting at i (0 when i does not start a
// run, or its run has at most max_run keys); thread per key, scanning its run.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_long_runs(const u64* keys, u32 n, u32 max_run, u32* len) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i >= n) return;
    u32 l = 0;
    if (i == 0 || keys[i - 1] != keys[i]) {
        u32 e = i + 1;
        while (e < n && keys[e] == keys[i]) ++e;
        l = e - i > max_run ? e - i : 0;
    }
    len[i] = l;
}
ZT_EXPORT(zt_long_runs)

// flags[i] = whether a long run starts at i.
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_run_flags(const u32* len, u32 n, u32* flags) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i < n) flags[i] = len[i] != 0;
}
ZT_EXPORT(zt_run_flags)

// The long runs as (start, length) pairs at at[i].
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_run_list(const u32* len, u32 n, const u32* at, u32* runs) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i >= n || len[i] == 0) return;
    runs[2 * at[i]] = i;
    runs[2 * at[i] + 1] = len[i];
}
ZT_EXPORT(zt_run_list)

// out[i] = in[order[i]] (a run's permutation entries in their new order).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_permute_u32(const u32* in, const u32* order, u32 n, u32* out) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i < n) out[i] = in[order[i]];
}
ZT_EXPORT(zt_permute_u32)

// levels[i] = the secondary level of the gap between a run's re-sorted keys i and i + 1:
// the bit length of the smallest cell of the run's own key holding both, 0 when equal
// (src/geom/morton.rs `level_of`; below every primary level, which are 64 + a bit length).
extern "C" __global__ void __launch_bounds__(ZT_BLOCK) zt_secondary_levels(const u64* keys, u32 n, u8* levels) {
    u32 i = blockIdx.x * ZT_BLOCK + threadIdx.x;
    if (i + 1 >= n) return;
    u64 x = keys[i] ^ keys[i + 1];
    levels[i] = x == 0 ? 0 : (u8)(64 - __clzll((i64)x));
}
ZT_EXPORT(zt_secondary_levels)
