"""The emulator's atomics (emu_types.h): totals after concurrent updates from several
threads, and the harness's single-thread semantics checks."""

from __future__ import annotations

import numpy as np
import pytest

# The inputs deliberately include NaNs (signalling ones among the bf16 patterns), infinities and
# overflowing values; NumPy's RuntimeWarnings about them are expected noise here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


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
