"""The forward convolution on Hopper's warpgroup MMA (cudnnlite/solvers/conv/tc_wgmma.py),
fp16/bf16, run directly against the float64 reference on the emulator (its exact,
asynchronous model of wgmma) and on an sm_90 GPU: real layers, odd shapes, every tile,
groups, the fused epilogue, split-K, NCHW through the layout conversion, 1-D, 3-D; backward
data through it on rotated filters; and where they apply. Tolerances:
tests/conv_tc_support.py's (fp16/bf16 products exact in fp32, fp32 sums in some order:
acc_factor 2, then one rounding to the output type)."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conv_backward_support import check_data
from conv_tc_support import SHORTS, _d3, conv

from cudnnlite.problems.conv import ConvProblem
from cudnnlite.problems.suites import RESNET50, scaled
from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.solvers.conv.bwd_data import TcWgmmaSolver as TcWgmmaBwdData
from cudnnlite.solvers.conv.common import Epilogue
from cudnnlite.solvers.conv.tc_wgmma import WG_TILES, TcWgmmaSolver, WgConfig
from cudnnlite.testing import has_wgmma_arch

from conv_support import assert_conv_close, operands, run_solver

SOLVER = TcWgmmaSolver()
SMALL = WgConfig.of(64, 64, 4)


@pytest.fixture
def backend(backend: str) -> str:
    """conftest's backend where wgmma exists (testing.has_wgmma_arch)."""
    if not has_wgmma_arch(backend):
        pytest.skip("wgmma needs sm_90")
    return backend


def _check(backend, problem, config=SMALL, seed=0, epilogue=None, activation=None, **extra):
    if problem.dtype not in SHORTS:
        pytest.skip("ml_dtypes missing")
    assert SOLVER.is_applicable(problem, EMULATOR), SOLVER.is_applicable(problem, EMULATOR)
    ops = operands(problem, seed, **extra)
    before = {name: a.copy() for name, a in ops.items()}
    got = run_solver(backend, SOLVER, problem, ops, config, epilogue=epilogue)
    assert_conv_close(got, problem, ops, acc_factor=2.0, epilogue=epilogue,
                      activation=activation, what=f"{SOLVER.name} {config.label()}")  # fmt: skip
    for name, a in ops.items():
        np.testing.assert_array_equal(a, before[name], err_msg=name)


def test_real_layers(backend: str) -> None:
    for i, name in enumerate(("l1.conv2", "l3.conv2")):
        layer = next(layer for layer in RESNET50 if layer.name == name)
        p = scaled(layer, 3).problem(n=1, dtype=("fp16", "bf16")[i], layout="NHWC")
        _check(backend, p, seed=i)


ODD = {
    "stride3_k1": conv(1, 8, 8, 1, stride=3),
    "dilation2_big_padding": conv(1, 16, 5, 5, dil=2, pad=3),
    "even_filter_input_smaller": conv(1, 8, 2, 3, f=4, pad=1),
    "pointwise_k_over_blocks": conv(2, 24, 3, 70, f=1, pad=0),
    "c_not_multiple_of_bk": conv(1, 72, 3, 9, f=3, pad=0),
}


@pytest.mark.parametrize("case", sorted(ODD))
def test_odd_shapes(backend: str, case: str) -> None:
    _check(backend, ODD[case])


@pytest.mark.parametrize("tile", WG_TILES, ids=lambda t: "x".join(map(str, t)))
def test_every_tile(backend: str, tile) -> None:
    # rows over two blocks of 64 (N*P*Q = 130), K over two of 64: every warpgroup, edge
    # rows and columns of every tile shape.
    _check(backend, conv(2, 16, (5, 13), 70, dtype="bf16" if tile[1] == 64 else "fp16"),
           WgConfig.of(*tile))  # fmt: skip


def test_groups_1d_and_nchw(backend: str) -> None:
    grouped = dataclasses.replace(conv(1, 32, 5, 48), groups=2)  # 16 in, 24 out per group
    _check(backend, grouped, WgConfig.of(64, 128, 4))
    p1 = ConvProblem(n=2, c=8, spatial=(11,), k=5, filter=(3,), pads=((2, 1),), strides=(2,),
                     dilations=(1,), layout="NWC", dtype="bf16")  # fmt: skip
    _check(backend, p1)
    _check(backend, conv(1, 16, (4, 5), 12, stride=2, layout="NCHW"))


def test_3d(backend: str) -> None:
    # NCDHW through the conversion, strides (1, 2, 1), a depth tap pair; and NDHWC bf16.
    _check(backend, _d3("fwd"))
    p = ConvProblem(n=1, c=16, spatial=(3, 4, 5), k=24, filter=(3, 1, 3),
                    pads=((1, 1), (0, 0), (2, 0)), strides=(1, 1, 2), dilations=(2, 1, 1),
                    layout="NDHWC", dtype="bf16")  # fmt: skip
    _check(backend, p, WgConfig.of(128, 64, 4))


def test_fused_epilogue_and_split_k(backend: str) -> None:
    e = Epilogue(alpha=2.0, alpha2=0.5, act_mode=0, has_bias=True, has_z=True)
    p = conv(1, 136, 3, 20)  # 9 taps x 3 slices: 27 reduction tiles
    _check(backend, p, epilogue=e, activation="relu", bias=True, z=True)
    split = WgConfig.of(64, 64, 4, 4)
    assert split in SOLVER.configs(p, EMULATOR)
    assert SOLVER.workspace_size(p, split) == 4 * 4 * 9 * 20
    _check(backend, p, split, epilogue=e, activation="relu", bias=True, z=True)


