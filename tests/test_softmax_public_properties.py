"""Property tests (hypothesis) of the PUBLIC softmax functions, as a user calls them:
``softmax``, ``log_softmax``, ``softmax_backward``, ``log_softmax_backward`` and
``softmax_plan``, against PyTorch CPU (``F.softmax`` / ``F.log_softmax`` and their
autograd, float64 on the same values: PyTorch's semantics without its rounding) and the
float64 reference (``cudnnlite.reference.softmax``), on every backend.

Drawn: 0 to 4 dims (0-d: axis 0, -1 or None, as PyTorch), sizes with 0s, 1s, primes and
multiples of the 16-byte pack, and long last rows (33 .. 2048: a group of lanes up to a
warp, one block per row past 1024); any axis, negative too, or cuDNN's ``mode``
"instance" / "channel" (the columns kernel whenever the axis is not the last); log or
not, through ``log_softmax`` or ``softmax(log=)``; the "accurate" and "fast" algorithms;
``dtype=`` (a NumPy or torch float type: x converted first, bit for bit the call on the
converted x); float32 / float16 / bfloat16 / float64; values of magnitude 3, 1e3 or near
the type's range (1e4 fp16, 1e30 fp32 / bf16, 1e300 fp64: the max subtraction keeps them
finite), or sprinkled with -inf (a whole row of them too), a NaN and a +inf (NaN's and
+inf's rows are NaN and stay their own; an all -inf row is NaN, as PyTorch's); x and dy as
views in another memory order or every other element of a buffer; ``out=`` absent, fresh
or strided (backward: dy itself too); a plan (with alpha), bit for bit the direct call and
its own repeat. Rows of 2^17 and more over few rows (the split partial + finish kernels)
run in two of the @examples. Every call leaves its inputs as they were.

Tolerance of each element, from the row length L and u = ACCUMULATION_EPS (2^-24 for the
float32 arithmetic of float32 / float16 / bfloat16, 2 * 2^-53 for float64, whose
reference and PyTorch round in double too); z = x - max (fast: x), s = sum exp(z):

- s: each term meets at most L + D roundings (D = 40: a warp's 5 shuffle levels, a
  block's 32 warp partials, the split path's chunks), each a relative 7 u at most
  (expf's 2 ulp = 4 u and the product and sum of a rescale by exp(m - m'); the roundings
  of the max differences telescope to |z|, and sum e^z |z| / s <= L / e), so
  es = 7 (L + D) u;
- softmax: |y| (u (|z| + 4) + es) (z's rounding amplified by exp, 1 / s, the products);
  log-softmax: |alpha| (u (|z| + 2 |log s|) + es) + 3 u |y| (logf 1 ulp, the subtraction);
- backward from the same y: the row's sum over L terms within (L + D) u of its
  magnitude: |y| ((L + D) u sum |dy y| + 2 u (|dy| + |sum dy y|)) + 2 u |dx|; log:
  e^y ((L + D) u sum |dy| + 6 u |sum dy|) + 2 u |dx|;
- against PyTorch's autograd (its own y): plus our y's measured deviation d from
  PyTorch's y carried through the formula, d |dy - sum dy y| + (|y| + d) sum |dy| d
  (log: |e^y - e^y_torch| |sum dy|);
each plus one rounding to the storage type (fp16 2^-11, bf16 2^-8 of |want|) and its
subnormal step (plus the arithmetic's). An element missing from (or foreign to) a row's
sum moves the row's y by its share of the row's mass, e^z / s, relative: caught above es
(float32: 2e-5 for rows of 16, 9e-4 for rows of 2048); a wrong max or row, O(1).
"""

from __future__ import annotations

import dataclasses
import math
import os
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
    same_bits,
    snapshot,
    with_examples,
    xp_of,
)

import cudnnlite as cl  # noqa: E402
from cudnnlite import dtypes  # noqa: E402
from cudnnlite import reference as ref  # noqa: E402
from cudnnlite.errors import BadParamError  # noqa: E402
from cudnnlite.testing import ACCUMULATION_EPS, to_backend, to_numpy  # noqa: E402

