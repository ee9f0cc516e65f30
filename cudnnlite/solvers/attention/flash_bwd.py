"""FlashAttention-2 backward on tensor cores (``cuda_src/attention/flash_bwd.cu``).

``sdpa_bwd_flash_tc`` (:class:`FlashTcBwdSolver`): fp16 (sm_75+) / bf16 (sm_80+), fp32
accumulation, every masking feature. Three launches: delta = rowsum(dout * o) (which also
zeroes an fp32 dQ accumulator), the main kernel (a block per BN keys of one (batch, kv
head): S^T, P^T, dP^T, dS^T recomputed per query tile in MMA registers, dK and dV summed in
registers over the group's query heads, dQ added with fp32 atomics), and dQ's conversion to
its dtype. Not deterministic (the order of the atomics).

``sdpa_bwd_flash_tc_split`` (:class:`FlashTcBwdSplitSolver`): the same main kernel without
the dQ atomics, then a dQ kernel (a block per query tile of one (batch, q head) over the key
tiles, S / P / dP / dS recomputed, dQ in registers). Bitwise reproducible; the second pass
costs about 2 of the 5 GEMMs again.

Head dims: one template bucket D in (32, 64, 128, 256) >= max(d, dv), padding columns
zero-filled; d and dv multiples of 8 (16-byte copies). Config: :class:`FlashBwdConfig`
(query tile, key block, warps = key block / 16 or 2 or 4 times that), one per bucket. D =
256 runs 64 queries x 32 keys with four warps per 16 keys (dK / dV's head dim split four
ways), Q / dO single-buffered (main: 105 KB of shared memory), and a dQ kernel of 64
queries x 32 keys with two warps per 16 queries (132 KB): sm_80 and sm_90; archs with less
shared memory (sm_75, sm_86, sm_89) refuse it. The dmask of an additive
mask is written by the main kernel (it visits each (i, j) once per query head).

Instantiations: the main and dq kernels come in a fast one (no explicit mask, no dropout:
causal / window / lengths tested per element on boundary tiles only) and a general one
(:func:`general_path` picks it for an explicit mask or dropout). Workspace: delta and lse2
(the pre kernel's log2-domain lse) per query row, then for the atomic solver dq_accum with
rows padded to the head-dim bucket.

Module count: one module per head-dim bucket holding both dtypes and all kernels (four
modules for both solvers: the NVRTC check compiles each for three archs).
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
    Scalars,
    data_ptr,
    dtype_of,
    misaligned_rows,
    params,
    same_strides,
)

SOURCE = "attention/flash_bwd.cu"
DTYPES = ("fp16", "bf16")
HEAD_DIMS = (32, 64, 128, 256)
_MAX_GRID_Y = 65535
_PRE_ROWS = 32  # rows per 256-thread block of the delta kernel (8 lanes a row)
_CONVERT_ROWS = 8  # rows per 256-thread block of the dQ conversion (a warp a row)


@dataclass(frozen=True)
class FlashBwdConfig(Config):
    """block_m queries per tile x block_n keys per block; warps = block_n / 16 (a warp owns
    16 keys) or two or four times that (warps share 16 keys and split dK / dV's head dim:
    fewer accumulator registers, P^T and dS^T through shared memory). The split solver's dQ
    kernel turns the tile around: block_n queries per block (block_n / 16 warps), block_m
    keys per tile; for head dim 256 (:meth:`dq_tile`) 2 block_n queries x block_m / 2 keys,
    two warps per 16 queries."""

    block_m: int
    block_n: int
    warps: int

    def __post_init__(self) -> None:
        if self.block_m not in (32, 64, 128):
            raise ValueError(f"block_m must be 32, 64 or 128, got {self.block_m}")
        if self.block_n not in (32, 64, 128) or self.warps not in (
            self.key_warps,
            2 * self.key_warps,
            4 * self.key_warps,
        ):
            raise ValueError(
                f"needs block_n in (32, 64, 128), warps = block_n / 16 times 1, 2 or 4: {self}"
            )
        if self.block_m // (self.warps // self.key_warps) < 16:
            raise ValueError(f"needs >= 16 queries per warp (block_m * key warps / warps): {self}")

    @property
    def key_warps(self) -> int:
        """Warps along the keys (16 keys each); the dQ kernel's warps."""
        return self.block_n // 16

    def label(self) -> str:
        return f"{self.block_m}x{self.block_n}_w{self.warps}"

    def main_smem(self, head: int) -> int:
        """K, V tiles, two stages of Q and dO (one for head dim 256), the dS tile (16-bit),
        lse2 and delta."""
        bm, bn = self.block_m, self.block_n
        p_tile = bn * bm if self.warps > self.key_warps else 0
        stages = 1 if head > 128 else 2
        return (2 * bn * head + 2 * stages * bm * head + bn * bm + p_tile) * 2 + 16 * bm

    def dq_tile(self, head: int) -> tuple[int, int, int]:
        """The dQ kernel's (queries per block, keys per tile, warps): block_n x block_m with
        a warp per 16 queries; head dim 256: 2 block_n x block_m / 2, two warps per 16
        queries (each S / dP for half the keys, dQ for half the columns)."""
        if head > 128:
            return 2 * self.block_n, self.block_m // 2, 2 * self.block_n // 8
        return self.block_n, self.block_m, self.key_warps

    def dq_smem(self, head: int) -> int:
        """Q, dO tiles of the dQ block's rows, two stages of K and V tiles, the dS tile
        (head dim 256)."""
        bq, bk, _ = self.dq_tile(head)
        ds = bq * bk if head > 128 else 0
        return (2 * bq * head + 4 * bk * head + ds) * 2

    def smem_bytes(self, head: int, atomic: bool = False) -> int:
        """Shared memory of the solver's largest kernel (atomic: the main kernel only)."""
        if atomic:
            return self.main_smem(head)
        return max(self.main_smem(head), self.dq_smem(head))


