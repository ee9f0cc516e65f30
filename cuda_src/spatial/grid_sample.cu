// Spatial transformer sampling (grid_sample), forward and backward, 2-D and 3-D, with
// PyTorch's semantics: unnormalization with and without align_corners, zeros / border /
// reflection padding, bilinear (trilinear in 3-D), nearest (round half to even) and
// bicubic (A = -0.75, 2-D only). Non-finite or absurd (|i| >= 2^30) source indices become
// -100 after padding, i.e. out of bounds, as PyTorch's CUDA kernels do; clipping uses
// fminf/fmaxf, so a NaN coordinate clips to 0 under border/reflection padding.
//
// Every mode is a list of K taps per output point (bilinear 4, trilinear 8, nearest 1,
// bicubic 16): an in-bounds input position and a weight, computed once per point and
// applied to every channel.
//
// Kernels (T = float | __half | __nv_bfloat16; NDIM = 2 | 3; MODE = 0 bilinear, 1 nearest,
// 2 bicubic (NDIM 2 only)), one module per dtype:
//   grid_sample_fwd<T, NDIM, MODE> one thread per output point, grid-stride; loops channels.
//   grid_sample_bwd<T, NDIM, MODE> one thread per output point: dgrid (channels summed in
//                                  order: deterministic) and, by p.dx_mode, the x gradient:
//                                  1 = record each tap's (key, weight) and the point's dy
//                                  offset for grid_sample_dx_gather (deterministic);
//                                  2 = atomicAdd(weight * dy) into a float buffer (fast,
//                                  order-dependent rounding); 0 = no x gradient.
//   grid_sample_dx_gather<T>       one thread per x element: sums weight * dy over its
//                                  contributions, sorted by (key, entry) on the host side,
//                                  in that fixed order: bitwise reproducible.
//   grid_sample_cast<T>            float buffer -> T, elementwise (the atomic path, 16-bit).
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
    long long dx_stride[5];  // dx or its float accumulation buffer: n, c, d, h, w
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
__device__ __forceinline__ float unnormalize(float g, int size, bool align, float* scale) {
    if (align) {
        *scale = (size - 1) * 0.5f;
        return ((g + 1.f) / 2) * (size - 1);
    }
    *scale = size * 0.5f;
    return ((g + 1.f) * size - 1) / 2;
}

// fminf/fmaxf: NaN clips to 0. The gradient is 1 strictly inside, 0 on and beyond the
// borders (and for NaN).
__device__ __forceinline__ float clip(float i, int size, float* grad) {
    *grad = (i > 0.f && i < (float)(size - 1)) ? 1.f : 0.f;
    return fminf((float)(size - 1), fmaxf(i, 0.f));
}

// Reflects i into [twice_lo / 2, twice_hi / 2]; *grad is the sign of the reflection.
// The flip parity comes from floats: no float -> int conversion of a huge quotient.
__device__ __forceinline__ float reflect(float i, int twice_lo, int twice_hi, float* grad) {
    if (twice_lo == twice_hi) {
        *grad = 0.f;
        return 0.f;
    }
    const float lo = twice_lo * 0.5f;
    const float span = (twice_hi - twice_lo) * 0.5f;
    float d = i - lo;
    float sign = 1.f;
    if (d < 0.f) {
        sign = -1.f;
        d = -d;
    }
    const float extra = fmodf(d, span);
    const bool odd = fmodf(floorf(d / span), 2.f) != 0.f;
    *grad = odd ? -sign : sign;
    return odd ? span - extra + lo : extra + lo;
}

// Padding applied to an unnormalized index (bicubic applies it to each integer tap).
__device__ __forceinline__ float pad_index(float i, int size, int padding, bool align,
                                           float* grad) {
    float gc = 1.f, gr = 1.f;
    if (padding == BORDER) {
        i = clip(i, size, &gc);
    } else if (padding == REFLECTION) {
        i = align ? reflect(i, 0, 2 * (size - 1), &gr) : reflect(i, -1, 2 * size - 1, &gr);
        i = clip(i, size, &gc);
    }
    *grad = gc * gr;
    // NaN, inf and huge indices: out of bounds, and safe to convert to int.
    return fabsf(i) < 1073741824.f ? i : -100.f;
}

