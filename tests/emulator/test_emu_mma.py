"""The warp-level tensor-core layer (cuda_src/common/mma.cuh) through
cuda_src/selftest/mma_selftest.cu, on every backend.

The expected per-lane registers are built here from the PTX ISA's fragment tables
(written out below, independently of the emulator's code), so these tests pin the
layout lane by lane: a kernel that assumes another layout fails on the CPU as on a GPU.
Inputs are small integers, so every product and sum is exact in fp32 and the results
must match bit for bit on any backend (no summation-order tolerance needed); the fp64
MMA is also checked with real-valued inputs against the exact sum, at the bound stated
with its tests.
"""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

try:
    import ml_dtypes
except ImportError:  # (the GPU box may lack it: the bf16 cases skip)
    ml_dtypes = None

from cudnnlite.runtime import backend_by_name
from cudnnlite.runtime.caps import capabilities
from cudnnlite.runtime.selftest import MMA_SELFTEST
from cudnnlite.testing import to_backend, to_numpy

LANES = np.arange(32)
G, T = LANES >> 2, LANES & 3  # groupID, threadID_in_group


def _kernel(backend: str, name: str):
    return backend_by_name(backend).module(MMA_SELFTEST).get_function(name)


def _needs_sm80(backend: str) -> None:
    if not capabilities(backend_by_name(backend)).bf16_tensor_cores:
        pytest.skip("needs sm_80+")


def _bits16(values: np.ndarray, dtype) -> np.ndarray:
    return values.astype(dtype).view(np.uint16).astype(np.uint32)


def _pair(m: np.ndarray, rows: np.ndarray, cols: np.ndarray, dtype) -> np.ndarray:
    """One b32 register per lane: m[rows, cols] low half, m[rows, cols + 1] high half."""
    return _bits16(m[rows, cols], dtype) | (_bits16(m[rows, cols + 1], dtype) << 16)


# PTX ISA, mma.m16n8k16 (.f16/.bf16): A 16x16 row, B 16x8 col, C/D 16x8 f32.
def _a_regs_16(a: np.ndarray, dtype) -> np.ndarray:
    regs = [(G, 2 * T), (G + 8, 2 * T), (G, 2 * T + 8), (G + 8, 2 * T + 8)]
    return np.stack([_pair(a, r, c, dtype) for r, c in regs], axis=1)


def _b_regs_16(b: np.ndarray, dtype) -> np.ndarray:
    bt = b.T  # (n, k): a register holds B[2t, 2t+1][g] = bt[g][2t, 2t+1]
    return np.stack([_pair(bt, G, 2 * T, dtype), _pair(bt, G, 2 * T + 8, dtype)], axis=1)


def _c_regs(c: np.ndarray) -> np.ndarray:
    cells = [(G, 2 * T), (G, 2 * T + 1), (G + 8, 2 * T), (G + 8, 2 * T + 1)]
    return np.stack([c[r, col] for r, col in cells], axis=1).astype(np.float32)


def _d_matrix(d_regs: np.ndarray) -> np.ndarray:
    d = np.full((16, 8), np.nan, np.float32)
    cells = [(G, 2 * T), (G, 2 * T + 1), (G + 8, 2 * T), (G + 8, 2 * T + 1)]
    for i, (r, col) in enumerate(cells):
        d[r, col] = d_regs[:, i]
    return d


def _run_mma(backend: str, name: str, a_regs, b_regs, c_regs) -> np.ndarray:
    d = to_backend(np.full((32, 4), np.nan, np.float32), backend)
    args = [to_backend(np.ascontiguousarray(v), backend) for v in (a_regs, b_regs, c_regs)]
    _kernel(backend, name)(1, 32, (*args, d))
    return to_numpy(d)


