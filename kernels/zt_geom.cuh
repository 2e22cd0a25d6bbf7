// Per-element geometry shared by every kernel: cells and Morton keys, key levels.
// These are the device twins of src/geom/morton.rs; tests/device/ checks them bit for
// bit against the Rust definitions on adversarial values (NaN, faces, beyond the box).
#pragma once
#include "zt_cuda.cuh"

// A strided caller array (ztree_array on the device): element i at data + i * stride.
struct ZtStrided {
    u64 data;
    i64 stride;
};

// The quantiser of src/geom/morton.rs: cell = floor((x - lo) * scale), clamped.
struct ZtQuant {
    double lo[3];
    double scale[3];
};

// `(c as u64).min(max)` of Rust: NaN and negatives give 0, large values the top cell.
ZT_HD u64 zt_cell(double x, double lo, double scale, u64 max_cell) {
    double c = (x - lo) * scale;
    if (!(c > 0.0)) return 0;
    if (c >= (double)max_cell) return max_cell;
    u64 v = (u64)c;
    return v < max_cell ? v : max_cell;
}

ZT_HD u64 zt_spread3(u64 x) {
    x &= 0x1fffffull;
    x = (x | x << 32) & 0x001f00000000ffffull;
    x = (x | x << 16) & 0x001f0000ff0000ffull;
    x = (x | x << 8) & 0x100f00f00f00f00full;
    x = (x | x << 4) & 0x10c30c30c30c30c3ull;
    x = (x | x << 2) & 0x1249249249249249ull;
    return x;
}

ZT_HD u64 zt_spread2(u64 x) {
    x &= 0xffffffffull;
    x = (x | x << 16) & 0x0000ffff0000ffffull;
    x = (x | x << 8) & 0x00ff00ff00ff00ffull;
    x = (x | x << 4) & 0x0f0f0f0f0f0f0f0full;
    x = (x | x << 2) & 0x3333333333333333ull;
    x = (x | x << 1) & 0x5555555555555555ull;
    return x;
}

// Bits per coordinate: 21 in 3D (63-bit keys), 32 in 2D.
template <int D>
ZT_HD u64 zt_morton(const double* p, const ZtQuant& q) {
    if (D == 2) {
        const u64 m = 0xffffffffull;
        return zt_spread2(zt_cell(p[0], q.lo[0], q.scale[0], m)) << 1 | zt_spread2(zt_cell(p[1], q.lo[1], q.scale[1], m));
    }
    const u64 m = 0x1fffffull;
    return zt_spread3(zt_cell(p[0], q.lo[0], q.scale[0], m)) << 2 | zt_spread3(zt_cell(p[1], q.lo[1], q.scale[1], m)) << 1 |
           zt_spread3(zt_cell(p[2], q.lo[2], q.scale[2], m));
}

// Level of the gap between two sorted keys: 64 + the bit length of their difference, 0
// when equal (src/backend/cpu/ingest.rs `levels`).
ZT_HD u8 zt_gap_level(u64 a, u64 b) {
    return a == b ? 0 : (u8)(64 + 64 - __clzll((i64)(a ^ b)));
}

template <class T>
ZT_HD double zt_load(ZtStrided a, u32 i) {
    i64 stride = a.stride ? a.stride : (i64)sizeof(T);
    return (double)*(const T*)(a.data + (u64)((i64)i * stride));
}

// ---- distances (src/geom/metric.rs): one precision T, `(dx*dx + dy*dy) + dz*dz`, no FMA
// (NVRTC --fmad=false, the emulator -ffp-contract=off) ----

template <class T>
ZT_HD T zt_fmax(T a, T b) {
    return a > b ? a : b;
}
template <class T>
ZT_HD T zt_fmin(T a, T b) {
    return a < b ? a : b;
}

// The minimum image of a difference x in a periodic dimension of length l (h = l / 2):
// l subtracted (added) once when x > h (x < -h); |x| = h exactly is left as it is.
template <class T>
ZT_HD T zt_min_image(T x, T l, T h) {
    return x > h ? x - l : (x < -h ? x + l : x);
}

// Open space (periodic = 0) or the periodic box [0, len): `len` and `half = len * 0.5`
// exactly as the host's `Periodic::new` rounds them into T.
template <class T, int D>
struct ZtMetric {
    T len[3];
    T half[3];
    u32 periodic;

    ZT_HD T diff(T a, T b, int d) const {
        T x = a - b;
        return periodic ? zt_min_image(x, len[d], half[d]) : x;
    }
    ZT_HD T dist2(const T* a, const T* b) const {
        T s = (T)0;
        for (int d = 0; d < D; ++d) {
            T x = diff(a[d], b[d], d);
            s = s + x * x;
        }
        return s;
    }
    // Bounds of |q_d - s_d| (minimum image) for q_d in [alo, ahi], s_d in [blo, bhi].
    ZT_HD void gap_range(T alo, T ahi, T blo, T bhi, int d, T* lo, T* hi) const {
        T l0 = zt_fmax(zt_fmax(alo - bhi, blo - ahi), (T)0);
        T h0 = zt_fmax(ahi - blo, bhi - alo);
        if (!periodic) {
            *lo = l0;
            *hi = h0;
            return;
        }
        T l = len[d], h = half[d];
        *lo = zt_fmax(zt_fmin(l0, l - h0), (T)0);
        *hi = h0 <= h ? h0 : (l0 > h ? l - l0 : h);
    }
    ZT_HD T box_min2(const T* alo, const T* ahi, const T* blo, const T* bhi) const {
        T s = (T)0;
        for (int d = 0; d < D; ++d) {
            T g, u;
            gap_range(alo[d], ahi[d], blo[d], bhi[d], d, &g, &u);
            s = s + g * g;
        }
        return s;
    }
    ZT_HD T box_max2(const T* alo, const T* ahi, const T* blo, const T* bhi) const {
        T s = (T)0;
        for (int d = 0; d < D; ++d) {
            T g, u;
            gap_range(alo[d], ahi[d], blo[d], bhi[d], d, &g, &u);
            s = s + u * u;
        }
        return s;
    }
};
