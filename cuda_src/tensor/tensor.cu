// cuDNN's elementwise tensor operations as kernels over strided tensors (strides in elements;
// 0 strides broadcast; ops/tensor.py collapses dims and orders them, innermost FIRST in the
// structs). The reductions are in reduce.cu.
//
//   tensor_binary<T>           C = op(alpha1 * A, alpha2 * B) + beta * C, any strides, up to 8
//                              dims (add_tensor, op_tensor, scale_tensor, set_tensor); C is read
//                              only when beta != 0; B only by binary ops, A not by kSet.
//   tensor_binary_vec<T, VEC>  the same when A, B, C are contiguous in one order, same shape and
//                              16-byte aligned: 16-byte loads and stores, scalar tail.
//   tensor_channel<T, VEC>     the common bias case: C contiguous, the full operand(s)
//                              laid out like C, the other a per-channel vector (NCHW:
//                              channel (i / inner) % C, NHWC: i % C) found with 32-bit
//                              multiply-shift division (no 64-bit div/mod per element);
//                              VEC > 1: 16-byte packs when a pack stays in one channel (NCHW,
//                              inner % VEC == 0) or covers VEC consecutive channels (NHWC).
//   tensor_transform<TI, TO>   Y = alpha * X + beta * Y with conversion TI -> TO and any two
//                              layouts (strided copies); the destination is walked in its own
//                              memory order, so its stores coalesce.
//   tensor_transpose<TI, TO>   the same when the layout change is a transpose of the two
//                              innermost dims of a batch (NCHW <-> NHWC: [N, C, HW] <->
//                              [N, HW, C]): 32x32 tiles through shared memory (+1 column
//                              against bank conflicts), coalesced reads AND writes, 32x8
//                              threads, 4 elements per thread and direction.
// T = float | __half | __nv_bfloat16 | double. Arithmetic runs in cl::acc_t<T> (float, or
// double for double) with the scalars (alpha, beta) of that type: OpParamsT<A>. A
// conversion TI -> TO computes in double when either side is double (tens::cvt_acc), so it
// rounds once, straight to TO.
// Op numbers (tensor_common.cuh): the order of OP_TENSOR_OPS in ops/tensor.py.
// Defines: none (one module per dtype T; the transform kernels of a module are those with
// TO = T, for every TI).
#include "common/cudnnlite.cuh"
#include "tensor/tensor_common.cuh"


// ops/tensor.py: _LAYOUT_DTYPE (operands: 0 C / Y, 1 A / X, 2 B).
struct TensorLayout {
    cl::index_t size[tens::kMaxDims];
    cl::index_t stride[3][tens::kMaxDims];
    int ndim;
    int reserved;
};

// ops/tensor.py: _OP_DTYPE (A = float) and _OP_DTYPE64 (A = double).
template <typename A>
struct OpParamsT {
    A alpha1;
    A alpha2;
    A beta;
    int op;
};

// ops/tensor.py: _CHANNEL_DTYPE. C (n elements, n < 2^31) is contiguous; the vector operand
// holds one value per channel; channel of element i = (i / inner) % channels. Divisions by
// multiply-shift: q = (umulhi(n, mul) + n) >> shift, exact for n, d < 2^31.
struct ChannelShape {
    unsigned int n;
    unsigned int inner;
    unsigned int inner_mul;
    unsigned int channels;
    unsigned int channels_mul;
    int inner_shift;
    int channels_shift;
    int vector_operand;  // 1: a is the per-channel vector (b, if read, is full); 2: b is
};

// ops/tensor.py: _TRANSPOSE_DTYPE. y[b][r][c] = x[b * x_batch + c * x_col + r]: x's rows are
// y's columns; x is contiguous along r, y along c.
struct TransposeShape {
    cl::index_t batch, rows, cols;
    cl::index_t x_batch, x_col;
    cl::index_t y_batch, y_row;
    cl::index_t tiles_r, tiles_c;  // ceil(rows / 32), ceil(cols / 32)
};

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) TPack {
    T v[VEC];
};

