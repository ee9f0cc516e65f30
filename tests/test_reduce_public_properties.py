"""Property tests (hypothesis) of the PUBLIC ``reduce_tensor``: drawn problems, tolerances and
what is checked as in tests/test_tensor_ops_public_properties.py's docstring (its
reductions' paragraphs); shared cases and checks in tests/tensor_ops_public_support.py.
"""

from __future__ import annotations

import dataclasses
import warnings
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
    snapshot,
    with_examples,
    xp_of,
)
from tensor_ops_public_support import (  # noqa: E402
    HYPO,
    K_BLEND,
    as_view,
    close,
    exact,
    np_dtype,
    shapes,
    values,
)

import cudnnlite as cl  # noqa: E402
from cudnnlite.errors import BadParamError  # noqa: E402
from cudnnlite.reference import tensor as rt  # noqa: E402
from cudnnlite.testing import ACCUMULATION_EPS, to_backend, to_numpy  # noqa: E402

# ------------------------------------------------------------------ reduce_tensor


@dataclasses.dataclass(frozen=True)
class ReduceCase:
    """reduce_tensor(x, op, axes, keepdims=, return_indices=, alpha=, beta=, out=,
    nan_propagation=); axes as passed (None, an int, a tuple or a list)."""

    op: str
    dtype: str
    shape: tuple
    axes: Any
    keepdims: bool = False
    indices: bool = False
    nan_propagation: bool = True
    alpha: float = 1.0
    beta: float = 0.0
    values: str = "normal"
    out: str = "none"
    view: str = "none"
    seed: int = 0

    @property
    def red(self) -> tuple[int, ...]:
        nd = len(self.shape)
        if self.axes is None or nd == 0:
            return tuple(range(nd))
        items = (self.axes,) if isinstance(self.axes, int) else self.axes
        return tuple(sorted(a % nd for a in items))

    @property
    def count(self) -> int:
        return int(np.prod([self.shape[d] for d in self.red], dtype=np.int64))

    @property
    def out_shape(self) -> tuple:
        if self.keepdims:
            return tuple(1 if d in self.red else s for d, s in enumerate(self.shape))
        return tuple(s for d, s in enumerate(self.shape) if d not in self.red)


ARG_OPS = ("min", "max", "amax")
PRODUCTS = ("mul", "mul_no_zeros")


@st.composite
def reduce_cases(draw: st.DrawFn) -> ReduceCase:
    if draw(st.integers(0, 4)) == 0:
        # long rows: the block kernel (>= 4096 reduced elements) and the two-pass ones
        # (few outputs: lanes along a reduced row, threads along a kept one)
        long = draw(st.sampled_from((300, 4500, 8200)))
        shape = draw(st.sampled_from(((2, long), (long, 3), (long, 40), (3, 2, long))))
    else:
        shape = draw(shapes(sizes=(1, 1, 2, 3, 5, 7)))
    nd = len(shape)
    red = sorted(draw(st.sets(st.integers(0, max(nd - 1, 0)), max_size=nd)))
    form = draw(st.sampled_from(("tuple", "list", "int", "none")))
    axes: Any = tuple(a - nd if draw(st.booleans()) else a for a in red)
    if form == "list":
        axes = list(axes)
    elif form == "int" and len(red) == 1:
        axes = axes[0]
    elif form == "none" and len(red) == nd:
        axes = None
    op = draw(st.sampled_from(cl.REDUCE_OPS))
    beta = draw(st.sampled_from((0.0, 0.0, 1.0, -0.5)))
    outs = ("fresh", "strided") if beta else ("none", "none", "fresh", "strided")
    return ReduceCase(op, draw(st.sampled_from(DTYPES)), shape, axes, draw(st.booleans()),
                      op in ARG_OPS and draw(st.booleans()),
                      op not in ARG_OPS or draw(st.booleans()),
                      draw(st.sampled_from((1.0, 1.0, -1.0, 0.1, 2.0))), beta,
                      draw(st.sampled_from(("normal", "ties", "special"))),
                      draw(st.sampled_from(outs)),
                      draw(st.sampled_from(("none", "reversed", "order"))),
                      draw(st.integers(0, 2**16)))  # fmt: skip


