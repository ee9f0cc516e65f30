"""Convolution backward data solvers (family ``conv_bwd_data``). Kernels:
``cuda_src/conv/bwd_data.cu`` (one module per dtype) plus the forward solvers' own.

- :class:`DirectSolver` (``conv_bwd_data_direct``): one thread per dx element gathers
  the dy positions that reach it (the gaps of a stride are skipped by an exact-division
  test, not multiplied by zeros). Any stride, dilation, padding, groups, both layouts,
  1-D, 2-D and 3-D; fixed summation order: deterministic. The fallback. fp32/fp16/bf16
  accumulate in fp32, fp64 in double (the epilogue's scalars in double too).
- Rotated-forward solvers: for stride 1 the backward data IS a forward convolution of
  dy with the filters rotated by 180 degrees and K/C swapped within each group, padded
  by dil*(f-1) - pad on each side. A kernel writes the transformed filter into the
  workspace, then a FORWARD solver's runner computes dx (its fused epilogue adds the
  conv_transpose bias). So the forward's Winograd F(2x2)/F(4x4) (3x3, stride 1) and its
  tensor-core WMMA implicit GEMM (fp16/bf16, tf32) run backward data too:
  ``conv_bwd_data_winograd_f2x2_3x3``, ``conv_bwd_data_winograd_f4x4_3x3``,
  ``conv_bwd_data_wmma_implicit_gemm``, ``conv_bwd_data_implicit_gemm_rotated``.
  Each is applicable where its forward solver is on the transformed problem; its
  configs, validity and determinism are the forward solver's. Workspace: the rotated
  filter (rounded up to 256 bytes) plus the forward solver's workspace.

- The phase-decomposed implicit GEMM for any stride and dilation
  (``conv_bwd_data_implicit_gemm``) lives in :mod:`.bwd_data_igemm`.

Tensors: :class:`BwdDataTensors` (dy, w, dx, bias), contiguous in the problem's layout.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from ... import dtypes
from ...errors import NotSupportedError
from ...problems.conv import ConvProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from .bwd_filter import common_reason, dtype_of
from .common import ConvTensors, Epilogue, shape_struct

SOURCE = "conv/bwd_data.cu"
BLOCK = 256
_GRID_CAP = {"cpu": 4096, "cuda": 1 << 20}
_ALIGN = 256


@dataclass
class BwdDataTensors:
    """dy, w (read), dx (written), bias (C,) or None: contiguous, the problem's layout."""

    dy: Any
    w: Any
    dx: Any
    bias: Any = None


def _flag(nhwc: bool) -> str:
    return "true" if nhwc else "false"


def _suffix(d3: bool) -> str:
    return "_3d" if d3 else ""


def _direct_expr(dt: dtypes.DType, nhwc: bool, d3: bool = False) -> str:
    return f"bwd_data_direct{_suffix(d3)}<{dt.ctype}, {_flag(nhwc)}>"


def _rotate_expr(dt: dtypes.DType, nhwc: bool, d3: bool = False) -> str:
    return f"rotate_filter{_suffix(d3)}<{dt.ctype}, {_flag(nhwc)}>"


def module_spec(dt: dtypes.DType, d3: bool = False) -> ModuleSpec:
    """Every kernel of bwd_data.cu for storage type ``dt``: the 2-D (and 1-D) ones, or the
    3-D ones (their own module)."""
    names = [_direct_expr(dt, nhwc, d3) for nhwc in (False, True)]
    names += [_rotate_expr(dt, nhwc, d3) for nhwc in (False, True)]
    return ModuleSpec.make(SOURCE, names)


def module_specs_all() -> list[ModuleSpec]:
    return [module_spec(dt, d3) for d3 in (False, True) for dt in dtypes.FLOAT_TYPES]


def _layout_tag(problem: ConvProblem) -> str:
    if problem.ndim == 3:
        return problem.layout.lower()
    return "nhwc" if problem.channels_last else "nchw"


