// The deterministic end of a split-K reduction: out[i] = sum over splits of ws[s][i], in
// split order, rounded once to the storage type. Shared by every split-K kernel module.
// The partials are in cl::acc_t<T>: float, or double for T = double.
#pragma once

#include "common/cudnnlite.cuh"

template <typename T>
__global__ void __launch_bounds__(256) bwd_filter_reduce(const cl::acc_t<T>* __restrict__ ws,
                                                         T* __restrict__ dw, int splits,
                                                         long long count) {
    for (cl::index_t i = cl::global_thread_id(); i < count; i += cl::grid_stride()) {
        cl::acc_t<T> v = 0;
        for (int sp = 0; sp < splits; ++sp) v += ws[(cl::index_t)sp * count + i];
        dw[i] = cl::from_acc<T>(v);
    }
}

// The same for filters stored KCRS (NCHW problems; the tensor-core kernels' partials are
// KRSC, ws[s][k][rs * cg + c]): dw[k][c][rs], cg = C/groups channels and taps = R*S (T*R*S)
// per filter; out index i runs over KCRS, so the writes are coalesced.
template <typename T>
__global__ void __launch_bounds__(256)
    bwd_filter_reduce_kcrs(const cl::acc_t<T>* __restrict__ ws, T* __restrict__ dw, int splits,
                           long long count, int cg, int taps) {
    const int per = cg * taps;  // one filter
    for (cl::index_t i = cl::global_thread_id(); i < count; i += cl::grid_stride()) {
        const cl::index_t k = i / per;
        const int rem = (int)(i - k * per), c = rem / taps, rs = rem - c * taps;
        const cl::index_t src = k * per + (cl::index_t)rs * cg + c;
        cl::acc_t<T> v = 0;
        for (int sp = 0; sp < splits; ++sp) v += ws[(cl::index_t)sp * count + src];
        dw[i] = cl::from_acc<T>(v);
    }
}
