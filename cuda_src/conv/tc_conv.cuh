// tc_conv.cuh — what the multistage tensor-core convolution kernels share (the forward in
// tc_implicit_gemm.cu, backward filter in tc_bwd_filter.cu, backward data in
// tc_bwd_data.cu): the grouped grid's tile decode and the epilogue's finishing step, on the
// main loop of tc_gemm.cuh.
#pragma once

#include "common/cudnnlite.cuh"
#include "conv/conv_common.cuh"
#include "conv/tc_gemm.cuh"

namespace tcconv {

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

}  // namespace tcconv
