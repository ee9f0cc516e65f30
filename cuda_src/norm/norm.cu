// Normalization layers: batch norm (train / inference / backward, fused add + activation),
// row norms (layer, group, instance, RMS; forward and backward) and cross-channel LRN.
//
// Arithmetic runs in A = cl::acc_t<T>: float for float, __half and __nv_bfloat16, double
// for double. Statistics, workspaces and batch-norm parameter gradients have type A.
// Batch-norm parameters (gamma, beta, running and saved statistics) have type A too
// (float32 for half data: cuDNN's rule; double for double); row-norm weight and bias have
// the data's type T (PyTorch's). Scalars (eps, momentum, LRN's alpha / beta / k) travel
// in A through the *T<A> structs, so double kernels see the caller's values unrounded.
// Types T: float, __half, __nv_bfloat16, double.
//
// Per-channel reductions (batch-norm statistics, batch-norm backward sums, row-norm
// parameter gradients) view the data as elements (o, c, i), o < rows, c < channels,
// i < inner, at offset (o * channels + c) * inner + i:
//   NCHW spatial batch norm       rows = N, channels = C, inner = H*W
//   NHWC spatial batch norm       rows = N*H*W, channels = C, inner = 1
//   per-activation batch norm     rows = N, channels = C*H*W (or H*W*C), inner = 1
//   row-norm parameter gradients  rows = N (samples), channels = params, inner = H*W or 1
//   NHWC group-norm param grads   rows = N*H*W, channels = C, inner = 1 (KIND 3)
// Two block shapes, both multi-block: grid.y = chunks splits each channel's elements so
// that large N*H*W fills the GPU (never one block per channel alone).
//   red_planar<T, KIND>        inner > 1: a block of 256 threads per (channel, chunk),
//                              threads run along the contiguous inner dim;
//   red_chlast<T, KIND>        inner == 1: a 32 x 8 block per (32 channels, chunk),
//                              threadIdx.x along the contiguous channels (coalesced).
// KIND: 0 batch-norm statistics (Welford per thread on x minus the channel's first
// element, Chan's merge across threads and chunks: no E[x^2] - E[x]^2 cancellation), 1 batch-norm backward sums (sum g,
// sum g * xhat with g the gradient through the optional activation), 2 row-norm
// parameter sums (sum dy, sum dy * xhat with per-row statistics), 3 the same for NHWC
// group norm (row of element (o, c) = (o / spatial) * groups + c / (channels / groups)).
// Partials go to an A workspace [channels * chunks] and a one-thread-per-channel
// finalize kernel merges them in a fixed order: every result is deterministic.
//
// Other kernels
//   bn_stats_finalize<T>       mean, invstd, running-statistics update (unbiased var)
//   sum2_finalize<O>           the two sums of KIND 1/2 into O-typed outputs
//   bn_fwd_apply<T>            y = act((x - mean) * gamma * invstd + beta [+ z]);
//                              inference passes running_var and computes invstd here
//   bn_bwd_apply<T>            dx (and dz) from the sums
//   bn_fwd_apply_vec<T, CHLAST, ACT>, bn_bwd_apply_vec<T, CHLAST, ACT>
//                              the same with 16-byte packs for aligned contiguous tensors:
//                              CHLAST = false one channel per pack (H*W % VEC == 0),
//                              true consecutive channels (inner 1, C % VEC == 0); ACT the
//                              activation mode (-1 none) as a template argument, 32-bit
//                              indices (at most 2^31 - 1 elements; ops/batch_norm.py takes
//                              the scalar kernels above): one mode's code per kernel (a
//                              runtime switch over the modes and index widths, inlined
//                              into every element of the unrolled packs, made each of
//                              these 0.65-1.6 s of NVRTC on sm_90; now 0.15-0.3 s)
//   rownorm_fwd<T, RMS, VEC>   one block per row: exact two-pass mean/variance (the row
//                              stays in L1/L2 between passes), writes y, mean, rstd;
//                              VEC 1 elements, VEC 16 / sizeof(T) 16-byte packs (weight
//                              and bias indexed by the column, cols % VEC == 0, aligned)
//   rownorm_bwd<T, RMS, VEC>   one block per row: dx
//   rownorm_fwd_rows<T, RMS>, rownorm_bwd_rows<T, RMS>
//                              the packed forms for rows of at most 32 packs: a group
//                              of lanes per row, several rows a warp, shuffles only
//   rownorm_apply<T>, rownorm_bwd_partial<T, RMS>, rownorm_bwd_apply<T, RMS>
//                              few long rows: layer / group norm's output from split
//                              statistics (red_planar<T, 0> + bn_stats_finalize first),
//                              the backward's per-stretch sums, then dx
//   gn_nhwc_stats<T>, gn_nhwc_finalize<T>, gn_nhwc_apply<T>
//                              the NHWC forward of few (sample, tile) blocks, split along
//                              H*W: stretch statistics, merged per group, then y
//   gn_nhwc_bwd_partial<T>, gn_nhwc_bwd_apply<T>
//                              its backward: stretch sums, then dx
//   gn_nhwc_fwd<T>, gn_nhwc_bwd<T>
//                              channels-last group / instance norm (NHWC, no transposed
//                              copy): a 32 x 16 block per (sample, tile of whole groups),
//                              threadIdx.x along the contiguous channels (coalesced),
//                              threadIdx.y along H*W; exact two-pass statistics
//                              (in A) as rownorm_fwd; the backward's dweight / dbias are
//                              red_chlast<T, 3> + sum2_finalize
//   lrn_fwd<T>, lrn_scale<T>, lrn_bwd<T>   cross-channel LRN, one thread per element
//
// Defines: none; one module per dtype holds all kernels. Kernels of the 32-bit types
// compute in float exactly as before float64 existed (A = float everywhere).
#include "common/cudnnlite.cuh"
#include "common/activation_math.cuh"  // act::forward<MODE>, act::backward<MODE>, ActParamsT

namespace nrm {

constexpr int kRedThreads = 256;
constexpr int kChlastRows = 8;  // blockDim.y of red_chlast

// Activation by runtime mode (uniform per launch): the modes of activation.cu, -1 none.
// Not mish (ops/norm_common.py refuses it): inlined into the vector kernels it cost a spill
// (bn_bwd_apply_vec<float, false> on sm_90) and occupancy elsewhere.
template <typename A>
__device__ __forceinline__ A act_fwd(int mode, A u, const ActParamsT<A>& p) {
    switch (mode) {
        case act::kRelu: return act::forward<act::kRelu>(u, p);
        case act::kLeakyRelu: return act::forward<act::kLeakyRelu>(u, p);
        case act::kClippedRelu: return act::forward<act::kClippedRelu>(u, p);
        case act::kElu: return act::forward<act::kElu>(u, p);
        case act::kSigmoid: return act::forward<act::kSigmoid>(u, p);
        case act::kTanh: return act::forward<act::kTanh>(u, p);
        case act::kSwish: return act::forward<act::kSwish>(u, p);
        case act::kGelu: return act::forward<act::kGelu>(u, p);
        case act::kGeluTanh: return act::forward<act::kGeluTanh>(u, p);
        case act::kSoftplus: return act::forward<act::kSoftplus>(u, p);
        case act::kHardtanh: return act::forward<act::kHardtanh>(u, p);
        case act::kHardswish: return act::forward<act::kHardswish>(u, p);
        case act::kHardsigmoid: return act::forward<act::kHardsigmoid>(u, p);
        default: return u;
    }
}

template <typename A>
__device__ __forceinline__ A act_bwd(int mode, A g, A u, const ActParamsT<A>& p) {
    switch (mode) {
        case act::kRelu: return act::backward<act::kRelu>(g, u, A(0), p);
        case act::kLeakyRelu: return act::backward<act::kLeakyRelu>(g, u, A(0), p);
        case act::kClippedRelu: return act::backward<act::kClippedRelu>(g, u, A(0), p);
        case act::kElu: return act::backward<act::kElu>(g, u, A(0), p);
        case act::kSigmoid: return act::backward<act::kSigmoid>(g, u, A(0), p);
        case act::kTanh: return act::backward<act::kTanh>(g, u, A(0), p);
        case act::kSwish: return act::backward<act::kSwish>(g, u, A(0), p);
        case act::kGelu: return act::backward<act::kGelu>(g, u, A(0), p);
        case act::kGeluTanh: return act::backward<act::kGeluTanh>(g, u, A(0), p);
        case act::kSoftplus: return act::backward<act::kSoftplus>(g, u, A(0), p);
        case act::kHardtanh: return act::backward<act::kHardtanh>(g, u, A(0), p);
        case act::kHardswish: return act::backward<act::kHardswish>(g, u, A(0), p);
        case act::kHardsigmoid: return act::backward<act::kHardsigmoid>(g, u, A(0), p);
        default: return g;
    }
}

// The activation as a template argument (-1 none): the vector kernels' form.
template <int ACT, typename A>
__device__ __forceinline__ A act_fwd_t(A u, const ActParamsT<A>& p) {
    if constexpr (ACT < 0) return u;
    else return act::forward<ACT>(u, p);
}

template <int ACT, typename A>
__device__ __forceinline__ A act_bwd_t(A g, A u, const ActParamsT<A>& p) {
    if constexpr (ACT < 0) return g;
    else return act::backward<ACT>(g, u, A(0), p);
}

// Running count, mean and sum of squared deviations.
template <typename A>
struct Welford {
    A n, mean, m2;
    __device__ __forceinline__ void init() { n = A(0); mean = A(0); m2 = A(0); }
    __device__ __forceinline__ void add(A x) {
        n += A(1);
        const A d = x - mean;
        mean += d / n;
        m2 += d * (x - mean);
    }
    __device__ __forceinline__ void merge(const Welford& o) {  // Chan et al.
        if (o.n == A(0)) return;
        const A total = n + o.n;
        const A d = o.mean - mean;
        const A f = o.n / total;
        mean += d * f;
        m2 += o.m2 + d * d * n * f;
        n = total;
    }
    __device__ __forceinline__ Welford shfl_down(unsigned off) const {
        Welford r;
        r.n = __shfl_down_sync(0xffffffffu, n, off);
        r.mean = __shfl_down_sync(0xffffffffu, mean, off);
        r.m2 = __shfl_down_sync(0xffffffffu, m2, off);
        return r;
    }
    static constexpr int kFloats = 3;
    __device__ __forceinline__ void store(A* ws, cl::index_t at, cl::index_t plane) const {
        ws[at] = n; ws[at + plane] = mean; ws[at + 2 * plane] = m2;
    }
    __device__ __forceinline__ void load(const A* ws, cl::index_t at, cl::index_t plane) {
        n = ws[at]; mean = ws[at + plane]; m2 = ws[at + 2 * plane];
    }
};

template <typename A>
struct Sum2 {
    A a, b;
    __device__ __forceinline__ void init() { a = A(0); b = A(0); }
    __device__ __forceinline__ void merge(const Sum2& o) { a += o.a; b += o.b; }
    __device__ __forceinline__ Sum2 shfl_down(unsigned off) const {
        Sum2 r;
        r.a = __shfl_down_sync(0xffffffffu, a, off);
        r.b = __shfl_down_sync(0xffffffffu, b, off);
        return r;
    }
    static constexpr int kFloats = 2;
    __device__ __forceinline__ void store(A* ws, cl::index_t at, cl::index_t plane) const {
        ws[at] = a; ws[at + plane] = b;
    }
    __device__ __forceinline__ void load(const A* ws, cl::index_t at, cl::index_t plane) {
        a = ws[at]; b = ws[at + plane];
    }
};

// The accumulator of reduction KIND for storage type T.
template <typename T, int KIND> struct AccOf { typedef Sum2<cl::acc_t<T>> type; };
template <typename T> struct AccOf<T, 0> { typedef Welford<cl::acc_t<T>> type; };

template <class A>
__device__ __forceinline__ A warp_reduce(A v) {
#pragma unroll
    for (unsigned off = 16; off > 0; off >>= 1) v.merge(v.shfl_down(off));
    return v;
}

}  // namespace nrm

