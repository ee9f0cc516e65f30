// Shared by every convolution kernel: the problem geometry passed by value, tensor
// indexing for both layouts, and the fused epilogue
//     y = act(alpha * conv(x, w) + alpha2 * z + bias[k])
// (cuDNN's ConvolutionBiasActivationForward; z and bias optional, act any activation
// mode of cuda_src/common/activation_math.cuh, chosen at run time).
//
// Layouts: NCHW with filters KCRS, or NHWC with filters KRSC; C in the filter is the
// channels of one group (C / groups). 1-D convolutions arrive as 2-D with H = R = 1;
// 3-D ones (NCDHW/KCTRS, NDHWC/KTRSC) fill the depth fields, which 2-D sets to
// d = t = o = 1, pad_d = 0, stride_d = dil_d = 1. The depth fields come last, so 2-D
// kernels read the other fields at the offsets they always had; kernels that serve 3-D
// take it as a compile-time variant (a `_3d` kernel or a D3 template argument) and use
// the *_offset3 helpers, so their 2-D instantiations keep their integer work.
// Mirrors in Python: cudnnlite/solvers/conv/common.py (SHAPE_DTYPE, EPILOGUE_DTYPE).
#pragma once

#include "common/activation_math.cuh"

struct ConvShape {
    int n, c, h, w;              // input
    int k, r, s;                 // filters: K outputs, R x S taps
    int p, q;                    // output height, width
    int pad_h, pad_w;            // top and left padding (bottom/right follow from p, q)
    int stride_h, stride_w;
    int dil_h, dil_w;
    int groups;
    int c_per_group, k_per_group;
    int d, t, o;                 // depth: input, filter taps, output (1 in 1-D/2-D)
    int pad_d, stride_d, dil_d;  // front padding, stride and dilation along depth
};

// In the accumulation type A: float, or double for float64 (EpilogueFor<T>).
template <typename A>
struct ConvEpilogueT {
    A alpha;              // scales the convolution
    A alpha2;             // scales z (when has_z)
    ActParamsT<A> act;    // activation coefficients (act.alpha/beta unused)
    int act_mode;         // an act::k* mode; act::kIdentity for none
    int has_bias;
    int has_z;
    int reserved;
};
typedef ConvEpilogueT<float> ConvEpilogue;  // storage types float, __half, __nv_bfloat16
template <typename T> using EpilogueFor = ConvEpilogueT<cl::acc_t<T>>;

