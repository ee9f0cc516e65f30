"""Backend choice follows the arrays: CuPy arrays (or anything exposing
``__cuda_array_interface__`` or a CUDA DLPack device) run on the GPU, NumPy arrays
on the emulator. ``CUDNNLITE_BACKEND=cpu|cuda`` forces one."""

from __future__ import annotations

import functools
import os
from typing import Any

import numpy as np

from ..errors import BadParamError
from .backend import Backend

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


def forced_backend() -> str | None:
    forced = os.environ.get("CUDNNLITE_BACKEND", "").strip().lower()
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
