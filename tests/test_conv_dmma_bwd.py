"""Convolution backward on the fp64 tensor cores (issue 18): backward filter
(conv_bwd_filter_dmma_implicit_gemm: its own kernel, split-K with double partials),
backward data at stride 1 (conv_bwd_data_dmma_implicit_gemm: the forward DMMA kernel on
the rotated filters) and at any stride (conv_bwd_data_dmma_implicit_gemm_phased: by
phases, the filter as stored) against the float64 references, their refusals, configs
and rank.

Tolerances: tests/conv_backward_support.py's fp64 bound, |got - ref| <= 2^-52 |ref| +
2 * T * (2 * 2^-53) * mag with T the terms per gradient entry (backward filter: N*P*Q;
backward data: K*R*S) and mag the same gradient of |operands|: the DMMA adds in another
order than the reference (on a GPU a k4 step's order is unspecified), and any order of T
double additions stays within T * 2^-53 * mag to first order; split-K only changes the
order again. Operands carry bits below float32's mantissa, so a path through float32
would miss by ~1e-8 relative.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conv_backward_support import (
    assert_grad_close,
    check_data,
    check_filter,
    problem,
    rand,
    ref_data,
    ref_filter,
    run_data,
    run_filter,
)

import cudnnlite.ops.conv_backward as cb
from cudnnlite.dispatch import heuristics, registry
from cudnnlite.errors import NotSupportedError
from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.solvers.conv.dmma_bwd_filter import (
    TILES,
    DmmaBwdFilterSolver,
    DmmaSplitKConfig,
)
from cudnnlite.solvers.conv.dmma_igemm import TILES as FWD_TILES
from cudnnlite.solvers.conv.dmma_igemm import DmmaConfig
from cudnnlite.testing import to_backend, to_numpy

FILTER = DmmaBwdFilterSolver()
DATA = registry.get("conv_bwd_data_dmma_implicit_gemm")
PHASED = registry.get("conv_bwd_data_dmma_implicit_gemm_phased")
NARROW, WIDE = TILES  # 64x64 (4 warps), 64x128 (8 warps)


def fprob(**kw) -> object:
    return problem(dtype="fp64", direction="bwd_filter", **kw)


def dprob(**kw) -> object:
    return problem(dtype="fp64", direction="bwd_data", **kw)


# Odd sizes on every GEMM edge (K rows, C*R*S columns, N*P*Q not a multiple of BK 16),
# stride 2 with dilation and asymmetric padding, a scaled ResNet 3x3 in NHWC (several
# column tiles), a pointwise layer and a 1-D one.
SHAPES = {
    "odd_stride2_dil2": dict(n=2, c=5, hw=(9, 11), k=7, rs=(3, 3), pad=2, stride=2, dil=2),
    "resnet3x3_nhwc": dict(n=2, c=16, hw=(7, 7), k=72, rs=(3, 3), pad=1, layout="NHWC"),
    "odd_asym_nhwc": dict(n=1, c=19, hw=(6, 5), k=9, rs=(2, 3), pad=((1, 0), (0, 2)),
                          layout="NHWC"),
    "pointwise": dict(n=2, c=24, hw=(5, 6), k=40, rs=(1, 1)),
    "conv1d": dict(n=3, c=6, hw=(17,), k=9, rs=(5,), pad=2, stride=1, dil=3, layout="NHWC"),
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_bwd_filter_fp64(backend: str, shape: dict) -> None:
    check_filter(backend, FILTER, fprob(**shape), config=DmmaSplitKConfig(*NARROW))


@pytest.mark.parametrize("tile", [NARROW, WIDE], ids=["64x64", "64x128"])
@pytest.mark.parametrize("splits", [2, 4])
def test_bwd_filter_split_k(backend: str, tile: tuple, splits: int) -> None:
    """Splits of 64 pixels (the last one partial: 2 * 7 * 7 = 98 pixels, 7 slices in all),
    both tiles, NCHW and NHWC."""
    for i, layout in enumerate(("NCHW", "NHWC")):
        p = fprob(n=2, c=11, hw=(7, 7), k=13, rs=(3, 3), pad=1, layout=layout)
        check_filter(backend, FILTER, p, seed=i, config=DmmaSplitKConfig(*tile, splits))


def test_bwd_filter_nan_propagates(backend: str) -> None:
    """A NaN in x reaches exactly the filter entries whose taps read it (zero-filled
    padding and the GEMM's edges never touch it)."""
    p = fprob(n=1, c=3, hw=(6, 6), k=5, rs=(3, 3), pad=1, layout="NHWC")
    x, dy = rand(p.x_shape(), 1, "fp64"), rand(p.y_shape(), 2, "fp64")
    x[0, 0, 0, 1] = np.nan  # a corner pixel: only some taps of channel 1 reach it
    got = run_filter(backend, FILTER, p, x, dy, DmmaSplitKConfig(*NARROW))
    ref = ref_filter(p, x, dy)
    assert np.isnan(got).any() and not np.isnan(got).all()
    np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
    keep = ~np.isnan(ref)
    mag = ref_filter(p, np.abs(np.nan_to_num(x)), np.abs(dy))
    assert_grad_close(got[keep], ref[keep], mag[keep], p.n * 36, "fp64", what="nan")


def test_bwd_filter_random_schedule(backend: str, emulator_only: None, monkeypatch) -> None:
    """The cp.async stages and barriers under the emulator's random thread order (a
    missing wait or barrier reads the 0xFF fill: NaN)."""
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "random")
    monkeypatch.setenv("CUDNNLITE_EMU_SEED", "7")
    p = fprob(**SHAPES["odd_stride2_dil2"])
    check_filter(backend, FILTER, p, config=DmmaSplitKConfig(*WIDE, 2))


