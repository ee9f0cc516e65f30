// Convolution backward data: dx = conv^T(dy, w), and the filter transform that turns
// a stride-1 backward data into a forward convolution (the rotated-forward solvers).
//
// Kernels (T = float | __half | __nv_bfloat16; fp32 accumulation in a fixed order, so
// results are bitwise reproducible). ConvShape describes the FORWARD problem: h, w are
// dx's spatial size, p, q dy's.
//   bwd_data_direct<T, NHWC>  one thread per dx element, grid-stride over dx in its
//                             memory order (coalesced stores). Gather: for each tap
//                             (r, t) the output row p = (h + pad_h - r*dil_h) / stride_h
//                             reaches h only when the division is exact (the gaps of a
//                             stride are skipped, not multiplied by zeros); it then sums
//                             over the group's K/groups output channels. The epilogue of
//                             conv_common.cuh is applied with channel c (alpha scales,
//                             bias[c] for conv_transpose; z unused).
//   rotate_filter<T, NHWC>    w (K, C/g, R, S) -> wr (C, K/g, R, S), rotated by 180 degrees
//                             and with K and C swapped within each group (KRSC -> CRSK
//                             likewise for NHWC). A stride-1 backward data is then the
//                             forward convolution of dy with wr, padding d*(f-1) - pad.
//
// Defines: none; one module per dtype (cudnnlite/solvers/conv/bwd_data.py).
#include "conv/conv_common.cuh"

template <typename T, bool NHWC>
__global__ void __launch_bounds__(256) bwd_data_direct(
    // pointers: dx is written; bias may be dy when absent (e.has_bias says)
    const T* __restrict__ dy, const T* __restrict__ w, T* dx, const T* bias,
    // sizes and epilogue
    ConvShape s, ConvEpilogue e) {
    const cl::index_t total = (cl::index_t)s.n * s.c * s.h * s.w;
    for (cl::index_t i = cl::global_thread_id(); i < total; i += cl::grid_stride()) {
        int n, c, h, ww;
        conv::x_coords<NHWC>(s, i, n, c, h, ww);
        const int g = c / s.c_per_group, cg = c - g * s.c_per_group;
        const int k0 = g * s.k_per_group;
        const cl::index_t kstride = NHWC ? 1 : (cl::index_t)s.p * s.q;
        const cl::index_t wkstride = NHWC ? (cl::index_t)s.r * s.s * s.c_per_group
                                          : (cl::index_t)s.c_per_group * s.r * s.s;
        float acc = 0.0f;
        for (int r = 0; r < s.r; ++r) {
            const int hp = h + s.pad_h - r * s.dil_h;
            if (hp < 0 || hp % s.stride_h) continue;
            const int p = hp / s.stride_h;
            if (p >= s.p) continue;
            for (int t = 0; t < s.s; ++t) {
                const int wq = ww + s.pad_w - t * s.dil_w;
                if (wq < 0 || wq % s.stride_w) continue;
                const int q = wq / s.stride_w;
                if (q >= s.q) continue;
                const T* dyp = dy + conv::y_offset<NHWC>(s, n, k0, p, q);
                const T* wp = w + conv::w_offset<NHWC>(s, k0, cg, r, t);
                for (int k = 0; k < s.k_per_group; ++k)
                    acc = fmaf(cl::to_float(dyp[k * kstride]), cl::to_float(wp[k * wkstride]),
                               acc);
            }
        }
        // e.has_z is 0: z is not read
        conv::store_output_inline(dx, dx, bias, e, i, c, acc);
    }
}

template <typename T, bool NHWC>
__global__ void __launch_bounds__(256) rotate_filter(const T* __restrict__ w, T* __restrict__ wr,
                                                     ConvShape s) {
    // wr is indexed as the filter of the forward problem dy -> dx: C filters of K/g taps.
    const cl::index_t total = (cl::index_t)s.c * s.k_per_group * s.r * s.s;
    for (cl::index_t i = cl::global_thread_id(); i < total; i += cl::grid_stride()) {
        int c, kk, r, t;
        cl::index_t rem = i;
        if (NHWC) {  // wr: (C, R, S, K/g)
            kk = (int)(rem % s.k_per_group), rem /= s.k_per_group;
            t = (int)(rem % s.s), rem /= s.s;
            r = (int)(rem % s.r), c = (int)(rem / s.r);
        } else {  // wr: (C, K/g, R, S)
            t = (int)(rem % s.s), rem /= s.s;
            r = (int)(rem % s.r), rem /= s.r;
            kk = (int)(rem % s.k_per_group), c = (int)(rem / s.k_per_group);
        }
        const int g = c / s.c_per_group, cg = c - g * s.c_per_group;
        const int k = g * s.k_per_group + kk;
        wr[i] = w[conv::w_offset<NHWC>(s, k, cg, s.r - 1 - r, s.s - 1 - t)];
    }
}
