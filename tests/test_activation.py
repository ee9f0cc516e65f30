"""Activation forward/backward on every backend against the float64 reference.

Tolerances are cudnnlite.testing's per-dtype elementwise ones (fp32 math, one rounding
to the storage type; float64 math for float64); where a test loosens one, the comment next
to it says why. float64 specifics (exact scalars, finite differences): test_activation_fp64.py.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite import dtypes
from cudnnlite import reference as ref
from cudnnlite.errors import BadParamError
from cudnnlite.ops.activation import kernel_name_for, last_kernel_name
from cudnnlite.testing import assert_close, to_backend, to_numpy

MODES = cl.ACTIVATION_MODES
# bfloat16 comes from ml_dtypes; a machine without it tests fp32 and fp16 only.
DTYPES = [d.numpy for d in dtypes.FLOAT_TYPES]
SHORT = {d.numpy: d.short for d in dtypes.FLOAT_TYPES}
VEC = {d.numpy: 16 // d.itemsize for d in dtypes.FLOAT_TYPES}
SHAPE = (2, 3, 5, 7)
SMOOTH_MODES = ("sigmoid", "tanh", "swish", "gelu", "gelu_tanh", "softplus", "elu")


def xp_of(backend: str) -> Any:
    if backend == "cpu":
        return np
    import cupy

    return cupy


def rand(
    shape: tuple[int, ...], dtype: Any, seed: int = 0, lo: float = -8.0, hi: float = 8.0
) -> np.ndarray:
    """Uniform values in [lo, hi) rounded to dtype; [-8, 8) crosses clipped_relu's ceiling 6."""
    return np.random.default_rng(seed).uniform(lo, hi, shape).astype(dtype)


def fwd_ref(x: Any, mode: str, coef: Any = None, threshold: Any = None) -> np.ndarray:
    return ref.activation_forward(to_numpy(x), mode, coef, threshold)


def bwd_ref(
    dy: Any, x: Any, mode: str, coef: Any = None, threshold: Any = None, y: Any = None
) -> np.ndarray:
    return ref.activation_backward(
        to_numpy(dy), to_numpy(x), mode, coef, threshold, y=None if y is None else to_numpy(y)
    )


def snapshot(*arrays: Any) -> list[bytes]:
    return [to_numpy(a).tobytes() for a in arrays if hasattr(a, "dtype")]


# ------------------------------------------------------------------ every mode x dtype


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("mode", MODES)
def test_forward_matches_reference(backend: str, mode: str, dtype: Any) -> None:
    x = to_backend(rand(SHAPE, dtype), backend)
    y = cl.activation_forward(x, mode)
    assert type(y) is type(x) and y.shape == SHAPE and y.dtype == dtype
    assert last_kernel_name() == f"act_fwd_vec{VEC[dtype]}_{mode}_{SHORT[dtype]}"
    assert_close(y, fwd_ref(x, mode), dtype, what=f"{mode} forward")


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("mode", MODES)
def test_backward_matches_reference(backend: str, mode: str, dtype: Any) -> None:
    x = to_backend(rand(SHAPE, dtype, seed=1), backend)
    dy = to_backend(rand(SHAPE, dtype, seed=2, lo=-2, hi=2), backend)
    dx = cl.activation_backward(dy, x, mode)
    assert type(dx) is type(x) and dx.shape == SHAPE and dx.dtype == dtype
    assert last_kernel_name() == f"act_bwd_vec{VEC[dtype]}_{mode}_{SHORT[dtype]}"
    assert_close(dx, bwd_ref(dy, x, mode), dtype, what=f"{mode} backward")


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("mode", ["sigmoid", "tanh"])
def test_backward_from_y(backend: str, mode: str, dtype: Any) -> None:
    """As cuDNN: sigmoid' = y (1 - y), tanh' = 1 - y^2 from the stored forward output."""
    x = to_backend(rand(SHAPE, dtype, seed=3, lo=-4, hi=4), backend)
    dy = to_backend(rand(SHAPE, dtype, seed=4, lo=-2, hi=2), backend)
    y = cl.activation_forward(x, mode)
    dx = cl.activation_backward(dy, x, mode, y=y)
    assert_close(dx, bwd_ref(dy, x, mode, y=y), dtype, what=f"{mode} backward from y")
    # The same formula from x differs by the rounding of y: it is a different path.
    assert_close(dx, bwd_ref(dy, x, mode), dtype, rtol=0.05, atol=2e-2, what="from y vs from x")


