"""Convolution forward as an implicit GEMM (no im2col buffer), and its variant with a
precomputed table of tap offsets (cuDNN's IMPLICIT_PRECOMP_GEMM).

GEMM view per group: M = N*P*Q output pixels, N = K/groups output channels, reduction
over C/groups * R * S taps. The A tile is gathered from x while being loaded into
shared memory; tiles of A and B in shared memory, each thread computes a TM x TN
micro-tile in registers; fp32 runs a cp.async pipeline of ``stages`` shared stages
(fp16/bf16 convert through registers, two stages). The filter taps advance by adding and
wrapping (no division in the main loop). NCHW/KCRS and NHWC/KRSC, 1-D and 2-D,
fp32/fp16/bf16 with fp32 accumulation and fp64 with fp64 accumulation (its stages in
doubles, copied by cp.async like fp32), deterministic. 3-D (NCDHW/KCTRS, NDHWC/KTRSC):
``_3d`` kernels in modules of their own, with the depth in the rows' and taps' 4th int
and taps decoded per slice (division) or read from the table.

The config is the tile: :class:`TileConfig` (BM, BN, BK, TM, TN, stages), one of
:data:`TILES`; kernels are named with every parameter, cutlass style
(BM x BN _ BK x stages _ TM x TN), e.g. ``implicit_gemm_128x64_16x3_8x4_nhwc_fp32``.
float64 has tiles of its own, :data:`TILES_FP64` (see there); ``tiles_for(dtype)``.

Precomputed offsets: the table (one int4 {offset, dh, dw, 0} per tap, 16 bytes each)
depends only on the problem, but it lives in the caller's workspace
(``workspace_size`` = 16 * C/groups * R * S bytes) and a small kernel fills it at every
launch, before the GEMM: the Runner then holds no device memory of its own (a plan
can be shared between streams and threads), and the cost is one launch of a few
thousand threads. It saves the tap iterator's few integer adds per slice (one table
read per thread and slice instead).

Limits: x, w and y below 2^31 elements each (32-bit offsets within an image).
The tensors must be contiguous in the problem's layout (``cudnnlite.conv2d`` copies
when they are not); every load is an element copy (a gather), so no alignment is
needed beyond the element's.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import dtypes
from ...errors import BadParamError, NotSupportedError
from ...problems.conv import ConvProblem
from ...runtime.backend import Backend, Kernel
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from .common import ConvTensors, Epilogue, shape_struct
from .direct import INT32_MAX, address, common_reason, dtype_of

SOURCE = "conv/implicit_gemm.cu"
MAX_GRID_Y = 65535
SMEM_LIMIT = 48 * 1024  # static shared memory per block
TAP_BYTES = 16  # one int4 per tap
_TAPS_BLOCK = 256
# Blocks that fill an H200 (132 SMs) once: below that, smaller tiles win.
_FILL_BLOCKS = 132


@dataclass(frozen=True)
class TileConfig(Config):
    """A block computes bm x bn outputs over bk-slices; a thread a tm x tn micro-tile;
    ``stages`` shared stages in the fp32 cp.async pipeline."""

    bm: int = 64
    bn: int = 64
    bk: int = 16
    tm: int = 4
    tn: int = 4
    stages: int = 3

    def __post_init__(self) -> None:
        values = (self.bm, self.bn, self.bk, self.tm, self.tn, self.stages)
        if any(isinstance(v, bool) or not isinstance(v, int) or v < 1 for v in values):
            raise BadParamError(f"tile sizes must be positive ints, got {values}")
        if self.bm % self.tm or self.bn % self.tn:
            raise BadParamError(f"tm must divide bm and tn must divide bn, got {self.label()}")
        if self.bk % 8:
            raise BadParamError(f"bk must be a multiple of 8 (a warp loads 8 k), got {self.bk}")
        if self.stages < 2:
            raise BadParamError(f"stages must be at least 2, got {self.stages}")
        if not 32 <= self.threads <= 1024:
            raise BadParamError(f"{self.label()}: {self.threads} threads, expected 32 to 1024")
        elem = 8 if values in TILES_FP64 and values not in TILES else 4
        if self.shared_bytes_for(elem) > SMEM_LIMIT:
            raise BadParamError(f"{self.label()}: {self.shared_bytes_for(elem)} bytes of shared "
                                "memory")  # fmt: skip
        if values not in TILES + TILES_FP64:
            known = ", ".join(TileConfig(*t).label() for t in TILES + TILES_FP64)
            raise BadParamError(f"tile {self.label()} is not compiled; known tiles: {known}")

    @property
    def threads(self) -> int:
        return (self.bm // self.tm) * (self.bn // self.tn)

    @property
    def shared_bytes(self) -> int:
        """Static shared memory of the fp32 kernels (fp16/bf16 use no more)."""
        return self.shared_bytes_for(4)

    def shared_bytes_for(self, elem_bytes: int) -> int:
        """Stages of A and B in elements of ``elem_bytes`` (4: float, 8: double: the
        accumulation type the stages hold), rows padded by 4 elements, and the int4 row
        decode (implicit GEMM; gemm_1x1 declares none: an upper bound there)."""
        return self.stages * self.bk * (self.bm + self.bn + 8) * elem_bytes + 16 * self.bm

    def label(self) -> str:
        return f"{self.bm}x{self.bn}_{self.bk}x{self.stages}_{self.tm}x{self.tn}"

    def template_args(self) -> str:
        return f"{self.bm}, {self.bn}, {self.bk}, {self.tm}, {self.tn}, {self.stages}"


# (bm, bn, bk, tm, tn, stages): every tile the library compiles.
# Few on purpose: each tile is a module per dtype, and every module costs NVRTC time in the
# compile check (3 archs) and g++ time on the emulator. Stages fill the 48 KB of static
# shared memory: 128x128 fits two 16-deep stages (three would need 51 KB).
TILES: tuple[tuple[int, int, int, int, int, int], ...] = (
    (128, 128, 16, 8, 8, 2),  # large GEMMs: 64 outputs per thread
    (128, 64, 16, 8, 4, 3),  # K/groups <= 64 (many ResNet/MobileNet layers)
    (64, 64, 16, 4, 4, 3),  # small problems
)

# float64's tiles: stages of doubles take twice the bytes, so none of the tiles above fits
# 48 KB with its stage count (64x64x16x3: 53 KB, 128x64x16x3: 79 KB, 128x128x16x2: 69 KB).
# BK 8 keeps three stages (latency hiding) within 48 KB: 128x64: 40 KB, 64x64: 27 KB. Two
# tiles only (fp64 FMA runs at half the fp32 rate on an H200, so fewer, mid-size tiles;
# the 8x4 micro-tile keeps 32 double accumulators = 64 registers).
TILES_FP64: tuple[tuple[int, int, int, int, int, int], ...] = (
    (128, 64, 8, 8, 4, 3),
    (64, 64, 8, 4, 4, 3),
)


def tiles_for(dtype: str, tiles: tuple = TILES) -> tuple:
    """The tiles compiled for a dtype (short name): ``tiles``, or :data:`TILES_FP64`."""
    return TILES_FP64 if dtype == "fp64" else tiles


def tile_reason(dtype: str, cfg: TileConfig, tiles: tuple = TILES) -> str | None:
    """Why ``cfg`` cannot run ``dtype`` (None when it is compiled for it)."""
    values = (cfg.bm, cfg.bn, cfg.bk, cfg.tm, cfg.tn, cfg.stages)
    if values in tiles_for(dtype, tiles):
        return None
    known = ", ".join(TileConfig(*t).label() for t in tiles_for(dtype, tiles))
    if dtype == "fp64":
        need = cfg.shared_bytes_for(8)
        why = (f"its stages in doubles would take {need} bytes of shared memory (> 48 KB)"
               if need > SMEM_LIMIT else "not one of the fp64 tiles")  # fmt: skip
        return f"tile {cfg.label()} is not compiled for fp64: {why}; fp64 tiles: {known}"
    return f"tile {cfg.label()} is not compiled for {dtype}; tiles: {known}"


def all_tiles(tiles: tuple = TILES) -> list[TileConfig]:
    return [TileConfig(*t) for t in tiles]


def gemm_grid(m: int, n_per_group: int, groups: int, config: TileConfig) -> tuple[int, int]:
    return -(-m // config.bm), -(-n_per_group // config.bn) * groups


def prune_tiles(m: int, n_per_group: int, groups: int, tiles: tuple = TILES) -> list[TileConfig]:
    """The tiles worth timing: none much larger than the GEMM, grid within limits."""
    out = []
    for cfg in all_tiles(tiles):
        if cfg.bm > max(64, 2 * m) or cfg.bn > max(64, 2 * n_per_group):
            continue
        if gemm_grid(m, n_per_group, groups, cfg)[1] > MAX_GRID_Y:
            continue
        out.append(cfg)
    return out


def pick_tile(candidates: list[TileConfig], m: int, n_per_group: int, groups: int) -> TileConfig:
    """The largest tile that still launches enough blocks to fill the device once."""
    by_size = sorted(candidates, key=lambda c: (c.bm * c.bn, c.bm), reverse=True)
    for cfg in by_size:
        gx, gy = gemm_grid(m, n_per_group, groups, cfg)
        if gx * gy >= _FILL_BLOCKS:
            return cfg
    return by_size[-1]


def vec_for(reduction: int, x_contiguous_dim: int) -> int:
    """4 when every vector load of a kernel stays aligned inside one row, else 1."""
    return 4 if reduction % 4 == 0 and x_contiguous_dim % 4 == 0 else 1


def aligned(tensors: ConvTensors, itemsize: int, vec: int) -> bool:
    """x aligned to ``vec`` elements (the only operand loaded in vectors: gemm_1x1's NCHW x)."""
    return address(tensors.x) % (itemsize * vec) == 0


class GemmRunner(Runner):
    """Launches a GEMM kernel. ``vec`` None: the kernel takes no vector flag (readable name
    as given); 1 or 4: it takes one, 4 when the problem allows vector loads and x is aligned
    to 4 elements (readable name ``..._align4``), else scalar loads (``_align1``)."""

    def __init__(self, kernel: Kernel, name: str, vec: int | None, itemsize: int, grid: tuple,
                 block: tuple, shape: np.void, dtype: str = "fp32") -> None:  # fmt: skip
        self.kernel, self.name, self.vec, self.itemsize = kernel, name, vec, itemsize
        self.dtype = dtype
        self.dt = dtypes.by_short(dtype)
        self.grid, self.block, self.shape = grid, block, shape
        self.last = name if vec is None else f"{name}_align{vec}"

    def _vec(self, tensors: ConvTensors) -> tuple:
        if self.vec is None:
            return ()
        vec = self.vec if self.vec == 1 or aligned(tensors, self.itemsize, self.vec) else 1
        self.last = f"{self.name}_align{vec}"
        return (np.int32(vec == 4),)

    def __call__(self, tensors: ConvTensors, epilogue: Epilogue, workspace: Any) -> None:
        vec = self._vec(tensors)
        args = (*tensors.kernel_pointers(), self.shape, epilogue.struct(self.dt), *vec)
        self.kernel(self.grid, self.block, args)

    @property
    def kernel_names(self) -> list[str]:
        return [self.last]


class PrecompRunner(GemmRunner):
    def __init__(self, taps: tuple[Kernel, int, str], workspace_bytes: int, **kw: Any) -> None:
        super().__init__(**kw)
        self.taps_kernel, self.taps_blocks, self.taps_name = taps
        self.workspace_bytes = workspace_bytes

    def __call__(self, tensors: ConvTensors, epilogue: Epilogue, workspace: Any) -> None:
        if workspace is None or workspace.nbytes < self.workspace_bytes:
            got = "none" if workspace is None else f"{workspace.nbytes} bytes"
            raise BadParamError(f"workspace: {self.workspace_bytes} bytes needed, got {got}")
        if address(workspace) % TAP_BYTES:
            raise BadParamError(f"workspace: must be {TAP_BYTES}-byte aligned (int4 table)")
        vec = self._vec(tensors)
        self.taps_kernel((self.taps_blocks,), (_TAPS_BLOCK,), (workspace, self.shape))
        args = (*tensors.kernel_pointers(), workspace, self.shape,
                epilogue.struct(self.dt), *vec)  # fmt: skip
        self.kernel(self.grid, self.block, args)

    @property
    def kernel_names(self) -> list[str]:
        return [self.taps_name, self.last]


# ------------------------------------------------------------------ kernels


def _sfx(d3: bool) -> str:
    return "_3d" if d3 else ""


def _expr(kind: str, dt: dtypes.DType, nhwc: bool, cfg: TileConfig, d3: bool = False) -> str:
    return f"{kind}{_sfx(d3)}<{dt.ctype}, {str(nhwc).lower()}, {cfg.template_args()}>"


def _readable(kind: str, dt: dtypes.DType, nhwc: bool, cfg: TileConfig, d3: bool = False) -> str:
    layout = ("ndhwc" if nhwc else "ncdhw") if d3 else ("nhwc" if nhwc else "nchw")
    return f"{kind}_{cfg.label()}_{layout}_{dt.short}"


def module_spec(dt: dtypes.DType, cfg: TileConfig, d3: bool = False) -> ModuleSpec:
    """Both variants and both layouts of one tile for ``dt``, and the table kernels; d3:
    the 3-D kernels (a module of their own: 2-D calls never compile them)."""
    names = [
        _expr(kind, dt, nhwc, cfg, d3)
        for kind in ("implicit_gemm", "implicit_precomp_gemm")
        for nhwc in (False, True)
    ]
    names += [f"implicit_gemm_taps{_sfx(d3)}<false>", f"implicit_gemm_taps{_sfx(d3)}<true>"]
    return ModuleSpec.make(SOURCE, names)


def _limits_reason(problem: ConvProblem) -> str | None:
    s = shape_struct(problem)
    span_h = int(s["h"]) + (int(s["r"]) - 1) * int(s["dil_h"])
    span_w = int(s["w"]) + (int(s["s"]) - 1) * int(s["dil_w"])
    span_d = int(s["d"]) + (int(s["t"]) - 1) * int(s["dil_d"])
    span = problem.c * span_d * span_h * span_w  # bounds every tap offset within an image
    sizes = {
        "x": int(np.prod(problem.x_shape())),
        "w": int(np.prod(problem.w_shape())),
        "y": int(np.prod(problem.y_shape())),
        "an image's padded span": span,
    }
    for what, size in sizes.items():
        if size > INT32_MAX:
            return f"needs < 2^31 elements in {what}, got {size} (32-bit indexing)"
    return None


class ImplicitGemmSolver(Solver):
    """Implicit GEMM; the tile (BM, BN, BK, TM, TN) is the config."""

    name = "conv_fwd_implicit_gemm"
    family = "conv_fwd"
    config_type = TileConfig
    deterministic = True
    kind = "implicit_gemm"

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, max_ndim=3) or _limits_reason(problem)
        if reason:
            return not_applicable(reason)
        gy = -(-problem.k_per_group // 64) * problem.groups
        if gy > MAX_GRID_Y:
            return not_applicable(
                f"needs groups * ceil(K/groups / 64) <= {MAX_GRID_Y} (grid.y), got {gy}"
            )
        return APPLICABLE

    def _gemm_size(self, problem: ConvProblem) -> tuple[int, int, int]:
        m = problem.n * int(np.prod(problem.out_spatial))
        return m, problem.k_per_group, problem.groups

    def configs(self, problem: ConvProblem, caps: Capabilities) -> list[TileConfig]:
        return prune_tiles(*self._gemm_size(problem), tiles_for(problem.dtype))

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> TileConfig:
        return pick_tile(self.configs(problem, caps), *self._gemm_size(problem))

    def is_valid(self, config: Config, problem: ConvProblem, caps: Capabilities) -> bool:
        if not isinstance(config, TileConfig) or tile_reason(problem.dtype, config):
            return False
        return gemm_grid(*self._gemm_size(problem), config)[1] <= MAX_GRID_Y

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(dt, cfg, d3) for d3 in (False, True) for dt in dtypes.FLOAT_TYPES
                for cfg in all_tiles(tiles_for(dt.short))]  # fmt: skip

    def _check(self, problem: ConvProblem, config: Config) -> TileConfig:
        ok = self.is_applicable(problem, None)  # type: ignore[arg-type]
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        if isinstance(config, TileConfig) and tile_reason(problem.dtype, config):
            raise NotSupportedError(f"{self.name}: {tile_reason(problem.dtype, config)}")
        if not isinstance(config, TileConfig) or not self.is_valid(config, problem, None):  # type: ignore[arg-type]
            raise NotSupportedError(f"{self.name}: config {config!r} is not valid for {problem}")
        return config

    def _runner_args(self, backend: Backend, problem: ConvProblem, cfg: TileConfig) -> dict:
        dt = dtype_of(problem)
        nhwc, d3 = problem.channels_last, problem.ndim == 3
        return dict(
            kernel=backend.kernel(module_spec(dt, cfg, d3), _expr(self.kind, dt, nhwc, cfg, d3)),
            name=_readable(self.kind, dt, nhwc, cfg, d3), vec=None,
            itemsize=dt.itemsize, grid=gemm_grid(*self._gemm_size(problem), cfg),
            block=(cfg.threads,), shape=shape_struct(problem), dtype=problem.dtype,
        )  # fmt: skip

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        cfg = self._check(problem, config)
        return GemmRunner(**self._runner_args(backend, problem, cfg))


class ImplicitPrecompGemmSolver(ImplicitGemmSolver):
    """Implicit GEMM reading tap offsets from a table in the workspace (filled per launch)."""

    name = "conv_fwd_implicit_precomp_gemm"
    kind = "implicit_precomp_gemm"

    def workspace_size(self, problem: ConvProblem, config: Config) -> int:
        return TAP_BYTES * problem.c_per_group * int(np.prod(problem.filter))

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        cfg = self._check(problem, config)
        dt = dtype_of(problem)
        d3 = problem.ndim == 3
        taps = backend.kernel(
            module_spec(dt, cfg, d3),
            f"implicit_gemm_taps{_sfx(d3)}<{str(problem.channels_last).lower()}>",
        )
        ktot = problem.c_per_group * int(np.prod(problem.filter))
        blocks = max(1, min(-(-ktot // _TAPS_BLOCK), 1024))
        layout = ("nhwc" if problem.channels_last else "nchw") + _sfx(d3)
        return PrecompRunner(
            taps=(taps, blocks, f"implicit_gemm_taps_{layout}"),
            workspace_bytes=self.workspace_size(problem, cfg),
            **self._runner_args(backend, problem, cfg),
        )
