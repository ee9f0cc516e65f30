"""Backend choice follows the arrays: CuPy arrays (or anything exposing
``__cuda_array_interface__`` or a CUDA DLPack device) run on the GPU, NumPy arrays
on the emulator. ``CUDNNLITE_BACKEND=cpu|cuda`` forces one."""

from __future__ import annotations

import functools
import importlib
import os
from collections.abc import Iterable
from typing import Any

import numpy as np

from ..errors import BadParamError
from .backend import Backend
from .env import raw_reader

_DLPACK_CPU = 1
_DLPACK_CUDA = (2, 3, 13)  # kDLCUDA, kDLCUDAHost, kDLCUDAManaged


@functools.cache
def backend_by_name(name: str) -> Backend:
    """The process-wide backend object: ``"cpu"`` (alias ``"emulator"``) or ``"cuda"``."""
    if name in ("cpu", "emulator"):
        from .emulator.launcher import EmulatorBackend

        return EmulatorBackend()
    if name == "cuda":
        from .cuda import CudaBackend

        return CudaBackend()
    raise BadParamError(f"unknown backend {name!r}: expected 'cpu' (emulator) or 'cuda'")


def refuse_masked(name: str, a: Any) -> None:
    """A NumPy masked array is refused: its mask would be ignored silently."""
    if type(a).__module__.startswith("numpy.ma"):
        raise BadParamError(
            f"{name}: a masked array, whose mask cudnnlite would ignore; pass a.filled(value) "
            "(or a.data for the values under the mask too)"
        )


def array_kind(a: Any) -> str | None:
    """``"cpu"``, ``"cuda"``, or None when ``a`` is not an array we recognize."""
    if isinstance(a, np.ndarray):
        return "cpu"
    if hasattr(a, "__cuda_array_interface__"):
        return "cuda"
    dev = getattr(a, "__dlpack_device__", None)
    if dev is not None:
        try:
            kind = int(dev()[0])
        except Exception:
            return None
        if kind == _DLPACK_CPU:
            return "cpu"
        if kind in _DLPACK_CUDA:
            return "cuda"
    return None


# ------------------------------------------------------------------ devices


def _cuda_device(a: Any) -> int | None:
    """The CUDA device ordinal of a GPU array (CuPy's ``.device``, a DLPack producer's
    kDLCUDA / kDLCUDAManaged device, a ``__cuda_array_interface__`` pointer's device);
    None for anything else (host arrays, pinned host memory, scalars)."""
    t = type(a)
    if t is np.ndarray or a is None or t in (int, float, bool, str):
        return None
    if (t.__module__ or "").startswith("cupy"):
        dev = getattr(a, "device", None)
        return int(dev.id) if hasattr(dev, "id") else None
    dl = getattr(a, "__dlpack_device__", None)
    if dl is not None:
        try:
            kind, index = dl()
        except Exception:
            return None
        return int(index) if int(kind) in (2, 13) else None  # kDLCUDA, kDLCUDAManaged
    cai = getattr(a, "__cuda_array_interface__", None)
    if isinstance(cai, dict) and cai.get("data"):
        ptr = int(cai["data"][0])
        if ptr:
            cupy = importlib.import_module("cupy")
            return int(cupy.cuda.runtime.pointerGetAttributes(ptr).device)
    return None


def call_device(items: Iterable[tuple[str, Any]]) -> int | None:
    """The one CUDA device of the GPU arrays among ``(label, value)`` items (lists,
    tuples and dicts of arrays are looked into, one level); None when there are none.
    Arrays on two devices are a BadParamError naming one of each: a kernel runs on one
    device, and reading another device's memory fails or, with peer access, is slow."""
    device, first = None, ""
    for label, value in items:
        if isinstance(value, (list, tuple)):
            inner: Iterable[tuple[str, Any]] = (
                (f"{label}[{i}]", v) for i, v in enumerate(value)
            )
        elif isinstance(value, dict):
            inner = ((f"{label}[{k!r}]", v) for k, v in value.items())
        else:
            inner = ((label, value),)
        for name, v in inner:
            dev = _cuda_device(v)
            if dev is None:
                continue
            if device is None:
                device, first = dev, name
            elif dev != device:
                raise BadParamError(
                    f"{name}: on GPU {dev}, but {first} is on GPU {device}; the arrays of "
                    f"one call must live on one device (copy with cupy.asarray inside "
                    f"cupy.cuda.Device({device}), or .to('cuda:{device}'))"
                )
    return device


def device_scope(device: int | None) -> Any:
    """A context that makes ``device`` CuPy's current device for a call (its launches,
    allocations, modules and stream), or None when it is current already (or None)."""
    if device is None:
        return None
    cupy = importlib.import_module("cupy")
    if int(cupy.cuda.runtime.getDevice()) == device:
        return None
    return cupy.cuda.Device(device)


_read_forced = raw_reader(("CUDNNLITE_BACKEND",))  # read on every call: runtime.env


def forced_backend() -> str | None:
    (raw,) = _read_forced()
    if raw is None:
        return None
    forced = (os.fsdecode(raw) if isinstance(raw, bytes) else raw).strip().lower()
    return forced or None


def backend_for(*arrays: Any, names: tuple[str, ...] | None = None) -> Backend:
    """The backend for a call on ``arrays`` (None entries are ignored).

    ``names`` label the arrays in error messages. Mixing host and device arrays is
    an error, as in CuPy.
    """
    kinds: dict[str, str] = {}
    for i, a in enumerate(arrays):
        if a is None:
            continue
        label = names[i] if names else f"argument {i}"
        kind = array_kind(a)
        if type(a) is not np.ndarray and kind == "cpu":
            refuse_masked(label, a)
        if kind is None:
            raise BadParamError(
                f"{label}: expected a NumPy or CuPy array (or an object with __dlpack__), "
                f"got {type(a).__name__}"
            )
        kinds[label] = kind
    if len(set(kinds.values())) > 1:
        detail = ", ".join(
            f"{k} is {'a GPU' if v == 'cuda' else 'a host'} array" for k, v in kinds.items()
        )
        raise BadParamError(f"cannot mix host (NumPy) and GPU (CuPy) arrays in one call: {detail}")
    forced = forced_backend()
    if forced:
        return backend_by_name(forced)
    kind = next(iter(kinds.values()), "cpu")
    return backend_by_name(kind)
