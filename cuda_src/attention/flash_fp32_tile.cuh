// flash_fp32_tile.cuh — the CUDA-core (FFMA / DFMA) building blocks of the CUDA-core
// attention kernels (flash_fp32.cu: forward and backward; flash_decode.cu: split-KV
// decoding), templated on the accumulation type A: float (fp32 / fp16 / bf16 storage) or
// double (double storage: every product, sum, exp2 and log2 in double).
//
// A block is 128 threads seen as a 16 x 8 grid: ty = tid / 8 (a "thread row"), tx = tid % 8
// (the 8 lanes of one thread row are consecutive lanes of one warp, so row reductions are
// three xor-shuffles). Tiles live in shared memory as A, row-major, the head dim padded
// to HD (zeros past d / dv) with a row stride of HD + 4 elements. Ownership of a thread:
//   rows   row(i) = ty + 16 i                         (rows of S, O, dK, ...)
//   keys   key(j) = tx + 8 j                          (columns of S: the 8 lanes of a
//          128-bit shared-load phase read 8 rows at stride HD + 4 words: 8 distinct bank
//          quads, no conflict)
//   cols   col(c) = (c / 4) * 32 + tx * 4 + c % 4     (columns of O: float4 chunks, the 8
//          lanes read 128 contiguous bytes)
// Tiles enter shared memory converted to A whatever the storage dtype (a run-time
// argument: kF32 / kF16 / kBF16 for A = float; kF64 is the only one of A = double), so the
// FMA loops are the same for every dtype.
// dot_tile is the S = A B^T micro-GEMM over the head dim (RM + RN 4-element loads per 4 RM
// RN FMA), acc_tile the O += P V micro-GEMM over keys (RM + CN 4-element loads per 4 RM CN
// FMA). A 4-element pack is a float4, or two double2 for double (dbl4).
#pragma once

#include "attention/attention_common.cuh"

