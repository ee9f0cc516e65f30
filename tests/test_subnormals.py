"""Float32 subnormals are kept, as in PyTorch, on every backend and in every family.

cupy.RawModule compiles with ``-ftz=true`` (subnormal inputs and results of float32
arithmetic flush to zero: ``relu(1e-40)`` gives 0); the CUDA backend compiles with
``-ftz=false`` instead (``compile_options.runtime_options``) and the emulator (g++, no
fast-math) never flushed. Each check gives one family subnormal inputs, or inputs whose
exact result is subnormal, and expects what IEEE float32 arithmetic, and so PyTorch,
gives; the same body runs on the GPU when one is present (the ``backend`` fixture). A
flush to zero fails every one of them: the last test runs them on an emulator whose
threads flush (FTZ/DAZ) and expects each to fail.

Values are multiples of ``U = 2**-140`` (subnormal: float32's smallest normal is 2**-126),
so sums, means and doublings of them are exact and the expected results need no tolerance
unless a transcendental function is involved.
"""

from __future__ import annotations

import ctypes
import platform
import shutil
import subprocess
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite import reference as ref
from cudnnlite.runtime import templates
from cudnnlite.testing import to_backend, to_numpy

U = np.float32(2.0**-140)  # ~7.2e-43
TINY = np.finfo(np.float32).smallest_subnormal  # 2**-149 ~ 1.4e-45
MIN_NORMAL = np.finfo(np.float32).tiny  # 2**-126 ~ 1.2e-38


