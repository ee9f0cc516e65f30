"""Tensor-core implicit GEMM (cudnnlite/solvers/conv/wmma.py), run directly on every
backend against the float64 reference.

Tolerances (tests/conv_support.py bound: out_rtol * |ref| + acc_factor * K * 2^-24 * mag):
- fp16/bf16: products of 16-bit inputs are exact in fp32 and sums are fp32, as in any
  GEMM order: acc_factor 2;
- TF32 (fp32 with math="tf32"): each operand rounds to 11 significant bits, a relative
  error up to 2^-11 each, so up to 2 * 2^-11 * mag (+ the fp32 sums): acc_factor
  2 + 2 * 2^-11 / (K * 2^-24) = 2 + 2^14 / K.
Shapes stay tiny: the emulator holds a whole tile per lane (32x the work of a GPU).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from cudnnlite import dtypes
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.problems.suites import MOBILENETV2, RESNET50, scaled
from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.solvers.conv.common import Epilogue
from cudnnlite.solvers.conv.wmma import TILES, WmmaConfig, WmmaImplicitGemmSolver

from conv_support import assert_conv_close, operands, run_solver

SOLVER = WmmaImplicitGemmSolver()
SHORTS = [d.short for d in dtypes.FP32_COMPUTE_TYPES]  # fp64: not applicable


def conv(n, c, hw, k, f=3, pad=1, stride=1, dil=1, layout="NHWC", dtype="fp16", math="default"):
    hw = hw if isinstance(hw, tuple) else (hw, hw)
    return ConvProblem(n=n, c=c, spatial=hw, k=k, filter=(f, f), pads=((pad, pad), (pad, pad)),
                       strides=(stride, stride), dilations=(dil, dil), layout=layout, dtype=dtype,
                       math=math)  # fmt: skip


def _acc_factor(problem: ConvProblem) -> float:
    k_terms = problem.c * int(np.prod(problem.filter))
    return 2.0 + (2.0**14 / k_terms if problem.dtype == "fp32" else 0.0)


def _check(backend, problem, config=None, seed=0) -> None:
    if problem.dtype not in SHORTS:
        pytest.skip("ml_dtypes missing")
    ops = operands(problem, seed)
    before = {name: a.copy() for name, a in ops.items()}
    got = run_solver(backend, SOLVER, problem, ops, config)
    assert_conv_close(got, problem, ops, acc_factor=_acc_factor(problem), what=SOLVER.name)
    for name, a in ops.items():
        np.testing.assert_array_equal(a, before[name], err_msg=name)


_REAL = [
    ("resnet50", RESNET50, "conv1", 9),
    ("resnet50", RESNET50, "l1.conv2", 4),
    ("resnet50", RESNET50, "l2.conv2", 4),
    ("resnet50", RESNET50, "l1.conv3", 4),
    ("mobilenetv2", MOBILENETV2, "stem", 6),
    ("mobilenetv2", MOBILENETV2, "pw24-144", 4),
    ("mobilenetv2", MOBILENETV2, "pw144-32", 3),
]


@pytest.mark.parametrize("index", range(len(_REAL)), ids=[f"{s}-{n}" for s, _, n, _ in _REAL])
def test_real_layers(backend: str, index: int) -> None:
    _, table, name, hw = _REAL[index]
    layer = next(layer for layer in table if layer.name == name)
    dtype = ("fp16", "bf16")[index % 2]
    layout = ("NHWC", "NHWC", "NCHW")[index % 3]
    _check(backend, scaled(layer, hw).problem(n=1, dtype=dtype, layout=layout), seed=index)


ODD = {
    "primes": conv(2, 7, (5, 7), 11),
    "c1": conv(1, 1, 6, 17),
    "k1": conv(1, 9, 5, 1),
    "stride3": conv(1, 5, 8, 6, stride=3),
    "dilation2": conv(1, 4, 7, 5, dil=2, pad=2),
    "input_smaller_than_filter": conv(1, 3, 2, 4, f=5, pad=2),
    "even_filter": conv(1, 6, 5, 3, f=2, pad=0),
}


@pytest.mark.parametrize("layout", ["NHWC", "NCHW"])
@pytest.mark.parametrize("case", sorted(ODD))
def test_odd_shapes(backend: str, case: str, layout: str) -> None:
    _check(backend, dataclasses.replace(ODD[case], layout=layout))


def test_conv1d(backend: str) -> None:
    p = ConvProblem(n=2, c=6, spatial=(11,), k=5, filter=(3,), pads=((2, 1),), strides=(2,),
                    dilations=(1,), layout="NWC", dtype="fp16")  # fmt: skip
    _check(backend, p)


@pytest.mark.parametrize("tile", TILES, ids=lambda t: f"{t[0]}x{t[1]}")
@pytest.mark.parametrize("short", ["fp16", "bf16", "fp32"])
def test_every_tile_and_dtype(backend: str, short: str, tile) -> None:
    math = "tf32" if short == "fp32" else "default"
    p = conv(1, 20, 5, 70, dtype=short, math=math, layout="NHWC" if short != "bf16" else "NCHW")
    caps_ok = SOLVER.is_applicable(p, EMULATOR)
    assert caps_ok, caps_ok.reason
    _check(backend, p, WmmaConfig(*tile))


def test_tf32_really_rounds(backend: str) -> None:
    # With TF32 the result must differ from exact fp32 by about 2^-11 relative:
    # proof that fp32 inputs went through TF32 and not through an fp32 path.
    p = conv(1, 16, 4, 16, dtype="fp32", math="tf32")
    ops = operands(p, 3)
    got = run_solver(backend, SOLVER, p, ops, WmmaConfig(32, 32))
    from conv_support import reference

    assert np.max(np.abs(got - reference(p, ops))) > 1e-5


def test_fused_epilogue(backend: str) -> None:
    p = conv(1, 8, 5, 12, layout="NCHW")
    ops = operands(p, 5, bias=True, z=True)
    e = Epilogue(alpha=2.0, alpha2=0.5, act_mode=0, has_bias=True, has_z=True)
    got = run_solver(backend, SOLVER, p, ops, WmmaConfig(32, 32), epilogue=e)
    assert_conv_close(got, p, ops, acc_factor=2.0, epilogue=e, activation="relu")


def test_random_schedule(backend: str, emulator_only: None, monkeypatch) -> None:
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "random")
    monkeypatch.setenv("CUDNNLITE_EMU_SEED", "3")
    _check(backend, conv(1, 12, 6, 40), WmmaConfig(64, 64))


@pytest.mark.parametrize(
    "problem, caps, reason",
    [
        (conv(1, 4, 4, 4, dtype="fp32"), EMULATOR, "math='tf32'"),
        (conv(1, 4, 4, 4, dtype="fp32", math="tf32"), for_sm(75), "sm_80"),
        (conv(1, 4, 4, 4, dtype="bf16"), for_sm(75), "sm_80"),
        (conv(1, 4, 4, 4, dtype="fp16"), for_sm(60), "sm_70"),
        (dataclasses.replace(conv(1, 4, 4, 4), groups=2), EMULATOR, "groups == 1"),
        (dataclasses.replace(conv(1, 4, 4, 4), direction="bwd_data"), EMULATOR, "forward"),
        (conv(1, 4, 4, 4, dtype="fp64"), EMULATOR, "tensor cores: no fp64 MMA in this solver"),
    ],
)
def test_not_applicable_with_reason(problem, caps, reason: str) -> None:
    result = SOLVER.is_applicable(problem, caps)
    assert not result and reason in result.reason, result


def test_configs() -> None:
    p = conv(1, 4, 4, 4)
    assert [c.label() for c in SOLVER.configs(p, EMULATOR)] == ["32x32", "64x64", "128x64"]
    assert SOLVER.default_config(p, EMULATOR) in SOLVER.configs(p, EMULATOR)
    with pytest.raises(ValueError):
        WmmaConfig(48, 48)
    assert SOLVER.config_from_dict({"block_m": 64, "block_n": 64}) == WmmaConfig(64, 64)