// The per-channel reduction problem (ops/norm_common.py: _RED_DTYPE).
struct RedShape {
    cl::index_t rows;      // o
    cl::index_t channels;  // c
    cl::index_t inner;     // i
    cl::index_t count;     // rows * inner: elements per channel
    cl::index_t groups;    // KIND 2, 3: groups per sample (row-norm rows per sample)
    cl::index_t spatial;   // KIND 3: rows per sample (H*W)
    int act_mode;          // KIND 1: activation of the fused form, -1 none
    int has_z;             // KIND 1: z was added before the activation
};

namespace nrm {

// Adds element (o, c) at offset `off` to the accumulator.
template <typename T, int KIND>
__device__ __forceinline__ void visit(
    typename AccOf<T, KIND>::type& acc, cl::index_t off, cl::index_t o, cl::index_t c,
    const T* x, const T* dy, const T* z, const cl::acc_t<T>* mean, const cl::acc_t<T>* invstd,
    const cl::acc_t<T>* gamma, const cl::acc_t<T>* beta, const RedShape& s,
    const ActParamsFor<T>& p, cl::acc_t<T> shift) {
    typedef cl::acc_t<T> A;
    if constexpr (KIND == 0) {
        acc.add(cl::to_acc(x[off]) - shift);
    } else if constexpr (KIND == 1) {
        const A xhat = (cl::to_acc(x[off]) - mean[c]) * invstd[c];
        A g = cl::to_acc(dy[off]);
        if (s.act_mode >= 0) {
            A u = cl::math::fma(xhat, gamma[c], beta[c]);
            if (s.has_z) u += cl::to_acc(z[off]);
            g = act_bwd(s.act_mode, g, u, p);
        }
        acc.a += g;
        acc.b += g * xhat;
    } else if constexpr (KIND == 3) {
        // NHWC group norm: o = n * spatial + position, channel c in group c / (C / G)
        const cl::index_t smp = s.rows <= 0x7fffffffLL ? (cl::index_t)((unsigned)o / (unsigned)s.spatial)
                                                      : o / s.spatial;
        const cl::index_t row = smp * s.groups + c / (s.channels / s.groups);
        const A xhat = (cl::to_acc(x[off]) - mean[row]) * invstd[row];
        const A g = cl::to_acc(dy[off]);
        acc.a += g;
        acc.b += g * xhat;
    } else {
        // row-norm parameter j = c of sample o belongs to row o * groups + c / (channels/groups)
        const cl::index_t row = o * s.groups + c / (s.channels / s.groups);
        const A m = mean == nullptr ? A(0) : mean[row];  // RMS norm has no mean
        const A xhat = (cl::to_acc(x[off]) - m) * invstd[row];
        const A g = cl::to_acc(dy[off]);
        acc.a += g;
        acc.b += g * xhat;
    }
}

}  // namespace nrm

namespace nrm {

// Statistics accumulate x - shift with shift = the channel's first element: Welford's
// running mean then stays near 0, where float32 rounding is fine-grained (at mean 1e4
// every rounded update of an unshifted mean would perturb the variance by ~1e-4).
template <typename T, int KIND>
__device__ __forceinline__ cl::acc_t<T> shift_of(const T* x, cl::index_t c, const RedShape& s) {
    if constexpr (KIND == 0) return cl::to_acc(x[c * s.inner]);
    return cl::acc_t<T>(0);
}

}  // namespace nrm

// ---------------------------------------------------------------- reductions

template <typename T, int KIND>
__global__ void __launch_bounds__(256) red_planar(
    // pointers (unused ones may be null)
    const T* x, const T* dy, const T* z, const cl::acc_t<T>* mean, const cl::acc_t<T>* invstd,
    const cl::acc_t<T>* gamma, const cl::acc_t<T>* beta, cl::acc_t<T>* partial,
    // problem
    RedShape s, ActParamsFor<T> p) {
    typedef typename nrm::AccOf<T, KIND>::type Acc;
    __shared__ Acc warp_acc[32];
    const cl::index_t c = blockIdx.x;
    const cl::index_t chunks = gridDim.y;
    const cl::index_t per = (s.count + chunks - 1) / chunks;
    const cl::index_t begin = blockIdx.y * per;
    const cl::index_t end = begin + per < s.count ? begin + per : s.count;
    const cl::acc_t<T> shift = nrm::shift_of<T, KIND>(x, c, s);
    Acc acc;
    acc.init();
    // range [begin, end) of channel c's elements, flat j = o * inner + i. (o, i) and the
    // offset advance by additions only: no division per element.
    const cl::index_t j0 = begin + threadIdx.x;
    cl::index_t o = j0 / s.inner, i = j0 - o * s.inner;
    cl::index_t off = (o * s.channels + c) * s.inner + i;
    const cl::index_t d_o = blockDim.x / s.inner, d_i = blockDim.x - d_o * s.inner;
    const cl::index_t plane = s.channels * s.inner;  // offset step of one row
    const cl::index_t d_off = d_o * plane + d_i;
    for (cl::index_t j = j0; j < end; j += blockDim.x) {
        nrm::visit<T, KIND>(acc, off, o, c, x, dy, z, mean, invstd, gamma, beta, s, p, shift);
        i += d_i;
        o += d_o;
        off += d_off;
        if (i >= s.inner) {
            i -= s.inner;
            o += 1;
            off += plane - s.inner;
        }
    }
    acc = nrm::warp_reduce(acc);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    if (lane == 0) warp_acc[warp] = acc;
    __syncthreads();
    if (warp == 0) {
        const int nwarps = blockDim.x >> 5;
        if (lane < nwarps) acc = warp_acc[lane];
        else acc.init();
        acc = nrm::warp_reduce(acc);
        if (lane == 0) acc.store(partial, c * chunks + blockIdx.y, s.channels * chunks);
    }
}

template <typename T, int KIND>
__global__ void __launch_bounds__(256) red_chlast(
    // pointers (unused ones may be null)
    const T* x, const T* dy, const T* z, const cl::acc_t<T>* mean, const cl::acc_t<T>* invstd,
    const cl::acc_t<T>* gamma, const cl::acc_t<T>* beta, cl::acc_t<T>* partial,
    // problem (inner == 1)
    RedShape s, ActParamsFor<T> p) {
    typedef typename nrm::AccOf<T, KIND>::type Acc;
    __shared__ Acc part[nrm::kChlastRows][32];
    const cl::index_t c = (cl::index_t)blockIdx.x * 32 + threadIdx.x;
    const cl::index_t chunks = gridDim.y;
    const cl::index_t per = (s.rows + chunks - 1) / chunks;
    const cl::index_t begin = blockIdx.y * per;
    const cl::index_t end = begin + per < s.rows ? begin + per : s.rows;
    const cl::acc_t<T> shift = c < s.channels ? nrm::shift_of<T, KIND>(x, c, s) : cl::acc_t<T>(0);
    Acc acc;
    acc.init();
    if (c < s.channels) {
        for (cl::index_t o = begin + threadIdx.y; o < end; o += blockDim.y) {
            nrm::visit<T, KIND>(acc, o * s.channels + c, o, c, x, dy, z, mean, invstd, gamma,
                                beta, s, p, shift);
        }
    }
    part[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && c < s.channels) {
        for (int r = 1; r < (int)blockDim.y; ++r) acc.merge(part[r][threadIdx.x]);
        acc.store(partial, c * chunks + blockIdx.y, s.channels * chunks);
    }
}

