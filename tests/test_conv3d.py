"""3-D convolution: every solver with a 3-D variant run directly against the float64
reference, the public API (conv3d, its backward directions, conv_transpose3d, conv3d_plan)
against the reference and torch.nn.functional on CPU, bad inputs, and the 3-D suites.

Shapes: layers of I3D / C3D (3x3x3), R(2+1)D (factorized 1x3x3 and 3x1x1) and 3-D U-Net
(stride-2 down, conv_transpose3d up), scaled down for the emulator, plus odd ones (primes,
1s, padding beyond the filter, stride 3, dilation 2, groups, depthwise).

Tolerances (tests/conv_support.py): one rounding of the output type plus acc_factor *
C/g*T*R*S * 2^-24 * conv(|x|, |w|). Every kernel here sums fp32 products (fp16/bf16 inputs
widen exactly) in a fixed or blocked order, so acc_factor 2 bounds the accumulation as
in 2-D. Backward results are compared with the float64 backward references
(cudnnlite/reference/conv_backward.py) at the same kind of bound, with the reduction
length of each direction (K/g*T*R*S for dx, N*O*P*Q for dw).

Module budget (g++ time on the emulator): the fp32 3-D modules of direct.cu, bwd_data.cu,
bwd_filter.cu (direct, and the GEMM's 3-D module: fp32 and fp64) and one implicit-GEMM
tile; one fp16 tensor-core tile; the tensor-core 3-D
backward modules (`tc_conv_bwd_filter_3d`, `tc_conv_bwd_data_3d`: fp16 and bf16 tiles, about
2 s of g++ each when cold); bf16 direct. 2-D
modules are never compiled here except the 1x1 GEMM tile and the cuBLAS epilogue (shared
with the 2-D tests). float64: the 3-D fp64 modules of direct.cu and bwd_data.cu only
(conv3d's default dispatch is steered to direct by a shape with C*T*R*S < 32).
"""

from __future__ import annotations

import dataclasses
import warnings
from typing import Any

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite import dtypes
from cudnnlite.dispatch import registry
from cudnnlite.errors import BadParamError, NotSupportedError
from cudnnlite.ops.conv_backward import last_kernel_names
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.problems.suites import SUITES_3D, problems
from cudnnlite.reference.conv_backward import conv_backward_data, conv_backward_filter
from cudnnlite.runtime.caps import EMULATOR
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.solvers.conv.bwd_data import BwdDataTensors
from cudnnlite.solvers.conv.bwd_filter import BwdFilterTensors
from cudnnlite.solvers.conv.common import Epilogue, shape_struct
from cudnnlite.solvers.conv.implicit_gemm import TileConfig
from cudnnlite.solvers.conv.tc_igemm import TcConfig
from cudnnlite.testing import ACCUMULATION_EPS, to_backend, to_numpy

from conv_support import assert_conv_close, check, operands, run_solver

SHORTS = {d.short for d in dtypes.FLOAT_TYPES}
TILE = TileConfig(64, 64, 16, 4, 4, 3)  # the tile the dispatcher picks for small problems
TC_TILE = TcConfig(64, 64, 32, 32, 32, 4)


def p3(n=1, c=4, dhw=(4, 5, 6), k=4, f=(3, 3, 3), pad=1, stride=1, dil=1, groups=1,
       layout="NCDHW", dtype="fp32", direction="fwd") -> ConvProblem:  # fmt: skip
    """A 3-D problem; pad/stride/dil an int or a 3-tuple (pad entries int or (before, after))."""

    def three(v):
        return tuple(v) if isinstance(v, tuple) else (v,) * 3

    pads = tuple(p if isinstance(p, tuple) else (p, p) for p in three(pad))
    return ConvProblem(n, c, tuple(dhw), k, tuple(f), pads, three(stride), three(dil), groups,
                       layout, dtype, direction)  # fmt: skip


# name -> problem kwargs: real-network layers scaled down, and odd shapes
CASES = {
    "i3d_3x3x3": dict(n=2, c=6, dhw=(4, 6, 6), k=8),
    "c3d_3x3x3_pad_only_depth": dict(c=5, dhw=(3, 5, 4), k=6, pad=(1, 0, 0)),
    "r2plus1d_1x3x3": dict(c=6, dhw=(3, 6, 5), k=7, f=(1, 3, 3), pad=(0, 1, 1)),
    "r2plus1d_3x1x1_s2": dict(
        c=7, dhw=(5, 4, 4), k=6, f=(3, 1, 1), pad=(1, 0, 0), stride=(2, 1, 1)
    ),  # fmt: skip
    "unet_down_s2": dict(n=2, c=4, dhw=(6, 6, 6), k=8, stride=2),
    "primes_big_pad": dict(c=3, dhw=(5, 7, 3), k=5, f=(2, 3, 2), pad=((3, 2), (2, 4), (3, 3))),
    "ones": dict(n=1, c=1, dhw=(1, 1, 1), k=1, f=(1, 1, 1), pad=0),
    "stride3_dil2": dict(c=3, dhw=(7, 8, 9), k=4, stride=3, dil=2, pad=2),
    "groups": dict(c=6, dhw=(3, 4, 5), k=9, groups=3, dil=(2, 1, 1), pad=(2, 1, 1)),
}


