// flash_fp32.cu — FlashAttention on CUDA cores: fp32 math (FFMA) for fp32, fp16 and bf16
// storage (A = float), double math (DFMA, double softmax statistics, lse and delta in
// double) for double storage (A = double); any head dims 1..256 (d and dv zero-padded to
// the tile's HD in shared memory; 4-element vector loads where the dims, strides and
// pointers allow, scalar otherwise).
// Semantics: attention_common.cuh; building blocks and thread ownership:
// flash_fp32_tile.cuh.
//
// Kernels (A: float or double; readable names in the solver carry the dtype too):
//   flash_fp32_fwd<BM, BN, HD, A>    forward: a block owns BM query rows of one (b, hq); Q
//                                    stays in shared memory, K/V tiles of BN keys pass
//                                    through it; online softmax in the exp2 domain; fully
//                                    masked KV tiles are never visited.
//   flash_fp32_bwd_delta<A>          backward preprocess: delta = rowsum(dout * o).
//   flash_fp32_bwd_dkdv<BM, BN, HD, A>  dK, dV of BN keys of one (b, hkv): loops over the GQA
//                                    group's query heads and the query tiles that see the
//                                    keys; no atomics.
//   flash_fp32_bwd_dq<BM, BN, HD, A>    dQ of BM query rows, and the additive mask's gradient
//                                    dmask (written once per entry).
// Variants: HD (the padded head dim: 64, 128, 256) with its tile (BM x BN), and A (the
// A = double kernels, in their own module, take double storage only, with tiles of their
// own: registers and shared memory are twice as large per element). Run-time, uniform
// arguments outside the FMA loops: the storage dtype (kF32 / kF16 / kBF16), the
// mask kind (none / bool / additive) and dropout (drop_threshold != 0): one kernel per
// tile serves every problem, which keeps the NVRTC work of the CI check small.
#include "attention/flash_fp32_tile.cuh"

using namespace sdpa_fp32;

template <int BM, int BN, int HD, typename A = float>
__global__ void __launch_bounds__(kThreads, 2) flash_fp32_fwd(
    // pointers (the storage dtype is `dtype`)
    const void* __restrict__ q, const void* __restrict__ k, const void* __restrict__ v,
    void* __restrict__ o, A* __restrict__ lse, const void* __restrict__ mask,
    const int* __restrict__ lengths_q, const int* __restrict__ lengths_kv,
    // sizes, strides, masking
    const SdpaParamsT<A> p, const int dtype, const int mask_kind) {
    using Tile = FwdTile<BM, BN, HD, A>;
    constexpr int RM = Tile::RM, LD = Tile::LD;
    DYNAMIC_SHARED(A, smem);
    const int bi = blockIdx.y / p.hq, h = blockIdx.y % p.hq, hk = h / p.group;
    const int m0 = blockIdx.x * BM;
    const int ty = threadIdx.x / kTC, tx = threadIdx.x % kTC;
    const sdpa::Lengths L = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
    const long long q_off = bi * p.q_sb + h * p.q_sh + m0 * p.q_ss;
    load_tile<BM, HD, LD>(smem, q, dtype, min(BM, p.sq - m0), p.d,
                          Io<A>::vec_ok(q, q_off, p.q_ss, p.d, dtype), Strided{q_off, p.q_ss});

    int rh[RM], ri[RM], rlo[RM], rhi[RM];
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        rh[i] = h;
        ri[i] = m0 + ty + kTR * i;
        const sdpa::KeyRange kr = sdpa::key_range(p, L, ri[i]);
        rlo[i] = kr.lo;
        rhi[i] = kr.hi;
    }
    const BlockRange br = block_range(p, L, m0, m0 + BM - 1);
    const bool rows_in = m0 + BM <= L.q && mask_kind == 0;
    Tile t;
    t.run(p, smem, k, bi * p.k_sb + hk * p.k_sh, v, bi * p.v_sb + hk * p.v_sh, dtype, mask,
          mask_kind, bi, L, rh, ri, rlo, rhi, br.lo / BN * BN, br.hi, rows_in ? br.lo_max : 1,
          rows_in ? br.hi_min : 0);

    // Epilogue: o = O / l (0 for rows that keep nothing), lse in natural log.
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        const A inv = t.l[i] > A(0) ? A(1) / t.l[i] : A(0);
#pragma unroll
        for (int c = 0; c < Tile::CN; ++c) t.o[i][c] *= inv;
        if (tx == 0 && ri[i] < p.sq)
            lse[(long long)blockIdx.y * p.sq + ri[i]] =
                t.l[i] > A(0) ? (t.m[i] + cl::math::log2(t.l[i])) * sdpa::Ln2<A>::value : -INFINITY;
    }
    store_rows(o, dtype, bi * p.o_sb + h * p.o_sh, p.o_ss, m0, p.sq, p.dv, t.o, A(1), ty, tx);
}