def test_y_is_ignored_by_modes_that_do_not_use_it(backend: str) -> None:
    x = to_backend(rand(SHAPE, np.float32, seed=5), backend)
    dy = to_backend(rand(SHAPE, np.float32, seed=6), backend)
    junk = to_backend(np.full(SHAPE, np.nan, np.float32), backend)
    dx = cl.activation_backward(dy, x, "gelu", y=junk)
    assert_close(dx, bwd_ref(dy, x, "gelu"), np.float32)


# ------------------------------------------------------------------ layouts


def _layouts(xp: Any, base: Any) -> dict[str, Any]:
    """Views of a (6, 10, 8) array, each with the shape (5, 4, 8) or its transpose."""
    return {
        "c_contiguous": xp.ascontiguousarray(base[:5, :4]),
        "transposed": xp.ascontiguousarray(base[:5, :4]).transpose(2, 1, 0),
        "fortran": xp.asfortranarray(base[:5, :4]),
        "step_sliced": base[:5, ::2, :],
        "sliced_both": base[1:6, 1:9:2, ::1],
        "negative_strides": base[5:0:-1, ::-2, ::-1],
        "mixed_negative": base[:5, 1:9:2, ::-1],
    }


LAYOUTS = [
    "c_contiguous",
    "transposed",
    "fortran",
    "step_sliced",
    "sliced_both",
    "negative_strides",
    "mixed_negative",
]
DENSE_LAYOUTS = ("c_contiguous", "transposed", "fortran")


@pytest.mark.parametrize("layout", LAYOUTS)
def test_noncontiguous_inputs(backend: str, layout: str) -> None:
    xp = xp_of(backend)
    dtype = np.float16
    x = _layouts(xp, to_backend(rand((6, 10, 8), dtype, seed=7), backend))[layout]
    dy = _layouts(xp, to_backend(rand((6, 10, 8), dtype, seed=8, lo=-2, hi=2), backend))[layout]
    before = snapshot(x, dy)
    # A dense layout (any order) keeps x's memory order in the result: the vector path.
    variant = "vec8" if layout in DENSE_LAYOUTS else "strided"
    for mode in ("gelu_tanh", "clipped_relu"):
        y = cl.activation_forward(x, mode)
        assert last_kernel_name() == f"act_fwd_{variant}_{mode}_fp16"
        assert_close(y, fwd_ref(x, mode), dtype, what=f"{mode} {layout}")
        dx = cl.activation_backward(dy, x, mode)
        assert last_kernel_name() == f"act_bwd_{variant}_{mode}_fp16"
        assert_close(dx, bwd_ref(dy, x, mode), dtype, what=f"{mode} backward {layout}")
    assert snapshot(x, dy) == before


def test_mixed_layouts_in_backward(backend: str) -> None:
    """dy transposed, x negative-strided, y sliced, out Fortran: every operand its own strides."""
    xp = xp_of(backend)
    base = to_backend(rand((8, 12), np.float32, seed=9, lo=-3, hi=3), backend)
    x = base[7:1:-1, 1:11:2]  # (6, 5)
    dy = xp.ascontiguousarray(to_backend(rand((5, 6), np.float32, seed=10), backend)).T
    y_full = cl.activation_forward(xp.ascontiguousarray(x), "sigmoid")
    y = xp.zeros((6, 10), np.float32)
    y[:, ::2] = y_full
    out = xp.asfortranarray(xp.zeros((6, 5), np.float32))
    dx = cl.activation_backward(dy, x, "sigmoid", y=y[:, ::2], out=out)
    assert dx is out and last_kernel_name() == "act_bwd_strided_sigmoid_fp32"
    assert_close(out, bwd_ref(dy, x, "sigmoid", y=y_full), np.float32)


def test_broadcast_input(backend: str) -> None:
    xp = xp_of(backend)
    row = to_backend(rand((7,), np.float32, seed=11), backend)
    x = xp.broadcast_to(row, (4, 3, 7))  # zero strides
    y = cl.activation_forward(x, "softplus")
    assert y.shape == (4, 3, 7) and last_kernel_name() == "act_fwd_strided_softplus_fp32"
    assert_close(y, fwd_ref(x, "softplus"), np.float32)
    dy = to_backend(rand((4, 3, 7), np.float32, seed=12), backend)
    assert_close(cl.activation_backward(dy, x, "elu"), bwd_ref(dy, x, "elu"), np.float32)


