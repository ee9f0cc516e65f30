// dgemm_tc.cu — a strided-batched DGEMM on the fp64 tensor cores (mma.sync m8n8k4 .f64
// through common/mma.cuh), for callers that want a double GEMM without cuBLAS
// (cudnnlite/runtime/dgemm_tc.py: the same Mat views as runtime/blas.gemm).
//
//   C_i = alpha * op(A_i) op(B_i) + beta * C_i,   i = blockIdx.z + z0 (batch)
//
// Types: double only (the accumulation is the tensor core's, in double). sm_80+ (mma.cuh
// traps below; the Python side refuses older GPUs before launching).
//
// Variant: one, 128 threads (4 warps) per 32 x 32 tile of C; each warp owns a 16 x 16
// quarter (2 x 2 m8n8 MMAs, 8 doubles of accumulator per lane). k advances in slices of 16
// staged in shared memory (zeros past M, N and K, so any size works), then 4 k4 MMA steps.
// op(A)(i, k) and op(B)(k, j) are read through element strides, so a transposed operand
// costs only coalescing (the staging loop walks k fastest for A and j fastest for B).
// Epilogue: alpha * acc, plus beta * C when beta != 0 (C is not read when beta == 0, as in
// BLAS: NaN there does not leak), in double, one store per element.
#include "common/cudnnlite.cuh"
#include "common/mma.cuh"

// Element strides and offsets of one call (cudnnlite/runtime/dgemm_tc.py: SHAPE_DTYPE).
struct DgemmShape {
    long long a_row, a_col;  // op(A)(i, k) = A[a_off + i * a_row + k * a_col]
    long long b_row, b_col;  // op(B)(k, j) = B[b_off + k * b_row + j * b_col]
    long long ldc;           // C(i, j) = C[c_off + i * ldc + j]
    long long a_batch, b_batch, c_batch;  // per batch index (0: shared)
    long long a_off, b_off, c_off;
    double alpha, beta;
    int m, n, k, z0;  // z0: the batch index of blockIdx.z == 0 (grids over 65535)
};

namespace {
constexpr int kTile = 32;  // C rows and columns per block
constexpr int kSlice = 16;  // k per shared-memory stage
constexpr int kPad = 1;    // shared rows padded by a double: fewer bank conflicts
}  // namespace

extern "C" __global__ void __launch_bounds__(128)
    dgemm_tc(const double* A, const double* B, double* C, DgemmShape s) {
    __shared__ double As[kTile][kSlice + kPad];  // op(A)[m0 + i][k0 + kk]
    __shared__ double Bs[kSlice][kTile + kPad];  // op(B)[k0 + kk][n0 + j]
    const long long z = (long long)blockIdx.z + s.z0;
    A += s.a_off + z * s.a_batch;
    B += s.b_off + z * s.b_batch;
    C += s.c_off + z * s.c_batch;
    const int m0 = blockIdx.y * kTile, n0 = blockIdx.x * kTile;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int g = lane >> 2, t = lane & 3;
    const int wm = (warp / 2) * 16, wn = (warp % 2) * 16;  // this warp's quarter

    double acc[2][2][2] = {};  // [m8 tile][n8 tile][the lane's two C cells]
    for (int k0 = 0; k0 < s.k; k0 += kSlice) {
        for (int e = threadIdx.x; e < kTile * kSlice; e += blockDim.x) {
            const int ai = e / kSlice, ak = e % kSlice;  // A: k fastest
            const int bk = e / kTile, bj = e % kTile;    // B: j fastest
            const bool a_in = m0 + ai < s.m && k0 + ak < s.k;
            const bool b_in = k0 + bk < s.k && n0 + bj < s.n;
            As[ai][ak] = a_in ? A[(m0 + ai) * s.a_row + (k0 + ak) * s.a_col] : 0.0;
            Bs[bk][bj] = b_in ? B[(k0 + bk) * s.b_row + (n0 + bj) * s.b_col] : 0.0;
        }
        __syncthreads();
        for (int kk = 0; kk < kSlice; kk += 4) {
            // Fragments (mma.cuh): a = A[g][t] of each m8 tile, b = B[t][g] of each n8 tile.
            double a[2], b[2];
            for (int mi = 0; mi < 2; ++mi) a[mi] = As[wm + 8 * mi + g][kk + t];
            for (int ni = 0; ni < 2; ++ni) b[ni] = Bs[kk + t][wn + 8 * ni + g];
            for (int mi = 0; mi < 2; ++mi)
                for (int ni = 0; ni < 2; ++ni)
                    cl::mma::mma_m8n8k4_f64(acc[mi][ni], a[mi], b[ni], acc[mi][ni]);
        }
        __syncthreads();  // the slice is consumed before the next one overwrites it
    }

    for (int mi = 0; mi < 2; ++mi)
        for (int ni = 0; ni < 2; ++ni)
            for (int c = 0; c < 2; ++c) {
                // C/D fragment: the lane's cells are C[g][2t + c] of the m8n8 tile.
                const int row = m0 + wm + 8 * mi + g, col = n0 + wn + 8 * ni + 2 * t + c;
                if (row >= s.m || col >= s.n) continue;
                double* out = C + row * s.ldc + col;
                const double v = s.alpha * acc[mi][ni][c];
                *out = s.beta != 0.0 ? cl::math::fma(s.beta, *out, v) : v;
            }
}
