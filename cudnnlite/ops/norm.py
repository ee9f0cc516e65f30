"""Normalization layers: batch norm, layer / group / instance / RMS norm, and LRN.

Every function validates, allocates, launches (``cuda_src/norm/norm.cu``, one module per
dtype) and returns arrays of the inputs' kind. Data may be float32, float16, bfloat16 or
float64. Statistics (mean, invstd / rstd) and batch-norm parameters (weight, bias,
running statistics, dweight / dbias) have the type the kernels compute in: float32 for
float32 / float16 / bfloat16 data (cuDNN's rule), float64 for float64 data (which
computes and accumulates in double; eps, momentum, activation coefficients and LRN's
scalars reach it unrounded). Row-norm weight and bias share x's dtype (PyTorch's).
Inputs of any strides are copied to C-contiguous arrays first where they are not already;
``out=`` may have any strides (the result is copied into it).
Semantics: :mod:`cudnnlite.reference.norm`.

:func:`last_kernel_name` names the last kernel the calling thread launched, e.g.
``red_planar_stats_fp16`` (batch-norm statistics, NCHW), ``bn_fwd_apply_fp32`` or
``rownorm_fwd_rms_bf16``. Batch norm runs as a multi-block per-channel reduction
(``red_planar`` / ``red_chlast``, grid = channels x chunks), a per-channel finalize and
an elementwise pass (``bn_fwd_apply_vec_planar_fp16`` / ``..._vec_chlast_...``: 16-byte
packs when every tensor is 16-byte aligned and H*W, or C for channels-fastest data, is a
multiple of 16 / itemsize; the scalar ``bn_fwd_apply_fp16`` otherwise); see the header of
``cuda_src/norm/norm.cu``. Group / instance norm with ``layout="NHWC"`` runs natively
channels-last (``gn_nhwc_fwd`` / ``gn_nhwc_bwd``, parameter gradients by
``red_chlast_params_nhwc``): no transposed copy.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..reference.activation import DEFAULT_COEF
from ..runtime.backend import Backend
from ..runtime.graph import graph_safe, note_host_work
from ..runtime.kernel import ModuleSpec
from ..runtime.pointers import data_pointer
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ..runtime.variants import register
from ._arrays import (
    array_module,
    as_array,
    check_out,
    contiguous,
    float_dtype,
    same_dtype,
    same_shape,
)
from ._fastpath import CallCache, arrays_key, backend_key, scalars_key
from ._kernels import KernelTable, LastLaunch, kernel_table
from .activation import ACTIVATION_MODES, _params, act_params_dtype

SOURCE = "norm/norm.cu"
LAYOUTS = ("NCHW", "NHWC")
BN_MODES = ("spatial", "per_activation")
_BLOCK = 256
_CHLAST_ROWS = 8
_KIND = {"stats": 0, "bwd": 1, "params": 2}

# Mirrors of the kernels' structs. Those with scalars are templated on the accumulation
# type A (BnParamsT<A> ...): one layout per A, "<f4" (float) and "<f8" (double), picked
# by _real(dt).
_REALS = ("<f4", "<f8")


def _mirrors(fields: list[tuple[str, str]]) -> dict[str, np.dtype]:
    """The struct's numpy layouts by real type; fields typed "A" take it."""
    return {r: np.dtype([(n, r if t == "A" else t) for n, t in fields], align=True) for r in _REALS}


def _real(dt: dtypes.DType) -> str:
    return "<f8" if dt.acc_ctype == "double" else "<f4"


def _acc(dt: dtypes.DType) -> np.dtype:
    """dtype of statistics, workspaces and batch-norm parameters for data of type ``dt``."""
    return np.dtype(np.float64) if dt.acc_ctype == "double" else np.dtype(np.float32)


