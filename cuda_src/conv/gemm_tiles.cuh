// Tiled-GEMM building blocks shared by the GEMM-shaped convolution kernels
// (conv/implicit_gemm.cu, conv/gemm_1x1.cu).
//
// A block computes a BM x BN tile of C = A * B (A: M x Kg, B: Kg x N) in fp32, walking
// Kg in slices of BK. Each of the (BM/TM) x (BN/TN) threads owns a TM x TN micro-tile
// of C in registers (register blocking). Slices live in shared memory as floats,
// A transposed (As[k][m]) and B as Bs[k][n], so a thread reads TM (TN) consecutive
// floats per k: 16-byte shared loads when TM (TN) is a multiple of 4.
//
// mainloop() double-buffers: two shared stages; while the block multiplies slice t
// from one stage, each thread already loads slice t+1 into registers (issued before
// the multiply, so the loads are in flight during it) and stores it to the other
// stage at the top of the next iteration. One __syncthreads per slice.
//
// Loaders are small structs with fetch(slice) (global -> registers) and
// store(stage) (registers -> shared); the kernels define how A is gathered.
#pragma once

#include "conv/conv_common.cuh"

namespace gemm {

template <int BM_, int BN_, int BK_, int TM_, int TN_>
struct Tile {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, TM = TM_, TN = TN_;
    static constexpr int THREADS_M = BM / TM, THREADS_N = BN / TN;
    static constexpr int THREADS = THREADS_M * THREADS_N;
    static_assert(BM % TM == 0 && BN % TN == 0, "the micro-tile must divide the tile");
    static_assert(BK % 4 == 0, "BK must be a multiple of the widest vector (4)");
    static_assert(THREADS >= 32 && THREADS <= 1024, "32 to 1024 threads per block");
};

// VEC consecutive elements of T moved by one load (16 bytes for 4 floats, 8 for 4 halves).
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Vec {
    T v[VEC];
};

template <typename T, int VEC>
__device__ __forceinline__ void load_vec(const T* __restrict__ p, float (&out)[VEC]) {
    if constexpr (VEC == 1) {
        out[0] = cl::to_float(*p);
    } else {
        const Vec<T, VEC> v = *reinterpret_cast<const Vec<T, VEC>*>(p);
#pragma unroll
        for (int i = 0; i < VEC; ++i) out[i] = cl::to_float(v.v[i]);
    }
}

// Reads N consecutive floats of shared memory into registers (16-byte loads when N % 4 == 0;
// the offsets the callers pass are multiples of N, hence of 4 floats).
template <int N>
__device__ __forceinline__ void read_smem(const float* s, float (&r)[N]) {
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

// acc += As(:, ty*TM ..) x Bs(:, tx*TN ..) over one BK slice.
template <class Tl>
__device__ __forceinline__ void multiply_slice(const float* As, const float* Bs, int ty, int tx,
                                               float (&acc)[Tl::TM][Tl::TN]) {
#pragma unroll
    for (int k = 0; k < Tl::BK; ++k) {
        float a[Tl::TM], b[Tl::TN];
        read_smem<Tl::TM>(As + k * Tl::BM + ty * Tl::TM, a);
        read_smem<Tl::TN>(Bs + k * Tl::BN + tx * Tl::TN, b);
#pragma unroll
        for (int i = 0; i < Tl::TM; ++i)
#pragma unroll
            for (int j = 0; j < Tl::TN; ++j) acc[i][j] = fmaf(a[i], b[j], acc[i][j]);
    }
}

// The double-buffered loop over `slices` BK-slices. As: 2 stages of BK*BM floats,
// Bs: 2 stages of BK*BN floats (16-byte aligned). Every thread of the block calls it.
// Slice t is stored to stage t & 1, which multiply t - 2 read last: every thread passed
// the barrier of iteration t - 1, after its multiply t - 2, before anyone stores slice t.
// One call site per loader function keeps the inlined code (and compile time) small.
template <class Tl, class LoadA, class LoadB>
__device__ __forceinline__ void mainloop(int slices, LoadA& la, LoadB& lb, float* As, float* Bs,
                                         float (&acc)[Tl::TM][Tl::TN]) {
    const int tx = threadIdx.x % Tl::THREADS_N;
    const int ty = threadIdx.x / Tl::THREADS_N;
#pragma unroll
    for (int i = 0; i < Tl::TM; ++i)
#pragma unroll
        for (int j = 0; j < Tl::TN; ++j) acc[i][j] = 0.0f;
    la.fetch(0);
    lb.fetch(0);
    for (int t = 0; t < slices; ++t) {
        float* as = As + (t & 1) * Tl::BK * Tl::BM;
        float* bs = Bs + (t & 1) * Tl::BK * Tl::BN;
        la.store(as);
        lb.store(bs);
        __syncthreads();
        if (t + 1 < slices) {  // global loads of the next slice, in flight during the multiply
            la.fetch(t + 1);
            lb.fetch(t + 1);
        }
        multiply_slice<Tl>(as, bs, ty, tx, acc);
    }
}

// B[kk][n] = w[(k0 + n) * ktot + kk]: filters of one group, each output channel's
// ktot taps contiguous (KCRS and KRSC alike, in their own tap order). Threads walk kk
// fastest, 4 taps per thread and row; with `vec` (ktot % 4 == 0 and w aligned to 4
// elements) they are one vector load, else 4 scalar loads.
template <typename T, class Tl>
struct FilterLoader {
    static constexpr int COLS = Tl::BK / 4;  // 4-tap groups per row of a slice
    static constexpr int UNITS = Tl::BN * COLS;
    static constexpr int PER_THREAD = (UNITS + Tl::THREADS - 1) / Tl::THREADS;

    const T* __restrict__ w;  // the tile's first filter
    int ktot, rows;           // taps per filter; output channels left in the tile
    bool vec;
    float reg[PER_THREAD][4];

    __device__ __forceinline__ FilterLoader(const T* w_tile, int ktot_, int rows_, bool vec_)
        : w(w_tile), ktot(ktot_), rows(rows_), vec(vec_) {}

    __device__ __forceinline__ void fetch(int slice) {
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int u = threadIdx.x + j * Tl::THREADS;
            const int n = u / COLS, kk = slice * Tl::BK + (u % COLS) * 4;
            const T* p = w + (cl::index_t)n * ktot + kk;
            const bool live = u < UNITS && n < rows;
            if (vec && live && kk < ktot) {
                load_vec<T, 4>(p, reg[j]);
            } else {
#pragma unroll
                for (int v = 0; v < 4; ++v)
                    reg[j][v] = live && kk + v < ktot ? cl::to_float(p[v]) : 0.0f;
            }
        }
    }

    __device__ __forceinline__ void store(float* Bs) const {
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int u = threadIdx.x + j * Tl::THREADS;
            if (u < UNITS) {
                const int n = u / COLS, kk = (u % COLS) * 4;
#pragma unroll
                for (int v = 0; v < 4; ++v) Bs[(kk + v) * Tl::BN + n] = reg[j][v];
            }
        }
    }
};

}  // namespace gemm
