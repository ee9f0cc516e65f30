"""Multistage tensor-core implicit GEMM (``cuda_src/conv/tc_implicit_gemm.cu`` on the
shared main loop ``cuda_src/conv/tc_gemm.cuh``).

``conv_fwd_tc_implicit_gemm`` (:class:`TcImplicitGemmSolver`): forward, 1-D, 2-D or 3-D,
any stride, dilation, padding and groups, NHWC + KRSC (NDHWC + KTRSC), with fp32
accumulation through the PTX-level layer (``ldmatrix`` from an XOR-swizzled shared layout,
``cp.async`` stages with zero-fill for the padding):

- fp16 (sm_75+) and bf16 (sm_80+): ``mma.sync`` m16n8k16;
- fp32 with ``math="tf32"`` (sm_80+): m16n8k8 on operands rounded to TF32 after
  ``ldmatrix`` (``cl::mma::to_tf32``: to nearest, ties to even on sm_90+ and the emulator,
  away from zero on sm_80-89); default fp32 math never uses it.

Backward data at stride 1 runs it on the rotated filters (``conv_bwd_data_tc_implicit_gemm``,
in :mod:`.bwd_data`); backward filter has its own loader (:mod:`.tc_bwd_filter`).

3-D: the kernel ``tc_conv_fwd_3d`` (its reduction walks (t, r, s) taps; a depth mask word
per row), compiled for the tiles of :data:`TILES_3D` only; at most 16 taps per dim.

Layout: the kernel is NHWC + KRSC. NCHW problems go through a layout conversion: two
transposes (``tc_nchw_to_nhwc``: x to NHWC, w to KRSC) into the workspace, then the same
kernel, whose epilogue writes y (and reads z) in NCHW. Why a conversion and not an NCHW
loader: NCHW has no contiguous channel runs, so every 16-byte copy of the A tile would
become 8 (or 4) scalar gathers in the main loop, each re-read for every filter tap; the
conversion is one pass over x and w at memory speed. Workspace: x and w in the new layout
(rounded up to 256 bytes each), plus the split-K partials.

Groups: one GEMM per group (grid.y runs group-major over each group's K/groups columns),
the reduction over its C/groups channels; the kernel takes the group's x, w and y by
32-bit offsets, so groups == 1 runs the same code. Groups of fewer output channels than
the tile's ``block_n`` (ResNeXt's 4 to 32) would leave most of each tile to zero padding
(a block of 64 columns for 4 of them, a BK-32 slice for 4 channels: 1/128 of its MMAs
useful); for them, the tiles of :data:`PACKED_TILES` run ``tc_conv_fwd_packed`` (3-D:
``tc_conv_fwd_packed_3d``, the tiles also in :data:`TILES_3D`): a block
takes ``block_n`` consecutive output channels of several groups, reduces over the window
of x channels those groups read, and its B tile is the block-diagonal matrix of their
filters (copies outside a row's group zero-filled): C/groups / window of the MMAs useful
(1/16 at 4 channels per group in 64 columns, 8 times more than one GEMM per group), which
at those layers' arithmetic intensity is no longer the bound. No split-K there.

Few input channels (``flat``: ungrouped 1-D or 2-D with C below one 16-byte copy, 8
halves or 4 floats: a network's stem, C = 3): the regular loader would give each tap's few
channels a whole BK-wide slice (1/10 of ResNet-50's stem MMAs useful at BK 32), and odd C
has no 16-bit copy at all (it went to the WMMA kernel, 1-7% HMMA). Instead
``tc_pad_channels`` writes x (NCHW or NHWC) and w to NHWC / KRSC with the copy width's
channels, zeros past C, in the workspace, and ``tc_conv_fwd_flat`` reduces over the
flattened (tap, channel) index: a slice holds BK / width whole taps (C = 3 padded to 8:
3/8 of the MMAs useful). Tiles of :data:`FLAT_TILES`, split-K as the plain kernel's.

Loads: 16-byte copies (8 channels of fp16/bf16, 4 of fp32) when C/groups allows, else
4-byte copies (2 channels, or 1 fp32 channel: any C); odd C/groups from 9 up in fp16/bf16 is
not applicable (the WMMA solver takes it at groups == 1; below 8, the few-channel path). The
copy width is part of the kernel name, not a config: it follows from the problem.

Config (:class:`TcConfig`, every field in the kernel's readable name
``tc_igemm_fwd_128x128x32_w64x64_s4_a8_nhwc_fp16``): the block tile ``block_m`` x
``block_n`` (output pixels x output channels), ``block_k`` channels per stage, the warp
tile ``warp_m`` x ``warp_n``, the number of ``cp.async`` ``stages``, and ``splits``: split-K
over the reduction tiles for layers with few output tiles (fp32 partials in the workspace,
summed in split order with the epilogue by a second kernel: deterministic).

Error: fp16/bf16 products are exact in fp32, sums are fp32 (acc_factor 2 in the tests),
then one rounding to the output type; TF32 adds up to 2^-11 relative per operand.
Deterministic (no atomics, fixed order).
"""

