// Direct convolution forward: the always-applicable fallback and a depthwise kernel.
//
// Kernels (T = float | __half | __nv_bfloat16 | double; accumulation in cl::acc_t<T>
// (float, double for double) in a fixed order, so results are bitwise reproducible;
// fused epilogue of conv_common.cuh for every output):
//   conv_direct<T, NHWC, WIDE>      one thread per output element, grid-stride loop over
//                                   y in its memory order (coalesced stores); sums over
//                                   the taps (r, s) and the group's channels. Any stride,
//                                   dilation, padding, groups. 64-bit offsets; index
//                                   decoding in 32 bits, or in 64 with WIDE (the host
//                                   takes it when y has 2^31 elements or more): a kernel
//                                   per width, each with one copy of the epilogue's
//                                   activation switch (both widths in one kernel took up
//                                   to 0.67 s of NVRTC for double on sm_90).
//   depthwise_nchw<T, TQ, TP, RPT>  groups == C, K = C * mult. A block computes a TP x TQ
//                                   tile of output rows/columns for one (img, c) and all
//                                   mult filters of c: the input tile with its halo and
//                                   the mult * R * S taps are staged in dynamic shared
//                                   memory once, each thread then computes RPT rows of
//                                   one column. Block: TQ x (TP / RPT) threads.
//   depthwise_nhwc<T>               groups == C, K = C * mult. A block covers 32 channels
//                                   (threads.x: loads and stores coalesced along C) and a
//                                   TP x TQ tile of output pixels (threads.y = 8 walk the
//                                   pixels; TP, TQ are arguments: 4x8, or smaller where a
//                                   large stride or dilation makes the halo too big); the
//                                   input tile with halo, [ih][iw][32], and the taps are
//                                   staged in dynamic shared memory.
//   conv_direct_3d, depthwise_nchw_3d, depthwise_nhwc_3d
//                                   the same for 3-D (NCDHW/KCTRS, NDHWC/KTRSC): a depth
//                                   loop in the direct kernel; the depthwise blocks own one
//                                   output depth and stage the T input slices it reads.
//                                   Separate kernels so the 2-D ones keep no depth term.
// Dynamic shared memory (acc_t<T> elements: 4 bytes, 8 for double): depthwise_nchw
// T*IH*IW + mult*T*R*S, depthwise_nhwc 32 * (T*IH*IW + mult*T*R*S) (T = 1 in 2-D), with
// IH = (TP-1)*stride_h + (R-1)*dil_h + 1 and IW likewise;
// the solver declares it applicable only when that fits in 48 KiB (no opt-in needed).
//
// Defines: none; one module per dtype holds every kernel (cudnnlite/solvers/conv/direct.py).
#include "conv/conv_common.cuh"

