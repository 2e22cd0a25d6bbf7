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
