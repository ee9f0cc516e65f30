// Self-test kernels for the warp-level tensor-core layer (common/mma.cuh): the emulator's
// model (emu_mma.h) and a GPU run the same code, and tests/emulator/test_emu_mma.py pins
// every fragment layout lane by lane against the PTX ISA tables.
//
// Kernels (one warp unless stated):
//   mma_regs_f16 / mma_regs_bf16 / mma_regs_tf32   d = mma(a, b, c) on raw per-lane
//       registers: a[lane*4 + j], b[lane*2 + j], c[lane*4 + j] -> d[lane*4 + j]
//   tf32_round       y[i] = the bits of cl::mma::to_tf32(x[i]), one thread per value
//   ldmatrix_regs    32 rows x 8 16-bit values staged in shared memory; lane l gives the
//       address of row rows[l]; out[l*4 + i] = register i of ldmatrix .x{count}[.trans]
//   cp_async_roundtrip  block of 32 threads: thread i copies 16-byte chunk i of src with
//       cp.async (zero-fill past n floats), then reads chunk (i + 1) % 32; mode 0 plants a
//       missing wait, mode 1 a missing barrier, mode 2 is correct. BYTES = 4, 8, 16 per copy.
//   mma_gemm_pipeline  C[16 x 8] fp32 = A[16 x K] (row-major fp16) * B[K x 8] (k-major fp16,
//       i.e. B stored as K rows of 8) through a 3-stage cp.async pipeline, ldmatrix.x4 for A
//       and ldmatrix.x2.trans for B; K a multiple of 16.
//   mma_regs_f64     d = mma_m8n8k4_f64(a, b, c) on raw per-lane doubles: a[lane], b[lane],
//       c[lane*2 + j] -> d[lane*2 + j]
//   mma_gemm_f64     C[M x N] = A[M x K] * B[K x N] in double (all row-major, any sizes):
//       one warp per 8 x 8 tile of C (blockDim.x = 32 * warps, tiles in row-major order
//       over the grid's warps), k in steps of 4 with zeros past K and past the edges
#include "common/cudnnlite.cuh"
#include "common/mma.cuh"

using namespace cl::mma;

template <typename T>
__device__ void regs_mma_16(const unsigned* a, const unsigned* b, const float* c, float* d) {
    const int lane = threadIdx.x % 32;
    unsigned ra[4], rb[2];
    float rc[4], rd[4];
    for (int j = 0; j < 4; ++j) ra[j] = a[lane * 4 + j], rc[j] = c[lane * 4 + j];
    for (int j = 0; j < 2; ++j) rb[j] = b[lane * 2 + j];
    mma_m16n8k16<T>(rd, ra, rb, rc);
    for (int j = 0; j < 4; ++j) d[lane * 4 + j] = rd[j];
}

extern "C" __global__ void mma_regs_f16(const unsigned* a, const unsigned* b, const float* c,
                                        float* d) {
    regs_mma_16<__half>(a, b, c, d);
}

extern "C" __global__ void mma_regs_bf16(const unsigned* a, const unsigned* b, const float* c,
                                         float* d) {
    regs_mma_16<__nv_bfloat16>(a, b, c, d);
}

extern "C" __global__ void mma_regs_tf32(const unsigned* a, const unsigned* b, const float* c,
                                         float* d) {
    const int lane = threadIdx.x % 32;
    unsigned ra[4], rb[2];
    float rc[4], rd[4];
    for (int j = 0; j < 4; ++j) ra[j] = a[lane * 4 + j], rc[j] = c[lane * 4 + j];
    for (int j = 0; j < 2; ++j) rb[j] = b[lane * 2 + j];
    mma_m16n8k8_tf32(rd, ra, rb, rc);
    for (int j = 0; j < 4; ++j) d[lane * 4 + j] = rd[j];
}

extern "C" __global__ void tf32_round(const float* x, unsigned* y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = to_tf32(x[i]);
}

template <int N, bool Trans>
__device__ void ldm(const unsigned short* tile, int row, unsigned* out) {
    unsigned r[N];
    ldmatrix<N, Trans>(r, tile + row * 8);
    for (int i = 0; i < N; ++i) out[(threadIdx.x % 32) * 4 + i] = r[i];
}

extern "C" __global__ void ldmatrix_regs(const unsigned short* src, const int* rows, unsigned* out,
                                         int count, int trans) {
    __shared__ __align__(16) unsigned short tile[32 * 8];
    const int lane = threadIdx.x % 32;
    for (int i = lane; i < 32 * 8; i += 32) tile[i] = src[i];
    __syncwarp();
    const int row = rows[lane];
    if (count == 1) trans ? ldm<1, true>(tile, row, out) : ldm<1, false>(tile, row, out);
    if (count == 2) trans ? ldm<2, true>(tile, row, out) : ldm<2, false>(tile, row, out);
    if (count == 4) trans ? ldm<4, true>(tile, row, out) : ldm<4, false>(tile, row, out);
}

