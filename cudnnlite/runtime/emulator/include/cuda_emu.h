// cuda_emu.h — the device side of the CUDA language for g++, so that a kernel source
// written for NVRTC runs unchanged on the CPU (cudnnlite's emulator backend).
//
// Force-included (`g++ -include cuda_emu.h`) before the kernel source. This file is
// the execution model's interface to kernels; emu_runtime.cpp is its implementation
// (fibers, scheduler, rendezvous, launch), compiled once per set of build flags and
// linked into every module; emu_types.h holds the value types, math and atomics.
//
// Execution model
//  - A launch runs its blocks in parallel on OpenMP threads; a block never moves
//    between OS threads, so `__shared__` is `static thread_local` storage.
//  - Each CUDA thread of a block is a fiber with its own stack, switched by a
//    hand-written register swap (x86-64 / AArch64; ucontext elsewhere, slower).
//  - A block starts in "plain" mode: one fiber runs the threads one after another.
//    The first barrier or warp operation converts the block to fiber mode; the
//    threads not yet started then get fibers of their own.
//  - __syncthreads counts arrivals of live threads (exited threads no longer
//    count). Arrivals from two different call sites in one round are a divergent
//    barrier: an error, never a hang. A block whose fibers all wait with no
//    possible progress is a deadlock: an error naming what each thread waits on.
//  - Warp operations (shuffles, votes, __syncwarp, wmma, mma.sync, ldmatrix) meet
//    in a per-warp rendezvous keyed by mask. Every lane the mask names must execute
//    the operation: a mask naming a lane absent from the warp (a partial warp, when
//    the block size is not a multiple of 32) or a lane that has exited — before the
//    operation, or while the others wait in it — is undefined behaviour on a GPU and
//    an error here (check_warp_mask, warp_lane_exits). __activemask has no mask.
//    __match_any/all_sync and __reduce_*_sync take part in the same rendezvous.
//  - Dynamic shared memory: declare it with DYNAMIC_SHARED(T, name) (see
//    cuda_src/common/cudnnlite.cuh); a plain `extern __shared__` is refused by the
//    launcher with a message pointing there.
//  - Checks mode (CUDNNLITE_EMU_POISON): shared memory, static and dynamic, is
//    filled with 0xFF bytes (a NaN in every float format) at each block start.
//  - Schedule (CUDNNLITE_EMU_SCHEDULE=forward|reverse|random) orders the threads.
//  - Tensor cores: nvcuda::wmma (emu_wmma.h) and the PTX-level layer of
//    cuda_src/common/mma.cuh (mma.sync, ldmatrix, cp.async; emu_mma.h), exact to the
//    PTX ISA's per-lane fragment layouts.
//  - Cooperative launches (LaunchConfig::cooperative) run every block at once, each
//    on its own OS thread, at most kMaxCooperativeBlocks blocks (and
//    kMaxCooperativeThreads CUDA threads) per grid. cl::grid_sync
//    (cuda_src/common/grid_sync.cuh) is then a grid-wide barrier: a block barrier,
//    then an OS-level barrier across the blocks. A block that exits while others
//    wait at grid_sync, a grid_sync outside a cooperative launch, a target off the
//    (k + 1) * num_blocks rule or a counter not zeroed are errors, never hangs.
//  - Not modelled: inline PTX (asm) — mma.cuh and cl::math::exp2_ftz (cudnnlite.cuh)
//    are its sanctioned users, routed to emu_mma.h / plain C++ here; other kernels keep
//    a portable path under CUDNNLITE_EMULATOR; texture/surface objects; the
//    cooperative_groups header (grid_sync.cuh covers the grid barrier).
#pragma once

// Before the CUDA keywords below: libstdc++'s threading headers spell
// __attribute__((__noinline__)), which the __noinline__ macro would break.
#include <condition_variable>
#include <mutex>

#define CUDNNLITE_EMULATOR 1

#define __global__
#define __device__
#define __host__
#define __noinline__ __attribute__((noinline))
#define __forceinline__ inline __attribute__((always_inline))
#define __launch_bounds__(...)
#define __align__(n) __attribute__((aligned(n)))
#define __constant__ static
#define __shared__ static thread_local
#define __managed__
// `__restrict__` is a g++ keyword already.

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <algorithm>
#include <atomic>
#include <cassert>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <dlfcn.h>
#include <link.h>
#include <new>
#include <random>
#include <string>
#include <sys/mman.h>
#include <tuple>
#include <type_traits>
#include <utility>
#include <vector>

