"""The implicit-GEMM solvers, conv_fwd_implicit_gemm and conv_fwd_implicit_precomp_gemm,
run directly against the float64 reference on every backend.

Tolerance (tests/conv_support.py): acc_factor = 2. Each thread accumulates its outputs
over the reduction in order (slice by slice, k by k within a slice) with fmaf, so the
bound of a sequential fp32 sum holds; fp16/bf16 inputs widen to float exactly, and the
output is rounded once to its storage type (the OUT_RTOL term).
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from test_conv_direct import EPILOGUES, ODD, _layers, make

from cudnnlite import dtypes
from cudnnlite.errors import BadParamError, NotSupportedError
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.problems.suites import problems
from cudnnlite.runtime.caps import EMULATOR
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.solvers.conv.common import ConvTensors, Epilogue
from cudnnlite.solvers.conv.implicit_gemm import (
    ImplicitGemmSolver,
    ImplicitPrecompGemmSolver,
    TileConfig,
    all_tiles,
)
from cudnnlite.testing import to_backend, to_numpy

from conv_support import assert_conv_close, check, operands, run_solver

IGEMM = ImplicitGemmSolver()
PRECOMP = ImplicitPrecompGemmSolver()
SOLVERS = [IGEMM, PRECOMP]
HALF_DTYPES = [d.short for d in dtypes.FP32_COMPUTE_TYPES if d.short != "fp32"]  # fp64: elsewhere
ids = lambda s: s.name  # noqa: E731


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("suite", ["resnet50", "vgg16", "mobilenetv2"])
@pytest.mark.parametrize("solver", SOLVERS, ids=ids)
def test_real_networks_fp32(backend: str, solver, suite: str, layout: str) -> None:
    for problem in problems(suite, n=2, layout=layout, hw=5):
        assert solver.is_applicable(problem, EMULATOR)
        check(backend, solver, problem)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("solver", SOLVERS, ids=ids)
def test_real_networks_half(backend: str, solver, dtype: str, layout: str) -> None:
    layers = {"resnet50": ("conv1", "l1.conv2", "l2.conv2", "l4.down"),
              "vgg16": ("conv3_1",), "mobilenetv2": ("dw144.s2", "pw24-144")}  # fmt: skip
    for suite, names in layers.items():
        for problem in _layers(suite, names, n=1, dtype=dtype, layout=layout):
            check(backend, solver, problem)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", sorted(ODD))
@pytest.mark.parametrize("solver", SOLVERS, ids=ids)
def test_odd_shapes(backend: str, solver, case: str, layout: str) -> None:
    check(backend, solver, make(layout=layout, **ODD[case]))


@pytest.mark.parametrize("dtype", HALF_DTYPES)
@pytest.mark.parametrize("solver", SOLVERS, ids=ids)
def test_odd_shapes_half(backend: str, solver, dtype: str) -> None:
    for case in ("primes", "groups4", "dilation3", "1d", "smaller_than_filter"):
        for layout in ("NCHW", "NHWC"):
            check(backend, solver, make(layout=layout, dtype=dtype, **ODD[case]))


# Spans 2 M-tiles of the largest tile and several N-tiles of the smaller ones, K not a
# multiple of BK; groups 2. c_per_group 8: NHWC vector loads; 5: scalar loads.
@pytest.mark.parametrize("cpg", [8, 5])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("tile", all_tiles(), ids=lambda t: t.label())
@pytest.mark.parametrize("solver", SOLVERS, ids=ids)
def test_every_tile(backend: str, solver, tile: TileConfig, layout: str, cpg: int) -> None:
    problem = make(n=2, c=2 * cpg, k=2 * 70, groups=2, hw=(9, 11), pad=((1, 0), (1, 1)),
                   stride=1, layout=layout)  # fmt: skip
    assert solver.is_valid(tile, problem, EMULATOR)
    check(backend, solver, problem, config=tile)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("solver", SOLVERS, ids=ids)
@pytest.mark.parametrize("name,epilogue,act", EPILOGUES, ids=[e[0] for e in EPILOGUES])
def test_fused_epilogue(backend: str, name: str, epilogue: Epilogue, act, solver, layout) -> None:
    for dtype in ("fp32", HALF_DTYPES[-1]):
        problem = make(n=2, c=8, k=12, hw=(5, 7), layout=layout, dtype=dtype)
        ops = operands(problem, seed=5, bias=epilogue.has_bias, z=epilogue.has_z)
        got = run_solver(backend, solver, problem, ops, epilogue=epilogue)
        assert_conv_close(got, problem, ops, epilogue=epilogue, activation=act, what=name)


def _tensors(backend: str, problem: ConvProblem, ops: dict, offset: int) -> tuple:
    """x and w placed `offset` elements into larger buffers (misaligned when offset is odd)."""
    out = []
    for name in ("x", "w"):
        a = ops[name]
        buf = np.zeros(a.size + offset, a.dtype)
        buf[offset:] = a.ravel()
        dev = to_backend(buf, backend)
        out.append(dev[offset:].reshape(a.shape))
    return tuple(out)


@pytest.mark.parametrize("solver", SOLVERS, ids=ids)
def test_misaligned_tensors(backend: str, solver) -> None:
    """Every load is an element copy (a gather): any element-aligned address works."""
    b = backend_by_name(backend)
    problem = make(n=2, c=8, k=8, hw=(6, 5), layout="NHWC")
    ops = operands(problem, seed=2)
    runner = solver.prepare(b, problem, solver.default_config(problem, EMULATOR))
    ws = b.xp.zeros(max(1, solver.workspace_size(problem, None)), np.uint8)
    for offset in (0, 1):
        x, w = _tensors(backend, problem, ops, offset)
        y = b.xp.full(problem.y_shape(), np.nan, np.float32)
        runner(ConvTensors(x=x, w=w, y=y), Epilogue(), ws)
        assert_conv_close(to_numpy(y), problem, ops, what=f"offset {offset}")


def test_deterministic_and_inputs_untouched(backend: str) -> None:
    problem = make(n=2, c=12, k=20, hw=(7, 6), layout="NCHW")
    for solver in SOLVERS:
        ops = operands(problem, seed=1, bias=True, z=True)
        kept = {name: a.copy() for name, a in ops.items()}
        first = run_solver(backend, solver, problem, ops)
        np.testing.assert_array_equal(first, run_solver(backend, solver, problem, ops))
        for name, a in ops.items():
            np.testing.assert_array_equal(a, kept[name], err_msg=name)


def test_kernel_names_carry_every_parameter() -> None:
    b = backend_by_name("cpu")
    problem = make(c=8, k=8, hw=(5, 5), layout="NHWC", dtype="fp32")
    tile = TileConfig(64, 64, 16, 4, 4, 3)  # BM x BN _ BK x stages _ TM x TN
    assert IGEMM.prepare(b, problem, tile).kernel_names == [
        "implicit_gemm_64x64_16x3_4x4_nhwc_fp32"
    ]
    assert PRECOMP.prepare(b, problem, tile).kernel_names == [
        "implicit_gemm_taps_nhwc",
        "implicit_precomp_gemm_64x64_16x3_4x4_nhwc_fp32",
    ]
    odd = make(c=3, k=8, hw=(5, 5), layout="NCHW")
    assert IGEMM.prepare(b, odd, tile).kernel_names[0].endswith("_nchw_fp32")


def test_configs_and_workspace() -> None:
    big = make(n=32, c=256, k=256, hw=(28, 28))
    small = make(n=1, c=8, k=8, hw=(4, 4))
    for solver in SOLVERS:
        assert len(solver.configs(big, EMULATOR)) == len(all_tiles())
        assert solver.default_config(big, EMULATOR) == TileConfig(128, 128, 16, 8, 8, 2)
        assert solver.configs(small, EMULATOR) == [TileConfig(64, 64, 16, 4, 4, 3)]
        assert solver.default_config(small, EMULATOR) == TileConfig(64, 64, 16, 4, 4, 3)
        assert solver.config_from_dict(TileConfig().to_dict()) == TileConfig()
    assert IGEMM.workspace_size(big, TileConfig()) == 0
    assert PRECOMP.workspace_size(big, TileConfig()) == 16 * 256 * 9


def test_bad_configs_and_workspace() -> None:
    with pytest.raises(BadParamError, match="tm must divide bm"):
        TileConfig(64, 64, 16, 5, 4)
    with pytest.raises(BadParamError, match="bk must be a multiple of 8"):
        TileConfig(64, 64, 12, 4, 4)
    with pytest.raises(BadParamError, match="stages must be at least 2"):
        TileConfig(64, 64, 16, 4, 4, 1)
    with pytest.raises(BadParamError, match="not compiled"):
        TileConfig(64, 32, 16, 4, 4)
    with pytest.raises(BadParamError, match="not compiled"):
        TileConfig(64, 64, 8, 4, 4, 2)  # BK 8: fp64's tiles only, with 3 stages
    fp64_tile = TileConfig(64, 64, 8, 4, 4, 3)  # compiled for fp64 only
    assert not IGEMM.is_valid(fp64_tile, make(c=8, k=8, hw=(5, 5)), EMULATOR)
    with pytest.raises(NotSupportedError, match="not compiled for fp32"):
        IGEMM.prepare(None, make(c=8, k=8, hw=(5, 5)), fp64_tile)  # type: ignore[arg-type]
    with pytest.raises(BadParamError, match="positive ints"):
        TileConfig(64, 64, 16, 4, True)
    with pytest.raises(TypeError):
        IGEMM.config_from_dict({"bm": 64, "bogus": 1})
    b = backend_by_name("cpu")
    problem = make(c=8, k=8, hw=(5, 5))
    runner = PRECOMP.prepare(b, problem, TileConfig(64, 64, 16, 4, 4, 3))
    ops = operands(problem)
    y = np.zeros(problem.y_shape(), np.float32)
    x, w = ops["x"].copy(), ops["w"].copy()
    for ws in (None, np.zeros(16, np.uint8)):
        with pytest.raises(BadParamError, match="workspace: 1152 bytes needed"):
            runner(ConvTensors(x=x, w=w, y=y), Epilogue(), ws)
    with pytest.raises(BadParamError, match="workspace: must be 16-byte aligned"):
        runner(ConvTensors(x=x, w=w, y=y), Epilogue(), np.zeros(2000, np.uint8)[1:])
    np.testing.assert_array_equal(x, ops["x"])
    np.testing.assert_array_equal(w, ops["w"])


def test_applicability_reasons() -> None:
    conv3d = ConvProblem(1, 2, (4, 4, 4), 2, (3, 3, 3), ((1, 1),) * 3, (1,) * 3, (1,) * 3,
                         layout="NCDHW")  # fmt: skip
    huge = make(n=4096, c=64, hw=(128, 128), k=64)  # 2^32 elements of x
    for solver in SOLVERS:
        assert solver.is_applicable(conv3d, EMULATOR)  # 3-D runs: tests/test_conv3d.py
        r = solver.is_applicable(dataclasses.replace(make(), direction="bwd_filter"), EMULATOR)
        assert not r and "direction fwd" in r.reason
        r = solver.is_applicable(huge, EMULATOR)
        assert not r and "needs < 2^31 elements in x" in r.reason
        with pytest.raises(NotSupportedError, match=f"{solver.name}: needs < 2"):
            solver.prepare(backend_by_name("cpu"), huge, TileConfig())
        assert solver.is_applicable(make(groups=4, c=8, k=8), EMULATOR)
