// What the elementwise tensor kernels (tensor.cu) and the reductions (reduce.cu) share: the
// dims limit, the op numbers and the index division.
#pragma once

namespace tens {

constexpr int kMaxDims = 8;

// op_tensor (and internal) ops
constexpr int kAdd = 0, kMul = 1, kMin = 2, kMax = 3, kSqrt = 4, kNot = 5;
constexpr int kCopy = 6;  // C = alpha1 * A (+ beta C): add_tensor, scale_tensor
constexpr int kSet = 7;   // C = alpha1: set_tensor
// min / max with cuDNN's CUDNN_NOT_PROPAGATE_NAN: a NaN operand gives the other one
// (fmin / fmax). kMin / kMax propagate NaN, as PyTorch's minimum / maximum.
constexpr int kMinNum = 8, kMaxNum = 9;

// reduce ops
constexpr int kRSum = 0, kRMul = 1, kRMin = 2, kRMax = 3, kRAmax = 4, kRAvg = 5, kRNorm1 = 6,
              kRNorm2 = 7, kRMulNoZeros = 8;
// kRMin / kRMax / kRAmax with CUDNN_NOT_PROPAGATE_NAN: NaN elements lose to numbers (a
// range of only NaN still gives NaN)
constexpr int kRMinNum = 9, kRMaxNum = 10, kRAmaxNum = 11;


// q = a / b and a % b of non-negative a, b: 32-bit division (inline, a few instructions)
// when both fit, the 64-bit one (a call of a long routine) only when one does not.
__device__ __forceinline__ cl::index_t div_mod(cl::index_t a, cl::index_t b, cl::index_t& rem) {
    if ((((unsigned long long)a | (unsigned long long)b) >> 31) == 0) {
        const unsigned int q = (unsigned int)a / (unsigned int)b;
        rem = a - (cl::index_t)q * b;
        return q;
    }
    const cl::index_t q = a / b;
    rem = a - q * b;
    return q;
}

}  // namespace tens
