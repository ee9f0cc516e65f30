"""Convolution backward: ``conv2d_backward_data``, ``conv2d_backward_filter``,
``conv2d_backward_bias``, ``conv_transpose2d`` (PyTorch's semantics, built on backward
data) and their 1-D and 3-D forms.

Arguments are validated with the forward's rules (``ops.conv_args.make_problem``: the
problem is the FORWARD convolution x -> y whose gradient is taken, with ``direction``
"bwd_data" / "bwd_filter"), the dispatcher chooses a solver of the family
``conv_bwd_data`` / ``conv_bwd_filter`` (explicit ``algo`` -> tuning DB -> heuristics;
``cudnnlite.settings(deterministic=True)`` excludes the atomics solver) and launches
it. Inputs that are not contiguous in the layout are copied first; an ``out`` that is
not contiguous receives a copy of the result. fp32, fp16, bf16 storage with fp32
accumulation, fp64 with fp64 accumulation (every operand of one dtype); NCHW/NHWC
(NCW/NWC in 1-D, NCDHW/NDHWC in 3-D).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..dispatch.plans import get_plan
from ..dispatch.select import check_algo
from ..errors import BadParamError
from ..problems.conv import ConvProblem
from ..runtime.graph import graph_safe, note_host_work
from ..runtime.kernel import ModuleSpec
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ..runtime.variants import register
from ..solvers.conv import bwd_data, bwd_filter
from ..solvers.conv.bwd_data import BwdDataTensors
from ..solvers.conv.bwd_filter import BwdFilterTensors
from ..solvers.conv.common import IDENTITY_MODE, Epilogue
from ._arrays import array_module, as_array, check_distinct, float_dtype
from ._kernels import LastLaunch
from .conv import _contiguous, bias_only, unbatched_view
from .conv_args import _LAYOUTS_1D, EmptyConv, _ints, check_math, make_problem

_LAST = LastLaunch()  # the last backward call's kernel names, per thread


@register("conv_backward")
def module_specs() -> list[ModuleSpec]:
    """This family's own modules (the rotated-forward solvers' forward kernels are
    listed by the "conv" provider)."""
    return bwd_data.module_specs_all() + [
        bwd_filter.module_spec(dt, d3) for d3 in (False, True) for dt in dtypes.FLOAT_TYPES
    ]


def last_kernel_names() -> list[str]:
    """Readable names of the kernels the last backward call of this thread launched."""
    return list(_LAST.get() or ())


# ------------------------------------------------------------------ helpers


def _shape_arg(name: str, value: Any, nd: int) -> tuple[int, ...]:
    if isinstance(value, (str, bytes)) or not hasattr(value, "__len__"):
        raise BadParamError(f"{name}: expected a sequence of {nd + 2} ints, got {value!r}")
    vals = tuple(value)
    if len(vals) != nd + 2 or not all(
        isinstance(v, (int, np.integer)) and not isinstance(v, bool) for v in vals
    ):
        raise BadParamError(f"{name}: expected a sequence of {nd + 2} ints, got {value!r}")
    if min(vals) < 0:
        raise BadParamError(f"{name}: every size must be >= 0, got {vals}")
    return tuple(int(v) for v in vals)


def _length(value: Any) -> int | None:
    try:
        return len(value)
    except TypeError:
        return None


def _renamed(exc: BadParamError, names: dict[str, str]) -> BadParamError:
    """The forward's message with its argument named as in this call."""
    msg = str(exc)
    head, sep, rest = msg.partition(":")
    if sep and head in names:
        msg = f"{names[head]}:{rest}"
    return BadParamError(msg)


def _problem(x_shape: Sequence[int], w_shape: Sequence[int], dtype: Any, names: dict[str, str],
             nd: int, **conv: Any) -> ConvProblem | EmptyConv:  # fmt: skip
    """The forward problem, or an EmptyConv when it has no work (PyTorch's empty batch,
    zero channels): its gradients are then zeros or empty, and nothing is launched."""
    try:
        return make_problem(tuple(x_shape), tuple(w_shape), dtype, nd=nd, allow_empty=True,
                            **conv)  # fmt: skip
    except BadParamError as exc:
        raise _renamed(exc, names) from None


