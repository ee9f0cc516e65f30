"""The float64 backward references against finite differences of the forward reference.

The forward is linear in x and in w, so <conv(x + h*e, w), dy> - <conv(x, w), dy> is
exactly h * <e, dx>: a central difference with h = 1 has no truncation error, and
float64 rounding leaves ~1e-13 relative error. Checked elementwise (every e a unit
vector) on small problems that cover strides with gaps, dilation, groups, asymmetric
padding, both layouts, 1-D and 2-D.
"""

from __future__ import annotations

import numpy as np
import pytest

from cudnnlite.reference.conv import conv_forward
from cudnnlite.reference.conv_backward import (
    conv_backward_bias,
    conv_backward_data,
    conv_backward_filter,
    conv_transpose,
)

CASES = [
    # x spatial, filter, pads, strides, dilations, groups, c, k
    ((5, 6), (3, 3), ((1, 1), (1, 1)), (1, 1), (1, 1), 1, 2, 3),
    ((7, 6), (3, 2), ((0, 2), (1, 0)), (2, 3), (1, 1), 1, 2, 2),  # gaps, floor drops rows
    ((7, 7), (2, 3), ((1, 1), (2, 2)), (2, 1), (2, 2), 2, 4, 2),  # dilation, groups
    ((9,), (3,), ((2, 2),), (3,), (1,), 3, 3, 6),  # 1-D depthwise, mult 2
]


def _forward(x, w, case, cl):  # noqa: ANN001, ANN202
    _, _, pads, strides, dils, groups, _, _ = case
    return conv_forward(x, w, pads, strides, dils, groups, cl)


def _shapes(case, cl):  # noqa: ANN001, ANN202
    spatial, filt, pads, strides, dils, groups, c, k = case
    x = (2, *spatial, c) if cl else (2, c, *spatial)
    w = (k, *filt, c // groups) if cl else (k, c // groups, *filt)
    return x, w


@pytest.mark.parametrize("channels_last", [False, True])
@pytest.mark.parametrize("case", CASES)
def test_backward_references_match_finite_differences(case, channels_last: bool) -> None:  # noqa: ANN001
    spatial, filt, pads, strides, dils, groups, _, _ = case
    rng = np.random.default_rng(0)
    xs, ws = _shapes(case, channels_last)
    x, w = rng.standard_normal(xs), rng.standard_normal(ws)
    y = _forward(x, w, case, channels_last)
    dy = rng.standard_normal(y.shape)
    dx = conv_backward_data(dy, w, spatial, pads, strides, dils, groups, channels_last)
    dw = conv_backward_filter(x, dy, filt, pads, strides, dils, groups, channels_last)
    assert dx.shape == x.shape and dw.shape == w.shape

    def loss(xv, wv):  # noqa: ANN001, ANN202
        return float(np.sum(_forward(xv, wv, case, channels_last) * dy))

    for target, grad, is_x in ((x, dx, True), (w, dw, False)):
        fd = np.zeros(target.shape)
        for i in np.ndindex(target.shape):
            e = np.zeros(target.shape)
            e[i] = 1.0
            plus = loss(x + e, w) if is_x else loss(x, w + e)
            minus = loss(x - e, w) if is_x else loss(x, w - e)
            fd[i] = (plus - minus) / 2
        np.testing.assert_allclose(grad, fd, rtol=1e-10, atol=1e-10)
    ch = -1 if channels_last else 1
    db = conv_backward_bias(dy, channels_last)
    np.testing.assert_allclose(db, np.moveaxis(dy, ch, 0).reshape(dy.shape[ch], -1).sum(1))


def test_conv_transpose_is_the_adjoint_with_output_padding() -> None:
    # stride 2, output_padding 1: the output gains a row/column the forward of it reads
    rng = np.random.default_rng(1)
    x, w = rng.standard_normal((1, 4, 3, 4)), rng.standard_normal((4, 3, 3, 3))
    y = conv_transpose(x, w, stride=(2, 2), padding=(1, 1), output_padding=(1, 1))
    assert y.shape == (1, 3, 6, 8)  # (3-1)*2 - 2 + 2 + 1 + 1
    v = rng.standard_normal(y.shape)
    fwd = conv_forward(v, w, [(1, 1), (1, 1)], (2, 2), (1, 1))
    assert fwd.shape == x.shape
    np.testing.assert_allclose(np.sum(y * v), np.sum(fwd * x), rtol=1e-12)
