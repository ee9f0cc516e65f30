"""Multistage tensor-core implicit GEMM (cudnnlite/solvers/conv/tc_igemm.py), its
backward data (stride 1 on rotated filters; any stride by phases, tc_bwd_data.py) and its
split-K backward filter (tc_bwd_filter.py), run directly on every backend against the
float64 reference.

Tolerance (tests/conv_support.py): fp16/bf16 products are exact in fp32 and the sums are
fp32 in some order, so acc_factor 2 bounds the accumulation; then one rounding to the
output type (out_rtol). Shapes stay tiny: the emulator runs every MMA lane by lane.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conv_backward_support import check_data, check_filter

from cudnnlite import dtypes
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.problems.suites import RESNET50, VGG16, scaled
from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.solvers.conv.bwd_data import TcImplicitGemmSolver as TcBwdData
from cudnnlite.solvers.conv.common import Epilogue
from cudnnlite.solvers.conv.tc_bwd_data import TcBwdDataPhasedSolver
from cudnnlite.solvers.conv.tc_bwd_filter import TcBwdFilterSolver, TcSplitKConfig
from cudnnlite.solvers.conv.tc_igemm import (
    TILES,
    TILES_ALIGN2,
    TILES_TF32,
    TILES_TF32_ALIGN1,
    TcConfig,
    TcImplicitGemmSolver,
)

from conv_support import assert_conv_close, operands, run_solver

SOLVER = TcImplicitGemmSolver()
SHORTS = [d.short for d in dtypes.FP32_COMPUTE_TYPES]  # fp64: not applicable
SMALL = TcConfig(64, 64, 32, 32, 32, 4)
SMALL_TF32 = TcConfig(64, 64, 16, 32, 32, 4)


def conv(n, c, hw, k, f=3, pad=1, stride=1, dil=1, dtype="fp16", layout="NHWC"):
    hw = hw if isinstance(hw, tuple) else (hw, hw)
    math = "tf32" if dtype == "fp32" else "default"
    return ConvProblem(n=n, c=c, spatial=hw, k=k, filter=(f, f), pads=((pad, pad), (pad, pad)),
                       strides=(stride, stride), dilations=(dil, dil), layout=layout,
                       dtype=dtype, math=math)  # fmt: skip


def _acc_factor(problem: ConvProblem) -> float:
    # TF32 rounds each operand to 11 significant bits (relative error <= 2^-11 each), so
    # up to 2 * 2^-11 * mag on top of the fp32 sums: 2 + 2^14 / K in units of K * 2^-24.
    k_terms = problem.c_per_group * problem.filter_taps
    return 2.0 + (2.0**14 / k_terms if problem.dtype == "fp32" else 0.0)


def _check(backend, problem, config=None, seed=0, epilogue=None, activation=None, **extra):
    if problem.dtype not in SHORTS:
        pytest.skip("ml_dtypes missing")
    ops = operands(problem, seed, **extra)
    before = {name: a.copy() for name, a in ops.items()}
    config = config or (SMALL_TF32 if problem.dtype == "fp32" else SMALL)
    got = run_solver(backend, SOLVER, problem, ops, config, epilogue=epilogue)
    assert_conv_close(got, problem, ops, acc_factor=_acc_factor(problem), epilogue=epilogue,
                      activation=activation, what=SOLVER.name)  # fmt: skip
    for name, a in ops.items():
        np.testing.assert_array_equal(a, before[name], err_msg=name)


_REAL = [
    (RESNET50, "l1.conv2", 4),
    (RESNET50, "l2.conv1", 4),
    (RESNET50, "l3.conv2", 3),
    (VGG16, "conv3_1", 4),
]


@pytest.mark.parametrize("index", range(len(_REAL)), ids=[n for _, n, _ in _REAL])
def test_real_layers(backend: str, index: int) -> None:
    table, name, hw = _REAL[index]
    layer = next(layer for layer in table if layer.name == name)
    p = scaled(layer, hw).problem(n=1, dtype=("fp16", "bf16")[index % 2], layout="NHWC")
    _check(backend, p, seed=index)


ODD = {
    "c2_few_channels": conv(2, 2, (5, 7), 11),
    "c10_align2": conv(1, 10, 5, 9),
    "k1": conv(1, 8, 5, 1),
    "stride3": conv(1, 8, 8, 6, stride=3),
    "dilation2": conv(1, 16, 7, 5, dil=2, pad=2),
    "big_padding": conv(1, 8, 2, 4, f=3, pad=3),
    "input_smaller_than_filter": conv(1, 8, 2, 4, f=5, pad=2),
    "even_filter": conv(1, 8, 5, 3, f=2, pad=0),
    "pointwise": conv(2, 24, 3, 70, f=1, pad=0),
    "c_not_multiple_of_bk": conv(1, 40, 3, 9),
    "rows_and_k_over_several_blocks": conv(2, 8, 9, 70, f=1, pad=0),
}


@pytest.mark.parametrize("case", sorted(ODD))
def test_odd_shapes(backend: str, case: str) -> None:
    _check(backend, ODD[case])


def test_conv1d(backend: str) -> None:
    p = ConvProblem(n=2, c=8, spatial=(11,), k=5, filter=(3,), pads=((2, 1),), strides=(2,),
                    dilations=(1,), layout="NWC", dtype="bf16")  # fmt: skip
    _check(backend, p)


@pytest.mark.parametrize("tile", TILES, ids=lambda t: "x".join(map(str, t)))
def test_every_tile(backend: str, tile) -> None:
    # K and the pixel count straddle the tile edges; C = 72 spans several BK slices.
    _check(backend, conv(1, 72, 3, 20, dtype="fp16"), TcConfig(*tile))


@pytest.mark.parametrize("tile", TILES_ALIGN2, ids=lambda t: "x".join(map(str, t)))
def test_every_tile_with_4_byte_copies(backend: str, tile) -> None:
    _check(backend, conv(1, 10, 4, 12, dtype="bf16"), TcConfig(*tile))


# Few input channels (tc_conv_fwd_flat: x and w padded to one 16-byte copy per tap, whole
# taps per reduction slice): stems, odd and even C below the copy width, NCHW and NHWC
# (one 16-bit and one TF32 tile: each kernel is an emulator compile in CI).
FLAT = {
    "stem_fp16_nchw": (conv(2, 3, 13, 20, f=7, pad=3, stride=2, layout="NCHW"), None),
    "c1_dilated": (conv(1, 1, (9, 7), 12, f=5, pad=4, dil=2), None),
    "c5_k_over_two_blocks": (conv(2, 5, 6, 70, f=3), None),
    "c3_tf32_stem": (conv(1, 3, 11, 9, f=7, pad=3, stride=2, dtype="fp32", layout="NCHW"), None),
    "c6_split_k": (conv(1, 6, 5, 8, f=7, pad=3), TcConfig(64, 64, 32, 32, 32, 4, 2)),
    "c7_1x1": (conv(2, 7, 5, 9, f=1, pad=0), None),
}


@pytest.mark.parametrize("case", sorted(FLAT))
def test_few_input_channels(backend: str, case: str) -> None:
    from cudnnlite.solvers.conv.tc_igemm import flat

    p, cfg = FLAT[case]
    assert flat(p) and SOLVER.is_applicable(p, EMULATOR)
    _check(backend, p, cfg or SOLVER.default_config(p, EMULATOR))


def test_few_input_channels_epilogue_and_the_stem_dispatch() -> None:
    e = Epilogue(alpha=1.5, alpha2=0.5, act_mode=0, has_bias=True, has_z=True)
    _check("cpu", conv(1, 3, 9, 16, f=7, pad=3, stride=2), epilogue=e, activation="relu",
           bias=True, z=True)  # fmt: skip
    # ResNet-50's stem (C = 3, odd) in fp16 ranks the multistage engine first on sm_90 and
    # it now applies (the WMMA kernel took it before).
    from cudnnlite.dispatch import heuristics as h

    stem = conv(32, 3, 224, 64, f=7, pad=3, stride=2, layout="NCHW")
    assert h.conv_fwd_ranking(stem, for_sm(90))[0] == SOLVER.name
    assert SOLVER.is_applicable(stem, for_sm(90))
    assert SOLVER.default_config(stem, for_sm(90)).astuple() == (128, 64, 32, 64, 32, 4)


@pytest.mark.parametrize("k", [16, 12], ids=["vector_stores", "scalar_stores"])
def test_fused_epilogue(backend: str, k: int) -> None:
    e = Epilogue(alpha=2.0, alpha2=0.5, act_mode=0, has_bias=True, has_z=True)
    _check(backend, conv(1, 8, 5, k), epilogue=e, activation="relu", bias=True, z=True)


def test_residual_in_place(backend: str) -> None:
    # z is y: the kernel reads the residual before it writes the same element.
    from cudnnlite.runtime.select import backend_by_name
    from cudnnlite.solvers.conv.common import ConvTensors
    from cudnnlite.testing import to_backend, to_numpy

    from conv_support import reference

    p = conv(1, 8, 4, 16)
    ops = operands(p, 2, z=True)
    b = backend_by_name(backend)
    y = to_backend(ops["z"].copy(), backend)
    t = ConvTensors(x=to_backend(ops["x"], backend), w=to_backend(ops["w"], backend), y=y, z=y)
    e = Epilogue(alpha=1.0, alpha2=1.0, has_z=True)
    SOLVER.prepare(b, p, SMALL)(t, e, None)
    ref = reference(p, ops, e)
    np.testing.assert_allclose(to_numpy(y).astype(np.float64), ref, rtol=2e-3, atol=2e-2)


def test_random_schedule(backend: str, emulator_only: None, monkeypatch) -> None:
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "random")
    monkeypatch.setenv("CUDNNLITE_EMU_SEED", "5")
    _check(backend, conv(1, 24, 4, 12), TcConfig(128, 128, 32, 32, 64, 4))


@pytest.mark.parametrize("pad, layout", [(1, "NHWC"), (0, "NHWC"), (1, "NCHW")])
def test_backward_data_stride1(backend: str, pad: int, layout: str) -> None:
    p = dataclasses.replace(conv(1, 16, 5, 8, pad=pad, layout=layout), direction="bwd_data")
    check_data(backend, TcBwdData(), p, bias=True)


@pytest.mark.parametrize(
    "problem, caps, reason",
    [
        (dataclasses.replace(conv(1, 8, 4, 4, dtype="fp32"), math="default"), EMULATOR, "tf32"),
        (conv(1, 8, 4, 4, dtype="fp32"), for_sm(75), "sm_80"),
        (conv(1, 9, 4, 4), EMULATOR, "even channel count"),  # (C < 8: the few-channel path)
        (conv(1, 8, 4, 4, dtype="bf16"), for_sm(75), "sm_80"),
        (conv(1, 8, 4, 4), for_sm(70), "sm_75"),
        (dataclasses.replace(conv(1, 6, 4, 4), groups=2), EMULATOR, "per group"),
        (dataclasses.replace(conv(1, 8, 4, 4), direction="bwd_data"), EMULATOR, "fwd"),
        (conv(1, 8, 4, 4, dtype="fp64"), for_sm(90), "tensor cores: no fp64 MMA in this solver"),
    ],
)
def test_not_applicable_with_reason(problem, caps, reason: str) -> None:
    result = SOLVER.is_applicable(problem, caps)
    assert not result and reason in result.reason, result


def test_configs_and_names() -> None:
    p8, p2 = conv(1, 8, 4, 4), conv(1, 10, 4, 4)
    assert len([c for c in SOLVER.configs(p8, EMULATOR) if c.splits == 1]) == len(TILES)
    assert len([c for c in SOLVER.configs(p2, EMULATOR) if c.splits == 1]) == len(TILES_ALIGN2)
    for p in (p8, p2, conv(64, 256, 56, 256)):
        assert SOLVER.default_config(p, EMULATOR) in SOLVER.configs(p, EMULATOR)
    with pytest.raises(ValueError):
        TcConfig(48, 48, 32, 16, 16, 4)
    cfg = SOLVER.config_from_dict(TcConfig().to_dict())
    assert cfg == TcConfig() and cfg.label() == "128x128x32_w64x64_s4"
    # Every tile fits sm_80's shared memory; sm_75 (64 KiB) gets the ones that fit it.
    assert all(TcConfig(*t).smem_bytes() <= for_sm(80).max_shared_bytes for t in TILES)
    small = SOLVER.configs(p8, for_sm(75))
    assert small and all(c.smem_bytes() <= for_sm(75).max_shared_bytes for c in small)


# ------------------------------------------------------------------ backward filter
BWF = TcBwdFilterSolver()


def _bwf(n, c, hw, k, f=3, pad=1, stride=1, dil=1, dtype="fp16"):
    return dataclasses.replace(
        conv(n, c, hw, k, f, pad, stride, dil, dtype), direction="bwd_filter"
    )


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
}


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


def test_backward_filter_configs() -> None:
    p = _bwf(8, 64, 14, 128)
    options = BWF.configs(p, EMULATOR)
    assert {c.splits for c in options} >= {1, 2, 4}
    assert BWF.default_config(p, EMULATOR) in options
    assert BWF.default_config(p, for_sm(90)).splits >= 1
    cfg = TcSplitKConfig(64, 64, 32, 32, 32, 3, 4)
    assert BWF.workspace_size(p, cfg) == 4 * 4 * 128 * 64 * 9
    assert BWF.config_from_dict(cfg.to_dict()) == cfg
    with pytest.raises(ValueError):
        TcSplitKConfig(64, 64, 32, 32, 32, 3, 3)
    assert "even K/groups and C/groups" in BWF.is_applicable(_bwf(1, 6, 4, 5), EMULATOR).reason
    assert "no fp64 MMA" in BWF.is_applicable(_bwf(1, 8, 4, 8, dtype="fp64"), EMULATOR).reason
    nchw = dataclasses.replace(_bwf(1, 8, 4, 8), layout="NCHW")  # through the workspace
    assert BWF.is_applicable(nchw, EMULATOR)
    # one useful split of 16 pixels, its fp32 partials, then x and dy in NHWC (fp16, 256-byte
    # aligned each)
    assert BWF.workspace_size(nchw, cfg) == 4 * 8 * 72 + 256 + 256


def test_deep_tiles_only_where_two_blocks_fit() -> None:
    """The 64-deep tiles (96 KiB of stages) are the defaults of large layers on sm_90, where
    two blocks fit an SM, not on sm_80; backward filter takes them only for output rows its
    loader's 8 consecutive pixels per thread stay on (Q % 8 == 0 or Q >= 64)."""
    fwd = conv(32, 256, 56, 256)
    bwd = dataclasses.replace(fwd, direction="bwd_data")
    bwf = dataclasses.replace(fwd, direction="bwd_filter")
    for caps, deep in ((for_sm(90), 64), (for_sm(80), 32)):
        assert SOLVER.default_config(fwd, caps).block_k == deep
        assert PHASED.default_config(bwd, caps).block_k == deep
        assert BWF.default_config(bwf, caps).block_k == deep
    late = dataclasses.replace(conv(32, 256, 14, 256), direction="bwd_filter")  # Q = 14
    assert BWF.default_config(late, for_sm(90)).block_k == 32


