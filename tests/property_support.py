"""Helpers the property tests of the public functions share (convolution, normalization,
pooling, softmax, LRN, tensor operations, replays): the array module of a backend, views
in the other memory order, ``out=`` buffers whose gaps must stay untouched, input
snapshots, bitwise equality, quiet float64 references, the per-element bound check."""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from cudnnlite import dtypes
from cudnnlite.testing import to_numpy

# The storage types a property test draws (bfloat16 with ml_dtypes), their short names,
# one rounding to each (unit roundoff of the result's type; none for the types whose
# arithmetic is their own) and each type's subnormal spacing (absolute rounding near 0)
DTYPES = ("float32", "float16", "bfloat16", "float64") if dtypes.HAVE_BFLOAT16 else (
    "float32", "float16", "float64")  # fmt: skip
SHORT = {"float32": "fp32", "float16": "fp16", "bfloat16": "bf16", "float64": "fp64"}
OUT_ROUNDING = {"fp32": 0.0, "fp64": 0.0, "fp16": 2.0**-11, "bf16": 2.0**-8}
SUBNORMAL_STEP = {"fp32": 2.0**-149, "fp64": 2.0**-1074, "fp16": 2.0**-24, "bf16": 2.0**-133}

# How a test passes out=: not at all, a fresh NaN-filled array, or every other element of a
# larger NaN buffer (not contiguous: the result is copied in; the gaps must stay NaN)
OUT_KINDS = ("none", "fresh", "strided")


def xp_of(where: Any) -> Any:
    """The array module of a backend's name ("cpu", "cuda") or of an array."""
    on_host = where == "cpu" if isinstance(where, str) else isinstance(where, np.ndarray)
    if on_host:
        return np
    import cupy

    return cupy


def other_order_view(a: Any, axis: int) -> Any:
    """a with the same values, as a view of memory in the other layout's order (a
    channels-last buffer seen as channels-first, or the converse; ``axis``: a's channels)."""
    xp = xp_of(a)
    dst = 0 if axis == a.ndim - 1 else a.ndim - 1
    return xp.moveaxis(xp.ascontiguousarray(xp.moveaxis(a, axis, dst)), dst, axis)


def make_out(where: Any, kind: str, shape: tuple[int, ...], dtype: Any) -> tuple[Any, Any]:
    """(out, the buffer it lies in) on ``where`` (a backend's name or an array) for an
    OUT_KINDS kind (NaN-filled: an output left unwritten shows); a 0-d out is fresh."""
    xp = xp_of(where)
    if kind == "none":
        return None, None
    if kind == "fresh" or not shape:
        out = xp.full(shape, np.nan, dtype=dtype)
        return out, out
    big = xp.full((*shape[:-1], 2 * shape[-1]), np.nan, dtype=dtype)
    return big[..., ::2], big


def assert_out_honoured(result: Any, out: Any, big: Any) -> None:
    """The result is out itself, and a strided out's gaps are still NaN."""
    if out is None:
        return
    assert result is out, "out= given: the result must be out itself"
    if big is not None and big is not out:
        gaps = to_numpy(big)[..., 1::2].astype(np.float64)
        assert np.isnan(gaps).all(), "out's gaps were written"


def snapshot(*arrays: Any) -> list[np.ndarray | None]:
    """Host copies of the arrays (None kept), for :func:`assert_untouched`."""
    return [None if a is None else to_numpy(a).copy() for a in arrays]


def assert_untouched(arrays: tuple, before: list) -> None:
    """Each array still holds its snapshot, bit for bit (a NaN's payload and a zero's sign
    too)."""
    for i, (a, b) in enumerate(zip(arrays, before, strict=True)):
        if a is not None:
            same_bits(a, b, f"input {i} was modified")


def same_bits(a: Any, b: Any, what: str = "") -> None:
    """a and b (arrays of either backend) have the same shape, dtype and bits."""
    a, b = to_numpy(a), to_numpy(b)
    assert a.shape == b.shape and a.dtype == b.dtype, (
        f"{what}: {a.shape} {a.dtype} vs {b.shape} {b.dtype}"
    )
    assert np.ascontiguousarray(a).tobytes() == np.ascontiguousarray(b).tobytes(), what


def quiet(fn: Any, *args: Any, **kwargs: Any) -> Any:
    """A float64 reference computation with NumPy's warnings off (the mean of an empty
    batch, inf - inf in a +inf's row): RuntimeWarnings raised in cudnnlite.* are errors
    in this suite (pyproject.toml)."""
    with np.errstate(all="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return fn(*args, **kwargs)


def assert_within(got: Any, want: Any, bound: np.ndarray, what: str) -> None:
    """|got - want| <= bound where want is a number; NaN exactly where want has NaN."""
    g = to_numpy(got).astype(np.float64)
    want = np.asarray(want, np.float64)
    assert g.shape == want.shape, f"{what}: shape {g.shape}, expected {want.shape}"
    nan = np.isnan(want)
    leak = np.isnan(g) != nan
    if leak.any():
        i = tuple(np.argwhere(leak)[0])
        raise AssertionError(f"{what}: NaN pattern differs in {leak.sum()} of {leak.size}; "
                             f"first at {i}: got {g[i]}, expected {want[i]}")  # fmt: skip
    with np.errstate(invalid="ignore"):
        bad = ~(np.abs(g - want) <= bound) & ~nan
    if bad.any():
        i = tuple(np.argwhere(bad)[0])
        bound = np.broadcast_to(bound, want.shape)
        raise AssertionError(f"{what}: {bad.sum()} of {bad.size} off; first at {i}: got "
                             f"{g[i]}, expected {want[i]}, tolerance {bound[i]:.3g}")  # fmt: skip


def with_examples(edge: tuple, **fixed: Any) -> Any:
    """A decorator adding each case of ``edge`` (with the ``fixed`` arguments) as a
    hypothesis example, except cases of a dtype this machine lacks (bfloat16 without
    ml_dtypes: not in :data:`DTYPES`)."""
    from hypothesis import example

    def deco(fn: Any) -> Any:
        for case in edge:
            if case.dtype in DTYPES:
                fn = example(case=case, **fixed)(fn)
        return fn

    return deco
