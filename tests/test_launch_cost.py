"""The launchers' per-call shortcuts change nothing but time.

The emulator caches per kernel its argument plan (an arena the ``void**`` array points
into) and per launch shape its LaunchConfig with the environment switches; the CUDA backend
hands CuPy one tuple. Here: a cached launch gives the result of a first one, every argument
check still fires on a cached key, and a switch flipped between launches takes effect. The
self-test module and relu's are compiled by other tests already (no new module here).
"""

from __future__ import annotations

import types
from typing import Any

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite.errors import BadParamError
from cudnnlite.runtime import backend_by_name
from cudnnlite.runtime.selftest import EMULATOR_SELFTEST


def kernel(name: str) -> Any:
    return backend_by_name("cpu").module(EMULATOR_SELFTEST).get_function(name)


def test_cached_launches_match_the_first_one() -> None:
    k = kernel("block_reduce_sum")
    x = np.arange(512, dtype=np.float32)
    outs = []
    for _ in range(3):  # a miss, then hits of the config and the argument plan
        out = np.zeros(2, np.float32)
        k(2, 256, (x, out, np.int32(512)))
        outs.append(out)
    expected = x.reshape(2, 256).sum(axis=1)
    for out in outs:
        np.testing.assert_array_equal(out, expected)
    # A new scalar value and new buffers on the same cached key are picked up.
    out = np.zeros(2, np.float32)
    k(2, 256, (x, out, np.int32(300)))
    np.testing.assert_array_equal(out, [x[:256].sum(), x[256:300].sum()])


def test_checks_still_fire_on_a_cached_key() -> None:
    k = kernel("block_reduce_sum")
    x, out = np.ones(256, np.float32), np.zeros(1, np.float32)
    k(1, 256, (x, out, np.int32(256)))  # the key is cached now
    with pytest.raises(BadParamError, match="takes 3 arguments, got 2"):
        k(1, 256, (x, out))
    with pytest.raises(BadParamError, match=r"argument 2 .*expected a numpy.int32 scalar"):
        k(1, 256, (x, out, np.int64(256)))
    with pytest.raises(BadParamError, match=r"argument 2 .*expected a numpy.int32 scalar"):
        k(1, 256, (x, out, 256))
    with pytest.raises(BadParamError, match=r"argument 0 .*expected a NumPy array"):
        k(1, 256, ([1.0], out, np.int32(256)))
    # 1.0 == 1 as a dict key; a float must still be refused, as before the cache.
    with pytest.raises(BadParamError, match="grid must be 1 to 3 positive ints"):
        k((1.0,), 256, (x, out, np.int32(256)))
    with pytest.raises(TypeError):
        k(1.0, 256, (x, out, np.int32(256)))
    with pytest.raises(BadParamError, match="shared_mem must be >= 0"):
        k(1, 256, (x, out, np.int32(256)), shared_mem=-1)
    # numpy ints and lists of ints are accepted as before (uncached).
    k(np.int64(1), [256], (x, out, np.int32(256)))
    assert out[0] == 256.0


def test_a_switch_flipped_between_launches_takes_effect(monkeypatch: pytest.MonkeyPatch) -> None:
    k = kernel("planted_missing_barrier")
    expected = np.concatenate([[-1.0], np.arange(255.0)]).astype(np.float32)
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "forward")
    out = np.zeros(256, np.float32)
    k(1, 256, (out,))
    np.testing.assert_array_equal(out, expected)
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "reverse")
    out[:] = 0
    k(1, 256, (out,))  # same dims: a config cached for "forward" must not be reused
    assert not np.array_equal(out, expected)
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "sideways")
    with pytest.raises(BadParamError, match="CUDNNLITE_EMU_SCHEDULE"):
        k(1, 256, (out,))
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "")  # set but empty: refused, as always
    with pytest.raises(BadParamError, match="CUDNNLITE_EMU_SCHEDULE"):
        k(1, 256, (out,))
    monkeypatch.setenv("CUDNNLITE_EMU_STACK_KB", "")
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "forward")
    with pytest.raises(ValueError):
        k(1, 256, (out,))
    monkeypatch.delenv("CUDNNLITE_EMU_STACK_KB")
    monkeypatch.delenv("CUDNNLITE_EMU_SCHEDULE")
    out[:] = 0
    k(1, 256, (out,))
    np.testing.assert_array_equal(out, expected)


def test_struct_and_scalar_arguments_through_an_op() -> None:
    # relu's kernel takes (pointer, pointer, int64, struct): every writer of the plan.
    x = np.linspace(-2, 2, 16, dtype=np.float32).reshape(4, 4)
    for _ in range(2):
        np.testing.assert_array_equal(cl.relu(x), np.maximum(x, 0))
    y = np.linspace(-1, 3, 36, dtype=np.float32).reshape(6, 6)
    np.testing.assert_array_equal(cl.relu(y), np.maximum(y, 0))


def test_unaligned_arrays_still_take_the_copying_path() -> None:
    k = kernel("block_reduce_sum")
    raw = np.zeros(256 * 4 + 1, np.uint8)
    x = raw[1:].view(np.float32)  # not aligned to 4 bytes
    x[...] = 1.0
    assert not x.flags.aligned
    out = np.zeros(1, np.float32)
    k(1, 256, (x, out, np.int32(256)))
    assert out[0] == 256.0


# ------------------------------------------------------------------ CUDA, with a fake CuPy
class _FakeFunction:
    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, grid: Any, block: Any, args: Any, shared_mem: int = 0) -> None:
        self.calls.append((grid, block, args, shared_mem))


@pytest.fixture
def fake_cuda_kernel() -> Any:
    # The kernel object the CUDA backend hands out, around a stand-in for the loaded
    # cupy.cuda.function.Function (building one is tests/test_cuda_backend_glue.py's).
    from cudnnlite.runtime.cuda import CudaKernel

    return CudaKernel(EMULATOR_SELFTEST, "trap_if", _FakeFunction())


def test_cuda_arguments_go_as_one_tuple(fake_cuda_kernel: Any) -> None:
    device_array = types.SimpleNamespace(__cuda_array_interface__={})
    fake_cuda_kernel(1, 1, [device_array, np.int32(3)])
    args = fake_cuda_kernel.function.calls[-1][2]
    assert type(args) is tuple and args[0] is device_array and args[1] == np.int32(3)
    same = (device_array, np.int32(4))
    fake_cuda_kernel(1, 1, same)
    assert fake_cuda_kernel.function.calls[-1][2] is same  # a tuple passes through as is


def test_cuda_structs_still_become_size_one_arrays(fake_cuda_kernel: Any) -> None:
    struct = np.zeros((), np.dtype([("a", "<i4"), ("b", "<f4")], align=True))[()]
    fake_cuda_kernel(1, 1, (struct, np.int32(0)))
    passed = fake_cuda_kernel.function.calls[-1][2]
    assert isinstance(passed[0], np.ndarray) and passed[0].size == 1
    assert type(passed) is tuple and isinstance(passed[1], np.int32)


def test_one_kernel_from_eight_threads_at_once() -> None:
    # The argument arena is per kernel: concurrent launches must not mix their arguments.
    from concurrent.futures import ThreadPoolExecutor

    k = kernel("block_reduce_sum")

    def launch(i: int) -> bool:
        x = np.full(256, float(i), np.float32)
        ok = True
        for n in (256, 100 + i):
            out = np.zeros(1, np.float32)
            k(1, 256, (x, out, np.int32(n)))
            ok &= out[0] == float(i) * n
        return ok

    with ThreadPoolExecutor(8) as pool:
        assert all(pool.map(launch, range(40)))
