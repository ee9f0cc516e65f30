"""Flash-decoding: a few query rows against a long KV cache
(``cuda_src/attention/flash_decode.cu``).

``sdpa_fwd_flash_decode`` (:class:`FlashDecodeSolver`), for sq <= 16: the KV sequence is
split across blocks (grid: splits x b * hkv x row blocks) so that small batches still fill
the GPU; each split writes a partial (o, lse) to an fp32 workspace, and a combine kernel
merges the splits with the logsumexp trick into o (the storage dtype) and lse. A block
serves the (query head, row) pairs of a whole GQA group of one kv head, so each K/V byte
of its split is read once (decoding is memory-bound). fp32 math (FFMA) for fp32 / fp16 /
bf16, double math for fp64 (workspace, merge and lse in double; its own module and
smaller key tiles), any head dims up to 256 (vector loads when aligned), every masking feature (the
CUDA-core forward's building blocks, ``flash_fp32_tile.cuh``).

Config: :class:`DecodeConfig` (block_n keys per tile, splits); ``default_config`` picks
the splits so that splits * b * hkv * row blocks fills about two waves of the SMs.
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
from .common import MASK_KIND, AttentionTensors, Scalars, acc_bytes, acc_numpy, params
from .flash_fp32 import DTYPE_CODE, HEAD_TILES, MAX_HEAD_DIM, THREADS, acc_ctype, head_tile

SOURCE = "attention/flash_decode.cu"
MAX_SQ = 16
BLOCK_M = 16  # (query head, row) pairs per block
BLOCK_N = {64: 64, 128: 64, 256: 32}  # keys per tile, per head tile
BLOCK_N64 = {64: 32, 128: 32, 256: 16}  # fp64: half (double registers and shared memory)
MAX_SPLITS = 128
_MAX_GRID_YZ = 65535


def block_n(problem: AttentionProblem) -> int:
    return (BLOCK_N64 if problem.dtype == "fp64" else BLOCK_N)[head_tile(problem)]


def _split_expr(bn: int, hd: int, acc: str = "float") -> str:
    tail = ", double" if acc == "double" else ""  # A = float is the default
    return f"flash_decode_split<{BLOCK_M}, {bn}, {hd}{tail}>"


def _combine_expr(acc: str) -> str:
    return f"flash_decode_combine<{acc}>"


def module_spec(problem_dtype: str = "fp32") -> ModuleSpec:
    """The module of a dtype: one for fp32 / fp16 / bf16 (the storage dtype is a run-time
    argument), one for fp64 (A = double); every head tile."""
    acc = acc_ctype(problem_dtype)
    tiles = BLOCK_N64 if problem_dtype == "fp64" else BLOCK_N
    names = [_split_expr(tiles[hd], hd, acc) for hd in HEAD_TILES]
    return ModuleSpec.make(SOURCE, [*names, _combine_expr(acc)])


def smem_bytes(bn: int, hd: int, elem: int = 4) -> int:
    """Shared memory bytes of the split kernel with ``elem``-byte elements (8: fp64)."""
    ld = hd + 4
    return elem * (BLOCK_M * ld + 2 * bn * ld + BLOCK_M * (bn + 4))


@dataclass(frozen=True)
class DecodeConfig(Config):
    block_n: int
    splits: int

    def __post_init__(self) -> None:
        allowed = sorted({*BLOCK_N.values(), *BLOCK_N64.values()})
        if self.block_n not in allowed:
            raise ValueError(f"block_n must be one of {allowed}: {self}")
        if not 1 <= self.splits <= MAX_SPLITS:
            raise ValueError(f"splits must be in 1..{MAX_SPLITS}: {self}")


def _row_blocks(problem: AttentionProblem) -> int:
    return -(-problem.group * problem.sq // BLOCK_M)


def _tiles(problem: AttentionProblem, bn: int) -> int:
    return max(1, -(-problem.skv // bn))


class _Runner(Runner):
    def __init__(self, backend: Backend, problem: AttentionProblem, cfg: DecodeConfig) -> None:
        hd = head_tile(problem)
        acc = acc_ctype(problem.dtype)
        spec = module_spec(problem.dtype)
        self.split = backend.kernel(spec, _split_expr(cfg.block_n, hd, acc))
        self.combine = backend.kernel(spec, _combine_expr(acc))
        p = problem
        self.grid = (cfg.splits, p.b * p.hkv, _row_blocks(p))
        self.rows = p.b * p.hq * p.sq
        self.grid_combine = (-(-self.rows // (THREADS // 32)),)
        self.smem = smem_bytes(cfg.block_n, hd, acc_bytes(problem))
        self.splits = cfg.splits
        self.problem = problem
        self.dtype = np.int32(DTYPE_CODE[p.dtype])
        self.kind = np.int32(MASK_KIND[p.mask])
        self.names = [
            f"flash_decode_split_{BLOCK_M}x{cfg.block_n}_hd{hd}_s{cfg.splits}_{p.dtype}",
            f"flash_decode_combine_{p.dtype}",
        ]

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)

    def __call__(self, tensors: AttentionTensors, scalars: Scalars, workspace: Any) -> None:
        p = self.problem
        prm = params(p, tensors, scalars)
        e, acc = acc_bytes(p), acc_numpy(p)
        n_o = e * self.splits * self.rows * p.dv
        o_part = workspace[:n_o].view(acc)
        lse_part = workspace[n_o : n_o + e * self.splits * self.rows].view(acc)
        args = (*tensors.pointers(), prm, self.dtype, self.kind, o_part, lse_part)
        self.split(self.grid, (THREADS,), args, shared_mem=self.smem)
        cargs = (tensors.o, tensors.lse, o_part, lse_part, prm, self.dtype, np.int32(self.splits))
        self.combine(self.grid_combine, (THREADS,), cargs)


class FlashDecodeSolver(Solver):
    """Split-KV flash-decoding (module docstring)."""

    name = "sdpa_fwd_flash_decode"
    family = "sdpa_fwd"
    config_type = DecodeConfig
    deterministic = True

    def is_applicable(self, problem: AttentionProblem, caps: Capabilities) -> Applicability:
        p = problem
        if p.sq * p.skv == 0:
            return not_applicable("needs sq and skv >= 1 (the op answers empty problems)")
        if p.sq > MAX_SQ:
            return not_applicable(
                f"needs sq <= {MAX_SQ} (decoding: a few queries against a long KV cache; "
                "the flash solvers serve longer queries)"
            )
        if p.max_head_dim > MAX_HEAD_DIM:
            return not_applicable(f"needs head dims d, dv <= {MAX_HEAD_DIM}")
        if p.b * p.hkv > _MAX_GRID_YZ or _row_blocks(p) > _MAX_GRID_YZ:
            return not_applicable(f"needs b * hkv and hq * sq / {BLOCK_M} <= {_MAX_GRID_YZ}")
        if p.skv >= 2**30:
            return not_applicable("needs skv below 2^30")
        smem = smem_bytes(block_n(p), head_tile(p), acc_bytes(p))
        if smem > caps.max_shared_bytes:
            return not_applicable(f"needs {smem} bytes of shared memory for head dim "
                                  f"{p.max_head_dim} ({caps.arch})")  # fmt: skip
        return APPLICABLE

    def configs(self, problem: AttentionProblem, caps: Capabilities) -> list[DecodeConfig]:
        best = self.default_config(problem, caps)
        splits = {best.splits, max(1, best.splits // 2), min(MAX_SPLITS, best.splits * 2)}
        return [best] + [DecodeConfig(best.block_n, s) for s in sorted(splits - {best.splits})]

    def default_config(self, problem: AttentionProblem, caps: Capabilities) -> DecodeConfig:
        """Splits so that the grid fills about two waves of the SMs, at least one key
        tile per split."""
        bn = block_n(problem)
        blocks = problem.b * problem.hkv * _row_blocks(problem)
        want = -(-2 * caps.sm_count // blocks)
        return DecodeConfig(bn, max(1, min(want, _tiles(problem, bn), MAX_SPLITS)))

    def is_valid(self, config: Config, problem: AttentionProblem, caps: Capabilities) -> bool:
        return (
            isinstance(config, DecodeConfig)
            and config.block_n == block_n(problem)
            and bool(self.is_applicable(problem, caps))
        )

    def workspace_size(self, problem: AttentionProblem, config: Config) -> int:
        assert isinstance(config, DecodeConfig)
        rows = problem.b * problem.hq * problem.sq
        return acc_bytes(problem) * config.splits * rows * (problem.dv + 1)

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec("fp32"), module_spec(dtypes.FLOAT64.short)]

    def prepare(self, backend: Backend, problem: AttentionProblem, config: Config) -> Runner:
        from ...runtime.caps import capabilities

        ok = self.is_applicable(problem, capabilities(backend))
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        if not isinstance(config, DecodeConfig) or config.block_n != block_n(problem):
            raise NotSupportedError(f"{self.name}: not a config of this problem: {config!r}")
        return _Runner(backend, problem, config)
