"""FlashAttention-2 forward on tensor cores (``sdpa_flash_fwd_tc`` in
``cuda_src/attention/flash_fwd.cu``).

``sdpa_fwd_flash_tc`` (:class:`FlashTcFwdSolver`): fp16 (sm_75+) or bf16 (sm_80+), fp32
accumulation and softmax, any masking the problem describes (causal / window / lengths
through the key range, explicit bool or additive masks, dropout), GQA, BHSD and BSHD
through strides. Head dims: d and dv multiples of 8 (16-byte copies), up to 256, padded
to a head-dim bucket (32, 64, 128, 256) with zeros. One block per BM query rows of one
(batch, q head); Q in registers (shared memory for 256), K and V tiles of BN keys
streamed through shared memory by cp.async. No workspace; deterministic.

Config: :class:`FlashConfig` (block_m query rows, block_n keys per tile, warps,
stages). Modules: one per (dtype, head-dim bucket) holding the bucket's configs and
every mask / dropout variant would take tens of seconds to compile (each kernel is 2-3 s
of NVRTC), so a call compiles a module of the one kernel it needs. ``module_specs`` (the
NVRTC check, CI) lists one module per dtype of three kernels that together take every
template path (mask kinds, dropout, head dims 32 to 256) for every arch, not the whole
cross product.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ... import dtypes
from ...errors import NotSupportedError
from ...problems.attention import AttentionProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from .common import (
    MASK_KIND,
    AttentionTensors,
    Scalars,
    data_ptr,
    dtype_of,
    misaligned_rows,
    params,
)

SOURCE = "attention/flash_fwd.cu"
DTYPES = ("fp16", "bf16")
HEAD_DIMS = (32, 64, 128, 256)
_MAX_GRID_YZ = 65535
_MASK_TAG = {"none": "", "bool": "_mask_bool", "additive": "_mask_add"}


@dataclass(frozen=True)
class FlashConfig(Config):
    """block_m query rows (16 per warp: the kernel can take 32, but its O, S and Q
    registers spill on sm_90), block_n keys per K / V tile, warps, stages of K / V tiles
    in flight."""

    block_m: int
    block_n: int
    warps: int
    stages: int = 2

    def __post_init__(self) -> None:
        if self.warps not in (2, 4, 8):
            raise ValueError(f"warps: 2, 4 or 8, got {self.warps}")
        if self.block_m != 16 * self.warps:
            raise ValueError(f"block_m: 16 rows per warp, got {self.block_m}/{self.warps}")
        if self.block_n not in (32, 64, 128):
            raise ValueError(f"block_n: 32, 64 or 128, got {self.block_n}")
        if self.stages not in (2, 3):
            raise ValueError(f"stages: 2 or 3, got {self.stages}")

    @property
    def threads(self) -> int:
        return 32 * self.warps

    def smem_bytes(self, head_dim: int) -> int:
        return (self.block_m + 2 * self.stages * self.block_n) * head_dim * 2

    def label(self) -> str:
        return f"{self.block_m}x{self.block_n}_w{self.warps}_s{self.stages}"


# Per head-dim bucket, the default first. Registers (sm_90): a warp keeps its O
# accumulators (head_dim / 2 floats per lane), S (block_n / 2) and Q fragments (head_dim
# / 4, up to 128; 256 re-reads Q from shared memory). Head dim 64 takes 128-key tiles:
# the per-tile costs (barriers, copies' addresses, row max shuffles) spread over twice the
# MMAs; at 255 registers that is 2 blocks (8 warps) per SM, no spills (64-key tiles: 168
# registers, 3 blocks; capping the 128-key kernel at 168 spills). Head dim 32 keeps
# 64-key tiles by default: ptxas fits its 128-key mask kernels in 168 registers with
# 28 bytes of spills.
CONFIGS: dict[int, tuple[FlashConfig, ...]] = {
    32: (FlashConfig(64, 64, 4), FlashConfig(64, 128, 4), FlashConfig(128, 64, 8)),
    64: (
        FlashConfig(64, 128, 4),
        FlashConfig(64, 64, 4),
        FlashConfig(128, 64, 8),
        FlashConfig(128, 128, 8),
    ),
    128: (FlashConfig(128, 64, 8), FlashConfig(64, 64, 4), FlashConfig(128, 32, 8)),
    256: (FlashConfig(64, 32, 4), FlashConfig(64, 64, 4)),
}


def head_dim_bucket(problem: AttentionProblem) -> int | None:
    return next((hd for hd in HEAD_DIMS if hd >= problem.max_head_dim), None)


def _expr(dt: dtypes.DType, hd: int, cfg: FlashConfig, mask: str, dropout: bool) -> str:
    args = (dt.ctype, hd, cfg.block_m, cfg.block_n, cfg.warps, cfg.stages, MASK_KIND[mask])
    return f"sdpa_flash_fwd_tc<{', '.join(map(str, args))}, {'true' if dropout else 'false'}>"


def kernel_name(dt: dtypes.DType, hd: int, cfg: FlashConfig, mask: str, dropout: bool) -> str:
    drop = "_drop" if dropout else ""
    return (f"sdpa_flash_fwd_tc_{cfg.block_m}x{cfg.block_n}_d{hd}_w{cfg.warps}_s{cfg.stages}"
            f"{_MASK_TAG[mask]}{drop}_{dt.short}")  # fmt: skip


def module_spec(
    dt: dtypes.DType, hd: int, cfg: FlashConfig, mask: str, dropout: bool
) -> ModuleSpec:
    return ModuleSpec.make(SOURCE, [_expr(dt, hd, cfg, mask, dropout)])


class _Runner(Runner):
    def __init__(self, backend: Backend, problem: AttentionProblem, cfg: FlashConfig) -> None:
        dt = dtype_of(problem)
        hd = head_dim_bucket(problem)
        assert hd is not None
        dropout = problem.dropout
        spec = module_spec(dt, hd, cfg, problem.mask, dropout)
        self.kernel = backend.kernel(spec, _expr(dt, hd, cfg, problem.mask, dropout))
        self.problem = problem
        self.grid = (-(-problem.sq // cfg.block_m), problem.hq, problem.b)
        self.block = (cfg.threads,)
        self.smem = cfg.smem_bytes(hd)
        self.names = [kernel_name(dt, hd, cfg, problem.mask, dropout)]

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)

    def __call__(self, tensors: AttentionTensors, scalars: Scalars, workspace: Any) -> None:
        for name in "qkvo":
            a = getattr(tensors, name)
            if data_ptr(a) % 16 or misaligned_rows(a):
                raise NotSupportedError(
                    f"sdpa_fwd_flash_tc: {name} needs 16-byte aligned rows (pointer and "
                    "strides multiples of 8 elements)"
                )
        m = tensors.mask
        if m is not None and abs(m.strides[-1]) >= 2**23 * m.itemsize:
            raise NotSupportedError(
                f"sdpa_fwd_flash_tc: attn_mask's key stride ({m.strides[-1] // m.itemsize} "
                "elements) must be below 2^23 (32-bit offsets in a tile): pass a mask "
                "contiguous along its last axis"
            )
        if self.grid[0] == 0:
            return
        p = params(self.problem, tensors, scalars)
        self.kernel(self.grid, self.block, (*tensors.pointers(), p), shared_mem=self.smem)


class FlashTcFwdSolver(Solver):
    """FlashAttention-2 forward on tensor cores (module docstring)."""

    name = "sdpa_fwd_flash_tc"
    family = "sdpa_fwd"
    config_type = FlashConfig
    deterministic = True

    def is_applicable(self, problem: AttentionProblem, caps: Capabilities) -> Applicability:
        if problem.direction != "fwd":
            return not_applicable("forward only")
        if problem.dtype not in DTYPES:
            return not_applicable(f"needs fp16 or bf16 (tensor-core MMA), got {problem.dtype}")
        if not caps.mma_sync:
            return not_applicable(f"needs mma.sync and ldmatrix (sm_75+), device is {caps.arch}")
        if problem.dtype == "bf16" and not caps.bf16_tensor_cores:
            return not_applicable(f"bf16 needs sm_80+, device is {caps.arch}")
        if problem.d % 8 or problem.dv % 8:
            return not_applicable(
                f"needs head dims that are multiples of 8 (16-byte copies), got d={problem.d}, "
                f"dv={problem.dv}"
            )
        if problem.max_head_dim > HEAD_DIMS[-1]:
            return not_applicable(f"needs d, dv <= {HEAD_DIMS[-1]}, got {problem.d}, {problem.dv}")
        if max(problem.hq, problem.b) > _MAX_GRID_YZ:
            return not_applicable(f"needs hq and b <= {_MAX_GRID_YZ} (grid y and z)")
        if max(problem.sq, problem.skv) * problem.hq * problem.max_head_dim >= 2**31:
            return not_applicable("needs a (sequence, head) slice below 2^31 elements")
        if not self.configs(problem, caps):
            return not_applicable("no tile fits the device's shared memory")
        return APPLICABLE

    def configs(self, problem: AttentionProblem, caps: Capabilities) -> list[FlashConfig]:
        hd = head_dim_bucket(problem)
        if hd is None:
            return []
        return [c for c in CONFIGS[hd] if c.smem_bytes(hd) <= caps.max_shared_bytes]

    def default_config(self, problem: AttentionProblem, caps: Capabilities) -> FlashConfig:
        options = self.configs(problem, caps)
        if not options:
            raise NotSupportedError(f"{self.name}: {self.is_applicable(problem, caps).reason}")
        # Short query sequences: the smaller tile gives more blocks and less padding.
        if problem.sq <= 64:
            small = [c for c in options if c.block_m == 64]
            if small:
                return small[0]
        return options[0]

    def module_specs(self) -> list[ModuleSpec]:
        """One module per dtype of three default-config kernels: the plain head dim 64 and
        128 kernels (what sass_mix reports) and the mask kinds, dropout, head dims 32 and
        256 (Q from shared memory) spread over the rest, so every template path compiles
        for every arch without the cross product (module docstring)."""
        variants = {
            "fp16": ((64, "none", False), (128, "none", False), (256, "bool", True)),
            "bf16": ((32, "additive", False), (128, "none", False), (64, "none", True)),
        }
        return [
            ModuleSpec.make(
                SOURCE, [_expr(dt, hd, CONFIGS[hd][0], m, d) for hd, m, d in variants[dt.short]]
            )  # fmt: skip
            for dt in dtypes.FLOAT_TYPES
            if dt.short in DTYPES
        ]

    def prepare(self, backend: Backend, problem: AttentionProblem, config: Config) -> Runner:
        caps = _caps(backend)
        ok = self.is_applicable(problem, caps)
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        if not isinstance(config, FlashConfig):
            raise NotSupportedError(f"{self.name}: expected a FlashConfig, got {config!r}")
        return _Runner(backend, problem, config)


def _caps(backend: Backend) -> Capabilities:
    from ...runtime.caps import capabilities

    return capabilities(backend)
