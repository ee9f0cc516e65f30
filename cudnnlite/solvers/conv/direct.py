"""Direct convolution forward: the always-applicable fallback and the depthwise kernel.

- :class:`DirectSolver` (``conv_fwd_direct``): one thread per output element, any
  stride, dilation, padding and groups, NCHW/KCRS and NHWC/KRSC, 1-D and 2-D,
  fp32/fp16/bf16 with fp32 accumulation in a fixed order (deterministic), 64-bit
  indexing (no size limit). Simple and slow: the reference every other solver can be
  compared with on the device.
- :class:`DepthwiseSolver` (``conv_fwd_direct_depthwise``): groups == C (K = C * mult).
  A block stages a spatial tile of the input with its halo, and the taps, in shared
  memory; NCHW blocks own one (image, channel) and all its mult filters over a 32x16
  output tile (8x8 when the output is at most 16 wide); NHWC blocks own 32 channels
  (coalesced along C) over a 4x8 output tile (2x4, 1x2, 1x1 when a large stride or
  dilation would overflow 48 KiB of shared memory). Not applicable when even the
  smallest tile does not fit. GEMM-based methods have a reduction of only R*S here,
  which is why this one exists.

Kernels: ``cuda_src/conv/direct.cu``, one module per dtype holding both solvers'
kernels. The tensors must be contiguous in the problem's layout (the caller,
``cudnnlite.conv2d``, copies when they are not).
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from typing import Any

import numpy as np

from ... import dtypes
from ...errors import NotSupportedError
from ...problems.conv import ConvProblem
from ...runtime.backend import Backend, Kernel
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from .common import ConvTensors, Epilogue, shape_struct

SOURCE = "conv/direct.cu"
BLOCK = 256
INT32_MAX = 2**31 - 1
_GRID_CAP = {"cpu": 4096, "cuda": 1 << 20}  # grid-stride loops cover the rest

# depthwise tiles: NCHW (TQ, TP, rows per thread); NHWC (TP, TQ) over 32 channels x 8 rows
DW_NCHW_TILES = {"large": (32, 16, 2), "small": (8, 8, 1)}
DW_NHWC_TILES = ((4, 8), (2, 4), (1, 2), (1, 1))  # the first that fits in shared memory
DW_CHANNELS, DW_ROWS = 32, 8
SMEM_LIMIT = 48 * 1024  # the default per-block limit: no opt-in attribute needed


def dtype_of(problem: ConvProblem) -> dtypes.DType:
    for dt in dtypes.FLOAT_TYPES:
        if dt.short == problem.dtype:
            return dt
    raise NotSupportedError(f"dtype: {problem.dtype} is not available (ml_dtypes missing?)")


def common_reason(problem: ConvProblem) -> str | None:
    """What none of the solvers of this package supports, or None."""
    if problem.direction != "fwd":
        return f"needs direction fwd, got {problem.direction}"
    if problem.ndim not in (1, 2):
        return f"needs a 1-D or 2-D convolution, got {problem.ndim}-D"
    if problem.dtype not in {dt.short for dt in dtypes.FLOAT_TYPES}:
        return f"dtype {problem.dtype} is not available here (ml_dtypes missing)"
    return None


@functools.lru_cache(maxsize=256)
def epilogue_struct(epilogue: Epilogue) -> np.void:
    return epilogue.struct()


def address(a: Any) -> int:
    """The data pointer of a NumPy or CuPy array."""
    iface = getattr(a, "__cuda_array_interface__", None) or a.__array_interface__
    return int(iface["data"][0])


class LaunchRunner(Runner):
    """Launches a fixed list of kernels with (x, w, y, z, bias, shape, epilogue, *extra_args)."""

    def __init__(self, launches: Sequence[tuple[Kernel, tuple, tuple, int]], shape: np.void,
                 names: list[str], extra_args: tuple = ()) -> None:  # fmt: skip
        self.launches = list(launches)
        self.shape = shape
        self.names = names
        self.extra_args = extra_args

    def __call__(self, tensors: ConvTensors, epilogue: Epilogue, workspace: Any) -> None:
        args = (*tensors.kernel_pointers(), self.shape, epilogue_struct(epilogue), *self.extra_args)
        for kernel, grid, block, smem in self.launches:
            kernel(grid, block, args, shared_mem=smem)

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)


# ------------------------------------------------------------------ kernels


def _direct_expr(dt: dtypes.DType, nhwc: bool) -> str:
    return f"conv_direct<{dt.ctype}, {str(nhwc).lower()}>"


def _dw_nchw_expr(dt: dtypes.DType, tile: str) -> str:
    tq, tp, rpt = DW_NCHW_TILES[tile]
    return f"depthwise_nchw<{dt.ctype}, {tq}, {tp}, {rpt}>"


def _dw_nhwc_expr(dt: dtypes.DType) -> str:
    return f"depthwise_nhwc<{dt.ctype}>"


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """Every kernel of direct.cu for storage type ``dt``."""
    names = [_direct_expr(dt, False), _direct_expr(dt, True)]
    names += [_dw_nchw_expr(dt, tile) for tile in DW_NCHW_TILES]
    names.append(_dw_nhwc_expr(dt))
    return ModuleSpec.make(SOURCE, names)


def _layout_tag(problem: ConvProblem) -> str:
    return "nhwc" if problem.channels_last else "nchw"


# ------------------------------------------------------------------ direct


class DirectSolver(Solver):
    """One thread per output; any stride, dilation, padding, groups; the fallback."""

    name = "conv_fwd_direct"
    family = "conv_fwd"
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem)
        if reason:
            return not_applicable(reason)
        return APPLICABLE

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        ok = self.is_applicable(problem, _ANY_CAPS)
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        dt = dtype_of(problem)
        kernel = backend.kernel(module_spec(dt), _direct_expr(dt, problem.channels_last))
        total = int(np.prod(problem.y_shape()))
        blocks = max(1, min(-(-total // BLOCK), _GRID_CAP[backend.name]))
        name = f"conv_direct_{_layout_tag(problem)}_{dt.short}"
        return LaunchRunner([(kernel, (blocks,), (BLOCK,), 0)], shape_struct(problem), [name])


# ------------------------------------------------------------------ depthwise


def _spans(problem: ConvProblem, tile_p: int, tile_q: int) -> tuple[int, int]:
    """Rows and columns of the input tile (with halo) behind a tile_p x tile_q output tile."""
    s = shape_struct(problem)
    ih = (tile_p - 1) * int(s["stride_h"]) + (int(s["r"]) - 1) * int(s["dil_h"]) + 1
    iw = (tile_q - 1) * int(s["stride_w"]) + (int(s["s"]) - 1) * int(s["dil_w"]) + 1
    return ih, iw


def _dw_plan(problem: ConvProblem) -> tuple[str, int, int, tuple, tuple]:
    """(tile label, shared bytes, blocks, block dims, NCHW tile key or NHWC (TP, TQ) args)."""
    s = shape_struct(problem)
    p, q, taps = int(s["p"]), int(s["q"]), int(s["r"]) * int(s["s"])
    mult = problem.k_per_group
    if problem.channels_last:
        for tp, tq in DW_NHWC_TILES:
            ih, iw = _spans(problem, tp, tq)
            smem = 4 * DW_CHANNELS * (ih * iw + mult * taps)
            if smem <= SMEM_LIMIT:
                break
        blocks = problem.n * -(-p // tp) * -(-q // tq) * -(-problem.c // DW_CHANNELS)
        args = (np.int32(tp), np.int32(tq))
        return f"{tp}x{tq}", smem, blocks, (DW_CHANNELS, DW_ROWS), args
    tile = "small" if q <= 16 else "large"
    tq, tp, rpt = DW_NCHW_TILES[tile]
    ih, iw = _spans(problem, tp, tq)
    smem = 4 * (ih * iw + mult * taps)
    blocks = problem.n * problem.c * -(-p // tp) * -(-q // tq)
    return f"{tq}x{tp}", smem, blocks, (tq, tp // rpt), (tile,)


class DepthwiseSolver(Solver):
    """groups == C: input tile with halo and taps in shared memory; both layouts."""

    name = "conv_fwd_direct_depthwise"
    family = "conv_fwd"
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem)
        if reason:
            return not_applicable(reason)
        if not problem.depthwise:
            return not_applicable(
                f"needs a depthwise convolution (groups == C > 1), got groups={problem.groups} "
                f"with C={problem.c}"
            )
        _, smem, blocks, _, _ = _dw_plan(problem)
        if smem > SMEM_LIMIT:
            return not_applicable(
                f"needs the input tile with halo and the taps to fit in {SMEM_LIMIT // 1024} KiB "
                f"of shared memory, got {smem} bytes (filter, stride or dilation too large)"
            )
        if blocks > INT32_MAX:
            return not_applicable(f"needs fewer than 2^31 blocks, got {blocks}")
        return APPLICABLE

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        ok = self.is_applicable(problem, _ANY_CAPS)
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        dt = dtype_of(problem)
        label, smem, blocks, block, extra = _dw_plan(problem)
        nhwc = problem.channels_last
        expr = _dw_nhwc_expr(dt) if nhwc else _dw_nchw_expr(dt, extra[0])
        kernel = backend.kernel(module_spec(dt), expr)
        name = f"depthwise_{label}_{_layout_tag(problem)}_{dt.short}"
        launch = (kernel, (blocks,), block, smem)
        extra_args = extra if nhwc else ()
        return LaunchRunner([launch], shape_struct(problem), [name], extra_args)


# is_applicable of these solvers does not look at the device's capabilities
_ANY_CAPS: Any = None
