"""The interface both backends implement.

A backend compiles a ``ModuleSpec`` into a ``Module`` once (memoized per device) and
hands out ``Kernel`` objects that launch like ``cupy.RawKernel``:
``kernel(grid, block, args, shared_mem=0, cooperative=False)``. Kernel arguments are
arrays of the backend's kind, NumPy scalars of the exact C type, or ``numpy.void``
structs.

A cooperative launch keeps every block of the grid co-resident, which a grid-wide
barrier (``cl::grid_sync`` in ``cuda_src/common/grid_sync.cuh``) needs; its grid may
not exceed ``backend.max_cooperative_blocks(kernel, block_threads, shared_mem)``.
"""

from __future__ import annotations

import abc
import contextlib
import os
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from ..errors import BadParamError, NotSupportedError
from .kernel import ModuleSpec

Dim = int | tuple[int, ...]


def dim3(value: Dim, what: str) -> tuple[int, int, int]:
    """Normalizes a grid or block size to three positive ints."""
    dims = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
    if not 1 <= len(dims) <= 3 or any(not isinstance(d, (int, np.integer)) or d < 1 for d in dims):
        raise BadParamError(f"{what} must be 1 to 3 positive ints, got {value!r}")
    return tuple(int(d) for d in dims) + (1,) * (3 - len(dims))  # type: ignore[return-value]


# CUDA's limits for every GPU since sm_30.
_MAX_BLOCK = (1024, 1024, 64)
_MAX_GRID = (2**31 - 1, 65535, 65535)


def launch_dims(grid: Dim, block: Dim) -> tuple[tuple[int, int, int], tuple[int, int, int]]:
    """Checked grid and block sizes, as a GPU would accept them."""
    g, b = dim3(grid, "grid"), dim3(block, "block")
    if b[0] * b[1] * b[2] > 1024 or any(v > m for v, m in zip(b, _MAX_BLOCK, strict=False)):
        raise BadParamError(f"block {b} exceeds CUDA's limits (1024 threads, z <= 64)")
    if any(v > m for v, m in zip(g, _MAX_GRID, strict=False)):
        raise BadParamError(f"grid {g} exceeds CUDA's limits ({_MAX_GRID})")
    return g, b


class Kernel(abc.ABC):
    """A compiled kernel, callable like ``cupy.RawKernel``."""

    name: str
    spec: ModuleSpec

    @abc.abstractmethod
    def __call__(
        self,
        grid: Dim,
        block: Dim,
        args: Sequence[Any],
        shared_mem: int = 0,
        cooperative: bool = False,
    ) -> None:
        """Launches the kernel. ``cooperative=True``: all blocks co-resident (a grid
        barrier may be used); NotSupportedError when the grid exceeds
        ``max_cooperative_blocks``."""

    @abc.abstractmethod
    def max_cooperative_blocks(self, block_threads: int, shared_mem: int = 0) -> int:
        """Blocks of ``block_threads`` threads using ``shared_mem`` bytes of dynamic
        shared memory that a cooperative launch of this kernel may have."""

    def prepare(self, grid: Dim, block: Dim, args: Sequence[Any], shared_mem: int = 0,
                vary: int = -1) -> Callable[[Any], None]:  # fmt: skip
        """A launch of this kernel whose arguments are ``args`` but for the one at index
        ``vary`` (a struct of per-step parameters, say), which each call of the returned
        function gives: ``launch(value)``. What a loop launching the same kernel on the
        same buffers pays once (the backends convert the fixed arguments once; this
        default is an ordinary launch per call). The fixed arguments are the same arrays
        at every launch (their contents may change). One thread at a time per prepared
        launch; a launch inside a graph capture or a template recording is an ordinary
        launch, which the recorder sees."""
        fixed = list(args)
        index = vary % len(fixed)

        def launch(value: Any) -> None:
            call = list(fixed)
            call[index] = value
            self(grid, block, call, shared_mem)

        return launch

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.name} from {self.spec.label()}>"


