"""Group and instance norm, forward and backward. ``layout="NCHW"`` runs the row-norm
kernels (:mod:`cudnnlite.ops.row_norm`, one row per sample and group); ``layout="NHWC"``
runs natively channels-last (``gn_nhwc_fwd`` / ``gn_nhwc_bwd``, parameter gradients by
``red_chlast_params_nhwc``): no transposed copy. Instance norm's running statistics go
through batch norm's checks (:mod:`cudnnlite.ops.batch_norm`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..runtime.backend import Backend
from ..runtime.graph import graph_safe, note_host_work
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ._arrays import array_module, as_array, float_dtype, same_dtype, same_shape
from .batch_norm import _BnView, _momentum, _running, batch_norm_forward_inference
from .norm_common import (
    _BLOCK,
    _GN_NHWC_DTYPE,
    _GN_ROWS,
    _acc,
    _check_out,
    _deliver,
    _dense,
    _eps,
    _layout,
    _param,
    _reduce,
    _required,
    _struct,
    _table,
)
from .row_norm import _row_backward, _row_forward


def _group_common(x: Any, num_groups: Any, weight: Any, bias: Any, layout: Any) -> tuple:
    """Validated x (C-contiguous), dtype, groups, channels, samples, H*W, weight, bias."""
    x = as_array("x", x)
    dt = float_dtype("x", x)
    _layout(layout)
    if x.ndim < 2:
        raise BadParamError(f"x: expected at least 2 dims (N, C, ...), got shape {x.shape}")
    c = x.shape[-1] if layout == "NHWC" else x.shape[1]
    if (
        isinstance(num_groups, bool)
        or not isinstance(num_groups, (int, np.integer))
        or num_groups < 1
        or c % num_groups
    ):
        raise BadParamError(
            f"num_groups: expected a positive divisor of the {c} channels, got {num_groups!r}"
        )
    w = _dense(_param("weight", weight, (c,), x.dtype))
    b = _dense(_param("bias", bias, (c,), x.dtype))
    n = x.shape[0]
    spatial = math.prod(x.shape[1:-1]) if layout == "NHWC" else math.prod(x.shape[2:])
    return _dense(x), dt, int(num_groups), c, n, spatial, w, b


def _gn_nhwc_shape(
    c: int, g: int, spatial: int, eps: float, weight: Any, bias: Any, dt: dtypes.DType
) -> tuple[np.void, int]:
    """The GnNhwcShape of an NHWC group norm and its tiles (blocks) per sample."""
    cpg = c // g
    gpb = 32 // cpg if cpg < 32 else 1
    tiles = -(-g // gpb)
    s = _struct(
        _GN_NHWC_DTYPE,
        dt,
        spatial=spatial,
        channels=c,
        groups=g,
        cpg=cpg,
        tiles=tiles,
        gpb=gpb,
        eps=eps,
        has_weight=int(weight is not None),
        has_bias=int(bias is not None),
    )
    return s, tiles


def _gn_nhwc_forward(
    x: Any,
    g: int,
    c: int,
    n: int,
    spatial: int,
    w: Any,
    b: Any,
    eps: float,
    backend: Backend,
    dt: dtypes.DType,
) -> tuple[Any, Any, Any]:
    table = _table(backend, dt)
    xp = array_module(x)
    y = xp.empty(x.shape, x.dtype)
    mean = xp.empty((n * g,), _acc(dt))
    rstd = xp.empty((n * g,), _acc(dt))
    s, tiles = _gn_nhwc_shape(c, g, spatial, eps, w, b, dt)
    stretches = _gn_stretches(table, n * tiles, spatial)
    if n * g and stretches > 1:
        # few blocks (a small batch): statistics over stretches of H*W, merged per group
        partial = xp.empty((n * g * stretches * 3,), _acc(dt))
        grid = (n * tiles, stretches)
        table.launch("gn_nhwc_stats", grid, (32, _GN_ROWS), (x, partial, s))
        table.launch("gn_nhwc_finalize", (table.grid_each(n * g),), (_BLOCK,),
                     (x, partial, mean, rstd, np.int64(n * g), np.int32(stretches), s))  # fmt: skip
        table.launch("gn_nhwc_apply", grid, (32, _GN_ROWS), (x, w, b, y, mean, rstd, s))
    elif n * g:
        table.launch("gn_nhwc_fwd", (n * tiles,), (32, _GN_ROWS), (x, w, b, y, mean, rstd, s))
    return y, mean, rstd


def _gn_stretches(table: Any, blocks: int, spatial: int) -> int:
    """Stretches of H*W the NHWC kernels split into: 1 (a block per (sample, tile) of
    groups) unless those blocks are too few for the GPU (table.too_few), else
    table.splits' (each of >= 4 rows a thread); 1 for an empty batch (no blocks)."""
    return table.splits(blocks, spatial, _GN_ROWS * 4) if blocks and table.too_few(blocks) else 1