namespace sdpa_fp32 {

constexpr int kThreads = 128;
constexpr int kTR = 16;  // thread rows
constexpr int kTC = 8;   // threads along a row

__device__ __forceinline__ int col_of(int c, int tx) { return (c >> 2) * 32 + tx * 4 + (c & 3); }

// Storage types, a run-time argument: the storage type only matters where tiles enter
// (global -> shared, converted to fp32) and leave; the FFMA loops never see it, so one
// kernel serves the three dtypes (a third of the NVRTC work of a template parameter).
constexpr int kF32 = 0, kF16 = 1, kBF16 = 2;
constexpr int kF64 = 3;  // the storage type of the A = double kernels (and only it)

__device__ __forceinline__ int elem_bytes(int dtype) { return dtype == kF32 ? 4 : 2; }

__device__ __forceinline__ float load1(const void* base, long long off, int dtype) {
    if (dtype == kF32) return static_cast<const float*>(base)[off];
    if (dtype == kF16) return cl::to_float(static_cast<const __half*>(base)[off]);
    return cl::to_float(static_cast<const __nv_bfloat16*>(base)[off]);
}

template <typename T>
__device__ __forceinline__ float4 unpack4(uint2 u) {
    T t[4];
    memcpy(t, &u, 8);
    return make_float4(cl::to_float(t[0]), cl::to_float(t[1]), cl::to_float(t[2]),
                       cl::to_float(t[3]));
}

// Four consecutive elements at base + off (aligned to four elements) as floats.
__device__ __forceinline__ float4 load4(const void* base, long long off, int dtype) {
    if (dtype == kF32)
        return reinterpret_cast<const float4*>(static_cast<const float*>(base) + off)[0];
    const uint2 u = *reinterpret_cast<const uint2*>(static_cast<const unsigned short*>(base) + off);
    return dtype == kF16 ? unpack4<__half>(u) : unpack4<__nv_bfloat16>(u);
}

__device__ __forceinline__ void store1(void* base, long long off, int dtype, float v) {
    if (dtype == kF32) static_cast<float*>(base)[off] = v;
    else if (dtype == kF16) static_cast<__half*>(base)[off] = cl::from_float<__half>(v);
    else static_cast<__nv_bfloat16*>(base)[off] = cl::from_float<__nv_bfloat16>(v);
}

template <typename T>
__device__ __forceinline__ uint2 pack4(float4 v) {
    const T t[4] = {cl::from_float<T>(v.x), cl::from_float<T>(v.y), cl::from_float<T>(v.z),
                    cl::from_float<T>(v.w)};
    uint2 u;
    memcpy(&u, t, 8);
    return u;
}

__device__ __forceinline__ void store4(void* base, long long off, int dtype, float4 v) {
    if (dtype == kF32) {
        reinterpret_cast<float4*>(static_cast<float*>(base) + off)[0] = v;
        return;
    }
    *reinterpret_cast<uint2*>(static_cast<unsigned short*>(base) + off) =
        dtype == kF16 ? pack4<__half>(v) : pack4<__nv_bfloat16>(v);
}

// Four doubles as two 16-byte halves (double4's alignment differs between toolkits).
struct dbl4 {
    double x, y, z, w;
};

// The 4-element pack of A, and a pack of four values.
template <typename A> struct Pack4;
template <> struct Pack4<float> { typedef float4 type; };
template <> struct Pack4<double> { typedef dbl4 type; };
template <typename A> using pack4_t = typename Pack4<A>::type;

__device__ __forceinline__ float4 make4(float a, float b, float c, float d) {
    return make_float4(a, b, c, d);
}
__device__ __forceinline__ dbl4 make4(double a, double b, double c, double d) {
    return dbl4{a, b, c, d};
}

// Four doubles at p (16-byte aligned) and back.
__device__ __forceinline__ dbl4 ld_dbl4(const double* p) {
    const double2 lo = reinterpret_cast<const double2*>(p)[0];
    const double2 hi = reinterpret_cast<const double2*>(p)[1];
    return dbl4{lo.x, lo.y, hi.x, hi.y};
}
__device__ __forceinline__ void st_dbl4(double* p, dbl4 v) {
    reinterpret_cast<double2*>(p)[0] = double2{v.x, v.y};
    reinterpret_cast<double2*>(p)[1] = double2{v.z, v.w};
}

// Shared-memory 4-element access.
__device__ __forceinline__ float4 lds4(const float* p) {
    return *reinterpret_cast<const float4*>(p);
}
__device__ __forceinline__ void sts4(float* p, float4 v) { *reinterpret_cast<float4*>(p) = v; }
__device__ __forceinline__ dbl4 lds4(const double* p) { return ld_dbl4(p); }
__device__ __forceinline__ void sts4(double* p, dbl4 v) { st_dbl4(p, v); }

// Whether rows of `ncols` elements at base + off + r * ss allow 4-element vector accesses.
__device__ __forceinline__ bool vec_ok(const void* base, long long off, long long ss, int ncols,
                                       int dtype) {
    const int e = elem_bytes(dtype);
    return (ncols & 3) == 0 && (ss & 3) == 0 &&
           ((unsigned long long)base + (unsigned long long)(off * e)) % (4 * e) == 0;
}

// Global-memory access of the kernels computing in A: the functions above for float, and
// double storage (kF64) for double, whose vector accesses are two 16-byte halves (so rows
// need 16-byte alignment, not 32).
template <typename A> struct Io;
template <> struct Io<float> {
    static __device__ __forceinline__ float load1(const void* base, long long off, int dtype) {
        return sdpa_fp32::load1(base, off, dtype);
    }
    static __device__ __forceinline__ float4 load4(const void* base, long long off, int dtype) {
        return sdpa_fp32::load4(base, off, dtype);
    }
    static __device__ __forceinline__ void store1(void* base, long long off, int dtype, float v) {
        sdpa_fp32::store1(base, off, dtype, v);
    }
    static __device__ __forceinline__ void store4(void* base, long long off, int dtype,
                                                  float4 v) {
        sdpa_fp32::store4(base, off, dtype, v);
    }
    static __device__ __forceinline__ bool vec_ok(const void* base, long long off, long long ss,
                                                  int ncols, int dtype) {
        return sdpa_fp32::vec_ok(base, off, ss, ncols, dtype);
    }
};
template <> struct Io<double> {
    static __device__ __forceinline__ double load1(const void* base, long long off, int) {
        return static_cast<const double*>(base)[off];
    }
    static __device__ __forceinline__ dbl4 load4(const void* base, long long off, int) {
        return ld_dbl4(static_cast<const double*>(base) + off);
    }
    static __device__ __forceinline__ void store1(void* base, long long off, int, double v) {
        static_cast<double*>(base)[off] = v;
    }
    static __device__ __forceinline__ void store4(void* base, long long off, int, dbl4 v) {
        st_dbl4(static_cast<double*>(base) + off, v);
    }
    static __device__ __forceinline__ bool vec_ok(const void* base, long long off, long long ss,
                                                  int ncols, int) {
        return (ncols & 3) == 0 && (ss & 1) == 0 &&
               ((unsigned long long)base + (unsigned long long)(off * 8)) % 16 == 0;
    }
};

// Rows of a tensor at a uniform stride: element offset off + r * ss.
struct Strided {
    long long off, ss;
    __device__ __forceinline__ long long operator()(int r) const { return off + r * ss; }
};

// dst[r][0..HD) (row stride LD floats) = rows r < nrows (element offsets row_off(r) from
// base), columns < ncols; zeros elsewhere (padding must be finite: it meets P = 0 or q = 0).
template <int ROWS, int HD, int LD, class RowOff, typename A>
__device__ __forceinline__ void load_tile(A* dst, const void* base, int dtype, int nrows,
                                          int ncols, bool vec, RowOff row_off) {
    constexpr int C4 = HD / 4;
    for (int idx = threadIdx.x; idx < ROWS * C4; idx += kThreads) {
        const int r = idx / C4, c = (idx % C4) * 4;
        pack4_t<A> v = make4(A(0), A(0), A(0), A(0));
        if (r < nrows && c < ncols) {
            const long long off = row_off(r) + c;
            if (vec) {
                v = Io<A>::load4(base, off, dtype);
            } else {
                v.x = Io<A>::load1(base, off, dtype);
                if (c + 1 < ncols) v.y = Io<A>::load1(base, off + 1, dtype);
                if (c + 2 < ncols) v.z = Io<A>::load1(base, off + 2, dtype);
                if (c + 3 < ncols) v.w = Io<A>::load1(base, off + 3, dtype);
            }
        }
        sts4(dst + r * LD + c, v);
    }
}

// Writes RM rows x CN columns of acc * mul: rows row0 + row(i) below nrows, columns col(c)
// below ncols, at element offsets off + r * ss of base.
template <int RM, int CN, typename A>
__device__ __forceinline__ void store_rows(void* base, int dtype, long long off, long long ss,
                                           int row0, int nrows, int ncols,
                                           const A (&acc)[RM][CN], A mul, int ty, int tx) {
    const bool vec = Io<A>::vec_ok(base, off, ss, ncols, dtype);
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        const int r = row0 + ty + kTR * i;
        if (r >= nrows) continue;
        const long long row = off + r * ss;
#pragma unroll
        for (int c = 0; c < CN; c += 4) {
            const int col = col_of(c, tx);
            const pack4_t<A> val = make4(acc[i][c] * mul, acc[i][c + 1] * mul,
                                         acc[i][c + 2] * mul, acc[i][c + 3] * mul);
            if (vec) {
                if (col < ncols) Io<A>::store4(base, row + col, dtype, val);
            } else {
                if (col < ncols) Io<A>::store1(base, row + col, dtype, val.x);
                if (col + 1 < ncols) Io<A>::store1(base, row + col + 1, dtype, val.y);
                if (col + 2 < ncols) Io<A>::store1(base, row + col + 2, dtype, val.z);
                if (col + 3 < ncols) Io<A>::store1(base, row + col + 3, dtype, val.w);
            }
        }
    }
}

