"""The direct solvers, conv_fwd_direct and conv_fwd_direct_depthwise, run directly (no
dispatcher) against the float64 reference, on every backend.

Tolerances come from tests/conv_support.py (one rounding of the output type plus the
fp32 accumulation bound acc_factor * C/g*R*S * 2^-24 * conv(|x|, |w|)); the direct
kernels sum in a fixed sequential order, for which acc_factor = 2 is ample (the
accumulated rounding of a sequential sum is at most n * 2^-24 relative to the sum of
magnitudes, here counted twice for the product's own rounding inside fmaf: none, and
the conversion of fp16/bf16 inputs to float: exact). float64 accumulates in double:
the same bound with 2 * 2^-53 per term (conv_support.py).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cudnnlite import dtypes
from cudnnlite.errors import NotSupportedError
from cudnnlite.ops.activation import ACTIVATION_MODES
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.problems.suites import problems
from cudnnlite.runtime.caps import EMULATOR
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.solvers.conv.common import ConvTensors, Epilogue
from cudnnlite.solvers.conv.direct import DepthwiseSolver, DirectSolver
from cudnnlite.testing import to_backend, to_numpy

from conv_support import assert_conv_close, check, operands, run_solver

DIRECT = DirectSolver()
DW = DepthwiseSolver()
DTYPES = [d.short for d in dtypes.FLOAT_TYPES]  # fp32, fp16, bf16, fp64
HALF_DTYPES = [d.short for d in dtypes.FP32_COMPUTE_TYPES if d.short != "fp32"]


def make(
    n: int = 1, c: int = 4, hw: tuple = (6, 6), k: int = 4, f: tuple = (3, 3), pad=1,
    stride=1, dil=1, groups: int = 1, layout: str = "NCHW", dtype: str = "fp32",
) -> ConvProblem:  # fmt: skip
    """A problem with int-or-tuple arguments; pad may be ((top, bottom), (left, right))."""
    nd = len(hw)
    pads = pad if isinstance(pad, tuple) else ((pad, pad),) * nd
    strides = stride if isinstance(stride, tuple) else (stride,) * nd
    dils = dil if isinstance(dil, tuple) else (dil,) * nd
    if nd == 1:
        layout = {"NCHW": "NCW", "NHWC": "NWC"}.get(layout, layout)
    return ConvProblem(n, c, tuple(hw), k, tuple(f), pads, strides, dils, groups, layout, dtype)


# ------------------------------------------------------------------ real networks


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("suite", ["resnet50", "vgg16", "mobilenetv2"])
def test_direct_real_networks_fp32(backend: str, suite: str, layout: str) -> None:
    for problem in problems(suite, n=2, layout=layout, hw=5):
        check(backend, DIRECT, problem)


# A representative subset in fp16/bf16: the stem, a strided 3x3, a strided 1x1, a
# depthwise and a pointwise layer.
HALF_LAYERS = {"resnet50": ("conv1", "l2.conv2", "l3.down"), "mobilenetv2": ("dw96.s2", "pw16-96")}


def _layers(suite: str, names: tuple, **kw) -> list[ConvProblem]:
    from cudnnlite.problems.suites import SUITES, scaled

    table = {layer.name: layer for layer in SUITES[suite]}
    return [scaled(table[name], kw.pop("hw", 5)).problem(**kw) for name in names]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_direct_real_networks_half(backend: str, dtype: str, layout: str) -> None:
    for suite, names in HALF_LAYERS.items():
        for problem in _layers(suite, names, n=1, dtype=dtype, layout=layout):
            check(backend, DIRECT, problem)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_depthwise_real_networks(backend: str, dtype: str, layout: str) -> None:
    dw_layers = [p for p in problems("mobilenetv2", n=2, dtype=dtype, layout=layout, hw=9)
                 if p.depthwise]  # fmt: skip
    assert len(dw_layers) == 10
    if dtype != "fp32":
        dw_layers = dw_layers[::3]
    for problem in dw_layers:
        assert DW.is_applicable(problem, EMULATOR)
        check(backend, DW, problem)


# ------------------------------------------------------------------ odd shapes

ODD = {
    "primes": dict(n=1, c=5, hw=(7, 11), k=3, f=(3, 3), pad=1),
    "c1": dict(c=1, k=6, hw=(5, 5)),
    "k1": dict(c=3, k=1, hw=(5, 6)),
    "n2_odd_filter": dict(n=2, c=3, k=5, hw=(6, 9), f=(2, 5), pad=((0, 1), (2, 2))),
    "smaller_than_filter": dict(c=2, k=3, hw=(2, 3), f=(5, 5), pad=2),
    "stride3": dict(c=3, k=4, hw=(10, 11), stride=3, pad=0),
    "stride_hw": dict(c=3, k=4, hw=(9, 8), stride=(2, 3)),
    "dilation2": dict(c=3, k=2, hw=(9, 9), dil=2, pad=2),
    "dilation3": dict(c=2, k=3, hw=(11, 10), dil=3, pad=3),
    "groups2": dict(c=6, k=4, groups=2, hw=(5, 7)),
    "groups4": dict(c=8, k=12, groups=4, hw=(6, 5)),
    "asym_pad": dict(c=3, k=3, hw=(5, 6), pad=((0, 2), (3, 1))),
    "valid": dict(c=4, k=4, hw=(7, 7), pad=0),
    "1d": dict(n=2, c=3, k=4, hw=(17,), f=(5,), pad=2, stride=2),
    "1d_dilated": dict(c=2, k=2, hw=(13,), f=(3,), pad=((3, 0),), dil=3),
}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", sorted(ODD))
def test_direct_odd_shapes(backend: str, case: str, layout: str) -> None:
    check(backend, DIRECT, make(layout=layout, **ODD[case]))


@pytest.mark.parametrize("dtype", [*HALF_DTYPES, "fp64"])
def test_direct_odd_shapes_half_and_fp64(backend: str, dtype: str) -> None:
    for case in ("primes", "groups4", "dilation3", "1d"):
        for layout in ("NCHW", "NHWC"):
            check(backend, DIRECT, make(layout=layout, dtype=dtype, **ODD[case]))


DW_ODD = {
    "mult2": dict(c=3, k=6, hw=(7, 9)),
    "mult3_stride2": dict(c=5, k=15, hw=(9, 8), stride=2),
    "stride3": dict(c=4, k=4, hw=(13, 11), stride=3, pad=0),
    "dilation2": dict(c=6, k=6, hw=(9, 10), dil=2, pad=2),
    "dilation3_5x5": dict(c=3, k=3, hw=(12, 13), f=(5, 5), dil=3, pad=6),
    "asym_pad_even_filter": dict(c=4, k=4, hw=(6, 7), f=(2, 4), pad=((0, 1), (1, 2))),
    "smaller_than_filter": dict(c=2, k=2, hw=(2, 2), f=(3, 3), pad=2),
    "many_tiles": dict(n=2, c=33, k=33, hw=(37, 35)),  # large NCHW tile, 2 NHWC channel tiles
    "1d": dict(c=7, k=14, hw=(23,), f=(3,), pad=1),
    "large_halo": dict(c=5, k=5, hw=(31, 29), f=(4, 4), stride=3, dil=3, pad=4),  # NHWC 2x4 tile
}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", sorted(DW_ODD))
def test_depthwise_odd_shapes(backend: str, case: str, layout: str) -> None:
    spec = DW_ODD[case]
    check(backend, DW, make(layout=layout, groups=spec["c"], **spec))


def test_depthwise_odd_shapes_fp64(backend: str) -> None:
    # float64 stages its tiles in double: twice the shared memory, so large_halo's NHWC
    # tile shrinks further (1x2), dilation3_5x5's NHWC one no longer fits (the direct
    # solver runs it), and many_tiles still spans two channel tiles.
    wide = make(layout="NHWC", groups=3, dtype="fp64", **DW_ODD["dilation3_5x5"])
    r = DW.is_applicable(wide, EMULATOR)
    assert not r and "shared memory" in r.reason
    check(backend, DIRECT, wide)
    for case in ("mult3_stride2", "many_tiles", "1d", "large_halo"):
        spec = DW_ODD[case]
        for layout in ("NCHW", "NHWC"):
            problem = make(layout=layout, groups=spec["c"], dtype="fp64", **spec)
            assert DW.is_applicable(problem, EMULATOR)
            check(backend, DW, problem)
    halo = make(c=5, k=5, groups=5, hw=(31, 29), f=(4, 4), stride=3, dil=3, layout="NHWC",
                dtype="fp64")  # fmt: skip
    assert DW.prepare(backend_by_name(backend), halo, None).kernel_names == [
        "depthwise_1x2_nhwc_fp64"
    ]


# ------------------------------------------------------------------ fused epilogue

EPILOGUES = [
    ("bias", Epilogue(has_bias=True), None),
    ("z", Epilogue(alpha2=0.75, has_z=True), None),
    ("bias_z_relu", Epilogue(alpha2=1.0, has_bias=True, has_z=True, act_mode=0), "relu"),
    ("alpha_gelu", Epilogue(alpha=0.5, has_bias=True, act_mode=7), "gelu"),
    ("swish", Epilogue(alpha=1.5, alpha2=-0.5, has_z=True, act_mode=6, coef=1.0), "swish"),
]


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("solver", [DIRECT, DW], ids=lambda s: s.name)
@pytest.mark.parametrize("name,epilogue,act", EPILOGUES, ids=[e[0] for e in EPILOGUES])
def test_fused_epilogue(backend: str, solver, name: str, epilogue: Epilogue, act, layout) -> None:
    assert act is None or ACTIVATION_MODES[epilogue.act_mode] == act
    for dtype in ("fp32", HALF_DTYPES[-1], "fp64"):
        problem = make(c=6, k=12, groups=6, hw=(5, 7), layout=layout, dtype=dtype)
        ops = operands(problem, seed=3, bias=epilogue.has_bias, z=epilogue.has_z)
        got = run_solver(backend, solver, problem, ops, epilogue=epilogue)
        assert_conv_close(got, problem, ops, epilogue=epilogue, activation=act, what=name)


# ------------------------------------------------------------------ behaviour


def test_deterministic_and_inputs_untouched(backend: str) -> None:
    for solver, problem in ((DIRECT, make(c=6, k=5, groups=1, hw=(9, 8))),
                            (DW, make(c=6, k=6, groups=6, hw=(9, 8), layout="NHWC"))):  # fmt: skip
        ops = operands(problem, seed=1, bias=True, z=True)
        kept = {name: a.copy() for name, a in ops.items()}
        first = run_solver(backend, solver, problem, ops)
        second = run_solver(backend, solver, problem, ops)
        np.testing.assert_array_equal(first, second)
        for name, a in ops.items():
            np.testing.assert_array_equal(a, kept[name], err_msg=name)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("ndim", [2, 3])
def test_64_bit_index_kernel(backend: str, layout: str, ndim: int, monkeypatch) -> None:
    # From 2^31 outputs the direct kernel decodes its index in 64 bits (a kernel of its
    # own, "_i64"); with the limit lowered, the same data through both gives the same bits.
    import cudnnlite.solvers.conv.direct as D

    hw = (5, 6) if ndim == 2 else (3, 4, 5)
    lay = layout if ndim == 2 else {"NCHW": "NCDHW", "NHWC": "NDHWC"}[layout]
    p = make(n=2, c=3, hw=hw, k=5, f=(3,) * ndim, stride=2, layout=lay, dtype="fp64")
    ops = operands(p, bias=True)
    e = Epilogue(act_mode=ACTIVATION_MODES.index("elu"), coef=1.0, has_bias=True)
    tag = "_" + (lay.lower() if ndim == 3 else layout.lower())
    assert DIRECT.prepare(backend_by_name(backend), p, None).kernel_names == [
        f"conv_direct{tag}_fp64"]  # fmt: skip
    narrow = run_solver(backend, DIRECT, p, ops, epilogue=e)
    monkeypatch.setattr(D, "_WIDE_PAST", 0)
    assert DIRECT.prepare(backend_by_name(backend), p, None).kernel_names == [
        f"conv_direct{tag}_i64_fp64"]  # fmt: skip
    np.testing.assert_array_equal(run_solver(backend, DIRECT, p, ops, epilogue=e), narrow)
    assert_conv_close(narrow, p, ops, epilogue=e, activation="elu")


def test_runner_launches_only_and_names_its_kernel(backend: str) -> None:
    b = backend_by_name(backend)
    problem = make(c=4, k=4, groups=4, hw=(20, 20), layout="NCHW")
    runner = DW.prepare(b, problem, DW.default_config(problem, EMULATOR))
    assert runner.kernel_names == ["depthwise_32x16_nchw_fp32"]
    assert DIRECT.prepare(b, problem, DIRECT.default_config(problem, EMULATOR)).kernel_names == [
        "conv_direct_nchw_fp32"
    ]
    halo = make(c=5, k=5, groups=5, hw=(31, 29), f=(4, 4), stride=3, dil=3, layout="NHWC")
    assert DW.prepare(b, halo, None).kernel_names == ["depthwise_2x4_nhwc_fp32"]
    ops = operands(problem)
    x, w = to_backend(ops["x"], backend), to_backend(ops["w"], backend)
    y = b.xp.zeros(problem.y_shape(), np.float32)
    runner(ConvTensors(x=x, w=w, y=y), Epilogue(), None)
    assert_conv_close(to_numpy(y), problem, ops)


def test_applicability_reasons() -> None:
    conv3d = ConvProblem(1, 2, (4, 4, 4), 2, (3, 3, 3), ((1, 1),) * 3, (1,) * 3, (1,) * 3,
                         layout="NCDHW")  # fmt: skip
    for solver in (DIRECT, DW):
        r = solver.is_applicable(conv3d, EMULATOR)  # 3-D runs: tests/test_conv3d.py
        assert r if solver is DIRECT else not r and "depthwise" in r.reason
        r = solver.is_applicable(dataclasses.replace(make(), direction="bwd_data"), EMULATOR)
        assert not r and "direction fwd" in r.reason
    assert DIRECT.is_applicable(make(groups=2), EMULATOR)
    r = DW.is_applicable(make(groups=2), EMULATOR)
    assert not r and "depthwise" in r.reason and "groups=2" in r.reason
    huge = make(c=4, k=4, groups=4, hw=(40, 40), f=(7, 7), dil=6, pad=18, layout="NHWC")
    r = DW.is_applicable(huge, EMULATOR)
    assert not r and "shared memory" in r.reason
    assert DIRECT.is_applicable(huge, EMULATOR)


def test_prepare_refuses_what_is_not_applicable() -> None:
    b = backend_by_name("cpu")
    with pytest.raises(NotSupportedError, match="conv_fwd_direct_depthwise: needs a depthwise"):
        DW.prepare(b, make(groups=1), DW.default_config(make(), EMULATOR))
    backward = dataclasses.replace(make(), direction="bwd_data")
    with pytest.raises(NotSupportedError, match="conv_fwd_direct: needs direction fwd"):
        DIRECT.prepare(b, backward, DIRECT.default_config(make(), EMULATOR))
