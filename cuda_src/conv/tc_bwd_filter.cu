// Multistage tensor-core convolution, backward filter (on conv/tc_gemm.cuh; the forward:
// tc_implicit_gemm.cu).
//
// dw[k][(r, s, c)] = sum over output pixels (n, p, q) of dy[n, p, q, k] * x[n, h, w, c],
// h = p * stride_h - pad_h + r * dil_h (w likewise): per group a GEMM with M = K/groups,
// N = R*S*C/groups and the reduction over N*P*Q (grid.y group-major over the groups' row
// tiles; dy, x and the partials offset to the group, dy's rows K and x's pixels C apart),
// both operands contiguous along their M / N side in NHWC, so both
// tiles are [BK][BM] / [BK][BN] (reduction rows) and reach the fragments through
// ldmatrix.trans (16-bit types), or for T = float (TF32, sm_80+) through 32-bit shared
// loads from rows padded by 8 floats (tc_gemm.cuh: ldmatrix.trans moves 16-bit halves).
// Split-K: blockIdx.z takes `chunk` output pixels (a multiple of BK) and
// writes fp32 partials to ws[z][k][rsc]; bwd_filter_reduce (conv/splitk_reduce.cuh) sums the
// splits in a fixed order: deterministic.
//
// Kernel: tc_conv_bwd_filter<T, BM, BN, BK, WM, WN, STAGES, ALIGN> (ALIGN divides K and C;
// T __half, __nv_bfloat16 or float for math="tf32")
// grid (ceil(R*S*C/groups / BN), groups * ceil(K/groups / BM), splits),
// block (BM / WM) * (BN / WN) * 32.
//
// Kernel: tc_conv_bwd_filter_3d<same parameters>: 3-D, NDHWC + KTRSC: the GEMM's N is
// T*R*S*C, the reduction N*O*P*Q; each thread's B column carries a depth tap and its pixel
// a depth coordinate (D3 in the loader; the 2-D instantiation has none of it).

#include "conv/splitk_reduce.cuh"
#include "conv/tc_conv.cuh"

namespace tcconv {

template <class G, int ALIGN, bool D3>
struct BwdFilterLoader {
    typedef typename G::T T;
    enum {
        A_CPR = G::BM / ALIGN, A_RPP = G::THREADS / A_CPR, A_PASSES = G::BK / A_RPP,
        B_CPR = G::BN / ALIGN, B_RPP = G::THREADS / B_CPR, B_PASSES = G::BK / B_RPP,
        BYTES = ALIGN * (int)sizeof(T),  // per cp.async
    };
    static_assert(G::THREADS % A_CPR == 0 && G::THREADS % B_CPR == 0, "fixed columns");
    static_assert(A_PASSES >= 1 && B_PASSES >= 1 && G::BK % A_RPP == 0 && G::BK % B_RPP == 0,
                  "whole passes");
    // Tile rows and output pixels: the reduction may visit a tile's BK pixels in any order
    // as long as A and B agree. A thread copies B rows b0 + j * B_RPP (so that, B_RPP a
    // multiple of the swizzle's 8-row period, its destinations are one register plus
    // constants) and gives them its B_PASSES consecutive pixels b0 * B_PASSES + j (one
    // output row, nearly always: x addresses by constant steps). Tile row rho therefore
    // holds pixel pix(rho) = (rho % B_RPP) * B_PASSES + rho / B_RPP, and an A thread's rows
    // a0 + i * A_RPP hold pixels pix(a0) + i * A_STEP (A_RPP = A_STEP * B_RPP as BM | BN).
    static_assert(G::BN % G::BM == 0, "A rows' pixels by a constant step: BM divides BN");
    enum { A_STEP = A_RPP / B_RPP };

