"""Backward data on the multistage tensor-core GEMM, any stride (``tc_conv_bwd_data`` in
``cuda_src/conv/tc_bwd_data.cu``).

``conv_bwd_data_tc_implicit_gemm_phased`` (:class:`TcBwdDataPhasedSolver`): dx from dy and
the filters, NHWC + KRSC (NCHW: dy and w converted in the workspace by the forward's
``tc_nchw_to_nhwc``, dx written in NCHW by the epilogue), any groups (one GEMM per group:
grid.y runs group-major over the groups' C/groups columns, the reduction over their
K/groups channels), fp16 (sm_75+), bf16 or fp32 with ``math="tf32"`` (sm_80+), 1-D, 2-D
or 3-D, any stride, dilation and padding.
Phase decomposition: the grid's z picks a phase of the dx pixels (their coordinate plus
padding modulo the stride); each phase is a stride-1 correlation of dy with the taps that
reach it, so no MMA is spent on the stride's gaps and nothing divides per element. The
filter is read as stored (k rows, c contiguous) through ``ldmatrix.trans``: no rotated copy,
no workspace (NHWC). The epilogue is the forward's (the transposed convolution's bias, blending,
activation).

Narrow groups (fewer dx channels per group than the tile's 64 columns): the kernel
``tc_conv_bwd_data_packed`` (3-D ``_packed_3d``; tiles of :data:`PACKED_TILES`) takes 64
consecutive dx channels of several groups per block, reduces over the window of dy
channels those groups take, and reads B as the block-diagonal matrix of their filters (a
copy outside its column's group is zero-filled): the forward's packing (:mod:`.tc_igemm`),
C/groups / window of the MMAs useful instead of (K/groups / BK) x (C/groups / block_n).
sm_90 main loops within 1-3 instructions of the unpacked kernel's, no spills.

3-D (NDHWC + KTRSC): the kernel ``tc_conv_bwd_data_3d``, phases (pd, ph, pw) and the taps
(t, r, s) of each, a module of its own per tile (the 2-D kernels' code stays as it was),
compiled for the tiles of :data:`BWD_TILES_3D` only.

TF32 (fp32 storage): ``ldmatrix.trans`` moves 16-bit halves, so the filter tile (k rows)
reaches the fragments through 32-bit shared loads from rows padded by 8 floats (see
:mod:`.tc_bwd_filter`); dy's tile is the forward's (``ldmatrix``). At stride 1 the forward
kernel on rotated filters (``conv_bwd_data_tc_implicit_gemm``) is the other TF32 path.

Copies: 16 bytes when K/groups and C/groups are multiples of 8 (TF32: 4), 4 bytes when
both are even (TF32: any). Config: the forward's :class:`~.tc_igemm.TcConfig` (block_m dx pixels x
block_n channels C, block_k of K per stage), without split-K. Deterministic.
"""

from __future__ import annotations

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
from .bwd_data import BwdDataTensors
from .bwd_data_igemm import phase_rows
from .common import Epilogue, shape_struct
from .tc_bwd_filter import align_for, aligns, backward_reason
from .tc_igemm import (
    TILES,
    TILES_ALIGN2,
    TILES_TF32,
    TILES_TF32_ALIGN1,
    NhwcCopies,
    TcConfig,
    converted_bytes,
    fits_twice,
    group_tiles,
    least_padding,
)

SOURCE = "conv/tc_bwd_data.cu"

# Seven of the forward's tiles (its 8-warp 128x128 spills 4 bytes here on sm_90); 4-byte
# copies: one. sm_90 hot paths (sass_mix): 128x128x64 330 instructions per 128 MMA (39%,
# 236 registers; the default of large layers where two blocks fit an SM: fits_twice),
# 128x128x32 183 per 64 (35%; each row's phase taps a bit word, one test per copy),
# 128x64x64 207 per 64 (31%, 124 registers), 128x64x32 125 per 32 (26%), 64x128x64 238
# per 64 (27%), 64x128x32 137 per 32 (23%), 64x64x32 75 per 16 (21%). BK 64 takes 16-byte copies
# only (its A_RPP keeps the swizzle period), stays 2-D and is not packed (a packed block's
# window of a few dy channels per group would be mostly zero fill, as the forward's).
BWD_TILES = (
    (128, 128, 64, 64, 64, 3),
    (128, 128, 32, 64, 64, 4),
    (128, 64, 64, 64, 32, 3),
    (128, 64, 32, 64, 32, 4),
    (64, 128, 64, 32, 64, 3),
    (64, 128, 32, 32, 64, 4),
    (64, 64, 32, 32, 32, 4),
)
BWD_TILES_ALIGN2 = ((64, 64, 32, 32, 32, 4),)
# The 3-D kernel's tiles: the two block shapes the default picks, and the 4-byte one (each
# tile is one more module in the NVRTC check and on the emulator). sm_90 registers, no
# spills: 128x128 238 (2-D: 228), 64x64 94 (80), 64x64 4-byte 128 (96): the depth rows
# and the depth tap list.
# TF32: the forward's BK-16 tiles; 4-byte copies (one float, any K and C): 64x64. sm_90
# (registers, HMMA share of the main loop; no spills): 128x128 210 (18%: 356 instructions
# per 64 MMA), 128x64 and 64x128 124 (12%), 64x64 89 (9%); 3-D 128x128 222 (17%).
BWD_TILES_TF32 = (
    (128, 128, 16, 64, 64, 4),
    (128, 64, 16, 64, 32, 4),
    (64, 128, 16, 64, 32, 4),
    (64, 64, 16, 32, 32, 4),
)
BWD_TILES_TF32_ALIGN1 = TILES_TF32_ALIGN1
BWD_TILES_3D = frozenset(
    {(128, 128, 32, 64, 64, 4), (64, 64, 32, 32, 32, 4), *BWD_TILES_ALIGN2,
     BWD_TILES_TF32[0], BWD_TILES_TF32[3], *BWD_TILES_TF32_ALIGN1}
)  # fmt: skip
assert set(BWD_TILES) <= set(TILES) and set(BWD_TILES_ALIGN2) <= set(TILES_ALIGN2)
assert set(BWD_TILES_TF32) <= set(TILES_TF32)
# (wide, narrow) copies: (channels per copy, tiles) by dtype
_TABLES = {
    "fp16": ((8, BWD_TILES), (2, BWD_TILES_ALIGN2)),
    "bf16": ((8, BWD_TILES), (2, BWD_TILES_ALIGN2)),
    "fp32": ((4, BWD_TILES_TF32), (1, BWD_TILES_TF32_ALIGN1)),
}
_MAX_GRID = 65535


