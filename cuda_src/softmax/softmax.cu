// Softmax and log-softmax, forward and backward, over one axis of a C-contiguous tensor
// seen as [outer, len, inner] (ops/softmax.py reshapes; cuDNN's instance and channel
// modes are such axes). Math in A = cl::acc_t<T> (float for float, __half and
// __nv_bfloat16; double for double: maxima, sums, shuffles and the workspace are double),
// one rounding at the store.
//
//   forward   y = exp(x - m) / s            log: y = (x - m) - log(s)
//             m = max(x) ("accurate", cuDNN's CUDNN_SOFTMAX_ACCURATE) or 0 ("fast"),
//             s = sum(exp(x - m)), both computed in ONE pass by the online rule
//             (m, s) + x = (max(m, x), s * exp(m - max) + exp(x - max)), one exp per element.
//   backward  dx = y * (dy - sum(dy * y))   log: dx = dy - exp(y) * sum(dy)
//
// Kernels (T = float | __half | __nv_bfloat16 | double; VEC = 16 / sizeof(T) loads one
// 16-byte pack per access and needs len % VEC == 0 and 16-byte aligned rows, else VEC = 1):
//   softmax_{fwd,bwd}_warp<T, VEC>      inner == 1, short rows (len <= 1024): a group of
//                                       lanes per row, the row's packs rounded up to a
//                                       power of two up to 32 (one warp: 4 rows per
//                                       128-thread block; 8 floats, 2 packs: 2 lanes, 64
//                                       rows a block; 10 classes, scalar: 16 lanes),
//                                       shuffles only.
//   softmax_{fwd,bwd}_block<T, VEC>     inner == 1, longer rows: one block per row (256..1024
//                                       threads), warp shuffles + one shared-memory round.
//   softmax_{fwd,bwd}_partial<T, VEC>   inner == 1, very long rows with few rows: grid
//   softmax_{fwd,bwd}_finish<T, VEC>    (chunks, rows); partial writes each chunk's (m, s)
//                                       (or its partial sum) to an A workspace, finish
//                                       combines a row's partials and writes its chunk.
//   softmax_{fwd,bwd}_cols<T>           inner > 1 (e.g. channel mode on NCHW): one thread per
//                                       (outer, inner) column, grid-stride; neighbouring
//                                       threads read neighbouring addresses (coalesced).
// Blending as cuDNN: y = alpha * result + beta * y_prior (dx likewise); the prior is read
// only when beta != 0, by the thread that overwrites it (so out may alias the input).
// Defines: none (one module per dtype).
#include "common/cudnnlite.cuh"

// ops/softmax.py: shape_dtype(dt). alpha and beta in the accumulation type A, so
// float64 gets them exactly; the float layout is the one every other type uses.
template <typename A>
struct SoftmaxShapeT {
    cl::index_t rows;   // outer
    cl::index_t len;    // the softmax axis
    cl::index_t inner;  // elements after the axis (1 for the row kernels)
    cl::index_t chunk;  // partial/finish: elements per block (a multiple of VEC)
    int chunks;         // partial/finish: blocks per row
    int log;            // log-softmax
    int accurate;       // subtract the max (0: cuDNN's "fast" algorithm)
    A alpha;            // y = alpha * result + beta * y_prior
    A beta;             // 0: y is not read
    int group_log2;     // warp kernels: log2 of the lanes per row (0..5)
};
template <typename T> using SoftmaxShapeFor = SoftmaxShapeT<cl::acc_t<T>>;

template <typename A>
struct SmStatT {
    A m;  // running max (0 in fast mode)
    A s;  // sum of exp(x - m)
};

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) SmPack {
    T v[VEC];
};

