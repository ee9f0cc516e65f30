"""``runtime.pointers``: the cheap data-pointer read agrees with NumPy's own answer on
every kind of array the library meets (views, offsets, transposes, empty, subclasses,
unaligned, read-only), and ``data_pointer`` reads CuPy-style arrays by ``.data.ptr``."""

from __future__ import annotations

import types

import numpy as np
import pytest

from cudnnlite.runtime import pointers


def _arrays() -> list[np.ndarray]:
    base = np.arange(60, dtype=np.float32).reshape(3, 4, 5)
    raw = np.zeros(33, np.uint8)
    unaligned = raw[1:].view(np.float32)  # 4-byte items at an odd address
    readonly = base.copy()
    readonly.flags.writeable = False
    return [base, base[1:, ::2, 3:], base.T, base[..., ::-1], np.empty(0), np.empty((0, 3)),
            np.float64(2.5) * np.ones(1), unaligned, readonly,
            np.ma.masked_array([1.0, 2.0]).data, base.view(np.recarray)]  # fmt: skip


@pytest.mark.parametrize("index", range(len(_arrays())))
def test_host_pointer_is_numpys_data_pointer(index: int) -> None:
    a = _arrays()[index]
    assert pointers.host_pointer(a) == a.__array_interface__["data"][0] == a.ctypes.data


def test_the_fast_read_is_in_use_on_cpython() -> None:
    import platform

    if platform.python_implementation() == "CPython":
        assert pointers.host_pointer is not pointers._interface_pointer


def test_data_pointer_of_a_gpu_style_array() -> None:
    fake = types.SimpleNamespace(data=types.SimpleNamespace(ptr=0x7F0000001000))
    assert pointers.data_pointer(fake) == 0x7F0000001000
    a = np.ones(4)
    assert pointers.data_pointer(a) == a.ctypes.data
