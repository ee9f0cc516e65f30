// Convolution backward filter (dw = sum over N*P*Q of dy (x) x-patches) and backward
// bias (db = sum of dy over N*P*Q). ConvShape describes the FORWARD problem.
//
// Kernels (T = float | __half | __nv_bfloat16 | double; accumulation in cl::acc_t<T>: fp32,
// fp64 for double, and the workspace partials in that type: "fp32" below is double there):
//   bwd_filter_direct<T, NHWC>   one 256-thread block per filter element (k, c, r, t)
//                                (grid-stride over them): each thread sums a fixed
//                                subset of the N*P*Q products, then a fixed shared-memory
//                                tree adds the 256 partials. Deterministic.
//   bwd_filter_direct_3d<T, NHWC> the same for 3-D (KCTRS / KTRSC filters); its own kernel
//                                so the 2-D one keeps no depth term.
//   bwd_filter_gemm<T, NHWC, BM, BN, TM, TN>
//                                implicit GEMM per group: dW[kk][j] = sum_m dY[m][kk] *
//                                X[m][j], m over N*P*Q, j over the C/g*R*S taps in the
//                                filter's memory order (KCRS: (c, r, t); KRSC: (r, t, c)).
//                                A block computes a BM x BN tile over one split of m
//                                (blockIdx.z = split * groups + g), with the shared tiles
//                                and cp.async pipeline of conv/gemm_tiles.cuh
//                                (stages<T, BM>(): 3 for fp32, 2 for fp64 and for the
//                                128 x 128 tile, to fit 48 KB; 128 x 128: 8 x 8 per thread).
//                                Loads: NHWC dy rows and x channel runs
//                                as 16-byte copies (K/g, C/g % 4 == 0 and aligned; else
//                                element copies), NCHW as element gathers; the output positions
//                                m = (n, p, q) advance by BK with adds and wraps and the
//                                taps of a thread's columns are decoded once (no division
//                                in the main loop). atomic == 0: it stores its fp32
//                                partial tile to ws[split][K][C/g*R*S] (deterministic,
//                                reduced by bwd_filter_reduce in split order);
//                                atomic == 1: it atomicAdds into ws[K][C/g*R*S] (zeroed by
//                                zero_f32 / zero_f64 first; summation order varies: NOT
//                                deterministic).
//   bwd_filter_gemm<T, NHWC, BM, BN, TM, TN, true>
//                                3-D (NCDHW / NDHWC, KCTRS / KTRSC): the output planes
//                                (n, o) in the position's third digit (split with one
//                                division per slice), taps with their depth, decoded once.
//   bwd_filter_reduce<T>         dw[i] = sum_{split} ws[split][i] in split order, stored as T.
//   zero_f32, zero_f64           ws[i] = 0 (float, double workspace).
//   bwd_bias_nchw<T>             a block per (channel k, split of N*P*Q): 256 threads
//                                (coalesced along P*Q; (image, pixel) walked by additions),
//                                fixed tree; fp32 partial per split.
//   bwd_bias_nhwc<T>             a block per (32 channels, split): 32 x 8 threads (coalesced
//                                along K), fixed tree over the 8; fp32 partial per split.
//                                Both are then reduced by bwd_filter_reduce: deterministic.
//
// Defines: none; one module per dtype, the 3-D direct kernels in a module of their own
// (cudnnlite/solvers/conv/bwd_filter.py).
#include "conv/gemm_tiles.cuh"
#include "conv/splitk_reduce.cuh"  // bwd_filter_reduce

namespace bwf {

constexpr int kThreads = 256;
constexpr int kBK = 16;  // reduction slice (over N*P*Q) of the GEMM kernel

// Fixed-order tree over kThreads partials in shared memory; thread 0 gets the total.
template <typename A>
__device__ __forceinline__ A block_sum(A v, A* red) {
    red[threadIdx.x] = v;
    __syncthreads();
    for (int half = kThreads / 2; half > 0; half /= 2) {
        if (threadIdx.x < half) red[threadIdx.x] += red[threadIdx.x + half];
        __syncthreads();
    }
    return red[0];
}

}  // namespace bwf

