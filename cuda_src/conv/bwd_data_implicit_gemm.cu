// Convolution backward data as an implicit GEMM over the transposed problem, any stride
// and dilation, no col2im buffer. ConvShape describes the FORWARD problem: h, w are dx's
// spatial size, p, q dy's.
//
// Phase decomposition: dx row h receives tap r only when (h + pad_h - r*dil_h) is a
// multiple of stride_h, which depends on h only through its phase ph = h % stride_h. So
// the rows of one phase (h = ph, ph + stride_h, ...) form a stride-1 problem whose taps
// are the progression r = r0, r0 + rstep, ... (rstep = stride_h / gcd(stride_h, dil_h));
// the same along w. Each (phase, group) is one GEMM:
//     dx[m][c] = sum_j A[m][j] * B[j][c]
//   m over (n, hh, ww) of the phase (dx pixels), c over C/g, j over (k, ir, it) with
//   k in the group's K/g and (ir, it) the phase's valid taps;
//   A[m][j] = dy[n, k, p, q] with p = (h + pad_h - r*dil_h) / stride_h (exact), 0 when
//   p or q fall outside dy; B[j][c] = w[k, c, r, t].
// No multiply is spent on a stride gap; only the border rows see zeros.
//
// Kernels (T = float | __half | __nv_bfloat16; fp32 accumulation, one block per output
// tile and a fixed reduction order: deterministic):
//   bwd_data_igemm<T, NHWC, BM, BN, TM, TN>
//       grid (ceil(N * ceil(H/sh) * ceil(W/sw) / BM), ceil(C/g / BN), groups * sh * sw),
//       (BM/TM) * (BN/TN) threads; double-buffered shared tiles and TM x TN register
//       blocking of conv/gemm_tiles.cuh (BK = 16). Reduction order: NHWC (k fastest:
//       contiguous in dy and, with c, in KRSC) or NCHW (taps fastest, k slowest).
//       Epilogue: conv_common.cuh's, channel c (alpha; bias[c] for conv_transpose).
//
// Defines: none; one module per dtype (cudnnlite/solvers/conv/bwd_data_igemm.py).
#include "conv/gemm_tiles.cuh"

namespace bwd {

constexpr int kBK = 16;

// The valid taps of one phase along one axis: r = first + i * step, i < count.
struct Taps {
    int first, step, count;
};

__device__ __forceinline__ Taps phase_taps(int phase, int pad, int stride, int dil, int f) {
    int a = stride, b = dil;  // gcd(stride, dil)
    while (b) {
        const int t = a % b;
        a = b, b = t;
    }
    Taps tp;
    tp.step = stride / a;
    tp.first = f;
    for (int r = 0; r < f && r < tp.step; ++r) {
        int v = (phase + pad - r * dil) % stride;
        if (v == 0) {
            tp.first = r;
            break;
        }
    }
    tp.count = tp.first < f ? (f - 1 - tp.first) / tp.step + 1 : 0;
    return tp;
}

// The phase's geometry, shared by both loaders and the epilogue.
struct Phase {
    int ph, pw;           // phase along h and w
    int hs, ws;           // rows / columns of dx in this phase
    Taps tr, tt;          // valid taps along r and t
    int rows_per_img;     // hs * ws
    cl::index_t rows;     // n * hs * ws
    int red;              // K/g * tr.count * tt.count: the reduction length
};

__device__ __forceinline__ Phase make_phase(const ConvShape& s, int phase) {
    Phase f;
    f.ph = phase / s.stride_w, f.pw = phase % s.stride_w;
    f.hs = f.ph < s.h ? (s.h - f.ph + s.stride_h - 1) / s.stride_h : 0;
    f.ws = f.pw < s.w ? (s.w - f.pw + s.stride_w - 1) / s.stride_w : 0;
    f.tr = phase_taps(f.ph, s.pad_h, s.stride_h, s.dil_h, s.r);
    f.tt = phase_taps(f.pw, s.pad_w, s.stride_w, s.dil_w, s.s);
    f.rows_per_img = f.hs * f.ws;
    f.rows = (cl::index_t)s.n * f.rows_per_img;
    f.red = s.k_per_group * f.tr.count * f.tt.count;
    return f;
}

// Reduction index j -> (k within the group, r, t), in the layout's order.
template <bool NHWC>
__device__ __forceinline__ void red_coords(const ConvShape& s, const Phase& f, int j, int& k,
                                           int& r, int& t) {
    int it, ir;
    if (NHWC) {
        k = j % s.k_per_group;
        const int tap = j / s.k_per_group;
        it = tap % f.tt.count, ir = tap / f.tt.count;
    } else {
        it = j % f.tt.count;
        const int rest = j / f.tt.count;
        ir = rest % f.tr.count, k = rest / f.tr.count;
    }
    r = f.tr.first + ir * f.tr.step;
    t = f.tt.first + it * f.tt.step;
}

// A[m][j] = dy at tap j of dx pixel m, stored As[j][m]. Each thread's pixels are the same
// in every slice: their (n, h, w) are decomposed once.
template <typename T, bool NHWC, class Tl>
struct DyGather {
    static constexpr int PER_THREAD = Tl::BK * Tl::BM / Tl::THREADS;
    static_assert(Tl::BK * Tl::BM % Tl::THREADS == 0, "whole loads per thread");
    const T* __restrict__ dy;
    const ConvShape& s;
    const Phase& f;
    int kbase;                  // the group's first output channel
    int pn[PER_THREAD], ph[PER_THREAD], pw[PER_THREAD];  // pn < 0: past the rows
    float reg[PER_THREAD];