// acc[i][j] = sum_d A[row(i)][d] * B[key(j)][d], d < HD (A, B row-major, strides LDA, LDB).
template <int RM, int RN, int HD, int LDA, int LDB, typename T>
__device__ __forceinline__ void dot_tile(T (&acc)[RM][RN], const T* A, const T* B, int ty,
                                         int tx) {
#pragma unroll
    for (int i = 0; i < RM; ++i)
#pragma unroll
        for (int j = 0; j < RN; ++j) acc[i][j] = T(0);
    const T* a0 = A + ty * LDA;
    const T* b0 = B + tx * LDB;
#pragma unroll 2
    for (int d = 0; d < HD; d += 4) {
        pack4_t<T> a[RM], b[RN];
#pragma unroll
        for (int i = 0; i < RM; ++i) a[i] = lds4(a0 + i * kTR * LDA + d);
#pragma unroll
        for (int j = 0; j < RN; ++j) b[j] = lds4(b0 + j * kTC * LDB + d);
#pragma unroll
        for (int i = 0; i < RM; ++i)
#pragma unroll
            for (int j = 0; j < RN; ++j) {
                acc[i][j] = cl::math::fma(a[i].x, b[j].x, acc[i][j]);
                acc[i][j] = cl::math::fma(a[i].y, b[j].y, acc[i][j]);
                acc[i][j] = cl::math::fma(a[i].z, b[j].z, acc[i][j]);
                acc[i][j] = cl::math::fma(a[i].w, b[j].w, acc[i][j]);
            }
    }
}