namespace bwf {

// D3: the depth taps too (the 2-D instantiation has no depth term).
template <typename T, bool NHWC, bool D3>
__device__ __forceinline__ void filter_direct(const T* __restrict__ x, const T* __restrict__ dy,
                                              T* __restrict__ dw, const ConvShape& s) {
    typedef cl::acc_t<T> A;
    __shared__ A red[kThreads];
    const int taps_d = D3 ? s.t : 1;
    const int taps = s.r * s.s * taps_d;
    const cl::index_t total = (cl::index_t)s.k * s.c_per_group * taps;
    const int pq = s.p * s.q, opq = pq * (D3 ? s.o : 1);
    const cl::index_t npq = (cl::index_t)s.n * opq;
    for (cl::index_t f = blockIdx.x; f < total; f += gridDim.x) {  // uniform per block
        int k, cg, td = 0, r, t;
        cl::index_t rem = f, d;  // (32-bit divisions while f fits: cl::div_mod)
        if (NHWC) {
            rem = cl::div_mod(rem, s.c_per_group, d), cg = (int)d;
            rem = cl::div_mod(rem, s.s, d), t = (int)d;
            rem = cl::div_mod(rem, s.r, d), r = (int)d;
            if (D3) rem = cl::div_mod(rem, taps_d, d), td = (int)d;
            k = (int)rem;
        } else {
            rem = cl::div_mod(rem, s.s, d), t = (int)d;
            rem = cl::div_mod(rem, s.r, d), r = (int)d;
            if (D3) rem = cl::div_mod(rem, taps_d, d), td = (int)d;
            k = (int)cl::div_mod(rem, s.c_per_group, d), cg = (int)d;
        }
        const int c = (k / s.k_per_group) * s.c_per_group + cg;
        A acc = 0;
        for (cl::index_t m = threadIdx.x; m < npq; m += kThreads) {
            cl::index_t within;  // (32-bit division while m fits: cl::div_mod)
            const int n = (int)cl::div_mod(m, opq, within);
            int j = (int)within, o = 0, dd = 0;
            if (D3) {
                o = j / pq, j -= o * pq;
                dd = o * s.stride_d - s.pad_d + td * s.dil_d;
            }
            const int p = j / s.q, q = j - p * s.q;
            const int h = p * s.stride_h - s.pad_h + r * s.dil_h;
            const int ww = q * s.stride_w - s.pad_w + t * s.dil_w;
            if ((unsigned)h >= (unsigned)s.h || (unsigned)ww >= (unsigned)s.w) continue;
            if (D3 && (unsigned)dd >= (unsigned)s.d) continue;
            acc = cl::math::fma(cl::to_acc(dy[conv::y_off<NHWC, D3>(s, n, k, o, p, q)]),
                                cl::to_acc(x[conv::x_off<NHWC, D3>(s, n, c, dd, h, ww)]), acc);
        }
        const A sum = block_sum(acc, red);
        if (threadIdx.x == 0) dw[f] = cl::from_acc<T>(sum);
        __syncthreads();  // red is reused by the next filter element
    }
}

}  // namespace bwf

template <typename T, bool NHWC>
__global__ void __launch_bounds__(bwf::kThreads) bwd_filter_direct(
    const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dw, ConvShape s) {
    bwf::filter_direct<T, NHWC, false>(x, dy, dw, s);
}

template <typename T, bool NHWC>
__global__ void __launch_bounds__(bwf::kThreads) bwd_filter_direct_3d(
    const T* __restrict__ x, const T* __restrict__ dy, T* __restrict__ dw, ConvShape s) {
    bwf::filter_direct<T, NHWC, true>(x, dy, dw, s);
}

