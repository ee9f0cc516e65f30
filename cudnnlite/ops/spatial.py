"""Spatial transformer: ``affine_grid`` and ``grid_sample``, forward and backward, with
PyTorch's signatures and semantics (:mod:`cudnnlite.reference.spatial`).

``affine_grid`` is a tiny batched matmul of theta with a fixed base grid (N x P x 3 by
3 x 2): array math on the inputs' own array module (NumPy or CuPy), float32 inside
(float64 for float64), the result in theta's dtype; a kernel would add a module to compile
for no speed.

``grid_sample`` runs ``cuda_src/spatial/grid_sample.cu`` (one module per dtype): one thread
per output point computes its taps once and loops over channels. x may have any strides
(NCHW, channels-last NHWC / NDHWC, views): the kernels read strides, nothing is copied. The
output and dx follow x's memory format (channels-last in, channels-last out); dgrid is
C-contiguous. Indices, weights and sums are float32 for float32/float16/bfloat16 and
float64 for float64 (the recorded weights and the atomic buffer of the x gradient too).

The x gradient is a scatter. Two ways, chosen by ``grid_sample_backward(deterministic=)``:

- deterministic (the default, and always under ``cudnnlite.settings(deterministic=True)``):
  ``grid_sample_bwd`` records every tap's (key = n * D*H*W + input position, weight) and
  each point's dy offset; the contributions are stably sorted by key on the array module
  (NumPy, or CuPy's radix sort); ``grid_sample_dx_gather`` then sums, per x element, its
  contributions in (point, tap) order. Bitwise reproducible run to run, no float atomics.
  Workspace: 12 bytes per tap (keys, weights) plus the sort's index arrays.
- atomic (``deterministic=False`` while ``cudnnlite.settings().deterministic`` is off):
  ``grid_sample_bwd`` atomically adds weight * dy in the accumulation type (dx itself for
  float32 and float64, a float32 buffer cast to the dtype afterwards for fp16/bf16).
  Faster, one pass, but the rounding depends on the order of the atomics.

dgrid is summed over channels in order by one thread per point in both ways.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..dispatch import settings as _settings
from ..errors import BadParamError
from ..reference.spatial import MODES, PADDINGS
from ..runtime.backend import Backend
from ..runtime.graph import graph_safe, note_host_work, note_nondeterministic
from ..runtime.kernel import ModuleSpec
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ..runtime.variants import register
from ._arrays import array_module, as_array, contiguous, flag, float_dtype
from ._kernels import KernelTable, LastLaunch, kernel_table

SOURCE = "spatial/grid_sample.cu"
_BLOCK = 256
_MODE_ID = {m: i for i, m in enumerate(MODES)}  # bilinear 0, nearest 1, bicubic 2
_PAD_ID = {m: i for i, m in enumerate(PADDINGS)}  # zeros 0, border 1, reflection 2
_DX_NONE, _DX_RECORD, _DX_ATOMIC = 0, 1, 2


def _acc(dt: dtypes.DType) -> np.dtype:
    """The kernels' arithmetic type (cl::acc_t<T>): float64 for float64, else float32."""
    return np.dtype(np.float64 if dt.acc_ctype == "double" else np.float32)


# cuda_src/spatial/grid_sample.cu: GridSampleParams.
_PARAMS_DTYPE = np.dtype(
    [
        ("x_stride", "<i8", (5,)),
        ("g_stride", "<i8", (5,)),
        ("y_stride", "<i8", (5,)),
        ("dx_stride", "<i8", (5,)),
        ("dg_stride", "<i8", (5,)),
        ("n", "<i8"),
        ("c", "<i8"),
        ("points", "<i8"),
        ("in_size", "<i4", (3,)),
        ("out_size", "<i4", (3,)),
        ("mode", "<i4"),
        ("padding", "<i4"),
        ("align_corners", "<i4"),
        ("dx_mode", "<i4"),
    ],
    align=True,
)


