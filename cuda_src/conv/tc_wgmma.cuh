// tc_wgmma.cuh — the multistage GEMM main loop of tc_gemm.cuh on Hopper's warpgroup MMA
// (common/mma.cuh's wgmma, sm_90a): the same Loader contract, stage layout and epilogue
// staging, so a convolution's loader and epilogue run on either main loop unchanged.
//
// Shape: BM x BN block tile, BK = 64 16-bit values of the reduction per stage, STAGES
// cp.async stages. BM / 64 warpgroups (4 warps each), warpgroup w computing rows 64 w ..
// 64 w + 63 against all BN columns: per stage, BK / 16 = 4 wgmma.m64nBNk16, each reading
// its A rows and the whole B tile straight from shared memory (no ldmatrix, no fragment
// registers: each thread holds only its BN / 2 accumulators).
//
// Shared layout: both tiles reduction-contiguous ([rows][64], rows of 128 bytes) with the
// 16-byte chunks XOR-swizzled by the row (chunk c of row r at c ^ (r % 8)): tc_gemm.cuh's
// layout of a 64-deep tile, which is wgmma's 128-byte swizzle on a 1024-byte-aligned stage
// (its descriptor: 8-row groups 1024 bytes apart, each k16 step 32 bytes further along
// the row). The loaders' 16-byte copies along a row go to 8 distinct bank groups.
//
// Pipeline: one barrier per tile publishes the landed stage and frees the one refilled
// next; each tile's MMAs are one wgmma group. Two schedules, by STAGES:
//   3 stages (two 128 x 128 blocks per SM): loads run 2 tiles ahead (tc_gemm.cuh's), and
//     each tile's MMAs are waited for before the next barrier (the refill overwrites the
//     stage just read); the other block on the SM fills the tensor cores meanwhile.
//   4+ stages (OVERLAP): loads run STAGES - 2 tiles ahead and a tile's MMAs stay in flight
//     while the next tile's are issued (wait_group 1): the refill at tile i overwrites
//     the stage tile i - 2 read, whose MMAs the wait at tile i - 1 finished before the
//     barrier, so the tensor cores never drain between tiles.
#pragma once

#include "conv/tc_gemm.cuh"

namespace tc {

template <typename T_, int BM_, int BN_, int STAGES_>
struct WgGemm {
    typedef T_ T;
    static const bool A_ROWS_K = false, B_ROWS_K = false;
    enum {
        BM = BM_, BN = BN_, BK = 64, STAGES = STAGES_,
        THREADS = BM / 64 * 128,
        A_TILE = BM * BK, B_TILE = BN * BK, STAGE = A_TILE + B_TILE,
        PIPE_BYTES = STAGES * STAGE * (int)sizeof(T),
        ACC = BN / 2,                   // accumulators per thread
        SBO = 8 * BK * (int)sizeof(T),  // bytes between 8-row groups (1024)
        STAGE_DESC = STAGE * (int)sizeof(T) / 16,  // a stage, in descriptor units
    };
    static_assert(sizeof(T) == 2, "wgmma main loop: 16-bit inputs");
    static_assert(BM % 64 == 0 && (BN == 64 || BN == 128 || BN == 256),
                  "m64 warpgroups, n64, n128 or n256");
    static_assert(STAGES >= 2, "at least double buffering");
    static_assert(STAGE * (int)sizeof(T) % 1024 == 0, "stages keep the 1024-byte alignment");

    // Element offset of (row, col) in a stage's A (B) tile: the swizzled 64-deep layout.
    __device__ static int a_index(int row, int col) { return tile_offset<BK, 8>(row, col); }
    __device__ static int b_index(int row, int col) { return tile_offset<BK, 8>(row, col); }

    // The block's dynamic shared memory, aligned for the 128-byte swizzle's address bits.
    __device__ static T* shared() {
        DYNAMIC_SHARED_1024(T, smem);
        return smem;
    }

    typedef float Acc[ACC];

    // Runs `iters` reduction tiles through the pipeline into acc (zeroed here). Ends with
    // every copy landed and a barrier: shared memory is free for the epilogue.
    template <class Loader>
    __device__ static void mainloop(Loader& ld, int iters, T* smem, Acc& acc) {
        enum { OVERLAP = STAGES >= 4, AHEAD = OVERLAP ? STAGES - 2 : STAGES - 1 };
#ifndef CUDNNLITE_EMULATOR
        if (cl::mma::smem_addr(smem) & 1023u) __trap();  // (the swizzle reads address bits)
#endif
#pragma unroll
        for (int i = 0; i < ACC; ++i) acc[i] = 0.f;
#pragma unroll
        for (int s = 0; s < AHEAD; ++s) {
            if (s < iters) ld.load(smem + s * STAGE, smem + s * STAGE + A_TILE);
            cl::mma::cp_async_commit();
        }
        // Stage 0's descriptors: this warpgroup's 64 rows of A, and B (the leading byte
        // offset is unused by a 64-deep swizzled tile: 16, the usual placeholder).
        const int wg = threadIdx.x >> 7;
        const unsigned long long a0 =
            cl::mma::wgmma_desc(smem + wg * 64 * BK, 16, SBO, cl::mma::kSwizzle128);
        const unsigned long long b0 =
            cl::mma::wgmma_desc(smem + A_TILE, 16, SBO, cl::mma::kSwizzle128);
        int read = 0, write = AHEAD;  // stage indices
        for (int left = iters; left > 0; --left) {  // tiles left, this one included
            cl::mma::cp_async_wait<AHEAD - 1>();
            cl::mma::fence_proxy_async();  // (the landed copies, to wgmma's async proxy)
            __syncthreads();
            if (left > AHEAD) ld.load(smem + write * STAGE, smem + write * STAGE + A_TILE);
            cl::mma::cp_async_commit();
            const unsigned long long at = (unsigned long long)(read * STAGE_DESC);
            cl::mma::wgmma_fence();
#pragma unroll
            for (int s = 0; s < BK / 16; ++s)  // k16 step s: 32 bytes along the rows
                cl::mma::wgmma<T, BN>(acc, a0 + at + 2 * s, b0 + at + 2 * s, true);
            cl::mma::wgmma_commit();
            cl::mma::wgmma_wait<OVERLAP ? 1 : 0>();
            write = write == STAGES - 1 ? 0 : write + 1;
            read = read == STAGES - 1 ? 0 : read + 1;
        }
        cl::mma::wgmma_wait<0>();
        cl::mma::wgmma_fence_acc(acc);
        cl::mma::cp_async_wait<0>();
        __syncthreads();
    }

    // Writes the accumulators to a [BM][BN + 4] fp32 tile in shared memory, as Gemm's.
    enum { C_LD = BN + 4, C_BYTES = BM * C_LD * 4 };
    __device__ static void stage_acc(const Acc& acc, float* Cs) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        const int row = (warp >> 2) * 64 + (warp & 3) * 16 + (lane >> 2), t = lane & 3;
#pragma unroll
        for (int j = 0; j < BN / 8; ++j) {
            const int col = 8 * j + 2 * t;
            Cs[row * C_LD + col] = acc[4 * j];
            Cs[row * C_LD + col + 1] = acc[4 * j + 1];
            Cs[(row + 8) * C_LD + col] = acc[4 * j + 2];
            Cs[(row + 8) * C_LD + col + 1] = acc[4 * j + 3];
        }
    }

    static constexpr int SMEM_BYTES =
        (int)PIPE_BYTES > (int)C_BYTES ? (int)PIPE_BYTES : (int)C_BYTES;
};

}  // namespace tc
