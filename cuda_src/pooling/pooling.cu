// Pooling over 1 to 3 spatial dims (1d and 2d run as 3d with leading size-1 dims):
// max, average (padding included or excluded, divisor override) and adaptive windows,
// forward and backward, NCHW (N, C, D, H, W) or NHWC (N, D, H, W, C).
//
// Kernels (T = float | __half | __nv_bfloat16 | double), one thread per element, grid-stride.
// Arithmetic (max comparisons, sums, the divisor) runs in cl::acc_t<T>: float for the 16-
// and 32-bit types, double for double (the divisor, an int, is exact in either).
//   pool_fwd<T, MAX>          one thread per output: y and (max modes, if `indices` is
//                             not null) the argmax as a flat position d*H*W + h*W + w of
//                             the input plane (PyTorch's int64 indices). NaN wins
//                             (the last one), or with s.nan_skip loses to numbers.
//   pool_bwd<T, MAX>          one thread per input element gathers from the outputs whose
//                             windows can hold it: max from the saved indices, average
//                             divided as the forward did. No atomics: deterministic.
//                             MAX: the max modes' kernel (the average modes' code left
//                             out, and the other way round; host: s.mode picks it).
//   maxpool_bwd_scatter<T>    one thread per output adds dy at its saved index with
//                             atomicAdd into a zeroed dx (float only: cheapest when the
//                             windows do not overlap); the order of additions varies.
//                             An index outside its window is not followed: it is
//                             flagged in `bad` (the lowest such output) instead.
//                             32-bit index math when every offset fits (pool::each_output).
//   pool_check_indices        one thread per output: flags in `bad` the lowest output
//                             whose saved index lies outside its window (before the
//                             gather, which would silently drop it).
//   pool_bwd_prepare          sets `bad` to ~0ull and zeroes the scatter's dx (as 32-bit
//                             words; none for the gather): the backward's set-up done
//                             by a launch, so that a graph or launch template replays it.
// Saved indices come from the user: a valid one is -1 (a window holding no input) or a
// position inside the output's window (and so inside the input plane); `bad` starts at
// ~0ull and the host raises when it changed.
// Neighbouring threads own neighbouring W positions (NCHW) or channels (NHWC), so loads
// and stores are coalesced in both layouts.
//   gap_fwd_planar<T>, gap_fwd_chlast<T>, gap_bwd_planar<T>, gap_bwd_chlast<T>
//                             global average pooling (adaptive average to 1 x ... x 1):
//                             a reduction per (n, c) plane; see the section's comment.
//
// Defines: none; one module per dtype.
#include "common/cudnnlite.cuh"

namespace pool {

constexpr int kMax = 0;
// 1: average, padding included in the divisor (count_include_pad)
constexpr int kAvgExcludePad = 2;

}  // namespace pool

// The pooling problem (ops/pooling_kernels.py: _SHAPE_DTYPE). Spatial arrays are (D, H, W).
struct PoolShape {
    cl::index_t n;         // batch
    cl::index_t c;         // channels
    cl::index_t in_plane;  // D*H*W of the input
    cl::index_t out_plane;
    int in[3];
    int out[3];
    int k[3];
    int s[3];
    int p[3];
    int d[3];
    int mode;          // pool::k*
    int adaptive;      // windows [floor(o in / out), ceil((o + 1) in / out))
    int divisor;       // divisor_override; 0: none
    int channel_last;  // NHWC
    int nan_skip;      // max modes: 0 NaN wins (PyTorch, CUDNN_PROPAGATE_NAN), 1 NaN loses
                       // to numbers (CUDNN_NOT_PROPAGATE_NAN; an all-NaN window gives NaN)
};

