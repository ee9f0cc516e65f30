// Multistage tensor-core convolution, backward data by phases (on conv/tc_gemm.cuh; the
// forward: tc_implicit_gemm.cu).
//
// dx[n, h, w, c] = sum over (r, s, k) of dy[n, p, q, k] * w[k, r, s, c] where
// h = p * stride_h - pad_h + r * dil_h (w likewise): only taps with
// (h + pad_h - r * dil_h) % stride_h == 0 reach h. Phase decomposition: blockIdx.z picks a
// phase (ph, pw) of the dx pixels, h + pad_h = ph + stride_h * jh; for such pixels exactly
// the taps r with r * dil_h = ph (mod stride_h) contribute, at p = jh - (r * dil_h - ph) /
// stride_h. So each phase is a stride-1 correlation over its own taps: no wasted MMA on the
// gaps of the stride, no division per element, and the filter is read as stored (KRSC: k
// rows, c contiguous -> B tile [BK][BN], ldmatrix.trans; for T = float, TF32 on sm_80+,
// 32-bit shared loads from padded rows). A (dy) is [BM][BK], k contiguous.
//
// Kernel: tc_conv_bwd_data<T, BM, BN, BK, WM, WN, STAGES, ALIGN> (ALIGN divides K and C)
// grid (ceil(N * ceil(H / u_h) * ceil(W / u_w) / BM), groups * ceil(C/groups / BN),
// u_h * u_w); the epilogue (bias of conv_transpose, alpha/beta blending, activation) as the
// forward's. out_nchw: dx (and z) NCHW / NCDHW, the NCHW problems' (the solver converts dy
// and w to NHWC / KRSC in the workspace first). Groups: grid.y group-major over the groups' column tiles; dy, w and dx offset
// to the group (the reduction over its K/groups channels, dy's pixels K apart, dx's C).
//
// Kernel: tc_conv_bwd_data_3d<same parameters>: 3-D, NDHWC + KTRSC; phases (pd, ph, pw),
// grid z u_d * u_h * u_w, the rows (n, jd, jh, jw) and the taps (td, r, s) of the phase's
// lists, depth outermost (D3 in the loader; the 2-D instantiation has none of it).

#include "conv/tc_conv.cuh"

namespace tcconv {

// The dx pixels and taps of one phase along one dimension.
struct Phase {
    int first;   // smallest dx coordinate of the phase (>= 0), or >= size: empty
    int count;   // dx coordinates of the phase: first, first + stride, ...
    int j0;      // (first + pad - ph) / stride: jh of the first coordinate
    int t0;      // first contributing tap, or >= taps: none
    int t_step;  // taps between contributing ones
    int dp0;     // (t0 * dil - ph) / stride: p = jh - dp
    int dp_step; // t_step * dil / stride
    int ntaps;   // contributing taps
};

__device__ inline Phase make_phase(int ph, int size, int pad, int stride, int taps, int dil) {
    Phase f;
    f.first = ((ph - pad) % stride + stride) % stride;  // h = ph - pad (mod stride), h >= 0
    f.count = f.first < size ? (size - f.first + stride - 1) / stride : 0;
    f.j0 = (f.first + pad - ph) / stride;
    f.t0 = 0;
    while (f.t0 < taps && ((f.t0 * dil - ph) % stride + stride) % stride != 0) ++f.t0;
    f.t_step = 1;
    while ((f.t_step * dil) % stride != 0) ++f.t_step;
    f.ntaps = f.t0 < taps ? (taps - 1 - f.t0) / f.t_step + 1 : 0;
    f.dp0 = f.t0 < taps ? (f.t0 * dil - ph) / stride : 0;
    f.dp_step = f.t_step * dil / stride;
    return f;
}

// The loader's A validity: each row keeps one word of its phase taps' bits (bit ir: tap ir
// of the height list lands inside dy, bit 16 + is: tap is of the width list; filters of at
// most 16 x 16 taps, the solver's check), built once per block; a copy tests it against
// the current tap's two bits (sel, moved by a shift or a reset as the taps advance): one
// AND and a compare per copy instead of two subtractions and two range compares.
//
// PACKED (tc_conv_bwd_data_packed: groups of fewer dx channels than BN): the block's
// columns are BN consecutive dx channels of several groups, its reduction the window of dy
// channels those groups take (kwin from kbase), and B the block-diagonal matrix of their
// filters: a copy of column c's filter row k is read only where k is in c's group (b_lo).
template <class G, int ALIGN, bool D3, bool PACKED = false>
struct BwdDataLoader {
    typedef typename G::T T;
    enum {
        A_CPR = G::BK / ALIGN, A_RPP = G::THREADS / A_CPR, A_PASSES = G::BM / A_RPP,
        B_CPR = G::BN / ALIGN, B_RPP = G::THREADS / B_CPR, B_PASSES = G::BK / B_RPP,
        BYTES = ALIGN * (int)sizeof(T),
    };
    static_assert(G::THREADS % A_CPR == 0 && G::THREADS % B_CPR == 0, "fixed columns");
    static_assert(A_PASSES >= 1 && B_PASSES >= 1 && G::BK % B_RPP == 0, "whole passes");
    static_assert(A_RPP % 8 == 0, "passes keep the row swizzle (period 8)");