def _problem(case: str, layout: str, dtype: str = "fp32", direction: str = "fwd") -> ConvProblem:
    return p3(**CASES[case], layout=layout, dtype=dtype, direction=direction)


# ------------------------------------------------------------------ forward solvers


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
@pytest.mark.parametrize("case", list(CASES))
def test_forward_direct_and_implicit_gemm(backend: str, case: str, layout: str) -> None:
    problem = _problem(case, layout)
    check(backend, registry.get("conv_fwd_direct"), problem)
    check(backend, registry.get("conv_fwd_implicit_gemm"), problem, config=TILE)
    check(backend, registry.get("conv_fwd_implicit_precomp_gemm"), problem, config=TILE)


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
@pytest.mark.parametrize("mult,kw", [(1, dict(f=(3, 3, 3))), (2, dict(f=(3, 1, 3), stride=2)),
                                     (1, dict(f=(2, 3, 3), dil=2, pad=2))])  # fmt: skip
def test_forward_depthwise(backend: str, layout: str, mult: int, kw: dict) -> None:
    # a channel count above the NDHWC kernel's 32-channel block: two channel tiles
    c = 36 if layout == "NDHWC" else 5
    problem = p3(n=2, c=c, dhw=(4, 5, 6), k=c * mult, groups=c, layout=layout, **kw)
    solver = registry.get("conv_fwd_direct_depthwise")
    assert solver.is_applicable(problem, EMULATOR)
    check(backend, solver, problem)


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
def test_forward_pointwise_gemms(backend: str, layout: str) -> None:
    problem = p3(n=2, c=8, dhw=(3, 4, 5), k=12, f=(1, 1, 1), pad=0, groups=2, layout=layout)
    check(backend, registry.get("conv_fwd_gemm_1x1"), problem, config=TILE)
    check(backend, registry.get("conv_fwd_gemm_cublas_1x1"), problem)


@pytest.mark.parametrize("dtype,layout", [("bf16", "NCDHW"), ("bf16", "NDHWC")])
def test_forward_direct_16bit(backend: str, dtype: str, layout: str) -> None:
    # fp16 runs on the tensor cores below (one module per dtype: bf16 here, fp16 there)
    if dtype not in SHORTS:
        pytest.skip("ml_dtypes missing")
    check(backend, registry.get("conv_fwd_direct"), _problem("i3d_3x3x3", layout, dtype))
    check(backend, registry.get("conv_fwd_direct"), _problem("stride3_dil2", layout, dtype))


@pytest.mark.parametrize(
    "kw,config",
    [
        (
            dict(
                n=2,
                c=16,
                dhw=(4, 5, 6),
                k=24,
                pad=((1, 1), (0, 2), (1, 1)),
                stride=(2, 1, 1),
                dil=(1, 1, 2),
            ),
            TC_TILE,
        ),  # fmt: skip
        (dict(c=16, dhw=(3, 6, 6), k=8, f=(3, 1, 1), pad=(1, 0, 0)), TC_TILE),  # R(2+1)D temporal
        (dict(c=8, dhw=(6, 6, 6), k=16, stride=2), dataclasses.replace(TC_TILE, splits=2)),
        (
            dict(
                c=8,
                dhw=(3, 5, 4),
                k=8,
                f=(2, 3, 1),
                pad=((1, 0), (1, 1), (0, 0)),
                stride=(1, 2, 1),
                dil=(2, 1, 1),
                layout="NCDHW",
            ),
            TC_TILE,
        ),  # NCDHW: converted to NDHWC  # fmt: skip
    ],
    ids=["i3d_strided_dilated", "factorized_3x1x1", "unet_down_split2", "ncdhw"],
)
def test_forward_tensor_cores_fp16(backend: str, kw: dict, config: TcConfig) -> None:
    if "fp16" not in SHORTS:
        pytest.skip("ml_dtypes missing")
    kw.setdefault("layout", "NDHWC")
    problem = p3(dtype="fp16", **kw)
    solver = registry.get("conv_fwd_tc_implicit_gemm")
    assert solver.is_applicable(problem, EMULATOR)
    assert config in solver.configs(problem, EMULATOR)
    ops = operands(problem, 1, bias=True, z=True)
    e = Epilogue(alpha=0.5, alpha2=0.25, has_bias=True, has_z=True)
    got = run_solver(backend, solver, problem, ops, config, epilogue=e)
    assert_conv_close(got, problem, ops, epilogue=e, what=solver.name)


