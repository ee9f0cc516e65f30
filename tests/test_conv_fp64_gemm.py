"""float64 through the GEMM-shaped convolution solvers (issue 18): the implicit GEMMs, the
1x1 GEMM, the phase-decomposed backward data GEMM, the backward filter kernels (direct,
split-K, atomic, bias) and the cuBLAS solvers, each forced and compared with the float64
reference (cudnnlite/reference/).

Operands are full-precision doubles (not float32 values widened): a kernel that rounded an
input, a stage or an accumulator to float would miss by ~1e-8 relative, far outside the
bounds below.

Tolerance, per output: |got - ref| <= ACC * T * ACCUMULATION_EPS["fp64"] * mag + OUT * |ref|
  - T: the terms summed per output (forward C/g*R*S, backward data K/g*R*S, backward
    filter N*P*Q); mag: the same sum over |operands| (conv of |x| and |w| etc.).
    ACCUMULATION_EPS["fp64"] = 2 * 2^-53 already covers both sides: the kernel's
    sequential fma sum (each addition rounds by at most 2^-53 of the running sum of
    magnitudes, so |error| <= T * 2^-53 * mag to first order) AND the reference's own
    double rounding in another order. ACC = 2 leaves a factor 2 for any summation order
    (split-K partials added in split order, atomics in any order, cuBLAS's blocking),
    the same factor the fp32 tests use.
  - OUT = 8 * 2^-53: the epilogue's few double operations after the sum (alpha * acc,
    fma with alpha2 * z, + bias, an activation within 2 ulp), each one rounding.
A float32 scalar (alpha = 1/3 rounded to float32) is off by ~1e-8 relative: the epilogue
case below fails if the scalars do not reach the kernels as doubles.

Finite differences (test_gradients_match_central_differences): the convolution is linear
in x and in w, so the central difference (L(x + h e) - L(x - h e)) / 2h of L = <dy, conv>
has no truncation error at all; only rounding remains, about |L|-scale * 2^-53 / h. With
h = 0.5 (a power of two: x +- h is exact for |x| < 2^52 * h) the error is
<= ~4 * 2^-53 * sum|dy| |conv| / h, far below the 1e-9 used; the check confirms the
backward solvers are the adjoints of the forward one, in float64.
"""

from __future__ import annotations

import dataclasses

import conv_backward_support as bws
import numpy as np
import pytest

from cudnnlite.errors import NotSupportedError
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.runtime.caps import EMULATOR
from cudnnlite.solvers.conv import bwd_filter as bwf
from cudnnlite.solvers.conv.bwd_data_igemm import ImplicitGemmSolver as DataIgemm
from cudnnlite.solvers.conv.bwd_data_igemm import TileConfig as DataTile
from cudnnlite.solvers.conv.common import Epilogue
from cudnnlite.solvers.conv.gemm_1x1 import Gemm1x1Solver
from cudnnlite.solvers.conv.gemm_cublas import ChunkConfig, Im2colSolver
from cudnnlite.solvers.conv.gemm_cublas import Gemm1x1Solver as Cublas1x1
from cudnnlite.solvers.conv.gemm_cublas_bwd import (
    BwdData1x1Solver,
    BwdDataCol2imSolver,
    BwdFilter1x1Solver,
    BwdFilterIm2colSolver,
)
from cudnnlite.solvers.conv.implicit_gemm import (
    TILES,
    TILES_FP64,
    ImplicitGemmSolver,
    ImplicitPrecompGemmSolver,
    TileConfig,
)
from cudnnlite.testing import ACCUMULATION_EPS

from conv_support import magnitude, reference, run_solver

EPS = ACCUMULATION_EPS["fp64"]
ACC, OUT = 2.0, 8 * 2.0**-53
IGEMM, PRECOMP, G1X1 = ImplicitGemmSolver(), ImplicitPrecompGemmSolver(), Gemm1x1Solver()
SMALL = TileConfig(*TILES_FP64[1])  # 64x64_8x3_4x4: one emulator module per variant


def prob(direction: str = "fwd", **kw) -> ConvProblem:
    return bws.problem(dtype="fp64", direction=direction, **kw)


# Odd channels and sizes with stride 2; a ResNet 3x3 (C = K = 64) and a ResNet 1x1
# (64 -> 32, 8x8: H*W % 4 == 0, the NCHW vector loads of gemm_1x1); a 3-D case.
ODD = dict(n=2, c=5, hw=(7, 9), k=6, rs=(3, 3), pad=1, stride=2)
RESNET3 = dict(n=1, c=64, hw=(6, 6), k=64, rs=(3, 3), pad=1, layout="NHWC")
RESNET1 = dict(n=2, c=64, hw=(8, 8), k=32, rs=(1, 1))
D3 = dict(n=1, c=3, hw=(4, 5, 6), k=4, rs=(3, 3, 3), pad=1, stride=(1, 2, 1), layout="NDHWC")


def rand(shape: tuple, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape)  # float64, 53-bit mantissas


