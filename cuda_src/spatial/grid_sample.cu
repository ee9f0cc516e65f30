// Spatial transformer sampling (grid_sample), forward and backward, 2-D and 3-D, with
// PyTorch's semantics: unnormalization with and without align_corners, zeros / border /
// reflection padding, bilinear (trilinear in 3-D), nearest (round half to even) and
// bicubic (A = -0.75, 2-D only). Non-finite or absurd (|i| >= 2^30) source indices become
// -100 after padding, i.e. out of bounds, as PyTorch's CUDA kernels do; clipping uses
// fmin/fmax, so a NaN coordinate clips to 0 under border/reflection padding.
//
// Arithmetic (indices, weights, sums, gradients) is in A = cl::acc_t<T>: float for the
// 16/32-bit types, double for double; the x gradient's atomic buffer and the recorded
// weights are in A too.
//
// Every mode is a list of K taps per output point (bilinear 4, trilinear 8, nearest 1,
// bicubic 16): an in-bounds input position and a weight, computed once per point and
// applied to every channel.
//
// Kernels (T = float | __half | __nv_bfloat16 | double; NDIM = 2 | 3; MODE = 0 bilinear, 1 nearest,
// 2 bicubic (NDIM 2 only)), one module per dtype:
//   grid_sample_fwd<T, NDIM, MODE> one thread per output point, grid-stride; loops channels.
//   grid_sample_bwd<T, NDIM, MODE> one thread per output point: dgrid (channels summed in
//                                  order: deterministic) and, by p.dx_mode, the x gradient:
//                                  1 = record each tap's (key, weight) and the point's dy
//                                  offset for grid_sample_dx_gather (deterministic);
//                                  2 = atomicAdd(weight * dy) into an A buffer (fast,
//                                  order-dependent rounding); 0 = no x gradient.
//   grid_sample_dx_gather<T>       one thread per x element: sums weight * dy over its
//                                  contributions, sorted by (key, entry) on the host side,
//                                  in that fixed order: bitwise reproducible.
//   grid_sample_cast<T>            A buffer -> T, elementwise (the atomic path, 16-bit).
//   grid_sample_zero<T>            zeroes the atomic path's A buffer (a launch, not a host
//                                  fill: graphs and launch templates replay it).
//   affine_grid_fwd<T, NDIM>       one thread per output point (n, [d,] h, w):
//                                  grid[..., i] = sum_k theta[n, i, k] * base_k in A, k
//                                  ascending, base = (x, y[, z], 1) from the per-axis
//                                  coordinates (w's, then h's, then d's, in A).
//   affine_grid_bwd<T, NDIM>       one block per (n, i, k): dtheta[n, i, k] = sum over the
//                                  image's points of grad[n, p, i] * base_k(p), strided
//                                  partials in A combined in shared memory in a fixed
//                                  order (deterministic).
// The mode is compile time (each kernel holds only its own taps in registers); padding and
// align_corners are runtime fields of GridSampleParams, uniform over a launch (no
// divergence), so one module per dtype serves every combination.
// Defines: none.
#include "common/cudnnlite.cuh"

// ops/spatial.py: _PARAMS_DTYPE. Dims are ordered (d, h, w); in 2-D d has size 1.
struct GridSampleParams {
    long long x_stride[5];   // x: n, c, d, h, w (elements)
    long long g_stride[5];   // grid: n, d, h, w, coordinate
    long long y_stride[5];   // y (forward) or dy (backward): n, c, d, h, w
    long long dx_stride[5];  // dx or its accumulation-type buffer: n, c, d, h, w
    long long dg_stride[5];  // dgrid: n, d, h, w, coordinate
    long long n, c;
    long long points;        // n * out_d * out_h * out_w
    int in_size[3];          // D, H, W
    int out_size[3];
    int mode;                // 0 bilinear, 1 nearest, 2 bicubic
    int padding;             // 0 zeros, 1 border, 2 reflection
    int align_corners;
    int dx_mode;             // backward: 0 none, 1 record, 2 atomic
};

