"""The persistent RNN forward algorithm (cuDNN's CUDNN_RNN_ALGO_PERSIST_STATIC idea).

At small batches one step of a recurrent layer is too little work to fill a GPU: the
standard algorithm's per-step GEMM and cell launches are dominated by launch latency and by
re-reading W_hh from memory every step. Here the input projection of every step is still
one GEMM per layer (the standard solver's), but the time loop is ONE cooperative launch per
layer for both directions (``cuda_src/rnn/rnn_persistent.cu``): each block keeps its slice
of W_hh (all gates of ``units`` hidden units) in shared memory for every step, computes its
part of ``h W_hh^T`` and the cell, and the blocks meet at a grid barrier between steps.

Config: :class:`PersistentConfig` (``units`` hidden units per block); ``default_config``
takes the smallest slice whose grid (directions x ceil(H / units) blocks) is co-resident
with one block per SM, the most parallel choice.

Limits (``is_applicable``): no projections; batch <= ``MAX_BATCH``; the W slice plus the
staged h and pre-activations must fit the arch's shared memory; the grid must fit one block
per SM. The runner re-checks the grid against ``backend.max_cooperative_blocks``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ... import dtypes
from ...errors import NotSupportedError
from ...problems.rnn import MODE_ID, MODES, RnnProblem
from ...runtime.backend import Backend
from ...runtime.caps import Capabilities
from ...runtime.kernel import ModuleSpec
from ..base import APPLICABLE, Applicability, Config, Runner, Solver, not_applicable
from .common import LayerSaves, RnnTensors, acc_dtype, dtype_of
from .standard import ForwardRunner, _stand_in

SOURCE = "rnn/rnn_persistent.cu"
THREADS = 256  # rnn_persist::kThreads
# Every block loops over all B rows each step while the grid stays at <= one block per SM,
# so a step's time grows linearly with B; by B = 64 one step's GEMM fills an H200 and the
# standard algorithm wins (the heuristics already stop ranking this first past B = 32).
MAX_BATCH = 64
MAX_UNITS = 1024

PARAMS_DTYPE = np.dtype(
    [(f, "<i4") for f in ("b", "h", "hout", "gh", "steps", "units", "blocks_per_dir",
                          "has_len", "training")]
    + [("y_ld", "<i8")],
    align=True,
)  # fmt: skip


def _align16(n: int) -> int:
    return (n + 15) // 16 * 16


def smem_bytes(problem: RnnProblem, units: int) -> int:
    """Dynamic shared memory of one block (the kernel's file comment): the W_hh slice and
    the staged h in the data type, the pre-activations in the accumulation type (fp32, or
    8 bytes each for float64)."""
    p, size = problem, dtype_of(problem).itemsize
    w = _align16(p.gates * units * p.hout * size)
    h = _align16(p.b * p.hout * size)
    return w + h + acc_dtype(p).itemsize * p.b * p.gates * units


def blocks_per_dir(problem: RnnProblem, units: int) -> int:
    return -(-problem.h // units)


@dataclass(frozen=True)
class PersistentConfig(Config):
    units: int  # hidden units per block (all G gates of each)

    def __post_init__(self) -> None:
        if isinstance(self.units, bool) or not isinstance(self.units, int):
            raise ValueError(f"units must be an int: {self}")
        if not 1 <= self.units <= MAX_UNITS:
            raise ValueError(f"units must be in 1..{MAX_UNITS}: {self}")


def _balanced(h: int, units: int) -> int:
    """The smallest slice giving the same number of blocks (evens out the last block)."""
    return -(-h // -(-h // units))


def _grid_fits(problem: RnnProblem, units: int, caps: Capabilities) -> bool:
    return problem.dirs * blocks_per_dir(problem, units) <= caps.sm_count


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """One module per dtype with the four modes' kernels."""
    return ModuleSpec.make(SOURCE, [f"rnn_persistent_fwd<{dt.ctype}, {MODE_ID[m]}>" for m in MODES])


class PersistentRunner(ForwardRunner):
    """The standard layer loop (input GEMM, states, saves) with one cooperative launch per
    layer as its time loop."""

    def __init__(self, backend: Backend, problem: RnnProblem, config: PersistentConfig) -> None:
        # Not ForwardRunner.__init__: the per-step cell kernels are never launched here.
        self.backend = backend
        self.problem = problem
        p, units = problem, config.units
        dt = dtype_of(p)
        self.kernel = backend.kernel(module_spec(dt), f"rnn_persistent_fwd<{dt.ctype}, "
                                                      f"{MODE_ID[p.mode]}>")  # fmt: skip
        self.units = units
        self.blocks_per_dir = blocks_per_dir(p, units)
        self.blocks = p.dirs * self.blocks_per_dir
        self.smem = smem_bytes(p, units)
        limit = self.kernel.max_cooperative_blocks(THREADS, self.smem)
        if self.blocks > limit:
            raise NotSupportedError(
                f"rnn_fwd_persistent: {self.blocks} blocks ({p.dirs} direction(s) x "
                f"{self.blocks_per_dir} of {units} units for hidden size {p.h}, {THREADS} "
                f"threads, {self.smem} B shared memory each) cannot be co-resident on "
                f"{backend.device_key()}: at most {limit} (use more units per block or "
                "the standard algorithm)"
            )
        self.name = (f"rnn_persistent_fwd_{p.mode}_u{units}_{self.blocks_per_dir}x{p.dirs}"
                     f"_{p.dtype}")  # fmt: skip

    @property
    def kernel_names(self) -> list[str]:
        return ["gemm_x_w_ih", self.name]

    def params(self, training: bool, has_len: bool) -> np.void:
        p = self.problem
        prm = np.zeros((), PARAMS_DTYPE)
        prm["b"], prm["h"], prm["hout"], prm["gh"] = p.b, p.h, p.hout, p.gates * p.h
        prm["steps"], prm["units"], prm["blocks_per_dir"] = p.t, self.units, self.blocks_per_dir
        prm["has_len"], prm["training"] = int(has_len), int(training)
        prm["y_ld"] = p.dirs * p.hout
        return prm[()]

    def recurrence(self, tensors: RnnTensors, layer: int, gx: Any, hstate: Any, cstate: Any,
                   y: Any, saves: LayerSaves | None) -> None:  # fmt: skip
        xp = self.backend.xp
        w = tensors.weights[layer]
        # The kernel's second h buffer; step 0 reads buffer T & 1, so both start as h0.
        scratch = hstate.copy()
        counter = xp.zeros(1, np.uint32)
        s = saves
        sg = s.gates if s else gx  # stand-ins where nothing is saved
        sc = s.c if s and s.c is not None else sg
        sh = s.h if s else hstate
        sghn = s.ghn if s and s.ghn is not None else sg
        lens = _stand_in(tensors.lengths, gx)
        prm = self.params(s is not None, tensors.lengths is not None)
        args = (gx, w.w_hh, w.b_ih, w.b_hh, lens, hstate, scratch, cstate, y, sg, sc, sh, sghn,
                counter, prm)  # fmt: skip
        self.kernel((self.blocks,), (THREADS,), args, shared_mem=self.smem, cooperative=True)


class PersistentFwdSolver(Solver):
    """One cooperative launch per layer with W_hh on chip (module docstring)."""

    name = "rnn_fwd_persistent"
    family = "rnn_fwd"
    config_type = PersistentConfig
    deterministic = True  # a fixed reduction order, no atomics on data

    def is_applicable(self, problem: RnnProblem, caps: Capabilities) -> Applicability:
        p = problem
        if p.empty:
            return not_applicable("needs a non-empty problem (the op answers empty ones)")
        if p.p:
            return not_applicable("needs proj_size 0 (projections run on the standard "
                                  "algorithm)")  # fmt: skip
        if p.b > MAX_BATCH:
            return not_applicable(f"needs batch <= {MAX_BATCH} (larger batches fill the GPU "
                                  "per step: the standard algorithm)")  # fmt: skip
        if caps.sm_count < p.dirs:
            return not_applicable(f"needs at least {p.dirs} co-resident blocks ({caps.arch} "
                                  f"has {caps.sm_count} SMs)")  # fmt: skip
        units = self.default_config(p, caps).units
        need = smem_bytes(p, units)
        if need > caps.max_shared_bytes:
            return not_applicable(
                f"needs {need} B of shared memory per block for hidden size {p.h} (W_hh slice "
                f"of {units} units x {p.gates} gates, batch {p.b}) with at most "
                f"{caps.sm_count} blocks ({caps.arch}: {caps.max_shared_bytes} B per block)"
            )
        return APPLICABLE

    def default_config(self, problem: RnnProblem, caps: Capabilities) -> PersistentConfig:
        per_dir = max(1, caps.sm_count // problem.dirs)
        units = -(-problem.h // per_dir)
        return PersistentConfig(min(MAX_UNITS, _balanced(problem.h, units)))

    def configs(self, problem: RnnProblem, caps: Capabilities) -> list[PersistentConfig]:
        """The most parallel slice, and 2x / 4x larger ones (fewer blocks, fewer barrier
        participants, more work per block), those that fit."""
        base = self.default_config(problem, caps).units
        out: list[PersistentConfig] = []
        for scale in (1, 2, 4):
            units = min(MAX_UNITS, _balanced(problem.h, min(problem.h, base * scale)))
            cfg = PersistentConfig(units)
            if cfg not in out and self.is_valid(cfg, problem, caps):
                out.append(cfg)
        return out

    def is_valid(self, config: Config, problem: RnnProblem, caps: Capabilities) -> bool:
        """Any slice whose grid and shared memory fit (not only the listed ones)."""
        return (
            isinstance(config, PersistentConfig)
            and config.units <= max(problem.h, 1)
            and _grid_fits(problem, config.units, caps)
            and smem_bytes(problem, config.units) <= caps.max_shared_bytes
        )

    def workspace_size(self, problem: RnnProblem, config: Config) -> int:
        p = problem
        gx = acc_dtype(p).itemsize * p.dirs * p.t * p.b * p.gates * p.h
        scratch = p.dirs * p.b * p.hout * dtype_of(p).itemsize
        return gx + scratch + 4  # gx, the second h buffer, the barrier counter

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]

    def prepare(self, backend: Backend, problem: RnnProblem, config: Config) -> Runner:
        assert isinstance(config, PersistentConfig)
        return PersistentRunner(backend, problem, config)