// ---------------------------------------------------------------- finalize

// Batch-norm training statistics (ops/norm_common.py: _BN_DTYPE), scalars in A.
template <typename A>
struct BnParamsT {
    A eps;
    A momentum;
    int update_running;  // running_mean / running_var are updated (both given)
    int chunks;
};

template <typename T>
__global__ void __launch_bounds__(256) bn_stats_finalize(
    // pointers (x: for each channel's shift, its first element at c * inner)
    const T* x, const cl::acc_t<T>* partial, cl::acc_t<T>* save_mean, cl::acc_t<T>* save_invstd,
    cl::acc_t<T>* running_mean, cl::acc_t<T>* running_var,
    // problem
    cl::index_t channels, cl::index_t inner, BnParamsT<cl::acc_t<T>> bp) {
    typedef cl::acc_t<T> A;
    const cl::index_t c = cl::global_thread_id();  // one thread per channel (uncapped grid)
    if (c >= channels) return;
    const cl::index_t plane = channels * bp.chunks;
    nrm::Welford<A> acc, part;
    acc.init();
    for (int k = 0; k < bp.chunks; ++k) {
        part.load(partial, c * bp.chunks + k, plane);
        acc.merge(part);
    }
    const A var = acc.m2 / acc.n;  // biased, for normalizing
    const A mean = acc.mean + cl::to_acc(x[c * inner]);
    save_mean[c] = mean;
    save_invstd[c] = A(1) / cl::math::sqrt(var + bp.eps);
    if (bp.update_running) {
        const A unbiased = acc.m2 / (acc.n - A(1));  // n >= 2: checked by the caller
        running_mean[c] = (A(1) - bp.momentum) * running_mean[c] + bp.momentum * mean;
        running_var[c] = (A(1) - bp.momentum) * running_var[c] + bp.momentum * unbiased;
    }
}

// out_a[c] = sum of a, out_b[c] = sum of b over the chunks (either output may be null).
template <typename O>
__global__ void __launch_bounds__(256) sum2_finalize(
    const cl::acc_t<O>* partial, O* out_a, O* out_b, cl::index_t channels, int chunks) {
    const cl::index_t c = cl::global_thread_id();  // one thread per channel (uncapped grid)
    if (c >= channels) return;
    const cl::index_t plane = channels * chunks;
    nrm::Sum2<cl::acc_t<O>> acc, part;
    acc.init();
    for (int k = 0; k < chunks; ++k) {
        part.load(partial, c * chunks + k, plane);
        acc.merge(part);
    }
    if (out_a != nullptr) out_a[c] = cl::from_acc<O>(acc.a);
    if (out_b != nullptr) out_b[c] = cl::from_acc<O>(acc.b);
}

// ---------------------------------------------------------------- batch-norm elementwise

// The elementwise part (ops/norm_common.py: _BN_APPLY_DTYPE), scalars in A.
template <typename A>
struct BnApplyT {
    cl::index_t n;         // elements
    cl::index_t channels;
    cl::index_t inner;     // channel of element e: (e / inner) % channels
    A eps;                 // inference: invstd = 1 / sqrt(var + eps)
    A inv_count;           // backward: 1 / elements per channel; 0: inference backward
                           // (running statistics are constants: dx = gamma invstd g)
    int stats_are_var;     // 1: `stat` is running_var (inference); 0: saved invstd
    int act_mode;          // -1 none
};

namespace nrm {

// The channel of element e = (o * channels + c) * inner + i, advanced by a fixed stride
// with additions only (two divisions at the start, none per element).
template <typename I>
struct ChannelIter {
    I i, c, di, dc, inner, channels;
    __device__ __forceinline__ ChannelIter(I e, I stride, I inner_, I channels_)
        : inner(inner_), channels(channels_) {
        const I q = e / inner;
        i = e - q * inner;
        c = q % channels;
        const I sq = stride / inner;
        di = stride - sq * inner;
        dc = sq % channels;
    }
    __device__ __forceinline__ void next() {
        i += di;
        I carry = 0;
        if (i >= inner) {
            i -= inner;
            carry = 1;
        }
        c += dc + carry;  // < 2 * channels
        if (c >= channels) c -= channels;
    }
};

}  // namespace nrm

template <typename T, typename I>
__device__ __forceinline__ void bn_fwd_loop(
    const T* x, const T* z, T* y, const cl::acc_t<T>* mean, const cl::acc_t<T>* stat,
    const cl::acc_t<T>* gamma, const cl::acc_t<T>* beta, const BnApplyT<cl::acc_t<T>>& a, const ActParamsFor<T>& p) {
    typedef cl::acc_t<T> A;
    const I n = (I)a.n, inner = (I)a.inner, channels = (I)a.channels;
    const I stride = (I)cl::grid_stride();
    const I e0 = (I)cl::global_thread_id();
    nrm::ChannelIter<I> it(e0, stride, inner, channels);
    for (I e = e0; e < n; e += stride, it.next()) {
        const I c = it.c;
        const A inv = a.stats_are_var ? A(1) / cl::math::sqrt(stat[c] + a.eps) : stat[c];
        A u = cl::math::fma((cl::to_acc(x[e]) - mean[c]) * inv, gamma[c], beta[c]);
        if (z != nullptr) u += cl::to_acc(z[e]);
        y[e] = cl::from_acc<T>(nrm::act_fwd(a.act_mode, u, p));
    }
}

template <typename T>
__global__ void __launch_bounds__(256) bn_fwd_apply(
    // pointers (z may be null)
    const T* x, const T* z, T* y, const cl::acc_t<T>* mean, const cl::acc_t<T>* stat,
    const cl::acc_t<T>* gamma, const cl::acc_t<T>* beta,
    // problem
    BnApplyT<cl::acc_t<T>> a, ActParamsFor<T> p) {
    if (a.n <= 0x7fffffffLL) bn_fwd_loop<T, unsigned>(x, z, y, mean, stat, gamma, beta, a, p);
    else bn_fwd_loop<T, cl::index_t>(x, z, y, mean, stat, gamma, beta, a, p);
}

// dx = gamma invstd (g - dbeta / m - xhat dgamma / m), or gamma invstd g in inference
// (a.inv_count == 0); dz = g (the gradient into the add).
template <typename T, typename I>
__device__ __forceinline__ void bn_bwd_loop(
    const T* dy, const T* x, const T* z, T* dx, T* dz, const cl::acc_t<T>* mean,
    const cl::acc_t<T>* invstd, const cl::acc_t<T>* gamma, const cl::acc_t<T>* beta,
    const cl::acc_t<T>* dgamma, const cl::acc_t<T>* dbeta,
    const BnApplyT<cl::acc_t<T>>& a, const ActParamsFor<T>& p) {
    typedef cl::acc_t<T> A;
    const I n = (I)a.n, inner = (I)a.inner, channels = (I)a.channels;
    const I stride = (I)cl::grid_stride();
    const I e0 = (I)cl::global_thread_id();
    nrm::ChannelIter<I> it(e0, stride, inner, channels);
    for (I e = e0; e < n; e += stride, it.next()) {
        const I c = it.c;
        const A xhat = (cl::to_acc(x[e]) - mean[c]) * invstd[c];
        A g = cl::to_acc(dy[e]);
        if (a.act_mode >= 0) {
            A u = cl::math::fma(xhat, gamma[c], beta[c]);
            if (z != nullptr) u += cl::to_acc(z[e]);
            g = nrm::act_bwd(a.act_mode, g, u, p);
        }
        if (dz != nullptr) dz[e] = cl::from_acc<T>(g);
        const A r = a.inv_count != A(0)
                        ? g - a.inv_count * cl::math::fma(xhat, dgamma[c], dbeta[c]) : g;
        dx[e] = cl::from_acc<T>(gamma[c] * invstd[c] * r);
    }
}

template <typename T>
__global__ void __launch_bounds__(256) bn_bwd_apply(
    // pointers (z, dz may be null)
    const T* dy, const T* x, const T* z, T* dx, T* dz, const cl::acc_t<T>* mean,
    const cl::acc_t<T>* invstd, const cl::acc_t<T>* gamma, const cl::acc_t<T>* beta,
    const cl::acc_t<T>* dgamma, const cl::acc_t<T>* dbeta,
    // problem
    BnApplyT<cl::acc_t<T>> a, ActParamsFor<T> p) {
    if (a.n <= 0x7fffffffLL)
        bn_bwd_loop<T, unsigned>(dy, x, z, dx, dz, mean, invstd, gamma, beta, dgamma, dbeta, a, p);
    else
        bn_bwd_loop<T, cl::index_t>(dy, x, z, dx, dz, mean, invstd, gamma, beta, dgamma, dbeta, a,
                                    p);
}