@pytest.mark.parametrize("dtype", DTYPES[::2], ids=SHORT.get)  # fp32 and (if present) bf16
def test_noncontiguous_out(backend: str, dtype: Any) -> None:
    xp = xp_of(backend)
    x = to_backend(rand((5, 6), dtype, seed=13), backend)
    big = xp.full((5, 13), np.nan, dtype=dtype)
    out = big[:, 1::2]  # (5, 6), strides (13, 2)
    y = cl.activation_forward(x, "swish", out=out)
    assert y is out and last_kernel_name() == f"act_fwd_strided_swish_{SHORT[dtype]}"
    assert_close(out, fwd_ref(x, "swish"), dtype)
    untouched = to_numpy(big)[:, ::2].astype(np.float64)
    assert np.isnan(untouched).all(), "wrote outside out's elements"

    rev = xp.zeros((5, 6), dtype=dtype)[::-1, ::-1]  # descending out: flipped to ascending
    cl.activation_forward(x, "tanh", out=rev)
    assert last_kernel_name() == f"act_fwd_strided_tanh_{SHORT[dtype]}"
    assert_close(rev, fwd_ref(x, "tanh"), dtype)


def test_reversed_operands_take_the_contiguous_path(backend: str) -> None:
    """x and out both running backwards are one dense reversed range: the fast path."""
    x = to_backend(rand((64,), np.float32, seed=14), backend)
    expect = fwd_ref(x, "elu")
    xr = x[::-1]
    cl.activation_forward(xr, "elu", out=xr)
    assert last_kernel_name() in ("act_fwd_vec4_elu_fp32", "act_fwd_scalar_elu_fp32")
    assert_close(x, expect, np.float32)


def test_many_dims(backend: str) -> None:
    xp = xp_of(backend)
    # 9 contiguous dims collapse to one.
    x9 = to_backend(rand((2,) * 9, np.float32, seed=15), backend)
    cl.activation_forward(x9, "relu")
    assert last_kernel_name() == "act_fwd_vec4_relu_fp32"
    # 10 dims sliced with a step each never collapse: run through contiguous copies.
    base = to_backend(rand((3,) * 10, np.float16, seed=16), backend)
    x10 = base[(slice(None, None, 2),) * 10]
    dy = xp.ones_like(x10)
    out = xp.full((4,) * 10, np.nan, dtype=np.float16)[(slice(None, None, 2),) * 10]
    cl.activation_backward(dy, x10, "gelu", out=out, beta=0.0)
    assert_close(out, bwd_ref(dy, x10, "gelu"), np.float16)
    prior = xp.ones_like(x10)
    y = cl.activation_forward(x10, "sigmoid", alpha=2.0, beta=0.5, out=prior)
    assert_close(y, 2.0 * fwd_ref(x10, "sigmoid") + 0.5, np.float16)


# ------------------------------------------------------------------ in place, blending