namespace gs {

enum { BILINEAR = 0, NEAREST = 1, BICUBIC = 2 };
enum { ZEROS = 0, BORDER = 1, REFLECTION = 2 };
enum { DX_NONE = 0, DX_RECORD = 1, DX_ATOMIC = 2 };

// [-1, 1] -> pixel index (PyTorch's operation order); *scale = d index / d coordinate.
template <typename A>
__device__ __forceinline__ A unnormalize(A g, int size, bool align, A* scale) {
    if (align) {
        *scale = (size - 1) * A(0.5);
        return ((g + A(1)) / 2) * (size - 1);
    }
    *scale = size * A(0.5);
    return ((g + A(1)) * size - 1) / 2;
}

// fmin/fmax: NaN clips to 0. The gradient is 1 strictly inside, 0 on and beyond the
// borders (and for NaN).
template <typename A>
__device__ __forceinline__ A clip(A i, int size, A* grad) {
    *grad = (i > A(0) && i < (A)(size - 1)) ? A(1) : A(0);
    return cl::math::fmin((A)(size - 1), cl::math::fmax(i, A(0)));
}

// An index reflected into [twice_lo / 2, twice_hi / 2], and the sign of the reflection.
template <typename A>
struct Reflected {
    A i, grad;
};

// The flip parity comes from floats: no float -> int conversion of a huge quotient. Not
// inlined: its two fmod calls, inlined at each index a kernel pads (bicubic pads 8), were
// most of a kernel's NVRTC time (the double bicubic kernels 1.8 s, now 0.3-0.55 s); a call
// per padded index costs little next to the taps' loads, and only in reflection mode.
template <typename A>
__device__ __noinline__ Reflected<A> reflect(A i, int twice_lo, int twice_hi) {
    if (twice_lo == twice_hi) return {A(0), A(0)};
    const A lo = twice_lo * A(0.5);
    const A span = (twice_hi - twice_lo) * A(0.5);
    A d = i - lo;
    A sign = A(1);
    if (d < A(0)) {
        sign = A(-1);
        d = -d;
    }
    const A extra = cl::math::fmod(d, span);
    const bool odd = cl::math::fmod(cl::math::floor(d / span), A(2)) != A(0);
    return {odd ? span - extra + lo : extra + lo, odd ? -sign : sign};
}

// Padding applied to an unnormalized index (bicubic applies it to each integer tap).
template <typename A>
__device__ __forceinline__ A pad_index(A i, int size, int padding, bool align, A* grad) {
    A gc = A(1), gr = A(1);
    if (padding == BORDER) {
        i = clip(i, size, &gc);
    } else if (padding == REFLECTION) {
        const Reflected<A> r =
            align ? reflect(i, 0, 2 * (size - 1)) : reflect(i, -1, 2 * size - 1);
        gr = r.grad;
        i = clip(r.i, size, &gc);
    }
    *grad = gc * gr;
    // NaN, inf and huge indices: out of bounds, and safe to convert to int.
    return cl::math::fabs(i) < A(1073741824) ? i : A(-100);
}

// The cubic convolution coefficient is called A in the literature; here it is CA so that
// A stays the arithmetic type.
template <typename A>
__device__ __forceinline__ A cubic1(A x) {  // |x| <= 1
    const A CA = A(-0.75);
    return ((CA + A(2)) * x - (CA + A(3))) * x * x + A(1);
}
template <typename A>
__device__ __forceinline__ A cubic2(A x) {  // 1 < |x| < 2
    const A CA = A(-0.75);
    return ((CA * x - A(5) * CA) * x + A(8) * CA) * x - A(4) * CA;
}
template <typename A>
__device__ __forceinline__ A dcubic1(A x) {
    const A CA = A(-0.75);
    return (A(3) * (CA + A(2)) * x - A(2) * (CA + A(3))) * x;
}
template <typename A>
__device__ __forceinline__ A dcubic2(A x) {
    const A CA = A(-0.75);
    return (A(3) * CA * x - A(10) * CA) * x + A(8) * CA;
}

// The taps of one output point: input position (z, y, x; x < 0 = no tap) and weight, and
// for the backward the weight's derivative with respect to each unnormalized index.
template <typename A, int K, int NDIM>
struct Taps {
    int z[K], y[K], x[K];
    A w[K];
    A dw[K][NDIM];  // [k][0] d/d ix, [1] d/d iy, [2] d/d iz
};

__device__ __forceinline__ bool inside(int z, int y, int x, const GridSampleParams& p) {
    return z >= 0 && z < p.in_size[0] && y >= 0 && y < p.in_size[1] && x >= 0 &&
           x < p.in_size[2];
}

// Source indices of a point, dims (x, y, z) = coordinates 0, 1, 2; *scale the chain-rule
// factor of each (unnormalize * padding). Bicubic takes the index before padding.
template <typename T, int NDIM>
__device__ __forceinline__ void source_indices(const T* grid, long long goff,
                                               const GridSampleParams& p, bool pad,
                                               cl::acc_t<T>* idx, cl::acc_t<T>* scale) {
    typedef cl::acc_t<T> A;
#pragma unroll
    for (int k = 0; k < NDIM; ++k) {
        const int size = p.in_size[2 - k];
        const A g = cl::to_acc(grid[goff + k * p.g_stride[4]]);
        A s, gp = A(1);
        A i = unnormalize(g, size, p.align_corners != 0, &s);
        if (pad) i = pad_index(i, size, p.padding, p.align_corners != 0, &gp);
        idx[k] = i;
        scale[k] = s * gp;
    }
}

template <typename A, int NDIM>
__device__ __forceinline__ void linear_taps(const A* idx, const GridSampleParams& p,
                                            Taps<A, 1 << NDIM, NDIM>& t) {
    int lo[3] = {0, 0, 0};
    A wl[3] = {A(1), A(1), A(1)}, wh[3] = {A(0), A(0), A(0)};
#pragma unroll
    for (int k = 0; k < NDIM; ++k) {
        const A f = cl::math::floor(idx[k]);
        lo[k] = (int)f;
        wl[k] = (f + A(1)) - idx[k];  // PyTorch's (i_hi - i) and (i - i_lo)
        wh[k] = idx[k] - f;
    }
    // corner b: bit 0 = x + 1, bit 1 = y + 1, bit 2 = z + 1 (x fastest, as PyTorch sums)
#pragma unroll
    for (int b = 0; b < (1 << NDIM); ++b) {
        const int cx = lo[0] + (b & 1), cy = lo[1] + ((b >> 1) & 1);
        const int cz = NDIM == 3 ? lo[2] + ((b >> 2) & 1) : 0;
        A f[3];
#pragma unroll
        for (int k = 0; k < NDIM; ++k) f[k] = ((b >> k) & 1) ? wh[k] : wl[k];
        A w = f[0] * f[1];
        if (NDIM == 3) w *= f[2];
        const bool ok = inside(cz, cy, cx, p);
        t.z[b] = cz;
        t.y[b] = cy;
        t.x[b] = ok ? cx : -1;
        t.w[b] = w;
#pragma unroll
        for (int k = 0; k < NDIM; ++k) {
            // d w / d i_k: the other factors, signed by the corner's side along k
            A o = A(1);
#pragma unroll
            for (int j = 0; j < NDIM; ++j)
                if (j != k) o *= f[j];
            t.dw[b][k] = ((b >> k) & 1) ? o : -o;
        }
    }
}

template <typename A, int NDIM>
__device__ __forceinline__ void nearest_taps(const A* idx, const GridSampleParams& p,
                                             Taps<A, 1, NDIM>& t) {
    const int x = (int)cl::math::rint(idx[0]), y = (int)cl::math::rint(idx[1]);  // half to even
    const int z = NDIM == 3 ? (int)cl::math::rint(idx[2]) : 0;
    t.z[0] = z;
    t.y[0] = y;
    t.x[0] = inside(z, y, x, p) ? x : -1;
    t.w[0] = A(1);
#pragma unroll
    for (int k = 0; k < NDIM; ++k) t.dw[0][k] = A(0);
}

// 2-D only. idx: unnormalized, unpadded; each integer tap is padded on its own.
template <typename A>
__device__ __forceinline__ void cubic_taps(const A* idx, const GridSampleParams& p,
                                           Taps<A, 16, 2>& t) {
    A c[2][4], dc[2][4], base[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        base[k] = cl::math::floor(idx[k]);
        const A u = idx[k] - base[k];
        c[k][0] = cubic2(u + A(1));
        c[k][1] = cubic1(u);
        c[k][2] = cubic1(A(1) - u);
        c[k][3] = cubic2(A(2) - u);
        dc[k][0] = dcubic2(u + A(1));
        dc[k][1] = dcubic1(u);
        dc[k][2] = -dcubic1(A(1) - u);
        dc[k][3] = -dcubic2(A(2) - u);
    }
    int tx[4], ty[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        A unused;
        tx[a] = (int)pad_index(base[0] - A(1) + a, p.in_size[2], p.padding, p.align_corners != 0,
                               &unused);
        ty[a] = (int)pad_index(base[1] - A(1) + a, p.in_size[1], p.padding, p.align_corners != 0,
                               &unused);
    }
#pragma unroll
    for (int j = 0; j < 4; ++j) {
#pragma unroll
        for (int i = 0; i < 4; ++i) {
            const int k = 4 * j + i;
            t.z[k] = 0;
            t.y[k] = ty[j];
            t.x[k] = inside(0, ty[j], tx[i], p) ? tx[i] : -1;
            t.w[k] = c[0][i] * c[1][j];
            t.dw[k][0] = dc[0][i] * c[1][j];
            t.dw[k][1] = c[0][i] * dc[1][j];
        }
    }
}

// Point index -> (n, od, oh, ow).
__device__ __forceinline__ void point_coords(long long pt, const GridSampleParams& p,
                                             long long* n, int* o) {
    o[2] = (int)(pt % p.out_size[2]);
    long long r = pt / p.out_size[2];
    o[1] = (int)(r % p.out_size[1]);
    r /= p.out_size[1];
    o[0] = (int)(r % p.out_size[0]);
    *n = r / p.out_size[0];
}

__device__ __forceinline__ long long at(const long long* s, long long n, long long c, int z,
                                        int y, int x) {
    return n * s[0] + c * s[1] + z * s[2] + y * s[3] + x * s[4];
}

template <typename T, int K, int NDIM>
__device__ __forceinline__ void forward_point(const T* x, T* y, const GridSampleParams& p,
                                              long long n, const int* o,
                                              const Taps<cl::acc_t<T>, K, NDIM>& t) {
    typedef cl::acc_t<T> A;
    const long long yb = at(p.y_stride, n, 0, o[0], o[1], o[2]);
    for (long long c = 0; c < p.c; ++c) {
        const long long xb = n * p.x_stride[0] + c * p.x_stride[1];
        A acc = A(0);
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (t.x[k] >= 0) {
                const long long off =
                    xb + t.z[k] * p.x_stride[2] + t.y[k] * p.x_stride[3] + t.x[k] * p.x_stride[4];
                acc += cl::to_acc(x[off]) * t.w[k];
            } else if (K == 16) {
                acc += A(0) * t.w[k];  // bicubic weighs a zero: a NaN weight makes a NaN
            }
        }
        y[yb + c * p.y_stride[1]] = cl::from_acc<T>(acc);
    }
}

