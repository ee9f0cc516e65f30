"""Backward filter on the fp64 tensor cores (``dmma_conv_bwd_filter`` in
``cuda_src/conv/dmma_implicit_gemm.cu``).

``conv_bwd_filter_dmma_implicit_gemm`` (:class:`DmmaBwdFilterSolver`): float64 only, sm_80+,
dw = dy^T * im2col(x) as an implicit GEMM with M = K output channels, N = C*R*S filter
columns (in the filter's memory order) and the reduction over the N*P*Q output pixels,
whose products and sums are the tensor core's double MMA (``mma.sync`` m8n8k4 .f64). 1-D,
2-D and 3-D, any groups (one GEMM per group: its K/groups rows by its C/groups*R*S
columns), any padding, stride and dilation; NCHW/KCRS and NHWC/KRSC, and
their 3-D forms (the loaders walk the pixels channels-first and the channels
channels-last: the coalesced direction of each).

Split-K: ``splits`` blocks share the reduction, each over a chunk of output pixels (a
multiple of ``block_k``), writing double partials to the workspace; ``bwd_filter_reduce``
(``cuda_src/conv/splitk_reduce.cuh``) adds them in split order. Deterministic for every
split count. Workspace: 8 * splits * K * C/groups*R*S bytes.

Config (:class:`DmmaSplitKConfig`): the forward's tile fields (block_m rows of K, block_n
filter columns, block_k pixels per stage, the warp tile, two stages) and ``splits``. Two
tiles, both of 32x32 warps and BK 16 in two stages of rows of 20 doubles: 64x64 (4 warps,
40 KiB) and 64x128 (8 warps, 60 KiB: a filter's C*R*S is usually several times its K, so
the wider tile reads each dy slice once per 128 columns).

Error: as the forward, with T = N*P*Q terms per output: within about
N*P*Q * 2^-53 * sum|x||dy| of the exact sum, in any split count.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import dtypes
from ...errors import NotSupportedError
from ...problems.conv import ConvProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities, capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from . import bwd_filter as bwf
from .common import shape_struct
from .dmma_igemm import MAX_GRID_Y, SOURCE, dmma_reason, grid_y, layout_tag
from .tc_igemm import TcTile

# (block_m (K), block_n (C*R*S), block_k (pixels), warp_m, warp_n, stages)
TILES: tuple[tuple[int, int, int, int, int, int], ...] = (
    (64, 64, 16, 32, 32, 2),
    (64, 128, 16, 32, 32, 2),
)
SPLITS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True)
class DmmaSplitKConfig(TcTile):
    block_m: int = 64
    block_n: int = 64
    block_k: int = 16
    warp_m: int = 32
    warp_n: int = 32
    stages: int = 2
    splits: int = 1

    def __post_init__(self) -> None:
        if self.astuple() not in TILES:
            raise ValueError(f"DMMA backward-filter tile {self.astuple()} is not one of {TILES}")
        if self.splits not in SPLITS:
            raise ValueError(f"splits must be one of {SPLITS}, got {self.splits}")

    def tile(self) -> tuple[int, ...]:
        return self.astuple()

    def smem_bytes(self) -> int:
        """Dynamic shared memory: the stages, rows of block_k + 4 doubles."""
        return self.stages * (self.block_m + self.block_n) * (self.block_k + 4) * 8


def kernel_expr(tile: tuple[int, ...], nhwc: bool, d3: bool = False) -> str:
    bm, bn, bk, wm, wn, _ = tile
    args = f"{str(nhwc).lower()}, {bm}, {bn}, {bk}, {wm}, {wn}" + (", true" if d3 else "")
    return f"dmma_conv_bwd_filter<{args}>"


def module_spec(d3: bool = False) -> ModuleSpec:
    """Both layouts of both tiles (1-D/2-D, or 3-D) and the split reduction in double."""
    names = [kernel_expr(t, nhwc, d3) for t in TILES for nhwc in (False, True)]
    return ModuleSpec.make(SOURCE, [*names, bwf._reduce_expr(dtypes.FLOAT64)])


def _dims(problem: ConvProblem) -> tuple[int, int]:
    """(C/groups*R*S: a filter's values, N*P*Q)."""
    return (problem.c_per_group * problem.filter_taps,
            problem.n * int(np.prod(problem.out_spatial)))  # fmt: skip


class _Runner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem, cfg: DmmaSplitKConfig) -> None:
        nhwc, d3 = problem.channels_last, problem.ndim == 3
        spec = module_spec(d3)
        self.gemm = backend.kernel(spec, kernel_expr(cfg.tile(), nhwc, d3))
        self.reduce = backend.kernel(spec, bwf._reduce_expr(dtypes.FLOAT64))
        crs, npq = _dims(problem)
        self.splits = bwf._useful_splits(npq, cfg.splits, cfg.block_k)
        self.chunk = np.int64(bwf._chunk(npq, cfg.splits, cfg.block_k))
        self.grid = (-(-crs // cfg.block_n),
                     grid_y(problem.groups, problem.k_per_group, cfg.block_m), self.splits)
        self.block = (cfg.threads,)
        self.smem = cfg.smem_bytes()
        self.count = problem.k * crs
        self.cgrid = bwf._grid(self.count, backend)
        self.shape = shape_struct(problem)
        self.names = [f"dmma_igemm_bwd_filter_{cfg.label()}_{layout_tag(problem)}_fp64",
                      "bwd_filter_reduce_fp64"]  # fmt: skip

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)

    def __call__(self, tensors: bwf.BwdFilterTensors, epilogue: Any, workspace: Any) -> None:
        ws = bwf._acc_view(workspace, self.count * self.splits, dtypes.FLOAT64)
        self.gemm(self.grid, self.block, (tensors.x, tensors.dy, ws, self.shape, self.chunk),
                  shared_mem=self.smem)  # fmt: skip
        self.reduce((self.cgrid,), (bwf.BLOCK,),
                    (ws, tensors.dw, np.int32(self.splits), np.int64(self.count)))  # fmt: skip


