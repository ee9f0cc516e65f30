"""Cases, values, bounds and checks shared by the tensor-operation property tests
(tests/test_tensor_ops_public_properties.py, whose docstring derives the tolerances, and
tests/test_reduce_public_properties.py)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
torch = pytest.importorskip("torch")
from hypothesis import HealthCheck, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from property_support import (  # noqa: E402
    OUT_ROUNDING,
    assert_within,
    other_order_view,
    xp_of,
)

from cudnnlite import dtypes  # noqa: E402
from cudnnlite.testing import to_numpy  # noqa: E402

# A call is one launch of a few hundred elements (under 1 ms warm on the emulator) and the
# tensor family's kernels are one elementwise and one reduce module per dtype, built once
# (the same modules tests/test_tensor_ops.py builds): the profile's example count stands.
HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])

K_ELEM = 8  # roundings of an elementwise op with blending, and headroom (docstring)
K_BLEND = 3  # alpha * v, beta rounded, the fma with beta * c
# alpha / beta as users pass them: 0, +-1, powers of two, numbers float32 cannot hold
SCALARS = (0.0, 1.0, -1.0, 0.5, 2.0, 0.1, -1 / 3, 1.7)
# storage types a conversion into ``dst`` loses nothing from
LOSSLESS = {("fp16", "fp32"), ("fp16", "fp64"), ("bf16", "fp32"), ("bf16", "fp64"),
            ("fp32", "fp64")}  # fmt: skip


def np_dtype(name: str) -> np.dtype:
    return dtypes.BFLOAT16.numpy if name == "bfloat16" else np.dtype(name)


def values(rng: np.random.Generator, shape: tuple[int, ...], dtype: str, kind: str) -> np.ndarray:
    """Values of ``dtype``: "normal" (float64 keeps its bits below float32's mantissa, which
    a float32 path would drop), "ties" (small ints, zeros) or "special" (a fifth NaN /
    +inf / -inf)."""
    dt = np_dtype(dtype)
    if kind == "ties":
        return rng.integers(-2, 3, size=shape).astype(dt)
    if kind == "nan":  # (an example's: rows of NaN only)
        return np.full(shape, np.nan, dt)
    a = rng.standard_normal(shape)
    a = a if dt == np.float64 else a.astype(np.float32).astype(dt)
    if kind == "special":
        pick = rng.integers(0, 15, size=shape)
        a[pick == 0], a[pick == 1], a[pick == 2] = np.nan, np.inf, -np.inf
    return a


def f64(a: Any) -> np.ndarray:
    return to_numpy(a).astype(np.float64)


def as_view(xb: Any, kind: str) -> Any:
    """xb's values as a view of another memory: "reversed" (negative strides along axis
    0), "order" (axis 0 innermost in memory, as channels-last); "none": xb."""
    if kind == "none" or xb.ndim == 0:
        return xb
    xp = xp_of(xb)
    if kind == "reversed":
        return xp.flip(xp.ascontiguousarray(xp.flip(xb, 0)), 0)
    return other_order_view(xb, 0)


def u_store(short: str, wide: bool) -> float:
    """The store's rounding relative to |want|: fp16 / bf16 always; fp32 when the
    arithmetic was double (a conversion from float64)."""
    return 2.0**-24 if short == "fp32" and wide else OUT_ROUNDING[short]


def close(got: Any, want: np.ndarray, bound: Any, what: str) -> None:
    """assert_within, with +-inf in want matched exactly (|inf - inf| is NaN to it)."""
    g = f64(got)
    want = np.asarray(want, np.float64)
    assert g.shape == want.shape, f"{what}: shape {g.shape}, expected {want.shape}"
    inf = np.isinf(want)
    np.testing.assert_array_equal(g[inf], want[inf], err_msg=f"{what}: +-inf")
    bound = np.where(inf, 0.0, np.broadcast_to(bound, want.shape))
    assert_within(np.where(inf, 0.0, g), np.where(inf, 0.0, want), bound, what)


def exact(got: Any, want: np.ndarray, what: str) -> None:
    g = to_numpy(got)
    assert g.shape == np.shape(want), f"{what}: shape {g.shape}, expected {np.shape(want)}"
    np.testing.assert_array_equal(g.astype(np.float64), want, err_msg=what)  # NaN == NaN


@st.composite
def shapes(draw: st.DrawFn, max_dims: int = 4, sizes: tuple = (1, 1, 2, 3, 4, 5, 7, 8)) -> tuple:
    """0-d to max_dims dims of sizes with 1s and primes; now and then an empty dim."""
    nd = draw(st.integers(0, max_dims))
    shape = [draw(st.sampled_from(sizes)) for _ in range(nd)]
    if nd and draw(st.integers(0, 9)) == 0:
        shape[draw(st.integers(0, nd - 1))] = 0
    return tuple(shape)


def broadcast_operand(draw: st.DrawFn, shape: tuple) -> tuple:
    """A shape broadcasting to ``shape``: leading dims dropped, others 1 or kept."""
    lead = draw(st.integers(0, len(shape)))
    return tuple(1 if draw(st.integers(0, 2)) == 0 else s for s in shape[lead:])
