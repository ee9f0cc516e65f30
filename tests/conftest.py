"""Test-suite setup: emulator checks on, and a ``backend`` fixture that runs each test
body on every available backend (the emulator always, CUDA when a GPU is present)."""

from __future__ import annotations

import os

# Test mode for the emulator: shared memory poisoned with NaN at every block start.
os.environ.setdefault("CUDNNLITE_EMU_POISON", "1")
# The suite's emulator time is g++'s (warm, a conv/attention/RNN sample runs in 5% of its
# cold time): -O1 with FMA contraction compiles about 30% sooner and gives the same
# numbers (.ci/run sets it for the benchmarks too; test_emu_opt builds the default -O2).
os.environ.setdefault("CUDNNLITE_EMU_OPT", "1")
# Every launch-template replay is compared with the op's own call (runtime.templates).
os.environ.setdefault("CUDNNLITE_TEMPLATE_CHECK", "1")
# The emulator runs blocks on OpenMP threads, and libgomp's idle threads spin by default.
# With pytest-xdist's workers on as many cores as there are workers, the spinning takes
# the cores the other worker needs: passive waiting ran a three-file sample 1.4-1.8x
# faster under `-n 2` on 2 cores (and the same within noise in one process). Read by
# libgomp when the first emulator module loads, so it is set before any can.
os.environ.setdefault("OMP_WAIT_POLICY", "passive")

import pytest  # noqa: E402

from cudnnlite.testing import available_backends  # noqa: E402

try:
    from hypothesis import settings
except ImportError:  # the GPU device check machine may lack it: property tests skip
    settings = None
if settings is not None:
    # Kernel launches on the emulator take milliseconds; keep example counts modest
    # and no deadline (the first call of a test compiles its module).
    # CUDNNLITE_HYPOTHESIS_EXAMPLES=N deepens a local run (README.md, "Install and run the tests").
    examples = int(os.environ.get("CUDNNLITE_HYPOTHESIS_EXAMPLES", "30"))
    settings.register_profile("cudnnlite", max_examples=examples, deadline=None)
    settings.load_profile("cudnnlite")

BACKENDS = available_backends()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The name of a backend to run on: ``cpu`` (emulator) or ``cuda``."""
    return request.param


@pytest.fixture
def emulator_only(backend: str) -> None:
    if backend != "cpu":
        pytest.skip("checks an emulator-only behaviour")


@pytest.fixture(scope="module")
def nvrtc():
    """The NVRTC library (no GPU needed); the test skips without one, unless
    ``CUDNNLITE_REQUIRE_NVRTC=1`` (CI), where a failed discovery fails it."""
    from cudnnlite.errors import NotSupportedError
    from cudnnlite.runtime import cuda_toolkit

    try:
        lib = cuda_toolkit.find_nvrtc()
        cuda_toolkit.find_cuda_include_dirs()
    except NotSupportedError as exc:
        if os.environ.get("CUDNNLITE_REQUIRE_NVRTC") == "1":
            pytest.fail(f"CUDNNLITE_REQUIRE_NVRTC=1 but discovery failed: {exc}")
        pytest.skip(f"NVRTC not available: {exc}")
    return lib


def _mentions_bf16(value: object) -> bool:
    if isinstance(value, str):
        return "bf16" in value
    if getattr(value, "dtype", None) == "bf16":  # a problem (ConvProblem, AttentionProblem)
        return True
    if isinstance(value, (tuple, list)):
        return any(_mentions_bf16(v) for v in value)
    return False


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Without ml_dtypes (the lent GPU box has none) there are no bfloat16 arrays: the
    bf16 cases skip, recognised by their id or parameters (a dtype name, a problem whose
    dtype is bf16); a test whose bf16 case hides in its body skips by itself."""
    from cudnnlite import dtypes

    if dtypes.HAVE_BFLOAT16:
        return
    skip = pytest.mark.skip(reason="bfloat16 arrays need ml_dtypes, which is not installed")
    for item in items:
        params = getattr(getattr(item, "callspec", None), "params", {})
        if "bf16" in item.nodeid or any(_mentions_bf16(v) for v in params.values()):
            item.add_marker(skip)
