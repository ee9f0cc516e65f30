"""Property tests of the spatial transformer (hypothesis): grid_sample, affine_grid and their
backward functions against the float64 reference and PyTorch's CPU autograd (float64, on the
same inputs), on every backend.

Grid coordinates come from a small pool per axis (drawn by hypothesis, spread over the grid
by a seeded permutation) that mixes exact borders (-1, 1), points just outside (one float32
ulp, 2^-10, one pixel), far outside (3, 7.5, 1000, 1e10: past 2^30 pixels), the axis's
pixel centres and edges, and arbitrary floats; no NaN or inf (their deliberate differences
from PyTorch's CPU kernels are in test_spatial.py).

Tolerances are bounds built from the problem itself (_tolerances): every result is a sum of
products whose magnitudes the reference's taps give, and the only other error is the
kernels' float index (none where the dtype computes it exactly). Over 1,500 examples the
largest error seen was a sixth of its bound.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import warnings
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from test_spatial import _torch  # noqa: E402

import cudnnlite  # noqa: E402
from cudnnlite.ops.spatial import (  # noqa: E402
    affine_grid,
    affine_grid_backward,
    grid_sample,
    grid_sample_backward,
)
from cudnnlite.reference import spatial as ref  # noqa: E402
from cudnnlite.testing import to_backend, to_numpy  # noqa: E402

HYPO = settings(suppress_health_check=[HealthCheck.function_scoped_fixture])
DTYPES = ("float32", "float64")

# Per axis j, over one point's taps: sum |dw/di_j|, and sum |d2w/di_j di_m| over the axes
# m. Bilinear: slopes -1 and 1 times the other axes' weights (summing to 1), and only mixed
# second derivatives (+-1 times the rest: 4 per other axis). Bicubic (Keys, A = -0.75): the
# maxima over u in [0, 1] are sum |c| = 1.375, sum |c'| = 3, sum |c''| = 12, so a 2-D
# weight's slope sum is 3 * 1.375 and its curvature sum 12 * 1.375 + 3 * 3.
SLOPE = {"nearest": 0.0, "bilinear": 2.0, "bicubic": 4.2}
CURVE = {"nearest": 0.0, "bilinear": 8.0, "bicubic": 26.0}
# Absolute error of a bicubic weight, in ulps of 1: its cubic is evaluated in the dtype
# with intermediates up to ~6 (4 roundings each, two factors), where a bilinear weight
# (1 - f, f exactly; then products) only has relative error.
WERR = {"nearest": 0.0, "bilinear": 0.0, "bicubic": 128.0}


@dataclasses.dataclass(frozen=True)
class Case:
    """One grid_sample problem; coordinate j (x, y[, z]) takes the values of ``pools[j]``."""

    in_sp: tuple[int, ...]  # (D,) H, W
    out_sp: tuple[int, ...]
    pools: tuple[tuple[float, ...], ...]
    mode: str = "bilinear"
    padding: str = "zeros"
    align: bool = False
    dtype: str = "float32"
    n: int = 1
    c: int = 1
    channels_last: bool = False
    seed: int = 0

    @property
    def nd(self) -> int:
        return len(self.in_sp)

    @property
    def args(self) -> tuple[str, str, bool]:
        return self.mode, self.padding, self.align

    def axis(self, j: int) -> int:
        """Pixels along coordinate j: x indexes W, y H, z D."""
        return self.in_sp[-1 - j]


def _centres(size: int, align: bool) -> list[Fraction]:
    """Pixel centres of an axis in [-1, 1], exactly (one pixel: 0, as PyTorch)."""
    if size == 1:
        return [Fraction(0)]
    if align:
        return [Fraction(2 * i, size - 1) - 1 for i in range(size)]
    return [Fraction(2 * i + 1, size) - 1 for i in range(size)]


def _coordinates(size: int, align: bool) -> st.SearchStrategy[float]:
    """Coordinates worth sampling along an axis of ``size`` pixels."""
    unit = 2 / (size - 1) if align and size > 1 else 2 / size
    centres = [float(c) for c in _centres(size, align)]
    edges = [centres[0] - unit / 2] + [c + unit / 2 for c in centres]
    outside = [1 + 2.0**-23, 1 + 2.0**-10, 1 + unit, 3.0, 7.5, 1000.0, 1e10]
    special = [-1.0, 1.0, 0.0, *outside, *(-v for v in outside), *centres, *edges]
    return st.one_of(st.sampled_from(special), st.floats(-1.25, 1.25), st.floats(-12.0, 12.0))


def _dyadic(size: int, align: bool) -> st.SearchStrategy[float]:
    """Multiples of 1/4 and far points: indices are multiples of 1/8 and every weight,
    product and sum of test_exact_arithmetic_is_bit_for_bit is exact in float32."""
    far = st.sampled_from([-1000.0, -7.5, -3.0, 3.0, 7.5, 1000.0])
    return st.one_of(st.integers(-10, 10).map(lambda k: k / 4), far)


@st.composite
def cases(draw: Any, modes: tuple[str, ...] = ref.MODES, coordinates: Any = _coordinates) -> Case:
    nd = draw(st.sampled_from([2, 3]))
    mode = draw(st.sampled_from([m for m in modes if nd == 2 or m != "bicubic"]))
    in_sp = tuple(draw(st.integers(1, 4 if nd == 3 and k == 0 else 7)) for k in range(nd))
    out_sp = tuple(draw(st.integers(1, 4 if nd == 3 and k == 0 else 6)) for k in range(nd))
    align = draw(st.booleans())
    pools = tuple(
        tuple(draw(st.lists(coordinates(in_sp[-1 - j], align), min_size=1, max_size=6)))
        for j in range(nd)
    )
    return Case(
        in_sp, out_sp, pools, mode,
        padding=draw(st.sampled_from(ref.PADDINGS)),
        align=align,
        dtype=draw(st.sampled_from(DTYPES)),
        n=draw(st.integers(1, 2)),
        c=draw(st.integers(1, 3)),
        channels_last=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )  # fmt: skip


def _arrays(case: Case, integers: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """x, grid and dy of ``case``: every pool value appears (as often as the points allow)."""
    rng = np.random.default_rng(case.seed)
    points = case.n * math.prod(case.out_sp)
    coords = [rng.permutation(np.resize(np.asarray(p, np.float64), points)) for p in case.pools]
    grid = np.stack(coords, -1).reshape(case.n, *case.out_sp, case.nd).astype(case.dtype)
    xs, ys = (case.n, case.c, *case.in_sp), (case.n, case.c, *case.out_sp)
    if integers:
        x, dy = rng.integers(-4, 5, xs), rng.integers(-3, 4, ys)
    else:
        x, dy = rng.standard_normal(xs), rng.standard_normal(ys)
    return x.astype(case.dtype), grid, dy.astype(case.dtype)


def _on(backend: str, a: np.ndarray, channels_last: bool = False) -> Any:
    """``a`` on ``backend``; channels_last: an (N, C, ...) view of (N, ..., C) memory."""
    if not channels_last:
        return to_backend(a, backend)
    last = (0, *range(2, a.ndim), 1)
    back = (0, a.ndim - 1, *range(1, a.ndim - 1))
    return to_backend(np.ascontiguousarray(a.transpose(last)), backend).transpose(back)


def _keeps_layout(a: Any, case: Case) -> bool:
    """Whether ``a`` (y or dx) has x's memory format; True where the two formats are one
    (one channel, or one pixel: a channels-last x is then C-contiguous too)."""
    if case.c == 1 or math.prod(case.in_sp) == 1 or math.prod(a.shape[2:]) == 1:
        return True
    return (a.strides[1] == a.itemsize) == case.channels_last


def _unchanged(pairs: list[tuple[Any, np.ndarray]]) -> None:
    for on_backend, copy in pairs:
        np.testing.assert_array_equal(to_numpy(on_backend), copy, err_msg="an input changed")


def _bits(a: Any) -> np.ndarray:
    a = to_numpy(a)
    return a.view(f"u{a.itemsize}")


# ------------------------------------------------------------------ indices and kinks


def _index(g: np.ndarray, size: int, align: bool) -> np.ndarray:
    """The unnormalized index, in long double (exact for float32 coordinates)."""
    g = np.asarray(g, np.longdouble)
    return (g + 1) / 2 * (size - 1) if align else ((g + 1) * size - 1) / 2


def _exact_index(g: np.ndarray, size: int, case: Case) -> np.ndarray:
    """Whether every step of the kernels' unnormalization is exact in the dtype."""
    dt = np.dtype(case.dtype)
    a = np.asarray(g, np.longdouble) + 1
    steps = [a, a / 2, a / 2 * (size - 1)] if case.align else [a, a * size, a * size - 1]
    return np.logical_and.reduce([v.astype(dt).astype(np.longdouble) == v for v in steps])