from __future__ import annotations

import dataclasses
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
from .common import ConvTensors, Epilogue, shape_struct
from .direct import common_reason, dtype_of

# Why the tensor-core solvers (mma.sync, WMMA) take no float64: their MMAs multiply
# fp16/bf16/tf32 operands; exact float64 needs the double FMA the other solvers use.
NO_FP64_MMA = "tensor cores: no fp64 MMA in this solver"

SOURCE = "conv/tc_implicit_gemm.cu"
DTYPES = ("fp16", "bf16")  # 16-bit inputs; fp32 runs too, with math="tf32" (forward)
_MAX_GRID_Y = 65535

# (block_m, block_n, block_k, warp_m, warp_n, stages): what the tuner times. Static figures
# on sm_90 (fp16, 16-byte copies; HMMA share of the main loop's SASS and of its hot path,
# registers; no tile spills; benchmarks/sass_mix.py, 2026-12-07): 128x128x64 41% / 49% /
# 225, 128x128x32 36% / 44% / 213, 128x256x32 40% / 46% / 209, 256x128x32 37% / 46% / 213;
# the 4-warp 128x64 and 64x128 tiles 24-25% / 31% at BK 32 (102 instructions per 32 HMMA
# on the hot path: the loader's fixed work is shared by half the MMAs) and 28-31% / 36-37%
# at BK 64 (173-177 per 64); 64x64x32 17% / 23% (small layers and split-K).
TILES = (
    (128, 128, 64, 64, 64, 3),  # 4 warps of 64x64, BK 64: the most MMA per instruction
    (128, 128, 32, 64, 64, 4),
    (128, 256, 32, 64, 64, 3),  # 8 warps of 64x64 (needs ~130 KiB of shared memory: sm_80+)
    (256, 128, 32, 64, 64, 3),
    (128, 128, 32, 32, 64, 4),  # 8 warps: fewer registers per thread, more latency hiding
    (128, 64, 32, 64, 32, 4),
    (64, 128, 32, 32, 64, 4),
    (64, 64, 32, 32, 32, 4),
    # BK 64 for the 4-warp rectangles (72 KiB in three stages: two blocks per SM from
    # sm_80): 15% fewer instructions per MMA and half the barriers of BK 32, the defaults
    # of their block shapes where the channels per group fill 64-deep slices.
    (128, 64, 64, 64, 32, 3),
    (64, 128, 64, 32, 64, 3),
)

# 4-byte copies need four times the per-thread loader state of 16-byte ones: only these
# tiles stay clear of spills with it (ptxas, sm_90).
TILES_ALIGN2 = (
    (128, 128, 32, 32, 64, 4),
    (64, 128, 32, 32, 64, 4),
    (64, 64, 32, 32, 32, 4),
)


# Split-K of the forward: for layers with few output tiles and a long reduction (late
# layers at small batch); only with the smaller tiles, whose grids need the extra blocks.
SPLITS = (1, 2, 4, 8, 16)
SPLIT_TILES = (
    (64, 64, 32, 32, 32, 4),
    (64, 128, 32, 32, 64, 4),
    (128, 64, 32, 64, 32, 4),
    (64, 128, 64, 32, 64, 3),
    (128, 64, 64, 64, 32, 3),
)

