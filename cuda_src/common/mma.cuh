// mma.cuh — the warp-level tensor-core layer: mma.sync, ldmatrix and cp.async.
//
// Every tensor-core kernel (convolution in every direction, attention, RNN GEMMs) uses
// these functions and never writes `asm` of its own. Under NVRTC each one is a single
// PTX instruction; under the CPU emulator (CUDNNLITE_EMULATOR) each is a warp-collective
// operation of emu_mma.h that implements the PTX ISA's per-lane fragment layout exactly,
// so a kernel that assumes the wrong layout computes wrong numbers on the CPU too.
//
// Fragment layouts (PTX ISA, "Matrix fragments for mma.m16n8k16 / m16n8k8"), with
// g = lane >> 2 (groupID) and t = lane & 3 (threadID_in_group):
//   m16n8k16 f16/bf16, A (16 x 16, row): 4 x b32, each two 16-bit values (low half first)
//     a[0] = A[g][2t, 2t+1]     a[1] = A[g+8][2t, 2t+1]
//     a[2] = A[g][2t+8, 2t+9]   a[3] = A[g+8][2t+8, 2t+9]
//   B (16 x 8, col): b[0] = B[2t, 2t+1][g]   b[1] = B[2t+8, 2t+9][g]
//   C, D (16 x 8, f32): c[0..1] = C[g][2t, 2t+1]   c[2..3] = C[g+8][2t, 2t+1]
//   m16n8k8 tf32, A (16 x 8): a[0] = A[g][t]  a[1] = A[g+8][t]  a[2] = A[g][t+4]
//     a[3] = A[g+8][t+4];  B (8 x 8): b[0] = B[t][g]  b[1] = B[t+4][g];  C, D as above.
//   m8n8k4 f64, A (8 x 4, row): a = A[g][t];  B (4 x 8, col): b = B[t][g];
//     C, D (8 x 8, f64): c[0..1] = C[g][2t, 2t+1]  (one double per a, b register).
//   ldmatrix .m8n8 .b16: lanes 8i..8i+7 give the row addresses (16 bytes each, 16-byte
//     aligned, shared memory) of matrix i; lane l receives r[i] = M_i[l/4][2(l%4), +1],
//     or with .trans r[i] = M_i[2(l%4), +1][l/4] (the transposed matrix).
//   So for a row-major A tile in shared memory, ldmatrix_x4 with lane l pointing at row
//   (l % 16), column 8 * (l / 16) yields a[0..3] directly; for a B tile stored n-major
//   (k contiguous), ldmatrix_x4 with lane l at row (l % 8) + 8 * (l / 16), column
//   8 * ((l / 8) % 2) yields b[0..1] of two n8 tiles; a k-major B tile uses .trans.
//
// cp.async: a 4, 8 or 16 byte copy from global to shared memory that completes only at
// cp_async_wait<N>() (this thread's committed groups but the newest N are done); other
// threads see the data after a barrier. `valid == false` writes zeros and reads nothing
// (padding and tile edges). The emulator fills the destination with 0xFF (NaN in every
// float format) at issue and writes the data at the wait, so a missing wait or barrier
// shows up as NaN on the CPU.
//
// Architectures: ldmatrix sm_75+; mma f16 sm_75+ (two m16n8k8 below sm_80); bf16, tf32
// and f64 mma sm_80+ (trap below); cp.async sm_80+ (a synchronous copy below); wgmma
// sm_90a only (the Hopper section at the end; a trap elsewhere).
#pragma once

#include "common/cudnnlite.cuh"

#if defined(CUDNNLITE_EMULATOR) || !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define CL_MMA_SM80 1
#else
#define CL_MMA_SM80 0
#endif

// The warp-collective functions below take their caller's file and line on the emulator,
// which names them in its reports (a partial warp, an exited lane); nothing on a GPU.
#ifdef CUDNNLITE_EMULATOR
#define CL_MMA_SITE , const char *site_file = __builtin_FILE(), int site_line = __builtin_LINE()
#define CL_MMA_SITE_PARAMS , const char *site_file, int site_line
#define CL_MMA_AT , site_file, site_line
#else
#define CL_MMA_SITE
#define CL_MMA_SITE_PARAMS
#define CL_MMA_AT
#endif

