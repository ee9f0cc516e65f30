"""ConvProblem: derived sizes, keys, and bad keys."""

from __future__ import annotations

import pytest

from cudnnlite.errors import BadParamError
from cudnnlite.problems.conv import ConvProblem
from cudnnlite.problems.suites import SUITES, problems


def test_key_of_a_resnet_layer() -> None:
    p = ConvProblem(32, 64, (56, 56), 64, (3, 3), ((1, 1), (1, 1)), (1, 1), (1, 1))
    assert p.key() == "conv2d_fwd n32-c64-h56-w56 k64-r3-s3 p1x1-u1x1-d1x1 g1 NCHW fp32"
    assert p.out_spatial == (56, 56) and p.flops() == 2 * 32 * 64 * 56 * 56 * 64 * 9


def test_asymmetric_padding_and_math_in_key() -> None:
    p = ConvProblem(1, 3, (7,), 8, (2,), ((0, 1),), (2,), (1,), layout="NWC", dtype="fp32",
                    math="tf32")  # fmt: skip
    assert p.key() == "conv1d_fwd n1-c3-w7 k8-s2 p0_1-u2-d1 g1 NWC fp32 tf32"
    assert ConvProblem.parse(p.key()) == p
    # TF32 is a way to multiply float32: no other dtype's key may carry it.
    for dtype in ("bf16", "fp16", "fp64"):
        with pytest.raises(BadParamError, match="math: 'tf32' applies to fp32 problems only"):
            ConvProblem.parse(f"conv1d_fwd n1-c3-w7 k8-s2 p0_1-u2-d1 g1 NWC {dtype} tf32")


def test_float64_key_round_trip() -> None:
    p = ConvProblem(2, 5, (4, 7, 9), 6, (3, 1, 2), ((1, 1), (0, 0), (1, 0)), (2, 1, 1),
                    (1, 1, 2), layout="NDHWC", dtype="fp64", direction="bwd_filter")  # fmt: skip
    assert p.key().endswith(" NDHWC fp64") and p.key().startswith("conv3d_bwd_filter ")
    assert ConvProblem.parse(p.key()) == p


@pytest.mark.parametrize(
    "key",
    [
        "conv2d_fwd n1-c3-h7 k8-r2-s2 p0x0-u1x1-d1x1 g1 NCHW fp32",  # missing w
        "conv2d_fwd n1-c3-h7-w7 k8-r2-s2 p0x0-u1x1-d1x1 g1 NCHW fp8",  # no such dtype
        "conv2d_fwd n1-c3-h7-w7 k8-r2-s2 p0x0-u1x1-d1x1 g2 NCHW fp32",  # groups ! | c
        "conv2d_fwd n1-c3-h7-w7 k8-r2-s2 p0x0-u1x1-d1x1 g1 NCW fp32",  # 1-D layout
        "hello",
    ],
)
def test_bad_keys(key: str) -> None:
    with pytest.raises(BadParamError):
        ConvProblem.parse(key)


def test_suites() -> None:
    assert len(SUITES["resnet50"]) == 24
    small = problems("vgg16", n=2, hw=8)
    assert all(p.spatial == (8, 8) and p.n == 2 for p in small)
    dw = [p for p in problems("mobilenetv2") if p.depthwise]
    assert dw and all(p.groups == p.c == p.k for p in dw)