// acc[i][c] += sum_k P[row(i)][k] * V[k][col(c)], k < K (P stride LDP, V stride LDV).
template <int RM, int CN, int K, int LDP, int LDV, typename A>
__device__ __forceinline__ void acc_tile(A (&acc)[RM][CN], const A* P, const A* V, int ty,
                                         int tx) {
    static_assert(CN % 4 == 0, "O columns come in 4-element chunks");
    // V packs live at once: all CN / 4 for float; at most 4 (32 registers) for double,
    // whose accumulators take twice the registers (head dim 256 would spill otherwise).
    constexpr int G = sizeof(A) == 8 && CN / 4 > 4 ? 4 : CN / 4;
    const A* p0 = P + ty * LDP;
    const A* v0 = V + tx * 4;
#pragma unroll 1
    for (int k = 0; k < K; k += 4) {
        pack4_t<A> pv[RM];
#pragma unroll
        for (int i = 0; i < RM; ++i) pv[i] = lds4(p0 + i * kTR * LDP + k);
#pragma unroll
        for (int kk = 0; kk < 4; ++kk) {
#pragma unroll
            for (int g0 = 0; g0 < CN / 4; g0 += G) {
                pack4_t<A> v[G];
#pragma unroll
                for (int c4 = 0; c4 < G; ++c4)
                    v[c4] = lds4(v0 + (k + kk) * LDV + (g0 + c4) * 32);
#pragma unroll
                for (int i = 0; i < RM; ++i) {
                    const A pk =
                        kk == 0 ? pv[i].x : kk == 1 ? pv[i].y : kk == 2 ? pv[i].z : pv[i].w;
#pragma unroll
                    for (int c4 = 0; c4 < G; ++c4) {
                        const int c = (g0 + c4) * 4;
                        acc[i][c + 0] = cl::math::fma(pk, v[c4].x, acc[i][c + 0]);
                        acc[i][c + 1] = cl::math::fma(pk, v[c4].y, acc[i][c + 1]);
                        acc[i][c + 2] = cl::math::fma(pk, v[c4].z, acc[i][c + 2]);
                        acc[i][c + 3] = cl::math::fma(pk, v[c4].w, acc[i][c + 3]);
                    }
                }
            }
        }
    }
}

// The dropout keep factor, out of line: a Philox draw inlined at every unrolled element
// would multiply the compile time (NVRTC) for a rarely used path.
__device__ __noinline__ float drop_factor(const SdpaParams& p, int bi, int h, int i, int j) {
    return sdpa::dropout_factor(p, bi, h, i, j);
}
__device__ __noinline__ double drop_factor(const SdpaParamsT<double>& p, int bi, int h, int i,
                                           int j) {
    return sdpa::dropout_factor(p, bi, h, i, j);
}

// Dropout keep bits of one query row's keys key0 + kTC * j (j < N; key0 = the tile's first
// key + tx), bit j for key j; e_row = the row's element number at key 0. Lanes tx and its
// quad (tx & ~3 ..) hold the four keys of one Philox group when e_row and the tile start
// are multiples of 4 (skv % 4 == 0, `aligned`): lane q = tx & 3 draws the groups of keys j
// = q, q + 4, .. and four shuffles give each lane its word of every group (N / 4 draws
// per lane instead of N). Otherwise a draw per key. Every lane of the warp calls it (a
// full-mask shuffle); out of line, as drop_factor.
template <int N, typename A>
__device__ __noinline__ unsigned drop_row(const SdpaParamsT<A>& p, unsigned long long e_row,
                                          int key0, int tx, bool aligned) {
    static_assert(N <= 32, "one bit per key");
    const unsigned long long offset = sdpa::stream_offset(p);
    unsigned bits = 0;
    if (aligned) {
        const int q = tx & 3, lane = threadIdx.x & 31;
        // mine: bit 4 m + w = word w of the group of key j = q + 4 m
        const unsigned long long e = e_row + (key0 - q);
        unsigned mine = 0;
        for (int j = q, m = 0; j < N; j += 4, ++m) {
            const cl::Philox4 w = cl::philox_group(p.seed, offset, (e + kTC * j) >> 2);
            mine |= sdpa::keep_nibble(p, w) << (4 * m);
        }
#pragma unroll
        for (int o = 0; o < 4; ++o) {
            const unsigned from = __shfl_sync(0xffffffffu, mine, (lane & ~3) | o);
#pragma unroll
            for (int j = o; j < N; j += 4) bits |= ((from >> (4 * (j >> 2) + q)) & 1u) << j;
        }
    } else {
        for (int j = 0; j < N; ++j) {
            bits |= (sdpa::dropout_keeps(p, offset, e_row + key0 + kTC * j) ? 1u : 0u) << j;
        }
    }
    return bits;
}

