"""The ``lib`` fixture of the emulator types tests: types_harness.cpp compiled with g++
into a shared library (the build itself checks the static_asserts: vector-type layout,
triviality of the 16-bit types, CUDA's min/max overload resolution), loaded through ctypes.
Built once per session for all the test_emu_* files that use it (two builds in all)."""

from __future__ import annotations

import ctypes
import shutil
import subprocess

import pytest
from emu_types_support import FLAGS, HARNESS, INCLUDE, INT_FUNCS, SIGNATURES


# The emulator builds with -march=native (hardware F16C conversions, FMA) unless
# CUDNNLITE_EMU_PORTABLE=1: both builds of the header must give CUDA's results.
@pytest.fixture(scope="session", params=["portable", "native"])
def lib(tmp_path_factory, request):
    if shutil.which("g++") is None:
        pytest.skip("g++ is not available")
    out = tmp_path_factory.mktemp("emu_types") / "types_harness.so"
    arch = ["-march=native"] if request.param == "native" else []
    cmd = [
        "g++",
        *FLAGS,
        *arch,
        "-shared",
        "-pthread",
        "-I",
        str(INCLUDE),
        str(HARNESS),
        "-o",
        str(out),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    # Kernels include this header in every emulator build: it must not add warnings.
    assert "emu_types.h" not in res.stderr, res.stderr
    so = ctypes.CDLL(str(out))
    for name, args in SIGNATURES.items():
        fn = getattr(so, name)
        fn.argtypes, fn.restype = args, None
    for name in INT_FUNCS:
        fn = getattr(so, name)
        fn.argtypes, fn.restype = [], ctypes.c_int
    return so
