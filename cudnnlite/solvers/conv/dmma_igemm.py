"""Forward convolution on the fp64 tensor cores (``cuda_src/conv/dmma_implicit_gemm.cu``).

``conv_fwd_dmma_implicit_gemm`` (:class:`DmmaImplicitGemmSolver`): float64 only, sm_80+,
an implicit GEMM (M = N*P*Q output pixels, N = K output channels, reduction C*R*S taps)
whose products and sums are the tensor core's double MMA (``mma.sync`` m8n8k4 .f64 through
``common/mma.cuh``; an H200 does 67 TFLOP/s of it against 34 of CUDA-core double FMA).
1-D, 2-D and 3-D, any groups (one GEMM per group: grid.y runs group-major over each
group's K/groups columns, the group's channels reached by offsets fixed per block), any
padding, stride and dilation; NCHW/KCRS and NHWC/KRSC
(NCDHW/KCTRS and NDHWC/KTRSC; the A operand is gathered element by element either way:
channels-last loads are the coalesced ones). 3-D kernels are their own instantiations (the
depth in the rows' and taps' fourth int, four reduction digits), in a module of their own.

Config (:class:`DmmaConfig`, every field in the kernel's readable name
``dmma_igemm_fwd_64x64x16_w32x32_s2_nhwc_fp64``): the block tile ``block_m`` x ``block_n``,
``block_k`` reduction elements per shared stage, the warp tile ``warp_m`` x ``warp_n`` and
the number of ``cp.async`` stages. Two tiles (:data:`TILES`), both of 32x32 warps (16 m8n8
fragments, 32 double accumulators per lane) and BK 16 in two stages of rows of 20 doubles
in dynamic shared memory: 64x64 (4 warps, 40 KiB) and 128x64 (8 warps, 60 KiB), which
reads each filter slice once per 128 output pixels instead of 64 (half the L2 traffic for
B per FLOP) for layers with enough output tiles to fill the GPU; one module holds both.

Error: the MMA rounds each product-sum in double; the GPU's order of the four additions
of one k4 step is unspecified (the emulator adds them in k order, one fma each), so a
result is within about C*R*S * 2^-53 * sum|x||w| of the exact one, like the CUDA-core
implicit GEMM's. Deterministic (no atomics, fixed order per GPU).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import dtypes
from ...errors import BadParamError, NotSupportedError
from ...problems.conv import ConvProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities, capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from .common import ConvTensors, Epilogue, shape_struct
from .direct import common_reason
from .implicit_gemm import _limits_reason

SOURCE = "conv/dmma_implicit_gemm.cu"
MAX_GRID_Y = 65535

# (block_m, block_n, block_k, warp_m, warp_n, stages): the compiled tiles.
TILES: tuple[tuple[int, int, int, int, int, int], ...] = (
    (64, 64, 16, 32, 32, 2),
    (128, 64, 16, 32, 32, 2),
)


@dataclass(frozen=True)
class DmmaConfig(Config):
    """The block tile, its reduction slice, the warp tile and the shared stages."""

    block_m: int = 64
    block_n: int = 64
    block_k: int = 16
    warp_m: int = 32
    warp_n: int = 32
    stages: int = 2

    def __post_init__(self) -> None:
        if self.astuple() not in TILES:
            known = ", ".join(DmmaConfig(*t).label() for t in TILES)
            raise BadParamError(f"DMMA tile {self.label()} is not compiled; tiles: {known}")

    @classmethod
    def from_tuple(cls, t: tuple[int, ...]) -> DmmaConfig:
        return cls(*t)

    def astuple(self) -> tuple[int, ...]:
        return (self.block_m, self.block_n, self.block_k, self.warp_m, self.warp_n, self.stages)

    @property
    def threads(self) -> int:
        return (self.block_m // self.warp_m) * (self.block_n // self.warp_n) * 32

    def smem_bytes(self) -> int:
        """Dynamic shared memory: the stages, rows of block_k + 4 doubles."""
        return self.stages * (self.block_m + self.block_n) * (self.block_k + 4) * 8

    def static_smem_bytes(self) -> int:
        """The int4 row decode, in static shared memory."""
        return 16 * self.block_m

    def label(self) -> str:
        return (f"{self.block_m}x{self.block_n}x{self.block_k}_w{self.warp_m}x{self.warp_n}"
                f"_s{self.stages}")  # fmt: skip


def tile_args(config: DmmaConfig, nhwc: bool, d3: bool) -> str:
    """A DMMA kernel's template arguments: layout, tile and, for 3-D, ``true``."""
    c = config
    args = f"{str(nhwc).lower()}, {c.block_m}, {c.block_n}, {c.block_k}, {c.warp_m}, {c.warp_n}"
    return args + (", true" if d3 else "")


def kernel_expr(config: DmmaConfig, nhwc: bool, d3: bool = False) -> str:
    return f"dmma_conv_fwd<{tile_args(config, nhwc, d3)}>"


def module_spec(d3: bool = False) -> ModuleSpec:
    """Both layouts of every tile, one module per dimensionality (the stage count is the
    kernel's own: two; 3-D kernels carry the depth in their rows and taps)."""
    names = [kernel_expr(DmmaConfig(*t), nhwc, d3) for t in TILES for nhwc in (False, True)]
    return ModuleSpec.make(SOURCE, names)


