"""Direct convolution forward: the always-applicable fallback and the depthwise kernel.

- :class:`DirectSolver` (``conv_fwd_direct``): one thread per output element, any
  stride, dilation, padding and groups, NCHW/KCRS and NHWC/KRSC, 1-D, 2-D and 3-D,
  fp32/fp16/bf16 with fp32 accumulation and fp64 with fp64 accumulation, in a fixed
  order (deterministic), 64-bit indexing (no size limit). Simple and slow: the
  reference every other solver can be compared with on the device.
- :class:`DepthwiseSolver` (``conv_fwd_direct_depthwise``): groups == C (K = C * mult).
  A block stages a spatial tile of the input with its halo, and the taps, in shared
  memory; NCHW blocks own one (image, channel) and all its mult filters over a 32x16
  output tile (8x8 when the output is at most 16 wide); NHWC blocks own 32 channels
  (coalesced along C) over a 4x8 output tile (2x4, 1x2, 1x1 when a large stride or
  dilation would overflow 48 KiB of shared memory; the tile is staged in the
  accumulation type, so fp64 needs twice the bytes). Not applicable when even the
  smallest tile does not fit. GEMM-based methods have a reduction of only R*S here,
  which is why this one exists. 3-D: a block per output depth as well, staging the T
  input slices its filter depth reads.

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


def common_reason(problem: ConvProblem, max_ndim: int = 2) -> str | None:
    """What none of the forward solvers supports, or None; ``max_ndim`` 3 for the solvers
    whose kernels have a 3-D variant."""
    if problem.direction != "fwd":
        return f"needs direction fwd, got {problem.direction}"
    if problem.ndim > max_ndim:
        return f"needs a 1-D or 2-D convolution, got {problem.ndim}-D"
    if problem.dtype not in {dt.short for dt in dtypes.FLOAT_TYPES}:
        return f"dtype {problem.dtype} is not available here (ml_dtypes missing)"
    return None


@functools.lru_cache(maxsize=256)
def acc_bytes(dt: dtypes.DType) -> int:
    """Bytes of one cl::acc_t<T> (what shared-memory tiles staged in it hold)."""
    return 8 if dt.acc_ctype == "double" else 4


def address(a: Any) -> int:
    """The data pointer of a NumPy or CuPy array."""
    iface = getattr(a, "__cuda_array_interface__", None) or a.__array_interface__
    return int(iface["data"][0])


class LaunchRunner(Runner):
    """Launches a fixed list of kernels with (x, w, y, z, bias, shape, epilogue, *extra_args)."""

    def __init__(self, launches: Sequence[tuple[Kernel, tuple, tuple, int]], shape: np.void,
                 names: list[str], extra_args: tuple = (),
                 dt: dtypes.DType | None = None) -> None:  # fmt: skip
        self.launches = list(launches)
        self.shape = shape
        self.names = names
        self.extra_args = extra_args
        self.dt = dt

    def __call__(self, tensors: ConvTensors, epilogue: Epilogue, workspace: Any) -> None:
        args = (*tensors.kernel_pointers(), self.shape, epilogue.struct(self.dt),
                *self.extra_args)  # fmt: skip
        for kernel, grid, block, smem in self.launches:
            kernel(grid, block, args, shared_mem=smem)

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)


# ------------------------------------------------------------------ kernels


def _suffix(d3: bool) -> str:
    """The kernel-name suffix of the 3-D variants (the 2-D kernels keep no depth term)."""
    return "_3d" if d3 else ""


# conv_direct decodes its output index in 32 bits up to this many outputs, else in 64 (a
# kernel of its own: WIDE, named "_i64"). A name of its own: tests lower it to run WIDE.
_WIDE_PAST = INT32_MAX


def _direct_expr(dt: dtypes.DType, nhwc: bool, d3: bool = False, wide: bool = False) -> str:
    return f"conv_direct{_suffix(d3)}<{dt.ctype}, {str(nhwc).lower()}, {str(wide).lower()}>"


def _dw_nchw_expr(dt: dtypes.DType, tile: str, d3: bool = False) -> str:
    tq, tp, rpt = DW_NCHW_TILES[tile]
    return f"depthwise_nchw{_suffix(d3)}<{dt.ctype}, {tq}, {tp}, {rpt}>"


def _dw_nhwc_expr(dt: dtypes.DType, d3: bool = False) -> str:
    return f"depthwise_nhwc{_suffix(d3)}<{dt.ctype}>"


def module_spec(dt: dtypes.DType, d3: bool = False) -> ModuleSpec:
    """Every kernel of direct.cu for storage type ``dt``: the 2-D (and 1-D) ones, or the
    3-D ones (their own module, so neither kind compiles the other's)."""
    names = [_direct_expr(dt, nhwc, d3, wide) for nhwc in (False, True) for wide in (False, True)]
    names += [_dw_nchw_expr(dt, tile, d3) for tile in DW_NCHW_TILES]
    names.append(_dw_nhwc_expr(dt, d3))
    return ModuleSpec.make(SOURCE, names)


def module_specs_all() -> list[ModuleSpec]:
    return [module_spec(dt, d3) for d3 in (False, True) for dt in dtypes.FLOAT_TYPES]


def _layout_tag(problem: ConvProblem) -> str:
    """nchw / nhwc (1-D and 2-D), ncdhw / ndhwc (3-D): readable kernel names."""
    if problem.ndim == 3:
        return problem.layout.lower()
    return "nhwc" if problem.channels_last else "nchw"


# ------------------------------------------------------------------ direct


class DirectSolver(Solver):
    """One thread per output; any stride, dilation, padding, groups; the fallback."""

    name = "conv_fwd_direct"
    family = "conv_fwd"
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, max_ndim=3)
        if reason:
            return not_applicable(reason)
        return APPLICABLE

    def module_specs(self) -> list[ModuleSpec]:
        return module_specs_all()

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        ok = self.is_applicable(problem, _ANY_CAPS)
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        dt = dtype_of(problem)
        d3 = problem.ndim == 3
        total = int(np.prod(problem.y_shape()))
        wide = total > _WIDE_PAST
        expr = _direct_expr(dt, problem.channels_last, d3, wide)
        kernel = backend.kernel(module_spec(dt, d3), expr)
        blocks = max(1, min(-(-total // BLOCK), _GRID_CAP[backend.name]))
        name = f"conv_direct_{_layout_tag(problem)}{'_i64' if wide else ''}_{dt.short}"
        return LaunchRunner([(kernel, (blocks,), (BLOCK,), 0)], shape_struct(problem), [name],
                            dt=dt)  # fmt: skip


# ------------------------------------------------------------------ depthwise


def _spans(problem: ConvProblem, tile_p: int, tile_q: int) -> tuple[int, int]:
    """Rows and columns of the input tile (with halo) behind a tile_p x tile_q output tile."""
    s = shape_struct(problem)
    ih = (tile_p - 1) * int(s["stride_h"]) + (int(s["r"]) - 1) * int(s["dil_h"]) + 1
    iw = (tile_q - 1) * int(s["stride_w"]) + (int(s["s"]) - 1) * int(s["dil_w"]) + 1
    return ih, iw


def _dw_plan(problem: ConvProblem) -> tuple[str, int, int, tuple, tuple]:
    """(tile label, shared bytes, blocks, block dims, NCHW tile key or NHWC (TP, TQ) args).
    3-D: a block per output depth too, staging the filter's T input slices."""
    s = shape_struct(problem)
    p, q, depth_taps = int(s["p"]), int(s["q"]), int(s["t"])
    taps = depth_taps * int(s["r"]) * int(s["s"])
    mult, images = problem.k_per_group, problem.n * int(s["o"])
    elem = acc_bytes(dtype_of(problem))  # the tiles are staged in the accumulation type
    if problem.channels_last:
        for tp, tq in DW_NHWC_TILES:
            ih, iw = _spans(problem, tp, tq)
            smem = elem * DW_CHANNELS * (depth_taps * ih * iw + mult * taps)
            if smem <= SMEM_LIMIT:
                break
        blocks = images * -(-p // tp) * -(-q // tq) * -(-problem.c // DW_CHANNELS)
        args = (np.int32(tp), np.int32(tq))
        return f"{tp}x{tq}", smem, blocks, (DW_CHANNELS, DW_ROWS), args
    tile = "small" if q <= 16 else "large"
    tq, tp, rpt = DW_NCHW_TILES[tile]
    ih, iw = _spans(problem, tp, tq)
    smem = elem * (depth_taps * ih * iw + mult * taps)
    blocks = images * problem.c * -(-p // tp) * -(-q // tq)
    return f"{tq}x{tp}", smem, blocks, (tq, tp // rpt), (tile,)


class DepthwiseSolver(Solver):
    """groups == C: input tile with halo and taps in shared memory; both layouts."""

    name = "conv_fwd_direct_depthwise"
    family = "conv_fwd"
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, max_ndim=3)
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
        return module_specs_all()

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        ok = self.is_applicable(problem, _ANY_CAPS)
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        dt = dtype_of(problem)
        label, smem, blocks, block, extra = _dw_plan(problem)
        nhwc, d3 = problem.channels_last, problem.ndim == 3
        expr = _dw_nhwc_expr(dt, d3) if nhwc else _dw_nchw_expr(dt, extra[0], d3)
        kernel = backend.kernel(module_spec(dt, d3), expr)
        name = f"depthwise_{label}_{_layout_tag(problem)}_{dt.short}"
        launch = (kernel, (blocks,), block, smem)
        extra_args = extra if nhwc else ()
        return LaunchRunner([launch], shape_struct(problem), [name], extra_args, dt)


# is_applicable of these solvers does not look at the device's capabilities
_ANY_CAPS: Any = None
