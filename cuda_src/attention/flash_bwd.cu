// flash_bwd.cu — FlashAttention-2 backward on the warp-level MMA layer (common/mma.cuh):
// fp16 (sm_75+) and bf16 (sm_80+) inputs, fp32 accumulation, every masking feature of
// attention_common.cuh (causal / window / lengths / bool or additive mask / dropout).
//
// Kernels (T = __half | __nv_bfloat16; D = the head-dim bucket 32 / 64 / 128 / 256 >=
// max(d, dv), columns past d / dv zero-filled; BM x BN = query tile x key block, W = BN / 16
// warps, or 2 or 4 BN / 16 warps where that many warps share 16 keys and split dK / dV's
// head dim: S^T for a share of the queries each, P^T and dS^T then go through shared
// memory. D = 256: 64 x 32 with four warps per 16 keys, Q / dO single-buffered, K / V read
// from shared every tile (Main::QSTAGES, KV_REGS); its dQ kernel 64 queries x 32 keys with
// two warps per 16 queries (Dq::WIDE)):
//   sdpa_flash_bwd_pre<T>                delta[b,h,i] = sum_c dout[i,c] * o[i,c] (fp32;
//                                        0 past lengths_q) and lse2 = lse * log2(e) (+inf
//                                        for rows that keep nothing or lie past lengths_q);
//                                        zeroes dq_accum's rows (D floats each) when asked
//   sdpa_flash_bwd_main<T, D, BM, BN, W, GENERAL> dK, dV of BN keys of one (batch, kv head), summed
//                                        in registers over the group's query heads (GQA) and
//                                        the query tiles that reach those keys; with W = BN / 16
//                                        a warp owns 16 keys, so S^T, P^T, dP^T, dS^T stay in
//                                        MMA accumulators and feed the dV / dK MMAs as A
//                                        fragments.
//                                        dq_atomic = 1 (sdpa_bwd_flash_tc): dQ += dS K through
//                                        a shared dS tile, fp32 atomics into dq_accum.
//                                        Writes dmask (the only kernel visiting each (i, j)
//                                        once per query head).
//   sdpa_flash_bwd_dq_convert<T>         dq = scale * dq_accum in dq's dtype and strides
//   sdpa_flash_bwd_dq<T, D, BM, BN, W, GENERAL> the deterministic dQ (sdpa_bwd_flash_tc_split):
//                                        BN queries of one (batch, q head) per block over
//                                        key tiles of BM keys (the main kernel's tile turned
//                                        around); S, P, dP, dS recomputed, dQ in registers.
// GENERAL (main, dq): true runs every feature (explicit bool / additive mask, dropout, dmask;
// per-element code in the loop); false is the fast path for problems without an explicit
// mask or dropout: P = exp2(S scale_log2 - lse2) for the whole tile, and causal / window /
// lengths tested per element (two compares with immediates) on boundary tiles only.
// Readable names: sdpa_flash_bwd_main_64x64_d128_w8_fp16, ..._w8_general_fp16
// (solvers/attention/flash_bwd.py).
//
// Loop costs: every ldmatrix address is a per-lane register (LaneOff, computed once) plus
// an immediate; cp.async addresses advance by constant row steps; dQ's atomics are float2
// (sm_90) into dq_accum rows padded to D floats (no column tests). Dropout keep bits: one
// Philox draw per four elements, shared by the lanes holding them through shuffles, when
// skv % 4 == 0 (sdpa::drop_bits_keys_in_rows / _cols); else one per element (main) or pair
// of keys (dq).
//
// Shared tiles are rows of 16-byte chunks XOR-swizzled as in conv/tc_gemm.cuh, so every
// ldmatrix phase hits 8 distinct bank groups.
#include "attention/attention_common.cuh"
#include "common/mma.cuh"
#include "conv/tc_gemm.cuh"

namespace fbwd {

using cl::mma::ldmatrix;
using cl::mma::ldmatrix_trans;

template <typename T>
__device__ __forceinline__ unsigned pack(float lo, float hi) {
    return cl::mma::pack2<T>(cl::from_float<T>(lo), cl::from_float<T>(hi));
}

template <int COLS>
__device__ __forceinline__ int at(int row, int col) {
    return tc::tile_offset<COLS>(row, col);
}

// The four C-fragment values of n8 tiles 2k and 2k+1 as the A fragment of the k-th k16 step
// (C: rows g / g+8, columns 2t, 2t+1; A: the same rows, k columns 2t.. and 2t+8..).
template <typename T>
__device__ __forceinline__ void c_to_a(unsigned (&a)[4], const float (&c0)[4], const float (&c1)[4]) {
    a[0] = pack<T>(c0[0], c0[1]);
    a[1] = pack<T>(c0[2], c0[3]);
    a[2] = pack<T>(c1[0], c1[1]);
    a[3] = pack<T>(c1[2], c1[3]);
}

// This lane's ldmatrix element offsets in a swizzled [rows][COLS] tile: its row `row`
// (plus R, a multiple of 8) and 16-byte chunk `chunk` (plus C, even). The swizzle XORs a
// chunk's low log2(M) bits with row bits that repeat every 8 rows, so o[k] holds chunks
// chunk + 2k (k < M / 2) and every further chunk is a whole multiple of M away: with R and
// C known after unrolling, an address is a register plus an immediate (nothing swizzled
// inside the loops).
template <int COLS>
struct LaneOff {
    static constexpr int M = COLS / 8 >= 8 ? 8 : COLS / 8;
    int o[M / 2];
    __device__ __forceinline__ LaneOff(int row, int chunk) {
#pragma unroll
        for (int k = 0; k < M / 2; ++k) o[k] = at<COLS>(row, (chunk + 2 * k) * 8);
    }
    __device__ __forceinline__ int operator()(int R, int C) const {
        return o[(C % M) / 2] + (C / M) * M * 8 + R * COLS;
    }
};

// The two lane patterns of an x4 ldmatrix: A (rows lane % 16, chunk lane / 16), which is
// also a k-major B read with .trans; and B (rows lane % 8 + 8 (lane / 16), chunk
// (lane / 8) % 2), also a k-major A read with .trans (mma.cuh's fragment notes).
template <int COLS>
__device__ __forceinline__ LaneOff<COLS> a_lanes(int lane, int chunk0 = 0) {
    return LaneOff<COLS>(lane & 15, (lane >> 4) + chunk0);
}
template <int COLS>
__device__ __forceinline__ LaneOff<COLS> b_lanes(int lane, int chunk0 = 0) {
    return LaneOff<COLS>((lane & 7) + ((lane >> 4) << 3), ((lane >> 3) & 1) + chunk0);
}

// acc[NF] (16 rows x 8 NF columns) += A op(B) over KSTEPS k16 steps, A the 16 rows of As
// (k contiguous; ao: a_lanes). B_KMAJOR = false: B^T with B the 8 NF rows of Bs, k
// contiguous (ldmatrix; bo: b_lanes); true: B a [k][BC] tile, n contiguous
// (ldmatrix.trans; bo: a_lanes at its first column).
template <bool B_KMAJOR, typename T, int KSTEPS, int NF, int AC, int BC>
__device__ __forceinline__ void mma_tile(float (&acc)[NF][4], const T* As, const LaneOff<AC>& ao,
                                         const T* Bs, const LaneOff<BC>& bo) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
        unsigned a[4];
        ldmatrix<4>(a, As + ao(0, 2 * ks));
#pragma unroll
        for (int np = 0; np < NF / 2; ++np) {
            unsigned r[4];
            if (B_KMAJOR)
                ldmatrix_trans<4>(r, Bs + bo(16 * ks, 2 * np));
            else
                ldmatrix<4>(r, Bs + bo(16 * np, 2 * ks));
            const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
            cl::mma::mma_m16n8k16<T>(acc[2 * np], a, b0, acc[2 * np]);
            cl::mma::mma_m16n8k16<T>(acc[2 * np + 1], a, b1, acc[2 * np + 1]);
        }
    }
}

