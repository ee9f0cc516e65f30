// CTC loss (Graves et al. 2006) with PyTorch's conventions: the forward-backward recursions
// over the extended label sequence l' = (blank, y1, blank, y2, ..., yS, blank) of length
// L = 2S + 1, in log space. Arithmetic, the alpha/beta tables, nll and the gradient scale
// are in A = cl::acc_t<T>: float for float/__half/__nv_bfloat16, double for double.
//
// Kernels (T = float | __half | __nv_bfloat16 | double; log_probs (T_max, N, C) contiguous):
//   ctc_alpha<T>  one block per batch entry n, threads over the positions s of l' (strided),
//                 a barrier per time step. alpha[n][t][s] = log P(prefix l'[0..s] emitted by
//                 frames 0..t), the rows written to the workspace table (N, T_max, Lw); the
//                 previous row is read back from it (each block owns its rows). Writes the
//                 raw nll[n] = -logsumexp(alpha[il-1][L-1], alpha[il-1][L-2]) (inf when no
//                 alignment exists; zero_infinity is applied by the caller).
//   ctc_beta<T>   the same backwards: beta[n][t][s] = log P(suffix l'[s..] emitted by frames
//                 t..il-1), including frame t (so alpha + beta counts lp[t][l'(s)] twice).
//                 Its prologue links equal labels: next[k] = the next j > k with
//                 y_j == y_k (or -1) and head[k] = 1 where y_k first occurs.
//   ctc_grad<T>   one block per (t, n): PyTorch's gradient w.r.t. log_probs,
//                   g[t][n][c] = scale[n] * (exp(lp) - exp(lse_{s: l'(s) = c}(alpha + beta)
//                                                         + nll - lp)),   t < il,
//                 0 for t >= il, and 0 everywhere for an infinite nll with zero_infinity.
//                 Deterministic without atomics: every c first gets the no-path value, then
//                 (after a barrier) warp 0 overwrites the blank's column from a fixed-order
//                 reduction over the even positions, and the thread of each label's first
//                 occurrence walks that label's chain (next[]) in order and overwrites its
//                 column. Targets never hold the blank (the Python side checks), so the two
//                 never write the same column.
// Defines: none (one module holds every dtype).
#include "common/cudnnlite.cuh"

// ops/ctc.py: _PARAMS_DTYPE.
struct CtcParams {
    long long t_max;     // frames of log_probs (its first dimension)
    long long n;         // batch entries
    long long c;         // classes
    long long lw;        // row stride of the alpha/beta tables: 2 * max target length + 1
    long long s_max;     // row stride of the next/head tables: max target length (>= 1)
    int blank;
    int zero_infinity;
};

namespace ctc {

// NVRTC has no <cmath> INFINITY; bit patterns work on both backends (exact in double).
template <typename A>
__device__ __forceinline__ A neg_inf() { return A(__int_as_float(0xff800000)); }
template <typename A>
__device__ __forceinline__ A pos_inf() { return A(__int_as_float(0x7f800000)); }

// log(exp(a) + exp(b)); -inf + -inf = -inf; NaN propagates.
template <typename A>
__device__ __forceinline__ A log_add(A a, A b) {
    if (a < b) {
        const A t = a;
        a = b;
        b = t;
    }
    if (b == neg_inf<A>()) return a;
    return a + cl::math::log1p(cl::math::exp(b - a));
}

// log(alpha * beta) of a position: -inf (no path through it) when either side has no
// path, even where the other is NaN (a NaN log-prob elsewhere in the sequence), as in
// PyTorch, whose gradient stays finite there; a + b otherwise.
template <typename A>
__device__ __forceinline__ A through(A a, A b) {
    return a == neg_inf<A>() || b == neg_inf<A>() ? neg_inf<A>() : a + b;
}

// Label of position s of l' for a target starting at tgt.
__device__ __forceinline__ int label(const int* tgt, int s, int blank) {
    return (s & 1) ? tgt[s >> 1] : blank;
}

template <typename T>
__device__ __forceinline__ cl::acc_t<T> lp_at(const T* lp, const CtcParams& p, long long t,
                                              long long n, int c) {
    return cl::to_acc(lp[(t * p.n + n) * p.c + c]);
}

// The skip transition s-2 -> s exists when l'(s) is a label that differs from l'(s-2).
__device__ __forceinline__ bool can_skip(const int* tgt, int s, int blank) {
    return s >= 2 && (s & 1) && tgt[s >> 1] != blank && tgt[s >> 1] != tgt[(s >> 1) - 1];
}

}  // namespace ctc

