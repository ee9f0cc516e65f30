"""The CUDA backend's glue code (NVRTC options, the CUBIN cache, lowered-name resolution,
launch arguments, error mapping), checked against a stand-in for CuPy (and, where NVRTC is
installed, real compiles that are not loaded) so it runs without a GPU. The real
thing runs in the device check, where every kernel test uses the cuda backend."""

from __future__ import annotations

import sys
import types
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_device import FakeDeviceArray

from cudnnlite.errors import BadParamError, CompileError, ExecutionError, NotSupportedError
from cudnnlite.runtime import compile_options, cubin_cache, cuda, graph, template_record
from cudnnlite.runtime.cuda import CudaBackend
from cudnnlite.runtime.kernel import ModuleSpec
from cudnnlite.runtime.sources import cuda_src_dir


class CUDADriverError(Exception):
    """Same name as CuPy's, which is how the backend recognizes it."""


class FakeFunction:
    """Stands in for cupy.cuda.function.Function."""

    def __init__(self, symbol: str) -> None:
        self.symbol = symbol
        self.ptr = hash(symbol) & 0xFFFF
        self.calls: list[tuple[Any, ...]] = []
        self.fail = False

    def __call__(
        self,
        grid: Any,
        block: Any,
        args: Any,
        shared_mem: int = 0,
        stream: Any = None,
        enable_cooperative_groups: bool = False,
    ) -> None:
        if self.fail:
            raise CUDADriverError("CUDA_ERROR_ILLEGAL_ADDRESS: an illegal memory access")
        self.calls.append((grid, block, args, shared_mem))


class FakeModule:
    """Stands in for cupy.cuda.function.Module: loads a CUBIN, finds kernels by symbol."""

    loaded: list[FakeModule] = []

    def __init__(self) -> None:
        self.cubin = b""
        FakeModule.loaded.append(self)

    def load(self, cubin: bytes) -> None:
        if not cubin.startswith(b"\x7fELF"):
            raise CUDADriverError("CUDA_ERROR_INVALID_IMAGE: device kernel image is invalid")
        self.cubin = cubin

    def get_function(self, symbol: str) -> FakeFunction:
        return FakeFunction(symbol)


class FakeDriver:
    CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES = 8

    def __init__(self) -> None:
        self.attributes: dict[tuple[int, int], int] = {}

    def funcSetAttribute(self, func: int, attr: int, value: int) -> None:  # noqa: N802
        self.attributes[(func, attr)] = value

    def funcGetAttribute(self, attr: int, func: int) -> int:  # noqa: N802
        return self.attributes.get((func, attr), 0)


def mangle(name: str) -> str:
    """A stand-in lowered name: templates get a symbol unlike their expression."""
    return "_Z_" + "".join(c if c.isalnum() else "_" for c in name) if "<" in name else name


class Compiles:
    """Stands in for NvrtcCompiler.compile (an instance: not bound to the compiler); records
    the options of each compile and fails on ``#error``."""

    def __init__(self) -> None:
        self.options: list[tuple[str, ...]] = []

    def __call__(self, text: str, program: str, names: Any, arch: str,
                 options: Any, defines: Any) -> cubin_cache.CompiledModule:  # fmt: skip
        self.options.append(tuple(options))
        if "#error" in text:
            raise CompileError(f"{program}(1): error: planted")
        return cubin_cache.CompiledModule(b"\x7fELF" + arch.encode(), {n: mangle(n) for n in names})