# TF32 (fp32 storage, m16n8k8): a 16-byte chunk holds 4 channels, so BK 16 is the same
# two chunks per MMA step and the same shared bytes per row as BK 32 of fp16.
# (No 32x64 warp tiles: ptxas spills them.) TF32 loops on sm_90 are 24-30% HMMA (hot path:
# 128x128x16 213 instructions per 64): an m16n8k8 does half the work of an m16n8k16 and
# each fragment register takes one rounding (one F2FP; two instructions below sm_90).
TILES_TF32 = (
    (128, 128, 16, 64, 64, 4),
    (128, 128, 32, 64, 64, 3),
    (128, 64, 16, 64, 32, 4),
    (64, 128, 16, 64, 32, 4),
    (64, 64, 16, 32, 32, 4),
)
TILES_TF32_ALIGN1 = ((64, 64, 16, 32, 32, 4),)
SPLIT_TILES_TF32 = ((64, 64, 16, 32, 32, 4), (64, 128, 16, 64, 32, 4), (128, 64, 16, 64, 32, 4))

# The 3-D kernel (tc_conv_fwd_3d) is compiled for these tiles only: the BK-32 tiles of every
# block shape the default picks, and the split tiles. Every 3-D tile is one more module in
# the NVRTC check (3 archs) and on the emulator, and 3-D layers are few next to 2-D ones.
# Static figures on sm_90 (registers, no spills in any): 128x128x32 218 (2-D: 215),
# 128x64x32 124 (128), 64x128x32 128 (125), 64x64x32 80 (72); the same blocks per SM as the
# 2-D kernel except 64x64x32 (6 against 7): the depth mask word and the depth tap.
TILES_3D = frozenset(
    {
        (128, 128, 32, 64, 64, 4),
        (128, 64, 32, 64, 32, 4),
        (64, 128, 32, 32, 64, 4),
        (64, 64, 32, 32, 32, 4),
        (128, 64, 16, 64, 32, 4),
        (64, 128, 16, 64, 32, 4),
        (64, 64, 16, 32, 32, 4),
    }
)


@dataclass(frozen=True)
class Variant:
    """What the element type decides: the tiles, the copy widths and the split tiles."""

    tiles: tuple[tuple[int, ...], ...]  # 16-byte copies
    narrow_tiles: tuple[tuple[int, ...], ...]  # 4-byte copies
    split_tiles: tuple[tuple[int, ...], ...]
    aligns: tuple[int, int]  # channels per 16-byte and per 4-byte copy
    itemsize: int


HALF = Variant(TILES, TILES_ALIGN2, SPLIT_TILES, (8, 2), 2)
TF32 = Variant(TILES_TF32, TILES_TF32_ALIGN1, SPLIT_TILES_TF32, (4, 1), 4)


# The tiles compiled as tc_conv_fwd_packed as well: those of block_n 64 and 128, at most
# 128 rows and BK 32 (TF32: 16), every dtype's copy widths. (A packed block reduces over
# the window of channels its groups read, a few channels per group: 64-deep slices would
# mostly be zero fill.)
PACKED_TILES = frozenset(
    t
    for t in (*TILES, *TILES_ALIGN2, *TILES_TF32, *TILES_TF32_ALIGN1)
    if t[1] in (64, 128) and t[0] <= 128 and t[0] * t[1] <= 128 * 64 and t[2] <= 32
)


def variant(dtype: str) -> Variant:
    return TF32 if dtype == "fp32" else HALF


