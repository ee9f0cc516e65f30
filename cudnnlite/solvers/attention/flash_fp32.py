"""FlashAttention on CUDA cores with fp32 math (``cuda_src/attention/flash_fp32.cu``).

``sdpa_fwd_flash_fp32`` (:class:`FlashFp32FwdSolver`): a block owns a tile of query rows
of one (batch, head); K/V tiles pass through shared memory; S and O are register-blocked
per thread like an SGEMM micro-tile; online softmax in fp32 with exp2f; fully masked KV
tiles are skipped. ``sdpa_bwd_flash_fp32`` (:class:`FlashFp32BwdSolver`): delta =
rowsum(dout * o), then dK/dV per key tile (looping over the GQA group's query heads and
the query tiles that see the keys) and dQ (and the additive mask's gradient) per query
tile: no atomics, deterministic.

Every dtype (fp32 / fp16 / bf16 storage with fp32 math; fp64 storage with double math:
scores, softmax statistics, lse, delta and every accumulation in double, the kernels'
A = double instantiation with tiles of their own), any head dims 1..256 (d and dv
independent: both are zero-padded to the tile's head dim HD in {64, 128, 256}), every
masking feature (GQA, causal either alignment, window, bool / additive masks, lengths,
dropout). Vector loads where dims, strides and pointers allow, scalar otherwise. This is
the exact fp32 path (the tensor-core solvers cover fp16/bf16 with head dims multiple of 8).

Config: :class:`Fp32Config` (block_m query rows x block_n keys); one tile per HD, chosen
for two 128-thread blocks per SM on sm_90 without spills (the fp64 dK/dV kernel of HD 256
runs two blocks per key tile, each with half of dK's and dV's columns: 214 registers where
the whole width spilled 168 bytes). fp64 tiles hold half the rows or
keys (a double takes two registers and 8 bytes of shared memory); their shared memory
fits sm_75's 64 KiB only for head dims <= 64 (elsewhere ``is_applicable`` says so and the
dispatcher takes the unfused solver).

Modules: one for fp32 / fp16 / bf16 (the storage dtype is a run-time argument) and one
for fp64 (the A = double kernels).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import dtypes
from ...errors import NotSupportedError
from ...problems.attention import AttentionProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from .common import (
    MASK_KIND,
    AttentionBwdTensors,
    AttentionTensors,
    Scalars,
    acc_bytes,
    acc_numpy,
    dtype_of,
    params,
)

SOURCE = "attention/flash_fp32.cu"
THREADS = 128
HEAD_TILES = (64, 128, 256)  # d, dv <= 64 share the 64 tile: NVRTC time of the CI check
MAX_HEAD_DIM = HEAD_TILES[-1]
# (block_m, block_n) per HD: forward (query rows x keys) ...
FWD_TILES = {64: (64, 64), 128: (64, 32), 256: (32, 32)}
# ... and backward (block_m query rows x block_n keys for both the dK/dV and dQ kernels).
BWD_TILES = {64: (32, 64), 128: (32, 32), 256: (32, 16)}
# fp64 (double registers and shared memory): forward and backward tiles per HD.
FWD_TILES64 = {64: (32, 32), 128: (16, 32), 256: (16, 16)}
BWD_TILES64 = {64: (16, 32), 128: (16, 16), 256: (16, 16)}
_MAX_GRID_Y = 65535
DTYPE_CODE = {"fp32": 0, "fp16": 1, "bf16": 2, "fp64": 3}  # sdpa_fp32::kF32 ... kF64


def acc_ctype(problem_dtype: str) -> str:
    """The kernels' A: double for fp64, float otherwise."""
    return "double" if problem_dtype == "fp64" else "float"


def fwd_tiles(problem_dtype: str) -> dict[int, tuple[int, int]]:
    return FWD_TILES64 if problem_dtype == "fp64" else FWD_TILES


def bwd_tiles(problem_dtype: str) -> dict[int, tuple[int, int]]:
    return BWD_TILES64 if problem_dtype == "fp64" else BWD_TILES


def dkdv_column_split(problem_dtype: str, hd: int) -> int:
    """Blocks per key tile of the dK/dV kernel (grid z; ``dkdv_column_split`` in the .cu):
    2 for fp64 with head dim 256, whose double dK and dV accumulators would spill, so each
    block takes half of their columns (recomputing S and dP); 1 otherwise."""
    return 2 if problem_dtype == "fp64" and hd == 256 else 1


def head_tile(problem: AttentionProblem) -> int:
    """The padded head dim of the kernels: the smallest tile holding d and dv."""
    return next(t for t in HEAD_TILES if t >= problem.max_head_dim)


@dataclass(frozen=True)
class Fp32Config(Config):
    block_m: int
    block_n: int

    def __post_init__(self) -> None:
        if self.block_m % 16 or self.block_n % 16 or min(self.block_m, self.block_n) < 16:
            raise ValueError(f"block_m and block_n must be multiples of 16: {self}")


