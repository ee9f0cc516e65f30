"""Backward data on the fp64 tensor cores, any stride (``dmma_conv_bwd_data`` in
``cuda_src/conv/dmma_implicit_gemm.cu``).

``conv_bwd_data_dmma_implicit_gemm_phased`` (:class:`DmmaBwdDataPhasedSolver`): float64 only,
sm_80+, dx from dy and the filters read as stored (no rotated copy, no workspace), 1-D, 2-D
and 3-D, any groups (the forward's one GEMM per group, over each group's C/groups dx
channels), NCHW/KCRS and NHWC/KRSC (and their 3-D forms), any stride, dilation
and padding. Phase
decomposition: the grid's z picks a phase of the dx pixels (their coordinate modulo the
stride); each phase is a stride-1 correlation of dy with the taps that reach it, so no
MMA is spent on the stride's gaps and nothing divides per element. Products and sums are
the tensor core's double MMA (``mma.sync`` m8n8k4 .f64). At stride 1 the rotated-filter
solver (``conv_bwd_data_dmma_implicit_gemm``: the forward kernel, whose filter loads are
contiguous) is the other choice; the tuner decides between them.

Config: the forward's :class:`~.dmma_igemm.DmmaConfig` (block_m dx pixels x block_n input
channels, block_k of the reduction K * taps per stage, 32x32 warps, two stages), tiles
64x64 and 128x64. The epilogue is the forward's (the transposed convolution's bias,
blending, activation), in exact double scalars.

Error: as the forward, with T = K * R * S terms per dx element at most (a phase's taps):
within about K*R*S * 2^-53 * sum|dy||w| of the exact sum. Deterministic.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import dtypes
from ...problems.conv import ConvProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, not_applicable
from . import bwd_filter as bwf
from .bwd_data import BwdDataTensors
from .bwd_data_igemm import phase_rows
from .common import Epilogue, shape_struct
from .dmma_igemm import (
    MAX_GRID_Y,
    SOURCE,
    TILES,
    DmmaConfig,
    DmmaImplicitGemmSolver,
    _fits,
    dmma_reason,
    grid_y,
    layout_tag,
    tile_args,
)

_MAX_PHASES = 65535  # grid z


def kernel_expr(config: DmmaConfig, nhwc: bool, d3: bool = False) -> str:
    return f"dmma_conv_bwd_data<{tile_args(config, nhwc, d3)}>"


def module_spec(d3: bool = False) -> ModuleSpec:
    """Both layouts of both tiles, one module per dimensionality."""
    names = [kernel_expr(DmmaConfig(*t), nhwc, d3) for t in TILES for nhwc in (False, True)]
    return ModuleSpec.make(SOURCE, names)


class _Runner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem, config: DmmaConfig) -> None:
        nhwc, d3 = problem.channels_last, problem.ndim == 3
        self._kernel = backend.kernel(module_spec(d3), kernel_expr(config, nhwc, d3))
        phases = int(np.prod(problem.strides))
        layout = layout_tag(problem)
        self._name = f"dmma_igemm_bwd_data_{config.label()}_phases{phases}_{layout}_fp64"
        self._grid = (-(-phase_rows(problem) // config.block_m),
                      grid_y(problem.groups, problem.c_per_group, config.block_n),
                      phases)  # fmt: skip
        self._block = (config.threads,)
        self._shape = shape_struct(problem)
        self._smem = config.smem_bytes()

    @property
    def kernel_names(self) -> list[str]:
        return [self._name]

    def __call__(self, tensors: BwdDataTensors, epilogue: Epilogue, workspace: Any) -> None:
        z = tensors.dx  # no residual in backward data; a valid pointer of the dtype
        bias = tensors.bias if tensors.bias is not None else tensors.dy
        args = (tensors.dy, tensors.w, tensors.dx, z, bias, self._shape,
                epilogue.struct(dtypes.FLOAT64))  # fmt: skip
        self._kernel(self._grid, self._block, args, shared_mem=self._smem)


class DmmaBwdDataPhasedSolver(DmmaImplicitGemmSolver):
    """Backward data on the fp64 tensor cores by phases, any stride (module docstring):
    the forward solver's configs and checks, its own kernels and applicability."""

    name = "conv_bwd_data_dmma_implicit_gemm_phased"
    family = "conv_bwd_data"

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = bwf.common_reason(problem, "bwd_data", max_ndim=3)
        reason = reason or dmma_reason(problem, caps)
        if reason:
            return not_applicable(reason)
        if grid_y(problem.groups, problem.c_per_group, max(t[1] for t in TILES)) > MAX_GRID_Y:
            return not_applicable(f"c={problem.c} in {problem.groups} groups exceeds the "
                                  "grid's y limit")  # fmt: skip
        if int(np.prod(problem.strides)) > _MAX_PHASES:
            return not_applicable(f"needs at most {_MAX_PHASES} stride phases (the grid's z)")
        return APPLICABLE

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> DmmaConfig:
        """128x64 where its blocks fill the GPU twice over (two per SM), else 64x64, as
        the forward. Unmeasured on a GPU so far: a tuning DB entry overrides it."""
        options = self.configs(problem, caps)
        blocks_per_row = int(np.prod(problem.strides)) * grid_y(problem.groups,
                                                                problem.c_per_group, 64)
        for c in reversed(options):  # the larger tile first
            if -(-phase_rows(problem) // c.block_m) * blocks_per_row >= 2 * max(caps.sm_count, 1):
                return c
        return options[0]

    def is_valid(self, config: Config, problem: ConvProblem, caps: Capabilities) -> bool:
        return isinstance(config, DmmaConfig) and _fits(config, caps)

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(False), module_spec(True)]

    def runner(self, backend: Backend, problem: ConvProblem, config: DmmaConfig) -> Runner:
        return _Runner(backend, problem, config)