template <typename T>
__global__ void __launch_bounds__(256) ctc_alpha(
    // pointers
    const T* lp, const int* targets, const long long* tgt_offset, const int* in_len,
    const int* tgt_len, cl::acc_t<T>* alpha, cl::acc_t<T>* nll,
    // parameters
    CtcParams p) {
    typedef cl::acc_t<T> A;
    const long long n = blockIdx.x;
    const int il = in_len[n];
    const int L = 2 * tgt_len[n] + 1;
    const int* tgt = targets + tgt_offset[n];
    A* a = alpha + n * p.t_max * p.lw;
    if (il > 0) {
        for (int s = threadIdx.x; s < L; s += blockDim.x)
            a[s] = s < 2 ? ctc::lp_at(lp, p, 0, n, ctc::label(tgt, s, p.blank)) : ctc::neg_inf<A>();
    }
    __syncthreads();
    for (int t = 1; t < il; ++t) {
        const A* prev = a + (long long)(t - 1) * p.lw;
        A* cur = a + (long long)t * p.lw;
        for (int s = threadIdx.x; s < L; s += blockDim.x) {
            A v = prev[s];
            if (s >= 1) v = ctc::log_add(v, prev[s - 1]);
            if (ctc::can_skip(tgt, s, p.blank)) v = ctc::log_add(v, prev[s - 2]);
            cur[s] = v + ctc::lp_at(lp, p, t, n, ctc::label(tgt, s, p.blank));
        }
        __syncthreads();
    }
    if (threadIdx.x == 0) {
        A ll;
        if (il == 0) {
            ll = L == 1 ? A(0) : ctc::neg_inf<A>();  // no frames: only the empty target is emitted
        } else {
            const A* last = a + (long long)(il - 1) * p.lw;
            ll = L >= 2 ? ctc::log_add(last[L - 1], last[L - 2]) : last[L - 1];
        }
        nll[n] = -ll;
    }
}

// At least 1 block per SM: with ptxas's default target (8) it capped ctc_beta at 32
// registers and spilled 8 bytes; 38 registers spill nothing (sm_90).
template <typename T>
__global__ void __launch_bounds__(256, 1) ctc_beta(
    // pointers
    const T* lp, const int* targets, const long long* tgt_offset, const int* in_len,
    const int* tgt_len, cl::acc_t<T>* beta, int* next, int* head,
    // parameters
    CtcParams p) {
    typedef cl::acc_t<T> A;
    const long long n = blockIdx.x;
    const int il = in_len[n];
    const int S = tgt_len[n];
    const int L = 2 * S + 1;
    const int* tgt = targets + tgt_offset[n];
    A* b = beta + n * p.t_max * p.lw;
    // Label chains for ctc_grad (O(S^2 / threads) once per sample, not per frame).
    for (int k = threadIdx.x; k < S; k += blockDim.x) {
        int nx = -1;
        for (int j = k + 1; j < S && nx < 0; ++j)
            if (tgt[j] == tgt[k]) nx = j;
        int first = 1;
        for (int j = 0; j < k && first; ++j)
            if (tgt[j] == tgt[k]) first = 0;
        next[n * p.s_max + k] = nx;
        head[n * p.s_max + k] = first;
    }
    if (il > 0) {
        A* last = b + (long long)(il - 1) * p.lw;
        for (int s = threadIdx.x; s < L; s += blockDim.x)
            last[s] = s >= L - 2 ? ctc::lp_at(lp, p, il - 1, n, ctc::label(tgt, s, p.blank))
                                 : ctc::neg_inf<A>();
    }
    __syncthreads();
    for (int t = il - 2; t >= 0; --t) {
        const A* nxt = b + (long long)(t + 1) * p.lw;
        A* cur = b + (long long)t * p.lw;
        for (int s = threadIdx.x; s < L; s += blockDim.x) {
            A v = nxt[s];
            if (s + 1 < L) v = ctc::log_add(v, nxt[s + 1]);
            if (s + 2 < L && ctc::can_skip(tgt, s + 2, p.blank)) v = ctc::log_add(v, nxt[s + 2]);
            cur[s] = v + ctc::lp_at(lp, p, t, n, ctc::label(tgt, s, p.blank));
        }
        __syncthreads();
    }
}

