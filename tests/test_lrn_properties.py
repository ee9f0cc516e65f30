"""Property tests (hypothesis) of the PUBLIC cross-channel local response norm, ``lrn`` and
``lrn_backward``, against PyTorch CPU (``F.local_response_norm`` and its autograd, float64
on the same values: PyTorch's semantics without its rounding) and the float64 reference
(``cudnnlite.reference.norm.lrn`` / ``lrn_backward``), on every backend.

Drawn: N 0..3, C 1..13 (an empty batch, a single channel), 0..3 spatial dims of sizes
0..5 (2-D ``(N, C)`` inputs too, which PyTorch refuses below 3 dims: they must equal the
3-D ``(N, C, 1)`` input bit for bit), NCHW and NHWC; ``size`` 1 to 7, even and odd, and
larger than C; alpha from 0 and 1e-4 to 2.5, and negative (k then raised until the scale
stays above k / 2 > 0); beta 0 (y = x), 0.5 to 3; k 0.5 to 2 (0 in an @example); x of
magnitude 1, 10 or 100; float32 / float16 / bfloat16 / float64; x and dy as views in the
other memory order or every other element of a buffer; ``out=`` absent, fresh or strided;
a NaN at a drawn position of x. That NaN must make y NaN at exactly the channels whose
window holds it, [c - (size-1)//2, c + size//2] (only c itself when beta = 0: pow(NaN, 0)
= 1, as in PyTorch), and dx NaN where PyTorch's autograd puts it. Every call leaves x and
dy as they were.

Tolerance of each element, first order in u = ACCUMULATION_EPS (2^-24 for the float32
arithmetic of float32 / float16 / bfloat16, 2 * 2^-53 for float64, whose reference and
PyTorch round in double too), with a = alpha / size, sq the window's sum of x^2, W its
channel count, scale = k + a sq, p = scale^-beta:

- scale: |a| sq carries the rounding of a and W + 1 of the fma chain, k one rounding,
  scale one: E = u ((W + 2) |a| sq + 2 |k| + |scale|);
- p: rho = |beta| E / scale + u |beta ln scale| (beta rounded) + C_POW u (pow's error:
  CUDA's powf is within 4 ulp = 8 u);
- y = x p: |y| (rho + u);
- dx = dy p - 2 a beta x acc, acc the sum over the H channels j whose window holds i of
  t_j = x_j dy_j p_j / scale_j (each within rho_j + E_j / scale_j + 3 u):
  |dy p| (rho + u) + |2 a beta x| (sum |t| (rho + E / scale + (H + 3) u) + 4 u |acc|)
  + u |dx|;
each times K = 2 (second-order terms), plus one rounding to the storage type (fp16
2^-11, bf16 2^-8 of |want|) and its subnormal step. The float32 bound is about 25 u
|y|; a channel wrongly in or out of a window moves y by beta a x_j^2 / scale relative:
O(1) for alpha >= 0.3, still ~10 times the bound at AlexNet's alpha 1e-4 (not for fp16,
whose storage rounding is larger).
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from property_support import (  # noqa: E402
    DTYPES,
    OUT_KINDS,
    OUT_ROUNDING,
    SHORT,
    SUBNORMAL_STEP,
    assert_out_honoured,
    assert_untouched,
    assert_within,
    make_out,
    other_order_view,
    quiet,
    snapshot,
    with_examples,
    xp_of,
)

import cudnnlite as cl  # noqa: E402
from cudnnlite import dtypes  # noqa: E402
from cudnnlite.errors import BadParamError  # noqa: E402
from cudnnlite.reference import norm as rn  # noqa: E402
from cudnnlite.testing import ACCUMULATION_EPS, to_backend, to_numpy  # noqa: E402

F = torch.nn.functional
# An example is two elementwise launches on at most a few thousand elements plus PyTorch
# and the reference: 2-9 ms warm, and the norm modules (one per dtype) are the ones the
# other norm tests compile, so the profile's example count (30) stands.
HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

C_POW = 8  # powf within 4 ulp (CUDA's table; glibc's and double pow are closer)
K = 2


def np_dtype(name: str) -> np.dtype:
    return dtypes.BFLOAT16.numpy if name == "bfloat16" else np.dtype(name)


@dataclasses.dataclass(frozen=True)
class Case:
    """One lrn / lrn_backward call. k as drawn: with alpha < 0 the test raises it until
    the scale stays above k / 2 (``k_for``). view: "other" (the other layout's memory
    order), "strided" (every other element of a buffer) or "none"."""

    n: int
    c: int
    spatial: tuple[int, ...]
    size: int
    alpha: float = 1e-4
    beta: float = 0.75
    k: float = 1.0
    layout: str = "NCHW"
    dtype: str = "float32"
    mag: float = 1.0
    nan_at: float | None = None
    view: str = "none"
    out: str = "none"
    seed: int = 0

    @property
    def shape(self) -> tuple[int, ...]:
        if self.layout == "NHWC":
            return (self.n, *self.spatial, self.c)
        return (self.n, self.c, *self.spatial)

    @property
    def caxis(self) -> int:
        return len(self.shape) - 1 if self.layout == "NHWC" else 1

    @property
    def short(self) -> str:
        return SHORT[self.dtype]


@st.composite
def lrn_cases(draw: st.DrawFn) -> Case:
    c = draw(st.sampled_from((1, 2, 3, 4, 5, 7, 8, 13)))
    size = draw(st.one_of(st.integers(1, 7), st.integers(c + 1, c + 3)))
    alpha = draw(st.sampled_from((1e-4, 0.3, 1.0, 2.5, 0.0, -0.5, -1e-3)))
    return Case(
        n=draw(st.sampled_from((0, 1, 2, 2, 3))), c=c,
        spatial=tuple(draw(st.lists(st.sampled_from((1, 2, 3, 5, 0)), max_size=3))),
        size=size, alpha=alpha, beta=draw(st.sampled_from((0.75, 0.5, 1.0, 2.0, 3.0, 0.0))),
        k=draw(st.sampled_from((1.0, 2.0, 0.5))), layout=draw(st.sampled_from(("NCHW", "NHWC"))),
        dtype=draw(st.sampled_from(DTYPES)), mag=draw(st.sampled_from((1.0, 10.0, 100.0))),
        nan_at=draw(st.one_of(st.none(), st.floats(0, 1, exclude_max=True))),
        view=draw(st.sampled_from(("none", "none", "other", "strided"))),
        out=draw(st.sampled_from(OUT_KINDS)), seed=draw(st.integers(0, 2**16)),
    )  # fmt: skip


# Edge cases every run starts with: AlexNet's LRN (size 5, beta 0.75, k 2) NHWC fp16; a
# 2-D input; a window larger than C; beta 0 with a NaN (y = x; PyTorch's dx NaN only at
# the NaN); alpha < 0; alpha 0 with a NaN (0 * NaN still spreads); an even size with a
# NaN in the first channel; k 0 (the scale is alpha / size * sq alone); an empty batch;
# 5-D bf16 through views; a single channel.
EDGE = (
    Case(2, 13, (3, 2), 5, 1e-4, 0.75, 2.0, "NHWC", "float16", mag=10.0, out="strided"),
    Case(3, 5, (), 3, 0.3, 0.75, 1.0, dtype="float64", nan_at=0.5),
    Case(2, 3, (4,), 7, 2.5, 2.0, 0.5, "NHWC", nan_at=0.4, view="other"),
    Case(2, 7, (3,), 3, 1.0, 0.0, 1.0, nan_at=0.45),
    Case(2, 6, (2, 2), 4, -0.5, 1.0, 1.0, dtype="float64", mag=10.0, view="strided"),
    Case(1, 8, (3,), 5, 0.0, 0.75, 2.0, "NHWC", nan_at=0.3, out="fresh"),
    Case(2, 6, (2,), 4, 1.0, 0.75, 1.0, nan_at=0.0),
    Case(2, 4, (3,), 3, 0.5, 0.5, 0.0, mag=100.0),
    Case(0, 3, (4,), 3, out="fresh"),
    Case(1, 4, (2, 3, 2), 2, 1.0, 0.75, 1.0, dtype="bfloat16", view="other"),
    Case(2, 1, (5,), 1, 2.5, 1.0, 1.0, "NHWC"),
)  # fmt: skip


# ------------------------------------------------------------------ operands and bounds


def operands(case: Case) -> tuple[np.ndarray, np.ndarray, float]:
    """(x, dy, k): x of magnitude case.mag with a NaN at case.nan_at, dy standard normal,
    k as drawn, or raised for alpha < 0 to keep every scale >= k / 2."""
    rng = np.random.default_rng(case.seed)
    dt = np_dtype(case.dtype)
    x = (rng.standard_normal(case.shape) * case.mag).astype(np.float32).astype(dt)
    if dt == np.float64:  # bits below float32's mantissa, which a float32 path drops
        x += rng.standard_normal(case.shape) * case.mag * 2.0**-30
    dy = rng.standard_normal(case.shape).astype(dt)
    k = case.k
    if case.alpha < 0 and x.size:
        sq = window_sum(nc(case, x.astype(np.float64)) ** 2, case.size // 2, (case.size - 1) // 2)
        k = case.k + 2.0 * -case.alpha / case.size * float(sq.max())
    if case.nan_at is not None and x.size:
        x.reshape(-1)[int(case.nan_at * x.size)] = np.nan
    return x, dy, k


def nc(case: Case, a: np.ndarray) -> np.ndarray:
    """a with its channels on axis 1."""
    return np.moveaxis(a, case.caxis, 1)


def window_sum(v: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """out[:, c] = sum of v[:, c - lo .. c + hi] over the channels there are (axis 1)."""
    out = np.zeros_like(v)
    for c in range(v.shape[1]):
        out[:, c] = v[:, max(0, c - lo) : c + hi + 1].sum(axis=1)
    return out


def bounds(case: Case, x: np.ndarray, dy: np.ndarray, k: float, want_y: np.ndarray,
           want_dx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """The module docstring's bounds of y and dx (channels on axis 1; a NaN of x counts
    as 0: the elements it reaches are NaN, not compared by bound)."""
    u, s = ACCUMULATION_EPS[case.short], case.short
    a, beta, size = case.alpha / case.size, case.beta, case.size
    xv = np.nan_to_num(nc(case, x.astype(np.float64)))
    g = nc(case, dy.astype(np.float64))
    win, held = (size // 2, (size - 1) // 2), ((size - 1) // 2, size // 2)
    sq = window_sum(xv * xv, *win)
    w = window_sum(np.ones_like(xv), *win)
    h = window_sum(np.ones_like(xv), *held)
    scale = k + a * sq
    e = u * ((w + 2) * abs(a) * sq + 2 * abs(k) + np.abs(scale))
    rho = abs(beta) * e / scale + u * np.abs(beta * np.log(scale)) + C_POW * u
    p = scale**-beta
    t = xv * g * p / scale
    acc = window_sum(t, *held)
    t_err = window_sum(np.abs(t) * (rho + e / scale), *held) + (h + 3) * u * window_sum(
        np.abs(t), *held)  # fmt: skip
    err_y = K * np.abs(xv * p) * (rho + u)
    err_dx = K * (np.abs(g * p) * (rho + u) + np.abs(2 * a * beta * xv) * (t_err + 4 * u * np.abs(
        acc)) + u * np.abs(np.nan_to_num(nc(case, want_dx))))  # fmt: skip
    floor = SUBNORMAL_STEP[s]
    with np.errstate(invalid="ignore"):
        tol_y = err_y + OUT_ROUNDING[s] * np.abs(nc(case, want_y)) + floor
        tol_dx = err_dx + OUT_ROUNDING[s] * np.abs(nc(case, want_dx)) + floor
    return np.moveaxis(tol_y, 1, case.caxis), np.moveaxis(tol_dx, 1, case.caxis)


def torch_lrn(case: Case, x: np.ndarray, dy: np.ndarray, k: float) -> tuple[Any, Any]:
    """PyTorch's y and dx, float64 (a 2-D input as (N, C, 1): PyTorch needs 3 dims)."""
    lift = (lambda a: a[..., None]) if x.ndim == 2 else (lambda a: a)
    xt = torch.from_numpy(np.ascontiguousarray(lift(nc(case, x.astype(np.float64)))))
    xt.requires_grad_()
    gt = torch.from_numpy(np.ascontiguousarray(lift(nc(case, dy.astype(np.float64)))))
    yt = F.local_response_norm(xt, case.size, case.alpha, case.beta, k)
    yt.backward(gt)
    back = (lambda a: a[..., 0]) if x.ndim == 2 else (lambda a: a)
    return (np.moveaxis(back(yt.detach().numpy()), 1, case.caxis),
            np.moveaxis(back(xt.grad.numpy()), 1, case.caxis))  # fmt: skip


