// flash_fp32.cu — FlashAttention on CUDA cores: fp32 math (FFMA) for fp32, fp16 and bf16
// storage, any head dims 1..256 (d and dv zero-padded to the tile's HD in shared memory;
// 4-element vector loads where the dims, strides and pointers allow, scalar otherwise).
// Semantics: attention_common.cuh; building blocks and thread ownership:
// flash_fp32_tile.cuh.
//
// Kernels (T = float / __half / __nv_bfloat16; readable names in the solver):
//   flash_fp32_fwd<T, BM, BN, HD>       forward: a block owns BM query rows of one (b, hq);
//                                       Q stays in shared memory, K/V tiles of BN keys pass
//                                       through it; online softmax in the exp2 domain;
//                                       fully masked KV tiles are never visited.
//   flash_fp32_bwd_delta<T>             backward preprocess: delta = rowsum(dout * o).
//   flash_fp32_bwd_dkdv<T, BM, BN, HD>  dK, dV of BN keys of one (b, hkv): loops over the
//                                       GQA group's query heads and the query tiles that
//                                       see the keys; no atomics.
//   flash_fp32_bwd_dq<T, BM, BN, HD>    dQ of BM query rows (and the additive mask's
//                                       gradient dmask, written once per entry).
// Variants: HD (the padded head dim: 32, 64, 128, 256) with its tile (BM x BN). The mask
// kind (none / bool / additive) and dropout (drop_threshold != 0) are run-time, uniform
// tests outside the FFMA loops: one kernel per tile serves every problem.
#include "attention/flash_fp32_tile.cuh"

using namespace sdpa_fp32;

template <typename T, int BM, int BN, int HD>
__global__ void __launch_bounds__(kThreads) flash_fp32_fwd(
    // pointers
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v, T* __restrict__ o,
    float* __restrict__ lse, const void* __restrict__ mask, const int* __restrict__ lengths_q,
    const int* __restrict__ lengths_kv,
    // sizes, strides, masking
    const SdpaParams p, const int mask_kind) {
    using Tile = FwdTile<T, BM, BN, HD>;
    constexpr int RM = Tile::RM, CN = Tile::CN, LD = Tile::LD;
    DYNAMIC_SHARED(float, smem);
    const int bi = blockIdx.y / p.hq, h = blockIdx.y % p.hq, hk = h / p.group;
    const int m0 = blockIdx.x * BM;
    const int ty = threadIdx.x / kTC, tx = threadIdx.x % kTC;
    const sdpa::Lengths L = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
    const T* qb = q + bi * p.q_sb + h * p.q_sh;
    load_tile<T, BM, HD, LD>(smem, min(BM, p.sq - m0), p.d, vec_ok(qb, p.q_ss, p.d),
                             Strided<T>{qb + m0 * p.q_ss, p.q_ss});

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
    t.run(p, smem, k + bi * p.k_sb + hk * p.k_sh, v + bi * p.v_sb + hk * p.v_sh, mask, mask_kind,
          bi, L, rh, ri, rlo, rhi, br.lo / BN * BN, br.hi, rows_in ? br.lo_max : 1, rows_in ? br.hi_min : 0);

    // Epilogue: o = O / l (0 for rows that keep nothing), lse in natural log.
    T* ob = o + bi * p.o_sb + h * p.o_sh;
    const bool vec_o = vec_ok(ob, p.o_ss, p.dv);
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        const int r = ri[i];
        if (r >= p.sq) continue;
        const float inv = t.l[i] > 0.f ? 1.f / t.l[i] : 0.f;
        T* orow = ob + r * p.o_ss;
#pragma unroll
        for (int c = 0; c < CN; c += 4) {
            const int col = col_of(c, tx);
            const float4 val = make_float4(t.o[i][c] * inv, t.o[i][c + 1] * inv,
                                           t.o[i][c + 2] * inv, t.o[i][c + 3] * inv);
            if (vec_o) {
                if (col < p.dv) store4(orow + col, val);
            } else {
                if (col < p.dv) orow[col] = cl::from_float<T>(val.x);
                if (col + 1 < p.dv) orow[col + 1] = cl::from_float<T>(val.y);
                if (col + 2 < p.dv) orow[col + 2] = cl::from_float<T>(val.z);
                if (col + 3 < p.dv) orow[col + 3] = cl::from_float<T>(val.w);
            }
        }
        if (tx == 0)
            lse[(long long)blockIdx.y * p.sq + r] =
                t.l[i] > 0.f ? (t.m[i] + log2f(t.l[i])) * kLn2 : -INFINITY;
    }
}

