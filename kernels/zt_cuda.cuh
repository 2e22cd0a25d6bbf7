// The one place kernels meet their compiler: NVRTC (the real device) or a host C++20
// compiler with the execution-model emulator (emu/cuda_emu.hpp). Kernels use only what is
// defined here and CUDA built-ins the emulator provides.
#pragma once

#if defined(__CUDACC__)
// NVRTC: no standard headers; the built-ins are there.
#define ZT_HD __device__ __forceinline__
// Registers a kernel with the emulator; nothing to do on the device.
#define ZT_EXPORT(name)
#else
#include "emu/cuda_emu.hpp"
#define ZT_HD inline
#define ZT_EXPORT(name) static ::zt_emu::Registrar zt_registrar_##name(#name, &name);
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

// Threads per block of every kernel (the launch code uses the same number).
#define ZT_BLOCK 256
#define ZT_WARPS (ZT_BLOCK / 32)