def _check(name: str, a: Any, shape: tuple[int, ...], dtype: Any, why: str = "") -> None:
    if tuple(a.shape) != tuple(shape):
        raise BadParamError(f"{name}: expected shape {tuple(shape)}{why}, got {tuple(a.shape)}")
    if a.dtype != dtype:
        raise BadParamError(f"{name}: expected dtype {dtype}, got {a.dtype}")


def _target(out: Any, shape: tuple[int, ...], dtype: Any, inputs: dict[str, Any],
            xp: Any) -> tuple[Any, bool]:  # fmt: skip
    """(array to write, whether it must be copied into out afterwards)."""
    if out is None:
        return xp.empty(shape, dtype=dtype), False
    _check("out", out, shape, dtype)
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise BadParamError("out: the array is read-only")
    check_distinct("out", out)
    for name, a in inputs.items():
        if a is not None and xp.may_share_memory(a, out):
            raise BadParamError(f"out: overlaps {name}; the gradient cannot be computed in place")
    if out.flags.c_contiguous:
        return out, False
    return xp.empty(shape, dtype=dtype), True


def _deliver(result: Any, out: Any, copy: bool) -> Any:
    """``result``, or out when _target asked for a copy into it (a non-contiguous out=:
    host work, reported)."""
    if not copy:
        return result
    note_host_work("conv backward: a copy into a non-contiguous out=")
    out[...] = result
    return out


def _zeros(out: Any, shape: tuple[int, ...], dtype: Any, inputs: dict[str, Any], xp: Any) -> Any:
    """The gradient of a convolution without work: zeros (no output depends on the
    operand), or an empty array; nothing is launched."""
    target, copy = _target(out, shape, dtype, inputs, xp)
    note_host_work("conv backward: zeros for a convolution without work")
    target[...] = 0
    return _deliver(target, out, copy)


def _why(stride: Any, padding: Any, dilation: Any) -> str:
    return f" (from the shapes with stride={stride}, padding={padding}, dilation={dilation})"


# ------------------------------------------------------------------ backward data


def _backward_data(dy: Any, w: Any, x_shape: Any, stride: Any, padding: Any, dilation: Any,
                   groups: int, layout: str, algo: str, out: Any, nd: int,
                   math: str = "default") -> Any:  # fmt: skip
    if getattr(dy, "ndim", None) == nd + 1 and _length(x_shape) == nd + 1:
        # unbatched, as the forward: a batch of one
        out1 = None if out is None else unbatched_view("out", out, nd, True)
        dx = _backward_data(as_array("dy", dy)[None], w, (1, *x_shape), stride, padding,
                            dilation, groups, layout, algo, out1, nd, math)  # fmt: skip
        return out if out is not None else dx[0]
    backend = backend_for(dy, w, out, names=("dy", "w", "out"))
    dy, w = as_array("dy", dy), as_array("w", w)
    float_dtype("dy", dy)
    if w.dtype != dy.dtype:
        raise BadParamError(f"w: expected dtype {dy.dtype} like dy, got {w.dtype}")
    xs = _shape_arg("x_shape", x_shape, nd)
    problem = _problem(xs, w.shape, dy.dtype, {"x": "x_shape"}, nd, stride=stride,
                       padding=padding, dilation=dilation, groups=groups,
                       layout=layout, math_mode=math)  # fmt: skip
    if isinstance(problem, EmptyConv):
        _check("dy", dy, problem.y_shape, dy.dtype, _why(stride, padding, dilation))
        check_algo(algo, "conv_bwd_data")  # (no dispatch: the algo is checked all the same)
        return _zeros(out, problem.x_shape, dy.dtype, {"dy": dy, "w": w}, array_module(dy))
    _check("dy", dy, problem.y_shape(), dy.dtype, _why(stride, padding, dilation))
    problem = dataclasses.replace(problem, direction="bwd_data")
    return _run_data(backend, problem, dy, w, None, out, algo, problem.x_shape())


