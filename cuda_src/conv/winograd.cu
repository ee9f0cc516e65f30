// Winograd convolution F(m x m, 3 x 3), forward, stride 1, dilation 1, groups 1, any
// padding; NCHW+KCRS or NHWC+KRSC; storage fp32/fp16/bf16, transforms and sums in fp32.
//
// With alpha = m + 2 and t the output tiles (m x m outputs each, n * tiles_h * tiles_w):
//   U[xi][c][k] = (G g[k][c] G^T)[xi]          filter transform     (alpha^2 x C x K)
//   V[xi][c][t] = (B^T d[c][t] B)[xi]          input transform      (alpha^2 x C x T)
//   M[xi][k][t] = sum_c U[xi][c][k] V[xi][c][t]  alpha^2 independent GEMMs (K x T)
//   y[k][t]     = A^T M[.][k][t] A  -> conv::store_output (the fused epilogue)
// Points: F(2x2) 0, 1, -1, inf (every transform entry is 0, +-1 or 1/2);
//         F(4x4) 0, 1, -1, 1/2, -1/2, inf (B^T and A^T dyadic, so exact for small
//         integers; their entries stay <= 5 in magnitude against 5 and 8 for the
//         usual +-2 points, which is what keeps F(4x4)'s error near F(2x2)'s).
//
// Kernels (template T = storage type, M = output tile 2 or 4, NHWC = layout):
//   wino_filter_transform<T, M, NHWC>  one thread per (c, k), k fastest: U writes coalesced
//   wino_input_transform<T, M, NHWC>   one thread per (c, t), t fastest: V writes coalesced
//   wino_batched_gemm                  blockIdx.z = xi; the fp32 core of gemm_tiles.cuh:
//                                      64(K) x 64(T) tiles, 16-deep C slices, 3 cp.async
//                                      stages, 4 x 4 outputs per thread
//   wino_output_transform<T, M, NHWC>  one thread per (k, t), t fastest: M reads coalesced
//   wino_fused_f2<T, NHWC>             F(2x2) in one kernel: a block owns 32 tiles x 32
//                                      output channels, transforms 8 input channels of
//                                      input and filters at a time into shared memory and
//                                      keeps all 16 products of its 4 (k, t) pairs per
//                                      thread in registers; output transform + epilogue
//                                      from registers (no workspace).
#include "common/cudnnlite.cuh"
#include "conv/conv_common.cuh"
#include "conv/gemm_tiles.cuh"

namespace wino {

// Transform matrices; every call site indexes them with unrolled constants, so the
// tables fold away and the zero terms vanish (see sandwich()).
template <int M> struct Mats;

template <> struct Mats<2> {
    static const int kAlpha = 4;
    __device__ static __forceinline__ float bt(int i, int j) {
        const float m[4][4] = {{1, 0, -1, 0}, {0, 1, 1, 0}, {0, -1, 1, 0}, {0, 1, 0, -1}};
        return m[i][j];
    }
    __device__ static __forceinline__ float g(int i, int j) {
        const float m[4][3] = {{1, 0, 0}, {0.5f, 0.5f, 0.5f}, {0.5f, -0.5f, 0.5f}, {0, 0, 1}};
        return m[i][j];
    }
    __device__ static __forceinline__ float at(int i, int j) {
        const float m[2][4] = {{1, 1, 1, 0}, {0, 1, -1, -1}};
        return m[i][j];
    }
};

template <> struct Mats<4> {
    static const int kAlpha = 6;
    __device__ static __forceinline__ float bt(int i, int j) {
        const float m[6][6] = {
            {1, 0, -5, 0, 4, 0},
            {0, -0.25f, -0.25f, 1, 1, 0},
            {0, 0.25f, -0.25f, -1, 1, 0},
            {0, -0.5f, -1, 0.5f, 1, 0},
            {0, 0.5f, -1, -0.5f, 1, 0},
            {0, 0.25f, 0, -1.25f, 0, 1},
        };
        return m[i][j];
    }
    __device__ static __forceinline__ float g(int i, int j) {
        const float a = 2.0f / 3.0f, b = 4.0f / 3.0f, c = 8.0f / 3.0f;
        const float m[6][3] = {{1, 0, 0},   {a, a, a},    {a, -a, a},
                               {-c, -b, -a}, {-c, b, -a}, {0, 0, 1}};
        return m[i][j];
    }
    __device__ static __forceinline__ float at(int i, int j) {
        const float m[4][6] = {
            {1, 1, 1, 1, 1, 0},
            {0, 1, -1, 0.5f, -0.5f, 0},
            {0, 1, 1, 0.25f, 0.25f, 0},
            {0, 1, -1, 0.125f, -0.125f, 1},
        };
        return m[i][j];
    }
};

// out = L x L^T for a P x Q matrix L given by `l(i, j)`; zero entries are skipped and
// ones become additions (both decided at compile time after unrolling).
template <int P, int Q, typename L>
__device__ __forceinline__ void sandwich(L l, const float (&x)[Q][Q], float (&out)[P][P]) {
    float tmp[P][Q];
#pragma unroll
    for (int i = 0; i < P; ++i)
#pragma unroll
        for (int j = 0; j < Q; ++j) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < Q; ++k) {
                const float c = l(i, k);
                if (c != 0.0f) acc = fmaf(c, x[k][j], acc);
            }
            tmp[i][j] = acc;
        }