def fwd_smem_bytes(bm: int, bn: int, hd: int, elem: int = 4) -> int:
    """Shared memory bytes of the forward with ``elem``-byte elements (8: fp64)."""
    ld = hd + 4
    return elem * (bm * ld + 2 * bn * ld + bm * (bn + 4))


def bwd_smem_bytes(bm: int, bn: int, hd: int, elem: int = 4) -> tuple[int, int]:
    """(dK/dV kernel, dQ kernel) shared memory bytes."""
    ld = hd + 4
    dkdv = elem * (2 * bn * ld + 2 * bm * ld + 2 * bn * (bm + 4) + 2 * bm)
    dq = elem * (2 * bm * ld + 2 * bn * ld + bm * (bn + 4))
    return dkdv, dq


def _targs(bm: int, bn: int, hd: int, acc: str) -> str:
    """Template arguments; A = float is the default (the names the fp32 module had)."""
    return f"{bm}, {bn}, {hd}" + (", double" if acc == "double" else "")


def _fwd_expr(bm: int, bn: int, hd: int, acc: str = "float") -> str:
    return f"flash_fp32_fwd<{_targs(bm, bn, hd, acc)}>"


def _bwd_exprs(bm: int, bn: int, hd: int, acc: str = "float") -> tuple[str, str]:
    t = _targs(bm, bn, hd, acc)
    return f"flash_fp32_bwd_dkdv<{t}>", f"flash_fp32_bwd_dq<{t}>"


def _delta_expr(acc: str) -> str:
    return f"flash_fp32_bwd_delta<{acc}>"


def module_spec(problem_dtype: str = "fp32") -> ModuleSpec:
    """The module of both solvers for a dtype: one for fp32 / fp16 / bf16 (the storage
    dtype is a run-time argument of the kernels), one for fp64 (A = double): the forward
    and backward kernels of every head tile."""
    acc = acc_ctype(problem_dtype)
    fwd, bwd = fwd_tiles(problem_dtype), bwd_tiles(problem_dtype)
    names = [_fwd_expr(*fwd[hd], hd, acc) for hd in HEAD_TILES]
    names += [_delta_expr(acc)]
    names += [e for hd in HEAD_TILES for e in _bwd_exprs(*bwd[hd], hd, acc)]
    return ModuleSpec.make(SOURCE, names)


def module_specs() -> list[ModuleSpec]:
    """The fp32-math module, and the fp64 one."""
    return [module_spec("fp32"), module_spec(dtypes.FLOAT64.short)]


def _reason(problem: AttentionProblem, caps: Capabilities) -> str:
    if problem.sq * problem.skv == 0:
        return "needs sq and skv >= 1 (the op answers empty problems)"
    if problem.max_head_dim > MAX_HEAD_DIM:
        return f"needs head dims d, dv <= {MAX_HEAD_DIM}"
    if problem.b * problem.hq > _MAX_GRID_Y:
        return f"needs b * hq <= {_MAX_GRID_Y} (the grid's y)"
    if max(problem.sq, problem.skv) >= 2**31 // 2:
        return "needs sq and skv below 2^30"
    return ""


def _lengths(t: Any) -> tuple[Any, Any]:
    lq = t.lengths_q if t.lengths_q is not None else t.lse
    lkv = t.lengths_kv if t.lengths_kv is not None else t.lse
    return lq, lkv