namespace cl {
namespace mma {

// ------------------------------------------------------------------ tf32
// An fp32 value rounded to nearest to a 10-bit mantissa (TF32), returned as the b32
// register an m16n8k8 tf32 fragment holds (low 13 bits zero). Ties: to even on sm_90+,
// where `cvt.rn.tf32.f32` is one instruction (F2FP), and on the emulator, which follows
// the library's target GPU; away from zero on sm_80-89, whose only TF32 conversion is
// `cvt.rna` (a compare and a predicated add). The two differ only where the dropped 13
// bits are exactly half a TF32 unit. Inf passes through; NaN stays NaN.
__device__ __forceinline__ unsigned to_tf32(float x) {
#ifdef CUDNNLITE_EMULATOR
    unsigned u;
    memcpy(&u, &x, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) {  // finite: add just under half, plus the
        u += 0xfffu + ((u >> 13) & 1u);      // kept LSB (a tie rounds up to even only)
        u &= 0xffffe000u;
    }
    return u;
#elif defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    unsigned u;
    asm("cvt.rn.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
    return u;
#elif CL_MMA_SM80
    unsigned u;
    asm("cvt.rna.tf32.f32 %0, %1;" : "=r"(u) : "f"(x));
    return u;
#else
    return __float_as_uint(x);
#endif
}

// ------------------------------------------------------------------ packing
// Two 16-bit values in one b32 register, the first in the low half (PTX order).
template <typename T>
__device__ __forceinline__ unsigned pack2(T lo, T hi) {
    unsigned short l, h;
    memcpy(&l, &lo, 2);
    memcpy(&h, &hi, 2);
    return (unsigned)l | ((unsigned)h << 16);
}

#ifndef CUDNNLITE_EMULATOR
__device__ __forceinline__ unsigned smem_addr(const void* p) {
    return (unsigned)__cvta_generic_to_shared(p);
}
#endif

// ------------------------------------------------------------------ ldmatrix
// N = 1, 2 or 4 matrices of 8 x 8 16-bit values; `row` is this lane's row address.
template <int N, bool Trans>
__device__ __forceinline__ void ldmatrix(unsigned (&r)[N], const void* row CL_MMA_SITE) {
    static_assert(N == 1 || N == 2 || N == 4, "ldmatrix: 1, 2 or 4 matrices");
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::ldmatrix(N, Trans, r, row CL_MMA_AT);
#else
    const unsigned a = smem_addr(row);
    if constexpr (N == 1 && !Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.shared.b16 {%0}, [%1];" : "=r"(r[0]) : "r"(a));
    if constexpr (N == 1 && Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x1.trans.shared.b16 {%0}, [%1];"
                     : "=r"(r[0]) : "r"(a));
    if constexpr (N == 2 && !Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.shared.b16 {%0, %1}, [%2];"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    if constexpr (N == 2 && Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x2.trans.shared.b16 {%0, %1}, [%2];"
                     : "=r"(r[0]), "=r"(r[1]) : "r"(a));
    if constexpr (N == 4 && !Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]),
                       "=r"(r[3])
                     : "r"(a));
    if constexpr (N == 4 && Trans)
        asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];"
                     : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]),
                       "=r"(r[3])
                     : "r"(a));
#endif
}

template <int N>
__device__ __forceinline__ void ldmatrix(unsigned (&r)[N], const void* row CL_MMA_SITE) {
    ldmatrix<N, false>(r, row CL_MMA_AT);
}
template <int N>
__device__ __forceinline__ void ldmatrix_trans(unsigned (&r)[N], const void* row CL_MMA_SITE) {
    ldmatrix<N, true>(r, row CL_MMA_AT);
}

// ------------------------------------------------------------------ mma.sync
// d = a * b + c, fp32 accumulation; T = __half or __nv_bfloat16 (the input type).
template <typename T>
__device__ __forceinline__ void mma_m16n8k16(float (&d)[4], const unsigned (&a)[4],
                                             const unsigned (&b)[2],
                                             const float (&c)[4] CL_MMA_SITE);