def _in_reach(r: np.ndarray, size: int, case: Case) -> np.ndarray:
    """Indices whose exact value matters: reflection's all; zeros' and border's only near the
    image (a bicubic point reaches 2 pixels): beyond, the taps are all out of bounds or all
    clipped to the border, whatever the index's rounding."""
    if case.padding == "reflection":
        return np.ones(r.shape, bool)
    return (r > -3) & (r < size + 2)


def _near_kink(g: np.ndarray, size: int, case: Case, gradients: bool) -> np.ndarray:
    """Coordinates within rounding of, but not on, a discontinuity of what is compared.

    There the dtype's index (a few ulps off) and the float64 index may fall on different
    sides, and the results differ by O(1) with neither wrong. Exactly on a discontinuity,
    with an index the dtype computes exactly (the coordinate is then a short dyadic
    number), every side computes the same index and the conventions are compared: floor,
    round half to even, borders out of bounds. Reflected points whose index the dtype
    rounds (far ones: |index| > 2^12) are moved too: the rounding, up to 2^-9 pixel in
    float32 there, can flip them across a fold.
    """
    r = _index(g, size, case.align)
    exact = _exact_index(g, size, case)
    dist = np.full(r.shape, np.inf, np.longdouble)
    q = r
    if case.padding == "reflection" and case.mode != "bicubic":  # bicubic reflects integers
        lo, span = (0.0, size - 1.0) if case.align else (-0.5, float(size))
        if span == 0:
            q = np.zeros_like(r)
        else:  # a fold: the flip count comes from a float quotient
            dist = np.abs(r - lo - np.rint((r - lo) / span) * span)
            d = np.abs(r - lo) % (2 * span)
            q = lo + np.where(d > span, 2 * span - d, d)
    if case.mode == "nearest":  # rint picks another pixel: y and dx jump
        p = q if case.padding == "zeros" else np.clip(q, 0, size - 1)
        dist = np.minimum(dist, np.abs(p - np.floor(p) - 0.5))
    elif case.mode == "bilinear" and gradients:  # floor picks another cell: dgrid jumps
        dist = np.minimum(dist, np.abs(q - np.rint(q)))
    margin = 64 * np.finfo(case.dtype).eps * (np.abs(r) + size)
    near = _in_reach(r, size, case) & (dist < margin) & ~((dist == 0) & exact)
    if case.padding == "reflection":
        near |= ~exact & (np.abs(r) > 2**12)
    return near


