"""Solver preferences without any tuning DB: a ranked list of candidate names from the
problem's features. The selector walks it and takes the first solver that applies,
fits the workspace limit and meets the determinism setting, so a heuristic never
picks an inapplicable solver; the remaining solvers of the family follow in registry
order as a last resort."""

from __future__ import annotations

from ..problems.conv import ConvProblem
from ..runtime.caps import Capabilities

DIRECT = "conv_fwd_direct"
DEPTHWISE = "conv_fwd_direct_depthwise"
IGEMM = "conv_fwd_implicit_gemm"
PRECOMP = "conv_fwd_implicit_precomp_gemm"
GEMM_1X1 = "conv_fwd_gemm_1x1"
WINO_2 = "conv_fwd_winograd_f2x2_3x3"
WINO_4 = "conv_fwd_winograd_f4x4_3x3"
WINO_FUSED = "conv_fwd_winograd_fused_f2x2_3x3"
WMMA = "conv_fwd_wmma_implicit_gemm"


def conv_fwd_ranking(p: ConvProblem, caps: Capabilities) -> list[str]:
    tensor_cores = (p.dtype == "fp16" and caps.fp16_tensor_cores) or (
        (p.dtype == "bf16" or p.math == "tf32") and caps.bf16_tensor_cores
    )
    winograd_shape = (
        p.ndim == 2
        and p.filter == (3, 3)
        and p.strides == (1, 1)
        and p.dilations == (1, 1)
        and p.groups == 1
    )
    if p.depthwise:
        # GEMM-based methods waste the tile on a channel of one: direct wins.
        return [DEPTHWISE, DIRECT]
    if p.pointwise:
        return ([WMMA] if tensor_cores else []) + [GEMM_1X1, IGEMM, DIRECT]
    if winograd_shape and min(p.c_per_group, p.k_per_group) >= 16:
        # Winograd's transforms pay off once there are enough channels to amortize
        # them; F(4x4) cuts more multiplies but needs tiles of 4 outputs to fill.
        big_image = min(p.out_spatial) >= 8
        wino = [WINO_4, WINO_2] if big_image else [WINO_2, WINO_4]
        return ([WMMA] if tensor_cores else []) + wino + [PRECOMP, IGEMM, DIRECT]
    if winograd_shape and p.c_per_group * p.k_per_group <= 64 * 64:
        return [WINO_FUSED, IGEMM, DIRECT]
    if tensor_cores:
        return [WMMA, PRECOMP, IGEMM, DIRECT]
    if p.c_per_group * p.filter_taps >= 32:
        return [PRECOMP, IGEMM, DIRECT]
    # Few channels (a network's stem, C = 3): GEMM tiles would be mostly padding.
    return [DIRECT, IGEMM]


RANKINGS = {"conv_fwd": conv_fwd_ranking}
