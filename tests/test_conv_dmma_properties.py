"""Property tests of the fp64 tensor-core (DMMA) convolution solvers: on random small
float64 problems of 1-3 dims (groups 1, any padding, stride, dilation, both layouts), the
forward, backward filter and phased backward data solvers apply and match the float64
reference, and the rotated backward data does wherever it declares itself applicable.
Tolerances: tests/conv_support.py's and tests/conv_backward_support.py's fp64 bounds (2 *
2^-53 per summed term, any summation order)."""

from __future__ import annotations

import dataclasses

import pytest

pytest.importorskip("hypothesis")

from conv_backward_support import check_data, check_filter  # noqa: E402
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cudnnlite.dispatch import registry  # noqa: E402
from cudnnlite.problems.conv import ConvProblem  # noqa: E402
from cudnnlite.runtime.caps import EMULATOR  # noqa: E402

from conv_support import check  # noqa: E402

FORWARD = registry.get("conv_fwd_dmma_implicit_gemm")
FILTER = registry.get("conv_bwd_filter_dmma_implicit_gemm")
DATA = registry.get("conv_bwd_data_dmma_implicit_gemm")
PHASED = registry.get("conv_bwd_data_dmma_implicit_gemm_phased")

HYPO = settings(max_examples=15, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip


@st.composite
def fp64_problems(draw: st.DrawFn) -> ConvProblem:
    """A small float64 problem of 1-3 dims, groups 1, any padding, stride and dilation."""
    nd = draw(st.sampled_from((1, 2, 2, 3)))
    filt = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    dils = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    pads = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(nd))
    spatial = tuple(
        max(draw(st.integers(1, 7 if nd < 3 else 4)), (f - 1) * d + 1 - b - a)
        for f, d, (b, a) in zip(filt, dils, pads, strict=True)
    )
    layouts = {1: ("NCW", "NWC"), 2: ("NCHW", "NHWC"), 3: ("NCDHW", "NDHWC")}[nd]
    return ConvProblem(
        n=draw(st.integers(1, 2)), c=draw(st.integers(1, 9)), spatial=spatial,
        k=draw(st.integers(1, 9)), filter=filt, pads=pads, strides=strides, dilations=dils,
        groups=1, layout=draw(st.sampled_from(layouts)), dtype="fp64",
    )  # fmt: skip


@HYPO
@given(problem=fp64_problems(), seed=st.integers(0, 2**16))
def test_dmma_solvers_match_reference(backend: str, problem, seed: int) -> None:
    """Forward, backward filter and the phased backward data apply to every such problem;
    the rotated backward data wherever it says it does (stride 1, padding within reach)."""
    assert FORWARD.is_applicable(problem, EMULATOR)
    check(backend, FORWARD, problem, seed=seed)
    bwf = dataclasses.replace(problem, direction="bwd_filter")
    assert FILTER.is_applicable(bwf, EMULATOR)
    check_filter(backend, FILTER, bwf, seed=seed)
    bwd = dataclasses.replace(problem, direction="bwd_data")
    assert PHASED.is_applicable(bwd, EMULATOR)
    check_data(backend, PHASED, bwd, seed=seed, bias=seed % 2 == 0)
    if DATA.is_applicable(bwd, EMULATOR):
        check_data(backend, DATA, bwd, seed=seed)
