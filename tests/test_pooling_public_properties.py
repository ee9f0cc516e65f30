"""Property tests (hypothesis) of the PUBLIC pooling functions, as a user calls them:
``max_pool{,1d,2d,3d}``, ``avg_pool{,1d,2d,3d}``, ``adaptive_{avg,max}_pool{,1d,2d,3d}``,
``global_avg_pool``, ``pooling_forward`` / ``pooling_backward``, ``pooling_plan`` and the
backward functions, against PyTorch CPU (``F.max_pool*d(return_indices=True)``,
``F.avg_pool*d``, ``F.adaptive_*``, backward through its autograd; float64 on the same
values: PyTorch's semantics without its own rounding) and the float64 reference
(cudnnlite.reference.pooling), on every backend.

Drawn: 1-D / 2-D / 3-D, batched (N 0..2) and unbatched, kernels 1..4 (larger than the
input, the padding making up the rest), strides 1..6 or None (strides larger than the
kernel), padding up to kernel // 2, dilation 1..3 (max), ceil_mode (PyTorch's rule: the
last window starts inside the input or the left padding), count_include_pad,
divisor_override (negative too), every argument as an int, a 1-tuple or one per dim;
both layouts, inputs given as views in the other memory order, ``out=`` fresh or strided;
float32 / float16 / bfloat16 / float64; values with many ties, NaN and +-inf; the call
through the 1d/2d/3d names, the N-d names with and without ``nd=``, the cuDNN-style
functions and a plan (which must give the direct call's result bit for bit); adaptive
output sizes up to twice the input and None entries, global_avg_pool bit for bit the
adaptive average to 1. Average pools also satisfy <A x, dy> = <x, A^T dy> (1-D / 3-D,
divisor_override, adaptive, every dtype: beyond tests/test_pooling_properties.py's 2-D
float32 check). Every call leaves its inputs as they were. A max window of padding only
(dilation over a tiny input with ceil_mode) gives -inf and index -1, its dy credited
nowhere; PyTorch's index there points at or past the plane's end: not compared (see
test_max_pool_matches_pytorch).

Tolerances (``sum_bound``), per output:
  - max pooling forward selects an input: exact, y and the indices (PyTorch's first
    maximum of a window in scan order, the last NaN);
  - max backward sums the dy of the T outputs whose argmax an input is, in float32 for the
    16/32-bit types (float64 for float64), in any order (the atomic scatter):
    2 (T - 1) eps mag + u_out |want|, mag the same sum of |dy|; exact where T <= 1;
  - average pooling sums T terms (a window's inputs, or backward the quotients dy / div of
    the windows holding an input) and divides once: 2 (T + 1) eps mag + u_out |want|, mag
    the same pooling of |x| (or |dy|). eps = ACCUMULATION_EPS (2^-24 for float32
    accumulation; 2 * 2^-53 for float64, whose reference and PyTorch round too); the
    factor 2 covers any order and the float64 side; u_out: one rounding to the storage
    type (fp16 2^-11, bf16 2^-8; none for float32/64, whose last rounding is the
    division's); plus one subnormal step of the storage type (fp16 results near 0).
A wrong window position, divisor or index moves an output by O(|x| / T): 2^23 / T^2 times
the float32 bound.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
torch = pytest.importorskip("torch")
from hypothesis import given  # noqa: E402
from pooling_public_support import (  # noqa: E402
    ADA_AVG,
    ADA_MAX,
    ADAPTIVE_EDGE,
    AVG_EDGE,
    HYPO,
    MAX_EDGE,
    T_ADA_AVG,
    T_ADA_MAX,
    Case,
    adaptive_cases,
    adjoint,
    batched,
    bshape,
    call_backward,
    call_forward,
    channel_axis,
    exact,
    from_torch,
    make_case_out,
    nd_kw,
    pytorch_refuses,
    sum_bound,
    to_torch,
    torch_pool,
    unbatched,
    values,
    window_cases,
    within,
)
from property_support import (  # noqa: E402
    assert_out_honoured,
    assert_untouched,
    other_order_view,
    same_bits,
    snapshot,
    with_examples,
)

import cudnnlite as cl  # noqa: E402
from cudnnlite.errors import BadParamError  # noqa: E402
from cudnnlite.reference import pooling as rp  # noqa: E402
from cudnnlite.testing import to_backend  # noqa: E402

# ------------------------------------------------------------------ tests


def drawn_input(case: Case, backend: str) -> tuple[np.random.Generator, np.ndarray, Any]:
    """The case's generator, x on the host and x on the backend (as a view in the other
    memory order when the case asks)."""
    rng = np.random.default_rng(case.seed)
    x = values(rng, case.x_shape, case)
    xb = to_backend(x, backend)
    if case.view:
        xb = other_order_view(xb, channel_axis(case))
    return rng, x, xb


@HYPO
@with_examples(MAX_EDGE)
@given(case=window_cases("max"))
def test_max_pool_matches_pytorch(backend: str, case: Case) -> None:
    rng, x, xb = drawn_input(case, backend)
    out, buf = make_case_out(case, xb)
    keep = snapshot(xb)
    y, ind = call_forward(case, xb, backend, out)
    assert_out_honoured(y, out, buf)
    assert y.dtype == x.dtype

    ry, ri = rp.max_pool(batched(case, x), case.k, case.s, case.p, case.d, case.ceil_mode,
                         case.layout)  # fmt: skip
    ry, ri = unbatched(case, ry), unbatched(case, ri)
    exact(y, ry, "y vs the reference")
    xt = to_torch(case, x).requires_grad_()
    yt, it = torch_pool(case, xt)
    exact(y, from_torch(case, yt), "y vs PyTorch")
    # A window holding padding only (dilation over a tiny input, ceil_mode) has no argmax:
    # ours is -1, PyTorch's the window's first position inside the plane or past its end.
    has_input = ri >= 0
    np.testing.assert_array_equal(from_torch(case, it)[has_input], ri[has_input])
    if ind is not None:
        assert ind.dtype == np.int64
        exact(ind, ri, "indices vs the reference")

    dy = values(rng, case.y_shape, case, "normal")
    dyb = to_backend(dy, backend)
    keep_b = snapshot(dyb, ind)
    dx = call_backward(case, dyb, ind, xb)
    assert dx.dtype == x.dtype
    xs = bshape(case, case.x_shape)
    want = unbatched(case, rp.max_pool_backward(batched(case, dy), batched(case, ri), xs,
                                                case.layout))  # fmt: skip
    mag = unbatched(case, rp.max_pool_backward(np.abs(batched(case, dy)), batched(case, ri), xs,
                                               case.layout))  # fmt: skip
    terms = unbatched(case, rp.max_pool_backward(np.ones(bshape(case, case.y_shape)),
                                                 batched(case, ri), xs, case.layout))  # fmt: skip
    tol = np.where(terms > 1, sum_bound(case, want, mag, terms - 1), 0.0)
    within(dx, want, tol, "dx vs the reference")
    if has_input.all():  # (PyTorch would route dy to its position of no input)
        yt.backward(to_torch(case, dy))
        within(dx, from_torch(case, xt.grad), tol, "dx vs PyTorch")
    assert_untouched((xb,), keep)
    assert_untouched((dyb, ind), keep_b)


def avg_terms(case: Case) -> int:
    """Roundings of an average's sum and division: a window's inputs (backward: the
    windows holding an input, at most as many) and the quotient."""
    return math.prod(case.k) + 1


@HYPO
@with_examples(AVG_EDGE)
@given(case=window_cases("avg"))
def test_avg_pool_matches_pytorch(backend: str, case: Case) -> None:
    rng, x, xb = drawn_input(case, backend)
    out, buf = make_case_out(case, xb)
    keep = snapshot(xb)
    y, _ = call_forward(case, xb, backend, out)
    assert_out_honoured(y, out, buf)
    assert y.dtype == x.dtype

    args = (case.k, case.s, case.p, case.ceil_mode, case.count_include_pad,
            case.divisor_override)  # fmt: skip
    with np.errstate(invalid="ignore"):  # inf - inf in a window: NaN, as intended
        want = unbatched(case, rp.avg_pool(batched(case, x), *args, layout=case.layout))
        mag = unbatched(case, rp.avg_pool(np.abs(batched(case, x)), *args, layout=case.layout))
    tol_y = sum_bound(case, want, mag, avg_terms(case))
    within(y, want, tol_y, "y vs the reference")
    xt = to_torch(case, x).requires_grad_()
    if pytorch_refuses(case):
        with pytest.raises(RuntimeError):  # still a deliberate difference
            torch_pool(case, xt)
        yt = None
    else:
        yt = torch_pool(case, xt)
        within(y, from_torch(case, yt), tol_y, "y vs PyTorch")

    dy = values(rng, case.y_shape, case, "normal")
    dyb = to_backend(dy, backend)
    keep_dy = snapshot(dyb)
    dx = call_backward(case, dyb, None, xb)
    assert dx.dtype == x.dtype
    xs = bshape(case, case.x_shape)
    want_dx = unbatched(case, rp.avg_pool_backward(batched(case, dy), xs, *args,
                                                   layout=case.layout))  # fmt: skip
    mag_dx = unbatched(case, rp.avg_pool_backward(np.abs(batched(case, dy)), xs, *args,
                                                  layout=case.layout))  # fmt: skip
    tol_dx = sum_bound(case, want_dx, mag_dx, avg_terms(case))
    within(dx, want_dx, tol_dx, "dx vs the reference")
    if yt is not None:
        yt.backward(to_torch(case, dy))
        within(dx, from_torch(case, xt.grad), tol_dx, "dx vs PyTorch")
    if np.isfinite(x.astype(np.float64)).all():
        adjoint(x, y, dy, dx, tol_y, tol_dx)
    assert_untouched((xb, dyb), keep + keep_dy)


def adaptive_terms(case: Case) -> int:
    """Roundings of an adaptive average: a window spans at most ceil(in / out) + 1 inputs
    per dim, and an input lies in at most ceil(out / in) + 1 windows per dim."""
    return math.prod(max(-(-i // o), -(-o // i)) + 1
                     for i, o in zip(case.spatial, case.out_spatial, strict=True)) + 1  # fmt: skip


@HYPO
@with_examples(ADAPTIVE_EDGE)
@given(case=adaptive_cases())
def test_adaptive_pool_matches_pytorch(backend: str, case: Case) -> None:
    rng, x, xb = drawn_input(case, backend)
    (out_a, buf_a), (out_m, buf_m) = make_case_out(case, xb), make_case_out(case, xb)
    keep = snapshot(xb)
    size, lay, nd = case.output_size, case.layout, case.nd
    if case.api == "fixed":
        ya = ADA_AVG[nd](xb, size, layout=lay, out=out_a)
        ym, ind = ADA_MAX[nd](xb, size, True, layout=lay, out=out_m)
    else:
        ya = cl.adaptive_avg_pool(xb, size, layout=lay, out=out_a, **nd_kw(case))
        ym, ind = cl.adaptive_max_pool(xb, size, True, layout=lay, out=out_m, **nd_kw(case))
    assert_out_honoured(ya, out_a, buf_a)
    assert_out_honoured(ym, out_m, buf_m)
    assert ya.dtype == ym.dtype == x.dtype and ind.dtype == np.int64
    if case.n is not None and all(o == 1 for o in case.out_spatial):
        same_bits(cl.global_avg_pool(xb, layout=lay), ya)

    osp, xs = case.out_spatial, bshape(case, case.x_shape)
    with np.errstate(invalid="ignore"):  # inf - inf in a window: NaN, as intended
        want = unbatched(case, rp.adaptive_avg_pool(batched(case, x), osp, lay))
        mag = unbatched(case, rp.adaptive_avg_pool(np.abs(batched(case, x)), osp, lay))
    tol_a = sum_bound(case, want, mag, adaptive_terms(case))
    within(ya, want, tol_a, "adaptive avg vs the reference")
    rm, ri = (unbatched(case, a) for a in rp.adaptive_max_pool(batched(case, x), osp, lay))
    exact(ym, rm, "adaptive max vs the reference")
    exact(ind, ri, "adaptive max indices vs the reference")
    xa, xm = to_torch(case, x).requires_grad_(), to_torch(case, x).requires_grad_()
    ta = T_ADA_AVG[nd](xa, size)
    tm, ti = T_ADA_MAX[nd](xm, size, True)
    within(ya, from_torch(case, ta), tol_a, "adaptive avg vs PyTorch")
    exact(ym, from_torch(case, tm), "adaptive max vs PyTorch")
    exact(ind, from_torch(case, ti), "adaptive max indices vs PyTorch")

    dy = values(rng, case.y_shape, case, "normal")
    dyb = to_backend(dy, backend)
    keep_b = snapshot(dyb, ind)
    dxa = cl.adaptive_avg_pool_backward(dyb, case.x_shape, layout=lay, **nd_kw(case))
    dxm = cl.adaptive_max_pool_backward(dyb, ind, case.x_shape, layout=lay,
                                        deterministic=case.deterministic,
                                        **nd_kw(case))  # fmt: skip
    assert dxa.dtype == dxm.dtype == x.dtype
    bdy = batched(case, dy)
    want_a = unbatched(case, rp.adaptive_avg_pool_backward(bdy, xs, lay))
    mag_a = unbatched(case, rp.adaptive_avg_pool_backward(np.abs(bdy), xs, lay))
    tol_da = sum_bound(case, want_a, mag_a, adaptive_terms(case))
    within(dxa, want_a, tol_da, "adaptive avg dx vs the reference")
    bri = batched(case, ri)
    want_m = unbatched(case, rp.max_pool_backward(bdy, bri, xs, lay))
    mag_m = unbatched(case, rp.max_pool_backward(np.abs(bdy), bri, xs, lay))
    terms = unbatched(case, rp.max_pool_backward(np.ones(bdy.shape), bri, xs, lay))
    tol_dm = np.where(terms > 1, sum_bound(case, want_m, mag_m, terms - 1), 0.0)
    within(dxm, want_m, tol_dm, "adaptive max dx vs the reference")
    ta.backward(to_torch(case, dy))
    tm.backward(to_torch(case, dy))
    within(dxa, from_torch(case, xa.grad), tol_da, "adaptive avg dx vs PyTorch")
    within(dxm, from_torch(case, xm.grad), tol_dm, "adaptive max dx vs PyTorch")
    if np.isfinite(x.astype(np.float64)).all():
        adjoint(x, ya, dy, dxa, tol_a, tol_da)
    assert_untouched((xb, dyb, ind), keep + keep_b)


# ------------------------------------------------------------------ bad arguments

# Not in tests/test_pooling.py, test_bad_arguments_across_ops.py, test_api_audit.py,
# test_parity_shapes.py or test_fastpath.py: each names the argument at fault. x: (2, 3, 6, 6)
# float32; y, idx: its max_pool2d(x, 2, return_indices=True).
BAD = {
    "cudnn avg with dilation": (
        lambda x, y, i: cl.pooling_forward(x, "avg_include_pad", 2, dilation=2),
        "dilation: average pooling takes none"),
    "cudnn avg backward with dilation": (
        lambda x, y, i: cl.pooling_backward(y, x, "avg_exclude_pad", 2, dilation=(2, 1)),
        "dilation: average pooling takes none"),
    "adaptive output_size of 3 for 2-D": (
        lambda x, y, i: cl.adaptive_avg_pool2d(x, (2, 2, 2)), "output_size: expected an int or 2"),
    "adaptive empty spatial": (
        lambda x, y, i: cl.adaptive_max_pool1d(x[:, :, 0, :0], 1), "x: adaptive pooling needs"),
    "float kernel": (lambda x, y, i: cl.avg_pool2d(x, 2.0), "kernel_size: expected an int"),
    "dilation of 3 for 2-D": (
        lambda x, y, i: cl.max_pool2d(x, 2, dilation=(1, 1, 1)), "dilation: expected an int or 2"),
    "ceil_mode str": (lambda x, y, i: cl.max_pool2d(x, 2, ceil_mode="yes"), "ceil_mode"),
    "out of the wrong shape": (
        lambda x, y, i: cl.max_pool2d(x, 2, out=np.empty((2, 3, 4, 4), np.float32)),
        "out: expected shape"),
    "out of the wrong dtype": (
        lambda x, y, i: cl.avg_pool1d(x[0], 2, out=np.empty((3, 6, 3))), "out: expected dtype"),
    "nd=1 with a 4-D x": (lambda x, y, i: cl.max_pool(x, 2, nd=1), "x: expected 3 dims"),
    "avg backward dy shape": (
        lambda x, y, i: cl.avg_pool_backward(y, x.shape, 3, 1), "dy: expected shape"),
    "avg backward divisor 0": (
        lambda x, y, i: cl.avg_pool_backward(y, x.shape, 2, divisor_override=0),
        "divisor_override"),
    "adaptive max backward int32 indices": (
        lambda x, y, i: cl.adaptive_max_pool_backward(y, i.astype(np.int32), x.shape),
        "indices: expected int64"),
    "adaptive max backward index of another window": (
        lambda x, y, i: cl.adaptive_max_pool_backward(y, np.zeros_like(i), x.shape),
        r"indices: entry \(0, 0, 0, 1\) is 0"),
    "plan called with another shape": (
        lambda x, y, i: cl.pooling_plan((2, 3, 8, 8), "max", 2, backend="cpu")(x),
        r"x: this max_pool plan is for shape"),
    "pooling_backward mode": (
        lambda x, y, i: cl.pooling_backward(y, x, "mean", 2), "mode: expected one of"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(BAD))
def test_bad_arguments_name_the_argument(name: str) -> None:
    call, match = BAD[name]
    x = np.random.default_rng(3).standard_normal((2, 3, 6, 6)).astype(np.float32)
    y, idx = cl.max_pool2d(x, 2, return_indices=True)
    keep = snapshot(x, y, idx)
    with pytest.raises(BadParamError, match=match):
        call(x, y, idx)
    assert_untouched((x, y, idx), keep)