    __device__ __forceinline__ void coords(int u, int& mm, int& jj) const {
        if (NHWC) {  // k contiguous in dy: j fastest
            jj = u % Tl::BK, mm = u / Tl::BK;
        } else {     // q contiguous: pixels fastest
            mm = u % Tl::BM, jj = u / Tl::BM;
        }
    }

    __device__ __forceinline__ DyGather(const T* dy_, const ConvShape& s_, const Phase& f_,
                                        int kbase_, cl::index_t m0)
        : dy(dy_), s(s_), f(f_), kbase(kbase_) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            int mm, jj;
            coords(threadIdx.x + i * Tl::THREADS, mm, jj);
            const cl::index_t m = m0 + mm;
            pn[i] = -1;
            if (m < f.rows) {
                const int n = (int)(m / f.rows_per_img), rem = (int)(m - (cl::index_t)n * f.rows_per_img);
                pn[i] = n;
                ph[i] = f.ph + (rem / f.ws) * s.stride_h + s.pad_h;
                pw[i] = f.pw + (rem % f.ws) * s.stride_w + s.pad_w;
            }
        }
    }

    __device__ __forceinline__ void fetch(int slice) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            int mm, jj;
            coords(threadIdx.x + i * Tl::THREADS, mm, jj);
            const int j = slice * Tl::BK + jj;
            float v = 0.0f;
            if (pn[i] >= 0 && j < f.red) {
                int k, r, t;
                red_coords<NHWC>(s, f, j, k, r, t);
                const int p = (ph[i] - r * s.dil_h) / s.stride_h;  // exact in this phase
                const int q = (pw[i] - t * s.dil_w) / s.stride_w;
                const bool in = ph[i] >= r * s.dil_h && pw[i] >= t * s.dil_w && p < s.p && q < s.q;
                if (in) v = cl::to_float(dy[conv::y_offset<NHWC>(s, pn[i], kbase + k, p, q)]);
            }
            reg[i] = v;
        }
    }

    __device__ __forceinline__ void store(float* As) const {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            int mm, jj;
            coords(threadIdx.x + i * Tl::THREADS, mm, jj);
            As[jj * Tl::BM + mm] = reg[i];
        }
    }
};

// B[j][c] = w[kbase + k, c0 + c, r, t], stored Bs[j][c].
template <typename T, bool NHWC, class Tl>
struct FilterGather {
    static constexpr int PER_THREAD = Tl::BK * Tl::BN / Tl::THREADS;
    static_assert(Tl::BK * Tl::BN % Tl::THREADS == 0, "whole loads per thread");
    const T* __restrict__ w;
    const ConvShape& s;
    const Phase& f;
    int kbase, c0;  // the group's first output channel; the tile's first channel in the group
    float reg[PER_THREAD];

