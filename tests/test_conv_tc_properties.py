"""Property tests of the tensor-core convolution solvers in every direction: on random small
problems (1-D to 3-D, groups 1/2/4 with packed and depthwise-like groups, a stem's few input
channels, 16-byte / 4-byte copies and scalar epilogues, strides 1-3, dilation 1-2,
asymmetric padding up to beyond a tiny image, both layouts, fp16, bf16 and fp32 with TF32
math), every tensor-core solver of the direction that declares itself applicable (the wgmma
forward too, on the emulator and an sm_90 GPU) matches the float64 reference, with a config
of its own list or its default; the forward also with the fused epilogue (bias, residual
z, alpha / alpha2, an exact activation). The draws are
steered so that the engine's solver of the direction applies to each of them (a forward
draw of odd C/groups: the WMMA solver), and the test says so (applicability under the
backend's capabilities: the emulator's, or a GPU of sm_80+ where all three types run).

float64 on the fp64 tensor cores (DMMA) with groups == 1 is tests/test_conv_dmma_properties.py's;
here only grouped float64 problems, in every direction, and the forward's fused epilogue.

Tolerances: tests/conv_support.py's (forward) and tests/conv_backward_support.py's
(gradients): fp16/bf16 products exact in fp32 and fp32 sums in any order (acc_factor 2 over
the T terms of one output), one rounding to the output type; TF32 rounds each operand to
11 significant bits, 2 * 2^-11 * mag on top: acc_factor 2 + 2^14 / T."""

from __future__ import annotations

import dataclasses
import math
import os

import pytest

pytest.importorskip("hypothesis")

from conv_backward_support import check_data, check_filter  # noqa: E402
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

from cudnnlite import ACTIVATION_MODES, dtypes  # noqa: E402
from cudnnlite.dispatch import registry  # noqa: E402
from cudnnlite.problems.conv import LAYOUTS, ConvProblem  # noqa: E402
from cudnnlite.runtime.caps import Capabilities  # noqa: E402
from cudnnlite.solvers.base import Config, Solver  # noqa: E402
from cudnnlite.solvers.conv import bwd_data  # noqa: E402
from cudnnlite.solvers.conv.bwd_filter_wmma import WmmaSplitKSolver  # noqa: E402
from cudnnlite.solvers.conv.common import Epilogue  # noqa: E402
from cudnnlite.solvers.conv.tc_bwd_data import TcBwdDataPhasedSolver  # noqa: E402
from cudnnlite.solvers.conv.tc_bwd_filter import TcBwdFilterSolver, TcSplitKConfig  # noqa: E402
from cudnnlite.solvers.conv.tc_igemm import TcConfig, TcImplicitGemmSolver, variant  # noqa: E402
from cudnnlite.solvers.conv.tc_wgmma import TcWgmmaSolver  # noqa: E402
from cudnnlite.solvers.conv.wmma import WmmaImplicitGemmSolver  # noqa: E402

from conv_support import any_caps, assert_conv_close, operands, run_solver  # noqa: E402

FORWARD = (TcImplicitGemmSolver(), WmmaImplicitGemmSolver(), TcWgmmaSolver())
DATA = (TcBwdDataPhasedSolver(), bwd_data.TcImplicitGemmSolver(), bwd_data.WmmaImplicitGemmSolver())
FILTER = (TcBwdFilterSolver(), WmmaSplitKSolver())
DMMA = {
    "fwd": (registry.get("conv_fwd_dmma_implicit_gemm"),),
    "bwd_data": (registry.get("conv_bwd_data_dmma_implicit_gemm_phased"),
                 registry.get("conv_bwd_data_dmma_implicit_gemm")),
    "bwd_filter": (registry.get("conv_bwd_filter_dmma_implicit_gemm"),),
}  # fmt: skip
TC_DTYPES = ("fp16", "bf16", "fp32") if dtypes.HAVE_BFLOAT16 else ("fp16", "fp32")
# Activations whose float result is exact given their input (dyadic coefficients), so the
# epilogue adds no error of its own beyond the sums' roundings the bound already covers.
ACTIVATIONS = {None: 0.0, "relu": 0.0, "leaky_relu": 0.125, "clipped_relu": 2.0}
# The backend fixture only names a backend: nothing to reset between examples. A draw
# may compile kernels of its own (a tile config, a dtype, a copy width, a path), seconds
# apiece on the emulator, where CI's time goes (the pinned examples alone compile about 35
# modules): by default 3 draws per test, each with the solver's default config (the
# pinned examples pick others); a deeper local run (CUDNNLITE_HYPOTHESIS_EXAMPLES=N
# above 3) also draws configs from the solvers' lists.
EXAMPLES = int(os.environ.get("CUDNNLITE_HYPOTHESIS_EXAMPLES", "3"))
PICKS = st.none() | st.integers(0, 63) if EXAMPLES > 3 else st.none()
HYPO = settings(max_examples=EXAMPLES, deadline=None,
                suppress_health_check=[HealthCheck.function_scoped_fixture])  # fmt: skip


