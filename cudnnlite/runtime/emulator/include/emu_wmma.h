// emu_wmma.h — CUDA's tensor-core fragment API (`nvcuda::wmma`, <mma.h>) for the emulator.
//
// Included by cuda_emu.h. Kernels write `#ifndef CUDNNLITE_EMULATOR #include <mma.h> #endif`
// and use nvcuda::wmma exactly as on a GPU.
//
// Model
//  - CUDA leaves the mapping of tile elements to lanes unspecified, so here every lane
//    holds the whole tile: `num_elements` is the tile size and `x[i]` its i-th element in
//    row-major order (matrix_a: M x K, matrix_b: K x N, accumulator: M x N). Kernel code
//    that only uses `x[]` element-wise (scaling, __float_to_tf32) is correct under any
//    mapping, which is all CUDA promises.
//  - load_matrix_sync, store_matrix_sync and mma_sync are warp-collective: each ends
//    with a meeting of the full warp (all 32 lanes must call it, converged, as on a GPU:
//    a partial warp or a lane that exited is an error naming the kernel's call site). Every lane reads the full tile from memory itself BEFORE that meeting, at
//    the moment it reaches the call: a lane that reaches a load before other threads
//    (of any warp) wrote the tile reads stale or poisoned data, so a missing
//    __syncthreads before a load shows in any schedule (CUDNNLITE_EMU_POISON fills
//    shared memory with NaN), as it may on a GPU. A store writes the lane's part of the
//    tile (element e by lane e % 32), then meets.
//  - mma_sync: d = a * b + c with fp32 (or half) accumulators, summed in k order; the
//    products of half, bf16 and tf32 inputs are exact in fp32 (at most 22 significant
//    bits), so only the additions round. TF32 inputs are rounded to a 10-bit mantissa
//    (__float_to_tf32) inside mma_sync, as the hardware only ever reads 19 bits.
//  - Shapes: m16n16k16 (__half, __nv_bfloat16; accumulators float or __half),
//    m32n8k16 and m8n32k16 (same types), m16n16k8 (precision::tf32; accumulators float).
#pragma once

namespace nvcuda {
namespace wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

namespace precision {
struct tf32 {};
}  // namespace precision

// cvt.rna.tf32.f32: round to nearest, ties away from zero, to a 10-bit mantissa; the
// result is a float whose low 13 mantissa bits are zero. Inf and NaN pass through.
inline float __float_to_tf32(float in) {
    unsigned u;
    memcpy(&u, &in, 4);
    if ((u & 0x7f800000u) != 0x7f800000u) {
        u += 0x1000u;  // half of the dropped 13 bits: ties go away from zero
        u &= 0xffffe000u;
    }
    float out;
    memcpy(&out, &u, 4);
    return out;
}

namespace detail {

// The stored element type of a fragment: tf32 fragments hold floats.
template <typename T> struct storage { typedef T type; };
template <> struct storage<precision::tf32> { typedef float type; };

template <typename Use, int M, int N, int K> struct dims;
template <int M, int N, int K> struct dims<matrix_a, M, N, K> {
    static const int rows = M, cols = K;
};
template <int M, int N, int K> struct dims<matrix_b, M, N, K> {
    static const int rows = K, cols = N;
};
template <int M, int N, int K> struct dims<accumulator, M, N, K> {
    static const int rows = M, cols = N;
};

template <int M, int N, int K> struct valid_shape { static const bool value = false; };
template <> struct valid_shape<16, 16, 16> { static const bool value = true; };
template <> struct valid_shape<32, 8, 16> { static const bool value = true; };
template <> struct valid_shape<8, 32, 16> { static const bool value = true; };
template <> struct valid_shape<16, 16, 8> { static const bool value = true; };

inline float widen(float v) { return v; }
inline float widen(__half v) { return __half2float(v); }
inline float widen(__nv_bfloat16 v) { return __bfloat162float(v); }

template <typename T> inline T narrow(float v);
template <> inline float narrow<float>(float v) { return v; }
template <> inline __half narrow<__half>(float v) { return __float2half_rn(v); }

// The whole warp meets here (a __syncwarp with the full mask); `what` names the operation
// and file:line its call in the kernel, in the emulator's reports.
inline void warp_sync(const char* what, const char* file, int line) {
    (void)::emu::warp_exchange(::emu::WarpOp::kSync, 0xffffffffu, 0, 0, 32, file, line, what);
}

}  // namespace detail

template <typename Use, int M, int N, int K, typename T, typename Layout = void>
class fragment {
    static_assert(detail::valid_shape<M, N, K>::value, "wmma: unsupported fragment shape");

public:
    typedef typename detail::storage<T>::type element_type;
    typedef element_type storage_element_type;
    static const int rows = detail::dims<Use, M, N, K>::rows;
    static const int cols = detail::dims<Use, M, N, K>::cols;
    enum { num_elements = rows * cols };
    element_type x[num_elements];
};

template <typename Use, int M, int N, int K, typename T, typename L, typename V>
inline void fill_fragment(fragment<Use, M, N, K, T, L>& f, const V& v) {
    typedef typename fragment<Use, M, N, K, T, L>::element_type E;
    for (int i = 0; i < f.num_elements; ++i) f.x[i] = E(v);
}

// matrix_a / matrix_b: the layout is part of the fragment type; ldm in elements.
template <typename Use, int M, int N, int K, typename T, typename L, typename P>
inline void load_matrix_sync(fragment<Use, M, N, K, T, L>& f, const P* p, unsigned ldm,
                             const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    static_assert(std::is_same<L, row_major>::value || std::is_same<L, col_major>::value,
                  "wmma: matrix fragments need row_major or col_major");
    const bool row = std::is_same<L, row_major>::value;
    for (int i = 0; i < f.rows; ++i)
        for (int j = 0; j < f.cols; ++j)
            f.x[i * f.cols + j] = row ? p[(size_t)i * ldm + j] : p[(size_t)j * ldm + i];
    detail::warp_sync("load_matrix_sync", file, line);
}

// Accumulators: the memory layout is a run-time argument.
template <int M, int N, int K, typename T, typename P>
inline void load_matrix_sync(fragment<accumulator, M, N, K, T>& f, const P* p, unsigned ldm,
                             layout_t layout, const char* file = __builtin_FILE(),
                             int line = __builtin_LINE()) {
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j)
            f.x[i * N + j] =
                layout == mem_row_major ? p[(size_t)i * ldm + j] : p[(size_t)j * ldm + i];
    detail::warp_sync("load_matrix_sync", file, line);
}