F = torch.nn.functional
# An example runs 2 to 6 launches plus PyTorch and the reference, milliseconds each, but
# rows up to 2048 and the @examples' rows of 2^17 make some take 0.1-0.5 s: 12 draws by
# default (CUDNNLITE_HYPOTHESIS_EXAMPLES deepens).
HYPO = settings(
    max_examples=int(os.environ.get("CUDNNLITE_HYPOTHESIS_EXAMPLES", "12")),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)

# magnitudes near the top of each type's range whose differences stay finite (fp16's
# log-softmax reaches -2 max|x|, within 65504 for 3e4)
HUGE = {"fp16": 1e4, "bf16": 1e30, "fp32": 1e30, "fp64": 1e300}
D = 40  # combine levels a term of a row's sum meets besides the sequential ones
K_S = 7  # relative roundings (in u) of a term per level

SIZES = (1, 2, 3, 5, 7, 8, 13, 16, 0)
LONG = (33, 64, 255, 1024, 1025, 1501, 2048)


def np_dtype(name: str) -> np.dtype:
    return dtypes.BFLOAT16.numpy if name == "bfloat16" else np.dtype(name)


@dataclasses.dataclass(frozen=True)
class Case:
    """One forward and backward call as a user writes them. axis as passed (None: the
    last, or mode's); cast: ``dtype=`` (None: not passed); api: "fn" (log_softmax /
    log_softmax_backward when log), "flag" (softmax(log=), dtype= as a torch dtype) or
    "plan" (softmax_plan with ``alpha``); view: "other" (another memory order), "strided"
    (every other element of a buffer) or "none"; dx_out: OUT_KINDS or "dy" (in place)."""

    shape: tuple[int, ...]
    axis: int | None = None
    mode: str | None = None
    log: bool = False
    dtype: str = "float32"
    cast: str | None = None
    algorithm: str = "accurate"
    values: str = "normal"  # "large", "special" (-inf, a -inf row, a NaN, a +inf)
    api: str = "fn"
    alpha: float = 1.0
    view: str = "none"
    out: str = "none"
    dx_out: str = "none"
    seed: int = 0

    @property
    def result(self) -> str:
        return self.cast or self.dtype

    @property
    def short(self) -> str:
        return SHORT[self.result]

    @property
    def axes(self) -> tuple[int, ...]:
        """The axes one softmax runs over (none for a 0-d x)."""
        nd = len(self.shape)
        if self.mode == "instance":
            return tuple(range(1, nd))
        if self.mode == "channel":
            return (1,)
        return ((-1 if self.axis is None else self.axis) % nd,) if nd else ()

    @property
    def length(self) -> int:
        return math.prod(self.shape[a] for a in self.axes)


@st.composite
def softmax_cases(draw: st.DrawFn) -> Case:
    nd = draw(st.integers(0, 4))
    shape = [draw(st.sampled_from(SIZES)) for _ in range(nd)]
    mode = draw(st.sampled_from((None, None, None, "instance", "channel"))) if nd >= 2 else None
    axis = draw(st.sampled_from((None, 0, -1))) if nd == 0 else None
    if nd and mode is None:
        axis = draw(st.one_of(st.none(), st.integers(-nd, nd - 1)))
        if axis in (None, -1, nd - 1) and nd <= 3 and draw(st.booleans()):
            # a long last row (inner 1): lane groups up to a warp, past 1024 a block a row
            shape = [min(s, 3) for s in shape[:-1]] + [draw(st.sampled_from(LONG))]
    algorithm = draw(st.sampled_from(("accurate", "accurate", "accurate", "fast")))
    # fast (no max) only on values whose exp stays finite, and without +inf
    values = draw(st.sampled_from(("normal", "special") if algorithm == "fast" else (
        "normal", "large", "special")))  # fmt: skip
    api = draw(st.sampled_from(("fn", "flag", "plan")))
    views = ("none", "none", "other", "strided")[: 2 + (nd >= 1) + (nd >= 2)]
    return Case(
        tuple(shape), axis, mode, draw(st.booleans()), draw(st.sampled_from(DTYPES)),
        None if api == "plan" else draw(st.sampled_from((None, None, "float32", "float64"))),
        algorithm, values, api, draw(st.sampled_from((1.0, 0.5, -1.0))) if api == "plan" else 1.0,
        draw(st.sampled_from(views)), draw(st.sampled_from(OUT_KINDS)),
        draw(st.sampled_from((*OUT_KINDS, "dy"))), draw(st.integers(0, 2**16)),
    )  # fmt: skip


