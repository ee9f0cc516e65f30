"""Property tests of normalization (hypothesis): batch norm is invariant to a shift and
positive scale of x per channel; layer norm rows have mean 0 and variance 1 (up to eps);
the float64 reference is matched over random shapes."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

import cudnnlite.ops.batch_norm as BN  # noqa: E402
import cudnnlite.ops.group_norm as GN  # noqa: E402
import cudnnlite.ops.row_norm as ROW  # noqa: E402
from cudnnlite.reference import norm as rn  # noqa: E402
from cudnnlite.testing import to_backend, to_numpy  # noqa: E402

# hypothesis + the function-scoped `backend` fixture: the fixture is a plain string.
HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@HYPO
@given(
    n=st.integers(1, 4),
    c=st.integers(1, 40),
    hw=st.integers(1, 30),
    shift=st.floats(-1e3, 1e3),
    scale=st.floats(0.1, 10),
    seed=st.integers(0, 2**16),
    layout=st.sampled_from(["NCHW", "NHWC"]),
)
def test_batch_norm_shift_scale_invariant(
    backend: str, n, c, hw, shift, scale, seed, layout
) -> None:
    if n * hw < 2:
        hw = 2
    shape = (n, c, hw) if layout == "NCHW" else (n, hw, c)
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    train = BN.batch_norm_forward_training
    y1 = to_numpy(train(to_backend(x, backend), eps=0.0, layout=layout)[0])
    x2 = (x * np.float32(scale) + np.float32(shift)).astype(np.float32)
    y2 = to_numpy(train(to_backend(x2, backend), eps=0.0, layout=layout)[0])
    r2 = rn.batch_norm_train(x2, np.ones(c), np.zeros(c), 0.0, layout=layout)
    # The saved mean is float32 (as cuDNN's and PyTorch's): x - mean carries half an ulp of
    # |mean| ~ |shift|, times invstd. x2 itself was rounded to float32 likewise.
    mean_ulp = 2.0**-23 * (abs(shift) + 4 * scale)
    atol = 1e-5 + 2 * mean_ulp * float(r2["invstd"].max())
    np.testing.assert_allclose(y2, r2["y"], atol=atol)
    np.testing.assert_allclose(y1, y2, atol=2 * atol)


@HYPO
@given(
    rows=st.integers(1, 6),
    cols=st.integers(1, 300),
    seed=st.integers(0, 2**16),
    loc=st.floats(-100, 100),
)
def test_layer_norm_rows_standardized(backend: str, rows, cols, seed, loc) -> None:
    x = (np.random.default_rng(seed).standard_normal((rows, cols)) + loc).astype(np.float32)
    y, mean, rstd = ROW.layer_norm_forward(
        to_backend(x, backend), (cols,), eps=0.0 if cols > 1 else 1e-5
    )
    ry, rmean, rrstd = rn.layer_norm(x, (cols,), eps=0.0 if cols > 1 else 1e-5)
    np.testing.assert_allclose(to_numpy(y), ry, atol=5e-5 + 2.0**-23 * abs(loc) * rrstd.max())
    np.testing.assert_allclose(to_numpy(mean), rmean, atol=1e-5 * (1 + abs(loc)))
    if cols > 1:
        # the float32 mean is a reduction of `cols` values of magnitude ~|loc|: each of its
        # ~log2(cols) levels of additions rounds by up to half an ulp of |loc|, and that
        # error shifts every y by it times rstd
        levels = max(1, int(np.ceil(np.log2(cols))))
        shift = levels * 2.0**-24 * (abs(loc) + 8) * float(rrstd.max())
        yy = to_numpy(y).astype(np.float64)
        np.testing.assert_allclose(yy.mean(1), 0.0, atol=1e-6 + 2 * shift)
        np.testing.assert_allclose(yy.var(1), 1.0, atol=1e-4)


@HYPO
@given(
    n=st.integers(1, 3),
    g=st.integers(1, 4),
    cg=st.integers(1, 5),
    hw=st.integers(1, 12),
    seed=st.integers(0, 2**16),
)
def test_group_norm_matches_reference(backend: str, n, g, cg, hw, seed) -> None:
    c = g * cg
    x = np.random.default_rng(seed).standard_normal((n, c, hw)).astype(np.float32)
    w = np.linspace(0.5, 2, c).astype(np.float32)
    y = GN.group_norm(to_backend(x, backend), g, to_backend(w, backend))
    np.testing.assert_allclose(to_numpy(y), rn.group_norm(x, g, w)[0], atol=5e-5, rtol=1e-5)


@settings(HYPO, max_examples=30, deadline=None)
# one of each kernel for sure: a group of 16 lanes a row (37 rows: the last warp partly
# past the end), 16-byte packs with a block a row, elements (one element off), split rows
@example(rows=37, cols=64, offset=0, affine=True, seed=1)
@example(rows=5, cols=768, offset=0, affine=True, seed=2)
@example(rows=5, cols=64, offset=1, affine=False, seed=3)
@example(rows=3, cols=8192, offset=0, affine=True, seed=4)
@given(
    rows=st.integers(1, 40),
    # any length; whole 16-byte packs (short rows: a group of lanes each); split rows
    cols=st.one_of(
        st.integers(1, 300), st.integers(1, 32).map(lambda p: 4 * p), st.integers(8190, 8200)
    ),
    offset=st.sampled_from([0, 1]),
    affine=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_layer_norm_every_row_kernel_matches_reference(
    backend: str, rows, cols, offset, affine, seed
) -> None:
    """Every row kernel (elements, 16-byte packs, a group of lanes per short row, split
    statistics for few long rows) over random shapes, aligned or one element off, forward
    and backward against the float64 reference."""
    r = np.random.default_rng(seed)
    if rows * cols > 40000:
        rows = max(1, 40000 // cols)
    buf = r.standard_normal(rows * cols + offset).astype(np.float32)
    dbuf = r.standard_normal(rows * cols + offset).astype(np.float32)
    x, dy = buf[offset:].reshape(rows, cols), dbuf[offset:].reshape(rows, cols)
    w = r.uniform(0.5, 1.5, cols).astype(np.float32) if affine else None
    b = r.standard_normal(cols).astype(np.float32) if affine else None

    def on(a: np.ndarray | None, shifted: bool = False) -> object:
        """``a`` on the backend; ``shifted``: at the same offset from an aligned start."""
        if a is None or backend == "cpu":
            return a
        if not shifted:
            return to_backend(a, backend)
        padded = to_backend(np.concatenate([np.zeros(offset, a.dtype), a.reshape(-1)]), backend)
        return padded[offset:].reshape(a.shape)

    xs, dys = on(x, True), on(dy, True)
    y, mean, rstd = ROW.layer_norm_forward(xs, (cols,), on(w), on(b))
    ry, rmean, rrstd = rn.layer_norm(x, (cols,), w, b, 1e-5)
    np.testing.assert_allclose(to_numpy(y), ry, atol=1e-4, rtol=1e-4)
    dx = ROW.layer_norm_backward(dys, xs, (cols,), mean, rstd, on(w), on(b))[0]
    rdx = rn.layer_norm_backward(dy, x, (cols,), rmean, rrstd, w)[0]
    scale = float(np.abs(dy).max()) * float(rrstd.max()) * (1.5 if affine else 1.0)
    np.testing.assert_allclose(to_numpy(dx), rdx, atol=1e-4 * scale * 4, rtol=1e-4)
