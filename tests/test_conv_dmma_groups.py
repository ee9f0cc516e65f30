"""Grouped convolution on the fp64 tensor cores (issues 18 and 11): the DMMA forward,
backward filter and backward data kernels (dmma_implicit_gemm.cu) run one GEMM per group,
grid.y group-major, the group's channels reached by offsets fixed per block. Against the
float64 references, in every direction, 1-D to 3-D, both layouts, groups that straddle and
fill the 64-wide tiles, and the heuristics' choice for grouped float64 layers.

Tolerances: test_conv_dmma.py's forward bound and tests/conv_backward_support.py's fp64
bound, with T the terms of one output: a group's C/groups * R * S (forward), N * P * Q
(backward filter), K/groups * R * S (backward data); the DMMA adds in another order than
the reference, and any order of T double additions stays within T * 2^-53 * mag to first
order. A kernel that read another group's channels would be off by O(mag), far outside.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import test_conv_dmma as fwd
from conv_backward_support import check_data, check_filter, problem

import cudnnlite
from cudnnlite.dispatch import heuristics, registry
from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.solvers.conv.dmma_bwd_filter import TILES as FILTER_TILES
from cudnnlite.solvers.conv.dmma_bwd_filter import DmmaSplitKConfig
from cudnnlite.solvers.conv.dmma_igemm import grid_y
from cudnnlite.testing import to_backend, to_numpy

from conv_support import magnitude, reference, run_solver

FILTER = registry.get("conv_bwd_filter_dmma_implicit_gemm")
DATA = registry.get("conv_bwd_data_dmma_implicit_gemm")
PHASED = registry.get("conv_bwd_data_dmma_implicit_gemm_phased")


def check_forward(backend: str, p, cfg=fwd.CFG) -> None:
    ops = {"x": fwd.rand(p.x_shape(), 1), "w": fwd.rand(p.w_shape(), 2),
           "bias": fwd.rand((p.k,), 3), "z": fwd.rand(p.y_shape(), 4)}  # fmt: skip
    e = fwd.Epilogue(alpha=1 / 3, alpha2=-0.7, has_bias=True, has_z=True)
    got = run_solver(backend, fwd.SOLVER, p, ops, cfg, epilogue=e)
    ref = reference(p, ops, e, None)
    bound = (fwd.ACC * p.c_per_group * p.filter_taps * fwd.EPS * abs(e.alpha)
             * magnitude(p, ops) + fwd.OUT * np.abs(ref) + 1e-300)  # fmt: skip
    bad = ~(np.abs(got - ref) <= bound)
    assert not bad.any(), f"{p.key()} {cfg.label()}: {bad.sum()} of {bad.size} off"


# Groups of 2 to 4; per group: K/groups of 70 (two column tiles of 64, the second
# partial), 5 or 9 (one partial tile), C/groups of 3 to 19; stride, dilation, asymmetric
# padding; NCHW and NHWC; a 1-D and a 3-D layer.
SHAPES = {
    "g2_k70_nchw": dict(n=2, c=6, hw=(7, 6), k=140, rs=(3, 3), pad=1, groups=2),
    "g3_odd_nhwc": dict(n=2, c=9, hw=(9, 11), k=15, rs=(3, 2), pad=((1, 0), (0, 2)),
                        stride=2, dil=(1, 2), groups=3, layout="NHWC"),
    "g4_c19_nhwc": dict(n=1, c=76, hw=(5, 5), k=36, rs=(3, 3), pad=1, groups=4, layout="NHWC"),
    "g2_conv1d": dict(n=3, c=8, hw=(13,), k=10, rs=(5,), pad=2, stride=2, dil=2, groups=2),
    "g2_3d_ndhwc": dict(n=1, c=6, hw=(5, 6, 5), k=10, rs=(3, 1, 2), pad=1, stride=(1, 2, 1),
                        groups=2, layout="NDHWC"),
    "g3_3d_ncdhw": dict(n=1, c=9, hw=(4, 5, 6), k=6, rs=(2, 3, 3), pad=1, groups=3,
                        layout="NCDHW"),
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_forward_grouped(backend: str, shape: dict) -> None:
    p = problem(dtype="fp64", direction="fwd", **shape)
    check_forward(backend, p)
    check_forward(backend, p, fwd.BIG)


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_backward_filter_grouped(backend: str, shape: dict) -> None:
    p = problem(dtype="fp64", direction="bwd_filter", **shape)
    check_filter(backend, FILTER, p)
    check_filter(backend, FILTER, p, config=DmmaSplitKConfig(*FILTER_TILES[1], 2))


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_backward_data_grouped(backend: str, shape: dict) -> None:
    """By phases (any stride), and at stride 1 the forward kernel on the rotated filters
    (K and C swapped within each group)."""
    p = problem(dtype="fp64", direction="bwd_data", **shape)
    check_data(backend, PHASED, p, bias=True)
    check_data(backend, PHASED, p, config=fwd.BIG)
    if all(s == 1 for s in p.strides) and DATA.is_applicable(p, EMULATOR):
        check_data(backend, DATA, p, bias=True)


def test_a_wide_group_spans_two_column_tiles() -> None:
    """grid.y: each group's tiles, group-major (two per group of 70 channels)."""
    assert grid_y(2, 70, 64) == 4 and grid_y(3, 5, 64) == 3 and grid_y(1, 64, 64) == 1


