"""Softmax and log-softmax over one axis, forward and backward.

``softmax(x, axis)`` = exp(x - max) / sum(exp(x - max)) along ``axis`` (``log=True``:
log-softmax), computed in float32 for float32, float16 and bfloat16 and in float64
(maxima, sums and alpha/beta too) for float64. ``algorithm="accurate"``
subtracts the row max (cuDNN's CUDNN_SOFTMAX_ACCURATE; safe for any input);
``"fast"`` does not (CUDNN_SOFTMAX_FAST: exp overflows for inputs above ~88, ~709
in float64).
cuDNN's modes: ``mode="instance"`` is over C*H*W of each image (all axes but the first),
``mode="channel"`` over C (axis 1) at each spatial position.

Kernels (``cuda_src/softmax/softmax.cu``), one module per dtype, chosen by the
shape [outer, len, inner] around the axis:

- inner == 1, len <= 1024: ``softmax_*_warp`` (a group of lanes per row: the row's
  16-byte packs, or elements when unaligned, rounded up to a power of two up to a warp);
- inner == 1, longer rows: ``softmax_*_block`` (one block per row, 256..1024 threads);
- inner == 1, rows of >= 2^17 elements and too few rows to fill the device:
  ``softmax_*_partial`` + ``softmax_*_finish`` (online softmax over chunks of a row,
  several blocks per row, a workspace of rows x chunks partials in the accumulation
  type);
- inner > 1: ``softmax_*_cols`` (one thread per column; coalesced across columns).

Non-C-contiguous inputs are copied to C order first; an ``out`` that is not C-contiguous
receives a copy of the result.
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..runtime.backend import Backend, Kernel
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
    flag,
    float_dtype,
    same_dtype,
    same_shape,
)
from ._fastpath import (
    CallCache,
    OpPlan,
    call_key,
    plan_backend,
    plan_dtype,
    plan_shape,
    scalars_key,
)
from ._kernels import LastLaunch

SOURCE = "softmax/softmax.cu"
ALGORITHMS = ("accurate", "fast")
MODES = ("instance", "channel")

WARP_MAX_LEN = 1024  # rows up to this length: one warp per row
MULTI_MIN_LEN = 1 << 17  # rows at least this long may be split across blocks
MULTI_MIN_CHUNK = 4096  # elements per block in the split path, at least
_WARPS_PER_BLOCK = 4
_PARTIAL_BLOCK = 256


# SoftmaxShapeT<A> (softmax.cu) in the accumulation type A: alpha and beta are float for
# float32/float16/bfloat16 and double for float64.
def _shape_dtype(real: str) -> np.dtype:
    fields = [("rows", "<i8"), ("len", "<i8"), ("inner", "<i8"), ("chunk", "<i8")]
    fields += [("chunks", "<i4"), ("log", "<i4"), ("accurate", "<i4")]
    fields += [("alpha", real), ("beta", real), ("group_log2", "<i4")]
    return np.dtype(fields, align=True)


_SHAPE_DTYPE = _shape_dtype("<f4")
_SHAPE_DTYPE64 = _shape_dtype("<f8")


def _wide(dt: dtypes.DType) -> bool:
    """Whether ``dt`` computes in double (its scalars and workspace are float64)."""
    return dt.acc_ctype == "double"


def shape_dtype(dt: dtypes.DType) -> np.dtype:
    """The SoftmaxShapeT layout kernels on storage type ``dt`` take."""
    return _SHAPE_DTYPE64 if _wide(dt) else _SHAPE_DTYPE


def _vec(dt: dtypes.DType) -> int:
    return 16 // dt.itemsize


def _names(dt: dtypes.DType) -> list[str]:
    names = []
    for d in ("fwd", "bwd"):
        for kind in ("warp", "block", "partial", "finish"):
            for vec in (_vec(dt), 1):
                names.append(f"softmax_{d}_{kind}<{dt.ctype}, {vec}>")
        names.append(f"softmax_{d}_cols<{dt.ctype}>")
    return names


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """The module holding every softmax kernel of storage type ``dt``."""
    return ModuleSpec.make(SOURCE, _names(dt))


@register("softmax")
def module_specs() -> list[ModuleSpec]:
    return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]


_KERNELS: dict[tuple, Kernel] = {}
_LOCK = threading.Lock()
_LAST = LastLaunch()


def _kernel(backend: Backend, dt: dtypes.DType, name: str) -> Kernel:
    key = (id(backend), backend.device_key(), dt.short, name)
    k = _KERNELS.get(key)
    if k is None:
        with _LOCK:
            k = _KERNELS.get(key)
            if k is None:
                k = _KERNELS[key] = backend.kernel(module_spec(dt), name)
    return k


def _target_blocks(backend: Backend) -> int:
    """Blocks that fill the device a couple of times over."""
    if backend.name == "cuda":
        return 2 * backend.multiprocessor_count()
    return 32


def last_kernel_name() -> str | None:
    """Readable name of the last softmax kernel this thread launched, e.g.
    ``softmax_fwd_warp_vec4_fp32`` or ``softmax_bwd_cols_bf16``."""
    return _LAST.get()


# ------------------------------------------------------------------ checks and shapes


def _axis(axis: Any, ndim: int) -> int:
    if isinstance(axis, bool) or not isinstance(axis, (int, np.integer)):
        raise BadParamError(f"axis: expected an int, got {axis!r}")
    a = int(axis)
    if not -ndim <= a < ndim:
        raise BadParamError(f"axis: {a} is out of range for a {ndim}-d array")
    return a % ndim


def _problem(shape: tuple[int, ...], axis: Any, mode: Any) -> tuple[int, int, int]:
    """(outer, len, inner) around the softmax axis."""
    ndim = len(shape)
    if mode is not None:
        if not isinstance(mode, str) or mode not in MODES:
            raise BadParamError(f"mode: expected 'instance', 'channel' or None, got {mode!r}")
        if axis is not None:
            raise BadParamError(f"axis: give either axis or mode, not both (mode={mode!r})")
        if ndim < 2:
            raise BadParamError(f"x: mode {mode!r} needs an array of >= 2 dims, got {ndim}-d")
        if mode == "instance":
            return shape[0], int(np.prod(shape[1:], dtype=np.int64)), 1
        axis = 1
    if ndim == 0:
        # a 0-d array is one row of one element, as PyTorch (axis 0 or -1): 1, log 0
        if axis is not None and (isinstance(axis, bool)
                                 or not isinstance(axis, (int, np.integer))
                                 or axis not in (0, -1)):  # fmt: skip
            raise BadParamError(f"axis: a 0-d x takes axis 0, -1 or None, got {axis!r}")
        return 1, 1, 1
    a = _axis(-1 if axis is None else axis, ndim)
    outer = int(np.prod(shape[:a], dtype=np.int64))
    inner = int(np.prod(shape[a + 1 :], dtype=np.int64))
    return outer, shape[a], inner


def _algorithm(algorithm: Any) -> int:
    if algorithm not in ALGORITHMS:
        raise BadParamError(f"algorithm: expected 'accurate' or 'fast', got {algorithm!r}")
    return int(algorithm == "accurate")


_contiguous = functools.partial(contiguous, family="softmax")


class _Plan:
    """Which kernel family runs a [outer, len, inner] problem and with what geometry."""

    def __init__(
        self, backend: Backend, dt: dtypes.DType, problem: tuple[int, int, int], arrays: list[Any]
    ) -> None:
        outer, length, inner = problem
        vec = _vec(dt)
        aligned = length % vec == 0 and all(data_pointer(a) % 16 == 0 for a in arrays)
        self.vec = vec if aligned else 1
        self.chunk, self.chunks = 0, 1
        if inner > 1:
            self.kind, self.vec = "cols", 0
        elif length <= WARP_MAX_LEN:
            self.kind = "warp"
        else:
            self.kind = "block"
            target = _target_blocks(backend)
            if length >= MULTI_MIN_LEN and outer < target:
                per_row = min(-(-target // outer), -(-length // MULTI_MIN_CHUNK))
                step = 8 * _PARTIAL_BLOCK  # a multiple of every VEC
                chunk = -(-length // per_row)
                self.chunk = -(-chunk // step) * step
                self.chunks = -(-length // self.chunk)
                if self.chunks > 1:
                    self.kind = "multi"
        self.outer, self.length, self.inner = outer, length, inner
        # warp kernels: lanes per row, the row's packs rounded up to a power of two <= 32
        packs = -(-length // max(self.vec, 1))
        self.group_log2 = min(5, max(0, packs - 1).bit_length())
        self.layout = shape_dtype(dt)
        self.acc = np.float64 if _wide(dt) else np.float32  # the workspace's dtype

    def struct(self, log: bool, accurate: int, alpha: float, beta: float) -> np.void:
        return np.array(
            (
                self.outer,
                self.length,
                self.inner,
                self.chunk,
                self.chunks,
                int(log),
                accurate,
                alpha,
                beta,
                self.group_log2,
            ),
            dtype=self.layout,
        )[()]

    def block_threads(self) -> int:
        if self.length >= 16384:
            return 1024
        return 512 if self.length >= 4096 else 256

    def name(self, direction: str, dt: dtypes.DType) -> str:
        tag = (
            self.kind
            if self.vec == 0
            else f"{self.kind}_{f'vec{self.vec}' if self.vec > 1 else 'scalar'}"
        )
        return f"softmax_{direction}_{tag}_{dt.short}"


def _run(
    backend: Backend,
    dt: dtypes.DType,
    plan: _Plan,
    direction: str,
    inputs: list[Any],
    out: Any,
    log: bool,
    accurate: int,
    blend: tuple[float, float],
) -> None:
    xp = array_module(inputs[0])
    s = plan.struct(log, accurate, *blend)
    t = f"{dt.ctype}, {plan.vec}" if plan.vec else dt.ctype
    if plan.kind == "warp":
        rows_per_block = (32 * _WARPS_PER_BLOCK) >> plan.group_log2
        grid = -(-plan.outer // rows_per_block)
        _kernel(backend, dt, f"softmax_{direction}_warp<{t}>")(
            grid, 32 * _WARPS_PER_BLOCK, (*inputs, out, s)
        )
    elif plan.kind == "block":
        _kernel(backend, dt, f"softmax_{direction}_block<{t}>")(
            plan.outer, plan.block_threads(), (*inputs, out, s)
        )
    elif plan.kind == "multi":
        per = 2 if direction == "fwd" else 1
        work = xp.empty(plan.outer * plan.chunks * per, plan.acc)
        grid = (plan.chunks, plan.outer)
        _kernel(backend, dt, f"softmax_{direction}_partial<{t}>")(
            grid, _PARTIAL_BLOCK, (*inputs, work, s)
        )
        _kernel(backend, dt, f"softmax_{direction}_finish<{t}>")(
            grid, _PARTIAL_BLOCK, (*inputs, out, work, s)
        )
    else:
        cols = plan.outer * plan.inner
        grid = max(1, min(-(-cols // 256), 64 * _target_blocks(backend)))
        _kernel(backend, dt, f"softmax_{direction}_cols<{t}>")(grid, 256, (*inputs, out, s))
    _LAST.set(plan.name(direction, dt))


def _blend(alpha: Any, beta: Any, out: Any, dt: dtypes.DType) -> tuple[float, float]:
    """(alpha, beta) as the kernel sees them: exact for float64, rounded to float32 (and
    finite there) for the other types; beta != 0 reads out's prior content, so needs out."""
    wide = _wide(dt)
    vals = []
    for name, v in (("alpha", alpha), ("beta", beta)):
        if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
            raise BadParamError(f"{name}: expected a real number, got {v!r}")
        with np.errstate(over="ignore"):
            f = float(v) if wide else float(np.float32(v))
        if not np.isfinite(f):
            where = "" if wide else " (in float32)"
            raise BadParamError(f"{name}: expected a finite number{where}, got {v!r}")
        vals.append(f)
    if vals[1] != 0 and out is None:
        raise BadParamError("beta: blending (beta != 0) reads the prior content of out; pass out=")
    return vals[0], vals[1]