    const T* dy;
    const T* w;
    int a_off[A_PASSES];               // dy offset of (n, jh, jw, a_col): tap offset 0
    unsigned a_mask[A_PASSES];         // bit ir: the phase's tap ir of the rows (h) reaches
                                       // inside dy; bit 16 + is: tap is of the columns (w);
                                       // 0 for a row past the phase (<= 16 taps each)
    int a_jd[D3 ? A_PASSES : 1];       // D3: jd
    unsigned sel;                      // the bits of the current tap (ir, is)
    int a_dst, a_col;
    int b_off;                         // w offset of (first k row of this thread, tap 0, b_col)
    int b_lo;                          // PACKED: the column's group's first window row, minus
                                       // b_row0: (k0 + j * B_RPP - b_lo) in [0, Kg) reads
    int KGRP;                          // K/groups
    bool b_cok;
    int b_dst[B_PASSES];
    int b_row0, P, Q, K, KG, S, slices;  // K: dy's pixel stride; KG: the reduction's (kwin)
    int rsc;  // R*S*Cg (D3: T*R*S*Cg); 32-bit offsets: the solver keeps dy and w below 2^31
              // elements
    // Iterator: contributing tap (ir, is) of the phase lists, k slice k0.
    int ir, is, k0, nr, ns, dph, dpw, dph0, dpw0, dph_step, dpw_step, s_step;
    int a_tap;  // -(dph * Q + dpw) * K + k0
    int b_tap;  // (r * S + s) * C + k0 * rsc
    int r0, s0, r_step, C;  // C: the group's channels (Cg), a filter row's inner extent
    int dpd, dpd_step, td_step, r_span, R, O;  // D3: the depth tap list (iters bound it)

