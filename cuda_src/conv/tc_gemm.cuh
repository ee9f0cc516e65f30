// tc_gemm.cuh — the multistage tensor-core GEMM main loop every tensor-core convolution
// (and later attention and RNN projections) builds on. A consumer brings a Loader (which
// global elements go into each shared-memory tile, as cp.async copies) and an epilogue;
// the main loop, the shared-memory layout and the fragment loads are here, once.
//
// Shape: the block computes a BM x BN tile of C = A * B (A: M x Kred, B: Kred x N),
// BK of the reduction per stage, STAGES stages of cp.async in flight; warps tile the
// block in WM x WN warp tiles of m16n8k16 MMAs (fp32 accumulators in registers).
//
// Shared-memory tiles hold 16-bit elements (or fp32 for TF32 math: m16n8k8, operands
// rounded by cl::mma::to_tf32 after ldmatrix) in rows of 16-byte chunks, XOR-swizzled so
// that the 8 row addresses of every ldmatrix phase fall in 8 different bank groups:
//   A_ROWS_K = false: A tile [BM][BK] (reduction contiguous) -> ldmatrix
//   A_ROWS_K = true:  A tile [BK][BM] (m contiguous)         -> ldmatrix.trans
//   B_ROWS_K = false: B tile [BN][BK] (reduction contiguous) -> ldmatrix
//   B_ROWS_K = true:  B tile [BK][BN] (n contiguous)         -> ldmatrix.trans
// (fragment layouts and lane addressing: common/mma.cuh). fp32 tiles with reduction rows
// (TF32 backward kernels) have no ldmatrix.trans (it moves 16-bit halves): each lane reads
// its fragment elements with 32-bit shared loads from rows padded by 8 floats, unswizzled.
// The row pitch is then 8 words mod 32, so the 32 lanes' (t, g) = (row, column) pairs of
// one fragment load fall in 32 distinct banks, and every fragment address is the lane's
// offset plus a constant. Loaders place their copies with a_index / b_index.
//
// Loader contract: `load(As, Bs)` issues the cp.async copies of the next reduction tile
// into one stage (zero-fill out of range), then advances to the following tile. The main
// loop commits one group per stage (empty past the end) and waits with STAGES - 2 groups
// in flight, so one barrier per tile both publishes the landed stage and frees the stage
// it refills next.
#pragma once

#include "common/mma.cuh"

namespace tc {

// The chunk index (16 bytes) of (row, chunk) in a swizzled tile with CHUNKS 16-byte
// chunks per row: 8 consecutive rows' chunks land in 8 distinct bank groups.
template <int CHUNKS>
__device__ __forceinline__ int swizzle(int row, int chunk) {
    constexpr int kDiv = CHUNKS >= 8 ? 1 : 8 / CHUNKS;
    constexpr int kMod = CHUNKS >= 8 ? 8 : CHUNKS;
    return chunk ^ ((row / kDiv) % kMod);
}

// Element offset of (row, col) in a swizzled [rows][COLS] tile of EPC elements per
// 16-byte chunk (8: 16-bit types, 4: fp32 for TF32).
template <int COLS, int EPC = 8>
__device__ __forceinline__ int tile_offset(int row, int col) {
    return row * COLS + swizzle<COLS / EPC>(row, col / EPC) * EPC + col % EPC;
}

// One k-step of MMAs on a fragment pair: m16n8k16 for 16-bit inputs; for fp32 storage
// (TF32 math) m16n8k8 on operands rounded to TF32 (to_tf32) once per fragment load.
template <typename T> struct MmaStep {
    enum { K = 16 };
    __device__ static void round(unsigned&) {}
    __device__ static void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
        cl::mma::mma_m16n8k16<T>(d, a, b, d);
    }
};
template <> struct MmaStep<float> {
    enum { K = 8 };
    __device__ static void round(unsigned& r) { r = cl::mma::to_tf32(__uint_as_float(r)); }
    __device__ static void run(float (&d)[4], const unsigned (&a)[4], const unsigned (&b)[2]) {
        cl::mma::mma_m16n8k8_tf32(d, a, b, d);
    }
};

