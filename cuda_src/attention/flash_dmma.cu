// flash_dmma.cu — FlashAttention for double storage on the fp64 tensor cores (mma.sync
// m8n8k4 .f64, sm_80+; common/mma.cuh), forward and backward: every product of the
// algorithm a DMMA, the softmax in double (exp2 and log2 in double), lse in double. Semantics:
// attention_common.cuh; tile loading, masks, dropout and block ranges: flash_fp32_tile.cuh
// (the CUDA-core kernels' building blocks, A = double).
//
// Kernels: flash_dmma_fwd<HD, MT, NT> (below), flash_dmma_bwd_dkdv<HD, KT, NQ> and
// flash_dmma_bwd_dq<HD, MT, NT> (the backward section), after flash_fp32_bwd_delta<double>.
//
// flash_dmma_fwd<HD, MT, NT>
//   a block of 4 warps owns BM = 4 * MT * 8 query rows of one (b, hq); each warp owns MT
//   m8 row tiles (8 MT rows) and the whole key tile of BN = 8 NT keys; K and V tiles pass
//   through shared memory (synchronous loads, as the CUDA-core kernel's), Q stays there.
//   HD is the padded head dim (64, 128, 256): d and dv are zero-padded to it.
// Thread ownership (g = lane >> 2, t = lane & 3, the m8n8k4 fragment layout):
//   S tile (mt, nt): lane holds S[row g][keys 8 nt + 2t, 8 nt + 2t + 1] (C fragment);
//   O tile (mt, ct): O[row g][columns 8 ct + 2t, + 1]. Every value a lane holds belongs to
//   its row g of each m tile, so the softmax statistics (m, l per row) and the rescaling
//   of O need no exchange; row reductions are two xor-shuffles over the row's 4 lanes.
// P V without shuffles: the lane's P[g][8 nt + 2t + e] (e = 0, 1) is the A fragment
//   element A[g][t] of a k4 step whose reduction index t stands for key 8 nt + 2t + e; B
//   is then V[8 nt + 2t + e][8 ct + g], read from shared memory at that permuted row (the
//   sum over keys does not care about their order).
// Shared memory (doubles): Qs [BM][HD + 4], Ks [BN][HD + 4], Vs [BN][HD + 2]. 64-bit loads
//   are served per half warp (lanes g = 0..3 or 4..7, t = 0..3): Q and K fragments read
//   (row g, column t): a pitch of 4 mod 16 doubles puts the 16 lanes on 16 distinct bank
//   pairs; V fragments read (row 2t (+ e), column g): a pitch of 2 mod 16 does.
#include "attention/flash_fp32_tile.cuh"
#include "common/mma.cuh"

using namespace sdpa_fp32;

