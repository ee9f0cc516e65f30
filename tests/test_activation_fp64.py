"""float64 activations: what float64 adds to the every-mode checks of test_activation.py
(which run float64 too, against the float64 reference at cudnnlite.testing's fp64
elementwise tolerance, NaN/inf included): scalars that reach the kernel exactly, their
validation in double, finite-difference gradients, plans, and mixed-dtype errors.

All of it runs the one float64 activation module (every mode is in it).
"""

from __future__ import annotations

import math

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite import reference as ref
from cudnnlite.errors import BadParamError
from cudnnlite.ops.activation import ACT_PARAMS_DTYPE64, last_kernel_name
from cudnnlite.testing import assert_close, to_backend, to_numpy

SMOOTH_MODES = ("sigmoid", "tanh", "swish", "gelu", "gelu_tanh", "softplus", "elu")


def rand(n: int, seed: int, lo: float = -4.0, hi: float = 4.0) -> np.ndarray:
    return np.random.default_rng(seed).uniform(lo, hi, n)


def test_coefficient_reaches_the_kernel_exactly(backend: str) -> None:
    """0.1 is not a float32: the kernel's y = x * coef for x < 0 must be the double
    product itself (one rounding), bit for bit."""
    x = rand(1001, seed=1)  # odd length: the vector body and the scalar tail
    y = to_numpy(cl.leaky_relu(to_backend(x, backend), 0.1))
    assert last_kernel_name() == "act_fwd_vec2_leaky_relu_fp64"
    want = np.where(x > 0, x, x * 0.1)
    np.testing.assert_array_equal(y, want)
    assert not np.array_equal(y, np.where(x > 0, x, x * float(np.float32(0.1))))


def test_blending_factors_reach_the_kernel_exactly(backend: str) -> None:
    """y = alpha f(x) + beta y_prior with alpha = 1/3, beta = 0.1 (neither a float32):
    f = sigmoid > 0 and prior > 0, so there is no cancellation and the result is within
    a few float64 roundings (product, fma, sigmoid's exp and division: the fp64
    elementwise rtol of 16 ulps covers them); float32-rounded factors would be off by
    ~1e-8."""
    x = rand(257, seed=2)
    prior = rand(257, seed=3, lo=1.0, hi=2.0)
    out = to_backend(prior.copy(), backend)
    cl.activation_forward(to_backend(x, backend), "sigmoid", alpha=1 / 3, beta=0.1, out=out)
    want = (1 / 3) * ref.activation_forward(x, "sigmoid") + 0.1 * prior
    assert_close(out, want, np.float64, what="fp64 blend")
    dy = rand(257, seed=4, lo=0.5, hi=1.0)
    out = to_backend(prior.copy(), backend)
    cl.activation_backward(
        to_backend(dy, backend), to_backend(x, backend), "tanh", alpha=1 / 3, beta=0.1, out=out
    )
    want = (1 / 3) * ref.activation_backward(dy, x, "tanh") + 0.1 * prior
    assert_close(out, want, np.float64, what="fp64 backward blend")


def test_scalars_are_validated_in_double(backend: str) -> None:
    """1e39 overflows float32 (rejected for float32 x) but is a finite double."""
    x64 = to_backend(rand(8, seed=5), backend)
    x32 = to_backend(rand(8, seed=5).astype(np.float32), backend)
    y = to_numpy(cl.activation_forward(x64, "relu", alpha=1e39))
    np.testing.assert_array_equal(y, 1e39 * np.maximum(to_numpy(x64), 0))
    with pytest.raises(BadParamError, match=r"alpha: expected a finite number \(in float32\)"):
        cl.activation_forward(x32, "relu", alpha=1e39)
    with pytest.raises(BadParamError, match=r"alpha: expected a finite number, got inf"):
        cl.activation_forward(x64, "relu", alpha=math.inf)
    with pytest.raises(BadParamError, match="beta: softplus's beta must be > 0, got"):
        cl.softplus(x64, -1.0)
    y = to_numpy(cl.leaky_relu(x64, 1e-300))  # a float32 would flush this slope to 0
    xn = to_numpy(x64)
    np.testing.assert_array_equal(y, np.where(xn > 0, xn, xn * 1e-300))