template <typename T_, int BM_, int BN_, int BK_, int WM_, int WN_, int STAGES_, bool A_ROWS_K_,
          bool B_ROWS_K_>
struct Gemm {
    typedef T_ T;
    static const bool A_ROWS_K = A_ROWS_K_, B_ROWS_K = B_ROWS_K_;
    // fp32 tiles of reduction rows: scalar fragment loads from padded rows (header)
    static const bool A_SCALAR = sizeof(T_) == 4 && A_ROWS_K_,
                      B_SCALAR = sizeof(T_) == 4 && B_ROWS_K_;
    enum {
        BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_, STAGES = STAGES_,
        WARPS_M = BM / WM, WARPS_N = BN / WN, THREADS = WARPS_M * WARPS_N * 32,
        MF = WM / 16, NF = WN / 8,  // m16 and n8 fragments per warp
        PAD = 8,                    // floats after each row of a scalar-load tile
        // elements per tile row, and per tile
        A_LD = A_ROWS_K ? BM + (A_SCALAR ? PAD : 0) : BK,
        B_LD = B_ROWS_K ? BN + (B_SCALAR ? PAD : 0) : BK,
        A_TILE = (A_ROWS_K ? BK : BM) * A_LD, B_TILE = (B_ROWS_K ? BK : BN) * B_LD,
        PIPE_BYTES = STAGES * (A_TILE + B_TILE) * (int)sizeof(T),
        EPC = 16 / (int)sizeof(T),   // elements per 16-byte chunk
        KSTEP = MmaStep<T>::K,       // reduction depth of one MMA: always two chunks
    };
    static_assert(BM % WM == 0 && BN % WN == 0, "warp tiles must tile the block");
    static_assert(WM % 16 == 0 && WN % 16 == 0 && BK % KSTEP == 0, "MMA granularity");
    static_assert(STAGES >= 2, "at least double buffering");
    static_assert(sizeof(T) == 2 || sizeof(T) == 4, "16-bit inputs, or fp32 for TF32");
    static_assert((!A_SCALAR || BM % 32 == 0) && (!B_SCALAR || BN % 32 == 0),
                  "scalar-load tiles: rows of a multiple of 32 floats (the pad sets the banks)");

    // Element offset of (row, col) in a stage's A (B) tile: the swizzled layout of the
    // ldmatrix tiles, or the padded rows of the scalar-load ones. Loaders place copies here.
    __device__ static int a_index(int row, int col) {
        return A_SCALAR ? row * A_LD + col : tile_offset<A_LD, EPC>(row, col);
    }
    __device__ static int b_index(int row, int col) {
        return B_SCALAR ? row * B_LD + col : tile_offset<B_LD, EPC>(row, col);
    }

    typedef float Acc[MF][NF][4];

    // The block's dynamic shared memory (the stages, then the epilogue's tile).
    __device__ static T* shared() {
        DYNAMIC_SHARED(T, smem);
        return smem;
    }

