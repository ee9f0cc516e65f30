"""Pooling: max, average and adaptive over 1, 2 or 3 spatial dims, forward and backward,
as PyTorch-style and cuDNN-style functions (kernels and launches:
:mod:`cudnnlite.ops.pooling_kernels`).

PyTorch-style functions (``max_pool2d``, ``avg_pool3d``, ``adaptive_max_pool1d``,
``global_avg_pool``, ...) take PyTorch's arguments and follow its semantics
(:mod:`cudnnlite.reference.pooling`); cuDNN-style :func:`pooling_forward` /
:func:`pooling_backward` take one of :data:`POOLING_MODES`. ``layout="NCHW"`` means
``(N, C, *spatial)`` and ``"NHWC"`` means ``(N, *spatial, C)``. Inputs of any strides are
copied to C-contiguous arrays first where they are not already; ``out=`` may have any
strides. Max indices are int64 flat positions in the input plane, as PyTorch's.
Unbatched inputs ``(C, *spatial)`` work where the op's rank is known: the 1d/2d/3d
names, and ``nd=`` on the N-d forms and every backward (the N-d forms without ``nd``
read the rank from x: N, C and the rest spatial). A 1-tuple window argument broadcasts.
float32, float16 and bfloat16 compute in float32; float64 compares, sums and divides in
double (the divisor, a window count, is exact), forward and backward.

:func:`last_kernel_name` names the last launch.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..runtime.graph import graph_safe
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ._arrays import as_array, flag, float_dtype, same_dtype
from ._fastpath import (
    CallCache,
    OpPlan,
    call_key,
    plan_backend,
    plan_dtype,
    plan_shape,
    scalars_key,
)
from .pooling_kernels import (
    _LAST,
    _adaptive_problem,
    _backward,
    _forward,
    _launch_forward,
    _layout,
    _split,
    _table,
    _window_problem,
)

#: cuDNN's pooling modes; "max_deterministic" is max with a gather backward.
POOLING_MODES = ("max", "avg_include_pad", "avg_exclude_pad", "max_deterministic")
_MODE_ID = {"max": 0, "avg_include_pad": 1, "avg_exclude_pad": 2}


def last_kernel_name() -> str | None:
    """Readable name of the last pooling kernel this thread launched (``pool_fwd_fp16``)."""
    return _LAST.get()


# ------------------------------------------------------------------ arguments


def _rank(name: str, ndim: int, nd: Any) -> tuple[int, bool]:
    """(spatial dims, unbatched) of an array of ``ndim`` dims for an op of ``nd`` spatial
    dims; ``nd`` None: the array is batched and its rank says (the N-d functions' rule).
    Only an explicit ``nd`` tells an unbatched (C, H, W) from a batched 1-d (N, C, L)."""
    if nd is None:
        return ndim - 2, False
    if isinstance(nd, bool) or not isinstance(nd, (int, np.integer)) or nd not in (1, 2, 3):
        raise BadParamError(f"nd: expected 1, 2, 3 or None, got {nd!r}")
    if ndim not in (nd + 1, nd + 2):
        raise BadParamError(
            f"{name}: expected {nd + 2} dims (N, C and {nd} spatial) or {nd + 1} (unbatched: "
            f"C and {nd} spatial), got {ndim}"
        )
    return int(nd), ndim == nd + 1


def _batched(name: str, a: Any, nd: int) -> Any:
    """``a[None]``: an operand of an unbatched call, which must be unbatched too."""
    if a is None:
        return None
    if getattr(a, "ndim", None) != nd + 1:
        raise BadParamError(
            f"{name}: the call is unbatched ({nd + 1}-D), expected an unbatched {name} too, "
            f"got shape {tuple(getattr(a, 'shape', ()))}"
        )
    return a[None]


def _unbatched_call(fn: Any, nd: int, x: Any, args: tuple, kwargs: dict) -> Any:
    """``fn`` (a forward with N-d rules) on an unbatched x as a batch of one; results
    without the batch dim, ``out`` written through a view."""
    out = kwargs.get("out")
    if out is not None:
        kwargs = {**kwargs, "out": _batched("out", out, nd)}
    r = fn(x[None], *args, **kwargs)
    if isinstance(r, tuple):
        return tuple(a[0] for a in r) if out is None else (out, r[1][0])
    return r[0] if out is None else out


def _input(x: Any) -> tuple[Any, dtypes.DType]:
    x = as_array("x", x)
    return x, float_dtype("x", x)


# Window pooling calls without ``out``, by x's key and the arguments as given: the
# kernel table and the checked problem of the first call.
_CALLS = CallCache("pooling")


def _nan_option(value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise BadParamError(f"nan_propagation: expected True or False, got {value!r}")
    return bool(value)


def _call_key(x: Any, *args: Any) -> tuple | None:
    return call_key(x, scalars_key(*args))


def _quick(x: Any, scalars: tuple | None) -> Any:
    """A plan's call: the cached forward (y only) of x with these scalars, or None."""
    entry = _CALLS.get(call_key(x, scalars))
    return None if entry is None else _launch_forward(entry[0], x, entry[1], False)[0]


# ------------------------------------------------------------------ public: N-d


@with_stream
def max_pool(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    return_indices: bool = False,
    *,
    layout: str = "NCHW",
    out: Any = None,
    nd: int | None = None,
    nan_propagation: bool = True,
) -> Any:
    """Max pooling over ``x.ndim - 2`` spatial dims (1 to 3), or over ``nd`` when given:
    then x may be unbatched (C and ``nd`` spatial dims; the results have no batch dim
    either), as PyTorch's ``max_pool{nd}d``. Returns y, or ``(y, indices)`` with
    ``return_indices``.

    ``nan_propagation``: True (default, PyTorch's and cuDNN's CUDNN_PROPAGATE_NAN): a
    window holding NaN gives NaN, its index the last NaN's; False
    (CUDNN_NOT_PROPAGATE_NAN): NaN loses to every number, and only a window of nothing
    but NaN gives NaN."""
    skip = not _nan_option(nan_propagation)
    if nd is not None:
        x = as_array("x", x)
        nd, unbatched = _rank("x", x.ndim, nd)
        if unbatched:
            return _unbatched_call(max_pool.__wrapped__, nd, x, (kernel_size, stride, padding,
                                   dilation, ceil_mode, return_indices),
                                   {"layout": layout, "out": out,
                                    "nan_propagation": not skip})  # fmt: skip
    key = None
    if out is None:
        key = _call_key(x, "max_num" if skip else "max", kernel_size, stride, padding,
                        dilation, ceil_mode, return_indices, layout)  # fmt: skip
        entry = _CALLS.get(key)
        if entry is not None:
            y, ind = _launch_forward(entry[0], x, entry[1], return_indices)
            return (y, ind) if return_indices else y
    x, dt = _input(x)
    nd = x.ndim - 2
    if nd not in (1, 2, 3):
        raise BadParamError(f"x: expected 3 to 5 dims (N, C, spatial...), got shape {x.shape}")
    return_indices = flag("return_indices", return_indices, ints=True)
    prob = _window_problem(
        x.shape, nd, kernel_size, stride, padding, dilation, ceil_mode, layout, 0
    )
    if skip:
        prob = prob.skipping_nan()
    y, ind = _forward(x, prob, return_indices, out)
    _CALLS.put(key, (_table(backend_for(x), dt), prob))
    return (y, ind) if return_indices else y


@with_stream
def avg_pool(
    x: Any,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    *,
    layout: str = "NCHW",
    out: Any = None,
    nd: int | None = None,
) -> Any:
    """Average pooling over ``x.ndim - 2`` spatial dims (1 to 3), or over ``nd`` (x may
    then be unbatched, as in :func:`max_pool`)."""
    if nd is not None:
        x = as_array("x", x)
        nd, unbatched = _rank("x", x.ndim, nd)
        if unbatched:
            return _unbatched_call(avg_pool.__wrapped__, nd, x, (kernel_size, stride, padding,
                                   ceil_mode, count_include_pad, divisor_override),
                                   {"layout": layout, "out": out})  # fmt: skip
    key = None
    if out is None:
        key = _call_key(x, "avg", kernel_size, stride, padding, ceil_mode, count_include_pad,
                        divisor_override, layout)  # fmt: skip
        entry = _CALLS.get(key)
        if entry is not None:
            return _launch_forward(entry[0], x, entry[1], False)[0]
    x, dt = _input(x)
    nd = x.ndim - 2
    if nd not in (1, 2, 3):
        raise BadParamError(f"x: expected 3 to 5 dims (N, C, spatial...), got shape {x.shape}")
    mode = 1 if flag("count_include_pad", count_include_pad) else 2
    prob = _window_problem(
        x.shape, nd, kernel_size, stride, padding, 1, ceil_mode, layout, mode, divisor_override
    )
    y = _forward(x, prob, False, out)[0]
    _CALLS.put(key, (_table(backend_for(x), dt), prob))
    return y


@with_stream
def max_pool_backward(
    dy: Any,
    indices: Any,
    input_shape: Sequence[int],
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    *,
    layout: str = "NCHW",
    deterministic: bool = False,
    nd: int | None = None,
) -> Any:
    """dx of :func:`max_pool` from its saved indices (the window arguments must be the
    forward's). float32 scatters with atomics unless ``deterministic``; the gather used
    otherwise (and for fp16 / bf16 / fp64) is deterministic. ``nd``: the forward's
    spatial dims; with it, an unbatched ``input_shape`` (C and ``nd`` spatial dims) takes
    unbatched dy and indices and gives an unbatched dx (without it, the rank of
    ``input_shape`` says: N, C and the rest spatial)."""
    input_shape = plan_shape(input_shape, "input_shape")
    nd, unbatched = _rank("input_shape", len(input_shape), nd)
    if unbatched:
        dy1 = _batched("dy", as_array("dy", dy), nd)
        ind1 = None if indices is None else _batched("indices", as_array("indices", indices), nd)
        return max_pool_backward.__wrapped__(
            dy1, ind1, (1, *input_shape), kernel_size, stride, padding, dilation, ceil_mode,
            layout=layout, deterministic=deterministic, nd=nd,
        )[0]  # fmt: skip
    prob = _window_problem(tuple(input_shape), nd, kernel_size, stride, padding, dilation,
                           ceil_mode, layout, 0, name="input_shape")  # fmt: skip
    return _backward(dy, indices, prob, deterministic)


@with_stream
def avg_pool_backward(
    dy: Any,
    input_shape: Sequence[int],
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    *,
    layout: str = "NCHW",
    nd: int | None = None,
) -> Any:
    """dx of :func:`avg_pool` (same window arguments; ``nd`` and unbatched shapes as in
    :func:`max_pool_backward`)."""
    input_shape = plan_shape(input_shape, "input_shape")
    nd, unbatched = _rank("input_shape", len(input_shape), nd)
    if unbatched:
        return avg_pool_backward.__wrapped__(
            _batched("dy", as_array("dy", dy), nd), (1, *input_shape), kernel_size, stride,
            padding, ceil_mode, count_include_pad, divisor_override, layout=layout, nd=nd,
        )[0]  # fmt: skip
    mode = 1 if flag("count_include_pad", count_include_pad) else 2
    prob = _window_problem(
        tuple(input_shape),
        nd,
        kernel_size,
        stride,
        padding,
        1,
        ceil_mode,
        layout,
        mode,
        divisor_override,
        name="input_shape",
    )
    return _backward(dy, None, prob, True)


@with_stream
def adaptive_avg_pool(x: Any, output_size: Any, *, layout: str = "NCHW", out: Any = None,
                      nd: int | None = None) -> Any:  # fmt: skip
    """Adaptive average pooling to ``output_size`` over ``x.ndim - 2`` spatial dims, or
    over ``nd`` (x may then be unbatched, as in :func:`max_pool`)."""
    x, _ = _input(x)
    if nd is not None:
        nd, unbatched = _rank("x", x.ndim, nd)
        if unbatched:
            return _unbatched_call(adaptive_avg_pool.__wrapped__, nd, x, (output_size,),
                                   {"layout": layout, "out": out})  # fmt: skip
    prob = _adaptive_problem(x.shape, x.ndim - 2, output_size, layout, 1)
    return _forward(x, prob, False, out)[0]


@with_stream
def adaptive_max_pool(
    x: Any,
    output_size: Any,
    return_indices: bool = False,
    *,
    layout: str = "NCHW",
    out: Any = None,
    nd: int | None = None,
    nan_propagation: bool = True,
) -> Any:
    """Adaptive max pooling (``nd`` and unbatched x as in :func:`adaptive_avg_pool`;
    ``nan_propagation`` as in :func:`max_pool`)."""
    skip = not _nan_option(nan_propagation)
    x, _ = _input(x)
    if nd is not None:
        nd, unbatched = _rank("x", x.ndim, nd)
        if unbatched:
            return _unbatched_call(adaptive_max_pool.__wrapped__, nd, x,
                                   (output_size, return_indices),
                                   {"layout": layout, "out": out,
                                    "nan_propagation": not skip})  # fmt: skip
    prob = _adaptive_problem(x.shape, x.ndim - 2, output_size, layout, 0)
    return_indices = flag("return_indices", return_indices, ints=True)
    if skip:
        prob = prob.skipping_nan()
    y, ind = _forward(x, prob, return_indices, out)
    return (y, ind) if return_indices else y


@with_stream
def adaptive_avg_pool_backward(dy: Any, input_shape: Sequence[int], *, layout: str = "NCHW",
                               nd: int | None = None) -> Any:  # fmt: skip
    """dx of :func:`adaptive_avg_pool` (``nd`` and unbatched shapes as in
    :func:`max_pool_backward`)."""
    dy = as_array("dy", dy)
    input_shape = plan_shape(input_shape, "input_shape")
    nd, unbatched = _rank("input_shape", len(input_shape), nd)
    if unbatched:
        return adaptive_avg_pool_backward.__wrapped__(
            _batched("dy", dy, nd), (1, *input_shape), layout=layout, nd=nd
        )[0]
    out_sp = _split(dy.shape, len(input_shape) - 2, _layout(layout), "dy")[2]
    prob = _adaptive_problem(tuple(input_shape), len(input_shape) - 2, out_sp, layout, 1,
                             "input_shape")  # fmt: skip
    return _backward(dy, None, prob, True)


@with_stream
def adaptive_max_pool_backward(
    dy: Any,
    indices: Any,
    input_shape: Sequence[int],
    *,
    layout: str = "NCHW",
    deterministic: bool = False,
    nd: int | None = None,
) -> Any:
    """dx of :func:`adaptive_max_pool` from its indices (``nd`` and unbatched shapes as in
    :func:`max_pool_backward`)."""
    dy = as_array("dy", dy)
    input_shape = plan_shape(input_shape, "input_shape")
    nd, unbatched = _rank("input_shape", len(input_shape), nd)
    if unbatched:
        ind1 = None if indices is None else _batched("indices", as_array("indices", indices), nd)
        return adaptive_max_pool_backward.__wrapped__(
            _batched("dy", dy, nd), ind1, (1, *input_shape), layout=layout,
            deterministic=deterministic, nd=nd,
        )[0]  # fmt: skip
    out_sp = _split(dy.shape, len(input_shape) - 2, _layout(layout), "dy")[2]
    prob = _adaptive_problem(tuple(input_shape), len(input_shape) - 2, out_sp, layout, 0,
                             "input_shape")  # fmt: skip
    return _backward(dy, indices, prob, deterministic)


@with_stream
def global_avg_pool(x: Any, *, layout: str = "NCHW", out: Any = None) -> Any:
    """Mean over every spatial dim, keeping them as size 1 (adaptive to 1x...x1)."""
    x, _ = _input(x)
    return adaptive_avg_pool(x, 1, layout=layout, out=out)


# ------------------------------------------------------------------ cuDNN-style


def _mode(mode: Any) -> str:
    if mode not in POOLING_MODES:
        raise BadParamError(f"mode: expected one of {', '.join(POOLING_MODES)}, got {mode!r}")
    return mode


def _no_dilation(dilation: Any) -> None:
    """The average modes take no dilation (cuDNN's pooling descriptor has none)."""
    if dilation not in (1, (1,), (1, 1), (1, 1, 1)):
        raise BadParamError(f"dilation: average pooling takes none, got {dilation!r}")


@with_stream
def pooling_forward(
    x: Any,
    mode: str,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    *,
    layout: str = "NCHW",
    out: Any = None,
    nan_propagation: bool = True,
) -> Any:
    """cuDNN's pooling forward for a mode of :data:`POOLING_MODES` (dilation: max only;
    ``nan_propagation``: the pooling descriptor's NaN option, max modes only, as in
    :func:`max_pool`)."""
    if _mode(mode).startswith("max"):
        return max_pool(
            x, kernel_size, stride, padding, dilation, ceil_mode, layout=layout, out=out,
            nan_propagation=nan_propagation,
        )
    _nan_option(nan_propagation)
    _no_dilation(dilation)
    return avg_pool(
        x,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        mode == "avg_include_pad",
        layout=layout,
        out=out,
    )


@with_stream
def pooling_backward(
    dy: Any,
    x: Any,
    mode: str,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    *,
    layout: str = "NCHW",
    nan_propagation: bool = True,
) -> Any:
    """cuDNN's pooling backward: dx from dy and x (max modes find the argmax again, with
    the forward's ``nan_propagation``; "max_deterministic" gathers without atomics)."""
    mode = _mode(mode)
    _nan_option(nan_propagation)
    x, _ = _input(x)
    same_dtype(("x", "dy"), (x, as_array("dy", dy)))
    if mode.startswith("max"):
        _, ind = max_pool(x, kernel_size, stride, padding, dilation, ceil_mode, True,
                          layout=layout, nan_propagation=nan_propagation)  # fmt: skip
        return max_pool_backward(
            dy,
            ind,
            x.shape,
            kernel_size,
            stride,
            padding,
            dilation,
            ceil_mode,
            layout=layout,
            deterministic=mode == "max_deterministic",
        )
    _no_dilation(dilation)
    return avg_pool_backward(
        dy,
        x.shape,
        kernel_size,
        stride,
        padding,
        ceil_mode,
        mode == "avg_include_pad",
        layout=layout,
    )


def pooling_plan(
    shape: Sequence[int],
    mode: str,
    kernel_size: Any,
    stride: Any = None,
    padding: Any = 0,
    dilation: Any = 1,
    ceil_mode: bool = False,
    *,
    layout: str = "NCHW",
    dtype: Any = np.float32,
    backend: str = "auto",
    return_indices: bool = False,
) -> OpPlan:
    """Plans :func:`pooling_forward` (a mode of :data:`POOLING_MODES`) for arrays of
    ``shape`` (N, C and 1 to 3 spatial dims) and ``dtype``: the arguments are checked
    now; ``plan(x, out=None, stream=None)`` checks x's kind, shape and dtype and
    launches. ``backend``: "cpu" (emulator), "cuda", or "auto" (the GPU when CuPy sees
    one). ``return_indices`` (max pooling): the plan returns ``(y, indices)`` as
    :func:`max_pool` does, for :func:`max_pool_backward` in a training step."""
    dims, dt = plan_shape(shape), plan_dtype(dtype)
    mode = _mode(mode)
    nd = len(dims) - 2
    if nd not in (1, 2, 3):
        raise BadParamError(f"shape: expected 3 to 5 dims (N, C, spatial...), got {dims}")
    flag("return_indices", return_indices)
    args = (kernel_size, stride, padding)
    if mode.startswith("max"):
        _window_problem(dims, nd, *args, dilation, ceil_mode, layout, 0, name="shape")
        kwargs = {"kernel_size": kernel_size, "stride": stride, "padding": padding,
                  "dilation": dilation, "ceil_mode": ceil_mode, "layout": layout}  # fmt: skip
        if return_indices:  # (y, indices): max_pool's own call cache (the quick path has y)
            kwargs["return_indices"] = True
            return OpPlan("max_pool", max_pool, plan_backend(backend), dims, dt, kwargs)
        # the key max_pool makes (return_indices False)
        scalars = scalars_key("max", *args, dilation, ceil_mode, False, layout)
        return OpPlan("max_pool", max_pool, plan_backend(backend), dims, dt, kwargs, _quick,
                      scalars)  # fmt: skip
    _no_dilation(dilation)
    if return_indices:
        raise BadParamError(f"return_indices: {mode} pooling has no indices (max pooling does)")
    _window_problem(dims, nd, *args, 1, ceil_mode, layout, _MODE_ID[mode], name="shape")
    kwargs = {"kernel_size": kernel_size, "stride": stride, "padding": padding,
              "ceil_mode": ceil_mode, "count_include_pad": mode == "avg_include_pad",
              "layout": layout}  # fmt: skip
    # the key avg_pool makes (no divisor_override)
    scalars = scalars_key("avg", *args, ceil_mode, mode == "avg_include_pad", None, layout)
    return OpPlan("avg_pool", avg_pool, plan_backend(backend), dims, dt, kwargs, _quick, scalars)


# ------------------------------------------------------------------ PyTorch names


def _fixed_nd(fn: Any, nd: int) -> Any:
    def wrapper(x: Any, *args: Any, **kwargs: Any) -> Any:
        # (N, C, *spatial) or unbatched (C, *spatial), as PyTorch
        return inner(as_array("x", x), *args, nd=nd, **kwargs)

    # This wrapper gets its own with_stream below: call fn's unwrapped body, saving a
    # second wrapper per call.
    inner = getattr(fn, "__wrapped__", fn)
    wrapper.__name__ = f"{fn.__name__}{nd}d"
    wrapper.__qualname__ = wrapper.__name__
    wrapper.__doc__ = (
        f"{nd}-d :func:`{fn.__name__}` (PyTorch's ``{fn.__name__}{nd}d``); x may be "
        f"unbatched ({nd + 1} dims)."
    )
    return with_stream(wrapper)


max_pool1d = _fixed_nd(max_pool, 1)
max_pool2d = _fixed_nd(max_pool, 2)
max_pool3d = _fixed_nd(max_pool, 3)
avg_pool1d = _fixed_nd(avg_pool, 1)
avg_pool2d = _fixed_nd(avg_pool, 2)
avg_pool3d = _fixed_nd(avg_pool, 3)
adaptive_avg_pool1d = _fixed_nd(adaptive_avg_pool, 1)
adaptive_avg_pool2d = _fixed_nd(adaptive_avg_pool, 2)
adaptive_avg_pool3d = _fixed_nd(adaptive_avg_pool, 3)
adaptive_max_pool1d = _fixed_nd(adaptive_max_pool, 1)
adaptive_max_pool2d = _fixed_nd(adaptive_max_pool, 2)
adaptive_max_pool3d = _fixed_nd(adaptive_max_pool, 3)


__all__ = [
    "POOLING_MODES",
    "adaptive_avg_pool",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_avg_pool_backward",
    "adaptive_max_pool",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "adaptive_max_pool_backward",
    "avg_pool",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "avg_pool_backward",
    "global_avg_pool",
    "last_kernel_name",
    "max_pool",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_pool_backward",
    "pooling_backward",
    "pooling_forward",
    "pooling_plan",
]


# Kernel launches only, host copies reported: an emulator graph may replay these.
graph_safe(max_pool, avg_pool, max_pool1d, max_pool2d, max_pool3d, avg_pool1d, avg_pool2d,
           avg_pool3d, adaptive_avg_pool, adaptive_max_pool, global_avg_pool, pooling_forward,
           max_pool_backward, avg_pool_backward, adaptive_avg_pool_backward,
           adaptive_max_pool_backward, pooling_backward)  # fmt: skip
