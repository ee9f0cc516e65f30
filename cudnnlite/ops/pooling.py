"""Pooling: max, average and adaptive over 1, 2 or 3 spatial dims, forward and backward.

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

Kernels (``cuda_src/pooling/pooling.cu``, one module per dtype): ``pool_fwd<T>``,
``pool_bwd<T>`` (a gather: deterministic, no atomics) and ``maxpool_bwd_scatter<float>``
(atomicAdd from the saved indices; used for float32 max backward unless
``deterministic=True``). Global average pooling (adaptive average to 1 x ... x 1, e.g.
:func:`global_avg_pool`) and its backward use per-plane kernels instead:
``gap_{fwd,bwd}_planar<T>`` (NCHW: a sub-warp, warp or block per (n, c) plane) and
``gap_{fwd,bwd}_chlast<T>`` (NHWC: threads along C). :func:`last_kernel_name` names the
last launch.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..runtime.backend import Backend
from ..runtime.graph import check_flag, graph_safe, note_host_work, note_nondeterministic
from ..runtime.kernel import ModuleSpec
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ..runtime.variants import register
from ._arrays import array_module, as_array, check_out, contiguous, float_dtype, same_dtype
from ._fastpath import (
    CallCache,
    OpPlan,
    call_key,
    plan_backend,
    plan_dtype,
    plan_shape,
    scalars_key,
)
from ._kernels import KernelTable, LastLaunch, kernel_table

SOURCE = "pooling/pooling.cu"
LAYOUTS = ("NCHW", "NHWC")
#: cuDNN's pooling modes; "max_deterministic" is max with a gather backward.
POOLING_MODES = ("max", "avg_include_pad", "avg_exclude_pad", "max_deterministic")
_MODE_ID = {"max": 0, "avg_include_pad": 1, "avg_exclude_pad": 2}
_BLOCK = 256

_SHAPE_DTYPE = np.dtype(
    [
        ("n", "<i8"),
        ("c", "<i8"),
        ("in_plane", "<i8"),
        ("out_plane", "<i8"),
        ("in", "<i4", (3,)),
        ("out", "<i4", (3,)),
        ("k", "<i4", (3,)),
        ("s", "<i4", (3,)),
        ("p", "<i4", (3,)),
        ("d", "<i4", (3,)),
        ("mode", "<i4"),
        ("adaptive", "<i4"),
        ("divisor", "<i4"),
        ("channel_last", "<i4"),
        ("nan_skip", "<i4"),
    ],
    align=True,
)


def _names(dt: dtypes.DType) -> dict[str, str]:
    names = {"pool_fwd": f"pool_fwd<{dt.ctype}>", "pool_bwd": f"pool_bwd<{dt.ctype}>",
             "pool_check_indices": "pool_check_indices",
             "pool_bwd_prepare": "pool_bwd_prepare"}  # fmt: skip
    for k in ("gap_fwd_planar", "gap_fwd_chlast", "gap_bwd_planar", "gap_bwd_chlast"):
        names[k] = f"{k}<{dt.ctype}>"
    if dt.short == "fp32":
        names["maxpool_bwd_scatter"] = "maxpool_bwd_scatter<float>"
    return names


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    return ModuleSpec.make(SOURCE, _names(dt).values())


@register("pooling")
def module_specs() -> list[ModuleSpec]:
    return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]


_LAST = LastLaunch()


class _Table(KernelTable):
    def __init__(self, backend: Backend, dt: dtypes.DType) -> None:
        super().__init__(backend, dt, module_spec(dt), _names(dt), _LAST)
        self.max_grid = self.sm_count * 32 if self.sm_count else 64
        self.max_gap_grid = self.sm_count * 64 if self.sm_count else 64

    def launch(self, key: str, n: int, args: Sequence[Any]) -> None:  # type: ignore[override]
        super().launch(key, (max(1, min(-(-n // _BLOCK), self.max_grid)),), (_BLOCK,), args)

    def launch_gap(self, direction: str, prob: _Problem, src: Any, dst: Any) -> None:
        """Global average pooling of ``prob`` (adaptive average to 1 x ... x 1):
        ``gap_{fwd,bwd}_{planar,chlast}``, a reduction (or broadcast) per (n, c) plane."""
        plane = math.prod(prob.in_sp)
        planes = prob.n * prob.c
        if prob.layout == "NCHW" and plane > 1:
            # threads per plane: a sub-warp for tiny planes, a warp, or the block
            group = 256 if plane >= 1024 else min(32, max(8, 1 << (plane - 1).bit_length()))
            grid = (max(1, min(-(-planes // (_BLOCK // group)), self.max_gap_grid)),)
            args = (src, dst, np.int64(planes), np.int64(plane), np.int32(group))
            KernelTable.launch(self, f"gap_{direction}_planar", grid, (_BLOCK,), args)
            return
        # NHWC, or planes of one position (either layout is then N*C contiguous channels)
        n, c = (prob.n, prob.c) if plane > 1 else (1, planes)
        grid = (-(-c // 32), max(1, min(n, 65535)))
        args = (src, dst, np.int64(n), np.int64(c), np.int64(plane))
        KernelTable.launch(self, f"gap_{direction}_chlast", grid, (32, _GAP_ROWS), args)


_GAP_ROWS = 8  # blockDim.y of gap_*_chlast (pool::kGapRows)


def _table(backend: Backend, dt: dtypes.DType) -> _Table:
    return kernel_table(_Table, backend, dt)


def last_kernel_name() -> str | None:
    """Readable name of the last pooling kernel this thread launched (``pool_fwd_fp16``)."""
    return _LAST.get()


# ------------------------------------------------------------------ arguments


_INT_MAX = 2**31 - 1  # sizes, strides and divisors reach the kernels as 32-bit ints


def _tuple(name: str, v: Any, nd: int, minimum: int) -> tuple[int, ...]:
    vals = (v,) * nd if isinstance(v, (int, np.integer)) and not isinstance(v, bool) else v
    try:
        vals = tuple(vals)
    except TypeError:
        raise BadParamError(f"{name}: expected an int or {nd} ints, got {v!r}") from None
    if len(vals) == 1:
        vals = vals * nd  # PyTorch broadcasts a 1-tuple: kernel_size=(2,) is (2, 2) in 2-D
    if len(vals) != nd or any(
        isinstance(a, bool) or not isinstance(a, (int, np.integer)) for a in vals
    ):
        raise BadParamError(f"{name}: expected an int or {nd} ints, got {v!r}")
    if any(a < minimum for a in vals):
        raise BadParamError(f"{name}: expected values >= {minimum}, got {v!r}")
    if any(a > _INT_MAX for a in vals):
        raise BadParamError(f"{name}: expected values below 2^31 (the kernels' ints), got {v!r}")
    return tuple(int(a) for a in vals)


def _layout(layout: Any) -> str:
    if layout not in LAYOUTS:
        raise BadParamError(f"layout: expected 'NCHW' or 'NHWC', got {layout!r}")
    return layout


def _split(shape: Sequence[int], nd: int, layout: str, name: str = "x") -> tuple:
    if nd not in (1, 2, 3):
        raise BadParamError(
            f"{name}: expected 3 to 5 dims (N, C and 1 to 3 spatial), got shape {tuple(shape)}"
        )
    if len(shape) != nd + 2:
        raise BadParamError(
            f"{name}: expected {nd + 2} dims (N, C and {nd} spatial, layout {layout}), "
            f"got shape {tuple(shape)}"
        )
    if layout == "NHWC":
        return shape[0], shape[-1], tuple(shape[1:-1])
    return shape[0], shape[1], tuple(shape[2:])


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


def _out_size(i: int, k: int, s: int, p: int, d: int, ceil_mode: bool) -> int:
    span = i + 2 * p - d * (k - 1) - 1
    o = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (o - 1) * s >= i + p:
        o -= 1
    return o


class _Problem:
    """A checked pooling problem: sizes, the kernel's struct, output shape."""

    def __init__(
        self,
        n: int,
        c: int,
        in_sp: tuple[int, ...],
        out_sp: tuple[int, ...],
        layout: str,
        mode: int,
        adaptive: bool,
        k=None,
        s=None,
        p=None,
        d=None,
        divisor: int = 0,
    ) -> None:
        nd = len(in_sp)
        pad = 3 - nd
        self.n, self.c, self.in_sp, self.out_sp, self.layout = n, c, in_sp, out_sp, layout
        self.mode, self.adaptive = mode, adaptive
        st = np.zeros((), dtype=_SHAPE_DTYPE)
        st["n"], st["c"] = n, c
        st["in_plane"], st["out_plane"] = math.prod(in_sp), math.prod(out_sp)
        st["in"] = (1,) * pad + in_sp
        st["out"] = (1,) * pad + out_sp
        st["k"] = (1,) * pad + (k or (1,) * nd)
        st["s"] = (1,) * pad + (s or (1,) * nd)
        st["p"] = (0,) * pad + (p or (0,) * nd)
        st["d"] = (1,) * pad + (d or (1,) * nd)
        st["mode"], st["adaptive"], st["divisor"] = mode, int(adaptive), divisor
        st["channel_last"] = int(layout == "NHWC")
        self.struct = st[()]

    def skipping_nan(self) -> _Problem:
        """This max problem with NaN losing to numbers (CUDNN_NOT_PROPAGATE_NAN)."""
        st = np.array(self.struct)
        st["nan_skip"] = 1
        self.struct = st[()]
        return self

    @property
    def is_global_avg(self) -> bool:
        """Adaptive average to 1 x ... x 1: the per-plane reduction kernels apply."""
        return self.adaptive and self.mode == 1 and all(o == 1 for o in self.out_sp)

    def shape(self, spatial: tuple[int, ...]) -> tuple[int, ...]:
        if self.layout == "NHWC":
            return (self.n, *spatial, self.c)
        return (self.n, self.c, *spatial)

    @property
    def y_shape(self) -> tuple[int, ...]:
        return self.shape(self.out_sp)

    @property
    def x_shape(self) -> tuple[int, ...]:
        return self.shape(self.in_sp)


