// Tensor-core implicit-GEMM convolution, forward (nvcuda::wmma, fp32 accumulation).
//
// GEMM view (groups == 1): rows m = (n, p, q) output pixels, columns = K output
// channels, reduction kk over C*R*S in the filter's own order: (r, s, c) for NHWC+KRSC
// (c fastest: contiguous in x and w), (c, r, s) for NCHW+KCRS. No im2col buffer: each
// BK-slice of the im2col rows is gathered straight into shared memory (zeros for the
// padding and past the ends), the filter slice likewise, then every warp runs WMMA on
// its 32 x 32 sub-tile (2 x 2 fragments of 16 x 16).
//
// Kernels (template T = storage, BM x BN = block tile, NHWC = layout):
//   wmma_conv_fwd<__half, BM, BN, NHWC>         m16n16k16, fp16 inputs          (sm_70+)
//   wmma_conv_fwd<__nv_bfloat16, BM, BN, NHWC>  m16n16k16, bf16 inputs          (sm_80+)
//   wmma_conv_fwd<float, BM, BN, NHWC>          m16n16k8, inputs rounded to TF32 (sm_80+)
// Tiles: 32x32 (1 warp), 64x64 (4 warps), 128x64 (8 warps); BK = 32 for every type.
// Below sm_80 the bf16/tf32 instantiations compile to a __trap() body (no bf16/tf32
// fragments in <mma.h> there); the solver never launches them on such a device.
//
// Epilogue: the accumulators go through shared memory (the fragment's element mapping
// is unspecified) and each thread applies conv::store_output to its elements, mapped so
// that consecutive threads write consecutive addresses (k fastest for NHWC, m for NCHW).
#include "common/cudnnlite.cuh"
#include "conv/conv_common.cuh"
#ifndef CUDNNLITE_EMULATOR
#include <mma.h>
#endif

using namespace nvcuda;

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define CL_WMMA_SM80 1
#else
#define CL_WMMA_SM80 0
#endif

namespace wmmaconv {

enum { kBK = 32 };  // reduction depth of one shared-memory slice

// The fragment input type and k of one MMA for a storage type; SKEW pads each shared
// row so the rows start on different banks while staying 32-byte aligned per fragment.
template <typename T> struct Traits;
template <> struct Traits<__half> {
    typedef __half frag_t;
    static const int kK = 16, kSkew = 8;
};
#if CL_WMMA_SM80
template <> struct Traits<__nv_bfloat16> {
    typedef __nv_bfloat16 frag_t;
    static const int kK = 16, kSkew = 8;
};
template <> struct Traits<float> {
    typedef wmma::precision::tf32 frag_t;
    static const int kK = 8, kSkew = 4;
};
#endif

template <typename Frag>
__device__ __forceinline__ void to_tf32(Frag& f, float) {
#if CL_WMMA_SM80
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = wmma::__float_to_tf32(f.x[i]);
#endif
}
template <typename Frag, typename U>
__device__ __forceinline__ void to_tf32(Frag&, U) {}

template <typename T, int BM, int BN, bool NHWC>
__device__ __forceinline__ void conv_body(const T* __restrict__ x, const T* __restrict__ w,
                                          T* y, const T* z,  // may alias (z is out)
                                          const T* __restrict__ bias, const ConvShape& s,
                                          const ConvEpilogue& e) {
    typedef Traits<T> Tr;
    typedef typename Tr::frag_t F;
    const int LD = kBK + Tr::kSkew;  // shared row length (elements)
    const int kThreads = (BM / 32) * (BN / 32) * 32;
    const int kStageBytes = (BM + BN) * LD * (int)sizeof(T);
    const int kOutBytes = BM * BN * (int)sizeof(float);
    __shared__ __align__(32) unsigned char smem[kStageBytes > kOutBytes ? kStageBytes : kOutBytes];
    T* As = reinterpret_cast<T*>(smem);  // [BM][LD]: im2col rows, kk contiguous
    T* Bs = As + BM * LD;                // [BN][LD]: filters, kk contiguous
    float* Cs = reinterpret_cast<float*>(smem);  // [BM][BN] after the main loop

    const cl::index_t rows = (cl::index_t)s.n * s.p * s.q;
    const int crs = s.c * s.r * s.s;
    const cl::index_t m0 = (cl::index_t)blockIdx.x * BM;
    const int n0 = blockIdx.y * BN;
    const int warp = threadIdx.x / 32;
    const int wm = warp / (BN / 32), wn = warp % (BN / 32);

    // This thread's A rows are fixed across the loop: decompose them once.
    const int kARows = BM * kBK / kThreads;  // elements per thread per slice
    const int col = threadIdx.x % kBK;
    int a_n[kARows], a_h[kARows], a_w[kARows];
#pragma unroll
    for (int i = 0; i < kARows; ++i) {
        const cl::index_t m = m0 + (threadIdx.x + i * kThreads) / kBK;
        if (m < rows) {
            const int q = (int)(m % s.q);
            const cl::index_t np = m / s.q;
            a_n[i] = (int)(np / s.p);
            a_h[i] = (int)(np % s.p) * s.stride_h - s.pad_h;
            a_w[i] = q * s.stride_w - s.pad_w;
        } else {
            a_n[i] = -1;
        }
    }

    wmma::fragment<wmma::accumulator, 16, 16, Tr::kK, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j) wmma::fill_fragment(acc[i][j], 0.0f);