# Edge cases every run starts with: 0-d; the split path over a row of 2^17 + 6149 (scalar)
# and two bf16 rows of 2^17 (16-byte packs, through a plan); the block kernel on fp16 with
# specials, in place into dy; the columns kernel (instance mode, huge fp64 values; channel
# mode with dtype=); empty arrays; fast log-softmax with -inf rows and a NaN; a negative
# axis of a 4-D bf16 view; short vector rows (2 lanes a row); a plan with alpha -1.
EDGE = (
    Case((), 0, log=True, values="special", seed=3),
    Case((), None, dtype="float16", cast="float64", api="flag"),
    Case((1, 137221), values="large", out="strided", seed=1),
    Case((2, 131072), log=True, dtype="bfloat16", api="plan", seed=2),
    Case((3, 1501), dtype="float16", values="special", view="strided", dx_out="dy", seed=4),
    Case((2, 3, 5, 7), mode="instance", log=True, dtype="float64", values="large"),
    Case((2, 5, 3), mode="channel", dtype="float16", cast="float32", api="flag", view="other"),
    Case((3, 0, 4), 1, log=True, out="fresh", dx_out="strided"),
    Case((0, 5), dtype="float64", api="plan"),
    Case((4, 33), log=True, algorithm="fast", values="special", seed=5),
    Case((2, 3, 4, 5), -3, dtype="bfloat16", view="other", dx_out="strided", seed=6),
    Case((7, 16), dtype="float16", out="fresh", dx_out="fresh"),
    Case((3, 7), api="plan", alpha=-1.0, log=True, out="strided", values="special", seed=7),
    Case((4, 9), log=True, dtype="float16", values="large", cast="float16", seed=8),
)  # fmt: skip


# ------------------------------------------------------------------ operands


def rows(case: Case, a: np.ndarray) -> np.ndarray:
    """A view of C-contiguous a as (rows..., L): the softmax's axes last, flattened."""
    if case.mode == "instance" or not a.ndim:
        return a.reshape(a.shape[0] if a.ndim else 1, -1)
    return np.moveaxis(a, case.axes[0], -1)


def values(case: Case, rng: np.random.Generator) -> np.ndarray:
    """x of case.dtype (float64: with bits below float32's mantissa)."""
    scale = 3.0
    if case.values == "large":
        scale = (1e3, HUGE[SHORT[case.dtype]])[rng.integers(2)]
    a = np.asarray(rng.standard_normal(case.shape) * scale)
    if case.dtype == "float16":
        np.clip(a, -3e4, 3e4, out=a)
    x = a.astype(np_dtype(case.dtype))
    if case.values != "special" or not x.size:
        return x
    x[rng.random(x.shape) < 0.125] = -np.inf
    r = rows(case, x)
    n = math.prod(r.shape[:-1])
    r[np.unravel_index(rng.integers(n), r.shape[:-1])] = -np.inf  # a whole row
    flat = x.reshape(-1)
    flat[rng.integers(x.size)] = np.nan
    if case.algorithm == "accurate":  # fast's exp(+inf) / sum is 0 elsewhere, not NaN
        flat[rng.integers(x.size)] = np.inf
    return x


def on_backend(case: Case, a: np.ndarray, backend: str) -> Any:
    """a on the backend, as case.view says."""
    ab = to_backend(a, backend)
    if case.view == "other" and a.ndim >= 2:
        return other_order_view(ab, case.axes[0])
    if case.view == "strided" and a.ndim:
        big = xp_of(ab).zeros((*a.shape[:-1], 2 * a.shape[-1]), a.dtype)
        big[..., ::2] = ab
        return big[..., ::2]
    return ab