// acc += A B^T (both operands k contiguous).
template <typename T, int KSTEPS, int NF, int AC, int BC>
__device__ __forceinline__ void mma_abt(float (&acc)[NF][4], const T* As, const LaneOff<AC>& ao,
                                        const T* Bs, const LaneOff<BC>& bo) {
    mma_tile<false, T, KSTEPS, NF>(acc, As, ao, Bs, bo);
}

// mma_abt with A's fragments already in registers (a[ks]: ldmatrix of a_lanes, k16 step ks).
template <typename T, int KSTEPS, int NF, int BC>
__device__ __forceinline__ void mma_rabt(float (&acc)[NF][4], const unsigned (&a)[KSTEPS][4],
                                         const T* Bs, const LaneOff<BC>& bo) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
#pragma unroll
        for (int np = 0; np < NF / 2; ++np) {
            unsigned r[4];
            ldmatrix<4>(r, Bs + bo(16 * np, 2 * ks));
            const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
            cl::mma::mma_m16n8k16<T>(acc[2 * np], a[ks], b0, acc[2 * np]);
            cl::mma::mma_m16n8k16<T>(acc[2 * np + 1], a[ks], b1, acc[2 * np + 1]);
        }
    }
}

// acc[NF] += A * B where A (16 x 16*KSTEPS) comes from C fragments c[2*KSTEPS] in registers
// and B is a [k][BC] tile (n contiguous: ldmatrix.trans; bo: a_lanes at its first column).
template <typename T, int KSTEPS, int NF, int BC>
__device__ __forceinline__ void mma_reg_b(float (&acc)[NF][4], const float (&c)[2 * KSTEPS][4],
                                          const T* Bs, const LaneOff<BC>& bo) {
#pragma unroll
    for (int ks = 0; ks < KSTEPS; ++ks) {
        unsigned a[4];
        c_to_a<T>(a, c[2 * ks], c[2 * ks + 1]);
#pragma unroll
        for (int np = 0; np < NF / 2; ++np) {
            unsigned r[4];
            ldmatrix_trans<4>(r, Bs + bo(16 * ks, 2 * np));
            const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
            cl::mma::mma_m16n8k16<T>(acc[2 * np], a, b0, acc[2 * np]);
            cl::mma::mma_m16n8k16<T>(acc[2 * np + 1], a, b1, acc[2 * np + 1]);
        }
    }
}

// acc += A B with B a [k][BC] tile, n contiguous.
template <typename T, int KSTEPS, int NF, int AC, int BC>
__device__ __forceinline__ void mma_ab(float (&acc)[NF][4], const T* As, const LaneOff<AC>& ao,
                                       const T* Bs, const LaneOff<BC>& bo) {
    mma_tile<true, T, KSTEPS, NF>(acc, As, ao, Bs, bo);
}

// Two fp32 atomic adds at p, p + 1 (8-byte aligned): one vector atomic on sm_90.
__device__ __forceinline__ void atomic_add2(float* p, float a, float b) {
#if !defined(CUDNNLITE_EMULATOR) && defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    atomicAdd(reinterpret_cast<float2*>(p), make_float2(a, b));
#else
    atomicAdd(p, a);
    atomicAdd(p + 1, b);
#endif
}

// Copies rows [r0, r0 + ROWS) of a (ROWS x D) tile, `cols` valid columns (a multiple of 8),
// rows valid below `rows_valid`, into a swizzled [ROWS][D] shared tile (zeros elsewhere).
template <typename T, int ROWS, int D, int THREADS>
__device__ __forceinline__ void load_tile(T* dst, const T* src, long long row_stride, int r0,
                                          int rows_valid, int cols) {
    // A thread copies chunk ch of rows row, row + RPI, ...: one address computed, then
    // constant steps (RPI a multiple of the swizzle's 8-row period).
    constexpr int CH = D / 8, RPI = THREADS / CH;
    static_assert(THREADS % CH == 0 && RPI % 8 == 0 && ROWS % RPI == 0, "load_tile tiling");
    const int row = threadIdx.x / CH, ch = threadIdx.x % CH;
    const bool col_ok = ch * 8 < cols;
    const T* s0 = src + (long long)(r0 + row) * row_stride + ch * 8;
    T* d0 = dst + at<D>(row, ch * 8);
#pragma unroll
    for (int it = 0; it < ROWS / RPI; ++it) {
        // (An invalid chunk's address is formed but never read: cp.async with no source.)
        const bool ok = col_ok && r0 + row + it * RPI < rows_valid;
        cl::mma::cp_async<16>(d0 + it * RPI * D, s0 + it * RPI * row_stride, ok);
    }
}

// Calls f(sdpa::MaskKind<K>()) for the mask kind K = mask_kind (warp-uniform): a tile's
// mask code then has compile-time loads, which issue together before the first use.
template <class F>
__device__ __forceinline__ void with_mask_kind(int mask_kind, F&& f) {
    if (mask_kind == sdpa::kMaskBool)
        f(sdpa::MaskKind<sdpa::kMaskBool>());
    else if (mask_kind == sdpa::kMaskAdditive)
        f(sdpa::MaskKind<sdpa::kMaskAdditive>());
    else
        f(sdpa::MaskKind<sdpa::kMaskNone>());
}

// P = exp2(S scale_log2 + mask - lse2) of a warp's NF x 4 fragment on a tile that the masks
// cut (0 where causal / window / lengths or the explicit mask drop the element). Element
// (f, r) lies on line hf = r >> 1 (a row of the fragment) at position c = 8 f + (r & 1)
// from the lane's first element of the line; it passes causal / window / lengths when
// lo[hf] <= c <= hi[hf] (the line's range, made once per tile by the caller), and its
// explicit mask element is at mask + moff + hf * line_step + c * along: a 64-bit line
// base per tile, then 32-bit offsets (mask strides below 2^23 elements, checked by the
// host) instead of 64-bit products per element. l2(f, r): the element's row lse2. FC n8
// tiles at a time: their range tests and mask loads (the mask kind dispatched once), then
// their P.
template <typename T, int NF, class L2>
__device__ __forceinline__ void masked_p(float (&s)[NF][4], float scale_log2, const int (&lo)[2],
                                         const int (&hi)[2], const void* mask, long long moff,
                                         int line_step, int along, int mask_kind, L2 l2) {
    constexpr int FC = NF < 2 ? NF : 2;
    with_mask_kind(mask_kind, [&](auto kind) {
        constexpr int MK = decltype(kind)::value;
        typedef typename sdpa::MaskRaw<MK, T>::type Raw;
        const Raw* line[2] = {nullptr, nullptr};
        if constexpr (MK != sdpa::kMaskNone) {
            line[0] = static_cast<const Raw*>(mask) + moff;
            line[1] = line[0] + line_step;
        }
#pragma unroll
        for (int fc = 0; fc < NF; fc += FC) {
            bool keep[FC][4];
            Raw raw[FC][4];
#pragma unroll
            for (int f = 0; f < FC; ++f)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    const int c = 8 * (fc + f) + (r & 1), hf = r >> 1;
                    keep[f][r] = lo[hf] <= c && c <= hi[hf];
                    if constexpr (MK != sdpa::kMaskNone)
                        raw[f][r] = keep[f][r] ? line[hf][c * along] : Raw();
                }
#pragma unroll
            for (int f = 0; f < FC; ++f)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    float add = 0.0f;
                    bool k = keep[f][r];
                    if constexpr (MK != sdpa::kMaskNone) {
                        const auto mv = sdpa::mask_decode<MK, T>(raw[f][r]);
                        k = k && mv.keep;
                        add = mv.add_log2;
                    }
                    float& x = s[fc + f][r];
                    x = k ? cl::math::exp2_ftz(x * scale_log2 + add - l2(fc + f, r)) : 0.0f;
                }
        }
    });
}