// ------------------------------------------------------------------ backward
// (delta and grad_element: flash_fp32_tile.cuh, shared with the fp64 tensor-core kernels)

// Column halves of the dK/dV kernel (grid z): 2 for double accumulators of head dim 256.
template <typename A>
__host__ __device__ constexpr int dkdv_column_split(int hd) {
    return sizeof(A) == 8 && hd == 256 ? 2 : 1;
}

// dK, dV of BN keys of one (b, hkv): key rows row(i), query columns key(j) of the
// transposed score tile S^T = K Q^T.
template <int BM, int BN, int HD, typename A = float>
__global__ void __launch_bounds__(kThreads, 2) flash_fp32_bwd_dkdv(
    // pointers (the storage dtype is `dtype`)
    const void* __restrict__ q, const void* __restrict__ k, const void* __restrict__ v,
    const void* __restrict__ o, const void* __restrict__ dout, const A* __restrict__ lse,
    void* __restrict__ dq, void* __restrict__ dk, void* __restrict__ dv,
    A* __restrict__ dmask, const void* __restrict__ mask, const int* __restrict__ lengths_q,
    const int* __restrict__ lengths_kv,
    // sizes, strides, masking; the workspace's delta
    const SdpaParamsT<A> p, const int dtype, const int mask_kind, const A* __restrict__ delta) {
    // Double accumulators of head dim 256 (dK and dV: 128 doubles a thread) spill: those
    // blocks split the columns of dK and dV in two halves (blockIdx.z; the solver launches
    // two), each recomputing S and dP over the whole head dim.
    constexpr int SPLIT = dkdv_column_split<A>(HD);
    constexpr int RM = BN / kTR, RN = BM / kTC, CN = HD / kTC / SPLIT, LD = HD + 4, LDT = BM + 4;
    static_assert(BN % kTR == 0 && BM % kTC == 0 && BM % 4 == 0 && HD % 32 == 0, "tile shape");
    const int c0 = SPLIT > 1 ? blockIdx.z * (HD / SPLIT) : 0;  // first dK / dV column
    DYNAMIC_SHARED(A, smem);
    A* Ks = smem;
    A* Vs = Ks + BN * LD;
    A* Qs = Vs + BN * LD;
    A* dOs = Qs + BM * LD;
    A* Pt = dOs + BM * LD;
    A* dSt = Pt + BN * LDT;
    A* lse_s = dSt + BN * LDT;
    A* delta_s = lse_s + BM;
    const int bi = blockIdx.y / p.hkv, hk = blockIdx.y % p.hkv;
    const int j0 = blockIdx.x * BN;
    const int ty = threadIdx.x / kTC, tx = threadIdx.x % kTC;
    const sdpa::Lengths L = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
    const long long k_off = bi * p.k_sb + hk * p.k_sh, v_off = bi * p.v_sb + hk * p.v_sh;
    const int nk = max(0, min(BN, L.kv - j0));
    load_tile<BN, HD, LD>(Ks, k, dtype, nk, p.d, Io<A>::vec_ok(k, k_off, p.k_ss, p.d, dtype),
                          Strided{k_off + j0 * p.k_ss, p.k_ss});
    load_tile<BN, HD, LD>(Vs, v, dtype, nk, p.dv, Io<A>::vec_ok(v, v_off, p.v_ss, p.dv, dtype),
                          Strided{v_off + j0 * p.v_ss, p.v_ss});

    A dK[RM][CN], dV[RM][CN];
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int c = 0; c < CN; ++c) dK[i][c] = dV[i][c] = A(0);

    const RowSpan span = query_span(p, L, j0, min(j0 + BN, L.kv));
    for (int hh = 0; hh < p.group; ++hh) {
        const int h = hk * p.group + hh;
        const long long bh = (long long)bi * p.hq + h;
        const long long q_off = bi * p.q_sb + h * p.q_sh, do_off = bi * p.o_sb + h * p.o_sh;
        const bool vec_q = Io<A>::vec_ok(q, q_off, p.q_ss, p.d, dtype);
        const bool vec_do = Io<A>::vec_ok(dout, do_off, p.o_ss, p.dv, dtype);
        for (int i0 = span.begin / BM * BM; i0 < span.end; i0 += BM) {
            const int nq = min(BM, p.sq - i0);
            __syncthreads();  // the previous tile's readers are done
            load_tile<BM, HD, LD>(Qs, q, dtype, nq, p.d, vec_q,
                                  Strided{q_off + i0 * p.q_ss, p.q_ss});
            load_tile<BM, HD, LD>(dOs, dout, dtype, nq, p.dv, vec_do,
                                  Strided{do_off + i0 * p.o_ss, p.o_ss});
            for (int r = threadIdx.x; r < BM; r += kThreads) {
                const int i = i0 + r;
                const bool in = i < L.q;
                lse_s[r] = in ? sdpa::log2_sat(lse[bh * p.sq + i]) : -INFINITY;
                delta_s[r] = in ? delta[bh * p.sq + i] : A(0);
            }
            __syncthreads();
            A s[RM][RN], dp[RM][RN];
            dot_tile<RM, RN, HD, LD, LD>(s, Ks, Qs, ty, tx);
            dot_tile<RM, RN, HD, LD, LD>(dp, Vs, dOs, ty, tx);
            const bool full = pair_full(p, L, mask_kind, i0, BM, j0, BN);
#pragma unroll
            for (int j = 0; j < RN; ++j) {
                const int qc = tx + kTC * j, i = i0 + qc;
                const sdpa::KeyRange kr = sdpa::key_range(p, L, i);
                const A lrow = lse_s[qc], drow = delta_s[qc];
                // Query i's mask over this thread's keys (mask_row; float), the addends in
                // its slots of Pt until P replaces them.
                constexpr bool ROW_MASK = RowMasked<A>::value;
                A* slot = Pt + ty * LDT + qc;
                unsigned mkeep = ~0u;
                if (ROW_MASK && !full && mask_kind)
                    mkeep = mask_row<RM, kTR>(p, mask, mask_kind, dtype, bi, h, i, j0 + ty,
                                              kr.lo, kr.hi, slot, kTR * LDT);
#pragma unroll
                for (int r = 0; r < RM; ++r) {
                    const int kt = ty + kTR * r;  // key within the tile
                    A ds;
                    if (ROW_MASK) {
                        const bool read = !full && mask_kind;
                        const A f =
                            p.drop_threshold != 0 ? drop_factor(p, bi, h, i, j0 + kt) : A(1);
                        Pt[kt * LDT + qc] = grad_element_read(
                            p, full, kr, (mkeep >> r) & 1u, read ? slot[kTR * LDT * r] : A(0),
                            f, j0 + kt, s[r][j], dp[r][j], lrow, drow, ds);
                    } else {
                        Pt[kt * LDT + qc] = grad_element(p, mask, mask_kind, dtype, full, kr, bi,
                                                         h, i, j0 + kt, s[r][j], dp[r][j], lrow,
                                                         drow, ds);
                    }
                    dSt[kt * LDT + qc] = ds;
                }
            }
            __syncthreads();
            acc_tile<RM, CN, BM, LDT, LD>(dV, Pt, dOs + c0, ty, tx);
            acc_tile<RM, CN, BM, LDT, LD>(dK, dSt, Qs + c0, ty, tx);
        }
    }
    store_rows(dk, dtype, k_off + c0, p.k_ss, j0, p.skv, p.d - c0, dK, p.scale, ty, tx);
    store_rows(dv, dtype, v_off + c0, p.v_ss, j0, p.skv, p.dv - c0, dV, A(1), ty, tx);
}