STRIDE1 = {
    "odd_dil2": dict(n=2, c=5, hw=(9, 11), k=7, rs=(3, 3), pad=1, dil=2),
    "resnet3x3_nhwc": dict(n=2, c=70, hw=(7, 7), k=16, rs=(3, 3), pad=1, layout="NHWC"),
    "asym_pad": dict(n=1, c=9, hw=(6, 5), k=19, rs=(2, 3), pad=((1, 0), (0, 2))),
    "conv1d": dict(n=3, c=6, hw=(17,), k=9, rs=(5,), pad=2, dil=3, layout="NHWC"),
}


@pytest.mark.parametrize("shape", STRIDE1.values(), ids=STRIDE1.keys())
def test_bwd_data_fp64_stride1(backend: str, shape: dict) -> None:
    check_data(backend, DATA, dprob(**shape), bias=shape.get("layout") == "NHWC")


# Strides with and without gaps between the taps' reach (stride 5 > 3 taps: phases that
# no tap reaches get the bias alone), dilation sharing a factor with the stride (rstep 1,
# every other tap per phase), unequal strides with asymmetric padding in NHWC over two
# column tiles, padding beyond the filter's reach at stride 1 (which the rotated solver
# refuses), and a strided 1-D layer.
PHASES = {
    "s2_dil2": dict(n=2, c=5, hw=(9, 11), k=7, rs=(3, 3), pad=2, stride=2, dil=2),
    "s5_gaps": dict(n=1, c=4, hw=(17, 17), k=6, rs=(3, 3), pad=0, stride=5),
    "s4_dil2": dict(n=1, c=3, hw=(15, 13), k=5, rs=(4, 3), pad=3, stride=4, dil=2),
    "s2x3_nhwc": dict(n=2, c=70, hw=(8, 7), k=9, rs=(2, 3), pad=((1, 0), (0, 2)),
                      stride=(2, 3), layout="NHWC"),
    "pad_beyond_reach": dict(n=2, c=6, hw=(9, 9), k=8, rs=(3, 3), pad=4),
    "conv1d_s2": dict(n=3, c=6, hw=(13,), k=9, rs=(5,), pad=2, stride=2, dil=3, layout="NHWC"),
}