// Vector forms of bn_fwd_apply / bn_bwd_apply: packs of VEC = 16 / sizeof(T) elements
// moved by one 16-byte load or store. The caller guarantees every pointer is 16-byte
// aligned, the tensors contiguous, and (CHLAST = false) inner % VEC == 0: a pack lies in
// one channel; or (CHLAST = true) inner == 1 and channels % VEC == 0: a pack holds the
// channels c0 .. c0 + VEC - 1. Either way n % VEC == 0 (no tail). The pack's channel
// advances by additions (ChannelIter over packs), as the scalar loops do per element.
namespace nrm {

template <typename T, int VEC>
struct alignas(sizeof(T) * VEC) Pack {
    T v[VEC];
};

template <typename T>
struct VecOf {
    static constexpr int value = 16 / sizeof(T);
};

// Packs, pack-level inner and channels of the ChannelIter, and the channel of lane j.
template <typename I, bool CHLAST, int VEC>
struct PackView {
    I packs, inner, channels;
    template <typename A>
    __device__ __forceinline__ explicit PackView(const BnApplyT<A>& a)
        : packs((I)(a.n / VEC)),
          inner(CHLAST ? (I)1 : (I)(a.inner / VEC)),
          channels(CHLAST ? (I)(a.channels / VEC) : (I)a.channels) {}
    __device__ __forceinline__ static I channel(I it_c, int j) {
        return CHLAST ? it_c * VEC + j : it_c;
    }
};

}  // namespace nrm

template <typename T, bool CHLAST, int ACT>
__device__ __forceinline__ void bn_fwd_vec_loop(
    const T* x, const T* z, T* y, const cl::acc_t<T>* mean, const cl::acc_t<T>* stat,
    const cl::acc_t<T>* gamma, const cl::acc_t<T>* beta, const BnApplyT<cl::acc_t<T>>& a, const ActParamsFor<T>& p) {
    typedef unsigned I;  // 32-bit indices: the host takes the scalar kernels past 2^31 - 1
    typedef cl::acc_t<T> A;
    constexpr int VEC = nrm::VecOf<T>::value;
    typedef nrm::Pack<T, VEC> P;
    const nrm::PackView<I, CHLAST, VEC> pv(a);
    const I stride = (I)cl::grid_stride();
    const I k0 = (I)cl::global_thread_id();
    nrm::ChannelIter<I> it(k0, stride, pv.inner, pv.channels);
    for (I k = k0; k < pv.packs; k += stride, it.next()) {
        const P xv = reinterpret_cast<const P*>(x)[k];
        P zv, yv;
        if (z != nullptr) zv = reinterpret_cast<const P*>(z)[k];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const I c = pv.channel(it.c, j);
            const A inv = a.stats_are_var ? A(1) / cl::math::sqrt(stat[c] + a.eps) : stat[c];
            A u = cl::math::fma((cl::to_acc(xv.v[j]) - mean[c]) * inv, gamma[c], beta[c]);
            if (z != nullptr) u += cl::to_acc(zv.v[j]);
            yv.v[j] = cl::from_acc<T>(nrm::act_fwd_t<ACT>(u, p));
        }
        reinterpret_cast<P*>(y)[k] = yv;
    }
}

template <typename T, bool CHLAST, int ACT>
__global__ void __launch_bounds__(256) bn_fwd_apply_vec(
    // pointers (z may be null; all 16-byte aligned)
    const T* x, const T* z, T* y, const cl::acc_t<T>* mean, const cl::acc_t<T>* stat,
    const cl::acc_t<T>* gamma, const cl::acc_t<T>* beta,
    // problem
    BnApplyT<cl::acc_t<T>> a, ActParamsFor<T> p) {
    bn_fwd_vec_loop<T, CHLAST, ACT>(x, z, y, mean, stat, gamma, beta, a, p);
}

template <typename T, bool CHLAST, int ACT>
__device__ __forceinline__ void bn_bwd_vec_loop(
    const T* dy, const T* x, const T* z, T* dx, T* dz, const cl::acc_t<T>* mean,
    const cl::acc_t<T>* invstd, const cl::acc_t<T>* gamma, const cl::acc_t<T>* beta,
    const cl::acc_t<T>* dgamma, const cl::acc_t<T>* dbeta,
    const BnApplyT<cl::acc_t<T>>& a, const ActParamsFor<T>& p) {
    typedef unsigned I;  // as bn_fwd_vec_loop's
    typedef cl::acc_t<T> A;
    constexpr int VEC = nrm::VecOf<T>::value;
    typedef nrm::Pack<T, VEC> P;
    const nrm::PackView<I, CHLAST, VEC> pv(a);
    const I stride = (I)cl::grid_stride();
    const I k0 = (I)cl::global_thread_id();
    nrm::ChannelIter<I> it(k0, stride, pv.inner, pv.channels);
    for (I k = k0; k < pv.packs; k += stride, it.next()) {
        const P xv = reinterpret_cast<const P*>(x)[k];
        const P gv = reinterpret_cast<const P*>(dy)[k];
        P zv, dxv, dzv;
        if (ACT >= 0 && z != nullptr) zv = reinterpret_cast<const P*>(z)[k];
#pragma unroll
        for (int j = 0; j < VEC; ++j) {
            const I c = pv.channel(it.c, j);
            const A xhat = (cl::to_acc(xv.v[j]) - mean[c]) * invstd[c];
            A g = cl::to_acc(gv.v[j]);
            if constexpr (ACT >= 0) {
                A u = cl::math::fma(xhat, gamma[c], beta[c]);
                if (z != nullptr) u += cl::to_acc(zv.v[j]);
                g = nrm::act_bwd_t<ACT>(g, u, p);
            }
            dzv.v[j] = cl::from_acc<T>(g);
            const A r = a.inv_count != A(0)
                            ? g - a.inv_count * cl::math::fma(xhat, dgamma[c], dbeta[c]) : g;
            dxv.v[j] = cl::from_acc<T>(gamma[c] * invstd[c] * r);
        }
        if (dz != nullptr) reinterpret_cast<P*>(dz)[k] = dzv;
        reinterpret_cast<P*>(dx)[k] = dxv;
    }
}

// double asks for 3 blocks per SM: left to itself, ptxas (sm_90) fitted four modes'
// kernels into 48-64 registers and spilled 4-8 bytes around the division slow-path calls.
template <typename T, bool CHLAST, int ACT>
__global__ void __launch_bounds__(256, sizeof(T) == 8 ? 3 : 0) bn_bwd_apply_vec(
    // pointers (z, dz may be null; all 16-byte aligned)
    const T* dy, const T* x, const T* z, T* dx, T* dz, const cl::acc_t<T>* mean,
    const cl::acc_t<T>* invstd, const cl::acc_t<T>* gamma, const cl::acc_t<T>* beta,
    const cl::acc_t<T>* dgamma, const cl::acc_t<T>* dbeta,
    // problem
    BnApplyT<cl::acc_t<T>> a, ActParamsFor<T> p) {
    bn_bwd_vec_loop<T, CHLAST, ACT>(dy, x, z, dx, dz, mean, invstd, gamma, beta, dgamma, dbeta,
                                    a, p);
}

// ---------------------------------------------------------------- row norms

// One row norm problem (ops/norm_common.py: _ROW_DTYPE), eps in A. Row r holds `cols`
// contiguous elements; the weight index of column k is ((r % groups) * cols + k) / inner:
//   layer / RMS norm: groups = 1, inner = 1 (weight over the normalized shape)
//   group norm: groups = G, inner = H*W (weight per channel); instance norm: G = C
template <typename A>
struct RowShapeT {
    cl::index_t rows;
    cl::index_t cols;
    cl::index_t groups;
    cl::index_t inner;
    A eps;
    int has_weight;
    int has_bias;
    int group_log2;  // rownorm_*_rows: log2 of the lanes per row (0..5)
};

namespace nrm {

// Sum over the block, returned to every thread. `sm` holds 32 values; the leading
// barrier makes back-to-back calls safe.
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* sm) {
#pragma unroll
    for (unsigned off = 16; off > 0; off >>= 1) v += __shfl_down_sync(0xffffffffu, v, off);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    __syncthreads();  // the previous call's readers are done with sm
    if (lane == 0) sm[warp] = v;
    __syncthreads();
    const int nwarps = blockDim.x >> 5;
    A t = A(0);
    for (int w = 0; w < nwarps; ++w) t += sm[w];  // same order in every thread
    return t;
}

// The weight index of row r's columns k0, k0 + step, k0 + 2 step, ... (a thread's walk
// along its row): channel (r % groups) * (cols / inner) + k / inner, divided once per row
// and then advanced by additions, which keeps the 64-bit remainder and divisions out of
// the element loops. Layer / RMS norm (inner = 1) is the same walk with no remainder.
struct WeightWalk {
    cl::index_t idx, dq, rem, dr, inner;
    template <typename A>
    __device__ __forceinline__ WeightWalk(cl::index_t r, cl::index_t k0, cl::index_t step,
                                          const RowShapeT<A>& s)
        : inner(s.inner) {
        idx = (s.groups == 1 ? 0 : (r % s.groups) * (s.cols / s.inner)) + k0 / inner;
        rem = k0 % inner;
        dq = step / inner;
        dr = step % inner;
    }
    __device__ __forceinline__ void next() {
        idx += dq;
        rem += dr;
        if (rem >= inner) {
            rem -= inner;
            ++idx;
        }
    }
};

}  // namespace nrm

