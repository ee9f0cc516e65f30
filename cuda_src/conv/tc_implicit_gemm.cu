// Multistage tensor-core implicit-GEMM convolution, forward, NHWC + KRSC, fp16 / bf16
// inputs (or fp32 with TF32 math), fp32 accumulation (mma.sync through conv/tc_gemm.cuh).
//
// GEMM view, per group: rows m = (n, p, q) output pixels, columns = the group's K/groups
// output channels, reduction over (r, s, c) of its C/groups channels in the filter's KRSC
// order, walked as R*S taps x ceil(C/groups / BK) channel slices: one stage holds BK
// channels of one tap. Groups: grid.y runs group-major over the groups' column tiles
// (group_window); the loaders reach the group's channels by 32-bit offsets (x's g *
// C/groups, w's K/groups filters from g * K/groups), the epilogue y + g * K/groups, and x's
// pixel stride stays C, so groups == 1 runs the same code. Groups narrower than BN:
// tc_conv_fwd_packed (several groups per block, below). No im2col buffer and no integer
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
#include "conv/tc_conv.cuh"
#include "conv/tc_wgmma.cuh"

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

// The taps of an output row whose window starts at (h0, w0): bit r where h0 + r * dil_h is
// inside the image, bit 16 + t where w0 + t * dil_w is (filters of at most 16 x 16 taps).
__device__ inline unsigned tap_mask(const ConvShape& s, int h0, int w0) {
    unsigned mask = 0;
    for (int k = 0; k < s.r; ++k)
        mask |= (unsigned)((unsigned)(h0 + k * s.dil_h) < (unsigned)s.h) << k;
    for (int k = 0; k < s.s; ++k)
        mask |= (unsigned)((unsigned)(w0 + k * s.dil_w) < (unsigned)s.w) << (16 + k);
    return mask;
}

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
    int b_off[PACKED ? B_PASSES : 1];  // PACKED: row j's w offset from b_pos: j * b_step
                                       // less its group's first window channel
    int b_lo[PACKED ? B_PASSES : 1];   // PACKED: window channel of row j's group's first
                                       // channel, minus col: c0 - b_lo in [0, Cg) reads
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
            a_mask[i] = m < rows ? tap_mask(s, h0, w0) : 0u;
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
        if (PACKED) {
            const int g_first = cbase / CG;  // the window's first group
#pragma unroll
            for (int j = 0; j < B_PASSES; ++j) {  // (a row past K is never read)
                const int k = n0 + row0 + j * ROWS_PER_PASS;
                const int first = (k / s.k_per_group - g_first) * CG;  // in the window
                b_off[PACKED ? j : 0] = j * b_step - first;
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

    // Reduction tiles in all: taps x slices of the cwin channels.
    __device__ static int total(const ConvShape& s, int cwin) {
        return s.r * s.s * (D3 ? s.t : 1) * ((cwin + G::BK - 1) / G::BK);
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
        b_pos += tap * CG + c0;
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
                                         w + (b_pos + b_off[jj]),
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
            b_pos += G::BK;
        } else {
            c0 = 0;
            a_tap += a_next_s;
            b_pos += b_next_s;
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

// FLAT (tc_conv_fwd_flat: few input channels, a network's stem): the solver pads x and w
// to C = ALIGN channels in the workspace (one 16-byte chunk per tap, zeros past the real
// channels), and the reduction runs over the flattened (tap, channel) index instead of
// slices of one tap's channels: a BK-wide slice holds CPR = BK / ALIGN whole taps, where
// the regular loader would fill a 32- or 64-channel slice with one tap's 8 channels and
// zeros. Each thread's chunk column is one tap of the slice, so its tap (r, t) advances by
// CPR per slice and its rows' validity (a_mask bits of r and t, as FwdLoader's) is rebuilt
// per slice; w (KRSC, C = ALIGN) is contiguous along the flattened index, so B is rows of
// R*S*C elements read BK at a time. Ungrouped 2-D only; taps past R*S (the last slice)
// zero-fill.
template <class G, int ALIGN>
struct FlatFwdLoader {
    typedef typename G::T T;
    enum {
        CPR = G::BK / ALIGN,  // taps per slice: a thread's chunk column is one tap
        ROWS_PER_PASS = G::THREADS / CPR,
        A_PASSES = G::BM / ROWS_PER_PASS,
        B_PASSES = G::BN / ROWS_PER_PASS,
        BYTES = ALIGN * (int)sizeof(T),
    };
    static_assert(G::THREADS % CPR == 0, "a thread keeps one column of the tile");
    static_assert(G::BM % ROWS_PER_PASS == 0 && G::BN % ROWS_PER_PASS == 0, "whole passes");
    static_assert(ROWS_PER_PASS % 8 == 0, "passes keep the row swizzle (period 8)");

    const T* x;
    const T* w;
    int a_off[A_PASSES];        // x offset of this row's (n, h0, w0, 0): tap (0, 0)
    unsigned a_mask[A_PASSES];  // bit r: h0 + r * dil_h inside; bit 16 + s: w0 + s * dil_w
    unsigned b_ok;              // bit j: B row j (a filter) below K
    int dst;                    // this thread's element offset in a stage
    int b_pos, b_step;          // w offset of (first k row, this thread's flat index); rows
    int r, t;                   // this thread's tap at the next slice (r >= R: past the end)
    int R, S, row_step, col_step;  // dil_h * W * C, dil_w * C: a tap's x offset steps

    __device__ FlatFwdLoader(const T* x_, const T* w_, const ConvShape& s, cl::index_t m0, int,
                             int, int, int n0)
        : x(x_), w(w_), R(s.r), S(s.s), row_step(s.dil_h * s.w * s.c),
          col_step(s.dil_w * s.c) {
        const int col = threadIdx.x % CPR;  // the chunk: tap col of each slice
        const int row0 = threadIdx.x / CPR;
        dst = G::a_index(row0, col * ALIGN);
        const cl::index_t rows = (cl::index_t)s.n * s.p * s.q;
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i) {
            const cl::index_t m = m0 + row0 + i * ROWS_PER_PASS;
            int n = 0, p = 0, q = 0;
            if (m < rows) {
                q = (int)(m % s.q);
                const cl::index_t np = m / s.q;
                n = (int)(np / s.p);
                p = (int)(np % s.p);
            }
            const int h0 = p * s.stride_h - s.pad_h, w0 = q * s.stride_w - s.pad_w;
            a_off[i] = ((n * s.h + h0) * s.w + w0) * s.c;
            a_mask[i] = m < rows ? tap_mask(s, h0, w0) : 0u;
        }
        const int rsc = s.r * s.s * s.c;
        b_ok = 0;
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j)
            if (n0 + row0 + j * ROWS_PER_PASS < s.k) b_ok |= 1u << j;
        b_pos = (n0 + row0) * rsc + col * ALIGN;
        b_step = ROWS_PER_PASS * rsc;
        r = col / S;
        t = col % S;
    }

    // Reduction tiles in all: the R*S taps, CPR per slice.
    __device__ static int total(const ConvShape& s, int) {
        return (s.r * s.s + CPR - 1) / CPR;
    }

    __device__ void seek(int it0, const ConvShape&) {
        const int tap = it0 * CPR + r * S + t;
        r = tap / S;
        t = tap % S;
        b_pos += it0 * G::BK;
    }

    __device__ void load(T* As, T* Bs) {
        const bool in = r < R;  // this thread's tap exists
        const int a_tap = r * row_step + t * col_step;
        const unsigned sel = (1u << r) | (0x10000u << t);  // the tap's two bits of a_mask
#pragma unroll
        for (int i = 0; i < A_PASSES; ++i) {
            const bool ok = in && (a_mask[i] & sel) == sel;
            cl::mma::cp_async<BYTES>(As + dst + i * ROWS_PER_PASS * G::BK,
                                     x + (a_off[i] + a_tap), ok);
        }
#pragma unroll
        for (int j = 0; j < B_PASSES; ++j)
            cl::mma::cp_async<BYTES>(Bs + dst + j * ROWS_PER_PASS * G::BK, w + (b_pos + j * b_step),
                                     in && ((b_ok >> j) & 1u));
        // The next slice: CPR taps on.
        t += CPR;
        while (t >= S) {
            t -= S;
            ++r;
        }
        b_pos += G::BK;
    }
};

// The loader of a forward kernel variant.
template <class G, int ALIGN, bool D3, bool PACKED, bool FLAT>
struct FwdLoaderOf {
    typedef FwdLoader<G, ALIGN, D3, PACKED> type;
};
template <class G, int ALIGN>
struct FwdLoaderOf<G, ALIGN, false, false, true> {
    typedef FlatFwdLoader<G, ALIGN> type;
};

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

// The forward on main loop G: tc::Gemm (mma.sync) or tc::WgGemm (wgmma), whose Loader
// contract, stage layout and accumulator staging are the same.
template <class G, int ALIGN, bool D3, bool PACKED, bool FLAT, typename T>
__device__ __forceinline__ void fwd_gemm_body(const T* x, const T* w, T* y, const T* z,
                                              const T* bias, const ConvShape& s,
                                              const ConvEpilogue& e, float* ws,
                                              int iters_per_split, int out_nchw) {
    enum { BM = G::BM, BN = G::BN };
    T* smem = G::shared();
    const cl::index_t m0 = (cl::index_t)blockIdx.x * BM;
    // The block's columns n0.. of its group (k0: the group's first channel of y; kg of them
    // valid), or PACKED n0.. of K and the window of x channels their groups read.
    const GroupWindow gw = group_window<PACKED>(s.k, s.k_per_group, s.c_per_group, BN);
    const int n0 = gw.n0, k0 = gw.out0, kg = gw.out_valid, cbase = gw.in0, cwin = gw.in_count;
    typedef typename FwdLoaderOf<G, ALIGN, D3, PACKED, FLAT>::type Loader;
    Loader ld(x, w, s, m0, cbase, cwin, k0, n0);
    const int total = Loader::total(s, cwin);
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

template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3,
          bool PACKED, bool FLAT>
__device__ __forceinline__ void fwd_body(const T* x, const T* w, T* y, const T* z, const T* bias,
                                         const ConvShape& s, const ConvEpilogue& e, float* ws,
                                         int iters_per_split, int out_nchw) {
    fwd_gemm_body<tc::Gemm<T, BM, BN, BK, WM, WN, STAGES, false, false>, ALIGN, D3, PACKED,
                  FLAT>(x, w, y, z, bias, s, e, ws, iters_per_split, out_nchw);
}

// bf16 MMA exists from sm_80; older targets get a trapping body the solver never launches.
template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3,
          bool PACKED = false, bool FLAT = false>
struct Fwd {
    __device__ static void go(const T* x, const T* w, T* y, const T* z, const T* bias,
                              const ConvShape& s, const ConvEpilogue& e, float* ws, int ips,
                              int out_nchw) {
        fwd_body<T, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED, FLAT>(x, w, y, z, bias, s, e,
                                                                         ws, ips, out_nchw);
    }
};
#if !CL_MMA_SM80
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3, bool PACKED,
          bool FLAT>
struct Fwd<__nv_bfloat16, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED, FLAT> {
    __device__ static void go(const __nv_bfloat16*, const __nv_bfloat16*, __nv_bfloat16*,
                              const __nv_bfloat16*, const __nv_bfloat16*, const ConvShape&,
                              const ConvEpilogue&, float*, int, int) {
        __trap();
    }
};
template <int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN, bool D3, bool PACKED,
          bool FLAT>
struct Fwd<float, BM, BN, BK, WM, WN, STAGES, ALIGN, D3, PACKED, FLAT> {  // TF32 MMA: sm_80+
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

// Few input channels (FlatFwdLoader): x and w padded to C = ALIGN channels in the
// workspace by tc_pad_channels; ungrouped 2-D; split-K as the plain kernel's.
template <typename T, int BM, int BN, int BK, int WM, int WN, int STAGES, int ALIGN>
__global__ void __launch_bounds__((BM / WM) * (BN / WN) * 32)
    tc_conv_fwd_flat(const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z,
                     const T* __restrict__ bias, ConvShape s, ConvEpilogue e,
                     float* __restrict__ ws, int iters_per_split, int out_nchw) {
    tcconv::Fwd<T, BM, BN, BK, WM, WN, STAGES, ALIGN, false, false, true>::go(
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

// Hopper (sm_90a): the forward's loader and epilogue on warpgroup MMAs (conv/tc_wgmma.cuh),
// 2-D and 1-D NHWC + KRSC (NCHW through the conversion), 16-byte copies (ALIGN 8: C/groups
// a multiple of 8), split-K as tc_conv_fwd's. Block BM / 64 warpgroups, BK 64. Other
// targets trap; the solver runs it on sm_90 only. _3d: NDHWC + KTRSC, as tc_conv_fwd_3d.
template <typename T, int BM, int BN, int STAGES, int ALIGN, bool D3>
__device__ __forceinline__ void fwd_wgmma(const T* x, const T* w, T* y, const T* z,
                                          const T* bias, const ConvShape& s,
                                          const ConvEpilogue& e, float* ws, int ips, int nchw) {
#if CL_WGMMA
    tcconv::fwd_gemm_body<tc::WgGemm<T, BM, BN, STAGES>, ALIGN, D3, false, false>(
        x, w, y, z, bias, s, e, ws, ips, nchw);
#else
    __trap();
#endif
}

template <typename T, int BM, int BN, int STAGES, int ALIGN>
__global__ void __launch_bounds__(BM * 2)
    tc_conv_fwd_wgmma(const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z,
                      const T* __restrict__ bias, ConvShape s, ConvEpilogue e,
                      float* __restrict__ ws, int iters_per_split, int out_nchw) {
    fwd_wgmma<T, BM, BN, STAGES, ALIGN, false>(x, w, y, z, bias, s, e, ws, iters_per_split,
                                               out_nchw);
}

template <typename T, int BM, int BN, int STAGES, int ALIGN>
__global__ void __launch_bounds__(BM * 2)
    tc_conv_fwd_wgmma_3d(const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z,
                         const T* __restrict__ bias, ConvShape s, ConvEpilogue e,
                         float* __restrict__ ws, int iters_per_split, int out_nchw) {
    fwd_wgmma<T, BM, BN, STAGES, ALIGN, true>(x, w, y, z, bias, s, e, ws, iters_per_split,
                                              out_nchw);
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

// The few-channel path's padding: out[n][hw][c] for c < CP = in's channel c (in NCHW when
// nchw, else NHWC: x, or the filters KCRS / KRSC with n = K and hw = R*S), 0 for C <= c <
// CP; one thread per output element (x is small where C is).
template <typename T>
__global__ void __launch_bounds__(256)
    tc_pad_channels(const T* __restrict__ in, T* __restrict__ out, int C, int CP, int HW,
                    long long count, int nchw) {
    for (cl::index_t i = cl::global_thread_id(); i < count; i += cl::grid_stride()) {
        const int c = (int)(i % CP);
        const cl::index_t pix = i / CP;  // n * HW + hw
        T v = cl::from_float<T>(0.0f);
        if (c < C) {
            const cl::index_t n = pix / HW, hw = pix - n * HW;
            v = in[nchw ? (n * C + c) * HW + hw : pix * C + c];
        }
        out[i] = v;
    }
}