namespace sm {

namespace m = cl::math;

template <typename A> __device__ __forceinline__ A neg_inf();
template <> __device__ __forceinline__ float neg_inf<float>() { return __int_as_float(0xff800000); }
template <> __device__ __forceinline__ double neg_inf<double>() {
    return __longlong_as_double((long long)0xfff0000000000000ULL);
}

template <typename A>
__device__ __forceinline__ SmStatT<A> init(int accurate) {
    SmStatT<A> st;
    st.m = accurate ? neg_inf<A>() : A(0);
    st.s = A(0);
    return st;
}

// Adds one element. -inf elements (masked attention scores) add nothing; NaN poisons s,
// and m too in accurate mode (a NaN sum under m = -inf would be dropped by combine, which
// reads m = -inf as "nothing added"): the whole row becomes NaN, as in PyTorch.
template <typename A>
__device__ __forceinline__ void add(SmStatT<A>& st, A x, int accurate) {
    if (!accurate) {
        st.s += m::exp(x);
    } else if (x != x) {
        st.m = x;
        st.s = x;
    } else if (x > st.m) {
        // exp(x - x): 1, or NaN for x = +inf (inf - inf, as PyTorch's row becomes NaN);
        // st.m = -inf: s = 0 * 0 + 1
        st.s = st.s * m::exp(st.m - x) + (x - x + A(1));
        st.m = x;
    } else if (x != neg_inf<A>()) {
        st.s += m::exp(x - st.m);
    }
}

// Commutative bit for bit, so every lane of a butterfly ends with the same value (a NaN
// row's lanes: NaN, whatever its payload). The max keeps a NaN m (fmax would drop it and
// leave the NaN sum under another part's m, or under -inf, which reads as "nothing").
template <typename A>
__device__ __forceinline__ SmStatT<A> combine(SmStatT<A> a, SmStatT<A> b) {
    SmStatT<A> r;
    r.m = a.m != a.m || b.m != b.m ? a.m + b.m : m::fmax(a.m, b.m);
    const A ea = a.m == neg_inf<A>() ? A(0) : a.s * m::exp(a.m - r.m);
    const A eb = b.m == neg_inf<A>() ? A(0) : b.s * m::exp(b.m - r.m);
    r.s = ea + eb;
    return r;
}
__device__ __forceinline__ float combine(float a, float b) { return a + b; }
__device__ __forceinline__ double combine(double a, double b) { return a + b; }

template <typename A>
__device__ __forceinline__ SmStatT<A> shfl_xor(SmStatT<A> v, int lane_mask) {
    v.m = __shfl_xor_sync(0xffffffffu, v.m, lane_mask);
    v.s = __shfl_xor_sync(0xffffffffu, v.s, lane_mask);
    return v;
}
__device__ __forceinline__ float shfl_xor(float v, int lane_mask) {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}
__device__ __forceinline__ double shfl_xor(double v, int lane_mask) {
    return __shfl_xor_sync(0xffffffffu, v, lane_mask);
}

template <typename V>
__device__ __forceinline__ V warp_allreduce(V v) {
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) v = combine(v, shfl_xor(v, k));
    return v;
}

// The same over aligned groups of `lanes` lanes (a power of two <= 32; every lane of the
// warp takes part); with 32, warp_allreduce's combines in its order, bit for bit.
template <typename V>
__device__ __forceinline__ V group_allreduce(V v, int lanes) {
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) {
        if (k < lanes) v = combine(v, shfl_xor(v, k));  // (lanes: the same in the warp)
    }
    return v;
}

// The warp kernels' rows: cl::group_row (the lanes of rows past the end idle at lane
// cl::kIdleLane, past every row's packs: s.len stays the loops' bound, read from the
// parameters, not a register per lane). The loops step by 32 packs whatever the group: a
// group narrower than a warp has at least as many lanes as its row has packs (each lane
// one pack or none), and the constant step keeps the unrolled loads' addresses immediate
// offsets of one register (a run-time step took 8-12 more registers and spilled fp64).

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

template <typename A>
__device__ __forceinline__ A blend(A r, A prior, A alpha, A beta) {
    return beta != A(0) ? m::fma(beta, prior, alpha * r) : alpha * r;
}