namespace direct {

// The grid-stride loop over y with index type I: 32-bit divisions when y has fewer than
// 2^31 elements (a 64-bit division costs several times more on a GPU). D3: the depth
// dimension too (the 2-D instantiation has no depth term).
template <typename T, bool NHWC, bool D3, typename I>
__device__ __forceinline__ void loop(const T* __restrict__ x, const T* __restrict__ w, T* y,
                                     const T* z, const T* bias, const ConvShape& s,
                                     const EpilogueFor<T>& e, I total) {
    typedef cl::acc_t<T> A;
    const I step = (I)cl::grid_stride();
    for (I i = (I)cl::global_thread_id(); i < total; i += step) {
        int n, k, o = 0, p, q;
        I rem = i;
        if (NHWC) {
            k = (int)(rem % (I)s.k), rem /= (I)s.k;
            q = (int)(rem % (I)s.q), rem /= (I)s.q;
            p = (int)(rem % (I)s.p), rem /= (I)s.p;
            if (D3) o = (int)(rem % (I)s.o), rem /= (I)s.o;
            n = (int)rem;
        } else {
            q = (int)(rem % (I)s.q), rem /= (I)s.q;
            p = (int)(rem % (I)s.p), rem /= (I)s.p;
            if (D3) o = (int)(rem % (I)s.o), rem /= (I)s.o;
            k = (int)(rem % (I)s.k), n = (int)(rem / (I)s.k);
        }
        const int c0 = (k / s.k_per_group) * s.c_per_group;
        const int h0 = p * s.stride_h - s.pad_h, w0 = q * s.stride_w - s.pad_w;
        const int d0 = D3 ? o * s.stride_d - s.pad_d : 0;
        const int taps_d = D3 ? s.t : 1;
        const cl::index_t cstride = NHWC ? 1 : (cl::index_t)s.h * s.w * (D3 ? s.d : 1);
        const cl::index_t wcstride = NHWC ? 1 : (cl::index_t)s.r * s.s * taps_d;
        A acc = A(0);
        for (int td = 0; td < taps_d; ++td) {
            const int dd = d0 + td * (D3 ? s.dil_d : 0);
            if (D3 && (unsigned)dd >= (unsigned)s.d) continue;
            for (int r = 0; r < s.r; ++r) {
                const int h = h0 + r * s.dil_h;
                if ((unsigned)h >= (unsigned)s.h) continue;
                for (int t = 0; t < s.s; ++t) {
                    const int ww = w0 + t * s.dil_w;
                    if ((unsigned)ww >= (unsigned)s.w) continue;
                    const T* xp = x + conv::x_off<NHWC, D3>(s, n, c0, dd, h, ww);
                    const T* wp = w + conv::w_off<NHWC, D3>(s, k, 0, td, r, t);
                    for (int c = 0; c < s.c_per_group; ++c)
                        acc = cl::math::fma(cl::to_acc(xp[c * cstride]),
                                            cl::to_acc(wp[c * wcstride]), acc);
                }
            }
        }
        // i is y's offset: the loop walks y in its memory order
        conv::store_output_inline(y, z, bias, e, (cl::index_t)i, k, acc);
    }
}

template <typename T, bool NHWC, bool D3, bool WIDE>
__device__ __forceinline__ void run(const T* __restrict__ x, const T* __restrict__ w, T* y,
                                    const T* z, const T* bias, const ConvShape& s,
                                    const EpilogueFor<T>& e) {
    const cl::index_t total = (cl::index_t)s.n * s.k * s.p * s.q * (D3 ? s.o : 1);
    if constexpr (WIDE) loop<T, NHWC, D3, cl::index_t>(x, w, y, z, bias, s, e, total);
    else loop<T, NHWC, D3, unsigned>(x, w, y, z, bias, s, e, (unsigned)total);
}

}  // namespace direct

// Blocks per SM asked (NCHW 5, 32-bit NHWC 8; 3-D: NCDHW 4, NDHWC 5), the occupancy these
// kernels had before their split by index width: left to itself, ptxas (sm_90) fitted the
// split kernels into 32-40 registers and kept 20-40 bytes of their per-output setup in
// local memory around the activations' division slow-path calls; with the hint, none.
template <typename T, bool NHWC, bool WIDE>
__global__ void __launch_bounds__(256, CL_MIN_BLOCKS(256, NHWC && !WIDE ? 8 : 5)) conv_direct(
    // pointers: z may be y and bias may be x when absent (e.has_z / e.has_bias say)
    const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z, const T* bias,
    // sizes and epilogue
    ConvShape s, EpilogueFor<T> e) {
    direct::run<T, NHWC, false, WIDE>(x, w, y, z, bias, s, e);
}

template <typename T, bool NHWC, bool WIDE>
__global__ void __launch_bounds__(256, CL_MIN_BLOCKS(256, NHWC ? 5 : 4)) conv_direct_3d(
    const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z, const T* bias,
    ConvShape s, EpilogueFor<T> e) {
    direct::run<T, NHWC, true, WIDE>(x, w, y, z, bias, s, e);
}

namespace dw {

constexpr int kChannels = 32;  // channels per block of depthwise_nhwc
constexpr int kRowsY = 8;      // threads.y of depthwise_nhwc

}  // namespace dw

