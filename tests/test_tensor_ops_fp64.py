"""cuDNN's tensor operations in float64 (issue 18): reductions that accumulate in double
on every kernel (thread, warp, block, split), exact alpha / beta / values, conversions from
and to float64 that round once, NaN, and the errors for mixed dtypes and scalars.

(The dtype parametrizations of test_tensor_ops.py also run float64: every op, reduction,
conversion pair and fast path against the float64 reference.)

Tolerances, u = 2^-53: one double operation rounds by <= u relative, an fma by u once;
a sum whose terms and partial sums are all exact in double is compared bit for bit.
"""

from __future__ import annotations

import numpy as np
import pytest

from cudnnlite import dtypes
from cudnnlite import reference as ref
from cudnnlite.errors import BadParamError
from cudnnlite.ops.reduce import reduce_tensor
from cudnnlite.ops.tensor import (
    add_tensor,
    last_kernel_name,
    nchw_to_nhwc,
    op_tensor,
    scale_tensor,
    set_tensor,
    transform_tensor,
)
from cudnnlite.testing import to_backend, to_numpy

U = 2.0**-53
BF16 = dtypes.BFLOAT16.numpy if dtypes.HAVE_BFLOAT16 else None  # (ml_dtypes may be missing)

# (shape, axes, kernel on the emulator): each reduction kernel once
REDUCE_CASES = [
    ((1 << 16,), None, "split_block"),  # one output: chunks, then the finish pass
    ((600, 40), 0, "split_thread"),  # kept contiguous dim, few outputs: chunks
    ((64, 4096), 1, "block"),  # long rows, enough outputs
    ((8, 1000), 1, "warp"),
    ((40, 16384), 0, "thread"),  # many outputs along the contiguous dim
]


@pytest.mark.parametrize("case", REDUCE_CASES, ids=lambda c: c[2])
def test_sum_keeps_terms_float32_would_drop(backend: str, case) -> None:
    """1 + n * 2^-30: every partial sum is exact in double (31 significant bits), so the
    result is exact; float32 (24 bits) drops each 2^-30 added to 1."""
    shape, axes, kind = case
    x = np.full(shape, 2.0**-30)
    x[(0,) * x.ndim] = 1.0  # the first output's first term
    if x.ndim == 2 and axes == 0:
        x[0, :] = 1.0
    elif x.ndim == 2:
        x[:, 0] = 1.0
    xb = to_backend(x, backend)
    got = to_numpy(reduce_tensor(xb, "sum", axes))
    if backend == "cpu":
        assert last_kernel_name() == f"tensor_reduce_{kind}_fp64"
    n = x.size // got.size - 1  # the small terms per output
    np.testing.assert_array_equal(got, np.full(got.shape, 1.0 + n * 2.0**-30))
    assert np.float32(1.0) + np.float32(2.0**-30) == np.float32(1.0)  # float32 would drop it
    # norm1 and avg the same way; avg = the exact sum divided once (u)
    np.testing.assert_array_equal(to_numpy(reduce_tensor(xb, "norm1", axes)), got)
    avg = to_numpy(reduce_tensor(xb, "avg", axes))
    np.testing.assert_allclose(avg, got / (n + 1), rtol=U, atol=0)


def test_reduce_alpha_beta_exact_and_nan(backend: str) -> None:
    x = np.random.default_rng(1).standard_normal((3, 7, 5))
    prior = np.random.default_rng(2).standard_normal((3, 5))
    out = to_backend(prior, backend)
    reduce_tensor(to_backend(x, backend), "max", 1, alpha=0.1, beta=-1 / 3, out=out)
    # max is exact; alpha * v rounds as NumPy's, then the kernel's fma rounds once and
    # NumPy's product and sum twice: 3 u of the terms. A float32 alpha or beta (0.1f,
    # -1/3f) would be off by ~1e-8 relative.
    v = x.max(axis=1)
    want = 0.1 * v + (-1 / 3) * prior
    bound = 3 * U * (np.abs(0.1 * v) + np.abs(prior / 3))
    assert np.all(np.abs(to_numpy(out) - want) <= bound)
    x[1, 4, 2] = np.nan
    x[2, 0, 3] = 1e300  # beyond float32: stays finite in double
    vals, idx = reduce_tensor(to_backend(x, backend), "amax", 1, return_indices=True)
    vals, idx = to_numpy(vals), to_numpy(idx)
    assert np.isnan(vals[1, 2]) and idx[1, 2] == 4 and vals[2, 3] == 1e300 and idx[2, 3] == 0
    want_v, want_i = ref.reduce_tensor(x, "amax", 1)
    np.testing.assert_array_equal(vals, want_v)
    np.testing.assert_array_equal(idx, want_i)