    // A (dy): row npq at dy + npq * K; this thread's k chunk is fixed.
    const T* a_ptr;  // dy at (this thread's first pixel of the next tile, k chunk)
    int a_first;     // that pixel's place in a tile, or 2^30 when the k chunk is past K
    int a_dst[A_PASSES];
    // B (x): this thread's (r, s, c) is fixed; its B_PASSES consecutive pixels carry
    // through tiles by increments of one (n, p, q).
    int b_dst[B_PASSES];
    int b_first;                    // its first pixel's place in a tile, 2^30 past the columns
    int b_rh, b_rw;                 // r * dil_h - pad_h, s * dil_w - pad_w
    int b_n, b_p, b_q;              // the pixel of this thread's first row of the next tile
    int b_c;                        // x's channel: g * Cg + c
    int b_rd, b_o;                  // D3: td * dil_d - pad_d; the pixel's depth o
    int w_step;                     // stride_w * C: the next pixel of an output row, in x
    const T* x;
    int H, W, C, P, Q, stride_h, stride_w, K;  // C, K: x's pixel and dy's row strides
    int D, O, stride_d;             // D3 only
    cl::index_t row, end;           // first npq row of the next tile, end of this split

    // The GEMM's rows are kcount dy channels from kbase (m0: the tile's first of them), its
    // columns (taps, cwin x channels from cbase): a group's (g * Kg, Kg, g * Cg, Cg: offsets,
    // so the loop's x addresses stay on the kernel's pointer), or packed the block's K rows
    // and the window of x channels their groups read.
    __device__ BwdFilterLoader(const T* x_, const T* dy, const ConvShape& s, int kbase,
                               int kcount, int cbase, int cwin, int m0, int n0,
                               cl::index_t start, cl::index_t end_)
        : x(x_), H(s.h), W(s.w), C(s.c), P(s.p), Q(s.q), stride_h(s.stride_h),
          stride_w(s.stride_w), K(s.k), D(s.d), O(s.o), stride_d(s.stride_d), row(start),
          end(end_) {
        const int a_col = (threadIdx.x % A_CPR) * ALIGN;
        const int a_row0 = threadIdx.x / A_CPR;
        const int a_pix = (a_row0 % B_RPP) * B_PASSES + a_row0 / B_RPP;
        a_first = m0 + a_col < kcount ? a_pix : 1 << 30;
        a_ptr = dy + (start + a_pix) * s.k + kbase + m0 + a_col;
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i)
            a_dst[i] = G::a_index(a_row0 + i * A_RPP, a_col);
        const int b_col = (threadIdx.x % B_CPR) * ALIGN;
        const int b_row0 = threadIdx.x / B_CPR;
        const int rsc = n0 + b_col;
        b_first = rsc < s.r * s.s * cwin * (D3 ? s.t : 1) ? b_row0 * B_PASSES : 1 << 30;
        w_step = s.stride_w * s.c;
        const int c = rsc % cwin, trs = rsc / cwin, rs = D3 ? trs % (s.r * s.s) : trs;
        b_c = cbase + c;  // x's channel
        b_rh = (rs / s.s) * s.dil_h - s.pad_h;
        b_rw = (rs % s.s) * s.dil_w - s.pad_w;
        b_rd = D3 ? (trs / (s.r * s.s)) * s.dil_d - s.pad_d : 0;
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j)
            b_dst[j] = G::b_index(b_row0 + j * B_RPP, b_col);
        const cl::index_t m = start + b_row0 * B_PASSES;  // decoded once per split
        b_q = (int)(m % s.q);
        const cl::index_t np = m / s.q;
        b_p = (int)(np % s.p);
        b_n = (int)(np / s.p);
        b_o = 0;
        if (D3) b_o = b_n % s.o, b_n /= s.o;
    }

    // The pixel after (n, o, p, q) (o: D3 only).
    __device__ static void next_pixel(int& n, int& o, int& p, int& q, int P_, int Q_, int O_) {
        if (++q == Q_) {
            q = 0;
            if (++p == P_) {
                p = 0;
                if (D3 && ++o < O_) return;
                o = 0;
                ++n;
            }
        }
    }

    // Copy j of this thread's B rows (x at pixel (n, o, p, q) and its tap), when `in`.
    __device__ void copy_b(T* Bs, int j, int n, int o, int p, int q, bool in) const {
        const int h = p * stride_h + b_rh, w = q * stride_w + b_rw;
        bool ok = in && (unsigned)h < (unsigned)H && (unsigned)w < (unsigned)W;
        int nd = n;  // D3: n * D + d
        if (D3) {
            const int d = o * stride_d + b_rd;
            ok = ok && (unsigned)d < (unsigned)D;
            nd = n * D + d;
        }
        const T* src = x + (((nd * H + h) * W + w) * C + b_c);  // x < 2^31 elements
        cl::mma::cp_async<BYTES>(Bs + b_dst[j], src, ok);
    }

    __device__ void load(T* As, T* Bs) {
        // Pixels of this tile inside the split: this thread's pixel i (from its first) is in
        // while i < left less the first's place (2^30 where its column is outside the GEMM).
        const cl::index_t rem = end - row;
        const int left = rem < G::BK ? (int)rem : G::BK;
        const int a_lim = left - a_first, b_lim = left - b_first;
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i)
            cl::mma::cp_async<BYTES>(As + a_dst[i], a_ptr + (cl::index_t)i * A_STEP * K,
                                     i * A_STEP < a_lim);
        if (b_q + B_PASSES <= Q) {
            // (nearly always) this thread's pixels lie on one output row: h and the depth are
            // fixed, w and the address move by constant steps.
            const int h = b_p * stride_h + b_rh, w = b_q * stride_w + b_rw;
            bool in = (unsigned)h < (unsigned)H;
            int nd = b_n;
            if (D3) {
                const int d = b_o * stride_d + b_rd;
                in = in && (unsigned)d < (unsigned)D;
                nd = b_n * D + d;
            }
            const T* src = x + (((nd * H + h) * W + w) * C + b_c);
#pragma unroll
            for (int j = 0; j < B_PASSES; ++j) {
                const bool ok = in && j < b_lim && (unsigned)(w + j * stride_w) < (unsigned)W;
                cl::mma::cp_async<BYTES>(Bs + b_dst[j], src + j * w_step, ok);
            }
        } else {
            int n = b_n, p = b_p, q = b_q, o = b_o;
#pragma unroll
            for (int j = 0; j < B_PASSES; ++j) {
                copy_b(Bs, j, n, o, p, q, j < b_lim);
                next_pixel(n, o, p, q, P, Q, O);
            }
        }
        // This thread's first row of the next tile, BK pixels on: carry without dividing.
        b_q += G::BK;
        while (b_q >= Q) {
            b_q -= Q;
            if (++b_p == P) {
                b_p = 0;
                if (D3 && ++b_o < O) continue;
                b_o = 0;
                ++b_n;
            }
        }
        row += G::BK;
        a_ptr += (cl::index_t)G::BK * K;
    }
};

