"""Argument checks shared by every primitive: arrays, dtypes, ``out=``.

Each check raises BadParamError naming the argument and what was expected, before
anything is written, so inputs are never modified on error.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..runtime.backend import Backend
from ..runtime.select import array_kind, backend_for


def float_dtype(name: str, a: Any) -> dtypes.DType:
    """The DType of array ``a``, which must be float32, float16 or bfloat16."""
    dt = dtypes.lookup(getattr(a, "dtype", None))
    if dt is None:
        raise BadParamError(
            f"{name}: expected dtype float32, float16 or bfloat16, "
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


def as_array(name: str, a: Any) -> Any:
    """NumPy and CuPy arrays pass through; other DLPack producers are imported
    without a copy (``numpy.from_dlpack`` / ``cupy.from_dlpack``)."""
    if isinstance(a, np.ndarray) or hasattr(a, "__cuda_array_interface__"):
        return a
    kind = array_kind(a)
    if kind == "cpu" and hasattr(a, "__dlpack__"):
        return np.from_dlpack(a)
    if kind == "cuda" and hasattr(a, "__dlpack__"):
        import cupy

        return cupy.from_dlpack(a)
    raise BadParamError(
        f"{name}: expected a NumPy or CuPy array (or an object with __dlpack__), "
        f"got {type(a).__name__}"
    )


def array_module(a: Any) -> Any:
    """numpy for host arrays, cupy for GPU arrays: outputs are allocated in the kind of
    the inputs, whatever backend runs the kernel (see CUDNNLITE_BACKEND)."""
    if isinstance(a, np.ndarray):
        return np
    import cupy

    return cupy


def empty_like(a: Any) -> Any:
    """A new array like ``a``, same kind and memory order (order="K"), never a subclass."""
    if isinstance(a, np.ndarray):
        return np.empty_like(a, subok=False)
    return array_module(a).empty_like(a)


def check_out(
    out: Any, shape: Sequence[int], dtype: Any, backend: Backend, inputs: dict[str, Any]
) -> None:
    """``out`` must be a writable array of the inputs' kind with the result's shape
    and dtype. It may be one of the inputs exactly (in place) but must not partly
    overlap one. (``backend`` already checked that the kinds agree.)"""
    if not hasattr(out, "shape") or not hasattr(out, "dtype"):
        raise BadParamError(f"out: expected an array, got {type(out).__name__}")
    if tuple(out.shape) != tuple(shape):
        raise BadParamError(f"out: expected shape {tuple(shape)}, got {tuple(out.shape)}")
    if out.dtype != np.dtype(dtype):
        raise BadParamError(f"out: expected dtype {np.dtype(dtype)}, got {out.dtype}")
    if isinstance(out, np.ndarray) and not out.flags.writeable:
        raise BadParamError("out: the array is read-only")
    xp = array_module(out)
    for name, a in inputs.items():
        if a is None or a is out or not xp.may_share_memory(a, out):
            continue
        # Overlapping memory is fine only as the very same view (in place).
        same_view = (
            a.shape == out.shape and a.strides == out.strides and _data_ptr(a) == _data_ptr(out)
        )
        if not same_view:
            raise BadParamError(
                f"out: overlaps {name} without being the same view; pass out={name} for in-place "
                "or a separate array"
            )


def _data_ptr(a: Any) -> int:
    if isinstance(a, np.ndarray):
        return a.__array_interface__["data"][0]
    return int(a.data.ptr)


__all__ = ["as_array", "backend_for", "check_out", "float_dtype", "same_dtype", "same_shape"]