namespace dw {

// D3: the block also owns one output depth o and stages the filter's depth taps of input
// slices (taps_d = T of them) above each other in the tile; 2-D has taps_d = 1, o = 0.
template <typename T, int TQ, int TP, int RPT, bool D3>
__device__ __forceinline__ void nchw_body(const T* __restrict__ x, const T* __restrict__ w, T* y,
                                          const T* z, const T* bias, const ConvShape& s,
                                          const EpilogueFor<T>& e) {
    typedef cl::acc_t<T> A;
    DYNAMIC_SHARED(A, smem);
    const int ih_count = (TP - 1) * s.stride_h + (s.r - 1) * s.dil_h + 1;
    const int iw_count = (TQ - 1) * s.stride_w + (s.s - 1) * s.dil_w + 1;
    const int taps_d = D3 ? s.t : 1, slice = ih_count * iw_count;
    const int taps = taps_d * s.r * s.s, mult = s.k_per_group;
    A* tile = smem;                              // [taps_d][ih_count][iw_count]
    A* filt = smem + taps_d * slice;             // [mult][T][R][S]

    const int tiles_q = (s.q + TQ - 1) / TQ, tiles_p = (s.p + TP - 1) / TP;
    int b = blockIdx.x;
    const int tq = b % tiles_q;
    b /= tiles_q;
    const int tp = b % tiles_p;
    b /= tiles_p;
    int od = 0;
    if (D3) od = b % s.o, b /= s.o;
    const int c = b % s.c, img = b / s.c;
    const int p0 = tp * TP, q0 = tq * TQ;
    const int h0 = p0 * s.stride_h - s.pad_h, w0 = q0 * s.stride_w - s.pad_w;
    const int d0 = D3 ? od * s.stride_d - s.pad_d : 0;
    const int tid = threadIdx.y * TQ + threadIdx.x, nthreads = TQ * (TP / RPT);

    const T* xc = x + conv::x_off<false, D3>(s, img, c, 0, 0, 0);
    for (int i = tid; i < taps_d * slice; i += nthreads) {
        const int td = D3 ? i / slice : 0, j = D3 ? i - td * slice : i;
        const int ih = j / iw_count, iw = j - ih * iw_count;
        const int h = h0 + ih, ww = w0 + iw, dd = d0 + td * (D3 ? s.dil_d : 0);
        const bool inside = (unsigned)h < (unsigned)s.h && (unsigned)ww < (unsigned)s.w &&
                            (!D3 || (unsigned)dd < (unsigned)s.d);
        tile[i] = inside ? cl::to_acc(xc[((cl::index_t)dd * s.h + h) * s.w + ww]) : A(0);
    }
    const T* wc = w + (cl::index_t)c * mult * taps;  // filters c*mult .. c*mult+mult-1
    for (int i = tid; i < mult * taps; i += nthreads) filt[i] = cl::to_acc(wc[i]);
    __syncthreads();

    const int lq = threadIdx.x, q = q0 + lq;
    if (q >= s.q) return;  // no barrier follows
    for (int j = 0; j < mult; ++j) {
        const int k = c * mult + j;
        const A* f = filt + j * taps;
        // rolled: each row's taps loop runs to the end before the next row's starts either
        // way, and unrolled the epilogue's activation switch was compiled once per row
        // (the double kernels 0.5-0.56 s of NVRTC on sm_90)
#pragma unroll 1
        for (int i = 0; i < RPT; ++i) {
            const int lp = threadIdx.y + i * (TP / RPT), p = p0 + lp;
            if (p >= s.p) break;
            const A* in = tile + lp * s.stride_h * iw_count + lq * s.stride_w;
            A acc = A(0);
            for (int td = 0; td < taps_d; ++td)
                for (int r = 0; r < s.r; ++r)
                    for (int t = 0; t < s.s; ++t)
                        acc = cl::math::fma(in[td * slice + r * s.dil_h * iw_count + t * s.dil_w],
                                            f[(td * s.r + r) * s.s + t], acc);
            conv::store_output_inline(y, z, bias, e, conv::y_off<false, D3>(s, img, k, od, p, q),
                                      k, acc);
        }
    }
}

template <typename T, bool D3>
__device__ __forceinline__ void nhwc_body(const T* __restrict__ x, const T* __restrict__ w, T* y,
                                          const T* z, const T* bias, const ConvShape& s,
                                          const EpilogueFor<T>& e, int TP, int TQ) {
    typedef cl::acc_t<T> A;
    constexpr int CH = kChannels;
    DYNAMIC_SHARED(A, smem);
    const int ih_count = (TP - 1) * s.stride_h + (s.r - 1) * s.dil_h + 1;
    const int iw_count = (TQ - 1) * s.stride_w + (s.s - 1) * s.dil_w + 1;
    const int taps_d = D3 ? s.t : 1, slice = ih_count * iw_count;
    const int taps = taps_d * s.r * s.s, mult = s.k_per_group;
    A* tile = smem;                                  // [taps_d][ih_count][iw_count][CH]
    A* filt = smem + taps_d * slice * CH;            // [mult][T][R][S][CH]

    const int tiles_q = (s.q + TQ - 1) / TQ, tiles_p = (s.p + TP - 1) / TP;
    const int tiles_c = (s.c + CH - 1) / CH;
    int b = blockIdx.x;
    const int tc = b % tiles_c;
    b /= tiles_c;
    const int tq = b % tiles_q;
    b /= tiles_q;
    const int tp = b % tiles_p;
    b /= tiles_p;
    int od = 0;
    if (D3) od = b % s.o, b /= s.o;
    const int img = b;
    const int c0 = tc * CH, p0 = tp * TP, q0 = tq * TQ;
    const int h0 = p0 * s.stride_h - s.pad_h, w0 = q0 * s.stride_w - s.pad_w;
    const int d0 = D3 ? od * s.stride_d - s.pad_d : 0;
    const int lc = threadIdx.x, c = c0 + lc;
    const bool live = c < s.c;

    // Each thread loads its own channel: threadIdx.x walks C (coalesced), threadIdx.y pixels.
    for (int i = threadIdx.y; i < taps_d * slice; i += kRowsY) {
        const int td = D3 ? i / slice : 0, j = D3 ? i - td * slice : i;
        const int ih = j / iw_count, iw = j - ih * iw_count;
        const int h = h0 + ih, ww = w0 + iw, dd = d0 + td * (D3 ? s.dil_d : 0);
        const bool inside = live && (unsigned)h < (unsigned)s.h && (unsigned)ww < (unsigned)s.w &&
                            (!D3 || (unsigned)dd < (unsigned)s.d);
        tile[i * CH + lc] =
            inside ? cl::to_acc(x[conv::x_off<true, D3>(s, img, c, dd, h, ww)]) : A(0);
    }
    for (int i = threadIdx.y; i < mult * taps; i += kRowsY)  // i = j * taps + trs
        filt[i * CH + lc] = live ? cl::to_acc(w[((cl::index_t)c * mult) * taps + i]) : A(0);
    __syncthreads();
    if (!live) return;  // no barrier follows

    for (int pix = threadIdx.y; pix < TP * TQ; pix += kRowsY) {
        const int lp = pix / TQ, lq = pix - lp * TQ;
        const int p = p0 + lp, q = q0 + lq;
        if (p >= s.p || q >= s.q) continue;
        const A* in = tile + (lp * s.stride_h * iw_count + lq * s.stride_w) * CH + lc;
        for (int j = 0; j < mult; ++j) {
            const A* f = filt + j * taps * CH + lc;
            A acc = A(0);
            for (int td = 0; td < taps_d; ++td)
                for (int r = 0; r < s.r; ++r)
                    for (int t = 0; t < s.s; ++t)
                        acc = cl::math::fma(
                            in[(td * slice + r * s.dil_h * iw_count + t * s.dil_w) * CH],
                            f[((td * s.r + r) * s.s + t) * CH], acc);
            const int k = c * mult + j;
            conv::store_output_inline(y, z, bias, e, conv::y_off<true, D3>(s, img, k, od, p, q),
                                      k, acc);
        }
    }
}

}  // namespace dw