// Calls put(i, j, v, k, col) for each accumulator of this lane's warp tile: fragment (i, j),
// register v, at row k and column col of the block's GEMM (wm0, wn0: the warp's first).
template <class G, class Put>
__device__ __forceinline__ void store_fragments(const typename G::Acc& acc, int wm0, int wn0,
                                                Put put) {
    const int lane = threadIdx.x & 31;
#pragma unroll
    for (int i = 0; i < G::MF; ++i)
#pragma unroll
        for (int j = 0; j < G::NF; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v)
                put(i, j, v, wm0 + 16 * i + (lane >> 2) + 8 * (v >> 1),
                    wn0 + 8 * j + 2 * (lane & 3) + (v & 1));
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3,
          bool PACKED>
__device__ __forceinline__ void bwd_filter_body(const T* x, const T* dy, float* ws,
                                                const ConvShape& s, long long chunk) {
    typedef tc::Gemm<T, BM, BN, BK, WM, WN, STAGES, true, true> G;
    DYNAMIC_SHARED(T, smem);
    const int taps = s.r * s.s * (D3 ? s.t : 1);
    // The block's rows m0.. of its group (k0: the group's first filter), or PACKED m0.. of K
    // and the window of x channels (cwin from gw.in0) their groups read.
    const GroupWindow gw = group_window<PACKED>(s.k, s.k_per_group, s.c_per_group, BM);
    const int m0 = gw.n0, k0 = gw.out0, kcount = gw.out_valid, cwin = gw.in_count;
    const int n0 = blockIdx.x * BN;
    if (PACKED && n0 >= taps * cwin) return;  // (uniform) the grid covers the widest window
    const cl::index_t npq = (cl::index_t)s.n * s.p * s.q * (D3 ? s.o : 1);
    const cl::index_t start = (cl::index_t)blockIdx.z * chunk;
    const cl::index_t end = start + chunk < npq ? start + chunk : npq;
    const int iters = start < end ? (int)((end - start + BK - 1) / BK) : 0;
    BwdFilterLoader<G, ALIGN, D3> ld(x, dy, s, k0, kcount, gw.in0, cwin, m0, n0, start, end);
    typename G::Acc acc;
    G::mainloop(ld, iters, smem, acc);
    // Partials straight from the fragments: two consecutive rsc per register pair.
    const int rsc = taps * s.c_per_group;
    float* part = ws + ((cl::index_t)blockIdx.z * s.k + k0) * rsc;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm0 = m0 + (warp / G::WARPS_N) * WM, wn0 = n0 + (warp % G::WARPS_N) * WN;
    if (PACKED) {
        // Only the block-diagonal entries are dw: row k's group's channels of each tap. The
        // lane's rows' groups (as window channels) and columns' (tap, window channel), once.
        const int cg = s.c_per_group, cols = taps * cwin;
        int row_c[G::MF][2], col_tap[G::NF][2], col_c[G::NF][2];
#pragma unroll
        for (int i = 0; i < G::MF; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int k = wm0 + 16 * i + (lane >> 2) + 8 * h;
                row_c[i][h] = (k / s.k_per_group - gw.g_first) * cg;
            }
#pragma unroll
        for (int j = 0; j < G::NF; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int col = wn0 + 8 * j + 2 * (lane & 3) + h;
                col_tap[j][h] = col / cwin;
                col_c[j][h] = col < cols ? col - col_tap[j][h] * cwin : -(1 << 30);
            }
        store_fragments<G>(acc, wm0, wn0, [&](int i, int j, int v, int k, int) {
            const int c = col_c[j][v & 1] - row_c[i][v >> 1];  // in k's group
            if (k < kcount && (unsigned)c < (unsigned)cg)
                part[(cl::index_t)k * rsc + col_tap[j][v & 1] * cg + c] = acc[i][j][v];
        });
    } else {
        store_fragments<G>(acc, wm0, wn0, [&](int i, int j, int v, int k, int col) {
            if (k < kcount && col < rsc) part[(cl::index_t)k * rsc + col] = acc[i][j][v];
        });
    }
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3,
          bool PACKED = false>
struct BwdFilter {
    __device__ static void go(const T* x, const T* dy, float* ws, const ConvShape& s,
                              long long chunk) {
        bwd_filter_body<T, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED>(x, dy, ws, s, chunk);
    }
};
#if !CL_MMA_SM80
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3, bool PACKED>
struct BwdFilter<__nv_bfloat16, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED> {
    __device__ static void go(const __nv_bfloat16*, const __nv_bfloat16*, float*,
                              const ConvShape&, long long) {
        __trap();
    }
};
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3, bool PACKED>
struct BwdFilter<float, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED> {  // TF32 MMA: sm_80+
    __device__ static void go(const float*, const float*, float*, const ConvShape&, long long) {
        __trap();
    }
};
#endif

}  // namespace tcconv

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_filter(const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ ws,
                       ConvShape s, long long chunk) {
    tcconv::BwdFilter<T, BM, BN, BK, WM, WN, STAGES, ALIGN, false>::go(x, dy, ws, s, chunk);
}

// Grouped backward filter whose groups have fewer filters than BM (_3d: 3-D): blocks of BM
// consecutive filters of several groups against the (tap, window channel) columns of the
// x channels those groups read; only the block-diagonal entries are dw (PACKED).
// grid (ceil(R*S*widest window / BN), ceil(K / BM), splits).
template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_filter_packed(const T* __restrict__ x, const T* __restrict__ dy,
                              float* __restrict__ ws, ConvShape s, long long chunk) {
    tcconv::BwdFilter<T, BM, BN, BK, WM, WN, STAGES, ALIGN, false, true>::go(x, dy, ws, s, chunk);
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_filter_packed_3d(const T* __restrict__ x, const T* __restrict__ dy,
                                 float* __restrict__ ws, ConvShape s, long long chunk) {
    tcconv::BwdFilter<T, BM, BN, BK, WM, WN, STAGES, ALIGN, true, true>::go(x, dy, ws, s, chunk);
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_filter_3d(const T* __restrict__ x, const T* __restrict__ dy,
                          float* __restrict__ ws, ConvShape s, long long chunk) {
    tcconv::BwdFilter<T, BM, BN, BK, WM, WN, STAGES, ALIGN, true>::go(x, dy, ws, s, chunk);
}
