"""Forced-backend transfers (CUDNNLITE_BACKEND): a strided view's whole memory span
is copied, so strides computed from the original stay valid; results come back.
Checked with a stand-in for CuPy whose "device" memory is host memory."""

from __future__ import annotations

import ctypes
import sys
import types
from typing import Any

import numpy as np
import pytest

from cudnnlite.runtime.transfer import DeviceToHost, HostToDevice, _span


class FakeDeviceArray:
    """Just what the transfers read from a CuPy array."""

    def __init__(self, host: np.ndarray) -> None:
        self.host = host
        self.shape, self.strides, self.itemsize = host.shape, host.strides, host.itemsize
        self.data = types.SimpleNamespace(ptr=host.__array_interface__["data"][0])
        self.__cuda_array_interface__ = {}

    def __getitem__(self, key: Any) -> FakeDeviceArray:
        return FakeDeviceArray(self.host[key])


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    cupy = types.ModuleType("cupy")
    cupy.empty = lambda n, dtype: FakeDeviceArray(np.zeros(n, dtype))  # type: ignore[attr-defined]
    runtime = types.SimpleNamespace(
        memcpyAsync=lambda dst, src, n, kind, stream: ctypes.memmove(dst, src, n),
    )
    stream = types.SimpleNamespace(ptr=0, synchronize=lambda: None)
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        runtime=runtime, get_current_stream=lambda: stream
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)


def test_span_of_strided_views() -> None:
    base = np.zeros((6, 8), np.float32)
    ptr = base.__array_interface__["data"][0]
    assert _span(ptr, base.shape, base.strides, 4) == (ptr, ptr + base.nbytes)
    view = base[::-2, 1::3]  # rows 5, 3, 1; columns 1, 4, 7 (negative row stride)
    vptr = view.__array_interface__["data"][0]
    lo, hi = _span(vptr, view.shape, view.strides, 4)
    assert lo == ptr + (1 * 8 + 1) * 4 and hi == ptr + (5 * 8 + 7) * 4 + 4
    assert _span(ptr, (0, 3), (12, 4), 4) == (ptr, ptr)


def test_device_view_runs_on_a_host_copy_and_comes_back(fake_cupy: None) -> None:
    backing = np.arange(48, dtype=np.float32).reshape(6, 8)
    device = FakeDeviceArray(backing[::-2, 1::3])
    copy = DeviceToHost(device)
    # Write through the host pointer with the device view's own strides.
    for i in range(device.shape[0]):
        for j in range(device.shape[1]):
            addr = copy.pointer() + i * device.strides[0] + j * device.strides[1]
            ctypes.c_float.from_address(addr).value = -1.0
    assert np.all(backing[::-2, 1::3] != -1.0)  # nothing written before copy_back
    copy.copy_back()
    assert np.all(backing[::-2, 1::3] == -1.0)
    untouched = backing.copy()
    untouched[::-2, 1::3] = 0
    assert np.count_nonzero(untouched == -1.0) == 0


def test_host_view_runs_on_a_device_copy_and_comes_back(fake_cupy: None) -> None:
    host = np.arange(20, dtype=np.float32)
    view = host[3:15:2]
    copy = HostToDevice(view)
    ptr = copy.view.data.ptr
    ctypes.c_float.from_address(ptr).value = 99.0  # the view starts at the first element
    copy.copy_back()
    assert host[3] == 99.0 and host[2] == 2.0
