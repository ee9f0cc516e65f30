// Convolution forward as an implicit GEMM: no im2col buffer, the A operand is gathered
// from x while it is loaded into shared memory.
//
// GEMM view, per group g (grid.y walks groups x N-tiles, grid.x M-tiles):
//   M  = N * P * Q          rows: output pixels (img, p, q)
//   Ng = K / groups          columns: output channels of the group
//   Kg = C / groups * R * S  reduction: taps (c, r, s), in the filter's memory order:
//                            NCHW/KCRS: kk = (c * R + r) * S + s
//                            NHWC/KRSC: kk = (r * S + s) * Cg + c
//   A[m][kk] = x[img, g*Cg + c, p*u - pad_h + r*dil_h, q*v - pad_w + s*dil_w] (0 outside)
//   B[kk][n] = w[g*Ng + n][kk]
// Tiles, register blocking and double buffering: conv/gemm_tiles.cuh.
//
// Kernels (T = float | __half | __nv_bfloat16; fp32 accumulation, fused epilogue of
// conv_common.cuh for every output):
//   implicit_gemm<T, NHWC, BM, BN, BK, TM, TN>          taps (c, r, s) decoded from kk with
//                                                       integer divisions
//   implicit_precomp_gemm<T, NHWC, BM, BN, BK, TM, TN>  taps read from a table in the
//                                                       workspace (cuDNN's
//                                                       IMPLICIT_PRECOMP_GEMM)
//   implicit_gemm_taps<NHWC>                            fills that table: Kg int4
//                                                       {offset, dh, dw, 0}
// Argument vec = 1: 4-element vector loads of w along kk (needs Kg % 4 == 0) and, in NHWC,
// of x along channels (needs C/groups % 4 == 0); both pointers aligned to 4 elements.
// vec = 0: the same 4 elements per thread, loaded one by one (a uniform branch: one
// kernel serves both, which halves the compile time). NCHW gathers of x are always
// scalar (consecutive m are strided pixels).
//
// Defines: none; every parameter is a template argument. One module per (dtype, tile)
// holds both layouts and both variants (cudnnlite/solvers/conv/implicit_gemm.py).
// Index limits: x, w and y below 2^31 elements each (32-bit offsets inside an image,
// 64-bit image bases).
#include "conv/gemm_tiles.cuh"

namespace igemm {

constexpr int kFarAway = -(1 << 29);  // an h0 that no tap brings inside the image

// Tap kk of a group's filter: {offset from the pixel (h0, w0) of the group's channel 0, dh, dw}.
template <bool NHWC>
__device__ __forceinline__ int4 compute_tap(const ConvShape& s, int kk) {
    int c, rs;
    if (NHWC) {
        rs = kk / s.c_per_group;
        c = kk - rs * s.c_per_group;
    } else {
        const int taps = s.r * s.s;
        c = kk / taps;
        rs = kk - c * taps;
    }
    const int r = rs / s.s;
    const int dh = r * s.dil_h, dw = (rs - r * s.s) * s.dil_w;
    const int off = NHWC ? (dh * s.w + dw) * s.c + c : (c * s.h + dh) * s.w + dw;
    return make_int4(off, dh, dw, 0);
}

// A[m][kk] for the block's BM rows. NHWC: threads walk kk fastest, V channels per load
// (coalesced along C); NCHW: threads walk m fastest (coalesced along W when stride 1).
template <typename T, class Tl, bool NHWC, bool PRECOMP>
struct GatherLoader {
    static constexpr int V = NHWC ? 4 : 1;
    static constexpr int COLS = Tl::BK / V;
    static constexpr int UNITS = Tl::BM * COLS;
    static constexpr int PER_THREAD = (UNITS + Tl::THREADS - 1) / Tl::THREADS;

    const T* __restrict__ x;
    const int4* __restrict__ taps;
    ConvShape s;
    int ktot;
    bool vec;
    cl::index_t base[PER_THREAD];  // x offset of (img, h0, w0, group channel 0)
    int h0[PER_THREAD], w0[PER_THREAD];
    float reg[PER_THREAD][V];

    __device__ __forceinline__ static int row_of(int u) { return NHWC ? u / COLS : u % Tl::BM; }
    __device__ __forceinline__ static int col_of(int u) { return NHWC ? (u % COLS) * V : u / Tl::BM; }

    __device__ __forceinline__ GatherLoader(const T* x_, const int4* taps_, const ConvShape& s_,
                                            int m0, int g, bool vec_)
        : x(x_), taps(taps_), s(s_), ktot(s_.c_per_group * s_.r * s_.s), vec(vec_) {
        const int pq = s.p * s.q, rows = s.n * pq;
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int u = threadIdx.x + j * Tl::THREADS;
            const int m = m0 + row_of(u);
            base[j] = 0;
            h0[j] = w0[j] = kFarAway;
            if (u < UNITS && m < rows) {
                const int img = m / pq, rem = m - img * pq;
                const int p = rem / s.q, q = rem - p * s.q;
                h0[j] = p * s.stride_h - s.pad_h;
                w0[j] = q * s.stride_w - s.pad_w;
                const int c0 = g * s.c_per_group;
                base[j] = NHWC ? (((cl::index_t)img * s.h + h0[j]) * s.w + w0[j]) * s.c + c0
                               : ((cl::index_t)img * s.c + c0) * s.h * s.w +
                                     (cl::index_t)h0[j] * s.w + w0[j];
            }
        }
    }