class _FwdRunner(Runner):
    def __init__(self, backend: Backend, problem: AttentionProblem, cfg: Fp32Config) -> None:
        dt = dtype_of(problem)
        hd = head_tile(problem)
        acc = acc_ctype(problem.dtype)
        expr = _fwd_expr(cfg.block_m, cfg.block_n, hd, acc)
        self.kernel = backend.kernel(module_spec(problem.dtype), expr)
        self.grid = (-(-problem.sq // cfg.block_m), problem.b * problem.hq)
        self.smem = fwd_smem_bytes(cfg.block_m, cfg.block_n, hd, acc_bytes(problem))
        self.problem = problem
        self.flags = (np.int32(DTYPE_CODE[problem.dtype]), np.int32(MASK_KIND[problem.mask]))
        self.names = [f"flash_fp32_fwd_{cfg.block_m}x{cfg.block_n}_hd{hd}_{dt.short}"]

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)

    def __call__(self, tensors: AttentionTensors, scalars: Scalars, workspace: Any) -> None:
        prm = params(self.problem, tensors, scalars)
        args = (*tensors.pointers(), prm, *self.flags)
        self.kernel(self.grid, (THREADS,), args, shared_mem=self.smem)


class _Fp32Solver(Solver):
    config_type = Fp32Config
    deterministic = True

    def _tiles(self, problem: AttentionProblem) -> dict[int, tuple[int, int]]:
        return fwd_tiles(problem.dtype)

    def is_applicable(self, problem: AttentionProblem, caps: Capabilities) -> Applicability:
        reason = _reason(problem, caps)
        if reason:
            return not_applicable(reason)
        smem = self._smem(problem)
        if smem > caps.max_shared_bytes:
            limit = f"{caps.max_shared_bytes} on {caps.arch}"
            return not_applicable(
                f"needs {smem} bytes of shared memory for head dim {problem.max_head_dim} ({limit})"
            )
        return APPLICABLE

    def _smem(self, problem: AttentionProblem) -> int:
        hd = head_tile(problem)
        return fwd_smem_bytes(*self._tiles(problem)[hd], hd, acc_bytes(problem))

    def configs(self, problem: AttentionProblem, caps: Capabilities) -> list[Fp32Config]:
        return [Fp32Config(*self._tiles(problem)[head_tile(problem)])]

    def default_config(self, problem: AttentionProblem, caps: Capabilities) -> Fp32Config:
        return self.configs(problem, caps)[0]

    def module_specs(self) -> list[ModuleSpec]:
        return module_specs()

    def _check(self, backend: Backend, problem: AttentionProblem, config: Config) -> Fp32Config:
        from ...runtime.caps import capabilities

        ok = self.is_applicable(problem, capabilities(backend))
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        if not isinstance(config, Fp32Config) or config not in self.configs(problem, None):
            raise NotSupportedError(f"{self.name}: not a config of this problem: {config!r}")
        return config


class FlashFp32FwdSolver(_Fp32Solver):
    """FlashAttention forward on CUDA cores (module docstring)."""

    name = "sdpa_fwd_flash_fp32"
    family = "sdpa_fwd"

    def prepare(self, backend: Backend, problem: AttentionProblem, config: Config) -> Runner:
        return _FwdRunner(backend, problem, self._check(backend, problem, config))


class _BwdRunner(Runner):
    def __init__(self, backend: Backend, problem: AttentionProblem, cfg: Fp32Config) -> None:
        dt = dtype_of(problem)
        hd = head_tile(problem)
        spec = module_spec(problem.dtype)
        acc = acc_ctype(problem.dtype)
        bm, bn = cfg.block_m, cfg.block_n
        dkdv, dq = _bwd_exprs(bm, bn, hd, acc)
        self.delta = backend.kernel(spec, _delta_expr(acc))
        self.dkdv = backend.kernel(spec, dkdv)
        self.dq = backend.kernel(spec, dq)
        p = problem
        self.grid_delta = (-(-p.b * p.hq * p.sq // (THREADS // 32)),)
        self.grid_dkdv = (-(-p.skv // bn), p.b * p.hkv, dkdv_column_split(p.dtype, hd))
        self.grid_dq = (-(-p.sq // bm), p.b * p.hq)
        self.smem_dkdv, self.smem_dq = bwd_smem_bytes(bm, bn, hd, acc_bytes(problem))
        self.problem = problem
        self.flags = (np.int32(DTYPE_CODE[problem.dtype]), np.int32(MASK_KIND[problem.mask]))
        tile = f"{bm}x{bn}_hd{hd}_{dt.short}"
        self.names = [f"flash_fp32_bwd_delta_{dt.short}", f"flash_fp32_bwd_dkdv_{tile}",
                      f"flash_fp32_bwd_dq_{tile}"]  # fmt: skip

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)

    def __call__(self, tensors: AttentionBwdTensors, scalars: Scalars, workspace: Any) -> None:
        p = self.problem
        prm = params(p, tensors, scalars)
        delta = workspace[: acc_bytes(p) * p.b * p.hq * p.sq].view(acc_numpy(p))
        lq, lkv = _lengths(tensors)
        dargs = (tensors.o, tensors.dout, lq, lkv, delta, prm, self.flags[0])
        self.delta(self.grid_delta, (THREADS,), dargs)
        args = (*tensors.pointers(), prm, *self.main_flags(), delta)
        self.dkdv(self.grid_dkdv, (THREADS,), args, shared_mem=self.smem_dkdv)
        self.dq(self.grid_dq, (THREADS,), args, shared_mem=self.smem_dq)

    def main_flags(self) -> tuple[Any, ...]:
        """The dK/dV and dQ kernels' run-time flags after the parameters: (dtype, mask
        kind) here; the fp64 tensor-core backward's kernels take the mask kind only."""
        return self.flags


class FlashFp32BwdSolver(_Fp32Solver):
    """FlashAttention backward on CUDA cores (module docstring): delta, then dK/dV per key
    tile and dQ (with dmask) per query tile; the workspace holds delta (b * hq * sq
    floats, doubles for fp64)."""

    name = "sdpa_bwd_flash_fp32"
    family = "sdpa_bwd"

    def _tiles(self, problem: AttentionProblem) -> dict[int, tuple[int, int]]:
        return bwd_tiles(problem.dtype)

    def workspace_size(self, problem: AttentionProblem, config: Config) -> int:
        return acc_bytes(problem) * problem.b * problem.hq * problem.sq

    def _smem(self, problem: AttentionProblem) -> int:
        hd = head_tile(problem)
        return max(bwd_smem_bytes(*self._tiles(problem)[hd], hd, acc_bytes(problem)))

    def prepare(self, backend: Backend, problem: AttentionProblem, config: Config) -> Runner:
        return _BwdRunner(backend, problem, self._check(backend, problem, config))
