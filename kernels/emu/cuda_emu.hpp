// An emulation of the CUDA execution model on the CPU, for running the kernels in
// kernels/*.cu unchanged where there is no GPU (the device tests in CI).
//
// - Each block's threads are fibers, switched only at synchronisation points (a few
//   instructions on x86-64, where ucontext's switch would make a system call each time;
//   ucontext elsewhere):
//   `__syncthreads` is a real barrier over the block's live threads, `__syncwarp` and the
//   warp collectives one over the warp's. After each barrier the threads resume in a
//   different order (forward, backward, shuffled), so that a read of shared memory that
//   lacks its barrier sees a different writer's state and the tests notice.
// - The blocks of a launch are shared out among a few OS threads (`ZT_EMU_THREADS`, else
//   the machine's hardware threads, at most 8), each running one block at a time, in
//   block order from a shared counter (so a block that waits on a lower one always
//   waits on one that runs). `__shared__` variables are function-local thread-local
//   statics: the block's shared memory. Launches are serialised process-wide.
// - Atomics are real atomics (std::atomic_ref); device memory is host memory.
// - The interleaved schedule (`ZT_EMU_SCHEDULE=interleave`, in builds whose kernels are
//   compiled with `-fsanitize-coverage=trace-loads,trace-stores`: the `cuda-emu-check`
//   feature) also switches threads at every load and store of shared or global memory
//   and at every atomic: each round every ready thread makes one access, in a freshly
//   shuffled order, so a race between two barriers, a lost update of a non-atomic
//   read-modify-write and a missing `__syncwarp` show. The shuffles come from a seed
//   (`ZT_EMU_SEED`, else the clock) that is printed, so a failing order can be replayed
//   (with `ZT_EMU_THREADS=1`, for blocks that race with each other).
// - Warp collectives keep their `_sync` contract: the mask must name every lane of the
//   warp (the kernels only use full-warp collectives), and a lane that has returned may
//   not take part. Either mistake, and a barrier some threads never reach (a deadlock),
//   stop the process with a message.
#pragma once

#include <ucontext.h>

#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
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

#if defined(__x86_64__)
// zt_emu_switch(&from_sp, to_sp): saves the callee-saved registers and the floating-point
// control words on the current stack, stores the stack pointer in *from_sp, and resumes
// the fiber whose stack pointer is to_sp (the System V ABI's callee-saved set).
asm(R"(
    .text
    .globl zt_emu_switch
    .type zt_emu_switch, @function
zt_emu_switch:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    subq $8, %rsp
    stmxcsr (%rsp)
    fnstcw 4(%rsp)
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    ldmxcsr (%rsp)
    fldcw 4(%rsp)
    addq $8, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size zt_emu_switch, .-zt_emu_switch
)");
extern "C" void zt_emu_switch(void** from_sp, void* to_sp);
#define ZT_EMU_FAST_SWITCH 1
#endif

