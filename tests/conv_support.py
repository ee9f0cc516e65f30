"""Helpers for convolution tests: random operands, running one solver directly, and
the comparison with the float64 reference at a tolerance derived from the problem.

Tolerance: |y - ref| <= out_rtol * |ref| + acc_factor * K * 2^-24 * conv(|x|, |w|)
  - out_rtol: one rounding of the output's storage type (2^-11 fp16, 2^-8 bf16; fp32: 0,
    its rounding is inside the accumulation term);
  - the second term bounds fp32 accumulation of K = C/g * R * S products, each rounding
    at most 2^-24 relative to the running sum of magnitudes; acc_factor gives the
    algorithm's own growth (1-2 for direct/GEMM orders, more for Winograd's transforms).
The reference runs on the inputs as stored (fp16/bf16 values widened exactly).
float64: ACCUMULATION_EPS["fp64"] = 2 * 2^-53 per term in place of 2^-24 (both our
double sum and the reference's round); out_rtol ELEMENTWISE_RTOL["fp64"] (16 ulps: the
activation's libm error and the epilogue's roundings); a 1e-13 floor for the epilogue's
terms where alpha * conv + alpha2 * z + bias cancels (|z|, |bias| ~ 1 here: a few
2^-53 each). Its operands carry bits below float32's mantissa, so a float32 path would
be off by ~1e-7 and fail.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cudnnlite import dtypes
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.reference.conv import conv_bias_act_forward, conv_forward
from cudnnlite.runtime.caps import capabilities
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.solvers.base import Config, Solver
from cudnnlite.solvers.conv.common import ConvTensors, Epilogue
from cudnnlite.testing import ACCUMULATION_EPS, ELEMENTWISE_RTOL, to_backend, to_numpy

OUT_RTOL = {"fp32": 0.0, "fp16": 2.0**-11, "bf16": 2.0**-8, "fp64": ELEMENTWISE_RTOL["fp64"]}
NUMPY_DTYPE = {d.short: d.numpy for d in dtypes.FLOAT_TYPES}


def operands(problem: ConvProblem, seed: int = 0, bias: bool = False, z: bool = False) -> dict:
    """Random x, w (and bias, z) of the problem's shapes and dtype, as NumPy arrays."""
    rng = np.random.default_rng(seed)
    dt = NUMPY_DTYPE[problem.dtype]

    def draw(shape: Any) -> np.ndarray:
        a = rng.standard_normal(shape).astype(np.float32).astype(dt)
        if problem.dtype == "fp64":
            a += rng.standard_normal(shape) * 2.0**-30  # bits a float32 would drop
        return a

    out = {"x": draw(problem.x_shape()), "w": draw(problem.w_shape())}
    if bias:
        out["bias"] = draw(problem.k)
    if z:
        out["z"] = draw(problem.y_shape())
    return out


def reference(
    problem: ConvProblem, ops: dict, epilogue: Epilogue | None = None, activation: str | None = None
) -> np.ndarray:
    e = epilogue or Epilogue()
    return conv_bias_act_forward(
        ops["x"], ops["w"], problem.pads, problem.strides, problem.dilations, problem.groups,
        problem.channels_last, bias=ops.get("bias"), z=ops.get("z"), alpha=e.alpha,
        alpha2=e.alpha2, activation=activation,
        coef=e.coef if activation in ("leaky_relu", "clipped_relu", "elu", "swish", "softplus")
        else None,
        threshold=e.threshold if activation == "softplus" else None,
    )  # fmt: skip


def magnitude(problem: ConvProblem, ops: dict) -> np.ndarray:
    """conv(|x|, |w|): the scale of the accumulation error."""
    return np.abs(conv_forward(np.abs(ops["x"].astype(np.float64)),
                               np.abs(ops["w"].astype(np.float64)), problem.pads,
                               problem.strides, problem.dilations, problem.groups,
                               problem.channels_last))  # fmt: skip


def run_solver(
    backend: str,
    solver: Solver,
    problem: ConvProblem,
    ops: dict,
    config: Config | None = None,
    epilogue: Epilogue | None = None,
) -> np.ndarray:
    """Runs one solver directly (no dispatcher) and returns y as NumPy."""
    b = backend_by_name(backend)
    caps = capabilities(b)
    config = config or solver.default_config(problem, caps)
    runner = solver.prepare(b, problem, config)
    xp = b.xp
    dt = NUMPY_DTYPE[problem.dtype]
    y = xp.full(problem.y_shape(), np.nan, dtype=dt)  # NaN: unwritten outputs show
    t = ConvTensors(
        x=to_backend(ops["x"], backend), w=to_backend(ops["w"], backend), y=y,
        bias=to_backend(ops["bias"], backend) if "bias" in ops else None,
        z=to_backend(ops["z"], backend) if "z" in ops else None,
    )  # fmt: skip
    size = solver.workspace_size(problem, config)
    workspace = xp.empty(max(size, 1), dtype=np.uint8) if size else None
    e = epilogue or Epilogue(has_bias="bias" in ops, has_z="z" in ops)
    runner(t, e, workspace)
    return to_numpy(y)


def assert_conv_close(
    got: np.ndarray,
    problem: ConvProblem,
    ops: dict,
    *,
    acc_factor: float = 2.0,
    epilogue: Epilogue | None = None,
    activation: str | None = None,
    what: str = "",
) -> None:
    ref = reference(problem, ops, epilogue, activation)
    mag = magnitude(problem, ops)
    e = epilogue or Epilogue()
    k_terms = problem.c_per_group * int(np.prod(problem.filter))
    eps = ACCUMULATION_EPS[problem.dtype]
    floor = 1e-13 if problem.dtype == "fp64" else 1e-6
    bound = (OUT_RTOL[problem.dtype] * np.abs(ref)
             + acc_factor * k_terms * eps * abs(e.alpha) * mag
             + floor)  # fmt: skip
    if problem.dtype not in ("fp32", "fp64"):
        bound = bound + 2.0**-14  # smallest normal half: results near 0 flush
    err = np.abs(got.astype(np.float64) - ref)
    bad = ~(err <= bound)  # NaN counts as bad
    if bad.any():
        i = np.argwhere(bad)[0]
        raise AssertionError(
            f"{what} {problem.key()}: {bad.sum()} of {bad.size} outputs off; first at "
            f"{tuple(i)}: got {got[tuple(i)]}, ref {ref[tuple(i)]}, bound {bound[tuple(i)]:.3g}"
        )


def check(
    backend: str,
    solver: Solver,
    problem: ConvProblem,
    *,
    seed: int = 0,
    config: Config | None = None,
    acc_factor: float = 2.0,
) -> None:
    """Runs solver on random operands and checks against the reference."""
    ops = operands(problem, seed)
    got = run_solver(backend, solver, problem, ops, config)
    assert_conv_close(got, problem, ops, acc_factor=acc_factor, what=solver.name)


def any_caps(backend: str) -> Any:
    return capabilities(backend_by_name(backend))