_RED_DTYPE = np.dtype(
    [
        ("rows", "<i8"),
        ("channels", "<i8"),
        ("inner", "<i8"),
        ("count", "<i8"),
        ("groups", "<i8"),
        ("spatial", "<i8"),
        ("act_mode", "<i4"),
        ("has_z", "<i4"),
    ],
    align=True,
)
_BN_DTYPE = _mirrors(  # BnParamsT<A>
    [("eps", "A"), ("momentum", "A"), ("update_running", "<i4"), ("chunks", "<i4")]
)
_BN_APPLY_DTYPE = _mirrors(  # BnApplyT<A>
    [
        ("n", "<i8"),
        ("channels", "<i8"),
        ("inner", "<i8"),
        ("eps", "A"),
        ("inv_count", "A"),
        ("stats_are_var", "<i4"),
        ("act_mode", "<i4"),
    ]
)
_ROW_DTYPE = _mirrors(  # RowShapeT<A>
    [
        ("rows", "<i8"),
        ("cols", "<i8"),
        ("groups", "<i8"),
        ("inner", "<i8"),
        ("eps", "A"),
        ("has_weight", "<i4"),
        ("has_bias", "<i4"),
        ("reserved", "<i4"),
    ]
)
_GN_NHWC_DTYPE = _mirrors(  # GnNhwcShapeT<A>
    [
        ("spatial", "<i8"),
        ("channels", "<i8"),
        ("groups", "<i8"),
        ("cpg", "<i8"),
        ("tiles", "<i8"),
        ("gpb", "<i4"),
        ("eps", "A"),
        ("has_weight", "<i4"),
        ("has_bias", "<i4"),
    ]
)
_GN_ROWS = 16  # blockDim.y of gn_nhwc_* (nrm::kGnRows)
_LRN_DTYPE = _mirrors(  # LrnShapeT<A>
    [
        ("n", "<i8"),
        ("channels", "<i8"),
        ("cstride", "<i8"),
        ("size", "<i4"),
        ("alpha_over_n", "A"),
        ("beta", "A"),
        ("k", "A"),
    ]
)

# ------------------------------------------------------------------ kernels


def _names(dt: dtypes.DType) -> dict[str, str]:
    """Readable name -> C++ name expression, for every kernel of the dtype's module."""
    t = dt.ctype
    names = {}
    for kind, k in _KIND.items():
        names[f"red_planar_{kind}"] = f"red_planar<{t}, {k}>"
        names[f"red_chlast_{kind}"] = f"red_chlast<{t}, {k}>"
    names["red_chlast_params_nhwc"] = f"red_chlast<{t}, 3>"
    names["gn_nhwc_fwd"] = f"gn_nhwc_fwd<{t}>"
    names["gn_nhwc_bwd"] = f"gn_nhwc_bwd<{t}>"
    names["bn_stats_finalize"] = f"bn_stats_finalize<{t}>"
    names[f"sum2_finalize_{dt.short}"] = f"sum2_finalize<{t}>"  # row-norm dweight / dbias
    names[_sum2_params(dt)] = f"sum2_finalize<{dt.acc_ctype}>"  # batch-norm dgamma / dbeta
    names["bn_fwd_apply"] = f"bn_fwd_apply<{t}>"
    names["bn_bwd_apply"] = f"bn_bwd_apply<{t}>"
    for chlast, tag in ((False, "planar"), (True, "chlast")):
        b = "true" if chlast else "false"
        names[f"bn_fwd_apply_vec_{tag}"] = f"bn_fwd_apply_vec<{t}, {b}>"
        names[f"bn_bwd_apply_vec_{tag}"] = f"bn_bwd_apply_vec<{t}, {b}>"
    for rms, tag in ((False, "mean"), (True, "rms")):
        b = "true" if rms else "false"
        names[f"rownorm_fwd_{tag}"] = f"rownorm_fwd<{t}, {b}>"
        names[f"rownorm_bwd_{tag}"] = f"rownorm_bwd<{t}, {b}>"
    for k in ("lrn_fwd", "lrn_scale", "lrn_bwd"):
        names[k] = f"{k}<{t}>"
    return names