    // The reduction runs over kwin dy channels from kbase (a group's: g * Kg and Kg, 32-bit
    // offsets, so the loop's addresses stay on the kernel's pointers; PACKED: the window of
    // the block's groups). n0: the tile's first channel within the group, or PACKED of C.
    __device__ BwdDataLoader(const T* dy_, const T* w_, const ConvShape& s, const Phase& fd,
                             const Phase& fh, const Phase& fw, cl::index_t m0, int kbase,
                             int kwin, int n0)
        : dy(dy_), w(w_), KGRP(s.k_per_group), P(s.p), Q(s.q), K(s.k), KG(kwin), S(s.s),
          C(s.c_per_group), R(s.r), O(s.o) {
        rsc = s.r * s.s * C * (D3 ? s.t : 1);
        a_col = (threadIdx.x % A_CPR) * ALIGN;
        const int a_row0 = threadIdx.x / A_CPR;
        a_dst = G::a_index(a_row0, a_col);
        const cl::index_t rows = (cl::index_t)s.n * fh.count * fw.count * (D3 ? fd.count : 1);
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i) {
            const cl::index_t m = m0 + a_row0 + i * A_RPP;
            int n = 0, ih = 0, iw = 0, idd = 0;
            if (m < rows) {
                iw = (int)(m % fw.count);
                const cl::index_t nh = m / fw.count;
                ih = (int)(nh % fh.count);
                n = (int)(nh / fh.count);
                if (D3) idd = n % fd.count, n /= fd.count;
            }
            const int jh = fh.j0 + ih, jw = fw.j0 + iw;
            unsigned mask = 0;  // p = jh - dp for the phase's taps (dp0, + dp_step, ...)
            for (int k = 0; k < fh.ntaps; ++k)
                mask |= (unsigned)((unsigned)(jh - fh.dp0 - k * fh.dp_step) < (unsigned)s.p) << k;
            for (int k = 0; k < fw.ntaps; ++k)
                mask |= (unsigned)((unsigned)(jw - fw.dp0 - k * fw.dp_step) < (unsigned)s.q)
                        << (16 + k);
            a_mask[i] = m < rows ? mask : 0u;
            // (A row past the phase: offset of jh = 0, never read; no overflow.)
            int nd = n;  // D3: n * O + jd
            if (D3) {
                a_jd[D3 ? i : 0] = fd.j0 + idd;
                nd = n * s.o + (m < rows ? fd.j0 + idd : 0);
            }
            a_off[i] = ((nd * s.p + (m < rows ? jh : 0)) * s.q + jw) * s.k + kbase + a_col;
        }
        const int b_col = (threadIdx.x % B_CPR) * ALIGN;
        b_row0 = threadIdx.x / B_CPR;
        int c_local = n0 + b_col;
        b_lo = 0;
        if (PACKED) {  // column c of C: its group's channel and first window row
            b_cok = c_local < s.c;
            const int gc = c_local / C;
            c_local -= gc * C;
            b_lo = gc * KGRP - kbase - b_row0;
        } else {
            b_cok = c_local < C;
        }
        b_off = (kbase + b_row0) * rsc + c_local;
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j)
            b_dst[j] = G::b_index(b_row0 + j * B_RPP, b_col);
        slices = (KG + G::BK - 1) / G::BK;
        nr = fh.ntaps;
        ns = fw.ntaps;
        r0 = fh.t0;
        s0 = fw.t0;
        r_step = fh.t_step;
        s_step = fw.t_step;
        dph0 = fh.dp0;
        dpw0 = fw.dp0;
        dph_step = fh.dp_step;
        dpw_step = fw.dp_step;
        ir = is = k0 = 0;
        sel = 0x10001u;
        dph = dph0;
        dpw = dpw0;
        a_tap = -(dph * Q + dpw) * K;
        b_tap = (r0 * S + s0) * C;
        dpd = 0;
        if (D3) {
            dpd = fd.dp0;
            dpd_step = fd.dp_step;
            td_step = fd.t_step;
            r_span = fh.ntaps * fh.t_step;  // r advanced past the list: back by this
            a_tap -= dpd * P * Q * K;
            b_tap += fd.t0 * s.r * S * C;
        }
    }

    __device__ void load(T* As, T* Bs) {
        const bool k_ok = k0 + a_col < KG;
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i) {
            bool ok = k_ok && (a_mask[i] & sel) == sel;
            if (D3) ok = ok && (unsigned)(a_jd[D3 ? i : 0] - dpd) < (unsigned)O;
            cl::mma::cp_async<BYTES>(As + a_dst + i * A_RPP * G::BK, dy + (a_off[i] + a_tap), ok);
        }
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j) {
            const int k = k0 + b_row0 + j * B_RPP;
            const bool in = PACKED ? (unsigned)(k0 + j * B_RPP - b_lo) < (unsigned)KGRP : k < KG;
            cl::mma::cp_async<BYTES>(Bs + b_dst[j], w + (b_off + b_tap + j * B_RPP * rsc),
                                     b_cok && in);
        }
        // Next: the next k slice, or the first slice of the phase's next tap.
        k0 += G::BK;
        a_tap += G::BK;
        b_tap += G::BK * rsc;
        if (k0 >= KG) {
            a_tap -= k0;
            b_tap -= k0 * rsc;
            k0 = 0;
            if (++is < ns) {
                dpw += dpw_step;
                a_tap -= dpw_step * K;
                b_tap += s_step * C;
                sel += sel & 0xffff0000u;  // the next column tap's bit
            } else {
                is = 0;
                ++ir;
                a_tap += ((dpw - dpw0) - dph_step * Q) * K;
                b_tap += (r_step * S - (ns - 1) * s_step) * C;
                dpw = dpw0;
                dph += dph_step;
                sel = (1u << ir) | 0x10000u;
                if (D3 && ir == nr) {  // the first tap (r0, s0) of the next depth tap
                    ir = 0;
                    sel = 0x10001u;
                    a_tap += ((dph - dph0) * Q - dpd_step * P * Q) * K;
                    b_tap += (td_step * R - r_span) * S * C;
                    dph = dph0;
                    dpd += dpd_step;
                }
            }
        }
    }
};

