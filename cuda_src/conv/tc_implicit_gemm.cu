// Multistage tensor-core implicit-GEMM convolution, forward, NHWC + KRSC, fp16 / bf16
// inputs (or fp32 with TF32 math), fp32 accumulation (mma.sync through conv/tc_gemm.cuh).
//
// GEMM view, per group: rows m = (n, p, q) output pixels, columns = the group's K/groups
// output channels, reduction over (r, s, c) of its C/groups channels in the filter's KRSC
// order, walked as R*S taps x ceil(C/groups / BK) channel slices: one stage holds BK
// channels of one tap. Groups: grid.y runs group-major over the groups' column tiles
// (group_tile); the group's channels are pointer offsets (x + g * C/groups, w + its
// K/groups filters, y + g * K/groups) and x's pixel stride stays C, so groups == 1 runs
// the same code. No im2col buffer and no integer
// division in the main loop: each thread decodes its A rows (n, h0, w0) once, and the
// tap/channel iterator advances by additions.
//
// NCHW: the solver converts x and w to NHWC / KRSC in the workspace (tc_nchw_to_nhwc) and
// passes out_nchw = 1: the epilogue writes y (and reads z) in NCHW. The conversion is a pass
// over x and w at memory speed; an NCHW loader would gather every 16-byte chunk from eight
// (or four) rows of the image instead, in the main loop.
//
// Split-K (grid.z > 1): block z runs `iters_per_split` reduction tiles from z * that and
// writes fp32 partials to ws[z][m][k]; tc_conv_fwd_splitk_epilogue sums them in split
// order and applies the epilogue (deterministic). grid.z == 1: the epilogue runs here.
//
// Kernel: tc_conv_fwd<T, BM, BN, BK, WM, WN, STAGES, ALIGN>
//   T       __half (sm_75+; sm_75 runs two m16n8k8 per MMA), __nv_bfloat16 (sm_80+), or
//           float for math="tf32" (m16n8k8 on operands rounded to TF32; sm_80+)
//   BM x BN block tile (output pixels x output channels), BK channels per stage
//   WM x WN warp tile; (BM / WM) * (BN / WN) warps
//   STAGES  cp.async stages in flight
//   ALIGN   elements per cp.async: 16-bit types 8 (16 bytes, C/groups % 8 == 0) or 2 (4
//           bytes, C/groups even); fp32 4 (16 bytes, C/groups % 4 == 0) or 1 (4 bytes, any)
// Readable name (solver): tc_igemm_fwd_<BM>x<BN>x<BK>_w<WM>x<WN>_s<STAGES>_a<ALIGN>_nhwc_<dtype>
//
// Kernel: tc_conv_fwd_3d<same parameters>: 3-D, NDHWC + KTRSC (NCDHW through the same
// conversion), the reduction over (t, r, s) taps x channel slices; a per-row depth mask word
// and the depth tap in the iterator (2-D kernels: unchanged). Readable name ..._ndhwc_<dtype>.
//
// Epilogue: the accumulators go through shared memory ([BM][BN + 4] fp32) and each thread
// finishes 8 consecutive output channels of one pixel: alpha * acc + alpha2 * z + bias,
// the activation, and one 16-byte store (scalar stores where K % 8 != 0 or a pointer is
// not 16-byte aligned). y and z may alias (in-place residual): neither is __restrict__.
//
// Dynamic shared memory: max(STAGES * (BM + BN) * BK * 2, BM * (BN + 4) * 4) bytes.
// grid (ceil(N*P*Q / BM), groups * ceil(K/groups / BN)), block (BM / WM) * (BN / WN) * 32.
#include "common/cudnnlite.cuh"
#include "conv/conv_common.cuh"
#include "conv/splitk_reduce.cuh"
#include "conv/tc_gemm.cuh"

namespace tcconv {

// Implicit-GEMM operand loader of the forward convolution (tc_gemm.cuh's Loader contract).
// Everything per row is decoded once per block (CUTLASS's "precomputed" iterator); the
// main path of load() is, per copy, one 32-bit add and one wide multiply-add for the
// address and one bit test for the predicate, and per tile a channel-slice compare and
// two increments: no tap decode, no mask shifts.
//   A: each row's x offset of (n, h0, w0, col) at tap (0, 0) (a_off) plus a_tap, the same
//      for every row ((r * dil_h * W + t * dil_w) * C + c0). The solver keeps x and w below
//      2^31 elements and the filter within 16 x 16 taps.
//   B: row j of the tile at w + b_pos + j * b_step (the filter's k rows, R*S*Cg apart).
//   Groups: a_off and b_pos start at group g's channels (x's g * Cg, w's filters g * Kg..:
//      32-bit offsets, so the loop's addresses stay one wide multiply-add on the kernel's
//      pointers); the reduction counts Cg = C/groups channels per tap, x's pixels stay C
//      apart, the B rows below Kg = K/groups are valid.
//   Validity: one word (ok), rebuilt from the rows' packed tap masks (a_mask) only when the
//      tap changes; the A rows' bits at this tap and the B rows' (below K, fixed), all
//      cleared in a slice where this thread's channels are past C (a ragged last slice).
// D3 (the _3d kernel): the filter depth taps lead the reduction, (t, r, s, c) in KTRSC
// order; a third mask word per row holds the depth bits and the iterator carries the depth
// tap. The 2-D instantiation has none of it.
//
// The validity word: two bits per copy (FwdLoader::bits), 32 bits up to 16 copies, else 64.
template <bool WIDE> struct PredWord { typedef unsigned type; };
template <> struct PredWord<true> { typedef unsigned long long type; };

// PACKED (tc_conv_fwd_packed: groups of fewer output channels than the tile's BN): the
// block's columns are BN consecutive output channels of several groups, its reduction the
// window of x channels those groups read (cwin channels from cbase), and B is the
// block-diagonal matrix of their filters: a B copy of row k (group gk) is read only where
// its channels fall in gk's C/groups (b_lo), else zero-filled. What would be a separate
// GEMM per group of K/groups columns, mostly zero padding of the BN-wide tile, fills it.
template <class G, int ALIGN, bool D3, bool PACKED = false>
struct FwdLoader {
    typedef typename G::T T;
    enum {
        CPR = G::BK / ALIGN,                // copies per tile row
        ROWS_PER_PASS = G::THREADS / CPR,
        A_PASSES = G::BM / ROWS_PER_PASS,
        B_PASSES = G::BN / ROWS_PER_PASS,
        BYTES = ALIGN * (int)sizeof(T),     // per cp.async
    };
    static_assert(G::THREADS % CPR == 0, "a thread keeps one column of the tile");
    static_assert(G::BM % ROWS_PER_PASS == 0 && G::BN % ROWS_PER_PASS == 0, "whole passes");
    static_assert(ROWS_PER_PASS % 8 == 0, "passes keep the row swizzle (period 8)");
    static_assert(A_PASSES + B_PASSES <= 32, "two validity bits per copy");
    typedef typename PredWord<(A_PASSES + B_PASSES > 16)>::type Pred;
    // Copy k's bits. Two of them: a test of a two-bit mask stays one LOP3 to a predicate,
    // where the compiler turns a one-bit test into a shift, a mask and a compare.
    __device__ static Pred bits(int k) { return (Pred)3 << 2 * k; }

