"""The emulator's math functions (emu_types.h): erfinvf/erfcinvf, normcdf and friends, the
float intrinsics and the double functions against float64 math (bisection on
math.erf/erfc for the inverse error functions)."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from emu_types_support import RNG, call

# The inputs deliberately include NaNs (signalling ones among the bf16 patterns), infinities and
# overflowing values; NumPy's RuntimeWarnings about them are expected noise here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# ------------------------------------------------------------------------------------------------
# Math functions
# ------------------------------------------------------------------------------------------------
def ulp_diff32(a, b):
    """Distance in float32 ulps (on the monotone integer line); NaN pairs count as 0."""
    a = np.asarray(a, np.float32)
    b = np.asarray(b, np.float32)

    def key(x):
        i = x.view(np.int32).astype(np.int64)
        return np.where(i < 0, -(i & 0x7FFFFFFF), i)

    d = np.abs(key(a) - key(b))
    both_nan = np.isnan(a) & np.isnan(b)
    return np.where(both_nan, 0, np.where(np.isnan(a) | np.isnan(b), 1 << 40, d))


SQRT_PI_2 = math.sqrt(math.pi) / 2


def erfinv_ref(y: float) -> float:
    """Inverse of erf in double by bisection (on erfc in the tails, where 1 - |y| is exact)."""
    if y == 0:
        return y
    if abs(y) >= 1:
        return math.copysign(math.inf, y) if abs(y) == 1 else math.nan
    a = abs(y)
    if a < 1e-6:
        return math.copysign(SQRT_PI_2 * a * (1 + math.pi * a * a / 12), y)
    t = 1.0 - a
    lo, hi = 0.0, 30.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        too_small = math.erf(mid) < a if a < 0.5 else math.erfc(mid) > t
        lo, hi = (mid, hi) if too_small else (lo, mid)
        if hi - lo <= 1e-18 * hi:
            break
    return math.copysign(0.5 * (lo + hi), y)


def erfcinv_ref(y: float) -> float:
    if y <= 0 or y >= 2:
        return math.inf if y == 0 else (-math.inf if y == 2 else math.nan)
    if y > 1:
        return -erfcinv_ref(2.0 - y)
    if y > 0.5:
        return erfinv_ref(1.0 - y)
    lo, hi = 0.0, 30.0
    for _ in range(200):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if math.erfc(mid) > y else (lo, mid)
    return 0.5 * (lo + hi)


def f32_math(lib, x, op):
    return call(lib, "f32_math", np.float32, np.asarray(x, np.float32), extra=(op,))


def test_erfinvf_erfcinvf_accuracy(lib):
    y = np.concatenate(
        [
            RNG.uniform(-1, 1, 2000),
            1 - np.exp2(-RNG.uniform(1, 24, 300)),
            -(1 - np.exp2(-RNG.uniform(1, 24, 300))),
            np.exp2(-RNG.uniform(0, 140, 300)),
            [0.5, -0.5, 1 - 2**-24, 1e-30, 1e-45],
        ]
    ).astype(np.float32)
    got = f32_math(lib, y, 0)
    want = np.array([erfinv_ref(float(v)) for v in y]).astype(np.float32)
    assert ulp_diff32(got, want).max() <= 2, y[ulp_diff32(got, want) > 2][:5]
    special = f32_math(lib, [1, -1, 0, -0.0, 1.5, np.nan], 0)
    assert (
        special[0] == np.inf
        and special[1] == -np.inf
        and np.isnan(special[4])
        and np.isnan(special[5])
    )
    assert special[2] == 0 and np.signbit(special[3])

    z = np.concatenate(
        [
            RNG.uniform(0, 2, 2000),
            np.exp2(-RNG.uniform(0, 149, 400)),
            2 - np.exp2(-RNG.uniform(1, 23, 200)),
            [1.0, 1e-38, 1.4e-45],
        ]
    ).astype(np.float32)
    got = f32_math(lib, z, 1)
    want = np.array([erfcinv_ref(float(v)) for v in z]).astype(np.float32)
    assert ulp_diff32(got, want).max() <= 2, z[ulp_diff32(got, want) > 2][:5]
    special = f32_math(lib, [0, 2, -0.5, 2.5, 1], 1)
    assert (
        special[0] == np.inf
        and special[1] == -np.inf
        and np.isnan(special[2:4]).all()
        and special[4] == 0
    )


def test_normcdf_and_friends(lib):
    x = np.concatenate([RNG.uniform(-40, 10, 3000), RNG.standard_normal(1000)]).astype(np.float32)
    got = f32_math(lib, x, 2)
    want = np.array([0.5 * math.erfc(-float(v) / math.sqrt(2)) for v in x]).astype(np.float32)
    assert ulp_diff32(got, want).max() <= 2
    p = np.concatenate([RNG.uniform(0, 1, 2000), np.exp2(-RNG.uniform(1, 126, 300))]).astype(
        np.float32
    )
    got = f32_math(lib, p, 3)
    want = np.array([-math.sqrt(2) * erfcinv_ref(2.0 * float(v)) for v in p]).astype(np.float32)
    assert ulp_diff32(got, want).max() <= 2
    # erfcx
    x = np.concatenate([RNG.uniform(-9, 25, 2000), RNG.uniform(25, 1e4, 200)]).astype(np.float32)

    def erfcx_ref(v):
        if v < 25:
            return math.erfc(v) * math.exp(v * v)
        s, term = 1.0, 1.0
        for k in range(1, 30):
            term *= -(2 * k - 1) / (2 * v * v)
            s += term
        return s / (v * math.sqrt(math.pi))

    got = f32_math(lib, x, 8)
    want = np.array([erfcx_ref(float(v)) for v in x]).astype(np.float32)
    assert ulp_diff32(got, want).max() <= 2
    # norm3df (computed in double: no overflow for large components)
    a, b, c = (RNG.standard_normal(500).astype(np.float32) * 1e30 for _ in range(3))
    got = call(lib, "f32_norm3", np.float32, a, b, c)
    want = np.sqrt(
        a.astype(np.float64) ** 2 + b.astype(np.float64) ** 2 + c.astype(np.float64) ** 2
    ).astype(np.float32)
    assert ulp_diff32(got, want).max() <= 1


def test_float_intrinsics_spot_checks(lib):
    sat = f32_math(lib, [-1, -0.0, 0.25, 1, 2, np.inf, -np.inf, np.nan], 4)
    assert list(sat) == [0, 0, 0.25, 1, 1, 1, 0, 0] and not np.signbit(sat).any()
    x = np.exp2(RNG.uniform(-120, 120, 2000)).astype(np.float32)
    # rsqrtf / __frsqrt_rn: correctly rounded here (checked exactly on a sample)
    for op in (5, 10):
        got = f32_math(lib, x[:300], op)
        for v, r in zip(x[:300], got, strict=False):
            q = 1 / Fraction(float(v))  # r must be the float nearest to sqrt(q)
            lo, hi = np.nextafter(r, np.float32(0)), np.nextafter(r, np.float32(np.inf))
            m_lo = (Fraction(float(lo)) + Fraction(float(r))) / 2
            m_hi = (Fraction(float(r)) + Fraction(float(hi))) / 2
            assert m_lo**2 <= q <= m_hi**2, (v, r)
    assert (
        ulp_diff32(
            f32_math(lib, x, 9), (1 / np.cbrt(x.astype(np.float64))).astype(np.float32)
        ).max()
        <= 1
    )
    # sinpi / cospi: exact at integers and halves, accurate elsewhere
    ints = np.arange(-8, 9).astype(np.float32)
    s = f32_math(lib, ints, 6)
    assert (s == 0).all() and (np.signbit(s) == (ints < 0)).all()
    c = f32_math(lib, ints + np.float32(0.5), 7)
    assert (c == 0).all() and not np.signbit(c).any()
    assert list(f32_math(lib, [0.5, 1.5, -0.5, 1e30], 6)) == [1, -1, -1, 0]
    assert list(f32_math(lib, [0, 1, 2, 1e30], 7)) == [1, -1, 1, 1]
    r = RNG.uniform(-4, 4, 3000).astype(np.float32)
    want_s = np.array([math.sin(math.pi * math.remainder(float(v), 2.0)) for v in r]).astype(
        np.float32
    )
    want_c = np.array([math.cos(math.pi * math.remainder(float(v), 2.0)) for v in r]).astype(
        np.float32
    )
    assert ulp_diff32(f32_math(lib, r, 6), want_s).max() <= 2
    assert ulp_diff32(f32_math(lib, r, 7), want_c).max() <= 2
    # fast intrinsics: accurate here (CUDA only bounds their error)
    y = RNG.uniform(-20, 20, 2000).astype(np.float32)
    assert (
        ulp_diff32(f32_math(lib, y, 11), np.exp(y.astype(np.float64)).astype(np.float32)).max() <= 1
    )
    assert (
        ulp_diff32(f32_math(lib, y, 13), np.sin(y.astype(np.float64)).astype(np.float32)).max() <= 1
    )
    assert (
        ulp_diff32(f32_math(lib, y, 14), (y.astype(np.float64) ** 2).astype(np.float32)).max() <= 1
    )
    # __fdividef(x, y) is documented to give 0 for 2^126 < |y| < 2^128, NaN for infinite x
    d = f32_math(lib, [1e30, -3.0, np.inf], 12)
    assert d[0] == 0 and d[1] == 0 and np.isnan(d[2])


def test_double_math(lib):
    y = np.concatenate(
        [RNG.uniform(-1, 1, 1500), 1 - np.exp2(-RNG.uniform(1, 52, 200)), [1e-300, -1e-20]]
    )
    x = call(lib, "f64_math", np.float64, y, extra=(0,))
    # backward error: erf/erfc of the result reproduces the input
    for yi, xi in zip(y, x, strict=False):
        a = abs(yi)
        if a < 0.5:
            assert abs(math.erf(xi) - yi) <= 4e-16 * a + 1e-300
        else:
            t = 1.0 - a
            assert abs(math.erfc(abs(xi)) - t) <= (4 + 4 * xi * xi) * 1.2e-16 * t
    z = np.concatenate([RNG.uniform(0, 2, 1000), np.exp2(-RNG.uniform(1, 1000, 200))])
    x = call(lib, "f64_math", np.float64, z, extra=(1,))
    for zi, xi in zip(z, x, strict=False):
        if zi < 1:
            assert abs(math.erfc(xi) - zi) <= (4 + 4 * xi * xi) * 1.2e-16 * zi
    v = RNG.uniform(-30, 8, 1000)
    got = call(lib, "f64_math", np.float64, v, extra=(2,))
    want = np.array([0.5 * math.erfc(-w / math.sqrt(2)) for w in v])
    assert np.allclose(got, want, rtol=1e-13 * 50, atol=0)
    p = RNG.uniform(1e-10, 1, 500)
    back = call(
        lib, "f64_math", np.float64, call(lib, "f64_math", np.float64, p, extra=(3,)), extra=(2,)
    )
    assert np.allclose(back, p, rtol=1e-13, atol=0)
    ints = np.arange(-6.0, 7.0)
    assert (call(lib, "f64_math", np.float64, ints, extra=(4,)) == 0).all()
    assert (call(lib, "f64_math", np.float64, ints + 0.5, extra=(5,)) == 0).all()
    r = RNG.uniform(-0.25, 0.25, 1000)
    assert np.allclose(
        call(lib, "f64_math", np.float64, r, extra=(4,)), np.sin(np.pi * r), rtol=1e-15, atol=1e-300
    )
    e = RNG.uniform(-5, 20, 1000)
    assert np.allclose(
        call(lib, "f64_math", np.float64, e, extra=(6,)),
        [math.erfc(w) * math.exp(w * w) for w in e],
        rtol=1e-12,
    )
    q = np.exp2(RNG.uniform(-500, 500, 1000))
    assert np.allclose(call(lib, "f64_math", np.float64, q, extra=(7,)), 1 / np.sqrt(q), rtol=3e-16)
