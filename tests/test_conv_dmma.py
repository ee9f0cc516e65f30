"""The fp64 tensor-core implicit GEMM (conv_fwd_dmma_implicit_gemm: mma.sync m8n8k4 .f64)
against the float64 reference, its refusals and its rank in the heuristics.

One emulator module (the 64x64x16 tile, both layouts). Operands are full 53-bit doubles:
a kernel that rounded an operand or an accumulator to float32 would miss by ~1e-8
relative, far outside the bound.

Tolerance, per output: |got - ref| <= ACC * T * ACCUMULATION_EPS["fp64"] * mag + OUT * |ref|
  - T = C * R * S products summed; mag = conv(|x|, |w|), the summed magnitude.
    ACCUMULATION_EPS["fp64"] = 2 * 2^-53 covers a sequential double sum (each addition
    rounds by at most 2^-53 of the running magnitude: |error| <= T * 2^-53 * mag to first
    order) and the reference's own rounding in its order. ACC = 2: the DMMA's order is
    not the reference's and, on a GPU, the order of a k4 step's four additions is
    unspecified (the hardware may also round them once, which only helps); any order of
    T additions keeps the first-order bound T * 2^-53 * mag, so a factor 2 on top of the
    two sides' budget is ample (the same factor the fp32 tests use for reordered sums).
  - OUT = 8 * 2^-53: the epilogue's few double operations after the sum (alpha * acc, fma
    with alpha2 * z, + bias, an activation within 2 ulp), each one rounding.
"""

from __future__ import annotations

import dataclasses

import conv_backward_support as bws
import numpy as np
import pytest

from cudnnlite.dispatch import heuristics
from cudnnlite.errors import BadParamError
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.solvers.conv.common import Epilogue
from cudnnlite.solvers.conv.dmma_igemm import TILES, DmmaConfig, DmmaImplicitGemmSolver
from cudnnlite.testing import ACCUMULATION_EPS

from conv_support import magnitude, reference, run_solver

SOLVER = DmmaImplicitGemmSolver()
CFG, BIG = DmmaConfig(*TILES[0]), DmmaConfig(*TILES[1])  # 64x64 (4 warps), 128x64 (8 warps)
EPS = ACCUMULATION_EPS["fp64"]
ACC, OUT = 2.0, 8 * 2.0**-53


def prob(dtype: str = "fp64", **kw) -> ConvProblem:
    return bws.problem(dtype=dtype, direction="fwd", **kw)


def rand(shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)  # float64, 53-bit mantissas


def check(backend: str, p: ConvProblem, e: Epilogue | None = None, act: str | None = None,
          poison: bool = False, cfg: DmmaConfig = CFG) -> np.ndarray:  # fmt: skip
    e = e or Epilogue()
    ops = {"x": rand(p.x_shape(), 1), "w": rand(p.w_shape(), 2)}
    if e.has_bias:
        ops["bias"] = rand((p.k,), 3)
    if e.has_z:
        ops["z"] = rand(p.y_shape(), 4)
    if poison:
        ops["x"].flat[5] = np.nan
    got = run_solver(backend, SOLVER, p, ops, cfg, epilogue=e)
    ref = reference(p, ops, e, act)
    assert got.dtype == np.float64
    if poison:
        assert np.isnan(got).any() and not np.isnan(got).all()
        np.testing.assert_array_equal(np.isnan(got), np.isnan(ref))
        keep = ~np.isnan(ref)
        got, ref = got[keep], ref[keep]
        mag = (abs(e.alpha) * magnitude(p, {k: np.nan_to_num(v) for k, v in ops.items()}))[keep]
    else:
        mag = abs(e.alpha) * magnitude(p, ops)
    bound = ACC * p.c * p.filter_taps * EPS * mag + OUT * np.abs(ref) + 1e-300
    err = np.abs(got - ref)
    bad = ~(err <= bound)  # NaN counts as bad
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{p.key()}: {bad.sum()} of {bad.size} off; first at {i}: got "
                             f"{got[i]!r}, ref {ref[i]!r}, bound {bound[i]:.3g}")  # fmt: skip
    return got


