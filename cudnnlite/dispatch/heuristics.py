"""Solver preferences without any tuning DB: a ranked list of candidate names from the
problem's features. The selector walks it and takes the first solver that applies,
fits the workspace limit and meets the determinism setting, so a heuristic never
picks an inapplicable solver; the remaining solvers of the family follow in registry
order as a last resort."""

from __future__ import annotations

from ..problems.attention import AttentionProblem
from ..problems.conv import ConvProblem
from ..problems.rnn import RnnProblem
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
TC = "conv_fwd_tc_implicit_gemm"
WGMMA = "conv_fwd_tc_wgmma"
DMMA = "conv_fwd_dmma_implicit_gemm"
CUBLAS_1X1 = "conv_fwd_gemm_cublas_1x1"
BWD_DATA_CUBLAS_1X1 = "conv_bwd_data_gemm_cublas_1x1"
BWD_FILTER_CUBLAS_1X1 = "conv_bwd_filter_gemm_cublas_1x1"


def _cublas_pointwise(p: ConvProblem, caps: Capabilities) -> bool:
    """A large pointwise NHWC layer on a GPU: one cuBLAS GEMM on the tensors as they are
    (x[NHW, C] @ w[K, C]^T and its transposes), which a vendor GEMM runs faster than our
    tiles. Not on the emulator (NumPy's matmul there says nothing about the GPU) and not
    for NCHW, where backward filter takes one GEMM per image. Unmeasured on a GPU: the
    thresholds only keep tiny GEMMs (launch-bound) on our kernels."""
    if caps.emulator or not p.pointwise or not p.channels_last or p.groups != 1:
        return False
    pixels = p.n
    for v in p.spatial:
        pixels *= v
    return pixels >= 4096 and min(p.c, p.k) >= 64


def _multistage(p: ConvProblem, caps: Capabilities) -> bool:
    """The multistage tensor-core implicit GEMM (mma.sync, cp.async) before the WMMA
    kernels on a GPU, wherever it applies (fp16/bf16 with even C or C < 8 ungrouped, a
    stem's; TF32; NCHW through a layout conversion in the workspace): its large tiles'
    sm_90 main loops are 31-36% HMMA (the few-channel kernel's 24% on its hot path),
    where the WMMA forward's are 1-7%. Unmeasured on a GPU so far. Not on the emulator,
    where the rankings stay as they were."""
    return not caps.emulator and (p.dtype in ("fp16", "bf16") or p.math == "tf32")


def _wgmma(p: ConvProblem, caps: Capabilities) -> bool:
    """Hopper's warpgroup MMA before mma.sync on an sm_90 GPU whose own wgmma check passed
    (``caps.wgmma``), for fp16/bf16 (its solvers take C/groups a multiple of 8; the rest
    falls through to the mma.sync solvers): mma.sync reaches about half of an H100/H200's
    dense fp16 rate, wgmma the rest. Not for groups of fewer than 64 channels, which the
    mma.sync engine's packed kernels share tiles among (the wgmma ones run one GEMM per
    group). Unmeasured on a GPU so far (a tuning DB's entry overrides it). Not on the
    emulator (rankings stay as they were)."""
    wide = p.groups == 1 or min(p.c_per_group, p.k_per_group) >= 64
    return not caps.emulator and p.dtype in ("fp16", "bf16") and wide and caps.wgmma


def _winograd_dtype(p: ConvProblem) -> bool:
    """float64 never ranks Winograd (its transforms lose float64 accuracy; the solvers
    say so); its tensor-core flags are False already (no fp64 MMA in those solvers), so
    a float64 problem ranks depthwise / 1x1 GEMM / implicit GEMM / direct by shape."""
    return p.dtype != "fp64"


def _dmma(p: ConvProblem | AttentionProblem, caps: Capabilities) -> bool:
    """float64 on the fp64 tensor cores (mma.sync m8n8k4 .f64) on a GPU of sm_80+, for
    convolution and attention: an H200 does 67 TFLOP/s of DMMA against 34 of CUDA-core
    double FMA. Not on the emulator (the warp-collective MMA model is slow there; the
    rankings stay as they were)."""
    return p.dtype == "fp64" and not caps.emulator and caps.bf16_tensor_cores


def _dmma_fills(p: ConvProblem, per_group: int) -> bool:
    """Whether the DMMA kernels' one GEMM per group has a tile's worth of columns: any
    ungrouped layer, and grouped ones whose ``per_group`` channels (where the 64-wide
    tile's columns, or backward filter's rows, run) fill half a tile. Narrower groups
    would leave most of each tile to zero padding (no packed DMMA kernel): the CUDA-core
    ranking serves them, as it serves depthwise layers."""
    return p.groups == 1 or per_group >= 32


