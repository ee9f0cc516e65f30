"""What every primitive family's Python side shares about its kernels: a table of the
kernels of one module (one dtype) on one backend, resolved on first use, with the
device's SM count for grid sizing, and the readable name of the last launch."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any, TypeVar

from .. import dtypes
from ..runtime.backend import Backend, Kernel
from ..runtime.graph import current_recorder
from ..runtime.kernel import ModuleSpec


class LastLaunch:
    """The readable name of the last kernel this thread launched (for the demo and
    profilers): ``set(name)`` on launch, ``get()`` to read it. A family that launches
    several kernels per call may keep a tuple of names."""

    def __init__(self) -> None:
        self._local = threading.local()

    def set(self, name: str | tuple[str, ...]) -> None:
        self._local.name = name
        recorder = current_recorder()
        if recorder is not None:
            recorder.record_last(self, name)  # a template's replay sets it again

    def get(self) -> str | tuple[str, ...] | None:
        return getattr(self._local, "name", None)


class KernelTable:
    """The kernels of ``spec`` (one dtype of a family) on ``backend``, by short key.

    ``names`` maps a short key (``pool_fwd``) to the kernel's name expression in
    ``spec``; each kernel is resolved (and its module compiled) on first use.
    """

    def __init__(self, backend: Backend, dt: dtypes.DType, spec: ModuleSpec,
                 names: Mapping[str, str], last: LastLaunch) -> None:  # fmt: skip
        self.backend = backend
        self.dt = dt
        self.spec = spec
        self.names = names
        self.last = last
        self.kernels: dict[str, Kernel] = {}
        # SMs of the GPU (grid sizes are multiples of it); None on the emulator.
        self.sm_count: int | None = None
        if backend.name == "cuda":
            self.sm_count = backend.multiprocessor_count()

    def get(self, key: str) -> Kernel:
        k = self.kernels.get(key)
        if k is None:
            k = self.kernels[key] = self.backend.kernel(self.spec, self.names[key])
        return k

    def launch(self, key: str, grid: Any, block: Any, args: Any, shared_mem: int = 0) -> None:
        self.get(key)(grid, block, args, shared_mem=shared_mem)
        self.last.set(f"{key}_{self.dt.short}")

    # A few waves of blocks at most (a family sets it from sm_count; 64 on the emulator).
    max_grid = 64

    def grid_for(self, n: int, block: int = 256) -> int:
        """Blocks of ``block`` threads for ``n`` work items, capped at ``max_grid``: every
        kernel launched with it loops over its items grid-stride (past the cap, items
        without a thread of their own are never written otherwise)."""
        return max(1, min(-(-n // block), self.max_grid))


T = TypeVar("T", bound=KernelTable)
_TABLES: dict[tuple, Any] = {}
_LOCK = threading.Lock()


def kernel_table(cls: type[T], backend: Backend, dt: dtypes.DType, *args: Any) -> T:
    """The process-wide ``cls(backend, dt, *args)`` for this device and dtype."""
    key = (cls, id(backend), backend.device_key(), dt.short)
    t = _TABLES.get(key)
    if t is None:
        with _LOCK:
            t = _TABLES.get(key)
            if t is None:
                t = _TABLES[key] = cls(backend, dt, *args)
    return t