#pragma unroll
    for (int i = 0; i < P; ++i)
#pragma unroll
        for (int j = 0; j < P; ++j) {
            float acc = 0.0f;
#pragma unroll
            for (int k = 0; k < Q; ++k) {
                const float c = l(j, k);
                if (c != 0.0f) acc = fmaf(c, tmp[i][k], acc);
            }
            out[i][j] = acc;
        }
}

template <int M> struct BtOp { __device__ float operator()(int i, int j) const { return Mats<M>::bt(i, j); } };
template <int M> struct GOp { __device__ float operator()(int i, int j) const { return Mats<M>::g(i, j); } };
template <int M> struct AtOp { __device__ float operator()(int i, int j) const { return Mats<M>::at(i, j); } };

// Where output tile t starts: image n, output row p0, column q0.
struct Tile {
    int n, p0, q0;
};
template <int M>
__device__ __forceinline__ Tile tile_of(cl::index_t t, int tiles_h, int tiles_w) {
    const int per_image = tiles_h * tiles_w;
    Tile r;
    cl::index_t within;
    r.n = (int)cl::div_mod(t, per_image, within);
    const int rem = (int)within;
    r.p0 = (rem / tiles_w) * M;
    r.q0 = (rem % tiles_w) * M;
    return r;
}

// The alpha x alpha input patch of tile `tl`, channel c, zero outside the image.
template <typename T, int M, bool NHWC>
__device__ __forceinline__ void load_patch(const T* __restrict__ x, const ConvShape& s, const Tile& tl,
                                           int c, float (&d)[M + 2][M + 2]) {
#pragma unroll
    for (int i = 0; i < M + 2; ++i) {
        const int h = tl.p0 - s.pad_h + i;
#pragma unroll
        for (int j = 0; j < M + 2; ++j) {
            const int w = tl.q0 - s.pad_w + j;
            const bool in = h >= 0 && h < s.h && w >= 0 && w < s.w;
            d[i][j] = in ? cl::to_float(x[conv::x_offset<NHWC>(s, tl.n, c, h, w)]) : 0.0f;
        }
    }
}

template <typename T, bool NHWC>
__device__ __forceinline__ void load_filter(const T* __restrict__ w, const ConvShape& s, int k, int c,
                                            float (&g)[3][3]) {
#pragma unroll
    for (int i = 0; i < 3; ++i)
#pragma unroll
        for (int j = 0; j < 3; ++j) g[i][j] = cl::to_float(w[conv::w_offset<NHWC>(s, k, c, i, j)]);
}

// The m x m outputs of tile `tl`, channel k, from its alpha x alpha products.
template <typename T, int M, bool NHWC>
__device__ __forceinline__ void store_tile(T* y, const T* z,  // may alias (z is out)
                                           const T* __restrict__ bias, const ConvShape& s,
                                           const ConvEpilogue& e, const Tile& tl, int k,
                                           const float (&m)[M + 2][M + 2]) {
    float out[M][M];
    sandwich<M, M + 2>(AtOp<M>(), m, out);
#pragma unroll
    for (int i = 0; i < M; ++i)
#pragma unroll
        for (int j = 0; j < M; ++j) {
            const int p = tl.p0 + i, q = tl.q0 + j;
            if (p < s.p && q < s.q)
                conv::store_output(y, z, bias, e, conv::y_offset<NHWC>(s, tl.n, k, p, q), k,
                                   out[i][j]);
        }
}

}  // namespace wino

// ---------------------------------------------------------------- non-fused pipeline