def test_heuristics_put_the_multistage_engine_first_on_a_gpu() -> None:
    from cudnnlite.dispatch import heuristics as h

    fwd = conv(32, 64, 56, 64)
    assert h.conv_fwd_ranking(fwd, for_sm(90))[0] == h.TC
    assert h.TC not in h.conv_fwd_ranking(fwd, EMULATOR)  # emulator rankings unchanged
    assert h.conv_fwd_ranking(conv(32, 64, 56, 64, layout="NCHW"), for_sm(90))[0] == h.TC
    bwd = dataclasses.replace(fwd, direction="bwd_data")
    assert h.conv_bwd_data_ranking(bwd, for_sm(90))[:2] == [h.BWD_DATA_TC_PHASED, h.BWD_DATA_TC]
    bwf = dataclasses.replace(fwd, direction="bwd_filter")
    assert h.conv_bwd_filter_ranking(bwf, for_sm(90))[0] == h.BWD_FILTER_TC


@pytest.mark.parametrize("splits", [2, 4])
def test_forward_split_k(backend: str, splits: int) -> None:
    # 9 taps x 2 channel slices = 18 reduction tiles over the splits (uneven with 4: the
    # last split gets fewer), with the fused epilogue in the split-K finishing kernel.
    p = conv(1, 40, 3, 20)
    e = Epilogue(alpha=0.5, alpha2=1.0, act_mode=0, has_bias=True, has_z=True)
    cfg = TcConfig(64, 64, 32, 32, 32, 4, splits)
    assert SOLVER.workspace_size(p, cfg) == 4 * splits * 9 * 20
    _check(backend, p, cfg, epilogue=e, activation="relu", bias=True, z=True)