    const T* x;
    const T* w;
    int a_off[A_PASSES];          // x offset of this row's (n, h0, w0, col): tap (0, 0)
    unsigned a_mask[A_PASSES];    // bit r: h0 + r * dil_h inside the image (0: row past M);
                                  // bit 16 + s: w0 + s * dil_w inside the image
    unsigned a_dmask[D3 ? A_PASSES : 1];  // D3: bit td: d0 + td * dil_d inside the volume
    Pred ok;                      // bits(i): A row i inside the image at this tap;
                                  // bits(A_PASSES + j): B row j below K
    int b_step;                   // ROWS_PER_PASS * R * S * Cg: B rows j and j + 1
    int b_off[PACKED ? B_PASSES : 1];  // PACKED: w offset of row j's (k, tap 0) minus its
                                       // group's first window channel, plus col
    int b_lo[PACKED ? B_PASSES : 1];   // PACKED: window channel of row j's group's first
                                       // channel, minus col: c0 - b_lo in [0, Cg) reads
    int b_tap;                    // PACKED: tap * Cg + c0 (uniform over rows)
    int dst;                      // this thread's element offset in a stage
    int c_lim;                    // cwin - col: c0 < c_lim while this thread's copy is inside
    int C, S, R;                  // C: the reduction's channels per tap (cwin)
    int CG;                       // C/groups
    int a_next_s, a_next_r, a_next_d, b_next_s;  // offset steps at the end of a tap's slices
    // The reduction iterator: tap (r, t), channel slice c0 (D3: depth tap td first).
    int r, t, c0, td;
    int a_tap;  // (r * dil_h * W + t * dil_w) * C + c0: uniform over rows
    int b_pos;  // w offset of (this thread's first k row, r, t, c0 + col)

    // The reduction runs over cwin channels of x from channel cbase (a group's: g * Cg and
    // Cg; PACKED: the window of the block's groups). n0: the tile's first column, within
    // the group (B rows below Kg valid), or PACKED of K; w at the group's filters (kg0: its
    // first filter), or PACKED w itself (kg0 0).
    __device__ FwdLoader(const T* x_, const T* w_, const ConvShape& s, cl::index_t m0,
                         int cbase, int cwin, int kg0, int n0)
        : x(x_), w(w_), C(cwin), S(s.s), R(s.r), CG(s.c_per_group) {
        const int col = (threadIdx.x % CPR) * ALIGN;
        const int row0 = threadIdx.x / CPR;
        dst = G::a_index(row0, col);  // A and B tiles: the same layout
        c_lim = C - col;
        const cl::index_t rows = (cl::index_t)s.n * s.p * s.q * (D3 ? s.o : 1);
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i) {
            const cl::index_t m = m0 + row0 + i * ROWS_PER_PASS;
            int n = 0, p = 0, q = 0, o = 0;
            if (m < rows) {
                q = (int)(m % s.q);
                const cl::index_t np = m / s.q;
                n = (int)(np / s.p);
                p = (int)(np % s.p);
                if (D3) o = n % s.o, n /= s.o;
            }
            const int h0 = p * s.stride_h - s.pad_h, w0 = q * s.stride_w - s.pad_w;
            if (D3) {
                const int d0 = o * s.stride_d - s.pad_d;
                a_off[i] = (((n * s.d + d0) * s.h + h0) * s.w + w0) * s.c + cbase + col;
                unsigned dmask = 0;
                for (int k = 0; k < s.t; ++k)
                    dmask |= (unsigned)((unsigned)(d0 + k * s.dil_d) < (unsigned)s.d) << k;
                a_dmask[D3 ? i : 0] = dmask;
            } else {
                a_off[i] = ((n * s.h + h0) * s.w + w0) * s.c + cbase + col;
            }
            unsigned mask = 0;
            for (int k = 0; k < s.r; ++k)
                mask |= (unsigned)((unsigned)(h0 + k * s.dil_h) < (unsigned)s.h) << k;
            for (int k = 0; k < s.s; ++k)
                mask |= (unsigned)((unsigned)(w0 + k * s.dil_w) < (unsigned)s.w) << (16 + k);
            a_mask[i] = m < rows ? mask : 0u;
        }
        const int rsc = s.r * s.s * CG * (D3 ? s.t : 1);
        // rows j * ROWS_PER_PASS < b_rows are valid
        const int b_rows = (PACKED ? s.k : s.k_per_group) - (n0 + row0);
        ok = 0;
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j)
            if (j * ROWS_PER_PASS < b_rows) ok |= bits(A_PASSES + j);
        b_pos = (kg0 + (b_rows > 0 ? n0 + row0 : 0)) * rsc + col;
        b_step = ROWS_PER_PASS * rsc;
        b_tap = 0;
        if (PACKED) {
            const int g_first = cbase / CG;  // the window's first group
#pragma unroll
            for (int j = 0; j < B_PASSES; ++j) {
                const int k = j * ROWS_PER_PASS < b_rows ? n0 + row0 + j * ROWS_PER_PASS : 0;
                const int first = (k / s.k_per_group - g_first) * CG;  // in the window
                b_off[PACKED ? j : 0] = k * rsc - first + col;
                b_lo[PACKED ? j : 0] = first - col;
            }
        }
        // From a tap's last slice (c0 = c_end - BK) to the next tap's first (x: pixels C
        // apart; w: taps Cg apart).
        const int c_end = (C + G::BK - 1) / G::BK * G::BK;
        a_next_s = s.dil_w * s.c - c_end + G::BK;
        a_next_r = (s.dil_h * s.w - s.s * s.dil_w) * s.c;
        a_next_d = D3 ? (s.dil_d * s.h - s.r * s.dil_h) * s.w * s.c : 0;
        b_next_s = CG - c_end + G::BK;
        r = t = c0 = td = 0;
        a_tap = 0;
        set_tap();
    }

    // The rows' validity at tap (r, t) (D3: and depth tap td).
    __device__ void set_tap() {
        ok &= ~(Pred)0 << 2 * A_PASSES;
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i) {
            unsigned bit = (a_mask[i] >> r) & (a_mask[i] >> (16 + t));
            if (D3) bit &= a_dmask[D3 ? i : 0] >> td;
            ok |= (Pred)(bit & 1u) * bits(i);
        }
    }

    // Split-K: start at reduction tile `it0` (one division per block, none per tile).
    __device__ void seek(int it0, const ConvShape& s) {
        const int slices = (C + G::BK - 1) / G::BK;
        const int tap = it0 / slices;
        r = tap / S;
        t = tap % S;
        c0 = (it0 % slices) * G::BK;
        if (D3) {
            td = r / R;
            r = r % R;
            a_tap = ((td * s.dil_d * s.h + r * s.dil_h) * s.w + t * s.dil_w) * s.c + c0;
        } else {
            a_tap = (r * s.dil_h * s.w + t * s.dil_w) * s.c + c0;
        }
        if (PACKED) b_tap = tap * CG + c0;
        else b_pos += tap * CG + c0;
        set_tap();
    }

    __device__ void load(T* As, T* Bs) {
        const Pred v = c0 < c_lim ? ok : 0;  // C % ALIGN == 0: wholly in or out
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i)  // not read where invalid (zero-fill)
            cl::mma::cp_async<BYTES>(As + dst + i * ROWS_PER_PASS * G::BK, x + (a_off[i] + a_tap),
                                     v & bits(i));
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j) {
            if (PACKED) {  // row j's filter where the copy's channels are its group's
                const int jj = PACKED ? j : 0;
                const bool in = (unsigned)(c0 - b_lo[jj]) < (unsigned)CG;
                cl::mma::cp_async<BYTES>(Bs + dst + j * ROWS_PER_PASS * G::BK,
                                         w + (b_off[jj] + b_tap),
                                         in && (v & bits(A_PASSES + j)));
            } else {
                cl::mma::cp_async<BYTES>(Bs + dst + j * ROWS_PER_PASS * G::BK,
                                         w + (b_pos + j * b_step), v & bits(A_PASSES + j));
            }
        }
        // Next tile: the next channel slice, or the first slice of the next tap.
        if (c0 + G::BK < C) {
            c0 += G::BK;
            a_tap += G::BK;
            if (PACKED) b_tap += G::BK;
            else b_pos += G::BK;
        } else {
            c0 = 0;
            a_tap += a_next_s;
            if (PACKED) b_tap += b_next_s;
            else b_pos += b_next_s;
            if (++t == S) {
                t = 0;
                ++r;
                a_tap += a_next_r;
                if (D3 && r == R) {
                    r = 0;
                    ++td;
                    a_tap += a_next_d;
                }
            }
            set_tap();
        }
    }
};

