"""The fp64 tensor-core DGEMM (cudnnlite/runtime/dgemm_tc.py, cuda_src/blas/dgemm_tc.cu)
against a float64 NumPy reference, on every backend (the emulator runs the same kernel
through its model of mma.sync m8n8k4 .f64).

Tolerance: an element is a sum of k products accumulated in double (in an unspecified
order on a GPU), then scaled by alpha and added to beta * C: at most k + 2 roundings on
each side (NumPy's own DGEMM included), each at most 2^-53 of the summed magnitude
|alpha| |A| @ |B| + |beta| |C|; we allow 2 (k + 2) of them.
"""

from __future__ import annotations

import numpy as np
import pytest

from cudnnlite.errors import BadParamError
from cudnnlite.runtime import backend_by_name
from cudnnlite.runtime.blas import Mat
from cudnnlite.runtime.caps import capabilities
from cudnnlite.runtime.dgemm_tc import dgemm_tc, unsupported_reason
from cudnnlite.testing import to_backend, to_numpy

U64 = 2.0**-53


def _needs_fp64_tc(backend: str) -> None:
    reason = unsupported_reason(capabilities(backend_by_name(backend)))
    if reason:
        pytest.skip(reason)


def _check(got, a_op, b_op, c0, alpha: float, beta: float) -> None:
    k = a_op.shape[-1]
    want = alpha * (a_op @ b_op) + (beta * c0 if beta else 0.0)
    magnitude = abs(alpha) * (np.abs(a_op) @ np.abs(b_op)) + abs(beta) * np.abs(c0)
    assert (np.abs(to_numpy(got) - want) <= 2 * (k + 2) * U64 * magnitude).all()


@pytest.mark.parametrize(
    ("trans_a", "trans_b", "alpha", "beta"),
    [(False, False, 1.0, 0.0), (True, False, 0.1, 0.7), (False, True, -2.5, 1.0)],
)
def test_dgemm_tc_odd_shape(backend: str, trans_a: bool, trans_b: bool, alpha: float,
                            beta: float) -> None:  # fmt: skip
    _needs_fp64_tc(backend)
    rng = np.random.default_rng(7)
    m, n, k = 45, 37, 23  # no side a multiple of the 32 x 32 tile or the 16-deep k slice
    a = rng.standard_normal((k, m) if trans_a else (m, k))
    b = rng.standard_normal((n, k) if trans_b else (k, n))
    c0 = rng.standard_normal((m, n))
    # beta == 0: C starts as NaN and must not leak (BLAS does not read C then).
    c = to_backend(c0 if beta else np.full((m, n), np.nan), backend)
    dgemm_tc(backend_by_name(backend),
             Mat(to_backend(a, backend), *a.shape, a.shape[1]),
             Mat(to_backend(b, backend), *b.shape, b.shape[1]),
             Mat(c, m, n, n), trans_a=trans_a, trans_b=trans_b, alpha=alpha,
             beta=beta)  # fmt: skip
    _check(c, a.T if trans_a else a, b.T if trans_b else b, c0, alpha, beta)


def test_dgemm_tc_batched_views(backend: str) -> None:
    _needs_fp64_tc(backend)
    # An RNN step's shape (batch 3 of h[5 x 40] @ W^T[40 x 64]) through views with an
    # offset, a leading dimension wider than the matrix, and a shared B (stride 0).
    rng = np.random.default_rng(8)
    batch, m, n, k = 3, 5, 64, 40
    a = rng.standard_normal(7 + batch * m * 48)
    w = rng.standard_normal((n, k))
    c = to_backend(np.zeros((batch, m, n)), backend)
    dgemm_tc(backend_by_name(backend),
             Mat(to_backend(a, backend), m, k, 48, offset=7, stride=m * 48),
             Mat(to_backend(w, backend), n, k, k), Mat(c, m, n, n, stride=m * n),
             trans_b=True, batch=batch)  # fmt: skip
    a_op = np.stack([a[7 + i * m * 48 :][: m * 48].reshape(m, 48)[:, :k] for i in range(batch)])
    _check(c, a_op, w.T, np.zeros((batch, m, n)), 1.0, 0.0)


def test_dgemm_tc_rejects_other_dtypes() -> None:
    be = backend_by_name("cpu")
    a = np.zeros((4, 4))
    with pytest.raises(BadParamError, match="B must be float64, got float32"):
        dgemm_tc(be, Mat(a, 4, 4, 4), Mat(a.astype(np.float32), 4, 4, 4), Mat(a, 4, 4, 4))
    with pytest.raises(BadParamError, match="op\\(A\\) is 4x4, op\\(B\\) 3x4"):
        dgemm_tc(be, Mat(a, 4, 4, 4), Mat(a, 3, 4, 4), Mat(a, 4, 4, 4))


def test_dgemm_tc_needs_sm80() -> None:
    from cudnnlite.runtime.caps import for_sm

    assert "need sm_80+, this is sm_75" in unsupported_reason(for_sm(75))
    assert unsupported_reason(for_sm(80)) is None and unsupported_reason(for_sm(90)) is None
