"""Convolution backward in float64 (issue 18): backward data / filter / bias and the
transposed convolution against the float64 references, a finite-difference check of
conv2d's gradients, and what a float64 problem cannot run (Winograd, tensor cores) or
mix (another dtype). Tolerances: tests/conv_backward_support.py (2 * 2^-53 per summed
term, our double fma and the reference's double sums both rounding)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from conv_backward_support import (
    assert_grad_close,
    check_data,
    problem,
    rand,
    ref_data,
    ref_filter,
)

import cudnnlite as cl
import cudnnlite.ops.conv_backward as cb
from cudnnlite.dispatch import registry
from cudnnlite.errors import BadParamError, NotSupportedError
from cudnnlite.reference.conv import conv_forward
from cudnnlite.reference.conv_backward import conv_transpose
from cudnnlite.testing import to_backend, to_numpy

U = 2.0**-53  # float64's unit roundoff

# (n, c, spatial, k, filter, pad, stride, dilation, groups)
ODD = {
    "primes_grouped": (2, 6, (7, 11), 4, (2, 3), ((0, 1), (2, 0)), (2, 3), (1, 2), 2),
    "large_stride_gaps": (1, 4, (17, 17), 4, (3, 3), 0, 5, 1, 1),
    "depthwise_s2": (1, 6, (9, 8), 12, (3, 3), 1, 2, 1, 6),
    "conv1d": (2, 6, (13,), 4, (5,), 2, 2, 1, 2),
}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_bwd_data_direct_odd_shapes_fp64(backend: str, layout: str) -> None:
    solver = registry.get("conv_bwd_data_direct")
    for i, (name, spec) in enumerate(ODD.items()):
        n, c, hw, k, rs, pad, stride, dil, groups = spec
        p = problem(n, c, hw, k, rs, pad, stride, dil, groups, layout, "fp64", "bwd_data")
        check_data(backend, solver, p, seed=10 * i, bias=name == "primes_grouped")


def test_backward_api_default_dispatch_fp64(backend: str) -> None:
    """A real layer (ResNet's 3x3, scaled down) through the dispatcher: data, filter and
    bias gradients; the heuristics pick no Winograd or tensor-core solver for fp64."""
    p = problem(2, 16, (8, 8), 16, (3, 3), 1, 1, 1, 1, "NHWC", "fp64", "bwd_data")
    x, w, dy = rand(p.x_shape(), 1, "fp64"), rand(p.w_shape(), 2, "fp64"), rand(p.y_shape(), 3,
                                                                                "fp64")
    xb, wb, dyb = (to_backend(a, backend) for a in (x, w, dy))
    dx = cb.conv2d_backward_data(dyb, wb, x.shape, padding=1, layout="NHWC")
    assert dx.dtype == np.float64
    names = " ".join(cb.last_kernel_names())
    assert "wino" not in names and "wmma" not in names and "tc_" not in names
    terms = p.k_per_group * p.filter_taps
    assert_grad_close(to_numpy(dx), ref_data(p, dy, w), ref_data(p, np.abs(dy), np.abs(w)),
                      terms, "fp64", what="dx")  # fmt: skip
    dw = cb.conv2d_backward_filter(xb, dyb, w.shape, padding=1, layout="NHWC")
    assert dw.dtype == np.float64
    assert_grad_close(to_numpy(dw), ref_filter(p, x, dy), ref_filter(p, np.abs(x), np.abs(dy)),
                      p.n * int(np.prod(p.out_spatial)), "fp64", what="dw")  # fmt: skip
    db = to_numpy(cb.conv2d_backward_bias(dyb, "NHWC"))
    assert db.dtype == np.float64
    assert_grad_close(db, dy.sum(axis=(0, 1, 2)), np.abs(dy).sum(axis=(0, 1, 2)),
                      dy.size // dy.shape[-1], "fp64", what="db")  # fmt: skip


def test_conv_transpose2d_fp64(backend: str) -> None:
    """Stride 2 with output_padding and a bias (the backward-data epilogue), odd sizes."""
    x, w, b = rand((2, 4, 5, 7), 4, "fp64"), rand((4, 3, 3, 2), 5, "fp64"), rand((3,), 6, "fp64")
    kw: dict[str, Any] = dict(stride=2, padding=1, output_padding=1)
    y = to_numpy(cb.conv_transpose2d(*(to_backend(a, backend) for a in (x, w, b)), **kw))
    ref = conv_transpose(x, w, b, (2, 2), (1, 1), (1, 1))
    mag = conv_transpose(np.abs(x), np.abs(w), None, (2, 2), (1, 1), (1, 1))
    assert y.dtype == np.float64 and y.shape == ref.shape
    assert_grad_close(y, ref, mag, 4 * 3 * 2, "fp64", what="conv_transpose2d")


def _loss(x: np.ndarray, w: np.ndarray, v: np.ndarray, backend: str, kw: dict) -> float:
    y = cl.conv2d(to_backend(x, backend), to_backend(w, backend), **kw)
    return float(np.sum(v * to_numpy(y)))


def test_conv2d_gradients_by_central_differences_fp64(backend: str) -> None:
    """L(x, w) = sum(v * conv2d(x, w)); dL/dx = conv2d_backward_data(v, w) and dL/dw =
    conv2d_backward_filter(x, v), checked along random directions and unit vectors at
    the corners (where padding cuts taps) by (L(. + h d) - L(. - h d)) / (2h).

    Step h = 0.5: L is linear in x (and in w), so the central difference has no truncation
    error at any step, and a step at the operands' scale keeps the rounding small. What
    remains is rounding: each L sums K products per output (K = C*R*S) and n_y outputs,
    each term off by at most 2 * 2^-53 of S = sum(|v| * conv(|x| + h|d|, |w|)), the
    inputs x +- h d round once more; dividing by 2h turns that into
    (2K + n_y + 2) * 2^-53 * S / h. The analytic side <dx, d> sums the gradient's own
    K' terms (bounded by the same S / h, by adjointness) and n_x products. Twice the sum
    of the counts bounds both; float32 arithmetic anywhere would be off by ~1e-7
    relative, 10^6 times more."""
    x, w = rand((1, 3, 6, 5), 7, "fp64"), rand((4, 3, 3, 3), 8, "fp64")
    kw: dict[str, Any] = dict(stride=(2, 1), padding=1)
    geo = ([(1, 1), (1, 1)], (2, 1), (1, 1))
    y_shape = conv_forward(x, w, *geo).shape
    v = rand(y_shape, 9, "fp64")
    dx = to_numpy(cb.conv2d_backward_data(to_backend(v, backend), to_backend(w, backend),
                                          x.shape, **kw))  # fmt: skip
    dw = to_numpy(cb.conv2d_backward_filter(to_backend(x, backend), to_backend(v, backend),
                                            w.shape, **kw))  # fmt: skip
    h = 0.5
    counts = 2 * (2 * w[0].size + v.size + 2) + 2 * (x.size + w.size)
    rng = np.random.default_rng(10)

    def directions(shape: tuple) -> list[np.ndarray]:
        first, last = np.zeros(shape), np.zeros(shape)
        first.flat[0], last.flat[-1] = 1.0, 1.0
        return [first, last, *(rng.standard_normal(shape) for _ in range(3))]

    for d in directions(x.shape):
        fd = (_loss(x + h * d, w, v, backend, kw) - _loss(x - h * d, w, v, backend, kw)) / (2 * h)
        s = float(np.sum(np.abs(v) * conv_forward(np.abs(x) + h * np.abs(d), np.abs(w), *geo)))
        assert abs(fd - float(np.sum(dx * d))) <= 2 * counts * U * s / h, "dx"
    for d in directions(w.shape):
        fd = (_loss(x, w + h * d, v, backend, kw) - _loss(x, w - h * d, v, backend, kw)) / (2 * h)
        s = float(np.sum(np.abs(v) * conv_forward(np.abs(x), np.abs(w) + h * np.abs(d), *geo)))
        assert abs(fd - float(np.sum(dw * d))) <= 2 * counts * U * s / h, "dw"


@pytest.mark.parametrize("call,algo,reason", [
    ("data", "conv_bwd_data_winograd_f2x2_3x3", "Winograd's transforms lose float64 accuracy"),
    ("data", "conv_bwd_data_tc_implicit_gemm_phased", "tensor cores: no fp64 MMA in this solver"),
    ("data", "conv_bwd_data_wmma_implicit_gemm", "tensor cores: no fp64 MMA in this solver"),
    ("filter", "conv_bwd_filter_wmma_implicit_gemm", "tensor cores: no fp64 MMA in this solver"),
    ("filter", "conv_bwd_filter_tc_implicit_gemm", "tensor cores: no fp64 MMA in this solver"),
])  # fmt: skip
def test_forced_solver_that_cannot_run_fp64_says_why(call: str, algo: str, reason: str) -> None:
    # NHWC, 16 channels, 3x3: the shape every one of them is built for, but for fp64
    x, w = rand((1, 6, 6, 16), 11, "fp64"), rand((16, 3, 3, 16), 12, "fp64")
    dy = rand((1, 6, 6, 16), 13, "fp64")
    with pytest.raises(NotSupportedError, match=f"{algo} cannot run .* fp64: .*{reason}"):
        if call == "data":
            cb.conv2d_backward_data(dy, w, x.shape, padding=1, layout="NHWC", algo=algo)
        else:
            cb.conv2d_backward_filter(x, dy, w.shape, padding=1, layout="NHWC", algo=algo)


def test_mixed_dtypes_are_refused_naming_the_argument() -> None:
    x, w = rand((1, 4, 6, 6), 14, "fp64"), rand((5, 4, 3, 3), 15, "fp64")
    dy = rand((1, 5, 6, 6), 16, "fp64")
    with pytest.raises(BadParamError, match="w: expected dtype float64 like dy, got float32"):
        cb.conv2d_backward_data(dy, w.astype(np.float32), x.shape, padding=1)
    with pytest.raises(BadParamError, match="dy: expected dtype float64 like x, got float32"):
        cb.conv2d_backward_filter(x, dy.astype(np.float32), w.shape, padding=1)
    # conv_transpose2d: x = dy (5 channels in), w (C_in=5, C_out=4, 3, 3)
    with pytest.raises(BadParamError, match="w: expected dtype float64 like x, got float32"):
        cb.conv_transpose2d(dy, w.astype(np.float32))
    with pytest.raises(BadParamError, match="bias: expected dtype float64"):
        cb.conv_transpose2d(dy, w, bias=np.zeros(4, np.float32))
