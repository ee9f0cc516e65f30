"""Occupancy arithmetic: how many blocks of a kernel one SM keeps resident.

Pure arithmetic on a kernel's resources (registers per thread, shared memory per block,
threads per block) and a table of per-architecture limits, so the static reports
(``nvrtc_check --resources``, ``benchmarks/sass_mix.py``) can say "2 blocks, 16 warps per SM"
without a GPU. The rules are those of NVIDIA's occupancy calculator for sm_75 and newer:

- registers are allocated per warp in units of 256 (``ceil(regs * 32 / 256) * 256``); the
  register file is split into 4 sub-partitions of 16K, and a warp lives in one of them, so
  the warps that fit are ``4 * floor(16K / regs_per_warp)``, not ``floor(64K / ...)``;
- shared memory is allocated per block in units of 128 bytes, plus 1 KiB that the system
  reserves per block on sm_80 and newer; the driver picks the largest carve-out when a
  kernel needs it, so the SM's maximum is the budget;
- a block is resident with all its warps or not at all; a block over the per-block register
  or shared-memory limit does not launch (0 blocks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import BadParamError

WARP = 32
_REG_UNIT = 256  # registers allocated per warp in multiples of this
_SUB_PARTITIONS = 4  # the register file is split between the SM's 4 schedulers
_SMEM_UNIT = 128  # shared memory allocation granularity, bytes


@dataclass(frozen=True)
class ArchLimits:
    """Per-SM limits of one architecture (CUDA C Programming Guide, compute capabilities)."""

    arch: str
    max_warps: int  # resident warps per SM
    max_blocks: int  # resident blocks per SM
    smem_per_sm: int  # bytes, largest carve-out
    smem_per_block: int  # bytes, largest a block may opt in to
    smem_reserved_per_block: int  # bytes the system keeps per block
    regs_per_sm: int = 64 * 1024
    regs_per_block: int = 64 * 1024
    max_regs_per_thread: int = 255
    max_threads_per_block: int = 1024


_KIB = 1024
ARCHS: dict[str, ArchLimits] = {
    a.arch: a
    for a in (
        ArchLimits("sm_70", 64, 32, 96 * _KIB, 96 * _KIB, 0),
        ArchLimits("sm_75", 32, 16, 64 * _KIB, 64 * _KIB, 0),
        ArchLimits("sm_80", 64, 32, 164 * _KIB, 163 * _KIB, _KIB),
        ArchLimits("sm_86", 48, 16, 100 * _KIB, 99 * _KIB, _KIB),
        ArchLimits("sm_87", 48, 16, 164 * _KIB, 163 * _KIB, _KIB),
        ArchLimits("sm_89", 48, 24, 100 * _KIB, 99 * _KIB, _KIB),
        ArchLimits("sm_90", 64, 32, 228 * _KIB, 227 * _KIB, _KIB),
        ArchLimits("sm_100", 64, 32, 228 * _KIB, 227 * _KIB, _KIB),
        ArchLimits("sm_103", 64, 32, 228 * _KIB, 227 * _KIB, _KIB),
        ArchLimits("sm_107", 32, 16, 228 * _KIB, 227 * _KIB, _KIB),
        ArchLimits("sm_110", 48, 24, 228 * _KIB, 227 * _KIB, _KIB),
        # consumer Blackwell (RTX 50xx, DGX Spark): the shared memory of sm_86/89
        ArchLimits("sm_120", 48, 24, 100 * _KIB, 99 * _KIB, _KIB),
        ArchLimits("sm_121", 48, 24, 100 * _KIB, 99 * _KIB, _KIB),
    )
}


def limits(arch: str) -> ArchLimits:
    """The table row for ``sm_XX`` (an ``a``/``f`` suffix, as in ``sm_90a``, is ignored)."""
    base = re.sub(r"(?<=\d)[af]$", "", arch)
    try:
        return ARCHS[base]
    except KeyError:
        raise BadParamError(
            f"cudnnlite: no occupancy limits for {arch!r}; known: {', '.join(ARCHS)}"
        ) from None


def row_at_or_below(arch: str) -> ArchLimits | None:
    """The row of ``arch`` (``sm_XX`` or ``compute_XX``, an ``a``/``f`` suffix ignored), else
    of the newest arch before it (a GPU newer than the table); None before the first or for
    a name that is no arch."""
    m = re.fullmatch(r"(?:sm|compute)_(\d+)[af]?", arch)
    if m is None:
        return None
    older = [a for a in ARCHS if int(a[3:]) <= int(m.group(1))]
    return ARCHS[max(older, key=lambda a: int(a[3:]))] if older else None


def sm_threads(arch: str) -> int:
    """Resident threads per SM of ``arch`` (:func:`row_at_or_below`; 2048 where the table
    has no row): the ceiling the kernels clamp their occupancy hints to (CL_MIN_BLOCKS in
    common/cudnnlite.cuh, through compile_options.arch_defines)."""
    row = row_at_or_below(arch)
    return row.max_warps * WARP if row is not None else 2048


@dataclass(frozen=True)
class Occupancy:
    """Resident blocks and warps per SM, and which resource stops there."""

    blocks: int
    warps: int
    limiter: str  # "warps", "blocks", "registers", "shared memory", or why it cannot launch
    max_warps: int  # the arch's resident-warp limit, for the ratio

    @property
    def fraction(self) -> float:
        """Occupied warp slots, 0 to 1."""
        return self.warps / self.max_warps


def _round_up(value: int, unit: int) -> int:
    return -(-value // unit) * unit


def regs_per_warp(regs_per_thread: int) -> int:
    """Registers one warp occupies, allocation granularity included."""
    return _round_up(max(regs_per_thread, 1) * WARP, _REG_UNIT)


def warps_by_registers(regs_per_thread: int, lim: ArchLimits) -> int:
    """Warps per SM that the register file holds, whatever the block size."""
    per_partition = lim.regs_per_sm // _SUB_PARTITIONS
    return _SUB_PARTITIONS * (per_partition // regs_per_warp(regs_per_thread))


def smem_per_block(shared_bytes: int, lim: ArchLimits) -> int:
    """Shared memory one block occupies: the allocation unit and the system's reserve."""
    return _round_up(shared_bytes, _SMEM_UNIT) + lim.smem_reserved_per_block