def check_cooperative_grid(
    kernel: Kernel, grid: tuple[int, int, int], block: tuple[int, int, int], shared_mem: int
) -> None:
    """Raises NotSupportedError, before any launch, when a cooperative grid cannot be
    co-resident (a GPU would refuse it, or CuPy would silently shrink a 1-D grid)."""
    blocks = grid[0] * grid[1] * grid[2]
    threads = block[0] * block[1] * block[2]
    limit = kernel.max_cooperative_blocks(threads, shared_mem)
    if blocks > limit:
        raise NotSupportedError(
            f"cooperative launch of {kernel.name}: {blocks} blocks of {threads} threads "
            f"({shared_mem} B dynamic shared memory) cannot be co-resident; at most {limit} "
            "can (backend.max_cooperative_blocks)"
        )


class _Deferred(Kernel):
    """What :meth:`Backend.kernel` gives a dry run (:meth:`Backend.prefetch`): the kernel,
    built on first use. A dry run's objects are dropped, but one that something kept (a
    cache, say) works all the same."""

    def __init__(self, backend: Backend, unit: ModuleSpec, name: str) -> None:
        self.name, self.spec = name, unit
        self._backend = backend
        self._kernel: Kernel | None = None

    def _resolve(self) -> Kernel:
        if self._kernel is None:
            self._kernel = self._backend.module(self.spec).get_function(self.name)
        return self._kernel

    def __call__(self, grid: Dim, block: Dim, args: Sequence[Any], shared_mem: int = 0,
                 cooperative: bool = False) -> None:  # fmt: skip
        self._resolve()(grid, block, args, shared_mem, cooperative)

    def max_cooperative_blocks(self, block_threads: int, shared_mem: int = 0) -> int:
        return self._resolve().max_cooperative_blocks(block_threads, shared_mem)

    def prepare(self, grid: Dim, block: Dim, args: Sequence[Any], shared_mem: int = 0,
                vary: int = -1) -> Callable[[Any], None]:  # fmt: skip
        return self._resolve().prepare(grid, block, args, shared_mem, vary)

    def __getattr__(self, attr: str) -> Any:  # the backend's own attributes (.function, ...)
        if attr.startswith("_"):
            raise AttributeError(attr)
        return getattr(self._resolve(), attr)


# The (backend, compile unit) pairs a dry run asks kernel() for, per thread; None outside
# one (Backend.prefetch).
_noting = threading.local()
_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _build_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            workers = min(8, os.cpu_count() or 1)
            _pool = ThreadPoolExecutor(workers, thread_name_prefix="cudnnlite-build")
        return _pool


def _forget_pool_in_child() -> None:
    """A forked child has none of the pool's threads (work given to it would wait
    forever): the child makes a pool of its own when it needs one."""
    global _pool, _pool_lock
    _pool, _pool_lock = None, threading.Lock()


if hasattr(os, "register_at_fork"):  # (POSIX)
    os.register_at_fork(after_in_child=_forget_pool_in_child)


class Module(abc.ABC):
    spec: ModuleSpec

    @abc.abstractmethod
    def get_function(self, name: str) -> Kernel: ...


