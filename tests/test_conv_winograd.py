"""Winograd solvers (cudnnlite/solvers/conv/winograd.py), run directly on every backend
against the float64 reference.

Tolerance. Winograd's transforms mix the outputs of one tile: an output whose own
receptive field is small (or all padding) still carries rounding from its tile's
neighbours, so the error scales with the LOCAL magnitude L = max of conv(|x|, |w|) over
the (2m-1)^2 neighbourhood (covering any tile that holds the output), not with its own:
    |y - ref| <= out_rtol * |ref| + (2 * C*9 + G) * 2^-24 * L
2 * C*9: fp32 accumulation as for any GEMM order; G: the transforms' own growth.
Measured max of |y - ref| / (2^-24 * L) over these shapes (emulator, fp32, 2 seeds):
F(2x2) and fused 6.4, F(4x4) 75 (on real layers with C*9 > 500 that is 0.002 and 0.048
of C*9). G = 32 (F2) and 256 (F4): 3.4-5x the measured growth, so a GPU's different
FMA contraction passes while any wrong transform entry (an error of order L itself,
2^24 times larger) fails.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from numpy.lib.stride_tricks import sliding_window_view

from cudnnlite import dtypes
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.problems.suites import RESNET50, VGG16, scaled
from cudnnlite.runtime.caps import EMULATOR
from cudnnlite.solvers.conv.common import Epilogue
from cudnnlite.solvers.conv.winograd import (
    WinogradF2x2Solver,
    WinogradF4x4Solver,
    WinogradFusedSolver,
    workspace_bytes,
)

from conv_support import OUT_RTOL, any_caps, magnitude, operands, reference, run_solver

SOLVERS = (WinogradF2x2Solver(), WinogradF4x4Solver(), WinogradFusedSolver())
GROWTH = {  # G above, per solver, and its output tile m
    "conv_fwd_winograd_f2x2_3x3": (32.0, 2),
    "conv_fwd_winograd_f4x4_3x3": (256.0, 4),
    "conv_fwd_winograd_fused_f2x2_3x3": (32.0, 2),
}
SHORTS = [d.short for d in dtypes.FP32_COMPUTE_TYPES]  # fp64: not applicable


def conv3x3(n, c, h, w, k, pads=((1, 1), (1, 1)), layout="NCHW", dtype="fp32") -> ConvProblem:
    return ConvProblem(n=n, c=c, spatial=(h, w), k=k, filter=(3, 3), pads=pads, strides=(1, 1),
                       dilations=(1, 1), layout=layout, dtype=dtype)  # fmt: skip


def _local_max(mag: np.ndarray, m: int, channels_last: bool) -> np.ndarray:
    if channels_last:
        mag = np.moveaxis(mag, -1, 1)
    r = m - 1
    padded = np.pad(mag, ((0, 0), (0, 0), (r, r), (r, r)))
    out = sliding_window_view(padded, (2 * r + 1, 2 * r + 1), axis=(2, 3)).max(axis=(-1, -2))
    return np.moveaxis(out, 1, -1) if channels_last else out


def assert_wino_close(got, problem, ops, solver, epilogue=None, activation=None) -> None:
    growth, m = GROWTH[solver.name]
    ref = reference(problem, ops, epilogue, activation)
    local = _local_max(magnitude(problem, ops), m, problem.channels_last)
    alpha = abs(epilogue.alpha) if epilogue else 1.0
    k_terms = problem.c * 9
    bound = (OUT_RTOL[problem.dtype] * np.abs(ref)
             + (2 * k_terms + growth) * 2.0**-24 * alpha * local + 1e-6)  # fmt: skip
    if problem.dtype != "fp32":
        bound = bound + 2.0**-14  # smallest normal half: results near 0 flush
    err = np.abs(got.astype(np.float64) - ref)
    bad = ~(err <= bound)  # NaN counts as bad
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(
            f"{solver.name} {problem.key()}: {bad.sum()} of {bad.size} outputs off; first at "
            f"{i}: got {got[i]}, ref {ref[i]}, bound {bound[i]:.3g}"
        )


def _check(backend, solver, problem, seed=0, **kw) -> None:
    ops = operands(problem, seed, **kw)
    before = {name: a.copy() for name, a in ops.items()}
    got = run_solver(backend, solver, problem, ops)
    assert_wino_close(got, problem, ops, solver)
    for name, a in ops.items():  # inputs untouched
        np.testing.assert_array_equal(a, before[name], err_msg=name)


# Every stride-1 3x3 layer of ResNet-50 and VGG-16, channels real, spatial scaled; one
# solver per layer in rotation (all three see big and small channel counts) to keep the
# emulator's time in budget.
_REAL = [layer for layer in RESNET50 if layer.f == 3 and layer.stride == 1] + list(VGG16)


@pytest.mark.parametrize("index", range(len(_REAL)), ids=[f"{layer.name}" for layer in _REAL])
def test_real_layers(backend: str, index: int) -> None:
    layer = _REAL[index]
    hw = 8 if layer.c * layer.k <= 128 * 128 else 5
    layout = ("NCHW", "NHWC")[index % 2]
    problem = scaled(layer, hw).problem(n=2 if hw == 8 else 1, layout=layout)
    _check(backend, SOLVERS[index % 3], problem, seed=index)


ODD = {
    "primes": conv3x3(2, 7, 13, 11, 5),
    "c1": conv3x3(1, 1, 9, 10, 4),
    "k1": conv3x3(1, 6, 7, 7, 1),
    "input_smaller_than_filter": conv3x3(1, 3, 1, 2, 3),
    "tiny_big_padding": conv3x3(1, 2, 2, 3, 3, pads=((3, 3), (4, 2))),
    "no_padding": conv3x3(3, 5, 6, 9, 7, pads=((0, 0), (0, 0))),
    "asymmetric_padding": conv3x3(1, 4, 8, 5, 6, pads=((0, 1), (2, 1))),
    "k_past_one_block": conv3x3(1, 3, 4, 4, 70),
}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", sorted(ODD))
@pytest.mark.parametrize("solver", SOLVERS, ids=lambda s: s.name)
def test_odd_shapes(backend: str, solver, case: str, layout: str) -> None:
    problem = dataclasses.replace(ODD[case], layout=layout)
    _check(backend, solver, problem)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("short", [s for s in SHORTS if s != "fp32"])
@pytest.mark.parametrize("solver", SOLVERS, ids=lambda s: s.name)
def test_16bit_storage(backend: str, solver, short: str, layout: str) -> None:
    # fp32 transforms and sums; the output's storage rounding dominates (out_rtol).
    _check(backend, solver, conv3x3(2, 24, 9, 7, 20, layout=layout, dtype=short))


@pytest.mark.parametrize("solver", SOLVERS, ids=lambda s: s.name)
def test_fused_epilogue(backend: str, solver) -> None:
    problem = conv3x3(1, 8, 7, 6, 9, layout="NHWC")
    ops = operands(problem, 5, bias=True, z=True)
    e = Epilogue(alpha=0.5, alpha2=-1.5, act_mode=1, coef=0.1, has_bias=True, has_z=True)
    got = run_solver(backend, solver, problem, ops, epilogue=e)
    assert_wino_close(got, problem, ops, solver, epilogue=e, activation="leaky_relu")


@pytest.mark.parametrize("solver", SOLVERS, ids=lambda s: s.name)
def test_random_schedule(
    backend: str, emulator_only: None, monkeypatch: pytest.MonkeyPatch, solver
) -> None:
    # The GEMM and the fused kernel share shared-memory tiles across threads.
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "random")
    monkeypatch.setenv("CUDNNLITE_EMU_SEED", "7")
    _check(backend, solver, conv3x3(1, 11, 6, 10, 35, layout="NCHW"))


def test_workspace_size_is_exact() -> None:
    p = conv3x3(2, 5, 7, 9, 3)  # 7x9 outputs: F2 tiles 4x5, F4 tiles 2x3
    t2, t4 = 2 * 4 * 5, 2 * 2 * 3
    assert SOLVERS[0].workspace_size(p, None) == 4 * 16 * (5 * 3 + 5 * t2 + 3 * t2)
    assert SOLVERS[1].workspace_size(p, None) == 4 * 36 * (5 * 3 + 5 * t4 + 3 * t4)
    assert SOLVERS[2].workspace_size(p, None) == 0
    assert workspace_bytes(p, 2) == SOLVERS[0].workspace_size(p, None)


def _variant(**changes) -> ConvProblem:
    base = dict(n=1, c=4, spatial=(8, 8), k=4, filter=(3, 3), pads=((1, 1), (1, 1)),
                strides=(1, 1), dilations=(1, 1))  # fmt: skip
    base.update(changes)
    return ConvProblem(**base)


@pytest.mark.parametrize(
    "problem, reason",
    [
        (_variant(filter=(5, 5)), "3x3 filter"),
        (_variant(filter=(3, 1)), "3x3 filter"),
        (_variant(strides=(2, 2)), "stride 1"),
        (_variant(dilations=(1, 2)), "dilation 1"),
        (_variant(groups=2), "groups == 1"),
        (_variant(direction="bwd_data"), "forward"),
        (_variant(dtype="fp64"), "Winograd's transforms lose float64 accuracy"),
        (_variant(spatial=(8,), filter=(3,), pads=((1, 1),), strides=(1,), dilations=(1,),
                  layout="NCW"),
         "2-D"),
    ],
)  # fmt: skip
def test_not_applicable_with_reason(problem: ConvProblem, reason: str) -> None:
    for solver in SOLVERS:
        result = solver.is_applicable(problem, EMULATOR)
        assert not result and reason in result.reason, (solver.name, result)


def test_applicable_everywhere(backend: str) -> None:
    for dt in ("fp32", "fp16", "bf16") if dtypes.HAVE_BFLOAT16 else ("fp32", "fp16"):
        for layout in ("NCHW", "NHWC"):
            p = conv3x3(1, 3, 5, 5, 3, layout=layout, dtype=dt)
            assert all(s.is_applicable(p, any_caps(backend)) for s in SOLVERS)


def test_a_nan_reaches_its_whole_tile_only() -> None:
    """README: a NaN in dy reaches every output of the Winograd tiles it enters (F(4x4): a
    5x5 patch of dx here, inside the two tiles' rows and columns), where a GEMM solver keeps
    the filter's exact 3x3 reach."""
    import cudnnlite as cl

    rng = np.random.default_rng(0)
    w = rng.standard_normal((4, 3, 3, 3)).astype(np.float16)
    dy = rng.standard_normal((1, 4, 8, 8)).astype(np.float16)
    dy[0, 3, 4, 4] = np.nan

    def reach(algo: str) -> np.ndarray:
        dx = cl.conv2d_backward_data(dy, w, (1, 3, 8, 8), 1, 1, algo=algo)
        return np.isnan(dx[0].astype(np.float32)).any(0)

    exact = np.zeros((8, 8), bool)
    exact[3:6, 3:6] = True
    assert (reach("conv_bwd_data_implicit_gemm") == exact).all()
    wide = reach("conv_bwd_data_winograd_f4x4_3x3")
    assert (wide >= exact).all() and wide.sum() == 25
    assert not wide[:2].any() and not wide[:, :2].any()  # never past the tiles it enters
