"""float64 normalization (issue 18): every family forward and backward against the float64
reference of cudnnlite.reference.norm, central finite-difference checks of two backward
functions, NaN isolation, and the errors for mixed dtypes. One emulator module (norm.cu
for double) serves the whole file.

Tolerances (``close``): the kernels compute and accumulate in double, as the reference
does, in another order. A statistic summed over K elements then differs from the
reference by at most K * ACCUMULATION_EPS["fp64"] (2^-52, both sides' roundings) times
the summed magnitude; the outputs chain a handful of such quantities (mean, the
variance's sum of squares, rstd, then the scale and shift, or the backward's two sums),
so the bound used is ``8 K * 2^-52 * scale`` with ``scale`` the magnitude of the
result's largest term, plus ELEMENTWISE_RTOL["fp64"] (16 ulps) of the value. For the
shapes here that is 1e-13 .. 1e-11 of the scale: float32 arithmetic anywhere in the
chain (1e-7), or an eps / momentum / coefficient rounded to float32 (1e-8 .. 1e-9
relative), fails it by orders of magnitude.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cudnnlite.ops.batch_norm as BN
import cudnnlite.ops.group_norm as GN
import cudnnlite.ops.lrn as LRN
import cudnnlite.ops.row_norm as ROW
from cudnnlite.errors import BadParamError
from cudnnlite.ops.norm_common import last_kernel_name
from cudnnlite.reference import norm as rn
from cudnnlite.testing import ACCUMULATION_EPS, ELEMENTWISE_RTOL, to_backend, to_numpy

F8 = np.float64
EPS64 = ACCUMULATION_EPS["fp64"]


def close(got: Any, ref: Any, terms: int, scale: float | None = None, what: str = "") -> None:
    """|got - ref| <= 16 ulp |ref| + 8 terms 2^-52 scale (see the module docstring)."""
    ref = np.asarray(ref, dtype=F8)
    g = to_numpy(got)
    assert g.dtype == F8, f"{what}: expected float64, got {g.dtype}"
    scale = float(np.abs(ref).max()) if scale is None else scale
    np.testing.assert_allclose(
        g, ref, rtol=ELEMENTWISE_RTOL["fp64"], atol=8 * terms * EPS64 * scale, err_msg=what
    )


def data(shape: tuple[int, ...], seed: int, loc: float = 0.5, sd: float = 2.0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape) * sd + loc


def tb(a: Any, backend: str) -> Any:
    return None if a is None else to_backend(a, backend)


def absmax(a: Any) -> float:
    return float(np.abs(np.asarray(a, dtype=F8)).max())


# ------------------------------------------------------------------ batch norm

# ResNet-50's 64-channel stage scaled down (H*W = 30: even, the 2-double vector pass) and
# an odd one (prime C, H*W = 5: the scalar pass); NHWC with C = 37 is scalar, C = 64 vector.
BN_SHAPES = [(2, 64, 6, 5), (3, 37, 5, 1)]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", BN_SHAPES, ids=str)
def test_batch_norm_training_and_backward(backend: str, shape, layout: str) -> None:
    if layout == "NHWC":
        shape = (shape[0], *shape[2:], shape[1])
    c = shape[-1] if layout == "NHWC" else shape[1]
    m = int(np.prod(shape)) // c  # elements per channel: the K of every statistic
    x, dy = data(shape, 1), data(shape, 2, 0.0, 1.0)
    w, b = data((c,), 3, 1.0, 0.3), data((c,), 4)
    rm, rv = data((c,), 5), np.full(c, 2.0)
    # eps 1e-3 and momentum 0.1 are not float32 numbers: rounded, they would move invstd
    # and the running statistics by ~1e-11 and ~1e-9 relative, far above the bound
    ref = rn.batch_norm_train(x, w, b, 1e-3, rm, rv, 0.1, layout=layout)
    rmb, rvb, xb, wb = tb(rm, backend), tb(rv, backend), tb(x, backend), tb(w, backend)
    y, mean, invstd = BN.batch_norm_forward_training(
        xb, wb, tb(b, backend), rmb, rvb, momentum=0.1, eps=1e-3, layout=layout
    )
    assert y.dtype == F8 and mean.dtype == F8 and invstd.dtype == F8
    vec = (shape[2] * shape[3] if layout == "NCHW" else c) % 2 == 0
    tag = ("_vec_planar" if layout == "NCHW" else "_vec_chlast") if vec else ""
    assert last_kernel_name() == f"bn_fwd_apply{tag}_fp64"
    invmax = absmax(ref["invstd"])
    # y = xhat gamma + beta: the mean's error is amplified by invstd gamma
    close(y, ref["y"], m, absmax(x) * invmax * absmax(w) + absmax(b), "y")
    close(mean, ref["mean"], m, absmax(x), "mean")
    close(invstd, ref["invstd"], m, invmax, "invstd")
    close(rmb, ref["running_mean"], m, absmax(x), "running_mean")
    close(rvb, ref["running_var"], m, absmax(ref["running_var"]), "running_var")

    dx, dw, db, dz = BN.batch_norm_backward(tb(dy, backend), xb, mean, invstd, wb, layout=layout)
    g = rn.batch_norm_backward(dy, x, w, ref["mean"], ref["invstd"], layout=layout)
    assert dz is None and dw.dtype == F8 and db.dtype == F8
    sums = absmax(dy) * m  # the magnitude summed into dgamma, dbeta
    close(dw, g["dgamma"], m, sums * 4, "dgamma")
    close(db, g["dbeta"], m, sums, "dbeta")
    # dx = gamma invstd (g - dbeta / m - xhat dgamma / m): its terms' scale
    close(dx, g["dx"], m, absmax(w) * invmax * absmax(dy) * 8, "dx")


@pytest.mark.parametrize("activation, coef", [("gelu", None), ("leaky_relu", 0.1)])
def test_batch_norm_fused_and_inference(backend: str, activation: str, coef: Any) -> None:
    # the fused add + activation, forward (training and inference) and backward; leaky
    # ReLU's slope 0.1 reaches the kernel as the double 0.1 (float32's is 1.5e-9 off)
    shape, c, m = (2, 12, 4, 5), 12, 40
    x, z, dy = data(shape, 7), data(shape, 8, 0.0, 1.0), data(shape, 9, 0.0, 1.0)
    w, b = data((c,), 10, 1.0, 0.3), data((c,), 11)
    ref = rn.batch_norm_train(x, w, b, 1e-5, z=z, activation=activation, coef=coef)
    xb, zb, wb, bb = (tb(a, backend) for a in (x, z, w, b))
    y, mean, invstd = BN.batch_norm_forward_training(
        xb, wb, bb, z=zb, activation=activation, coef=coef
    )
    scale = absmax(ref["y"]) + absmax(z) + 4
    close(y, ref["y"], m, scale, "y")
    dx, dw, db, dz = BN.batch_norm_backward(
        tb(dy, backend), xb, mean, invstd, wb, bias=bb, z=zb, activation=activation, coef=coef
    )
    g = rn.batch_norm_backward(
        dy, x, w, ref["mean"], ref["invstd"], beta=b, z=z, activation=activation, coef=coef
    )
    close(dz, g["dz"], 1, absmax(dy), "dz")  # elementwise: no sum
    close(dw, g["dgamma"], m, absmax(dy) * m * 4, "dgamma")
    close(db, g["dbeta"], m, absmax(dy) * m, "dbeta")
    close(dx, g["dx"], m, absmax(w) * absmax(ref["invstd"]) * absmax(dy) * 8, "dx")
    # inference from statistics given as running ones: elementwise, exact eps
    rv = 1 / ref["invstd"] ** 2
    yi = BN.batch_norm_forward_inference(
        xb, tb(ref["mean"], backend), tb(rv, backend), wb, bb, eps=1e-3, z=zb,
        activation=activation, coef=coef,
    )  # fmt: skip
    ri = rn.batch_norm_inference(x, w, b, ref["mean"], rv, 1e-3, z=z, activation=activation,
                                 coef=coef)  # fmt: skip
    close(yi, ri, 1, scale, "inference")


def test_batch_norm_per_activation(backend: str) -> None:
    shape = (5, 6, 3, 4)  # BERT-like features per activation, N = 5 samples each
    x, dy = data(shape, 12), data(shape, 13, 0.0, 1.0)
    w, b = data(shape[1:], 14, 1.0, 0.3), data(shape[1:], 15)
    ref = rn.batch_norm_train(x, w, b, 1e-3, mode="per_activation")
    xb, wb = tb(x, backend), tb(w, backend)
    y, mean, invstd = BN.batch_norm_forward_training(
        xb, wb, tb(b, backend), eps=1e-3, mode="per_activation"
    )
    assert mean.shape == shape[1:]
    close(y, ref["y"], 5, absmax(ref["y"]) + 4, "y")
    dx, dw, db, _ = BN.batch_norm_backward(
        tb(dy, backend), xb, mean, invstd, wb, mode="per_activation"
    )
    g = rn.batch_norm_backward(dy, x, w, ref["mean"], ref["invstd"], "per_activation")
    close(dx, g["dx"], 5, absmax(w) * absmax(ref["invstd"]) * absmax(dy) * 8, "dx")
    close(dw, g["dgamma"], 5, absmax(dy) * 5 * 4, "dgamma")


def test_batch_norm_nan_stays_in_its_channel(backend: str) -> None:
    # a NaN (and an inf) poison their own channel's statistics only: the per-channel
    # partials of every chunk are merged per channel
    x = data((4, 3, 6, 5), 16)
    x[2, 1, 3, 3] = np.nan
    x[1, 2, 0, 0] = np.inf
    y, mean, invstd = BN.batch_norm_forward_training(tb(x, backend))
    y, mean = to_numpy(y), to_numpy(mean)
    assert np.isnan(mean[1]) and np.isnan(y[:, 1]).all()
    assert not np.isfinite(mean[2]) and not np.isfinite(y[:, 2]).any()
    clean = x[:, 0]
    ref = rn.batch_norm_train(clean[:, None], np.ones(1), np.zeros(1), 1e-5)
    close(y[:, :1], ref["y"], clean.size, absmax(ref["y"]) + 4, "clean channel")


# ------------------------------------------------------------------ row norms


@pytest.mark.parametrize("case", [((3, 700), (700,)), ((2, 3, 37), (37,))], ids=str)
def test_layer_and_rms_norm(backend: str, case) -> None:
    shape, ns = case
    k = int(np.prod(ns))
    x, dy = data(shape, 17), data(shape, 18, 0.0, 1.0)
    w, b = data(ns, 19, 1.0, 0.3), data(ns, 20)
    rows = x.size // k
    ry, rmean, rrstd = rn.layer_norm(x, ns, w, b, 1e-5)
    y, mean, rstd = ROW.layer_norm_forward(tb(x, backend), ns, tb(w, backend), tb(b, backend))
    # (two doubles per 16-byte pack; rows of at most 32 packs: a group of lanes per row)
    vec = "" if k % 2 else "_rows" if k // 2 <= 32 else "_vec"
    assert last_kernel_name() == f"rownorm_fwd_mean{vec}_fp64" and mean.dtype == F8
    close(y, ry, k, absmax(ry) + absmax(b), "y")
    close(mean, rmean, k, absmax(x), "mean")
    close(rstd, rrstd, k, absmax(rrstd), "rstd")
    dx, dw, db = ROW.layer_norm_backward(
        tb(dy, backend), tb(x, backend), ns, mean, rstd, tb(w, backend), tb(b, backend)
    )
    rdx, rdw, rdb = rn.layer_norm_backward(dy, x, ns, rmean, rrstd, w)
    close(dx, rdx, k, absmax(dy) * absmax(w) * absmax(rrstd) * 8, "dx")
    close(dw, rdw, rows, absmax(dy) * 4 * rows, "dweight")
    close(db, rdb, rows, absmax(dy) * rows, "dbias")
    # RMS norm, eps None: float64's machine epsilon (PyTorch's default for the dtype)
    ry, rrstd = rn.rms_norm(x, ns, w)
    y, rstd = ROW.rms_norm_forward(tb(x, backend), ns, tb(w, backend))
    close(y, ry, k, absmax(ry), "rms y")
    close(rstd, rrstd, k, absmax(rrstd), "rms rstd")
    dx, dw = ROW.rms_norm_backward(tb(dy, backend), tb(x, backend), ns, rstd, tb(w, backend))
    rdx, rdw = rn.rms_norm_backward(dy, x, ns, rrstd, w)
    close(dx, rdx, k, absmax(dy) * absmax(w) * absmax(rrstd) * 8, "rms dx")
    close(dw, rdw, rows, absmax(dy) * 4 * rows, "rms dweight")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_group_and_instance_norm(backend: str, layout: str) -> None:
    # ResNet-style GN (8 groups of 2 channels) and instance norm (groups = C)
    base = (2, 16, 5, 6)
    shape = base if layout == "NCHW" else (2, 5, 6, 16)
    x, dy = data(shape, 21), data(shape, 22, 0.0, 1.0)
    w, b = data((16,), 23, 1.0, 0.3), data((16,), 24)
    for g in (8, 16):
        k = 16 // g * 30  # elements per (sample, group)
        ry, rmean, rrstd = rn.group_norm(x, g, w, b, 1e-5, layout)
        xb, wb, bb = tb(x, backend), tb(w, backend), tb(b, backend)
        y, mean, rstd = GN.group_norm_forward(xb, g, wb, bb, layout=layout)
        # (NHWC: 30 rows of H*W, under one stretch: no split)
        name = "gn_nhwc_fwd" if layout == "NHWC" else "rownorm_fwd_mean"
        assert last_kernel_name() == f"{name}_fp64"
        close(y, ry, k, absmax(ry) + absmax(b), f"y g={g}")
        close(mean, rmean, k, absmax(x), f"mean g={g}")
        close(rstd, rrstd, k, absmax(rrstd), f"rstd g={g}")
        dx, dw, db = GN.group_norm_backward(
            tb(dy, backend), xb, g, mean, rstd, wb, bb, layout=layout
        )
        rdx, rdw, rdb = rn.group_norm_backward(dy, x, g, rmean, rrstd, w, layout)
        close(dx, rdx, k, absmax(dy) * absmax(w) * absmax(rrstd) * 8, f"dx g={g}")
        per = x.size // 16  # terms of each channel's parameter gradient
        close(dw, rdw, per, absmax(dy) * 4 * per, f"dweight g={g}")
        close(db, rdb, per, absmax(dy) * per, f"dbias g={g}")
    yi = GN.instance_norm(tb(x, backend), tb(w, backend), tb(b, backend), layout=layout)
    close(yi, rn.instance_norm(x, w, b, 1e-5, layout)[0], 30, absmax(ry) + absmax(b), "inst")


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_lrn(backend: str, layout: str) -> None:
    # AlexNet's LRN (size 5, beta 0.75, k 2), alpha 1e-3: not a float32 number
    shape = (2, 7, 3, 4) if layout == "NCHW" else (2, 3, 4, 7)
    x, dy = data(shape, 25), data(shape, 26, 0.0, 1.0)
    args = (5, 1e-3, 0.75, 2.0)
    y = LRN.lrn(tb(x, backend), *args, layout=layout)
    ry = rn.lrn(x, *args, layout=layout)
    close(y, ry, 5, absmax(ry), "y")  # 5 squares per window
    dx = LRN.lrn_backward(tb(dy, backend), tb(x, backend), *args, layout=layout)
    rdx = rn.lrn_backward(dy, x, *args, layout=layout)
    close(dx, rdx, 5, absmax(dy) * 4, "dx")


# ------------------------------------------------------------------ finite differences


def fd_grad(loss: Callable[[], float], a: np.ndarray, h: float) -> np.ndarray:
    """Central differences of loss() over every element of ``a`` (perturbed in place)."""
    g = np.empty_like(a)
    flat, gf = a.reshape(-1), g.reshape(-1)
    for i in range(flat.size):
        v = flat[i]
        flat[i] = v + h
        up = loss()
        flat[i] = v - h
        down = loss()
        flat[i] = v
        gf[i] = (up - down) / (2 * h)
    return g


# Step and tolerance: the inputs are O(1) and the losses O(10); a central difference
# with h = 1e-5 has truncation error h^2 / 6 |f'''| ~ 1e-10 * |f'''| and rounding error
# ~ 2^-52 |L| / h ~ 1e-10, both far below 1e-6 of the gradients' scale, which any wrong
# term (or float32 arithmetic: its 1e-7 |L| / h = 0.1) would exceed.
FD_STEP = 1e-5
FD_TOL = 1e-6


def test_batch_norm_backward_finite_differences(emulator_only: None, backend: str) -> None:
    shape = (3, 2, 2, 3)  # 18 values per channel
    x, r = data(shape, 27), data(shape, 28, 0.0, 1.0)
    w, b = data((2,), 29, 1.0, 0.3), data((2,), 30)

    def loss() -> float:
        return float((BN.batch_norm_forward_training(x, w, b)[0] * r).sum())

    _, mean, invstd = BN.batch_norm_forward_training(x, w, b)
    dx, dw, db, _ = BN.batch_norm_backward(r, x, mean, invstd, w)
    for name, got, a in (("dx", dx, x), ("dgamma", dw, w), ("dbeta", db, b)):
        fd = fd_grad(loss, a, FD_STEP)
        np.testing.assert_allclose(got, fd, rtol=0, atol=FD_TOL * absmax(fd), err_msg=name)


def test_layer_norm_backward_finite_differences(emulator_only: None, backend: str) -> None:
    x, r = data((3, 7), 31), data((3, 7), 32, 0.0, 1.0)
    w, b = data((7,), 33, 1.0, 0.3), data((7,), 34)

    def loss() -> float:
        return float((ROW.layer_norm(x, (7,), w, b) * r).sum())

    _, mean, rstd = ROW.layer_norm_forward(x, (7,), w, b)
    dx, dw, db = ROW.layer_norm_backward(r, x, (7,), mean, rstd, w, b)
    for name, got, a in (("dx", dx, x), ("dweight", dw, w), ("dbias", db, b)):
        fd = fd_grad(loss, a, FD_STEP)
        np.testing.assert_allclose(got, fd, rtol=0, atol=FD_TOL * absmax(fd), err_msg=name)


# ------------------------------------------------------------------ bad input


def test_mixed_dtypes_are_rejected(backend: str) -> None:
    x = tb(data((2, 4, 3, 3), 35), backend)
    f4 = tb(np.ones(4, np.float32), backend)
    f8 = tb(np.ones(4), backend)
    cases: list[tuple[Callable[[], Any], str]] = [
        (lambda: BN.batch_norm_forward_training(x, f4), "weight: expected dtype float64"),
        (lambda: BN.batch_norm_forward_training(x, f8, None, f4), "running_mean: expected dtype"),
        (lambda: BN.batch_norm_forward_inference(x, f8, f4), "running_var: expected dtype"),
        (lambda: BN.batch_norm_backward(x.astype(np.float32), x, f8, f8), "dy"),
        (lambda: BN.batch_norm_backward(x, x, f4, f8), "save_mean: expected dtype float64"),
        (lambda: GN.group_norm(x, 2, f4), "weight: expected dtype float64"),
        (lambda: ROW.layer_norm(x, (3,), tb(np.ones(3, np.float32), backend)), "weight: expected"),
        (lambda: LRN.lrn_backward(x.astype(np.float32), x, 3), "dy"),
        # 32-bit data keeps float32 parameters: float64 ones are the mixed case there
        (lambda: BN.batch_norm(x.astype(np.float32), f8, f8), "running_mean: expected dtype"),
    ]
    for call, match in cases:
        with pytest.raises(BadParamError, match=match):
            call()


def test_short_split_and_nhwc_split_kernels_in_double(backend: str) -> None:
    """float64 through the kernels for short rows (32 packs of 2 doubles: a group of lanes a
    row), few long rows (split statistics, split backward) and small-batch NHWC group norm
    (stretches of H*W), forward and backward, against the reference."""
    for (rows, k), form in (((37, 64), "_rows"), ((3, ROW.SPLIT_MIN_COLS), "split")):
        x, dy = data((rows, k), 31), data((rows, k), 32, 0.0, 1.0)
        w, b = data((k,), 33, 1.0, 0.3), data((k,), 34)
        y, mean, rstd = ROW.layer_norm_forward(tb(x, backend), (k,), tb(w, backend), tb(b, backend))
        want = "rownorm_apply" if form == "split" else "rownorm_fwd_mean_rows"
        assert last_kernel_name() == f"{want}_fp64"
        ry, rmean, rrstd = rn.layer_norm(x, (k,), w, b, 1e-5)
        close(y, ry, k, absmax(ry) + absmax(b), f"y {form}")
        close(rstd, rrstd, k, absmax(rrstd), f"rstd {form}")
        dx = ROW.layer_norm_backward(tb(dy, backend), tb(x, backend), (k,), mean, rstd)[0]
        want = "rownorm_bwd_apply_mean" if form == "split" else "rownorm_bwd_mean_rows"
        assert last_kernel_name() == f"{want}_fp64"
        rdx = rn.layer_norm_backward(dy, x, (k,), rmean, rrstd, None)[0]
        close(dx, rdx, k, absmax(dy) * absmax(rrstd) * 4, f"dx {form}")
    shape, g = (1, 48, 48, 40), 4
    x, dy = data(shape, 35), data(shape, 36, 0.0, 1.0)
    k = x.size // g
    y, mean, rstd = GN.group_norm_forward(tb(x, backend), g, layout="NHWC")
    assert last_kernel_name() == "gn_nhwc_apply_fp64"
    ry, rmean, rrstd = rn.group_norm(x, g, None, None, 1e-5, "NHWC")
    close(y, ry, k, absmax(ry), "gn y")
    close(mean, rmean, k, absmax(x), "gn mean")
    close(rstd, rrstd, k, absmax(rrstd), "gn rstd")
    dx = GN.group_norm_backward(tb(dy, backend), tb(x, backend), g, mean, rstd, layout="NHWC")[0]
    assert last_kernel_name() == "gn_nhwc_bwd_apply_fp64"
    rdx = rn.group_norm_backward(dy, x, g, rmean, rrstd, None, "NHWC")[0]
    close(dx, rdx, k, absmax(dy) * absmax(rrstd) * 4, "gn dx")