def _window_problem(
    shape: Sequence[int],
    nd: int,
    kernel_size: Any,
    stride: Any,
    padding: Any,
    dilation: Any,
    ceil_mode: Any,
    layout: Any,
    mode: int,
    divisor_override: Any = None,
) -> _Problem:
    layout = _layout(layout)
    n, c, in_sp = _split(shape, nd, layout)
    k = _tuple("kernel_size", kernel_size, nd, 1)
    # (PyTorch's stride=None or [] means the kernel size)
    empty = isinstance(stride, (tuple, list)) and len(stride) == 0
    s = k if stride is None or empty else _tuple("stride", stride, nd, 1)
    p = _tuple("padding", padding, nd, 0)
    d = _tuple("dilation", dilation, nd, 1)
    if not isinstance(ceil_mode, (bool, np.bool_)):
        raise BadParamError(f"ceil_mode: expected a bool, got {ceil_mode!r}")
    for j in range(nd):
        if p[j] > k[j] // 2:
            raise BadParamError(
                f"padding: expected at most half the kernel size ({k[j]} // 2 = {k[j] // 2}) "
                f"in dim {j}, got {p}"
            )
    out = tuple(_out_size(in_sp[j], k[j], s[j], p[j], d[j], bool(ceil_mode)) for j in range(nd))
    for j in range(nd):
        if out[j] < 1:
            raise BadParamError(
                f"kernel_size: the kernel {k} (dilation {d}) is larger than the padded input "
                f"{tuple(i + 2 * q for i, q in zip(in_sp, p, strict=True))}"
            )
    div = 0
    if divisor_override is not None:
        if (
            isinstance(divisor_override, bool)
            or not isinstance(divisor_override, (int, np.integer))
            or divisor_override == 0
            or abs(divisor_override) > _INT_MAX
        ):
            raise BadParamError(
                f"divisor_override: expected a nonzero int below 2^31 or None, got "
                f"{divisor_override!r}"
            )
        div = int(divisor_override)
    return _Problem(n, c, in_sp, out, layout, mode, False, k, s, p, d, div)