// Grouped convolution: grid.y runs group-major over each group's `per_group` GEMM
// columns (or rows) in tiles of `tile`; one division per block.
struct GroupTile {
    int g;   // the group
    int n0;  // the tile's first column within the group
};
__device__ inline GroupTile group_tile(int per_group, int tile) {
    const int tiles = (per_group + tile - 1) / tile;
    GroupTile t;
    t.g = (int)blockIdx.y / tiles;
    t.n0 = ((int)blockIdx.y - t.g * tiles) * tile;
    return t;
}

// One out-of-line copy of the activation switch per module (see conv_common.cuh).
__device__ __noinline__ float activate_slow(int mode, float v, ActParams a) {
    return conv::activate(mode, v, a);
}

// The shared epilogue (conv_common.cuh) on preloaded z and bias values.
__device__ __forceinline__ float finish(const ConvEpilogue& e, float acc, float zv, float bv) {
    const float v = conv::epilogue_sum(e, acc, zv, bv);
    return e.act_mode == act::kIdentity ? v : activate_slow(e.act_mode, v, e.act);
}

// Writes a [BM][C_LD] fp32 tile of results for NHWC rows m0.., channels n0.. of y (rows K
// apart; y, z and bias at the block's group, whose Kg channels are valid): V = 16 /
// sizeof(T) consecutive channels per thread, one 16-byte load of z and bias and one
// 16-byte store each.
template <class G, typename T>
__device__ void store_tile_nhwc(const float* Cs, T* y, const T* z, const T* bias,
                                const ConvEpilogue& e, cl::index_t rows, int K, int Kg,
                                cl::index_t m0, int n0) {
    enum { V = 16 / (int)sizeof(T), GROUPS = G::BN / V };
    const bool vec = K % V == 0 && Kg % V == 0 && ((size_t)y & 15) == 0 &&
                     (!e.has_z || ((size_t)z & 15) == 0) &&
                     (!e.has_bias || ((size_t)bias & 15) == 0);
    for (int idx = threadIdx.x; idx < G::BM * GROUPS; idx += G::THREADS) {
        const int row = idx / GROUPS, k = n0 + (idx % GROUPS) * V;
        const cl::index_t m = m0 + row;
        if (m >= rows || k >= Kg) continue;
        const float* acc = Cs + row * G::C_LD + (k - n0);
        const cl::index_t off = m * K + k;
        if (vec) {
            __align__(16) T zs[V], bs[V], out[V];
            if (e.has_z) *reinterpret_cast<uint4*>(zs) = *reinterpret_cast<const uint4*>(z + off);
            if (e.has_bias)
                *reinterpret_cast<uint4*>(bs) = *reinterpret_cast<const uint4*>(bias + k);
#pragma unroll
            for (int j = 0; j < V; ++j) {
                const float zv = e.has_z ? cl::to_float(zs[j]) : 0.f;
                const float bv = e.has_bias ? cl::to_float(bs[j]) : 0.f;
                out[j] = cl::from_float<T>(finish(e, acc[j], zv, bv));
            }
            *reinterpret_cast<uint4*>(y + off) = *reinterpret_cast<const uint4*>(out);
        } else {
            for (int j = 0; j < V && k + j < Kg; ++j) {
                const float zv = e.has_z ? cl::to_float(z[off + j]) : 0.f;
                const float bv = e.has_bias ? cl::to_float(bias[k + j]) : 0.f;
                y[off + j] = cl::from_float<T>(finish(e, acc[j], zv, bv));
            }
        }
    }
}

// Split-K partials: the staged tile to ws[z][m][k] (fp32, K wide; ws at the block's group,
// Kg columns valid), 16 bytes per store.
template <class G>
__device__ void store_partials(const float* Cs, float* ws, cl::index_t rows, int K, int Kg,
                               cl::index_t m0, int n0) {
    enum { GROUPS = G::BN / 4 };
    const bool vec = K % 4 == 0 && Kg % 4 == 0 && ((size_t)ws & 15) == 0;
    for (int idx = threadIdx.x; idx < G::BM * GROUPS; idx += G::THREADS) {
        const int row = idx / GROUPS, k = n0 + (idx % GROUPS) * 4;
        const cl::index_t m = m0 + row;
        if (m >= rows || k >= Kg) continue;
        const float* acc = Cs + row * G::C_LD + (k - n0);
        float* out = ws + m * K + k;
        if (vec) *reinterpret_cast<float4*>(out) = *reinterpret_cast<const float4*>(acc);
        else
            for (int j = 0; j < 4 && k + j < Kg; ++j) out[j] = acc[j];
    }
}

// NCHW output (the NCHW path: inputs converted to NHWC in the workspace, output written in
// place; y and z at the group's first channel plane, bias at its first channel):
// consecutive threads take consecutive pixels of one channel, the contiguous run.
template <class G, typename T>
__device__ void store_tile_nchw(const float* Cs, T* y, const T* z, const T* bias,
                                const ConvEpilogue& e, cl::index_t rows, int K, int Kg, int PQ,
                                cl::index_t m0, int n0) {
    for (int idx = threadIdx.x; idx < G::BM * G::BN; idx += G::THREADS) {
        const int row = idx % G::BM, k = n0 + idx / G::BM;
        const cl::index_t m = m0 + row;
        if (m >= rows || k >= Kg) continue;
        const cl::index_t n = m / PQ;
        const cl::index_t off = (n * K + k) * PQ + (m - n * PQ);
        const float zv = e.has_z ? cl::to_float(z[off]) : 0.f;
        const float bv = e.has_bias ? cl::to_float(bias[k]) : 0.f;
        y[off] = cl::from_float<T>(finish(e, Cs[row * G::C_LD + (k - n0)], zv, bv));
    }
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3,
          bool PACKED>
__device__ __forceinline__ void fwd_body(const T* x, const T* w, T* y, const T* z, const T* bias,
                                         const ConvShape& s, const ConvEpilogue& e, float* ws,
                                         int iters_per_split, int out_nchw) {
    typedef tc::Gemm<T, BM, BN, BK, WM, WN, STAGES, false, false> G;
    DYNAMIC_SHARED(T, smem);
    const cl::index_t m0 = (cl::index_t)blockIdx.x * BM;
    // The block's columns n0.. of its group (k0: the group's first channel of y; kg of them
    // valid), or PACKED n0.. of K and the window of x channels their groups read.
    int n0, k0, kg, cbase, cwin;
    if (PACKED) {
        n0 = blockIdx.y * BN;
        const int g_first = n0 / s.k_per_group;
        const int g_last = (min(n0 + BN, s.k) - 1) / s.k_per_group;
        k0 = 0;
        kg = s.k;
        cbase = g_first * s.c_per_group;
        cwin = (g_last - g_first + 1) * s.c_per_group;
    } else {
        const GroupTile gt = group_tile(s.k_per_group, BN);
        n0 = gt.n0;
        k0 = gt.g * s.k_per_group;
        kg = s.k_per_group;
        cbase = gt.g * s.c_per_group;
        cwin = s.c_per_group;
    }
    FwdLoader<G, ALIGN, D3, PACKED> ld(x, w, s, m0, cbase, cwin, k0, n0);
    const int total = s.r * s.s * (D3 ? s.t : 1) * ((cwin + BK - 1) / BK);
    const int it0 = blockIdx.z * iters_per_split;
    const int iters = min(iters_per_split, total - it0);  // >= 1: the host sizes the splits
    if (it0 > 0) ld.seek(it0, s);
    typename G::Acc acc;
    G::mainloop(ld, iters, smem, acc);
    float* Cs = reinterpret_cast<float*>(smem);
    G::stage_acc(acc, Cs);
    __syncthreads();
    const int pq = s.p * s.q * (D3 ? s.o : 1);
    const cl::index_t rows = (cl::index_t)s.n * pq;
    if (gridDim.z > 1) {
        float* part = ws + (cl::index_t)blockIdx.z * rows * s.k + k0;
        store_partials<G>(Cs, part, rows, s.k, kg, m0, n0);
    } else if (out_nchw) {
        const cl::index_t plane = (cl::index_t)k0 * pq;  // the group's first channel plane
        store_tile_nchw<G>(Cs, y + plane, z + plane, bias + k0, e, rows, s.k, kg, pq, m0, n0);
    } else {
        store_tile_nhwc<G>(Cs, y + k0, z + k0, bias + k0, e, rows, s.k, kg, m0, n0);
    }
}

// bf16 MMA exists from sm_80; older targets get a trapping body the solver never launches.
template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3,
          bool PACKED = false>
struct Fwd {
    __device__ static void go(const T* x, const T* w, T* y, const T* z, const T* bias,
                              const ConvShape& s, const ConvEpilogue& e, float* ws, int ips,
                              int out_nchw) {
        fwd_body<T, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED>(x, w, y, z, bias, s, e, ws,
                                                                   ips, out_nchw);
    }
};
#if !CL_MMA_SM80
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3, bool PACKED>
struct Fwd<__nv_bfloat16, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED> {
    __device__ static void go(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                              const __nv_bfloat16*, const __nv_bfloat16*, const ConvShape&,
                              const ConvEpilogue&, float*, int, int) {
        __trap();
    }
};
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3, bool PACKED>
struct Fwd<float, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED> {  // TF32 MMA: sm_80+
    __device__ static void go(const float*, const float*, float*, const float*, const float*,
                              const ConvShape&, const ConvEpilogue&, float*, int, int) {
        __trap();
    }
};
#endif

}  // namespace tcconv

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_fwd(const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z,
                const T* __restrict__ bias, ConvShape s, ConvEpilogue e, float* __restrict__ ws,
                int iters_per_split, int out_nchw) {
    tcconv::Fwd<T, BM, BN, BK, WM, WN, STAGES, ALIGN, false>::go(x, w, y, z, bias, s, e, ws,
                                                                 iters_per_split, out_nchw);
}

