"""Helpers for the convolution backward tests: problems, operands, running one solver
directly, and the comparison with the float64 reference.

Tolerance (as tests/conv_support.py for the forward):
  |got - ref| <= out_rtol * |ref| + acc_factor * T * 2^-24 * mag (+ 2^-14 for fp16/bf16)
  - out_rtol: one rounding of the output's storage type (fp32: 0, fp16 2^-11, bf16 2^-8);
  - T: terms per output (bwd data: K/g * R * S; bwd filter: N * P * Q), each fp32 add
    rounding at most 2^-24 relative to the running sum of magnitudes ``mag`` (the same
    gradient of |operands|); acc_factor 2 covers any summation order incl. split-K;
  - 2^-14: fp16's smallest normal (results near 0 flush/round there).
float64 (fp64 storage, fp64 accumulation): 2^-24 becomes ACCUMULATION_EPS["fp64"] =
2 * 2^-53 per term (our double fma and the reference's double sums both round);
out_rtol 2^-52 for the bias add's rounding on each side; no absolute floor (a
gradient with no terms is exactly 0).
Its operands carry bits below float32's mantissa, so a float32 path would fail.
Winograd bounds its error by the largest magnitude L of the image, not per output
(its transforms mix a tile's neighbourhood; see solvers/conv/winograd.py): for those
``mag`` is replaced by its maximum, with acc_factor covering F(4x4)'s growth.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cudnnlite import dtypes
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.reference.conv_backward import conv_backward_data, conv_backward_filter
from cudnnlite.runtime.caps import capabilities
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.solvers.base import Solver
from cudnnlite.solvers.conv.bwd_data import BwdDataTensors
from cudnnlite.solvers.conv.bwd_filter import BwdFilterTensors
from cudnnlite.solvers.conv.common import Epilogue
from cudnnlite.testing import ACCUMULATION_EPS, to_backend, to_numpy

OUT_RTOL = {"fp32": 0.0, "fp16": 2.0**-11, "bf16": 2.0**-8, "fp64": 2.0**-52}
NUMPY_DTYPE = {d.short: d.numpy for d in dtypes.FLOAT_TYPES}
DTYPES = [d.short for d in dtypes.FLOAT_TYPES]


def problem(n: int, c: int, hw: tuple, k: int, rs: tuple, pad: Any = 0, stride: Any = 1,
            dil: Any = 1, groups: int = 1, layout: str = "NCHW", dtype: str = "fp32",
            direction: str = "bwd_data") -> ConvProblem:  # fmt: skip
    nd = len(hw)
    pads = pad if isinstance(pad, tuple) else ((pad, pad),) * nd
    strides = stride if isinstance(stride, tuple) else (stride,) * nd
    dils = dil if isinstance(dil, tuple) else (dil,) * nd
    if nd == 1 and layout in ("NCHW", "NHWC"):
        layout = {"NCHW": "NCW", "NHWC": "NWC"}[layout]
    return ConvProblem(n, c, tuple(hw), k, tuple(rs), pads, strides, dils, groups, layout,
                       dtype, direction)  # fmt: skip


def rand(shape: tuple, seed: int, dtype: str) -> np.ndarray:
    rng = np.random.default_rng(seed)
    if dtype not in NUMPY_DTYPE:  # bf16 without ml_dtypes (the GPU box may lack it)
        pytest.skip(f"{dtype} arrays need ml_dtypes, which is not installed")
    a = rng.standard_normal(shape).astype(np.float32).astype(NUMPY_DTYPE[dtype])
    if dtype == "fp64":
        a += rng.standard_normal(shape) * 2.0**-30  # bits a float32 would drop
    return a


def _spatial(p: ConvProblem) -> tuple[int, ...]:
    return p.spatial


def ref_data(p: ConvProblem, dy: np.ndarray, w: np.ndarray) -> np.ndarray:
    return conv_backward_data(dy, w, p.spatial, p.pads, p.strides, p.dilations, p.groups,
                              p.channels_last)  # fmt: skip


def ref_filter(p: ConvProblem, x: np.ndarray, dy: np.ndarray) -> np.ndarray:
    return conv_backward_filter(x, dy, p.filter, p.pads, p.strides, p.dilations, p.groups,
                                p.channels_last)  # fmt: skip


def run_data(backend: str, solver: Solver, p: ConvProblem, dy: np.ndarray, w: np.ndarray,
             bias: np.ndarray | None = None, config: Any = None) -> np.ndarray:  # fmt: skip
    b = backend_by_name(backend)
    config = config or solver.default_config(p, capabilities(b))
    runner = solver.prepare(b, p, config)
    dx = b.xp.full(p.x_shape(), np.nan, dtype=NUMPY_DTYPE[p.dtype])  # unwritten shows
    t = BwdDataTensors(to_backend(dy, backend), to_backend(w, backend), dx,
                       None if bias is None else to_backend(bias, backend))  # fmt: skip
    size = solver.workspace_size(p, config)
    ws = b.xp.empty(size, dtype=np.uint8) if size else None
    runner(t, Epilogue(has_bias=bias is not None), ws)
    return to_numpy(dx)


def run_filter(backend: str, solver: Solver, p: ConvProblem, x: np.ndarray, dy: np.ndarray,
               config: Any = None) -> np.ndarray:  # fmt: skip
    b = backend_by_name(backend)
    config = config or solver.default_config(p, capabilities(b))
    runner = solver.prepare(b, p, config)
    dw = b.xp.full(p.w_shape(), np.nan, dtype=NUMPY_DTYPE[p.dtype])
    size = solver.workspace_size(p, config)
    ws = b.xp.full(size, 0xFF, dtype=np.uint8) if size else None  # NaN-ish garbage
    runner(BwdFilterTensors(to_backend(x, backend), to_backend(dy, backend), dw), None, ws)
    return to_numpy(dw)


def assert_grad_close(got: np.ndarray, ref: np.ndarray, mag: np.ndarray, terms: int,
                      dtype: str, *, acc_factor: float = 2.0, what: str = "") -> None:  # fmt: skip
    floor = 0.0 if dtype == "fp64" else 1e-6
    bound = OUT_RTOL[dtype] * np.abs(ref) + acc_factor * terms * ACCUMULATION_EPS[dtype] * mag
    bound = bound + floor
    if dtype not in ("fp32", "fp64"):
        bound = bound + 2.0**-14
    err = np.abs(got.astype(np.float64) - ref)
    bad = ~(err <= bound)  # NaN counts as bad
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} off; first at {i}: got "
                             f"{got[i]}, ref {ref[i]}, bound {bound[i]:.3g}")  # fmt: skip


def check_data(backend: str, solver: Solver, p: ConvProblem, *, seed: int = 0,
               winograd: bool = False, bias: bool = False,
               acc_factor: float = 2.0, config: Any = None) -> None:  # fmt: skip
    dy = rand(p.y_shape(), seed, p.dtype)
    w = rand(p.w_shape(), seed + 1, p.dtype)
    b = rand((p.c,), seed + 2, p.dtype) if bias else None
    got = run_data(backend, solver, p, dy, w, b, config)
    ref = ref_data(p, dy, w)
    mag = ref_data(p, np.abs(dy.astype(np.float64)), np.abs(w.astype(np.float64)))
    if b is not None:
        ref = ref + (b if p.channels_last else b.reshape((-1,) + (1,) * p.ndim))
    terms = p.k_per_group * p.filter_taps
    if winograd:
        mag, acc = np.full_like(mag, mag.max()), 2.0 + 256.0 / terms  # (2T + 256): as fwd
    else:
        acc = acc_factor
    assert_grad_close(got, ref, mag, terms, p.dtype, acc_factor=acc,
                      what=f"{solver.name} {p.key()}")  # fmt: skip


def check_filter(backend: str, solver: Solver, p: ConvProblem, *, seed: int = 0,
                 config: Any = None, acc_factor: float = 2.0) -> None:  # fmt: skip
    x = rand(p.x_shape(), seed, p.dtype)
    dy = rand(p.y_shape(), seed + 1, p.dtype)
    got = run_filter(backend, solver, p, x, dy, config)
    ref = ref_filter(p, x, dy)
    mag = ref_filter(p, np.abs(x.astype(np.float64)), np.abs(dy.astype(np.float64)))
    terms = p.n * int(np.prod(p.out_spatial))
    assert_grad_close(got, ref, mag, terms, p.dtype, acc_factor=acc_factor,
                      what=f"{solver.name} {p.key()}")  # fmt: skip