def _adaptive_problem(
    shape: Sequence[int], nd: int, output_size: Any, layout: Any, mode: int
) -> _Problem:
    layout = _layout(layout)
    n, c, in_sp = _split(shape, nd, layout)
    raw = (output_size,) * nd if isinstance(output_size, (int, np.integer)) else output_size
    try:
        raw = tuple(raw)
    except TypeError:
        raise BadParamError(
            f"output_size: expected an int or {nd} ints, got {output_size!r}"
        ) from None
    if len(raw) != nd:
        raise BadParamError(f"output_size: expected an int or {nd} ints, got {output_size!r}")
    out = tuple(in_sp[j] if raw[j] is None else raw[j] for j in range(nd))
    if any(isinstance(o, bool) or not isinstance(o, (int, np.integer)) or not 1 <= o <= _INT_MAX
           for o in out):  # fmt: skip
        raise BadParamError(
            f"output_size: expected positive ints below 2^31 (or None), got {output_size!r}"
        )
    if any(i < 1 for i in in_sp):
        raise BadParamError(f"x: adaptive pooling needs non-empty spatial dims, got {in_sp}")
    return _Problem(n, c, in_sp, tuple(int(o) for o in out), layout, mode, True)


def _input(x: Any) -> tuple[Any, dtypes.DType]:
    x = as_array("x", x)
    return x, float_dtype("x", x)


