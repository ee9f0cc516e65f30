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
// Kernels (T = float | __half | __nv_bfloat16 | double; accumulation in cl::acc_t<T>: fp32,
// fp64 for double; one block per output tile and a fixed reduction order: deterministic):
//   bwd_data_igemm<T, NHWC, BM, BN, TM, TN>
//       grid (ceil(N * ceil(H/sh) * ceil(W/sw) / BM), ceil(C/g / BN), groups * sh * sw),
//       (BM/TM) * (BN/TN) threads; the shared tiles, cp.async pipeline (fp32: 3 stages, fp64
//       and the 128 x 128 tile: 2, stages<T, BM>(), to fit 48 KB) and TM x TN register
//       blocking of conv/gemm_tiles.cuh (BK = 16; 128 x 128: 8 x 8, float32 NHWC only).
//       Reduction order: NHWC (k fastest: contiguous in dy and, with c, in KRSC) or NCHW
//       (taps fastest, k slowest). Each thread loads one reduction column j per slice
//       (element copies, gathers) and advances its (k, r, t) by BK with adds and wraps; the
//       output row of a dy element is p = pm - ir * dil_h / gcd(stride_h, dil_h) (no
//       division in the main loop).
//       Epilogue: conv_common.cuh's, channel c (alpha; bias[c] for conv_transpose).
//
//   bwd_data_igemm<T, NHWC, BM, BN, TM, TN, true>
//       3-D (NCDHW / NDHWC, KCTRS / KTRSC): phases (pd, ph, pw), grid z = groups * the
//       strides' product, reduction digits (k, it, ir, ird) in a Radix4, the dy depth checked
//       per element; the 2-D kernels carry none of it. sm_90 fp32 64x64: 123 registers, no
//       spills, main loop 57% FFMA (2-D 61%).
//
// Defines: none; one module per dtype and dimensionality (cudnnlite/solvers/conv/
// bwd_data_igemm.py).
#include "conv/gemm_tiles.cuh"

