// The persistent recurrent layer (cuDNN's PERSIST_STATIC idea): ONE cooperative launch runs
// every time step of one layer, both directions, and keeps W_hh on chip for all of them.
// The input projection x W_ih^T of every step is done before (the solver's GEMM, gx).
//
// Arithmetic, accumulation and the A buffers below are in A = cl::acc_t<T> (float, double
// for double).
//
// Kernels (T = float | __half | __nv_bfloat16 | double, MODE = rnn::kMode*; no projections):
//   rnn_persistent_fwd<T, MODE>
//       grid: D * blocks_per_dir blocks of kThreads; block k serves direction
//       d = k / blocks_per_dir and the hidden units [j0, j0 + U), all G gates of them.
//       Once: its G*U rows of W_hh (D, G*H, Ho) into shared memory (as T: the weights
//       are T already, so this is exact and holds twice the rows of fp32 in 16 bits).
//       Per step: stage h_prev (B x Ho, T: the state is rounded to T anyway) into shared
//       memory; each warp takes rows of its W slice and all B batch rows, its lanes
//       splitting K = Ho (lane l reads 16 contiguous bytes at a time, or with Ho not a
//       multiple of 16 bytes one element: consecutive addresses, no bank conflicts; a W
//       row is read once per 4 batch rows) with A accumulation and a
//       butterfly shuffle reduction; the pre-activations go to shared memory, then one
//       thread per (batch row, unit) applies rnn::cell_forward<MODE> (the per-step
//       kernel's math, rnn_cell.cuh), writes h to the other state buffer, y[t], c and in
//       training the saves; then a grid barrier (cl::grid_sync) before the next step.
//
// h state ping-pong: during a step every block reads the whole previous h while writing
// its own units of the new one, so the two live in different buffers: state[0] = the
// caller's hstate (D, B, Ho), state[1] = scratch of the same shape. Step s reads
// state[(T - s) & 1] and writes state[(T - 1 - s) & 1], so the last step (s = T - 1) writes
// state[0] and the final h lands in hstate; the host puts the initial h into state[T & 1].
// cstate (D, B, H) A: each (d, b, j) belongs to one block, updated in place.
//
// Layouts and semantics are rnn_cell.cu's (file comment there): gx, s_gates (D, T, B, G*H)
// A; y (T, B, D*Ho); s_c, s_ghn (D, T, B, H) A; s_h (D, T, B, Ho) T (h before the
// step, every row); direction 0 runs t = 0 .. T-1, direction 1 t = T-1 .. 0; a row past its
// length keeps its state (copied into the new buffer) and gets y = 0.
//
// Dynamic shared memory (bytes, each part 16-byte aligned; persistent.py: smem_bytes):
//   W slice  G*U*Ho T    h_prev  B*Ho T    pre-activations  B*G*U A
// Defines: none (one module per dtype with the four modes).
#include "rnn/rnn_cell.cuh"
#include "common/grid_sync.cuh"

namespace rnn_persist {
constexpr int kThreads = 256;
constexpr int kWarps = kThreads / 32;
constexpr int kBatchChunk = 4;  // batch rows per pass over a W row (accumulators per lane)

__device__ __forceinline__ long long align16(long long bytes) { return (bytes + 15) & ~15LL; }
}  // namespace rnn_persist

// solvers/rnn/persistent.py: PARAMS_DTYPE.
struct RnnPersistentParams {
    int b, h, hout, gh;         // batch, hidden, size of h (= H), gates * hidden
    int steps, units;           // T, U hidden units per block
    int blocks_per_dir, has_len, training;
    long long y_ld;             // row stride of y: directions * hout
};

// 16 bytes of T: one 128-bit shared-memory load (2 doubles).
template <typename T>
struct alignas(16) Pack16 {
    static constexpr int kSize = 16 / sizeof(T);
    T v[kSize];
};

