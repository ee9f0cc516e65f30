// Convolution backward filter (dw = sum over N*P*Q of dy (x) x-patches) and backward
// bias (db = sum of dy over N*P*Q). ConvShape describes the FORWARD problem.
//
// Kernels (T = float | __half | __nv_bfloat16; fp32 accumulation):
//   bwd_filter_direct<T, NHWC>   one 256-thread block per filter element (k, c, r, t)
//                                (grid-stride over them): each thread sums a fixed
//                                subset of the N*P*Q products, then a fixed shared-memory
//                                tree adds the 256 partials. Deterministic.
//   bwd_filter_gemm<T, NHWC, BM, BN, TM, TN>
//                                implicit GEMM per group: dW[kk][j] = sum_m dY[m][kk] *
//                                X[m][j], m over N*P*Q, j over the C/g*R*S taps in the
//                                filter's memory order (KCRS: (c, r, t); KRSC: (r, t, c)).
//                                A block computes a BM x BN tile over one split of m
//                                (blockIdx.z = split * groups + g), double-buffered with
//                                conv/gemm_tiles.cuh. atomic == 0: it stores its fp32
//                                partial tile to ws[split][K][C/g*R*S] (deterministic,
//                                reduced by bwd_filter_reduce in split order);
//                                atomic == 1: it atomicAdds into ws[K][C/g*R*S] (zeroed by
//                                zero_f32 first; summation order varies: NOT deterministic).
//   bwd_filter_reduce<T>         dw[i] = sum_{split} ws[split][i] in split order, stored as T.
//   zero_f32                     ws[i] = 0.
//   bwd_bias_nchw<T>             a block per (channel k, split of N*P*Q): 256 threads
//                                (coalesced along P*Q), fixed tree; fp32 partial per split.
//   bwd_bias_nhwc<T>             a block per (32 channels, split): 32 x 8 threads (coalesced
//                                along K), fixed tree over the 8; fp32 partial per split.
//                                Both are then reduced by bwd_filter_reduce: deterministic.
//
// Defines: none; one module per dtype (cudnnlite/solvers/conv/bwd_filter.py).
#include "conv/gemm_tiles.cuh"
#include "conv/splitk_reduce.cuh"  // bwd_filter_reduce

namespace bwf {

constexpr int kThreads = 256;
constexpr int kBK = 16;  // reduction slice (over N*P*Q) of the GEMM kernel

// Fixed-order tree over kThreads partials in shared memory; thread 0 gets the total.
__device__ __forceinline__ float block_sum(float v, float* red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) red[threadIdx.x] += red[threadIdx.x + half];
        __syncthreads();
    }
    return red[0];
}

}  // namespace bwf

template <typename T, bool NHWC>
__global__ void __launch_bounds__(bwf::kThreads) bwd_filter_direct(
    const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dw, ConvShape s) {
    __shared__ float red[bwf::kThreads];
    const int taps = s.r * s.s;
    const cl::index_t total = (cl::index_t)s.k * s.c_per_group * taps;
    const int pq = s.p * s.q;
    const cl::index_t npq = (cl::index_t)s.n * pq;
    for (cl::index_t f = blockIdx.x; f < total; f += gridDim.x) {  // uniform per block
        int k, cg, r, t;
        cl::index_t rem = f;
        if (NHWC) {
            cg = (int)(rem % s.c_per_group), rem /= s.c_per_group;
            t = (int)(rem % s.s), rem /= s.s;
            r = (int)(rem % s.r), k = (int)(rem / s.r);
        } else {
            t = (int)(rem % s.s), rem /= s.s;
            r = (int)(rem % s.r), rem /= s.r;
            cg = (int)(rem % s.c_per_group), k = (int)(rem / s.c_per_group);
        }
        const int c = (k / s.k_per_group) * s.c_per_group + cg;
        float acc = 0.0f;
        for (cl::index_t m = threadIdx.x; m < npq; m += bwf::kThreads) {
            const int n = (int)(m / pq), j = (int)(m - (cl::index_t)n * pq);
            const int p = j / s.q, q = j - p * s.q;
            const int h = p * s.stride_h - s.pad_h + r * s.dil_h;
            const int ww = q * s.stride_w - s.pad_w + t * s.dil_w;
            if ((unsigned)h >= (unsigned)s.h || (unsigned)ww >= (unsigned)s.w) continue;
            acc = fmaf(cl::to_float(dy[conv::y_offset<NHWC>(s, n, k, p, q)]),
                       cl::to_float(x[conv::x_offset<NHWC>(s, n, c, h, ww)]), acc);
        }
        const float sum = bwf::block_sum(acc, red);
        if (threadIdx.x == 0) dw[f] = cl::from_float<T>(sum);
        __syncthreads();  // red is reused by the next filter element
    }
}

