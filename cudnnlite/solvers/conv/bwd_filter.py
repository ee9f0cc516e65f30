"""Convolution backward filter solvers (family ``conv_bwd_filter``) and the backward
bias kernels. Kernels: ``cuda_src/conv/bwd_filter.cu``, one module per dtype.

- :class:`DirectSolver` (``conv_bwd_filter_direct``): a 256-thread block per filter
  element reduces its N*P*Q products with a fixed tree. Any stride, dilation, padding,
  groups, both layouts, 1-D, 2-D and 3-D; deterministic. The fallback.
- :class:`ImplicitGemmSplitKSolver` (``conv_bwd_filter_implicit_gemm``): per group, the
  GEMM dW (K/g x C/g*R*S) = dY^T (K/g x NPQ) * X-patches (NPQ x C/g*R*S), no im2col
  buffer (patches gathered into shared memory), double-buffered tiles of
  conv/gemm_tiles.cuh. The reduction over N*P*Q is split across ``splits`` blocks per
  tile; each split writes its fp32 partial tile to the workspace and a second kernel
  adds the splits in a fixed order: deterministic. Workspace 4 * splits * K * C/g*R*S
  (8 * ... for float64, whose partials are doubles). 1-D, 2-D and 3-D: the 3-D kernels
  (``bwd_filter_gemm<..., true>``: output planes (n, o) in the position's third digit,
  taps with their depth) are a module of their own per dtype (:func:`gemm_3d_spec`).
- :class:`ImplicitGemmAtomicSolver` (``conv_bwd_filter_implicit_gemm_atomic``): the same
  GEMM, splits added with fp32 atomics into a zeroed workspace (4 * K * C/g*R*S bytes;
  float64: double atomics, 8 * ... bytes), then converted. The order of the atomic adds
  varies between runs: NOT deterministic, never chosen under
  ``cudnnlite.settings(deterministic=True)``.

Precision: fp32/fp16/bf16 accumulate in fp32; float64 accumulates in fp64 everywhere
(products, the block trees, the split partials and their reduction; the GEMM's stages are
doubles, two stages instead of three so the 64x64 tile fits 48 KB).

Tensor cores (fp16/bf16): ``conv_bwd_filter_wmma_implicit_gemm`` in :mod:`.bwd_filter_wmma`.

Winograd backward filter F(2x2, 3x3) is NOT implemented. Operation count for a ResNet-50
3x3 layer (N 32, C = K = 64, 56x56, stride 1): the GEMM multiplies K*C*9*N*P*Q = 3.7e9;
Winograd over T = N*28*28 = 25088 tiles needs 16*K*C*T = 1.6e9 products (2.25x fewer)
plus ~1e8 transform operations (x tiles per channel, dy tiles per output channel; the
inverse filter transform once per (k, c)). It pays on CUDA cores only if the transformed
tiles stay on chip: through a workspace they are 2 * 16*T*C*4 = 206 MB written and read back,
about the time the multiplies save; against tensor cores it does not pay.

Tensors: :class:`BwdFilterTensors` (x, dy, dw), contiguous in the problem's layout.
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
from .common import shape_struct

SOURCE = "conv/bwd_filter.cu"
BLOCK = 256
BK = 16  # bwf::kBK
# BM = BN -> (TM, TN): 256 threads each. 128 (8 x 8 per thread, two stages): float32,
# 2-D and 3-D NDHWC. sm_90: 124-128 registers, no spills, main loop 78% FFMA (NCHW) / 74%
# (NHWC) / 73% (NDHWC), where the 64 tile has 58% (3-D: 52%); fp16/bf16 (staged through
# registers) and 3-D NCDHW spill 12-268 bytes at the 128-register bound, and float64's two
# stages would take 66 KB of static shared memory.
TILES = {128: (8, 8), 64: (4, 4), 32: (2, 2)}
MAX_GRID_Y = 65535
_GRID_CAP = {"cpu": 4096, "cuda": 1 << 20}
_TARGET_BLOCKS = {"cpu": 64, "cuda": 4 * 132}  # enough blocks to fill the device


def tiles_for(dt: dtypes.DType, d3: bool = False, nhwc: bool = True) -> tuple[int, ...]:
    """The GEMM tiles compiled for storage type ``dt``, 3-D and the layout."""
    big = dt.short == "fp32" and (nhwc or not d3)
    return tuple(t for t in TILES if t < 128 or big)


def _tiles(problem: ConvProblem) -> tuple[int, ...]:
    return tiles_for(dtype_of(problem), problem.ndim == 3, problem.channels_last)


@dataclass
class BwdFilterTensors:
    """x (read), dy (read), dw (written): contiguous, the problem's layout and dtype."""

    x: Any
    dy: Any
    dw: Any


