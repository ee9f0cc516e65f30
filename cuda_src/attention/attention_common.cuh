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

// a * log2(e) rounded toward zero (FMUL.RZ / DMUL.RZ: no instruction more than a plain
// multiply), which saturates at the largest finite value where a round-to-nearest product
// would overflow: past |a| = MAX / log2(e) (float32's finfo.min, PyTorch's usual mask
// value, is past it) a finite mask would become -inf and mask like one (a row masked by it
// everywhere gave 0 where PyTorch gives its softmax over rounded scores: the mean of v).
// The backward's lse in log2 is converted the same way. -inf, +inf and NaN stay; a finite
// product is within one ulp of the rounded-to-nearest one.
__device__ __forceinline__ float log2_sat(float a) { return __fmul_rz(a, Log2e<float>::value); }
__device__ __forceinline__ double log2_sat(double a) {
    return __dmul_rz(a, Log2e<double>::value);
}

// The mask's element at offset off (elements from mask) as stored, and its value: apart,
// so that a tile's loads all issue before the first use (one memory latency per batch,
// not one per element). Loops over a tile keep a lane's offset and add compile-time
// multiples of the strides (mask_offset) instead of four products per element.
template <int MASK> struct MaskKind { static constexpr int value = MASK; };  // a tag
template <int MASK, typename T> struct MaskRaw { typedef T type; };
template <typename T> struct MaskRaw<kMaskBool, T> { typedef unsigned char type; };

template <int MASK, typename T>
__device__ __forceinline__ typename MaskRaw<MASK, T>::type mask_load(const void* mask,
                                                                     long long off) {
    return static_cast<const typename MaskRaw<MASK, T>::type*>(mask)[off];
}

template <int MASK, typename T>
__device__ __forceinline__ MaskValue<MASK, T> mask_decode(typename MaskRaw<MASK, T>::type x) {
    typedef cl::acc_t<T> A;
    MaskValue<MASK, T> m{true, A(0)};
    if constexpr (MASK == kMaskBool) {
        m.keep = x != 0;
    } else if constexpr (MASK == kMaskAdditive) {
        const A a = cl::to_acc(x);
        m.add_log2 = log2_sat(a);
        m.keep = a != -INFINITY;  // -inf masks as a boolean False would
    }
    return m;
}

template <int MASK, typename T>
__device__ __forceinline__ MaskValue<MASK, T> mask_value(const void* mask, long long off) {
    if constexpr (MASK == kMaskNone) return MaskValue<MASK, T>{true, cl::acc_t<T>(0)};
    else return mask_decode<MASK, T>(mask_load<MASK, T>(mask, off));
}

template <class P>
__device__ __forceinline__ long long mask_offset(const P& p, int bi, int h, int i, int j) {
    return bi * p.m_sb + h * p.m_sh + i * p.m_si + j * p.m_sj;
}