@pytest.mark.parametrize("mode", SMOOTH_MODES)
def test_backward_matches_central_differences(backend: str, mode: str) -> None:
    """f'(x) from the backward kernel against (f(x + h) - f(x - h)) / (x+h - (x-h)) from
    the forward kernel, h = 2^-17. Truncation error h^2 |f'''| / 6 < 1e-11 (|f'''| < 3
    for these modes on [-4, 4]); rounding error: a few ulps of |f| <= 4 over the step
    2h = 1.5e-5, < 3e-10. 1e-9 holds both with room, and no float32 computation could
    meet it (its rounding alone gives ~1e-2 here). x stays 0.01 away from elu's kink."""
    x = rand(301, seed=6)
    x = np.where(np.abs(x) < 0.01, 0.5, x)
    h = 2.0**-17
    xp, xm = x + h, x - h
    fp = to_numpy(cl.activation_forward(to_backend(xp, backend), mode))
    fm = to_numpy(cl.activation_forward(to_backend(xm, backend), mode))
    fd = (fp - fm) / (xp - xm)
    dx = to_numpy(cl.activation_backward(to_backend(np.ones_like(x), backend),
                                         to_backend(x, backend), mode))  # fmt: skip
    np.testing.assert_allclose(dx, fd, rtol=1e-9, atol=1e-9, err_msg=mode)


def test_backward_from_y_in_double(backend: str) -> None:
    """sigmoid' = y (1 - y) from the stored output: in double, y's rounding costs
    ~1e-16, so it agrees with the derivative from x at the fp64 tolerance (16 ulps:
    y's rounding, 1 - y and two products)."""
    x = rand(64, seed=7, lo=-3.0, hi=3.0)
    dy = rand(64, seed=8)
    xb, dyb = to_backend(x, backend), to_backend(dy, backend)
    y = cl.sigmoid(xb)
    a = cl.activation_backward(dyb, xb, "sigmoid", y=y)
    b = cl.activation_backward(dyb, xb, "sigmoid")
    assert_close(a, to_numpy(b), np.float64, what="from y vs from x")


def test_plan_and_kernel_params(backend: str) -> None:
    plan = cl.activation_plan((5, 7), "swish", coef=0.1, alpha=1 / 3, dtype=np.float64,
                              backend=backend)  # fmt: skip
    x = to_backend(rand(35, seed=9).reshape(5, 7), backend)
    np.testing.assert_array_equal(
        to_numpy(plan(x)), to_numpy(cl.activation_forward(x, "swish", coef=0.1, alpha=1 / 3))
    )
    with pytest.raises(BadParamError, match="is for float64, got float32"):
        plan(x.astype(np.float32))
    assert ACT_PARAMS_DTYPE64.itemsize == 40  # 4 doubles and an int, padded (ActParamsT<double>)


def test_mixed_dtypes_name_the_argument(backend: str) -> None:
    x64 = to_backend(rand(6, seed=10), backend)
    x32 = x64.astype(np.float32)
    with pytest.raises(BadParamError, match="dy: expected dtype float64"):
        cl.activation_backward(x32, x64, "relu")
    with pytest.raises(BadParamError, match="y: expected dtype float64"):
        cl.activation_backward(x64, x64, "sigmoid", y=x32)
    with pytest.raises(BadParamError, match="out: expected dtype float64"):
        cl.relu(x64, out=x32.copy())


def test_strided_and_misaligned_fp64(backend: str) -> None:
    """The strided kernel and the scalar path (a view 8 bytes off 16-byte alignment)."""
    base = rand(2 * 9 * 8 + 1, seed=11)
    xb = to_backend(base, backend)
    strided = xb[1:].reshape(9, 16)[:, ::2]
    y = cl.gelu(strided)
    assert last_kernel_name() == "act_fwd_strided_gelu_fp64"
    assert_close(y, ref.activation_forward(to_numpy(strided), "gelu"), np.float64)
    ptr = xb.__array_interface__["data"][0] if backend == "cpu" else int(xb.data.ptr)
    off = 1 if ptr % 16 == 0 else 0  # element offset making the view 8 bytes off
    view = xb[off : off + 33]
    y = cl.gelu(view)
    assert last_kernel_name() == "act_fwd_scalar_gelu_fp64"
    assert_close(y, ref.activation_forward(to_numpy(view), "gelu"), np.float64)