def test_forward_split_k_configs() -> None:
    late = conv(1, 512, 7, 512)  # ResNet-50 layer 4 at batch 1: 4 output tiles of 64x128
    cfg = SOLVER.default_config(late, for_sm(90))
    assert cfg.splits > 1 and cfg in SOLVER.configs(late, for_sm(90))
    assert SOLVER.default_config(late, EMULATOR).splits == 1
    with pytest.raises(ValueError):
        TcConfig(128, 128, 32, 64, 64, 4, 2)  # split-K only with the smaller tiles
    assert all(c.splits == 1 for c in SOLVER.configs(conv(1, 8, 3, 8, f=1, pad=0), EMULATOR))


# ------------------------------------------------------------------ TF32 (fp32, math="tf32")


@pytest.mark.parametrize(
    "tile", TILES_TF32 + TILES_TF32_ALIGN1, ids=lambda t: "x".join(map(str, t))
)
def test_tf32_every_tile(backend: str, tile) -> None:
    c = 5 if tile in TILES_TF32_ALIGN1 else 20  # C = 5 takes 4-byte copies
    _check(backend, conv(1, c, 4, 20, dtype="fp32"), TcConfig(*tile))


def test_tf32_odd_shapes_and_epilogue(backend: str) -> None:
    e = Epilogue(alpha=1.5, alpha2=0.5, act_mode=0, has_bias=True, has_z=True)
    _check(backend, conv(2, 12, (5, 3), 9, stride=2), epilogue=e, activation="relu", bias=True,
           z=True)  # fmt: skip
    _check(
        backend, conv(1, 8, 6, 12, dtype="fp32", dil=2, pad=2), TcConfig(64, 64, 16, 32, 32, 4, 2)
    )


