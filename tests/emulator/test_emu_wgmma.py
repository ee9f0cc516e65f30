"""Hopper's warpgroup MMA (cuda_src/common/mma.cuh: wgmma, its descriptors and its fence /
commit / wait protocol) through cuda_src/selftest/wgmma_selftest.cu, on the emulator and
on an sm_90 GPU.

The expected registers are built here from the PTX ISA's wgmma D fragment (written out
below, independently of the emulator's code), so these tests pin the layout lane by lane
and the shared-memory layouts element by element. Inputs are small integers, so every
product and sum is exact in fp32 and results match bit for bit. The planted misuses (an
accumulator read before the wait, a missing fence, a tile rewritten under an MMA in
flight, descriptors that differ between lanes) must fail on the emulator.
"""

from __future__ import annotations

import numpy as np
import pytest

try:
    import ml_dtypes
except ImportError:  # (the GPU box may lack it: the bf16 cases skip)
    ml_dtypes = None

from cudnnlite.errors import ExecutionError
from cudnnlite.runtime import backend_by_name
from cudnnlite.runtime.caps import capabilities
from cudnnlite.runtime.selftest import WGMMA_SELFTEST, wgmma_selftest_name
from cudnnlite.testing import to_backend, to_numpy


@pytest.fixture
def backend(backend: str) -> str:
    """conftest's backend, where it has wgmma (the emulator, an sm_90 GPU)."""
    if not capabilities(backend_by_name(backend)).wgmma:
        pytest.skip("wgmma needs sm_90")
    return backend


def _dtype(ctype: str):
    if ctype == "__half":
        return np.float16
    if ml_dtypes is None:
        pytest.skip("bf16 needs ml_dtypes")
    return ml_dtypes.bfloat16


def _fragment_cells(n: int, warpgroups: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of D that thread i's accumulator v holds: PTX ISA, wgmma .m64nNk16
    D fragment: warp w % 4 of a warpgroup holds rows 16 (w % 4) ..; its lane l = 4 g + t
    holds, for each n8 block j, D[g][8 j + 2 t, + 1] and D[g + 8][8 j + 2 t, + 1]."""
    threads = np.arange(128 * warpgroups)[:, None]
    v = np.arange(n // 2)[None, :]
    lane, warp = threads % 32, threads // 32
    g, t = lane >> 2, lane & 3
    rows = 64 * (warp // 4) + 16 * (warp % 4) + g + 8 * ((v % 4) // 2)
    cols = 8 * (v // 4) + 2 * t + v % 2
    return rows, cols


def _run(backend: str, ctype: str, n: int, swizzle: int, *, warpgroups: int = 1,
         kstep: int = 0, accumulate: bool = True, plant: int = 0, seed: int = 0):  # fmt: skip
    rng = np.random.default_rng(seed)
    dt = _dtype(ctype)
    m = 64 * warpgroups
    a = rng.integers(-4, 5, (m, 16)).astype(np.float32)
    b = rng.integers(-4, 5, (16, n)).astype(np.float32)
    c = rng.integers(-8, 9, (m, n)).astype(np.float32)
    rows, cols = _fragment_cells(n, warpgroups)
    c_regs = c[rows, cols]
    args = [
        a.astype(dt).view(np.uint16),
        np.ascontiguousarray(b.T).astype(dt).view(np.uint16),  # row n: B[:, n]
        c_regs.astype(np.float32),
        np.full(c_regs.shape, np.nan, np.float32),
    ]
    dev = [to_backend(np.ascontiguousarray(x), backend) for x in args]
    kernel = (
        backend_by_name(backend)
        .module(WGMMA_SELFTEST)
        .get_function(wgmma_selftest_name(ctype, n, swizzle))
    )
    ld = 64 if swizzle else 16
    smem = (m + n) * ld * 2
    kernel(1, 128 * warpgroups, (*dev, np.int32(kstep), np.int32(accumulate), np.int32(plant)),
           shared_mem=smem)  # fmt: skip
    d_regs = to_numpy(dev[3])
    expect = a @ b + (c if accumulate else 0)
    return d_regs, expect[rows, cols]


@pytest.mark.parametrize("ctype", ["__half", "__nv_bfloat16"])
@pytest.mark.parametrize("n", [64, 128])
@pytest.mark.parametrize("swizzle", [0, 1])
def test_fragment_layout_lane_by_lane(backend: str, ctype: str, n: int, swizzle: int) -> None:
    got, want = _run(backend, ctype, n, swizzle)
    np.testing.assert_array_equal(got, want)


def test_two_warpgroups_and_scale_d(backend: str) -> None:
    got, want = _run(backend, "__half", 64, 1, warpgroups=2, seed=1)
    np.testing.assert_array_equal(got, want)
    got, want = _run(backend, "__half", 128, 0, accumulate=False, seed=2)
    np.testing.assert_array_equal(got, want)


@pytest.mark.parametrize("kstep", [1, 2, 3])
def test_k_steps_inside_a_swizzled_row(backend: str, kstep: int) -> None:
    """A descriptor started 32 kstep bytes into 128-byte swizzled rows reads columns
    16 kstep .. of them: the main loops' k-steps."""
    got, want = _run(backend, "__nv_bfloat16", 64, 1, kstep=kstep, seed=kstep)
    np.testing.assert_array_equal(got, want)


def test_accumulators_read_before_the_wait_are_nan() -> None:
    got, _ = _run("cpu", "__half", 64, 0, plant=1)
    assert np.isnan(got).all()


@pytest.mark.parametrize(
    ("plant", "message"),
    [
        (2, "no wgmma.fence"),
        (3, "changed before the wait"),
        (4, "warp-uniform"),
    ],
)
def test_misuse_fails_on_the_emulator(plant: int, message: str) -> None:
    with pytest.raises(ExecutionError, match=message):
        _run("cpu", "__half", 64, 1, plant=plant)


def test_a_partial_warpgroup_fails_on_the_emulator() -> None:
    kernel = (
        backend_by_name("cpu")
        .module(WGMMA_SELFTEST)
        .get_function(wgmma_selftest_name("__half", 64, 0))
    )
    shapes = (((64, 16), np.uint16), ((64, 16), np.uint16), ((96, 32), np.float32),
              ((96, 32), np.float32))  # fmt: skip
    arrays = [np.zeros(s, t) for s, t in shapes]
    with pytest.raises(ExecutionError, match="warpgroup"):
        kernel(1, 96, (*arrays, np.int32(0), np.int32(1), np.int32(0)), shared_mem=8192)
