// flash_fwd.cu — FlashAttention-2 forward on tensor cores (mma.sync m16n8k16 through
// common/mma.cuh), fp16 (sm_75+) or bf16 (sm_80+) operands, fp32 accumulation and softmax.
//
// Kernel: sdpa_flash_fwd_tc<T, HEAD_DIM, BM, BN, WARPS, STAGES, MASK, DROPOUT>
//   T         __half or __nv_bfloat16
//   HEAD_DIM  padded head size (32, 64, 128, 256) >= max(d, dv); the columns past d (q, k)
//             and dv (v) are zero-filled by cp.async and never stored
//   BM        query rows per block; each of the WARPS warps owns BM / WARPS rows (16 or 32:
//             one or two m16 tiles; two share every K / V fragment load)
//   BN        keys per K / V tile
//   STAGES    K / V tiles in flight (cp.async; 2 = double buffering)
//   MASK      sdpa::kMaskNone / kMaskBool / kMaskAdditive: the explicit mask's kind
//   DROPOUT   dropout on the probabilities (sdpa::dropout_factor)
// Readable name (solver): sdpa_flash_fwd_tc_<BM>x<BN>_d<HEAD_DIM>_w<WARPS>_s<STAGES>
//   [_mask_bool|_mask_add][_drop]_<dtype>
//
// One block: BM query rows of one (batch, q head); grid (ceil(sq / BM), hq, b), the
// m-blocks in reverse order so the longest causal blocks start first. The Q tile is
// loaded once; HEAD_DIM <= 128 keeps it as A fragments in registers, 256 re-reads it from
// shared memory by ldmatrix each tile (its fragments plus the 256-wide O accumulators
// would not fit in 255 registers). Per K / V tile (FlashAttention-2):
//   S = Q K^T    (K tile [BN][HEAD_DIM], head dim contiguous: ldmatrix gives B fragments)
//   masking      only on tiles that the warp's rows do not keep whole (causal diagonal,
//                window edges, lengths, an explicit mask); tiles outside every row's key
//                range are skipped by the block's loop bounds, per warp by a branch
//   softmax      online, log2 domain: row max of the raw scores across the quad's 4 lanes
//                (__shfl_xor_sync), then exp2(s * c - m) with one FFMA and one MUFU per
//                element (cl::math::exp2_ftz: results below 2^-126 flush to 0) (c =
//                |scale_log2|; a negative scale flips Q's signs once per block so the max
//                stays a max), O rescaled in registers only when some row's max moved; the
//                row sum stays per lane until the end (alpha is uniform across the quad).
//                Tiles with an explicit mask are scaled (+ mask * log2 e) in mask_tile;
//                a mask with key stride 1 (the usual) is read at immediate offsets from
//                two row pointers, another in a second copy of the tile loop
//   dropout      P *= keep factor after the row sum: the denominator is undropped; keep
//                bits from one Philox draw per 4 keys, lanes t / t ^ 1 sharing it, when
//                skv % 4 == 0 (sdpa::drop_bits_keys_in_cols), else one per pair of keys
//   O += P V     P packed from the S accumulators straight into A fragments (the C layout
//                of m16n8 is the A layout of m16k16 after packing pairs); V tile
//                [BN][HEAD_DIM] read by ldmatrix.trans
// cp.async groups, in commit order: Q, K0, V0, K1, V1, ...; tile n waits for K_n, then
// refills the K stage freed by tile n - 1 while computing S, and the same for V: one
// barrier per operand per tile both publishes the landed stage and frees the old one.
// End: O / l (0 where l = 0: fully masked rows and rows past lengths_q), lse = (m + log2 l)
// * ln 2 (-inf where l = 0), O staged through each warp's own rows of the Q tile for
// coalesced 16-byte stores.
//
// Dynamic shared memory: (BM + 2 * STAGES * BN) * HEAD_DIM * sizeof(T) bytes, tiles in rows
// of 16-byte chunks swizzled by conv/tc_gemm.cuh's tile_offset.
// Needs: d, dv multiples of 8 and 16-byte aligned rows (the solver checks), hq and b within
// the grid's y / z limits.
#include "attention/attention_common.cuh"
#include "common/cudnnlite.cuh"
#include "common/mma.cuh"
#include "conv/tc_gemm.cuh"