def test_tf32_really_rounds(backend: str) -> None:
    # The result differs from exact fp32 by about 2^-11 relative: the operands went
    # through TF32 (rounded to nearest, as the WMMA solver's), not an fp32 path.
    from conv_support import reference

    p = conv(1, 16, 4, 16, dtype="fp32")
    ops = operands(p, 3)
    got = run_solver(backend, SOLVER, p, ops, SMALL_TF32)
    assert np.max(np.abs(got - reference(p, ops))) > 1e-5


def test_tf32_backward_data_stride1(backend: str) -> None:
    p = dataclasses.replace(conv(1, 8, 5, 12, dtype="fp32"), direction="bwd_data")
    # The rotated problem reduces over K * R * S: TF32's bound in those units.
    check_data(backend, TcBwdData(), p, acc_factor=2.0 + 2.0**14 / (p.k * p.filter_taps))


# ------------------------------------------------------------------ backward data, any stride
PHASED = TcBwdDataPhasedSolver()


def _bwd(n, c, hw, k, f=3, pad=1, stride=1, dil=1, dtype="fp16"):
    return dataclasses.replace(conv(n, c, hw, k, f, pad, stride, dil, dtype), direction="bwd_data")


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
    "tile", [(128, 128, 64, 64, 64, 3), (128, 128, 32, 64, 64, 4), (64, 128, 32, 32, 64, 4)]
)
def test_backward_data_tiles(backend: str, tile) -> None:
    from conv_backward_support import rand, ref_data, run_data

    # K = 20 takes 4-byte copies; the 64-deep tile has 16-byte ones only (K = 24).
    p = _bwd(1, 72, 5, 24 if tile[2] == 64 else 20, stride=2)
    dy, w = rand(p.y_shape(), 0, "fp16"), rand(p.w_shape(), 1, "fp16")
    got = run_data(backend, PHASED, p, dy, w, config=TcConfig(*tile))
    ref = ref_data(p, dy, w)
    np.testing.assert_allclose(got.astype(np.float64), ref, rtol=2e-3, atol=5e-3)