// dgrid of one point, and its x-gradient contributions by p.dx_mode.
template <typename T, int K, int NDIM>
__device__ __forceinline__ void backward_point(const T* dy, const T* x, T* dgrid,
                                               cl::acc_t<T>* dx_acc, long long* keys,
                                               cl::acc_t<T>* weights, long long* dy_base,
                                               const GridSampleParams& p, long long pt,
                                               long long n, const int* o,
                                               const cl::acc_t<T>* scale,
                                               const Taps<cl::acc_t<T>, K, NDIM>& t) {
    typedef cl::acc_t<T> A;
    const long long yb = at(p.y_stride, n, 0, o[0], o[1], o[2]);
    A gi[NDIM];
#pragma unroll
    for (int k = 0; k < NDIM; ++k) gi[k] = A(0);
    const bool need_grid = p.mode != NEAREST;  // nearest: dgrid is exactly 0
    for (long long c = 0; c < p.c; ++c) {
        const A g = cl::to_acc(dy[yb + c * p.y_stride[1]]);
        const long long xb = n * p.x_stride[0] + c * p.x_stride[1];
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (t.x[k] < 0) {
                if (K == 16) {  // bicubic weighs a zero (NaN weights make NaN), as forward
#pragma unroll
                    for (int j = 0; j < NDIM; ++j) gi[j] += A(0) * g * t.dw[k][j];
                }
                continue;
            }
            if (need_grid) {
                const A v =
                    cl::to_acc(x[xb + t.z[k] * p.x_stride[2] + t.y[k] * p.x_stride[3] +
                                   t.x[k] * p.x_stride[4]]) * g;
#pragma unroll
                for (int j = 0; j < NDIM; ++j) gi[j] += v * t.dw[k][j];
            }
            if (p.dx_mode == DX_ATOMIC)
                atomicAdd(dx_acc + at(p.dx_stride, n, c, t.z[k], t.y[k], t.x[k]), t.w[k] * g);
        }
    }
    const long long gb = n * p.dg_stride[0] + o[0] * p.dg_stride[1] + o[1] * p.dg_stride[2] +
                         o[2] * p.dg_stride[3];