def _result(
    out: Any, like: Any, backend: Backend, inputs: dict[str, Any], beta: float
) -> tuple[Any, Any]:
    """(the array to return, the C-contiguous array the kernel writes; it holds out's prior
    content when beta != 0)."""
    if out is None:
        r = array_module(like).empty(like.shape, like.dtype)
        return r, r
    check_out(out, like.shape, like.dtype, backend, inputs)
    if out.flags.c_contiguous:
        return out, out
    xp = array_module(like)
    return out, (xp.ascontiguousarray(out) if beta != 0 else xp.empty(like.shape, like.dtype))


# ------------------------------------------------------------------ the fast path

# Forward calls without ``out`` on C-contiguous inputs, by x's key and the scalars as
# given: (backend, dtype, plan, log, accurate, blend) of the validated first call and
# whether its y was 16-byte aligned (the plan's vector width depends on it).
_CALLS = CallCache("softmax")


def _quick(x: Any, scalars: tuple | None) -> Any:
    """A plan's call: the cached forward of x with these scalars, or None."""
    entry = _CALLS.get(call_key(x, scalars, aligned=True))
    return None if entry is None else _fast_forward(x, entry)


def _fast_forward(x: Any, entry: tuple) -> Any:
    """A cached forward call; None when the new y's alignment no longer fits the plan."""
    backend, dt, plan, log, accurate, blend, aligned = entry
    y = array_module(x).empty(x.shape, x.dtype)
    if (data_pointer(y) % 16 == 0) != aligned:
        return None
    _run(backend, dt, plan, "fwd", [x], y, log, accurate, blend)
    return y


