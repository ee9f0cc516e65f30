"""Hopper's warpgroup MMA (cuda_src/common/mma.cuh: wgmma, its descriptors and its fence /
commit / wait protocol) through cuda_src/selftest/wgmma_selftest.cu, on the emulator and
on an sm_90 GPU.

The expected registers are built from the PTX ISA's wgmma D fragment, written out in
Python (runtime/wgmma_check.py, which also checks a GPU before its first use),
independently of the emulator's code, so these tests pin the layout lane by lane
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
from cudnnlite.runtime.caps import EMULATOR, capabilities, for_sm
from cudnnlite.runtime.selftest import WGMMA_SELFTEST, wgmma_selftest_name
from cudnnlite.runtime.wgmma_check import run_tile
from cudnnlite.testing import has_wgmma_arch


@pytest.fixture
def backend(backend: str) -> str:
    """conftest's backend where wgmma exists (testing.has_wgmma_arch)."""
    if not has_wgmma_arch(backend):
        pytest.skip("wgmma needs sm_90")
    return backend


def _dtype(ctype: str):
    if ctype == "__half":
        return np.float16
    if ml_dtypes is None:
        pytest.skip("bf16 needs ml_dtypes")
    return ml_dtypes.bfloat16


def _run(backend: str, ctype: str, n: int, swizzle: int, **kw):
    return run_tile(backend_by_name(backend), _dtype(ctype), ctype, n, swizzle, **kw)


@pytest.mark.parametrize("ctype", ["__half", "__nv_bfloat16"])
@pytest.mark.parametrize("n", [64, 128, 256])
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
        (5, "no fence.proxy.async"),
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


def test_the_device_check() -> None:
    """capabilities() asks a device's own wgmma_check once; a device that fails it reports
    no wgmma (its solvers then do not apply), with a warning; not inside a capture."""
    import dataclasses
    import warnings

    from cudnnlite.runtime import graph, wgmma_check

    assert wgmma_check._check(backend_by_name("cpu")) is None  # the emulator passes it
    assert for_sm(90).wgmma and EMULATOR.wgmma and not for_sm(80).wgmma
    assert not dataclasses.replace(for_sm(90), wgmma_probe=lambda: False).wgmma

    class Device:  # an sm_90 CUDA backend, as capabilities() sees one
        name = "cuda"

        def __init__(self, key: str) -> None:
            self.key = key

        def device_key(self) -> str:
            return self.key

        def arch(self) -> str:
            return "sm_90"

        def multiprocessor_count(self) -> int:
            return 132

        def max_shared_per_block(self) -> int:
            return 227 * 1024

    answers = {"cuda:7": "wgmma_tile<__half, 128, 1>: 3 of 8192 accumulators differ",
               "cuda:8": None}  # fmt: skip
    asked = []
    saved = wgmma_check._check
    wgmma_check._check = lambda b: asked.append(b.key) or answers[b.key]
    try:
        with pytest.warns(RuntimeWarning, match="accumulators differ"):
            assert not capabilities(Device("cuda:7")).wgmma
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            assert not wgmma_check.verified(Device("cuda:7"))  # remembered, warned once
            graph._active += 1
            try:
                assert not wgmma_check.verified(Device("cuda:8"))  # a capture: not asked
            finally:
                graph._active -= 1
            assert capabilities(Device("cuda:8")).wgmma
            assert capabilities(Device("cuda:8")) == for_sm(90, 132, 227 * 1024)
        assert asked == ["cuda:7", "cuda:8"]
    finally:
        wgmma_check._check = saved
        for key in answers:
            wgmma_check._results.pop(key, None)