// dQ of BM query rows of one (b, hq), and dmask (the additive mask's gradient: dS at kept
// entries, 0 elsewhere; every entry of the block's rows written once).
template <int BM, int BN, int HD, typename A = float>
__global__ void __launch_bounds__(kThreads, 2) flash_fp32_bwd_dq(
    // pointers (the storage dtype is `dtype`)
    const void* __restrict__ q, const void* __restrict__ k, const void* __restrict__ v,
    const void* __restrict__ o, const void* __restrict__ dout, const A* __restrict__ lse,
    void* __restrict__ dq, void* __restrict__ dk, void* __restrict__ dv,
    A* __restrict__ dmask, const void* __restrict__ mask, const int* __restrict__ lengths_q,
    const int* __restrict__ lengths_kv,
    // sizes, strides, masking; the workspace's delta
    const SdpaParamsT<A> p, const int dtype, const int mask_kind, const A* __restrict__ delta) {
    constexpr int RM = BM / kTR, RN = BN / kTC, CN = HD / kTC, LD = HD + 4, LDP = BN + 4;
    static_assert(BM % kTR == 0 && BN % kTC == 0 && BN % 4 == 0 && HD % 32 == 0, "tile shape");
    DYNAMIC_SHARED(A, smem);
    A* Qs = smem;
    A* dOs = Qs + BM * LD;
    A* Ks = dOs + BM * LD;
    A* Vs = Ks + BN * LD;
    A* dSs = Vs + BN * LD;
    const int bi = blockIdx.y / p.hq, h = blockIdx.y % p.hq, hk = h / p.group;
    const long long bh = blockIdx.y;
    const int m0 = blockIdx.x * BM;
    const int ty = threadIdx.x / kTC, tx = threadIdx.x % kTC;
    const sdpa::Lengths L = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
    const long long q_off = bi * p.q_sb + h * p.q_sh, do_off = bi * p.o_sb + h * p.o_sh;
    const long long k_off = bi * p.k_sb + hk * p.k_sh, v_off = bi * p.v_sb + hk * p.v_sh;
    const int nq = min(BM, p.sq - m0);
    load_tile<BM, HD, LD>(Qs, q, dtype, nq, p.d, Io<A>::vec_ok(q, q_off, p.q_ss, p.d, dtype),
                          Strided{q_off + m0 * p.q_ss, p.q_ss});
    load_tile<BM, HD, LD>(dOs, dout, dtype, nq, p.dv,
                          Io<A>::vec_ok(dout, do_off, p.o_ss, p.dv, dtype),
                          Strided{do_off + m0 * p.o_ss, p.o_ss});
    const bool vec_k = Io<A>::vec_ok(k, k_off, p.k_ss, p.d, dtype);
    const bool vec_v = Io<A>::vec_ok(v, v_off, p.v_ss, p.dv, dtype);
    const bool dmask_on = mask_kind == sdpa::kMaskAdditive;

    int ri[RM];
    GradRow<A> gr[RM];
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        ri[i] = m0 + ty + kTR * i;
        gr[i] = grad_row(p, L, lse, delta, bh, ri[i]);
    }
    const BlockRange br = block_range(p, L, m0, m0 + BM - 1);
    const bool rows_in = m0 + BM <= L.q && mask_kind == 0;
    const int full_lo = rows_in ? br.lo_max : 1, full_hi = rows_in ? br.hi_min : 0;
    const int kv_begin = br.lo / BN * BN;

    A dQ[RM][CN];
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int c = 0; c < CN; ++c) dQ[i][c] = A(0);
    int written_end = kv_begin;
    for (int j0 = kv_begin; j0 < br.hi; j0 += BN) {
        const int nk = min(BN, L.kv - j0);
        __syncthreads();
        load_tile<BN, HD, LD>(Ks, k, dtype, nk, p.d, vec_k, Strided{k_off + j0 * p.k_ss, p.k_ss});
        load_tile<BN, HD, LD>(Vs, v, dtype, nk, p.dv, vec_v, Strided{v_off + j0 * p.v_ss, p.v_ss});
        __syncthreads();
        A s[RM][RN], dp[RM][RN];
        dot_tile<RM, RN, HD, LD, LD>(s, Qs, Ks, ty, tx);
        dot_tile<RM, RN, HD, LD, LD>(dp, dOs, Vs, ty, tx);
        const bool full = j0 >= full_lo && j0 + BN <= full_hi;
#pragma unroll
        for (int i = 0; i < RM; ++i) {
            // Row i's mask over this thread's keys (mask_row; float), the addends in its
            // slots of dSs until dS replaces them.
            constexpr bool ROW_MASK = RowMasked<A>::value;
            A* slot = dSs + (ty + kTR * i) * LDP + tx;
            unsigned mkeep = ~0u, dbits = ~0u;
            if (ROW_MASK && !full && mask_kind)
                mkeep = mask_row<RN, kTC>(p, mask, mask_kind, dtype, bi, h, ri[i], j0 + tx,
                                          gr[i].kr.lo, gr[i].kr.hi, slot, kTC);
            if (ROW_MASK && p.drop_threshold != 0)  // (warp-uniform: drop_row shuffles)
                dbits = drop_row<RN>(p, (unsigned long long)(bh * p.sq + ri[i]) * p.skv,
                                     j0 + tx, tx, p.skv % 4 == 0);
#pragma unroll
            for (int j = 0; j < RN; ++j) {
                const int key = j0 + tx + kTC * j;
                A ds;
                if (ROW_MASK) {
                    const bool read = !full && mask_kind;
                    const A f = p.drop_threshold == 0 ? A(1)
                                : (dbits >> j) & 1u ? p.drop_scale : A(0);
                    grad_element_read(p, full, gr[i].kr, (mkeep >> j) & 1u,
                                      read ? slot[kTC * j] : A(0), f, key, s[i][j], dp[i][j],
                                      gr[i].lse_log2, gr[i].delta, ds);
                } else {
                    grad_element(p, mask, mask_kind, dtype, full, gr[i].kr, bi, h, ri[i], key,
                                 s[i][j], dp[i][j], gr[i].lse_log2, gr[i].delta, ds);
                }
                if (dmask_on && ri[i] < p.sq && key < p.skv)
                    dmask[(bh * p.sq + ri[i]) * p.skv + key] = ds;
                slot[kTC * j] = ds;
            }
        }
        __syncthreads();
        acc_tile<RM, CN, BN, LDP, LD>(dQ, dSs, Ks, ty, tx);
        written_end = j0 + BN;
    }
    store_rows(dq, dtype, q_off, p.q_ss, m0, p.sq, p.d, dQ, p.scale, ty, tx);
    if (dmask_on) zero_dmask_outside(dmask, p, bh, m0, nq, kv_begin, written_end);
}