template <>
__device__ __forceinline__ void mma_m16n8k16<__half>(float (&d)[4], const unsigned (&a)[4],
                                                     const unsigned (&b)[2],
                                                     const float (&c)[4] CL_MMA_SITE_PARAMS) {
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::mma(::emu::tc::kF16, d, a, b, c CL_MMA_AT);
#elif CL_MMA_SM80
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %11, %12, %13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
#elif __CUDA_ARCH__ >= 750
    // Turing: two k8 halves; a[0..1], b[0] hold k 0..7 and a[2..3], b[1] k 8..15.
    float t[4];
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%7, %8, %9, %10};"
        : "=f"(t[0]), "=f"(t[1]), "=f"(t[2]), "=f"(t[3])
        : "r"(a[0]), "r"(a[1]), "r"(b[0]), "f"(c[0]), "f"(c[1]), "f"(c[2]), "f"(c[3]));
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
        "{%7, %8, %9, %10};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[2]), "r"(a[3]), "r"(b[1]), "f"(t[0]), "f"(t[1]), "f"(t[2]), "f"(t[3]));
#else
    __trap();
#endif
}

template <>
__device__ __forceinline__ void mma_m16n8k16<__nv_bfloat16>(float (&d)[4], const unsigned (&a)[4],
                                                            const unsigned (&b)[2],
                                                            const float (&c)[4]
                                                                CL_MMA_SITE_PARAMS) {
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::mma(::emu::tc::kBF16, d, a, b, c CL_MMA_AT);
#elif CL_MMA_SM80
    asm volatile(
        "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %11, %12, %13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
#else
    __trap();
#endif
}

// d = a * b + c with TF32 inputs (registers from to_tf32; the hardware reads 19 bits).
__device__ __forceinline__ void mma_m16n8k8_tf32(float (&d)[4], const unsigned (&a)[4],
                                                 const unsigned (&b)[2],
                                                 const float (&c)[4] CL_MMA_SITE) {
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::mma(::emu::tc::kTF32, d, a, b, c CL_MMA_AT);
#elif CL_MMA_SM80
    asm volatile(
        "mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
        "{%8, %9}, {%10, %11, %12, %13};"
        : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
        : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]),
          "f"(c[2]), "f"(c[3]));
#else
    __trap();
#endif
}

// ------------------------------------------------------------------ fp64 (DMMA)
// d = a * b + c in double, m8n8k4 (A 8 x 4 row, B 4 x 8 col, C/D 8 x 8); sm_80+, a trap
// below (callers check Capabilities.bf16_tensor_cores, the sm_80 tensor-core generation).
// One double of A and of B per lane, two of C/D; with g = lane >> 2, t = lane & 3:
//   a = A[g][t]    b = B[t][g]    c[i], d[i] = C[g][2t + i], i = 0, 1.
// The GPU's order of the four products' additions is unspecified; the emulator computes
// c[i] then fma(A[g][k], B[k][2t+i], acc) for k = 0..3 in order (emu_mma.h).
__device__ __forceinline__ void mma_m8n8k4_f64(double (&d)[2], double a, double b,
                                               const double (&c)[2] CL_MMA_SITE) {
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::mma_f64(d, a, b, c CL_MMA_AT);
#elif CL_MMA_SM80
    asm volatile(
        "mma.sync.aligned.m8n8k4.row.col.f64.f64.f64.f64 {%0, %1}, {%2}, {%3}, {%4, %5};"
        : "=d"(d[0]), "=d"(d[1])
        : "d"(a), "d"(b), "d"(c[0]), "d"(c[1]));
#else
    __trap();
#endif
}

