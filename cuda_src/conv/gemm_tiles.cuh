// The register-blocked GEMM core shared by the CUDA-core GEMM kernels
// (conv/implicit_gemm.cu, conv/gemm_1x1.cu, conv/bwd_data_implicit_gemm.cu,
// conv/bwd_filter.cu, conv/winograd.cu's batched GEMM).
//
// Element type E = cl::acc_t<T>: float for T = float | __half | __nv_bfloat16, double for
// T = double (float64 computes, stores its stages and accumulates in double). Everything
// below counts in elements of E.
//
// A block computes a BM x BN tile of C = A * B (A: M x K, B: K x N) in E, walking K in
// slices of BK. Each of the (BM/TM) x (BN/TN) threads owns a TM x TN micro-tile of C in
// registers. A slice lives in shared memory as E, both operands k-major: As[k][m]
// and Bs[k][n], rows padded by 4 elements (APITCH = BM + 4, BPITCH = BN + 4) so that the
// k-fastest loaders below write without bank conflicts (float); a thread reads TM (TN)
// elements per k with 16-byte loads (4 floats or 2 doubles).
//
// Which columns a thread owns (col_of): with TN a multiple of 4 they come in runs of 4,
// run r at column 4 * (tx + r * THREADS_N): 8 consecutive threads then read 8 consecutive
// 16-byte words of a B row, conflict-free (the former tx * TN + j layout put threads tx
// and tx + 4 on the same banks when TN = 8: a 2-way conflict on every B read). Rows stay
// contiguous (ty * TM + i): threads of one quarter-warp share ty and read the same A
// words (a broadcast).
//
// Main loops (run() picks one from the storage type):
//  - float, double (copied without conversion): a cp.async pipeline of STAGES shared stages.
//    Slices 0..STAGES-2 are issued before the loop; iteration t waits for slice t
//    (cp_async_wait<STAGES - 2>), passes one barrier, issues slice t + STAGES - 1 into the
//    stage that slice t - 1 used (every thread multiplied it before the barrier), then
//    multiplies slice t. One barrier per slice; no data passes through registers.
//  - __half / __nv_bfloat16 (cp.async cannot convert to float): two stages staged in
//    registers; slice t + 1 is loaded into registers before multiplying slice t and stored
//    to the other stage at the top of the next iteration.
// The reduction order is the same in both: k ascending, one fma per (i, j, k) in E.
//
// Loaders (one per operand) describe which global elements go where:
//   VECS, VEC                  vectors per thread per slice, elements per vector (1 or 4,
//                              contiguous in both global and shared memory; 4 doubles
//                              are two 16-byte copies)
//   Layout                     KFast or RowFast4 below (Layout::live(j): vector j exists)
//   offset(j)                  shared offset (elements, within a stage) of vector j
//   template <class Sink> void next(Sink& sink)
//                              for each vector j of the next slice calls
//                              sink.template put<W>(j, v, src, valid): W elements (W = VEC,
//                              or 1 for a scalar fallback, then v = 0..VEC-1) at src go to
//                              offset(j) + v; !valid stores zeros and reads nothing (src
//                              may then point anywhere: it is never dereferenced). Then
//                              the loader advances to the following slice (adding, never
//                              dividing: no integer division in a main loop).
// Loaders here: RowLoader (operand contiguous along M or N: 16-byte copies) and ColLoader
// (contiguous along K: 4-byte copies, 8 k x 4 rows per warp so the transposing writes hit
// 32 distinct banks). The kernels add their gathers (implicit GEMM taps, patches).
#pragma once

#include "common/mma.cuh"
#include "conv/conv_common.cuh"