def occupancy(
    arch: str | ArchLimits, threads: int, regs_per_thread: int, shared_bytes: int = 0
) -> Occupancy:
    """Blocks and warps per SM for blocks of ``threads`` threads.

    ``shared_bytes``: static plus dynamic shared memory per block, as the kernel uses it
    (without the system's reserve, which is added here).
    """
    lim = arch if isinstance(arch, ArchLimits) else limits(arch)
    if threads < 1:
        raise BadParamError(f"threads must be >= 1, got {threads}")
    if regs_per_thread < 0 or shared_bytes < 0:
        raise BadParamError("registers and shared memory must be >= 0")
    warps = -(-threads // WARP)

    def none(why: str) -> Occupancy:
        return Occupancy(0, 0, why, lim.max_warps)

    if threads > lim.max_threads_per_block:
        return none(f"{threads} threads > {lim.max_threads_per_block} per block")
    if regs_per_thread > lim.max_regs_per_thread:
        return none(f"{regs_per_thread} registers > {lim.max_regs_per_thread} per thread")
    if regs_per_warp(regs_per_thread) * warps > lim.regs_per_block:
        return none(f"{regs_per_warp(regs_per_thread) * warps} registers > per-block limit")
    if shared_bytes > lim.smem_per_block:
        return none(f"{shared_bytes} B shared > {lim.smem_per_block} B per block")

    candidates = {
        "warps": lim.max_warps // warps,
        "blocks": lim.max_blocks,
        "registers": warps_by_registers(regs_per_thread, lim) // warps,
    }
    if smem_per_block(shared_bytes, lim):  # the reserve counts even without shared arrays
        candidates["shared memory"] = lim.smem_per_sm // smem_per_block(shared_bytes, lim)
    # Ties go to the first listed: "warps" reads better than "registers" at full occupancy.
    limiter = min(candidates, key=lambda k: candidates[k])
    blocks = candidates[limiter]
    return Occupancy(blocks, blocks * warps, limiter, lim.max_warps)
