"""Backward data as an implicit GEMM over the transposed problem (family ``conv_bwd_data``),
any stride and dilation, no col2im buffer. Kernels: ``cuda_src/conv/bwd_data_implicit_gemm.cu``
(one module per dtype: both layouts, both tiles).

:class:`ImplicitGemmSolver` (``conv_bwd_data_implicit_gemm``): dx is split into its
stride_h * stride_w phases (the rows h with the same h % stride_h, likewise for w); each
phase is a stride-1 problem that only meets the taps r with (h + pad - r*dil) divisible by
the stride (an arithmetic progression of r), so each (phase, group) is one GEMM
dx[pixels, C/g] = dY-gather[pixels, K/g * valid taps] * W[K/g * valid taps, C/g]: no
multiply is spent on a stride gap, no col2im buffer. Tiles of conv/gemm_tiles.cuh (shared
memory, double buffering, register blocking), fp32 accumulation (fp64 for float64, two
stages of doubles instead of three fp32 ones: 35 KB for 64x64), one block per output tile
with a fixed reduction order: deterministic. NCHW/KCRS and NHWC/KRSC, 1-D, 2-D and 3-D
(NCDHW/KCTRS, NDHWC/KTRSC: depth phases and taps, the kernels' ``D3`` instantiation in a
module of its own per dtype), groups, fp32/fp16/bf16/fp64; the epilogue adds the
conv_transpose bias. Tensors contiguous in the problem's layout (the ops layer copies).
Config: :class:`TileConfig` (32x32, 64x64 and, for fp32 NHWC 2-D, 128x128 over pixels x
input channels, BK 16). Workspace: none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from math import gcd
from typing import Any

import numpy as np

from ... import dtypes
from ...errors import NotSupportedError
from ...problems.conv import ConvProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from .bwd_data import BwdDataTensors
from .bwd_filter import _layout_tag, common_reason, dtype_of
from .common import Epilogue, shape_struct

SOURCE = "conv/bwd_data_implicit_gemm.cu"
BK = 16  # bwd::kBK
# BM = BN -> (TM, TN): 256 threads each. 128 (8 x 8 per thread, two stages): float32 NHWC
# only. sm_90: 128 registers, no spills, main loop 81% FFMA (the 64 tile: 61%); NCHW's
# gathers (8 rows of dy state per thread) spill 84 bytes and fp16/bf16 (staged through
# registers) 392-452 at the 128-register bound, and float64's two stages would take 66 KB
# of static shared memory.
TILES = {128: (8, 8), 64: (4, 4), 32: (2, 2)}
MAX_GRID = 65535  # grid.y and grid.z


def tiles_for(dt: dtypes.DType, nhwc: bool, d3: bool = False) -> tuple[int, ...]:
    """The tiles compiled for storage type ``dt``, the layout and 3-D (whose module has the
    32 and 64 tiles only)."""
    return tuple(t for t in TILES if t < 128 or (dt.short == "fp32" and nhwc and not d3))


@dataclass(frozen=True)
class TileConfig(Config):
    """tile: BM = BN (dx pixels x input channels of a group)."""

    tile: int = 64

    def __post_init__(self) -> None:
        if self.tile not in TILES:
            raise ValueError(f"tile must be one of {sorted(TILES)}, got {self.tile}")

    def label(self) -> str:
        tm, tn = TILES[self.tile]
        return f"{self.tile}x{self.tile}x{BK}_{tm}x{tn}"


def _expr(dt: dtypes.DType, nhwc: bool, tile: int, d3: bool = False) -> str:
    tm, tn = TILES[tile]
    flag = "true" if nhwc else "false"
    d3_arg = ", true" if d3 else ""
    return f"bwd_data_igemm<{dt.ctype}, {flag}, {tile}, {tile}, {tm}, {tn}{d3_arg}>"


def module_spec(dt: dtypes.DType, d3: bool = False) -> ModuleSpec:
    """Every kernel of bwd_data_implicit_gemm.cu for storage type ``dt``: 1-D/2-D, or the
    3-D kernels (depth phases and taps), a module of their own."""
    names = [_expr(dt, nhwc, t, d3) for nhwc in (False, True) for t in tiles_for(dt, nhwc, d3)]
    return ModuleSpec.make(SOURCE, names)


def _tiles(problem: ConvProblem) -> tuple[int, ...]:
    return tiles_for(dtype_of(problem), problem.channels_last, problem.ndim == 3)


def _axes(problem: ConvProblem) -> tuple[tuple[int, ...], ...]:
    """(strides, dilations, filter, spatial) as 2-D (1-D as H = R = 1)."""
    if problem.ndim == 1:
        return ((1,) + problem.strides, (1,) + problem.dilations, (1,) + problem.filter,
                (1,) + problem.spatial)  # fmt: skip
    return problem.strides, problem.dilations, problem.filter, problem.spatial


def phase_rows(problem: ConvProblem) -> int:
    """dx pixels of the largest phase (the grid's x extent in tiles is this / BM)."""
    strides, _, _, spatial = _axes(problem)
    return problem.n * int(np.prod([-(-x // s) for x, s in zip(spatial, strides, strict=True)]))


def useful_taps(problem: ConvProblem) -> float:
    """Taps per dx pixel the GEMM multiplies, averaged over the phases (the direct kernel
    tests all R*S): about R*S / (stride_h*stride_w) when gcd(stride, dilation) == 1."""
    strides, dils, filt, _ = _axes(problem)
    per_axis = []
    for s, d, f in zip(strides, dils, filt, strict=True):
        step = s // gcd(s, d)
        per_axis.append(sum(len(range(r, f, step)) for r in range(min(step, f))) / s)
    return float(np.prod(per_axis))


class _Runner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem, cfg: TileConfig) -> None:
        dt = dtype_of(problem)
        nhwc = problem.channels_last
        d3 = problem.ndim == 3
        self.kernel = backend.kernel(module_spec(dt, d3), _expr(dt, nhwc, cfg.tile, d3))
        self.shape = shape_struct(problem)
        phases = int(np.prod(problem.strides))
        self.grid = (
            -(-phase_rows(problem) // cfg.tile),
            -(-problem.c_per_group // cfg.tile),
            problem.groups * phases,
        )
        layout = _layout_tag(problem)
        self.name = f"bwd_data_implicit_gemm_{cfg.label()}_{phases}phase_{layout}_{dt.short}"
        self.dtype = dt.short
        self.dt = dt

    def __call__(self, tensors: BwdDataTensors, epilogue: Epilogue, workspace: Any) -> None:
        bias = tensors.bias if tensors.bias is not None else tensors.dy
        args = (tensors.dy, tensors.w, tensors.dx, bias, self.shape,
                epilogue.struct(self.dt))  # fmt: skip
        self.kernel(self.grid, (256,), args)

    @property
    def kernel_names(self) -> list[str]:
        return [self.name]


class ImplicitGemmSolver(Solver):
    """Phase-decomposed implicit GEMM, any stride/dilation; deterministic."""

    name = "conv_bwd_data_implicit_gemm"
    family = "conv_bwd_data"
    config_type = TileConfig
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, "bwd_data", max_ndim=3)
        if reason:
            return not_applicable(reason)
        if problem.groups * int(np.prod(problem.strides)) > MAX_GRID:
            return not_applicable(f"needs groups * the strides' product <= {MAX_GRID}")
        if -(-problem.c_per_group // min(TILES)) > MAX_GRID:
            return not_applicable(f"needs C/groups <= {MAX_GRID * min(TILES)}")
        x_elems = int(np.prod(problem.x_shape()))
        if max(x_elems, int(np.prod(problem.y_shape()))) >= 2**31:
            return not_applicable("needs dx and dy below 2^31 elements")
        return APPLICABLE

    def configs(self, problem: ConvProblem, caps: Capabilities) -> Sequence[TileConfig]:
        return [TileConfig(t) for t in _tiles(problem)]

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> TileConfig:
        # 64x64 once the channels fill it and there are enough pixel tiles to spread;
        # 128x128 (where compiled) once they fill that, with pixel tiles for every SM.
        # Unmeasured on a GPU: a tuning DB entry overrides it.
        tiles = _tiles(problem)
        if 128 in tiles and problem.c_per_group >= 128 and phase_rows(problem) >= 128 * 64:
            return TileConfig(128)
        big = problem.c_per_group >= 48 and phase_rows(problem) >= 64 * 16
        return TileConfig(64 if big else 32)

    def is_valid(self, config: Config, problem: ConvProblem, caps: Capabilities) -> bool:
        tiles = _tiles(problem)
        return isinstance(config, TileConfig) and config.tile in tiles

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(dt, d3) for dt in dtypes.FLOAT_TYPES for d3 in (False, True)]

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        ok = self.is_applicable(problem, None)  # type: ignore[arg-type]
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        if not isinstance(config, TileConfig):
            raise NotSupportedError(f"{self.name}: expected a TileConfig, got {config!r}")
        tiles = _tiles(problem)
        if config.tile not in tiles:
            raise NotSupportedError(f"{self.name}: tile {config.tile} is not compiled for "
                                    f"{problem.dtype} {problem.layout} (tiles {tiles})")
        return _Runner(backend, problem, config)
