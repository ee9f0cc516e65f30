"""FlashAttention forward for float64 on the fp64 tensor cores
(``cuda_src/attention/flash_dmma.cu``).

``sdpa_fwd_flash_dmma`` (:class:`FlashDmmaFwdSolver`): fp64 storage and math, sm_80+
(``mma.sync`` m8n8k4 .f64; the emulator runs the same fragment layout lane by lane). A
block of 4 warps owns BM query rows of one (batch, head), each warp 8 * MT of them and
the whole key tile of BN keys: S = Q K^T and O += P V are DMMAs, the online softmax runs
on the S fragments in double (each lane's values belong to one row per m tile, so the
statistics and O's rescaling need no exchange), and P feeds the second MMA straight from
the S fragments (the reduction over keys taken in a permuted order that matches the
fragment layout: no shuffles, no shared-memory round trip). Every feature of the CUDA-core
kernel (GQA, causal either alignment, window, bool / additive masks, lengths, dropout,
head dims 1..256 padded to 64 / 128 / 256), through its building blocks
(``flash_fp32_tile.cuh``: tile loads, masks, dropout draws, block key ranges).

Error: the products and sums are double (the DMMA's four-product sums in an unspecified
order, as any double GEMM's), so the error is the CUDA-core kernel's: about (d + skv) *
2^-53 relative, far inside the fp64 tests' tolerance.

Config: :class:`~.flash_fp32.Fp32Config` (block_m query rows x block_n keys), one tile per
head dim: 64 x 32 for HD 64, 64 x 16 for HD 128, 32 x 8 for HD 256 (shared memory 69, 101
and 100 KB: two blocks per SM on sm_90). Static figures in :data:`TILES`' comment; the
speed on a GPU is unmeasured. The backward stays on the CUDA-core kernels
(``sdpa_bwd_flash_fp32``).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ...problems.attention import AttentionProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, not_applicable
from .common import MASK_KIND, AttentionTensors, Scalars, params
from .flash_fp32 import HEAD_TILES, Fp32Config, _Fp32Solver, head_tile

SOURCE = "attention/flash_dmma.cu"
WARPS = 4
# HD -> (MT m8 row tiles per warp, NT n8 key tiles): block_m = 32 MT, block_n = 8 NT.
# Static figures on sm_90 (registers, no spills, two blocks per SM; the key-tile loop's
# SASS per DMMA, the untaken mask / dropout paths included): HD 64: 194 registers, 3148
# instructions per 256 DMMA; HD 128: 242, 2260 per 256; HD 256: 216, 1204 per 128. About a
# third of the HD-64 loop is the double exp2 of the softmax (DFMA polynomials and their
# constants), which the CUDA-core kernel pays alike.
TILES = {64: (2, 4), 128: (2, 2), 256: (1, 1)}


def _tile(hd: int) -> tuple[int, int]:
    mt, nt = TILES[hd]
    return WARPS * 8 * mt, 8 * nt


@dataclass(frozen=True)
class DmmaConfig(Fp32Config):
    """block_m query rows x block_n keys: one of the tiles of :data:`TILES`."""

    def __post_init__(self) -> None:
        shapes = {_tile(hd) for hd in TILES}
        if (self.block_m, self.block_n) not in shapes:
            raise ValueError(f"fp64 tensor-core attention tiles are {sorted(shapes)}: {self}")


def smem_bytes(hd: int) -> int:
    """Qs [BM][HD + 4], Ks [BN][HD + 4], Vs [BN][HD + 2] doubles."""
    bm, bn = _tile(hd)
    return 8 * (bm * (hd + 4) + bn * (hd + 4) + bn * (hd + 2))


def _expr(hd: int) -> str:
    mt, nt = TILES[hd]
    return f"flash_dmma_fwd<{hd}, {mt}, {nt}>"


def module_spec() -> ModuleSpec:
    return ModuleSpec.make(SOURCE, [_expr(hd) for hd in HEAD_TILES])


class _Runner(Runner):
    def __init__(self, backend: Backend, problem: AttentionProblem, cfg: DmmaConfig) -> None:
        hd = head_tile(problem)
        self.kernel = backend.kernel(module_spec(), _expr(hd))
        self.grid = (-(-problem.sq // cfg.block_m), problem.b * problem.hq)
        self.smem = smem_bytes(hd)
        self.problem = problem
        self.kind = np.int32(MASK_KIND[problem.mask])
        self.names = [f"flash_dmma_fwd_{cfg.block_m}x{cfg.block_n}_hd{hd}_fp64"]

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)

    def __call__(self, tensors: AttentionTensors, scalars: Scalars, workspace: Any) -> None:
        prm = params(self.problem, tensors, scalars)
        args = (*tensors.pointers(), prm, self.kind)
        self.kernel(self.grid, (WARPS * 32,), args, shared_mem=self.smem)


class FlashDmmaFwdSolver(_Fp32Solver):
    """FlashAttention forward on the fp64 tensor cores (module docstring)."""

    name = "sdpa_fwd_flash_dmma"
    family = "sdpa_fwd"
    config_type = DmmaConfig

    def is_applicable(self, problem: AttentionProblem, caps: Capabilities) -> Applicability:
        if problem.dtype != "fp64":
            return not_applicable(f"needs fp64 (the fp64 tensor cores), got {problem.dtype}")
        if not caps.emulator and not caps.bf16_tensor_cores:
            return not_applicable(f"needs the fp64 MMA (sm_80+), device is {caps.arch}")
        ok = super().is_applicable(problem, caps)
        return ok if not ok else APPLICABLE

    def _smem(self, problem: AttentionProblem) -> int:
        return smem_bytes(head_tile(problem))

    def configs(self, problem: AttentionProblem, caps: Capabilities) -> list[DmmaConfig]:
        return [DmmaConfig(*_tile(head_tile(problem)))]

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec()]

    def prepare(self, backend: Backend, problem: AttentionProblem, config: Config) -> Runner:
        return _Runner(backend, problem, self._check(backend, problem, config))