def test_forward_fused_epilogue_direct(backend: str) -> None:
    problem = _problem("unet_down_s2", "NDHWC")
    ops = operands(problem, 2, bias=True, z=True)
    e = Epilogue(alpha=2.0, alpha2=-1.0, act_mode=cl.ACTIVATION_MODES.index("relu"),
                 has_bias=True, has_z=True)  # fmt: skip
    got = run_solver(backend, registry.get("conv_fwd_implicit_precomp_gemm"), problem, ops,
                     TILE, epilogue=e)  # fmt: skip
    assert_conv_close(got, problem, ops, epilogue=e, activation="relu")


# ------------------------------------------------------------------ backward solvers


def _close(got: np.ndarray, ref: np.ndarray, mag: np.ndarray, terms: int, what: str,
           rounding: Any = 0.0, dtype: str = "fp32") -> None:  # fmt: skip
    # fp64: 2 * 2^-53 per term (ACCUMULATION_EPS) and no floor: a gradient without terms is 0
    eps, floor = (ACCUMULATION_EPS["fp64"], 0.0) if dtype == "fp64" else (2.0**-24, 1e-6)
    bound = rounding + 2 * terms * eps * mag + floor
    err = np.abs(got.astype(np.float64) - ref)
    assert (err <= bound).all(), f"{what}: max error {err.max():.3g}, bound {bound.max():.3g}"


def _bwd_data(backend: str, solver_name: str, problem: ConvProblem, seed: int = 0,
              config: Any = None) -> None:  # fmt: skip
    ops = operands(problem, seed)
    dt = ops["x"].dtype
    dy = np.random.default_rng(seed + 1).standard_normal(problem.y_shape()).astype(dt)
    b = backend_by_name(backend)
    solver = registry.get(solver_name)
    config = config or solver.default_config(problem, EMULATOR)
    runner = solver.prepare(b, problem, config)
    dx = b.xp.full(problem.x_shape(), np.nan, dtype=dt)
    size = solver.workspace_size(problem, config)
    ws = b.xp.empty(size, dtype=np.uint8) if size else None
    runner(BwdDataTensors(to_backend(dy, backend), to_backend(ops["w"], backend), dx),
           Epilogue(), ws)  # fmt: skip
    args = (problem.spatial, problem.pads, problem.strides, problem.dilations, problem.groups,
            problem.channels_last)  # fmt: skip
    ref = conv_backward_data(dy, ops["w"], *args)
    mag = conv_backward_data(np.abs(dy), np.abs(ops["w"]), *args)
    out_rtol = {"fp32": 0.0, "fp16": 2.0**-11, "bf16": 2.0**-8, "fp64": 0.0}[problem.dtype]
    _close(to_numpy(dx), ref, mag, problem.k_per_group * problem.filter_taps, solver_name,
           out_rtol * np.abs(ref), problem.dtype)  # fmt: skip


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
@pytest.mark.parametrize("case", ["i3d_3x3x3", "r2plus1d_3x1x1_s2", "unet_down_s2",
                                  "primes_big_pad", "stride3_dil2", "groups"])  # fmt: skip
def test_backward_data_direct(backend: str, case: str, layout: str) -> None:
    _bwd_data(backend, "conv_bwd_data_direct", _problem(case, layout, direction="bwd_data"))


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
@pytest.mark.parametrize("case", ["i3d_3x3x3", "r2plus1d_1x3x3", "groups"])
def test_backward_data_rotated_implicit_gemm(backend: str, case: str, layout: str) -> None:
    problem = _problem(case, layout, direction="bwd_data")
    assert registry.get("conv_bwd_data_implicit_gemm_rotated").is_applicable(problem, EMULATOR)
    _bwd_data(backend, "conv_bwd_data_implicit_gemm_rotated", problem)


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
@pytest.mark.parametrize("case", ["i3d_3x3x3", "r2plus1d_3x1x1_s2", "unet_down_s2",
                                  "primes_big_pad", "stride3_dil2", "groups"])  # fmt: skip
def test_backward_data_phased_implicit_gemm(backend: str, case: str, layout: str) -> None:
    """The CUDA-core phased GEMM's 3-D kernels (bwd_data_igemm<..., true>): depth phases
    and taps, both tiles; fp64 on one case."""
    from cudnnlite.solvers.conv.bwd_data_igemm import TileConfig

    problem = _problem(case, layout, direction="bwd_data")
    solver = registry.get("conv_bwd_data_implicit_gemm")
    assert solver.is_applicable(problem, EMULATOR)
    for tile in (32, 64):
        _bwd_data(backend, "conv_bwd_data_implicit_gemm", problem, config=TileConfig(tile))
    if case == "stride3_dil2":
        _bwd_data(backend, "conv_bwd_data_implicit_gemm",
                  _problem(case, layout, "fp64", direction="bwd_data"))  # fmt: skip


def test_backward_data_rotated_tensor_cores_fp16(backend: str) -> None:
    # stride 1: the forward tensor-core kernel (3-D) on the rotated filters
    if "fp16" not in SHORTS:
        pytest.skip("ml_dtypes missing")
    problem = p3(n=2, c=8, dhw=(3, 4, 5), k=16, pad=(1, 1, 2), dil=(1, 1, 2), layout="NDHWC",
                 dtype="fp16", direction="bwd_data")  # fmt: skip
    _bwd_data(backend, "conv_bwd_data_tc_implicit_gemm", problem)