def _off_kinks(grid: np.ndarray, case: Case, gradients: bool) -> np.ndarray:
    """``grid`` with coordinates near a kink moved to 0 (an exact index on any axis)."""
    out = grid.copy()
    for j in range(case.nd):
        near = _near_kink(grid[..., j], case.axis(j), case, gradients)
        out[..., j][near] = 0
    return out


def _index_error(case: Case, grid: np.ndarray) -> np.ndarray:
    """Per point, a bound on the error of the dtype's index over the axes: 0 where each step
    of the unnormalization is exact in the dtype or the index out of reach, else a few
    roundings of |index| + size (reflection adds one more of the same size)."""
    eps = np.finfo(case.dtype).eps
    err = np.zeros(grid.shape[:-1])
    for j in range(case.nd):
        s, g = case.axis(j), grid[..., j]
        r = _index(g, s, case.align)
        rounded = ~_exact_index(g, s, case) & _in_reach(r, s, case)
        err = np.maximum(err, np.where(rounded, 4 * eps * (np.abs(r) + s), 0.0).astype(float))
    return err


def _tolerances(case: Case, x: np.ndarray, grid: np.ndarray, dy: np.ndarray) -> dict:
    """Bounds on |ours - float64| for y, dx and dgrid, elementwise, from the reference's
    taps (the positions and float64 weights of each point's taps).

    A sum of K products in the dtype errs by at most (K + 3) roundings of the sum T of the
    terms' magnitudes (K - 1 additions, up to 3 roundings in each product). The kernels'
    weights themselves err by ``moved`` per unit: their index error times the weights'
    slope (SLOPE per axis; dgrid's slopes move by CURVE), plus WERR for bicubic cubics.
    """
    eps = float(np.finfo(case.dtype).eps)
    mode, nd, n = case.mode, case.nd, case.n
    taps = ref._taps(grid.astype(np.float64), case.in_sp, *case.args)
    ierr = _index_error(case, grid)  # (N, *out)
    moved = WERR[mode] * eps + SLOPE[mode] * nd * ierr
    mx = float(np.abs(x).max())
    ady = np.abs(dy.astype(np.float64))
    wsum = sum(np.abs(w) for w in taps.w)
    tol_y = ((len(taps.w) + 3) * eps * wsum + moved) * mx
    # dx[e]: the taps that land on e, each |w| * |dy| (t) and its weight error (h); a point
    # whose rounded index falls in another cell may also reach e with a weight <= moved.
    t = np.zeros((n, *case.in_sp, case.c))
    h, count = np.zeros_like(t), np.zeros((n, *case.in_sp, 1))
    n_of = np.broadcast_to(np.arange(n).reshape(-1, *[1] * nd), grid.shape[:-1])
    dy_last = np.moveaxis(ady, 1, -1)
    for pos, valid, w in zip(taps.pos, taps.valid, taps.w, strict=True):
        at = (n_of[valid], *(p[valid] for p in reversed(pos)))
        np.add.at(t, at, np.abs(w[valid])[:, None] * dy_last[valid])
        np.add.at(h, at, moved[valid][:, None] * dy_last[valid])
        np.add.at(count, at, 1)
    h += moved.max() * ady.max()
    sums = (count + 3) * eps * (t + h)  # the rounding of the kernels' own terms
    # dgrid[..., j] = scale_j * sum_c dy * sum_k x_k dw_k: C * K terms of size up to
    # scale_j * |dy| * |x| * SLOPE; the index error moves dw by CURVE per unit.
    scale = np.array([(s - 1) / 2 if case.align else s / 2 for s in reversed(case.in_sp)])
    unit = scale * (ady.sum(1) * mx)[..., None]
    roundings = (case.c * len(taps.w) + 3) * eps * SLOPE[mode] + WERR[mode] * eps
    return {
        "y": tol_y[:, None],
        "dx": np.moveaxis(sums + h, -1, 1),
        "dx sum": np.moveaxis(sums, -1, 1),
        "dgrid": unit * (roundings + CURVE[mode] * ierr[..., None]),
    }


