"""cudnnlite.conv2d / conv1d / conv2d_plan: argument conventions, the fused epilogue,
out=, layouts, and bad inputs — through the dispatcher, on every backend. The solvers
themselves are tested one by one in test_conv_<solver>.py."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite.dispatch import registry
from cudnnlite.errors import BadParamError, NotSupportedError
from cudnnlite.problems import parse_key
from cudnnlite.reference.conv import conv_bias_act_forward, conv_forward
from cudnnlite.runtime.select import backend_by_name
from cudnnlite.testing import ACCUMULATION_EPS, ELEMENTWISE_RTOL, to_backend, to_numpy


def rand(shape: tuple[int, ...], seed: int, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32).astype(dtype)


def close(got: Any, ref: np.ndarray, x: np.ndarray, w: np.ndarray, **conv: Any) -> None:
    """fp32: error within 4 * K * 2^-24 of conv(|x|, |w|) (fp32 accumulation of K terms,
    any summation order; Winograd F(2x2) stays well inside, see winograd.py)."""
    pads = conv.get("pads", [(0, 0)] * (x.ndim - 2))
    mag = conv_forward(np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)), pads,
                       conv.get("strides", [1] * (x.ndim - 2)),
                       conv.get("dilations", [1] * (x.ndim - 2)), conv.get("groups", 1),
                       conv.get("channels_last", False))  # fmt: skip
    k_terms = w[0].size
    bound = 4 * k_terms * 2.0**-24 * np.abs(mag) + 1e-6
    err = np.abs(to_numpy(got).astype(np.float64) - ref)
    assert np.all(err <= bound), f"max err {err.max()} vs bound {bound[err > bound].min()}"


def test_conv2d_matches_reference_with_the_dispatchers_choice(backend: str) -> None:
    x, w = rand((2, 8, 9, 9), 0), rand((16, 8, 3, 3), 1)
    y = cl.conv2d(to_backend(x, backend), to_backend(w, backend), padding=1)
    assert type(y) is type(to_backend(x, backend))
    close(y, conv_forward(x, w, [(1, 1), (1, 1)], (1, 1), (1, 1)), x, w, pads=[(1, 1), (1, 1)])


@pytest.mark.parametrize("padding,expect", [
    ("valid", [(0, 0), (0, 0)]),
    ("same", [(1, 1), (1, 1)]),
    (2, [(2, 2), (2, 2)]),
    ((1, 0), [(1, 1), (0, 0)]),
    ((0, 1, 2, 0), [(0, 1), (2, 0)]),
])  # fmt: skip
def test_padding_forms(backend: str, padding: Any, expect: list) -> None:
    x, w = rand((1, 3, 7, 6), 2), rand((4, 3, 3, 3), 3)
    y = cl.conv2d(to_backend(x, backend), to_backend(w, backend), padding=padding)
    close(y, conv_forward(x, w, expect, (1, 1), (1, 1)), x, w, pads=expect)


def test_same_padding_with_even_filter_and_dilation(backend: str) -> None:
    # total padding d*(f-1) = 2*3 = 6 per dim split 3/3; f=2 d=1: 1 split 0/1 (extra after)
    x, w = rand((1, 2, 7, 7), 4), rand((3, 2, 2, 4), 5)
    y = cl.conv2d(to_backend(x, backend), to_backend(w, backend), padding="same", dilation=(1, 2))
    pads = [(0, 1), (3, 3)]
    assert to_numpy(y).shape == (1, 3, 7, 7)
    close(y, conv_forward(x, w, pads, (1, 1), (1, 2)), x, w, pads=pads, dilations=(1, 2))


def test_fused_bias_residual_activation(backend: str) -> None:
    x, w = rand((2, 6, 8, 8), 6), rand((5, 6, 3, 3), 7)
    b, z = rand((5,), 8), rand((2, 5, 8, 8), 9)
    kw: dict[str, Any] = dict(padding=1, activation="leaky_relu", activation_coef=0.2, alpha=0.5,
                              alpha2=2.0)  # fmt: skip
    y = cl.conv2d(*(to_backend(a, backend) for a in (x, w, b)), z=to_backend(z, backend), **kw)
    ref = conv_bias_act_forward(x, w, [(1, 1), (1, 1)], (1, 1), (1, 1), bias=b, z=z, alpha=0.5,
                                alpha2=2.0, activation="leaky_relu", coef=0.2)  # fmt: skip
    np.testing.assert_allclose(to_numpy(y), ref, rtol=1e-4, atol=1e-4)
    # z given, alpha2 omitted: weight 1 (documented)
    y1 = cl.conv2d(to_backend(x, backend), to_backend(w, backend), padding=1,
                   z=to_backend(z, backend))  # fmt: skip
    ref1 = conv_forward(x, w, [(1, 1), (1, 1)], (1, 1), (1, 1)) + z
    np.testing.assert_allclose(to_numpy(y1), ref1, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("alias,mode,params", [
    ("silu", "swish", {}),
    ("relu6", "hardtanh", dict(activation_coef=6.0, activation_threshold=0.0)),
])  # fmt: skip
def test_pytorch_activation_names_fuse_as_their_modes(backend: str, alias: str, mode: str,
                                                       params: dict) -> None:  # fmt: skip
    # PyTorch's silu / relu6 are swish with beta 1 / hardtanh(0, 6): the same kernel, so
    # bit-identical results, and -0 (at x[0]'s padded corner) keeps its sign as in PyTorch
    x, w = rand((2, 3, 6, 6), 40) * 4, rand((4, 3, 3, 3), 41)
    xs, ws = to_backend(x, backend), to_backend(w, backend)
    y = cl.conv2d(xs, ws, padding=1, activation=alias)
    np.testing.assert_array_equal(to_numpy(y), to_numpy(cl.conv2d(xs, ws, padding=1,
                                                                  activation=mode, **params)))
    ref = conv_forward(x, w, [(1, 1), (1, 1)], (1, 1), (1, 1))
    ref = ref / (1 + np.exp(-ref)) if alias == "silu" else np.clip(ref, 0, 6)
    np.testing.assert_allclose(to_numpy(y), ref, rtol=1e-4, atol=1e-4)
    plan = cl.conv2d_plan(x.shape, w.shape, padding=1, backend=backend)
    np.testing.assert_array_equal(to_numpy(plan(xs, ws, activation=alias)), to_numpy(y))
    for name in ("activation_coef", "activation_threshold"):
        with pytest.raises(BadParamError, match=f"{name}: {alias} takes none"):
            cl.conv2d(xs, ws, activation=alias, **{name: 1.0})


def test_nhwc_layout_and_conv1d(backend: str) -> None:
    x, w = rand((2, 7, 5, 6), 10), rand((4, 3, 3, 6), 11)  # NHWC / KRSC
    y = cl.conv2d(to_backend(x, backend), to_backend(w, backend), stride=2, padding=1,
                  layout="NHWC")  # fmt: skip
    ref = conv_forward(x, w, [(1, 1), (1, 1)], (2, 2), (1, 1), channels_last=True)
    close(y, ref, x, w, pads=[(1, 1), (1, 1)], strides=(2, 2), channels_last=True)
    x1, w1 = rand((3, 4, 11), 12), rand((6, 2, 3), 13)  # NCW, groups 2
    y1 = cl.conv1d(to_backend(x1, backend), to_backend(w1, backend), padding=2, dilation=2,
                   groups=2)  # fmt: skip
    ref1 = conv_forward(x1, w1, [(2, 2)], (1,), (2,), groups=2)
    close(y1, ref1, x1, w1, pads=[(2, 2)], dilations=(2,), groups=2)


def test_non_contiguous_input_and_out(backend: str) -> None:
    x, w = rand((2, 3, 10, 12), 14), rand((4, 3, 3, 3), 15)
    xb = to_backend(x, backend)[:, :, ::2, 1::2]  # (2, 3, 5, 6) view
    xp = np if backend == "cpu" else __import__("cupy")
    big = xp.zeros((2, 4, 5, 12), dtype=np.float32)
    out = big[:, :, :, ::2]  # non-contiguous out
    y = cl.conv2d(xb, to_backend(w, backend), padding=1, out=out)
    assert y is out
    ref = conv_forward(x[:, :, ::2, 1::2], w, [(1, 1), (1, 1)], (1, 1), (1, 1))
    close(out, ref, x[:, :, ::2, 1::2], w, pads=[(1, 1), (1, 1)])
    assert np.all(to_numpy(big)[:, :, :, 1::2] == 0)  # untouched between


@pytest.mark.parametrize("dtype", ["float16", "bfloat16"])
def test_half_precision(backend: str, dtype: str) -> None:
    dt = np.dtype(np.float16) if dtype == "float16" else cl.bfloat16
    if dt is None:
        pytest.skip("ml_dtypes not installed")
    x, w = rand((1, 16, 6, 6), 16, dt), rand((8, 16, 3, 3), 17, dt)
    y = cl.conv2d(to_backend(x, backend), to_backend(w, backend), padding=1)
    assert y.dtype == dt
    ref = conv_forward(x, w, [(1, 1), (1, 1)], (1, 1), (1, 1))
    # one rounding of the output (2^-8 for bf16) plus fp32 accumulation: 1e-2 relative to
    # the magnitude of the sum is a generous, dtype-level bound
    mag = conv_forward(np.abs(x.astype(np.float64)), np.abs(w.astype(np.float64)),
                       [(1, 1), (1, 1)], (1, 1), (1, 1))  # fmt: skip
    assert np.all(np.abs(to_numpy(y).astype(np.float64) - ref) <= 1e-2 * mag + 1e-3)


def test_plan_reuse_equals_functional_call(backend: str) -> None:
    x, w, b = rand((2, 4, 7, 7), 18), rand((6, 4, 3, 3), 19), rand((6,), 20)
    xb, wb, bb = (to_backend(a, backend) for a in (x, w, b))
    plan = cl.conv2d_plan(x.shape, w.shape, padding=1, backend=backend)
    assert plan.solver in registry.NAMES and plan.kernel_names
    for algo in ("auto", plan.solver):
        y = cl.conv2d(xb, wb, bb, padding=1, activation="relu", algo=algo)
        y2 = plan(xb, wb, bb, activation="relu")
        np.testing.assert_array_equal(to_numpy(y), to_numpy(y2))


def test_every_solver_is_explained(backend: str) -> None:
    e = cl.explain("conv2d_fwd n1-c32-h8-w8 k32-r3-s3 p1x1-u1x1-d1x1 g1 NCHW fp32", backend)
    assert [r.name for r in e.rows] == [n for n in registry.NAMES if n.startswith("conv_fwd_")]
    assert sum(r.chosen for r in e.rows) == 1


def test_explicit_algo_that_does_not_apply(backend: str) -> None:
    x, w = rand((1, 4, 6, 6), 21), rand((4, 4, 5, 5), 22)
    with pytest.raises(NotSupportedError, match="conv_fwd_gemm_1x1 cannot run .*1x1"):
        cl.conv2d(to_backend(x, backend), to_backend(w, backend), algo="conv_fwd_gemm_1x1")


# ------------------------------------------------------------------ bad input
def bad_cases() -> list[tuple[str, dict, str]]:
    x, w = rand((1, 4, 6, 6), 23), rand((8, 4, 3, 3), 24)
    return [
        ("channel mismatch", dict(x=x, w=rand((8, 3, 3, 3), 1)), r"w: has 3 channels per group"),
        ("groups not dividing C", dict(x=x, w=rand((8, 1, 3, 3), 1), groups=3), r"groups: 3"),
        ("groups not dividing K", dict(x=x, w=rand((6, 1, 3, 3), 1), groups=4), r"groups: 4"),
        ("bias length", dict(x=x, w=w, bias=rand((7,), 1)), r"bias: expected shape \(8,\)"),
        ("z shape", dict(x=x, w=w, z=rand((1, 8, 5, 5), 1)), r"z: expected shape"),
        ("negative padding", dict(x=x, w=w, padding=-1), r"padding"),
        ("stride 0", dict(x=x, w=w, stride=0), r"stride"),
        ("dilation 0", dict(x=x, w=w, dilation=0), r"dilation"),
        ("empty output", dict(x=rand((1, 4, 2, 2), 1), w=w), r"output would be empty"),
        ("2-D input", dict(x=rand((6, 6), 1), w=w), r"x: expected a 4-D"),
        ("mixed dtypes", dict(x=x, w=w.astype(np.float16)), r"w: expected dtype float32"),
        ("layout", dict(x=x, w=w, layout="CHWN"), r"layout"),
        ("NHWC data as NCHW", dict(x=rand((1, 6, 6, 4), 1), w=rand((8, 3, 3, 4), 1)), r"w: has"),
        ("int32", dict(x=x.astype(np.int32), w=w.astype(np.int32)), r"x: expected dtype"),
        ("complex", dict(x=x.astype(np.complex128), w=w), r"x: expected dtype"),
        ("float64 x, float32 w", dict(x=x.astype(np.float64), w=w),
         r"w: expected dtype float64 like x, got float32"),
        ("float64 with a float32 bias", dict(x=x.astype(np.float64), w=w.astype(np.float64),
         bias=rand((8,), 1)), r"bias: expected dtype float64 like x, got float32"),
        ("float32 with a float64 residual", dict(x=x, w=w, z=rand((1, 8, 4, 4), 1, np.float64)),
         r"z: expected dtype float32 like x, got float64"),
        ("same with stride", dict(x=x, w=w, padding="same", stride=2), r"'same' needs stride 1"),
        ("unknown activation", dict(x=x, w=w, activation="swiglu"), r"activation"),
        ("tf32 for fp16", dict(x=x.astype(np.float16), w=w.astype(np.float16), math="tf32"),
         r"tf32"),
        ("unknown algo", dict(x=x, w=w, algo="fastest"), r"unknown solver"),
        ("not an array", dict(x=[[1.0]], w=w), r"x: expected a NumPy or CuPy array"),
    ]  # fmt: skip


@pytest.mark.parametrize("case", bad_cases(), ids=lambda c: c[0])
def test_bad_input(backend: str, case: tuple[str, dict, str]) -> None:
    _, kwargs, pattern = case
    moved = {k: to_backend(v, backend) if isinstance(v, np.ndarray) else v
             for k, v in kwargs.items()}  # fmt: skip
    before = {k: to_numpy(v).copy() for k, v in moved.items() if hasattr(v, "shape")}
    with pytest.raises(BadParamError, match=pattern):
        cl.conv2d(**moved)
    for k, v in before.items():
        np.testing.assert_array_equal(to_numpy(moved[k]), v)  # inputs untouched


def test_out_overlapping_x_is_refused(backend: str) -> None:
    x = to_backend(rand((1, 4, 6, 6), 25), backend)
    with pytest.raises(BadParamError, match="cannot run in place"):
        cl.conv2d(x, to_backend(rand((4, 4, 1, 1), 26), backend), out=x)


def test_huge_tensors_are_refused_clearly() -> None:
    with pytest.raises(NotSupportedError, match="2\\^31"):
        cl.conv2d_plan((1, 64, 8192, 8192), (64, 64, 3, 3), padding=1, backend="cpu")


def test_address_sanitizer_build_with_an_array_passed_twice(
    backend: str, emulator_only: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Without z the kernels receive y twice (as y and as z); the ASan build must give
    # both one copy, or the untouched second copy would overwrite the result.
    monkeypatch.setenv("CUDNNLITE_EMU_ASAN", "1")
    x, w = rand((1, 3, 6, 6), 30), rand((4, 3, 3, 3), 31)
    y = cl.conv2d(x, w, padding=1, algo="conv_fwd_direct")
    close(y, conv_forward(x, w, [(1, 1), (1, 1)], (1, 1), (1, 1)), x, w, pads=[(1, 1), (1, 1)])


# ------------------------------------------------------------------ float64
#
# float64 computes and accumulates in double. Bound against the float64 reference for a
# sum of K = C/g * R * S products: K * ACCUMULATION_EPS["fp64"] (2 * 2^-53 per term: one
# rounding per fma on our side, one per addition on the reference's einsum side) times
# conv(|x|, |w|). A float32 accumulation or a scalar rounded to float32 would be off by
# ~2^-24 relative, 10^8 times this bound.
FP64_EPS = ACCUMULATION_EPS["fp64"]

FP64_CASES = [
    # (x, w, conv2d arguments, what the heuristics pick: never Winograd or tensor cores)
    ((2, 32, 14, 14), (32, 32, 3, 3), dict(padding=1), "real 3x3 layer"),
    ((1, 5, 11, 7), (3, 5, 2, 3), dict(stride=(2, 1), dilation=(1, 2), padding=(1, 0)), "odd"),
    ((1, 11, 7, 5), (3, 2, 3, 5), dict(stride=(2, 1), dilation=(1, 2), padding=(1, 0),
                                       layout="NHWC"), "odd NHWC"),  # fmt: skip
    ((2, 24, 7, 9), (40, 24, 1, 1), {}, "pointwise"),
    ((1, 12, 9, 10), (24, 1, 3, 3), dict(groups=12, padding=1), "depthwise"),
]


def _geometry(kw: dict, nd: int = 2) -> dict:
    """conv_forward's arguments for conv2d keyword arguments (int or tuple forms)."""
    def tup(v: Any) -> tuple:
        return (v,) * nd if isinstance(v, int) else tuple(v)
    pads = [(p, p) for p in tup(kw.get("padding", 0))]
    return dict(pads=pads, strides=tup(kw.get("stride", 1)), dilations=tup(kw.get("dilation", 1)),
                groups=kw.get("groups", 1), channels_last=kw.get("layout", "NCHW")[-1] == "C")