namespace sdpa_dmma {

constexpr int kWarps = 4;

// acc[r][c] = sum over the head dim of X[r-th m8 tile row g][.] Y[c-th n8 tile row g][.]
// (cl::mma::dmma_rows from zero): pitch-LD tiles at xw / yw.
template <int R, int C, int KC, int LD>
__device__ __forceinline__ void dots(double (&acc)[R][C][2], const double* xw, const double* yw,
                                     int g, int t) {
#pragma unroll
    for (int r = 0; r < R; ++r)
#pragma unroll
        for (int c = 0; c < C; ++c) acc[r][c][0] = acc[r][c][1] = 0.0;
    cl::mma::dmma_rows<R, C, KC, LD>(acc, xw, 0, yw, 0, g, t);
}

// out[r][ct] += sum over the N n8 tiles' columns of frag[r][n] * Y[that column's row][8 ct
// + g]: the permuted reduction (frag element e of lane t <-> row 8 n + 2t + e of Y).
template <int R, int N, int CT, int LD>
__device__ __forceinline__ void accumulate_rows(double (&out)[R][CT][2],
                                                const double (&frag)[R][N][2], const double* Y,
                                                int g, int t) {
    const double* yb = Y + 2 * t * LD + g;
#pragma unroll
    for (int n = 0; n < N; ++n)
#pragma unroll
        for (int e = 0; e < 2; ++e) {
            const double* row = yb + (8 * n + e) * LD;
#pragma unroll
            for (int ct = 0; ct < CT; ++ct) {
                const double b = row[8 * ct];
#pragma unroll
                for (int r = 0; r < R; ++r)
                    cl::mma::mma_m8n8k4_f64(out[r][ct], frag[r][n][e], b, out[r][ct]);
            }
        }
}

// Rows row(r) (below nrows) of acc * mul, columns 8 ct + 2t (+ 1) below ncols, at element
// offsets off + row * ss of base; one 16-byte store per pair where aligned.
template <int R, int CT>
__device__ __forceinline__ void store_frag_rows(double* base, long long off, long long ss,
                                                const int (&row)[R], int nrows, int ncols,
                                                const double (&acc)[R][CT][2], double mul,
                                                int t) {
    const bool pair = (ncols & 1) == 0 && (ss & 1) == 0 &&
                      ((unsigned long long)(base + off) & 15) == 0;
#pragma unroll
    for (int r = 0; r < R; ++r) {
        if (row[r] >= nrows) continue;
        double* dst = base + off + row[r] * ss;
#pragma unroll
        for (int ct = 0; ct < CT; ++ct) {
            const int c = 8 * ct + 2 * t;
            const double a = acc[r][ct][0] * mul, b = acc[r][ct][1] * mul;
            if (pair && c < ncols) {
                *reinterpret_cast<double2*>(dst + c) = double2{a, b};
            } else {
                if (c < ncols) dst[c] = a;
                if (c + 1 < ncols) dst[c + 1] = b;
            }
        }
    }
}


template <int HD, int MT, int NT>
struct Fwd {
    enum {
        BM = kWarps * MT * 8, BN = NT * 8,
        LD = HD + 4, LDV = HD + 2,     // shared pitches (doubles): conflict-free fragments
        KC = HD / 4,                   // k4 steps of S = Q K^T
        CT = HD / 8,                   // n8 column tiles of O
        SMEM_DOUBLES = BM * LD + BN * LD + BN * LDV,
    };
    static_assert(kWarps * 32 == kThreads, "load_tile strides by the CUDA-core block size");
    static_assert(HD % 32 == 0 && MT >= 1 && NT >= 1, "tile shape");

    double o[MT][CT][2];
    double m[MT], l[MT];