namespace flash {

constexpr float kLn2 = 0.6931471805599453f;

// Two floats rounded to one packed pair of T (the low half first: PTX fragment order).
template <typename T>
__device__ __forceinline__ unsigned pack_pair(float lo, float hi) {
    return cl::mma::pack2(cl::from_float<T>(lo), cl::from_float<T>(hi));
}

// Element offsets of (row, col + 16 s) in a swizzled [rows][HD] tile, for this lane's
// (row, col) with col a multiple of 8 below 16: tile_offset's XOR touches the low three
// bits of the chunk index only (two for HD 32), so four per-lane values and a constant
// 64 * (s / 4) give every step; rows may add multiples of 16 (the swizzle's period
// divides 16) as constants. Keeps the ldmatrix addresses to four registers per operand
// instead of one per (step, fragment).
template <int HD>
struct LaneCols {
    int off[4];
    __device__ __forceinline__ LaneCols(int row, int col) {
#pragma unroll
        for (int m = 0; m < 4; ++m) off[m] = tc::tile_offset<HD>(row, col + 16 * (m % (HD / 16)));
    }
    __device__ __forceinline__ int at(int s) const { return off[s & 3] + 64 * (s >> 2); }
};

// cp.async of a [ROWS][HD] tile (16-byte chunks, swizzled) from rows `ss` elements apart;
// rows at or past `rows_valid` and columns at or past `cols_valid` are zero-filled.
template <int ROWS, int HD, int THREADS, typename T>
__device__ __forceinline__ void load_tile(T* dst, const T* src, long long ss, int rows_valid,
                                          int cols_valid) {
    constexpr int CPR = HD / 8, RPP = THREADS / CPR;  // chunks per row, rows per pass
    static_assert(THREADS % CPR == 0 && ROWS % RPP == 0, "whole passes over the tile");
    const int c = threadIdx.x % CPR, r0 = threadIdx.x / CPR;
    const bool col_ok = c * 8 < cols_valid;
    const T* s = src + r0 * ss + c * 8;
    const long long step = RPP * ss;
    const int d0 = tc::tile_offset<HD>(r0, c * 8);
#pragma unroll
    for (int pass = 0; pass < ROWS / RPP; ++pass) {
        const int r = r0 + pass * RPP;
        const bool ok = col_ok && r < rows_valid;
        // The swizzle repeats every 8 rows: passes of 8k rows move by whole rows.
        const int d = RPP % 8 == 0 ? d0 + pass * RPP * HD : tc::tile_offset<HD>(r, c * 8);
        cl::mma::cp_async<16>(dst + d, s, ok);  // nothing is read when !ok
        s += step;
    }
}

// One block's state and its steps (a struct so the masked and unmasked tile steps share
// the registers: every member array is indexed at compile time and stays in registers).
template <typename T, int HD, int BM, int BN, int WARPS, int STAGES, int MASK, bool DROPOUT>
struct Fwd {
    enum {
        THREADS = WARPS * 32,
        WM = BM / WARPS, MT = WM / 16,  // rows and m16 tiles per warp
        KS = HD / 16,                   // k16 steps of S = Q K^T
        NS = BN / 8,                    // n8 tiles of S
        PS = BN / 16,                   // k16 steps of O = P V
        NO = HD / 8,                    // n8 tiles of O
        KV_TILE = BN * HD,
    };
    static const bool Q_IN_REGS = HD * MT <= 128;
    static_assert(WM % 16 == 0 && MT <= 2, "16 or 32 query rows per warp");
    static_assert(BN % 16 == 0 && HD % 32 == 0, "MMA granularity (x4 ldmatrix pairs)");
    static_assert(STAGES >= 2, "at least double buffering");

