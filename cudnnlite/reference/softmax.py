"""NumPy float64 reference of softmax and log-softmax, forward and backward.

``softmax(x, axis)`` = exp(x - m) / sum(exp(x - m)) with m the max along ``axis``
(log: (x - m) - log(sum(exp(x - m)))). A row of only -inf gives NaN; +inf gives NaN
(inf - inf), as PyTorch. Backward takes the forward output y (as cuDNN does):
dx = y (dy - sum(dy y)), log: dx = dy - exp(y) sum(dy). ``mode="instance"`` normalizes
over every axis but the first, ``mode="channel"`` over axis 1.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _axes(ndim: int, axis: int | None, mode: str | None) -> tuple[int, ...]:
    if mode == "instance":
        return tuple(range(1, ndim))
    if mode == "channel":
        return (1,)
    if ndim == 0:  # a 0-d x is a row of one element (axis 0, -1 or None): reduce over none
        return ()
    return ((-1 if axis is None else axis) % ndim,)


def softmax(
    x: Any,
    axis: int | None = None,
    *,
    log: bool = False,
    mode: str | None = None,
    fast: bool = False,
) -> np.ndarray:
    """float64 softmax / log-softmax; ``fast`` skips the max subtraction (it overflows
    where the kernel's fast algorithm does)."""
    x64 = np.asarray(x).astype(np.float64)
    axes = _axes(x64.ndim, axis, mode)
    if not x64.size:  # (np.max of an empty row has no identity)
        return x64
    with np.errstate(invalid="ignore", over="ignore", divide="ignore"):
        m = 0.0 if fast else np.max(x64, axis=axes, keepdims=True)
        z = x64 - m
        s = np.sum(np.exp(z), axis=axes, keepdims=True)
        return z - np.log(s) if log else np.exp(z) / s


def log_softmax(x: Any, axis: int | None = None, *, mode: str | None = None) -> np.ndarray:
    return softmax(x, axis, log=True, mode=mode)


def softmax_backward(
    dy: Any, y: Any, axis: int | None = None, *, log: bool = False, mode: str | None = None
) -> np.ndarray:
    """float64 gradient from the forward output ``y``."""
    dy64 = np.asarray(dy).astype(np.float64)
    y64 = np.asarray(y).astype(np.float64)
    axes = _axes(y64.ndim, axis, mode)
    if log:
        return dy64 - np.exp(y64) * np.sum(dy64, axis=axes, keepdims=True)
    return y64 * (dy64 - np.sum(dy64 * y64, axis=axes, keepdims=True))


softmax_forward = softmax  # the name cudnnlite.reference exports (its `softmax` is this module)

__all__ = ["log_softmax", "softmax", "softmax_backward", "softmax_forward"]