#pragma unroll
    for (int j = 0; j < NDIM; ++j)
        dgrid[gb + j * p.dg_stride[4]] = cl::from_acc<T>(need_grid ? gi[j] * scale[j] : A(0));
    if (p.dx_mode == DX_RECORD) {
        const long long plane = (long long)p.in_size[0] * p.in_size[1] * p.in_size[2];
        const long long invalid = p.n * plane;  // sorts after every real key
        dy_base[pt] = yb;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            keys[pt * K + k] =
                t.x[k] < 0
                    ? invalid
                    : n * plane + ((long long)t.z[k] * p.in_size[1] + t.y[k]) * p.in_size[2] +
                          t.x[k];
            weights[pt * K + k] = t.w[k];
        }
    }
}

}  // namespace gs

// One output point's taps for mode MODE (compile time: each mode's kernel gets the
// registers it needs, not bicubic's 16 taps), then f(taps, scale).
template <typename T, int NDIM, int MODE, typename F>
__device__ __forceinline__ void with_taps(const T* grid, long long goff,
                                          const GridSampleParams& p, F&& f) {
    typedef cl::acc_t<T> A;
    A idx[3] = {A(0), A(0), A(0)}, scale[3] = {A(1), A(1), A(1)};
    if constexpr (MODE == gs::BICUBIC) {
        gs::source_indices<T, 2>(grid, goff, p, false, idx, scale);
        gs::Taps<A, 16, 2> t;
        gs::cubic_taps(idx, p, t);
        f(t, scale);
    } else if constexpr (MODE == gs::NEAREST) {
        gs::source_indices<T, NDIM>(grid, goff, p, true, idx, scale);
        gs::Taps<A, 1, NDIM> t;
        gs::nearest_taps<A, NDIM>(idx, p, t);
        f(t, scale);
    } else {
        gs::source_indices<T, NDIM>(grid, goff, p, true, idx, scale);
        gs::Taps<A, 1 << NDIM, NDIM> t;
        gs::linear_taps<A, NDIM>(idx, p, t);
        f(t, scale);
    }
}

