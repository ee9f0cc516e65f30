"""Tensor-core fragments (nvcuda::wmma) through cuda_src/selftest/wmma_selftest.cu.

Each body runs on every backend (the emulator's model in emu_wmma.h; a GPU's tensor
cores when present). Expected values: products of fp16/bf16/tf32 inputs are exact in
fp32, so the only error is fp32 accumulation: |err| <= K * 2^-24 * sum_k |a_ik b_kj|
in any summation order (the GPU's adder tree is unspecified; the emulator sums in k
order). The emulator-only tests pin its exact k-order sum and its warp-collective model.
"""

from __future__ import annotations

import numpy as np
import pytest

from cudnnlite import dtypes
from cudnnlite.runtime import backend_by_name
from cudnnlite.runtime.caps import capabilities
from cudnnlite.runtime.selftest import WMMA_SELFTEST
from cudnnlite.testing import to_backend, to_numpy


def _kernel(backend: str, name: str):
    return backend_by_name(backend).module(WMMA_SELFTEST).get_function(name)


def _gemm(backend: str, name: str, a: np.ndarray, b: np.ndarray, *extra) -> np.ndarray:
    m, k = a.shape
    n = b.shape[1] if not extra or not extra[0] else b.shape[0]
    c = np.full((m, n), np.nan, np.float32)
    cb = to_backend(c, backend)
    args = [to_backend(a, backend), to_backend(b, backend), cb, np.int32(n), np.int32(k)]
    args += [np.int32(v) for v in extra]
    _kernel(backend, name)((m // 16) * (n // 16), 32, args)
    return to_numpy(cb)


def _check_fp32_sum(got: np.ndarray, a64: np.ndarray, b64: np.ndarray) -> None:
    ref = a64 @ b64
    bound = a64.shape[1] * 2.0**-24 * (np.abs(a64) @ np.abs(b64))
    assert np.all(np.abs(got - ref) <= bound), np.max(np.abs(got - ref) - bound)


def _needs(backend: str, what: str) -> None:
    caps = capabilities(backend_by_name(backend))
    if not getattr(caps, what):
        pytest.skip(f"the device lacks {what}")


@pytest.mark.parametrize("b_col", [0, 1])
@pytest.mark.parametrize("short", ["fp16", "bf16"])
def test_gemm_16bit(backend: str, short: str, b_col: int) -> None:
    dt = {d.short: d for d in dtypes.FLOAT_TYPES}.get(short)
    if dt is None:
        pytest.skip("ml_dtypes missing")
    _needs(backend, "fp16_tensor_cores" if short == "fp16" else "bf16_tensor_cores")
    rng = np.random.default_rng(1)
    m, n, k = 32, 32, 48
    a = rng.standard_normal((m, k)).astype(dt.numpy)
    b = rng.standard_normal((k, n)).astype(dt.numpy)
    b_mem = np.ascontiguousarray(b.T) if b_col else b
    got = _gemm(backend, f"wmma_gemm_{short}", a, b_mem, b_col)
    _check_fp32_sum(got, a.astype(np.float64), b.astype(np.float64))


def _tf32(v: np.ndarray) -> np.ndarray:
    """cvt.rna.tf32.f32: nearest, ties away from zero, 10-bit mantissa."""
    u = v.astype(np.float32).view(np.uint32)
    return ((u + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def test_gemm_tf32(backend: str) -> None:
    _needs(backend, "tf32_tensor_cores")
    rng = np.random.default_rng(2)
    m, n, k = 16, 32, 24
    a = rng.standard_normal((m, k)).astype(np.float32)
    b = rng.standard_normal((k, n)).astype(np.float32)
    got = _gemm(backend, "wmma_gemm_tf32", a, b)
    _check_fp32_sum(got, _tf32(a).astype(np.float64), _tf32(b).astype(np.float64))
    # TF32 really drops bits: the exact fp32 product differs by far more than rounding.
    full = a.astype(np.float64) @ b.astype(np.float64)
    assert np.max(np.abs(got - full)) > 1e-4


def test_tf32_rounding_ties_away(emulator_only: None) -> None:
    # 1 + 2^-11 is a tie between 1 and 1 + 2^-10: away from zero gives 1 + 2^-10.
    a = np.zeros((16, 8), np.float32)
    b = np.zeros((8, 16), np.float32)
    a[0, 0], b[0, 0] = 1 + 2.0**-11, 1.0
    a[1, 0] = -(1 + 2.0**-11)
    a[2, 0] = 1 + 2.0**-12  # below the tie: rounds down
    got = _gemm("cpu", "wmma_gemm_tf32", a, b)
    assert got[0, 0] == np.float32(1 + 2.0**-10)
    assert got[1, 0] == np.float32(-(1 + 2.0**-10))
    assert got[2, 0] == np.float32(1.0)


def test_emulator_sums_in_k_order(emulator_only: None) -> None:
    # 1 + 2^-24 + 2^-24 in order rounds twice to 1; any other order of these three
    # keeps 1 + 2^-23: the emulator's documented k-order fp32 accumulation.
    a = np.zeros((16, 16), np.float16)
    b = np.zeros((16, 16), np.float16)
    a[0, :3] = [1.0, 2.0**-12, 2.0**-12]
    b[:3, 0] = [1.0, 2.0**-12, 2.0**-12]
    got = _gemm("cpu", "wmma_gemm_fp16", a, b, 0)
    assert got[0, 0] == np.float32(1.0)
    assert np.all(got[1:] == 0) and np.all(got[0, 1:] == 0)


@pytest.mark.parametrize("in_col", [0, 1])
def test_accumulator_load_store_layouts(backend: str, in_col: int) -> None:
    x = np.arange(256, dtype=np.float32).reshape(16, 16)
    out = to_backend(np.full((16, 16), np.nan, np.float32), backend)
    _kernel(backend, "wmma_acc_roundtrip")(
        1, 32, (to_backend(x, backend), out, np.float32(0.5), np.int32(in_col))
    )
    # Read with one layout, written with the other: the stored matrix is the transpose.
    np.testing.assert_array_equal(to_numpy(out), 0.5 * x.T)


@pytest.mark.parametrize("schedule", ["forward", "random"])
def test_staged_through_shared_memory(
    backend: str, monkeypatch: pytest.MonkeyPatch, schedule: str
) -> None:
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", schedule)
    rng = np.random.default_rng(3)
    k = 48
    a = rng.standard_normal((16, k)).astype(np.float16)
    b = rng.standard_normal((k, 32)).astype(np.float16)
    c = to_backend(np.full((16, 32), np.nan, np.float32), backend)
    kern = _kernel(backend, "wmma_staged_fp16")
    kern(1, 64, (to_backend(a, backend), to_backend(b, backend), c, np.int32(k), np.int32(1)))
    _check_fp32_sum(to_numpy(c), a.astype(np.float64), b.astype(np.float64))


@pytest.mark.parametrize("schedule", ["forward", "reverse", "random"])
def test_missing_barrier_before_load_shows(
    emulator_only: None, monkeypatch: pytest.MonkeyPatch, schedule: str
) -> None:
    # Without the __syncthreads between staging and the fragment loads, the first lane
    # to reach a load reads the tile before the other warp staged its half: the poisoned
    # (NaN) shared memory shows in the result, whatever the schedule.
    monkeypatch.setenv("CUDNNLITE_EMU_POISON", "1")
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", schedule)
    rng = np.random.default_rng(4)
    a = rng.standard_normal((16, 16)).astype(np.float16)
    b = rng.standard_normal((16, 32)).astype(np.float16)
    c = np.zeros((16, 32), np.float32)
    _kernel("cpu", "wmma_staged_fp16")(1, 64, (a, b, c, np.int32(16), np.int32(0)))
    assert np.isnan(c).any()


def test_partial_warp_is_an_error(emulator_only: None) -> None:
    # wmma operations are warp-wide: a warp of 16 lanes is undefined behaviour on a GPU.
    from cudnnlite.errors import ExecutionError

    x = np.zeros((16, 16), np.float32)
    with pytest.raises(ExecutionError) as info:
        _kernel("cpu", "wmma_acc_roundtrip")(1, 16, (x, x.copy(), np.float32(1), np.int32(0)))
    message = str(info.value)
    # The kernel, the call in its source, what is missing and why.
    assert "kernel wmma_acc_roundtrip" in message
    assert "load_matrix_sync at " in message and "wmma_selftest.cu:" in message
    assert "lanes 16-31, absent from the warp" in message and "needs all 32 lanes" in message