def _even(v: int) -> int:
    return v + v % 2


@st.composite
def conv_problems(draw: st.DrawFn, direction: str = "fwd", dtype: str | None = None,
                  grouped: bool = False) -> ConvProblem:  # fmt: skip
    """A small problem the direction's tensor-core solvers take (fp16/bf16: channel counts
    their copies allow; a forward's odd C/groups from 9: the WMMA solver's, ungrouped)."""
    dtype = dtype or draw(st.sampled_from(TC_DTYPES))
    nd = draw(st.sampled_from((1, 2, 2, 2, 3, 3)))
    groups = draw(st.sampled_from((2, 4) if grouped else (1, 1, 2, 4)))
    # 1-4: a stem (flat path / padded x); multiples of 8: 16-byte copies; others 4-byte;
    # 40: two BK-32 slices of channels, the second partial
    cpg = draw(st.sampled_from((1, 2, 3, 4, 6, 8, 16, 5, 9, 40)))
    # not multiples of 8: scalar stores; 70: two 64-wide tiles of a group's filters
    kpg = draw(st.sampled_from((1, 2, 3, 4, 6, 8, 16, 12, 70)))
    filt = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    strides = tuple(draw(st.integers(1, 3)) for _ in range(nd))
    dils = tuple(draw(st.integers(1, 2)) for _ in range(nd))
    pads = tuple((draw(st.integers(0, 3)), draw(st.integers(0, 3))) for _ in range(nd))
    if direction == "bwd_data" and draw(st.booleans()):
        # stride 1 and padding within the dilated filter's reach: the rotated solvers apply
        strides = (1,) * nd
        pads = tuple((min(b, d * (f - 1)), min(a, d * (f - 1)))
                     for (b, a), d, f in zip(pads, dils, filt, strict=True))  # fmt: skip
    if dtype in ("fp16", "bf16"):
        # 4-byte copies need even channel counts; what else runs odd ones: the forward's
        # flat path (C < 8) or WMMA (C >= 9), both ungrouped 1-D/2-D; backward filter's
        # padded x (ungrouped, C < 8, K a multiple of 8)
        ungrouped = groups == 1 and nd <= 2
        stem_filter = groups == 1 and cpg < 8 and kpg % 8 == 0
        if direction == "fwd" and not ungrouped:
            cpg = _even(cpg)
        if direction == "bwd_data" or (direction == "bwd_filter" and not stem_filter):
            cpg, kpg = _even(cpg), _even(kpg)
    size = 3 if nd == 3 else 7
    # input at least as large as the dilated filter once padded: a non-empty output
    spatial = tuple(
        max(draw(st.integers(1, size)), (f - 1) * d + 1 - b - a)
        for f, d, (b, a) in zip(filt, dils, pads, strict=True)
    )
    return ConvProblem(
        n=draw(st.integers(1, 2)), c=cpg * groups, spatial=spatial, k=kpg * groups,
        filter=filt, pads=pads, strides=strides, dilations=dils, groups=groups,
        layout=draw(st.sampled_from(LAYOUTS[nd])), dtype=dtype, direction=direction,
        math="tf32" if dtype == "fp32" else "default",
    )  # fmt: skip


def _fused(alpha: float, alpha2: float, activation: str | None) -> tuple[Epilogue, str | None]:
    """y = act(alpha * conv + alpha2 * z + bias), with its activation's name."""
    mode = ACTIVATION_MODES.index(activation or "identity")
    e = Epilogue(alpha=alpha, alpha2=alpha2, act_mode=mode, coef=ACTIVATIONS[activation],
                 has_bias=True, has_z=True)  # fmt: skip
    return e, activation