def _torch_flip_overflow(case: Case, grid: np.ndarray) -> np.ndarray:
    """Points where PyTorch's 3-D CPU kernels count reflection flips past int32 (a
    ``static_cast<int>`` of floor(|index| / span), undefined: at 1e10 it gives the opposite
    dgrid sign to its own 2-D kernel's, which count in floats as ours do)."""
    over = np.zeros(grid.shape[:-1], bool)
    if case.padding != "reflection" or case.nd != 3:
        return over
    for j in range(case.nd):
        s = case.axis(j)
        lo, span = (0.0, s - 1.0) if case.align else (-0.5, float(s))
        if span > 0:
            over |= np.abs(_index(grid[..., j], s, case.align) - lo) / span >= 2**31
    return over


def _check(got: Any, want: np.ndarray, tol: np.ndarray, what: str) -> None:
    got = to_numpy(got).astype(np.float64)
    err = np.abs(got - want)
    bad = ~(err <= tol)  # NaN is bad
    if bad.any():
        i = np.unravel_index(np.argmax(np.where(bad, err - tol, -np.inf)), err.shape)
        pytest.fail(
            f"{what}: {int(bad.sum())} of {bad.size} off; at {i}: got {got[i]!r}, "
            f"want {want[i]!r}, tolerance {np.broadcast_to(tol, err.shape)[i]:.3g}"
        )