# One config per head-dim bucket, 8 warps per SM on sm_90 without spills: D = 32 a warp per
# 16 keys (174 registers, 2 blocks of 4 warps); D = 64 and 128 two warps per 16 keys (dK
# and dV accumulators halved: 168 and 219 registers, one block of 8 warps).
CONFIGS: dict[int, tuple[FlashBwdConfig, ...]] = {
    32: (FlashBwdConfig(64, 64, 4),),
    64: (FlashBwdConfig(64, 64, 8),),
    128: (FlashBwdConfig(64, 64, 8),),
    # 64 queries x 32 keys, four warps per 16 keys (64 dK / dV accumulators per thread);
    # main 107,520 bytes, dQ 135,168 bytes of shared memory: sm_80 and sm_90.
    256: (FlashBwdConfig(64, 32, 8),),
}


def head_bucket(problem: AttentionProblem) -> int | None:
    return next((d for d in HEAD_DIMS if d >= problem.max_head_dim), None)


def _tparams(ctype: str, head: int, cfg: FlashBwdConfig) -> str:
    return f"{ctype}, {head}, {cfg.block_m}, {cfg.block_n}, {cfg.warps}"


def general_path(problem: AttentionProblem) -> bool:
    """Whether the problem needs the kernels' general instantiation (an explicit mask or
    dropout: per-element mask / dropout / dmask code); causal, window and lengths run on the
    fast one (per-element tests on boundary tiles only)."""
    return problem.mask != "none" or problem.dropout


def _names(dt: dtypes.DType, head: int, cfg: FlashBwdConfig, general: bool) -> dict[str, str]:
    tp = f"{_tparams(dt.ctype, head, cfg)}, {'true' if general else 'false'}"
    return {
        "pre": f"sdpa_flash_bwd_pre<{dt.ctype}>",
        "main": f"sdpa_flash_bwd_main<{tp}>",
        "convert": f"sdpa_flash_bwd_dq_convert<{dt.ctype}>",
        "dq": f"sdpa_flash_bwd_dq<{tp}>",
    }


def module_spec(head: int) -> ModuleSpec:
    """Both dtypes, every config of the bucket, all four kernels, main and dq in their fast
    and general instantiations."""
    names = [
        n
        for dt in dtypes.FLOAT_TYPES
        if dt.short in DTYPES
        for cfg in CONFIGS[head]
        for general in (False, True)
        for n in _names(dt, head, cfg, general).values()
    ]
    return ModuleSpec.make(SOURCE, list(dict.fromkeys(names)))