@st.composite
def fused_epilogues(draw: st.DrawFn) -> tuple[Epilogue, str | None]:
    """The fused epilogue with dyadic scalars (exact products)."""
    return _fused(draw(st.sampled_from((1.0, 0.5, 2.0, -1.0))),
                  draw(st.sampled_from((1.0, 0.0, 0.5, -0.25))),
                  draw(st.sampled_from(sorted(ACTIVATIONS, key=str))))  # fmt: skip


def _config(solver: Solver, problem: ConvProblem, caps: Capabilities,
            pick: int | None) -> Config | None:  # fmt: skip
    """One of the solver's configs (what the tuner may choose), or None: its default."""
    if pick is None:
        return None
    options = solver.configs(problem, caps)
    return options[pick % len(options)]


def _tf32_acc(problem: ConvProblem, terms: int) -> float:
    """acc_factor of T = terms per output: TF32 adds 2^-10 * mag, i.e. 2^14 / T units."""
    return 2.0 + (2.0**14 / terms if problem.math == "tf32" else 0.0)


def _forward(backend: str, solver: Solver, problem: ConvProblem, seed: int, pick: int | None,
             fused: tuple[Epilogue, str | None] | None, splits: int = 1) -> None:  # fmt: skip
    """The solver's forward against the reference; the engine's split tiles (the small
    ones) with ``splits`` partial sums (none packed), finished with the epilogue."""
    e, activation = fused or (None, None)
    ops = operands(problem, seed, bias=e is not None, z=e is not None)
    caps = any_caps(backend)
    config = _config(solver, problem, caps, pick) or solver.default_config(problem, caps)
    if isinstance(config, TcConfig) and config.astuple() in variant(problem.dtype).split_tiles:
        config = dataclasses.replace(config, splits=splits)
    got = run_solver(backend, solver, problem, ops, config, epilogue=e)
    acc = _tf32_acc(problem, problem.c_per_group * problem.filter_taps)
    assert_conv_close(got, problem, ops, acc_factor=acc, epilogue=e, activation=activation,
                      what=solver.name)  # fmt: skip


def _stem(problem: ConvProblem) -> bool:
    """The forward's few-channel (flat) path: ungrouped 1-D/2-D, C below one 16-byte copy."""
    wide = 4 if problem.dtype == "fp32" else 8
    return problem.groups == 1 and problem.ndim <= 2 and problem.c < wide


def _odd_channels(problem: ConvProblem) -> bool:
    """16-bit channels that the backward kernels' 4-byte copies cannot take (odd C/groups or
    K/groups); TF32 copies one float: any."""
    odd = problem.c_per_group % 2 or problem.k_per_group % 2
    return problem.dtype != "fp32" and bool(odd)


def _expected_forward(problem: ConvProblem, caps: Capabilities) -> set[str]:
    """The README's table: the engine takes TF32 at any C, 16-bit types at even C/groups or
    a stem; WMMA ungrouped 1-D/2-D; the wgmma engine (the emulator, sm_90) 16-bit types at
    C/groups a multiple of 8."""
    tc = problem.dtype == "fp32" or problem.c_per_group % 2 == 0 or _stem(problem)
    wmma = problem.groups == 1 and problem.ndim <= 2
    wg = caps.wgmma and problem.dtype != "fp32" and problem.c_per_group % 8 == 0
    return {s.name for s, ok in zip(FORWARD, (tc, wmma, wg), strict=True) if ok}


def _fwd(n, c, spatial, k, filt, pads, strides=None, dils=None, groups=1, layout=None,
         dtype="fp16", direction="fwd") -> ConvProblem:  # fmt: skip
    nd = len(spatial)
    return ConvProblem(n=n, c=c, spatial=spatial, k=k, filter=filt, pads=pads,
                       strides=strides or (1,) * nd, dilations=dils or (1,) * nd, groups=groups,
                       layout=layout or LAYOUTS[nd][1], dtype=dtype, direction=direction,
                       math="tf32" if dtype == "fp32" else "default")  # fmt: skip


