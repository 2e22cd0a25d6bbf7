// An emulation of the CUDA execution model on the CPU, for running the kernels in
// kernels/*.cu unchanged where there is no GPU (the device tests in CI).
//
// - Each block's threads are real OS threads running concurrently; `__syncthreads` is a
//   real barrier over the block's live threads, `__syncwarp` and the warp intrinsics one
//   over the warp's. Blocks of a launch run one after another on the same threads, so
//   `__shared__` variables (function-local statics here) are the block's shared memory.
// - Atomics are real atomics (std::atomic_ref); device memory is host memory.
// - Warp intrinsics keep their `_sync` contract: the mask must name every lane of the
//   warp (the kernels only use full-warp collectives), and a lane that has returned may
//   not take part; either mistake stops the process with a message.
// - Launches are serialised process-wide (shared statics are per kernel, not per launch).
#pragma once

#include <atomic>
#include <barrier>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <type_traits>
#include <utility>
#include <vector>

struct uint3 {
    unsigned x, y, z;
};
struct dim3 {
    unsigned x = 1, y = 1, z = 1;
};

namespace zt_emu {

[[noreturn]] inline void fatal(const char* what) {
    std::fprintf(stderr, "ztree CUDA emulator: %s\n", what);
    std::abort();
}

struct Warp {
    std::unique_ptr<std::barrier<>> bar;
    unsigned full = 0;                // mask of the lanes this warp has
    std::atomic<unsigned> exited{0};  // lanes that have returned
    unsigned long long slot[32] = {};
};

struct Block {
    std::unique_ptr<std::barrier<>> bar;
    std::unique_ptr<Warp[]> warps;
    void reset(unsigned threads) {
        bar = std::make_unique<std::barrier<>>(threads);
        unsigned nw = (threads + 31) / 32;
        warps = std::make_unique<Warp[]>(nw);
        for (unsigned w = 0; w < nw; ++w) {
            unsigned lanes = threads - 32 * w < 32 ? threads - 32 * w : 32;
            warps[w].bar = std::make_unique<std::barrier<>>(lanes);
            warps[w].full = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        }
    }
};

struct ThreadState {
    uint3 tid{}, bid{};
    dim3 bdim{}, gdim{};
    Block* block = nullptr;
    unsigned lane = 0, warp = 0;
};
inline thread_local ThreadState ts;

inline Warp& my_warp() { return ts.block->warps[ts.warp]; }

inline void check_mask(const Warp& w, unsigned mask) {
    if (mask != w.full) fatal("a warp collective was called with a mask other than the whole warp");
}
inline void check_alive(const Warp& w) {
    if (w.exited.load() != 0) fatal("a warp collective waited on a lane that had returned");
}

// One exchange round: every lane publishes `v`, then reads what `f` makes of the slots.
template <class R, class F>
R warp_round(unsigned mask, unsigned long long v, F f) {
    Warp& w = my_warp();
    check_mask(w, mask);
    w.slot[ts.lane] = v;
    w.bar->arrive_and_wait();
    check_alive(w);
    R r = f(w);
    w.bar->arrive_and_wait();
    return r;
}

template <class T>
unsigned long long to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp shuffles of at most 8 bytes");
    unsigned long long b = 0;
    std::memcpy(&b, &v, sizeof(T));
    return b;
}
template <class T>
T from_bits(unsigned long long b) {
    T v;
    std::memcpy(&v, &b, sizeof(T));
    return v;
}

template <class T>
T shfl_from(unsigned mask, T v, unsigned src) {
    return warp_round<T>(mask, to_bits(v), [&](Warp& w) { return from_bits<T>(w.slot[src & 31]); });
}

using Entry = std::function<void(void**)>;
inline std::map<std::string, Entry>& registry() {
    static std::map<std::string, Entry> r;
    return r;
}

template <class... A, std::size_t... I>
void call(void (*f)(A...), void** args, std::index_sequence<I...>) {
    f(*static_cast<std::remove_cv_t<std::remove_reference_t<A>>*>(args[I])...);
}

// Created next to each kernel by ZT_EXPORT: makes the kernel launchable by name.
struct Registrar {
    template <class... A>
    Registrar(const char* name, void (*f)(A...)) {
        registry()[name] = [f](void** args) { call(f, args, std::index_sequence_for<A...>{}); };
    }
};

// Runs `grid` blocks of `block` threads; 0, or 1 for an unknown kernel, 2 for bad sizes.
inline int launch(const char* name, dim3 grid, dim3 block, void** args) {
    auto it = registry().find(name);
    if (it == registry().end()) return 1;
    unsigned nt = block.x * block.y * block.z, nb = grid.x * grid.y * grid.z;
    if (nt == 0 || nt > 1024) return 2;
    if (nb == 0) return 0;
    static std::mutex serial;
    std::lock_guard<std::mutex> lock(serial);
    const Entry& entry = it->second;
    Block state;
    std::barrier<> pool(nt);
    auto worker = [&](unsigned t) {
        for (unsigned b = 0; b < nb; ++b) {
            if (t == 0) state.reset(nt);
            pool.arrive_and_wait();
            ts.tid = uint3{t % block.x, t / block.x % block.y, t / (block.x * block.y)};
            ts.bid = uint3{b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y)};
            ts.bdim = block;
            ts.gdim = grid;
            ts.block = &state;
            ts.lane = t % 32;
            ts.warp = t / 32;
            entry(args);
            // A returned thread no longer holds up the others' barriers.
            Warp& w = my_warp();
            w.exited.fetch_or(1u << ts.lane);
            w.bar->arrive_and_drop();
            state.bar->arrive_and_drop();
            pool.arrive_and_wait();
        }
    };
    std::vector<std::thread> threads;
    threads.reserve(nt);
    for (unsigned t = 0; t < nt; ++t) threads.emplace_back(worker, t);
    for (auto& th : threads) th.join();
    return 0;
}

}  // namespace zt_emu

