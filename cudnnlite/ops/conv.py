"""Convolution forward: ``conv1d``, ``conv2d`` and ``conv3d`` with PyTorch's argument
conventions and cuDNN's fused form ``y = act(alpha * conv(x, w) + alpha2 * z + bias)``; plans.

A call validates and normalizes its arguments into a ConvProblem, takes a plan from
the in-process cache (the dispatcher chooses the solver: explicit ``algo`` → tuning
DB → heuristics; see cudnnlite/dispatch/select.py) and launches it. Inputs that are
not contiguous in the layout are copied first; an ``out`` that is not contiguous
receives a copy of the result.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes
from ..dispatch import registry
from ..dispatch.plans import Plan, get_plan
from ..errors import BadParamError, NotSupportedError
from ..problems.conv import ConvProblem
from ..runtime.graph import graph_safe, note_host_work
from ..runtime.kernel import ModuleSpec
from ..runtime.select import backend_by_name, backend_for, forced_backend
from ..runtime.streams import with_stream
from ..runtime.variants import register
from ..solvers.conv.common import IDENTITY_MODE, ConvTensors, Epilogue
from ._arrays import array_module, as_array, contiguous, float_dtype
from ._fastpath import CallCache, arrays_key, plan_shape, scalars_key, settings_key
from ._fastpath import enabled as fastpath_enabled
from .activation import ACTIVATION_MODES, activation_forward

_LAYOUTS_2D = ("NCHW", "NHWC")
_LAYOUTS_1D = {"NCW": "NCW", "NWC": "NWC", "NCHW": "NCW", "NHWC": "NWC"}
_LAYOUTS_3D = ("NCDHW", "NDHWC")
_MODE_ID = {m: i for i, m in enumerate(ACTIVATION_MODES)}
_COEF_DEFAULTS = {
    "leaky_relu": 0.01,
    "clipped_relu": 6.0,
    "elu": 1.0,
    "swish": 1.0,
    "softplus": 1.0,
    "hardtanh": 1.0,  # max_val (its min_val: activation_threshold, default -1)
}
# activation_threshold's default: softplus's linear threshold, hardtanh's min_val
_THRESHOLD_DEFAULTS = {"softplus": 20.0, "hardtanh": -1.0}
_INDEX_LIMIT = 2**31


@register("solvers")
def module_specs() -> list[ModuleSpec]:
    """Every registered solver's modules, of every family (conv, attention, rnn)."""
    specs: list[ModuleSpec] = []
    for name in registry.NAMES:
        try:
            solver = registry.get(name)
        except BadParamError:
            continue  # not built in this checkout
        specs.extend(solver.module_specs())
    return list(dict.fromkeys(specs))


# ------------------------------------------------------------------ argument normalization


def _ints(name: str, value: Any, n: int, minimum: int) -> tuple[int, ...]:
    try:
        vals = (value,) * n if isinstance(value, (int, np.integer)) else tuple(value)
    except TypeError:
        raise BadParamError(f"{name}: expected an int or {n} ints, got {value!r}") from None
    if len(vals) == 1:
        vals = vals * n  # PyTorch broadcasts a 1-tuple: padding=(1,) is (1, 1) in 2-D
    if len(vals) != n or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                 for v in vals):  # fmt: skip
        raise BadParamError(f"{name}: expected an int or {n} ints, got {value!r}")
    if any(v < minimum for v in vals):
        raise BadParamError(f"{name}: every value must be >= {minimum}, got {value!r}")
    if any(v >= 2**31 for v in vals):
        raise BadParamError(f"{name}: every value must be below 2^31 (the kernels' ints), "
                            f"got {value!r}")  # fmt: skip
    return tuple(int(v) for v in vals)


