// cuDNN's tensor operations as kernels over strided tensors (strides in elements; 0 strides
// broadcast; ops/tensor.py collapses dims and orders them, innermost FIRST in the structs).
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
//   tensor_reduce_{thread,warp,block}<T, OP>
//                              C = alpha * reduce(A over the reduced dims) + beta * C, with
//                              the flattened (C-order over the reduced axes) index of the
//                              min / max / amax element when `indices` is not null. thread: one
//                              output per thread (the contiguous dim is kept: coalesced across
//                              outputs); warp / block: one output per warp / block (the
//                              contiguous dim is reduced: coalesced across lanes).
//   tensor_reduce_split_{block,thread}<T, OP> + tensor_reduce_finish<T, OP>
//                              few outputs, long reductions (sum of everything, per-channel
//                              sums over N, H, W): grid (chunks, outputs or output groups);
//                              each block reduces one chunk of the reduced range into an
//                              (acc_t<T> value, int64 index) workspace [outputs][chunks];
//                              finish (one warp per output, fixed order) combines a row of
//                              partials and stores. Deterministic: no atomics. split_block: lanes walk the
//                              reduced range; split_thread: threads walk outputs (the kept
//                              contiguous dim), each over its chunk.
//                              OP (tens::kR*): one kernel per op, holding that op's code
//                              only. Threads walk the reduced elements digit by digit
//                              (tens::ReducedWalk: no division per element).
// T = float | __half | __nv_bfloat16 | double. Arithmetic runs in cl::acc_t<T> (float, or
// double for double) with the scalars (alpha, beta) of that type: OpParamsT<A>,
// ReduceLayoutT<A>, reduction partials in A. A conversion TI -> TO computes in double when
// either side is double (tens::cvt_acc), so it rounds once, straight to TO.
// Op numbers: the order of OP_TENSOR_OPS in ops/tensor.py / REDUCE_OPS in ops/reduce.py.
// Defines: none (one module per dtype T; the transform kernels of a module are those with
// TO = T, for every TI).
#include "common/cudnnlite.cuh"

namespace tens {

constexpr int kMaxDims = 8;

// op_tensor (and internal) ops
constexpr int kAdd = 0, kMul = 1, kMin = 2, kMax = 3, kSqrt = 4, kNot = 5;
constexpr int kCopy = 6;  // C = alpha1 * A (+ beta C): add_tensor, scale_tensor
constexpr int kSet = 7;   // C = alpha1: set_tensor
// min / max with cuDNN's CUDNN_NOT_PROPAGATE_NAN: a NaN operand gives the other one
// (fmin / fmax). kMin / kMax propagate NaN, as PyTorch's minimum / maximum.
constexpr int kMinNum = 8, kMaxNum = 9;

// reduce ops
constexpr int kRSum = 0, kRMul = 1, kRMin = 2, kRMax = 3, kRAmax = 4, kRAvg = 5, kRNorm1 = 6,
              kRNorm2 = 7, kRMulNoZeros = 8;
// kRMin / kRMax / kRAmax with CUDNN_NOT_PROPAGATE_NAN: NaN elements lose to numbers (a
// range of only NaN still gives NaN)
constexpr int kRMinNum = 9, kRMaxNum = 10, kRAmaxNum = 11;

}  // namespace tens

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

