"""The accumulation-type layer every float64 kernel builds on (cuda_src/common/
cudnnlite.cuh: cl::acc_t, to_acc, from_acc and the cl::math overloads), through
cuda_src/selftest/acc_selftest.cu on every backend: float64 must compute in double
(float would lose it past 2^-24) and the 32-bit types in float, with one rounding at
the store; double warp shuffles and atomics sum exactly."""

from __future__ import annotations

import math

import numpy as np
import pytest

from cudnnlite import dtypes
from cudnnlite.runtime import backend_by_name
from cudnnlite.runtime.selftest import acc_selftest_spec
from cudnnlite.testing import to_backend, to_numpy

_TYPES = list(dtypes.FLOAT_TYPES)


def _expected(v: np.ndarray) -> np.ndarray:
    """The 12 results of acc_math per element, in float64."""
    a = np.abs(v)
    erf = np.vectorize(math.erf)
    erfc = np.vectorize(math.erfc)
    cols = [
        np.exp(v), np.expm1(v), np.log(a + 1), np.log1p(a), np.sqrt(a), 1 / np.sqrt(a + 1),
        np.tanh(v), erf(v), erfc(v), v * v + 1, np.maximum(v, 0) - np.minimum(v, 0),
        np.sqrt(a + 1) + np.copysign(1, v) + np.floor(v) + np.rint(v),
    ]
    return np.stack(cols, axis=-1)


@pytest.mark.parametrize("dt", _TYPES, ids=lambda d: d.short)
def test_math_runs_in_the_accumulation_type(backend: str, dt: dtypes.DType) -> None:
    kernel = backend_by_name(backend).module(acc_selftest_spec(dt.ctype))
    fn = kernel.get_function(f"acc_math<{dt.ctype}>")
    # 1 + 2^-30 needs double: in float it is 1, and exp / log1p / fma would show it.
    x = np.array([-3.25, -1.0, -1e-3, 0.0, 0.5, 1.0 + 2.0**-30, 2.75, 7.5], dtype=np.float64)
    x = x.astype(dt.numpy)
    y = to_backend(np.zeros(x.size * 12, dtype=dt.numpy), backend)
    fn((1,), (32,), [to_backend(x, backend), y, np.int32(x.size)])
    got = to_numpy(y).astype(np.float64).reshape(x.size, 12)
    want = _expected(x.astype(np.float64))
    if dt.short == "fp64":
        # libm's double functions are within a few ulps (2^-52 relative); CUDA's within 2.
        np.testing.assert_allclose(got, want, rtol=8 * 2.0**-52, atol=1e-300)
        # The one that tells double from float: fma(v, v, 1) at v = 1 + 2^-30.
        assert got[5, 9] == want[5, 9] != 2.0
    else:
        # float math (a few float ulps) then one rounding to the storage type.
        rtol = {"fp32": 8 * 2.0**-23, "fp16": 2.0**-11, "bf16": 2.0**-8}[dt.short]
        np.testing.assert_allclose(got, want, rtol=rtol + 8 * 2.0**-23, atol=1e-6)


@pytest.mark.parametrize("dt", [dtypes.FLOAT32, dtypes.FLOAT64], ids=lambda d: d.short)
def test_warp_shuffle_and_atomic_sums(backend: str, dt: dtypes.DType) -> None:
    fn = backend_by_name(backend).module(acc_selftest_spec(dt.ctype)).get_function(
        f"acc_warp_sum<{dt.ctype}>"
    )
    n, blocks = 200, 4  # a partial last warp and an idle one
    # Multiples of 2^-40 around 1: exact in double, every sum too; float would round.
    x = 1.0 + np.arange(n, dtype=np.float64) * 2.0**-40
    acc = np.float64 if dt.short == "fp64" else np.float32
    sums = to_backend(np.zeros(blocks, dtype=acc), backend)
    total = to_backend(np.zeros(1, dtype=acc), backend)
    fn((blocks,), (64,), [to_backend(x.astype(dt.numpy), backend), sums, total, np.int32(n)])
    xs = x.astype(dt.numpy).astype(np.float64)
    want = np.array([xs[b * 64:(b + 1) * 64].sum() for b in range(blocks)])
    if dt.short == "fp64":
        np.testing.assert_array_equal(to_numpy(sums), want)
        assert to_numpy(total)[0] == xs.sum()
    else:
        np.testing.assert_allclose(to_numpy(sums), want, rtol=64 * 2.0**-24)


def test_exp2_ftz(backend: str) -> None:
    """cl::math::exp2_ftz (the tensor-core attention kernels' softmax exp2): 2^x within
    ex2.approx's error (PTX ISA: about 2^-22 relative), subnormal inputs read as 0 and
    results below 2^-126 flushed to 0; infinities and NaN as exp2."""
    fn = backend_by_name(backend).module(acc_selftest_spec("float")).get_function(
        "exp2_ftz_probe"
    )
    # (Not -126 itself: an approximation a hair below 2^-126 flushes on the GPU.)
    x = np.array([0.0, 1.0, -1.0, 10.5, -125.75, -126.25, -140.0, 127.5,
                  1e-40, -1e-40, -np.inf, np.inf, np.nan], dtype=np.float32)  # fmt: skip
    y = to_backend(np.zeros_like(x), backend)
    fn((1,), (32,), [to_backend(x, backend), y, np.int32(x.size)])
    got = to_numpy(y)
    want = np.exp2(x.astype(np.float64))
    want[np.abs(want) < 2.0**-126] = 0.0
    want[np.abs(x) < 2.0**-126] = 1.0  # subnormal inputs read as 0
    np.testing.assert_allclose(got, want, rtol=2.0**-21, atol=0)
    assert got[5] == 0 and got[6] == 0 and got[10] == 0  # flushed, not subnormal
    assert got[4] > 0 and np.isposinf(got[11]) and np.isnan(got[12])
