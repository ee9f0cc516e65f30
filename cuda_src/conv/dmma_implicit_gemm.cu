// Convolution as implicit GEMMs on the fp64 tensor cores (DMMA: mma.sync m8n8k4 .f64
// through common/mma.cuh), for float64 on sm_80+: the forward (first), backward filter and
// backward data (their sections below), one main loop (dmma::mainloop).
//
// Forward GEMM view, one per group (below, C and K are a group's: C/groups, K/groups):
//   M  = N * P * Q     rows: output pixels (img, p, q)
//   Ng = K             columns: the group's output channels
//   Kg = C * R * S     reduction: taps (c, r, s) in the filter's memory order
//                      NCHW/KCRS: kk = (c * R + r) * S + s
//                      NHWC/KRSC: kk = (r * S + s) * C + c
//   A[m][kk] = x[img, c, p*u - pad_h + r*dil_h, q*v - pad_w + s*dil_w] (0 outside)
//   B[kk][n] = w[n][kk]   (a filter row is contiguous along kk in both layouts)
// 1-D arrives as 2-D with H = R = 1. 3-D (template argument D3 of each kernel, D = T = O = 1
// otherwise): the rows carry the depth d0 in their fourth int, the taps dd, and the
// reduction digits are four (NDHWC (c | s | r | t), NCDHW (s | r | t | c): Radix4).
//
// Kernel (T = double only: the tensor core's accumulation is double; sm_80+, mma.cuh
// traps below and the solver refuses older GPUs):
//   dmma_conv_fwd<NHWC, BM, BN, BK, WM, WN, D3>
// A block computes a BM x BN tile of y with (BM / WM) x (BN / WN) warps; a warp owns a
// WM x WN tile as (WM / 8) x (WN / 8) m8n8 fragments (two doubles of accumulator each per
// lane: 32 doubles for 32 x 32). The reduction advances in slices of BK staged in dynamic
// shared memory (2 * (BM + BN) * (BK + 4) doubles): two stages filled by cp.async (8-byte
// copies, zero-filled in the padding, past the last row, column and tap), then BK / 4 k4
// MMA steps per slice:
//   a = As[m][k4 + t], m = wm + 8i + g (the lane's rows);  b = Bs[n][k4 + t], n = wn + 8j + g
// (g = lane >> 2, t = lane & 3: mma.cuh's m8n8k4 layout). Both stages are m-/n-major with
// rows of BK + 4 doubles: the 16 lanes of a half-warp read 16 distinct 8-byte bank pairs
// (row pitch 20 doubles: 4g + t mod 16), and the loaders' writes (kk fastest) are
// contiguous runs of 16 doubles.
// Loaders: thread i owns the reduction column kk = i % BK of every slice, for A and for B,
// and the rows i / BK + j * (THREADS / BK). Its tap (offset, dh, dw) advances by BK per
// slice with adds and wraps (no division in the main loop); the rows' pixel decode is done
// once per block into shared memory, and each thread keeps its BM * BK / THREADS rows in
// registers (reading them from shared memory per slice took a quarter of the shared
// bandwidth the MMA fragments need). Invalid copies read nothing (cp.async src-size 0),
// so their addresses are formed without a select.
// Static figures (sm_90, ptxas + nvdisasm, benchmarks/sass_mix.py): 128 registers (the
// launch bound asks for 16 warps per SM: 64x64: 4 blocks, 128x64: 2; 3-D took 156-160
// without it), no spills; main loop 288-292 (128x64) and 318-319 (64x64) instructions for
// 64 DMMA (3-D: 315-316 and 344), of which about 60 are the UIADD3 no-ops ptxas pads between
// DMMAs. Per DMMA (2 SM cycles at the fp64 tensor rate) the fragments read 128 bytes of
// shared memory (1 cycle at 128 B/clk) and the copies write 64 (64x64) or 48 (128x64).
// Epilogue: conv_common.cuh's store_output (EpilogueFor<double>: exact double alpha,
// alpha2, activation coefficients; bias, residual z, activation fused).
//
// Groups (every direction; the GEMM views count a group's C/groups and K/groups channels):
// grid.y runs group-major over each group's tiles (conv::group_tile); the group's first
// channel enters once per block, in the rows' decoded offsets (x or dy) and the filter
// pointer or tap offsets, so the main loop is the same code as for groups == 1; pixels
// stay the full C (or K) apart channels-last, and a thread's digits count the group's
// channels (cg = C/groups, kg = K/groups in the code).
// Defines: none; every parameter is a template argument. One module per direction and
// dimensionality holds both layouts of its tiles (cudnnlite/solvers/conv/dmma_*.py).
// Index limits: x, w and y below 2^31 elements, and an image's padded span (32-bit offsets).
//
// Backward filter, dmma_conv_bwd_filter<NHWC, BM, BN, BK, WM, WN, D3> (solvers/conv/
// dmma_bwd_filter.py): dw = dy^T * im2col(x), the same block, warp and stage structure
// with the GEMM view
//   M  = K             rows: output channels
//   Ng = C * R * S     columns: filter taps in the filter's memory order (as kk above)
//   Kg = N * P * Q     reduction: output pixels (img, p, q), split over blockIdx.z in
//                      chunks of `chunk` pixels (a multiple of BK)
//   A[m][j] = dy[img_j, m, p_j, q_j]
//   B[j][n] = x[img_j, c_n, p_j*u - pad_h + r_n*dil_h, q_j*v - pad_w + s_n*dil_w] (0 outside)
// Both stages are stored m-/n-major with the slice's BK pixels along a row (the forward's
// fragment reads, unchanged). Loaders: thread i owns one pixel column j of every slice and
// the rows row + jj * ROW_STEP; the pixel is consecutive across the threads of a row in
// NCHW (dy and x are contiguous along q there) and the row in NHWC (contiguous along the
// channels). The pixel's digits (q | p | img) advance by BK per slice with adds and wraps;
// each thread decodes its B columns' taps once, before the loop. Each split writes its
// partial sums, doubles, to ws[split][k][col]; bwd_filter_reduce<double>
// (splitk_reduce.cuh) adds the splits in order (deterministic for every split count).
// 3-D: pixel digits (q | p | o | img). Static figures (sm_90): 124-128 registers, no spills,
// 16 warps per SM; main loop 309-333 instructions for 64 DMMA (3-D 336-376): the forward's
// shape, the loaders' per-slice pixel step a handful of adds, the taps in registers.
//
// Backward data, dmma_conv_bwd_data<NHWC, BM, BN, BK, WM, WN, D3> (solvers/conv/
// dmma_bwd_data.py): dx from dy and the filters as stored, any stride, by phases. Phase
// (ph, pw) = blockIdx.z (ph < stride_h, pw < stride_w) owns the dx pixels h = ph + u*ih,
// w = pw + v*iw. With a = (ph + pad_h) % u and i = (ph + pad_h) / u + ih, a tap r reaches
// such a pixel only when r*dil_h = a (mod u), from dy row p = i - (r*dil_h - a) / u; those
// taps are r0, r0 + rstep, ... (rstep = u / gcd(u, dil_h)), the same for every pixel of the
// phase. So each phase is a stride-1 correlation with its own taps, no MMA is spent on the
// stride's gaps and nothing divides per element:
//   M  = N * Hph * Wph   rows: the phase's dx pixels (img, ih, iw)
//   Ng = C               columns: input channels
//   Kg = K * Rph * Sph   reduction: (k fastest, then the phase's s taps, then its r taps)
//   A[m][kk] = dy[img, k, i - er, j - es] (0 outside), er = (r*dil_h - a) / u, es likewise
//   B[kk][n] = w[k, n, r, s] (read as stored: KCRS or KRSC)
// The forward's loaders, stages, fragments and epilogue otherwise (the rows' decode in
// shared memory, each thread's rows in registers, its reduction digits advanced by adds);
// the B column's filter offset is formed per slice from the digits. A phase without taps
// (a stride larger than the dilated filter leaves gaps) stores the epilogue of 0 (bias,
// blending). Blocks past their phase's rows return at once.
// 3-D: phases (pd, ph, pw), digits (k | ss | rr | tt). Static figures (sm_90): 128
// registers with the launch bound's 16 warps per SM (152-156 without it: 8-12 warps), no
// spills; main loop 292-310 instructions per 64 DMMA (3-D 335-352).
#include "common/cudnnlite.cuh"
#include "common/mma.cuh"
#include "conv/conv_common.cuh"
#include "conv/splitk_reduce.cuh"

