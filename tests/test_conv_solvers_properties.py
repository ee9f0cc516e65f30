"""Property tests of the direct, depthwise, implicit-GEMM and 1x1-GEMM solvers: on random
small problems, every one of them that declares itself applicable matches the float64
reference (tolerance of tests/conv_support.py, acc_factor 2: all of them sum each output
sequentially in fp32), and the direct solver is applicable to every 1-D/2-D problem."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")

from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cudnnlite import dtypes  # noqa: E402
from cudnnlite.problems.conv import ConvProblem  # noqa: E402
from cudnnlite.runtime.caps import EMULATOR  # noqa: E402
from cudnnlite.solvers.conv.direct import DepthwiseSolver, DirectSolver  # noqa: E402
from cudnnlite.solvers.conv.gemm_1x1 import Gemm1x1Solver  # noqa: E402
from cudnnlite.solvers.conv.implicit_gemm import (  # noqa: E402
    ImplicitGemmSolver,
    ImplicitPrecompGemmSolver,
)

from conv_support import check  # noqa: E402

SOLVERS = (
    DirectSolver(),
    DepthwiseSolver(),
    ImplicitGemmSolver(),
    ImplicitPrecompGemmSolver(),
    Gemm1x1Solver(),
)
DTYPES = [d.short for d in dtypes.FLOAT_TYPES]
# The backend fixture only names a backend: nothing to reset between examples.
HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


@st.composite
def conv_problems(draw: st.DrawFn, kind: str = "any") -> ConvProblem:
    """A small valid problem; kind "depthwise" or "pointwise" steers towards those solvers."""
    nd = draw(st.sampled_from((1, 2, 2)))
    groups = draw(st.sampled_from((1, 1, 2, 3)))
    cpg = draw(st.integers(1, 6))
    kpg = draw(st.integers(1, 6))
    if kind == "depthwise":
        groups, cpg, kpg = draw(st.integers(2, 9)), 1, draw(st.integers(1, 3))
    filt = tuple(draw(st.integers(1, 4)) for _ in range(nd))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    dils = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    pads = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(nd))
    if kind == "pointwise":
        filt, strides, pads = (1,) * nd, (1,) * nd, ((0, 0),) * nd
    # input at least as large as the dilated filter once padded: a non-empty output
    spatial = tuple(
        max(draw(st.integers(1, 9)), (f - 1) * d + 1 - b - a)
        for f, d, (b, a) in zip(filt, dils, pads, strict=True)
    )
    layout = draw(st.sampled_from(("NCW", "NWC") if nd == 1 else ("NCHW", "NHWC")))
    return ConvProblem(
        n=draw(st.integers(1, 2)), c=cpg * groups, spatial=spatial, k=kpg * groups,
        filter=filt, pads=pads, strides=strides, dilations=dils, groups=groups,
        layout=layout, dtype=draw(st.sampled_from(DTYPES)),
    )  # fmt: skip


def _check_all(backend: str, problem: ConvProblem, seed: int) -> int:
    applied = 0
    for solver in SOLVERS:
        if solver.is_applicable(problem, EMULATOR):
            check(backend, solver, problem, seed=seed)
            applied += 1
    return applied


@HYPO
@given(problem=conv_problems(), seed=st.integers(0, 2**16))
def test_every_applicable_solver_matches_reference(backend: str, problem, seed: int) -> None:
    assert DirectSolver().is_applicable(problem, EMULATOR)
    assert ImplicitGemmSolver().is_applicable(problem, EMULATOR)
    _check_all(backend, problem, seed)


@HYPO
@given(problem=conv_problems("depthwise"), seed=st.integers(0, 2**16))
def test_depthwise_problems(backend: str, problem, seed: int) -> None:
    assert DepthwiseSolver().is_applicable(problem, EMULATOR)
    _check_all(backend, problem, seed)


@HYPO
@given(problem=conv_problems("pointwise"), seed=st.integers(0, 2**16))
def test_pointwise_problems(backend: str, problem, seed: int) -> None:
    assert Gemm1x1Solver().is_applicable(problem, EMULATOR)
    _check_all(backend, problem, seed)
