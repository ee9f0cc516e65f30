"""Helpers for attention tests: random operands, running one solver directly (no
dispatcher), and the comparison with the float64 reference at a tolerance derived from
the problem.

Forward tolerance, per output element (row i, column c):
    |o - ref| <= out_eps * |ref| + (p_eps + 2^-16) * (P |v|)[i, c] + 1e-6
  - out_eps: one rounding of the output's storage type (2^-11 fp16, 2^-8 bf16, 0 fp32);
  - p_eps: the relative error of each probability as the PV product consumes it: the
    tensor-core kernels round P to the storage type before the MMA (2^-11 fp16, 2^-8
    bf16); fp32 kernels keep it in fp32 (2^-22: exp2's approximation);
  - 2^-16 covers the scores' fp32 accumulation over d <= 256 products (d * 2^-24 * |q||k|
    with |q||k| a few units for standard-normal operands scaled by 1/sqrt(d)) and the
    online rescaling (one exp2 and one fp32 product per key tile);
  - P |v| (the reference's probabilities times |v|) is the magnitude of the sum.
The reference runs on the inputs as stored (fp16/bf16 values widened exactly).

float64 problems have their own bound (``assert_fp64_close``, derived there): operands are
genuine doubles (not float32 values widened), and lse / dmask are float64.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cudnnlite import dtypes
from cudnnlite.problems.attention import AttentionProblem
from cudnnlite.reference.attention import sdpa_backward, sdpa_forward
from cudnnlite.runtime.caps import capabilities
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.solvers.attention.common import (
    AttentionBwdTensors,
    AttentionTensors,
    Scalars,
    acc_numpy,
)
from cudnnlite.solvers.base import Config, Solver
from cudnnlite.testing import to_backend, to_numpy

NUMPY_DTYPE = {d.short: d.numpy for d in dtypes.FLOAT_TYPES}
OUT_EPS = {"fp32": 0.0, "fp16": 2.0**-11, "bf16": 2.0**-8}


def operands(problem: AttentionProblem, seed: int = 0, mask_shape: tuple[int, ...] | None = None,
             lengths: tuple[list[int], list[int]] | None = None) -> dict:  # fmt: skip
    """Random q, k, v (and dout, a mask of ``mask_shape`` of the problem's kind, lengths)
    as NumPy arrays in the problem's dtype and layout."""
    rng = np.random.default_rng(seed)
    if problem.dtype not in NUMPY_DTYPE:  # bf16 without ml_dtypes (the GPU box may lack it)
        pytest.skip(f"{problem.dtype} arrays need ml_dtypes, which is not installed")
    dt = NUMPY_DTYPE[problem.dtype]

    def rand(shape: tuple[int, ...]) -> np.ndarray:
        x = rng.standard_normal(shape)
        return x if dt == np.float64 else x.astype(np.float32).astype(dt)

    ops = {
        "q": rand(problem.q_shape()),
        "k": rand(problem.k_shape()),
        "v": rand(problem.v_shape()),
        "dout": rand(problem.o_shape()),
    }
    if problem.mask != "none":
        shape = mask_shape or (problem.b, problem.hq, problem.sq, problem.skv)
        if problem.mask == "bool":
            ops["mask"] = rng.random(shape) > 0.3
        else:
            ops["mask"] = rand(shape)
    if problem.varlen:
        lq, lkv = lengths or ([problem.sq] * problem.b, [problem.skv] * problem.b)
        ops["lengths_q"] = np.asarray(lq, dtype=np.int32)
        ops["lengths_kv"] = np.asarray(lkv, dtype=np.int32)
    return ops


def _ref_kwargs(problem: AttentionProblem, ops: dict, scalars: Scalars) -> dict:
    return dict(
        attn_mask=ops.get("mask"),
        dropout_p=scalars.dropout_p if problem.dropout else 0.0,
        is_causal=problem.causal,
        scale=scalars.scale,
        layout=problem.layout,
        causal_align=problem.align,
        window=problem.window,
        seed=scalars.seed,
        offset=scalars.offset,
        lengths_q=ops.get("lengths_q"),
        lengths_kv=ops.get("lengths_kv"),
        exact_dropout_scale=problem.dtype == "fp64",
    )


def default_scalars(problem: AttentionProblem, dropout_p: float = 0.0, seed: int = 7) -> Scalars:
    return Scalars(scale=1.0 / np.sqrt(problem.d), dropout_p=dropout_p, seed=seed, offset=3)


def _mask_4d(mask: np.ndarray | None, backend: str) -> Any:
    """The mask as the kernels take it: 4-D, broadcast (strides 0), bool as uint8."""
    if mask is None:
        return None
    m = mask.astype(np.uint8) if mask.dtype == np.bool_ else mask
    m = to_backend(m.reshape((1,) * (4 - m.ndim) + m.shape), backend)
    return m


def _prepare(backend: str, solver: Solver, problem: AttentionProblem, config: Config | None):
    b = backend_by_name(backend)
    caps = capabilities(b)
    config = config or solver.default_config(problem, caps)
    runner = solver.prepare(b, problem, config)
    size = solver.workspace_size(problem, config)
    workspace = b.xp.empty(max(size, 1), dtype=np.uint8) if size else None
    return b, runner, workspace


def run_forward(
    backend: str,
    solver: Solver,
    problem: AttentionProblem,
    ops: dict,
    scalars: Scalars,
    config: Config | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """Runs a forward solver; returns (o, lse) as NumPy."""
    b, runner, workspace = _prepare(backend, solver, problem, config)
    xp = b.xp
    dt = NUMPY_DTYPE[problem.dtype]
    mask = _mask_4d(ops.get("mask"), backend)
    t = AttentionTensors(
        q=to_backend(ops["q"], backend), k=to_backend(ops["k"], backend),
        v=to_backend(ops["v"], backend),
        o=xp.full(problem.o_shape(), np.nan, dtype=dt),  # NaN: unwritten outputs show
        lse=xp.full(problem.lse_shape(), np.nan, dtype=acc_numpy(problem)),
        mask=None if mask is None else xp.broadcast_to(
            mask, (problem.b, problem.hq, problem.sq, problem.skv)),
        lengths_q=to_backend(ops["lengths_q"], backend) if "lengths_q" in ops else None,
        lengths_kv=to_backend(ops["lengths_kv"], backend) if "lengths_kv" in ops else None,
    )  # fmt: skip
    runner(t, scalars, workspace)
    return to_numpy(t.o), to_numpy(t.lse)


def run_backward(backend: str, solver: Solver, problem: AttentionProblem, ops: dict,
                 scalars: Scalars, o: np.ndarray, lse: np.ndarray,
                 config: Config | None = None) -> dict[str, np.ndarray]:  # fmt: skip
    """Runs a backward solver on the forward's (o, lse); returns dq, dk, dv (and dmask for
    an additive mask) as NumPy."""
    b, runner, workspace = _prepare(backend, solver, problem, config)
    xp = b.xp
    dt = NUMPY_DTYPE[problem.dtype]
    mask = _mask_4d(ops.get("mask"), backend)
    full = (problem.b, problem.hq, problem.sq, problem.skv)
    t = AttentionBwdTensors(
        q=to_backend(ops["q"], backend), k=to_backend(ops["k"], backend),
        v=to_backend(ops["v"], backend), o=to_backend(np.ascontiguousarray(o), backend),
        dout=to_backend(ops["dout"], backend),
        lse=to_backend(np.ascontiguousarray(lse), backend),
        dq=xp.full(problem.q_shape(), np.nan, dtype=dt),
        dk=xp.full(problem.k_shape(), np.nan, dtype=dt),
        dv=xp.full(problem.v_shape(), np.nan, dtype=dt),
        dmask=xp.full(full, np.nan, dtype=acc_numpy(problem)) if problem.mask == "additive"
        else None,
        mask=None if mask is None else xp.broadcast_to(mask, full),
        lengths_q=to_backend(ops["lengths_q"], backend) if "lengths_q" in ops else None,
        lengths_kv=to_backend(ops["lengths_kv"], backend) if "lengths_kv" in ops else None,
    )  # fmt: skip
    runner(t, scalars, workspace)
    out = {"dq": to_numpy(t.dq), "dk": to_numpy(t.dk), "dv": to_numpy(t.dv)}
    if t.dmask is not None:
        out["dmask"] = to_numpy(t.dmask)
    return out


def reference_forward(problem: AttentionProblem, ops: dict, scalars: Scalars):
    return sdpa_forward(ops["q"], ops["k"], ops["v"], **_ref_kwargs(problem, ops, scalars))


def reference_backward(problem: AttentionProblem, ops: dict, scalars: Scalars):
    return sdpa_backward(ops["dout"], ops["q"], ops["k"], ops["v"],
                         **_ref_kwargs(problem, ops, scalars))  # fmt: skip


def _assert_within(got: np.ndarray, ref: np.ndarray, bound: np.ndarray, what: str) -> None:
    err = np.abs(got.astype(np.float64) - ref)
    bad = ~(err <= bound)  # NaN counts as bad
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} off; first at {i}: got "
                             f"{got[i]}, ref {ref[i]}, bound {bound[i]:.3g}")  # fmt: skip