namespace gemm {

// Storage types copied into the stages as they are (cp.async): float and double.
template <typename T> struct IsFloat { static constexpr bool value = false; };
template <> struct IsFloat<float> { static constexpr bool value = true; };
template <> struct IsFloat<double> { static constexpr bool value = true; };

template <int BM_, int BN_, int BK_, int TM_, int TN_, int STAGES_>
struct Tile {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_, STAGES = STAGES_;
    static constexpr int THREADS_M = BM / TM, THREADS_N = BN / TN;
    static constexpr int THREADS = THREADS_M * THREADS_N, WARPS = THREADS / 32;
    static constexpr int APITCH = BM + 4, BPITCH = BN + 4;
    static constexpr int A_STAGE = BK * APITCH, B_STAGE = BK * BPITCH;  // elements
    // __launch_bounds__ minimum: 16 warps per SM (256 threads: 2 blocks, <= 128 registers)
    static constexpr int MIN_BLOCKS = 512 / THREADS > 1 ? 512 / THREADS : 1;
    static_assert(BM % TM == 0 && BN % TN == 0, "the micro-tile must divide the tile");
    static_assert(TM % 4 == 0 || TM < 4, "TM: a multiple of 4, or 1 or 2");
    static_assert(TN % 4 == 0 || TN < 4, "TN: a multiple of 4, or 1 or 2");
    static_assert(BK % 8 == 0, "BK: a multiple of 8 (8 k per warp row in ColLoader)");
    static_assert(THREADS % 32 == 0 && THREADS <= 1024, "whole warps, at most 1024 threads");
    static_assert(STAGES >= 2, "at least two shared stages");

    __device__ __forceinline__ static int col_of(int tx, int j) {
        if constexpr (TN % 4 == 0) return 4 * (tx + (j / 4) * THREADS_N) + j % 4;
        else return tx * TN + j;
    }
    __device__ __forceinline__ static int row_of(int ty, int i) { return ty * TM + i; }
};

// Shared elements (of type Smem::E = cl::acc_t<T>) a kernel declares for tile Tl and
// storage type T (A stages, then B). FLOATS: the same count (the name of the fp32 era).
template <typename T, class Tl>
struct Smem {
    typedef cl::acc_t<T> E;
    static constexpr int STAGES = IsFloat<T>::value ? Tl::STAGES : 2;
    static constexpr int ELEMS = STAGES * (Tl::A_STAGE + Tl::B_STAGE);
    static constexpr int FLOATS = ELEMS;
};

template <int N> struct Width { static constexpr int value = N; };

// VEC consecutive elements of T moved by one load (16 bytes for 4 floats, 8 for 4 halves).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
    T v[VEC];
};

// VEC elements at p (16-byte aligned when VEC > 1 and sizeof(T) * VEC >= 16) into E
// registers; more than 16 bytes (4 doubles) go as 16-byte loads.
template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, cl::acc_t<T>* out) {
    constexpr int BYTES = (int)sizeof(T) * VEC;
    if constexpr (VEC == 1) {
        out[0] = cl::to_acc(*p);
    } else if constexpr (BYTES > 16) {
        constexpr int PER = 16 / (int)sizeof(T);
#pragma unroll
        for (int c = 0; c < VEC; c += PER) load_vec<T, PER>(p + c, out + c);
    } else {
        const Vec<T, VEC> v = *reinterpret_cast<const Vec<T, VEC>*>(p);
#pragma unroll
        for (int i = 0; i < VEC; ++i) out[i] = cl::to_acc(v.v[i]);
    }
}

__device__ __forceinline__ bool aligned16(const void* p) {
    return (reinterpret_cast<unsigned long long>(p) & 15) == 0;
}

// N consecutive elements of shared memory into registers (16-byte loads: 4 floats when
// N % 4 == 0, 2 doubles when N % 2 == 0).
template <int N>
__device__ __forceinline__ void read_smem(const double* s, double* r) {
    if constexpr (N % 2 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 2) {
            const double2 v = *reinterpret_cast<const double2*>(s + i);
            r[i] = v.x, r[i + 1] = v.y;
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) r[i] = s[i];
    }
}

template <int N>
__device__ __forceinline__ void read_smem(const float* s, float* r) {
    if constexpr (N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N; i += 4) {
            const float4 v = *reinterpret_cast<const float4*>(s + i);
            r[i] = v.x, r[i + 1] = v.y, r[i + 2] = v.z, r[i + 3] = v.w;
        }
    } else {
#pragma unroll
        for (int i = 0; i < N; ++i) r[i] = s[i];
    }
}