def test_public_api_grouped(backend: str) -> None:
    """conv2d and both backward functions with groups=2 and algo= the DMMA solvers."""
    import cudnnlite.ops.conv_backward as cb

    p = problem(dtype="fp64", direction="fwd", **SHAPES["g2_k70_nchw"])
    x, w = fwd.rand(p.x_shape(), 1), fwd.rand(p.w_shape(), 2)
    dy = fwd.rand(p.y_shape(), 3)
    xb, wb, dyb = (to_backend(a, backend) for a in (x, w, dy))
    y = to_numpy(cudnnlite.conv2d(xb, wb, padding=1, groups=2, algo=fwd.SOLVER.name))
    mag = magnitude(p, {"x": x, "w": w})
    ref = reference(p, {"x": x, "w": w}, fwd.Epilogue(), None)
    assert np.all(np.abs(y - ref) <= fwd.ACC * p.c_per_group * 9 * fwd.EPS * mag + 1e-300)
    dw = cb.conv2d_backward_filter(xb, dyb, w.shape, padding=1, groups=2, algo=FILTER.name)
    dx = cb.conv2d_backward_data(dyb, wb, x.shape, padding=1, groups=2, algo=PHASED.name)
    with cudnnlite.fast_paths_off():
        want_dw = cb.conv2d_backward_filter(x, dy, w.shape, padding=1, groups=2,
                                            algo="conv_bwd_filter_direct")  # fmt: skip
        want_dx = cb.conv2d_backward_data(dy, w, x.shape, padding=1, groups=2,
                                          algo="conv_bwd_data_direct")  # fmt: skip
    np.testing.assert_allclose(to_numpy(dw), want_dw, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(to_numpy(dx), want_dx, rtol=1e-12, atol=1e-12)


def test_heuristics_rank_dmma_first_for_wide_groups() -> None:
    """Grouped float64 on sm_80+: the DMMA kernels first when a group's GEMM fills half a
    64-wide tile (32 channels or more where the tile's columns run); narrower groups
    keep the CUDA-core ranking (most of a tile would be zero padding); depthwise never."""
    wide = dict(n=2, c=64, hw=(14, 14), k=64, rs=(3, 3), pad=1, groups=2, layout="NHWC")
    narrow = dict(wide, c=32, k=32, groups=8)  # 4 channels per group
    depthwise = dict(wide, c=32, k=32, groups=32)
    for sm in (80, 90):
        caps = for_sm(sm)
        p = problem(dtype="fp64", direction="fwd", **wide)
        assert heuristics.conv_fwd_ranking(p, caps)[0] == fwd.SOLVER.name
        p = dataclasses.replace(p, direction="bwd_data")
        assert heuristics.conv_bwd_data_ranking(p, caps)[:2] == [DATA.name, PHASED.name]
        p = dataclasses.replace(p, direction="bwd_filter")
        assert heuristics.conv_bwd_filter_ranking(p, caps)[0] == FILTER.name
        rankings = {"fwd": heuristics.conv_fwd_ranking,
                    "bwd_data": heuristics.conv_bwd_data_ranking,
                    "bwd_filter": heuristics.conv_bwd_filter_ranking}  # fmt: skip
        names = {fwd.SOLVER.name, DATA.name, PHASED.name, FILTER.name}
        for shape in (narrow, depthwise):
            for direction, rank in rankings.items():
                q = problem(dtype="fp64", direction=direction, **shape)
                assert not set(rank(q, caps)) & names, (direction, q.key())
    assert fwd.SOLVER.is_applicable(problem(dtype="fp64", direction="fwd", **narrow), EMULATOR)