    // Online softmax over keys [kv_begin, kv_end) (as sdpa_fp32::FwdTile::run): on return
    // o (unnormalized), m (log2 domain, -inf when nothing kept) and l (the undropped sum).
    __device__ __forceinline__ void run(const SdpaParamsT<double>& p, double* smem,
                                        const void* k, long long k_off, const void* v,
                                        long long v_off, const void* mask, int mask_kind,
                                        int bi, int h, sdpa::Lengths L, const int (&ri)[MT],
                                        const int (&rlo)[MT], const int (&rhi)[MT],
                                        int kv_begin, int kv_end, int full_lo, int full_hi) {
        const double* Qs = smem;
        double* Ks = smem + BM * LD;
        double* Vs = Ks + BN * LD;
        const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
        const double* Qw = Qs + warp * MT * 8 * LD;
        const bool vec_k = Io<double>::vec_ok(k, k_off, p.k_ss, p.d, kF64);
        const bool vec_v = Io<double>::vec_ok(v, v_off, p.v_ss, p.dv, kF64);
        const bool dropout = p.drop_threshold != 0;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt) {
            m[mt] = -INFINITY;
            l[mt] = 0.0;
#pragma unroll
            for (int ct = 0; ct < CT; ++ct) o[mt][ct][0] = o[mt][ct][1] = 0.0;
        }
        for (int j0 = kv_begin; j0 < kv_end; j0 += BN) {
            const int nk = min(BN, L.kv - j0);
            __syncthreads();  // the previous tile's readers of Ks and Vs are done
            load_tile<BN, HD, LD>(Ks, k, kF64, nk, p.d, vec_k,
                                  Strided{k_off + j0 * p.k_ss, p.k_ss});
            load_tile<BN, HD, LDV>(Vs, v, kF64, nk, p.dv, vec_v,
                                   Strided{v_off + j0 * p.v_ss, p.v_ss});
            __syncthreads();
            double s[MT][NT][2];
            dots<MT, NT, KC, LD>(s, Qw, Ks, g, t);  // S = Q K^T (raw dot products)
            const bool full = j0 >= full_lo && j0 + BN <= full_hi;
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) {
                double mx = -INFINITY;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        double x = s[mt][nt][e] * p.scale_log2;
                        if (!full) {
                            const int key = j0 + 8 * nt + 2 * t + e;
                            double add = 0.0;
                            bool keep = key >= rlo[mt] && key < rhi[mt];
                            if (keep && mask_kind)
                                keep = mask_keep(p, mask, mask_kind, kF64, bi, h, ri[mt], key,
                                                 add);
                            x = keep ? x + add : -INFINITY;
                        }
                        s[mt][nt][e] = x;
                        mx = cl::math::fmax(mx, x);
                    }
                mx = cl::math::fmax(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
                mx = cl::math::fmax(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
                const double m_new = cl::math::fmax(m[mt], mx);
                const double m_use = m_new == -INFINITY ? 0.0 : m_new;  // nothing kept yet
                const double alpha = cl::math::exp2(m[mt] - m_use);
                double sum = 0.0;
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                    for (int e = 0; e < 2; ++e) {
                        double pe = cl::math::exp2(s[mt][nt][e] - m_use);
                        sum += pe;
                        if (dropout)
                            pe *= drop_factor(p, bi, h, ri[mt], j0 + 8 * nt + 2 * t + e);
                        s[mt][nt][e] = pe;
                    }
                sum += __shfl_xor_sync(0xffffffffu, sum, 1);
                sum += __shfl_xor_sync(0xffffffffu, sum, 2);
                l[mt] = l[mt] * alpha + sum;
                m[mt] = m_new;
#pragma unroll
                for (int ct = 0; ct < CT; ++ct) {
                    o[mt][ct][0] *= alpha;
                    o[mt][ct][1] *= alpha;
                }
            }
            accumulate_rows<MT, NT, CT, LDV>(o, s, Vs, g, t);  // O += P V
        }
    }
};

// fp64 MMA exists from sm_80 (CL_MMA_SM80); older targets get a trapping body the solver
// never launches.
template <int HD, int MT, int NT>
__device__ __forceinline__ void fwd_body(const double* q, const double* k, const double* v,
                                         double* o, double* lse, const void* mask,
                                         const int* lengths_q, const int* lengths_kv,
                                         const SdpaParamsT<double>& p, int mask_kind) {
#if !CL_MMA_SM80
    __trap();
#else
    typedef Fwd<HD, MT, NT> F;
    DYNAMIC_SHARED(double, smem);
    const int bi = blockIdx.y / p.hq, h = blockIdx.y % p.hq, hk = h / p.group;
    const int m0 = blockIdx.x * F::BM;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const sdpa::Lengths L = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
    const long long q_off = bi * p.q_sb + h * p.q_sh + m0 * p.q_ss;
    load_tile<F::BM, HD, F::LD>(smem, q, kF64, min(F::BM, p.sq - m0), p.d,
                                Io<double>::vec_ok(q, q_off, p.q_ss, p.d, kF64),
                                Strided{q_off, p.q_ss});
    int ri[MT], rlo[MT], rhi[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        ri[mt] = m0 + (warp * MT + mt) * 8 + g;
        const sdpa::KeyRange kr = sdpa::key_range(p, L, ri[mt]);
        rlo[mt] = kr.lo;
        rhi[mt] = kr.hi;
    }
    const BlockRange br = block_range(p, L, m0, m0 + F::BM - 1);
    const bool rows_in = m0 + F::BM <= L.q && mask_kind == 0;
    F f;
    f.run(p, smem, k, bi * p.k_sb + hk * p.k_sh, v, bi * p.v_sb + hk * p.v_sh, mask, mask_kind,
          bi, h, L, ri, rlo, rhi, br.lo / F::BN * F::BN, br.hi, rows_in ? br.lo_max : 1,
          rows_in ? br.hi_min : 0);

    // Epilogue: o = O / l (0 for rows that keep nothing), lse in natural log.
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const double inv = f.l[mt] > 0.0 ? 1.0 / f.l[mt] : 0.0;
#pragma unroll
        for (int ct = 0; ct < F::CT; ++ct) {
            f.o[mt][ct][0] *= inv;
            f.o[mt][ct][1] *= inv;
        }
        if (t == 0 && ri[mt] < p.sq)
            lse[(long long)blockIdx.y * p.sq + ri[mt]] =
                f.l[mt] > 0.0 ? (f.m[mt] + cl::math::log2(f.l[mt])) * sdpa::Ln2<double>::value
                              : -INFINITY;
    }
    store_frag_rows<MT, F::CT>(o, bi * p.o_sb + h * p.o_sh, p.o_ss, ri, p.sq, p.dv, f.o, 1.0, t);
