// emu_mma.h — the emulator's side of cuda_src/common/mma.cuh: mma.sync, ldmatrix and
// cp.async as the PTX ISA defines them, lane by lane.
//
// Included by cuda_emu.h after emu_wmma.h. Kernels never call these directly; they call
// cl::mma::* (mma.cuh), which routes here under CUDNNLITE_EMULATOR.
//
// Model
//  - mma.sync and ldmatrix are `.sync.aligned`: every lane of the warp must execute the
//    same instruction, converged. Here each lane publishes a pointer to its operands in
//    the warp's slot table and the 32 lanes meet (a warp rendezvous named after the
//    instruction, so two lanes at different tensor-core instructions are a divergence
//    error); each lane then reads the other lanes' operands and computes its own result
//    from the PTX fragment layout; a second meeting keeps every lane's operands alive
//    until all have read them. A warp with fewer than 32 live lanes (a partial warp, or
//    lanes that exited) is an error: undefined behaviour on a GPU. Reports name the
//    call in mma.cuh (the instruction) and, through the launcher, the kernel.
//  - mma.sync: d = c + sum_k a_k * b_k in k order, in fp32. Products of fp16, bf16 and
//    tf32 values are exact in fp32, so only the additions round (the GPU's adder tree
//    is unspecified). TF32 operands keep their top 19 bits, as the hardware reads them.
//  - mma.sync m8n8k4 f64: d = c, then d = fma(a_k, b_k, d) for k = 0..3 in order.
//  - ldmatrix: row addresses must be 16-byte aligned and in shared memory.
//  - wgmma.mma_async (sm_90a, m64nNk16, A and B from shared-memory descriptors): each
//    warp of a warpgroup (4 consecutive warps, warp w computing rows 16 (w % 4) ..) meets
//    as for mma.sync, every lane giving the same descriptors, and each lane computes its
//    D fragment (the m16n8 C layout repeated over N / 8 columns) from shared memory at
//    issue, in k order from scale-d ? d : 0. It is asynchronous as on the GPU: d holds
//    NaN from the issue until the thread's wgmma.wait_group covers it (a later wgmma on
//    the same registers chains on the pending result, as the hardware's in-order
//    accumulation does), the wait recomputes it and fails if the shared memory it read
//    changed meanwhile, and a wgmma with no wgmma.fence since the thread's last wait
//    fails. wgmma reads shared memory through the async proxy: cp.async data a thread
//    has waited for reaches it only after that thread's fence.proxy.async (then a
//    barrier), so a wgmma while any thread of the block has landed copies unfenced fails
//    (plain stores are not tracked). The no-swizzle and 128-byte-swizzle K-major
//    layouts are modeled (wg_at; the other modes fail), and descriptors address dynamic
//    shared memory by their offset from its start (cl::mma::wgmma_desc makes them so on
//    the emulator).
//  - cp.async: the source is read at issue (nothing when !valid), the destination is
//    filled with 0xFF at issue (NaN in every float format) and gets the data when the
//    issuing thread's cp_async_wait covers its group. Other threads see it whenever
//    they look after that, which on a GPU needs a barrier: a missing wait or barrier
//    reads NaN in some schedule. The copies of an exiting thread complete at its exit.
#pragma once