# The tiles compiled as tc_conv_bwd_data_packed too (groups narrower than block_n):
# those of 64 columns and slices of at most 32, every dtype's copy widths.
PACKED_TILES = frozenset(
    t
    for t in (*BWD_TILES, *BWD_TILES_ALIGN2, *BWD_TILES_TF32, *BWD_TILES_TF32_ALIGN1)
    if t[1] == 64 and t[2] <= 32
)


def packed(problem: ConvProblem, cfg: TcConfig) -> bool:
    """Whether ``cfg`` runs ``problem`` as tc_conv_bwd_data_packed: several groups of
    fewer dx channels than the tile per block (see the module)."""
    tile = cfg.astuple()
    return (problem.groups > 1 and problem.c_per_group < cfg.block_n and tile in PACKED_TILES
            and (problem.ndim < 3 or tile in BWD_TILES_3D))  # fmt: skip


def _nchw_bytes(problem: ConvProblem) -> tuple[int, int]:
    """Workspace bytes of dy in NHWC and w in KRSC (NCHW problems: the layout conversion)."""
    return converted_bytes(problem, (problem.y_shape(), problem.w_shape()))  # type: ignore[return-value]


def _expr(dt: dtypes.DType, cfg: TcConfig, align: int, d3: bool = False,
          pack: bool = False) -> str:  # fmt: skip
    name = "tc_conv_bwd_data" + ("_packed" if pack else "") + ("_3d" if d3 else "")
    return f"{name}<{dt.ctype}, {', '.join(map(str, cfg.astuple()))}, {align}>"


def module_spec(dt: dtypes.DType, cfg: TcConfig, align: int, d3: bool = False,
                pack: bool = False) -> ModuleSpec:  # fmt: skip
    return ModuleSpec.make(SOURCE, [_expr(dt, cfg, align, d3, pack)])


