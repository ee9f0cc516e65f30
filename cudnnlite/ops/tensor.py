"""cuDNN's tensor API as array functions: add_tensor, op_tensor, transform_tensor (with
nchw_to_nhwc / nhwc_to_nchw), scale_tensor, set_tensor; and the tensor family's kernel
module, which reduce_tensor (:mod:`cudnnlite.ops.reduce`) launches from too.

Semantics follow cuDNN (math in float32 for float32, float16 and bfloat16, in float64 for
float64, one rounding at the store; alpha / beta are float32 numbers for the former and
exact for float64):

- ``add_tensor(a, c, alpha, beta)``: ``c = alpha * a + beta * c`` in place, ``a`` broadcast
  to ``c`` (each dim of a is 1 or c's; fewer dims are padded on the left), e.g. a bias.
- ``op_tensor(op, a, b, alpha1, alpha2, beta)``: ``c = op(alpha1 * a, alpha2 * b) + beta * c``
  with op in :data:`OP_TENSOR_OPS`; ``sqrt`` and ``not`` are unary (b is ignored) and
  ``not`` is cuDNN's logical negation ``1 - alpha1 * a``; a and b broadcast (NumPy rules).
- ``transform_tensor(x, out, alpha, beta)``: ``out = alpha * x + beta * out`` between any
  two layouts and float dtypes (cuDNN's cudnnTransformTensor; computed in float64 with
  exact alpha and beta when either side is float64, so a conversion rounds once, straight
  to the destination type); ``nchw_to_nhwc(x)`` and
  ``nhwc_to_nchw(x)`` are the layout conversions.
- ``scale_tensor(y, alpha)``: ``y *= alpha`` in place; ``set_tensor(y, value)``: ``y[...] = value``.

Kernels (``cuda_src/tensor/tensor.cu``), one module per dtype: ``tensor_binary<T>``
(strided, broadcasting), ``tensor_binary_vec<T, VEC>`` (contiguous, aligned, same shape),
``tensor_channel<T, VEC>`` (the bias case: contiguous c, a per-channel vector over NCHW or
NHWC, 32-bit multiply-shift channel index), ``tensor_transform<TI, TO>`` (strided),
``tensor_transpose<TI, TO>`` (32x32 shared-memory tiles when the layout change transposes
the two innermost merged dims, e.g. NCHW <-> NHWC). One module per output dtype (the
transforms into it from every dtype); the reductions' kernels (``tensor/reduce.cu``, see
:mod:`cudnnlite.ops.reduce`) are a module per dtype of their own. Any strides are accepted
without copies (up to 8 dims after merging, else NotSupportedError).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError, NotSupportedError
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
    check_distinct,
    check_out,
    collapse_dims,
    float_dtype,
    same_view,
)
from ._kernels import LastLaunch

SOURCE = "tensor/tensor.cu"
REDUCE_SOURCE = "tensor/reduce.cu"
MAX_DIMS = 8
TRANSPOSE_MIN = 4  # both transposed extents at least this: the tiled kernel
BLOCK = 256
OP_TENSOR_OPS = ("add", "mul", "min", "max", "sqrt", "not")
_OP_COPY, _OP_SET = 6, 7
_LAST_BINARY = 3  # ops 0..3 (add, mul, min, max) read b, and the two below
# min / max without NaN propagation (cuDNN's CUDNN_NOT_PROPAGATE_NAN): tens::kMinNum/kMaxNum
_OP_NUM = {"min": 8, "max": 9}

_LAYOUT_DTYPE = np.dtype(
    [
        ("size", "<i8", (MAX_DIMS,)),
        ("stride", "<i8", (3, MAX_DIMS)),
        ("ndim", "<i4"),
        ("reserved", "<i4"),
    ],
    align=True,
)
_OP_DTYPE = np.dtype(
    [("alpha1", "<f4"), ("alpha2", "<f4"), ("beta", "<f4"), ("op", "<i4")], align=True
)
# OpParamsT<double>: float64 outputs, and conversions from or to float64
_OP_DTYPE64 = np.dtype(
    [("alpha1", "<f8"), ("alpha2", "<f8"), ("beta", "<f8"), ("op", "<i4")], align=True
)
_CHANNEL_DTYPE = np.dtype(
    [
        ("n", "<u4"),
        ("inner", "<u4"),
        ("inner_mul", "<u4"),
        ("channels", "<u4"),
        ("channels_mul", "<u4"),
        ("inner_shift", "<i4"),
        ("channels_shift", "<i4"),
        ("vector_operand", "<i4"),
    ],
    align=True,
)
_TRANSPOSE_DTYPE = np.dtype(
    [
        (name, "<i8")
        for name in (
            "batch",
            "rows",
            "cols",
            "x_batch",
            "x_col",
            "y_batch",
            "y_row",
            "tiles_r",
            "tiles_c",
        )
    ],
    align=True,
)


def _vec(dt: dtypes.DType) -> int:
    return 16 // dt.itemsize


def _names(dt: dtypes.DType) -> list[str]:
    t = dt.ctype
    names = [f"tensor_binary<{t}>", f"tensor_binary_vec<{t}, {_vec(dt)}>"]
    names += [f"tensor_channel<{t}, {_vec(dt)}>", f"tensor_channel<{t}, 1>"]
    names += [f"tensor_transform<{src.ctype}, {t}>" for src in dtypes.FLOAT_TYPES]
    names += [f"tensor_transpose<{src.ctype}, {t}>" for src in dtypes.FLOAT_TYPES]
    return names


# reduce_tensor's kernels (ops/reduce.py): each kind for each op number (tens::kR* in the
# source: its REDUCE_OPS and the three without NaN propagation).
REDUCE_KINDS = ("thread", "warp", "block", "split_block", "split_thread", "finish")
REDUCE_OP_COUNT = 12


def reduce_kernel_name(kind: str, dt: dtypes.DType, op_id: int) -> str:
    """The reduction kernel of ``kind`` for ``dt`` and op number ``op_id``."""
    return f"tensor_reduce_{kind}<{dt.ctype}, {op_id}>"


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """Every elementwise tensor-op kernel whose output has storage type ``dt``."""
    return ModuleSpec.make(SOURCE, _names(dt))


def reduce_module_spec(dt: dtypes.DType) -> ModuleSpec:
    """reduce_tensor's kernels for ``dt`` (a source and module of their own: the emulator
    builds the 72 of them for a reduction only, not for an elementwise op)."""
    names = [reduce_kernel_name(kind, dt, op) for kind in REDUCE_KINDS
             for op in range(REDUCE_OP_COUNT)]  # fmt: skip
    return ModuleSpec.make(REDUCE_SOURCE, names)


@register("tensor")
def module_specs() -> list[ModuleSpec]:
    return [make(dt) for make in (module_spec, reduce_module_spec) for dt in dtypes.FLOAT_TYPES]


_KERNELS: dict[tuple, Kernel] = {}
_LOCK = threading.Lock()
_LAST = LastLaunch()


def _kernel(backend: Backend, dt: dtypes.DType, name: str, readable: str,
            spec: Any = module_spec) -> Kernel:  # fmt: skip
    """Kernel ``name`` of the module ``spec(dt)`` (the elementwise one by default; the
    reductions pass :func:`reduce_module_spec`)."""
    key = (id(backend), backend.device_key(), dt.short, name)
    k = _KERNELS.get(key)
    if k is None:
        with _LOCK:
            k = _KERNELS.get(key)
            if k is None:
                k = _KERNELS[key] = backend.kernel(spec(dt), name)
    _LAST.set(readable)
    return k


def _max_blocks(backend: Backend) -> int:
    if backend.name == "cuda":
        return 32 * backend.multiprocessor_count()
    return 256


def _grid(backend: Backend, units: int) -> int:
    return max(1, min(-(-units // BLOCK), _max_blocks(backend)))


def last_kernel_name() -> str | None:
    """Readable name of the last tensor-op kernel this thread launched, e.g.
    ``tensor_binary_vec4_fp32``, ``tensor_reduce_warp_bf16``."""
    return _LAST.get()


# ------------------------------------------------------------------ checks


def _real(name: str, v: Any, wide: bool = False) -> float:
    """A user scalar as the kernel will see it: rounded to float32, or (``wide``: float64
    arithmetic) exact."""
    if isinstance(v, bool) or not isinstance(v, (int, float, np.integer, np.floating)):
        raise BadParamError(f"{name}: expected a real number, got {v!r}")
    with np.errstate(over="ignore"):
        f = float(v) if wide else float(np.float32(v))
    if not np.isfinite(f):
        raise BadParamError(
            f"{name}: expected a finite number{'' if wide else ' (in float32)'}, got {v!r}"
        )
    return f


def _wide(*types: dtypes.DType) -> bool:
    """Whether the kernel computes in double: float64 on either side."""
    return any(t.short == "fp64" for t in types)


def _choice(name: str, v: Any, options: Sequence[str]) -> int:
    if not isinstance(v, str) or v not in options:
        raise BadParamError(f"{name}: expected one of {', '.join(options)}, got {v!r}")
    return list(options).index(v)


def _nan_option(value: Any) -> bool:
    if not isinstance(value, (bool, np.bool_)):
        raise BadParamError(f"nan_propagation: expected True or False, got {value!r}")
    return bool(value)


def _writable(name: str, a: Any) -> None:
    if isinstance(a, np.ndarray) and not a.flags.writeable:
        raise BadParamError(f"{name}: the array is read-only")
    check_distinct(name, a)


def _broadcast_strides(name: str, a: Any, shape: tuple[int, ...]) -> list[int]:
    """a's element strides against ``shape`` (0 where a broadcasts)."""
    if a.ndim > len(shape):
        raise BadParamError(f"{name}: shape {tuple(a.shape)} does not broadcast to {shape}")
    pad = len(shape) - a.ndim
    strides = [0] * pad
    for d, (size, stride) in enumerate(zip(a.shape, a.strides, strict=True)):
        if size != shape[pad + d] and size != 1:
            raise BadParamError(f"{name}: shape {tuple(a.shape)} does not broadcast to {shape}")
        strides.append(0 if size == 1 else stride // a.itemsize)
    return strides


def _layout(shape: tuple[int, ...], strides: list[list[int]]) -> np.void:
    sizes, merged = collapse_dims(shape, strides)
    if len(sizes) > MAX_DIMS:
        raise NotSupportedError(
            f"tensor op: {len(sizes)} dims remain after merging contiguous ones "
            f"(at most {MAX_DIMS})"
        )
    lay = np.zeros((), _LAYOUT_DTYPE)
    lay["ndim"] = len(sizes)
    lay["size"][: len(sizes)] = sizes[::-1]
    for o, s in enumerate(merged):
        lay["stride"][o, : len(sizes)] = s[::-1]
    return lay[()]


def _op_struct(alpha1: float, alpha2: float, beta: float, op: int, wide: bool) -> np.void:
    """OpParamsT<float> or (``wide``) OpParamsT<double>."""
    return np.array((alpha1, alpha2, beta, op), _OP_DTYPE64 if wide else _OP_DTYPE)[()]


# ------------------------------------------------------------------ elementwise


def _magic(d: int) -> tuple[int, int]:
    """(mul, shift) with ``n // d == (umulhi(n, mul) + n) >> shift`` for n, d < 2^31."""
    shift = (d - 1).bit_length()
    return ((1 << 32) * ((1 << shift) - d)) // d + 1, shift


def _channel_plan(
    dt: dtypes.DType, shape: tuple[int, ...], strides: list[list[int]], reads: tuple[bool, bool]
) -> tuple[np.void, int] | None:
    """The bias fast path's (ChannelShape, VEC) when c is contiguous, one read operand is a
    per-channel vector (unit stride along one collapsed dim, 0 elsewhere) and the other
    read operand, if any, is laid out like c; None otherwise."""
    n = int(np.prod(shape, dtype=np.int64))
    if n >= 2**31:
        return None
    sizes, merged = collapse_dims(shape, strides)
    dense = [int(np.prod(sizes[d + 1 :], dtype=np.int64)) for d in range(len(sizes))]
    if merged[0] != dense:
        return None  # c is not contiguous
    vector = None
    for o in (1, 2):
        if not reads[o - 1] or merged[o] == dense:
            continue
        unit = [d for d, st in enumerate(merged[o]) if st != 0]
        if vector is not None or len(unit) != 1 or merged[o][unit[0]] != 1:
            return None
        vector = (o, unit[0])
    if vector is None:
        return None
    o, d = vector
    inner, channels = dense[d], sizes[d]
    vec = _vec(dt)
    if not (inner % vec == 0 or (inner == 1 and channels % vec == 0)):
        vec = 1
    s = np.zeros((), _CHANNEL_DTYPE)
    s["n"], s["inner"], s["channels"], s["vector_operand"] = n, inner, channels, o
    s["inner_mul"], s["inner_shift"] = _magic(inner)
    s["channels_mul"], s["channels_shift"] = _magic(channels)
    return s[()], vec


def _elementwise(
    backend: Backend, dt: dtypes.DType, c: Any, a: Any, b: Any, params: np.void
) -> None:
    """c = op(a, b) (+ beta c) with a, b broadcast to c; a/b may be None when unread."""
    if c.size == 0:
        return
    op = int(params["op"])
    # as the kernels: is a read, is b read
    reads = (op != _OP_SET, op <= _LAST_BINARY or op in _OP_NUM.values())
    a = c if a is None else a
    b = a if b is None else b
    shape = tuple(c.shape)
    dense = all(x.shape == c.shape and x.flags.c_contiguous for x in (a, b, c))
    if dense and all(data_pointer(x) % 16 == 0 for x in (a, b, c)):
        vec = _vec(dt)
        name = f"tensor_binary_vec<{dt.ctype}, {vec}>"
        kernel = _kernel(backend, dt, name, f"tensor_binary_vec{vec}_{dt.short}")
        kernel(_grid(backend, c.size // vec + 1), BLOCK, (a, b, c, np.int64(c.size), params))
        return
    strides = [
        [s // c.itemsize for s in c.strides],
        _broadcast_strides("a", a, shape),
        _broadcast_strides("b", b, shape),
    ]
    plan = _channel_plan(dt, shape, strides, reads) if c.flags.c_contiguous else None
    if plan is not None:
        cs, vec = plan
        vo = int(cs["vector_operand"])
        full = [x for o, (x, r) in enumerate(zip((a, b), reads, strict=True), 1) if r and o != vo]
        if vec > 1 and any(data_pointer(x) % 16 for x in (c, *full)):
            vec = 1
        tag = f"vec{vec}" if vec > 1 else "scalar"
        name = f"tensor_channel<{dt.ctype}, {vec}>"
        kernel = _kernel(backend, dt, name, f"tensor_channel_{tag}_{dt.short}")
        kernel(_grid(backend, c.size // vec), BLOCK, (a, b, c, cs, params))
        return
    layout = _layout(shape, strides)
    kernel = _kernel(backend, dt, f"tensor_binary<{dt.ctype}>", f"tensor_binary_strided_{dt.short}")
    kernel(_grid(backend, c.size), BLOCK, (a, b, c, np.int64(c.size), layout, params))


def _same_kind_dtype(name: str, a: Any, dt: dtypes.DType) -> None:
    if a.dtype != dt.numpy:
        raise BadParamError(f"{name}: expected dtype {dt.numpy}, got {a.dtype}")


@with_stream
def add_tensor(a: Any, c: Any, *, alpha: float = 1.0, beta: float = 1.0) -> Any:
    """cuDNN's cudnnAddTensor: ``c = alpha * a + beta * c`` IN PLACE, ``a`` broadcast to c
    (each of a's dims 1 or equal to c's, e.g. a (1, C, 1, 1) bias); returns c."""
    backend = backend_for(a, c, names=("a", "c"))
    a, c = as_array("a", a), as_array("c", c)
    dt = float_dtype("c", c)
    _same_kind_dtype("a", a, dt)
    _writable("c", c)
    _broadcast_strides("a", a, tuple(c.shape))
    w = _wide(dt)
    params = _op_struct(_real("alpha", alpha, w), 0.0, _real("beta", beta, w), _OP_COPY, w)
    if a.size and array_module(c).may_share_memory(a, c) and a is not c:
        note_host_work("add_tensor: a copy of a, which overlaps c")
        a = a.copy()
    _elementwise(backend, dt, c, a, None, params)
    return c


@with_stream
def op_tensor(
    op: str,
    a: Any,
    b: Any = None,
    *,
    alpha1: float = 1.0,
    alpha2: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
    nan_propagation: bool = True,
) -> Any:
    """cuDNN's cudnnOpTensor: ``out = op(alpha1 * a, alpha2 * b) + beta * out``.

    ``op`` in :data:`OP_TENSOR_OPS`; ``sqrt`` and ``not`` (= 1 - alpha1 a) take no b. a and
    b broadcast (NumPy rules) to the result's shape; ``beta != 0`` reads ``out`` (required).
    ``nan_propagation`` (min and max): True (default, as PyTorch's ``minimum``/``maximum``
    and cuDNN's CUDNN_PROPAGATE_NAN) gives NaN where either operand is NaN; False
    (CUDNN_NOT_PROPAGATE_NAN, NumPy's ``fmin``/``fmax``) gives the other operand.
    """
    op_id = _choice("op", op, OP_TENSOR_OPS)
    if _nan_option(nan_propagation) is False and op in _OP_NUM:
        op_id = _OP_NUM[op]
    unary = op in ("sqrt", "not")
    if unary and b is not None:
        raise BadParamError(f"b: op {op!r} is unary and takes no b")
    if not unary and b is None:
        raise BadParamError(f"b: op {op!r} needs a second operand b")
    backend = backend_for(a, b, out, names=("a", "b", "out"))
    a = as_array("a", a)
    b = None if b is None else as_array("b", b)
    dt = float_dtype("a", a)
    if b is not None:
        _same_kind_dtype("b", b, dt)
        try:
            shape = tuple(np.broadcast_shapes(tuple(a.shape), tuple(b.shape)))
        except ValueError:
            raise BadParamError(
                f"b: shape {tuple(b.shape)} does not broadcast with a's {tuple(a.shape)}"
            ) from None
    else:
        shape = tuple(a.shape)
    w = _wide(dt)
    beta_val = _real("beta", beta, w)
    params = _op_struct(_real("alpha1", alpha1, w), _real("alpha2", alpha2, w), beta_val, op_id, w)
    if out is None:
        if beta_val != 0:
            raise BadParamError(
                "beta: blending (beta != 0) reads the prior content of out; pass out="
            )
        out = array_module(a).empty(shape, dt.numpy)
    else:
        check_out(out, shape, dt.numpy, backend, {})
        _writable("out", out)
        # Each element reads its own inputs then writes: an input that is out's very view
        # is fine (in place); any other overlap (a shifted or broadcast view) is copied.
        xp = array_module(out)
        if a.size and xp.may_share_memory(a, out) and not same_view(a, out):
            note_host_work("op_tensor: a copy of a, which overlaps out")
            a = a.copy()
        if b is not None and b.size and xp.may_share_memory(b, out) and not same_view(b, out):
            note_host_work("op_tensor: a copy of b, which overlaps out")
            b = b.copy()
    _elementwise(backend, dt, out, a, b, params)
    return out


@with_stream
def maximum(a: Any, b: Any, *, nan_propagation: bool = True, out: Any = None) -> Any:
    """Elementwise max of a and b (broadcast), as ``torch.maximum``: NaN where either is
    NaN, unless ``nan_propagation=False`` (``numpy.fmax``). ``op_tensor("max", a, b)``."""
    return op_tensor.__wrapped__("max", a, b, out=out, nan_propagation=nan_propagation)  # type: ignore[attr-defined]


@with_stream
def minimum(a: Any, b: Any, *, nan_propagation: bool = True, out: Any = None) -> Any:
    """Elementwise min of a and b (broadcast), as ``torch.minimum``: NaN where either is
    NaN, unless ``nan_propagation=False`` (``numpy.fmin``). ``op_tensor("min", a, b)``."""
    return op_tensor.__wrapped__("min", a, b, out=out, nan_propagation=nan_propagation)  # type: ignore[attr-defined]


@with_stream
def scale_tensor(y: Any, alpha: float) -> Any:
    """cuDNN's cudnnScaleTensor: ``y *= alpha`` in place; returns y."""
    backend = backend_for(y, names=("y",))
    y = as_array("y", y)
    dt = float_dtype("y", y)
    _writable("y", y)
    w = _wide(dt)
    params = _op_struct(_real("alpha", alpha, w), 0.0, 0.0, _OP_COPY, w)
    _elementwise(backend, dt, y, y, None, params)
    return y


@with_stream
def set_tensor(y: Any, value: float) -> Any:
    """cuDNN's cudnnSetTensor: every element of y set to ``value`` (rounded to y's dtype;
    NaN and +-inf too, e.g. -inf to start a running max)."""
    backend = backend_for(y, names=("y",))
    y = as_array("y", y)
    dt = float_dtype("y", y)
    _writable("y", y)
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise BadParamError(f"value: expected a real number, got {value!r}")
    w = _wide(dt)
    with np.errstate(over="ignore"):
        val = float(value) if w else float(np.float32(value))
    _elementwise(backend, dt, y, None, None, _op_struct(val, 0.0, 0.0, _OP_SET, w))
    return y


# ------------------------------------------------------------------ transform


@with_stream
def transform_tensor(
    x: Any,
    out: Any = None,
    *,
    dtype: Any = None,
    alpha: float = 1.0,
    beta: float = 0.0,
) -> Any:
    """cuDNN's cudnnTransformTensor: ``out = alpha * x + beta * out`` with any layouts of x
    and out (same shape) and any float dtypes (conversion rounds once). Without ``out`` the
    result is a new C-contiguous array of ``dtype`` (default x's)."""
    backend = backend_for(x, out, names=("x", "out"))
    x = as_array("x", x)
    src = float_dtype("x", x)
    if out is None:
        dst = src if dtype is None else dtypes.lookup(dtype)
        if dst is None:
            raise BadParamError(f"dtype: expected {dtypes.names()}, got {dtype!r}")
    else:
        dst = float_dtype("out", out)
    w = _wide(src, dst)
    beta_val = _real("beta", beta, w)
    if out is None:
        if beta_val != 0:
            raise BadParamError(
                "beta: blending (beta != 0) reads the prior content of out; pass out="
            )
        out = array_module(x).empty(x.shape, dst.numpy)
    else:
        if dtype is not None and dtypes.lookup(dtype) != dst:
            raise BadParamError(f"dtype: {dtype!r} differs from out's dtype {out.dtype}")
        check_out(out, x.shape, dst.numpy, backend, {})
        _writable("out", out)
        if x.size and array_module(out).may_share_memory(x, out):
            note_host_work("transform_tensor: a copy of x, which overlaps out")
            x = x.copy()
    if out.size:
        strides = [[s // out.itemsize for s in out.strides], [s // x.itemsize for s in x.strides]]
        strides.append([0] * x.ndim)
        params = _op_struct(_real("alpha", alpha, w), 0.0, beta_val, _OP_COPY, w)
        tr = _transpose_shape(tuple(x.shape), strides)
        if tr is not None:
            name = f"tensor_transpose<{src.ctype}, {dst.ctype}>"
            kernel = _kernel(backend, dst, name, f"tensor_transpose_{src.short}_to_{dst.short}")
            tiles = int(tr["batch"] * tr["tiles_r"] * tr["tiles_c"])
            kernel(max(1, min(tiles, _max_blocks(backend))), (32, 8), (x, out, tr, params))
            return out
        layout = _layout(tuple(x.shape), strides)
        name = f"tensor_transform<{src.ctype}, {dst.ctype}>"
        kernel = _kernel(backend, dst, name, f"tensor_transform_{src.short}_to_{dst.short}")
        kernel(_grid(backend, out.size), BLOCK, (x, out, np.int64(out.size), layout, params))
    return out


def _transpose_shape(shape: tuple[int, ...], strides: list[list[int]]) -> np.void | None:
    """The tiled transpose's TransposeShape when, after merging dims, the change of layout
    is [batch, rows, cols] (out contiguous along cols) from x contiguous along rows, both
    at least TRANSPOSE_MIN (below that the strided kernel's reads are nearly coalesced and
    a tile would leave most lanes idle); None otherwise."""
    sizes, merged = collapse_dims(shape, strides)
    if len(sizes) not in (2, 3) or min(sizes[-2:]) < TRANSPOSE_MIN:
        return None
    y, x = merged[0], merged[1]
    if y[-1] != 1 or x[-2] != 1:
        return None
    t = np.zeros((), _TRANSPOSE_DTYPE)
    t["batch"] = sizes[0] if len(sizes) == 3 else 1
    t["rows"], t["cols"] = sizes[-2], sizes[-1]
    t["x_batch"], t["y_batch"] = (x[0], y[0]) if len(sizes) == 3 else (0, 0)
    t["x_col"], t["y_row"] = x[-1], y[-2]
    t["tiles_r"], t["tiles_c"] = -(-sizes[-2] // 32), -(-sizes[-1] // 32)
    return t[()]


def _check_4d(name: str, x: Any) -> None:
    if x.ndim != 4:
        raise BadParamError(f"{name}: expected a 4-d array, got {x.ndim}-d")


@with_stream
def nchw_to_nhwc(x: Any, *, dtype: Any = None) -> Any:
    """An (N, C, H, W) array as a new C-contiguous (N, H, W, C) array (optionally converted)."""
    x = as_array("x", x)
    _check_4d("x", x)
    return transform_tensor(x.transpose(0, 2, 3, 1), dtype=dtype)


@with_stream
def nhwc_to_nchw(x: Any, *, dtype: Any = None) -> Any:
    """An (N, H, W, C) array as a new C-contiguous (N, C, H, W) array."""
    x = as_array("x", x)
    _check_4d("x", x)
    return transform_tensor(x.transpose(0, 3, 1, 2), dtype=dtype)


__all__ = [
    "OP_TENSOR_OPS",
    "add_tensor",
    "last_kernel_name",
    "maximum",
    "minimum",
    "module_specs",
    "nchw_to_nhwc",
    "nhwc_to_nchw",
    "op_tensor",
    "scale_tensor",
    "set_tensor",
    "transform_tensor",
]

# Kernel launches only, host copies reported: an emulator graph may replay them, and a
# repeated call replays its launch template (runtime.templates).
graph_safe(add_tensor, op_tensor, maximum, minimum, scale_tensor, set_tensor, transform_tensor,
           nchw_to_nhwc, nhwc_to_nchw)  # fmt: skip
