"""Convolution backward data / filter / bias and the transposed convolution: every
solver directly against the float64 reference (tests/conv_backward_support.py has the
tolerances and their justification), then the public API through the dispatcher:
conv_transpose, out=, strides, determinism and bad inputs. On every backend."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from conv_backward_support import (
    DTYPES,
    assert_grad_close,
    check_data,
    check_filter,
    problem,
    rand,
    ref_data,
    ref_filter,
)

import cudnnlite.ops.conv_backward as cb
from cudnnlite.dispatch import registry
from cudnnlite.dispatch.settings import settings
from cudnnlite.errors import BadParamError, NotSupportedError
from cudnnlite.reference.conv import conv_forward
from cudnnlite.reference.conv_backward import conv_backward_bias, conv_transpose
from cudnnlite.runtime.caps import EMULATOR
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.testing import to_backend, to_numpy

# (n, c, spatial, k, filter, pad, stride, dilation, groups): real networks scaled down
# for the emulator (channel structure kept), then odd ones.
SHAPES = {
    "resnet50_stem": (2, 3, (16, 16), 8, (7, 7), 3, 2, 1, 1),
    "resnet50_3x3": (2, 16, (8, 8), 16, (3, 3), 1, 1, 1, 1),
    "resnet50_3x3_s2": (1, 8, (9, 9), 16, (3, 3), 1, 2, 1, 1),
    "resnet50_down_1x1_s2": (2, 16, (8, 8), 32, (1, 1), 0, 2, 1, 1),
    "vgg16_3x3": (1, 8, (12, 12), 16, (3, 3), 1, 1, 1, 1),
    "mobilenetv2_dw_s2": (2, 16, (9, 9), 16, (3, 3), 1, 2, 1, 16),
    "mobilenetv2_dw_mult2": (1, 8, (7, 7), 16, (3, 3), 1, 1, 1, 8),
    "dilated": (1, 4, (11, 10), 6, (3, 3), 2, 1, 2, 1),
    "primes_grouped": (2, 6, (7, 11), 4, (2, 3), ((0, 1), (2, 0)), (2, 3), (1, 2), 2),
    "tiny_big_pad": (1, 3, (2, 2), 5, (3, 3), 2, 1, 1, 1),
    "large_stride_gaps": (1, 4, (17, 17), 4, (3, 3), 0, 5, 1, 1),
    "ones": (1, 1, (1, 1), 1, (1, 1), 0, 1, 1, 1),
    "conv1d": (2, 6, (13,), 4, (5,), 2, 2, 1, 2),
}


def _p(name: str, layout: str, dtype: str, direction: str) -> Any:
    n, c, hw, k, rs, pad, stride, dil, groups = SHAPES[name]
    return problem(n, c, hw, k, rs, pad, stride, dil, groups, layout, dtype, direction)


# ------------------------------------------------------------------ solvers directly


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_bwd_data_direct_matches_reference(backend: str, name: str, layout: str) -> None:
    check_data(backend, registry.get("conv_bwd_data_direct"), _p(name, layout, "fp32", "bwd_data"))


@pytest.mark.parametrize("solver", ["conv_bwd_filter_direct", "conv_bwd_filter_implicit_gemm",
                                    "conv_bwd_filter_implicit_gemm_atomic"])  # fmt: skip
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_bwd_filter_solvers_match_reference(backend: str, name: str, layout: str,
                                            solver: str) -> None:  # fmt: skip
    check_filter(backend, registry.get(solver), _p(name, layout, "fp32", "bwd_filter"))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_low_precision_direct_and_gemm(backend: str, dtype: str, layout: str) -> None:
    for name in ("resnet50_3x3_s2", "primes_grouped"):
        check_data(backend, registry.get("conv_bwd_data_direct"), _p(name, layout, dtype,
                                                                     "bwd_data"))  # fmt: skip
        for solver in ("conv_bwd_filter_direct", "conv_bwd_filter_implicit_gemm"):
            check_filter(backend, registry.get(solver), _p(name, layout, dtype, "bwd_filter"))


@pytest.mark.parametrize("tile,splits", [(32, 1), (32, 4), (64, 1), (64, 16), (128, 1),
                                         (128, 4)])  # fmt: skip
def test_bwd_filter_split_k_configs(backend: str, tile: int, splits: int) -> None:
    from cudnnlite.solvers.conv.bwd_filter import SplitKConfig

    p = problem(3, 16, (11, 10), 40, (3, 3), 1, 1, 1, 1, "NHWC", "fp32", "bwd_filter")
    for name in ("conv_bwd_filter_implicit_gemm", "conv_bwd_filter_implicit_gemm_atomic"):
        check_filter(backend, registry.get(name), p, config=SplitKConfig(tile, splits))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_bwd_filter_128x128_tile(backend: str, layout: str) -> None:
    """The 8 x 8-per-thread tile (float32 2-D): rows and columns past one tile's edge
    (K 130, C*R*S 21*9 = 189), NHWC without 16-byte runs (C 21) and with them (C 132, split
    into a partial last slice), grouped; other dtypes and 3-D refuse it by name."""
    from cudnnlite.solvers.conv.bwd_filter import SplitKConfig

    solver = registry.get("conv_bwd_filter_implicit_gemm")
    for c, k, groups in ((21, 130, 1), (132, 8, 1), (12, 140, 2)):
        p = problem(2, c, (5, 6), k, (3, 3), 1, 1, 1, groups, layout, "fp32", "bwd_filter")
        check_filter(backend, solver, p, config=SplitKConfig(128, 4 if c == 132 else 1))
    big = problem(4, 128, (9, 9), 128, (3, 3), 1, 1, 1, 1, layout, "fp32", "bwd_filter")
    assert solver.default_config(big, EMULATOR).tile == 128
    for dtype in ("fp64", "fp16"):
        p = problem(1, 8, (5, 5), 8, (3, 3), 1, 1, 1, 1, layout, dtype, "bwd_filter")
        assert solver.default_config(dataclasses.replace(big, dtype=dtype), EMULATOR).tile == 64
        assert SplitKConfig(128, 1) not in solver.configs(p, EMULATOR)
        with pytest.raises(NotSupportedError, match=f"tile 128 is not compiled for {dtype}"):
            solver.prepare(backend_by_name(backend), p, SplitKConfig(128, 1))


@pytest.mark.parametrize("solver,shape", [
    ("conv_bwd_data_winograd_f2x2_3x3", "resnet50_3x3"),
    ("conv_bwd_data_winograd_f4x4_3x3", "vgg16_3x3"),
    ("conv_bwd_data_implicit_gemm_rotated", "resnet50_3x3"),
    ("conv_bwd_data_implicit_gemm_rotated", "dilated"),
    ("conv_bwd_data_implicit_gemm_rotated", "mobilenetv2_dw_mult2"),
])  # fmt: skip
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_rotated_forward_solvers_fp32(backend: str, solver: str, shape: str, layout: str) -> None:
    p = _p(shape, layout, "fp32", "bwd_data")
    check_data(backend, registry.get(solver), p, winograd="winograd" in solver, bias=True)


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d not in ("fp32", "fp64")])
def test_rotated_wmma_tensor_cores(backend: str, dtype: str) -> None:
    from cudnnlite.runtime.caps import capabilities
    from cudnnlite.runtime.select import backend_by_name

    solver = registry.get("conv_bwd_data_wmma_implicit_gemm")
    for layout in ("NCHW", "NHWC"):
        p = _p("resnet50_3x3", layout, dtype, "bwd_data")
        if not solver.is_applicable(p, capabilities(backend_by_name(backend))):
            pytest.skip(f"no {dtype} tensor cores on this device")
        check_data(backend, solver, p)


def test_rotated_solvers_say_why_not(backend: str) -> None:
    from cudnnlite.runtime.caps import capabilities
    from cudnnlite.runtime.select import backend_by_name

    caps = capabilities(backend_by_name(backend))
    s2 = _p("resnet50_3x3_s2", "NCHW", "fp32", "bwd_data")
    app = registry.get("conv_bwd_data_winograd_f2x2_3x3").is_applicable(s2, caps)
    assert not app and "stride 1" in app.reason
    big_pad = problem(1, 4, (5, 5), 4, (3, 3), 3, 1, 1, 1)
    app = registry.get("conv_bwd_data_implicit_gemm_rotated").is_applicable(big_pad, caps)
    assert not app and "padding" in app.reason
    p1x1 = _p("resnet50_down_1x1_s2", "NCHW", "fp32", "bwd_data")
    assert not registry.get("conv_bwd_data_winograd_f4x4_3x3").is_applicable(p1x1, caps)


# ------------------------------------------------------------------ public API


def _layout_arrays(x: np.ndarray, w: np.ndarray, layout: str) -> tuple[np.ndarray, np.ndarray]:
    if layout in ("NHWC", "NWC"):
        return np.ascontiguousarray(np.moveaxis(x, 1, -1)), np.ascontiguousarray(
            np.moveaxis(w, 1, -1)
        )
    return x, w


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_api_backward_data_filter_bias_through_dispatcher(backend: str, layout: str) -> None:
    cl = layout == "NHWC"
    x, w = _layout_arrays(rand((2, 8, 9, 7), 0, "fp32"), rand((12, 4, 3, 3), 1, "fp32"), layout)
    conv = dict(stride=(2, 1), padding=1, dilation=1, groups=2)
    y = conv_forward(x, w, [(1, 1), (1, 1)], (2, 1), (1, 1), 2, cl)
    dy = rand(y.shape, 2, "fp32")
    p = problem(2, 8, x.shape[1:3] if cl else x.shape[2:], 12, (3, 3), 1, (2, 1), 1, 2, layout)
    dx = cb.conv2d_backward_data(to_backend(dy, backend), to_backend(w, backend), x.shape,
                                 layout=layout, **conv)  # fmt: skip
    assert type(dx) is type(to_backend(dy, backend))
    mag = ref_data(p, np.abs(dy.astype(np.float64)), np.abs(w.astype(np.float64)))
    assert_grad_close(to_numpy(dx), ref_data(p, dy, w), mag, 4 * 9 * 3, "fp32", what="dx")
    dw = cb.conv2d_backward_filter(to_backend(x, backend), to_backend(dy, backend), w.shape,
                                   layout=layout, **conv)  # fmt: skip
    magw = ref_filter(p, np.abs(x.astype(np.float64)), np.abs(dy.astype(np.float64)))
    assert_grad_close(to_numpy(dw), ref_filter(p, x, dy), magw, dy[0, 0].size * 2, "fp32",
                      what="dw")  # fmt: skip
    db = cb.conv2d_backward_bias(to_backend(dy, backend), layout)
    np.testing.assert_allclose(to_numpy(db), conv_backward_bias(dy, cl), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC", "NCW", "NWC"])
def test_backward_bias(backend: str, dtype: str, layout: str) -> None:
    shape = (3, 5, 7, 6) if len(layout) == 4 else (3, 5, 11)
    dy = rand(shape, 4, dtype)
    fn = cb.conv2d_backward_bias if len(layout) == 4 else cb.conv1d_backward_bias
    got = to_numpy(fn(to_backend(dy, backend), layout))
    cl = layout[-1] == "C"
    ref = conv_backward_bias(dy, cl)
    terms = dy.size // ref.size
    mag = conv_backward_bias(np.abs(dy.astype(np.float64)), cl)
    assert_grad_close(got, ref, mag, terms, dtype, what=f"bias {layout}")


def test_backward_bias_many_splits_is_exact_order(backend: str) -> None:
    # N*P*Q large enough for several splits of the reduction (>= 4096 positions each)
    dy = rand((4, 3, 64, 80), 5, "fp32")
    got = to_numpy(cb.conv2d_backward_bias(to_backend(dy, backend)))
    ref = conv_backward_bias(dy)
    assert_grad_close(got, ref, conv_backward_bias(np.abs(dy.astype(np.float64))),
                      dy.size // 3, "fp32", what="bias")  # fmt: skip
    again = to_numpy(cb.conv2d_backward_bias(to_backend(dy, backend)))
    assert np.array_equal(got, again)


# Shapes whose threads step across image boundaries (P*Q below and above a block's 256
# positions, not dividing it), over several splits, in 2-D and 3-D.
BIAS_WALK_SHAPES = [(40, 2, 7, 7), (3, 4, 33, 65), (9, 3, 1, 257), (2, 2, 3, 50, 40)]


@pytest.mark.parametrize("shape", BIAS_WALK_SHAPES, ids=str)
@pytest.mark.parametrize("channels_last", [False, True])
def test_backward_bias_sums_every_element_once(
    backend: str, shape: tuple, channels_last: bool
) -> None:
    """Small integers sum exactly in float32 (every partial stays below 2^24), so the bias
    gradient must equal NumPy's sum bit for bit: an element read twice, skipped or taken
    from the wrong image or channel shows (a summation-error tolerance could hide it)."""
    dy = np.random.default_rng(sum(shape)).integers(-8, 9, shape).astype(np.float32)
    if channels_last:
        dy = np.ascontiguousarray(np.moveaxis(dy, 1, -1))
    layout = {4: "NHWC" if channels_last else "NCHW", 5: "NDHWC" if channels_last else "NCDHW"}
    fn = cb.conv2d_backward_bias if dy.ndim == 4 else cb.conv3d_backward_bias
    got = to_numpy(fn(to_backend(dy, backend), layout[dy.ndim]))
    axes = tuple(a for a in range(dy.ndim) if a != (dy.ndim - 1 if channels_last else 1))
    np.testing.assert_array_equal(got, dy.sum(axes, dtype=np.float64).astype(np.float32))


@pytest.mark.parametrize("case", [
    # stride, padding, output_padding, dilation, groups, layout
    ((2, 2), (1, 1), (1, 1), (1, 1), 1, "NCHW"),
    ((2, 3), (0, 1), (1, 2), (1, 1), 2, "NHWC"),
    ((1, 1), (1, 1), (0, 0), (1, 1), 1, "NCHW"),  # stride 1: a rotated-forward solver
    ((1, 1), (0, 0), (1, 1), (2, 2), 1, "NCHW"),  # output_padding via dilation, zero edge
    ((1, 2), (2, 0), (1, 1), (3, 1), 1, "NHWC"),
])  # fmt: skip
def test_conv_transpose2d_matches_reference(backend: str, case: tuple) -> None:
    stride, padding, op, dil, groups, layout = case
    x, w = _layout_arrays(rand((2, 4, 5, 4), 6, "fp32"), rand((4, 6 // groups, 3, 3), 7, "fp32"),
                          layout)  # fmt: skip
    b = rand((6,), 8, "fp32")
    got = cb.conv_transpose2d(to_backend(x, backend), to_backend(w, backend),
                              to_backend(b, backend), stride, padding, op, groups, dil,
                              layout=layout)  # fmt: skip
    ref = conv_transpose(x, w, b, stride, padding, op, groups, dil, layout == "NHWC")
    assert to_numpy(got).shape == ref.shape
    np.testing.assert_allclose(to_numpy(got), ref, rtol=1e-5, atol=1e-5)


def test_conv_transpose_is_the_adjoint_of_conv2d(backend: str) -> None:
    # <conv_transpose(x, w), v> == <x, conv2d(v, w)> for the output size the transpose has
    x, w = rand((1, 4, 4, 5), 9, "fp32"), rand((4, 3, 3, 3), 10, "fp32")
    y = to_numpy(cb.conv_transpose2d(to_backend(x, backend), to_backend(w, backend), None, 2, 1,
                                     1))  # fmt: skip
    v = rand(y.shape, 11, "fp32").astype(np.float64)
    fwd = conv_forward(v, w, [(1, 1), (1, 1)], (2, 2), (1, 1))
    assert fwd.shape == x.shape
    np.testing.assert_allclose(np.sum(y * v), np.sum(fwd * x), rtol=1e-5)


@pytest.mark.parametrize("layout", ["NCW", "NWC"])
def test_conv1d_forms(backend: str, layout: str) -> None:
    cl = layout == "NWC"
    x, w = rand((2, 4, 15), 12, "fp32"), rand((6, 2, 3), 13, "fp32")
    if cl:
        x, w = (
            np.ascontiguousarray(np.moveaxis(x, 1, -1)),
            np.ascontiguousarray(np.moveaxis(w, 1, -1)),
        )
    y = conv_forward(x, w, [(1, 1)], (2,), (2,), 2, cl)
    dy = rand(y.shape, 14, "fp32")
    p = problem(2, 4, (15,), 6, (3,), 1, 2, 2, 2, layout)
    kw = dict(stride=2, padding=1, dilation=2, groups=2, layout=layout)
    dx = to_numpy(cb.conv1d_backward_data(to_backend(dy, backend), to_backend(w, backend),
                                          x.shape, **kw))  # fmt: skip
    np.testing.assert_allclose(dx, ref_data(p, dy, w), rtol=1e-5, atol=1e-5)
    dw = to_numpy(cb.conv1d_backward_filter(to_backend(x, backend), to_backend(dy, backend),
                                            w.shape, **kw))  # fmt: skip
    np.testing.assert_allclose(dw, ref_filter(p, x, dy), rtol=1e-5, atol=1e-5)
    t = to_numpy(cb.conv_transpose1d(to_backend(dy, backend), to_backend(w, backend), None, 2, 1,
                                     1, 2, 2, layout=layout))  # fmt: skip
    np.testing.assert_allclose(t, conv_transpose(dy, w, None, (2,), (1,), (1,), 2, (2,), cl),
                               rtol=1e-5, atol=1e-5)  # fmt: skip


def test_out_and_strided_inputs(backend: str) -> None:
    x, w = rand((2, 4, 8, 8), 15, "fp32"), rand((6, 4, 3, 3), 16, "fp32")
    dy = rand((2, 6, 8, 8), 17, "fp32")
    ref = ref_data(problem(2, 4, (8, 8), 6, (3, 3), 1), dy, w)
    big = rand((2, 6, 8, 16), 18, "fp32")
    big[..., ::2] = dy
    dy_view = to_backend(big, backend)[..., ::2]  # non-contiguous input
    out = to_backend(np.zeros((2, 4, 8, 8), np.float32), backend)
    got = cb.conv2d_backward_data(dy_view, to_backend(w, backend), x.shape, padding=1, out=out)
    assert got is out
    np.testing.assert_allclose(to_numpy(out), ref, rtol=1e-5, atol=1e-5)
    # non-contiguous out receives a copy
    out2 = to_backend(np.zeros((6, 4, 3, 6), np.float32), backend)[..., ::2]
    got = cb.conv2d_backward_filter(to_backend(x, backend), dy_view, w.shape, padding=1, out=out2)
    assert got is out2
    np.testing.assert_allclose(to_numpy(out2), ref_filter(problem(2, 4, (8, 8), 6, (3, 3), 1),
                                                          x, dy), rtol=1e-4, atol=1e-4)  # fmt: skip


@pytest.mark.parametrize("direction", ["data", "filter"])
def test_deterministic_runs_are_bitwise_identical(backend: str, direction: str) -> None:
    x, w = rand((4, 16, 12, 12), 19, "fp32"), rand((32, 16, 3, 3), 20, "fp32")
    dy = rand((4, 32, 12, 12), 21, "fp32")
    args = [to_backend(a, backend) for a in (x, w, dy)]
    results = []
    with settings(deterministic=True):
        for _ in range(3):
            if direction == "data":
                r = cb.conv2d_backward_data(args[2], args[1], x.shape, padding=1)
            else:
                r = cb.conv2d_backward_filter(args[0], args[2], w.shape, padding=1)
                assert not any("atomic" in n for n in cb.last_kernel_names())
            results.append(to_numpy(r))
    assert all(np.array_equal(results[0], r) for r in results[1:])


def test_atomic_solver_refused_in_deterministic_mode(backend: str) -> None:
    x, dy = rand((1, 4, 6, 6), 22, "fp32"), rand((1, 4, 6, 6), 23, "fp32")
    with settings(deterministic=True), pytest.raises(NotSupportedError, match="reproducible"):
        cb.conv2d_backward_filter(
            to_backend(x, backend), to_backend(dy, backend), (4, 4, 3, 3), padding=1,
            algo="conv_bwd_filter_implicit_gemm_atomic",
        )  # fmt: skip


# ------------------------------------------------------------------ bad inputs


# (argument, call, message): dy is (2, 6, 8, 8) and w (6, 4, 3, 3)
_BAD_DATA_CALLS = [
    ("dy", dict(x_shape=(2, 4, 9, 9), padding=1), "dy: expected shape"),  # 9x9 -> 9x9 != 8
    ("dy", dict(x_shape=(2, 4, 8, 8), stride=2, padding=1), "dy: expected shape"),
    ("x_shape", dict(x_shape=(2, 4, 8)), "x_shape: expected a sequence of 4"),
    ("x_shape", dict(x_shape=(2, 5, 8, 8), padding=1), "w: has 4 channels per group"),
    ("groups", dict(x_shape=(2, 4, 8, 8), padding=1, groups=3), "groups:"),
    ("padding", dict(x_shape=(2, 4, 8, 8), padding=-1), "padding:"),
    ("stride", dict(x_shape=(2, 4, 8, 8), stride=0), "stride:"),
    ("dilation", dict(x_shape=(2, 4, 8, 8), dilation=(1, 0)), "dilation:"),
    ("layout", dict(x_shape=(2, 4, 8, 8), padding=1, layout="CHWN"), "layout:"),
    ("x_shape", dict(x_shape=(2, 4, 1, 1)), "x_shape: the padded input"),
    ("algo", dict(x_shape=(2, 4, 8, 8), padding=1, algo="conv_bwd_filter_direct"), "algo:"),
    ("algo", dict(x_shape=(2, 4, 8, 8), padding=1, algo="nope"), "algo: unknown"),
]


def test_bad_inputs_backward_data(backend: str) -> None:
    dy_np, w_np = rand((2, 6, 8, 8), 24, "fp32"), rand((6, 4, 3, 3), 25, "fp32")
    dy, w = to_backend(dy_np, backend), to_backend(w_np, backend)
    for _, kw, msg in _BAD_DATA_CALLS:
        with pytest.raises(BadParamError, match=msg):
            cb.conv2d_backward_data(dy, w, **kw)
    with pytest.raises(BadParamError, match="w: expected dtype"):
        cb.conv2d_backward_data(dy, to_backend(w_np.astype(np.float16), backend), (2, 4, 8, 8),
                                padding=1)  # fmt: skip
    with pytest.raises(BadParamError, match="dy: expected dtype float32"):
        cb.conv2d_backward_data(to_backend(dy_np.astype(np.int32), backend), w, (2, 4, 8, 8))
    with pytest.raises(BadParamError, match="out: expected shape"):
        cb.conv2d_backward_data(dy, w, (2, 4, 8, 8), padding=1, out=to_backend(dy_np, backend))
    with pytest.raises(BadParamError, match="out: overlaps dy"):
        cb.conv2d_backward_data(dy, w, (2, 4, 8, 8), padding=1, out=dy[:, :4])
    dy_s2 = to_backend(rand((2, 6, 4, 4), 0, "fp32"), backend)
    with pytest.raises(NotSupportedError, match="stride 1"):
        cb.conv2d_backward_data(dy_s2, w, (2, 4, 8, 8), stride=2, padding=1,
                                algo="conv_bwd_data_winograd_f2x2_3x3")  # fmt: skip
    np.testing.assert_array_equal(to_numpy(dy), dy_np)  # inputs untouched
    np.testing.assert_array_equal(to_numpy(w), w_np)


def test_bad_inputs_backward_filter_and_bias(backend: str) -> None:
    x_np, dy_np = rand((2, 4, 8, 8), 26, "fp32"), rand((2, 6, 8, 8), 27, "fp32")
    x, dy = to_backend(x_np, backend), to_backend(dy_np, backend)
    cases = [
        (dict(w_shape=(6, 4, 3, 3)), "dy: expected shape \\(2, 6, 6, 6\\)"),  # no padding
        (dict(w_shape=(6, 4, 3)), "w_shape: expected a sequence of 4"),
        (dict(w_shape=(6, 3, 3, 3), padding=1), "w_shape: has 3 channels per group"),
        (dict(w_shape=(6, 4, 3, 3), padding=1, algo="conv_bwd_data_direct"), "algo:"),
        (dict(w_shape=(6, 2, 3, 3), padding=1, groups=4), "groups: 4 does not divide the 6"),
    ]
    for kw, msg in cases:
        with pytest.raises(BadParamError, match=msg):
            cb.conv2d_backward_filter(x, dy, **kw)
    with pytest.raises(BadParamError, match="dy: expected dtype"):
        cb.conv2d_backward_filter(x, to_backend(dy_np.astype(np.float16), backend),
                                  (6, 4, 3, 3), padding=1)  # fmt: skip
    with pytest.raises(BadParamError, match="layout:"):
        cb.conv2d_backward_bias(dy, "NCW")
    with pytest.raises(BadParamError, match="dy: expected a 4-D"):
        cb.conv2d_backward_bias(dy[0, 0])
    with pytest.raises(BadParamError, match="out: expected shape \\(6,\\)"):
        cb.conv2d_backward_bias(dy, out=to_backend(np.zeros(5, np.float32), backend))
    np.testing.assert_array_equal(to_numpy(x), x_np)
    np.testing.assert_array_equal(to_numpy(dy), dy_np)


def test_bad_inputs_conv_transpose(backend: str) -> None:
    x_np, w_np = rand((1, 4, 5, 5), 28, "fp32"), rand((4, 3, 3, 3), 29, "fp32")
    x, w = to_backend(x_np, backend), to_backend(w_np, backend)
    cases = [
        (dict(stride=2, output_padding=2), "output_padding: must be smaller"),
        (dict(stride=1, output_padding=1), "output_padding: must be smaller"),
        (dict(stride=1, dilation=2, output_padding=2), "output_padding: must be smaller"),
        (dict(output_padding=-1), "output_padding: every value must be >= 0"),
        (dict(padding=5), "padding: .* empty output"),
        (dict(groups=3), "groups: 3 does not divide"),
        (dict(layout="NWC"), "layout:"),
    ]
    for kw, msg in cases:
        with pytest.raises(BadParamError, match=msg):
            cb.conv_transpose2d(x, w, **kw)
    with pytest.raises(BadParamError, match="w: expected 4 filters"):
        cb.conv_transpose2d(x, to_backend(rand((3, 3, 3, 3), 0, "fp32"), backend))
    with pytest.raises(BadParamError, match="bias: expected shape \\(3,\\)"):
        cb.conv_transpose2d(x, w, to_backend(np.zeros(4, np.float32), backend))
    np.testing.assert_array_equal(to_numpy(x), x_np)
    np.testing.assert_array_equal(to_numpy(w), w_np)
