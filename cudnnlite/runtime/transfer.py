"""Runs a kernel on arrays of the other kind when ``CUDNNLITE_BACKEND`` forces a
backend: a CuPy array given to the emulator, or a NumPy array given to the GPU.

The kernel receives a pointer into a copy of the view's whole memory span, so the
strides the caller computed from the original view stay valid; after the launch
the span is copied back. Slow, and meant for debugging (e.g. replaying a GPU call
on the emulator).
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np


def _span(
    ptr: int, shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int
) -> tuple[int, int]:
    """[lo, hi) byte addresses covered by a strided view starting at ``ptr``."""
    lo = hi = ptr
    if any(s == 0 for s in shape):
        return ptr, ptr
    for size, stride in zip(shape, strides, strict=False):
        extent = (size - 1) * stride
        if extent < 0:
            lo += extent
        else:
            hi += extent
    return lo, hi + itemsize


class DeviceToHost:
    """A host copy of a GPU array's span, for an emulator launch."""

    def __init__(self, arr: Any) -> None:
        cupy = importlib.import_module("cupy")
        self.cupy = cupy
        self.lo, hi = _span(int(arr.data.ptr), arr.shape, arr.strides, arr.itemsize)
        self.offset = int(arr.data.ptr) - self.lo
        self.host = np.empty(max(1, hi - self.lo), np.uint8)
        self.nbytes = hi - self.lo
        if self.nbytes:
            cupy.cuda.runtime.memcpy(self.host.ctypes.data, self.lo, self.nbytes, 2)  # D2H

    def pointer(self) -> int:
        return self.host.ctypes.data + self.offset

    def copy_back(self) -> None:
        if self.nbytes:
            self.cupy.cuda.runtime.memcpy(self.lo, self.host.ctypes.data, self.nbytes, 1)  # H2D


class HostToDevice:
    """A GPU copy of a NumPy array's span, for a CUDA launch."""

    def __init__(self, arr: np.ndarray) -> None:
        cupy = importlib.import_module("cupy")
        self.cupy = cupy
        ptr = arr.__array_interface__["data"][0]
        self.lo, hi = _span(ptr, arr.shape, arr.strides, arr.itemsize)
        self.nbytes = hi - self.lo
        self.device = cupy.empty(max(1, self.nbytes), np.uint8)
        if self.nbytes:
            cupy.cuda.runtime.memcpy(int(self.device.data.ptr), self.lo, self.nbytes, 1)  # H2D
        self.writeable = arr.flags.writeable
        # A uint8 view starting at the original first element: CuPy passes its pointer.
        self.view = self.device[ptr - self.lo :]

    def copy_back(self) -> None:
        self.cupy.cuda.runtime.deviceSynchronize()
        if self.nbytes and self.writeable:
            self.cupy.cuda.runtime.memcpy(self.lo, int(self.device.data.ptr), self.nbytes, 2)  # D2H