namespace zt_emu {

[[noreturn]] inline void fatal(const char* what) {
    std::fprintf(stderr, "ztree CUDA emulator: %s\n", what);
    std::abort();
}

enum class State { Ready, AtBlock, AtWarp, Done };

struct Fiber {
    ucontext_t ctx;
    void* sp = nullptr;  // the saved stack pointer (fast switch)
    State state = State::Ready;
    uint3 tid{};
    unsigned lane = 0, warp = 0;
    // Depth of the emulator's own code the thread is in (no switch at its accesses there:
    // the barriers' bookkeeping is not made for it).
    unsigned internal = 0;
};

struct Warp {
    unsigned full = 0;     // mask of the lanes this warp has
    unsigned exited = 0;   // lanes that have returned
    unsigned waiting = 0;  // lanes at the warp barrier
    unsigned long long slot[32] = {};
};

// The launch this OS thread runs blocks of (one launch at a time process-wide).
struct Launch {
    std::function<void()> body;  // runs the kernel with its arguments
    uint3 bid{};
    dim3 bdim{}, gdim{};
    std::vector<Fiber> fibers;
    std::vector<Warp> warps;
    char* stacks = nullptr;
    ucontext_t scheduler;
    void* scheduler_sp = nullptr;
    unsigned current = 0, live = 0, at_block = 0;
    // A fiber runs (not the scheduler).
    bool in_fiber = false;
};
inline thread_local Launch* g_launch = nullptr;

// The interleaved schedule (see the top of the file): on, and its seed.
struct Schedule {
    bool interleave = false;
    unsigned long long seed = 0;
};
inline const Schedule& schedule() {
    static const Schedule s = [] {
        Schedule s;
        const char* m = std::getenv("ZT_EMU_SCHEDULE");
        s.interleave = m && std::strcmp(m, "interleave") == 0;
        const char* e = std::getenv("ZT_EMU_SEED");
        s.seed = e ? std::strtoull(e, nullptr, 10) : (unsigned long long)std::time(nullptr);
        if (s.interleave) std::fprintf(stderr, "ztree CUDA emulator: interleaved schedule, seed %llu (ZT_EMU_SEED=%llu replays it)\n", s.seed, s.seed);
        return s;
    }();
    return s;
}

inline Fiber& me();

// The emulator's own code inside a fiber: no switch at its accesses.
struct Internal {
    Internal() {
        if (g_launch && g_launch->in_fiber) me().internal++;
    }
    ~Internal() {
        if (g_launch && g_launch->in_fiber) me().internal--;
    }
};

constexpr std::size_t STACK = 64 * 1024;

// Fiber stacks for the largest block, allocated once per OS thread and never cleared
// (pages are touched only as deep as the kernels go).
inline char* fiber_stacks() {
    static thread_local std::unique_ptr<char[]> stacks(new char[1024 * STACK]);
    return stacks.get();
}

inline Fiber& me() { return g_launch->fibers[g_launch->current]; }
inline Warp& my_warp() { return g_launch->warps[me().warp]; }

// Back to the scheduler until the barrier this fiber waits at opens.
inline void yield() {
    Fiber& f = me();
#if ZT_EMU_FAST_SWITCH
    zt_emu_switch(&f.sp, g_launch->scheduler_sp);
#else
    if (swapcontext(&f.ctx, &g_launch->scheduler) != 0) fatal("swapcontext failed");
#endif
}

// A memory access of a kernel thread at `addr` (the interleaved schedule's switch point):
// back to the scheduler, ready to run, unless the access is to the thread's own stack or
// made by the emulator itself.
inline void access(const void* addr) {
    Launch* L = g_launch;
    if (!L || !L->in_fiber || !schedule().interleave) return;
    Fiber& f = me();
    if (f.internal != 0) return;
    const char* a = static_cast<const char*>(addr);
    if (a >= L->stacks && a < L->stacks + L->fibers.size() * STACK) return;
    f.internal++;
    yield();
    f.internal--;
}

inline void block_barrier() {
    Internal in;
    me().state = State::AtBlock;
    g_launch->at_block++;
    yield();
}

inline void warp_barrier() {
    Internal in;
    Warp& w = my_warp();
    me().state = State::AtWarp;
    w.waiting |= 1u << me().lane;
    yield();
}

inline void check_mask(const Warp& w, unsigned mask) {
    if (mask != w.full) fatal("a warp collective was called with a mask other than the whole warp");
}
inline void check_alive(const Warp& w) {
    if (w.exited != 0) fatal("a warp collective waited on a lane that had returned");
}

// One exchange round: every lane publishes `v`, then reads what `f` makes of the slots.
template <class R, class F>
R warp_round(unsigned mask, unsigned long long v, F f) {
    Internal in;
    Warp& w = my_warp();
    check_mask(w, mask);
    check_alive(w);
    w.slot[me().lane] = v;
    warp_barrier();
    check_alive(w);
    R r = f(w);
    warp_barrier();
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

inline void fiber_main() {
    g_launch->body();
    Internal in;
    Fiber& f = me();
    Warp& w = my_warp();
    f.state = State::Done;
    w.exited |= 1u << f.lane;
    g_launch->live--;
    // uc_link returns to the scheduler (ucontext); the fast switch's fibers switch back
    // in fiber_entry.
}

#if ZT_EMU_FAST_SWITCH
// Where a new fiber starts: its thread's whole life, then back to the scheduler for good.
inline void fiber_entry() {
    fiber_main();
    zt_emu_switch(&me().sp, g_launch->scheduler_sp);
    fatal("a finished fiber was resumed");
}
#endif

// Runs one block to completion: fibers in a varying order, barriers opened when every
// live thread (of the block, or of the warp) waits at them.
inline void init_fiber(Launch& L, unsigned t) {
    Fiber& f = L.fibers[t];
    f.state = State::Ready;
#if ZT_EMU_FAST_SWITCH
    // A stack as zt_emu_switch leaves it: control words, six registers, the return address
    // (fiber_entry, entered with the stack pointer 8 below a 16-byte boundary, as after a call).
    unsigned long long* top = reinterpret_cast<unsigned long long*>(L.stacks + (t + 1) * STACK);
    unsigned long long* sp = top - 9;
    unsigned mxcsr = __builtin_ia32_stmxcsr();
    unsigned short fpucw;
    asm volatile("fnstcw %0" : "=m"(fpucw));
    sp[0] = (unsigned long long)mxcsr | (unsigned long long)fpucw << 32;
    for (int i = 1; i <= 6; ++i) sp[i] = 0;
    sp[7] = reinterpret_cast<unsigned long long>(&fiber_entry);
    sp[8] = 0;
    f.sp = sp;
    return;
#endif
    if (getcontext(&f.ctx) != 0) fatal("getcontext failed");
    f.ctx.uc_stack.ss_sp = L.stacks + t * STACK;
    f.ctx.uc_stack.ss_size = STACK;
    f.ctx.uc_link = &L.scheduler;
    makecontext(&f.ctx, fiber_main, 0);
}

inline void run_block(Launch& L, unsigned nt, unsigned round_seed) {
    for (unsigned t = 0; t < nt; ++t) init_fiber(L, t);
    for (unsigned w = 0; w < L.warps.size(); ++w) {
        unsigned lanes = nt - 32 * w < 32 ? nt - 32 * w : 32;
        L.warps[w] = Warp{};
        L.warps[w].full = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
    }
    L.live = nt;
    L.at_block = 0;
    std::vector<unsigned> order(nt);
    const bool interleave = schedule().interleave;
    unsigned long long rng = 0x9e3779b97f4a7c15ull ^ round_seed ^ (interleave ? schedule().seed * 0xd6e8feb86659fd93ull : 0);
    while (L.live > 0) {
        for (unsigned t = 0; t < nt; ++t) order[t] = t;
        rng = rng * 6364136223846793005ull + 1442695040888963407ull;
        // Forward, backward or shuffled, drawn per round (always shuffled when interleaved).
        unsigned mode = interleave ? 2 : (rng >> 40) % 3;
        if (mode == 1) {
            for (unsigned t = 0; t < nt / 2; ++t) std::swap(order[t], order[nt - 1 - t]);
        } else if (mode == 2) {
            for (unsigned t = nt; t > 1; --t) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                std::swap(order[t - 1], order[(rng >> 33) % t]);
            }
        }
        bool ran = false;
        for (unsigned t : order) {
            if (L.fibers[t].state != State::Ready) continue;
            L.current = t;
            ran = true;
            L.in_fiber = true;
#if ZT_EMU_FAST_SWITCH
            zt_emu_switch(&L.scheduler_sp, L.fibers[t].sp);
#else
            if (swapcontext(&L.scheduler, &L.fibers[t].ctx) != 0) fatal("swapcontext failed");
#endif
            L.in_fiber = false;
        }
        // Open the barriers every live participant has reached.
        bool opened = false;
        for (unsigned w = 0; w < L.warps.size(); ++w) {
            Warp& wp = L.warps[w];
            unsigned alive = wp.full & ~wp.exited;
            if (wp.waiting != 0 && wp.waiting == alive) {
                for (unsigned l = 0; l < 32; ++l)
                    if (wp.waiting >> l & 1) L.fibers[32 * w + l].state = State::Ready;
                wp.waiting = 0;
                opened = true;
            }
        }
        if (L.at_block != 0 && L.at_block == L.live) {
            for (unsigned t = 0; t < nt; ++t)
                if (L.fibers[t].state == State::AtBlock) L.fibers[t].state = State::Ready;
            L.at_block = 0;
            opened = true;
        }
        if (!ran && !opened && L.live > 0) fatal("deadlock: threads wait at barriers that others never reach (divergent __syncthreads or warp collective)");
    }
}

// How many OS threads run the blocks of a launch: `ZT_EMU_THREADS` when set (>= 1),
// else the hardware threads, at most 8.
inline unsigned block_threads() {
    static const unsigned n = [] {
        if (const char* e = std::getenv("ZT_EMU_THREADS")) {
            long v = std::strtol(e, nullptr, 10);
            if (v >= 1) return unsigned(v < 64 ? v : 64);
        }
        unsigned h = std::thread::hardware_concurrency();
        return h == 0 ? 1u : (h < 8 ? h : 8u);
    }();
    return n;
}

// Runs `grid` blocks of `block` threads; 0, or 1 for an unknown kernel, 2 for bad sizes.
inline int launch(const char* name, dim3 grid, dim3 block, void** args) {
    auto it = registry().find(name);
    if (it == registry().end()) return 1;
    unsigned nt = block.x * block.y * block.z, nb = grid.x * grid.y * grid.z;
    if (nt == 0 || nt > 1024) return 2;
    if (nb == 0) return 0;
    static std::mutex serial;
    static unsigned launches = 0;
    std::lock_guard<std::mutex> lock(serial);
    const Entry& entry = it->second;
    const unsigned seed = launches * 7919u;
    std::atomic<unsigned> next{0};
    // One OS thread's share: blocks taken in order until none is left. Each block's
    // resume orders come from its own seed, whichever thread runs it.
    auto work = [&] {
        Launch L;
        L.body = [&] { entry(args); };
        L.bdim = block;
        L.gdim = grid;
        L.fibers.resize(nt);
        L.warps.resize((nt + 31) / 32);
        L.stacks = fiber_stacks();
        for (unsigned t = 0; t < nt; ++t) {
            L.fibers[t].tid = uint3{t % block.x, t / block.x % block.y, t / (block.x * block.y)};
            L.fibers[t].lane = t % 32;
            L.fibers[t].warp = t / 32;
        }
        g_launch = &L;
        for (unsigned b = next.fetch_add(1); b < nb; b = next.fetch_add(1)) {
            L.bid = uint3{b % grid.x, b / grid.x % grid.y, b / (grid.x * grid.y)};
            run_block(L, nt, seed + b);
        }
        g_launch = nullptr;
    };
    unsigned helpers = (nb < block_threads() ? nb : block_threads()) - 1;
    std::vector<std::thread> pool;
    pool.reserve(helpers);
    for (unsigned h = 0; h < helpers; ++h) pool.emplace_back(work);
    work();
    for (auto& t : pool) t.join();
    launches++;
    return 0;
}

}  // namespace zt_emu