def on_backend(case: Case, a: np.ndarray, backend: str) -> Any:
    """a on the backend, as case.view says."""
    ab = to_backend(a, backend)
    if case.view == "other" and a.ndim > 1:
        return other_order_view(ab, case.caxis)
    if case.view == "strided" and a.ndim:
        big = xp_of(ab).zeros((*a.shape[:-1], 2 * a.shape[-1]), a.dtype)
        big[..., ::2] = ab
        return big[..., ::2]
    return ab


def nan_reach(case: Case, x: np.ndarray, lo: int, hi: int) -> np.ndarray:
    """Where a NaN of x reaches through channels [c - lo, c + hi] of its own position."""
    reach = np.zeros(x.shape, bool)
    r = nc(case, reach)  # a view: writes reach
    for i in map(tuple, np.argwhere(np.isnan(nc(case, x.astype(np.float64))))):
        r[(i[0], slice(max(0, i[1] - lo), i[1] + hi + 1), *i[2:])] = True
    return reach


# ------------------------------------------------------------------ tests


@HYPO
@with_examples(EDGE)
@given(case=lrn_cases())
def test_lrn_matches_pytorch(backend: str, case: Case) -> None:
    x, dy, k = operands(case)
    args = (case.size, case.alpha, case.beta, k)
    xb, dyb = on_backend(case, x, backend), on_backend(case, dy, backend)
    out, big = make_out(backend, case.out, case.shape, x.dtype)
    before = snapshot(xb, dyb)
    y = cl.lrn(xb, *args, layout=case.layout, out=out)
    dx = cl.lrn_backward(dyb, xb, *args, layout=case.layout)
    assert_untouched((xb, dyb), before)
    assert_out_honoured(y, out, big)
    assert y.dtype == dx.dtype == x.dtype and y.shape == dx.shape == x.shape

    ry = quiet(rn.lrn, x, *args, case.layout)
    rdx = quiet(rn.lrn_backward, dy, x, *args, case.layout)
    ty, tdx = quiet(torch_lrn, case, x, dy, k)
    tol_y, tol_dx = quiet(bounds, case, x, dy, k, ry, rdx)
    assert_within(y, ry, tol_y, "y vs the reference")
    assert_within(y, ty, tol_y, "y vs PyTorch")
    assert_within(dx, rdx, tol_dx, "dx vs the reference")
    assert_within(dx, tdx, tol_dx, "dx vs PyTorch")

    # a NaN reaches y through the windows holding it (pow(NaN, 0) = 1: not when beta = 0)
    # and dx through the windows of those: [c - (size-1), c + (size-1)] (beta 0: c)
    lo, hi = ((case.size - 1) // 2, case.size // 2) if case.beta else (0, 0)
    np.testing.assert_array_equal(np.isnan(to_numpy(y).astype(np.float64)),
                                  nan_reach(case, x, lo, hi), err_msg="y's NaN")  # fmt: skip
    span = case.size - 1 if case.beta else 0
    np.testing.assert_array_equal(np.isnan(to_numpy(dx).astype(np.float64)),
                                  nan_reach(case, x, span, span), err_msg="dx's NaN")  # fmt: skip

    if x.ndim == 2:  # (N, C) is (N, C, 1) (NHWC: (N, 1, C)): the same sums, bit for bit
        xp, at = xp_of(xb), 1 if case.layout == "NHWC" else 2
        x3, dy3 = (xp.expand_dims(xp.ascontiguousarray(a), at) for a in (xb, dyb))
        y3 = cl.lrn(x3, *args, layout=case.layout)
        dx3 = cl.lrn_backward(dy3, x3, *args, layout=case.layout)
        for got, want in ((y, y3), (dx, dx3)):
            np.testing.assert_array_equal(to_numpy(got), to_numpy(want).squeeze(at))


# ------------------------------------------------------------------ bad arguments

# Not in tests/test_norm.py, test_norm_fp64.py or test_bad_arguments_across_ops.py: each
# names the argument at fault. x: (2, 5, 3) float32.
BAD = {
    "1-D x": (lambda x: cl.lrn(x[0, :, 0], 3), "^x: expected at least 2 dims"),
    "size a float": (lambda x: cl.lrn(x, 3.0), "^size: expected a positive int"),
    "size a bool": (lambda x: cl.lrn(x, True), "^size: expected a positive int"),
    "alpha NaN": (lambda x: cl.lrn(x, 3, math.nan), "^alpha: expected a finite number"),
    "beta inf": (lambda x: cl.lrn_backward(x, x, 3, beta=math.inf), "^beta: expected a finite"),
    "k a string": (lambda x: cl.lrn(x, 3, k="1"), "^k: expected a finite number"),
    "k and alpha negative": (lambda x: cl.lrn(x, 3, -1.0, k=-0.5), "^k: expected k > 0"),
    "layout": (lambda x: cl.lrn(x, 3, layout="NCW"), "^layout: expected 'NCHW' or 'NHWC'"),
    "int x": (lambda x: cl.lrn(x.astype(np.int32), 3), "^x: "),
    "out of another shape": (
        lambda x: cl.lrn(x, 3, out=np.empty((2, 5, 2), np.float32)), "^out: expected shape"),
    "out of another dtype": (
        lambda x: cl.lrn(x, 3, out=np.empty(x.shape, np.float64)), "^out: expected dtype"),
    "dy of another shape": (lambda x: cl.lrn_backward(x[:, :4], x, 3), "^dy: expected shape"),
    "backward 1-D": (lambda x: cl.lrn_backward(x[0, :, 0], x[0, :, 0], 3), "^x: expected at"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(BAD))
def test_bad_arguments_name_the_argument(name: str) -> None:
    call, match = BAD[name]
    x = np.random.default_rng(3).standard_normal((2, 5, 3)).astype(np.float32)
    keep = snapshot(x)
    with pytest.raises(BadParamError, match=match):
        call(x)
    assert_untouched((x,), keep)
