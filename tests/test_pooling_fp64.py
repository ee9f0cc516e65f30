"""Pooling in float64 (issue 18): odd 1-D / 3-D shapes in every mode, forward and backward,
against the float64 reference; averages of values with bits below float32's mantissa
(summed and divided in double); central-difference gradient checks; NaN; mixed dtypes.

(2-D max / average / adaptive and global average pooling also run in float64 through the
dtype parametrizations of test_pooling.py and test_pooling_fast.py.)

Tolerances, u = 2^-53: a window sum of K terms has error <= K u sum|x| and the division
rounds once more; the reference's own sum has an error of the same kind, so
``close`` allows 2 (K + 1) u of the summed magnitude (K <= 27 here: 64 u). Max pooling
picks an input: exact.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnnlite.ops.pooling as P
from cudnnlite.errors import BadParamError
from cudnnlite.reference import pooling as rp
from cudnnlite.testing import to_backend, to_numpy

U = 2.0**-53
RNG = np.random.default_rng(18)


def fine(shape: tuple[int, ...], seed: int) -> np.ndarray:
    """Normal values with bits below float32's 24-bit mantissa: a float32 sum or divisor
    would be off by ~1e-8, a million times the bound below."""
    return np.random.default_rng(seed).standard_normal(shape) * (1 + 2.0**-40)


def close(got: Any, want: np.ndarray, mag: np.ndarray) -> None:
    """|got - want| <= 64 u * mag, mag the same pooling of |x| (the summed magnitude)."""
    err = np.abs(to_numpy(got) - want)
    assert np.all(err <= 64 * U * mag + 1e-300), f"max error {err.max()}"


def nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], *shape[2:], shape[1])


# (spatial shape, kernel, stride, padding, dilation, ceil_mode): prime sizes, padding,
# dilation and a ceil-mode window hanging into the padding
CASES = [
    ((11,), (3,), (2,), (1,), (2,), True),
    ((5, 6, 7), (2, 3, 3), (1, 2, 2), (1, 1, 0), (1, 1, 1), False),
    ((3, 5, 4), (3, 3, 2), (2, 2, 2), (1, 1, 1), (1, 1, 1), True),
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_max_pool_1d_3d(backend: str, case: Any, layout: str) -> None:
    sp, k, s, p, d, ceil = case
    shape = (2, 3, *sp) if layout == "NCHW" else (2, *sp, 3)
    x = fine(shape, 1)
    y, ind = P.max_pool(to_backend(x, backend), k, s, p, d, ceil, True, layout=layout)
    ry, ri = rp.max_pool(x, k, s, p, d, ceil, layout)
    np.testing.assert_array_equal(to_numpy(y), ry)  # a selected input: exact
    np.testing.assert_array_equal(to_numpy(ind), ri)
    dy = fine(ry.shape, 2)
    dyb = to_backend(dy, backend)
    want = rp.max_pool_backward(dy, ri, shape, layout)
    for det in (False, True):  # float64 always gathers (deterministic)
        dx = P.max_pool_backward(dyb, ind, shape, k, s, p, d, ceil, layout=layout,
                                 deterministic=det)  # fmt: skip
        assert P.last_kernel_name() == "pool_bwd_fp64"
        close(dx, want, rp.max_pool_backward(np.abs(dy), ri, shape, layout))


@pytest.mark.parametrize("cip,dov", [(True, None), (False, None), (True, 5)])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_avg_pool_1d_3d(backend: str, case: Any, cip: bool, dov: int | None) -> None:
    sp, k, s, p, _, ceil = case
    shape = (2, 3, *sp)
    x = fine(shape, 3)
    y = P.avg_pool(to_backend(x, backend), k, s, p, ceil, cip, dov)
    assert P.last_kernel_name() == "pool_fwd_fp64"
    close(
        y, rp.avg_pool(x, k, s, p, ceil, cip, dov), rp.avg_pool(np.abs(x), k, s, p, ceil, cip, dov)
    )
    dy = fine(tuple(y.shape), 4)
    dx = P.avg_pool_backward(to_backend(dy, backend), shape, k, s, p, ceil, cip, dov)
    close(
        dx,
        rp.avg_pool_backward(dy, shape, k, s, p, ceil, cip, dov),
        rp.avg_pool_backward(np.abs(dy), shape, k, s, p, ceil, cip, dov),
    )


@pytest.mark.parametrize("mode", P.POOLING_MODES)
def test_cudnn_modes(backend: str, mode: str) -> None:
    x = fine((2, 3, 9, 7), 5)
    xb = to_backend(x, backend)
    y = to_numpy(P.pooling_forward(xb, mode, 3, 2, 1))
    dy = fine(y.shape, 6)
    dx = P.pooling_backward(to_backend(dy, backend), xb, mode, 3, 2, 1)
    if mode.startswith("max"):
        ry, ri = rp.max_pool(x, (3, 3), (2, 2), (1, 1), (1, 1))
        np.testing.assert_array_equal(y, ry)
        close(
            dx, rp.max_pool_backward(dy, ri, x.shape), rp.max_pool_backward(np.abs(dy), ri, x.shape)
        )
        return
    args = ((3, 3), (2, 2), (1, 1), False, mode == "avg_include_pad")
    close(y, rp.avg_pool(x, *args), rp.avg_pool(np.abs(x), *args))
    close(
        dx,
        rp.avg_pool_backward(dy, x.shape, *args),
        rp.avg_pool_backward(np.abs(dy), x.shape, *args),
    )


def test_adaptive_and_global_3d(backend: str) -> None:
    x = fine((2, 3, 5, 7, 6), 7)
    xb = to_backend(x, backend)
    y, ind = P.adaptive_max_pool3d(xb, (2, 3, 4), True)
    ry, ri = rp.adaptive_max_pool(x, (2, 3, 4))
    np.testing.assert_array_equal(to_numpy(y), ry)
    np.testing.assert_array_equal(to_numpy(ind), ri)
    close(P.adaptive_avg_pool3d(xb, (2, 3, 4)), rp.adaptive_avg_pool(x, (2, 3, 4)),
          rp.adaptive_avg_pool(np.abs(x), (2, 3, 4)))  # fmt: skip
    # global: a 210-term sum per plane (mag * 210 / 64 > the 210 u of the sum and the reference)
    g = P.global_avg_pool(xb)
    assert P.last_kernel_name() == "gap_fwd_planar_fp64"
    err = np.abs(to_numpy(g) - rp.global_avg_pool(x, 3))
    assert np.all(err <= 2 * 211 * U * rp.global_avg_pool(np.abs(x), 3))


def test_nan_propagates(backend: str) -> None:
    x = np.array([[[1.0, 5.0, np.nan, 2.0, np.nan, np.nan, -np.inf, -np.inf]]])
    y, ind = P.max_pool1d(to_backend(x, backend), 2, 2, return_indices=True)
    ry, ri = rp.max_pool(x, (2,), (2,), (0,), (1,))
    np.testing.assert_array_equal(to_numpy(y), ry)
    assert to_numpy(ind).tolist() == [[[1, 2, 5, 6]]]  # the last NaN of a window, as PyTorch


# Central differences, step h = 2^-4. The losses are linear (average pooling) or linear
# near x (max pooling: inputs at least 1/8 apart, so a +-h step keeps every argmax): the
# difference quotient has no truncation error, only the rounding of the two losses, each
# <= (terms) u sum|dy y| after a sum in double, divided by 2h; 256 u sum|dy y| / h bounds it
# here (at most 49 outputs and 9-term windows per loss).
FD_CALLS = {
    "avg": (lambda x: P.avg_pool2d(x, 3, 2, 1, True, False), lambda dy, s: P.avg_pool_backward(
        dy, s, 3, 2, 1, True, False)),
    "adaptive": (lambda x: P.adaptive_avg_pool2d(x, (2, 3)),
                 lambda dy, s: P.adaptive_avg_pool_backward(dy, s)),
    "global": (P.global_avg_pool, lambda dy, s: P.adaptive_avg_pool_backward(dy, s)),
    "max": (lambda x: P.max_pool2d(x, 3, 2, 1), None),
}  # fmt: skip


@pytest.mark.parametrize("kind", list(FD_CALLS))
def test_backward_central_differences(backend: str, kind: str) -> None:
    shape, h = (1, 2, 5, 6), 2.0**-4
    x = RNG.permutation(60).reshape(shape) / 8.0  # distinct, 1/8 apart
    fwd, bwd = FD_CALLS[kind]
    dy = fine(tuple(fwd(to_backend(x, backend)).shape), 8)
    if bwd is None:
        _, ind = P.max_pool2d(to_backend(x, backend), 3, 2, 1, return_indices=True)
        dx = to_numpy(P.max_pool_backward(to_backend(dy, backend), ind, shape, 3, 2, 1))
    else:
        dx = to_numpy(bwd(to_backend(dy, backend), shape))

    def loss(xx: np.ndarray) -> float:
        return float(np.dot(to_numpy(fwd(to_backend(xx, backend))).ravel(), dy.ravel()))

    mag = float(np.abs(dy).sum() * (np.abs(x).max() + h))
    fd = np.empty(x.size)
    for i in range(x.size):
        e = np.zeros(x.size)
        e[i] = h
        fd[i] = (loss(x + e.reshape(shape)) - loss(x - e.reshape(shape))) / (2 * h)
    np.testing.assert_allclose(dx.ravel(), fd, rtol=0, atol=256 * U * mag / h)


def test_mixed_dtypes_name_the_argument(backend: str) -> None:
    x = to_backend(fine((1, 2, 6, 6), 9), backend)
    dy32 = to_backend(np.ones((1, 2, 3, 3), np.float32), backend)
    with pytest.raises(BadParamError, match="dy"):
        P.pooling_backward(dy32, x, "avg_include_pad", 2)
    with pytest.raises(BadParamError, match="dy: expected dtype float64"):
        P.pooling_backward(dy32, x, "max", 2)
    with pytest.raises(BadParamError, match="x: expected dtype"):
        P.max_pool2d(to_backend(np.ones((1, 2, 4, 4), np.complex128), backend), 2)
