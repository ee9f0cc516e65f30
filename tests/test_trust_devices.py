"""Devices, streams and the tuner on the CUDA path (issue 12, "Trust"), checked against
stand-ins for CuPy that model what matters (current device, stream order, events), so
they run without a GPU.

- A NumPy array forced onto the CUDA backend is uploaded on the launch stream, ahead of
  the kernel, whatever stream that is (a legacy-stream cudaMemcpy is not ordered with a
  non-blocking stream).
- A call runs on the device its arrays live on; arrays on two devices are refused.
- The tuner times GPU work only, skips a failing candidate, and stops with a clear error
  when a CUDA error poisons the context.
"""

from __future__ import annotations

import ctypes
import sys
import time
import types
from typing import Any

import numpy as np
import pytest

from cudnnlite.errors import BadParamError, ExecutionError
from cudnnlite.runtime.cuda import CudaBackend, CudaKernel
from cudnnlite.runtime.kernel import ModuleSpec
from cudnnlite.runtime.streams import with_stream

# ------------------------------------------------------------------ a CuPy stand-in


class CUDARuntimeError(Exception):
    """Same name as CuPy's, which is how the library recognizes CUDA errors."""


class FakeStream:
    """A queue of work run in order when synchronized (or when the device is)."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr
        self.queue: list[Any] = []

    def synchronize(self) -> None:
        while self.queue:
            self.queue.pop(0)()


class FakeDeviceArray:
    """Device memory that is host memory, with what the library reads of a CuPy array."""

    __module__ = "cupy._core.core"

    def __init__(self, host: np.ndarray, device: int = 0) -> None:
        self.host = host
        self.shape, self.strides, self.itemsize = host.shape, host.strides, host.itemsize
        self.dtype = host.dtype
        self.data = types.SimpleNamespace(ptr=host.__array_interface__["data"][0])
        self.device = types.SimpleNamespace(id=device)
        self.__cuda_array_interface__ = {"data": (self.data.ptr, False)}

    def __getitem__(self, key: Any) -> FakeDeviceArray:
        return FakeDeviceArray(self.host[key], self.device.id)


class FakeCupy(types.ModuleType):
    def __init__(self) -> None:
        super().__init__("cupy")
        self.current_device = 0
        self.entered: list[int] = []
        self.legacy = FakeStream(0)  # the legacy default stream
        self.stream = FakeStream(7)  # CuPy's current stream: a non-blocking one
        fake = self

        class Device:
            def __init__(self, device: int | None = None) -> None:
                self.id = fake.current_device if device is None else device
                self.compute_capability = "90"

            def __enter__(self) -> Device:
                self._prev = fake.current_device
                fake.current_device = self.id
                fake.entered.append(self.id)
                return self

            def __exit__(self, *exc: Any) -> None:
                fake.current_device = self._prev

        def memcpy(dst: int, src: int, n: int, kind: int) -> None:
            fake.legacy.queue.append(lambda: ctypes.memmove(dst, src, n))

        def memcpy_async(dst: int, src: int, n: int, kind: int, stream: int) -> None:
            target = fake.stream if stream == fake.stream.ptr else fake.legacy
            target.queue.append(lambda: ctypes.memmove(dst, src, n))

        def device_synchronize() -> None:
            # a non-blocking stream does not wait for the legacy stream: in this model
            # its work runs first
            fake.stream.synchronize()
            fake.legacy.synchronize()

        self.cuda = types.SimpleNamespace(
            Device=Device,
            get_current_stream=lambda: self.stream,
            runtime=types.SimpleNamespace(
                getDevice=lambda: self.current_device,
                getDeviceCount=lambda: 2,
                memcpy=memcpy,
                memcpyAsync=memcpy_async,
                deviceSynchronize=device_synchronize,
            ),
        )
        self.uint8, self.float32 = np.uint8, np.float32

    def empty(self, n: Any, dtype: Any) -> FakeDeviceArray:
        return FakeDeviceArray(np.zeros(n, dtype), self.current_device)


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> FakeCupy:
    cupy = FakeCupy()
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return cupy


# ------------------------------------------------------------------ uploads


class CopyKernel:
    """A kernel that copies its first argument into its second on the current stream."""

    def __init__(self, cupy: FakeCupy) -> None:
        self.cupy = cupy

    def __call__(self, grid: Any, block: Any, args: tuple, shared_mem: int = 0) -> None:
        src, dst = args[0], args[1]
        n = src.host.nbytes
        self.cupy.stream.queue.append(lambda: ctypes.memmove(dst.data.ptr, src.data.ptr, n))


def test_a_forced_numpy_upload_is_ordered_before_the_kernel(fake_cupy: FakeCupy) -> None:
    # CUDNNLITE_BACKEND=cuda with NumPy arrays: each is uploaded, the kernel runs on
    # CuPy's current (non-blocking) stream, results come back.
    kernel = CudaKernel(ModuleSpec.make("k.cu", ["copy"]), "copy", CopyKernel(fake_cupy))
    src = np.arange(1, 65, dtype=np.float32)
    dst = np.zeros(64, np.float32)
    kernel(1, 64, (src, dst))
    np.testing.assert_array_equal(dst, src)  # the kernel read the whole upload
    assert not fake_cupy.legacy.queue and not fake_cupy.stream.queue


def test_a_device_array_is_read_after_its_producer(fake_cupy: FakeCupy) -> None:
    # The emulator's copy of a GPU array waits for the work queued before it.
    from cudnnlite.runtime.transfer import DeviceToHost

    backing = np.zeros(16, np.float32)
    arr = FakeDeviceArray(backing)
    fake_cupy.stream.queue.append(lambda: backing.__setitem__(slice(None), 3.0))  # producer
    copy = DeviceToHost(arr)
    assert ctypes.c_float.from_address(copy.pointer() + 4 * 15).value == 3.0


# ------------------------------------------------------------------ devices


@with_stream
def _probe(x: Any, y: Any = None, *, weights: Any = None) -> tuple[int, str]:
    """What a public function sees: the current device and the backend's device key."""
    return sys.modules["cupy"].cuda.runtime.getDevice(), CudaBackend().device_key()


