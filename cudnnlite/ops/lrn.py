"""Cross-channel local response norm (cuDNN's LRN_CROSS_CHANNEL) and its backward:
``lrn_fwd``, and ``lrn_scale`` then ``lrn_bwd``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..runtime.graph import graph_safe
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ._arrays import array_module, as_array, float_dtype, same_dtype, same_shape
from .norm_common import (
    _BLOCK,
    _LRN_DTYPE,
    _acc,
    _check_out,
    _deliver,
    _dense,
    _layout,
    _struct,
    _table,
)


def _lrn_struct(
    x: Any, size: Any, alpha: Any, beta: Any, k: Any, layout: str, dt: dtypes.DType
) -> np.void:
    if x.ndim < 2:
        raise BadParamError(f"x: expected at least 2 dims (N, C, ...), got shape {x.shape}")
    if (isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 1
            or size >= 2**31):  # fmt: skip
        raise BadParamError(f"size: expected a positive int below 2^31, got {size!r}")
    for name, v in (("alpha", alpha), ("beta", beta), ("k", k)):
        if (
            isinstance(v, bool)
            or not isinstance(v, (int, float, np.integer, np.floating))
            or (not math.isfinite(float(v)))
        ):
            raise BadParamError(f"{name}: expected a finite number, got {v!r}")
    if float(k) <= 0 and float(alpha) <= 0:
        raise BadParamError(f"k: expected k > 0 (the scale must stay positive), got {k!r}")
    c = x.shape[-1] if layout == "NHWC" else x.shape[1]
    cstride = 1 if layout == "NHWC" else math.prod(x.shape[2:])
    return _struct(
        _LRN_DTYPE,
        dt,
        n=x.size,
        channels=c,
        cstride=cstride,
        size=int(size),
        alpha_over_n=float(alpha) / int(size),
        beta=float(beta),
        k=float(k),
    )


@with_stream
def lrn(
    x: Any,
    size: int,
    alpha: float = 1e-4,
    beta: float = 0.75,
    k: float = 1.0,
    *,
    layout: str = "NCHW",
    out: Any = None,
) -> Any:
    """Cross-channel local response norm (``torch.nn.functional.local_response_norm``;
    cuDNN's LRN_CROSS_CHANNEL with lrnN = size):
    ``y = x / (k + alpha / size * sum_{window} x^2) ** beta``."""
    backend = backend_for(x, out, names=("x", "out"))
    x = as_array("x", x)
    dt = float_dtype("x", x)
    s = _lrn_struct(x, size, alpha, beta, k, _layout(layout), dt)
    _check_out(out, x, backend, {"x": x})
    xd = _dense(x)
    y = array_module(x).empty(x.shape, x.dtype)
    if x.size:
        table = _table(backend, dt)
        table.launch("lrn_fwd", (table.grid_for(x.size),), (_BLOCK,), (xd, y, s))
    return _deliver(y, out)


@with_stream
def lrn_backward(
    dy: Any,
    x: Any,
    size: int,
    alpha: float = 1e-4,
    beta: float = 0.75,
    k: float = 1.0,
    *,
    layout: str = "NCHW",
) -> Any:
    """dx of :func:`lrn` (recomputes the scale from x; workspace in the compute type)."""
    backend = backend_for(dy, x, names=("dy", "x"))
    x = as_array("x", x)
    dy = as_array("dy", dy)
    dt = float_dtype("x", x)
    same_dtype(("x", "dy"), (x, dy))
    same_shape(("x", "dy"), (x, dy))
    s = _lrn_struct(x, size, alpha, beta, k, _layout(layout), dt)
    xp = array_module(x)
    dx = xp.empty(x.shape, x.dtype)
    if x.size:
        table = _table(backend, dt)
        t = xp.empty((x.size,), _acc(dt))
        sp = xp.empty((x.size,), _acc(dt))
        xd, dyd = _dense(x), _dense(dy)
        grid = (table.grid_for(x.size),)
        table.launch("lrn_scale", grid, (_BLOCK,), (dyd, xd, t, sp, s))
        table.launch("lrn_bwd", grid, (_BLOCK,), (dyd, xd, t, sp, dx, s))
    return dx


__all__ = ["lrn", "lrn_backward"]

# Kernel launches only, host copies reported: an emulator graph may replay them, and a
# repeated call replays its launch template (runtime.templates).
graph_safe(lrn, lrn_backward)