// acc += As(:, rows of ty) x Bs(:, columns of tx) over one BK slice.
template <class Tl, typename E>
__device__ __forceinline__ void multiply_slice(const E* As, const E* Bs, int ty, int tx,
                                               E (&acc)[Tl::TM][Tl::TN]) {
    constexpr int BRUN = Tl::TN % 4 == 0 ? 4 : Tl::TN;  // contiguous columns per read
#pragma unroll
    for (int k = 0; k < Tl::BK; ++k) {
        E a[Tl::TM], b[Tl::TN];
        read_smem<Tl::TM>(As + k * Tl::APITCH + ty * Tl::TM, a);
#pragma unroll
        for (int j = 0; j < Tl::TN; j += BRUN)
            read_smem<BRUN>(Bs + k * Tl::BPITCH + Tl::col_of(tx, j), b + j);
#pragma unroll
        for (int i = 0; i < Tl::TM; ++i)
#pragma unroll
            for (int j = 0; j < Tl::TN; ++j) acc[i][j] = cl::math::fma(a[i], b[j], acc[i][j]);
    }
}

// cp.async sink: each vector straight into a stage (T = E: float or double). A vector of
// more than 16 bytes (4 doubles) is issued as 16-byte copies.
template <class L, typename E>
struct AsyncSink {
    const L& l;
    E* stage;
    template <int W, typename T>
    __device__ __forceinline__ void put(int j, int v, const T* src, bool valid) {
        static_assert(sizeof(T) == sizeof(E), "cp.async copies without converting");
        constexpr int BYTES = (int)sizeof(T) * W;
        if constexpr (BYTES <= 16) {
            cl::mma::cp_async<BYTES>(stage + l.offset(j) + v, src, valid);
        } else {
            constexpr int PER = 16 / (int)sizeof(T);
#pragma unroll
            for (int c = 0; c < W; c += PER)
                cl::mma::cp_async<16>(stage + l.offset(j) + v + c, src + c, valid);
        }
    }
};

// Register sink of the converting path: fetch now, store() to a stage later.
template <class L, typename E>
struct RegSink {
    const L& l;
    E reg[L::VECS][L::VEC];
    template <int W, typename T>
    __device__ __forceinline__ void put(int j, int v, const T* src, bool valid) {
        if (valid) {
            load_vec<T, W>(src, &reg[j][v]);
        } else {
#pragma unroll
            for (int e = 0; e < W; ++e) reg[j][v + e] = E(0);
        }
    }
    __device__ __forceinline__ void store(E* stage) const {
#pragma unroll
        for (int j = 0; j < L::VECS; ++j) {
            if (!L::Layout::live(j)) continue;  // an idle thread's vector
#pragma unroll
            for (int v = 0; v < L::VEC; ++v) stage[l.offset(j) + v] = reg[j][v];
        }
    }
};

template <class Tl, typename E>
__device__ __forceinline__ void zero(E (&acc)[Tl::TM][Tl::TN]) {
#pragma unroll
    for (int i = 0; i < Tl::TM; ++i)
#pragma unroll
        for (int j = 0; j < Tl::TN; ++j) acc[i][j] = E(0);
}

template <class Tl, class LoadA, class LoadB, typename E>
__device__ __forceinline__ void mainloop_async(int slices, LoadA& la, LoadB& lb, E* smem,
                                               E (&acc)[Tl::TM][Tl::TN]) {
    constexpr int S = Tl::STAGES;
    E* As = smem;
    E* Bs = smem + S * Tl::A_STAGE;
    const int tx = threadIdx.x % Tl::THREADS_N, ty = threadIdx.x / Tl::THREADS_N;
    zero<Tl>(acc);
#pragma unroll
    for (int s = 0; s < S - 1; ++s) {
        if (s < slices) {
            AsyncSink<LoadA, E> sa{la, As + s * Tl::A_STAGE};
            AsyncSink<LoadB, E> sb{lb, Bs + s * Tl::B_STAGE};
            la.next(sa);
            lb.next(sb);
        }
        cl::mma::cp_async_commit();  // empty groups keep the count of groups per slice
    }
    int read = 0, write = S - 1;
    for (int t = 0; t < slices; ++t) {
        cl::mma::cp_async_wait<S - 2>();  // slice t has landed (this thread's copies)
        __syncthreads();                  // ... everyone's; stage `write` is free
        if (t + S - 1 < slices) {
            AsyncSink<LoadA, E> sa{la, As + write * Tl::A_STAGE};
            AsyncSink<LoadB, E> sb{lb, Bs + write * Tl::B_STAGE};
            la.next(sa);
            lb.next(sb);
        }
        cl::mma::cp_async_commit();
        multiply_slice<Tl>(As + read * Tl::A_STAGE, Bs + read * Tl::B_STAGE, ty, tx, acc);
        read = read + 1 == S ? 0 : read + 1;
        write = write + 1 == S ? 0 : write + 1;
    }
    cl::mma::cp_async_wait<0>();  // only empty groups are left; nothing lands after exit
}

