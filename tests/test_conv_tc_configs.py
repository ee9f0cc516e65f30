"""The tensor-core convolution solvers' configs, applicability reasons, default tiles and
rankings (no kernel runs)."""

from __future__ import annotations

import dataclasses

import pytest
from conv_tc_support import BWF, PHASED, SOLVER, _bwd, _bwf, conv

from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.solvers.conv.tc_bwd_filter import TcSplitKConfig
from cudnnlite.solvers.conv.tc_igemm import TILES, TILES_ALIGN2, TcConfig


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


def test_default_slice_depth_follows_the_channels() -> None:
    # A block shape's 64-deep tile where a tap's channels fill 64-deep slices (fewer
    # instructions per MMA), the 32-deep one where 64 would pad more (32, 96 channels).
    sm90 = for_sm(90)
    depth = {c: SOLVER.default_config(conv(32, c, 14, 256), sm90).block_k for c in (64, 96, 256)}
    assert depth == {64: 64, 96: 32, 256: 64}
    big = {c: SOLVER.default_config(conv(32, c, 56, 64), sm90) for c in (32, 64)}
    assert [(big[c].block_m, big[c].block_n, big[c].block_k) for c in (32, 64)] == [
        (128, 64, 32), (128, 64, 64)]  # fmt: skip
    assert SOLVER.default_config(conv(32, 96, 56, 256), sm90).block_k == 32  # 128x128 too
    # backward data reduces over dy's channels (K)
    bwd = {k: dataclasses.replace(conv(32, 256, 56, k), direction="bwd_data") for k in (96, 256)}
    assert {k: PHASED.default_config(p, sm90).block_k for k, p in bwd.items()} == {96: 32, 256: 64}
    # and takes the forward's block shapes: 128 x 64 for a large layer of 64 dx channels,
    # 64 x 128 for a small one of many (ResNet-50's 14 x 14 layers at batch 32)
    for c, hw, shape in ((64, 56, (128, 64, 64)), (256, 14, (64, 128, 64)), (64, 14, (64, 64, 32))):
        cfg = PHASED.default_config(dataclasses.replace(conv(32, c, hw, 256), direction="bwd_data"),
                                    sm90)  # fmt: skip
        assert (cfg.block_m, cfg.block_n, cfg.block_k) == shape, (c, hw, cfg)


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
    # sm_120 (RTX 50xx: 99 KiB per block, as sm_86/89): no tile over it
    caps = for_sm(120)
    for solver, p in ((SOLVER, fwd), (PHASED, bwd), (BWF, bwf)):
        configs = solver.configs(p, caps)
        assert configs and all(c.smem_bytes() <= caps.max_shared_bytes for c in configs)
        assert solver.default_config(p, caps) in configs
    # Fewer than 128 filters (ResNet-50's stage 1): the 64x128 tiles, 64-deep under the
    # same rule (72 KiB of stages: two blocks fit sm_80 too).
    for q, caps, deep in ((56, for_sm(90), 64), (56, for_sm(80), 64), (14, for_sm(90), 32)):
        cfg = BWF.default_config(dataclasses.replace(conv(32, 64, q, 64), direction="bwd_filter"),
                                 caps)  # fmt: skip
        assert (cfg.block_m, cfg.block_n, cfg.block_k) == (64, 128, deep), (q, caps, cfg)


def test_heuristics_put_the_multistage_engine_first_on_a_gpu() -> None:
    from cudnnlite.dispatch import heuristics as h

    fwd = conv(32, 64, 56, 64)
    # sm_90: the wgmma forward, then mma.sync for what it does not take; sm_80: mma.sync.
    assert h.conv_fwd_ranking(fwd, for_sm(90))[:2] == [h.WGMMA, h.TC]
    assert h.conv_fwd_ranking(fwd, for_sm(80))[0] == h.TC
    assert h.TC not in h.conv_fwd_ranking(fwd, EMULATOR)  # emulator rankings unchanged
    assert h.WGMMA not in h.conv_fwd_ranking(fwd, EMULATOR)
    nchw = conv(32, 64, 56, 64, layout="NCHW")
    assert h.conv_fwd_ranking(nchw, for_sm(90))[:2] == [h.WGMMA, h.TC]
    # A device whose own wgmma check failed ranks mma.sync first.
    failed = dataclasses.replace(for_sm(90), wgmma_probe=lambda: False)
    assert h.conv_fwd_ranking(fwd, failed)[0] == h.TC
    tf32 = dataclasses.replace(conv(32, 64, 56, 64, dtype="fp32"), math="tf32")
    assert h.conv_fwd_ranking(tf32, for_sm(90))[0] == h.TC
    bwd = dataclasses.replace(fwd, direction="bwd_data")
    want = [h.BWD_DATA_WGMMA, h.BWD_DATA_TC_PHASED, h.BWD_DATA_TC]
    assert h.conv_bwd_data_ranking(bwd, for_sm(90))[:3] == want
    assert h.conv_bwd_data_ranking(bwd, for_sm(80))[:2] == want[1:]
    bwf = dataclasses.replace(fwd, direction="bwd_filter")
    assert h.conv_bwd_filter_ranking(bwf, for_sm(90))[0] == h.BWD_FILTER_TC


def test_forward_split_k_configs() -> None:
    late = conv(1, 512, 7, 512)  # ResNet-50 layer 4 at batch 1: 4 output tiles of 64x128
    cfg = SOLVER.default_config(late, for_sm(90))
    assert cfg.splits > 1 and cfg in SOLVER.configs(late, for_sm(90))
    assert SOLVER.default_config(late, EMULATOR).splits == 1
    with pytest.raises(ValueError):
        TcConfig(128, 128, 32, 64, 64, 4, 2)  # split-K only with the smaller tiles
    assert all(c.splits == 1 for c in SOLVER.configs(conv(1, 8, 3, 8, f=1, pad=0), EMULATOR))


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


def test_nchw_backward_ranks_the_tensor_cores_first_on_a_gpu() -> None:
    from cudnnlite.dispatch import heuristics as h
    from cudnnlite.dispatch import registry

    for direction, rank in (("bwd_data", h.conv_bwd_data_ranking),
                            ("bwd_filter", h.conv_bwd_filter_ranking)):  # fmt: skip
        p = dataclasses.replace(conv(32, 128, 28, 128, stride=2, layout="NCHW"),
                                direction=direction)  # fmt: skip
        first = next(n for n in rank(p, for_sm(90)) if registry.get(n).is_applicable(p, for_sm(90)))
        assert first in (PHASED.name, BWF.name), first