def test_arrays_on_a_non_current_device_run_there(fake_cupy: FakeCupy) -> None:
    on1 = fake_cupy.empty(4, np.float32)
    on1.device.id = 1
    assert _probe(on1, y=FakeDeviceArray(np.zeros(4), 1)) == (1, "cuda:1")
    assert fake_cupy.current_device == 0  # restored after the call
    assert _probe(fake_cupy.empty(4, np.float32)) == (0, "cuda:0")
    assert fake_cupy.entered == [1]  # nothing entered when the device is current


def test_arrays_on_two_devices_are_refused(fake_cupy: FakeCupy) -> None:
    a0, a1 = FakeDeviceArray(np.zeros(4), 0), FakeDeviceArray(np.zeros(4), 1)
    with pytest.raises(BadParamError, match=r"y: on GPU 1, but x is on GPU 0"):
        _probe(a0, a1)
    with pytest.raises(BadParamError, match=r"weights\[1\]: on GPU 1, but x is on GPU 0"):
        _probe(a0, weights=[a0, a1])
    with pytest.raises(BadParamError, match=r"weights\['w'\]: on GPU 0, but x is on GPU 1"):
        _probe(a1, weights={"w": a0})
    assert fake_cupy.entered == []


def test_host_arrays_never_import_cupy(monkeypatch: pytest.MonkeyPatch) -> None:
    class NoCupy(types.ModuleType):
        def __getattr__(self, name: str) -> Any:
            raise AssertionError(f"cupy.{name} used for a host call")

    monkeypatch.setitem(sys.modules, "cupy", NoCupy("cupy"))
    import cudnnlite as cl

    x = np.linspace(-1, 1, 8, dtype=np.float32)
    np.testing.assert_array_equal(cl.relu(x), np.maximum(x, 0))


def test_a_public_function_refuses_two_devices_before_any_work(fake_cupy: FakeCupy) -> None:
    import cudnnlite as cl

    x = FakeDeviceArray(np.zeros((1, 2, 4, 4), np.float32), 0)
    out = FakeDeviceArray(np.zeros((1, 2, 4, 4), np.float32), 1)
    with pytest.raises(BadParamError, match="out: on GPU 1, but x is on GPU 0"):
        cl.relu(x, out=out)