namespace pool {

// Splits a flat element index into (n, c, spatial flat) for either layout. I is
// unsigned (32-bit division) when the tensor has fewer than 2^31 elements.
template <typename I>
__device__ __forceinline__ void split(I e, I plane, const PoolShape& s, I& n, I& c, I& f) {
    const I cs = (I)s.c;
    if (s.channel_last) {
        const I r = e / cs;
        c = e - r * cs;
        n = r / plane;
        f = r - n * plane;
    } else {
        const I r = e / plane;
        f = e - r * plane;
        n = r / cs;
        c = r - n * cs;
    }
}

// Every input and output offset fits in 31 bits: index math may use 32-bit division.
__device__ __forceinline__ bool fits_32bit(const PoolShape& s) {
    const cl::index_t plane = s.in_plane > s.out_plane ? s.in_plane : s.out_plane;
    return s.n * s.c * plane <= 0x7fffffffLL;
}

template <typename I>
__device__ __forceinline__ I offset(I n, I c, I f, I plane, const PoolShape& s) {
    const I cs = (I)s.c;
    return s.channel_last ? (n * plane + f) * cs + c : (n * cs + c) * plane + f;
}

// Window of output coordinate o along dim j: first position, position step, positions,
// and (average pooling) the divisor contribution of this dim.
struct Window {
    int start, step, len;
    int pool;  // count_include_pad extent (padded, clipped to in + p)
};

__device__ __forceinline__ Window window(int o, int j, const PoolShape& s) {
    Window w;
    if (s.adaptive) {
        w.start = (int)(((long long)o * s.in[j]) / s.out[j]);
        const int end = (int)(((long long)(o + 1) * s.in[j] + s.out[j] - 1) / s.out[j]);
        w.step = 1;
        w.len = end - w.start;
        w.pool = w.len;
        return w;
    }
    const int start = o * s.s[j] - s.p[j];
    if (s.mode == kMax) {
        w.start = start;
        w.step = s.d[j];
        w.len = s.k[j];
        w.pool = 0;
        return w;
    }
    int end = start + s.k[j];
    const int limit = s.in[j] + s.p[j];
    end = end < limit ? end : limit;
    w.pool = end - start;
    w.start = start < 0 ? 0 : start;
    end = end < s.in[j] ? end : s.in[j];
    w.step = 1;
    w.len = end - w.start;
    return w;
}

}  // namespace pool

// ---------------------------------------------------------------- forward

namespace pool {

// The max of one window and its position (-1: no input in it). NaN wins (the last
// one, as PyTorch), or with SKIP_NAN loses to every number (an all-NaN window: NaN).
template <bool SKIP_NAN, typename T, typename A>
__device__ __forceinline__ void window_max(const T* x, cl::index_t fstep, const Window& wd,
                                           const Window& wh, const Window& ww,
                                           const PoolShape& s, A& best, long long& arg) {
    for (int a = 0; a < wd.len; ++a) {
        const int id = wd.start + a * wd.step;
        if (id < 0 || id >= s.in[0]) continue;
        for (int b = 0; b < wh.len; ++b) {
            const int ih = wh.start + b * wh.step;
            if (ih < 0 || ih >= s.in[1]) continue;
            for (int q = 0; q < ww.len; ++q) {
                const int iw = ww.start + q * ww.step;
                if (iw < 0 || iw >= s.in[2]) continue;
                const long long pos = ((long long)id * s.in[1] + ih) * s.in[2] + iw;
                const A v = cl::to_acc(x[pos * fstep]);
                const bool nan_rule = SKIP_NAN ? best != best && v == v : v != v;
                if (arg < 0 || v > best || nan_rule) {
                    best = v;
                    arg = pos;
                }
            }
        }
    }
}

template <typename T, bool MAX, typename I>
__device__ __forceinline__ void fwd_body(const T* x, T* y, long long* indices,
                                         const PoolShape& s) {
    typedef cl::acc_t<T> A;
    const I total = (I)(s.n * s.c * s.out_plane);
    const I stride = (I)cl::grid_stride();
    for (I e = (I)cl::global_thread_id(); e < total; e += stride) {
        I n, c, f;
        pool::split<I>(e, (I)s.out_plane, s, n, c, f);
        const int ow = (int)(f % (I)s.out[2]);
        const int oh = (int)((f / (I)s.out[2]) % (I)s.out[1]);
        const int od = (int)(f / ((I)s.out[2] * (I)s.out[1]));
        const pool::Window wd = pool::window(od, 0, s), wh = pool::window(oh, 1, s),
                           ww = pool::window(ow, 2, s);
        const cl::index_t base = (cl::index_t)pool::offset<I>(n, c, 0, (I)s.in_plane, s);
        const cl::index_t fstep = s.channel_last ? s.c : 1;  // element step of one position
        if (MAX) {
            A best = A(__int_as_float(0xff800000));  // -inf
            long long arg = -1;
            // one loop per NaN rule: the test stays out of the window loop's registers
            if (s.nan_skip) pool::window_max<true>(x + base, fstep, wd, wh, ww, s, best, arg);
            else pool::window_max<false>(x + base, fstep, wd, wh, ww, s, best, arg);
            y[e] = cl::from_acc<T>(best);
            if (indices != nullptr) indices[e] = arg;
        } else {
            A sum = A(0);
            for (int a = 0; a < wd.len; ++a) {
                for (int b = 0; b < wh.len; ++b) {
                    const long long row =
                        ((long long)(wd.start + a) * s.in[1] + (wh.start + b)) * s.in[2];
                    for (int q = 0; q < ww.len; ++q) {
                        sum += cl::to_acc(x[base + (row + ww.start + q) * fstep]);
                    }
                }
            }
            int div;
            if (s.divisor) div = s.divisor;
            else if (s.adaptive || s.mode == pool::kAvgExcludePad) div = wd.len * wh.len * ww.len;
            else div = wd.pool * wh.pool * ww.pool;
            y[e] = cl::from_acc<T>(sum / (A)div);
        }
    }
}

}  // namespace pool

