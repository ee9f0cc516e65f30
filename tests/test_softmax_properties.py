"""Property tests of softmax (hypothesis), on every backend."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_softmax import DTYPES, check_forward, rand  # noqa: E402

from cudnnlite.ops.softmax import softmax  # noqa: E402
from cudnnlite.testing import to_backend, to_numpy  # noqa: E402

HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@HYPO
@given(
    shape=st.lists(st.integers(1, 9), min_size=1, max_size=4),
    data=st.data(),
    dtype=st.sampled_from(DTYPES),
    log=st.booleans(),
    scale=st.sampled_from([1.0, 30.0, 1e3]),
)
def test_softmax_matches_reference_on_any_axis(
    backend: str, shape: list, data: Any, dtype: Any, log: bool, scale: float
) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    x = rand(tuple(shape), dtype, seed=len(shape), scale=scale)
    y = softmax(to_backend(x, backend), axis, log=log)
    check_forward(y, x, axis, log)


@HYPO
@given(n=st.integers(1, 3000), shift=st.sampled_from([-50.0, 0.0, 1e4]))
def test_rows_sum_to_one_and_shift_invariance(backend: str, n: int, shift: float) -> None:
    x = rand((2, n), np.float32, seed=n)
    y0 = to_numpy(softmax(to_backend(x, backend)))
    y1 = to_numpy(softmax(to_backend((x + np.float32(shift)).astype(np.float32), backend)))
    np.testing.assert_allclose(y0.sum(axis=1), 1.0, rtol=1e-5)
    # x + shift rounds x to the ulp of |shift| (1e4: ~1e-3), so compare loosely there
    np.testing.assert_allclose(y1, y0, rtol=2e-3 if shift == 1e4 else 1e-5, atol=1e-6)
