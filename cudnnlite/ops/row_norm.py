"""Row norms: layer norm and RMS norm, forward and backward. Each row (the trailing
``normalized_shape`` dims) is one block of ``rownorm_fwd`` / ``rownorm_bwd``; the same
launches serve group norm's NCHW path (:mod:`cudnnlite.ops.group_norm`). Rows whose
weight and bias are indexed by the column (layer and RMS norm), a multiple of 16 bytes
long and aligned, run the kernels' vector forms ``rownorm_*_vec`` (16-byte loads and
stores: the element kernels' fp16 loops issue a 2-byte load per element), and when at
most 32 packs long ``rownorm_*_rows`` (a group of lanes per row, several rows a warp: RMS
norm over a 128-wide head dimension no longer leaves most of a block idle). A layer or
group norm forward of fewer rows than twice the SMs, each of at least SPLIT_MIN_COLS
elements, takes its statistics from split reductions across the GPU instead
(:func:`_split_forward`), and so does any row norm's backward (:func:`_split_backward`).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..runtime.backend import Backend
from ..runtime.graph import graph_safe
from ..runtime.pointers import data_pointer
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ._arrays import array_module, as_array, float_dtype, same_dtype, same_shape
from .norm_common import (
    _BLOCK,
    _BN_DTYPE,
    _ROW_DTYPE,
    _acc,
    _check_out,
    _deliver,
    _dense,
    _eps,
    _param,
    _reduce,
    _required,
    _struct,
    _table,
)


def _row_launch_block(items: int) -> int:
    """Threads of a row's block for ``items`` elements (or packs) a row: up to 1024 for
    long rows, and for short ones the warps that give each thread one item (a row of 96
    packs, BERT's 768 fp16 columns, takes 3 warps, not 4 with one idle)."""
    cap = 1024 if items >= 8192 else 512 if items >= 2048 else 256 if items >= 512 else 128
    return min(cap, max(32, -(-items // 32) * 32))


def _row_vec(dt: dtypes.DType, cols: int, groups: int, inner: int, params: tuple,
             arrays: tuple) -> int:  # fmt: skip
    """The elements per 16-byte pack the row kernels can move (``rownorm_*_vec``), or 0:
    the weight and bias (``params``) indexed by the column (one group of inner 1, or none
    given), ``cols`` a multiple of the pack below 2^31, every array 16-byte aligned."""
    vec = 16 // dt.itemsize
    if cols % vec or cols >= 1 << 31:
        return 0
    if (groups != 1 or inner != 1) and any(a is not None for a in params):
        return 0
    if any(a is not None and data_pointer(a) % 16 for a in (*params, *arrays)):
        return 0
    return vec


_ROWS_BLOCK = 128  # threads of rownorm_*_rows' blocks
_ROWS_MAX_PACKS = 32  # rows of at most this many packs take rownorm_*_rows


def _row_launch(table: Any, direction: str, rms: bool, vec: int, rows: int, cols: int,
                args: tuple) -> None:  # fmt: skip
    """``rownorm_{direction}``: its vector form when ``vec``, with a block per row, or for
    rows of at most 32 packs a group of lanes per row (``_rows``, the packs rounded up to
    a power of two: the last argument's ``group_log2``)."""
    name = f"rownorm_{direction}_{'rms' if rms else 'mean'}"
    if vec and cols // vec <= _ROWS_MAX_PACKS:
        log2 = max(0, cols // vec - 1).bit_length()
        args[-1]["group_log2"] = log2
        grid = -(-rows // (_ROWS_BLOCK >> log2))
        table.launch(f"{name}_rows", (grid,), (_ROWS_BLOCK,), args)
        return
    name += "_vec" if vec else ""
    table.launch(name, (rows,), (_row_launch_block(cols // vec if vec else cols),), args)


def _row_forward(
    x: Any,
    rows: int,
    cols: int,
    groups: int,
    inner: int,
    weight: Any,
    bias: Any,
    eps: float,
    rms: bool,
    backend: Backend,
    dt: dtypes.DType,
) -> tuple[Any, Any, Any]:
    table = _table(backend, dt)
    xp = array_module(x)
    y = xp.empty(x.shape, x.dtype)
    mean = None if rms else xp.empty((rows,), _acc(dt))
    rstd = xp.empty((rows,), _acc(dt))
    s = _struct(
        _ROW_DTYPE,
        dt,
        rows=rows,
        cols=cols,
        groups=groups,
        inner=inner,
        eps=eps,
        has_weight=int(weight is not None),
        has_bias=int(bias is not None),
    )
    if rows and not rms and _split_rows(table, rows, cols):
        _split_forward(table, x, y, weight, bias, mean, rstd, s, eps, rows, cols)
    elif rows:
        vec = _row_vec(dt, cols, groups, inner, (weight, bias), (x, y))
        _row_launch(table, "fwd", rms, vec, rows, cols, (x, weight, bias, y, mean, rstd, s))
    return y, mean, rstd


# Rows at least this long, too few for the GPU (table.too_few: fewer than two an SM), get
# split statistics: group norm of a diffusion U-Net (2 x 32 rows of 40960) would
# otherwise run 64 blocks, one per row, on a GPU of 132 SMs.
SPLIT_MIN_COLS = 8192


def _split_rows(table: Any, rows: int, cols: int) -> bool:
    """Whether a row norm of ``rows`` x ``cols`` takes the split path (layer and group
    norm forward, and every row norm's backward)."""
    return cols >= SPLIT_MIN_COLS and table.too_few(rows)


def _split_forward(table: Any, x: Any, y: Any, weight: Any, bias: Any, mean: Any, rstd: Any,
                   s: np.void, eps: float, rows: int, cols: int) -> None:  # fmt: skip
    """Layer / group norm forward over few long rows: each row's Welford statistics in
    chunks across the GPU (batch norm's red_planar with the rows as channels: (1, rows,
    cols)), combined per row in chunk order (bn_stats_finalize, shifted by the row's first
    element as rownorm_fwd), then the output in (stretch, row) blocks (rownorm_apply)."""
    partial, chunks = _reduce(table, "stats", 1, rows, cols, (x, None, None, None, None, None,
                                                              None))  # fmt: skip
    bp = _struct(_BN_DTYPE, table.dt, eps=eps, momentum=0.0, update_running=0, chunks=chunks)
    table.launch(
        "bn_stats_finalize",
        (table.grid_each(rows),),
        (_BLOCK,),
        (x, partial, mean, rstd, None, None, np.int64(rows), np.int64(cols), bp),
    )
    grid = (_stretches(table, rows, cols), rows)
    table.launch("rownorm_apply", grid, (_BLOCK,), (x, weight, bias, y, mean, rstd, s))


def _stretches(table: Any, rows: int, cols: int) -> int:
    """Blocks per row of the split kernels (>= 4 elements a thread)."""
    return table.splits(rows, cols, _BLOCK * 4)


def _split_backward(table: Any, dy: Any, x: Any, weight: Any, mean: Any, rstd: Any, dx: Any,
                    s: np.void, rms: bool, rows: int, cols: int) -> None:  # fmt: skip
    """dx of few long rows: the rows' two sums in (stretch, row) blocks
    (rownorm_bwd_partial), then dx with each row's partial sums added in stretch order
    (rownorm_bwd_apply). RMS norm too (its sums need no mean)."""
    tag = "rms" if rms else "mean"
    grid = (_stretches(table, rows, cols), rows)
    partial = array_module(x).empty((rows * grid[0] * 2,), _acc(table.dt))
    table.launch(f"rownorm_bwd_partial_{tag}", grid, (_BLOCK,),
                 (dy, x, weight, mean, rstd, partial, s))  # fmt: skip
    table.launch(f"rownorm_bwd_apply_{tag}", grid, (_BLOCK,),
                 (dy, x, weight, mean, rstd, partial, dx, s))  # fmt: skip


def _row_backward(
    dy: Any,
    x: Any,
    rows: int,
    cols: int,
    groups: int,
    inner: int,
    weight: Any,
    mean: Any,
    rstd: Any,
    rms: bool,
    backend: Backend,
    dt: dtypes.DType,
    nparams: int,
    want_bias: bool,
) -> tuple[Any, Any, Any]:
    table = _table(backend, dt)
    xp = array_module(x)
    dx = xp.empty(x.shape, x.dtype)
    s = _struct(
        _ROW_DTYPE,
        dt,
        rows=rows,
        cols=cols,
        groups=groups,
        inner=inner,
        eps=0.0,
        has_weight=int(weight is not None),
        has_bias=0,
    )
    if rows and _split_rows(table, rows, cols):
        _split_backward(table, dy, x, weight, mean, rstd, dx, s, rms, rows, cols)
    elif rows:
        vec = _row_vec(dt, cols, groups, inner, (weight,), (dy, x, dx))
        _row_launch(table, "bwd", rms, vec, rows, cols, (dy, x, weight, mean, rstd, dx, s))
    dweight = dbias = None
    if weight is not None:
        samples = rows // groups
        partial, chunks = _reduce(
            table,
            "params",
            samples,
            nparams,
            inner,
            (x, dy, None, mean, rstd, None, None),
            groups=groups,
        )
        dweight = xp.empty((nparams,), x.dtype)
        dbias = xp.empty((nparams,), x.dtype) if want_bias else None
        table.launch(
            f"sum2_finalize_{dt.short}",
            (table.grid_each(nparams),),
            (_BLOCK,),
            (partial, dbias, dweight, np.int64(nparams), np.int32(chunks)),
        )
    return dx, dweight, dbias


def _normalized_shape(normalized_shape: Any, x: Any) -> tuple[int, ...]:
    try:
        ns = (
            (normalized_shape,)
            if isinstance(normalized_shape, (int, np.integer))
            else tuple(normalized_shape)
        )
    except TypeError:
        raise BadParamError(
            f"normalized_shape: expected an int or a tuple of ints, got {normalized_shape!r}"
        ) from None
    if not ns or any(
        isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0 for d in ns
    ):
        raise BadParamError(f"normalized_shape: expected ints >= 0, got {normalized_shape!r}")
    if len(ns) > x.ndim or tuple(x.shape[x.ndim - len(ns) :]) != tuple(int(d) for d in ns):
        raise BadParamError(
            f"normalized_shape: expected the trailing dims of x {tuple(x.shape)}, got {ns}"
        )
    return tuple(int(d) for d in ns)


def _empty_rows(x: Any, ns: tuple[int, ...], dt: dtypes.DType, *, mean: bool) -> tuple:
    """The statistics of rows of no elements (a 0 in normalized_shape), as PyTorch's: mean
    0 (when asked for), rstd NaN (a variance of 0 / 0), of shape ``x.shape[:-len(ns)]``."""
    xp, lead = array_module(x), tuple(x.shape[: x.ndim - len(ns)])
    rstd = xp.full(lead, np.nan, _acc(dt))
    return (xp.zeros(lead, _acc(dt)), rstd) if mean else (rstd,)


def _row_common(x: Any, normalized_shape: Any, weight: Any, bias: Any, names: tuple) -> tuple:
    x = as_array("x", x)
    dt = float_dtype("x", x)
    ns = _normalized_shape(normalized_shape, x)
    w = _param("weight", weight, ns, x.dtype)
    b = _param("bias", bias, ns, x.dtype)
    cols = math.prod(ns)
    return x, dt, ns, _dense(w), _dense(b), cols


@with_stream
def layer_norm_forward(
    x: Any,
    normalized_shape: Any,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    out: Any = None,
) -> tuple[Any, Any, Any]:
    """Layer norm over the trailing ``normalized_shape`` dims: ``(y, mean, rstd)``, the
    statistics (float32, float64 for float64 x) of shape
    ``x.shape[:-len(normalized_shape)]``. weight and bias (x's dtype, shape
    normalized_shape) are optional."""
    backend = backend_for(x, weight, bias, out, names=("x", "weight", "bias", "out"))
    x, dt, ns, w, b, cols = _row_common(x, normalized_shape, weight, bias, ())
    eps = _eps(eps)
    _check_out(out, x, backend, {"x": x})
    if cols == 0:
        return (_deliver(array_module(x).empty(x.shape, x.dtype), out),
                *_empty_rows(x, ns, dt, mean=True))  # fmt: skip
    rows = x.size // cols
    y, mean, rstd = _row_forward(_dense(x), rows, cols, 1, 1, w, b, eps, False, backend, dt)
    lead = tuple(x.shape[: x.ndim - len(ns)])
    return _deliver(y, out), mean.reshape(lead), rstd.reshape(lead)


@with_stream
def layer_norm(
    x: Any,
    normalized_shape: Any,
    weight: Any = None,
    bias: Any = None,
    eps: float = 1e-5,
    *,
    out: Any = None,
) -> Any:
    """``torch.nn.functional.layer_norm``."""
    return layer_norm_forward(x, normalized_shape, weight, bias, eps, out=out)[0]


@with_stream
def layer_norm_backward(
    dy: Any,
    x: Any,
    normalized_shape: Any,
    mean: Any,
    rstd: Any,
    weight: Any = None,
    bias: Any = None,
) -> tuple[Any, Any, Any]:
    """``(dx, dweight, dbias)``; dweight and dbias (x's dtype) are None when weight / bias
    are None."""
    backend = backend_for(dy, x, mean, rstd, weight, names=("dy", "x", "mean", "rstd", "weight"))
    x, dt, ns, w, b, cols = _row_common(x, normalized_shape, weight, bias, ())
    dy = as_array("dy", dy)
    same_dtype(("x", "dy"), (x, dy))
    same_shape(("x", "dy"), (x, dy))
    lead = tuple(x.shape[: x.ndim - len(ns)])
    mean = _dense(_param("mean", _required("mean", mean), lead, _acc(dt))).reshape(-1)
    rstd = _dense(_param("rstd", _required("rstd", rstd), lead, _acc(dt))).reshape(-1)
    if cols == 0:  # rows of no elements: nothing flows back
        xp = array_module(x)
        return (xp.empty(x.shape, x.dtype), None if w is None else xp.zeros(ns, x.dtype),
                None if b is None else xp.zeros(ns, x.dtype))  # fmt: skip
    rows = x.size // cols
    wgrad = (
        w if w is not None else (array_module(x).ones((cols,), x.dtype) if b is not None else None)
    )
    dx, dw, db = _row_backward(
        _dense(dy),
        _dense(x),
        rows,
        cols,
        1,
        1,
        wgrad,
        mean,
        rstd,
        False,
        backend,
        dt,
        cols,
        b is not None,
    )
    dw = dw.reshape(ns) if (dw is not None and w is not None) else None
    db = db.reshape(ns) if db is not None else None
    return dx, dw, db


@with_stream
def rms_norm_forward(
    x: Any,
    normalized_shape: Any,
    weight: Any = None,
    eps: float | None = None,
    *,
    out: Any = None,
) -> tuple[Any, Any]:
    """RMS norm ``y = x / sqrt(mean(x^2) + eps) * weight``: ``(y, rstd)``. eps None is
    the machine epsilon of x's dtype (PyTorch's default)."""
    backend = backend_for(x, weight, out, names=("x", "weight", "out"))
    x, dt, ns, w, _, cols = _row_common(x, normalized_shape, weight, None, ())
    eps = float(dtypes.finfo(x.dtype).eps) if eps is None else _eps(eps)
    _check_out(out, x, backend, {"x": x})
    if cols == 0:
        return (_deliver(array_module(x).empty(x.shape, x.dtype), out),
                *_empty_rows(x, ns, dt, mean=False))  # fmt: skip
    rows = x.size // cols
    y, _, rstd = _row_forward(_dense(x), rows, cols, 1, 1, w, None, eps, True, backend, dt)
    lead = tuple(x.shape[: x.ndim - len(ns)])
    return _deliver(y, out), rstd.reshape(lead)


@with_stream
def rms_norm(
    x: Any,
    normalized_shape: Any,
    weight: Any = None,
    eps: float | None = None,
    *,
    out: Any = None,
) -> Any:
    """``torch.nn.functional.rms_norm``."""
    return rms_norm_forward(x, normalized_shape, weight, eps, out=out)[0]


@with_stream
def rms_norm_backward(
    dy: Any, x: Any, normalized_shape: Any, rstd: Any, weight: Any = None
) -> tuple[Any, Any]:
    """``(dx, dweight)``; dweight None when weight is None."""
    backend = backend_for(dy, x, rstd, weight, names=("dy", "x", "rstd", "weight"))
    x, dt, ns, w, _, cols = _row_common(x, normalized_shape, weight, None, ())
    dy = as_array("dy", dy)
    same_dtype(("x", "dy"), (x, dy))
    same_shape(("x", "dy"), (x, dy))
    lead = tuple(x.shape[: x.ndim - len(ns)])
    rstd = _dense(_param("rstd", _required("rstd", rstd), lead, _acc(dt))).reshape(-1)
    if cols == 0:  # rows of no elements: nothing flows back
        xp = array_module(x)
        return xp.empty(x.shape, x.dtype), (None if w is None else xp.zeros(ns, x.dtype))
    rows = x.size // cols
    dx, dw, _ = _row_backward(
        _dense(dy), _dense(x), rows, cols, 1, 1, w, None, rstd, True, backend, dt, cols, False
    )
    return dx, (dw.reshape(ns) if dw is not None else None)


__all__ = [
    "layer_norm",
    "layer_norm_backward",
    "layer_norm_forward",
    "rms_norm",
    "rms_norm_backward",
    "rms_norm_forward",
]

# Kernel launches only, host copies reported: an emulator graph may replay them, and a
# repeated call replays its launch template (runtime.templates).
graph_safe(layer_norm_forward, layer_norm, layer_norm_backward, rms_norm_forward, rms_norm,
           rms_norm_backward)  # fmt: skip
