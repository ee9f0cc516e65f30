// Activation math shared by every kernel that applies an activation: the activation
// primitives (activation/activation.cu) and fused epilogues (convolution, batch norm).
//
//   act::forward<MODE>(x, p)           f(x) in x's type A (cl::acc_t of the storage
//                                      type: float, or double for float64)
//   act::backward<MODE>(dy, x, y, p)   dy * f'(x) in A (y: the forward output,
//                                      used by sigmoid and tanh when p.use_y)
//
// The coefficients travel in the accumulation type (ActParamsT<A>): float for the
// 32-bit and 16-bit storage types, double for float64, which keeps them exactly.
//
// MODE is one of the act::k* constants, numbered as ACTIVATION_MODES in
// cudnnlite/ops/activation.py.
#pragma once

#include "common/cudnnlite.cuh"

namespace act {

// Mode numbers: the order of ACTIVATION_MODES in cudnnlite/ops/activation.py.
constexpr int kRelu = 0;
constexpr int kLeakyRelu = 1;    // coef: negative slope
constexpr int kClippedRelu = 2;  // coef: ceiling
constexpr int kElu = 3;          // coef: alpha
constexpr int kSigmoid = 4;
constexpr int kTanh = 5;
constexpr int kSwish = 6;     // coef: beta (x * sigmoid(beta x))
constexpr int kGelu = 7;      // x * Phi(x), erf form
constexpr int kGeluTanh = 8;  // tanh approximation
constexpr int kSoftplus = 9;  // coef: beta, threshold: linear above beta x > threshold
constexpr int kIdentity = 10;
// Appended after identity so the numbers above (in tuning keys and epilogue structs) stay.
constexpr int kHardtanh = 11;     // coef: max_val, threshold: min_val (min_val <= max_val)
constexpr int kHardswish = 12;    // x * clamp(x + 3, 0, 6) / 6
constexpr int kHardsigmoid = 13;  // clamp(x + 3, 0, 6) / 6
constexpr int kMish = 14;         // x * tanh(log1p(exp(x)))

// As double; A(k) rounds them to float where A is float (the values the float kernels
// always used).
constexpr double kSqrtHalf = 0.70710678118654752440;     // 1 / sqrt(2)
constexpr double kInvSqrt2Pi = 0.39894228040143267794;   // 1 / sqrt(2 pi)
constexpr double kSqrt2OverPi = 0.79788456080286535588;  // sqrt(2 / pi)
constexpr double kGeluCubic = 0.044715;

}  // namespace act

// Activation coefficients and blending factors in the accumulation type A
// (ops/activation.py: act_params_dtype).
template <typename A>
struct ActParamsT {
    A coef;       // the mode's coefficient (see act::k*); unused by the others
    A threshold;  // softplus only
    A alpha;
    A beta;       // 0: the output is not read
    int use_y;    // backward of sigmoid/tanh: derive from y instead of x
};
// (hardtanh reuses threshold as its lower bound min_val: the struct, shared with the
// convolution and norm epilogues, keeps its layout.)
typedef ActParamsT<float> ActParams;  // storage types float, __half, __nv_bfloat16
// The parameters kernels on storage type T take.
template <typename T> using ActParamsFor = ActParamsT<cl::acc_t<T>>;