@dataclass(frozen=True)
class TcTile(Config):
    """The tile of the tensor-core GEMM: block_m x block_n (x block_k of the reduction per
    stage), warp_m x warp_n warp tiles, stages, and the split-K count. Subclasses validate
    against their own tile tables."""

    block_m: int
    block_n: int
    block_k: int
    warp_m: int
    warp_n: int
    stages: int
    splits: int

    def astuple(self) -> tuple[int, ...]:
        return (self.block_m, self.block_n, self.block_k, self.warp_m, self.warp_n, self.stages)

    @property
    def threads(self) -> int:
        return (self.block_m // self.warp_m) * (self.block_n // self.warp_n) * 32

    def pipe_bytes(self, itemsize: int = 2, a_rows_k: bool = False, b_rows_k: bool = False) -> int:
        """Shared bytes of the stages. fp32 tiles of reduction rows (``*_rows_k``: the
        TF32 backward kernels) carry 8 floats of padding per row (tc_gemm.cuh)."""
        pad = 8 if itemsize == 4 else 0
        a = self.block_k * (self.block_m + (pad if a_rows_k else 0))
        b = self.block_k * (self.block_n + (pad if b_rows_k else 0))
        return self.stages * (a + b) * itemsize

    def label(self) -> str:
        split = f"_split{self.splits}" if self.splits > 1 else ""
        return (
            f"{self.block_m}x{self.block_n}x{self.block_k}_w{self.warp_m}x{self.warp_n}"
            f"_s{self.stages}{split}"
        )


@dataclass(frozen=True)
class TcConfig(TcTile):
    block_m: int = 128
    block_n: int = 128
    block_k: int = 32
    warp_m: int = 64
    warp_n: int = 64
    stages: int = 4
    splits: int = 1

    def __post_init__(self) -> None:
        tile = self.astuple()
        if tile not in TILES and tile not in TILES_TF32:
            raise ValueError(f"tensor-core tile {self.label()} is not one of {TILES + TILES_TF32}")
        splittable = tile in SPLIT_TILES or tile in SPLIT_TILES_TF32
        if self.splits not in SPLITS or (self.splits > 1 and not splittable):
            raise ValueError(f"splits must be one of {SPLITS}, and > 1 only with the split tiles")

    def smem_bytes(self, itemsize: int = 2, b_rows_k: bool = False) -> int:
        """Dynamic shared memory: the stages, or the fp32 epilogue tile if larger
        (``b_rows_k``: a B tile of reduction rows, the backward data kernel's)."""
        return max(self.pipe_bytes(itemsize, b_rows_k=b_rows_k),
                   self.block_m * (self.block_n + 4) * 4)  # fmt: skip


def least_padding(configs: Sequence[TcConfig], channels: int) -> TcConfig | None:
    """Of ``configs``, the one whose reduction slices pad a tap's ``channels`` least, then
    the deepest (fewer instructions per MMA: the loader's and barrier's work is shared by
    more of them), then the first; None for none."""
    return min(configs, key=lambda c: (-(-channels // c.block_k) * c.block_k, -c.block_k),
               default=None)  # fmt: skip


def fits_twice(smem: int, caps: Capabilities) -> bool:
    """Two blocks of ``smem`` shared bytes fit one SM. The 64-deep 128x128 tiles (96 KiB in
    three stages) do on sm_90 (227 KiB), not on sm_80 (163): there one block of 4 warps per
    SM would be left to hide every latency, so the defaults take them only where this
    holds. The 64-deep 128x64 and 64x128 tiles (72 KiB) fit twice on both."""
    return 2 * smem <= caps.max_shared_bytes


def flat(problem: ConvProblem) -> bool:
    """Whether the few-channel kernel runs ``problem`` (tc_conv_fwd_flat): ungrouped 1-D or
    2-D with fewer input channels than one 16-byte copy holds (8 halves, 4 floats; a
    network's stem), padded to that many in the workspace, the reduction over whole taps."""
    few = 0 < problem.c < variant(problem.dtype).aligns[0]
    return problem.groups == 1 and problem.ndim <= 2 and few


def padded_channels(problem: ConvProblem) -> int:
    """x's channels as the kernel reads them: the copy width on the few-channel path."""
    return variant(problem.dtype).aligns[0] if flat(problem) else problem.c


def align_for(problem: ConvProblem) -> int | None:
    """Channels per cp.async: 16 bytes when C/groups allows it (or the few-channel path
    pads it to that), else 4 bytes (2 halves, or one float), else None (odd C/groups in
    fp16/bf16)."""
    cg = padded_channels(problem) // problem.groups
    return next((a for a in variant(problem.dtype).aligns if cg % a == 0), None)


def packed(problem: ConvProblem, config: TcConfig) -> bool:
    """Whether ``config`` runs ``problem`` as tc_conv_fwd_packed (see the module)."""
    tile = config.astuple()
    return (problem.groups > 1 and problem.k_per_group < config.block_n and config.splits == 1
            and tile in PACKED_TILES and (problem.ndim < 3 or tile in TILES_3D))  # fmt: skip


def kernel_expr(dt: dtypes.DType, config: TcConfig, align: int, d3: bool = False,
                pack: bool = False, few: bool = False) -> str:  # fmt: skip
    args = ", ".join(map(str, config.astuple()))
    name = "tc_conv_fwd" + ("_flat" if few else "") + ("_packed" if pack else "")
    return f"{name}{'_3d' if d3 else ''}<{dt.ctype}, {args}, {align}>"


def splitk_expr(dt: dtypes.DType) -> str:
    return f"tc_conv_fwd_splitk_epilogue<{dt.ctype}>"


def module_spec(dt: dtypes.DType, config: TcConfig, align: int, d3: bool = False,
                pack: bool = False, few: bool = False) -> ModuleSpec:  # fmt: skip
    """One tile per module: a first call compiles only the variant it runs."""
    return ModuleSpec.make(SOURCE, [kernel_expr(dt, config, align, d3, pack, few)])


def transpose_expr(dt: dtypes.DType) -> str:
    return f"tc_nchw_to_nhwc<{dt.ctype}>"


class NhwcCopies:
    """The NCHW path's layout conversion into the workspace (``tc_nchw_to_nhwc``, 32 x 32
    tiles through shared memory): ``images`` arrays of ``c`` x ``hw`` to ``hw`` x ``c`` (an
    NCHW / NCDHW tensor to NHWC / NDHWC: images N; KCRS filters to KRSC: images K, c
    C/groups, hw the taps). Every tensor-core direction uses it for NCHW problems."""

    def __init__(self, backend: Backend, dt: dtypes.DType) -> None:
        self.kernel = backend.kernel(helper_module_spec(dt), transpose_expr(dt))

    def __call__(self, src: Any, dst: Any, images: int, c: int, hw: int) -> None:
        grid = (-(-hw // 32), -(-c // 32), images)
        self.kernel(grid, (32, 8), (src, dst, np.int32(c), np.int32(hw)))


def pad_expr(dt: dtypes.DType) -> str:
    return f"tc_pad_channels<{dt.ctype}>"


class ChannelPad:
    """The few-channel path's copy into the workspace (``tc_pad_channels``): ``images``
    arrays of ``c`` channels x ``hw`` pixels (NCHW when ``nchw``, else NHWC) to NHWC with
    ``cp`` channels, zeros past c (x: images N; filters: images K, hw the taps)."""

    def __init__(self, backend: Backend, dt: dtypes.DType) -> None:
        self.kernel = backend.kernel(helper_module_spec(dt), pad_expr(dt))

    def __call__(self, src: Any, dst: Any, images: int, c: int, hw: int, cp: int,
                 nchw: bool) -> None:  # fmt: skip
        count = images * hw * cp
        grid = (max(1, min(-(-count // 256), 1 << 16)),)
        args = (src, dst, np.int32(c), np.int32(cp), np.int32(hw), np.int64(count),
                np.int32(nchw))  # fmt: skip
        self.kernel(grid, (256,), args)


def helper_module_spec(dt: dtypes.DType) -> ModuleSpec:
    """The split-K finishing kernel (it holds the activation switch), the NCHW path's
    layout conversion and the few-channel path's padding, once per dtype."""
    return ModuleSpec.make(SOURCE, [splitk_expr(dt), transpose_expr(dt), pad_expr(dt)])


# The tiles of the few-channel kernel: the BK-32 (TF32: BK-16) tiles of each block shape
# the default picks, the 3-D kernel's and TF32's 128x128; its reduction (R*S taps of one
# 16-byte chunk) is short.
FLAT_TILES = TILES_3D | {(128, 128, 16, 64, 64, 4)}


def reduction_tiles(problem: ConvProblem, config: TcConfig) -> int:
    """R*S taps x ceil(C/groups / block_k) channel slices; the few-channel kernel: slices of
    block_k / (copy width) whole taps."""
    if flat(problem):
        per = config.block_k // variant(problem.dtype).aligns[0]
        return -(-problem.filter_taps // per)
    return problem.filter_taps * -(-problem.c_per_group // config.block_k)


def group_tiles(problem: ConvProblem, per_group: int, tile: int) -> int:
    """grid.y of the tensor-core kernels: each group's ``per_group`` GEMM columns (rows of
    backward filter) in tiles of ``tile``, group-major (``group_tile`` in the kernels)."""
    return problem.groups * -(-per_group // tile)


def split_plan(problem: ConvProblem, config: TcConfig) -> tuple[int, int]:
    """(reduction tiles per split, splits that get work). Packed: one split, each block's
    own count (the kernel takes the smaller of this bound and its window's)."""
    if packed(problem, config):
        return 2**30, 1
    total = reduction_tiles(problem, config)
    per = -(-total // config.splits)
    return per, -(-total // per)


_ALIGN = 256  # workspace regions start on 256-byte boundaries


def aligned_bytes(nbytes: int) -> int:
    """``nbytes`` rounded up to a workspace region's 256-byte alignment."""
    return -(-nbytes // _ALIGN) * _ALIGN


def converted_bytes(problem: ConvProblem, shapes: Sequence[tuple[int, ...]]) -> tuple[int, ...]:
    """Workspace bytes of each tensor of ``shapes`` in the NCHW path's conversion (NHWC or
    KRSC, rounded up to 256 bytes), zeros for channels-last problems."""
    if problem.channels_last:
        return (0,) * len(shapes)
    item = dtype_of(problem).itemsize
    return tuple(aligned_bytes(int(np.prod(shape)) * item) for shape in shapes)


def workspace_layout(problem: ConvProblem, config: TcConfig) -> tuple[int, int, int]:
    """(bytes of x in NHWC, bytes of w in KRSC, bytes of split-K partials); the first two
    only for NCHW problems (the layout conversion) and the few-channel path (x and w padded
    to the copy width), the last only with splits > 1."""
    item = dtype_of(problem).itemsize
    convert = not problem.channels_last or flat(problem)
    cp, c = padded_channels(problem), problem.c

    def nbytes(shape: tuple[int, ...]) -> int:  # (x and w hold C channels each)
        return aligned_bytes(int(np.prod(shape)) // c * cp * item) if convert else 0

    xb, wb = nbytes(problem.x_shape()), nbytes(problem.w_shape())
    _, splits = split_plan(problem, config)
    rows = problem.n * int(np.prod(problem.out_spatial))
    return xb, wb, 0 if splits == 1 else 4 * splits * rows * problem.k


class _Runner(Runner):
    #: the main kernel's name expression (kernel_expr's arguments) and readable prefix
    kernel_expr = staticmethod(kernel_expr)
    prefix = "tc_igemm_fwd"

    def __init__(self, backend: Backend, problem: ConvProblem, config: TcTile) -> None:
        dt = dtype_of(problem)
        align = align_for(problem)
        assert align is not None
        d3 = problem.ndim == 3
        pack = packed(problem, config)
        self._flat = few = flat(problem)
        expr = self.kernel_expr(dt, config, align, d3, pack, few)
        self._kernel = backend.kernel(ModuleSpec.make(SOURCE, [expr]), expr)
        math = "tf32" if problem.dtype == "fp32" else problem.dtype
        layout = problem.layout.lower() if d3 else "nhwc" if problem.channels_last else "nchw"
        kind = "_flat" if few else "_packed" if pack else ""
        self._names = [f"{self.prefix}{kind}_{config.label()}_a{align}_{layout}_{math}"]
        cp = padded_channels(problem)
        self._shape = shape_struct(dataclasses.replace(problem, c=cp) if few else problem)
        rows = problem.n * int(np.prod(problem.out_spatial))
        self._per, splits = split_plan(problem, config)
        columns = (-(-problem.k // config.block_n) if pack
                   else group_tiles(problem, problem.k_per_group, config.block_n))  # fmt: skip
        self._grid = (-(-rows // config.block_m), columns, splits)
        self._block = (config.threads,)
        self._smem = config.smem_bytes(dt.itemsize)
        self._splits, self._count, self._k = splits, rows * problem.k, problem.k
        self._pq = int(np.prod(problem.out_spatial))
        self._nchw = np.int32(0 if problem.channels_last else 1)
        self._layout = workspace_layout(problem, config)
        self._dtype = dt.numpy
        helpers = helper_module_spec(dt)
        if splits > 1:
            self._finish = backend.kernel(helpers, splitk_expr(dt))
            self._names.append(f"tc_igemm_fwd_splitk_epilogue_{problem.dtype}")
            self._fgrid = (max(1, min(-(-self._count // 256), 1 << 16)),)
        if few:
            # x and w to NHWC / KRSC with cp channels, zeros past C: (images, C, HW, cp, nchw)
            self._pad = ChannelPad(backend, dt)
            nchw = not problem.channels_last
            self._x_p = (problem.n, problem.c, int(np.prod(problem.spatial)), cp, nchw)
            self._w_p = (problem.k, problem.c, problem.filter_taps, cp, nchw)
            self._names.insert(0, f"tc_pad_channels_{problem.dtype}")
        elif not problem.channels_last:
            self._convert = NhwcCopies(backend, dt)
            hw, taps = int(np.prod(problem.spatial)), problem.filter_taps
            # (images, C, HW) of x -> NHWC and of w (K images of C/groups x R*S) -> KRSC
            self._x_t = (problem.n, problem.c, hw)
            self._w_t = (problem.k, problem.c_per_group, taps)
            self._names.insert(0, f"tc_nchw_to_nhwc_{problem.dtype}")

    @property
    def kernel_names(self) -> list[str]:
        return list(self._names)

    def _view(self, workspace: Any, start: int, nbytes: int, dtype: Any) -> Any:
        return workspace[start : start + nbytes].view(dtype)

    def __call__(self, tensors: ConvTensors, epilogue: Epilogue, workspace: Any) -> None:
        x, w, y, z, bias = tensors.kernel_pointers()
        xb, wb, pb = self._layout
        if self._flat:
            xs = self._view(workspace, 0, xb, self._dtype)
            ws_w = self._view(workspace, xb, wb, self._dtype)
            self._pad(x, xs, *self._x_p)
            self._pad(w, ws_w, *self._w_p)
            x, w = xs, ws_w
        elif self._nchw:
            xs = self._view(workspace, 0, xb, self._dtype)
            ws_w = self._view(workspace, xb, wb, self._dtype)
            self._convert(x, xs, *self._x_t)
            self._convert(w, ws_w, *self._w_t)
            x, w = xs, ws_w
        parts = x if self._splits == 1 else self._view(workspace, xb + wb, pb, np.float32)
        e = epilogue.struct()
        args = (x, w, y, z, bias, self._shape, e, parts, np.int32(self._per), self._nchw)
        self._kernel(self._grid, self._block, args, shared_mem=self._smem)
        if self._splits > 1:
            count, k, pq = np.int64(self._count), np.int32(self._k), np.int32(self._pq)
            args = (parts, y, z, bias, e, np.int32(self._splits), count, k, pq, self._nchw)
            self._finish(self._fgrid, (256,), args)


class TcImplicitGemmSolver(Solver):
    """Multistage tensor-core implicit GEMM, forward (module docstring)."""

    name = "conv_fwd_tc_implicit_gemm"
    family = "conv_fwd"
    config_type = TcConfig
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, max_ndim=3)
        if reason:
            return not_applicable(reason)
        if problem.dtype == dtypes.FLOAT64.short:
            return not_applicable(NO_FP64_MMA)
        if not problem.channels_last and max(problem.n, problem.k) > 65535:
            return not_applicable("NCHW: the layout conversion needs N and K <= 65535")
        if problem.dtype == "fp32" and problem.math != "tf32":
            return not_applicable("fp32 runs on tensor cores only with math='tf32'")
        if not caps.mma_sync:
            return not_applicable(f"needs mma.sync and ldmatrix (sm_75+), device is {caps.arch}")
        if problem.dtype != "fp16" and not caps.bf16_tensor_cores:
            what = "tf32" if problem.dtype == "fp32" else problem.dtype
            return not_applicable(f"{what} needs sm_80+, device is {caps.arch}")
        if align_for(problem) is None:
            return not_applicable(
                f"needs an even channel count per group for 4-byte copies, got "
                f"c/groups={problem.c_per_group}"
            )
        columns = group_tiles(problem, problem.k_per_group, 64)
        if columns > _MAX_GRID_Y:
            return not_applicable(
                f"groups * ceil(k/groups / 64) = {columns} exceeds the grid's y limit {_MAX_GRID_Y}"
            )
        if max(problem.filter) > 16:
            return not_applicable(f"needs filters of at most 16 taps per dim, got {problem.filter}")
        grow = -(-padded_channels(problem) // max(problem.c, 1))  # (few channels: x, w padded)
        if max(np.prod(problem.x_shape()), np.prod(problem.w_shape())) * grow >= 2**31:
            return not_applicable("needs x and w below 2^31 elements (32-bit offsets)")
        return APPLICABLE

    def configs(self, problem: ConvProblem, caps: Capabilities) -> list[TcConfig]:
        v = variant(problem.dtype)
        tiles = v.narrow_tiles if align_for(problem) == v.aligns[1] else v.tiles
        few = flat(problem)
        out = []
        for t in tiles:
            if (problem.ndim == 3 and t not in TILES_3D) or (few and t not in FLAT_TILES):
                continue
            for splits in SPLITS if t in v.split_tiles else (1,):
                c = TcConfig(*t, splits)
                if splits > 1 and reduction_tiles(problem, c) < 4 * splits:
                    continue  # each split keeps at least 4 reduction tiles
                if c.smem_bytes(v.itemsize) <= caps.max_shared_bytes:
                    out.append(c)
        return out

    def workspace_size(self, problem: ConvProblem, config: Config) -> int:
        assert isinstance(config, TcTile)
        return sum(workspace_layout(problem, config))

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> TcConfig:
        rows = problem.n * int(np.prod(problem.out_spatial))
        wide = problem.k_per_group > 64
        block = (
            ((128, 128) if wide else (128, 64)) if rows >= 8192 else (64, 128) if wide else (64, 64)
        )
        options = self.configs(problem, caps)
        v = variant(problem.dtype)
        if problem.groups > 1 and problem.k_per_group < 64:
            # Narrow groups: a packed tile (several groups per block), 64 columns where the
            # copy width has one, the block shape's rows as above.
            pool = [c for c in options if packed(problem, c)]
            pool = [c for c in pool if c.block_n == 64] or pool
            if pool:
                return next((c for c in pool if c.block_m == block[0]), pool[0])
        # Of the variant's tiles of that block shape (16-byte copies: its full table) that
        # keep two blocks per SM, the one whose slices pad a tap's channels least, then
        # the deepest (fewer instructions per MMA), then the table's first: 64-deep slices
        # for 64 channels or a multiple of 64, 32-deep for 32 or 96.
        fitting = [
            c
            for c in options
            if (c.block_m, c.block_n) == block
            and c.splits == 1
            and fits_twice(c.smem_bytes(v.itemsize), caps)
        ]
        cg = padded_channels(problem) // problem.groups
        tile = (least_padding(fitting, cg) or options[0]).astuple()
        packs = packed(problem, TcConfig(*tile))
        if not caps.emulator and tile in variant(problem.dtype).split_tiles and not packs:
            # Few output tiles (late layers at small batch): split the reduction until
            # the grid has about two blocks per SM of an H100/H200-class GPU.
            tiles = -(-rows // tile[0]) * group_tiles(problem, problem.k_per_group, tile[1])
            want = max(1, 264 // tiles)
            for splits in reversed(SPLITS):
                if splits <= want and TcConfig(*tile, splits) in options:
                    return TcConfig(*tile, splits)
        config = TcConfig(*tile)
        return config if config in options else options[0]

    def module_specs(self) -> list[ModuleSpec]:
        specs = []
        for dt in dtypes.FP32_COMPUTE_TYPES:
            v = variant(dt.short)
            wide, narrow = v.aligns
            for d3 in (False, True):
                keep = (lambda t: t in TILES_3D) if d3 else (lambda t: True)  # noqa: E731
                specs += [module_spec(dt, TcConfig(*t), wide, d3) for t in v.tiles if keep(t)]
                specs += [module_spec(dt, TcConfig(*t), narrow, d3) for t in v.narrow_tiles
                          if keep(t)]  # fmt: skip
            specs += [module_spec(dt, TcConfig(*t), a, d3, pack=True)
                      for d3 in (False, True)
                      for a, tiles in zip(v.aligns, (v.tiles, v.narrow_tiles), strict=True)
                      for t in tiles
                      if t in PACKED_TILES and (not d3 or t in TILES_3D)]  # fmt: skip
            specs += [module_spec(dt, TcConfig(*t), wide, few=True) for t in v.tiles
                      if t in FLAT_TILES]  # fmt: skip
            specs.append(helper_module_spec(dt))
        return specs

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        if problem.dtype == dtypes.FLOAT64.short:
            raise NotSupportedError(f"{self.name}: {NO_FP64_MMA}")
        if not isinstance(config, TcConfig):
            raise TypeError(f"{self.name}: expected a TcConfig, got {config!r}")
        return _Runner(backend, problem, config)