template <int BYTES>
__device__ void roundtrip(const float* src, float* dst, int n, int mode) {
    __shared__ __align__(16) float buf[32 * 4];
    const int t = threadIdx.x;
    // Chunk t (4 floats) in BYTES-sized copies; a copy past n floats is zero-filled.
    for (int off = 0; off < 16; off += BYTES) {
        const int first = t * 4 + off / 4;
        cp_async<BYTES>(reinterpret_cast<char*>(buf + t * 4) + off, src + first,
                        first + BYTES / 4 <= n);
    }
    cp_async_commit();
    if (mode != 0) cp_async_wait<0>();
    if (mode != 1) __syncthreads();
    const int o = (t + 1) % 32;
    for (int j = 0; j < 4; ++j) dst[o * 4 + j] = buf[o * 4 + j];
}

extern "C" __global__ void cp_async_roundtrip(const float* src, float* dst, int n, int mode,
                                              int bytes) {
    if (bytes == 4) roundtrip<4>(src, dst, n, mode);
    if (bytes == 8) roundtrip<8>(src, dst, n, mode);
    if (bytes == 16) roundtrip<16>(src, dst, n, mode);
}

extern "C" __global__ void mma_gemm_pipeline(const __half* A, const __half* B, float* C, int K) {
    enum { kStages = 3 };
    // A stage: 16 rows x 16 halves (32 bytes per row, two 16-byte chunks); B stage: 16
    // k-rows x 8 halves (one chunk each). 32 lanes, one chunk of each per lane per stage
    // (lanes 16..31 copy the second A chunk of their row).
    __shared__ __align__(16) __half As[kStages][16 * 16];
    __shared__ __align__(16) __half Bs[kStages][16 * 8];
    const int lane = threadIdx.x;
    const int tiles = K / 16;
    auto load = [&](int stage, int tile) {
        const bool ok = tile < tiles;
        const int k0 = ok ? tile * 16 : 0;
        const int row = lane % 16, half = lane / 16;
        cp_async<16>(&As[stage][row * 16 + half * 8], A + row * K + k0 + half * 8, ok);
        if (lane < 16) cp_async<16>(&Bs[stage][lane * 8], B + (k0 + lane) * 8, ok);
    };
    for (int s = 0; s < kStages - 1; ++s) {
        load(s, s);
        cp_async_commit();
    }
    float acc[4] = {0.f, 0.f, 0.f, 0.f};
    for (int tile = 0; tile < tiles; ++tile) {
        cp_async_wait<kStages - 2>();
        __syncthreads();
        // Refill the stage consumed two iterations ago (everyone is past it: barrier above).
        load((tile + kStages - 1) % kStages, tile + kStages - 1);
        cp_async_commit();
        const int s = tile % kStages;
        unsigned a[4], b[2];
        ldmatrix<4>(a, &As[s][(lane % 16) * 16 + (lane / 16) * 8]);
        // B is k-major (k rows of 8 n): the transposed load gives the col fragment;
        // lanes 0..15 address k rows 0..15 (matrix 0: k 0..7, matrix 1: k 8..15).
        ldmatrix_trans<2>(b, &Bs[s][(lane % 16) * 8]);
        mma_m16n8k16<__half>(acc, a, b, acc);
    }
    const int g = lane >> 2, t = lane & 3;
    C[g * 8 + 2 * t] = acc[0];
    C[g * 8 + 2 * t + 1] = acc[1];
    C[(g + 8) * 8 + 2 * t] = acc[2];
    C[(g + 8) * 8 + 2 * t + 1] = acc[3];
}

extern "C" __global__ void mma_regs_f64(const double* a, const double* b, const double* c,
                                        double* d) {
    const int lane = threadIdx.x % 32;
    double rc[2] = {c[lane * 2], c[lane * 2 + 1]}, rd[2];
    mma_m8n8k4_f64(rd, a[lane], b[lane], rc);
    for (int j = 0; j < 2; ++j) d[lane * 2 + j] = rd[j];
}

extern "C" __global__ void mma_gemm_f64(const double* A, const double* B, double* C, int M,
                                        int N, int K) {
    const int lane = threadIdx.x % 32;
    const int tiles_n = (N + 7) / 8;
    const int tile = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32;
    // Warp-uniform exit: mma.sync needs the whole warp.
    if (tile >= ((M + 7) / 8) * tiles_n) return;
    const int m0 = (tile / tiles_n) * 8, n0 = (tile % tiles_n) * 8;
    const int g = lane >> 2, t = lane & 3;
    double acc[2] = {0.0, 0.0};
    for (int k0 = 0; k0 < K; k0 += 4) {
        const int k = k0 + t;  // this lane's column of A and row of B
        const double a = m0 + g < M && k < K ? A[(size_t)(m0 + g) * K + k] : 0.0;
        const double b = k < K && n0 + g < N ? B[(size_t)k * N + n0 + g] : 0.0;
        mma_m8n8k4_f64(acc, a, b, acc);
    }
    for (int i = 0; i < 2; ++i) {
        const int row = m0 + g, col = n0 + 2 * t + i;
        if (row < M && col < N) C[(size_t)row * N + col] = acc[i];
    }
}