@pytest.mark.parametrize("view", ["contiguous", "strided"])
def test_in_place(backend: str, view: str) -> None:
    xp = xp_of(backend)
    full = to_backend(rand((6, 8), np.float32, seed=17), backend)
    x = full if view == "contiguous" else full[::2, 1::3]
    expect = fwd_ref(x, "gelu")
    y = cl.activation_forward(x, "gelu", out=x)
    assert y is x
    assert_close(x, expect, np.float32)

    full = to_backend(rand((6, 8), np.float32, seed=18), backend)
    dy = full if view == "contiguous" else full[::2, 1::3]
    x2 = xp.ascontiguousarray(to_backend(rand(dy.shape, np.float32, seed=19), backend))
    expect = bwd_ref(dy, x2, "softplus")
    cl.activation_backward(dy, x2, "softplus", out=dy)  # gradient in place, as autograd does
    assert_close(dy, expect, np.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("n", [37, 4099])  # 37: through the vector tail
def test_blending(backend: str, dtype: Any, n: int) -> None:
    xp = xp_of(backend)
    x = to_backend(rand((n,), dtype, seed=20), backend)
    dy = to_backend(rand((n,), dtype, seed=21), backend)
    # beta == 0: out is not read, its NaNs must not leak.
    out = xp.full((n,), np.nan, dtype=dtype)
    cl.activation_forward(x, "elu", alpha=0.5, out=out)
    assert_close(out, 0.5 * fwd_ref(x, "elu"), dtype)
    out = xp.full((n,), np.nan, dtype=dtype)
    cl.activation_backward(dy, x, "leaky_relu", alpha=2.0, out=out)
    assert_close(out, 2.0 * bwd_ref(dy, x, "leaky_relu"), dtype)
    # beta != 0 reads the prior: y = alpha f(x) + beta y_prior.
    prior = rand((n,), dtype, seed=22)
    out = to_backend(prior, backend)
    cl.activation_forward(x, "tanh", alpha=1.5, beta=0.5, out=out)
    expect = 1.5 * fwd_ref(x, "tanh") + 0.5 * prior.astype(np.float64)
    # the blend adds one float32 fma on values up to ~5: absolute slack of a few ulps of 5
    assert_close(out, expect, dtype, atol=4 * 2.0**-21 + cl.testing.ELEMENTWISE_ATOL[SHORT[dtype]])
    out = to_backend(prior, backend)
    cl.activation_backward(dy, x, "swish", alpha=-1.0, beta=1.0, out=out)
    expect = -bwd_ref(dy, x, "swish") + prior.astype(np.float64)
    assert_close(out, expect, dtype, atol=4 * 2.0**-21 + cl.testing.ELEMENTWISE_ATOL[SHORT[dtype]])


def test_blending_strided(backend: str) -> None:
    xp = xp_of(backend)
    x = to_backend(rand((6, 9), np.float32, seed=23), backend)[:, ::3]
    out = xp.full((6, 3), 2.0, np.float32)
    cl.activation_forward(x, "relu", alpha=3.0, beta=-1.0, out=out)
    assert_close(out, 3.0 * fwd_ref(x, "relu") - 2.0, np.float32)
    out = xp.full((6, 3), np.nan, np.float32)
    cl.activation_forward(x, "relu", alpha=3.0, out=out)
    assert_close(out, 3.0 * fwd_ref(x, "relu"), np.float32)


# ------------------------------------------------------------------ shapes and paths


def test_zero_dim_and_empty(backend: str) -> None:
    xp = xp_of(backend)
    x0 = to_backend(np.array(-1.5, np.float32), backend)
    y0 = cl.activation_forward(x0, "elu")
    assert y0.shape == () and type(y0) is type(x0)
    assert_close(y0, fwd_ref(x0, "elu"), np.float32)
    dx0 = cl.activation_backward(x0, x0, "sigmoid")
    assert dx0.shape == ()
    assert_close(dx0, bwd_ref(x0, x0, "sigmoid"), np.float32)
    for dtype in DTYPES:
        xd = to_backend(np.array(0.75, dtype), backend)
        assert_close(cl.gelu(xd), fwd_ref(xd, "gelu"), dtype)
        assert_close(cl.activation_backward(xd, xd, "gelu"), bwd_ref(xd, xd, "gelu"), dtype)

    cl.relu(x0)
    marker = last_kernel_name()
    for shape in [(0,), (3, 0, 2), (0, 0)]:
        for dtype in DTYPES:
            e = xp.empty(shape, dtype=dtype)
            y = cl.activation_forward(e, "gelu")
            assert y.shape == shape and y.dtype == dtype and type(y) is type(e)
            dx = cl.activation_backward(e, e, "gelu", y=e)
            assert dx.shape == shape and dx.dtype == dtype
            assert cl.relu(e, out=xp.empty(shape, dtype=dtype)).shape == shape
    assert last_kernel_name() == marker, "an empty array launched a kernel"
    with pytest.raises(BadParamError, match="out"):
        cl.relu(xp.empty((0, 3), np.float32), out=xp.empty((3, 0), np.float32))


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("n", [1, 7, 9, 4099])
def test_vector_tail(backend: str, dtype: Any, n: int) -> None:
    x = to_backend(rand((n,), dtype, seed=24), backend)
    dy = to_backend(rand((n,), dtype, seed=25), backend)
    y = cl.activation_forward(x, "softplus")
    assert last_kernel_name() == f"act_fwd_vec{VEC[dtype]}_softplus_{SHORT[dtype]}"
    assert_close(y, fwd_ref(x, "softplus"), dtype)
    dx = cl.activation_backward(dy, x, "gelu")
    assert_close(dx, bwd_ref(dy, x, "gelu"), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
def test_misaligned_views_take_the_scalar_path(backend: str, dtype: Any) -> None:
    xp = xp_of(backend)
    base = to_backend(rand((130,), dtype, seed=26), backend)
    x = base[1:]  # contiguous, 2 or 4 bytes past a 16-byte boundary
    assert kernel_name_for(x, "sigmoid") == f"act_fwd_scalar_sigmoid_{SHORT[dtype]}"
    y = cl.activation_forward(x, "sigmoid")
    assert last_kernel_name() == f"act_fwd_scalar_sigmoid_{SHORT[dtype]}"
    assert_close(y, fwd_ref(x, "sigmoid"), dtype)
    # aligned input, misaligned output
    dy, x2 = base[:-2], xp.ascontiguousarray(base[2:])
    out_base = xp.zeros((130,), dtype=dtype)
    cl.activation_backward(dy, x2, "tanh", out=out_base[1:-1])
    assert last_kernel_name() == f"act_bwd_scalar_tanh_{SHORT[dtype]}"
    assert_close(out_base[1:-1], bwd_ref(dy, x2, "tanh"), dtype)
    assert to_numpy(out_base)[0] == 0 and to_numpy(out_base)[-1] == 0


def test_kernel_name_for_matches_the_launch(backend: str) -> None:
    xp = xp_of(backend)
    x = to_backend(rand((4, 10), np.float16, seed=27), backend)
    # aligned C order, transposed (dense), strided, misaligned
    for arr in (x, x.T, x[:, ::2], x.reshape(-1)[1:]):
        name = kernel_name_for(arr, "gelu")
        cl.gelu(arr)
        assert last_kernel_name() == name
        dy = xp.ones_like(arr)
        name = kernel_name_for(arr, "gelu", backward=True, dy=dy)
        cl.activation_backward(dy, arr, "gelu")
        assert last_kernel_name() == name
    assert kernel_name_for(x, "tanh", backward=True) == "act_bwd_vec8_tanh_fp16"


# ------------------------------------------------------------------ values


def _extremes(dtype: Any) -> np.ndarray:
    big = float(dtypes.finfo(dtype).max)
    tiny = float(dtypes.finfo(dtype).tiny)
    vals = [
        0.0,
        -0.0,
        1e4,
        -1e4,
        np.inf,
        -np.inf,
        np.nan,
        big,
        -big,
        tiny,
        -tiny,
        88.0,
        -88.0,
        100.0,
        -100.0,
        15.0,
        -15.0,
        25.0,
        -25.0,
        0.5,
        -0.5,
    ]
    return np.array(vals, dtype=np.float64).astype(dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("mode", MODES)
def test_extreme_values(backend: str, mode: str, dtype: Any) -> None:
    """Huge, infinite and NaN inputs give the limits (NaN propagates, no spurious NaN)."""
    xv = _extremes(dtype)
    x = to_backend(xv, backend)
    y = cl.activation_forward(x, mode)
    expect = fwd_ref(x, mode)
    assert_close(y, expect, dtype, what=f"{mode} forward extremes")
    yn = to_numpy(y).astype(np.float64)
    assert np.array_equal(np.isnan(yn), np.isnan(xv.astype(np.float64))), "NaN where x is not NaN"
    dy = to_backend(np.ones_like(xv), backend)
    dx = cl.activation_backward(dy, x, mode)
    assert_close(dx, bwd_ref(dy, x, mode), dtype, what=f"{mode} backward extremes")
    dxn = to_numpy(dx).astype(np.float64)
    expect_nan = np.isnan(xv.astype(np.float64)) if mode != "identity" else np.zeros(len(xv), bool)
    assert np.array_equal(np.isnan(dxn), expect_nan), f"NaN pattern {dxn}"


def test_nan_propagates(backend: str) -> None:
    x = to_backend(np.array([np.nan, 1.0, -1.0], np.float32), backend)
    for mode in MODES:
        assert np.isnan(to_numpy(cl.activation_forward(x, mode))[0]), mode
    assert np.isnan(to_numpy(cl.relu(x))[0])


def test_derivatives_at_kinks_follow_pytorch(backend: str) -> None:
    x = to_backend(np.array([0.0, -0.0, 6.0, 2.0, -1.0, 7.0], np.float32), backend)
    dy = to_backend(np.full(6, 3.0, np.float32), backend)

    def grad(mode: str, **kw: Any) -> list[float]:
        return to_numpy(cl.activation_backward(dy, x, mode, **kw)).tolist()

    assert grad("relu") == [0, 0, 3, 3, 0, 3]  # relu'(0) = 0
    assert grad("leaky_relu", coef=0.5) == [1.5, 1.5, 3, 3, 1.5, 3]  # slope at 0
    assert grad("clipped_relu") == [0, 0, 0, 3, 0, 0]  # 0 at both ends (hardtanh)
    assert grad("clipped_relu", coef=7.0) == [0, 0, 3, 3, 0, 0]
    e = np.float32(math.exp(-1.0))
    assert grad("elu", coef=2.0)[:2] == [6, 6]  # left formula at 0: alpha e^0
    assert_close(
        np.array(grad("elu", coef=2.0)), np.array([6, 6, 3, 3, 6 * float(e), 3.0]), np.float32
    )
    assert grad("identity") == [3] * 6
    # forward at the kinks
    assert to_numpy(cl.clipped_relu(x)).tolist() == [0, 0, 6, 2, 0, 6]
    assert to_numpy(cl.relu(x)).tolist() == [0, 0, 6, 2, 0, 7]


def test_softplus_threshold(backend: str) -> None:
    x = to_backend(np.array([1.0, 4.9, 5.1, 30.0, -30.0], np.float32), backend)
    y = to_numpy(cl.softplus(x, beta=2.0, threshold=10.0))
    assert y[2] == np.float32(5.1) and y[3] == 30.0  # beta x > threshold: x itself
    assert_close(y, fwd_ref(x, "softplus", 2.0, 10.0), np.float32)
    dy = to_backend(np.ones(5, np.float32), backend)
    dx = to_numpy(cl.activation_backward(dy, x, "softplus", coef=2.0, threshold=10.0))
    assert dx[2] == 1.0 and dx[3] == 1.0
    assert_close(dx, bwd_ref(np.ones(5), x, "softplus", 2.0, 10.0), np.float32)
    # far below: sigmoid(beta x) is subnormal, not 0, so an infinite dy stays infinite
    # (PyTorch's z / (z + 1), z = exp(beta x)); float64 at -710, float32 at -100
    for dt, xv in ((np.float64, -710.0), (np.float32, -100.0)):
        dx = to_numpy(cl.activation_backward(to_backend(np.array([np.inf, 1.0], dt), backend),
                                             to_backend(np.array([xv, xv], dt), backend),
                                             "softplus"))  # fmt: skip
        assert dx[0] == np.inf and 0 < dx[1] < 1e-37


COEF_CASES = [
    ("leaky_relu", 0.2, None),
    ("leaky_relu", -0.5, None),
    ("clipped_relu", 1.5, None),
    ("clipped_relu", math.inf, None),
    ("elu", 0.5, None),
    ("swish", 2.0, None),
    ("swish", 0.0, None),
    ("swish", -1.0, None),
    ("softplus", 2.0, None),
    ("softplus", 0.5, 3.0),
    ("softplus", 1.0, -2.0),
]


@pytest.mark.parametrize(("mode", "coef", "threshold"), COEF_CASES)
def test_coefficients(backend: str, mode: str, coef: float, threshold: float | None) -> None:
    xv = np.concatenate([rand((200,), np.float32, seed=28), [np.inf, -np.inf, 0.0]]).astype(
        np.float32
    )
    x = to_backend(xv, backend)
    dy = to_backend(rand((203,), np.float32, seed=29), backend)
    y = cl.activation_forward(x, mode, coef=coef, threshold=threshold)
    assert_close(y, fwd_ref(x, mode, coef, threshold), np.float32, what=f"{mode} coef={coef}")
    dx = cl.activation_backward(dy, x, mode, coef=coef, threshold=threshold)
    assert_close(dx, bwd_ref(dy, x, mode, coef, threshold), np.float32, what=f"{mode}' coef={coef}")


# ------------------------------------------------------------------ PyTorch-style wrappers


WRAPPERS = [
    (lambda x, **k: cl.relu(x, **k), "relu", {}),
    (lambda x, **k: cl.leaky_relu(x, 0.3, **k), "leaky_relu", {"coef": 0.3}),
    (lambda x, **k: cl.leaky_relu(x, **k), "leaky_relu", {}),
    (lambda x, **k: cl.clipped_relu(x, 2.5, **k), "clipped_relu", {"coef": 2.5}),
    (lambda x, **k: cl.clipped_relu(x, **k), "clipped_relu", {"coef": 6.0}),
    (lambda x, **k: cl.elu(x, 0.7, **k), "elu", {"coef": 0.7}),
    (lambda x, **k: cl.sigmoid(x, **k), "sigmoid", {}),
    (lambda x, **k: cl.tanh(x, **k), "tanh", {}),
    (lambda x, **k: cl.silu(x, **k), "swish", {}),
    (lambda x, **k: cl.swish(x, 1.7, **k), "swish", {"coef": 1.7}),
    (lambda x, **k: cl.gelu(x, **k), "gelu", {}),
    (lambda x, **k: cl.gelu(x, "tanh", **k), "gelu_tanh", {}),
    (lambda x, **k: cl.softplus(x, 2.0, 5.0, **k), "softplus", {"coef": 2.0, "threshold": 5.0}),
    (lambda x, **k: cl.softplus(x, **k), "softplus", {}),
    (lambda x, **k: cl.identity(x, **k), "identity", {}),
]


def test_wrappers_equal_activation_forward(backend: str) -> None:
    xp = xp_of(backend)
    x = to_backend(rand((3, 17), DTYPES[-1], seed=30), backend)
    for fn, mode, kw in WRAPPERS:
        expect = to_numpy(cl.activation_forward(x, mode, **kw))
        got = fn(x)
        assert np.array_equal(to_numpy(got).view(np.uint16), expect.view(np.uint16)), mode
        out = xp.empty_like(x)
        assert fn(x, out=out) is out
        assert np.array_equal(to_numpy(out).view(np.uint16), expect.view(np.uint16)), mode
    with pytest.raises(BadParamError, match="approximate"):
        cl.gelu(x, approximate="fast")
    with pytest.raises(TypeError):
        cl.relu(x, None)  # out is keyword-only


def test_dlpack_producer_input() -> None:
    class Producer:
        def __init__(self, a: np.ndarray) -> None:
            self.a = a

        def __dlpack__(self, **kwargs: Any) -> Any:
            return self.a.__dlpack__(**kwargs)

        def __dlpack_device__(self) -> tuple[int, int]:
            return self.a.__dlpack_device__()

    xv = rand((5, 4), np.float32, seed=31)
    y = cl.gelu(Producer(xv))
    assert isinstance(y, np.ndarray)
    assert_close(y, fwd_ref(xv, "gelu"), np.float32)


# ------------------------------------------------------------------ bad inputs


class FakeGpuArray:
    __cuda_array_interface__ = {"shape": (2, 3), "typestr": "<f4", "data": (0, False), "version": 3}


def _bad_cases(backend: str) -> tuple[Any, Any, list[tuple[str, Any, str]]]:
    xp = xp_of(backend)
    x = to_backend(rand((2, 3), np.float32, seed=32), backend)
    dy = to_backend(rand((2, 3), np.float32, seed=33), backend)
    f = cl.activation_forward
    b = cl.activation_backward
    cases = [
        ("complex x", lambda: f(x.astype(np.complex64), "relu"), "x: expected dtype"),
        ("float64 dy, float32 x", lambda: b(dy.astype(np.float64), x, "relu"), "dy: expected"),
        ("int x", lambda: f(xp.ones((2, 3), np.int32), "relu"), "x: expected dtype"),
        ("list x", lambda: f([1.0, 2.0], "relu"), "x: expected a NumPy or CuPy array"),
        ("int scalar x", lambda: f(3, "relu"), "x: expected a NumPy or CuPy array"),
        ("unknown mode", lambda: f(x, "gelu2"), "mode: expected one of relu, leaky_relu"),
        ("mode None", lambda: f(x, None), "mode"),
        ("dy shape", lambda: b(dy[:1], x, "relu"), "dy: expected shape (2, 3)"),
        ("y shape", lambda: b(dy, x, "sigmoid", y=dy.T), "y: expected shape"),
        ("dy dtype", lambda: b(dy.astype(np.float16), x, "relu"), "dy: expected dtype float32"),
        ("dy list", lambda: b([1.0], x, "relu"), "dy: expected a NumPy or CuPy array"),
        (
            "out shape",
            lambda: f(x, "relu", out=xp.empty((3, 2), np.float32)),
            "out: expected shape",
        ),
        (
            "out dtype",
            lambda: f(x, "relu", out=xp.empty((2, 3), np.float16)),
            "out: expected dtype",
        ),
        ("out list", lambda: f(x, "relu", out=[0.0] * 6), "out: expected"),
        (
            "bwd out shape",
            lambda: b(dy, x, "relu", out=xp.empty((6,), np.float32)),
            "out: expected shape",
        ),
        ("beta without out", lambda: f(x, "relu", beta=1.0), "beta"),
        ("bwd beta without out", lambda: b(dy, x, "relu", beta=0.5), "beta"),
        ("alpha nan", lambda: f(x, "relu", alpha=math.nan), "alpha: expected a finite"),
        ("alpha inf", lambda: f(x, "relu", alpha=math.inf), "alpha: expected a finite"),
        ("alpha overflows float32", lambda: f(x, "relu", alpha=1e39), "alpha"),
        (
            "beta inf",
            lambda: f(x, "relu", beta=-math.inf, out=xp.empty_like(x)),
            "beta: expected a finite",
        ),
        ("alpha string", lambda: f(x, "relu", alpha="1"), "alpha: expected a real number"),
        ("coef on relu", lambda: f(x, "relu", coef=0.1), "coef: mode 'relu' takes no coefficient"),
        ("coef on gelu bwd", lambda: b(dy, x, "gelu", coef=0.1), "coef"),
        ("threshold on elu", lambda: f(x, "elu", threshold=3.0), "threshold: only softplus"),
        (
            "ceiling 0",
            lambda: f(x, "clipped_relu", coef=0.0),
            "coef: clipped_relu's ceiling must be > 0",
        ),
        ("ceiling negative", lambda: cl.clipped_relu(x, -1.0), "ceiling: clipped_relu's ceiling"),
        (
            "ceiling nan",
            lambda: f(x, "clipped_relu", coef=math.nan),
            "coef: clipped_relu's ceiling",
        ),
        ("softplus beta 0", lambda: cl.softplus(x, 0.0), "beta: softplus's beta must be > 0"),
        (
            "softplus beta negative",
            lambda: b(dy, x, "softplus", coef=-1.0),
            "coef: softplus's beta",
        ),
        ("softplus threshold nan", lambda: cl.softplus(x, 1.0, math.nan), "threshold"),
        ("elu alpha nan", lambda: cl.elu(x, math.nan), "alpha: expected a finite"),
        ("leaky slope inf", lambda: cl.leaky_relu(x, math.inf), "negative_slope: expected"),
        ("coef string", lambda: cl.swish(x, "2"), "beta: expected a real number"),
        (
            "out overlaps x",
            lambda: f(x.reshape(-1)[:4], "relu", out=x.reshape(-1)[2:]),
            "out: overlaps x",
        ),
        (
            "out overlaps dy",
            lambda: b(dy.reshape(-1)[1:], x.reshape(-1)[1:], "relu", out=dy.reshape(-1)[:-1]),
            "out: overlaps dy",
        ),
    ]
    if backend == "cpu":
        ro = np.zeros((2, 3), np.float32)
        ro.flags.writeable = False
        aliased = np.lib.stride_tricks.as_strided(np.zeros(3, np.float32), (2, 3), (0, 4))
        cases += [
            ("read-only out", lambda: f(x, "relu", out=ro), "out: the array is read-only"),
            ("zero-stride out", lambda: f(x, "relu", out=aliased), "out: has a zero stride"),
            ("mixed host and GPU", lambda: f(x, "relu", out=FakeGpuArray()), "cannot mix host"),
            ("mixed host and GPU bwd", lambda: b(FakeGpuArray(), x, "relu"), "cannot mix host"),
        ]
    else:
        cases += [
            (
                "numpy out for cupy x",
                lambda: f(x, "relu", out=np.empty((2, 3), np.float32)),
                "cannot mix",
            ),
            ("numpy dy for cupy x", lambda: b(rand((2, 3), np.float32), x, "relu"), "cannot mix"),
        ]
    return x, dy, cases


def test_bad_inputs_raise_and_leave_inputs_untouched(backend: str) -> None:
    x, dy, cases = _bad_cases(backend)
    before = snapshot(x, dy)
    for label, call, message in cases:
        with pytest.raises(BadParamError) as info:
            call()
        assert message in str(info.value), f"{label}: {info.value}"
        assert isinstance(info.value, ValueError)
        assert snapshot(x, dy) == before, f"{label} modified an input"


# ------------------------------------------------------------------ PyTorch, when installed


def test_matches_torch(backend: str) -> None:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional
    xv = rand((4, 33), np.float32, seed=34)
    x = to_backend(xv, backend)
    t = torch.from_numpy(xv.astype(np.float32))
    pairs = [
        (cl.relu(x), F.relu(t)),
        (cl.leaky_relu(x, 0.1), F.leaky_relu(t, 0.1)),
        (cl.clipped_relu(x), F.relu6(t)),
        (cl.elu(x, 0.5), F.elu(t, 0.5)),
        (cl.silu(x), F.silu(t)),
        (cl.gelu(x), F.gelu(t)),
        (cl.gelu(x, "tanh"), F.gelu(t, approximate="tanh")),
        (cl.softplus(x, 2.0, 5.0), F.softplus(t, 2.0, 5.0)),
    ]
    for ours, theirs in pairs:
        np.testing.assert_allclose(to_numpy(ours), theirs.numpy(), rtol=1e-5, atol=1e-6)
    tg = t.clone().requires_grad_(True)
    F.gelu(tg).backward(torch.ones_like(tg))
    dx = cl.activation_backward(to_backend(np.ones_like(xv), backend), x, "gelu")
    np.testing.assert_allclose(to_numpy(dx), tg.grad.numpy(), rtol=1e-5, atol=1e-6)