namespace nrm {

// The weight and bias index of a row's item k: WeightWalk's for elements (VEC 1); for
// packs (VEC > 1, only where the parameters are indexed by the column) the pack's own.
template <int VEC>
struct ParamWalk {
    cl::index_t idx, step;
    template <typename A>
    __device__ __forceinline__ ParamWalk(cl::index_t, cl::index_t k0, cl::index_t step_,
                                         const RowShapeT<A>&)
        : idx(k0), step(step_) {}
    __device__ __forceinline__ void next() { idx += step; }
};
template <>
struct ParamWalk<1> : WeightWalk {
    using WeightWalk::WeightWalk;
};

// One item's output, (x - mean) rstd w + b, its weight and bias item `idx`.
template <typename T, int VEC>
__device__ __forceinline__ Pack<T, VEC> norm_item(const Pack<T, VEC>& v, const T* weight,
                                                  const T* bias, cl::index_t idx,
                                                  cl::acc_t<T> mean, cl::acc_t<T> rstd,
                                                  const RowShapeT<cl::acc_t<T>>& s) {
    typedef Pack<T, VEC> P;
    P w, b, o;
    if (s.has_weight) w = reinterpret_cast<const P*>(weight)[idx];
    if (s.has_bias) b = reinterpret_cast<const P*>(bias)[idx];
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        cl::acc_t<T> u = (cl::to_acc(v.v[j]) - mean) * rstd;
        if (s.has_weight) u *= cl::to_acc(w.v[j]);
        if (s.has_bias) u += cl::to_acc(b.v[j]);
        o.v[j] = cl::from_acc<T>(u);
    }
    return o;
}

// The passes over a row r's items (an item: an element, VEC 1, or a 16-byte pack of VEC
// elements: nrm::Pack), shared by the block-per-row kernels (the thread's items: from
// threadIdx.x by blockDim.x) and the split ones (SPLIT: blockIdx.x a stretch of the row,
// the items from the thread's index in the row's blocks by their threads). The bounds,
// strides and pointers are read from the parameters where used (a register copy of each
// held through the loops cost the element backward 8-10 registers and a spill).
template <typename T, int VEC, bool SPLIT = false>
struct RowPass {
    typedef cl::acc_t<T> A;
    typedef Pack<T, VEC> P;
    const RowShapeT<A>& s;
    cl::index_t r;

    __device__ __forceinline__ RowPass(const RowShapeT<A>& s_, cl::index_t r_) : s(s_), r(r_) {}
    static __device__ __forceinline__ cl::index_t first() {
        return SPLIT ? (cl::index_t)blockIdx.x * blockDim.x + threadIdx.x : threadIdx.x;
    }
    static __device__ __forceinline__ cl::index_t stride() {
        return SPLIT ? (cl::index_t)gridDim.x * blockDim.x : blockDim.x;
    }
    __device__ __forceinline__ cl::index_t items() const { return s.cols / VEC; }
    // item k of the row in array a (x, y, dy, dx)
    __device__ __forceinline__ const P& at(const T* a, cl::index_t k) const {
        return reinterpret_cast<const P*>(a)[r * items() + k];
    }
    __device__ __forceinline__ P& at(T* a, cl::index_t k) const {
        return reinterpret_cast<P*>(a)[r * items() + k];
    }

    // sum of (x - shift), then of (x - mean)^2
    __device__ __forceinline__ A sum_shifted(const T* x, A shift) const {
        A t = A(0);
        for (cl::index_t k = first(); k < items(); k += stride()) {
            const P v = at(x, k);
#pragma unroll
            for (int j = 0; j < VEC; ++j) t += cl::to_acc(v.v[j]) - shift;
        }
        return t;
    }
    __device__ __forceinline__ A sum_sq_dev(const T* x, A mean) const {
        A q = A(0);
        for (cl::index_t k = first(); k < items(); k += stride()) {
            const P v = at(x, k);
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const A d = cl::to_acc(v.v[j]) - mean;
                q = cl::math::fma(d, d, q);
            }
        }
        return q;
    }

    // y = (x - mean) rstd w + b
    __device__ __forceinline__ void write(const T* x, const T* weight, const T* bias, T* y,
                                          A mean, A rstd) const {
        ParamWalk<VEC> wk(r, first(), stride(), s);
        for (cl::index_t k = first(); k < items(); k += stride(), wk.next())
            at(y, k) = norm_item<T, VEC>(at(x, k), weight, bias, wk.idx, mean, rstd, s);
    }

    // the backward: !WRITE adds gw and gw xhat (gw = dy w) to sg and sgx; WRITE writes
    // dx = rstd (gw - sg - xhat sgx), sg and sgx then the row's means of the two
    template <bool WRITE>
    __device__ __forceinline__ void grad(const T* dy, const T* x, const T* weight, A mean, A rstd,
                                         A& sg, A& sgx, T* dx = nullptr) const {
        ParamWalk<VEC> wk(r, first(), stride(), s);
        for (cl::index_t k = first(); k < items(); k += stride(), wk.next()) {
            const P g = at(dy, k), v = at(x, k);
            P w, o;
            if (s.has_weight) w = reinterpret_cast<const P*>(weight)[wk.idx];
#pragma unroll
            for (int j = 0; j < VEC; ++j) {
                const A gw = cl::to_acc(g.v[j]) * (s.has_weight ? cl::to_acc(w.v[j]) : A(1));
                const A xhat = (cl::to_acc(v.v[j]) - mean) * rstd;
                if (WRITE) {
                    o.v[j] = cl::from_acc<T>(rstd * (gw - sg - xhat * sgx));
                } else {
                    sg += gw;
                    sgx = cl::math::fma(gw, xhat, sgx);
                }
            }
            if (WRITE) at(dx, k) = o;
        }
    }
};

}  // namespace nrm

// One block per row: exact two-pass statistics (the row stays in L1/L2 between passes).
// VEC 1: elements; VEC = 16 / sizeof(T): 16-byte packs, for rows whose weight and bias are
// indexed by the column (layer and RMS norm; or no weight and bias), cols % VEC == 0,
// cols < 2^31 and every pointer 16-byte aligned (ops/row_norm.py: _row_vec).
template <typename T, bool RMS, int VEC>
__global__ void __launch_bounds__(1024) rownorm_fwd(
    // pointers (weight, bias, mean may be null)
    const T* x, const T* weight, const T* bias, T* y, cl::acc_t<T>* mean_out,
    cl::acc_t<T>* rstd_out,
    // problem
    RowShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    __shared__ A sm[32];
    const cl::index_t r = blockIdx.x;
    const nrm::RowPass<T, VEC> pass(s, r);
    const A inv_cols = A(1) / (A)s.cols;
    A mean = A(0);
    if constexpr (!RMS) {
        // sum of x - x[0]: a constant row's mean is exactly x[0] (its deviations, y and
        // xhat exactly 0, where sum / n rounds off x), and the sum stays far from overflow
        // for rows of close values
        mean = cl::to_acc(x[r * s.cols]);  // the shift
        mean += nrm::block_sum(pass.sum_shifted(x, mean), sm) * inv_cols;
    }
    // second pass over the (cached) row: exact deviations, no cancellation
    const A rstd = A(1) / cl::math::sqrt(nrm::block_sum(pass.sum_sq_dev(x, mean), sm) * inv_cols
                                         + s.eps);
    pass.write(x, weight, bias, y, mean, rstd);
    if (threadIdx.x == 0) {
        if (mean_out != nullptr) mean_out[r] = mean;
        rstd_out[r] = rstd;
    }
}

// dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), gw = dy * weight; RMS drops mean(gw).
// Two blocks an SM: 32 registers (the element form took 37 left to itself, so one 1024-
// thread block an SM), no spill on sm_90.
template <typename T, bool RMS, int VEC>
__global__ void __launch_bounds__(1024, CL_MIN_BLOCKS(1024, 2)) rownorm_bwd(
    // pointers (weight, mean may be null)
    const T* dy, const T* x, const T* weight, const cl::acc_t<T>* mean_in,
    const cl::acc_t<T>* rstd_in, T* dx,
    // problem
    RowShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    __shared__ A sm[32];
    const cl::index_t r = blockIdx.x;
    const nrm::RowPass<T, VEC> pass(s, r);
    const A mean = RMS ? A(0) : mean_in[r];
    const A rstd = rstd_in[r];
    A sg = A(0), sgx = A(0);
    pass.template grad<false>(dy, x, weight, mean, rstd, sg, sgx);
    const A inv_cols = A(1) / (A)s.cols;
    A mg = RMS ? A(0) : nrm::block_sum(sg, sm) * inv_cols;
    A mgx = nrm::block_sum(sgx, sm) * inv_cols;
    pass.template grad<true>(dy, x, weight, mean, rstd, mg, mgx, dx);
}

// Short rows (at most 32 packs), several to a warp: each row a group of lanes, the packs
// rounded up to a power of two (cl::group_row; 64 fp16 columns, RMS norm over a head
// dimension, 8 packs: 8 lanes, 16 rows a 128-thread block), one pack per lane held in
// registers, sums by shuffles within the group; otherwise as rownorm_fwd / rownorm_bwd
// with VEC > 1 (same conditions, and cols <= 32 * VEC).
namespace nrm {
template <typename A>
__device__ __forceinline__ A group_sum(A v, int lanes) {
#pragma unroll
    for (int k = 16; k > 0; k >>= 1) {
        if (k < lanes) v += __shfl_xor_sync(0xffffffffu, v, k);  // (lanes: warp-uniform)
    }
    return v;
}
}  // namespace nrm

