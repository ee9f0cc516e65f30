"""Cooperative launches and the grid-wide barrier (cuda_src/common/grid_sync.cuh),
checked through cuda_src/selftest/grid_sync_selftest.cu on every backend; the planted
faults (a block that never arrives, a barrier mixed with __syncthreads, a grid too
large to be co-resident, a wrong target) are emulator-only checks and must end in a
clear error, never a hang. Also the CUDA glue of cooperative launches, with a
stand-in for CuPy."""

from __future__ import annotations

import re
import sys
import threading
import types
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import pytest

from cudnnlite.errors import ExecutionError, NotSupportedError
from cudnnlite.runtime import backend_by_name
from cudnnlite.runtime.cuda import CudaKernel
from cudnnlite.runtime.emulator import build, launcher
from cudnnlite.runtime.selftest import GRID_SYNC_SELFTEST
from cudnnlite.testing import to_backend, to_numpy

# A launch that should take milliseconds; past this it hangs (a broken barrier).
HANG_SECONDS = 30.0


def run(
    backend: str, name: str, grid: Any, block: Any, args: Sequence[Any], cooperative: bool = True
) -> None:
    """Launches self-test kernel `name`; NumPy arrays in `args` are copied to the
    backend and their results copied back in place."""
    kernel = backend_by_name(backend).module(GRID_SYNC_SELFTEST).get_function(name)
    moved = [to_backend(a, backend) if isinstance(a, np.ndarray) else a for a in args]
    kernel(grid, block, moved, cooperative=cooperative)
    for a, m in zip(args, moved, strict=False):
        if isinstance(a, np.ndarray) and m is not a:
            a[...] = to_numpy(m)


def within_timeout(fn: Callable[[], None], seconds: float = HANG_SECONDS) -> None:
    """Runs `fn` on a daemon thread (ctypes releases the GIL) and re-raises what it
    raised; a hang fails the test instead of stalling the suite."""
    result: list[BaseException | None] = []

    def target() -> None:
        try:
            fn()
            result.append(None)
        except BaseException as exc:  # handed to the test thread
            result.append(exc)

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    if thread.is_alive():
        pytest.fail(f"the launch hung for more than {seconds} s")
    if result[0] is not None:
        raise result[0]


def exchange(backend: str, grid: Any, threads: int, rounds: int) -> None:
    num_blocks = int(np.prod(grid))
    slots = np.full(2 * num_blocks * threads, -(10**6), np.int32)  # never a written value
    out = np.zeros(num_blocks * threads, np.int64)
    counter = np.zeros(1, np.uint32)
    args = (slots, out, counter, np.int32(rounds))
    within_timeout(lambda: run(backend, "grid_exchange", grid, threads, args))
    # Each thread t sums, over rounds r and blocks c, (r * B + c) * T + t + 1: exact in
    # integers, so any read before another block's write shows.
    r = np.arange(rounds)[:, None, None]
    c = np.arange(num_blocks)[None, :, None]
    t = np.arange(threads)[None, None, :]
    per_thread = ((r * num_blocks + c) * threads + t + 1).sum(axis=(0, 1))
    np.testing.assert_array_equal(
        out.reshape(num_blocks, threads), np.tile(per_thread, (num_blocks, 1))
    )
    # Every block added one per barrier, as on the GPU.
    assert counter[0] == rounds * num_blocks


@pytest.mark.parametrize("schedule", ["forward", "reverse", "random"])
def test_blocks_see_each_other_after_every_barrier(
    backend: str, monkeypatch: pytest.MonkeyPatch, schedule: str
) -> None:
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", schedule)
    exchange(backend, 6, 64, rounds=5)


def test_multidimensional_grid_and_one_block(backend: str) -> None:
    exchange(backend, (2, 2, 2), 32, rounds=3)
    exchange(backend, 1, 33, rounds=2)  # a lone block passes its barriers alone


def test_grid_too_large_to_be_co_resident(backend: str) -> None:
    bk = backend_by_name(backend)
    kernel = bk.module(GRID_SYNC_SELFTEST).get_function("grid_sync_once")
    limit = bk.max_cooperative_blocks(kernel, 64, 0)
    assert limit >= 1
    counter = to_backend(np.zeros(1, np.uint32), backend)
    with pytest.raises(
        NotSupportedError, match=f"{limit + 1} blocks of 64 threads.*at most {limit}"
    ):
        kernel(limit + 1, 64, (counter, np.uint32(0), np.int32(-1), np.int32(0)), cooperative=True)


# ------------------------------------------------------------------ emulator only


def test_limits_match_the_header(backend: str, emulator_only: None) -> None:
    header = (build.INCLUDE_DIR / "cuda_emu.h").read_text()
    for name, value in (
        ("kMaxCooperativeBlocks", launcher.MAX_COOPERATIVE_BLOCKS),
        ("kMaxCooperativeThreads", launcher.MAX_COOPERATIVE_THREADS),
    ):
        assert re.search(rf"constexpr int {name} = {value};", header), name
    assert launcher.max_cooperative_blocks(1) == launcher.MAX_COOPERATIVE_BLOCKS
    assert launcher.max_cooperative_blocks(1024) == launcher.MAX_COOPERATIVE_THREADS // 1024