namespace tens {

// The arithmetic type of a conversion TI -> TO: double when either side is double.
template <typename TI, typename TO> struct cvt_acc { typedef cl::acc_t<TO> type; };
template <typename TO> struct cvt_acc<double, TO> { typedef double type; };

// Rounds an arithmetic value to storage TO once (double -> __half / bf16 directly, not
// through float, which could round twice).
template <typename TO> __device__ __forceinline__ TO round_to(float v) { return cl::from_float<TO>(v); }
template <typename TO> __device__ __forceinline__ TO round_to(double v);
template <> __device__ __forceinline__ double round_to<double>(double v) { return v; }
template <> __device__ __forceinline__ float round_to<float>(double v) { return (float)v; }
template <> __device__ __forceinline__ __half round_to<__half>(double v) { return __double2half(v); }
template <> __device__ __forceinline__ __nv_bfloat16 round_to<__nv_bfloat16>(double v) {
    return __double2bfloat16(v);
}

template <typename A>
__device__ __forceinline__ A binary(int op, A a, A b) {
    switch (op) {
        case kAdd: return a + b;
        case kMul: return a * b;
        case kMin: return (a != a || b != b) ? a + b : cl::math::fmin(a, b);  // NaN wins
        case kMax: return (a != a || b != b) ? a + b : cl::math::fmax(a, b);
        case kMinNum: return cl::math::fmin(a, b);
        case kMaxNum: return cl::math::fmax(a, b);
        case kSqrt: return cl::math::sqrt(a);
        case kNot: return A(1) - a;
        default: return a;  // kCopy, kSet (a is alpha1 itself)
    }
}

template <typename A>
__device__ __forceinline__ A apply(const OpParamsT<A>& p, A a, A b) {
    return binary(p.op, p.op == kSet ? p.alpha1 : p.alpha1 * a, p.alpha2 * b);
}

__device__ __forceinline__ bool reads_b(int op) { return op <= kMax || op >= kMinNum; }

// Offsets of operands 0..NOPS-1 of linear index i (innermost dim first).
template <int NOPS>
__device__ __forceinline__ void offsets(cl::index_t i, const TensorLayout& L, cl::index_t (&off)[NOPS]) {
#pragma unroll
    for (int o = 0; o < NOPS; ++o) off[o] = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
        if (d == L.ndim) break;
        cl::index_t c = i;
        if (d + 1 < L.ndim) i = cl::div_mod(i, L.size[d], c);
#pragma unroll
        for (int o = 0; o < NOPS; ++o) off[o] += c * L.stride[o][d];
    }
}

}  // namespace tens

template <typename T>
__global__ void __launch_bounds__(256) tensor_binary(
    // pointers (a and b may be any valid pointer when the op does not read them)
    const T* a, const T* b, T* c,
    // sizes
    cl::index_t n, TensorLayout L,
    // parameters
    OpParamsT<cl::acc_t<T>> p) {
    typedef cl::acc_t<T> A;
    const bool reads_a = p.op != tens::kSet;
    const bool reads_b = tens::reads_b(p.op);
    for (cl::index_t i = cl::global_thread_id(); i < n; i += cl::grid_stride()) {
        cl::index_t off[3];
        tens::offsets<3>(i, L, off);
        const A av = reads_a ? cl::to_acc(a[off[1]]) : A(0);
        const A bv = reads_b ? cl::to_acc(b[off[2]]) : A(0);
        A r = tens::apply(p, av, bv);
        if (p.beta != A(0)) r = cl::math::fma(p.beta, cl::to_acc(c[off[0]]), r);
        c[off[0]] = cl::from_acc<T>(r);
    }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(256) tensor_binary_vec(
    // pointers
    const T* a, const T* b, T* c,
    // sizes
    cl::index_t n,
    // parameters
    OpParamsT<cl::acc_t<T>> p) {
    typedef cl::acc_t<T> A;
    const bool reads_a = p.op != tens::kSet;
    const bool reads_b = tens::reads_b(p.op);
    const cl::index_t packs = n / VEC;
    for (cl::index_t k = cl::global_thread_id(); k < packs; k += cl::grid_stride()) {
        TPack<T, VEC> pa, pb, pc;
        if (reads_a) pa = reinterpret_cast<const TPack<T, VEC>*>(a)[k];
        if (reads_b) pb = reinterpret_cast<const TPack<T, VEC>*>(b)[k];
        if (p.beta != A(0)) pc = reinterpret_cast<const TPack<T, VEC>*>(c)[k];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            A r = tens::apply(p, reads_a ? cl::to_acc(pa.v[j]) : A(0),
                              reads_b ? cl::to_acc(pb.v[j]) : A(0));
            if (p.beta != A(0)) r = cl::math::fma(p.beta, cl::to_acc(pc.v[j]), r);
            pc.v[j] = cl::from_acc<T>(r);
        }
        reinterpret_cast<TPack<T, VEC>*>(c)[k] = pc;
    }
    const cl::index_t i = packs * VEC + cl::global_thread_id();  // the tail: fewer than VEC
    if (i < n) {
        A r = tens::apply(p, reads_a ? cl::to_acc(a[i]) : A(0), reads_b ? cl::to_acc(b[i]) : A(0));
        if (p.beta != A(0)) r = cl::math::fma(p.beta, cl::to_acc(c[i]), r);
        c[i] = cl::from_acc<T>(r);
    }
}

namespace tens {
__device__ __forceinline__ unsigned int fdiv(unsigned int n, unsigned int mul, int shift) {
    return (__umulhi(n, mul) + n) >> shift;
}
}  // namespace tens