def assert_fp64_close(got: np.ndarray, ref: np.ndarray, mag: np.ndarray, terms: int,
                      what: str) -> None:  # fmt: skip
    assert got.dtype == np.float64, f"{what}: got {got.dtype}"
    bound = ACC * terms * EPS * mag + OUT * np.abs(ref) + 1e-300
    err = np.abs(got - ref)
    bad = ~(err <= bound)  # NaN counts as bad
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} off; first at {i}: got "
                             f"{got[i]!r}, ref {ref[i]!r}, bound {bound[i]:.3g}")  # fmt: skip


def check_forward(backend: str, solver, p: ConvProblem, config=None,
                  epilogue: Epilogue | None = None, act: str | None = None) -> None:  # fmt: skip
    e = epilogue or Epilogue()
    ops = {"x": rand(p.x_shape(), 1), "w": rand(p.w_shape(), 2)}
    if e.has_bias:
        ops["bias"] = rand((p.k,), 3)
    if e.has_z:
        ops["z"] = rand(p.y_shape(), 4)
    got = run_solver(backend, solver, p, ops, config, epilogue=e)
    ref = reference(p, ops, e, act)
    mag = abs(e.alpha) * magnitude(p, ops)
    assert_fp64_close(got, ref, mag, p.c_per_group * p.filter_taps, f"{solver.name} {p.key()}")


def check_data(backend: str, solver, p: ConvProblem, config=None) -> None:
    dy, w = rand(p.y_shape(), 5), rand(p.w_shape(), 6)
    got = bws.run_data(backend, solver, p, dy, w, config=config)
    ref, mag = bws.ref_data(p, dy, w), bws.ref_data(p, np.abs(dy), np.abs(w))
    assert_fp64_close(got, ref, mag, p.k_per_group * p.filter_taps, f"{solver.name} {p.key()}")


def check_filter(backend: str, solver, p: ConvProblem, config=None) -> None:
    x, dy = rand(p.x_shape(), 7), rand(p.y_shape(), 8)
    got = bws.run_filter(backend, solver, p, x, dy, config)
    ref, mag = bws.ref_filter(p, x, dy), bws.ref_filter(p, np.abs(x), np.abs(dy))
    terms = p.n * int(np.prod(p.out_spatial))
    assert_fp64_close(got, ref, mag, terms, f"{solver.name} {p.key()}")


# ------------------------------------------------------------------ forward


@pytest.mark.parametrize("solver", [IGEMM, PRECOMP], ids=lambda s: s.name)
def test_implicit_gemm_fp64(backend: str, solver) -> None:
    check_forward(backend, solver, prob(**ODD), SMALL)
    check_forward(backend, solver, prob(**RESNET3), SMALL)
    check_forward(backend, solver, prob(**D3), SMALL)


def test_implicit_gemm_fp64_exact_epilogue(backend: str) -> None:
    """Several M and N tiles (K = 70 > 64, C*R*S = 63 not a multiple of BK 8), with a fused
    epilogue whose scalars are not float32 values. (The 128x64 fp64 tile shares this code
    with another micro-tile; NVRTC compiles it, the emulator test keeps to one module.)"""
    p = prob(n=2, c=7, hw=(9, 10), k=70, rs=(3, 3), pad=1, layout="NCHW")
    e = Epilogue(alpha=1 / 3, alpha2=-0.7, has_bias=True, has_z=True, act_mode=0)
    check_forward(backend, IGEMM, p, SMALL, e, "relu")


def test_gemm_1x1_fp64(backend: str) -> None:
    check_forward(backend, G1X1, prob(**RESNET1), SMALL)  # NCHW: 4-pixel (2 x 16 B) loads
    check_forward(backend, G1X1, prob(n=1, c=5, hw=(3, 7), k=9, rs=(1, 1)), SMALL)  # scalar
    check_forward(backend, G1X1, prob(**{**RESNET1, "layout": "NHWC"}), SMALL)


def test_cublas_forward_fp64(backend: str) -> None:
    check_forward(backend, Cublas1x1(), prob(**RESNET1), ChunkConfig(1))
    e = Epilogue(alpha=1 / 3, has_bias=True)  # the gemm_epilogue<double> pass, in place
    check_forward(backend, Cublas1x1(), prob(**{**RESNET1, "layout": "NHWC"}), None, e)
    check_forward(backend, Im2colSolver(), prob(**ODD), ChunkConfig(1))


# ------------------------------------------------------------------ backward data


def test_bwd_data_fp64(backend: str) -> None:
    solver = DataIgemm()
    check_data(backend, solver, prob("bwd_data", **ODD), DataTile(32))  # 4 phases
    check_data(backend, solver, prob("bwd_data", **RESNET3), DataTile(64))
    check_data(backend, BwdDataCol2imSolver(), prob("bwd_data", **ODD), ChunkConfig(1))
    check_data(backend, BwdData1x1Solver(), prob("bwd_data", **RESNET1))


# ------------------------------------------------------------------ backward filter