namespace bwf {

// cp.async stages of the GEMM kernel (fp16/bf16 stage through registers, two stages): 3,
// but 2 for double, whose 3 stages of the 64 x 64 tile would take 52 KB (> 48 KB static),
// and for the 128 x 128 tile (3 stages of fp32: 50 KB; it has no double instantiation).
template <typename T, int BM = 64>
constexpr int stages() {
    return sizeof(cl::acc_t<T>) == 8 || BM > 64 ? 2 : 3;
}

template <bool B, class X, class Y> struct Pick { using type = X; };
template <class X, class Y> struct Pick<false, X, Y> { using type = Y; };

// Output position m = (n, p, q) of a thread's reduction column, advanced by BK per slice.
// 3-D: hi counts output planes n * O + o (the consumers split it: one division per slice).
struct Position {
    gemm::Radix3 it;  // lo = q, mid = p, hi = n (3-D: n * O + o)
    cl::index_t m;
    __device__ __forceinline__ void init(const ConvShape& s, cl::index_t m_) {
        m = m_;
        const int pq = s.p * s.q > 0 ? s.p * s.q : 1;  // (an empty output has no slices)
        const int n = (int)(m_ / pq), rem = (int)(m_ - (cl::index_t)n * pq);  // once
        it.init(rem, kBK, s.q, s.p);
        it.hi = n;
        it.dhi = kBK / pq;  // the step's image part (init saw the step within an image)
    }
    __device__ __forceinline__ void advance() {
        it.advance();
        m += kBK;
    }
};

// A[m][kk] = dy[m, g*K/g + k0 + kk], As[m][kk] (m: the reduction). NCHW: an element gather per
// element, each thread one m column (k-fastest layout) and channels row(i). D3: NCDHW.
template <typename T, class Tl, bool D3 = false>
struct DyGatherNchw {
    using L = gemm::KFast<Tl, Tl::BM>;
    using Layout = L;
    static constexpr int VECS = L::VECS, VEC = 1;
    const T* __restrict__ dy;
    const ConvShape& s;
    int kleft;             // channels left from row(0)
    cl::index_t m_end;
    Position pos;
    gemm::Offsets<L> offset;

    __device__ __forceinline__ DyGatherNchw(const T* dy_, const ConvShape& s_, int kbase,
                                            int krows, cl::index_t m0, cl::index_t m_end_)
        : dy(dy_ + (cl::index_t)(kbase + L::row(0)) * s_.p * s_.q * (D3 ? s_.o : 1)), s(s_),
          kleft(krows - L::row(0)), m_end(m_end_) {
        pos.init(s, m0 + L::k());
    }

    template <class Sink>
    __device__ __forceinline__ void next(Sink& sink) {
        const int pq = s.p * s.q, opq = D3 ? s.o * pq : pq;
        cl::index_t plane = pos.it.hi;  // 2-D: the image; 3-D: (image, o)
        if constexpr (D3) {
            const int n = pos.it.hi / s.o;
            plane = (cl::index_t)n * s.k * s.o + (pos.it.hi - n * s.o);  // in units of pq
        } else {
            plane *= s.k;
        }
        const T* src = dy + plane * pq + pos.it.mid * s.q + pos.it.lo;
        const bool min = pos.m < m_end;
#pragma unroll
        for (int i = 0; i < VECS; ++i)
            sink.template put<1>(i, 0, src + i * L::STEP * opq, min && i * L::STEP < kleft);
        pos.advance();
    }
};

// A tap of the patch: {x offset from (n, h0, w0, group channel 0), dh, dw}; D3: the
// depth too, {offset from (n, d0, h0, w0, channel 0), dh, dw, dd} (KTRSC / KCTRS columns).
template <bool NHWC>
__device__ __forceinline__ int3 patch_tap(const ConvShape& s, int j) {
    int c, r, t;  // decoded once per thread, outside the main loop
    if (NHWC) {
        c = j % s.c_per_group;
        const int rt = j / s.c_per_group;
        t = rt % s.s, r = rt / s.s;
    } else {
        t = j % s.s;
        const int cr = j / s.s;
        r = cr % s.r, c = cr / s.r;
    }
    const int dh = r * s.dil_h, dw = t * s.dil_w;
    return make_int3(NHWC ? (dh * s.w + dw) * s.c + c : (c * s.h + dh) * s.w + dw, dh, dw);
}

template <bool NHWC>
__device__ __forceinline__ int4 patch_tap_3d(const ConvShape& s, int j) {
    const int trs = s.t * s.r * s.s;
    const int c = NHWC ? j % s.c_per_group : j / trs;
    const int tap = NHWC ? j / s.c_per_group : j % trs;  // (td * R + r) * S + t
    const int t = tap % s.s, tr = tap / s.s;
    const int r = tr % s.r, td = tr / s.r;
    const int dd = td * s.dil_d, dh = r * s.dil_h, dw = t * s.dil_w;
    const int off = NHWC ? ((dd * s.h + dh) * s.w + dw) * s.c + c
                         : ((c * s.d + dd) * s.h + dh) * s.w + dw;
    return make_int4(off, dh, dw, dd);
}

template <bool D3> struct TapOf { using type = int3; };
template <> struct TapOf<true> { using type = int4; };

// B[m][j] = x at tap j of output position m (0 in the padding), Bs[m][j]. NHWC: 4
// consecutive taps (channels) per vector, threads along j (row-fast layout; 16 bytes when
// C/g % 4 == 0 and aligned), the same 4 taps in each of a thread's vectors, whose output
// positions are K_STEP apart (two vectors in the 128 x 128 tile: a position each); NCHW:
// k-fastest, one m per thread, taps row(i). D3: NDHWC / NCDHW, the taps' depth checked too.
template <typename T, class Tl, bool NHWC, bool D3 = false>
struct PatchLoader {
    using Tap = typename TapOf<D3>::type;
    using L = typename Pick<NHWC, gemm::RowFast4<Tl, Tl::BN>, gemm::KFast<Tl, Tl::BN>>::type;
    using Layout = L;
    static constexpr int VECS = L::VECS, VEC = NHWC ? 4 : 1;
    static constexpr int TAPS = NHWC ? 4 : VECS;  // taps a thread decodes
    static constexpr int POSITIONS = NHWC ? VECS : 1;  // output positions a thread follows
    const T* __restrict__ x;
    const ConvShape& s;
    cl::index_t m_end;
    bool vec;
    Tap tap[TAPS];  // {offset, dh, dw[, dd]}; dh far outside past the filter
    Position pos[POSITIONS];
    gemm::Offsets<L> offset;