def _grid(total: int, backend: Backend) -> int:
    return max(1, min(-(-total // BLOCK), _GRID_CAP[backend.name]))


def _typed(workspace: Any, offset: int, count: int, dt: dtypes.DType) -> Any:
    """``count`` elements of ``dt`` at byte ``offset`` of a uint8 workspace (CuPy has no
    bfloat16: bf16 is viewed as uint16 there, the kernels only see the pointer)."""
    raw = workspace[offset : offset + count * dt.itemsize]
    if dt.short == "bf16" and not isinstance(raw, np.ndarray):
        return raw.view(np.uint16)
    return raw.view(dt.numpy)


# ------------------------------------------------------------------ direct


class _DirectRunner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem) -> None:
        dt, d3 = dtype_of(problem), problem.ndim == 3
        self.kernel = backend.kernel(module_spec(dt, d3),
                                     _direct_expr(dt, problem.channels_last, d3))  # fmt: skip
        self.shape = shape_struct(problem)
        self.blocks = _grid(int(np.prod(problem.x_shape())), backend)
        self.name = f"bwd_data_direct_{_layout_tag(problem)}_{dt.short}"
        self.dt = dt

    def __call__(self, tensors: BwdDataTensors, epilogue: Epilogue, workspace: Any) -> None:
        bias = tensors.bias if tensors.bias is not None else tensors.dy
        args = (tensors.dy, tensors.w, tensors.dx, bias, self.shape,
                epilogue.struct(self.dt))
        self.kernel((self.blocks,), (BLOCK,), args)

    @property
    def kernel_names(self) -> list[str]:
        return [self.name]


class DirectSolver(Solver):
    """Gather-based, one thread per dx element; any problem; the fallback."""

    name = "conv_bwd_data_direct"
    family = "conv_bwd_data"
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, "bwd_data", max_ndim=3)
        return not_applicable(reason) if reason else APPLICABLE

    def module_specs(self) -> list[ModuleSpec]:
        return module_specs_all()

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        return _DirectRunner(backend, problem)


# ------------------------------------------------------------------ rotated forward


def forward_of(problem: ConvProblem) -> ConvProblem | None:
    """The forward problem dy -> dx a stride-1 backward data equals, or None when the
    padding exceeds the dilated filter's reach (it would need a negative padding)."""
    pads = []
    for f, d, (b, a) in zip(problem.filter, problem.dilations, problem.pads, strict=True):
        reach = d * (f - 1)
        if b > reach or a > reach:
            return None
        pads.append((reach - b, reach - a))
    return dataclasses.replace(
        problem,
        c=problem.k,
        k=problem.c,
        spatial=problem.out_spatial,
        pads=tuple(pads),
        direction="fwd",
    )


def _fwd_workspace_offset(problem: ConvProblem) -> int:
    dt = dtype_of(problem)
    size = int(np.prod(problem.w_shape())) * dt.itemsize
    return -(-size // _ALIGN) * _ALIGN


class _RotatedRunner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem, inner: Solver,
                 fwd: ConvProblem, config: Config) -> None:  # fmt: skip
        dt, d3 = dtype_of(problem), problem.ndim == 3
        self.dt = dt
        self.rotate = backend.kernel(module_spec(dt, d3),
                                     _rotate_expr(dt, problem.channels_last, d3))  # fmt: skip
        self.shape = shape_struct(problem)
        self.count = int(np.prod(problem.w_shape()))
        self.w_shape = fwd.w_shape()
        self.blocks = _grid(self.count, backend)
        self.offset = _fwd_workspace_offset(problem)
        self.inner = inner.prepare(backend, fwd, config)
        self.inner_ws = inner.workspace_size(fwd, config)
        self.names = [f"rotate_filter_{_layout_tag(problem)}_{dt.short}"]

    def __call__(self, tensors: BwdDataTensors, epilogue: Epilogue, workspace: Any) -> None:
        wr = _typed(workspace, 0, self.count, self.dt).reshape(self.w_shape)
        self.rotate((self.blocks,), (BLOCK,), (tensors.w, wr, self.shape))
        inner_ws = None
        if self.inner_ws:
            inner_ws = workspace[self.offset : self.offset + self.inner_ws]
        fwd = ConvTensors(x=tensors.dy, w=wr, y=tensors.dx, bias=tensors.bias)
        self.inner(fwd, epilogue, inner_ws)

    @property
    def kernel_names(self) -> list[str]:
        return self.names + self.inner.kernel_names


class _RotatedForwardSolver(Solver):
    """Stride-1 backward data through a forward solver on the rotated filters."""

    family = "conv_bwd_data"
    forward_name: ClassVar[str]

    @property
    def _inner(self) -> Solver:
        from ...dispatch import registry

        return registry.get(self.forward_name)

    @property
    def deterministic(self) -> bool:  # type: ignore[override]
        return self._inner.deterministic

    @property
    def config_type(self) -> type[Config]:  # type: ignore[override]
        return self._inner.config_type

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, "bwd_data", max_ndim=3)  # the inner solver decides
        if reason:
            return not_applicable(reason)
        if any(s != 1 for s in problem.strides):
            return not_applicable(f"needs stride 1, got {problem.strides}")
        fwd = forward_of(problem)
        if fwd is None:
            return not_applicable("needs padding <= dilation * (filter - 1) on every side")
        app = self._inner.is_applicable(fwd, caps)
        if not app:
            return not_applicable(f"{self.forward_name} on the rotated problem: {app.reason}")
        return APPLICABLE

    def configs(self, problem: ConvProblem, caps: Capabilities) -> Sequence[Config]:
        return self._inner.configs(forward_of(problem), caps)

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> Config:
        return self._inner.default_config(forward_of(problem), caps)

    def config_from_dict(self, d: dict[str, Any]) -> Config:
        return self._inner.config_from_dict(d)

    def is_valid(self, config: Config, problem: ConvProblem, caps: Capabilities) -> bool:
        fwd = forward_of(problem)
        return fwd is not None and self._inner.is_valid(config, fwd, caps)

    def workspace_size(self, problem: ConvProblem, config: Config) -> int:
        fwd = forward_of(problem)
        if fwd is None:
            return 0
        return _fwd_workspace_offset(problem) + self._inner.workspace_size(fwd, config)

    def module_specs(self) -> list[ModuleSpec]:
        return module_specs_all() + self._inner.module_specs()

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        ok = self.is_applicable(problem, _caps_of(backend))
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        return _RotatedRunner(backend, problem, self._inner, forward_of(problem), config)