// Grouped convolution whose groups have fewer output channels than BN: blocks of BN
// consecutive output channels of several groups, each block's B the block-diagonal matrix
// of their filters (FwdLoader's PACKED); grid (ceil(N*P*Q / BM), ceil(K / BN)); no split-K.
// The 16-bit 64x64 tile asks for 6 blocks per SM: left to itself, ptxas (sm_90) kept it at
// 72 registers and spilled a word its main loop reloads; 76 and no spill with the hint
// (0: no hint, the other tiles' registers as the unpacked kernel's, none spilling).
template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32,
                                  sizeof(T) == 2 && WM * WN == 32 * 32 && ALIGN == 8 ? 6 : 0)
    tc_conv_fwd_packed(const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z,
                       const T* __restrict__ bias, ConvShape s, ConvEpilogue e,
                       float* __restrict__ ws, int iters_per_split, int out_nchw) {
    tcconv::Fwd<T, BM, BN, BK, WM, WN, STAGES, ALIGN, false, true>::go(
        x, w, y, z, bias, s, e, ws, iters_per_split, out_nchw);
}

// The same for 3-D (NDHWC + KTRSC; NCDHW through the conversion).
template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32,
                                  sizeof(T) == 2 && WM * WN == 32 * 32 && ALIGN == 8 ? 6 : 0)
    tc_conv_fwd_packed_3d(const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z,
                          const T* __restrict__ bias, ConvShape s, ConvEpilogue e,
                          float* __restrict__ ws, int iters_per_split, int out_nchw) {
    tcconv::Fwd<T, BM, BN, BK, WM, WN, STAGES, ALIGN, true, true>::go(
        x, w, y, z, bias, s, e, ws, iters_per_split, out_nchw);
}

// 3-D (NDHWC + KTRSC; NCDHW through the same conversion): the reduction walks (t, r, s)
// taps x channel slices.
template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_fwd_3d(const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z,
                   const T* __restrict__ bias, ConvShape s, ConvEpilogue e, float* __restrict__ ws,
                   int iters_per_split, int out_nchw) {
    tcconv::Fwd<T, BM, BN, BK, WM, WN, STAGES, ALIGN, true>::go(x, w, y, z, bias, s, e, ws,
                                                                iters_per_split, out_nchw);
}

// Split-K end of the forward: y = epilogue(sum over splits of ws[z][m][k]), the splits
// added in order (deterministic); NHWC, one thread per output element.
template <typename T>
__global__ void __launch_bounds__(256)
    tc_conv_fwd_splitk_epilogue(const float* __restrict__ ws, T* y, const T* z,
                                const T* __restrict__ bias, ConvEpilogue e, int splits,
                                long long count, int K, int PQ, int out_nchw) {
    for (cl::index_t i = cl::global_thread_id(); i < count; i += cl::grid_stride()) {
        float v = 0.0f;
        for (int sp = 0; sp < splits; ++sp) v += ws[(cl::index_t)sp * count + i];
        const cl::index_t m = i / K;
        const int k = (int)(i - m * K);
        cl::index_t off = i;
        if (out_nchw) {
            const cl::index_t n = m / PQ;
            off = (n * K + k) * PQ + (m - n * PQ);
        }
        conv::store_output(y, z, bias, e, off, k, v);
    }
}

// The NCHW path's layout conversion: out[n][hw][c] = in[n][c][hw] (x: NCHW -> NHWC; the
// filters: KCRS -> KRSC with n = K, hw = R*S), 32 x 32 tiles through shared memory so both
// the reads and the writes are coalesced. grid (ceil(HW / 32), ceil(C / 32), N), block (32, 8).
template <typename T>
__global__ void __launch_bounds__(256)
    tc_nchw_to_nhwc(const T* __restrict__ in, T* __restrict__ out, int C, int HW) {
    __shared__ T tile[32][33];
    const int hw0 = blockIdx.x * 32, c0 = blockIdx.y * 32;
    const cl::index_t base = (cl::index_t)blockIdx.z * C * HW;
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int c = c0 + i, hw = hw0 + threadIdx.x;
        if (c < C && hw < HW) tile[i][threadIdx.x] = in[base + (cl::index_t)c * HW + hw];
    }
    __syncthreads();
    for (int i = threadIdx.y; i < 32; i += 8) {
        const int hw = hw0 + i, c = c0 + threadIdx.x;
        if (c < C && hw < HW) out[base + (cl::index_t)hw * C + c] = tile[threadIdx.x][i];
    }
}

// ------------------------------------------------------------------ backward filter
// dw[k][(r, s, c)] = sum over output pixels (n, p, q) of dy[n, p, q, k] * x[n, h, w, c],
// h = p * stride_h - pad_h + r * dil_h (w likewise): per group a GEMM with M = K/groups,
// N = R*S*C/groups and the reduction over N*P*Q (grid.y group-major over the groups' row
// tiles; dy, x and the partials offset to the group, dy's rows K and x's pixels C apart),
// both operands contiguous along their M / N side in NHWC, so both
// tiles are [BK][BM] / [BK][BN] (reduction rows) and reach the fragments through
// ldmatrix.trans (16-bit types), or for T = float (TF32, sm_80+) through 32-bit shared
// loads from rows padded by 8 floats (tc_gemm.cuh: ldmatrix.trans moves 16-bit halves).
// Split-K: blockIdx.z takes `chunk` output pixels (a multiple of BK) and
// writes fp32 partials to ws[z][k][rsc]; bwd_filter_reduce (conv/splitk_reduce.cuh) sums the
// splits in a fixed order: deterministic.
//
// Kernel: tc_conv_bwd_filter<T, BM, BN, BK, WM, WN, STAGES, ALIGN> (ALIGN divides K and C;
// T __half, __nv_bfloat16 or float for math="tf32")
// grid (ceil(R*S*C/groups / BN), groups * ceil(K/groups / BM), splits),
// block (BM / WM) * (BN / WN) * 32.
//
// Kernel: tc_conv_bwd_filter_3d<same parameters>: 3-D, NDHWC + KTRSC: the GEMM's N is
// T*R*S*C, the reduction N*O*P*Q; each thread's B column carries a depth tap and its pixel
// a depth coordinate (D3 in the loader; the 2-D instantiation has none of it).