// ops/reduce.py: _REDUCE_DTYPE (A = float) and _REDUCE_DTYPE64 (A = double). Kept dims
// index the outputs; reduced dims (innermost first, in the original axis order, neighbours
// that are contiguous merged) index the elements of one output. The op is the kernels'
// template parameter OP.
template <typename A>
struct ReduceLayoutT {
    cl::index_t ksize[tens::kMaxDims];
    cl::index_t kstride_in[tens::kMaxDims];
    cl::index_t kstride_out[tens::kMaxDims];
    cl::index_t rsize[tens::kMaxDims];
    cl::index_t rstride[tens::kMaxDims];
    cl::index_t rstep[tens::kMaxDims];  // the launched kernel's step over the reduced
                                        // elements (1, 32 or blockDim.x) in rsize's digits
    cl::index_t outputs;  // product of ksize
    cl::index_t count;    // product of rsize
    A alpha;
    A beta;
    int kndim;
    int rndim;
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

// q = a / b and a % b of non-negative a, b: 32-bit division (inline, a few instructions)
// when both fit, the 64-bit one (a call of a long routine) only when one does not.
__device__ __forceinline__ cl::index_t div_mod(cl::index_t a, cl::index_t b, cl::index_t& rem) {
    if ((((unsigned long long)a | (unsigned long long)b) >> 31) == 0) {
        const unsigned int q = (unsigned int)a / (unsigned int)b;
        rem = a - (cl::index_t)q * b;
        return q;
    }
    const cl::index_t q = a / b;
    rem = a - q * b;
    return q;
}

// Offsets of operands 0..NOPS-1 of linear index i (innermost dim first).
template <int NOPS>
__device__ __forceinline__ void offsets(cl::index_t i, const TensorLayout& L, cl::index_t (&off)[NOPS]) {
#pragma unroll
    for (int o = 0; o < NOPS; ++o) off[o] = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
        if (d == L.ndim) break;
        cl::index_t c = i;
        if (d + 1 < L.ndim) i = div_mod(i, L.size[d], c);
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

// ---------------------------------------------------------------- reductions

template <typename A>
struct RAcc {
    A v;
    long long i;  // index of the chosen element (min / max / amax); LLONG_MAX: none yet
};

namespace tens {

__device__ __forceinline__ bool is_arg(int op) {
    return op == kRMin || op == kRMax || op == kRAmax || op >= kRMinNum;
}

constexpr long long kNoIndex = 0x7fffffffffffffffLL;  // RAcc::i before any element

template <typename A>
__device__ __forceinline__ RAcc<A> rinit(int op) {
    RAcc<A> a;
    a.i = kNoIndex;
    switch (op) {
        case kRMul: case kRMulNoZeros: a.v = A(1); break;
        case kRMin: case kRMinNum: a.v = A(__int_as_float(0x7f800000)); break;  // +inf
        case kRMax: case kRAmax: case kRMaxNum: case kRAmaxNum:
            a.v = A(__int_as_float(0xff800000)); break;  // -inf
        default: a.v = A(0);
    }
    return a;
}

// Min / max by (value, index): NaN beats numbers (it propagates; the *Num ops: numbers
// beat NaN, NaN beats only "no element yet"), ties go to the lower index: a strict total
// order, so the result does not depend on the order of combination.
template <typename A>
__device__ __forceinline__ bool better(int op, const RAcc<A>& b, const RAcc<A>& a) {
    const bool bn = b.v != b.v, an = a.v != a.v;
    if (bn || an) {
        if (op < kRMinNum) return bn && (!an || b.i < a.i);
        if (bn && an) return b.i < a.i;
        return bn ? a.i == kNoIndex : b.i != kNoIndex;
    }
    if (b.v == a.v) return b.i < a.i;
    return op == kRMin || op == kRMinNum ? b.v < a.v : b.v > a.v;
}

template <typename A>
__device__ __forceinline__ RAcc<A> rcombine(int op, RAcc<A> a, const RAcc<A>& b) {
    if (is_arg(op)) return better(op, b, a) ? b : a;
    if (op == kRMul || op == kRMulNoZeros) a.v *= b.v;
    else a.v += b.v;
    return a;
}

template <typename A>
__device__ __forceinline__ void radd(int op, RAcc<A>& a, A x, long long i) {
    switch (op) {
        case kRAmax: case kRAmaxNum: x = cl::math::fabs(x);  // fall through
        case kRMin: case kRMax: case kRMinNum: case kRMaxNum: {
            RAcc<A> b;
            b.v = x;
            b.i = i;
            if (better(op, b, a)) a = b;
            break;
        }
        case kRMul: a.v *= x; break;
        case kRMulNoZeros: if (x != A(0)) a.v *= x; break;
        case kRNorm1: a.v += cl::math::fabs(x); break;
        case kRNorm2: a.v = cl::math::fma(x, x, a.v); break;
        default: a.v += x;  // sum, avg
    }
}

template <typename A>
__device__ __forceinline__ RAcc<A> shfl_xor(RAcc<A> a, int m) {
    a.v = __shfl_xor_sync(0xffffffffu, a.v, m);
    a.i = __shfl_xor_sync(0xffffffffu, a.i, m);
    return a;
}

// The input and output offsets of output o (kept dims, innermost first).
template <typename A>
__device__ __forceinline__ void output_offsets(cl::index_t o, const ReduceLayoutT<A>& R,
                                               cl::index_t& in, cl::index_t& out) {
    in = 0;
    out = 0;
#pragma unroll
    for (int d = 0; d < kMaxDims; ++d) {
        if (d == R.kndim) break;
        cl::index_t c = o;
        if (d + 1 < R.kndim) o = div_mod(o, R.ksize[d], c);
        in += c * R.kstride_in[d];
        out += c * R.kstride_out[d];
    }
}

// The offsets of reduced elements r0, r0 + step, r0 + 2 step, ... (step: R.rstep, in
// digits), walked like an odometer: each step adds the step's digits with carries (an add,
// a compare and a multiply-add per reduced dim), where recomputing an offset from r would
// divide by every dim's size. Only the outermost digit grows past its dim (past the last
// element, whose offset is never read). ND: the reduced dims when known at compile time
// (the common 1, 2, 3: a short loop without the other dims' steps), 0: R.rndim of them.
template <int ND, typename A>
struct ReducedWalk {
    cl::index_t digit[ND > 0 ? ND : kMaxDims];
    cl::index_t off;

    __device__ __forceinline__ int dims(const ReduceLayoutT<A>& R) const {
        return ND > 0 ? ND : R.rndim;
    }

    __device__ __forceinline__ ReducedWalk(const ReduceLayoutT<A>& R, cl::index_t r) {
        off = 0;
#pragma unroll
        for (int d = 0; d < (ND > 0 ? ND : kMaxDims); ++d) {
            digit[d] = 0;
            if (d >= dims(R)) continue;
            cl::index_t c = r;
            if (d + 1 < dims(R)) r = div_mod(r, R.rsize[d], c);
            digit[d] = c;
            off += c * R.rstride[d];
        }
    }

    __device__ __forceinline__ void next(const ReduceLayoutT<A>& R) {
        cl::index_t carry = 0;
#pragma unroll
        for (int d = 0; d < (ND > 0 ? ND : kMaxDims); ++d) {
            if (d == dims(R)) break;
            const cl::index_t add = R.rstep[d] + carry;
            digit[d] += add;
            off += add * R.rstride[d];
            carry = 0;
            if (d + 1 < dims(R) && digit[d] >= R.rsize[d]) {
                digit[d] -= R.rsize[d];
                off -= R.rsize[d] * R.rstride[d];
                carry = 1;
            }
        }
    }
};

template <int ND, typename T>
__device__ __forceinline__ void reduce_walk(int OP, RAcc<cl::acc_t<T>>& acc, const T* base,
                                            const ReduceLayoutT<cl::acc_t<T>>& R,
                                            cl::index_t r, cl::index_t end, cl::index_t step) {
    ReducedWalk<ND, cl::acc_t<T>> w(R, r);
    for (;;) {
        radd(OP, acc, cl::to_acc(base[w.off]), r);
        r += step;
        if (r >= end) break;
        w.next(R);
    }
}

// Elements [r0, end) of one output's reduced range, by the kernel's step (R.rstep, whose
// value is `step`). After ops/reduce.py merged contiguous dims, most reductions walk one
// or two dims.
template <typename T>
__device__ __forceinline__ RAcc<cl::acc_t<T>> reduce_span(int OP, const T* base,
                                                          const ReduceLayoutT<cl::acc_t<T>>& R,
                                                          cl::index_t r0, cl::index_t end,
                                                          cl::index_t step) {
    RAcc<cl::acc_t<T>> acc = rinit<cl::acc_t<T>>(OP);
    if (r0 >= end) return acc;
    switch (R.rndim) {
        case 0:  // (one element: rsize, rstride and rstep are 0)
        case 1: reduce_walk<1>(OP, acc, base, R, r0, end, step); break;
        case 2: reduce_walk<2>(OP, acc, base, R, r0, end, step); break;
        case 3: reduce_walk<3>(OP, acc, base, R, r0, end, step); break;
        default: reduce_walk<0>(OP, acc, base, R, r0, end, step);
    }
    return acc;
}

template <typename A>
__device__ __forceinline__ RAcc<A> warp_reduce(int op, RAcc<A> acc) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) acc = rcombine(op, acc, shfl_xor(acc, m));
    return acc;
}

template <typename T>
__device__ __forceinline__ void reduce_store(int OP, RAcc<cl::acc_t<T>> acc,
                                             const ReduceLayoutT<cl::acc_t<T>>& R, T* c,
                                             long long* indices, cl::index_t out) {
    typedef cl::acc_t<T> A;
    A v = acc.v;
    if (OP == kRAvg) v = v / (A)R.count;
    if (OP == kRNorm2) v = cl::math::sqrt(v);
    A r = R.alpha * v;
    if (R.beta != A(0)) r = cl::math::fma(R.beta, cl::to_acc(c[out]), r);
    c[out] = cl::from_acc<T>(r);
    if (indices != nullptr) indices[out] = acc.i;
}

}  // namespace tens