# ------------------------------------------------------------------ public API


def _converted(x: Any, dtype: Any) -> Any:
    """x in the float type ``dtype`` (PyTorch's ``softmax(..., dtype=)``): x itself when it
    has it already, else a converted copy (transform_tensor: one rounding)."""
    if type(dtype).__module__ == "torch":  # torch.float64 and friends
        name = str(dtype).removeprefix("torch.")
        dtype = dtypes.BFLOAT16.numpy if name == "bfloat16" and dtypes.BFLOAT16 else name
    dt = dtypes.lookup(dtype)
    if dt is None:
        raise BadParamError(f"dtype: expected {dtypes.names()} (or None), got {dtype!r}")
    from .tensor import transform_tensor  # tensor.py imports more than softmax needs

    x = as_array("x", x)
    float_dtype("x", x)
    return x if x.dtype == dt.numpy else transform_tensor(x, dtype=dt.numpy)


@with_stream
def softmax(
    x: Any,
    axis: int | None = None,
    *,
    log: bool = False,
    algorithm: str = "accurate",
    mode: str | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
    dtype: Any = None,
) -> Any:
    """Softmax (or, with ``log``, log-softmax) of ``x`` along ``axis`` (default -1), blended
    as cuDNN: ``out = alpha * softmax(x) + beta * out`` (out read only when beta != 0).

    Args:
        x: float32, float16, bfloat16 or float64 array (NumPy: emulator, CuPy: GPU), any
            strides. float64 computes in double; the others in float32.
        axis: the axis to normalize over; or give ``mode`` instead.
        log: log-softmax, ``(x - max) - log(sum(exp(x - max)))``.
        algorithm: ``"accurate"`` (max-subtracted) or ``"fast"`` (no max: overflows for
            inputs above ~88, or ~709 in float64, as cuDNN's fast mode).
        mode: cuDNN's ``"instance"`` (over all axes but the first) or ``"channel"`` (axis 1).
        alpha, beta: blending factors (rounded to float32, exact for float64 x);
            ``beta != 0`` requires ``out``.
        out: result array of x's shape and dtype (may be x itself).
        dtype: as PyTorch's ``dtype=``: x is first converted to this float type (one
            rounding; x itself is untouched) and the result has it; None keeps x's.

    A row of only -inf gives NaN (0/0), as PyTorch; -inf entries elsewhere give 0.
    """
    if dtype is not None:
        x = _converted(x, dtype)
    key = None
    if out is None:
        key = call_key(x, scalars_key(axis, log, algorithm, mode, alpha, beta), aligned=True)
        entry = _CALLS.get(key)
        if entry is not None:
            y = _fast_forward(x, entry)
            if y is not None:
                return y
    accurate = _algorithm(algorithm)
    log = flag("log", log)
    backend = backend_for(x, out, names=("x", "out"))
    x = as_array("x", x)
    dt = float_dtype("x", x)
    problem = _problem(tuple(x.shape), axis, mode)
    blend = _blend(alpha, beta, out, dt)
    result, y = _result(out, x, backend, {"x": x}, blend[1])
    if x.size:
        xc = _contiguous(x)
        plan = _Plan(backend, dt, problem, [xc, y])
        _run(backend, dt, plan, "fwd", [xc], y, log, accurate, blend)
        if y is not result:
            note_host_work("softmax: a copy into a non-contiguous out=")
            result[...] = y
        if key is not None and xc is x:
            _CALLS.put(key, (backend, dt, plan, log, accurate, blend, data_pointer(y) % 16 == 0))
    return result