@pytest.mark.parametrize("short", ["f16", "bf16"])
def test_mma_m16n8k16_layout(backend: str, short: str) -> None:
    if short == "bf16":
        _needs_sm80(backend)
        if ml_dtypes is None:
            pytest.skip("bfloat16 arrays need ml_dtypes")
    dtype = np.float16 if short == "f16" else ml_dtypes.bfloat16
    rng = np.random.default_rng(0)
    a = rng.integers(-8, 9, (16, 16)).astype(np.float64)
    b = rng.integers(-8, 9, (16, 8)).astype(np.float64)
    c = rng.integers(-64, 65, (16, 8)).astype(np.float64)
    d_regs = _run_mma(
        backend, f"mma_regs_{short}", _a_regs_16(a, dtype), _b_regs_16(b, dtype), _c_regs(c)
    )
    np.testing.assert_array_equal(_d_matrix(d_regs), (a @ b + c).astype(np.float32))


def test_mma_m16n8k16_single_elements(backend: str) -> None:
    # One nonzero per operand: D[i][j] = A[i][k] * B[k][j] lights exactly one cell, for a
    # spread of (i, k, j): any swapped index in the layout moves or loses it.
    for i, k, j in [(0, 0, 0), (9, 3, 5), (7, 15, 1), (15, 8, 7), (3, 10, 6)]:
        a = np.zeros((16, 16))
        b = np.zeros((16, 8))
        a[i, k], b[k, j] = 3.0, 5.0
        d_regs = _run_mma(
            backend,
            "mma_regs_f16",
            _a_regs_16(a, np.float16),
            _b_regs_16(b, np.float16),
            np.zeros((32, 4), np.float32),
        )
        want = np.zeros((16, 8), np.float32)
        want[i, j] = 15.0
        np.testing.assert_array_equal(_d_matrix(d_regs), want, err_msg=f"{(i, k, j)}")


def _tf32_bits(v: np.ndarray) -> np.ndarray:
    return v.astype(np.float32).view(np.uint32)


def test_mma_m16n8k8_tf32_layout(backend: str) -> None:
    _needs_sm80(backend)
    rng = np.random.default_rng(1)
    a = rng.integers(-8, 9, (16, 8)).astype(np.float64)
    b = rng.integers(-8, 9, (8, 8)).astype(np.float64)
    c = rng.integers(-64, 65, (16, 8)).astype(np.float64)
    # PTX ISA, mma.m16n8k8 .tf32: a0 A[g][t], a1 A[g+8][t], a2 A[g][t+4], a3 A[g+8][t+4];
    # b0 B[t][g], b1 B[t+4][g].
    a_regs = np.stack(
        [_tf32_bits(a[r, col]) for r, col in [(G, T), (G + 8, T), (G, T + 4), (G + 8, T + 4)]],
        axis=1,
    )
    b_regs = np.stack([_tf32_bits(b[T, G]), _tf32_bits(b[T + 4, G])], axis=1)
    d_regs = _run_mma(backend, "mma_regs_tf32", a_regs, b_regs, _c_regs(c))
    np.testing.assert_array_equal(_d_matrix(d_regs), (a @ b + c).astype(np.float32))


def test_mma_tf32_reads_19_bits(backend: str) -> None:
    _needs_sm80(backend)
    # 1 + 2^-12 has bits below TF32's 10-bit mantissa: the hardware ignores them.
    a = np.zeros((16, 8), np.float32)
    b = np.zeros((8, 8), np.float32)
    a[0, 0], b[0, 0] = 1 + 2.0**-12, 1.0
    a_regs = np.zeros((32, 4), np.uint32)
    b_regs = np.zeros((32, 2), np.uint32)
    a_regs[0, 0] = _tf32_bits(a[0, 0])  # lane 0 (g=0, t=0) holds A[0][0] in a0
    b_regs[0, 0] = _tf32_bits(b[0, 0])
    d = _d_matrix(_run_mma(backend, "mma_regs_tf32", a_regs, b_regs, np.zeros((32, 4), np.float32)))
    assert d[0, 0] == 1.0