template <typename T, int M, bool NHWC>
__global__ void __launch_bounds__(256) wino_filter_transform(const T* __restrict__ w, float* __restrict__ U,
                                                             ConvShape s) {
    const int A = M + 2;
    const cl::index_t total = (cl::index_t)s.c * s.k;
    for (cl::index_t i = cl::global_thread_id(); i < total; i += cl::grid_stride()) {
        cl::index_t k;  // (32-bit division while i fits: cl::div_mod)
        const int c = (int)cl::div_mod(i, s.k, k);
        float g[3][3], u[A][A];
        wino::load_filter<T, NHWC>(w, s, (int)k, c, g);
        wino::sandwich<A, 3>(wino::GOp<M>(), g, u);
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b) U[(cl::index_t)(a * A + b) * total + i] = u[a][b];
    }
}

template <typename T, int M, bool NHWC>
__global__ void __launch_bounds__(256) wino_input_transform(const T* __restrict__ x, float* __restrict__ V,
                                                            ConvShape s, int tiles_h, int tiles_w) {
    const int A = M + 2;
    const cl::index_t tiles = (cl::index_t)s.n * tiles_h * tiles_w;
    const cl::index_t total = tiles * s.c;
    for (cl::index_t i = cl::global_thread_id(); i < total; i += cl::grid_stride()) {
        cl::index_t t;  // (32-bit division while i fits: cl::div_mod)
        const int c = (int)cl::div_mod(i, tiles, t);
        const wino::Tile tl = wino::tile_of<M>(t, tiles_h, tiles_w);
        float d[A][A], v[A][A];
        wino::load_patch<T, M, NHWC>(x, s, tl, c, d);
        wino::sandwich<A, A>(wino::BtOp<M>(), d, v);
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b) V[(cl::index_t)(a * A + b) * total + i] = v[a][b];
    }
}

// Mw[xi] (K x T) = U[xi]^T (K x C) * V[xi] (C x T), xi = blockIdx.z: the shared fp32 core of
// conv/gemm_tiles.cuh (64 x 64 tiles, 16-deep C slices, 3 cp.async stages, 4 x 4 outputs
// per thread). Both operands are rows along K / T: 16-byte copies when K (T) % 4 == 0.
using WinoTile = gemm::Tile<64, 64, 16, 4, 4, 3>;
extern "C" __global__ void __launch_bounds__(WinoTile::THREADS, WinoTile::MIN_BLOCKS)
    wino_batched_gemm(const float* __restrict__ U, const float* __restrict__ V,
                      float* __restrict__ Mw, int K, int C, long long T) {
    using Tl = WinoTile;
    __shared__ __align__(16) float smem[gemm::Smem<float, Tl>::FLOATS];
    const int xi = blockIdx.z;
    const float* Ux = U + (cl::index_t)xi * C * K;
    const float* Vx = V + (cl::index_t)xi * C * T;
    float* Mx = Mw + (cl::index_t)xi * K * T;
    const int k0 = blockIdx.y * Tl::BM;
    const cl::index_t t0 = (cl::index_t)blockIdx.x * Tl::BN;
    const long long tleft = T - t0;
    gemm::RowLoader<float, Tl, Tl::BM> la(Ux + k0, K, C, K - k0,
                                          K % 4 == 0 && gemm::aligned16(Ux));
    gemm::RowLoader<float, Tl, Tl::BN> lb(Vx + t0, (int)T, C, tleft < Tl::BN ? (int)tleft : Tl::BN,
                                          T % 4 == 0 && gemm::aligned16(Vx));
    float acc[Tl::TM][Tl::TN];
    gemm::run<float, Tl>((C + Tl::BK - 1) / Tl::BK, la, lb, smem, acc);

    const int tx = threadIdx.x % Tl::THREADS_N, ty = threadIdx.x / Tl::THREADS_N;
#pragma unroll
    for (int i = 0; i < Tl::TM; ++i) {
        const int k = k0 + Tl::row_of(ty, i);
#pragma unroll
        for (int j = 0; j < Tl::TN; ++j) {
            const cl::index_t t = t0 + Tl::col_of(tx, j);
            if (k < K && t < T) Mx[(cl::index_t)k * T + t] = acc[i][j];
        }
    }
}

