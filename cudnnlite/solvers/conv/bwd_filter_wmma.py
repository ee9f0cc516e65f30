"""Backward filter on tensor cores (family ``conv_bwd_filter``). Kernels:
``cuda_src/conv/bwd_filter_wmma.cu`` (one module per dtype), then ``bwd_filter_reduce`` of
``cuda_src/conv/bwd_filter.cu``.

:class:`WmmaSplitKSolver` (``conv_bwd_filter_wmma_implicit_gemm``): per group the GEMM
dW (K/g x C/g*R*S) = dY^T (K/g x N*P*Q) * X-patches (N*P*Q x C/g*R*S) with WMMA m16n16k16
and fp32 accumulation; fp16 (``caps.fp16_tensor_cores``, sm_70+) and bf16
(``caps.bf16_tensor_cores``, sm_80+). No im2col buffer: 32-deep slices of N*P*Q are
gathered into shared memory. The reduction over N*P*Q is split across ``splits`` blocks
per tile; each writes its fp32 partial tile to the workspace and the reduce kernel adds
the splits in a fixed order: deterministic. Any stride, dilation, padding, groups; both
layouts; 1-D and 2-D. Tensors contiguous in the problem's layout.

Config: :class:`WmmaSplitKConfig` (tile 32x32 = one warp or 64x64 = four warps; splits).
Workspace: 4 * splits * K * C/g*R*S bytes.

Error: fp16/bf16 products are exact in fp32 and the sums are fp32, so the error is the
direct kernel's (fp32 accumulation in another order plus the output's storage rounding).
"""

from __future__ import annotations

from collections.abc import Sequence
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
from . import bwd_filter
from .bwd_filter import BwdFilterTensors, common_reason, dtype_of
from .common import shape_struct
from .tc_igemm import NO_FP64_MMA

SOURCE = "conv/bwd_filter_wmma.cu"
BK = 32  # bwfw::kBK: m per slice
TILES = (32, 64)  # BM = BN
SPLITS = (1, 4, 16, 64)
MAX_GRID_Y = 65535
_TARGET_BLOCKS = {"cpu": 64, "cuda": 4 * 132}