// Reductions over the 8 lanes of a thread row.
template <typename A>
__device__ __forceinline__ A row_max(A v) {
    v = cl::math::fmax(v, __shfl_xor_sync(0xffffffffu, v, 1));
    v = cl::math::fmax(v, __shfl_xor_sync(0xffffffffu, v, 2));
    return cl::math::fmax(v, __shfl_xor_sync(0xffffffffu, v, 4));
}
template <typename A>
__device__ __forceinline__ A row_sum(A v) {
    v += __shfl_xor_sync(0xffffffffu, v, 1);
    v += __shfl_xor_sync(0xffffffffu, v, 2);
    return v + __shfl_xor_sync(0xffffffffu, v, 4);
}

// The explicit mask at (bi, h, i, j) for a run-time mask kind and dtype: keep, and the
// log2-domain addend. Out of line: a rarely used path, unrolled at every element.
__device__ __noinline__ bool mask_keep(const SdpaParams& p, const void* mask, int mask_kind,
                                       int dtype, int bi, int h, int i, int j, float& add_log2) {
    if (mask_kind == sdpa::kMaskBool)
        return sdpa::mask_at<sdpa::kMaskBool, float>(p, mask, bi, h, i, j).keep;
    sdpa::MaskValue<sdpa::kMaskAdditive, float> m;
    if (dtype == kF32) {
        m = sdpa::mask_at<sdpa::kMaskAdditive, float>(p, mask, bi, h, i, j);
    } else if (dtype == kF16) {
        const auto x = sdpa::mask_at<sdpa::kMaskAdditive, __half>(p, mask, bi, h, i, j);
        m = {x.keep, x.add_log2};
    } else {
        const auto x = sdpa::mask_at<sdpa::kMaskAdditive, __nv_bfloat16>(p, mask, bi, h, i, j);
        m = {x.keep, x.add_log2};
    }
    add_log2 = m.add_log2;
    return m.keep;
}
__device__ __noinline__ bool mask_keep(const SdpaParamsT<double>& p, const void* mask,
                                       int mask_kind, int dtype, int bi, int h, int i, int j,
                                       double& add_log2) {
    if (mask_kind == sdpa::kMaskBool)
        return sdpa::mask_at<sdpa::kMaskBool, double>(p, mask, bi, h, i, j).keep;
    const auto m = sdpa::mask_at<sdpa::kMaskAdditive, double>(p, mask, bi, h, i, j);
    add_log2 = m.add_log2;
    return m.keep;
}

// The explicit mask along one query row: keys key0 + KSTEP * j (j < N) that lie in [lo,
// hi); bit j of the result says the mask keeps key j (0 outside [lo, hi), never read),
// add[astride * j] its log2-domain addend (the caller's own slots of a tile in shared
// memory that it overwrites next: no stack array). Out of line like mask_keep, but one
// call per row and tile: every load issues before the first is used (one memory latency
// per row instead of one per key). The float kernels' (RowMasked); the double ones read
// each element through mask_keep (this call would cost their smallest tile 16 registers,
// a third of its occupancy).
template <int N, int KSTEP, typename A>
__device__ __noinline__ unsigned mask_row(const SdpaParamsT<A>& p, const void* mask, int mask_kind,
                                          int dtype, int bi, int h, int i, int key0, int lo,
                                          int hi, A* add, int astride) {
    const long long base = sdpa::mask_offset(p, bi, h, i, key0), step = KSTEP * p.m_sj;
    bool in[N];
#pragma unroll
    for (int j = 0; j < N; ++j) {
        const int key = key0 + KSTEP * j;
        in[j] = key >= lo && key < hi;
    }
    unsigned bits = 0;
    if (mask_kind == sdpa::kMaskBool) {
        unsigned char raw[N];
#pragma unroll
        for (int j = 0; j < N; ++j)
            raw[j] = in[j] ? static_cast<const unsigned char*>(mask)[base + j * step] : 0;
#pragma unroll
        for (int j = 0; j < N; ++j) {
            bits |= (raw[j] != 0 ? 1u : 0u) << j;
            add[astride * j] = A(0);
        }
        return bits;
    }
    A a[N];
    if (sizeof(A) == 8 || dtype == kF32) {
#pragma unroll
        for (int j = 0; j < N; ++j)
            a[j] = in[j] ? static_cast<const A*>(mask)[base + j * step] : A(0);
    } else {
        unsigned short raw[N];  // a 16-bit additive mask's bits
#pragma unroll
        for (int j = 0; j < N; ++j)
            raw[j] = in[j] ? static_cast<const unsigned short*>(mask)[base + j * step] : 0;
#pragma unroll
        for (int j = 0; j < N; ++j)
            a[j] = dtype == kF16 ? A(__half2float(__ushort_as_half(raw[j])))
                                 : A(__bfloat162float(__ushort_as_bfloat16(raw[j])));
    }
#pragma unroll
    for (int j = 0; j < N; ++j) {
        bits |= (in[j] && a[j] != -INFINITY ? 1u : 0u) << j;  // -inf masks as False would
        add[astride * j] = sdpa::log2_sat(a[j]);
    }
    return bits;
}