namespace act {

namespace m = cl::math;

template <typename A>
__device__ __forceinline__ A sigmoid(A x) { return A(1) / (A(1) + m::exp(-x)); }

// clamp(v, lo, hi) by comparisons, as PyTorch's min(max(v, lo), hi): NaN passes through
// (fmin/fmax would drop it) and so does -0 when lo is 0.
template <typename A>
__device__ __forceinline__ A clamp_nan(A v, A lo, A hi) {
    return v < lo ? lo : (v > hi ? hi : v);
}

// tanh(softplus(x)) as PyTorch's mish evaluates it: exp(x) overflowing to inf gives 1.
template <typename A>
__device__ __forceinline__ A tanh_softplus(A x) { return m::tanh(m::log1p(m::exp(x))); }

// x * s where s in [0, 1] is a gate that may underflow to 0 while |x| is infinite:
// the limit is then a signed zero, not inf * 0 = NaN.
template <typename A>
__device__ __forceinline__ A gated(A x, A s) {
    return s == A(0) ? m::copysign(A(0), x) : x * s;
}

template <int MODE, typename A>
__device__ __forceinline__ A forward(A x, const ActParamsT<A>& p) {
    const A zero = A(0);
    if constexpr (MODE == kRelu) {
        return x <= zero ? zero : x;  // NaN fails the test and passes through
    } else if constexpr (MODE == kLeakyRelu) {
        return x > zero ? x : x * p.coef;
    } else if constexpr (MODE == kClippedRelu) {
        const A top = p.coef;
        return x <= zero ? zero : (x >= top ? top : x);
    } else if constexpr (MODE == kElu) {
        return x > zero ? x : p.coef * m::expm1(x);
    } else if constexpr (MODE == kSigmoid) {
        return sigmoid(x);
    } else if constexpr (MODE == kTanh) {
        return m::tanh(x);
    } else if constexpr (MODE == kSwish) {
        // beta == 0 must give x / 2 even for infinite x (0 * inf would be NaN)
        const A beta = p.coef;
        const A bx = beta == zero ? zero : beta * x;
        return gated(x, sigmoid(bx));
    } else if constexpr (MODE == kGelu) {
        return gated(x, A(0.5) * m::erfc(-x * A(kSqrtHalf)));
    } else if constexpr (MODE == kGeluTanh) {
        // 0.5 (1 + tanh(u)) == sigmoid(2u), without 1 + tanh cancelling for x << 0
        const A u = A(kSqrt2OverPi) * (x + A(kGeluCubic) * x * x * x);
        return gated(x, sigmoid(A(2) * u));
    } else if constexpr (MODE == kSoftplus) {
        const A beta = p.coef;
        const A bx = beta * x;
        if (bx > p.threshold) return x;
        return (m::fmax(bx, zero) + m::log1p(m::exp(-m::fabs(bx)))) / beta;
    } else if constexpr (MODE == kHardtanh) {
        return clamp_nan(x, p.threshold, p.coef);
    } else if constexpr (MODE == kHardswish) {
        // PyTorch's x * clamp(x + 3, 0, 6) / 6, with -0 (the limit) at x = -inf and x
        // itself from x = 3 on (x * 6 would overflow near the type's maximum)
        const A r = clamp_nan(x + A(3), zero, A(6));
        return r >= A(6) ? x : gated(x, r) / A(6);
    } else if constexpr (MODE == kHardsigmoid) {
        return clamp_nan(x + A(3), zero, A(6)) / A(6);
    } else if constexpr (MODE == kMish) {
        return gated(x, tanh_softplus(x));
    } else {
        static_assert(MODE == kIdentity, "unknown activation mode");
        return x;
    }
}

// dx before blending: dy * f'(x). The piecewise modes select dy or 0 (as PyTorch:
// dy = inf where f' = 0 gives 0, not NaN) and return NaN for NaN x.
template <int MODE, typename A>
__device__ __forceinline__ A backward(A dy, A x, A y, const ActParamsT<A>& p) {
    const A zero = A(0), one = A(1);
    if constexpr (MODE == kRelu) {
        return x > zero ? dy : (x <= zero ? zero : x);
    } else if constexpr (MODE == kLeakyRelu) {
        return x > zero ? dy : (x <= zero ? dy * p.coef : x);
    } else if constexpr (MODE == kClippedRelu) {
        // gradient 0 at both boundaries (PyTorch's hardtanh convention)
        return (x > zero && x < p.coef) ? dy : (x != x ? x : zero);
    } else if constexpr (MODE == kElu) {
        return x > zero ? dy : dy * (p.coef * m::exp(x));  // x <= 0: the left formula, as PyTorch
    } else if constexpr (MODE == kSigmoid) {
        if (p.use_y) return dy * (y * (one - y));
        const A e = m::exp(-m::fabs(x));  // s(1-s) = e / (1+e)^2 for either sign of x
        return dy * (e / ((one + e) * (one + e)));
    } else if constexpr (MODE == kTanh) {
        if (p.use_y) return dy * (one - y * y);
        const A e = m::exp(A(-2) * m::fabs(x));  // sech^2 x = 4e / (1+e)^2
        return dy * (A(4) * e / ((one + e) * (one + e)));
    } else if constexpr (MODE == kSwish) {
        // d/dx x s(bx) = s + b x s (1 - s); at x = +-inf the limit is s itself
        const A beta = p.coef;
        const A bx = beta == zero ? zero : beta * x;
        const A s = sigmoid(bx), sn = sigmoid(-bx);
        const A d = isinf(x) ? s : s + (x * sn) * (beta * s);
        return dy * d;
    } else if constexpr (MODE == kGelu) {
        // Phi(x) + x phi(x); x * x may overflow to inf, giving phi = 0 and x * 0 = 0
        const A cdf = A(0.5) * m::erfc(-x * A(kSqrtHalf));
        const A d = isinf(x) ? cdf : cdf + x * (A(kInvSqrt2Pi) * m::exp(A(-0.5) * x * x));
        return dy * d;
    } else if constexpr (MODE == kGeluTanh) {
        // d/dx x s(2u) = s + 2 x s (1 - s) u'; beyond |x| = 20 (float) or 1e6 (double)
        // the second term is below the type's resolution, and u' would overflow for
        // huge x
        const A cutoff = sizeof(A) == 4 ? A(20) : A(1e6);
        A d;
        if (m::fabs(x) > cutoff) {
            d = x > zero ? one : zero;
        } else {
            const A u = A(kSqrt2OverPi) * (x + A(kGeluCubic) * x * x * x);
            const A du = A(kSqrt2OverPi) * (one + A(3) * A(kGeluCubic) * x * x);
            const A s = sigmoid(A(2) * u), sn = sigmoid(A(-2) * u);
            d = s + A(2) * x * s * sn * du;
        }
        return dy * d;
    } else if constexpr (MODE == kSoftplus) {
        // PyTorch's z / (z + 1), z = exp(beta x): subnormal z keeps an infinite dy infinite
        // (1 / (1 + exp(-beta x)) is 0 there, and inf * 0 NaN)
        const A bx = p.coef * x;
        const A z = m::exp(bx);
        return bx > p.threshold ? dy : dy * z / (z + A(1));
    } else if constexpr (MODE == kHardtanh) {
        // 0 at both bounds (PyTorch's hardtanh_backward)
        return (x > p.threshold && x < p.coef) ? dy : (x != x ? x : zero);
    } else if constexpr (MODE == kHardswish) {
        // PyTorch: 0 for x <= -3, x / 3 + 1/2 for -3 < x < 3, 1 from x = 3 on
        if (x <= A(-3)) return zero;
        return x < A(3) ? dy * (x / A(3) + A(0.5)) : (x >= A(3) ? dy : x);
    } else if constexpr (MODE == kHardsigmoid) {
        // 1/6 strictly inside (-3, 3), 0 at the bounds and outside; a product by 1/6 in A,
        // as PyTorch (a double division took a slow-path call: 48 registers and a spill)
        return (x > A(-3) && x < A(3)) ? dy * A(1.0 / 6.0) : (x != x ? x : zero);
    } else if constexpr (MODE == kMish) {
        // t + x s(x) (1 - t^2), t = tanh(softplus x); at x = +-inf the limit is t
        const A t = tanh_softplus(x);
        const A d = isinf(x) ? t : t + x * sigmoid(x) * (one - t * t);
        return dy * d;
    } else {
        static_assert(MODE == kIdentity, "unknown activation mode");
        return dy;
    }
}

}  // namespace act
