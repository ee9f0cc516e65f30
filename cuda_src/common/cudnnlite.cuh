// cudnnlite common device header: included by every kernel source.
//
// The same file compiles under NVRTC (a GPU) and under g++ after the emulator's
// header (CUDNNLITE_EMULATOR is then defined and the CUDA language is already there).
//
// Conventions every kernel follows:
//  - dynamic shared memory is declared with DYNAMIC_SHARED(T, name), never with
//    `extern __shared__` (the emulator maps the macro to its per-block buffer);
//  - storage types are float, __half, __nv_bfloat16; arithmetic is done in float
//    through to_float() / from_float<T>();
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
#endif

namespace cl {

typedef long long index_t;   // 64-bit element indices: tensors may pass 2^31 elements

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> __device__ __forceinline__ T from_float(float v);
template <> __device__ __forceinline__ float from_float<float>(float v) { return v; }
template <> __device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }
template <> __device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
    return __float2bfloat16_rn(v);
}

// Global linear thread id and grid-wide stride, 64-bit.
__device__ __forceinline__ index_t global_thread_id() {
    return (index_t)blockIdx.x * blockDim.x + threadIdx.x;
}
__device__ __forceinline__ index_t grid_stride() { return (index_t)gridDim.x * blockDim.x; }

}  // namespace cl