template <typename A>
struct RowMasked {
    static constexpr bool value = sizeof(A) == 4;  // mask_row (float) or mask_keep (double)
};

// The key range of a block of query rows [i_first, i_last] (nondecreasing bounds in i):
// [lo, hi) covers every row's keys; a tile [j0, j0 + n) with lo_max <= j0 and j0 + n <= hi_min
// is kept whole by every row.
struct BlockRange {
    int lo, hi, lo_max, hi_min;
};

template <class P>
__device__ __forceinline__ BlockRange block_range(const P& p, sdpa::Lengths L,
                                                  int i_first, int i_last) {
    BlockRange r{0, 0, 0, 0};
    i_last = min(i_last, L.q - 1);
    if (i_last < i_first) return r;  // no row inside the sequence
    const sdpa::KeyRange a = sdpa::key_range(p, L, i_first), b = sdpa::key_range(p, L, i_last);
    r.lo = max(a.lo, 0);
    r.hi = min(b.hi, L.kv);
    r.lo_max = b.lo;
    r.hi_min = a.hi;
    return r;
}

// Online-softmax forward over keys [kv_begin, kv_end) for the BM rows whose Q tile is in Qs.
// Row (thread-row i) has head rh[i], sequence index ri[i] and key range [rlo[i], rhi[i]);
// full_lo/full_hi: tiles inside [full_lo, full_hi) need no per-element range test (callers
// pass an empty interval when an explicit mask or rows past lengths forbid it; dropout is
// applied either way).
// On return o (unnormalized), m (log2 domain, -inf when nothing kept) and l (the undropped
// denominator) per row.
template <int BM, int BN, int HD, typename A = float>
struct FwdTile {
    static constexpr int RM = BM / kTR, RN = BN / kTC, CN = HD / kTC, LD = HD + 4, LDP = BN + 4;
    static constexpr int SMEM_FLOATS = BM * LD + 2 * BN * LD + BM * LDP;
    static_assert(BM % kTR == 0 && BN % kTC == 0 && BN % 4 == 0 && HD % 32 == 0, "tile shape");

    A o[RM][CN];
    A m[RM], l[RM];