namespace conv {

// Grouped convolution on one GEMM per group: grid.y runs group-major over each group's
// `per_group` GEMM columns (or rows) in tiles of `tile`; one division per block. (The
// tensor-core kernels, tc_conv.cuh, and the fp64 DMMA kernels, dmma_implicit_gemm.cu.)
struct GroupTile {
    int g;   // the group
    int n0;  // the tile's first column within the group
};
__device__ inline GroupTile group_tile(int per_group, int tile) {
    const int tiles = (per_group + tile - 1) / tile;
    GroupTile t;
    t.g = (int)blockIdx.y / tiles;
    t.n0 = ((int)blockIdx.y - t.g * tiles) * tile;
    return t;
}

// Element offsets, 64-bit: tensors may exceed 2^31 elements.
template <bool NHWC>
__device__ __forceinline__ cl::index_t x_offset(const ConvShape& s, int n, int c, int h, int w) {
    return NHWC ? (((cl::index_t)n * s.h + h) * s.w + w) * s.c + c
                : (((cl::index_t)n * s.c + c) * s.h + h) * s.w + w;
}

template <bool NHWC>
__device__ __forceinline__ cl::index_t y_offset(const ConvShape& s, int n, int k, int p, int q) {
    return NHWC ? (((cl::index_t)n * s.p + p) * s.q + q) * s.k + k
                : (((cl::index_t)n * s.k + k) * s.p + p) * s.q + q;
}

// The (n, c, h, w) of linear element i of an input-shaped tensor in either layout (32-bit
// divisions while i fits: cl::div_mod).
template <bool NHWC>
__device__ __forceinline__ void x_coords(const ConvShape& s, cl::index_t i, int& n, int& c, int& h,
                                         int& w) {
    cl::index_t r;
    if (NHWC) {
        i = cl::div_mod(i, s.c, r), c = (int)r;
        i = cl::div_mod(i, s.w, r), w = (int)r;
        n = (int)cl::div_mod(i, s.h, r), h = (int)r;
    } else {
        i = cl::div_mod(i, s.w, r), w = (int)r;
        i = cl::div_mod(i, s.h, r), h = (int)r;
        n = (int)cl::div_mod(i, s.c, r), c = (int)r;
    }
}

// c is the channel within the group (0 .. C/groups - 1).
template <bool NHWC>
__device__ __forceinline__ cl::index_t w_offset(const ConvShape& s, int k, int c, int r, int t) {
    return NHWC ? (((cl::index_t)k * s.r + r) * s.s + t) * s.c_per_group + c
                : (((cl::index_t)k * s.c_per_group + c) * s.r + r) * s.s + t;
}

// 3-D forms (d: depth of x, o: depth of y, td: filter depth tap). With d = o = t = 1
// and d = o = td = 0 they give the 2-D offsets.
template <bool NHWC>
__device__ __forceinline__ cl::index_t x_offset3(const ConvShape& s, int n, int c, int d, int h,
                                                 int w) {
    return NHWC ? ((((cl::index_t)n * s.d + d) * s.h + h) * s.w + w) * s.c + c
                : ((((cl::index_t)n * s.c + c) * s.d + d) * s.h + h) * s.w + w;
}

template <bool NHWC>
__device__ __forceinline__ cl::index_t y_offset3(const ConvShape& s, int n, int k, int o, int p,
                                                 int q) {
    return NHWC ? ((((cl::index_t)n * s.o + o) * s.p + p) * s.q + q) * s.k + k
                : ((((cl::index_t)n * s.k + k) * s.o + o) * s.p + p) * s.q + q;
}

template <bool NHWC>
__device__ __forceinline__ cl::index_t w_offset3(const ConvShape& s, int k, int c, int td, int r,
                                                 int t) {
    return NHWC ? ((((cl::index_t)k * s.t + td) * s.r + r) * s.s + t) * s.c_per_group + c
                : ((((cl::index_t)k * s.c_per_group + c) * s.t + td) * s.r + r) * s.s + t;
}

// Offsets for kernels templated on D3: the 2-D helpers (no depth term at all) unless D3.
template <bool NHWC, bool D3>
__device__ __forceinline__ cl::index_t x_off(const ConvShape& s, int n, int c, int d, int h,
                                             int w) {
    return D3 ? x_offset3<NHWC>(s, n, c, d, h, w) : x_offset<NHWC>(s, n, c, h, w);
}

template <bool NHWC, bool D3>
__device__ __forceinline__ cl::index_t y_off(const ConvShape& s, int n, int k, int o, int p,
                                             int q) {
    return D3 ? y_offset3<NHWC>(s, n, k, o, p, q) : y_offset<NHWC>(s, n, k, p, q);
}

template <bool NHWC, bool D3>
__device__ __forceinline__ cl::index_t w_off(const ConvShape& s, int k, int c, int td, int r,
                                             int t) {
    return D3 ? w_offset3<NHWC>(s, k, c, td, r, t) : w_offset<NHWC>(s, k, c, r, t);
}

// The (n, c, d, h, w) of linear element i of an input-shaped tensor (d = 0 unless D3).
template <bool NHWC, bool D3>
__device__ __forceinline__ void x_coords3(const ConvShape& s, cl::index_t i, int& n, int& c,
                                          int& d, int& h, int& w) {
    if (!D3) {
        d = 0;
        x_coords<NHWC>(s, i, n, c, h, w);
    } else if (NHWC) {
        cl::index_t r;
        i = cl::div_mod(i, s.c, r), c = (int)r;
        i = cl::div_mod(i, s.w, r), w = (int)r;
        i = cl::div_mod(i, s.h, r), h = (int)r;
        n = (int)cl::div_mod(i, s.d, r), d = (int)r;
    } else {
        cl::index_t r;
        i = cl::div_mod(i, s.w, r), w = (int)r;
        i = cl::div_mod(i, s.h, r), h = (int)r;
        i = cl::div_mod(i, s.d, r), d = (int)r;
        n = (int)cl::div_mod(i, s.c, r), c = (int)r;
    }
}

template <typename A>
__device__ __forceinline__ A activate(int mode, A v, const ActParamsT<A>& a) {
    switch (mode) {
        case act::kRelu: return act::forward<act::kRelu>(v, a);
        case act::kLeakyRelu: return act::forward<act::kLeakyRelu>(v, a);
        case act::kClippedRelu: return act::forward<act::kClippedRelu>(v, a);
        case act::kElu: return act::forward<act::kElu>(v, a);
        case act::kSigmoid: return act::forward<act::kSigmoid>(v, a);
        case act::kTanh: return act::forward<act::kTanh>(v, a);
        case act::kSwish: return act::forward<act::kSwish>(v, a);
        case act::kGelu: return act::forward<act::kGelu>(v, a);
        case act::kGeluTanh: return act::forward<act::kGeluTanh>(v, a);
        case act::kSoftplus: return act::forward<act::kSoftplus>(v, a);
        case act::kHardtanh: return act::forward<act::kHardtanh>(v, a);
        case act::kHardswish: return act::forward<act::kHardswish>(v, a);
        case act::kHardsigmoid: return act::forward<act::kHardsigmoid>(v, a);
        case act::kMish: return act::forward<act::kMish>(v, a);
        default: return v;  // identity
    }
}

// alpha * acc + alpha2 * z + bias: the fused epilogue before its activation, from the
// residual and bias values (kernels that load them as vectors call this directly), in
// the accumulation type A (float, or double for float64).
template <typename A>
__device__ __forceinline__ A epilogue_sum(const ConvEpilogueT<A>& e, A acc, A zv, A bv) {
    A v = e.alpha * acc;
    if (e.has_z) v = cl::math::fma(e.alpha2, zv, v);
    if (e.has_bias) v += bv;
    return v;
}

namespace detail {

// The fused epilogue's arithmetic for one output element; `off` is its offset in y (and z).
// y and z may be the same array (z is out: an in-place residual; backward data blends into
// dx by passing dx as both), so neither is __restrict__ here or in the entries below.
template <typename T>
__device__ __forceinline__ void epilogue(T* y, const T* z,
                                         const T* __restrict__ bias, const EpilogueFor<T>& e,
                                         cl::index_t off, int k, cl::acc_t<T> acc) {
    typedef cl::acc_t<T> A;
    const A zv = e.has_z ? cl::to_acc(z[off]) : A(0);
    const A bv = e.has_bias ? cl::to_acc(bias[k]) : A(0);
    y[off] = cl::from_acc<T>(activate(e.act_mode, epilogue_sum(e, acc, zv, bv), e.act));
}

// One out-of-line copy per element type: the activation switch is compiled once per
// module instead of once per call site (e by value: scalarized into call registers).
template <typename T>
__device__ __noinline__ void epilogue_activated(T* y, const T* z,
                                                const T* __restrict__ bias, EpilogueFor<T> e,
                                                cl::index_t off, int k, cl::acc_t<T> acc) {
    epilogue(y, z, bias, e, off, k, acc);
}

}  // namespace detail

// The fused epilogue for one output element; `off` is its offset in y (and z). Every conv
// kernel stores through one of the two entries below; both run detail::epilogue, so
// they give identical results.
//
// store_output: for call sites that the compiler replicates (unrolled TM x TN micro-tiles,
// Winograd's m x m tiles, WMMA's store loop). Inlining the activation switch at each of
// them inlined every activation's math as often: NVRTC took up to ten times longer
// (implicit GEMM 8x8 micro-tiles) and registers ran out (WMMA fp32 used 194-255 registers
// and a 64-80 byte stack frame, 126-146 and none out of line). Here the identity case (the
// common one) stays inline, with a constant mode that folds the switch away, and any
// activation goes through one out-of-line copy per element type.
template <typename T>
__device__ __forceinline__ void store_output(T* y, const T* z,
                                             const T* __restrict__ bias, const EpilogueFor<T>& e,
                                             cl::index_t off, int k, cl::acc_t<T> acc) {
    if (e.act_mode == act::kIdentity) {
        EpilogueFor<T> plain = e;
        plain.act_mode = act::kIdentity;  // a constant the inlined switch folds
        detail::epilogue(y, z, bias, plain, off, k, acc);
    } else {
        detail::epilogue_activated(y, z, bias, e, off, k, acc);
    }
}

// store_output_inline: for a single, non-unrolled call site (direct and depthwise
// kernels). The switch is compiled once anyway, and a call would make the kernel keep
// the callee's registers (the depthwise kernels went from 32 to 48-62 registers).
template <typename T>
__device__ __forceinline__ void store_output_inline(T* y, const T* z,
                                                    const T* __restrict__ bias,
                                                    const EpilogueFor<T>& e, cl::index_t off, int k,
                                                    cl::acc_t<T> acc) {
    detail::epilogue(y, z, bias, e, off, k, acc);
}

// Advances a mixed-radix counter (hi, mid, lo) with radices (-, MID, LO) by a step
// decomposed once as (dhi, dmid, dlo), dmid < MID and dlo < LO: no division.
struct Radix3 {
    int lo, mid, hi;
    int dlo, dmid, dhi;
    int nlo, nmid;  // radices

