// What the elementwise tensor kernels (tensor.cu) and the reductions (reduce.cu) share: the
// dims limit and the op numbers.
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

}  // namespace tens