def _run_data(backend: Any, problem: ConvProblem, dy: Any, w: Any, bias: Any, out: Any,
              algo: str, out_shape: tuple[int, ...], dy_name: str = "dy") -> Any:  # fmt: skip
    """Backward data (``dy_name``: what the caller calls dy; conv_transpose's x)."""
    xp = array_module(dy)
    plan = get_plan(backend, problem, algo)
    dx, copy = _target(out, out_shape, dy.dtype, {dy_name: dy, "w": w, "bias": bias}, xp)
    target = dx
    crop = tuple(out_shape) != tuple(problem.x_shape())
    if crop:  # conv_transpose whose last rows no input reaches: computed smaller, zero-filled
        target = xp.empty(problem.x_shape(), dtype=dy.dtype)
    epilogue = Epilogue(1.0, 0.0, IDENTITY_MODE, 0.0, 0.0, bias is not None, False)
    tensors = BwdDataTensors(_contiguous(dy), _contiguous(w), target, _contiguous(bias))
    plan.launch(tensors, epilogue)
    _LAST.set(tuple(plan.kernel_names))
    if crop:
        note_host_work("conv_transpose: the rows no input reaches, filled on the host")
        dx[...] = 0
        region = tuple(slice(0, s) for s in problem.x_shape())
        dx[region] = target
        if bias is not None:  # the zero rows still get the bias
            b = bias.reshape((-1,) + (1,) * nd_of(problem)) if not problem.channels_last else bias
            mask = xp.ones(out_shape, dtype=bool)
            mask[region] = False
            dx[...] = xp.where(mask, xp.broadcast_to(b, out_shape).astype(dy.dtype), dx)
    return _deliver(dx, out, copy)


def nd_of(problem: ConvProblem) -> int:
    return problem.ndim


@with_stream
def conv2d_backward_data(
    dy: Any,
    w: Any,
    x_shape: Sequence[int],
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    layout: str = "NCHW",
    algo: str = "auto",
    math: str = "default",
    out: Any = None,
) -> Any:
    """The gradient of ``conv2d(x, w, stride, padding, dilation, groups)`` with respect to
    x, given dy (its output's gradient): ``dx``, shaped ``x_shape``.

    Args:
        dy: (N, K, P, Q) for "NCHW" or (N, P, Q, K) for "NHWC"; float32, float16 or
            bfloat16 (fp32 accumulation), or float64 (float64 accumulation). Must be
            exactly the forward's output shape.
        w: (K, C/groups, R, S) for NCHW, (K, R, S, C/groups) for NHWC, dy's dtype.
        x_shape: the forward input's shape in the layout.
        stride, padding, dilation, groups: as in :func:`cudnnlite.conv2d`.
        algo: "auto" or a ``conv_bwd_data_*`` solver name.
        math: "default" (fp32 stays fp32) or "tf32" (float32 inputs on TF32 tensor
            cores, sm_80+), as :func:`cudnnlite.conv2d`; the backward-filter and
            transposed forms take it too.
        out: the array to write dx into.

    Returns:
        dx, an array of the kind of dy (NumPy -> emulator, CuPy -> GPU).
    """
    return _backward_data(dy, w, x_shape, stride, padding, dilation, groups, layout, algo,
                          out, 2, math=math)  # fmt: skip


@with_stream
def conv1d_backward_data(
    dy: Any,
    w: Any,
    x_shape: Sequence[int],
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    layout: str = "NCW",
    algo: str = "auto",
    math: str = "default",
    out: Any = None,
) -> Any:
    """1-D :func:`conv2d_backward_data`: dy (N, K, Q) for "NCW" or (N, Q, K) for "NWC"."""
    return _backward_data(dy, w, x_shape, stride, padding, dilation, groups, layout, algo,
                          out, 1, math=math)  # fmt: skip


# ------------------------------------------------------------------ backward filter