namespace tcconv {

template <class G, int ALIGN, bool D3>
struct BwdFilterLoader {
    typedef typename G::T T;
    enum {
        A_CPR = G::BM / ALIGN, A_RPP = G::THREADS / A_CPR, A_PASSES = G::BK / A_RPP,
        B_CPR = G::BN / ALIGN, B_RPP = G::THREADS / B_CPR, B_PASSES = G::BK / B_RPP,
        BYTES = ALIGN * (int)sizeof(T),  // per cp.async
    };
    static_assert(G::THREADS % A_CPR == 0 && G::THREADS % B_CPR == 0, "fixed columns");
    static_assert(A_PASSES >= 1 && B_PASSES >= 1 && G::BK % A_RPP == 0 && G::BK % B_RPP == 0,
                  "whole passes");

    // A (dy): row npq at dy + npq * K; this thread's k chunk is fixed.
    const T* a_ptr;  // dy at (first row of this thread, k chunk)
    bool a_kok;
    int a_dst[A_PASSES];
    // B (x): this thread's (r, s, c) is fixed; it copies B_PASSES consecutive rows (output
    // pixels) of each tile, so one (n, p, q) carries through them by increments.
    int b_dst[B_PASSES];
    bool b_colok;
    int b_rh, b_rw;                 // r * dil_h - pad_h, s * dil_w - pad_w
    int b_n, b_p, b_q;              // the pixel of this thread's first row of the next tile
    int b_c;                        // x's channel: g * Cg + c
    int b_rd, b_o;                  // D3: td * dil_d - pad_d; the pixel's depth o
    const T* x;
    int H, W, C, P, Q, stride_h, stride_w, K;  // C, K: x's pixel and dy's row strides
    int D, O, stride_d;             // D3 only
    cl::index_t row, end;           // first npq row of the next tile, end of this split
    int a_row0, b_row0;

    // The GEMM's rows are kcount dy channels from kbase (m0: the tile's first of them), its
    // columns (taps, cwin x channels from cbase): a group's (g * Kg, Kg, g * Cg, Cg: offsets,
    // so the loop's x addresses stay on the kernel's pointer), or packed the block's K rows
    // and the window of x channels their groups read.
    __device__ BwdFilterLoader(const T* x_, const T* dy, const ConvShape& s, int kbase,
                               int kcount, int cbase, int cwin, int m0, int n0,
                               cl::index_t start, cl::index_t end_)
        : x(x_), H(s.h), W(s.w), C(s.c), P(s.p), Q(s.q), stride_h(s.stride_h),
          stride_w(s.stride_w), K(s.k), D(s.d), O(s.o), stride_d(s.stride_d), row(start),
          end(end_) {
        const int a_col = (threadIdx.x % A_CPR) * ALIGN;
        a_row0 = threadIdx.x / A_CPR;
        a_kok = m0 + a_col < kcount;
        a_ptr = dy + (start + a_row0) * s.k + kbase + m0 + a_col;
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i)
            a_dst[i] = G::a_index(a_row0 + i * A_RPP, a_col);
        const int b_col = (threadIdx.x % B_CPR) * ALIGN;
        b_row0 = threadIdx.x / B_CPR;
        const int rsc = n0 + b_col;
        b_colok = rsc < s.r * s.s * cwin * (D3 ? s.t : 1);
        const int c = rsc % cwin, trs = rsc / cwin, rs = D3 ? trs % (s.r * s.s) : trs;
        b_c = cbase + c;  // x's channel
        b_rh = (rs / s.s) * s.dil_h - s.pad_h;
        b_rw = (rs % s.s) * s.dil_w - s.pad_w;
        b_rd = D3 ? (trs / (s.r * s.s)) * s.dil_d - s.pad_d : 0;
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j)
            b_dst[j] = G::b_index(b_row0 * B_PASSES + j, b_col);
        const cl::index_t m = start + b_row0 * B_PASSES;  // decoded once per split
        b_q = (int)(m % s.q);
        const cl::index_t np = m / s.q;
        b_p = (int)(np % s.p);
        b_n = (int)(np / s.p);
        b_o = 0;
        if (D3) b_o = b_n % s.o, b_n /= s.o;
    }

    // The pixel after (n, o, p, q) (o: D3 only).
    __device__ static void next_pixel(int& n, int& o, int& p, int& q, int P_, int Q_, int O_) {
        if (++q == Q_) {
            q = 0;
            if (++p == P_) {
                p = 0;
                if (D3 && ++o < O_) return;
                o = 0;
                ++n;
            }
        }
    }

    __device__ void load(T* As, T* Bs) {
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i) {
            const bool ok = a_kok && row + a_row0 + i * A_RPP < end;
            cl::mma::cp_async<BYTES>(As + a_dst[i], a_ptr + (cl::index_t)i * A_RPP * K, ok);
        }
        int n = b_n, p = b_p, q = b_q, o = b_o;
        const cl::index_t first = row + b_row0 * B_PASSES;
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j) {
            const int h = p * stride_h + b_rh, w = q * stride_w + b_rw;
            bool ok = b_colok && first + j < end && (unsigned)h < (unsigned)H &&
                      (unsigned)w < (unsigned)W;
            int nd = n;  // D3: n * D + d
            if (D3) {
                const int d = o * stride_d + b_rd;
                ok = ok && (unsigned)d < (unsigned)D;
                nd = n * D + d;
            }
            const T* src = x + (((nd * H + h) * W + w) * C + b_c);  // x < 2^31 elements
            cl::mma::cp_async<BYTES>(Bs + b_dst[j], src, ok);
            next_pixel(n, o, p, q, P, Q, O);
        }
        // This thread's first row of the next tile, BK pixels on: carry without dividing.
        b_q += G::BK;
        while (b_q >= Q) {
            b_q -= Q;
            if (++b_p == P) {
                b_p = 0;
                if (D3 && ++b_o < O) continue;
                b_o = 0;
                ++b_n;
            }
        }
        row += G::BK;
        a_ptr += (cl::index_t)G::BK * K;
    }
};

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3,
          bool PACKED>