class _Runner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem, cfg: TcConfig) -> None:
        dt = bwf.dtype_of(problem)
        align = align_for(problem)
        assert align is not None
        d3 = problem.ndim == 3
        pack = packed(problem, cfg)
        spec = module_spec(dt, cfg, align, d3, pack)
        self.kernel = backend.kernel(spec, _expr(dt, cfg, align, d3, pack))
        phases = int(np.prod(problem.strides))
        columns = (-(-problem.c // cfg.block_n) if pack
                   else group_tiles(problem, problem.c_per_group, cfg.block_n))  # fmt: skip
        self.grid = (-(-phase_rows(problem) // cfg.block_m), columns, phases)
        self.block = (cfg.threads,)
        self.smem = cfg.smem_bytes(dt.itemsize, b_rows_k=True)
        self.shape = shape_struct(problem)
        layout = problem.layout.lower() if d3 else "nhwc" if problem.channels_last else "nchw"
        math = "tf32" if dt.short == "fp32" else dt.short
        kind = "_packed" if pack else ""
        self.names = [f"tc_igemm_bwd_data{kind}_{cfg.label()}_a{align}_phases{phases}_{layout}"
                      f"_{math}"]  # fmt: skip
        # NCHW: dy to NHWC and w to KRSC in the workspace; the epilogue writes dx in NCHW
        self.nchw = np.int32(0 if problem.channels_last else 1)
        self.convert = None if problem.channels_last else NhwcCopies(backend, dt)
        self.bytes = _nchw_bytes(problem)
        self.dy_t = (problem.n, problem.k, int(np.prod(problem.out_spatial)))
        self.w_t = (problem.k, problem.c_per_group, problem.filter_taps)
        self.dtype = dt.numpy
        if self.convert is not None:
            self.names.insert(0, f"tc_nchw_to_nhwc_{dt.short}")

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)

    def __call__(self, tensors: BwdDataTensors, epilogue: Epilogue, workspace: Any) -> None:
        z = tensors.dx  # no residual in backward data; a valid pointer of the dtype
        bias = tensors.bias if tensors.bias is not None else tensors.dy
        dy, w = tensors.dy, tensors.w
        if self.convert is not None:
            yb, wb = self.bytes
            dys = workspace[:yb].view(self.dtype)
            ws_w = workspace[yb : yb + wb].view(self.dtype)
            self.convert(dy, dys, *self.dy_t)
            self.convert(w, ws_w, *self.w_t)
            dy, w = dys, ws_w
        args = (dy, w, tensors.dx, z, bias, self.shape, epilogue.struct(), self.nchw)
        self.kernel(self.grid, self.block, args, shared_mem=self.smem)


class TcBwdDataPhasedSolver(Solver):
    """Tensor-core backward data for any stride by phases (module docstring)."""

    name = "conv_bwd_data_tc_implicit_gemm_phased"
    family = "conv_bwd_data"
    config_type = TcConfig
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = backward_reason(problem, caps, "bwd_data")
        if reason:
            return not_applicable(reason)
        columns = group_tiles(problem, problem.c_per_group, 64)
        if columns > _MAX_GRID or int(np.prod(problem.strides)) > _MAX_GRID:
            return not_applicable(
                "needs groups * ceil(C/groups / 64) and the stride's phases within the grid's "
                f"limits ({_MAX_GRID})"
            )
        if max(np.prod(problem.y_shape()), np.prod(problem.w_shape())) >= 2**31:
            return not_applicable("needs dy and w below 2^31 elements (32-bit offsets)")
        if max(problem.filter[-2:]) > 16:  # (the loader's tap bits: 16 per dimension)
            return not_applicable(
                f"needs filters of at most 16 taps per height and width, got {problem.filter}"
            )
        return APPLICABLE

    def workspace_size(self, problem: ConvProblem, config: Config) -> int:
        return sum(_nchw_bytes(problem))  # NCHW: dy and w converted; NHWC: none

    def configs(self, problem: ConvProblem, caps: Capabilities) -> list[TcConfig]:
        # (is_applicable refuses other dtypes; a forced call still asks for a config)
        (_, wide), (_, narrow) = _TABLES.get(problem.dtype, _TABLES["fp16"])
        tiles = narrow if align_for(problem) == aligns(problem)[1] else wide
        if problem.ndim == 3:
            tiles = tuple(t for t in tiles if t in BWD_TILES_3D)
        item = bwf.dtype_of(problem).itemsize
        configs = (TcConfig(*t) for t in tiles)
        return [c for c in configs if c.smem_bytes(item, b_rows_k=True) <= caps.max_shared_bytes]

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> TcConfig:
        options = self.configs(problem, caps)
        if problem.groups > 1 and problem.c_per_group < 64:
            # narrow groups: a packed tile, as many rows as the wide default would take
            pool = [c for c in options if packed(problem, c)]
            big = phase_rows(problem) >= 8192
            if pool:
                return next((c for c in pool if (c.block_m == 128) == big), pool[0])
        # The forward's block shapes: 128 rows for large layers, else 64; 128 columns for
        # more than 64 dx channels per group, else 64. Where none of that shape is compiled
        # (the 3-D kernel's and the 4-byte copies' tables) or fits twice, 64 x 64.
        wide = problem.c_per_group > 64
        rows = 128 if phase_rows(problem) >= 8192 else 64
        item = bwf.dtype_of(problem).itemsize
        for block in ((rows, 128 if wide else 64), (64, 64)):
            fitting = [
                c
                for c in options
                if (c.block_m, c.block_n) == block
                and fits_twice(c.smem_bytes(item, b_rows_k=True), caps)
            ]
            # the reduction runs over dy's channels: slices that pad them least, then deepest
            best = least_padding(fitting, problem.k_per_group)
            if best is not None:
                return best
        return options[0]

    def module_specs(self) -> list[ModuleSpec]:
        return [
            module_spec(dt, TcConfig(*t), a, d3, pack)
            for dt in dtypes.FP32_COMPUTE_TYPES
            for d3 in (False, True)
            for pack in (False, True)
            for a, tiles in _TABLES[dt.short]
            for t in tiles
            if (not d3 or t in BWD_TILES_3D) and (not pack or t in PACKED_TILES)
        ]

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        ok = self.is_applicable(problem, _caps(backend))
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        if not isinstance(config, TcConfig):
            raise NotSupportedError(f"{self.name}: expected a TcConfig, got {config!r}")
        return _Runner(backend, problem, config)


def _caps(backend: Backend) -> Capabilities:
    from ...runtime.caps import capabilities

    return capabilities(backend)
