"""Property tests of the activations (hypothesis), on every backend.

Kept apart from test_activation.py so that a machine without hypothesis (the GPU
device check) still runs every other activation test.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cudnnlite as cl  # noqa: E402
from cudnnlite.testing import assert_close, to_backend, to_numpy  # noqa: E402

from test_activation import DTYPES, MODES, SMOOTH_MODES, bwd_ref, fwd_ref, rand  # noqa: E402

# hypothesis + the function-scoped `backend` fixture: the fixture is a plain string.
HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def strided_case(draw: Any) -> tuple[np.ndarray, tuple[slice, ...], tuple[int, ...]]:
    ndim = draw(st.integers(1, 4))
    shape = tuple(draw(st.integers(1, 6)) for _ in range(ndim))
    steps = tuple(draw(st.sampled_from([1, 2, -1, -2])) for _ in range(ndim))
    perm = tuple(draw(st.permutations(range(ndim))))
    seed = draw(st.integers(0, 2**16))
    return rand(shape, np.float32, seed=seed), tuple(slice(None, None, s) for s in steps), perm


@HYPO
@given(case=strided_case(), mode=st.sampled_from(MODES), dtype=st.sampled_from(DTYPES))
def test_property_any_strides_match_reference(
    backend: str, case: Any, mode: str, dtype: Any
) -> None:
    base, index, perm = case
    x = to_backend(base.astype(dtype), backend)[index].transpose(perm)
    assert_close(cl.activation_forward(x, mode), fwd_ref(x, mode), dtype, what=mode)
    dy = x[...]  # same strides as x
    assert_close(cl.activation_backward(dy, x, mode), bwd_ref(dy, x, mode), dtype, what=mode)


@HYPO
@given(
    values=st.lists(
        st.floats(width=32, allow_nan=True, allow_infinity=True), min_size=0, max_size=40
    ),
    offset=st.integers(0, 3),
)
def test_property_identity_is_an_exact_copy_and_relu_is_max(
    backend: str, values: list[float], offset: int
) -> None:
    xv = np.array([0.0] * offset + values, dtype=np.float32)[offset:]  # any alignment
    x = to_backend(xv, backend)
    y = to_numpy(cl.identity(x))
    assert y.tobytes() == xv.tobytes()
    r = to_numpy(cl.relu(x))
    np.testing.assert_array_equal(r, np.maximum(xv, np.float32(0)))
    assert not np.signbit(r[~np.isnan(r)]).any(), "relu(-0) must be +0"


@HYPO
@given(
    values=st.lists(st.floats(-50, 50, width=32), min_size=1, max_size=30),
    mode=st.sampled_from(SMOOTH_MODES),
)
def test_property_fp16_and_bf16_are_one_rounding_of_fp32(
    backend: str, values: list[float], mode: str
) -> None:
    """fp32 math inside, one rounding at the store: the 16-bit result is within one
    rounding of the fp32 kernel's result on the same (16-bit) input."""
    for dtype in [d for d in DTYPES if np.dtype(d).itemsize == 2]:  # fp16, bf16 if present
        x16 = np.array(values, np.float64).astype(dtype)
        y16 = to_numpy(cl.activation_forward(to_backend(x16, backend), mode)).astype(np.float64)
        y32 = to_numpy(cl.activation_forward(to_backend(x16.astype(np.float32), backend), mode))
        assert_close(y16, y32.astype(np.float64), dtype, what=mode)