def test_elementwise_scalars_are_exact(backend: str) -> None:
    rng = np.random.default_rng(3)
    a = rng.standard_normal((2, 6, 5, 7))
    b = rng.standard_normal((1, 6, 1, 1))  # per channel: the bias fast path
    c = rng.standard_normal(a.shape)
    # one multiply, one operation, one fma in double: 4 u of the magnitudes (0.1f and
    # 1/3f would be ~1e-8 relative away)
    for op in ("add", "mul", "min", "max"):
        out = to_backend(c.copy(), backend)
        op_tensor(op, to_backend(a, backend), to_backend(b, backend), alpha1=0.1,
                  alpha2=-1 / 3, beta=0.7, out=out)  # fmt: skip
        assert last_kernel_name().startswith("tensor_channel_") and "fp64" in last_kernel_name()
        want = ref.op_tensor(op, a, b, 0.1, -1 / 3, 0.7, c)
        mag = np.abs(ref.op_tensor(op, a, b, 0.1, -1 / 3)) + np.abs(0.7 * c)
        assert np.all(np.abs(to_numpy(out) - want) <= 4 * U * mag), op
    # add_tensor (vector path: same shape, aligned), scale_tensor, set_tensor
    cb = to_backend(c.copy(), backend)
    add_tensor(to_backend(a, backend), cb, alpha=0.1, beta=0.3)
    assert last_kernel_name() == "tensor_binary_vec2_fp64"
    err = np.abs(to_numpy(cb) - (0.1 * a + 0.3 * c))
    assert np.all(err <= 4 * U * (np.abs(0.1 * a) + np.abs(0.3 * c)))
    y = to_backend(a.copy(), backend)
    scale_tensor(y, 0.1)
    np.testing.assert_array_equal(to_numpy(y), a * 0.1)  # one product, as NumPy's
    set_tensor(y[:, ::2], 0.1)
    assert np.all(to_numpy(y)[:, ::2] == 0.1) and np.all(to_numpy(y)[:, 1::2] == a[:, 1::2] * 0.1)
    big = to_backend(np.ones(3), backend)
    scale_tensor(big, 1e300)  # finite in float64 (not in float32): accepted
    assert np.all(to_numpy(big) == 1e300)


# Values whose rounding through float32 first would differ from one rounding: just above
# the half-way point between two fp16 / bf16 numbers, by less than float32 can hold.
HAZARDS = {
    "fp16": [1 + 2.0**-11 + 2.0**-40, -(1 + 2.0**-11 + 2.0**-40), 65504 * (1 + 2.0**-12)],
    "bf16": [1 + 2.0**-8 + 2.0**-40, -(3 + 2.0**-7 + 2.0**-38), 1e-40],
    "fp32": [1 + 2.0**-24 + 2.0**-50, 1e300, -1e-50],
}
WANT = {  # one rounding to nearest even
    "fp16": [1 + 2.0**-10, -(1 + 2.0**-10), 65504.0],
    "bf16": [1 + 2.0**-7, -(3 + 2.0**-6), None],
    "fp32": [1 + 2.0**-23, np.inf, -0.0],
}


@pytest.mark.parametrize("short", ["fp16", "bf16", "fp32"])
def test_conversions_round_once(backend: str, short: str) -> None:
    if short == "bf16" and BF16 is None:
        pytest.skip("bfloat16 arrays need ml_dtypes")
    dst = dtypes.by_short(short).numpy
    vals = np.array(HAZARDS[short] + [np.nan, -np.inf, 0.5])
    want = np.array([np.float32(v) if w is None else w for v, w in
                     zip(vals, WANT[short] + [np.nan, -np.inf, 0.5], strict=True)])  # fmt: skip
    if short == "bf16":
        want[2] = float(np.float32(1e-40).astype(BF16))  # subnormal in float32 and bf16
    # the strided kernel (a plain conversion) and the tiled transpose (NCHW -> NHWC)
    x = np.tile(vals, 8)
    flat = to_numpy(transform_tensor(to_backend(x, backend), dtype=dst)).astype(np.float64)
    assert last_kernel_name() == f"tensor_transform_fp64_to_{short}"
    np.testing.assert_array_equal(flat, np.tile(want, 8))
    x4 = np.tile(vals, 2 * 8 * 5 * 7 // 6 + 1)[: 2 * 8 * 35].reshape(2, 8, 5, 7)
    y = nchw_to_nhwc(to_backend(x4, backend), dtype=dst)
    assert last_kernel_name() == f"tensor_transpose_fp64_to_{short}"
    lut = dict(zip(vals.tolist()[:-3], want.tolist()[:-3], strict=True))
    expect = np.vectorize(lambda v: lut.get(v, v))(x4.transpose(0, 2, 3, 1))
    np.testing.assert_array_equal(to_numpy(y).astype(np.float64), expect)
    # back to float64: exact, with an exact alpha (one product in double, as NumPy's)
    back = transform_tensor(y, dtype=np.float64, alpha=0.1)
    assert last_kernel_name() == f"tensor_transform_{short}_to_fp64"
    np.testing.assert_array_equal(to_numpy(back), 0.1 * to_numpy(y).astype(np.float64))


def test_mixed_dtypes_and_scalars_name_the_argument(backend: str) -> None:
    x64 = to_backend(np.ones((2, 3)), backend)
    x32 = to_backend(np.ones((2, 3), np.float32), backend)
    before = to_numpy(x64).tobytes()
    bad = [
        (lambda: add_tensor(x32, x64), "a: expected dtype float64"),
        (lambda: op_tensor("add", x64, x32), "b: expected dtype float64"),
        (lambda: reduce_tensor(x64, "sum", 1, out=to_backend(np.zeros(2, np.float32), backend)),
         "out"),
        (lambda: scale_tensor(x64, np.inf), "alpha: expected a finite number"),
        (lambda: scale_tensor(x32, 1e300), r"alpha: expected a finite number \(in float32\)"),
        (lambda: transform_tensor(x64, dtype=np.complex128), "dtype"),
        (lambda: op_tensor("add", x64, x64, beta=np.nan, out=x64), "beta"),
    ]  # fmt: skip
    for call, match in bad:
        with pytest.raises(BadParamError, match=match):
            call()
    assert to_numpy(x64).tobytes() == before