// acc[i][j] += sum over KSTEPS k4 steps s of X[x0 + 8i + g][4s + t] * Y[y0 + 8j + g][4s +
// t], with X (FI m8 row tiles from row x0) and Y (FJ n8 row tiles from row y0) row-major
// tiles of LD doubles a row in shared memory: the m8n8k4 fragments of A = X and B = Y^T
// (a = X[g][t], b = Y[g][t]), every index a compile-time offset from the lane's row.
// DMMA convolution's and attention's k loops.
template <int FI, int FJ, int KSTEPS, int LD>
__device__ __forceinline__ void dmma_rows(double (&acc)[FI][FJ][2], const double* x, int x0,
                                          const double* y, int y0, int g,
                                          int t CL_MMA_SITE) {
    const double* xa = x + (x0 + g) * LD + t;
    const double* yb = y + (y0 + g) * LD + t;
#pragma unroll
    for (int s = 0; s < KSTEPS; ++s) {
        double a[FI], b[FJ];
#pragma unroll
        for (int i = 0; i < FI; ++i) a[i] = xa[i * 8 * LD + 4 * s];
#pragma unroll
        for (int j = 0; j < FJ; ++j) b[j] = yb[j * 8 * LD + 4 * s];
#pragma unroll
        for (int i = 0; i < FI; ++i)
#pragma unroll
            for (int j = 0; j < FJ; ++j)
                mma_m8n8k4_f64(acc[i][j], a[i], b[j], acc[i][j] CL_MMA_AT);
    }
}

// ------------------------------------------------------------------ cp.async
// Bytes = 4, 8 or 16; dst in shared memory, src in global memory, both Bytes-aligned.
template <int Bytes>
__device__ __forceinline__ void cp_async(void* dst, const void* src, bool valid) {
    static_assert(Bytes == 4 || Bytes == 8 || Bytes == 16, "cp.async copies 4, 8 or 16 bytes");
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::cp_async(dst, src, Bytes, valid);
#elif CL_MMA_SM80
    const unsigned d = smem_addr(dst);
    const int src_size = valid ? Bytes : 0;  // 0: nothing is read, Bytes zeros are written
    if constexpr (Bytes == 16)
        asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(d), "l"(src),
                     "r"(src_size)
                     : "memory");
    else
        asm volatile("cp.async.ca.shared.global [%0], [%1], %2, %3;" ::"r"(d), "l"(src),
                     "n"(Bytes), "r"(src_size)
                     : "memory");
#else
    // Older GPUs: a plain synchronous copy (the data is there before the wait).
    unsigned v[Bytes / 4];
    for (int i = 0; i < Bytes / 4; ++i) v[i] = valid ? static_cast<const unsigned*>(src)[i] : 0u;
    for (int i = 0; i < Bytes / 4; ++i) static_cast<unsigned*>(dst)[i] = v[i];
#endif
}

// Closes the group of this thread's cp.async issued since the last commit.
__device__ __forceinline__ void cp_async_commit() {
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::cp_async_commit();
#elif CL_MMA_SM80
    asm volatile("cp.async.commit_group;" ::: "memory");
#endif
}

// Waits until at most N of this thread's committed groups are still in flight.
template <int N>
__device__ __forceinline__ void cp_async_wait() {
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::cp_async_wait(N);
#elif CL_MMA_SM80
    asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
#endif
}

