"""Property tests (hypothesis) of the PUBLIC convolution functions, as a user calls them:
``conv1d/2d/3d``, ``conv_transpose1d/2d/3d`` and ``conv{1,2,3}d_backward_data/filter/bias``,
through the dispatcher and with every algorithm family forced by ``algo=``, against
PyTorch CPU (its float64 result on the same values: PyTorch's semantics without its own
rounding) and the float64 reference (cudnnlite.reference), on every backend.

Drawn: N 0..2 or unbatched, C and K 1..6 per group, groups 1..3 and depthwise, spatial
1..7 (3-D depth 1..4), filters 1..3, stride 1..3, dilation 1..2, padding as an int, a
tuple, a 1-tuple, (before, after) pairs, "same" and "valid", output_padding, bias or
None, float32 / float64 / float16, channels-first and channels-last layouts, and inputs
given as views in the other memory order. Winograd needs 3x3 stride 1: cases("winograd")
steers draws there.

Tolerance, per output (the tests/conv_support.py bound, with the terms a direction sums):
    |got - want| <= 2 * T * eps * mag + 2 * u * |want| + out_rtol * |want| (+ 2^-14 fp16)
  - T products per output (forward C/g * taps, backward data K/g * taps, backward filter
    and bias N * output positions), each addition rounding at most eps relative to the
    running sum of magnitudes, bounded by ``mag`` (the same op on |operands|); the factor 2
    covers any summation order (split-K, tensor-core fragments) and the float64 side;
    eps = ACCUMULATION_EPS (2^-24 for float32 accumulation, 2 * 2^-53 for float64);
  - 2 * u * |want| (u = 2^-24 or 2^-53): the bias add and alpha's product;
  - out_rtol: one rounding to the storage type (fp16 2^-11, else inside the terms above),
    and 2^-14 for fp16 results near 0 (its smallest normal: subnormals may flush);
  - Winograd (whenever its solvers may run): its transforms mix a tile's outputs, so mag
    becomes the largest magnitude and 2T becomes 2T + 256 (tests/test_conv_winograd.py:
    F(4x4) measured at 75, i.e. 3.4x headroom).
A wrong tap, channel, padding or stride moves an output by O(mag), 2^24 / T times the bound.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
torch = pytest.importorskip("torch")
from conv_public_support import (  # noqa: E402
    BWD_BIAS,
    BWD_DATA,
    BWD_FILTER,
    EDGE_CASES,
    FWD,
    HYPO,
    SOLVERS,
    TORCH_TRANSPOSE,
    TRANSPOSE,
    TRANSPOSED_EDGE_CASES,
    UNIT,
    Case,
    F,
    batched,
    bound,
    cases,
    channel_axis,
    check_algos,
    data_back,
    data_first,
    filter_first,
    make,
    operands,
    rand,
    torch_forward,
    torch_grads,
    unbatched,
    vec,
    winograd_may_run,
)
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from property_support import (  # noqa: E402
    OUT_KINDS,
    assert_out_honoured,
    assert_untouched,
    assert_within,
    make_out,
    other_order_view,
    snapshot,
    with_examples,
    xp_of,
)

import cudnnlite as cl  # noqa: E402
from cudnnlite.dispatch.select import ALGO_FAMILIES  # noqa: E402
from cudnnlite.errors import BadParamError, NotSupportedError  # noqa: E402
from cudnnlite.reference.conv import conv_forward  # noqa: E402
from cudnnlite.reference.conv_backward import (  # noqa: E402
    conv_backward_data,
    conv_backward_filter,
    conv_transpose,
)
from cudnnlite.testing import (  # noqa: E402
    ELEMENTWISE_ATOL,
    ELEMENTWISE_RTOL,
    to_backend,
    to_numpy,
)

# ------------------------------------------------------------------ forward


@HYPO
@given(case=st.one_of(cases(), cases("winograd")), solver=st.sampled_from(SOLVERS["fwd"]),
       view=st.booleans())  # fmt: skip
@with_examples(EDGE_CASES, solver="conv_fwd_implicit_precomp_gemm", view=True)
def test_forward_matches_pytorch_with_every_algo(backend: str, case: Case, solver: str,
                                                 view: bool) -> None:  # fmt: skip
    x, w, b, _ = operands(case)
    xb, wb = to_backend(x, backend), to_backend(w, backend)
    bb = None if b is None else to_backend(b, backend)
    if view:  # as PyTorch's channels_last memory format: not contiguous in the layout
        xb = other_order_view(xb, channel_axis(case))
        wb = other_order_view(wb, case.nd + 1 if case.channels_last else 1)
    before = snapshot(xb, wb, bb)
    want = data_back(case, torch_forward(case, data_first(case, x), filter_first(case, w),
                                         vec(b)))  # fmt: skip
    geo = (case.pads, case.strides, case.dils, case.groups, case.channels_last)
    ref = unbatched(case, conv_forward(batched(case, x), w, *geo))
    if b is not None:
        ref = ref + (b if case.channels_last else b.reshape((-1,) + (1,) * case.nd))
    mag = unbatched(case, conv_forward(np.abs(batched(case, x).astype(np.float64)),
                                       np.abs(w.astype(np.float64)), *geo))  # fmt: skip
    terms = case.c // case.groups * int(np.prod(case.filt))
    call = FWD[case.nd]

    y = call(xb, wb, bb, *case.conv_args(), layout=case.layout)
    assert type(y) is type(xb) and y.dtype == x.dtype and tuple(y.shape) == case.y_shape
    done = check_algos(
        y, lambda a: call(xb, wb, bb, *case.conv_args(), layout=case.layout, algo=a), solver,
        want, ref, lambda a: bound(case, want, mag, terms, winograd=winograd_may_run(a)),
        f"{case}")  # fmt: skip
    if case.n != 0:  # (an empty batch launches nothing and consults no solver)
        assert "direct" in done and "implicit_gemm" in done
        if case.winograd_ok:
            assert "winograd" in done
    assert_untouched((xb, wb, bb), before)


# ------------------------------------------------------------------ backward


@HYPO
@given(case=st.one_of(cases(), cases("winograd")),
       data_solver=st.sampled_from(SOLVERS["bwd_data"]),
       filter_solver=st.sampled_from(SOLVERS["bwd_filter"]),
       out_kind=st.sampled_from(OUT_KINDS), view=st.booleans())  # fmt: skip
@with_examples(EDGE_CASES, data_solver="conv_bwd_data_implicit_gemm_rotated",
               filter_solver="conv_bwd_filter_implicit_gemm_atomic", out_kind="strided",
               view=True)  # fmt: skip
def test_backward_matches_autograd_with_every_algo(backend: str, case: Case, data_solver: str,
                                                   filter_solver: str,
                                                   out_kind: str,
                                                   view: bool) -> None:  # fmt: skip
    x, w, _, dy = operands(case)
    xb, wb, dyb = (to_backend(a, backend) for a in (x, w, dy))
    if view:  # x and dy stored in the other layout's order
        xb, dyb = (other_order_view(a, channel_axis(case)) for a in (xb, dyb))
    before = snapshot(xb, wb, dyb)
    want_dx, want_dw, want_db = torch_grads(case, x, w, dy)
    geo = (case.pads, case.strides, case.dils, case.groups, case.channels_last)
    dy1, x1 = batched(case, dy), batched(case, x)
    abs_dy, abs_x, abs_w = (np.abs(a.astype(np.float64)) for a in (dy1, x1, w))
    ref_dx = unbatched(case, conv_backward_data(dy1, w, case.spatial, *geo))
    mag_dx = unbatched(case, conv_backward_data(abs_dy, abs_w, case.spatial, *geo))
    ref_dw = conv_backward_filter(x1, dy1, case.filt, *geo)  # (zeros for an empty batch)
    mag_dw = conv_backward_filter(abs_x, abs_dy, case.filt, *geo)
    axes = tuple(i for i in range(dy1.ndim) if i != (dy1.ndim - 1 if case.channels_last else 1))
    ref_db, mag_db = dy1.astype(np.float64).sum(axis=axes), abs_dy.sum(axis=axes)
    data_terms = case.k // case.groups * int(np.prod(case.filt))
    filter_terms = (case.n or 1) * int(np.prod(case.out_spatial))

    def data(algo: str, out: Any = None) -> Any:
        return BWD_DATA[case.nd](dyb, wb, case.x_shape, *case.conv_args(), layout=case.layout,
                                 algo=algo, out=out)  # fmt: skip

    def filt(algo: str, out: Any = None) -> Any:
        return BWD_FILTER[case.nd](xb, dyb, case.w_shape, *case.conv_args(),
                                   layout=case.layout, algo=algo, out=out)  # fmt: skip

    out, big = make_out(backend, out_kind, case.x_shape, x.dtype)
    dx = data("auto", out)
    assert_out_honoured(dx, out, big)
    check_algos(dx, data, data_solver, want_dx, ref_dx,
                lambda a: bound(case, want_dx, mag_dx, data_terms, winograd=winograd_may_run(a)),
                f"dx, {case}")  # fmt: skip

    out, big = make_out(backend, out_kind, case.w_shape, x.dtype)
    dw = filt("auto", out)
    assert_out_honoured(dw, out, big)
    tol = bound(case, want_dw, mag_dw, filter_terms)
    done = check_algos(dw, filt, filter_solver, want_dw, ref_dw, lambda a: tol, f"dw, {case}")
    if case.n != 0:
        assert "direct" in done and "implicit_gemm" in done

    out, big = make_out(backend, out_kind, (case.k,), x.dtype)
    db = BWD_BIAS[case.nd](dyb, case.layout, out=out)
    assert_out_honoured(db, out, big)
    tol = bound(case, want_db, mag_db, filter_terms)
    assert_within(db, want_db, tol, f"dbias vs autograd, {case}")
    assert_within(db, ref_db, tol, f"dbias vs reference, {case}")
    assert_untouched((xb, wb, dyb), before)


# ------------------------------------------------------------------ transposed


@HYPO
@given(case=cases("transposed"), solver=st.sampled_from(SOLVERS["bwd_data"]),
       out_kind=st.sampled_from(OUT_KINDS))  # fmt: skip
@with_examples(TRANSPOSED_EDGE_CASES, solver="conv_bwd_data_direct", out_kind="strided")
def test_conv_transpose_matches_pytorch_with_every_algo(backend: str, case: Case, solver: str,
                                                        out_kind: str) -> None:  # fmt: skip
    x, w, b, _ = operands(case)
    xb, wb = to_backend(x, backend), to_backend(w, backend)
    bb = None if b is None else to_backend(b, backend)
    before = snapshot(xb, wb, bb)
    want = data_back(case, TORCH_TRANSPOSE[case.nd](
        data_first(case, x), filter_first(case, w), vec(b), case.stride,
        case.padding, case.output_padding, case.groups, case.dilation))  # fmt: skip
    geo = dict(stride=case.strides, padding=[p for p, _ in case.pads],
               output_padding=case.per_dim(case.output_padding), groups=case.groups,
               dilation=case.dils, channels_last=case.channels_last)  # fmt: skip
    x1 = batched(case, x)
    ref = unbatched(case, conv_transpose(x1, w, b, **geo))
    mag = unbatched(case, conv_transpose(np.abs(x1.astype(np.float64)),
                                         np.abs(w.astype(np.float64)), **geo))  # fmt: skip
    terms = case.c // case.groups * int(np.prod(case.filt))
    out, big = make_out(backend, out_kind, case.y_shape, x.dtype)

    def call(algo: str, out: Any = None) -> Any:
        return TRANSPOSE[case.nd](xb, wb, bb, case.stride, case.padding, case.output_padding,
                                  case.groups, case.dilation, layout=case.layout, algo=algo,
                                  out=out)  # fmt: skip

    y = call("auto", out)
    assert_out_honoured(y, out, big)
    assert y.dtype == x.dtype and tuple(y.shape) == case.y_shape
    tol = bound(case, want, mag, terms)
    done = check_algos(y, call, solver, want, ref, lambda a: tol, f"{case}")
    if case.n != 0:
        assert "direct" in done
    assert_untouched((xb, wb, bb), before)


# ------------------------------------------------------------------ fused epilogue

# (activation, activation_coef, activation_threshold, PyTorch's function of the
# pre-activation t with those parameters, Lipschitz constant)
ACTIVATIONS: list[tuple[str | None, float | None, float | None, Callable, float]] = [
    (None, None, None, lambda t: t, 1.0),
    ("relu", None, None, F.relu, 1.0),
    ("leaky_relu", 0.2, None, lambda t: F.leaky_relu(t, 0.2), 1.0),
    ("clipped_relu", 2.5, None, lambda t: torch.clamp(t, 0.0, 2.5), 1.0),
    ("elu", 1.5, None, lambda t: F.elu(t, 1.5), 1.5),
    ("sigmoid", None, None, torch.sigmoid, 0.25),
    ("tanh", None, None, torch.tanh, 1.0),
    ("swish", 0.7, None, lambda t: t * torch.sigmoid(0.7 * t), 1.1),
    ("gelu", None, None, F.gelu, 1.13),
    ("gelu_tanh", None, None, lambda t: F.gelu(t, approximate="tanh"), 1.13),
    ("softplus", 2.0, 5.0, lambda t: F.softplus(t, 2.0, 5.0), 1.0),
    ("identity", None, None, lambda t: t, 1.0),
    ("hardtanh", 1.5, -0.5, lambda t: F.hardtanh(t, -0.5, 1.5), 1.0),
    ("hardswish", None, None, F.hardswish, 1.5),
    ("hardsigmoid", None, None, F.hardsigmoid, 1 / 6),
    ("mish", None, None, F.mish, 1.1),
    ("silu", None, None, F.silu, 1.1),
    ("relu6", None, None, F.relu6, 1.0),
]


@HYPO
@given(case=cases(), act=st.sampled_from(ACTIVATIONS),
       alpha=st.sampled_from((1.0, 0.5, -2.0, 0.0)), alpha2=st.sampled_from((None, 1.0, -0.75)),
       use_z=st.booleans(), out_kind=st.sampled_from((*OUT_KINDS, "z")),
       algo=st.sampled_from(("auto", *ALGO_FAMILIES)), view=st.booleans())  # fmt: skip
@with_examples(EDGE_CASES[:3], act=ACTIVATIONS[4], alpha=-2.0, alpha2=-0.75, use_z=True,
               out_kind="z", algo="auto", view=True)  # fmt: skip
def test_fused_epilogue_equals_composition(backend: str, case: Case, act: tuple,
                                           alpha: float, alpha2: float | None, use_z: bool,
                                           out_kind: str, algo: str,
                                           view: bool) -> None:  # fmt: skip
    """act(alpha * conv(x, w) + alpha2 * z + bias) (alpha2 1 when omitted with z, ignored
    without z) equals PyTorch's pieces composed in float64, with out= honoured (out may be
    z itself: the in-place residual)."""
    name, coef, threshold, torch_act, lipschitz = act
    x, w, b, z = operands(case)  # dy's draw serves as the residual z
    z = z if use_z else None
    xb, wb = to_backend(x, backend), to_backend(w, backend)
    bb, zb = (None if a is None else to_backend(a, backend) for a in (b, z))
    if view:  # x and z in the other layout's order, bias every other element of a buffer
        xb = other_order_view(xb, channel_axis(case))
        zb = None if zb is None else other_order_view(zb, channel_axis(case))
        if bb is not None:
            spread = xp_of(backend).zeros(2 * case.k, dtype=x.dtype)
            spread[::2] = bb
            bb = spread[::2]
    out_kind = "fresh" if out_kind == "z" and z is None else out_kind
    out, big = (zb, None) if out_kind == "z" else make_out(backend, out_kind, case.y_shape,
                                                           x.dtype)  # fmt: skip
    before = snapshot(xb, wb, bb, None if out_kind == "z" else zb)

    conv = torch_forward(case, data_first(case, x), filter_first(case, w), None)
    pre = alpha * conv
    if z is not None:
        pre = pre + (1.0 if alpha2 is None else alpha2) * data_first(case, z)
    if b is not None:
        pre = pre + vec(b).reshape((-1,) + (1,) * case.nd)
    want = data_back(case, torch_act(pre))
    geo = (case.pads, case.strides, case.dils, case.groups, case.channels_last)
    mag = unbatched(case, conv_forward(np.abs(batched(case, x).astype(np.float64)),
                                       np.abs(w.astype(np.float64)), *geo))  # fmt: skip
    terms = case.c // case.groups * int(np.prod(case.filt))
    s = case.short
    # the pre-activation: |alpha| times the convolution's bound (Winograd's: auto may choose
    # it), and a few roundings of each epilogue term (alpha * acc, alpha2 * z, + bias); the
    # activation multiplies that error by at most its Lipschitz constant and adds its own
    # (ELEMENTWISE_RTOL/ATOL, which for fp16 include the output's rounding). softplus's
    # threshold 5 is a jump of 3e-3 at t = 2.5 (as in PyTorch): a pre-activation within
    # ~1e-6 of it, a chance of about 1e-5 per draw, would land on the other side.
    acc = bound(dataclasses.replace(case, dtype="float64" if s == "fp64" else "float32"),
                np.zeros_like(mag), mag, terms, winograd=True)  # fmt: skip
    terms_mag = abs(alpha) * mag
    if z is not None:
        terms_mag = terms_mag + abs(1.0 if alpha2 is None else alpha2) * np.abs(z)
    if b is not None:
        terms_mag = terms_mag + np.abs(b if case.channels_last else
                                       b.reshape((-1,) + (1,) * case.nd))  # fmt: skip
    pre_err = abs(alpha) * acc + 4 * UNIT[s] * terms_mag
    tol = lipschitz * pre_err + ELEMENTWISE_RTOL[s] * np.abs(want) + ELEMENTWISE_ATOL[s]

    kwargs = dict(layout=case.layout, activation=name, activation_coef=coef,
                  activation_threshold=threshold, z=zb, alpha=alpha, alpha2=alpha2,
                  out=out)  # fmt: skip
    try:
        y = FWD[case.nd](xb, wb, bb, *case.conv_args(), algo=algo, **kwargs)
    except NotSupportedError:  # the family does not apply: the dispatcher's choice instead
        y = FWD[case.nd](xb, wb, bb, *case.conv_args(), **kwargs)
    assert_out_honoured(y, out, big)
    assert_within(y, want, tol, f"{name} alpha={alpha} alpha2={alpha2} algo={algo}, {case}")
    assert_untouched((xb, wb, bb, None if out_kind == "z" else zb), before)


# ------------------------------------------------------------------ bad arguments

# (which function, what goes wrong, the argument the error must name); each mutation of an
# otherwise valid call. Not in test_conv_api.py / test_conv_backward.py: these draw every
# rank and layout, and the gradient and transposed functions too.
MUTATIONS = [
    ("fwd", "stride of nd + 1 values", "stride"),
    ("bwd_data", "stride of nd + 1 values", "stride"),
    ("transpose", "stride of nd + 1 values", "stride"),
    ("fwd", "dilation True", "dilation"),
    ("bwd_filter", "dilation 1.0", "dilation"),
    ("fwd", "groups 0", "groups"),
    ("bwd_filter", "groups 1.0", "groups"),
    ("transpose", "groups 0", "groups"),
    ("fwd", "out of another dtype", "out"),
    ("bwd_data", "out of another dtype", "out"),
    ("bwd_filter", "out of another dtype", "out"),
    ("bwd_bias", "out of another dtype", "out"),
    ("transpose", "out of another dtype", "out"),
    ("bwd_data", "read-only out", "out"),
    ("transpose", "read-only out", "out"),
    ("transpose", "padding as (before, after) pairs", "padding"),
    ("transpose", "padding 'same'", "padding"),
    ("transpose", "algo of the forward", "algo"),
    ("fwd", "algo of backward filter", "algo"),
    ("bwd_filter", "algo of backward data", "algo"),
    ("fwd", "unknown algo", "algo"),
    ("bwd_data", "unknown algo", "algo"),
    ("transpose", "unknown algo", "algo"),
    ("bwd_data", "dy one position longer", "dy"),
    ("bwd_filter", "dy one position longer", "dy"),
    ("bwd_data", "x_shape of another rank", "x_shape"),
    ("bwd_filter", "w_shape of another rank", "w_shape"),
    ("bwd_bias", "layout of another rank", "layout"),
    ("transpose", "layout of another rank", "layout"),
    ("fwd", "bias one too long", "bias"),
    ("transpose", "bias one too long", "bias"),
]


@HYPO
@given(data=st.data(), mutation=st.sampled_from(MUTATIONS))
def test_bad_arguments_name_the_argument(backend: str, data: Any, mutation: tuple) -> None:
    fn, what, name = mutation
    if what == "read-only out" and backend != "cpu":
        what = "out of another dtype"  # only NumPy arrays can be read-only
    case = data.draw(cases("transposed" if fn == "transpose" else "any"), label="case")
    # batched and N >= 1 (an empty batch's checks: test_empty_batch_still_validates_algo)
    case = dataclasses.replace(case, n=case.n or 1)
    x, w, b, dy = operands(case)
    if b is None:
        b = rand(np.random.default_rng(1), (case.k,), case.dtype)
    xb, wb, bb, dyb = (to_backend(a, backend) for a in (x, w, b, dy))
    other = "float64" if case.dtype != "float64" else "float32"
    nd = case.nd
    kw: dict[str, Any] = dict(stride=case.stride, padding=case.padding, dilation=case.dilation,
                              groups=case.groups, layout=case.layout)  # fmt: skip
    out_shape = {"fwd": case.y_shape, "bwd_data": case.x_shape, "bwd_filter": case.w_shape,
                 "bwd_bias": (case.k,), "transpose": case.y_shape}[fn]  # fmt: skip
    x_shape, w_shape = case.x_shape, case.w_shape
    if what == "stride of nd + 1 values":
        kw["stride"] = (1,) * (nd + 1)
    elif what in ("dilation True", "dilation 1.0"):
        kw["dilation"] = True if what == "dilation True" else 1.0
    elif what in ("groups 0", "groups 1.0"):
        kw["groups"] = 0 if what == "groups 0" else 1.0
    elif what == "out of another dtype":
        kw["out"] = to_backend(np.zeros(out_shape, other), backend)
    elif what == "read-only out":
        kw["out"] = np.zeros(out_shape, case.dtype)
        kw["out"].flags.writeable = False
    elif what == "padding as (before, after) pairs":
        kw["padding"] = (0,) * (2 * nd)
    elif what == "padding 'same'":
        kw["padding"] = "same"
    elif what == "unknown algo":
        kw["algo"] = "winogard"
    elif what.startswith("algo of"):
        kw["algo"] = {"algo of the forward": "conv_fwd_direct",
                      "algo of backward filter": "conv_bwd_filter_direct",
                      "algo of backward data": "conv_bwd_data_direct"}[what]  # fmt: skip
    elif what == "dy one position longer":
        longer = case.shape(case.k, (case.out_spatial[0] + 1, *case.out_spatial[1:]))
        dyb = to_backend(np.zeros(longer, case.dtype), backend)
    elif what == "layout of another rank":
        kw["layout"] = "NCHW" if nd == 3 else "NCDHW"  # (1-D calls accept NCHW for NCW)
    elif what == "bias one too long":
        bb = to_backend(np.zeros(case.k + 1, case.dtype), backend)
    elif what == "x_shape of another rank":
        x_shape = (1, *x_shape)
    elif what == "w_shape of another rank":
        w_shape = w_shape[1:]
    before = snapshot(xb, wb, bb, dyb)
    with pytest.raises(BadParamError, match=rf"^{re.escape(name)}:"):
        if fn == "fwd":
            FWD[nd](xb, wb, bb, **kw)
        elif fn == "bwd_data":
            BWD_DATA[nd](dyb, wb, x_shape, **kw)
        elif fn == "bwd_filter":
            BWD_FILTER[nd](xb, dyb, w_shape, **kw)
        elif fn == "bwd_bias":
            BWD_BIAS[nd](dyb, kw["layout"], out=kw.get("out"))
        else:
            TRANSPOSE[nd](xb, wb, bb, kw["stride"], kw["padding"], case.output_padding,
                          kw["groups"], kw["dilation"], layout=kw["layout"],
                          algo=kw.get("algo", "auto"), out=kw.get("out"))  # fmt: skip
    assert_untouched((xb, wb, bb, dyb), before)


@pytest.mark.parametrize("fn", ["fwd", "bwd_data", "bwd_filter", "transpose"])
def test_empty_batch_still_validates_algo(backend: str, fn: str) -> None:
    """Arguments of a convolution without work are still validated (as its shapes are:
    test_parity_shapes.py::test_conv_empty_shapes_still_validated); algo= too."""
    case = make(2, 0, 2, 3, (4, 4), (3, 3))
    x, w, _, dy = (to_backend(a, backend) for a in operands(case))
    with pytest.raises(BadParamError, match="^algo:"):
        if fn == "fwd":
            cl.conv2d(x, w, algo="winogard")
        elif fn == "bwd_data":
            cl.conv2d_backward_data(dy, w, case.x_shape, algo="winogard")
        elif fn == "bwd_filter":
            cl.conv2d_backward_filter(x, dy, case.w_shape, algo="conv_bwd_data_direct")
        else:
            cl.conv_transpose2d(dy, w, algo="conv_fwd_direct")


@pytest.mark.parametrize("alias", ["NCHW", "NHWC"])
def test_1d_functions_take_the_2d_layout_names_alike(backend: str, alias: str) -> None:
    """conv1d and its backward data / filter take "NCHW" / "NHWC" for "NCW" / "NWC"; the
    bias gradient and the transposed convolution take them too, with the same results."""
    rng = np.random.default_rng(3)
    last = alias == "NHWC"
    canon = "NWC" if last else "NCW"
    x = rand(rng, (2, 7, 3) if last else (2, 3, 7), "float32")
    w = rand(rng, (3, 3, 4) if last else (3, 4, 3), "float32")  # transposed: (C_in, ., K/g)
    dy = rand(rng, (2, 5, 4) if last else (2, 4, 5), "float32")
    xb, wb, dyb = (to_backend(a, backend) for a in (x, w, dy))
    for fn, args in ((cl.conv1d_backward_bias, (dyb,)), (cl.conv_transpose1d, (xb, wb))):
        same_values = to_numpy(fn(*args, layout=alias))
        np.testing.assert_array_equal(same_values, to_numpy(fn(*args, layout=canon)))
    with pytest.raises(BadParamError, match="^layout:"):
        cl.conv_transpose1d(xb, wb, layout="NCDHW")
