"""Forcing any solver (``algo=`` a solver name) on a problem it cannot run is a
NotSupportedError with its reason, never another exception from deep inside the solver:
every registered solver against problems at the edges of what the solvers take (head
dims past the tensor-core tiles, d != dv, odd channels, groups, 3-D, every dtype, RNN
projections). Selection only: nothing is compiled or launched."""

from __future__ import annotations

import itertools

import pytest

from cudnnlite.dispatch import registry, select
from cudnnlite.errors import NotSupportedError
from cudnnlite.problems.attention import AttentionProblem
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.problems.rnn import RnnProblem
from cudnnlite.runtime.select import backend_by_name

CONV_KEYS = [
    "n2-c3-h9-w7 k5-r3-s3 p1x1-u2x2-d1x1 g1",
    "n1-c67-h13-w13 k65-r5-s5 p2x2-u1x1-d2x2 g1",
    "n1-c8-h6-w6 k8-r3-s3 p1x1-u1x1-d1x1 g8",
    "n1-c16-h5-w5 k32-r1-s1 p0x0-u1x1-d1x1 g2",
    "n3-c18-h4-w4 k9-r1-s7 p0x3-u1x1-d1x1 g1",
]


def _conv() -> list:
    out = []
    for key, direction, layout, dt in itertools.product(
            CONV_KEYS, ("fwd", "bwd_data", "bwd_filter"), ("NCHW", "NHWC"),
            ("fp32", "fp16", "bf16", "fp64")):  # fmt: skip
        out.append(ConvProblem.parse(f"conv2d_{direction} {key} {layout} {dt}"))
    out.append(ConvProblem.parse("conv3d_fwd n1-c19-d7-h9-w11 k33-t3-r3-s3 p1x1x1-u2x2x2-d1x1x1 "
                                 "g1 NCDHW fp16"))  # fmt: skip
    return out


def _attention() -> list:
    out = []
    for (d, dv), dt, direction, (sq, skv) in itertools.product(
            ((32, 32), (80, 64), (160, 160), (256, 256), (256, 96), (300, 300)),
            ("fp32", "fp16", "bf16", "fp64"), ("fwd", "bwd"), ((1, 200), (65, 63))):  # fmt: skip
        out.append(AttentionProblem(2, 6, 2, sq, skv, d, dv, dtype=dt, direction=direction,
                                    causal=sq > 1, mask="bool" if sq == 1 else "none"))  # fmt: skip
    return out


def _rnn() -> list:
    return [RnnProblem(mode, 5, 3, 7, 9, p, 2, bidir, dtype=dt, direction=direction)
            for mode, p, bidir, dt, direction in itertools.product(
                ("lstm", "gru", "rnn_tanh"), (0, 4), (False, True), ("fp32", "fp16", "fp64"),
                ("fwd", "bwd")) if p == 0 or mode == "lstm"]  # fmt: skip


PROBLEMS = _conv() + _attention() + _rnn()


@pytest.mark.parametrize("family", sorted({registry.get(n).family for n in registry.NAMES}))
def test_forcing_a_solver_answers_a_choice_or_not_supported(family: str) -> None:
    backend = backend_by_name("cpu")
    problems = [p for p in PROBLEMS if p.family == family]
    assert problems, family
    names = [n for n in registry.NAMES if registry.get(n).family == family]
    refused = 0
    for problem, name in itertools.product(problems, names):
        try:
            choice = select.select(problem, backend, name)
        except NotSupportedError as exc:
            assert name in str(exc), exc
            refused += 1
        else:
            assert choice.solver.name == name
    if len(names) > 1:
        assert refused  # the edges are edges: some solver refuses some problem
