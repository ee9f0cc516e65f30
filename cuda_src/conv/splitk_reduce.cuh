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

// The same where the partials' layout is not dw's: the tensor-core kernels' partials are
// KRSC over cgp channels (ws[s][k][rs * cgp + c], ws_count per split), cgp >= cg when the
// few-channel path padded x's channels; dw holds cg channels per filter, KCRS (kcrs: NCHW
// problems) or KRSC. i runs over dw, so the writes are coalesced; taps = R*S (T*R*S).
template <typename T>
__global__ void __launch_bounds__(256)
    bwd_filter_reduce_gather(const cl::acc_t<T>* __restrict__ ws, T* __restrict__ dw,
                             int splits, long long count, long long ws_count, int cg, int cgp,
                             int taps, int kcrs) {
    const int per = cg * taps;  // one filter of dw
    for (cl::index_t i = cl::global_thread_id(); i < count; i += cl::grid_stride()) {
        const cl::index_t k = i / per;
        const int rem = (int)(i - k * per);
        const int c = kcrs ? rem / taps : rem % cg, rs = kcrs ? rem % taps : rem / cg;
        const cl::index_t src = (k * taps + rs) * cgp + c;
        cl::acc_t<T> v = 0;
        for (int sp = 0; sp < splits; ++sp) v += ws[(cl::index_t)sp * ws_count + src];
        dw[i] = cl::from_acc<T>(v);
    }
}