def _fp64_bound(x: np.ndarray, w: np.ndarray, geo: dict) -> np.ndarray:
    """K * FP64_EPS * conv(|x|, |w|) (see FP64_EPS)."""
    k_terms = w[0].size  # C/g * R * S in either filter layout
    return k_terms * FP64_EPS * conv_forward(np.abs(x), np.abs(w), **geo)


@pytest.mark.parametrize("xs,ws,kw,what", FP64_CASES, ids=[c[3] for c in FP64_CASES])
def test_float64_default_dispatch(backend: str, xs: tuple, ws: tuple, kw: dict,
                                  what: str) -> None:  # fmt: skip
    x, w = rand(xs, 40, np.float64), rand(ws, 41, np.float64)
    x += rand(xs, 42, np.float64) * 2.0**-30  # bits beyond float32's mantissa
    y = cl.conv2d(to_backend(x, backend), to_backend(w, backend), **kw)
    assert y.dtype == np.float64
    geo = _geometry(kw)
    err = np.abs(to_numpy(y) - conv_forward(x, w, **geo))
    bound = _fp64_bound(x, w, geo)
    assert np.all(err <= bound), f"{what}: max err {err.max():.3g}, bound {bound.max():.3g}"
    plan = cl.conv2d_plan(xs, ws, dtype=np.float64, backend=backend, **kw)
    assert "winograd" not in plan.solver and "wmma" not in plan.solver
    assert "tc_" not in plan.solver and plan.problem.key().endswith(" fp64")