def _gn_nhwc_backward(
    dy: Any,
    x: Any,
    g: int,
    c: int,
    n: int,
    spatial: int,
    weight: Any,
    mean: Any,
    rstd: Any,
    want_bias: bool,
    backend: Backend,
    dt: dtypes.DType,
) -> tuple[Any, Any, Any]:
    table = _table(backend, dt)
    xp = array_module(x)
    dx = xp.empty(x.shape, x.dtype)
    s, tiles = _gn_nhwc_shape(c, g, spatial, 0.0, weight, None, dt)
    stretches = _gn_stretches(table, n * tiles, spatial)
    if n * g and stretches > 1:
        # few blocks (a small batch): each group's sums over stretches of H*W, then dx
        partial = xp.empty((n * g * stretches * 2,), _acc(dt))
        grid = (n * tiles, stretches)
        table.launch("gn_nhwc_bwd_partial", grid, (32, _GN_ROWS),
                     (dy, x, weight, mean, rstd, partial, s))  # fmt: skip
        table.launch("gn_nhwc_bwd_apply", grid, (32, _GN_ROWS),
                     (dy, x, weight, mean, rstd, partial, dx, s))  # fmt: skip
    elif n * g:
        table.launch(
            "gn_nhwc_bwd", (n * tiles,), (32, _GN_ROWS), (dy, x, weight, mean, rstd, dx, s)
        )
    dweight = dbias = None
    if weight is not None:
        partial, chunks = _reduce(
            table,
            "params_nhwc",
            n * spatial,
            c,
            1,
            (x, dy, None, mean, rstd, None, None),
            groups=g,
            spatial=spatial,
        )
        dweight = xp.empty((c,), x.dtype)
        dbias = xp.empty((c,), x.dtype) if want_bias else None
        table.launch(
            f"sum2_finalize_{dt.short}",
            (table.grid_each(c),),
            (_BLOCK,),
            (partial, dbias, dweight, np.int64(c), np.int32(chunks)),
        )
    return dx, dweight, dbias


