// Convolution backward data: dx = conv^T(dy, w), and the filter transform that turns
// a stride-1 backward data into a forward convolution (the rotated-forward solvers).
//
// Kernels (T = float | __half | __nv_bfloat16 | double; accumulation in cl::acc_t<T>
// (float, double for double) in a fixed order, so results are bitwise reproducible).
// ConvShape describes the FORWARD problem: h, w are dx's spatial size, p, q dy's.
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
//   bwd_data_direct_3d, rotate_filter_3d
//                             the same for 3-D (NCDHW/KCTRS, NDHWC/KTRSC): the depth taps
//                             too. Separate kernels so the 2-D ones keep no depth term.
//
// Defines: none; one module per dtype and 2-D / 3-D (cudnnlite/solvers/conv/bwd_data.py).
#include "conv/conv_common.cuh"

namespace bwd {

// D3: the depth taps too (the 2-D instantiation has no depth term).
template <typename T, bool NHWC, bool D3>
__device__ __forceinline__ void data_direct(const T* __restrict__ dy, const T* __restrict__ w,
                                            T* dx, const T* bias, const ConvShape& s,
                                            const EpilogueFor<T>& e) {
    typedef cl::acc_t<T> A;
    const cl::index_t total = (cl::index_t)s.n * s.c * s.h * s.w * (D3 ? s.d : 1);
    const int taps_d = D3 ? s.t : 1;
    for (cl::index_t i = cl::global_thread_id(); i < total; i += cl::grid_stride()) {
        int n, c, dd, h, ww;
        conv::x_coords3<NHWC, D3>(s, i, n, c, dd, h, ww);
        const int g = c / s.c_per_group, cg = c - g * s.c_per_group;
        const int k0 = g * s.k_per_group;
        const cl::index_t kstride = NHWC ? 1 : (cl::index_t)s.p * s.q * (D3 ? s.o : 1);
        const cl::index_t wkstride = (cl::index_t)s.c_per_group * s.r * s.s * taps_d;
        A acc = A(0);
        for (int td = 0; td < taps_d; ++td) {
            int o = 0;
            if (D3) {
                const int dq = dd + s.pad_d - td * s.dil_d;
                if (dq < 0 || dq % s.stride_d) continue;
                o = dq / s.stride_d;
                if (o >= s.o) continue;
            }
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
                    const T* dyp = dy + conv::y_off<NHWC, D3>(s, n, k0, o, p, q);
                    const T* wp = w + conv::w_off<NHWC, D3>(s, k0, cg, td, r, t);
                    for (int k = 0; k < s.k_per_group; ++k)
                        acc = cl::math::fma(cl::to_acc(dyp[k * kstride]),
                                            cl::to_acc(wp[k * wkstride]), acc);
                }
            }
        }
        // e.has_z is 0: z is not read
        conv::store_output_inline(dx, dx, bias, e, i, c, acc);
    }
}

template <typename T, bool NHWC, bool D3>
__device__ __forceinline__ void rotate(const T* __restrict__ w, T* __restrict__ wr,
                                       const ConvShape& s) {
    // wr is indexed as the filter of the forward problem dy -> dx: C filters of K/g taps.
    const int taps_d = D3 ? s.t : 1;
    const cl::index_t total = (cl::index_t)s.c * s.k_per_group * s.r * s.s * taps_d;
    for (cl::index_t i = cl::global_thread_id(); i < total; i += cl::grid_stride()) {
        int c, kk, td = 0, r, t;
        cl::index_t rem = i, d;  // (32-bit divisions while i fits: cl::div_mod)
        if (NHWC) {  // wr: (C, [T,] R, S, K/g)
            rem = cl::div_mod(rem, s.k_per_group, d), kk = (int)d;
            rem = cl::div_mod(rem, s.s, d), t = (int)d;
            rem = cl::div_mod(rem, s.r, d), r = (int)d;
            if (D3) rem = cl::div_mod(rem, taps_d, d), td = (int)d;
            c = (int)rem;
        } else {  // wr: (C, K/g, [T,] R, S)
            rem = cl::div_mod(rem, s.s, d), t = (int)d;
            rem = cl::div_mod(rem, s.r, d), r = (int)d;
            if (D3) rem = cl::div_mod(rem, taps_d, d), td = (int)d;
            c = (int)cl::div_mod(rem, s.k_per_group, d), kk = (int)d;
        }
        const int g = c / s.c_per_group, cg = c - g * s.c_per_group;
        const int k = g * s.k_per_group + kk;
        wr[i] = w[conv::w_off<NHWC, D3>(s, k, cg, taps_d - 1 - td, s.r - 1 - r, s.s - 1 - t)];
    }
}

}  // namespace bwd

template <typename T, bool NHWC>
__global__ void __launch_bounds__(256) bwd_data_direct(
    // pointers: dx is written; bias may be dy when absent (e.has_bias says)
    const T* __restrict__ dy, const T* __restrict__ w, T* dx, const T* bias,
    // sizes and epilogue
    ConvShape s, EpilogueFor<T> e) {
    bwd::data_direct<T, NHWC, false>(dy, w, dx, bias, s, e);
}

template <typename T, bool NHWC>
__global__ void __launch_bounds__(256) bwd_data_direct_3d(
    const T* __restrict__ dy, const T* __restrict__ w, T* dx, const T* bias, ConvShape s,
    EpilogueFor<T> e) {
    bwd::data_direct<T, NHWC, true>(dy, w, dx, bias, s, e);
}

template <typename T, bool NHWC>
__global__ void __launch_bounds__(256) rotate_filter(const T* __restrict__ w, T* __restrict__ wr,
                                                     ConvShape s) {
    bwd::rotate<T, NHWC, false>(w, wr, s);
}

template <typename T, bool NHWC>
__global__ void __launch_bounds__(256) rotate_filter_3d(const T* __restrict__ w,
                                                        T* __restrict__ wr, ConvShape s) {
    bwd::rotate<T, NHWC, true>(w, wr, s);
}