def _backward_filter(x: Any, dy: Any, w_shape: Any, stride: Any, padding: Any, dilation: Any,
                     groups: int, layout: str, algo: str, out: Any, nd: int,
                   math: str = "default") -> Any:  # fmt: skip
    if getattr(x, "ndim", None) == nd + 1:
        # unbatched, as the forward: a batch of one (dw has no batch dim)
        dy1 = unbatched_view("dy", as_array("dy", dy), nd, False)
        return _backward_filter(as_array("x", x)[None], dy1, w_shape, stride, padding,
                                dilation, groups, layout, algo, out, nd, math)  # fmt: skip
    backend = backend_for(x, dy, out, names=("x", "dy", "out"))
    x, dy = as_array("x", x), as_array("dy", dy)
    float_dtype("x", x)
    if dy.dtype != x.dtype:
        raise BadParamError(f"dy: expected dtype {x.dtype} like x, got {dy.dtype}")
    ws = _shape_arg("w_shape", w_shape, nd)
    problem = _problem(x.shape, ws, x.dtype, {"w": "w_shape"}, nd, stride=stride,
                       padding=padding, dilation=dilation, groups=groups,
                       layout=layout, math_mode=math)  # fmt: skip
    xp = array_module(x)
    if isinstance(problem, EmptyConv):
        _check("dy", dy, problem.y_shape, x.dtype, _why(stride, padding, dilation))
        check_algo(algo, "conv_bwd_filter")  # (no dispatch: the algo is checked all the same)
        return _zeros(out, problem.w_shape, x.dtype, {"x": x, "dy": dy}, xp)
    _check("dy", dy, problem.y_shape(), x.dtype, _why(stride, padding, dilation))
    problem = dataclasses.replace(problem, direction="bwd_filter")
    plan = get_plan(backend, problem, algo)
    dw, copy = _target(out, problem.w_shape(), x.dtype, {"x": x, "dy": dy}, xp)
    plan.launch(BwdFilterTensors(_contiguous(x), _contiguous(dy), dw), Epilogue())
    _LAST.set(tuple(plan.kernel_names))
    return _deliver(dw, out, copy)


@with_stream
def conv2d_backward_filter(
    x: Any,
    dy: Any,
    w_shape: Sequence[int],
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    layout: str = "NCHW",
    algo: str = "auto",
    math: str = "default",
    out: Any = None,
) -> Any:
    """The gradient of ``conv2d(x, w, ...)`` with respect to w, given dy: ``dw``, shaped
    ``w_shape`` ((K, C/groups, R, S) for NCHW, (K, R, S, C/groups) for NHWC).

    ``algo``: "auto" or a ``conv_bwd_filter_*`` solver name. Under
    ``cudnnlite.settings(deterministic=True)`` the result is bitwise reproducible (the
    atomics solver is excluded). Other arguments as :func:`conv2d_backward_data`.
    """
    return _backward_filter(x, dy, w_shape, stride, padding, dilation, groups, layout, algo,
                            out, 2, math=math)  # fmt: skip


@with_stream
def conv1d_backward_filter(
    x: Any,
    dy: Any,
    w_shape: Sequence[int],
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    layout: str = "NCW",
    algo: str = "auto",
    math: str = "default",
    out: Any = None,
) -> Any:
    """1-D :func:`conv2d_backward_filter`: w_shape (K, C/groups, S) or (K, S, C/groups)."""
    return _backward_filter(x, dy, w_shape, stride, padding, dilation, groups, layout, algo,
                            out, 1, math=math)  # fmt: skip


# ------------------------------------------------------------------ backward bias


_BIAS_LAYOUTS = {"NCHW": False, "NHWC": True, "NCW": False, "NWC": True, "NCDHW": False,
                 "NDHWC": True}  # fmt: skip
_LAYOUTS = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}


def _layout(layout: Any, nd: int) -> str:
    """``layout`` checked for ``nd`` spatial dims; 1-D also takes "NCHW" / "NHWC" for
    "NCW" / "NWC", as the forward and the other backward functions do (make_problem)."""
    if nd == 1 and isinstance(layout, str):
        layout = _LAYOUTS_1D.get(layout, layout)
    if layout not in _LAYOUTS[nd]:
        raise BadParamError(f"layout: expected one of {_LAYOUTS[nd]}, got {layout!r}")
    return layout


