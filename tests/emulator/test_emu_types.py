"""Tests of the emulator's CUDA types/math/atomics header (emu_types.h).

types_harness.cpp is compiled once per module with g++ into a shared library (the build itself
checks the static_asserts: vector-type layout, triviality of the 16-bit types, CUDA's min/max
overload resolution), then each family of functions runs over NumPy arrays and is compared with
an independent reference:

* NumPy's float16 (exact float16<->float32/float64 conversions, per-operation rounding);
* integer bit manipulation on float32 patterns for bfloat16;
* exact rational arithmetic (fractions.Fraction) rounded to the target format in the requested
  mode, for fma, directed rounding and integer conversions;
* float64 math (bisection on math.erf/erfc for the inverse error functions).
"""

from __future__ import annotations

import ctypes
import math
import shutil
import subprocess
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


# The emulator builds with -march=native (hardware F16C conversions, FMA) unless
# CUDNNLITE_EMU_PORTABLE=1: both builds of the header must give CUDA's results.
@pytest.fixture(scope="module", params=["portable", "native"])
def lib(tmp_path_factory, request):
    if shutil.which("g++") is None:
        pytest.skip("g++ is not available")
    out = tmp_path_factory.mktemp("emu_types") / "types_harness.so"
    arch = ["-march=native"] if request.param == "native" else []
    cmd = [
        "g++",
        *FLAGS,
        *arch,
        "-shared",
        "-pthread",
        "-I",
        str(INCLUDE),
        str(HARNESS),
        "-o",
        str(out),
    ]
    res = subprocess.run(cmd, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    # Kernels include this header in every emulator build: it must not add warnings.
    assert "emu_types.h" not in res.stderr, res.stderr
    so = ctypes.CDLL(str(out))
    for name, args in SIGNATURES.items():
        fn = getattr(so, name)
        fn.argtypes, fn.restype = args, None
    for name in INT_FUNCS:
        fn = getattr(so, name)
        fn.argtypes, fn.restype = [], ctypes.c_int
    return so


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


def same_or_both_nan(got, want):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    return (got == want) | (np.isnan(got) & np.isnan(want))


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


RNG = np.random.default_rng(20240607)

# The inputs deliberately include NaNs (signalling ones among the bf16 patterns), infinities and
# overflowing values; NumPy's RuntimeWarnings about them are expected noise here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


# ------------------------------------------------------------------------------------------------
# Compile-time properties and plain usage
# ------------------------------------------------------------------------------------------------
def test_compile_checks_and_usage(lib):
    # The static_asserts (vector sizes/alignments, trivial 16-bit types, min/max overloads)
    # already passed when the fixture compiled the harness.
    assert lib.compile_checks() == 1
    assert lib.ldst_ok() == 1
    assert lib.rounding_mode_restored() == 1


@pytest.mark.parametrize(
    "defines",
    [
        [],
        ["-D__CUDA_NO_HALF_CONVERSIONS__", "-D__CUDA_NO_BFLOAT16_CONVERSIONS__"],
        [
            "-D__CUDA_NO_HALF_OPERATORS__",
            "-D__CUDA_NO_HALF2_OPERATORS__",
            "-D__CUDA_NO_BFLOAT16_OPERATORS__",
            "-D__CUDA_NO_BFLOAT162_OPERATORS__",
        ],
    ],
)
def test_header_standalone_and_opt_outs(tmp_path, defines):
    """The header compiles on its own, after core-style macro definitions, warning-free with
    -Wextra, and honours CUDA's opt-out macros for the 16-bit conversions/operators."""
    if shutil.which("g++") is None:
        pytest.skip("g++ is not available")
    src = tmp_path / "standalone.cpp"
    src.write_text(
        "#define __device__\n#define __host__\n"
        "#define __forceinline__ inline __attribute__((always_inline))\n"
        '#include "emu_types.h"\n#include "emu_types.h"\n'
        "__device__ __half f(__half a, __half b) { return __hfma(a, b, __hadd(a, b)); }\n"
        "__device__ float g(float x) { return __saturatef(x) + erfinvf(x) + __expf(x); }\n"
    )
    res = subprocess.run(
        ["g++", *FLAGS, "-Wextra", *defines, "-fsyntax-only", "-I", str(INCLUDE), str(src)],
        capture_output=True,
        text=True,
    )
    assert res.returncode == 0, res.stderr
    assert "warning" not in res.stderr, res.stderr


# ------------------------------------------------------------------------------------------------
# __half conversions
# ------------------------------------------------------------------------------------------------
def test_half_to_float_exhaustive(lib):
    bits = np.arange(65536, dtype=np.uint16)
    got = call(lib, "half_to_float", np.float32, bits)
    want = bits.view(np.float16).astype(np.float32)
    ok = (got.view(np.uint32) == want.view(np.uint32)) | (np.isnan(got) & np.isnan(want))
    assert ok.all(), bits[~ok][:10]


def half_edge_floats():
    """Float32 values around every interesting place of binary16."""
    h = np.arange(0x7C00, dtype=np.uint32)  # every finite non-negative half
    hv = h.astype(np.uint16).view(np.float16).astype(np.float32)
    nxt = np.append(hv[1:], np.float32(65536.0))  # 65536 = where max finite's tie lies above
    mid = ((hv.astype(np.float64) + nxt.astype(np.float64)) / 2).astype(np.float32)  # exact ties
    mids = np.concatenate(
        [mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(0))]
    )
    special = np.array(
        [
            0.0,
            2.0**-24,
            2.0**-25,
            2.0**-26,
            3 * 2.0**-26,
            2.0**-14,
            2.0**-15,
            65504,
            65519.996,
            65520,
            65520.004,
            65535.99,
            65536,
            1e5,
            3.4e38,
            np.inf,
            1e-40,
            1e-45,
        ],
        np.float32,
    )
    vals = np.concatenate([hv, mids, special])
    vals = np.concatenate([vals, -vals, np.array([np.nan, -np.nan], np.float32)])
    return vals.astype(np.float32)


