// Caller fields on the device: a strided array of one of the C API's element types.
#pragma once
#include "zt_geom.cuh"

// A caller's per-particle field (ty: 0 absent, 1 f32, 2 f64, 3 i32, 4 i64, 5 u32, 6 u64),
// element i by input index.
struct ZtField {
    ZtStrided a;
    u32 ty;
};

template <class V>
ZT_HD V zt_raw(ZtStrided a, u32 i) {
    i64 stride = a.stride ? a.stride : (i64)sizeof(V);
    return *(const V*)(a.data + (u64)((i64)i * stride));
}

ZT_HD double zt_real(ZtField f, u32 i) { return f.ty == 1 ? (double)zt_raw<float>(f.a, i) : zt_raw<double>(f.a, i); }

ZT_HD i64 zt_int(ZtField f, u32 i) {
    switch (f.ty) {
        case 3: return (i64)zt_raw<i32>(f.a, i);
        case 4: return zt_raw<i64>(f.a, i);
        case 5: return (i64)zt_raw<u32>(f.a, i);
        default: return (i64)zt_raw<u64>(f.a, i);
    }
}

