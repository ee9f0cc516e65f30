"""A stand-in for a CuPy array, for the tests of the CUDA paths that run without a GPU
(launch templates' argument patching)."""

from __future__ import annotations

import types
from typing import Any

import numpy as np


class FakeDeviceArray:
    """Stands in for a CuPy array: a shape, strides, dtype and a made-up device address."""

    __cuda_array_interface__: dict = {}
    _next = 1 << 40

    def __init__(self, shape: tuple[int, ...], dtype: Any, ptr: int | None = None) -> None:
        probe = np.empty(shape, dtype)
        self.shape, self.strides, self.dtype = probe.shape, probe.strides, probe.dtype
        self.itemsize, self.size, self.ndim = probe.itemsize, probe.size, probe.ndim
        self.nbytes, self.base = probe.nbytes, None
        if ptr is None:
            ptr = FakeDeviceArray._next
            FakeDeviceArray._next += (probe.nbytes + 511) // 256 * 256
        self.data = types.SimpleNamespace(ptr=ptr, device_id=0)
        self.device = types.SimpleNamespace(id=0)
        self.flags = types.SimpleNamespace(c_contiguous=True)

    def copy(self) -> FakeDeviceArray:
        """A new array like this one (there are no contents to copy)."""
        return FakeDeviceArray(self.shape, self.dtype)
