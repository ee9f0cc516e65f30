"""NumPy float64 reference of the activation functions, forward and backward.

Every function takes arrays of any float dtype (float16, bfloat16, float32, float64),
computes in float64 and returns float64. The formulas, with ``c`` the mode's
coefficient and ``t`` its threshold: softplus's, or hardtanh's min_val (defaults in
:data:`DEFAULT_COEF` and :data:`DEFAULT_THRESHOLDS`):

==============  =====================================  ========================================
mode            f(x)                                   f'(x)
==============  =====================================  ========================================
relu            max(x, 0)                              1 if x > 0 else 0 (0 at x = 0)
leaky_relu      x if x > 0 else c x        (c 0.01)    1 if x > 0 else c (c at x = 0)
clipped_relu    min(max(x, 0), c)          (c 6)       1 if 0 < x < c else 0 (0 at both ends)
elu             x if x > 0 else c (e^x - 1) (c 1)      1 if x > 0 else c e^x (c at x = 0)
sigmoid         s(x) = 1 / (1 + e^-x)                  s(x) (1 - s(x)), or y (1 - y) given y
tanh            tanh(x)                                1 - tanh(x)^2, or 1 - y^2 given y
swish           x s(c x)                   (c 1)       s(cx) + c x s(cx) (1 - s(cx))
gelu            x Phi(x) = x erfc(-x/sqrt2) / 2        Phi(x) + x phi(x), phi = e^(-x^2/2)/sqrt(2pi)
gelu_tanh       x s(2u), u = sqrt(2/pi)(x + 0.044715 x^3)   s(2u) + 2 x s(2u) s(-2u) u'(x)
softplus        x if cx > t else log(1 + e^(cx)) / c   1 if cx > t else s(cx)   (c 1, t 20)
identity        x                                      1
hardtanh        min(max(x, t), c)     (t -1, c 1)      1 if t < x < c else 0 (0 at both ends)
hardswish       x min(max(x + 3, 0), 6) / 6            0 if x <= -3, x/3 + 1/2 if x < 3, else 1
hardsigmoid     min(max(x + 3, 0), 6) / 6              1/6 if -3 < x < 3 else 0
mish            x tanh(sp(x)), sp(x) = log(1 + e^x)    t + x s(x) (1 - t^2), t = tanh(sp(x))
==============  =====================================  ========================================

hardtanh's bounds travel as (threshold, coef) = (min_val, max_val), min_val <= max_val.

Conventions shared with the kernels (and with PyTorch where it defines one):
 - the derivative at a kink is the one in the table (PyTorch's choice);
 - NaN in x gives NaN in f and in the gradient (identity's gradient is dy itself);
 - limits at infinity are used where the formula would give inf * 0: swish, gelu and
   gelu_tanh, hardswish and mish are -0 at x = -inf and their derivatives are 0 or 1
   at x = +-inf (PyTorch's CPU kernels give NaN there: a deliberate difference);
 - 0.5 (1 + tanh u) is evaluated as s(2u) and Phi through erfc, so large negative x
   keeps full relative accuracy.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

MODES = (
    "relu",
    "leaky_relu",
    "clipped_relu",
    "elu",
    "sigmoid",
    "tanh",
    "swish",
    "gelu",
    "gelu_tanh",
    "softplus",
    "identity",
    "hardtanh",
    "hardswish",
    "hardsigmoid",
    "mish",
)

#: The coefficient each mode uses when ``coef`` is None (modes not listed take none).
DEFAULT_COEF = {
    "leaky_relu": 0.01,
    "clipped_relu": 6.0,
    "elu": 1.0,
    "swish": 1.0,
    "softplus": 1.0,
    "hardtanh": 1.0,  # max_val
}
#: softplus's threshold when ``threshold`` is None (PyTorch's default).
DEFAULT_THRESHOLD = 20.0
#: The threshold of each mode that takes one, when ``threshold`` is None: softplus's
#: linear-region threshold and hardtanh's min_val (PyTorch's defaults).
DEFAULT_THRESHOLDS = {"softplus": DEFAULT_THRESHOLD, "hardtanh": -1.0}

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)
_INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
_GELU_CUBIC = 0.044715
_erfc = np.frompyfunc(math.erfc, 1, 1)


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def _check_mode(mode: str) -> None:
    if mode not in MODES:
        raise ValueError(f"mode: expected one of {', '.join(MODES)}, got {mode!r}")


def _coef(mode: str, coef: float | None) -> float:
    return float(DEFAULT_COEF.get(mode, 0.0) if coef is None else coef)


def _threshold(threshold: float | None, mode: str = "softplus") -> float:
    return float(DEFAULT_THRESHOLDS.get(mode, 0.0) if threshold is None else threshold)


def sigmoid(x: np.ndarray) -> np.ndarray:
    """1 / (1 + e^-x) without overflow warnings, exact to float64 for all x."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def _gated(x: np.ndarray, s: np.ndarray) -> np.ndarray:
    # x * s for a gate s in [0, 1]; a gate that is exactly 0 gives a signed zero even for
    # infinite x (the limit), instead of inf * 0 = NaN.
    return np.where(s == 0, np.copysign(0.0, x), x * s)


def _clamp(x: np.ndarray, lo: float, hi: float) -> np.ndarray:
    # by comparisons, as PyTorch: NaN passes through, and -0 too when lo is 0
    return np.where(x < lo, lo, np.where(x > hi, hi, x))


def _tanh_softplus(x: np.ndarray) -> np.ndarray:
    # log1p(e^x) overflows to inf for x > 709, where tanh is 1 anyway
    return np.tanh(np.log1p(np.exp(x)))