def test_float_to_half_rn(lib):
    n = 1_000_000
    random_bits = RNG.integers(0, 2**32, n // 2, dtype=np.uint64).astype(np.uint32).view(np.float32)
    in_range = (RNG.choice([-1, 1], n // 2) * np.exp2(RNG.uniform(-27, 17, n // 2))).astype(
        np.float32
    )
    x = np.concatenate([random_bits, in_range, half_edge_floats()])
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)
    for mode in (0, 4, 5, 6):  # _rn, __float2half, constructor, half2
        got = call(lib, "float_to_half", np.uint16, x, extra=(mode,))
        assert_bits_equal(got, want, f16, f"float->half mode {mode}", [x])
        assert (got[np.isnan(x)] == 0x7FFF).all()  # CUDA's canonical NaN


@pytest.mark.parametrize("mode", [1, 2, 3])
def test_float_to_half_directed(lib, mode):
    n = 300_000
    x = np.concatenate(
        [
            RNG.integers(0, 2**32, n // 2, dtype=np.uint64).astype(np.uint32).view(np.float32),
            (RNG.choice([-1, 1], n // 2) * np.exp2(RNG.uniform(-27, 17, n // 2))).astype(
                np.float32
            ),
            half_edge_floats(),
        ]
    )
    # Reference: NumPy's round-to-nearest, then step one half-ulp toward the required side when the
    # nearest value lies on the wrong side of x.
    with np.errstate(over="ignore", invalid="ignore"):
        rn = x.astype(np.float16)
        back = rn.astype(np.float32)
        if mode == 1:  # toward zero
            step = np.abs(back) > np.abs(x)
            want = np.where(step, np.nextafter(rn, np.float16(0)), rn)
        elif mode == 2:  # down
            want = np.where(back > x, np.nextafter(rn, np.float16(-np.inf)), rn)
        else:  # up
            want = np.where(back < x, np.nextafter(rn, np.float16(np.inf)), rn)
    got = call(lib, "float_to_half", np.uint16, x, extra=(mode,))
    assert_bits_equal(got, want.view(np.uint16), f16, f"float->half {MODES[mode]}", [x])


def test_double_to_half(lib):
    n = 200_000
    h = (
        RNG.integers(0, 0x7C00, n, dtype=np.uint32)
        .astype(np.uint16)
        .view(np.float16)
        .astype(np.float64)
    )
    ulp = np.spacing(h.astype(np.float16)).astype(np.float64)
    # ties and near-ties that double-rounding through float32 would get wrong
    x = np.concatenate(
        [
            h + ulp / 2,
            h + ulp / 2 + h * 2.0**-40,
            h + ulp / 2 - h * 2.0**-40,
            RNG.standard_normal(n) * 1e3,
            np.array([1e300, 65519.999999, 65520.0, 2.0**-25, 2.0**-25 * (1 + 2**-40)]),
        ]
    )
    x = np.concatenate([x, -x, [np.nan]])
    with np.errstate(over="ignore"):
        want = x.astype(np.float16).view(np.uint16)  # NumPy rounds float64 -> float16 directly
    got = call(lib, "double_to_half", np.uint16, x)
    assert_bits_equal(got, want, f16, "double->half", [x])


# ------------------------------------------------------------------------------------------------
# __half arithmetic
# ------------------------------------------------------------------------------------------------
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


@pytest.mark.parametrize("op,name", [(0, "add"), (1, "sub"), (2, "mul"), (3, "div")])
def test_half_arithmetic_per_op_rounding(lib, op, name):
    n = 300_000
    a, b = random_16(n, "repeat"), random_16(n, "tile")
    # small-magnitude pairs too, where subnormal results and cancellation happen
    a[n // 2 : 3 * n // 4] &= 0x87FF
    b[n // 2 : 3 * n // 4] &= 0x87FF
    fa, fb = f16(a), f16(b)
    with np.errstate(all="ignore"):
        want = {0: fa + fb, 1: fa - fb, 2: fa * fb, 3: fa / fb}[op].view(np.uint16)
    for variant in (op, op + 4):  # intrinsic and operator
        got = call(lib, "half_binop", np.uint16, a, b, extra=(variant,))
        assert_bits_equal(got, want, f16, f"half {name} ({variant})", [fa, fb])
    if op in (0, 2):  # half2 lanes
        got = call(lib, "half_binop", np.uint16, a, b, extra=(13 if op == 0 else 14,))
        assert_bits_equal(got, want, f16, f"half2 {name}", [fa, fb])


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


def test_half_fma_single_rounding(lib):
    n = 200_000
    a, b, c = random_16(n), random_16(n), random_16(n)
    a[: n // 2] = (a[: n // 2] & 0x87FF) | 0x3000  # magnitudes where a*b and c overlap
    b[: n // 2] = (b[: n // 2] & 0x87FF) | 0x3000
    c[: n // 2] = (c[: n // 2] & 0x87FF) | 0x2000
    # a case double rounding gets wrong (63.9 exactly rounded, 63.94 through float32), so
    # the check below does not depend on what the shared generator drew for this test
    a[-1], b[-1], c[-1] = 0x9BC9, 0xF41B, 0x9662
    got = call(lib, "half_fma", np.uint16, a, b, c, extra=(0,))
    want = fma_reference(f16(a), f16(b), f16(c), "f16")
    assert_bits_equal(got, want, f16, "__hfma", [f16(a), f16(b), f16(c)])
    # double rounding (a*b+c in float32, then to half) would differ somewhere in this set
    with np.errstate(all="ignore"):
        twice = (
            f16(a).astype(np.float32) * f16(b).astype(np.float32) + f16(c).astype(np.float32)
        ).astype(np.float16)
    assert (twice.view(np.uint16) != want).any()
    got2 = call(lib, "half_fma", np.uint16, a, b, c, extra=(3,))  # __hfma2 lane
    assert_bits_equal(got2, want, f16, "__hfma2", [f16(a), f16(b), f16(c)])
    # relu / sat variants
    wv = f16(want).astype(np.float64)
    relu = call(lib, "half_fma", np.uint16, a, b, c, extra=(1,))
    exp_relu = np.where(np.isnan(wv), np.nan, np.where(wv < 0, 0.0, wv))
    assert same_or_both_nan(f16(relu), exp_relu).all()
    assert ((relu == 0x7FFF) | ~np.isnan(wv)).all()
    sat = call(lib, "half_fma", np.uint16, a, b, c, extra=(2,))
    exp_sat = np.where(np.isnan(wv), 0.0, np.clip(wv, 0.0, 1.0))
    assert (f16(sat).astype(np.float64) == exp_sat).all() and not (sat == 0x8000).any()


def minmax_reference(fa, fb, bits_a, bits_b, op):
    fa = np.asarray(fa, np.float64)
    fb = np.asarray(fb, np.float64)
    na, nb = np.isnan(fa), np.isnan(fb)
    neg_a = (bits_a & 0x8000) != 0
    if op in (8, 10):  # max: larger; +0 beats -0
        pick_a = (fa > fb) | ((fa == fb) & ~neg_a)
    else:  # min: smaller; -0 beats +0
        pick_a = (fa < fb) | ((fa == fb) & neg_a)
    out = np.where(pick_a, bits_a, bits_b).astype(np.uint16)
    if op in (8, 9):
        out = np.where(na & ~nb, bits_b, np.where(nb & ~na, bits_a, out))
        out = np.where(na & nb, 0x7FFF, out)
    else:
        out = np.where(na | nb, 0x7FFF, out)
    return out.astype(np.uint16)


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_16bit_compare_minmax(lib, fmt):
    n = 100_000
    a, b = random_16(n, "repeat"), random_16(n, "tile")
    b[n // 2 : 3 * n // 4] = a[n // 2 : 3 * n // 4]  # equal values
    b[-1000:] = a[-1000:] ^ 0x8000  # opposite signs (incl. +0/-0 pairs)
    a[-10:], b[-10:] = 0, 0x8000
    vals = f16 if fmt == "f16" else bf16_to_f32
    name = "half_binop" if fmt == "f16" else "bf16_binop"
    fa, fb = vals(a).astype(np.float64), vals(b).astype(np.float64)
    with np.errstate(invalid="ignore"):
        ordered = {
            20: fa == fb,
            21: (fa < fb) | (fa > fb),
            22: fa < fb,
            23: fa <= fb,
            24: fa > fb,
            25: fa >= fb,
        }
    cmp = dict(ordered)
    cmp.update(
        {
            26: ~ordered[21],
            27: ~ordered[20],
            28: ~ordered[25],
            29: ~ordered[24],
            30: ~ordered[23],
            31: ~ordered[22],
            32: ~ordered[20],
        }
    )
    for op, want in cmp.items():
        got = call(lib, name, np.uint16, a, b, extra=(op,))
        assert (got == want.astype(np.uint16)).all(), op
    for op in (8, 9, 10, 11):
        got = call(lib, name, np.uint16, a, b, extra=(op,))
        want = minmax_reference(fa, fb, a, b, op)
        assert (got == want).all(), (op, a[got != want][:5], b[got != want][:5])
    # saturating add: clamp to [0, 1], NaN -> +0
    got = call(lib, name, np.uint16, a, b, extra=(12,))
    plain = vals(call(lib, name, np.uint16, a, b, extra=(0,))).astype(np.float64)
    want = np.where(np.isnan(plain), 0.0, np.clip(plain, 0.0, 1.0))
    assert (vals(got).astype(np.float64) == want).all() and not (got == 0x8000).any()


@pytest.mark.parametrize("fmt", ["f16", "bf16"])
def test_16bit_unary(lib, fmt):
    bits = np.arange(65536, dtype=np.uint32).astype(np.uint16)
    name = "half_unary" if fmt == "f16" else "bf16_unary"
    vals = (f16(bits) if fmt == "f16" else bf16_to_f32(bits)).astype(np.float64)

    def rn(v):  # float64 -> 16-bit, round to nearest even
        if fmt == "f16":
            return np.asarray(v).astype(np.float16).view(np.uint16)
        return f64_to_bf16_rne(v)

    back = f16 if fmt == "f16" else bf16_to_f32
    assert (call(lib, name, np.uint16, bits, extra=(6,)) == bits ^ 0x8000).all()  # __hneg
    assert (call(lib, name, np.uint16, bits, extra=(7,)) == bits & 0x7FFF).all()  # __habs
    isnan = call(lib, name, np.uint16, bits, extra=(8,))
    assert (isnan.astype(bool) == np.isnan(vals)).all()
    isinf = call(lib, name, np.uint16, bits, extra=(9,)).view(np.int16)
    assert (isinf == np.where(np.isinf(vals), np.sign(vals), 0)).all()
    with np.errstate(all="ignore"):
        assert_bits_equal(
            call(lib, name, np.uint16, bits, extra=(10,)), rn(np.floor(vals)), back, "hfloor"
        )
        assert_bits_equal(
            call(lib, name, np.uint16, bits, extra=(11,)), rn(np.rint(vals)), back, "hrint"
        )
        # transcendental functions: computed in float and rounded once; allow one 16-bit ulp
        for op, fn in [
            (0, np.exp),
            (1, np.log),
            (2, np.sqrt),
            (3, lambda v: 1 / np.sqrt(v)),
            (4, np.tanh),
            (5, lambda v: 1 / v),
            (12, np.exp2),
        ]:
            got = call(lib, name, np.uint16, bits, extra=(op,)).astype(np.int64)
            want = rn(fn(vals)).astype(np.int64)
            gv, wv = back(got.astype(np.uint16)), back(want.astype(np.uint16))
            close = (np.abs(got - want) <= 1) & (np.sign(gv) == np.sign(wv))
            ok = close | (np.isnan(gv) & np.isnan(wv)) | (gv == wv)
            assert ok.all(), (op, bits[~ok][:5])
            both_nan = np.isnan(gv) & np.isnan(wv)
            assert (got == want)[~both_nan].mean() > 0.999, op


# ------------------------------------------------------------------------------------------------
# bfloat16
# ------------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------------
# Math functions
# ------------------------------------------------------------------------------------------------
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


# ------------------------------------------------------------------------------------------------
# Integer intrinsics
# ------------------------------------------------------------------------------------------------
M32 = (1 << 32) - 1


def s32(v):
    return v - (1 << 32) if v & (1 << 31) else v


def s8(v):
    return v - 256 if v & 0x80 else v


def s16(v):
    return v - 65536 if v & 0x8000 else v


def sext24(v):
    v &= 0xFFFFFF
    return v - (1 << 24) if v & (1 << 23) else v


INT_REF = {
    0: lambda x, y, z: bin(x).count("1"),
    1: lambda x, y, z: 32 - x.bit_length(),
    2: lambda x, y, z: (x & -x).bit_length(),
    3: lambda x, y, z: int(f"{x:032b}"[::-1], 2),
    4: lambda x, y, z: sum(
        (((y << 32 | x) >> (8 * ((z >> (4 * i)) & 7))) & 0xFF) << (8 * i) for i in range(4)
    ),
    5: lambda x, y, z: (((y << 32 | x) << (z & 31)) >> 32) & M32,
    6: lambda x, y, z: ((y << 32 | x) >> (z & 31)) & M32,
    7: lambda x, y, z: (((y << 32 | x) << min(z, 32)) >> 32) & M32,
    8: lambda x, y, z: ((y << 32 | x) >> min(z, 32)) & M32,
    9: lambda x, y, z: ((s32(x) * s32(y)) >> 32) & M32,
    10: lambda x, y, z: (x * y) >> 32,
    11: lambda x, y, z: (sext24(x) * sext24(y)) & M32,
    12: lambda x, y, z: ((x & 0xFFFFFF) * (y & 0xFFFFFF)) & M32,
    13: lambda x, y, z: (abs(s32(x) - s32(y)) + z) & M32,
    14: lambda x, y, z: (abs(x - y) + z) & M32,
    15: lambda x, y, z: ((s32(x) + s32(y)) >> 1) & M32,
    16: lambda x, y, z: ((s32(x) + s32(y) + 1) >> 1) & M32,
    17: lambda x, y, z: (x + y) >> 1,
    18: lambda x, y, z: (x + y + 1) >> 1,
    19: lambda x, y, z: (
        (sum(s8((x >> 8 * i) & 255) * s8((y >> 8 * i) & 255) for i in range(4)) + s32(z)) & M32
    ),
    20: lambda x, y, z: (
        (sum(((x >> 8 * i) & 255) * ((y >> 8 * i) & 255) for i in range(4)) + z) & M32
    ),
    21: lambda x, y, z: (
        (s16(x & 0xFFFF) * s8(y & 255) + s16(x >> 16) * s8((y >> 8) & 255) + s32(z)) & M32
    ),
    22: lambda x, y, z: ((x & 0xFFFF) * ((y >> 16) & 255) + (x >> 16) * (y >> 24) + z) & M32,
}


def test_u32_intrinsics(lib):
    n = 3000
    edge = [0, 1, 2, 0x80000000, 0x7FFFFFFF, 0xFFFFFFFF, 0x00800000, 0xFF800000, 0x12345678]
    a = np.concatenate(
        [RNG.integers(0, 2**32, n, dtype=np.uint64), np.repeat(edge, len(edge))]
    ).astype(np.uint32)
    b = np.concatenate(
        [RNG.integers(0, 2**32, n, dtype=np.uint64), np.tile(edge, len(edge))]
    ).astype(np.uint32)
    c_full = RNG.integers(0, 2**32, a.size, dtype=np.uint64).astype(np.uint32)
    c_small = RNG.integers(0, 48, a.size, dtype=np.uint64).astype(np.uint32)
    for op, ref in INT_REF.items():
        for cc in (c_small, c_full) if op in (5, 6, 7, 8) else (c_full,):
            got = call(lib, "u32_ops", np.uint32, a, b, cc, extra=(op,))
            want = np.array(
                [ref(int(x), int(y), int(z)) for x, y, z in zip(a, b, cc, strict=False)], np.uint64
            ).astype(np.uint32)
            bad = got != want
            assert not bad.any(), (
                op,
                [
                    (hex(a[i]), hex(b[i]), hex(cc[i]), hex(got[i]), hex(want[i]))
                    for i in np.flatnonzero(bad)[:3]
                ],
            )


def test_u64_intrinsics(lib):
    n = 2000
    edge = [0, 1, 1 << 63, (1 << 64) - 1, (1 << 63) - 1, 0x0123456789ABCDEF]
    a = np.array(
        [int(v) for v in RNG.integers(0, 2**63, n, dtype=np.uint64) * 2 + 1] + edge * len(edge),
        dtype=np.uint64,
    )
    b = np.array(
        [int(v) for v in RNG.integers(0, 2**63, n, dtype=np.uint64)]
        + [e for e in edge for _ in edge],
        dtype=np.uint64,
    )
    m64 = (1 << 64) - 1

    def sg(v):
        return v - (1 << 64) if v >> 63 else v

    refs = {
        0: lambda x, y: bin(x).count("1"),
        1: lambda x, y: 64 - x.bit_length(),
        2: lambda x, y: (x & -x).bit_length(),
        3: lambda x, y: int(f"{x:064b}"[::-1], 2),
        4: lambda x, y: ((sg(x) * sg(y)) >> 64) & m64,
        5: lambda x, y: (x * y) >> 64,
    }
    for op, ref in refs.items():
        got = call(lib, "u64_ops", np.uint64, a, b, extra=(op,))
        want = np.array([ref(int(x), int(y)) for x, y in zip(a, b, strict=False)], dtype=np.uint64)
        assert (got == want).all(), op


# ------------------------------------------------------------------------------------------------
# Atomics
# ------------------------------------------------------------------------------------------------
def test_atomics_concurrent(lib):
    T, N = 8, 20_000
    out = np.zeros(32, np.int64)
    lib.atomics_run(T, N, out.ctypes.data)
    k = T * N
    names = [
        "i_add",
        "i_sub",
        "u_add",
        "ull_add",
        "f_add",
        "d_add*2",
        "i_max",
        "i_min",
        "u_max",
        "ull_max",
        "ll_min",
        "u_inc",
        "u_dec",
        "i_cas",
        "ull_cas",
        "us_cas",
        "exch_total",
        "u_or",
        "u_xor",
        "h_add",
        "h2_lo",
        "h2_hi",
        "bf16_add",
    ]
    want = [
        k,
        -2 * k,
        3 * k,
        5 * k,
        k,
        k,
        k - 1,
        -(k - 1),
        k - 1,
        k - 1,
        -(k - 1),
        k % 1000,
        (-k) % 778,
        k,
        7 * k,
        k % 65536,
        k * (k + 1) // 2,
        (1 << T) - 1,
        0 if k % 2 == 0 else 0x5A5A5A5A,
        T * 100,
        T * 100,
        2 * T * 100,
        T * 8,
    ]
    got = dict(zip(names, out[: len(names)].tolist(), strict=False))
    assert got == dict(zip(names, want, strict=False))


def test_atomics_semantics(lib):
    assert lib.atomics_semantics() == 0
