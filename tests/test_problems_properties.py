"""Problem keys round-trip through parse() for any valid problem (hypothesis)."""

from __future__ import annotations

import pytest

pytest.importorskip("hypothesis")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cudnnlite.problems.conv import LAYOUTS, ConvProblem  # noqa: E402


@st.composite
def problems(draw: st.DrawFn) -> ConvProblem:
    nd = draw(st.integers(1, 3))
    groups = draw(st.sampled_from([1, 2, 3]))
    small = st.integers(1, 64)
    pads = tuple((draw(st.integers(0, 5)), draw(st.integers(0, 5))) for _ in range(nd))
    dtype = draw(st.sampled_from(["fp32", "fp16", "bf16", "fp64"]))
    return ConvProblem(
        n=draw(small),
        c=groups * draw(small),
        spatial=tuple(draw(st.integers(1, 300)) for _ in range(nd)),
        k=groups * draw(small),
        filter=tuple(draw(st.integers(1, 7)) for _ in range(nd)),
        pads=pads,
        strides=tuple(draw(st.integers(1, 4)) for _ in range(nd)),
        dilations=tuple(draw(st.integers(1, 3)) for _ in range(nd)),
        groups=groups,
        layout=draw(st.sampled_from(LAYOUTS[nd])),
        dtype=dtype,
        direction=draw(st.sampled_from(["fwd", "bwd_data", "bwd_filter"])),
        math=draw(st.sampled_from(["default", "tf32"])) if dtype == "fp32" else "default",
    )


@given(problems())
def test_key_round_trip(p: ConvProblem) -> None:
    assert ConvProblem.parse(p.key()) == p
    assert ConvProblem.parse(p.key()).key() == p.key()