# Odd C and K (not multiples of the tile or of BK 16; M and N edges), stride 2 with
# dilation, a ResNet 3x3 64 -> 64 at batch 2 (several M tiles, NHWC), a 1x1 and a 1-D.
SHAPES = {
    "odd_stride2_dil2": dict(n=2, c=5, hw=(9, 11), k=7, rs=(3, 3), pad=2, stride=2, dil=2),
    "resnet3x3_nhwc": dict(n=2, c=64, hw=(7, 7), k=64, rs=(3, 3), pad=1, layout="NHWC"),
    "odd_nhwc_k70": dict(n=1, c=19, hw=(6, 5), k=70, rs=(2, 3), pad=((1, 0), (0, 2)),
                         layout="NHWC"),
    "pointwise": dict(n=2, c=24, hw=(5, 6), k=40, rs=(1, 1)),
    "conv1d": dict(n=3, c=6, hw=(17,), k=9, rs=(5,), pad=2, stride=1, dil=3, layout="NHWC"),
}


@pytest.mark.parametrize("shape", SHAPES.values(), ids=SHAPES.keys())
def test_forward_fp64(backend: str, shape: dict) -> None:
    check(backend, prob(**shape))


@pytest.mark.parametrize("shape", ["odd_stride2_dil2", "resnet3x3_nhwc"])
def test_forward_fp64_128x64(backend: str, shape: str) -> None:
    """The 8-warp tile (same module): an M edge inside a 128-row block, NCHW and NHWC."""
    check(backend, prob(**SHAPES[shape]), cfg=BIG)


def test_fused_epilogue_exact_scalars(backend: str) -> None:
    """alpha = 1/3 and alpha2 = -0.7 are not float32 values (a float32 copy is off by
    ~1e-8 relative); bias, residual and relu fused; NCHW with M and N edges."""
    p = prob(n=2, c=7, hw=(9, 10), k=70, rs=(3, 3), pad=1)
    e = Epilogue(alpha=1 / 3, alpha2=-0.7, has_bias=True, has_z=True, act_mode=0)
    check(backend, p, e, "relu")
    check(backend, p, e, "relu", cfg=BIG)


# 3-D (the kernels' D3 instantiations: depth in the rows and taps, four reduction digits):
# a C3D-style 3x3x3 in NCDHW, and factorized / strided / dilated / asymmetric NDHWC.
SHAPES_3D = {
    "c3d_3x3x3": dict(n=2, c=5, hw=(5, 6, 7), k=7, rs=(3, 3, 3), pad=1, layout="NCDHW"),
    "odd_ndhwc": dict(n=1, c=6, hw=(7, 5, 6), k=70, rs=(2, 3, 1),
                      pad=((1, 0), (0, 2), (0, 0)), stride=(2, 1, 3), dil=(2, 1, 1),
                      layout="NDHWC"),
}


@pytest.mark.parametrize("shape", SHAPES_3D.values(), ids=SHAPES_3D.keys())
def test_forward_fp64_3d(backend: str, shape: dict) -> None:
    check(backend, prob(**shape))
    check(backend, prob(**shape), cfg=BIG)


def test_nan_propagates(backend: str) -> None:
    """A NaN in x reaches exactly the outputs whose window holds it (the MMA's zero-filled
    padding never touches it; no output outside those turns NaN)."""
    check(backend, prob(n=1, c=3, hw=(6, 6), k=5, rs=(3, 3), pad=1, layout="NHWC"), poison=True)


def test_random_schedule(backend: str, emulator_only: None, monkeypatch) -> None:
    """The cp.async stages and barriers under the emulator's random thread order (a
    missing wait or barrier reads the 0xFF fill: NaN)."""
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", "random")
    monkeypatch.setenv("CUDNNLITE_EMU_SEED", "5")
    check(backend, prob(**SHAPES["odd_stride2_dil2"]))
    check(backend, prob(**SHAPES["odd_stride2_dil2"]), cfg=BIG)


@pytest.mark.parametrize(
    "problem, caps, reason",
    [
        (prob("fp32", n=1, c=4, hw=(4, 4), k=4, rs=(3, 3)), EMULATOR, "needs float64"),
        (prob("fp16", n=1, c=4, hw=(4, 4), k=4, rs=(3, 3)), EMULATOR, "needs float64"),
        (prob(n=1, c=4, hw=(4, 4), k=4, rs=(3, 3)), for_sm(75), "sm_80+, device is sm_75"),
        (dataclasses.replace(prob(n=1, c=4, hw=(4, 4), k=4, rs=(3, 3)), direction="bwd_data"),
         EMULATOR, "direction fwd"),  # fmt: skip
    ],
)
def test_not_applicable_with_reason(problem: ConvProblem, caps, reason: str) -> None:
    result = SOLVER.is_applicable(problem, caps)
    assert not result and reason in result.reason, result


