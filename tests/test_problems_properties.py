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
    filt = tuple(draw(st.integers(1, 7)) for _ in range(nd))
    dils = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    # a non-empty output: the padded input spans the dilated filter (ConvProblem refuses
    # the rest: test_empty_outputs_are_refused)
    spatial = tuple(draw(st.integers(max(1, d * (f - 1) + 1 - a - b), 300))
                    for f, d, (a, b) in zip(filt, dils, pads, strict=True))  # fmt: skip
    return ConvProblem(
        n=draw(small),
        c=groups * draw(small),
        spatial=spatial,
        k=groups * draw(small),
        filter=filt,
        pads=pads,
        strides=tuple(draw(st.integers(1, 4)) for _ in range(nd)),
        dilations=dils,
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


@given(problems(), st.integers(1, 3))
def test_empty_outputs_are_refused(p: ConvProblem, shrink: int) -> None:
    """A padded input smaller than the dilated filter (an output of no pixels or fewer)
    is a BadParamError naming it, in the problem itself and in a key that describes it."""
    import dataclasses

    from cudnnlite.errors import BadParamError

    eff = p.dilations[0] * (p.filter[0] - 1) + 1
    before, after = p.pads[0]
    size = eff - before - after - shrink
    if size < 1:
        return  # (the padding alone spans the filter: no input size makes it empty)
    fields = dataclasses.asdict(p) | {"spatial": (size, *p.spatial[1:])}
    with pytest.raises(BadParamError, match="smaller than the dilated filter"):
        ConvProblem(**fields)
    key = p.key()
    with pytest.raises(BadParamError, match="smaller than the dilated filter"):
        ConvProblem.parse(key.replace(_spatial_part(p), _spatial_part(p, size), 1))


def _spatial_part(p: ConvProblem, first: int | None = None) -> str:
    """The key's input-size field (e.g. ``n2-c6-h9-w7``) with the first spatial size
    replaced by ``first``."""
    key = p.key().split()[1]
    if first is None:
        return key
    names = {1: "w", 2: "h", 3: "d"}[p.ndim]
    parts = key.split("-")
    return "-".join(f"{names}{first}" if part.startswith(names) and i == 2 else part
                    for i, part in enumerate(parts))  # fmt: skip