namespace bwd {

constexpr int kBK = 16;
// cp.async stages (fp32; fp16/bf16 stage through registers, two stages): 3, but 2 for
// double, whose 3 stages of the 64 x 64 tile would take 52 KB (> 48 KB static), and for
// the 128 x 128 tile (3 stages of fp32: 50 KB; it has no double instantiation).
template <typename T, int BM = 64>
constexpr int stages() {
    return sizeof(cl::acc_t<T>) == 8 || BM > 64 ? 2 : 3;
}

using conv::Taps;         // conv_common.cuh
using conv::phase_taps;

// The phase's geometry, shared by both loaders and the epilogue. 3-D (D3): the depth
// phase pd too (phase = (pd * stride_h + ph) * stride_w + pw); 2-D: pd = 0, ds = 1, td one
// tap.
struct Phase {
    int pd, ph, pw;       // phase along d, h and w
    int ds, hs, ws;       // depths / rows / columns of dx in this phase
    Taps td, tr, tt;      // valid taps along the depth, r and t
    int rows_per_img;     // ds * hs * ws
    cl::index_t rows;     // n * ds * hs * ws
    int red;              // K/g * td.count * tr.count * tt.count: the reduction length
};

template <bool D3 = false>
__device__ __forceinline__ Phase make_phase(const ConvShape& s, int phase) {
    Phase f;
    const int phw = s.stride_h * s.stride_w;
    f.pd = D3 ? phase / phw : 0;
    f.ph = phase % phw / s.stride_w, f.pw = phase % s.stride_w;
    f.hs = f.ph < s.h ? (s.h - f.ph + s.stride_h - 1) / s.stride_h : 0;
    f.ws = f.pw < s.w ? (s.w - f.pw + s.stride_w - 1) / s.stride_w : 0;
    f.tr = phase_taps(f.ph, s.pad_h, s.stride_h, s.dil_h, s.r);
    f.tt = phase_taps(f.pw, s.pad_w, s.stride_w, s.dil_w, s.s);
    if (D3) {
        f.ds = f.pd < s.d ? (s.d - f.pd + s.stride_d - 1) / s.stride_d : 0;
        f.td = phase_taps(f.pd, s.pad_d, s.stride_d, s.dil_d, s.t);
    } else {
        f.ds = 1;
        f.td = Taps{0, 1, 1};
    }
    f.rows_per_img = f.ds * f.hs * f.ws;
    f.rows = (cl::index_t)s.n * f.rows_per_img;
    f.red = s.k_per_group * f.td.count * f.tr.count * f.tt.count;
    return f;
}

// The reduction column j of one thread as (k, ir, it) (D3: and ird), advanced by BK per
// slice: NHWC j = ((ird * tr.count + ir) * tt.count + it) * K/g + k; NCHW
// j = ((k * td.count + ird) * tr.count + ir) * tt.count + it (td.count = 1 in 2-D).
template <bool NHWC, bool D3 = false>
struct RedIter {
    gemm::Radix3 it;
    int j;
    __device__ __forceinline__ void init(const ConvShape& s, const Phase& f, int j0, int step) {
        j = j0;
        if (NHWC) it.init(j0, step, s.k_per_group, f.tt.count);
        else it.init(j0, step, f.tt.count, f.tr.count);
    }
    __device__ __forceinline__ int k() const { return NHWC ? it.lo : it.hi; }
    __device__ __forceinline__ int ir() const { return NHWC ? it.hi : it.mid; }
    __device__ __forceinline__ int itt() const { return NHWC ? it.mid : it.lo; }
    __device__ __forceinline__ int ird() const { return 0; }
    __device__ __forceinline__ void advance(int step) {
        it.advance();
        j += step;
    }
};

template <bool NHWC>
struct RedIter<NHWC, true> {
    conv::Radix4 it;
    int j;
    __device__ __forceinline__ void init(const ConvShape& s, const Phase& f, int j0, int step) {
        j = j0;
        if (NHWC) it.init(j0, step, s.k_per_group, f.tt.count, f.tr.count);
        else it.init(j0, step, f.tt.count, f.tr.count, f.td.count);
    }
    __device__ __forceinline__ int k() const { return NHWC ? it.d0 : it.d3; }
    __device__ __forceinline__ int itt() const { return NHWC ? it.d1 : it.d0; }
    __device__ __forceinline__ int ir() const { return NHWC ? it.d2 : it.d1; }
    __device__ __forceinline__ int ird() const { return NHWC ? it.d3 : it.d2; }
    __device__ __forceinline__ void advance(int step) {
        it.advance();
        j += step;
    }
};

constexpr int kFar = -(1 << 29);

// A[m][j] = dy at tap j of dx pixel m, stored As[j][m] (k-fastest layout of gemm_tiles.cuh:
// each thread one column j, rows row(i)). The pixels are decoded once.
template <typename T, bool NHWC, class Tl, bool D3 = false>
struct DyGather {
    using L = gemm::KFast<Tl, Tl::BM>;
    using Layout = L;
    static constexpr int VECS = L::VECS, VEC = 1;
    const T* __restrict__ dy;
    const ConvShape& s;
    int red, eh, ew, ed;        // reduction length; dy rows / columns / depths per tap step
    int nbase[VECS];            // dy offset of (n, group channel 0, o = p = q = 0)
    int pm[VECS], qm[VECS];     // dy (p, q) of the pixel at ir = it = 0; kFar past the rows
    int om[D3 ? VECS : 1];      // D3: dy o of the pixel at ird = 0
    RedIter<NHWC, D3> rj;
    gemm::Offsets<L> offset;

