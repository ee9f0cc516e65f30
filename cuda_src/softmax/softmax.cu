// Softmax and log-softmax, forward and backward, over one axis of a C-contiguous tensor
// seen as [outer, len, inner] (ops/softmax.py reshapes; cuDNN's instance and channel
// modes are such axes). Math in float for every storage type, one rounding at the store.
//
//   forward   y = exp(x - m) / s            log: y = (x - m) - log(s)
//             m = max(x) ("accurate", cuDNN's CUDNN_SOFTMAX_ACCURATE) or 0 ("fast"),
//             s = sum(exp(x - m)), both computed in ONE pass by the online rule
//             (m, s) + x = (max(m, x), s * exp(m - max) + exp(x - max)), one exp per element.
//   backward  dx = y * (dy - sum(dy * y))   log: dx = dy - exp(y) * sum(dy)
//
// Kernels (T = float | __half | __nv_bfloat16; VEC = 16 / sizeof(T) loads one 16-byte pack
// per access and needs len % VEC == 0 and 16-byte aligned rows, else VEC = 1):
//   softmax_{fwd,bwd}_warp<T, VEC>      inner == 1, short rows (len <= 1024): one warp per
//                                       row, 4 rows per 128-thread block, shuffles only.
//   softmax_{fwd,bwd}_block<T, VEC>     inner == 1, longer rows: one block per row (256..1024
//                                       threads), warp shuffles + one shared-memory round.
//   softmax_{fwd,bwd}_partial<T, VEC>   inner == 1, very long rows with few rows: grid
//   softmax_{fwd,bwd}_finish<T, VEC>    (chunks, rows); partial writes each chunk's (m, s)
//                                       (or its partial sum) to a float workspace, finish
//                                       combines a row's partials and writes its chunk.
//   softmax_{fwd,bwd}_cols<T>           inner > 1 (e.g. channel mode on NCHW): one thread per
//                                       (outer, inner) column, grid-stride; neighbouring
//                                       threads read neighbouring addresses (coalesced).
// Blending as cuDNN: y = alpha * result + beta * y_prior (dx likewise); the prior is read
// only when beta != 0, by the thread that overwrites it (so out may alias the input).
// Defines: none (one module per dtype).
#include "common/cudnnlite.cuh"

// ops/softmax.py: _SHAPE_DTYPE.
struct SoftmaxShape {
    cl::index_t rows;   // outer
    cl::index_t len;    // the softmax axis
    cl::index_t inner;  // elements after the axis (1 for the row kernels)
    cl::index_t chunk;  // partial/finish: elements per block (a multiple of VEC)
    int chunks;         // partial/finish: blocks per row
    int log;            // log-softmax
    int accurate;       // subtract the max (0: cuDNN's "fast" algorithm)
    float alpha;        // y = alpha * result + beta * y_prior
    float beta;         // 0: y is not read
    int reserved;
};

struct SmStat {
    float m;  // running max (0 in fast mode)
    float s;  // sum of exp(x - m)
};

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) SmPack {
    T v[VEC];
};

namespace sm {

__device__ __forceinline__ float neg_inf() { return __int_as_float(0xff800000); }

__device__ __forceinline__ SmStat init(int accurate) {
    SmStat st;
    st.m = accurate ? neg_inf() : 0.0f;
    st.s = 0.0f;
    return st;
}

// Adds one element. -inf elements (masked attention scores) add nothing; NaN poisons s.
__device__ __forceinline__ void add(SmStat& st, float x, int accurate) {
    if (!accurate) {
        st.s += expf(x);
    } else if (x > st.m) {
        st.s = st.s * expf(st.m - x) + 1.0f;  // st.m = -inf: s = 0 * 0 + 1
        st.m = x;
    } else if (x != neg_inf()) {
        st.s += expf(x - st.m);
    }
}

// Commutative bit for bit, so every lane of a butterfly ends with the same value.
__device__ __forceinline__ SmStat combine(SmStat a, SmStat b) {
    SmStat r;
    r.m = fmaxf(a.m, b.m);
    const float ea = a.m == neg_inf() ? 0.0f : a.s * expf(a.m - r.m);
    const float eb = b.m == neg_inf() ? 0.0f : b.s * expf(b.m - r.m);
    r.s = ea + eb;
    return r;
}
__device__ __forceinline__ float combine(float a, float b) { return a + b; }

__device__ __forceinline__ SmStat shfl_xor(SmStat v, int m) {
    v.m = __shfl_xor_sync(0xffffffffu, v.m, m);
    v.s = __shfl_xor_sync(0xffffffffu, v.s, m);
    return v;
}
__device__ __forceinline__ float shfl_xor(float v, int m) {
    return __shfl_xor_sync(0xffffffffu, v, m);
}

template <typename V>
__device__ __forceinline__ V warp_allreduce(V v) {
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) v = combine(v, shfl_xor(v, m));
    return v;
}