#if !defined(__x86_64__) && !defined(__aarch64__)
#include <ucontext.h>
#define EMU_UCONTEXT 1
#endif

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define EMU_ASAN 1
#endif

#include "emu_types.h"

// ---------------------------------------------------------------- OpenMP shims
#if defined(_OPENMP)
#include <omp.h>
inline int omp_default_threads() { return omp_get_max_threads(); }
#else
inline int omp_default_threads() { return 1; }
inline int omp_get_num_threads() { return 1; }
inline int omp_get_thread_num() { return 0; }
#endif


namespace emu {

// ---------------------------------------------------------------- launch config
// Filled by the Python launcher (ctypes mirror in emulator/launcher.py).
struct LaunchConfig {
    unsigned grid[3];
    unsigned block[3];
    unsigned long long shared_bytes;  // dynamic shared memory per block
    int schedule;                     // 0 forward, 1 reverse, 2 random
    int poison;                       // fill shared memory with 0xFF at block start
    int num_threads;                  // OS threads; 0 = OpenMP default
    unsigned long long seed;          // for the random schedule
    unsigned long long stack_bytes;   // per fiber
    int cooperative;                  // all blocks co-resident (grid_sync allowed)
};

enum Schedule { kForward = 0, kReverse = 1, kRandom = 2 };

// ---------------------------------------------------------------- errors
// The first error of a launch wins; other blocks stop as soon as they see it.
struct ErrorSlot {
    std::atomic<int> set{0};
    char message[4096];
};
inline ErrorSlot g_error;

inline bool launch_failed() { return g_error.set.load(std::memory_order_relaxed) != 0; }

inline void record_error(const std::string& msg) {
    int expected = 0;
    if (g_error.set.compare_exchange_strong(expected, 1)) {
        snprintf(g_error.message, sizeof g_error.message, "%s", msg.c_str());
    }
}

struct Fiber;
struct Worker;
struct Block;
extern "C" void emu_fiber_main(Fiber* f);

enum class State : int { kRunnable, kBarrier, kWarp, kDone };

struct Site {
    const char* file = nullptr;
    int line = 0;
    const char* what = "";
    bool same(const Site& o) const { return line == o.line && file == o.file; }
};

// A pending warp operation: the lanes of `mask` meet here.
enum class WarpOp : int {
    kNone, kShfl, kShflUp, kShflDown, kShflXor, kBallot, kAny, kAll, kSync, kActive, kTensor,
    kMatchAny, kMatchAll,  // __match_any_sync / __match_all_sync (bit patterns compared)
    kReduce                // __reduce_<op>_sync; the lane's param is a ReduceKind
};

// __reduce_*_sync operations (redux.sync), in a warp exchange's param.
enum ReduceKind : int { kRedAdd, kRedMinS, kRedMaxS, kRedMinU, kRedMaxU, kRedAnd, kRedOr, kRedXor };

struct WarpGroup {
    bool used = false;
    WarpOp op = WarpOp::kNone;
    unsigned mask = 0;
    unsigned arrived = 0;
    Site site;
};

struct Warp {
    unsigned present = 0;  // lanes that exist (a partial last warp has fewer than 32)
    unsigned live = 0;     // lanes that exist and have not exited
    WarpGroup groups[32];
    // Per-lane operands and results of the current exchange.
    unsigned long long value[32];
    int param[32];
    int width[32];
    unsigned long long result[32];
    // Operands of a tensor-core operation (emu_mma.h): one pointer per lane.
    const void* slot[32];
};

// cp.async copies a thread has issued and not yet completed (emu_mma.h).
struct PendingCopy {
    unsigned char* dst;
    unsigned char data[16];
    int bytes;
    long long group;  // -1 until committed
};

// A wgmma.mma_async a thread has issued and not yet waited for (emu_mma.h): its result,
// written to d at the wait, and what recomputes it there (the shared memory it read must
// not change before the wait).
struct PendingWgmma {
    float* d;                  // the thread's accumulator registers
    int count;                 // N / 2 of m64nNk16
    int kind;                  // emu::tc::Kind
    bool accumulate;           // scale-d: d = A * B + d (else A * B)
    unsigned long long a, b;   // matrix descriptors
    long long group;           // -1 until committed
    float c[128];              // d at issue
    float result[128];
};

struct Fiber {
    void* sp = nullptr;
    Worker* owner = nullptr;      // the OS thread's worker: saves a TLS lookup per switch
    char* stack = nullptr;        // lowest usable address
    size_t stack_size = 0;
    uint3 tid;                    // threadIdx of the CUDA thread it runs
    int linear = 0;
    State state = State::kRunnable;
    Site waiting_at;              // for deadlock reports
    bool plain = false;           // runs the plain loop over threads
    bool ping = false;            // switch-cost benchmark: yields forever
    int bar_result = 0;           // predicate count of the barrier round it left
    int bar_total = 0;            // threads of that round
    std::vector<PendingCopy> copies;  // cp.async in flight, issue order
    long long copy_groups = 0;        // cp.async groups committed so far
    std::vector<PendingWgmma> wgmmas; // wgmma.mma_async in flight, issue order
    long long wgmma_groups = 0;       // wgmma groups committed so far
    bool wgmma_fenced = false;        // a wgmma.fence since the last wait_group (or start)
    bool copies_unfenced = false;     // cp.async data landed since its last fence.proxy.async
    unsigned grid_syncs = 0;          // grid_sync calls this thread has passed
#if defined(EMU_UCONTEXT)
    ucontext_t uc;
#endif
};

using KernelThunk = void (*)(void* const* args, const void* kfn);

// Per OS thread: the block it runs, its fibers and their stacks (kept between
// blocks and launches).
struct Worker {
    void* sched_sp = nullptr;
#if defined(EMU_UCONTEXT)
    ucontext_t sched_uc;
#endif
    Fiber* current = nullptr;
    std::vector<Fiber*> pool;
    size_t stack_bytes = 0;

