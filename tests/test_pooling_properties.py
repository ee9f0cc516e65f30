"""Property tests of pooling (hypothesis): random window arguments against the float64
reference, and the adjoint identity <pool(x), dy> = <x, pool_backward(dy)>."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cudnnlite.ops.pooling as P  # noqa: E402
from cudnnlite.reference import pooling as rp  # noqa: E402
from cudnnlite.testing import to_backend, to_numpy  # noqa: E402

# hypothesis + the function-scoped `backend` fixture: the fixture is a plain string.
HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def windows(draw):
    k = draw(st.integers(1, 4))
    p = draw(st.integers(0, k // 2))
    s = draw(st.integers(1, 3))
    d = draw(st.integers(1, 2))
    span = d * (k - 1) + 1
    size = draw(st.integers(max(1, span - 2 * p), 9))
    return size, k, s, p, d, draw(st.booleans())


@HYPO
@given(
    w=windows(), w2=windows(), layout=st.sampled_from(["NCHW", "NHWC"]), seed=st.integers(0, 2**16)
)
def test_max_pool_matches_reference(backend: str, w, w2, layout: str, seed: int) -> None:
    (h, kh, sh, ph, dh, ceil), (wd, kw, sw, pw, dw, _) = w, w2
    shape = (2, 3, h, wd) if layout == "NCHW" else (2, h, wd, 3)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    y, ind = P.max_pool2d(
        to_backend(x, backend), (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil, True, layout=layout
    )
    ry, ri = rp.max_pool(x, (kh, kw), (sh, sw), (ph, pw), (dh, dw), ceil, layout)
    np.testing.assert_array_equal(to_numpy(y), ry)
    np.testing.assert_array_equal(to_numpy(ind), ri)


@HYPO
@given(w=windows(), w2=windows(), cip=st.booleans(), seed=st.integers(0, 2**16))
def test_avg_pool_adjoint(backend: str, w, w2, cip: bool, seed: int) -> None:
    (h, kh, sh, ph, _, ceil), (wd, kw, sw, pw, _, _) = w, w2
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((1, 2, h, wd)).astype(np.float32)
    args = ((kh, kw), (sh, sw), (ph, pw), ceil, cip)
    y = to_numpy(P.avg_pool2d(to_backend(x, backend), *args)).astype(np.float64)
    np.testing.assert_allclose(y, rp.avg_pool(x, *args), rtol=2e-6, atol=2e-6)
    dy = rng.standard_normal(y.shape).astype(np.float32)
    dx = to_numpy(P.avg_pool_backward(to_backend(dy, backend), x.shape, *args))
    lhs = float((y * dy).sum())
    rhs = float((x.astype(np.float64) * dx).sum())
    assert abs(lhs - rhs) <= 1e-5 * (1 + np.abs(y * dy).sum())


@HYPO
@given(
    h=st.integers(1, 9),
    w=st.integers(1, 9),
    oh=st.integers(1, 9),
    ow=st.integers(1, 9),
    seed=st.integers(0, 2**16),
)
def test_adaptive_matches_reference(
    backend: str, h: int, w: int, oh: int, ow: int, seed: int
) -> None:
    x = np.random.default_rng(seed).standard_normal((1, 3, h, w)).astype(np.float32)
    y = P.adaptive_avg_pool2d(to_backend(x, backend), (oh, ow))
    np.testing.assert_allclose(to_numpy(y), rp.adaptive_avg_pool(x, (oh, ow)), rtol=2e-6, atol=2e-6)
    ym = P.adaptive_max_pool2d(to_backend(x, backend), (oh, ow))
    np.testing.assert_array_equal(to_numpy(ym), rp.adaptive_max_pool(x, (oh, ow))[0])