    const SdpaParams& p;
    const void* mask;
    T *Qs, *Ks, *Vs;
    int bi, h, lane, t;
    int w_first;                 // the warp's first query row
    int key_begin;               // the first key of tile 0
    int w_lo, w_hi;              // the warp's rows' keys: union [w_lo, w_hi) ...
    int w_full_lo, w_full_hi;    // ... and what every row keeps
    sdpa::Lengths len;
    unsigned long long drop_row;  // the dropout element number of (lane's first row, key 0)
    LaneCols<HD> q_cols, k_cols, v_cols;
    unsigned qf[Q_IN_REGS ? MT : 1][Q_IN_REGS ? KS : 1][4];
    float acc_o[MT][NO][4];
    float m_run[MT][2], l_run[MT][2];  // row max (log2 domain, scaled), per-lane row sum
    // pipeline: stage read this tile, stage refilled, next tiles' sources and valid rows
    int stage, refill, kv_rows, n_tiles;
    const T *k_next, *v_next;
    long long k_step, v_step;

    __device__ __forceinline__ Fwd(const SdpaParams& p_, const void* mask_, T* smem, int lane_,
                                   int warp)
        : p(p_), mask(mask_), Qs(smem), Ks(smem + BM * HD), Vs(smem + BM * HD + STAGES * KV_TILE),
          lane(lane_), t(lane_ & 3),
          // ldmatrix lanes: A of Q: row lane % 16, chunk lane / 16; B of K (k contiguous):
          // row lane % 8 + 8 (lane / 16), chunk (lane / 8) % 2; B of V (n contiguous,
          // .trans): row lane % 8 + 8 ((lane / 8) % 2), chunk lane / 16
          q_cols(warp * WM + (lane_ & 15), (lane_ >> 4) * 8),
          k_cols((lane_ & 7) + (lane_ >> 4) * 8, ((lane_ >> 3) & 1) * 8),
          v_cols((lane_ & 7) + ((lane_ >> 3) & 1) * 8, (lane_ >> 4) * 8) {}

    // |scale_log2| (Q is negated for a negative scale), from the parameters where it is
    // used (two instructions a tile, no register held across the loop); the floor keeps
    // -inf * c = -inf for scale 0 (every p then exp2(~0) = 1, as it should).
    __device__ __forceinline__ float scale_c() const {
        return fmaxf(fabsf(p.scale_log2), 7.8886090522101181e-31f);  // 2^-100
    }

    // The K (or V) tile of the next tile to load into the refilled stage.
    __device__ __forceinline__ void load_k(int n) {
        if (n + STAGES - 1 < n_tiles)
            load_tile<BN, HD, THREADS>(Ks + refill * KV_TILE, k_next, p.k_ss, kv_rows, p.d);
        cl::mma::cp_async_commit();
    }
    __device__ __forceinline__ void load_v(int n) {
        if (n + STAGES - 1 < n_tiles)
            load_tile<BN, HD, THREADS>(Vs + refill * KV_TILE, v_next, p.v_ss, kv_rows, p.dv);
        cl::mma::cp_async_commit();
    }