// ------------------------------------------------------------------ backward
// delta[bh, i] = sum_c dout[c] * o[c] (= sum_j P dP, the softmax Jacobian's row term);
// 0 past lengths_q. One warp per row.
template <typename T>
__global__ void __launch_bounds__(kThreads) flash_fp32_bwd_delta(
    const T* __restrict__ o, const T* __restrict__ dout, const int* __restrict__ lengths_q,
    const int* __restrict__ lengths_kv, float* __restrict__ delta, const SdpaParams p) {
    const long long row = (long long)blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (long long)p.b * p.hq * p.sq) return;  // whole warps
    const int i = (int)(row % p.sq), h = (int)(row / p.sq % p.hq), bi = (int)(row / p.sq / p.hq);
    const long long off = bi * p.o_sb + h * p.o_sh + i * p.o_ss;
    float sum = 0.f;
    for (int c = lane; c < p.dv; c += 32) sum += cl::to_float(o[off + c]) * cl::to_float(dout[off + c]);
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    if (lane == 0) delta[row] = i < sdpa::lengths_of(p, lengths_q, lengths_kv, bi).q ? sum : 0.f;
}

// Writes RM rows x CN columns of acc * mul (rows row0 + ty + 16 i below nrows, columns
// below ncols) to base + r * ss.
template <typename T, int RM, int CN>
__device__ __forceinline__ void store_rows(T* base, long long ss, int row0, int nrows, int ncols,
                                           const float (&acc)[RM][CN], float mul, int ty, int tx) {
    const bool vec = vec_ok(base, ss, ncols);
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        const int r = row0 + ty + kTR * i;
        if (r >= nrows) continue;
        T* row = base + r * ss;
#pragma unroll
        for (int c = 0; c < CN; c += 4) {
            const int col = col_of(c, tx);
            const float4 val = make_float4(acc[i][c] * mul, acc[i][c + 1] * mul,
                                           acc[i][c + 2] * mul, acc[i][c + 3] * mul);
            if (vec) {
                if (col < ncols) store4(row + col, val);
            } else {
                if (col < ncols) row[col] = cl::from_float<T>(val.x);
                if (col + 1 < ncols) row[col + 1] = cl::from_float<T>(val.y);
                if (col + 2 < ncols) row[col + 2] = cl::from_float<T>(val.z);
                if (col + 3 < ncols) row[col + 3] = cl::from_float<T>(val.w);
            }
        }
    }
}

// P (undropped, from the forward's lse) and dS = P * (dP * keep - delta) of one element;
// returns P * keep (what multiplies dout in dV).
template <typename T>
__device__ __forceinline__ float grad_element(const SdpaParams& p, const void* mask,
                                              int mask_kind, bool full, sdpa::KeyRange kr,
                                              int bi, int h, int i, int key, float s,
                                              float dp, float lse_log2, float delta, float& ds) {
    float x = s * p.scale_log2, add = 0.f;
    bool keep = lse_log2 != -INFINITY;
    if (!full) {
        keep = keep && key >= kr.lo && key < kr.hi;
        if (keep && mask_kind) keep = mask_keep<T>(p, mask, mask_kind, bi, h, i, key, add);
    }
    const float pv = keep ? exp2f(x + add - lse_log2) : 0.f;
    const float f = p.drop_threshold != 0 ? sdpa::dropout_factor(p, bi, h, i, key) : 1.f;
    ds = pv * (dp * f - delta);
    return pv * f;
}