_dense = functools.partial(contiguous, family="pooling")


# ------------------------------------------------------------------ launches


def _forward(x: Any, prob: _Problem, want_indices: bool, out: Any) -> tuple[Any, Any]:
    backend = backend_for(x, out, names=("x", "out"))
    dt = float_dtype("x", x)
    if out is not None:
        check_out(out, prob.y_shape, x.dtype, backend, {"x": x})
    y, ind = _launch_forward(_table(backend, dt), x, prob, want_indices)
    if out is not None:
        note_host_work("pooling: a copy into out=")
        out[...] = y
        y = out
    return y, ind


def _launch_forward(table: _Table, x: Any, prob: _Problem, want_indices: bool) -> tuple[Any, Any]:
    """Allocates y (and the indices) and launches; the arguments were checked."""
    xp = array_module(x)
    y = xp.empty(prob.y_shape, x.dtype)
    ind = xp.empty(prob.y_shape, np.int64) if want_indices else None
    if y.size and prob.is_global_avg:
        table.launch_gap("fwd", prob, _dense(x), y)
    elif y.size:
        table.launch("pool_fwd", y.size, (_dense(x), y, ind, prob.struct))
    return y, ind


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


def _backward(dy: Any, indices: Any, prob: _Problem, deterministic: bool) -> Any:
    backend = backend_for(dy, indices, names=("dy", "indices"))
    dy = as_array("dy", dy)
    dt = float_dtype("dy", dy)
    if tuple(dy.shape) != prob.y_shape:
        raise BadParamError(
            f"dy: expected shape {prob.y_shape} (the output's), got {tuple(dy.shape)}"
        )
    if prob.mode == 0:
        if indices is None:
            raise BadParamError("indices: max pooling backward needs the forward's indices")
        indices = as_array("indices", indices)
        if tuple(indices.shape) != prob.y_shape or indices.dtype != np.int64:
            raise BadParamError(
                f"indices: expected int64 of shape {prob.y_shape}, got {indices.dtype} "
                f"{tuple(indices.shape)}"
            )
        indices = _dense(indices)
    xp = array_module(dy)
    table = _table(backend, dt)
    dyd = _dense(dy)
    if prob.mode == 0 and not deterministic and dt.short == "fp32":
        dx = xp.empty(prob.x_shape, dy.dtype)
        bad = xp.empty(1, np.uint64)
        table.launch("pool_bwd_prepare", dx.size, (dx, bad, np.int64(dx.size)))  # zeros
        if dy.size:
            note_nondeterministic("max pooling backward: the atomic scatter")
            table.launch("maxpool_bwd_scatter", dy.size, (dyd, indices, dx, bad, prob.struct))
            _check_indices(bad, indices, prob)
        return dx
    if prob.mode == 0 and dy.size:
        # The gather cannot stray outside dx, but it would drop a bad index silently.
        bad = xp.empty(1, np.uint64)
        table.launch("pool_bwd_prepare", 1, (None, bad, np.int64(0)))
        table.launch("pool_check_indices", dy.size, (indices, bad, prob.struct))
        _check_indices(bad, indices, prob)
    dx = xp.empty(prob.x_shape, dy.dtype)
    if dx.size and prob.is_global_avg:
        table.launch_gap("bwd", prob, dyd, dx)
    elif dx.size:
        table.launch("pool_bwd", dx.size, (dyd, indices, dx, prob.struct))
    return dx