// Whether every (i, j) of queries [m0, m0 + bm) x keys [n0, n0 + bn) passes causal / window
// / lengths-kv (key ranges grow with i, so the corners decide); rows past lengths_q need no
// test: their lse is taken as +inf, so P = 0.
__device__ __forceinline__ bool tile_full(const SdpaParams& p, sdpa::Lengths len, int shift,
                                          int mask_kind, int m0, int bm, int n0, int bn) {
    return mask_kind == sdpa::kMaskNone && n0 + bn <= len.kv &&
           (p.right < 0 || n0 + bn - 1 <= m0 + shift + p.right) &&
           (p.left < 0 || n0 >= m0 + bm - 1 + shift - p.left);
}

// lse in the log2 domain as P = exp2(s * scale_log2 - lse2) uses it: +inf for rows that keep
// nothing (lse = -inf) and rows past lengths_q, so their P is 0. The pre kernel writes it
// (the workspace's lse2 rows) for the others to read.
__device__ __forceinline__ float lse_log2(const float* lse, long long row, bool valid) {
    if (!valid) return INFINITY;
    const float l = lse[row];
    return l == -INFINITY ? INFINITY : sdpa::log2_sat(l);
}

// ------------------------------------------------------------------ main (dK, dV)
template <typename T, int D, int BM, int BN, int W, bool GENERAL>
struct Main {
    enum {
        THREADS = W * 32,
        KW = BN / 16,   // warps along the keys (16 keys each) ...
        WD = W / KW,    // ... times warps along the head dim of dK / dV (sharing the keys)
        QW = BM / WD,   // queries of S^T per warp
        NFM = QW / 8,   // n8 tiles of S^T along the queries
        NFD = D / WD / 8,  // n8 tiles of dK / dV along the head dim
        // dQ = dS K (atomic solver): warps tile the BM x D block as QM x QD
        QM = BM / 16 < W ? BM / 16 : W,
        QD = W / QM,
        DQ_ROWS = BM / QM,
        DQ_COLS = D / QD,
        // Q / dO stages: two (the next item's tiles load during this one's MMAs); one for
        // D = 256 (K, V, Q, dO of 32 keys x 64 queries: 105 KB, so it fits sm_80's 163 KB
        // and two blocks fit sm_90's 227 KB; the next load overlaps the dQ MMAs only).
        QSTAGES = D > 128 ? 1 : 2,
        // shared memory, in elements of T, then 4 * BM floats (lse2, delta; two stages)
        K_OFF = 0,
        V_OFF = BN * D,
        Q_OFF = 2 * BN * D,
        DO_OFF = Q_OFF + QSTAGES * BM * D,
        DS_OFF = DO_OFF + QSTAGES * BM * D,
        P_OFF = DS_OFF + BN * BM,  // (P drop)^T when WD > 1
        T_ELEMS = P_OFF + (WD > 1 ? BN * BM : 0),
        SMEM_BYTES = T_ELEMS * 2 + 4 * BM * 4,
    };
    // K_w and V_w as A fragments in registers for the whole loop (8 D / 16 registers; D =
    // 128 fast path: 247 registers on sm_90, no spills). false reads them every tile (D =
    // 256: they would take 128 registers).
    static constexpr bool KV_REGS = D <= 128;
    static_assert(W % KW == 0 && (WD == 1 || WD == 2 || WD == 4),
                  "warps: 16 keys each, 1, 2 or 4 per key group");
    static_assert(QW >= 16, "S^T: at least 16 queries per warp");
    static_assert(BM % 16 == 0 && D % 16 == 0, "MMA granularity");
    static_assert(W % QM == 0 && DQ_COLS % 16 == 0 && DQ_ROWS % 16 == 0, "dQ warp tiling");