// Turns a row's (m, s) into the two numbers the output formula needs.
template <typename A>
struct Finish {
    A m;
    A c;  // 1 / s, or log(s) for log-softmax
    int log;
};
template <typename A>
__device__ __forceinline__ Finish<A> finish(SmStatT<A> st, int log) {
    Finish<A> f;
    f.m = st.m;
    f.c = log ? m::log(st.s) : A(1) / st.s;
    f.log = log;
    return f;
}
template <typename A>
__device__ __forceinline__ A out(A x, const Finish<A>& f) {
    return f.log ? (x - f.m) - f.c : m::exp(x - f.m) * f.c;
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
__device__ __forceinline__ SmStatT<cl::acc_t<T>> row_stat(const T* x, cl::index_t begin,
                                                          cl::index_t end, int tid, int nthr,
                                                          int accurate) {
    SmStatT<cl::acc_t<T>> st = init<cl::acc_t<T>>(accurate);
    for (cl::index_t k = begin / VEC + tid; k < end / VEC; k += nthr) {
        const SmPack<T, VEC> p = load<T, VEC>(x, k);
#pragma unroll
        for (int j = 0; j < VEC; ++j) add(st, cl::to_acc(p.v[j]), accurate);
    }
    return st;
}

template <typename T, int VEC>
__device__ __forceinline__ void row_write(const T* x, T* y, cl::index_t begin, cl::index_t end,
                                          int tid, int nthr, const Finish<cl::acc_t<T>>& f,
                                          cl::acc_t<T> alpha, cl::acc_t<T> beta) {
    typedef cl::acc_t<T> A;
    for (cl::index_t k = begin / VEC + tid; k < end / VEC; k += nthr) {
        const SmPack<T, VEC> p = load<T, VEC>(x, k);
        SmPack<T, VEC> o;
        if (beta != A(0)) o = load<T, VEC>(y, k);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const A prior = beta != A(0) ? cl::to_acc(o.v[j]) : A(0);
            o.v[j] = cl::from_acc<T>(blend(out(cl::to_acc(p.v[j]), f), prior, alpha, beta));
        }
        store<T, VEC>(y, k, o);
    }
}

// Backward: the row's reduction term, sum(dy * y) or (log) sum(dy).
template <typename T, int VEC>
__device__ __forceinline__ cl::acc_t<T> row_dot(const T* dy, const T* y, cl::index_t begin,
                                                cl::index_t end, int tid, int nthr, int log) {
    cl::acc_t<T> acc = cl::acc_t<T>(0);
    for (cl::index_t k = begin / VEC + tid; k < end / VEC; k += nthr) {
        const SmPack<T, VEC> g = load<T, VEC>(dy, k);
        if (log) {
#pragma unroll
            for (int j = 0; j < VEC; ++j) acc += cl::to_acc(g.v[j]);
        } else {
            const SmPack<T, VEC> p = load<T, VEC>(y, k);
#pragma unroll
            for (int j = 0; j < VEC; ++j) acc = m::fma(cl::to_acc(g.v[j]), cl::to_acc(p.v[j]), acc);
        }
    }
    return acc;
}

template <typename A>
__device__ __forceinline__ A grad(A g, A y, A dot, int log) {
    return log ? g - m::exp(y) * dot : y * (g - dot);
}

