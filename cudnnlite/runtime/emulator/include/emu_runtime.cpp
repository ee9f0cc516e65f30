// emu_runtime.cpp — the emulator's execution model: fibers and their context switch,
// the block scheduler, the barrier, warp and grid rendezvous, shared-memory poisoning
// and the launch (see cuda_emu.h for the model).
//
// Compiled once per set of build flags (emulator/build.py, _runtime_object) and linked
// into every kernel module, instead of being compiled again, as inline functions of
// cuda_emu.h, in each of them: about a second less per module. Each module keeps its own
// copy of the runtime's state (g_error, g_grid, t_worker; hidden symbols), as before.
#include "cuda_emu.h"

// cuda_emu.h turns inline assembly into an error for kernels; the context switch is ours.
#undef asm
#undef __asm__

namespace emu {

// ---------------------------------------------------------------- context switch
#if !defined(EMU_UCONTEXT)
// swap(save, next): push the callee-saved registers, store the stack pointer in
// *save, load `next`, pop and return into the other context. The FP control
// words (MXCSR, x87 CW) are not switched: no kernel changes rounding modes.
extern "C" void emu_swap_context(void** save, void* next);
extern "C" void emu_fiber_trampoline();
#if defined(__x86_64__)
asm(R"(
    .text
    .p2align 4
    .hidden emu_swap_context
    .globl emu_swap_context
    .type emu_swap_context,@function
emu_swap_context:
    pushq %rbp
    pushq %rbx
    pushq %r12
    pushq %r13
    pushq %r14
    pushq %r15
    movq %rsp, (%rdi)
    movq %rsi, %rsp
    popq %r15
    popq %r14
    popq %r13
    popq %r12
    popq %rbx
    popq %rbp
    ret
    .size emu_swap_context,.-emu_swap_context

    .p2align 4
    .hidden emu_fiber_trampoline
    .globl emu_fiber_trampoline
    .type emu_fiber_trampoline,@function
emu_fiber_trampoline:
    movq %r12, %rdi
    call emu_fiber_main
    ud2
    .size emu_fiber_trampoline,.-emu_fiber_trampoline
)");
#elif defined(__aarch64__)
asm(R"(
    .text
    .p2align 4
    .hidden emu_swap_context
    .globl emu_swap_context
    .type emu_swap_context,%function
emu_swap_context:
    sub sp, sp, #176
    stp x19, x20, [sp, #0]
    stp x21, x22, [sp, #16]
    stp x23, x24, [sp, #32]
    stp x25, x26, [sp, #48]
    stp x27, x28, [sp, #64]
    stp x29, x30, [sp, #80]
    stp d8, d9, [sp, #96]
    stp d10, d11, [sp, #112]
    stp d12, d13, [sp, #128]
    stp d14, d15, [sp, #144]
    mov x9, sp
    str x9, [x0]
    mov sp, x1
    ldp x19, x20, [sp, #0]
    ldp x21, x22, [sp, #16]
    ldp x23, x24, [sp, #32]
    ldp x25, x26, [sp, #48]
    ldp x27, x28, [sp, #64]
    ldp x29, x30, [sp, #80]
    ldp d8, d9, [sp, #96]
    ldp d10, d11, [sp, #112]
    ldp d12, d13, [sp, #128]
    ldp d14, d15, [sp, #144]
    add sp, sp, #176
    ret
    .size emu_swap_context,.-emu_swap_context

    .p2align 4
    .hidden emu_fiber_trampoline
    .globl emu_fiber_trampoline
    .type emu_fiber_trampoline,%function
emu_fiber_trampoline:
    mov x0, x19
    bl emu_fiber_main
    brk #0
    .size emu_fiber_trampoline,.-emu_fiber_trampoline
)");
#endif
#endif

std::string thread_name(const uint3& t) {
    return "(" + std::to_string(t.x) + "," + std::to_string(t.y) + "," + std::to_string(t.z) + ")";
}

std::string site_name(const Site& s) {
    return std::string(s.what) + " at " + (s.file ? s.file : "?") + ":" + std::to_string(s.line);
}

std::string where() {
    Worker& w = worker();
    return "block " + thread_name(w.block_idx) + " thread " +
           (w.current ? thread_name(w.current->tid) : std::string("?"));
}

// ---------------------------------------------------------------- fibers
// Fiber stacks are plain anonymous mappings, so the kernel merges neighbouring stacks into
// one memory mapping: a guard page below each stack would cost two mappings per fiber, and
// a process that loads many modules (each with its own pools, on every OS thread that ran
// its blocks) would reach Linux's 65530 mappings and fail in dlopen ("failed to map
// segment"). Instead a canary fills the lowest bytes of each stack and is checked when a
// block ends (stack_overflowed): an overflow becomes an error naming the fix. ASan builds
// keep the guard page (ASan wants to see the fault).
constexpr size_t kStackCanaryBytes = 256;
constexpr unsigned char kStackCanary = 0xA5;
#if defined(EMU_ASAN)
constexpr size_t kStackGuard = 4096;
#else
constexpr size_t kStackGuard = 0;
#endif

char* alloc_stack(size_t bytes) {
    void* p = mmap(nullptr, bytes + kStackGuard, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    if (kStackGuard) mprotect(p, kStackGuard, PROT_NONE);
    char* stack = static_cast<char*>(p) + kStackGuard;
    memset(stack, kStackCanary, kStackCanaryBytes);
    return stack;
}

bool stack_overflowed(const Fiber* f) {
    for (size_t i = 0; i < kStackCanaryBytes; ++i)
        if ((unsigned char)f->stack[i] != kStackCanary) return true;
    return false;
}

void free_fiber(Fiber* f) {
    if (f->stack) munmap(f->stack - kStackGuard, f->stack_size + kStackGuard);
    delete f;
}

Fiber* get_fiber(Worker& w, int index) {
    while ((int)w.pool.size() <= index) {
        Fiber* f = new Fiber();
        f->owner = &w;
        f->stack_size = w.stack_bytes;
        f->stack = alloc_stack(f->stack_size);
        if (!f->stack) {
            delete f;
            return nullptr;
        }
        w.pool.push_back(f);
    }
    return w.pool[index];
}

void prepare_fiber(Fiber* f) {
#if defined(EMU_UCONTEXT)
    getcontext(&f->uc);
    f->uc.uc_stack.ss_sp = f->stack;
    f->uc.uc_stack.ss_size = f->stack_size;
    f->uc.uc_link = nullptr;
    makecontext(&f->uc, (void (*)())emu_fiber_main, 1, f);
#elif defined(__x86_64__)
    // Initial frame, read by emu_swap_context: r15 r14 r13 r12 rbx rbp ret. The
    // trampoline receives the fiber in r12; after `ret` the stack pointer is
    // 16-byte aligned, as the call in the trampoline needs.
    uintptr_t top = (reinterpret_cast<uintptr_t>(f->stack) + f->stack_size) & ~uintptr_t(15);
    uint64_t* sp = reinterpret_cast<uint64_t*>(top - 16 - 56);
    sp[0] = 0;                                   // r15
    sp[1] = 0;                                   // r14
    sp[2] = 0;                                   // r13
    sp[3] = reinterpret_cast<uint64_t>(f);       // r12
    sp[4] = 0;                                   // rbx
    sp[5] = 0;                                   // rbp
    sp[6] = reinterpret_cast<uint64_t>(&emu_fiber_trampoline);
    f->sp = sp;
#elif defined(__aarch64__)
    uintptr_t top = (reinterpret_cast<uintptr_t>(f->stack) + f->stack_size) & ~uintptr_t(15);
    uint64_t* sp = reinterpret_cast<uint64_t*>(top - 176);
    memset(sp, 0, 176);
    sp[0] = reinterpret_cast<uint64_t>(f);                         // x19
    sp[11] = reinterpret_cast<uint64_t>(&emu_fiber_trampoline);    // x30
    f->sp = sp;
#endif
}

// Fiber → the next runnable fiber of the round, directly (one switch), or back to
// the scheduler when the round is over or the block aborted.
void yield_to_scheduler(Fiber* f) {
    Worker& w = *f->owner;
    Fiber* g = nullptr;
    if (!w.aborted) {
        while (w.round_pos < w.round.size()) {
            Fiber* h = w.round[w.round_pos++];
            if (h->state == State::kRunnable) {
                g = h;
                break;
            }
        }
    }
    if (g == f) return;  // released already and next in turn: keep running
    race_switch_to(w, g);
#if defined(EMU_ASAN)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, g ? g->stack : nullptr, g ? g->stack_size : 0);
#endif
    w.current = g;
#if defined(EMU_UCONTEXT)
    swapcontext(&f->uc, g ? &g->uc : &w.sched_uc);
#else
    emu_swap_context(&f->sp, g ? g->sp : w.sched_sp);
#endif
#if defined(EMU_ASAN)
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
}

// Scheduler → fiber.
void resume(Worker& w, Fiber* f) {
    race_switch_to(w, f);
    w.current = f;
#if defined(EMU_ASAN)
    void* fake = nullptr;
    __sanitizer_start_switch_fiber(&fake, f->stack, f->stack_size);
#endif
#if defined(EMU_UCONTEXT)
    swapcontext(&w.sched_uc, &f->uc);
#else
    emu_swap_context(&w.sched_sp, f->sp);
#endif
#if defined(EMU_ASAN)
    __sanitizer_finish_switch_fiber(fake, nullptr, nullptr);
#endif
    w.current = nullptr;
}

uint3 unflatten(const Worker& w, int linear) {
    uint3 t;
    t.x = linear % w.block_dim.x;
    t.y = (linear / w.block_dim.x) % w.block_dim.y;
    t.z = linear / (w.block_dim.x * w.block_dim.y);
    return t;
}

Warp& warp_of(Worker& w, int linear) { return w.warps[linear / 32]; }

// ---------------------------------------------------------------- warp rendezvous
void check_warp_groups(Worker& w, Warp& warp, int warp_index);

void release_barrier(Worker& w) {
    for (int i = 0; i < (int)w.order.size(); ++i) {
        Fiber* g = w.by_thread[w.order[i]];
        if (g && g->state == State::kBarrier) {
            g->state = State::kRunnable;
            g->bar_result = w.bar_count;
            g->bar_total = w.bar_arrived;
            w.ready.push_back(g);
        }
    }
    w.bar_arrived = 0;
    w.bar_site = Site();
}

void maybe_release_barrier(Worker& w) {
    if (w.bar_arrived > 0 && w.bar_arrived == w.live) release_barrier(w);
}

// Completes every warp group whose live lanes have all arrived.
void check_warp_groups(Worker& w, Warp& warp, int warp_index) {
    for (WarpGroup& g : warp.groups) {
        if (!g.used) continue;
        unsigned need = g.mask & warp.live;
        if ((g.arrived & need) != need) continue;
        unsigned lanes = g.arrived;
        for (int lane = 0; lane < 32; ++lane) {
            if (!(lanes >> lane & 1)) continue;
            int width = warp.width[lane];
            int seg = lane & ~(width - 1);
            int src = lane;
            switch (g.op) {
                case WarpOp::kShfl: src = seg + (warp.param[lane] & (width - 1)); break;
                case WarpOp::kShflUp: {
                    int s = lane - warp.param[lane];
                    src = s < seg ? lane : s;
                    break;
                }
                case WarpOp::kShflDown: {
                    int s = lane + warp.param[lane];
                    src = s >= seg + width ? lane : s;
                    break;
                }
                case WarpOp::kShflXor: {
                    int s = lane ^ warp.param[lane];
                    // Lanes of later segments are out of reach: own value.
                    src = s >= seg + width ? lane : s;
                    break;
                }
                default: break;
            }
            if (g.op == WarpOp::kShfl || g.op == WarpOp::kShflUp || g.op == WarpOp::kShflDown ||
                g.op == WarpOp::kShflXor) {
                // A source lane that does not take part (exited, or outside the
                // mask) gives undefined data on a GPU; here: the lane's own value.
                warp.result[lane] = (lanes >> src & 1) ? warp.value[src] : warp.value[lane];
            } else if (g.op == WarpOp::kMatchAny || g.op == WarpOp::kMatchAll) {
                unsigned same = 0;
                for (int l = 0; l < 32; ++l)
                    if ((lanes >> l & 1) && warp.value[l] == warp.value[lane]) same |= 1u << l;
                // match_all: the mask when every lane holds the same value, else 0.
                warp.result[lane] = g.op == WarpOp::kMatchAny ? same : same == lanes ? lanes : 0;
            } else if (g.op == WarpOp::kReduce) {
                const int kind = warp.param[lane];
                unsigned r = 0;
                bool first = true;
                for (int l = 0; l < 32; ++l) {
                    if (!(lanes >> l & 1)) continue;
                    const unsigned v = (unsigned)warp.value[l];
                    if (first) r = v;
                    else if (kind == kRedAdd) r += v;  // wraps, as redux.sync.add truncates
                    else if (kind == kRedMinS) r = (int)v < (int)r ? v : r;
                    else if (kind == kRedMaxS) r = (int)v > (int)r ? v : r;
                    else if (kind == kRedMinU) r = v < r ? v : r;
                    else if (kind == kRedMaxU) r = v > r ? v : r;
                    else if (kind == kRedAnd) r &= v;
                    else if (kind == kRedOr) r |= v;
                    else r ^= v;
                    first = false;
                }
                warp.result[lane] = r;
            } else {
                unsigned ballot = 0;
                for (int l = 0; l < 32; ++l)
                    if ((lanes >> l & 1) && warp.value[l]) ballot |= 1u << l;
                if (g.op == WarpOp::kBallot) warp.result[lane] = ballot;
                else if (g.op == WarpOp::kAny) warp.result[lane] = ballot != 0;
                else if (g.op == WarpOp::kAll) warp.result[lane] = ballot == lanes;
                else if (g.op == WarpOp::kActive) warp.result[lane] = lanes;
                else warp.result[lane] = 0;
            }
            Fiber* lf = w.by_thread[warp_index * 32 + lane];
            if (lf && lf->state == State::kWarp) {
                lf->state = State::kRunnable;
                w.ready.push_back(lf);
            }
        }
        g = WarpGroup();
    }
}

// The block's threads: a warp op or barrier from the plain loop converts the block.
Fiber* current_fiber(const char* what) {
    Worker& w = worker();
    Fiber* f = w.current;
    if (!f) fail(std::string(what) + " called outside a kernel");
    if (!w.fiber_mode) convert_to_fiber_mode(w);
    return f;
}

const char* op_name(WarpOp op) {
    switch (op) {
        case WarpOp::kShfl: return "__shfl_sync";
        case WarpOp::kShflUp: return "__shfl_up_sync";
        case WarpOp::kShflDown: return "__shfl_down_sync";
        case WarpOp::kShflXor: return "__shfl_xor_sync";
        case WarpOp::kBallot: return "__ballot_sync";
        case WarpOp::kAny: return "__any_sync";
        case WarpOp::kAll: return "__all_sync";
        case WarpOp::kSync: return "__syncwarp";
        case WarpOp::kActive: return "__activemask";
        case WarpOp::kTensor: return "tensor-core operation";
        case WarpOp::kMatchAny: return "__match_any_sync";
        case WarpOp::kMatchAll: return "__match_all_sync";
        case WarpOp::kReduce: return "__reduce_sync";
        default: return "?";
    }
}

std::string hex(unsigned v) {
    char buf[16];
    snprintf(buf, sizeof buf, "0x%08x", v);
    return buf;
}

// "lane 3", "lanes 16-31", "lanes 0, 2, 5-7".
std::string lane_list(unsigned m) {
    std::string out;
    int count = 0;
    for (int l = 0; l < 32;) {
        if (!(m >> l & 1)) {
            ++l;
            continue;
        }
        int e = l;
        while (e + 1 < 32 && (m >> (e + 1) & 1)) ++e;
        out += (out.empty() ? "" : ", ") + std::to_string(l);
        if (e > l) out += "-" + std::to_string(e);
        count += e - l + 1;
        l = e + 1;
    }
    return (count == 1 ? "lane " : "lanes ") + out;
}

bool is_tensor_op(WarpOp op, const char* name) {
    return op == WarpOp::kTensor || (name && strstr(name, "_matrix_sync")) ||
           (name && strcmp(name, "mma_sync") == 0);
}

// What the operation needs, for the error messages.
std::string warp_op_rule(WarpOp op, const char* name) {
    if (is_tensor_op(op, name))
        return "A tensor-core operation (wmma, mma.sync, ldmatrix) is warp-wide: it needs all "
               "32 lanes of the warp, converged";
    return "Every lane named in the mask must execute the operation with the same mask";
}

// Undefined behaviour on a GPU: the mask names lanes that cannot take part — absent
// from a partial warp, or exited. Checked at each arrival: a few bit operations.
void check_warp_mask(const Worker& w, const Warp& warp, int warp_index, WarpOp op,
                            unsigned mask, const Site& site) {
    unsigned absent = mask & ~warp.present;
    unsigned exited = mask & warp.present & ~warp.live;
    if (!(absent | exited)) return;
    std::string msg = "undefined warp operation: " + site_name(site) + " with mask " + hex(mask) +
                      " in warp " + std::to_string(warp_index) + " names ";
    if (absent) {
        int lanes = __builtin_popcount(warp.present);
        msg += lane_list(absent) + ", absent from the warp (a block of " +
               std::to_string(w.nthreads) + " threads: warp " + std::to_string(warp_index) +
               " has " + (lanes == 32 ? std::string("all 32 lanes") : lane_list(warp.present)) +
               ")";
    }
    if (absent && exited) msg += ", and ";
    if (exited) msg += lane_list(exited) + ", which exited before it";
    msg += ". " + warp_op_rule(op, site.what) + "; otherwise the result is undefined on a GPU. ";
    if (is_tensor_op(op, site.what))
        msg += "Launch whole warps and keep all their lanes until the operation.";
    else if (absent)
        msg += "Pass the mask of the lanes that exist and take part (e.g. the lanes present in "
               "the last warp; then read no shuffled value from a lane outside it).";
    else
        msg += "Keep every lane named in the mask alive until the operation (a guard instead "
               "of an early return), or leave the exited lanes out of the mask; "
               "__ballot_sync/__activemask do not bring exited lanes back.";
    fail(msg);
}

// A lane exits: undefined behaviour if lanes of its warp wait in an operation whose
// mask names it (it will never arrive).
void warp_lane_exits(const Warp& warp, int warp_index, int lane) {
    for (const WarpGroup& g : warp.groups) {
        if (!g.used || g.op == WarpOp::kActive || !(g.mask >> lane & 1)) continue;
        fail("undefined warp operation: lane " + std::to_string(lane) + " of warp " +
             std::to_string(warp_index) + " exited while " + lane_list(g.arrived) + " wait in " +
             site_name(g.site) + " with mask " + hex(g.mask) + ", which names it. " +
             warp_op_rule(g.op, g.site.what) +
             "; otherwise the result is undefined on a GPU. Keep the lane alive until the "
             "operation (a guard instead of an early return) or leave it out of the mask.");
    }
}

// One lane arrives at a warp operation; returns its result once every live lane of
// the mask has arrived.
// `name` overrides the operation's name in reports; lanes meet only at the same name.
unsigned long long warp_exchange(WarpOp op, unsigned mask, unsigned long long value, int param,
                                        int width, const char* file, int line,
                                        const char* name) {
    RaceWarpScope race_scope;  // first: the rendezvous is emulator bookkeeping
    if (!name) name = op_name(op);
    Fiber* f = current_fiber(name);
    Worker& w = worker();
    int warp_index = f->linear / 32;
    int lane = f->linear % 32;
    Warp& warp = w.warps[warp_index];
    Site site{file, line, name};
    if (op == WarpOp::kActive) {
        // The lanes that meet here: every live lane of the warp, or the group's.
        mask = warp.live;
        for (WarpGroup& g : warp.groups)
            if (g.used && g.op == WarpOp::kActive) mask = g.mask;
    }
    if (!(mask >> lane & 1))
        fail(site_name(site) + ": the calling lane " + std::to_string(lane) + " is not in mask " +
             hex(mask));
    if (width < 1 || width > 32 || (width & (width - 1)))
        fail(site_name(site) + ": width " + std::to_string(width) + " is not a power of two in [1, 32]");
    if ((mask & warp.live) != mask) check_warp_mask(w, warp, warp_index, op, mask, site);
    WarpGroup* group = nullptr;
    for (WarpGroup& g : warp.groups) {
        if (!g.used) continue;
        if (g.mask == mask) {
            group = &g;
            break;
        }
        if (g.mask & mask)
            fail("divergent warp operation in warp " + std::to_string(warp_index) + ": " +
                 site_name(site) + " with mask " + hex(mask) + " while lanes wait in " +
                 site_name(g.site) + " with overlapping mask " + hex(g.mask));
    }
    if (group && (group->op != op || strcmp(group->site.what, name) != 0))
        fail("divergent warp operation in warp " + std::to_string(warp_index) + ": lane " +
             std::to_string(lane) + " at " + site_name(site) + " while lanes of mask " + hex(mask) +
             " wait at " + site_name(group->site));
    if (!group) {
        for (WarpGroup& g : warp.groups)
            if (!g.used) {
                group = &g;
                break;
            }
        group->used = true;
        group->op = op;
        group->mask = mask;
        group->arrived = 0;
        group->site = site;
    }
    group->arrived |= 1u << lane;
    race_scope.arrive(op, warp_index, int(group - warp.groups), group->arrived == 1u << lane);
    warp.value[lane] = value;
    warp.param[lane] = param;
    warp.width[lane] = width;
    f->state = State::kWarp;
    f->waiting_at = site;
    check_warp_groups(w, warp, warp_index);
    // Yield even when this lane completed the group: the scheduler then runs the
    // lanes in schedule order, which is what CUDNNLITE_EMU_SCHEDULE varies.
    yield_to_scheduler(f);
    return warp.result[lane];
}

int barrier_arrive(BarrierKind kind, int predicate, const char* file, int line,
                          const char* what) {
    RaceBarrierScope race_scope;  // first: the rendezvous is emulator bookkeeping
    Fiber* f = current_fiber(what);
    Worker& w = worker();
    Site site{file, line, what};
    if (w.bar_arrived == 0) {
        w.bar_site = site;
        w.bar_count = 0;
    } else if (!w.bar_site.same(site)) {
        fail("divergent __syncthreads: thread " + thread_name(f->tid) + " reached " +
             site_name(site) + " while other threads of block " + thread_name(w.block_idx) +
             " wait at " + site_name(w.bar_site));
    }
    w.bar_arrived += 1;
    w.bar_count += predicate != 0;
    f->state = State::kBarrier;
    f->waiting_at = site;
    maybe_release_barrier(w);
    yield_to_scheduler(f);
    switch (kind) {
        case BarrierKind::kCount: return f->bar_result;
        case BarrierKind::kAnd: return f->bar_result == f->bar_total;
        case BarrierKind::kOr: return f->bar_result != 0;
        default: return 0;
    }
}

int max_cooperative_blocks(int block_threads) {
    if (block_threads < 1) return 0;
    return std::min(kMaxCooperativeBlocks, kMaxCooperativeThreads / block_threads);
}

// Where the blocks of a cooperative launch meet at each grid_sync. One launch at a
// time per module (the Python launcher holds the module's lock), as for g_error.
struct GridBarrier {
    std::mutex mutex;
    std::condition_variable cv;
    unsigned num_blocks = 0;
    unsigned arrived = 0;               // blocks waiting at the current barrier
    unsigned long long generation = 0;  // barriers completed
    Site site;                          // the first arrival's call site
    int exited = 0;                     // blocks that returned from the kernel
    uint3 first_exited;
};
GridBarrier g_grid;

std::string grid_site(const Site& s) {
    return std::string("grid_sync (") + (s.file ? s.file : "?") + ":" + std::to_string(s.line) + ")";
}

// One block arrives (its first fiber to resume after the block barrier, which
// blocks the block's OS thread here). Returns an error message, empty when the
// barrier completed.
std::string grid_arrive(unsigned* counter, unsigned target, const Site& site) {
    GridBarrier& g = g_grid;
    std::unique_lock<std::mutex> lock(g.mutex);
    unsigned long long gen = g.generation;
    unsigned long long expected = (gen + 1) * g.num_blocks;
    if (target != expected)
        return grid_site(site) + ": target " + std::to_string(target) + " at grid barrier " +
               std::to_string(gen) + " of a " + std::to_string(g.num_blocks) +
               "-block grid; the k-th barrier (from 0) takes (k + 1) * num_blocks = " +
               std::to_string(expected);
    if (g.arrived == 0) g.site = site;
    // As on the GPU, so that host code reads the same final count.
    __atomic_fetch_add(counter, 1u, __ATOMIC_SEQ_CST);
    if (++g.arrived == g.num_blocks) {
        unsigned now = __atomic_load_n(counter, __ATOMIC_SEQ_CST);
        g.arrived = 0;
        g.generation += 1;
        g.cv.notify_all();
        if (now != target)
            return grid_site(site) + ": *counter is " + std::to_string(now) + " once all " +
                   std::to_string(g.num_blocks) + " blocks arrived at grid barrier " +
                   std::to_string(gen) + ", expected " + std::to_string(target) +
                   ": zero the counter before the launch and let nothing else write it";
        return "";
    }
    // A short timeout in the wait: a failing block records its error before it
    // exits (and notifies), but nothing here may hang if that ever goes amiss.
    while (g.generation == gen) {
        if (launch_failed()) return "stopped: another block failed";
        if (g.exited > 0)
            return "grid_sync: block " + thread_name(g.first_exited) + " exited while " +
                   std::to_string(g.arrived) + " block" + (g.arrived == 1 ? "" : "s") +
                   " wait at " + grid_site(g.site) +
                   "; every block must call grid_sync the same number of times";
        g.cv.wait_for(lock, std::chrono::milliseconds(20));
    }
    return "";
}

void grid_block_exited(const uint3& block) {
    GridBarrier& g = g_grid;
    std::lock_guard<std::mutex> lock(g.mutex);
    if (g.exited++ == 0) g.first_exited = block;
    g.cv.notify_all();
}

// cl::grid_sync on the emulator (cuda_src/common/grid_sync.cuh).
void grid_sync(unsigned* counter, unsigned target, const char* file, int line) {
    RaceGridScope race_scope;  // first: the grid barrier's bookkeeping
    Fiber* f = current_fiber("grid_sync");
    Worker& w = worker();
    Site site{file, line, "grid_sync"};
    if (!w.cfg->cooperative)
        fail(grid_site(site) + ": grid_sync needs a cooperative launch "
             "(kernel(..., cooperative=True)); otherwise the blocks need not be co-resident "
             "and a GPU can hang");
    // Its own site name: a block whose threads mix it with __syncthreads is divergent.
    barrier_arrive(BarrierKind::kSync, 1, file, line, "grid_sync");
    // The first fiber to resume after the block barrier takes the block to the grid
    // barrier; the block's other fibers cannot run until it returns, and then only
    // catch their own count up.
    if (f->grid_syncs == w.grid_syncs) {
        w.grid_syncs += 1;
        std::string error = grid_arrive(counter, target, site);
        if (!error.empty()) fail(error);  // after the lock is released
        race_scope.met_other_blocks();
    }
    f->grid_syncs += 1;
}

// ---------------------------------------------------------------- scheduler
void start_thread_fiber(Worker& w, int linear) {
    Fiber* f = get_fiber(w, w.fibers_used++);
    if (!f) fail("cannot allocate a fiber stack (" + std::to_string(w.stack_bytes) + " bytes)");
    f->tid = unflatten(w, linear);
    f->linear = linear;
    f->state = State::kRunnable;
    f->plain = false;
    f->waiting_at = Site();
    w.by_thread[linear] = f;
    prepare_fiber(f);
    w.ready.push_back(f);
}

void convert_to_fiber_mode(Worker& w) {
    RaceIgnoreScope race_ignore;  // the emulator's, even when a kernel thread converts
    w.fiber_mode = true;
    // The threads the plain loop has not started get their own fibers, in order.
    while (w.next_plain < (int)w.order.size()) start_thread_fiber(w, w.order[w.next_plain++]);
}

void complete_copies(Fiber* f, long long upto_group, bool all);

void run_thread_body(Worker& w, Fiber* f) {
    f->copies.clear();
    f->copy_groups = 0;
    f->wgmmas.clear();  // (an exiting thread's wgmma results die with its registers)
    f->wgmma_groups = 0;
    f->wgmma_fenced = false;
    f->copies_unfenced = false;
    f->grid_syncs = 0;
    race_thread_begin(w, f);
    w.thunk(w.args, w.kfn);
    complete_copies(f, 0, true);  // an exiting thread's copies still land
    race_thread_end(w, f);
}

// Writes the cp.async data of every copy in groups <= upto_group (all: every copy).
void complete_copies(Fiber* f, long long upto_group, bool all) {
    size_t kept = 0;
    for (size_t i = 0; i < f->copies.size(); ++i) {
        PendingCopy& c = f->copies[i];
        if (all || (c.group >= 0 && c.group <= upto_group)) {
            memcpy(c.dst, c.data, c.bytes);
            f->copies_unfenced = true;  // (wgmma reads it only after fence.proxy.async)
        } else {
            f->copies[kept++] = c;
        }
    }
    f->copies.resize(kept);
}

// Called on a fresh fiber stack.
extern "C" __attribute__((used, visibility("hidden"))) void emu_fiber_main(Fiber* f) {
    Worker& w = worker();
#if defined(EMU_ASAN)
    __sanitizer_finish_switch_fiber(nullptr, nullptr, nullptr);
#endif
    if (f->ping) {
        for (;;) yield_to_scheduler(f);
    }
    if (f->plain) {
        // Plain mode: run the threads one after another on this one stack until
        // one of them meets a barrier or warp op (which converts the block).
        while (!w.fiber_mode && w.next_plain < (int)w.order.size()) {
            int linear = w.order[w.next_plain++];
            f->linear = linear;
            f->tid = unflatten(w, linear);
            w.by_thread[linear] = f;
            run_thread_body(w, f);
            if (!w.fiber_mode) {
                w.by_thread[linear] = nullptr;
                w.live -= 1;
                w.done += 1;
                warp_of(w, linear).live &= ~(1u << (linear % 32));
            }
        }
        if (!w.fiber_mode) {
            f->state = State::kDone;
            yield_to_scheduler(f);
        }
        // Converted while running a thread; that thread has now finished.
    } else {
        run_thread_body(w, f);
    }
    Warp& warp = warp_of(w, f->linear);
    warp_lane_exits(warp, f->linear / 32, f->linear % 32);
    f->state = State::kDone;
    w.live -= 1;
    w.done += 1;
    warp.live &= ~(1u << (f->linear % 32));
    // An exit may complete a barrier or a warp group that waited for this thread.
    maybe_release_barrier(w);
    check_warp_groups(w, warp, f->linear / 32);
    yield_to_scheduler(f);
    __builtin_unreachable();
}

void report_deadlock(Worker& w) {
    std::string msg = "deadlock in block " + thread_name(w.block_idx) +
                      ": no thread can make progress. Waiting threads:";
    int shown = 0;
    for (Fiber* g : w.by_thread) {
        if (!g || g->state == State::kDone) continue;
        if (shown++ == 8) {
            msg += " ...";
            break;
        }
        msg += "\n  thread " + thread_name(g->tid) + " waits in " + site_name(g->waiting_at);
    }
    record_error(msg);
}

void poison_tls_shared_memory();
Fiber* next_in_round(Worker& w);

void run_block(Worker& w, unsigned bx, unsigned by, unsigned bz) {
    w.block_idx.x = bx;
    w.block_idx.y = by;
    w.block_idx.z = bz;
    w.next_plain = 0;
    w.fiber_mode = false;
    w.fibers_used = 0;
    w.live = w.nthreads;
    w.done = 0;
    w.aborted = false;
    w.ready.clear();
    w.round.clear();
    w.round_pos = 0;
    std::fill(w.by_thread.begin(), w.by_thread.end(), nullptr);
    w.bar_arrived = 0;
    w.bar_site = Site();
    w.grid_syncs = 0;
    for (int i = 0; i < (int)w.warps.size(); ++i) {
        Warp& warp = w.warps[i];
        int lanes = std::min(32, w.nthreads - i * 32);
        warp.live = lanes == 32 ? 0xffffffffu : ((1u << lanes) - 1);
        warp.present = warp.live;
        for (WarpGroup& g : warp.groups) g = WarpGroup();
    }
    if (w.cfg->schedule == kRandom) {
        // Seeded per block: the same seed gives the same order whatever thread runs it.
        unsigned long long id = bx + 1ull * w.grid_dim.x * (by + 1ull * w.grid_dim.y * bz);
        w.rng.seed(w.cfg->seed * 0x9E3779B97F4A7C15ull + id);
        for (int i = 0; i < w.nthreads; ++i) w.order[i] = i;
        std::shuffle(w.order.begin(), w.order.end(), w.rng);
    }
    if (w.cfg->poison) {
        poison_tls_shared_memory();
        if (w.cfg->shared_bytes) memset(w.dyn_smem, 0xFF, w.cfg->shared_bytes);
    }
    RaceBlockScope race_block(w);  // race-check builds: TSan's view of the block
    Fiber* first = get_fiber(w, w.fibers_used++);
    if (!first) {
        record_error("cannot allocate a fiber stack");
        return;
    }
    first->plain = true;
    first->state = State::kRunnable;
    prepare_fiber(first);
    w.ready.push_back(first);
    while (w.done < w.nthreads && !w.aborted) {
        if (w.ready.empty()) {
            report_deadlock(w);
            return;
        }
        // A round runs every fiber that was runnable when it began; fibers chain
        // into each other directly and return here when the round is over.
        w.round.swap(w.ready);
        w.ready.clear();
        w.round_pos = 0;
        if (Fiber* f = next_in_round(w)) resume(w, f);
    }
    for (int i = 0; i < w.fibers_used; ++i) {
        if (stack_overflowed(w.pool[i])) {
            record_error("fiber stack overflow in block " + thread_name(w.block_idx) +
                         ": a thread used more than its " +
                         std::to_string(w.stack_bytes / 1024) +
                         " KiB stack; set CUDNNLITE_EMU_STACK_KB higher");
            break;
        }
    }
}

Fiber* next_in_round(Worker& w) {
    while (w.round_pos < w.round.size()) {
        Fiber* g = w.round[w.round_pos++];
        if (g->state == State::kRunnable) return g;
    }
    return nullptr;
}

[[noreturn]] void fail(const std::string& msg) {
    Worker* w = t_worker;
    std::string full = msg;
    if (w && w->current) full = "in " + where() + ": " + msg;
    record_error(full);
    if (w && w->current) {
        w->aborted = true;
        Fiber* f = w->current;
        yield_to_scheduler(f);
    }
    // Outside a fiber: nothing sensible to unwind to.
    fprintf(stderr, "cudnnlite emulator: %s\n", full.c_str());
    abort();
}

// ---------------------------------------------------------------- shared memory poisoning
// Every TLS byte of this module except t_worker is __shared__ storage; find the
// calling thread's TLS block of this module and fill it.
struct TlsRange {
    char* start = nullptr;
    size_t size = 0;
};

size_t module_tls_size() {
    static size_t size = [] {
        Dl_info info;
        if (!dladdr(reinterpret_cast<void*>(&module_tls_size), &info)) return size_t(0);
        struct Ctx {
            void* base;
            size_t size;
        } ctx{info.dli_fbase, 0};
        dl_iterate_phdr(
            [](dl_phdr_info* pi, size_t, void* data) -> int {
                Ctx* c = static_cast<Ctx*>(data);
                if (reinterpret_cast<void*>(pi->dlpi_addr) != c->base) return 0;
                for (int i = 0; i < pi->dlpi_phnum; ++i)
                    if (pi->dlpi_phdr[i].p_type == PT_TLS) c->size = pi->dlpi_phdr[i].p_memsz;
                return 1;
            },
            &ctx);
        return ctx.size;
    }();
    return size;
}

void* module_handle() {
    static void* handle = [] {
        Dl_info info;
        if (!dladdr(reinterpret_cast<void*>(&module_handle), &info)) return (void*)nullptr;
        return dlopen(info.dli_fname, RTLD_NOW | RTLD_NOLOAD);
    }();
    return handle;
}

void poison_tls_shared_memory() {
    size_t size = module_tls_size();
    void* handle = module_handle();
    if (!size || !handle) return;
    Worker* keep = t_worker;  // touching it also makes sure the block is allocated
    void* block = nullptr;
    if (dlinfo(handle, RTLD_DI_TLS_DATA, &block) != 0 || !block) return;
    char* start = static_cast<char*>(block);
    char* w0 = reinterpret_cast<char*>(&t_worker);
    char* w1 = w0 + sizeof(t_worker);
    if (w0 >= start && w1 <= start + size) {
        memset(start, 0xFF, w0 - start);
        memset(w1, 0xFF, start + size - w1);
    } else {
        memset(start, 0xFF, size);
    }
    t_worker = keep;
}

// ---------------------------------------------------------------- launch
Worker* get_worker(const LaunchConfig& cfg) {
    race_worker_enter();  // race-check builds: an OpenMP thread sees the launcher's writes
    if (!t_worker) t_worker = new Worker();
    Worker& w = *t_worker;
    if (w.stack_bytes != cfg.stack_bytes) {
        for (Fiber* f : w.pool) free_fiber(f);
        w.pool.clear();
        w.stack_bytes = cfg.stack_bytes;
    }
    return &w;
}

void setup_block_shape(Worker& w, const LaunchConfig& cfg) {
    w.cfg = &cfg;
    w.block_dim = dim3(cfg.block[0], cfg.block[1], cfg.block[2]);
    w.grid_dim = dim3(cfg.grid[0], cfg.grid[1], cfg.grid[2]);
    w.nthreads = int(cfg.block[0] * cfg.block[1] * cfg.block[2]);
    w.order.resize(w.nthreads);
    for (int i = 0; i < w.nthreads; ++i)
        w.order[i] = cfg.schedule == kReverse ? w.nthreads - 1 - i : i;
    w.by_thread.assign(w.nthreads, nullptr);
    w.warps.assign((w.nthreads + 31) / 32, Warp());
    if (cfg.shared_bytes > w.dyn_smem_cap) {
        free(w.dyn_smem);
        size_t cap = (cfg.shared_bytes + 255) & ~size_t(255);
        w.dyn_smem = static_cast<unsigned char*>(aligned_alloc(256, cap));
        w.dyn_smem_cap = cap;
    }
}

unsigned grid_coord(const LaunchConfig& cfg, long long b, int axis) {
    if (axis == 0) return unsigned(b % cfg.grid[0]);
    if (axis == 1) return unsigned((b / cfg.grid[0]) % cfg.grid[1]);
    return unsigned(b / ((long long)cfg.grid[0] * cfg.grid[1]));
}

// Every block at once, block b on OpenMP thread b: all of them can wait at a
// grid_sync together, as on a GPU whose grid is co-resident.
int launch_cooperative(KernelThunk thunk, const void* kfn, const LaunchConfig& cfg,
                              void* const* args, long long n, int block_threads) {
    long long limit = max_cooperative_blocks(block_threads);
    if (n > limit) {
        record_error("cooperative launch of " + std::to_string(n) + " blocks of " +
                     std::to_string(block_threads) + " threads: the emulator can keep at most " +
                     std::to_string(limit) + " co-resident (each block is an OS thread: at most " +
                     std::to_string(kMaxCooperativeBlocks) + " blocks and " +
                     std::to_string(kMaxCooperativeThreads) + " threads in all)");
        return 1;
    }
    g_grid.num_blocks = (unsigned)n;
    g_grid.arrived = 0;
    g_grid.generation = 0;
    g_grid.site = Site();
    g_grid.exited = 0;
    // Block b on this OS thread's worker: the kernel run, then its exit noted for grid_sync.
    auto grid_block = [&](long long b) -> Worker* {
        Worker* w = get_worker(cfg);
        setup_block_shape(*w, cfg);
        w->thunk = thunk;
        w->kfn = kfn;
        w->args = args;
        uint3 idx;
        idx.x = grid_coord(cfg, b, 0);
        idx.y = grid_coord(cfg, b, 1);
        idx.z = grid_coord(cfg, b, 2);
        if (!launch_failed()) run_block(*w, idx.x, idx.y, idx.z);
        grid_block_exited(idx);
        return w;
    };
#if defined(EMU_RACECHECK)
    // A thread per block that TSan sees start and end (emu_racecheck.h); the same body.
    auto block = [&](long long b) { grid_block(b); };
    auto done = [](long long) {
        Worker* w = t_worker;
        for (Fiber* f : w->pool) free_fiber(f);
        race_worker_exit(*w);
        free(w->dyn_smem);
        delete w;
        t_worker = nullptr;
    };
    race_run_cooperative(n, block, done);
    return launch_failed() ? 1 : 0;
#endif
#pragma omp parallel num_threads((int)n)
    {
        int team = omp_get_num_threads();
        if (team < n) {
            if (omp_get_thread_num() == 0)
                record_error("cooperative launch of " + std::to_string(n) +
                             " blocks: OpenMP started only " + std::to_string(team) +
                             " threads (OMP_THREAD_LIMIT? OMP_DYNAMIC?), so the emulator can keep "
                             "at most " + std::to_string(team) + " co-resident");
        } else {
            long long b = omp_get_thread_num();
            Worker* w = grid_block(b);
            w->cfg = nullptr;
            // Threads past the usual team ran only for this launch: their fiber stacks
            // (a block's worth each) would stay resident until the process ends.
            if (b >= omp_default_threads()) {
                for (Fiber* f : w->pool) free_fiber(f);
                w->pool.clear();
            }
        }
    }
    return launch_failed() ? 1 : 0;
}

int launch(KernelThunk thunk, const void* kfn, const LaunchConfig& cfg, void* const* args) {
    RaceLaunchScope race_launch;  // race-check builds: the blocks see what came before
    g_error.set.store(0);
    g_error.message[0] = 0;
    unsigned long long nblocks = 1ull * cfg.grid[0] * cfg.grid[1] * cfg.grid[2];
    unsigned long long nthreads = 1ull * cfg.block[0] * cfg.block[1] * cfg.block[2];
    if (nthreads == 0 || nthreads > 1024 || nblocks == 0) {
        record_error("invalid launch configuration: grid (" + std::to_string(cfg.grid[0]) + "," +
                     std::to_string(cfg.grid[1]) + "," + std::to_string(cfg.grid[2]) + "), block (" +
                     std::to_string(cfg.block[0]) + "," + std::to_string(cfg.block[1]) + "," +
                     std::to_string(cfg.block[2]) + ") (1..1024 threads per block)");
        return 1;
    }
    long long n = (long long)nblocks;
    if (cfg.cooperative) return launch_cooperative(thunk, kfn, cfg, args, n, (int)nthreads);
    // No more OS threads than blocks; a one-block launch stays on the calling
    // thread (waking a team costs more than a small kernel).
    long long want = cfg.num_threads > 0 ? cfg.num_threads : omp_default_threads();
    int team = (int)std::max(1LL, std::min(want, n));
#pragma omp parallel num_threads(team) if (team > 1)
    {
        Worker* w = get_worker(cfg);
        setup_block_shape(*w, cfg);
        w->thunk = thunk;
        w->kfn = kfn;
        w->args = args;
#pragma omp for schedule(dynamic, 1)
        for (long long b = 0; b < n; ++b) {
            if (launch_failed()) continue;
            run_block(*w, grid_coord(cfg, b, 0), grid_coord(cfg, b, 1), grid_coord(cfg, b, 2));
        }
        w->cfg = nullptr;
    }
    return launch_failed() ? 1 : 0;
}

// ---------------------------------------------------------------- switch benchmark
// Nanoseconds per context switch: the scheduler and one fiber ping-pong `iters`
// times (two switches per round trip).
double measure_switch_ns(long long iters, unsigned long long stack_bytes) {
    if (!t_worker) t_worker = new Worker();
    Worker& w = *t_worker;
    if (w.stack_bytes != stack_bytes) {
        for (Fiber* f : w.pool) free_fiber(f);
        w.pool.clear();
        w.stack_bytes = stack_bytes;
    }
    w.round.clear();
    w.round_pos = 0;
    w.aborted = false;
    Fiber* f = get_fiber(w, 0);
    if (!f) return -1.0;
    f->ping = true;
    f->plain = false;
    prepare_fiber(f);
    resume(w, f);  // first entry
    auto t0 = std::chrono::steady_clock::now();
    for (long long i = 0; i < iters; ++i) resume(w, f);
    auto t1 = std::chrono::steady_clock::now();
    f->ping = false;
    return std::chrono::duration<double, std::nano>(t1 - t0).count() / (2.0 * iters);
}

}  // namespace emu

// ---------------------------------------------------------------- misaligned accesses
// The AddressSanitizer build also compiles with -fsanitize=alignment (EMU_ALIGNCHECK): g++
// checks the alignment of every typed access and calls this handler (the module's own, in
// place of libubsan's report) on a misaligned one. A GPU faults on those ("misaligned
// address": a float4 / uint4 / double2 access off its 16-byte boundary, a float off 4),
// where a CPU reads on; here the kernel fails naming the type, the address and the site,
// as the cp.async checks do.
#if defined(EMU_ALIGNCHECK)
namespace emu {
namespace ubsan {
struct SourceLocation {
    const char* file;
    unsigned line, column;
};
struct TypeDescriptor {
    unsigned short kind, info;
    char name[1];
};
struct TypeMismatchData {  // libubsan's layout of the call's static data
    SourceLocation loc;
    const TypeDescriptor* type;
    unsigned char log_alignment, check_kind;
};
}  // namespace ubsan
}  // namespace emu

extern "C" void __ubsan_handle_type_mismatch_v1(void* data, void* ptr) {
    const auto* d = static_cast<const ::emu::ubsan::TypeMismatchData*>(data);
    const uintptr_t align = uintptr_t(1) << d->log_alignment;
    if (ptr == nullptr || reinterpret_cast<uintptr_t>(ptr) % align == 0) return;
    char where[64];
    snprintf(where, sizeof where, "%p", ptr);
    ::emu::fail("misaligned access: " + std::string(d->type->name) + " needs " +
                std::to_string(align) + "-byte alignment, address " + where + " (" +
                (d->loc.file ? d->loc.file : "?") + ":" + std::to_string(d->loc.line) + ")");
}
#endif