#endif
}


// ------------------------------------------------------------------ backward
// (delta = rowsum(dout * o) first: flash_fp32_bwd_delta<double>, flash_fp32_tile.cuh.)
//
// dK, dV (flash_dmma_bwd_dkdv<HD, KT, NQ>): a block owns BN = 4 * 8 KT keys of one
// (b, hkv), each warp KT m8 key tiles; it walks the GQA group's query heads and the query
// tiles of BQ = 8 NQ rows that see its keys. Per query tile the transposed tiles S^T = K Q^T
// and dP^T = V dO^T are DMMAs (A: K / V rows (key g, column t); B: Q / dO rows (query g,
// column t)), each element goes through grad_element (P * keep and dS), and dV += (P keep)^T
// dO, dK += dS^T Q take their A fragments straight from those registers with the forward's
// permuted reduction (B: dO / Q rows 2t + e, column g). No atomics.
// dQ (flash_dmma_bwd_dq<HD, MT, NT>): a block owns BM = 4 * 8 MT query rows of one (b, hq)
// and walks the key tiles that the rows see (as the forward): S = Q K^T, dP = dO V^T,
// dS, the additive mask's gradient (every entry of the block's rows written once), and
// dQ += dS K with the permuted reduction (B: K rows 2t + e, column g).
// Shared pitches: HD + 4 doubles for every tile (conflict-free (row g, column t) fragments;
// the (row 2t + e, column g) reads of the second products meet 2-way conflicts: no pitch
// serves both patterns of one tile).

template <int HD, int KT, int NQ>
struct DkDv {
    enum {
        BN = kWarps * KT * 8, BQ = NQ * 8, LD = HD + 4, KC = HD / 4, CT = HD / 8,
        SMEM_DOUBLES = 2 * BN * LD + 2 * BQ * LD,
    };
};

template <int HD, int MT, int NT>
struct Dq {
    enum {
        BM = kWarps * MT * 8, BN = NT * 8, LD = HD + 4, KC = HD / 4, CT = HD / 8,
        SMEM_DOUBLES = 2 * BM * LD + 2 * BN * LD,
    };
};