# ------------------------------------------------------------------ grid_sample


ONE_PIXEL = Case(in_sp=(1, 1), out_sp=(3, 3), pools=((-1.0, 1.0, 0.0), (1.0, -1.0, 1000.0)))
EDGE_CASES = [
    ONE_PIXEL,
    dataclasses.replace(ONE_PIXEL, mode="bicubic", padding="reflection", align=True),
    dataclasses.replace(ONE_PIXEL, mode="nearest", padding="border", dtype="float64"),
    # exact borders and one ulp / 2^-10 outside them, channels-last
    Case(in_sp=(4, 5), out_sp=(3, 4), pools=((-1.0, 1.0, 1 + 2.0**-23, -1 - 2.0**-10),
         (1.0, -1.0, -1000.0, 7.5)), padding="reflection", n=2, c=3, channels_last=True),
    Case(in_sp=(3, 4), out_sp=(2, 5), pools=((1.0, -1.0, -3.0, 1000.0), (-1.0, 1.0, -1e10)),
         mode="bicubic", padding="border", c=2),
    Case(in_sp=(1, 1, 1), out_sp=(2, 2, 2), pools=((-1.0, 1.0), (1.0, 3.0), (-1.0, -1000.0)),
         mode="bilinear", padding="reflection", align=True, c=2, channels_last=True),
    # x indices 0.5, 1.5, 2.5 and 1.75: nearest rounds half to even
    Case(in_sp=(3, 4), out_sp=(2, 4), pools=((-0.5, 0.0, 0.5, 0.25), (0.0, -1.0, 1.0)),
         mode="nearest", c=3),
    Case(in_sp=(2, 3, 4), out_sp=(2, 3, 2), pools=((1.0, -1.0, 0.0), (-1.0, 1.0, 7.5),
         (1.0, -1.0, 1e10)), mode="nearest", padding="zeros", dtype="float64"),
]  # fmt: skip


def _with_edge_cases(test: Any, exact: bool = False) -> Any:
    """@example for each edge case; exact: those test_exact_arithmetic_is_bit_for_bit takes
    (bilinear or nearest, coordinates on multiples of 1/4)."""
    for case in reversed(EDGE_CASES):
        dyadic = all(v * 4 == int(v * 4) and abs(v) <= 1000 for pool in case.pools for v in pool)
        if not exact or (dyadic and case.mode != "bicubic"):
            test = example(case=case)(test)
    return test


@HYPO
@_with_edge_cases
@given(case=cases())
def test_forward_matches_reference_and_torch(backend: str, case: Case) -> None:
    x, grid, _ = _arrays(case)
    grid = _off_kinks(grid, case, gradients=False)
    xb, gb = _on(backend, x, case.channels_last), _on(backend, grid)
    y = grid_sample(xb, gb, *case.args)
    assert y.dtype == x.dtype and y.shape == (case.n, case.c, *case.out_sp)
    assert _keeps_layout(y, case)
    tol = _tolerances(case, x, grid, np.zeros(y.shape))["y"]
    want = ref.grid_sample(x, grid, *case.args)
    _check(y, want, tol, "y vs reference")
    theirs = np.where(
        _torch_flip_overflow(case, grid)[:, None], want, _torch(x, grid, None, *case.args)[0]
    )
    _check(y, theirs, tol, "y vs torch")
    _unchanged([(xb, x), (gb, grid)])


