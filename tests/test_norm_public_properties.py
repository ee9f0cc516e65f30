"""Property tests (hypothesis) of the PUBLIC normalization functions, as a user calls them:
``batch_norm`` (+ ``_forward_training``, ``_forward_inference``, ``_backward`` in both
modes), ``instance_norm``, ``group_norm``, ``layer_norm`` and ``rms_norm`` (each with its
``_forward`` and ``_backward``), against PyTorch's functional ops and autograd (CPU,
float64 on the same values: PyTorch's semantics without its rounding) and the float64
reference of :mod:`cudnnlite.reference.norm`, on every backend.

Drawn: float32, float16, bfloat16 (with ml_dtypes) and float64; NCHW and NHWC; 0 to 3
spatial dims (layer / RMS norm: 0 to 3 leading dims, unbatched included, normalized_shape
of 1 to 3 dims as an int, a tuple or a list); sizes with 1s and primes, and multiples of
the 16-byte pack (the vector kernels); an empty batch; each of weight and bias given or
not; eps; x shifted by up to 100 (cancellation); x passed as a Fortran-ordered view;
``out=`` absent, fresh or strided; a NaN at a drawn position of x. Batch norm: training
(saved mean and inverse std, running statistics with PyTorch's unbiased variance and the
drawn momentum, either or both of them) and inference, modes "spatial" and
"per_activation" (PyTorch's batch norm of x viewed as (N, features)). Instance norm:
running statistics and use_input_stats. Every call checks that its inputs are left as
they were, every result its dtype, and a NaN's row, channel or group gives NaN exactly
where PyTorch's does (no leak into the others, no NaN lost).

Tolerance of each element (``tol``), for data computed in the accumulation type of unit
roundoff ua (2^-24 for float32 / float16 / bfloat16 data, 2 * 2^-53 for float64, whose
reference and PyTorch round in double too):

    err <= K (M + 1) ua * mag  +  (2 us + ua) |want|  +  floor

- M: the elements behind each statistic (a row, a channel, a group). Sums of M terms
  err by at most M ua of the summed magnitudes in any order; K = 4 is headroom for the
  split reductions' merges. The mean is within K (M + 1) ua max|x| of the true one, and
  the variance, taken about the computed mean (two-pass / shifted Welford), within
  K (M + 1) ua cond relative, cond = 1 + max|x| rstd (the shift of x against its spread;
  1 for RMS norm). A single-pass E[x^2] - E[x]^2 would err by cond^2 instead and fails
  the draws shifted by 100.
- mag, per output: y: |w| (1 + |xhat|) cond + |b|; dx: rstd cond max|dy w| (1 + max|xhat|)^2
  over the row (the three terms of dx = rstd (g - mean g - xhat mean(g xhat))); the saved
  rstd: cond rstd; a parameter gradient: the sum over its elements of the errors of
  dy xhat, plus count * ua of sum |dy| (1 + |xhat|) for its own sum.
- us: one rounding to the result's storage type (2^-11 fp16, 2^-8 bf16, 2^-24 fp32,
  2^-53 fp64); floor: fp16's subnormal spacing 2^-24 (0 otherwise).
- Batch norm from running statistics (inference, and its backward) reduces nothing: a
  few roundings per element, K_ELEM = 8 ua of |w| rstd (|x| + |running_mean|) + |b|; its
  parameter gradients are sums over N * spatial of those.
- PyTorch's CPU layer and group norm (instance norm's statistics) take the variance in
  double as E[x^2] - mean^2, whose error grows as cond^2: on PyTorch's side cond^2
  replaces cond (``check_rows``; it matters for float64 only).
A wrong channel, group, eps or statistic moves a result by O(1) of its scale, 2^24 / (K M
cond) times this bound for float32.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
torch = pytest.importorskip("torch")
from hypothesis import example, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from norm_public_support import (  # noqa: E402
    ACC_U,
    HYPO,
    K_ELEM,
    Case,
    F,
    Geo,
    K,
    bn_cases,
    both,
    check_rows,
    dparam_bounds,
    dx_bound,
    f64,
    from_nc,
    grad_of,
    group_cases,
    instance_cases,
    leaf,
    mags,
    on,
    operands,
    row_cases,
    to_nc,
    tol,
    torch_affine,
    y_bound,
)
from property_support import (  # noqa: E402
    assert_out_honoured,
    assert_untouched,
    make_out,
    quiet,
    snapshot,
)

import cudnnlite as cl  # noqa: E402
from cudnnlite import dtypes  # noqa: E402
from cudnnlite.errors import BadParamError  # noqa: E402
from cudnnlite.reference import norm as rn  # noqa: E402
from cudnnlite.testing import to_numpy  # noqa: E402

# ------------------------------------------------------------------ batch norm


BN_EDGE = (
    Case("batch", "fp32", (2, 3), running="both"),  # no spatial dims
    Case("batch", "fp32", (1, 5, 1, 2), layout="NCHW", running="mean", momentum=1.0),
    Case("batch", "fp64", (0, 3, 4), running="both", out="strided"),  # empty batch
    Case("batch", "fp16", (3, 2, 5), mode="per_activation", running="var", nan_at=0.5),
    Case("batch", "fp16", (2, 2, 3, 2, 8), layout="NHWC", training=False, running="both",
         nan_at=0.3, view=True),
    Case("batch", "fp32", (2, 4, 4, 4), loc=100.0, running="both", out="fresh"),  # vec planar
    Case("batch", "fp16", (3, 3, 8), layout="NHWC", affine="none", nan_at=0.0),  # vec chlast
    Case("batch", "fp64", (2, 7, 3), training=False, running="both", affine="b", eps=0.25,
         nan_at=0.6),
)  # fmt: skip


def torch_running(ops: dict, c: int) -> tuple[Any, Any]:
    """The running statistics for PyTorch, which takes both or neither: a lone one (which
    cudnnlite updates alone) gets a scratch partner."""
    rm, rv = ops["rm"], ops["rv"]
    if rm is None and rv is None:
        return None, None
    rm = np.zeros(c) if rm is None else f64(rm).reshape(c)
    rv = np.ones(c) if rv is None else f64(rv).reshape(c)
    return leaf(rm, grad=False), leaf(rv, grad=False)


def bn_torch(case: Case, ops: dict) -> dict[str, Any]:
    """PyTorch's F.batch_norm forward and autograd (weight and bias ones / zeros when not
    given: the gradients cudnnlite returns either way), the running statistics after it
    and the saved statistics (native_batch_norm, training)."""
    c = math.prod(case.pshape)
    xt = leaf(to_nc(case, ops["x"]))
    wt = leaf(np.ones(c) if ops["w"] is None else f64(ops["w"]).reshape(c))
    bt = leaf(np.zeros(c) if ops["b"] is None else f64(ops["b"]).reshape(c))
    rm, rv = torch_running(ops, c)
    y = F.batch_norm(xt, rm, rv, wt, bt, case.training, case.momentum, case.eps)
    y.backward(leaf(to_nc(case, ops["dy"]), grad=False))
    out = {"y": from_nc(case, y), "dx": from_nc(case, xt.grad), "dw": grad_of(wt, case.pshape),
           "db": grad_of(bt, case.pshape),
           "rm": None if rm is None else rm.numpy().reshape(case.pshape),
           "rv": None if rv is None else rv.numpy().reshape(case.pshape)}  # fmt: skip
    if case.training and case.shape[0]:
        _, mean, invstd = torch.native_batch_norm(xt.detach(), None, None, None, None, True,
                                                  0.0, case.eps)  # fmt: skip
        out["mean"], out["invstd"] = (t.numpy().reshape(case.pshape) for t in (mean, invstd))
    return out


def bn_inference_reference(case: Case, geo: Geo, ops: dict) -> dict[str, np.ndarray]:
    """The backward of the inference forward in float64 (running statistics constant)."""
    x, g = f64(ops["x"]), f64(ops["dy"])
    rm, rv = geo.param(f64(ops["rm"]), 0.0), geo.param(f64(ops["rv"]), 0.0)
    w = geo.param(f64(ops["w"]), 1.0)
    invstd = 1.0 / np.sqrt(rv + case.eps)
    return {"dx": g * w * invstd, "dw": geo.psum(g * (x - rm) * invstd), "db": geo.psum(g)}


def check_bn_training(case: Case, geo: Geo, ops: dict, got: dict, tw: dict) -> None:
    """Saved statistics, running statistics, y, and the backward."""
    mg = mags(geo, case, ops)
    x, w, b = ops["x"], ops["w"], ops["b"]
    rm, rv = (None if a is None else a.astype(np.float64) for a in (ops["rm"], ops["rv"]))
    ref = quiet(rn.batch_norm_train, x, f64(w) if w is not None else np.ones(case.pshape),
                f64(b) if b is not None else np.zeros(case.pshape), case.eps, rm, rv,
                case.momentum, case.mode, case.layout)  # fmt: skip
    ua = ACC_U[case.short]
    ps = case.pshape
    if case.shape[0]:
        want_mean = {"PyTorch": tw["mean"], "reference": ref["mean"]}
        both(got["mean"], want_mean, tol(mg.mean_tol.reshape(ps), ref["mean"], case.acc, ua),
             "save_mean")  # fmt: skip
        rstd_tol = tol(mg.rstd_tol.reshape(ps), ref["invstd"], case.acc, ua)
        both(got["invstd"], {"PyTorch": tw["invstd"], "reference": ref["invstd"]}, rstd_tol,
             "save_invstd")  # fmt: skip
        mom, m = case.momentum, geo.m
        with np.errstate(invalid="ignore", divide="ignore"):
            var = 1.0 / ref["invstd"] ** 2  # (var + eps)
            var_tol = 2 * var * mg.rstd_tol.reshape(ps) / ref["invstd"]
        if rm is not None:
            want = {"PyTorch": tw["rm"], "reference": ref["running_mean"]}
            err = mom * mg.mean_tol.reshape(ps) + K_ELEM * ua * (np.abs(rm) + np.abs(ref["mean"]))
            both(got["rm"], want, tol(err, ref["running_mean"], case.acc, ua), "running_mean")
        if rv is not None:
            want = {"PyTorch": tw["rv"], "reference": ref["running_var"]}
            err = mom * m / (m - 1) * var_tol + K_ELEM * ua * (np.abs(rv) + var * m / (m - 1))
            both(got["rv"], want, tol(err, ref["running_var"], case.acc, ua), "running_var")
    else:  # an empty batch leaves the running statistics as they are (PyTorch's too)
        for k, a in (("rm", rm), ("rv", rv)):
            if a is not None:
                np.testing.assert_array_equal(f64(got[k]), a, err_msg=k)
                np.testing.assert_array_equal(tw[k], a, err_msg=f"PyTorch's {k}")
    both(got["y"], {"PyTorch": tw["y"], "reference": ref["y"]},
         y_bound(case, geo, mg, ops, ref["y"]), "y")  # fmt: skip
    g = quiet(rn.batch_norm_backward, ops["dy"], x, f64(w) if w is not None else np.ones(ps),
              ref["mean"], ref["invstd"], case.mode, case.layout)  # fmt: skip
    both(got["dx"], {"PyTorch": tw["dx"], "reference": g["dx"]},
         dx_bound(case, geo, mg, g["dx"]), "dx")  # fmt: skip
    dw_tol, db_tol = dparam_bounds(case, geo, mg, ops, (g["dgamma"], g["dbeta"]), case.acc)
    both(got["dw"], {"PyTorch": tw["dw"], "reference": g["dgamma"]}, dw_tol, "dweight")
    both(got["db"], {"PyTorch": tw["db"], "reference": g["dbeta"]}, db_tol, "dbias")


def check_bn_inference(case: Case, geo: Geo, ops: dict, got: dict, tw: dict) -> None:
    x, rm, rv = f64(ops["x"]), f64(ops["rm"]), f64(ops["rv"])
    ps, ua = case.pshape, ACC_U[case.short]
    wv = f64(ops["w"]) if ops["w"] is not None else np.ones(ps)
    bv = f64(ops["b"]) if ops["b"] is not None else np.zeros(ps)
    want_y = quiet(rn.batch_norm_inference, x, wv, bv, rm, rv, case.eps, case.mode, case.layout)
    w, b = np.abs(geo.param(wv, 1.0)), np.abs(geo.param(bv, 0.0))
    rmb = np.abs(geo.param(rm, 0.0))
    invstd = 1.0 / np.sqrt(geo.param(rv, 0.0) + case.eps)
    lever = invstd * (np.abs(x) + rmb)  # |x - rm| invstd before its cancellation
    err = K_ELEM * ua * (w * lever + b)
    both(got["y"], {"PyTorch": tw["y"], "reference": want_y}, tol(err, want_y, case.dtype, ua),
         "y")  # fmt: skip
    ref = bn_inference_reference(case, geo, ops)
    g = np.abs(f64(ops["dy"]))
    both(got["dx"], {"PyTorch": tw["dx"], "reference": ref["dx"]},
         tol(K_ELEM * ua * g * w * invstd, ref["dx"], case.dtype, ua), "dx")  # fmt: skip
    dw_err = geo.psum(K_ELEM * ua * g * lever) + K * geo.count * ua * geo.psum(g * lever)
    both(got["dw"], {"PyTorch": tw["dw"], "reference": ref["dw"]},
         tol(dw_err, ref["dw"], case.acc, ua), "dweight")  # fmt: skip
    both(got["db"], {"PyTorch": tw["db"], "reference": ref["db"]},
         tol(K * geo.count * ua * geo.psum(g), ref["db"], case.acc, ua), "dbias")  # fmt: skip


@HYPO
@given(case=bn_cases())
@example(case=BN_EDGE[0])
@example(case=BN_EDGE[1])
@example(case=BN_EDGE[2])
@example(case=BN_EDGE[3])
@example(case=BN_EDGE[4])
@example(case=BN_EDGE[5])
@example(case=BN_EDGE[6])
@example(case=BN_EDGE[7])
def test_batch_norm_matches_pytorch(backend: str, case: Case) -> None:
    """Training (saved statistics, running statistics, backward from the saved ones) or
    inference (backward with training=False), against PyTorch and the reference; the
    PyTorch-style batch_norm gives the same bits and running statistics."""
    ops = operands(case)
    geo = Geo(case)
    xb, dyb = on(backend, ops["x"], case.view), on(backend, ops["dy"], case.view)
    wb, bb, rmb, rvb = (on(backend, ops[k]) for k in ("w", "b", "rm", "rv"))
    run0 = snapshot(rmb, rvb)
    out, big = make_out(backend, case.out, case.shape, case.dtype)
    kw = dict(eps=case.eps, mode=case.mode, layout=case.layout)
    if case.training:
        before = snapshot(xb, wb, bb)
        y, mean, invstd = cl.batch_norm_forward_training(
            xb, wb, bb, rmb, rvb, momentum=case.momentum, out=out, **kw
        )
        assert_untouched((xb, wb, bb), before)
        assert mean.dtype == invstd.dtype == case.acc and tuple(mean.shape) == case.pshape
        before = snapshot(dyb, xb, mean, invstd, wb)
        dx, dw, db, dz = cl.batch_norm_backward(dyb, xb, mean, invstd, wb, **kw)
        assert_untouched((dyb, xb, mean, invstd, wb), before)
    else:
        before = snapshot(xb, rmb, rvb, wb, bb)
        y = cl.batch_norm_forward_inference(xb, rmb, rvb, wb, bb, out=out, **kw)
        dx, dw, db, dz = cl.batch_norm_backward(
            dyb, xb, None, None, wb, training=False, running_mean=rmb, running_var=rvb, **kw
        )
        before.append(to_numpy(dyb).copy())
        assert_untouched((xb, rmb, rvb, wb, bb, dyb), before)
        mean = invstd = None
    assert_out_honoured(y, out, big)
    assert y.dtype == dx.dtype == case.dtype and dz is None
    assert dw.dtype == db.dtype == case.acc and tuple(dw.shape) == tuple(db.shape) == case.pshape
    got = {"y": y, "mean": mean, "invstd": invstd, "rm": rmb, "rv": rvb, "dx": dx, "dw": dw,
           "db": db}  # fmt: skip
    tw = bn_torch(case, ops)
    if case.training:
        check_bn_training(case, geo, ops, got, tw)
    else:
        check_bn_inference(case, geo, ops, got, tw)
    if case.mode == "spatial" and case.running in ("both", "none"):
        # the PyTorch-style entry point: the same kernels, so the same bits
        rm2, rv2 = (None if a is None else on(backend, a) for a in run0)
        y2 = cl.batch_norm(xb, rm2, rv2, wb, bb, case.training, case.momentum, case.eps,
                           layout=case.layout)  # fmt: skip
        np.testing.assert_array_equal(to_numpy(y2), to_numpy(y), err_msg="batch_norm's y")
        for a, a2 in ((rmb, rm2), (rvb, rv2)):
            if a is not None:
                np.testing.assert_array_equal(to_numpy(a2), to_numpy(a))


@pytest.mark.parametrize("shape,layout,mode", [
    ((1, 4), "NCHW", "spatial"), ((1, 1, 3), "NHWC", "spatial"),
    ((1, 2, 1, 1, 1), "NCHW", "spatial"), ((1, 3, 2), "NCHW", "per_activation"),
])  # fmt: skip
def test_training_on_one_value_per_channel_refused_as_pytorch(backend: str, shape, layout,
                                                              mode) -> None:  # fmt: skip
    """One value per channel (batch 1, no spatial size; per_activation: batch 1): PyTorch
    refuses to train on it (ValueError), cudnnlite too (BadParamError naming x), and the
    running statistics stay as they were."""
    x = np.arange(math.prod(shape), dtype=np.float32).reshape(shape)
    c = shape[1:] if mode == "per_activation" else (shape[-1 if layout == "NHWC" else 1],)
    rm, rv = on(backend, np.zeros(c, np.float32)), on(backend, np.ones(c, np.float32))
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.batch_norm(leaf(to_nc(Case("batch", "fp32", shape, layout, mode=mode), x)), None,
                     None, training=True)  # fmt: skip
    with pytest.raises(BadParamError, match="^x: training needs more than one value"):
        cl.batch_norm_forward_training(on(backend, x), None, None, rm, rv, mode=mode,
                                       layout=layout)  # fmt: skip
    if mode == "spatial":
        with pytest.raises(BadParamError, match="^x: "):
            cl.batch_norm(on(backend, x), rm, rv, training=True, layout=layout)
    assert (to_numpy(rm) == 0).all() and (to_numpy(rv) == 1).all()


# ------------------------------------------------------------------ instance norm


IN_EDGE = (
    Case("instance", "fp32", (1, 3, 2), running="both", momentum=1.0),
    Case("instance", "fp16", (2, 3, 1, 2, 5), layout="NHWC", running="mean", nan_at=0.5),
    Case("instance", "fp32", (2, 4, 3, 3), training=False, running="both", affine="w",
         out="strided"),
    # an empty batch: PyTorch's NaN running statistics (NumPy warned of a mean of nothing)
    Case("instance", "fp64", (0, 3, 4), running="both"),
)  # fmt: skip


@HYPO
@given(case=instance_cases())
@example(case=IN_EDGE[0])
@example(case=IN_EDGE[1])
@example(case=IN_EDGE[2])
@example(case=IN_EDGE[3])
def test_instance_norm_matches_pytorch(backend: str, case: Case) -> None:
    """instance_norm_forward / instance_norm (y, per-instance statistics, the running
    statistics' update) and instance_norm_backward; use_input_stats=False: the running
    statistics normalize and batch_norm_backward(training=False) is its backward."""
    ops = operands(case)
    geo = Geo(case)
    xb, dyb = on(backend, ops["x"], case.view), on(backend, ops["dy"], case.view)
    wb, bb, rmb, rvb = (on(backend, ops[k]) for k in ("w", "b", "rm", "rv"))
    out, big = make_out(backend, case.out, case.shape, case.dtype)
    n, c = case.shape[0], case.channels
    # PyTorch: F.instance_norm's forward and autograd, its statistics by native_group_norm
    xt = leaf(to_nc(case, ops["x"]))
    # (PyTorch's instance_norm of an empty batch with a weight or bias fails: IndexError)
    wt, bt = torch_affine(ops) if n else (None, None)
    rmt, rvt = torch_running(ops, c)
    yt = F.instance_norm(xt, rmt, rvt, wt, bt, case.training, case.momentum, case.eps)
    yt.backward(leaf(to_nc(case, ops["dy"]), grad=False))
    tw_dx, tw_db = from_nc(case, xt.grad), grad_of(bt, (c,))
    tw_dw = grad_of(wt, (c,)) if ops["w"] is not None else None
    kw = dict(layout=case.layout, running_mean=rmb, running_var=rvb, momentum=case.momentum,
              use_input_stats=case.training)  # fmt: skip
    before = snapshot(xb, wb, bb, dyb)
    running = snapshot(rmb, rvb)  # (inference leaves them as they were)
    y, mean, rstd = cl.instance_norm_forward(xb, wb, bb, case.eps, out=out, **kw)
    assert_out_honoured(y, out, big)
    assert y.dtype == case.dtype
    if not case.training:
        assert mean is None and rstd is None
        dx, dw, db, _ = cl.batch_norm_backward(dyb, xb, None, None, wb, training=False,
                                               running_mean=rmb, running_var=rvb, eps=case.eps,
                                               layout=case.layout)  # fmt: skip
        assert_untouched((xb, wb, bb, dyb, rmb, rvb), before + running)
        bcase = case.with_(op="batch", running="both")
        got = {"y": y, "dx": dx, "dw": dw, "db": db}
        tw = {"y": from_nc(case, yt), "dx": tw_dx, "dw": tw_dw, "db": tw_db}
        check_bn_inference(bcase, Geo(bcase), ops, got, tw)  # (PyTorch's where it has them)
        return
    assert mean.dtype == rstd.dtype == case.acc and tuple(mean.shape) == (n, c)
    dx, dw, db = cl.instance_norm_backward(dyb, xb, mean, rstd, wb, bb, layout=case.layout)
    assert_untouched((xb, wb, bb, dyb), before)
    assert dx.dtype == case.dtype and (dw is None) == (wb is None) and (db is None) == (bb is None)
    if not n:  # an empty batch: PyTorch's running statistics, NaN (a mean of no instances)
        check_empty_batch(case, (y, dx, dw, db), {})
        for got, want in ((rmb, rmt), (rvb, rvt)):
            if got is not None:
                assert np.isnan(f64(got)).all() and np.isnan(want.numpy()).all()
        return
    ry, rmean, rrstd = quiet(rn.instance_norm, ops["x"], ops["w"], ops["b"], case.eps, case.layout)
    rdx, rdw, rdb = quiet(rn.instance_norm_backward, ops["dy"], ops["x"], rmean, rrstd, ops["w"],
                          case.layout)  # fmt: skip
    _, tmean, trstd = torch.native_group_norm(leaf(to_nc(case, ops["x"]), grad=False), None,
                                              None, n, c, geo.m, c, case.eps)  # fmt: skip
    wants = {"mean": {"reference": rmean, "PyTorch": tmean.numpy()},
             "rstd": {"reference": rrstd, "PyTorch": trstd.numpy()},
             "y": {"reference": ry, "PyTorch": from_nc(case, yt)},
             "dx": {"reference": rdx, "PyTorch": tw_dx},
             "dw": {"reference": rdw, "PyTorch": tw_dw},
             "db": {"reference": rdb, "PyTorch": tw_db}}  # fmt: skip
    check_rows(case, geo, ops, {"mean": mean, "rstd": rstd, "y": y, "dx": dx, "dw": dw,
                                "db": db}, wants)  # fmt: skip
    mg, ua = mags(geo, case, ops), ACC_U[case.short]
    # the running statistics: the batch mean of per-instance means / unbiased variances
    for name, got, want in (("running_mean", rmb, rmt), ("running_var", rvb, rvt)):
        if got is None:
            continue
        with np.errstate(invalid="ignore", divide="ignore"):
            s = geo.m
            old = f64(ops["rm" if "mean" in name else "rv"])
            if "mean" in name:
                step, new = mg.mean_tol.reshape(n, c).mean(0), np.abs(rmean).mean(0)
            else:
                var = 1.0 / rrstd**2  # (var + eps)
                step = (2 * var * mg.rstd_tol.reshape(n, c) / rrstd).mean(0) * s / (s - 1)
                new = var.mean(0) * s / (s - 1)
            # the reference: PyTorch's update from the float64 statistics
            stat = rmean if "mean" in name else (1.0 / rrstd**2 - case.eps) * s / (s - 1)
            ref = (1 - case.momentum) * old + case.momentum * stat.mean(0)
        err = case.momentum * step + K_ELEM * ua * (np.abs(old) + new)
        both(got, {"PyTorch": want.numpy(), "reference": ref}, tol(err, ref, case.acc, ua), name)
    # the PyTorch-style entry point gives the same bits
    y2 = cl.instance_norm(xb, wb, bb, case.eps, layout=case.layout)
    np.testing.assert_array_equal(to_numpy(y2), to_numpy(y), err_msg="instance_norm's y")


def check_empty_batch(case: Case, got: tuple, wants: dict) -> None:
    """Empty y and dx of x's shape; zero parameter gradients (PyTorch's, where given)."""
    y, dx, dw, db = got
    assert tuple(y.shape) == tuple(dx.shape) == case.shape
    for k, a in (("dw", dw), ("db", db)):
        if a is not None:
            np.testing.assert_array_equal(f64(a), np.zeros(case.pshape), err_msg=k)
            for name, want in wants.get(k, {}).items():
                np.testing.assert_array_equal(want, np.zeros(case.pshape), err_msg=name)


# ------------------------------------------------------------------ group norm


GN_EDGE = (
    Case("group", "fp32", (2, 6), groups=3, nan_at=0.2),  # no spatial dims: groups of 2
    Case("group", "fp16", (1, 5, 3, 1, 5), layout="NHWC", groups=5, affine="b", out="strided"),
    Case("group", "fp64", (3, 4, 7), groups=1, affine="w", loc=100.0, view=True),
    Case("group", "fp32", (0, 3, 4), layout="NHWC", groups=2),  # (divided by 0 blocks)
    Case("group", "fp32", (2, 8, 16), groups=2, nan_at=0.7, affine="none"),  # row vector form
    # NHWC, few blocks: statistics over stretches of H*W merged per group (gn_nhwc_stats)
    Case("group", "fp32", (1, 9, 9, 4), layout="NHWC", groups=2, nan_at=0.3),
)  # fmt: skip


@HYPO
@given(case=group_cases())
@example(case=GN_EDGE[0])
@example(case=GN_EDGE[1])
@example(case=GN_EDGE[2])
@example(case=GN_EDGE[3])
@example(case=GN_EDGE[4])
@example(case=GN_EDGE[5])
def test_group_norm_matches_pytorch(backend: str, case: Case) -> None:
    """group_norm_forward / group_norm (y, mean, rstd of shape (N, G)) and
    group_norm_backward, NCHW and NHWC, against PyTorch and the reference."""
    ops = operands(case)
    geo = Geo(case)
    xb, dyb = on(backend, ops["x"], case.view), on(backend, ops["dy"], case.view)
    wb, bb = on(backend, ops["w"]), on(backend, ops["b"])
    out, big = make_out(backend, case.out, case.shape, case.dtype)
    n, c, g = case.shape[0], case.channels, case.groups
    before = snapshot(xb, wb, bb, dyb)
    y, mean, rstd = cl.group_norm_forward(xb, g, wb, bb, case.eps, layout=case.layout, out=out)
    assert_out_honoured(y, out, big)
    assert y.dtype == case.dtype and mean.dtype == rstd.dtype == case.acc
    assert tuple(mean.shape) == tuple(rstd.shape) == (n, g)
    dx, dw, db = cl.group_norm_backward(dyb, xb, g, mean, rstd, wb, bb, layout=case.layout)
    assert_untouched((xb, wb, bb, dyb), before)
    assert dx.dtype == case.dtype and (dw is None) == (wb is None) and (db is None) == (bb is None)
    wants: dict[str, dict[str, Any]] = {k: {} for k in ("y", "mean", "rstd", "dx", "dw", "db")}
    # PyTorch refuses a batch whose groups hold one value each (README's deliberate
    # difference: tests/test_parity_differences.py); otherwise it is the other side
    if n * geo.m != 1:
        xt, (wt, bt) = leaf(to_nc(case, ops["x"])), torch_affine(ops)
        yt = F.group_norm(xt, g, wt, bt, case.eps)
        yt.backward(leaf(to_nc(case, ops["dy"]), grad=False))
        for k, v in (("y", from_nc(case, yt)), ("dx", from_nc(case, xt.grad)),
                     ("dw", grad_of(wt, (c,))), ("db", grad_of(bt, (c,)))):  # fmt: skip
            wants[k]["PyTorch"] = v
    if not n:  # an empty batch: empty y and dx, PyTorch's (zero) parameter gradients
        check_empty_batch(case, (y, dx, dw, db), wants)
        return
    _, tmean, trstd = torch.native_group_norm(leaf(to_nc(case, ops["x"]), grad=False), None,
                                              None, n, c, geo.m * g // c, g, case.eps)  # fmt: skip
    wants["mean"]["PyTorch"], wants["rstd"]["PyTorch"] = tmean.numpy(), trstd.numpy()
    ry, rmean, rrstd = quiet(rn.group_norm, ops["x"], g, ops["w"], ops["b"], case.eps, case.layout)
    rdx, rdw, rdb = quiet(rn.group_norm_backward, ops["dy"], ops["x"], g, rmean, rrstd, ops["w"],
                          case.layout)  # fmt: skip
    for k, v in (("y", ry), ("mean", rmean), ("rstd", rrstd), ("dx", rdx), ("dw", rdw),
                 ("db", rdb)):  # fmt: skip
        wants[k]["reference"] = v
    check_rows(case, geo, ops, {"mean": mean, "rstd": rstd, "y": y, "dx": dx, "dw": dw,
                                "db": db}, wants)  # fmt: skip
    y2 = cl.group_norm(xb, g, wb, bb, case.eps, layout=case.layout)
    np.testing.assert_array_equal(to_numpy(y2), to_numpy(y), err_msg="group_norm's y")


# ------------------------------------------------------------------ layer and RMS norm


LN_EDGE = (
    Case("layer", "fp32", (7,), ns=(7,), ns_form="int"),  # unbatched
    Case("layer", "fp32", (5, 8), ns=(8,), nan_at=0.5, out="strided"),  # a group of lanes a row
    Case("layer", "fp16", (2, 3, 2, 16), ns=(2, 16), ns_form="list", affine="b", view=True),
    Case("layer", "bf16", (3, 0, 5), ns=(5,), affine="w"),  # empty rows
    Case("layer", "fp64", (2, 3, 1, 5), ns=(3, 1, 5), loc=100.0, eps=0.25, nan_at=0.9),
    Case("layer", "fp32", (2, 3, 160), ns=(160,), nan_at=0.4),  # 16-byte packs, a block a row
)  # fmt: skip
RMS_EDGE = (
    Case("rms", "fp16", (4, 16), ns=(16,), eps=None, affine="w"),  # x's machine epsilon
    Case("rms", "fp32", (11,), ns=(11,), ns_form="int", eps=1e-6, nan_at=0.1, out="fresh"),
    Case("rms", "fp64", (2, 2, 40), ns=(2, 40), affine="w", nan_at=0.3, view=True),
    Case("rms", "fp32", (0, 3), ns=(3,), affine="w"),
)  # fmt: skip


def row_wants(case: Case, ops: dict) -> dict[str, dict[str, np.ndarray]]:
    """The reference's and PyTorch's y, dx, dweight (dbias) and statistics."""
    x, dy, w, b = ops["x"], ops["dy"], ops["w"], ops["b"]
    ns = case.ns
    xt, (wt, bt) = leaf(x), torch_affine(ops)
    if case.op == "layer":
        ry, rmean, rrstd = quiet(rn.layer_norm, x, ns, w, b, case.eps)
        rdx, rdw, rdb = quiet(rn.layer_norm_backward, dy, x, ns, rmean, rrstd, w)
        yt = F.layer_norm(xt, ns, wt, bt, case.eps)
        lead = case.shape[: len(case.shape) - len(ns)]
        _, tmean, trstd = torch.native_layer_norm(xt.detach(), ns, None, None, case.eps)
        wants = {"mean": {"reference": rmean, "PyTorch": tmean.numpy().reshape(lead)},
                 "rstd": {"reference": rrstd, "PyTorch": trstd.numpy().reshape(lead)}}  # fmt: skip
    else:
        ry, rrstd = quiet(rn.rms_norm, x, ns, w, case.eps)
        rdx, rdw = quiet(rn.rms_norm_backward, dy, x, ns, rrstd, w)
        rdb = None
        eps = case.eps if case.eps is not None else float(dtypes.finfo(case.dtype).eps)
        yt = F.rms_norm(xt, ns, wt, eps)
        wants = {"rstd": {"reference": rrstd}}
    yt.backward(leaf(dy, grad=False))
    wants["y"] = {"reference": ry, "PyTorch": yt.detach().numpy()}
    wants["dx"] = {"reference": rdx, "PyTorch": xt.grad.numpy()}
    wants["dw"] = {"reference": rdw, "PyTorch": grad_of(wt, ns)}
    wants["db"] = {"reference": rdb, "PyTorch": grad_of(bt, ns)}
    return wants


@HYPO
@given(case=st.one_of(row_cases("layer"), row_cases("rms")))
@example(case=LN_EDGE[0])
@example(case=LN_EDGE[1])
@example(case=LN_EDGE[2])
@example(case=LN_EDGE[3])
@example(case=LN_EDGE[4])
@example(case=LN_EDGE[5])
@example(case=RMS_EDGE[0])
@example(case=RMS_EDGE[1])
@example(case=RMS_EDGE[2])
@example(case=RMS_EDGE[3])
def test_layer_and_rms_norm_match_pytorch(backend: str, case: Case) -> None:
    """layer_norm_forward / layer_norm / layer_norm_backward and rms_norm_forward /
    rms_norm / rms_norm_backward over any leading and normalized dims, against PyTorch
    and the reference."""
    ops = operands(case)
    geo = Geo(case)
    xb, dyb = on(backend, ops["x"], case.view), on(backend, ops["dy"], case.view)
    wb, bb = on(backend, ops["w"]), on(backend, ops["b"])
    out, big = make_out(backend, case.out, case.shape, case.dtype)
    ns, rms = case.ns_arg, case.op == "rms"
    lead = case.shape[: len(case.shape) - len(case.ns)]
    before = snapshot(xb, wb, bb, dyb)
    if rms:
        y, rstd = cl.rms_norm_forward(xb, ns, wb, case.eps, out=out)
        mean = None
        dx, dw = cl.rms_norm_backward(dyb, xb, ns, rstd, wb)
        db = None
        y2 = cl.rms_norm(xb, ns, wb, case.eps)
    else:
        y, mean, rstd = cl.layer_norm_forward(xb, ns, wb, bb, case.eps, out=out)
        dx, dw, db = cl.layer_norm_backward(dyb, xb, ns, mean, rstd, wb, bb)
        y2 = cl.layer_norm(xb, ns, wb, bb, case.eps)
        assert (db is None) == (bb is None) and mean.dtype == case.acc
    assert_untouched((xb, wb, bb, dyb), before)
    assert_out_honoured(y, out, big)
    np.testing.assert_array_equal(to_numpy(y2), to_numpy(y), err_msg="the wrapper's y")
    assert y.dtype == dx.dtype == case.dtype and rstd.dtype == case.acc
    assert tuple(rstd.shape) == lead and (dw is None) == (wb is None)
    check_rows(case, geo, ops, {"mean": mean, "rstd": rstd, "y": y, "dx": dx, "dw": dw,
                                "db": db}, row_wants(case, ops), rms=rms)  # fmt: skip


# ------------------------------------------------------------------ bad arguments


def _bad_cases() -> list[tuple[str, Any, str]]:
    x = np.random.default_rng(5).standard_normal((2, 4, 3)).astype(np.float32)
    c4 = np.ones(4, np.float32)
    ro = np.zeros(4, np.float32)
    ro.flags.writeable = False
    mean, rstd = np.zeros((2, 2), np.float32), np.ones((2, 2), np.float32)
    return [
        # nn.BatchNorm's momentum=None (a cumulative average) is the module's, not F's
        ("momentum None", lambda t: cl.batch_norm(t(x), t(c4), t(c4), training=True,
                                                  momentum=None), "^momentum: "),
        ("read-only running_mean", lambda t: cl.batch_norm_forward_training(
            x, running_mean=ro), "^running_mean: the array is read-only"),
        ("strided running_var", lambda t: cl.batch_norm_forward_training(
            t(x), running_var=t(np.ones(8, np.float32))[::2]), "^running_var: expected a C-"),
        ("training backward with running stats", lambda t: cl.batch_norm_backward(
            t(x), t(x), t(c4), t(c4), running_mean=t(c4)), "^running_mean, running_var: "),
        ("inference backward with saved stats", lambda t: cl.batch_norm_backward(
            t(x), t(x), t(c4), None, training=False, running_mean=t(c4),
            running_var=t(c4)), "^save_mean, save_invstd: "),
        ("training not a bool", lambda t: cl.batch_norm_backward(
            t(x), t(x), t(c4), t(c4), training="yes"), "^training: "),
        ("1-D x", lambda t: cl.batch_norm(t(c4), t(c4[:1]), t(c4[:1])), "^x: expected at least 2"),
        ("out of another shape", lambda t: cl.batch_norm_forward_inference(
            t(x), t(c4), t(c4), out=t(np.zeros((2, 4, 2), np.float32))), "^out: expected shape"),
        ("num_groups a bool", lambda t: cl.group_norm(t(x), True), "^num_groups: "),
        ("group rstd of another shape", lambda t: cl.group_norm_backward(
            t(x), t(x), 2, t(mean), t(rstd[:, :1])), "^rstd: expected shape"),
        ("group mean None", lambda t: cl.group_norm_backward(t(x), t(x), 2, None, t(rstd)),
         "^mean: "),
        ("instance backward mean of another dtype", lambda t: cl.instance_norm_backward(
            t(x), t(x), t(np.zeros((2, 4))), t(np.ones((2, 4), np.float32))), "^mean: expected "),
        ("normalized_shape a float", lambda t: cl.layer_norm(t(x), 3.0), "^normalized_shape: "),
        ("normalized_shape of strings", lambda t: cl.layer_norm(t(x), "ab"), "^normalized_shape: "),
        ("layer eps a bool", lambda t: cl.layer_norm(t(x), 3, eps=True), "^eps: "),
        ("layer dy of another dtype", lambda t: cl.layer_norm_backward(
            t(x.astype(np.float64)), t(x), 3, t(mean[:, :1]), t(rstd[:, :1])), "^dy: "),
        ("rms weight of another shape", lambda t: cl.rms_norm(t(x), (4, 3), t(c4)), "^weight: "),
        ("rms rstd None", lambda t: cl.rms_norm_backward(t(x), t(x), 3, None), "^rstd: "),
        ("instance layout", lambda t: cl.instance_norm(t(x), layout="NCW"), "^layout: "),
    ]  # fmt: skip


BAD = _bad_cases()


@pytest.mark.parametrize("what,call,match", BAD, ids=[b[0] for b in BAD])
def test_bad_arguments_name_the_argument(backend: str, what: str, call: Any, match: str) -> None:
    if what == "read-only running_mean" and backend != "cpu":
        pytest.skip("only NumPy arrays can be read-only")
    with pytest.raises(BadParamError, match=match):
        call(lambda a: on(backend, a))