def conv_fwd_ranking(p: ConvProblem, caps: Capabilities) -> list[str]:
    if _dmma(p, caps) and _dmma_fills(p, p.k_per_group):
        # First, except behind cuBLAS's DGEMM on large pointwise NHWC layers (itself on
        # the fp64 tensor cores, and tuned further than one 64x64 tile).
        rest = [n for n in _conv_fwd_ranking(p, caps) if n != CUBLAS_1X1]
        return ([CUBLAS_1X1] if _cublas_pointwise(p, caps) else []) + [DMMA] + rest
    return _conv_fwd_ranking(p, caps)


def _conv_fwd_ranking(p: ConvProblem, caps: Capabilities) -> list[str]:
    tensor_cores = (p.dtype == "fp16" and caps.fp16_tensor_cores) or (
        (p.dtype == "bf16" or p.math == "tf32") and caps.bf16_tensor_cores
    )
    tc = [TC] if tensor_cores and _multistage(p, caps) else []
    if tc and _wgmma(p, caps):
        tc = [WGMMA, TC]
    winograd_shape = (
        _winograd_dtype(p)
        and p.ndim == 2
        and p.filter == (3, 3)
        and p.strides == (1, 1)
        and p.dilations == (1, 1)
        and p.groups == 1
    )
    if p.depthwise:
        # GEMM-based methods waste the tile on a channel of one: direct wins.
        return [DEPTHWISE, DIRECT]
    if p.pointwise:
        cublas = [CUBLAS_1X1] if _cublas_pointwise(p, caps) else []
        return cublas + tc + ([WMMA] if tensor_cores else []) + [GEMM_1X1, IGEMM, DIRECT]
    if winograd_shape and min(p.c_per_group, p.k_per_group) >= 16:
        # Winograd's transforms pay off once there are enough channels to amortize
        # them; F(4x4) cuts more multiplies but needs tiles of 4 outputs to fill.
        big_image = min(p.out_spatial) >= 8
        wino = [WINO_4, WINO_2] if big_image else [WINO_2, WINO_4]
        return tc + ([WMMA] if tensor_cores else []) + wino + [PRECOMP, IGEMM, DIRECT]
    if winograd_shape and p.c_per_group * p.k_per_group <= 64 * 64:
        return [WINO_FUSED, IGEMM, DIRECT]
    if tensor_cores:
        return tc + [WMMA, PRECOMP, IGEMM, DIRECT]
    if p.c_per_group * p.filter_taps >= 32:
        return [PRECOMP, IGEMM, DIRECT]
    # Few channels (a network's stem, C = 3): GEMM tiles would be mostly padding.
    return [DIRECT, IGEMM]


BWD_DATA_DIRECT = "conv_bwd_data_direct"
BWD_DATA_WINO_2 = "conv_bwd_data_winograd_f2x2_3x3"
BWD_DATA_WINO_4 = "conv_bwd_data_winograd_f4x4_3x3"
BWD_DATA_WMMA = "conv_bwd_data_wmma_implicit_gemm"
BWD_DATA_IGEMM = "conv_bwd_data_implicit_gemm_rotated"
BWD_FILTER_DIRECT = "conv_bwd_filter_direct"
BWD_FILTER_IGEMM = "conv_bwd_filter_implicit_gemm"
BWD_FILTER_ATOMIC = "conv_bwd_filter_implicit_gemm_atomic"
BWD_DATA_IGEMM_PHASED = "conv_bwd_data_implicit_gemm"
BWD_FILTER_WMMA = "conv_bwd_filter_wmma_implicit_gemm"
BWD_DATA_TC = "conv_bwd_data_tc_implicit_gemm"
BWD_DATA_TC_PHASED = "conv_bwd_data_tc_implicit_gemm_phased"
BWD_DATA_WGMMA = "conv_bwd_data_tc_wgmma"
BWD_FILTER_TC = "conv_bwd_filter_tc_implicit_gemm"
BWD_DATA_DMMA = "conv_bwd_data_dmma_implicit_gemm"
BWD_DATA_DMMA_PHASED = "conv_bwd_data_dmma_implicit_gemm_phased"
BWD_FILTER_DMMA = "conv_bwd_filter_dmma_implicit_gemm"


def _tensor_cores(p: ConvProblem, caps: Capabilities) -> bool:
    return (p.dtype == "fp16" and caps.fp16_tensor_cores) or (
        (p.dtype == "bf16" or p.math == "tf32") and caps.bf16_tensor_cores
    )