@HYPO
@_with_edge_cases
@given(case=cases())
def test_gradients_match_torch_autograd(backend: str, case: Case) -> None:
    x, grid, dy = _arrays(case)
    # bilinear dgrid jumps where floor(index) changes: a coordinate within rounding of an
    # integer index moves to 0 (exactly on one, both sides take floor, which is compared)
    grid = _off_kinks(grid, case, gradients=True)
    xb, gb = _on(backend, x, case.channels_last), _on(backend, grid)
    dyb = _on(backend, dy, case.channels_last)
    dx, dgrid = grid_sample_backward(dyb, xb, gb, *case.args)
    assert dx.dtype == x.dtype and dgrid.dtype == grid.dtype and dgrid.shape == grid.shape
    assert _keeps_layout(dx, case)
    tol = _tolerances(case, x, grid, dy)
    want = ref.grid_sample_backward(dy, x, grid, *case.args)
    theirs = list(_torch(x, grid, dy, *case.args)[1:])
    theirs[1] = np.where(_torch_flip_overflow(case, grid)[..., None], want[1], theirs[1])
    for name, got, a, b in zip(("dx", "dgrid"), (dx, dgrid), want, theirs, strict=True):
        _check(got, a, tol[name], f"{name} vs reference")
        _check(got, b, tol[name], f"{name} vs torch")
    if case.mode == "nearest":  # piecewise constant: no grid gradient at all
        assert not to_numpy(dgrid).any()
    _unchanged([(xb, x), (gb, grid), (dyb, dy)])


@HYPO
@functools.partial(_with_edge_cases, exact=True)
@given(case=cases(modes=("bilinear", "nearest"), coordinates=_dyadic))
def test_exact_arithmetic_is_bit_for_bit(backend: str, case: Case) -> None:
    """Small-integer x and dy, coordinates on multiples of 1/4: every index, weight,
    product and sum is exact in float32, so y, dx (both ways) and dgrid must equal the
    float64 reference and PyTorch exactly, kinks included (indices on integers and on
    halves: floor, round half to even, the borders' zero gradient, reflections)."""
    x, grid, dy = _arrays(case, integers=True)
    xb, gb = _on(backend, x, case.channels_last), _on(backend, grid)
    dyb = _on(backend, dy, case.channels_last)
    y = grid_sample(xb, gb, *case.args)
    dx, dgrid = grid_sample_backward(dyb, xb, gb, *case.args)
    dx_atomic = grid_sample_backward(dyb, xb, gb, *case.args, deterministic=False)[0]
    want = (
        ref.grid_sample(x, grid, *case.args),
        *ref.grid_sample_backward(dy, x, grid, *case.args),
    )
    theirs = _torch(x, grid, dy, *case.args)
    got = {"y": (y, 0), "dx": (dx, 1), "dgrid": (dgrid, 2), "atomic dx": (dx_atomic, 1)}
    for name, (a, i) in got.items():
        np.testing.assert_array_equal(to_numpy(a), want[i], err_msg=f"{name} vs reference")
        np.testing.assert_array_equal(to_numpy(a), theirs[i], err_msg=f"{name} vs torch")
    _unchanged([(xb, x), (gb, grid), (dyb, dy)])


