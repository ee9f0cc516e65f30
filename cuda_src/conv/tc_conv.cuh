// tc_conv.cuh — what the multistage tensor-core convolution kernels share (the forward in
// tc_implicit_gemm.cu, backward filter in tc_bwd_filter.cu, backward data in
// tc_bwd_data.cu): the grouped grid's tile decode and the epilogue's finishing step, on the
// main loop of tc_gemm.cuh.
#pragma once

#include "common/cudnnlite.cuh"
#include "conv/conv_common.cuh"
#include "conv/tc_gemm.cuh"

namespace tcconv {

using conv::group_tile;  // (conv_common.cuh: grid.y group-major over a group's tiles)
using conv::GroupTile;

// A block's part of a grouped GEMM whose `tile`-wide dimension runs over `out` channels
// (out_g per group) reading in_g channels per group of the other operand: the block's
// first of them (n0), where its group's start in the output (out0) and how many from there
// are valid (out_valid), and the input channels it reduces over (in_count from in0). One
// group per block (a tile of its out_g), or PACKED: `tile` consecutive channels of several
// groups (out0 0, every channel valid) and the window of input channels they read
// (g_first: the window's first group).
struct GroupWindow {
    int n0, out0, out_valid, in0, in_count, g_first;
};
template <bool PACKED>
__device__ inline GroupWindow group_window(int out, int out_g, int in_g, int tile) {
    GroupWindow w;
    if (PACKED) {
        w.n0 = (int)blockIdx.y * tile;
        w.g_first = w.n0 / out_g;
        const int g_last = (min(w.n0 + tile, out) - 1) / out_g;
        w.out0 = 0;
        w.out_valid = out;
        w.in0 = w.g_first * in_g;
        w.in_count = (g_last - w.g_first + 1) * in_g;
    } else {
        const GroupTile gt = group_tile(out_g, tile);
        w.n0 = gt.n0;
        w.g_first = gt.g;
        w.out0 = gt.g * out_g;
        w.out_valid = out_g;
        w.in0 = gt.g * in_g;
        w.in_count = in_g;
    }
    return w;
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
