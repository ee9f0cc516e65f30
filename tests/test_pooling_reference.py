"""The float64 pooling references: output sizes as PyTorch's rules, backward checked
against finite differences of the forward."""

from __future__ import annotations

import numpy as np
import pytest

from cudnnlite.reference import pooling as rp

RNG = np.random.default_rng(1)


def numgrad(f, a: np.ndarray, h: float = 1e-6) -> np.ndarray:
    g = np.zeros_like(a)
    for i in np.ndindex(a.shape):
        old = a[i]
        a[i] = old + h
        fp = f(a)
        a[i] = old - h
        fm = f(a)
        a[i] = old
        g[i] = (fp - fm) / (2 * h)
    return g


def test_output_size_rules() -> None:
    assert rp.output_size(7, 3, 2, 0) == 3
    assert rp.output_size(7, 3, 2, 0, ceil_mode=True) == 3
    assert rp.output_size(8, 3, 2, 0, ceil_mode=True) == 4
    assert rp.output_size(8, 3, 2, 0) == 3
    # the last window would start in the right padding: dropped
    assert rp.output_size(5, 2, 2, 1, ceil_mode=True) == 3
    assert rp.output_size(112, 3, 2, 1) == 56
    assert rp.output_size(10, 3, 1, 0, d=2) == 6


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize(
    "cip,dov,ceil", [(True, None, False), (False, None, True), (True, 3, True)]
)
def test_avg_pool_backward_fd(layout: str, cip: bool, dov: int | None, ceil: bool) -> None:
    shape = (2, 3, 5, 6) if layout == "NCHW" else (2, 5, 6, 3)
    x = RNG.standard_normal(shape)
    args = ((3, 2), (2, 2), (1, 1), ceil, cip, dov)
    y = rp.avg_pool(x, *args, layout=layout)
    dy = RNG.standard_normal(y.shape)
    dx = rp.avg_pool_backward(dy, shape, *args, layout=layout)

    def loss(xx):
        return float((rp.avg_pool(xx, *args, layout=layout) * dy).sum())

    np.testing.assert_allclose(dx, numgrad(loss, x.copy()), rtol=1e-6, atol=1e-8)


def test_avg_pool_divisors() -> None:
    x = np.ones((1, 1, 3, 3))
    inc = rp.avg_pool(x, (3, 3), (2, 2), (1, 1), count_include_pad=True)
    exc = rp.avg_pool(x, (3, 3), (2, 2), (1, 1), count_include_pad=False)
    np.testing.assert_allclose(inc[0, 0], [[4 / 9, 4 / 9], [4 / 9, 4 / 9]])
    np.testing.assert_allclose(exc, 1.0)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_max_pool_backward_fd(layout: str) -> None:
    shape = (2, 3, 7, 6) if layout == "NCHW" else (2, 7, 6, 3)
    x = RNG.permutation(np.prod(shape)).reshape(shape).astype(np.float64)  # no ties
    args = ((3, 2), (2, 1), (1, 1), (1, 2), True)
    y, ind = rp.max_pool(x, *args, layout=layout)
    dy = RNG.standard_normal(y.shape)
    dx = rp.max_pool_backward(dy, ind, shape, layout)

    def loss(xx):
        return float((rp.max_pool(xx, *args, layout=layout)[0] * dy).sum())

    np.testing.assert_allclose(dx, numgrad(loss, x.copy(), h=1e-3), rtol=1e-6, atol=1e-8)


def test_max_pool_nan_propagates_and_index() -> None:
    x = np.array([[[1.0, 5.0, np.nan, 2.0]]])
    y, ind = rp.max_pool(x, (2,), (2,), (0,), (1,))
    assert y[0, 0, 0] == 5.0 and ind[0, 0, 0] == 1
    assert np.isnan(y[0, 0, 1]) and ind[0, 0, 1] == 2


@pytest.mark.parametrize("out", [(1, 1), (2, 3), (5, 7)])
def test_adaptive_backward_fd(out: tuple[int, int]) -> None:
    # Its own generator: the draw must not depend on the tests a worker ran before.
    rng = np.random.default_rng(sum(out))
    x = rng.permutation(2 * 5 * 7).reshape(1, 2, 5, 7).astype(np.float64)
    y = rp.adaptive_avg_pool(x, out)
    dy = rng.standard_normal(y.shape)
    dx = rp.adaptive_avg_pool_backward(dy, x.shape)
    # Average pooling is linear: a central difference is exact but for rounding, which a
    # step of 1e-3 divides by 2e-3 (at 1e-6 the noise of f ~ 1e2 reached 5e-8).
    np.testing.assert_allclose(
        dx,
        numgrad(lambda v: float((rp.adaptive_avg_pool(v, out) * dy).sum()), x.copy(), h=1e-3),
        rtol=1e-6,
        atol=1e-8,
    )
    ym, ind = rp.adaptive_max_pool(x, out)
    dxm = rp.max_pool_backward(dy, ind, x.shape)
    np.testing.assert_allclose(
        dxm,
        numgrad(lambda v: float((rp.adaptive_max_pool(v, out)[0] * dy).sum()), x.copy(), h=1e-3),
        rtol=1e-6,
        atol=1e-8,
    )
