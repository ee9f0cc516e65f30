"""The float64 normalization references: backward checked against central finite
differences of the forward, forward against direct formulas."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

from cudnnlite.reference import norm as rn


def numgrad(f: Callable[[np.ndarray], float], a: np.ndarray, h: float = 1e-6) -> np.ndarray:
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


RNG = np.random.default_rng(0)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("mode", ["spatial", "per_activation"])
@pytest.mark.parametrize("activation", [None, "relu", "gelu"])
def test_batch_norm_backward_fd(layout: str, mode: str, activation: str | None) -> None:
    x = RNG.standard_normal((3, 4, 2, 3)) + 0.5
    pshape = (x.shape[-1 if layout == "NHWC" else 1],) if mode == "spatial" else x.shape[1:]
    gamma, beta = RNG.uniform(0.5, 1.5, pshape), RNG.standard_normal(pshape)
    z = RNG.standard_normal(x.shape) if activation else None
    dy = RNG.standard_normal(x.shape)

    def loss(xx, gg=gamma, bb=beta, zz=z):
        o = rn.batch_norm_train(
            xx, gg, bb, 1e-3, mode=mode, layout=layout, z=zz, activation=activation
        )
        return float((o["y"] * dy).sum())

    o = rn.batch_norm_train(
        x, gamma, beta, 1e-3, mode=mode, layout=layout, z=z, activation=activation
    )
    g = rn.batch_norm_backward(
        dy, x, gamma, o["mean"], o["invstd"], mode, layout, beta, z, activation
    )
    np.testing.assert_allclose(g["dx"], numgrad(loss, x.copy()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(
        g["dgamma"], numgrad(lambda v: loss(x, v), gamma.copy()), rtol=1e-5, atol=1e-6
    )
    np.testing.assert_allclose(
        g["dbeta"], numgrad(lambda v: loss(x, gamma, v), beta.copy()), rtol=1e-5, atol=1e-6
    )
    if z is not None:
        np.testing.assert_allclose(
            g["dz"], numgrad(lambda v: loss(x, gamma, beta, v), z.copy()), rtol=1e-5, atol=1e-6
        )


def test_batch_norm_running_stats_unbiased() -> None:
    x = RNG.standard_normal((4, 3, 2, 2))
    o = rn.batch_norm_train(x, np.ones(3), np.zeros(3), 1e-5, np.zeros(3), np.ones(3), 0.1)
    xs = np.moveaxis(x, 1, 0).reshape(3, -1)
    np.testing.assert_allclose(o["running_mean"], 0.1 * xs.mean(axis=1))
    np.testing.assert_allclose(o["running_var"], 0.9 + 0.1 * xs.var(axis=1, ddof=1))
    np.testing.assert_allclose(o["invstd"], 1 / np.sqrt(xs.var(axis=1) + 1e-5))


def test_layer_norm_backward_fd() -> None:
    x = RNG.standard_normal((3, 2, 5))
    w, b = RNG.standard_normal((2, 5)), RNG.standard_normal((2, 5))
    dy = RNG.standard_normal(x.shape)

    def loss(xx, ww=w, bb=b):
        return float((rn.layer_norm(xx, (2, 5), ww, bb, 1e-3)[0] * dy).sum())

    _, mean, rstd = rn.layer_norm(x, (2, 5), w, b, 1e-3)
    dx, dw, db = rn.layer_norm_backward(dy, x, (2, 5), mean, rstd, w)
    np.testing.assert_allclose(dx, numgrad(loss, x.copy()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw, numgrad(lambda v: loss(x, v), w.copy()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db, numgrad(lambda v: loss(x, w, v), b.copy()), rtol=1e-5, atol=1e-6)


def test_rms_norm_backward_fd() -> None:
    x = RNG.standard_normal((4, 6))
    w = RNG.standard_normal(6)
    dy = RNG.standard_normal(x.shape)

    def loss(xx, ww=w):
        return float((rn.rms_norm(xx, (6,), ww, 1e-3)[0] * dy).sum())

    _, rstd = rn.rms_norm(x, (6,), w, 1e-3)
    dx, dw = rn.rms_norm_backward(dy, x, (6,), rstd, w)
    np.testing.assert_allclose(dx, numgrad(loss, x.copy()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw, numgrad(lambda v: loss(x, v), w.copy()), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("groups", [1, 2, 6])
def test_group_norm_backward_fd(layout: str, groups: int) -> None:
    shape = (2, 6, 2, 3) if layout == "NCHW" else (2, 2, 3, 6)
    x = RNG.standard_normal(shape)
    w, b = RNG.standard_normal(6), RNG.standard_normal(6)
    dy = RNG.standard_normal(shape)

    def loss(xx, ww=w, bb=b):
        return float((rn.group_norm(xx, groups, ww, bb, 1e-3, layout)[0] * dy).sum())

    _, mean, rstd = rn.group_norm(x, groups, w, b, 1e-3, layout)
    dx, dw, db = rn.group_norm_backward(dy, x, groups, mean, rstd, w, layout)
    np.testing.assert_allclose(dx, numgrad(loss, x.copy()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(dw, numgrad(lambda v: loss(x, v), w.copy()), rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(db, numgrad(lambda v: loss(x, w, v), b.copy()), rtol=1e-5, atol=1e-6)


def test_group_norm_matches_direct_formula() -> None:
    x = RNG.standard_normal((2, 4, 3))
    y, mean, rstd = rn.group_norm(x, 2, None, None, 1e-5)
    g = x.reshape(2, 2, 6)
    expect = (g - g.mean(-1, keepdims=True)) / np.sqrt(g.var(-1, keepdims=True) + 1e-5)
    np.testing.assert_allclose(y, expect.reshape(x.shape))
    np.testing.assert_allclose(mean, g.mean(-1))


@pytest.mark.parametrize("size", [1, 2, 5])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_lrn_backward_fd(size: int, layout: str) -> None:
    x = RNG.standard_normal((2, 7, 3) if layout == "NCHW" else (2, 3, 7))
    dy = RNG.standard_normal(x.shape)

    def loss(xx):
        return float((rn.lrn(xx, size, 0.5, 0.75, 2.0, layout) * dy).sum())

    dx = rn.lrn_backward(dy, x, size, 0.5, 0.75, 2.0, layout)
    np.testing.assert_allclose(dx, numgrad(loss, x.copy()), rtol=1e-5, atol=1e-6)


def test_lrn_window_is_pytorchs() -> None:
    # size 4: channel c sums squares of c-2 .. c+1 (PyTorch pads size//2 before)
    x = np.arange(1.0, 6.0).reshape(1, 5, 1)
    y = rn.lrn(x, 4, alpha=4.0, beta=1.0, k=0.0)
    sq = x[0, :, 0] ** 2
    expect = [x[0, c, 0] / sq[max(0, c - 2) : c + 2].sum() for c in range(5)]
    np.testing.assert_allclose(y[0, :, 0], expect)