# ------------------------------------------------------------------ calls


def forward(case: Case, xb: Any, backend: str, out: Any) -> Any:
    kw: dict[str, Any] = {"algorithm": case.algorithm, "mode": case.mode}
    if case.api == "plan":
        plan = cl.softmax_plan(xb.shape, case.axis, log=case.log, alpha=case.alpha,
                               dtype=xb.dtype, backend=backend, **kw)  # fmt: skip
        y = plan(xb, out=out)
        same_bits(y, plan(xb), "the plan's repeat")
        same_bits(y, cl.softmax(xb, case.axis, log=case.log, alpha=case.alpha, **kw),
                  "the plan vs the direct call")  # fmt: skip
        return y
    if case.api == "flag":
        if case.cast:
            kw["dtype"] = getattr(torch, case.cast)
        return cl.softmax(xb, case.axis, log=case.log, out=out, **kw)
    if case.cast:
        kw["dtype"] = np_dtype(case.cast)
    return (cl.log_softmax if case.log else cl.softmax)(xb, case.axis, out=out, **kw)


def backward(case: Case, dyb: Any, yb: Any, out: Any) -> Any:
    if case.api == "fn":
        fn = cl.log_softmax_backward if case.log else cl.softmax_backward
        return fn(dyb, yb, case.axis, mode=case.mode, out=out)
    return cl.softmax_backward(dyb, yb, case.axis, log=case.log, mode=case.mode, out=out)


