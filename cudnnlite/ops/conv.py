"""Convolution forward: ``conv1d``, ``conv2d`` and ``conv3d`` with PyTorch's argument
conventions and cuDNN's fused form ``y = act(alpha * conv(x, w) + alpha2 * z + bias)``.

A call validates and normalizes its arguments into a ConvProblem (ops/conv_args.py), takes
a plan from the in-process cache (the dispatcher chooses the solver: explicit ``algo`` →
tuning DB → heuristics; see cudnnlite/dispatch/select.py) and launches it. Inputs that are
not contiguous in the layout are copied first; an ``out`` that is not contiguous
receives a copy of the result. Plans made once for given shapes: ops/conv_plan.py.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np

from ..dispatch import registry
from ..dispatch.plans import Plan, get_plan
from ..dispatch.select import check_algo
from ..errors import BadParamError
from ..runtime.graph import graph_safe, note_host_work
from ..runtime.kernel import ModuleSpec
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ..runtime.variants import register
from ..solvers.conv.common import IDENTITY_MODE, ConvTensors, Epilogue
from ._arrays import array_module, as_array, check_distinct, contiguous, float_dtype
from ._fastpath import CallCache, arrays_key, scalars_key, settings_key
from .activation import ACTIVATION_MODES, activation_forward
from .conv_args import _COEF_DEFAULTS, _THRESHOLD_DEFAULTS, EmptyConv, _epilogue, make_problem


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


# ------------------------------------------------------------------ launching


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
        check_distinct("out", out)
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
        check_distinct("out", out)
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
        check_algo(algo, "conv_fwd")  # (no dispatch: the algo is checked all the same)
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



# Kernel launches only, host copies reported: an emulator graph may replay these.
graph_safe(conv1d, conv2d, conv3d)