@HYPO
@_with_edge_cases
@given(case=cases())
def test_deterministic_dx_is_reproducible_and_atomic_dx_close(
    backend: str, case: Case, monkeypatch: pytest.MonkeyPatch
) -> None:
    x, grid, dy = _arrays(case)
    # the tolerance takes each x element's terms from the reference: its taps must be ours
    grid = _off_kinks(grid, case, gradients=False)
    xb, gb = _on(backend, x, case.channels_last), _on(backend, grid)
    dyb = _on(backend, dy, case.channels_last)
    dx, dgrid = grid_sample_backward(dyb, xb, gb, *case.args)
    with monkeypatch.context() as m:  # another thread order on the emulator (GPUs vary anyway)
        m.setenv("CUDNNLITE_EMU_SCHEDULE", "random")
        m.setenv("CUDNNLITE_EMU_SEED", str(case.seed))
        again, dgrid_again = grid_sample_backward(dyb, xb, gb, *case.args)
        atomic, dgrid_atomic = grid_sample_backward(dyb, xb, gb, *case.args, deterministic=False)
        with cudnnlite.settings(deterministic=True):  # the setting overrides the argument
            forced, _ = grid_sample_backward(dyb, xb, gb, *case.args, deterministic=False)
    for a, b in ((again, dx), (forced, dx), (dgrid_again, dgrid), (dgrid_atomic, dgrid)):
        np.testing.assert_array_equal(_bits(a), _bits(b))
    # The atomic dx adds the same float products in another order: two orders of K terms
    # of magnitude sum T differ by at most (K + 3) roundings of T, the tolerance's first term.
    tol = _tolerances(case, x, grid, dy)["dx sum"]
    _check(atomic, to_numpy(dx).astype(np.float64), tol, "atomic dx vs deterministic dx")
    _unchanged([(xb, x), (gb, grid), (dyb, dy)])


# ------------------------------------------------------------------ affine_grid


@st.composite
def sizes(draw: Any) -> tuple[int, ...]:
    nd = draw(st.sampled_from([2, 3]))
    spatial = [draw(st.integers(1, 4 if nd == 3 and k == 0 else 7)) for k in range(nd)]
    return (draw(st.integers(1, 2)), draw(st.integers(1, 3)), *spatial)


def _torch_affine_grid(theta: np.ndarray, gg: np.ndarray, size: tuple, align: bool) -> tuple:
    torch = pytest.importorskip("torch")
    tt = torch.tensor(theta.astype(np.float64), requires_grad=True)
    with warnings.catch_warnings():  # align_corners with a unit size: a UserWarning
        warnings.simplefilter("ignore", UserWarning)
        grid = torch.nn.functional.affine_grid(tt, list(size), align_corners=align)
    grid.backward(torch.tensor(gg.astype(np.float64)))
    return grid.detach().numpy(), tt.grad.numpy()


@HYPO
@example(size=(1, 1, 1, 1), align=True, dtype="float32", seed=0)
@example(size=(2, 3, 1, 7, 1), align=False, dtype="float64", seed=1)
@given(size=sizes(), align=st.booleans(), dtype=st.sampled_from(DTYPES), seed=st.integers(0, 2**16))
def test_affine_grid_and_backward_match_reference_and_torch(
    backend: str, size: tuple, align: bool, dtype: str, seed: int
) -> None:
    nd = len(size) - 2
    rng = np.random.default_rng(seed)
    theta = rng.standard_normal((size[0], nd, nd + 1)).astype(dtype)
    gg = rng.standard_normal((size[0], *size[2:], nd)).astype(dtype)
    tb, ggb = to_backend(theta, backend), to_backend(gg, backend)
    grid = affine_grid(tb, size, align)
    dtheta = affine_grid_backward(ggb, size, align)
    assert grid.dtype == theta.dtype and grid.shape == gg.shape
    assert dtheta.dtype == gg.dtype and dtheta.shape == theta.shape
    eps = float(np.finfo(dtype).eps)
    base = np.abs(ref.base_grid(size, align))
    ath, agg = np.abs(theta.astype(np.float64)), np.abs(gg.astype(np.float64))
    # Base coordinates: ours are the reference's rounded once to the dtype; PyTorch's come
    # from its own linspace, up to an ulp of 1 from NumPy's (the middle one of an odd size
    # is not exactly 0): 2 ulps of 1 per coordinate column, absolute.
    off = 2 * eps * (np.arange(nd + 1) < nd)
    # grid: nd + 1 products with theta, summed: nd + 2 roundings of the terms' magnitudes.
    lead = (size[0], *[1] * nd, nd)
    tol_grid = (nd + 2) * eps * np.einsum("...k,nik->n...i", base, ath)
    tol_grid = tol_grid + np.einsum("k,nik->ni", off, ath).reshape(lead)
    # dtheta: P products summed in a fixed-order tree (strided partials, then halving):
    # each term passes through at most log2(P) + 3 roundings.
    points = math.prod(size[2:])
    axes = "dhw"[3 - nd :]
    t_theta = np.einsum(f"n{axes}i,{axes}k->nik", agg, base)
    tol_theta = (math.log2(points) + 3) * eps * t_theta + np.einsum(f"n{axes}i,k->nik", agg, off)
    torch_grid, torch_dtheta = _torch_affine_grid(theta, gg, size, align)
    for what, got, want, tol in (
        ("grid", grid, ref.affine_grid(theta, size, align), tol_grid),
        ("grid vs torch", grid, torch_grid, tol_grid),
        ("dtheta", dtheta, ref.affine_grid_backward(gg, size, align), tol_theta),
        ("dtheta vs torch", dtheta, torch_dtheta, tol_theta),
    ):
        _check(got, want, tol, what)
    _unchanged([(tb, theta), (ggb, gg)])


