// Self-test of the accumulation-type layer (common/cudnnlite.cuh: cl::acc_t, to_acc,
// from_acc, cl::math) for every storage type, float64 included, and of the double
// forms of the warp and atomic operations the float64 kernels use.
//
// Kernels (T = float | __half | __nv_bfloat16 | double)
//   acc_math<T>(x, y, n)   y[i*kOps + j] = op_j(x[i]) computed in acc_t<T>, rounded to T
//                          once (kOps = 12: see the table in the kernel)
//   acc_warp_sum<T>(x, block_sums, total)  each warp sums its 32 values with
//                          __shfl_xor_sync in acc_t<T>; lane 0 adds the warp's sum
//                          to block_sums[blockIdx.x] with atomicAdd on acc_t<T>
//                          and to *total (the same, grid-wide)
//   exp2_ftz_probe(x, y, n)   y[i] = cl::math::exp2_ftz(x[i]) (ex2.approx.ftz.f32)
#include "common/cudnnlite.cuh"

namespace acc_selftest {
constexpr int kOps = 12;
}

template <typename T>
__global__ void acc_math(const T* __restrict__ x, T* __restrict__ y, int n) {
    typedef cl::acc_t<T> A;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    namespace m = cl::math;
    const A v = cl::to_acc(x[i]);
    const A a = m::fabs(v);
    const A r[acc_selftest::kOps] = {
        m::exp(v),           m::expm1(v),       m::log(a + A(1)), m::log1p(a),
        m::sqrt(a),          m::rsqrt(a + A(1)), m::tanh(v),      m::erf(v),
        m::erfc(v),          m::fma(v, v, A(1)), m::fmax(v, A(0)) - m::fmin(v, A(0)),
        m::pow(a + A(1), A(0.5)) + m::copysign(A(1), v) + m::floor(v) + m::rint(v),
    };
#pragma unroll
    for (int j = 0; j < acc_selftest::kOps; ++j) y[(cl::index_t)i * acc_selftest::kOps + j] = cl::from_acc<T>(r[j]);
}

template <typename T>
__global__ void acc_warp_sum(const T* __restrict__ x, cl::acc_t<T>* block_sums,
                             cl::acc_t<T>* total, int n) {
    typedef cl::acc_t<T> A;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    A v = i < n ? cl::to_acc(x[i]) : A(0);
#pragma unroll
    for (int s = 16; s > 0; s >>= 1) v += __shfl_xor_sync(0xffffffffu, v, s);
    if ((threadIdx.x & 31) == 0) {
        atomicAdd(block_sums + blockIdx.x, v);
        atomicAdd(total, v);
    }
}

__global__ void exp2_ftz_probe(const float* __restrict__ x, float* __restrict__ y, int n) {
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] = cl::math::exp2_ftz(x[i]);
}