def test_backward_data_reasons() -> None:
    fp32 = dataclasses.replace(_bwd(1, 8, 4, 8, dtype="fp32"), math="default")
    assert "math='tf32'" in PHASED.is_applicable(fp32, EMULATOR).reason
    assert "tf32 needs sm_80" in PHASED.is_applicable(_bwd(1, 8, 4, 8, dtype="fp32"),
                                                      for_sm(75)).reason  # fmt: skip
    assert "even K/groups and C/groups" in PHASED.is_applicable(_bwd(1, 8, 4, 7), EMULATOR).reason
    assert "no fp64 MMA" in PHASED.is_applicable(_bwd(1, 8, 4, 8, dtype="fp64"), EMULATOR).reason
    p = _bwd(4, 64, 28, 64, stride=2)
    assert PHASED.default_config(p, for_sm(90)) in PHASED.configs(p, for_sm(90))
    assert PHASED.workspace_size(p, PHASED.default_config(p, EMULATOR)) == 0


# ------------------------------------------------------------------ NCHW (layout conversion)
NCHW_CASES = {
    "resnet_3x3": conv(2, 16, (5, 6), 24, layout="NCHW"),
    "stride2_bf16": conv(1, 8, 7, 12, stride=2, dtype="bf16", layout="NCHW"),
    "align2_k_odd": conv(1, 6, 5, 9, layout="NCHW"),
    "tf32_c3_stem": conv(1, 3, 6, 8, f=3, dtype="fp32", layout="NCHW"),
    "pointwise": conv(2, 24, 3, 70, f=1, pad=0, layout="NCHW"),
}


@pytest.mark.parametrize("case", sorted(NCHW_CASES))
def test_nchw_through_the_layout_conversion(backend: str, case: str) -> None:
    _check(backend, NCHW_CASES[case])


def test_nchw_epilogue_and_split_k(backend: str) -> None:
    e = Epilogue(alpha=2.0, alpha2=0.5, act_mode=0, has_bias=True, has_z=True)
    p = conv(1, 40, 3, 20, layout="NCHW")
    _check(backend, p, epilogue=e, activation="relu", bias=True, z=True)
    _check(backend, p, TcConfig(64, 64, 32, 32, 32, 4, 4), epilogue=e, activation="relu",
           bias=True, z=True)  # fmt: skip


def test_nchw_conv1d_and_workspace(backend: str) -> None:
    p = ConvProblem(n=2, c=8, spatial=(11,), k=6, filter=(3,), pads=((1, 1),), strides=(2,),
                    dilations=(1,), layout="NCW", dtype="fp16")  # fmt: skip
    _check(backend, p)
    # x (2*8*11 halves = 352 bytes) and w (6*8*3 halves = 288 bytes), each rounded up to
    # a multiple of 256 bytes.
    assert SOLVER.workspace_size(p, SMALL) == 512 + 512
    assert SOLVER.workspace_size(dataclasses.replace(p, layout="NWC"), SMALL) == 0