    __device__ __forceinline__ static int k0(int j) {
        if constexpr (NHWC) return L::k(j);
        else return L::k();
    }

    __device__ __forceinline__ PatchLoader(const T* x_, const ConvShape& s_, int cbase, int j0,
                                           cl::index_t m0, cl::index_t m_end_, bool vec_)
        : x(x_ + (NHWC ? cbase : (cl::index_t)cbase * s_.h * s_.w * (D3 ? s_.d : 1))), s(s_),
          m_end(m_end_), vec(vec_) {
        const int jtot = s.c_per_group * s.r * s.s * (D3 ? s.t : 1);
#pragma unroll
        for (int i = 0; i < TAPS; ++i) {
            const int j = j0 + (NHWC ? L::row(0) + i : L::row(i));
            if constexpr (D3)
                tap[i] = j < jtot ? patch_tap_3d<NHWC>(s, j) : make_int4(0, -(1 << 29), 0, 0);
            else
                tap[i] = j < jtot ? patch_tap<NHWC>(s, j) : make_int3(0, -(1 << 29), 0);
        }
#pragma unroll
        for (int j = 0; j < POSITIONS; ++j) pos[j].init(s, m0 + k0(j));
    }

    // x offset (from the image) and validity of the tap t at (d0, h0, w0).
    __device__ __forceinline__ int element(int d0, int h0, int w0, bool min, const Tap& t,
                                           bool& ok) const {
        const int h = h0 + t.y, w = w0 + t.z;
        ok = min && (unsigned)h < (unsigned)s.h && (unsigned)w < (unsigned)s.w;
        if constexpr (D3) {
            ok = ok && (unsigned)(d0 + t.w) < (unsigned)s.d;
            return (NHWC ? ((d0 * s.h + h0) * s.w + w0) * s.c : (d0 * s.h + h0) * s.w + w0) + t.x;
        }
        return (NHWC ? (h0 * s.w + w0) * s.c : h0 * s.w + w0) + t.x;
    }

    // The image, and (d0, h0, w0) of the window, of position p.
    __device__ __forceinline__ const T* window(const Position& p, int& d0, int& h0,
                                               int& w0) const {
        h0 = p.it.mid * s.stride_h - s.pad_h, w0 = p.it.lo * s.stride_w - s.pad_w;
        int n = p.it.hi;
        d0 = 0;
        if constexpr (D3) {
            n = p.it.hi / s.o;
            d0 = (p.it.hi - n * s.o) * s.stride_d - s.pad_d;
        }
        return x + (cl::index_t)n * s.c * s.h * s.w * (D3 ? s.d : 1);
    }

