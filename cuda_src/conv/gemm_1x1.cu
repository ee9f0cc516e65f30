// Pointwise convolution (1x1 filter, stride 1, no padding; any groups) as a plain tiled
// GEMM, per group g:
//   NHWC: Y[m][g*Ng + n] = sum_c X[m][g*Cg + c] * W[g*Ng + n][c]      m over N*H*W pixels
//   NCHW: Y[img][g*Ng + n][hw] = sum_c W[g*Ng + n][c] * X[img][g*Cg + c][hw]
// (the NCHW case is the per-image product W * X, computed with M = N*H*W, m = (img, hw)
// so that one launch covers every image).
// Tiles, register blocking and the cp.async pipeline: conv/gemm_tiles.cuh. Unlike the
// implicit GEMM there is no tap decoding and no bounds check per tap.
//
// Kernels (T = float | __half | __nv_bfloat16 | double; accumulation in cl::acc_t<T>: fp32,
// fp64 for double; fused epilogue):
//   gemm_1x1<T, NHWC, BM, BN, BK, TM, TN, STAGES>
// Loads: w rows are contiguous along c (element copies, k-fastest); x is contiguous along c in
// NHWC (the same) and along hw in NCHW, where vec = 1 copies 4 pixels at once (16 bytes for
// fp32, two 16-byte copies for fp64; needs H*W % 4 == 0 and x aligned to 4 elements). vec = 0:
// the same 4 pixels one by one, each in its own image (a uniform branch). NHWC ignores vec.
// Defines: none; one module per (dtype, tile) with both layouts
// (cudnnlite/solvers/conv/gemm_1x1.py). Index limits: x, w, y below 2^31 elements.
#include "conv/gemm_tiles.cuh"

namespace gemm1x1 {

// NCHW A[m][c] = x[img(m), g*Cg + c, pix(m)]: 4 pixels per vector, threads walking m
// fastest (the row-fast layout of gemm_tiles.cuh); a thread's pixels are the same in every
// slice, its channels advance by BK.
template <typename T, class Tl>
struct PlaneLoader {
    using L = gemm::RowFast4<Tl, Tl::BM>;
    using Layout = L;
    static constexpr int VECS = L::VECS, VEC = 4;

    const T* __restrict__ x;
    int hw, cleft;        // H*W; channels left from the next slice's first one
    int cofs;             // offset of the next slice's first channel: c * H*W
    bool vec;
    int base[4];          // x offset of (pixel, group channel 0) per element, -1 past the end
    gemm::Offsets<L> offset;

    __device__ __forceinline__ PlaneLoader(const T* x_, const ConvShape& s, int m0, int g,
                                           bool vec_)
        : x(x_), hw(s.h * s.w), cleft(s.c_per_group), cofs(0), vec(vec_) {
        const int rows = s.n * hw;
#pragma unroll
        for (int v = 0; v < 4; ++v) {  // the same pixels for every vector of the thread
            const int m = m0 + L::row(0) + v;
            const int img = m / hw, pix = m - img * hw;  // once per block
            base[v] = m < rows ? (img * s.c + g * s.c_per_group) * hw + pix : -1;
        }
    }

    template <class Sink>
    __device__ __forceinline__ void next(Sink& sink) {
#pragma unroll
        for (int j = 0; j < VECS; ++j) {
            if (!L::live(j)) continue;
            const int c = L::k(j);
            const bool cin = c < cleft;
            const int coff = cofs + c * hw;
            if (vec) {  // 4 pixels of one image (H*W % 4 == 0): all or none past the end
                const bool ok = cin && base[0] >= 0;
                sink.template put<4>(j, 0, x + (base[0] + coff), ok);
            } else {
#pragma unroll
                for (int v = 0; v < 4; ++v) {
                    const bool ok = cin && base[v] >= 0;
                    sink.template put<1>(j, v, x + (base[v] + coff), ok);
                }
            }
        }
        cofs += Tl::BK * hw;
        cleft -= Tl::BK;
    }
};

}  // namespace gemm1x1

#define G1_TILE gemm::Tile<BM, BN, BK, TM, TN, STAGES>

template <typename T, bool NHWC, int BM, int BN, int BK, int TM, int TN, int STAGES>
__global__ void __launch_bounds__(G1_TILE::THREADS, G1_TILE::MIN_BLOCKS) gemm_1x1(
    // pointers: z may be y and bias may be x when absent (e.has_z / e.has_bias say)
    const T* __restrict__ x, const T* __restrict__ w, T* y, const T* z, const T* bias,
    // sizes (R = S = 1, P = H, Q = W), epilogue, vector loads (1: see the header comment)
    ConvShape s, EpilogueFor<T> e, int vec) {
    using Tl = G1_TILE;
    __shared__ __align__(16) typename gemm::Smem<T, Tl>::E smem[gemm::Smem<T, Tl>::ELEMS];

    const int tiles_n = (s.k_per_group + BN - 1) / BN;
    const int g = blockIdx.y / tiles_n;
    const int n0 = (blockIdx.y - g * tiles_n) * BN;
    const int m0 = blockIdx.x * BM;
    const int hw = s.h * s.w, rows = s.n * hw;
    const int slices = (s.c_per_group + BK - 1) / BK;

    gemm::ColLoader<T, Tl, BN> lb(w + (cl::index_t)(g * s.k_per_group + n0) * s.c_per_group,
                                  s.c_per_group, s.c_per_group, s.k_per_group - n0);
    cl::acc_t<T> acc[TM][TN];
    if constexpr (NHWC) {
        gemm::ColLoader<T, Tl, BM> la(x + (cl::index_t)m0 * s.c + g * s.c_per_group, s.c,
                                      s.c_per_group, rows - m0);
        gemm::run<T, Tl>(slices, la, lb, smem, acc);
    } else {
        gemm1x1::PlaneLoader<T, Tl> la(x, s, m0, g, vec != 0);
        gemm::run<T, Tl>(slices, la, lb, smem, acc);
    }

    const int tx = threadIdx.x % Tl::THREADS_N, ty = threadIdx.x / Tl::THREADS_N;
#pragma unroll
    for (int i = 0; i < TM; ++i) {
        const int m = m0 + Tl::row_of(ty, i);
        if (m >= rows) continue;
        const int img = m / hw, pix = m - img * hw;
#pragma unroll
        for (int j = 0; j < TN; ++j) {
            const int n = n0 + Tl::col_of(tx, j);
            if (n >= s.k_per_group) continue;
            const int k = g * s.k_per_group + n;
            const cl::index_t off = NHWC ? (cl::index_t)m * s.k + k
                                         : ((cl::index_t)img * s.k + k) * hw + pix;
            conv::store_output(y, z, bias, e, off, k, acc[i][j]);
        }
    }
}

#undef G1_TILE