    // This lane's ldmatrix addresses, in bytes from a stage's tile: one per-lane offset per
    // operand, computed once; the unrolled k-steps and fragments add compile-time parts:
    //   reduction-contiguous tile ([rows][BK]): fragment i is 16 rows further (+ constant:
    //     the swizzle repeats every 8 rows); k-step s is 2 chunks further along the row,
    //     chunk (2s + h) ^ x = (h ^ x) ^ 2s, i.e. the offset XOR 32 * s;
    //   m- (n-) contiguous tile ([BK][cols]): k-step s is KSTEP rows further (+ constant);
    //     fragment i is 2 chunks further, chunk (c + h + 2i) ^ x with c a multiple of the
    //     warp's chunk count (a power of two above 2i): the offset XOR 32 * i.
    // The XORs touch the chunk bits of a row only (rows are 16 * CHUNKS bytes), so they
    // stay loop-invariant and ldmatrix addresses are [lane offset + stage base + constant].
    // Scalar-load tiles: the lane's offset is that of (row t, column g) of its warp's first
    // fragment; fragment i (j) is 16 (8) columns on, k-step s KSTEP rows down, and the
    // fragment's other registers 8 columns and / or 4 rows on: constants all.
    enum {
        A_ROW_BYTES = A_LD * (int)sizeof(T),  // one tile row
        B_ROW_BYTES = B_LD * (int)sizeof(T),
    };
    static_assert(A_SCALAR || !A_ROWS_K || (MF & (MF - 1)) == 0,
                  "A fragments by XOR: MF a power of two");
    static_assert(B_SCALAR || !B_ROWS_K || ((NF / 2) & (NF / 2 - 1)) == 0,
                  "B fragment pairs by XOR: NF / 2 a power of two");
    static_assert((A_ROWS_K && B_ROWS_K) || (BK & (BK - 1)) == 0,
                  "k-steps by XOR: BK a power of two");
    struct FragOffsets {
        int a, b;
    };

    __device__ static FragOffsets frag_offsets(int wm0, int wn0) {
        const int lane = threadIdx.x & 31, mat = lane >> 3, g = lane >> 2, t = lane & 3;
        FragOffsets o;
        const int a = A_SCALAR   ? t * A_LD + wm0 + g
                      : A_ROWS_K ? tile_offset<BM>((lane & 7) + (mat >> 1) * 8, wm0 + (mat & 1) * 8)
                                 : tile_offset<BK, EPC>(wm0 + (lane & 15), (lane >> 4) * EPC);
        const int b = B_SCALAR   ? t * B_LD + wn0 + g
                      : B_ROWS_K ? tile_offset<BN>((lane & 7) + (mat & 1) * 8, wn0 + (mat >> 1) * 8)
                                 : tile_offset<BK, EPC>(wn0 + (lane & 7) + (lane >> 4) * 8,
                                                        ((lane >> 3) & 1) * EPC);
        o.a = a * (int)sizeof(T);
        o.b = b * (int)sizeof(T);
        return o;
    }

    // Fragments of k-step s from a stage's A (B) tile at byte address `tile`.
    __device__ static void load_a(const char* tile, const FragOffsets& o, int s,
                                  unsigned (&a)[MF][4]) {
#pragma unroll
        for (int i = 0; i < MF; ++i) {
            if (A_SCALAR) {
                const unsigned* e = reinterpret_cast<const unsigned*>(tile + o.a) +
                                    KSTEP * s * A_LD + 16 * i;
                a[i][0] = e[0];                 // A[g][t]
                a[i][1] = e[8];                 // A[g + 8][t]
                a[i][2] = e[4 * A_LD];          // A[g][t + 4]
                a[i][3] = e[4 * A_LD + 8];      // A[g + 8][t + 4]
            } else if (!A_ROWS_K)
                cl::mma::ldmatrix<4>(a[i], tile + (o.a ^ (32 * s)) + A_ROW_BYTES * 16 * i);
            else
                cl::mma::ldmatrix_trans<4>(a[i], tile + (o.a ^ (32 * i)) + A_ROW_BYTES * KSTEP * s);
#pragma unroll
            for (int v = 0; v < 4; ++v) MmaStep<T>::round(a[i][v]);
        }
    }

    __device__ static void load_b(const char* tile, const FragOffsets& o, int s,
                                  unsigned (&b)[NF][2]) {
        if (B_SCALAR) {
#pragma unroll
            for (int j = 0; j < NF; ++j) {
                const unsigned* e = reinterpret_cast<const unsigned*>(tile + o.b) +
                                    KSTEP * s * B_LD + 8 * j;
                b[j][0] = e[0];                 // B[t][g]
                b[j][1] = e[4 * B_LD];          // B[t + 4][g]
                MmaStep<T>::round(b[j][0]);
                MmaStep<T>::round(b[j][1]);
            }
            return;
        }
#pragma unroll
        for (int j = 0; j < NF / 2; ++j) {
            unsigned r[4];
            if (!B_ROWS_K)
                cl::mma::ldmatrix<4>(r, tile + (o.b ^ (32 * s)) + B_ROW_BYTES * 16 * j);
            else
                cl::mma::ldmatrix_trans<4>(r, tile + (o.b ^ (32 * j)) + B_ROW_BYTES * KSTEP * s);
#pragma unroll
            for (int v = 0; v < 4; ++v) MmaStep<T>::round(r[v]);
            b[2 * j][0] = r[0];
            b[2 * j][1] = r[1];
            b[2 * j + 1][0] = r[2];
            b[2 * j + 1][1] = r[3];
        }
    }