__device__ __forceinline__ void bwd_filter_body(const T* x, const T* dy, float* ws,
                                                const ConvShape& s, long long chunk) {
    typedef tc::Gemm<T, BM, BN, BK, WM, WN, STAGES, true, true> G;
    DYNAMIC_SHARED(T, smem);
    const int taps = s.r * s.s * (D3 ? s.t : 1);
    // The block's rows m0.. of its group (k0: the group's first filter), or PACKED m0.. of K
    // and the window of x channels (cwin from cbase) their groups read.
    int m0, k0, kcount, cbase, cwin, g_first = 0;
    const int n0 = blockIdx.x * BN;
    if (PACKED) {
        m0 = blockIdx.y * BM;
        g_first = m0 / s.k_per_group;
        const int g_last = (min(m0 + BM, s.k) - 1) / s.k_per_group;
        k0 = 0;
        kcount = s.k;
        cbase = g_first * s.c_per_group;
        cwin = (g_last - g_first + 1) * s.c_per_group;
        if (n0 >= taps * cwin) return;  // (uniform) the grid covers the widest window
    } else {
        const GroupTile gt = group_tile(s.k_per_group, BM);
        m0 = gt.n0;
        k0 = gt.g * s.k_per_group;
        kcount = s.k_per_group;
        cbase = gt.g * s.c_per_group;
        cwin = s.c_per_group;
    }
    const cl::index_t npq = (cl::index_t)s.n * s.p * s.q * (D3 ? s.o : 1);
    const cl::index_t start = (cl::index_t)blockIdx.z * chunk;
    const cl::index_t end = start + chunk < npq ? start + chunk : npq;
    const int iters = start < end ? (int)((end - start + BK - 1) / BK) : 0;
    BwdFilterLoader<G, ALIGN, D3> ld(x, dy, s, k0, kcount, cbase, cwin, m0, n0, start, end);
    typename G::Acc acc;
    G::mainloop(ld, iters, smem, acc);
    // Partials straight from the fragments: two consecutive rsc per register pair.
    const int rsc = taps * s.c_per_group;
    float* part = ws + ((cl::index_t)blockIdx.z * s.k + k0) * rsc;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
    const int wm0 = m0 + (warp / G::WARPS_N) * WM, wn0 = n0 + (warp % G::WARPS_N) * WN;
    if (PACKED) {
        // Only the block-diagonal entries are dw: row k's group's channels of each tap. The
        // lane's rows' groups (as window channels) and columns' (tap, window channel), once.
        const int cg = s.c_per_group, cols = taps * cwin;
        int row_c[G::MF][2], col_tap[G::NF][2], col_c[G::NF][2];
#pragma unroll
        for (int i = 0; i < G::MF; ++i)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int k = wm0 + 16 * i + (lane >> 2) + 8 * h;
                row_c[i][h] = (k / s.k_per_group - g_first) * cg;
            }
#pragma unroll
        for (int j = 0; j < G::NF; ++j)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
                const int col = wn0 + 8 * j + 2 * (lane & 3) + h;
                col_tap[j][h] = col / cwin;
                col_c[j][h] = col < cols ? col - col_tap[j][h] * cwin : -(1 << 30);
            }
#pragma unroll
        for (int i = 0; i < G::MF; ++i)
#pragma unroll
            for (int j = 0; j < G::NF; ++j)
#pragma unroll
                for (int v = 0; v < 4; ++v) {
                    const int k = wm0 + 16 * i + (lane >> 2) + 8 * (v >> 1);
                    const int c = col_c[j][v & 1] - row_c[i][v >> 1];  // in k's group
                    if (k < s.k && (unsigned)c < (unsigned)cg)
                        part[(cl::index_t)k * rsc + col_tap[j][v & 1] * cg + c] = acc[i][j][v];
                }
        return;
    }
    const int kg = s.k_per_group;
#pragma unroll
    for (int i = 0; i < G::MF; ++i)
#pragma unroll
        for (int j = 0; j < G::NF; ++j)
#pragma unroll
            for (int v = 0; v < 4; ++v) {
                const int k = wm0 + 16 * i + (lane >> 2) + 8 * (v >> 1);
                const int col = wn0 + 8 * j + 2 * (lane & 3) + (v & 1);
                if (k < kg && col < rsc) part[(cl::index_t)k * rsc + col] = acc[i][j][v];
            }
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3,
          bool PACKED = false>
struct BwdFilter {
    __device__ static void go(const T* x, const T* dy, float* ws, const ConvShape& s,
                              long long chunk) {
        bwd_filter_body<T, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED>(x, dy, ws, s, chunk);
    }
};
#if !CL_MMA_SM80
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3, bool PACKED>
struct BwdFilter<__nv_bfloat16, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED> {
    __device__ static void go(const __nv_bfloat16*, const __nv_bfloat16*, float*,
                              const ConvShape&, long long) {
        __trap();
    }
};
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3, bool PACKED>
struct BwdFilter<float, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED> {  // TF32 MMA: sm_80+
    __device__ static void go(const float*, const float*, float*, const ConvShape&, long long) {
        __trap();
    }
};
#endif

}  // namespace tcconv

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_filter(const T* __restrict__ x, const T* __restrict__ dy, float* __restrict__ ws,
                       ConvShape s, long long chunk) {
    tcconv::BwdFilter<T, BM, BN, BK, WM, WN, STAGES, ALIGN, false>::go(x, dy, ws, s, chunk);
}