__device__ __forceinline__ float cubic1(float x) {  // |x| <= 1
    const float A = -0.75f;
    return ((A + 2.f) * x - (A + 3.f)) * x * x + 1.f;
}
__device__ __forceinline__ float cubic2(float x) {  // 1 < |x| < 2
    const float A = -0.75f;
    return ((A * x - 5.f * A) * x + 8.f * A) * x - 4.f * A;
}
__device__ __forceinline__ float dcubic1(float x) {
    const float A = -0.75f;
    return (3.f * (A + 2.f) * x - 2.f * (A + 3.f)) * x;
}
__device__ __forceinline__ float dcubic2(float x) {
    const float A = -0.75f;
    return (3.f * A * x - 10.f * A) * x + 8.f * A;
}

// The taps of one output point: input position (z, y, x; x < 0 = no tap) and weight, and
// for the backward the weight's derivative with respect to each unnormalized index.
template <int K, int NDIM>
struct Taps {
    int z[K], y[K], x[K];
    float w[K];
    float dw[K][NDIM];  // [k][0] d/d ix, [1] d/d iy, [2] d/d iz
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
                                               float* idx, float* scale) {
#pragma unroll
    for (int k = 0; k < NDIM; ++k) {
        const int size = p.in_size[2 - k];
        const float g = cl::to_float(grid[goff + k * p.g_stride[4]]);
        float s, gp = 1.f;
        float i = unnormalize(g, size, p.align_corners != 0, &s);
        if (pad) i = pad_index(i, size, p.padding, p.align_corners != 0, &gp);
        idx[k] = i;
        scale[k] = s * gp;
    }
}

template <int NDIM>
__device__ __forceinline__ void linear_taps(const float* idx, const GridSampleParams& p,
                                            Taps<1 << NDIM, NDIM>& t) {
    int lo[3] = {0, 0, 0};
    float wl[3] = {1.f, 1.f, 1.f}, wh[3] = {0.f, 0.f, 0.f};
#pragma unroll
    for (int k = 0; k < NDIM; ++k) {
        const float f = floorf(idx[k]);
        lo[k] = (int)f;
        wl[k] = (f + 1.f) - idx[k];  // PyTorch's (i_hi - i) and (i - i_lo)
        wh[k] = idx[k] - f;
    }
    // corner b: bit 0 = x + 1, bit 1 = y + 1, bit 2 = z + 1 (x fastest, as PyTorch sums)
#pragma unroll
    for (int b = 0; b < (1 << NDIM); ++b) {
        const int cx = lo[0] + (b & 1), cy = lo[1] + ((b >> 1) & 1);
        const int cz = NDIM == 3 ? lo[2] + ((b >> 2) & 1) : 0;
        float f[3];
#pragma unroll
        for (int k = 0; k < NDIM; ++k) f[k] = ((b >> k) & 1) ? wh[k] : wl[k];
        float w = f[0] * f[1];
        if (NDIM == 3) w *= f[2];
        const bool ok = inside(cz, cy, cx, p);
        t.z[b] = cz;
        t.y[b] = cy;
        t.x[b] = ok ? cx : -1;
        t.w[b] = w;
#pragma unroll
        for (int k = 0; k < NDIM; ++k) {
            // d w / d i_k: the other factors, signed by the corner's side along k
            float o = 1.f;
#pragma unroll
            for (int j = 0; j < NDIM; ++j)
                if (j != k) o *= f[j];
            t.dw[b][k] = ((b >> k) & 1) ? o : -o;
        }
    }
}