def dtype_of(problem: ConvProblem) -> dtypes.DType:
    for dt in dtypes.FLOAT_TYPES:
        if dt.short == problem.dtype:
            return dt
    raise NotSupportedError(f"dtype: {problem.dtype} is not available (ml_dtypes missing?)")


def common_reason(problem: ConvProblem, direction: str, max_ndim: int = 2) -> str | None:
    """What none of the backward solvers supports, or None; ``max_ndim`` 3 for the solvers
    whose kernels have a 3-D variant."""
    if problem.direction != direction:
        return f"needs direction {direction}, got {problem.direction}"
    if problem.ndim > max_ndim:
        return f"needs a 1-D or 2-D convolution, got {problem.ndim}-D"
    if problem.dtype not in {dt.short for dt in dtypes.FLOAT_TYPES}:
        return f"dtype {problem.dtype} is not available here (ml_dtypes missing)"
    return None


def _flag(nhwc: bool) -> str:
    return "true" if nhwc else "false"


def _direct_expr(dt: dtypes.DType, nhwc: bool, d3: bool = False) -> str:
    return f"bwd_filter_direct{'_3d' if d3 else ''}<{dt.ctype}, {_flag(nhwc)}>"


def _gemm_expr(dt: dtypes.DType, nhwc: bool, tile: int, d3: bool = False) -> str:
    tm, tn = TILES[tile]
    d3_arg = ", true" if d3 else ""
    return f"bwd_filter_gemm<{dt.ctype}, {_flag(nhwc)}, {tile}, {tile}, {tm}, {tn}{d3_arg}>"


def _reduce_expr(dt: dtypes.DType) -> str:
    return f"bwd_filter_reduce<{dt.ctype}>"


def module_spec(dt: dtypes.DType, d3: bool = False) -> ModuleSpec:
    """Every kernel of bwd_filter.cu for storage type ``dt``; d3: the 3-D direct kernels
    and the bias kernels (a small module: a 3-D call compiles no GEMM kernels)."""
    if d3:
        names = [_direct_expr(dt, nhwc, True) for nhwc in (False, True)]
        names += [_reduce_expr(dt), f"bwd_bias_nchw<{dt.ctype}>", f"bwd_bias_nhwc<{dt.ctype}>"]
        return ModuleSpec.make(SOURCE, names)
    names = [_direct_expr(dt, nhwc) for nhwc in (False, True)]
    names += [_gemm_expr(dt, nhwc, t) for t in tiles_for(dt) for nhwc in (False, True)]
    names += [_reduce_expr(dt), _zero_name(dt)]
    names += [f"bwd_bias_nchw<{dt.ctype}>", f"bwd_bias_nhwc<{dt.ctype}>"]
    return ModuleSpec.make(SOURCE, names)


def gemm_3d_spec(dt: dtypes.DType) -> ModuleSpec:
    """The 3-D GEMM kernels (both tiles and layouts) with the split reduction and the
    atomic variant's zeroing, a module of their own (a 2-D call compiles none of them)."""
    names = [_gemm_expr(dt, nhwc, t, True) for nhwc in (False, True)
             for t in tiles_for(dt, True, nhwc)]  # fmt: skip
    return ModuleSpec.make(SOURCE, [*names, _reduce_expr(dt), _zero_name(dt)])