def _normal_cdf(x: np.ndarray) -> np.ndarray:
    return 0.5 * np.asarray(_erfc(-x / math.sqrt(2.0)), dtype=np.float64)  # 0-d gives a float


def activation_forward(
    x: Any, mode: str, coef: float | None = None, threshold: float | None = None
) -> np.ndarray:
    """f(x) in float64 for ``mode`` (see the module's table of formulas)."""
    _check_mode(mode)
    x = _f64(x)
    c, t = _coef(mode, coef), _threshold(threshold, mode)
    with np.errstate(all="ignore"):
        if mode == "relu":
            return np.where(x <= 0, 0.0, x)
        if mode == "leaky_relu":
            return np.where(x > 0, x, x * c)
        if mode == "clipped_relu":
            return np.where(x <= 0, 0.0, np.where(x >= c, c, x))
        if mode == "elu":
            return np.where(x > 0, x, c * np.expm1(x))
        if mode == "sigmoid":
            return sigmoid(x)
        if mode == "tanh":
            return np.tanh(x)
        if mode == "swish":
            bx = np.zeros_like(x) if c == 0 else c * x
            return _gated(x, sigmoid(bx))
        if mode == "gelu":
            return _gated(x, _normal_cdf(x))
        if mode == "gelu_tanh":
            u = _SQRT_2_OVER_PI * (x + _GELU_CUBIC * x**3)
            return _gated(x, sigmoid(2.0 * u))
        if mode == "softplus":
            bx = c * x
            soft = (np.maximum(bx, 0.0) + np.log1p(np.exp(-np.abs(bx)))) / c
            return np.where(bx > t, x, soft)
        if mode == "hardtanh":
            return _clamp(x, t, c)
        if mode == "hardswish":
            r = _clamp(x + 3.0, 0.0, 6.0)
            return np.where(r >= 6.0, x, _gated(x, r) / 6.0)
        if mode == "hardsigmoid":
            return _clamp(x + 3.0, 0.0, 6.0) / 6.0
        if mode == "mish":
            return _gated(x, _tanh_softplus(x))
        return x.copy()  # identity


def activation_backward(
    dy: Any,
    x: Any,
    mode: str,
    coef: float | None = None,
    threshold: float | None = None,
    *,
    y: Any = None,
) -> np.ndarray:
    """dx = dy * f'(x) in float64 (see the module's table of derivatives).

    For sigmoid and tanh, a given ``y`` (the forward output) is used instead of x, as
    cuDNN does: y (1 - y) and 1 - y^2.
    """
    _check_mode(mode)
    dy, x = _f64(dy), _f64(x)
    c, t = _coef(mode, coef), _threshold(threshold, mode)
    nan_x = np.isnan(x)
    with np.errstate(all="ignore"):
        if mode == "relu":
            g = np.where(x > 0, dy, 0.0)
        elif mode == "leaky_relu":
            g = np.where(x > 0, dy, dy * c)
        elif mode == "clipped_relu":
            g = np.where((x > 0) & (x < c), dy, 0.0)
        elif mode == "elu":
            g = np.where(x > 0, dy, dy * (c * np.exp(x)))
        elif mode == "sigmoid":
            if y is not None:
                yy = _f64(y)
                return dy * (yy * (1.0 - yy))
            e = np.exp(-np.abs(x))
            g = dy * (e / (1.0 + e) ** 2)
        elif mode == "tanh":
            if y is not None:
                yy = _f64(y)
                return dy * (1.0 - yy * yy)
            e = np.exp(-2.0 * np.abs(x))
            g = dy * (4.0 * e / (1.0 + e) ** 2)
        elif mode == "swish":
            bx = np.zeros_like(x) if c == 0 else c * x
            s, sn = sigmoid(bx), sigmoid(-bx)
            g = dy * np.where(np.isinf(x), s, s + (x * sn) * (c * s))
        elif mode == "gelu":
            cdf = _normal_cdf(x)
            pdf = _INV_SQRT_2PI * np.exp(-0.5 * x * x)
            g = dy * np.where(np.isinf(x), cdf, cdf + x * pdf)
        elif mode == "gelu_tanh":
            # beyond |x| = 20 the second term is below 1e-250: the derivative is 0 or 1
            xc = np.clip(x, -20.0, 20.0)
            u = _SQRT_2_OVER_PI * (xc + _GELU_CUBIC * xc**3)
            du = _SQRT_2_OVER_PI * (1.0 + 3.0 * _GELU_CUBIC * xc * xc)
            s, sn = sigmoid(2.0 * u), sigmoid(-2.0 * u)
            inner = s + 2.0 * xc * s * sn * du
            g = dy * np.where(np.abs(x) > 20.0, (x > 0).astype(np.float64), inner)
        elif mode == "softplus":
            bx = c * x
            z = np.exp(bx)  # PyTorch's z / (z + 1): a subnormal z keeps an infinite dy infinite
            g = np.where(bx > t, dy, dy * z / (z + 1.0))
        elif mode == "hardtanh":
            g = np.where((x > t) & (x < c), dy, 0.0)
        elif mode == "hardswish":
            g = np.where(x <= -3.0, 0.0, np.where(x < 3.0, dy * (x / 3.0 + 0.5), dy))
        elif mode == "hardsigmoid":
            g = np.where((x > -3.0) & (x < 3.0), dy / 6.0, 0.0)
        elif mode == "mish":
            th = _tanh_softplus(x)
            g = dy * np.where(np.isinf(x), th, th + x * sigmoid(x) * (1.0 - th * th))
        else:  # identity
            return dy.copy()
    return np.where(nan_x, np.nan, g)


__all__ = [
    "DEFAULT_COEF",
    "DEFAULT_THRESHOLD",
    "DEFAULT_THRESHOLDS",
    "MODES",
    "activation_backward",
    "activation_forward",
]
