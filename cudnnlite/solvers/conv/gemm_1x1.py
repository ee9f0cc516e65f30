"""Pointwise convolution (1x1 filter, stride 1, no padding; any groups, any dilation)
straight as a tiled GEMM, per group:

- NHWC: ``Y[N*H*W, K] = X[N*H*W, C] * W[K, C]^T``;
- NCHW: per image ``Y[K, H*W] = W[K, C] * X[C, H*W]``, all images in one launch.

Same tiles, register blocking and cp.async pipeline as the implicit GEMM
(``cuda_src/conv/gemm_tiles.cuh``; the config is a :class:`TileConfig`), without the tap
decoding and padding checks, and with 4-pixel vector loads of x along H*W in NCHW (they
need H*W % 4 == 0 and x aligned to 4 elements; otherwise, and always in NHWC, the
``align1`` kernel runs). Kernels are named like
``gemm_1x1_64x64_16x3_4x4_nchw_fp32_align4``. Limits: x, w, y below 2^31 elements. The
tensors must be contiguous in the problem's layout (``cudnnlite.conv2d`` copies when they
are not). Deterministic. fp32/fp16/bf16 accumulate in fp32, fp64 in fp64 on the implicit
GEMM's fp64 tiles (``TILES_FP64``: stages of doubles). 3-D pointwise problems run as the
2-D problem of D*H x W pixels they equal (:func:`flat_2d`): the same kernels, no 3-D
variant needed.
"""

from __future__ import annotations

import numpy as np

from ... import dtypes
from ...errors import NotSupportedError
from ...problems.conv import ConvProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from .common import flat_2d, shape_struct
from .direct import INT32_MAX, common_reason, dtype_of
from .implicit_gemm import (
    MAX_GRID_Y,
    TILES,
    GemmRunner,
    TileConfig,
    all_tiles,
    gemm_grid,
    pick_tile,
    prune_tiles,
    tile_reason,
    tiles_for,
    vec_for,
)

SOURCE = "conv/gemm_1x1.cu"


# Tiles of the 1x1 GEMM (each is a module per dtype): for now the implicit GEMM's.
TILES_1X1 = TILES


def _expr(dt: dtypes.DType, nhwc: bool, cfg: TileConfig) -> str:
    return f"gemm_1x1<{dt.ctype}, {str(nhwc).lower()}, {cfg.template_args()}>"


def _readable(dt: dtypes.DType, nhwc: bool, cfg: TileConfig) -> str:
    return f"gemm_1x1_{cfg.label()}_{'nhwc' if nhwc else 'nchw'}_{dt.short}"


def module_spec(dt: dtypes.DType, cfg: TileConfig) -> ModuleSpec:
    return ModuleSpec.make(SOURCE, [_expr(dt, nhwc, cfg) for nhwc in (False, True)])


class Gemm1x1Solver(Solver):
    """1x1, stride 1, unpadded convolutions as a tiled GEMM; the tile is the config."""

    name = "conv_fwd_gemm_1x1"
    family = "conv_fwd"
    config_type = TileConfig
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, max_ndim=3)
        if reason:
            return not_applicable(reason)
        if any(f != 1 for f in problem.filter):
            return not_applicable(f"needs a 1x1 filter, got {problem.filter}")
        if any(s != 1 for s in problem.strides):
            return not_applicable(f"needs stride 1, got {problem.strides}")
        if any(p != (0, 0) for p in problem.pads):
            return not_applicable(f"needs no padding, got {problem.pads}")
        for what, shape in (("x", problem.x_shape()), ("w", problem.w_shape()),
                            ("y", problem.y_shape())):  # fmt: skip
            size = int(np.prod(shape))
            if size > INT32_MAX:
                return not_applicable(f"needs < 2^31 elements in {what}, got {size}")
        gy = -(-problem.k_per_group // 64) * problem.groups
        if gy > MAX_GRID_Y:
            return not_applicable(
                f"needs groups * ceil(K/groups / 64) <= {MAX_GRID_Y} (grid.y), got {gy}"
            )
        return APPLICABLE

    def _gemm_size(self, problem: ConvProblem) -> tuple[int, int, int]:
        return problem.n * int(np.prod(problem.spatial)), problem.k_per_group, problem.groups

    def configs(self, problem: ConvProblem, caps: Capabilities) -> list[TileConfig]:
        return prune_tiles(*self._gemm_size(problem), tiles_for(problem.dtype, TILES_1X1))

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> TileConfig:
        return pick_tile(self.configs(problem, caps), *self._gemm_size(problem))

    def is_valid(self, config: Config, problem: ConvProblem, caps: Capabilities) -> bool:
        if not isinstance(config, TileConfig) or tile_reason(problem.dtype, config, TILES_1X1):
            return False
        return gemm_grid(*self._gemm_size(problem), config)[1] <= MAX_GRID_Y

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(dt, cfg) for dt in dtypes.FLOAT_TYPES
                for cfg in all_tiles(tiles_for(dt.short, TILES_1X1))]  # fmt: skip

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        ok = self.is_applicable(problem, None)  # type: ignore[arg-type]
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        reason = isinstance(config, TileConfig) and tile_reason(problem.dtype, config, TILES_1X1)
        if reason:
            raise NotSupportedError(f"{self.name}: {reason}")
        if not isinstance(config, TileConfig) or not self.is_valid(config, problem, None):  # type: ignore[arg-type]
            raise NotSupportedError(f"{self.name}: config {config!r} is not valid for {problem}")
        dt = dtype_of(problem)
        nhwc = problem.channels_last
        spatial = int(np.prod(problem.spatial))
        vec = 1 if nhwc else vec_for(4, spatial)  # only NCHW x moves in vectors (along H*W)
        return GemmRunner(
            kernel=backend.kernel(module_spec(dt, config), _expr(dt, nhwc, config)),
            name=_readable(dt, nhwc, config), vec=vec, itemsize=dt.itemsize,
            grid=gemm_grid(*self._gemm_size(problem), config), block=(config.threads,),
            shape=shape_struct(flat_2d(problem)), dtype=problem.dtype,
        )  # fmt: skip