def _align(n: int) -> int:
    return -(-n // 256) * 256


def _delta_bytes(problem: AttentionProblem) -> int:
    """delta and lse2 (fp32 per query row each)."""
    return 2 * _align(4 * problem.b * problem.hq * problem.sq)


class _Runner(Runner):
    def __init__(self, backend: Backend, problem: AttentionProblem, cfg: FlashBwdConfig,
                 atomic: bool) -> None:  # fmt: skip
        dt = dtype_of(problem)
        head = head_bucket(problem)
        assert head is not None
        spec = module_spec(head)
        general = general_path(problem)
        names = _names(dt, head, cfg, general)
        used = ("pre", "main", "convert") if atomic else ("pre", "main", "dq")
        self.k = {u: backend.kernel(spec, names[u]) for u in used}
        self.problem, self.cfg, self.head, self.atomic = problem, cfg, head, atomic
        self.xp = backend.xp
        tag = f"{cfg.block_m}x{cfg.block_n}_d{head}_w{cfg.warps}{'_general' if general else ''}"
        tag += f"_{dt.short}"
        self.names = [f"sdpa_flash_bwd_pre_{dt.short}", f"sdpa_flash_bwd_main_{tag}"]
        self.names.append(
            f"sdpa_flash_bwd_dq_convert_{dt.short}" if atomic else f"sdpa_flash_bwd_dq_{tag}"
        )

    @property
    def kernel_names(self) -> list[str]:
        return list(self.names)

    def __call__(self, tensors: AttentionBwdTensors, scalars: Scalars, workspace: Any) -> None:
        p, cfg, xp = self.problem, self.cfg, self.xp
        _check_strides(tensors)
        prm = params(p, tensors, scalars)
        rows = p.b * p.hq * p.sq
        nd, half = _delta_bytes(p), _delta_bytes(p) // 2
        delta = workspace[: 4 * rows].view(xp.float32)
        lse2 = workspace[half : half + 4 * rows].view(xp.float32)
        dq_ld = np.int32(self.head)  # dq_accum rows padded to the bucket: no column tests
        dq_acc = (
            workspace[nd : nd + 4 * rows * self.head].view(xp.float32) if self.atomic else delta
        )
        mask = tensors.mask if tensors.mask is not None else tensors.q
        lq = tensors.lengths_q if tensors.lengths_q is not None else tensors.lse
        lkv = tensors.lengths_kv if tensors.lengths_kv is not None else tensors.lse
        dmask = tensors.dmask if tensors.dmask is not None else tensors.lse
        mask_kind = np.int32(MASK_KIND[p.mask])
        pre_args = (tensors.o, tensors.dout, lq, lkv, prm, tensors.lse, delta, lse2, dq_acc,
                    np.int32(self.atomic), dq_ld)  # fmt: skip
        self.k["pre"]((-(-rows // _PRE_ROWS),), (256,), pre_args)
        self.k["main"](
            (-(-p.skv // cfg.block_n), p.b * p.hkv), (32 * cfg.warps,),
            (tensors.q, tensors.k, tensors.v, tensors.dout, lse2, tensors.dk, tensors.dv,
             dmask, mask, lq, lkv, prm, delta, dq_acc, mask_kind, np.int32(self.atomic),
             np.int32(tensors.dmask is not None)),
            shared_mem=cfg.main_smem(self.head),
        )  # fmt: skip
        if self.atomic:
            self.k["convert"]((-(-rows // _CONVERT_ROWS),), (256,),
                              (dq_acc, tensors.dq, lq, lkv, prm, dq_ld))  # fmt: skip
        else:
            bq, _, dq_warps = cfg.dq_tile(self.head)
            self.k["dq"](
                (-(-p.sq // bq), p.b * p.hq), (32 * dq_warps,),
                (tensors.q, tensors.k, tensors.v, tensors.dout, lse2, tensors.dq, mask,
                 lq, lkv, prm, delta, mask_kind),
                shared_mem=cfg.dq_smem(self.head),
            )  # fmt: skip


def _check_strides(t: AttentionBwdTensors) -> None:
    """16-byte rows: every row stride a multiple of 8 elements; the gradients and dout laid
    out like q, k, v and o (the kernels read one set of strides); lse and dmask contiguous."""
    for name, like in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "o"), ("dout", "o"),
                       ("dq", "q"), ("dk", "k"), ("dv", "v")):  # fmt: skip
        a, b = getattr(t, name), getattr(t, like)
        if not same_strides(a, b):
            raise NotSupportedError(f"sdpa_bwd_flash_tc: {name} must have the strides of {like}")
        if data_ptr(a) % 16 or misaligned_rows(a):
            raise NotSupportedError(f"sdpa_bwd_flash_tc: {name} needs 16-byte aligned rows "
                                    "(pointer and strides in multiples of 8 elements)")  # fmt: skip
    for name in ("lse", "dmask"):
        a = getattr(t, name)
        if a is not None and not a.flags.c_contiguous:
            raise NotSupportedError(f"sdpa_bwd_flash_tc: {name} must be C-contiguous")
    m = t.mask
    if m is not None and max(abs(s) for s in m.strides[-2:]) >= 2**23 * m.itemsize:
        raise NotSupportedError(
            f"sdpa_bwd_flash_tc: attn_mask's query and key strides "
            f"({m.strides[-2] // m.itemsize}, {m.strides[-1] // m.itemsize} elements) must be "
            "below 2^23 (32-bit offsets in a tile)"
        )


class _FlashTcBwd(Solver):
    family = "sdpa_bwd"
    config_type = FlashBwdConfig
    atomic = True

    def is_applicable(self, problem: AttentionProblem, caps: Capabilities) -> Applicability:
        if problem.dtype not in DTYPES:
            return not_applicable(f"needs fp16 or bf16 (tensor cores), got {problem.dtype}")
        if problem.sq * problem.skv == 0:
            return not_applicable("needs sq and skv >= 1 (the op answers empty problems)")
        if problem.d % 8 or problem.dv % 8:
            return not_applicable(
                f"needs head dims that are multiples of 8, got d={problem.d}, dv={problem.dv}"
            )
        if head_bucket(problem) is None:
            return not_applicable(f"needs head dims <= {HEAD_DIMS[-1]}, got "
                                  f"d={problem.d}, dv={problem.dv}")  # fmt: skip
        if not caps.mma_sync:
            return not_applicable(f"needs mma.sync and ldmatrix (sm_75+), device is {caps.arch}")
        if problem.dtype == "bf16" and not caps.bf16_tensor_cores:
            return not_applicable(f"bf16 needs sm_80+, device is {caps.arch}")
        if problem.b * problem.hq > _MAX_GRID_Y:
            return not_applicable(f"needs b * hq <= {_MAX_GRID_Y} (the grid's y)")
        if not self.configs(problem, caps):
            head = head_bucket(problem)
            need = min(c.smem_bytes(head, self.atomic) for c in CONFIGS[head])
            return not_applicable(f"needs {need} bytes of shared memory per block, device "
                                  f"{caps.arch} has {caps.max_shared_bytes}")  # fmt: skip
        return APPLICABLE

    def configs(self, problem: AttentionProblem, caps: Capabilities) -> list[FlashBwdConfig]:
        head = head_bucket(problem)
        if head is None:
            return []
        return [
            c for c in CONFIGS[head] if c.smem_bytes(head, self.atomic) <= caps.max_shared_bytes
        ]

    def default_config(self, problem: AttentionProblem, caps: Capabilities) -> FlashBwdConfig:
        options = self.configs(problem, caps)
        if not options:
            raise NotSupportedError(f"{self.name}: no config fits {problem.key()} on {caps.arch}")
        return options[0]

    def workspace_size(self, problem: AttentionProblem, config: Config) -> int:
        size = _delta_bytes(problem)
        if self.atomic:
            size += 4 * problem.b * problem.hq * problem.sq * head_bucket(problem)
        return size

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(head) for head in HEAD_DIMS]

    def prepare(self, backend: Backend, problem: AttentionProblem, config: Config) -> Runner:
        from ...runtime.caps import capabilities

        ok = self.is_applicable(problem, capabilities(backend))
        if not ok:
            raise NotSupportedError(f"{self.name}: {ok.reason}")
        if not isinstance(config, FlashBwdConfig):
            raise NotSupportedError(f"{self.name}: expected a FlashBwdConfig, got {config!r}")
        return _Runner(backend, problem, config, self.atomic)


class FlashTcBwdSolver(_FlashTcBwd):
    """FlashAttention-2 backward, dQ by fp32 atomics (module docstring)."""

    name = "sdpa_bwd_flash_tc"
    deterministic = False
    atomic = True


class FlashTcBwdSplitSolver(_FlashTcBwd):
    """FlashAttention-2 backward, dQ by a second kernel: bitwise reproducible."""

    name = "sdpa_bwd_flash_tc_split"
    deterministic = True
    atomic = False