// Slice t is stored to stage t & 1, which multiply t - 2 read last: every thread passed
// the barrier of iteration t - 1, after its multiply t - 2, before anyone stores slice t.
template <class Tl, class LoadA, class LoadB, typename E>
__device__ __forceinline__ void mainloop_regs(int slices, LoadA& la, LoadB& lb, E* smem,
                                              E (&acc)[Tl::TM][Tl::TN]) {
    E* As = smem;
    E* Bs = smem + 2 * Tl::A_STAGE;
    const int tx = threadIdx.x % Tl::THREADS_N, ty = threadIdx.x / Tl::THREADS_N;
    zero<Tl>(acc);
    RegSink<LoadA, E> ra{la};
    RegSink<LoadB, E> rb{lb};
    if (slices > 0) {
        la.next(ra);
        lb.next(rb);
    }
    for (int t = 0; t < slices; ++t) {
        E* as = As + (t & 1) * Tl::A_STAGE;
        E* bs = Bs + (t & 1) * Tl::B_STAGE;
        ra.store(as);
        rb.store(bs);
        __syncthreads();
        if (t + 1 < slices) {  // global loads of the next slice, in flight during the multiply
            la.next(ra);
            lb.next(rb);
        }
        multiply_slice<Tl>(as, bs, ty, tx, acc);
    }
}

// The main loop for storage type T over `slices` BK-slices; smem holds Smem<T, Tl>::ELEMS
// elements of cl::acc_t<T>, 16-byte aligned. Every thread of the block calls it.
template <typename T, class Tl, class LoadA, class LoadB>
__device__ __forceinline__ void run(int slices, LoadA& la, LoadB& lb, cl::acc_t<T>* smem,
                                    cl::acc_t<T> (&acc)[Tl::TM][Tl::TN]) {
    if constexpr (IsFloat<T>::value) mainloop_async<Tl>(slices, la, lb, smem, acc);
    else mainloop_regs<Tl>(slices, la, lb, smem, acc);
}

// ------------------------------------------------------------------ thread layouts
// ROWS is BM (operand A) or BN (operand B).

// k-fastest (ColLoader and the gathers): a warp covers 8 consecutive k x 4 rows; warps
// tile the BK x ROWS slice, KG = BK / 8 warps across k. Vector j of a thread is its row(0)
// + j * ROW_STEP, same k: its shared offset is offset(0) + j * ROW_STEP.
template <class Tl, int ROWS>
struct KFast {
    static constexpr int KG = Tl::BK / 8;
    static_assert(Tl::WARPS % KG == 0, "warps must tile BK");
    static constexpr int ROW_STEP = 4 * (Tl::WARPS / KG);  // rows covered per pass
    static_assert(ROWS % ROW_STEP == 0, "whole passes over the rows");
    static constexpr int VECS = ROWS / ROW_STEP;
    static constexpr int PITCH = ROWS + 4, STEP = ROW_STEP;
    __device__ __forceinline__ static int k() {
        return (threadIdx.x & 7) + 8 * ((threadIdx.x >> 5) % KG);
    }
    __device__ __forceinline__ static int row(int j) {
        return ((threadIdx.x >> 3) & 3) + 4 * ((threadIdx.x >> 5) / KG) + j * ROW_STEP;
    }
    __device__ __forceinline__ static int offset0() { return k() * PITCH + row(0); }
    __device__ __forceinline__ static bool live(int) { return true; }
};