template <typename T, int OP>
__global__ void __launch_bounds__(256) tensor_reduce_thread(
    // pointers (indices: null, or one per output, laid out like c)
    const T* a, T* c, long long* indices,
    // sizes and parameters (R.rstep: 1)
    ReduceLayoutT<cl::acc_t<T>> R) {
    for (cl::index_t o = cl::global_thread_id(); o < R.outputs; o += cl::grid_stride()) {
        cl::index_t in, out;
        tens::output_offsets(o, R, in, out);
        tens::reduce_store(OP, tens::reduce_span(OP, a + in, R, 0, R.count, 1), R, c, indices,
                               out);
    }
}

template <typename T, int OP>
__global__ void __launch_bounds__(256) tensor_reduce_warp(
    // pointers
    const T* a, T* c, long long* indices,
    // sizes and parameters (R.rstep: 32)
    ReduceLayoutT<cl::acc_t<T>> R) {
    const cl::index_t warps = (cl::index_t)gridDim.x * (blockDim.x >> 5);
    const int lane = threadIdx.x & 31;
    for (cl::index_t o = cl::global_thread_id() >> 5; o < R.outputs; o += warps) {
        cl::index_t in, out;
        tens::output_offsets(o, R, in, out);
        RAcc<cl::acc_t<T>> acc = tens::reduce_span(OP, a + in, R, lane, R.count, 32);
        acc = tens::warp_reduce(OP, acc);
        if (lane == 0) tens::reduce_store(OP, acc, R, c, indices, out);
    }
}