def test_to_tf32_rounding(backend: str) -> None:
    """cl::mma::to_tf32: nearest to a 10-bit mantissa, low 13 bits zero; a tie (dropped
    bits exactly 0x1000) goes to even on the emulator and sm_90+ (cvt.rn), away from zero
    on sm_80-89 (cvt.rna, the only TF32 conversion there); Inf kept, NaN stays NaN."""
    _needs_sm80(backend)
    sm = capabilities(backend_by_name(backend)).sm
    away = 80 <= sm < 90
    cases = [  # input bits, rounded (ties to even), rounded (ties away)
        (0x3F800000, 0x3F800000, 0x3F800000),  # 1.0: exact
        (0x3F800FFF, 0x3F800000, 0x3F800000),  # below half: down
        (0x3F801001, 0x3F802000, 0x3F802000),  # above half: up
        (0x3F801000, 0x3F800000, 0x3F802000),  # tie, even kept LSB: even / away
        (0x3F803000, 0x3F804000, 0x3F804000),  # tie, odd kept LSB: up either way
        (0xBF801000, 0xBF800000, 0xBF802000),  # negative tie
        (0x3FFFF000, 0x40000000, 0x40000000),  # carry into the exponent
        (0x7F7FFFFF, 0x7F800000, 0x7F800000),  # largest float rounds to Inf
        (0x00001000, 0x00000000, 0x00002000),  # subnormal tie
        (0x7F800000, 0x7F800000, 0x7F800000),  # Inf
        (0xFF800000, 0xFF800000, 0xFF800000),  # -Inf
    ]
    x = np.array([c[0] for c in cases] + [0x7FC00000, 0x7FFFFFFF], np.uint32).view(np.float32)
    y = to_backend(np.zeros(x.size, np.uint32), backend)
    _kernel(backend, "tf32_round")(1, 32, (to_backend(x, backend), y, np.int32(x.size)))
    got = to_numpy(y)
    want = [c[2] if away else c[1] for c in cases]
    assert [hex(v) for v in got[: len(cases)]] == [hex(v) for v in want]
    assert np.isnan(got[len(cases) :].view(np.float32)).all()  # NaN stays NaN


@pytest.mark.parametrize("count", [1, 2, 4])
@pytest.mark.parametrize("trans", [0, 1])
def test_ldmatrix_layout(backend: str, count: int, trans: int) -> None:
    tile = np.arange(32 * 8, dtype=np.uint16).reshape(32, 8) * 3 + 1
    # Lane l addresses row rows[l]: a permutation, so a wrong address-to-row mapping shows.
    rows = np.random.default_rng(2).permutation(32).astype(np.int32)
    out = to_backend(np.zeros((32, 4), np.uint32), backend)
    _kernel(backend, "ldmatrix_regs")(
        1,
        32,
        (
            to_backend(tile, backend),
            to_backend(rows, backend),
            out,
            np.int32(count),
            np.int32(trans),
        ),
    )
    got = to_numpy(out)
    for i in range(count):
        # Matrix i: its row r is the tile row addressed by lane 8i + r.
        m = tile[rows[8 * i : 8 * i + 8]]
        if trans:
            m = m.T
        lo = m[G, 2 * T].astype(np.uint32)
        hi = m[G, 2 * T + 1].astype(np.uint32)
        np.testing.assert_array_equal(got[:, i], lo | (hi << 16), err_msg=f"matrix {i}")


@pytest.mark.parametrize("nbytes", [4, 8, 16])
def test_cp_async_copies_and_zero_fills(backend: str, nbytes: int) -> None:
    n = 101  # not a multiple of any copy size: the tail is zero-filled
    src = np.arange(1, 129, dtype=np.float32)
    dst = to_backend(np.full(128, -1.0, np.float32), backend)
    _kernel(backend, "cp_async_roundtrip")(
        1, 32, (to_backend(src, backend), dst, np.int32(n), np.int32(2), np.int32(nbytes))
    )
    want = src.copy()
    per = nbytes // 4
    for first in range(0, 128, per):
        if first + per > n:
            want[first : first + per] = 0.0
    np.testing.assert_array_equal(to_numpy(dst), want)