template <int M, int N, int K, typename T, typename P>
inline void store_matrix_sync(P* p, const fragment<accumulator, M, N, K, T>& f, unsigned ldm,
                              layout_t layout, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
    // Every lane holds the whole tile; lane l stores the elements e with e % 32 == l, as
    // each lane of a GPU stores its own part: the tile is whole once the warp met, and no
    // two lanes store one element (the race check would see the same word written twice).
    const ::emu::Worker* w = ::emu::t_worker;
    const int lane = w && w->current ? w->current->linear % 32 : 0;
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            if ((i * N + j) % 32 != lane) continue;
            size_t off = layout == mem_row_major ? (size_t)i * ldm + j : (size_t)j * ldm + i;
            p[off] = f.x[i * N + j];
        }
    detail::warp_sync("store_matrix_sync", file, line);
}

template <int M, int N, int K, typename TA, typename TB, typename LA, typename LB, typename TC,
          typename TD>
inline void mma_sync(fragment<accumulator, M, N, K, TD>& d,
                     const fragment<matrix_a, M, N, K, TA, LA>& a,
                     const fragment<matrix_b, M, N, K, TB, LB>& b,
                     const fragment<accumulator, M, N, K, TC>& c, bool satf = false,
                     const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
    static_assert(std::is_same<TA, TB>::value, "wmma: matrix_a and matrix_b types differ");
    const bool tf32 = std::is_same<TA, precision::tf32>::value;
    static_assert(!tf32 || (M == 16 && N == 16 && K == 8), "wmma: tf32 needs m16n16k8");
    static_assert(tf32 || K == 16, "wmma: 16-bit inputs need k = 16");
    (void)satf;  // saturation applies to integer/half accumulators only; unused here
    float out[M * N];  // d may alias c
    for (int i = 0; i < M; ++i)
        for (int j = 0; j < N; ++j) {
            float acc = detail::widen(c.x[i * N + j]);
            for (int k = 0; k < K; ++k) {
                float av = detail::widen(a.x[i * K + k]);
                float bv = detail::widen(b.x[k * N + j]);
                if (tf32) {
                    av = __float_to_tf32(av);
                    bv = __float_to_tf32(bv);
                }
                acc = acc + av * bv;  // the product is exact; one rounding per addition
            }
            out[i * N + j] = acc;
        }
    for (int i = 0; i < M * N; ++i) d.x[i] = detail::narrow<TD>(out[i]);
    detail::warp_sync("mma_sync", file, line);
}

}  // namespace wmma
}  // namespace nvcuda