@with_stream
def conv2d_backward_bias(dy: Any, layout: str = "NCHW", *, out: Any = None) -> Any:
    """The gradient of a convolution's bias: dy summed over N and every spatial position,
    shape (K,). Deterministic (fixed-order reduction). dy: 4-D in "NCHW" / "NHWC"."""
    return _backward_bias(dy, layout, out, 2)


@with_stream
def conv1d_backward_bias(dy: Any, layout: str = "NCW", *, out: Any = None) -> Any:
    """1-D :func:`conv2d_backward_bias`: dy (N, K, Q) for "NCW" or (N, Q, K) for "NWC"."""
    return _backward_bias(dy, layout, out, 1)


def _backward_bias(dy: Any, layout: str, out: Any, nd: int) -> Any:
    backend = backend_for(dy, out, names=("dy", "out"))
    dy = as_array("dy", dy)
    float_dtype("dy", dy)
    layout = _layout(layout, nd)
    if dy.ndim == nd + 1:
        dy = dy[None]  # unbatched, as the forward
    if dy.ndim != nd + 2:
        raise BadParamError(
            f"dy: expected a {nd + 2}-D array ({layout}) or an unbatched {nd + 1}-D one, "
            f"got shape {dy.shape}"
        )
    channels_last = _BIAS_LAYOUTS[layout]
    k = int(dy.shape[-1] if channels_last else dy.shape[1])
    xp = array_module(dy)
    if dy.size == 0:  # an empty batch or output: a sum of nothing
        return _zeros(out, (k,), dy.dtype, {"dy": dy}, xp)
    db, copy = _target(out, (k,), dy.dtype, {"dy": dy}, xp)
    names = bwd_filter.backward_bias(backend, _contiguous(dy), db, channels_last)
    _LAST.set(tuple(names))
    return _deliver(db, out, copy)


# ------------------------------------------------------------------ transposed convolution