    __device__ __forceinline__ FilterGather(const T* w_, const ConvShape& s_, const Phase& f_,
                                            int kbase_, int c0_)
        : w(w_), s(s_), f(f_), kbase(kbase_), c0(c0_) {}

    __device__ __forceinline__ void coords(int u, int& jj, int& cc) const {
        if (NHWC) {  // KRSC: c contiguous
            cc = u % Tl::BN, jj = u / Tl::BN;
        } else {     // KCRS: the taps are the nearest neighbours
            jj = u % Tl::BK, cc = u / Tl::BK;
        }
    }

    __device__ __forceinline__ void fetch(int slice) {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            int jj, cc;
            coords(threadIdx.x + i * Tl::THREADS, jj, cc);
            const int j = slice * Tl::BK + jj, c = c0 + cc;
            float v = 0.0f;
            if (j < f.red && c < s.c_per_group) {
                int k, r, t;
                red_coords<NHWC>(s, f, j, k, r, t);
                v = cl::to_float(w[conv::w_offset<NHWC>(s, kbase + k, c, r, t)]);
            }
            reg[i] = v;
        }
    }

    __device__ __forceinline__ void store(float* Bs) const {
#pragma unroll
        for (int i = 0; i < PER_THREAD; ++i) {
            int jj, cc;
            coords(threadIdx.x + i * Tl::THREADS, jj, cc);
            Bs[jj * Tl::BN + cc] = reg[i];
        }
    }
};

}  // namespace bwd

template <typename T, bool NHWC, int BM, int BN, int TM, int TN>
__global__ void __launch_bounds__((BM / TM) * (BN / TN)) bwd_data_igemm(
    // pointers: dx is written; bias may be dy when absent (e.has_bias says)
    const T* __restrict__ dy, const T* __restrict__ w, T* __restrict__ dx,
    const T* __restrict__ bias,
    // sizes and epilogue
    ConvShape s, ConvEpilogue e) {
    using Tl = gemm::Tile<BM, BN, bwd::kBK, TM, TN>;
    __shared__ __align__(16) float As[2 * Tl::BK * Tl::BM];
    __shared__ __align__(16) float Bs[2 * Tl::BK * Tl::BN];
    const int g = blockIdx.z % s.groups, phase = blockIdx.z / s.groups;
    const bwd::Phase f = bwd::make_phase(s, phase);  // uniform per block
    const cl::index_t m0 = (cl::index_t)blockIdx.x * BM;
    const int c0 = blockIdx.y * BN;
    if (m0 >= f.rows) return;  // phases have different row counts; the grid fits the largest
    const int slices = (f.red + Tl::BK - 1) / Tl::BK;

    bwd::DyGather<T, NHWC, Tl> la(dy, s, f, g * s.k_per_group, m0);
    bwd::FilterGather<T, NHWC, Tl> lb(w, s, f, g * s.k_per_group, c0);
    float acc[TM][TN];
    gemm::mainloop<Tl>(slices, la, lb, As, Bs, acc);

    const int tx = threadIdx.x % Tl::THREADS_N, ty = threadIdx.x / Tl::THREADS_N;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const cl::index_t m = m0 + ty * TM + i;
        if (m >= f.rows) break;
        const int n = (int)(m / f.rows_per_img), rem = (int)(m - (cl::index_t)n * f.rows_per_img);
        const int h = f.ph + (rem / f.ws) * s.stride_h, ww = f.pw + (rem % f.ws) * s.stride_w;
#pragma unroll
        for (int jn = 0; jn < TN; ++jn) {
            const int cg = c0 + tx * TN + jn;
            if (cg >= s.c_per_group) break;
            const int c = g * s.c_per_group + cg;
            conv::store_output(dx, dx, bias, e, conv::x_offset<NHWC>(s, n, c, h, ww), c,
                               acc[i][jn]);
        }
    }
}
