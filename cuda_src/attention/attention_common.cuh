// attention_common.cuh — what every scaled dot-product attention kernel shares: the
// parameter struct (mirrored by cudnnlite/solvers/attention/common.py:PARAMS_DTYPE), the
// keep predicate of causal / window / lengths masking, the explicit mask's value and the
// dropout stream. Semantics: cudnnlite/problems/attention.py and reference/attention.py.
//
// Kernel argument order (pointers, then the struct):
//   forward:  q, k, v, o, lse, mask, lengths_q, lengths_kv, params
//   backward: q, k, v, o, dout, lse, dq, dk, dv, dmask, mask, lengths_q, lengths_kv,
//             params (+ the solver's workspace pointers)
// Pointers that a call does not use (no mask, no lengths) are valid pointers of the
// right type that the kernel never reads (the MASK template parameter / has_lengths say).
//
// lse is float32 (float64 for double storage), (b, hq, sq) contiguous, the natural-log
// logsumexp of each row's kept scaled scores (-inf where a row keeps nothing, including
// rows past lengths_q).
//
// The parameter struct is templated on the accumulation type A (float, or double for
// double storage) so that the scale and the dropout scale reach double kernels exactly;
// SdpaParams (A = float) is the struct of the float32-math kernels.
#pragma once

#include "common/cudnnlite.cuh"
#include "common/philox.cuh"

// NVRTC has no <math.h>: the IEEE constants from their bit patterns (the emulator's
// <cmath> defines both already).
#ifndef INFINITY
#define INFINITY __int_as_float(0x7f800000)
#endif
#ifndef NAN
#define NAN __int_as_float(0x7fffffff)
#endif

template <typename A>
struct SdpaParamsT {
    // sizes
    int b, hq, hkv, sq, skv, d, dv, group;   // group = hq / hkv
    // element strides of q, k, v, o (batch, head, row; the head dim is contiguous);
    // dq/dk/dv/dout use the strides of q/k/v/o
    long long q_sb, q_sh, q_ss;
    long long k_sb, k_sh, k_ss;
    long long v_sb, v_sh, v_ss;
    long long o_sb, o_sh, o_ss;
    // explicit mask over (b, h, i, j), 0 where broadcast (MASK != 0)
    long long m_sb, m_sh, m_si, m_sj;
    A scale;            // softmax scale
    A scale_log2;       // scale * log2(e): kernels work in the exp2 domain
    int left, right;    // keys j with i + shift - left <= j <= i + shift + right; -1 unbounded
    int align_br;       // shift = skv_b - sq_b (bottom-right) instead of 0
    int has_lengths;    // lengths_q / lengths_kv (int32, (b,)) are read
    // dropout on the probabilities (element e = ((b*hq + h)*sq + i)*skv + j, C order)
    unsigned long long seed, offset;
    unsigned int drop_threshold;  // words below it are dropped; 0 = no dropout
    A drop_scale;  // kept elements: float32(1 / (1 - p)); for double, 1 / (1 - p) in double
    // A PhiloxState's device-side counter (ops/dropout.py), or null: the stream's offset
    // is then offset + counter[0] (a whole number held in a double, below 2^53), read on
    // the device at each draw, so that a graph or a launch template replays with the value
    // the counter holds then. (The state's array: launch templates use it in place.)
    const double* counter;
};
typedef SdpaParamsT<float> SdpaParams;  // the float32-math kernels' (fp32 / fp16 / bf16 storage)

namespace sdpa {

constexpr int kMaskNone = 0;
constexpr int kMaskBool = 1;      // uint8, nonzero = keep
constexpr int kMaskAdditive = 2;  // the q dtype, added to the scaled scores

// The sequence lengths of batch entry bi.
struct Lengths {
    int q, kv;
};

template <class P>
__device__ __forceinline__ Lengths lengths_of(const P& p, const int* lengths_q,
                                              const int* lengths_kv, int bi) {
    Lengths l{p.sq, p.skv};
    if (p.has_lengths) {
        l.q = lengths_q[bi];
        l.kv = lengths_kv[bi];
    }
    return l;
}

// Key range [lo, hi) that query row i may see (causal, window, lengths); empty when
// lo >= hi. Rows past l.q see nothing.
struct KeyRange {
    int lo, hi;
};

template <class P>
__device__ __forceinline__ KeyRange key_range(const P& p, Lengths l, int i) {
    KeyRange r{0, l.kv};
    if (i >= l.q) return KeyRange{0, 0};
    const int pos = i + (p.align_br ? l.kv - l.q : 0);
    if (p.right >= 0 && pos + p.right + 1 < r.hi) r.hi = pos + p.right + 1;
    if (p.left >= 0 && pos - p.left > r.lo) r.lo = pos - p.left;
    return r;
}

// The explicit mask at (bi, h, i, j): whether it keeps the entry and what it adds
// (in the log2 domain: multiplied by log2(e)), in the accumulation type of T.
template <int MASK, typename T>
struct MaskValue {
    bool keep;
    cl::acc_t<T> add_log2;
};

template <typename A> struct Log2e;
template <> struct Log2e<float> { static constexpr float value = 1.4426950408889634f; };
template <> struct Log2e<double> { static constexpr double value = 1.4426950408889634; };
template <typename A> struct Ln2;
template <> struct Ln2<float> { static constexpr float value = 0.6931471805599453f; };
template <> struct Ln2<double> { static constexpr double value = 0.6931471805599453; };

template <int MASK, typename T, class P>
__device__ __forceinline__ MaskValue<MASK, T> mask_at(const P& p, const void* mask, int bi,
                                                      int h, int i, int j) {
    typedef cl::acc_t<T> A;
    MaskValue<MASK, T> m{true, A(0)};
    if (MASK == kMaskNone) return m;
    const long long off = bi * p.m_sb + h * p.m_sh + i * p.m_si + j * p.m_sj;
    if (MASK == kMaskBool) {
        m.keep = static_cast<const unsigned char*>(mask)[off] != 0;
    } else {
        const A a = cl::to_acc(static_cast<const T*>(mask)[off]);
        m.add_log2 = a * Log2e<A>::value;
        m.keep = a != -INFINITY;  // -inf masks as a boolean False would
    }
    return m;
}

// The Philox offset of the call's stream: p.offset, plus the PhiloxState's counter.
template <class P>
__device__ __forceinline__ unsigned long long stream_offset(const P& p) {
    return p.offset + (p.counter ? (unsigned long long)*p.counter : 0ull);
}

// The dropout keep factor of probability element (bi, h, i, j): 0 or drop_scale (in the
// type of p's drop_scale). Each call draws a Philox group of four words; kernels that
// visit 4 consecutive elements of one group may share the draw (element e's word is e % 4).
// dropout_factor_at takes the stream's offset (stream_offset(p)) read once by the caller.
template <typename A>
__device__ __forceinline__ A dropout_factor_at(const SdpaParamsT<A>& p, unsigned long long offset,
                                               int bi, int h, int i, int j) {
    const unsigned long long e =
        ((((unsigned long long)bi * p.hq + h) * p.sq + i) * (unsigned long long)p.skv) + j;
    const cl::Philox4 w = cl::philox_group(p.seed, offset, e >> 2);
    return w.v[e & 3] >= p.drop_threshold ? p.drop_scale : A(0);
}
template <typename A>
__device__ __forceinline__ A dropout_factor(const SdpaParamsT<A>& p, int bi, int h, int i, int j) {
    return dropout_factor_at(p, stream_offset(p), bi, h, i, j);
}

}  // namespace sdpa
