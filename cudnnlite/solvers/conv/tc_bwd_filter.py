"""Backward filter on the multistage tensor-core GEMM (``tc_conv_bwd_filter`` in
``cuda_src/conv/tc_bwd_filter.cu``).

``conv_bwd_filter_tc_implicit_gemm`` (:class:`TcBwdFilterSolver`): dw = dy^T * im2col(x)
as a GEMM per group with M = K/groups, N = R*S*C/groups and the reduction over the N*P*Q
output pixels (grid.y group-major over the groups' row tiles). NHWC + KRSC (NCHW: x and dy
converted in the workspace after the partials, dw written KCRS by the split reduction,
``bwd_filter_reduce_gather``), any groups,
fp16 or bf16 (fp32 accumulation, fp32 partials), or fp32 with
``math="tf32"`` (sm_80+), 1-D, 2-D or 3-D, any stride, dilation and padding. Both operands
are contiguous along K and C, so both shared tiles hold reduction rows and reach the MMA
fragments through ``ldmatrix.trans`` (16-bit), or, for TF32 (``ldmatrix.trans`` moves
16-bit halves), through 32-bit shared loads from rows padded by 8 floats (bank-conflict
free, every address the lane's offset plus a constant) and one rounding per element:
the m16n8k8 TF32 MMA on operands rounded to nearest, as the forward's.

Few input channels (:func:`few_channels`: ungrouped, C below one 16-byte copy, a stem's
C = 3): x is padded to 8 channels (TF32: 4) in the workspace (the forward's
``tc_pad_channels``), the GEMM runs R*S*8 columns and the gather reduction keeps the real
ones: C = 3 has no 16-bit copy at all otherwise (the WMMA kernel took it, 1% HMMA).

Narrow groups (fewer filters per group than the tile's 64 rows): the kernel
``tc_conv_bwd_filter_packed`` (3-D ``_packed_3d``; tiles of :data:`PACKED_TILES`)
multiplies 64 consecutive filters of several groups (dy's channels) against the (tap,
channel) columns of the window of x channels those groups read (:func:`packed_columns`:
the grid covers the widest window) and keeps only the block-diagonal entries, each row's
own group's channels: C/groups / window of the MMAs useful instead of (K/groups / 64) of
the rows. The same loader and main loop (sm_90: loops within 5 instructions of the
unpacked kernel's, no spills).

3-D (NDHWC + KTRSC): the kernel ``tc_conv_bwd_filter_3d`` (N = T*R*S*C, the reduction over
N*O*P*Q; each thread's column carries its depth tap), a module of its own per tile so the
2-D kernels' code stays as it was; every tile (sm_90: the 2-D kernel's registers, two more
for 64x64x32 with 16-byte copies, and no spills).

Split-K: ``splits`` blocks share the reduction, each over a chunk of output pixels (a
multiple of ``block_k``), writing fp32 partials to the workspace; ``bwd_filter_reduce``
(``cuda_src/conv/splitk_reduce.cuh``) sums them in split order and rounds once. Deterministic
for every split count. Workspace: 4 * splits * K * R*S*C/groups bytes.

Copies: 16 bytes when K/groups and C/groups are multiples of 8 (TF32: 4), 4 bytes when
both are even (TF32: any); otherwise not applicable (the WMMA split-K solver takes it). Error: as
the forward (exact products, fp32 sums over N*P*Q terms), acc_factor 2; TF32 adds up to
2^-11 relative per operand.
"""

from __future__ import annotations

import dataclasses
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
from . import bwd_filter as bwf
from .common import shape_struct
from .tc_igemm import (
    NO_FP64_MMA,
    ChannelPad,
    NhwcCopies,
    TcTile,
    aligned_bytes,
    fits_twice,
    group_tiles,
)

SOURCE = "conv/tc_bwd_filter.cu"

