"""The emulator's integer <-> 16-bit / float conversions (emu_types.h) against exact
rational rounding: every source and destination type, every rounding mode, NaN and
saturation as CUDA's cvt."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from emu_types_support import (
    MODES,
    RNG,
    assert_bits_equal,
    bf16_to_f32,
    call,
    f16,
    round_exact,
    to_bits,
)

# The inputs deliberately include NaNs (signalling ones among the bf16 patterns), infinities and
# overflowing values; NumPy's RuntimeWarnings about them are expected noise here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# ------------------------------------------------------------------------------------------------
# Integer <-> 16-bit / float conversions
# ------------------------------------------------------------------------------------------------
INT_RANGES = {
    0: (-(2**31), 2**31 - 1),
    1: (0, 2**32 - 1),
    2: (-(2**63), 2**63 - 1),
    3: (0, 2**64 - 1),
}


def random_ints(src, n):
    lo, hi = INT_RANGES[src]
    bits = 32 if src < 2 else 64
    vals = []
    for _ in range(n):  # random bit length, then random bits, random sign
        r = (int(RNG.integers(0, 2**62)) << 2) | int(RNG.integers(0, 4))
        v = r >> (64 - int(RNG.integers(0, bits + 1)))
        vals.append(v if lo == 0 or RNG.random() < 0.5 else -v)
    vals += [lo, hi, 0, 1, 2047, 2049, 65504, 65519, 65520, 65535, 65536, 2**24 + 1, 2**53 + 1]
    vals = [max(lo, min(hi, v)) for v in vals]
    return vals


def ints_as_i64(vals):
    return np.array([v - 2**64 if v >= 2**63 else v for v in vals], np.int64)


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
@pytest.mark.parametrize("src", [0, 1, 2, 3])
def test_int_to_16bit(lib, fmt, src):
    vals = random_ints(src, 150)
    arr = ints_as_i64(vals)
    for mode in range(4):
        got = call(lib, "int_to_16", np.uint16, arr, extra=(0 if fmt == "f16" else 1, src, mode))
        want = to_bits([round_exact(Fraction(v), fmt, MODES[mode]) for v in vals], fmt)
        assert_bits_equal(
            got,
            want,
            f16 if fmt == "f16" else bf16_to_f32,
            f"int->{fmt} src={src} {MODES[mode]}",
            [np.array(vals, dtype=object)],
        )


def int_convert_reference(values, mode, lo, hi):
    """CUDA cvt to integer: round per mode, NaN -> 0, saturate."""
    out = []
    for v in values:
        v = float(v)
        if math.isnan(v):
            out.append(0)
            continue
        if math.isinf(v):
            out.append(hi if v > 0 else lo)
            continue
        r = {0: round(v), 1: math.trunc(v), 2: math.floor(v), 3: math.ceil(v)}[
            mode
        ]  # round(): ties to even
        out.append(min(hi, max(lo, r)))
    return out


@pytest.mark.parametrize("fmt", [0, 1])
def test_16bit_to_int(lib, fmt):
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    vals = (f16(bits) if fmt == 0 else bf16_to_f32(bits)).astype(np.float64)
    ranges = {
        0: (-(2**31), 2**31 - 1),
        1: (0, 2**32 - 1),
        2: (-(2**15), 2**15 - 1),
        3: (-(2**63), 2**63 - 1),
        4: (0, 2**64 - 1),
    }
    sample = np.concatenate(
        [bits[::7], bits[0x3C00 : 0x3C00 + 4096] if fmt == 0 else bits[0x3F00:0x4400]]
    )
    sv = (f16(sample) if fmt == 0 else bf16_to_f32(sample)).astype(np.float64)
    for dst, (lo, hi) in ranges.items():
        for mode in range(4):
            got = call(lib, "from16_to_int", np.int64, sample, extra=(fmt, dst, mode))
            want = ints_as_i64(int_convert_reference(sv, mode, lo, hi))
            assert (got == want).all(), (dst, mode, sv[got != want][:5])
    # operator int() truncates; __half2char_rz saturates to [-128, 127]
    got = call(lib, "from16_to_int", np.int64, bits, extra=(fmt, 5, 0))
    assert (got == ints_as_i64(int_convert_reference(vals, 1, -(2**31), 2**31 - 1))).all()
    got = call(lib, "from16_to_int", np.int64, bits, extra=(fmt, 6, 0))
    assert (got == ints_as_i64(int_convert_reference(vals, 1, -128, 127))).all()


def float_int_inputs(dtype):
    n = 20_000
    x = np.concatenate(
        [
            RNG.standard_normal(n) * 10.0 ** RNG.integers(0, 20, n),
            np.arange(-40, 40) / 2.0,  # ties -> even
            np.array(
                [
                    2.0**31,
                    2.0**31 - 128,
                    -(2.0**31),
                    -(2.0**31) - 256,
                    2.0**32,
                    2.0**32 - 256,
                    2.0**63,
                    -(2.0**63),
                    2.0**64,
                    2.0**64 - 2048,
                    1e30,
                    -1e30,
                    -0.4,
                    -0.6,
                    0.5,
                    1.5,
                    2.5,
                    -2.5,
                    np.inf,
                    -np.inf,
                    np.nan,
                ]
            ),
        ]
    )
    return x.astype(dtype)


@pytest.mark.parametrize(
    "dtype,name", [(np.float32, "float_to_int"), (np.float64, "double_to_int")]
)
def test_float_to_int(lib, dtype, name):
    x = float_int_inputs(dtype)
    ranges = [(-(2**31), 2**31 - 1), (0, 2**32 - 1), (-(2**63), 2**63 - 1), (0, 2**64 - 1)]
    for dst, (lo, hi) in enumerate(ranges):
        for mode in range(4):
            got = call(lib, name, np.int64, x, extra=(dst, mode))
            want = ints_as_i64(int_convert_reference(x, mode, lo, hi))
            assert (got == want).all(), (dst, mode, x[got != want][:5])


@pytest.mark.parametrize("src", [0, 1, 2, 3, 4, 5])
def test_int_to_float_modes(lib, src):
    vals = random_ints(min(src, 3) if src < 4 else src - 2, 300)
    fmt = "f32" if src < 4 else "f64"
    arr = ints_as_i64(vals)
    for mode in range(4):
        got = call(lib, "int_to_fp", np.float64, arr, extra=(src, mode))
        want = np.array([round_exact(Fraction(v), fmt, MODES[mode]) for v in vals])
        assert (got == want).all(), (mode, np.array(vals, dtype=object)[got != want][:5])