namespace dmma {

constexpr int kFarAway = -(1 << 29);  // an h0 / dh that no tap brings inside the image

template <int BM_, int BN_, int BK_, int WM_, int WN_>
struct Tile {
    static constexpr int BM = BM_, BN = BN_, BK = BK_, WM = WM_, WN = WN_;
    static constexpr int WARPS_N = BN / WN;
    static constexpr int THREADS = 32 * (BM / WM) * WARPS_N;
    static constexpr int FM = WM / 8, FN = WN / 8;  // m8n8 fragments per warp
    static constexpr int PITCH = BK + 4;             // doubles per shared row
    static constexpr int A_STAGE = BM * PITCH, B_STAGE = BN * PITCH;
    static constexpr int ROW_STEP = THREADS / BK;    // rows one loader pass covers
    static constexpr int A_ROWS = BM / ROW_STEP, B_ROWS = BN / ROW_STEP;
    static_assert(BK % 4 == 0 && THREADS % BK == 0, "BK: k4 steps, whole loader rows");
    static_assert(BM % ROW_STEP == 0 && BN % ROW_STEP == 0, "loader rows tile the block");
    static_assert(WM % 8 == 0 && WN % 8 == 0, "warp tiles of m8n8 fragments");
};

// The warp's corner in the block tile and the lane's place in the m8n8k4 fragments
// (g = lane >> 2, t = lane & 3: mma.cuh's layout).
template <class Tl>
struct Lane {
    int wm, wn, g, t;
    __device__ __forceinline__ Lane() {
        const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
        g = lane >> 2, t = lane & 3;
        wm = (warp / Tl::WARPS_N) * Tl::WM, wn = (warp % Tl::WARPS_N) * Tl::WN;
    }
};

// The main loop of every DMMA kernel: acc = the sum over `slices` slices of BK, two stages
// (slice sl + 1 in flight while slice sl is multiplied; the barrier after the MMAs frees
// stage sl & 1 for the copies of slice sl + 2). load(stage) issues this thread's copies of
// the next slice into that stage. Per k4 step a lane reads a = As[wm + 8i + g][k4 + t] and
// b = Bs[wn + 8j + g][k4 + t] (both stages m-/n-major, rows of PITCH doubles).
template <class Tl, class Load>
__device__ __forceinline__ void mainloop(int slices, Load& load, const double* smem,
                                         const Lane<Tl>& l, double (&acc)[Tl::FM][Tl::FN][2]) {
#pragma unroll
    for (int i = 0; i < Tl::FM; ++i)
#pragma unroll
        for (int j = 0; j < Tl::FN; ++j) acc[i][j][0] = acc[i][j][1] = 0.0;
    if (slices > 0) load(0);
    cl::mma::cp_async_commit();
    for (int sl = 0; sl < slices; ++sl) {
        if (sl + 1 < slices) load((sl + 1) & 1);
        cl::mma::cp_async_commit();
        cl::mma::cp_async_wait<1>();  // slice sl has landed (this thread's copies)
        __syncthreads();              // ... and every thread's
        const double* as = smem + (sl & 1) * (Tl::A_STAGE + Tl::B_STAGE);
        const double* bs = as + Tl::A_STAGE;
        cl::mma::dmma_rows<Tl::FM, Tl::FN, Tl::BK / 4, Tl::PITCH>(acc, as, l.wm, bs, l.wn, l.g,
                                                                  l.t);
        __syncthreads();
    }
    cl::mma::cp_async_wait<0>();  // nothing left in flight at exit
}

using conv::Radix4;  // conv_common.cuh

// The reduction index kk of one thread as digits (fastest first) advanced by a fixed
// step. 2-D (conv::Radix3): NHWC (c | s | r) with radices (C, S), NCHW (s | r | c) with
// radices (S, R); 3-D (Radix4): NDHWC (c | s | r | t), NCDHW (s | r | t | c).
template <bool D3> struct DigitsFor { using type = conv::Radix3; };
template <> struct DigitsFor<true> { using type = Radix4; };
using Digits = conv::Radix3;

// cg: the group's channel count (the radix of c, the fastest digit channels-last).
template <bool NHWC, bool D3>
__device__ __forceinline__ void init_taps(typename DigitsFor<D3>::type& d, const ConvShape& s,
                                          int cg, int kk, int step) {
    if constexpr (D3) {
        if (NHWC) d.init(kk, step, cg, s.s, s.r);
        else d.init(kk, step, s.s, s.r, s.t);
    } else {
        if (NHWC) d.init(kk, step, cg, s.s);
        else d.init(kk, step, s.s, s.r);
    }
}

// The tap of reduction index kk (its digits): {x offset from the pixel (d0, h0, w0) of
// the group's channel 0, dh, dw, dd}; dh = kFarAway past the reduction's end (dd = 0 in
// 2-D). Channels-last pixels stay s.c apart whatever the group.
template <bool NHWC>
__device__ __forceinline__ int4 tap_of(const ConvShape& s, const conv::Radix3& d, bool live) {
    const int c = NHWC ? d.lo : d.hi, r = NHWC ? d.hi : d.mid, t = NHWC ? d.mid : d.lo;
    const int dh = r * s.dil_h, dw = t * s.dil_w;
    const int off = NHWC ? (dh * s.w + dw) * s.c + c : (c * s.h + dh) * s.w + dw;
    return make_int4(off, live ? dh : kFarAway, dw, 0);
}
template <bool NHWC>
__device__ __forceinline__ int4 tap_of(const ConvShape& s, const Radix4& d, bool live) {
    const int c = NHWC ? d.d0 : d.d3, sw = NHWC ? d.d1 : d.d0;
    const int r = NHWC ? d.d2 : d.d1, t = NHWC ? d.d3 : d.d2;
    const int dd = t * s.dil_d, dh = r * s.dil_h, dw = sw * s.dil_w;
    const int off = NHWC ? ((dd * s.h + dh) * s.w + dw) * s.c + c
                         : ((c * s.d + dd) * s.h + dh) * s.w + dw;
    return make_int4(off, live ? dh : kFarAway, dw, dd);
}

// A decoded filter column of backward filter: {x offset, dh, dw} and, in 3-D, dd (2-D
// keeps three registers per column).
template <bool D3> struct ColTap { int off, dh, dw; };
template <> struct ColTap<true> { int off, dh, dw, dd; };

// Whether (d, h, w) lies inside the input (the depth only in 3-D).
template <bool D3>
__device__ __forceinline__ bool inside(const ConvShape& s, int d, int h, int w) {
    const bool hw = (unsigned)h < (unsigned)s.h && (unsigned)w < (unsigned)s.w;
    if constexpr (D3) return hw && (unsigned)d < (unsigned)s.d;
    return hw;
}

}  // namespace dmma