@with_stream
def group_norm_forward(
    x: Any,
    num_groups: int,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    layout: str = "NCHW",
    out: Any = None,
) -> tuple[Any, Any, Any]:
    """Group norm: ``(y, mean, rstd)``, statistics (float32, float64 for float64 x) of
    shape (N, num_groups). ``layout="NHWC"`` takes ``(N, *spatial, C)`` and runs natively
    channels-last (``gn_nhwc_fwd``, no transposed copy; with fewer (sample, tile of groups)
    blocks than twice the SMs, statistics over stretches of H*W merged per group,
    ``gn_nhwc_stats`` / ``gn_nhwc_finalize`` / ``gn_nhwc_apply``, and the backward likewise);
    NCHW runs ``rownorm_fwd_mean``
    (a group is a row), or for few long groups split statistics and ``rownorm_apply``
    (``row_norm._split_forward``). x of other strides is copied to a C-contiguous array
    first."""
    backend = backend_for(x, weight, bias, out, names=("x", "weight", "bias", "out"))
    x, dt, g, c, n, spatial, w, b = _group_common(x, num_groups, weight, bias, layout)
    eps = _eps(eps)
    _check_out(out, x, backend, {"x": x})
    if spatial == 0:
        # groups of no elements (empty spatial dims): nothing to launch (the kernels read
        # each group's first element); PyTorch's statistics: mean 0, rstd NaN (0 / 0)
        xp = array_module(x)
        mean, rstd = xp.zeros((n, g), _acc(dt)), xp.full((n, g), np.nan, _acc(dt))
        return _deliver(xp.empty(x.shape, x.dtype), out), mean, rstd
    if layout == "NHWC":
        y, mean, rstd = _gn_nhwc_forward(x, g, c, n, spatial, w, b, eps, backend, dt)
    else:
        y, mean, rstd = _row_forward(
            x, n * g, (c // g) * spatial, g, spatial, w, b, eps, False, backend, dt
        )
    return _deliver(y, out), mean.reshape(n, g), rstd.reshape(n, g)


@with_stream
def group_norm(
    x: Any,
    num_groups: int,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    layout: str = "NCHW",
    out: Any = None,
) -> Any:
    """``torch.nn.functional.group_norm``."""
    return group_norm_forward(x, num_groups, weight, bias, eps, layout=layout, out=out)[0]


@with_stream
def group_norm_backward(
    dy: Any,
    x: Any,
    num_groups: int,
    mean: Any,
    rstd: Any,
    weight: Any = None,
    bias: Any = None,
    *,
    layout: str = "NCHW",
) -> tuple[Any, Any, Any]:
    """``(dx, dweight, dbias)``, parameter gradients None where the parameter is None.
    NHWC runs natively (``gn_nhwc_bwd``, parameter gradients by
    ``red_chlast_params_nhwc``); dy and x of other strides are copied to C-contiguous
    arrays first."""
    backend = backend_for(dy, x, mean, rstd, weight, names=("dy", "x", "mean", "rstd", "weight"))
    x, dt, g, c, n, spatial, w, b = _group_common(x, num_groups, weight, bias, layout)
    dy = as_array("dy", dy)
    same_dtype(("x", "dy"), (x, dy))
    same_shape(("x", "dy"), (x, dy))
    dy = _dense(dy)
    mean = _dense(_param("mean", _required("mean", mean), (n, g), _acc(dt))).reshape(-1)
    rstd = _dense(_param("rstd", _required("rstd", rstd), (n, g), _acc(dt))).reshape(-1)
    wgrad = w if w is not None else (array_module(x).ones((c,), x.dtype) if b is not None else None)
    if spatial == 0:
        # nothing to launch; PyTorch's gradients: dbias 0 (a sum over nothing), dweight NaN
        # (its per-channel sums times the NaN rstd of an empty group)
        xp = array_module(x)
        return (xp.empty(x.shape, x.dtype),
                xp.full((c,), np.nan, x.dtype) if w is not None else None,
                xp.zeros((c,), x.dtype) if b is not None else None)  # fmt: skip
    if layout == "NHWC":
        dx, dw, db = _gn_nhwc_backward(
            dy, x, g, c, n, spatial, wgrad, mean, rstd, b is not None, backend, dt
        )
    else:
        dx, dw, db = _row_backward(
            dy,
            x,
            n * g,
            (c // g) * spatial,
            g,
            spatial,
            wgrad,
            mean,
            rstd,
            False,
            backend,
            dt,
            c,
            b is not None,
        )
    return dx, (dw if w is not None else None), db


@with_stream
def instance_norm_forward(
    x: Any,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    layout: str = "NCHW",
    out: Any = None,
    running_mean: Any = None,
    running_var: Any = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
) -> tuple[Any, Any, Any]:
    """Instance norm (statistics per sample and channel): ``(y, mean, rstd)`` with
    statistics of shape (N, C), as ``torch.nn.functional.instance_norm``.

    ``running_mean``, ``running_var``: optional (C,) C-contiguous arrays of the batch-norm
    parameter dtype (float32, float64 for float64 x). With ``use_input_stats`` (default)
    each given one is updated in place as PyTorch does: ``r = (1 - momentum) r + momentum
    s`` with s the per-instance mean (or unbiased variance) averaged over the batch. With
    ``use_input_stats=False`` both are needed and normalize every instance (the
    batch-norm inference formula; weight and bias then in the parameter dtype too); mean
    and rstd are then None, and the backward is ``batch_norm_backward(...,
    training=False)``."""
    if not isinstance(use_input_stats, (bool, np.bool_)):
        raise BadParamError(f"use_input_stats: expected True or False, got {use_input_stats!r}")
    x = as_array("x", x)
    _layout(layout)
    if x.ndim < 2:
        raise BadParamError(f"x: expected at least 2 dims (N, C, ...), got shape {x.shape}")
    c = x.shape[-1 if layout == "NHWC" else 1]
    if not use_input_stats:
        for name, a in (("running_mean", running_mean), ("running_var", running_var)):
            if a is None:
                raise BadParamError(
                    f"{name}: use_input_stats=False normalizes with the running statistics; "
                    "give running_mean and running_var"
                )
        _momentum(momentum)
        y = batch_norm_forward_inference(x, running_mean, running_var, weight, bias, eps=eps,
                                         layout=layout, out=out)  # fmt: skip
        return y, None, None
    momentum = _momentum(momentum)
    dt = float_dtype("x", x)
    updating = running_mean is not None or running_var is not None
    view = _BnView(tuple(x.shape), "spatial", layout) if updating else None
    rm = rv = None
    if view is not None:
        rm = _running("running_mean", running_mean, view, dt)
        rv = _running("running_var", running_var, view, dt)
        spatial = math.prod(x.shape[1:-1] if layout == "NHWC" else x.shape[2:])
        if spatial < 2:
            raise BadParamError(
                f"x: updating running statistics needs more than one spatial element per "
                f"instance (an unbiased variance), got shape {tuple(x.shape)}"
            )
    y, mean, rstd = group_norm_forward(x, c, weight, bias, eps, layout=layout, out=out)
    if view is not None:
        _update_running_instance(rm, rv, mean, rstd, float(eps), momentum, spatial)
    return y, mean, rstd


def _update_running_instance(rm: Any, rv: Any, mean: Any, rstd: Any, eps: float,
                             momentum: float, spatial: int) -> None:  # fmt: skip
    """PyTorch's instance-norm running update from the (N, C) statistics, in float64:
    the batch mean of the per-instance means and unbiased variances (var = rstd^-2 - eps,
    the variance group_norm_forward normalized with)."""
    note_host_work("instance norm: the running statistics' update, with NumPy/CuPy")
    if mean.shape[0] == 0:
        # an empty batch: PyTorch's update with the mean over no instances, NaN (NumPy's
        # mean would say so with a RuntimeWarning)
        for r in (rm, rv):
            if r is not None:
                r[...] = np.nan
        return
    if rm is not None:
        m = mean.astype(np.float64).mean(axis=0)
        rm[...] = ((1.0 - momentum) * rm.astype(np.float64) + momentum * m).astype(rm.dtype)
    if rv is not None:
        r = rstd.astype(np.float64)
        var = (1.0 / (r * r) - eps) * (spatial / (spatial - 1))
        rv[...] = ((1.0 - momentum) * rv.astype(np.float64)
                   + momentum * var.mean(axis=0)).astype(rv.dtype)  # fmt: skip


@with_stream
def instance_norm(
    x: Any,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    layout: str = "NCHW",
    out: Any = None,
    running_mean: Any = None,
    running_var: Any = None,
    use_input_stats: bool = True,
    momentum: float = 0.1,
) -> Any:
    """``torch.nn.functional.instance_norm`` (its running statistics and use_input_stats as
    keywords; see :func:`instance_norm_forward`). Returns y."""
    return instance_norm_forward(x, weight, bias, eps, layout=layout, out=out,
                                 running_mean=running_mean, running_var=running_var,
                                 use_input_stats=use_input_stats, momentum=momentum)[0]  # fmt: skip


@with_stream
def instance_norm_backward(
    dy: Any,
    x: Any,
    mean: Any,
    rstd: Any,
    weight: Any = None,
    bias: Any = None,
    *,
    layout: str = "NCHW",
) -> tuple[Any, Any, Any]:
    x = as_array("x", x)
    _layout(layout)
    c = x.shape[-1 if layout == "NHWC" else 1] if x.ndim >= 2 else 1
    return group_norm_backward(dy, x, c, mean, rstd, weight, bias, layout=layout)


__all__ = [
    "group_norm",
    "group_norm_backward",
    "group_norm_forward",
    "instance_norm",
    "instance_norm_backward",
    "instance_norm_forward",
]

# Kernel launches only, host copies reported: an emulator graph may replay them, and a
# repeated call replays its launch template (runtime.templates).
graph_safe(group_norm_forward, group_norm, group_norm_backward, instance_norm_forward,
           instance_norm, instance_norm_backward)  # fmt: skip
