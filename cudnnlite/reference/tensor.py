"""NumPy float64 reference of cuDNN's tensor operations (see cudnnlite.ops.tensor and
cudnnlite.ops.reduce for the definitions): op_tensor, add_tensor, reduce_tensor (with
flattened indices), transform."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np


def _f64(a: Any) -> np.ndarray:
    return np.asarray(a).astype(np.float64)


def op_tensor(
    op: str,
    a: Any,
    b: Any = None,
    alpha1: float = 1.0,
    alpha2: float = 1.0,
    beta: float = 0.0,
    c: Any = None,
    nan_propagation: bool = True,
) -> np.ndarray:
    """float64 ``op(alpha1 a, alpha2 b) + beta c`` (c read only when beta != 0); min / max
    give NaN where either operand is NaN (the op's default), or with ``nan_propagation=False``
    the other operand (NumPy's fmin / fmax)."""
    x = alpha1 * _f64(a)
    with np.errstate(invalid="ignore"):
        if op == "sqrt":
            r = np.sqrt(x)
        elif op == "not":
            r = 1.0 - x
        else:
            y = alpha2 * _f64(b)
            pick = {"min": np.minimum, "max": np.maximum} if nan_propagation else {
                "min": np.fmin, "max": np.fmax}  # fmt: skip
            r = {"add": np.add, "mul": np.multiply, **pick}[op](x, y)
    if beta != 0:
        r = r + beta * _f64(c)
    return r


def add_tensor(a: Any, c: Any, alpha: float = 1.0, beta: float = 1.0) -> np.ndarray:
    """float64 ``alpha a + beta c``, a broadcast to c (c read only when beta != 0)."""
    r = alpha * np.broadcast_to(_f64(a), np.shape(c))
    return r + beta * _f64(c) if beta != 0 else r


def _move_last(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    """x with the reduced axes flattened (C order) into the last axis."""
    kept = [d for d in range(x.ndim) if d not in axes]
    moved = np.transpose(x, kept + list(axes))
    count = int(np.prod([x.shape[d] for d in axes], dtype=np.int64))  # (-1 fails if empty)
    return moved.reshape([x.shape[d] for d in kept] + [count])


def reduce_tensor(
    x: Any, op: str, axes: int | Sequence[int] | None = None, keepdims: bool = False
) -> tuple[np.ndarray, np.ndarray | None]:
    """(float64 values, int64 indices or None) of cuDNN's reduction ``op`` over ``axes``."""
    x64 = _f64(x)
    if axes is None or x64.ndim == 0:  # (a 0-d x takes axis 0 or -1: the element itself)
        axes_t = tuple(range(x64.ndim))
    else:
        axes_t = tuple(sorted(a % x64.ndim for a in ((axes,) if np.isscalar(axes) else axes)))
    flat = _move_last(x64, axes_t)
    idx = None
    with np.errstate(invalid="ignore", over="ignore"):
        if op in ("min", "max", "amax"):
            v = np.abs(flat) if op == "amax" else flat
            nan = np.isnan(v)
            pick = np.argmin(v, axis=-1) if op == "min" else np.argmax(v, axis=-1)
            idx = np.where(nan.any(axis=-1), np.argmax(nan, axis=-1), pick)  # first NaN wins
            val = np.take_along_axis(v, idx[..., None], axis=-1)[..., 0]
        elif op == "sum":
            val = flat.sum(-1)
        elif op == "mul":
            val = flat.prod(-1)
        elif op == "avg":
            val = flat.mean(-1)
        elif op == "norm1":
            val = np.abs(flat).sum(-1)
        elif op == "norm2":
            val = np.sqrt((flat * flat).sum(-1))
        elif op == "mul_no_zeros":
            val = np.where(flat == 0, 1.0, flat).prod(-1)
        else:
            raise ValueError(f"unknown reduce op {op!r}")
    if keepdims:
        shape = tuple(1 if d in axes_t else s for d, s in enumerate(x64.shape))
        val = val.reshape(shape)
        idx = None if idx is None else idx.reshape(shape)
    return val, (None if idx is None else idx.astype(np.int64))


def transform_tensor(x: Any, alpha: float = 1.0, beta: float = 0.0, y: Any = None) -> np.ndarray:
    r = alpha * _f64(x)
    return r + beta * _f64(y) if beta != 0 else r


__all__ = ["add_tensor", "op_tensor", "reduce_tensor", "transform_tensor"]