def test_float64_fused_epilogue_scalars_are_exact(backend: str) -> None:
    # alpha 0.1, alpha2 -0.7 and elu's 0.3 are not float32 numbers: rounded to float32 they
    # would move the result by ~1e-9 relative, far outside the bound below.
    x, w = rand((2, 6, 8, 8), 43, np.float64), rand((5, 6, 3, 3), 44, np.float64)
    b, z = rand((5,), 45, np.float64), rand((2, 5, 8, 8), 46, np.float64)
    kw: dict[str, Any] = dict(padding=1, alpha=0.1, alpha2=-0.7)
    geo = _geometry(kw)
    for act, coef in (("elu", 0.3), ("relu", None), ("swish", 1.7)):
        y = cl.conv2d(*(to_backend(a, backend) for a in (x, w, b)), z=to_backend(z, backend),
                      activation=act, activation_coef=coef, **kw)  # fmt: skip
        ref = conv_bias_act_forward(x, w, **geo, bias=b, z=z, alpha=0.1, alpha2=-0.7,
                                    activation=act, coef=coef)  # fmt: skip
        # the sum's bound scaled by alpha, 8 roundings of the epilogue's terms (alpha *
        # acc, the fma with alpha2 * z, + bias, on both sides), times the activation's
        # slope (<= 1.1 for these three), plus the activation's own ELEMENTWISE_RTOL
        terms = 0.1 * conv_forward(np.abs(x), np.abs(w), **geo) + 0.7 * np.abs(z)
        terms += np.abs(b).reshape(1, -1, 1, 1)
        pre = 0.1 * _fp64_bound(x, w, geo) + 8 * 2.0**-53 * terms
        bound = 1.1 * pre + ELEMENTWISE_RTOL["fp64"] * np.abs(ref) + 1e-300
        err = np.abs(to_numpy(y) - ref)
        assert np.all(err <= bound), f"{act}: max err {err.max():.3g}"