    template <class Sink>
    __device__ __forceinline__ void next(Sink& sink) {
        if constexpr (NHWC) {
#pragma unroll
            for (int j = 0; j < VECS; ++j) {
                if (!L::live(j)) continue;
                int d0, h0, w0;
                const T* img = window(pos[j], d0, h0, w0);
                const bool min = pos[j].m < m_end;
                if (vec) {  // 4 channels of one tap
                    bool ok;
                    const int off = element(d0, h0, w0, min, tap[0], ok);
                    sink.template put<4>(j, 0, img + off, ok);
                } else {
#pragma unroll
                    for (int v = 0; v < 4; ++v) {
                        bool ok;
                        const int off = element(d0, h0, w0, min, tap[v], ok);
                        sink.template put<1>(j, v, img + off, ok);
                    }
                }
                pos[j].advance();
            }
        } else {
            int d0, h0, w0;
            const T* img = window(pos[0], d0, h0, w0);
            const bool min = pos[0].m < m_end;
#pragma unroll
            for (int i = 0; i < VECS; ++i) {
                bool ok;
                const int off = element(d0, h0, w0, min, tap[i], ok);
                sink.template put<1>(i, 0, img + off, ok);
            }
            pos[0].advance();
        }
    }
};

}  // namespace bwf

// D3: 3-D (NCDHW / NDHWC x and dy, KCTRS / KTRSC dw), a module of its own.
template <typename T, bool NHWC, int BM, int BN, int TM, int TN, bool D3 = false>
__global__ void __launch_bounds__(
    gemm::Tile<BM, BN, bwf::kBK, TM, TN, bwf::stages<T, BM>()>::THREADS,
    gemm::Tile<BM, BN, bwf::kBK, TM, TN, bwf::stages<T, BM>()>::MIN_BLOCKS)
    bwd_filter_gemm(
        // pointers: ws holds acc_t<T> partials (splits x K x C/g*R*S) or the atomic sums
        const T* __restrict__ x, const T* __restrict__ dy, cl::acc_t<T>* __restrict__ ws,
        // sizes: the problem, m-chunk per split (a multiple of BK), and the variant
        ConvShape s, long long chunk, int atomic) {
    using Tl = gemm::Tile<BM, BN, bwf::kBK, TM, TN, bwf::stages<T, BM>()>;
    typedef cl::acc_t<T> A;
    __shared__ __align__(16) A smem[gemm::Smem<T, Tl>::ELEMS];
    const int g = blockIdx.z % s.groups, split = blockIdx.z / s.groups;
    const int jtot = s.c_per_group * s.r * s.s * (D3 ? s.t : 1);
    const int j0 = blockIdx.x * BN, kk0 = blockIdx.y * BM;
    const int kbase = g * s.k_per_group + kk0;
    const cl::index_t npq = (cl::index_t)s.n * s.p * s.q * (D3 ? s.o : 1);
    const cl::index_t m0 = (cl::index_t)split * chunk;
    const cl::index_t m_end = m0 + chunk < npq ? m0 + chunk : npq;
    const int slices = m0 < m_end ? (int)((m_end - m0 + Tl::BK - 1) / Tl::BK) : 0;
    const int krows = s.k_per_group - kk0;

    // 16-byte copies: runs of 4 channels inside a group from 16-byte aligned bases
    const bool vec_x = NHWC && s.c_per_group % 4 == 0 && s.c % 4 == 0 && gemm::aligned16(x);
    bwf::PatchLoader<T, Tl, NHWC, D3> lb(x, s, g * s.c_per_group, j0, m0, m_end, vec_x);
    A acc[TM][TN];
    if constexpr (NHWC) {
        const bool vec_dy = s.k_per_group % 4 == 0 && s.k % 4 == 0 && gemm::aligned16(dy);
        gemm::RowLoader<T, Tl, BM> la(dy + m0 * s.k + kbase, s.k, (int)(m_end - m0), krows,
                                      vec_dy);
        gemm::run<T, Tl>(slices, la, lb, smem, acc);
    } else {
        bwf::DyGatherNchw<T, Tl, D3> la(dy, s, kbase, krows, m0, m_end);
        gemm::run<T, Tl>(slices, la, lb, smem, acc);
    }

    const int tx = threadIdx.x % Tl::THREADS_N, ty = threadIdx.x / Tl::THREADS_N;
    A* out = ws + (atomic ? 0 : (cl::index_t)split * s.k * jtot);
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int kk = kk0 + Tl::row_of(ty, i);
        if (kk >= s.k_per_group) break;
        A* row = out + (cl::index_t)(g * s.k_per_group + kk) * jtot;
#pragma unroll
        for (int jn = 0; jn < TN; ++jn) {
            const int j = j0 + Tl::col_of(tx, jn);
            if (j >= jtot) continue;
            if (atomic)
                atomicAdd(row + j, acc[i][jn]);
            else
                row[j] = acc[i][jn];
        }
    }
}

