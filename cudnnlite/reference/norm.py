"""NumPy float64 reference of normalization layers, forward and backward.

Every function takes arrays of any float dtype and computes in float64. Semantics are
PyTorch's (``torch.nn.functional.batch_norm``, ``layer_norm``, ``group_norm``,
``instance_norm``, ``rms_norm``, ``local_response_norm``) plus cuDNN's batch-norm modes:

- batch norm, ``mode="spatial"``: statistics per channel over N and the spatial dims;
  ``mode="per_activation"``: per feature ``x[0].shape`` over N only. Training saves the
  batch mean and ``invstd = 1 / sqrt(var + eps)`` (biased variance) and updates
  ``running = (1 - momentum) running + momentum batch``, with the *unbiased* variance
  ``var * m / (m - 1)`` for running_var (m = elements per channel);
- the fused form (cuDNN's BN_ADD_ACTIVATION) is ``act(bn(x) + z)`` with the activation
  modes of :mod:`cudnnlite.reference.activation`;
- layer / group / instance / RMS norm save per-row ``mean`` and ``rstd`` (RMS: ``rstd``
  only); affine parameters are optional;
- LRN across channels (PyTorch's window ``[c - size//2, c + (size-1)//2]``):
  ``y = x / (k + alpha / size * sum x^2) ** beta``.

Layouts: ``"NCHW"`` = ``(N, C, *spatial)``, ``"NHWC"`` = ``(N, *spatial, C)``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from . import activation as _act


def _f64(a: Any) -> np.ndarray | None:
    return None if a is None else np.asarray(a).astype(np.float64)


def _channel_axis(ndim: int, layout: str) -> int:
    return ndim - 1 if layout == "NHWC" else 1


def _bn_axes(ndim: int, mode: str, layout: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(reduced axes, parameter broadcast shape helper axes)."""
    if mode == "per_activation":
        return (0,), tuple(range(1, ndim))
    c = _channel_axis(ndim, layout)
    return tuple(a for a in range(ndim) if a != c), (c,)


