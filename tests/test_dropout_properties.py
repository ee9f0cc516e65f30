"""Property tests of dropout (hypothesis): the mask is the reference's, bit for bit."""

from __future__ import annotations

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cudnnlite import reference as ref  # noqa: E402
from cudnnlite.ops.dropout import dropout  # noqa: E402
from cudnnlite.testing import to_backend, to_numpy  # noqa: E402

HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@HYPO
@given(
    n=st.integers(1, 700),
    p=st.floats(0.0, 1.0),
    seed=st.integers(0, 2**64 - 1),
    offset=st.integers(0, 2**64 - 1),
)
def test_mask_is_a_pure_function_of_seed_offset_and_index(
    backend: str, n: int, p: float, seed: int, offset: int
) -> None:
    x = np.ones(n, np.float32)
    _, mask = dropout(to_backend(x, backend), p, seed, offset, return_mask=True)
    np.testing.assert_array_equal(to_numpy(mask), ref.dropout_mask((n,), p, seed, offset))