def _layout_tag(problem: ConvProblem) -> str:
    if problem.ndim == 3:
        return problem.layout.lower()
    return "nhwc" if problem.channels_last else "nchw"


def _grid(total: int, backend: Backend) -> int:
    return max(1, min(-(-total // BLOCK), _GRID_CAP[backend.name]))


def _f32(workspace: Any, count: int, offset: int = 0) -> Any:
    return workspace[offset : offset + 4 * count].view(np.float32)


def acc_dtype(dt: dtypes.DType) -> np.dtype:
    """The NumPy type of the partials (cl::acc_t<T>): float32, or float64 for fp64."""
    return np.dtype(np.float64) if dt.acc_ctype == "double" else np.dtype(np.float32)


def _acc_view(workspace: Any, count: int, dt: dtypes.DType) -> Any:
    acc = acc_dtype(dt)
    return workspace[: acc.itemsize * count].view(acc)


def _zero_name(dt: dtypes.DType) -> str:
    return "zero_f64" if dt.acc_ctype == "double" else "zero_f32"


# ------------------------------------------------------------------ direct


class _DirectRunner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem) -> None:
        dt, d3 = dtype_of(problem), problem.ndim == 3
        self.kernel = backend.kernel(module_spec(dt, d3),
                                     _direct_expr(dt, problem.channels_last, d3))  # fmt: skip
        self.shape = shape_struct(problem)
        total = int(np.prod(problem.w_shape()))
        self.blocks = max(1, min(total, _GRID_CAP[backend.name] * 4))
        self.name = f"bwd_filter_direct_{_layout_tag(problem)}_{dt.short}"

    def __call__(self, tensors: BwdFilterTensors, epilogue: Any, workspace: Any) -> None:
        args = (tensors.x, tensors.dy, tensors.dw, self.shape)
        self.kernel((self.blocks,), (BLOCK,), args)

    @property
    def kernel_names(self) -> list[str]:
        return [self.name]


class DirectSolver(Solver):
    """A block per filter element, fixed-order reduction; any problem; the fallback."""

    name = "conv_bwd_filter_direct"
    family = "conv_bwd_filter"
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, "bwd_filter", max_ndim=3)
        return not_applicable(reason) if reason else APPLICABLE

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(dt, d3) for d3 in (False, True) for dt in dtypes.FLOAT_TYPES]

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        return _DirectRunner(backend, problem)


# ------------------------------------------------------------------ implicit GEMM


@dataclass(frozen=True)
class SplitKConfig(Config):
    """tile: BM = BN of the GEMM tile (64 or 32); splits: blocks sharing the reduction."""

    tile: int = 64
    splits: int = 1

    def __post_init__(self) -> None:
        if self.tile not in TILES:
            raise ValueError(f"tile must be one of {sorted(TILES)}, got {self.tile}")
        if not isinstance(self.splits, int) or not 1 <= self.splits <= 256:
            raise ValueError(f"splits must be an int in [1, 256], got {self.splits}")

    def label(self) -> str:
        return f"{self.tile}x{self.tile}_split{self.splits}"


def _gemm_dims(problem: ConvProblem) -> tuple[int, int, int]:
    """(rows K/g, columns C/g*R*S, reduction N*P*Q)."""
    npq = problem.n * int(np.prod(problem.out_spatial))
    return problem.k_per_group, problem.c_per_group * problem.filter_taps, npq