template <int MASK, typename T, class P>
__device__ __forceinline__ MaskValue<MASK, T> mask_at(const P& p, const void* mask, int bi,
                                                      int h, int i, int j) {
    return mask_value<MASK, T>(mask, mask_offset(p, bi, h, i, j));
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
// Whether dropout keeps element e of the stream at `offset`: one draw of its group.
template <class P>
__device__ __forceinline__ bool dropout_keeps(const P& p, unsigned long long offset,
                                              unsigned long long e) {
    const cl::Philox4 w = cl::philox_group(p.seed, offset, e >> 2);
    return cl::philox_word(w, (unsigned)e & 3u) >= p.drop_threshold;
}

template <typename A>
__device__ __forceinline__ A dropout_factor_at(const SdpaParamsT<A>& p, unsigned long long offset,
                                               int bi, int h, int i, int j) {
    const unsigned long long e =
        ((((unsigned long long)bi * p.hq + h) * p.sq + i) * (unsigned long long)p.skv) + j;
    return dropout_keeps(p, offset, e) ? p.drop_scale : A(0);
}
template <typename A>
__device__ __forceinline__ A dropout_factor(const SdpaParamsT<A>& p, int bi, int h, int i, int j) {
    return dropout_factor_at(p, stream_offset(p), bi, h, i, j);
}

// The keep bits of a draw's four words (bit k: word k at or above the threshold).
template <class P>
__device__ __forceinline__ unsigned keep_nibble(const P& p, const cl::Philox4& w) {
    return (w.v[0] >= p.drop_threshold ? 1u : 0u) | (w.v[1] >= p.drop_threshold ? 2u : 0u) |
           (w.v[2] >= p.drop_threshold ? 4u : 0u) | (w.v[3] >= p.drop_threshold ? 8u : 0u);
}

// The keep bits (1: element e0, 2: element e0 + 1) of two consecutive elements of one
// row; one draw when both fall in one group of four.
template <class P>
__device__ __forceinline__ unsigned dropout_pair(const P& p, unsigned long long offset,
                                                 unsigned long long e0) {
    const cl::Philox4 w = cl::philox_group(p.seed, offset, e0 >> 2);
    const unsigned k = (unsigned)e0 & 3u;
    const unsigned w0 = cl::philox_word(w, k);
    const unsigned w1 = k != 3u ? cl::philox_word(w, k + 1u)
                                : cl::philox_group(p.seed, offset, (e0 >> 2) + 1).v[0];
    return (w0 >= p.drop_threshold ? 1u : 0u) | (w1 >= p.drop_threshold ? 2u : 0u);
}

// Dropout keep bits of a warp's MMA accumulator fragment (m16 x NF n8 tiles; lane = 4 g +
// t), bit 4 f + r for the fragment's element (f, r). Every element number is
// e_row[r >> 1] (the element of the lane's row, key 0) plus the element's key.
//
// Keys along the fragment's columns (S = Q K^T: the forward, the dQ kernel): element
// (f, r) is row hf = r >> 1 at key kb + 8 f + 2 t + (r & 1). Lanes t and t ^ 1 hold the
// four keys of one Philox group when the row starts and kb are multiples of 4 (skv % 4 ==
// 0, kb % 8 == 0, `aligned`, warp-uniform): each lane draws its own half's groups (NF
// draws instead of 4 NF) and swaps them with its partner through one shuffle. Otherwise one
// draw per pair of keys (2 NF). Every lane of the warp calls it (a full-mask shuffle).
// e_row / e_col are read through selects: a run-time index would put them in local memory.
template <int NF, class P>
__device__ __forceinline__ unsigned drop_bits_keys_in_cols(const P& p, unsigned long long offset,
                                                           const unsigned long long (&e_row)[2],
                                                           int kb, int t, bool aligned) {
    static_assert(NF * 4 <= 32, "one bit per fragment element");
    unsigned bits = 0;
    if (aligned) {
        // mine: bit 4 f + w = word w of this lane's half (t & 1), group of keys kb + 8 f +
        // 4 (t >> 1) ..; the partner's half comes from lane ^ 1.
        const unsigned q = t & 1;
        const unsigned long long e = (q ? e_row[1] : e_row[0]) + kb + 4 * (t >> 1);
        unsigned mine = 0;
#pragma unroll 1
        for (int f = 0; f < NF; ++f) {
            mine |= keep_nibble(p, cl::philox_group(p.seed, offset, (e + 8 * f) >> 2)) << (4 * f);
        }
        const unsigned other = __shfl_xor_sync(0xffffffffu, mine, 1);
        const unsigned h0 = q ? other : mine, h1 = q ? mine : other;
        // this lane's keys are words 2 (t & 1) and 2 (t & 1) + 1 of each group
        bits = ((h0 >> (2 * q)) & 0x33333333u) | (((h1 >> (2 * q)) & 0x33333333u) << 2);
    } else {
#pragma unroll 1
        for (int pr = 0; pr < 2 * NF; ++pr) {  // (f = pr >> 1, row half pr & 1)
            const int f = pr >> 1, hf = pr & 1;
            const unsigned long long e = (hf ? e_row[1] : e_row[0]) + kb + 8 * f + 2 * t;
            bits |= dropout_pair(p, offset, e) << (4 * f + 2 * hf);
        }
    }
    return bits;
}

// Keys along the fragment's rows (S^T = K Q^T: the dK / dV kernel): element (f, r) is
// query row ib + 8 f + (r & 1) (element number e_col[r & 1] + 8 f skv) at key jb + 8 (r >>
// 1), jb = the lane's key (16-key block start + g). Lanes g = 4 k .. 4 k + 3 hold the four
// keys of one group when skv % 4 == 0 and the block start is a multiple of 4 (`aligned`):
// lane g & 3 = r draws the groups of slots (f, r) (NF draws instead of 4 NF) and four
// shuffles hand each lane its word of every slot. Otherwise one draw per element.
template <int NF, class P>
__device__ __forceinline__ unsigned drop_bits_keys_in_rows(const P& p, unsigned long long offset,
                                                           const unsigned long long (&e_col)[2],
                                                           int jb, int lane, bool aligned) {
    static_assert(NF * 4 <= 32, "one bit per fragment element");
    const unsigned long long row_step = 8ull * (unsigned long long)p.skv;
    unsigned bits = 0;
    if (aligned) {
        const unsigned q = (lane >> 2) & 3;  // g & 3: this lane draws slots (f, r = q)
        const unsigned long long e = (q & 1 ? e_col[1] : e_col[0]) + (jb - (int)q) + 8 * (q >> 1);
        unsigned mine = 0;  // bit 4 f + w: word w of slot (f, q)'s group
#pragma unroll 1
        for (int f = 0; f < NF; ++f) {
            const cl::Philox4 w = cl::philox_group(p.seed, offset, (e + f * row_step) >> 2);
            mine |= keep_nibble(p, w) << (4 * f);
        }
#pragma unroll
        for (int r = 0; r < 4; ++r) {
            const unsigned from = __shfl_sync(0xffffffffu, mine, (lane & ~12) | (r << 2));
            bits |= ((from >> q) & 0x11111111u) << r;
        }
    } else {
#pragma unroll 1
        for (int s = 0; s < NF * 4; ++s) {
            const int f = s >> 2, r = s & 3;
            const unsigned long long e =
                (r & 1 ? e_col[1] : e_col[0]) + f * row_step + jb + 8 * (r >> 1);
            bits |= (dropout_keeps(p, offset, e) ? 1u : 0u) << s;
        }
    }
    return bits;
}

}  // namespace sdpa
