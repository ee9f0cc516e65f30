// Convolution backward filter on tensor cores (nvcuda::wmma m16n16k16, fp32 accumulation),
// deterministic split-K. ConvShape describes the FORWARD problem.
//
// GEMM per group: dW[kk][j] = sum_m dY[m][kk] * X[m][j], kk over K/g, j over the C/g*R*S
// taps in the filter's memory order (KCRS: (c, r, t); KRSC: (r, t, c)), m over N*P*Q.
// No im2col buffer: each 32-deep slice of m is gathered straight into shared memory
// (As[kk][m] and Bs[j][m], m contiguous, zeros past the ends and in the padding), then
// every warp runs WMMA on its 32 x 32 sub-tile of dW (2 x 2 fragments of 16 x 16):
// A = As row-major, B = Bs col-major.
//
// Kernels (T = __half | __nv_bfloat16; BM x BN = block tile over (K/g, taps); NHWC):
//   bwd_filter_wmma<T, BM, BN, NHWC>  grid (ceil(taps / BN), ceil(K/g / BM),
//       groups * splits), (BM/32) * (BN/32) warps. Split z covers m in
//       [z*chunk, (z+1)*chunk) and stores its fp32 partial tile (through shared memory,
//       coalesced along the taps) to ws[z][K][taps]; bwd_filter_reduce<T> of
//       conv/bwd_filter.cu then adds the splits in split order: deterministic.
// Tiles: 32x32 (1 warp), 64x64 (4 warps). Gathers coalesce along m for NCHW (q is
// contiguous in x and dy) and along the channels for NHWC.
// Below sm_80 the bf16 instantiations compile to a __trap() body (no bf16 fragments in
// <mma.h> there); the solver never launches them on such a device.
//
// Defines: none; one module per dtype (cudnnlite/solvers/conv/bwd_filter_wmma.py).
#include "common/cudnnlite.cuh"
#include "conv/conv_common.cuh"
#ifndef CUDNNLITE_EMULATOR
#include <mma.h>
#endif

using namespace nvcuda;

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define CL_BWF_WMMA_BF16 1
#else
#define CL_BWF_WMMA_BF16 0
#endif

