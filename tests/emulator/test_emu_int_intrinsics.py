"""The emulator's 32- and 64-bit integer intrinsics (__popc, __byte_perm, __funnelshift,
__mulhi, __dp4a, ..., emu_types.h) against Python integer arithmetic."""

from __future__ import annotations

import numpy as np
import pytest
from emu_types_support import RNG, call

# The inputs deliberately include NaNs (signalling ones among the bf16 patterns), infinities and
# overflowing values; NumPy's RuntimeWarnings about them are expected noise here.
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")


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