def _bwd_filter(backend: str, solver_name: str, problem: ConvProblem, config: Any = None,
                dtype: Any = np.float32) -> None:  # fmt: skip
    ops = operands(problem)
    dy = np.random.default_rng(5).standard_normal(problem.y_shape()).astype(dtype)
    b = backend_by_name(backend)
    solver = registry.get(solver_name)
    config = config or solver.default_config(problem, EMULATOR)
    runner = solver.prepare(b, problem, config)
    dw = b.xp.full(problem.w_shape(), np.nan, dtype=dtype)
    size = solver.workspace_size(problem, config)
    ws = b.xp.full(size, 0xFF, dtype=np.uint8) if size else None  # NaN-ish garbage
    runner(BwdFilterTensors(to_backend(ops["x"], backend), to_backend(dy, backend), dw),
           Epilogue(), ws)  # fmt: skip
    args = (problem.filter, problem.pads, problem.strides, problem.dilations, problem.groups,
            problem.channels_last)  # fmt: skip
    ref = conv_backward_filter(ops["x"], dy, *args)
    mag = conv_backward_filter(np.abs(ops["x"]), np.abs(dy), *args)
    terms = problem.n * int(np.prod(problem.out_spatial))
    _close(to_numpy(dw), ref, mag, terms, solver_name, dtype=problem.dtype)


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
@pytest.mark.parametrize("case", ["i3d_3x3x3", "r2plus1d_3x1x1_s2", "primes_big_pad",
                                  "stride3_dil2", "groups"])  # fmt: skip
def test_backward_filter_direct(backend: str, case: str, layout: str) -> None:
    _bwd_filter(backend, "conv_bwd_filter_direct", _problem(case, layout, direction="bwd_filter"))


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
@pytest.mark.parametrize("case", ["i3d_3x3x3", "r2plus1d_3x1x1_s2", "primes_big_pad",
                                  "stride3_dil2", "groups"])  # fmt: skip
def test_backward_filter_implicit_gemm(backend: str, case: str, layout: str) -> None:
    """The CUDA-core split-K GEMM's 3-D kernels (bwd_filter_gemm<..., true>): both tiles,
    several splits (the last one partial), the atomic variant; planes (n, o) split per
    slice, taps with their depth."""
    from cudnnlite.solvers.conv.bwd_filter import SplitKConfig

    problem = _problem(case, layout, direction="bwd_filter")
    _bwd_filter(backend, "conv_bwd_filter_implicit_gemm", problem, SplitKConfig(64, 1))
    _bwd_filter(backend, "conv_bwd_filter_implicit_gemm", problem, SplitKConfig(32, 4))
    if case == "i3d_3x3x3":
        _bwd_filter(backend, "conv_bwd_filter_implicit_gemm_atomic", problem)
    solver = registry.get("conv_bwd_filter_implicit_gemm")
    if layout == "NDHWC":  # the 8 x 8-per-thread tile (fp32 NDHWC; NCDHW would spill)
        _bwd_filter(backend, "conv_bwd_filter_implicit_gemm", problem, SplitKConfig(128, 4))
    else:
        assert SplitKConfig(128, 1) not in solver.configs(problem, EMULATOR)


def test_backward_filter_implicit_gemm_fp64(backend: str) -> None:
    for layout in ("NCDHW", "NDHWC"):
        problem = _problem("stride3_dil2", layout, "fp64", direction="bwd_filter")
        _bwd_filter(backend, "conv_bwd_filter_implicit_gemm", problem, dtype=np.float64)


# ------------------------------------------------------------------ float64


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
def test_float64_direct_depthwise_and_backward_data(backend: str, layout: str) -> None:
    # the 3-D fp64 modules of direct.cu (direct + depthwise) and bwd_data.cu only
    for case in ("primes_big_pad", "stride3_dil2", "groups", "r2plus1d_3x1x1_s2"):
        check(backend, registry.get("conv_fwd_direct"), _problem(case, layout, "fp64"))
    c = 36 if layout == "NDHWC" else 5  # NDHWC: two 32-channel blocks
    dw = p3(n=1, c=c, dhw=(4, 5, 6), k=2 * c, groups=c, f=(3, 1, 3), stride=2, layout=layout,
            dtype="fp64")  # fmt: skip
    assert registry.get("conv_fwd_direct_depthwise").is_applicable(dw, EMULATOR)
    check(backend, registry.get("conv_fwd_direct_depthwise"), dw)
    for case in ("unet_down_s2", "primes_big_pad", "groups"):
        _bwd_data(backend, "conv_bwd_data_direct", _problem(case, layout, "fp64", "bwd_data"))


