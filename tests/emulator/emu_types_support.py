"""Helpers of the emulator types tests (the test_emu_* files built on types_harness.cpp):
the harness's build inputs and ctypes signatures, calling one of its functions on NumPy
arrays, and the references several files share (exact rational rounding to a binary
format, 16-bit bit patterns, a correctly rounded fma). The ``lib`` fixture
(tests/emulator/conftest.py) builds the harness."""

from __future__ import annotations

import ctypes
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
INCLUDE = ROOT / "cudnnlite" / "runtime" / "emulator" / "include"
HARNESS = HERE / "types_harness.cpp"
FLAGS = ["-std=c++17", "-O2", "-fPIC", "-Wall", "-Wno-unknown-pragmas"]

P, I64, I32 = ctypes.c_void_p, ctypes.c_int64, ctypes.c_int
SIGNATURES = {
    "half_to_float": [P, P, I64],
    "float_to_half": [P, P, I64, I32],
    "double_to_half": [P, P, I64],
    "half_binop": [P, P, P, I64, I32],
    "half_fma": [P, P, P, P, I64, I32],
    "half_unary": [P, P, I64, I32],
    "bf16_to_float": [P, P, I64],
    "float_to_bf16": [P, P, I64, I32],
    "double_to_bf16": [P, P, I64],
    "bf16_binop": [P, P, P, I64, I32],
    "bf16_fma": [P, P, P, P, I64, I32],
    "bf16_unary": [P, P, I64, I32],
    "int_to_16": [P, P, I64, I32, I32, I32],
    "from16_to_int": [P, P, I64, I32, I32, I32],
    "float_to_int": [P, P, I64, I32, I32],
    "double_to_int": [P, P, I64, I32, I32],
    "int_to_fp": [P, P, I64, I32, I32],
    "f32_directed": [P, P, P, P, I64, I32, I32],
    "f64_directed": [P, P, P, P, I64, I32, I32],
    "f32_math": [P, P, I64, I32],
    "f64_math": [P, P, I64, I32],
    "f32_norm3": [P, P, P, P, I64],
    "u32_ops": [P, P, P, P, I64, I32],
    "u64_ops": [P, P, P, I64, I32],
    "atomics_run": [I32, I32, P],
}
INT_FUNCS = ["compile_checks", "rounding_mode_restored", "atomics_semantics", "ldst_ok"]
MODES = ["rn", "rz", "rd", "ru"]


def call(lib, name, out_dtype, *arrays, extra=()):
    arrays = [np.ascontiguousarray(a) for a in arrays]
    out = np.empty(arrays[0].shape, out_dtype)
    getattr(lib, name)(*[a.ctypes.data for a in arrays], out.ctypes.data, arrays[0].size, *extra)
    return out


# ------------------------------------------------------------------------------------------------
# Exact reference: round a rational to a binary format in a given mode.
# ------------------------------------------------------------------------------------------------
FORMATS = {
    "f16": (11, -14, 15),
    "bf16": (8, -126, 127),
    "f32": (24, -126, 127),
    "f64": (53, -1022, 1023),
}


def round_exact(q: Fraction, fmt: str, mode: str) -> float:
    """q rounded to fmt (precision, emin, emax) in mode; returned as the (exact) Python float."""
    p, emin, emax = FORMATS[fmt]
    if q == 0:
        return 0.0
    neg = q < 0
    a = -q if neg else q
    e = a.numerator.bit_length() - a.denominator.bit_length()
    if Fraction(2) ** e > a:
        e -= 1
    assert Fraction(2) ** e <= a < Fraction(2) ** (e + 1)
    ulp = Fraction(2) ** (max(e, emin) - p + 1)
    m = a / ulp
    k = m.numerator // m.denominator
    rem = m - k
    if mode == "rn":
        k += rem > Fraction(1, 2) or (rem == Fraction(1, 2) and k % 2 == 1)
    elif mode == "ru":
        k += rem != 0 and not neg
    elif mode == "rd":
        k += rem != 0 and neg
    r = k * ulp
    max_finite = (2 - Fraction(2) ** (1 - p)) * Fraction(2) ** emax
    if r > max_finite:
        away = mode == "rn" or (mode == "ru" and not neg) or (mode == "rd" and neg)
        r = math.inf if away else max_finite
    r = float(r)
    return -r if neg else r