class Backend(abc.ABC):
    """``name`` is ``"cuda"`` or ``"cpu"``; ``xp`` is the array module (cupy / numpy)."""

    name: str
    # Whether a kernel is compiled in a module of its own (``ModuleSpec.part``) rather than
    # with its whole family module: NVRTC's cost grows with the kernels a program
    # instantiates, so a first call on a GPU compiles only what it launches (tenths of a
    # second, not seconds). The emulator keeps family modules: each g++ run has a fixed
    # cost (about 0.5 s: the precompiled header, the entry points, the link), so fewer,
    # larger libraries are cheaper there (per-kernel units took six test files' 869 tests
    # from 86 s to 184 s on 2 cores, 55 modules becoming 415; 2026-12-07).
    per_kernel_modules: bool = False

    def __init__(self) -> None:
        self._modules: dict[tuple[str, ModuleSpec], Module] = {}
        # One lock per module being built: threads that want one module wait for a single
        # build of it, while other modules build at the same time (precompile's threads).
        self._build_locks: dict[tuple[str, ModuleSpec], threading.Lock] = {}
        self._lock = threading.Lock()  # guards _build_locks

    @property
    @abc.abstractmethod
    def xp(self) -> Any: ...

    @abc.abstractmethod
    def device_key(self) -> str:
        """The device the modules are built for (``cuda:0``, ``cpu``)."""

    @abc.abstractmethod
    def arch(self) -> str:
        """The tuning-DB arch name: ``sm_90``, ``cpu``."""

    @abc.abstractmethod
    def _build(self, spec: ModuleSpec) -> Module: ...

    def module(self, spec: ModuleSpec) -> Module:
        """The compiled module for ``spec`` on the current device, built once."""
        key = (self.device_key(), spec)
        mod = self._modules.get(key)
        if mod is None:
            with self._lock:
                lock = self._build_locks.setdefault(key, threading.Lock())
            with lock:
                mod = self._modules.get(key)
                if mod is None:
                    mod = self._build(spec)
                    self._modules[key] = mod
        return mod

    def compile_unit(self, spec: ModuleSpec, name: str) -> ModuleSpec:
        """The module this backend builds for kernel ``name`` of ``spec``."""
        return spec.part(name) if self.per_kernel_modules else spec

    def compile_units(self, spec: ModuleSpec) -> list[ModuleSpec]:
        """The modules this backend builds for all of ``spec``'s kernels (``precompile``)."""
        return spec.parts() if self.per_kernel_modules else [spec]

    def kernel(self, spec: ModuleSpec, name: str) -> Kernel:
        """Kernel ``name`` of ``spec``, built (with its compile unit) once per device."""
        unit = self.compile_unit(spec, name)
        noted = getattr(_noting, "units", None)
        if noted is not None and (self.device_key(), unit) not in self._modules:
            noted.append((self, unit))
            return _Deferred(self, unit, name)
        return self.module(unit).get_function(name)

    def prefetch(self, make: Callable[[], object]) -> None:
        """Builds side by side the compile units that ``make()`` (a runner's preparation)
        asks :meth:`kernel` for and that are not built yet, so that a first call waits for
        its slowest unit rather than for their sum (NVRTC and g++ run outside the GIL).
        ``make`` runs once first as a dry run, getting each unbuilt kernel as a stand-in
        built on first use; its result is dropped and whatever it raises is ignored (the
        real call after this raises it again, as a build that fails here does). Inside
        another prefetch's dry run it does nothing: that one notes the units."""
        if getattr(_noting, "units", None) is not None:
            return
        noted: list[tuple[Backend, ModuleSpec]] = []
        _noting.units = noted
        try:
            make()
        except Exception:  # (the real call raises it)
            pass
        finally:
            _noting.units = None
        todo = [(b, u) for b, u in dict.fromkeys(noted) if (b.device_key(), u) not in b._modules]
        if len(todo) < 2:
            return  # one unit: the real call builds it
        scopes = {id(b): b._worker_scope() for b, _ in todo}

        def build(item: tuple[Backend, ModuleSpec]) -> None:
            backend, unit = item
            try:
                with scopes[id(backend)]():
                    backend.module(unit)
            except Exception:  # (the real call raises it)
                pass

        list(_build_pool().map(build, todo))

    def _worker_scope(self) -> Callable[[], contextlib.AbstractContextManager]:
        """What a build on another thread runs under to build for this thread's device."""
        return contextlib.nullcontext

    @abc.abstractmethod
    def synchronize(self) -> None: ...

    def multiprocessor_count(self) -> int:
        """Streaming multiprocessors of the device, for grid sizing (the emulator: its
        OS threads are the closest analogue)."""
        import os

        return os.cpu_count() or 1

    def max_shared_per_block(self) -> int | None:
        """Shared memory one block may opt in to on the device, as it reports it; None
        where the arch's table value stands (the emulator, ahead-of-time builds)."""
        return None

    def max_cooperative_blocks(
        self, kernel: Kernel, block_threads: int, shared_mem: int = 0
    ) -> int:
        """The largest grid (in blocks) a cooperative launch of ``kernel`` may have with
        ``block_threads`` threads and ``shared_mem`` bytes of dynamic shared memory per
        block: SMs x resident blocks per SM on a GPU, a fixed bound on the emulator."""
        return kernel.max_cooperative_blocks(block_threads, shared_mem)

    def empty(self, shape: Sequence[int], dtype: Any) -> Any:
        return self.xp.empty(tuple(shape), dtype=dtype)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.device_key()} ({self.arch()})>"