    __device__ static void go(const T* __restrict__ q, const T* __restrict__ k,
                              const T* __restrict__ v, const T* __restrict__ dout,
                              const float* __restrict__ lse2, T* __restrict__ dk,
                              T* __restrict__ dv, float* __restrict__ dmask, const void* mask,
                              const int* lengths_q, const int* lengths_kv, const SdpaParams& p,
                              const float* __restrict__ delta, float* __restrict__ dq_accum,
                              int mask_kind, int dq_atomic, int write_dmask) {
        DYNAMIC_SHARED(T, sm);
        float* lse_s = reinterpret_cast<float*>(sm + T_ELEMS);  // [2][BM]
        float* delta_s = lse_s + 2 * BM;                         // [2][BM]
        const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
        const int g = lane >> 2, t = lane & 3;
        const int n0 = blockIdx.x * BN;
        const int bi = blockIdx.y / p.hkv, hk = blockIdx.y - bi * p.hkv;
        const sdpa::Lengths len = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
        const int shift = p.align_br ? len.kv - len.q : 0;
        // This warp: keys 16 kw.. (S^T for queries q0.., dK / dV for head-dim columns c0..)
        const int kw = warp % KW, wd = warp / KW;
        const int q0 = wd * QW, c0 = wd * (D / WD);

        // Queries whose key range meets [n0, n0 + BN): key ranges grow with i.
        int i_lo = 0, i_hi = n0 < len.kv ? len.q : 0;
        if (p.right >= 0) i_lo = max(0, n0 - shift - p.right);
        if (p.left >= 0) i_hi = min(i_hi, n0 + BN + p.left - shift);
        const int mt_begin = i_lo / BM;
        const int mt_end = i_hi > i_lo ? (i_hi + BM - 1) / BM : mt_begin;
        const int n_items = (mt_end - mt_begin) * p.group;

        T* Ks = sm + K_OFF;
        T* Vs = sm + V_OFF;
        load_tile<T, BN, D, THREADS>(Ks, k + bi * p.k_sb + hk * p.k_sh + (long long)n0 * p.k_ss,
                                     p.k_ss, 0, len.kv - n0, p.d);
        load_tile<T, BN, D, THREADS>(Vs, v + bi * p.v_sb + hk * p.v_sh + (long long)n0 * p.v_ss,
                                     p.v_ss, 0, len.kv - n0, p.dv);

        // One stage: the Q and dO tiles of query head h, rows m0.., and their lse2 / delta.
        auto load_item = [&](int stage, int h, int m0) {
            load_tile<T, BM, D, THREADS>(sm + Q_OFF + stage * BM * D,
                                         q + bi * p.q_sb + h * p.q_sh, p.q_ss, m0, len.q, p.d);
            load_tile<T, BM, D, THREADS>(sm + DO_OFF + stage * BM * D,
                                         dout + bi * p.o_sb + h * p.o_sh, p.o_ss, m0, len.q,
                                         p.dv);
            // lse2 and delta rows (pre kernel; rows past sq are zero-filled: their Q and dO
            // rows are zero, so P = 1 there meets dO = 0 and dP - delta = 0).
            const long long row0 = ((long long)bi * p.hq + h) * p.sq + m0;
            static_assert(2 * BM <= THREADS, "one lse2 or delta row per thread");
            if (tid < 2 * BM) {
                const int r = tid < BM ? tid : tid - BM;
                const bool ok = m0 + r < p.sq;
                const float* src = (tid < BM ? lse2 : delta) + (ok ? row0 + r : 0);
                cl::mma::cp_async<4>(lse_s + (tid < BM ? 0 : 2 * BM) + stage * BM + r, src, ok);
            }
        };

        float dk_acc[NFD][4], dv_acc[NFD][4];
#pragma unroll
        for (int f = 0; f < NFD; ++f)
#pragma unroll
            for (int r = 0; r < 4; ++r) dk_acc[f][r] = dv_acc[f][r] = 0.0f;

        // Lane offsets (lane_off's notes): K / V as A and Q / dO as B of S^T and dP^T; Q / dO
        // as k-major B of dV / dK (at column c0 when WD = 2, P^T / dS^T then the A tile).
        const LaneOff<D> kv_a = a_lanes<D>(lane), qo_b = b_lanes<D>(lane);
        const LaneOff<D> qo_t = a_lanes<D>(lane, c0 / 8);
        const LaneOff<BM> pt_a = a_lanes<BM>(lane);
        const T* Kw = Ks + 16 * kw * D;
        const T* Vw = Vs + 16 * kw * D;
        // Boundary tiles (the fast path's, and the general path's masked ones): this lane's
        // keys j = jw0, jw0 + 8 keep the queries imin <= i <= imax (causal / window; none
        // past lengths_kv). Rows past lengths_q need no test on the fast path: lse2 = +inf
        // there, so P = 0 (the masked path clamps to lengths_q: an additive +inf).
        const int jw0 = n0 + 16 * kw + g;
        int imin[2], imax[2];
#pragma unroll
        for (int hf = 0; hf < 2; ++hf) {
            const int j = jw0 + 8 * hf;
            imin[hf] = p.right >= 0 ? j - shift - p.right : -(1 << 29);
            imax[hf] = p.left >= 0 ? j - shift + p.left : (1 << 29);
            if (j >= len.kv) imin[hf] = 1 << 29;
        }

        const int h0 = hk * p.group;
        if (n_items > 0) load_item(0, h0, mt_begin * BM);
        cl::mma::cp_async_commit();
        // This warp's K and V rows as A fragments of S^T and dP^T, in registers for the whole
        // loop (KV_REGS).
        unsigned kf[KV_REGS ? D / 16 : 1][4], vf[KV_REGS ? D / 16 : 1][4];
        if (KV_REGS && n_items > 0) {
            cl::mma::cp_async_wait<0>();
            __syncthreads();
#pragma unroll
            for (int ks = 0; ks < (KV_REGS ? D / 16 : 0); ++ks) {
                ldmatrix<4>(kf[ks], Kw + kv_a(0, 2 * ks));
                ldmatrix<4>(vf[ks], Vw + kv_a(0, 2 * ks));
            }
        }
        int cur_h = h0, cur_mt = mt_begin, nxt_h = h0, nxt_mt = mt_begin;
        for (int it = 0; it < n_items; ++it) {
            const int stage = QSTAGES == 2 ? it & 1 : 0;
            cl::mma::cp_async_wait<0>();
            __syncthreads();  // stage `it` landed; every warp is done with stage it - 1
            if (++nxt_mt == mt_end) {
                nxt_mt = mt_begin;
                ++nxt_h;
            }
            if (QSTAGES == 2 && it + 1 < n_items) load_item(stage ^ 1, nxt_h, nxt_mt * BM);
            cl::mma::cp_async_commit();

            const int m0 = cur_mt * BM, h = cur_h;
            const T* Qs = sm + Q_OFF + stage * BM * D;
            const T* dOs = sm + DO_OFF + stage * BM * D;
            const float* l2 = lse_s + stage * BM;
            const float* dl = delta_s + stage * BM;

            // S^T = K_w Q^T and dP^T = V_w dO^T (16 keys x BM queries per warp).
            float s[NFM][4], dp[NFM][4];
#pragma unroll
            for (int f = 0; f < NFM; ++f)
#pragma unroll
                for (int r = 0; r < 4; ++r) s[f][r] = dp[f][r] = 0.0f;
            if constexpr (KV_REGS) {
                mma_rabt<T, D / 16, NFM, D>(s, kf, Qs + q0 * D, qo_b);
                mma_rabt<T, D / 16, NFM, D>(dp, vf, dOs + q0 * D, qo_b);
            } else {
                mma_abt<T, D / 16, NFM, D, D>(s, Kw, kv_a, Qs + q0 * D, qo_b);
                mma_abt<T, D / 16, NFM, D, D>(dp, Vw, kv_a, dOs + q0 * D, qo_b);
            }

            if constexpr (GENERAL) {
                // P, dropout, dS = P (dP * drop - delta); s becomes P * drop, dp becomes dS.
                const int jw = n0 + 16 * kw + g;
                if (tile_full(p, len, shift, mask_kind, m0, BM, n0, BN)) {
    #pragma unroll
                    for (int f = 0; f < NFM; ++f)
    #pragma unroll
                        for (int r = 0; r < 4; ++r)
                            s[f][r] = cl::math::exp2_ftz(s[f][r] * p.scale_log2 -
                                            l2[q0 + 8 * f + 2 * t + (r & 1)]);
                } else {
                    // Lines: keys jw, jw + 8; positions: queries i = ib + c, up to lengths_q
                    // (lse2 = +inf past it, but an additive mask's +inf would make a NaN).
                    const int ib = m0 + q0 + 2 * t, qmax = len.q - 1 - ib;
                    const int lo[2] = {imin[0] - ib, imin[1] - ib};
                    const int hi[2] = {min(imax[0] - ib, qmax), min(imax[1] - ib, qmax)};
                    const float* l2w = l2 + q0 + 2 * t;
                    masked_p<T>(s, p.scale_log2, lo, hi, mask,
                                sdpa::mask_offset(p, bi, h, ib, jw), 8 * (int)p.m_sj, (int)p.m_si,
                                mask_kind, [&](int f, int r) { return l2w[8 * f + (r & 1)]; });
                }
                const bool drop = p.drop_threshold != 0;
                unsigned kept = 0;
                if (drop) {  // warp-uniform
                    const unsigned long long e0 =
                        (((unsigned long long)bi * p.hq + h) * p.sq + m0 + q0 + 2 * t) *
                        (unsigned long long)p.skv;
                    const unsigned long long e_col[2] = {e0, e0 + p.skv};
                    kept = sdpa::drop_bits_keys_in_rows<NFM>(p, sdpa::stream_offset(p), e_col, jw,
                                                             lane, p.skv % 4 == 0);
                }
    #pragma unroll
                for (int f = 0; f < NFM; ++f)
    #pragma unroll
                    for (int r = 0; r < 4; ++r) {
                        const int col = q0 + 8 * f + 2 * t + (r & 1);
                        const int i = m0 + col, j = jw + 8 * (r >> 1);
                        float d = dp[f][r];
                        const float pr = s[f][r];
                        if (drop) {
                            const float fac = (kept >> (4 * f + r)) & 1u ? p.drop_scale : 0.0f;
                            d *= fac;
                            s[f][r] = pr * fac;
                        }
                        d = pr * (d - dl[col]);
                        dp[f][r] = d;
                        if (write_dmask && i < p.sq && j < p.skv)
                            dmask[(((long long)bi * p.hq + h) * p.sq + i) * p.skv + j] = d;
                    }
            } else {
                // P = exp2(S scale_log2 - lse2), then zero outside causal / window / lengths
                // on boundary tiles only; dS = P (dP - delta). s becomes P, dp becomes dS.
                const float* l2w = l2 + q0 + 2 * t;
                const float* dlw = dl + q0 + 2 * t;
#pragma unroll
                for (int f = 0; f < NFM; ++f) {
                    const float2 lf = *reinterpret_cast<const float2*>(l2w + 8 * f);
#pragma unroll
                    for (int r = 0; r < 4; ++r)
                        s[f][r] =
                            cl::math::exp2_ftz(s[f][r] * p.scale_log2 - (r & 1 ? lf.y : lf.x));
                }
                if (!tile_full(p, len, shift, sdpa::kMaskNone, m0, BM, n0, BN)) {
                    const int ib = m0 + q0 + 2 * t;  // i = ib + 8 f + (r & 1)
                    const int lo[2] = {ib - imin[0], ib - imin[1]};
                    const int hi[2] = {imax[0] - ib, imax[1] - ib};
#pragma unroll
                    for (int f = 0; f < NFM; ++f)
#pragma unroll
                        for (int r = 0; r < 4; ++r) {
                            const int c = 8 * f + (r & 1), hf = r >> 1;
                            if (lo[hf] < -c || hi[hf] < c) s[f][r] = 0.0f;
                        }
                }
#pragma unroll
                for (int f = 0; f < NFM; ++f) {
                    const float2 df = *reinterpret_cast<const float2*>(dlw + 8 * f);
#pragma unroll
                    for (int r = 0; r < 4; ++r)
                        dp[f][r] = s[f][r] * (dp[f][r] - (r & 1 ? df.y : df.x));
                }
            }

            // dV += (P drop)^T dO, dK += dS^T Q (the scale is applied at the end): from the
            // registers when a warp holds all BM queries of its keys, else through shared.
            T* dSs = sm + DS_OFF;
            if (WD == 1) {
                mma_reg_b<T, QW / 16, NFD, D>(dv_acc, s, dOs, kv_a);
                mma_reg_b<T, QW / 16, NFD, D>(dk_acc, dp, Qs, kv_a);
                if (dq_atomic) {
                    store_t(dSs, dp, 16 * kw + g, q0 + 2 * t);
                    __syncthreads();
                }
            } else {
                store_t(sm + P_OFF, s, 16 * kw + g, q0 + 2 * t);
                store_t(dSs, dp, 16 * kw + g, q0 + 2 * t);
                __syncthreads();
                mma_ab<T, BM / 16, NFD, BM, D>(dv_acc, sm + P_OFF + 16 * kw * BM, pt_a, dOs, qo_t);
                mma_ab<T, BM / 16, NFD, BM, D>(dk_acc, dSs + 16 * kw * BM, pt_a, Qs, qo_t);
            }
            if (QSTAGES == 1 && it + 1 < n_items) {
                // One stage: refill it once every warp is done with Q, dO, lse2, delta; the
                // load runs during the dQ MMAs (which read only dS and K).
                __syncthreads();
                load_item(0, nxt_h, nxt_mt * BM);
                cl::mma::cp_async_commit();
            }
            // dQ (BM x D) += dS K from the shared dS^T tile, by the dQ warp tiling.
            if (dq_atomic) dq_tile(dSs, Ks, dq_accum, p, len, bi, h, m0, warp, lane);
            cur_h = nxt_h;
            cur_mt = nxt_mt;
        }
        cl::mma::cp_async_wait<0>();

        store_kv(dk, dk_acc, p.k_sb * bi + p.k_sh * hk, p.k_ss, p.d, p.scale, n0 + 16 * kw, c0,
                 len, p, lane);
        store_kv(dv, dv_acc, p.v_sb * bi + p.v_sh * hk, p.v_ss, p.dv, 1.0f, n0 + 16 * kw, c0,
                 len, p, lane);
        if (GENERAL && write_dmask) zero_dmask(dmask, p, bi, h0, n0, mt_begin * BM, mt_end * BM);
    }