def test_float64_nan_and_inf_propagate(backend: str) -> None:
    x, w = rand((1, 5, 11, 7), 47, np.float64), rand((3, 5, 2, 3), 48, np.float64)
    x[0, 1, 4, 3], x[0, 3, 8, 1] = np.nan, np.inf
    kw: dict[str, Any] = dict(stride=(2, 1), dilation=(1, 2), padding=(1, 0))
    y = to_numpy(cl.conv2d(to_backend(x, backend), to_backend(w, backend), **kw))
    ref = conv_forward(x, w, **_geometry(kw))
    np.testing.assert_array_equal(np.isnan(y), np.isnan(ref))
    np.testing.assert_array_equal(np.isinf(y), np.isinf(ref))
    assert np.isnan(y).any() and np.isinf(y).any()
    finite = np.isfinite(ref)
    xf = np.where(np.isfinite(x), x, 0.0)
    bound = _fp64_bound(xf, w, _geometry(kw))[finite]
    assert np.all(np.abs(y[finite] - ref[finite]) <= bound)


def test_float64_conv1d_and_plan(backend: str) -> None:
    x1, w1 = rand((3, 4, 11), 49, np.float64), rand((6, 2, 3), 50, np.float64)
    y1 = cl.conv1d(to_backend(x1, backend), to_backend(w1, backend), padding=2, dilation=2,
                   groups=2)  # fmt: skip
    geo = dict(pads=[(2, 2)], strides=(1,), dilations=(2,), groups=2)
    assert np.all(np.abs(to_numpy(y1) - conv_forward(x1, w1, **geo))
                  <= _fp64_bound(x1, w1, geo))  # fmt: skip
    x, w, b = rand((2, 4, 7, 7), 51, np.float64), rand((6, 4, 3, 3), 52, np.float64), None
    b = rand((6,), 53, np.float64)
    xb, wb, bb = (to_backend(a, backend) for a in (x, w, b))
    plan = cl.conv2d_plan(x.shape, w.shape, padding=1, dtype=np.float64, backend=backend)
    assert plan.problem.dtype == "fp64"
    y = cl.conv2d(xb, wb, bb, padding=1, activation="relu", alpha=0.1)
    np.testing.assert_array_equal(to_numpy(plan(xb, wb, bb, activation="relu", alpha=0.1)),
                                  to_numpy(y))  # fmt: skip
    with pytest.raises(BadParamError, match="this plan is for fp64"):
        plan(to_backend(x.astype(np.float32), backend), to_backend(w.astype(np.float32), backend))