template <typename T, int M, bool NHWC>
__global__ void __launch_bounds__(256) wino_output_transform(const float* __restrict__ Mw, T* y,
                                                             const T* z,  // may be y
                                                             const T* __restrict__ bias, ConvShape s,
                                                             ConvEpilogue e, int tiles_h, int tiles_w) {
    const int A = M + 2;
    const cl::index_t tiles = (cl::index_t)s.n * tiles_h * tiles_w;
    const cl::index_t total = tiles * s.k;
    for (cl::index_t i = cl::global_thread_id(); i < total; i += cl::grid_stride()) {
        cl::index_t t;  // (32-bit division while i fits: cl::div_mod)
        const int k = (int)cl::div_mod(i, tiles, t);
        const wino::Tile tl = wino::tile_of<M>(t, tiles_h, tiles_w);
        float m[A][A];
#pragma unroll
        for (int a = 0; a < A; ++a)
#pragma unroll
            for (int b = 0; b < A; ++b) m[a][b] = Mw[(cl::index_t)(a * A + b) * total + i];
        wino::store_tile<T, M, NHWC>(y, z, bias, s, e, tl, k, m);
    }
}

// ---------------------------------------------------------------- fused F(2x2, 3x3)

#define WF_TILES 32  // output tiles per block (consecutive tile indices)
#define WF_K 32      // output channels per block
#define WF_C 8       // input channels transformed per step

// grid (ceil(T / 32), ceil(K / 32)), block 256. Thread: tile lane = tid % 32, output
// channels tid / 32 + 8 p (p < 4).
template <typename T, bool NHWC>
__global__ void __launch_bounds__(256) wino_fused_f2(const T* __restrict__ x, const T* __restrict__ w,
                                                     T* y, const T* z,  // may alias
                                                     const T* __restrict__ bias, ConvShape s,
                                                     ConvEpilogue e, int tiles_h, int tiles_w) {
    __shared__ float Vs[16][WF_C][WF_TILES];
    __shared__ float Us[16][WF_C][WF_K];
    const cl::index_t tiles = (cl::index_t)s.n * tiles_h * tiles_w;
    const cl::index_t t0 = (cl::index_t)blockIdx.x * WF_TILES;
    const int k0 = blockIdx.y * WF_K;
    const int lane = threadIdx.x % 32, row = threadIdx.x / 32;  // row < 8
    const cl::index_t my_t = t0 + lane;
    const wino::Tile my_tile = wino::tile_of<2>(my_t < tiles ? my_t : 0, tiles_h, tiles_w);
    float acc[4][16] = {};
    for (int c0 = 0; c0 < s.c; c0 += WF_C) {
        // Input transform: thread (row, lane) -> channel c0 + row, tile t0 + lane.
        {
            const int c = c0 + row;
            float d[4][4], v[4][4];
            if (c < s.c && my_t < tiles) {
                wino::load_patch<T, 2, NHWC>(x, s, my_tile, c, d);
                wino::sandwich<4, 4>(wino::BtOp<2>(), d, v);
            } else {
#pragma unroll
                for (int a = 0; a < 4; ++a)
#pragma unroll
                    for (int b = 0; b < 4; ++b) v[a][b] = 0.0f;
            }
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b) Vs[a * 4 + b][row][lane] = v[a][b];
        }
        // Filter transform: thread (row, lane) -> channel c0 + row, output channel k0 + lane.
        {
            const int c = c0 + row, k = k0 + lane;
            float g[3][3], u[4][4];
            if (c < s.c && k < s.k) {
                wino::load_filter<T, NHWC>(w, s, k, c, g);
                wino::sandwich<4, 3>(wino::GOp<2>(), g, u);
            } else {
#pragma unroll
                for (int a = 0; a < 4; ++a)
#pragma unroll
                    for (int b = 0; b < 4; ++b) u[a][b] = 0.0f;
            }
#pragma unroll
            for (int a = 0; a < 4; ++a)
#pragma unroll
                for (int b = 0; b < 4; ++b) Us[a * 4 + b][row][lane] = u[a][b];
        }
        __syncthreads();
#pragma unroll
        for (int cc = 0; cc < WF_C; ++cc)
#pragma unroll
            for (int xi = 0; xi < 16; ++xi) {
                const float v = Vs[xi][cc][lane];
#pragma unroll
                for (int p = 0; p < 4; ++p) acc[p][xi] = fmaf(Us[xi][cc][row + 8 * p], v, acc[p][xi]);
            }
        __syncthreads();
    }
    if (my_t >= tiles) return;
#pragma unroll
    for (int p = 0; p < 4; ++p) {
        const int k = k0 + row + 8 * p;
        if (k >= s.k) continue;
        float m[4][4];
#pragma unroll
        for (int a = 0; a < 4; ++a)
#pragma unroll
            for (int b = 0; b < 4; ++b) m[a][b] = acc[p][a * 4 + b];
        wino::store_tile<T, 2, NHWC>(y, z, bias, s, e, my_tile, k, m);
    }
}