def test_applicability() -> None:
    ok = conv(1, 16, 5, 8)
    assert SOLVER.is_applicable(ok, for_sm(90))
    assert SOLVER.is_applicable(ok, EMULATOR)
    for caps in (for_sm(80), for_sm(89), for_sm(100)):
        assert "needs wgmma (sm_90)" in SOLVER.is_applicable(ok, caps).reason
    assert "fp16 and bf16" in SOLVER.is_applicable(conv(1, 16, 5, 8, dtype="fp32"),
                                                   EMULATOR).reason  # fmt: skip
    assert "multiple of 8" in SOLVER.is_applicable(conv(1, 12, 5, 8), EMULATOR).reason
    assert "multiple of 8" in SOLVER.is_applicable(conv(1, 3, 5, 8), EMULATOR).reason
    bwd = dataclasses.replace(ok, direction="bwd_data")
    assert "direction" in SOLVER.is_applicable(bwd, EMULATOR).reason


def test_configs_and_defaults() -> None:
    big = conv(32, 64, 56, 256)  # 100k output pixels, 256 channels
    assert SOLVER.default_config(big, for_sm(90)) == WgConfig.of(128, 256, 4)
    mid = conv(32, 64, 56, 128)
    assert SOLVER.default_config(mid, for_sm(90)) == WgConfig.of(128, 128, 3)
    # The block shape decides, not the table's order: 64 x 128 for a small wide layer.
    assert SOLVER.default_config(conv(1, 64, 56, 128), EMULATOR) == WgConfig.of(64, 128, 4)
    narrow = conv(32, 64, 56, 64)
    assert SOLVER.default_config(narrow, for_sm(90)) == WgConfig.of(128, 64, 4)
    # A late layer at batch 1: few tiles, so split-K on a GPU (not on the emulator).
    late = conv(1, 512, 7, 512)
    assert SOLVER.default_config(late, for_sm(90)).splits > 1
    assert SOLVER.default_config(late, EMULATOR).splits == 1
    for c in SOLVER.configs(big, for_sm(90)):
        assert c.smem_bytes() <= for_sm(90).max_shared_bytes
        assert c.threads == c.block_m * 2
    with pytest.raises(ValueError, match="wgmma tile"):
        WgConfig.of(256, 128, 3)
    with pytest.raises(ValueError, match="wgmma tile"):
        WgConfig.of(128, 256, 3)
    name = SOLVER.prepare(backend_by_name("cpu"), mid, WgConfig.of(128, 128, 3)).kernel_names
    assert name == ["tc_wgmma_fwd_128x128x64_w16x128_s3_a8_nhwc_fp16"]


# ------------------------------------------------------------------ backward data
BWD = TcWgmmaBwdData()


@pytest.mark.parametrize(
    "case",
    [
        dict(n=2, c=24, hw=(5, 6), k=16),  # ResNet-like 3x3, pad 1
        dict(n=1, c=9, hw=(4, 4), k=8, f=2, pad=0, dtype="bf16"),  # even filter, odd C
        dict(n=1, c=16, hw=(6, 5), k=24, dil=2, pad=2, layout="NCHW"),
    ],
    ids=["resnet_3x3", "even_filter_bf16", "dilated_nchw"],
)
def test_backward_data_on_rotated_filters(backend: str, case: dict) -> None:
    layout = case.pop("layout", "NHWC")
    p = dataclasses.replace(conv(**case), direction="bwd_data", layout=layout)
    if p.dtype not in SHORTS:
        pytest.skip("ml_dtypes missing")
    assert BWD.is_applicable(p, EMULATOR)
    check_data(backend, BWD, p, config=BWD.default_config(p, EMULATOR))


def test_backward_data_applicability_and_ranking() -> None:
    from cudnnlite.dispatch import heuristics as h

    p = dataclasses.replace(conv(32, 64, 56, 64), direction="bwd_data")
    want = [h.BWD_DATA_WGMMA, h.BWD_DATA_TC_PHASED, h.BWD_DATA_TC]
    assert h.conv_bwd_data_ranking(p, for_sm(90))[:3] == want
    assert h.BWD_DATA_WGMMA not in h.conv_bwd_data_ranking(p, for_sm(80))
    strided = dataclasses.replace(conv(1, 16, 8, 16, stride=2), direction="bwd_data")
    assert "stride 1" in BWD.is_applicable(strided, EMULATOR).reason
    odd_k = dataclasses.replace(conv(1, 16, 8, 12), direction="bwd_data")
    assert "multiple of 8" in BWD.is_applicable(odd_k, EMULATOR).reason
    assert "wgmma" in BWD.is_applicable(p, for_sm(80)).reason


def test_grouped_layers_rank_wgmma_first_only_with_wide_groups() -> None:
    """Groups of 64+ channels each: the wgmma forward first on sm_90; narrower groups: the
    mma.sync engine, whose packed kernels share a tile among several groups."""
    from cudnnlite.dispatch import heuristics as h

    wide = dataclasses.replace(conv(32, 256, 28, 256), groups=2)  # 128 per group
    narrow = dataclasses.replace(conv(32, 128, 28, 128), groups=8)  # 16 per group
    assert h.conv_fwd_ranking(wide, for_sm(90))[:2] == [h.WGMMA, h.TC]
    assert h.conv_fwd_ranking(narrow, for_sm(90))[0] == h.TC
    assert h.BWD_DATA_WGMMA not in h.conv_bwd_data_ranking(
        dataclasses.replace(narrow, direction="bwd_data"), for_sm(90)
    )