    // One K / V tile. MASKED: the per-warp mode (skip, or per-element masking); otherwise
    // every row keeps every key of the tile (the block's interior tiles).
    // UNIT_J: an explicit mask's key stride is 1 (mask_tile).
    template <bool MASKED, bool UNIT_J = true>
    __device__ __forceinline__ void step(int n) {
        const int key0 = key_begin + n * BN;
        const bool active = !MASKED || (key0 < w_hi && key0 + BN > w_lo);  // warp-uniform

        // ---- S = Q K^T
        cl::mma::cp_async_wait<2 * STAGES - 3>();  // K_n landed (V_n may be in flight)
        __syncthreads();
        load_k(n);
        float s[MT][NS][4];
        if (active) {
            const T* k_s = Ks + stage * KV_TILE;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int j = 0; j < NS; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) s[mt][j][e] = 0.0f;
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                unsigned a[MT][4];
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    if (Q_IN_REGS) {
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            a[mt][e] = qf[Q_IN_REGS ? mt : 0][Q_IN_REGS ? ks : 0][e];
                    } else {
                        cl::mma::ldmatrix<4>(a[mt], Qs + q_cols.at(ks) + 16 * mt * HD);
                    }
                }
#pragma unroll
                for (int j = 0; j < NS / 2; ++j) {
                    unsigned r[4];
                    cl::mma::ldmatrix<4>(r, k_s + k_cols.at(ks) + 16 * j * HD);
                    const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        cl::mma::mma_m16n8k16<T>(s[mt][2 * j], a[mt], b0, s[mt][2 * j]);
                        cl::mma::mma_m16n8k16<T>(s[mt][2 * j + 1], a[mt], b1, s[mt][2 * j + 1]);
                    }
                }
            }
            if (MASKED) mask_tile<UNIT_J>(s, key0);
            softmax<MASKED && MASK != sdpa::kMaskNone>(s, key0);
        }

        // ---- O += P V
        cl::mma::cp_async_wait<2 * STAGES - 3>();  // V_n landed (K_{n+STAGES-1} in flight)
        __syncthreads();
        load_v(n);
        if (active) {
            const T* v_s = Vs + stage * KV_TILE;
#pragma unroll
            for (int ks = 0; ks < PS; ++ks) {
                unsigned a[MT][4];  // P as A fragments: the C layout of two n8 tiles
#pragma unroll
                for (int mt = 0; mt < MT; ++mt) {
                    a[mt][0] = pack_pair<T>(s[mt][2 * ks][0], s[mt][2 * ks][1]);
                    a[mt][1] = pack_pair<T>(s[mt][2 * ks][2], s[mt][2 * ks][3]);
                    a[mt][2] = pack_pair<T>(s[mt][2 * ks + 1][0], s[mt][2 * ks + 1][1]);
                    a[mt][3] = pack_pair<T>(s[mt][2 * ks + 1][2], s[mt][2 * ks + 1][3]);
                }
#pragma unroll
                for (int j = 0; j < NO / 2; ++j) {
                    unsigned r[4];
                    cl::mma::ldmatrix_trans<4>(r, v_s + v_cols.at(j) + 16 * ks * HD);
                    const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt) {
                        cl::mma::mma_m16n8k16<T>(acc_o[mt][2 * j], a[mt], b0, acc_o[mt][2 * j]);
                        cl::mma::mma_m16n8k16<T>(acc_o[mt][2 * j + 1], a[mt], b1,
                                                 acc_o[mt][2 * j + 1]);
                    }
                }
            }
        }
        stage = stage + 1 == STAGES ? 0 : stage + 1;
        refill = refill + 1 == STAGES ? 0 : refill + 1;
        kv_rows -= BN;
        k_next += k_step;
        v_next += v_step;
    }

    // -inf where a row does not keep the key (range, explicit mask). Without an explicit
    // mask the scores stay raw (softmax scales them in its FFMA; c > 0 keeps -inf); with
    // one they are scaled to the log2 domain here and the additive mask's value added.
    // UNIT_J: the explicit mask's key stride is 1, so a lane's elements of one row sit at
    // constant offsets from the row's pointer (loads at immediate offsets); else multiples
    // of m_sj, one n8 tile per batch. The kernel body picks the variant once, outside its
    // tile loop: both in one loop would hold the registers of both (186 at head dim 32
    // against 151 and 147 apart).
    template <bool UNIT_J>
    __device__ __forceinline__ void mask_tile(float (&s)[MT][NS][4], int key0) {
        const float c = scale_c();
        if (MASK == sdpa::kMaskNone && key0 >= w_full_lo && key0 + BN <= w_full_hi) return;
        typedef typename sdpa::MaskRaw<MASK, T>::type Raw;
        // The mask at (the lane's first row, key0 + 2 t); rows step by m_si.
        const Raw* mb = MASK == sdpa::kMaskNone
                            ? nullptr
                            : static_cast<const Raw*>(mask) +
                                  sdpa::mask_offset(p, bi, h, w_first + (lane >> 2), key0 + 2 * t);
        // n8 tiles per batch of mask loads (a strided mask's: one). A strided mask's element
        // offsets are 32-bit (|m_sj| < 2^23, checked by the host): 64-bit products of m_sj
        // hoisted out of the tile loop would hold 186 registers at head dim 32 against 150.
        const int sj = UNIT_J ? 1 : (int)p.m_sj;
        constexpr int JC = !UNIT_J ? 1 : NS < 4 ? NS : 4;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            const int row = w_first + 16 * mt + (lane >> 2);
            const sdpa::KeyRange rr[2] = {sdpa::key_range(p, len, row),
                                          sdpa::key_range(p, len, row + 8)};
            const Raw* mrow[2] = {nullptr, nullptr};
            if constexpr (MASK != sdpa::kMaskNone) {
                mrow[0] = mb + 16 * mt * p.m_si;
                mrow[1] = mrow[0] + 8 * p.m_si;
            }
#pragma unroll
            for (int jc = 0; jc < NS; jc += JC) {
                // This batch's keep (range) bits and explicit mask elements: every load
                // issues before the first is used.
                bool keep[JC][4];
                Raw raw[JC][4];
#pragma unroll
                for (int j = 0; j < JC; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        const int hf = e >> 1, key = key0 + 8 * (jc + j) + 2 * t + (e & 1);
                        keep[j][e] = key >= rr[hf].lo && key < rr[hf].hi;
                        if constexpr (MASK != sdpa::kMaskNone) {
                            const int at = (8 * (jc + j) + (e & 1)) * sj;
                            raw[j][e] = keep[j][e] ? sdpa::mask_load<MASK, T>(mrow[hf], at)
                                                   : Raw();
                        }
                    }
#pragma unroll
                for (int j = 0; j < JC; ++j)
#pragma unroll
                    for (int e = 0; e < 4; ++e) {
                        float& x = s[mt][jc + j][e];
                        if constexpr (MASK == sdpa::kMaskNone) {
                            x = keep[j][e] ? x : -INFINITY;
                        } else {
                            const sdpa::MaskValue<MASK, T> mv =
                                sdpa::mask_decode<MASK, T>(raw[j][e]);
                            x = keep[j][e] && mv.keep ? x * c + mv.add_log2 : -INFINITY;
                        }
                    }
            }
        }
    }

    // Online softmax of one tile in the log2 domain: the row max of the raw scores across
    // the quad, then p = exp2(s * c - m) as one FFMA and an exp2 per element (c: the
    // scale in log2 units, >= 0 as Q's sign carries a negative scale, so the max of s
    // scales to the max of s * c; SCALED: mask_tile did the scaling, c = 1), O rescaled
    // when the max moved; the row sum stays per lane (the quad shares alpha).
    template <bool SCALED>
    __device__ __forceinline__ void softmax(float (&s)[MT][NS][4], int key0) {
        const float c = SCALED ? 1.0f : scale_c();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                float mx = -INFINITY;
#pragma unroll
                for (int j = 0; j < NS; ++j)
                    mx = fmaxf(mx, fmaxf(s[mt][j][2 * hf], s[mt][j][2 * hf + 1]));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                // m = s_max * c rounded up: every s * c - m (one FFMA, rounded once)
                // is then <= 0 (rounded to nearest, a logit of 1e10 * c put it up to
                // ulp / 2 above 0: exp2 overflowed to inf, and the row became NaN)
                mx = fmaxf(m_run[mt][hf], SCALED ? mx : __fmul_ru(mx, c));  // (c = 1: exact)
                // Nothing kept yet: subtract 0 (exp2(-inf) = 0, no -inf - -inf).
                const float m_use = mx == -INFINITY ? 0.0f : mx;
                const float alpha = cl::math::exp2_ftz(m_run[mt][hf] - m_use);
                m_run[mt][hf] = mx;
                float sum = 0.0f;
#pragma unroll
                for (int j = 0; j < NS; ++j)
#pragma unroll
                    for (int e = 2 * hf; e < 2 * hf + 2; ++e) {
                        s[mt][j][e] = cl::math::exp2_ftz(fmaf(s[mt][j][e], c, -m_use));
                        sum += s[mt][j][e];
                    }
                l_run[mt][hf] = l_run[mt][hf] * alpha + sum;
                // Once the row max settles alpha is 1 for the whole warp: skip the rescale.
                if (__any_sync(0xffffffffu, alpha != 1.0f)) {
#pragma unroll
                    for (int j = 0; j < NO; ++j) {
                        acc_o[mt][j][2 * hf] *= alpha;
                        acc_o[mt][j][2 * hf + 1] *= alpha;
                    }
                }
            }
        if (DROPOUT && p.drop_threshold != 0) {  // 0: p = 0 (the struct's convention)
            // Keep bits first, in rolled loops of Philox draws (unrolled draws would hold
            // too many registers), 8 n8 tiles at a time, then the factors.
            constexpr int NC = NS < 8 ? NS : 8;
            const unsigned long long offset = sdpa::stream_offset(p);
            const bool aligned = p.skv % 4 == 0;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                const unsigned long long e_row[2] = {
                    drop_row + (unsigned long long)(16 * mt) * p.skv,
                    drop_row + (unsigned long long)(16 * mt + 8) * p.skv};
#pragma unroll
                for (int c = 0; c < NS / NC; ++c) {
                    const unsigned bits = sdpa::drop_bits_keys_in_cols<NC>(
                        p, offset, e_row, key0 + 8 * NC * c, t, aligned);
#pragma unroll
                    for (int j = 0; j < NC; ++j)
#pragma unroll
                        for (int e = 0; e < 4; ++e)
                            s[mt][NC * c + j][e] *=
                                (bits >> (4 * j + e)) & 1 ? p.drop_scale : 0.0f;
                }
            }
        }
    }
};

