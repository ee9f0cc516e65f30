"""Tensor-core implicit-GEMM convolution (``cuda_src/conv/wmma_implicit_gemm.cu``).

``conv_fwd_wmma_implicit_gemm`` (:class:`WmmaImplicitGemmSolver`): forward, 1-D or 2-D,
any stride, dilation and padding, groups == 1, NHWC+KRSC (preferred: the GEMM's
reduction runs along contiguous channels) or NCHW+KCRS. fp32 accumulation always.

- fp16: WMMA m16n16k16 (``fp16_tensor_cores``, sm_70+);
- bf16: WMMA m16n16k16 (``bf16_tensor_cores``, sm_80+);
- fp32: only with ``problem.math == "tf32"``: inputs rounded to TF32 (10-bit mantissa,
  ``__float_to_tf32``), WMMA m16n16k8 (sm_80+). Default fp32 math never uses it.

Config: the block tile (``block_m`` output pixels x ``block_n`` output channels): 32x32
(one warp), 64x64 (4 warps), 128x64 (8 warps); each warp owns a 32x32 sub-tile. The
im2col slice and the filter slice (32 deep) are gathered into shared memory with
element loads (no vector loads, no double buffering yet).

Error: fp16/bf16 products are exact in fp32, so the error is fp32 accumulation plus the
output's storage rounding (acc_factor 2 in the tests). TF32 rounds each input to 11
significant bits: relative error up to 2^-11 per operand, i.e. about 2 * 2^-11 * conv(|x|,
|w|), independent of C*R*S.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import dtypes
from ...errors import NotSupportedError
from ...problems.conv import ConvProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from .common import ConvTensors, Epilogue, shape_struct
from .tc_igemm import NO_FP64_MMA

SOURCE = "conv/wmma_implicit_gemm.cu"
CTYPES = {dt.short: dt.ctype for dt in dtypes.FP32_COMPUTE_TYPES}  # fp64: NO_FP64_MMA
TILES = ((32, 32), (64, 64), (128, 64))
_MAX_GRID_Y = 65535


@dataclass(frozen=True)
class WmmaConfig(Config):
    block_m: int = 64
    block_n: int = 64

    def __post_init__(self) -> None:
        if (self.block_m, self.block_n) not in TILES:
            raise ValueError(f"wmma tile {self.block_m}x{self.block_n} not one of {TILES}")

    @property
    def threads(self) -> int:
        return (self.block_m // 32) * (self.block_n // 32) * 32

    def label(self) -> str:
        return f"{self.block_m}x{self.block_n}"


def _name(dtype: str, config: WmmaConfig, nhwc: bool) -> str:
    flag = "true" if nhwc else "false"
    return f"wmma_conv_fwd<{CTYPES[dtype]}, {config.block_m}, {config.block_n}, {flag}>"


def module_spec(dtype: str) -> ModuleSpec:
    """Every tile and layout of one storage type in one module."""
    names = [_name(dtype, WmmaConfig(bm, bn), nhwc) for bm, bn in TILES for nhwc in (False, True)]
    return ModuleSpec.make(SOURCE, names)


class _Runner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem, config: WmmaConfig) -> None:
        name = _name(problem.dtype, config, problem.channels_last)
        self._kernel = backend.kernel(module_spec(problem.dtype), name)
        self._problem, self._config = problem, config
        self._shape = shape_struct(problem)
        rows = problem.n * int(np.prod(problem.out_spatial))
        self._grid = (-(-rows // config.block_m), -(-problem.k // config.block_n))

    @property
    def kernel_names(self) -> list[str]:
        p, c = self._problem, self._config
        math = "tf32" if p.dtype == "fp32" else p.dtype
        return [f"wmma_implicit_gemm_{c.label()}_{p.layout.lower()}_{math}"]

    def __call__(self, tensors: ConvTensors, epilogue: Epilogue, workspace: Any) -> None:
        x, w, y, z, bias = tensors.kernel_pointers()
        args = (x, w, y, z, bias, self._shape, epilogue.struct())
        self._kernel(self._grid, (self._config.threads,), args)


class WmmaImplicitGemmSolver(Solver):
    """Implicit GEMM on tensor cores (module docstring)."""

    name = "conv_fwd_wmma_implicit_gemm"
    family = "conv_fwd"
    config_type = WmmaConfig

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        if problem.direction != "fwd":
            return not_applicable("forward convolution only")
        if problem.ndim not in (1, 2):
            return not_applicable("needs a 1-D or 2-D convolution")
        if problem.dtype == dtypes.FLOAT64.short:
            return not_applicable(NO_FP64_MMA)
        if problem.groups != 1:
            return not_applicable("needs groups == 1")
        if problem.dtype == "fp16" and not caps.fp16_tensor_cores:
            return not_applicable(f"fp16 needs tensor cores (sm_70+), device is {caps.arch}")
        if problem.dtype == "bf16" and not caps.bf16_tensor_cores:
            return not_applicable(f"bf16 needs bf16 tensor cores (sm_80+), device is {caps.arch}")
        if problem.dtype == "fp32":
            if problem.math != "tf32":
                return not_applicable("fp32 runs on tensor cores only with math='tf32'")
            if not caps.tf32_tensor_cores:
                return not_applicable(f"tf32 needs tensor cores (sm_80+), device is {caps.arch}")
        if -(-problem.k // 32) > _MAX_GRID_Y:
            return not_applicable(f"k={problem.k} exceeds the grid's y limit")
        return APPLICABLE

    def configs(self, problem: ConvProblem, caps: Capabilities) -> list[WmmaConfig]:
        return [WmmaConfig(bm, bn) for bm, bn in TILES]

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> WmmaConfig:
        rows = problem.n * int(np.prod(problem.out_spatial))
        if rows >= 128 * 64 and problem.k >= 64:
            return WmmaConfig(128, 64)
        if rows >= 64 * 16 and problem.k >= 48:
            return WmmaConfig(64, 64)
        return WmmaConfig(32, 32)

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(d) for d in CTYPES]

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        if problem.dtype == dtypes.FLOAT64.short:
            raise NotSupportedError(f"{self.name}: {NO_FP64_MMA}")
        if not isinstance(config, WmmaConfig):
            raise TypeError(f"{self.name}: expected a WmmaConfig, got {config!r}")
        return _Runner(backend, problem, config)