R = ReduceCase
# Edge cases: every axis of a 0-d x (axis 0 / -1 / None: the element), ties across the
# reduced axes (the first index), NaN first (propagating) or skipped, an all-NaN row
# without propagation, empty reduced dims (sum 0, mul 1, min refused), an empty output,
# no axis at all, keepdims with a strided out and blending, long rows on the block and
# split kernels, products with zeros.
REDUCE_EDGE = (
    R("sum", "float32", (), 0, out="fresh"),
    R("max", "float64", (), -1, indices=True),
    R("amax", "float32", (3, 4, 5), (0, -1), True, True, values="ties"),
    R("min", "float16", (2, 7, 3), [1], indices=True, values="special"),
    R("max", "float32", (2, 7, 3), (1, 2), indices=True, nan_propagation=False,
      values="special", out="strided"),
    R("sum", "bfloat16", (3, 0, 2), (1,), True, out="strided"),
    R("mul", "float32", (3, 0, 2), (0, 1), alpha=2.0, beta=1.0, out="fresh"),
    R("min", "float32", (3, 0, 2), 1),  # refused: the min of no element
    R("norm2", "float64", (0, 3), (1,), True),  # no output
    R("avg", "float32", (2, 3), (), alpha=0.1, beta=-0.5, out="fresh"),
    R("norm1", "float16", (2, 8200), (1,), True, alpha=-1.0, beta=1.0, out="strided"),
    R("amax", "float32", (4500, 40), (0,), indices=True, view="reversed"),
    R("mul_no_zeros", "float64", (3, 2, 300), None, values="ties"),
    R("max", "float32", (2, 4), 1, indices=True, nan_propagation=False, values="nan"),
    R("amax", "float16", (3, 4), (0, 1), indices=True, values="nan", out="fresh"),
)  # fmt: skip


def reduce_values(rng: np.random.Generator, case: ReduceCase) -> np.ndarray:
    """values(), but for the products: +-exp(N(0, 1/2 / sqrt(n))), so that a product of n
    of them stays near 1 (no overflow or subnormal on any dtype), and a fifth zeros; ties
    -1, 0 and 1 (a product of 2s overflows float16)."""
    if case.op not in PRODUCTS or case.values == "nan":
        return values(rng, case.shape, case.dtype, case.values)
    if case.values == "ties":
        return rng.integers(-1, 2, size=case.shape).astype(np_dtype(case.dtype))
    n = max(case.count, 1)
    mag = np.exp(rng.standard_normal(case.shape) * (0.5 / np.sqrt(n)))
    a = np.where(rng.integers(0, 2, case.shape) == 0, -mag, mag)
    a[rng.integers(0, 5, case.shape) == 0] = 0.0
    if case.values == "special":
        a[rng.integers(0, 15, case.shape) == 0] = np.nan
    return a.astype(np_dtype(case.dtype))


def reduce_no_nan(case: ReduceCase, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(values, indices) of min / max / amax with nan_propagation=False (NumPy's nanmin /
    nanmax): the first element of the best number; a range of NaN only: NaN, index 0."""
    kept = [d for d in range(x.ndim) if d not in case.red]
    flat = x.transpose(*kept, *case.red).reshape(*[x.shape[d] for d in kept], case.count)
    v = np.abs(flat) if case.op == "amax" else flat
    nan = np.isnan(v)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # (All-NaN slice)
        best = np.nanmin(v, -1) if case.op == "min" else np.nanmax(v, -1)
    idx = np.argmax((v == best[..., None]) & ~nan, axis=-1)
    return best.reshape(case.out_shape), idx.reshape(case.out_shape)


def reduce_torch(case: ReduceCase, x: np.ndarray) -> tuple[np.ndarray, np.ndarray | None]:
    """PyTorch's float64 reduction over case.red (at least one axis: PyTorch's dim=()
    reduces everything) and, for min / max / amax, its argmin / argmax of the reduced
    elements flattened in C order."""
    t, dims, kd, op = torch.from_numpy(x), case.red, case.keepdims, case.op
    kept = [d for d in range(x.ndim) if d not in dims]
    flat = t.permute(*kept, *dims).reshape(*[x.shape[d] for d in kept], case.count)
    norm = torch.linalg.vector_norm
    if op in ARG_OPS:
        src = t.abs() if op == "amax" else t
        v = src.amin(dims, kd) if op == "min" else src.amax(dims, kd)
        f = flat.abs() if op == "amax" else flat
        i = f.argmin(-1) if op == "min" else f.argmax(-1)
        return v.numpy(), i.reshape(case.out_shape).numpy()
    if op in PRODUCTS:
        f = torch.where(flat == 0, 1.0, flat) if op == "mul_no_zeros" else flat
        return f.prod(-1).reshape(case.out_shape).numpy(), None
    fn = {"sum": lambda: t.sum(dims, kd), "avg": lambda: t.mean(dims, kd),
          "norm1": lambda: norm(t, 1, dims, kd), "norm2": lambda: norm(t, 2, dims, kd)}  # fmt: skip
    return fn[op]().numpy(), None


def reduce_bound(case: ReduceCase, x: np.ndarray, v: np.ndarray, prior: np.ndarray,
                 want: np.ndarray) -> np.ndarray:  # fmt: skip
    """The module docstring's bound: the reduction's own error, then the blend's."""
    s, n = SHORT[case.dtype], case.count
    ua = ACCUMULATION_EPS[s]
    with np.errstate(invalid="ignore", over="ignore"):
        if case.op in ARG_OPS:
            err = np.zeros_like(v)
        elif case.op in ("sum", "avg", "norm1"):
            mag, _ = rt.reduce_tensor(np.abs(x), "sum", case.red, case.keepdims)
            err = (n + 32) * ua * mag / (n if case.op == "avg" and n else 1) + ua * np.abs(v)
        else:  # norm2, mul, mul_no_zeros: relative
            err = (n + 34) * ua * np.abs(v)
        blend = np.abs(case.alpha * v) + (np.abs(case.beta * prior) if case.beta else 0.0)
        return (abs(case.alpha) * err + K_BLEND * ua * blend + OUT_ROUNDING[s] * np.abs(want)
                + SUBNORMAL_STEP[s])  # fmt: skip