# (block_m (K), block_n (R*S*C), block_k (pixels), warp_m, warp_n, stages). sm_90 hot paths
# (sass_mix; each thread's pixels on one output row): 128x128x64 307 instructions per 128
# MMA (42%, 227 registers), 128x128x32 191 per 64 (34%), 64x128x64 211 per 64 (30%, 125
# registers, 72 KiB of stages), 64x128x32 163 per 32 (20%), 64x64 111 per 16 (14%). The
# 64-deep tiles are the defaults of their block shape where two blocks fit an SM and a
# thread's 8 pixels stay on one output row (Q % 8 == 0 or Q >= 64); each block shape's
# deeper tile first.
TILES = (
    (128, 128, 64, 64, 64, 3),
    (128, 128, 32, 64, 64, 3),
    (64, 128, 64, 32, 64, 3),
    (64, 128, 32, 32, 64, 3),
    (64, 64, 32, 32, 32, 3),
)
TILES_ALIGN2 = ((64, 64, 32, 32, 32, 3),)  # 4-byte copies: more loader state per thread
# TF32 (fp32 storage): BK 16 is the same two 16-byte chunks per MMA step as BK 32 of fp16,
# four stages as the forward's TF32 tiles; 4-byte copies (one float, any K and C): 64x64.
# sm_90 (registers, main-loop instructions per MMA on the hot path, HMMA share; no spills):
# 128x128 193, 305 per 64 (21%), 64x128 121 (14%), 64x64 68 (9%). A scalar shared load and
# a rounding (one F2FP) per fragment element.
TILES_TF32 = (
    (128, 128, 16, 64, 64, 4),
    (64, 128, 16, 64, 32, 4),
    (64, 64, 16, 32, 32, 4),
)
TILES_TF32_ALIGN1 = ((64, 64, 16, 32, 32, 4),)
SPLITS = (1, 2, 4, 8, 16, 32, 64)
_MAX_GRID_Y = 65535


@dataclass(frozen=True)
class TcSplitKConfig(TcTile):
    block_m: int = 64
    block_n: int = 128
    block_k: int = 32
    warp_m: int = 32
    warp_n: int = 64
    stages: int = 3
    splits: int = 1

    def __post_init__(self) -> None:
        if self.astuple() not in TILES + TILES_TF32:
            raise ValueError(
                f"backward-filter tile {self.astuple()} is not one of {TILES + TILES_TF32}"
            )
        if self.splits not in SPLITS:
            raise ValueError(f"splits must be one of {SPLITS}, got {self.splits}")

    def tile(self) -> tuple[int, ...]:
        return self.astuple()

    def smem_bytes(self, itemsize: int = 2) -> int:
        # both tiles hold reduction rows; partials go straight from registers: no staging
        return self.pipe_bytes(itemsize, a_rows_k=True, b_rows_k=True)


def aligns(problem: ConvProblem) -> tuple[int, int]:
    """Channels per 16-byte and per 4-byte copy: (8, 2) for 16-bit types, (4, 1) for fp32."""
    return (4, 1) if problem.dtype == "fp32" else (8, 2)


def align_for(problem: ConvProblem) -> int | None:
    """Channels per copy of the backward kernels: their copies run along both K and C, each
    within a group."""
    cg, kg = problem.c_per_group, problem.k_per_group
    return next((a for a in aligns(problem) if cg % a == 0 and kg % a == 0), None)


def few_channels(problem: ConvProblem) -> bool:
    """Whether x's channels are padded to one 16-byte copy in the workspace (an ungrouped
    layer with fewer channels than a copy holds and K a multiple of it: a stem, C = 3). The
    GEMM then runs R*S*8 (TF32: *4) columns, 3/8 of them useful at C = 3, and the split
    reduction keeps the real ones; C = 3 has no 16-bit copy at all otherwise."""
    wide = aligns(problem)[0]
    return problem.groups == 1 and 0 < problem.c < wide and problem.k % wide == 0


def gemm_problem(problem: ConvProblem) -> ConvProblem:
    """The problem the GEMM kernel sees: x's channels padded (few_channels), else itself."""
    if few_channels(problem):
        return dataclasses.replace(problem, c=aligns(problem)[0])
    return problem


def tiles_for(problem: ConvProblem) -> tuple[tuple[int, ...], ...]:
    """The backward filter tiles of the problem's dtype and copy width."""
    narrow = align_for(problem) == aligns(problem)[1]
    if problem.dtype == "fp32":
        return TILES_TF32_ALIGN1 if narrow else TILES_TF32
    return TILES_ALIGN2 if narrow else TILES


