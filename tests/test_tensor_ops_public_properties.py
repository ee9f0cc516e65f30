"""Property tests (hypothesis) of the PUBLIC tensor operations, as a user calls them:
``op_tensor`` (every op of OP_TENSOR_OPS, both NaN modes), ``maximum`` / ``minimum``,
``add_tensor``, ``scale_tensor``, ``set_tensor``, ``transform_tensor``, ``nchw_to_nhwc``
/ ``nhwc_to_nchw`` and ``reduce_tensor`` (every op of REDUCE_OPS, indices, keepdims),
against PyTorch CPU (float64 on the same values: its semantics without its rounding;
``torch.add/mul/minimum/maximum/fmin/fmax/sqrt``, ``sum/mean/amax/amin/argmax/argmin/
prod/linalg.vector_norm`` over dims with keepdim) and the float64 reference
(cudnnlite.reference.tensor), on every backend; reduce_tensor's tests are in
tests/test_reduce_public_properties.py, the shared cases in tests/tensor_ops_public_support.py.

Drawn: float32, float16, bfloat16 (with ml_dtypes) and float64; 0-d to 4-d shapes with
1s, primes and empty dims; operands broadcast the NumPy way (size-1 dims, fewer dims, a
and b both), cuDNN's blending ``op(alpha1 a, alpha2 b) + beta c`` / ``alpha a + beta c``
with alpha / beta among 0, +-1, 0.5 and numbers float32 cannot hold (0.1, -1/3); beta = 0
over a NaN-filled out (cuDNN's rule, the ops' docstrings: out is then not read); values
normal (float64 with bits float32 would drop), with ties (small ints) or special (a
fifth NaN / +inf / -inf); inputs as views (reversed, in the other memory order); ``out=``
absent, fresh, strided (its gaps must stay NaN) or the input itself (in place);
reductions over every axis subset (as None, an int, a tuple or a list, negative axes
too), with keepdims, the indices of min / max / amax (the first occurrence, as NumPy's
and PyTorch's argmax; NaN first), both NaN modes, and long rows that take the block and
split (two-pass) kernels; layout transforms between every pair of dtypes with out in
either memory order. Every call leaves its inputs as they were; an out sharing memory
with an input reads the input as it was (bit for bit the call on copies); bad arguments
raise BadParamError naming the argument.

Tolerances, per element, for arithmetic of unit roundoff ua (ACCUMULATION_EPS: 2^-24 for
the float32 arithmetic of fp32 / fp16 / bf16; 2 * 2^-53 for float64, whose reference and
PyTorch round in double too), mag the same expression on |operands|:
  - elementwise (op_tensor, add_tensor, transform_tensor): alpha1 and alpha2 rounded to
    float32, two products, the op, beta rounded and the fma with beta * c: at most 7
    roundings relative to mag (``K_ELEM`` = 8 ua mag);
  - reductions of n elements: a float32 (or double) sum in any order (lanes, the shuffle
    tree, split partials) errs by at most (n + 32) ua sum|x| (``check_reduce`` of
    tests/test_tensor_ops.py); avg divides once, norm2 takes a square root of a sum of
    positive terms ((n + 34) ua |v|), mul / mul_no_zeros are (n + 32) ua relative;
    min / max / amax pick a stored element: exact (indices exact always); then
    alpha * v + beta * c: 3 more roundings (K_BLEND) of |alpha v| + |beta c|;
  - plus one rounding to the storage type (fp16 2^-11, bf16 2^-8; fp32 2^-24 only when
    the arithmetic was double, a conversion from float64) of |want|, and the storage
    type's subnormal spacing (fp16 results near 0 round absolutely).
  - exact: scale_tensor (one product of float32(alpha), rounded once: modelled in NumPy
    bit for bit), set_tensor, maximum / minimum, conversions (one rounding, modelled),
    layout round trips, and every min / max / amax with alpha 1 and beta 0.
A wrong element, broadcast index, alpha or op moves a result by O(|value|): 2^21 / n
times the float32 bound.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
torch = pytest.importorskip("torch")
from hypothesis import given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from property_support import (  # noqa: E402
    DTYPES,
    OUT_ROUNDING,
    SHORT,
    SUBNORMAL_STEP,
    assert_out_honoured,
    assert_untouched,
    make_out,
    other_order_view,
    snapshot,
    with_examples,
    xp_of,
)
from tensor_ops_public_support import (  # noqa: E402
    HYPO,
    K_ELEM,
    LOSSLESS,
    SCALARS,
    as_view,
    broadcast_operand,
    close,
    exact,
    f64,
    np_dtype,
    shapes,
    u_store,
    values,
)
from test_tensor_ops import converted  # noqa: E402  (one rounding to the target type)

import cudnnlite as cl  # noqa: E402
from cudnnlite.errors import BadParamError  # noqa: E402
from cudnnlite.reference import tensor as rt  # noqa: E402
from cudnnlite.testing import ACCUMULATION_EPS, to_backend, to_numpy  # noqa: E402

# ------------------------------------------------------------------ op_tensor


@dataclasses.dataclass(frozen=True)
class OpCase:
    """op_tensor(op, a, b, alpha1=, alpha2=, beta=, out=, nan_propagation=); api "maximum"
    / "minimum" calls those (alphas 1, beta 0). out: OUT_KINDS or "inplace" (out is a,
    whose shape is the result's)."""

    op: str
    dtype: str
    a_shape: tuple
    b_shape: tuple | None
    alpha1: float = 1.0
    alpha2: float = 1.0
    beta: float = 0.0
    values: str = "normal"
    nan_propagation: bool = True
    api: str = "op_tensor"
    out: str = "none"
    view: str = "none"
    seed: int = 0

    @property
    def shape(self) -> tuple:
        if self.b_shape is None:
            return self.a_shape
        return tuple(np.broadcast_shapes(self.a_shape, self.b_shape))


@st.composite
def op_cases(draw: st.DrawFn) -> OpCase:
    op = draw(st.sampled_from(cl.OP_TENSOR_OPS))
    shape = draw(shapes())
    unary = op in ("sqrt", "not")
    a_shape = shape if unary or draw(st.booleans()) else broadcast_operand(draw, shape)
    b_shape = None if unary else broadcast_operand(draw, shape)
    api = "op_tensor"
    if op in ("min", "max") and draw(st.integers(0, 2)) == 0:
        api = {"min": "minimum", "max": "maximum"}[op]
    scalar = st.sampled_from(SCALARS)
    alpha1, alpha2, beta = (1.0, 1.0, 0.0) if api != "op_tensor" else (
        draw(scalar), draw(scalar), draw(st.sampled_from((0.0, 0.0, 1.0, -0.5, 0.1))))  # fmt: skip
    case = OpCase(op, draw(st.sampled_from(DTYPES)), a_shape, b_shape, alpha1, alpha2, beta,
                  values=draw(st.sampled_from(("normal", "ties", "special"))),
                  nan_propagation=draw(st.booleans()), api=api,
                  view=draw(st.sampled_from(("none", "none", "reversed", "order"))),
                  seed=draw(st.integers(0, 2**16)))  # fmt: skip
    kinds = ("fresh", "strided", "inplace") if beta else ("none", "none", "fresh", "strided",
                                                          "inplace")  # fmt: skip
    out = draw(st.sampled_from(kinds))
    if out == "inplace" and a_shape != case.shape:
        out = "fresh"
    return dataclasses.replace(case, out=out)


def op_torch(case: OpCase, a: np.ndarray, b: np.ndarray | None, prior: Any) -> np.ndarray:
    """PyTorch's float64 ``op(alpha1 a, alpha2 b) + beta c``."""
    x = case.alpha1 * torch.from_numpy(a)
    if case.op == "sqrt":
        r = torch.sqrt(x)
    elif case.op == "not":
        r = 1.0 - x
    else:
        y = case.alpha2 * torch.from_numpy(b)
        fn = {"add": torch.add, "mul": torch.mul, "min": torch.minimum, "max": torch.maximum}
        if not case.nan_propagation:
            fn.update(min=torch.fmin, max=torch.fmax)
        r = fn[case.op](x, y)
    if case.beta:
        r = r + case.beta * torch.from_numpy(prior)
    return r.numpy()


def op_bound(case: OpCase, a: np.ndarray, b: np.ndarray | None, prior: Any,
             want: np.ndarray) -> np.ndarray:  # fmt: skip
    """K_ELEM ua mag + the store's rounding + a subnormal step (module docstring)."""
    s = SHORT[case.dtype]
    with np.errstate(invalid="ignore", over="ignore"):
        x = np.abs(case.alpha1 * a)
        if case.op == "sqrt":
            mag = np.sqrt(x)
        elif case.op == "not":
            mag = 1.0 + x
        else:
            y = np.abs(case.alpha2 * b)
            if case.op in ("min", "max"):  # the pick (a flip between near ties errs as much)
                mag = np.abs(rt.op_tensor(case.op, a, b, case.alpha1, case.alpha2,
                                          nan_propagation=case.nan_propagation))  # fmt: skip
            else:
                mag = x + y if case.op == "add" else x * y
        if case.beta:
            mag = mag + np.abs(case.beta * prior)
        return (K_ELEM * ACCUMULATION_EPS[s] * mag + OUT_ROUNDING[s] * np.abs(want)
                + SUBNORMAL_STEP[s])  # fmt: skip


# Edge cases every run starts with: beta 0 over a NaN-filled out; 0-d operands; an empty
# dim; a and b both broadcasting; a per-channel a over a full b (the bias kernel, NCHW
# and NHWC) and same-shape contiguous operands (the 16-byte kernel); NaN in min / max
# both ways; sqrt of negatives; in place with beta; strided out; maximum / minimum.
OP_EDGE = (
    OpCase("add", "float32", (2, 3), (3,), 0.5, 2.0, 0.0, out="fresh"),
    OpCase("mul", "float32", (), (), -1 / 3, 0.1, 0.0, out="fresh"),
    OpCase("max", "float64", (), (2, 3), 2.0, 1.0, values="special"),
    OpCase("add", "float16", (2, 0, 3), (1, 3), out="strided"),
    OpCase("min", "float32", (3, 1), (1, 4), -1.0, 0.5, values="special", nan_propagation=False),
    OpCase("add", "float32", (1, 8, 1, 1), (2, 8, 3, 4), 0.1, 1.7, 1.0, out="fresh"),
    OpCase("max", "bfloat16", (2, 3, 8), (8,), -1.0, 0.5, values="special"),  # NHWC bias
    OpCase("mul", "float16", (2, 8, 3, 4), (2, 8, 3, 4), 1.0, -1.0, -0.5, out="inplace"),
    OpCase("sqrt", "float64", (3, 5), None, -1.0, values="special", view="reversed"),
    OpCase("not", "bfloat16", (2, 7), None, 0.1, beta=0.1, out="strided", view="order"),
    OpCase("max", "float32", (4, 5), (5,), api="maximum", values="special", out="inplace"),
    OpCase("min", "bfloat16", (2, 3), (2, 1), api="minimum", values="ties",
           nan_propagation=False, out="fresh"),
    OpCase("max", "float16", (7,), (7,), 0.0, 1.0, values="special"),  # 0 * inf in a
)  # fmt: skip


@HYPO
@with_examples(OP_EDGE)
@given(case=op_cases())
def test_op_tensor_blends_as_cudnn(backend: str, case: OpCase) -> None:
    rng = np.random.default_rng(case.seed)
    a = values(rng, case.a_shape, case.dtype, case.values)
    b = None if case.b_shape is None else values(rng, case.b_shape, case.dtype, case.values)
    ab = as_view(to_backend(a, backend), case.view)
    bb = None if b is None else to_backend(b, backend)
    xp = xp_of(backend)
    prior = values(rng, case.shape, case.dtype, "normal")
    if case.out == "inplace":
        out, buf = ab, None
        prior = a
    else:
        out, buf = make_out(backend, case.out, case.shape, np_dtype(case.dtype))
        if case.beta:  # (beta 0: out stays NaN, which must not be read)
            out[...] = xp.asarray(prior)
    inputs = (ab, bb) if case.out != "inplace" else (bb,)
    keep = snapshot(*inputs)
    if case.api == "op_tensor":
        got = cl.op_tensor(case.op, ab, bb, alpha1=case.alpha1, alpha2=case.alpha2,
                           beta=case.beta, out=out,
                           nan_propagation=case.nan_propagation)  # fmt: skip
    else:
        fn = cl.maximum if case.api == "maximum" else cl.minimum
        got = fn(ab, bb, nan_propagation=case.nan_propagation, out=out)
    if case.out == "inplace":
        assert got is ab, "out= given: the result must be out itself"
    else:
        assert_out_honoured(got, out, buf)
    assert got.dtype == a.dtype and got.shape == case.shape
    assert_untouched(inputs, keep)

    a64, b64 = a.astype(np.float64), None if b is None else b.astype(np.float64)
    c64 = prior.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        want = rt.op_tensor(case.op, a64, b64, case.alpha1, case.alpha2, case.beta, c64,
                            nan_propagation=case.nan_propagation)  # fmt: skip
    want_t = op_torch(case, a64, b64, c64)
    if case.api != "op_tensor":  # a pick of a stored element: exact, as torch.maximum
        exact(got, want_t, f"{case.api} vs PyTorch")
        exact(got, want, f"{case.api} vs the reference")
        return
    bound = op_bound(case, a64, b64, c64, want)
    close(got, want, bound, f"{case.op} vs the reference")
    close(got, want_t, bound, f"{case.op} vs PyTorch")


# ------------------------------------------------------------------ in-place ops


@dataclasses.dataclass(frozen=True)
class InPlaceCase:
    """add_tensor(a, c, alpha=, beta=) on c (out-style kind "fresh" or "strided", or a
    view "reversed" / "order"), then scale_tensor(c, scale) and set_tensor(c[..., ::2],
    value) on it."""

    dtype: str
    c_shape: tuple
    a_shape: tuple
    alpha: float = 1.0
    beta: float = 1.0
    scale: float = 2.0
    value: float = 0.1
    values: str = "normal"
    c_kind: str = "fresh"
    seed: int = 0


@st.composite
def in_place_cases(draw: st.DrawFn) -> InPlaceCase:
    shape = draw(shapes())
    scalar = st.sampled_from(SCALARS)
    return InPlaceCase(draw(st.sampled_from(DTYPES)), shape, broadcast_operand(draw, shape),
                       draw(scalar), draw(st.sampled_from((0.0, 1.0, 1.0, -0.5, 0.1))),
                       draw(scalar), draw(st.sampled_from((0.1, -2.5, np.inf, np.nan, 1e39))),
                       draw(st.sampled_from(("normal", "ties", "special"))),
                       draw(st.sampled_from(("fresh", "strided", "reversed", "order"))),
                       draw(st.integers(0, 2**16)))  # fmt: skip


IN_PLACE_EDGE = (
    InPlaceCase("float32", (2, 5, 3, 3), (1, 5, 1, 1), 1.7, 0.0, c_kind="strided"),  # NaN c
    InPlaceCase("float16", (2, 3, 3, 8), (8,), -1 / 3, 0.5, 0.1, -2.5, c_kind="order"),
    InPlaceCase("float32", (3, 2, 12), (1, 1, 12), 2.0, 0.0, c_kind="fresh"),  # NHWC bias
    InPlaceCase("float64", (), (), 0.1, -0.5, 0.0, np.nan, "special", "fresh"),
    InPlaceCase("bfloat16", (3, 0, 2), (1, 2), 2.0, 1.0, -1.0, np.inf, c_kind="reversed"),
    InPlaceCase("float32", (7, 5), (7, 1), 0.0, 1.0, 1e-30, 1e39, "special"),  # 0 * inf
)  # fmt: skip


def c_buffer(case: InPlaceCase, backend: str, prior: np.ndarray) -> tuple[Any, Any]:
    """(c holding prior, NaN with beta 0; the NaN-filled buffer around a strided c or
    None)."""
    if case.c_kind in ("fresh", "strided"):
        c, buf = make_out(backend, case.c_kind, case.c_shape, np_dtype(case.dtype))
        c[...] = xp_of(backend).asarray(prior)
        buf = buf if buf is not c else None
    else:
        c, buf = as_view(to_backend(prior, backend), case.c_kind), None
    if not case.beta:
        c[...] = np.nan  # (beta 0: c must not be read)
    return c, buf


def scaled(y: np.ndarray, alpha: float, dtype: str) -> np.ndarray:
    """scale_tensor's result: float32(alpha) times y in float32, rounded once to y's type
    (float64: double, alpha exact)."""
    with np.errstate(over="ignore", invalid="ignore"):  # (0 * inf: NaN, as intended)
        if dtype == "float64":
            return y.astype(np.float64) * alpha
        return (np.float32(alpha) * y.astype(np.float32)).astype(np_dtype(dtype)).astype(
            np.float64)  # fmt: skip


@HYPO
@with_examples(IN_PLACE_EDGE)
@given(case=in_place_cases())
def test_add_scale_set_tensor_in_place(backend: str, case: InPlaceCase) -> None:
    rng = np.random.default_rng(case.seed)
    a = values(rng, case.a_shape, case.dtype, case.values)
    prior = values(rng, case.c_shape, case.dtype, case.values)
    ab = to_backend(a, backend)
    c, buf = c_buffer(case, backend, prior)
    keep = snapshot(ab)
    assert cl.add_tensor(ab, c, alpha=case.alpha, beta=case.beta) is c
    assert_out_honoured(c, c, buf)
    assert_untouched((ab,), keep)
    a64, c64 = a.astype(np.float64), prior.astype(np.float64)
    s = SHORT[case.dtype]
    with np.errstate(invalid="ignore", over="ignore"):
        want = rt.add_tensor(a64, c64, case.alpha, case.beta)  # beta 0: c not read
        t = case.alpha * torch.from_numpy(a64).expand(case.c_shape)
        want_t = (t + case.beta * torch.from_numpy(c64) if case.beta else t).numpy()
        mag = np.abs(case.alpha * a64) + (np.abs(case.beta * c64) if case.beta else 0.0)
        bound = K_ELEM * ACCUMULATION_EPS[s] * mag + OUT_ROUNDING[s] * np.abs(want)
    bound = bound + SUBNORMAL_STEP[s]
    close(c, want, bound, "add_tensor vs the reference")
    close(c, want_t, bound, "add_tensor vs PyTorch")

    before = to_numpy(c).copy()
    assert cl.scale_tensor(c, case.scale) is c
    exact(c, scaled(before, case.scale, case.dtype), "scale_tensor")
    assert_out_honoured(c, c, buf)

    before = f64(c)
    part = c[..., ::2] if c.ndim else c
    assert cl.set_tensor(part, case.value) is part
    with np.errstate(over="ignore"):  # (float32 numbers for the 32-bit arithmetic)
        v = case.value if s == "fp64" else np.float32(case.value)
    want_set = before.copy()
    every_other = (..., slice(None, None, 2)) if c.ndim else ...
    want_set[every_other] = np.asarray(v).astype(np_dtype(case.dtype)).astype(np.float64)
    exact(c, want_set, "set_tensor (every other element)")
    assert_out_honoured(c, c, buf)


# ------------------------------------------------------------------ transforms


@dataclasses.dataclass(frozen=True)
class TransformCase:
    """x (N, C, H, W) of ``src``, given as ``view``; nchw_to_nhwc to ``dst`` and back, then
    transform_tensor(x, out, alpha=, beta=) into ``dst`` with out "none", "fresh",
    "strided" or "nhwc" (an NCHW-shaped view of NHWC memory)."""

    shape: tuple
    src: str
    dst: str
    alpha: float = 1.0
    beta: float = 0.0
    values: str = "normal"
    view: str = "none"
    out: str = "none"
    seed: int = 0

    @property
    def dtype(self) -> str:  # (with_examples skips a dtype this machine lacks)
        return "bfloat16" if "bfloat16" in (self.src, self.dst) else self.src


@st.composite
def transform_cases(draw: st.DrawFn) -> TransformCase:
    # C and H * W of 4 or more take the tiled transpose; 33 leaves partial 32-wide tiles
    shape = (draw(st.sampled_from((0, 1, 2))), draw(st.sampled_from((1, 2, 3, 4, 5, 7, 33))),
             draw(st.sampled_from((1, 2, 3, 5))), draw(st.sampled_from((1, 2, 4, 7))))  # fmt: skip
    beta = draw(st.sampled_from((0.0, 0.0, 1.0, -0.5, 0.1)))
    outs = ("fresh", "strided", "nhwc") if beta else ("none", "fresh", "strided", "nhwc")
    return TransformCase(shape, draw(st.sampled_from(DTYPES)), draw(st.sampled_from(DTYPES)),
                         draw(st.sampled_from(SCALARS)), beta,
                         draw(st.sampled_from(("normal", "ties", "special"))),
                         draw(st.sampled_from(("none", "reversed", "order"))),
                         draw(st.sampled_from(outs)), draw(st.integers(0, 2**16)))  # fmt: skip


TRANSFORM_EDGE = (
    TransformCase((2, 33, 5, 7), "float32", "float16", 0.1, 0.0, out="nhwc"),  # tiled, NaN out
    TransformCase((1, 4, 1, 4), "float64", "bfloat16", -1 / 3, 0.5, "special", out="strided"),
    TransformCase((2, 3, 2, 2), "bfloat16", "float64", 1.0, 0.0, "special", "order", "fresh"),
    TransformCase((0, 5, 3, 4), "float16", "float32", 2.0, 1.0, out="nhwc"),
    TransformCase((2, 7, 3, 4), "float16", "float16", 1.7, 0.1, view="reversed", out="fresh"),
)  # fmt: skip


@HYPO
@with_examples(TRANSFORM_EDGE)
@given(case=transform_cases())
def test_transform_tensor_layouts_and_dtypes(backend: str, case: TransformCase) -> None:
    rng = np.random.default_rng(case.seed)
    x = values(rng, case.shape, case.src, case.values)
    xb = as_view(to_backend(x, backend), case.view)
    dst, s, d = np_dtype(case.dst), SHORT[case.src], SHORT[case.dst]
    keep = snapshot(xb)
    y = cl.nchw_to_nhwc(xb, dtype=dst)
    n, c, h, w = case.shape
    assert y.shape == (n, h, w, c) and y.dtype == dst and y.flags.c_contiguous
    exact(y, converted(x.transpose(0, 2, 3, 1), dst).astype(np.float64), "nchw_to_nhwc")
    exact(cl.nhwc_to_nchw(y), converted(x, dst).astype(np.float64), "NHWC -> NCHW round trip")
    back = cl.nhwc_to_nchw(y, dtype=x.dtype)
    assert back.dtype == x.dtype and back.flags.c_contiguous
    if s == d or (s, d) in LOSSLESS:
        exact(back, x.astype(np.float64), "round trip through a type holding every value")

    prior = values(rng, case.shape, case.dst, "normal")
    if case.out == "nhwc":
        out = other_order_view(to_backend(prior, backend), 1)
        if not case.beta:
            out[...] = np.nan
        buf = None
    else:
        out, buf = make_out(backend, case.out, case.shape, dst)
        if case.beta:
            out[...] = xp_of(backend).asarray(prior)
    got = cl.transform_tensor(xb, out, alpha=case.alpha, beta=case.beta,
                              dtype=dst if out is None else None)  # fmt: skip
    assert_out_honoured(got, out, buf)
    assert got.dtype == dst and got.shape == case.shape
    assert_untouched((xb,), keep)
    x64, c64 = x.astype(np.float64), prior.astype(np.float64)
    wide = "fp64" in (s, d)
    with np.errstate(invalid="ignore", over="ignore"):
        want = rt.transform_tensor(x64, case.alpha, case.beta, c64)
        want_t = case.alpha * torch.from_numpy(x64)
        want_t = (want_t + case.beta * torch.from_numpy(c64) if case.beta else want_t).numpy()
        mag = np.abs(case.alpha * x64) + (np.abs(case.beta * c64) if case.beta else 0.0)
        ua = ACCUMULATION_EPS["fp64" if wide else "fp32"]
        bound = K_ELEM * ua * mag + u_store(d, wide) * np.abs(want) + SUBNORMAL_STEP[d]
    close(got, want, bound, "transform_tensor vs the reference")
    close(got, want_t, bound, "transform_tensor vs PyTorch")


# ------------------------------------------------------------------ overlaps

# An out= (or add_tensor's c) sharing memory with an input other than as its very view:
# the input must be read as it was before the call (the ops copy it), as NumPy's ufuncs
# do. Each call runs with v = identity (out a view of an input's memory), then with v =
# copy (the same values, nothing shared); the results must agree bit for bit. (A shifted
# out of op_tensor: tests/test_tensor_ops.py.)
OVERLAPS = {
    "op_tensor out the transpose of a": lambda a, b, v: cl.op_tensor(
        "add", a, b, alpha1=0.5, out=v(a.T)),
    "op_tensor blending into a reversed a": lambda a, b, v: cl.op_tensor(
        "max", a, b, beta=0.5, out=v(a[::-1])),
    "op_tensor in place on a, b a row of a": lambda a, b, v: cl.op_tensor(
        "mul", a, v(a[:1]), beta=1.0, out=a),
    "maximum out reversed b": lambda a, b, v: cl.maximum(a, b, out=v(b[::-1])),
    "add_tensor a a column of c": lambda a, b, v: cl.add_tensor(v(a[:, :1]), a, alpha=2.0),
    # (a thread per output, in order on the emulator: output j writes an element output
    # j + 1 then reads; a non-contiguous out goes through a copy, so out is a row)
    "reduce_tensor out inside x": lambda a, b, v: cl.reduce_tensor(
        a[:, :40], "sum", 0, alpha=0.5, beta=1.0, out=v(a[1, 1:41])),
    "transform_tensor out the reversed x": lambda a, b, v: cl.transform_tensor(
        a, v(a[::-1]), alpha=-1.0, beta=0.5),
}  # fmt: skip


@pytest.mark.parametrize("name", list(OVERLAPS))
def test_overlapping_out_reads_inputs_as_they_were(backend: str, name: str) -> None:
    rng = np.random.default_rng(5)
    shape = (64, 41) if name.startswith("reduce") else (5, 5)
    a, b = (values(rng, shape, "float32", "normal") for _ in range(2))
    got = OVERLAPS[name](to_backend(a, backend), to_backend(b, backend), lambda x: x)
    want = OVERLAPS[name](to_backend(a, backend), to_backend(b, backend), lambda x: x.copy())
    np.testing.assert_array_equal(to_numpy(got), to_numpy(want), err_msg=name)


# ------------------------------------------------------------------ bad arguments


def _expanded(shape: tuple) -> np.ndarray:
    """A writable out whose rows share memory (a zero stride)."""
    row = np.zeros(shape[1:], np.float32)
    return np.lib.stride_tricks.as_strided(row, shape, (0, *row.strides), writeable=True)


def _read_only(shape: tuple) -> np.ndarray:
    a = np.zeros(shape, np.float32)
    a.flags.writeable = False
    return a


# Not in tests/test_tensor_ops*.py, test_bad_arguments_across_ops.py, test_api_audit.py,
# test_parity_*.py or test_interop.py: each names the argument at fault. x: (2, 3, 4, 5)
# float32.
BAD = {
    "add_tensor a with more dims than c": (
        lambda x: cl.add_tensor(x, x[0]), r"a: shape \(2, 3, 4, 5\) does not broadcast"),
    "add_tensor a wider than c's 1": (
        lambda x: cl.add_tensor(x[:, :1], x[:, :1, :, :1].copy()), "a: shape"),
    "add_tensor read-only c": (lambda x: cl.add_tensor(x, _read_only(x.shape)), "c: the array"),
    "add_tensor int c": (lambda x: cl.add_tensor(x, np.zeros(x.shape, np.int32)), "c"),
    "op_tensor out of a zero stride": (
        lambda x: cl.op_tensor("add", x, x, out=_expanded(x.shape)), "out: has a zero stride"),
    "op_tensor read-only out": (
        lambda x: cl.op_tensor("mul", x, x, out=_read_only(x.shape)), "out: the array"),
    "op_tensor out of the broadcast's operand shape": (
        lambda x: cl.op_tensor("add", x, x[:1], out=np.empty((1, 3, 4, 5), np.float32)),
        "out: expected shape"),
    "op_tensor infinite alpha1": (
        lambda x: cl.op_tensor("add", x, x, alpha1=np.inf), "alpha1: expected a finite"),
    "op_tensor bool alpha2": (lambda x: cl.op_tensor("add", x, x, alpha2=True), "alpha2"),
    "op_tensor not with b": (lambda x: cl.op_tensor("not", x, x), "b: op 'not' is unary"),
    "maximum without b": (lambda x: cl.maximum(x, None), "b: op 'max' needs"),
    "minimum b of another shape": (lambda x: cl.minimum(x, x[..., :2]), "b: shape"),
    "reduce out of a zero stride": (
        lambda x: cl.reduce_tensor(x, "sum", 1, out=_expanded((2, 4, 5))), "out: has a zero"),
    "reduce keepdims out without the 1s": (
        lambda x: cl.reduce_tensor(x, "max", (1, 3), keepdims=True,
                                   out=np.empty((2, 4), np.float32)), "out: expected shape"),
    "reduce blending without out": (
        lambda x: cl.reduce_tensor(x, "sum", 1, beta=0.5), "beta: blending"),
    "reduce bool axis": (lambda x: cl.reduce_tensor(x, "sum", (True,)), "axes: expected ints"),
    "reduce str alpha": (lambda x: cl.reduce_tensor(x, "avg", 1, alpha="2"), "alpha"),
    "reduce nan_propagation str": (
        lambda x: cl.reduce_tensor(x, "max", 1, nan_propagation="no"), "nan_propagation"),
    "transform blending without out": (
        lambda x: cl.transform_tensor(x, beta=1.0), "beta: blending"),
    "transform dtype other than out's": (
        lambda x: cl.transform_tensor(x, np.empty(x.shape, np.float16), dtype=np.float64),
        "dtype: .* differs from out's dtype"),
    "transform out of another shape": (
        lambda x: cl.transform_tensor(x, np.empty((2, 4, 5, 3), np.float32)),
        "out: expected shape"),
    "nhwc_to_nchw of 3 dims": (lambda x: cl.nhwc_to_nchw(x[0]), "x: expected a 4-d"),
    "scale_tensor None alpha": (lambda x: cl.scale_tensor(x.copy(), None), "alpha"),
}  # fmt: skip


@pytest.mark.parametrize("name", list(BAD))
def test_bad_arguments_name_the_argument(name: str) -> None:
    call, match = BAD[name]
    x = np.random.default_rng(3).standard_normal((2, 3, 4, 5)).astype(np.float32)
    keep = snapshot(x)
    with pytest.raises(BadParamError, match=match):
        call(x)
    assert_untouched((x,), keep)