// ------------------------------------------------------------------ wgmma (sm_90a)
// Hopper's warpgroup MMA: D (64 x N, fp32) = A (64 x 16) * B (16 x N) [+ D], A and B read
// from shared memory through matrix descriptors, asynchronously. A warpgroup is 4
// consecutive warps (threads 128 w .. 128 w + 127); all 128 threads issue each
// instruction with the same descriptors. Warp i of the group holds rows 16 i .. 16 i + 15
// of D, each thread N / 2 floats in the m16n8 C layout repeated over N / 8 columns:
//   d[4 j + v] = D[16 i + g + 8 (v / 2)][8 j + 2 t + v % 2],  g = lane >> 2, t = lane & 3.
// wgmma reads shared memory through the async proxy: data written there by the generic
// proxy (stores, cp.async) reaches it only after the writer's fence_proxy_async() and then
// a barrier (the emulator checks it for cp.async data).
// Protocol: wgmma_fence() before the first wgmma and again after any other access to the
// accumulators (the emulator asks for one after every wait, the usual loop shape), the
// MMAs, wgmma_commit(), wgmma_wait<N>() (this thread's groups but the newest N done);
// shared memory an MMA reads must not change before its wait, and its accumulators are
// undefined until then (wgmma_fence_acc after the wait keeps the compiler from reading
// them early).
//
// Descriptors (wgmma_desc): K-major operands (transpose bits 0), rows m of A and n of B:
//   kSwizzleNone: core matrices of 8 rows x 16 bytes (8 rows of 8 16-bit values, 128
//     contiguous bytes), `lbo` bytes apart along k and `sbo` bytes apart along the rows:
//     (row, k) at start + (row / 8) sbo + (k / 8) lbo + (row % 8) 16 + (k % 8) 2;
//   kSwizzle128: rows of 128 bytes (64 values of k), 8-row groups `sbo` bytes apart (lbo
//     unused), the 16-byte chunk bits (4-6) of each address XORed with its bits 7-9: chunk
//     c of row r at chunk c ^ (r % 8) of a 1024-byte-aligned group, tc::swizzle's layout
//     of a [rows][64] tile (conflict-free 16-byte stores from 8 threads along a row).
// A descriptor's start address is 14 bits of (shared address >> 4); adding (bytes >> 4)
// moves it (stages, warpgroups' rows, and k-steps: 32 bytes per k16 inside a swizzled row).
//
// Only sm_90a has wgmma: modules are compiled for sm_90a on sm_90 devices
// (compile_options.codegen_options); other targets get a trap the solvers never launch.
#if defined(CUDNNLITE_EMULATOR) || defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define CL_WGMMA 1
#else
#define CL_WGMMA 0
#endif

enum WgSwizzle { kSwizzleNone = 0, kSwizzle128 = 1 };

__device__ __forceinline__ unsigned long long wgmma_desc(const void* smem, int lbo, int sbo,
                                                         WgSwizzle swizzle) {
#ifdef CUDNNLITE_EMULATOR
    const unsigned addr = ::emu::tc::shared_offset(smem);
#else
    const unsigned addr = smem_addr(smem);
#endif
    return (unsigned long long)((addr & 0x3ffffu) >> 4) |
           ((unsigned long long)((unsigned)lbo >> 4) << 16) |
           ((unsigned long long)((unsigned)sbo >> 4) << 32) |
           ((unsigned long long)swizzle << 62);
}

