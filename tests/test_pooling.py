"""Pooling forward and backward on every backend against the float64 reference of
cudnnlite.reference.pooling.

Tolerances: max pooling selects an input value, so forward is exact and backward
sums a few dy values in float32 (a few float32 ulps; fp16/bf16 one storage rounding).
Average pooling sums at most k^3 values in float32 and rounds once to the storage type:
ELEMENTWISE_RTOL-like bounds with headroom for the sum (see ``tol``).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnnlite.ops.pooling as P
from cudnnlite import dtypes
from cudnnlite.errors import BadParamError
from cudnnlite.reference import pooling as rp
from cudnnlite.testing import to_backend, to_numpy

DTYPES = [d.numpy for d in dtypes.FLOAT_TYPES]
SHORT = {d.numpy: d.short for d in dtypes.FLOAT_TYPES}
# one rounding of the storage type (2 units for fp16/bf16 half-ulps) + float32 sums.
# fp64: inputs are multiples of 1/8, so forward sums are exact in double and the one
# division rounds once; the backward sums at most 49 (7x7 stride 1) quotients dy / div,
# each rounded once, so K * 2^-53 of the sum with K = 64: 2^-47 (~7e-15).
RTOL = {"fp32": 2e-6, "fp16": 2.0**-10, "bf16": 2.0**-7, "fp64": 2.0**-47}


def tol(dtype: Any) -> dict[str, float]:
    r = RTOL[SHORT[np.dtype(dtype)]]
    return {"rtol": r, "atol": r}


def close(got: Any, ref: np.ndarray, dtype: Any, what: str = "") -> None:
    np.testing.assert_allclose(to_numpy(got).astype(np.float64), ref, **tol(dtype), err_msg=what)


def ranked(shape: tuple[int, ...], dtype: Any, seed: int = 0) -> np.ndarray:
    """Distinct multiples of 1/8 (bf16 may round some to ties: kernel and reference
    both keep the first maximum of a window, so indices still agree)."""
    n = int(np.prod(shape))
    vals = np.random.default_rng(seed).permutation(n).astype(np.float64)
    return ((vals - n / 2) / 8).reshape(shape).astype(dtype)  # multiples of 1/8, |v| < 32


def nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], *shape[2:], shape[1])


# (shape NCHW, kernel, stride, padding, dilation, ceil_mode): ResNet-50's stem pool
# (3x3/2 pad 1, scaled 112 -> 13), VGG's 2x2/2, odd: prime sizes, ceil mode with
# the last window in the padding, dilation, 1x1 input, kernel = input.
MAX_CASES = [
    ((2, 8, 13, 13), 3, 2, 1, 1, False),
    ((2, 5, 8, 8), 2, 2, 0, 1, False),
    ((1, 3, 7, 5), (3, 2), (2, 1), (1, 1), (2, 1), True),
    ((3, 2, 5, 5), 2, 2, 1, 1, True),
    ((2, 4, 1, 1), 1, 1, 0, 1, False),
    ((1, 2, 6, 4), (6, 4), 1, 0, 1, False),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", MAX_CASES, ids=str)
def test_max_pool2d(backend: str, case, layout: str, dtype: Any) -> None:
    shape, k, s, p, d, ceil = case
    shape = nhwc(shape) if layout == "NHWC" else shape
    x = ranked(shape, dtype)
    args2 = [a if isinstance(a, tuple) else (a, a) for a in (k, s, p, d)]
    ry, ri = rp.max_pool(x, *args2, ceil, layout)
    y, ind = P.max_pool2d(to_backend(x, backend), k, s, p, d, ceil, True, layout=layout)
    assert ind.dtype == np.int64 and y.shape == ry.shape
    close(y, ry, dtype)
    np.testing.assert_array_equal(to_numpy(ind), ri)
    dy = ranked(ry.shape, dtype, 1)
    rdx = rp.max_pool_backward(dy, ri, shape, layout)
    for det in (False, True):
        dx = P.max_pool_backward(
            to_backend(dy, backend), ind, shape, k, s, p, d, ceil, layout=layout, deterministic=det
        )
        close(dx, rdx, dtype, what=f"deterministic={det}")
        if det or dtype != np.float32:
            assert P.last_kernel_name() == f"pool_bwd_{SHORT[dtype]}"
        else:
            assert P.last_kernel_name() == "maxpool_bwd_scatter_fp32"


AVG_CASES = [
    ((2, 8, 13, 13), 3, 2, 1, False, True, None),
    ((2, 8, 13, 13), 3, 2, 1, True, False, None),
    ((1, 3, 7, 6), (3, 2), (2, 3), (1, 1), True, True, None),
    ((2, 4, 5, 5), 2, 2, 1, True, True, 3),
    ((2, 6, 7, 7), 7, 1, 0, False, True, None),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", AVG_CASES, ids=str)
def test_avg_pool2d(backend: str, case, layout: str, dtype: Any) -> None:
    shape, k, s, p, ceil, cip, dov = case
    shape = nhwc(shape) if layout == "NHWC" else shape
    x = ranked(shape, dtype)
    args2 = [a if isinstance(a, tuple) else (a, a) for a in (k, s, p)]
    ry = rp.avg_pool(x, *args2, ceil, cip, dov, layout)
    y = P.avg_pool2d(to_backend(x, backend), k, s, p, ceil, cip, dov, layout=layout)
    close(y, ry, dtype)
    dy = ranked(ry.shape, dtype, 2)
    dx = P.avg_pool_backward(to_backend(dy, backend), shape, k, s, p, ceil, cip, dov, layout=layout)
    close(dx, rp.avg_pool_backward(dy, shape, *args2, ceil, cip, dov, layout), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("out", [(1, 1), (3, 2), (7, 5), (4, 4)], ids=str)
def test_adaptive_pool2d(backend: str, out, layout: str, dtype: Any) -> None:
    shape = (2, 6, 7, 5)
    shape = nhwc(shape) if layout == "NHWC" else shape
    x = ranked(shape, dtype, 3)
    xb = to_backend(x, backend)
    close(
        P.adaptive_avg_pool2d(xb, out, layout=layout), rp.adaptive_avg_pool(x, out, layout), dtype
    )
    y, ind = P.adaptive_max_pool2d(xb, out, True, layout=layout)
    ry, ri = rp.adaptive_max_pool(x, out, layout)
    close(y, ry, dtype)
    np.testing.assert_array_equal(to_numpy(ind), ri)
    dy = ranked(ry.shape, dtype, 4)
    dyb = to_backend(dy, backend)
    close(
        P.adaptive_avg_pool_backward(dyb, shape, layout=layout),
        rp.adaptive_avg_pool_backward(dy, shape, layout),
        dtype,
    )
    close(
        P.adaptive_max_pool_backward(dyb, ind, shape, layout=layout, deterministic=True),
        rp.max_pool_backward(dy, ri, shape, layout),
        dtype,
    )


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_pool1d_and_3d(backend: str, layout: str) -> None:
    x1 = ranked((2, 5, 11) if layout == "NCHW" else (2, 11, 5), np.float32, 5)
    x3 = ranked((2, 3, 5, 6, 7) if layout == "NCHW" else (2, 5, 6, 7, 3), np.float16, 6)
    b1, b3 = to_backend(x1, backend), to_backend(x3, backend)
    y, ind = P.max_pool1d(b1, 3, 2, 1, 2, True, True, layout=layout)
    ry, ri = rp.max_pool(x1, (3,), (2,), (1,), (2,), True, layout)
    close(y, ry, np.float32)
    np.testing.assert_array_equal(to_numpy(ind), ri)
    close(
        P.avg_pool1d(b1, 4, 3, 2, False, False, layout=layout),
        rp.avg_pool(x1, (4,), (3,), (2,), False, False, None, layout),
        np.float32,
    )
    close(
        P.adaptive_avg_pool1d(b1, 4, layout=layout),
        rp.adaptive_avg_pool(x1, (4,), layout),
        np.float32,
    )
    y3, i3 = P.max_pool3d(b3, (2, 3, 3), (1, 2, 2), (1, 1, 0), return_indices=True, layout=layout)
    ry3, ri3 = rp.max_pool(x3, (2, 3, 3), (1, 2, 2), (1, 1, 0), (1, 1, 1), False, layout)
    close(y3, ry3, np.float16)
    dy3 = ranked(ry3.shape, np.float16, 7)
    dx3 = P.max_pool_backward(
        to_backend(dy3, backend), i3, x3.shape, (2, 3, 3), (1, 2, 2), (1, 1, 0), layout=layout
    )
    close(dx3, rp.max_pool_backward(dy3, ri3, x3.shape, layout), np.float16)
    close(
        P.avg_pool3d(b3, 2, 2, 1, True, False, layout=layout),
        rp.avg_pool(x3, (2,) * 3, (2,) * 3, (1,) * 3, True, False, None, layout),
        np.float16,
    )
    close(
        P.adaptive_max_pool3d(b3, (2, 3, 1), layout=layout),
        rp.adaptive_max_pool(x3, (2, 3, 1), layout)[0],
        np.float16,
    )


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_global_avg_pool(backend: str, layout: str) -> None:
    # ResNet-50's head: 2048 channels at 7x7, scaled to 64
    x = ranked((2, 64, 7, 7) if layout == "NCHW" else (2, 7, 7, 64), np.float32, 8)
    y = P.global_avg_pool(to_backend(x, backend), layout=layout)
    assert y.shape == ((2, 64, 1, 1) if layout == "NCHW" else (2, 1, 1, 64))
    close(y, rp.global_avg_pool(x, 2, layout), np.float32)


@pytest.mark.parametrize("mode", P.POOLING_MODES)
def test_cudnn_modes(backend: str, mode: str) -> None:
    x = ranked((2, 3, 9, 9), np.float32, 9)
    xb = to_backend(x, backend)
    y = P.pooling_forward(xb, mode, 3, 2, 1)
    if mode.startswith("max"):
        ry, ri = rp.max_pool(x, (3, 3), (2, 2), (1, 1), (1, 1))
        dy = ranked(ry.shape, np.float32, 10)
        rdx = rp.max_pool_backward(dy, ri, x.shape)
    else:
        cip = mode == "avg_include_pad"
        ry = rp.avg_pool(x, (3, 3), (2, 2), (1, 1), False, cip)
        dy = ranked(ry.shape, np.float32, 10)
        rdx = rp.avg_pool_backward(dy, x.shape, (3, 3), (2, 2), (1, 1), False, cip)
    close(y, ry, np.float32)
    close(P.pooling_backward(to_backend(dy, backend), xb, mode, 3, 2, 1), rdx, np.float32)
    if mode == "max_deterministic":
        assert P.last_kernel_name() == "pool_bwd_fp32"


def test_nan_propagates(backend: str) -> None:
    x = np.array([[[1.0, 5.0, np.nan, 2.0, np.nan, np.nan]]], np.float32)
    y, ind = P.max_pool1d(to_backend(x, backend), 2, 2, return_indices=True)
    ry, ri = rp.max_pool(x, (2,), (2,), (0,), (1,))
    np.testing.assert_array_equal(to_numpy(y), ry)
    np.testing.assert_array_equal(to_numpy(ind), ri)
    assert to_numpy(ind).tolist() == [[[1, 2, 5]]]  # the last NaN of a window, as PyTorch


def test_strided_input_and_out(backend: str) -> None:
    base = ranked((2, 6, 10, 12), np.float32, 11)
    x = base[:, ::2, :, ::2]
    out = to_backend(np.zeros((2, 3, 5, 12), np.float32), backend)[..., ::4]
    y = P.max_pool2d(to_backend(base, backend)[:, ::2, :, ::2], 2, 2, out=out)
    assert y is out
    close(out, rp.max_pool(x, (2, 2), (2, 2), (0, 0), (1, 1))[0], np.float32)


def snapshot(*arrays: Any) -> list[bytes]:
    return [to_numpy(a).tobytes() for a in arrays]


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda x: P.max_pool2d(x, 7), "kernel_size: the kernel .* is larger than the padded"),
        (lambda x: P.max_pool2d(x, 3, 1, 2), "padding: expected at most half the kernel"),
        (lambda x: P.max_pool2d(x, 3, 0), "stride: expected values >= 1"),
        (lambda x: P.max_pool2d(x, 3, -1), "stride"),
        (lambda x: P.max_pool2d(x, 0), "kernel_size: expected values >= 1"),
        (lambda x: P.max_pool2d(x, 2, dilation=0), "dilation"),
        (lambda x: P.max_pool2d(x, (2, 2, 2)), "kernel_size: expected an int or 2 ints"),
        (lambda x: P.max_pool2d(x, 3, padding=-1), "padding: expected values >= 0"),
        (lambda x: P.avg_pool2d(x, 2, divisor_override=0), "divisor_override"),
        (lambda x: P.max_pool3d(x[0], 2), "x: expected 5 dims"),
        (lambda x: P.max_pool2d(x, 2, layout="NWHC"), "layout"),
        (lambda x: P.adaptive_avg_pool2d(x, (0, 2)), "output_size: expected positive"),
        (lambda x: P.pooling_forward(x, "min", 2), "mode: expected one of"),
        (lambda x: P.max_pool2d(x.astype(np.int32), 2), "x: expected dtype"),
        (lambda x: P.max_pool_backward(x, None, (2, 3, 8, 8), 2), "dy: expected shape"),
        (
            lambda x: P.max_pool_backward(x[:, :, :3, :3], None, (2, 3, 6, 6), 2),
            "indices: max pooling backward needs",
        ),
        (
            lambda x: P.max_pool_backward(x[:, :, :3, :3], x[:, :, :3, :3], (2, 3, 6, 6), 2),
            "indices: expected int64",
        ),
    ],
)
def test_bad_arguments(backend: str, call, match: str) -> None:
    x = to_backend(ranked((2, 3, 6, 6), np.float32, 12), backend)
    before = snapshot(x)
    with pytest.raises(BadParamError, match=match):
        call(x)
    assert snapshot(x) == before