template <typename T, bool RMS>
__global__ void __launch_bounds__(128) rownorm_fwd_rows(
    // pointers (weight, bias, mean may be null; all 16-byte aligned)
    const T* x, const T* weight, const T* bias, T* y, cl::acc_t<T>* mean_out,
    cl::acc_t<T>* rstd_out,
    // problem
    RowShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    constexpr int VEC = nrm::VecOf<T>::value;
    typedef nrm::Pack<T, VEC> P;
    cl::GroupRow g;
    if (!cl::group_row(s.rows, s.group_log2, g)) return;
    const bool mine = g.lane < (int)(s.cols / VEC);  // this lane's pack
    P v;
    if (mine) v = reinterpret_cast<const P*>(x + g.row * s.cols)[g.lane];
    const A inv_cols = A(1) / (A)s.cols;
    A mean = A(0);
    if constexpr (!RMS) {
        mean = cl::to_acc(x[g.row * s.cols]);  // the shift, as rownorm_fwd
        A t = A(0);
#pragma unroll
        for (int j = 0; j < VEC; ++j) t += mine ? cl::to_acc(v.v[j]) - mean : A(0);
        mean += nrm::group_sum(t, g.lanes) * inv_cols;
    }
    A q = A(0);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        const A d = mine ? cl::to_acc(v.v[j]) - mean : A(0);
        q = cl::math::fma(d, d, q);
    }
    const A rstd = A(1) / cl::math::sqrt(nrm::group_sum(q, g.lanes) * inv_cols + s.eps);
    if (mine) {
        reinterpret_cast<P*>(y + g.row * s.cols)[g.lane] =
            nrm::norm_item<T, VEC>(v, weight, bias, g.lane, mean, rstd, s);
    }
    if (g.lane == 0) {  // (idle lanes: cl::kIdleLane)
        if (mean_out != nullptr) mean_out[g.row] = mean;
        rstd_out[g.row] = rstd;
    }
}

template <typename T, bool RMS>
__global__ void __launch_bounds__(128) rownorm_bwd_rows(
    // pointers (weight, mean may be null; all 16-byte aligned)
    const T* dy, const T* x, const T* weight, const cl::acc_t<T>* mean_in,
    const cl::acc_t<T>* rstd_in, T* dx,
    // problem
    RowShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    constexpr int VEC = nrm::VecOf<T>::value;
    typedef nrm::Pack<T, VEC> P;
    cl::GroupRow g;
    if (!cl::group_row(s.rows, s.group_log2, g)) return;
    const bool mine = g.lane < (int)(s.cols / VEC);
    const cl::index_t base = g.row * s.cols;
    const A mean = RMS ? A(0) : mean_in[g.row];
    const A rstd = rstd_in[g.row];
    P gv, v, w;
    if (mine) {
        gv = reinterpret_cast<const P*>(dy + base)[g.lane];
        v = reinterpret_cast<const P*>(x + base)[g.lane];
        if (s.has_weight) w = reinterpret_cast<const P*>(weight)[g.lane];
    }
    A gw[VEC], xhat[VEC];
    A sg = A(0), sgx = A(0);
#pragma unroll
    for (int j = 0; j < VEC; ++j) {
        gw[j] = mine ? cl::to_acc(gv.v[j]) * (s.has_weight ? cl::to_acc(w.v[j]) : A(1)) : A(0);
        xhat[j] = mine ? (cl::to_acc(v.v[j]) - mean) * rstd : A(0);
        sg += gw[j];
        sgx = cl::math::fma(gw[j], xhat[j], sgx);
    }
    const A inv_cols = A(1) / (A)s.cols;
    const A mg = RMS ? A(0) : nrm::group_sum(sg, g.lanes) * inv_cols;
    const A mgx = nrm::group_sum(sgx, g.lanes) * inv_cols;
    if (mine) {
        P o;
#pragma unroll
        for (int j = 0; j < VEC; ++j) o.v[j] = cl::from_acc<T>(rstd * (gw[j] - mg - xhat[j] * mgx));
        reinterpret_cast<P*>(dx + base)[g.lane] = o;
    }
}

// The split path of few long rows (so that every SM has work where one block per row
// would leave most idle), over (stretch, row) blocks: blockIdx.x a stretch, grid-stride
// along the row. Forward: the statistics from red_planar<T, 0> over (1, rows, cols) and
// bn_stats_finalize, then rownorm_apply writes y. Backward: rownorm_bwd_partial sums a
// stretch into partial[(row * gridDim.x + blockIdx.x) * 2 + {0, 1}] = (sum gw, sum gw
// xhat); rownorm_bwd_apply adds its row's partials in stretch order (every block of the
// row the same sums: deterministic) and writes dx for its stretch.
template <typename T>
__global__ void __launch_bounds__(256) rownorm_apply(
    // pointers (weight, bias may be null)
    const T* x, const T* weight, const T* bias, T* y, const cl::acc_t<T>* mean,
    const cl::acc_t<T>* rstd,
    // problem
    RowShapeT<cl::acc_t<T>> s) {
    const cl::index_t r = blockIdx.y;
    const nrm::RowPass<T, 1, true> pass(s, r);
    pass.write(x, weight, bias, y, mean[r], rstd[r]);
}

template <typename T, bool RMS>
__global__ void __launch_bounds__(256) rownorm_bwd_partial(
    // pointers (weight, mean may be null)
    const T* dy, const T* x, const T* weight, const cl::acc_t<T>* mean_in,
    const cl::acc_t<T>* rstd_in, cl::acc_t<T>* partial,
    // problem
    RowShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    __shared__ A sm[32];
    const cl::index_t r = blockIdx.y;
    const nrm::RowPass<T, 1, true> pass(s, r);
    A sg = A(0), sgx = A(0);
    pass.template grad<false>(dy, x, weight, RMS ? A(0) : mean_in[r], rstd_in[r], sg, sgx);
    sg = nrm::block_sum(sg, sm);
    sgx = nrm::block_sum(sgx, sm);
    if (threadIdx.x == 0) {
        const cl::index_t at = (r * gridDim.x + blockIdx.x) * 2;
        partial[at] = sg;
        partial[at + 1] = sgx;
    }
}

template <typename T, bool RMS>
__global__ void __launch_bounds__(256) rownorm_bwd_apply(
    // pointers (weight, mean may be null)
    const T* dy, const T* x, const T* weight, const cl::acc_t<T>* mean_in,
    const cl::acc_t<T>* rstd_in, const cl::acc_t<T>* partial, T* dx,
    // problem
    RowShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    const cl::index_t r = blockIdx.y;
    A sg = A(0), sgx = A(0);
    for (unsigned c = 0; c < gridDim.x; ++c) {  // the row's stretches, in order
        sg += partial[(r * gridDim.x + c) * 2];
        sgx += partial[(r * gridDim.x + c) * 2 + 1];
    }
    const A inv_cols = A(1) / (A)s.cols;
    A mg = RMS ? A(0) : sg * inv_cols;
    A mgx = sgx * inv_cols;
    const nrm::RowPass<T, 1, true> pass(s, r);
    pass.template grad<true>(dy, x, weight, RMS ? A(0) : mean_in[r], rstd_in[r], mg, mgx, dx);
}

// ---------------------------------------------------------------- NHWC group norm

// Channels-last group norm (ops/norm_common.py: _GN_NHWC_DTYPE), eps in A. x is (N, spatial, C)
// contiguous; group g holds channels [g * cpg, (g + 1) * cpg). A block covers sample n and `gpb`
// whole consecutive groups (a tile of gpb * cpg <= 32 channels when cpg < 32, one group
// otherwise): tiles = ceil(groups / gpb), block b = n * tiles + tile.
template <typename A>
struct GnNhwcShapeT {
    cl::index_t spatial;   // H*W (1 for (N, C) input)
    cl::index_t channels;  // C
    cl::index_t groups;    // G
    cl::index_t cpg;       // C / G
    cl::index_t tiles;     // tiles of groups per sample
    int gpb;               // groups per block: 32 / cpg when cpg < 32, else 1
    A eps;
    int has_weight;
    int has_bias;
};

namespace nrm {

constexpr int kGnRows = 16;  // blockDim.y of gn_nhwc_*: blockDim = (32, kGnRows)

// The block's place: first group g0 and channel c0 of its tile, `ng` groups in it,
// `span` channels, and the thread's tile-local group `lg` (threadIdx.x / cpg, or 0).
struct GnTile {
    cl::index_t n, g0, c0, span;
    int ng, lg;
    template <typename A>
    __device__ __forceinline__ explicit GnTile(const GnNhwcShapeT<A>& s) {
        const cl::index_t b = blockIdx.x;
        n = b / s.tiles;
        g0 = (b - n * s.tiles) * s.gpb;
        ng = (int)(s.groups - g0 < s.gpb ? s.groups - g0 : s.gpb);
        c0 = g0 * s.cpg;
        span = ng * s.cpg;
        lg = s.cpg >= 32 ? 0 : (int)(threadIdx.x / (unsigned)s.cpg);
        if (lg >= ng) lg = ng - 1;  // idle lanes (threadIdx.x >= span): any valid group
    }
    // statistics row of the thread's group
    template <typename A>
    __device__ __forceinline__ cl::index_t row(const GnNhwcShapeT<A>& s) const {
        return n * s.groups + g0 + lg;
    }
    // does this thread publish its group's statistics (first lane of the group)?
    template <typename A>
    __device__ __forceinline__ bool leader(const GnNhwcShapeT<A>& s) const {
        return threadIdx.y == 0 && threadIdx.x < span &&
               (s.cpg >= 32 ? threadIdx.x == 0 : threadIdx.x % (unsigned)s.cpg == 0);
    }
};

// Per-group sum over the block, returned to every thread for its group `lg`: columns
// (one channel lane each) are summed over threadIdx.y, then each group's lanes, both in
// a fixed order (deterministic). Back-to-back calls are safe: part is last read before
// the third barrier, tot is rewritten only after every thread has passed the next call's
// first barrier.
template <typename A>
__device__ __forceinline__ A gn_tile_sum(A v, A (*part)[32], A* tot, const GnTile& t,
                                         cl::index_t cpg) {
    part[threadIdx.y][threadIdx.x] = v;
    __syncthreads();
    if (threadIdx.y == 0) {
        A col = A(0);
        for (int r = 0; r < (int)blockDim.y; ++r) col += part[r][threadIdx.x];
        part[0][threadIdx.x] = col;  // own column only: no other thread reads it now
    }
    __syncthreads();
    if (threadIdx.y == 0 && (int)threadIdx.x < t.ng) {
        const int lo = cpg >= 32 ? 0 : (int)threadIdx.x * (int)cpg;
        const int hi = cpg >= 32 ? 32 : lo + (int)cpg;
        A sum = A(0);
        for (int l = lo; l < hi; ++l) sum += part[0][l];
        tot[threadIdx.x] = sum;
    }
    __syncthreads();
    return tot[t.lg];
}

}  // namespace nrm

