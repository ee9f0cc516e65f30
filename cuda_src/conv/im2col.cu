// The data-movement kernels of the cuBLAS convolution solvers
// (cudnnlite/solvers/conv/gemm_cublas.py, gemm_cublas_bwd.py): the GEMMs themselves run in
// cuBLAS (NumPy's matmul on the emulator); these kernels build the im2col matrix, fold a
// GEMM result back into dx (col2im), and apply the fused epilogue to an fp32 GEMM result
// (fp64 for T = double: the GEMM result is in cl::acc_t<T>, a DGEMM's).
//
// Column matrix layouts (ConvShape describes the FORWARD problem; images [n0, n0+images)):
//   NHWC: col[m][kk], m = (img, p, q) over the chunk's output pixels, kk = (g, r, t, c) with
//         c the channel within group g: row length C*R*S, and a group's slice (offset
//         g*Cg*R*S) matches the KRSC filter row w[k][(r, t, c)].
//   NCHW: col[img][kk][pq], kk = (c, r, t) over all C channels: a group's rows (offset
//         g*Cg*R*S) match the KCRS filter row w[k][(c, r, t)].
//
// Kernels (T = float | __half | __nv_bfloat16 | double; "fp32" below is cl::acc_t<T>,
// double for T = double):
//   im2col<T, NHWC>         one thread per col element (grid-stride, in col's memory order:
//                           coalesced stores); zeros where a tap falls in the padding.
//   col2im<T, NHWC>         dx = the sum, over the taps that reach each dx element, of the
//                           fp32 col entries (col = dy x w from the GEMM). A gather: one thread
//                           per dx element, taps in a fixed order (r, then t), a stride's gaps
//                           skipped by an exact-division test; no atomics, so the result is
//                           bitwise reproducible. The epilogue of conv_common.cuh stores it
//                           (bias[c] for conv_transpose).
//   gemm_epilogue<T>        out[i] = epilogue(acc[i]) for i < count: the fused epilogue on an
//                           fp32 GEMM result; out and z point at a chunk that starts at
//                           element `base` of the tensor, so the channel of element i is
//                           ((base + i) / inner) % channels (NHWC: inner = 1). acc may be out
//                           itself (T = float or double, in place). With an identity
//                           epilogue it is the fp32 -> T conversion of an accumulation
//                           buffer.
//
// Defines: none; one module per dtype (cudnnlite/solvers/conv/gemm_cublas.py).
// Index limits: 64-bit element offsets everywhere (the col matrix may pass 2^31 elements).
#include "conv/conv_common.cuh"

template <typename T, bool NHWC>
__global__ void __launch_bounds__(256) im2col(
    // pointers
    const T* __restrict__ x, T* __restrict__ col,
    // sizes: the forward problem, and the chunk of images
    ConvShape s, int n0, int images) {
    const cl::index_t taps = (cl::index_t)s.c * s.r * s.s;  // kk per row (all groups)
    const cl::index_t pq = (cl::index_t)s.p * s.q;
    const cl::index_t total = (cl::index_t)images * pq * taps;
    for (cl::index_t i = cl::global_thread_id(); i < total; i += cl::grid_stride()) {
        int img, p, q, c, r, t;
        cl::index_t rem;  // (32-bit divisions while the index fits: cl::div_mod)
        if (NHWC) {
            const cl::index_t m = cl::div_mod(i, taps, rem);
            int kk = (int)rem;
            const int cg = kk % s.c_per_group;
            kk /= s.c_per_group;
            t = kk % s.s, kk /= s.s;
            r = kk % s.r;
            c = (kk / s.r) * s.c_per_group + cg;
            img = (int)cl::div_mod(m, pq, rem);
            const int pix = (int)rem;
            p = pix / s.q, q = pix - p * s.q;
        } else {
            const cl::index_t row = cl::div_mod(i, pq, rem);
            const int pix = (int)rem;
            p = pix / s.q, q = pix - p * s.q;
            img = (int)cl::div_mod(row, taps, rem);
            int kk = (int)rem;
            t = kk % s.s, kk /= s.s;
            r = kk % s.r, c = kk / s.r;
        }
        const int h = p * s.stride_h - s.pad_h + r * s.dil_h;
        const int w = q * s.stride_w - s.pad_w + t * s.dil_w;
        const bool inside = h >= 0 && h < s.h && w >= 0 && w < s.w;
        col[i] = inside ? x[conv::x_offset<NHWC>(s, n0 + img, c, h, w)]
                        : cl::from_acc<T>(cl::acc_t<T>(0));
    }
}

template <typename T, bool NHWC>
__global__ void __launch_bounds__(256) col2im(
    // pointers: dx is written; bias may be any valid pointer when absent (e.has_bias says)
    const cl::acc_t<T>* __restrict__ col, T* dx, const T* bias,
    // sizes and epilogue: the forward problem, the chunk of images
    ConvShape s, EpilogueFor<T> e, int n0, int images) {
    const cl::index_t taps = (cl::index_t)s.c * s.r * s.s;
    const cl::index_t pq = (cl::index_t)s.p * s.q;
    const cl::index_t per_image = (cl::index_t)s.c * s.h * s.w;
    const cl::index_t total = (cl::index_t)images * per_image;
    for (cl::index_t i = cl::global_thread_id(); i < total; i += cl::grid_stride()) {
        int img, c, h, w;
        conv::x_coords<NHWC>(s, i, img, c, h, w);
        const int g = c / s.c_per_group, cg = c - g * s.c_per_group;
        cl::acc_t<T> acc = 0;
        for (int r = 0; r < s.r; ++r) {
            const int hp = h + s.pad_h - r * s.dil_h;
            if (hp < 0 || hp % s.stride_h) continue;
            const int p = hp / s.stride_h;
            if (p >= s.p) continue;
            for (int t = 0; t < s.s; ++t) {
                const int wq = w + s.pad_w - t * s.dil_w;
                if (wq < 0 || wq % s.stride_w) continue;
                const int q = wq / s.stride_w;
                if (q >= s.q) continue;
                cl::index_t off;
                if (NHWC) {
                    const cl::index_t m = (cl::index_t)img * pq + (cl::index_t)p * s.q + q;
                    const int kk = ((g * s.r + r) * s.s + t) * s.c_per_group + cg;
                    off = m * taps + kk;
                } else {
                    const cl::index_t kk = ((cl::index_t)c * s.r + r) * s.s + t;
                    off = ((cl::index_t)img * taps + kk) * pq + (cl::index_t)p * s.q + q;
                }
                acc += col[off];
            }
        }
        conv::store_output_inline(dx, dx, bias, e, (cl::index_t)n0 * per_image + i, c, acc);
    }
}

template <typename T>
__global__ void __launch_bounds__(256) gemm_epilogue(
    // pointers, all at the chunk's first element: acc may alias out (in place, T = float or
    // double);
    // z and bias as e says (else any valid pointer)
    const cl::acc_t<T>* acc, T* out, const T* z, const T* bias,
    // sizes and epilogue: out[i] for i < count; its channel is ((base + i) / inner) % channels
    EpilogueFor<T> e, cl::index_t base, cl::index_t count, int channels, cl::index_t inner) {
    for (cl::index_t i = cl::global_thread_id(); i < count; i += cl::grid_stride()) {
        cl::index_t k;
        cl::div_mod(cl::div_mod(base + i, inner, k), channels, k);  // ((base + i) / inner) % C
        const cl::acc_t<T> v = acc[i];
        conv::store_output_inline(out, z, bias, e, i, (int)k, v);
    }
}