    __device__ __forceinline__ void run(const SdpaParamsT<A>& p, A* smem, const void* k,
                                        long long k_off, const void* v, long long v_off,
                                        int dtype, const void* mask, int mask_kind, int bi,
                                        sdpa::Lengths L, const int (&rh)[RM], const int (&ri)[RM],
                                        const int (&rlo)[RM], const int (&rhi)[RM], int kv_begin,
                                        int kv_end, int full_lo, int full_hi) {
        A* Qs = smem;
        A* Ks = Qs + BM * LD;
        A* Vs = Ks + BN * LD;
        A* Ps = Vs + BN * LD;
        const int ty = threadIdx.x / kTC, tx = threadIdx.x % kTC;
        const bool vec_k = Io<A>::vec_ok(k, k_off, p.k_ss, p.d, dtype);
        const bool vec_v = Io<A>::vec_ok(v, v_off, p.v_ss, p.dv, dtype);
        const bool dropout = p.drop_threshold != 0;
#pragma unroll
        for (int i = 0; i < RM; ++i) {
            m[i] = -INFINITY;
            l[i] = A(0);
#pragma unroll
            for (int c = 0; c < CN; ++c) o[i][c] = A(0);
        }
        for (int j0 = kv_begin; j0 < kv_end; j0 += BN) {
            const int nk = min(BN, L.kv - j0);
            __syncthreads();  // the previous tile's readers of Ks, Vs, Ps are done
            load_tile<BN, HD, LD>(Ks, k, dtype, nk, p.d, vec_k,
                                  Strided{k_off + j0 * p.k_ss, p.k_ss});
            load_tile<BN, HD, LD>(Vs, v, dtype, nk, p.dv, vec_v,
                                  Strided{v_off + j0 * p.v_ss, p.v_ss});
            __syncthreads();
            A s[RM][RN];
            dot_tile<RM, RN, HD, LD, LD>(s, Qs, Ks, ty, tx);
            const bool full = j0 >= full_lo && j0 + BN <= full_hi;
#pragma unroll
            for (int i = 0; i < RM; ++i) {
                A mx = -INFINITY;
                // The explicit mask of this row's keys (mask_row), its addends in this
                // thread's slots of the P tile until the probabilities replace them.
                constexpr bool ROW_MASK = RowMasked<A>::value;
                A* prow = Ps + (ty + kTR * i) * LDP + tx;
                unsigned mkeep = ~0u;
                if (ROW_MASK && !full && mask_kind)
                    mkeep = mask_row<RN, kTC>(p, mask, mask_kind, dtype, bi, rh[i], ri[i],
                                              j0 + tx, rlo[i], rhi[i], prow, kTC);
#pragma unroll
                for (int j = 0; j < RN; ++j) {
                    A x = s[i][j] * p.scale_log2;
                    if (!full) {
                        const int key = j0 + tx + kTC * j;
                        bool keep = key >= rlo[i] && key < rhi[i];
                        A add = A(0);
                        if (mask_kind && ROW_MASK) {
                            keep = keep && ((mkeep >> j) & 1u);
                            add = prow[kTC * j];
                        } else if (mask_kind && keep) {
                            keep = mask_keep(p, mask, mask_kind, dtype, bi, rh[i], ri[i], key,
                                             add);
                        }
                        x = keep ? x + add : -INFINITY;
                    }
                    s[i][j] = x;
                    mx = cl::math::fmax(mx, x);
                }
                const A m_new = cl::math::fmax(m[i], row_max(mx));
                const A m_use = m_new == -INFINITY ? A(0) : m_new;  // nothing kept yet
                const A alpha = cl::math::exp2(m[i] - m_use);
                // dropout keep bits of the row's keys (drop_row: float; double draws per key)
                unsigned dbits = 0;
                if (ROW_MASK && dropout) {
                    const unsigned long long e_row =
                        (((unsigned long long)bi * p.hq + rh[i]) * p.sq + ri[i]) *
                        (unsigned long long)p.skv;
                    dbits = drop_row<RN>(p, e_row, j0 + tx, tx, p.skv % 4 == 0);
                }
                A sum = A(0);
#pragma unroll
                for (int j = 0; j < RN; ++j) {
                    A e = cl::math::exp2(s[i][j] - m_use);
                    sum += e;
                    if (dropout && ROW_MASK) e *= (dbits >> j) & 1u ? p.drop_scale : A(0);
                    else if (dropout) e *= drop_factor(p, bi, rh[i], ri[i], j0 + tx + kTC * j);
                    Ps[(ty + kTR * i) * LDP + tx + kTC * j] = e;
                }
                l[i] = l[i] * alpha + row_sum(sum);
                m[i] = m_new;
#pragma unroll
                for (int c = 0; c < CN; ++c) o[i][c] *= alpha;
            }
            __syncthreads();
            acc_tile<RM, CN, BN, LDP, LD>(o, Ps, Vs, ty, tx);
        }
    }
};

// P (undropped, from the forward's lse) and dS = P * (dP * keep - delta) of one element
// whose explicit mask was read (mask_row): `mkeep` whether it keeps the element, `add` its
// addend (true and 0 without a mask), `f` its dropout factor (0 or drop_scale; 1 without
// dropout); returns P * keep (what multiplies dout in dV).
template <typename A>
__device__ __forceinline__ A grad_element_read(const SdpaParamsT<A>& p, bool full,
                                               sdpa::KeyRange kr, bool mkeep, A add, A f,
                                               int key, A s, A dp, A lse_log2, A delta, A& ds) {
    bool keep = lse_log2 != -INFINITY;
    if (!full) keep = keep && key >= kr.lo && key < kr.hi && mkeep;
    const A pv = keep ? cl::math::exp2(cl::math::fma(s, p.scale_log2, add - lse_log2)) : A(0);
    ds = pv * (dp * f - delta);
    return pv * f;
}

// grad_element_read reading the explicit mask (mask_keep) and drawing the dropout factor
// (drop_factor) itself.
template <typename A>
__device__ __forceinline__ A grad_element(const SdpaParamsT<A>& p, const void* mask,
                                          int mask_kind, int dtype, bool full, sdpa::KeyRange kr,
                                          int bi, int h, int i, int key, A s, A dp, A lse_log2,
                                          A delta, A& ds) {
    A add = A(0);
    bool mkeep = true;
    if (!full && mask_kind && lse_log2 != -INFINITY && key >= kr.lo && key < kr.hi)
        mkeep = mask_keep(p, mask, mask_kind, dtype, bi, h, i, key, add);
    const A f = p.drop_threshold != 0 ? drop_factor(p, bi, h, i, key) : A(1);
    return grad_element_read(p, full, kr, mkeep, add, f, key, s, dp, lse_log2, delta, ds);
}

