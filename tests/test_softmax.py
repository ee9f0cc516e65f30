"""Softmax / log-softmax forward and backward on every backend against the float64
reference (cudnnlite.reference.softmax).

Tolerances (per element, see `check`):
- forward softmax: y = exp(x - m) / s in float32 has relative error about
  |x - m| * 2^-24 (the rounding of x - m, amplified by exp) plus a few ulps from expf and
  the division; rows where |x - m| matters (> 16) have y < 1e-7, covered by atol 1e-7.
  So rtol = 32 float32 ulps + one rounding of the storage type.
- forward log-softmax: (x - m) - log(s) has absolute error of a few float32 ulps of
  |x - m| + |log s|: rtol as above plus atol 2^-20 * (1 + log(len)).
- backward: the row sum in float32 has error <= (terms per thread + tree depth) ulps of
  sum|terms|; bounded by 2^-18 * sum|terms| (64 ulps: rows here have at most ~62 serial
  terms per thread) times |y| (softmax) or exp(y) (log-softmax), plus the storage rounding.
float64 runs the same bounds with float64's unit roundoff in place of float32's (U below),
doubled because the float64 reference rounds at the same level as the kernel; its
softmax atol is 2 U (see check_forward). float64 specifics: test_softmax_fp64.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

from cudnnlite import dtypes
from cudnnlite import reference as ref
from cudnnlite.errors import BadParamError
from cudnnlite.ops.softmax import (
    kernel_name_for,
    last_kernel_name,
    log_softmax,
    softmax,
    softmax_backward,
)
from cudnnlite.testing import to_backend, to_numpy

DTYPES = [d.numpy for d in dtypes.FLOAT_TYPES]
SHORT = {d.numpy: d.short for d in dtypes.FLOAT_TYPES}
# half an ulp of the storage type, where it is narrower than the arithmetic
STORAGE = {"fp32": 0.0, "fp16": 2.0**-11, "bf16": 2.0**-8, "fp64": 0.0}
ULP32 = 2.0**-24
# Unit roundoff of the arithmetic: float32 for the 32- and 16-bit types; float64's doubled
# for float64 (the float64 reference's own rounding is of the same size).
U = {"fp32": ULP32, "fp16": ULP32, "bf16": ULP32, "fp64": 2 * 2.0**-53}
# half the spacing of the storage type's subnormals (fp16's start at 6e-5: tiny gradients
# are stored with this absolute error); float32 and bfloat16 reach 1e-38
SUBNORMAL = {"fp32": 0.0, "fp16": 2.0**-25, "bf16": 0.0, "fp64": 0.0}


def rand(shape: tuple[int, ...], dtype: Any, seed: int = 0, scale: float = 3.0) -> np.ndarray:
    return (np.random.default_rng(seed).standard_normal(shape) * scale).astype(dtype)


def check_forward(y: Any, x: np.ndarray, axis: Any, log: bool, mode: Any = None) -> None:
    short = SHORT[x.dtype]
    got = to_numpy(y).astype(np.float64)
    want = ref.softmax.softmax(x, axis, log=log, mode=mode)
    u = U[short]
    rtol = 32 * u + STORAGE[short]
    if log:
        n = x.size if mode == "instance" else x.shape[1 if mode == "channel" else axis]
        atol = 16 * u * (1 + math.log(max(n, 1))) + STORAGE[short] * 1e-3
    elif short == "fp64":
        # the rounding of z = x - m (relative u) is amplified by exp into an absolute error
        # y |z| u <= |z| e^-|z| u <= u / e: 2 u bounds it for every z
        atol = 2 * u
    else:
        atol = 1e-7
    np.testing.assert_allclose(got, want, rtol=rtol, atol=atol, err_msg=f"{short} log={log}")


def check_backward(
    dx: Any, dy: np.ndarray, y: np.ndarray, axis: Any, log: bool, mode: Any = None
) -> None:
    short = SHORT[y.dtype]
    got = to_numpy(dx).astype(np.float64)
    want = ref.softmax.softmax_backward(dy, y, axis, log=log, mode=mode)
    dy64, y64 = dy.astype(np.float64), y.astype(np.float64)
    axes = (
        tuple(range(1, y.ndim))
        if mode == "instance"
        else ((1,) if mode == "channel" else (axis % y.ndim,))
    )
    if log:
        scale = np.exp(y64) * np.sum(np.abs(dy64), axis=axes, keepdims=True) + np.abs(dy64)
    else:
        scale = np.abs(y64) * (np.sum(np.abs(dy64 * y64), axis=axes, keepdims=True) + np.abs(dy64))
    err = np.abs(got - want)
    u = U[short]
    bound = 64 * u * scale + (STORAGE[short] + 8 * u) * np.abs(want) + SUBNORMAL[short] + 1e-300
    assert np.all(err <= bound), f"{short} log={log}: max excess {np.max(err - bound):.3e}"


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: SHORT[d])
@pytest.mark.parametrize("length", [1, 31, 32, 33, 1823])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
def test_forward_and_backward_row_lengths(backend: str, dtype: Any, length: int, log: bool) -> None:
    x = rand((3, length), dtype, seed=length)
    y = softmax(to_backend(x, backend), log=log)
    check_forward(y, x, -1, log)
    assert last_kernel_name().startswith("softmax_fwd_" + ("warp" if length <= 1024 else "block"))
    y = to_numpy(y)
    dy = rand((3, length), dtype, seed=length + 1, scale=1.0)
    dx = softmax_backward(to_backend(dy, backend), to_backend(y, backend), log=log)
    check_backward(dx, dy, y, -1, log)


# Short rows share a warp: lanes per row = the row's packs (16 bytes; elements when the
# length is no multiple of a pack) rounded up to a power of two, 1 to 32. Every group
# size, vector and scalar, with a row count that leaves the last warp partly past the end.
GROUP_LENGTHS = [1, 2, 3, 4, 5, 8, 10, 16, 17, 24, 64, 100, 127, 128, 129, 256]


@pytest.mark.parametrize("dtype", [np.dtype(t) for t in ("f4", "f2", "f8")], ids=lambda d: SHORT[d])
@pytest.mark.parametrize("length", GROUP_LENGTHS)
def test_short_rows_share_a_warp(backend: str, dtype: Any, length: int) -> None:
    rows = 301
    x = rand((rows, length), dtype, seed=length)
    # out= is the first rows of a bigger buffer: the lanes of rows past the end write nothing
    fill = np.full((rows + 40, length), 7, dtype)
    buf = to_backend(fill, backend)
    for log in (False, True):
        y = softmax(to_backend(x, backend), log=log, out=buf[:rows])
        assert last_kernel_name().startswith("softmax_fwd_warp")
        check_forward(y, x, -1, log)
        assert (to_numpy(buf)[rows:] == 7).all()
        y = to_numpy(y).copy()  # (buf is the backward's out too)
        dy = rand((rows, length), dtype, seed=length + 1, scale=1.0)
        dx = softmax_backward(to_backend(dy, backend), to_backend(y, backend), log=log,
                              out=buf[:rows])  # fmt: skip
        check_backward(dx, dy, y, -1, log)
        assert (to_numpy(buf)[rows:] == 7).all()


def test_short_rows_group_sizes() -> None:
    from cudnnlite.ops.softmax import _Plan
    from cudnnlite.runtime.select import backend_by_name

    cpu, f32 = backend_by_name("cpu"), dtypes.lookup(np.float32)
    a = np.zeros(4096, np.float32)  # 16-byte aligned (NumPy's allocations are)
    want = {1: 0, 4: 0, 8: 1, 12: 2, 40: 4, 128: 5, 1024: 5, 3: 2, 33: 5, 17: 5, 9: 4}
    for length, log2 in want.items():
        plan = _Plan(cpu, f32, (2, length, 1), [a])
        assert (plan.kind, plan.group_log2) == ("warp", log2), length
        assert plan.vec == (4 if length % 4 == 0 else 1)


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
def test_million_element_row_uses_the_multi_block_path(backend: str, log: bool) -> None:
    x = rand((1, 10**6), np.float32, seed=7, scale=1e4)  # 1e4: a naive exp overflows
    y = softmax(to_backend(x, backend), log=log)
    assert last_kernel_name() == "softmax_fwd_multi_vec4_fp32"
    check_forward(y, x, -1, log)
    y = to_numpy(y)
    dy = rand((1, 10**6), np.float32, seed=8, scale=1.0)
    dx = softmax_backward(to_backend(dy, backend), to_backend(y, backend), log=log)
    assert last_kernel_name() == "softmax_bwd_multi_vec4_fp32"
    check_backward(dx, dy, y, -1, log)


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: SHORT[d])
@pytest.mark.parametrize("length", [33, 1823])
def test_large_magnitude_inputs_do_not_overflow(backend: str, dtype: Any, length: int) -> None:
    x = rand((2, length), dtype, seed=3, scale=1e4)
    y = to_numpy(softmax(to_backend(x, backend)))
    assert np.all(np.isfinite(y.astype(np.float64)))
    check_forward(y, x, -1, False)
    # log-softmax values reach -(max - min) ~ -8e4, past float16's 65504: scale 5e3 there
    xl = x if dtype != np.float16 else rand((2, length), dtype, seed=3, scale=5e3)
    yl = to_numpy(softmax(to_backend(xl, backend), log=True))
    assert np.all(np.isfinite(yl.astype(np.float64)))
    check_forward(yl, xl, -1, True)


def test_fast_algorithm_skips_the_max(backend: str) -> None:
    x = rand((4, 100), np.float32, seed=4, scale=2.0)
    for log in (False, True):
        y = to_numpy(softmax(to_backend(x, backend), log=log, algorithm="fast"))
        want = ref.softmax.softmax(x, -1, log=log, fast=True)
        np.testing.assert_allclose(y, want, rtol=64 * ULP32, atol=2.0**-20 * 6)
    big = np.full((1, 40), 100.0, np.float32)  # exp(100) overflows float32: as cuDNN's fast
    assert not np.all(np.isfinite(to_numpy(softmax(to_backend(big, backend), algorithm="fast"))))
    assert np.allclose(to_numpy(softmax(to_backend(big, backend))), 1 / 40)


# (shape, axis) from real networks, scaled down: BERT attention scores (N, heads, T, T),
# classifier logits, a CNN feature map over channels, plus odd ones.
CASES = [
    ((2, 4, 16, 16), -1),
    ((2, 4, 16, 16), 2),
    ((4, 1000), -1),
    ((2, 16, 7, 7), 1),
    ((5, 3, 2), 0),
    ((1, 1, 1), 1),
    ((7,), 0),
    ((3, 2053), 1),
]


@pytest.mark.parametrize(("shape", "axis"), CASES, ids=str)
@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: SHORT[d])
def test_axes_of_real_shapes(backend: str, shape: tuple, axis: int, dtype: Any) -> None:
    x = rand(shape, dtype, seed=len(shape))
    dy = rand(shape, dtype, seed=9, scale=1.0)
    for log in (False, True):
        y = softmax(to_backend(x, backend), axis, log=log)
        check_forward(y, x, axis, log)
        dx = softmax_backward(to_backend(dy, backend), y, axis, log=log)
        check_backward(dx, dy, to_numpy(y), axis, log)


@pytest.mark.parametrize("mode", ["instance", "channel"])
def test_cudnn_modes(backend: str, mode: str) -> None:
    x = rand((2, 8, 5, 5), np.float32, seed=11)
    dy = rand((2, 8, 5, 5), np.float32, seed=12, scale=1.0)
    for log in (False, True):
        y = softmax(to_backend(x, backend), mode=mode, log=log)
        check_forward(y, x, None, log, mode)
        dx = softmax_backward(to_backend(dy, backend), y, mode=mode, log=log)
        check_backward(dx, dy, to_numpy(y), None, log, mode)
    kind = "warp_vec4" if mode == "instance" else "cols"  # 200-element rows; columns over C
    assert kernel_name_for(x, mode=mode) == f"softmax_fwd_{kind}_fp32"


def test_block_path_vector_and_scalar(backend: str) -> None:
    for length, tag in ((5000, "block_vec8"), (4099, "block_scalar")):
        x = rand((2, length), np.float16, seed=length)
        y = softmax(to_backend(x, backend))
        assert last_kernel_name() == f"softmax_fwd_{tag}_fp16"
        check_forward(y, x, -1, False)


def test_random_thread_schedule(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "random")
    for shape in ((5, 33), (2, 3000), (1, 300000)):
        x = rand(shape, np.float32, seed=shape[1])
        check_forward(softmax(to_backend(x, backend)), x, -1, False)
        dy = rand(shape, np.float32, seed=1, scale=1.0)
        y = to_numpy(softmax(to_backend(x, backend)))
        check_backward(
            softmax_backward(to_backend(dy, backend), to_backend(y, backend)), dy, y, -1, False
        )


def test_masked_and_infinite_entries(backend: str) -> None:
    x = np.array([[-np.inf, 1.0, 2.0, -np.inf], [-np.inf] * 4, [np.nan, 0, 0, 0]], np.float32)
    y = to_numpy(softmax(to_backend(x, backend)))
    np.testing.assert_allclose(y[0], ref.softmax.softmax(x[0]), rtol=1e-6)
    assert y[0, 0] == 0 and y[0, 3] == 0
    assert np.all(np.isnan(y[1])) and np.all(np.isnan(y[2]))  # 0/0 and NaN, as PyTorch


@pytest.mark.parametrize("dtype", DTYPES, ids=lambda d: SHORT[d])
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
def test_a_nan_anywhere_makes_its_row_nan(backend: str, dtype: Any, log: bool) -> None:
    """As PyTorch: one NaN (or +inf) makes its whole row NaN and leaves the others alone, on
    every path (warp rows of odd length, block rows, the multi-block path, columns), the
    NaN first, inside or last in a lane's share of the row (the lanes' partial results
    must carry it through the combine: a NaN sum under a lane's -inf max was dropped)."""
    op = log_softmax if log else softmax
    for shape, axis in (((4, 33), -1), ((4, 3001), -1), ((2, 300000), -1), ((33, 4), 0)):
        x = rand(shape, np.float32, seed=shape[axis]).astype(dtype)
        n = shape[axis]
        for k, at in enumerate((0, 1, n // 2, n - 1)):
            if k == 0 and axis == 0:
                continue  # (one NaN per column is enough there)
            for bad in (np.nan, np.inf):  # +inf too: inf - inf
                xk = np.moveaxis(x.copy(), axis, -1)
                xk[0, at] = bad
                xk = np.moveaxis(xk, -1, axis)
                y = np.moveaxis(to_numpy(op(to_backend(xk, backend), axis)), axis, -1)
                assert np.isnan(y[0]).all(), (shape, at, bad)
                assert not np.isnan(y[1:]).any(), (shape, at, bad)


def test_noncontiguous_inputs_and_out(backend: str) -> None:
    base = rand((6, 40), np.float32, seed=5)
    x = base[::2, ::3]
    xb = to_backend(base, backend)[::2, ::3]
    out_base = to_backend(np.zeros((6, 40), np.float32), backend)
    out = out_base[1::2, ::3]
    r = softmax(xb, out=out)
    assert r is out
    check_forward(out, np.ascontiguousarray(x), -1, False)
    assert np.all(to_numpy(out_base)[0] == 0)  # only the view was written
    y = softmax(to_backend(x.T.copy(), backend), 0)
    check_forward(y, x.T.copy(), 0, False)


def test_in_place_and_log_wrapper(backend: str) -> None:
    x = rand((4, 50), np.float32, seed=6)
    xb = to_backend(x, backend)
    assert softmax(xb, out=xb) is xb
    check_forward(xb, x, -1, False)
    check_forward(log_softmax(to_backend(x, backend)), x, -1, True)


def test_empty(backend: str) -> None:
    x = to_backend(np.zeros((0, 5), np.float32), backend)
    assert softmax(x).shape == (0, 5)
    assert softmax(to_backend(np.zeros((3, 0), np.float32), backend)).shape == (3, 0)


def test_bad_inputs_raise_and_leave_inputs_untouched(backend: str) -> None:
    x = rand((2, 3, 4), np.float32)
    xb = to_backend(x, backend)
    before = to_numpy(xb).tobytes()
    bad = [
        (lambda: softmax(xb, 3), "axis"),
        (lambda: softmax(xb, -4), "axis"),
        (lambda: softmax(xb, 1.0), "axis"),
        (lambda: softmax(xb, algorithm="exact"), "algorithm"),
        (lambda: softmax(xb, mode="spatial"), "mode"),
        (lambda: softmax(xb, 1, mode="channel"), "axis"),
        (lambda: softmax(to_backend(x.astype(np.int32), backend)), "x"),
        (lambda: softmax_backward(to_backend(x.astype(np.float64), backend), xb), "dy"),
        (lambda: softmax(to_backend(np.zeros((), np.float32), backend), 1), "axis"),
        (lambda: softmax(xb, out=to_backend(np.zeros((2, 3), np.float32), backend)), "out"),
        (lambda: softmax_backward(xb, to_backend(x[:, :2], backend)), "dy"),
        (lambda: softmax_backward(to_backend(x.astype(np.float16), backend), xb), "dy"),
        (lambda: softmax(xb, beta=0.5), "beta"),
        (lambda: softmax_backward(xb, xb, beta=1.0), "beta"),
        (lambda: softmax(xb, alpha="2", out=to_backend(np.zeros_like(x), backend)), "alpha"),
        (lambda: softmax(xb, beta=math.inf, out=to_backend(np.zeros_like(x), backend)), "beta"),
    ]
    for call, name in bad:
        with pytest.raises(BadParamError, match=name):
            call()
    assert to_numpy(xb).tobytes() == before


# ------------------------------------------------------------------ blending


# the warp, block, cols and multi-block (partial + finish) paths; the multi-block
# path's blend is the same code for every dtype, so its long rows run in fp32 only
BLEND_CASES = [((3, 40), -1), ((2, 1500), -1), ((2, 5, 3, 4), 1), ((1, 1 << 17), -1)]
BLEND_PARAMS = [
    (dtype, case)
    for dtype in DTYPES
    for case in range(len(BLEND_CASES))
    if BLEND_CASES[case][0][-1] < 1 << 17 or dtype == np.float32
]


@pytest.mark.parametrize(("dtype", "case"), BLEND_PARAMS, ids=lambda v: SHORT.get(v, str(v)))
def test_blending(backend: str, dtype: Any, case: int) -> None:
    shape, axis = BLEND_CASES[case]
    x = rand(shape, dtype, seed=20)
    prior = rand(shape, dtype, seed=21, scale=1.0)
    for log in (False, True):
        # beta == 0: out is not read, its NaNs must not leak.
        out = to_backend(np.full(shape, np.nan, dtype), backend)
        softmax(to_backend(x, backend), axis, log=log, alpha=1.0, beta=0.0, out=out)
        check_forward(out, x, axis, log)
        # beta != 0 reads the prior: y = alpha f(x) + beta y_prior
        out = to_backend(prior, backend)
        softmax(to_backend(x, backend), axis, log=log, alpha=1.5, beta=-0.5, out=out)
        want = 1.5 * ref.softmax.softmax(x, axis, log=log) - 0.5 * prior.astype(np.float64)
        # the blend adds one float32 fma on top of the forward error: values up to ~20
        # (log-softmax) get a few float32 ulps absolute, plus the storage rounding
        mag = np.abs(want) + np.abs(prior.astype(np.float64))
        err = np.abs(to_numpy(out).astype(np.float64) - want)
        u = U[SHORT[dtype]]
        floor = 1e-6 if SHORT[dtype] != "fp64" else 16 * u  # ~16 ulps of 1 either way
        assert np.all(err <= (64 * u + STORAGE[SHORT[dtype]]) * mag + floor), err.max()
        y = to_numpy(softmax(to_backend(x, backend), axis, log=log))
        dy = rand(shape, dtype, seed=22, scale=1.0)
        out = to_backend(prior, backend)
        softmax_backward(
            to_backend(dy, backend),
            to_backend(y, backend),
            axis,
            log=log,
            alpha=2.0,
            beta=0.25,
            out=out,
        )
        dx = ref.softmax.softmax_backward(dy, y, axis, log=log)
        want = 2.0 * dx + 0.25 * prior.astype(np.float64)
        err = np.abs(to_numpy(out).astype(np.float64) - want)
        # the backward bound of check_backward (row sums) doubled by alpha, plus the fma
        dy64, y64 = dy.astype(np.float64), y.astype(np.float64)
        rowsum = np.sum(np.abs(dy64 * (np.exp(y64) if log else y64)), axis=axis, keepdims=True)
        scale = (np.exp(y64) if log else np.abs(y64)) * (
            rowsum + np.sum(np.abs(dy64), axis=axis, keepdims=True) * log
        )
        bound = (
            2 * 64 * u * (scale + np.abs(dy64))
            + (STORAGE[SHORT[dtype]] + 8 * u) * (np.abs(want) + np.abs(prior))
            + SUBNORMAL[SHORT[dtype]]
            + 1e-300
        )
        assert np.all(err <= bound), f"log={log}: {np.max(err - bound):.3e}"


def test_blending_strided_out_and_in_place(backend: str) -> None:
    x = rand((6, 40), np.float32, seed=23)
    prior = rand((6, 80), np.float32, seed=24)
    out_base = to_backend(prior, backend)
    out = out_base[:, ::2]  # not contiguous: the prior is gathered, the result scattered
    softmax(to_backend(x, backend), alpha=3.0, beta=-1.0, out=out)
    want = 3.0 * ref.softmax.softmax(x) - prior[:, ::2]
    np.testing.assert_allclose(to_numpy(out), want, rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(to_numpy(out_base)[:, 1::2], prior[:, 1::2])
    xb = to_backend(x, backend)
    softmax(xb, alpha=0.5, beta=2.0, out=xb)  # in place: y = 0.5 softmax(x) + 2 x
    want = 0.5 * ref.softmax.softmax(x) + 2.0 * x
    np.testing.assert_allclose(to_numpy(xb), want, rtol=1e-5, atol=1e-6)
