"""FlashAttention for float64 on the fp64 tensor cores (``cuda_src/attention/flash_dmma.cu``),
forward and backward.

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
speed on a GPU is unmeasured.

``sdpa_bwd_flash_dmma`` (:class:`FlashDmmaBwdSolver`): the CUDA-core backward's plan
(delta; dK/dV per key tile over the GQA group's heads and the query tiles that see the
keys; dQ and the additive mask's gradient per query tile; no atomics) with S, dP, dV, dK
and dQ as DMMAs: the key-side kernel computes the transposed tiles S^T = K Q^T and dP^T =
V dO^T, so (P keep)^T and dS^T feed dV and dK from their fragments with the permuted
reduction, as P does in the forward; the query-side kernel feeds dS to dQ likewise. Head
dims up to 128 (dK and dV of 256 in registers would not fit; the CUDA-core backward takes
them). Static figures in :data:`BWD_TILES`' comment.
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
from .flash_fp32 import DTYPE_CODE, HEAD_TILES, Fp32Config, _Fp32Solver, head_tile
from .flash_fp32 import _BwdRunner as _Fp32BwdRunner

SOURCE = "attention/flash_dmma.cu"
WARPS = 4
# HD -> (MT m8 row tiles per warp, NT n8 key tiles): block_m = 32 MT, block_n = 8 NT.
# Static figures on sm_90 (registers, no spills, two blocks per SM; the key-tile loop's
# SASS per DMMA, the untaken mask / dropout paths included): HD 64: 190 registers, 3127
# instructions per 256 DMMA; HD 128: 242, 2229 per 256; HD 256: 216, 1196 per 128. About a
# third of the HD-64 loop is the double exp2 of the softmax (DFMA polynomials and their
# constants), which the CUDA-core kernel pays alike.
TILES = {64: (2, 4), 128: (2, 2), 256: (1, 1)}


def _tile(hd: int) -> tuple[int, int]:
    mt, nt = TILES[hd]
    return WARPS * 8 * mt, 8 * nt


@dataclass(frozen=True)
class DmmaConfig(Fp32Config):
    """block_m query rows x block_n keys: the forward's tile of a head dim (:data:`TILES`),
    or the backward's dQ tile (:data:`BWD_TILES`; its dK/dV tile follows from the head
    dim)."""

    def __post_init__(self) -> None:
        shapes = {_tile(hd) for hd in TILES} | {_bwd_tiles(hd)[1] for hd in BWD_TILES}
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
    """The forward kernels (the backward's are a module of their own)."""
    return ModuleSpec.make(SOURCE, [_expr(hd) for hd in HEAD_TILES])


# Backward, HD -> ((KT m8 key tiles per warp, NQ n8 query tiles) of the dK/dV kernel,
# (MT m8 query tiles per warp, NT n8 key tiles) of the dQ kernel). Head dims above 128 stay
# on the CUDA-core backward: dK and dV of HD 256 in registers would take 256 registers.
# Static figures on sm_90 (registers, no spills; the inner loop's SASS per DMMA, untaken
# mask / dropout paths included): dK/dV HD 64 206 registers (2 blocks per SM), 3084
# instructions per 256 DMMA; HD 128 246, 2156 per 256; dQ HD 64 154 (3 blocks), 2726 per
# 192; HD 128 168, 1787 per 192. Shared memory 69-99 KB: every tile fits sm_86 too.
BWD_TILES = {64: ((1, 4), (1, 4)), 128: ((1, 2), (1, 2))}
BWD_HEAD_TILES = tuple(BWD_TILES)


def _bwd_tiles(hd: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """((dK/dV: keys, queries per tile), (dQ: query rows, keys per tile))."""
    (kt, nq), (mt, nt) = BWD_TILES[hd]
    return (WARPS * 8 * kt, 8 * nq), (WARPS * 8 * mt, 8 * nt)


def bwd_smem_bytes(hd: int) -> tuple[int, int]:
    """(dK/dV kernel, dQ kernel) shared memory bytes."""
    (bn, bq), (bm, bk) = _bwd_tiles(hd)
    ld = hd + 4
    return 8 * (2 * bn * ld + 2 * bq * ld), 8 * (2 * bm * ld + 2 * bk * ld)


def _bwd_exprs(hd: int) -> tuple[str, str]:
    (kt, nq), (mt, nt) = BWD_TILES[hd]
    return f"flash_dmma_bwd_dkdv<{hd}, {kt}, {nq}>", f"flash_dmma_bwd_dq<{hd}, {mt}, {nt}>"


DELTA_EXPR = "flash_fp32_bwd_delta<double>"  # flash_fp32_tile.cuh, instantiated here too


def bwd_module_spec() -> ModuleSpec:
    names = [DELTA_EXPR] + [e for hd in BWD_HEAD_TILES for e in _bwd_exprs(hd)]
    return ModuleSpec.make(SOURCE, names)


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


class _BwdRunner(_Fp32BwdRunner):
    """The CUDA-core backward's launch sequence (delta, dK/dV, dQ) with this module's
    kernels, grids and shared memory."""

    def __init__(self, backend: Backend, problem: AttentionProblem, cfg: DmmaConfig) -> None:
        hd = head_tile(problem)
        spec = bwd_module_spec()
        dkdv, dq = _bwd_exprs(hd)
        self.delta = backend.kernel(spec, DELTA_EXPR)
        self.dkdv = backend.kernel(spec, dkdv)
        self.dq = backend.kernel(spec, dq)
        (bn, bq), (bm, bk) = _bwd_tiles(hd)
        p = problem
        self.grid_delta = (-(-p.b * p.hq * p.sq // WARPS),)
        self.grid_dkdv = (-(-p.skv // bn), p.b * p.hkv)
        self.grid_dq = (-(-p.sq // bm), p.b * p.hq)
        self.smem_dkdv, self.smem_dq = bwd_smem_bytes(hd)
        self.problem = problem
        self.flags = (np.int32(DTYPE_CODE["fp64"]), np.int32(MASK_KIND[problem.mask]))
        self.names = ["flash_fp32_bwd_delta_fp64", f"flash_dmma_bwd_dkdv_{bn}x{bq}_hd{hd}_fp64",
                      f"flash_dmma_bwd_dq_{bm}x{bk}_hd{hd}_fp64"]  # fmt: skip

    def main_flags(self) -> tuple[Any, ...]:
        return self.flags[1:]  # the mask kind (the storage is double)


class FlashDmmaBwdSolver(FlashDmmaFwdSolver):
    """FlashAttention backward on the fp64 tensor cores: delta, then dK/dV per key tile
    (walking the GQA group's heads and the query tiles that see the keys) and dQ (with the
    additive mask's gradient) per query tile, as the CUDA-core backward, with S, dP, dV, dK
    and dQ as DMMAs. Head dims up to 128; the workspace holds delta (b * hq * sq doubles).
    Deterministic (no atomics)."""

    name = "sdpa_bwd_flash_dmma"
    family = "sdpa_bwd"

    def is_applicable(self, problem: AttentionProblem, caps: Capabilities) -> Applicability:
        if problem.dtype == "fp64" and problem.max_head_dim > BWD_HEAD_TILES[-1]:
            return not_applicable(
                f"needs head dims d, dv <= {BWD_HEAD_TILES[-1]} (dK and dV stay in registers)"
            )
        return super().is_applicable(problem, caps)

    def _smem(self, problem: AttentionProblem) -> int:
        return max(bwd_smem_bytes(head_tile(problem)))

    def configs(self, problem: AttentionProblem, caps: Capabilities) -> list[DmmaConfig]:
        return [DmmaConfig(*_bwd_tiles(head_tile(problem))[1])]

    def workspace_size(self, problem: AttentionProblem, config: Config) -> int:
        return 8 * problem.b * problem.hq * problem.sq

    def module_specs(self) -> list[ModuleSpec]:
        return [bwd_module_spec()]

    def prepare(self, backend: Backend, problem: AttentionProblem, config: Config) -> Runner:
        return _BwdRunner(backend, problem, self._check(backend, problem, config))
