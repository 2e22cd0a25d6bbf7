// The one place kernels meet their compiler: NVRTC (the real device) or a host C++20
// compiler with the execution-model emulator (emu/cuda_emu.hpp). Kernels use only what is
// defined here and CUDA built-ins the emulator provides.
#pragma once

#if defined(__CUDACC__)
// NVRTC: no standard headers; the built-ins are there.
#define ZT_HD __device__ __forceinline__
// Registers a kernel with the emulator; nothing to do on the device.
#define ZT_EXPORT(name)
#define ZT_UNROLL _Pragma("unroll")
#else
#include "emu/cuda_emu.hpp"
#define ZT_HD inline
#define ZT_EXPORT(name) static ::zt_emu::Registrar zt_registrar_##name(#name, &name);
#define ZT_UNROLL
#endif

typedef unsigned char u8;
typedef unsigned int u32;
typedef int i32;
typedef unsigned long long u64;
typedef long long i64;

// The bits of a double (no aliasing through pointers).
#if defined(__CUDACC__)
ZT_HD u64 zt_double_bits(double v) { return (u64)__double_as_longlong(v); }
#else
inline u64 zt_double_bits(double v) {
    u64 b;
    std::memcpy(&b, &v, sizeof b);
    return b;
}
#endif

// Bit patterns of reals and back (non-negative reals order as their bits do), square roots
// (correctly rounded on both: NVRTC's default --prec-sqrt=true).
#if defined(__CUDACC__)
ZT_HD u32 zt_bits(float v) { return __float_as_uint(v); }
ZT_HD u64 zt_bits(double v) { return (u64)__double_as_longlong(v); }
ZT_HD float zt_from_bits(u32 b) { return __uint_as_float(b); }
ZT_HD double zt_from_bits(u64 b) { return __longlong_as_double((i64)b); }
ZT_HD float zt_sqrt(float v) { return sqrtf(v); }
ZT_HD double zt_sqrt(double v) { return sqrt(v); }
#else
inline u32 zt_bits(float v) {
    u32 b;
    std::memcpy(&b, &v, sizeof b);
    return b;
}
inline u64 zt_bits(double v) { return zt_double_bits(v); }
inline float zt_from_bits(u32 b) {
    float v;
    std::memcpy(&v, &b, sizeof v);
    return v;
}
inline double zt_from_bits(u64 b) {
    double v;
    std::memcpy(&v, &b, sizeof v);
    return v;
}
inline float zt_sqrt(float v) { return std::sqrt(v); }
inline double zt_sqrt(double v) { return std::sqrt(v); }
#endif
// The unsigned integer as wide as T, and +infinity in T.
template <class T>
struct ZtBitsOf;
template <>
struct ZtBitsOf<float> {
    typedef u32 type;
    static constexpr u32 inf = 0x7f800000u;
};
template <>
struct ZtBitsOf<double> {
    typedef u64 type;
    static constexpr u64 inf = 0x7ff0000000000000ull;
};
template <class T>
ZT_HD T zt_inf() {
    return zt_from_bits(ZtBitsOf<T>::inf);
}

// Threads per block of every kernel (the launch code uses the same number).
#define ZT_BLOCK 256
#define ZT_WARPS (ZT_BLOCK / 32)
// Launch bounds with at least two blocks per SM: without a minimum, ptxas may aim at full
// occupancy (32 registers) and spill in loop-heavy kernels.
#define ZT_BOUNDS_2 __launch_bounds__(ZT_BLOCK, 2)
