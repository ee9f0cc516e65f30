"""float64 softmax / log-softmax: what float64 adds to test_softmax.py (whose row-length,
real-shape, large-magnitude and blending tests run float64 too, with its bounds in
float64's unit roundoff): logits that only max-subtraction survives, -inf/NaN entries,
the multi-block path with its double workspace, exact alpha/beta, finite-difference
gradients and plans. One float64 softmax module serves all of it.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_softmax import check_backward, check_forward, rand  # noqa: E402

from cudnnlite import reference as ref
from cudnnlite.errors import BadParamError
from cudnnlite.ops.softmax import (
    last_kernel_name,
    log_softmax,
    softmax,
    softmax_backward,
    softmax_plan,
)
from cudnnlite.testing import to_backend, to_numpy

U64 = 2.0**-53


def test_huge_logits_need_the_max_subtraction(backend: str) -> None:
    """exp(1e300) and exp(1000) overflow double; x - max does not. Rows: a dominant
    logit, a tie at 1e300, and 1000 + noise (a smooth row past exp's range)."""
    x = np.array(
        [
            [1e300, 0.0, -1e300, 5.0],
            [1e300, 1e300, -1e300, -1e300],
            1000.0 + np.random.default_rng(1).standard_normal(4),
        ]
    )
    y = to_numpy(softmax(to_backend(x, backend)))
    assert np.all(np.isfinite(y))
    np.testing.assert_array_equal(y[0], [1.0, 0.0, 0.0, 0.0])
    np.testing.assert_array_equal(y[1], [0.5, 0.5, 0.0, 0.0])
    check_forward(y[2:], x[2:], -1, False)
    yl = to_numpy(log_softmax(to_backend(x, backend)))
    # (x - m) - log(s) with s = 1 exactly (row 0) or 2 (row 1): one rounding each
    np.testing.assert_array_equal(yl[0], [0.0, -1e300, -2e300, 5.0 - 1e300])
    np.testing.assert_allclose(yl[1], [-np.log(2)] * 2 + [-2e300] * 2, rtol=2 * U64)
    check_forward(yl[2:], x[2:], -1, True)
    fast = to_numpy(softmax(to_backend(x[2:], backend), algorithm="fast"))
    assert not np.all(np.isfinite(fast))  # no max: exp(1000) = inf, as cuDNN's fast mode


def test_fast_algorithm_reaches_further_in_double(backend: str) -> None:
    """exp(100) overflows float32 but not float64: fast mode is exact there in double
    (exp, sum and division: a few ulps, the fp64 bound of check_forward)."""
    x = 100.0 + rand((3, 40), np.float64, seed=2, scale=1.0)
    y = to_numpy(softmax(to_backend(x, backend), algorithm="fast"))
    want = ref.softmax.softmax(x, -1, fast=True)
    np.testing.assert_allclose(y, want, rtol=64 * U64, atol=4 * U64)


def test_masked_and_nan_entries(backend: str) -> None:
    x = np.array([[-np.inf, 1.0, 2.0, -np.inf], [-np.inf] * 4, [np.nan, 0, 0, 0]])
    for log in (False, True):
        y = to_numpy(softmax(to_backend(x, backend), log=log))
        np.testing.assert_allclose(y[0], ref.softmax.softmax(x[0], log=log), rtol=4 * U64)
        assert np.all(np.isnan(y[1])) and np.all(np.isnan(y[2]))  # 0/0 and NaN, as PyTorch
    y = to_numpy(softmax(to_backend(x[:1], backend)))
    assert y[0, 0] == 0 and y[0, 3] == 0


@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
def test_multi_block_path_in_double(backend: str, log: bool) -> None:
    """A 2^17-element row: partial (m, s) per chunk in a float64 workspace, then finish."""
    x = rand((1, 1 << 17), np.float64, seed=3, scale=1e4)  # 1e4: a naive exp overflows
    y = softmax(to_backend(x, backend), log=log)
    assert last_kernel_name() == "softmax_fwd_multi_vec2_fp64"
    check_forward(y, x, -1, log)
    y = to_numpy(y)
    dy = rand((1, 1 << 17), np.float64, seed=4, scale=1.0)
    dx = softmax_backward(to_backend(dy, backend), to_backend(y, backend), log=log)
    assert last_kernel_name() == "softmax_bwd_multi_vec2_fp64"
    check_backward(dx, dy, y, -1, log)


def test_blending_factors_are_exact(backend: str) -> None:
    """alpha = 1/3, beta = 0.1 (not float32 values) on positive outputs and priors: no
    cancellation, so a few float64 roundings (exp, division, product, fma: 16 ulps);
    float32-rounded factors would be off by ~1e-8."""
    x = rand((4, 33), np.float64, seed=5)
    prior = np.random.default_rng(6).uniform(1.0, 2.0, (4, 33))
    out = to_backend(prior.copy(), backend)
    softmax(to_backend(x, backend), alpha=1 / 3, beta=0.1, out=out)
    want = (1 / 3) * ref.softmax.softmax(x) + 0.1 * prior
    np.testing.assert_allclose(to_numpy(out), want, rtol=16 * U64)


# Finite differences of L(x) = sum(w * f(x)) through the forward kernel: the gradient
# softmax_backward(w, f(x)) must match sum(w * (f(x + h e_i) - f(x - h e_i))) / 2h, the
# difference taken elementwise first (exact: unperturbed rows give identical outputs, and
# close values subtract exactly). h = 2^-17: truncation h^2 |L'''| / 6 < 1e-10 (|L'''| is
# a few sum|w| <= 30 here); rounding: each output of the perturbed row is off by <= 8 ulps
# of |f| <= 10, times |w| <= 3, over <= 9 elements, twice, over 2h = 1.5e-5: < 4e-8.
# Tolerance 1e-7; float32 arithmetic would miss it by five orders of magnitude.
FD_CASES = [((3, 9), -1, None), ((2, 4, 3), None, "channel"), ((2, 3, 2), None, "instance")]


@pytest.mark.parametrize(("shape", "axis", "mode"), FD_CASES, ids=str)
@pytest.mark.parametrize("log", [False, True], ids=["softmax", "log"])
def test_backward_matches_central_differences(
    backend: str, shape: tuple, axis: int | None, mode: str | None, log: bool
) -> None:
    x = rand(shape, np.float64, seed=7, scale=2.0)
    w = rand(shape, np.float64, seed=8, scale=1.0)
    h = 2.0**-17
    n = x.size
    # every perturbed copy in one call: a leading batch axis of 2n copies
    eye = np.eye(n).reshape((n, *shape))
    batch = np.concatenate([x + h * eye, x - h * eye])
    bax = None if axis is None else (axis % len(shape)) + 1
    if mode == "instance":  # over all axes but the batch and the first
        flat = batch.reshape(2 * n * shape[0], -1)
        fb = to_numpy(softmax(to_backend(flat, backend), -1, log=log)).reshape(batch.shape)
    elif mode == "channel":
        fb = to_numpy(softmax(to_backend(batch, backend), 2, log=log))
    else:
        fb = to_numpy(softmax(to_backend(batch, backend), bax, log=log))
    diff = (fb[:n] - fb[n:]) * w
    fd = (np.sum(diff.reshape(n, -1), axis=1) / (2 * h)).reshape(shape)
    y = softmax(to_backend(x, backend), axis, log=log, mode=mode)
    dx = softmax_backward(to_backend(w, backend), y, axis, log=log, mode=mode)
    np.testing.assert_allclose(to_numpy(dx), fd, rtol=1e-7, atol=1e-7)


def test_plan_in_double(backend: str) -> None:
    plan = softmax_plan((3, 50), log=True, alpha=0.1, dtype=np.float64, backend=backend)
    x = to_backend(rand((3, 50), np.float64, seed=9), backend)
    np.testing.assert_array_equal(to_numpy(plan(x)), to_numpy(softmax(x, log=True, alpha=0.1)))
    with pytest.raises(BadParamError, match="is for float64, got float32"):
        plan(x.astype(np.float32))


def test_mixed_dtypes_name_the_argument(backend: str) -> None:
    y = to_backend(rand((2, 5), np.float64, seed=10), backend)
    with pytest.raises(BadParamError, match="dy: expected dtype float64"):
        softmax_backward(y.astype(np.float32), y)
    with pytest.raises(BadParamError, match="out: expected dtype float64"):
        softmax(y, out=y.astype(np.float32))