// Flips the signs of the Q tile's chunks this thread copied (load_tile's mapping). Not
// inlined: in the kernel's body this rare branch costs the main loop registers (spills at
// HEAD_DIM 256).
template <int HD, int BM, int THREADS, typename T>
__device__ __noinline__ void negate_q(T* qs) {
    constexpr int CPR = HD / 8, RPP = THREADS / CPR;
    const int c = threadIdx.x % CPR, r0 = threadIdx.x / CPR;
#pragma unroll 1
    for (int r = r0; r < BM; r += RPP) {
        uint4* chunk = reinterpret_cast<uint4*>(qs + tc::tile_offset<HD>(r, c * 8));
        uint4 x = *chunk;
        x.x ^= 0x80008000u;
        x.y ^= 0x80008000u;
        x.z ^= 0x80008000u;
        x.w ^= 0x80008000u;
        *chunk = x;
    }
}

template <typename T, int HD, int BM, int BN, int WARPS, int STAGES, int MASK, bool DROPOUT>
__device__ __forceinline__ void fwd_body(const T* __restrict__ q, const T* __restrict__ k,
                                         const T* __restrict__ v, T* __restrict__ o,
                                         float* __restrict__ lse, const void* __restrict__ mask,
                                         const int* __restrict__ lengths_q,
                                         const int* __restrict__ lengths_kv,
                                         const SdpaParams& p) {
    typedef Fwd<T, HD, BM, BN, WARPS, STAGES, MASK, DROPOUT> F;
    enum { WM = F::WM, MT = F::MT, NO = F::NO, KS = F::KS, KV_TILE = F::KV_TILE };
    DYNAMIC_SHARED(T, smem);
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2;
    F f(p, mask, smem, lane, warp);

    const int mb = gridDim.x - 1 - blockIdx.x, h = blockIdx.y, bi = blockIdx.z;
    f.bi = bi;
    f.h = h;
    const int hk = h / p.group;  // GQA: once per block
    const sdpa::Lengths len = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
    const int q0 = mb * BM;

    // The block's tiles: key ranges grow with the row, so the first and the last valid
    // row bound the union of its rows' ranges; the interior tiles [a, b) are kept whole by
    // every row (no explicit mask, no row past lengths_q) and skip the masking code.
    const int rows_valid = min(BM, len.q - q0);
    int t_begin = 0, n_tiles = 0, a = 0, b = 0;
    if (rows_valid > 0) {
        const sdpa::KeyRange first = sdpa::key_range(p, len, q0);
        const sdpa::KeyRange last = sdpa::key_range(p, len, q0 + rows_valid - 1);
        if (last.hi > first.lo) {
            t_begin = first.lo / BN;
            n_tiles = (last.hi + BN - 1) / BN - t_begin;
            // Dropout kernels keep one (masked) copy of the tile step: Philox dominates
            // them, and a second copy of its code spills at head dims >= 128.
            if (MASK == sdpa::kMaskNone && !DROPOUT && rows_valid == BM) {
                a = min(max((last.lo - t_begin * BN + BN - 1) / BN, 0), n_tiles);
                b = max(min((first.hi - t_begin * BN) / BN, n_tiles), a);
            }
        }
    }
    // The warp's rows: their range union, and the part every row keeps.
    f.w_first = q0 + warp * WM;
    const int w_last = min(f.w_first + WM, len.q) - 1;
    f.w_lo = f.w_hi = f.w_full_lo = f.w_full_hi = 0;
    if (w_last >= f.w_first) {
        const sdpa::KeyRange first = sdpa::key_range(p, len, f.w_first);
        const sdpa::KeyRange last = sdpa::key_range(p, len, w_last);
        f.w_lo = first.lo;
        f.w_hi = last.hi;
        f.w_full_lo = last.lo;
        f.w_full_hi = w_last == f.w_first + WM - 1 ? first.hi : 0;  // rows past lengths_q
    }
    f.len = len;
    if (DROPOUT)
        f.drop_row = (((unsigned long long)bi * p.hq + h) * p.sq + f.w_first + g) *
                     (unsigned long long)p.skv;

    const T* qb = q + bi * p.q_sb + h * p.q_sh + (long long)q0 * p.q_ss;
    const T* kb = k + bi * p.k_sb + hk * p.k_sh + (long long)t_begin * BN * p.k_ss;
    const T* vb = v + bi * p.v_sb + hk * p.v_sh + (long long)t_begin * BN * p.v_ss;
    f.k_step = (long long)BN * p.k_ss;
    f.v_step = (long long)BN * p.v_ss;
    f.key_begin = t_begin * BN;
    f.n_tiles = n_tiles;
    const int kv_rows = len.kv - t_begin * BN;  // valid rows of tile 0

    // Prologue: Q, then K and V of the first STAGES - 1 tiles, one group each.
    load_tile<BM, HD, F::THREADS>(f.Qs, qb, p.q_ss, len.q - q0, p.d);
    cl::mma::cp_async_commit();
    // A negative scale: Q's signs flipped once per block (s * scale = -s * |scale|), so
    // softmax's max of the raw scores stays the max of the scaled ones: in the fragments
    // (XOR, no branch, below) or, for HEAD_DIM 256, in shared memory by the threads that
    // copied each chunk (their own cp.async data is visible to them after the wait; tile
    // 0's barrier publishes it to the other warps).
    const unsigned q_sign = p.scale_log2 < 0.0f ? 0x80008000u : 0u;
    if (!F::Q_IN_REGS && q_sign) {
        cl::mma::cp_async_wait<0>();  // Q, the only group yet
        negate_q<HD, BM, F::THREADS>(f.Qs);
    }
#pragma unroll
    for (int s = 0; s < STAGES - 1; ++s) {
        if (s < n_tiles)
            load_tile<BN, HD, F::THREADS>(f.Ks + s * KV_TILE, kb + s * f.k_step, p.k_ss,
                                          kv_rows - s * BN, p.d);
        cl::mma::cp_async_commit();
        if (s < n_tiles)
            load_tile<BN, HD, F::THREADS>(f.Vs + s * KV_TILE, vb + s * f.v_step, p.v_ss,
                                          kv_rows - s * BN, p.dv);
        cl::mma::cp_async_commit();
    }
    f.stage = 0;
    f.refill = STAGES - 1;
    f.kv_rows = kv_rows - (STAGES - 1) * BN;
    f.k_next = kb + (STAGES - 1) * f.k_step;
    f.v_next = vb + (STAGES - 1) * f.v_step;

    if (F::Q_IN_REGS) {
        cl::mma::cp_async_wait<2 * (STAGES - 1)>();
        __syncthreads();
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int ks = 0; ks < KS; ++ks) {
                unsigned(&a)[4] = f.qf[F::Q_IN_REGS ? mt : 0][F::Q_IN_REGS ? ks : 0];
                cl::mma::ldmatrix<4>(a, f.Qs + f.q_cols.at(ks) + 16 * mt * HD);
#pragma unroll
                for (int e = 0; e < 4; ++e) a[e] ^= q_sign;
            }
    }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
