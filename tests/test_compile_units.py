"""A first call compiles only what it launches: on a GPU each kernel is a compile unit of
its own (``ModuleSpec.part``), and ``precompile --arch`` fills the CUBIN cache a run on
that GPU reads. The NVRTC parts need no GPU (they skip without NVRTC, except in CI)."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import pytest

from cudnnlite import dtypes
from cudnnlite.errors import BadParamError, CompileError, NotSupportedError
from cudnnlite.ops import activation, dropout
from cudnnlite.runtime import cubin
from cudnnlite.runtime.cuda import AheadOfTimeBackend, CudaBackend
from cudnnlite.runtime.emulator.launcher import EmulatorBackend
from cudnnlite.runtime.kernel import ModuleSpec

FAMILY = activation.module_spec(dtypes.FLOAT32)  # 90 kernels: seconds of NVRTC as a whole
RELU_VEC = "act_fwd_contig<float, 1, 4>"


def test_a_part_is_one_kernel_of_the_same_source_and_defines() -> None:
    spec = ModuleSpec.make("conv/direct.cu", ["a<float>", "b<float>"], {"TILE": 8})
    part = spec.part("b<float>")
    assert (part.source, part.names, part.defines) == (spec.source, ("b<float>",), spec.defines)
    assert [p.names for p in spec.parts()] == [("a<float>",), ("b<float>",)]
    assert part.part("b<float>") is part  # a single-kernel module is its own unit
    with pytest.raises(ValueError, match="'c' is not a kernel of conv/direct.cu"):
        spec.part("c")


def test_the_gpu_compiles_per_kernel_and_the_emulator_per_family() -> None:
    # g++ costs seconds per library whatever its size, NVRTC grows with the kernels.
    assert CudaBackend.per_kernel_modules and AheadOfTimeBackend.per_kernel_modules
    emu = EmulatorBackend()
    assert emu.compile_unit(FAMILY, RELU_VEC) is FAMILY
    assert emu.compile_units(FAMILY) == [FAMILY]
    gpu = AheadOfTimeBackend("sm_90")
    assert gpu.compile_unit(FAMILY, RELU_VEC) == FAMILY.part(RELU_VEC)
    assert len(gpu.compile_units(FAMILY)) == len(FAMILY.names) == 90


def test_a_kernel_request_compiles_that_kernel_alone(
    nvrtc, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CUDNNLITE_CACHE_DIR", str(tmp_path))
    backend = AheadOfTimeBackend("sm_90")
    kernel = backend.kernel(FAMILY, RELU_VEC)
    (module,) = backend._modules.values()
    # The CUBIN holds one kernel: the ReLU the call launches, none of its 89 siblings.
    assert list(cubin.read_cubin(module.built.cubin)) == [module.built.lowered_names[RELU_VEC]]
    with pytest.raises(NotSupportedError, match="compiled ahead of time for sm_90"):
        kernel((1,), (32,), ())


def test_precompile_for_an_arch_fills_the_cache_a_run_reads(
    nvrtc, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from cudnnlite.precompile import precompile

    monkeypatch.setenv("CUDNNLITE_CACHE_DIR", str(tmp_path))
    spec = dropout.module_specs()[0]
    report = precompile(["dropout"], dtypes_=["fp32"], arch="sm_90",
                        jobs=2, progress=False)  # fmt: skip
    assert report.ok and len(report.built) == len(spec.parts()) > 1
    # A later process (a fresh backend) compiles nothing: every unit comes from the cache.
    fresh = AheadOfTimeBackend("sm_90")
    for name in spec.names:
        fresh.kernel(spec, name)
    assert all(m.built.from_cache for m in fresh._modules.values())


def test_bad_arch_and_backend_combinations_are_refused() -> None:
    from cudnnlite.cli import main
    from cudnnlite.precompile import precompile

    with pytest.raises(BadParamError, match="arch: expected sm_XX"):
        AheadOfTimeBackend("hopper")
    with pytest.raises(BadParamError, match="arch: the emulator has no GPU arch"):
        precompile(["dropout"], backend="cpu", arch="sm_90", progress=False)
    with pytest.raises(BadParamError, match="backend: expected"):
        precompile(["dropout"], backend="tpu", progress=False)
    with pytest.raises(SystemExit) as exit_:  # (argparse's usage error: status 2)
        main(["precompile", "dropout", "--arch", "sm90", "--no-progress"])
    assert exit_.value.code == 2


class _FakeKernel:
    def __init__(self, name: str) -> None:
        self.name, self.launches = name, 0

    def __call__(self, *args: Any, **kwargs: Any) -> None:
        self.launches += 1


class _FakeModule:
    def __init__(self, spec: ModuleSpec) -> None:
        self.kernels = {n: _FakeKernel(n) for n in spec.names}

    def get_function(self, name: str) -> Any:
        return self.kernels[name]


class _SlowBackend(EmulatorBackend):
    """Builds a stand-in module per kernel (as on a GPU); the first ``together`` builds
    wait (up to ``wait`` s) until they are all under way at once. The units in
    ``failing`` fail."""

    per_kernel_modules = True

    def __init__(self, together: int, wait: float, failing: tuple[str, ...] = ()) -> None:
        super().__init__()
        self.started: list[ModuleSpec] = []
        self.threads: set[str] = set()
        self.failing = failing
        self._together = together
        self._all_in = threading.Barrier(together, timeout=wait)
        self._count = threading.Lock()

    def _build(self, spec: ModuleSpec) -> Any:
        with self._count:
            self.started.append(spec)
            first = len(self.started) <= self._together
        self.threads.add(threading.current_thread().name)
        try:
            if first:
                self._all_in.wait()
        except threading.BrokenBarrierError:
            pass
        if spec.names[0] in self.failing:
            raise CompileError(f"{spec.names[0]}: planted failure")
        return _FakeModule(spec)


def test_distinct_modules_build_at_the_same_time() -> None:
    """precompile's threads (and a GPU session's warm-up) compile side by side: the
    backend holds no lock across builds of different modules."""
    specs = [ModuleSpec.make("conv/direct.cu", [f"k{i}"]) for i in range(4)]
    backend = _SlowBackend(together=len(specs), wait=10.0)
    with ThreadPoolExecutor(len(specs)) as pool:
        modules = list(pool.map(backend.module, specs))
    assert not backend._all_in.broken  # all four were building at once
    assert [backend.module(s) for s in specs] == modules  # built once, kept


def test_one_module_is_built_once_whoever_asks() -> None:
    spec = ModuleSpec.make("conv/direct.cu", ["k"])
    backend = _SlowBackend(together=2, wait=0.5)  # a second build never comes
    with ThreadPoolExecutor(4) as pool:
        modules = set(map(id, pool.map(lambda _: backend.module(spec), range(4))))
    assert backend.started == [spec] and len(modules) == 1


FAMILY3 = ModuleSpec.make("conv/winograd.cu", ["a", "b", "c"])


def _runner(backend: Any, keep: dict[str, Any] | None = None) -> list[Any]:
    """A runner's preparation: three kernels of one family (Winograd's transforms, say)."""
    kernels = [backend.kernel(FAMILY3, n) for n in FAMILY3.names]
    if keep is not None:
        keep.update(zip(FAMILY3.names, kernels, strict=True))
    return kernels


def test_prefetch_builds_a_runners_kernels_side_by_side() -> None:
    from cudnnlite.runtime.backend import _build_pool

    together = min(3, _build_pool()._max_workers)  # the pool has a thread per core, up to 8
    backend = _SlowBackend(together=together, wait=10.0)
    backend.prefetch(lambda: _runner(backend))
    assert not backend._all_in.broken  # the units were building at once
    assert all(t.startswith("cudnnlite-build") for t in backend.threads)
    kernels = _runner(backend)  # the real preparation: built already, nothing more
    assert len(backend.started) == 3 and all(isinstance(k, _FakeKernel) for k in kernels)


def test_prefetch_dry_run_kernels_that_were_kept_still_work() -> None:
    backend, kept = _SlowBackend(together=1, wait=0.1), {}
    backend.prefetch(lambda: _runner(backend, kept))  # a cache kept the dry run's kernels
    kept["b"]((1,), (32,), ())
    real = backend.kernel(FAMILY3, "b")
    assert real.launches == 1 and kept["b"].name == "b" and kept["b"].spec.names == ("b",)


def test_prefetch_leaves_errors_to_the_real_call() -> None:
    backend = _SlowBackend(together=1, wait=0.1, failing=("b",))

    def make() -> None:
        _runner(backend)
        raise NotSupportedError("the dry run's own failure is not raised")

    backend.prefetch(make)  # neither the failed build nor make's error escapes
    assert {s.names[0] for s in backend.started} == {"a", "b", "c"}
    with pytest.raises(CompileError, match="b: planted failure"):
        _runner(backend)


def test_prefetch_inside_a_dry_run_leaves_the_noting_to_the_outer_one() -> None:
    backend = _SlowBackend(together=1, wait=0.1)

    def outer() -> None:
        backend.prefetch(lambda: _runner(backend))  # a nested plan's own prefetch
        _runner(backend)

    backend.prefetch(outer)
    assert sorted(s.names[0] for s in backend.started) == ["a", "b", "c"]  # each once


def test_a_first_plan_builds_its_units_side_by_side(
    nvrtc, tmp_path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Winograd F(4x4) plan's four kernels (filter, input and output transforms, batched
    GEMM), compiled for sm_90 on the build threads before the plan takes them."""
    from cudnnlite.dispatch.plans import get_plan
    from cudnnlite.problems.conv import ConvProblem

    monkeypatch.setenv("CUDNNLITE_CACHE_DIR", str(tmp_path))
    backend = AheadOfTimeBackend("sm_90")
    built_on: list[str] = []
    build = backend._build

    def recorded_build(spec: ModuleSpec) -> Any:
        built_on.append(threading.current_thread().name)
        return build(spec)

    monkeypatch.setattr(backend, "_build", recorded_build)
    problem = ConvProblem(n=1, c=8, spatial=(12, 12), k=8, filter=(3, 3),
                          pads=((1, 1), (1, 1)), strides=(1, 1), dilations=(1, 1),
                          layout="NCHW", dtype="fp32")  # fmt: skip
    plan = get_plan(backend, problem, "conv_fwd_winograd_f4x4_3x3")
    assert len(plan.runner.kernel_names) >= 1 and len(built_on) == 4
    assert all(name.startswith("cudnnlite-build") for name in built_on)


def test_a_forked_child_builds_on_threads_of_its_own(tmp_path) -> None:
    """After a fork (multiprocessing, Dask's process workers) the parent's build threads
    are gone: a child's prefetch must not wait for them."""
    import multiprocessing

    from cudnnlite.runtime.backend import _build_pool

    pool_ = _build_pool()  # the parent's pool, every one of its threads started
    everyone = threading.Barrier(pool_._max_workers, timeout=10)
    for f in [pool_.submit(everyone.wait) for _ in range(pool_._max_workers)]:
        f.result()
    if "fork" not in multiprocessing.get_all_start_methods():
        pytest.skip("no fork on this platform")
    ctx = multiprocessing.get_context("fork")
    with ctx.Pool(1) as pool:
        started = pool.apply_async(_prefetch_in_child).get(timeout=60)
    assert sorted(started) == ["a", "b", "c"]


def _prefetch_in_child() -> list[str]:
    backend = _SlowBackend(together=1, wait=0.1)
    backend.prefetch(lambda: _runner(backend))
    return [s.names[0] for s in backend.started]
