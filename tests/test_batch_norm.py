"""Batch norm (training, inference, backward, fused add + activation) on every backend
against the float64 reference of cudnnlite.reference.norm.

Tolerances (``check``): the kernels compute in float32 and round once at the store.
fp32 results carry the rounding of float32 reductions over m elements: a few hundred
float32 ulps of the largest term (``K32`` * 2^-24 * scale) covers Welford and tree
sums of the sizes here. fp16/bf16 outputs add one rounding of the storage type (half
an ulp: 2^-11, 2^-8 of the value, so 2 units of relative tolerance).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnnlite.ops.batch_norm as BN
from cudnnlite import dtypes
from cudnnlite.errors import BadParamError
from cudnnlite.ops.norm_common import last_kernel_name
from cudnnlite.reference import norm as rn
from cudnnlite.testing import to_backend, to_numpy

# The float32-computing types; float64 (computed in double) has its own few cases and
# tolerances in tests/test_norm_fp64.py (a full fp64 cross product would cost CI time).
DTYPES = [d.numpy for d in dtypes.FP32_COMPUTE_TYPES]
SHORT = {d.numpy: d.short for d in dtypes.FP32_COMPUTE_TYPES}
UNIT = {"fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}
K32 = 256


def check(got: Any, ref: np.ndarray, dtype: Any, scale: float | None = None, what: str = ""):
    """|got - ref| <= 2u |ref| + (K32 2^-24 + 2u) * scale, u the storage unit roundoff
    (u = 0 for float32 results: fp32 outputs get the K32 term only)."""
    ref = np.asarray(ref, dtype=np.float64)
    g = to_numpy(got).astype(np.float64)
    u = 0.0 if np.dtype(dtype) == np.float32 else UNIT[SHORT[np.dtype(dtype)]]
    scale = float(np.abs(ref).max()) if scale is None else scale
    np.testing.assert_allclose(
        g,
        ref,
        rtol=2 * u + 4 * 2.0**-24,
        atol=(K32 * 2.0**-24 + 2 * u) * max(scale, 1e-30),
        err_msg=what,
    )


def data(shape: tuple[int, ...], dtype: Any, seed: int, loc: float = 0.5, sd: float = 2.0):
    return (np.random.default_rng(seed).standard_normal(shape) * sd + loc).astype(dtype)


def params(c_shape: tuple[int, ...], seed: int = 7) -> tuple[np.ndarray, np.ndarray]:
    r = np.random.default_rng(seed)
    return (
        r.uniform(0.5, 1.5, c_shape).astype(np.float32),
        r.standard_normal(c_shape).astype(np.float32),
    )


def pshape(shape: tuple[int, ...], mode: str, layout: str) -> tuple[int, ...]:
    if mode == "per_activation":
        return shape[1:]
    return (shape[-1],) if layout == "NHWC" else (shape[1],)


# ResNet-50 layers scaled down (N, C real: 64 and 256 channels at small H, W), BERT's
# hidden size as per-activation features, plus odd shapes: prime C, H*W = 1, N = 1.
SHAPES = [
    (2, 64, 6, 5),
    (3, 37, 5, 1),
    (6, 33, 1, 1),
    (1, 5, 3, 3),
    (4, 256, 2, 2),
]


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", SHAPES, ids=str)
def test_training_forward(backend: str, shape, layout: str, dtype: Any) -> None:
    if layout == "NHWC":
        shape = (shape[0], *shape[2:], shape[1])
    x = data(shape, dtype, 1)
    c = pshape(shape, "spatial", layout)
    w, b = params(c)
    rm, rv = (
        np.random.default_rng(3).standard_normal(c).astype(np.float32),
        np.full(c, 2.0, np.float32),
    )
    ref = rn.batch_norm_train(x, w, b, 1e-5, rm, rv, 0.1, layout=layout)
    rmb, rvb = to_backend(rm, backend), to_backend(rv, backend)
    y, mean, invstd = BN.batch_norm_forward_training(
        to_backend(x, backend),
        to_backend(w, backend),
        to_backend(b, backend),
        rmb,
        rvb,
        layout=layout,
    )
    assert y.dtype == dtype and y.shape == shape and type(y) is type(rmb)
    check(y, ref["y"], dtype, what="y")
    check(mean, ref["mean"], np.float32, scale=float(np.abs(x.astype(np.float64)).max()))
    check(invstd, ref["invstd"], np.float32)
    check(rmb, ref["running_mean"], np.float32, scale=float(np.abs(x.astype(float)).max()))
    check(rvb, ref["running_var"], np.float32)


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_per_activation_mode(backend: str, layout: str, dtype: Any) -> None:
    shape = (5, 6, 3, 4) if layout == "NCHW" else (5, 3, 4, 6)
    x = data(shape, dtype, 2)
    w, b = params(shape[1:])
    ref = rn.batch_norm_train(x, w, b, 1e-3, mode="per_activation", layout=layout)
    y, mean, invstd = BN.batch_norm_forward_training(
        to_backend(x, backend),
        to_backend(w, backend),
        to_backend(b, backend),
        eps=1e-3,
        mode="per_activation",
        layout=layout,
    )
    check(y, ref["y"], dtype)
    assert mean.shape == shape[1:]
    check(invstd, ref["invstd"], np.float32)
    dy = data(shape, dtype, 3, 0.0, 1.0)
    dx, dw, db, dz = BN.batch_norm_backward(
        to_backend(dy, backend),
        to_backend(x, backend),
        mean,
        invstd,
        to_backend(w, backend),
        mode="per_activation",
        layout=layout,
    )
    g = rn.batch_norm_backward(dy, x, w, ref["mean"], ref["invstd"], "per_activation", layout)
    assert dz is None
    check(dx, g["dx"], dtype)
    check(dw, g["dgamma"], np.float32, scale=float(np.abs(dy.astype(float)).sum(0).max()))
    check(db, g["dbeta"], np.float32, scale=float(np.abs(dy.astype(float)).sum(0).max()))


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_inference(backend: str, layout: str, dtype: Any) -> None:
    shape = (3, 16, 5, 7) if layout == "NCHW" else (3, 5, 7, 16)
    x = data(shape, dtype, 4)
    w, b = params((16,))
    rm = np.linspace(-1, 1, 16).astype(np.float32)
    rv = np.linspace(0.5, 3, 16).astype(np.float32)
    y = BN.batch_norm_forward_inference(
        to_backend(x, backend),
        to_backend(rm, backend),
        to_backend(rv, backend),
        to_backend(w, backend),
        to_backend(b, backend),
        eps=1e-4,
        layout=layout,
    )
    check(y, rn.batch_norm_inference(x, w, b, rm, rv, 1e-4, layout=layout), dtype)
    # the PyTorch-style entry point, without parameters
    y2 = BN.batch_norm(
        to_backend(x, backend), to_backend(rm, backend), to_backend(rv, backend), layout=layout
    )
    check(y2, rn.batch_norm_inference(x, np.ones(16), np.zeros(16), rm, rv, layout=layout), dtype)


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("shape", [(4, 24, 5, 6), (6, 33, 1, 1), (1, 3, 7, 11)], ids=str)
def test_backward(backend: str, shape, layout: str, dtype: Any) -> None:
    if layout == "NHWC":
        shape = (shape[0], *shape[2:], shape[1])
    x = data(shape, dtype, 5)
    dy = data(shape, dtype, 6, 0.0, 1.0)
    c = pshape(shape, "spatial", layout)
    w, b = params(c)
    ref = rn.batch_norm_train(x, w, b, 1e-5, layout=layout)
    xb = to_backend(x, backend)
    _, mean, invstd = BN.batch_norm_forward_training(
        xb, to_backend(w, backend), to_backend(b, backend), layout=layout
    )
    dx, dw, db, _ = BN.batch_norm_backward(
        to_backend(dy, backend), xb, mean, invstd, to_backend(w, backend), layout=layout
    )
    g = rn.batch_norm_backward(dy, x, w, ref["mean"], ref["invstd"], layout=layout)
    terms = float(np.abs(dy.astype(float)).sum() / c[0])
    # dx = a (g - mean g - xhat mean(g xhat)): the scale is that of its largest term
    check(
        dx,
        g["dx"],
        dtype,
        scale=float(np.abs(dy.astype(float)).max() * (w * to_numpy(invstd)).max()) * 4,
    )
    check(dw, g["dgamma"], np.float32, scale=terms * 4)
    check(db, g["dbeta"], np.float32, scale=terms)


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("activation", ["relu", "gelu", "clipped_relu", "identity"])
@pytest.mark.parametrize("with_z", [True, False])
def test_fused_add_activation(backend: str, activation: str, with_z: bool, dtype: Any) -> None:
    shape = (2, 12, 4, 5)
    x, z = data(shape, dtype, 7), data(shape, dtype, 8, 0.0, 1.0)
    dy = data(shape, dtype, 9, 0.0, 1.0)
    w, b = params((12,))
    zz = z if with_z else None
    ref = rn.batch_norm_train(x, w, b, 1e-5, z=zz, activation=activation)
    xb, zb = to_backend(x, backend), (to_backend(z, backend) if with_z else None)
    wb, bb = to_backend(w, backend), to_backend(b, backend)
    y, mean, invstd = BN.batch_norm_forward_training(xb, wb, bb, z=zb, activation=activation)
    check(y, ref["y"], dtype)
    dx, dw, db, dz = BN.batch_norm_backward(
        to_backend(dy, backend), xb, mean, invstd, wb, bias=bb, z=zb, activation=activation
    )
    g = rn.batch_norm_backward(
        dy, x, w, ref["mean"], ref["invstd"], beta=b, z=zz, activation=activation
    )
    scale = float(np.abs(dy.astype(float)).max() * (w * ref["invstd"]).max()) * 4
    check(dx, g["dx"], dtype, scale=scale)
    terms = float(np.abs(dy.astype(float)).sum() / 12)
    check(dw, g["dgamma"], np.float32, scale=terms * 4)
    check(db, g["dbeta"], np.float32, scale=terms)
    if with_z:
        check(dz, g["dz"], dtype)
    else:
        assert dz is None
    # inference form of the fusion
    yi = BN.batch_norm_forward_inference(
        xb,
        mean,
        to_backend(1 / ref["invstd"] ** 2 - 1e-5, backend).astype(np.float32),
        wb,
        bb,
        z=zb,
        activation=activation,
    )
    check(yi, ref["y"], dtype, what="inference fusion")


@pytest.mark.parametrize("alias,mode,coef", [("silu", "swish", None), ("relu6", "hardtanh", 6.0)])
def test_fused_pytorch_activation_names(backend: str, alias: str, mode: str, coef: Any) -> None:
    # silu / relu6 run as swish (beta 1) / hardtanh (0, 6): bit-identical to those modes
    # with the parameters spelled out (hardtanh's min_val 0 is fixed by the alias only)
    shape = (2, 5, 3, 4)
    x, z, dy = (to_backend(data(shape, np.float32, s, 0.0, 3.0), backend) for s in (30, 31, 32))
    w, b = (to_backend(a, backend) for a in params((5,)))
    y, mean, invstd = BN.batch_norm_forward_training(x, w, b, z=z, activation=alias)
    if mode == "swish":
        y2 = BN.batch_norm_forward_training(x, w, b, z=z, activation=mode)[0]
        g2 = BN.batch_norm_backward(dy, x, mean, invstd, w, bias=b, z=z, activation=mode)
    else:  # hardtanh's min_val is -1 by default: compare with clip(pre, 0, 6) instead
        pre = BN.batch_norm_forward_training(x, w, b, z=z)[0]
        y2 = np.clip(to_numpy(pre), 0, 6)
        g2 = None
    np.testing.assert_array_equal(to_numpy(y), to_numpy(y2))
    g = BN.batch_norm_backward(dy, x, mean, invstd, w, bias=b, z=z, activation=alias)
    if g2 is not None:
        for a, a2 in zip(g, g2, strict=True):
            np.testing.assert_array_equal(to_numpy(a), to_numpy(a2))
    else:  # relu6: dz is dy where 0 < pre < 6, else 0
        inside = (to_numpy(pre) > 0) & (to_numpy(pre) < 6)
        np.testing.assert_array_equal(to_numpy(g[3]), np.where(inside, to_numpy(dy), 0))
    with pytest.raises(BadParamError, match=f"coef: {alias} takes none"):
        BN.batch_norm_forward_training(x, w, b, activation=alias, coef=1.0)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_cancellation_mean_1e4(backend: str, layout: str) -> None:
    # mean 1e4, std 1: E[x^2] - E[x]^2 in float32 loses every digit (1e8 +- 1e1 at ulp 8)
    shape = (16, 4, 24, 24) if layout == "NCHW" else (16, 24, 24, 4)
    x = data(shape, np.float32, 10, loc=1e4, sd=1.0)
    c = (4,)
    rv = np.ones(c, np.float32)
    ref = rn.batch_norm_train(
        x, np.ones(c), np.zeros(c), 1e-5, np.zeros(c), np.ones(c), 0.1, layout=layout
    )
    rvb = to_backend(rv, backend)
    y, mean, invstd = BN.batch_norm_forward_training(
        to_backend(x, backend),
        None,
        None,
        to_backend(np.zeros(c, np.float32), backend),
        rvb,
        layout=layout,
    )
    # H*W = 576 and C = 4 are multiples of 4: the 16-byte vector pass
    tag = "planar" if layout == "NCHW" else "chlast"
    assert last_kernel_name() == f"bn_fwd_apply_vec_{tag}_fp32"
    np.testing.assert_allclose(to_numpy(invstd), ref["invstd"], rtol=1e-5)
    np.testing.assert_allclose(to_numpy(rvb), ref["running_var"], rtol=1e-5)
    # x is quantized to 2^-10 near 1e4: the normalized output is exact to ~1e-3 of std
    np.testing.assert_allclose(to_numpy(y), ref["y"], atol=2e-3)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_multi_block_reduction(backend: str, layout: str) -> None:
    # many elements per channel: the per-channel work is split over several blocks, and
    # the elementwise kernels' grid-stride loops wrap several times (channel tracking)
    shape = (8, 3, 40, 41) if layout == "NCHW" else (8, 40, 41, 3)
    x, dy = data(shape, np.float32, 11), data(shape, np.float32, 12, 0.0, 1.0)
    w, b = params((3,))
    ref = rn.batch_norm_train(x, w, b, 1e-5, layout=layout)
    xb, wb_, bb = to_backend(x, backend), to_backend(w, backend), to_backend(b, backend)
    y, mean, invstd = BN.batch_norm_forward_training(xb, wb_, bb, layout=layout)
    check(y, ref["y"], np.float32)
    check(mean, ref["mean"], np.float32, scale=8.0)
    check(invstd, ref["invstd"], np.float32)
    dx, dw, db, _ = BN.batch_norm_backward(
        to_backend(dy, backend), xb, mean, invstd, wb_, layout=layout
    )
    g = rn.batch_norm_backward(dy, x, w, ref["mean"], ref["invstd"], layout=layout)
    terms = float(np.abs(dy).sum() / 3)
    check(dx, g["dx"], np.float32, scale=float(np.abs(dy).max() * (w * ref["invstd"]).max()) * 4)
    check(dw, g["dgamma"], np.float32, scale=terms * 4)
    check(db, g["dbeta"], np.float32, scale=terms)


def test_running_stats_over_steps(backend: str) -> None:
    c = (8,)
    rm, rv = np.zeros(c, np.float32), np.ones(c, np.float32)
    rmb, rvb = to_backend(rm, backend), to_backend(rv, backend)
    ref_m, ref_v = rm.astype(float), rv.astype(float)
    for step in range(4):
        x = data((3, 8, 4, 2), np.float32, 20 + step, loc=step, sd=1 + step)
        BN.batch_norm(to_backend(x, backend), rmb, rvb, training=True, momentum=0.3)
        r = rn.batch_norm_train(x, np.ones(c), np.zeros(c), 1e-5, ref_m, ref_v, 0.3)
        ref_m, ref_v = r["running_mean"], r["running_var"]
    check(rmb, ref_m, np.float32, scale=8.0)
    check(rvb, ref_v, np.float32)


def test_only_running_mean_given(backend: str) -> None:
    x = data((3, 4, 2, 2), np.float32, 30)
    rm = to_backend(np.zeros(4, np.float32), backend)
    BN.batch_norm_forward_training(to_backend(x, backend), running_mean=rm, momentum=1.0)
    check(rm, rn.batch_norm_train(x, np.ones(4), np.zeros(4))["mean"], np.float32, scale=8.0)


def test_strided_input_and_out(backend: str) -> None:
    base = data((4, 10, 6, 8), np.float32, 31)
    x = base[:, ::2, :, ::2]  # non-contiguous
    ref = rn.batch_norm_train(x, np.ones(5), np.zeros(5))
    out = to_backend(np.zeros((4, 5, 6, 8), np.float32), backend)[..., ::2]
    y, _, _ = BN.batch_norm_forward_training(to_backend(x, backend)[...], out=out)
    assert y is out
    check(out, ref["y"], np.float32)


def snapshot(*arrays: Any) -> list[bytes]:
    return [to_numpy(a).tobytes() for a in arrays]


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"weight": np.ones(5, np.float32)}, "weight: expected shape"),
        ({"bias": np.ones(4, np.float16)}, "bias: expected dtype float32"),
        ({"running_mean": np.zeros(3, np.float32)}, "running_mean: expected shape"),
        ({"running_var": np.zeros((4, 1), np.float32)}, "running_var: expected shape"),
        ({"eps": -1e-5}, "eps"),
        ({"momentum": 1.5}, r"momentum: expected a number in \[0, 1\]"),
        ({"momentum": -0.1}, "momentum"),
        ({"layout": "NCWH"}, "layout"),
        ({"mode": "channel"}, "mode"),
        ({"z": np.zeros((2, 4, 3), np.float32)}, "z: expected shape"),
        ({"activation": "swishy"}, "activation"),
    ],
)
def test_bad_training_arguments(backend: str, kwargs: dict, match: str) -> None:
    x = to_backend(data((2, 4, 3, 3), np.float32, 40), backend)
    kwargs = {
        k: to_backend(v, backend) if isinstance(v, np.ndarray) else v for k, v in kwargs.items()
    }
    before = snapshot(x, *[v for v in kwargs.values() if hasattr(v, "dtype")])
    with pytest.raises(BadParamError, match=match):
        BN.batch_norm_forward_training(x, **kwargs)
    assert snapshot(x, *[v for v in kwargs.values() if hasattr(v, "dtype")]) == before


@pytest.mark.parametrize(
    "shape,mode", [((1, 4, 1, 1), "spatial"), ((1, 3), "spatial"), ((1, 4, 2, 2), "per_activation")]
)
def test_training_needs_two_values_per_channel(backend: str, shape, mode: str) -> None:
    x = to_backend(np.ones(shape, np.float32), backend)
    rm = to_backend(
        np.zeros(shape[1:] if mode == "per_activation" else shape[1], np.float32), backend
    )
    before = snapshot(x, rm)
    with pytest.raises(BadParamError, match="more than one value per channel"):
        BN.batch_norm_forward_training(x, running_mean=rm, mode=mode)
    assert snapshot(x, rm) == before


def test_bad_inference_and_backward_arguments(backend: str) -> None:
    x = to_backend(data((2, 4, 3), np.float32, 41), backend)
    good = to_backend(np.ones(4, np.float32), backend)
    with pytest.raises(BadParamError, match="running_var: expected shape"):
        BN.batch_norm_forward_inference(x, good, to_backend(np.ones(5, np.float32), backend))
    with pytest.raises(BadParamError, match="running_mean: inference needs"):
        BN.batch_norm_forward_inference(x, None, good)
    with pytest.raises(BadParamError, match="x: expected dtype"):
        BN.batch_norm_forward_inference(to_backend(np.ones((2, 4), np.int32), backend), good, good)
    with pytest.raises(BadParamError, match="dy: expected shape"):
        BN.batch_norm_backward(to_backend(np.ones((2, 4, 2), np.float32), backend), x, good, good)
    with pytest.raises(BadParamError, match="save_invstd: expected shape"):
        BN.batch_norm_backward(x, x, good, to_backend(np.ones(3, np.float32), backend))