def test_a_conv_plan_refuses_arrays_on_another_device(fake_cupy: FakeCupy) -> None:
    """A plan's kernels are loaded on the device it was made on; a call runs on its
    arrays' device, where they do not exist: a clear error, before any work."""
    from cudnnlite.ops.conv_plan import ConvPlan
    from cudnnlite.problems.conv import ConvProblem

    class Backend:
        name, xp = "cuda", fake_cupy

        def device_key(self) -> str:
            return f"cuda:{fake_cupy.current_device}"

    problem = ConvProblem(1, 2, (4, 4), 3, (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1))
    made = types.SimpleNamespace(problem=problem, solver=types.SimpleNamespace(name="s"),
                                 config=None, source="heuristic", workspace_bytes=0,
                                 backend=Backend())  # fmt: skip
    plan = ConvPlan(made)  # made on GPU 0
    x = FakeDeviceArray(np.zeros((1, 2, 4, 4), np.float32), 1)
    w = FakeDeviceArray(np.zeros((3, 2, 1, 1), np.float32), 1)
    with pytest.raises(BadParamError, match="x: the arrays are on cuda:1, this plan was made "
                                            "on cuda:0; make one plan per device"):  # fmt: skip
        plan(x, w)
    assert fake_cupy.entered == [1]  # the call entered the arrays' device, then refused


# ------------------------------------------------------------------ the tuner


class TunerCupy(FakeCupy):
    """Adds events whose elapsed time is the GPU's: the work between the events plus the
    time the GPU idled waiting for the host to issue it (what the spin must hide)."""

    def __init__(self) -> None:
        super().__init__()
        self.log: list[str] = []
        self.gpu_us = 0.0  # work queued since the start event
        self.spin_us = 0.0
        self.sticky: Exception | None = None
        fake = self

        class Event:
            def record(self) -> None:
                self.host_t = time.perf_counter()
                if not hasattr(fake, "_start"):
                    fake._start, fake.gpu_us = self, 0.0
                    fake.log.append("start")
                else:
                    fake._end = self
                    fake.log.append("end")

            def synchronize(self) -> None:
                if fake.sticky is not None:
                    raise fake.sticky

        def elapsed_ms(start: Any, end: Any) -> float:
            issue_us = (end.host_t - start.host_t) * 1e6
            del fake._start
            return (fake.gpu_us + max(0.0, issue_us - fake.spin_us)) / 1e3

        self.cuda.Event = Event
        self.cuda.get_elapsed_time = elapsed_ms

        def device_synchronize() -> None:
            if fake.sticky is not None:
                raise fake.sticky

        self.cuda.runtime.deviceSynchronize = device_synchronize

    def empty(self, n: Any, dtype: Any) -> Any:
        arr = super().empty(min(int(np.prod(n)), 16), dtype)
        arr.fill = lambda v: self.log.append("flush")
        return arr

    def zeros(self, n: Any, dtype: Any) -> Any:
        if self.sticky is not None:
            raise self.sticky
        return np.zeros(n, dtype).view(_Gettable)


class _Gettable(np.ndarray):
    def get(self) -> np.ndarray:
        return np.asarray(self)


class FakeGpuBackend:
    name = "cuda"

    def __init__(self, cupy: TunerCupy) -> None:
        self.xp = cupy

    def synchronize(self) -> None:
        if self.xp.sticky is not None:
            raise self.xp.sticky

    def prefetch(self, make: Any) -> None:
        make()  # the tuner's dry run of every candidate (nothing to build here)

    def kernel(self, spec: ModuleSpec, name: str) -> Any:
        assert (spec.source, name) == ("tuner/spin_wait.cu", "spin_wait")
        cupy = self.xp

        def spin(grid: Any, block: Any, args: tuple) -> None:
            cupy.spin_us = int(args[0]) / 2000  # cycles at <= 2 GHz
            cupy.log.append("spin")

        return spin


class Cfg:
    def __init__(self, tile: int) -> None:
        self.tile = tile

    def to_dict(self) -> dict:
        return {"tile": self.tile}


class FakeSolver:
    """Each launch is `gpu_us` of GPU work issued after `host_us` of Python; `fail`
    raises (a CUDA error) in the given call."""

    def __init__(self, name: str, gpu_us: float, host_us: float = 0.0,
                 fail: Exception | None = None, sticky: bool = False) -> None:  # fmt: skip
        self.name, self.gpu_us, self.host_us = name, gpu_us, host_us
        self.fail, self.sticky = fail, sticky

    def configs(self, problem: Any, caps: Any) -> list[Cfg]:
        return [Cfg(1)]

    def workspace_size(self, problem: Any, config: Any) -> int:
        return 0

    def prepare(self, backend: Any, problem: Any, config: Any) -> Any:
        cupy = backend.xp

        def runner(tensors: Any, epilogue: Any, workspace: Any) -> None:
            if self.fail is not None:
                if self.sticky:
                    cupy.sticky = self.fail
                raise self.fail
            for _ in range(2):  # two launches with host work between them
                t0 = time.perf_counter()
                while (time.perf_counter() - t0) * 1e6 < self.host_us:
                    pass
                cupy.gpu_us += self.gpu_us
                cupy.log.append("launch")

        return runner


