// Convolution forward as an implicit GEMM: no im2col buffer, the A operand is gathered
// from x while it is loaded into shared memory.
//
// GEMM view, per group g (grid.y walks groups x N-tiles, grid.x M-tiles):
//   M  = N * P * Q          rows: output pixels (img, p, q)
//   Ng = K / groups          columns: output channels of the group
//   Kg = C / groups * R * S  reduction: taps (c, r, s), in the filter's memory order:
//                            NCHW/KCRS: kk = (c * R + r) * S + s
//                            NHWC/KRSC: kk = (r * S + s) * Cg + c
//   A[m][kk] = x[img, g*Cg + c, p*u - pad_h + r*dil_h, q*v - pad_w + s*dil_w] (0 outside)
//   B[kk][n] = w[g*Ng + n][kk]
// Tiles, register blocking and the cp.async pipeline: conv/gemm_tiles.cuh.
//
// Kernels (T = float | __half | __nv_bfloat16 | double; accumulation in cl::acc_t<T>: fp32,
// fp64 for double; fused epilogue of conv_common.cuh for every output):
//   implicit_gemm<T, NHWC, BM, BN, BK, TM, TN, STAGES>          taps (c, r, s) from an
//                                                       incremental iterator: each thread
//                                                       loads one kk column per slice and
//                                                       advances it by BK with adds and
//                                                       wraps (no division in the loop)
//   implicit_precomp_gemm<T, NHWC, BM, BN, BK, TM, TN, STAGES>  taps read from a table in
//                                                       the workspace (cuDNN's
//                                                       IMPLICIT_PRECOMP_GEMM), one int4 per
//                                                       thread and slice, fetched a slice
//                                                       ahead
//   implicit_gemm_taps<NHWC>                            fills that table: Kg int4
//                                                       {offset, dh, dw, 0}
//   implicit_gemm_3d, implicit_precomp_gemm_3d, implicit_gemm_taps_3d
//                                                       3-D (NCDHW/KCTRS, NDHWC/KTRSC):
//                                                       rows and taps carry the depth in
//                                                       their 4th int (d0, dd), one more
//                                                       bounds check per element; taps
//                                                       decoded per slice with divisions
//                                                       (no table) or from the table.
//                                                       Separate kernels: the 2-D ones
//                                                       keep their integer work.
// Loads: A is a gather (an element-sized cp.async per element, zero-filled in the padding);
// B rows are filters, contiguous along kk (element cp.async, k-fastest). The output rows' pixel
// decode (img, h0, w0) is done once per block into shared memory.
//
// Defines: none; every parameter is a template argument. One module per (dtype, tile)
// holds both layouts (cudnnlite/solvers/conv/implicit_gemm.py).
// Index limits: x, w and y below 2^31 elements each (32-bit offsets).
#include "conv/gemm_tiles.cuh"