def backward_reason(problem: ConvProblem, caps: Capabilities, direction: str) -> str | None:
    """What the tensor-core backward kernels (filter, and data by phases) cannot run; both
    have a 3-D variant."""
    reason = bwf.common_reason(problem, direction, max_ndim=3)
    if reason:
        return reason
    if problem.dtype == dtypes.FLOAT64.short:
        return NO_FP64_MMA
    if not problem.channels_last and max(problem.n, problem.k) > 65535:
        return "NCHW: the layout conversion needs N and K <= 65535"
    if problem.dtype == "fp32" and problem.math != "tf32":
        return "fp32 runs on tensor cores only with math='tf32'"
    if not caps.mma_sync:
        return f"needs mma.sync and ldmatrix (sm_75+), device is {caps.arch}"
    if problem.dtype != "fp16" and not caps.bf16_tensor_cores:
        what = "tf32" if problem.dtype == "fp32" else problem.dtype
        return f"{what} needs sm_80+, device is {caps.arch}"
    if align_for(problem) is None:
        kg, cg = problem.k_per_group, problem.c_per_group
        return f"needs even K/groups and C/groups for 4-byte copies, got {kg} and {cg}"
    return None


# The tiles compiled as tc_conv_bwd_filter_packed too (groups of fewer filters than
# block_m): the 64-row ones, every dtype's copy widths.
PACKED_TILES = frozenset(
    t for t in (*TILES, *TILES_ALIGN2, *TILES_TF32, *TILES_TF32_ALIGN1) if t[0] == 64
)


def packed(problem: ConvProblem, cfg: TcSplitKConfig) -> bool:
    """Whether ``cfg`` runs ``problem`` as tc_conv_bwd_filter_packed (module docstring)."""
    return problem.groups > 1 and problem.k_per_group < cfg.block_m and cfg.tile() in PACKED_TILES