# ------------------------------------------------------------------ TF32 backward
# Both backward kernels read a tile of reduction rows that ldmatrix.trans cannot move in
# 32-bit elements: scalar fragment loads from padded rows (tc_gemm.cuh). TF32 rounds each
# operand to 11 significant bits: 2 * 2^-11 * mag on top of the fp32 sums, i.e. acc_factor
# 2 + 2^14 / T in units of T * 2^-24 (T: terms per output).
def _tf32_acc(terms: int) -> float:
    return 2.0 + 2.0**14 / terms


TF32_BWF_CASES = {
    "resnet_3x3": (_bwf(2, 16, 5, 24, dtype="fp32"), TcSplitKConfig(64, 64, 16, 32, 32, 4, 1)),
    "stride2_split2": (
        _bwf(2, 8, (7, 5), 16, stride=2, dtype="fp32"),
        TcSplitKConfig(64, 128, 16, 64, 32, 4, 2),
    ),
    "pointwise_k_over_blocks": (
        _bwf(1, 16, 9, 136, f=1, pad=0, dtype="fp32"),
        TcSplitKConfig(128, 128, 16, 64, 64, 4, 1),
    ),
    "align1_odd_k_and_c": (_bwf(2, 5, 6, 7, dtype="fp32"), None),
    "dilation2_big_padding": (_bwf(1, 12, 3, 8, dil=2, pad=3, dtype="fp32"), None),
}


@pytest.mark.parametrize("case", sorted(TF32_BWF_CASES))
def test_tf32_backward_filter(backend: str, case: str) -> None:
    p, cfg = TF32_BWF_CASES[case]
    check_filter(backend, BWF, p, config=cfg,
                 acc_factor=_tf32_acc(p.n * int(np.prod(p.out_spatial))))  # fmt: skip


TF32_BWD_DATA_CASES = {
    "stride1": (_bwd(2, 16, (5, 6), 24, dtype="fp32"), None),
    "stride2_128x64": (_bwd(2, 8, (7, 5), 16, stride=2, dtype="fp32"),
                       TcConfig(128, 64, 16, 64, 32, 4)),
    "stride3_phases_without_taps": (_bwd(1, 8, (9, 8), 8, f=2, pad=0, stride=3, dtype="fp32"),
                                    TcConfig(64, 128, 16, 64, 32, 4)),
    "align1_odd": (_bwd(2, 5, 6, 7, stride=2, dtype="fp32"), None),
    "big_tile": (_bwd(1, 72, 5, 20, stride=2, dtype="fp32"), TcConfig(128, 128, 16, 64, 64, 4)),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(TF32_BWD_DATA_CASES))
def test_tf32_backward_data_any_stride(backend: str, case: str) -> None:
    from conv_backward_support import rand, ref_data, run_data

    p, cfg = TF32_BWD_DATA_CASES[case]
    if cfg is None:
        check_data(backend, PHASED, p, bias=True, acc_factor=_tf32_acc(p.k * p.filter_taps))
        return
    dy, w = rand(p.y_shape(), 0, "fp32"), rand(p.w_shape(), 1, "fp32")
    got = run_data(backend, PHASED, p, dy, w, config=cfg)
    ref = ref_data(p, dy, w)
    mag = ref_data(p, np.abs(dy.astype(np.float64)), np.abs(w.astype(np.float64)))
    np.testing.assert_array_less(np.abs(got - ref), 2.0**-10 * mag + 1e-6)  # TF32, 2 operands


def test_tf32_backward_really_rounds(backend: str) -> None:
    # Both results differ from exact fp32 by about 2^-11 relative: TF32 MMAs ran.
    from conv_backward_support import rand, ref_data, ref_filter, run_data, run_filter

    pf = _bwf(1, 16, 4, 16, dtype="fp32")
    x, dy = rand(pf.x_shape(), 0, "fp32"), rand(pf.y_shape(), 1, "fp32")
    got = run_filter(backend, BWF, pf, x, dy, TcSplitKConfig(64, 64, 16, 32, 32, 4, 1))
    assert np.max(np.abs(got - ref_filter(pf, x, dy))) > 1e-5
    pd = _bwd(1, 16, 4, 16, stride=2, dtype="fp32")
    dy, w = rand(pd.y_shape(), 0, "fp32"), rand(pd.w_shape(), 1, "fp32")
    got = run_data(backend, PHASED, pd, dy, w, config=TcConfig(64, 64, 16, 32, 32, 4))
    assert np.max(np.abs(got - ref_data(pd, dy, w))) > 1e-5


