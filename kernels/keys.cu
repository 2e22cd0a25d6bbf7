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

// Input checks and the bounding box (src/input/validate.rs `check_point`): the first point
// (smallest index) that is not finite, outside [0, L) in a periodic box, or beyond
// `max_coord`, and the min / max of every coordinate of the good points, as order-preserving
// integer encodings of doubles (so that integer atomics find them).
struct ZtBox {
    double len[3];
    double max_coord;
    u32 periodic;
};

ZT_HD u64 zt_order_enc(double v) {
    v = v + 0.0;  // -0.0 -> +0.0
    u64 b = zt_double_bits(v);
    return (b >> 63) ? ~b : (b | 0x8000000000000000ull);
}

// Points each thread of zt_check reads (so that the bounds take one atomic per block and
// dimension, not one per warp: 1e8 points in 10 ms with per-warp atomics on an H200).
#define ZT_CHECK_ITEMS 16

template <class T, int D>
__device__ void check_strided(ZtStrided x, ZtStrided y, ZtStrided z, u32 n, ZtBox box, u32* first_bad, u64* lo, u64* hi) {
    __shared__ u64 s_mn[ZT_WARPS][3], s_mx[ZT_WARPS][3];
    const unsigned full = 0xffffffffu;
    u64 mn[3], mx[3];
    for (int d = 0; d < 3; ++d) {
        mn[d] = 0xffffffffffffffffull;
        mx[d] = 0;
    }
    ZtStrided a[3] = {x, y, z};
    u32 base = blockIdx.x * (ZT_BLOCK * ZT_CHECK_ITEMS) + threadIdx.x;
    for (u32 j = 0; j < ZT_CHECK_ITEMS; ++j) {
        u32 i = base + j * ZT_BLOCK;
        if (i >= n) break;
        bool bad = false;
        u64 e[3];
        for (int d = 0; d < D; ++d) {
            double v = zt_load<T>(a[d], i);
            bool finite = (v - v) == 0.0;
            bool outside = box.periodic && !(v >= 0.0 && v < box.len[d]);
            double mag = v < 0.0 ? -v : v;
            bad = bad || !finite || outside || mag > box.max_coord;
            e[d] = zt_order_enc(v);
        }
        if (bad) {
            atomicMin(first_bad, i);
            continue;
        }
        for (int d = 0; d < D; ++d) {
            mn[d] = e[d] < mn[d] ? e[d] : mn[d];
            mx[d] = e[d] > mx[d] ? e[d] : mx[d];
        }
    }
    u32 w = threadIdx.x >> 5;
    for (int d = 0; d < D; ++d) {
        for (int o = 16; o > 0; o >>= 1) {
            u64 p = __shfl_xor_sync(full, mn[d], o), q = __shfl_xor_sync(full, mx[d], o);
            mn[d] = p < mn[d] ? p : mn[d];
            mx[d] = q > mx[d] ? q : mx[d];
        }
        if ((threadIdx.x & 31) == 0) {
            s_mn[w][d] = mn[d];
            s_mx[w][d] = mx[d];
        }
    }
    __syncthreads();
    if (threadIdx.x < (u32)D) {
        u32 d = threadIdx.x;
        u64 l = s_mn[0][d], h = s_mx[0][d];
        for (u32 v = 1; v < ZT_WARPS; ++v) {
            l = s_mn[v][d] < l ? s_mn[v][d] : l;
            h = s_mx[v][d] > h ? s_mx[v][d] : h;
        }
        if (l != 0xffffffffffffffffull) atomicMin(&lo[d], l);
        if (h != 0) atomicMax(&hi[d], h);
    }
}

#define ZT_CHECK(name, T, D)                                                                                              \
    extern "C" __global__ void name(ZtStrided x, ZtStrided y, ZtStrided z, u32 n, ZtBox box, u32* first_bad, u64* lo, u64* hi) { \
        check_strided<T, D>(x, y, z, n, box, first_bad, lo, hi);                                                          \
    }                                                                                                                     \
    ZT_EXPORT(name)
ZT_CHECK(zt_check_f32_2, float, 2)
ZT_CHECK(zt_check_f32_3, float, 3)
ZT_CHECK(zt_check_f64_2, double, 2)
ZT_CHECK(zt_check_f64_3, double, 3)

// out[z] = field[orig[z]] as f64: a caller's per-particle scalar (masses, the field to
// average) into z-order.
template <class T>
__device__ void gather_field(ZtStrided a, const u32* orig, u32 n, double* out) {
    u32 z = blockIdx.x * blockDim.x + threadIdx.x;
    if (z < n) out[z] = zt_load<T>(a, orig[z]);
}
extern "C" __global__ void zt_gather_field_f32(ZtStrided a, const u32* orig, u32 n, double* out) { gather_field<float>(a, orig, n, out); }
ZT_EXPORT(zt_gather_field_f32)
extern "C" __global__ void zt_gather_field_f64(ZtStrided a, const u32* orig, u32 n, double* out) { gather_field<double>(a, orig, n, out); }
ZT_EXPORT(zt_gather_field_f64)