// fence.proxy.async.shared::cta: this thread's shared-memory writes so far become visible
// to the async proxy (wgmma's operand reads) once a barrier follows.
__device__ __forceinline__ void fence_proxy_async() {
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::fence_proxy_async();
#elif CL_WGMMA
    asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_fence() {
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::wgmma_fence();
#elif CL_WGMMA
    asm volatile("wgmma.fence.sync.aligned;" ::: "memory");
#endif
}

__device__ __forceinline__ void wgmma_commit() {
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::wgmma_commit();
#elif CL_WGMMA
    asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory");
#endif
}

template <int N>
__device__ __forceinline__ void wgmma_wait() {
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::wgmma_wait(N);
#elif CL_WGMMA
    asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
#endif
}

// After a wait: ties each accumulator register to a point after it, so that the compiler
// neither reads one earlier nor moves it across (no instruction on the GPU).
template <int C>
__device__ __forceinline__ void wgmma_fence_acc(float (&d)[C]) {
#if !defined(CUDNNLITE_EMULATOR) && CL_WGMMA
#pragma unroll
    for (int i = 0; i < C; ++i) asm volatile("" : "+f"(d[i])::"memory");
#endif
}

#define CL_WG_D8(i)                                                                        \
    "+f"(d[i]), "+f"(d[i + 1]), "+f"(d[i + 2]), "+f"(d[i + 3]), "+f"(d[i + 4]), "+f"(d[i + 5]), \
        "+f"(d[i + 6]), "+f"(d[i + 7])
#define CL_WG_D32 CL_WG_D8(0), CL_WG_D8(8), CL_WG_D8(16), CL_WG_D8(24)
#define CL_WG_D64 CL_WG_D32, CL_WG_D8(32), CL_WG_D8(40), CL_WG_D8(48), CL_WG_D8(56)
#define CL_WG_D128                                                                      \
    CL_WG_D64, CL_WG_D8(64), CL_WG_D8(72), CL_WG_D8(80), CL_WG_D8(88), CL_WG_D8(96),      \
        CL_WG_D8(104), CL_WG_D8(112), CL_WG_D8(120)
#define CL_WG_R32 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}"
#define CL_WG_R64 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}"
#define CL_WG_R128 \
    "{%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, " \
    "%16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, " \
    "%32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, " \
    "%48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, " \
    "%64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, " \
    "%80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, " \
    "%96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, " \
    "%112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, " \
    "%126, %127}"
template <typename T> struct WgType;  // (only the two 16-bit float types are defined)
template <> struct WgType<__half> { static constexpr bool kBF16 = false; };
template <> struct WgType<__nv_bfloat16> { static constexpr bool kBF16 = true; };

// d (N / 2 floats) = A * B [+ d] for one m64nNk16, N = 64, 128 or 256, T = __half or
// __nv_bfloat16; `accumulate` is scale-d (false: d = A * B).
template <typename T, int N>
__device__ __forceinline__ void wgmma(float (&d)[N / 2], unsigned long long a,
                                      unsigned long long b, bool accumulate CL_MMA_SITE) {
    static_assert(N == 64 || N == 128 || N == 256, "wgmma: m64nNk16, N = 64, 128 or 256");
    constexpr bool kBF16 = WgType<T>::kBF16;
#ifdef CUDNNLITE_EMULATOR
    ::emu::tc::wgmma(kBF16 ? ::emu::tc::kBF16 : ::emu::tc::kF16, N, d, a, b, accumulate CL_MMA_AT);
#elif CL_WGMMA
    const int scale = accumulate ? 1 : 0;
// One m64nNk16: SHAPE and TYPE strings, the D registers' operand list (REGS, OUTS) and the
// operand numbers of A's and B's descriptors and of scale-d after them (AB, S).
#define CL_WGMMA_ASM(SHAPE, TYPE, REGS, AB, S, OUTS)                                     \
    asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, " S ", 0;\n"                          \
                 "wgmma.mma_async.sync.aligned." SHAPE ".f32." TYPE "." TYPE " " REGS ", " \
                 AB ", p, 1, 1, 0, 0;\n}\n"                                              \
                 : OUTS : "l"(a), "l"(b), "r"(scale))
    if constexpr (N == 64 && !kBF16)
        CL_WGMMA_ASM("m64n64k16", "f16", CL_WG_R32, "%32, %33", "%34", CL_WG_D32);
    if constexpr (N == 64 && kBF16)
        CL_WGMMA_ASM("m64n64k16", "bf16", CL_WG_R32, "%32, %33", "%34", CL_WG_D32);
    if constexpr (N == 128 && !kBF16)
        CL_WGMMA_ASM("m64n128k16", "f16", CL_WG_R64, "%64, %65", "%66", CL_WG_D64);
    if constexpr (N == 128 && kBF16)
        CL_WGMMA_ASM("m64n128k16", "bf16", CL_WG_R64, "%64, %65", "%66", CL_WG_D64);
    if constexpr (N == 256 && !kBF16)
        CL_WGMMA_ASM("m64n256k16", "f16", CL_WG_R128, "%128, %129", "%130", CL_WG_D128);
    if constexpr (N == 256 && kBF16)
        CL_WGMMA_ASM("m64n256k16", "bf16", CL_WG_R128, "%128, %129", "%130", CL_WG_D128);
#undef CL_WGMMA_ASM
#else
    (void)kBF16;
    __trap();
#endif
}
#undef CL_WG_D128
#undef CL_WG_R128
#undef CL_WG_D8
#undef CL_WG_D32
#undef CL_WG_D64
#undef CL_WG_R32
#undef CL_WG_R64

}  // namespace mma
}  // namespace cl
