"""Winograd convolution solvers for 3x3 filters (kernels: ``cuda_src/conv/winograd.cu``).

Three solvers, all for a 2-D forward convolution with a 3x3 filter, stride 1, dilation
1, groups 1 and any (also asymmetric) padding, NCHW+KCRS or NHWC+KRSC, fp32/fp16/bf16
storage with fp32 transforms and fp32 accumulation:

- ``conv_fwd_winograd_f2x2_3x3`` (:class:`WinogradF2x2Solver`) and
  ``conv_fwd_winograd_f4x4_3x3`` (:class:`WinogradF4x4Solver`): filter transform and
  input transform into a workspace, alpha^2 batched GEMMs (alpha = 4 or 6), then the
  output transform with the fused epilogue. Workspace: 4 * alpha^2 * (C*K + C*T + K*T)
  bytes, T = N * ceil(P/m) * ceil(Q/m) output tiles of m x m.
- ``conv_fwd_winograd_fused_f2x2_3x3`` (:class:`WinogradFusedSolver`): F(2x2, 3x3) in
  one kernel, transforms in shared memory and products in registers, no workspace; it
  recomputes the filter transform per block of 32 tiles, so it pays for small C*K or
  small images (few blocks), where the non-fused pipeline is launch- and
  traffic-bound.

Interpolation points: F(2x2) 0, 1, -1, inf; F(4x4) 0, 1, -1, 1/2, -1/2, inf (rather than
the common +-2: the transform entries stay <= 5 and dyadic in B^T and A^T).

Measured error against the float64 reference (fp32 storage, standard-normal x and w).
Winograd's error scales with the largest magnitude L near an output (its transforms mix
a tile's neighbourhood), not with the output's own magnitude; in units of 2^-24 * L,
the maximum over every test shape (tests/test_conv_winograd.py: ResNet-50 and VGG-16
3x3 layers scaled down, and odd shapes):
  F(2x2), non-fused and fused: 6.4  (on real layers with C*9 > 500: 0.002 * C*9)
  F(4x4):                      75   (on real layers with C*9 > 500: 0.048 * C*9)
i.e. F(4x4) is about 12-25x less accurate than F(2x2), which is close to a direct
convolution. The tests bound the error by (2*C*9 + G) * 2^-24 * L with G = 32 for F(2x2)
and 256 for F(4x4), 3-5x the measured figures. fp16/bf16 outputs are
dominated by the storage rounding of y.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import dtypes
from ...errors import NotSupportedError
from ...problems.conv import ConvProblem
from ...runtime.backend import Backend, Kernel
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, NoConfig, Runner, Solver, not_applicable
from .common import ConvTensors, Epilogue, shape_struct

SOURCE = "conv/winograd.cu"
# The storage types computed in float; float64 is not applicable (NO_FP64).
CTYPES = {dt.short: dt.ctype for dt in dtypes.FP32_COMPUTE_TYPES}
# The transforms multiply by fractions (1/2, 1/4, ...) and cancel terms of growing
# magnitude: their error is several times the direct sum's, so float64 would lose the
# accuracy a float64 caller asks for.
NO_FP64 = "Winograd's transforms lose float64 accuracy"

BLOCK = 256
_MAX_GRID = 65535  # grid-stride loops: more blocks than any GPU keeps resident
_FUSED_TILES, _FUSED_K = 32, 32  # WF_TILES, WF_K in winograd.cu
_GEMM_TILE = 64  # WinoTile::BM = BN (winograd.cu)


def _layout_flag(problem: ConvProblem) -> str:
    return "true" if problem.channels_last else "false"


def _names(dtype: str) -> list[str]:
    t = CTYPES[dtype]
    names = ["wino_batched_gemm"]
    for m in (2, 4):
        for nhwc in ("false", "true"):
            names += [
                f"wino_filter_transform<{t}, {m}, {nhwc}>",
                f"wino_input_transform<{t}, {m}, {nhwc}>",
                f"wino_output_transform<{t}, {m}, {nhwc}>",
            ]
    names += [f"wino_fused_f2<{t}, false>", f"wino_fused_f2<{t}, true>"]
    return names


def module_spec(dtype: str) -> ModuleSpec:
    """Every Winograd kernel of one storage type: one module, so a test run compiles
    one module per dtype for all three solvers."""
    return ModuleSpec.make(SOURCE, _names(dtype))


def applicability(problem: ConvProblem) -> Applicability:
    """What every Winograd solver here needs (flat early returns, reasons for explain())."""
    if problem.direction != "fwd":
        return not_applicable("forward convolution only")
    if problem.dtype not in CTYPES:
        return not_applicable(NO_FP64 if problem.dtype == dtypes.FLOAT64.short
                              else f"dtype {problem.dtype} is not available here")  # fmt: skip
    if problem.ndim != 2:
        return not_applicable("needs a 2-D convolution")
    if problem.filter != (3, 3):
        return not_applicable(f"needs a 3x3 filter, got {problem.filter[0]}x{problem.filter[1]}")
    if problem.strides != (1, 1):
        return not_applicable("needs stride 1")
    if problem.dilations != (1, 1):
        return not_applicable("needs dilation 1")
    if problem.groups != 1:
        return not_applicable("needs groups == 1")
    return APPLICABLE


def _tiles(problem: ConvProblem, m: int) -> tuple[int, int, int]:
    p, q = problem.out_spatial
    th, tw = -(-p // m), -(-q // m)
    return th, tw, problem.n * th * tw


def _grid(total: int) -> int:
    return max(1, min(-(-total // BLOCK), _MAX_GRID))


def _readable(kind: str, problem: ConvProblem, m: int) -> str:
    return f"winograd_f{m}x{m}_3x3_{kind}_{problem.layout.lower()}_{problem.dtype}"


class _PipelineRunner(Runner):
    """Filter transform, input transform, batched GEMM, output transform."""

    def __init__(self, backend: Backend, problem: ConvProblem, m: int) -> None:
        spec = module_spec(problem.dtype)
        t, nhwc = CTYPES[problem.dtype], _layout_flag(problem)
        self._filter: Kernel = backend.kernel(spec, f"wino_filter_transform<{t}, {m}, {nhwc}>")
        self._input: Kernel = backend.kernel(spec, f"wino_input_transform<{t}, {m}, {nhwc}>")
        self._gemm: Kernel = backend.kernel(spec, "wino_batched_gemm")
        self._output: Kernel = backend.kernel(spec, f"wino_output_transform<{t}, {m}, {nhwc}>")
        self._problem, self._m = problem, m
        self._shape = shape_struct(problem)
        self._th, self._tw, self._t = _tiles(problem, m)
        a2 = (m + 2) ** 2
        c, k = problem.c, problem.k
        self._sizes = (a2 * c * k, a2 * c * self._t, a2 * k * self._t)  # floats: U, V, M

    @property
    def kernel_names(self) -> list[str]:
        p, m = self._problem, self._m
        return [_readable(kind, p, m) for kind in ("filter", "input", "gemm", "output")]

    def __call__(self, tensors: ConvTensors, epilogue: Epilogue, workspace: Any) -> None:
        x, w, y, z, bias = tensors.kernel_pointers()
        p = self._problem
        nu, nv, nm = self._sizes
        ws = workspace[: 4 * (nu + nv + nm)].view(np.float32)
        u, v, mw = ws[:nu], ws[nu : nu + nv], ws[nu + nv :]
        th, tw = np.int32(self._th), np.int32(self._tw)
        self._filter((_grid(p.c * p.k),), (BLOCK,), (w, u, self._shape))
        self._input((_grid(p.c * self._t),), (BLOCK,), (x, v, self._shape, th, tw))
        grid = (-(-self._t // _GEMM_TILE), -(-p.k // _GEMM_TILE), (self._m + 2) ** 2)
        self._gemm(grid, (BLOCK,), (u, v, mw, np.int32(p.k), np.int32(p.c), np.int64(self._t)))
        self._output(
            (_grid(p.k * self._t),), (BLOCK,),
            (mw, y, z, bias, self._shape, epilogue.struct(), th, tw),
        )  # fmt: skip


class _FusedRunner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem) -> None:
        t, nhwc = CTYPES[problem.dtype], _layout_flag(problem)
        self._kernel = backend.kernel(module_spec(problem.dtype), f"wino_fused_f2<{t}, {nhwc}>")
        self._problem = problem
        self._shape = shape_struct(problem)
        self._th, self._tw, self._t = _tiles(problem, 2)

    @property
    def kernel_names(self) -> list[str]:
        return [_readable("fused", self._problem, 2)]

    def __call__(self, tensors: ConvTensors, epilogue: Epilogue, workspace: Any) -> None:
        x, w, y, z, bias = tensors.kernel_pointers()
        grid = (-(-self._t // _FUSED_TILES), -(-self._problem.k // _FUSED_K))
        args = (x, w, y, z, bias, self._shape, epilogue.struct(), np.int32(self._th),
                np.int32(self._tw))  # fmt: skip
        self._kernel(grid, (BLOCK,), args)


def _require_dtype(name: str, problem: ConvProblem) -> None:
    """A prepare called directly on a dtype without kernels raises the reason."""
    if problem.dtype not in CTYPES:
        raise NotSupportedError(f"{name}: {applicability(problem).reason}")


class _WinogradBase(Solver):
    family = "conv_fwd"
    config_type = NoConfig

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        return applicability(problem)

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(d) for d in CTYPES]


class WinogradF2x2Solver(_WinogradBase):
    """F(2x2, 3x3) with a workspace: measured error up to 6.4 * 2^-24 * L (module
    docstring); workspace 4 * 16 * (C*K + C*T + K*T) bytes."""

    name = "conv_fwd_winograd_f2x2_3x3"
    output_tile = 2

    def workspace_size(self, problem: ConvProblem, config: Config) -> int:
        return workspace_bytes(problem, self.output_tile)

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        _require_dtype(self.name, problem)
        return _PipelineRunner(backend, problem, self.output_tile)


class WinogradF4x4Solver(WinogradF2x2Solver):
    """F(4x4, 3x3) with a workspace, points 0, +-1, +-1/2, inf: measured error up to
    75 * 2^-24 * L (about 12x F(2x2)'s); 2.25x fewer multiplies than F(2x2)."""

    name = "conv_fwd_winograd_f4x4_3x3"
    output_tile = 4


class WinogradFusedSolver(_WinogradBase):
    """F(2x2, 3x3) in one kernel, no workspace; same error as the F(2x2) pipeline."""

    name = "conv_fwd_winograd_fused_f2x2_3x3"

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        _require_dtype(self.name, problem)
        return _FusedRunner(backend, problem)


def workspace_bytes(problem: ConvProblem, m: int) -> int:
    """Exact workspace of the F(m x m) pipeline: U, V and M in fp32."""
    _, _, t = _tiles(problem, m)
    a2 = (m + 2) ** 2
    return 4 * a2 * (problem.c * problem.k + problem.c * t + problem.k * t)


__all__ = [
    "WinogradF2x2Solver",
    "WinogradF4x4Solver",
    "WinogradFusedSolver",
    "applicability",
    "module_spec",
    "workspace_bytes",
]