def _names(dt: dtypes.DType) -> dict[str, str]:
    names = {}
    for nd in (2, 3):
        for mode in MODES if nd == 2 else MODES[:2]:  # bicubic is 2-D only
            m = _MODE_ID[mode]
            names[f"fwd{nd}_{mode}"] = f"grid_sample_fwd<{dt.ctype}, {nd}, {m}>"
            names[f"bwd{nd}_{mode}"] = f"grid_sample_bwd<{dt.ctype}, {nd}, {m}>"
    names["dx_gather"] = f"grid_sample_dx_gather<{dt.ctype}>"
    names["cast"] = f"grid_sample_cast<{dt.ctype}>"
    names["zero"] = f"grid_sample_zero<{dt.ctype}>"
    for nd in (2, 3):
        names[f"affine_fwd{nd}"] = f"affine_grid_fwd<{dt.ctype}, {nd}>"
        names[f"affine_bwd{nd}"] = f"affine_grid_bwd<{dt.ctype}, {nd}>"
    return names


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """Every grid_sample kernel of storage type ``dt``."""
    return ModuleSpec.make(SOURCE, _names(dt).values())


@register("spatial")
def module_specs() -> list[ModuleSpec]:
    return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]


_LAST = LastLaunch()


class _Table(KernelTable):
    def __init__(self, backend: Backend, dt: dtypes.DType) -> None:
        super().__init__(backend, dt, module_spec(dt), _names(dt), _LAST)
        self.max_grid = self.sm_count * 16 if self.sm_count else 64

    def launch_over(self, key: str, n: int, args: Sequence[Any]) -> None:
        """``n`` work items, grid-stride."""
        if n > 0:
            self.launch(key, (self.grid_for(n, _BLOCK),), (_BLOCK,), args)


def last_kernel_name() -> str | None:
    """Readable name of the last grid_sample kernel this thread launched, e.g.
    ``bwd2_bilinear_fp32``; None before the first launch."""
    return _LAST.get()


# ------------------------------------------------------------------ checks


def _choice(name: str, v: Any, options: Sequence[str]) -> str:
    if not isinstance(v, str) or v not in options:
        raise BadParamError(f"{name}: expected one of {tuple(options)}, got {v!r}")
    return v


class _Problem:
    """Checked shapes of one grid_sample call."""

    def __init__(self, x: Any, grid: Any, mode: str, padding_mode: str, align: bool) -> None:
        if x.ndim not in (4, 5):
            raise BadParamError(
                f"x: expected a 4-D (N, C, H, W) or 5-D (N, C, D, H, W) array, got shape "
                f"{tuple(x.shape)}"
            )
        self.nd = x.ndim - 2
        if grid.ndim != x.ndim:
            raise BadParamError(
                f"grid: expected a {x.ndim}-D array (N, {'Do, ' * (self.nd == 3)}Ho, Wo, "
                f"{self.nd}) for a {x.ndim}-D x, got shape {tuple(grid.shape)}"
            )
        if grid.shape[-1] != self.nd:
            raise BadParamError(
                f"grid: expected the last dimension to be {self.nd} (the coordinates "
                f"{'x, y, z' if self.nd == 3 else 'x, y'}), got shape {tuple(grid.shape)}"
            )
        if grid.shape[0] != x.shape[0]:
            raise BadParamError(
                f"grid: expected batch size {x.shape[0]} like x, got shape {tuple(grid.shape)}"
            )
        if grid.dtype != x.dtype:
            raise BadParamError(f"grid: expected dtype {x.dtype} like x, got {grid.dtype}")
        if any(s == 0 for s in x.shape[2:]):
            raise BadParamError(
                f"x: expected non-empty spatial dimensions, got shape {tuple(x.shape)}"
            )
        self.mode = _choice("mode", mode, MODES)
        self.padding = _choice("padding_mode", padding_mode, PADDINGS)
        if self.mode == "bicubic" and self.nd != 2:
            raise BadParamError("mode: bicubic is supported for 2-D (4-D x) only, as in PyTorch")
        self.align = flag("align_corners", align)
        self.n, self.c = int(x.shape[0]), int(x.shape[1])
        self.in_sp = tuple(int(s) for s in x.shape[2:])
        self.out_sp = tuple(int(s) for s in grid.shape[1:-1])
        self.points = self.n * math.prod(self.out_sp)
        self.taps = {"bilinear": 1 << self.nd, "nearest": 1, "bicubic": 16}[self.mode]

    @property
    def out_shape(self) -> tuple[int, ...]:
        return (self.n, self.c, *self.out_sp)