@pytest.mark.parametrize("shape", PHASES.values(), ids=PHASES.keys())
def test_bwd_data_fp64_phased(backend: str, shape: dict) -> None:
    check_data(backend, PHASED, dprob(**shape), bias=True)


def test_bwd_data_phased_128x64_and_stride1(backend: str) -> None:
    """The 8-warp tile (an M edge inside a 128-row block) and the one-phase case."""
    for cfg in map(DmmaConfig.from_tuple, FWD_TILES):
        for shape in (PHASES["s2_dil2"], STRIDE1["resnet3x3_nhwc"]):
            p = dprob(**shape)
            dy, w = rand(p.y_shape(), 3, "fp64"), rand(p.w_shape(), 4, "fp64")
            got = run_data(backend, PHASED, p, dy, w, config=cfg)
            mag = ref_data(p, np.abs(dy), np.abs(w))
            assert_grad_close(got, ref_data(p, dy, w), mag, p.k * p.filter_taps, "fp64",
                              what=f"{cfg.label()} {p.key()}")  # fmt: skip


def test_bwd_data_phased_random_schedule(backend: str, emulator_only: None,
                                         monkeypatch) -> None:  # fmt: skip
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "random")
    monkeypatch.setenv("CUDNNLITE_EMU_SEED", "11")
    check_data(backend, PHASED, dprob(**PHASES["s2x3_nhwc"]), bias=True)


# 3-D: a C3D-style 3x3x3 in NCDHW at stride 1 (every solver, the rotated one too) and
# strided, dilated, asymmetric NDHWC (stride 4 > 3 taps: phases without taps).
SHAPES_3D = {
    "c3d_3x3x3": dict(n=2, c=5, hw=(5, 6, 7), k=7, rs=(3, 3, 3), pad=1, layout="NCDHW"),
    "odd_ndhwc": dict(n=1, c=6, hw=(7, 5, 6), k=9, rs=(2, 3, 1), pad=((1, 0), (0, 2), (0, 0)),
                      stride=(2, 1, 3), dil=(2, 1, 1), layout="NDHWC"),
    "s4_gaps": dict(n=1, c=3, hw=(9, 9, 9), k=4, rs=(3, 3, 3), stride=4, layout="NDHWC"),
}


@pytest.mark.parametrize("shape", SHAPES_3D.values(), ids=SHAPES_3D.keys())
def test_backward_fp64_3d(backend: str, shape: dict) -> None:
    check_filter(backend, FILTER, fprob(**shape), config=DmmaSplitKConfig(*WIDE, 2))
    p = dprob(**shape)
    check_data(backend, PHASED, p, bias=True)
    if p.strides == (1, 1, 1):
        check_data(backend, DATA, p, bias=True)


def test_public_api_3d(backend: str) -> None:
    """conv3d's backward functions with algo= these solvers, and the kernels' names."""
    x, w = rand((1, 4, 5, 6, 7), 1, "fp64"), rand((6, 4, 3, 3, 3), 2, "fp64")
    dy = rand((1, 6, 3, 3, 4), 3, "fp64")  # stride 2, padding 1
    xb, wb, dyb = (to_backend(a, backend) for a in (x, w, dy))
    dw = cb.conv3d_backward_filter(xb, dyb, w.shape, stride=2, padding=1, algo=FILTER.name)
    assert any("ncdhw_fp64" in n for n in cb.last_kernel_names())
    dx = cb.conv3d_backward_data(dyb, wb, x.shape, stride=2, padding=1, algo=PHASED.name)
    (name,) = cb.last_kernel_names()
    assert name.startswith("dmma_igemm_bwd_data_") and name.endswith("_phases8_ncdhw_fp64")
    p = fprob(n=1, c=4, hw=(5, 6, 7), k=6, rs=(3, 3, 3), pad=1, stride=2, layout="NCDHW")
    assert_grad_close(to_numpy(dw), ref_filter(p, x, dy), ref_filter(p, np.abs(x), np.abs(dy)),
                      36, "fp64", what="api 3-D filter")  # fmt: skip
    pd = dataclasses.replace(p, direction="bwd_data")
    assert_grad_close(to_numpy(dx), ref_data(pd, dy, w), ref_data(pd, np.abs(dy), np.abs(w)),
                      6 * 27, "fp64", what="api 3-D data")  # fmt: skip