def test_tf32_backward_configs_and_heuristics() -> None:
    from cudnnlite.dispatch import heuristics as h
    from cudnnlite.solvers.conv.tc_bwd_data import BWD_TILES_TF32
    from cudnnlite.solvers.conv.tc_bwd_filter import TILES_TF32 as BWF_TF32

    pf = _bwf(8, 64, 14, 128, dtype="fp32")
    assert {c.tile() for c in BWF.configs(pf, for_sm(90))} == set(BWF_TF32)
    assert BWF.default_config(pf, for_sm(90)).tile() in BWF_TF32
    assert {c.tile() for c in BWF.configs(_bwf(1, 6, 4, 5, dtype="fp32"), EMULATOR)} == {
        (64, 64, 16, 32, 32, 4)
    }  # 4-byte copies: one float, any K and C
    # padded fp32 rows: 4 stages x 16 rows x (128 + 8 + 128 + 8) floats
    assert TcSplitKConfig(128, 128, 16, 64, 64, 4).smem_bytes(4) == 4 * 16 * 272 * 4
    pd = _bwd(8, 64, 14, 128, stride=2, dtype="fp32")
    assert {c.astuple() for c in PHASED.configs(pd, for_sm(90))} == set(BWD_TILES_TF32)
    assert h.conv_bwd_filter_ranking(pf, for_sm(90))[0] == h.BWD_FILTER_TC
    assert h.BWD_FILTER_WMMA not in h.conv_bwd_filter_ranking(pf, for_sm(90))
    assert h.conv_bwd_data_ranking(pd, for_sm(90))[0] == h.BWD_DATA_TC_PHASED
    default = dataclasses.replace(pf, math="default")
    assert h.BWD_FILTER_TC not in h.conv_bwd_filter_ranking(default, for_sm(90))


def test_tf32_backward_through_the_public_functions() -> None:
    # math="tf32" reaches the backward functions' problems, so their TF32 solvers apply
    # (forced here: the emulator's rankings keep the CUDA-core solvers first).
    from conv_backward_support import rand, ref_data, ref_filter

    import cudnnlite as cl
    from cudnnlite.errors import BadParamError, NotSupportedError
    from cudnnlite.ops import conv_backward as cb

    p = _bwf(2, 8, 6, 12, stride=2, dtype="fp32")
    x, dy = rand(p.x_shape(), 0, "fp32"), rand(p.y_shape(), 1, "fp32")
    w = rand(p.w_shape(), 2, "fp32")
    kw = dict(stride=2, padding=1, layout="NHWC")
    dw = cl.conv2d_backward_filter(x, dy, p.w_shape(), math="tf32",
                                   algo="conv_bwd_filter_tc_implicit_gemm", **kw)  # fmt: skip
    assert cb.last_kernel_names()[0].endswith("_tf32")
    mag = ref_filter(p, np.abs(x.astype(np.float64)), np.abs(dy.astype(np.float64)))
    np.testing.assert_array_less(np.abs(dw - ref_filter(p, x, dy)), 2.0**-10 * mag + 1e-6)
    dx = cl.conv2d_backward_data(dy, w, p.x_shape(), math="tf32",
                                 algo="conv_bwd_data_tc_implicit_gemm_phased", **kw)  # fmt: skip
    mag = ref_data(p, np.abs(dy.astype(np.float64)), np.abs(w.astype(np.float64)))
    np.testing.assert_array_less(np.abs(dx - ref_data(p, dy, w)), 2.0**-10 * mag + 1e-6)
    # conv_transpose2d is backward data: x of the transposed conv is dy here
    wt = rand((12, 3, 3, 8), 3, "fp32")  # (C_in, R, S, C_out) in NHWC
    y = cl.conv_transpose2d(dy, wt, stride=2, padding=1, output_padding=1, layout="NHWC",
                            math="tf32", algo="conv_bwd_data_tc_implicit_gemm_phased")  # fmt: skip
    exact = cl.conv_transpose2d(dy, wt, stride=2, padding=1, output_padding=1, layout="NHWC")
    np.testing.assert_allclose(y, exact, rtol=0, atol=2.0**-9 * float(np.abs(exact).max()))
    assert np.abs(y - exact).max() > 0  # TF32 ran
    with pytest.raises(NotSupportedError, match="math='tf32'"):
        cl.conv2d_backward_filter(x, dy, p.w_shape(), algo="conv_bwd_filter_tc_implicit_gemm",
                                  **kw)  # fmt: skip
    for bad, dtype in (("tf32", np.float16), ("fast", np.float32)):
        before = x.copy()
        with pytest.raises(BadParamError, match="math"):
            cl.conv2d_backward_filter(x.astype(dtype), dy.astype(dtype), p.w_shape(), math=bad,
                                      **kw)  # fmt: skip
        with pytest.raises(BadParamError, match="math"):
            cl.conv_transpose2d(dy.astype(dtype), wt.astype(dtype), math=bad, layout="NHWC")
        np.testing.assert_array_equal(x, before)