namespace igemm {

constexpr int kFarAway = -(1 << 29);  // an h0 that no tap brings inside the image

// Tap kk of a group's filter: {offset from the pixel (d0, h0, w0) of the group's channel 0,
// dh, dw, dd} (dd = 0 unless D3).
template <bool NHWC, bool D3 = false>
__device__ __forceinline__ int4 tap_of(const ConvShape& s, int c, int r, int t, int td = 0) {
    const int dh = r * s.dil_h, dw = t * s.dil_w, dd = D3 ? td * s.dil_d : 0;
    if (D3) {
        const int off = NHWC ? ((dd * s.h + dh) * s.w + dw) * s.c + c
                             : ((c * s.d + dd) * s.h + dh) * s.w + dw;
        return make_int4(off, dh, dw, dd);
    }
    const int off = NHWC ? (dh * s.w + dw) * s.c + c : (c * s.h + dh) * s.w + dw;
    return make_int4(off, dh, dw, 0);
}

template <bool NHWC, bool D3 = false>
__device__ __forceinline__ int4 compute_tap(const ConvShape& s, int kk) {
    int c, trs;
    const int rs_taps = s.r * s.s, taps = rs_taps * (D3 ? s.t : 1);
    if (NHWC) {
        trs = kk / s.c_per_group;
        c = kk - trs * s.c_per_group;
    } else {
        c = kk / taps;
        trs = kk - c * taps;
    }
    int td = 0, rs = trs;
    if (D3) td = trs / rs_taps, rs = trs - td * rs_taps;
    const int r = rs / s.s;
    return tap_of<NHWC, D3>(s, c, r, rs - r * s.s, td);
}

// The tile's output pixels: rows[i] = {x offset of (img, d0, h0, w0, group channel 0), h0,
// w0, d0} of GEMM row m0 + i (h0 = kFarAway past the last row; d0 = 0 unless D3).
// Divisions here, once per block.
template <bool NHWC, bool D3>
__device__ __forceinline__ void decode_rows(int4* rows, int bm, const ConvShape& s, int m0,
                                            int g) {
    const int pq = s.p * s.q, opq = pq * (D3 ? s.o : 1), nrows = s.n * opq;
    for (int i = threadIdx.x; i < bm; i += blockDim.x) {
        const int m = m0 + i;
        int4 r = make_int4(0, kFarAway, kFarAway, 0);
        if (m < nrows) {
            const int img = m / opq;
            int rem = m - img * opq, o = 0;
            if (D3) o = rem / pq, rem -= o * pq;
            const int p = rem / s.q, q = rem - p * s.q;
            r.y = p * s.stride_h - s.pad_h;
            r.z = q * s.stride_w - s.pad_w;
            const int c0 = g * s.c_per_group;
            if (D3) {
                r.w = o * s.stride_d - s.pad_d;
                r.x = NHWC ? (((img * s.d + r.w) * s.h + r.y) * s.w + r.z) * s.c + c0
                           : (((img * s.c + c0) * s.d + r.w) * s.h + r.y) * s.w + r.z;
            } else {
                r.x = NHWC ? ((img * s.h + r.y) * s.w + r.z) * s.c + c0
                           : ((img * s.c + c0) * s.h + r.y) * s.w + r.z;
            }
        }
        rows[i] = r;
    }
}

// A[m][kk] for the block's BM rows: each thread one kk column (k-fastest layout of
// gemm_tiles.cuh) and the rows row(j); its tap advances by BK per slice.
// D3: the depth check too; without a table it decodes each tap with divisions (no
// four-level iterator: 3-D layers have long reductions, the decode is per slice).
template <typename T, class Tl, bool NHWC, bool PRECOMP, bool D3>
struct GatherLoader {
    using L = gemm::KFast<Tl, Tl::BM>;
    using Layout = L;
    static constexpr int VECS = L::VECS, VEC = 1;

    // KEEP: this thread's rows (decode_rows: x offset, h0, w0) read from shared memory once
    // and kept in registers for the whole loop, instead of a shared read per element and
    // slice (an LDS each, and ptxas pads each LDS-fed LDGSTS with three predicated-off
    // LDS). Static sm_90 main loop, fp32 128x64: 728 -> 692 instructions for 512 FFMA (95
    // -> 127 registers, still two blocks per SM); 128x128: 1272 -> 1249. Only there: the
    // 24 registers cost the 64x64 tile a block per SM, the 16-bit and fp64 tiles (staged
    // through registers) spills, and 3-D rows carry a fourth component.
    static constexpr bool KEEP = !D3 && sizeof(T) == 4 && Tl::TM * Tl::TN >= 32;
    const T* __restrict__ x;
    const int4* rows;                // shared, decode_rows
    int rx[KEEP ? VECS : 1], ry[KEEP ? VECS : 1], rz[KEEP ? VECS : 1];
    const int4* __restrict__ taps;   // PRECOMP: the table
    const ConvShape& s;
    int kk, ktot;
    int4 tap, ahead;                 // this slice's tap (dh = kFarAway past ktot); PRECOMP: the next
    gemm::Radix3 it;                 // !PRECOMP: NCHW (c, r, s), NHWC (r, s, c) of kk
    gemm::Offsets<L> offset;

    __device__ __forceinline__ int4 table(int k) const {
        return k < ktot ? taps[k] : make_int4(0, kFarAway, 0, 0);
    }
    __device__ __forceinline__ int4 iterated() const {
        if (kk >= ktot) return make_int4(0, kFarAway, 0, 0);
        if (D3) return compute_tap<NHWC, true>(s, kk);
        return NHWC ? tap_of<true>(s, it.lo, it.hi, it.mid) : tap_of<false>(s, it.hi, it.mid, it.lo);
    }

