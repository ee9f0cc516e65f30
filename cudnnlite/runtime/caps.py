"""What a device can do, in one table (not arch-name tests scattered in solvers)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

from .backend import Backend


@dataclass(frozen=True)
class Capabilities:
    arch: str  # "sm_90", "cpu"
    sm: int  # compute capability as an int (90); 0 for the emulator
    fp16_tensor_cores: bool  # WMMA with __half inputs (sm_70+)
    bf16_tensor_cores: bool  # WMMA with __nv_bfloat16 and TF32 inputs (sm_80+)
    max_shared_bytes: int  # per block, with the opt-in carve-out
    emulator: bool
    sm_count: int = 0  # streaming multiprocessors (the emulator: its OS threads), grid sizing
    # A device's own answer to "does wgmma compute what common/mma.cuh says" (a one-time
    # check on it: runtime/wgmma_check.py), asked on first need; None for an arch's static
    # capabilities (for_sm), which assume it does.
    wgmma_probe: Callable[[], bool] | None = field(
        default=None, compare=False, hash=False, repr=False
    )

    @property
    def tf32_tensor_cores(self) -> bool:
        return self.bf16_tensor_cores

    @property
    def mma_sync(self) -> bool:
        """The PTX tensor-core layer (common/mma.cuh): ldmatrix and mma.sync, sm_75+."""
        return self.emulator or self.sm >= 75

    @property
    def wgmma(self) -> bool:
        """Hopper's warpgroup MMA (common/mma.cuh's wgmma): sm_90, whose modules compile for
        sm_90a (compile_options.target), where the device's check passes (wgmma_probe);
        not on later archs (sm_100 has other MMAs)."""
        if self.emulator:
            return True
        return self.sm == 90 and (self.wgmma_probe is None or self.wgmma_probe())


# The usual SM count of each arch's flagship (V100, T4, A100, A10/3090-class, L40, H100/
# H200, B200, RTX 5090): grid-sizing defaults when no device is asked (a real device
# reports its own).
_TYPICAL_SMS = {70: 80, 75: 40, 80: 108, 86: 84, 89: 128, 90: 132, 100: 148, 120: 170}

# The emulator models every construct the kernels use, WMMA included.
EMULATOR = Capabilities("cpu", 0, True, True, 227 * 1024, True, 4)


def _nearest_below(table: dict[int, int], sm: int, default: int) -> int:
    """The entry of ``sm`` itself, else of the newest arch before it."""
    older = [k for k in table if k <= sm]
    return table[max(older)] if older else default


@functools.cache
def _max_shared(sm: int) -> int:
    """Shared memory a block may opt in to on ``sm``: the occupancy table's (one table of
    per-arch limits), else that of the newest arch before it, else 48 KiB."""
    from .occupancy import row_at_or_below

    row = row_at_or_below(f"sm_{sm}")
    return row.smem_per_block if row is not None else 48 * 1024


def for_sm(sm: int, sm_count: int | None = None, max_shared: int | None = None,
           wgmma_probe: Callable[[], bool] | None = None) -> Capabilities:  # fmt: skip
    """An arch's capabilities: ``sm_count`` and ``max_shared`` (bytes per block, opt-in)
    as the device reports them, else the arch's usual ones; ``wgmma_probe`` the device's
    own wgmma check (sm_90)."""
    smem = max_shared or _max_shared(sm)
    count = sm_count or _nearest_below(_TYPICAL_SMS, sm, 16)
    return Capabilities(f"sm_{sm}", sm, sm >= 70, sm >= 80, smem, False, count, wgmma_probe)


def capabilities(backend: Backend) -> Capabilities:
    if backend.name == "cpu":
        return EMULATOR
    sm = int(backend.arch().removeprefix("sm_"))
    probe = None
    if sm == 90:
        from .wgmma_check import verified

        probe = functools.partial(verified, backend)
    return for_sm(sm, backend.multiprocessor_count(), backend.max_shared_per_block(), probe)