STEM_C1 = _fwd(1, 1, (5, 6), 8, (3, 3), ((1, 1), (1, 1)), layout="NCHW")
K1 = _fwd(2, 8, (4, 5), 1, (3, 3), ((1, 0), (0, 1)))
POINTWISE_S2 = _fwd(1, 16, (5, 7), 12, (1, 1), ((0, 0), (0, 0)), strides=(2, 2), dtype="fp32")
D3_1X3X3 = _fwd(1, 8, (2, 4, 3), 6, (1, 3, 3), ((0, 0), (1, 1), (1, 1)), layout="NCDHW")
ODD_C9 = _fwd(2, 9, (5, 4), 6, (2, 3), ((0, 1), (2, 1)), dils=(2, 1))  # 16-bit: WMMA only
PACKED = _fwd(2, 16, (4, 4), 24, (3, 3), ((1, 1), (1, 1)), groups=4)  # 4 channels, 6 filters
TINY_BIG_PAD = _fwd(1, 4, (1, 2), 6, (3, 3), ((3, 2), (1, 3)), strides=(2, 1), dtype="fp32")
DEPTHWISE_TF32 = _fwd(1, 4, (5, 4), 8, (3, 3), ((1, 1), (1, 1)), groups=4, dtype="fp32",
                      layout="NCHW")  # fmt: skip


def _as(problem: ConvProblem, direction: str) -> ConvProblem:
    return dataclasses.replace(problem, direction=direction)


@HYPO
@given(problem=conv_problems(), seed=st.integers(0, 2**16),
       pick=PICKS, fused=st.none() | fused_epilogues(),
       splits=st.sampled_from((1, 1, 2, 4)))  # fmt: skip
@example(problem=STEM_C1, seed=0, pick=None, fused=None, splits=1)
@example(problem=K1, seed=1, pick=None, fused=None, splits=1)
@example(problem=POINTWISE_S2, seed=2, pick=None, fused=_fused(2.0, 0.5, "relu"), splits=1)
@example(problem=D3_1X3X3, seed=3, pick=None, fused=_fused(1.0, -0.25, None), splits=2)
@example(problem=PACKED, seed=4, pick=None, fused=_fused(-1.0, 1.0, "leaky_relu"), splits=1)
@example(problem=TINY_BIG_PAD, seed=5, pick=None, fused=None, splits=1)
@example(problem=ODD_C9, seed=7, pick=2, fused=None, splits=1)
@example(problem=DEPTHWISE_TF32, seed=6, pick=None, fused=None, splits=4)
def test_forward_solvers_match_reference(backend: str, problem, seed: int, pick, fused,
                                         splits: int) -> None:  # fmt: skip
    """Each applicable forward solver, with or without the fused epilogue (the engine's
    small tiles with split-K); which apply is the README's rule, and at least one does."""
    applied = {s.name for s in FORWARD if s.is_applicable(problem, any_caps(backend))}
    assert applied == _expected_forward(problem, any_caps(backend)) and applied, problem.key()
    for solver in FORWARD:
        if solver.name in applied:
            _forward(backend, solver, problem, seed, pick, fused, splits)


@HYPO
@given(problem=conv_problems("bwd_data"), seed=st.integers(0, 2**16),
       pick=PICKS, bias=st.booleans())  # fmt: skip
@example(problem=_as(K1, "bwd_data"), seed=0, pick=None, bias=True)  # (a K = 1 stem rotated)
@example(problem=_as(D3_1X3X3, "bwd_data"), seed=1, pick=None, bias=False)
@example(problem=_as(PACKED, "bwd_data"), seed=2, pick=None, bias=True)
@example(problem=_as(TINY_BIG_PAD, "bwd_data"), seed=3, pick=None, bias=True)
@example(problem=_as(POINTWISE_S2, "bwd_data"), seed=4, pick=None, bias=False)
@example(problem=_as(DEPTHWISE_TF32, "bwd_data"), seed=5, pick=None, bias=True)
def test_backward_data_solvers_match_reference(backend: str, problem, seed: int, pick,
                                               bias: bool) -> None:  # fmt: skip
    """The phased solver applies to every draw of even 16-bit channels or TF32 (any
    stride); the rotated ones (stride 1, padding within reach) wherever they say so (a
    K = 1 rotated is a forward stem); each with the transposed conv's bias."""
    caps = any_caps(backend)
    applied = [s for s in DATA if s.is_applicable(problem, caps)]
    assert applied and (DATA[0] in applied) != _odd_channels(problem), problem.key()
    acc = _tf32_acc(problem, problem.k_per_group * problem.filter_taps)
    for solver in applied:
        check_data(backend, solver, problem, seed=seed, bias=bias, acc_factor=acc,
                   config=_config(solver, problem, caps, pick))  # fmt: skip