namespace emu {
namespace tc {

enum Kind { kF16, kBF16, kTF32 };

inline Worker& worker_checked(const char* what) {
    Worker* w = t_worker;
    if (!w || !w->current) {
        fprintf(stderr, "cudnnlite emulator: %s called outside a kernel\n", what);
        abort();
    }
    return *w;
}

// ------------------------------------------------------------------ shared memory
// Exempt from the race check: it fills w.tls_start on first use, from whichever thread.
EMU_RACE_EXEMPT inline bool in_shared_memory(const void* p, size_t bytes) {
    Worker& w = worker();
    const char* c = static_cast<const char*>(p);
    const char* dyn = reinterpret_cast<const char*>(w.dyn_smem);
    if (dyn && c >= dyn && c + bytes <= dyn + w.cfg->shared_bytes) return true;
    if (!w.tls_start) {
        void* handle = module_handle();
        void* block = nullptr;
        if (handle && dlinfo(handle, RTLD_DI_TLS_DATA, &block) == 0 && block) {
            w.tls_start = static_cast<char*>(block);
            w.tls_size = module_tls_size();
        }
    }
    return w.tls_start && c >= w.tls_start && c + bytes <= w.tls_start + w.tls_size;
}

inline std::string ptr_text(const void* p) {
    char buf[32];
    snprintf(buf, sizeof buf, "%p", p);
    return buf;
}

// ------------------------------------------------------------------ warp collectives
// Publishes `mine`, meets the whole warp, and returns the warp's slot table.
inline const void* const* collective_begin(const char* what, const void* mine, const char* file,
                                           int line) {
    Fiber* f = current_fiber(what);
    Worker& w = worker();
    Warp& warp = w.warps[f->linear / 32];
    const int lane = f->linear % 32;
    warp.slot[lane] = mine;
    warp_exchange(WarpOp::kTensor, 0xffffffffu, 0, 0, 32, file, line, what);
    if (warp.live != 0xffffffffu)
        fail(std::string(what) + " needs all 32 lanes of warp " + std::to_string(f->linear / 32) +
             " (.sync.aligned); live lanes: " + hex(warp.live) +
             " (a partial warp or lanes that exited: undefined behaviour on a GPU)");
    return warp.slot;
}

inline void collective_end(const char* what_end, const char* file, int line) {
    warp_exchange(WarpOp::kTensor, 0xffffffffu, 0, 0, 32, file, line, what_end);
}

// ------------------------------------------------------------------ ldmatrix
inline void ldmatrix(int count, bool trans, unsigned* r, const void* row,
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    const char* what = trans ? "ldmatrix.trans" : "ldmatrix";
    if (reinterpret_cast<uintptr_t>(row) % 16)
        fail(std::string(what) + ": row address " + ptr_text(row) + " is not 16-byte aligned");
    if (!in_shared_memory(row, 16))
        fail(std::string(what) + ": row address " + ptr_text(row) + " is not in shared memory");
    const void* const* rows = collective_begin(what, row, file, line);
    const int lane = worker().current->linear % 32;
    for (int i = 0; i < count; ++i) {
        unsigned short v[2];
        for (int e = 0; e < 2; ++e) {
            // Non-transposed: element (lane/4, 2(lane%4)+e) of matrix i; transposed: the
            // element at row 2(lane%4)+e, column lane/4.
            const int rr = trans ? 2 * (lane % 4) + e : lane / 4;
            const int cc = trans ? lane / 4 : 2 * (lane % 4) + e;
            const unsigned char* base = static_cast<const unsigned char*>(rows[8 * i + rr]);
            memcpy(&v[e], base + 2 * cc, 2);
        }
        r[i] = (unsigned)v[0] | ((unsigned)v[1] << 16);
    }
    collective_end(trans ? "ldmatrix.trans (end)" : "ldmatrix (end)", file, line);
}

// ------------------------------------------------------------------ mma.sync
struct MmaOperands {
    const unsigned* a;
    const unsigned* b;
};

inline float element_value(Kind kind, unsigned reg, int half) {
    if (kind == kTF32) {
        unsigned u = reg & 0xffffe000u;  // the 19 bits the hardware reads
        float f;
        memcpy(&f, &u, 4);
        return f;
    }
    unsigned short bits = (unsigned short)(reg >> (16 * half));
    if (kind == kF16) {
        __half h;
        memcpy(&h, &bits, 2);
        return __half2float(h);
    }
    __nv_bfloat16 b;
    memcpy(&b, &bits, 2);
    return __bfloat162float(b);
}

// A[row][k] from the lanes' a registers (16 x K, K = 16 or 8 for tf32).
inline float a_at(Kind kind, const void* const* ops, int row, int k) {
    if (kind == kTF32) {
        const int lane = (row % 8) * 4 + k % 4;
        const int reg = row / 8 + 2 * (k / 4);
        return element_value(kind, static_cast<const MmaOperands*>(ops[lane])->a[reg], 0);
    }
    const int lane = (row % 8) * 4 + (k % 8) / 2;
    const int reg = row / 8 + 2 * (k / 8);
    return element_value(kind, static_cast<const MmaOperands*>(ops[lane])->a[reg], k % 2);
}

// B[k][n] from the lanes' b registers (K x 8).
inline float b_at(Kind kind, const void* const* ops, int k, int n) {
    if (kind == kTF32) {
        const int lane = n * 4 + k % 4;
        return element_value(kind, static_cast<const MmaOperands*>(ops[lane])->b[k / 4], 0);
    }
    const int lane = n * 4 + (k % 8) / 2;
    return element_value(kind, static_cast<const MmaOperands*>(ops[lane])->b[k / 8], k % 2);
}

inline void mma(Kind kind, float* d, const unsigned* a, const unsigned* b, const float* c,
                const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    const char* what = kind == kF16    ? "mma.sync.m16n8k16.f16"
                       : kind == kBF16 ? "mma.sync.m16n8k16.bf16"
                                       : "mma.sync.m16n8k8.tf32";
    MmaOperands mine{a, b};
    const void* const* ops = collective_begin(what, &mine, file, line);
    const int lane = worker().current->linear % 32;
    const int g = lane >> 2, t = lane & 3;
    const int K = kind == kTF32 ? 8 : 16;
    float out[4];
    for (int i = 0; i < 4; ++i) {
        const int row = g + 8 * (i / 2), col = 2 * t + i % 2;
        float acc = c[i];
        for (int k = 0; k < K; ++k) acc = acc + a_at(kind, ops, row, k) * b_at(kind, ops, k, col);
        out[i] = acc;
    }
    collective_end("mma.sync (end)", file, line);
    for (int i = 0; i < 4; ++i) d[i] = out[i];  // d may alias c
}

// ------------------------------------------------------------------ mma.sync f64
// m8n8k4 .f64 (PTX ISA, "Matrix fragments for mma.m8n8k4 with .f64"): lane l = 4g + t
// holds A[g][t], B[t][g] and C[g][2t], C[g][2t+1]. Each d[i] = c[i] then one fma per k,
// k = 0..3 in order: each step rounds once (the GPU's order is unspecified; the tests
// allow any order's error, 8 roundings of the summed magnitude).
struct MmaF64Operands {
    double a;
    double b;
};

inline void mma_f64(double* d, double a, double b, const double* c,
                    const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    MmaF64Operands mine{a, b};
    const void* const* ops = collective_begin("mma.sync.m8n8k4.f64", &mine, file, line);
    const int lane = worker().current->linear % 32;
    const int g = lane >> 2, t = lane & 3;
    auto at = [ops](int l) { return static_cast<const MmaF64Operands*>(ops[l]); };
    double out[2];
    for (int i = 0; i < 2; ++i) {
        const int col = 2 * t + i;
        double acc = c[i];
        // A[g][k] is lane 4g + k's a; B[k][col] is lane 4 col + k's b.
        for (int k = 0; k < 4; ++k) acc = std::fma(at(4 * g + k)->a, at(4 * col + k)->b, acc);
        out[i] = acc;
    }
    collective_end("mma.sync.m8n8k4.f64 (end)", file, line);
    for (int i = 0; i < 2; ++i) d[i] = out[i];  // d may alias c
}

// ------------------------------------------------------------------ cp.async
inline void cp_async(void* dst, const void* src, int bytes, bool valid) {
    Worker& w = worker_checked("cp.async");
    Fiber* f = w.current;
    if (reinterpret_cast<uintptr_t>(dst) % bytes || (valid && reinterpret_cast<uintptr_t>(src) % bytes))
        fail("cp.async of " + std::to_string(bytes) + " bytes: addresses " + ptr_text(dst) + " <- " +
             ptr_text(src) + " are not " + std::to_string(bytes) + "-byte aligned");
    if (!in_shared_memory(dst, bytes))
        fail("cp.async: destination " + ptr_text(dst) + " is not in shared memory");
    if (valid && in_shared_memory(src, bytes))
        fail("cp.async: source " + ptr_text(src) + " is in shared memory (it must be global)");
    PendingCopy c;
    c.dst = static_cast<unsigned char*>(dst);
    c.bytes = bytes;
    c.group = -1;
    if (valid) memcpy(c.data, src, bytes);
    else memset(c.data, 0, bytes);
    memset(dst, 0xFF, bytes);  // poisoned until the wait
    f->copies.push_back(c);
}

// Closes a group: the uncommitted entries of `pending` (cp.async copies, wgmmas) join
// group number ++groups.
template <class Pending>
inline void commit_group(std::vector<Pending>& pending, long long& groups) {
    const long long g = ++groups;
    for (Pending& p : pending)
        if (p.group < 0) p.group = g;
}

inline void cp_async_commit() {
    Fiber* f = worker_checked("cp.async.commit_group").current;
    commit_group(f->copies, f->copy_groups);
}

inline void cp_async_wait(int n) {
    Fiber* f = worker_checked("cp.async.wait_group").current;
    complete_copies(f, f->copy_groups - n, false);
}


// ------------------------------------------------------------------ wgmma (sm_90a)
// The emulator's shared-window address: the offset from the block's dynamic shared memory
// (which is where the kernels' wgmma tiles live; static __shared__ tiles fail here).
inline unsigned shared_offset(const void* p) {
    Worker& w = worker_checked("wgmma descriptor");
    const unsigned char* c = static_cast<const unsigned char*>(p);
    if (!w.dyn_smem || c < w.dyn_smem || c >= w.dyn_smem + w.cfg->shared_bytes)
        fail("wgmma descriptor: " + ptr_text(p) +
             " is not in the block's dynamic shared memory (the only wgmma operand "
             "memory the emulator models)");
    return (unsigned)(c - w.dyn_smem);
}

struct WgDesc {
    unsigned start;  // shared address (the offset from dynamic shared memory)
    int lbo, sbo, swizzle;
};

inline WgDesc wg_decode(unsigned long long desc, const char* which) {
    const int swizzle = (int)(desc >> 62), base_offset = (int)((desc >> 49) & 7);
    if ((swizzle != 0 && swizzle != 1) || base_offset != 0)
        fail(std::string("wgmma: descriptor of ") + which + " has swizzle mode " +
             std::to_string(swizzle) + ", base offset " + std::to_string(base_offset) +
             ": the emulator models no swizzle (0) and the 128-byte swizzle (1), base "
             "offset 0");
    WgDesc d;
    d.start = (unsigned)((desc & 0x3fffull) << 4);
    d.lbo = (int)(((desc >> 16) & 0x3fffull) << 4);
    d.sbo = (int)(((desc >> 32) & 0x3fffull) << 4);
    d.swizzle = swizzle;
    if (swizzle == 1 && (d.start & 127) + 32 > 128)
        fail(std::string("wgmma: descriptor of ") + which + " starts " +
             std::to_string(d.start & 127) +
             " bytes into a 128-byte swizzled row: a k16 slice (32 bytes) must fit in it");
    return d;
}

// Element (row, k) of a K-major operand (row: m of A, n of B) of 16-bit values.
//   No swizzle: core matrices of 8 rows x 16 bytes (8 rows of 8 values, 128 contiguous
//     bytes), LBO bytes apart along k and SBO bytes apart along the rows.
//   128-byte swizzle: rows of 128 bytes, 8-row groups SBO bytes apart (LBO unused); the
//     16-byte chunk bits (4-6) of the address are XORed with its bits 7-9 (the row within
//     a 1024-byte-aligned group of 8): chunk c of row r lands at chunk c ^ (r % 8) when the
//     tile starts 1024-byte aligned, as tc::swizzle lays it out.
inline float wg_at(Kind kind, const WgDesc& d, int row, int k, const char* which) {
    Worker& w = worker();
    unsigned addr;
    if (d.swizzle == 0) {
        addr = d.start + (row / 8) * d.sbo + (k / 8) * d.lbo + (row % 8) * 16 + (k % 8) * 2;
    } else {
        addr = d.start + (row / 8) * d.sbo + (row % 8) * 128 + k * 2;
        addr ^= ((addr >> 7) & 7u) << 4;
    }
    if (addr + 2 > w.cfg->shared_bytes)
        fail(std::string("wgmma: ") + which + "[" + std::to_string(row) + "][" +
             std::to_string(k) + "] lies outside the block's dynamic shared memory");
    unsigned short bits;
    memcpy(&bits, w.dyn_smem + addr, 2);
    return element_value(kind, bits, 0);
}

// This lane's D fragment of m64nNk16 (count = N / 2 values) from shared memory and c.
inline void wg_compute(const PendingWgmma& p, int warp_in_group, int lane, float* out) {
    const Kind kind = (Kind)p.kind;
    const WgDesc a = wg_decode(p.a, "A"), b = wg_decode(p.b, "B");
    const int g = lane >> 2, t = lane & 3;
    for (int i = 0; i < p.count; ++i) {
        const int row = 16 * warp_in_group + g + 8 * ((i % 4) / 2);
        const int col = 8 * (i / 4) + 2 * t + i % 2;
        float acc = p.accumulate ? p.c[i] : 0.0f;
        for (int k = 0; k < 16; ++k)
            acc = acc + wg_at(kind, a, row, k, "A") * wg_at(kind, b, col, k, "B");
        out[i] = acc;
    }
}

// A thread of the block whose landed cp.async data no fence.proxy.async has covered, or
// null. (The emulator's own bookkeeping of other threads: exempt from the race check.)
EMU_RACE_EXEMPT inline const Fiber* unfenced_copies(const Worker& w) {
    for (const Fiber* g : w.by_thread)
        if (g && g->copies_unfenced) return g;
    return nullptr;
}

struct WgmmaOperands {
    unsigned long long a, b;
    int n, kind;
    bool accumulate;
};

inline void wgmma(Kind kind, int n, float* d, unsigned long long a, unsigned long long b,
                  bool accumulate, const char* file = __builtin_FILE(),
                  int line = __builtin_LINE()) {
    const char* what = kind == kF16 ? "wgmma.mma_async.m64nNk16.f32.f16"
                                    : "wgmma.mma_async.m64nNk16.f32.bf16";
    Worker& w = worker_checked(what);
    Fiber* f = w.current;
    const int warp = f->linear / 32, lane = f->linear % 32;
    if ((warp - warp % 4 + 4) * 32 > w.nthreads)
        fail(std::string(what) + ": warp " + std::to_string(warp) +
             "'s warpgroup (4 consecutive warps) is not whole in a block of " +
             std::to_string(w.nthreads) + " threads");
    if (!f->wgmma_fenced)
        fail(std::string(what) + " with no wgmma.fence since this thread's last wait_group "
                                 "(the fence orders the accumulator registers before it)");
    if (const Fiber* g = unfenced_copies(w))
        fail(std::string(what) + ": thread " + thread_name(g->tid) +
             " has cp.async data in shared memory with no fence.proxy.async since "
             "(wgmma reads through the async proxy: the writer fences, then a barrier)");
    WgmmaOperands mine{a, b, n, (int)kind, accumulate};
    const void* const* ops = collective_begin(what, &mine, file, line);
    const WgmmaOperands* first = static_cast<const WgmmaOperands*>(ops[0]);
    if (first->a != a || first->b != b || first->n != n || first->accumulate != accumulate)
        fail(std::string(what) + ": lane " + std::to_string(lane) + " of warp " +
             std::to_string(warp) + " gives other descriptors or scale-d than lane 0 "
                                    "(they must be warp-uniform)");
    collective_end("wgmma.mma_async (end)", file, line);
    PendingWgmma p;
    p.d = d;
    p.count = n / 2;
    p.kind = (int)kind;
    p.accumulate = accumulate;
    p.a = a;
    p.b = b;
    p.group = -1;
    // The registers' value as this wgmma sees it: the newest pending result on them.
    const float* c = d;
    for (const PendingWgmma& q : f->wgmmas) {
        if (q.d == d && q.count == p.count) c = q.result;
        else if (q.d < d + p.count && d < q.d + q.count)
            fail(std::string(what) + ": accumulators overlapping those of a pending wgmma");
    }
    memcpy(p.c, c, sizeof(float) * p.count);
    wg_compute(p, warp % 4, lane, p.result);
    memset(d, 0xFF, sizeof(float) * p.count);  // NaN until the wait
    f->wgmmas.push_back(p);
}

inline void wgmma_fence() { worker_checked("wgmma.fence").current->wgmma_fenced = true; }

inline void fence_proxy_async() {
    worker_checked("fence.proxy.async").current->copies_unfenced = false;
}

inline void wgmma_commit() {
    Fiber* f = worker_checked("wgmma.commit_group").current;
    commit_group(f->wgmmas, f->wgmma_groups);
}

inline void wgmma_wait(int n) {
    Fiber* f = worker_checked("wgmma.wait_group").current;
    const long long upto = f->wgmma_groups - n;
    const int warp = f->linear / 32, lane = f->linear % 32;
    size_t kept = 0;
    for (size_t i = 0; i < f->wgmmas.size(); ++i) {
        PendingWgmma& p = f->wgmmas[i];
        if (p.group >= 0 && p.group <= upto) {
            float again[128];
            wg_compute(p, warp % 4, lane, again);
            if (memcmp(again, p.result, sizeof(float) * p.count) != 0)
                fail("wgmma.wait_group: the shared memory a wgmma.mma_async read changed "
                     "before the wait (a stage refilled while the MMA was in flight)");
            memcpy(p.d, p.result, sizeof(float) * p.count);
        } else {
            f->wgmmas[kept++] = p;
        }
    }
    f->wgmmas.resize(kept);
    f->wgmma_fenced = false;
}

}  // namespace tc
}  // namespace emu