// WIDE: 64-bit index math, for tensors whose offsets pass 31 bits (ops/pooling_kernels.py
// picks it as fits_32bit would); a kernel per width keeps each compile unit to one copy of
// the window loops (both in one kernel took 0.6-0.85 s of NVRTC on sm_90). The 64-bit
// kernels ask for 4 blocks per SM: left to itself, ptxas (sm_90) fitted them into 32
// registers and spilled 20-24 bytes around the 64-bit division calls.
template <typename T, bool MAX, bool WIDE>
__global__ void __launch_bounds__(256, WIDE ? 4 : 0) pool_fwd(
    // pointers (indices may be null)
    const T* x, T* y, long long* indices,
    // problem (MAX: s.mode is pool::kMax; otherwise an average mode)
    PoolShape s) {
    if constexpr (WIDE) pool::fwd_body<T, MAX, cl::index_t>(x, y, indices, s);
    else pool::fwd_body<T, MAX, unsigned>(x, y, indices, s);
}

// ---------------------------------------------------------------- backward

namespace pool {

// Outputs whose window along dim j may hold input coordinate i: [lo, hi).
__device__ __forceinline__ void out_range(int i, int j, const PoolShape& s, int& lo, int& hi) {
    if (s.adaptive) {
        lo = (int)(((long long)i * s.out[j]) / s.in[j]);
        hi = (int)(((long long)(i + 1) * s.out[j] + s.in[j] - 1) / s.in[j]);
        hi = hi < s.out[j] ? hi : s.out[j];
        return;
    }
    const int span = (s.mode == kMax ? s.d[j] : 1) * (s.k[j] - 1);
    const int first = i + s.p[j] - span;  // o * stride >= first
    lo = first <= 0 ? 0 : (first + s.s[j] - 1) / s.s[j];
    hi = (i + s.p[j]) / s.s[j] + 1;
    hi = hi < s.out[j] ? hi : s.out[j];
}

__device__ __forceinline__ bool holds(const Window& w, int i) {
    return i >= w.start && i < w.start + w.len;  // average windows only (step 1)
}

}  // namespace pool

