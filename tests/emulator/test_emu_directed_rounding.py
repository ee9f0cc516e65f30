"""The emulator's directed-rounding float / double arithmetic (__fadd_rz, __dsqrt_ru, ...,
emu_types.h) against exact rational arithmetic rounded in the requested mode."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from emu_types_support import MODES, RNG, call, round_exact

# The inputs deliberately include NaNs (signalling ones among the bf16 patterns), infinities and
# overflowing values; NumPy's RuntimeWarnings about them are expected noise here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# ------------------------------------------------------------------------------------------------
# Directed-rounding float / double arithmetic
# ------------------------------------------------------------------------------------------------
def exact_sqrt_round(x: float, fmt: str, mode: str) -> float:
    """Correctly rounded sqrt of a non-negative float via exact comparison of squares."""
    dt = np.float32 if fmt == "f32" else np.float64
    if x == 0 or math.isinf(x):
        return x
    q = Fraction(x)
    r = dt(math.sqrt(x))
    while Fraction(float(r)) ** 2 > q:
        r = np.nextafter(r, dt(0))
    while Fraction(float(np.nextafter(r, dt(np.inf)))) ** 2 <= q:
        r = np.nextafter(r, dt(np.inf))
    lo = r
    if Fraction(float(lo)) ** 2 == q:
        return float(lo)
    hi = np.nextafter(lo, dt(np.inf))
    if mode in ("rz", "rd"):
        return float(lo)
    if mode == "ru":
        return float(hi)
    mid = (Fraction(float(lo)) + Fraction(float(hi))) / 2
    return float(lo) if mid**2 > q else float(hi)


def directed_inputs(dtype, n):
    e = 20 if dtype == np.float32 else 200
    a = RNG.standard_normal(n) * np.exp2(RNG.integers(-e, e, n))
    b = RNG.standard_normal(n) * np.exp2(RNG.integers(-e, e, n))
    c = RNG.standard_normal(n) * np.exp2(RNG.integers(-e, e, n))
    b[: n // 4] = a[: n // 4] * (1 + RNG.standard_normal(n // 4) * 1e-6)  # cancellation
    return a.astype(dtype), b.astype(dtype), c.astype(dtype)


@pytest.mark.parametrize("fmt", ["f32", "f64"])
def test_directed_rounding_arithmetic(lib, fmt):
    dtype = np.float32 if fmt == "f32" else np.float64
    a, b, c = directed_inputs(dtype, 120)
    name = "f32_directed" if fmt == "f32" else "f64_directed"
    ops = {
        0: lambda x, y, z: x + y,
        1: lambda x, y, z: x - y,
        2: lambda x, y, z: x * y,
        3: lambda x, y, z: x / y,
        5: lambda x, y, z: x * y + z,
        6: lambda x, y, z: 1 / x,
    }
    for mode in range(4):
        for op, f in ops.items():
            got = call(lib, name, dtype, a, b, c, extra=(op, mode)).astype(np.float64)
            want = np.array(
                [
                    round_exact(
                        f(Fraction(float(x)), Fraction(float(y)), Fraction(float(z))),
                        fmt,
                        MODES[mode],
                    )
                    for x, y, z in zip(a, b, c, strict=False)
                ]
            )
            assert (got == want).all(), (op, MODES[mode], a[got != want][:3], b[got != want][:3])
        got = call(lib, name, dtype, np.abs(a), b, c, extra=(4, mode)).astype(np.float64)
        want = np.array([exact_sqrt_round(float(abs(x)), fmt, MODES[mode]) for x in a])
        assert (got == want).all(), ("sqrt", MODES[mode])
    if fmt == "f64":  # __double2float_{rn,rz,rd,ru}
        x = RNG.standard_normal(500) * np.exp2(RNG.integers(-140, 140, 500))
        for mode in range(4):
            got = call(lib, name, np.float64, x, x, x, extra=(7, mode))
            want = np.array([round_exact(Fraction(float(v)), "f32", MODES[mode]) for v in x])
            assert (got == want).all(), MODES[mode]