// ---- the CUDA names the kernels use ----

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define threadIdx (::zt_emu::ts.tid)
#define blockIdx (::zt_emu::ts.bid)
#define blockDim (::zt_emu::ts.bdim)
#define gridDim (::zt_emu::ts.gdim)
#define warpSize 32

inline void __syncthreads() { ::zt_emu::ts.block->bar->arrive_and_wait(); }
inline int __syncthreads_or(int p) {
    static std::atomic<int> any;  // one block at a time: a block-wide flag
    __syncthreads();
    if (p) any.store(1);
    __syncthreads();
    int r = any.load();
    __syncthreads();
    if (threadIdx.x == 0 && threadIdx.y == 0 && threadIdx.z == 0) any.store(0);
    __syncthreads();
    return r;
}
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    auto& w = ::zt_emu::my_warp();
    ::zt_emu::check_mask(w, mask);
    w.bar->arrive_and_wait();
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    unsigned lane = ::zt_emu::ts.lane;
    return ::zt_emu::shfl_from(mask, v, (lane & ~unsigned(width - 1)) + (unsigned(src) & unsigned(width - 1)));
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    unsigned lane = ::zt_emu::ts.lane;
    return ::zt_emu::shfl_from(mask, v, (lane & unsigned(width - 1)) >= delta ? lane - delta : lane);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    unsigned lane = ::zt_emu::ts.lane;
    return ::zt_emu::shfl_from(mask, v, (lane & unsigned(width - 1)) + delta < unsigned(width) ? lane + delta : lane);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    unsigned lane = ::zt_emu::ts.lane;
    unsigned src = lane ^ unsigned(lane_mask);
    return ::zt_emu::shfl_from(mask, v, (src & ~unsigned(width - 1)) == (lane & ~unsigned(width - 1)) ? src : lane);
}
inline unsigned __ballot_sync(unsigned mask, int pred) {
    return ::zt_emu::warp_round<unsigned>(mask, pred != 0, [](::zt_emu::Warp& w) {
        unsigned r = 0;
        for (unsigned l = 0; l < 32; ++l)
            if ((w.full >> l & 1) && w.slot[l]) r |= 1u << l;
        return r;
    });
}
inline int __any_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) != 0; }
inline int __all_sync(unsigned mask, int pred) { return __ballot_sync(mask, pred) == mask; }
template <class T>
unsigned __match_any_sync(unsigned mask, T v) {
    unsigned long long b = ::zt_emu::to_bits(v);
    return ::zt_emu::warp_round<unsigned>(mask, b, [b](::zt_emu::Warp& w) {
        unsigned r = 0;
        for (unsigned l = 0; l < 32; ++l)
            if ((w.full >> l & 1) && w.slot[l] == b) r |= 1u << l;
        return r;
    });
}

template <class T>
T atomicAdd(T* a, T v) { return std::atomic_ref<T>(*a).fetch_add(v); }
template <class T>
T atomicSub(T* a, T v) { return std::atomic_ref<T>(*a).fetch_sub(v); }
template <class T>
T atomicExch(T* a, T v) { return std::atomic_ref<T>(*a).exchange(v); }
template <class T>
T atomicOr(T* a, T v) { return std::atomic_ref<T>(*a).fetch_or(v); }
template <class T>
T atomicAnd(T* a, T v) { return std::atomic_ref<T>(*a).fetch_and(v); }
template <class T>
T atomicCAS(T* a, T expected, T desired) {
    std::atomic_ref<T>(*a).compare_exchange_strong(expected, desired);
    return expected;  // the old value either way
}
template <class T>
T atomicMin(T* a, T v) {
    std::atomic_ref<T> r(*a);
    T old = r.load();
    while (v < old && !r.compare_exchange_weak(old, v)) {
    }
    return old;
}
template <class T>
T atomicMax(T* a, T v) {
    std::atomic_ref<T> r(*a);
    T old = r.load();
    while (old < v && !r.compare_exchange_weak(old, v)) {
    }
    return old;
}

inline int __popc(unsigned x) { return __builtin_popcount(x); }
inline int __popcll(unsigned long long x) { return __builtin_popcountll(x); }
inline int __clz(int x) { return x == 0 ? 32 : __builtin_clz(unsigned(x)); }
inline int __clzll(long long x) { return x == 0 ? 64 : __builtin_clzll((unsigned long long)x); }
inline int __ffs(int x) { return __builtin_ffs(x); }
template <class T>
T __ldg(const T* p) { return *p; }
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline double __dadd_rn(double a, double b) { return a + b; }
inline double __dsub_rn(double a, double b) { return a - b; }
inline double __dmul_rn(double a, double b) { return a * b; }