    // The current block.
    uint3 block_idx;
    dim3 block_dim, grid_dim;
    int nthreads = 0;
    const LaunchConfig* cfg = nullptr;
    KernelThunk thunk = nullptr;
    const void* kfn = nullptr;
    void* const* args = nullptr;
    std::vector<int> order;       // thread start order
    int next_plain = 0;           // next index into `order` for the plain loop
    bool fiber_mode = false;
    int fibers_used = 0;
    int live = 0;
    int done = 0;
    bool aborted = false;
    std::vector<Fiber*> ready;    // runnable fibers for the next round
    std::vector<Fiber*> round;    // the current round, in schedule order
    size_t round_pos = 0;
    std::vector<Fiber*> by_thread;
    // Barrier round.
    int bar_arrived = 0;
    Site bar_site;
    int bar_count = 0;            // __syncthreads_count/and/or accumulator
    unsigned grid_syncs = 0;      // grid barriers this block has passed
    std::vector<Warp> warps;
    // Dynamic shared memory.
    unsigned char* dyn_smem = nullptr;
    size_t dyn_smem_cap = 0;
    // This OS thread's block of the module's TLS (its __shared__ storage), found on first
    // use by the shared-memory address checks of emu_mma.h.
    char* tls_start = nullptr;
    size_t tls_size = 0;
    std::mt19937_64 rng;
    void* race = nullptr;  // race-check state (emu_racecheck.h), race-check builds only
};

// The only thread_local of the emulator itself; every other TLS byte of a kernel
// module is __shared__ storage (the poisoning in emu_runtime.cpp relies on that).
inline thread_local Worker* t_worker = nullptr;

inline Worker& worker() { return *t_worker; }

[[noreturn]] void fail(const std::string& msg);

std::string thread_name(const uint3& t);
std::string site_name(const Site& s);

#include "emu_racecheck.h"

void convert_to_fiber_mode(Worker& w);

// The block's threads: a warp op or barrier from the plain loop converts the block.
Fiber* current_fiber(const char* what);

template <typename T>
inline unsigned long long to_bits(T v) {
    static_assert(sizeof(T) <= 8, "warp exchange of values wider than 8 bytes");
    unsigned long long b = 0;
    memcpy(&b, &v, sizeof(T));
    return b;
}

template <typename T>
inline T from_bits(unsigned long long b) {
    T v;
    memcpy(&v, &b, sizeof(T));
    return v;
}

std::string hex(unsigned v);  // "0x%08x"

// One lane arrives at a warp operation; returns its result once every live lane of
// the mask has arrived. `name` overrides the operation's name in reports; lanes meet
// only at the same name.
unsigned long long warp_exchange(WarpOp op, unsigned mask, unsigned long long value, int param,
                                 int width, const char* file, int line,
                                 const char* name = nullptr);

// ---------------------------------------------------------------- barrier
enum class BarrierKind : int { kSync, kCount, kAnd, kOr };

int barrier_arrive(BarrierKind kind, int predicate, const char* file, int line, const char* what);

// ---------------------------------------------------------------- grid barrier
// Limits of a cooperative launch. Each block is an OS thread and each of its CUDA
// threads a fiber with its own stack (two memory mappings each; Linux allows about
// 65k mappings per process), so the grid is bounded in blocks and in threads.
constexpr int kMaxCooperativeBlocks = 128;
constexpr int kMaxCooperativeThreads = 16384;

// cl::grid_sync on the emulator (cuda_src/common/grid_sync.cuh).
void grid_sync(unsigned* counter, unsigned target, const char* file, int line);

// Writes the cp.async data of every copy in groups <= upto_group (all: every copy).
void complete_copies(Fiber* f, long long upto_group, bool all);

// Bytes of this module's TLS block: its static __shared__ storage, and t_worker.
size_t module_tls_size();
// dlopen's handle of this module (RTLD_NOLOAD), for its TLS block.
void* module_handle();

inline void* dynamic_shared_memory() {
    Worker& w = worker();
    return w.dyn_smem;
}

// A kernel launch (emu_entry.cpp's emu_launch); 0, or 1 with the error in g_error.
int launch(KernelThunk thunk, const void* kfn, const LaunchConfig& cfg, void* const* args);
// Nanoseconds per context switch, scheduler to fiber and back (emu_measure_switch_ns).
double measure_switch_ns(long long iters, unsigned long long stack_bytes);

// ---------------------------------------------------------------- kernel entries
// Typed thunk: unpacks the argument array (pointers to argument values, as
// cuLaunchKernel takes them) and calls the kernel.
template <typename... Args, size_t... I>
inline void call_kernel(void (*k)(Args...), void* const* args, std::index_sequence<I...>) {
    k(*static_cast<std::remove_cv_t<std::remove_reference_t<Args>>*>(args[I])...);
}

template <typename... Args>
inline void thunk_for(void* const* args, const void* kfn) {
    auto k = reinterpret_cast<void (*)(Args...)>(const_cast<void*>(kfn));
    call_kernel(k, args, std::index_sequence_for<Args...>{});
}

// Argument type codes for the Python side, which checks every argument against
// them: p = pointer; i/u/f + bytes = integer, unsigned, float; b = bool;
// s<bytes>a<align> = struct passed by value.
template <typename T>
inline std::string type_code() {
    using U = std::remove_cv_t<T>;
    if constexpr (std::is_pointer_v<U>) return "p";
    else if constexpr (std::is_same_v<U, bool>) return "b1";
    else if constexpr (std::is_floating_point_v<U>) return "f" + std::to_string(sizeof(U));
    else if constexpr (std::is_integral_v<U> && std::is_signed_v<U>) return "i" + std::to_string(sizeof(U));
    else if constexpr (std::is_integral_v<U>) return "u" + std::to_string(sizeof(U));
    else if constexpr (std::is_same_v<U, __half>) return "h2";
    else if constexpr (std::is_same_v<U, __nv_bfloat16>) return "e2";
    else return "s" + std::to_string(sizeof(U)) + "a" + std::to_string(alignof(U));
}

struct KernelEntry {
    const char* name;
    KernelThunk thunk;
    const void* kfn;
    std::string signature;
};

template <typename... Args>
inline KernelEntry make_entry(const char* name, void (*k)(Args...)) {
    std::string sig;
    ((sig += (sig.empty() ? "" : ","), sig += type_code<Args>()), ...);
    return KernelEntry{name, &thunk_for<Args...>, reinterpret_cast<const void*>(k), sig};
}

}  // namespace emu