template <int HD, int KT, int NQ>
__device__ __forceinline__ void dkdv_body(const double* q, const double* k, const double* v,
                                          const double* dout, const double* lse, double* dk,
                                          double* dv, const void* mask, const int* lengths_q,
                                          const int* lengths_kv, const SdpaParamsT<double>& p,
                                          int mask_kind, const double* delta) {
#if !CL_MMA_SM80
    __trap();
#else
    typedef DkDv<HD, KT, NQ> F;
    constexpr int BN = F::BN, BQ = F::BQ, LD = F::LD;
    DYNAMIC_SHARED(double, smem);
    double* Ks = smem;
    double* Vs = Ks + BN * LD;
    double* Qs = Vs + BN * LD;
    double* dOs = Qs + BQ * LD;
    const int bi = blockIdx.y / p.hkv, hk = blockIdx.y % p.hkv;
    const int j0 = blockIdx.x * BN;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const sdpa::Lengths L = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
    const long long k_off = bi * p.k_sb + hk * p.k_sh, v_off = bi * p.v_sb + hk * p.v_sh;
    const int nk = max(0, min(BN, L.kv - j0));
    load_tile<BN, HD, LD>(Ks, k, kF64, nk, p.d, Io<double>::vec_ok(k, k_off, p.k_ss, p.d, kF64),
                          Strided{k_off + j0 * p.k_ss, p.k_ss});
    load_tile<BN, HD, LD>(Vs, v, kF64, nk, p.dv,
                          Io<double>::vec_ok(v, v_off, p.v_ss, p.dv, kF64),
                          Strided{v_off + j0 * p.v_ss, p.v_ss});
    const double* Kw = Ks + warp * KT * 8 * LD;
    const double* Vw = Vs + warp * KT * 8 * LD;
    int key[KT];
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) key[kt] = j0 + (warp * KT + kt) * 8 + g;

    double dK[KT][F::CT][2], dV[KT][F::CT][2];
#pragma unroll
    for (int kt = 0; kt < KT; ++kt)
#pragma unroll
        for (int ct = 0; ct < F::CT; ++ct) dK[kt][ct][0] = dK[kt][ct][1] = dV[kt][ct][0] =
            dV[kt][ct][1] = 0.0;

    const RowSpan span = query_span(p, L, j0, min(j0 + BN, L.kv));
    for (int hh = 0; hh < p.group; ++hh) {
        const int h = hk * p.group + hh;
        const long long bh = (long long)bi * p.hq + h;
        const long long q_off = bi * p.q_sb + h * p.q_sh, do_off = bi * p.o_sb + h * p.o_sh;
        const bool vec_q = Io<double>::vec_ok(q, q_off, p.q_ss, p.d, kF64);
        const bool vec_do = Io<double>::vec_ok(dout, do_off, p.o_ss, p.dv, kF64);
        for (int i0 = span.begin / BQ * BQ; i0 < span.end; i0 += BQ) {
            const int nq = min(BQ, p.sq - i0);
            __syncthreads();  // the previous tile's readers are done
            load_tile<BQ, HD, LD>(Qs, q, kF64, nq, p.d, vec_q,
                                  Strided{q_off + i0 * p.q_ss, p.q_ss});
            load_tile<BQ, HD, LD>(dOs, dout, kF64, nq, p.dv, vec_do,
                                  Strided{do_off + i0 * p.o_ss, p.o_ss});
            __syncthreads();
            double s[KT][NQ][2], dp[KT][NQ][2];
            dots<KT, NQ, F::KC, LD>(s, Kw, Qs, g, t);
            dots<KT, NQ, F::KC, LD>(dp, Vw, dOs, g, t);
            const bool full = pair_full(p, L, mask_kind, i0, BQ, j0, BN);
#pragma unroll
            for (int nq2 = 0; nq2 < NQ; ++nq2)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int i = i0 + 8 * nq2 + 2 * t + e;  // this element's query
                    const GradRow<double> gr = grad_row(p, L, lse, delta, bh, i);  // (cached)
#pragma unroll
                    for (int kt = 0; kt < KT; ++kt) {
                        double ds;
                        s[kt][nq2][e] = grad_element(p, mask, mask_kind, kF64, full, gr.kr, bi, h,
                                                     i, key[kt], s[kt][nq2][e], dp[kt][nq2][e],
                                                     gr.lse_log2, gr.delta, ds);
                        dp[kt][nq2][e] = ds;
                    }
                }
            accumulate_rows<KT, NQ, F::CT, LD>(dV, s, dOs, g, t);
            accumulate_rows<KT, NQ, F::CT, LD>(dK, dp, Qs, g, t);
        }
    }
    const int kb = j0 + warp * KT * 8 + g;
    int rows[KT];