def torch_softmax(case: Case, xv: np.ndarray, dy: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """PyTorch's y and its autograd dx (float64), instance mode over x viewed (N, -1)."""
    xt = torch.from_numpy(np.array(xv, np.float64)).requires_grad_()  # (0-d stays 0-d)
    fn = F.log_softmax if case.log else F.softmax
    if case.mode == "instance":
        flat = xt.reshape(case.shape[0], math.prod(case.shape[1:]))
        yt = fn(flat, 1).reshape(case.shape)
    else:
        yt = fn(xt, 1 if case.mode == "channel" else (-1 if case.axis is None else case.axis))
    yt.backward(torch.from_numpy(np.array(dy, np.float64)))
    return yt.detach().numpy(), xt.grad.numpy()


# ------------------------------------------------------------------ bounds


def finite_abs(a: np.ndarray) -> np.ndarray:
    return np.where(np.isfinite(a), np.abs(a), 0.0)


def forward_bound(case: Case, xv: np.ndarray, want: np.ndarray) -> np.ndarray:
    """The module docstring's bound of y (xv: the converted x in float64)."""
    u, s, ax = ACCUMULATION_EPS[case.short], case.short, case.axes
    if not xv.size:
        return np.zeros(xv.shape)
    m = 0.0 if case.algorithm == "fast" else np.max(xv, axis=ax, keepdims=True)
    z = xv - m
    lse = finite_abs(np.log(np.sum(np.exp(z), axis=ax, keepdims=True)))
    z, w = finite_abs(z), finite_abs(want)
    es = K_S * (case.length + D) * u
    if case.log:
        err = abs(case.alpha) * (u * (z + 2 * lse) + es) + 3 * u * w
    else:
        err = w * (u * (z + 4) + es)
    return err + OUT_ROUNDING[s] * w + SUBNORMAL_STEP[s] + SUBNORMAL_STEP["fp32"]


def backward_bound(case: Case, dy: np.ndarray, y: np.ndarray, want: np.ndarray) -> np.ndarray:
    """The bound of dx from the same y (dy, y: the stored values in float64)."""
    u, s, ax, n = ACCUMULATION_EPS[case.short], case.short, case.axes, case.length + D
    w = finite_abs(want)
    if case.log:
        e = np.exp(y)
        err = e * (n * u * np.sum(np.abs(dy), ax, keepdims=True)
                   + 6 * u * np.abs(np.sum(dy, ax, keepdims=True)))  # fmt: skip
    else:
        dot = np.sum(dy * y, ax, keepdims=True)
        err = np.abs(y) * (n * u * np.sum(np.abs(dy * y), ax, keepdims=True)
                           + 2 * u * (np.abs(dy) + np.abs(dot)))  # fmt: skip
    return err + (2 * u + OUT_ROUNDING[s]) * w + SUBNORMAL_STEP[s] + SUBNORMAL_STEP["fp32"]


def torch_gap(case: Case, dy: np.ndarray, y: np.ndarray, ty: np.ndarray) -> np.ndarray:
    """How far PyTorch's dx, from its own y ``ty``, may lie from the exact gradient of our
    y: our y's measured deviation carried through the backward's formula."""
    ax = case.axes
    if case.log:
        return np.nan_to_num(np.abs(np.exp(y) - np.exp(ty))) * np.abs(
            np.sum(dy, ax, keepdims=True))  # fmt: skip
    d = np.nan_to_num(np.abs(y - ty))
    dot = np.sum(dy * np.nan_to_num(ty), ax, keepdims=True)
    spread = np.sum(np.abs(dy) * d, ax, keepdims=True)
    return d * np.abs(dy - dot) + (finite_abs(ty) + d) * spread


def within(got: Any, want: np.ndarray, bound: np.ndarray, what: str) -> None:
    """assert_within, with want's infinities (log-softmax of -inf) matched exactly."""
    g = to_numpy(got).astype(np.float64)
    assert g.shape == want.shape, f"{what}: shape {g.shape}, expected {want.shape}"
    inf = np.isinf(want)
    np.testing.assert_array_equal(g[inf], want[inf], err_msg=f"{what}: infinities")
    assert_within(np.where(inf, 0.0, g), np.where(inf, 0.0, want), np.where(inf, 0.0, bound),
                  what)  # fmt: skip


# ------------------------------------------------------------------ tests


@HYPO
@with_examples(EDGE)
@given(case=softmax_cases())
def test_softmax_matches_pytorch(backend: str, case: Case) -> None:
    rng = np.random.default_rng(case.seed)
    x = values(case, rng)
    rdt = np_dtype(case.result)
    with np.errstate(over="ignore"):  # (huge float64 values cast to float32 become inf)
        xc = x.astype(rdt)  # dtype= converts first (one rounding)
    xb = on_backend(case, x, backend)
    out, big = make_out(backend, case.out, case.shape, rdt)
    keep = snapshot(xb)
    y = forward(case, xb, backend, out)
    assert_untouched((xb,), keep)
    assert_out_honoured(y, out, big)
    assert y.dtype == rdt and tuple(y.shape) == case.shape
    if case.cast:
        direct = cl.softmax(to_backend(xc, backend), case.axis, log=case.log,
                            algorithm=case.algorithm, mode=case.mode)  # fmt: skip
        same_bits(y, direct, "dtype= vs the call on the converted x")

    dy = np.asarray(rng.standard_normal(case.shape)).astype(rdt)
    xv, dyv = xc.astype(np.float64), dy.astype(np.float64)
    fast = case.algorithm == "fast"
    want = case.alpha * quiet(ref.softmax.softmax, xc, case.axis, log=case.log, mode=case.mode,
                              fast=fast)  # fmt: skip
    ty, tdx = quiet(torch_softmax, case, xv, dyv)
    tol_y = quiet(forward_bound, case, xv, want)
    within(y, want, tol_y, "y vs the reference")
    # (fast equals PyTorch where exp(x) stays finite: no +inf is drawn for it)
    within(y, case.alpha * ty, tol_y, "y vs PyTorch")

    # the backward takes softmax's output: a plan's y with alpha != 1 is not one
    yb = y if case.alpha == 1 else cl.softmax(xb, case.axis, log=case.log, mode=case.mode,
                                              algorithm=case.algorithm)  # fmt: skip
    dyb = on_backend(case, dy, backend)
    dout, dbig = (dyb, None) if case.dx_out == "dy" else make_out(backend, case.dx_out,
                                                                  case.shape, rdt)  # fmt: skip
    inputs = (yb,) if case.dx_out == "dy" else (yb, dyb)
    keep = snapshot(*inputs)
    dx = backward(case, dyb, yb, dout)
    assert_untouched(inputs, keep)
    assert_out_honoured(dx, dout, dbig)
    assert dx.dtype == rdt and tuple(dx.shape) == case.shape
    ys = to_numpy(yb).astype(np.float64)
    want_dx = quiet(ref.softmax.softmax_backward, dyv, ys, case.axis, log=case.log,
                    mode=case.mode)  # fmt: skip
    tol_dx = quiet(backward_bound, case, dyv, ys, want_dx)
    within(dx, want_dx, tol_dx, "dx vs the reference")
    tol_t = tol_dx + quiet(torch_gap, case, dyv, ys, ty)
    within(dx, tdx, tol_t, "dx vs PyTorch")


# ------------------------------------------------------------------ bad arguments

# Not in tests/test_softmax.py, test_softmax_fp64.py, test_api_audit.py, test_fastpath.py,
# test_parity_shapes.py or test_bad_arguments_across_ops.py: each names the argument at
# fault. x: (2, 3, 4) float32.
BAD = {
    "float axis of a 0-d x": (lambda x: cl.softmax(x[0, 0, 0, ...], 0.0), "^axis: "),
    "bool axis": (lambda x: cl.log_softmax(x, True), "^axis: expected an int"),
    "backward axis out of range": (
        lambda x: cl.softmax_backward(x, x, -4), "^axis: -4 is out of range"),
    "backward axis and mode": (
        lambda x: cl.log_softmax_backward(x, x, 1, mode="instance"), "^axis: give either"),
    "dtype an int type": (lambda x: cl.softmax(x, 1, dtype=np.int32), "^dtype: expected"),
    "dtype a torch int": (lambda x: cl.log_softmax(x, 1, dtype=torch.int64), "^dtype: expected"),
    "mode of a 1-D x": (lambda x: cl.softmax(x[0, 0], mode="channel"), "^x: mode 'channel'"),
    "out of x's dtype with dtype=": (
        lambda x: cl.softmax(x, 1, dtype=np.float64, out=np.empty(x.shape, np.float32)),
        "^out: expected dtype"),
    "alpha a bool": (lambda x: cl.softmax(x, alpha=True), "^alpha: expected a real number"),
    "backward y of ints": (
        lambda x: cl.softmax_backward(x.astype(np.int32), x.astype(np.int32)), "^y: "),
    "backward out of another shape": (
        lambda x: cl.log_softmax_backward(x, x, 1, out=np.empty((2, 3), np.float32)),
        "^out: expected shape"),
    "plan alpha inf": (
        lambda x: cl.softmax_plan(x.shape, 1, alpha=math.inf, backend="cpu"), "^alpha: "),
    "plan algorithm None": (
        lambda x: cl.softmax_plan(x.shape, algorithm=None, backend="cpu"), "^algorithm: "),
    "plan mode of a 1-D shape": (
        lambda x: cl.softmax_plan((5,), mode="instance", backend="cpu"), "^x: mode 'instance'"),
    "plan called with another dtype": (
        lambda x: cl.softmax_plan(x.shape, 1, backend="cpu")(x.astype(np.float64)),
        "^x: this softmax plan is for float32"),
    "plan out of another shape": (
        lambda x: cl.softmax_plan(x.shape, 1, backend="cpu")(
            x, out=np.empty((2, 3, 3), np.float32)), "^out: expected shape"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(BAD))
def test_bad_arguments_name_the_argument(name: str) -> None:
    call, match = BAD[name]
    x = np.random.default_rng(3).standard_normal((2, 3, 4)).astype(np.float32)
    keep = snapshot(x)
    with pytest.raises(BadParamError, match=match):
        call(x)
    assert_untouched((x,), keep)
