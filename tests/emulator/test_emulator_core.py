"""The execution model, checked through the self-test kernels in
cuda_src/selftest/emulator_selftest.cu.

Each behaviour is one test body run on every backend (the emulator always, CUDA
when a GPU is present); tests of emulator-only checks (divergent barriers,
deadlocks, poisoning, schedules, AddressSanitizer) carry the ``emulator_only``
fixture. Expected values are computed in Python from CUDA's documented semantics.
"""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from cudnnlite.errors import BadParamError, CompileError, ExecutionError
from cudnnlite.runtime import ModuleSpec, backend_by_name
from cudnnlite.runtime.caps import capabilities
from cudnnlite.runtime.selftest import EMULATOR_SELFTEST
from cudnnlite.testing import to_backend, to_numpy


def run(
    backend: str, name: str, grid: Any, block: Any, args: Sequence[Any], shared_mem: int = 0
) -> None:
    """Launches self-test kernel `name`; NumPy arrays in `args` are copied to the
    backend and their results copied back in place."""
    kernel = backend_by_name(backend).module(EMULATOR_SELFTEST).get_function(name)
    moved = [to_backend(a, backend) if isinstance(a, np.ndarray) else a for a in args]
    kernel(grid, block, moved, shared_mem=shared_mem)
    for a, m in zip(args, moved, strict=False):
        if isinstance(a, np.ndarray) and m is not a:
            a[...] = to_numpy(m)


@pytest.fixture
def env(monkeypatch: pytest.MonkeyPatch) -> Iterator[pytest.MonkeyPatch]:
    yield monkeypatch


# ------------------------------------------------------------------ barriers
@pytest.mark.parametrize("schedule", ["forward", "reverse", "random"])
@pytest.mark.parametrize("n", [1, 255, 256, 1000])
def test_barriers_inside_a_loop(
    backend: str, env: pytest.MonkeyPatch, schedule: str, n: int
) -> None:
    env.setenv("CUDNNLITE_EMU_SCHEDULE", schedule)
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    blocks = (n + 255) // 256
    out = np.zeros(blocks, np.float32)
    run(backend, "block_reduce_sum", blocks, 256, (x, out, np.int32(n)))
    padded = np.zeros(blocks * 256)
    padded[:n] = x
    # float32 tree sum of 256 values: error below 256 * 2^-24 * sum|x| (8 levels,
    # each rounding once) — 1e-4 relative to the 1-norm is a loose but safe bound.
    expected = padded.reshape(blocks, 256).sum(axis=1)
    scale = np.abs(padded).reshape(blocks, 256).sum(axis=1)
    assert np.all(np.abs(out - expected) <= 1e-4 * scale + 1e-6)


@pytest.mark.parametrize("active", [1, 10, 32, 33, 64])
def test_barrier_after_early_return(backend: str, active: int) -> None:
    out = np.full(64, -7, np.int32)
    run(backend, "early_exit_barrier", 1, 64, (out, np.int32(active)))
    expected = np.full(64, -7, np.int32)
    expected[:active] = 3 * (active - 1 - np.arange(active))
    np.testing.assert_array_equal(out, expected)


@pytest.mark.parametrize("modulo", [1, 2, 3, 100])
def test_syncthreads_count_and_or(backend: str, modulo: int) -> None:
    n = 96
    out = np.zeros(3 * n, np.int32)
    run(backend, "barrier_predicates", 1, n, (out, np.int32(modulo)))
    preds = np.arange(n) % modulo == 0
    got = out.reshape(n, 3)
    assert np.all(got[:, 0] == preds.sum())
    assert np.all((got[:, 1] != 0) == preds.all())
    assert np.all((got[:, 2] != 0) == preds.any())


def test_divergent_barrier_is_an_error(backend: str, emulator_only: None) -> None:
    out = np.zeros(8, np.int32)
    with pytest.raises(ExecutionError, match="divergent __syncthreads") as info:
        run(backend, "divergent_barrier", 1, 8, (out,))
    # Both barrier sites are named, with their lines.
    assert str(info.value).count("emulator_selftest.cu:") >= 2


