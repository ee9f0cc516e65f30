"""Whether a GPU's warpgroup MMA computes what ``cuda_src/common/mma.cuh`` says it does:
checked once per device before any solver runs a kernel built on it.

The wgmma layer (its D fragment, its descriptors' two shared-memory layouts, a k-step
inside a 128-byte swizzled row) follows the PTX ISA as written; the emulator implements
the same reading exactly, so the two backends agree by construction. What the emulator
cannot show is that the reading is the hardware's. So the first time a process asks
whether an sm_90 device has wgmma (``Capabilities.wgmma``, through
:func:`caps.capabilities`), :func:`verified` runs ``selftest/wgmma_selftest.cu`` there on
small integers (exact in fp32) and compares every accumulator with :func:`run_tile`'s
expectation; if anything differs or fails, the device reports no wgmma (the solvers built
on it are then not applicable and ``mma.sync`` runs instead) and a warning says so. Not
inside a graph capture (no launches may be added to it): the answer there is "no",
unremembered, and the next call outside a capture checks.
"""

from __future__ import annotations

import threading
import warnings
from typing import Any

import numpy as np

from .selftest import WGMMA_SELFTEST, wgmma_selftest_name

_results: dict[str, str | None] = {}  # device key -> why it failed (None: passed)
_lock = threading.Lock()

# (ctype, n, swizzle, warpgroups, kstep): both layouts, every width, a second warpgroup,
# k-steps inside a swizzled row, and bf16 (checked where ml_dtypes gives NumPy a bfloat16,
# which bf16 convolutions need anyway).
DEVICE_CASES = (
    ("__half", 128, 1, 2, 1),
    ("__half", 64, 0, 1, 0),
    ("__half", 64, 1, 1, 3),
    ("__half", 256, 1, 1, 2),
    ("__nv_bfloat16", 128, 1, 1, 0),
)


def fragment_cells(n: int, warpgroups: int) -> tuple[np.ndarray, np.ndarray]:
    """(row, column) of D that thread i's accumulator v holds, arrays [threads, n / 2]:
    the PTX ISA's wgmma .m64nNk16 D fragment. Warp w % 4 of a warpgroup holds rows
    16 (w % 4) ..; its lane l = 4 g + t holds, for each n8 block j, D[g][8 j + 2 t, + 1]
    and D[g + 8][8 j + 2 t, + 1]."""
    threads = np.arange(128 * warpgroups)[:, None]
    v = np.arange(n // 2)[None, :]
    lane, warp = threads % 32, threads // 32
    g, t = lane >> 2, lane & 3
    rows = 64 * (warp // 4) + 16 * (warp % 4) + g + 8 * ((v % 4) // 2)
    cols = 8 * (v // 4) + 2 * t + v % 2
    return rows, cols


def run_tile(backend: Any, dtype: Any, ctype: str, n: int, swizzle: int, *,
             warpgroups: int = 1, kstep: int = 0, accumulate: bool = True, plant: int = 0,
             seed: int = 0) -> tuple[np.ndarray, np.ndarray]:  # fmt: skip
    """``wgmma_tile<ctype, n, swizzle>`` (its arguments: wgmma_selftest.cu) on ``backend``
    with small random integers of NumPy type ``dtype``: (the accumulators it returns, what
    they must be), arrays [threads, n / 2]."""
    from ..testing import to_backend, to_numpy

    rng = np.random.default_rng(seed)
    m = 64 * warpgroups
    a = rng.integers(-4, 5, (m, 16)).astype(np.float32)
    b = rng.integers(-4, 5, (16, n)).astype(np.float32)
    c = rng.integers(-8, 9, (m, n)).astype(np.float32)
    rows, cols = fragment_cells(n, warpgroups)
    args = [
        a.astype(dtype).view(np.uint16),
        np.ascontiguousarray(b.T).astype(dtype).view(np.uint16),  # row j: B[:, j]
        c[rows, cols],
        np.full(rows.shape, np.nan, np.float32),
    ]
    dev = [to_backend(np.ascontiguousarray(x), backend.name) for x in args]
    kernel = backend.module(WGMMA_SELFTEST).get_function(wgmma_selftest_name(ctype, n, swizzle))
    smem = (m + n) * (64 if swizzle else 16) * 2
    scalars = (np.int32(kstep), np.int32(accumulate), np.int32(plant))
    kernel(1, 128 * warpgroups, (*dev, *scalars), shared_mem=smem)
    want = a @ b + (c if accumulate else 0)
    return to_numpy(dev[3]), want[rows, cols]


def _check(backend: Any) -> str | None:
    """None if every case of :data:`DEVICE_CASES` matches on ``backend``, else why not."""
    from .. import dtypes

    for ctype, n, swizzle, warpgroups, kstep in DEVICE_CASES:
        dtype = np.float16 if ctype == "__half" else dtypes.bfloat16
        if dtype is None:
            continue  # (no ml_dtypes: no bf16 arrays to run)
        what = f"{wgmma_selftest_name(ctype, n, swizzle)} ({warpgroups} warpgroups, k-step {kstep})"
        try:
            got, want = run_tile(backend, dtype, ctype, n, swizzle,
                                 warpgroups=warpgroups, kstep=kstep, seed=kstep)  # fmt: skip
        except Exception as exc:  # noqa: BLE001 (any failure means: do not use it)
            return f"{what} failed: {exc}"
        bad = np.argwhere(got != want)
        if len(bad):
            i, v = bad[0]
            return (f"{what}: {len(bad)} of {got.size} accumulators differ; thread {i} "
                    f"value {v}: got {got[i, v]}, expected {want[i, v]}")  # fmt: skip
    return None


def verified(backend: Any) -> bool:
    """Whether ``backend``'s device runs wgmma as common/mma.cuh describes it (checked
    once per device; see the module)."""
    return failure(backend) is None


def failure(backend: Any) -> str | None:
    """Why ``backend``'s device fails the check (checked once per device, with a warning
    then), or None when it passes; inside a graph capture "not checked inside a graph
    capture", not remembered."""
    key = backend.device_key()
    if key in _results:
        return _results[key]
    from . import graph

    if graph._active:
        return "not checked inside a graph capture"  # (launches would join the capture)
    with _lock:
        if key not in _results:
            why = _check(backend)
            if why is not None:
                warnings.warn(
                    f"cudnnlite: wgmma on {key} does not compute what common/mma.cuh "
                    f"assumes ({why}); its solvers are off on this device and mma.sync "
                    "runs instead. Please report this with `cudnnlite doctor`'s output.",
                    RuntimeWarning,
                    stacklevel=4,
                )
            _results[key] = why
    return _results[key]