#pragma unroll
        for (int j = 0; j < NO; ++j)
#pragma unroll
            for (int e = 0; e < 4; ++e) f.acc_o[mt][j][e] = 0.0f;
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            f.m_run[mt][hf] = -INFINITY;
            f.l_run[mt][hf] = 0.0f;
        }
    }

    // Tiles in order (the pipeline loads them so): masked before the interior (a window's
    // left edge), the interior unmasked, masked after it (causal diagonal, window's right
    // edge, lengths_kv); three loops so the interior's is free of masking code.
    int n = 0;
    for (; n < a; ++n) f.template step<true>(n);
    for (; n < b; ++n) f.template step<false>(n);
    if (MASK == sdpa::kMaskNone || p.m_sj == 1) {
        for (; n < n_tiles; ++n) f.template step<true>(n);
    } else {
        for (; n < n_tiles; ++n) f.template step<true, false>(n);
    }

    // Only empty groups remain, except HEAD_DIM 256's Q when no tile ran: the barrier
    // keeps other warps' Q copies from landing on the staged O.
    cl::mma::cp_async_wait<0>();
    __syncthreads();

    // ---- epilogue: O / l, lse; stage O in this warp's own rows of the Q tile (only this
    // warp read them), then 16-byte stores of whole rows.
    const long long lse_row = ((long long)bi * p.hq + h) * p.sq;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            float l = f.l_run[mt][hf];
            l += __shfl_xor_sync(0xffffffffu, l, 1);
            l += __shfl_xor_sync(0xffffffffu, l, 2);
            const float inv = l > 0.0f ? 1.0f / l : 0.0f;
