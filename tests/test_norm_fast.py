"""The 16-byte vector forms of batch norm's elementwise passes (``bn_fwd_apply_vec_*``,
``bn_bwd_apply_vec_*``): which kernel each layout / size / alignment selects, and its
results against the float64 reference of cudnnlite.reference.norm (training forward,
inference with the fused add + activation, backward with dz), all dtypes, both layouts.

Tolerance (``check``, as tests/test_batch_norm.py): kernels compute in float32 and round
once at the store: 2 storage units of relative error for fp16/bf16 (u = 2^-11, 2^-8),
plus K32 float32 ulps of the largest term for the float32 reductions feeding the pass.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnnlite.ops.batch_norm as BN
from cudnnlite import dtypes
from cudnnlite.ops.activation import ACTIVATION_MODES
from cudnnlite.ops.norm_common import VEC_ACT_MODES, last_kernel_name
from cudnnlite.reference import norm as rn
from cudnnlite.testing import to_backend, to_numpy

# The float32-computing types; float64 (computed in double) has its own few cases and
# tolerances in tests/test_norm_fp64.py (a full fp64 cross product would cost CI time).
DTYPES = [d.numpy for d in dtypes.FP32_COMPUTE_TYPES]
SHORT = {d.numpy: d.short for d in dtypes.FP32_COMPUTE_TYPES}
UNIT = {"fp32": 2.0**-24, "fp16": 2.0**-11, "bf16": 2.0**-8}
K32 = 256


def check(got: Any, ref: np.ndarray, dtype: Any, scale: float | None = None) -> None:
    ref = np.asarray(ref, dtype=np.float64)
    u = 0.0 if np.dtype(dtype) == np.float32 else UNIT[SHORT[np.dtype(dtype)]]
    scale = float(np.abs(ref).max()) if scale is None else scale
    np.testing.assert_allclose(
        to_numpy(got).astype(np.float64),
        ref,
        rtol=2 * u + 4 * 2.0**-24,
        atol=(K32 * 2.0**-24 + 2 * u) * max(scale, 1e-30),
    )


def data(shape: tuple[int, ...], dtype: Any, seed: int, loc: float = 0.5, sd: float = 2.0):
    return (np.random.default_rng(seed).standard_normal(shape) * sd + loc).astype(dtype)


def nhwc(shape: tuple[int, ...]) -> tuple[int, ...]:
    return (shape[0], *shape[2:], shape[1])


# (NCHW shape, expected variant for (fp32, 16-bit) in NCHW, then in NHWC). VEC is 4
# (fp32) or 8 (fp16 / bf16): H*W = 24 and C = 16 vectorize for every dtype; H*W = 12 and
# C = 12 only for fp32; H*W = 1 makes NCHW channels-fastest; 3x3 with 5 channels never.
CASES = [
    ((2, 16, 4, 6), ("vec_planar", "vec_planar"), ("vec_chlast", "vec_chlast")),
    ((3, 12, 3, 4), ("vec_planar", ""), ("vec_chlast", "")),
    ((5, 8, 1, 1), ("vec_chlast", "vec_chlast"), ("vec_chlast", "vec_chlast")),
    ((2, 5, 3, 3), ("", ""), ("", "")),
]


def kernel(direction: str, variant: str, dtype: Any, act: str = "") -> str:
    """The readable name of the apply kernel: a vector one (``variant``) per activation."""
    if not variant:
        return f"bn_{direction}_apply_{SHORT[np.dtype(dtype)]}"
    return f"bn_{direction}_apply_{variant}{'_' + act if act else ''}_{SHORT[np.dtype(dtype)]}"


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: "x".join(map(str, c[0])))
def test_apply_variants(backend: str, case: Any, layout: str, dtype: Any) -> None:
    shape, v_nchw, v_nhwc = case
    variant = (v_nchw if layout == "NCHW" else v_nhwc)[0 if dtype == np.float32 else 1]
    if layout == "NHWC":
        shape = nhwc(shape)
    c = shape[-1] if layout == "NHWC" else shape[1]
    x, z = data(shape, dtype, 1), data(shape, dtype, 2, 0.0, 1.0)
    dy = data(shape, dtype, 3, 0.0, 1.0)
    r = np.random.default_rng(4)
    w, b = r.uniform(0.5, 1.5, c).astype(np.float32), r.standard_normal(c).astype(np.float32)
    xb, zb, dyb = (to_backend(a, backend) for a in (x, z, dy))
    wb, bb = to_backend(w, backend), to_backend(b, backend)

    ref = rn.batch_norm_train(x, w, b, 1e-5, z=z, activation="relu", layout=layout)
    y, mean, invstd = BN.batch_norm_forward_training(
        xb, wb, bb, z=zb, activation="relu", layout=layout
    )
    assert last_kernel_name() == kernel("fwd", variant, dtype, "relu")
    check(y, ref["y"], dtype)

    dx, _, _, dz = BN.batch_norm_backward(
        dyb, xb, mean, invstd, wb, bias=bb, z=zb, activation="relu", layout=layout
    )
    assert last_kernel_name() == kernel("bwd", variant, dtype, "relu")
    g = rn.batch_norm_backward(
        dy, x, w, ref["mean"], ref["invstd"], layout=layout, beta=b, z=z, activation="relu"
    )
    check(
        dx,
        g["dx"],
        dtype,
        scale=float(np.abs(dy.astype(float)).max() * (w * ref["invstd"]).max()) * 4,
    )
    check(dz, g["dz"], dtype)

    rm = np.linspace(-1, 1, c).astype(np.float32)
    rv = np.linspace(0.5, 3, c).astype(np.float32)
    yi = BN.batch_norm_forward_inference(
        xb, to_backend(rm, backend), to_backend(rv, backend), wb, bb, z=zb,
        activation="gelu", layout=layout,
    )  # fmt: skip
    assert last_kernel_name() == kernel("fwd", variant, dtype, "gelu")
    check(
        yi, rn.batch_norm_inference(x, w, b, rm, rv, z=z, activation="gelu", layout=layout), dtype
    )

    # backward without the fusion: no z, no dz
    dx2, _, _, dz2 = BN.batch_norm_backward(dyb, xb, mean, invstd, wb, layout=layout)
    assert dz2 is None and last_kernel_name() == kernel("bwd", variant, dtype)
    g2 = rn.batch_norm_backward(dy, x, w, ref["mean"], ref["invstd"], layout=layout)
    check(
        dx2,
        g2["dx"],
        dtype,
        scale=float(np.abs(dy.astype(float)).max() * (w * ref["invstd"]).max()) * 4,
    )


@pytest.mark.parametrize("mode", VEC_ACT_MODES[1:], ids=lambda m: ACTIVATION_MODES[m])
def test_every_activation_has_its_vector_kernel(backend: str, mode: int) -> None:
    # One vector kernel per activation mode (the mode a template argument): each against
    # the reference, forward (training and inference) and backward with z and dz.
    act, shape = ACTIVATION_MODES[mode], (2, 8, 4, 6)
    x, z, dy = data(shape, np.float32, 11), data(shape, np.float32, 12, 0.0, 1.0), data(
        shape, np.float32, 13, 0.0, 1.0)  # fmt: skip
    r = np.random.default_rng(14)
    w, b = r.uniform(0.5, 1.5, 8).astype(np.float32), r.standard_normal(8).astype(np.float32)
    xb, zb, wb, bb = (to_backend(a, backend) for a in (x, z, w, b))
    ref = rn.batch_norm_train(x, w, b, 1e-5, z=z, activation=act)
    y, mean, invstd = BN.batch_norm_forward_training(xb, wb, bb, z=zb, activation=act)
    assert last_kernel_name() == kernel("fwd", "vec_planar", np.float32, act)
    check(y, ref["y"], np.float32)
    dx, _, _, dz = BN.batch_norm_backward(to_backend(dy, backend), xb, mean, invstd, wb,
                                          bias=bb, z=zb, activation=act)  # fmt: skip
    assert last_kernel_name() == kernel("bwd", "vec_planar", np.float32, act)
    g = rn.batch_norm_backward(dy, x, w, ref["mean"], ref["invstd"], beta=b, z=z,
                               activation=act)  # fmt: skip
    check(dz, g["dz"], np.float32)
    check(dx, g["dx"], np.float32,
          scale=float(np.abs(g["dz"]).max() * (w * ref["invstd"]).max()) * 4)  # fmt: skip
    rm, rv = np.linspace(-1, 1, 8).astype(np.float32), np.linspace(0.5, 3, 8).astype(np.float32)
    yi = BN.batch_norm_forward_inference(xb, to_backend(rm, backend), to_backend(rv, backend),
                                         wb, bb, z=zb, activation=act)  # fmt: skip
    assert last_kernel_name() == kernel("fwd", "vec_planar", np.float32, act)
    check(yi, rn.batch_norm_inference(x, w, b, rm, rv, z=z, activation=act), np.float32)


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_past_32_bit_indices_the_scalar_kernels(backend: str, layout: str, monkeypatch) -> None:
    # The vector kernels index in 32 bits: past 2^31 - 1 elements the scalar kernels run
    # (64-bit indices); with the limit lowered, the same data through both gives the same
    # bits (the same arithmetic per element).
    shape = (3, 16, 2, 8) if layout == "NCHW" else (3, 2, 8, 16)
    x, z, dy = (data(shape, np.float16, s, 0.0, 1.0) for s in (21, 22, 23))
    w = np.random.default_rng(24).uniform(0.5, 1.5, 16).astype(np.float32)
    xb, zb, dyb, wb = (to_backend(a, backend) for a in (x, z, dy, w))
    tag = "vec_planar" if layout == "NCHW" else "vec_chlast"

    def run() -> list[np.ndarray]:
        y, mean, invstd = BN.batch_norm_forward_training(xb, wb, None, z=zb, activation="silu",
                                                         layout=layout)  # fmt: skip
        dx, _, _, dz = BN.batch_norm_backward(dyb, xb, mean, invstd, wb, z=zb,
                                              activation="silu", layout=layout)  # fmt: skip
        return [to_numpy(a) for a in (y, dx, dz)]

    narrow = run()
    assert last_kernel_name() == kernel("bwd", tag, np.float16, "swish")
    monkeypatch.setattr(BN, "VEC_MAX_ELEMENTS", 0)
    wide = run()
    assert last_kernel_name() == kernel("bwd", "", np.float16)
    for a, b in zip(narrow, wide, strict=True):
        np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("dtype", DTYPES, ids=SHORT.get)
def test_misaligned_view_takes_scalar_path(backend: str, dtype: Any) -> None:
    # C-contiguous but one element past a 16-byte boundary: the scalar kernels, same result
    shape = (2, 16, 4, 4)
    flat = data((int(np.prod(shape)) + 1,), dtype, 5)
    xb = to_backend(flat, backend)[1:].reshape(shape)
    assert xb.flags.c_contiguous
    x = flat[1:].reshape(shape)
    keep = x.copy()
    rm = np.linspace(-1, 1, 16).astype(np.float32)
    rv = np.linspace(0.5, 3, 16).astype(np.float32)
    y = BN.batch_norm_forward_inference(xb, to_backend(rm, backend), to_backend(rv, backend))
    assert last_kernel_name() == kernel("fwd", "", dtype)
    ones, zeros = np.ones(16), np.zeros(16)
    check(y, rn.batch_norm_inference(x, ones, zeros, rm, rv), dtype)
    np.testing.assert_array_equal(to_numpy(xb), keep)
    # the aligned copy of the same data takes the vector path, with the same result
    y2 = BN.batch_norm_forward_inference(
        to_backend(keep, backend), to_backend(rm, backend), to_backend(rv, backend)
    )
    assert last_kernel_name() == kernel("fwd", "vec_planar", dtype)
    np.testing.assert_array_equal(to_numpy(y2), to_numpy(y))


def test_per_activation_and_grid_stride(backend: str) -> None:
    # per-activation: inner 1, C*H*W features in a pack; a large NCHW tensor makes the
    # vector loop wrap (grid capped on the emulator) and cross channels mid-loop
    shape = (6, 4, 5, 8)
    x = data(shape, np.float16, 6)
    w = np.random.default_rng(7).uniform(0.5, 1.5, shape[1:]).astype(np.float32)
    b = np.zeros(shape[1:], np.float32)
    ref = rn.batch_norm_train(x, w, b, 1e-3, mode="per_activation")
    y, _, _ = BN.batch_norm_forward_training(
        to_backend(x, backend), to_backend(w, backend), to_backend(b, backend), eps=1e-3,
        mode="per_activation",
    )  # fmt: skip
    assert last_kernel_name() == "bn_fwd_apply_vec_chlast_fp16"
    check(y, ref["y"], np.float16)
    big = (4, 7, 48, 64)  # 21504 packs of 4: more than the 64 x 256 emulator threads
    xb_ = data(big, np.float32, 8)
    ref = rn.batch_norm_train(xb_, np.ones(7), np.zeros(7), 1e-5)
    y, _, _ = BN.batch_norm_forward_training(to_backend(xb_, backend))
    assert last_kernel_name() == "bn_fwd_apply_vec_planar_fp32"
    check(y, ref["y"], np.float32)
