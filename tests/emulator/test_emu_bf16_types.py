"""The emulator's bfloat16 (emu_types.h) against integer bit manipulation on float32
patterns and exact rational rounding: conversions in every mode, per-operation rounding
of the arithmetic, a single rounding in fma."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest
from emu_types_support import (
    RNG,
    assert_bits_equal,
    bf16_reference,
    bf16_to_f32,
    call,
    f64_to_bf16_rne,
    fma_reference,
    random_16,
    round_exact,
    to_bits,
)

# The inputs deliberately include NaNs (signalling ones among the bf16 patterns), infinities and
# overflowing values; NumPy's RuntimeWarnings about them are expected noise here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# ------------------------------------------------------------------------------------------------
# bfloat16
# ------------------------------------------------------------------------------------------------
def test_bf16_to_float_exhaustive(lib):
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    got = call(lib, "bf16_to_float", np.float32, bits)
    assert (got.view(np.uint32) == bits.astype(np.uint32) << 16).all()


@pytest.mark.parametrize("mode", [0, 1, 2, 3, 4, 5, 6])
def test_float_to_bf16(lib, mode):
    n = 400_000
    ties = (
        (RNG.integers(0, 2**16, n // 4, dtype=np.uint64) << 16 | 0x8000)
        .astype(np.uint32)
        .view(np.float32)
    )
    x = np.concatenate(
        [
            RNG.integers(0, 2**32, n // 2, dtype=np.uint64).astype(np.uint32).view(np.float32),
            ties,
            np.nextafter(ties, np.float32(np.inf)),
            np.nextafter(ties, np.float32(-np.inf)),
            np.array(
                [
                    0,
                    -0.0,
                    3.4028235e38,
                    -3.4028235e38,
                    3.3961e38,
                    1e-40,
                    -1e-45,
                    np.inf,
                    -np.inf,
                    np.nan,
                ],
                np.float32,
            ),
        ]
    ).astype(np.float32)
    got = call(lib, "float_to_bf16", np.uint16, x, extra=(mode,))
    want = bf16_reference(x, mode if mode < 4 else 0)
    nan = np.isnan(x)
    assert (got[~nan] == want[~nan]).all(), x[~nan][got[~nan] != want[~nan]][:8]
    assert (got[nan] == 0x7FFF).all()  # NaN stays a (canonical, quiet) NaN
    if mode == 0:  # spot checks of the documented behaviour
        spots = np.array(
            [3.4028235e38, 1.0 + 2**-8, 1.0 + 3 * 2**-8, 1.0 + 2**-8 + 2**-20], np.float32
        )
        assert list(call(lib, "float_to_bf16", np.uint16, spots, extra=(0,))) == [
            0x7F80,
            0x3F80,
            0x3F82,
            0x3F81,
        ]


def test_double_to_bf16_exact(lib):
    n = 3000
    base = bf16_to_f32(RNG.integers(0, 0x7F80, n, dtype=np.uint32).astype(np.uint16)).astype(
        np.float64
    )
    ulp = base * 2.0**-7
    x = np.concatenate(
        [
            base + ulp / 2 + base * 2.0**-35,
            base + ulp / 2 - base * 2.0**-35,
            base + ulp / 2,
            RNG.standard_normal(n) * 10.0 ** RNG.integers(-40, 40, n),
            np.array([1e300, -1e300, 1e-300, 3.3961e38, 2.0**-134, 2.0**-134 * (1 + 2**-30)]),
        ]
    )
    got = call(lib, "double_to_bf16", np.uint16, x)
    want = to_bits([round_exact(Fraction(float(v)), "bf16", "rn") for v in x], "bf16")
    assert_bits_equal(got, want, bf16_to_f32, "double->bf16", [x])


@pytest.mark.parametrize("op,name", [(0, "add"), (1, "sub"), (2, "mul"), (3, "div")])
def test_bf16_arithmetic_per_op_rounding(lib, op, name):
    n = 200_000
    a, b = random_16(n, "repeat"), random_16(n, "tile")
    a[n // 2 : 5 * n // 6] = (a[n // 2 : 5 * n // 6] & 0x80FF) | 0x3F00  # similar exponents
    b[n // 2 : 5 * n // 6] = (b[n // 2 : 5 * n // 6] & 0x80FF) | 0x3F00
    fa, fb = bf16_to_f32(a).astype(np.float64), bf16_to_f32(b).astype(np.float64)
    with np.errstate(all="ignore"):
        exact = {0: fa + fb, 1: fa - fb, 2: fa * fb, 3: fa / fb}[op]
    want = f64_to_bf16_rne(exact)
    for variant in (op, op + 4):
        got = call(lib, "bf16_binop", np.uint16, a, b, extra=(variant,))
        assert_bits_equal(got, want, bf16_to_f32, f"bf16 {name}", [fa, fb])
    # cross-check a sample against the exact rational reference; an exactly zero result is
    # left out (a Fraction has no signed zero: -0 / x is -0 in IEEE and 0 here), its bits
    # are checked against float64 above like every other entry
    idx = RNG.choice(n, 1500, replace=False)
    idx = idx[
        np.isfinite(exact[idx]) & np.isfinite(fa[idx]) & np.isfinite(fb[idx]) & (fb[idx] != 0)
        & (exact[idx] != 0)
    ]
    ops = {
        0: lambda x, y: x + y,
        1: lambda x, y: x - y,
        2: lambda x, y: x * y,
        3: lambda x, y: x / y,
    }[op]
    ref = to_bits(
        [
            round_exact(ops(Fraction(float(fa[i])), Fraction(float(fb[i]))), "bf16", "rn")
            for i in idx
        ],
        "bf16",
    )
    assert_bits_equal(want[idx], ref, bf16_to_f32, f"bf16 {name} reference self-check")


def test_bf16_fma_single_rounding(lib):
    n = 6000
    a, b, c = random_16(n), random_16(n), random_16(n)
    a[: n // 2] = (a[: n // 2] & 0x80FF) | 0x3F00
    b[: n // 2] = (b[: n // 2] & 0x80FF) | 0x3F00
    c[: n // 4] = (c[: n // 4] & 0x80FF) | 0x3B00
    # adversarial: a*b exactly halfway between two bf16 values, c far below it (a double fma
    # followed by a second rounding to bf16 gets these wrong)
    k = 64
    a[-k:] = 0x3F81  # 1 + 2^-7
    b[-k:] = 0x3FC0  # 1.5
    c[-k:] = np.where(np.arange(k) % 2 == 0, 0x0001, 0x8001)  # +-2^-133 (subnormal)
    fa, fb, fc = (bf16_to_f32(v) for v in (a, b, c))
    got = call(lib, "bf16_fma", np.uint16, a, b, c, extra=(0,))
    want = fma_reference(fa, fb, fc, "bf16")
    assert_bits_equal(got, want, bf16_to_f32, "bf16 __hfma", [fa, fb, fc])
    assert len(set(got[-k:].tolist())) == 2  # the sign of the tiny c decides
    got2 = call(lib, "bf16_fma", np.uint16, a, b, c, extra=(3,))
    assert_bits_equal(got2, want, bf16_to_f32, "bf16 __hfma2", [fa, fb, fc])