// A query row of the backward: its key range, lse in the log2 domain (-inf past
// lengths_q) and delta (0 there).
template <typename A>
struct GradRow {
    sdpa::KeyRange kr;
    A lse_log2, delta;
};

template <typename A>
__device__ __forceinline__ GradRow<A> grad_row(const SdpaParamsT<A>& p, sdpa::Lengths L,
                                               const A* lse, const A* delta, long long bh,
                                               int i) {
    const bool in = i < L.q;
    GradRow<A> r;
    r.kr = sdpa::key_range(p, L, i);
    r.lse_log2 = in ? sdpa::log2_sat(lse[bh * p.sq + i]) : -INFINITY;
    r.delta = in ? delta[bh * p.sq + i] : A(0);
    return r;
}

// The query rows [begin, end) whose key range meets the keys [j0, j1) (the bounds are
// nondecreasing in the row): the query tiles a dK/dV block visits.
struct RowSpan {
    int begin, end;
};

template <class P>
__device__ __forceinline__ RowSpan query_span(const P& p, sdpa::Lengths L, int j0, int j1) {
    RowSpan r{0, 0};
    if (j0 < j1) {
        const int shift = p.align_br ? L.kv - L.q : 0;
        r.begin = p.right >= 0 ? max(0, j0 - shift - p.right) : 0;
        r.end = p.left >= 0 ? min(L.q, j1 - shift + p.left) : L.q;
    }
    return r;
}

// Whether every (query, key) of the query rows [i0, i0 + bq) and keys [j0, j0 + bk) is
// kept by the ranges, with no explicit mask: no per-element test needed.
template <class P>
__device__ __forceinline__ bool pair_full(const P& p, sdpa::Lengths L, int mask_kind, int i0,
                                          int bq, int j0, int bk) {
    return mask_kind == 0 && i0 + bq <= L.q && j0 + bk <= L.kv &&
           sdpa::key_range(p, L, i0 + bq - 1).lo <= j0 && sdpa::key_range(p, L, i0).hi >= j0 + bk;
}

// The additive mask's gradient of a dQ block's nq rows from m0 where no key tile went:
// [0, kv_begin) and [written_end, skv), zeros (clamped to skv: with no tile visited,
// kv_begin = the block's lowest key may lie past skv, e.g. top-left windows with
// sq > skv + left).
template <typename A, class P>
__device__ __forceinline__ void zero_dmask_outside(A* dmask, const P& p, long long bh, int m0,
                                                   int nq, int kv_begin, int written_end) {
    const int zb = min(kv_begin, p.skv), ze = max(min(written_end, p.skv), zb);
    const int cols = zb + p.skv - ze;
    for (long long idx = threadIdx.x; idx < (long long)nq * cols; idx += kThreads) {
        const int r = (int)(idx / cols), c = (int)(idx % cols);
        const int key = c < zb ? c : ze + (c - zb);
        dmask[(bh * p.sq + m0 + r) * p.skv + key] = A(0);
    }
}

}  // namespace sdpa_fp32

// ------------------------------------------------------------------ backward
// delta[bh, i] = sum_c dout[c] * o[c] (= sum_j P dP, the softmax Jacobian's row term);
// 0 past lengths_q. One warp per row. (The backward's first kernel, CUDA-core and fp64
// tensor-core solvers alike: every module that includes this header may instantiate it.)
template <typename A>
__global__ void __launch_bounds__(sdpa_fp32::kThreads) flash_fp32_bwd_delta(
    const void* __restrict__ o, const void* __restrict__ dout, const int* __restrict__ lengths_q,
    const int* __restrict__ lengths_kv, A* __restrict__ delta, const SdpaParamsT<A> p,
    const int dtype) {
    const long long row = (long long)blockIdx.x * (sdpa_fp32::kThreads / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= (long long)p.b * p.hq * p.sq) return;  // whole warps
    const int i = (int)(row % p.sq), h = (int)(row / p.sq % p.hq), bi = (int)(row / p.sq / p.hq);
    const long long off = bi * p.o_sb + h * p.o_sh + i * p.o_ss;
    A sum = A(0);
    typedef sdpa_fp32::Io<A> io;
    for (int c = lane; c < p.dv; c += 32)
        sum += io::load1(o, off + c, dtype) * io::load1(dout, off + c, dtype);
#pragma unroll
    for (int m = 16; m > 0; m >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, m);
    if (lane == 0) delta[row] = i < sdpa::lengths_of(p, lengths_q, lengths_kv, bi).q ? sum : A(0);
}