__global__ void __launch_bounds__(256) zero_f32(float* __restrict__ ws, long long count) {
    for (cl::index_t i = cl::global_thread_id(); i < count; i += cl::grid_stride()) ws[i] = 0.0f;
}

__global__ void __launch_bounds__(256) zero_f64(double* __restrict__ ws, long long count) {
    for (cl::index_t i = cl::global_thread_id(); i < count; i += cl::grid_stride()) ws[i] = 0.0;
}

// Bias partials: split z = blockIdx.y covers m in [z*chunk, (z+1)*chunk) of the N*P*Q
// positions and writes ws[z][k] (acc_t<T>); bwd_filter_reduce adds the splits in order.
template <typename T>
__global__ void __launch_bounds__(bwf::kThreads) bwd_bias_nchw(const T* __restrict__ dy,
                                                               cl::acc_t<T>* __restrict__ ws,
                                                               int k,
                                                               long long npq, long long pq,
                                                               long long chunk) {
    typedef cl::acc_t<T> A;
    __shared__ A red[bwf::kThreads];
    const cl::index_t m0 = blockIdx.y * chunk, m1 = m0 + chunk < npq ? m0 + chunk : npq;
    for (int ch = blockIdx.x; ch < k; ch += gridDim.x) {  // uniform per block
        A acc = 0;
        // element m = img * pq + pix of channel ch (coalesced in pq): (img, pix) and the
        // offset advance by additions (a carry when pix wraps), no division per element
        cl::index_t pix, pix_step;
        const cl::index_t img = cl::div_mod(m0 + threadIdx.x, pq, pix);
        const cl::index_t img_step = cl::div_mod(bwf::kThreads, pq, pix_step);
        const cl::index_t plane = (cl::index_t)k * pq;  // one image of dy
        const cl::index_t off_step = img_step * plane + pix_step;
        cl::index_t off = img * plane + (cl::index_t)ch * pq + pix;
        for (cl::index_t m = m0 + threadIdx.x; m < m1; m += bwf::kThreads) {
            acc += cl::to_acc(dy[off]);
            off += off_step;
            pix += pix_step;
            if (pix >= pq) {
                pix -= pq;
                off += plane - pq;
            }
        }
        const A sum = bwf::block_sum(acc, red);
        if (threadIdx.x == 0) ws[(cl::index_t)blockIdx.y * k + ch] = sum;
        __syncthreads();
    }
}

template <typename T>
__global__ void __launch_bounds__(256) bwd_bias_nhwc(const T* __restrict__ dy,
                                                     cl::acc_t<T>* __restrict__ ws, int k,
                                                     long long npq, long long chunk) {
    typedef cl::acc_t<T> A;
    __shared__ A red[8][32];
    const int ch = blockIdx.x * 32 + threadIdx.x;  // blockDim (32, 8): coalesced along K
    const cl::index_t m0 = blockIdx.y * chunk, m1 = m0 + chunk < npq ? m0 + chunk : npq;
    A acc = 0;
    if (ch < k)
        for (cl::index_t m = m0 + threadIdx.y; m < m1; m += 8) acc += cl::to_acc(dy[m * k + ch]);
    red[threadIdx.y][threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && ch < k) {
        A v = 0;
        for (int i = 0; i < 8; ++i) v += red[i][threadIdx.x];
        ws[(cl::index_t)blockIdx.y * k + ch] = v;
    }
}