@pytest.mark.parametrize("mode", [0, 1])
@pytest.mark.parametrize("schedule", ["forward", "reverse", "random"])
def test_cp_async_missing_wait_or_barrier_shows(
    emulator_only: None, monkeypatch: pytest.MonkeyPatch, mode: int, schedule: str
) -> None:
    # mode 0: no cp.async.wait_group: the destination is still poisoned (NaN) for everyone.
    # mode 1: each thread waits for its own copy but there is no barrier before reading a
    # neighbour's chunk: in any order some thread reads a chunk that has not landed.
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", schedule)
    src = np.arange(128, dtype=np.float32)
    dst = np.zeros(128, np.float32)
    _kernel("cpu", "cp_async_roundtrip")(
        1, 32, (src, dst, np.int32(128), np.int32(mode), np.int32(16))
    )
    assert np.isnan(dst).any()


@pytest.mark.parametrize("schedule", ["forward", "random"])
def test_pipelined_gemm(backend: str, monkeypatch: pytest.MonkeyPatch, schedule: str) -> None:
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", schedule)
    rng = np.random.default_rng(3)
    k = 80  # five k16 tiles through three stages: the ring wraps
    a = rng.integers(-4, 5, (16, k)).astype(np.float16)
    b = rng.integers(-4, 5, (k, 8)).astype(np.float16)
    c = to_backend(np.full((16, 8), np.nan, np.float32), backend)
    _kernel(backend, "mma_gemm_pipeline")(
        1, 32, (to_backend(a, backend), to_backend(b, backend), c, np.int32(k))
    )
    want = a.astype(np.float64) @ b.astype(np.float64)
    np.testing.assert_array_equal(to_numpy(c), want.astype(np.float32))


def test_partial_warp_is_an_error(emulator_only: None) -> None:
    # mma.sync is .aligned: a warp with missing lanes is undefined behaviour on a GPU.
    from cudnnlite.errors import ExecutionError

    z = np.zeros((32, 4), np.uint32)
    # The report names the kernel and its call (mma.cuh passes its caller's file:line).
    with pytest.raises(
        ExecutionError,
        match=r"kernel mma_regs_f16 .*mma\.sync\.m16n8k16\.f16 at .*mma_selftest\.cu:\d+ .*"
        r"lanes 16-31, absent from the warp.*needs all 32 lanes",
    ):
        _kernel("cpu", "mma_regs_f16")(
            1,
            16,
            (
                z,
                np.zeros((32, 2), np.uint32),
                np.zeros((32, 4), np.float32),
                np.zeros((32, 4), np.float32),
            ),
        )


# ------------------------------------------------------------------ m8n8k4 f64 (DMMA)
# PTX ISA, "Matrix fragments for mma.m8n8k4 with .f64": A 8x4 row, one double per lane:
# A[g][t]; B 4x8 col, one double per lane: B[t][g]; C/D 8x8, two doubles per lane:
# C[g][2t], C[g][2t+1]. The order in which the hardware adds the four products is
# unspecified: with real-valued inputs a result may differ from the exact value by the
# rounding of up to 4 products and 4 additions (fused or not, in any order), i.e. by at
# most 8 * 2^-53 times the summed magnitude |c| + sum_k |a_k b_k| (first order; the
# tolerances below use that bound). Integer inputs are exact on every backend.
U64 = 2.0**-53  # the unit roundoff of float64


def _f64_regs(a: np.ndarray, b: np.ndarray, c: np.ndarray):
    """Each lane's registers, straight from the table above."""
    cols = np.stack([2 * T, 2 * T + 1], axis=1)
    return a[G, T], b[T, G], c[G[:, None], cols]


def _f64_d_matrix(d_regs: np.ndarray) -> np.ndarray:
    d = np.full((8, 8), np.nan)
    for i in range(2):
        d[G, 2 * T + i] = d_regs[:, i]
    return d


def _run_mma_f64(backend: str, a: np.ndarray, b: np.ndarray, c: np.ndarray) -> np.ndarray:
    d = to_backend(np.full((32, 2), np.nan), backend)
    regs = [to_backend(np.ascontiguousarray(v, np.float64), backend) for v in _f64_regs(a, b, c)]
    _kernel(backend, "mma_regs_f64")(1, 32, (*regs, d))
    return _f64_d_matrix(to_numpy(d))