def _pads(padding: Any, filt: tuple[int, ...], strides: tuple[int, ...],
          dils: tuple[int, ...]) -> tuple[tuple[int, int], ...]:  # fmt: skip
    nd = len(filt)
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nd
        if padding == "same":
            if any(s != 1 for s in strides):
                raise BadParamError("padding: 'same' needs stride 1 (as in PyTorch)")
            pads = []
            for f, d in zip(filt, dils, strict=True):
                total = d * (f - 1)
                pads.append((total // 2, total - total // 2))  # the extra one after
            return tuple(pads)
        raise BadParamError(
            f"padding: expected an int, a tuple, 'same' or 'valid', got {padding!r}"
        )
    if isinstance(padding, (int, np.integer)) and not isinstance(padding, bool):
        p = _ints("padding", padding, 1, 0)[0]
        return ((p, p),) * nd
    try:
        vals = tuple(padding)
    except TypeError:
        raise BadParamError(
            f"padding: expected an int, a tuple, 'same' or 'valid', got {padding!r}"
        ) from None
    if len(vals) == 1:
        vals = vals * nd  # a 1-tuple broadcasts, as in PyTorch
    if len(vals) == nd:
        p = _ints("padding", vals, nd, 0)
        return tuple((v, v) for v in p)
    if len(vals) == 2 * nd:
        p = _ints("padding", vals, 2 * nd, 0)
        return tuple((p[2 * i], p[2 * i + 1]) for i in range(nd))
    raise BadParamError(
        f"padding: expected an int, {nd} ints, {2 * nd} ints (before, after per dim), "
        f"'same' or 'valid', got {padding!r}"
    )


def _finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise BadParamError(f"{name}: expected a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise BadParamError(f"{name}: expected a finite number, got {value!r}")
    return v


def _epilogue(activation: Any, coef: Any, threshold: Any, alpha: Any, alpha2: Any,
              has_bias: bool, has_z: bool, dtype: Any = np.float64) -> Epilogue:  # fmt: skip
    """The call's Epilogue; its scalars finite in the kernels' type (float32 unless
    ``dtype`` is float64: 1e300 would be inf there)."""
    epi = _epilogue_of(activation, coef, threshold, alpha, alpha2, has_bias, has_z)
    if np.dtype(dtype) != np.float64:
        with np.errstate(over="ignore"):
            for name, v in (("alpha", epi.alpha), ("alpha2", epi.alpha2),
                            ("activation_coef", epi.coef)):  # fmt: skip
                if not math.isfinite(np.float32(v)):
                    raise BadParamError(f"{name}: expected a finite number in float32, got {v!r}")
    return epi


def _epilogue_of(activation: Any, coef: Any, threshold: Any, alpha: Any, alpha2: Any,
                 has_bias: bool, has_z: bool) -> Epilogue:  # fmt: skip
    a = _finite("alpha", alpha)
    a2 = _finite("alpha2", (1.0 if has_z else 0.0) if alpha2 is None else alpha2)
    if activation is None:
        if coef is not None or threshold is not None:
            raise BadParamError("activation_coef/activation_threshold: given without an activation")
        return Epilogue(a, a2, IDENTITY_MODE, 0.0, 0.0, has_bias, has_z)
    if activation not in _MODE_ID:
        raise BadParamError(
            f"activation: expected None or one of {', '.join(ACTIVATION_MODES)}, got {activation!r}"
        )
    if coef is not None and activation not in _COEF_DEFAULTS:
        raise BadParamError(f"activation_coef: {activation} takes no coefficient")
    if threshold is not None and activation not in _THRESHOLD_DEFAULTS:
        raise BadParamError(
            "activation_threshold: only softplus (its threshold) and hardtanh (its min_val) "
            "take a threshold"
        )
    c = (
        _finite("activation_coef", coef)
        if coef is not None
        else _COEF_DEFAULTS.get(activation, 0.0)
    )
    t = (
        _finite("activation_threshold", threshold)
        if threshold is not None
        else _THRESHOLD_DEFAULTS.get(activation, 20.0)
    )
    if activation in ("clipped_relu", "softplus") and c <= 0:
        raise BadParamError(f"activation_coef: {activation} needs a coefficient > 0, got {c}")
    if activation == "hardtanh" and t > c:
        raise BadParamError(
            f"activation_threshold: hardtanh's min_val ({t}) must not exceed its max_val "
            f"(activation_coef, {c})"
        )
    return Epilogue(a, a2, _MODE_ID[activation], c, t, has_bias, has_z)


@dataclass(frozen=True)
class EmptyConv:
    """A valid convolution with no work (N, C or K zero, or empty spatial dims with N or C
    zero): its shapes in the layout, and nothing for a kernel to do. Every output is
    ``act(alpha2 * z + bias)`` (a sum over no input channels is 0); that output is empty
    unless only C is zero."""

    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    k: int
    channels_last: bool


@dataclass(frozen=True)
class _Call:
    """A validated call: its problem and epilogue."""

    problem: ConvProblem
    epilogue: Epilogue


def check_math(math_mode: Any, dt: dtypes.DType) -> None:
    """``math``: "default", or "tf32" for float32 inputs."""
    if math_mode not in ("default", "tf32"):
        raise BadParamError(f"math: expected 'default' or 'tf32', got {math_mode!r}")
    if math_mode == "tf32" and dt.short != "fp32":
        raise BadParamError("math: 'tf32' applies to float32 inputs only")


def make_problem(
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    dtype: Any,
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    layout: str = "NCHW",
    math_mode: str = "default",
    nd: int = 2,
    allow_empty: bool = False,
) -> ConvProblem | EmptyConv:
    """Validates shapes and hyper-parameters; the ConvProblem they describe. With
    ``allow_empty``, a convolution PyTorch accepts although it has no work (N, C or K
    zero; empty spatial dims with N or C zero) is an :class:`EmptyConv`; without it,
    a BadParamError."""
    dt = dtypes.lookup(dtype)
    if dt is None:
        raise BadParamError(f"x: expected dtype {dtypes.names()}, got {dtype}")
    if nd == 2:
        if layout not in _LAYOUTS_2D:
            raise BadParamError(f"layout: expected 'NCHW' or 'NHWC', got {layout!r}")
        lay = layout
    elif nd == 3:
        if layout not in _LAYOUTS_3D:
            raise BadParamError(f"layout: expected 'NCDHW' or 'NDHWC', got {layout!r}")
        lay = layout
    else:
        if layout not in _LAYOUTS_1D:
            raise BadParamError(f"layout: expected 'NCW' or 'NWC', got {layout!r}")
        lay = _LAYOUTS_1D[layout]
    if len(x_shape) != nd + 2:
        raise BadParamError(
            f"x: expected a {nd + 2}-D array ({lay}) or an unbatched {nd + 1}-D one, got shape "
            f"{tuple(x_shape)}"
        )
    if len(w_shape) != nd + 2:
        raise BadParamError(f"w: expected a {nd + 2}-D filter array, got shape {tuple(w_shape)}")
    channels_last = lay[-1] == "C"
    if channels_last:
        n, *spatial, c = x_shape
        k, *filt, cg = w_shape
    else:
        n, c, *spatial = x_shape
        k, cg, *filt = w_shape
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups < 1:
        raise BadParamError(f"groups: expected an int >= 1, got {groups!r}")
    if c % groups:
        raise BadParamError(f"groups: {groups} does not divide the {c} input channels")
    if k % groups:
        raise BadParamError(f"groups: {groups} does not divide the {k} output channels (w)")
    if cg * groups != c:
        raise BadParamError(
            f"w: has {cg} channels per group, expected {c // groups} (x has {c} channels, "
            f"groups={groups}); check the layout ({lay}: filters "
            f"{'K,*filter,C' if channels_last else 'K,C,*filter'})"
        )
    empty = min(n, c, k, *spatial) == 0
    if min(filt) < 1 or (empty and not allow_empty):
        raise BadParamError(f"x and w must not be empty: x {tuple(x_shape)}, w {tuple(w_shape)}")
    if min(spatial) == 0 and n and c:
        raise BadParamError(
            f"x: empty spatial dims need N = 0 or C = 0 (as PyTorch), got shape {tuple(x_shape)}"
        )
    strides = _ints("stride", stride, nd, 1)
    dils = _ints("dilation", dilation, nd, 1)
    pads = _pads(padding, tuple(filt), strides, dils)
    check_math(math_mode, dt)
    for size, f, (b, a), d in zip(spatial, filt, pads, dils, strict=True):
        if size + b + a < d * (f - 1) + 1:
            raise BadParamError(
                f"x: the padded input ({size} + {b} + {a}) is smaller than the dilated filter "
                f"({d * (f - 1) + 1}): the output would be empty"
            )
    if empty:
        out = tuple(
            (size + b + a - d * (f - 1) - 1) // s + 1
            for size, f, (b, a), d, s in zip(spatial, filt, pads, dils, strides, strict=True)
        )
        y_shape = (n, *out, k) if channels_last else (n, k, *out)
        return EmptyConv(tuple(map(int, x_shape)), tuple(map(int, w_shape)),
                         tuple(map(int, y_shape)), int(k), channels_last)  # fmt: skip
    problem = ConvProblem(
        n=int(n),
        c=int(c),
        spatial=tuple(map(int, spatial)),
        k=int(k),
        filter=tuple(map(int, filt)),
        pads=pads,
        strides=strides,
        dilations=dils,
        groups=int(groups),
        layout=lay,
        dtype=dt.short,
        math=math_mode,
    )
    for name, shape in (("x", x_shape), ("y", problem.y_shape()), ("w", w_shape)):
        if math.prod(shape) >= _INDEX_LIMIT:
            raise NotSupportedError(
                f"{name}: {math.prod(shape)} elements; convolutions are limited to tensors "
                f"of fewer than 2^31 elements (32-bit indexing in the kernels)"
            )
    return problem


def _check_operand(name: str, a: Any, shape: tuple[int, ...], dtype: Any) -> None:
    if tuple(a.shape) != tuple(shape):
        raise BadParamError(f"{name}: expected shape {tuple(shape)}, got {tuple(a.shape)}")
    if a.dtype != dtype:
        raise BadParamError(f"{name}: expected dtype {dtype} like x, got {a.dtype}")


# Operands 16-byte aligned: the tensor-core kernels copy x, w, dy in 16-byte cp.async
# vectors (the epilogue checks y's own alignment, so out= may sit anywhere).
_contiguous = functools.partial(contiguous, family="conv", align=16)


def _run(plan: Plan, x: Any, w: Any, bias: Any, z: Any, out: Any, epilogue: Epilogue) -> Any:
    p = plan.problem
    xp = array_module(x)
    dtype = x.dtype
    _check_operand("w", w, p.w_shape(), dtype)
    if bias is not None:
        _check_operand("bias", bias, (p.k,), dtype)
    if z is not None:
        _check_operand("z", z, p.y_shape(), dtype)
    target = out
    if out is not None:
        _check_operand("out", out, p.y_shape(), dtype)
        if isinstance(out, np.ndarray) and not out.flags.writeable:
            raise BadParamError("out: the array is read-only")
        for name, a in (("x", x), ("w", w), ("bias", bias)):
            if a is not None and xp.may_share_memory(a, out):
                raise BadParamError(f"out: overlaps {name}; a convolution cannot run in place")
        if z is not None and z is not out and xp.may_share_memory(z, out):
            raise BadParamError("out: overlaps z without being z itself")
        if not out.flags.c_contiguous:
            target = None
    y = target if target is not None else xp.empty(p.y_shape(), dtype=dtype)
    tensors = ConvTensors(_contiguous(x), _contiguous(w), y, _contiguous(bias), _contiguous(z))
    plan.launch(tensors, epilogue)
    if out is not None and target is None:
        note_host_work("conv: a copy into a non-contiguous out=")
        out[...] = y
        return out
    return y


def unbatched_view(name: str, a: Any, nd: int, writable: bool) -> Any:
    """``a[None]`` for an operand of an unbatched call (x of nd + 1 dims), which must be
    unbatched too; a view, so that a write to it is a write to ``a``."""
    if getattr(a, "ndim", None) != nd + 1:
        raise BadParamError(
            f"{name}: x is unbatched ({nd + 1}-D), expected an unbatched {nd + 1}-D {name} "
            f"too, got shape {tuple(getattr(a, 'shape', ()))}"
        )
    if writable and isinstance(a, np.ndarray) and not a.flags.writeable:
        raise BadParamError(f"{name}: the array is read-only")
    return a[None]


def bias_only(y_shape: tuple[int, ...], channels_last: bool, bias: Any, z: Any,
              alpha2: float, dtype: Any, xp: Any) -> Any:  # fmt: skip
    """``alpha2 * z + bias`` broadcast to ``y_shape`` (zeros without either), summed in
    the accumulation type (float64 for float64, else float32) as the kernels do."""
    acc = np.float64 if np.dtype(dtype) == np.float64 else np.float32
    y = xp.zeros(y_shape, dtype=acc)
    if bias is not None and y.size:
        nd = len(y_shape) - 2
        y += bias.astype(acc) if channels_last else bias.astype(acc).reshape((-1,) + (1,) * nd)
    if z is not None and y.size:
        y += acc(alpha2) * z.astype(acc)
    return y


def _empty_conv(e: EmptyConv, x: Any, w: Any, bias: Any, z: Any, out: Any,
                epilogue: Epilogue) -> Any:  # fmt: skip
    """A convolution without work (PyTorch's empty batch, zero channels): every operand is
    checked as for a launch, nothing is launched for the convolution; with C = 0 alone
    the output is the epilogue of a zero sum, ``act(alpha2 * z + bias)``."""
    _check_operand("w", w, e.w_shape, x.dtype)
    if bias is not None:
        _check_operand("bias", bias, (e.k,), x.dtype)
    if z is not None:
        _check_operand("z", z, e.y_shape, x.dtype)
    if out is not None:
        _check_operand("out", out, e.y_shape, x.dtype)
        if isinstance(out, np.ndarray) and not out.flags.writeable:
            raise BadParamError("out: the array is read-only")
    xp = array_module(x)
    if math.prod(e.y_shape) == 0:
        return out if out is not None else xp.empty(e.y_shape, dtype=x.dtype)
    note_host_work("conv: the epilogue of a convolution without channels, on the host")
    y = bias_only(e.y_shape, e.channels_last, bias, z, epilogue.alpha2, x.dtype, xp)
    if epilogue.act_mode != IDENTITY_MODE:
        mode = ACTIVATION_MODES[epilogue.act_mode]
        coef = epilogue.coef if mode in _COEF_DEFAULTS else None
        threshold = epilogue.threshold if mode in _THRESHOLD_DEFAULTS else None
        y = activation_forward(y, mode, coef=coef, threshold=threshold)
    if out is None:
        return y.astype(x.dtype, copy=False)
    out[...] = y
    return out


# Functional calls without ``out`` (whose overlap checks depend on the pointers), by
# everything their validation reads: see _fastpath.
_CALLS = CallCache("conv")


def _call_key(nd: int, arrays: tuple, scalars: tuple) -> tuple | None:
    a = arrays_key(*arrays)
    s = scalars_key(*scalars)
    if a is None or s is None:
        return None
    return (nd, a, s, settings_key())


def _launch_new(plan: Plan, y_shape: tuple[int, ...], epilogue: Epilogue, x: Any, w: Any,
                bias: Any, z: Any) -> Any:  # fmt: skip
    """A cached call's launch: every check of _run passed for arrays of this key."""
    y = array_module(x).empty(y_shape, dtype=x.dtype)
    plan.launch(ConvTensors(_contiguous(x), _contiguous(w), y, _contiguous(bias),
                            _contiguous(z)), epilogue)  # fmt: skip
    return y


def _forward(
    nd: int,
    x: Any,
    w: Any,
    bias: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    groups: int,
    layout: str,
    activation: str | None,
    coef: Any,
    threshold: Any,
    z: Any,
    alpha: Any,
    alpha2: Any,
    math_mode: str,
    algo: str,
    out: Any,
) -> Any:
    """conv1d/conv2d/conv3d: validate, take the plan, launch."""
    if getattr(x, "ndim", None) == nd + 1:
        # unbatched (C, *spatial) or (*spatial, C), as PyTorch: a batch of one
        x = as_array("x", x)
        z1 = None if z is None else unbatched_view("z", as_array("z", z), nd, z is out)
        out1 = None if out is None else unbatched_view("out", out, nd, True)
        if z is not None and z is out:
            z1 = out1  # the in-place residual stays the very same array
        y = _forward(nd, x[None], w, bias, stride, padding, dilation, groups, layout,
                     activation, coef, threshold, z1, alpha, alpha2, math_mode, algo,
                     out1)  # fmt: skip
        return out if out is not None else y[0]
    key = None
    if out is None:
        key = _call_key(nd, (x, w, bias, z), (stride, padding, dilation, groups, layout,
                        activation, coef, threshold, alpha, alpha2, math_mode, algo))  # fmt: skip
        entry = _CALLS.get(key)
        if entry is not None:
            return _launch_new(*entry, x, w, bias, z)
    backend = backend_for(x, w, bias, z, out, names=("x", "w", "bias", "z", "out"))
    x = as_array("x", x)
    w = as_array("w", w)
    bias = None if bias is None else as_array("bias", bias)
    z = None if z is None else as_array("z", z)
    float_dtype("x", x)
    for name, a in (("w", w), ("bias", bias), ("z", z)):
        # before the plan: a mixed call must not compile the kernels of x's dtype first
        if a is not None and a.dtype != x.dtype:
            raise BadParamError(f"{name}: expected dtype {x.dtype} like x, got {a.dtype}")
    problem = make_problem(
        x.shape,
        w.shape,
        x.dtype,
        stride=stride,
        padding=padding,
        dilation=dilation,
        groups=groups,
        layout=layout,
        math_mode=math_mode,
        nd=nd,
        allow_empty=True,
    )
    epilogue = _epilogue(
        activation, coef, threshold, alpha, alpha2, bias is not None, z is not None, x.dtype
    )
    if isinstance(problem, EmptyConv):
        return _empty_conv(problem, x, w, bias, z, out, epilogue)
    plan = get_plan(backend, problem, algo)
    y = _run(plan, x, w, bias, z, out, epilogue)
    _CALLS.put(key, (plan, problem.y_shape(), epilogue))
    return y


# ------------------------------------------------------------------ public API


@with_stream
def conv2d(
    x: Any,
    w: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    layout: str = "NCHW",
    activation: str | None = None,
    activation_coef: float | None = None,
    activation_threshold: float | None = None,
    z: Any = None,
    alpha: float = 1.0,
    alpha2: float | None = None,
    math: str = "default",
    algo: str = "auto",
    out: Any = None,
) -> Any:
    """2-D convolution (cross-correlation, as PyTorch and cuDNN) with an optional fused
    epilogue: ``y = act(alpha * conv(x, w) + alpha2 * z + bias)``.

    Args:
        x: (N, C, H, W) for layout "NCHW" or (N, H, W, C) for "NHWC", or unbatched
            (C, H, W) / (H, W, C) as in PyTorch (z and out then unbatched too, and so is
            the result); N may be 0 (an empty result, nothing launched), and so may C
            (``act(alpha2 * z + bias)``, nothing launched for the convolution) or w's K
            (an empty result); float32, float16 or
            bfloat16 (fp32 accumulation), or float64 (float64 accumulation; alpha, alpha2
            and the activation's coefficients reach the kernels unrounded; Winograd and
            the tensor-core solvers do not apply).
        w: (K, C/groups, R, S) for NCHW, (K, R, S, C/groups) for NHWC, same dtype (a
            different dtype is a BadParamError: no mixed precision).
        bias: (K,) or None, same dtype.
        stride, dilation: an int or (h, w) (a 1-tuple broadcasts, as in PyTorch).
        padding: an int, (h, w), (top, bottom, left, right), "valid" or "same" (stride 1;
            with an even total the extra row/column goes after, as PyTorch).
        groups: channel groups; groups == C is a depthwise convolution.
        activation: None or an activation mode (cudnnlite.ACTIVATION_MODES), with
            ``activation_coef`` / ``activation_threshold`` as in activation_forward.
        z: a tensor shaped like the output, added with weight ``alpha2`` (default 1.0 when
            z is given, else 0): the residual of cuDNN's ConvBiasActivation.
        alpha: scales the convolution.
        math: "default" (fp32 stays fp32) or "tf32" (tensor cores for float32 inputs).
        algo: "auto" (the dispatcher decides), an algorithm family ("winograd",
            "implicit_gemm", "direct", "gemm", "tensor_core": the best usable solver of
            that family, by the tuning DB's times, then the dispatcher's ranking; see
            cudnnlite.dispatch.select.algo_families) or a solver name (NotSupportedError
            with the solver's or the family's reasons when it cannot run this problem).
        out: the output array (may be z itself).

    Returns:
        y, an array of the kind of x (NumPy → emulator, CuPy → GPU).
    """
    return _forward(
        2,
        x,
        w,
        bias,
        stride,
        padding,
        dilation,
        groups,
        layout,
        activation,
        activation_coef,
        activation_threshold,
        z,
        alpha,
        alpha2,
        math,
        algo,
        out,
    )


@with_stream
def conv1d(
    x: Any,
    w: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    layout: str = "NCW",
    activation: str | None = None,
    activation_coef: float | None = None,
    activation_threshold: float | None = None,
    z: Any = None,
    alpha: float = 1.0,
    alpha2: float | None = None,
    math: str = "default",
    algo: str = "auto",
    out: Any = None,
) -> Any:
    """1-D convolution: x (N, C, W) for "NCW" or (N, W, C) for "NWC", w (K, C/groups, S)
    or (K, S, C/groups); otherwise as :func:`conv2d`."""
    return _forward(
        1,
        x,
        w,
        bias,
        stride,
        padding,
        dilation,
        groups,
        layout,
        activation,
        activation_coef,
        activation_threshold,
        z,
        alpha,
        alpha2,
        math,
        algo,
        out,
    )


@with_stream
def conv3d(
    x: Any,
    w: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    layout: str = "NCDHW",
    activation: str | None = None,
    activation_coef: float | None = None,
    activation_threshold: float | None = None,
    z: Any = None,
    alpha: float = 1.0,
    alpha2: float | None = None,
    math: str = "default",
    algo: str = "auto",
    out: Any = None,
) -> Any:
    """3-D convolution (video, volumes): x (N, C, D, H, W) for "NCDHW" or (N, D, H, W, C)
    for "NDHWC", w (K, C/groups, T, R, S) or (K, T, R, S, C/groups); stride, dilation an
    int or (d, h, w); padding an int, (d, h, w), (front, back, top, bottom, left, right),
    "valid" or "same". Otherwise as :func:`conv2d` (the same fused epilogue)."""
    return _forward(
        3,
        x,
        w,
        bias,
        stride,
        padding,
        dilation,
        groups,
        layout,
        activation,
        activation_coef,
        activation_threshold,
        z,
        alpha,
        alpha2,
        math,
        algo,
        out,
    )


_PLAN_EPILOGUES = 16


class ConvPlan:
    """A convolution prepared once: problem, solver, config, compiled kernels and
    workspace. Calling it on arrays of the planned shapes only launches.

    Made by :func:`conv2d_plan` or :func:`conv3d_plan`; ``plan(x, w, bias, z=..., out=...,
    activation=...)``.

    A call without ``out`` whose arrays are all of the plan's array type (NumPy for the
    emulator, CuPy for the GPU), shapes and dtype checks only that and launches; any
    other call (``out=``, other arrays, a forced backend) takes the full checks, which
    raise the same errors as :func:`conv2d` for bad arguments.
    """

    _templated_by_identity = True  # its calls' launch templates key it by identity

    def __init__(self, plan: Plan) -> None:
        self._plan = plan
        self.problem = plan.problem
        self.solver = plan.solver.name
        self.config = plan.config
        self.source = plan.source
        self.workspace_bytes = plan.workspace_bytes
        p = plan.problem
        # NumPy's or CuPy's ndarray: the only array type the quick call accepts.
        self._array_type = getattr(getattr(plan.backend, "xp", None), "ndarray", None)
        self._dtype = next(d.numpy for d in dtypes.FLOAT_TYPES if d.short == p.dtype)
        self._shapes = (p.x_shape(), p.w_shape(), (p.k,), p.y_shape())
        # Epilogues by their arguments as given (a plan meets few): checked once each.
        self._epilogues: dict[tuple, Epilogue] = {}
        # The GPU the plan's kernels were loaded on (None on the emulator): a call runs on
        # its arrays' device (with_stream), where those kernels do not exist.
        self._device = plan.backend.device_key() if plan.backend.name == "cuda" else None

    def _check_device(self) -> None:
        here = self._plan.backend.device_key()
        if here != self._device:
            raise BadParamError(
                f"x: the arrays are on {here}, this plan was made on {self._device}; "
                "make one plan per device"
            )

    def _quick(self, x: Any, w: Any, bias: Any, z: Any, epilogue_args: tuple) -> Any:
        """The launch of a call that needs no other check (see the class docstring), or
        None when the call needs the full checks."""
        t, dt = self._array_type, self._dtype
        x_shape, w_shape, b_shape, y_shape = self._shapes
        if (
            t is None
            or type(x) is not t
            or type(w) is not t
            or x.shape != x_shape
            or w.shape != w_shape
            or x.dtype != dt
            or w.dtype != dt
            or (bias is not None and (type(bias) is not t or bias.shape != b_shape
                                      or bias.dtype != dt))
            or (z is not None and (type(z) is not t or z.shape != y_shape or z.dtype != dt))
            or forced_backend()
            or not fastpath_enabled()
        ):  # fmt: skip
            return None
        key = (scalars_key(*epilogue_args), bias is not None, z is not None)
        epilogue = None if key[0] is None else self._epilogues.get(key)
        if epilogue is None:
            epilogue = _epilogue(*epilogue_args, bias is not None, z is not None, dt)
            if key[0] is not None and len(self._epilogues) < _PLAN_EPILOGUES:
                self._epilogues[key] = epilogue
        return _launch_new(self._plan, y_shape, epilogue, x, w, bias, z)

    @property
    def kernel_names(self) -> list[str]:
        return self._plan.kernel_names

    @with_stream
    def __call__(
        self,
        x: Any,
        w: Any,
        bias: Any = None,
        *,
        z: Any = None,
        out: Any = None,
        activation: str | None = None,
        activation_coef: float | None = None,
        activation_threshold: float | None = None,
        alpha: float = 1.0,
        alpha2: float | None = None,
    ) -> Any:
        if self._device is not None:
            self._check_device()
        if out is None:
            args = (activation, activation_coef, activation_threshold, alpha, alpha2)
            y = self._quick(x, w, bias, z, args)
            if y is not None:
                return y
        p = self.problem
        backend = backend_for(x, w, bias, z, out, names=("x", "w", "bias", "z", "out"))
        if backend is not self._plan.backend:
            raise BadParamError(
                f"x: this plan runs on {self._plan.backend.name}, the arrays are for {backend.name}"
            )
        _check_operand("x", x, p.x_shape(), x.dtype)
        if dtypes.lookup(x.dtype) is None or dtypes.lookup(x.dtype).short != p.dtype:
            raise BadParamError(f"x: this plan is for {p.dtype}, got {x.dtype}")
        epilogue = _epilogue(activation, activation_coef, activation_threshold, alpha, alpha2,
                             bias is not None, z is not None, x.dtype)  # fmt: skip
        return _run(self._plan, x, w, bias, z, out, epilogue)

    def __repr__(self) -> str:
        return f"<ConvPlan {self._plan.describe()}>"


def conv2d_plan(
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    dtype: Any = np.float32,
    layout: str = "NCHW",
    math: str = "default",
    algo: str = "auto",
    backend: str = "auto",
) -> ConvPlan:
    """Plans a 2-D convolution for arrays of these shapes: the solver is chosen and its
    kernels compiled now. ``backend``: "cpu" (emulator), "cuda", or "auto" (the GPU when
    CuPy sees one)."""
    return _plan(2, x_shape, w_shape, stride, padding, dilation, groups, dtype, layout, math,
                 algo, backend)  # fmt: skip


def conv3d_plan(
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    dtype: Any = np.float32,
    layout: str = "NCDHW",
    math: str = "default",
    algo: str = "auto",
    backend: str = "auto",
) -> ConvPlan:
    """Plans a 3-D convolution (shapes as :func:`conv3d`); otherwise as :func:`conv2d_plan`."""
    return _plan(3, x_shape, w_shape, stride, padding, dilation, groups, dtype, layout, math,
                 algo, backend)  # fmt: skip


def _plan(nd: int, x_shape: Sequence[int], w_shape: Sequence[int], stride: Any, padding: Any,
          dilation: Any, groups: int, dtype: Any, layout: str, math: str, algo: str,
          backend: str) -> ConvPlan:  # fmt: skip
    problem = make_problem(
        plan_shape(x_shape, "x_shape"), plan_shape(w_shape, "w_shape"), dtype, stride=stride,
        padding=padding, dilation=dilation, groups=groups, layout=layout, math_mode=math, nd=nd,
    )  # fmt: skip
    if backend == "auto":
        from ..runtime.cuda import CudaBackend

        backend = "cuda" if CudaBackend.available() else "cpu"
    return ConvPlan(get_plan(backend_by_name(backend), problem, algo))


# Kernel launches only, host copies reported: an emulator graph may replay these.
graph_safe(conv1d, conv2d, conv3d, ConvPlan.__call__)