// row-fastest in vectors of 4 (RowLoader): consecutive threads take consecutive 16-byte
// words of a k row. Vector j of a thread: same row(0), k(0) + j * THREADS / GROUPS.
template <class Tl, int ROWS>
struct RowFast4 {
    static constexpr int GROUPS = ROWS / 4;  // vectors per k row
    static constexpr int UNITS = GROUPS * Tl::BK;
    static constexpr int VECS = (UNITS + Tl::THREADS - 1) / Tl::THREADS;
    static constexpr int PITCH = ROWS + 4;
    static constexpr int K_STEP = Tl::THREADS / GROUPS, STEP = K_STEP * PITCH;
    static_assert(ROWS % 4 == 0, "rows in vectors of 4");
    static_assert(Tl::THREADS % GROUPS == 0, "every thread keeps its columns");
    __device__ __forceinline__ static int k(int j) { return threadIdx.x / GROUPS + j * K_STEP; }
    __device__ __forceinline__ static int row(int) { return threadIdx.x % GROUPS * 4; }
    __device__ __forceinline__ static int offset0() { return k(0) * PITCH + row(0); }
    __device__ __forceinline__ static bool live(int j) {  // false: an idle thread's vector
        return UNITS % Tl::THREADS == 0 || j + 1 < VECS || k(j) < Tl::BK;
    }
};

// Shared offsets of a loader's vectors (layout L), kept in one register.
template <class L>
struct Offsets {
    int off0;
    __device__ __forceinline__ Offsets() : off0(L::offset0()) {}
    __device__ __forceinline__ int operator()(int j) const { return off0 + j * L::STEP; }
};

// Operand element (k, r) at p[k * ld + r], r < ROWS of the tile: 4-element copies (16 bytes of
// float, two of 16 bytes of double) when `vec` (ld % 4 == 0, p 16-byte aligned, the row bound a
// multiple of 4), else 4 scalar copies. Bounds: k < kend, r < rend (from the tile's first row
// and the slice's first k).
template <typename T, class Tl, int ROWS>
struct RowLoader {
    using L = RowFast4<Tl, ROWS>;
    using Layout = L;
    static constexpr int VECS = L::VECS, VEC = 4;
    const T* p;  // element (this thread's k in the next slice, its row)
    int ld;
    int kleft, rleft;  // bounds relative to this thread's k(0) and row
    bool vec;
    Offsets<L> offset;

    __device__ __forceinline__ RowLoader(const T* p_, int ld_, int kend, int rend, bool vec_)
        : p(p_ + (cl::index_t)L::k(0) * ld_ + L::row(0)), ld(ld_), kleft(kend - L::k(0)),
          rleft(rend - L::row(0)), vec(vec_) {}

    template <class Sink>
    __device__ __forceinline__ void next(Sink& sink) {
#pragma unroll
        for (int j = 0; j < VECS; ++j) {
            if (!L::live(j)) continue;
            const T* src = p + j * L::K_STEP * ld;
            const bool kin = j * L::K_STEP < kleft;
            if (vec) {  // the row bound is a multiple of 4 (vec's condition): all or nothing
                const bool ok = kin && 0 < rleft;
                sink.template put<4>(j, 0, src, ok);
            } else {
#pragma unroll
                for (int v = 0; v < 4; ++v) {
                    const bool ok = kin && v < rleft;
                    sink.template put<1>(j, v, src + v, ok);
                }
            }
        }
        p += (cl::index_t)Tl::BK * ld;
        kleft -= Tl::BK;
    }
};

// Operand element (k, r) at p[r * ld + k] (contiguous along k): element copies.
template <typename T, class Tl, int ROWS>
struct ColLoader {
    using L = KFast<Tl, ROWS>;
    using Layout = L;
    static constexpr int VECS = L::VECS, VEC = 1;
    const T* p;  // element (k of this thread in the next slice, row(0))
    int ld;
    int kleft, rleft;  // bounds relative to this thread's k and row(0)
    Offsets<L> offset;

    __device__ __forceinline__ ColLoader(const T* p_, int ld_, int kend, int rend)
        : p(p_ + (cl::index_t)L::row(0) * ld_ + L::k()), ld(ld_), kleft(kend - L::k()),
          rleft(rend - L::row(0)) {}

    template <class Sink>
    __device__ __forceinline__ void next(Sink& sink) {
#pragma unroll
        for (int j = 0; j < VECS; ++j) {
            const bool ok = kleft > 0 && j * L::ROW_STEP < rleft;
            sink.template put<1>(j, 0, p + j * L::ROW_STEP * ld, ok);
        }
        p += Tl::BK;
        kleft -= Tl::BK;
    }
};

using conv::Radix3;  // conv_common.cuh

}  // namespace gemm