def _strides5(a: Any, spatial_first: bool = False) -> list[int]:
    """Element strides of a (N, C, [D,] H, W) array (or (N, [D,] H, W, k) grid) as 5
    values (n, c, d, h, w) / (n, d, h, w, k); a missing d gets stride 0."""
    s = [int(v) // a.itemsize for v in a.strides]
    if a.ndim == 5:
        return s
    return [s[0], s[1], 0, s[2], s[3]] if not spatial_first else [s[0], 0, s[1], s[2], s[3]]


def _pad3(sizes: tuple[int, ...]) -> list[int]:
    return [1] * (3 - len(sizes)) + list(sizes)


def _params(prob: _Problem, x: Any, grid: Any, y: Any, **extra: Any) -> np.void:
    p = np.zeros((), _PARAMS_DTYPE)
    p["x_stride"] = _strides5(x)
    p["g_stride"] = _strides5(grid, spatial_first=True)
    p["y_stride"] = _strides5(y)
    p["n"], p["c"], p["points"] = prob.n, prob.c, prob.points
    p["in_size"] = _pad3(prob.in_sp)
    p["out_size"] = _pad3(prob.out_sp)
    p["mode"], p["padding"] = _MODE_ID[prob.mode], _PAD_ID[prob.padding]
    p["align_corners"] = int(prob.align)
    for k, v in extra.items():
        p[k] = v
    return p[()]


def _channels_last(x: Any) -> bool:
    """Whether x's memory order is (N, [D,] H, W, C): C has the smallest stride."""
    if x.shape[1] <= 1:
        return False
    perm = (0, *range(2, x.ndim), 1)
    return bool(x.transpose(perm).flags.c_contiguous) and not x.flags.c_contiguous


def _empty_like_layout(xp: Any, shape: tuple[int, ...], dtype: Any,
                       channels_last: bool) -> Any:  # fmt: skip
    """An array of ``shape`` in NCHW order or, ``channels_last``, a (N, C, ...) view of a
    C-contiguous (N, ..., C) one: either way its elements are one contiguous block."""
    if not channels_last:
        return xp.empty(shape, dtype)
    nd = len(shape) - 2
    a = xp.empty((shape[0], *shape[2:], shape[1]), dtype)
    return a.transpose((0, nd + 1, *range(1, nd + 1)))


def _inputs(backend_names: tuple[str, ...], *arrays: Any) -> list[Any]:
    out = []
    for name, a in zip(backend_names, arrays, strict=True):
        a = as_array(name, a)
        float_dtype(name, a)
        out.append(a)
    return out


# ------------------------------------------------------------------ grid_sample


@with_stream
def grid_sample(
    x: Any,
    grid: Any,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool = False,
) -> Any:
    """Samples x at the grid's points (``torch.nn.functional.grid_sample``).

    Args:
        x: (N, C, H, W) or (N, C, D, H, W), float32/float16/bfloat16/float64, any strides.
        grid: (N, Ho, Wo, 2) or (N, Do, Ho, Wo, 3) of x's dtype: (x, y[, z]) in [-1, 1].
        mode: "bilinear" (trilinear in 3-D), "nearest" (round half to even) or "bicubic"
            (2-D only).
        padding_mode: "zeros", "border" or "reflection".
        align_corners: -1 and 1 are the corner pixels' centres (True) or outer edges.

    Returns:
        (N, C, Ho, Wo) or (N, C, Do, Ho, Wo) in x's dtype and memory format.
    """
    backend = backend_for(x, grid, names=("x", "grid"))
    x, grid = _inputs(("x", "grid"), x, grid)
    prob = _Problem(x, grid, mode, padding_mode, align_corners)
    dt = float_dtype("x", x)
    xp = array_module(x)
    y = _empty_like_layout(xp, prob.out_shape, x.dtype, _channels_last(x))
    if y.size:
        table = kernel_table(_Table, backend, dt)
        table.launch_over(
            f"fwd{prob.nd}_{prob.mode}", prob.points, (x, grid, y, _params(prob, x, grid, y))
        )
    return y


@with_stream
def grid_sample_backward(
    grad_out: Any,
    x: Any,
    grid: Any,
    mode: str = "bilinear",
    padding_mode: str = "zeros",
    align_corners: bool = False,
    input_requires_grad: bool = True,
    *,
    deterministic: bool = True,
) -> tuple[Any, Any]:
    """Gradients of :func:`grid_sample` with respect to x and grid.

    Args:
        grad_out: the output's gradient, shape (N, C, [Do,] Ho, Wo), any strides.
        x, grid, mode, padding_mode, align_corners: the forward call's.
        input_requires_grad: False skips dx (returned as None).
        deterministic: True (default) computes dx by recording, sorting and gathering the
            contributions (bitwise reproducible); False allows the faster atomic scatter,
            unless ``cudnnlite.settings().deterministic`` is on.

    Returns:
        (dx, dgrid): dx like x (dtype and memory format) or None; dgrid like grid, C order.
    """
    backend = backend_for(grad_out, x, grid, names=("grad_out", "x", "grid"))
    grad_out, x, grid = _inputs(("grad_out", "x", "grid"), grad_out, x, grid)
    prob = _Problem(x, grid, mode, padding_mode, align_corners)
    if tuple(grad_out.shape) != prob.out_shape:
        raise BadParamError(
            f"grad_out: expected shape {prob.out_shape} (the output's), got {tuple(grad_out.shape)}"
        )
    if grad_out.dtype != x.dtype:
        raise BadParamError(f"grad_out: expected dtype {x.dtype} like x, got {grad_out.dtype}")
    want_dx = flag("input_requires_grad", input_requires_grad)
    atomic = not flag("deterministic", deterministic) and not _settings.current().deterministic
    dt = float_dtype("x", x)
    xp = array_module(x)
    chlast = _channels_last(x)
    dgrid = xp.empty(grid.shape, grid.dtype)
    if not want_dx:
        dx, dx_mode = None, _DX_NONE
    else:
        dx = _empty_like_layout(xp, x.shape, x.dtype, chlast)
        dx_mode = _DX_ATOMIC if atomic else _DX_RECORD
    if prob.points == 0:
        note_host_work("grid_sample_backward: zeros for a grid without points")
        dgrid[...] = 0
        if dx is not None:
            dx[...] = 0
        return dx, dgrid
    table = kernel_table(_Table, backend, dt)
    dummy = dgrid  # stands in for pointers a dx mode does not use
    acc = keys = weights = dy_base = dummy
    if dx_mode == _DX_ATOMIC:
        acc = dx if x.dtype == _acc(dt) else _empty_like_layout(xp, x.shape, np.float32, chlast)
        table.launch_over("zero", acc.size, (acc, np.int64(acc.size)))
        note_nondeterministic("grid_sample_backward: dx by atomics")
    elif dx_mode == _DX_RECORD:
        keys = xp.empty(prob.points * prob.taps, np.int64)
        weights = xp.empty(prob.points * prob.taps, _acc(dt))
        dy_base = xp.empty(prob.points, np.int64)
    params = _params(
        prob, x, grid, grad_out,
        dx_stride=_strides5(acc) if dx_mode == _DX_ATOMIC else [0] * 5,
        dg_stride=_strides5(dgrid, spatial_first=True), dx_mode=dx_mode,
    )  # fmt: skip
    args = (grad_out, x, grid, dgrid, acc, keys, weights, dy_base, params)
    table.launch_over(f"bwd{prob.nd}_{prob.mode}", prob.points, args)
    if dx_mode == _DX_ATOMIC and acc is not dx:
        table.launch_over("cast", acc.size, (acc, dx, np.int64(acc.size)))
    elif dx_mode == _DX_RECORD:
        _gather_dx(table, xp, prob, grad_out, x, grid, dx, keys, weights, dy_base)
    return dx, dgrid


def _stable_argsort(xp: Any, keys: Any) -> Any:
    # CuPy's argsort is always stable (and takes no other kind); NumPy's must be asked.
    return xp.argsort(keys, kind="stable") if xp is np else xp.argsort(keys)


def _gather_dx(
    table: _Table, xp: Any, prob: _Problem, grad_out: Any, x: Any, grid: Any, dx: Any,
    keys: Any, weights: Any, dy_base: Any,
) -> None:  # fmt: skip
    """dx from the recorded contributions: sort by key (stable: ties keep (point, tap)
    order), find each key's segment, sum each segment in order."""
    plane = math.prod(prob.in_sp)
    note_host_work("grid_sample_backward: dx's contributions sorted by NumPy/CuPy")
    perm = _stable_argsort(xp, keys)
    sorted_keys = keys[perm]
    w = xp.ascontiguousarray(weights[perm])
    src = xp.ascontiguousarray(dy_base[perm // prob.taps])
    start = xp.searchsorted(sorted_keys, xp.arange(prob.n * plane + 1, dtype=np.int64))
    start = xp.ascontiguousarray(start.astype(np.int64, copy=False))
    params = _params(prob, x, grid, grad_out, dx_stride=_strides5(dx))
    table.launch_over("dx_gather", dx.size, (grad_out, w, src, start, dx, params))


# ------------------------------------------------------------------ affine_grid


def _check_size(size: Any) -> tuple[int, ...]:
    if not isinstance(size, (tuple, list)) or len(size) not in (4, 5):
        raise BadParamError(
            f"size: expected (N, C, H, W) or (N, C, D, H, W) as a tuple of ints, got {size!r}"
        )
    out = []
    for v in size:
        if isinstance(v, bool) or not isinstance(v, (int, np.integer)) or v < 0:
            raise BadParamError(f"size: expected non-negative ints, got {size!r}")
        out.append(int(v))
    return tuple(out)


_COORDS: dict[tuple, Any] = {}  # (device, spatial, align, acc) -> the axes' coordinates
_COORDS_SIZE = 256
_COORDS_LOCK = threading.Lock()


def _axis_coords(xp: Any, backend: Backend, size: tuple[int, ...], align: bool,
                 acc: np.dtype) -> Any:  # fmt: skip
    """The base grid's per-axis coordinates in ``acc``, as the affine_grid kernels read them:
    W's, then H's, then D's (the reference's values, rounded once), on the arrays' device.
    Kept per device and shape: a repeated call (a graph capture included) uploads nothing."""
    from ..reference.spatial import _base_coords

    key = (backend.device_key(), size[2:], align, np.dtype(acc).str)
    coords = _COORDS.get(key)
    if coords is None:
        host = np.concatenate([_base_coords(n, align) for n in reversed(size[2:])]).astype(acc)
        coords = xp.asarray(host if host.size else np.zeros(1, acc))
        with _COORDS_LOCK:
            while len(_COORDS) >= _COORDS_SIZE:
                _COORDS.pop(next(iter(_COORDS)))
            _COORDS[key] = coords
    return coords


@with_stream
def affine_grid(theta: Any, size: Sequence[int], align_corners: bool = False) -> Any:
    """Sampling grid of affine maps (``torch.nn.functional.affine_grid``).

    Args:
        theta: (N, 2, 3) for a 2-D size (N, C, H, W), (N, 3, 4) for (N, C, D, H, W);
            float32/float16/bfloat16/float64.
        size: the output's size.
        align_corners: as in :func:`grid_sample`.

    Returns:
        (N, H, W, 2) or (N, D, H, W, 3) in theta's dtype (computed in float32, float64
        for float64).
    """
    theta = as_array("theta", theta)
    acc = _acc(float_dtype("theta", theta))
    size = _check_size(size)
    align = flag("align_corners", align_corners)
    nd = len(size) - 2
    if theta.ndim != 3 or tuple(theta.shape[1:]) != (nd, nd + 1):
        raise BadParamError(
            f"theta: expected shape (N, {nd}, {nd + 1}) for a {len(size)}-D size {size}, "
            f"got {tuple(theta.shape)}"
        )
    if theta.shape[0] != size[0]:
        raise BadParamError(f"size: expected N = {theta.shape[0]} (theta's batch), got size {size}")
    backend = backend_for(theta, names=("theta",))
    xp = array_module(theta)
    grid = xp.empty((size[0], *size[2:], nd), theta.dtype)
    if grid.size:
        coords = _axis_coords(xp, backend, size, align, acc)
        d = size[2] if nd == 3 else 1
        table = kernel_table(_Table, backend, dtypes.lookup(theta.dtype))
        points = grid.size // nd
        table.launch_over(f"affine_fwd{nd}", points,
                          (contiguous(theta, "affine_grid"), coords, grid, np.int64(points),
                           np.int32(d), np.int32(size[-2]), np.int32(size[-1])))  # fmt: skip
    return grid


@with_stream
def affine_grid_backward(grad_grid: Any, size: Sequence[int], align_corners: bool = False) -> Any:
    """Gradient of :func:`affine_grid` with respect to theta: (N, 2, 3) or (N, 3, 4) in
    grad_grid's dtype (float32 accumulation; float64 for float64)."""
    g = as_array("grad_grid", grad_grid)
    acc = _acc(float_dtype("grad_grid", g))
    size = _check_size(size)
    align = flag("align_corners", align_corners)
    nd = len(size) - 2
    want = (size[0], *size[2:], nd)
    if tuple(g.shape) != want:
        raise BadParamError(f"grad_grid: expected shape {want} for size {size}, got "
                            f"{tuple(g.shape)}")  # fmt: skip
    backend = backend_for(g, names=("grad_grid",))
    xp = array_module(g)
    dtheta = xp.empty((size[0], nd, nd + 1), g.dtype)
    per_image = math.prod(size[2:])
    if dtheta.size and per_image == 0:
        note_host_work("affine_grid_backward: zeros for a grid without points")
        dtheta[...] = 0
    elif dtheta.size:
        coords = _axis_coords(xp, backend, size, align, acc)
        table = kernel_table(_Table, backend, dtypes.lookup(g.dtype))
        table.launch(f"affine_bwd{nd}", (dtheta.size,), (_BLOCK,),
                     (contiguous(g, "affine_grid_backward"), coords, dtheta, np.int64(per_image),
                      np.int32(size[-2]), np.int32(size[-1])))  # fmt: skip
    return dtheta


__all__ = [
    "affine_grid",
    "affine_grid_backward",
    "grid_sample",
    "grid_sample_backward",
    "last_kernel_name",
    "module_specs",
]

# Kernel launches only: an emulator graph may replay them, and a repeated call replays its
# launch template (runtime.templates).
# grid_sample_backward is launches only without dx (input_requires_grad=False: x is the
# data) and with the atomic dx (determinism off); the deterministic dx sorts on the host,
# which it reports.
graph_safe(grid_sample, grid_sample_backward, affine_grid, affine_grid_backward)