#define DMMA_TILE dmma::Tile<BM, BN, BK, WM, WN>

// x: NCHW or NHWC; w: KCRS or KRSC; y (and z): the layout of x. z may be y and bias may
// be x when absent (e.has_z / e.has_bias say).
// D3: 3-D (x NCDHW or NDHWC, w KCTRS or KTRSC), the depth in the rows' and taps' 4th int.
template <bool NHWC, int BM, int BN, int BK, int WM, int WN, bool D3 = false>
__global__ void __launch_bounds__(DMMA_TILE::THREADS, 512 / DMMA_TILE::THREADS)
    dmma_conv_fwd(const double* __restrict__ x, const double* __restrict__ w, double* y,
                  const double* z, const double* bias, ConvShape s, EpilogueFor<double> e) {
    using Tl = DMMA_TILE;
    DYNAMIC_SHARED(double, smem);  // 2 * (A_STAGE + B_STAGE) doubles (dmma_igemm.py)
    __shared__ int4 rows[BM];  // {x offset of (img, d0, h0, w0, channel 0), h0, w0, d0}

    // The block's group and its first column within the group's Kg (grid.y group-major).
    const conv::GroupTile gt = conv::group_tile(s.k_per_group, BN);
    const int m0 = blockIdx.x * BM, n0 = gt.n0, cg = s.c_per_group, kg = s.k_per_group;
    const int pq = s.p * s.q, opq = s.o * pq, nrows = s.n * opq;
    const int ktot = cg * s.t * s.r * s.s;
    // x at the group's first channel, folded into each row's offset (no cost in the loop)
    const int xg = NHWC ? gt.g * cg : gt.g * cg * s.d * s.h * s.w;
    for (int i = threadIdx.x; i < BM; i += Tl::THREADS) {
        const int m = m0 + i;
        int4 r = make_int4(0, dmma::kFarAway, dmma::kFarAway, dmma::kFarAway);
        if (m < nrows) {
            const int img = m / opq, rem = m - img * opq;
            const int o = rem / pq, rem2 = rem - o * pq;
            const int p = rem2 / s.q, q = rem2 - p * s.q;
            r.y = p * s.stride_h - s.pad_h;
            r.z = q * s.stride_w - s.pad_w;
            r.w = o * s.stride_d - s.pad_d;  // 0 in 2-D (o = 0, pad_d = 0)
            r.x = xg + (NHWC ? (((img * s.d + r.w) * s.h + r.y) * s.w + r.z) * s.c
                             : ((img * s.c * s.d + r.w) * s.h + r.y) * s.w + r.z);
        }
        rows[i] = r;
    }

    // Loader state: this thread's reduction column and rows (module comment).
    const int col = threadIdx.x % BK, row = threadIdx.x / BK;
    int kk = col;
    typename dmma::DigitsFor<D3>::type it;
    dmma::init_taps<NHWC, D3>(it, s, cg, kk, BK);
    // B: filter row n0 + row of the group's Kg (each of Cg * T * R * S values)
    const double* wp = w + (cl::index_t)(gt.g * kg + n0 + row) * ktot + col;
    const int b_rows_left = kg - n0 - row;
    __syncthreads();  // rows[] decoded
    int4 my_rows[Tl::A_ROWS];  // this thread's A rows, in registers for the whole loop
#pragma unroll
    for (int j = 0; j < Tl::A_ROWS; ++j) my_rows[j] = rows[row + j * Tl::ROW_STEP];

    auto load = [&](int stage) {
        double* as = smem + stage * (Tl::A_STAGE + Tl::B_STAGE);
        double* bs = as + Tl::A_STAGE;
        const int4 tap = dmma::tap_of<NHWC>(s, it, kk < ktot);
#pragma unroll
        for (int j = 0; j < Tl::A_ROWS; ++j) {
            const int4 r = my_rows[j];
            const bool ok = dmma::inside<D3>(s, r.w + tap.w, r.y + tap.y, r.z + tap.z);
            cl::mma::cp_async<8>(as + (row + j * Tl::ROW_STEP) * Tl::PITCH + col,
                                 x + (unsigned)(r.x + tap.x), ok);
        }
#pragma unroll
        for (int j = 0; j < Tl::B_ROWS; ++j) {
            const bool ok = kk < ktot && j * Tl::ROW_STEP < b_rows_left;
            const cl::index_t off = (cl::index_t)j * Tl::ROW_STEP * ktot;
            cl::mma::cp_async<8>(bs + (row + j * Tl::ROW_STEP) * Tl::PITCH + col,
                                 wp + off, ok);
        }
        kk += BK;
        wp += BK;
        it.advance();
    };

    const dmma::Lane<Tl> l;
    const int g = l.g, t = l.t, wm = l.wm, wn = l.wn;
    double acc[Tl::FM][Tl::FN][2];
    const int slices = (ktot + BK - 1) / BK;
    dmma::mainloop<Tl>(slices, load, smem, l, acc);

    // The lane's cells: rows wm + 8i + g, columns wn + 8j + 2t + c (C/D fragment layout).
#pragma unroll
    for (int i = 0; i < Tl::FM; ++i) {
        const int m = m0 + wm + 8 * i + g;
        if (m >= nrows) continue;
        const int img = m / opq, rem = m - img * opq;
#pragma unroll
        for (int j = 0; j < Tl::FN; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int ng = n0 + wn + 8 * j + 2 * t + c;  // within the group
                if (ng >= kg) continue;
                const int n = gt.g * kg + ng;
                // NHWC: y[m][n]; NCHW: y[img][n][rem]
                const cl::index_t off = NHWC ? (cl::index_t)m * s.k + n
                                             : ((cl::index_t)img * s.k + n) * opq + rem;
                conv::store_output(y, z, bias, e, off, n, acc[i][j][c]);
            }
    }
}

