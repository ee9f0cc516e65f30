// flash_dmma.cu — FlashAttention forward for double storage on the fp64 tensor cores
// (mma.sync m8n8k4 .f64, sm_80+; common/mma.cuh): S = Q K^T and O += P V as DMMAs, the
// online softmax in double (exp2 and log2 in double), lse in double. Semantics:
// attention_common.cuh; tile loading, masks, dropout and block ranges: flash_fp32_tile.cuh
// (the CUDA-core kernels' building blocks, A = double).
//
// Kernel: flash_dmma_fwd<HD, MT, NT>
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

    // S = Q K^T for this warp's rows and the tile's BN keys (raw dot products).
    __device__ __forceinline__ void scores(double (&s)[MT][NT][2], const double* Qw,
                                           const double* Ks, int g, int t) const {
#pragma unroll
        for (int mt = 0; mt < MT; ++mt)
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) s[mt][nt][0] = s[mt][nt][1] = 0.0;
        const double* qa = Qw + g * LD + t;
        const double* kb = Ks + g * LD + t;
#pragma unroll
        for (int kc = 0; kc < KC; ++kc) {
            double a[MT], b[NT];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt) a[mt] = qa[mt * 8 * LD + 4 * kc];
#pragma unroll
            for (int nt = 0; nt < NT; ++nt) b[nt] = kb[nt * 8 * LD + 4 * kc];
#pragma unroll
            for (int mt = 0; mt < MT; ++mt)
#pragma unroll
                for (int nt = 0; nt < NT; ++nt)
                    cl::mma::mma_m8n8k4_f64(s[mt][nt], a[mt], b[nt], s[mt][nt]);
        }
    }

    // O += P V over the tile's keys, P in the S fragments (permuted reduction, header).
    __device__ __forceinline__ void accumulate(const double (&s)[MT][NT][2], const double* Vs,
                                               int g, int t) {
        const double* vb = Vs + 2 * t * LDV + g;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
            for (int e = 0; e < 2; ++e) {
                const double* row = vb + (8 * nt + e) * LDV;
#pragma unroll
                for (int ct = 0; ct < CT; ++ct) {  // unrolled: o stays in registers
                    const double b = row[8 * ct];
#pragma unroll
                    for (int mt = 0; mt < MT; ++mt)
                        cl::mma::mma_m8n8k4_f64(o[mt][ct], s[mt][nt][e], b, o[mt][ct]);
                }
            }
    }

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
            scores(s, Qw, Ks, g, t);
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
            accumulate(s, Vs, g, t);
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

    // Epilogue: o = O / l (0 for rows that keep nothing), lse in natural log; two
    // consecutive columns per lane and column tile (one 16-byte store where aligned).
    const long long o_base = bi * p.o_sb + h * p.o_sh;
    const bool pair = (p.dv & 1) == 0 && (p.o_ss & 1) == 0 &&
                      ((unsigned long long)(o + o_base) & 15) == 0;
#pragma unroll
    for (int mt = 0; mt < MT; ++mt) {
        const int i = ri[mt];
        if (i >= p.sq) continue;
        const double inv = f.l[mt] > 0.0 ? 1.0 / f.l[mt] : 0.0;
        if (t == 0)
            lse[(long long)blockIdx.y * p.sq + i] =
                f.l[mt] > 0.0 ? (f.m[mt] + cl::math::log2(f.l[mt])) * Const<double>::ln2
                              : -INFINITY;
        double* row = o + o_base + i * p.o_ss;
#pragma unroll
        for (int ct = 0; ct < F::CT; ++ct) {
            const int c = 8 * ct + 2 * t;
            const double a = f.o[mt][ct][0] * inv, b = f.o[mt][ct][1] * inv;
            if (pair && c < p.dv) {
                *reinterpret_cast<double2*>(row + c) = double2{a, b};
            } else {
                if (c < p.dv) row[c] = a;
                if (c + 1 < p.dv) row[c + 1] = b;
            }
        }
    }
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