@pytest.mark.parametrize("algo,reason", [
    ("conv_fwd_winograd_f2x2_3x3", "Winograd's transforms lose float64 accuracy"),
    ("conv_fwd_winograd_fused_f2x2_3x3", "Winograd's transforms lose float64 accuracy"),
    ("conv_fwd_wmma_implicit_gemm", "tensor cores: no fp64 MMA in this solver"),
    ("conv_fwd_tc_implicit_gemm", "tensor cores: no fp64 MMA in this solver"),
])  # fmt: skip
def test_float64_forced_solver_that_cannot_says_why(algo: str, reason: str) -> None:
    x, w = rand((1, 16, 6, 6), 54, np.float64), rand((16, 16, 3, 3), 55, np.float64)
    with pytest.raises(NotSupportedError, match=f"{algo} cannot run .* fp64: {reason}"):
        cl.conv2d(x, w, padding=1, algo=algo)
    # prepare called directly (no dispatcher) refuses with the same reason
    problem = cl.conv2d_plan(x.shape, w.shape, padding=1, dtype=np.float64, backend="cpu").problem
    with pytest.raises(NotSupportedError, match=reason):
        registry.get(algo).prepare(backend_by_name("cpu"), problem, None)


def test_float64_explain_and_key_round_trip() -> None:
    key = "conv2d_fwd n2-c32-h16-w16 k32-r3-s3 p1x1-u1x1-d1x1 g1 NCHW fp64"
    problem = parse_key(key)
    assert problem.dtype == "fp64" and problem.key() == key and parse_key(problem.key()) == problem
    e = cl.explain(key, "cpu")
    text = str(e)
    assert key in text and e.choice is not None
    assert not any(s in e.choice for s in ("winograd", "wmma", "tc_"))
    reasons = {r.name: r.reason for r in e.rows}
    assert reasons["conv_fwd_winograd_f4x4_3x3"] == "Winograd's transforms lose float64 accuracy"
    assert reasons["conv_fwd_tc_implicit_gemm"] == "tensor cores: no fp64 MMA in this solver"
    assert "Winograd's transforms lose float64 accuracy" in text
    bwd = cl.explain(key.replace("fwd", "bwd_data"), "cpu")
    assert "lose float64 accuracy" in {r.name: r.reason for r in bwd.rows}[
        "conv_bwd_data_winograd_f2x2_3x3"]
