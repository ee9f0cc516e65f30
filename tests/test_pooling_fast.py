"""The global-average-pooling reduction kernels (``gap_*``) chosen for adaptive average
pooling to 1 x ... x 1: every thread mapping (sub-warp, warp and block per NCHW plane;
channels-fastest NHWC; planes of one position), grid-stride loops, strided inputs and
``out=``, all dtypes, against the float64 reference.

Tolerance: inputs are multiples of 1/8 with |v| <= 8, so every float32 partial sum is
exact (far below 2^24 / 8); the only roundings are the float32 division by the plane
size and the store to the storage type: one rounding of the storage type (RTOL below,
two half-ulps) plus a float32 ulp.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnnlite.ops.pooling as P
from cudnnlite import dtypes
from cudnnlite.reference import pooling as rp
from cudnnlite.testing import to_backend, to_numpy

DTYPES = [d.numpy for d in dtypes.FLOAT_TYPES]
SHORT = {d.numpy: d.short for d in dtypes.FLOAT_TYPES}
# fp64: the same argument in double (the partial sums are exact, the division rounds once)
RTOL = {"fp32": 4e-7, "fp16": 2.0**-10, "bf16": 2.0**-7, "fp64": 2.0**-52}


def close(got: Any, ref: np.ndarray, dtype: Any) -> None:
    r = RTOL[SHORT[np.dtype(dtype)]]
    np.testing.assert_allclose(to_numpy(got).astype(np.float64), ref, rtol=r, atol=r * 1e-3)


def eighths(shape: tuple[int, ...], dtype: Any, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    return (rng.integers(-64, 65, size=shape) / 8).astype(dtype)


def nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], *shape[2:], shape[1])


# (NCHW shape, kernel expected for NCHW): ResNet-50's head (2048 x 7x7, scaled to 96
# channels), a tiny plane (sub-warp of 8), 4x4 (16), prime sizes, a large plane (the
# block), 1x1 planes (channels-fastest), more planes than the emulator's grid holds.
CASES = [
    ((2, 96, 7, 7), "gap_fwd_planar"),
    ((3, 5, 1, 3), "gap_fwd_planar"),
    ((2, 7, 4, 4), "gap_fwd_planar"),
    ((1, 3, 37, 31), "gap_fwd_planar"),
    ((3, 11, 1, 1), "gap_fwd_chlast"),
    ((4, 600, 2, 2), "gap_fwd_planar"),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_global_avg_pool_kernels(backend: str, case: Any, layout: str, dtype: Any) -> None:
    shape, fwd_kernel = case
    if layout == "NHWC":
        shape = nhwc(shape)
        fwd_kernel = "gap_fwd_chlast"
    x = eighths(shape, dtype, 1)
    y = P.global_avg_pool(to_backend(x, backend), layout=layout)
    assert P.last_kernel_name() == f"{fwd_kernel}_{SHORT[np.dtype(dtype)]}"
    close(y, rp.global_avg_pool(x, 2, layout), dtype)
    dy = eighths(tuple(y.shape), dtype, 2)
    dx = P.adaptive_avg_pool_backward(to_backend(dy, backend), shape, layout=layout)
    bwd_kernel = fwd_kernel.replace("fwd", "bwd")
    assert P.last_kernel_name() == f"{bwd_kernel}_{SHORT[np.dtype(dtype)]}"
    close(dx, rp.adaptive_avg_pool_backward(dy, shape, layout), dtype)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_global_avg_pool_1d_3d_strided_out(backend: str, layout: str) -> None:
    # 3-d volume through a strided (non-contiguous) view, written into a strided out=
    if layout == "NCHW":
        x = eighths((2, 6, 5, 4, 7), np.float32, 3)[:, ::2]  # (2, 3, 5, 4, 7), C strided
    else:
        x = eighths((2, 5, 4, 7, 3, 2), np.float32, 3)[..., 1]  # (2, 5, 4, 7, 3)
    assert not x.flags.c_contiguous
    xb = to_backend(x, backend)
    ref = rp.adaptive_avg_pool(x, (1, 1, 1), layout)
    out = to_backend(np.zeros((*ref.shape, 2), np.float32), backend)[..., 0]
    y = P.adaptive_avg_pool3d(xb, 1, layout=layout, out=out)
    assert y is out
    close(out, ref, np.float32)
    assert P.last_kernel_name().startswith("gap_fwd_")
    x1 = eighths((2, 5, 300) if layout == "NCHW" else (2, 300, 5), np.float16, 4)
    close(
        P.adaptive_avg_pool1d(to_backend(x1, backend), 1, layout=layout),
        rp.adaptive_avg_pool(x1, (1,), layout),
        np.float16,
    )


def test_global_avg_pool_deterministic_and_untouched(backend: str) -> None:
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 9, 40, 40)).astype(np.float32)  # block per plane
    keep = x.copy()
    xb = to_backend(x, backend)
    a = to_numpy(P.global_avg_pool(xb))
    b = to_numpy(P.global_avg_pool(xb))
    np.testing.assert_array_equal(a, b)
    np.testing.assert_array_equal(to_numpy(xb), keep)
    np.testing.assert_allclose(a, rp.global_avg_pool(x), rtol=1e-5, atol=1e-6)


def test_adaptive_not_global_keeps_generic_kernel(backend: str) -> None:
    x = eighths((2, 3, 6, 6), np.float32, 6)
    P.adaptive_avg_pool2d(to_backend(x, backend), (1, 2))
    assert P.last_kernel_name() == "pool_fwd_fp32"
    P.adaptive_max_pool2d(to_backend(x, backend), 1)
    assert P.last_kernel_name() == "pool_fwd_fp32"


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_64_bit_index_kernels(backend: str, layout: str, monkeypatch) -> None:
    # pool_fwd / pool_bwd index in 64 bits past 2^31 - 1 offsets (kernels of their own,
    # "_i64"); with the limit lowered, the same data through both gives the same bits.
    import cudnnlite.ops.pooling_kernels as PK

    shape = (2, 3, 7, 9) if layout == "NCHW" else (2, 7, 9, 3)
    x = to_backend(eighths(shape, np.float32, 9), backend)

    def run(suffix: str) -> list[np.ndarray]:
        y, ind = P.max_pool(x, 3, 2, 1, return_indices=True, layout=layout)
        dx = P.max_pool_backward(y, ind, shape, 3, 2, 1, layout=layout, deterministic=True)
        assert P.last_kernel_name() == f"pool_bwd{suffix}_fp32"
        a = P.avg_pool(x, (2, 3), 2, (1, 0), ceil_mode=True, layout=layout)
        da = P.avg_pool_backward(a, shape, (2, 3), 2, (1, 0), ceil_mode=True, layout=layout)
        assert P.last_kernel_name() == f"pool_bwd{suffix}_fp32"
        return [to_numpy(v) for v in (y, ind, dx, a, da)]

    narrow = run("")
    monkeypatch.setattr(PK, "_WIDE_PAST", 0)
    for a, b in zip(narrow, run("_i64"), strict=True):
        np.testing.assert_array_equal(a, b)