@pytest.fixture
def tuner_env(monkeypatch: pytest.MonkeyPatch) -> tuple[Any, TunerCupy, list]:
    from cudnnlite.dispatch import tuner

    cupy = TunerCupy()
    stored: list = []
    monkeypatch.setattr(tuner, "capabilities", lambda b: types.SimpleNamespace(arch="sm_90"))
    monkeypatch.setattr(tuner, "family_of", lambda p: "fake")
    monkeypatch.setattr(tuner, "usable", lambda *a, **k: True)
    monkeypatch.setitem(tuner._TENSOR_FACTORIES, "fake", lambda p, b: (None, None))
    monkeypatch.setattr(
        tuner, "database", lambda arch: types.SimpleNamespace(record=lambda k, e: stored.append(e))
    )
    return tuner, cupy, stored


PROBLEM = types.SimpleNamespace(key=lambda: "fake n1")


def _solvers(monkeypatch: pytest.MonkeyPatch, tuner: Any, solvers: list) -> None:
    monkeypatch.setattr(tuner.registry, "solvers", lambda family: solvers)


def test_the_tuner_times_gpu_work_not_the_python_between_launches(
    tuner_env: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    tuner, cupy, stored = tuner_env
    # 2 x 5 us of GPU work issued with 2 x 400 us of host work: the spin grows to cover
    # the issue time, then the events see the 10 us of GPU work alone
    _solvers(monkeypatch, tuner, [FakeSolver("slow_issue", 5.0, host_us=400.0),
                                  FakeSolver("fast", 3.0)])  # fmt: skip
    entries = tuner.tune_problem(PROBLEM, FakeGpuBackend(cupy), max_repeats=3)
    times = {e.solver: e.time_us for e in entries}
    assert times == pytest.approx({"slow_issue": 10.0, "fast": 6.0})
    assert [e.solver for e in stored[0]] == ["fast", "slow_issue"]
    assert cupy.spin_us >= 800  # lengthened past the issue time
    # every timed repeat: flush, spin, start, the launches, end (then the next warm-up)
    timed = [t.split()[:5] for t in " ".join(cupy.log).split("flush")[1:]]
    assert timed and all(t == ["spin", "start", "launch", "launch", "end"] for t in timed)


def test_a_failing_candidate_is_reported_and_skipped(
    tuner_env: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    tuner, cupy, stored = tuner_env
    bad = FakeSolver("bad", 1.0, fail=CUDARuntimeError("cudaErrorInvalidConfiguration"))
    _solvers(monkeypatch, tuner, [bad, FakeSolver("good", 2.0)])
    warning = r"fake n1: bad \{'tile': 1\} failed, skipped: CUDARuntimeError: cudaErrorInvalid"
    with pytest.warns(UserWarning, match=warning):
        entries = tuner.tune_problem(PROBLEM, FakeGpuBackend(cupy), max_repeats=3)
    assert [e.solver for e in entries] == ["good"] and stored


def test_a_sticky_cuda_error_ends_the_run_clearly(
    tuner_env: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    tuner, cupy, stored = tuner_env
    poison = CUDARuntimeError("cudaErrorIllegalAddress: an illegal memory access")
    _solvers(monkeypatch, tuner, [FakeSolver("first", 1.0),
                                  FakeSolver("poison", 1.0, fail=poison, sticky=True),
                                  FakeSolver("never", 1.0)])  # fmt: skip
    with pytest.raises(ExecutionError, match=r"poison .*illegal memory access.*unusable.*"
                                             r"nothing is stored \(1 candidates"):  # fmt: skip
        tuner.tune_problem(PROBLEM, FakeGpuBackend(cupy), max_repeats=3)
    assert not stored


def test_a_bug_in_the_library_is_not_swallowed(
    tuner_env: tuple, monkeypatch: pytest.MonkeyPatch
) -> None:
    tuner, cupy, _ = tuner_env
    _solvers(monkeypatch, tuner, [FakeSolver("typo", 1.0, fail=NameError("x"))])
    with pytest.raises(NameError):
        tuner.tune_problem(PROBLEM, FakeGpuBackend(cupy), max_repeats=3)