template <typename T>
__global__ void __launch_bounds__(128) ctc_grad(
    // pointers
    const T* lp, const int* targets, const long long* tgt_offset, const int* in_len,
    const int* tgt_len, const cl::acc_t<T>* alpha, const cl::acc_t<T>* beta, const int* next,
    const int* head, const cl::acc_t<T>* nll, const cl::acc_t<T>* scale, T* grad,
    // parameters
    CtcParams p) {
    typedef cl::acc_t<T> A;
    const long long t = blockIdx.x % p.t_max;  // range [0, T_max)
    const long long n = blockIdx.x / p.t_max;  // range [0, N)
    const int il = in_len[n];
    const A nl = nll[n];
    T* g = grad + (t * p.n + n) * p.c;
    if (t >= il || (p.zero_infinity && nl == ctc::pos_inf<A>())) {
        for (int c = threadIdx.x; c < p.c; c += blockDim.x) g[c] = cl::from_acc<T>(A(0));
        return;  // uniform across the block: no barrier below is skipped by part of it
    }
    const A sc = scale[n];
    const T* lpt = lp + (t * p.n + n) * p.c;
    // Columns no path goes through: lse over an empty set is -inf.
    for (int c = threadIdx.x; c < p.c; c += blockDim.x) {
        const A v = cl::to_acc(lpt[c]);
        g[c] = cl::from_acc<T>((cl::math::exp(v) - cl::math::exp(ctc::neg_inf<A>() + nl - v)) * sc);
    }
    __syncthreads();
    const int S = tgt_len[n];
    const int* tgt = targets + tgt_offset[n];
    const A* a = alpha + (n * p.t_max + t) * p.lw;
    const A* b = beta + (n * p.t_max + t) * p.lw;
    if (threadIdx.x < 32) {
        // The blank's column: even positions 0, 2, ..., 2S; lanes take every 32nd, then a
        // fixed butterfly (every lane ends with the same bits; lane 0 writes).
        const int lane = threadIdx.x;
        A acc = ctc::neg_inf<A>();
        for (int s = 2 * lane; s <= 2 * S; s += 64)
            acc = ctc::log_add(acc, ctc::through(a[s], b[s]));
        for (int m = 16; m >= 1; m >>= 1) {
            const A o = __shfl_xor_sync(0xffffffffu, acc, m);
            acc = lane & m ? ctc::log_add(o, acc) : ctc::log_add(acc, o);
        }
        if (lane == 0) {
            const A v = cl::to_acc(lpt[p.blank]);
            g[p.blank] = cl::from_acc<T>((cl::math::exp(v) - cl::math::exp(acc + nl - v)) * sc);
        }
    }
    const int* nx = next + n * p.s_max;
    const int* hd = head + n * p.s_max;
    for (int k = threadIdx.x; k < S; k += blockDim.x) {
        if (!hd[k]) continue;
        A acc = ctc::neg_inf<A>();
        for (int j = k; j >= 0; j = nx[j])
            acc = ctc::log_add(acc, ctc::through(a[2 * j + 1], b[2 * j + 1]));
        const int c = tgt[k];
        const A v = cl::to_acc(lpt[c]);
        g[c] = cl::from_acc<T>((cl::math::exp(v) - cl::math::exp(acc + nl - v)) * sc);
    }
}