// Grouped backward filter whose groups have fewer filters than BM (_3d: 3-D): blocks of BM
// consecutive filters of several groups against the (tap, window channel) columns of the
// x channels those groups read; only the block-diagonal entries are dw (PACKED).
// grid (ceil(R*S*widest window / BN), ceil(K / BM), splits).
template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_filter_packed(const T* __restrict__ x, const T* __restrict__ dy,
                              float* __restrict__ ws, ConvShape s, long long chunk) {
    tcconv::BwdFilter<T, BM, BN, BK, WM, WN, STAGES, ALIGN, false, true>::go(x, dy, ws, s, chunk);
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_filter_packed_3d(const T* __restrict__ x, const T* __restrict__ dy,
                                 float* __restrict__ ws, ConvShape s, long long chunk) {
    tcconv::BwdFilter<T, BM, BN, BK, WM, WN, STAGES, ALIGN, true, true>::go(x, dy, ws, s, chunk);
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_filter_3d(const T* __restrict__ x, const T* __restrict__ dy,
                          float* __restrict__ ws, ConvShape s, long long chunk) {
    tcconv::BwdFilter<T, BM, BN, BK, WM, WN, STAGES, ALIGN, true>::go(x, dy, ws, s, chunk);
}

// ------------------------------------------------------------------ backward data
// dx[n, h, w, c] = sum over (r, s, k) of dy[n, p, q, k] * w[k, r, s, c] where
// h = p * stride_h - pad_h + r * dil_h (w likewise): only taps with
// (h + pad_h - r * dil_h) % stride_h == 0 reach h. Phase decomposition: blockIdx.z picks a
// phase (ph, pw) of the dx pixels, h + pad_h = ph + stride_h * jh; for such pixels exactly
// the taps r with r * dil_h = ph (mod stride_h) contribute, at p = jh - (r * dil_h - ph) /
// stride_h. So each phase is a stride-1 correlation over its own taps: no wasted MMA on the
// gaps of the stride, no division per element, and the filter is read as stored (KRSC: k
// rows, c contiguous -> B tile [BK][BN], ldmatrix.trans; for T = float, TF32 on sm_80+,
// 32-bit shared loads from padded rows). A (dy) is [BM][BK], k contiguous.
//
// Kernel: tc_conv_bwd_data<T, BM, BN, BK, WM, WN, STAGES, ALIGN> (ALIGN divides K and C)
// grid (ceil(N * ceil(H / u_h) * ceil(W / u_w) / BM), groups * ceil(C/groups / BN),
// u_h * u_w); the epilogue (bias of conv_transpose, alpha/beta blending, activation) as the
// forward's. Groups: grid.y group-major over the groups' column tiles; dy, w and dx offset
// to the group (the reduction over its K/groups channels, dy's pixels K apart, dx's C).
//
// Kernel: tc_conv_bwd_data_3d<same parameters>: 3-D, NDHWC + KTRSC; phases (pd, ph, pw),
// grid z u_d * u_h * u_w, the rows (n, jd, jh, jw) and the taps (td, r, s) of the phase's
// lists, depth outermost (D3 in the loader; the 2-D instantiation has none of it).

namespace tcconv {

// The dx pixels and taps of one phase along one dimension.
struct Phase {
    int first;   // smallest dx coordinate of the phase (>= 0), or >= size: empty
    int count;   // dx coordinates of the phase: first, first + stride, ...
    int j0;      // (first + pad - ph) / stride: jh of the first coordinate
    int t0;      // first contributing tap, or >= taps: none
    int t_step;  // taps between contributing ones
    int dp0;     // (t0 * dil - ph) / stride: p = jh - dp
    int dp_step; // t_step * dil / stride
    int ntaps;   // contributing taps
};

__device__ inline Phase make_phase(int ph, int size, int pad, int stride, int taps, int dil) {
    Phase f;
    f.first = ((ph - pad) % stride + stride) % stride;  // h = ph - pad (mod stride), h >= 0
    f.count = f.first < size ? (size - f.first + stride - 1) / stride : 0;
    f.j0 = (f.first + pad - ph) / stride;
    f.t0 = 0;
    while (f.t0 < taps && ((f.t0 * dil - ph) % stride + stride) % stride != 0) ++f.t0;
    f.t_step = 1;
    while ((f.t_step * dil) % stride != 0) ++f.t_step;
    f.ntaps = f.t0 < taps ? (taps - 1 - f.t0) / f.t_step + 1 : 0;
    f.dp0 = f.t0 < taps ? (f.t0 * dil - ph) / stride : 0;
    f.dp_step = f.t_step * dil / stride;
    return f;
}

// PACKED (tc_conv_bwd_data_packed: groups of fewer dx channels than BN): the block's
// columns are BN consecutive dx channels of several groups, its reduction the window of dy
// channels those groups take (kwin from kbase), and B the block-diagonal matrix of their
// filters: a copy of column c's filter row k is read only where k is in c's group (b_lo).
template <class G, int ALIGN, bool D3, bool PACKED = false>
struct BwdDataLoader {
    typedef typename G::T T;
    enum {
        A_CPR = G::BK / ALIGN, A_RPP = G::THREADS / A_CPR, A_PASSES = G::BM / A_RPP,
        B_CPR = G::BN / ALIGN, B_RPP = G::THREADS / B_CPR, B_PASSES = G::BK / B_RPP,
        BYTES = ALIGN * (int)sizeof(T),
    };
    static_assert(G::THREADS % A_CPR == 0 && G::THREADS % B_CPR == 0, "fixed columns");
    static_assert(A_PASSES >= 1 && B_PASSES >= 1 && G::BK % B_RPP == 0, "whole passes");
    static_assert(A_RPP % 8 == 0, "passes keep the row swizzle (period 8)");

    const T* dy;
    const T* w;
    int a_off[A_PASSES];               // dy offset of (n, jh, jw, a_col): tap offset 0
    int a_jh[A_PASSES], a_jw[A_PASSES];  // jh, jw (far negative: a row past the phase)
    int a_jd[D3 ? A_PASSES : 1];       // D3: jd
    int a_dst, a_col;
    int b_off;                         // w offset of (first k row of this thread, tap 0, b_col)
    int b_lo;                          // PACKED: the column's group's first window row, minus
                                       // b_row0: (k0 + j * B_RPP - b_lo) in [0, Kg) reads
    int KGRP;                          // K/groups
    bool b_cok;
    int b_dst[B_PASSES];
    int b_row0, P, Q, K, KG, S, slices;  // K: dy's pixel stride; KG: the reduction's (kwin)
    int rsc;  // R*S*Cg (D3: T*R*S*Cg); 32-bit offsets: the solver keeps dy and w below 2^31
              // elements
    // Iterator: contributing tap (ir, is) of the phase lists, k slice k0.
    int ir, is, k0, nr, ns, dph, dpw, dph0, dpw0, dph_step, dpw_step, s_step;
    int a_tap;  // -(dph * Q + dpw) * K + k0
    int b_tap;  // (r * S + s) * C + k0 * rsc
    int r0, s0, r_step, C;  // C: the group's channels (Cg), a filter row's inner extent
    int dpd, dpd_step, td_step, r_span, R, O;  // D3: the depth tap list (iters bound it)

    // The reduction runs over kwin dy channels from kbase (a group's: g * Kg and Kg, 32-bit
    // offsets, so the loop's addresses stay on the kernel's pointers; PACKED: the window of
    // the block's groups). n0: the tile's first channel within the group, or PACKED of C.
    __device__ BwdDataLoader(const T* dy_, const T* w_, const ConvShape& s, const Phase& fd,
                             const Phase& fh, const Phase& fw, cl::index_t m0, int kbase,
                             int kwin, int n0)
        : dy(dy_), w(w_), KGRP(s.k_per_group), P(s.p), Q(s.q), K(s.k), KG(kwin), S(s.s),
          C(s.c_per_group), R(s.r), O(s.o) {
        rsc = s.r * s.s * C * (D3 ? s.t : 1);
        a_col = (threadIdx.x % A_CPR) * ALIGN;
        const int a_row0 = threadIdx.x / A_CPR;
        a_dst = G::a_index(a_row0, a_col);
        const cl::index_t rows = (cl::index_t)s.n * fh.count * fw.count * (D3 ? fd.count : 1);
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i) {
            const cl::index_t m = m0 + a_row0 + i * A_RPP;
            int n = 0, ih = 0, iw = 0, idd = 0;
            if (m < rows) {
                iw = (int)(m % fw.count);
                const cl::index_t nh = m / fw.count;
                ih = (int)(nh % fh.count);
                n = (int)(nh / fh.count);
                if (D3) idd = n % fd.count, n /= fd.count;
            }
            a_jh[i] = m < rows ? fh.j0 + ih : -(1 << 30);
            a_jw[i] = fw.j0 + iw;
            // (A row past the phase: offset of jh = 0, never read; no overflow.)
            int nd = n;  // D3: n * O + jd
            if (D3) {
                a_jd[D3 ? i : 0] = fd.j0 + idd;
                nd = n * s.o + (m < rows ? fd.j0 + idd : 0);
            }
            a_off[i] = ((nd * s.p + (m < rows ? a_jh[i] : 0)) * s.q + a_jw[i]) * s.k + kbase +
                       a_col;
        }
        const int b_col = (threadIdx.x % B_CPR) * ALIGN;
        b_row0 = threadIdx.x / B_CPR;
        int c_local = n0 + b_col;
        b_lo = 0;
        if (PACKED) {  // column c of C: its group's channel and first window row
            b_cok = c_local < s.c;
            const int gc = c_local / C;
            c_local -= gc * C;
            b_lo = gc * KGRP - kbase - b_row0;
        } else {
            b_cok = c_local < C;
        }
        b_off = (kbase + b_row0) * rsc + c_local;
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j)
            b_dst[j] = G::b_index(b_row0 + j * B_RPP, b_col);
        slices = (KG + G::BK - 1) / G::BK;
        nr = fh.ntaps;
        ns = fw.ntaps;
        r0 = fh.t0;
        s0 = fw.t0;
        r_step = fh.t_step;
        s_step = fw.t_step;
        dph0 = fh.dp0;
        dpw0 = fw.dp0;
        dph_step = fh.dp_step;
        dpw_step = fw.dp_step;
        ir = is = k0 = 0;
        dph = dph0;
        dpw = dpw0;
        a_tap = -(dph * Q + dpw) * K;
        b_tap = (r0 * S + s0) * C;
        dpd = 0;
        if (D3) {
            dpd = fd.dp0;
            dpd_step = fd.dp_step;
            td_step = fd.t_step;
            r_span = fh.ntaps * fh.t_step;  // r advanced past the list: back by this
            a_tap -= dpd * P * Q * K;
            b_tap += fd.t0 * s.r * S * C;
        }
    }

    __device__ void load(T* As, T* Bs) {
        const bool k_ok = k0 + a_col < KG;
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i) {
            bool ok = k_ok && (unsigned)(a_jh[i] - dph) < (unsigned)P &&
                      (unsigned)(a_jw[i] - dpw) < (unsigned)Q;
            if (D3) ok = ok && (unsigned)(a_jd[D3 ? i : 0] - dpd) < (unsigned)O;
            cl::mma::cp_async<BYTES>(As + a_dst + i * A_RPP * G::BK, dy + (a_off[i] + a_tap), ok);
        }
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j) {
            const int k = k0 + b_row0 + j * B_RPP;
            const bool in = PACKED ? (unsigned)(k0 + j * B_RPP - b_lo) < (unsigned)KGRP : k < KG;
            cl::mma::cp_async<BYTES>(Bs + b_dst[j], w + (b_off + b_tap + j * B_RPP * rsc),
                                     b_cok && in);
        }
        // Next: the next k slice, or the first slice of the phase's next tap.
        k0 += G::BK;
        a_tap += G::BK;
        b_tap += G::BK * rsc;
        if (k0 >= KG) {
            a_tap -= k0;
            b_tap -= k0 * rsc;
            k0 = 0;
            if (++is < ns) {
                dpw += dpw_step;
                a_tap -= dpw_step * K;
                b_tap += s_step * C;
            } else {
                is = 0;
                ++ir;
                a_tap += ((dpw - dpw0) - dph_step * Q) * K;
                b_tap += (r_step * S - (ns - 1) * s_step) * C;
                dpw = dpw0;
                dph += dph_step;
                if (D3 && ir == nr) {  // the first tap (r0, s0) of the next depth tap
                    ir = 0;
                    a_tap += ((dph - dph0) * Q - dpd_step * P * Q) * K;
                    b_tap += (td_step * R - r_span) * S * C;
                    dph = dph0;
                    dpd += dpd_step;
                }
            }
        }
    }
};

