// Activation functions, forward and backward, with cuDNN's blending:
//   forward   y  = alpha * f(x)          + beta * y_prior
//   backward  dx = alpha * dy * f'(x)    + beta * dx_prior
// When beta == 0 the output is never read (it may hold NaN or garbage).
//
// Kernels (T = float | __half | __nv_bfloat16 | double; MODE = one of the act::k* constants)
//   act_fwd_contig<T, MODE, VEC>   x and y contiguous. Grid-stride loop over packs of VEC
//                                  elements: VEC = 16 / sizeof(T) makes one 16-byte load
//                                  or store per operand (2 doubles, 4 floats, 8 halves)
//                                  and needs every pointer 16-byte aligned; the last
//                                  n % VEC elements form a scalar tail.
//                                  VEC = 1 is the scalar path for misaligned pointers.
//   act_fwd_strided<T, MODE>       any layout of up to 8 dims: each element's offsets come
//                                  from sizes and per-operand strides (a Layout by value);
//                                  32-bit index math when n < 2^31.
//   act_bwd_contig<T, MODE, VEC>   as act_fwd_contig; reads dy, x and (sigmoid, tanh with
//                                  p.use_y) y, writes dx
//   act_bwd_strided<T, MODE>       as act_fwd_strided, for the backward pass
//
// Defines: none. Every specialization is a template argument, so one module per dtype
// holds all kernels (cudnnlite/ops/activation.py names them, e.g. act_fwd_contig<__half, 7, 8>).
//
// Math runs in A = cl::acc_t<T> (float for float, __half and __nv_bfloat16; double for
// double), rounded once at the store; the parameters are ActParamsFor<T> (the
// coefficients and blending factors in A, so float64 gets them exactly). Numerically stable
// forms: sigmoid as 1/(1+exp(-x)) (exp overflow gives exactly 0), softplus as
// max(bx,0) + log1p(exp(-|bx|)), gelu through erfc (no cancellation for x << 0),
// gelu_tanh as x * sigmoid(2u), sigmoid'/tanh' from exp(-|x|) (no 1 - y*y cancellation).
// NaN inputs give NaN outputs and NaN gradients (identity's gradient is dy unchanged).
#include "common/activation_math.cuh"

namespace act {

constexpr int kMaxDims = 8;
constexpr int kMaxOperands = 4;  // strided operands: 0 out, 1 x, 2 dy, 3 y

}  // namespace act

// Sizes and strides in elements, innermost dimension FIRST (index 0), dims collapsed
// by the caller (ops/activation_layout.py: _LAYOUT_DTYPE).
struct Layout {
    cl::index_t size[act::kMaxDims];
    cl::index_t stride[act::kMaxOperands][act::kMaxDims];
    int ndim;
    int reserved;
};

// 16 bytes of T (VEC elements) moved by one vector instruction.
template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

namespace act {

// alpha * v + beta * prior in A, where prior is only read when beta != 0.
template <typename T>
__device__ __forceinline__ T blend(cl::acc_t<T> v, const T* prior, const ActParamsFor<T>& p) {
    typedef cl::acc_t<T> A;
    A r = p.alpha * v;
    if (p.beta != A(0)) r = cl::math::fma(p.beta, cl::to_acc(*prior), r);
    return cl::from_acc<T>(r);
}

template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> load_pack(const T* base, cl::index_t k) {
    return reinterpret_cast<const Pack<T, VEC>*>(base)[k];
}

template <typename T, int VEC>
__device__ __forceinline__ void store_pack(T* base, cl::index_t k, const Pack<T, VEC>& v) {
    reinterpret_cast<Pack<T, VEC>*>(base)[k] = v;
}

// Calls body(i, off) for every element i of [0, n) owned by this thread in a
// grid-stride loop, with off[o] the element offset of operand o (Layout order).
template <int NOPS, typename I, typename Body>
__device__ __forceinline__ void strided_loop(I n, const Layout& L, Body body) {
    const I stride = (I)cl::grid_stride();
    for (I i = (I)cl::global_thread_id(); i < n; i += stride) {
        cl::index_t off[NOPS];
#pragma unroll
        for (int o = 0; o < NOPS; ++o) off[o] = 0;
        I rem = i;
        // static indices into L keep the struct in the parameter bank (no local copy)
#pragma unroll
        for (int d = 0; d < kMaxDims; ++d) {
            if (d == L.ndim) break;
            const I size = (I)L.size[d];
            const I c = d + 1 == L.ndim ? rem : rem % size;
            rem = d + 1 == L.ndim ? 0 : rem / size;
#pragma unroll
            for (int o = 0; o < NOPS; ++o) off[o] += (cl::index_t)c * L.stride[o][d];
        }
        body(off);
    }
}

template <int NOPS, typename Body>
__device__ __forceinline__ void strided_dispatch(cl::index_t n, const Layout& L, Body body) {
    if (n <= 0x7fffffffLL) strided_loop<NOPS, unsigned>((unsigned)n, L, body);  // 32-bit div/mod
    else strided_loop<NOPS, cl::index_t>(n, L, body);
}

}  // namespace act

