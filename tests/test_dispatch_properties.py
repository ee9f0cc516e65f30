"""Heuristics never choose an inapplicable solver, over random problems (hypothesis),
with the real registry."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cudnnlite.dispatch import select  # noqa: E402
from cudnnlite.errors import NotSupportedError  # noqa: E402
from cudnnlite.problems.conv import ConvProblem  # noqa: E402
from cudnnlite.runtime.caps import EMULATOR, for_sm  # noqa: E402


@st.composite
def problems(draw: st.DrawFn) -> ConvProblem:
    nd = draw(st.integers(1, 2))
    groups = draw(st.sampled_from([1, 1, 2, 4]))
    depthwise = draw(st.booleans())
    c = draw(st.integers(1, 64)) * groups
    if depthwise:
        groups = c
    k = groups * draw(st.integers(1, 4)) if depthwise else groups * draw(st.integers(1, 64))
    filt = tuple(draw(st.sampled_from([1, 2, 3, 5, 7])) for _ in range(nd))
    dils = tuple(draw(st.sampled_from([1, 1, 2])) for _ in range(nd))
    # at least the dilated filter: a non-empty output (ConvProblem refuses empty ones)
    spatial = tuple(draw(st.integers(d * (f - 1) + 1, 40)) for f, d in zip(filt, dils, strict=True))
    return ConvProblem(
        n=draw(st.integers(1, 8)),
        c=c,
        spatial=spatial,
        k=k,
        filter=filt,
        pads=tuple((draw(st.integers(0, 2)), draw(st.integers(0, 2))) for _ in range(nd)),
        strides=tuple(draw(st.integers(1, 3)) for _ in range(nd)),
        dilations=dils,
        groups=groups,
        layout=draw(st.sampled_from(["NCW", "NWC"] if nd == 1 else ["NCHW", "NHWC"])),
        dtype=draw(st.sampled_from(["fp32", "fp16", "bf16"])),
    )


@given(problems(), st.sampled_from([EMULATOR, for_sm(75), for_sm(80), for_sm(90)]))
def test_heuristic_choice_is_always_applicable(problem: ConvProblem, caps: object) -> None:
    try:
        choice = select.heuristic(problem, caps)
    except NotSupportedError:
        # only when no registered solver applies at all
        from cudnnlite.dispatch import registry

        assert not any(s.is_applicable(problem, caps) for s in registry.solvers("conv_fwd"))
        return
    assert choice.solver.is_applicable(problem, caps)
    assert select.usable(choice.solver, problem, caps)


@given(problems())
def test_some_solver_applies_to_every_2d_problem(problem: ConvProblem) -> None:
    # the direct solver is the universal fallback: 1-D and 2-D, any stride/dilation/groups
    choice = select.heuristic(problem, EMULATOR)
    assert choice.solver.is_applicable(problem, EMULATOR)