def _transpose(x: Any, w: Any, bias: Any, stride: Any, padding: Any, output_padding: Any,
               groups: int, dilation: Any, layout: str, algo: str, out: Any,
               nd: int, math: str = "default") -> Any:  # fmt: skip
    if getattr(x, "ndim", None) == nd + 1:
        # unbatched, as PyTorch: a batch of one
        out1 = None if out is None else unbatched_view("out", out, nd, True)
        y = _transpose(as_array("x", x)[None], w, bias, stride, padding, output_padding,
                       groups, dilation, layout, algo, out1, nd, math)  # fmt: skip
        return out if out is not None else y[0]
    backend = backend_for(x, w, bias, out, names=("x", "w", "bias", "out"))
    x, w = as_array("x", x), as_array("w", w)
    bias = None if bias is None else as_array("bias", bias)
    check_math(math, float_dtype("x", x))
    if w.dtype != x.dtype:
        raise BadParamError(f"w: expected dtype {x.dtype} like x, got {w.dtype}")
    layout = _layout(layout, nd)
    if x.ndim != nd + 2:
        raise BadParamError(
            f"x: expected a {nd + 2}-D array ({layout}) or an unbatched {nd + 1}-D one, got "
            f"shape {x.shape}"
        )
    if w.ndim != nd + 2:
        raise BadParamError(f"w: expected a {nd + 2}-D filter array, got shape {w.shape}")
    strides = _ints("stride", stride, nd, 1)
    dils = _ints("dilation", dilation, nd, 1)
    pads = _ints("padding", padding, nd, 0)
    ops = _ints("output_padding", output_padding, nd, 0)
    for op, s, d in zip(ops, strides, dils, strict=True):
        if op >= max(s, d):
            raise BadParamError(
                f"output_padding: must be smaller than either stride or dilation, got "
                f"output_padding={output_padding} with stride={stride}, dilation={dilation}"
            )
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups < 1:
        raise BadParamError(f"groups: expected an int >= 1, got {groups!r}")
    channels_last = layout[-1] == "C"
    c_in = int(x.shape[-1] if channels_last else x.shape[1])
    in_spatial = tuple(int(v) for v in (x.shape[1:-1] if channels_last else x.shape[2:]))
    k_w = int(w.shape[0])
    cg_out = int(w.shape[-1] if channels_last else w.shape[1])
    filt = tuple(int(v) for v in (w.shape[1:-1] if channels_last else w.shape[2:]))
    if k_w != c_in:
        raise BadParamError(f"w: expected {c_in} filters (x's channels) in dim 0, got {k_w}")
    if c_in % groups:
        raise BadParamError(f"groups: {groups} does not divide the {c_in} input channels")
    c_out = cg_out * groups
    n = int(x.shape[0])
    # no work (PyTorch's empty batch; zero channels): checked alike, nothing launched
    empty = n == 0 or c_in == 0 or c_out == 0 or 0 in in_spatial
    if 0 in in_spatial and n and c_in:
        raise BadParamError(
            f"x: empty spatial dims need N = 0 or C = 0 (as PyTorch), got shape {x.shape}"
        )
    if min(filt) < 1:
        raise BadParamError(f"w: the filter must not be empty, got shape {w.shape}")
    out_spatial, fwd_pads = [], []
    for i, f, s, p, d, op in zip(in_spatial, filt, strides, pads, dils, ops, strict=True):
        size = (i - 1) * s - 2 * p + d * (f - 1) + op + 1
        if size < (0 if empty else 1):
            raise BadParamError(
                f"padding: {padding} leaves an empty output ({size}) for input {in_spatial}"
            )
        out_spatial.append(size)
        # the forward of the output, read by dy = x, must produce exactly `i` positions:
        # lower the after-padding by the whole strides output_padding adds
        fwd_pads.append((p, p - (op // s) * s))
    run_spatial = [size + min(0, a) for size, (_, a) in zip(out_spatial, fwd_pads, strict=True)]
    flat_pads = tuple(v for b, a in fwd_pads for v in (b, max(0, a)))
    shape_of = (lambda sp: (n, *sp, c_out)) if channels_last else (lambda sp: (n, c_out, *sp))
    if empty:
        if bias is not None:
            _check("bias", bias, (c_out,), x.dtype)
        check_algo(algo, "conv_bwd_data")  # (no dispatch: the algo is checked all the same)
        return _bias_fill(out, shape_of(out_spatial), channels_last, bias, x, w)
    run_shape = shape_of(run_spatial)
    problem = _problem(run_shape, w.shape, x.dtype, {"x": "x", "w": "w"}, nd, stride=strides,
                       padding=flat_pads, dilation=dils, groups=groups,
                       layout=layout, math_mode=math)  # fmt: skip
    if tuple(problem.y_shape())[1:] != tuple(x.shape)[1:]:  # cannot happen: sizes derived
        raise BadParamError(f"x: shape {x.shape} is inconsistent with the transposed output")
    if bias is not None:
        _check("bias", bias, (c_out,), x.dtype)
    problem = dataclasses.replace(problem, direction="bwd_data")
    return _run_data(backend, problem, x, w, bias, out, algo, shape_of(out_spatial), "x")


def _bias_fill(out: Any, shape: tuple[int, ...], channels_last: bool, bias: Any, x: Any,
               w: Any) -> Any:  # fmt: skip
    """A transposed convolution without work: every output is the bias (a sum over no
    input channels is 0), or the output is empty."""
    xp = array_module(x)
    y, copy = _target(out, shape, x.dtype, {"x": x, "w": w, "bias": bias}, xp)
    note_host_work("conv_transpose: the bias of a convolution without work, on the host")
    if y.size:
        y[...] = bias_only(shape, channels_last, bias, None, 0.0, x.dtype, xp)
    return _deliver(y, out, copy)


@with_stream
def conv_transpose2d(
    x: Any,
    w: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
    *,
    layout: str = "NCHW",
    algo: str = "auto",
    math: str = "default",
    out: Any = None,
) -> Any:
    """Transposed 2-D convolution with PyTorch's semantics (``conv_transpose2d``): the
    backward data of a convolution, plus bias.

    Args:
        x: (N, C_in, H, W) for "NCHW" or (N, H, W, C_in) for "NHWC", or unbatched
            (C_in, H, W) / (H, W, C_in) (an unbatched result); N may be 0.
        w: (C_in, C_out/groups, R, S) for NCHW, (C_in, R, S, C_out/groups) for NHWC.
        bias: (C_out,) or None.
        stride, padding, dilation: an int or (h, w); padding is PyTorch's symmetric one.
        output_padding: extra size on the bottom/right, each < max(stride, dilation).
        algo: "auto" or a ``conv_bwd_data_*`` solver name.

    Output size: (H - 1) * stride - 2 * padding + dilation * (R - 1) + output_padding + 1.
    """
    return _transpose(x, w, bias, stride, padding, output_padding, groups, dilation, layout,
                      algo, out, 2, math=math)  # fmt: skip


@with_stream
def conv_transpose1d(
    x: Any,
    w: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
    *,
    layout: str = "NCW",
    algo: str = "auto",
    math: str = "default",
    out: Any = None,
) -> Any:
    """1-D :func:`conv_transpose2d`: x (N, C_in, W) for "NCW" or (N, W, C_in) for "NWC"."""
    return _transpose(x, w, bias, stride, padding, output_padding, groups, dilation, layout,
                      algo, out, 1, math=math)  # fmt: skip


# ------------------------------------------------------------------ 3-D


@with_stream
def conv3d_backward_data(
    dy: Any,
    w: Any,
    x_shape: Sequence[int],
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    layout: str = "NCDHW",
    algo: str = "auto",
    math: str = "default",
    out: Any = None,
) -> Any:
    """3-D :func:`conv2d_backward_data`: dy (N, K, O, P, Q) for "NCDHW" or (N, O, P, Q, K)
    for "NDHWC", w (K, C/groups, T, R, S) or (K, T, R, S, C/groups)."""
    return _backward_data(dy, w, x_shape, stride, padding, dilation, groups, layout, algo,
                          out, 3, math=math)  # fmt: skip


@with_stream
def conv3d_backward_filter(
    x: Any,
    dy: Any,
    w_shape: Sequence[int],
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    *,
    layout: str = "NCDHW",
    algo: str = "auto",
    math: str = "default",
    out: Any = None,
) -> Any:
    """3-D :func:`conv2d_backward_filter`: w_shape (K, C/groups, T, R, S) for "NCDHW" or
    (K, T, R, S, C/groups) for "NDHWC"."""
    return _backward_filter(x, dy, w_shape, stride, padding, dilation, groups, layout, algo,
                            out, 3, math=math)  # fmt: skip


@with_stream
def conv3d_backward_bias(dy: Any, layout: str = "NCDHW", *, out: Any = None) -> Any:
    """3-D :func:`conv2d_backward_bias`: dy (N, K, O, P, Q) for "NCDHW" or (N, O, P, Q, K)
    for "NDHWC"."""
    return _backward_bias(dy, layout, out, 3)


@with_stream
def conv_transpose3d(
    x: Any,
    w: Any,
    bias: Any = None,
    stride: Any = 1,
    padding: Any = 0,
    output_padding: Any = 0,
    groups: int = 1,
    dilation: Any = 1,
    *,
    layout: str = "NCDHW",
    algo: str = "auto",
    math: str = "default",
    out: Any = None,
) -> Any:
    """Transposed 3-D convolution (PyTorch's ``conv_transpose3d``): x (N, C_in, D, H, W)
    for "NCDHW" or (N, D, H, W, C_in) for "NDHWC", w (C_in, C_out/groups, T, R, S) or
    (C_in, T, R, S, C_out/groups); otherwise as :func:`conv_transpose2d`."""
    return _transpose(x, w, bias, stride, padding, output_padding, groups, dilation, layout,
                      algo, out, 3, math=math)  # fmt: skip


# Kernel launches only (the host work of convolutions without work, of conv_transpose's
# uncovered rows and of copies into non-contiguous out= is reported): an emulator graph may
# replay these, and repeated calls replay their launch templates.
graph_safe(conv1d_backward_data, conv2d_backward_data, conv3d_backward_data,
           conv1d_backward_filter, conv2d_backward_filter, conv3d_backward_filter,
           conv1d_backward_bias, conv2d_backward_bias, conv3d_backward_bias,
           conv_transpose1d, conv_transpose2d, conv_transpose3d)  # fmt: skip
