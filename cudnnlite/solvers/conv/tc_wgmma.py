"""The forward convolution on Hopper's warpgroup MMA (``conv_fwd_tc_wgmma``,
:class:`TcWgmmaSolver`): ``tc_conv_fwd_wgmma`` in ``cuda_src/conv/tc_implicit_gemm.cu``,
the multistage implicit GEMM of :mod:`.tc_igemm` (the same operand loader, cp.async
stages, split-K and epilogue) on the main loop of ``cuda_src/conv/tc_wgmma.cuh``.

Why: on an H100/H200, ``mma.sync`` reaches about half of the tensor cores' dense fp16
rate; ``wgmma`` is the instruction that reaches the rest. Each warpgroup (4 warps) issues
``wgmma.m64nNk16`` (N = ``block_n``: 64, 128 or 256) with A and B read straight from shared
memory through descriptors (128-byte swizzled 64-deep tiles, the layout the loaders
already write), so the main loop has no ``ldmatrix`` and no fragment registers. Static
figures (sm_90a SASS, ``benchmarks/sass_mix.py``, per warp and 64-deep stage on the hot
path): 128 x 128 tiles 4 HGMMA.64x128x16 among 105 instructions, 1,248 multiply-adds per
issued instruction (the ``mma.sync`` kernel's 128 x 128 x 64: 128 HMMA and 32 LDSM among
261, 1,004); 128 x 256 4 HGMMA.64x256x16 among 131, 2,001; 64 x 128 1,066; the n64 tiles
555-607 (128 x 64: 108 instructions).

Scope: sm_90 only (the modules compile for sm_90a: ``compile_options.target``; sm_100's
tensor cores have other instructions), fp16 and bf16, 1-D, 2-D and 3-D (``_3d``: NDHWC +
KTRSC), channels-last (NCHW / NCDHW through :mod:`.tc_igemm`'s layout conversion), any
stride, dilation, padding and groups (one GEMM per group), C/groups a multiple of 8
(16-byte copies), at most 16 taps per dim. Not here: TF32, the packed (narrow groups) and
few-channel kernels; the ``mma.sync`` solver keeps those. Backward data at stride 1 runs
it on rotated filters (``conv_bwd_data_tc_wgmma`` in :mod:`.bwd_data`).

Trust: the emulator runs its exact, asynchronous model of ``wgmma`` (common/mma.cuh,
emu_mma.h) and the tests compare this solver with the float64 reference there; on a GPU,
an sm_90 device first proves its ``wgmma`` against the same layouts
(``runtime/wgmma_check.py``: ``Capabilities.wgmma`` is false where it fails, and this
solver then does not apply), and ``benchmarks/device_check.sh`` runs the tests there
first. Unmeasured on a GPU so far: the sm_90 heuristics rank it before the ``mma.sync``
solver on the static figures above; a tuning DB's entry overrides them.

Config (:class:`WgConfig`): ``block_m`` (64 x warpgroups) x ``block_n``, 64-deep stages,
``stages``, ``splits`` (split-K as :mod:`.tc_igemm`'s). Readable kernel name
``tc_wgmma_fwd_128x128x64_w16x128_s3_a8_nhwc_fp16`` (a warp's share of a warpgroup's
tile is 16 rows x ``block_n``).

Error: as :mod:`.tc_igemm`'s 16-bit path (exact products, fp32 sums, one rounding).
Deterministic (no atomics, fixed order).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ... import dtypes
from ...problems.conv import ConvProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import Applicability, Config, Runner, not_applicable
from . import tc_igemm
from .direct import common_reason
from .tc_igemm import SOURCE, SPLITS, TcTile, align_for, flat, least_padding

# (block_m, block_n, stages): 128 x 128 in three stages is 96 KiB of shared memory (two
# blocks per SM on sm_90's 227 KiB), in four 128 KiB (one); 128 x 256 in four 192 KiB (one
# block of 8 warps, 128 accumulators a thread: 167 registers, its MMAs overlapping tile
# to tile); the rest 72-96 KiB.
WG_TILES = (
    (128, 256, 4),
    (128, 128, 3),
    (128, 128, 4),
    (128, 64, 4),
    (64, 128, 4),
    (64, 64, 4),
)


@dataclass(frozen=True)
class WgConfig(TcTile):
    block_m: int = 128
    block_n: int = 128
    block_k: int = 64
    warp_m: int = 16
    warp_n: int = 128
    stages: int = 3
    splits: int = 1

    def __post_init__(self) -> None:
        if (self.block_m, self.block_n, self.stages) not in WG_TILES or self.block_k != 64:
            raise ValueError(f"wgmma tile {self.label()} is not one of {WG_TILES} (block_k 64)")
        if (self.warp_m, self.warp_n) != (16, self.block_n):
            raise ValueError("a wgmma tile's warps hold 16 rows x block_n each")
        if self.splits not in SPLITS:
            raise ValueError(f"splits must be one of {SPLITS}")

    @classmethod
    def of(cls, block_m: int, block_n: int, stages: int, splits: int = 1) -> WgConfig:
        return cls(block_m, block_n, 64, 16, block_n, stages, splits)

    def smem_bytes(self, itemsize: int = 2) -> int:
        """Dynamic shared memory: the stages, or the fp32 epilogue tile if larger."""
        return max(self.pipe_bytes(itemsize), self.block_m * (self.block_n + 4) * 4)


def kernel_expr(dt: dtypes.DType, config: TcTile, align: int, d3: bool = False,
                pack: bool = False, few: bool = False) -> str:  # fmt: skip
    assert not (pack or few), "the wgmma forward is unpacked, C/groups a multiple of 8"
    tile = f"{config.block_m}, {config.block_n}, {config.stages}"
    return f"tc_conv_fwd_wgmma{'_3d' if d3 else ''}<{dt.ctype}, {tile}, {align}>"


def _dtypes() -> list[dtypes.DType]:
    """fp16, and bf16 where ml_dtypes is installed."""
    return [dt for dt in dtypes.FP32_COMPUTE_TYPES if dt.short in ("fp16", "bf16")]


class _Runner(tc_igemm._Runner):
    kernel_expr = staticmethod(kernel_expr)
    prefix = "tc_wgmma_fwd"


class TcWgmmaSolver(tc_igemm.TcImplicitGemmSolver):
    """Implicit GEMM forward on wgmma (sm_90; module docstring)."""

    name = "conv_fwd_tc_wgmma"
    config_type = WgConfig

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, max_ndim=3)
        if reason:
            return not_applicable(reason)
        if not caps.wgmma:
            return not_applicable(f"needs wgmma (sm_90), device is {caps.arch}")
        if problem.dtype not in ("fp16", "bf16"):
            return not_applicable(f"fp16 and bf16 only, got {problem.dtype}")
        if flat(problem) or align_for(problem) != 8:
            return not_applicable(
                f"needs C/groups a multiple of 8 (16-byte copies), got {problem.c_per_group}"
            )
        return super().is_applicable(problem, caps)

    def configs(self, problem: ConvProblem, caps: Capabilities) -> list[WgConfig]:
        out = []
        for bm, bn, stages in WG_TILES:
            for splits in SPLITS:
                c = WgConfig.of(bm, bn, stages, splits)
                if splits > 1 and tc_igemm.reduction_tiles(problem, c) < 4 * splits:
                    continue  # each split keeps at least 4 reduction tiles
                if c.smem_bytes() <= caps.max_shared_bytes:
                    out.append(c)
        return out

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> WgConfig:
        """:mod:`.tc_igemm`'s block shapes (128 x 128 for 8192+ output pixels and more
        than 64 output channels per group, ...; 128 x 256 for 256 or more), three stages
        where two blocks then fit an SM, and its split-K for grids of few tiles on a GPU."""
        rows = problem.n * int(np.prod(problem.out_spatial))
        wide = problem.k_per_group > 64
        block = ((128, 128) if wide else (128, 64)) if rows >= 8192 else (
            (64, 128) if wide else (64, 64))  # fmt: skip
        if rows >= 8192 and problem.k_per_group >= 256:
            block = (128, 256)  # (one block per SM: its MMAs overlap tile to tile)
        options = [c for c in self.configs(problem, caps) if c.splits == 1]
        shaped = [c for c in options if (c.block_m, c.block_n) == block]
        # (128 x 256 is one block per SM whatever its stages)
        fitting = [c for c in shaped if tc_igemm.fits_twice(c.smem_bytes(), caps)] or shaped
        config = least_padding(fitting, problem.c_per_group) or options[0]
        if not caps.emulator:
            tiles = -(-rows // config.block_m) * tc_igemm.group_tiles(
                problem, problem.k_per_group, config.block_n
            )
            want = max(1, 264 // tiles)
            for splits in reversed(SPLITS):
                split = WgConfig.of(config.block_m, config.block_n, config.stages, splits)
                if splits <= want and split in self.configs(problem, caps):
                    return split
        return config

    def module_specs(self) -> list[ModuleSpec]:
        return [
            ModuleSpec.make(SOURCE, [kernel_expr(dt, WgConfig.of(*t), 8, d3)])
            for dt in _dtypes()
            for d3 in (False, True)
            for t in WG_TILES
        ] + [tc_igemm.helper_module_spec(dt) for dt in _dtypes()]

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        if not isinstance(config, WgConfig):
            raise TypeError(f"{self.name}: expected a WgConfig, got {config!r}")
        return _Runner(backend, problem, config)