#pragma unroll
            for (int j = 0; j < NO; ++j) {
                f.acc_o[mt][j][2 * hf] *= inv;
                f.acc_o[mt][j][2 * hf + 1] *= inv;
            }
            const int i = f.w_first + 16 * mt + g + 8 * hf;
            if (f.t == 0 && i < p.sq)
                lse[lse_row + i] = l > 0.0f ? (f.m_run[mt][hf] + log2f(l)) * kLn2 : -INFINITY;
        }
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int j = 0; j < NO; ++j)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int row = warp * WM + 16 * mt + g + 8 * hf;
                *reinterpret_cast<unsigned*>(f.Qs + tc::tile_offset<HD>(row, 8 * j + 2 * f.t)) =
                    pack_pair<T>(f.acc_o[mt][j][2 * hf], f.acc_o[mt][j][2 * hf + 1]);
            }
    __syncwarp();
    constexpr int CPR = HD / 8;
    T* ob = o + bi * p.o_sb + h * p.o_sh;
#pragma unroll
    for (int idx = lane; idx < WM * CPR; idx += 32) {
        const int r = idx / CPR, c = idx % CPR;
        const int i = f.w_first + r;
        if (i < p.sq && c * 8 < p.dv)
            *reinterpret_cast<uint4*>(ob + i * p.o_ss + c * 8) =
                *reinterpret_cast<const uint4*>(f.Qs + tc::tile_offset<HD>(warp * WM + r, c * 8));
    }
}

// bf16 MMA exists from sm_80; older targets get a trapping body the solver never launches.
template <typename T>
struct Supported {
    static const bool value = true;
};
#if !CL_MMA_SM80
template <>
struct Supported<__nv_bfloat16> {
    static const bool value = false;
};
#endif

}  // namespace flash

template <typename T, int HEAD_DIM, int BM, int BN, int WARPS, int STAGES, int MASK, bool DROPOUT>
__global__ void __launch_bounds__(WARPS * 32)
    sdpa_flash_fwd_tc(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                      T* __restrict__ o, float* __restrict__ lse, const void* __restrict__ mask,
                      const int* __restrict__ lengths_q, const int* __restrict__ lengths_kv,
                      SdpaParams p) {
    if constexpr (flash::Supported<T>::value) {
        flash::fwd_body<T, HEAD_DIM, BM, BN, WARPS, STAGES, MASK, DROPOUT>(
            q, k, v, o, lse, mask, lengths_q, lengths_kv, p);
    } else {
        __trap();
    }
}