    __device__ __forceinline__ GatherLoader(const T* x_, const int4* rows_, const int4* taps_,
                                            const ConvShape& s_)
        : x(x_), rows(rows_), taps(taps_), s(s_), kk(L::k()),
          ktot(s_.c_per_group * s_.r * s_.s * (D3 ? s_.t : 1)) {
        if constexpr (KEEP) {
#pragma unroll
            for (int j = 0; j < VECS; ++j) {
                const int4 r = rows[L::row(j)];
                rx[j] = r.x, ry[j] = r.y, rz[j] = r.z;
            }
        }
        if constexpr (PRECOMP) {
            tap = table(kk);
            ahead = table(kk + Tl::BK);
        } else if constexpr (D3) {
            tap = iterated();
        } else {
            if (NHWC) it.init(kk, Tl::BK, s.c_per_group, s.s);
            else it.init(kk, Tl::BK, s.s, s.r);
            tap = iterated();
        }
    }

    template <class Sink>
    __device__ __forceinline__ void next(Sink& sink) {
#pragma unroll
        for (int j = 0; j < VECS; ++j) {
            const int4 r = KEEP ? make_int4(rx[j], ry[j], rz[j], 0) : rows[L::row(j)];
            const int hh = r.y + tap.y, ww = r.z + tap.z;
            bool ok = (unsigned)hh < (unsigned)s.h && (unsigned)ww < (unsigned)s.w;
            if (D3) ok = ok && (unsigned)(r.w + tap.w) < (unsigned)s.d;
            sink.template put<1>(j, 0, x + (r.x + tap.x), ok);
        }
        kk += Tl::BK;
        if constexpr (PRECOMP) {
            tap = ahead;
            ahead = table(kk + Tl::BK);  // in flight during a whole slice
        } else {
            if (!D3) it.advance();
            tap = iterated();
        }
    }
};

template <typename T, bool NHWC, bool PRECOMP, bool D3, class Tl>
__device__ __forceinline__ void body(const T* __restrict__ x, const T* __restrict__ w, T* y,
                                     const T* z, const T* bias, const int4* taps,
                                     const ConvShape& s, const EpilogueFor<T>& e) {
    __shared__ __align__(16) typename gemm::Smem<T, Tl>::E smem[gemm::Smem<T, Tl>::ELEMS];
    __shared__ int4 rows[Tl::BM];

    const int tiles_n = (s.k_per_group + Tl::BN - 1) / Tl::BN;
    const int g = blockIdx.y / tiles_n;
    const int n0 = (blockIdx.y - g * tiles_n) * Tl::BN;
    const int m0 = blockIdx.x * Tl::BM;
    const int ktot = s.c_per_group * s.r * s.s * (D3 ? s.t : 1);
    decode_rows<NHWC, D3>(rows, Tl::BM, s, m0, g);
    __syncthreads();

    GatherLoader<T, Tl, NHWC, PRECOMP, D3> la(x, rows, taps, s);
    gemm::ColLoader<T, Tl, Tl::BN> lb(w + (cl::index_t)(g * s.k_per_group + n0) * ktot, ktot,
                                      ktot, s.k_per_group - n0);
    cl::acc_t<T> acc[Tl::TM][Tl::TN];
    gemm::run<T, Tl>((ktot + Tl::BK - 1) / Tl::BK, la, lb, smem, acc);

    const int tx = threadIdx.x % Tl::THREADS_N, ty = threadIdx.x / Tl::THREADS_N;
    const int pq = s.p * s.q, opq = pq * (D3 ? s.o : 1), nrows = s.n * opq;
#pragma unroll
    for (int i = 0; i < Tl::TM; ++i) {
        const int m = m0 + Tl::row_of(ty, i);
        if (m >= nrows) continue;
        const int img = m / opq;
        int rem = m - img * opq, o = 0;
        if (D3) o = rem / pq, rem -= o * pq;
        const int p = rem / s.q, q = rem - p * s.q;
#pragma unroll
        for (int j = 0; j < Tl::TN; ++j) {
            const int n = n0 + Tl::col_of(tx, j);
            if (n >= s.k_per_group) continue;
            const int k = g * s.k_per_group + n;
            conv::store_output(y, z, bias, e, conv::y_off<NHWC, D3>(s, img, k, o, p, q), k,
                               acc[i][j]);
        }
    }
}

}  // namespace igemm