@HYPO
@example(size=(1, 1, 1, 1), mode="bilinear", padding="zeros", align=True, dtype="float32",
         channels_last=False, seed=0)  # fmt: skip
@example(size=(2, 3, 4, 5), mode="bilinear", padding="zeros", align=False, dtype="float32",
         channels_last=True, seed=1)  # fmt: skip
@example(size=(1, 2, 3, 2, 4), mode="bilinear", padding="border", align=True, dtype="float64",
         channels_last=False, seed=2)  # fmt: skip
@given(
    size=sizes(),
    mode=st.sampled_from(ref.MODES),
    padding=st.sampled_from(ref.PADDINGS),
    align=st.booleans(),
    dtype=st.sampled_from(DTYPES),
    channels_last=st.booleans(),
    seed=st.integers(0, 2**16),
)
def test_identity_affine_grid_reproduces_the_input(
    backend: str, size: tuple, mode: str, padding: str, align: bool, dtype: str,
    channels_last: bool, seed: int,
) -> None:  # fmt: skip
    nd = len(size) - 2
    if nd == 3 and mode == "bicubic":
        mode = "bilinear"
    theta = np.tile(np.eye(nd, nd + 1), (size[0], 1, 1)).astype(dtype)
    grid = to_numpy(affine_grid(to_backend(theta, backend), size, align))
    # the identity's grid: each point's own pixel centre (x first), within an ulp of 1
    mesh = np.meshgrid(*[[float(c) for c in _centres(s, align)] for s in size[2:]], indexing="ij")
    centres = np.broadcast_to(np.stack(mesh[::-1], -1), grid.shape)
    eps = float(np.finfo(dtype).eps)
    np.testing.assert_allclose(grid, centres, rtol=0, atol=eps)
    x = np.random.default_rng(seed).standard_normal(size).astype(dtype)
    xb = _on(backend, x, channels_last)
    y = to_numpy(grid_sample(xb, to_backend(grid, backend), mode, padding, align))
    # sampling there returns x: a centre a rounding off moves the index by <= 2 eps * size,
    # and y by SLOPE per axis times that (weights of neighbours, zero-padded taps included)
    tol = SLOPE[mode] * nd * 2 * eps * (max(size[2:]) + 1) * np.abs(x).max()
    np.testing.assert_allclose(y, x, rtol=0, atol=tol)
    exact = all(
        Fraction(float(np.dtype(dtype).type(c))) == c for s in size[2:] for c in _centres(s, align)
    )
    if exact:  # exact centres: integer indices, weights 1 and 0, y is x bit for bit
        at_centres = to_backend(centres.astype(dtype), backend)
        np.testing.assert_array_equal(
            to_numpy(grid_sample(xb, at_centres, mode, padding, align)), x
        )
    _unchanged([(xb, x)])