def _chunk(npq: int, splits: int, bk: int = BK) -> int:
    """m per split: a multiple of the kernel's slice depth bk, so each split's slices
    start aligned."""
    per = -(-npq // splits)
    return -(-per // bk) * bk


def _useful_splits(npq: int, splits: int, bk: int = BK) -> int:
    """Splits that receive at least one m after rounding the chunk up."""
    return -(-npq // _chunk(npq, splits, bk))


class _GemmRunner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem, cfg: SplitKConfig,
                 atomic: bool) -> None:  # fmt: skip
        dt = dtype_of(problem)
        nhwc, d3 = problem.channels_last, problem.ndim == 3
        spec = gemm_3d_spec(dt) if d3 else module_spec(dt)
        self.gemm = backend.kernel(spec, _gemm_expr(dt, nhwc, cfg.tile, d3))
        self.reduce = backend.kernel(spec, _reduce_expr(dt))
        self.zero = backend.kernel(spec, _zero_name(dt))
        self.dt = dt
        rows, cols, npq = _gemm_dims(problem)
        self.splits = _useful_splits(npq, cfg.splits)
        self.chunk = np.int64(_chunk(npq, cfg.splits))
        self.grid = (-(-cols // cfg.tile), -(-rows // cfg.tile), problem.groups * self.splits)
        self.count = problem.k * cols
        self.shape = shape_struct(problem)
        self.atomic = atomic
        self.backend = backend
        self.cgrid = _grid(self.count, backend)
        kind = "atomic" if atomic else f"split{self.splits}"
        self.names = [
            f"bwd_filter_implicit_gemm_{cfg.tile}x{cfg.tile}x{BK}_{kind}_{_layout_tag(problem)}"
            f"_{dt.short}",
            f"bwd_filter_reduce_{dt.short}",
        ]
        if atomic:
            self.names.insert(0, _zero_name(dt))

    def __call__(self, tensors: BwdFilterTensors, epilogue: Any, workspace: Any) -> None:
        count = np.int64(self.count)
        ws = _acc_view(workspace, self.count * (1 if self.atomic else self.splits), self.dt)
        if self.atomic:
            self.zero((self.cgrid,), (BLOCK,), (ws, count))
        self.gemm(self.grid, (BLOCK,), (tensors.x, tensors.dy, ws, self.shape, self.chunk,
                                        np.int32(self.atomic)))  # fmt: skip
        splits = np.int32(1 if self.atomic else self.splits)
        self.reduce((self.cgrid,), (BLOCK,), (ws, tensors.dw, splits, count))

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)


class ImplicitGemmSplitKSolver(Solver):
    """Implicit GEMM over N*P*Q, split-K with per-split partials: deterministic."""

    name = "conv_bwd_filter_implicit_gemm"
    family = "conv_bwd_filter"
    config_type = SplitKConfig
    deterministic = True
    atomic = False

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, "bwd_filter", max_ndim=3)
        if reason:
            return not_applicable(reason)
        rows, cols, npq = _gemm_dims(problem)
        if -(-rows // min(TILES)) > MAX_GRID_Y:
            return not_applicable(f"needs K/groups <= {MAX_GRID_Y * min(TILES)}, got {rows}")
        if npq >= 2**31 or problem.k * cols >= 2**31:
            return not_applicable("needs N*P*Q and the filter below 2^31 elements")
        return APPLICABLE

    def configs(self, problem: ConvProblem, caps: Capabilities) -> Sequence[SplitKConfig]:
        rows, cols, npq = _gemm_dims(problem)
        out = []
        for tile in _tiles(problem):
            for splits in (1, 4, 16, 64):
                if splits > 1 and npq < splits * 4 * BK:
                    continue  # each split keeps at least 4 slices
                if problem.groups * splits > MAX_GRID_Y:
                    continue
                out.append(SplitKConfig(tile, splits))
        return out

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> SplitKConfig:
        rows, cols, npq = _gemm_dims(problem)
        # 128 x 128 (8 x 8 outputs per thread: the most FFMA per shared load) once the
        # filter fills it; unmeasured on a GPU, the tuning DB overrides it.
        big = rows >= 128 and cols >= 128 and 128 in _tiles(problem)
        tile = 128 if big else 64 if rows >= 48 and cols >= 48 else 32
        tiles = -(-rows // tile) * -(-cols // tile) * problem.groups
        target = _TARGET_BLOCKS["cpu" if caps is not None and caps.arch == "cpu" else "cuda"]
        want = max(1, -(-target // tiles))
        candidates = [c.splits for c in self.configs(problem, caps) if c.tile == tile]
        splits = max([s for s in candidates if s <= want] or [1])
        return SplitKConfig(tile, splits)

    def is_valid(self, config: Config, problem: ConvProblem, caps: Capabilities) -> bool:
        return (isinstance(config, SplitKConfig) and problem.groups * config.splits <= MAX_GRID_Y
                and config.tile in _tiles(problem))  # fmt: skip

    def workspace_size(self, problem: ConvProblem, config: Config) -> int:
        rows, cols, npq = _gemm_dims(problem)
        splits = 1 if self.atomic else _useful_splits(npq, config.splits)  # type: ignore[attr-defined]
        return acc_dtype(dtype_of(problem)).itemsize * splits * problem.k * cols

    def module_specs(self) -> list[ModuleSpec]:
        return [spec(dt) for dt in dtypes.FLOAT_TYPES for spec in (module_spec, gemm_3d_spec)]

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        ok = self.is_applicable(problem, None)  # type: ignore[arg-type]
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        if not isinstance(config, SplitKConfig):
            raise NotSupportedError(f"{self.name}: expected a SplitKConfig, got {config!r}")
        tiles = _tiles(problem)
        if config.tile not in tiles:
            raise NotSupportedError(f"{self.name}: tile {config.tile} is not compiled for "
                                    f"{problem.dtype} {problem.ndim}-D (tiles {tiles})")
        return _GemmRunner(backend, problem, config, self.atomic)


class ImplicitGemmAtomicSolver(ImplicitGemmSplitKSolver):
    """The same GEMM with the splits added by fp32 (fp64) atomics: NOT deterministic."""

    name = "conv_bwd_filter_implicit_gemm_atomic"
    deterministic = False
    atomic = True


# ------------------------------------------------------------------ backward bias


def bias_splits(npq: int, blocks: int) -> int:
    """Splits of N*P*Q for the bias reduction: enough blocks to fill the device, each
    split summing at least 4096 positions."""
    return max(1, min(-(-npq // 4096), -(-_TARGET_BLOCKS["cuda"] // max(1, blocks)), 256))


def backward_bias(backend: Backend, dy: Any, db: Any, channels_last: bool) -> list[str]:
    """db[k] = sum of dy over N and spatial positions (dy contiguous, 3 to 5 dims; db (K,)
    written). Deterministic: fixed-order partials per split, added in split order."""
    dt = dtypes.lookup(dy.dtype)
    k = int(dy.shape[-1] if channels_last else dy.shape[1])
    npq = int(np.prod(dy.shape)) // k
    spec = module_spec(dt, d3=dy.ndim == 5)  # both modules hold the bias kernels
    splits = bias_splits(npq, -(-k // 32) if channels_last else k)
    chunk = -(-npq // splits)
    ws = backend.xp.empty(splits * k, dtype=acc_dtype(dt))  # partials in cl::acc_t<T>
    if channels_last:
        kernel = backend.kernel(spec, f"bwd_bias_nhwc<{dt.ctype}>")
        kernel((-(-k // 32), splits), (32, 8), (dy, ws, np.int32(k), np.int64(npq),
                                               np.int64(chunk)))  # fmt: skip
    else:
        pq = npq // int(dy.shape[0])
        kernel = backend.kernel(spec, f"bwd_bias_nchw<{dt.ctype}>")
        kernel((min(k, 65535), splits), (BLOCK,), (dy, ws, np.int32(k), np.int64(npq),
                                                   np.int64(pq), np.int64(chunk)))  # fmt: skip
    reduce = backend.kernel(spec, _reduce_expr(dt))
    reduce((_grid(k, backend),), (BLOCK,), (ws, db, np.int32(splits), np.int64(k)))
    tag = "nhwc" if channels_last else "nchw"
    return [f"bwd_bias_{tag}_split{splits}_{dt.short}", f"bwd_filter_reduce_{dt.short}"]