@pytest.mark.parametrize(
    "solver, p, caps, reason",
    [
        (FILTER, problem(1, 4, (6, 6), 4, (3, 3), dtype="fp32", direction="bwd_filter"),
         EMULATOR, "needs float64"),
        (FILTER, fprob(n=1, c=4, hw=(6, 6), k=4, rs=(3, 3)), for_sm(75), "sm_80+"),
        (FILTER, dprob(n=1, c=4, hw=(6, 6), k=4, rs=(3, 3)), EMULATOR, "direction bwd_filter"),
        (DATA, dprob(n=1, c=4, hw=(9, 9), k=4, rs=(3, 3), stride=2), EMULATOR, "stride 1"),
        (DATA, dprob(n=1, c=4, hw=(9, 9), k=4, rs=(3, 3), pad=3), EMULATOR, "padding <="),
        (DATA, dprob(n=1, c=4, hw=(6, 6), k=4, rs=(3, 3)), for_sm(75), "sm_80+"),
        (DATA, problem(1, 4, (6, 6), 4, (3, 3), dtype="fp32"), EMULATOR, "needs float64"),
        (PHASED, problem(1, 4, (6, 6), 4, (3, 3), dtype="fp32"), EMULATOR, "needs float64"),
        (PHASED, dprob(n=1, c=4, hw=(6, 6), k=4, rs=(3, 3)), for_sm(75), "sm_80+"),
        (PHASED, fprob(n=1, c=4, hw=(6, 6), k=4, rs=(3, 3)), EMULATOR, "direction bwd_data"),
    ],
)  # fmt: skip
def test_not_applicable_with_reason(solver, p, caps, reason: str) -> None:
    result = solver.is_applicable(p, caps)
    assert not result and reason in result.reason, result


def test_configs_and_default() -> None:
    p = fprob(n=1, c=4, hw=(6, 6), k=4, rs=(3, 3), pad=1)  # 36 pixels: no splits
    assert FILTER.configs(p, for_sm(90)) == [DmmaSplitKConfig(*NARROW), DmmaSplitKConfig(*WIDE)]
    narrow, wide = DmmaSplitKConfig(*NARROW, 4), DmmaSplitKConfig(*WIDE)
    assert narrow.label() == "64x64x16_w32x32_s2_split4" and wide.label() == "64x128x16_w32x32_s2"
    # stages in doubles: 2 x (64 + 64) rows x 20 doubles; 2 x (64 + 128) x 20
    assert (narrow.smem_bytes(), wide.smem_bytes()) == (40960, 61440)
    assert FILTER.config_from_dict(narrow.to_dict()) == narrow  # the tuning DB's round trip
    assert FILTER.workspace_size(p, DmmaSplitKConfig(*NARROW)) == 8 * 1 * 4 * (4 * 9)  # K x CRS
    # A ResNet layer: 576 columns -> the wide tile; 5 tiles -> splits toward 4 blocks per SM
    big = fprob(n=32, c=64, hw=(56, 56), k=64, rs=(3, 3), pad=1, layout="NHWC")
    cfg = FILTER.default_config(big, for_sm(90))
    assert cfg.tile() == WIDE and cfg.splits == 64
    with pytest.raises(ValueError, match="not one of"):
        DmmaSplitKConfig(block_n=32)
    with pytest.raises(ValueError, match="splits"):
        DmmaSplitKConfig(splits=3)


