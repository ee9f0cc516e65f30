"""Batch norm: the training and inference forwards (with cuDNN's fused add + activation),
the backward (of either) and ``batch_norm``; kernels and shared checks in
:mod:`cudnnlite.ops.norm_common`.

Batch norm runs as a multi-block per-channel reduction (``red_planar`` / ``red_chlast``,
grid = channels x chunks), a per-channel finalize and an elementwise pass
(``bn_fwd_apply_vec_planar_fp16`` / ``..._vec_chlast_...``, one kernel per fused
activation, ``bn_fwd_apply_vec_planar_relu_fp16``: 16-byte packs when every tensor is
16-byte aligned, H*W, or C for channels-fastest data, is a multiple of 16 / itemsize and
there are at most 2^31 - 1 elements; the scalar ``bn_fwd_apply_fp16`` otherwise); see the
header of ``cuda_src/norm/norm.cu``.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..runtime.graph import graph_safe, note_host_work
from ..runtime.pointers import data_pointer
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ._arrays import array_module, as_array, flag, float_dtype, same_dtype, same_shape
from ._fastpath import CallCache, arrays_key, backend_key, scalars_key
from .norm_common import (
    _BLOCK,
    _BN_APPLY_DTYPE,
    _BN_DTYPE,
    VEC_MAX_ELEMENTS,
    _acc,
    _act,
    _check_out,
    _deliver,
    _dense,
    _eps,
    _layout,
    _param,
    _reduce,
    _struct,
    _sum2_params,
    _Table,
    _table,
    vec_act_suffix,
)

BN_MODES = ("spatial", "per_activation")


class _BnView:
    """How batch norm sees x: per-channel reduction shape and parameter shape."""

    def __init__(self, shape: tuple[int, ...], mode: str, layout: str) -> None:
        if len(shape) < 2:
            raise BadParamError(f"x: expected at least 2 dims (N, C, ...), got shape {shape}")
        n = shape[0]
        if mode == "per_activation":
            self.param_shape = tuple(shape[1:])
            self.rows, self.channels, self.inner = n, math.prod(shape[1:]), 1
        elif layout == "NCHW":
            self.param_shape = (shape[1],)
            self.rows, self.channels, self.inner = n, shape[1], math.prod(shape[2:])
        else:
            self.param_shape = (shape[-1],)
            self.rows, self.channels, self.inner = math.prod(shape[:-1]), shape[-1], 1
        self.count = self.rows * self.inner


def _bn_mode(mode: Any) -> str:
    if mode not in BN_MODES:
        raise BadParamError(f"mode: expected 'spatial' or 'per_activation', got {mode!r}")
    return mode


def _bn_common(x: Any, mode: Any, layout: Any) -> tuple[Any, _BnView, dtypes.DType]:
    x = as_array("x", x)
    dt = float_dtype("x", x)
    _layout(layout)
    view = _BnView(tuple(x.shape), _bn_mode(mode), layout)
    return x, view, dt


def _bn_params(x: Any, view: _BnView, weight: Any, bias: Any, dt: dtypes.DType) -> tuple[Any, Any]:
    pd = _acc(dt)
    w = _param("weight", weight, view.param_shape, pd)
    b = _param("bias", bias, view.param_shape, pd)
    c = view.channels
    xp = array_module(x)
    w = xp.ones((c,), pd) if w is None else _dense(w).reshape(c)
    b = xp.zeros((c,), pd) if b is None else _dense(b).reshape(c)
    return w, b


def _momentum(momentum: Any) -> float:
    if isinstance(momentum, bool) or not isinstance(
        momentum, (int, float, np.integer, np.floating)
    ):
        raise BadParamError(f"momentum: expected a number in [0, 1], got {momentum!r}")
    if not 0.0 <= float(momentum) <= 1.0:
        raise BadParamError(f"momentum: expected a number in [0, 1], got {momentum!r}")
    return float(momentum)


def _running(name: str, a: Any, view: _BnView, dt: dtypes.DType) -> Any:
    a = _param(name, a, view.param_shape, _acc(dt))
    if a is not None and not a.flags.c_contiguous:
        raise BadParamError(f"{name}: expected a C-contiguous array (it is updated in place)")
    if a is not None and isinstance(a, np.ndarray) and not a.flags.writeable:
        raise BadParamError(f"{name}: the array is read-only (it is updated in place)")
    return a


def _z(z: Any, x: Any) -> Any:
    if z is None:
        return None
    z = as_array("z", z)
    same_dtype(("x", "z"), (x, z))
    same_shape(("x", "z"), (x, z))
    return z


@with_stream
def batch_norm_forward_training(
    x: Any,
    weight: Any = None,
    bias: Any = None,
    running_mean: Any = None,
    running_var: Any = None,
    *,
    momentum: float = 0.1,
    eps: float = 1e-5,
    mode: str = "spatial",
    layout: str = "NCHW",
    z: Any = None,
    activation: str | None = None,
    coef: float | None = None,
    out: Any = None,
) -> tuple[Any, Any, Any]:
    """Training forward: ``y = act(gamma (x - mean) invstd + beta [+ z])`` with batch
    statistics; returns ``(y, save_mean, save_invstd)`` (one per channel; float32, or
    float64 for float64 x).

    Args:
        x: ``(N, C, *spatial)`` for ``layout="NCHW"``, ``(N, *spatial, C)`` for "NHWC".
        weight, bias: float32 (float64 for float64 x) of the parameter shape (``(C,)``
            in mode "spatial", ``x.shape[1:]`` in mode "per_activation"); None means ones /
            zeros.
        running_mean, running_var: C-contiguous arrays (weight's dtype) updated in place:
            ``r = (1 - momentum) r + momentum batch`` with the unbiased batch variance for
            running_var (as PyTorch). Either may be None.
        z, activation, coef: the fused form (cuDNN's BN_ADD_ACTIVATION): ``z`` (like x)
            is added before the activation (a mode of :data:`cudnnlite.ACTIVATION_MODES`
            other than mish, which the norm kernels do not fuse).
    """
    backend = backend_for(
        x,
        weight,
        bias,
        running_mean,
        running_var,
        z,
        out,
        names=("x", "weight", "bias", "running_mean", "running_var", "z", "out"),
    )
    x, view, dt = _bn_common(x, mode, layout)
    eps = _eps(eps)
    momentum = _momentum(momentum)
    if view.count == 1:  # (an empty batch is fine: nothing to normalize)
        raise BadParamError(
            f"x: training needs more than one value per channel to compute a variance, got "
            f"shape {tuple(x.shape)} ({view.count} value per channel)"
        )
    rm = _running("running_mean", running_mean, view, dt)
    rv = _running("running_var", running_var, view, dt)
    w, b = _bn_params(x, view, weight, bias, dt)
    z = _z(z, x)
    act_mode, params = _act(activation, coef, dt)
    _check_out(out, x, backend, {"x": x, "z": z})
    xp = array_module(x)
    pd = _acc(dt)
    if view.count == 0:
        # As PyTorch: an empty y, the running statistics left as they are; the saved
        # statistics (of no values) are zeros, which the backward of an empty batch ignores.
        shape = view.param_shape
        y = xp.empty(x.shape, x.dtype)
        return _deliver(y, out), xp.zeros(shape, pd), xp.zeros(shape, pd)
    table = _table(backend, dt)
    xd, zd = _dense(x), _dense(z)
    c = view.channels
    partial, chunks = _reduce(
        table, "stats", view.rows, c, view.inner, (xd, None, None, None, None, None, None)
    )
    mean = xp.empty((c,), pd)
    invstd = xp.empty((c,), pd)
    # a lone running_mean or running_var is updated through a scratch partner
    rm_k = rm if rm is not None else xp.zeros((c,), pd)
    rv_k = rv if rv is not None else xp.ones((c,), pd)
    update = rm is not None or rv is not None
    bp = _struct(
        _BN_DTYPE, dt, eps=eps, momentum=momentum, update_running=int(update), chunks=chunks
    )
    table.launch(
        "bn_stats_finalize",
        (table.grid_each(c),),
        (_BLOCK,),
        (xd, partial, mean, invstd, rm_k, rv_k, np.int64(c), np.int64(view.inner), bp),
    )
    y = _bn_apply(table, view, xd, zd, mean, invstd, w, b, False, eps, act_mode, params)
    shape = view.param_shape
    return _deliver(y, out), mean.reshape(shape), invstd.reshape(shape)


def _apply_variant(view: _BnView, dt: dtypes.DType, arrays: Sequence[Any], act_mode: int,
                   n: int) -> str:  # fmt: skip
    """Suffix of the elementwise kernel: ``_vec_planar`` (a 16-byte pack per channel run,
    H*W % VEC == 0), ``_vec_chlast`` (packs of consecutive channels, C % VEC == 0) when
    every array is 16-byte aligned (all are C-contiguous here) and there are at most
    VEC_MAX_ELEMENTS elements (``n``; the vector kernels index in 32 bits), then the activation's
    name (one vector kernel per mode: ``_vec_planar_relu``); else ``""`` (scalar)."""
    vec = 16 // dt.numpy.itemsize
    if view.inner % vec == 0:
        variant = "_vec_planar"
    elif view.inner == 1 and view.channels % vec == 0:
        variant = "_vec_chlast"
    else:
        return ""
    if n > VEC_MAX_ELEMENTS or any(a is not None and data_pointer(a) % 16 for a in arrays):
        return ""
    return variant + vec_act_suffix(act_mode)


@functools.lru_cache(maxsize=256)
def _bn_apply_struct(dt: Any, n: int, channels: int, inner: int, eps: float, eps_sign: float,
                     stats_are_var: bool, act_mode: int) -> np.void:  # fmt: skip
    """The apply kernel's parameters, built once per value (a repeat call reuses them;
    a struct is never modified after it is built). ``eps_sign`` keys -0.0 apart from 0.0,
    which the cache holds equal (1 / sqrt(var + eps) of var -0.0 is -inf with eps -0.0)."""
    return _struct(_BN_APPLY_DTYPE, dt, n=n, channels=channels, inner=inner, eps=eps,
                   inv_count=0.0, stats_are_var=int(stats_are_var), act_mode=act_mode)  # fmt: skip


def _bn_apply(
    table: _Table,
    view: _BnView,
    x: Any,
    z: Any,
    mean: Any,
    stat: Any,
    w: Any,
    b: Any,
    stats_are_var: bool,
    eps: float,
    act_mode: int,
    params: np.void,
) -> Any:
    y = array_module(x).empty(x.shape, x.dtype)
    n = x.size
    if n == 0:  # (an empty spatial dim: the vector variants would divide by it)
        return y
    a = _bn_apply_struct(table.dt, n, view.channels, view.inner, eps, math.copysign(1.0, eps),
                         stats_are_var, act_mode)  # fmt: skip
    key = "bn_fwd_apply" + _apply_variant(view, table.dt, (x, z, y), act_mode, n)
    # a vector thread moves VEC elements: size the grid by packs
    per_thread = 16 // x.itemsize if key != "bn_fwd_apply" else 1
    table.launch(
        key,
        (table.grid_for(-(-n // per_thread)),),
        (_BLOCK,),
        (x, z, y, mean, stat, w, b, a, params),
    )
    return y


# Inference calls without ``out``, by the arrays' keys and the scalars as given: the
# kernel table, view, eps and activation of the validated first call.
_BN_INFERENCE_CALLS = CallCache("batch_norm_forward_inference")


def _bn_inference_fast(entry: tuple, x: Any, rm: Any, rv: Any, weight: Any, bias: Any,
                       z: Any) -> Any:  # fmt: skip
    """A cached inference call: the slow path's launch without its checks."""
    table, view, eps, act_mode, params = entry
    c = view.channels
    xp = array_module(x)
    pd = _acc(table.dt)
    w = xp.ones((c,), pd) if weight is None else _dense(weight).reshape(c)
    b = xp.zeros((c,), pd) if bias is None else _dense(bias).reshape(c)
    rm, rv = _dense(rm).reshape(-1), _dense(rv).reshape(-1)
    return _bn_apply(table, view, _dense(x), _dense(z), rm, rv, w, b, True, eps, act_mode,
                     params)  # fmt: skip


@with_stream
def batch_norm_forward_inference(
    x: Any,
    running_mean: Any,
    running_var: Any,
    weight: Any = None,
    bias: Any = None,
    *,
    eps: float = 1e-5,
    mode: str = "spatial",
    layout: str = "NCHW",
    z: Any = None,
    activation: str | None = None,
    coef: float | None = None,
    out: Any = None,
) -> Any:
    """Inference forward from running statistics:
    ``y = act(gamma (x - running_mean) / sqrt(running_var + eps) + beta [+ z])``."""
    key = None
    if out is None:
        a = arrays_key(x, running_mean, running_var, weight, bias, z)
        s = scalars_key(eps, mode, layout, activation, coef)
        key = None if a is None or s is None else (a, s, backend_key())
        entry = _BN_INFERENCE_CALLS.get(key)
        if entry is not None:
            return _bn_inference_fast(entry, x, running_mean, running_var, weight, bias, z)
    backend = backend_for(
        x,
        weight,
        bias,
        running_mean,
        running_var,
        z,
        out,
        names=("x", "weight", "bias", "running_mean", "running_var", "z", "out"),
    )
    x, view, dt = _bn_common(x, mode, layout)
    eps = _eps(eps)
    for name, a in (("running_mean", running_mean), ("running_var", running_var)):
        if a is None:
            raise BadParamError(f"{name}: inference needs the running statistics, got None")
    rm = _dense(_param("running_mean", running_mean, view.param_shape, _acc(dt)))
    rv = _dense(_param("running_var", running_var, view.param_shape, _acc(dt)))
    w, b = _bn_params(x, view, weight, bias, dt)
    z = _z(z, x)
    act_mode, params = _act(activation, coef, dt)
    _check_out(out, x, backend, {"x": x, "z": z})
    table = _table(backend, dt)
    y = _bn_apply(
        table,
        view,
        _dense(x),
        _dense(z),
        rm.reshape(-1),
        rv.reshape(-1),
        w,
        b,
        True,
        eps,
        act_mode,
        params,
    )
    _BN_INFERENCE_CALLS.put(key, (table, view, eps, act_mode, params))
    return _deliver(y, out)


def _inference_stats(running_mean: Any, running_var: Any, view: _BnView, dt: dtypes.DType,
                     eps: Any) -> tuple[Any, Any]:  # fmt: skip
    """running_mean and 1 / sqrt(running_var + eps) (the acc type), as the inference forward
    computes them."""
    for name, a in (("running_mean", running_mean), ("running_var", running_var)):
        if a is None:
            raise BadParamError(f"{name}: inference backward needs the running statistics")
    eps = _eps(eps)
    rm = _param("running_mean", running_mean, view.param_shape, _acc(dt))
    rv = _param("running_var", running_var, view.param_shape, _acc(dt))
    xp = array_module(rv)
    acc = _acc(dt).type
    note_host_work("batch norm inference backward: 1 / sqrt(running_var + eps), with NumPy/CuPy")
    invstd = acc(1) / xp.sqrt(rv.astype(acc, copy=False) + acc(eps))
    return rm, invstd


@with_stream
def batch_norm_backward(
    dy: Any,
    x: Any,
    save_mean: Any = None,
    save_invstd: Any = None,
    weight: Any = None,
    *,
    mode: str = "spatial",
    layout: str = "NCHW",
    bias: Any = None,
    z: Any = None,
    activation: str | None = None,
    coef: float | None = None,
    training: bool = True,
    running_mean: Any = None,
    running_var: Any = None,
    eps: float = 1e-5,
) -> tuple[Any, Any, Any, Any]:
    """Backward of batch norm: ``(dx, dweight, dbias, dz)`` (dweight, dbias float32,
    float64 for float64 x; dz, the gradient of the fused form's z, None without z).
    With an activation the forward's ``bias`` (and ``z``) recompute its input.

    ``training=True`` (default): from the training forward's saved statistics
    (``save_mean``, ``save_invstd``), through the batch statistics.
    ``training=False``: the backward of the inference forward, as PyTorch's batch_norm
    backward in evaluation mode: ``running_mean`` and ``running_var`` (with ``eps``) are
    constants, so ``dx = dy * weight / sqrt(running_var + eps)``, ``dweight = sum(dy *
    xhat)``, ``dbias = sum(dy)``; save_mean/save_invstd must then be None."""
    backend = backend_for(
        dy,
        x,
        save_mean,
        save_invstd,
        weight,
        bias,
        z,
        running_mean,
        running_var,
        names=("dy", "x", "save_mean", "save_invstd", "weight", "bias", "z", "running_mean",
               "running_var"),
    )  # fmt: skip
    if not isinstance(training, (bool, np.bool_)):
        raise BadParamError(f"training: expected True or False, got {training!r}")
    eps = _eps(eps)  # (unused by the training backward, checked all the same)
    x, view, dt = _bn_common(x, mode, layout)
    dy = as_array("dy", dy)
    same_dtype(("x", "dy"), (x, dy))
    same_shape(("x", "dy"), (x, dy))
    if training:
        if running_mean is not None or running_var is not None:
            raise BadParamError(
                "running_mean, running_var: training backward goes through the batch "
                "statistics (save_mean, save_invstd); pass training=False for the inference one"
            )
        mean = _param("save_mean", save_mean, view.param_shape, _acc(dt))
        invstd = _param("save_invstd", save_invstd, view.param_shape, _acc(dt))
        if mean is None or invstd is None:
            raise BadParamError(
                "save_mean, save_invstd: the forward's saved statistics are needed"
            )
    else:
        if save_mean is not None or save_invstd is not None:
            raise BadParamError(
                "save_mean, save_invstd: inference backward (training=False) uses "
                "running_mean and running_var, not saved batch statistics"
            )
        mean, invstd = _inference_stats(running_mean, running_var, view, dt, eps)
    w, b = _bn_params(x, view, weight, bias, dt)
    z = _z(z, x)
    act_mode, params = _act(activation, coef, dt)
    if view.count == 0:  # an empty batch: empty dx (dz), zero dweight and dbias (PyTorch)
        xp, shape = array_module(x), view.param_shape
        dz = xp.empty(x.shape, x.dtype) if z is not None else None
        return xp.empty(x.shape, x.dtype), xp.zeros(shape, _acc(dt)), xp.zeros(shape, _acc(dt)), dz
    table = _table(backend, dt)
    c = view.channels
    xd, dyd, zd = _dense(x), _dense(dy), _dense(z)
    mean, invstd = _dense(mean).reshape(-1), _dense(invstd).reshape(-1)
    partial, chunks = _reduce(
        table,
        "bwd",
        view.rows,
        c,
        view.inner,
        (xd, dyd, zd, mean, invstd, w, b),
        act_mode=act_mode,
        has_z=z is not None,
        params=params,
    )
    dgamma = array_module(x).empty((c,), _acc(dt))
    dbeta = array_module(x).empty((c,), _acc(dt))
    table.launch(
        _sum2_params(dt),
        (table.grid_each(c),),
        (_BLOCK,),
        (partial, dbeta, dgamma, np.int64(c), np.int32(chunks)),
    )
    xp = array_module(x)
    dx = xp.empty(x.shape, x.dtype)
    dz = xp.empty(x.shape, x.dtype) if z is not None else None
    n = x.size
    a = _struct(
        _BN_APPLY_DTYPE,
        dt,
        n=n,
        channels=c,
        inner=view.inner,
        eps=0.0,
        inv_count=1.0 / view.count if training else 0.0,  # 0: the kernel's inference form
        stats_are_var=0,
        act_mode=act_mode,
    )
    key = "bn_bwd_apply" + _apply_variant(view, dt, (dyd, xd, zd, dx, dz), act_mode, n)
    per_thread = 16 // x.itemsize if key != "bn_bwd_apply" else 1
    table.launch(
        key,
        (table.grid_for(-(-n // per_thread)),),
        (_BLOCK,),
        (dyd, xd, zd, dx, dz, mean, invstd, w, b, dgamma, dbeta, a, params),
    )
    shape = view.param_shape
    return dx, dgamma.reshape(shape), dbeta.reshape(shape), dz


@with_stream
def batch_norm(
    x: Any,
    running_mean: Any,
    running_var: Any,
    weight: Any = None,
    bias: Any = None,
    training: bool = False,
    momentum: float = 0.1,
    eps: float = 1e-5,
    *,
    layout: str = "NCHW",
    out: Any = None,
) -> Any:
    """``torch.nn.functional.batch_norm``: training uses (and updates) batch statistics,
    inference the running ones. Returns y."""
    if flag("training", training):
        return batch_norm_forward_training(
            x,
            weight,
            bias,
            running_mean,
            running_var,
            momentum=momentum,
            eps=eps,
            layout=layout,
            out=out,
        )[0]
    return batch_norm_forward_inference(
        x, running_mean, running_var, weight, bias, eps=eps, layout=layout, out=out
    )


__all__ = [
    "BN_MODES",
    "batch_norm",
    "batch_norm_backward",
    "batch_norm_forward_inference",
    "batch_norm_forward_training",
]

# Kernel launches only, host copies reported: an emulator graph may replay them, and a
# repeated call replays its launch template (runtime.templates).
graph_safe(batch_norm_forward_inference, batch_norm_forward_training, batch_norm_backward,
           batch_norm)  # fmt: skip