// x: NCHW or NHWC; dy: the layout of x; ws: splits x K x (C/groups*R*S) doubles (module
// comment). D3: 3-D (NCDHW / NDHWC, KCTRS / KTRSC): pixel digits (q | p | o | img), taps
// with depth. The launch bound asks 16 warps per SM of the NCDHW kernels only (the 64x64
// one took 144 registers without it, 12 warps); the others get 0, no minimum, as if
// omitted: ptxas keeps them at 128 registers by itself, while asking 16 warps of them
// lengthened their loops by up to 15 instructions per 64 DMMA (and a minimum of 1 let
// them grow to 150-162 registers, 8-12 warps).
template <bool NHWC, int BM, int BN, int BK, int WM, int WN, bool D3 = false>
__global__ void __launch_bounds__(DMMA_TILE::THREADS, D3 && !NHWC ? 512 / DMMA_TILE::THREADS : 0)
    dmma_conv_bwd_filter(const double* __restrict__ x, const double* __restrict__ dy,
                         double* __restrict__ ws, ConvShape s, long long chunk) {
    using Tl = DMMA_TILE;
    DYNAMIC_SHARED(double, smem);  // 2 * (A_STAGE + B_STAGE) doubles (dmma_bwd_filter.py)

    // The block's group and its first row within the group's Kg (grid.y group-major).
    const conv::GroupTile gt = conv::group_tile(s.k_per_group, BM);
    const int n0 = blockIdx.x * BN, m0 = gt.n0, cg = s.c_per_group, kg = s.k_per_group;
    const int pq = s.p * s.q, opq = s.o * pq, npq = s.n * opq;
    const int rs = s.r * s.s, crs = cg * s.t * rs;  // a filter's values: Cg * T * R * S
    const long long begin = (long long)blockIdx.z * chunk;
    const int end = (int)(begin + chunk < npq ? begin + chunk : npq);

    // Loader state: this thread's pixel column and rows (module comment).
    const int col = NHWC ? threadIdx.x / Tl::ROW_STEP : threadIdx.x % BK;
    const int row = NHWC ? threadIdx.x % Tl::ROW_STEP : threadIdx.x / BK;
    int pix = (int)begin + col;
    typename dmma::DigitsFor<D3>::type px;  // (q | p | img), 3-D (q | p | o | img)
    if constexpr (D3) px.init(pix, BK, s.q, s.p, s.o);
    else px.init(pix, BK, s.q, s.p);
    // A: channel rows m0 + row + jj * ROW_STEP of the group's dy channels, a fixed offset.
    const int a_mul = NHWC ? 1 : opq;
    const int a_off = (gt.g * kg + m0 + row) * a_mul, a_step = Tl::ROW_STEP * a_mul;
    const int a_rows_left = kg - m0 - row;
    // B: this thread's filter columns, decoded once: {x offset (the group's channels), dh,
    // dw, dd} (dh far away past the last column).
    const int xg = NHWC ? gt.g * cg : gt.g * cg * s.d * s.h * s.w;
    dmma::ColTap<D3> taps[Tl::B_ROWS];
#pragma unroll
    for (int jj = 0; jj < Tl::B_ROWS; ++jj) {
        const int n = n0 + row + jj * Tl::ROW_STEP;
        const int trs = s.t * rs;
        const int c = NHWC ? n % cg : n / trs;     // within the group
        const int tap = NHWC ? n / cg : n % trs;  // (t * R + r) * S + sw
        const int sw = tap % s.s, tr = tap / s.s;
        const int r = D3 ? tr % s.r : tr, t = D3 ? tr / s.r : 0;
        const int dd = t * s.dil_d, dh = r * s.dil_h, dw = sw * s.dil_w;
        const int off = D3 ? (NHWC ? ((dd * s.h + dh) * s.w + dw) * s.c + c
                                   : ((c * s.d + dd) * s.h + dh) * s.w + dw)
                           : (NHWC ? (dh * s.w + dw) * s.c + c : (c * s.h + dh) * s.w + dw);
        taps[jj].off = xg + off;
        taps[jj].dh = n < crs ? dh : dmma::kFarAway;
        taps[jj].dw = dw;
        if constexpr (D3) taps[jj].dd = dd;
    }

    auto load = [&](int stage) {
        double* as = smem + stage * (Tl::A_STAGE + Tl::B_STAGE);
        double* bs = as + Tl::A_STAGE;
        const bool live = pix < end;
        int img, o, p, q;
        if constexpr (D3) img = px.d3, o = px.d2, p = px.d1, q = px.d0;
        else img = px.hi, o = 0, p = px.mid, q = px.lo;
        const int d0 = D3 ? o * s.stride_d - s.pad_d : 0, h0 = p * s.stride_h - s.pad_h;
        const int w0 = q * s.stride_w - s.pad_w;
        const int id = D3 ? img * s.d + d0 : img;  // NHWC: the x image-depth row
        const int dyb = (NHWC ? pix * s.k : (img * s.k) * opq + (o * s.p + p) * s.q + q) + a_off;
        const int xb = NHWC ? ((id * s.h + h0) * s.w + w0) * s.c
                            : (((D3 ? img * s.c * s.d + d0 : img * s.c)) * s.h + h0) * s.w + w0;
#pragma unroll
        for (int jj = 0; jj < Tl::A_ROWS; ++jj) {
            const bool ok = live && jj * Tl::ROW_STEP < a_rows_left;
            cl::mma::cp_async<8>(as + (row + jj * Tl::ROW_STEP) * Tl::PITCH + col,
                                 dy + (unsigned)(dyb + jj * a_step), ok);
        }
#pragma unroll
        for (int jj = 0; jj < Tl::B_ROWS; ++jj) {
            const dmma::ColTap<D3> tap = taps[jj];
            int dd = 0;
            if constexpr (D3) dd = tap.dd;
            const bool ok = live && dmma::inside<D3>(s, d0 + dd, h0 + tap.dh, w0 + tap.dw);
            cl::mma::cp_async<8>(bs + (row + jj * Tl::ROW_STEP) * Tl::PITCH + col,
                                 x + (unsigned)(xb + tap.off), ok);
        }
        pix += BK;
        px.advance();
    };

    const dmma::Lane<Tl> l;
    const int g = l.g, t = l.t, wm = l.wm, wn = l.wn;
    double acc[Tl::FM][Tl::FN][2];
    const int slices = end > begin ? (int)((end - begin + BK - 1) / BK) : 0;
    dmma::mainloop<Tl>(slices, load, smem, l, acc);

    // The lane's cells: rows wm + 8i + g, columns wn + 8j + 2t + c; this split's partials
    // (dw's rows: the K filters, Cg * T * R * S values each).
    double* out = ws + (cl::index_t)blockIdx.z * s.k * crs + (cl::index_t)gt.g * kg * crs;
#pragma unroll
    for (int i = 0; i < Tl::FM; ++i) {
        const int m = m0 + wm + 8 * i + g;
        if (m >= kg) continue;
#pragma unroll
        for (int j = 0; j < Tl::FN; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int n = n0 + wn + 8 * j + 2 * t + c;
                if (n < crs) out[(cl::index_t)m * crs + n] = acc[i][j][c];
            }
    }
}