def conv_bwd_data_ranking(p: ConvProblem, caps: Capabilities) -> list[str]:
    """Stride 1: the rotated-forward solvers (the forward's ranking logic: Winograd for
    3x3 with enough channels, tensor cores for fp16/bf16); the gather-based direct
    kernel otherwise (strides > 1, depthwise, paddings beyond the filter's reach), after
    the phase-decomposed implicit GEMM when there is a GEMM tile's worth of work.
    float64 on sm_80+: the fp64 tensor cores first, behind cuBLAS's DGEMM on large
    pointwise NHWC layers: the forward kernel on rotated filters (stride 1 and padding
    within the filter's reach; the selector skips it elsewhere), then by phases (any
    stride). Unmeasured on a GPU: which of the two wins at stride 1 is the tuner's call."""
    if p.depthwise:
        return [BWD_DATA_DIRECT]
    if _dmma(p, caps) and _dmma_fills(p, p.c_per_group):
        rest = [n for n in _conv_bwd_data_ranking(p, caps) if n != BWD_DATA_CUBLAS_1X1]
        cublas = [BWD_DATA_CUBLAS_1X1] if _cublas_pointwise(p, caps) else []
        return cublas + [BWD_DATA_DMMA, BWD_DATA_DMMA_PHASED] + rest
    return _conv_bwd_data_ranking(p, caps)


def _conv_bwd_data_ranking(p: ConvProblem, caps: Capabilities) -> list[str]:
    wino = (_winograd_dtype(p) and p.filter == (3, 3) and p.dilations == (1, 1)
            and p.groups == 1)  # fmt: skip
    ranked = [BWD_DATA_CUBLAS_1X1] if _cublas_pointwise(p, caps) else []
    tc = _tensor_cores(p, caps)
    # Phases (any stride, filter read as stored; TF32 through scalar fragment loads), then
    # the rotated-filter forward kernel (stride 1); on sm_90 the wgmma forward on rotated
    # filters before both, where it applies (stride 1).
    if tc and _multistage(p, caps):
        ranked += [BWD_DATA_WGMMA] if _wgmma(p, caps) else []
        ranked += [BWD_DATA_TC_PHASED, BWD_DATA_TC]
    ranked += [BWD_DATA_WMMA] if tc else []
    if wino and min(p.c_per_group, p.k_per_group) >= 16:
        big = min(p.spatial) >= 8
        ranked += [BWD_DATA_WINO_4, BWD_DATA_WINO_2] if big else [BWD_DATA_WINO_2, BWD_DATA_WINO_4]
    if p.k_per_group * p.filter_taps >= 32:
        ranked.append(BWD_DATA_IGEMM)
    # The phase-decomposed GEMM: strides > 1 (its phases skip the gaps) and stride-1
    # problems the rotated solvers refuse (padding beyond the filter's reach); a tile's
    # worth of reduction and channels, else the direct gather wastes less.
    if p.k_per_group * p.filter_taps >= 32 and p.c_per_group >= 8:
        ranked.append(BWD_DATA_IGEMM_PHASED)
    return ranked + [BWD_DATA_DIRECT]


def conv_bwd_filter_ranking(p: ConvProblem, caps: Capabilities) -> list[str]:
    """The split-K implicit GEMM whenever the GEMM has a tile's worth of rows and
    columns; direct for depthwise (C/g*R*S tiny) and channel-starved problems. The
    atomic variant is ranked after the deterministic one: on the emulator it is not
    faster, on a GPU the tuner decides. fp16/bf16 with tensor cores: the multistage
    tensor-core solver, then the WMMA split-K one, first; TF32 (fp32 with math="tf32"):
    the multistage one. float64 on sm_80+: the fp64 tensor cores first (behind cuBLAS's DGEMM on
    large pointwise NHWC layers), for any GEMM of a tile's worth. Narrow groups (ResNeXt's
    4 channels, a small GEMM per group) on tensor cores: the packed kernel, whose GEMM spans
    several groups. Every direction of the multistage engine packs groups narrower than its
    tile (tc_igemm.py, tc_bwd_data.py, tc_bwd_filter.py), so grouped layers rank it first
    as ungrouped ones; unmeasured on a GPU, the tuner times the CUDA-core GEMMs too."""
    tc = _tensor_cores(p, caps)
    even = p.dtype == "fp32" or (p.c_per_group % 2 == 0 and p.k_per_group % 2 == 0)
    packs = tc and _multistage(p, caps) and p.groups > 1 and even  # (its copies' widths)
    small = p.k_per_group * p.c_per_group * p.filter_taps < 32 * 32
    if p.depthwise or (small and not packs):
        return [BWD_FILTER_DIRECT, BWD_FILTER_IGEMM]
    if _dmma(p, caps) and _dmma_fills(p, p.k_per_group):
        cublas = [BWD_FILTER_CUBLAS_1X1] if _cublas_pointwise(p, caps) else []
        return cublas + [BWD_FILTER_DMMA, BWD_FILTER_IGEMM, BWD_FILTER_ATOMIC, BWD_FILTER_DIRECT]
    tensor = [BWD_FILTER_TC] if tc and _multistage(p, caps) else []  # TF32 too
    tensor += [BWD_FILTER_WMMA] if tc and p.dtype != "fp32" else []  # WMMA: 16-bit only
    cublas = [BWD_FILTER_CUBLAS_1X1] if _cublas_pointwise(p, caps) else []
    return cublas + tensor + [BWD_FILTER_IGEMM, BWD_FILTER_ATOMIC, BWD_FILTER_DIRECT]