// ---------------------------------------------------------------- the CUDA names
#define threadIdx (::emu::worker().current->tid)
#define blockIdx (::emu::worker().block_idx)
#define blockDim (::emu::worker().block_dim)
#define gridDim (::emu::worker().grid_dim)
#define warpSize 32

#define EMU_BARRIER(kind, p, name) \
    ::emu::barrier_arrive(::emu::BarrierKind::kind, (p), __FILE__, __LINE__, name)
#define __syncthreads() ((void)EMU_BARRIER(kSync, 1, "__syncthreads"))
#define __syncthreads_count(p) EMU_BARRIER(kCount, (p), "__syncthreads_count")
#define __syncthreads_and(p) EMU_BARRIER(kAnd, (p), "__syncthreads_and")
#define __syncthreads_or(p) EMU_BARRIER(kOr, (p), "__syncthreads_or")

namespace emu {
template <typename T>
inline T shfl(WarpOp op, unsigned mask, T v, int param, int width, const char* file, int line) {
    return from_bits<T>(warp_exchange(op, mask, to_bits(v), param, width, file, line));
}
}  // namespace emu

#define __shfl_sync(mask, v, src, ...) \
    ::emu::shfl(::emu::WarpOp::kShfl, (mask), (v), (src), EMU_WIDTH(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_up_sync(mask, v, d, ...) \
    ::emu::shfl(::emu::WarpOp::kShflUp, (mask), (v), (int)(d), EMU_WIDTH(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_down_sync(mask, v, d, ...) \
    ::emu::shfl(::emu::WarpOp::kShflDown, (mask), (v), (int)(d), EMU_WIDTH(__VA_ARGS__), __FILE__, __LINE__)
#define __shfl_xor_sync(mask, v, m, ...) \
    ::emu::shfl(::emu::WarpOp::kShflXor, (mask), (v), (m), EMU_WIDTH(__VA_ARGS__), __FILE__, __LINE__)
// Optional width argument, 32 by default.
#define EMU_WIDTH(...) (::emu::width_or_default(0, ##__VA_ARGS__))
namespace emu {
inline int width_or_default(int) { return 32; }
inline int width_or_default(int, int w) { return w; }
}  // namespace emu

#define __ballot_sync(mask, p) \
    ((unsigned)::emu::warp_exchange(::emu::WarpOp::kBallot, (mask), (p) != 0, 0, 32, __FILE__, __LINE__))
#define __any_sync(mask, p) \
    ((int)::emu::warp_exchange(::emu::WarpOp::kAny, (mask), (p) != 0, 0, 32, __FILE__, __LINE__))
#define __all_sync(mask, p) \
    ((int)::emu::warp_exchange(::emu::WarpOp::kAll, (mask), (p) != 0, 0, 32, __FILE__, __LINE__))
#define __syncwarp(...) \
    ((void)::emu::warp_exchange(::emu::WarpOp::kSync, ::emu::mask_or_full(0, ##__VA_ARGS__), 0, 0, 32, __FILE__, __LINE__))
namespace emu {
inline unsigned mask_or_full(int) { return 0xffffffffu; }
inline unsigned mask_or_full(int, unsigned m) { return m; }

// A GPU reports the lanes converged at the call. The emulator cannot see
// convergence: the live lanes of the warp meet here and each gets the set that
// met, which equals the GPU's answer in converged code.
inline unsigned activemask(const char* file, int line) {
    return (unsigned)warp_exchange(WarpOp::kActive, 0xffffffffu, 0, 0, 32, file, line);
}
}  // namespace emu
#define __activemask() (::emu::activemask(__FILE__, __LINE__))

// __match_any_sync / __match_all_sync (sm_70+): lanes compare the bit patterns of
// 32- or 64-bit values (float and double included, as the hardware does).
namespace emu {
template <typename T>
inline unsigned match_any(unsigned mask, T v, const char* file, int line) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "__match_any_sync: 32- or 64-bit values");
    return (unsigned)warp_exchange(WarpOp::kMatchAny, mask, to_bits(v), 0, 32, file, line);
}
template <typename T>
inline unsigned match_all(unsigned mask, T v, int* pred, const char* file, int line) {
    static_assert(sizeof(T) == 4 || sizeof(T) == 8, "__match_all_sync: 32- or 64-bit values");
    unsigned r = (unsigned)warp_exchange(WarpOp::kMatchAll, mask, to_bits(v), 0, 32, file, line);
    *pred = r != 0;
    return r;
}
// __reduce_*_sync (redux.sync, sm_80+): 32-bit integer reductions over the lanes of mask;
// min/max follow the value's signedness, add wraps.
inline unsigned reduce_sync(ReduceKind kind, const char* name, unsigned mask, unsigned v,
                            const char* file, int line) {
    return (unsigned)warp_exchange(WarpOp::kReduce, mask, v, kind, 32, file, line, name);
}
inline unsigned reduce_add(unsigned mask, unsigned v, const char* f, int l) {
    return reduce_sync(kRedAdd, "__reduce_add_sync", mask, v, f, l);
}
inline int reduce_add(unsigned mask, int v, const char* f, int l) {
    return (int)reduce_sync(kRedAdd, "__reduce_add_sync", mask, (unsigned)v, f, l);
}
inline unsigned reduce_min(unsigned mask, unsigned v, const char* f, int l) {
    return reduce_sync(kRedMinU, "__reduce_min_sync", mask, v, f, l);
}
inline int reduce_min(unsigned mask, int v, const char* f, int l) {
    return (int)reduce_sync(kRedMinS, "__reduce_min_sync", mask, (unsigned)v, f, l);
}
inline unsigned reduce_max(unsigned mask, unsigned v, const char* f, int l) {
    return reduce_sync(kRedMaxU, "__reduce_max_sync", mask, v, f, l);
}
inline int reduce_max(unsigned mask, int v, const char* f, int l) {
    return (int)reduce_sync(kRedMaxS, "__reduce_max_sync", mask, (unsigned)v, f, l);
}
}  // namespace emu
#define __match_any_sync(mask, v) (::emu::match_any((mask), (v), __FILE__, __LINE__))
#define __match_all_sync(mask, v, pred) (::emu::match_all((mask), (v), (pred), __FILE__, __LINE__))
#define __reduce_add_sync(mask, v) (::emu::reduce_add((mask), (v), __FILE__, __LINE__))
#define __reduce_min_sync(mask, v) (::emu::reduce_min((mask), (v), __FILE__, __LINE__))
#define __reduce_max_sync(mask, v) (::emu::reduce_max((mask), (v), __FILE__, __LINE__))
#define __reduce_and_sync(mask, v) \
    (::emu::reduce_sync(::emu::kRedAnd, "__reduce_and_sync", (mask), (unsigned)(v), __FILE__, __LINE__))
#define __reduce_or_sync(mask, v) \
    (::emu::reduce_sync(::emu::kRedOr, "__reduce_or_sync", (mask), (unsigned)(v), __FILE__, __LINE__))
#define __reduce_xor_sync(mask, v) \
    (::emu::reduce_sync(::emu::kRedXor, "__reduce_xor_sync", (mask), (unsigned)(v), __FILE__, __LINE__))

// Tensor-core fragments (nvcuda::wmma), warp-collective on the emulator.
#if __has_include("emu_wmma.h")
#include "emu_wmma.h"
#endif
// The PTX-level layer of cuda_src/common/mma.cuh: mma.sync, ldmatrix, cp.async.
#if __has_include("emu_mma.h")
#include "emu_mma.h"
#endif

// Dynamic shared memory (see cuda_src/common/cudnnlite.cuh for the CUDA side).
#define DYNAMIC_SHARED(T, name) T* name = reinterpret_cast<T*>(::emu::dynamic_shared_memory())
// (wgmma descriptors address it by offset from its start: aligned to everything)
#define DYNAMIC_SHARED_1024(T, name) DYNAMIC_SHARED(T, name)

// Device-side assert and trap raise an emulator error instead of aborting Python.
#undef assert
#define assert(e)                                                                        \
    ((e) ? (void)0                                                                        \
         : ::emu::fail(std::string("device assert failed: ") + #e + " at " + __FILE__ + ":" + \
                       std::to_string(__LINE__)))
// A GPU refuses to launch a kernel with more threads per block than its
// __launch_bounds__ ("too many resources requested for launch"). The macro expands to
// nothing here; instead the build (emulator/build.py, with_launch_bound_checks) opens the
// body of every kernel defined with it with EMU_LAUNCH_BOUNDS(its arguments). The
// further arguments (blocks per SM, blocks per cluster) only guide the compiler.
namespace emu {
template <typename... Hints>
inline void check_launch_bounds(const char* kernel, long long max_threads, Hints...) {
    const dim3& b = worker().block_dim;
    const long long threads = (long long)b.x * b.y * b.z;
    if (threads > max_threads)
        fail(std::string("kernel ") + kernel + " launched with blocks of " + std::to_string(threads) +
             " threads, more than its __launch_bounds__(" + std::to_string(max_threads) +
             "): a GPU refuses this launch (too many resources requested for launch)");
}
}  // namespace emu
#define EMU_LAUNCH_BOUNDS(...) ::emu::check_launch_bounds(__func__, __VA_ARGS__)

#define __trap() ::emu::fail("__trap() called")
#define __brkpt() ::emu::fail("__brkpt() called")

inline long long clock64() {
    return std::chrono::steady_clock::now().time_since_epoch().count();
}
#define __nanosleep(ns) ((void)(ns))

// Inline PTX cannot run on a CPU: any `asm` in a kernel source fails to compile
// with this name in the message, which the launcher turns into a clear error.
#define asm EMU_INLINE_PTX_IS_NOT_EMULATED
#define __asm__ EMU_INLINE_PTX_IS_NOT_EMULATED
