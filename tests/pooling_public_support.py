"""Cases, operands, PyTorch's side, error bounds and calls of the public pooling property
tests (tests/test_pooling_public_properties.py, whose docstring derives the bounds)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from property_support import (  # noqa: E402
    DTYPES,
    OUT_ROUNDING,
    SHORT,
    SUBNORMAL_STEP,
    make_out,
    same_bits,
)

import cudnnlite as cl  # noqa: E402
from cudnnlite import dtypes  # noqa: E402
from cudnnlite.reference import pooling as rp  # noqa: E402
from cudnnlite.testing import ACCUMULATION_EPS, to_numpy  # noqa: E402

F = torch.nn.functional
# An example runs a dozen launches on arrays of a few hundred elements plus PyTorch and
# the reference: ~5 ms warm on the emulator, and the pooling modules (one per dtype)
# compile once, so the profile's example count (30; CUDNNLITE_HYPOTHESIS_EXAMPLES) stands.
HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])


MAX_FWD = {1: cl.max_pool1d, 2: cl.max_pool2d, 3: cl.max_pool3d}
AVG_FWD = {1: cl.avg_pool1d, 2: cl.avg_pool2d, 3: cl.avg_pool3d}
ADA_AVG = {1: cl.adaptive_avg_pool1d, 2: cl.adaptive_avg_pool2d, 3: cl.adaptive_avg_pool3d}
ADA_MAX = {1: cl.adaptive_max_pool1d, 2: cl.adaptive_max_pool2d, 3: cl.adaptive_max_pool3d}
T_MAX = {1: F.max_pool1d, 2: F.max_pool2d, 3: F.max_pool3d}
T_AVG = {1: F.avg_pool1d, 2: F.avg_pool2d, 3: F.avg_pool3d}
T_ADA_AVG = {1: F.adaptive_avg_pool1d, 2: F.adaptive_avg_pool2d, 3: F.adaptive_avg_pool3d}
T_ADA_MAX = {1: F.adaptive_max_pool1d, 2: F.adaptive_max_pool2d, 3: F.adaptive_max_pool3d}
# How a case calls the library: the 1d/2d/3d name, the N-d name with nd= or without it
# (batched only), pooling_forward / pooling_backward, pooling_plan (batched, no divisor).
APIS = ("fixed", "nd", "plain", "cudnn", "plan")


def np_dtype(name: str) -> np.dtype:
    return dtypes.BFLOAT16.numpy if name == "bfloat16" else np.dtype(name)


# ------------------------------------------------------------------ cases


@dataclasses.dataclass(frozen=True)
class Case:
    """One pooling call as a user writes it (window arguments as passed: an int, a 1-tuple
    or one per dim; stride None: the kernel). n None: unbatched. kind: "max", "avg" or
    "adaptive" (``output_size`` as passed, None entries keeping the input's size)."""

    kind: str
    nd: int
    n: int | None
    c: int
    spatial: tuple[int, ...]
    kernel: Any = 1
    stride: Any = None
    padding: Any = 0
    dilation: Any = 1
    ceil_mode: bool = False
    count_include_pad: bool = True
    divisor_override: int | None = None
    output_size: Any = None
    channels_last: bool = False
    dtype: str = "float32"
    values: str = "normal"  # "ties" (a few small ints), "special" (NaN, +-inf among them)
    api: str = "fixed"
    out: str = "none"  # "fresh" (NaN-filled) or "strided" (every other element of a buffer)
    view: bool = False  # x given as a view in the other layout's memory order
    deterministic: bool = False
    seed: int = 0

    def per_dim(self, v: Any) -> tuple[int, ...]:
        if isinstance(v, int):
            return (v,) * self.nd
        return tuple(v) * self.nd if len(v) == 1 else tuple(v)

    @property
    def layout(self) -> str:
        return "NHWC" if self.channels_last else "NCHW"

    @property
    def short(self) -> str:
        return SHORT[self.dtype]

    @property
    def k(self) -> tuple[int, ...]:
        return self.per_dim(self.kernel)

    @property
    def s(self) -> tuple[int, ...]:
        return self.k if self.stride is None else self.per_dim(self.stride)

    @property
    def p(self) -> tuple[int, ...]:
        return self.per_dim(self.padding)

    @property
    def d(self) -> tuple[int, ...]:
        return self.per_dim(self.dilation) if self.kind == "max" else (1,) * self.nd

    @property
    def out_spatial(self) -> tuple[int, ...]:
        if self.kind == "adaptive":
            raw = self.per_dim(self.output_size) if isinstance(self.output_size, int) else (
                self.output_size)  # fmt: skip
            return tuple(i if o is None else o for i, o in zip(self.spatial, raw, strict=True))
        return tuple(rp.output_size(*a, self.ceil_mode) for a in
                     zip(self.spatial, self.k, self.s, self.p, self.d, strict=True))  # fmt: skip

    def shape(self, spatial: tuple[int, ...]) -> tuple[int, ...]:
        inner = (*spatial, self.c) if self.channels_last else (self.c, *spatial)
        return inner if self.n is None else (self.n, *inner)

    @property
    def x_shape(self) -> tuple[int, ...]:
        return self.shape(self.spatial)

    @property
    def y_shape(self) -> tuple[int, ...]:
        return self.shape(self.out_spatial)

    @property
    def mode(self) -> str:
        """The cuDNN-style mode of this case."""
        if self.kind == "max":
            return "max_deterministic" if self.deterministic else "max"
        return "avg_include_pad" if self.count_include_pad else "avg_exclude_pad"


def _form(draw: st.DrawFn, nd: int, values: Callable[[int], st.SearchStrategy]) -> Any:
    """An int, a 1-tuple (PyTorch broadcasts it) or one value per dim; ``values(j)`` draws
    dim j's value (j = -1: a value valid for every dim)."""
    kind = draw(st.sampled_from(("int", "one", "tuple")))
    if kind == "int":
        return draw(values(-1))
    if kind == "one":
        return (draw(values(-1)),)
    return tuple(draw(values(j)) for j in range(nd))


def _min_size(k: int, s: int, p: int, d: int, ceil: bool) -> int:
    """The smallest input giving one output (with ceil_mode and dilation it may hold a
    window of padding only)."""
    return next(i for i in range(1, 64) if rp.output_size(i, k, s, p, d, ceil) >= 1)


@st.composite
def window_cases(draw: st.DrawFn, kind: str) -> Case:
    nd = draw(st.sampled_from((1, 2, 2, 3)))
    n = draw(st.sampled_from((None, 0, 1, 2, 2)))
    api = draw(st.sampled_from(APIS[:2] if n is None else APIS))
    kmax = 3 if nd == 3 else 4
    kernel = _form(draw, nd, lambda j: st.integers(1, kmax))
    case = Case(kind, nd, n, draw(st.integers(1, 3)), (1,) * nd, kernel)
    k = case.k
    stride = None if draw(st.integers(0, 3)) == 0 else _form(draw, nd, lambda j: st.integers(1, 6))
    padding = _form(draw, nd, lambda j: st.integers(0, (min(k) if j < 0 else k[j]) // 2))
    dilation = _form(draw, nd, lambda j: st.integers(1, 3)) if kind == "max" else 1
    dov = None
    if kind == "avg" and api not in ("cudnn", "plan"):
        dov = draw(st.sampled_from((None, None, None, 1, 3, -2)))
    case = dataclasses.replace(
        case, stride=stride, padding=padding, dilation=dilation, ceil_mode=draw(st.booleans()),
        count_include_pad=draw(st.booleans()), divisor_override=dov,
        channels_last=draw(st.booleans()), dtype=draw(st.sampled_from(DTYPES)),
        values=draw(st.sampled_from(("normal", "ties", "special"))), api=api,
        out=draw(st.sampled_from(("none", "none", "fresh", "strided"))), view=draw(st.booleans()),
        deterministic=draw(st.booleans()), seed=draw(st.integers(0, 2**16)),
    )  # fmt: skip
    top = 4 if nd == 3 else 7
    spatial = tuple(max(draw(st.integers(1, top)), _min_size(*a, case.ceil_mode))
                    for a in zip(k, case.s, case.p, case.d, strict=True))  # fmt: skip
    return dataclasses.replace(case, spatial=spatial)


@st.composite
def adaptive_cases(draw: st.DrawFn) -> Case:
    nd = draw(st.sampled_from((1, 2, 2, 3)))
    n = draw(st.sampled_from((None, 0, 1, 2, 2)))
    top = 4 if nd == 3 else 7
    spatial = tuple(draw(st.integers(1, top)) for _ in range(nd))
    # sizes up to twice the input (overlapping windows), None: the input's size
    # (PyTorch's adaptive_*_pool1d takes no None)
    form = draw(st.sampled_from(("int", "tuple") if nd == 1 else ("int", "tuple", "none")))
    if form == "int":
        output_size: Any = draw(st.integers(1, 2 * min(spatial)))
    else:
        output_size = tuple(draw(st.integers(1, 2 * i)) for i in spatial)
        if form == "none":
            output_size = tuple(None if draw(st.booleans()) else o for o in output_size)
    return Case("adaptive", nd, n, draw(st.integers(1, 3)), spatial, output_size=output_size,
                channels_last=draw(st.booleans()), dtype=draw(st.sampled_from(DTYPES)),
                values=draw(st.sampled_from(("normal", "ties", "special"))),
                api=draw(st.sampled_from(APIS[:2] if n is None else APIS[:3])),
                out=draw(st.sampled_from(("none", "none", "fresh", "strided"))),
                view=draw(st.booleans()), deterministic=draw(st.booleans()),
                seed=draw(st.integers(0, 2**16)))  # fmt: skip


M, A = "max", "avg"
# Edge cases every run starts with: a kernel larger than a 1-wide input (padding makes up
# the rest), ceil_mode whose last window would start in the right padding (dropped), a
# window of padding only (dilation 2 over a 1-wide input, ceil_mode: no input in it),
# strides larger than the kernel, an empty batch, ties and NaN / -inf in overlapping
# windows, unbatched channels-last 3-D fp16, bf16, the plan and cuDNN-style calls.
MAX_EDGE = (
    Case(M, 1, 2, 3, (1,), 3, 1, 1, values="ties"),
    Case(M, 2, 1, 2, (5, 5), 2, 2, 1, ceil_mode=True, api="plain"),
    Case(M, 1, 1, 2, (1,), 3, 3, 1, 2, ceil_mode=True, api="nd"),
    Case(M, 2, 2, 2, (7, 5), (2,), (3, 5), api="cudnn", deterministic=True),
    Case(M, 2, 0, 3, (4, 5), 2, api="plan", out="fresh"),
    Case(M, 2, 2, 3, (6, 5), 3, 1, 1, values="ties", api="cudnn", seed=1),
    Case(M, 2, 2, 3, (6, 5), 3, 1, 1, (1, 2), values="special", seed=2, out="strided"),
    Case(M, 3, None, 2, (3, 4, 5), (2, 3, 2), (1, 2, 1), (1, 1, 0), channels_last=True,
         dtype="float16", view=True, api="nd"),
    Case(M, 2, 2, 3, (7, 6), 3, 2, 1, dtype="bfloat16", values="ties", api="plan"),
    Case(M, 3, 1, 2, (4, 4, 4), 3, 2, 1, 2, True, dtype="float64", values="special"),
)  # fmt: skip
AVG_EDGE = (
    Case(A, 1, 2, 3, (1,), 3, 1, 1, ceil_mode=True, count_include_pad=False),
    Case(A, 1, 1, 2, (5,), 2, 2, 1, ceil_mode=True, api="cudnn"),
    Case(A, 1, 1, 2, (6,), 3, 2, 1, ceil_mode=True, api="plan"),  # last window hangs over
    Case(A, 3, 2, 2, (3, 4, 5), 2, (1, 2, 3), 1, divisor_override=-2, channels_last=True),
    Case(A, 2, 2, 2, (7, 5), 2, 3, api="plain", out="strided"),
    Case(A, 2, 0, 3, (4, 5), 3, 2, 1, api="cudnn"),
    Case(A, 3, 1, 1, (1, 4, 4), (3, 1, 1), 1, (1, 0, 0)),  # PyTorch refuses: README
    Case(A, 2, None, 3, (5, 4), (3, 2), 1, (1, 0), count_include_pad=False, dtype="float16",
         divisor_override=3, view=True, out="fresh"),
    Case(A, 2, 2, 3, (6, 6), 2, 1, dtype="bfloat16", values="special", api="nd"),
)  # fmt: skip
ADAPTIVE_EDGE = (
    Case("adaptive", 2, 2, 3, (3, 2), output_size=(7, 5), values="ties"),
    Case("adaptive", 3, 1, 2, (4, 3, 4), output_size=1, channels_last=True, api="plain"),
    Case("adaptive", 2, 1, 3, (5, 7), output_size=1, api="plain", out="strided"),
    Case("adaptive", 1, 0, 2, (5,), output_size=3),
    Case("adaptive", 2, None, 2, (1, 1), output_size=(None, 3), dtype="float16"),
    Case("adaptive", 3, None, 2, (3, 4, 2), output_size=(2, None, 3), channels_last=True,
         dtype="float64", values="special", view=True),
)  # fmt: skip


# ------------------------------------------------------------------ operands


def values(rng: np.random.Generator, shape: tuple[int, ...], case: Case,
           kind: str | None = None) -> np.ndarray:  # fmt: skip
    """Values of case's dtype: normal (float64 with bits below float32's mantissa, which a
    float32 path would drop), "ties" or "special" (a fifth NaN / +inf / -inf)."""
    kind = kind or case.values
    dt = np_dtype(case.dtype)
    if kind == "ties":
        return rng.integers(-1, 2, size=shape).astype(dt)
    a = rng.standard_normal(shape).astype(np.float32).astype(dt)
    if dt == np.float64:
        a += rng.standard_normal(shape) * 2.0**-30
    if kind == "special":
        pick = rng.integers(0, 15, size=shape)
        a[pick == 0], a[pick == 1], a[pick == 2] = np.nan, np.inf, -np.inf
    return a


def channel_axis(case: Case) -> int:
    if case.channels_last:
        return case.nd if case.n is None else case.nd + 1
    return 0 if case.n is None else 1


def make_case_out(case: Case, like: Any) -> tuple[Any, Any]:
    """(out, the buffer it lies in) for case.out, on like's backend."""
    return make_out(like, case.out, case.y_shape, np_dtype(case.dtype))


def batched(case: Case, a: np.ndarray) -> np.ndarray:
    return a[None] if case.n is None else a


def unbatched(case: Case, a: np.ndarray) -> np.ndarray:
    return a[0] if case.n is None else a


def bshape(case: Case, shape: tuple[int, ...]) -> tuple[int, ...]:
    return (1, *shape) if case.n is None else shape


def to_torch(case: Case, a: np.ndarray) -> Any:
    """a as a float64 channels-first torch tensor (unbatched stays unbatched)."""
    b = np.asarray(a).astype(np.float64)
    if case.channels_last:
        b = np.moveaxis(b, -1, 0 if case.n is None else 1)
    return torch.from_numpy(np.ascontiguousarray(b))


def from_torch(case: Case, t: Any) -> np.ndarray:
    a = t.detach().numpy()
    return np.moveaxis(a, 0 if case.n is None else 1, -1) if case.channels_last else a


# ------------------------------------------------------------------ comparison


def exact(got: Any, want: np.ndarray, what: str) -> None:
    g = to_numpy(got)
    assert g.shape == want.shape, f"{what}: shape {g.shape}, expected {want.shape}"
    np.testing.assert_array_equal(g.astype(want.dtype), want, err_msg=what)  # NaN == NaN


def sum_bound(case: Case, want: np.ndarray, mag: np.ndarray, terms: Any) -> np.ndarray:
    """The module docstring's bound for a sum of ``terms`` roundings of the accumulation
    type relative to ``mag``, and one rounding to the storage type."""
    s = case.short
    with np.errstate(invalid="ignore"):  # (0 * inf where want is not finite: not compared)
        return (2.0 * terms * ACCUMULATION_EPS[s] * np.abs(mag)
                + OUT_ROUNDING[s] * np.abs(want) + SUBNORMAL_STEP[s])  # fmt: skip


def within(got: Any, want: np.ndarray, tol: np.ndarray, what: str) -> None:
    """|got - want| <= tol where want is finite; the same inf / NaN where it is not."""
    g = to_numpy(got)
    assert g.shape == want.shape, f"{what}: shape {g.shape}, expected {want.shape}"
    g = g.astype(np.float64)
    fin = np.isfinite(want)
    np.testing.assert_array_equal(g[~fin], want[~fin], err_msg=f"{what}: inf / NaN")
    with np.errstate(invalid="ignore"):
        err = np.abs(g - want)
    bad = fin & ~(err <= tol)  # NaN where want is finite counts as bad
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} off; first at {i}: got "
                             f"{g[i]}, expected {want[i]}, tolerance {tol[i]:.3g}")  # fmt: skip


def adjoint(x: np.ndarray, y: Any, dy: np.ndarray, dx: Any, tol_y: np.ndarray,
            tol_dx: np.ndarray) -> None:  # fmt: skip
    """<A x, dy> = <x, A^T dy> for a linear pooling A, up to the errors of y and dx that
    ``within`` accepted and the rounding of the two float64 dot products."""
    xv, dyv = x.astype(np.float64), dy.astype(np.float64)
    yv, dxv = to_numpy(y).astype(np.float64), to_numpy(dx).astype(np.float64)
    lhs, rhs = float(np.sum(yv * dyv)), float(np.sum(xv * dxv))
    slack = float(np.sum(np.abs(dyv) * tol_y) + np.sum(np.abs(xv) * tol_dx))
    size = max(yv.size, xv.size)
    rounding = 2 * size * 2.0**-53 * float(np.sum(np.abs(yv * dyv)) + np.sum(np.abs(xv * dxv)))
    assert abs(lhs - rhs) <= slack + rounding, f"adjoint: {lhs} vs {rhs}"


# ------------------------------------------------------------------ calls


def window_args(case: Case) -> tuple:
    """The window arguments as the case passes them (max: with dilation)."""
    if case.kind == "max":
        return (case.kernel, case.stride, case.padding, case.dilation, case.ceil_mode)
    return (case.kernel, case.stride, case.padding, case.ceil_mode, case.count_include_pad,
            case.divisor_override)  # fmt: skip


def nd_kw(case: Case) -> dict[str, Any]:
    """nd= for the backward: always when unbatched, and on the "nd" api."""
    return {"nd": case.nd} if case.n is None or case.api == "nd" else {}


def cudnn_args(case: Case) -> tuple:
    return (case.mode, case.kernel, case.stride, case.padding,
            case.dilation if case.kind == "max" else 1, case.ceil_mode)  # fmt: skip


def call_forward(case: Case, xb: Any, backend: str, out: Any) -> tuple[Any, Any]:
    """(y, indices or None) through case's api."""
    lay = {"layout": case.layout, "out": out}
    if case.kind == "max":
        if case.api == "cudnn":
            return cl.pooling_forward(xb, *cudnn_args(case), **lay), None
        if case.api == "plan":
            plan = cl.pooling_plan(xb.shape, *cudnn_args(case), layout=case.layout,
                                   dtype=xb.dtype, backend=backend,
                                   return_indices=True)  # fmt: skip
            y, ind = plan(xb, out=out)
            y2, ind2 = plan(xb)  # a repeat: the call cache's path
            y3, ind3 = cl.max_pool(xb, *window_args(case), True, layout=case.layout)
            for a, b in ((y, y2), (y, y3), (ind, ind2), (ind, ind3)):
                same_bits(a, b)
            return y, ind
        if case.api == "fixed":
            return MAX_FWD[case.nd](xb, *window_args(case), True, **lay)
        return cl.max_pool(xb, *window_args(case), True, **lay, **nd_kw(case))
    if case.api == "cudnn":
        return cl.pooling_forward(xb, *cudnn_args(case), **lay), None
    if case.api == "plan":
        plan = cl.pooling_plan(xb.shape, *cudnn_args(case), layout=case.layout, dtype=xb.dtype,
                               backend=backend)  # fmt: skip
        y = plan(xb, out=out)
        same_bits(y, plan(xb))
        same_bits(y, cl.pooling_forward(xb, *cudnn_args(case), layout=case.layout))
        return y, None
    if case.api == "fixed":
        return AVG_FWD[case.nd](xb, *window_args(case), **lay), None
    return cl.avg_pool(xb, *window_args(case), **lay, **nd_kw(case)), None


def call_backward(case: Case, dyb: Any, ind: Any, xb: Any) -> Any:
    lay = {"layout": case.layout}
    if case.api == "cudnn":
        return cl.pooling_backward(dyb, xb, *cudnn_args(case), **lay)
    if case.kind == "max":
        return cl.max_pool_backward(dyb, ind, case.x_shape, *window_args(case), **lay,
                                    deterministic=case.deterministic, **nd_kw(case))  # fmt: skip
    return cl.avg_pool_backward(dyb, case.x_shape, *window_args(case), **lay, **nd_kw(case))


def torch_pool(case: Case, xt: Any) -> Any:
    """PyTorch's pooling of a float64 channels-first tensor: (y, indices) for max, y for
    avg (avg_pool1d has no divisor_override: that case runs as a 2-D pool of height 1)."""
    k, s, p, nd = case.k, case.s, case.p, case.nd
    if case.kind == "max":
        return T_MAX[nd](xt, k, s, p, case.d, case.ceil_mode, True)
    if nd == 1 and case.divisor_override is not None:
        return F.avg_pool2d(xt.unsqueeze(-2), (1, *k), (1, *s), (0, *p), case.ceil_mode,
                            case.count_include_pad, case.divisor_override).squeeze(-2)  # fmt: skip
    extra = () if nd == 1 else (case.divisor_override,)
    return T_AVG[nd](xt, k, s, p, case.ceil_mode, case.count_include_pad, *extra)


def pytorch_refuses(case: Case) -> bool:
    """README's deliberate difference: avg_pool3d of an input smaller than the kernel
    along a dim (the padding making up the rest) is PyTorch's RuntimeError."""
    return case.kind == "avg" and case.nd == 3 and any(
        i < k for i, k in zip(case.spatial, case.k, strict=True))  # fmt: skip