// MODE = 0 bilinear, 1 nearest, 2 bicubic (NDIM = 2 only); p.mode is the same.
// The 32-bit types' non-bicubic forwards ask for 5 blocks per SM: left to itself, ptxas
// (sm_90) fitted the float 3-D bilinear one into 48 registers with 8 bytes spilled around
// the reflection call.
template <typename T, int NDIM, int MODE>
__global__ void __launch_bounds__(256, CL_MIN_BLOCKS(256, MODE != gs::BICUBIC && sizeof(T) < 8 ? 5 : 0))
    grid_sample_fwd(
    // pointers
    const T* x, const T* grid, T* y,
    // sizes, strides and options
    GridSampleParams p) {
    static_assert(MODE != gs::BICUBIC || NDIM == 2, "bicubic is 2-D only");
    for (long long pt = cl::global_thread_id(); pt < p.points; pt += cl::grid_stride()) {
        long long n;
        int o[3];
        gs::point_coords(pt, p, &n, o);
        const long long goff =
            n * p.g_stride[0] + o[0] * p.g_stride[1] + o[1] * p.g_stride[2] + o[2] * p.g_stride[3];
        with_taps<T, NDIM, MODE>(grid, goff, p, [&](const auto& t, const cl::acc_t<T>*) {
            gs::forward_point(x, y, p, n, o, t);
        });
    }
}