_NO_BAD = 0xFFFF_FFFF_FFFF_FFFF  # the kernels' ``bad`` word before any bad index


def _check_indices(bad: Any, indices: Any, prob: _Problem) -> None:
    """Raises (through graph.check_flag, so that graphs and launch templates check their
    replays too) when the kernels lowered ``bad``: a saved index outside its window."""
    check_flag(bad, _NO_BAD, functools.partial(_raise_bad_index, bad, indices, prob))


def _raise_bad_index(bad: Any, indices: Any, prob: _Problem) -> None:
    """BadParamError naming the first output whose saved index is not in its window
    (one 8-byte read back: a device sync for GPU arrays)."""
    first = int(bad[0])
    if first == _NO_BAD:
        return
    value = int(indices.reshape(-1)[first])
    where = tuple(int(i) for i in np.unravel_index(first, prob.y_shape))
    plane = math.prod(prob.in_sp)
    what = (
        f"outside the input plane [0, {plane})"
        if not 0 <= value < plane
        else "a position outside that output's pooling window"
    )
    raise BadParamError(
        f"indices: entry {where} is {value}, {what}; max pooling backward takes the "
        "forward's indices (flat positions in the input plane, -1 for a window without input)"
    )


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
    mode = 1 if count_include_pad else 2
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
    prob = _window_problem(
        tuple(input_shape), nd, kernel_size, stride, padding, dilation, ceil_mode, layout, 0
    )
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
    mode = 1 if count_include_pad else 2
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
    prob = _adaptive_problem(tuple(input_shape), len(input_shape) - 2, out_sp, layout, 1)
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
    prob = _adaptive_problem(tuple(input_shape), len(input_shape) - 2, out_sp, layout, 0)
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
    if dilation not in (1, (1,), (1, 1), (1, 1, 1)):
        raise BadParamError(f"dilation: average pooling takes none, got {dilation!r}")
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
) -> OpPlan:
    """Plans :func:`pooling_forward` (a mode of :data:`POOLING_MODES`) for arrays of
    ``shape`` (N, C and 1 to 3 spatial dims) and ``dtype``: the arguments are checked
    now; ``plan(x, out=None, stream=None)`` checks x's kind, shape and dtype and
    launches. ``backend``: "cpu" (emulator), "cuda", or "auto" (the GPU when CuPy sees
    one)."""
    dims, dt = plan_shape(shape), plan_dtype(dtype)
    mode = _mode(mode)
    nd = len(dims) - 2
    if nd not in (1, 2, 3):
        raise BadParamError(f"shape: expected 3 to 5 dims (N, C, spatial...), got {dims}")
    args = (kernel_size, stride, padding)
    if mode.startswith("max"):
        _window_problem(dims, nd, *args, dilation, ceil_mode, layout, 0)
        kwargs = {"kernel_size": kernel_size, "stride": stride, "padding": padding,
                  "dilation": dilation, "ceil_mode": ceil_mode, "layout": layout}  # fmt: skip
        # the key max_pool makes (return_indices False)
        scalars = scalars_key("max", *args, dilation, ceil_mode, False, layout)
        return OpPlan("max_pool", max_pool, plan_backend(backend), dims, dt, kwargs, _quick,
                      scalars)  # fmt: skip
    if dilation not in (1, (1,), (1, 1), (1, 1, 1)):
        raise BadParamError(f"dilation: average pooling takes none, got {dilation!r}")
    _window_problem(dims, nd, *args, 1, ceil_mode, layout, _MODE_ID[mode])
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
    "module_specs",
    "pooling_backward",
    "pooling_forward",
    "pooling_plan",
]


# Kernel launches only, host copies reported: an emulator graph may replay these.
graph_safe(max_pool, avg_pool, max_pool1d, max_pool2d, max_pool3d, avg_pool1d, avg_pool2d,
           avg_pool3d, adaptive_avg_pool, adaptive_max_pool, global_avg_pool, pooling_forward,
           max_pool_backward, avg_pool_backward, adaptive_avg_pool_backward,
           adaptive_max_pool_backward, pooling_backward)  # fmt: skip