def _fits(config: DmmaSplitKConfig, caps: Capabilities | None) -> bool:
    limit = caps.max_shared_bytes if caps is not None else 48 * 1024
    return config.smem_bytes() <= limit


class DmmaBwdFilterSolver(Solver):
    """Backward filter on the fp64 tensor cores with deterministic split-K (module doc)."""

    name = "conv_bwd_filter_dmma_implicit_gemm"
    family = "conv_bwd_filter"
    config_type = DmmaSplitKConfig
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = bwf.common_reason(problem, "bwd_filter", max_ndim=3)
        reason = reason or dmma_reason(problem, caps)
        if reason:
            return not_applicable(reason)
        crs, npq = _dims(problem)
        if npq >= 2**31 or problem.k * crs >= 2**31:
            return not_applicable("needs N*P*Q and the filter below 2^31 elements")
        if grid_y(problem.groups, problem.k_per_group, 64) > MAX_GRID_Y:
            return not_applicable(f"k={problem.k} in {problem.groups} groups exceeds the "
                                  "grid's y limit")  # fmt: skip
        return APPLICABLE

    def configs(self, problem: ConvProblem, caps: Capabilities) -> list[DmmaSplitKConfig]:
        _, npq = _dims(problem)
        out = []
        for tile in TILES:
            for splits in SPLITS:
                if splits > 1 and npq < splits * 4 * tile[2]:
                    continue  # each split keeps at least 4 slices
                cfg = DmmaSplitKConfig(*tile, splits)
                if _fits(cfg, caps):
                    out.append(cfg)
        return out

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> DmmaSplitKConfig:
        """The wide tile once the filter has 128 columns or more, then enough splits to
        put about four blocks per SM (bwd_filter's target) on the GPU. Unmeasured on a GPU
        so far: a tuning DB entry overrides it."""
        crs, _ = _dims(problem)
        options = self.configs(problem, caps)
        wide = [c for c in options if c.block_n == 128] if crs >= 128 else []
        pool = wide or [c for c in options if c.block_n == 64] or options
        tile = pool[0]
        tiles = grid_y(problem.groups, problem.k_per_group, tile.block_m) * -(-crs // tile.block_n)
        target = bwf._TARGET_BLOCKS["cpu" if caps.emulator else "cuda"]
        want = max(1, -(-target // tiles))
        same = [c for c in pool if c.tile() == tile.tile()]
        return max((c for c in same if c.splits <= want), key=lambda c: c.splits, default=tile)

    def is_valid(self, config: Config, problem: ConvProblem, caps: Capabilities) -> bool:
        return isinstance(config, DmmaSplitKConfig) and _fits(config, caps)

    def workspace_size(self, problem: ConvProblem, config: Config) -> int:
        assert isinstance(config, DmmaSplitKConfig)
        crs, npq = _dims(problem)
        return 8 * bwf._useful_splits(npq, config.splits, config.block_k) * problem.k * crs

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(False), module_spec(True)]

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        caps = capabilities(backend)
        ok = self.is_applicable(problem, caps)
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        if not isinstance(config, DmmaSplitKConfig):
            raise NotSupportedError(f"{self.name}: expected a DmmaSplitKConfig, got {config!r}")
        if not _fits(config, caps):
            raise NotSupportedError(f"{self.name}: config {config.label()} needs "
                                    f"{config.smem_bytes()} bytes of shared memory, more than "
                                    f"{caps.arch} has")  # fmt: skip
        return _Runner(backend, problem, config)
