"""Backend choice follows the arrays; mixing host and device arrays is an error."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

from cudnnlite.errors import BadParamError
from cudnnlite.runtime.select import array_kind, backend_by_name, backend_for


class FakeCudaArray:
    """Anything exposing __cuda_array_interface__ counts as a GPU array."""

    __cuda_array_interface__ = {"shape": (2,), "typestr": "<f4", "data": (0, False), "version": 3}


class FakeDLPack:
    def __init__(self, device_type: int) -> None:
        self.device_type = device_type

    def __dlpack__(self, stream: Any = None) -> None:  # never called by the selection
        raise AssertionError

    def __dlpack_device__(self) -> tuple[int, int]:
        return (self.device_type, 0)


def test_array_kinds() -> None:
    assert array_kind(np.zeros(2)) == "cpu"
    assert array_kind(FakeCudaArray()) == "cuda"
    assert array_kind(FakeDLPack(1)) == "cpu"  # kDLCPU
    assert array_kind(FakeDLPack(2)) == "cuda"  # kDLCUDA
    assert array_kind(FakeDLPack(13)) == "cuda"  # kDLCUDAManaged
    assert array_kind(FakeDLPack(14)) is None  # kDLOneAPI: not ours
    assert array_kind([1.0]) is None


def test_numpy_arrays_run_on_the_emulator() -> None:
    backend = backend_for(np.zeros(3), None, np.ones(2))
    assert backend.name == "cpu" and backend is backend_by_name("cpu")


def test_mixing_host_and_device_arrays_is_an_error() -> None:
    with pytest.raises(BadParamError, match="cannot mix") as info:
        backend_for(np.zeros(3), FakeCudaArray(), names=("x", "w"))
    assert "x is a host array" in str(info.value) and "w is a GPU array" in str(info.value)


def test_non_arrays_are_refused_by_name() -> None:
    with pytest.raises(BadParamError, match="bias: expected a NumPy or CuPy array"):
        backend_for(np.zeros(3), [1, 2], names=("x", "bias"))


def test_environment_forces_a_backend(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDNNLITE_BACKEND", "emulator")
    assert backend_for(np.zeros(1)).name == "cpu"
    monkeypatch.setenv("CUDNNLITE_BACKEND", "tpu")
    with pytest.raises(BadParamError, match="unknown backend 'tpu'"):
        backend_for(np.zeros(1))


def _prints_ok(code: str) -> None:
    """Runs ``code`` in a fresh interpreter, which must succeed and print ``ok``."""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


def test_import_touches_no_gpu_and_compiles_nothing() -> None:
    code = (
        "import sys, cudnnlite\n"
        "assert 'cupy' not in sys.modules, 'cupy imported at import time'\n"
        "from cudnnlite.runtime.select import backend_by_name\n"
        "assert backend_by_name.cache_info().currsize == 0\n"
        "print('ok')\n"
    )
    _prints_ok(code)


def test_import_and_the_tuning_dbs_need_no_filelock_or_tqdm() -> None:
    """The lent GPU box has CuPy, PyTorch, NumPy, PyYAML and pytest, nothing else installed
    (benchmarks/device_check.sh; PyTorch brings filelock, which builds take): importing
    cudnnlite and reading the tuning DBs must not need filelock or tqdm."""
    code = (
        "import sys\n"
        "sys.modules['filelock'] = sys.modules['tqdm'] = None  # import raises ImportError\n"
        "import cudnnlite\n"
        "from cudnnlite.dispatch.tuning_db import database\n"
        "from cudnnlite.precompile import DTYPES, precompile\n"
        "database('sm_90').keys()\n"
        "print('ok')\n"
    )
    _prints_ok(code)


def test_a_quiet_precompile_needs_no_tqdm(monkeypatch: pytest.MonkeyPatch) -> None:
    from cudnnlite import precompile as pc

    built = []

    class Backend:  # builds nothing, notes what it is asked to build
        name = "cpu"

        def compile_units(self, spec: object) -> list:
            return [spec]

        def module(self, spec: object) -> None:
            built.append(spec)

    monkeypatch.setitem(sys.modules, "tqdm", None)  # `import tqdm` raises ImportError
    monkeypatch.setattr(pc, "_backend", lambda backend, arch: Backend())
    report = pc.precompile(["dropout"], dtypes_=pc.DTYPES, progress=False)
    assert report.ok and len(built) == len(report.built) > 0
    with pytest.raises(ImportError):
        pc.precompile(["dropout"], dtypes_=pc.DTYPES, progress=True)