#pragma unroll
    for (int kt = 0; kt < KT; ++kt) rows[kt] = kb + 8 * kt;
    store_frag_rows<KT, F::CT>(dk, k_off, p.k_ss, rows, p.skv, p.d, dK, p.scale, t);
    store_frag_rows<KT, F::CT>(dv, v_off, p.v_ss, rows, p.skv, p.dv, dV, 1.0, t);
#endif
}

template <int HD, int MT, int NT>
__device__ __forceinline__ void dq_body(const double* q, const double* k, const double* v,
                                        const double* dout, const double* lse, double* dq,
                                        double* dmask, const void* mask, const int* lengths_q,
                                        const int* lengths_kv, const SdpaParamsT<double>& p,
                                        int mask_kind, const double* delta) {
#if !CL_MMA_SM80
    __trap();
#else
    typedef Dq<HD, MT, NT> F;
    constexpr int BM = F::BM, BN = F::BN, LD = F::LD;
    DYNAMIC_SHARED(double, smem);
    double* Qs = smem;
    double* dOs = Qs + BM * LD;
    double* Ks = dOs + BM * LD;
    double* Vs = Ks + BN * LD;
    const int bi = blockIdx.y / p.hq, h = blockIdx.y % p.hq, hk = h / p.group;
    const long long bh = blockIdx.y;
    const int m0 = blockIdx.x * BM;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const sdpa::Lengths L = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);
    const long long q_off = bi * p.q_sb + h * p.q_sh, do_off = bi * p.o_sb + h * p.o_sh;
    const long long k_off = bi * p.k_sb + hk * p.k_sh, v_off = bi * p.v_sb + hk * p.v_sh;
    const int nq = min(BM, p.sq - m0);
    load_tile<BM, HD, LD>(Qs, q, kF64, nq, p.d, Io<double>::vec_ok(q, q_off, p.q_ss, p.d, kF64),
                          Strided{q_off + m0 * p.q_ss, p.q_ss});
    load_tile<BM, HD, LD>(dOs, dout, kF64, nq, p.dv,
                          Io<double>::vec_ok(dout, do_off, p.o_ss, p.dv, kF64),
                          Strided{do_off + m0 * p.o_ss, p.o_ss});
    const bool vec_k = Io<double>::vec_ok(k, k_off, p.k_ss, p.d, kF64);
    const bool vec_v = Io<double>::vec_ok(v, v_off, p.v_ss, p.dv, kF64);
    const bool dmask_on = mask_kind == sdpa::kMaskAdditive;
    const double* Qw = Qs + warp * MT * 8 * LD;
    const double* dOw = dOs + warp * MT * 8 * LD;

    int ri[MT];
    GradRow<double> gr[MT];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        ri[mt] = m0 + (warp * MT + mt) * 8 + g;
        gr[mt] = grad_row(p, L, lse, delta, bh, ri[mt]);
    }
    const BlockRange br = block_range(p, L, m0, m0 + BM - 1);
    const bool rows_in = m0 + BM <= L.q && mask_kind == 0;
    const int full_lo = rows_in ? br.lo_max : 1, full_hi = rows_in ? br.hi_min : 0;
    const int kv_begin = br.lo / BN * BN;

    double dQ[MT][F::CT][2];
#pragma unroll
    for (int mt = 0; mt < MT; ++mt)
