"""Grouped convolution on the multistage tensor-core engine: forward, backward data by
phases (and at stride 1 on rotated filters, the forward's kernels), and backward filter,
each as one GEMM per group (grid.y group-major over the groups' tiles, the group's
channels reached by offsets) or, for groups narrower than the tile, as the packed kernels
(several groups per block, the filters block-diagonal), 1-D to 3-D, run directly on every
backend against the float64 reference. Each case names the kernel it means to run and the
test checks that the solver takes it (``packed``).

Tolerances: tests/conv_tc_support.py's (fp16/bf16 products exact in fp32, fp32 sums:
acc_factor 2 over the group's C/groups * R * S terms; TF32 adds 2^-11 per operand) and
tests/conv_backward_support.py's for the gradients. The cases pick groups whose channels
exercise what groups change: a group of 4-byte copies next to 16-byte ones, a group's
output channels over several tiles (K/groups > block_n), K/groups that is not a multiple
of the vector store (scalar epilogue at the group's edge), split-K partials, the NCHW
layout conversion of grouped filters, 1-D and 3-D.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conv_backward_support import check_data, check_filter
from conv_tc_support import PHASED, SMALL, SMALL_TF32, _check, conv

from cudnnlite.dispatch import heuristics as h
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.problems.suites import RESNEXT50, scaled
from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.solvers.conv.bwd_data import TcImplicitGemmSolver as TcBwdData
from cudnnlite.solvers.conv.common import Epilogue
from cudnnlite.solvers.conv.tc_bwd_data import packed as packed_data
from cudnnlite.solvers.conv.tc_bwd_filter import TcBwdFilterSolver, TcSplitKConfig, packed_columns
from cudnnlite.solvers.conv.tc_bwd_filter import packed as packed_filter
from cudnnlite.solvers.conv.tc_igemm import TcConfig, TcImplicitGemmSolver, packed

FWD, BWF, ROTATED = TcImplicitGemmSolver(), TcBwdFilterSolver(), TcBwdData()
# Backward data tiles of 128 columns (the packed kernel has 64): one GEMM per group
BIG_BWD = {"fp32": TcConfig(64, 128, 16, 64, 32, 4)}  # others: TcConfig(64, 128, 32, 32, 64, 4)


def grouped(groups: int, *args, direction: str = "fwd", **kw) -> ConvProblem:
    return dataclasses.replace(conv(*args, **kw), groups=groups, direction=direction)


BIG = TcConfig(128, 128, 32, 64, 64, 4)  # not a packed tile: one GEMM per group
BIG_NARROW = TcConfig(128, 128, 32, 32, 64, 4)  # the same with 4-byte copies
FWD_CASES = {
    # (problem, config, packed): C/groups 8 (16-byte copies), K/groups 6 (scalar stores)
    "g2_cg8_kg6": (grouped(2, 1, 16, 5, 12), BIG, False),
    # C/groups 2: 4-byte copies; four groups
    "g4_cg2_align2": (grouped(4, 2, 8, (4, 5), 8), BIG_NARROW, False),
    # ResNeXt-like: 8 channels per group, stride 2, bf16
    "g4_resnext_stride2_bf16": (grouped(4, 1, 32, 7, 32, stride=2, dtype="bf16"), BIG, False),
    # K/groups 70 > block_n 64: two column tiles per group, the second ragged
    "g2_kg70_two_tiles": (grouped(2, 1, 16, 3, 140, f=1, pad=0), SMALL, False),
    # TF32, C/groups 3: one-float copies
    "g2_tf32_cg3": (grouped(2, 1, 6, 4, 10, dtype="fp32"), None, True),
    # NCHW: the grouped filters converted as K images of C/groups x R*S
    "g2_nchw": (grouped(2, 1, 16, 4, 12, layout="NCHW"), BIG, False),
    "g3_nchw_tf32_dilation2": (grouped(3, 1, 12, 6, 9, dil=2, pad=2, dtype="fp32",
                                       layout="NCHW"), None, True),  # fmt: skip
    # split-K: partials of each group's columns, summed with the epilogue
    "g2_split4": (grouped(2, 1, 64, 3, 16), TcConfig(64, 64, 32, 32, 32, 4, 4), False),
    # packed: 8 groups of 4 channels in one 64-column block (4-byte copies)
    "packed_g8_cg4": (grouped(8, 1, 32, 5, 32), SMALL, True),
    # packed: 12 groups of 8, two column blocks of 8 groups each (the second partial)
    "packed_g12_cg8_two_blocks": (grouped(12, 1, 96, 4, 96, stride=2), SMALL, True),
    # packed: groups straddle the blocks (24 columns per group, 64 per block), 128 rows
    "packed_g5_kg24_straddling": (grouped(5, 2, 80, 4, 120, dtype="bf16"),
                                  TcConfig(128, 64, 32, 64, 32, 4), True),  # fmt: skip
    # packed: K/groups 1 (a channel multiplier of 1 over groups of 2 channels)
    "packed_kg1": (grouped(6, 1, 12, 4, 6), SMALL, True),
    # packed, 64 x 128 tile, dilation and big padding
    "packed_64x128_dilation2": (grouped(4, 1, 32, 6, 40, dil=2, pad=3),
                                TcConfig(64, 128, 32, 32, 64, 4), True),  # fmt: skip
    "packed_nchw_bf16": (grouped(4, 1, 16, 5, 12, layout="NCHW", dtype="bf16"), SMALL, True),
    "packed_tf32_64x128": (grouped(3, 1, 12, 4, 9, dtype="fp32"),
                           TcConfig(64, 128, 16, 64, 32, 4), True),  # fmt: skip
}


@pytest.mark.parametrize("case", sorted(FWD_CASES))
def test_forward(backend: str, case: str) -> None:
    p, cfg, pack = FWD_CASES[case]
    assert packed(p, cfg or SMALL_TF32) == pack  # the kernel the case means to run
    _check(backend, p, cfg)


@pytest.mark.parametrize("name", ["l2.conv2", "l4.b.conv2"])
def test_resnext50_layers(backend: str, name: str) -> None:
    # Real channel structure (32 groups of 8 and of 32 channels), images shrunk to 4x4.
    layer = next(layer for layer in RESNEXT50 if layer.name == name)
    _check(backend, scaled(layer, 4).problem(n=1, dtype="fp16", layout="NHWC"))


@pytest.mark.parametrize("k", [16, 12], ids=["vector_stores", "scalar_stores"])
def test_forward_epilogue_per_group(backend: str, k: int) -> None:
    # bias and residual at the group's channel offset; K/groups 8 stores 16 bytes a pixel,
    # K/groups 6 stores elementwise up to the group's edge.
    e = Epilogue(alpha=1.5, alpha2=0.5, act_mode=0, has_bias=True, has_z=True)
    p = grouped(2, 1, 16, 4, k)
    for cfg in (SMALL, BIG):  # packed, one GEMM per group
        _check(backend, p, cfg, epilogue=e, activation="relu", bias=True, z=True)


def test_forward_1d_and_3d(backend: str) -> None:
    p1 = ConvProblem(n=1, c=8, spatial=(9,), k=6, filter=(3,), pads=((1, 1),), strides=(2,),
                     dilations=(1,), groups=2, layout="NWC", dtype="fp16")  # fmt: skip
    _check(backend, p1)  # packed
    _check(backend, p1, BIG)  # one GEMM per group
    p3 = ConvProblem(n=1, c=16, spatial=(3, 4, 3), k=8, filter=(2, 3, 3),
                     pads=((0, 1), (1, 1), (1, 1)), strides=(1, 1, 1), dilations=(1, 1, 1),
                     groups=2, layout="NDHWC", dtype="fp16")  # fmt: skip
    assert packed(p3, SMALL) and not packed(p3, BIG)
    _check(backend, p3, SMALL)  # packed
    _check(backend, p3, BIG)  # one GEMM per group
    _check(backend, dataclasses.replace(p3, dtype="fp32", math="tf32"), SMALL_TF32)


def _grouped_3d(groups: int, c: int, k: int, direction: str, dtype: str = "fp16",
                stride: int = 1) -> ConvProblem:  # fmt: skip
    return ConvProblem(n=1, c=c, spatial=(3, 5, 4), k=k, filter=(2, 3, 3),
                       pads=((1, 0), (1, 1), (1, 1)), strides=(stride,) * 3,
                       dilations=(1, 1, 1), groups=groups, layout="NDHWC", dtype=dtype,
                       direction=direction, math="tf32" if dtype == "fp32" else "default")


def test_backward_3d_packed(backend: str) -> None:
    # 8 groups of 4 channels (4-byte copies) and TF32's 6 groups of 3, stride 2
    for p, cfg in ((_grouped_3d(8, 32, 32, "bwd_data"), SMALL),
                   (_grouped_3d(6, 18, 18, "bwd_data", "fp32", 2), SMALL_TF32)):  # fmt: skip
        assert packed_data(p, cfg)
        acc = 2.0 + (2.0**14 / (p.k_per_group * p.filter_taps) if p.dtype == "fp32" else 0.0)
        check_data(backend, PHASED, p, bias=True, acc_factor=acc, config=cfg)
    for p, cfg in ((_grouped_3d(8, 32, 32, "bwd_filter"), TcSplitKConfig(64, 64, 32, 32, 32, 3, 2)),
                   (_grouped_3d(6, 18, 18, "bwd_filter", "fp32", 2),
                    TcSplitKConfig(64, 64, 16, 32, 32, 4, 1))):  # fmt: skip
        assert packed_filter(p, cfg)
        terms = p.n * int(np.prod(p.out_spatial))
        acc = 2.0 + (2.0**14 / terms if p.dtype == "fp32" else 0.0)
        check_filter(backend, BWF, p, config=cfg, acc_factor=acc)


BWD_DATA_CASES = {
    "g2_stride2": grouped(2, 1, 16, (7, 5), 16, stride=2, direction="bwd_data"),
    "g4_align2_stride1": grouped(4, 1, 8, 5, 8, direction="bwd_data"),
    # C/groups 72 > block_n 64: two column tiles per group
    "g2_cg72_two_tiles": grouped(2, 1, 144, 3, 16, f=1, pad=0, stride=2, direction="bwd_data"),
    "g2_tf32_stride2": grouped(2, 1, 6, 5, 10, stride=2, dtype="fp32", direction="bwd_data"),
}


BWD_PACKED_CASES = {
    # (problem, config): 8 groups of 4 dx channels in one 64-channel block (4-byte copies)
    "g8_cg4": (grouped(8, 1, 32, 5, 32, direction="bwd_data"), SMALL),
    # 12 groups of 8, stride 2: two blocks, the second partial; K/groups 4
    "g12_cg8_stride2": (grouped(12, 1, 96, (7, 6), 48, stride=2, direction="bwd_data"), SMALL),
    # groups straddle the blocks (24 dx channels per group), 128 rows, bf16
    "g5_cg24_straddling_bf16": (
        grouped(5, 2, 120, 4, 80, dtype="bf16", direction="bwd_data"),
        TcConfig(128, 64, 32, 64, 32, 4),
    ),
    # TF32, C/groups 3 and K/groups 5 (one-float copies), dilation 2
    "g4_tf32_dilation2": (
        grouped(4, 1, 12, 6, 20, dil=2, pad=2, dtype="fp32", direction="bwd_data"),
        SMALL_TF32,
    ),
}


@pytest.mark.parametrize("case", sorted(BWD_DATA_CASES))
def test_backward_data_by_phases(backend: str, case: str) -> None:
    p = BWD_DATA_CASES[case]
    acc = 2.0 + (2.0**14 / (p.k_per_group * p.filter_taps) if p.dtype == "fp32" else 0.0)
    cfg = BIG_BWD.get(p.dtype, TcConfig(64, 128, 32, 32, 64, 4))
    if cfg not in PHASED.configs(p, EMULATOR):
        cfg = None  # (4-byte copies: the 64x64 tile only, packed for narrow groups)
    check_data(backend, PHASED, p, bias=True, acc_factor=acc, config=cfg)


@pytest.mark.parametrize("case", sorted(BWD_PACKED_CASES))
def test_backward_data_packed(backend: str, case: str) -> None:
    p, cfg = BWD_PACKED_CASES[case]
    assert packed_data(p, cfg) and packed_data(p, PHASED.default_config(p, for_sm(90)))
    acc = 2.0 + (2.0**14 / (p.k_per_group * p.filter_taps) if p.dtype == "fp32" else 0.0)
    check_data(backend, PHASED, p, bias=True, acc_factor=acc, config=cfg)


def test_backward_data_rotated_stride1(backend: str) -> None:
    # The rotated filters swap K and C within each group; the forward kernel runs them
    # with the groups of the rotated problem.
    check_data(backend, ROTATED, grouped(2, 1, 16, 5, 8, direction="bwd_data"), bias=True)


BWF_CASES = {
    "g2": (grouped(2, 2, 16, 5, 16, direction="bwd_filter"), None),
    "g4_align2_stride2": (grouped(4, 1, 8, 6, 8, stride=2, direction="bwd_filter"), None),
    # K/groups 72 > block_m 64: two row tiles per group; split over the pixels
    "g2_kg72_split2": (grouped(2, 1, 16, 6, 144, f=1, pad=0, direction="bwd_filter"),
                       TcSplitKConfig(64, 64, 32, 32, 32, 3, 2)),  # fmt: skip
    "g3_tf32_bf": (grouped(3, 1, 6, 5, 9, dtype="fp32", direction="bwd_filter"), None),
}


BWF_PACKED_CASES = {
    # (problem, config): 8 groups of 4 filters in one 64-row block, 4-byte copies, split 2
    "g8_kg4_split2": (grouped(8, 2, 32, 5, 32, direction="bwd_filter"),
                      TcSplitKConfig(64, 64, 32, 32, 32, 3, 2)),  # fmt: skip
    # 12 groups of 8 filters and 4 channels, stride 2: two row blocks, 64 x 128 tiles
    "g12_kg8_stride2": (grouped(12, 1, 48, (7, 6), 96, stride=2, direction="bwd_filter"),
                        TcSplitKConfig(64, 128, 32, 32, 64, 3, 1)),  # fmt: skip
    # 4 groups of 16 filters and 8 channels in one row block, the 64-deep 64x128 tile
    "g4_kg16_deep": (grouped(4, 2, 32, (8, 9), 64, direction="bwd_filter"),
                     TcSplitKConfig(64, 128, 64, 32, 64, 3, 1)),  # fmt: skip
    # groups straddle the row blocks (24 filters per group), bf16, dilation 2
    "g5_kg24_straddling_bf16": (
        grouped(5, 1, 80, 6, 120, dil=2, pad=2, dtype="bf16", direction="bwd_filter"),
        TcSplitKConfig(64, 64, 32, 32, 32, 3, 1),
    ),
    # TF32, C/groups 3 and K/groups 5 (one-float copies)
    "g4_tf32": (grouped(4, 1, 12, 5, 20, dtype="fp32", direction="bwd_filter"),
                TcSplitKConfig(64, 64, 16, 32, 32, 4, 1)),  # fmt: skip
}


def _bwf_acc(p: ConvProblem) -> float:
    terms = p.n * p.out_spatial[0] * p.out_spatial[1]
    return 2.0 + (2.0**14 / terms if p.dtype == "fp32" else 0.0)


@pytest.mark.parametrize("case", sorted(BWF_CASES))
def test_backward_filter(backend: str, case: str) -> None:
    p, cfg = BWF_CASES[case]
    cfg = cfg or TcSplitKConfig(*(128, 128, 16, 64, 64, 4) if p.dtype == "fp32" else ())
    if cfg not in BWF.configs(p, EMULATOR):
        cfg = None  # (4-byte copies: the 64x64 tile only, packed for narrow groups)
    check_filter(backend, BWF, p, config=cfg, acc_factor=_bwf_acc(p))


@pytest.mark.parametrize("case", sorted(BWF_PACKED_CASES))
def test_backward_filter_packed(backend: str, case: str) -> None:
    p, cfg = BWF_PACKED_CASES[case]
    assert packed_filter(p, cfg) and packed_filter(p, BWF.default_config(p, for_sm(90)))
    check_filter(backend, BWF, p, config=cfg, acc_factor=_bwf_acc(p))


def test_backward_filter_packed_grid() -> None:
    # 8 filters per group in blocks of 64: a block's filters span 8 groups, its columns
    # 9 taps x 8 groups' 4 channels; 24 per group: a block spans 3 groups, or 4 when it
    # starts 16 filters into one (the second block of 64, if K reaches its fourth group).
    assert packed_columns(grouped(12, 1, 48, 7, 96, direction="bwd_filter"), 64) == 9 * 8 * 4
    assert packed_columns(grouped(5, 1, 80, 6, 120, direction="bwd_filter"), 64) == 9 * 3 * 16
    assert packed_columns(grouped(10, 1, 160, 6, 240, direction="bwd_filter"), 64) == 9 * 4 * 16


def test_reasons_and_grid() -> None:
    # C/groups odd in fp16: no 4-byte copy fits a group
    odd = grouped(2, 1, 6, 4, 4)
    assert "c/groups=3" in FWD.is_applicable(odd, EMULATOR).reason
    bwd = dataclasses.replace(odd, direction="bwd_data")
    assert "K/groups and C/groups" in PHASED.is_applicable(bwd, EMULATOR).reason
    bwf = dataclasses.replace(odd, direction="bwd_filter")
    assert "K/groups and C/groups" in BWF.is_applicable(bwf, EMULATOR).reason
    # grid.y counts every group's column tiles: 65536 groups of 64 channels overflow it
    many = grouped(65536, 1, 65536 * 2, 1, 65536 * 64, f=1, pad=0)
    assert "y limit" in FWD.is_applicable(many, for_sm(90)).reason
    # The reduction tiles count a group's channels: split plans follow them
    p = grouped(4, 1, 128, 8, 64)
    assert FWD.default_config(p, for_sm(90)) in FWD.configs(p, for_sm(90))


def test_heuristics_rank_the_engine_first_for_groups() -> None:
    # Groups of 16+ channels fill half a BK-32 slice or more, fewer (ResNeXt's 4) share a
    # tile in the packed kernels: the engine first on a GPU either way, 1-D to 3-D.
    wide = grouped(8, 32, 128, 28, 128)
    assert h.conv_fwd_ranking(wide, for_sm(90))[0] == h.TC
    narrow = grouped(32, 32, 128, 28, 128)
    assert h.conv_fwd_ranking(narrow, for_sm(90))[0] == h.TC
    assert packed(narrow, FWD.default_config(narrow, for_sm(90)))
    narrow_3d = ConvProblem(n=8, c=128, spatial=(8, 28, 28), k=128, filter=(3, 3, 3),
                            pads=((1, 1),) * 3, strides=(1, 1, 1), dilations=(1, 1, 1),
                            groups=32, layout="NDHWC", dtype="fp16")  # fmt: skip
    assert h.conv_fwd_ranking(narrow_3d, for_sm(90))[0] == h.TC
    assert packed(narrow_3d, FWD.default_config(narrow_3d, for_sm(90)))
    for d, first in (("bwd_data", h.BWD_DATA_TC_PHASED), ("bwd_filter", h.BWD_FILTER_TC)):
        ranking = getattr(h, f"conv_{d}_ranking")
        assert ranking(dataclasses.replace(wide, direction=d), for_sm(90))[0] == first
    # odd channels per group in fp16: no copy width fits a group, the direct kernel first
    odd = dataclasses.replace(grouped(32, 32, 96, 28, 96), direction="bwd_filter")
    assert h.conv_bwd_filter_ranking(odd, for_sm(90))[0] == h.BWD_FILTER_DIRECT
    # the backward directions pack narrow groups too
    for d, first in (("bwd_data", h.BWD_DATA_TC_PHASED), ("bwd_filter", h.BWD_FILTER_TC)):
        ranking = getattr(h, f"conv_{d}_ranking")
        assert ranking(dataclasses.replace(narrow, direction=d), for_sm(90))[0] == first
        assert ranking(dataclasses.replace(narrow_3d, direction=d), for_sm(90))[0] == first


def test_public_functions_with_groups_on_the_engine() -> None:
    # conv2d, its backward directions and conv_transpose2d with groups, forced onto the
    # engine (its packed kernels: 8 groups of 4 channels), against the default dispatch.
    import cudnnlite as cl
    from cudnnlite.ops import conv_backward as cb

    rng = np.random.default_rng(0)
    x = rng.standard_normal((2, 6, 5, 32)).astype(np.float16)  # NHWC
    w = rng.standard_normal((32, 3, 3, 4)).astype(np.float16)  # KRSC, 8 groups
    kw = dict(stride=1, padding=1, groups=8, layout="NHWC")
    y = cl.conv2d(x, w, algo="conv_fwd_tc_implicit_gemm", **kw)
    plan = cl.conv2d_plan(x.shape, w.shape, dtype=np.float16, algo="conv_fwd_tc_implicit_gemm",
                          backend="cpu", **kw)  # fmt: skip
    assert "packed" in plan.kernel_names[0]
    np.testing.assert_array_equal(plan(x, w), y)
    ref = cl.conv2d(x, w, **kw)  # the emulator's heuristics: a CUDA-core solver
    np.testing.assert_allclose(y.astype(np.float32), ref.astype(np.float32), rtol=2e-3,
                               atol=2e-2)  # fmt: skip
    dy = rng.standard_normal(y.shape).astype(np.float16)
    for algo, fn, args in (
        ("conv_bwd_data_tc_implicit_gemm_phased", cl.conv2d_backward_data, (dy, w, x.shape)),
        ("conv_bwd_filter_tc_implicit_gemm", cl.conv2d_backward_filter, (x, dy, w.shape)),
    ):
        got = fn(*args, algo=algo, **kw)
        assert "packed" in cb.last_kernel_names()[0]
        np.testing.assert_allclose(got.astype(np.float32), fn(*args, **kw).astype(np.float32),
                                   rtol=2e-3, atol=5e-2)  # fmt: skip
    # conv_transpose2d is backward data; its weights (C_in, R, S, C_out / groups) in NHWC
    wt = rng.standard_normal((32, 3, 3, 4)).astype(np.float16)
    yt = cl.conv_transpose2d(dy, wt, padding=1, groups=8, layout="NHWC",
                             algo="conv_bwd_data_tc_implicit_gemm_phased")  # fmt: skip
    exact = cl.conv_transpose2d(dy, wt, padding=1, groups=8, layout="NHWC")
    np.testing.assert_allclose(yt.astype(np.float32), exact.astype(np.float32), rtol=2e-3,
                               atol=5e-2)  # fmt: skip