def test_mma_m8n8k4_f64_layout(backend: str) -> None:
    _needs_sm80(backend)
    rng = np.random.default_rng(4)
    a = rng.integers(-64, 65, (8, 4)).astype(np.float64)
    b = rng.integers(-64, 65, (4, 8)).astype(np.float64)
    c = rng.integers(-4096, 4097, (8, 8)).astype(np.float64)
    np.testing.assert_array_equal(_run_mma_f64(backend, a, b, c), a @ b + c)


def test_mma_m8n8k4_f64_single_elements(backend: str) -> None:
    _needs_sm80(backend)
    # One nonzero per operand, and C marking each cell with its own index: any swapped
    # index in the A, B or C/D layout moves the product or scrambles C.
    c = np.arange(64, dtype=np.float64).reshape(8, 8) * 1000
    for i, k, j in [(0, 0, 0), (5, 3, 2), (7, 1, 6), (2, 2, 7), (6, 0, 1)]:
        a, b = np.zeros((8, 4)), np.zeros((4, 8))
        a[i, k], b[k, j] = 3.0, 7.0
        want = c.copy()
        want[i, j] += 21.0
        np.testing.assert_array_equal(_run_mma_f64(backend, a, b, c), want, err_msg=f"{(i, k, j)}")


def _fma(x: float, y: float, z: float) -> float:
    """Correctly rounded x*y + z (int / int true division in Python rounds correctly)."""
    exact = Fraction(x) * Fraction(y) + Fraction(z)
    return exact.numerator / exact.denominator


def test_mma_m8n8k4_f64_rounding(backend: str) -> None:
    _needs_sm80(backend)
    rng = np.random.default_rng(5)
    # Mixed signs and scales (2^-20 .. 2^20): cancellation makes the order matter.
    a = rng.standard_normal((8, 4)) * 2.0 ** rng.integers(-20, 21, (8, 4))
    b = rng.standard_normal((4, 8)) * 2.0 ** rng.integers(-20, 21, (4, 8))
    c = rng.standard_normal((8, 8)) * 2.0**10
    c[0, :] = np.nan  # propagates through the row
    c[1, 0] = np.inf
    d = _run_mma_f64(backend, a, b, c)
    assert np.isnan(d[0]).all() and d[1, 0] == np.inf
    for r in range(2, 8):
        for col in range(8):
            exact = sum(Fraction(a[r, k]) * Fraction(b[k, col]) for k in range(4)) + Fraction(
                c[r, col]
            )
            magnitude = abs(c[r, col]) + float(np.abs(a[r] * b[:, col]).sum())
            assert abs(Fraction(d[r, col]) - exact) <= 8 * U64 * magnitude, (r, col)
            if backend == "cpu":
                # The emulator's documented order: c, then one fma per k, k = 0..3.
                want = c[r, col]
                for k in range(4):
                    want = _fma(a[r, k], b[k, col], want)
                assert d[r, col] == want, (r, col)


@pytest.mark.parametrize("schedule", ["forward", "random"])
def test_mma_gemm_f64(backend: str, monkeypatch: pytest.MonkeyPatch, schedule: str) -> None:
    _needs_sm80(backend)
    monkeypatch.setenv("CUDNNLITE_EMU_SCHEDULE", schedule)
    rng = np.random.default_rng(6)
    m, n, k = 19, 13, 37  # no side a multiple of the 8 x 8 x 4 tile: every edge is padded
    a = rng.standard_normal((m, k))
    b = rng.standard_normal((k, n))
    c = to_backend(np.full((m, n), np.nan), backend)
    tiles = ((m + 7) // 8) * ((n + 7) // 8)  # 6 warps, 4 per block: the last block is partial
    _kernel(backend, "mma_gemm_f64")(
        (tiles + 3) // 4,
        128,
        (to_backend(a, backend), to_backend(b, backend), c, np.int32(m), np.int32(n), np.int32(k)),
    )
    got = to_numpy(c)
    # A sum of k products through ceil(k/4) MMAs, each rounding at most 8 times (above),
    # and NumPy's own product: 2k roundings of the summed magnitude |a| @ |b| bound both.
    bound = 2 * k * U64 * (np.abs(a) @ np.abs(b))
    assert (np.abs(got - a @ b) <= bound).all()