    for (int k0 = 0; k0 < crs; k0 += kBK) {
        // Which (c, r, t) this thread's column of the slice is, in the filter's order.
        const int kk = k0 + col;
        int c, r, t;
        if (NHWC) {
            c = kk % s.c;
            const int rs = kk / s.c;
            r = rs / s.s;
            t = rs % s.s;
        } else {
            t = kk % s.s;
            const int cr = kk / s.s;
            r = cr % s.r;
            c = cr / s.r;
        }
        const bool kk_ok = kk < crs;
#pragma unroll
        for (int i = 0; i < kARows; ++i) {
            const int row = (threadIdx.x + i * kThreads) / kBK;
            const int h = a_h[i] + r * s.dil_h, wc = a_w[i] + t * s.dil_w;
            const bool in = kk_ok && a_n[i] >= 0 && h >= 0 && h < s.h && wc >= 0 && wc < s.w;
            As[row * LD + col] = in ? x[conv::x_offset<NHWC>(s, a_n[i], c, h, wc)] : cl::from_float<T>(0.0f);
        }
#pragma unroll
        for (int i = 0; i < BN * kBK / kThreads; ++i) {
            const int row = (threadIdx.x + i * kThreads) / kBK;
            const int k = n0 + row;
            const bool in = kk_ok && k < s.k;
            Bs[row * LD + col] = in ? w[(cl::index_t)k * crs + kk] : cl::from_float<T>(0.0f);
        }
        __syncthreads();
#pragma unroll
        for (int ks = 0; ks < kBK; ks += Tr::kK) {
            wmma::fragment<wmma::matrix_a, 16, 16, Tr::kK, F, wmma::row_major> a[2];
            wmma::fragment<wmma::matrix_b, 16, 16, Tr::kK, F, wmma::col_major> b[2];
#pragma unroll
            for (int i = 0; i < 2; ++i) {
                wmma::load_matrix_sync(a[i], As + (wm * 32 + 16 * i) * LD + ks, LD);
                to_tf32(a[i], T());
            }
#pragma unroll
            for (int j = 0; j < 2; ++j) {
                wmma::load_matrix_sync(b[j], Bs + (wn * 32 + 16 * j) * LD + ks, LD);
                to_tf32(b[j], T());
            }
#pragma unroll
            for (int i = 0; i < 2; ++i)
#pragma unroll
                for (int j = 0; j < 2; ++j) wmma::mma_sync(acc[i][j], a[i], b[j], acc[i][j]);
        }
        __syncthreads();  // the next slice overwrites As/Bs (and Cs aliases them)
    }

#pragma unroll
    for (int i = 0; i < 2; ++i)
#pragma unroll
        for (int j = 0; j < 2; ++j)
            wmma::store_matrix_sync(Cs + (wm * 32 + 16 * i) * BN + wn * 32 + 16 * j, acc[i][j], BN,
                                    wmma::mem_row_major);
    __syncthreads();
    for (int idx = threadIdx.x; idx < BM * BN; idx += kThreads) {
        const int row = NHWC ? idx / BN : idx % BM;
        const int cn = NHWC ? idx % BN : idx / BM;
        const cl::index_t m = m0 + row;
        const int k = n0 + cn;
        if (m >= rows || k >= s.k) continue;
        const int q = (int)(m % s.q);
        const cl::index_t np = m / s.q;
        const int n = (int)(np / s.p), p = (int)(np % s.p);
        conv::store_output(y, z, bias, e, conv::y_offset<NHWC>(s, n, k, p, q), k,
                           Cs[row * BN + cn]);
    }
}

// Instantiates conv_body only where the fragment types exist.
template <typename T, int BM, int BN, bool NHWC> struct Run {
    __device__ static void go(const T* x, const T* w, T* y, const T* z, const T* bias,
                              const ConvShape& s, const ConvEpilogue& e) {
        conv_body<T, BM, BN, NHWC>(x, w, y, z, bias, s, e);
    }
};
#if !CL_WMMA_SM80
template <int BM, int BN, bool NHWC> struct Run<__nv_bfloat16, BM, BN, NHWC> {
    __device__ static void go(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                              const __nv_bfloat16*, const __nv_bfloat16*, const ConvShape&,
                              const ConvEpilogue&) {
        __trap();
    }
};
template <int BM, int BN, bool NHWC> struct Run<float, BM, BN, NHWC> {
    __device__ static void go(const float*, const float*, float*, const float*, const float*,
                              const ConvShape&, const ConvEpilogue&) {
        __trap();
    }
};
#endif

}  // namespace wmmaconv

// grid (ceil(N*P*Q / BM), ceil(K / BN)), block (BM / 32) * (BN / 32) * 32.
template <typename T, int BM, int BN, bool NHWC>
__global__ void __launch_bounds__((BM / 32) * (BN / 32) * 32)
    wmma_conv_fwd(const T* __restrict__ x, const T* __restrict__ w, T* y,
                  const T* z, const T* __restrict__ bias, ConvShape s, ConvEpilogue e) {
    wmmaconv::Run<T, BM, BN, NHWC>::go(x, w, y, z, bias, s, e);
}