@dataclass(frozen=True)
class WmmaSplitKConfig(Config):
    """tile: BM = BN of the block (32: one warp, 64: four); splits: blocks sharing N*P*Q."""

    tile: int = 64
    splits: int = 1

    def __post_init__(self) -> None:
        if self.tile not in TILES:
            raise ValueError(f"tile must be one of {TILES}, got {self.tile}")
        if not isinstance(self.splits, int) or not 1 <= self.splits <= 256:
            raise ValueError(f"splits must be an int in [1, 256], got {self.splits}")

    @property
    def threads(self) -> int:
        return (self.tile // 32) ** 2 * 32

    def label(self) -> str:
        return f"{self.tile}x{self.tile}x{BK}_split{self.splits}"


def _low_precision() -> list[dtypes.DType]:
    return [dt for dt in dtypes.FP32_COMPUTE_TYPES if dt.short in ("fp16", "bf16")]


def _expr(dt: dtypes.DType, tile: int, nhwc: bool) -> str:
    return f"bwd_filter_wmma<{dt.ctype}, {tile}, {tile}, {'true' if nhwc else 'false'}>"


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """Every tile and layout of one storage type (fp16 or bf16)."""
    return ModuleSpec.make(SOURCE, [_expr(dt, t, nhwc) for t in TILES for nhwc in (False, True)])


_gemm_dims = bwd_filter._gemm_dims


def _chunk(npq: int, splits: int) -> int:
    return bwd_filter._chunk(npq, splits, BK)


def _useful_splits(npq: int, splits: int) -> int:
    return bwd_filter._useful_splits(npq, splits, BK)


class _Runner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem, cfg: WmmaSplitKConfig) -> None:
        dt = dtype_of(problem)
        nhwc = problem.channels_last
        self.gemm = backend.kernel(module_spec(dt), _expr(dt, cfg.tile, nhwc))
        self.reduce = backend.kernel(bwd_filter.module_spec(dt), f"bwd_filter_reduce<{dt.ctype}>")
        rows, cols, npq = _gemm_dims(problem)
        self.splits = _useful_splits(npq, cfg.splits)
        self.chunk = np.int64(_chunk(npq, cfg.splits))
        self.grid = (-(-cols // cfg.tile), -(-rows // cfg.tile), problem.groups * self.splits)
        self.threads = cfg.threads
        self.count = problem.k * cols
        self.cgrid = max(1, min(-(-self.count // 256), 4096 if backend.name == "cpu" else 1 << 20))
        self.shape = shape_struct(problem)
        layout = "nhwc" if nhwc else "nchw"
        self.names = [
            f"bwd_filter_wmma_{cfg.tile}x{cfg.tile}x{BK}_split{self.splits}_{layout}_{dt.short}",
            f"bwd_filter_reduce_{dt.short}",
        ]

    def __call__(self, tensors: BwdFilterTensors, epilogue: Any, workspace: Any) -> None:
        ws = workspace[: 4 * self.count * self.splits].view(np.float32)
        self.gemm(self.grid, (self.threads,), (tensors.x, tensors.dy, ws, self.shape, self.chunk))
        self.reduce((self.cgrid,), (256,), (ws, tensors.dw, np.int32(self.splits),
                                            np.int64(self.count)))  # fmt: skip

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)


class WmmaSplitKSolver(Solver):
    """Tensor-core implicit GEMM over N*P*Q, deterministic split-K (module docstring)."""

    name = "conv_bwd_filter_wmma_implicit_gemm"
    family = "conv_bwd_filter"
    config_type = WmmaSplitKConfig
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, "bwd_filter")
        if reason:
            return not_applicable(reason)
        if problem.dtype == dtypes.FLOAT64.short:
            return not_applicable(NO_FP64_MMA)
        if problem.dtype == "fp32":
            return not_applicable("needs fp16 or bf16 (tensor-core inputs), got fp32")
        if problem.dtype == "fp16" and not caps.fp16_tensor_cores:
            return not_applicable(f"fp16 needs tensor cores (sm_70+), device is {caps.arch}")
        if problem.dtype == "bf16" and not caps.bf16_tensor_cores:
            return not_applicable(f"bf16 needs bf16 tensor cores (sm_80+), device is {caps.arch}")
        rows, cols, npq = _gemm_dims(problem)
        if -(-rows // min(TILES)) > MAX_GRID_Y:
            return not_applicable(f"needs K/groups <= {MAX_GRID_Y * min(TILES)}, got {rows}")
        if npq >= 2**31 or problem.k * cols >= 2**31:
            return not_applicable("needs N*P*Q and the filter below 2^31 elements")
        return APPLICABLE

    def configs(self, problem: ConvProblem, caps: Capabilities) -> Sequence[WmmaSplitKConfig]:
        _, _, npq = _gemm_dims(problem)
        out = []
        for tile in TILES:
            for splits in SPLITS:
                if splits > 1 and npq < splits * 4 * BK:
                    continue  # each split keeps at least 4 slices
                if problem.groups * splits > MAX_GRID_Y:
                    continue
                out.append(WmmaSplitKConfig(tile, splits))
        return out

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> WmmaSplitKConfig:
        rows, cols, _ = _gemm_dims(problem)
        tile = 64 if rows >= 48 and cols >= 48 else 32
        tiles = -(-rows // tile) * -(-cols // tile) * problem.groups
        target = _TARGET_BLOCKS["cpu" if caps is not None and caps.arch == "cpu" else "cuda"]
        want = max(1, -(-target // tiles))
        candidates = [c.splits for c in self.configs(problem, caps) if c.tile == tile]
        return WmmaSplitKConfig(tile, max([s for s in candidates if s <= want] or [1]))

    def is_valid(self, config: Config, problem: ConvProblem, caps: Capabilities) -> bool:
        return isinstance(config, WmmaSplitKConfig) and problem.groups * config.splits <= MAX_GRID_Y

    def workspace_size(self, problem: ConvProblem, config: Config) -> int:
        rows, cols, npq = _gemm_dims(problem)
        return 4 * _useful_splits(npq, config.splits) * problem.k * cols  # type: ignore[attr-defined]

    def module_specs(self) -> list[ModuleSpec]:
        specs = [module_spec(dt) for dt in _low_precision()]
        return specs + [bwd_filter.module_spec(dt) for dt in _low_precision()]

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        reason = common_reason(problem, "bwd_filter")
        if problem.dtype == dtypes.FLOAT64.short:
            reason = NO_FP64_MMA
        if reason or problem.dtype == "fp32":
            raise NotSupportedError(f"{self.name}: {reason or 'needs fp16 or bf16'}")
        if not isinstance(config, WmmaSplitKConfig):
            raise NotSupportedError(f"{self.name}: expected a WmmaSplitKConfig, got {config!r}")
        return _Runner(backend, problem, config)
