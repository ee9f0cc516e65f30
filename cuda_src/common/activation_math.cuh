// Activation math shared by every kernel that applies an activation: the activation
// primitives (activation/activation.cu) and fused epilogues (convolution, batch norm).
//
//   act::forward<MODE>(x, p)           f(x) in float
//   act::backward<MODE>(dy, x, y, p)   dy * f'(x) in float (y: the forward output,
//                                      used by sigmoid and tanh when p.use_y)
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

constexpr float kSqrtHalf = 0.70710678118654752f;      // 1 / sqrt(2)
constexpr float kInvSqrt2Pi = 0.39894228040143268f;    // 1 / sqrt(2 pi)
constexpr float kSqrt2OverPi = 0.79788456080286536f;   // sqrt(2 / pi)
constexpr float kGeluCubic = 0.044715f;

}  // namespace act

// Activation coefficients and blending factors (ops/activation.py: _PARAMS_DTYPE).
struct ActParams {
    float coef;       // the mode's coefficient (see act::k*); unused by the others
    float threshold;  // softplus only
    float alpha;
    float beta;       // 0: the output is not read
    int use_y;        // backward of sigmoid/tanh: derive from y instead of x
};

namespace act {

__device__ __forceinline__ float sigmoid(float x) { return 1.0f / (1.0f + expf(-x)); }

// x * s where s in [0, 1] is a gate that may underflow to 0 while |x| is infinite:
// the limit is then a signed zero, not inf * 0 = NaN.
__device__ __forceinline__ float gated(float x, float s) {
    return s == 0.0f ? copysignf(0.0f, x) : x * s;
}

template <int MODE>
__device__ __forceinline__ float forward(float x, const ActParams& p) {
    if constexpr (MODE == kRelu) {
        return x <= 0.0f ? 0.0f : x;  // NaN fails the test and passes through
    } else if constexpr (MODE == kLeakyRelu) {
        return x > 0.0f ? x : x * p.coef;
    } else if constexpr (MODE == kClippedRelu) {
        return x <= 0.0f ? 0.0f : (x >= p.coef ? p.coef : x);
    } else if constexpr (MODE == kElu) {
        return x > 0.0f ? x : p.coef * expm1f(x);
    } else if constexpr (MODE == kSigmoid) {
        return sigmoid(x);
    } else if constexpr (MODE == kTanh) {
        return tanhf(x);
    } else if constexpr (MODE == kSwish) {
        // beta == 0 must give x / 2 even for infinite x (0 * inf would be NaN)
        const float bx = p.coef == 0.0f ? 0.0f : p.coef * x;
        return gated(x, sigmoid(bx));
    } else if constexpr (MODE == kGelu) {
        return gated(x, 0.5f * erfcf(-x * kSqrtHalf));
    } else if constexpr (MODE == kGeluTanh) {
        // 0.5 (1 + tanh(u)) == sigmoid(2u), without 1 + tanh cancelling for x << 0
        const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
        return gated(x, sigmoid(2.0f * u));
    } else if constexpr (MODE == kSoftplus) {
        const float bx = p.coef * x;
        if (bx > p.threshold) return x;
        return (fmaxf(bx, 0.0f) + log1pf(expf(-fabsf(bx)))) / p.coef;
    } else {
        static_assert(MODE == kIdentity, "unknown activation mode");
        return x;
    }
}

// dx before blending: dy * f'(x). The piecewise modes select dy or 0 (as PyTorch:
// dy = inf where f' = 0 gives 0, not NaN) and return NaN for NaN x.
template <int MODE>
__device__ __forceinline__ float backward(float dy, float x, float y, const ActParams& p) {
    if constexpr (MODE == kRelu) {
        return x > 0.0f ? dy : (x <= 0.0f ? 0.0f : x);
    } else if constexpr (MODE == kLeakyRelu) {
        return x > 0.0f ? dy : (x <= 0.0f ? dy * p.coef : x);
    } else if constexpr (MODE == kClippedRelu) {
        // gradient 0 at both boundaries (PyTorch's hardtanh convention)
        return (x > 0.0f && x < p.coef) ? dy : (x != x ? x : 0.0f);
    } else if constexpr (MODE == kElu) {
        return x > 0.0f ? dy : dy * (p.coef * expf(x));  // x <= 0: the left formula, as PyTorch
    } else if constexpr (MODE == kSigmoid) {
        if (p.use_y) return dy * (y * (1.0f - y));
        const float e = expf(-fabsf(x));  // s(1-s) = e / (1+e)^2 for either sign of x
        return dy * (e / ((1.0f + e) * (1.0f + e)));
    } else if constexpr (MODE == kTanh) {
        if (p.use_y) return dy * (1.0f - y * y);
        const float e = expf(-2.0f * fabsf(x));  // sech^2 x = 4e / (1+e)^2
        return dy * (4.0f * e / ((1.0f + e) * (1.0f + e)));
    } else if constexpr (MODE == kSwish) {
        // d/dx x s(bx) = s + b x s (1 - s); at x = +-inf the limit is s itself
        const float bx = p.coef == 0.0f ? 0.0f : p.coef * x;
        const float s = sigmoid(bx), sn = sigmoid(-bx);
        const float d = isinf(x) ? s : s + (x * sn) * (p.coef * s);
        return dy * d;
    } else if constexpr (MODE == kGelu) {
        // Phi(x) + x phi(x); x * x may overflow to inf, giving phi = 0 and x * 0 = 0
        const float cdf = 0.5f * erfcf(-x * kSqrtHalf);
        const float d = isinf(x) ? cdf : cdf + x * (kInvSqrt2Pi * expf(-0.5f * x * x));
        return dy * d;
    } else if constexpr (MODE == kGeluTanh) {
        // d/dx x s(2u) = s + 2 x s (1 - s) u'; beyond |x| = 20 the second term is 0
        // in float, and u' would overflow for huge x
        float d;
        if (fabsf(x) > 20.0f) {
            d = x > 0.0f ? 1.0f : 0.0f;
        } else {
            const float u = kSqrt2OverPi * (x + kGeluCubic * x * x * x);
            const float du = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * x * x);
            const float s = sigmoid(2.0f * u), sn = sigmoid(-2.0f * u);
            d = s + 2.0f * x * s * sn * du;
        }
        return dy * d;
    } else if constexpr (MODE == kSoftplus) {
        const float bx = p.coef * x;
        return bx > p.threshold ? dy : dy * sigmoid(bx);
    } else {
        static_assert(MODE == kIdentity, "unknown activation mode");
        return dy;
    }
}

}  // namespace act