def test_public_api_forced(backend: str) -> None:
    """conv2d_backward_filter / _data with algo= these solvers: fp64 results; the kernels
    named; a strided backward data refused with the reason."""
    x, w = rand((2, 6, 9, 9), 1, "fp64"), rand((5, 6, 3, 3), 2, "fp64")
    dy = rand((2, 5, 9, 9), 3, "fp64")
    xb, wb, dyb = (to_backend(a, backend) for a in (x, w, dy))
    dw = to_numpy(cb.conv2d_backward_filter(xb, dyb, w.shape, padding=1, algo=FILTER.name))
    assert "dmma_igemm_bwd_filter" in " ".join(cb.last_kernel_names())
    p = fprob(n=2, c=6, hw=(9, 9), k=5, rs=(3, 3), pad=1)
    mag = ref_filter(p, np.abs(x), np.abs(dy))
    assert_grad_close(dw, ref_filter(p, x, dy), mag, 2 * 81, "fp64", what="api filter")
    dx = to_numpy(cb.conv2d_backward_data(dyb, wb, x.shape, padding=1, algo=DATA.name))
    assert "dmma_igemm_fwd" in " ".join(cb.last_kernel_names()) and dx.dtype == np.float64
    with pytest.raises(NotSupportedError, match="stride 1"):
        cb.conv2d_backward_data(dyb[:, :, :5, :5], wb, x.shape, padding=1, stride=2,
                                algo=DATA.name)  # fmt: skip
    dys = dyb[:, :, :5, :5]
    dx = to_numpy(cb.conv2d_backward_data(dys, wb, x.shape, padding=1, stride=2,
                                          algo=PHASED.name))  # fmt: skip
    assert "dmma_igemm_bwd_data_64x64x16_w32x32_s2_phases4_nchw_fp64" in cb.last_kernel_names()
    p2 = dprob(n=2, c=6, hw=(9, 9), k=5, rs=(3, 3), pad=1, stride=2)
    d = dy[:, :, :5, :5]
    assert_grad_close(dx, ref_data(p2, d, w), ref_data(p2, np.abs(d), np.abs(w)), 5 * 9,
                      "fp64", what="api phased")  # fmt: skip


def test_heuristics_rank_dmma_first_on_sm80_plus() -> None:
    resnet = fprob(**SHAPES["resnet3x3_nhwc"])
    cases = [
        (heuristics.conv_bwd_filter_ranking, resnet, FILTER.name),
        (heuristics.conv_bwd_data_ranking, dataclasses.replace(resnet, direction="bwd_data"),
         DATA.name),
    ]  # fmt: skip
    bwd = dataclasses.replace(resnet, direction="bwd_data")
    assert heuristics.conv_bwd_data_ranking(bwd, for_sm(90))[:2] == [DATA.name, PHASED.name]
    for rank, p, name in cases:
        assert rank(p, for_sm(90))[0] == name and rank(p, for_sm(80))[0] == name
        assert name not in rank(p, for_sm(75)) and name not in rank(p, EMULATOR)
        assert name not in rank(dataclasses.replace(p, dtype="fp32"), for_sm(90))
    # A large pointwise NHWC layer: cuBLAS's DGEMM (fp64 tensor cores too) stays first.
    big1x1 = fprob(n=8, c=256, hw=(28, 28), k=256, rs=(1, 1), layout="NHWC")
    assert heuristics.conv_bwd_filter_ranking(big1x1, for_sm(90))[:2] == [
        heuristics.BWD_FILTER_CUBLAS_1X1, FILTER.name]
    big1x1d = dataclasses.replace(big1x1, direction="bwd_data")
    assert heuristics.conv_bwd_data_ranking(big1x1d, for_sm(90))[:3] == [
        heuristics.BWD_DATA_CUBLAS_1X1, DATA.name, PHASED.name]