    __device__ static void dq_tile(const T* dSs, const T* Ks, float* dq_accum,
                                   const SdpaParams& p, sdpa::Lengths len, int bi, int h, int m0,
                                   int warp, int lane) {
        constexpr int MF = DQ_ROWS / 16, NF = DQ_COLS / 8;
        const int r0 = (warp % QM) * DQ_ROWS, c0 = (warp / QM) * DQ_COLS;
        // dS^T read as a k-major A (.trans: b_lanes at column r0), K as a k-major B.
        const LaneOff<BM> ds_t = b_lanes<BM>(lane, r0 / 8);
        const LaneOff<D> k_t = a_lanes<D>(lane, c0 / 8);
        float acc[MF][NF][4];
#pragma unroll
        for (int mi = 0; mi < MF; ++mi)
#pragma unroll
            for (int f = 0; f < NF; ++f)
#pragma unroll
                for (int r = 0; r < 4; ++r) acc[mi][f][r] = 0.0f;
#pragma unroll
        for (int ks = 0; ks < BN / 16; ++ks) {
            unsigned a[MF][4];
#pragma unroll
            for (int mi = 0; mi < MF; ++mi) ldmatrix_trans<4>(a[mi], dSs + ds_t(16 * ks, 2 * mi));
#pragma unroll
            for (int np = 0; np < NF / 2; ++np) {
                unsigned r[4];
                ldmatrix_trans<4>(r, Ks + k_t(16 * ks, 2 * np));
                const unsigned b0[2] = {r[0], r[1]}, b1[2] = {r[2], r[3]};
#pragma unroll
                for (int mi = 0; mi < MF; ++mi) {
                    cl::mma::mma_m16n8k16<T>(acc[mi][2 * np], a[mi], b0, acc[mi][2 * np]);
                    cl::mma::mma_m16n8k16<T>(acc[mi][2 * np + 1], a[mi], b1,
                                             acc[mi][2 * np + 1]);
                }
            }
        }
        // Two adjacent columns per atomic (c even, d a multiple of 8: both or neither < d).
        const int g = lane >> 2, t = lane & 3;
        // dq_accum rows are D floats (columns past d get zeros: K's are zero-filled), so
        // a row is one pointer plus immediates.
        const int i0 = m0 + r0 + g;
        float* base = dq_accum + (((long long)bi * p.hq + h) * p.sq + i0) * D + c0 + 2 * t;
#pragma unroll
        for (int mi = 0; mi < MF; ++mi)
#pragma unroll
            for (int hf = 0; hf < 2; ++hf) {
                const int ro = 16 * mi + 8 * hf;
                if (i0 + ro >= len.q) continue;
#pragma unroll
                for (int f = 0; f < NF; ++f)
                    atomic_add2(base + ro * D + 8 * f, acc[mi][f][2 * hf], acc[mi][f][2 * hf + 1]);
            }
    }