    __device__ __forceinline__ DyGather(const T* dy_, const ConvShape& s_, const Phase& f,
                                        int kbase, cl::index_t m0)
        : dy(dy_), s(s_), red(f.red) {
        // dy steps per tap step: dil / gcd(stride, dil) = dil * step / stride (exact: the
        // taps' step is stride / gcd)
        eh = s.dil_h * f.tr.step / s.stride_h, ew = s.dil_w * f.tt.step / s.stride_w;
        ed = 0;
        int bd = 0;
        if (D3) {
            ed = s.dil_d * f.td.step / s.stride_d;
            bd = (f.pd + s.pad_d - f.td.first * s.dil_d) / s.stride_d;
        }
        // (phase + pad - first * dil) is a multiple of the stride by the choice of first
        const int bh = (f.ph + s.pad_h - f.tr.first * s.dil_h) / s.stride_h;
        const int bw = (f.pw + s.pad_w - f.tt.first * s.dil_w) / s.stride_w;
        const int opq = s.p * s.q * (D3 ? s.o : 1), hw = f.hs * f.ws;
#pragma unroll
        for (int i = 0; i < VECS; ++i) {
            const cl::index_t m = m0 + L::row(i);
            pm[i] = qm[i] = kFar;
            if (D3) om[D3 ? i : 0] = kFar;
            nbase[i] = 0;
            if (m < f.rows) {
                const int n = (int)(m / f.rows_per_img), rem = (int)(m - (cl::index_t)n * f.rows_per_img);
                const int id = D3 ? rem / hw : 0, rem2 = rem - id * hw;
                pm[i] = rem2 / f.ws + bh;
                qm[i] = rem2 % f.ws + bw;
                if (D3) om[D3 ? i : 0] = id + bd;
                nbase[i] = NHWC ? n * opq * s.k + kbase : (n * s.k + kbase) * opq;
            }
        }
        rj.init(s, f, L::k(), Tl::BK);
    }

    template <class Sink>
    __device__ __forceinline__ void next(Sink& sink) {
        const int dp = rj.ir() * eh, dq = rj.itt() * ew, ddo = D3 ? rj.ird() * ed : 0;
        const int koff = NHWC ? rj.k() : rj.k() * s.p * s.q * (D3 ? s.o : 1);
        const bool jin = rj.j < red;
#pragma unroll
        for (int i = 0; i < VECS; ++i) {
            const int p = pm[i] - dp, q = qm[i] - dq;
            bool ok = jin && (unsigned)p < (unsigned)s.p && (unsigned)q < (unsigned)s.q;
            int pix = p * s.q + q;
            if constexpr (D3) {
                const int o = om[i] - ddo;
                ok = ok && (unsigned)o < (unsigned)s.o;
                pix += o * s.p * s.q;
            }
            sink.template put<1>(i, 0, dy + (nbase[i] + koff + (NHWC ? pix * s.k : pix)), ok);
        }
        rj.advance(Tl::BK);
    }
};

// B[j][c] = w[kbase + k, c0 + c, r, t], stored Bs[j][c]: the same column j per thread as
// DyGather, filter channels row(i).
template <typename T, bool NHWC, class Tl, bool D3 = false>
struct FilterGather {
    using L = gemm::KFast<Tl, Tl::BN>;
    using Layout = L;
    static constexpr int VECS = L::VECS, VEC = 1;
    const T* __restrict__ w;
    const ConvShape& s;
    const Phase& f;
    int kbase, cleft, red;  // the group's first output channel; channels left from row(0)
    RedIter<NHWC, D3> rj;
    gemm::Offsets<L> offset;

    __device__ __forceinline__ FilterGather(const T* w_, const ConvShape& s_, const Phase& f_,
                                            int kbase_, int c0)
        : w(w_), s(s_), f(f_), kbase(kbase_), cleft(s_.c_per_group - c0 - L::row(0)),
          red(f_.red) {
        w += NHWC ? c0 + L::row(0) : (cl::index_t)(c0 + L::row(0)) * s.r * s.s * (D3 ? s.t : 1);
        rj.init(s, f, L::k(), Tl::BK);
    }

