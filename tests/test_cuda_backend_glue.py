"""The CUDA backend's glue code (options, name expressions, launch arguments, error
mapping), checked against a stand-in for CuPy so it runs without a GPU. The real
thing runs in the device check, where every kernel test uses the cuda backend."""

from __future__ import annotations

import sys
import types
from typing import Any

import numpy as np
import pytest

from cudnnlite.errors import BadParamError, CompileError, ExecutionError
from cudnnlite.runtime.cuda import CudaBackend
from cudnnlite.runtime.kernel import ModuleSpec
from cudnnlite.runtime.sources import cuda_src_dir


class CompileException(Exception):
    """Same name as CuPy's, which is how the backend recognizes it."""


class CUDADriverError(Exception):
    pass


class FakeFunction:
    def __init__(self, name: str) -> None:
        self.name = name
        self.calls: list[tuple[Any, ...]] = []
        self.max_dynamic_shared_size_bytes = 0
        self.fail = False

    def __call__(self, grid: Any, block: Any, args: Any, shared_mem: int = 0) -> None:
        if self.fail:
            raise CUDADriverError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access")
        self.calls.append((grid, block, args, shared_mem))


class FakeRawModule:
    created: list[FakeRawModule] = []

    def __init__(self, code: str, options: tuple[str, ...], name_expressions: list[str]) -> None:
        self.code, self.options, self.names = code, options, name_expressions
        FakeRawModule.created.append(self)
        if "#error" in code or (
            "cuda_fp16.h" in code and not any("fakeinclude" in o for o in options)
        ):
            msg = 'catastrophic error: cannot open source file "cuda_fp16.h"'
            if "#error" in code:
                msg = "error: planted"
            raise CompileException(msg)
        self.functions = {n: FakeFunction(n) for n in name_expressions}

    def get_function(self, name: str) -> FakeFunction:
        return self.functions[name]


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> types.ModuleType:
    cupy = types.ModuleType("cupy")
    cupy.RawModule = FakeRawModule  # type: ignore[attr-defined]
    device = types.SimpleNamespace(
        id=0, compute_capability="90", attributes={"MultiProcessorCount": 132}
    )
    stream = types.SimpleNamespace(synchronize=lambda: None)
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Device=lambda: device,
        get_current_stream=lambda: stream,
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1),
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    FakeRawModule.created.clear()
    return cupy


SPEC = ModuleSpec.make(
    "selftest/emulator_selftest.cu", ["block_reduce_sum", "trap_if"], {"TILE": 4}
)


def test_module_options_and_name_expressions(fake_cupy: types.ModuleType) -> None:
    backend = CudaBackend()
    assert backend.arch() == "sm_90" and backend.device_key() == "cuda:0"
    module = backend.module(SPEC)
    assert backend.module(SPEC) is module  # memoized per device
    raw = FakeRawModule.created[-1]
    assert raw.names == ["block_reduce_sum", "trap_if"]
    assert f"-I{cuda_src_dir()}" in raw.options
    assert "-DTILE=4" in raw.options
    assert any(o.startswith("-DCUDNNLITE_HEADERS=") for o in raw.options)


def test_launch_normalizes_dims_and_opts_into_large_shared_memory(
    fake_cupy: types.ModuleType,
) -> None:
    kernel = CudaBackend().module(SPEC).get_function("trap_if")
    kernel(4, (32, 2), (np.int32(0),))
    kernel(1, 32, (np.int32(0),), shared_mem=100 * 1024)
    fn = kernel.function
    assert fn.calls[0][:2] == ((4, 1, 1), (32, 2, 1))
    assert fn.calls[1][3] == 100 * 1024 and fn.max_dynamic_shared_size_bytes == 100 * 1024
    with pytest.raises(BadParamError, match="block"):
        kernel(1, 2048, (np.int32(0),))


def test_structs_go_to_cupy_as_size_one_arrays(fake_cupy: types.ModuleType) -> None:
    # CuPy passes a struct by value only as a size-1 ndarray; a numpy.void is refused.
    kernel = CudaBackend().module(SPEC).get_function("trap_if")
    struct = np.zeros((), np.dtype([("a", "<i4"), ("b", "<f4")], align=True))[()]
    kernel(1, 1, (struct, np.int32(0)))
    passed = kernel.function.calls[-1][2]
    assert isinstance(passed[0], np.ndarray) and passed[0].size == 1
    assert passed[0].dtype == struct.dtype and isinstance(passed[1], np.int32)


def test_multiprocessor_count_is_cached(fake_cupy: types.ModuleType) -> None:
    backend = CudaBackend()
    assert backend.multiprocessor_count() == 132
    fake_cupy.cuda.Device().attributes["MultiProcessorCount"] = 1  # a second query would see it
    assert backend.multiprocessor_count() == 132


def test_driver_errors_become_execution_errors(fake_cupy: types.ModuleType) -> None:
    kernel = CudaBackend().module(SPEC).get_function("trap_if")
    kernel.function.fail = True
    with pytest.raises(ExecutionError, match="illegal memory access"):
        kernel(1, 1, (np.int32(0),))


def test_compile_errors_name_the_source_and_defines(
    fake_cupy: types.ModuleType, tmp_path: Any
) -> None:
    src = tmp_path / "bad.cu"
    src.write_text("#error planted\n")
    spec = ModuleSpec.make(str(src), ["k"], {"VEC": 4})
    with pytest.raises(CompileError) as info:
        CudaBackend().module(spec)
    assert "bad.cu" in str(info.value) and "VEC" in str(info.value) and "planted" in str(info.value)


def test_missing_fp16_headers_retry_with_the_toolkit_include_dirs(
    fake_cupy: types.ModuleType, tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudnnlite.runtime import cuda_toolkit

    src = tmp_path / "half.cu"
    src.write_text("#include <cuda_fp16.h>\n")
    monkeypatch.setattr(cuda_toolkit, "find_cuda_include_dirs", lambda: [tmp_path / "fakeinclude"])
    module = CudaBackend().module(ModuleSpec.make(str(src), ["k"]))
    assert module.get_function("k").name == "k"
    assert any("fakeinclude" in o for o in FakeRawModule.created[-1].options)