    // C fragments (16 rows from row0, columns col0 + 8 f + ...) as 16-bit pairs into a
    // swizzled [BN][BM] tile (row0: this lane's row g; col0: its column 2t).
    __device__ static void store_t(T* tile, const float (&c)[NFM][4], int row0, int col0) {
#pragma unroll
        for (int f = 0; f < NFM; ++f) {
            *reinterpret_cast<unsigned*>(tile + at<BM>(row0, col0 + 8 * f)) =
                pack<T>(c[f][0], c[f][1]);
            *reinterpret_cast<unsigned*>(tile + at<BM>(row0 + 8, col0 + 8 * f)) =
                pack<T>(c[f][2], c[f][3]);
        }
    }

    // Rows j0 + g (+8) of dK or dV, columns c0..: scale * acc, zero past lengths_kv.
    __device__ static void store_kv(T* out, const float (&acc)[NFD][4], long long base,
                                    long long row_stride, int cols, float scale, int j0, int c0,
                                    sdpa::Lengths len, const SdpaParams& p, int lane) {
        const int g = lane >> 2, t = lane & 3;
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int j = j0 + g + 8 * half;
            if (j >= p.skv) continue;
            const float sc = j < len.kv ? scale : 0.0f;
            T* row = out + base + (long long)j * row_stride;
#pragma unroll
            for (int f = 0; f < NFD; ++f) {
                const int c = c0 + 8 * f + 2 * t;
                if (c < cols)
                    *reinterpret_cast<unsigned*>(row + c) =
                        pack<T>(acc[f][2 * half] * sc, acc[f][2 * half + 1] * sc);
            }
        }
    }

    // dmask = 0 at the rows of [0, sq) this block's tiles did not visit (keys n0..).
    __device__ static void zero_dmask(float* dmask, const SdpaParams& p, int bi, int h0, int n0,
                                      int vis_lo, int vis_hi) {
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
        for (int gi = 0; gi < p.group; ++gi) {
            float* base = dmask + ((long long)bi * p.hq + h0 + gi) * p.sq * p.skv;
            for (int i = warp; i < p.sq; i += W) {
                if (i >= vis_lo && i < vis_hi) continue;
                for (int c = lane; c < BN; c += 32)
                    if (n0 + c < p.skv) base[(long long)i * p.skv + n0 + c] = 0.0f;
            }
        }
    }
};

// ------------------------------------------------------------------ dQ without atomics
// Block: queries [m0, m0 + BQ) of one (batch, q head), BQ = BN (BN / 16 warps of 16 rows);
// key tiles of BK = BM keys, K and V double-buffered. D = 256 (WIDE): BQ = 2 BN queries x
// BK = BM / 2 keys (Q, dO and two K / V stages: 132 KB, fits sm_80) and WC = 2 warps per 16
// rows: each computes S, dP for half the tile's keys and dQ for half the head dim (64
// accumulators, not 128), dS going through a shared [BQ][BK] tile.
template <typename T, int D, int BM, int BN, int W, bool GENERAL>
struct Dq {
    enum {
        WIDE = D > 128,
        BQ = WIDE ? 2 * BN : BN,
        BK = WIDE ? BM / 2 : BM,
        WQ = BQ / 16,     // warps along the queries (16 rows each) ...
        WC = WIDE ? 2 : 1,  // ... times warps sharing them (keys of S, columns of dQ)
        THREADS = WQ * WC * 32,
        BKW = BK / WC,    // keys of S / dP per warp
        NFK = BKW / 8,
        NFD = D / WC / 8,  // n8 tiles of dQ per warp
        Q_OFF = 0,
        DO_OFF = BQ * D,
        K_OFF = 2 * BQ * D,
        V_OFF = K_OFF + 2 * BK * D,
        DS_OFF = V_OFF + 2 * BK * D,
        SMEM_BYTES = (DS_OFF + (WC > 1 ? BQ * BK : 0)) * 2,
    };
    static_assert(BKW >= 16 && BK % 16 == 0, "S: at least 16 keys per warp");

    // dQ (16 rows x D / WC columns from c0) += dS K: dS from the registers (WC = 1) or the
    // shared tile (every warp's keys; dSs at this warp's rows).
    __device__ static void add_dq(float (&acc)[NFD][4], const float (&ds)[NFK][4], T* dSw,
                                  const T* Ks, const LaneOff<D>& k_t, int lane) {
        if constexpr (WC == 1) {
            mma_reg_b<T, BK / 16, NFD, D>(acc, ds, Ks, k_t);
        } else {
            const int g = lane >> 2, t = lane & 3, col0 = (threadIdx.x >> 5) / WQ * BKW + 2 * t;
#pragma unroll
            for (int f = 0; f < NFK; ++f) {
                *reinterpret_cast<unsigned*>(dSw + at<BK>(g, col0 + 8 * f)) =
                    pack<T>(ds[f][0], ds[f][1]);
                *reinterpret_cast<unsigned*>(dSw + at<BK>(g + 8, col0 + 8 * f)) =
                    pack<T>(ds[f][2], ds[f][3]);
            }
            __syncthreads();  // the other warp's keys of these rows
            mma_ab<T, BK / 16, NFD, BK, D>(acc, dSw, a_lanes<BK>(lane), Ks, k_t);
        }
    }
    // This warp's Q and dO rows as A fragments in registers for the whole loop (D = 128
    // would need 64 more registers: read from shared every tile).
    static constexpr bool QO_REGS = D <= 64;