template <typename T, int NDIM, int MODE>
__global__ void __launch_bounds__(256) grid_sample_bwd(
    // pointers (dx_acc only for dx_mode 2; keys, weights, dy_base only for dx_mode 1)
    const T* dy, const T* x, const T* grid, T* dgrid, cl::acc_t<T>* dx_acc, long long* keys,
    cl::acc_t<T>* weights, long long* dy_base,
    // sizes, strides and options
    GridSampleParams p) {
    static_assert(MODE != gs::BICUBIC || NDIM == 2, "bicubic is 2-D only");
    for (long long pt = cl::global_thread_id(); pt < p.points; pt += cl::grid_stride()) {
        long long n;
        int o[3];
        gs::point_coords(pt, p, &n, o);
        const long long goff =
            n * p.g_stride[0] + o[0] * p.g_stride[1] + o[1] * p.g_stride[2] + o[2] * p.g_stride[3];
        with_taps<T, NDIM, MODE>(grid, goff, p, [&](const auto& t, const cl::acc_t<T>* scale) {
            gs::backward_point(dy, x, dgrid, dx_acc, keys, weights, dy_base, p, pt, n, o, scale,
                               t);
        });
    }
}

// dx[n, c, s] = sum over j in [start[n*S + s], start[n*S + s + 1]) of
// weight[j] * dy[src[j] + c * dy_stride_c], j ascending.
template <typename T>
__global__ void __launch_bounds__(256) grid_sample_dx_gather(
    // pointers: contributions sorted by (key, entry), and segment starts per key
    const T* dy, const cl::acc_t<T>* weight, const long long* src, const long long* start, T* dx,
    // sizes, strides (p.dx_stride: dx, p.y_stride: dy)
    GridSampleParams p) {
    const long long plane = (long long)p.in_size[0] * p.in_size[1] * p.in_size[2];
    const long long total = p.n * p.c * plane;
    for (long long e = cl::global_thread_id(); e < total; e += cl::grid_stride()) {
        cl::index_t s, c;  // (32-bit divisions while e fits: cl::div_mod)
        const long long n = cl::div_mod(cl::div_mod(e, plane, s), p.c, c);
        const long long key = n * plane + s;
        const long long cy = c * p.y_stride[1];
        cl::acc_t<T> acc = 0;
        for (long long j = start[key]; j < start[key + 1]; ++j)
            acc += weight[j] * cl::to_acc(dy[src[j] + cy]);
        cl::index_t xw, yh;
        const int zd = (int)cl::div_mod(cl::div_mod(s, p.in_size[2], xw), p.in_size[1], yh);
        dx[gs::at(p.dx_stride, n, c, zd, (int)yh, (int)xw)] = cl::from_acc<T>(acc);
    }
}

template <typename T>
__global__ void __launch_bounds__(256) grid_sample_cast(
    // pointers
    const cl::acc_t<T>* src, T* dst,
    // sizes
    long long n) {
    for (long long i = cl::global_thread_id(); i < n; i += cl::grid_stride())
        dst[i] = cl::from_acc<T>(src[i]);
}