@HYPO
@given(problem=conv_problems("bwd_filter"), seed=st.integers(0, 2**16),
       pick=PICKS, splits=st.sampled_from((1, 2, 4)))  # fmt: skip
@example(problem=_as(STEM_C1, "bwd_filter"), seed=0, pick=None, splits=2)
@example(problem=_as(K1, "bwd_filter"), seed=1, pick=None, splits=1)  # (WMMA only: K = 1)
@example(problem=_as(D3_1X3X3, "bwd_filter"), seed=2, pick=None, splits=4)
@example(problem=_as(PACKED, "bwd_filter"), seed=3, pick=None, splits=1)
@example(problem=_as(TINY_BIG_PAD, "bwd_filter"), seed=4, pick=None, splits=2)
@example(problem=_as(DEPTHWISE_TF32, "bwd_filter"), seed=5, pick=None, splits=2)
def test_backward_filter_solvers_match_reference(backend: str, problem, seed: int, pick,
                                                 splits: int) -> None:  # fmt: skip
    """The engine's split-K solver applies to every draw of even 16-bit channels or TF32,
    and to an ungrouped 16-bit stem with K a multiple of 8 (x padded), run with ``splits``
    over the pixels (a split with no pixels left is dropped); the WMMA split-K solver
    wherever it applies (fp16/bf16, 1-D/2-D); at least one of them."""
    tc, wmma, caps = *FILTER, any_caps(backend)
    stem = problem.groups == 1 and problem.c < 8 and problem.k % 8 == 0  # x padded to 8
    expected = not _odd_channels(problem) or stem
    assert bool(tc.is_applicable(problem, caps)) == expected, problem.key()
    ran = 0
    if expected:
        cfg = _config(tc, problem, caps, pick) or tc.default_config(problem, caps)
        assert isinstance(cfg, TcSplitKConfig)
        cfg = dataclasses.replace(cfg, splits=splits)
        terms = problem.n * math.prod(problem.out_spatial)
        check_filter(backend, tc, problem, seed=seed, config=cfg,
                     acc_factor=_tf32_acc(problem, terms))  # fmt: skip
        ran += 1
    if wmma.is_applicable(problem, caps):
        check_filter(backend, wmma, problem, seed=seed, config=_config(wmma, problem, caps, pick))
        ran += 1
    assert ran, problem.key()


@HYPO
@given(problem=conv_problems("bwd_data", dtype="fp64", grouped=True), seed=st.integers(0, 2**16),
       pick=PICKS, fused=st.none() | fused_epilogues())  # fmt: skip
@example(problem=dataclasses.replace(PACKED, dtype="fp64", layout="NCHW"), seed=0, pick=1,
         fused=_fused(0.5, -0.25, "clipped_relu"))  # fmt: skip
@example(problem=dataclasses.replace(D3_1X3X3, c=8, k=4, groups=2, dtype="fp64"), seed=1,
         pick=None, fused=None)  # fmt: skip
def test_dmma_grouped_every_direction(backend: str, problem, seed: int, pick, fused) -> None:
    """Grouped float64 on the DMMA solvers: the forward (with or without the fused
    epilogue), backward filter and backward data by phases apply to every draw and match;
    the rotated backward data wherever it applies (half the draws are steered to stride 1
    and padding within reach)."""
    caps = any_caps(backend)
    fwd, bwf, bwd = (_as(problem, d) for d in ("fwd", "bwd_filter", "bwd_data"))
    for direction, p in (("fwd", fwd), ("bwd_filter", bwf), ("bwd_data", bwd)):
        solver = DMMA[direction][0]  # (the phased one for backward data)
        assert solver.is_applicable(p, caps), solver.is_applicable(p, caps)
    _forward(backend, DMMA["fwd"][0], fwd, seed, pick, fused)
    (filt,) = DMMA["bwd_filter"]
    check_filter(backend, filt, bwf, seed=seed, config=_config(filt, bwf, caps, pick))
    for solver in DMMA["bwd_data"]:
        if solver.is_applicable(bwd, caps):
            check_data(backend, solver, bwd, seed=seed, bias=fused is not None,
                       config=_config(solver, bwd, caps, pick))  # fmt: skip