template <typename T, int OP>
__global__ void __launch_bounds__(256) tensor_reduce_block(
    // pointers
    const T* a, T* c, long long* indices,
    // sizes and parameters (R.rstep: blockDim.x)
    ReduceLayoutT<cl::acc_t<T>> R) {
    __shared__ RAcc<cl::acc_t<T>> red[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (cl::index_t o = blockIdx.x; o < R.outputs; o += gridDim.x) {
        cl::index_t in, out;
        tens::output_offsets(o, R, in, out);
        RAcc<cl::acc_t<T>> acc =
            tens::reduce_span(OP, a + in, R, threadIdx.x, R.count, blockDim.x);
        acc = tens::warp_reduce(OP, acc);
        if (lane == 0) red[warp] = acc;
        __syncthreads();
        if (threadIdx.x == 0) {
            for (int w = 1; w < (int)(blockDim.x >> 5); ++w) acc = tens::rcombine(OP, acc, red[w]);
            tens::reduce_store(OP, acc, R, c, indices, out);
        }
        __syncthreads();  // red is reused by the next output
    }
}

// ---------------------------------------------------------------- split reductions

// grid (chunks, outputs): block (x, y) reduces elements [x * chunk, (x + 1) * chunk) of
// output y into part[y * chunks + x].
template <typename T, int OP>
__global__ void __launch_bounds__(256) tensor_reduce_split_block(
    // pointers (partials: outputs * chunks values and indices)
    const T* a, cl::acc_t<T>* part_v, long long* part_i,
    // sizes and parameters (R.rstep: blockDim.x)
    ReduceLayoutT<cl::acc_t<T>> R, cl::index_t chunk) {
    __shared__ RAcc<cl::acc_t<T>> red[32];
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const cl::index_t o = blockIdx.y, begin = (cl::index_t)blockIdx.x * chunk;
    const cl::index_t end = begin + chunk < R.count ? begin + chunk : R.count;
    cl::index_t in, out;
    tens::output_offsets(o, R, in, out);
    RAcc<cl::acc_t<T>> acc =
        tens::reduce_span(OP, a + in, R, begin + threadIdx.x, end, blockDim.x);
    acc = tens::warp_reduce(OP, acc);
    if (lane == 0) red[warp] = acc;
    __syncthreads();
    if (threadIdx.x == 0) {
        for (int w = 1; w < (int)(blockDim.x >> 5); ++w) acc = tens::rcombine(OP, acc, red[w]);
        const cl::index_t k = o * gridDim.x + blockIdx.x;
        part_v[k] = acc.v;
        part_i[k] = acc.i;
    }
}

// grid (chunks, ceil(outputs / blockDim.x)): thread o of the output group reduces its chunk
// serially; neighbouring threads read neighbouring outputs (the kept contiguous dim).
template <typename T, int OP>
__global__ void __launch_bounds__(256) tensor_reduce_split_thread(
    // pointers
    const T* a, cl::acc_t<T>* part_v, long long* part_i,
    // sizes and parameters (R.rstep: 1)
    ReduceLayoutT<cl::acc_t<T>> R, cl::index_t chunk) {
    const cl::index_t o = (cl::index_t)blockIdx.y * blockDim.x + threadIdx.x;
    if (o >= R.outputs) return;
    const cl::index_t begin = (cl::index_t)blockIdx.x * chunk;
    const cl::index_t end = begin + chunk < R.count ? begin + chunk : R.count;
    cl::index_t in, out;
    tens::output_offsets(o, R, in, out);
    const RAcc<cl::acc_t<T>> acc = tens::reduce_span(OP, a + in, R, begin, end, 1);
    const cl::index_t k = o * gridDim.x + blockIdx.x;
    part_v[k] = acc.v;
    part_i[k] = acc.i;
}

namespace tens {

// Partials lane, lane + 32, ... of one output's row, in that order.
template <typename A>
__device__ __forceinline__ RAcc<A> combine_row(int op, const A* v, const long long* idx,
                                               int chunks, int lane) {
    RAcc<A> acc = rinit<A>(op);
    for (int k = lane; k < chunks; k += 32) {
        RAcc<A> part;
        part.v = v[k];
        part.i = idx[k];
        acc = rcombine(op, acc, part);
    }
    return acc;
}

// The same loop kept rolled: unrolled, the double kernel spills around the call of
// double division's slow path (sm_90).
template <>
__device__ __forceinline__ RAcc<double> combine_row<double>(int op, const double* v,
                                                            const long long* idx, int chunks,
                                                            int lane) {
    RAcc<double> acc = rinit<double>(op);
#pragma unroll 1
    for (int k = lane; k < chunks; k += 32) {
        RAcc<double> part;
        part.v = v[k];
        part.i = idx[k];
        acc = rcombine(op, acc, part);
    }
    return acc;
}

}  // namespace tens

// One warp per output: lanes combine partials lane, lane + 32, ... then a fixed shuffle
// tree; the order never depends on timing, so results are reproducible bit for bit.
template <typename T, int OP>
__global__ void __launch_bounds__(256) tensor_reduce_finish(
    // pointers
    const cl::acc_t<T>* part_v, const long long* part_i, T* c, long long* indices,
    // sizes and parameters
    ReduceLayoutT<cl::acc_t<T>> R, int chunks) {
    const cl::index_t warps = (cl::index_t)gridDim.x * (blockDim.x >> 5);
    const int lane = threadIdx.x & 31;
    for (cl::index_t o = cl::global_thread_id() >> 5; o < R.outputs; o += warps) {
        RAcc<cl::acc_t<T>> acc =
            tens::combine_row(OP, part_v + o * chunks, part_i + o * chunks, chunks, lane);
        acc = tens::warp_reduce(OP, acc);
        if (lane == 0) {
            cl::index_t in, out;
            tens::output_offsets(o, R, in, out);
            tens::reduce_store(OP, acc, R, c, indices, out);
        }
    }
}