SDPA_UNFUSED = "sdpa_fwd_unfused"
SDPA_FLASH_TC = "sdpa_fwd_flash_tc"
SDPA_FLASH_FP32 = "sdpa_fwd_flash_fp32"
SDPA_FLASH_DMMA = "sdpa_fwd_flash_dmma"
SDPA_DECODE = "sdpa_fwd_flash_decode"
SDPA_BWD_UNFUSED = "sdpa_bwd_unfused"
SDPA_BWD_TC = "sdpa_bwd_flash_tc"
SDPA_BWD_TC_SPLIT = "sdpa_bwd_flash_tc_split"
SDPA_BWD_FP32 = "sdpa_bwd_flash_fp32"
SDPA_BWD_DMMA = "sdpa_bwd_flash_dmma"


def _attention_tc(p: AttentionProblem, caps: Capabilities) -> bool:
    return (p.dtype == "fp16" and caps.fp16_tensor_cores) or (
        p.dtype == "bf16" and caps.bf16_tensor_cores
    )


def sdpa_fwd_ranking(p: AttentionProblem, caps: Capabilities) -> list[str]:
    """Decoding (a few query rows against a long key/value sequence): the split-KV
    kernel, which spreads the keys over the GPU; otherwise the flash kernels (tensor
    cores for fp16/bf16, CUDA cores for fp32 and odd head dims), and the unfused solver
    last (it stores the score matrix). Unmeasured on a GPU so far: the decode threshold
    (16 rows, 256 keys) is where one query tile no longer fills a GPU but the keys do.
    float64 on sm_80+ GPUs: the fp64 tensor-core flash kernel before the CUDA-core one
    (not on the emulator, where the rankings stay as they were)."""
    decode = [SDPA_DECODE] if p.sq <= 16 and p.skv >= 256 else []
    tc = [SDPA_FLASH_TC] if _attention_tc(p, caps) else []
    if _dmma(p, caps):
        tc = [SDPA_FLASH_DMMA]
    return decode + tc + [SDPA_FLASH_FP32, SDPA_UNFUSED]


def sdpa_bwd_ranking(p: AttentionProblem, caps: Capabilities) -> list[str]:
    """The tensor-core backward with atomic dQ first (one pass), its deterministic split
    form next (the selector takes it in deterministic mode), then CUDA cores, then the
    unfused solver. float64 on sm_80+ GPUs: the fp64 tensor-core backward first (head dims
    up to 128; the selector skips it above)."""
    tc = [SDPA_BWD_TC, SDPA_BWD_TC_SPLIT] if _attention_tc(p, caps) else []
    if _dmma(p, caps):
        tc = [SDPA_BWD_DMMA]
    return tc + [SDPA_BWD_FP32, SDPA_BWD_UNFUSED]


RNN_STANDARD = "rnn_fwd_standard"
RNN_PERSISTENT = "rnn_fwd_persistent"
RNN_BWD_STANDARD = "rnn_bwd_standard"


def rnn_fwd_ranking(p: RnnProblem, caps: Capabilities) -> list[str]:
    """The persistent kernel for small batches (cuDNN's PERSIST_STATIC regime: the step is
    too small to fill the GPU, so launches and W_hh re-reads dominate), the standard
    algorithm otherwise and as the fallback. Unmeasured on a GPU so far: the batch
    threshold (32) is where one step's GEMM starts to fill an H200."""
    persistent = [RNN_PERSISTENT] if p.b <= 32 else []
    return persistent + [RNN_STANDARD]


def rnn_bwd_ranking(p: RnnProblem, caps: Capabilities) -> list[str]:
    return [RNN_BWD_STANDARD]


RANKINGS = {
    "conv_fwd": conv_fwd_ranking,
    "conv_bwd_data": conv_bwd_data_ranking,
    "conv_bwd_filter": conv_bwd_filter_ranking,
    "sdpa_fwd": sdpa_fwd_ranking,
    "sdpa_bwd": sdpa_bwd_ranking,
    "rnn_fwd": rnn_fwd_ranking,
    "rnn_bwd": rnn_bwd_ranking,
}
