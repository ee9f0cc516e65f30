"""Pooling's problem and kernels: the checked problem (sizes, windows and the struct the
kernels read), the kernel table (one module per dtype) and the forward and backward launches
with the check of max backward's saved indices; :mod:`cudnnlite.ops.pooling` holds the
functions that use them.

Kernels (``cuda_src/pooling/pooling.cu``, one module per dtype): ``pool_fwd<T, MAX, WIDE>``,
``pool_bwd<T, MAX, WIDE>`` (a gather: deterministic, no atomics; MAX: the max modes' kernel,
else the average modes'; WIDE: 64-bit index math, for tensors past 2^31 - 1 elements) and
``maxpool_bwd_scatter<float>``
(atomicAdd from the saved indices; used for float32 max backward unless
``deterministic=True``). Global average pooling (adaptive average to 1 x ... x 1, e.g.
:func:`~cudnnlite.ops.pooling.global_avg_pool`) and its backward use per-plane kernels
instead: ``gap_{fwd,bwd}_planar<T>`` (NCHW: a sub-warp, warp or block per (n, c) plane) and
``gap_{fwd,bwd}_chlast<T>`` (NHWC: threads along C).
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
from ..runtime.graph import check_flag, note_host_work, note_nondeterministic
from ..runtime.kernel import ModuleSpec
from ..runtime.select import backend_for
from ..runtime.variants import register
from ._arrays import array_module, as_array, check_out, contiguous, flag, float_dtype
from ._kernels import KernelTable, LastLaunch, kernel_table

SOURCE = "pooling/pooling.cu"
LAYOUTS = ("NCHW", "NHWC")
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
    names = {"pool_check_indices": "pool_check_indices", "pool_bwd_prepare": "pool_bwd_prepare"}
    for way in ("fwd", "bwd"):  # the max modes' kernel and the average modes'
        for wide in ("", _WIDE):  # 32-bit index math, and 64-bit past _WIDE_PAST
            w = "true" if wide else "false"
            names[f"pool_{way}_max{wide}"] = f"pool_{way}<{dt.ctype}, true, {w}>"
            names[f"pool_{way}_avg{wide}"] = f"pool_{way}<{dt.ctype}, false, {w}>"
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
        super().launch(key, (self.grid_for(n, _BLOCK),), (_BLOCK,), args)

    def launch_window(self, way: str, prob: _Problem, n: int, args: Sequence[Any]) -> None:
        """``pool_fwd`` or ``pool_bwd`` (``way``) for ``prob``'s mode: the max modes' kernel
        or the average modes', named ``pool_{way}_<dtype>`` either way (``pool_{way}_i64_``
        with 64-bit index math)."""
        kind = "max" if prob.mode == 0 else "avg"
        plane = max(math.prod(prob.in_sp), math.prod(prob.out_sp))
        wide = _WIDE if prob.n * prob.c * plane > _WIDE_PAST else ""
        self.get(f"pool_{way}_{kind}{wide}")((self.grid_for(n, _BLOCK),), (_BLOCK,), args)
        self.last.set(f"pool_{way}{wide}_{self.dt.short}")

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


# ------------------------------------------------------------------ arguments


_INT_MAX = 2**31 - 1  # sizes, strides and divisors reach the kernels as 32-bit ints
# pool_fwd / pool_bwd index in 32 bits while every offset is at most this (pool::fits_32bit),
# else in 64 (their kernels named with _WIDE). A name of its own: tests lower it to run WIDE.
_WIDE_PAST = _INT_MAX
_WIDE = "_i64"


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
    # (the kernels take spatial sizes as 32-bit ints and counts as 64-bit ones)
    if any(isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0 for v in shape):
        raise BadParamError(f"{name}: expected sizes as ints >= 0, got {tuple(shape)}")
    spatial = shape[1:-1] if layout == "NHWC" else shape[2:]
    if any(v >= _INT_MAX for v in spatial) or math.prod(int(v) for v in shape) >= 2**62:
        raise BadParamError(
            f"{name}: sizes too large (spatial dims below 2^31 - 1, 2^62 elements in all), "
            f"got {tuple(shape)}"
        )
    if layout == "NHWC":
        return shape[0], shape[-1], tuple(shape[1:-1])
    return shape[0], shape[1], tuple(shape[2:])


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
    name: str = "x",
) -> _Problem:
    layout = _layout(layout)
    n, c, in_sp = _split(shape, nd, layout, name)
    k = _tuple("kernel_size", kernel_size, nd, 1)
    # (PyTorch's stride=None or [] means the kernel size)
    empty = isinstance(stride, (tuple, list)) and len(stride) == 0
    s = k if stride is None or empty else _tuple("stride", stride, nd, 1)
    p = _tuple("padding", padding, nd, 0)
    d = _tuple("dilation", dilation, nd, 1)
    flag("ceil_mode", ceil_mode)
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
    shape: Sequence[int], nd: int, output_size: Any, layout: Any, mode: int, name: str = "x"
) -> _Problem:
    layout = _layout(layout)
    n, c, in_sp = _split(shape, nd, layout, name)
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
        raise BadParamError(f"{name}: adaptive pooling needs non-empty spatial dims, got {in_sp}")
    if int(n) * int(c) * math.prod(int(o) for o in out) >= 2**62:
        raise BadParamError(f"output_size: {output_size!r} makes an output of more than 2^62 "
                            f"elements for {name} of shape {tuple(shape)}")  # fmt: skip
    return _Problem(n, c, in_sp, tuple(int(o) for o in out), layout, mode, True)


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
        table.launch_window("fwd", prob, y.size, (_dense(x), y, ind, prob.struct))
    return y, ind


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
        table.launch_window("bwd", prob, dx.size, (dyd, indices, dx, prob.struct))
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


__all__ = ["module_specs"]
