"""Argument checks shared by every primitive: arrays, dtypes, ``out=``.

Each check raises BadParamError naming the argument and what was expected, before
anything is written, so inputs are never modified on error.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError, NotSupportedError
from ..runtime.backend import Backend
from ..runtime.graph import note_host_work
from ..runtime.pointers import data_pointer
from ..runtime.select import backend_for, refuse_masked


def float_dtype(name: str, a: Any) -> dtypes.DType:
    """The DType of array ``a``, which must be float32, float16, bfloat16 or float64."""
    dt = dtypes.lookup(getattr(a, "dtype", None))
    if dt is None:
        raise BadParamError(
            f"{name}: expected dtype {dtypes.names()}, "
            f"got {getattr(a, 'dtype', type(a).__name__)}"
        )
    return dt


def same_dtype(names: Sequence[str], arrays: Sequence[Any]) -> None:
    first = arrays[0].dtype
    for n, a in zip(names[1:], arrays[1:], strict=False):
        if a is not None and a.dtype != first:
            raise BadParamError(f"{n}: expected dtype {first} like {names[0]}, got {a.dtype}")


def same_shape(names: Sequence[str], arrays: Sequence[Any]) -> None:
    first = tuple(arrays[0].shape)
    for n, a in zip(names[1:], arrays[1:], strict=False):
        if a is not None and tuple(a.shape) != first:
            raise BadParamError(
                f"{n}: expected shape {first} like {names[0]}, got {tuple(a.shape)}"
            )


# DLPack device types (dlpack.h), for error messages.
_DLPACK_DEVICE_NAMES = {
    1: "kDLCPU",
    2: "kDLCUDA",
    3: "kDLCUDAHost",
    4: "kDLOpenCL",
    7: "kDLVulkan",
    8: "kDLMetal",
    9: "kDLVPI",
    10: "kDLROCM",
    11: "kDLROCMHost",
    12: "kDLExtDev",
    13: "kDLCUDAManaged",
    14: "kDLOneAPI",
    15: "kDLWebGPU",
    16: "kDLHexagon",
    17: "kDLMAIA",
}


def _is_cupy_array(a: Any) -> bool:
    return (type(a).__module__ or "").startswith("cupy") and hasattr(a, "__cuda_array_interface__")


def _dlpack_device(name: str, a: Any) -> tuple[int, int] | None:
    dev = getattr(a, "__dlpack_device__", None)
    if dev is None:
        return None
    try:
        kind, index = dev()
        return int(kind), int(index)
    except Exception as exc:
        raise BadParamError(
            f"{name}: __dlpack_device__() failed ({type(exc).__name__}: {exc})"
        ) from exc


def as_array(name: str, a: Any) -> Any:
    """``a`` as a NumPy or CuPy array, never copying.

    NumPy and CuPy arrays pass through. A DLPack producer (PyTorch, JAX, ... tensors) is
    imported with ``numpy.from_dlpack`` (host memory) or ``cupy.from_dlpack`` (CUDA memory;
    the consumer stream passed to ``__dlpack__`` is CuPy's current stream, so call this
    inside the stream's context); bfloat16 host tensors, which NumPy's DLPack cannot take,
    are read through the DLPack capsule directly. Objects with only
    ``__cuda_array_interface__`` or ``__array_interface__`` are wrapped by CuPy / NumPy.
    """
    if isinstance(a, np.ndarray):
        if type(a) is not np.ndarray:
            refuse_masked(name, a)
        return a
    if _is_cupy_array(a):
        return a
    if hasattr(a, "__dlpack__"):
        # A PyTorch tensor whose negative bit is set holds the negation of its values
        # (``x.conj().imag``), which DLPack exports as stored: refused, as its .numpy() does
        is_neg = getattr(a, "is_neg", None)
        if callable(is_neg) and is_neg():
            raise BadParamError(
                f"{name}: a PyTorch tensor with its negative bit set (a lazy negation, e.g. "
                ".conj().imag); pass t.resolve_neg()"
            )
        device = _dlpack_device(name, a)
        kind = device[0] if device is not None else None
        if kind == 1:
            return _host_from_dlpack(name, a)
        if kind in (2, 3, 13):
            cupy = _cupy(name)
            if "bfloat16" in str(getattr(a, "dtype", "")) and not cupy_has_bfloat16(cupy):
                # CuPy < 14 has no bfloat16 (13.3 even crashes importing one by DLPack).
                raise NotSupportedError(
                    f"{name}: a bfloat16 GPU tensor needs CuPy >= 14 with ml_dtypes "
                    f"(CuPy {cupy.__version__} has no bfloat16)"
                )
            return cupy.from_dlpack(a)
        if device is not None:
            label = _DLPACK_DEVICE_NAMES.get(kind, "unknown")
            raise BadParamError(
                f"{name}: a DLPack tensor on device {label} (type {kind}, index {device[1]}); "
                "cudnnlite takes host memory (kDLCPU, run on the emulator) or CUDA memory "
                "(kDLCUDA, kDLCUDAHost, kDLCUDAManaged); copy it to one of those first"
            )
    if hasattr(a, "__cuda_array_interface__"):
        return _cupy(name).asarray(a)
    if hasattr(a, "__array_interface__") or hasattr(a, "__array_struct__"):
        return np.asarray(a)
    raise BadParamError(
        f"{name}: expected a NumPy or CuPy array, or an object with __dlpack__, "
        f"__cuda_array_interface__ or __array_interface__; got {type(a).__name__}"
    )


def _cupy(name: str) -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise NotSupportedError(
            f"{name}: a GPU array needs CuPy: pip install 'cudnnlite[cuda13]' (or [cuda12])"
        ) from exc
    return cupy


def cupy_has_bfloat16(cupy: Any) -> bool:
    """Whether this CuPy takes ml_dtypes.bfloat16 arrays (added in CuPy 14; never in 13)."""
    if dtypes.bfloat16 is None:
        return False
    try:
        major = int(str(cupy.__version__).split(".")[0])
    except ValueError:
        return True  # an unusual version string: let CuPy itself decide
    return major >= 14


def _host_from_dlpack(name: str, a: Any) -> np.ndarray:
    try:
        return np.from_dlpack(a)
    except (BufferError, RuntimeError, TypeError) as exc:
        try:
            arr = bfloat16_from_dlpack(a)
        except (BufferError, RuntimeError, TypeError):
            arr = None
        if arr is None:
            raise BadParamError(f"{name}: the DLPack import failed: {exc}") from exc
        return arr


# ------------------------------------------------------------------ bfloat16 through DLPack
# NumPy's from_dlpack knows no bfloat16 (DLPack code 4); read the legacy capsule ourselves.


class _DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class _DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class _DLTensor(ctypes.Structure):
    _fields_ = [
        ("data", ctypes.c_void_p),
        ("device", _DLDevice),
        ("ndim", ctypes.c_int32),
        ("dtype", _DLDataType),
        ("shape", ctypes.POINTER(ctypes.c_int64)),
        ("strides", ctypes.POINTER(ctypes.c_int64)),
        ("byte_offset", ctypes.c_uint64),
    ]


class _DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(_DLManagedTensor))
_DLManagedTensor._fields_ = [
    ("dl_tensor", _DLTensor),
    ("manager_ctx", ctypes.c_void_p),
    ("deleter", _DELETER),
]

_capsule_get = ctypes.pythonapi.PyCapsule_GetPointer
_capsule_get.restype = ctypes.c_void_p
_capsule_get.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_valid = ctypes.pythonapi.PyCapsule_IsValid
_capsule_valid.restype = ctypes.c_int
_capsule_valid.argtypes = [ctypes.py_object, ctypes.c_char_p]
_capsule_rename = ctypes.pythonapi.PyCapsule_SetName
_capsule_rename.restype = ctypes.c_int
_capsule_rename.argtypes = [ctypes.py_object, ctypes.c_char_p]

_DL_BFLOAT = 4


class _DLPackOwner:
    """Holds a consumed DLManagedTensor and exposes it as uint16 via __array_interface__;
    the producer's deleter runs when the last NumPy view of it goes away."""

    def __init__(self, address: int) -> None:
        self._address = address
        t = _DLManagedTensor.from_address(address).dl_tensor
        shape = tuple(t.shape[i] for i in range(t.ndim))
        strides = None if not t.strides else tuple(2 * t.strides[i] for i in range(t.ndim))
        self.__array_interface__ = {
            "version": 3,
            "shape": shape,
            "typestr": "<u2",
            "data": (int(t.data or 0) + int(t.byte_offset), False),
            "strides": strides,
        }

    def __del__(self) -> None:
        managed = _DLManagedTensor.from_address(self._address)
        if managed.deleter:
            managed.deleter(ctypes.cast(self._address, ctypes.POINTER(_DLManagedTensor)))


def bfloat16_from_dlpack(a: Any) -> np.ndarray | None:
    """A host bfloat16 DLPack tensor as a NumPy ml_dtypes.bfloat16 view (no copy); None
    when ``a`` is not one (another dtype, lanes, device) or bfloat16 is unavailable."""
    if dtypes.bfloat16 is None:
        return None
    capsule = a.__dlpack__()  # no max_version: the legacy "dltensor" capsule
    if not _capsule_valid(capsule, b"dltensor"):
        return None
    address = _capsule_get(capsule, b"dltensor")
    t = _DLManagedTensor.from_address(address).dl_tensor
    dt = t.dtype
    if (dt.code, dt.bits, dt.lanes) != (_DL_BFLOAT, 16, 1) or t.device.device_type != 1:
        return None  # the capsule stays unconsumed: its destructor frees it
    _capsule_rename(capsule, b"used_dltensor")  # consumed: ours to delete
    owner = _DLPackOwner(address)
    return np.asarray(owner).view(dtypes.bfloat16)


def array_module(a: Any) -> Any:
    """numpy for host arrays, cupy for GPU arrays: outputs are allocated in the kind of
    the inputs, whatever backend runs the kernel (see CUDNNLITE_BACKEND)."""
    if isinstance(a, np.ndarray):
        return np
    import cupy

    return cupy


def contiguous(a: Any, family: str, align: int = 0) -> Any:
    """``a`` itself when it is None or C-contiguous (and, with ``align``, its data aligned
    to ``align`` bytes), else a C-contiguous copy in a fresh allocation (NumPy's and CuPy's
    are aligned to 16 bytes or more): host work (a NumPy copy, or a CuPy copy outside the
    library's kernels) that ``family`` reports through graph.note_host_work, so graphs and
    launch templates refuse to skip it. ``align`` serves kernels that copy operands in
    16-byte vectors (cp.async), which a contiguous view at an odd offset (a slice) would
    make fault on a GPU."""
    if a is None:
        return a
    if a.flags.c_contiguous:
        if not align or data_pointer(a) % align == 0:
            return a
        note_host_work(f"{family}: an aligned copy of an operand at an odd address")
        return array_module(a).array(a, copy=True, order="C")
    note_host_work(f"{family}: a contiguous copy of a non-contiguous operand")
    return array_module(a).ascontiguousarray(a)


def empty_like(a: Any) -> Any:
    """A new array like ``a``, same kind and memory order (order="K"), never a subclass."""
    if isinstance(a, np.ndarray):
        return np.empty_like(a, subok=False)
    return array_module(a).empty_like(a)


def same_view(a: Any, out: Any) -> bool:
    """Whether ``a`` addresses exactly out's elements in out's order (in place)."""
    return a is out or (a.shape == out.shape and a.strides == out.strides
                        and data_pointer(a) == data_pointer(out))  # fmt: skip


def flag(name: str, v: Any, ints: bool = False) -> bool:
    """A yes/no argument as a bool: True or False (NumPy's bools too), and with ``ints``
    an int by its truthiness (where PyTorch's Python code tests the flag, as max pooling's
    ``return_indices``); anything else, whose truthiness would be taken silently ("no" is
    true), is a BadParamError, as PyTorch's bool parameters refuse it."""
    if isinstance(v, (bool, np.bool_)) or (ints and isinstance(v, (int, np.integer))):
        return bool(v)
    raise BadParamError(f"{name}: expected True or False, got {v!r}")


def check_distinct(name: str, a: Any) -> None:
    """BadParamError unless every element of ``a`` has memory of its own: a zero stride on
    a dim of size > 1 (an expanded / broadcast view, as PyTorch refuses for out=), or dims
    that, taken by increasing |stride|, do not each step past the inner dims' whole extent
    (an as_strided view whose elements may overlap). The second test is sufficient, not
    necessary: an interleaved layout of distinct elements is refused too (no array NumPy,
    CuPy or PyTorch makes without as_strided)."""
    if a.size == 0:
        return
    dims = sorted((abs(st), n) for n, st in zip(a.shape, a.strides, strict=True) if n > 1)
    if dims and dims[0][0] == 0:
        raise BadParamError(f"{name}: has a zero stride (elements alias each other); pass a "
                            "dense array")  # fmt: skip
    reach = a.dtype.itemsize  # bytes the inner dims span
    for stride, n in dims:
        if stride < reach:
            raise BadParamError(
                f"{name}: its elements overlap in memory (strides {tuple(a.strides)} for "
                f"shape {tuple(a.shape)}); pass an array whose elements are distinct"
            )
        reach += stride * (n - 1)


def check_out(
    out: Any, shape: Sequence[int], dtype: Any, backend: Backend, inputs: dict[str, Any]
) -> None:
    """``out`` must be a writable array of the inputs' kind with the result's shape
    and dtype whose elements are distinct (:func:`check_distinct`). It may be one of the
    inputs exactly (in place) but must not partly overlap one. (``backend`` already
    checked that the kinds agree.)"""
    if not hasattr(out, "shape") or not hasattr(out, "dtype"):
        raise BadParamError(f"out: expected an array, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape):
        raise BadParamError(f"out: expected shape {tuple(shape)}, got {tuple(out.shape)}")
    if out.dtype != np.dtype(dtype):
        raise BadParamError(f"out: expected dtype {np.dtype(dtype)}, got {out.dtype}")
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise BadParamError("out: the array is read-only")
    check_distinct("out", out)
    xp = array_module(out)
    for name, a in inputs.items():
        if a is None or a is out or not xp.may_share_memory(a, out):
            continue
        # Overlapping memory is fine only as the very same view (in place).
        if not same_view(a, out):
            raise BadParamError(
                f"out: overlaps {name} without being the same view; pass out={name} for in-place "
                "or a separate array"
            )


def collapse_dims(
    shape: Sequence[int], strides: list[list[int]], reorder: bool = True
) -> tuple[list[int], list[list[int]]]:
    """Drops size-1 dims, orders dims by operand 0's stride (outermost first; ties keep
    their order) and merges neighbours that are contiguous in every operand: the fewest
    (size, per-operand stride) dims of an elementwise launch. Strides are in elements.
    ``reorder=False`` keeps the dims in their order (outermost first), so that the C-order
    index over them is unchanged (a reduction's flattened index): only neighbours merge."""
    dims = [d for d, size in enumerate(shape) if size != 1]
    if reorder:
        dims.sort(key=lambda d: -abs(strides[0][d]))
    sizes: list[int] = []
    merged: list[list[int]] = [[] for _ in strides]
    for d in dims:
        if sizes and all(m[-1] == s[d] * shape[d] for m, s in zip(merged, strides, strict=True)):
            sizes[-1] *= shape[d]
            for m, s in zip(merged, strides, strict=True):
                m[-1] = s[d]
        else:
            sizes.append(shape[d])
            for m, s in zip(merged, strides, strict=True):
                m.append(s[d])
    return sizes, merged


__all__ = [
    "as_array",
    "backend_for",
    "check_out",
    "collapse_dims",
    "float_dtype",
    "same_dtype",
    "same_shape",
    "same_view",
]

