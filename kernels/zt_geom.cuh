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