@with_stream
def log_softmax(
    x: Any,
    axis: int | None = None,
    *,
    algorithm: str = "accurate",
    mode: str | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
    dtype: Any = None,
) -> Any:
    """``softmax(x, axis, log=True)``."""
    return softmax.__wrapped__(  # type: ignore[attr-defined]  (this call's wrapper ran)
        x, axis, log=True, algorithm=algorithm, mode=mode, alpha=alpha, beta=beta, out=out,
        dtype=dtype,
    )


def softmax_plan(
    shape: Sequence[int],
    axis: int | None = None,
    *,
    log: bool = False,
    algorithm: str = "accurate",
    mode: str | None = None,
    alpha: float = 1.0,
    dtype: Any = np.float32,
    backend: str = "auto",
) -> OpPlan:
    """Plans ``softmax(x, axis, log=, algorithm=, mode=, alpha=)`` for arrays of ``shape``
    and ``dtype``: the arguments are checked now; ``plan(x, out=None, stream=None)``
    checks x's kind, shape and dtype and launches. ``backend``: "cpu" (emulator),
    "cuda", or "auto" (the GPU when CuPy sees one)."""
    dims, dt = plan_shape(shape), plan_dtype(dtype)
    _algorithm(algorithm)
    flag("log", log)
    _problem(dims, axis, mode)
    _blend(alpha, 0.0, None, dtypes.lookup(dt))
    kwargs = {"axis": axis, "log": log, "algorithm": algorithm, "mode": mode, "alpha": alpha}
    scalars = scalars_key(axis, log, algorithm, mode, alpha, 0.0)  # as softmax's
    return OpPlan("softmax", softmax, plan_backend(backend), dims, dt, kwargs, _quick, scalars)