def test_native_limit_is_a_clear_error(
    backend: str, emulator_only: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Past the Python check (as if it were missing), the emulator itself refuses.
    kernel = backend_by_name("cpu").module(GRID_SYNC_SELFTEST).get_function("grid_sync_once")
    monkeypatch.setattr(type(kernel), "max_cooperative_blocks", lambda *a: 10**6)
    n = launcher.MAX_COOPERATIVE_BLOCKS + 1
    args = (np.zeros(1, np.uint32), np.uint32(n), np.int32(-1), np.int32(0))
    with pytest.raises(ExecutionError, match=f"cooperative launch of {n} blocks.*at most"):
        kernel(n, 1, args, cooperative=True)


def once(
    quitter: int = -1,
    mixed: int = 0,
    target: int | None = None,
    counter0: int = 0,
    blocks: int = 6,
    cooperative: bool = True,
) -> None:
    """One grid_sync_once launch of `blocks` blocks of 64 threads on the emulator."""
    counter = np.full(1, counter0, np.uint32)
    target = blocks if target is None else target
    args = (counter, np.uint32(target), np.int32(quitter), np.int32(mixed))
    within_timeout(lambda: run("cpu", "grid_sync_once", blocks, 64, args, cooperative))


@pytest.mark.parametrize("schedule", ["forward", "random"])
def test_a_block_that_exits_early_is_named(
    backend: str, emulator_only: None, monkeypatch: pytest.MonkeyPatch, schedule: str
) -> None:
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", schedule)
    named = r"block \(3,0,0\) exited while \d blocks? wait at grid_sync \(.*selftest\.cu:\d+\)"
    with pytest.raises(ExecutionError, match=named):
        once(quitter=3)
    once()  # and the module still works


def test_grid_sync_needs_a_cooperative_launch(backend: str, emulator_only: None) -> None:
    with pytest.raises(ExecutionError, match="grid_sync needs a cooperative launch"):
        once(cooperative=False)


def test_grid_sync_mixed_with_syncthreads_is_divergent(backend: str, emulator_only: None) -> None:
    with pytest.raises(ExecutionError, match="divergent __syncthreads") as info:
        once(mixed=1)
    assert "grid_sync at" in str(info.value) and "__syncthreads at" in str(info.value)


def test_wrong_target_or_dirty_counter_is_an_error(backend: str, emulator_only: None) -> None:
    with pytest.raises(ExecutionError, match=r"target 5 .* \(k \+ 1\) \* num_blocks = 6"):
        once(target=5)
    with pytest.raises(ExecutionError, match="counter is 7 .* expected 6: zero the counter"):
        once(counter0=1)


# ------------------------------------------------------------------ CUDA glue


class FakeFunction:
    """cupy.cuda.Function: records launches."""

    ptr = 1234

    def __init__(self) -> None:
        self.calls: list[tuple[Any, ...]] = []

    def __call__(
        self,
        grid: Any,
        block: Any,
        args: Any,
        shared_mem: int = 0,
        stream: Any = None,
        enable_cooperative_groups: bool = False,
    ) -> None:
        self.calls.append((grid, block, shared_mem, enable_cooperative_groups))


class FakeRawKernel:
    """cupy.RawKernel: its Function is `.kernel`."""

    def __init__(self) -> None:
        self.kernel = FakeFunction()
        self.max_dynamic_shared_size_bytes = 0
        self.calls: list[tuple[Any, ...]] = []

    def __call__(self, grid: Any, block: Any, args: Any, shared_mem: int = 0) -> None:
        self.calls.append((grid, block, shared_mem))


@pytest.fixture
def fake_cupy(monkeypatch: pytest.MonkeyPatch) -> list[tuple[int, int, int]]:
    """A CuPy stand-in: 132 SMs; occupancy 2 blocks per SM up to 256 threads, else 1.
    Returns the log of occupancy queries (function pointer, threads, shared memory)."""
    queries: list[tuple[int, int, int]] = []

    def occupancy(func: int, threads: int, smem: int) -> int:
        queries.append((func, threads, smem))
        return 2 if threads <= 256 else 1

    runtime = types.SimpleNamespace(
        getDevice=lambda: 0,
        cudaDevAttrMultiProcessorCount=16,
        deviceGetAttribute=lambda attr, dev: 132 if attr == 16 and dev == 0 else -1,
    )
    cupy = types.ModuleType("cupy")
    cupy.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        runtime=runtime,
        driver=types.SimpleNamespace(occupancyMaxActiveBlocksPerMultiprocessor=occupancy),
    )
    monkeypatch.setitem(sys.modules, "cupy", cupy)
    return queries


def test_cuda_cooperative_launch_checks_the_grid_then_uses_the_cooperative_path(
    fake_cupy: list[tuple[int, int, int]],
) -> None:
    kernel = CudaKernel(GRID_SYNC_SELFTEST, "grid_exchange", FakeRawKernel())
    assert kernel.max_cooperative_blocks(256) == 264
    assert kernel.max_cooperative_blocks(512, 64 * 1024) == 132
    assert fake_cupy == [(1234, 256, 0), (1234, 512, 64 * 1024)]
    # Over 48 KiB the opt-in precedes the occupancy query (it counts only after it).
    assert kernel.function.max_dynamic_shared_size_bytes == 64 * 1024
    kernel(264, 256, (np.int32(0),), cooperative=True)
    kernel(8, 256, (np.int32(0),))
    assert kernel.function.kernel.calls == [((264, 1, 1), (256, 1, 1), 0, True)]
    assert kernel.function.calls == [((8, 1, 1), (256, 1, 1), 0)]
    assert len(fake_cupy) == 2  # cached per (device, threads, shared memory)
    with pytest.raises(NotSupportedError, match="265 blocks of 256 threads.*at most 264"):
        kernel(265, 256, (np.int32(0),), cooperative=True)
    with pytest.raises(NotSupportedError, match="at most 132"):
        kernel((12, 12), (32, 16), (np.int32(0),), shared_mem=64 * 1024, cooperative=True)
    assert len(kernel.function.kernel.calls) == 1  # nothing launched past the limit
