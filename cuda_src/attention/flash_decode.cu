// flash_decode.cu — flash-decoding: a few query rows (sq <= 16) against a long KV cache.
// The KV sequence is split across blocks so that small b * h still fills the GPU; each
// split writes a partial (o, lse) to an fp32 workspace and a combine kernel merges the
// splits with the logsumexp trick. fp32 math (FFMA) for fp32, fp16 and bf16 storage
// (A = float), double math for double storage (A = double: workspace, lse and the merge
// in double too), any head dims (zero-padded to HD), every masking feature (run-time mask
// kind and dropout, as in flash_fp32.cu). Building blocks and thread ownership:
// flash_fp32_tile.cuh.
//
// Kernels (the storage dtype and mask kind are run-time arguments, as in flash_fp32.cu):
//   flash_decode_split<BM, BN, HD, A>  grid (splits, b * hkv, row blocks): a block serves
//       BM rows of (GQA group head, query row) pairs of one kv head, so every K/V byte of
//       its split is read once for the whole group; keys [split's range) in BN tiles.
//   flash_decode_combine<A>          one warp per (b, hq, i) row: o = sum_s w_s o_s,
//       lse = log(sum_s 2^lse_s), w_s = 2^(lse_s - lse).
// Workspace: o_part [splits][b * hq * sq][dv] and lse_part [splits][b * hq * sq] (log2
// domain, -inf for a split that keeps nothing), both A.
#include "attention/flash_fp32_tile.cuh"

using namespace sdpa_fp32;

template <int BM, int BN, int HD, typename A = float>
__global__ void __launch_bounds__(kThreads, 2) flash_decode_split(
    // pointers (the storage dtype is `dtype`)
    const void* __restrict__ q, const void* __restrict__ k, const void* __restrict__ v,
    void* __restrict__ o, A* __restrict__ lse, const void* __restrict__ mask,
    const int* __restrict__ lengths_q, const int* __restrict__ lengths_kv,
    // sizes, strides, masking; the workspace
    const SdpaParamsT<A> p, const int dtype, const int mask_kind, A* __restrict__ o_part,
    A* __restrict__ lse_part) {
    using Tile = FwdTile<BM, BN, HD, A>;
    constexpr int RM = Tile::RM, CN = Tile::CN, LD = Tile::LD;
    DYNAMIC_SHARED(A, smem);
    const int split = blockIdx.x, splits = gridDim.x;
    const int bi = blockIdx.y / p.hkv, hk = blockIdx.y % p.hkv;
    const int rows = p.group * p.sq;  // (group head, query row) pairs of this kv head
    const int first = blockIdx.z * BM, last = min(first + BM, rows) - 1;
    const int tx = threadIdx.x % kTC, ty = threadIdx.x / kTC;
    const sdpa::Lengths L = sdpa::lengths_of(p, lengths_q, lengths_kv, bi);

    // Q rows: pair g -> head hk * group + g / sq, row g % sq.
    const long long q_off = bi * p.q_sb + (long long)hk * p.group * p.q_sh;
    const bool vec_q = Io<A>::vec_ok(q, q_off, p.q_ss, p.d, dtype) && (p.q_sh & 3) == 0;
    load_tile<BM, HD, LD>(smem, q, dtype, last - first + 1, p.d, vec_q, [&](int r) {
        const int g = first + r;
        return q_off + (g / p.sq) * p.q_sh + (g % p.sq) * p.q_ss;
    });
    int rh[RM], ri[RM], rlo[RM], rhi[RM];
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        const int g = first + ty + kTR * i;
        rh[i] = hk * p.group + min(g, rows - 1) / p.sq;
        ri[i] = g < rows ? g % p.sq : p.sq;  // padding rows see nothing (and are not written)
        const sdpa::KeyRange kr = sdpa::key_range(p, L, ri[i]);
        rlo[i] = kr.lo;
        rhi[i] = kr.hi;
    }
    // The block's query rows: one head's slice, or all of [0, sq) when it wraps.
    const bool one_head = first / p.sq == last / p.sq;
    const int i_lo = one_head ? first % p.sq : 0, i_hi = one_head ? last % p.sq : p.sq - 1;
    const BlockRange br = block_range(p, L, i_lo, i_hi);
    // Padding rows hold q = 0: finite scores, never written, so they do not keep a tile
    // from skipping the per-element test.
    const bool rows_in = i_hi < L.q && mask_kind == 0;
    const int kv_lo = br.lo / BN * BN;
    const int tiles = br.hi > kv_lo ? (br.hi - kv_lo + BN - 1) / BN : 0;
    const int per_split = (tiles + splits - 1) / splits;
    const int kv_begin = kv_lo + split * per_split * BN;
    const int kv_end = min(br.hi, kv_begin + per_split * BN);

    Tile t;
    t.run(p, smem, k, bi * p.k_sb + hk * p.k_sh, v, bi * p.v_sb + hk * p.v_sh, dtype, mask,
          mask_kind, bi, L, rh, ri, rlo, rhi, kv_begin, kv_end, rows_in ? br.lo_max : 1,
          rows_in ? br.hi_min : 0);

    const long long total = (long long)p.b * p.hq * p.sq;
#pragma unroll
    for (int i = 0; i < RM; ++i) {
        if (ri[i] >= p.sq) continue;
        const long long part = split * total + ((long long)bi * p.hq + rh[i]) * p.sq + ri[i];
        const A inv = t.l[i] > A(0) ? A(1) / t.l[i] : A(0);
        A* orow = o_part + part * p.dv;
#pragma unroll
        for (int c = 0; c < CN; ++c) {
            const int col = col_of(c, tx);
            if (col < p.dv) orow[col] = t.o[i][c] * inv;
        }
        if (tx == 0)
            lse_part[part] = t.l[i] > A(0) ? t.m[i] + cl::math::log2(t.l[i]) : -INFINITY;
    }
}

template <typename A>
__global__ void __launch_bounds__(kThreads) flash_decode_combine(
    void* __restrict__ o, A* __restrict__ lse, const A* __restrict__ o_part,
    const A* __restrict__ lse_part, const SdpaParamsT<A> p, const int dtype, const int splits) {
    const long long total = (long long)p.b * p.hq * p.sq;
    const long long row = (long long)blockIdx.x * (kThreads / 32) + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (row >= total) return;  // whole warps
    A mx = -INFINITY;
    for (int s = 0; s < splits; ++s) mx = cl::math::fmax(mx, lse_part[s * total + row]);
    const int i = (int)(row % p.sq), h = (int)(row / p.sq % p.hq), bi = (int)(row / p.sq / p.hq);
    const long long off = bi * p.o_sb + h * p.o_sh + i * p.o_ss;
    if (mx == -INFINITY) {  // nothing kept in any split
        for (int c = lane; c < p.dv; c += 32) Io<A>::store1(o, off + c, dtype, A(0));
        if (lane == 0) lse[row] = -INFINITY;
        return;
    }
    A sum = A(0);
    for (int s = 0; s < splits; ++s) sum += cl::math::exp2(lse_part[s * total + row] - mx);
    const A inv = A(1) / sum;
    for (int c = lane; c < p.dv; c += 32) {
        A acc = A(0);
        for (int s = 0; s < splits; ++s)
            acc = cl::math::fma(cl::math::exp2(lse_part[s * total + row] - mx),
                                o_part[(s * total + row) * p.dv + c], acc);
        Io<A>::store1(o, off + c, dtype, acc * inv);
    }
    if (lane == 0) lse[row] = (mx + cl::math::log2(sum)) * sdpa::Ln2<A>::value;
}
