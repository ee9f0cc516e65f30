"""The NVRTC check compiles with exactly the options the CUDA backend runs with.

The CUDA backend gives ``compile_options.base_options`` to ``cupy.RawModule``; CuPy appends
``-ftz=true``, ``-arch=sm_XX`` and ``--device-as-default-execution-space`` (read from CuPy's
source, see ``cudnnlite/runtime/compile_options.py``). The NVRTC check must use that base
plus those additions and nothing else that changes code generation, or the registers,
spills and SASS it reports are not those of the code that runs.
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from cudnnlite.runtime import compile_options, nvrtc_check
from cudnnlite.runtime.cuda import CudaBackend
from cudnnlite.runtime.kernel import ModuleSpec

SPEC = ModuleSpec.make("selftest/emulator_selftest.cu", ["block_reduce_sum"], {"TILE": 4})


class RecordingRawModule:
    """Stands in for cupy.RawModule and records the options it is given."""

    options: tuple[str, ...] = ()

    def __init__(self, code: str, options: tuple[str, ...], name_expressions: list[str]) -> None:
        RecordingRawModule.options = options
        self.names = name_expressions

    def get_function(self, name: str) -> Any:
        return object()


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    cupy = types.ModuleType("cupy")
    cupy.RawModule = RecordingRawModule  # type: ignore[attr-defined]
    device = types.SimpleNamespace(id=0, compute_capability="90")
    cupy.cuda = types.SimpleNamespace(Device=lambda: device)  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "cupy", cupy)


def test_backend_passes_base_options_to_cupy(fake_cupy: None) -> None:
    CudaBackend().module(SPEC)
    assert RecordingRawModule.options == compile_options.base_options(SPEC.define_options())


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_nvrtc_check_is_base_plus_cupy_additions(arch: str) -> None:
    defines = SPEC.define_options()
    include = [Path("/opt/cuda/include")]
    options = nvrtc_check.nvrtc_options(arch, defines, include)
    assert options == [
        *compile_options.base_options(defines),
        "-I/opt/cuda/include",  # CuPy adds the CUDA headers' folder too (its own lookup)
        *compile_options.cupy_added_options(arch),
    ]


def test_cupy_additions_are_pinned() -> None:
    # CuPy 13.x and 14.x: _compile_with_cache_cuda adds -ftz=true, then
    # _compile_using_nvrtc_no_warning adds -arch=sm_XX and --device-as-default-execution-space.
    assert compile_options.cupy_added_options("sm_90") == (
        "-ftz=true",
        "-arch=sm_90",
        "--device-as-default-execution-space",
    )
    # Our base names a -std, so CuPy adds none of its own.
    assert any(o.startswith("-std=") for o in compile_options.base_options())


def test_compile_result_records_runtime_options() -> None:
    from cudnnlite.errors import NotSupportedError
    from cudnnlite.runtime import cuda_toolkit

    try:
        cuda_toolkit.find_nvrtc()
        dirs = cuda_toolkit.find_cuda_include_dirs()
    except NotSupportedError as exc:
        pytest.skip(f"NVRTC not available: {exc}")
    res = nvrtc_check.compile_to_cubin(SPEC, "sm_90")
    assert list(res.options) == nvrtc_check.nvrtc_options("sm_90", SPEC.define_options(), dirs)
    assert "-ftz=true" in res.options