// dK, dV of BN keys of one (b, hkv): key rows row(i), query columns key(j) of the
// transposed score tile S^T = K Q^T.
template <typename T, int BM, int BN, int HD>
__global__ void __launch_bounds__(kThreads) flash_fp32_bwd_dkdv(
    // pointers
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    const T* __restrict__ o, const T* __restrict__ dout, const float* __restrict__ lse,
    T* __restrict__ dq, T* __restrict__ dk, T* __restrict__ dv, float* __restrict__ dmask,
    const void* __restrict__ mask, const int* __restrict__ lengths_q,
    const int* __restrict__ lengths_kv,
    // sizes, strides, masking; the workspace's delta
    const SdpaParams p, const int mask_kind, const float* __restrict__ delta) {
    constexpr int RM = BN / kTR, RN = BM / kTC, CN = HD / kTC, LD = HD + 4, LDT = BM + 4;
    static_assert(BN % kTR == 0 && BM % kTC == 0 && BM % 4 == 0 && HD % 32 == 0, "tile shape");
    DYNAMIC_SHARED(float, smem);
    float* Ks = smem;
    float* Vs = Ks + BN * LD;
    float* Qs = Vs + BN * LD;
    float* dOs = Qs + BM * LD;
    float* Pt = dOs + BM * LD;
    float* dSt = Pt + BN * LDT;
    float* lse_s = dSt + BN * LDT;
    float* delta_s = lse_s + BM;
    const int bi = blockIdx.y / p.hkv, hk = blockIdx.y % p.hkv;
    const int j0 = blockIdx.x * BN;
    const int ty = threadIdx.x / kTC, tx = threadIdx.x % kTC;
    const sdpa::Lengths L = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
    const T* kb = k + bi * p.k_sb + hk * p.k_sh;
    const T* vb = v + bi * p.v_sb + hk * p.v_sh;
    const int nk = max(0, min(BN, L.kv - j0));
    load_tile<T, BN, HD, LD>(Ks, nk, p.d, vec_ok(kb, p.k_ss, p.d), Strided<T>{kb + j0 * p.k_ss, p.k_ss});
    load_tile<T, BN, HD, LD>(Vs, nk, p.dv, vec_ok(vb, p.v_ss, p.dv), Strided<T>{vb + j0 * p.v_ss, p.v_ss});

    float dK[RM][CN], dV[RM][CN];
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int c = 0; c < CN; ++c) dK[i][c] = dV[i][c] = 0.f;

    // The query rows whose key range meets [j0, j1): bounds nondecreasing in the row.
    const int j1 = min(j0 + BN, L.kv);
    int i_begin = 0, i_end = 0;
    if (j0 < j1) {
        const int shift = p.align_br ? L.kv - L.q : 0;
        i_begin = p.right >= 0 ? max(0, j0 - shift - p.right) : 0;
        i_end = p.left >= 0 ? min(L.q, j1 - shift + p.left) : L.q;
    }
    for (int hh = 0; hh < p.group; ++hh) {
        const int h = hk * p.group + hh;
        const long long bh = (long long)bi * p.hq + h;
        const T* qb = q + bi * p.q_sb + h * p.q_sh;
        const T* dob = dout + bi * p.o_sb + h * p.o_sh;
        const bool vec_q = vec_ok(qb, p.q_ss, p.d), vec_do = vec_ok(dob, p.o_ss, p.dv);
        for (int i0 = i_begin / BM * BM; i0 < i_end; i0 += BM) {
            const int nq = min(BM, p.sq - i0);
            __syncthreads();  // the previous tile's readers are done
            load_tile<T, BM, HD, LD>(Qs, nq, p.d, vec_q, Strided<T>{qb + i0 * p.q_ss, p.q_ss});
            load_tile<T, BM, HD, LD>(dOs, nq, p.dv, vec_do, Strided<T>{dob + i0 * p.o_ss, p.o_ss});
            for (int r = threadIdx.x; r < BM; r += kThreads) {
                const int i = i0 + r;
                const bool in = i < L.q;
                lse_s[r] = in ? lse[bh * p.sq + i] * kLog2e : -INFINITY;
                delta_s[r] = in ? delta[bh * p.sq + i] : 0.f;
            }
            __syncthreads();
            float s[RM][RN], dp[RM][RN];
            dot_tile<RM, RN, HD, LD, LD>(s, Ks, Qs, ty, tx);
            dot_tile<RM, RN, HD, LD, LD>(dp, Vs, dOs, ty, tx);
            const bool full = mask_kind == 0 && i0 + BM <= L.q && j0 + BN <= L.kv &&
                              sdpa::key_range(p, L, i0 + BM - 1).lo <= j0 &&
                              sdpa::key_range(p, L, i0).hi >= j0 + BN;
#pragma unroll
            for (int j = 0; j < RN; ++j) {
                const int qc = tx + kTC * j, i = i0 + qc;
                const sdpa::KeyRange kr = sdpa::key_range(p, L, i);
                const float lrow = lse_s[qc], drow = delta_s[qc];
#pragma unroll
                for (int r = 0; r < RM; ++r) {
                    const int kr_row = ty + kTR * r;
                    float ds;
                    const float pd = grad_element<T>(p, mask, mask_kind, full, kr, bi, h, i,
                                                     j0 + kr_row, s[r][j], dp[r][j], lrow, drow, ds);
                    Pt[kr_row * LDT + qc] = pd;
                    dSt[kr_row * LDT + qc] = ds;
                }
            }
            __syncthreads();
            acc_tile<RM, CN, BM, LDT, LD>(dV, Pt, dOs, ty, tx);
            acc_tile<RM, CN, BM, LDT, LD>(dK, dSt, Qs, ty, tx);
        }
    }
    store_rows<T, RM, CN>(dk + bi * p.k_sb + hk * p.k_sh, p.k_ss, j0, p.skv, p.d, dK, p.scale, ty, tx);
    store_rows<T, RM, CN>(dv + bi * p.v_sb + hk * p.v_sh, p.v_ss, j0, p.skv, p.dv, dV, 1.f, ty, tx);
}