    __device__ static void go(const T* __restrict__ q, const T* __restrict__ k,
                              const T* __restrict__ v, const T* __restrict__ dout,
                              const float* __restrict__ lse2, T* __restrict__ dq, const void* mask,
                              const int* lengths_q, const int* lengths_kv, const SdpaParams& p,
                              const float* __restrict__ delta, int mask_kind) {
        DYNAMIC_SHARED(T, sm);
        const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31;
        const int g = lane >> 2, t = lane & 3;
        const int wq = warp % WQ, wc = warp / WQ;  // rows 16 wq.., keys BKW wc.., columns c0..
        const int c0 = wc * (D / WC);
        const int m0 = blockIdx.x * BQ;
        const int bi = blockIdx.y / p.hq, h = blockIdx.y - bi * p.hq;
        const int hk = h / p.group;
        const sdpa::Lengths len = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
        const int shift = p.align_br ? len.kv - len.q : 0;

        // Keys seen by rows [m0, min(m0 + BQ, len.q)): from the first row's lo to the last's hi.
        int j_lo = 0, j_hi = 0;
        const int last = min(m0 + BQ, len.q) - 1;
        if (last >= m0) {
            j_lo = sdpa::key_range(p, len, m0).lo;
            j_hi = sdpa::key_range(p, len, last).hi;
        }
        const int nt_begin = j_lo / BK;
        const int nt_end = j_hi > j_lo ? (j_hi + BK - 1) / BK : nt_begin;

        const T* kb = k + bi * p.k_sb + hk * p.k_sh;
        const T* vb = v + bi * p.v_sb + hk * p.v_sh;
        T* Qs = sm + Q_OFF;
        T* dOs = sm + DO_OFF;
        load_tile<T, BQ, D, THREADS>(Qs, q + bi * p.q_sb + h * p.q_sh, p.q_ss, m0, len.q, p.d);
        load_tile<T, BQ, D, THREADS>(dOs, dout + bi * p.o_sb + h * p.o_sh, p.o_ss, m0, len.q,
                                     p.dv);
        if (nt_begin < nt_end) {
            load_tile<T, BK, D, THREADS>(sm + K_OFF, kb, p.k_ss, nt_begin * BK, len.kv, p.d);
            load_tile<T, BK, D, THREADS>(sm + V_OFF, vb, p.v_ss, nt_begin * BK, len.kv, p.dv);
        }
        cl::mma::cp_async_commit();

        // This thread's rows i0 = m0 + 16 wq + g and i0 + 8.
        const int i0 = m0 + 16 * wq + g;
        const long long row0 = ((long long)bi * p.hq + h) * p.sq;
        float l2[2], dl[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int i = i0 + 8 * half;
            l2[half] = i < p.sq ? lse2[row0 + i] : INFINITY;
            dl[half] = i < p.sq ? delta[row0 + i] : 0.0f;
        }

        float acc[NFD][4];
#pragma unroll
        for (int f = 0; f < NFD; ++f)
#pragma unroll
            for (int r = 0; r < 4; ++r) acc[f][r] = 0.0f;

        // Lane offsets: Q / dO as A and K / V as B of S and dP, K as the k-major B of dQ.
        const LaneOff<D> q_a = a_lanes<D>(lane), k_b = b_lanes<D>(lane);
        const LaneOff<D> k_t = a_lanes<D>(lane, c0 / 8);
        const T* Qw = Qs + 16 * wq * D;
        const T* dOw = dOs + 16 * wq * D;
        T* dSw = sm + DS_OFF + 16 * wq * BK;
        // Boundary tiles (the fast path's, and the general path's masked ones): row i0 (+8)
        // keeps keys jmin <= j <= jmax (none past lengths_q).
        int jmin[2], jmax[2];
#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const sdpa::KeyRange kr = sdpa::key_range(p, len, i0 + 8 * half);
            jmin[half] = kr.lo;
            jmax[half] = kr.hi - 1;
        }

        unsigned qf[QO_REGS ? D / 16 : 1][4], of[QO_REGS ? D / 16 : 1][4];
        if (QO_REGS && nt_begin < nt_end) {
            cl::mma::cp_async_wait<0>();
            __syncthreads();
#pragma unroll
            for (int ks = 0; ks < (QO_REGS ? D / 16 : 0); ++ks) {
                ldmatrix<4>(qf[ks], Qw + q_a(0, 2 * ks));
                ldmatrix<4>(of[ks], dOw + q_a(0, 2 * ks));
            }
        }

        for (int nt = nt_begin; nt < nt_end; ++nt) {
            const int stage = (nt - nt_begin) & 1;
            cl::mma::cp_async_wait<0>();
            __syncthreads();  // tile nt landed; every warp is done with the other stage
            if (nt + 1 < nt_end) {
                const int so = (stage ^ 1) * BK * D;
                load_tile<T, BK, D, THREADS>(sm + K_OFF + so, kb, p.k_ss, (nt + 1) * BK, len.kv,
                                             p.d);
                load_tile<T, BK, D, THREADS>(sm + V_OFF + so, vb, p.v_ss, (nt + 1) * BK, len.kv,
                                             p.dv);
            }
            cl::mma::cp_async_commit();
            const T* Ks = sm + K_OFF + stage * BK * D;
            const T* Vs = sm + V_OFF + stage * BK * D;
            const int n0 = nt * BK;
            // This warp's keys of S / dP: nw.. (K / V rows BKW wc..).
            const int nw = n0 + BKW * wc;
            const T* Kw = Ks + BKW * wc * D;
            const T* Vw = Vs + BKW * wc * D;

            float s[NFK][4], dp[NFK][4];
#pragma unroll
            for (int f = 0; f < NFK; ++f)
#pragma unroll
                for (int r = 0; r < 4; ++r) s[f][r] = dp[f][r] = 0.0f;
            if constexpr (QO_REGS)
                mma_rabt<T, D / 16, NFK, D>(s, qf, Kw, k_b);
            else
                mma_abt<T, D / 16, NFK, D, D>(s, Qw, q_a, Kw, k_b);
            // dP = dO V^T: right after S, except on the general path's masked tiles, where it
            // follows P (the mask loads then run without dP's registers live: 3 blocks per
            // SM kept at head dim 32).
            auto dp_mma = [&] {
                if constexpr (QO_REGS)
                    mma_rabt<T, D / 16, NFK, D>(dp, of, Vw, k_b);
                else
                    mma_abt<T, D / 16, NFK, D, D>(dp, dOw, q_a, Vw, k_b);
            };

            if constexpr (!GENERAL) {
                dp_mma();
                // P = exp2(S scale_log2 - lse2), zeroed outside causal / window / lengths on
                // boundary tiles only; dS = P (dP - delta) into dp.
#pragma unroll
                for (int f = 0; f < NFK; ++f)
#pragma unroll
                    for (int r = 0; r < 4; ++r)
                        s[f][r] = cl::math::exp2_ftz(s[f][r] * p.scale_log2 - l2[r >> 1]);
                if (!tile_full(p, len, shift, sdpa::kMaskNone, m0, BQ, n0, BK)) {
                    const int jb = nw + 2 * t;  // j = jb + 8 f + (r & 1)
                    const int lo[2] = {jb - jmin[0], jb - jmin[1]};
                    const int hi[2] = {jmax[0] - jb, jmax[1] - jb};
#pragma unroll
                    for (int f = 0; f < NFK; ++f)
#pragma unroll
                        for (int r = 0; r < 4; ++r) {
                            const int c = 8 * f + (r & 1), hf = r >> 1;
                            if (lo[hf] < -c || hi[hf] < c) s[f][r] = 0.0f;
                        }
                }
#pragma unroll
                for (int f = 0; f < NFK; ++f)
#pragma unroll
                    for (int r = 0; r < 4; ++r) dp[f][r] = s[f][r] * (dp[f][r] - dl[r >> 1]);
                add_dq(acc, dp, dSw, Ks, k_t, lane);
                continue;
            }

            if (tile_full(p, len, shift, mask_kind, m0, BQ, n0, BK)) {
                dp_mma();
#pragma unroll
                for (int f = 0; f < NFK; ++f)
#pragma unroll
                    for (int r = 0; r < 4; ++r)
                        s[f][r] = cl::math::exp2_ftz(s[f][r] * p.scale_log2 - l2[r >> 1]);
            } else {
                // Lines: rows i0, i0 + 8; positions: keys j = jb + c.
                const int jb = nw + 2 * t;
                const int lo[2] = {jmin[0] - jb, jmin[1] - jb};
                const int hi[2] = {jmax[0] - jb, jmax[1] - jb};
                masked_p<T>(s, p.scale_log2, lo, hi, mask, sdpa::mask_offset(p, bi, h, i0, jb),
                            8 * (int)p.m_si, (int)p.m_sj, mask_kind,
                            [&](int f, int r) { return l2[r >> 1]; });
                dp_mma();
            }
            const bool drop = p.drop_threshold != 0;  // warp-uniform
            unsigned kept = 0;
            if (drop) {
                const unsigned long long e_row[2] = {(unsigned long long)(row0 + i0) * p.skv,
                                                     (unsigned long long)(row0 + i0 + 8) * p.skv};
                kept = sdpa::drop_bits_keys_in_cols<NFK>(p, sdpa::stream_offset(p), e_row, nw, t,
                                                         p.skv % 4 == 0);
            }
#pragma unroll
            for (int f = 0; f < NFK; ++f)
#pragma unroll
                for (int r = 0; r < 4; ++r) {
                    float d = dp[f][r];
                    if (drop) d *= (kept >> (4 * f + r)) & 1u ? p.drop_scale : 0.0f;
                    dp[f][r] = s[f][r] * (d - dl[r >> 1]);
                }
            add_dq(acc, dp, dSw, Ks, k_t, lane);
        }
        cl::mma::cp_async_wait<0>();

#pragma unroll
        for (int half = 0; half < 2; ++half) {
            const int i = i0 + 8 * half;
            if (i >= p.sq) continue;
            const float sc = i < len.q ? p.scale : 0.0f;
            T* row = dq + bi * p.q_sb + h * p.q_sh + (long long)i * p.q_ss;
#pragma unroll
            for (int f = 0; f < NFD; ++f) {
                const int c = c0 + 8 * f + 2 * t;
                if (c < p.d)
                    *reinterpret_cast<unsigned*>(row + c) =
                        pack<T>(acc[f][2 * half] * sc, acc[f][2 * half + 1] * sc);
            }
        }
    }
};

}  // namespace fbwd