namespace pool {

template <typename T, bool MAX, typename I>
__device__ __forceinline__ void bwd_body(const T* dy, const long long* indices, T* dx,
                                         const PoolShape& s) {
    typedef cl::acc_t<T> A;
    const I total = (I)(s.n * s.c * s.in_plane);
    const I stride = (I)cl::grid_stride();
    for (I e = (I)cl::global_thread_id(); e < total; e += stride) {
        I n, c, f;
        pool::split<I>(e, (I)s.in_plane, s, n, c, f);
        const int iw = (int)(f % (I)s.in[2]);
        const int ih = (int)((f / (I)s.in[2]) % (I)s.in[1]);
        const int id = (int)(f / ((I)s.in[2] * (I)s.in[1]));
        int d0, d1, h0, h1, w0, w1;
        pool::out_range(id, 0, s, d0, d1);
        pool::out_range(ih, 1, s, h0, h1);
        pool::out_range(iw, 2, s, w0, w1);
        const cl::index_t base = (cl::index_t)pool::offset<I>(n, c, 0, (I)s.out_plane, s);
        const cl::index_t fstep = s.channel_last ? s.c : 1;
        A acc = A(0);
        for (int od = d0; od < d1; ++od) {
            for (int oh = h0; oh < h1; ++oh) {
                for (int ow = w0; ow < w1; ++ow) {
                    const cl::index_t o =
                        base + (((cl::index_t)od * s.out[1] + oh) * s.out[2] + ow) * fstep;
                    if (MAX) {
                        if (indices[o] == (long long)f) acc += cl::to_acc(dy[o]);
                        continue;
                    }
                    const pool::Window wd = pool::window(od, 0, s), wh = pool::window(oh, 1, s),
                                       ww = pool::window(ow, 2, s);
                    if (!pool::holds(wd, id) || !pool::holds(wh, ih) || !pool::holds(ww, iw))
                        continue;
                    int div;
                    if (s.divisor) div = s.divisor;
                    else if (s.adaptive || s.mode == pool::kAvgExcludePad)
                        div = wd.len * wh.len * ww.len;
                    else div = wd.pool * wh.pool * ww.pool;
                    acc += cl::to_acc(dy[o]) / (A)div;
                }
            }
        }
        dx[e] = cl::from_acc<T>(acc);
    }
}

}  // namespace pool

template <typename T, bool MAX, bool WIDE>
__global__ void __launch_bounds__(256, WIDE ? 4 : 0) pool_bwd(
    // pointers (indices: max modes only)
    const T* dy, const long long* indices, T* dx,
    // problem (MAX: s.mode is pool::kMax; otherwise an average mode; WIDE: as pool_fwd)
    PoolShape s) {
    if constexpr (WIDE) pool::bwd_body<T, MAX, cl::index_t>(dy, indices, dx, s);
    else pool::bwd_body<T, MAX, unsigned>(dy, indices, dx, s);
}

namespace pool {

// Whether `pos`, the saved index of the output at flat plane position `f`, may be that
// output's argmax: -1 (no input in the window) or a position of its window in the input.
__device__ __forceinline__ bool index_ok(long long pos, cl::index_t f, const PoolShape& s) {
    if (pos == -1) return true;
    if (pos < 0 || pos >= s.in_plane) return false;
    // (d, h, w) of both (32-bit divisions while they fit: cl::div_mod)
    cl::index_t o1, o2, i1, i2;
    const int o[3] = {(int)cl::div_mod(cl::div_mod(f, s.out[2], o2), s.out[1], o1), (int)o1,
                      (int)o2};
    const int i[3] = {(int)cl::div_mod(cl::div_mod(pos, s.in[2], i2), s.in[1], i1), (int)i1,
                      (int)i2};
    for (int j = 0; j < 3; ++j) {
        const Window w = window(o[j], j, s);
        const int r = i[j] - w.start;  // the window's positions: start + q * step, q < len
        if (r < 0 || r % w.step != 0 || r / w.step >= w.len) return false;
    }
    return true;
}

// Records output e as holding a bad index (the lowest one wins).
__device__ __forceinline__ void flag_bad(unsigned long long* bad, cl::index_t e) {
    atomicMin(bad, (unsigned long long)e);
}

}  // namespace pool