// Every thread of the block gets the same result; red holds 32 entries. Called once per
// kernel (red is not reused after it).
template <typename V>
__device__ __forceinline__ V block_allreduce(V v, V* red) {
    v = warp_allreduce(v);
    const int warp = threadIdx.x >> 5, nwarps = blockDim.x >> 5;
    if ((threadIdx.x & 31) == 0) red[warp] = v;
    __syncthreads();
    v = red[0];
    for (int w = 1; w < nwarps; ++w) v = combine(v, red[w]);
    return v;
}

__device__ __forceinline__ float blend(float r, float prior, float alpha, float beta) {
    return beta != 0.0f ? fmaf(beta, prior, alpha * r) : alpha * r;
}

// Turns a row's (m, s) into the two numbers the output formula needs.
struct Finish {
    float m;
    float c;  // 1 / s, or log(s) for log-softmax
    int log;
};
__device__ __forceinline__ Finish finish(SmStat st, int log) {
    Finish f;
    f.m = st.m;
    f.c = log ? logf(st.s) : 1.0f / st.s;
    f.log = log;
    return f;
}
__device__ __forceinline__ float out(float x, const Finish& f) {
    return f.log ? (x - f.m) - f.c : expf(x - f.m) * f.c;
}

template <typename T, int VEC>
__device__ __forceinline__ SmPack<T, VEC> load(const T* base, cl::index_t k) {
    return reinterpret_cast<const SmPack<T, VEC>*>(base)[k];
}
template <typename T, int VEC>
__device__ __forceinline__ void store(T* base, cl::index_t k, const SmPack<T, VEC>& v) {
    reinterpret_cast<SmPack<T, VEC>*>(base)[k] = v;
}

// Elements [begin, end) of one row (multiples of VEC), threads tid, tid + nthr, ... by packs.
template <typename T, int VEC>
__device__ __forceinline__ SmStat row_stat(const T* x, cl::index_t begin, cl::index_t end, int tid,
                                           int nthr, int accurate) {
    SmStat st = init(accurate);
    for (cl::index_t k = begin / VEC + tid; k < end / VEC; k += nthr) {
        const SmPack<T, VEC> p = load<T, VEC>(x, k);
#pragma unroll
        for (int j = 0; j < VEC; ++j) add(st, cl::to_float(p.v[j]), accurate);
    }
    return st;
}

template <typename T, int VEC>
__device__ __forceinline__ void row_write(const T* x, T* y, cl::index_t begin, cl::index_t end,
                                          int tid, int nthr, const Finish& f, float alpha,
                                          float beta) {
    for (cl::index_t k = begin / VEC + tid; k < end / VEC; k += nthr) {
        const SmPack<T, VEC> p = load<T, VEC>(x, k);
        SmPack<T, VEC> o;
        if (beta != 0.0f) o = load<T, VEC>(y, k);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float prior = beta != 0.0f ? cl::to_float(o.v[j]) : 0.0f;
            o.v[j] = cl::from_float<T>(blend(out(cl::to_float(p.v[j]), f), prior, alpha, beta));
        }
        store<T, VEC>(y, k, o);
    }
}

// Backward: the row's reduction term, sum(dy * y) or (log) sum(dy).
template <typename T, int VEC>
__device__ __forceinline__ float row_dot(const T* dy, const T* y, cl::index_t begin,
                                         cl::index_t end, int tid, int nthr, int log) {
    float acc = 0.0f;
    for (cl::index_t k = begin / VEC + tid; k < end / VEC; k += nthr) {
        const SmPack<T, VEC> g = load<T, VEC>(dy, k);
        if (log) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) acc += cl::to_float(g.v[j]);
        } else {
            const SmPack<T, VEC> p = load<T, VEC>(y, k);
#pragma unroll
            for (int j = 0; j < VEC; ++j) acc = fmaf(cl::to_float(g.v[j]), cl::to_float(p.v[j]), acc);
        }
    }
    return acc;
}

__device__ __forceinline__ float grad(float g, float y, float dot, int log) {
    return log ? g - expf(y) * dot : y * (g - dot);
}