def _sum2_params(dt: dtypes.DType) -> str:
    """Key of the finalize writing batch-norm parameter gradients (type _acc(dt))."""
    return "sum2_finalize_fp64" if dt.acc_ctype == "double" else "sum2_finalize_fp32"


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """The module holding every normalization kernel for storage type ``dt``."""
    return ModuleSpec.make(SOURCE, _names(dt).values())


@register("norm")
def module_specs() -> list[ModuleSpec]:
    return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]


_LAST = LastLaunch()


class _Table(KernelTable):
    def __init__(self, backend: Backend, dt: dtypes.DType) -> None:
        super().__init__(backend, dt, module_spec(dt), _names(dt), _LAST)
        if self.sm_count:
            self.target_blocks = self.sm_count * 8  # resident blocks of 256 threads, a few waves
            self.max_grid = self.sm_count * 32
        else:
            self.target_blocks = 16
            self.max_grid = 64

    def grid1d(self, n: int) -> int:
        return max(1, min(-(-n // _BLOCK), self.max_grid))


def _table(backend: Backend, dt: dtypes.DType) -> _Table:
    return kernel_table(_Table, backend, dt)


def last_kernel_name() -> str | None:
    """Readable name of the last normalization kernel this thread launched."""
    return _LAST.get()


# ------------------------------------------------------------------ argument helpers


def _arr(name: str, a: Any) -> Any:
    return None if a is None else as_array(name, a)


_dense = functools.partial(contiguous, family="norm")


def _layout(layout: Any) -> str:
    if layout not in LAYOUTS:
        raise BadParamError(f"layout: expected 'NCHW' or 'NHWC', got {layout!r}")
    return layout


def _eps(eps: Any) -> float:
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.integer, np.floating)):
        raise BadParamError(f"eps: expected a number >= 0, got {eps!r}")
    if not (math.isfinite(float(eps)) and eps >= 0):
        raise BadParamError(f"eps: expected a finite number >= 0, got {eps!r}")
    return float(eps)


def _param(
    name: str, a: Any, shape: tuple[int, ...], dtype: Any, backend_arrays: Any = None
) -> Any:
    if a is None:
        return None
    a = as_array(name, a)
    if tuple(a.shape) != tuple(shape) and not (a.size == math.prod(shape) and a.ndim == 1):
        raise BadParamError(f"{name}: expected shape {tuple(shape)}, got {tuple(a.shape)}")
    if a.dtype != np.dtype(dtype):
        raise BadParamError(f"{name}: expected dtype {np.dtype(dtype)}, got {a.dtype}")
    return a


# Activation modes the norm kernels' switch leaves out (cuda_src/norm/norm.cu: nrm::act_fwd).
_UNFUSED_ACTIVATIONS = ("mish",)


def _act(activation: Any, coef: Any, dt: dtypes.DType) -> tuple[int, np.void]:
    """Activation mode id (-1 none) and its ActParamsT for data of type ``dt``."""
    if activation is None:
        if coef is not None:
            raise BadParamError("coef: given without an activation")
        activation = "identity"
    elif activation not in ACTIVATION_MODES:
        raise BadParamError(
            f"activation: expected None or one of {', '.join(ACTIVATION_MODES)}, got {activation!r}"
        )
    if activation in _UNFUSED_ACTIVATIONS:
        raise BadParamError(
            f"activation: {activation} is not fused into the norm kernels (its math inlined "
            f"there costs registers for every mode); apply cudnnlite.{activation} to the result"
        )
    params = _params(activation, coef, None, 1.0, 0.0, False)[0]  # checks coef
    mode = -1 if activation == "identity" else ACTIVATION_MODES.index(activation)
    layout = act_params_dtype(dt)
    if layout != params.dtype:
        # double kernels: the same fields, the coefficient as given (not its float32)
        wide = np.zeros((), layout)
        for name in layout.names:
            wide[name] = params[name]
        if activation in DEFAULT_COEF:
            wide["coef"] = float(DEFAULT_COEF[activation] if coef is None else coef)
        params = wide[()]
    return mode, params


def _deliver(result: Any, out: Any) -> Any:
    if out is None:
        return result
    note_host_work("norm: a copy into out=")
    out[...] = result
    return out


def _check_out(out: Any, x: Any, backend: Backend, inputs: dict[str, Any]) -> None:
    if out is not None:
        check_out(out, x.shape, x.dtype, backend, inputs)


def _struct(dtype: np.dtype | dict[str, np.dtype], dt: Any = None, **fields: Any) -> np.void:
    """The struct's value; ``dtype`` a dict of _mirrors is picked by ``dt``'s real type."""
    if isinstance(dtype, dict):
        dtype = dtype[_real(dt)]
    s = np.zeros((), dtype=dtype)
    for k, v in fields.items():
        s[k] = v
    return s[()]


# ------------------------------------------------------------------ batch norm


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


def _reduce(
    table: _Table,
    kind: str,
    rows: int,
    channels: int,
    inner: int,
    ptrs: Sequence[Any],
    groups: int = 1,
    spatial: int = 1,
    act_mode: int = -1,
    has_z: bool = False,
    params: np.void | None = None,
) -> tuple[Any, int]:
    """Launches the per-channel reduction; returns (partial workspace, chunks)."""
    xp = array_module(ptrs[0])
    count = rows * inner
    if inner > 1:
        per_block = _BLOCK * 4  # at least 4 elements per thread
        col_blocks = channels
        variant = "planar"
    else:
        per_block = _CHLAST_ROWS * 4
        col_blocks = -(-channels // 32)
        variant = "chlast"
    chunks = max(1, min(-(-table.target_blocks // col_blocks), -(-count // per_block), 65535))
    nacc = 3 if kind == "stats" else 2
    partial = xp.empty((nacc * channels * chunks,), _acc(table.dt))
    shape = _struct(
        _RED_DTYPE,
        rows=rows,
        channels=channels,
        inner=inner,
        count=count,
        groups=groups,
        spatial=spatial,
        act_mode=act_mode,
        has_z=int(has_z),
    )
    if params is None:
        params = _act(None, None, table.dt)[1]
    block = (_BLOCK,) if variant == "planar" else (32, _CHLAST_ROWS)
    table.launch(
        f"red_{variant}_{kind}", (col_blocks, chunks), block, (*ptrs, partial, shape, params)
    )
    return partial, chunks


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
        (table.grid1d(c),),
        (_BLOCK,),
        (xd, partial, mean, invstd, rm_k, rv_k, np.int64(c), np.int64(view.inner), bp),
    )
    y = _bn_apply(table, view, xd, zd, mean, invstd, w, b, False, eps, act_mode, params)
    shape = view.param_shape
    return _deliver(y, out), mean.reshape(shape), invstd.reshape(shape)


def _apply_variant(view: _BnView, dt: dtypes.DType, arrays: Sequence[Any]) -> str:
    """Suffix of the elementwise kernel: ``_vec_planar`` (a 16-byte pack per channel run,
    H*W % VEC == 0), ``_vec_chlast`` (packs of consecutive channels, C % VEC == 0) when
    every array is 16-byte aligned (all are C-contiguous here), else ``""`` (scalar)."""
    vec = 16 // dt.numpy.itemsize
    if view.inner % vec == 0:
        variant = "_vec_planar"
    elif view.inner == 1 and view.channels % vec == 0:
        variant = "_vec_chlast"
    else:
        return ""
    if any(a is not None and data_pointer(a) % 16 for a in arrays):
        return ""
    return variant


@functools.lru_cache(maxsize=256)
def _bn_apply_struct(dt: Any, n: int, channels: int, inner: int, eps: float,
                     stats_are_var: bool, act_mode: int) -> np.void:  # fmt: skip
    """The apply kernel's parameters, built once per value (a repeat call reuses them;
    a struct is never modified after it is built)."""
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
    a = _bn_apply_struct(table.dt, n, view.channels, view.inner, eps, stats_are_var, act_mode)
    key = "bn_fwd_apply" + _apply_variant(view, table.dt, (x, z, y))
    # a vector thread moves VEC elements: size the grid by packs
    per_thread = 16 // x.itemsize if key != "bn_fwd_apply" else 1
    table.launch(
        key,
        (table.grid1d(-(-n // per_thread)),),
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
        (table.grid1d(c),),
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
    key = "bn_bwd_apply" + _apply_variant(view, dt, (dyd, xd, zd, dx, dz))
    per_thread = 16 // x.itemsize if key != "bn_bwd_apply" else 1
    table.launch(
        key,
        (table.grid1d(-(-n // per_thread)),),
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
    if training:
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


# ------------------------------------------------------------------ row norms


def _row_launch_block(cols: int) -> int:
    return 1024 if cols >= 8192 else 512 if cols >= 2048 else 256 if cols >= 512 else 128


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
    if rows:
        table.launch(
            f"rownorm_fwd_{'rms' if rms else 'mean'}",
            (rows,),
            (_row_launch_block(cols),),
            (x, weight, bias, y, mean, rstd, s),
        )
    return y, mean, rstd


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
    if rows:
        table.launch(
            f"rownorm_bwd_{'rms' if rms else 'mean'}",
            (rows,),
            (_row_launch_block(cols),),
            (dy, x, weight, mean, rstd, dx, s),
        )
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
            (table.grid1d(nparams),),
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


def _required(name: str, a: Any) -> Any:
    if a is None:
        raise BadParamError(f"{name}: the forward's saved statistic is needed, got None")
    return a


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
    if n * g:
        table.launch("gn_nhwc_fwd", (n * tiles,), (32, _GN_ROWS), (x, w, b, y, mean, rstd, s))
    return y, mean, rstd


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
    if n * g:
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
            (table.grid1d(c),),
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
    channels-last (``gn_nhwc_fwd``, no transposed copy); NCHW runs ``rownorm_fwd_mean``.
    x of other strides is copied to a C-contiguous array first."""
    backend = backend_for(x, weight, bias, out, names=("x", "weight", "bias", "out"))
    x, dt, g, c, n, spatial, w, b = _group_common(x, num_groups, weight, bias, layout)
    eps = _eps(eps)
    _check_out(out, x, backend, {"x": x})
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


# ------------------------------------------------------------------ LRN


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
        table.launch("lrn_fwd", (table.grid1d(x.size),), (_BLOCK,), (xd, y, s))
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
        grid = (table.grid1d(x.size),)
        table.launch("lrn_scale", grid, (_BLOCK,), (dyd, xd, t, sp, s))
        table.launch("lrn_bwd", grid, (_BLOCK,), (dyd, xd, t, sp, dx, s))
    return dx


__all__ = [
    "BN_MODES",
    "batch_norm",
    "batch_norm_backward",
    "batch_norm_forward_inference",
    "batch_norm_forward_training",
    "group_norm",
    "group_norm_backward",
    "group_norm_forward",
    "instance_norm",
    "instance_norm_backward",
    "instance_norm_forward",
    "last_kernel_name",
    "layer_norm",
    "layer_norm_backward",
    "layer_norm_forward",
    "lrn",
    "lrn_backward",
    "module_specs",
    "rms_norm",
    "rms_norm_backward",
    "rms_norm_forward",
]

# Kernel launches only, host copies reported: an emulator graph may replay them, and a
# repeated call replays its launch template (runtime.templates).
graph_safe(batch_norm_forward_inference, batch_norm_forward_training, batch_norm_backward,
           batch_norm, layer_norm_forward, layer_norm, layer_norm_backward, rms_norm_forward,
           rms_norm, rms_norm_backward, group_norm_forward, group_norm, group_norm_backward,
           instance_norm_forward, instance_norm, instance_norm_backward, lrn,
           lrn_backward)  # fmt: skip
