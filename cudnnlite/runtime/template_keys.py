"""Call keys of launch templates (:mod:`runtime.templates`): what a call's launches depend
on (each argument's kind and layout, the scalars, the dispatch settings, the environment
switches, on CUDA the current stream), built at every templated call.
"""

from __future__ import annotations

import functools
import importlib
import math
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from .. import dtypes
from .env import none_set, raw_reader
from .pointers import host_pointer

# The switches the ops' own path reads at every call (a replay skips that path): the
# backend, the dispatcher's solver switches, the emulator's launch switches and the two
# that choose which build of its modules runs.
_SWITCH_NAMES = tuple(
    f"CUDNNLITE_{n}"
    for n in (
        "BACKEND", "DISABLE_SOLVERS", "FORCE_SOLVER", "FORCE_CONFIG", "EMU_SCHEDULE",
        "EMU_POISON", "EMU_THREADS", "EMU_SEED", "EMU_STACK_KB", "EMU_RACECHECK",
        "EMU_ASAN", "TEMPLATE_CHECK",
    )
)  # fmt: skip
_SWITCHES = raw_reader(_SWITCH_NAMES)
_NO_SWITCHES = none_set(_SWITCH_NAMES)  # (whether none is set: cheaper than reading them)
_UNSET = (None,) * len(_SWITCH_NAMES)

# What the dispatcher reads besides the arguments (settings); set by the ops layer.
_context_key: Callable[[], Any] = lambda: None  # noqa: E731


def set_context_key(fn: Callable[[], Any]) -> None:
    """Registers what else a call's result depends on (the dispatch settings)."""
    global _context_key
    _context_key = fn


# ------------------------------------------------------------------ keys

_FLAT = frozenset((int, bool, str, type(None)))
# The dtypes of tensors (float16, bfloat16, float32, float64): other arrays' contents are
# keyed. (A dict by dtype that bfloat16 joins when ml_dtypes is imported: dtypes.lookup
# of a dtype not in it yet.)
_TENSOR_DTYPES = dtypes.TENSOR_DTYPES
_NUMPY_SCALARS = (np.integer, np.bool_, np.floating)


class _Unkeyable(Exception):
    pass


def _value_key(v: Any, arrays: list, ptrs: list) -> Any:
    """``v``'s part of a call key (arrays appended to ``arrays``, their data pointers to
    ``ptrs``), or raises _Unkeyable. An array's part is its shape, dtype, strides and
    address modulo 16, and for NumPy its writability (an op that updates an input, such as
    batch norm's running statistics, refuses a read-only one; a replay must not write it).
    A plan (the ``self`` of a plan's method) enters by identity."""
    t = type(v)
    if t is np.ndarray:
        ptr = host_pointer(v)
        arrays.append(v)
        ptrs.append(ptr)
        if v.ndim and (v.dtype in _TENSOR_DTYPES or dtypes.lookup(v.dtype) is not None):
            return (v.shape, v.dtype, v.strides, ptr & 15, v.flags.writeable)
        # A 0-d or non-float array may be a value the op reads on the host (padding as
        # an int array): its contents are part of the key.
        return (v.shape, v.dtype, v.strides, ptr & 15, v.flags.writeable, v.tobytes())
    if t in _FLAT:
        return (t, v)
    if t is float:
        # -0.0 == 0.0 yet can change a result's sign bit: key the sign too.
        return (t, v, math.copysign(1.0, v))
    if t is tuple or t is list:
        return (t, tuple([_value_key(e, arrays, ptrs) for e in v]))
    kind = _KINDS.get(t) or _kind(t)
    if kind == "device":
        ptr = v.data.ptr
        arrays.append(v)
        ptrs.append(ptr)
        if v.ndim and (v.dtype in _TENSOR_DTYPES or dtypes.lookup(v.dtype) is not None):
            return ("device", v.device.id, v.shape, v.dtype, v.strides, ptr & 15)
        return ("device", v.device.id, v.shape, v.dtype, v.strides, ptr & 15, v.get().tobytes())
    if kind == "identity":
        # a plan (self of a method), by identity; weakly, so that a key does not keep a
        # plan the user dropped (its workspace, kernels) alive
        return weakref.ref(v)
    if kind == "scalar":
        return (t, v.item(), math.copysign(1.0, v) if isinstance(v, np.floating) else 0)
    if kind == "value":
        return v
    raise _Unkeyable


_KINDS: dict[type, str] = {}


def _kind(t: type) -> str:
    """How a value of type ``t`` (not a plain one) enters a key, memoized per type."""
    if (t.__module__ or "").startswith("cupy") and hasattr(t, "__cuda_array_interface__"):
        kind = "device"
    elif issubclass(t, _NUMPY_SCALARS):
        kind = "scalar"
    elif t is np.dtype or issubclass(t, (np.dtype, type)):
        kind = "value"  # a dtype, or a class (dtype=np.float16)
    elif getattr(t, "_templated_by_identity", False):
        kind = "identity"
    else:
        kind = "none"
    _KINDS[t] = kind
    return kind


def call_key(op: Any, args: tuple, kwargs: dict) -> tuple[tuple, list, list] | None:
    """The key of a call of ``op``, the arrays among its arguments (in order) and their
    data pointers, or None for a call that is not templated (``out=`` given, an argument
    of another kind)."""
    arrays: list = []
    ptrs: list = []
    try:
        parts = [_value_key(a, arrays, ptrs) for a in args]
        if kwargs:
            if kwargs.get("out") is not None:
                return None
            parts += [(k, _value_key(v, arrays, ptrs)) for k, v in sorted(kwargs.items())]
    except _Unkeyable:
        return None
    for a in arrays:
        if type(a) is not np.ndarray:
            # a GPU call: per stream (a template's temporaries are used in stream order)
            parts.append(_cupy_of(type(a)).cuda.get_current_stream().ptr)
            break
    switches = _UNSET if _NO_SWITCHES() else _SWITCHES()
    return (op, *parts, _context_key(), switches), arrays, ptrs


@functools.cache
def _cupy_of(array_type: type) -> Any:
    """The module of a GPU array type (cupy), memoized: a CUDA call asks it every time
    (the current stream is part of the key)."""
    return importlib.import_module(array_type.__module__.split(".")[0])


__all__ = ["call_key", "set_context_key"]
