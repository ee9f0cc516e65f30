// Multistage tensor-core implicit-GEMM convolution, forward, NHWC + KRSC, fp16 / bf16
// inputs, fp32 accumulation (mma.sync m16n8k16 through conv/tc_gemm.cuh).
//
// GEMM view (groups == 1): rows m = (n, p, q) output pixels, columns = K output channels,
// reduction over (r, s, c) in the filter's KRSC order, walked as R*S taps x ceil(C / BK)
// channel slices: one stage holds BK channels of one tap. No im2col buffer and no integer
// division in the main loop: each thread decodes its A rows (n, h0, w0) once, and the
// tap/channel iterator advances by additions.
//
// Kernel: tc_conv_fwd<T, BM, BN, BK, WM, WN, STAGES, ALIGN>
//   T       __half (sm_75+; sm_75 runs two m16n8k8 per MMA) or __nv_bfloat16 (sm_80+)
//   BM x BN block tile (output pixels x output channels), BK channels per stage
//   WM x WN warp tile; (BM / WM) * (BN / WN) warps
//   STAGES  cp.async stages in flight
//   ALIGN   elements per cp.async: 8 (16 bytes, needs C % 8 == 0) or 2 (4 bytes, C even)
// Readable name (solver): tc_igemm_fwd_<BM>x<BN>x<BK>_w<WM>x<WN>_s<STAGES>_a<ALIGN>_nhwc_<dtype>
//
// Epilogue: the accumulators go through shared memory ([BM][BN + 4] fp32) and each thread
// finishes 8 consecutive output channels of one pixel: alpha * acc + alpha2 * z + bias,
// the activation, and one 16-byte store (scalar stores where K % 8 != 0 or a pointer is
// not 16-byte aligned). y and z may alias (in-place residual): neither is __restrict__.
//
// Dynamic shared memory: max(STAGES * (BM + BN) * BK * 2, BM * (BN + 4) * 4) bytes.
// grid (ceil(N*P*Q / BM), ceil(K / BN)), block (BM / WM) * (BN / WN) * 32.
#include "common/cudnnlite.cuh"
#include "conv/conv_common.cuh"
#include "conv/tc_gemm.cuh"

namespace tcconv {

// Implicit-GEMM operand loader of the forward convolution (tc_gemm.cuh's Loader contract).
template <class G, int ALIGN>
struct FwdLoader {
    typedef typename G::T T;
    enum {
        CPR = G::BK / ALIGN,                // copies per tile row
        ROWS_PER_PASS = G::THREADS / CPR,
        A_PASSES = G::BM / ROWS_PER_PASS,
        B_PASSES = G::BN / ROWS_PER_PASS,
    };
    static_assert(G::THREADS % CPR == 0, "a thread keeps one column of the tile");
    static_assert(G::BM % ROWS_PER_PASS == 0 && G::BN % ROWS_PER_PASS == 0, "whole passes");

    const T* x;
    const T* w;
    int H, W, C, S, dil_h, dil_w;
    cl::index_t rsc;
    int col;                        // this thread's element column within a tile row
    int row0;                       // its first tile row
    cl::index_t a_base[A_PASSES];   // n * H * W * C of each A row
    int a_h[A_PASSES], a_w[A_PASSES];  // p * stride - pad (far negative: row past M)
    bool b_ok[B_PASSES];            // output channel < K
    cl::index_t b_base[B_PASSES];   // k * R * S * C
    // The reduction iterator: tap (r, t), channel slice c0, tap_base = (r * S + t) * C.
    int t, c0, r_off, t_off;
    cl::index_t tap_base;

    __device__ FwdLoader(const T* x_, const T* w_, const ConvShape& s, cl::index_t m0, int n0)
        : x(x_), w(w_), H(s.h), W(s.w), C(s.c), S(s.s), dil_h(s.dil_h), dil_w(s.dil_w) {
        rsc = (cl::index_t)s.r * s.s * s.c;
        col = (threadIdx.x % CPR) * ALIGN;
        row0 = threadIdx.x / CPR;
        const cl::index_t rows = (cl::index_t)s.n * s.p * s.q;
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i) {
            const cl::index_t m = m0 + row0 + i * ROWS_PER_PASS;
            if (m < rows) {
                const int q = (int)(m % s.q);
                const cl::index_t np = m / s.q;
                const int n = (int)(np / s.p), p = (int)(np % s.p);
                a_base[i] = (cl::index_t)n * s.h * s.w * s.c;
                a_h[i] = p * s.stride_h - s.pad_h;
                a_w[i] = q * s.stride_w - s.pad_w;
            } else {
                a_base[i] = 0;
                a_h[i] = -(1 << 30);  // every tap out of range
                a_w[i] = 0;
            }
        }
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j) {
            const int k = n0 + row0 + j * ROWS_PER_PASS;
            b_ok[j] = k < s.k;
            b_base[j] = b_ok[j] ? (cl::index_t)k * rsc : 0;
        }
        t = 0;
        c0 = 0;
        r_off = 0;
        t_off = 0;
        tap_base = 0;
    }

    __device__ void load(T* As, T* Bs) {
        const int c = c0 + col;
        const bool c_ok = c < C;  // C % ALIGN == 0: a copy is wholly in or out
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i) {
            const int h = a_h[i] + r_off, wc = a_w[i] + t_off;
            const bool ok = c_ok && (unsigned)h < (unsigned)H && (unsigned)wc < (unsigned)W;
            const T* src = ok ? x + a_base[i] + ((cl::index_t)h * W + wc) * C + c : x;
            cl::mma::cp_async<ALIGN * 2>(As + tc::tile_offset<G::BK>(row0 + i * ROWS_PER_PASS, col),
                                         src, ok);
        }
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j) {
            const bool ok = c_ok && b_ok[j];
            const T* src = ok ? w + b_base[j] + tap_base + c : w;
            cl::mma::cp_async<ALIGN * 2>(Bs + tc::tile_offset<G::BK>(row0 + j * ROWS_PER_PASS, col),
                                         src, ok);
        }
        // Next tile: the next channel slice, or the first slice of the next tap.
        c0 += G::BK;
        if (c0 >= C) {
            c0 = 0;
            tap_base += C;
            t_off += dil_w;
            if (++t == S) {
                t = 0;
                t_off = 0;
                r_off += dil_h;
            }
        }
    }
};

