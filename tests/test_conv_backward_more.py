"""The phase-decomposed backward-data implicit GEMM and the tensor-core backward filter,
each directly against the float64 reference (tolerances justified in
tests/conv_backward_support.py), their configs, bitwise repeatability and what the
dispatcher picks. On every backend."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest
from conv_backward_support import (
    DTYPES,
    assert_grad_close,
    check_data,
    check_filter,
    problem,
    rand,
    ref_data,
    run_data,
    run_filter,
)

import cudnnlite.ops.conv_backward as cb
from cudnnlite.dispatch import registry
from cudnnlite.dispatch.settings import settings
from cudnnlite.errors import NotSupportedError
from cudnnlite.runtime.caps import capabilities
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.solvers.conv.bwd_data_igemm import TileConfig
from cudnnlite.solvers.conv.bwd_filter_wmma import WmmaSplitKConfig
from cudnnlite.testing import to_backend

IGEMM = "conv_bwd_data_implicit_gemm"
WMMA = "conv_bwd_filter_wmma_implicit_gemm"
LOW = [d for d in DTYPES if d in ("fp16", "bf16")]  # tensor-core dtypes

# (n, c, spatial, k, filter, pad, stride, dilation, groups): real networks scaled down
# (channel structure kept), then odd ones: strides 2, 3, 5 (gaps in the gradient),
# dilation 2 with stride 2 (phases without any tap), primes, 1s, tiny with big padding.
SHAPES = {
    "resnet50_stem_s2": (2, 3, (16, 16), 8, (7, 7), 3, 2, 1, 1),
    "resnet50_3x3_s2": (1, 16, (9, 9), 16, (3, 3), 1, 2, 1, 1),
    "resnet50_down_1x1_s2": (2, 16, (8, 8), 32, (1, 1), 0, 2, 1, 1),
    "resnet50_3x3_s1": (2, 16, (8, 8), 16, (3, 3), 1, 1, 1, 1),
    "resnext_grouped_s2": (1, 16, (8, 8), 16, (3, 3), 1, 2, 1, 4),
    "stride3_primes": (2, 6, (11, 7), 5, (3, 2), ((1, 0), (0, 1)), (3, 2), 1, 1),
    "stride5_gaps": (1, 4, (17, 17), 4, (3, 3), 0, 5, 1, 1),
    "dil2_stride2": (1, 4, (12, 11), 6, (3, 3), 2, 2, 2, 1),
    "dil2_stride3_grouped": (2, 6, (7, 11), 4, (2, 3), ((0, 1), (2, 0)), (2, 3), (1, 2), 2),
    "tiny_big_pad": (1, 3, (2, 2), 5, (3, 3), 2, 1, 1, 1),
    "ones": (1, 1, (1, 1), 1, (1, 1), 0, 1, 1, 1),
    "conv1d_s2_grouped": (2, 6, (13,), 4, (5,), 2, 2, 1, 2),
}


def _p(name: str, layout: str, dtype: str, direction: str) -> Any:
    n, c, hw, k, rs, pad, stride, dil, groups = SHAPES[name]
    return problem(n, c, hw, k, rs, pad, stride, dil, groups, layout, dtype, direction)


def _caps(backend: str) -> Any:
    return capabilities(backend_by_name(backend))


# ------------------------------------------------------------------ backward data igemm


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("name", sorted(SHAPES))
def test_bwd_data_igemm_matches_reference(backend: str, name: str, layout: str) -> None:
    check_data(backend, registry.get(IGEMM), _p(name, layout, "fp32", "bwd_data"), bias=True)


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_bwd_data_igemm_low_precision(backend: str, dtype: str, layout: str) -> None:
    for name in ("resnet50_3x3_s2", "dil2_stride3_grouped", "conv1d_s2_grouped"):
        check_data(backend, registry.get(IGEMM), _p(name, layout, dtype, "bwd_data"))


@pytest.mark.parametrize("tile", [32, 64])
def test_bwd_data_igemm_tiles(backend: str, tile: int) -> None:
    # more pixels and channels than one tile of either size, stride 2: several tiles per phase
    p = problem(2, 72, (15, 14), 24, (3, 3), 1, 2, 1, 1, "NHWC", "fp32", "bwd_data")
    solver = registry.get(IGEMM)
    dy, w = rand(p.y_shape(), 3, "fp32"), rand(p.w_shape(), 4, "fp32")
    got = run_data(backend, solver, p, dy, w, config=TileConfig(tile))
    again = run_data(backend, solver, p, dy, w, config=TileConfig(tile))
    assert np.array_equal(got, again)  # one block per output, fixed order: bitwise
    mag = ref_data(p, np.abs(dy.astype(np.float64)), np.abs(w.astype(np.float64)))
    assert_grad_close(got, ref_data(p, dy, w), mag, p.k_per_group * p.filter_taps, "fp32",
                      what=f"tile {tile}")  # fmt: skip
    check_data(backend, solver, p, seed=3)  # the default config against the reference


def test_bwd_data_igemm_128x128_tile(backend: str) -> None:
    """The 8 x 8-per-thread tile (float32 NHWC): pixels and channels past one tile (C 130,
    several pixel tiles per phase), stride 2, grouped, against the reference; NCHW and
    fp16 refuse it by name; the default takes it for a layer that fills it."""
    solver = registry.get(IGEMM)
    for c, groups, stride in ((130, 1, 2), (20, 2, 1)):
        p = problem(2, c, (15, 14), 24, (3, 3), 1, stride, 1, groups, "NHWC", "fp32",
                    "bwd_data")  # fmt: skip
        dy, w = rand(p.y_shape(), 3, "fp32"), rand(p.w_shape(), 4, "fp32")
        got = run_data(backend, solver, p, dy, w, config=TileConfig(128))
        mag = ref_data(p, np.abs(dy.astype(np.float64)), np.abs(w.astype(np.float64)))
        assert_grad_close(got, ref_data(p, dy, w), mag, p.k_per_group * p.filter_taps, "fp32",
                          what="128x128")  # fmt: skip
    big = problem(8, 128, (32, 32), 128, (3, 3), 1, 1, 1, 1, "NHWC", "fp32", "bwd_data")
    assert solver.default_config(big, _caps(backend)) == TileConfig(128)
    for layout, dtype in (("NCHW", "fp32"), ("NHWC", "fp16")):
        p = problem(1, 8, (6, 6), 8, (3, 3), 1, 1, 1, 1, layout, dtype, "bwd_data")
        assert TileConfig(128) not in solver.configs(p, _caps(backend))
        other = dataclasses.replace(big, layout=layout, dtype=dtype)
        assert solver.default_config(other, _caps(backend)).tile == 64
        with pytest.raises(NotSupportedError, match="tile 128 is not compiled"):
            solver.prepare(backend_by_name(backend), p, TileConfig(128))


def test_bwd_data_igemm_phase_tap_counts() -> None:
    from cudnnlite.solvers.conv.bwd_data_igemm import useful_taps

    # stride 2, 3x3: phases meet 2*2, 2*1, 1*2, 1*1 taps -> 9/4 on average
    assert useful_taps(problem(1, 4, (8, 8), 4, (3, 3), 1, 2)) == pytest.approx(9 / 4)
    # stride 2, dilation 2: half the phases meet no tap, the others all 3 per axis
    assert useful_taps(problem(1, 4, (8, 8), 4, (3, 3), 2, 2, 2)) == pytest.approx(9 / 4)
    assert useful_taps(problem(1, 4, (8, 8), 4, (3, 3), 1, 1)) == 9


# ------------------------------------------------------------------ backward filter wmma


@pytest.mark.parametrize("dtype", LOW)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_bwd_filter_wmma_matches_reference(backend: str, dtype: str, layout: str) -> None:
    solver = registry.get(WMMA)
    if not solver.is_applicable(_p("ones", layout, dtype, "bwd_filter"), _caps(backend)):
        pytest.skip(f"no {dtype} tensor cores on this device")
    for name in ("resnet50_3x3_s1", "resnet50_stem_s2", "resnet50_down_1x1_s2",
                 "resnext_grouped_s2", "dil2_stride3_grouped", "stride5_gaps", "tiny_big_pad",
                 "ones", "conv1d_s2_grouped"):  # fmt: skip
        check_filter(backend, solver, _p(name, layout, dtype, "bwd_filter"))


@pytest.mark.parametrize("tile,splits", [(32, 1), (32, 16), (64, 4)])
def test_bwd_filter_wmma_configs_are_deterministic(backend: str, tile: int, splits: int) -> None:
    dtype = LOW[0]
    p = problem(3, 16, (11, 10), 40, (3, 3), 1, 1, 1, 1, "NHWC", dtype, "bwd_filter")
    solver = registry.get(WMMA)
    if not solver.is_applicable(p, _caps(backend)):
        pytest.skip(f"no {dtype} tensor cores on this device")
    cfg = WmmaSplitKConfig(tile, splits)
    check_filter(backend, solver, p, config=cfg)
    x, dy = rand(p.x_shape(), 5, dtype), rand(p.y_shape(), 6, dtype)
    first = run_filter(backend, solver, p, x, dy, cfg)
    assert all(np.array_equal(first, run_filter(backend, solver, p, x, dy, cfg)) for _ in range(2))


def test_bwd_filter_wmma_says_why_not(backend: str) -> None:
    solver = registry.get(WMMA)
    app = solver.is_applicable(_p("ones", "NCHW", "fp32", "bwd_filter"), _caps(backend))
    assert not app and "fp16 or bf16" in app.reason
    app = solver.is_applicable(_p("ones", "NCHW", "fp16", "bwd_data"), _caps(backend))
    assert not app and "direction" in app.reason
    with pytest.raises(ValueError, match="tile"):
        WmmaSplitKConfig(48, 1)
    with pytest.raises(ValueError, match="splits"):
        WmmaSplitKConfig(32, 0)


# ------------------------------------------------------------------ through the dispatcher


def test_dispatcher_picks_the_new_solvers(backend: str) -> None:
    x, w = rand((2, 16, 10, 10), 7, "fp32"), rand((32, 16, 3, 3), 8, "fp32")
    dy = rand((2, 32, 5, 5), 9, "fp32")
    with settings(deterministic=True):
        cb.conv2d_backward_data(to_backend(dy, backend), to_backend(w, backend), x.shape,
                                stride=2, padding=1)  # fmt: skip
    assert any(n.startswith("bwd_data_implicit_gemm_") for n in cb.last_kernel_names())
    dtype = LOW[0]
    caps = _caps(backend)
    p = problem(2, 16, (10, 10), 32, (3, 3), 1, 2, 1, 1, "NCHW", dtype, "bwd_filter")
    if not registry.get(WMMA).is_applicable(p, caps):
        return
    xl, dyl = x.astype(rand((1,), 0, dtype).dtype), dy.astype(rand((1,), 0, dtype).dtype)
    with settings(deterministic=True):
        cb.conv2d_backward_filter(to_backend(xl, backend), to_backend(dyl, backend), w.shape,
                                  stride=2, padding=1)  # fmt: skip
    assert any(n.startswith("bwd_filter_wmma_") for n in cb.last_kernel_names())