// pre[(b0 + i) * ld + row] = sum_k w_row[k] * h[(b0 + i) * Ho + k] for i < NB: the lanes of
// one warp split k, then a butterfly reduction (every lane gets the sums; lane 0 stores).
// `vec`: rows of 16-byte multiples (Ho % (16 / sizeof(T)) == 0), each lane reads 16
// contiguous bytes (a warp 512: conflict-free, 4x fewer loads per FMA); else scalars.
template <int NB, typename T>
__device__ __forceinline__ void dot_rows(const T* __restrict__ w_row, const T* __restrict__ h,
                                         int b0, int ho, bool vec,
                                         cl::acc_t<T>* __restrict__ pre, int ld, int row,
                                         int lane) {
    typedef cl::acc_t<T> A;
    A acc[NB];
#pragma unroll
    for (int i = 0; i < NB; ++i) acc[i] = A(0);
    if (vec) {
        using P = Pack16<T>;
        for (int k = lane * P::kSize; k < ho; k += 32 * P::kSize) {
            const P w = *reinterpret_cast<const P*>(w_row + k);
#pragma unroll
            for (int i = 0; i < NB; ++i) {
                const P hv = *reinterpret_cast<const P*>(h + (b0 + i) * ho + k);
#pragma unroll
                for (int e = 0; e < P::kSize; ++e)
                    acc[i] = cl::math::fma(cl::to_acc(w.v[e]), cl::to_acc(hv.v[e]), acc[i]);
            }
        }
    } else {
        for (int k = lane; k < ho; k += 32) {
            A w = cl::to_acc(w_row[k]);
#pragma unroll
            for (int i = 0; i < NB; ++i)
                acc[i] = cl::math::fma(w, cl::to_acc(h[(b0 + i) * ho + k]), acc[i]);
        }
    }
#pragma unroll
    for (int i = 0; i < NB; ++i) {
#pragma unroll
        for (int off = 16; off > 0; off /= 2) acc[i] += __shfl_xor_sync(0xffffffffu, acc[i], off);
        if (lane == 0) pre[(b0 + i) * ld + row] = acc[i];
    }
}