#pragma unroll
        for (int ct = 0; ct < F::CT; ++ct) dQ[mt][ct][0] = dQ[mt][ct][1] = 0.0;
    int written_end = kv_begin;
    for (int j0 = kv_begin; j0 < br.hi; j0 += BN) {
        const int nk = min(BN, L.kv - j0);
        __syncthreads();
        load_tile<BN, HD, LD>(Ks, k, kF64, nk, p.d, vec_k, Strided{k_off + j0 * p.k_ss, p.k_ss});
        load_tile<BN, HD, LD>(Vs, v, kF64, nk, p.dv, vec_v, Strided{v_off + j0 * p.v_ss, p.v_ss});
        __syncthreads();
        double s[MT][NT][2], dp[MT][NT][2];
        dots<MT, NT, F::KC, LD>(s, Qw, Ks, g, t);
        dots<MT, NT, F::KC, LD>(dp, dOw, Vs, g, t);
        const bool full = j0 >= full_lo && j0 + BN <= full_hi;
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt)
#pragma unroll
                for (int e = 0; e < 2; ++e) {
                    const int key = j0 + 8 * nt + 2 * t + e;
                    double ds;
                    grad_element(p, mask, mask_kind, kF64, full, gr[mt].kr, bi, h, ri[mt], key,
                                 s[mt][nt][e], dp[mt][nt][e], gr[mt].lse_log2, gr[mt].delta, ds);
                    if (dmask_on && ri[mt] < p.sq && key < p.skv)
                        dmask[(bh * p.sq + ri[mt]) * p.skv + key] = ds;
                    s[mt][nt][e] = ds;
                }
        accumulate_rows<MT, NT, F::CT, LD>(dQ, s, Ks, g, t);
        written_end = j0 + BN;
    }
    store_frag_rows<MT, F::CT>(dq, q_off, p.q_ss, ri, p.sq, p.d, dQ, p.scale, t);
    if (dmask_on) zero_dmask_outside(dmask, p, bh, m0, nq, kv_begin, written_end);
#endif
}

}  // namespace sdpa_dmma

template <int HD, int MT, int NT>
__global__ void __launch_bounds__(sdpa_dmma::kWarps * 32) flash_dmma_fwd(
    const double* __restrict__ q, const double* __restrict__ k, const double* __restrict__ v,
    double* __restrict__ o, double* __restrict__ lse, const void* __restrict__ mask,
    const int* __restrict__ lengths_q, const int* __restrict__ lengths_kv,
    const SdpaParamsT<double> p, const int mask_kind) {
    sdpa_dmma::fwd_body<HD, MT, NT>(q, k, v, o, lse, mask, lengths_q, lengths_kv, p, mask_kind);
}

// Backward argument order (the CUDA-core backward's, less its dtype flag): q, k, v, o, dout,
// lse, dq, dk, dv, dmask, mask, lengths_q, lengths_kv, params, mask kind, delta.
template <int HD, int KT, int NQ>
__global__ void __launch_bounds__(sdpa_dmma::kWarps * 32) flash_dmma_bwd_dkdv(
    const double* __restrict__ q, const double* __restrict__ k, const double* __restrict__ v,
    const double* __restrict__ o, const double* __restrict__ dout,
    const double* __restrict__ lse, double* __restrict__ dq, double* __restrict__ dk,
    double* __restrict__ dv, double* __restrict__ dmask, const void* __restrict__ mask,
    const int* __restrict__ lengths_q, const int* __restrict__ lengths_kv,
    const SdpaParamsT<double> p, const int mask_kind, const double* __restrict__ delta) {
    sdpa_dmma::dkdv_body<HD, KT, NQ>(q, k, v, dout, lse, dk, dv, mask, lengths_q, lengths_kv, p,
                                     mask_kind, delta);
}

template <int HD, int MT, int NT>
__global__ void __launch_bounds__(sdpa_dmma::kWarps * 32) flash_dmma_bwd_dq(
    const double* __restrict__ q, const double* __restrict__ k, const double* __restrict__ v,
    const double* __restrict__ o, const double* __restrict__ dout,
    const double* __restrict__ lse, double* __restrict__ dq, double* __restrict__ dk,
    double* __restrict__ dv, double* __restrict__ dmask, const void* __restrict__ mask,
    const int* __restrict__ lengths_q, const int* __restrict__ lengths_kv,
    const SdpaParamsT<double> p, const int mask_kind, const double* __restrict__ delta) {
    sdpa_dmma::dq_body<HD, MT, NT>(q, k, v, dout, lse, dq, dmask, mask, lengths_q, lengths_kv, p,
                                   mask_kind, delta);
}