template <typename T, int TQ, int TP, int RPT>
__global__ void __launch_bounds__(TQ*(TP / RPT)) depthwise_nchw(
    const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z, const T* bias,
    ConvShape s, EpilogueFor<T> e) {
    dw::nchw_body<T, TQ, TP, RPT, false>(x, w, y, z, bias, s, e);
}

template <typename T, int TQ, int TP, int RPT>
__global__ void __launch_bounds__(TQ*(TP / RPT)) depthwise_nchw_3d(
    const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z, const T* bias,
    ConvShape s, EpilogueFor<T> e) {
    dw::nchw_body<T, TQ, TP, RPT, true>(x, w, y, z, bias, s, e);
}

template <typename T>
__global__ void __launch_bounds__(dw::kChannels* dw::kRowsY) depthwise_nhwc(
    const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z, const T* bias,
    ConvShape s, EpilogueFor<T> e,
    // output tile (rows, columns): smaller when a large stride or dilation needs it
    int TP, int TQ) {
    dw::nhwc_body<T, false>(x, w, y, z, bias, s, e, TP, TQ);
}

template <typename T>
__global__ void __launch_bounds__(dw::kChannels* dw::kRowsY) depthwise_nhwc_3d(
    const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z, const T* bias,
    ConvShape s, EpilogueFor<T> e, int TP, int TQ) {
    dw::nhwc_body<T, true>(x, w, y, z, bias, s, e, TP, TQ);
}