// dQ of BM query rows of one (b, hq), and dmask (the additive mask's gradient, dS at kept
// entries, 0 elsewhere: every entry of the block's rows written once).
template <typename T, int BM, int BN, int HD>
__global__ void __launch_bounds__(kThreads) flash_fp32_bwd_dq(
    // pointers
    const T* __restrict__ q, const T* __restrict__ k, const T* __restrict__ v,
    const T* __restrict__ o, const T* __restrict__ dout, const float* __restrict__ lse,
    T* __restrict__ dq, T* __restrict__ dk, T* __restrict__ dv, float* __restrict__ dmask,
    const void* __restrict__ mask, const int* __restrict__ lengths_q,
    const int* __restrict__ lengths_kv,
    // sizes, strides, masking; the workspace's delta
    const SdpaParams p, const int mask_kind, const float* __restrict__ delta) {
    constexpr int RM = BM / kTR, RN = BN / kTC, CN = HD / kTC, LD = HD + 4, LDP = BN + 4;
    static_assert(BM % kTR == 0 && BN % kTC == 0 && BN % 4 == 0 && HD % 32 == 0, "tile shape");
    DYNAMIC_SHARED(float, smem);
    float* Qs = smem;
    float* dOs = Qs + BM * LD;
    float* Ks = dOs + BM * LD;
    float* Vs = Ks + BN * LD;
    float* dSs = Vs + BN * LD;
    const int bi = blockIdx.y / p.hq, h = blockIdx.y % p.hq, hk = h / p.group;
    const long long bh = blockIdx.y;
    const int m0 = blockIdx.x * BM;
    const int ty = threadIdx.x / kTC, tx = threadIdx.x % kTC;
    const sdpa::Lengths L = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
    const T* qb = q + bi * p.q_sb + h * p.q_sh;
    const T* dob = dout + bi * p.o_sb + h * p.o_sh;
    const T* kb = k + bi * p.k_sb + hk * p.k_sh;
    const T* vb = v + bi * p.v_sb + hk * p.v_sh;
    const int nq = min(BM, p.sq - m0);
    load_tile<T, BM, HD, LD>(Qs, nq, p.d, vec_ok(qb, p.q_ss, p.d), Strided<T>{qb + m0 * p.q_ss, p.q_ss});
    load_tile<T, BM, HD, LD>(dOs, nq, p.dv, vec_ok(dob, p.o_ss, p.dv), Strided<T>{dob + m0 * p.o_ss, p.o_ss});
    const bool vec_k = vec_ok(kb, p.k_ss, p.d), vec_v = vec_ok(vb, p.v_ss, p.dv);
    const bool dmask_on = mask_kind == sdpa::kMaskAdditive;

    int ri[RM];
    sdpa::KeyRange kr[RM];
    float lse_r[RM], delta_r[RM];
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        ri[i] = m0 + ty + kTR * i;
        kr[i] = sdpa::key_range(p, L, ri[i]);
        const bool in = ri[i] < L.q;
        lse_r[i] = in ? lse[bh * p.sq + ri[i]] * kLog2e : -INFINITY;
        delta_r[i] = in ? delta[bh * p.sq + ri[i]] : 0.f;
    }
    const BlockRange br = block_range(p, L, m0, m0 + BM - 1);
    const bool rows_in = m0 + BM <= L.q && mask_kind == 0;
    const int full_lo = rows_in ? br.lo_max : 1, full_hi = rows_in ? br.hi_min : 0;
    const int kv_begin = br.lo / BN * BN;

    float dQ[RM][CN];
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int c = 0; c < CN; ++c) dQ[i][c] = 0.f;
    int written_end = kv_begin;
    for (int j0 = kv_begin; j0 < br.hi; j0 += BN) {
        const int nk = min(BN, L.kv - j0);
        __syncthreads();
        load_tile<T, BN, HD, LD>(Ks, nk, p.d, vec_k, Strided<T>{kb + j0 * p.k_ss, p.k_ss});
        load_tile<T, BN, HD, LD>(Vs, nk, p.dv, vec_v, Strided<T>{vb + j0 * p.v_ss, p.v_ss});
        __syncthreads();
        float s[RM][RN], dp[RM][RN];
        dot_tile<RM, RN, HD, LD, LD>(s, Qs, Ks, ty, tx);
        dot_tile<RM, RN, HD, LD, LD>(dp, dOs, Vs, ty, tx);
        const bool full = j0 >= full_lo && j0 + BN <= full_hi;
#pragma unroll
        for (int i = 0; i < RM; ++i)
#pragma unroll
            for (int j = 0; j < RN; ++j) {
                const int key = j0 + tx + kTC * j;
                float ds;
                grad_element<T>(p, mask, mask_kind, full, kr[i], bi, h, ri[i], key, s[i][j],
                                dp[i][j], lse_r[i], delta_r[i], ds);
                if (dmask_on && ri[i] < p.sq && key < p.skv)
                    dmask[(bh * p.sq + ri[i]) * p.skv + key] = ds;
                dSs[(ty + kTR * i) * LDP + tx + kTC * j] = ds;
            }
        __syncthreads();
        acc_tile<RM, CN, BN, LDP, LD>(dQ, dSs, Ks, ty, tx);
        written_end = j0 + BN;
    }
    store_rows<T, RM, CN>(dq + bi * p.q_sb + h * p.q_sh, p.q_ss, m0, p.sq, p.d, dQ, p.scale, ty, tx);
    if (dmask_on) {  // zeros where no tile went
        const int cols = p.skv - min(written_end, p.skv) + kv_begin;
        for (long long idx = threadIdx.x; idx < (long long)nq * cols; idx += kThreads) {
            const int r = (int)(idx / cols), c = (int)(idx % cols);
            const int key = c < kv_begin ? c : written_end + (c - kv_begin);
            dmask[(bh * p.sq + m0 + r) * p.skv + key] = 0.f;
        }
    }
}
