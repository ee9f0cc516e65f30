"""TF32 (fp32, math="tf32") on the tensor-core convolutions: forward tiles and shapes,
backward filter and data against the float64 reference at TF32's bound, proof that the
operands really were rounded, the TF32 configs and rankings, and the public functions."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conv_backward_support import check_data, check_filter
from conv_tc_support import BWF, PHASED, SMALL_TF32, SOLVER, _bwd, _bwf, _check, _tf32_acc, conv

from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.solvers.conv.bwd_data import TcImplicitGemmSolver as TcBwdData
from cudnnlite.solvers.conv.common import Epilogue
from cudnnlite.solvers.conv.tc_bwd_filter import TcSplitKConfig
from cudnnlite.solvers.conv.tc_igemm import TILES_TF32, TILES_TF32_ALIGN1, TcConfig

from conv_support import operands, run_solver

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


# ------------------------------------------------------------------ TF32 backward
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