namespace bwf {

// A[m][kk] = dy[m, g*K/g + k0 + kk]: the gradient rows of one slice, As[m][kk].
template <typename T, bool NHWC, class Tl>
struct DyLoader {
    static constexpr int PER_THREAD = Tl::BK * Tl::BM / Tl::THREADS;
    static_assert(Tl::BK * Tl::BM % Tl::THREADS == 0, "whole loads per thread");
    const T* __restrict__ dy;
    const ConvShape& s;
    int kbase, krows;            // first output channel of the tile; channels left in it
    cl::index_t m0, m_end;       // this split's range of N*P*Q
    float reg[PER_THREAD];

    __device__ __forceinline__ DyLoader(const T* dy_, const ConvShape& s_, int kbase_,
                                        int krows_, cl::index_t m0_, cl::index_t m_end_)
        : dy(dy_), s(s_), kbase(kbase_), krows(krows_), m0(m0_), m_end(m_end_) {}

    __device__ __forceinline__ void coords(int u, int& mm, int& kk) const {
        if (NHWC) {  // channels contiguous in memory: kk fastest
            kk = u % Tl::BM, mm = u / Tl::BM;
        } else {     // P*Q contiguous: mm fastest
            mm = u % Tl::BK, kk = u / Tl::BK;
        }
    }

    __device__ __forceinline__ void fetch(int slice) {
        const int pq = s.p * s.q;
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            int mm, kk;
            coords(threadIdx.x + i * Tl::THREADS, mm, kk);
            const cl::index_t m = m0 + (cl::index_t)slice * Tl::BK + mm;
            float v = 0.0f;
            if (m < m_end && kk < krows) {
                const int n = (int)(m / pq), j = (int)(m - (cl::index_t)n * pq);
                const cl::index_t off = NHWC ? ((cl::index_t)n * pq + j) * s.k + kbase + kk
                                             : ((cl::index_t)n * s.k + kbase + kk) * pq + j;
                v = cl::to_float(dy[off]);
            }
            reg[i] = v;
        }
    }

    __device__ __forceinline__ void store(float* As) const {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            int mm, kk;
            coords(threadIdx.x + i * Tl::THREADS, mm, kk);
            As[mm * Tl::BM + kk] = reg[i];
        }
    }
};

// B[m][j] = x at the tap j of output position m (0 in the padding), Bs[m][j].
template <typename T, bool NHWC, class Tl>
struct PatchLoader {
    static constexpr int PER_THREAD = Tl::BK * Tl::BN / Tl::THREADS;
    static_assert(Tl::BK * Tl::BN % Tl::THREADS == 0, "whole loads per thread");
    const T* __restrict__ x;
    const ConvShape& s;
    int cbase, j0, jtot;         // group's first channel; tile's first tap; taps per filter
    cl::index_t m0, m_end;
    float reg[PER_THREAD];

    __device__ __forceinline__ PatchLoader(const T* x_, const ConvShape& s_, int cbase_, int j0_,
                                           cl::index_t m0_, cl::index_t m_end_)
        : x(x_), s(s_), cbase(cbase_), j0(j0_), jtot(s_.c_per_group * s_.r * s_.s), m0(m0_),
          m_end(m_end_) {}

    __device__ __forceinline__ void coords(int u, int& mm, int& jj) const {
        if (NHWC) {  // taps (r, t, c): c contiguous in x, jj fastest
            jj = u % Tl::BN, mm = u / Tl::BN;
        } else {     // along q (w for stride 1) contiguous: mm fastest
            mm = u % Tl::BK, jj = u / Tl::BK;
        }
    }

    __device__ __forceinline__ void fetch(int slice) {
        const int pq = s.p * s.q;
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            int mm, jj;
            coords(threadIdx.x + i * Tl::THREADS, mm, jj);
            const cl::index_t m = m0 + (cl::index_t)slice * Tl::BK + mm;
            const int j = j0 + jj;
            float v = 0.0f;
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
                    v = cl::to_float(x[conv::x_offset<NHWC>(s, n, cbase + c, h, ww)]);
            }
            reg[i] = v;
        }
    }

    __device__ __forceinline__ void store(float* Bs) const {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            int mm, jj;
            coords(threadIdx.x + i * Tl::THREADS, mm, jj);
            Bs[mm * Tl::BN + jj] = reg[i];
        }
    }
};

}  // namespace bwf