template <typename T, int VEC>
__global__ void __launch_bounds__(256) tensor_channel(
    // pointers (the vector operand has `channels` elements; others are laid out like c)
    const T* a, const T* b, T* c,
    // sizes
    ChannelShape S,
    // parameters
    OpParamsT<cl::acc_t<T>> p) {
    typedef cl::acc_t<T> A;
    const bool reads_a = p.op != tens::kSet;
    const bool reads_b = tens::reads_b(p.op);
    const bool vec_is_a = S.vector_operand == 1;
    const T* vec = vec_is_a ? a : b;
    const T* full = vec_is_a ? b : a;
    const bool reads_vec = vec_is_a ? reads_a : reads_b;
    const bool reads_full = vec_is_a ? reads_b : reads_a;
    const unsigned int packs = S.n / VEC;  // ops/tensor.py: n % VEC == 0
    const unsigned int stride = gridDim.x * blockDim.x;
    for (unsigned int k = blockIdx.x * blockDim.x + threadIdx.x; k < packs; k += stride) {
        const unsigned int q = tens::fdiv(k * VEC, S.inner_mul, S.inner_shift);
        const unsigned int ch = q - S.channels * tens::fdiv(q, S.channels_mul, S.channels_shift);
        TPack<T, VEC> pf, pc;
        if (reads_full) pf = reinterpret_cast<const TPack<T, VEC>*>(full)[k];
        if (p.beta != A(0)) pc = reinterpret_cast<const TPack<T, VEC>*>(c)[k];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            // VEC > 1: one channel per pack (inner % VEC == 0) or VEC channels (inner == 1)
            const A vv = reads_vec ? cl::to_acc(vec[S.inner == 1 ? ch + j : ch]) : A(0);
            const A fv = reads_full ? cl::to_acc(pf.v[j]) : A(0);
            A r = tens::apply(p, vec_is_a ? vv : fv, vec_is_a ? fv : vv);
            if (p.beta != A(0)) r = cl::math::fma(p.beta, cl::to_acc(pc.v[j]), r);
            pc.v[j] = cl::from_acc<T>(r);
        }
        reinterpret_cast<TPack<T, VEC>*>(c)[k] = pc;
    }
}

template <typename TI, typename TO>
__global__ void __launch_bounds__(256) tensor_transform(
    // pointers
    const TI* x, TO* y,
    // sizes
    cl::index_t n, TensorLayout L,
    // parameters (alpha1, beta; op unused)
    OpParamsT<typename tens::cvt_acc<TI, TO>::type> p) {
    typedef typename tens::cvt_acc<TI, TO>::type A;
    for (cl::index_t i = cl::global_thread_id(); i < n; i += cl::grid_stride()) {
        cl::index_t off[2];
        tens::offsets<2>(i, L, off);
        A r = p.alpha1 * (A)cl::to_acc(x[off[1]]);
        if (p.beta != A(0)) r = cl::math::fma(p.beta, (A)cl::to_acc(y[off[0]]), r);
        y[off[0]] = tens::round_to<TO>(r);
    }
}

// 32x8 threads per 32x32 tile; a grid-stride loop over (batch, row tile, column tile).
template <typename TI, typename TO>
__global__ void __launch_bounds__(256) tensor_transpose(
    // pointers
    const TI* x, TO* y,
    // sizes
    TransposeShape S,
    // parameters (alpha1, beta; op unused)
    OpParamsT<typename tens::cvt_acc<TI, TO>::type> p) {
    typedef typename tens::cvt_acc<TI, TO>::type A;
    __shared__ A tile[32][33];  // [column][row]; +1: the column-wise reads hit 32 banks
    const cl::index_t per_batch = S.tiles_r * S.tiles_c, tiles = S.batch * per_batch;
    const int tx = threadIdx.x, ty = threadIdx.y;
    for (cl::index_t t = blockIdx.x; t < tiles; t += gridDim.x) {
        const cl::index_t b = t / per_batch, rem = t - b * per_batch;
        const cl::index_t tr = rem / S.tiles_c;
        const cl::index_t r0 = tr * 32, c0 = (rem - tr * S.tiles_c) * 32;
        const TI* xb = x + b * S.x_batch;
        const cl::index_t r = r0 + tx;  // lanes along x's contiguous dim
#pragma unroll
        for (int k = ty; k < 32; k += 8) {
            const cl::index_t col = c0 + k;
            if (r < S.rows && col < S.cols) tile[k][tx] = (A)cl::to_acc(xb[col * S.x_col + r]);
        }
        __syncthreads();
        TO* yb = y + b * S.y_batch;
        const cl::index_t col = c0 + tx;  // lanes along y's contiguous dim
#pragma unroll
        for (int k = ty; k < 32; k += 8) {
            const cl::index_t row = r0 + k;
            if (row < S.rows && col < S.cols) {
                TO* dst = yb + row * S.y_row + col;
                A v = p.alpha1 * tile[tx][k];
                if (p.beta != A(0)) v = cl::math::fma(p.beta, (A)cl::to_acc(*dst), v);
                *dst = tens::round_to<TO>(v);
            }
        }
        __syncthreads();  // the tile is refilled by the next iteration
    }
}