template <typename T, int VEC>
__device__ __forceinline__ void row_grad(const T* dy, const T* y, T* dx, cl::index_t begin,
                                         cl::index_t end, int tid, int nthr, float dot, int log,
                                         float alpha, float beta) {
    for (cl::index_t k = begin / VEC + tid; k < end / VEC; k += nthr) {
        const SmPack<T, VEC> g = load<T, VEC>(dy, k);
        const SmPack<T, VEC> p = load<T, VEC>(y, k);
        SmPack<T, VEC> o;
        if (beta != 0.0f) o = load<T, VEC>(dx, k);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const float prior = beta != 0.0f ? cl::to_float(o.v[j]) : 0.0f;
            const float r = grad(cl::to_float(g.v[j]), cl::to_float(p.v[j]), dot, log);
            o.v[j] = cl::from_float<T>(blend(r, prior, alpha, beta));
        }
        store<T, VEC>(dx, k, o);
    }
}

}  // namespace sm

// ---------------------------------------------------------------- forward

template <typename T, int VEC>
__global__ void __launch_bounds__(128) softmax_fwd_warp(
    // pointers
    const T* x, T* y,
    // sizes
    SoftmaxShape s) {
    const cl::index_t row = (cl::index_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= s.rows) return;  // whole warps leave together
    const int lane = threadIdx.x & 31;
    const T* xr = x + row * s.len;
    const SmStat st = sm::warp_allreduce(sm::row_stat<T, VEC>(xr, 0, s.len, lane, 32, s.accurate));
    sm::row_write<T, VEC>(xr, y + row * s.len, 0, s.len, lane, 32, sm::finish(st, s.log), s.alpha, s.beta);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(1024) softmax_fwd_block(
    // pointers
    const T* x, T* y,
    // sizes
    SoftmaxShape s) {
    __shared__ SmStat red[32];
    const cl::index_t row = blockIdx.x;
    const T* xr = x + row * s.len;
    SmStat st = sm::row_stat<T, VEC>(xr, 0, s.len, threadIdx.x, blockDim.x, s.accurate);
    st = sm::block_allreduce(st, red);
    sm::row_write<T, VEC>(xr, y + row * s.len, 0, s.len, threadIdx.x, blockDim.x,
                          sm::finish(st, s.log), s.alpha, s.beta);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(256) softmax_fwd_partial(
    // pointers (stats: rows * chunks (m, s) pairs)
    const T* x, float* stats,
    // sizes
    SoftmaxShape s) {
    __shared__ SmStat red[32];
    const cl::index_t row = blockIdx.y, begin = (cl::index_t)blockIdx.x * s.chunk;
    const cl::index_t end = begin + s.chunk < s.len ? begin + s.chunk : s.len;
    SmStat st = sm::row_stat<T, VEC>(x + row * s.len, begin, end, threadIdx.x, blockDim.x,
                                     s.accurate);
    st = sm::block_allreduce(st, red);
    if (threadIdx.x == 0) {
        const cl::index_t k = row * s.chunks + blockIdx.x;
        stats[2 * k] = st.m;
        stats[2 * k + 1] = st.s;
    }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(256) softmax_fwd_finish(
    // pointers
    const T* x, T* y, const float* stats,
    // sizes
    SoftmaxShape s) {
    __shared__ SmStat red[32];
    const cl::index_t row = blockIdx.y, begin = (cl::index_t)blockIdx.x * s.chunk;
    const cl::index_t end = begin + s.chunk < s.len ? begin + s.chunk : s.len;
    SmStat st = sm::init(s.accurate);
    for (int c = threadIdx.x; c < s.chunks; c += blockDim.x) {
        const cl::index_t k = row * s.chunks + c;
        SmStat part;
        part.m = stats[2 * k];
        part.s = stats[2 * k + 1];
        st = sm::combine(st, part);
    }
    st = sm::block_allreduce(st, red);
    sm::row_write<T, VEC>(x + row * s.len, y + row * s.len, begin, end, threadIdx.x, blockDim.x,
                          sm::finish(st, s.log), s.alpha, s.beta);
}

template <typename T>
__global__ void __launch_bounds__(256) softmax_fwd_cols(
    // pointers
    const T* x, T* y,
    // sizes
    SoftmaxShape s) {
    const cl::index_t columns = s.rows * s.inner;
    for (cl::index_t c = cl::global_thread_id(); c < columns; c += cl::grid_stride()) {
        const cl::index_t o = c / s.inner, i = c - o * s.inner;
        const cl::index_t base = o * s.len * s.inner + i;
        SmStat st = sm::init(s.accurate);
        for (cl::index_t j = 0; j < s.len; ++j) sm::add(st, cl::to_float(x[base + j * s.inner]), s.accurate);
        const sm::Finish f = sm::finish(st, s.log);
        for (cl::index_t j = 0; j < s.len; ++j) {
            const cl::index_t e = base + j * s.inner;
            const float prior = s.beta != 0.0f ? cl::to_float(y[e]) : 0.0f;
            y[e] = cl::from_float<T>(sm::blend(sm::out(cl::to_float(x[e]), f), prior, s.alpha, s.beta));
        }
    }
}

// ---------------------------------------------------------------- backward

template <typename T, int VEC>
__global__ void __launch_bounds__(128) softmax_bwd_warp(
    // pointers
    const T* dy, const T* y, T* dx,
    // sizes
    SoftmaxShape s) {
    const cl::index_t row = (cl::index_t)blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (row >= s.rows) return;
    const int lane = threadIdx.x & 31;
    const cl::index_t o = row * s.len;
    const float dot = sm::warp_allreduce(sm::row_dot<T, VEC>(dy + o, y + o, 0, s.len, lane, 32, s.log));
    sm::row_grad<T, VEC>(dy + o, y + o, dx + o, 0, s.len, lane, 32, dot, s.log, s.alpha, s.beta);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(1024) softmax_bwd_block(
    // pointers
    const T* dy, const T* y, T* dx,
    // sizes
    SoftmaxShape s) {
    __shared__ float red[32];
    const cl::index_t o = (cl::index_t)blockIdx.x * s.len;
    float dot = sm::row_dot<T, VEC>(dy + o, y + o, 0, s.len, threadIdx.x, blockDim.x, s.log);
    dot = sm::block_allreduce(dot, red);
    sm::row_grad<T, VEC>(dy + o, y + o, dx + o, 0, s.len, threadIdx.x, blockDim.x, dot, s.log, s.alpha, s.beta);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(256) softmax_bwd_partial(
    // pointers (sums: rows * chunks floats)
    const T* dy, const T* y, float* sums,
    // sizes
    SoftmaxShape s) {
    __shared__ float red[32];
    const cl::index_t row = blockIdx.y, begin = (cl::index_t)blockIdx.x * s.chunk;
    const cl::index_t end = begin + s.chunk < s.len ? begin + s.chunk : s.len;
    const cl::index_t o = row * s.len;
    float dot = sm::row_dot<T, VEC>(dy + o, y + o, begin, end, threadIdx.x, blockDim.x, s.log);
    dot = sm::block_allreduce(dot, red);
    if (threadIdx.x == 0) sums[row * s.chunks + blockIdx.x] = dot;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(256) softmax_bwd_finish(
    // pointers
    const T* dy, const T* y, T* dx, const float* sums,
    // sizes
    SoftmaxShape s) {
    __shared__ float red[32];
    const cl::index_t row = blockIdx.y, begin = (cl::index_t)blockIdx.x * s.chunk;
    const cl::index_t end = begin + s.chunk < s.len ? begin + s.chunk : s.len;
    float dot = 0.0f;
    for (int c = threadIdx.x; c < s.chunks; c += blockDim.x) dot += sums[row * s.chunks + c];
    dot = sm::block_allreduce(dot, red);
    const cl::index_t o = row * s.len;
    sm::row_grad<T, VEC>(dy + o, y + o, dx + o, begin, end, threadIdx.x, blockDim.x, dot, s.log, s.alpha, s.beta);
}

template <typename T>
__global__ void __launch_bounds__(256) softmax_bwd_cols(
    // pointers
    const T* dy, const T* y, T* dx,
    // sizes
    SoftmaxShape s) {
    const cl::index_t columns = s.rows * s.inner;
    for (cl::index_t c = cl::global_thread_id(); c < columns; c += cl::grid_stride()) {
        const cl::index_t o = c / s.inner, i = c - o * s.inner;
        const cl::index_t base = o * s.len * s.inner + i;
        float dot = 0.0f;
        for (cl::index_t j = 0; j < s.len; ++j) {
            const cl::index_t e = base + j * s.inner;
            dot = s.log ? dot + cl::to_float(dy[e]) : fmaf(cl::to_float(dy[e]), cl::to_float(y[e]), dot);
        }
        for (cl::index_t j = 0; j < s.len; ++j) {
            const cl::index_t e = base + j * s.inner;
            const float prior = s.beta != 0.0f ? cl::to_float(dx[e]) : 0.0f;
            const float r = sm::grad(cl::to_float(dy[e]), cl::to_float(y[e]), dot, s.log);
            dx[e] = cl::from_float<T>(sm::blend(r, prior, s.alpha, s.beta));
        }
    }
}