// The switch points of the interleaved schedule: SanitizerCoverage's callbacks at every
// load and store of the instrumented kernels (the `cuda-emu-check` build; this header is
// on its ignore list, so the emulator's own code calls none of them).
#if defined(ZT_EMU_INSTRUMENTED)
extern "C" {
void __sanitizer_cov_load1(unsigned char* a) { ::zt_emu::access(a); }
void __sanitizer_cov_load2(unsigned short* a) { ::zt_emu::access(a); }
void __sanitizer_cov_load4(unsigned* a) { ::zt_emu::access(a); }
void __sanitizer_cov_load8(unsigned long long* a) { ::zt_emu::access(a); }
void __sanitizer_cov_load16(__int128* a) { ::zt_emu::access(a); }
void __sanitizer_cov_store1(unsigned char* a) { ::zt_emu::access(a); }
void __sanitizer_cov_store2(unsigned short* a) { ::zt_emu::access(a); }
void __sanitizer_cov_store4(unsigned* a) { ::zt_emu::access(a); }
void __sanitizer_cov_store8(unsigned long long* a) { ::zt_emu::access(a); }
void __sanitizer_cov_store16(__int128* a) { ::zt_emu::access(a); }
}
#endif

// ---- the CUDA names the kernels use ----

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static thread_local
#define __restrict__ __restrict
#define __launch_bounds__(...)
#define __maxnreg__(...)
#define threadIdx (::zt_emu::me().tid)
#define blockIdx (::zt_emu::g_launch->bid)
#define blockDim (::zt_emu::g_launch->bdim)
#define gridDim (::zt_emu::g_launch->gdim)
#define warpSize 32