def subnormals(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """Float32 subnormals of both signs (and a few zeros): U times integers in [-300, 300]."""
    m = np.random.default_rng(seed).integers(-300, 301, size=shape)
    x = (m * U).astype(np.float32)
    assert np.all(np.abs(x) < MIN_NORMAL) and np.count_nonzero(x) > x.size // 2
    return x


def assert_bits(got: np.ndarray, want: np.ndarray) -> None:
    """Equal as float32 values, with zeros only where the expected value is zero."""
    got = np.asarray(got, np.float32)
    np.testing.assert_array_equal(got, want.astype(np.float32))
    assert np.count_nonzero(got) == np.count_nonzero(want)


def check_activation_keeps_subnormals(backend: str) -> None:
    x = subnormals((3, 37), seed=1)
    x[0, :4] = [1e-40, -1e-40, TINY, -TINY]  # relu(1e-40) == 1e-40 as in PyTorch
    xb = to_backend(x, backend)
    assert_bits(to_numpy(cl.relu(xb)), np.maximum(x, np.float32(0)))
    # A subnormal product: 0.5 * x rounds in float32 arithmetic (numpy's too), not to 0.
    slope = np.float32(0.5)
    want = np.where(x > 0, x, slope * x)
    assert_bits(to_numpy(cl.leaky_relu(xb, 0.5)), want)


def check_convolution_keeps_subnormal_products_and_sums(backend: str) -> None:
    # 1x1 convolution, two input channels: y = 2 * x0 + 1 * x1, exact in float32 (the
    # products and their sum are multiples of U far from overflow), a subnormal result.
    x = subnormals((2, 2, 5, 7), seed=2)
    w = np.array([2.0, 1.0], np.float32).reshape(1, 2, 1, 1)
    y = to_numpy(cl.conv2d(to_backend(x, backend), to_backend(w, backend)))
    want = (2 * x[:, 0] + x[:, 1])[:, None]
    assert_bits(y, want)


def check_max_pooling_of_subnormals(backend: str) -> None:
    x = subnormals((2, 3, 6, 6), seed=3)
    y = to_numpy(cl.max_pool2d(to_backend(x, backend), 2))
    want = x.reshape(2, 3, 3, 2, 3, 2).max(axis=(3, 5))
    assert_bits(y, want)


def check_softmax_results_below_the_normal_range(backend: str) -> None:
    # exp(-90) ~ 8.2e-41 and exp(-100) ~ 3.7e-44 are float32 subnormals; tiny logits
    # (+-1e-40) change nothing next to 0. PyTorch gives the subnormals, a flush gives 0.
    x = np.array([[0.0, -90.0, -100.0, 1e-40, -1e-40]], np.float32)
    y = to_numpy(cl.softmax(to_backend(x, backend), axis=-1))
    x64 = x.astype(np.float64)
    want = np.exp(x64 - x64.max()) / np.exp(x64 - x64.max()).sum()
    assert 0 < want[0, 2] < want[0, 1] < MIN_NORMAL
    # Within a few float32 ulps of the normal terms, and a few steps of 2**-149 of the
    # subnormal ones (CUDA's expf is within 2 ulps; a subnormal's ulp is 2**-149).
    np.testing.assert_allclose(y, want, rtol=8 * 2.0**-24, atol=4 * float(TINY))
    assert np.all(y[0, 1:3] > 0)


def check_layer_norm_of_subnormal_scale_data(backend: str) -> None:
    # The variance (~1e-80) underflows to 0 next to eps in float32 and float64 alike, so
    # y = (x - mean) / sqrt(eps): the subnormal differences scaled by ~316 into the
    # normal range. A flush of x - mean (or of x) gives all zeros instead.
    x = subnormals((4, 16), seed=5)
    y = to_numpy(cl.layer_norm(to_backend(x, backend), (16,)))
    x64 = x.astype(np.float64)
    d = x64 - x64.mean(axis=1, keepdims=True)
    want = d / np.sqrt(np.mean(d * d, axis=1, keepdims=True) + 1e-5)
    assert np.count_nonzero(want) > want.size // 2 and np.abs(want).max() > MIN_NORMAL
    # A plain mean of these is exact (sum / 16 is a multiple of 2**-144); a running
    # (Welford) mean rounds each step to a multiple of 2**-149: a few of those in x - mean,
    # times 1/sqrt(eps) ~ 316, plus float32 rounding of the scale.
    np.testing.assert_allclose(y, want, rtol=2.0**-20, atol=8 * 316 * float(TINY))


def check_tensor_ops_keep_subnormals(backend: str) -> None:
    a, b = subnormals((5, 33), seed=6), subnormals((5, 33), seed=7)
    ab, bb = to_backend(a, backend), to_backend(b, backend)
    # op_tensor add with alpha2 = 2: exact (a + 2 b is a multiple of U below 2**-126 * 4).
    y = to_numpy(cl.op_tensor("add", ab, bb, alpha2=2.0))
    assert_bits(y, a + np.float32(2) * b)
    # A reduction of subnormals: exact sums (multiples of U), subnormal or just normal.
    s = to_numpy(cl.reduce_tensor(ab, "sum", axes=1))
    assert_bits(s, a.astype(np.float64).sum(axis=1).astype(np.float32))
    m = to_numpy(cl.reduce_tensor(ab, "max", axes=1))
    assert_bits(m, a.max(axis=1))


def check_dropout_scales_subnormals(backend: str) -> None:
    x = subnormals((4, 50), seed=8)
    p, seed, offset = 0.5, 1234, 0
    y = to_numpy(cl.dropout(to_backend(x, backend), p, seed, offset))
    keep = ref.dropout_mask(x.shape, p, seed, offset)
    assert_bits(y, np.where(keep, x * np.float32(2), np.float32(0)))  # 1 / (1 - p) = 2


CHECKS = [
    check_activation_keeps_subnormals,
    check_convolution_keeps_subnormal_products_and_sums,
    check_max_pooling_of_subnormals,
    check_softmax_results_below_the_normal_range,
    check_layer_norm_of_subnormal_scale_data,
    check_tensor_ops_keep_subnormals,
    check_dropout_scales_subnormals,
]


@pytest.mark.parametrize("check", CHECKS, ids=lambda c: c.__name__[len("check_") :])
def test_subnormals_kept(backend: str, check: Callable[[str], None]) -> None:
    check(backend)


FTZ_C = "#include <xmmintrin.h>\nvoid ftz_daz(void) { _mm_setcsr(_mm_getcsr() | 0x8040); }\n"


def test_every_check_fails_when_kernels_flush_subnormals(
    emulator_only: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The checks have teeth: with every emulator launch run in a thread whose SSE control
    word flushes subnormal results and inputs to zero (FTZ and DAZ, what -ftz=true does on
    the GPU; the thread's OpenMP workers inherit it), each check fails. NumPy, in this
    thread, keeps computing the expected values in IEEE arithmetic."""
    cxx = shutil.which("g++") or shutil.which("gcc")
    if platform.machine() not in ("x86_64", "AMD64") or cxx is None:
        pytest.skip("needs x86-64 (MXCSR) and a C compiler")
    lib_path = tmp_path / "libftz.so"
    src = tmp_path / "ftz.c"
    src.write_text(FTZ_C)
    subprocess.run([cxx, "-shared", "-fPIC", "-x", "c", str(src), "-o", str(lib_path)], check=True)
    ftz = ctypes.CDLL(str(lib_path)).ftz_daz

    from cudnnlite.runtime.emulator.launcher import EmulatorKernel

    launch = EmulatorKernel.__call__
    # (templates off: a replay launches without EmulatorKernel.__call__, the patched path)
    with (
        ThreadPoolExecutor(1, initializer=ftz) as flushing,
        monkeypatch.context() as mp,
        templates.disabled(),
    ):
        mp.setattr(
            EmulatorKernel, "__call__", lambda *a, **k: flushing.submit(launch, *a, **k).result()
        )
        for check in CHECKS:
            with pytest.raises(AssertionError):
                check("cpu")
