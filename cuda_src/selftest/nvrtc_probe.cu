// NVRTC compile-check probe (tests/test_nvrtc_check.py): exercises the common header
// with float, __half and __nv_bfloat16 through cl::to_float / cl::from_float, a
// templated kernel taken by name expression and a plain extern "C" kernel.
#include "common/cudnnlite.cuh"

#ifndef PROBE_SCALE
#define PROBE_SCALE 1
#endif

// y = x * PROBE_SCALE, computed in float, stored as T.
template <typename T>
__global__ void probe_kernel(const T* __restrict__ x, T* __restrict__ y, cl::index_t n) {
    for (cl::index_t i = cl::global_thread_id(); i < n; i += cl::grid_stride()) {
        y[i] = cl::from_float<T>(cl::to_float(x[i]) * (float)PROBE_SCALE);
    }
}

// Mixed storage types in one kernel: both fp16 and bf16 conversions are instantiated.
template <typename In, typename Out>
__global__ void probe_convert(const In* __restrict__ x, Out* __restrict__ y, cl::index_t n) {
    for (cl::index_t i = cl::global_thread_id(); i < n; i += cl::grid_stride()) {
        y[i] = cl::from_float<Out>(cl::to_float(x[i]));
    }
}

extern "C" __global__ void probe_plain(float* y, cl::index_t n) {
    for (cl::index_t i = cl::global_thread_id(); i < n; i += cl::grid_stride()) {
        y[i] = (float)PROBE_SCALE;
    }
}