def layout_tag(problem: ConvProblem) -> str:
    """nchw / nhwc, or the 3-D layout (ncdhw / ndhwc), for kernel names."""
    if problem.ndim == 3:
        return problem.layout.lower()
    return "nhwc" if problem.channels_last else "nchw"


def dmma_reason(problem: ConvProblem, caps: Capabilities | None) -> str | None:
    """What none of the DMMA convolution kernels (every direction) runs, or None: another
    dtype than float64, a GPU older than sm_80, 32-bit index limits."""
    if problem.dtype != dtypes.FLOAT64.short:
        return f"needs float64: the fp64 tensor-core MMA (m8n8k4 .f64), got {problem.dtype}"
    if caps is not None and not caps.emulator and not caps.bf16_tensor_cores:
        return f"fp64 tensor cores need sm_80+, device is {caps.arch}"
    return _limits_reason(problem)


def grid_y(groups: int, per_group: int, tile: int) -> int:
    """grid.y of a grouped DMMA kernel: each group's ``per_group`` columns (or rows) in
    tiles of ``tile``, group-major (conv::group_tile)."""
    return groups * -(-per_group // tile)


def _fits(config: DmmaConfig, caps: Capabilities | None) -> bool:
    """The stages fit the device's shared memory per block (with the static row decode)."""
    limit = caps.max_shared_bytes if caps is not None else 48 * 1024
    return config.smem_bytes() + config.static_smem_bytes() <= limit


class _Runner(Runner):
    def __init__(self, backend: Backend, problem: ConvProblem, config: DmmaConfig) -> None:
        nhwc, d3 = problem.channels_last, problem.ndim == 3
        self._kernel = backend.kernel(module_spec(d3), kernel_expr(config, nhwc, d3))
        self._name = f"dmma_igemm_fwd_{config.label()}_{layout_tag(problem)}_fp64"
        rows = problem.n * int(np.prod(problem.out_spatial))
        self._grid = (-(-rows // config.block_m),
                      grid_y(problem.groups, problem.k_per_group, config.block_n))  # fmt: skip
        self._block = (config.threads,)
        self._shape = shape_struct(problem)
        self._smem = config.smem_bytes()

    @property
    def kernel_names(self) -> list[str]:
        return [self._name]

    def __call__(self, tensors: ConvTensors, epilogue: Epilogue, workspace: Any) -> None:
        args = (*tensors.kernel_pointers(), self._shape, epilogue.struct(dtypes.FLOAT64))
        self._kernel(self._grid, self._block, args, shared_mem=self._smem)


class DmmaImplicitGemmSolver(Solver):
    """Implicit GEMM on the fp64 tensor cores, forward (module docstring)."""

    name = "conv_fwd_dmma_implicit_gemm"
    family = "conv_fwd"
    config_type = DmmaConfig
    deterministic = True

    def is_applicable(self, problem: ConvProblem, caps: Capabilities) -> Applicability:
        reason = common_reason(problem, max_ndim=3) or dmma_reason(problem, caps)
        if reason:
            return not_applicable(reason)
        if grid_y(problem.groups, problem.k_per_group, max(t[1] for t in TILES)) > MAX_GRID_Y:
            return not_applicable(f"k={problem.k} in {problem.groups} groups exceeds the "
                                  "grid's y limit")  # fmt: skip
        return APPLICABLE

    def configs(self, problem: ConvProblem, caps: Capabilities) -> list[DmmaConfig]:
        return [c for c in map(DmmaConfig.from_tuple, TILES) if _fits(c, caps)]

    def default_config(self, problem: ConvProblem, caps: Capabilities) -> DmmaConfig:
        """128x64 where its blocks fill the GPU twice over (two per SM), else 64x64.
        Unmeasured on a GPU so far: a tuning DB entry overrides it."""
        options = self.configs(problem, caps)
        rows = problem.n * int(np.prod(problem.out_spatial))
        for c in reversed(options):  # the larger tile first
            blocks = -(-rows // c.block_m) * grid_y(problem.groups, problem.k_per_group,
                                                    c.block_n)  # fmt: skip
            if blocks >= 2 * max(caps.sm_count, 1):
                return c
        return options[0]

    def is_valid(self, config: Config, problem: ConvProblem, caps: Capabilities) -> bool:
        return (isinstance(config, DmmaConfig) and _fits(config, caps)
                and grid_y(problem.groups, problem.k_per_group, config.block_n)
                <= MAX_GRID_Y)  # fmt: skip

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(False), module_spec(True)]

    def prepare(self, backend: Backend, problem: ConvProblem, config: Config) -> Runner:
        caps = capabilities(backend)
        ok = self.is_applicable(problem, caps)
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        if not isinstance(config, DmmaConfig):
            raise NotSupportedError(f"{self.name}: expected a DmmaConfig, got {config!r}")
        if not self.is_valid(config, problem, caps):
            need = config.smem_bytes() + config.static_smem_bytes()
            raise NotSupportedError(f"{self.name}: config {config.label()} needs {need} bytes "
                                    f"of shared memory, more than {caps.arch} has")  # fmt: skip
        return self.runner(backend, problem, config)

    def runner(self, backend: Backend, problem: ConvProblem, config: DmmaConfig) -> Runner:
        """The prepared launch, once :meth:`prepare` has checked the problem and config."""
        return _Runner(backend, problem, config)
