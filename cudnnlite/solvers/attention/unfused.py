"""Attention with the score matrix materialized (``cuda_src/attention/unfused.cu``).

``sdpa_fwd_unfused`` / ``sdpa_bwd_unfused``: S = scale * q k^T (+ mask) into a workspace
of b * hq * sq * skv floats (doubles for fp64, which computes in double throughout), a
row softmax in place, then P v (forward) or the gradient products (backward). Every
dtype, any head dim, every masking feature; one thread per output element with plain
loops. It is the cross-check of the flash solvers
and the last resort of the dispatcher; its workspace grows with sq * skv, so a workspace
limit keeps it off large problems. Deterministic (no atomics).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ... import dtypes
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

SOURCE = "attention/unfused.cu"
_THREADS = 256
_MAX_BLOCKS = 4096  # grid-stride loops cover the rest
_FWD = ("sdpa_unfused_scores", "sdpa_unfused_pv")
_BWD = ("sdpa_unfused_dv", "sdpa_unfused_ds", "sdpa_unfused_dq", "sdpa_unfused_dk")


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """One module per dtype with every kernel of both directions."""
    names = [f"{n}<{dt.ctype}>" for n in (*_FWD, *_BWD)]
    return ModuleSpec.make(SOURCE, [*names, _softmax_expr(dt)])


def _softmax_expr(dt: dtypes.DType) -> str:
    return f"sdpa_unfused_softmax<{dt.acc_ctype}>"


def _grid(total: int) -> tuple[int]:
    return (max(1, min(_MAX_BLOCKS, -(-total // _THREADS))),)


def _scores_bytes(problem: AttentionProblem) -> int:
    return acc_bytes(problem) * problem.b * problem.hq * problem.sq * problem.skv


class _Kernels:
    def __init__(self, backend: Backend, problem: AttentionProblem, names: tuple[str, ...]) -> None:
        dt = dtype_of(problem)
        spec = module_spec(dt)
        self.k = {n: backend.kernel(spec, f"{n}<{dt.ctype}>") for n in names}
        self.k["softmax"] = backend.kernel(spec, _softmax_expr(dt))
        self.xp = backend.xp
        self.problem = problem
        # launch order: scores, softmax, then the rest
        self.names = [f"{names[0]}_{dt.short}", "sdpa_unfused_softmax"]
        self.names += [f"{n}_{dt.short}" for n in names[1:]]

    def scores(self, t: Any, prm: Any, s: Any) -> None:
        """S, then P in place (and lse)."""
        p = self.problem
        total = p.b * p.hq * p.sq * p.skv
        mask, lq, lkv = t.pointers()[5:]  # stand-ins where the call has none
        kind = np.int32(MASK_KIND[p.mask])
        args = (t.q, t.k, mask, lq, lkv, s, kind, prm)
        self.k["sdpa_unfused_scores"](_grid(total), (_THREADS,), args)
        self.k["softmax"](_grid(32 * p.b * p.hq * p.sq), (_THREADS,), (s, t.lse, prm))


class _FwdRunner(Runner):
    def __init__(self, backend: Backend, problem: AttentionProblem) -> None:
        self.kernels = _Kernels(backend, problem, _FWD)
        self.problem = problem

    @property
    def kernel_names(self) -> list[str]:
        return list(self.kernels.names)

    def __call__(self, tensors: AttentionTensors, scalars: Scalars, workspace: Any) -> None:
        p = self.problem
        prm = params(p, tensors, scalars)
        s = workspace.view(acc_numpy(p))
        self.kernels.scores(tensors, prm, s)
        pv = self.kernels.k["sdpa_unfused_pv"]
        pv(_grid(p.b * p.hq * p.sq * p.dv), (_THREADS,), (s, tensors.v, tensors.o, prm))


class _BwdRunner(Runner):
    def __init__(self, backend: Backend, problem: AttentionProblem) -> None:
        self.kernels = _Kernels(backend, problem, ("sdpa_unfused_scores", *_BWD))
        self.problem = problem

    @property
    def kernel_names(self) -> list[str]:
        return list(self.kernels.names)

    def __call__(self, tensors: AttentionBwdTensors, scalars: Scalars, workspace: Any) -> None:
        p = self.problem
        nbytes = _scores_bytes(p)
        s = workspace[:nbytes].view(acc_numpy(p))
        lse = workspace[nbytes:].view(acc_numpy(p))  # recomputed: the forward's is not needed
        prm = params(p, tensors, scalars)
        k = self.kernels.k
        fwd = AttentionTensors(tensors.q, tensors.k, tensors.v, tensors.o, lse, tensors.mask,
                               tensors.lengths_q, tensors.lengths_kv)  # fmt: skip
        self.kernels.scores(fwd, prm, s)
        k["sdpa_unfused_dv"](_grid(p.b * p.hkv * p.skv * p.dv), (_THREADS,),
                             (s, tensors.dout, tensors.dv, prm))  # fmt: skip
        dmask = tensors.dmask if tensors.dmask is not None else s
        k["sdpa_unfused_ds"](_grid(p.b * p.hq * p.sq * p.skv), (_THREADS,),
                             (s, tensors.v, tensors.o, tensors.dout, dmask,
                              np.int32(tensors.dmask is not None), prm))  # fmt: skip
        dq_args = (s, tensors.k, tensors.dq, prm)
        k["sdpa_unfused_dq"](_grid(p.b * p.hq * p.sq * p.d), (_THREADS,), dq_args)
        dk_args = (s, tensors.q, tensors.dk, prm)
        k["sdpa_unfused_dk"](_grid(p.b * p.hkv * p.skv * p.d), (_THREADS,), dk_args)


class _Unfused(Solver):
    deterministic = True

    def is_applicable(self, problem: AttentionProblem, caps: Capabilities) -> Applicability:
        if problem.empty:
            return not_applicable("needs a non-empty problem (the op answers empty ones)")
        if problem.b * problem.hq * problem.sq * max(problem.skv, problem.d, problem.dv) >= 2**62:
            return not_applicable("needs fewer than 2^62 score elements")
        return APPLICABLE

    def module_specs(self) -> list[ModuleSpec]:
        return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]


class UnfusedFwdSolver(_Unfused):
    """The score matrix in a workspace, then softmax and P v (module docstring)."""

    name = "sdpa_fwd_unfused"
    family = "sdpa_fwd"

    def workspace_size(self, problem: AttentionProblem, config: Config) -> int:
        return _scores_bytes(problem)

    def prepare(self, backend: Backend, problem: AttentionProblem, config: Config) -> Runner:
        return _FwdRunner(backend, problem)


class UnfusedBwdSolver(_Unfused):
    """Recomputes P into a workspace, then dv, dS (in place), dq and dk."""

    name = "sdpa_bwd_unfused"
    family = "sdpa_bwd"

    def workspace_size(self, problem: AttentionProblem, config: Config) -> int:
        return _scores_bytes(problem) + acc_bytes(problem) * problem.b * problem.hq * problem.sq

    def prepare(self, backend: Backend, problem: AttentionProblem, config: Config) -> Runner:
        return _BwdRunner(backend, problem)
