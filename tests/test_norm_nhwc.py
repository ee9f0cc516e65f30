"""Native channels-last (NHWC) group and instance norm: gn_nhwc_fwd, gn_nhwc_bwd and the
parameter-gradient reduction red_chlast_params_nhwc, on every backend against the
float64 reference of cudnnlite.reference.norm.

Tolerances: tests/test_batch_norm.py's ``check``: float32 math with exact two-pass
statistics, one rounding to the storage type at the store (2 units of its roundoff,
relative), plus K32 float32 ulps of the result's scale for the reductions (sums over up
to a few hundred elements per thread / column, fixed order).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from test_batch_norm import check, data, snapshot  # noqa: E402

import cudnnlite.ops.group_norm as GN
from cudnnlite import dtypes
from cudnnlite.errors import BadParamError
from cudnnlite.ops.norm_common import last_kernel_name
from cudnnlite.reference import norm as rn
from cudnnlite.testing import to_backend, to_numpy

# The float32-computing types; float64 (computed in double) has its own few cases and
# tolerances in tests/test_norm_fp64.py (a full fp64 cross product would cost CI time).
DTYPES = [d.numpy for d in dtypes.FP32_COMPUTE_TYPES]
SHORT = {d.numpy: d.short for d in dtypes.FP32_COMPUTE_TYPES}

# (N, *spatial, C), groups. ResNet / UNet-style GN scaled down (32 groups -> 8 of 2
# channels; 64 channels at 9 x 9 > one block's 16 rows), groups of 1 and of C, tiles
# with idle lanes (3 channels per group: 10 groups per block, a partial last tile), more
# than 32 channels per group and not a multiple of 32 (35, 96), H*W = 1, N = 1, 1-d and
# no spatial dims.
CASES = [
    ((2, 5, 6, 16), 8),
    ((1, 9, 9, 64), 32),
    ((2, 3, 3, 12), 1),
    ((3, 4, 1, 6), 6),
    ((1, 4, 4, 48), 16),
    ((2, 3, 2, 70), 2),
    ((2, 2, 2, 96), 1),
    ((2, 1, 1, 35), 5),
    ((1, 4, 7), 7),
    ((3, 40), 4),
]


def fwd_kernel(backend: str, shape: tuple, g: int, dtype: Any, backward: bool = False) -> str:
    """The NHWC forward's (``backward``: the backward's dx) last kernel: gn_nhwc_fwd /
    gn_nhwc_bwd (a block per (sample, tile)), or gn_nhwc_apply / gn_nhwc_bwd_apply when
    too few such blocks split H*W into stretches."""
    from cudnnlite.runtime.select import backend_by_name

    dt = dtypes.lookup(dtype)
    spatial = int(np.prod(shape[1:-1]))
    _, tiles = GN._gn_nhwc_shape(shape[-1], g, spatial, 0.0, None, None, dt)
    split = GN._gn_stretches(GN._table(backend_by_name(backend), dt), shape[0] * tiles, spatial)
    kind = ("bwd_apply" if backward else "apply") if split > 1 else ("bwd" if backward else "fwd")
    return f"gn_nhwc_{kind}_{dt.short}"


def tb_of(backend: str):
    return lambda a: None if a is None else to_backend(a, backend)


def wb(c: int, dtype: Any, seed: int = 3) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(seed)
    return r.uniform(0.5, 1.5, c).astype(dtype), r.standard_normal(c).astype(dtype)


def grad_scale(dy: np.ndarray, w: np.ndarray | None, rstd: np.ndarray) -> float:
    wmax = 1.0 if w is None else float(np.abs(w.astype(float)).max())
    return float(np.abs(dy.astype(float)).max()) * wmax * float(np.max(rstd)) * 4


@pytest.fixture
def reduce_names(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """Names of the reduction kernels launched by GN._reduce during the test."""
    names: list[str] = []
    orig = GN._reduce

    def spy(*args: Any, **kwargs: Any) -> Any:
        r = orig(*args, **kwargs)
        names.append(last_kernel_name())
        return r

    monkeypatch.setattr(GN, "_reduce", spy)
    return names


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("affine", ["both", "weight", "bias", "none"])
@pytest.mark.parametrize("case", CASES, ids=str)
def test_group_norm_nhwc(
    backend: str, case, affine: str, dtype: Any, reduce_names: list[str]
) -> None:
    shape, g = case
    c = shape[-1]
    short = SHORT[np.dtype(dtype)]
    x = data(shape, dtype, 5)
    dy = data(shape, dtype, 6, 0.0, 1.0)
    w, b = wb(c, dtype)
    w = w if affine in ("both", "weight") else None
    b = b if affine in ("both", "bias") else None
    tb = tb_of(backend)
    ry, rmean, rrstd = rn.group_norm(x, g, w, b, 1e-5, "NHWC")
    y, mean, rstd = GN.group_norm_forward(tb(x), g, tb(w), tb(b), layout="NHWC")
    assert last_kernel_name() == fwd_kernel(backend, shape, g, dtype)
    assert y.shape == shape and y.dtype == dtype and mean.shape == (shape[0], g)
    check(y, ry, dtype, what="y")
    check(mean, rmean, np.float32, what="mean")
    check(rstd, rrstd, np.float32, what="rstd")

    dx, dw, db = GN.group_norm_backward(tb(dy), tb(x), g, mean, rstd, tb(w), tb(b), layout="NHWC")
    rdx, rdw, rdb = rn.group_norm_backward(dy, x, g, rmean, rrstd, w, "NHWC")
    if affine == "none":
        assert last_kernel_name() == fwd_kernel(backend, shape, g, dtype, backward=True)
        assert reduce_names == [] and dw is None and db is None
    else:
        assert reduce_names == [f"red_chlast_params_nhwc_{short}"]
    check(dx, rdx, dtype, scale=grad_scale(dy, w, rrstd), what="dx")
    per = x.size // c
    dmax = float(np.abs(dy.astype(float)).max())
    if w is not None:
        check(dw, rdw, dtype, scale=dmax * 4 * per, what="dweight")
    else:
        assert dw is None
    if b is not None:
        check(db, rdb, dtype, scale=dmax * per, what="dbias")
    else:
        assert db is None


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("affine", [True, False])
def test_small_batch_splits_the_forward_along_hw(backend: str, affine: bool, dtype: Any) -> None:
    """One sample of 48 x 48 with 4 groups of 10 channels (2 tiles: 2 blocks, far fewer
    than the SMs): the forward's statistics over stretches of H*W, merged per group
    (gn_nhwc_stats, gn_nhwc_finalize, gn_nhwc_apply), and the backward's sums over the
    same stretches (gn_nhwc_bwd_partial, gn_nhwc_bwd_apply), against the reference; a
    constant group still normalizes to exactly 0."""
    shape, g = (1, 48, 48, 40), 4
    x, dy = data(shape, dtype, 11, 3.0, 2.0), data(shape, dtype, 12, 0.0, 1.0)
    w, b = wb(40, dtype) if affine else (None, None)
    tb = tb_of(backend)
    assert fwd_kernel(backend, shape, g, dtype).startswith("gn_nhwc_apply")
    y, mean, rstd = GN.group_norm_forward(tb(x), g, tb(w), tb(b), layout="NHWC")
    assert last_kernel_name() == fwd_kernel(backend, shape, g, dtype)
    ry, rmean, rrstd = rn.group_norm(x, g, w, b, 1e-5, "NHWC")
    check(y, ry, dtype, what="y")
    check(mean, rmean, np.float32, what="mean", scale=8.0)
    check(rstd, rrstd, np.float32, what="rstd")
    dx, dw, db = GN.group_norm_backward(tb(dy), tb(x), g, mean, rstd, tb(w), tb(b),
                                        layout="NHWC")  # fmt: skip
    if not affine:  # (with a weight, dweight's kernels launch last)
        assert last_kernel_name() == fwd_kernel(backend, shape, g, dtype, backward=True)
    rdx, rdw, rdb = rn.group_norm_backward(dy, x, g, rmean, rrstd, w, "NHWC")
    check(dx, rdx, dtype, scale=grad_scale(dy, w, rrstd))
    if affine:
        per = x.size // 40
        check(dw, rdw, dtype, scale=float(np.abs(dy.astype(float)).max()) * 4 * per)
        check(db, rdb, dtype, scale=float(np.abs(dy.astype(float)).max()) * per)
    v = {np.float16: 3e4}.get(dtype, 12345.678)
    y, mean, _ = GN.group_norm_forward(tb(np.full(shape, v, dtype)), g, layout="NHWC")
    assert (to_numpy(y) == 0).all() and (to_numpy(mean) == float(np.dtype(dtype).type(v))).all()


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("affine", [True, False])
def test_instance_norm_nhwc(backend: str, affine: bool, dtype: Any) -> None:
    # instance norm = group norm with G = C; C = 37 (prime, 2 tiles of 32 + 5 channels)
    shape = (2, 3, 5, 37)
    x = data(shape, dtype, 7)
    dy = data(shape, dtype, 8, 0.0, 1.0)
    w, b = wb(37, dtype) if affine else (None, None)
    tb = tb_of(backend)
    ry, rmean, rrstd = rn.instance_norm(x, w, b, 1e-5, "NHWC")
    y, mean, rstd = GN.instance_norm_forward(tb(x), tb(w), tb(b), layout="NHWC")
    assert last_kernel_name() == fwd_kernel(backend, shape, 37, dtype)
    assert mean.shape == (2, 37)
    check(y, ry, dtype)
    check(rstd, rrstd, np.float32)
    dx, dw, db = GN.instance_norm_backward(tb(dy), tb(x), mean, rstd, tb(w), tb(b), layout="NHWC")
    rdx, rdw, rdb = rn.instance_norm_backward(dy, x, rmean, rrstd, w, "NHWC")
    check(dx, rdx, dtype, scale=grad_scale(dy, w, rrstd))
    if affine:
        dmax = float(np.abs(dy.astype(float)).max())
        check(dw, rdw, dtype, scale=dmax * 4 * 30)
        check(db, rdb, dtype, scale=dmax * 30)
    else:
        assert dw is None and db is None


def test_nhwc_matches_nchw_path(backend: str) -> None:
    # the native NHWC kernels and the NCHW row kernels compute the same function
    x = data((2, 4, 5, 24), np.float32, 20)
    w, b = wb(24, np.float32)
    tb = tb_of(backend)
    y1, m1, r1 = GN.group_norm_forward(tb(x), 6, tb(w), tb(b), layout="NHWC")
    xc = np.ascontiguousarray(np.moveaxis(x, -1, 1))
    y2, m2, r2 = GN.group_norm_forward(tb(xc), 6, tb(w), tb(b), layout="NCHW")
    assert last_kernel_name() == "rownorm_fwd_mean_fp32"
    check(y1, np.moveaxis(to_numpy(y2), 1, -1), np.float32)
    check(m1, to_numpy(m2), np.float32)
    check(r1, to_numpy(r2), np.float32)


def test_cancellation_nhwc(backend: str) -> None:
    # mean 1e4, std 1 per group: the two-pass statistics keep full accuracy
    x = data((2, 6, 6, 16), np.float32, 9, loc=1e4, sd=1.0)
    ry, _, rrstd = rn.group_norm(x, 4, layout="NHWC")
    y, _, rstd = GN.group_norm_forward(to_backend(x, backend), 4, layout="NHWC")
    np.testing.assert_allclose(to_numpy(rstd), rrstd, rtol=1e-5)
    np.testing.assert_allclose(to_numpy(y), ry, atol=2e-3)  # x itself is quantized to 2^-10


def test_deterministic_nhwc(backend: str) -> None:
    x = data((2, 7, 7, 64), np.float32, 21)
    dy = data((2, 7, 7, 64), np.float32, 22, 0.0, 1.0)
    w, b = wb(64, np.float32)
    tb = tb_of(backend)
    runs = []
    for _ in range(2):
        y, m, r = GN.group_norm_forward(tb(x), 8, tb(w), tb(b), layout="NHWC")
        grads = GN.group_norm_backward(tb(dy), tb(x), 8, m, r, tb(w), tb(b), layout="NHWC")
        runs.append(snapshot(y, m, r, *grads))
    assert runs[0] == runs[1]


def test_strided_input_and_out_nhwc(backend: str) -> None:
    full = data((2, 4, 6, 20), np.float32, 23)
    x = full[:, :, ::2, ::2]  # (2, 4, 3, 10), not contiguous
    dy = data((2, 4, 6, 20), np.float32, 24, 0.0, 1.0)[:, :, ::2, ::2]
    ry, rmean, rrstd = rn.group_norm(x, 5, layout="NHWC")
    out = to_backend(np.zeros((2, 4, 3, 20), np.float32), backend)[..., ::2]
    y, mean, rstd = GN.group_norm_forward(
        to_backend(full, backend)[:, :, ::2, ::2], 5, layout="NHWC", out=out
    )
    assert y is out
    check(out, ry, np.float32)
    dx, _, _ = GN.group_norm_backward(
        to_backend(dy, backend), to_backend(x, backend), 5, mean, rstd, layout="NHWC"
    )
    check(
        dx,
        rn.group_norm_backward(dy, x, 5, rmean, rrstd, None, "NHWC")[0],
        np.float32,
        scale=grad_scale(dy, None, rrstd),
    )


@pytest.mark.parametrize(
    "call,match",
    [
        (
            lambda x, dy, t: GN.group_norm(x, 3, layout="NHWC"),
            "num_groups: expected a positive divisor of the 8",
        ),
        (
            lambda x, dy, t: GN.group_norm(x, 2, t(np.ones(5, np.float32)), layout="NHWC"),
            r"weight: expected shape \(8,\)",
        ),
        (
            lambda x, dy, t: GN.group_norm(x, 2, None, t(np.ones(8, np.float16)), layout="NHWC"),
            "bias: expected dtype float32",
        ),
        (
            lambda x, dy, t: GN.group_norm_backward(
                dy[:, :1],
                x,
                2,
                t(np.zeros((2, 2), np.float32)),
                t(np.ones((2, 2), np.float32)),
                layout="NHWC",
            ),
            "dy",
        ),
        (
            lambda x, dy, t: GN.group_norm_backward(
                dy,
                x,
                2,
                t(np.zeros((2, 3), np.float32)),
                t(np.ones((2, 2), np.float32)),
                layout="NHWC",
            ),
            r"mean: expected shape \(2, 2\)",
        ),
        (
            lambda x, dy, t: GN.group_norm_backward(dy, x, 2, None, None, layout="NHWC"),
            "mean: the forward's saved statistic is needed",
        ),
        (
            lambda x, dy, t: GN.instance_norm(x, t(np.ones(3, np.float32)), layout="NHWC"),
            "weight: expected shape",
        ),
    ],
)
def test_bad_arguments_nhwc(backend: str, call, match: str) -> None:
    x = to_backend(data((2, 3, 3, 8), np.float32, 30), backend)
    dy = to_backend(data((2, 3, 3, 8), np.float32, 31), backend)
    before = snapshot(x, dy)
    with pytest.raises(BadParamError, match=match):
        call(x, dy, lambda a: to_backend(a, backend))
    assert snapshot(x, dy) == before