@pytest.fixture
def compiles(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Compiles:
    """Our NVRTC 13.5 with headers in /opt/cuda/inc, its compile stubbed; the CUBIN cache
    in a fresh folder."""
    from cudnnlite.runtime import cuda_toolkit

    lib = cuda_toolkit.NvrtcLibrary(Path("/x/libnvrtc.so.13"), (13, 5), "test")
    monkeypatch.setattr(cuda_toolkit, "find_nvrtc", lambda: lib)
    monkeypatch.setattr(cuda_toolkit, "find_cuda_include_dirs", lambda: [Path("/opt/cuda/inc")])
    monkeypatch.setenv("CUDNNLITE_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv(cubin_cache.ENV_DISABLE, raising=False)
    record = Compiles()
    monkeypatch.setattr(cuda.NvrtcCompiler, "compile", record)
    return record


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch, compiles: Compiles) -> types.ModuleType:
    cupy = types.ModuleType("cupy")
    device = types.SimpleNamespace(
        id=0, compute_capability="90", attributes={"MultiProcessorCount": 132}
    )
    stream = types.SimpleNamespace(synchronize=lambda: None)
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Device=lambda: device,
        get_current_stream=lambda: stream,
        function=types.SimpleNamespace(Module=FakeModule),
        driver=FakeDriver(),
        runtime=types.SimpleNamespace(getDeviceCount=lambda: 1, runtimeGetVersion=lambda: 13000),
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    FakeModule.loaded.clear()
    return cupy


SPEC = ModuleSpec.make(
    "selftest/emulator_selftest.cu", ["block_reduce_sum", "trap_if"], {"TILE": 4}
)
TEMPLATED = ModuleSpec.make(
    "selftest/nvrtc_probe.cu", ["probe_kernel<float>", "probe_plain"], {"PROBE_SCALE": 3}
)


def test_module_options_and_name_expressions(
    fake_cupy: types.ModuleType, compiles: Compiles
) -> None:
    backend = CudaBackend()
    assert backend.arch() == "sm_90" and backend.device_key() == "cuda:0"
    module = backend.module(SPEC)
    assert backend.module(SPEC) is module  # memoized per device
    (options,) = compiles.options
    assert options == compile_options.runtime_options(
        "sm_90", SPEC.define_options(), ["/opt/cuda/inc"]
    )
    assert f"-I{cuda_src_dir()}" in options and "-DTILE=4" in options
    assert "-arch=sm_90a" in options and "-ftz=false" in options and "-ftz=true" not in options
    assert any(o.startswith("-DCUDNNLITE_HEADERS=") for o in options)
    assert FakeModule.loaded[-1].cubin == b"\x7fELFsm_90"


def test_kernels_are_found_by_their_lowered_names(fake_cupy: types.ModuleType) -> None:
    module = CudaBackend().module(TEMPLATED)
    kernel = module.get_function("probe_kernel<float>")
    assert kernel.function.symbol == "_Z_probe_kernel_float_"
    assert kernel.function.kernel.symbol == "_Z_probe_kernel_float_"  # what Module was asked
    assert module.get_function("probe_plain").function.kernel.symbol == "probe_plain"
    with pytest.raises(BadParamError, match="probe_kernel<double>"):
        module.get_function("probe_kernel<double>")


def test_a_second_process_loads_the_cubin_instead_of_compiling(
    fake_cupy: types.ModuleType, compiles: Compiles
) -> None:
    CudaBackend().module(TEMPLATED)
    assert len(compiles.options) == 1
    # A new backend has an empty in-process memo: what a second process sees.
    again = CudaBackend().module(TEMPLATED)
    assert len(compiles.options) == 1
    assert again.get_function("probe_kernel<float>").function.symbol == "_Z_probe_kernel_float_"
    # Another define is another module; so is another NVRTC version.
    CudaBackend().module(ModuleSpec.make(TEMPLATED.source, TEMPLATED.names, {"PROBE_SCALE": 4}))
    assert len(compiles.options) == 2
    from cudnnlite.runtime import cuda_toolkit

    newer = cuda_toolkit.NvrtcLibrary(Path("/x/libnvrtc.so.13"), (13, 6), "test")
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(cuda_toolkit, "find_nvrtc", lambda: newer)
        CudaBackend().module(TEMPLATED)
    assert len(compiles.options) == 3


def test_cubin_cache_keys_on_everything_that_decides_the_code() -> None:
    base = ("src", ["k<float>"], ["-arch=sm_90", "-DX=1"], (13, 5), "sm_90")
    key = cubin_cache.cache_key(*base)
    assert key == cubin_cache.cache_key(*base)
    for i, other in enumerate(["src2", ["k<double>"], ["-arch=sm_90", "-DX=2"], (13, 6), "sm_80"]):
        changed = list(base)
        changed[i] = other
        assert cubin_cache.cache_key(*changed) != key, i


def test_corrupt_or_partial_cache_entries_are_compiled_again(
    fake_cupy: types.ModuleType, compiles: Compiles
) -> None:
    CudaBackend().module(TEMPLATED)
    folder = cubin_cache.cache_dir() / "sm_90"
    (cubin,) = folder.glob("*.cubin")
    cubin.write_bytes(b"\x7fELF truncated")  # the JSON's SHA-256 no longer matches
    CudaBackend().module(TEMPLATED)
    assert len(compiles.options) == 2
    (meta,) = folder.glob("*.json")
    meta.write_text("{not json")
    CudaBackend().module(TEMPLATED)
    assert len(compiles.options) == 3
    meta.unlink()  # a CUBIN without its JSON was never finished
    CudaBackend().module(TEMPLATED)
    assert len(compiles.options) == 4
    CudaBackend().module(TEMPLATED)
    assert len(compiles.options) == 4


def test_cubin_cache_can_be_turned_off_and_survives_a_read_only_folder(
    fake_cupy: types.ModuleType, compiles: Compiles, monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:  # fmt: skip
    monkeypatch.setenv(cubin_cache.ENV_DISABLE, "0")
    CudaBackend().module(TEMPLATED)
    CudaBackend().module(TEMPLATED)
    assert len(compiles.options) == 2 and not cubin_cache.cache_dir().exists()
    monkeypatch.delenv(cubin_cache.ENV_DISABLE)
    blocker = tmp_path / "file"
    blocker.write_text("")
    monkeypatch.setenv("CUDNNLITE_CACHE_DIR", str(blocker))  # a file: no folder under it
    cubin_cache._warned.clear()
    with pytest.warns(RuntimeWarning, match="CUBIN cache"):
        module = CudaBackend().module(TEMPLATED)
    assert module.get_function("probe_plain").name == "probe_plain"


def test_cupys_nvrtc_compiles_when_ours_is_another_cuda_major(
    fake_cupy: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    """CuPy for CUDA 12 with only CUDA 13's NVRTC found by us: a CUBIN of NVRTC 13 may not
    load on a CUDA 12 driver, so CuPy's own NVRTC compiles, with the same options."""
    from cudnnlite.runtime import cuda_toolkit

    monkeypatch.undo()  # the real NvrtcCompiler.compile, and a fresh stand-in below
    calls: list[tuple[str, Any]] = []

    class FakeNvrtc:
        @staticmethod
        def getVersion() -> tuple[int, int]:  # noqa: N802
            return (12, 9)

        @staticmethod
        def createProgram(src: str, name: str, headers: Any, names: Any) -> int:  # noqa: N802
            calls.append(("create", name))
            return 7

        @staticmethod
        def addNameExpression(prog: int, name: str) -> None:  # noqa: N802
            calls.append(("name", name))

        @staticmethod
        def compileProgram(prog: int, options: list[str]) -> None:  # noqa: N802
            calls.append(("compile", tuple(options)))

        @staticmethod
        def getProgramLog(prog: int) -> str:  # noqa: N802
            return ""

        @staticmethod
        def getLoweredName(prog: int, name: str) -> str:  # noqa: N802
            return mangle(name)

        @staticmethod
        def getCUBIN(prog: int) -> bytes:  # noqa: N802
            return b"\x7fELF12"

        @staticmethod
        def destroyProgram(prog: int) -> None:  # noqa: N802
            calls.append(("destroy", prog))

    lib13 = cuda_toolkit.NvrtcLibrary(Path("/x/libnvrtc.so.13"), (13, 5), "test")
    headers: list[Any] = []
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(sys.modules, "cupy", fake_cupy)
        mp.setattr(fake_cupy.cuda.runtime, "runtimeGetVersion", lambda: 12080)
        mp.setattr(fake_cupy.cuda, "nvrtc", FakeNvrtc, raising=False)
        mp.setattr(cuda_toolkit, "find_nvrtc", lambda: lib13)
        mp.setattr(
            cuda_toolkit,
            "find_cuda_include_dirs",
            lambda version=None: headers.append(version) or [Path("/cuda12/include")],
        )
        mp.setenv(cubin_cache.ENV_DISABLE, "0")
        module = CudaBackend().module(TEMPLATED)
    assert headers == [(12, 9)]  # headers of CuPy's NVRTC's version
    compiled = [c for c in calls if c[0] == "compile"]
    assert compiled == [
        ("compile", compile_options.runtime_options(
            "sm_90", TEMPLATED.define_options(), ["/cuda12/include"]))
    ]  # fmt: skip
    assert calls[-1] == ("destroy", 7)
    assert module.get_function("probe_kernel<float>").function.symbol == "_Z_probe_kernel_float_"


def test_cubin_that_does_not_load_is_an_execution_error(
    fake_cupy: types.ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    def bad(*args: Any) -> cubin_cache.CompiledModule:
        return cubin_cache.CompiledModule(b"garbage", {"block_reduce_sum": "block_reduce_sum",
                                                       "trap_if": "trap_if"})  # fmt: skip

    monkeypatch.setattr(cuda.NvrtcCompiler, "compile", bad)
    monkeypatch.setenv(cubin_cache.ENV_DISABLE, "0")
    with pytest.raises(ExecutionError, match="INVALID_IMAGE"):
        CudaBackend().module(SPEC)


def test_launch_normalizes_dims_and_opts_into_large_shared_memory(
    fake_cupy: types.ModuleType,
) -> None:
    kernel = CudaBackend().module(SPEC).get_function("trap_if")
    kernel(4, (32, 2), (np.int32(0),))
    kernel(1, 32, (np.int32(0),), shared_mem=100 * 1024)
    fn = kernel.function
    assert fn.kernel.calls[0][:2] == ((4, 1, 1), (32, 2, 1))
    assert fn.kernel.calls[1][3] == 100 * 1024 and fn.max_dynamic_shared_size_bytes == 100 * 1024
    with pytest.raises(BadParamError, match="block"):
        kernel(1, 2048, (np.int32(0),))


def test_structs_go_to_cupy_as_size_one_arrays(fake_cupy: types.ModuleType) -> None:
    # CuPy passes a struct by value only as a size-1 ndarray; a numpy.void is refused.
    kernel = CudaBackend().module(SPEC).get_function("trap_if")
    struct = np.zeros((), np.dtype([("a", "<i4"), ("b", "<f4")], align=True))[()]
    kernel(1, 1, (struct, np.int32(0)))
    passed = kernel.function.kernel.calls[-1][2]
    assert isinstance(passed[0], np.ndarray) and passed[0].size == 1
    assert passed[0].dtype == struct.dtype and isinstance(passed[1], np.int32)


def test_a_recorded_launch_replays_through_the_prepared_path(fake_cupy: types.ModuleType) -> None:
    """A CudaKernel launch recorded by a launch template (runtime.templates) replays with
    CuPy's form of every argument prepared once (the struct as a size-one array, the
    dims checked) and the new arrays in the recorded arrays' places."""
    kernel = CudaBackend().module(SPEC).get_function("trap_if")
    struct = np.array((3, 2.5), np.dtype([("a", "<i4"), ("b", "<f4")], align=True))[()]
    x, y = FakeDeviceArray((4, 8), np.float32), FakeDeviceArray((4, 8), np.float32)
    rec = template_record.Recording()
    graph._set_recorder(rec)
    try:
        kernel(4, (32, 2), (x, struct, y, np.int32(5)), shared_mem=100 * 1024)
    finally:
        graph._set_recorder(None)
    tmpl = template_record._template(rec, y, [x])
    assert type(tmpl) is template_record.Template and tmpl.kind == "cuda"
    x2 = FakeDeviceArray((4, 8), np.float32)
    # (the stand-in cupy module has no arrays)
    tmpl.xp = types.SimpleNamespace(empty=lambda shape, dtype: FakeDeviceArray(shape, dtype))
    y2 = tmpl.replay([x2])
    calls = kernel.function.kernel.calls
    assert len(calls) == 2  # the recorded launch and the replay
    grid, block, args, shared_mem = calls[-1]
    assert (grid, block, shared_mem) == ((4, 1, 1), (32, 2, 1), 100 * 1024)
    assert args[0] is x2 and args[2] is y2 and y2 is not y and args[3] == np.int32(5)
    assert isinstance(args[1], np.ndarray) and args[1].tobytes() == struct.tobytes()


def test_a_prepared_launch_swaps_in_the_varying_argument(fake_cupy: types.ModuleType) -> None:
    """Kernel.prepare on CUDA: the fixed arguments in CuPy's form once, the varying one
    (a struct as a size-one array) per launch; inside a recording, an ordinary launch."""
    kernel = CudaBackend().module(SPEC).get_function("trap_if")
    x = FakeDeviceArray((4, 8), np.float32)
    layout = np.dtype([("a", "<i4"), ("b", "<f4")], align=True)
    first, second = (np.array((t, 0.5), layout)[()] for t in (1, 2))
    launch = kernel.prepare((3, 1), 64, (x, first, np.int32(5)), shared_mem=16, vary=1)
    calls = kernel.function.kernel.calls
    before = len(calls)
    launch(second)
    launch(first)
    assert len(calls) == before + 2
    for (grid, block, args, shared_mem), want in zip(calls[before:], (second, first),
                                                     strict=True):  # fmt: skip
        assert (grid, block, shared_mem) == ((3, 1, 1), (64, 1, 1), 16)
        assert args[0] is x and args[2] == np.int32(5)
        assert isinstance(args[1], np.ndarray) and args[1].tobytes() == want.tobytes()
    rec = template_record.Recording()
    graph._set_recorder(rec)
    try:
        launch(second)
    finally:
        graph._set_recorder(None)
    assert len(rec.launches) == 1 and len(calls) == before + 3  # (recorded, and launched)


def test_multiprocessor_count_is_cached(fake_cupy: types.ModuleType) -> None:
    backend = CudaBackend()
    assert backend.multiprocessor_count() == 132
    fake_cupy.cuda.Device().attributes["MultiProcessorCount"] = 1  # a second query would see it
    assert backend.multiprocessor_count() == 132


def test_capabilities_take_the_devices_own_shared_memory(fake_cupy: types.ModuleType) -> None:
    """A device that reports its opt-in shared memory per block sizes the solvers' tiles
    by it (an arch newer than the table, or a part with less); one that does not gets its
    arch's table value. Read once per device, with the SM count."""
    from cudnnlite.runtime.caps import capabilities

    attributes = fake_cupy.cuda.Device().attributes
    assert capabilities(CudaBackend()).max_shared_bytes == 227 * 1024  # sm_90's row
    attributes["MaxSharedMemoryPerBlockOptin"] = 99 * 1024
    backend = CudaBackend()
    caps = capabilities(backend)
    assert (caps.arch, caps.max_shared_bytes, caps.sm_count) == ("sm_90", 99 * 1024, 132)
    attributes["MaxSharedMemoryPerBlockOptin"] = 1
    assert capabilities(backend).max_shared_bytes == 99 * 1024


def test_driver_errors_become_execution_errors(fake_cupy: types.ModuleType) -> None:
    kernel = CudaBackend().module(SPEC).get_function("trap_if")
    kernel.function.kernel.fail = True
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
    msg = str(info.value)
    assert "bad.cu" in msg and "VEC" in msg and "planted" in msg and "sm_90" in msg
    assert not list(cubin_cache.cache_dir().rglob("*.cubin"))  # nothing cached


def test_real_modules_compile_through_the_backend_path_without_a_gpu(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The backend's build step (no CuPy call but the CUDA version) gives the NVRTC check's
    CUBIN byte for byte: same NVRTC, same options; bf16/fp16 headers included."""
    from cudnnlite.errors import NotSupportedError
    from cudnnlite.runtime import cuda_toolkit, nvrtc_check

    try:
        cuda_toolkit.find_nvrtc()
        cuda_toolkit.find_cuda_include_dirs()
    except NotSupportedError as exc:
        pytest.skip(f"NVRTC not available: {exc}")
    monkeypatch.setenv("CUDNNLITE_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv(cubin_cache.ENV_DISABLE, raising=False)
    cupy = types.SimpleNamespace(cuda=types.SimpleNamespace(runtime=types.SimpleNamespace(
        runtimeGetVersion=lambda: cuda_toolkit.find_nvrtc().major * 1000)))  # fmt: skip
    spec = ModuleSpec.make(
        "selftest/nvrtc_probe.cu",
        ["probe_kernel<__nv_bfloat16>", "probe_convert<__half, __nv_bfloat16>", "probe_plain"],
        {"PROBE_SCALE": 3},
    )
    built = cuda.build_cubin(spec, "sm_90", cupy)
    check = nvrtc_check.compile_to_cubin(spec, "sm_90")
    assert built.cubin == check.cubin and built.lowered_names == check.lowered_names
    assert not built.from_cache
    again = cuda.build_cubin(spec, "sm_90", cupy)
    assert again.from_cache and again.cubin == check.cubin
    assert again.lowered_names["probe_kernel<__nv_bfloat16>"].startswith("_Z")
    # A device newer than this NVRTC knows gets PTX of the newest arch it knows, which the
    # driver compiles at load; the options are the same but for -arch=compute_XX.
    ptx = cuda.build_cubin(spec, "sm_990", cupy)
    newest = max(cuda_toolkit.find_nvrtc().supported_archs)
    assert ptx.cubin.startswith(b"//") and f".target sm_{newest}".encode() in ptx.cubin
    assert ptx.lowered_names == check.lowered_names


def test_a_device_newer_than_nvrtc_gets_ptx_with_the_same_options(
    fake_cupy: types.ModuleType, compiles: Compiles, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudnnlite.runtime import cuda_toolkit

    old = cuda_toolkit.NvrtcLibrary(Path("/x/libnvrtc.so.13"), (13, 0), "test", (75, 80, 90))
    monkeypatch.setattr(cuda_toolkit, "find_nvrtc", lambda: old)
    monkeypatch.setattr(fake_cupy.cuda.Device(), "compute_capability", "100")
    CudaBackend().module(TEMPLATED)
    (options,) = compiles.options
    assert options == compile_options.runtime_options(
        "compute_90", TEMPLATED.define_options(), ["/opt/cuda/inc"]
    )
    monkeypatch.setattr(fake_cupy.cuda.Device(), "compute_capability", "70")
    with pytest.raises(NotSupportedError, match="sm_70"):
        CudaBackend().module(TEMPLATED)