// The phase of a backward-data block along one dimension (module comment): the first tap
// r0 that reaches it, the tap step, the tap count and the dy offsets of the first tap
// (er0) and per further tap (der); i0: the dy index of the phase's first pixel.
namespace dmma {
struct PhaseTaps {
    int r0, rstep, count, er0, der, i0, pixels;
};

__device__ __forceinline__ PhaseTaps phase_taps(int first, int extent, int taps, int pad,
                                                int stride, int dil) {
    const conv::Taps tp = conv::phase_taps(first, pad, stride, dil, taps);
    PhaseTaps t;
    const int a = (first + pad) % stride;
    t.i0 = (first + pad) / stride;
    t.pixels = first < extent ? (extent - first + stride - 1) / stride : 0;
    t.r0 = tp.first, t.rstep = tp.step, t.count = tp.count;
    t.er0 = t.count ? (t.r0 * dil - a) / stride : 0;
    t.der = t.rstep * dil / stride;
    return t;
}
}  // namespace dmma

// dy: NCHW or NHWC; w: KCRS or KRSC; dx (and z): the layout of dy. z may be dx and bias
// may be dy when absent (e.has_z / e.has_bias say).
// D3: 3-D (NCDHW / NDHWC, KCTRS / KTRSC): phases (pd, ph, pw), digits (k | ss | rr | tt).
template <bool NHWC, int BM, int BN, int BK, int WM, int WN, bool D3 = false>
__global__ void __launch_bounds__(DMMA_TILE::THREADS, 512 / DMMA_TILE::THREADS)
    dmma_conv_bwd_data(const double* __restrict__ dy, const double* __restrict__ w,
                       double* dx, const double* z, const double* bias, ConvShape s,
                       EpilogueFor<double> e) {
    using Tl = DMMA_TILE;
    DYNAMIC_SHARED(double, smem);  // 2 * (A_STAGE + B_STAGE) doubles (dmma_bwd_data.py)
    __shared__ int4 rows[BM];  // {dy offset of (img, id, i, j, channel 0), i, j, id}

    const int phw = s.stride_h * s.stride_w;
    const int pd = blockIdx.z / phw, ph = blockIdx.z % phw / s.stride_w;
    const int pw = blockIdx.z % s.stride_w;
    const dmma::PhaseTaps td = dmma::phase_taps(pd, s.d, s.t, s.pad_d, s.stride_d, s.dil_d);
    const dmma::PhaseTaps th = dmma::phase_taps(ph, s.h, s.r, s.pad_h, s.stride_h, s.dil_h);
    const dmma::PhaseTaps tw = dmma::phase_taps(pw, s.w, s.s, s.pad_w, s.stride_w, s.dil_w);
    const int hw = th.pixels * tw.pixels, dhw = td.pixels * hw, nrows = s.n * dhw;
    // The block's group and its first column within the group's Cg (grid.y group-major).
    const conv::GroupTile gt = conv::group_tile(s.c_per_group, BN);
    const int m0 = blockIdx.x * BM, n0 = gt.n0, cg = s.c_per_group, kg = s.k_per_group;
    if (m0 >= nrows) return;  // the whole block: no barrier reached
    const int pq = s.p * s.q, opq = s.o * pq;
    const int ktot = kg * td.count * th.count * tw.count;
    const int dyg = NHWC ? gt.g * kg : gt.g * kg * opq;  // dy at the group's first channel
    for (int i = threadIdx.x; i < BM; i += Tl::THREADS) {
        const int m = m0 + i;
        int4 r = make_int4(0, dmma::kFarAway, dmma::kFarAway, dmma::kFarAway);
        if (m < nrows) {
            const int img = m / dhw, rem = m - img * dhw;
            const int id = rem / hw, rem2 = rem - id * hw;
            const int ih = rem2 / tw.pixels, iw = rem2 - ih * tw.pixels;
            r.y = th.i0 + ih;
            r.z = tw.i0 + iw;
            r.w = td.i0 + id;  // 0 in 2-D
            r.x = dyg + (NHWC ? (((img * s.o + r.w) * s.p + r.y) * s.q + r.z) * s.k
                              : ((img * s.k * s.o + r.w) * s.p + r.y) * s.q + r.z);
        }
        rows[i] = r;
    }

    // Loader state: this thread's reduction column and rows; digits (k | ss | rr [| tt]).
    const int col = threadIdx.x % BK, row = threadIdx.x / BK;
    int kk = col;
    typename dmma::DigitsFor<D3>::type it;
    if constexpr (D3) it.init(kk, BK, kg, tw.count, th.count);
    else it.init(kk, BK, kg, tw.count);
    const int rs = s.r * s.s, trs = s.t * rs;
    const int b_mul = NHWC ? 1 : trs;  // filter offset per input channel
    // (w at the group's first filter: Kg filters of Cg * T * R * S values before it per g)
    const int b_off = gt.g * kg * cg * trs + (n0 + row) * b_mul, b_step = Tl::ROW_STEP * b_mul;
    const int b_rows_left = cg - n0 - row;
    __syncthreads();  // rows[] decoded
    int4 my_rows[Tl::A_ROWS];
#pragma unroll
    for (int j = 0; j < Tl::A_ROWS; ++j) my_rows[j] = rows[row + j * Tl::ROW_STEP];

    auto load = [&](int stage) {
        double* as = smem + stage * (Tl::A_STAGE + Tl::B_STAGE);
        double* bs = as + Tl::A_STAGE;
        const bool live = kk < ktot;
        int k, ss, rr_, tt;
        if constexpr (D3) k = it.d0, ss = it.d1, rr_ = it.d2, tt = it.d3;
        else k = it.lo, ss = it.mid, rr_ = it.hi, tt = 0;
        const int t = td.r0 + tt * td.rstep;
        const int r = th.r0 + rr_ * th.rstep, sw = tw.r0 + ss * tw.rstep;
        const int ed = td.er0 + tt * td.der;
        const int er = th.er0 + rr_ * th.der, es = tw.er0 + ss * tw.der;
        const int back = (-ed * s.p - er) * s.q - es;  // (id, i, j) -> dy pixel, channel 0
        const int a_off = NHWC ? back * s.k + k : k * opq + back;
        const int di = live ? -er : dmma::kFarAway;
        const int tap = (t * s.r + r) * s.s + sw;
        const int wb = (NHWC ? (k * trs + tap) * cg : k * cg * trs + tap) + b_off;
#pragma unroll
        for (int j = 0; j < Tl::A_ROWS; ++j) {
            const int4 rr = my_rows[j];
            const int ii = rr.y + di, jj = rr.z - es;
            bool ok = (unsigned)ii < (unsigned)s.p && (unsigned)jj < (unsigned)s.q;
            if constexpr (D3) ok = ok && (unsigned)(rr.w - ed) < (unsigned)s.o;
            cl::mma::cp_async<8>(as + (row + j * Tl::ROW_STEP) * Tl::PITCH + col,
                                 dy + (unsigned)(rr.x + a_off), ok);
        }
#pragma unroll
        for (int j = 0; j < Tl::B_ROWS; ++j) {
            const bool ok = live && j * Tl::ROW_STEP < b_rows_left;
            cl::mma::cp_async<8>(bs + (row + j * Tl::ROW_STEP) * Tl::PITCH + col,
                                 w + (unsigned)(wb + j * b_step), ok);
        }
        kk += BK;
        it.advance();
    };

    const dmma::Lane<Tl> l;
    const int g = l.g, t = l.t, wm = l.wm, wn = l.wn;
    double acc[Tl::FM][Tl::FN][2];
    const int slices = (ktot + BK - 1) / BK;
    dmma::mainloop<Tl>(slices, load, smem, l, acc);

    // The lane's cells: rows wm + 8i + g (dx pixels of the phase), columns wn + 8j + 2t + c.
#pragma unroll
    for (int i = 0; i < Tl::FM; ++i) {
        const int m = m0 + wm + 8 * i + g;
        if (m >= nrows) continue;
        const int img = m / dhw, rem = m - img * dhw;
        const int id = rem / hw, rem2 = rem - id * hw;
        const int ih = rem2 / tw.pixels, iw = rem2 - ih * tw.pixels;
        const int d = pd + id * s.stride_d, h = ph + ih * s.stride_h, wx = pw + iw * s.stride_w;
        const int sp = (d * s.h + h) * s.w + wx, dhw_in = s.d * s.h * s.w;
        const cl::index_t pix = (cl::index_t)img * dhw_in + sp;  // NHWC pixel
#pragma unroll
        for (int j = 0; j < Tl::FN; ++j)
#pragma unroll
            for (int c = 0; c < 2; ++c) {
                const int ng = n0 + wn + 8 * j + 2 * t + c;  // within the group
                if (ng >= cg) continue;
                const int n = gt.g * cg + ng;
                const cl::index_t off =
                    NHWC ? pix * s.c + n : ((cl::index_t)img * s.c + n) * dhw_in + sp;
                conv::store_output(dx, z, bias, e, off, n, acc[i][j][c]);
            }
    }
}

#undef DMMA_TILE