def packed_columns(problem: ConvProblem, block_m: int) -> int:
    """The packed GEMM's columns: taps x the widest window of x channels that a block of
    ``block_m`` consecutive filters reads (its groups' C/groups each). The blocks' group
    alignment repeats every K/groups blocks at most."""
    kg, blocks = problem.k_per_group, -(-problem.k // block_m)
    widest = 0
    for b in range(min(blocks, kg)):
        m0 = b * block_m
        last = min(m0 + block_m, problem.k) - 1
        widest = max(widest, last // kg - m0 // kg + 1)
    return problem.filter_taps * widest * problem.c_per_group


def _expr(dt: dtypes.DType, tile: tuple[int, ...], align: int, d3: bool = False,
          pack: bool = False) -> str:  # fmt: skip
    name = "tc_conv_bwd_filter" + ("_packed" if pack else "") + ("_3d" if d3 else "")
    return f"{name}<{dt.ctype}, {', '.join(map(str, tile))}, {align}>"


def _gather_expr(dt: dtypes.DType) -> str:
    return f"bwd_filter_reduce_gather<{dt.ctype}>"


def module_spec(dt: dtypes.DType, tile: tuple[int, ...], align: int, d3: bool = False,
                pack: bool = False) -> ModuleSpec:  # fmt: skip
    """The GEMM and the split reductions (conv/splitk_reduce.cuh: to dw as the partials lie,
    or gathered to KCRS filters / the real channels of padded ones): one small module."""
    names = [_expr(dt, tile, align, d3, pack), bwf._reduce_expr(dt), _gather_expr(dt)]
    return ModuleSpec.make(SOURCE, names)


def _copy_bytes(problem: ConvProblem) -> tuple[int, int]:
    """Workspace bytes of x and dy as the GEMM reads them, 0 where it reads the tensor
    itself: x in NHWC for NCHW problems, with padded channels (few_channels); dy in NHWC
    for NCHW problems. Each rounded up to 256 bytes."""
    item = bwf.dtype_of(problem).itemsize
    few, nchw = few_channels(problem), not problem.channels_last
    xb = aligned_bytes(int(np.prod(gemm_problem(problem).x_shape())) * item) if few or nchw else 0
    yb = aligned_bytes(int(np.prod(problem.y_shape())) * item) if nchw else 0
    return xb, yb


def _dims(problem: ConvProblem) -> tuple[int, int]:
    """(R*S*C/groups, N*P*Q)."""
    return (problem.c_per_group * problem.filter_taps,
            problem.n * int(np.prod(problem.out_spatial)))  # fmt: skip


def _grid(problem: ConvProblem, cfg: TcSplitKConfig, pack: bool) -> tuple[int, int]:
    """(column tiles, row tiles): each group's R*S*C/groups x K/groups, or packed the
    widest window's columns x all K filters."""
    if pack:
        return -(-packed_columns(problem, cfg.block_m) // cfg.block_n), -(-problem.k // cfg.block_m)
    rsc, _ = _dims(problem)
    return -(-rsc // cfg.block_n), group_tiles(problem, problem.k_per_group, cfg.block_m)


class _Runner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem, cfg: TcSplitKConfig) -> None:
        dt = bwf.dtype_of(problem)
        gp = gemm_problem(problem)  # x's channels padded on the few-channel path
        align = align_for(gp)
        assert align is not None
        d3 = problem.ndim == 3
        pack = packed(gp, cfg)
        spec = module_spec(dt, cfg.tile(), align, d3, pack)
        self.gemm = backend.kernel(spec, _expr(dt, cfg.tile(), align, d3, pack))
        few, nchw = few_channels(problem), not problem.channels_last
        self.gather = few or nchw  # dw's layout or channels differ from the partials'
        self.reduce = backend.kernel(spec, (_gather_expr if self.gather else bwf._reduce_expr)(dt))
        rsc, npq = _dims(gp)
        self.splits = bwf._useful_splits(npq, cfg.splits, cfg.block_k)
        self.chunk = np.int64(bwf._chunk(npq, cfg.splits, cfg.block_k))
        self.grid = _grid(gp, cfg, pack) + (self.splits,)
        self.block = (cfg.threads,)
        self.smem = cfg.smem_bytes(dt.itemsize)
        self.count = problem.k * rsc  # partials per split
        self.out_count = int(np.prod(problem.w_shape()))
        self.cgrid = bwf._grid(self.out_count, backend)
        self.shape = shape_struct(gp)
        math = "tf32" if dt.short == "fp32" else dt.short
        kind = "_packed" if pack else "_few" if few else ""
        layout = problem.layout.lower() if d3 else "nhwc" if not nchw else "nchw"
        self.names = [
            f"tc_igemm_bwd_filter{kind}_{cfg.label()}_a{align}_{layout}_{math}",
            f"bwd_filter_reduce{'_gather' if self.gather else ''}_{dt.short}",
        ]
        # x (padded, or NCHW) and dy (NCHW) to NHWC in the workspace after the partials; the
        # reduction gathers dw (KCRS, or the real channels) from the KRSC partials
        self.copy_bytes = _copy_bytes(problem)
        hw, pq = int(np.prod(problem.spatial)), int(np.prod(problem.out_spatial))
        self.pad = ChannelPad(backend, dt) if few else None
        self.convert = NhwcCopies(backend, dt) if nchw else None
        self.x_p = (problem.n, problem.c, hw, gp.c, nchw)
        self.x_t = (problem.n, problem.c, hw)
        self.dy_t = (problem.n, problem.k, pq)
        self.gather_args = (np.int64(self.count), np.int32(problem.c_per_group),
                            np.int32(gp.c_per_group), np.int32(problem.filter_taps),
                            np.int32(nchw))  # fmt: skip
        self.dtype = dt.numpy
        if few:
            self.names.insert(0, f"tc_pad_channels_{dt.short}")
        if nchw:
            self.names.insert(0, f"tc_nchw_to_nhwc_{dt.short}")

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)

    def __call__(self, tensors: bwf.BwdFilterTensors, epilogue: Any, workspace: Any) -> None:
        ws = bwf._f32(workspace, self.count * self.splits)
        x, dy = tensors.x, tensors.dy
        start = aligned_bytes(4 * self.count * self.splits)
        xb, yb = self.copy_bytes
        if xb:  # x padded (few channels) or converted (NCHW)
            xs = workspace[start : start + xb].view(self.dtype)
            if self.pad is not None:
                self.pad(x, xs, *self.x_p)
            else:
                self.convert(x, xs, *self.x_t)
            x = xs
        if yb:  # dy converted (NCHW)
            dys = workspace[start + xb : start + xb + yb].view(self.dtype)
            self.convert(dy, dys, *self.dy_t)
            dy = dys
        self.gemm(self.grid, self.block, (x, dy, ws, self.shape, self.chunk), shared_mem=self.smem)
        args = (ws, tensors.dw, np.int32(self.splits), np.int64(self.out_count))
        if self.gather:
            args = (*args, *self.gather_args)
        self.reduce((self.cgrid,), (bwf.BLOCK,), args)


class TcBwdFilterSolver(Solver):
    """Tensor-core backward filter with deterministic split-K (module docstring)."""

    name = "conv_bwd_filter_tc_implicit_gemm"
    family = "conv_bwd_filter"
    config_type = TcSplitKConfig
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        problem = gemm_problem(problem)  # (x's channels padded on the few-channel path)
        reason = backward_reason(problem, caps, "bwd_filter")
        if reason:
            return not_applicable(reason)
        rsc, npq = _dims(problem)
        big = max(npq, problem.k * rsc, int(np.prod(problem.x_shape())))
        if group_tiles(problem, problem.k_per_group, 64) > _MAX_GRID_Y or big >= 2**31:
            return not_applicable(
                "needs groups * ceil(K/groups / 64) <= 65535 and N*P*Q, K*R*S*C/groups and x "
                "below 2^31 elements"
            )
        return APPLICABLE

    def configs(self, problem: ConvProblem, caps: Capabilities) -> list[TcSplitKConfig]:
        problem = gemm_problem(problem)
        _, npq = _dims(problem)
        item = bwf.dtype_of(problem).itemsize
        out = []
        for tile in tiles_for(problem):
            for splits in SPLITS:
                if splits > 1 and npq < splits * 4 * tile[2]:
                    continue  # each split keeps at least 4 slices
                cfg = TcSplitKConfig(*tile, splits)
                if cfg.smem_bytes(item) <= caps.max_shared_bytes:
                    out.append(cfg)
        return out

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> TcSplitKConfig:
        options = self.configs(problem, caps)
        item = bwf.dtype_of(problem).itemsize
        # A 64-deep tile where two blocks fit an SM and its 8 consecutive pixels per thread
        # stay on one output row (the loader's fast path; q: the output width).
        q = problem.out_spatial[-1]
        deep_ok = q % 8 == 0 or q >= 64
        usable = [
            c
            for c in options
            if c.block_k < 64 or (deep_ok and fits_twice(c.smem_bytes(item), caps))
        ]
        big = [c for c in usable if c.block_m == 128] if problem.k_per_group >= 128 else []
        pool = big or [c for c in usable if c.block_m == 64 and c.block_n == 128] or options
        tile = pool[0]
        columns, rows = _grid(gemm_problem(problem), tile, packed(problem, tile))
        tiles = columns * rows
        target = bwf._TARGET_BLOCKS["cpu" if caps.emulator else "cuda"]
        want = max(1, -(-target // tiles))
        same = [c for c in pool if c.tile() == tile.tile()]
        return max((c for c in same if c.splits <= want), key=lambda c: c.splits, default=tile)

    def workspace_size(self, problem: ConvProblem, config: Config) -> int:
        assert isinstance(config, TcSplitKConfig)
        rsc, npq = _dims(gemm_problem(problem))
        parts = 4 * bwf._useful_splits(npq, config.splits, config.block_k) * problem.k * rsc
        copies = sum(_copy_bytes(problem))
        return aligned_bytes(parts) + copies if copies else parts

    def module_specs(self) -> list[ModuleSpec]:
        tables = {
            "fp16": ((8, TILES), (2, TILES_ALIGN2)),
            "bf16": ((8, TILES), (2, TILES_ALIGN2)),
            "fp32": ((4, TILES_TF32), (1, TILES_TF32_ALIGN1)),
        }
        return [
            module_spec(dt, tile, a, d3, pack)
            for dt in dtypes.FP32_COMPUTE_TYPES
            for d3 in (False, True)
            for pack in (False, True)
            for a, tiles in tables[dt.short]
            for tile in tiles
            if not pack or tile in PACKED_TILES
        ]

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        if problem.dtype == dtypes.FLOAT64.short:
            raise NotSupportedError(f"{self.name}: {NO_FP64_MMA}")
        if not isinstance(config, TcSplitKConfig):
            raise NotSupportedError(f"{self.name}: expected a TcSplitKConfig, got {config!r}")
        return _Runner(backend, problem, config)
