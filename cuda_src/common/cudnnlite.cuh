// cudnnlite common device header: included by every kernel source.
//
// The same file compiles under NVRTC (a GPU) and under g++ after the emulator's
// header (CUDNNLITE_EMULATOR is then defined and the CUDA language is already there).
//
// Conventions every kernel follows:
//  - dynamic shared memory is declared with DYNAMIC_SHARED(T, name), never with
//    `extern __shared__` (the emulator maps the macro to its per-block buffer);
//  - storage types are float, __half, __nv_bfloat16 and double. Arithmetic runs in
//    cl::acc_t<T>: float for the first three, double for double, through to_acc() /
//    from_acc<T>() and the cl::math overloads (exp, log, ... for float and double).
//    to_float() / from_float<T>() remain for code that only ever computes in float;
//    to_float(double) is deleted so a double can never silently drop to float;
//  - no inline PTX without an `#ifndef CUDNNLITE_EMULATOR` portable path.
#pragma once

#ifndef CUDNNLITE_EMULATOR
#include <cuda_fp16.h>
#include <cuda_bf16.h>
// One raw byte array shared by all kernels of a module: declaring it with a
// per-kernel type would conflict between kernels of one translation unit.
#define DYNAMIC_SHARED(T, name)                                   \
    extern __shared__ __align__(16) unsigned char cl_dynamic_smem_[]; \
    T* name = reinterpret_cast<T*>(cl_dynamic_smem_)
// The same memory, 1024-byte aligned: the 128-byte-swizzled tiles of wgmma
// (common/mma.cuh), whose XOR pattern the hardware takes from address bits 7-9.
#define DYNAMIC_SHARED_1024(T, name)                                        \
    extern __shared__ __align__(1024) unsigned char cl_dynamic_smem_1024_[]; \
    T* name = reinterpret_cast<T*>(cl_dynamic_smem_1024_)
#endif

// An occupancy hint, __launch_bounds__' minimum blocks per SM, clamped to the resident
// threads per SM of the architecture being compiled (CUDNNLITE_SM_THREADS: the runtime's
// arch table, compile_options.arch_defines; sm_75 1024, sm_86/87/89 and sm_12x 1536, sm_80
// and sm_90 2048): ptxas ignores a minimum whose threads the SM cannot hold (a warning, and
// then no register cap at all). CL_MIN_BLOCKS(256, 8) is 8 on sm_90, 6 on sm_86, 4 on
// sm_75; 0 (no hint) stays 0. The emulator compiles for no arch: 2048.
#ifndef CUDNNLITE_SM_THREADS
#define CUDNNLITE_SM_THREADS 2048
#endif
#define CL_MIN_BLOCKS(threads, blocks)                                      \
    ((blocks) * (threads) <= CUDNNLITE_SM_THREADS ? (blocks)                \
                                                   : CUDNNLITE_SM_THREADS / (threads))