template <int NDIM>
__device__ __forceinline__ void nearest_taps(const float* idx, const GridSampleParams& p,
                                             Taps<1, NDIM>& t) {
    const int x = (int)rintf(idx[0]), y = (int)rintf(idx[1]);  // half to even
    const int z = NDIM == 3 ? (int)rintf(idx[2]) : 0;
    t.z[0] = z;
    t.y[0] = y;
    t.x[0] = inside(z, y, x, p) ? x : -1;
    t.w[0] = 1.f;
#pragma unroll
    for (int k = 0; k < NDIM; ++k) t.dw[0][k] = 0.f;
}

// 2-D only. idx: unnormalized, unpadded; each integer tap is padded on its own.
__device__ __forceinline__ void cubic_taps(const float* idx, const GridSampleParams& p,
                                           Taps<16, 2>& t) {
    float c[2][4], dc[2][4], base[2];
#pragma unroll
    for (int k = 0; k < 2; ++k) {
        base[k] = floorf(idx[k]);
        const float u = idx[k] - base[k];
        c[k][0] = cubic2(u + 1.f);
        c[k][1] = cubic1(u);
        c[k][2] = cubic1(1.f - u);
        c[k][3] = cubic2(2.f - u);
        dc[k][0] = dcubic2(u + 1.f);
        dc[k][1] = dcubic1(u);
        dc[k][2] = -dcubic1(1.f - u);
        dc[k][3] = -dcubic2(2.f - u);
    }
    int tx[4], ty[4];
#pragma unroll
    for (int a = 0; a < 4; ++a) {
        float unused;
        tx[a] = (int)pad_index(base[0] - 1.f + a, p.in_size[2], p.padding, p.align_corners != 0,
                               &unused);
        ty[a] = (int)pad_index(base[1] - 1.f + a, p.in_size[1], p.padding, p.align_corners != 0,
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
                                              const Taps<K, NDIM>& t) {
    const long long yb = at(p.y_stride, n, 0, o[0], o[1], o[2]);
    for (long long c = 0; c < p.c; ++c) {
        const long long xb = n * p.x_stride[0] + c * p.x_stride[1];
        float acc = 0.f;
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (t.x[k] >= 0) {
                const long long off =
                    xb + t.z[k] * p.x_stride[2] + t.y[k] * p.x_stride[3] + t.x[k] * p.x_stride[4];
                acc += cl::to_float(x[off]) * t.w[k];
            } else if (K == 16) {
                acc += 0.f * t.w[k];  // bicubic weighs a zero: a NaN weight makes a NaN
            }
        }
        y[yb + c * p.y_stride[1]] = cl::from_float<T>(acc);
    }
}

// dgrid of one point, and its x-gradient contributions by p.dx_mode.
template <typename T, int K, int NDIM>
__device__ __forceinline__ void backward_point(const T* dy, const T* x, T* dgrid,
                                               float* dx_acc, long long* keys, float* weights,
                                               long long* dy_base, const GridSampleParams& p,
                                               long long pt, long long n, const int* o,
                                               const float* scale, const Taps<K, NDIM>& t) {
    const long long yb = at(p.y_stride, n, 0, o[0], o[1], o[2]);
    float gi[NDIM];
#pragma unroll
    for (int k = 0; k < NDIM; ++k) gi[k] = 0.f;
    const bool need_grid = p.mode != NEAREST;  // nearest: dgrid is exactly 0
    for (long long c = 0; c < p.c; ++c) {
        const float g = cl::to_float(dy[yb + c * p.y_stride[1]]);
        const long long xb = n * p.x_stride[0] + c * p.x_stride[1];
#pragma unroll
        for (int k = 0; k < K; ++k) {
            if (t.x[k] < 0) {
                if (K == 16) {  // bicubic weighs a zero (NaN weights make NaN), as forward
#pragma unroll
                    for (int j = 0; j < NDIM; ++j) gi[j] += 0.f * g * t.dw[k][j];
                }
                continue;
            }
            if (need_grid) {
                const float v =
                    cl::to_float(x[xb + t.z[k] * p.x_stride[2] + t.y[k] * p.x_stride[3] +
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
        dgrid[gb + j * p.dg_stride[4]] = cl::from_float<T>(need_grid ? gi[j] * scale[j] : 0.f);
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
    float idx[3] = {0.f, 0.f, 0.f}, scale[3] = {1.f, 1.f, 1.f};
    if constexpr (MODE == gs::BICUBIC) {
        gs::source_indices<T, 2>(grid, goff, p, false, idx, scale);
        gs::Taps<16, 2> t;
        gs::cubic_taps(idx, p, t);
        f(t, scale);
    } else if constexpr (MODE == gs::NEAREST) {
        gs::source_indices<T, NDIM>(grid, goff, p, true, idx, scale);
        gs::Taps<1, NDIM> t;
        gs::nearest_taps<NDIM>(idx, p, t);
        f(t, scale);
    } else {
        gs::source_indices<T, NDIM>(grid, goff, p, true, idx, scale);
        gs::Taps<1 << NDIM, NDIM> t;
        gs::linear_taps<NDIM>(idx, p, t);
        f(t, scale);
    }
}

// MODE = 0 bilinear, 1 nearest, 2 bicubic (NDIM = 2 only); p.mode is the same.
template <typename T, int NDIM, int MODE>
__global__ void __launch_bounds__(256) grid_sample_fwd(
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
        with_taps<T, NDIM, MODE>(grid, goff, p, [&](const auto& t, const float*) {
            gs::forward_point(x, y, p, n, o, t);
        });
    }
}

template <typename T, int NDIM, int MODE>
__global__ void __launch_bounds__(256) grid_sample_bwd(
    // pointers (dx_acc only for dx_mode 2; keys, weights, dy_base only for dx_mode 1)
    const T* dy, const T* x, const T* grid, T* dgrid, float* dx_acc, long long* keys,
    float* weights, long long* dy_base,
    // sizes, strides and options
    GridSampleParams p) {
    static_assert(MODE != gs::BICUBIC || NDIM == 2, "bicubic is 2-D only");
    for (long long pt = cl::global_thread_id(); pt < p.points; pt += cl::grid_stride()) {
        long long n;
        int o[3];
        gs::point_coords(pt, p, &n, o);
        const long long goff =
            n * p.g_stride[0] + o[0] * p.g_stride[1] + o[1] * p.g_stride[2] + o[2] * p.g_stride[3];
        with_taps<T, NDIM, MODE>(grid, goff, p, [&](const auto& t, const float* scale) {
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
    const T* dy, const float* weight, const long long* src, const long long* start, T* dx,
    // sizes, strides (p.dx_stride: dx, p.y_stride: dy)
    GridSampleParams p) {
    const long long plane = (long long)p.in_size[0] * p.in_size[1] * p.in_size[2];
    const long long total = p.n * p.c * plane;
    for (long long e = cl::global_thread_id(); e < total; e += cl::grid_stride()) {
        const long long s = e % plane;
        const long long c = (e / plane) % p.c;
        const long long n = e / (plane * p.c);
        const long long key = n * plane + s;
        const long long cy = c * p.y_stride[1];
        float acc = 0.f;
        for (long long j = start[key]; j < start[key + 1]; ++j)
            acc += weight[j] * cl::to_float(dy[src[j] + cy]);
        const int xw = (int)(s % p.in_size[2]);
        const int yh = (int)((s / p.in_size[2]) % p.in_size[1]);
        const int zd = (int)(s / ((long long)p.in_size[2] * p.in_size[1]));
        dx[gs::at(p.dx_stride, n, c, zd, yh, xw)] = cl::from_float<T>(acc);
    }
}

template <typename T>
__global__ void __launch_bounds__(256) grid_sample_cast(
    // pointers
    const float* src, T* dst,
    // sizes
    long long n) {
    for (long long i = cl::global_thread_id(); i < n; i += cl::grid_stride())
        dst[i] = cl::from_float<T>(src[i]);
}
