"""conv_fwd_gemm_1x1: pointwise convolutions as a tiled GEMM, run directly against the
float64 reference on every backend.

Tolerance (tests/conv_support.py): acc_factor = 2; each output is a sequential fmaf sum
over C/groups products in fp32 (slice by slice), rounded once to the storage type.
"""

from __future__ import annotations

import numpy as np
import pytest
from test_conv_direct import EPILOGUES, _layers, make
from test_conv_implicit_gemm import _tensors

from cudnnlite import dtypes
from cudnnlite.errors import NotSupportedError
from cudnnlite.problems.suites import problems
from cudnnlite.runtime.caps import EMULATOR
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.solvers.conv.common import ConvTensors, Epilogue
from cudnnlite.solvers.conv.gemm_1x1 import TILES_1X1, Gemm1x1Solver
from cudnnlite.solvers.conv.implicit_gemm import TileConfig, all_tiles
from cudnnlite.testing import to_numpy

from conv_support import assert_conv_close, check, operands, run_solver

GEMM = Gemm1x1Solver()
HALF_DTYPES = [d.short for d in dtypes.FP32_COMPUTE_TYPES if d.short != "fp32"]  # fp64: elsewhere


def pointwise(**kw):
    return make(f=(1, 1) if len(kw.get("hw", (6, 6))) == 2 else (1,), pad=0, **kw)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("dtype", ["fp32", *HALF_DTYPES])
def test_real_networks(backend: str, dtype: str, layout: str) -> None:
    layers = [p for suite in ("resnet50", "mobilenetv2")
              for p in problems(suite, n=2, dtype=dtype, layout=layout, hw=5)
              if GEMM.is_applicable(p, EMULATOR)]  # fmt: skip
    assert len(layers) == 13 + 19  # resnet50's stride-1 1x1 layers, MobileNetV2's pointwise
    for problem in layers if dtype == "fp32" else layers[::4]:
        check(backend, GEMM, problem)


ODD_1X1 = {
    "primes": dict(n=1, c=7, k=13, hw=(5, 7)),  # H*W = 35: scalar loads in NCHW
    "c1": dict(c=1, k=5, hw=(4, 4)),
    "k1": dict(c=9, k=1, hw=(3, 4)),
    "groups2": dict(c=8, k=6, groups=2, hw=(4, 6)),
    "groups4_odd": dict(n=2, c=12, k=20, groups=4, hw=(3, 5)),
    "groups_c": dict(c=6, k=12, groups=6, hw=(5, 5)),
    "1d": dict(n=2, c=8, k=12, hw=(19,)),
    "dilated": dict(c=4, k=4, hw=(5, 6), dil=2),  # dilation of a 1x1 filter changes nothing
    "long_reduction": dict(c=300, k=4, hw=(2, 2)),
}


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", sorted(ODD_1X1))
def test_odd_shapes(backend: str, case: str, layout: str) -> None:
    problem = pointwise(layout=layout, **ODD_1X1[case])
    assert GEMM.is_applicable(problem, EMULATOR)
    check(backend, GEMM, problem)


@pytest.mark.parametrize("dtype", HALF_DTYPES)
def test_odd_shapes_half(backend: str, dtype: str) -> None:
    for case in ("primes", "groups4_odd", "1d"):
        for layout in ("NCHW", "NHWC"):
            check(backend, GEMM, pointwise(layout=layout, dtype=dtype, **ODD_1X1[case]))


@pytest.mark.parametrize("hw", [(9, 12), (9, 11)], ids=["vec", "scalar"])
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("tile", all_tiles(TILES_1X1), ids=lambda t: t.label())
def test_every_tile(backend: str, tile: TileConfig, layout: str, hw: tuple) -> None:
    cpg = 20 if hw == (9, 12) else 19
    problem = pointwise(n=2, c=2 * cpg, k=2 * 70, groups=2, hw=hw, layout=layout)
    assert GEMM.is_valid(tile, problem, EMULATOR)
    check(backend, GEMM, problem, config=tile)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("name,epilogue,act", EPILOGUES, ids=[e[0] for e in EPILOGUES])
def test_fused_epilogue(backend: str, name: str, epilogue: Epilogue, act, layout: str) -> None:
    for dtype in ("fp32", HALF_DTYPES[0]):
        problem = pointwise(n=2, c=8, k=12, hw=(4, 5), layout=layout, dtype=dtype)
        ops = operands(problem, seed=7, bias=epilogue.has_bias, z=epilogue.has_z)
        got = run_solver(backend, GEMM, problem, ops, epilogue=epilogue)
        assert_conv_close(got, problem, ops, epilogue=epilogue, activation=act, what=name)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_misaligned_tensors_use_scalar_loads(backend: str, layout: str) -> None:
    """NCHW x moves in 4-pixel vectors when aligned; NHWC loads are element copies."""
    b = backend_by_name(backend)
    problem = pointwise(n=2, c=8, k=8, hw=(4, 4), layout=layout)
    ops = operands(problem, seed=2)
    runner = GEMM.prepare(b, problem, GEMM.default_config(problem, EMULATOR))
    vec = "align4" if layout == "NCHW" else "align1"
    for offset, align in ((0, vec), (1, "align1"), (2, "align1")):
        x, w = _tensors(backend, problem, ops, offset)
        y = b.xp.full(problem.y_shape(), np.nan, np.float32)
        runner(ConvTensors(x=x, w=w, y=y), Epilogue(), None)
        assert runner.kernel_names == [f"gemm_1x1_64x64_16x3_4x4_{layout.lower()}_fp32_{align}"]
        assert_conv_close(to_numpy(y), problem, ops, what=align)


def test_deterministic_and_inputs_untouched(backend: str) -> None:
    problem = pointwise(n=2, c=12, k=20, hw=(4, 4), layout="NHWC")
    ops = operands(problem, seed=1, bias=True, z=True)
    kept = {name: a.copy() for name, a in ops.items()}
    first = run_solver(backend, GEMM, problem, ops)
    np.testing.assert_array_equal(first, run_solver(backend, GEMM, problem, ops))
    for name, a in ops.items():
        np.testing.assert_array_equal(a, kept[name], err_msg=name)


def test_applicability_and_configs() -> None:
    for kw, reason in (
        (dict(f=(3, 3), pad=1), "needs a 1x1 filter"),
        (dict(f=(1, 1), pad=0, stride=2), "needs stride 1"),
        (dict(f=(1, 1), pad=((0, 1), (0, 0))), "needs no padding"),
    ):
        r = GEMM.is_applicable(make(**kw), EMULATOR)
        assert not r and reason in r.reason
        with pytest.raises(NotSupportedError, match=f"conv_fwd_gemm_1x1: {reason}"):
            GEMM.prepare(backend_by_name("cpu"), make(**kw), TileConfig())
    r = GEMM.is_applicable(pointwise(n=4096, c=64, hw=(128, 128), k=4), EMULATOR)
    assert not r and "needs < 2^31 elements in x" in r.reason
    big = pointwise(n=32, c=256, k=256, hw=(28, 28))
    assert GEMM.configs(big, EMULATOR) == all_tiles(TILES_1X1)
    assert GEMM.default_config(big, EMULATOR) == TileConfig(128, 128, 16, 8, 8, 2)
    assert not GEMM.is_valid(object(), big, EMULATOR)
    with pytest.raises(NotSupportedError, match="not valid"):
        GEMM.prepare(backend_by_name("cpu"), big, object())


def test_wide_reduction_layer(backend: str) -> None:
    for problem in _layers("mobilenetv2", ("pw960-320",), n=1, hw=3, layout="NHWC"):
        check(backend, GEMM, problem)