def _odd_view(a: np.ndarray) -> np.ndarray:
    """A C-contiguous copy of ``a`` one element past a 16-byte boundary (a slice of a
    larger buffer, as user code makes them): 16-byte cp.async copies of it would fault."""
    buf = np.empty(a.size + 8, a.dtype)
    start = next(i for i in range(1, 9) if (buf.ctypes.data + i * a.itemsize) % 16)
    view = buf[start : start + a.size].reshape(a.shape)
    view[...] = a
    assert view.flags.c_contiguous and view.ctypes.data % 16
    return view


@pytest.mark.parametrize("dtype", ["fp16", "fp32"])
def test_operands_at_odd_addresses(dtype: str) -> None:
    """Contiguous views at addresses the 16-byte copies cannot take are realigned by the
    ops (a copy, reported as host work) in every direction; the results are those of the
    aligned operands, and an out= at an odd address is written through the epilogue's
    scalar path."""
    from conv_backward_support import rand

    import cudnnlite as cl

    math = "tf32" if dtype == "fp32" else "default"
    p = _bwf(2, 16, 5, 16, stride=2, dtype=dtype)
    x, dy, w = rand(p.x_shape(), 0, dtype), rand(p.y_shape(), 1, dtype), rand(p.w_shape(), 2, dtype)
    b, z = rand((16,), 3, dtype), rand(p.y_shape(), 4, dtype)
    kw = dict(stride=2, padding=1, layout="NHWC", math=math)
    fwd = dict(algo="conv_fwd_tc_implicit_gemm", **kw)
    want = cl.conv2d(x, w, b, z=z, **fwd)
    got = cl.conv2d(_odd_view(x), _odd_view(w), _odd_view(b), z=_odd_view(z), **fwd)
    np.testing.assert_array_equal(got, want)
    out = _odd_view(np.zeros_like(want))
    cl.conv2d(x, w, b, z=z, out=out, **fwd)
    np.testing.assert_array_equal(out, want)
    bwd = dict(algo="conv_bwd_data_tc_implicit_gemm_phased", **kw)
    np.testing.assert_array_equal(cl.conv2d_backward_data(_odd_view(dy), _odd_view(w),
                                                          p.x_shape(), **bwd),
                                  cl.conv2d_backward_data(dy, w, p.x_shape(), **bwd))  # fmt: skip
    bwf = dict(algo="conv_bwd_filter_tc_implicit_gemm", **kw)
    np.testing.assert_array_equal(cl.conv2d_backward_filter(_odd_view(x), _odd_view(dy),
                                                            p.w_shape(), **bwf),
                                  cl.conv2d_backward_filter(x, dy, p.w_shape(), **bwf))  # fmt: skip


# ------------------------------------------------------------------ NCHW backward
# The backward kernels read NHWC / KRSC: NCHW problems convert dy and w (data) or x and dy
# (filter) into the workspace, and write dx in NCHW from the epilogue (data) or dw in KCRS
# from the split reduction (filter).
def _layout(p: ConvProblem, layout: str = "NCHW") -> ConvProblem:
    return dataclasses.replace(p, layout=layout)


def _grouped(direction: str, layout: str, dtype: str = "fp16") -> ConvProblem:
    return ConvProblem(n=2, c=16, spatial=(5, 4), k=24, filter=(3, 3), pads=((1, 1), (1, 1)),
                       strides=(2, 1), dilations=(1, 1), groups=2, layout=layout, dtype=dtype,
                       direction=direction)  # fmt: skip


def _d3(direction: str) -> ConvProblem:
    return ConvProblem(n=1, c=8, spatial=(3, 5, 4), k=16, filter=(2, 3, 3),
                       pads=((0, 1), (1, 1), (1, 1)), strides=(1, 2, 1), dilations=(1, 1, 1),
                       layout="NCDHW", dtype="fp16", direction=direction)  # fmt: skip


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


def test_nchw_backward_ranks_the_tensor_cores_first_on_a_gpu() -> None:
    from cudnnlite.dispatch import heuristics as h
    from cudnnlite.dispatch import registry

    for direction, rank in (("bwd_data", h.conv_bwd_data_ranking),
                            ("bwd_filter", h.conv_bwd_filter_ranking)):  # fmt: skip
        p = dataclasses.replace(conv(32, 128, 28, 128, stride=2, layout="NCHW"),
                                direction=direction)  # fmt: skip
        first = next(n for n in rank(p, for_sm(90)) if registry.get(n).is_applicable(p, for_sm(90)))
        assert first in (PHASED.name, BWF.name), first


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