// Writes the staged tile of one phase: row m -> dx pixel (n, first + stride * i); y, z and
// bias at the block's group, whose Cg channels are valid (PACKED: at channel 0, all C).
// out_nchw: y and z NCHW (NCDHW; at the group's first channel plane), consecutive threads
// on consecutive pixels of one channel (the contiguous run at stride 1); else NHWC,
// consecutive channels.
template <class G, bool D3, typename T>
__device__ void store_tile_phase(const float* Cs, T* y, const T* z, const T* bias,
                                 const ConvEpilogue& e, const ConvShape& s, const Phase& fd,
                                 const Phase& fh, const Phase& fw, int stride_h, int stride_w,
                                 cl::index_t m0, int n0, int Cg, int out_nchw) {
    const cl::index_t rows = (cl::index_t)s.n * fh.count * fw.count * (D3 ? fd.count : 1);
    const int C = s.c;
    const cl::index_t plane = (cl::index_t)s.h * s.w * (D3 ? s.d : 1);
    for (int idx = threadIdx.x; idx < G::BM * G::BN; idx += G::THREADS) {
        const int row = out_nchw ? idx % G::BM : idx / G::BN;
        const int c = n0 + (out_nchw ? idx / G::BM : idx % G::BN);
        const cl::index_t m = m0 + row;
        if (m >= rows || c >= Cg) continue;
        const int iw = (int)(m % fw.count);
        const cl::index_t nh = m / fw.count;
        const int ih = (int)(nh % fh.count);
        int n = (int)(nh / fh.count);
        const int h = fh.first + ih * stride_h, w = fw.first + iw * stride_w;
        cl::index_t nd = n;  // D3: n * D + d
        int d = 0;
        if (D3) {
            d = fd.first + (n % fd.count) * s.stride_d;
            n /= fd.count;
            nd = (cl::index_t)n * s.d + d;
        }
        const cl::index_t off = out_nchw ? ((cl::index_t)n * C + c) * plane +
                                               ((cl::index_t)d * s.h + h) * s.w + w
                                         : ((nd * s.h + h) * s.w + w) * C + c;
        const float zv = e.has_z ? cl::to_float(z[off]) : 0.f;
        const float bv = e.has_bias ? cl::to_float(bias[c]) : 0.f;
        y[off] = cl::from_float<T>(finish(e, Cs[row * G::C_LD + (c - n0)], zv, bv));
    }
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3,
          bool PACKED>
__device__ __forceinline__ void bwd_data_body(const T* dy, const T* w, T* dx, const T* z,
                                              const T* bias, const ConvShape& s,
                                              const ConvEpilogue& e, int out_nchw) {
    typedef tc::Gemm<T, BM, BN, BK, WM, WN, STAGES, false, true> G;
    DYNAMIC_SHARED(T, smem);
    const int pw = blockIdx.z % s.stride_w, phd = blockIdx.z / s.stride_w;
    const int ph = D3 ? phd % s.stride_h : phd;
    Phase fd;  // D3 only
    if (D3) fd = make_phase(phd / s.stride_h, s.d, s.pad_d, s.stride_d, s.t, s.dil_d);
    const Phase fh = make_phase(ph, s.h, s.pad_h, s.stride_h, s.r, s.dil_h);
    const Phase fw = make_phase(pw, s.w, s.pad_w, s.stride_w, s.s, s.dil_w);
    const cl::index_t m0 = (cl::index_t)blockIdx.x * BM;
    const cl::index_t rows = (cl::index_t)s.n * fh.count * fw.count * (D3 ? fd.count : 1);
    if (m0 >= rows) return;  // a small phase: uniform exit
    // The block's dx channels n0.. of its group (cg0: the group's first; cvalid of them), or
    // PACKED n0.. of C and the window of dy channels their groups take.
    const GroupWindow gw = group_window<PACKED>(s.c, s.c_per_group, s.k_per_group, BN);
    const int n0 = gw.n0, cg0 = gw.out0, cvalid = gw.out_valid, kbase = gw.in0;
    const int kwin = gw.in_count;
    BwdDataLoader<G, ALIGN, D3, PACKED> ld(dy, w, s, fd, fh, fw, m0, kbase, kwin, n0);
    const int iters = fh.ntaps * fw.ntaps * (D3 ? fd.ntaps : 1) * ((kwin + BK - 1) / BK);
    typename G::Acc acc;
    G::mainloop(ld, iters, smem, acc);
    float* Cs = reinterpret_cast<float*>(smem);
    G::stage_acc(acc, Cs);
    __syncthreads();
    // (NCHW: the group's first channel plane)
    const cl::index_t first = out_nchw ? (cl::index_t)cg0 * s.h * s.w * (D3 ? s.d : 1) : cg0;
    store_tile_phase<G, D3>(Cs, dx + first, z + first, bias + cg0, e, s, fd, fh, fw,
                            s.stride_h, s.stride_w, m0, n0, cvalid, out_nchw);
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3,
          bool PACKED = false>
struct BwdData {
    __device__ static void go(const T* dy, const T* w, T* dx, const T* z, const T* bias,
                              const ConvShape& s, const ConvEpilogue& e, int out_nchw) {
        bwd_data_body<T, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED>(dy, w, dx, z, bias, s,
                                                                        e, out_nchw);
    }
};
#if !CL_MMA_SM80
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3, bool PACKED>
struct BwdData<__nv_bfloat16, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED> {
    __device__ static void go(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                              const __nv_bfloat16*, const __nv_bfloat16*, const ConvShape&,
                              const ConvEpilogue&, int) {
        __trap();
    }
};
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3, bool PACKED>
struct BwdData<float, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED> {  // TF32 MMA: sm_80+
    __device__ static void go(const float*, const float*, float*, const float*, const float*,
                              const ConvShape&, const ConvEpilogue&, int) {
        __trap();
    }
};
#endif

}  // namespace tcconv

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_data(const T* __restrict__ dy, const T* __restrict__ w, T* dx, const T* z,
                     const T* __restrict__ bias, ConvShape s, ConvEpilogue e, int out_nchw) {
    tcconv::BwdData<T, BM, BN, BK, WM, WN, STAGES, ALIGN, false>::go(dy, w, dx, z, bias, s, e,
                                                                     out_nchw);
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_data_3d(const T* __restrict__ dy, const T* __restrict__ w, T* dx, const T* z,
                        const T* __restrict__ bias, ConvShape s, ConvEpilogue e,
                        int out_nchw) {
    tcconv::BwdData<T, BM, BN, BK, WM, WN, STAGES, ALIGN, true>::go(dy, w, dx, z, bias, s, e,
                                                                    out_nchw);
}

// Grouped backward data whose groups have fewer dx channels than BN (_3d: 3-D): blocks of BN
// consecutive dx channels of several groups, B the block-diagonal matrix of their filters
// (BwdDataLoader's PACKED); grid (rows, ceil(C / BN), phases).
template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_data_packed(const T* __restrict__ dy, const T* __restrict__ w, T* dx, const T* z,
                            const T* __restrict__ bias, ConvShape s, ConvEpilogue e,
                            int out_nchw) {
    tcconv::BwdData<T, BM, BN, BK, WM, WN, STAGES, ALIGN, false, true>::go(dy, w, dx, z, bias, s,
                                                                           e, out_nchw);
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_data_packed_3d(const T* __restrict__ dy, const T* __restrict__ w, T* dx,
                               const T* z, const T* __restrict__ bias, ConvShape s,
                               ConvEpilogue e, int out_nchw) {
    tcconv::BwdData<T, BM, BN, BK, WM, WN, STAGES, ALIGN, true, true>::go(dy, w, dx, z, bias, s,
                                                                          e, out_nchw);
}
