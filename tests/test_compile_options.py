"""The NVRTC check compiles with exactly the options the CUDA backend runs with.

Both take ``compile_options.runtime_options``: our base (language, include folder, headers'
digest, defines), the CUDA headers' folders, ``-arch=sm_XX``, ``-ftz=false`` (float32
subnormals kept, PyTorch's semantics) and ``--device-as-default-execution-space``. The
backend no longer goes through ``cupy.RawModule``, which appends ``-ftz=true`` (read from
CuPy's source, see ``cudnnlite/runtime/compile_options.py``).
"""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import pytest

from cudnnlite.runtime import compile_options, cubin_cache, cuda, nvrtc_check
from cudnnlite.runtime.cuda import CudaBackend
from cudnnlite.runtime.kernel import ModuleSpec

SPEC = ModuleSpec.make("selftest/emulator_selftest.cu", ["block_reduce_sum"], {"TILE": 4})


class RecordingModule:
    """Stands in for cupy.cuda.function.Module."""

    def load(self, cubin: bytes) -> None:
        self.cubin = cubin

    def get_function(self, symbol: str) -> Any:
        return types.SimpleNamespace(ptr=1, symbol=symbol)


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> list[tuple[str, ...]]:
    """A CuPy stand-in on an sm_90 device; returns the options each compile was given
    (the compile itself is stubbed: the test is about what NVRTC is asked)."""
    cupy = types.ModuleType("cupy")
    device = types.SimpleNamespace(id=0, compute_capability="90")
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Device=lambda: device,
        function=types.SimpleNamespace(Module=RecordingModule),
        driver=types.SimpleNamespace(),
        runtime=types.SimpleNamespace(runtimeGetVersion=lambda: 13000),
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    monkeypatch.setenv("CUDNNLITE_CACHE_DIR", str(tmp_path))
    seen: list[tuple[str, ...]] = []

    def compile_(self: Any, text: str, program: str, names: Any, arch: str, options: Any,
                 defines: Any) -> cubin_cache.CompiledModule:  # fmt: skip
        seen.append(tuple(options))
        return cubin_cache.CompiledModule(b"\x7fELF", {n: n for n in names})

    from cudnnlite.runtime import cuda_toolkit

    lib = cuda_toolkit.NvrtcLibrary(Path("/x/libnvrtc.so.13"), (13, 5), "test")
    monkeypatch.setattr(cuda_toolkit, "find_nvrtc", lambda: lib)
    monkeypatch.setattr(cuda_toolkit, "find_cuda_include_dirs", lambda: [Path("/opt/cuda/inc")])
    monkeypatch.setattr(cuda.NvrtcCompiler, "compile", compile_)
    return seen


def test_backend_compiles_with_the_runtime_options(fake_cupy: list[tuple[str, ...]]) -> None:
    CudaBackend().module(SPEC)
    assert fake_cupy == [
        compile_options.runtime_options("sm_90", SPEC.define_options(), ["/opt/cuda/inc"])
    ]
    assert "-ftz=true" not in fake_cupy[0]


@pytest.mark.parametrize("arch", ["sm_75", "sm_80", "sm_90"])
def test_nvrtc_check_uses_the_runtime_options(arch: str) -> None:
    defines = SPEC.define_options()
    include = [Path("/opt/cuda/include")]
    options = nvrtc_check.nvrtc_options(arch, defines, include)
    assert options == list(compile_options.runtime_options(arch, defines, include))
    threads = {"sm_75": 1024, "sm_80": 2048, "sm_90": 2048}[arch]  # resident per SM
    assert options == [
        *compile_options.base_options(defines),
        f"-DCUDNNLITE_SM_THREADS={threads}",
        "-I/opt/cuda/include",
        f"-arch={arch}a" if arch == "sm_90" else f"-arch={arch}",  # (wgmma: sm_90a)
        "-ftz=false",  # subnormals kept: what CuPy's RawModule would have flipped
        "--device-as-default-execution-space",
    ]


def test_runtime_options_differ_from_cupys_only_in_subnormals() -> None:
    # CuPy 13.x and 14.x: _compile_with_cache_cuda adds -ftz=true, then
    # _compile_using_nvrtc_no_warning adds -arch=sm_XX and --device-as-default-execution-space.
    assert compile_options.cupy_added_options("sm_90") == (
        "-ftz=true",
        "-arch=sm_90",
        "--device-as-default-execution-space",
    )
    ours = compile_options.codegen_options("sm_90")
    theirs = compile_options.cupy_added_options("sm_90")
    # ... and in the target: sm_90a, the arch-specific one (wgmma), for an sm_90 device.
    assert set(ours) ^ set(theirs) == {"-ftz=true", "-ftz=false", "-arch=sm_90", "-arch=sm_90a"}
    assert compile_options.codegen_options("sm_80")[0] == "-arch=sm_80"
    # Our base names a -std, so the language is ours whichever NVRTC compiles.
    assert any(o.startswith("-std=") for o in compile_options.base_options())
    assert not any("ftz" in o or "fast" in o for o in compile_options.base_options())


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
    assert "-ftz=false" in res.options and "-ftz=true" not in res.options
