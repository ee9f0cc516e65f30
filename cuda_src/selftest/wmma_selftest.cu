// Self-test kernels for the tensor-core fragment API (nvcuda::wmma): the emulator's
// model (cudnnlite/runtime/emulator/include/emu_wmma.h) and a GPU run the same code.
//
// Kernels (one warp per 16x16 output tile; grid.x = tiles of C; K a multiple of the
// fragment's k):
//   wmma_gemm_fp16   C[MxN] fp32 = A[MxK] fp16 row-major * B[KxN] fp16 (B_COL: col-major)
//   wmma_gemm_bf16   the same with bf16 inputs (sm_80+)
//   wmma_gemm_tf32   m16n16k8 with fp32 inputs rounded to TF32 (sm_80+)
//   wmma_acc_roundtrip  load an fp32 accumulator tile (row or col major), scale it via
//                    x[], store it in the other layout
//   wmma_staged_fp16 two warps stage A and B through shared memory; `barrier` = 0
//                    plants a missing __syncthreads between the staging and the loads
//
// Guard: bf16 and tf32 fragments exist only for sm_80+ in <mma.h>; on older archs those
// kernels compile to a __trap() body (the solvers never launch them there).
#include "common/cudnnlite.cuh"
#ifndef CUDNNLITE_EMULATOR
#include <mma.h>
#endif

using namespace nvcuda;

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define CL_WMMA_SM80 1
#else
#define CL_WMMA_SM80 0
#endif

template <bool COL> struct b_layout { typedef wmma::row_major type; };
template <> struct b_layout<true> { typedef wmma::col_major type; };

// One warp: C tile (tm, tn) of an M x N product; lda = K, ldb = N (row) or K (col).
template <typename T, bool B_COL>
__device__ void gemm_tile_16(const T* A, const T* B, float* C, int N, int K) {
    typedef typename b_layout<B_COL>::type BLayout;
    int tiles_n = N / 16;
    int tm = blockIdx.x / tiles_n, tn = blockIdx.x % tiles_n;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, T, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, T, BLayout> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(c, 0.0f);
    for (int k = 0; k < K; k += 16) {
        wmma::load_matrix_sync(a, A + (cl::index_t)tm * 16 * K + k, K);
        const T* bp = B_COL ? B + (cl::index_t)tn * 16 * K + k : B + (cl::index_t)k * N + tn * 16;
        wmma::load_matrix_sync(b, bp, B_COL ? K : N);
        wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(C + (cl::index_t)tm * 16 * N + tn * 16, c, N, wmma::mem_row_major);
}

extern "C" __global__ void wmma_gemm_fp16(const __half* A, const __half* B, float* C, int N, int K,
                                          int b_col) {
    if (b_col) gemm_tile_16<__half, true>(A, B, C, N, K);
    else gemm_tile_16<__half, false>(A, B, C, N, K);
}

extern "C" __global__ void wmma_gemm_bf16(const __nv_bfloat16* A, const __nv_bfloat16* B, float* C,
                                          int N, int K, int b_col) {
#if CL_WMMA_SM80
    if (b_col) gemm_tile_16<__nv_bfloat16, true>(A, B, C, N, K);
    else gemm_tile_16<__nv_bfloat16, false>(A, B, C, N, K);
#else
    __trap();
#endif
}

extern "C" __global__ void wmma_gemm_tf32(const float* A, const float* B, float* C, int N, int K) {
#if CL_WMMA_SM80
    int tiles_n = N / 16;
    int tm = blockIdx.x / tiles_n, tn = blockIdx.x % tiles_n;
    wmma::fragment<wmma::matrix_a, 16, 16, 8, wmma::precision::tf32, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 8, wmma::precision::tf32, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 8, float> c;
    wmma::fill_fragment(c, 0.0f);
    for (int k = 0; k < K; k += 8) {
        wmma::load_matrix_sync(a, A + (cl::index_t)tm * 16 * K + k, K);
        wmma::load_matrix_sync(b, B + (cl::index_t)k * N + tn * 16, N);
        for (int i = 0; i < a.num_elements; ++i) a.x[i] = wmma::__float_to_tf32(a.x[i]);
        for (int i = 0; i < b.num_elements; ++i) b.x[i] = wmma::__float_to_tf32(b.x[i]);
        wmma::mma_sync(c, a, b, c);
    }
    wmma::store_matrix_sync(C + (cl::index_t)tm * 16 * N + tn * 16, c, N, wmma::mem_row_major);
#else
    __trap();
#endif
}

// out = scale * in, read with layout `in_col` and written with the other one (a transpose).
extern "C" __global__ void wmma_acc_roundtrip(const float* in, float* out, float scale, int in_col) {
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::load_matrix_sync(c, in, 16, in_col ? wmma::mem_col_major : wmma::mem_row_major);
    for (int i = 0; i < c.num_elements; ++i) c.x[i] *= scale;
    wmma::store_matrix_sync(out, c, 16, in_col ? wmma::mem_row_major : wmma::mem_col_major);
}

// Block of 64 threads (2 warps): C[16x32] = A[16xK] * B[Kx32], both staged in shared
// memory 16 columns of K at a time; warp w computes columns [16w, 16w + 16).
extern "C" __global__ void wmma_staged_fp16(const __half* A, const __half* B, float* C, int K,
                                            int barrier) {
    __shared__ __align__(32) __half As[16 * 16];
    __shared__ __align__(32) __half Bs[16 * 32];
    int warp = threadIdx.x / 32;
    wmma::fragment<wmma::matrix_a, 16, 16, 16, __half, wmma::row_major> a;
    wmma::fragment<wmma::matrix_b, 16, 16, 16, __half, wmma::row_major> b;
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> c;
    wmma::fill_fragment(c, 0.0f);
    for (int k = 0; k < K; k += 16) {
        for (int i = threadIdx.x; i < 16 * 16; i += blockDim.x)
            As[i] = A[(cl::index_t)(i / 16) * K + k + i % 16];
        for (int i = threadIdx.x; i < 16 * 32; i += blockDim.x)
            Bs[i] = B[(cl::index_t)(k + i / 32) * 32 + i % 32];
        if (barrier) __syncthreads();
        wmma::load_matrix_sync(a, As, 16);
        wmma::load_matrix_sync(b, Bs + warp * 16, 32);
        wmma::mma_sync(c, a, b, c);
        __syncthreads();  // the next stage overwrites As/Bs
    }
    wmma::store_matrix_sync(C + warp * 16, c, 32, wmma::mem_row_major);
}
