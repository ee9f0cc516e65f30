"""The emulator's __half (emu_types.h) against NumPy's float16: conversions from float and
double in every rounding mode, per-operation rounding of the arithmetic, a single rounding
in fma, and the 16-bit compare, min/max and unary functions (half and bfloat16)."""

from __future__ import annotations

import numpy as np
import pytest
from emu_types_support import (
    MODES,
    RNG,
    assert_bits_equal,
    bf16_to_f32,
    call,
    f16,
    f64_to_bf16_rne,
    fma_reference,
    random_16,
)

# The inputs deliberately include NaNs (signalling ones among the bf16 patterns), infinities and
# overflowing values; NumPy's RuntimeWarnings about them are expected noise here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


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


def same_or_both_nan(got, want):
    got = np.asarray(got, np.float64)
    want = np.asarray(want, np.float64)
    return (got == want) | (np.isnan(got) & np.isnan(want))


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