@HYPO
@with_examples(REDUCE_EDGE)
@given(case=reduce_cases())
def test_reduce_tensor_matches_pytorch(backend: str, case: ReduceCase) -> None:
    rng = np.random.default_rng(case.seed)
    x = reduce_values(rng, case)
    xb = as_view(to_backend(x, backend), case.view)
    out, buf = make_out(backend, case.out, case.out_shape, np_dtype(case.dtype))
    prior = values(rng, case.out_shape, case.dtype, "normal")
    if case.beta:
        out[...] = xp_of(backend).asarray(prior)
    keep = snapshot(xb)

    def call() -> Any:
        return cl.reduce_tensor(xb, case.op, case.axes, keepdims=case.keepdims,
                                return_indices=case.indices, alpha=case.alpha, beta=case.beta,
                                out=out, nan_propagation=case.nan_propagation)  # fmt: skip

    if case.count == 0 and case.op in ("min", "max", "amax", "avg"):
        with pytest.raises(BadParamError, match="x: reducing zero elements"):
            call()
        assert_untouched((xb,), keep)
        return
    got = call()
    got, ind = got if case.indices else (got, None)
    assert_out_honoured(got, out, buf)
    assert_untouched((xb,), keep)
    assert got.dtype == x.dtype and got.shape == case.out_shape

    x64, c64 = x.astype(np.float64), prior.astype(np.float64)
    tv = ti = None
    with np.errstate(invalid="ignore", over="ignore"):
        if case.op in ARG_OPS and not case.nan_propagation:  # (PyTorch has no nanmax)
            v, vi = reduce_no_nan(case, x64)
        else:
            v, vi = rt.reduce_tensor(x64, case.op, case.axes, case.keepdims)
            if case.red and case.count:  # (PyTorch's dim=() is every dim)
                tv, ti = reduce_torch(case, x64)
    if ti is not None:
        np.testing.assert_array_equal(ti, vi, err_msg="PyTorch's vs the reference's indices")
    if ind is not None:
        assert ind.dtype == np.int64 and ind.shape == case.out_shape
        np.testing.assert_array_equal(to_numpy(ind), vi, err_msg="indices")

    def blend(r: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", over="ignore"):
            return case.alpha * r + (case.beta * c64 if case.beta else 0.0)

    want = blend(v)
    if case.op in ARG_OPS and case.alpha == 1.0 and not case.beta:
        exact(got, want, f"{case.op}: the element itself")
        if tv is not None:
            exact(got, tv, f"{case.op} vs PyTorch")
        return
    bound = reduce_bound(case, x64, v, c64, want)
    close(got, want, bound, f"{case.op} over {case.red} vs the reference")
    if tv is not None:
        close(got, blend(tv), bound, f"{case.op} over {case.red} vs PyTorch")