def test_deadlock_is_an_error_not_a_hang(backend: str, emulator_only: None) -> None:
    out = np.zeros(64, np.int32)
    with pytest.raises(ExecutionError, match="deadlock") as info:
        run(backend, "planted_deadlock", 1, 64, (out,))
    assert "__syncthreads" in str(info.value) and "__syncwarp" in str(info.value)


def test_trap_is_an_execution_error(backend: str, emulator_only: None) -> None:
    with pytest.raises(ExecutionError, match="__trap"):
        run(backend, "trap_if", 2, 8, (np.int32(1),))
    run(backend, "trap_if", 2, 8, (np.int32(0),))  # and the module still works


# ------------------------------------------------------------------ warp operations
SHFL, UP, DOWN, XOR, BALLOT, ANY, ALL, SYNCWARP, ACTIVEMASK = range(9)
MATCH_ANY, MATCH_ALL, RED_ADD, RED_MIN, RED_MAX, RED_XOR = range(9, 15)


def expected_warp_op(
    op: int, mask: int, param: int, width: int, pred_mod: int, n: int
) -> np.ndarray:
    """CUDA's documented results, lane by lane, for the `warp_op` kernel."""
    out = np.full(n, -1, np.int64)
    for warp in range((n + 31) // 32):
        lanes = {lane for lane in range(32) if warp * 32 + lane < n and (mask >> lane) & 1}
        ballot = sum(1 << lane for lane in lanes if lane % pred_mod == 0)
        for lane in lanes:
            seg = lane & ~(width - 1)
            if op == SHFL:
                src = seg + (param & (width - 1))
            elif op == UP:
                src = lane if lane - param < seg else lane - param
            elif op == DOWN:
                src = lane if lane + param >= seg + width else lane + param
            elif op == XOR:
                src = lane if (lane ^ param) >= seg + width else lane ^ param
            if op in (SHFL, UP, DOWN, XOR):
                assert src in lanes, "test case reads a lane outside the mask (undefined in CUDA)"
                value = 100 + warp * 32 + src
            elif op == BALLOT:
                value = ballot
            elif op == ANY:
                value = int(ballot != 0)
            elif op == ALL:
                value = int(ballot == sum(1 << lane for lane in lanes))
            elif op == SYNCWARP:
                value = 7
            elif op == MATCH_ANY:
                value = sum(1 << other for other in lanes if other % pred_mod == lane % pred_mod)
            elif op == MATCH_ALL:
                same = len({other % pred_mod for other in lanes}) == 1
                value = sum(1 << other for other in lanes) if same else -2
            elif op == RED_ADD:
                value = sum(100 + warp * 32 + other for other in lanes)
            elif op == RED_MIN:
                value = min(other % pred_mod - other for other in lanes)
            elif op == RED_MAX:
                value = max((100 + warp * 32 + other) * 2654435761 % 2**32 for other in lanes)
            elif op == RED_XOR:
                value = 0
                for other in lanes:
                    value ^= (100 + warp * 32 + other) * 40503 % 2**32
            else:
                value = sum(1 << lane for lane in range(32) if warp * 32 + lane < n)
            out[warp * 32 + lane] = value
    return out.astype(np.uint32).view(np.int32)


WARP_CASES = [
    # (op, mask, param, width, pred_mod, threads)
    (SHFL, 0xFFFFFFFF, 5, 32, 1, 64),
    (SHFL, 0xFFFFFFFF, 3, 8, 1, 64),
    (UP, 0xFFFFFFFF, 1, 32, 1, 64),
    (UP, 0xFFFFFFFF, 3, 16, 1, 64),
    (DOWN, 0xFFFFFFFF, 2, 32, 1, 64),
    (DOWN, 0xFFFFFFFF, 4, 8, 1, 64),
    (XOR, 0xFFFFFFFF, 1, 32, 1, 64),
    (XOR, 0xFFFFFFFF, 16, 32, 1, 64),
    (XOR, 0xFFFFFFFF, 4, 8, 1, 64),
    # partial last warp (lanes 0-15): the mask names only lanes that exist
    (XOR, 0x0000FFFF, 1, 32, 1, 48),
    (BALLOT, 0x0000FFFF, 0, 32, 3, 48),
    (ANY, 0xFFFFFFFF, 0, 32, 100, 64),
    (ALL, 0xFFFFFFFF, 0, 32, 1, 64),
    (ALL, 0xFFFFFFFF, 0, 32, 2, 64),
    (SYNCWARP, 0x000000FF, 0, 32, 1, 40),
    (ACTIVEMASK, 0xFFFFFFFF, 0, 32, 1, 40),  # no mask: the lanes present
    # partial masks: lanes outside the mask skip the operation
    (SHFL, 0x0000FFFF, 3, 16, 1, 64),
    (XOR, 0x55555555, 2, 32, 1, 64),
    (DOWN, 0xFFFF0000, 1, 16, 1, 64),
    (UP, 0x0F0F0F0F, 1, 8, 1, 64),
    (BALLOT, 0x00FF00FF, 0, 32, 2, 64),
    (ANY, 0xF0000000, 0, 32, 2, 64),
    (ALL, 0x0000000F, 0, 32, 4, 64),
    (SYNCWARP, 0x80000001, 0, 32, 1, 64),
    # __match_*_sync (sm_70+) and __reduce_*_sync (sm_80+)
    (MATCH_ANY, 0xFFFFFFFF, 0, 32, 3, 64),
    (MATCH_ANY, 0x0000FFFF, 0, 32, 5, 48),
    (MATCH_ALL, 0xFFFFFFFF, 0, 32, 1, 64),
    (MATCH_ALL, 0x11111111, 0, 32, 4, 64),
    (MATCH_ALL, 0xFFFFFFFF, 0, 32, 2, 64),
    (RED_ADD, 0xFFFFFFFF, 0, 32, 1, 64),
    (RED_MIN, 0x00FF00FF, 0, 32, 3, 64),
    (RED_MAX, 0xFFFFFFFF, 0, 32, 1, 64),
    (RED_XOR, 0x0000FFFF, 0, 32, 1, 48),
]


@pytest.mark.parametrize(
    "case", WARP_CASES, ids=lambda c: f"op{c[0]}-m{c[1]:08x}-p{c[2]}-w{c[3]}-n{c[5]}"
)
def test_warp_operations(backend: str, case: tuple[int, ...]) -> None:
    op, mask, param, width, pred_mod, n = case
    if op >= RED_ADD and not capabilities(backend_by_name(backend)).bf16_tensor_cores:
        pytest.skip("__reduce_*_sync needs sm_80+")
    out = np.zeros(n, np.int32)
    run(
        backend,
        "warp_op",
        1,
        n,
        (out, np.uint32(mask), np.int32(op), np.int32(param), np.int32(width), np.int32(pred_mod)),
    )
    np.testing.assert_array_equal(out, expected_warp_op(op, mask, param, width, pred_mod, n))


@pytest.mark.parametrize("op", [XOR, BALLOT, SYNCWARP, MATCH_ANY, RED_ADD])
def test_full_mask_in_a_partial_warp_is_an_error(
    backend: str, emulator_only: None, op: int
) -> None:
    # 40 threads: warp 1 has lanes 0-7. A mask naming lanes 8-31 there is undefined
    # behaviour on a GPU (they can never execute the operation).
    out = np.zeros(40, np.int32)
    args = (out, np.uint32(0xFFFFFFFF), np.int32(op), np.int32(1), np.int32(32), np.int32(1))
    with pytest.raises(ExecutionError) as info:
        run(backend, "warp_op", 1, 40, args)
    message = str(info.value)
    assert "undefined warp operation" in message and "kernel warp_op" in message
    assert "mask 0xffffffff" in message and "emulator_selftest.cu:" in message
    assert "lanes 8-31, absent from the warp" in message and "block of 40 threads" in message


@pytest.mark.parametrize("n", [32, 48, 100])
def test_partial_warp_reduction_with_the_lanes_present(backend: str, n: int) -> None:
    x = np.arange(2 * n, dtype=np.float32)
    warps = (n + 31) // 32
    out = np.zeros(2 * warps, np.float32)
    run(backend, "partial_warp_reduce", 2, n, (x, out, np.int32(0)))
    expected = [
        x[b * n + w * 32 : b * n + min(n, (w + 1) * 32)].sum() for b in (0, 1) for w in range(warps)
    ]
    np.testing.assert_array_equal(out, np.array(expected, np.float32))


@pytest.mark.parametrize("schedule", ["forward", "reverse"])
def test_planted_warp_ub_is_an_error(
    backend: str, emulator_only: None, env: pytest.MonkeyPatch, schedule: str
) -> None:
    env.setenv("CUDNNLITE_EMU_SCHEDULE", schedule)
    # Full mask in the partial warp of a 48-thread block: lanes 16-31 do not exist.
    x, out = np.ones(48, np.float32), np.zeros(2, np.float32)
    with pytest.raises(
        ExecutionError,
        match=r"__shfl_down_sync at .*emulator_selftest\.cu:\d+ "
        r"with mask 0xffffffff in warp 1 names lanes 16-31, absent",
    ):
        run(backend, "partial_warp_reduce", 1, 48, (x, out, np.int32(1)))
    # Lanes 16-31 of each warp return, the others shuffle with the full mask. The lanes
    # exit before the others arrive (reverse) or while they wait (forward): both are errors.
    out = np.zeros(64, np.int32)
    with pytest.raises(ExecutionError) as info:
        run(backend, "planted_warp_op_after_exit", 1, 64, (out, np.int32(16)))
    message = str(info.value)
    assert "kernel planted_warp_op_after_exit" in message and "__shfl_sync at" in message
    assert "mask 0xffffffff" in message
    if schedule == "reverse":
        assert "names lanes 16-31, which exited before it" in message
    else:
        assert "lane 16 of warp 0 exited while lanes 0-15 wait in __shfl_sync" in message
    run(backend, "planted_warp_op_after_exit", 1, 64, (out, np.int32(32)))  # nobody exits
    np.testing.assert_array_equal(out, np.repeat([0, 32], 32))


def test_warp_butterfly_reduction(backend: str) -> None:
    x = np.arange(128, dtype=np.float32)
    out = np.zeros(128, np.float32)
    run(backend, "warp_reduce", 2, 64, (x, out))
    np.testing.assert_array_equal(out, np.repeat(x.reshape(4, 32).sum(axis=1), 32))


# ------------------------------------------------------------------ memory
def test_atomics_across_blocks(backend: str) -> None:
    blocks, threads, wrap = 64, 128, 1000
    total = blocks * threads
    counters = np.array([0, 0, -(2**31), 2**31 - 1, 0, 0, -1], np.int32)
    fsum = np.zeros(1, np.float32)
    dsum = np.zeros(1, np.float64)
    run(backend, "atomics", blocks, threads, (counters, fsum, dsum, np.uint32(wrap)))
    gid = np.arange(total)
    assert counters[0] == total
    assert counters.view(np.uint32)[1] == 2 * total
    assert counters[2] == total - 1
    assert counters[3] == -(total - 1)
    assert counters[4] == total  # CAS loop: no lost update
    assert counters[5] == total % (wrap + 1)  # atomicInc wraps to 0 past `wrap`
    assert 0 <= counters[6] < total
    assert fsum[0] == (gid % 4).sum()  # small integers: every float sum is exact
    assert dsum[0] == (gid % 8).sum()


@pytest.mark.parametrize("n", [1, 31, 100, 128])
def test_dynamic_shared_memory(backend: str, n: int) -> None:
    x = np.arange(n, dtype=np.float32)
    y = np.zeros(n, np.float32)
    run(backend, "dynamic_reverse", (n + 31) // 32, 32, (x, y, np.int32(n)), shared_mem=32 * 4)
    expected = np.concatenate([chunk[::-1] for chunk in np.split(x, range(32, n, 32))])
    np.testing.assert_array_equal(y, expected)


@pytest.mark.parametrize("mnk", [(16, 16, 16), (37, 29, 53), (1, 70, 3)])
def test_tiled_matmul(backend: str, mnk: tuple[int, int, int]) -> None:
    m, n, k = mnk
    rng = np.random.default_rng(0)
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    c = np.zeros((m, n), np.float32)
    run(
        backend,
        "tiled_matmul",
        ((n + 15) // 16, (m + 15) // 16),
        (16, 16),
        (a, b, c, np.int32(m), np.int32(n), np.int32(k)),
    )
    # fp32 dot products of length k: error <= k * 2^-24 * sum|a||b|.
    bound = k * 2.0**-23 * (np.abs(a.astype(np.float64)) @ np.abs(b.astype(np.float64)))
    assert np.all(np.abs(c - a.astype(np.float64) @ b.astype(np.float64)) <= bound + 1e-6)


def test_half_and_bfloat16_rounding_in_kernels(backend: str) -> None:
    rng = np.random.default_rng(1)
    a = (rng.standard_normal(4096) * np.exp(rng.uniform(-8, 8, 4096))).astype(np.float32)
    b = (rng.standard_normal(4096) * np.exp(rng.uniform(-8, 8, 4096))).astype(np.float32)
    out = np.zeros(6 * 4096, np.float32)
    run(backend, "half_bf16_ops", 16, 256, (a, b, out, np.int32(4096)))
    got = out.reshape(4096, 6)
    ha, hb = a.astype(np.float16), b.astype(np.float16)
    # NumPy's float16 operations round once, to nearest even, like CUDA's __hadd/__hmul.
    np.testing.assert_array_equal(got[:, 0], ha.astype(np.float32))
    with np.errstate(over="ignore"):  # products past 65504 round to inf, as on the GPU
        np.testing.assert_array_equal(got[:, 1], (ha + hb).astype(np.float32))
        np.testing.assert_array_equal(got[:, 2], (ha * hb).astype(np.float32))
    ml_dtypes = pytest.importorskip("ml_dtypes")
    bf = ml_dtypes.bfloat16
    ba, bb = a.astype(bf), b.astype(bf)
    np.testing.assert_array_equal(got[:, 3], ba.astype(np.float32))
    np.testing.assert_array_equal(got[:, 4], (ba + bb).astype(np.float32))
    np.testing.assert_array_equal(got[:, 5], (ba * bb).astype(np.float32))


# ------------------------------------------------------------------ emulator checks
def test_schedule_switch_catches_a_missing_barrier(
    backend: str, emulator_only: None, env: pytest.MonkeyPatch
) -> None:
    expected = np.concatenate([[-1.0], np.arange(255.0)]).astype(np.float32)
    out = np.zeros(256, np.float32)
    env.setenv("CUDNNLITE_EMU_SCHEDULE", "forward")
    run(backend, "planted_missing_barrier", 1, 256, (out,))
    np.testing.assert_array_equal(out, expected)  # the bug hides in program order
    for schedule in ("reverse", "random"):
        env.setenv("CUDNNLITE_EMU_SCHEDULE", schedule)
        out[:] = 0
        run(backend, "planted_missing_barrier", 1, 256, (out,))
        assert not np.array_equal(out, expected), f"{schedule} schedule did not expose the bug"


def test_random_schedule_is_reproducible_by_seed(
    backend: str, emulator_only: None, env: pytest.MonkeyPatch
) -> None:
    env.setenv("CUDNNLITE_EMU_SCHEDULE", "random")
    env.setenv("CUDNNLITE_EMU_THREADS", "1")
    results = []
    for seed in (1, 1, 2):
        env.setenv("CUDNNLITE_EMU_SEED", str(seed))
        out = np.zeros(256, np.float32)
        run(backend, "planted_missing_barrier", 1, 256, (out,))
        results.append(out)
    np.testing.assert_array_equal(results[0], results[1])
    assert not np.array_equal(results[0], results[2])


def test_poisoning_catches_a_read_before_write(
    backend: str, emulator_only: None, env: pytest.MonkeyPatch
) -> None:
    out = np.zeros(64, np.float32)
    env.setenv("CUDNNLITE_EMU_POISON", "1")
    run(backend, "planted_read_before_write", 1, 64, (out,))
    assert np.all(np.isnan(out[::2])), "odd slots were never written: poison must show"
    assert np.all(out[1::2] == 1.0)
    env.setenv("CUDNNLITE_EMU_POISON", "0")
    # Without poisoning the stale bytes are whatever the last block left.
    run(
        backend,
        "dynamic_reverse",
        1,
        32,
        (np.ones(32, np.float32), np.zeros(32, np.float32), np.int32(32)),
        shared_mem=128,
    )


def test_dynamic_shared_memory_is_poisoned(backend: str, emulator_only: None) -> None:
    # 10 elements through a 32-thread block: tile slots 10..31 are never written
    # and never read; the result must still be exact (the kernel guards the read).
    x = np.arange(10, dtype=np.float32)
    y = np.zeros(10, np.float32)
    run(backend, "dynamic_reverse", 1, 32, (x, y, np.int32(10)), shared_mem=128)
    np.testing.assert_array_equal(y, x[::-1])


def test_address_sanitizer_catches_out_of_bounds(
    backend: str, emulator_only: None, env: pytest.MonkeyPatch
) -> None:
    env.setenv("CUDNNLITE_EMU_ASAN", "1")
    x = np.zeros(100, np.float32)
    with pytest.raises(ExecutionError, match="AddressSanitizer"):
        run(backend, "planted_out_of_bounds", 1, 128, (x, np.int32(100)))
    # In bounds: no report, and results come back from the ASan copies.
    y = np.zeros(101, np.float32)
    run(backend, "planted_out_of_bounds", 1, 128, (y, np.int32(100)))
    assert np.all(y == 1.0)


@pytest.mark.parametrize("switch", ["CUDNNLITE_EMU_ASAN", "CUDNNLITE_EMU_ALIGNCHECK"])
def test_checking_builds_catch_misaligned_accesses(
    backend: str, emulator_only: None, env: pytest.MonkeyPatch, switch: str
) -> None:
    # A float4 load 4 bytes past a 16-byte boundary faults on a GPU ("misaligned address");
    # the ASan build's alignment check (or the alignment check alone) makes it a kernel
    # error naming the type and site.
    env.setenv(switch, "1")
    x = np.arange(40, dtype=np.float32)
    y = np.zeros((8, 4), np.float32)
    with pytest.raises(ExecutionError, match=r"misaligned access: .*float4.* needs 16-byte"):
        run(backend, "planted_misaligned", 1, 8, (x, y, np.int32(1), np.int32(8)))
    run(backend, "planted_misaligned", 1, 8, (x, y, np.int32(4), np.int32(8)))  # aligned
    np.testing.assert_array_equal(y, x[4:36].reshape(8, 4))


def test_fiber_switch_is_measurable(backend: str, emulator_only: None) -> None:
    module = backend_by_name("cpu").module(EMULATOR_SELFTEST)
    assert module.measure_switch_ns(10_000) > 0  # the figure itself is a benchmark's


# ------------------------------------------------------------------ launch arguments
def test_arguments_are_checked_against_the_kernel_signature(
    backend: str, emulator_only: None
) -> None:
    kernel = backend_by_name("cpu").module(EMULATOR_SELFTEST).get_function("block_reduce_sum")
    x, out = np.zeros(4, np.float32), np.zeros(1, np.float32)
    with pytest.raises(BadParamError, match="takes 3 arguments"):
        kernel(1, 4, (x, out))
    with pytest.raises(BadParamError, match="argument 2 .*int32"):
        kernel(1, 4, (x, out, 4))  # a Python int: its C type is ambiguous
    with pytest.raises(BadParamError, match="argument 2 .*int32"):
        kernel(1, 4, (x, out, np.int64(4)))
    with pytest.raises(BadParamError, match="argument 0 .*NumPy array"):
        kernel(1, 4, ([0.0] * 4, out, np.int32(4)))


@pytest.mark.parametrize("block", [0, 1025, (32, 33)])
def test_bad_launch_configuration(backend: str, emulator_only: None, block: Any) -> None:
    kernel = backend_by_name("cpu").module(EMULATOR_SELFTEST).get_function("trap_if")
    with pytest.raises((BadParamError, ExecutionError), match="block"):
        kernel(1, block, (np.int32(0),))


def test_unknown_kernel_name(backend: str) -> None:
    with pytest.raises(BadParamError, match="not among the names"):
        backend_by_name(backend).module(EMULATOR_SELFTEST).get_function("no_such_kernel")


# ------------------------------------------------------------------ compile errors
def _spec_for(tmp_path: Path, body: str, defines: dict[str, object] | None = None) -> ModuleSpec:
    src = tmp_path / "k.cu"
    src.write_text('#include "common/cudnnlite.cuh"\n' + textwrap.dedent(body))
    return ModuleSpec.make(str(src), ["k"], defines or {"TILE": 8})


def test_compile_error_names_kernel_defines_and_message(
    backend: str, emulator_only: None, tmp_path: Path
) -> None:
    spec = _spec_for(tmp_path, 'extern "C" __global__ void k(float* x) { x[0] = undeclared_name; }')
    with pytest.raises(CompileError) as info:
        backend_by_name("cpu").module(spec)
    message = str(info.value)
    assert "k.cu" in message and "TILE" in message and "undeclared_name" in message


def test_extern_shared_is_refused_with_the_convention(
    backend: str, emulator_only: None, tmp_path: Path
) -> None:
    spec = _spec_for(
        tmp_path, 'extern "C" __global__ void k(float* x) { extern __shared__ float s[]; }'
    )
    with pytest.raises(CompileError, match="DYNAMIC_SHARED"):
        backend_by_name("cpu").module(spec)


def test_inline_ptx_is_refused(backend: str, emulator_only: None, tmp_path: Path) -> None:
    spec = _spec_for(
        tmp_path,
        """
        extern "C" __global__ void k(unsigned* x) {
            unsigned lane;
            asm volatile("mov.u32 %0, %%laneid;" : "=r"(lane));
            x[0] = lane;
        }
        """,
    )
    with pytest.raises(CompileError, match="inline PTX"):
        backend_by_name("cpu").module(spec)


def test_compiled_modules_are_cached_on_disk(
    backend: str, emulator_only: None, tmp_path: Path
) -> None:
    from cudnnlite.runtime.emulator.launcher import EmulatorModule

    spec = _spec_for(tmp_path, 'extern "C" __global__ void k(float* x) { x[threadIdx.x] = 2.0f; }')
    first = EmulatorModule(spec, asan=False)
    second = EmulatorModule(spec, asan=False)
    assert first.path == second.path and first.path.exists()
    x = np.zeros(4, np.float32)
    second.get_function("k")(1, 4, (x,))
    assert np.all(x == 2.0)
    # A changed define is another library.
    other = EmulatorModule(ModuleSpec.make(spec.source, spec.names, {"TILE": 16}), asan=False)
    assert other.path != first.path


def test_environment_switch_values_are_checked(
    backend: str, emulator_only: None, env: pytest.MonkeyPatch
) -> None:
    env.setenv("CUDNNLITE_EMU_SCHEDULE", "sideways")
    with pytest.raises(BadParamError, match="CUDNNLITE_EMU_SCHEDULE"):
        run(backend, "trap_if", 1, 1, (np.int32(0),))


def test_threads_of_a_block_share_static_shared_memory_only_within_the_block(backend: str) -> None:
    # Many blocks on several OS threads at once, each reducing its own slice.
    n = 256 * 97
    x = np.ones(n, np.float32)
    out = np.zeros(97, np.float32)
    run(backend, "block_reduce_sum", 97, 256, (x, out, np.int32(n)))
    assert np.all(out == 256.0)


if os.environ.get("CUDNNLITE_EMU_ASAN") == "1":  # pragma: no cover
    pytest.skip("the suite itself must not run under the ASan switch", allow_module_level=True)
