"""Runs a kernel on arrays of the other kind when ``CUDNNLITE_BACKEND`` forces a
backend: a CuPy array given to the emulator, or a NumPy array given to the GPU.

The kernel receives a pointer into a copy of the view's whole memory span, so the
strides the caller computed from the original view stay valid; after the launch
the span is copied back. Slow, and meant for debugging (e.g. replaying a GPU call
on the emulator).

Every copy runs on CuPy's current stream, the stream the call launches on, and is
ordered with it: an upload is queued before the kernel that reads it (a plain
``cudaMemcpy`` goes to the legacy default stream, which a non-blocking stream or
per-thread default stream does not wait for, and from pageable memory it may return
before the data reached the device); a download waits for the work queued before it
and completes before the host reads the copy.
"""

from __future__ import annotations

import importlib
from typing import Any

import numpy as np

from .pointers import host_pointer


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


_H2D, _D2H = 1, 2  # cudaMemcpyKind


def _copy(cupy: Any, dst: int, src: int, nbytes: int, kind: int) -> None:
    """``nbytes`` from ``src`` to ``dst`` on CuPy's current stream, complete on return."""
    stream = cupy.cuda.get_current_stream()
    cupy.cuda.runtime.memcpyAsync(dst, src, nbytes, kind, stream.ptr)
    stream.synchronize()


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
            # after the work already queued on the stream (the array's producer)
            _copy(cupy, self.host.ctypes.data, self.lo, self.nbytes, _D2H)

    def pointer(self) -> int:
        return self.host.ctypes.data + self.offset

    def copy_back(self) -> None:
        if self.nbytes:
            _copy(self.cupy, self.lo, self.host.ctypes.data, self.nbytes, _H2D)


class HostToDevice:
    """A GPU copy of a NumPy array's span, for a CUDA launch."""

    def __init__(self, arr: np.ndarray) -> None:
        cupy = importlib.import_module("cupy")
        self.cupy = cupy
        ptr = host_pointer(arr)
        self.lo, hi = _span(ptr, arr.shape, arr.strides, arr.itemsize)
        self.nbytes = hi - self.lo
        self.device = cupy.empty(max(1, self.nbytes), np.uint8)
        if self.nbytes:
            # on the launch stream, before the kernel: whatever stream that is, the
            # kernel reads the whole upload
            _copy(cupy, int(self.device.data.ptr), self.lo, self.nbytes, _H2D)
        self.writeable = arr.flags.writeable
        # A uint8 view starting at the original first element: CuPy passes its pointer.
        self.view = self.device[ptr - self.lo :]

    def copy_back(self) -> None:
        if self.nbytes and self.writeable:
            # queued after the kernel on its stream; the host reads it once complete
            _copy(self.cupy, self.lo, int(self.device.data.ptr), self.nbytes, _D2H)