// ------------------------------------------------------------------ kernels
// delta = rowsum(dout * o) in fp32, 8 lanes per row (16-byte loads), and lse2 (lse_log2);
// rows past lengths_q give 0 and +inf. zero_dq: also zeroes the row's dq_ld floats of
// dq_accum (the atomic solver's).
template <typename T>
__global__ void __launch_bounds__(256)
    sdpa_flash_bwd_pre(const T* __restrict__ o, const T* __restrict__ dout, const int* lengths_q,
                       const int* lengths_kv, SdpaParams p, const float* __restrict__ lse,
                       float* __restrict__ delta, float* __restrict__ lse2,
                       float* __restrict__ dq_accum, int zero_dq, int dq_ld) {
    const long long rows = (long long)p.b * p.hq * p.sq;
    const long long row = (long long)blockIdx.x * 32 + (threadIdx.x >> 3);
    const int sub = threadIdx.x & 7;
    float acc = 0.0f;
    bool valid = false;
    if (row < rows) {
        const int i = (int)(row % p.sq);
        const long long bh = row / p.sq;
        const int h = (int)(bh % p.hq), bi = (int)(bh / p.hq);
        const sdpa::Lengths len = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
        valid = i < len.q;
        if (valid) {
            const long long off = bi * p.o_sb + h * p.o_sh + (long long)i * p.o_ss;
            for (int c = 8 * sub; c < p.dv; c += 64) {
                const uint4 a = *reinterpret_cast<const uint4*>(o + off + c);
                const uint4 b = *reinterpret_cast<const uint4*>(dout + off + c);
                T av[8], bv[8];
                memcpy(av, &a, 16);
                memcpy(bv, &b, 16);
#pragma unroll
                for (int e = 0; e < 8; ++e) acc += cl::to_float(av[e]) * cl::to_float(bv[e]);
            }
        }
        if (zero_dq)
            for (int c = sub; c < dq_ld; c += 8) dq_accum[row * dq_ld + c] = 0.0f;
    }
#pragma unroll
    for (int m = 4; m > 0; m >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, m);
    if (sub == 0 && row < rows) {
        delta[row] = acc;
        lse2[row] = fbwd::lse_log2(lse, row, valid);
    }
}

template <typename T, int D, int BM, int BN, int W, bool GENERAL>
__global__ void __launch_bounds__(W * 32)
    sdpa_flash_bwd_main(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                        const T* __restrict__ dout, const float* __restrict__ lse2,
                        T* __restrict__ dk, T* __restrict__ dv, float* __restrict__ dmask,
                        const void* mask, const int* lengths_q, const int* lengths_kv,
                        SdpaParams p, const float* __restrict__ delta,
                        float* __restrict__ dq_accum, int mask_kind, int dq_atomic,
                        int write_dmask) {
    fbwd::Main<T, D, BM, BN, W, GENERAL>::go(q, k, v, dout, lse2, dk, dv, dmask, mask, lengths_q,
                                             lengths_kv, p, delta, dq_accum, mask_kind,
                                             dq_atomic, write_dmask);
}

// dq = scale * dq_accum (fp32 (b, hq, sq) rows of dq_ld >= d floats) in dq's dtype and
// strides, one warp per row; rows past lengths_q are 0.
template <typename T>
__global__ void __launch_bounds__(256)
    sdpa_flash_bwd_dq_convert(const float* __restrict__ dq_accum, T* __restrict__ dq,
                              const int* lengths_q, const int* lengths_kv, SdpaParams p,
                              int dq_ld) {
    const long long rows = (long long)p.b * p.hq * p.sq;
    const long long row = (long long)blockIdx.x * 8 + (threadIdx.x >> 5);
    if (row >= rows) return;
    const int lane = threadIdx.x & 31;
    const int i = (int)(row % p.sq);
    const long long bh = row / p.sq;
    const int h = (int)(bh % p.hq), bi = (int)(bh / p.hq);
    const sdpa::Lengths len = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
    const float sc = i < len.q ? p.scale : 0.0f;
    const float* src = dq_accum + row * dq_ld;
    T* dst = dq + bi * p.q_sb + h * p.q_sh + (long long)i * p.q_ss;
    for (int c = 2 * lane; c < p.d; c += 64)
        *reinterpret_cast<unsigned*>(dst + c) = fbwd::pack<T>(src[c] * sc, src[c + 1] * sc);
}

template <typename T, int D, int BM, int BN, int W, bool GENERAL>
__global__ void __launch_bounds__(fbwd::Dq<T, D, BM, BN, W, GENERAL>::THREADS)
    sdpa_flash_bwd_dq(const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
                      const T* __restrict__ dout, const float* __restrict__ lse2,
                      T* __restrict__ dq, const void* mask, const int* lengths_q,
                      const int* lengths_kv, SdpaParams p, const float* __restrict__ delta,
                      int mask_kind) {
    fbwd::Dq<T, D, BM, BN, W, GENERAL>::go(q, k, v, dout, lse2, dq, mask, lengths_q, lengths_kv,
                                           p, delta, mask_kind);
}
