"""The tensor-core backward data (stride 1 on rotated filters; any stride by phases,
cudnnlite/solvers/conv/tc_bwd_data.py), run directly on every backend against the
float64 reference: strides, tiles, NCHW / NCDHW, wide filters."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conv_backward_support import check_data
from conv_tc_support import PHASED, _bwd, _d3, _grouped, _layout, _tf32_acc, conv

from cudnnlite.problems.conv import ConvProblem
from cudnnlite.runtime.caps import EMULATOR
from cudnnlite.solvers.conv.bwd_data import TcImplicitGemmSolver as TcBwdData
from cudnnlite.solvers.conv.tc_igemm import TcConfig


@pytest.mark.parametrize("pad, layout", [(1, "NHWC"), (0, "NHWC"), (1, "NCHW")])
def test_backward_data_stride1(backend: str, pad: int, layout: str) -> None:
    p = dataclasses.replace(conv(1, 16, 5, 8, pad=pad, layout=layout), direction="bwd_data")
    check_data(backend, TcBwdData(), p, bias=True)


# ------------------------------------------------------------------ backward data, any stride
BWD_DATA_CASES = {
    "stride1": _bwd(2, 16, (5, 6), 24),
    "stride2": _bwd(2, 8, (7, 5), 16, stride=2),
    "stride3_phases_without_taps": _bwd(1, 8, (9, 8), 8, f=2, pad=0, stride=3),
    "stride2_dilation2": _bwd(1, 8, 9, 8, pad=2, stride=2, dil=2, dtype="bf16"),
    "align2": _bwd(2, 6, 6, 10, stride=2),
    "padding_beyond_the_filter": _bwd(1, 8, 2, 8, pad=3),
    "resnet_downsample_1x1_s2": _bwd(1, 16, 8, 24, f=1, pad=0, stride=2),
}


@pytest.mark.parametrize("case", sorted(BWD_DATA_CASES))
def test_backward_data_any_stride(backend: str, case: str) -> None:
    check_data(backend, PHASED, BWD_DATA_CASES[case], bias=True)


@pytest.mark.parametrize(
    "tile",
    [(128, 128, 64, 64, 64, 3), (128, 128, 32, 64, 64, 4), (64, 128, 32, 32, 64, 4),
     (128, 64, 64, 64, 32, 3), (64, 128, 64, 32, 64, 3)],
)  # fmt: skip
def test_backward_data_tiles(backend: str, tile) -> None:
    from conv_backward_support import rand, ref_data, run_data

    # K = 20 takes 4-byte copies; the 64-deep tile has 16-byte ones only (K = 24).
    p = _bwd(1, 72, 5, 24 if tile[2] == 64 else 20, stride=2)
    dy, w = rand(p.y_shape(), 0, "fp16"), rand(p.w_shape(), 1, "fp16")
    got = run_data(backend, PHASED, p, dy, w, config=TcConfig(*tile))
    ref = ref_data(p, dy, w)
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-3, atol=5e-3)


# ------------------------------------------------------------------ NCHW backward
NCHW_DATA = {
    "fp16_stride1": _layout(_bwd(2, 16, (5, 6), 24)),
    "fp16_stride2": _layout(_bwd(2, 8, (7, 5), 16, stride=2)),
    "grouped": _grouped("bwd_data", "NCHW"),
    "tf32_stride2": _layout(_bwd(2, 8, (7, 5), 16, stride=2, dtype="fp32")),
    "ncdhw": _d3("bwd_data"),
}


@pytest.mark.parametrize("case", sorted(NCHW_DATA))
def test_backward_data_nchw(backend: str, case: str) -> None:
    p = NCHW_DATA[case]
    assert PHASED.is_applicable(p, EMULATOR), PHASED.is_applicable(p, EMULATOR).reason
    acc = _tf32_acc(p.k * p.filter_taps) if p.dtype == "fp32" else 2.0
    check_data(backend, PHASED, p, bias=True, acc_factor=acc)


def test_backward_data_wide_filters(backend: str) -> None:
    # The loader keeps a row's taps as bits (16 per dimension): a 1-D filter of 15 taps and a
    # 16 x 3 one (dilated, strided) use them all; 17 taps are refused.
    wide = ConvProblem(n=2, c=8, spatial=(40,), k=8, filter=(15,), pads=((7, 6),),
                       strides=(1,), dilations=(1,), layout="NWC", dtype="fp16",
                       direction="bwd_data")  # fmt: skip
    tall = ConvProblem(n=1, c=8, spatial=(37, 9), k=16, filter=(16, 3), pads=((8, 9), (1, 1)),
                       strides=(2, 1), dilations=(2, 1), layout="NHWC", dtype="fp16",
                       direction="bwd_data")  # fmt: skip
    for p in (wide, tall):
        assert PHASED.is_applicable(p, EMULATOR), PHASED.is_applicable(p, EMULATOR).reason
        check_data(backend, PHASED, p)
    over = dataclasses.replace(wide, filter=(17,), pads=((8, 8),))
    assert "16 taps" in PHASED.is_applicable(over, EMULATOR).reason
