// Dropout with a counter-based mask: element e of a call is kept iff its Philox4x32-10
// word (common/philox.cuh: counter = (e / 4, offset), key = seed, word e % 4) is
// >= p.threshold, where threshold = round(p * 2^32) in [0, 2^32]: p = 0 keeps every
// element and p = 1 drops every element, exactly. The mask does not depend on T (the
// same for float64 as for float32). Kept elements are scaled by 1 / (1 - p) in
// A = cl::acc_t<T> (float32(1 / (1 - p)) in float for float, __half, __nv_bfloat16;
// 1 / (1 - p) in double for double) and rounded once to T; dropped ones are x * 0, as
// PyTorch's x * mask / (1 - p) (NaN for inf/NaN x).
// The mask is a pure function of (seed, offset, e), so backward regenerates it by
// running dropout_fwd on dy with the same stream (nothing stored), or reads a saved
// byte mask with dropout_bwd_mask.
// Device-side offset (ops/dropout.py PhiloxState): with p.use_counter the stream is
// p.offset + counter[0], read on the device at each launch (a whole number held in a
// double, below 2^53), so a graph or a launch template replays with the offset the
// counter holds then; philox_counter_add advances it (one thread, in stream order).
//
// Kernels (T = float | __half | __nv_bfloat16 | double), elements in C order of a
// contiguous tensor:
//   dropout_fwd<T, VEC>       one thread per group of 4 elements (one Philox call), grid-stride;
//                             VEC = 4 loads and stores the group as one 4-element pack (needs
//                             x, y aligned to min(4 * sizeof(T), 16) bytes: a double group
//                             is two 16-byte accesses), VEC = 1 element by element.
//                             Writes the keep mask (one byte per element) when p.save_mask.
//   dropout_bwd_mask<T, VEC>  dx = mask ? dy * scale : 0, from a saved byte mask.
//   philox_counter_add        a PhiloxState's counter += n.
// Defines: none (one module per dtype).
#include "common/cudnnlite.cuh"
#include "common/philox.cuh"

// ops/dropout.py: params_dtype(dt). The scale in the accumulation type A.
template <typename A>
struct DropoutParamsT {
    unsigned long long seed;
    unsigned long long offset;
    unsigned long long threshold;  // drop iff word < threshold; 2^32 drops everything
    A scale;                       // 1 / (1 - p) in A (0 when p = 1)
    int save_mask;
    int use_counter;               // add counter[0] to offset (PhiloxState)
};
template <typename T> using DropoutParamsFor = DropoutParamsT<cl::acc_t<T>>;

// N elements, aligned to the whole pack up to 16 bytes (the widest vector access).
template <typename T, int N>
struct alignas(sizeof(T) * N < 16 ? sizeof(T) * N : 16) DropPack {
    T v[N];
};

namespace drop {

__device__ __forceinline__ bool keep(unsigned int word, unsigned long long threshold) {
    return (unsigned long long)word >= threshold;
}

// x times the keep factor (scale or 0), as PyTorch's x * mask / (1 - p): a dropped NaN or
// inf stays NaN (0 * inf), a dropped negative is -0.
template <typename T>
__device__ __forceinline__ T apply(T x, bool k, cl::acc_t<T> scale) {
    return cl::from_acc<T>(cl::to_acc(x) * (k ? scale : cl::acc_t<T>(0)));
}

}  // namespace drop

template <typename T, int VEC>
__global__ void __launch_bounds__(256) dropout_fwd(
    // pointers (mask: n bytes, written only when p.save_mask; counter: read only when
    // p.use_counter, else any pointer)
    const T* x, T* y, unsigned char* mask, const double* counter,
    // sizes
    cl::index_t n,
    // parameters
    DropoutParamsFor<T> p) {
    const cl::index_t groups = (n + 3) / 4;
    const unsigned long long offset =
        p.offset + (p.use_counter ? (unsigned long long)counter[0] : 0ull);
    for (cl::index_t g = cl::global_thread_id(); g < groups; g += cl::grid_stride()) {
        const cl::Philox4 r = cl::philox_group(p.seed, offset, (unsigned long long)g);
        const cl::index_t base = g * 4;
        if (VEC == 4 && base + 4 <= n) {
            const DropPack<T, 4> in = reinterpret_cast<const DropPack<T, 4>*>(x)[g];
            DropPack<T, 4> out;
            uchar4 m;
            bool k[4];
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                k[j] = drop::keep(r.v[j], p.threshold);
                out.v[j] = drop::apply(in.v[j], k[j], p.scale);
            }
            reinterpret_cast<DropPack<T, 4>*>(y)[g] = out;
            if (p.save_mask) {
                m.x = k[0]; m.y = k[1]; m.z = k[2]; m.w = k[3];
                reinterpret_cast<uchar4*>(mask)[g] = m;
            }
        } else {
#pragma unroll
            for (int j = 0; j < 4; ++j) {
                const cl::index_t e = base + j;
                if (e < n) {
                    const bool k = drop::keep(r.v[j], p.threshold);
                    y[e] = drop::apply(x[e], k, p.scale);
                    if (p.save_mask) mask[e] = k;
                }
            }
        }
    }
}

template <typename T, int VEC>
__global__ void __launch_bounds__(256) dropout_bwd_mask(
    // pointers
    const T* dy, const unsigned char* mask, T* dx,
    // sizes
    cl::index_t n,
    // parameters
    cl::acc_t<T> scale) {
    const cl::index_t groups = (n + 3) / 4;
    for (cl::index_t g = cl::global_thread_id(); g < groups; g += cl::grid_stride()) {
        const cl::index_t base = g * 4;
        if (VEC == 4 && base + 4 <= n) {
            const DropPack<T, 4> in = reinterpret_cast<const DropPack<T, 4>*>(dy)[g];
            const uchar4 m = reinterpret_cast<const uchar4*>(mask)[g];
            DropPack<T, 4> out;
            out.v[0] = drop::apply(in.v[0], m.x != 0, scale);
            out.v[1] = drop::apply(in.v[1], m.y != 0, scale);
            out.v[2] = drop::apply(in.v[2], m.z != 0, scale);
            out.v[3] = drop::apply(in.v[3], m.w != 0, scale);
            reinterpret_cast<DropPack<T, 4>*>(dx)[g] = out;
        } else {
            for (int j = 0; j < 4; ++j) {
                const cl::index_t e = base + j;
                if (e < n) dx[e] = drop::apply(dy[e], mask[e] != 0, scale);
            }
        }
    }
}

// counter[0] += n: a PhiloxState's advance, launched on the stream like the dropout that
// reads it (one thread).
__global__ void __launch_bounds__(32) philox_counter_add(double* counter, double n) {
    if (threadIdx.x == 0 && blockIdx.x == 0) counter[0] += n;
}

// Raw generator for known-answer tests: out[4i..4i+3] = Philox4x32-10(counter[4i..], key[2i..]).
__global__ void __launch_bounds__(256) philox_raw(
    // pointers
    const unsigned int* counter, const unsigned int* key, unsigned int* out,
    // sizes
    int n) {
    const int i = (int)cl::global_thread_id();
    if (i >= n) return;
    cl::Philox4 c;
    for (int j = 0; j < 4; ++j) c.v[j] = counter[4 * i + j];
    const cl::Philox4 r = cl::philox4x32_10(c, key[2 * i], key[2 * i + 1]);
    for (int j = 0; j < 4; ++j) out[4 * i + j] = r.v[j];
}