template <typename T, int VEC>
__device__ __forceinline__ void row_grad(const T* dy, const T* y, T* dx, cl::index_t begin,
                                         cl::index_t end, int tid, int nthr, cl::acc_t<T> dot,
                                         int log, cl::acc_t<T> alpha, cl::acc_t<T> beta) {
    typedef cl::acc_t<T> A;
    for (cl::index_t k = begin / VEC + tid; k < end / VEC; k += nthr) {
        const SmPack<T, VEC> g = load<T, VEC>(dy, k);
        const SmPack<T, VEC> p = load<T, VEC>(y, k);
        SmPack<T, VEC> o;
        if (beta != A(0)) o = load<T, VEC>(dx, k);
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const A prior = beta != A(0) ? cl::to_acc(o.v[j]) : A(0);
            const A r = grad(cl::to_acc(g.v[j]), cl::to_acc(p.v[j]), dot, log);
            o.v[j] = cl::from_acc<T>(blend(r, prior, alpha, beta));
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
    SoftmaxShapeFor<T> s) {
    typedef cl::acc_t<T> A;
    cl::GroupRow g;
    if (!cl::group_row(s.rows, s.group_log2, g)) return;  // whole warps leave together
    const T* xr = x + g.row * s.len;
    const SmStatT<A> st = sm::group_allreduce(
        sm::row_stat<T, VEC>(xr, 0, s.len, g.lane, 32, s.accurate), g.lanes);
    sm::row_write<T, VEC>(xr, y + g.row * s.len, 0, s.len, g.lane, 32, sm::finish(st, s.log),
                          s.alpha, s.beta);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(1024) softmax_fwd_block(
    // pointers
    const T* x, T* y,
    // sizes
    SoftmaxShapeFor<T> s) {
    typedef cl::acc_t<T> A;
    __shared__ SmStatT<A> red[32];
    const cl::index_t row = blockIdx.x;
    const T* xr = x + row * s.len;
    SmStatT<A> st = sm::row_stat<T, VEC>(xr, 0, s.len, threadIdx.x, blockDim.x, s.accurate);
    st = sm::block_allreduce(st, red);
    sm::row_write<T, VEC>(xr, y + row * s.len, 0, s.len, threadIdx.x, blockDim.x,
                          sm::finish(st, s.log), s.alpha, s.beta);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(256) softmax_fwd_partial(
    // pointers (stats: rows * chunks (m, s) pairs of the accumulation type)
    const T* x, cl::acc_t<T>* stats,
    // sizes
    SoftmaxShapeFor<T> s) {
    typedef cl::acc_t<T> A;
    __shared__ SmStatT<A> red[32];
    const cl::index_t row = blockIdx.y, begin = (cl::index_t)blockIdx.x * s.chunk;
    const cl::index_t end = begin + s.chunk < s.len ? begin + s.chunk : s.len;
    SmStatT<A> st = sm::row_stat<T, VEC>(x + row * s.len, begin, end, threadIdx.x, blockDim.x,
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
    const T* x, T* y, const cl::acc_t<T>* stats,
    // sizes
    SoftmaxShapeFor<T> s) {
    typedef cl::acc_t<T> A;
    __shared__ SmStatT<A> red[32];
    const cl::index_t row = blockIdx.y, begin = (cl::index_t)blockIdx.x * s.chunk;
    const cl::index_t end = begin + s.chunk < s.len ? begin + s.chunk : s.len;
    SmStatT<A> st = sm::init<A>(s.accurate);
    for (int c = threadIdx.x; c < s.chunks; c += blockDim.x) {
        const cl::index_t k = row * s.chunks + c;
        SmStatT<A> part;
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
    SoftmaxShapeFor<T> s) {
    typedef cl::acc_t<T> A;
    const cl::index_t columns = s.rows * s.inner;
    for (cl::index_t c = cl::global_thread_id(); c < columns; c += cl::grid_stride()) {
        const cl::index_t o = c / s.inner, i = c - o * s.inner;
        const cl::index_t base = o * s.len * s.inner + i;
        SmStatT<A> st = sm::init<A>(s.accurate);
        for (cl::index_t j = 0; j < s.len; ++j) sm::add(st, cl::to_acc(x[base + j * s.inner]), s.accurate);
        const sm::Finish<A> f = sm::finish(st, s.log);
        for (cl::index_t j = 0; j < s.len; ++j) {
            const cl::index_t e = base + j * s.inner;
            const A prior = s.beta != A(0) ? cl::to_acc(y[e]) : A(0);
            y[e] = cl::from_acc<T>(sm::blend(sm::out(cl::to_acc(x[e]), f), prior, s.alpha, s.beta));
        }
    }
}

// ---------------------------------------------------------------- backward

template <typename T, int VEC>
__global__ void __launch_bounds__(128) softmax_bwd_warp(
    // pointers
    const T* dy, const T* y, T* dx,
    // sizes
    SoftmaxShapeFor<T> s) {
    typedef cl::acc_t<T> A;
    cl::GroupRow g;
    if (!cl::group_row(s.rows, s.group_log2, g)) return;  // whole warps leave together
    const cl::index_t o = g.row * s.len;
    const A dot = sm::group_allreduce(
        sm::row_dot<T, VEC>(dy + o, y + o, 0, s.len, g.lane, 32, s.log), g.lanes);
    sm::row_grad<T, VEC>(dy + o, y + o, dx + o, 0, s.len, g.lane, 32, dot, s.log, s.alpha,
                         s.beta);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(1024) softmax_bwd_block(
    // pointers
    const T* dy, const T* y, T* dx,
    // sizes
    SoftmaxShapeFor<T> s) {
    typedef cl::acc_t<T> A;
    __shared__ A red[32];
    const cl::index_t o = (cl::index_t)blockIdx.x * s.len;
    A dot = sm::row_dot<T, VEC>(dy + o, y + o, 0, s.len, threadIdx.x, blockDim.x, s.log);
    dot = sm::block_allreduce(dot, red);
    sm::row_grad<T, VEC>(dy + o, y + o, dx + o, 0, s.len, threadIdx.x, blockDim.x, dot, s.log, s.alpha, s.beta);
}

template <typename T, int VEC>
__global__ void __launch_bounds__(256) softmax_bwd_partial(
    // pointers (sums: rows * chunks partial sums of the accumulation type)
    const T* dy, const T* y, cl::acc_t<T>* sums,
    // sizes
    SoftmaxShapeFor<T> s) {
    typedef cl::acc_t<T> A;
    __shared__ A red[32];
    const cl::index_t row = blockIdx.y, begin = (cl::index_t)blockIdx.x * s.chunk;
    const cl::index_t end = begin + s.chunk < s.len ? begin + s.chunk : s.len;
    const cl::index_t o = row * s.len;
    A dot = sm::row_dot<T, VEC>(dy + o, y + o, begin, end, threadIdx.x, blockDim.x, s.log);
    dot = sm::block_allreduce(dot, red);
    if (threadIdx.x == 0) sums[row * s.chunks + blockIdx.x] = dot;
}

template <typename T, int VEC>
__global__ void __launch_bounds__(256) softmax_bwd_finish(
    // pointers
    const T* dy, const T* y, T* dx, const cl::acc_t<T>* sums,
    // sizes
    SoftmaxShapeFor<T> s) {
    typedef cl::acc_t<T> A;
    __shared__ A red[32];
    const cl::index_t row = blockIdx.y, begin = (cl::index_t)blockIdx.x * s.chunk;
    const cl::index_t end = begin + s.chunk < s.len ? begin + s.chunk : s.len;
    A dot = A(0);
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
    SoftmaxShapeFor<T> s) {
    typedef cl::acc_t<T> A;
    const cl::index_t columns = s.rows * s.inner;
    for (cl::index_t c = cl::global_thread_id(); c < columns; c += cl::grid_stride()) {
        const cl::index_t o = c / s.inner, i = c - o * s.inner;
        const cl::index_t base = o * s.len * s.inner + i;
        A dot = A(0);
        for (cl::index_t j = 0; j < s.len; ++j) {
            const cl::index_t e = base + j * s.inner;
            dot = s.log ? dot + cl::to_acc(dy[e]) : cl::math::fma(cl::to_acc(dy[e]), cl::to_acc(y[e]), dot);
        }
        for (cl::index_t j = 0; j < s.len; ++j) {
            const cl::index_t e = base + j * s.inner;
            const A prior = s.beta != A(0) ? cl::to_acc(dx[e]) : A(0);
            const A r = sm::grad(cl::to_acc(dy[e]), cl::to_acc(y[e]), dot, s.log);
            dx[e] = cl::from_acc<T>(sm::blend(r, prior, s.alpha, s.beta));
        }
    }
}