@with_stream
def softmax_backward(
    dy: Any,
    y: Any,
    axis: int | None = None,
    *,
    log: bool = False,
    mode: str | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
) -> Any:
    """Gradient of softmax from the forward output ``y`` (not x), as cuDNN:
    ``dx = y * (dy - sum(dy * y))``; with ``log``, ``y`` is log-softmax's output and
    ``dx = dy - exp(y) * sum(dy)``. ``axis``/``mode`` as in :func:`softmax`; ``out`` may
    be dy itself."""
    backend = backend_for(dy, y, out, names=("dy", "y", "out"))
    log = flag("log", log)
    dy = as_array("dy", dy)
    y = as_array("y", y)
    dt = float_dtype("y", y)
    same_dtype(("y", "dy"), (y, dy))
    same_shape(("y", "dy"), (y, dy))
    problem = _problem(tuple(y.shape), axis, mode)
    blend = _blend(alpha, beta, out, dt)
    result, dx = _result(out, y, backend, {"dy": dy, "y": y}, blend[1])
    if y.size:
        dyc, yc = _contiguous(dy), _contiguous(y)
        plan = _Plan(backend, dt, problem, [dyc, yc, dx])
        _run(backend, dt, plan, "bwd", [dyc, yc], dx, log, 1, blend)
        if dx is not result:
            note_host_work("softmax_backward: a copy into a non-contiguous out=")
            result[...] = dx
    return result


@with_stream
def log_softmax_backward(
    dy: Any,
    y: Any,
    axis: int | None = None,
    *,
    mode: str | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
) -> Any:
    """``softmax_backward(dy, y, axis, log=True)``."""
    return softmax_backward(dy, y, axis, log=True, mode=mode, alpha=alpha, beta=beta, out=out)


def kernel_name_for(
    x: Any, axis: int | None = None, *, mode: str | None = None, backward: bool = False
) -> str:
    """The readable name of the kernel a call on ``x`` (C-contiguous result) would launch."""
    backend = backend_for(x, names=("x",))
    x = as_array("x", x)
    dt = float_dtype("x", x)
    plan = _Plan(backend, dt, _problem(tuple(x.shape), axis, mode), [_contiguous(x)])
    return plan.name("bwd" if backward else "fwd", dt)


__all__ = [
    "ALGORITHMS",
    "kernel_name_for",
    "last_kernel_name",
    "log_softmax",
    "log_softmax_backward",
    "module_specs",
    "softmax",
    "softmax_backward",
    "softmax_plan",
]


# Kernel launches only, host copies reported: an emulator graph may replay these.
graph_safe(softmax, log_softmax, softmax_backward, log_softmax_backward)