namespace pool {

// Outputs e of the grid-stride loop, each with its (n, c, flat plane position f); I is
// unsigned (32-bit division) when every offset fits in 31 bits (fits_32bit).
template <typename I, typename Body>
__device__ __forceinline__ void each_output(const PoolShape& s, Body body) {
    const I total = (I)(s.n * s.c * s.out_plane);
    const I stride = (I)cl::grid_stride();
    for (I e = (I)cl::global_thread_id(); e < total; e += stride) {
        I n, c, f;
        pool::split<I>(e, (I)s.out_plane, s, n, c, f);
        body((cl::index_t)e, (cl::index_t)n, (cl::index_t)c, (cl::index_t)f);
    }
}

template <typename Body>
__device__ __forceinline__ void each_output(const PoolShape& s, Body body) {
    if (fits_32bit(s)) each_output<unsigned>(s, body);
    else each_output<cl::index_t>(s, body);
}

}  // namespace pool

template <typename T>
__global__ void __launch_bounds__(256) maxpool_bwd_scatter(
    // pointers (dx zeroed by the caller; bad: ~0ull, lowered to the first bad output)
    const T* dy, const long long* indices, T* dx, unsigned long long* bad,
    // problem
    PoolShape s) {
    pool::each_output(s, [&](cl::index_t e, cl::index_t n, cl::index_t c, cl::index_t f) {
        const long long pos = indices[e];
        if (!pool::index_ok(pos, f, s)) {
            pool::flag_bad(bad, e);
            return;
        }
        if (pos < 0) return;  // an all-padding window has no input to credit
        atomicAdd(dx + pool::offset<cl::index_t>(n, c, pos, s.in_plane, s), dy[e]);
    });
}

__global__ void __launch_bounds__(256) pool_bwd_prepare(
    // pointers (words: 0 when there is no dx to zero)
    unsigned* dx, unsigned long long* bad,
    // size
    long long words) {
    if (blockIdx.x == 0 && threadIdx.x == 0) *bad = ~0ull;
    const cl::index_t stride = cl::grid_stride();
    for (cl::index_t e = cl::global_thread_id(); e < words; e += stride) dx[e] = 0u;
}

__global__ void __launch_bounds__(256) pool_check_indices(
    // pointers (bad: ~0ull, lowered to the first output with a bad index)
    const long long* indices, unsigned long long* bad,
    // problem
    PoolShape s) {
    pool::each_output(s, [&](cl::index_t e, cl::index_t, cl::index_t, cl::index_t f) {
        if (!pool::index_ok(indices[e], f, s)) pool::flag_bad(bad, e);
    });
}

// ---------------------------------------------------------------- global average pooling

// Global average pooling (adaptive average to 1 x ... x 1, the classifier head): a
// reduction per (n, c) plane of `plane` = D*H*W elements, accumulation in cl::acc_t<T> in a
// fixed order (deterministic). NCHW planes are contiguous; NHWC planes are strided by C.
//   gap_fwd_planar<T>   NCHW: `group` threads per plane (8, 16 or 32: a (sub-)warp,
//                       shuffle reduction; 256: the whole block, for large planes), loads
//                       along the contiguous plane (coalesced). Block 256.
//   gap_fwd_chlast<T>   NHWC: a 32 x 8 block per (32 channels, sample n): threadIdx.x
//                       along the contiguous channels (coalesced), threadIdx.y splits the
//                       plane; partials combined in shared memory in a fixed order.
//   gap_bwd_planar<T>,  dx = dy / plane broadcast over each plane, same thread mapping
//   gap_bwd_chlast<T>   as the forward (coalesced stores, no per-element division).
namespace pool {

constexpr int kGapBlock = 256;
constexpr int kGapRows = 8;  // blockDim.y of the chlast kernels

// Sum over aligned groups of `group` lanes (power of two <= 32); every lane of the warp
// must call it. The group's first lane holds the total.
template <typename A>
__device__ __forceinline__ A group_sum(A v, int group) {
    for (int off = (group < 32 ? group : 32) >> 1; off > 0; off >>= 1)
        v += __shfl_down_sync(0xffffffffu, v, off);
    return v;
}

}  // namespace pool

