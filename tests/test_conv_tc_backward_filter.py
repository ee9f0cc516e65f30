"""The tensor-core split-K backward filter (cudnnlite/solvers/conv/tc_bwd_filter.py), run
directly on every backend against the float64 reference: tiles and splits, NCHW / NCDHW
through the workspace, few input channels."""

from __future__ import annotations

import numpy as np
import pytest
from conv_backward_support import check_filter
from conv_tc_support import BWF, _bwf, _d3, _grouped, _layout

from cudnnlite.runtime.caps import EMULATOR
from cudnnlite.solvers.conv.tc_bwd_filter import TcSplitKConfig

# ------------------------------------------------------------------ backward filter
BWF_CASES = {
    "resnet_3x3": (_bwf(2, 16, 5, 24), TcSplitKConfig(64, 64, 32, 32, 32, 3, 1)),
    "stride2_split2": (_bwf(2, 8, (7, 5), 16, stride=2), TcSplitKConfig(64, 128, 32, 32, 64, 3, 2)),
    "dilation2_bf16": (_bwf(1, 16, 7, 8, dil=2, pad=2, dtype="bf16"), None),
    "align2": (_bwf(2, 6, 6, 10), None),
    "pointwise_k_over_blocks": (
        _bwf(1, 16, 9, 136, f=1, pad=0),
        TcSplitKConfig(128, 128, 32, 64, 64, 3, 1),
    ),
    "big_padding": (_bwf(1, 8, 2, 8, pad=3), None),
    # Output rows of 8 pixels (each thread's 4 or 2 pixels on one row: the loader's fast
    # path only) and a ragged last tile (3 * 7 * 8 = 168 pixels) in each of two splits.
    "rows_of_8_ragged_end": (
        _bwf(3, 16, (7, 8), 24),
        TcSplitKConfig(128, 128, 32, 64, 64, 3, 2),
    ),
    # The 64-deep tile: 8 pixels per thread, rows of 8 (fast path) and of 5 (both paths).
    "deep_tile_rows_of_8": (_bwf(3, 16, (7, 8), 24), TcSplitKConfig(128, 128, 64, 64, 64, 3, 2)),
    "deep_tile_rows_of_5": (_bwf(2, 8, 5, 16), TcSplitKConfig(128, 128, 64, 64, 64, 3, 1)),
    # The 64-deep 64x128 tile (4 warps, 8 pixels per thread too), both paths, split 2.
    "deep_64x128_rows_of_5_split2": (_bwf(3, 16, (7, 5), 24),
                                     TcSplitKConfig(64, 128, 64, 32, 64, 3, 2)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BWF_CASES))
def test_backward_filter(backend: str, case: str) -> None:
    p, cfg = BWF_CASES[case]
    check_filter(backend, BWF, p, config=cfg)


def test_backward_filter_splits_are_deterministic(backend: str) -> None:
    # Any split count gives the same fixed-order sum of each split: run twice, equal bits;
    # and every split count agrees with the reference.
    from conv_backward_support import rand, run_filter

    p = _bwf(2, 8, 6, 8)
    x, dy = rand(p.x_shape(), 0, "fp16"), rand(p.y_shape(), 1, "fp16")
    for splits in (1, 2):
        cfg = TcSplitKConfig(64, 64, 32, 32, 32, 3, splits)
        a, b = run_filter(backend, BWF, p, x, dy, cfg), run_filter(backend, BWF, p, x, dy, cfg)
        np.testing.assert_array_equal(a, b)


# ------------------------------------------------------------------ NCHW backward
NCHW_FILTER = {
    "fp16_3x3": (_layout(_bwf(2, 16, 5, 24)), None),
    "bf16_stride2_split2": (_layout(_bwf(2, 8, (7, 5), 16, stride=2, dtype="bf16")),
                            TcSplitKConfig(64, 128, 32, 32, 64, 3, 2)),
    "grouped": (_grouped("bwd_filter", "NCHW"), None),
    "tf32": (_layout(_bwf(1, 12, 5, 8, dtype="fp32")), None),
    "ncdhw": (_d3("bwd_filter"), None),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(NCHW_FILTER))
def test_backward_filter_nchw(backend: str, case: str) -> None:
    p, cfg = NCHW_FILTER[case]
    assert BWF.is_applicable(p, EMULATOR), BWF.is_applicable(p, EMULATOR).reason
    acc = 2.0 + 2.0**14 / (p.n * int(np.prod(p.out_spatial))) if p.dtype == "fp32" else 2.0
    check_filter(backend, BWF, p, config=cfg, acc_factor=acc)


FEW_FILTER = {
    "stem_nchw_split2": (_layout(_bwf(2, 3, 13, 16, f=7, pad=3, stride=2)),
                         TcSplitKConfig(64, 64, 32, 32, 32, 3, 2)),
    "c5_nhwc": (_bwf(2, 5, 6, 8), None),
    "tf32_c3_nchw": (_layout(_bwf(1, 3, 9, 8, f=5, pad=2, dtype="fp32")), None),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(FEW_FILTER))
def test_backward_filter_few_input_channels(backend: str, case: str) -> None:
    # x padded to one 16-byte copy of channels per tap in the workspace; the reduction
    # keeps the real channels (KCRS or KRSC).
    from cudnnlite.solvers.conv.tc_bwd_filter import few_channels

    p, cfg = FEW_FILTER[case]
    assert few_channels(p) and BWF.is_applicable(p, EMULATOR), BWF.is_applicable(p, EMULATOR)
    acc = 2.0 + 2.0**14 / (p.n * int(np.prod(p.out_spatial))) if p.dtype == "fp32" else 2.0
    check_filter(backend, BWF, p, config=cfg, acc_factor=acc)