def to_bits(values, fmt):
    v = np.asarray(values, dtype=np.float64)
    if fmt == "f16":
        return v.astype(np.float16).view(np.uint16)
    if fmt == "bf16":
        return (v.astype(np.float32).view(np.uint32) >> 16).astype(np.uint16)
    raise ValueError(fmt)


def f16(bits):
    return np.asarray(bits, np.uint16).view(np.float16)


def bf16_to_f32(bits):
    return (np.asarray(bits, np.uint32) << 16).view(np.float32)


def assert_bits_equal(got_bits, want_bits, values_of, label, inputs=None):
    """Bit-exact, except that any NaN matches any NaN."""
    got_bits = np.asarray(got_bits)
    want_bits = np.asarray(want_bits)
    gv, wv = values_of(got_bits), values_of(want_bits)
    ok = (got_bits == want_bits) | (np.isnan(gv) & np.isnan(wv))
    if not ok.all():
        idx = np.flatnonzero(~ok)[:8]
        detail = [
            (
                None if inputs is None else [np.asarray(x)[i] for x in inputs],
                hex(int(got_bits[i])),
                hex(int(want_bits[i])),
            )
            for i in idx
        ]
        pytest.fail(f"{label}: {int((~ok).sum())} mismatches, e.g. {detail}")


RNG = np.random.default_rng(20240607)


SPECIAL_16 = np.array(
    [
        0,
        0x8000,
        0x3C00,
        0xBC00,
        0x7C00,
        0xFC00,
        0x7E00,
        0x0001,
        0x8001,
        0x7BFF,
        0x3F80,
        0x7F80,
        0xFF80,
        0x7FC0,
        0x7F7F,
    ],
    np.uint16,
)


def random_16(n, specials=None):
    """Random 16-bit patterns; the first SPECIAL_16.size**2 entries hold every pair of special
    patterns when a is drawn with specials="repeat" and b with specials="tile"."""
    bits = RNG.integers(0, 65536, n, dtype=np.uint32).astype(np.uint16)
    if specials == "repeat":
        bits[: SPECIAL_16.size**2] = np.repeat(SPECIAL_16, SPECIAL_16.size)
    elif specials == "tile":
        bits[: SPECIAL_16.size**2] = np.tile(SPECIAL_16, SPECIAL_16.size)
    return bits


def fma_reference(a_vals, b_vals, c_vals, fmt):
    """Correctly rounded a*b+c: from float64 where the sum is exact there (TwoSum),
    else Fraction."""
    a, b, c = (np.asarray(v, np.float64) for v in (a_vals, b_vals, c_vals))
    with np.errstate(all="ignore"):
        p = a * b  # exact: <= 22 significant bits
        s = p + c
        bb = s - p
        err = (p - (s - bb)) + (c - bb)
        want = s.astype(np.float16).view(np.uint16) if fmt == "f16" else f64_to_bf16_rne(s)
    for i in np.flatnonzero(np.isfinite(s) & (err != 0)):
        q = Fraction(float(a[i])) * Fraction(float(b[i])) + Fraction(float(c[i]))
        want[i] = to_bits([round_exact(q, fmt, "rn")], fmt)[0]
    return want


def bf16_reference(x, mode):
    """float32 -> bfloat16 bits on the integer bit pattern (independent of the C++ code path)."""
    u = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    trunc = (u >> 16).astype(np.uint64)
    if mode == 0:  # round to nearest even: add 0x7fff + lsb, carry ripples into the exponent
        r = (u + 0x7FFF + (trunc & 1)) >> 16
    else:
        inexact = (u & 0xFFFF) != 0
        neg = (u >> 31) == 1
        r = trunc + ({1: 0, 2: inexact & neg, 3: inexact & ~neg}[mode])
    r = np.where(np.isnan(np.asarray(x, np.float32)), 0x7FFF, r)
    return r.astype(np.uint16)


def f64_to_bf16_rne(v):
    """float64 -> bfloat16 RNE, vectorised: round to odd at float32, then RNE on the bits."""
    v = np.asarray(v, np.float64)
    with np.errstate(all="ignore"):
        f = v.astype(np.float32)
        u = f.view(np.uint32).astype(np.int64)
        inexact = np.isfinite(v) & (f.astype(np.float64) != v)
        u = np.where(inexact & (np.abs(f.astype(np.float64)) > np.abs(v)), u - 1, u)
        u = np.where(inexact, u | 1, u).astype(np.uint32)
    return bf16_reference(u.view(np.float32), 0)