// (kThreads, 1): the grid is at most one block per SM by design, so the registers need
// not leave room for a second block; without the 1, ptxas aims at more blocks per SM
// and spills (GRU, fp32).
template <typename T, int MODE>
__global__ void __launch_bounds__(rnn_persist::kThreads, 1) rnn_persistent_fwd(
    // inputs
    const cl::acc_t<T>* __restrict__ gx, const T* __restrict__ w_hh, const T* __restrict__ b_ih,
    const T* __restrict__ b_hh, const int* __restrict__ lengths,
    // state: state0 = hstate (final h), state1 scratch (file comment); c in place
    T* state0, T* state1, cl::acc_t<T>* __restrict__ cstate,
    // outputs
    T* __restrict__ y,
    // saved for the backward (training only)
    cl::acc_t<T>* __restrict__ s_gates, cl::acc_t<T>* __restrict__ s_c, T* __restrict__ s_h,
    cl::acc_t<T>* __restrict__ s_ghn,
    // grid barrier counter, zeroed by the host
    unsigned int* barrier, RnnPersistentParams p) {
    using namespace rnn_persist;
    typedef cl::acc_t<T> A;
    constexpr int G = rnn::Gates<MODE>::value;
    const int d = blockIdx.x / p.blocks_per_dir;
    const int j0 = (blockIdx.x - d * p.blocks_per_dir) * p.units;
    const int nu = min(p.units, p.h - j0);  // units of this block (the last may have fewer)
    const int gu = G * p.units;             // row stride of the pre-activations
    const int ho = p.hout;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const bool vec = ho % Pack16<T>::kSize == 0;  // w_s and h_s rows 16-byte aligned
    const unsigned num_blocks = gridDim.x;

    DYNAMIC_SHARED(unsigned char, smem);
    T* w_s = reinterpret_cast<T*>(smem);  // (G*U, Ho): row g*U + u is W_hh row g*H + j0 + u
    long long at = align16((long long)gu * ho * sizeof(T));
    T* h_s = reinterpret_cast<T*>(smem + at);  // (B, Ho)
    at += align16((long long)p.b * ho * sizeof(T));
    A* pre_s = reinterpret_cast<A*>(smem + at);  // (B, G*U)

    // W_hh slice, once for every step: reads along k are coalesced.
    const T* w_dir = w_hh + (long long)d * p.gh * ho;
    for (long long idx = threadIdx.x; idx < (long long)G * nu * ho; idx += kThreads) {
        int r = (int)(idx / ho), k = (int)(idx - (long long)r * ho);
        int g = r / nu, u = r - g * nu;
        w_s[(g * p.units + u) * ho + k] = w_dir[(long long)(g * p.h + j0 + u) * ho + k];
    }

    const T* bi = b_ih + (long long)d * p.gh;
    const T* bh = b_hh + (long long)d * p.gh;
    const long long state_dir = (long long)d * p.b * ho;
    for (int s = 0; s < p.steps; ++s) {
        const T* h_in = ((p.steps - s) & 1 ? state1 : state0) + state_dir;
        T* h_out = ((p.steps - 1 - s) & 1 ? state1 : state0) + state_dir;
        const int t = d == 1 ? p.steps - 1 - s : s;

        for (int idx = threadIdx.x; idx < p.b * ho; idx += kThreads) h_s[idx] = h_in[idx];
        __syncthreads();  // h_s staged (and, at s = 0, w_s loaded)

        // Recurrent pre-activations h_prev W^T of this block's rows, in A.
        for (int r = warp; r < G * nu; r += kWarps) {
            const int row = (r / nu) * p.units + r % nu;
            const T* w_row = w_s + (long long)row * ho;
            int b0 = 0;
            for (; b0 + kBatchChunk <= p.b; b0 += kBatchChunk)
                dot_rows<kBatchChunk>(w_row, h_s, b0, ho, vec, pre_s, gu, row, lane);
            for (; b0 < p.b; ++b0) dot_rows<1>(w_row, h_s, b0, ho, vec, pre_s, gu, row, lane);
        }
        __syncthreads();  // pre_s complete

        // The cell, one thread per (batch row, unit): rnn_cell_fwd's semantics.
        for (int idx = threadIdx.x; idx < p.b * nu; idx += kThreads) {
            const int b = idx / nu, u = idx - b * nu, j = j0 + u;
            const long long row = (long long)d * p.b + b;                       // (d, b)
            const long long trow = ((long long)d * p.steps + t) * p.b + b;      // (d, t, b)
            const T h_old = h_s[b * ho + j];
            T* yv = y + (long long)t * p.b * p.y_ld + b * p.y_ld + d * ho + j;
            if (p.training) s_h[trow * ho + j] = h_old;
            if (p.has_len && t >= lengths[b]) {
                h_out[b * ho + j] = h_old;
                *yv = cl::from_acc<T>(A(0));
                continue;
            }
            const A* gxr = gx + trow * p.gh;
            const A* pr = pre_s + b * gu + u;
            auto pre = [&](int g) {
                int k = g * p.h + j;
                A v = gxr[k] + cl::to_acc(bi[k]);
                return MODE == rnn::kGru && g == 2 ? v : v + pr[g * p.units] + cl::to_acc(bh[k]);
            };
            const int kn = 2 * p.h + j;
            A ghn = MODE == rnn::kGru ? pr[2 * p.units] + cl::to_acc(bh[kn]) : A(0);
            A* cs = cstate + row * p.h + j;
            A cell = MODE == rnn::kLstm ? *cs : A(0);
            A gates[4];
            A h_prev = MODE == rnn::kGru ? cl::to_acc(h_old) : A(0);
            A h_new = rnn::cell_forward<MODE>(pre, ghn, cell, h_prev, gates);
            if (MODE == rnn::kLstm) {
                if (p.training) s_c[trow * p.h + j] = *cs;
                *cs = cell;
            }
            if (p.training) {
                A* sg = s_gates + trow * p.gh;
#pragma unroll
                for (int g = 0; g < G; ++g) sg[g * p.h + j] = gates[g];
                if (MODE == rnn::kGru) s_ghn[trow * p.h + j] = ghn;
            }
            T hv = cl::from_acc<T>(h_new);
            h_out[b * ho + j] = hv;
            *yv = hv;
        }
        // Every block's new h is written before any block stages it (a barrier inside
        // grid_sync also keeps h_s and pre_s until this block is done with them).
        if (s + 1 < p.steps) cl::grid_sync(barrier, (unsigned)(s + 1) * num_blocks);
    }
}