    template <class Sink>
    __device__ __forceinline__ void next(Sink& sink) {
        const int r = f.tr.first + rj.ir() * f.tr.step, t = f.tt.first + rj.itt() * f.tt.step;
        const int td = D3 ? f.td.first + rj.ird() * f.td.step : 0;
        const cl::index_t tap = conv::w_off<NHWC, D3>(s, kbase + rj.k(), 0, td, r, t);
        const int cstep = NHWC ? 1 : s.r * s.s * (D3 ? s.t : 1);
        const bool jin = rj.j < red;
#pragma unroll
        for (int i = 0; i < VECS; ++i) {
            const bool ok = jin && i * L::STEP < cleft;
            sink.template put<1>(i, 0, w + tap + i * L::STEP * cstep, ok);
        }
        rj.advance(Tl::BK);
    }
};

}  // namespace bwd

// D3: 3-D (NCDHW / NDHWC dy and dx, KCTRS / KTRSC filters): depth phases and taps, a
// module of its own.
template <typename T, bool NHWC, int BM, int BN, int TM, int TN, bool D3 = false>
__global__ void __launch_bounds__(
    gemm::Tile<BM, BN, bwd::kBK, TM, TN, bwd::stages<T, BM>()>::THREADS,
    gemm::Tile<BM, BN, bwd::kBK, TM, TN, bwd::stages<T, BM>()>::MIN_BLOCKS)
    bwd_data_igemm(
    // pointers: dx is written; bias may be dy when absent (e.has_bias says)
    const T* __restrict__ dy, const T* __restrict__ w, T* __restrict__ dx,
    const T* __restrict__ bias,
    // sizes and epilogue
    ConvShape s, EpilogueFor<T> e) {
    using Tl = gemm::Tile<BM, BN, bwd::kBK, TM, TN, bwd::stages<T, BM>()>;
    __shared__ __align__(16) typename gemm::Smem<T, Tl>::E smem[gemm::Smem<T, Tl>::ELEMS];
    const int g = blockIdx.z % s.groups, phase = blockIdx.z / s.groups;
    const bwd::Phase f = bwd::make_phase<D3>(s, phase);  // uniform per block
    const cl::index_t m0 = (cl::index_t)blockIdx.x * BM;
    const int c0 = blockIdx.y * BN;
    if (m0 >= f.rows) return;  // phases have different row counts; the grid fits the largest
    const int slices = (f.red + Tl::BK - 1) / Tl::BK;

    bwd::DyGather<T, NHWC, Tl, D3> la(dy, s, f, g * s.k_per_group, m0);
    bwd::FilterGather<T, NHWC, Tl, D3> lb(w, s, f, g * s.k_per_group, c0);
    cl::acc_t<T> acc[TM][TN];
    gemm::run<T, Tl>(slices, la, lb, smem, acc);

    const int tx = threadIdx.x % Tl::THREADS_N, ty = threadIdx.x / Tl::THREADS_N;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const cl::index_t m = m0 + Tl::row_of(ty, i);
        if (m >= f.rows) break;
        const int n = (int)(m / f.rows_per_img), rem = (int)(m - (cl::index_t)n * f.rows_per_img);
        const int id = D3 ? rem / (f.hs * f.ws) : 0, rem2 = rem - id * f.hs * f.ws;
        const int h = f.ph + (rem2 / f.ws) * s.stride_h, ww = f.pw + (rem2 % f.ws) * s.stride_w;
        const int d = f.pd + id * s.stride_d;
#pragma unroll
        for (int jn = 0; jn < TN; ++jn) {
            const int cg = c0 + Tl::col_of(tx, jn);
            if (cg >= s.c_per_group) continue;
            const int c = g * s.c_per_group + cg;
            conv::store_output(dx, dx, bias, e, conv::x_off<NHWC, D3>(s, n, c, d, h, ww), c,
                               acc[i][jn]);
        }
    }
}
