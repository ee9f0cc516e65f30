"""The cuBLAS convolution solvers (cudnnlite/solvers/conv/gemm_cublas*.py) in every
direction, run directly against the float64 reference on every backend (the emulator
runs the GEMMs through NumPy's matmul), and through the public API.

Tolerances (tests/conv_support.py, tests/conv_backward_support.py): one rounding of the
output's storage type (fp32 0, fp16 2^-11, bf16 2^-8 relative) plus the fp32
accumulation bound acc_factor * T * 2^-24 * (the same convolution of |operands|), with
acc_factor 2 and T the terms per output. Why 2 is enough: every result is an fp32 sum
(an sgemm in cuBLAS or NumPy; blocked, any order: at most (T - 1) * 2^-24 of the sum of
magnitudes) of exact products (fp16/bf16 widen exactly), then alpha/beta and the
epilogue in fp32 as in the other solvers; col2im adds the fp32 GEMM results over the
taps (K/g terms, then R*S terms: T in all), and backward filter adds chunk results in
fp32. TF32 (math="tf32"): each operand rounds to 11 significant bits, so a product is
off by at most 2 * 2^-11 (+ 2^-22) of its magnitude: bound 2^-10 * 1.01 * mag on top.
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import conv_backward_support as bws
import numpy as np
import pytest
from test_conv_direct import EPILOGUES, make

import cudnnlite
from cudnnlite import dtypes
from cudnnlite.dispatch import heuristics, select
from cudnnlite.errors import BadParamError, NotSupportedError
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.problems.suites import problems
from cudnnlite.reference.conv import conv_bias_act_forward, conv_forward
from cudnnlite.reference.conv_backward import (
    conv_backward_data,
    conv_backward_filter,
    conv_transpose,
)
from cudnnlite.runtime import blas
from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.solvers.conv.common import ConvTensors, Epilogue
from cudnnlite.solvers.conv.gemm_cublas import ChunkConfig, Gemm1x1Solver, Im2colSolver
from cudnnlite.solvers.conv.gemm_cublas_bwd import (
    BwdData1x1Solver,
    BwdDataCol2imSolver,
    BwdFilter1x1Solver,
    BwdFilterIm2colSolver,
)
from cudnnlite.testing import to_backend, to_numpy

from conv_support import assert_conv_close, check, operands, run_solver

FWD_1X1, FWD_IM2COL = Gemm1x1Solver(), Im2colSolver()
DATA_1X1, DATA_COL2IM = BwdData1x1Solver(), BwdDataCol2imSolver()
FILTER_1X1, FILTER_IM2COL = BwdFilter1x1Solver(), BwdFilterIm2colSolver()
DTYPES = [d.short for d in dtypes.FP32_COMPUTE_TYPES]  # fp64: test_conv_fp64_gemm.py
LAYOUTS = ["NCHW", "NHWC"]


def with_dir(p: ConvProblem, direction: str) -> ConvProblem:
    return dataclasses.replace(p, direction=direction)


def check_all_directions(backend: str, p: ConvProblem, pointwise: bool, **kw) -> None:
    """Forward, backward data (with a bias) and backward filter of one problem."""
    fwd, data, filt = ((FWD_1X1, DATA_1X1, FILTER_1X1) if pointwise
                       else (FWD_IM2COL, DATA_COL2IM, FILTER_IM2COL))  # fmt: skip
    check(backend, fwd, p, config=kw.get("config"))
    bws.check_data(backend, data, with_dir(p, "bwd_data"), bias=True)
    bws.check_filter(backend, filt, with_dir(p, "bwd_filter"), config=kw.get("config"))


# ------------------------------------------------------------------ real networks


def _layers(suite: str, names: tuple, **kw) -> list[ConvProblem]:
    table = dict(zip([layer.name for layer in _suite(suite)], problems(suite, **kw), strict=True))
    return [table[name] for name in names]


def _suite(name: str) -> tuple:
    from cudnnlite.problems.suites import SUITES

    return SUITES[name]


# ResNet-50's stem, strided 3x3 and strided 1x1 (im2col); VGG's 3x3; MobileNetV2's
# depthwise (groups = C) and pointwise (1x1) layers: scaled to 5x5 images.
IM2COL_LAYERS = {"resnet50": ("conv1", "l2.conv2", "l3.down"), "vgg16": ("conv3_1",),
                 "mobilenetv2": ("dw96.s2", "stem")}  # fmt: skip
POINTWISE_LAYERS = {"resnet50": ("l1.conv1", "l2.conv3"), "mobilenetv2": ("pw144-32",)}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", DTYPES)
def test_real_network_layers(backend: str, dtype: str, layout: str) -> None:
    for table, pointwise in ((IM2COL_LAYERS, False), (POINTWISE_LAYERS, True)):
        for suite, names in table.items():
            for p in _layers(suite, names, n=2, dtype=dtype, layout=layout, hw=5):
                if dtype != "fp32" and suite == "vgg16":
                    continue  # fp16/bf16: the others cover the same GEMM shapes
                check_all_directions(backend, p, pointwise)


def test_im2col_also_runs_pointwise_layers(backend: str) -> None:
    for p in _layers("resnet50", ("l1.conv1",), n=2, layout="NHWC", hw=4):
        check_all_directions(backend, p, pointwise=False)


# ------------------------------------------------------------------ odd shapes

ODD = {
    "primes": dict(n=2, c=7, k=5, hw=(11, 13), f=(3, 5), pad=((1, 1), (2, 2))),
    "image_1x1_big_pad": dict(n=2, c=3, k=4, hw=(1, 1), f=(3, 3), pad=3),
    "stride3": dict(n=1, c=4, k=6, hw=(10, 11), f=(3, 3), pad=1, stride=3),
    "dilation2": dict(n=2, c=4, k=3, hw=(9, 8), f=(3, 3), pad=2, dil=2),
    "groups2": dict(n=2, c=6, k=8, hw=(6, 7), f=(3, 3), pad=1, groups=2),
    "groups2_strided_dilated": dict(
        n=3, c=4, k=6, hw=(9, 7), f=(2, 3), pad=1, stride=2, dil=2, groups=2
    ),  # fmt: skip
    "asymmetric_pad": dict(n=1, c=5, k=3, hw=(7, 6), f=(3, 3), pad=((0, 2), (1, 0))),
    "1d": dict(n=2, c=6, k=4, hw=(17,), f=(5,), pad=2, stride=2, groups=2),
    "1d_dilated_stride3": dict(n=1, c=3, k=5, hw=(23,), f=(3,), pad=4, stride=3, dil=2),
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", sorted(ODD))
def test_odd_shapes(backend: str, case: str, layout: str) -> None:
    check_all_directions(backend, make(layout=layout, **ODD[case]), pointwise=False)


ODD_1X1 = {
    "primes": dict(n=2, c=7, k=13, hw=(5, 7)),
    "groups2": dict(n=2, c=8, k=6, hw=(4, 5), groups=2),
    "groups_c": dict(n=1, c=6, k=12, hw=(3, 3), groups=6),
    "1d": dict(n=3, c=5, k=4, hw=(9,)),
    "dilated": dict(n=1, c=4, k=4, hw=(5, 6), dil=2),  # a 1x1 filter: dilation is moot
}


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("case", sorted(ODD_1X1))
def test_odd_shapes_1x1(backend: str, case: str, layout: str) -> None:
    kw = ODD_1X1[case]
    p = make(f=(1,) * len(kw["hw"]), pad=0, layout=layout, **kw)
    check_all_directions(backend, p, pointwise=True)


@pytest.mark.parametrize("dtype", [d for d in DTYPES if d != "fp32"])
def test_odd_shapes_half(backend: str, dtype: str) -> None:
    for layout in LAYOUTS:
        for case in ("groups2_strided_dilated", "1d"):
            check_all_directions(backend, make(layout=layout, dtype=dtype, **ODD[case]), False)
        p = make(f=(1, 1), pad=0, layout=layout, dtype=dtype, **ODD_1X1["groups2"])
        check_all_directions(backend, p, pointwise=True)


# ------------------------------------------------------------------ chunks and workspace


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_chunks_of_images(backend: str, dtype: str, layout: str) -> None:
    """5 images in chunks of 4 (+1) and of 1: every direction, fp16 accumulating in fp32."""
    p = make(n=5, c=4, k=6, hw=(5, 6), f=(3, 3), pad=1, stride=2, groups=2, layout=layout,
             dtype=dtype)  # fmt: skip
    for images in (4, 1):
        cfg = ChunkConfig(images)
        assert cfg in FWD_IM2COL.configs(p, EMULATOR)
        check(backend, FWD_IM2COL, p, config=cfg)
        data = with_dir(p, "bwd_data")
        dy, w = bws.rand(p.y_shape(), 3, dtype), bws.rand(p.w_shape(), 4, dtype)
        got = bws.run_data(backend, DATA_COL2IM, data, dy, w, config=cfg)
        mag = bws.ref_data(data, np.abs(dy.astype(np.float64)), np.abs(w.astype(np.float64)))
        bws.assert_grad_close(got, bws.ref_data(data, dy, w), mag, p.k_per_group * 9, dtype)
        bws.check_filter(backend, FILTER_IM2COL, with_dir(p, "bwd_filter"), config=cfg)
    pw = make(n=5, c=8, k=4, hw=(3, 3), f=(1, 1), pad=0, layout=layout, dtype=dtype)
    if dtype != "fp32":  # fp32 1x1 needs no workspace: a single chunk
        check(backend, FWD_1X1, pw, config=ChunkConfig(2))
        dy = bws.rand(pw.y_shape(), 5, dtype)
        w = bws.rand(pw.w_shape(), 6, dtype)
        b = bws.rand((pw.c,), 7, dtype)
        data = with_dir(pw, "bwd_data")
        got = bws.run_data(backend, DATA_1X1, data, dy, w, b, config=ChunkConfig(2))
        ref = bws.ref_data(data, dy, w) + (b if pw.channels_last else b.reshape(-1, 1, 1))
        mag = bws.ref_data(data, np.abs(dy.astype(np.float64)), np.abs(w.astype(np.float64)))
        bws.assert_grad_close(got, ref, mag, pw.k, dtype)


def _expected_workspace(solver: object, p: ConvProblem, images: int) -> int:
    """Written out independently of the solvers: the col matrix in the storage type, the
    fp32 GEMM result / accumulator, each region starting at a multiple of 256 bytes."""
    item = {"fp32": 4, "fp16": 2, "bf16": 2}[p.dtype]
    pq = int(np.prod(p.out_spatial))
    col = images * pq * p.c * p.filter_taps
    half = p.dtype != "fp32"
    up = lambda v: -(-v // 256) * 256  # noqa: E731
    if solver is FWD_1X1:
        return 4 * images * pq * p.k if half else 0
    if solver is FWD_IM2COL:
        return up(col * item) + 4 * images * pq * p.k if half else col * item
    if solver is DATA_1X1:
        return 4 * images * int(np.prod(p.spatial)) * p.c if half else 0
    if solver is DATA_COL2IM:
        return 4 * col
    passes = p.n if not p.channels_last else -(-p.n // images)
    acc = 4 * int(np.prod(p.w_shape())) if half and passes > 1 else 0
    if solver is FILTER_1X1:
        return acc
    return up(col * item) + acc if acc else col * item


@pytest.mark.parametrize("dtype", ["fp32", "bf16"])
def test_workspace_sizes_are_exact(backend: str, dtype: str) -> None:
    b = backend_by_name(backend)
    for layout in LAYOUTS:
        p = make(n=3, c=6, k=4, hw=(5, 7), f=(3, 3), pad=1, stride=2, groups=2, layout=layout,
                 dtype=dtype)  # fmt: skip
        pw = make(n=3, c=6, k=4, hw=(5, 7), f=(1, 1), pad=0, layout=layout, dtype=dtype)
        cases = [(FWD_IM2COL, p), (DATA_COL2IM, p), (FILTER_IM2COL, p), (FWD_1X1, pw),
                 (DATA_1X1, pw), (FILTER_1X1, pw)]  # fmt: skip
        for solver, prob in cases:
            prob = with_dir(prob, solver.family.removeprefix("conv_"))
            for cfg in solver.configs(prob, EMULATOR):
                size = solver.workspace_size(prob, cfg)
                assert size == _expected_workspace(solver, prob, cfg.images), solver.name
                if not size:
                    continue
                # one byte short is refused before anything runs
                runner = solver.prepare(b, prob, cfg)
                short = b.xp.empty(size - 1, dtype=np.uint8)
                with pytest.raises(BadParamError, match=f"workspace: {size} bytes needed"):
                    runner(_tensors(b, prob), Epilogue(), short)
    # the exact size runs (the checks above use workspace_size bytes, no more)
    check(backend, FWD_IM2COL, make(n=2, c=3, k=2, hw=(4, 4), dtype=dtype), config=ChunkConfig(1))


def _tensors(b: object, p: ConvProblem) -> object:
    from cudnnlite.solvers.conv.bwd_data import BwdDataTensors
    from cudnnlite.solvers.conv.bwd_filter import BwdFilterTensors

    dt = bws.NUMPY_DTYPE[p.dtype]
    x, w, y = (b.xp.zeros(s, dtype=dt) for s in (p.x_shape(), p.w_shape(), p.y_shape()))
    if p.direction == "bwd_data":
        return BwdDataTensors(y, w, x)
    if p.direction == "bwd_filter":
        return BwdFilterTensors(x, y, w)
    return ConvTensors(x, w, y)


def test_workspace_limit_picks_chunks_then_refuses() -> None:
    p = make(n=8, c=4, k=4, hw=(6, 6), f=(3, 3), pad=1)
    one = FWD_IM2COL.workspace_size(p, ChunkConfig(1))
    assert FWD_IM2COL.default_config(p, EMULATOR) == ChunkConfig(8)
    with cudnnlite.settings(workspace_limit=5 * one):
        assert FWD_IM2COL.default_config(p, EMULATOR) == ChunkConfig(4)
        assert select.usable(FWD_IM2COL, p, EMULATOR)
    with cudnnlite.settings(workspace_limit=one - 1):
        r = select.usable(FWD_IM2COL, p, EMULATOR)
        assert not r and f"needs {one} bytes of workspace, over the limit {one - 1}" in r.reason
        assert not select.usable(FWD_IM2COL, p, EMULATOR, ChunkConfig(8))
        x = np.zeros(p.x_shape(), np.float32)
        w = np.zeros(p.w_shape(), np.float32)
        with pytest.raises(NotSupportedError, match="over the limit"):
            cudnnlite.conv2d(x, w, padding=1, algo="conv_fwd_im2col_gemm_cublas")
    # fp32 1x1: no workspace, so no limit can refuse it
    with cudnnlite.settings(workspace_limit=0):
        assert select.usable(FWD_1X1, make(f=(1, 1), pad=0), EMULATOR)


# ------------------------------------------------------------------ epilogue


@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize("name,epilogue,act", EPILOGUES, ids=[e[0] for e in EPILOGUES])
def test_fused_epilogue(backend: str, name: str, epilogue: Epilogue, act, layout: str) -> None:
    for dtype in ("fp32", DTYPES[-1]):
        for solver, f, pad in ((FWD_1X1, (1, 1), 0), (FWD_IM2COL, (3, 3), 1)):
            p = make(n=2, c=6, k=4, hw=(4, 5), f=f, pad=pad, groups=2, layout=layout,
                     dtype=dtype)  # fmt: skip
            ops = operands(p, seed=7, bias=epilogue.has_bias, z=epilogue.has_z)
            got = run_solver(backend, solver, p, ops, epilogue=epilogue)
            assert_conv_close(got, p, ops, epilogue=epilogue, activation=act, what=name)


@pytest.mark.parametrize("dtype", ["fp32", "fp16"])
def test_residual_written_in_place(backend: str, dtype: str) -> None:
    """out=z: y holds z when the GEMM runs (fp32 blends it through cuBLAS's beta)."""
    b = backend_by_name(backend)
    e = Epilogue(alpha=0.5, alpha2=-1.25, has_bias=True, has_z=True, act_mode=0)
    for layout in LAYOUTS:
        for solver, f, pad in ((FWD_1X1, (1, 1), 0), (FWD_IM2COL, (3, 3), 1)):
            p = make(n=2, c=4, k=6, hw=(4, 4), f=f, pad=pad, layout=layout, dtype=dtype)
            ops = operands(p, seed=11, bias=True, z=True)
            cfg = solver.default_config(p, EMULATOR)
            zy = to_backend(ops["z"], backend).copy()
            t = ConvTensors(to_backend(ops["x"], backend), to_backend(ops["w"], backend), zy,
                            to_backend(ops["bias"], backend), zy)  # fmt: skip
            size = solver.workspace_size(p, cfg)
            solver.prepare(b, p, cfg)(t, e, b.xp.empty(size, np.uint8) if size else None)
            assert_conv_close(to_numpy(zy), p, ops, epilogue=e, activation="relu")


# ------------------------------------------------------------------ math, determinism


def test_tf32_rounds_the_inputs(backend: str) -> None:
    p = make(n=2, c=32, k=8, hw=(4, 4), f=(1, 1), pad=0, layout="NHWC")
    p32 = dataclasses.replace(p, math="tf32")
    ops = operands(p, seed=5)
    ops["x"] = ops["x"] * np.float32(1 + 2**-13)  # bits below TF32's mantissa
    exact = run_solver(backend, FWD_1X1, p, ops)
    tf32 = run_solver(backend, FWD_1X1, p32, ops)
    assert not np.array_equal(exact, tf32)
    assert FWD_1X1.is_applicable(p32, for_sm(75))  # cuBLAS falls back to fp32 below sm_80
    ref = conv_forward(ops["x"].astype(np.float64), ops["w"].astype(np.float64), p.pads,
                       p.strides, p.dilations, p.groups, True)  # fmt: skip
    mag = conv_forward(np.abs(ops["x"].astype(np.float64)), np.abs(ops["w"].astype(np.float64)),
                       p.pads, p.strides, p.dilations, p.groups, True)  # fmt: skip
    bound = (2.0**-10 * 1.01 + 2 * p.c * 2.0**-24) * mag + 1e-6
    assert np.all(np.abs(tf32 - ref) <= bound)
    if backend == "cpu":  # the emulator's TF32: rounded inputs, then an fp32 GEMM
        rounded = dict(ops, x=blas.round_tf32(ops["x"]), w=blas.round_tf32(ops["w"]))
        np.testing.assert_array_equal(tf32, run_solver(backend, FWD_1X1, p, rounded))


def test_deterministic_and_inputs_untouched(backend: str) -> None:
    p = make(n=3, c=6, k=4, hw=(5, 6), f=(3, 3), pad=1, stride=2, groups=2, layout="NHWC",
             dtype="fp16")  # fmt: skip
    ops = operands(p, seed=2, bias=True, z=True)
    kept = {k: v.copy() for k, v in ops.items()}
    first = run_solver(backend, FWD_IM2COL, p, ops, config=ChunkConfig(2))
    np.testing.assert_array_equal(first, run_solver(backend, FWD_IM2COL, p, ops,
                                                    config=ChunkConfig(2)))  # fmt: skip
    data = with_dir(p, "bwd_data")
    dy, w = bws.rand(p.y_shape(), 1, "fp16"), bws.rand(p.w_shape(), 2, "fp16")
    np.testing.assert_array_equal(bws.run_data(backend, DATA_COL2IM, data, dy, w),
                                  bws.run_data(backend, DATA_COL2IM, data, dy, w))  # fmt: skip
    for k, v in ops.items():
        np.testing.assert_array_equal(v, kept[k], err_msg=k)
    assert all(s.deterministic for s in (FWD_1X1, FWD_IM2COL, DATA_1X1, DATA_COL2IM,
                                         FILTER_1X1, FILTER_IM2COL))  # fmt: skip


# ------------------------------------------------------------------ public API


def test_public_api_end_to_end(backend: str) -> None:
    """conv2d/conv1d, their backward functions, conv_transpose2d and plans with the new
    algos, against the float64 references (fp32: 1e-5 is ~100x the accumulation bound
    of these sizes; fp16: two storage roundings)."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 5, 7, 6)).astype(np.float32)
    w = rng.standard_normal((4, 5, 3, 3)).astype(np.float32)
    bias = rng.standard_normal(4).astype(np.float32)
    xb, wb, bb = (to_backend(a, backend) for a in (x, w, bias))
    geo = (((1, 1), (1, 1)), (2, 2), (1, 1), 1, False)
    want = conv_bias_act_forward(x, w, *geo, bias=bias, activation="relu")
    got = cudnnlite.conv2d(xb, wb, bb, stride=2, padding=1, activation="relu",
                           algo="conv_fwd_im2col_gemm_cublas")  # fmt: skip
    np.testing.assert_allclose(to_numpy(got), want, rtol=1e-5, atol=1e-5)
    dy = got
    dx = cudnnlite.conv2d_backward_data(dy, wb, x.shape, stride=2, padding=1,
                                        algo="conv_bwd_data_col2im_gemm_cublas")  # fmt: skip
    ref = conv_backward_data(to_numpy(dy), w, (7, 6), *geo)
    np.testing.assert_allclose(to_numpy(dx), ref, rtol=1e-5, atol=1e-4)
    dw = cudnnlite.conv2d_backward_filter(xb, dy, w.shape, stride=2, padding=1,
                                          algo="conv_bwd_filter_im2col_gemm_cublas")  # fmt: skip
    ref = conv_backward_filter(x, to_numpy(dy), (3, 3), *geo)
    np.testing.assert_allclose(to_numpy(dw), ref, rtol=1e-5, atol=1e-4)
    # conv_transpose with a bias and output_padding, through col2im
    tbias = rng.standard_normal(5).astype(np.float32)
    got = cudnnlite.conv_transpose2d(dy, wb, to_backend(tbias, backend), stride=2, padding=1,
                                     output_padding=1,
                                     algo="conv_bwd_data_col2im_gemm_cublas")  # fmt: skip
    ref = conv_transpose(to_numpy(dy), w, tbias, (2, 2), (1, 1), (1, 1))
    np.testing.assert_allclose(to_numpy(got), ref, rtol=1e-5, atol=1e-4)
    # 1x1 in 1-D NWC, fp16, every direction
    x1 = rng.standard_normal((2, 9, 8)).astype(np.float16)
    w1 = rng.standard_normal((6, 1, 8)).astype(np.float16)
    x1b, w1b = to_backend(x1, backend), to_backend(w1, backend)
    geo1 = (((0, 0),), (1,), (1,), 1, True)
    y1 = cudnnlite.conv1d(x1b, w1b, layout="NWC", algo="conv_fwd_gemm_cublas_1x1")
    np.testing.assert_allclose(to_numpy(y1).astype(np.float64), conv_forward(x1, w1, *geo1),
                               rtol=2e-3, atol=2e-3)  # fmt: skip
    dx = cudnnlite.conv1d_backward_data(y1, w1b, (2, 9, 8), layout="NWC",
                                        algo="conv_bwd_data_gemm_cublas_1x1")  # fmt: skip
    np.testing.assert_allclose(to_numpy(dx).astype(np.float64),
                               conv_backward_data(to_numpy(y1), w1, (9,), *geo1),
                               rtol=2e-3, atol=2e-2)  # fmt: skip
    dw = cudnnlite.conv1d_backward_filter(x1b, y1, (6, 1, 8), layout="NWC",
                                          algo="conv_bwd_filter_gemm_cublas_1x1")  # fmt: skip
    np.testing.assert_allclose(to_numpy(dw).astype(np.float64),
                               conv_backward_filter(x1, to_numpy(y1), (1,), *geo1),
                               rtol=2e-3, atol=2e-2)  # fmt: skip
    # a plan: workspace = the im2col matrix (2 images x 4x3 outputs x 5 channels x 9 taps)
    plan = cudnnlite.conv2d_plan(x.shape, w.shape, stride=2, padding=1,
                                 algo="conv_fwd_im2col_gemm_cublas", backend=backend)  # fmt: skip
    assert plan.workspace_bytes == 2 * 4 * 3 * 5 * 9 * 4
    np.testing.assert_allclose(to_numpy(plan(xb, wb, bb, activation="relu")), want,
                               rtol=1e-5, atol=1e-5)  # fmt: skip
    assert plan.kernel_names == ["im2col_nchw_fp32", "cublas_gemm_fwd_nchw_fp32_x1",
                                 "gemm_epilogue_fp32"]  # fmt: skip


# ------------------------------------------------------------------ bad inputs


def test_not_applicable_reasons() -> None:
    p3 = make(f=(3, 3), pad=1)
    for solver in (FWD_1X1, DATA_1X1, FILTER_1X1):
        r = solver.is_applicable(with_dir(p3, solver.direction), EMULATOR)
        assert not r and "needs a 1x1 filter" in r.reason
    r = FWD_1X1.is_applicable(make(f=(1, 1), pad=0, stride=2), EMULATOR)
    assert not r and "needs stride 1" in r.reason
    r = FWD_1X1.is_applicable(make(f=(1, 1), pad=((0, 1), (0, 0))), EMULATOR)
    assert not r and "needs no padding" in r.reason
    r = FWD_IM2COL.is_applicable(with_dir(p3, "bwd_data"), EMULATOR)
    assert not r and "needs direction fwd" in r.reason
    p3d = ConvProblem(1, 2, (4, 4, 4), 2, (3, 3, 3), ((1, 1),) * 3, (1,) * 3, (1,) * 3, 1,
                      "NCDHW")  # fmt: skip
    r = FWD_IM2COL.is_applicable(p3d, EMULATOR)
    assert not r and "1-D or 2-D" in r.reason
    bf16 = make(dtype="bf16")
    r = FWD_IM2COL.is_applicable(bf16, for_sm(75))
    if dtypes.HAVE_BFLOAT16:  # (else: "dtype bf16 is not available here")
        assert not r and "bf16 GEMMs in cuBLAS need sm_80+, device is sm_75" in r.reason
        assert FWD_IM2COL.is_applicable(bf16, for_sm(80))
        assert FWD_IM2COL.is_applicable(bf16, EMULATOR)
    # through the public API: the forced solver's own reason
    x = np.zeros((1, 4, 6, 6), np.float32)
    w = np.zeros((4, 4, 3, 3), np.float32)
    with pytest.raises(NotSupportedError, match="conv_fwd_gemm_cublas_1x1 cannot run .*"
                                                "needs a 1x1 filter"):  # fmt: skip
        cudnnlite.conv2d(x, w, padding=1, algo="conv_fwd_gemm_cublas_1x1")
    with pytest.raises(BadParamError, match="solves conv_bwd_data, not conv_fwd"):
        cudnnlite.conv2d(x, w, padding=1, algo="conv_bwd_data_col2im_gemm_cublas")
    with pytest.raises(NotSupportedError, match="needs a 1x1 filter"):
        cudnnlite.conv2d_backward_filter(x, x, w.shape, padding=1,
                                         algo="conv_bwd_filter_gemm_cublas_1x1")  # fmt: skip


def test_bad_configs() -> None:
    p = make(n=4)
    with pytest.raises(BadParamError, match="images must be an int >= 1"):
        ChunkConfig(0)
    with pytest.raises(BadParamError):
        ChunkConfig(True)
    assert not FWD_IM2COL.is_valid(ChunkConfig(3), p, EMULATOR)  # not among the chunk sizes
    assert FWD_IM2COL.is_valid(FWD_IM2COL.config_from_dict({"images": 4}), p, EMULATOR)
    with pytest.raises(TypeError):
        FWD_IM2COL.config_from_dict({"images": 4, "tile": 64})
    with pytest.raises(NotSupportedError, match="not valid"):
        FWD_IM2COL.prepare(backend_by_name("cpu"), p, ChunkConfig(5))
    assert FWD_1X1.configs(make(n=4, f=(1, 1), pad=0), EMULATOR) == [ChunkConfig(4)]


def test_blas_gemm_views() -> None:
    b = backend_by_name("cpu")
    rng = np.random.default_rng(1)
    a = rng.standard_normal(40).astype(np.float16)
    w = rng.standard_normal(30).astype(np.float16)
    c = np.full(24, 2.0, np.float32)
    # two batches: A_i (3x4, ld 5, stride 20) times B_i^T (B_i: 3x4, ld 4, stride 12)
    blas.gemm(b, blas.Mat(a, 3, 4, 5, 0, 20), blas.Mat(w, 3, 4, 4, 6, 12),
              blas.Mat(c, 3, 3, 4, 1, 12), trans_b=True, batch=2, alpha=0.5,
              beta=-1.0)  # fmt: skip
    for i in range(2):
        ai = a[20 * i :].astype(np.float64)[: 3 * 5].reshape(3, 5)[:, :4]
        bi = w[6 + 12 * i :].astype(np.float64)[:12].reshape(3, 4)
        want = 0.5 * ai @ bi.T - 2.0
        got = np.stack([c[1 + 12 * i + 4 * r :][:3] for r in range(3)])
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-5)
    assert c[0] == 2.0 and c[4] == 2.0  # outside the views: untouched
    with pytest.raises(BadParamError, match="reaches element"):
        blas.gemm(b, blas.Mat(a, 3, 4, 5, 30), blas.Mat(w, 4, 3, 3), blas.Mat(c, 3, 3, 3))
    with pytest.raises(BadParamError, match="op\\(A\\) is 3x4"):
        blas.gemm(b, blas.Mat(a, 3, 4, 4), blas.Mat(w, 3, 3, 3), blas.Mat(c, 3, 3, 3))
    with pytest.raises(BadParamError, match="C must be"):
        blas.gemm(b, blas.Mat(a, 2, 2, 2), blas.Mat(w, 2, 2, 2),
                  blas.Mat(np.zeros(4, np.float16).astype(np.int32), 2, 2, 2))  # fmt: skip
    with pytest.raises(BadParamError, match="float64 cannot be mixed"):
        blas.gemm(b, blas.Mat(a, 2, 2, 2), blas.Mat(w, 2, 2, 2),
                  blas.Mat(np.zeros(4, np.float64), 2, 2, 2))  # fmt: skip
    with pytest.raises(BadParamError, match="float64 cannot be mixed"):
        a64 = a.astype(np.float64)
        blas.gemm(b, blas.Mat(a64, 2, 2, 2), blas.Mat(a64, 2, 2, 2),
                  blas.Mat(np.zeros(4, np.float32), 2, 2, 2))  # fmt: skip


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_blas_gemm_ieee_specials_warn_nothing(dtype: Any) -> None:
    # inf * 0 (NaN), overflow (inf) and NaN inputs: IEEE results and, as on the GPU, no
    # NumPy RuntimeWarning (the emulator's matmul ran with NumPy's default error state)
    b = backend_by_name("cpu")
    big = np.finfo(dtype).max
    a = np.array([np.inf, 1.0, big, big], dtype)  # A = [[inf, 1], [big, big]]
    w = np.array([0.0, 1.0, big, 1.0], dtype)  # B = [[0, 1], [big, 1]]
    c = np.array([1.0, 1.0, 1.0, np.nan], dtype)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        blas.gemm(b, blas.Mat(a, 2, 2, 2), blas.Mat(w, 2, 2, 2), blas.Mat(c, 2, 2, 2),
                  alpha=2.0, beta=1.0)  # fmt: skip
    assert np.isnan(c[0])  # inf * 0 + big: NaN
    assert c[1] == np.inf  # 2 (inf + 1) + 1
    assert c[2] == np.inf  # big * big overflows
    assert np.isnan(c[3])  # beta * NaN


def test_blas_gemm_float64() -> None:
    """A float64 GEMM is a DGEMM with float64 scalars: the products and sums of these values
    (integers times 2^-30, |sum| < 2^40) are exact in float64 and not in float32, so the
    result must equal the exact integer arithmetic bit for bit."""
    b = backend_by_name("cpu")
    rng = np.random.default_rng(5)
    a = rng.integers(-2**20, 2**20, 2 * 12).astype(np.float64) * 2.0**-30
    w = rng.integers(-2**20, 2**20, 2 * 20).astype(np.float64)
    c = rng.integers(-2**10, 2**10, 2 * 15).astype(np.float64)
    alpha, beta = 1 + 2.0**-40, -(1 + 2.0**-45)  # not representable in float32
    want = [alpha * (a[12 * i :][:12].reshape(3, 4) @ w[20 * i :][:20].reshape(4, 5))
            + beta * c[15 * i :][:15].reshape(3, 5) for i in range(2)]  # fmt: skip
    blas.gemm(b, blas.Mat(a, 3, 4, 4, 0, 12), blas.Mat(w, 4, 5, 5, 0, 20),
              blas.Mat(c, 3, 5, 5, 0, 15), batch=2, alpha=alpha, beta=beta)  # fmt: skip
    np.testing.assert_array_equal(c.reshape(2, 3, 5), np.stack(want))


def test_heuristics_prefer_cublas_for_large_pointwise_nhwc_on_a_gpu() -> None:
    big = ConvProblem(32, 256, (28, 28), 512, (1, 1), ((0, 0), (0, 0)), (1, 1), (1, 1), 1,
                      "NHWC", "fp16")  # fmt: skip
    for direction, name in (("fwd", "conv_fwd_gemm_cublas_1x1"),
                            ("bwd_data", "conv_bwd_data_gemm_cublas_1x1"),
                            ("bwd_filter", "conv_bwd_filter_gemm_cublas_1x1")):  # fmt: skip
        p = with_dir(big, direction)
        assert heuristics.RANKINGS[f"conv_{direction}"](p, for_sm(90))[0] == name
        assert name not in heuristics.RANKINGS[f"conv_{direction}"](p, EMULATOR)
        nchw = dataclasses.replace(p, layout="NCHW")
        assert name not in heuristics.RANKINGS[f"conv_{direction}"](nchw, for_sm(90))


# ------------------------------------------------------------------ the cuBLAS call, faked


class _FakeDeviceArray:
    """A NumPy array dressed as a CuPy one (``.data.ptr``): the fake cuBLAS reads it."""

    def __init__(self, a: np.ndarray) -> None:
        self.host, self.dtype, self.size = a, a.dtype, a.size
        self.data = type("Ptr", (), {"ptr": a.ctypes.data})()


class _FakeCublas:
    """cublasGemmStridedBatchedEx with cuBLAS's column-major semantics, in float64 over the
    arrays' memory: checks the row-major -> column-major translation of runtime/blas.py."""

    CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_GEMM_DEFAULT = 0, 1, -1
    CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_64F, CUBLAS_COMPUTE_32F_FAST_TF32 = 68, 70, 77
    TYPES = {0: np.float32, 1: np.float64, 2: np.float16}

    def __init__(self, arrays: list[np.ndarray]) -> None:
        self.arrays, self.calls = arrays, []

    def getPointerMode(self, handle: int) -> int:  # noqa: N802 - cuBLAS's name
        return 0

    def _find(self, ptr: int, dtype_code: int) -> tuple[np.ndarray, int]:
        for a in self.arrays:
            if a.ctypes.data <= ptr < a.ctypes.data + a.nbytes:
                assert a.dtype == self.TYPES[dtype_code]
                return a.reshape(-1), (ptr - a.ctypes.data) // a.itemsize
        raise AssertionError("pointer outside every array")

    def _matrix(self, ptr: int, code: int, ld: int, stride: int, i: int, rows: int,
                cols: int) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
        flat, off = self._find(ptr, code)
        idx = off + i * stride + np.arange(rows)[:, None] + np.arange(cols)[None, :] * ld
        return flat, idx  # column-major: element (r, c) at r + c * ld

    def gemmStridedBatchedEx(self, *args: int) -> None:  # noqa: N802 - cuBLAS's name
        import ctypes

        (_, ta, tb, m, n, k, alpha, a, at, lda, sa, b, bt, ldb, sb, beta, c, ct, ldc, sc, batch,
         compute, _) = args  # fmt: skip
        scalar = np.float64 if compute == self.CUBLAS_COMPUTE_64F else np.float32
        size = np.dtype(scalar).itemsize  # host scalars in the compute type
        al = np.frombuffer(ctypes.string_at(alpha, size), scalar)[0]
        be = np.frombuffer(ctypes.string_at(beta, size), scalar)[0]
        self.calls.append(compute)
        for i in range(batch):
            fa, ia = self._matrix(a, at, lda, sa, i, *((m, k) if ta == 0 else (k, m)))
            fb, ib = self._matrix(b, bt, ldb, sb, i, *((k, n) if tb == 0 else (n, k)))
            fc, ic = self._matrix(c, ct, ldc, sc, i, m, n)
            av = fa[ia].astype(np.float64)
            bv = fb[ib].astype(np.float64)
            av, bv = (av if ta == 0 else av.T), (bv if tb == 0 else bv.T)
            out = al * (av @ bv) + (be * fc[ic].astype(np.float64) if be else 0.0)
            fc[ic] = out.astype(fc.dtype)


def test_cublas_call_translates_row_major(monkeypatch: pytest.MonkeyPatch) -> None:
    import cudnnlite.runtime.cuda as cuda_mod

    rng = np.random.default_rng(3)
    a = rng.standard_normal(60).astype(np.float16)
    w = rng.standard_normal(50).astype(np.float16)
    fake = _FakeCublas([a, w])
    runtime = type("Runtime", (), {"CUDA_R_32F": 0, "CUDA_R_16F": 2})
    device = type("Device", (), {"get_cublas_handle": staticmethod(lambda: 1)})
    cupy = type("Cupy", (), {"cuda": type("Cuda", (), {"runtime": runtime, "device": device})})
    monkeypatch.setattr(blas, "_cublas", lambda: fake)
    monkeypatch.setattr(cuda_mod, "import_cupy", lambda: cupy)
    gpu = type("Backend", (), {"name": "cuda"})()
    cpu = backend_by_name("cpu")
    for trans_a in (False, True):
        for trans_b in (False, True):
            ra, ca = (4, 3) if trans_a else (3, 4)  # op(A) is 3x4
            rb, cb = (5, 4) if trans_b else (4, 5)  # op(B) is 4x5
            views = dict(batch=2, alpha=0.75, beta=0.5, trans_a=trans_a, trans_b=trans_b)
            results = []
            for backend, wrap in ((gpu, _FakeDeviceArray), (cpu, lambda v: v)):
                c = np.linspace(-1, 1, 40).astype(np.float32)
                fake.arrays = [a, w, c]
                blas.gemm(backend, blas.Mat(wrap(a), ra, ca, ca + 1, 2, 25),
                          blas.Mat(wrap(w), rb, cb, cb, 1, 21), blas.Mat(wrap(c), 3, 5, 6, 0, 20),
                          **views, tf32=True)  # fmt: skip
                results.append(c)
            # fp32 results of fp16 inputs (exact products): only the summation order differs
            np.testing.assert_allclose(results[0], results[1], rtol=1e-6, atol=1e-6)
    assert fake.calls == [77] * 4  # TF32 compute type per call
    # float64: CUDA_R_64F operands, COMPUTE_64F (TF32 ignored), double scalars on the host
    runtime.CUDA_R_64F = 1
    a64, w64 = a.astype(np.float64), w.astype(np.float64)
    results = []
    for backend, wrap in ((gpu, _FakeDeviceArray), (cpu, lambda v: v)):
        c = np.linspace(-1, 1, 40)
        fake.arrays = [a64, w64, c]
        blas.gemm(backend, blas.Mat(wrap(a64), 3, 4, 5, 2, 25),
                  blas.Mat(wrap(w64), 4, 5, 5, 1, 21), blas.Mat(wrap(c), 3, 5, 6, 0, 20),
                  batch=2, alpha=1 + 2.0**-40, beta=0.5, tf32=True)  # fmt: skip
        results.append(c)
    # a sum of 4 products: only the order differs, about 4 * 2^-53 of the summed magnitude
    np.testing.assert_allclose(results[0], results[1], rtol=1e-14, atol=1e-14)
    assert fake.calls[-1] == 70
