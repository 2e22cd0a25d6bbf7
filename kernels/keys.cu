// Morton keys of the caller's particles (read in place through strided descriptors) and
// the levels of the gaps between sorted keys.
#include "zt_geom.cuh"

template <class T, int D>
__device__ void keys_strided(ZtStrided x, ZtStrided y, ZtStrided z, u32 n, ZtQuant q, u64* keys) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    double p[3] = {zt_load<T>(x, i), zt_load<T>(y, i), D == 3 ? zt_load<T>(z, i) : 0.0};
    keys[i] = zt_morton<D>(p, q);
}

#define ZT_KEYS(name, T, D)                                                                          \
    extern "C" __global__ void name(ZtStrided x, ZtStrided y, ZtStrided z, u32 n, ZtQuant q, u64* keys) { \
        keys_strided<T, D>(x, y, z, n, q, keys);                                                     \
    }                                                                                                \
    ZT_EXPORT(name)
ZT_KEYS(zt_keys_f32_2, float, 2)
ZT_KEYS(zt_keys_f32_3, float, 3)
ZT_KEYS(zt_keys_f64_2, double, 2)
ZT_KEYS(zt_keys_f64_3, double, 3)

// levels[i] = level of the gap between keys[i] and keys[i + 1], i < n - 1.
extern "C" __global__ void zt_levels(const u64* keys, u32 n, u8* levels) {
    u32 i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i + 1 >= n) return;
    levels[i] = zt_gap_level(keys[i], keys[i + 1]);
}
ZT_EXPORT(zt_levels)

// out[z] = the caller's coordinate of point perm[z] - first, for every z whose perm[z] is in
// first .. first + count (the positions in z-order; sources and queries are gathered by
// two calls with their own descriptors).
template <class T>
__device__ void gather_strided(ZtStrided a, const u32* perm, u32 n, u32 first, u32 count, T* out) {
    u32 z = blockIdx.x * blockDim.x + threadIdx.x;
    if (z >= n) return;
    u32 v = perm[z];
    if (v >= first && v - first < count) out[z] = (T)zt_load<T>(a, v - first);
}
extern "C" __global__ void zt_gather_f32(ZtStrided a, const u32* perm, u32 n, u32 first, u32 count, float* out) {
    gather_strided<float>(a, perm, n, first, count, out);
}
ZT_EXPORT(zt_gather_f32)
extern "C" __global__ void zt_gather_f64(ZtStrided a, const u32* perm, u32 n, u32 first, u32 count, double* out) {
    gather_strided<double>(a, perm, n, first, count, out);
}
ZT_EXPORT(zt_gather_f64)