// Writes the staged tile of one phase: row m -> dx pixel (n, first + stride * i); y, z and
// bias at the block's group, whose Cg channels are valid (PACKED: at channel 0, all C).
template <class G, bool D3, typename T>
__device__ void store_tile_phase(const float* Cs, T* y, const T* z, const T* bias,
                                 const ConvEpilogue& e, const ConvShape& s, const Phase& fd,
                                 const Phase& fh, const Phase& fw, int stride_h, int stride_w,
                                 cl::index_t m0, int n0, int Cg) {
    const cl::index_t rows = (cl::index_t)s.n * fh.count * fw.count * (D3 ? fd.count : 1);
    const int C = s.c;
    for (int idx = threadIdx.x; idx < G::BM * G::BN; idx += G::THREADS) {
        const int row = idx / G::BN, c = n0 + idx % G::BN;
        const cl::index_t m = m0 + row;
        if (m >= rows || c >= Cg) continue;
        const int iw = (int)(m % fw.count);
        const cl::index_t nh = m / fw.count;
        const int ih = (int)(nh % fh.count);
        int n = (int)(nh / fh.count);
        const int h = fh.first + ih * stride_h, w = fw.first + iw * stride_w;
        cl::index_t nd = n;  // D3: n * D + d
        if (D3) {
            const int d = fd.first + (n % fd.count) * s.stride_d;
            nd = (cl::index_t)(n / fd.count) * s.d + d;
        }
        const cl::index_t off = ((nd * s.h + h) * s.w + w) * C + c;
        const float zv = e.has_z ? cl::to_float(z[off]) : 0.f;
        const float bv = e.has_bias ? cl::to_float(bias[c]) : 0.f;
        y[off] = cl::from_float<T>(finish(e, Cs[row * G::C_LD + (c - n0)], zv, bv));
    }
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3,
          bool PACKED>
__device__ __forceinline__ void bwd_data_body(const T* dy, const T* w, T* dx, const T* z,
                                              const T* bias, const ConvShape& s,
                                              const ConvEpilogue& e) {
    typedef tc::Gemm<T, BM, BN, BK, WM, WN, STAGES, false, true> G;
    DYNAMIC_SHARED(T, smem);
    const int pw = blockIdx.z % s.stride_w, phd = blockIdx.z / s.stride_w;
    const int ph = D3 ? phd % s.stride_h : phd;
    Phase fd;  // D3 only
    if (D3) fd = make_phase(phd / s.stride_h, s.d, s.pad_d, s.stride_d, s.t, s.dil_d);
    const Phase fh = make_phase(ph, s.h, s.pad_h, s.stride_h, s.r, s.dil_h);
    const Phase fw = make_phase(pw, s.w, s.pad_w, s.stride_w, s.s, s.dil_w);
    const cl::index_t m0 = (cl::index_t)blockIdx.x * BM;
    const cl::index_t rows = (cl::index_t)s.n * fh.count * fw.count * (D3 ? fd.count : 1);
    if (m0 >= rows) return;  // a small phase: uniform exit
    // The block's dx channels n0.. of its group (cg0: the group's first; cvalid of them), or
    // PACKED n0.. of C and the window of dy channels their groups take.
    int n0, cg0, cvalid, kbase, kwin;
    if (PACKED) {
        n0 = blockIdx.y * BN;
        const int g_first = n0 / s.c_per_group;
        const int g_last = (min(n0 + BN, s.c) - 1) / s.c_per_group;
        cg0 = 0;
        cvalid = s.c;
        kbase = g_first * s.k_per_group;
        kwin = (g_last - g_first + 1) * s.k_per_group;
    } else {
        const GroupTile gt = group_tile(s.c_per_group, BN);
        n0 = gt.n0;
        cg0 = gt.g * s.c_per_group;
        cvalid = s.c_per_group;
        kbase = gt.g * s.k_per_group;
        kwin = s.k_per_group;
    }
    BwdDataLoader<G, ALIGN, D3, PACKED> ld(dy, w, s, fd, fh, fw, m0, kbase, kwin, n0);
    const int iters = fh.ntaps * fw.ntaps * (D3 ? fd.ntaps : 1) * ((kwin + BK - 1) / BK);
    typename G::Acc acc;
    G::mainloop(ld, iters, smem, acc);
    float* Cs = reinterpret_cast<float*>(smem);
    G::stage_acc(acc, Cs);
    __syncthreads();
    store_tile_phase<G, D3>(Cs, dx + cg0, z + cg0, bias + cg0, e, s, fd, fh, fw, s.stride_h,
                            s.stride_w, m0, n0, cvalid);
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3,
          bool PACKED = false>
struct BwdData {
    __device__ static void go(const T* dy, const T* w, T* dx, const T* z, const T* bias,
                              const ConvShape& s, const ConvEpilogue& e) {
        bwd_data_body<T, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED>(dy, w, dx, z, bias, s,
                                                                        e);
    }
};
#if !CL_MMA_SM80
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3, bool PACKED>
struct BwdData<__nv_bfloat16, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED> {
    __device__ static void go(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                              const __nv_bfloat16*, const __nv_bfloat16*, const ConvShape&,
                              const ConvEpilogue&) {
        __trap();
    }
};
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3, bool PACKED>
struct BwdData<float, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED> {  // TF32 MMA: sm_80+
    __device__ static void go(const float*, const float*, float*, const float*, const float*,
                              const ConvShape&, const ConvEpilogue&) {
        __trap();
    }
};
#endif

}  // namespace tcconv

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_data(const T* __restrict__ dy, const T* __restrict__ w, T* dx, const T* z,
                     const T* __restrict__ bias, ConvShape s, ConvEpilogue e) {
    tcconv::BwdData<T, BM, BN, BK, WM, WN, STAGES, ALIGN, false>::go(dy, w, dx, z, bias, s, e);
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_data_3d(const T* __restrict__ dy, const T* __restrict__ w, T* dx, const T* z,
                        const T* __restrict__ bias, ConvShape s, ConvEpilogue e) {
    tcconv::BwdData<T, BM, BN, BK, WM, WN, STAGES, ALIGN, true>::go(dy, w, dx, z, bias, s, e);
}

// Grouped backward data whose groups have fewer dx channels than BN (_3d: 3-D): blocks of BN
// consecutive dx channels of several groups, B the block-diagonal matrix of their filters
// (BwdDataLoader's PACKED); grid (rows, ceil(C / BN), phases).
template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_data_packed(const T* __restrict__ dy, const T* __restrict__ w, T* dx, const T* z,
                            const T* __restrict__ bias, ConvShape s, ConvEpilogue e) {
    tcconv::BwdData<T, BM, BN, BK, WM, WN, STAGES, ALIGN, false, true>::go(dy, w, dx, z, bias, s,
                                                                           e);
}

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_bwd_data_packed_3d(const T* __restrict__ dy, const T* __restrict__ w, T* dx,
                               const T* z, const T* __restrict__ bias, ConvShape s,
                               ConvEpilogue e) {
    tcconv::BwdData<T, BM, BN, BK, WM, WN, STAGES, ALIGN, true, true>::go(dy, w, dx, z, bias, s,
                                                                          e);
}