namespace nrm {

// The H*W rows a gn_nhwc_* block covers, as offsets from its tile's first element: all of
// them, or in a split launch (gridDim.y stretches) its stretch [p0, p1); the thread's
// first row's offset, the end and the step (blockDim.y rows).
struct GnRange {
    cl::index_t p0, p1, off0, end, rstep;
    template <typename A>
    __device__ __forceinline__ explicit GnRange(const GnNhwcShapeT<A>& s) {
        const cl::index_t per = (s.spatial + gridDim.y - 1) / gridDim.y;
        p0 = (cl::index_t)blockIdx.y * per;
        p1 = p0 + per < s.spatial ? p0 + per : s.spatial;
        if (p1 < p0) p1 = p0;  // (a stretch past the end: empty)
        off0 = (p0 + threadIdx.y) * s.channels;
        end = p1 * s.channels;
        rstep = (cl::index_t)blockDim.y * s.channels;
    }
};

// sum of x - shift over the thread's elements of the range (channels k of the tile)
template <typename T>
__device__ __forceinline__ cl::acc_t<T> gn_sum_dev(const T* xs, cl::acc_t<T> shift,
                                                   const GnRange& g, const GnTile& t) {
    cl::acc_t<T> sum = cl::acc_t<T>(0);
    for (cl::index_t off = g.off0; off < g.end; off += g.rstep)
        for (cl::index_t k = threadIdx.x; k < t.span; k += 32) sum += cl::to_acc(xs[off + k]) - shift;
    return sum;
}
// sum of (x - mean)^2 likewise
template <typename T>
__device__ __forceinline__ cl::acc_t<T> gn_sum_sq(const T* xs, cl::acc_t<T> mean,
                                                  const GnRange& g, const GnTile& t) {
    cl::acc_t<T> q = cl::acc_t<T>(0);
    for (cl::index_t off = g.off0; off < g.end; off += g.rstep)
        for (cl::index_t k = threadIdx.x; k < t.span; k += 32) {
            const cl::acc_t<T> d = cl::to_acc(xs[off + k]) - mean;
            q = cl::math::fma(d, d, q);
        }
    return q;
}
// y = (x - mean) * rstd [* weight[c]] [+ bias[c]] over the range
template <typename T>
__device__ __forceinline__ void gn_write(const T* xs, const T* weight, const T* bias, T* ys,
                                         cl::acc_t<T> mean, cl::acc_t<T> rstd, const GnRange& g,
                                         const GnTile& t, const GnNhwcShapeT<cl::acc_t<T>>& s) {
    for (cl::index_t off = g.off0; off < g.end; off += g.rstep)
        for (cl::index_t k = threadIdx.x; k < t.span; k += 32) {
            cl::acc_t<T> v = (cl::to_acc(xs[off + k]) - mean) * rstd;
            if (s.has_weight) v *= cl::to_acc(weight[t.c0 + k]);
            if (s.has_bias) v += cl::to_acc(bias[t.c0 + k]);
            ys[off + k] = cl::from_acc<T>(v);
        }
}

}  // namespace nrm

// Forward: exact two-pass mean / variance per (n, group) over spatial * cpg elements (the
// tile is re-read from L1/L2), then y = (x - mean) * rstd [* weight[c]] [+ bias[c]].
template <typename T>
__global__ void __launch_bounds__(512) gn_nhwc_fwd(
    // pointers (weight, bias may be null)
    const T* x, const T* weight, const T* bias, T* y, cl::acc_t<T>* mean_out,
    cl::acc_t<T>* rstd_out,
    // problem
    GnNhwcShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    __shared__ A part[nrm::kGnRows][32];
    __shared__ A tot[32];
    const nrm::GnTile t(s);
    const nrm::GnRange g(s);  // (gridDim.y 1: every row)
    const cl::index_t base = t.n * s.spatial * s.channels + t.c0;
    const A inv_cnt = A(1) / (A)(s.spatial * s.cpg);
    // sums of x - the group's first element (as rownorm_fwd: a constant group is exact)
    const A shift = cl::to_acc(x[base + (cl::index_t)t.lg * s.cpg]);
    const A mean = shift + nrm::gn_tile_sum(nrm::gn_sum_dev(x + base, shift, g, t), part, tot, t,
                                            s.cpg) * inv_cnt;
    const A q = nrm::gn_tile_sum(nrm::gn_sum_sq(x + base, mean, g, t), part, tot, t, s.cpg);
    const A rstd = A(1) / cl::math::sqrt(q * inv_cnt + s.eps);
    nrm::gn_write(x + base, weight, bias, y + base, mean, rstd, g, t, s);
    if (t.leader(s)) {
        mean_out[t.row(s)] = mean;
        rstd_out[t.row(s)] = rstd;
    }
}

// The forward of few (sample, tile) blocks (a small batch: a batch-2 U-Net layer of 32
// groups of 10 channels is 22 tiles), split along H*W into gridDim.y stretches:
// gn_nhwc_stats writes each group's stretch statistics, partial[(row * stretches +
// stretch) * 3 + {0, 1, 2}] = (count, mean less the group's first element, squared
// deviations about that mean: two passes over the stretch); gn_nhwc_finalize merges a
// row's stretches in order (Chan et al.: deterministic) into mean and rstd, one thread a
// row; gn_nhwc_apply writes y over its stretch.
template <typename T>
__global__ void __launch_bounds__(512) gn_nhwc_stats(
    const T* x, cl::acc_t<T>* partial, GnNhwcShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    __shared__ A part[nrm::kGnRows][32];
    __shared__ A tot[32];
    const nrm::GnTile t(s);
    const nrm::GnRange g(s);
    const cl::index_t base = t.n * s.spatial * s.channels + t.c0;
    const A shift = cl::to_acc(x[base + (cl::index_t)t.lg * s.cpg]);  // the same per stretch
    const A cnt = (A)((g.p1 - g.p0) * s.cpg);
    const A sum = nrm::gn_tile_sum(nrm::gn_sum_dev(x + base, shift, g, t), part, tot, t, s.cpg);
    const A m = cnt > A(0) ? sum / cnt : A(0);
    const A q = nrm::gn_tile_sum(nrm::gn_sum_sq(x + base, shift + m, g, t), part, tot, t, s.cpg);
    if (t.leader(s)) {
        const cl::index_t at = (t.row(s) * gridDim.y + blockIdx.y) * 3;
        partial[at] = cnt;
        partial[at + 1] = m;
        partial[at + 2] = q;
    }
}

template <typename T>
__global__ void __launch_bounds__(256) gn_nhwc_finalize(
    const T* x, const cl::acc_t<T>* partial, cl::acc_t<T>* mean_out, cl::acc_t<T>* rstd_out,
    cl::index_t rows, int stretches, GnNhwcShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    const cl::index_t row = cl::global_thread_id();  // (n, g), one thread each
    if (row >= rows) return;
    nrm::Welford<A> acc, p;
    acc.init();
    for (int k = 0; k < stretches; ++k) {
        const cl::index_t at = (row * stretches + k) * 3;
        p.n = partial[at];
        p.mean = partial[at + 1];
        p.m2 = partial[at + 2];
        acc.merge(p);
    }
    const cl::index_t n = row / s.groups, grp = row - n * s.groups;
    mean_out[row] = cl::to_acc(x[n * s.spatial * s.channels + grp * s.cpg]) + acc.mean;
    rstd_out[row] = A(1) / cl::math::sqrt(acc.m2 / acc.n + s.eps);
}

template <typename T>
__global__ void __launch_bounds__(512) gn_nhwc_apply(
    // pointers (weight, bias may be null)
    const T* x, const T* weight, const T* bias, T* y, const cl::acc_t<T>* mean,
    const cl::acc_t<T>* rstd,
    // problem
    GnNhwcShapeT<cl::acc_t<T>> s) {
    const nrm::GnTile t(s);
    const nrm::GnRange g(s);
    const cl::index_t base = t.n * s.spatial * s.channels + t.c0;
    nrm::gn_write(x + base, weight, bias, y + base, mean[t.row(s)], rstd[t.row(s)], g, t, s);
}

