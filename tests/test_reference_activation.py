"""The float64 activation reference itself: derivatives against central finite
differences of its forward, known values, and limits at infinity."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cudnnlite.reference import activation as ref

# (mode, coef, threshold); kinks of each: points where f' jumps
CASES = [
    ("relu", None, None),
    ("leaky_relu", None, None),
    ("leaky_relu", -0.3, None),
    ("clipped_relu", None, None),
    ("clipped_relu", 2.5, None),
    ("elu", None, None),
    ("elu", 0.4, None),
    ("sigmoid", None, None),
    ("tanh", None, None),
    ("swish", None, None),
    ("swish", 2.0, None),
    ("swish", -0.7, None),
    ("swish", 0.0, None),
    ("gelu", None, None),
    ("gelu_tanh", None, None),
    ("softplus", None, None),
    ("softplus", 2.0, 4.0),
    ("identity", None, None),
]


def _kinks(mode: str, coef: float | None, threshold: float | None) -> list[float]:
    c = ref.DEFAULT_COEF.get(mode) if coef is None else coef
    if mode in ("relu", "leaky_relu", "elu"):
        return [0.0]
    if mode == "clipped_relu":
        return [0.0, c]
    if mode == "softplus":
        t = ref.DEFAULT_THRESHOLD if threshold is None else threshold
        return [t / c]
    return []


@pytest.mark.parametrize(("mode", "coef", "threshold"), CASES)
def test_backward_is_the_derivative_of_forward(
    mode: str, coef: float | None, threshold: float | None
) -> None:
    rng = np.random.default_rng(0)
    x = rng.uniform(-8.0, 8.0, 2000)
    for k in _kinks(mode, coef, threshold):
        x = x[np.abs(x - k) > 1e-3]
    h = 1e-5 * np.maximum(1.0, np.abs(x))
    fd = (
        ref.activation_forward(x + h, mode, coef, threshold)
        - ref.activation_forward(x - h, mode, coef, threshold)
    ) / (2 * h)
    dy = rng.uniform(-2.0, 2.0, x.shape)
    got = ref.activation_backward(dy, x, mode, coef, threshold)
    # central difference: O(h^2 f''') truncation plus eps |f| / h rounding, both < 1e-8
    np.testing.assert_allclose(got, dy * fd, rtol=1e-6, atol=1e-8)


@pytest.mark.parametrize("mode", ["sigmoid", "tanh"])
def test_backward_from_y_equals_backward_from_x(mode: str) -> None:
    x = np.linspace(-6, 6, 101)
    dy = np.cos(x)
    y = ref.activation_forward(x, mode)
    np.testing.assert_allclose(
        ref.activation_backward(dy, x, mode, y=y),
        ref.activation_backward(dy, x, mode),
        rtol=1e-9,
        atol=1e-15,
    )


def test_known_values() -> None:
    f = ref.activation_forward
    assert f(np.array(0.0), "sigmoid") == 0.5
    assert f(np.array(0.0), "softplus") == pytest.approx(math.log(2.0), rel=1e-15)
    assert f(np.array(-1.0), "elu", 2.0) == pytest.approx(2.0 * (math.exp(-1.0) - 1.0), rel=1e-15)
    assert f(np.array(1.0), "swish") == pytest.approx(1.0 / (1.0 + math.exp(-1.0)), rel=1e-15)
    assert f(np.array(1.0), "gelu") == pytest.approx(0.8413447460685429, rel=1e-14)
    # PyTorch's tanh-approximate gelu at 1
    expect = 0.5 * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (1.0 + 0.044715)))
    assert f(np.array(1.0), "gelu_tanh") == pytest.approx(expect, rel=1e-14)
    assert f(np.array(30.0), "softplus") == 30.0  # above the threshold: x itself
    assert f(np.array([-1.0, 3.0, 9.0]), "clipped_relu").tolist() == [0.0, 3.0, 6.0]
    assert f(np.array([-2.0, 2.0]), "leaky_relu").tolist() == [-0.02, 2.0]


def test_large_negative_inputs_keep_relative_accuracy() -> None:
    # erfc and sigmoid(2u) forms: no 1 + erf / 1 + tanh cancellation
    x = np.array(-10.0)
    gelu = 0.5 * x * math.erfc(10.0 / math.sqrt(2.0))
    assert ref.activation_forward(x, "gelu") == pytest.approx(gelu, rel=1e-13)
    u = math.sqrt(2.0 / math.pi) * (-10.0 - 0.044715 * 1000.0)
    assert ref.activation_forward(x, "gelu_tanh") == pytest.approx(
        -10.0 / (1.0 + math.exp(-2.0 * u)), rel=1e-13
    )


@pytest.mark.parametrize("mode", ref.MODES)
def test_limits_and_nan(mode: str) -> None:
    x = np.array([np.inf, -np.inf, np.nan])
    y = ref.activation_forward(x, mode)
    assert np.isnan(y[2]) and not np.isnan(y[:2]).any()
    dx = ref.activation_backward(np.ones(3), x, mode)
    assert not np.isnan(dx[:2]).any()
    assert np.isnan(dx[2]) == (mode != "identity")


def test_bad_mode() -> None:
    with pytest.raises(ValueError, match="mode"):
        ref.activation_forward(np.zeros(2), "nope")