def _bshape(x: np.ndarray, kept: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(x.shape[a] if a in kept else 1 for a in range(x.ndim))


def _act_fwd(u: np.ndarray, activation: str | None, coef: Any) -> np.ndarray:
    if activation is None or activation == "identity":
        return u
    return _act.activation_forward(u, activation, coef)


def batch_norm_train(
    x: Any,
    gamma: Any,
    beta: Any,
    eps: float = 1e-5,
    running_mean: Any = None,
    running_var: Any = None,
    momentum: float = 0.1,
    mode: str = "spatial",
    layout: str = "NCHW",
    z: Any = None,
    activation: str | None = None,
    coef: Any = None,
) -> dict[str, np.ndarray | None]:
    """Training forward: keys y, mean, invstd, running_mean, running_var (the updated
    running statistics, None where not given)."""
    a = _f64(x)
    red, kept = _bn_axes(a.ndim, mode, layout)
    bs = _bshape(a, kept)
    m = math.prod(a.shape[i] for i in red)
    mean = a.mean(axis=red)
    var = ((a - mean.reshape(bs)) ** 2).mean(axis=red)
    invstd = 1.0 / np.sqrt(var + eps)
    u = (a - mean.reshape(bs)) * invstd.reshape(bs)
    u = u * _f64(gamma).reshape(bs) + _f64(beta).reshape(bs)
    if z is not None:
        u = u + _f64(z)
    out: dict[str, np.ndarray | None] = {
        "y": _act_fwd(u, activation, coef),
        "mean": mean,
        "invstd": invstd,
        "running_mean": None,
        "running_var": None,
    }
    if running_mean is not None:
        out["running_mean"] = (1 - momentum) * _f64(running_mean) + momentum * mean
    if running_var is not None:
        unbiased = var * m / (m - 1)
        out["running_var"] = (1 - momentum) * _f64(running_var) + momentum * unbiased
    return out


def batch_norm_inference(
    x: Any,
    gamma: Any,
    beta: Any,
    running_mean: Any,
    running_var: Any,
    eps: float = 1e-5,
    mode: str = "spatial",
    layout: str = "NCHW",
    z: Any = None,
    activation: str | None = None,
    coef: Any = None,
) -> np.ndarray:
    a = _f64(x)
    _, kept = _bn_axes(a.ndim, mode, layout)
    bs = _bshape(a, kept)
    u = (a - _f64(running_mean).reshape(bs)) / np.sqrt(_f64(running_var).reshape(bs) + eps)
    u = u * _f64(gamma).reshape(bs) + _f64(beta).reshape(bs)
    if z is not None:
        u = u + _f64(z)
    return _act_fwd(u, activation, coef)


def batch_norm_backward(
    dy: Any,
    x: Any,
    gamma: Any,
    mean: Any,
    invstd: Any,
    mode: str = "spatial",
    layout: str = "NCHW",
    beta: Any = None,
    z: Any = None,
    activation: str | None = None,
    coef: Any = None,
) -> dict[str, np.ndarray | None]:
    """Training backward from the saved batch statistics: keys dx, dgamma, dbeta and dz
    (the gradient of z in the fused form; None without z). With an activation, ``beta``
    (and ``z``) are needed to recompute its input."""
    a, g = _f64(x), _f64(dy)
    red, kept = _bn_axes(a.ndim, mode, layout)
    bs = _bshape(a, kept)
    m = math.prod(a.shape[i] for i in red)
    xhat = (a - _f64(mean).reshape(bs)) * _f64(invstd).reshape(bs)
    gam = _f64(gamma).reshape(bs)
    if activation is not None and activation != "identity":
        u = xhat * gam + _f64(beta).reshape(bs)
        if z is not None:
            u = u + _f64(z)
        g = _act.activation_backward(g, u, activation, coef)
    dbeta = g.sum(axis=red)
    dgamma = (g * xhat).sum(axis=red)
    dx = (gam * _f64(invstd).reshape(bs) / m) * (
        m * g - dbeta.reshape(bs) - xhat * dgamma.reshape(bs)
    )
    return {"dx": dx, "dgamma": dgamma, "dbeta": dbeta, "dz": g if z is not None else None}


# ------------------------------------------------------------------ row norms


def _rows(a: np.ndarray, k: int) -> np.ndarray:
    """View of a as (rows, k)."""
    return a.reshape(-1, k)


def layer_norm(
    x: Any,
    normalized_shape: Sequence[int],
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y, mean, rstd); mean and rstd have shape x.shape[:-len(normalized_shape)]."""
    a = _f64(x)
    k = math.prod(normalized_shape)
    r = _rows(a, k)
    mean = r.mean(axis=1)
    var = ((r - mean[:, None]) ** 2).mean(axis=1)
    rstd = 1.0 / np.sqrt(var + eps)
    y = (r - mean[:, None]) * rstd[:, None]
    if weight is not None:
        y = y * _f64(weight).reshape(1, k)
    if bias is not None:
        y = y + _f64(bias).reshape(1, k)
    lead = a.shape[: a.ndim - len(normalized_shape)]
    return y.reshape(a.shape), mean.reshape(lead), rstd.reshape(lead)


def layer_norm_backward(
    dy: Any, x: Any, normalized_shape: Sequence[int], mean: Any, rstd: Any, weight: Any = None
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dweight, dbias), the parameter gradients shaped like normalized_shape."""
    a, g = _f64(x), _f64(dy)
    k = math.prod(normalized_shape)
    r, gr = _rows(a, k), _rows(g, k)
    mu, rs = _f64(mean).reshape(-1, 1), _f64(rstd).reshape(-1, 1)
    xhat = (r - mu) * rs
    w = np.ones((1, k)) if weight is None else _f64(weight).reshape(1, k)
    gw = gr * w
    dx = rs * (gw - gw.mean(axis=1, keepdims=True) - xhat * (gw * xhat).mean(axis=1, keepdims=True))
    dweight = (gr * xhat).sum(axis=0).reshape(tuple(normalized_shape))
    dbias = gr.sum(axis=0).reshape(tuple(normalized_shape))
    return dx.reshape(a.shape), dweight, dbias


def rms_norm(
    x: Any, normalized_shape: Sequence[int], weight: Any = None, eps: float | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """(y, rstd) with rstd = 1 / sqrt(mean(x^2) + eps); eps None is the machine epsilon
    of x's dtype, as PyTorch."""
    if eps is None:
        eps = float(_finfo_eps(np.asarray(x).dtype))
    a = _f64(x)
    k = math.prod(normalized_shape)
    r = _rows(a, k)
    rstd = 1.0 / np.sqrt((r * r).mean(axis=1) + eps)
    y = r * rstd[:, None]
    if weight is not None:
        y = y * _f64(weight).reshape(1, k)
    lead = a.shape[: a.ndim - len(normalized_shape)]
    return y.reshape(a.shape), rstd.reshape(lead)


def rms_norm_backward(
    dy: Any, x: Any, normalized_shape: Sequence[int], rstd: Any, weight: Any = None
) -> tuple[np.ndarray, np.ndarray]:
    """(dx, dweight)."""
    a, g = _f64(x), _f64(dy)
    k = math.prod(normalized_shape)
    r, gr = _rows(a, k), _rows(g, k)
    rs = _f64(rstd).reshape(-1, 1)
    xhat = r * rs
    w = np.ones((1, k)) if weight is None else _f64(weight).reshape(1, k)
    gw = gr * w
    dx = rs * (gw - xhat * (gw * xhat).mean(axis=1, keepdims=True))
    dweight = (gr * xhat).sum(axis=0).reshape(tuple(normalized_shape))
    return dx.reshape(a.shape), dweight


def _finfo_eps(dtype: Any) -> float:
    from .. import dtypes

    return float(dtypes.finfo(dtype).eps)


def _to_nc(a: np.ndarray, layout: str) -> np.ndarray:
    return np.moveaxis(a, -1, 1) if layout == "NHWC" else a


def _from_nc(a: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, 1, -1) if layout == "NHWC" else a)


def group_norm(
    x: Any,
    num_groups: int,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    layout: str = "NCHW",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(y, mean, rstd); mean and rstd have shape (N, num_groups)."""
    a = _to_nc(_f64(x), layout)
    n, c = a.shape[:2]
    r = a.reshape(n * num_groups, -1)
    mean = r.mean(axis=1)
    var = ((r - mean[:, None]) ** 2).mean(axis=1)
    rstd = 1.0 / np.sqrt(var + eps)
    y = ((r - mean[:, None]) * rstd[:, None]).reshape(a.shape)
    bs = (1, c) + (1,) * (a.ndim - 2)
    if weight is not None:
        y = y * _f64(weight).reshape(bs)
    if bias is not None:
        y = y + _f64(bias).reshape(bs)
    return _from_nc(y, layout), mean.reshape(n, num_groups), rstd.reshape(n, num_groups)


def group_norm_backward(
    dy: Any,
    x: Any,
    num_groups: int,
    mean: Any,
    rstd: Any,
    weight: Any = None,
    layout: str = "NCHW",
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(dx, dweight, dbias)."""
    a, g = _to_nc(_f64(x), layout), _to_nc(_f64(dy), layout)
    n, c = a.shape[:2]
    bs = (1, c) + (1,) * (a.ndim - 2)
    w = np.ones(bs) if weight is None else _f64(weight).reshape(bs)
    rows = n * num_groups
    xhat = (a.reshape(rows, -1) - _f64(mean).reshape(-1, 1)) * _f64(rstd).reshape(-1, 1)
    xhat = xhat.reshape(a.shape)
    gw = (g * w).reshape(rows, -1)
    xr = xhat.reshape(rows, -1)
    dx = _f64(rstd).reshape(-1, 1) * (
        gw - gw.mean(axis=1, keepdims=True) - xr * (gw * xr).mean(axis=1, keepdims=True)
    )
    red = (0,) + tuple(range(2, a.ndim))
    dweight = (g * xhat).sum(axis=red)
    dbias = g.sum(axis=red)
    return _from_nc(dx.reshape(a.shape), layout), dweight, dbias


def instance_norm(
    x: Any, weight: Any = None, bias: Any = None, eps: float = 1e-5, layout: str = "NCHW"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group norm with one group per channel: (y, mean, rstd) with shape (N, C)."""
    c = np.shape(x)[_channel_axis(np.ndim(x), layout)]
    return group_norm(x, c, weight, bias, eps, layout)


def instance_norm_backward(
    dy: Any, x: Any, mean: Any, rstd: Any, weight: Any = None, layout: str = "NCHW"
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    c = np.shape(x)[_channel_axis(np.ndim(x), layout)]
    return group_norm_backward(dy, x, c, mean, rstd, weight, layout)


# ------------------------------------------------------------------ LRN


def _lrn_sums(sq: np.ndarray, size: int) -> np.ndarray:
    """Window sums over axis 1: s[c] = sum of sq[c - size//2 .. c + (size-1)//2]."""
    c = sq.shape[1]
    out = np.zeros_like(sq)
    for ch in range(c):
        lo, hi = max(0, ch - size // 2), min(c, ch + (size - 1) // 2 + 1)
        out[:, ch] = sq[:, lo:hi].sum(axis=1)
    return out


def lrn(
    x: Any,
    size: int,
    alpha: float = 1e-4,
    beta: float = 0.75,
    k: float = 1.0,
    layout: str = "NCHW",
) -> np.ndarray:
    a = _to_nc(_f64(x), layout)
    scale = k + alpha / size * _lrn_sums(a * a, size)
    return _from_nc(a * scale**-beta, layout)


def lrn_backward(
    dy: Any,
    x: Any,
    size: int,
    alpha: float = 1e-4,
    beta: float = 0.75,
    k: float = 1.0,
    layout: str = "NCHW",
) -> np.ndarray:
    """dx_i = dy_i s_i^-b - 2 a b / n x_i sum_{j: i in win(j)} dy_j x_j s_j^(-b-1)."""
    a, g = _to_nc(_f64(x), layout), _to_nc(_f64(dy), layout)
    scale = k + alpha / size * _lrn_sums(a * a, size)
    t = g * a * scale ** (-beta - 1)
    c = a.shape[1]
    acc = np.zeros_like(a)
    for i in range(c):  # j ranges over channels whose window holds i
        lo, hi = max(0, i - (size - 1) // 2), min(c, i + size // 2 + 1)
        acc[:, i] = t[:, lo:hi].sum(axis=1)
    # beta = 0: the window term is 0 (PyTorch's pow backward at exponent 0), not 0 * a NaN
    # acc; 0 * a keeps x's own NaN / inf NaN, as PyTorch's 2 x * 0
    window = 2.0 * alpha * beta / size * a * acc if beta else 0.0 * a
    dx = g * scale**-beta - window
    return _from_nc(dx, layout)


__all__ = [
    "batch_norm_backward",
    "batch_norm_inference",
    "batch_norm_train",
    "group_norm",
    "group_norm_backward",
    "instance_norm",
    "instance_norm_backward",
    "layer_norm",
    "layer_norm_backward",
    "lrn",
    "lrn_backward",
    "rms_norm",
    "rms_norm_backward",
]