namespace bwfw {

enum { kBK = 32, kSkew = 8 };  // m per slice; row padding (rows stay 32-byte aligned)

template <typename T, int BM, int BN, bool NHWC>
__device__ __forceinline__ void body(const T* __restrict__ x, const T* __restrict__ dy,
                                     float* __restrict__ ws, const ConvShape& s,
                                     long long chunk) {
    constexpr int LD = kBK + kSkew;
    constexpr int kThreads = (BM / 32) * (BN / 32) * 32;
    constexpr int kStageBytes = (BM + BN) * LD * (int)sizeof(T);
    constexpr int kOutBytes = BM * BN * (int)sizeof(float);
    __shared__ __align__(32) unsigned char smem[kStageBytes > kOutBytes ? kStageBytes : kOutBytes];
    T* As = reinterpret_cast<T*>(smem);          // [BM][LD]: dy rows (output channels)
    T* Bs = As + BM * LD;                        // [BN][LD]: x patches (taps)
    float* Cs = reinterpret_cast<float*>(smem);  // [BM][BN] after the main loop

    const int g = blockIdx.z % s.groups, split = blockIdx.z / s.groups;
    const int jtot = s.c_per_group * s.r * s.s;
    const int j0 = blockIdx.x * BN, kk0 = blockIdx.y * BM;
    const int kbase = g * s.k_per_group + kk0, cbase = g * s.c_per_group;
    const int pq = s.p * s.q;
    const cl::index_t npq = (cl::index_t)s.n * pq;
    const cl::index_t m_begin = (cl::index_t)split * chunk;
    const cl::index_t m_end = m_begin + chunk < npq ? m_begin + chunk : npq;
    const int warp = threadIdx.x / 32;
    const int wm = warp / (BN / 32), wn = warp % (BN / 32);
    const T zero = cl::from_float<T>(0.0f);

    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (cl::index_t m0 = m_begin; m0 < m_end; m0 += kBK) {
        // A: As[kk][mm] = dy[n, kbase + kk, p, q]
#pragma unroll 4
        for (int u = threadIdx.x; u < BM * kBK; u += kThreads) {
            const int mm = NHWC ? u / BM : u % kBK;
            const int kk = NHWC ? u % BM : u / kBK;
            const cl::index_t m = m0 + mm;
            T v = zero;
            if (m < m_end && kk0 + kk < s.k_per_group) {
                const int n = (int)(m / pq), j = (int)(m - (cl::index_t)n * pq);
                const cl::index_t off = NHWC ? ((cl::index_t)n * pq + j) * s.k + kbase + kk
                                             : ((cl::index_t)n * s.k + kbase + kk) * pq + j;
                v = dy[off];
            }
            As[kk * LD + mm] = v;
        }
        // B: Bs[jj][mm] = x at tap j0 + jj of output position m (0 in the padding)
#pragma unroll 4
        for (int u = threadIdx.x; u < BN * kBK; u += kThreads) {
            const int mm = NHWC ? u / BN : u % kBK;
            const int jj = NHWC ? u % BN : u / kBK;
            const cl::index_t m = m0 + mm;
            const int j = j0 + jj;
            T v = zero;
            if (m < m_end && j < jtot) {
                int c, r, t;
                if (NHWC) {
                    c = j % s.c_per_group;
                    const int rt = j / s.c_per_group;
                    t = rt % s.s, r = rt / s.s;
                } else {
                    t = j % s.s;
                    const int cr = j / s.s;
                    r = cr % s.r, c = cr / s.r;
                }
                const int n = (int)(m / pq), pj = (int)(m - (cl::index_t)n * pq);
                const int p = pj / s.q, q = pj - p * s.q;
                const int h = p * s.stride_h - s.pad_h + r * s.dil_h;
                const int ww = q * s.stride_w - s.pad_w + t * s.dil_w;
                if ((unsigned)h < (unsigned)s.h && (unsigned)ww < (unsigned)s.w)
                    v = x[conv::x_offset<NHWC>(s, n, cbase + c, h, ww)];
            }
            Bs[jj * LD + mm] = v;
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < kBK; ks += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, T, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 2; ++i)
                wmma::load_matrix_sync(a[i], As + (wm * 32 + 16 * i) * LD + ks, LD);
#pragma unroll
            for (int j = 0; j < 2; ++j)
                wmma::load_matrix_sync(b[j], Bs + (wn * 32 + 16 * j) * LD + ks, LD);
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // the next slice overwrites As/Bs (and Cs aliases them)
    }

#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(Cs + (wm * 32 + 16 * i) * BN + wn * 32 + 16 * j, acc[i][j], BN,
                                    wmma::mem_row_major);
    __syncthreads();
    float* out = ws + (cl::index_t)split * s.k * jtot;
    for (int u = threadIdx.x; u < BM * BN; u += kThreads) {
        const int kk = u / BN, jj = u % BN;  // taps fastest: contiguous in ws
        if (kk0 + kk < s.k_per_group && j0 + jj < jtot)
            out[(cl::index_t)(kbase + kk) * jtot + j0 + jj] = Cs[kk * BN + jj];
    }
}

// Instantiates body only where the fragment types exist.
template <typename T, int BM, int BN, bool NHWC> struct Run {
    __device__ static void go(const T* x, const T* dy, float* ws, const ConvShape& s,
                              long long chunk) {
        body<T, BM, BN, NHWC>(x, dy, ws, s, chunk);
    }
};
#if !CL_BWF_WMMA_BF16
template <int BM, int BN, bool NHWC> struct Run<__nv_bfloat16, BM, BN, NHWC> {
    __device__ static void go(const __nv_bfloat16*, const __nv_bfloat16*, float*,
                              const ConvShape&, long long) {
        __trap();
    }
};
#endif

}  // namespace bwfw

template <typename T, int BM, int BN, bool NHWC>
__global__ void __launch_bounds__((BM / 32) * (BN / 32) * 32) bwd_filter_wmma(
    // pointers: ws receives the fp32 partials, splits x K x C/g*R*S
    const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ ws,
    // sizes: the problem and the m-chunk per split (a multiple of 32)
    ConvShape s, long long chunk) {
    bwfw::Run<T, BM, BN, NHWC>::go(x, dy, ws, s, chunk);
}