namespace nrm {

// The backward over a gn_nhwc_* block's range: !WRITE adds gw and gw xhat (gw = dy
// weight[c]) to sg and sgx; WRITE writes dx = rstd (gw - sg - xhat sgx), sg and sgx then
// the group's means of the two.
template <bool WRITE, typename T>
__device__ __forceinline__ void gn_grad(const T* dy, const T* x, const T* weight,
                                        cl::acc_t<T> mean, cl::acc_t<T> rstd, cl::acc_t<T>& sg,
                                        cl::acc_t<T>& sgx, T* dx, cl::index_t base,
                                        const GnRange& g, const GnTile& t,
                                        const GnNhwcShapeT<cl::acc_t<T>>& s) {
    typedef cl::acc_t<T> A;
    for (cl::index_t off = base + g.off0; off < base + g.end; off += g.rstep)
        for (cl::index_t k = threadIdx.x; k < t.span; k += 32) {
            const A w = s.has_weight ? cl::to_acc(weight[t.c0 + k]) : A(1);
            const A gw = cl::to_acc(dy[off + k]) * w;
            const A xhat = (cl::to_acc(x[off + k]) - mean) * rstd;
            if (WRITE) {
                dx[off + k] = cl::from_acc<T>(rstd * (gw - sg - xhat * sgx));
            } else {
                sg += gw;
                sgx = cl::math::fma(gw, xhat, sgx);
            }
        }
}

}  // namespace nrm

// Backward dx = rstd (gw - mean(gw) - xhat mean(gw xhat)), gw = dy * weight[c].
template <typename T>
__global__ void __launch_bounds__(512) gn_nhwc_bwd(
    // pointers (weight may be null)
    const T* dy, const T* x, const T* weight, const cl::acc_t<T>* mean_in,
    const cl::acc_t<T>* rstd_in, T* dx,
    // problem
    GnNhwcShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    __shared__ A part[nrm::kGnRows][32];
    __shared__ A tot[32];
    const nrm::GnTile t(s);
    const nrm::GnRange g(s);  // (gridDim.y 1: every row)
    const cl::index_t base = t.n * s.spatial * s.channels + t.c0;
    const A mean = mean_in[t.row(s)];
    const A rstd = rstd_in[t.row(s)];
    A sg = A(0), sgx = A(0);
    nrm::gn_grad<false>(dy, x, weight, mean, rstd, sg, sgx, dx, base, g, t, s);
    const A inv_cnt = A(1) / (A)(s.spatial * s.cpg);
    A mg = nrm::gn_tile_sum(sg, part, tot, t, s.cpg) * inv_cnt;
    A mgx = nrm::gn_tile_sum(sgx, part, tot, t, s.cpg) * inv_cnt;
    nrm::gn_grad<true>(dy, x, weight, mean, rstd, mg, mgx, dx, base, g, t, s);
}

// The backward of few (sample, tile) blocks, split along H*W as the forward:
// gn_nhwc_bwd_partial writes each group's stretch sums, partial[(row * stretches +
// stretch) * 2 + {0, 1}] = (sum gw, sum gw xhat); gn_nhwc_bwd_apply adds its group's
// partials in stretch order (every block of the group the same sums: deterministic) and
// writes dx over its stretch.
template <typename T>
__global__ void __launch_bounds__(512) gn_nhwc_bwd_partial(
    // pointers (weight may be null)
    const T* dy, const T* x, const T* weight, const cl::acc_t<T>* mean_in,
    const cl::acc_t<T>* rstd_in, cl::acc_t<T>* partial,
    // problem
    GnNhwcShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    __shared__ A part[nrm::kGnRows][32];
    __shared__ A tot[32];
    const nrm::GnTile t(s);
    const nrm::GnRange g(s);
    const cl::index_t base = t.n * s.spatial * s.channels + t.c0;
    A sg = A(0), sgx = A(0);
    nrm::gn_grad<false>(dy, x, weight, mean_in[t.row(s)], rstd_in[t.row(s)], sg, sgx,
                        (T*)nullptr, base, g, t, s);
    sg = nrm::gn_tile_sum(sg, part, tot, t, s.cpg);
    sgx = nrm::gn_tile_sum(sgx, part, tot, t, s.cpg);
    if (t.leader(s)) {
        const cl::index_t at = (t.row(s) * gridDim.y + blockIdx.y) * 2;
        partial[at] = sg;
        partial[at + 1] = sgx;
    }
}

template <typename T>
__global__ void __launch_bounds__(512) gn_nhwc_bwd_apply(
    // pointers (weight may be null)
    const T* dy, const T* x, const T* weight, const cl::acc_t<T>* mean_in,
    const cl::acc_t<T>* rstd_in, const cl::acc_t<T>* partial, T* dx,
    // problem
    GnNhwcShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    const nrm::GnTile t(s);
    const nrm::GnRange g(s);
    const cl::index_t base = t.n * s.spatial * s.channels + t.c0;
    const cl::index_t row = t.row(s);
    A mg = A(0), mgx = A(0);
    for (unsigned k = 0; k < gridDim.y; ++k) {  // the group's stretches, in order
        mg += partial[(row * gridDim.y + k) * 2];
        mgx += partial[(row * gridDim.y + k) * 2 + 1];
    }
    const A inv_cnt = A(1) / (A)(s.spatial * s.cpg);
    mg *= inv_cnt;
    mgx *= inv_cnt;
    nrm::gn_grad<true>(dy, x, weight, mean_in[row], rstd_in[row], mg, mgx, dx, base, g, t, s);
}

// ---------------------------------------------------------------- LRN

// Cross-channel LRN (ops/norm_common.py: _LRN_DTYPE), scalars in A. Channel c of element e
// is (e / cstride) % channels; its window is [c - size/2, c + (size-1)/2] (PyTorch's).
template <typename A>
struct LrnShapeT {
    cl::index_t n;
    cl::index_t channels;
    cl::index_t cstride;  // NCHW: H*W; NHWC: 1
    int size;
    A alpha_over_n;       // alpha / size
    A beta;
    A k;
};

namespace nrm {

template <typename T>
__device__ __forceinline__ cl::acc_t<T> lrn_scale_at(const T* x, cl::index_t e, cl::index_t c,
                                                     const LrnShapeT<cl::acc_t<T>>& s) {
    typedef cl::acc_t<T> A;
    const cl::index_t lo = c - s.size / 2 < 0 ? 0 : c - s.size / 2;
    const cl::index_t hi_ = c + (s.size - 1) / 2;
    const cl::index_t hi = hi_ >= s.channels ? s.channels - 1 : hi_;
    A sq = A(0);
    for (cl::index_t j = lo; j <= hi; ++j) {
        const A v = cl::to_acc(x[e + (j - c) * s.cstride]);
        sq = cl::math::fma(v, v, sq);
    }
    return cl::math::fma(s.alpha_over_n, sq, s.k);
}

}  // namespace nrm

template <typename T>
__global__ void __launch_bounds__(256) lrn_fwd(const T* x, T* y, LrnShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    const cl::index_t stride = cl::grid_stride();
    for (cl::index_t e = cl::global_thread_id(); e < s.n; e += stride) {
        const cl::index_t c = (e / s.cstride) % s.channels;
        const A scale = nrm::lrn_scale_at(x, e, c, s);
        y[e] = cl::from_acc<T>(cl::to_acc(x[e]) * cl::math::pow(scale, -s.beta));
    }
}

// Backward pass 1: t[e] = dy x scale^(-beta-1) and sp[e] = scale^-beta (A workspaces).
template <typename T>
__global__ void __launch_bounds__(256) lrn_scale(const T* dy, const T* x, cl::acc_t<T>* t,
                                                 cl::acc_t<T>* sp, LrnShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    const cl::index_t stride = cl::grid_stride();
    for (cl::index_t e = cl::global_thread_id(); e < s.n; e += stride) {
        const cl::index_t c = (e / s.cstride) % s.channels;
        const A scale = nrm::lrn_scale_at(x, e, c, s);
        const A pw = cl::math::pow(scale, -s.beta);
        sp[e] = pw;
        // x / scale first: scale^(-beta-1) itself underflows float32 once |x| nears 1e15
        t[e] = (cl::to_acc(x[e]) / scale) * (cl::to_acc(dy[e]) * pw);
    }
}

// Backward pass 2: dx_i = dy_i sp_i - 2 alpha beta / n x_i sum_{j: i in win(j)} t_j,
// j in [i - (size-1)/2, i + size/2].
template <typename T>
__global__ void __launch_bounds__(256) lrn_bwd(const T* dy, const T* x, const cl::acc_t<T>* t,
                                               const cl::acc_t<T>* sp, T* dx,
                                               LrnShapeT<cl::acc_t<T>> s) {
    typedef cl::acc_t<T> A;
    const cl::index_t stride = cl::grid_stride();
    for (cl::index_t e = cl::global_thread_id(); e < s.n; e += stride) {
        const cl::index_t c = (e / s.cstride) % s.channels;
        const cl::index_t lo = c - (s.size - 1) / 2 < 0 ? 0 : c - (s.size - 1) / 2;
        const cl::index_t hi_ = c + s.size / 2;
        const cl::index_t hi = hi_ >= s.channels ? s.channels - 1 : hi_;
        A acc = A(0);
        for (cl::index_t j = lo; j <= hi; ++j) acc += t[e + (j - c) * s.cstride];
        // beta = 0: the scale's power is the constant 1, so the window term is 0 whatever
        // acc holds (PyTorch's pow backward at exponent 0 gives zeros: a NaN neighbour
        // does not reach dx); x * 0 keeps x's own NaN or inf a NaN, as PyTorch's 2 x * 0.
        const A xe = cl::to_acc(x[e]);
        const A w = s.beta != A(0) ? A(2) * s.alpha_over_n * s.beta * xe * acc : A(0) * xe;
        const A v = cl::to_acc(dy[e]) * sp[e] - w;
        dx[e] = cl::from_acc<T>(v);
    }
}