def test_bwd_filter_fp64(backend: str) -> None:
    check_filter(backend, bwf.DirectSolver(), prob("bwd_filter", **ODD))
    split = bwf.ImplicitGemmSplitKSolver()
    check_filter(backend, split, prob("bwd_filter", **ODD), bwf.SplitKConfig(32, 4))
    check_filter(backend, split, prob("bwd_filter", **RESNET3), bwf.SplitKConfig(64, 1))
    atomic = bwf.ImplicitGemmAtomicSolver()
    check_filter(backend, atomic, prob("bwd_filter", **ODD), bwf.SplitKConfig(32, 4))
    check_filter(backend, BwdFilterIm2colSolver(), prob("bwd_filter", **ODD), ChunkConfig(1))
    check_filter(backend, BwdFilter1x1Solver(), prob("bwd_filter", **RESNET1))


def test_bwd_filter_workspace_holds_doubles() -> None:
    p = prob("bwd_filter", **ODD)
    p32 = dataclasses.replace(p, dtype="fp32")
    for solver in (bwf.ImplicitGemmSplitKSolver(), bwf.ImplicitGemmAtomicSolver()):
        cfg = bwf.SplitKConfig(32, 4)
        assert solver.workspace_size(p, cfg) == 2 * solver.workspace_size(p32, cfg)


@pytest.mark.parametrize("channels_last", [False, True])
def test_backward_bias_fp64(backend: str, channels_last: bool) -> None:
    from cudnnlite.runtime.select import backend_by_name
    from cudnnlite.testing import to_backend, to_numpy

    b = backend_by_name(backend)
    dy = rand((3, 5, 7, 9) if not channels_last else (3, 7, 9, 5), 9)
    db = b.xp.full(5, np.nan)
    bwf.backward_bias(b, to_backend(dy, backend), db, channels_last)
    axes = (0, 2, 3) if not channels_last else (0, 1, 2)
    terms = dy.size // 5
    assert_fp64_close(to_numpy(db), dy.sum(axis=axes), np.abs(dy).sum(axis=axes), terms, "db")


# ------------------------------------------------------------------ adjoints


def test_gradients_match_central_differences(backend: str) -> None:
    """dx and dw of the fp64 GEMM solvers against central differences of
    L(x, w) = <dy, conv(x, w)> through the fp64 implicit GEMM (see the module docstring:
    no truncation error, h = 0.5)."""
    p = prob(**ODD)
    x, w, dy = rand(p.x_shape(), 11), rand(p.w_shape(), 12), rand(p.y_shape(), 13)

    def loss(xv: np.ndarray, wv: np.ndarray) -> float:
        return float(np.sum(dy * run_solver(backend, IGEMM, p, {"x": xv, "w": wv}, SMALL)))

    dx = bws.run_data(backend, DataIgemm(), dataclasses.replace(p, direction="bwd_data"), dy, w,
                      config=DataTile(32))  # fmt: skip
    dw = bws.run_filter(backend, bwf.ImplicitGemmSplitKSolver(),
                        dataclasses.replace(p, direction="bwd_filter"), x, dy,
                        bwf.SplitKConfig(32, 4))  # fmt: skip
    h = 0.5
    for arr, grad, name in ((x, dx, "dx"), (w, dw, "dw")):
        corners = [(0,) * arr.ndim, tuple(s - 1 for s in arr.shape)]
        for idx in [*corners, tuple(s // 2 for s in arr.shape)]:
            plus, minus = arr.copy(), arr.copy()
            plus[idx] += h
            minus[idx] -= h
            args = ((plus, w), (minus, w)) if name == "dx" else ((x, plus), (x, minus))
            fd = (loss(*args[0]) - loss(*args[1])) / (2 * h)
            assert abs(fd - grad[idx]) <= 1e-9 * (1 + abs(grad[idx])), (name, idx, fd, grad[idx])


# ------------------------------------------------------------------ configs and reasons


def test_fp64_tiles_compiled_and_offered() -> None:
    """configs/is_valid agree with module_specs: fp64 offers TILES_FP64 only, and a forced
    fp32 tile says why it cannot run fp64 (its stages in doubles exceed 48 KB)."""
    p = prob(**RESNET3)
    for solver, tiles in ((IGEMM, TILES_FP64), (G1X1, TILES_FP64)):
        offered = {(c.bm, c.bn, c.bk, c.tm, c.tn, c.stages) for c in solver.configs(p, EMULATOR)}
        assert offered <= set(tiles)
        specs = [s for s in solver.module_specs() if any("<double" in n for n in s.names)]
        compiled = {n for s in specs for n in s.names}
        for t in tiles:
            args = ", ".join(map(str, t))
            assert any(args in n for n in compiled), (solver.name, t)
        assert not any(", ".join(map(str, t)) in n for t in TILES for n in compiled)
    big = TileConfig(*TILES[0])
    assert not IGEMM.is_valid(big, p, EMULATOR)
    with pytest.raises(NotSupportedError, match="not compiled for fp64: its stages in doubles"):
        IGEMM.prepare(None, p, big)  # type: ignore[arg-type]
    with pytest.raises(NotSupportedError, match="48 KB"):
        G1X1.prepare(None, prob(**RESNET1), big)  # type: ignore[arg-type]
    assert IGEMM.default_config(p, EMULATOR) in [TileConfig(*t) for t in TILES_FP64]
