// cuDNN's cudnnReduceTensor as kernels over strided tensors (ops/reduce.py; strides in
// elements, innermost dim FIRST in ReduceLayoutT):
//
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
//                              partials and stores. Deterministic: no atomics.
//                              split_block: lanes walk the reduced range; split_thread:
//                              threads walk outputs (the kept contiguous dim), each over
//                              its chunk.
//                              OP (tens::kR*): one kernel per op, holding that op's code
//                              only. Threads walk the reduced elements digit by digit
//                              (tens::ReducedWalk: no division per element).
// T = float | __half | __nv_bfloat16 | double. Arithmetic runs in cl::acc_t<T> (float, or
// double for double) with alpha, beta and the partials of that type (ReduceLayoutT<A>).
// Op numbers (tensor_common.cuh): REDUCE_OPS in ops/reduce.py, then the three without NaN
// propagation.
// Defines: none (one module per dtype T: every kind for every op).
#include "common/cudnnlite.cuh"
#include "tensor/tensor_common.cuh"

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

// The input and output offsets of output o (kept dims, innermost first). A rolled loop
// (once per output, its divisions the cost): unrolled over kMaxDims it was a third of each
// kernel's NVRTC time, and R stays in the parameter bank either way.
template <typename A>
__device__ __forceinline__ void output_offsets(cl::index_t o, const ReduceLayoutT<A>& R,
                                               cl::index_t& in, cl::index_t& out) {
    in = 0;
    out = 0;
#pragma unroll 1
    for (int d = 0; d < kMaxDims; ++d) {
        if (d == R.kndim) break;
        cl::index_t c = o;
        if (d + 1 < R.kndim) o = cl::div_mod(o, R.ksize[d], c);
        in += c * R.kstride_in[d];
        out += c * R.kstride_out[d];
    }
}

// The offsets of reduced elements r0, r0 + step, r0 + 2 step, ... (step: R.rstep, in
// digits), walked like an odometer: each step adds the step's digits with carries (an add,
// a compare and a multiply-add per reduced dim), where recomputing an offset from r would
// divide by every dim's size. Only the outermost digit grows past its dim (past the last
// element, whose offset is never read). ND: the reduced dims when known at compile time
// (the common 1, 2, 3: a short loop without the other dims' steps), 0: R.rndim of them,
// in rolled loops with the digits in local memory: four or more reduced dims that do not
// merge are rare, and the unrolled general walk had taken each kernel's NVRTC time from
// about 0.35 to 0.55 s (sm_90).
template <int ND, typename A>
struct ReducedWalk {
    cl::index_t digit[ND > 0 ? ND : kMaxDims];
    cl::index_t off;

    __device__ __forceinline__ int dims(const ReduceLayoutT<A>& R) const {
        return ND > 0 ? ND : R.rndim;
    }

    __device__ __forceinline__ ReducedWalk(const ReduceLayoutT<A>& R, cl::index_t r) {
        off = 0;
#pragma unroll(ND > 0 ? ND : 1)
        for (int d = 0; d < (ND > 0 ? ND : kMaxDims); ++d) {
            digit[d] = 0;
            if (d >= dims(R)) continue;
            cl::index_t c = r;
            if (d + 1 < dims(R)) r = cl::div_mod(r, R.rsize[d], c);
            digit[d] = c;
            off += c * R.rstride[d];
        }
    }

    __device__ __forceinline__ void next(const ReduceLayoutT<A>& R) {
        cl::index_t carry = 0;
#pragma unroll(ND > 0 ? ND : 1)
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
__device__ __forceinline__ void reduce_walk(int op, RAcc<cl::acc_t<T>>& acc, const T* base,
                                            const ReduceLayoutT<cl::acc_t<T>>& R,
                                            cl::index_t r, cl::index_t end, cl::index_t step) {
    ReducedWalk<ND, cl::acc_t<T>> w(R, r);
    for (;;) {
        radd(op, acc, cl::to_acc(base[w.off]), r);
        r += step;
        if (r >= end) break;
        w.next(R);
    }
}

// Elements [r0, end) of one output's reduced range, by the kernel's step (R.rstep, whose
// value is `step`). After ops/reduce.py merged contiguous dims, most reductions walk one
// or two dims.
template <typename T>
__device__ __forceinline__ RAcc<cl::acc_t<T>> reduce_span(int op, const T* base,
                                                          const ReduceLayoutT<cl::acc_t<T>>& R,
                                                          cl::index_t r0, cl::index_t end,
                                                          cl::index_t step) {
    RAcc<cl::acc_t<T>> acc = rinit<cl::acc_t<T>>(op);
    if (r0 >= end) return acc;
    switch (R.rndim) {
        case 0:  // (one element: rsize, rstride and rstep are 0)
        case 1: reduce_walk<1>(op, acc, base, R, r0, end, step); break;
        case 2: reduce_walk<2>(op, acc, base, R, r0, end, step); break;
        case 3: reduce_walk<3>(op, acc, base, R, r0, end, step); break;
        default: reduce_walk<0>(op, acc, base, R, r0, end, step);
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
__device__ __forceinline__ void reduce_store(int op, RAcc<cl::acc_t<T>> acc,
                                             const ReduceLayoutT<cl::acc_t<T>>& R, T* c,
                                             long long* indices, cl::index_t out) {
    typedef cl::acc_t<T> A;
    A v = acc.v;
    if (op == kRAvg) v = v / (A)R.count;
    if (op == kRNorm2) v = cl::math::sqrt(v);
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
        const RAcc<cl::acc_t<T>> acc = tens::reduce_span(OP, a + in, R, 0, R.count, 1);
        tens::reduce_store(OP, acc, R, c, indices, out);
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

// Partials lane, lane + 32, ... of one output's row, in that order. The loop is kept rolled
// (chunks / 32 iterations, one load each): unrolled, the double kernels spilled around the
// call of double division's slow path (sm_90).
template <typename A>
__device__ __forceinline__ RAcc<A> combine_row(int op, const A* v, const long long* idx,
                                               int chunks, int lane) {
    RAcc<A> acc = rinit<A>(op);
#pragma unroll 1
    for (int k = lane; k < chunks; k += 32) {
        RAcc<A> part;
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