    // Decomposes `value` and `step` (divisions: once, outside the main loop).
    __device__ __forceinline__ void init(int value, int step, int nlo_, int nmid_) {
        nlo = nlo_ > 0 ? nlo_ : 1, nmid = nmid_ > 0 ? nmid_ : 1;
        lo = value % nlo, mid = value / nlo % nmid, hi = value / nlo / nmid;
        dlo = step % nlo, dmid = step / nlo % nmid, dhi = step / nlo / nmid;
    }
    __device__ __forceinline__ void advance() {
        lo += dlo;
        const int c0 = lo >= nlo;
        lo -= c0 ? nlo : 0;
        mid += dmid + c0;
        const int c1 = mid >= nmid;
        mid -= c1 ? nmid : 0;
        hi += dhi + c1;
    }
};

// The valid taps of one stride phase along one axis (backward data by phases): the taps r
// with (phase + pad - r * dil) a multiple of the stride, r = first + i * step, i < count
// (step = stride / gcd(stride, dil); first = f when no tap reaches the phase).
struct Taps {
    int first, step, count;
};

__device__ __forceinline__ Taps phase_taps(int phase, int pad, int stride, int dil, int f) {
    int a = stride, b = dil;  // gcd(stride, dil)
    while (b) {
        const int t = a % b;
        a = b, b = t;
    }
    Taps tp;
    tp.step = stride / a;
    tp.first = f;
    for (int r = 0; r < f && r < tp.step; ++r) {
        int v = (phase + pad - r * dil) % stride;
        if (v == 0) {
            tp.first = r;
            break;
        }
    }
    tp.count = tp.first < f ? (f - 1 - tp.first) / tp.step + 1 : 0;
    return tp;
}

// Radix3 with one more digit (d0 fastest; radices n0, n1, n2), for 3-D taps and pixels.
struct Radix4 {
    int d0, d1, d2, d3;
    int s0, s1, s2, s3;
    int n0, n1, n2;

    __device__ __forceinline__ void init(int value, int step, int a, int b, int c) {
        n0 = a > 0 ? a : 1, n1 = b > 0 ? b : 1, n2 = c > 0 ? c : 1;
        d0 = value % n0, d1 = value / n0 % n1, d2 = value / n0 / n1 % n2;
        d3 = value / n0 / n1 / n2;
        s0 = step % n0, s1 = step / n0 % n1, s2 = step / n0 / n1 % n2, s3 = step / n0 / n1 / n2;
    }
    __device__ __forceinline__ void advance() {
        d0 += s0;
        const int c0 = d0 >= n0;
        d0 -= c0 ? n0 : 0;
        d1 += s1 + c0;
        const int c1 = d1 >= n1;
        d1 -= c1 ? n1 : 0;
        d2 += s2 + c1;
        const int c2 = d2 >= n2;
        d2 -= c2 ? n2 : 0;
        d3 += s3 + c2;
    }
};

}  // namespace conv