// ---------------------------------------------------------------- forward

template <typename T, int MODE, int VEC>
__global__ void __launch_bounds__(256) act_fwd_contig(
    // pointers
    const T* x, T* y,
    // sizes
    cl::index_t n,
    // parameters
    ActParamsFor<T> p) {
    typedef cl::acc_t<T> A;
    const cl::index_t packs = n / VEC;
    const cl::index_t stride = cl::grid_stride();
    const cl::index_t tid = cl::global_thread_id();
    for (cl::index_t k = tid; k < packs; k += stride) {
        const Pack<T, VEC> in = act::load_pack<T, VEC>(x, k);
        Pack<T, VEC> out;
        if (p.beta != A(0)) out = act::load_pack<T, VEC>(y, k);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            out.v[j] = act::blend(act::forward<MODE>(cl::to_acc(in.v[j]), p), &out.v[j], p);
        }
        act::store_pack<T, VEC>(y, k, out);
    }
    if constexpr (VEC > 1) {
        const cl::index_t i = packs * VEC + tid;  // range [packs * VEC, n): fewer than VEC
        if (i < n) y[i] = act::blend(act::forward<MODE>(cl::to_acc(x[i]), p), &y[i], p);
    }
}

template <typename T, int MODE>
__global__ void __launch_bounds__(256) act_fwd_strided(
    // pointers (to element [0, ..., 0]; strides may be negative or zero)
    const T* x, T* y,
    // sizes
    cl::index_t n, Layout L,
    // parameters
    ActParamsFor<T> p) {
    act::strided_dispatch<2>(n, L, [&](const cl::index_t (&off)[2]) {
        T* out = y + off[0];
        *out = act::blend(act::forward<MODE>(cl::to_acc(x[off[1]]), p), out, p);
    });
}

// ---------------------------------------------------------------- backward

template <typename T, int MODE, int VEC>
__global__ void __launch_bounds__(256) act_bwd_contig(
    // pointers (y is read only when p.use_y; pass any valid pointer otherwise)
    const T* dy, const T* x, const T* y, T* dx,
    // sizes
    cl::index_t n,
    // parameters
    ActParamsFor<T> p) {
    typedef cl::acc_t<T> A;
    const cl::index_t packs = n / VEC;
    const cl::index_t stride = cl::grid_stride();
    const cl::index_t tid = cl::global_thread_id();
    for (cl::index_t k = tid; k < packs; k += stride) {
        const Pack<T, VEC> g = act::load_pack<T, VEC>(dy, k);
        Pack<T, VEC> in, fy, out;
        if constexpr (MODE != act::kIdentity) in = act::load_pack<T, VEC>(x, k);
        if constexpr (MODE == act::kSigmoid || MODE == act::kTanh) {
            if (p.use_y) fy = act::load_pack<T, VEC>(y, k);
        }
        if (p.beta != A(0)) out = act::load_pack<T, VEC>(dx, k);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const A xv = MODE == act::kIdentity ? A(0) : cl::to_acc(in.v[j]);
            const A yv = (MODE == act::kSigmoid || MODE == act::kTanh) && p.use_y
                             ? cl::to_acc(fy.v[j]) : A(0);
            out.v[j] = act::blend(act::backward<MODE>(cl::to_acc(g.v[j]), xv, yv, p), &out.v[j], p);
        }
        act::store_pack<T, VEC>(dx, k, out);
    }
    if constexpr (VEC > 1) {
        const cl::index_t i = packs * VEC + tid;
        if (i < n) {
            const A yv = p.use_y ? cl::to_acc(y[i]) : A(0);
            dx[i] = act::blend(act::backward<MODE>(cl::to_acc(dy[i]), cl::to_acc(x[i]), yv, p),
                               &dx[i], p);
        }
    }
}

template <typename T, int MODE>
__global__ void __launch_bounds__(256) act_bwd_strided(
    // pointers (to element [0, ..., 0]; y is read only when p.use_y)
    const T* dy, const T* x, const T* y, T* dx,
    // sizes
    cl::index_t n, Layout L,
    // parameters
    ActParamsFor<T> p) {
    typedef cl::acc_t<T> A;
    act::strided_dispatch<4>(n, L, [&](const cl::index_t (&off)[4]) {
        T* out = dx + off[0];
        const A yv = p.use_y ? cl::to_acc(y[off[3]]) : A(0);
        *out = act::blend(act::backward<MODE>(cl::to_acc(dy[off[2]]), cl::to_acc(x[off[1]]), yv, p),
                          out, p);
    });
}