template <typename T>
__global__ void __launch_bounds__(256) gap_fwd_planar(
    // pointers
    const T* x, T* y,
    // problem: planes = N*C, plane = D*H*W, group = threads per plane (8, 16, 32 or 256)
    cl::index_t planes, cl::index_t plane, int group) {
    typedef cl::acc_t<T> A;
    __shared__ A warp_sum[pool::kGapBlock / 32];
    const int per_block = pool::kGapBlock / group;
    const int g = threadIdx.x / group, lane = threadIdx.x % group;
    const A div = (A)plane;
    // the loop bound is uniform over the block: every thread meets every barrier
    for (cl::index_t first = (cl::index_t)blockIdx.x * per_block; first < planes;
         first += (cl::index_t)gridDim.x * per_block) {
        const cl::index_t pl = first + g;
        A sum = A(0);
        if (pl < planes) {
            const T* xp = x + pl * plane;
            for (cl::index_t i = lane; i < plane; i += group) sum += cl::to_acc(xp[i]);
        }
        sum = pool::group_sum(sum, group);
        if (group > 32) {
            const int w = threadIdx.x >> 5;
            __syncthreads();  // the previous iteration's readers are done with warp_sum
            if ((threadIdx.x & 31) == 0) warp_sum[w] = sum;
            __syncthreads();
            if (threadIdx.x == 0) {
                sum = A(0);
                for (int k = 0; k < pool::kGapBlock / 32; ++k) sum += warp_sum[k];
            }
        }
        if (lane == 0 && pl < planes) y[pl] = cl::from_acc<T>(sum / div);
    }
}

template <typename T>
__global__ void __launch_bounds__(256) gap_fwd_chlast(
    // pointers
    const T* x, T* y,
    // problem: n samples of `plane` positions x c channels
    cl::index_t n, cl::index_t c, cl::index_t plane) {
    typedef cl::acc_t<T> A;
    __shared__ A part[pool::kGapRows][32];
    const cl::index_t ch = (cl::index_t)blockIdx.x * 32 + threadIdx.x;
    const A div = (A)plane;
    for (cl::index_t s = blockIdx.y; s < n; s += gridDim.y) {  // uniform over the block
        A sum = A(0);
        if (ch < c) {
            const T* xs = x + s * plane * c + ch;
            for (cl::index_t f = threadIdx.y; f < plane; f += pool::kGapRows)
                sum += cl::to_acc(xs[f * c]);
        }
        __syncthreads();  // the previous sample's readers are done with part
        part[threadIdx.y][threadIdx.x] = sum;
        __syncthreads();
        if (threadIdx.y == 0 && ch < c) {
            for (int r = 1; r < pool::kGapRows; ++r) sum += part[r][threadIdx.x];
            y[s * c + ch] = cl::from_acc<T>(sum / div);
        }
    }
}

template <typename T>
__global__ void __launch_bounds__(256) gap_bwd_planar(
    // pointers
    const T* dy, T* dx,
    // problem: as gap_fwd_planar (no barriers: any group size works)
    cl::index_t planes, cl::index_t plane, int group) {
    typedef cl::acc_t<T> A;
    const int per_block = pool::kGapBlock / group;
    const int g = threadIdx.x / group, lane = threadIdx.x % group;
    const A div = (A)plane;
    for (cl::index_t pl = (cl::index_t)blockIdx.x * per_block + g; pl < planes;
         pl += (cl::index_t)gridDim.x * per_block) {
        const T v = cl::from_acc<T>(cl::to_acc(dy[pl]) / div);
        T* dxp = dx + pl * plane;
        for (cl::index_t i = lane; i < plane; i += group) dxp[i] = v;
    }
}

template <typename T>
__global__ void __launch_bounds__(256) gap_bwd_chlast(
    // pointers
    const T* dy, T* dx,
    // problem: as gap_fwd_chlast
    cl::index_t n, cl::index_t c, cl::index_t plane) {
    typedef cl::acc_t<T> A;
    const cl::index_t ch = (cl::index_t)blockIdx.x * 32 + threadIdx.x;
    if (ch >= c) return;
    const A div = (A)plane;
    for (cl::index_t s = blockIdx.y; s < n; s += gridDim.y) {
        const T v = cl::from_acc<T>(cl::to_acc(dy[s * c + ch]) / div);
        T* dxs = dx + s * plane * c + ch;
        for (cl::index_t f = threadIdx.y; f < plane; f += pool::kGapRows) dxs[f * c] = v;
    }
}