    // Element kk of row j: 0 outside the image (padding) or past the reduction.
    __device__ __forceinline__ float element(int j, int kk) const {
        if (kk >= ktot) return 0.0f;
        int4 t;
        if constexpr (PRECOMP) t = taps[kk];
        else t = compute_tap<NHWC>(s, kk);
        const int hh = h0[j] + t.y, ww = w0[j] + t.z;
        if ((unsigned)hh >= (unsigned)s.h || (unsigned)ww >= (unsigned)s.w) return 0.0f;
        return cl::to_float(x[base[j] + t.x]);
    }

    __device__ __forceinline__ void fetch(int slice) {
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int kk = slice * Tl::BK + col_of(threadIdx.x + j * Tl::THREADS);
            if (V > 1 && vec) {  // V channels of one tap: one bounds check, one vector load
                int4 t = make_int4(0, kFarAway, 0, 0);
                if (kk < ktot) {
                    if constexpr (PRECOMP) t = taps[kk];
                    else t = compute_tap<NHWC>(s, kk);
                }
                const int hh = h0[j] + t.y, ww = w0[j] + t.z;
                if ((unsigned)hh < (unsigned)s.h && (unsigned)ww < (unsigned)s.w) {
                    gemm::load_vec<T, V>(x + base[j] + t.x, reg[j]);
                } else {
#pragma unroll
                    for (int v = 0; v < V; ++v) reg[j][v] = 0.0f;
                }
            } else {
#pragma unroll
                for (int v = 0; v < V; ++v) reg[j][v] = element(j, kk + v);
            }
        }
    }

    __device__ __forceinline__ void store(float* As) const {
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int u = threadIdx.x + j * Tl::THREADS;
            if (u < UNITS) {
                const int m = row_of(u), kk = col_of(u);
#pragma unroll
                for (int v = 0; v < V; ++v) As[(kk + v) * Tl::BM + m] = reg[j][v];
            }
        }
    }
};

template <typename T, bool NHWC, bool PRECOMP, int BM, int BN, int BK, int TM, int TN>
__device__ __forceinline__ void body(const T* __restrict__ x, const T* __restrict__ w, T* y,
                                     const T* z, const T* bias, const int4* taps,
                                     const ConvShape& s, const ConvEpilogue& e, int vec) {
    using Tl = gemm::Tile<BM, BN, BK, TM, TN>;
    __shared__ __align__(16) float As[2 * BK * BM];
    __shared__ __align__(16) float Bs[2 * BK * BN];

    const int tiles_n = (s.k_per_group + BN - 1) / BN;
    const int g = blockIdx.y / tiles_n;
    const int n0 = (blockIdx.y - g * tiles_n) * BN;
    const int m0 = blockIdx.x * BM;
    const int ktot = s.c_per_group * s.r * s.s;

    GatherLoader<T, Tl, NHWC, PRECOMP> la(x, taps, s, m0, g, vec != 0);
    gemm::FilterLoader<T, Tl> lb(w + (cl::index_t)(g * s.k_per_group + n0) * ktot, ktot,
                                 s.k_per_group - n0, vec != 0);
    float acc[TM][TN];
    gemm::mainloop<Tl>((ktot + BK - 1) / BK, la, lb, As, Bs, acc);

    const int tx = threadIdx.x % Tl::THREADS_N, ty = threadIdx.x / Tl::THREADS_N;
    const int pq = s.p * s.q, rows = s.n * pq;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + ty * TM + i;
        if (m >= rows) continue;
        const int img = m / pq, rem = m - img * pq;
        const int p = rem / s.q, q = rem - p * s.q;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = n0 + tx * TN + j;
            if (n >= s.k_per_group) continue;
            const int k = g * s.k_per_group + n;
            conv::store_output(y, z, bias, e, conv::y_offset<NHWC>(s, img, k, p, q), k, acc[i][j]);
        }
    }
}

}  // namespace igemm

template <typename T, bool NHWC, int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) implicit_gemm(
    // pointers: z may be y and bias may be x when absent (e.has_z / e.has_bias say)
    const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z, const T* bias,
    // sizes, epilogue, vector loads (1: see the header comment)
    ConvShape s, ConvEpilogue e, int vec) {
    igemm::body<T, NHWC, false, BM, BN, BK, TM, TN>(x, w, y, z, bias, nullptr, s, e, vec);
}

template <typename T, bool NHWC, int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) implicit_precomp_gemm(
    // pointers, then the tap table (implicit_gemm_taps<NHWC> fills it)
    const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z, const T* bias,
    const int4* __restrict__ taps,
    // sizes, epilogue, vector loads
    ConvShape s, ConvEpilogue e, int vec) {
    igemm::body<T, NHWC, true, BM, BN, BK, TM, TN>(x, w, y, z, bias, taps, s, e, vec);
}

template <bool NHWC>
__global__ void __launch_bounds__(256) implicit_gemm_taps(int4* taps, ConvShape s) {
    const int ktot = s.c_per_group * s.r * s.s;
    for (int kk = blockIdx.x * blockDim.x + threadIdx.x; kk < ktot; kk += gridDim.x * blockDim.x)
        taps[kk] = igemm::compute_tap<NHWC>(s, kk);
}