// One out-of-line copy of the activation switch per module (see conv_common.cuh).
__device__ __noinline__ float activate_slow(int mode, float v, ActParams a) {
    return conv::activate(mode, v, a);
}

__device__ __forceinline__ float finish(const ConvEpilogue& e, float acc, float zv, float bv) {
    float v = e.alpha * acc;
    if (e.has_z) v = fmaf(e.alpha2, zv, v);
    if (e.has_bias) v += bv;
    return e.act_mode == act::kIdentity ? v : activate_slow(e.act_mode, v, e.act);
}

// Writes a [BM][C_LD] fp32 tile of results for NHWC rows m0.., channels n0.. of y (K wide).
template <class G, typename T>
__device__ void store_tile_nhwc(const float* Cs, T* y, const T* z, const T* bias,
                                const ConvEpilogue& e, cl::index_t rows, int K, cl::index_t m0,
                                int n0) {
    enum { GROUPS = G::BN / 8 };
    const bool vec = K % 8 == 0 && ((size_t)y & 15) == 0 && (!e.has_z || ((size_t)z & 15) == 0) &&
                     (!e.has_bias || ((size_t)bias & 15) == 0);
    for (int idx = threadIdx.x; idx < G::BM * GROUPS; idx += G::THREADS) {
        const int row = idx / GROUPS, k = n0 + (idx % GROUPS) * 8;
        const cl::index_t m = m0 + row;
        if (m >= rows || k >= K) continue;
        const float* acc = Cs + row * G::C_LD + (k - n0);
        const cl::index_t off = m * K + k;
        if (vec) {
            T zs[8], bs[8], out[8];
            if (e.has_z) *reinterpret_cast<uint4*>(zs) = *reinterpret_cast<const uint4*>(z + off);
            if (e.has_bias)
                *reinterpret_cast<uint4*>(bs) = *reinterpret_cast<const uint4*>(bias + k);
#pragma unroll
            for (int j = 0; j < 8; ++j) {
                const float zv = e.has_z ? cl::to_float(zs[j]) : 0.f;
                const float bv = e.has_bias ? cl::to_float(bs[j]) : 0.f;
                out[j] = cl::from_float<T>(finish(e, acc[j], zv, bv));
            }
            *reinterpret_cast<uint4*>(y + off) = *reinterpret_cast<const uint4*>(out);
        } else {
            for (int j = 0; j < 8 && k + j < K; ++j) {
                const float zv = e.has_z ? cl::to_float(z[off + j]) : 0.f;
                const float bv = e.has_bias ? cl::to_float(bias[k + j]) : 0.f;
                y[off + j] = cl::from_float<T>(finish(e, acc[j], zv, bv));
            }
        }
    }
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__device__ __forceinline__ void fwd_body(const T* x, const T* w, T* y, const T* z, const T* bias,
                                         const ConvShape& s, const ConvEpilogue& e) {
    typedef tc::Gemm<T, BM, BN, BK, WM, WN, STAGES, false, false> G;
    DYNAMIC_SHARED(T, smem);
    const cl::index_t m0 = (cl::index_t)blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    FwdLoader<G, ALIGN> ld(x, w, s, m0, n0);
    const int iters = s.r * s.s * ((s.c + BK - 1) / BK);
    typename G::Acc acc;
    G::mainloop(ld, iters, smem, acc);
    float* Cs = reinterpret_cast<float*>(smem);
    G::stage_acc(acc, Cs);
    __syncthreads();
    store_tile_nhwc<G>(Cs, y, z, bias, e, (cl::index_t)s.n * s.p * s.q, s.k, m0, n0);
}

// bf16 MMA exists from sm_80; older targets get a trapping body the solver never launches.
template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
struct Fwd {
    __device__ static void go(const T* x, const T* w, T* y, const T* z, const T* bias,
                              const ConvShape& s, const ConvEpilogue& e) {
        fwd_body<T, BM, BN, BK, WM, WN, STAGES, ALIGN>(x, w, y, z, bias, s, e);
    }
};
#if !CL_MMA_SM80
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
struct Fwd<__nv_bfloat16, BM, BN, BK, WM, WN, STAGES, ALIGN> {
    __device__ static void go(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                              const __nv_bfloat16*, const __nv_bfloat16*, const ConvShape&,
                              const ConvEpilogue&) {
        __trap();
    }
};
#endif

}  // namespace tcconv

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_fwd(const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z,
                const T* __restrict__ bias, ConvShape s, ConvEpilogue e) {
    tcconv::Fwd<T, BM, BN, BK, WM, WN, STAGES, ALIGN>::go(x, w, y, z, bias, s, e);
}