template <typename T, bool NHWC, int BM, int BN, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) bwd_filter_gemm(
    // pointers: ws holds fp32 partials (splits x K x C/g*R*S) or the atomic sums (K x ...)
    const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ ws,
    // sizes: the problem, m-chunk per split (a multiple of BK), and the variant
    ConvShape s, long long chunk, int atomic) {
    using Tl = gemm::Tile<BM, BN, bwf::kBK, TM, TN>;
    __shared__ __align__(16) float As[2 * Tl::BK * Tl::BM];
    __shared__ __align__(16) float Bs[2 * Tl::BK * Tl::BN];
    const int g = blockIdx.z % s.groups, split = blockIdx.z / s.groups;
    const int jtot = s.c_per_group * s.r * s.s;
    const int j0 = blockIdx.x * BN, kk0 = blockIdx.y * BM;
    const int kbase = g * s.k_per_group + kk0;
    const cl::index_t npq = (cl::index_t)s.n * s.p * s.q;
    const cl::index_t m0 = (cl::index_t)split * chunk;
    const cl::index_t m_end = m0 + chunk < npq ? m0 + chunk : npq;
    const int slices = m0 < m_end ? (int)((m_end - m0 + Tl::BK - 1) / Tl::BK) : 0;

    bwf::DyLoader<T, NHWC, Tl> la(dy, s, kbase, s.k_per_group - kk0, m0, m_end);
    bwf::PatchLoader<T, NHWC, Tl> lb(x, s, g * s.c_per_group, j0, m0, m_end);
    float acc[TM][TN];
    gemm::mainloop<Tl>(slices, la, lb, As, Bs, acc);

    const int tx = threadIdx.x % Tl::THREADS_N, ty = threadIdx.x / Tl::THREADS_N;
    float* out = ws + (atomic ? 0 : (cl::index_t)split * s.k * jtot);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int kk = kk0 + ty * TM + i;
        if (kk >= s.k_per_group) break;
        float* row = out + (cl::index_t)(g * s.k_per_group + kk) * jtot;
#pragma unroll
        for (int jn = 0; jn < TN; ++jn) {
            const int j = j0 + tx * TN + jn;
            if (j >= jtot) break;
            if (atomic)
                atomicAdd(row + j, acc[i][jn]);
            else
                row[j] = acc[i][jn];
        }
    }
}

__global__ void __launch_bounds__(256) zero_f32(float* __restrict__ ws, long long count) {
    for (cl::index_t i = cl::global_thread_id(); i < count; i += cl::grid_stride()) ws[i] = 0.0f;
}

// Bias partials: split z = blockIdx.y covers m in [z*chunk, (z+1)*chunk) of the N*P*Q
// positions and writes ws[z][k] (fp32); bwd_filter_reduce adds the splits in order.
template <typename T>
__global__ void __launch_bounds__(bwf::kThreads) bwd_bias_nchw(const T* __restrict__ dy,
                                                               float* __restrict__ ws, int k,
                                                               long long npq, long long pq,
                                                               long long chunk) {
    __shared__ float red[bwf::kThreads];
    const cl::index_t m0 = blockIdx.y * chunk, m1 = m0 + chunk < npq ? m0 + chunk : npq;
    for (int ch = blockIdx.x; ch < k; ch += gridDim.x) {  // uniform per block
        float acc = 0.0f;
        for (cl::index_t m = m0 + threadIdx.x; m < m1; m += bwf::kThreads) {
            const cl::index_t img = m / pq;
            acc += cl::to_float(dy[(img * k + ch) * pq + (m - img * pq)]);  // coalesced in pq
        }
        const float sum = bwf::block_sum(acc, red);
        if (threadIdx.x == 0) ws[(cl::index_t)blockIdx.y * k + ch] = sum;
        __syncthreads();
    }
}

template <typename T>
__global__ void __launch_bounds__(256) bwd_bias_nhwc(const T* __restrict__ dy,
                                                     float* __restrict__ ws, int k,
                                                     long long npq, long long chunk) {
    __shared__ float red[8][32];
    const int ch = blockIdx.x * 32 + threadIdx.x;  // blockDim (32, 8): coalesced along K
    const cl::index_t m0 = blockIdx.y * chunk, m1 = m0 + chunk < npq ? m0 + chunk : npq;
    float acc = 0.0f;
    if (ch < k)
        for (cl::index_t m = m0 + threadIdx.y; m < m1; m += 8) acc += cl::to_float(dy[m * k + ch]);
    red[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && ch < k) {
        float v = 0.0f;
        for (int i = 0; i < 8; ++i) v += red[i][threadIdx.x];
        ws[(cl::index_t)blockIdx.y * k + ch] = v;
    }
}
