// Pointwise convolution (1x1 filter, stride 1, no padding; any groups) as a plain tiled
// GEMM, per group g:
//   NHWC: Y[m][g*Ng + n] = sum_c X[m][g*Cg + c] * W[g*Ng + n][c]      m over N*H*W pixels
//   NCHW: Y[img][g*Ng + n][hw] = sum_c W[g*Ng + n][c] * X[img][g*Cg + c][hw]
// (the NCHW case is the per-image product W * X, computed with M = N*H*W, m = (img, hw)
// so that one launch covers every image).
// Tiles, register blocking and double buffering: conv/gemm_tiles.cuh. Unlike the implicit
// GEMM there is no tap decoding and no bounds check per tap, and NCHW reads x with vector
// loads along hw.
//
// Kernels (T = float | __half | __nv_bfloat16; fp32 accumulation, fused epilogue):
//   gemm_1x1<T, NHWC, BM, BN, BK, TM, TN>
// Argument vec = 1: vector loads of 4 elements: w along c (needs Cg % 4 == 0); x along c
// in NHWC (Cg % 4 == 0) or along hw in NCHW (H*W % 4 == 0); pointers aligned to 4
// elements. vec = 0: the same elements loaded one by one (a uniform branch).
//
// Defines: none; one module per (dtype, tile) with both layouts
// (cudnnlite/solvers/conv/gemm_1x1.py). Index limits: x, w, y below 2^31 elements.
#include "conv/gemm_tiles.cuh"

namespace gemm1x1 {

// A[m][c] = x pixel m, channel g*Cg + c. NHWC: V channels per load; NCHW: V pixels per load
// (V consecutive m of one image), threads walking m fastest.
template <typename T, class Tl, bool NHWC>
struct PixelLoader {
    static constexpr int COLS = NHWC ? Tl::BK / 4 : Tl::BK;  // loads per row / column
    static constexpr int ROWS = NHWC ? Tl::BM : Tl::BM / 4;
    static constexpr int UNITS = ROWS * COLS;
    static constexpr int PER_THREAD = (UNITS + Tl::THREADS - 1) / Tl::THREADS;
    static_assert(Tl::BM % 4 == 0, "BM must be a multiple of 4");

    const T* __restrict__ x;
    int cg;               // channels of the group: the reduction length
    cl::index_t cstride;  // distance between channels: 1 (NHWC) or H*W (NCHW)
    bool vec;
    // NHWC: offset of (pixel, group channel 0). NCHW: offsets of the 4 pixels, or -1 past the end.
    cl::index_t base[PER_THREAD][NHWC ? 1 : 4];
    bool valid[PER_THREAD];
    float reg[PER_THREAD][4];

    __device__ __forceinline__ static int row_of(int u) { return NHWC ? u / COLS : (u % ROWS) * 4; }
    __device__ __forceinline__ static int col_of(int u) { return NHWC ? (u % COLS) * 4 : u / ROWS; }

    __device__ __forceinline__ PixelLoader(const T* x_, const ConvShape& s, int m0, int g, bool vec_)
        : x(x_), cg(s.c_per_group), vec(vec_) {
        const int hw = s.h * s.w, rows = s.n * hw;
        cstride = NHWC ? 1 : hw;
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int u = threadIdx.x + j * Tl::THREADS;
            const int m = m0 + row_of(u);
            valid[j] = u < UNITS && m < rows;
            if (NHWC) {
                base[j][0] = (cl::index_t)m * s.c + g * s.c_per_group;
            } else {
#pragma unroll
                for (int v = 0; v < (NHWC ? 1 : 4); ++v) {
                    const int img = (m + v) / hw, pix = (m + v) - img * hw;
                    base[j][v] = valid[j] && m + v < rows
                                     ? ((cl::index_t)img * s.c + g * s.c_per_group) * hw + pix
                                     : -1;
                }
            }
        }
    }

    __device__ __forceinline__ void fetch(int slice) {
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int c = slice * Tl::BK + col_of(threadIdx.x + j * Tl::THREADS);
            const bool live = valid[j] && c < cg;
            if (vec && live) {  // NHWC: 4 channels; NCHW: 4 pixels of one image (H*W % 4 == 0)
                gemm::load_vec<T, 4>(x + base[j][0] + c * cstride, reg[j]);
            } else if (NHWC) {
#pragma unroll
                for (int v = 0; v < 4; ++v)
                    reg[j][v] = valid[j] && c + v < cg ? cl::to_float(x[base[j][0] + c + v]) : 0.0f;
            } else {
#pragma unroll
                for (int v = 0; v < 4; ++v) {
                    const cl::index_t b = base[j][NHWC ? 0 : v];
                    reg[j][v] = live && b >= 0 ? cl::to_float(x[b + c * cstride]) : 0.0f;
                }
            }
        }
    }

    __device__ __forceinline__ void store(float* As) const {
#pragma unroll
        for (int j = 0; j < PER_THREAD; ++j) {
            const int u = threadIdx.x + j * Tl::THREADS;
            if (u < UNITS) {
                const int m = row_of(u), c = col_of(u);
#pragma unroll
                for (int v = 0; v < 4; ++v) {
                    if (NHWC) As[(c + v) * Tl::BM + m] = reg[j][v];
                    else As[c * Tl::BM + m + v] = reg[j][v];
                }
            }
        }
    }
};

}  // namespace gemm1x1

template <typename T, bool NHWC, int BM, int BN, int BK, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) gemm_1x1(
    // pointers: z may be y and bias may be x when absent (e.has_z / e.has_bias say)
    const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z, const T* bias,
    // sizes (R = S = 1, P = H, Q = W), epilogue, vector loads (1: see the header comment)
    ConvShape s, ConvEpilogue e, int vec) {
    using Tl = gemm::Tile<BM, BN, BK, TM, TN>;
    __shared__ __align__(16) float As[2 * BK * BM];
    __shared__ __align__(16) float Bs[2 * BK * BN];

    const int tiles_n = (s.k_per_group + BN - 1) / BN;
    const int g = blockIdx.y / tiles_n;
    const int n0 = (blockIdx.y - g * tiles_n) * BN;
    const int m0 = blockIdx.x * BM;

    gemm1x1::PixelLoader<T, Tl, NHWC> la(x, s, m0, g, vec != 0);
    gemm::FilterLoader<T, Tl> lb(w + (cl::index_t)(g * s.k_per_group + n0) * s.c_per_group,
                                 s.c_per_group, s.k_per_group - n0, vec != 0);
    float acc[TM][TN];
    gemm::mainloop<Tl>((s.c_per_group + BK - 1) / BK, la, lb, As, Bs, acc);

    const int tx = threadIdx.x % Tl::THREADS_N, ty = threadIdx.x / Tl::THREADS_N;
    const int hw = s.h * s.w, rows = s.n * hw;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + ty * TM + i;
        if (m >= rows) continue;
        const int img = m / hw, pix = m - img * hw;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = n0 + tx * TN + j;
            if (n >= s.k_per_group) continue;
            const int k = g * s.k_per_group + n;
            const cl::index_t off = NHWC ? (cl::index_t)m * s.k + k
                                         : ((cl::index_t)img * s.k + k) * hw + pix;
            conv::store_output(y, z, bias, e, off, k, acc[i][j]);
        }
    }
}