def test_applicable_and_config() -> None:
    p = prob(n=1, c=4, hw=(4, 4), k=4, rs=(3, 3))
    for caps in (EMULATOR, for_sm(80), for_sm(90)):
        assert SOLVER.is_applicable(p, caps)
    assert SOLVER.configs(p, for_sm(90)) == [CFG, BIG]
    assert CFG.label() == "64x64x16_w32x32_s2" and BIG.label() == "128x64x16_w32x32_s2"
    # stages in doubles: 2 x (64 + 64) rows x 20 doubles; 2 x (128 + 64) x 20
    assert (CFG.smem_bytes(), BIG.smem_bytes()) == (40960, 61440)
    assert SOLVER.config_from_dict(BIG.to_dict()) == BIG  # the tuning DB's round trip
    assert SOLVER.default_config(p, for_sm(90)) == CFG  # 1 block: far from filling a GPU
    big = prob(n=32, c=64, hw=(56, 56), k=64, rs=(3, 3), pad=1, layout="NHWC")
    assert SOLVER.default_config(big, for_sm(90)) == BIG
    with pytest.raises(BadParamError, match="not compiled"):
        DmmaConfig(block_n=128)


def test_public_api_forced(backend: str) -> None:
    """cudnnlite.conv2d with algo= this solver: bias and leaky_relu's coefficient 0.1 (not a
    float32 value) through the API's epilogue; the plan names the solver and its tile."""
    import cudnnlite
    from cudnnlite.reference.conv import conv_bias_act_forward
    from cudnnlite.testing import to_backend, to_numpy

    p = prob(n=2, c=3, hw=(9, 9), k=5, rs=(3, 3), pad=1, stride=2)
    x, w, b = rand(p.x_shape(), 1), rand(p.w_shape(), 2), rand((p.k,), 3)
    xs, ws, bs = (to_backend(a, backend) for a in (x, w, b))
    got = to_numpy(cudnnlite.conv2d(xs, ws, bias=bs, padding=1, stride=2, activation="leaky_relu",
                                    activation_coef=0.1, algo=SOLVER.name))  # fmt: skip
    ref = conv_bias_act_forward(x, w, p.pads, p.strides, p.dilations, 1, False, bias=b,
                                activation="leaky_relu", coef=0.1)  # fmt: skip
    mag = magnitude(p, {"x": x, "w": w}) + np.abs(b)
    bound = ACC * p.c * p.filter_taps * EPS * mag + OUT * np.abs(ref)
    assert np.all(np.abs(got - ref) <= bound)
    plan = cudnnlite.conv2d_plan(x.shape, w.shape, dtype="float64", padding=1, stride=2,
                                 algo=SOLVER.name, backend=backend)  # fmt: skip
    assert SOLVER.name in repr(plan) and CFG.label() in repr(plan)


def test_heuristics_rank_dmma_first_on_sm80_plus() -> None:
    name = SOLVER.name
    resnet = prob(**SHAPES["resnet3x3_nhwc"])
    stem = prob(n=1, c=3, hw=(32, 32), k=16, rs=(7, 7), pad=3, stride=2)
    small1x1 = prob(n=1, c=8, hw=(4, 4), k=8, rs=(1, 1))
    for p in (resnet, stem, small1x1):
        assert heuristics.conv_fwd_ranking(p, for_sm(90))[0] == name, p.key()
        assert heuristics.conv_fwd_ranking(p, for_sm(80))[0] == name, p.key()
        assert name not in heuristics.conv_fwd_ranking(p, for_sm(75))
        assert name not in heuristics.conv_fwd_ranking(p, EMULATOR)  # slow there
        p32 = dataclasses.replace(p, dtype="fp32")
        assert name not in heuristics.conv_fwd_ranking(p32, for_sm(90))
    depthwise = prob(n=1, c=8, hw=(6, 6), k=8, rs=(3, 3), groups=8)
    assert name not in heuristics.conv_fwd_ranking(depthwise, for_sm(90))
    # A large pointwise NHWC layer: cuBLAS's DGEMM (fp64 tensor cores too) stays first.
    big1x1 = prob(n=8, c=256, hw=(28, 28), k=256, rs=(1, 1), layout="NHWC")
    assert heuristics.conv_fwd_ranking(big1x1, for_sm(90))[:2] == [heuristics.CUBLAS_1X1, name]