def _caps_of(backend: Backend) -> Capabilities:
    from ...runtime.caps import capabilities

    return capabilities(backend)


class WinogradF2x2Solver(_RotatedForwardSolver):
    name = "conv_bwd_data_winograd_f2x2_3x3"
    forward_name = "conv_fwd_winograd_f2x2_3x3"


class WinogradF4x4Solver(_RotatedForwardSolver):
    name = "conv_bwd_data_winograd_f4x4_3x3"
    forward_name = "conv_fwd_winograd_f4x4_3x3"


class WmmaImplicitGemmSolver(_RotatedForwardSolver):
    name = "conv_bwd_data_wmma_implicit_gemm"
    forward_name = "conv_fwd_wmma_implicit_gemm"


class ImplicitGemmRotatedSolver(_RotatedForwardSolver):
    name = "conv_bwd_data_implicit_gemm_rotated"
    forward_name = "conv_fwd_implicit_gemm"


class TcImplicitGemmSolver(_RotatedForwardSolver):
    name = "conv_bwd_data_tc_implicit_gemm"
    forward_name = "conv_fwd_tc_implicit_gemm"


class TcWgmmaSolver(_RotatedForwardSolver):
    """Hopper's warpgroup MMA (sm_90): the wgmma forward (conv_fwd_tc_wgmma) on the rotated
    filters, stride 1; fp16/bf16, K/groups a multiple of 8 (the rotated problem's C)."""

    name = "conv_bwd_data_tc_wgmma"
    forward_name = "conv_fwd_tc_wgmma"


class DmmaImplicitGemmSolver(_RotatedForwardSolver):
    """float64 on the fp64 tensor cores (sm_80+): the forward DMMA kernel on the rotated
    filters, stride 1 (any stride: conv_bwd_data_dmma_implicit_gemm_phased)."""

    name = "conv_bwd_data_dmma_implicit_gemm"
    forward_name = "conv_fwd_dmma_implicit_gemm"
