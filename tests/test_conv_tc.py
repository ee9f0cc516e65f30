"""The multistage tensor-core implicit GEMM forward (cudnnlite/solvers/conv/tc_igemm.py),
fp16/bf16, run directly on every backend against the float64 reference: real layers,
odd shapes, every tile, few input channels, the fused epilogue, split-K, NCHW through
the layout conversion; and operands at odd addresses through the public functions.
Shapes stay tiny: the emulator runs every MMA lane by lane."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from conv_tc_support import (
    SMALL,
    SOLVER,
    _bwf,
    _check,
    conv,
)

from cudnnlite.problems.conv import ConvProblem
from cudnnlite.problems.suites import RESNET50, VGG16, scaled
from cudnnlite.runtime.caps import EMULATOR, for_sm
from cudnnlite.solvers.conv.common import Epilogue
from cudnnlite.solvers.conv.tc_igemm import TILES, TILES_ALIGN2, TcConfig

from conv_support import operands

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
    from cudnnlite.dispatch import registry

    stem = conv(32, 3, 224, 64, f=7, pad=3, stride=2, layout="NCHW")
    ranked = h.conv_fwd_ranking(stem, for_sm(90))
    assert ranked[:2] == [h.WGMMA, SOLVER.name]  # (wgmma needs C a multiple of 8)
    assert not registry.get(h.WGMMA).is_applicable(stem, for_sm(90))
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


@pytest.mark.parametrize("splits", [2, 4])
def test_forward_split_k(backend: str, splits: int) -> None:
    # 9 taps x 2 channel slices = 18 reduction tiles over the splits (uneven with 4: the
    # last split gets fewer), with the fused epilogue in the split-K finishing kernel.
    p = conv(1, 40, 3, 20)
    e = Epilogue(alpha=0.5, alpha2=1.0, act_mode=0, has_bias=True, has_z=True)
    cfg = TcConfig(64, 64, 32, 32, 32, 4, splits)
    assert SOLVER.workspace_size(p, cfg) == 4 * splits * 9 * 20
    _check(backend, p, cfg, epilogue=e, activation="relu", bias=True, z=True)


def test_forward_split_k_64_deep(backend: str) -> None:
    # A 64-deep tile split 4 ways: 9 taps x 3 slices (136 channels: the last slice holds 8,
    # the rest zero-filled) = 27 reduction tiles, the last split shorter.
    p = conv(1, 136, 3, 20)
    cfg = TcConfig(64, 128, 64, 32, 64, 3, 4)
    assert cfg in SOLVER.configs(p, EMULATOR)
    _check(backend, p, cfg, epilogue=Epilogue(has_bias=True), bias=True)


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