inline void __syncthreads() { ::zt_emu::block_barrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
    ::zt_emu::check_mask(::zt_emu::my_warp(), mask);
    ::zt_emu::warp_barrier();
}
inline void __threadfence() { std::atomic_thread_fence(std::memory_order_seq_cst); }
inline void __threadfence_block() { std::atomic_thread_fence(std::memory_order_seq_cst); }

template <class T>
T __shfl_sync(unsigned mask, T v, int src, int width = 32) {
    unsigned lane = ::zt_emu::me().lane;
    return ::zt_emu::shfl_from(mask, v, (lane & ~unsigned(width - 1)) + (unsigned(src) & unsigned(width - 1)));
}
template <class T>
T __shfl_up_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    unsigned lane = ::zt_emu::me().lane;
    return ::zt_emu::shfl_from(mask, v, (lane & unsigned(width - 1)) >= delta ? lane - delta : lane);
}
template <class T>
T __shfl_down_sync(unsigned mask, T v, unsigned delta, int width = 32) {
    unsigned lane = ::zt_emu::me().lane;
    return ::zt_emu::shfl_from(mask, v, (lane & unsigned(width - 1)) + delta < unsigned(width) ? lane + delta : lane);
}
template <class T>
T __shfl_xor_sync(unsigned mask, T v, int lane_mask, int width = 32) {
    unsigned lane = ::zt_emu::me().lane;
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

// Every atomic is a switch point of the interleaved schedule (before it; the operation
// itself is indivisible).
template <class T>
T atomicAdd(T* a, T v) {
    ::zt_emu::access(a);
    return std::atomic_ref<T>(*a).fetch_add(v);
}
template <class T>
T atomicSub(T* a, T v) {
    ::zt_emu::access(a);
    return std::atomic_ref<T>(*a).fetch_sub(v);
}
template <class T>
T atomicExch(T* a, T v) {
    ::zt_emu::access(a);
    return std::atomic_ref<T>(*a).exchange(v);
}
template <class T>
T atomicOr(T* a, T v) {
    ::zt_emu::access(a);
    return std::atomic_ref<T>(*a).fetch_or(v);
}
template <class T>
T atomicAnd(T* a, T v) {
    ::zt_emu::access(a);
    return std::atomic_ref<T>(*a).fetch_and(v);
}
template <class T>
T atomicCAS(T* a, T expected, T desired) {
    ::zt_emu::access(a);
    std::atomic_ref<T>(*a).compare_exchange_strong(expected, desired);
    return expected;  // the old value either way
}
template <class T>
T atomicMin(T* a, T v) {
    ::zt_emu::access(a);
    std::atomic_ref<T> r(*a);
    T old = r.load();
    while (v < old && !r.compare_exchange_weak(old, v)) {
    }
    return old;
}
template <class T>
T atomicMax(T* a, T v) {
    ::zt_emu::access(a);
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