#define IGEMM_TILE gemm::Tile<BM, BN, BK, TM, TN, STAGES>

namespace igemm {
// Below sm_80 an SM has 64 KB of shared memory: one block of the fp64 128x64 tile (40 KB)
// per SM at most, so asking for two there only capped the registers at 128 (the 3-D
// precomp kernel spilled on sm_75); double asks for one block below sm_80.
template <typename T, class Tile>
constexpr int tile_min_blocks() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
    return sizeof(T) == 8 ? 1 : Tile::MIN_BLOCKS;
#else
    return Tile::MIN_BLOCKS;
#endif
}

// The 16-bit NHWC kernel stages its loads through registers and its 128-register budget
// for two 256-thread blocks per SM spilled 56 bytes (ptxas, sm_90): it asks for one block
// (8 warps per SM, still the occupancy target) and keeps its registers instead.
template <typename T, bool NHWC, class Tile>
constexpr int min_blocks() {
    return sizeof(T) == 2 && NHWC && Tile::THREADS >= 256 ? 1 : tile_min_blocks<T, Tile>();
}
}  // namespace igemm

template <typename T, bool NHWC, int BM, int BN, int BK, int TM, int TN, int STAGES>
__global__ void __launch_bounds__(IGEMM_TILE::THREADS, igemm::min_blocks<T, NHWC, IGEMM_TILE>())
    implicit_gemm(
    // pointers: z may be y and bias may be x when absent (e.has_z / e.has_bias say)
    const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z, const T* bias,
    // sizes, epilogue
    ConvShape s, EpilogueFor<T> e) {
    igemm::body<T, NHWC, false, false, IGEMM_TILE>(x, w, y, z, bias, nullptr, s, e);
}

template <typename T, bool NHWC, int BM, int BN, int BK, int TM, int TN, int STAGES>
__global__ void __launch_bounds__(IGEMM_TILE::THREADS, igemm::min_blocks<T, NHWC, IGEMM_TILE>())
    implicit_gemm_3d(const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z,
                     const T* bias, ConvShape s, EpilogueFor<T> e) {
    igemm::body<T, NHWC, false, true, IGEMM_TILE>(x, w, y, z, bias, nullptr, s, e);
}

template <typename T, bool NHWC, int BM, int BN, int BK, int TM, int TN, int STAGES>
__global__ void __launch_bounds__(IGEMM_TILE::THREADS, igemm::tile_min_blocks<T, IGEMM_TILE>())
    implicit_precomp_gemm(
        // pointers, then the tap table (implicit_gemm_taps<NHWC> fills it)
        const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z, const T* bias,
        const int4* __restrict__ taps,
        // sizes, epilogue
        ConvShape s, EpilogueFor<T> e) {
    igemm::body<T, NHWC, true, false, IGEMM_TILE>(x, w, y, z, bias, taps, s, e);
}

template <typename T, bool NHWC, int BM, int BN, int BK, int TM, int TN, int STAGES>
__global__ void __launch_bounds__(IGEMM_TILE::THREADS, igemm::tile_min_blocks<T, IGEMM_TILE>())
    implicit_precomp_gemm_3d(const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z,
                             const T* bias, const int4* __restrict__ taps, ConvShape s,
                             EpilogueFor<T> e) {
    igemm::body<T, NHWC, true, true, IGEMM_TILE>(x, w, y, z, bias, taps, s, e);
}

#undef IGEMM_TILE

template <bool NHWC>
__global__ void __launch_bounds__(256) implicit_gemm_taps(int4* taps, ConvShape s) {
    const int ktot = s.c_per_group * s.r * s.s;
    for (int kk = blockIdx.x * blockDim.x + threadIdx.x; kk < ktot; kk += gridDim.x * blockDim.x)
        taps[kk] = igemm::compute_tap<NHWC>(s, kk);
}

template <bool NHWC>
__global__ void __launch_bounds__(256) implicit_gemm_taps_3d(int4* taps, ConvShape s) {
    const int ktot = s.c_per_group * s.r * s.s * s.t;
    for (int kk = blockIdx.x * blockDim.x + threadIdx.x; kk < ktot; kk += gridDim.x * blockDim.x)
        taps[kk] = igemm::compute_tap<NHWC, true>(s, kk);
}
