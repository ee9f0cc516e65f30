// Self-test of Hopper's warpgroup MMA layer (common/mma.cuh: wgmma, its descriptors and
// its fence / commit / wait protocol): the emulator's model (emu_mma.h) and an sm_90 GPU
// run the same code, and tests/emulator/test_emu_wgmma.py pins the D fragment layout
// lane by lane and both shared-memory layouts element by element.
//
// Kernel wgmma_tile<T, N, SW> (N = 64, 128, 256): one block of 128 * W threads (W
// warpgroups), warpgroup w computing rows 64 w .. 64 w + 63 of D = A * B^T [+ C] with one
// m64nNk16:
//   a     (64 W) x 16 16-bit values, row-major (row m holds A[m][0..15])
//   b     N x 16, row-major (row n holds B[0..15][n]: the K-major operand)
//   c, d  thread i's N / 2 accumulators at [i * N / 2 ..] (its fragment, unconverted)
//   kstep SW = 1 only: the k16 slice is columns 16 kstep.. of 64-wide swizzled rows and
//         the descriptors start 32 kstep bytes into the row (the main loops' k-steps)
//   accumulate  scale-d (0: d = A * B^T)
//   plant 0: correct; 1: the accumulators read before the wait; 2: no wgmma.fence;
//         3: A's tile overwritten before the wait; 4: lane 5 of each warp gives another
//         A descriptor; 5: thread 0 rewrites A's first values by cp.async and no
//         fence.proxy.async follows (the emulator must report 1 as NaN and 2-5 as errors)
// SW: 0 the no-swizzle layout (core matrices of 8 x 16 bytes, LBO 128, SBO 256: the two
// core matrices of a k16 slice side by side), 1 the 128-byte swizzle (rows of 64 values,
// SBO 1024), both as common/mma.cuh describes them. Dynamic shared memory:
// (64 W + N) * 16 * 2 bytes (SW 0) or (64 W + N) * 64 * 2 (SW 1).
#include "common/cudnnlite.cuh"
#include "common/mma.cuh"

using namespace cl::mma;

template <int SW>
__device__ int tile_offset(int row, int k) {
    if (SW == 0) return (row / 8) * 128 + (k / 8) * 64 + (row % 8) * 8 + k % 8;
    return row * 64 + ((k / 8) ^ (row % 8)) * 8 + k % 8;
}

template <typename T, int N, int SW>
__global__ void wgmma_tile(const unsigned short* a, const unsigned short* b, const float* c,
                           float* d, int kstep, int accumulate, int plant) {
    DYNAMIC_SHARED_1024(unsigned short, smem);
    enum { LD = SW ? 64 : 16, C = N / 2 };
    const int rows = blockDim.x / 2;  // 64 per warpgroup
    unsigned short* As = smem;
    unsigned short* Bs = smem + rows * LD;
    const int k0 = SW ? 16 * kstep : 0;
    for (int i = threadIdx.x; i < rows * 16; i += blockDim.x)
        As[tile_offset<SW>(i / 16, k0 + i % 16)] = a[i];
    for (int i = threadIdx.x; i < N * 16; i += blockDim.x)
        Bs[tile_offset<SW>(i / 16, k0 + i % 16)] = b[i];
    if (plant == 5 && threadIdx.x == 0) {  // A's first 8 values again, by cp.async
        cp_async<16>(As + tile_offset<SW>(0, k0), a, true);
        cp_async_commit();
        cp_async_wait<0>();
    }
    if (plant != 5) fence_proxy_async();  // (the stores, to wgmma's async proxy)
    __syncthreads();
    const int wg = threadIdx.x / 128;
    const WgSwizzle sw = SW ? kSwizzle128 : kSwizzleNone;
    const int sbo = SW ? 1024 : 256, into_row = SW ? (32 * kstep) >> 4 : 0;
    unsigned long long da = wgmma_desc(As + wg * 64 * LD, 128, sbo, sw) + into_row;
    const unsigned long long db = wgmma_desc(Bs, 128, sbo, sw) + into_row;
    if (plant == 4 && threadIdx.x % 32 == 5) da += 8;
    float acc[C];
#pragma unroll
    for (int i = 0; i < C; ++i) acc[i] = c[threadIdx.x * C + i];
    if (plant != 2) wgmma_fence();
    wgmma<T, N>(acc, da, db, accumulate != 0);
    wgmma_commit();
    if (plant == 3) {
        __syncthreads();
        if (threadIdx.x == 0) As[tile_offset<SW>(0, k0)] ^= 0x4000;
        __syncthreads();
    }
    if (plant != 1) wgmma_wait<0>();
    wgmma_fence_acc(acc);
#pragma unroll
    for (int i = 0; i < C; ++i) d[threadIdx.x * C + i] = acc[i];
    if (plant == 1) wgmma_wait<0>();
}
