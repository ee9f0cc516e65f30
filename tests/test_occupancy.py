"""Occupancy arithmetic against cases worked by hand from the calculator's rules."""

from __future__ import annotations

import pytest

from cudnnlite.errors import BadParamError
from cudnnlite.runtime.occupancy import (
    ARCHS,
    limits,
    occupancy,
    regs_per_warp,
    warps_by_registers,
)


@pytest.mark.parametrize(
    ("arch", "threads", "regs", "smem", "blocks", "warps", "limiter"),
    [
        # 32 regs: 1024 per warp, 16 warps per sub-partition; 8-warp blocks fill 64 slots.
        ("sm_90", 256, 32, 0, 8, 64, "warps"),
        # 128 regs: 4096 per warp, 4 per sub-partition = 16 warps = 2 blocks of 8.
        ("sm_90", 256, 128, 0, 2, 16, "registers"),
        # 255 regs round to 8192 per warp: 8 warps per SM, one 256-thread block.
        ("sm_90", 256, 255, 0, 1, 8, "registers"),
        # The calculator's classic: sm_80, 256 threads, 64 regs -> 4 blocks, 50%.
        ("sm_80", 256, 64, 0, 4, 32, "registers"),
        # Sub-partitions: 40 regs = 1280 per warp, 12 per partition = 48 warps = 24 blocks
        # of 2 warps (a flat 64K / 1280 would say 51 warps, 25 blocks).
        ("sm_90", 64, 40, 0, 24, 48, "registers"),
        # 48 KiB + 1 KiB reserved per block: 228 // 49 = 4 on sm_90, 164 // 49 = 3 on sm_80.
        ("sm_90", 128, 32, 48 * 1024, 4, 16, "shared memory"),
        ("sm_80", 128, 32, 48 * 1024, 3, 12, "shared memory"),
        # sm_75 reserves nothing: 64 // 48 = 1.
        ("sm_75", 128, 32, 48 * 1024, 1, 4, "shared memory"),
        # sm_75 holds 32 warps: one 1024-thread block.
        ("sm_75", 1024, 16, 0, 1, 32, "warps"),
        # One-warp blocks hit the 32-blocks limit before the 64 warps.
        ("sm_90", 32, 16, 0, 32, 32, "blocks"),
        # 100 bytes round to 128, + 1 KiB: 228 KiB / 1152 B = 202 > 32 blocks.
        ("sm_90", 32, 16, 100, 32, 32, "blocks"),
        # Partial warps count whole: 48 threads = 2 warps.
        ("sm_86", 48, 32, 0, 16, 32, "blocks"),
    ],
)
def test_known_cases(
    arch: str, threads: int, regs: int, smem: int, blocks: int, warps: int, limiter: str
) -> None:
    occ = occupancy(arch, threads, regs, smem)
    assert (occ.blocks, occ.warps, occ.limiter) == (blocks, warps, limiter)
    assert occ.fraction == warps / limits(arch).max_warps


@pytest.mark.parametrize(
    ("arch", "threads", "regs", "smem", "why"),
    [
        ("sm_90", 1024, 128, 0, "per-block limit"),  # 4096 x 32 warps > 64K registers
        ("sm_90", 128, 32, 228 * 1024, "per block"),  # over the 227 KiB opt-in maximum
        ("sm_86", 128, 32, 100 * 1024, "per block"),  # over 99 KiB
        ("sm_90", 2048, 16, 0, "threads"),
        ("sm_90", 32, 256, 0, "registers"),
    ],
)
def test_cannot_launch(arch: str, threads: int, regs: int, smem: int, why: str) -> None:
    occ = occupancy(arch, threads, regs, smem)
    assert occ.blocks == 0 and occ.warps == 0
    assert why in occ.limiter


def test_register_granularity() -> None:
    assert regs_per_warp(1) == 256
    assert regs_per_warp(8) == 256
    assert regs_per_warp(9) == 512
    assert regs_per_warp(72) == 2304
    assert warps_by_registers(72, limits("sm_90")) == 4 * (16384 // 2304)  # 28


def test_arch_table() -> None:
    assert limits("sm_90a") == limits("sm_90")
    assert limits("sm_90").max_warps == 64 and limits("sm_90").max_blocks == 32
    assert limits("sm_75").max_warps == 32 and limits("sm_75").smem_per_sm == 64 * 1024
    assert limits("sm_89").max_warps == 48
    with pytest.raises(BadParamError, match="sm_61"):
        limits("sm_61")
    with pytest.raises(BadParamError):
        occupancy("sm_90", 0, 32)


def test_capabilities_take_the_shared_memory_of_the_arch_table() -> None:
    """One table of per-arch limits: a solver's shared-memory budget on an arch is the
    occupancy table's opt-in maximum per block, an arch not in it takes the newest before
    it, and a device's own report wins (a consumer Blackwell, sm_120, has sm_89's 99 KiB,
    not sm_90's 227 KiB that "newest before it" gave it before it had a row)."""
    from cudnnlite.runtime.caps import for_sm

    kib = 1024
    expect = {70: 96, 72: 96, 75: 64, 80: 163, 86: 99, 87: 163, 89: 99, 90: 227, 100: 227,
              103: 227, 110: 227, 120: 99, 121: 99, 61: 48}  # fmt: skip
    assert {sm: for_sm(sm).max_shared_bytes // kib for sm in expect} == expect
    for arch, lim in ARCHS.items():
        assert for_sm(int(arch[3:])).max_shared_bytes == lim.smem_per_block
    assert for_sm(120, max_shared=48 * kib).max_shared_bytes == 48 * kib
    assert for_sm(120).sm_count == 170 and for_sm(90, sm_count=7).sm_count == 7


def test_resident_threads_per_sm_for_the_kernels_hints() -> None:
    """The ceiling CL_MIN_BLOCKS clamps occupancy hints to (compile_options.arch_defines):
    the arch's row, a virtual or suffixed name as its arch, a newer GPU as the newest row
    before it, anything else 2048."""
    from cudnnlite.runtime.compile_options import arch_defines
    from cudnnlite.runtime.occupancy import sm_threads

    want = {"sm_75": 1024, "sm_80": 2048, "sm_86": 1536, "sm_89": 1536,
            "compute_90": 2048, "sm_90a": 2048, "sm_107": 1024, "sm_120": 1536,
            "sm_130": 1536, "sm_61": 2048, "x": 2048}  # fmt: skip
    assert {a: sm_threads(a) for a in want} == want
    assert arch_defines("sm_86") == ("-DCUDNNLITE_SM_THREADS=1536",)