def test_float64_conv3d_default_dispatch_fused(backend: str) -> None:
    # R(2+1)D's temporal 3x1x1 with stride 2 (C*T*R*S = 21: the heuristics take direct)
    problem = _problem("r2plus1d_3x1x1_s2", "NDHWC", "fp64")
    ops = operands(problem, seed=7, bias=True)
    e = Epilogue(alpha=0.3, has_bias=True, act_mode=0)  # 0.3: not a float32 number
    y = cl.conv3d(*(to_backend(ops[k], backend) for k in ("x", "w", "bias")), stride=(2, 1, 1),
                  padding=(1, 0, 0), layout="NDHWC", activation="relu", alpha=0.3)  # fmt: skip
    assert y.dtype == np.float64
    assert_conv_close(to_numpy(y), problem, ops, epilogue=e, activation="relu")
    plan = cl.conv3d_plan(
        problem.x_shape(),
        problem.w_shape(),
        stride=(2, 1, 1),
        padding=(1, 0, 0),
        layout="NDHWC",
        dtype=np.float64,
        backend=backend,
    )
    assert plan.solver == "conv_fwd_direct" and plan.problem.key().endswith(" fp64")


# ------------------------------------------------------------------ applicability


def test_applicability_reasons() -> None:
    problem = _problem("i3d_3x3x3", "NDHWC")
    for name in ("conv_fwd_winograd_f2x2_3x3", "conv_fwd_wmma_implicit_gemm",
                 "conv_fwd_im2col_gemm_cublas"):  # fmt: skip
        r = registry.get(name).is_applicable(problem, EMULATOR)
        assert not r and "2-D" in r.reason, (name, r.reason)
    for name in ("conv_fwd_direct", "conv_fwd_implicit_gemm", "conv_fwd_implicit_precomp_gemm"):
        assert registry.get(name).is_applicable(problem, EMULATOR), name
    bwd = dataclasses.replace(problem, direction="bwd_data")
    r = registry.get("conv_bwd_data_winograd_f2x2_3x3").is_applicable(bwd, EMULATOR)
    assert not r and "2-D" in r.reason
    bwf = dataclasses.replace(problem, direction="bwd_filter")
    assert registry.get("conv_bwd_filter_implicit_gemm").is_applicable(bwf, EMULATOR)
    r = registry.get("conv_bwd_filter_im2col_gemm_cublas").is_applicable(bwf, EMULATOR)
    assert not r and "2-D" in r.reason
    big = p3(c=8, k=8, f=(17, 1, 1), pad=(8, 0, 0), dtype="fp16", layout="NDHWC")
    r = registry.get("conv_fwd_tc_implicit_gemm").is_applicable(big, EMULATOR)
    assert not r and "16 taps" in r.reason


def test_shape_struct_depth_fields() -> None:
    s = shape_struct(_problem("primes_big_pad", "NDHWC"))
    assert (int(s["d"]), int(s["t"]), int(s["o"])) == (5, 2, 9)  # 5 + 3 + 2 - 2 + 1
    assert (int(s["pad_d"]), int(s["stride_d"]), int(s["dil_d"])) == (3, 1, 1)
    s2 = shape_struct(ConvProblem(1, 2, (5, 6), 3, (3, 3), ((1, 1), (1, 1)), (1, 1), (1, 1)))
    assert [int(s2[f]) for f in ("d", "t", "o", "pad_d", "stride_d", "dil_d")] == [1, 1, 1, 0, 1, 1]


# ------------------------------------------------------------------ public API vs torch