def assert_forward_close(
    o: np.ndarray,
    lse: np.ndarray,
    problem: AttentionProblem,
    ops: dict,
    scalars: Scalars,
    *,
    tensor_cores: bool,
    what: str = "",
) -> None:
    """o and lse against the reference (module docstring for the bound)."""
    ref_o, ref_lse = reference_forward(problem, ops, scalars)
    abs_v = dict(ops, v=np.abs(ops["v"].astype(np.float64)))
    mag, _ = reference_forward(problem, abs_v, scalars)
    p_eps = OUT_EPS[problem.dtype] if tensor_cores and problem.dtype != "fp32" else 2.0**-22
    bound = OUT_EPS[problem.dtype] * np.abs(ref_o) + (p_eps + 2.0**-16) * mag + 1e-6
    _assert_within(o, ref_o, bound, f"{what} {problem.key()} out")
    # lse: fp32, from fp32 scores (the 2^-16 relative of the scores' accumulation).
    finite = np.isfinite(ref_lse)
    assert np.array_equal(np.isneginf(lse), np.isneginf(ref_lse)), f"{what}: lse -inf rows"
    lse_bound = 2.0**-16 * (1.0 + np.abs(np.where(finite, ref_lse, 0.0)))
    _assert_within(np.where(finite, lse, 0.0), np.where(finite, ref_lse, 0.0), lse_bound,
                   f"{what} {problem.key()} lse")  # fmt: skip
