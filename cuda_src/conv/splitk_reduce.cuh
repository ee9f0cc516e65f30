// The deterministic end of a split-K reduction: out[i] = sum over splits of ws[s][i], in
// split order, rounded once to the storage type. Shared by every split-K kernel module.
#pragma once

#include "common/cudnnlite.cuh"

template <typename T>
__global__ void __launch_bounds__(256) bwd_filter_reduce(const float* __restrict__ ws,
                                                         T* __restrict__ dw, int splits,
                                                         long long count) {
    for (cl::index_t i = cl::global_thread_id(); i < count; i += cl::grid_stride()) {
        float v = 0.0f;
        for (int sp = 0; sp < splits; ++sp) v += ws[(cl::index_t)sp * count + i];
        dw[i] = cl::from_float<T>(v);
    }
}