def _rand(shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
def test_conv3d_matches_torch(backend: str, layout: str) -> None:
    torch = pytest.importorskip("torch")
    F = torch.nn.functional  # noqa: N806
    x, w, b = _rand((2, 4, 5, 6, 7), 0), _rand((6, 2, 3, 2, 3), 1), _rand((6,), 2)
    kw = dict(stride=(2, 1, 1), padding=(1, 0, 2), dilation=(1, 2, 1), groups=2)
    ref = F.relu(F.conv3d(*map(torch.from_numpy, (x, w, b)), **kw)).numpy()
    last = layout == "NDHWC"
    xs, ws = (np.moveaxis(x, 1, -1).copy(), np.moveaxis(w, 1, -1).copy()) if last else (x, w)
    before = xs.copy()
    y = to_numpy(
        cl.conv3d(
            to_backend(xs, backend),
            to_backend(ws, backend),
            to_backend(b, backend),
            layout=layout,
            activation="relu",
            **kw,
        )
    )
    np.testing.assert_array_equal(xs, before)
    np.testing.assert_allclose(np.moveaxis(y, -1, 1) if last else y, ref, rtol=1e-5, atol=1e-5)


def test_conv3d_same_padding_residual_and_plan(backend: str) -> None:
    torch = pytest.importorskip("torch")
    x, w, z = _rand((1, 3, 4, 5, 6), 3), _rand((4, 3, 2, 3, 4), 4), _rand((1, 4, 4, 5, 6), 5)
    with warnings.catch_warnings():  # torch: even kernel with 'same' pads a copy (a note)
        warnings.simplefilter("ignore", UserWarning)
        ref = torch.nn.functional.conv3d(torch.from_numpy(x), torch.from_numpy(w),
                                         padding="same").numpy() + 0.5 * z  # fmt: skip
    xb, wb, zb = (to_backend(a, backend) for a in (x, w, z))
    y = cl.conv3d(xb, wb, padding="same", z=zb, alpha2=0.5)
    np.testing.assert_allclose(to_numpy(y), ref, rtol=1e-5, atol=1e-5)
    plan = cl.conv3d_plan(x.shape, w.shape, padding="same", backend=backend)
    assert plan.problem.key().startswith("conv3d_fwd n1-c3-d4-h5-w6 k4-t2-r3-s4 p0_1x1x1_2")
    np.testing.assert_allclose(to_numpy(plan(xb, wb, z=zb, alpha2=0.5)), ref, rtol=1e-5,
                               atol=1e-5)  # fmt: skip


@pytest.mark.parametrize("layout", ["NCDHW", "NDHWC"])
@pytest.mark.parametrize("stride", [1, 2])
def test_backward_matches_torch(backend: str, layout: str, stride: int) -> None:
    torch = pytest.importorskip("torch")
    x, w = _rand((2, 3, 4, 5, 6), 6), _rand((4, 3, 3, 3, 2), 7)
    kw = dict(stride=stride, padding=(1, 1, 0), dilation=(1, 1, 2))
    xt, wt = torch.from_numpy(x).requires_grad_(), torch.from_numpy(w).requires_grad_()
    yt = torch.nn.functional.conv3d(xt, wt, **kw)
    dy = _rand(tuple(yt.shape), 8)
    yt.backward(torch.from_numpy(dy))
    last = layout == "NDHWC"

    def lay(a: np.ndarray) -> np.ndarray:
        return np.moveaxis(a, 1, -1).copy() if last else a

    def unlay(a: Any) -> np.ndarray:
        a = to_numpy(a)
        return np.moveaxis(a, -1, 1) if last else a

    xs, ws, dys = lay(x), lay(w), lay(dy)
    xb, wb, dyb = (to_backend(a, backend) for a in (xs, ws, dys))
    dx = cl.conv3d_backward_data(dyb, wb, xs.shape, layout=layout, **kw)
    assert last_kernel_names()
    dw = cl.conv3d_backward_filter(xb, dyb, ws.shape, layout=layout, **kw)
    db = cl.conv3d_backward_bias(dyb, layout=layout)
    np.testing.assert_allclose(unlay(dx), xt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(unlay(dw), wt.grad.numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(to_numpy(db), dy.sum(axis=(0, 2, 3, 4)), rtol=1e-5, atol=1e-4)


@pytest.mark.parametrize(
    "kw",
    [dict(stride=2), dict(stride=2, padding=(0, 1, 1), output_padding=(1, 1, 0)),
     dict(stride=(1, 2, 3), dilation=(2, 1, 1), padding=1, output_padding=(0, 1, 2))],
    ids=["unet_up_2x2x2", "output_padding", "mixed"],
)  # fmt: skip
def test_conv_transpose3d_matches_torch(backend: str, kw: dict) -> None:
    torch = pytest.importorskip("torch")
    x, b = _rand((1, 4, 3, 4, 5), 9), _rand((6,), 10)
    w = _rand((4, 3, 2, 2, 2) if kw == dict(stride=2) else (4, 3, 3, 2, 3), 11)
    ref = torch.nn.functional.conv_transpose3d(torch.from_numpy(x), torch.from_numpy(w),
                                               torch.from_numpy(b[:6]), groups=2,
                                               **kw).numpy()  # fmt: skip
    y = cl.conv_transpose3d(to_backend(x, backend), to_backend(w, backend),
                            to_backend(b, backend), groups=2, **kw)  # fmt: skip
    assert y.shape == ref.shape
    np.testing.assert_allclose(to_numpy(y), ref, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ bad input


@pytest.mark.parametrize(
    "call,match",
    [
        (lambda x, w: cl.conv3d(x[0, 0], w), r"x: expected a 5-D array \(NCDHW\)"),
        (lambda x, w: cl.conv3d(x, w[0]), r"w: expected a 5-D filter"),
        (lambda x, w: cl.conv3d(x, w, layout="NCHW"), r"layout: expected 'NCDHW' or 'NDHWC'"),
        (lambda x, w: cl.conv3d(x, w[:, :2]), r"w: has 2 channels per group, expected 3"),
        (lambda x, w: cl.conv3d(x, w, groups=2), r"groups: 2 does not divide the 3 input"),
        (lambda x, w: cl.conv3d(x, w, stride=(1, 1)), r"stride: expected an int or 3 ints"),
        (lambda x, w: cl.conv3d(x, w, padding=(1, 1, 1, 1)), r"padding: expected an int, 3"),
        (lambda x, w: cl.conv3d(x, w, bias=np.zeros(3, np.float32)), r"bias: expected shape"),
        (
            lambda x, w: cl.conv3d_backward_data(x, w, (1, 3, 4, 4)),
            r"x_shape: expected a "
            r"sequence of 5 ints",
        ),  # fmt: skip
        (lambda x, w: cl.conv3d_backward_bias(x, layout="NHWC"), r"layout: expected one of"),
        (lambda x, w: cl.conv_transpose3d(x, w[:3]), r"w: expected 3 filters"),
        (lambda x, w: cl.conv3d_plan((1, 3, 4, 4), w.shape), r"x: expected a 5-D"),
    ],
    ids=[
        "rank_x",
        "rank_w",
        "layout",
        "channels",
        "groups",
        "stride",
        "padding",
        "bias",
        "bwd_x_shape",
        "bias_layout",
        "transpose_channels",
        "plan_rank",
    ],  # fmt: skip
)
def test_bad_input(call, match: str) -> None:
    x, w = _rand((1, 3, 4, 4, 4), 12), _rand((2, 3, 3, 3, 3), 13)
    before = x.copy(), w.copy()
    with pytest.raises(BadParamError, match=match):
        call(x, w)
    np.testing.assert_array_equal(x, before[0])
    np.testing.assert_array_equal(w, before[1])


def test_unsupported_algo_names_the_reason() -> None:
    x, w = _rand((1, 3, 4, 4, 4), 14), _rand((2, 3, 3, 3, 3), 15)
    match = "conv_fwd_winograd_f2x2_3x3 cannot run conv3d_fwd .*: needs a 2-D"
    with pytest.raises(NotSupportedError, match=match):
        cl.conv3d(x, w, algo="conv_fwd_winograd_f2x2_3x3")


# ------------------------------------------------------------------ suites, tune, explain


def test_3d_suites_keys_round_trip() -> None:
    for suite in SUITES_3D:
        for layout in ("NCHW", "NHWC"):
            for p in problems(suite, n=2, dtype="fp16", layout=layout, hw=5):
                assert p.ndim == 3 and p.layout in ("NCDHW", "NDHWC")
                assert max(p.spatial) <= max(5, *p.filter)  # scaled keeps the filter
                assert ConvProblem.parse(p.key()) == p


def test_tune_and_explain_a_tiny_3d_key() -> None:
    from cudnnlite.dispatch.tuner import tune

    key = "conv3d_fwd n1-c4-d3-h4-w4 k8-t3-r3-s3 p1x1x1-u2x2x2-d1x1x1 g1 NCDHW fp32"
    results = tune(key, backend="cpu", progress=False, store=False)
    names = {e.solver for e in results[key]}
    assert {"conv_fwd_direct", "conv_fwd_implicit_precomp_gemm"} <= names
    text = str(cl.explain(key, "cpu"))
    assert "conv_fwd_direct" in text and "winograd" in text


# ------------------------------------------------------------------ tensor-core backward
# tc_conv_bwd_filter_3d / tc_conv_bwd_data_3d (fp16 / bf16 NDHWC) against the float64
# backward references: stride 1, 2 and (1, 2, 2), padding, dilation, odd sizes, split-K, and
# 4-byte copies (C, K even, not multiples of 8). Modules: fp16 64x128 and 64x64 (4-byte)
# filter, fp16 64x64 (both copy widths) data, one bf16 tile of each.
TC_BWD_3D = {
    "i3d_pad_dil": dict(n=2, c=8, dhw=(4, 5, 6), k=16, pad=(1, 1, 2), dil=(1, 1, 2)),
    "unet_down_s2_odd": dict(n=2, c=8, dhw=(5, 6, 5), k=16, stride=2),
    "mixed_s122_bf16": dict(
        c=16, dhw=(3, 5, 6), k=8, f=(3, 1, 3), pad=(1, 0, 1), stride=(1, 2, 2), dtype="bf16"
    ),  # fmt: skip
    "align2_s3_phases_without_taps": dict(
        c=6, dhw=(5, 4, 5), k=10, f=(2, 2, 2), pad=0, stride=(3, 2, 1), dil=(1, 1, 2)
    ),  # fmt: skip
}


def _tc_bwd(case: str, direction: str) -> ConvProblem:
    kw = dict(TC_BWD_3D[case])
    kw.setdefault("dtype", "fp16")
    return p3(layout="NDHWC", direction=direction, **kw)


@pytest.mark.parametrize("direction", ["bwd_filter", "bwd_data"])
@pytest.mark.parametrize("case", list(TC_BWD_3D))
def test_backward_tensor_cores(backend: str, case: str, direction: str) -> None:
    # backward data by phases (bias checked too), backward filter
    from conv_backward_support import check_data, check_filter

    if not {"fp16", "bf16"} <= SHORTS:
        pytest.skip("ml_dtypes missing")
    problem = _tc_bwd(case, direction)
    if direction == "bwd_filter":
        solver = registry.get("conv_bwd_filter_tc_implicit_gemm")
        assert solver.is_applicable(problem, EMULATOR)
        check_filter(backend, solver, problem)
    else:
        solver = registry.get("conv_bwd_data_tc_implicit_gemm_phased")
        assert solver.is_applicable(problem, EMULATOR)
        check_data(backend, solver, problem, bias=True)


@pytest.mark.parametrize("direction", ["bwd_filter", "bwd_data"])
@pytest.mark.parametrize("case", ["unet_down_s2_odd", "align2_s3_phases_without_taps"])
def test_backward_tensor_cores_tf32(backend: str, case: str, direction: str) -> None:
    # fp32 with math="tf32": scalar fragment loads from padded rows; 16-byte copies (K, C
    # multiples of 4) and 4-byte ones (C = 6, K = 10). TF32 rounds each operand to 11
    # significant bits: acc_factor 2 + 2^14 / T (T: terms per output) on the fp32 bound.
    from conv_backward_support import check_data, check_filter

    problem = dataclasses.replace(_tc_bwd(case, direction), dtype="fp32", math="tf32")
    if direction == "bwd_filter":
        solver = registry.get("conv_bwd_filter_tc_implicit_gemm")
        terms = problem.n * int(np.prod(problem.out_spatial))
        check_filter(backend, solver, problem, acc_factor=2.0 + 2.0**14 / terms)
    else:
        solver = registry.get("conv_bwd_data_tc_implicit_gemm_phased")
        terms = problem.k * problem.filter_taps
        check_data(backend, solver, problem, bias=True, acc_factor=2.0 + 2.0**14 / terms)


def test_backward_filter_tensor_cores_split_k(backend: str) -> None:
    # 54 output pixels, chunks of 32: the second split starts inside the second image and
    # the first split's tile carries (o, p, q) into it
    from conv_backward_support import check_filter

    if "fp16" not in SHORTS:
        pytest.skip("ml_dtypes missing")
    problem = p3(n=2, c=8, dhw=(6, 6, 6), k=16, stride=2, layout="NDHWC", dtype="fp16",
                 direction="bwd_filter")  # fmt: skip
    solver = registry.get("conv_bwd_filter_tc_implicit_gemm")
    config = solver.default_config(problem, EMULATOR)
    check_filter(backend, solver, problem, config=dataclasses.replace(config, splits=2))
    assert solver.workspace_size(problem, dataclasses.replace(config, splits=2)) == (
        4 * 2 * 16 * 27 * 8
    )




def test_backward_tensor_cores_128x128_tiles(backend: str) -> None:
    # the 8-warp tiles: the filter's default for K >= 128, the data's for large problems
    from conv_backward_support import check_filter, rand, ref_data, run_data

    if "fp16" not in SHORTS:
        pytest.skip("ml_dtypes missing")
    bwf = p3(c=8, dhw=(3, 4, 5), k=128, stride=(2, 1, 2), layout="NDHWC", dtype="fp16",
             direction="bwd_filter")  # fmt: skip
    solver = registry.get("conv_bwd_filter_tc_implicit_gemm")
    assert solver.default_config(bwf, EMULATOR).block_m == 128
    check_filter(backend, solver, bwf)
    bwd = p3(c=72, dhw=(3, 5, 4), k=16, stride=2, layout="NDHWC", dtype="fp16",
             direction="bwd_data")  # fmt: skip
    solver = registry.get("conv_bwd_data_tc_implicit_gemm_phased")
    config = TcConfig(128, 128, 32, 64, 64, 4)
    assert config in solver.configs(bwd, EMULATOR)
    dy, w = rand(bwd.y_shape(), 0, "fp16"), rand(bwd.w_shape(), 1, "fp16")
    got = run_data(backend, solver, bwd, dy, w, config=config)
    # fp16 output rounding (2^-11 relative) over fp32 sums of 16 * 27 exact products
    np.testing.assert_allclose(got.astype(np.float64), ref_data(bwd, dy, w), rtol=2e-3, atol=5e-3)


def test_explain_lists_the_tensor_core_backward_solvers() -> None:
    for direction, name in (("bwd_filter", "conv_bwd_filter_tc_implicit_gemm"),
                            ("bwd_data", "conv_bwd_data_tc_implicit_gemm_phased")):  # fmt: skip
        problem = _tc_bwd("unet_down_s2_odd", direction)
        rows = {r.name: r for r in cl.explain(problem, "cpu").rows}
        assert rows[name].applicable, rows[name].reason
        ncdhw = dataclasses.replace(problem, layout="NCDHW")  # through the workspace
        assert registry.get(name).is_applicable(ncdhw, EMULATOR)
    solvers = ("conv_bwd_filter_tc_implicit_gemm", "conv_bwd_data_tc_implicit_gemm_phased")
    names = [n for s in solvers for spec in registry.get(s).module_specs() for n in spec.names]
    assert any(n.startswith("tc_conv_bwd_filter_3d<") for n in names)
    assert any(n.startswith("tc_conv_bwd_data_3d<") for n in names)