    // Runs `iters` reduction tiles through the pipeline into acc (zeroed here). Ends with
    // every copy landed and a barrier: shared memory is free for the epilogue.
    // Stages are interleaved ([STAGES][A_TILE + B_TILE]) so one rotating pointer names both
    // tiles of a stage; the stage a tile refills is the one the previous tile read, and the
    // rotation is an add and a compare-select (no multiply by the stage index).
    template <class Loader>
    __device__ static void mainloop(Loader& ld, int iters, T* smem, Acc& acc) {
        enum { STAGE = A_TILE + B_TILE };
        const int warp = threadIdx.x >> 5;
        const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
        const FragOffsets fo = frag_offsets(wm0, wn0);
#pragma unroll
        for (int i = 0; i < MF; ++i)
#pragma unroll
            for (int j = 0; j < NF; ++j)
#pragma unroll
                for (int v = 0; v < 4; ++v) acc[i][j][v] = 0.f;

#pragma unroll
        for (int s = 0; s < STAGES - 1; ++s) {
            if (s < iters) ld.load(smem + s * STAGE, smem + s * STAGE + A_TILE);
            cl::mma::cp_async_commit();
        }
        T* const last = smem + (STAGES - 1) * STAGE;
        T* read = smem;
        T* write = last;
        for (int left = iters; left > 0; --left) {  // tiles left, this one included
            cl::mma::cp_async_wait<STAGES - 2>();
            __syncthreads();
            if (left > STAGES - 1) ld.load(write, write + A_TILE);
            cl::mma::cp_async_commit();
#pragma unroll
            for (int s = 0; s < BK / KSTEP; ++s) {
                unsigned a[MF][4], b[NF][2];
                load_a(reinterpret_cast<const char*>(read), fo, s, a);
                load_b(reinterpret_cast<const char*>(read + A_TILE), fo, s, b);
#pragma unroll
                for (int i = 0; i < MF; ++i)
#pragma unroll
                    for (int j = 0; j < NF; ++j) MmaStep<T>::run(acc[i][j], a[i], b[j]);
            }
            write = read;
            read = read == last ? smem : read + STAGE;
        }
        cl::mma::cp_async_wait<0>();
        __syncthreads();
    }

    // Writes the accumulators to a [BM][BN + 4] fp32 tile in shared memory (the padding
    // staggers rows across banks) for a coalesced epilogue.
    enum { C_LD = BN + 4, C_BYTES = BM * C_LD * 4 };
    __device__ static void stage_acc(const Acc& acc, float* Cs) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        const int wm0 = (warp / WARPS_N) * WM, wn0 = (warp % WARPS_N) * WN;
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int i = 0; i < MF; ++i)
#pragma unroll
            for (int j = 0; j < NF; ++j) {
                const int row = wm0 + 16 * i + g, col = wn0 + 8 * j + 2 * t;
                Cs[row * C_LD + col] = acc[i][j][0];
                Cs[row * C_LD + col + 1] = acc[i][j][1];
                Cs[(row + 8) * C_LD + col] = acc[i][j][2];
                Cs[(row + 8) * C_LD + col + 1] = acc[i][j][3];
            }
    }

    static constexpr int SMEM_BYTES =
        (int)PIPE_BYTES > (int)C_BYTES ? (int)PIPE_BYTES : (int)C_BYTES;
};

}  // namespace tc