namespace cl {

typedef long long index_t;   // 64-bit element indices: tensors may pass 2^31 elements

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

__device__ float to_float(double v) = delete;  // use to_acc: double computes in double

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// The type arithmetic on storage type T runs in: float, or double for double.
template <typename T> struct acc { typedef float type; };
template <> struct acc<double> { typedef double type; };
template <typename T> using acc_t = typename acc<T>::type;

__device__ __forceinline__ float to_acc(float v) { return v; }
__device__ __forceinline__ float to_acc(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_acc(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ double to_acc(double v) { return v; }

// Rounds an acc_t<T> value to T once (round to nearest even).
template <typename T> __device__ __forceinline__ T from_acc(acc_t<T> v) { return from_float<T>(v); }
template <> __device__ __forceinline__ double from_acc<double>(double v) { return v; }

// Math on acc_t values by overload: float calls the f-suffixed function, double the plain
// one. Call them qualified (cl::math::exp(x)); the float versions are what the kernels
// called before float64, so fp32 code generation is unchanged.
namespace math {
#define CL_MATH_UNARY(name)                                                          \
    __device__ __forceinline__ float name(float x) { return ::name##f(x); }         \
    __device__ __forceinline__ double name(double x) { return ::name(x); }
CL_MATH_UNARY(exp)
CL_MATH_UNARY(exp2)
CL_MATH_UNARY(expm1)
CL_MATH_UNARY(log)
CL_MATH_UNARY(log2)
CL_MATH_UNARY(log1p)
CL_MATH_UNARY(sqrt)
CL_MATH_UNARY(rsqrt)
CL_MATH_UNARY(tanh)
CL_MATH_UNARY(erf)
CL_MATH_UNARY(erfc)
CL_MATH_UNARY(fabs)
CL_MATH_UNARY(floor)
CL_MATH_UNARY(ceil)
CL_MATH_UNARY(rint)
CL_MATH_UNARY(round)
CL_MATH_UNARY(trunc)
CL_MATH_UNARY(sin)
CL_MATH_UNARY(cos)
#undef CL_MATH_UNARY
#define CL_MATH_BINARY(name)                                                         \
    __device__ __forceinline__ float name(float x, float y) { return ::name##f(x, y); } \
    __device__ __forceinline__ double name(double x, double y) { return ::name(x, y); }
CL_MATH_BINARY(fmax)
CL_MATH_BINARY(fmin)
CL_MATH_BINARY(pow)
CL_MATH_BINARY(copysign)
CL_MATH_BINARY(fmod)
#undef CL_MATH_BINARY
__device__ __forceinline__ float fma(float a, float b, float c) { return ::fmaf(a, b, c); }
__device__ __forceinline__ double fma(double a, double b, double c) { return ::fma(a, b, c); }

// 2^x with subnormal inputs and results flushed to (signed) zero: PTX ex2.approx.ftz.f32,
// one MUFU.EX2. exp2f under the library's -ftz=false wraps the same MUFU in three more
// instructions per call (a compare and two predicated multiplies that keep subnormal
// results). For softmax probabilities bound for 16-bit P fragments, where a row's largest
// probability is 1 and anything below 2^-126 vanishes in every sum it enters (the tensor-
// core attention kernels; README: deliberate differences). The emulator computes exp2f
// and flushes the same way (its exp2f is exact where the GPU's is within 2 ulp, as with
// exp2f itself). Together with mma.cuh, the only inline PTX of the library.
__device__ __forceinline__ float exp2_ftz(float x) {
#ifdef CUDNNLITE_EMULATOR
    const float y = ::exp2f(::fabsf(x) < 0x1p-126f ? 0.0f : x);
    return ::fabsf(y) < 0x1p-126f ? ::copysignf(0.0f, y) : y;
#else
    float y;
    asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
    return y;
#endif
}
}  // namespace math

// Global linear thread id and grid-wide stride, 64-bit.
__device__ __forceinline__ index_t global_thread_id() {
    return (index_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ index_t grid_stride() { return (index_t)gridDim.x * blockDim.x; }

// q = a / b and a % b (r) of non-negative a and positive b: 32-bit division (inline, about
// 20 instructions) when both fit, the 64-bit one (a call of a routine several times longer)
// only when one does not. For index decoding where most tensors have < 2^31 elements.
__device__ __forceinline__ index_t div_mod(index_t a, index_t b, index_t& r) {
    if ((((unsigned long long)a | (unsigned long long)b) >> 31) == 0) {
        const unsigned int q = (unsigned int)a / (unsigned int)b;
        r = a - (index_t)q * b;
        return q;
    }
    const index_t q = a / b;
    r = a - q * b;
    return q;
}

// Rows shared by a warp: a group of 2^group_log2 lanes (1 to 32, aligned) per row, rows in
// thread order across the grid. The row of this thread and its lane in the group; the lanes
// of rows past `rows` (in the last warp) get lane kIdleLane, past any row's items, so their
// loops run no iteration while they take part in the group's shuffles (their row is
// clamped to the last one: an address inside the tensor, never read). False when the
// thread's whole warp is past the end (it may return: whole warps leave together).
constexpr int kIdleLane = 1 << 20;
struct GroupRow {
    index_t row;
    int lane;
    int lanes;
};
__device__ __forceinline__ bool group_row(index_t rows, int group_log2, GroupRow& g) {
    const index_t t = global_thread_id();
    if (((t & ~(index_t)31) >> group_log2) >= rows) return false;
    g.lanes = 1 << group_log2;
    g.row = t >> group_log2;
    g.lane = g.row < rows ? (int)(threadIdx.x & (g.lanes - 1)) : kIdleLane;
    if (g.row >= rows) g.row = rows - 1;
    return true;
}

}  // namespace cl