template <typename T>
__global__ void __launch_bounds__(256) grid_sample_zero(
    // pointers (n contiguous elements, whatever view of them the caller holds)
    cl::acc_t<T>* buf,
    // sizes
    long long n) {
    for (long long i = cl::global_thread_id(); i < n; i += cl::grid_stride())
        buf[i] = cl::acc_t<T>(0);
}

// ---------------------------------------------------------------- affine_grid

namespace gs {

// base_k of point (ih, iw, id): x = coords[iw], y = coords[w + ih], z = coords[w + h + id], 1.
template <typename A, int NDIM>
__device__ __forceinline__ A base(const A* coords, int k, int iw, int ih, int id, int w, int h) {
    if (k == NDIM) return A(1);
    return k == 0 ? coords[iw] : k == 1 ? coords[w + ih] : coords[w + h + id];
}

}  // namespace gs

template <typename T, int NDIM>
__global__ void __launch_bounds__(256) affine_grid_fwd(
    // pointers: theta (N, NDIM, NDIM + 1) C order; grid (N, [D,] H, W, NDIM) written
    const T* __restrict__ theta, const cl::acc_t<T>* __restrict__ coords, T* __restrict__ grid,
    // sizes: points = N * D * H * W (D = 1 in 2-D)
    long long points, int d, int h, int w) {
    typedef cl::acc_t<T> A;
    for (long long e = cl::global_thread_id(); e < points; e += cl::grid_stride()) {
        cl::index_t w_, h_, d_;  // (32-bit divisions while e fits: cl::div_mod)
        const long long n = cl::div_mod(cl::div_mod(cl::div_mod(e, w, w_), h, h_), d, d_);
        const int iw = (int)w_, ih = (int)h_, id = (int)d_;
        const T* th = theta + n * (NDIM * (NDIM + 1));
#pragma unroll
        for (int i = 0; i < NDIM; ++i) {
            A sum = A(0);
#pragma unroll
            for (int k = 0; k <= NDIM; ++k)
                sum = cl::math::fma(cl::to_acc(th[i * (NDIM + 1) + k]),
                                    gs::base<A, NDIM>(coords, k, iw, ih, id, w, h), sum);
            grid[e * NDIM + i] = cl::from_acc<T>(sum);
        }
    }
}

template <typename T, int NDIM>
__global__ void __launch_bounds__(256) affine_grid_bwd(
    // pointers: grad (N, [D,] H, W, NDIM) C order; dtheta (N, NDIM, NDIM + 1) written
    const T* __restrict__ grad, const cl::acc_t<T>* __restrict__ coords, T* __restrict__ dtheta,
    // sizes: points per image (D * H * W)
    long long per_image, int h, int w) {
    typedef cl::acc_t<T> A;
    __shared__ A part[256];
    const int k = blockIdx.x % (NDIM + 1), i = (blockIdx.x / (NDIM + 1)) % NDIM;
    const long long n = blockIdx.x / (NDIM * (NDIM + 1));
    const T* g = grad + n * per_image * NDIM + i;
    A sum = A(0);
    for (long long p = threadIdx.x; p < per_image; p += blockDim.x) {
        cl::index_t w_, h_;  // (32-bit divisions while p fits: cl::div_mod)
        const int id = (int)cl::div_mod(cl::div_mod(p, w, w_), h, h_);
        const int iw = (int)w_, ih = (int)h_;
        sum = cl::math::fma(cl::to_acc(g[p * NDIM]), gs::base<A, NDIM>(coords, k, iw, ih, id, w, h),
                            sum);
    }
    part[threadIdx.x] = sum;
    __syncthreads();
    for (int half = 128; half > 0; half >>= 1) {
        if (threadIdx.x < half) part[threadIdx.x] += part[threadIdx.x + half];
        __syncthreads();
    }
    if (threadIdx.x == 0) dtheta[(n * NDIM + i) * (NDIM + 1) + k] = cl::from_acc<T>(part[0]);
}
