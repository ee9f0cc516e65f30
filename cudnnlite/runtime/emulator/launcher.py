"""The CPU emulator backend: loads a kernel module that :mod:`.build` compiled and
launches its kernels on NumPy arrays through ctypes.

Environment switches (looked up at each launch through a cached snapshot, so tests can
flip them between launches):

======================  =====================================================
CUDNNLITE_EMU_SCHEDULE  ``forward`` (default), ``reverse`` or ``random``: the
                        order threads of a block run in; exposes missing barriers
CUDNNLITE_EMU_SEED      seed of the random schedule (default 0)
CUDNNLITE_EMU_POISON    ``1``: fill shared memory with 0xFF (NaN) at each block
                        start; exposes reads before writes (on in the test suite)
CUDNNLITE_EMU_THREADS   OS threads running blocks (default: all cores); a cooperative
                        launch ignores it and runs one per block
CUDNNLITE_EMU_STACK_KB  stack per CUDA thread (default 256)
CUDNNLITE_EMU_ASAN      ``1``: AddressSanitizer build; every array is copied into a
                        buffer with poisoned redzones, out-of-bounds accesses raise
CUDNNLITE_EMU_RACECHECK ``1``: ThreadSanitizer build (emu_racecheck.h): a data race
                        between two threads of a block, on shared or global memory,
                        raises ExecutionError naming both threads and source lines.
                        Needs TSan's runtime loaded first: run the program under
                        ``python -m cudnnlite.runtime.emulator.racecheck``
======================  =====================================================
"""

from __future__ import annotations

import ctypes
import functools
import os
import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from ...errors import BadParamError, ExecutionError, NotSupportedError
from ..backend import Backend, Dim, Kernel, Module, check_cooperative_grid, launch_dims
from ..env import flag, raw_reader
from ..graph import current_recorder
from ..kernel import ModuleSpec
from ..pointers import host_pointer
from ..transfer import DeviceToHost
from . import racecheck as racecheck_mod
from .build import _compile, _env_flag

_SCHEDULES = {"forward": 0, "reverse": 1, "random": 2}


class LaunchConfig(ctypes.Structure):
    """Mirror of emu::LaunchConfig in cuda_emu.h."""

    _fields_ = [
        ("grid", ctypes.c_uint * 3),
        ("block", ctypes.c_uint * 3),
        ("shared_bytes", ctypes.c_ulonglong),
        ("schedule", ctypes.c_int),
        ("poison", ctypes.c_int),
        ("num_threads", ctypes.c_int),
        ("seed", ctypes.c_ulonglong),
        ("stack_bytes", ctypes.c_ulonglong),
        ("cooperative", ctypes.c_int),
    ]


# Co-residency limits of a cooperative launch, equal to kMaxCooperativeBlocks and
# kMaxCooperativeThreads in cuda_emu.h (a test checks): each block of such a launch
# is an OS thread, each of its CUDA threads a fiber with its own stack.
MAX_COOPERATIVE_BLOCKS = 128
MAX_COOPERATIVE_THREADS = 16384


def max_cooperative_blocks(block_threads: int) -> int:
    """Blocks of ``block_threads`` threads a cooperative launch may have on the emulator."""
    if block_threads < 1:
        raise BadParamError(f"block_threads must be >= 1, got {block_threads}")
    return min(MAX_COOPERATIVE_BLOCKS, MAX_COOPERATIVE_THREADS // block_threads)


_SCALAR_TYPES: dict[str, type] = {
    "b1": np.bool_,
    "i1": np.int8,
    "u1": np.uint8,
    "i2": np.int16,
    "u2": np.uint16,
    "i4": np.int32,
    "u4": np.uint32,
    "i8": np.int64,
    "u8": np.uint64,
    "f4": np.float32,
    "f8": np.float64,
    "h2": np.float16,
    "e2": np.uint16,  # bfloat16 bits
}

_ENV_NAMES = (
    "CUDNNLITE_EMU_SCHEDULE",
    "CUDNNLITE_EMU_POISON",
    "CUDNNLITE_EMU_THREADS",
    "CUDNNLITE_EMU_SEED",
    "CUDNNLITE_EMU_STACK_KB",
)


# The raw values of the launch switches, read at every launch (runtime.env: a dict
# access per name, not os.environ.get's encode/decode).
_read_env = raw_reader(_ENV_NAMES)


@functools.lru_cache(maxsize=64)
def _launch_switches(raw: tuple[Any, ...]) -> tuple[int, int, int, int, int]:
    """(schedule, poison, threads, seed, stack bytes) parsed from the raw switch values;
    memoized, so a launch parses only when a switch changed since it was last seen."""
    # Unset means the default; set but empty is parsed (and refused) as before.
    defaults = ("forward", "0", "0", "0", "256")
    env = [
        d if v is None else os.fsdecode(v) if isinstance(v, bytes) else v
        for v, d in zip(raw, defaults, strict=True)
    ]
    schedule = env[0].strip().lower()
    if schedule not in _SCHEDULES:
        raise BadParamError(
            f"CUDNNLITE_EMU_SCHEDULE must be one of {sorted(_SCHEDULES)}, got {schedule!r}"
        )
    poison = flag(env[1])
    return _SCHEDULES[schedule], int(poison), int(env[2]), int(env[3]), int(env[4]) * 1024


def _dims_key(value: Any) -> Any:
    """``value`` when it is a plain int or tuple of plain ints (safe as a cache key: a
    float 1.0 equals 1 and must still be refused by launch_dims), else None."""
    if type(value) is int:
        return value
    if type(value) is tuple and all(type(d) is int for d in value):
        return value
    return None


class _ArgPlan:
    """Where each kernel argument lives in a per-kernel byte arena that the ``void**``
    argument array points into once and for all: a launch writes the values (pointer,
    scalar or struct bytes) into their slots instead of building ctypes objects."""

    def __init__(self, signature: list[str]) -> None:
        offsets, kinds = [], []
        end = 0
        for code in signature:
            if code == "p" or code in _SCALAR_TYPES:
                size, align = 8, 16
            else:  # "s<size>a<align>"
                size_text, _, align_text = code[1:].partition("a")
                size, align = int(size_text), max(16, int(align_text or "16"))
            end = (end + align - 1) // align * align
            offsets.append(end)
            kinds.append(code)
            end += max(size, 1)
        self.kinds = kinds
        self.offsets = offsets
        self.nbytes = max(16, (end + 15) // 16 * 16)

    def new_arena(self) -> tuple[np.ndarray, ctypes.Array]:
        """A zeroed arena and the argument array pointing into it."""
        arena = np.zeros(self.nbytes, dtype=np.uint8)
        base = arena.ctypes.data
        values = (ctypes.c_void_p * max(1, len(self.kinds)))()
        for i, off in enumerate(self.offsets):
            values[i] = base + off
        return arena, values


class EmulatorKernel(Kernel):
    def __init__(self, module: EmulatorModule, index: int, name: str, signature: str) -> None:
        self.module = module
        self.index = index
        self.name = name
        self.spec = module.spec
        self.signature = signature.split(",") if signature else []
        self._plan = _ArgPlan(self.signature)
        self._arena, self._values = self._plan.new_arena()
        self._u64 = self._arena.view(np.uint64)
        # Per argument: a writer for the fast path (exact types only), else None.
        self._writers = [self._writer(i, code) for i, code in enumerate(self.signature)]
        # (grid, block, shared_mem, cooperative, switches) -> LaunchConfig, read-only once built
        self._configs: dict[tuple[Any, ...], LaunchConfig] = {}

    def _writer(self, i: int, code: str) -> Any:
        off = self._plan.offsets[i]
        if code == "p":
            u64, slot = self._arena.view(np.uint64), off // 8
            asan = self.module.asan

            def write_pointer(arg: Any) -> bool:
                # Aligned NumPy arrays go straight through; anything else (None, a copy to
                # make, an error to raise) takes the general path.
                if type(arg) is not np.ndarray or asan or not arg.flags.aligned:
                    return False
                u64[slot] = host_pointer(arg)
                return True

            return write_pointer
        if code in _SCALAR_TYPES:
            expected = _SCALAR_TYPES[code]
            view, index = self._arena.view(expected), off // np.dtype(expected).itemsize

            def write_scalar(arg: Any) -> bool:
                if type(arg) is not expected:
                    return False
                view[index] = arg
                return True

            return write_scalar
        size = int(code[1:].partition("a")[0])
        address = self._arena.ctypes.data + off
        last: list[Any] = [None]  # the struct this slot holds (the ops cache theirs)

        def write_struct(arg: Any) -> bool:
            if arg is last[0]:
                return True  # the same np.void as the last launch: its bytes are there
            if type(arg) is not np.void or arg.dtype.itemsize != size:
                return False
            ctypes.memmove(address, arg.tobytes(), size)
            last[0] = arg
            return True

        return write_struct

    def _convert(self, args: Sequence[Any], keep: list) -> ctypes.Array:
        """Writes ``args`` into the kernel's arena (callers hold the module lock) and
        returns the argument array that points into it."""
        if len(args) != len(self.signature):
            raise BadParamError(
                f"kernel {self.name} takes {len(self.signature)} arguments, got {len(args)}"
            )
        writers = self._writers
        for i, arg in enumerate(args):
            writer = writers[i]
            if writer is None or not writer(arg):
                self._write_general(i, arg, keep)
        return self._values

    def _write_general(self, i: int, arg: Any, keep: list) -> None:
        code, off = self.signature[i], self._plan.offsets[i]
        cvalue = self._convert_one(i, arg, code, keep)
        if isinstance(cvalue, ctypes.c_void_p):
            self._u64[off // 8] = cvalue.value or 0
        else:
            raw = cvalue.raw
            self._arena[off : off + len(raw)] = np.frombuffer(raw, dtype=np.uint8)

    def _convert_one(self, i: int, arg: Any, code: str, keep: list) -> Any:
        where = f"argument {i} of kernel {self.name}"
        if code == "p":
            if arg is None:
                return ctypes.c_void_p(0)
            if isinstance(arg, np.ndarray):
                return ctypes.c_void_p(self.module.array_pointer(arg, keep))
            if hasattr(arg, "__cuda_array_interface__") and hasattr(arg, "data"):
                # A GPU array on the emulator (CUDNNLITE_BACKEND=cpu): run on a host copy.
                copy = DeviceToHost(arg)
                keep.append(copy)
                return ctypes.c_void_p(copy.pointer())
            raise BadParamError(
                f"{where}: expected a NumPy array (pointer), got {type(arg).__name__}"
            )
        if code.startswith("s"):
            size = int(code[1:].split("a")[0])
            if isinstance(arg, np.void) and arg.dtype.itemsize == size:
                return ctypes.create_string_buffer(arg.tobytes(), size)
            raise BadParamError(
                f"{where}: expected a numpy.void struct of {size} bytes, got {arg!r}"
            )
        expected = _SCALAR_TYPES[code]
        if not isinstance(arg, np.generic) or arg.dtype != np.dtype(expected):
            raise BadParamError(
                f"{where}: expected a numpy.{np.dtype(expected).name} scalar "
                "(the kernel's C type), "
                f"got {arg!r} of type {type(arg).__name__}; pass exact NumPy scalars so the same "
                "call is also correct on the GPU"
            )
        return ctypes.create_string_buffer(arg.tobytes(), arg.dtype.itemsize)

    def max_cooperative_blocks(self, block_threads: int, shared_mem: int = 0) -> int:
        """The emulator's co-residency limit; shared memory does not bound it here."""
        return max_cooperative_blocks(block_threads)

    def _config(self, grid: Dim, block: Dim, shared_mem: int, cooperative: bool) -> LaunchConfig:
        """The checked LaunchConfig of a launch, built once per (dims, shared memory,
        cooperative, environment switches) when the dims are plain ints."""
        raw = _read_env()
        gk, bk = _dims_key(grid), _dims_key(block)
        key = None
        if gk is not None and bk is not None and type(shared_mem) is int:
            key = (gk, bk, shared_mem, bool(cooperative), raw)
            cfg = self._configs.get(key)
            if cfg is not None:
                return cfg
        cfg = LaunchConfig()
        cfg.grid[:], cfg.block[:] = launch_dims(grid, block)
        if shared_mem < 0:
            raise BadParamError(f"shared_mem must be >= 0, got {shared_mem}")
        cfg.shared_bytes = shared_mem
        if cooperative:
            check_cooperative_grid(self, tuple(cfg.grid), tuple(cfg.block), shared_mem)
        cfg.cooperative = int(cooperative)
        # Parsed after the dims checks, in the order the errors always came.
        switches = _launch_switches(raw)
        cfg.schedule, cfg.poison, cfg.num_threads, cfg.seed, cfg.stack_bytes = switches
        if self.module.racecheck:
            # Blocks one after another on one OS thread: the check is per block.
            cfg.num_threads = 1
        if key is not None:
            if len(self._configs) > 256:  # a kernel launched with ever-changing grids
                self._configs.clear()
            self._configs[key] = cfg
        return cfg

    def __call__(
        self,
        grid: Dim,
        block: Dim,
        args: Sequence[Any],
        shared_mem: int = 0,
        cooperative: bool = False,
    ) -> None:
        cfg = self._config(grid, block, shared_mem, cooperative)
        recorder = current_recorder()
        keep: list = []
        module = self.module
        with module.lock:  # one launch at a time per module: the error slot and the arena
            values = self._convert(args, keep)
            if recorder is not None:
                recorder.record_emulator(self, cfg, args, keep)
            if module.racecheck:
                with racecheck_mod.capture() as races:
                    rc = module.lib.emu_launch(self.index, ctypes.byref(cfg), values)
            else:
                rc = module.lib.emu_launch(self.index, ctypes.byref(cfg), values)
            if keep:
                module.copy_back(keep)
            if rc != 0:
                race = ""
                if module.racecheck and races.reports:  # both: the failure comes first
                    race = racecheck_mod.race_error(self.name, self.spec.label(), races.reports)
                    race = f"\n{race}"
                raise self.failure(race)
            if module.racecheck and races.reports:
                raise racecheck_mod.race_error(self.name, self.spec.label(), races.reports)

    def prepare(self, grid: Dim, block: Dim, args: Sequence[Any], shared_mem: int = 0,
                vary: int = -1) -> Any:  # fmt: skip
        """:meth:`Kernel.prepare`: the arguments converted once into an arena of the
        prepared launch's own; each launch writes the varying struct's bytes into it and
        runs it as a graph's recorded launch does. Anything the arena cannot hold as it
        is (a host copy of an argument, a varying argument that is not a struct) takes
        the ordinary path."""
        ordinary = Kernel.prepare(self, grid, block, args, shared_mem, vary)
        index = vary % len(self.signature) if self.signature else 0
        code = self.signature[index] if self.signature else ""
        # (the AddressSanitizer build copies every array per launch, between redzones)
        if len(args) != len(self.signature) or not code.startswith("s") or self.module.asan:
            return ordinary
        size = int(code[1:].partition("a")[0])
        cfg = self._config(grid, block, shared_mem, False)
        keep: list = []
        with self.module.lock:
            self._convert(args, keep)
            arena, values = self.snapshot_arguments()
            if keep:  # copies made for one launch (a later one would not see new contents):
                self.module.copy_back(keep)  # released unchanged; the ordinary path, each time
                return ordinary
        address = arena.ctypes.data + self._plan.offsets[index]
        run = self.recorded_launcher(ctypes.byref(cfg), values)

        # (the defaults keep the arena, the config and the arrays it points to alive)
        def launch(value: Any, _arena: np.ndarray = arena, _cfg: Any = cfg,
                   _arrays: tuple = tuple(args)) -> None:  # fmt: skip
            if (
                current_recorder() is not None
                or type(value) is not np.void
                or (value.dtype.itemsize != size)
            ):
                ordinary(value)  # (a capture or a template sees every launch)
                return
            ctypes.memmove(address, value.tobytes(), size)
            run()

        return launch

    def recorded_launcher(self, cfg_ref: Any, values: ctypes.Array, words: Any = None,
                          patches: tuple = ()) -> Callable[[list | None], None]:  # fmt: skip
        """A launch recorded by a graph or a launch template, as a function ``launch(ptrs)``
        bound to its constants: ``ctypes.byref`` of its config and its own copy of the
        argument arena (``values`` points into it), whose uint64 ``words`` first get the
        template's ``patches`` ((word, index into ``ptrs``, byte offset) each), under the
        module's lock: concurrent replays of one recording each launch with their own
        pointers. The module's library and race-check switch are read per launch (a
        benchmark stubs the library out; the closure keeps the config and arena alive)."""
        module, index, lock = self.module, self.index, self.module.lock

        def launch(ptrs: list | None = None) -> None:
            with lock:
                for slot, i, offset in patches:
                    words[slot] = ptrs[i] + offset  # type: ignore[index]
                if module.racecheck:
                    with racecheck_mod.capture() as races:
                        rc = module.lib.emu_launch(index, cfg_ref, values)
                    if races.reports and rc == 0:
                        raise racecheck_mod.race_error(self.name, self.spec.label(),
                                                       races.reports)  # fmt: skip
                else:
                    rc = module.lib.emu_launch(index, cfg_ref, values)
                if rc != 0:
                    raise self.failure()

        return launch

    def failure(self, more: str = "") -> ExecutionError:
        """The error of this kernel's failed launch, from its module's error slot (read
        under the module's lock, before another launch can overwrite it)."""
        message = self.module.lib.emu_last_error().decode(errors="replace")
        return ExecutionError(f"kernel {self.name} ({self.spec.label()}) failed: {message}{more}")

    def pointer_slots(self) -> list[int]:
        """The arena's pointer arguments, as indices of its uint64 words."""
        return [off // 8 for code, off in zip(self.signature, self._plan.offsets, strict=True)
                if code == "p"]  # fmt: skip

    def snapshot_arguments(self) -> tuple[np.ndarray, ctypes.Array]:
        """A copy of the arena as the last conversion left it (callers hold the module
        lock) and an argument array pointing into the copy: what a graph replays."""
        arena, values = self._plan.new_arena()
        arena[:] = self._arena
        return arena, values


class LaunchList:
    """Recorded launches run in order by one C call: what an emulator graph replays
    (:meth:`Graph.replay <cudnnlite.runtime.graph.Graph.replay>`). Each entry is
    ``(kernel, config, values)``: a kernel, its launch config and its argument array (into
    an arena the caller keeps alive, with the config). ``emu_run_list`` of the first
    kernel's module calls each launch's own module's ``emu_launch`` through its address,
    with every module's lock held for the whole list (taken in one global order, so two
    lists cannot deadlock; a single launch takes one lock at a time). The first launch
    that fails stops the list and raises its kernel's error. A race-check module needs
    Python around each of its launches, so a list with one runs its launches one by one
    (:meth:`EmulatorKernel.recorded_launcher`), as every replay did before this class."""

    def __init__(self, launches: Sequence[tuple[EmulatorKernel, LaunchConfig, Any]]) -> None:
        n = len(launches)
        self._kernels = [kernel for kernel, _, _ in launches]
        self._values = [values for _, _, values in launches]  # (alive while the list is)
        modules = {id(k.module): k.module for k in self._kernels}
        self._locks = [modules[i].lock for i in sorted(modules)]
        self._one_by_one = None
        if any(m.racecheck for m in modules.values()):
            self._one_by_one = [k.recorded_launcher(ctypes.byref(cfg), values)
                                for k, cfg, values in launches]  # fmt: skip
        self._module = self._kernels[0].module if n else None
        address = ctypes.addressof
        fns = [ctypes.cast(k.module.lib.emu_launch, ctypes.c_void_p).value for k in self._kernels]
        self._failed = ctypes.c_int(-1)
        self._args = (
            n,
            (ctypes.c_void_p * n)(*fns),
            (ctypes.c_int * n)(*[k.index for k in self._kernels]),
            (ctypes.c_void_p * n)(*[address(cfg) for _, cfg, _ in launches]),
            (ctypes.c_void_p * n)(*[address(values) for _, _, values in launches]),
            ctypes.byref(self._failed),
        )
        self._keep = [cfg for _, cfg, _ in launches]

    def __len__(self) -> int:
        return len(self._kernels)

    def __call__(self) -> None:
        if self._one_by_one is not None:
            for launch in self._one_by_one:
                launch()
            return
        if self._module is None:
            return
        locks, held = self._locks, 0
        try:
            for lock in locks:
                lock.acquire()
                held += 1
            # (the module's library read per call: a benchmark stubs it out)
            if self._module.lib.emu_run_list(*self._args) != 0:
                raise self._kernels[self._failed.value].failure()
        finally:
            for lock in locks[:held]:  # (all of them, unless an interrupt came between)
                lock.release()


def _byte_bounds(arr: np.ndarray) -> tuple[int, int]:
    if hasattr(np.lib, "array_utils"):
        return np.lib.array_utils.byte_bounds(arr)
    return np.byte_bounds(arr)


class _AsanBuffer:
    """An array's bytes copied between poisoned redzones (ASan builds), or to an aligned
    place (``realign``: an array not aligned to its itemsize; the poison is a no-op in
    other builds)."""

    REDZONE = 64

    def __init__(self, lib: ctypes.CDLL, arr: np.ndarray, realign: bool = False) -> None:
        lo, hi = _byte_bounds(arr)
        self.arr, self.lo, self.nbytes, self.lib = arr, lo, hi - lo, lib
        raw = ctypes.string_at(lo, self.nbytes)
        self.buf = np.zeros(self.nbytes + 2 * self.REDZONE + 64, dtype=np.uint8)
        base = self.buf.ctypes.data
        start = (base + self.REDZONE + 63) // 64 * 64
        if not realign:  # keep the element alignment of the original
            start += lo % 64
        self.start = start
        ctypes.memmove(start, raw, self.nbytes)
        lib.emu_asan_poison(ctypes.c_void_p(base), ctypes.c_ulonglong(start - base), 1)
        end = start + self.nbytes
        tail = base + self.buf.nbytes - end
        lib.emu_asan_poison(ctypes.c_void_p(end), ctypes.c_ulonglong(tail), 1)

    def pointer(self, arr: np.ndarray | None = None) -> int:
        """Where ``arr`` (default: the array this buffer was made for) lives in the copy."""
        a = self.arr if arr is None else arr
        return self.start + (host_pointer(a) - self.lo)

    def covers(self, lo: int, hi: int) -> bool:
        return self.lo <= lo and hi <= self.lo + self.nbytes

    def overlaps(self, lo: int, hi: int) -> bool:
        return lo < self.lo + self.nbytes and self.lo < hi

    def copy_back(self) -> None:
        base = self.buf.ctypes.data
        self.lib.emu_asan_poison(ctypes.c_void_p(base), ctypes.c_ulonglong(self.buf.nbytes), 0)
        if self.arr.flags.writeable:
            ctypes.memmove(self.lo, self.start, self.nbytes)


class EmulatorModule(Module):
    def __init__(self, spec: ModuleSpec, asan: bool, racecheck: bool = False) -> None:
        self.spec = spec
        self.asan = asan
        self.racecheck = racecheck
        if racecheck:
            racecheck_mod.require_runtime()
        self.path = _compile(spec, asan, racecheck)
        self.lock = threading.Lock()
        self.lib = ctypes.CDLL(str(self.path), mode=ctypes.RTLD_LOCAL)
        lib = self.lib
        lib.emu_kernel_count.restype = ctypes.c_int
        lib.emu_kernel_name.restype = ctypes.c_char_p
        lib.emu_kernel_name.argtypes = [ctypes.c_int]
        lib.emu_kernel_signature.restype = ctypes.c_char_p
        lib.emu_kernel_signature.argtypes = [ctypes.c_int]
        lib.emu_launch.restype = ctypes.c_int
        lib.emu_launch.argtypes = [ctypes.c_int, ctypes.POINTER(LaunchConfig), ctypes.c_void_p]
        lib.emu_last_error.restype = ctypes.c_char_p
        lib.emu_run_list.restype = ctypes.c_int
        lib.emu_run_list.argtypes = [ctypes.c_int, *[ctypes.c_void_p] * 4,
                                     ctypes.POINTER(ctypes.c_int)]  # fmt: skip
        lib.emu_static_shared_bytes.restype = ctypes.c_ulonglong
        lib.emu_asan_poison.argtypes = [ctypes.c_void_p, ctypes.c_ulonglong, ctypes.c_int]
        lib.emu_measure_switch_ns.restype = ctypes.c_double
        lib.emu_measure_switch_ns.argtypes = [ctypes.c_longlong]
        self.kernels: dict[str, EmulatorKernel] = {}
        for i, name in enumerate(spec.names):
            sig = lib.emu_kernel_signature(i).decode()
            self.kernels[name] = EmulatorKernel(self, i, name, sig)

    def get_function(self, name: str) -> Kernel:
        try:
            return self.kernels[name]
        except KeyError:
            raise BadParamError(
                f"kernel {name!r} is not among the names compiled for {self.spec.label()}: "
                f"{list(self.kernels)}"
            ) from None

    def measure_switch_ns(self, iters: int = 1_000_000) -> float:
        """Cost of one fiber context switch on this machine, in nanoseconds."""
        with self.lock:
            return float(self.lib.emu_measure_switch_ns(iters))

    def static_shared_bytes(self) -> int:
        return int(self.lib.emu_static_shared_bytes())

    def array_pointer(self, arr: np.ndarray, keep: list) -> int:
        # NumPy allows arrays not aligned to their itemsize (one unpickled from a byte
        # stream, e.g. a Dask block sent by another worker); GPU memory never is, kernels
        # count on it (cp.async checks it), so such an array runs on an aligned copy.
        realign = not arr.flags.aligned
        if not (self.asan or realign) or arr.size == 0:
            return host_pointer(arr)
        # Arguments that share memory (the same array twice, a view of another) must
        # share one copy, or copy_back would overwrite one result with the other.
        lo, hi = _byte_bounds(arr)
        for item in keep:
            if isinstance(item, _AsanBuffer) and item.covers(lo, hi):
                return item.pointer(arr)
        for item in keep:
            if isinstance(item, _AsanBuffer) and item.overlaps(lo, hi):
                raise NotSupportedError(
                    "CUDNNLITE_EMU_ASAN: two arguments partially overlap in memory; pass the "
                    "larger array first or disable the AddressSanitizer build"
                )
        buf = _AsanBuffer(self.lib, arr, realign=realign)
        keep.append(buf)
        return buf.pointer()

    def copy_back(self, keep: list) -> None:
        for item in keep:
            if isinstance(item, (_AsanBuffer, DeviceToHost)):
                item.copy_back()


# The switches that pick a module build (their own cache of modules per device key), read
# by the ops' call caches on every call: raw reads (runtime.env), parsed once per value.
_read_build_switches = raw_reader(
    ("CUDNNLITE_EMU_ASAN", "CUDNNLITE_EMU_RACECHECK", "CUDNNLITE_EMU_ALIGNCHECK")
)


@functools.lru_cache(maxsize=16)
def _device_key(raw: tuple[Any, Any, Any]) -> str:
    """The checking builds' modules apart from the plain ones (a switch flipped in a
    process gets modules built with it)."""
    asan, racecheck, aligncheck = (flag(r) for r in raw)
    key = "cpu-asan" if asan else "cpu"
    key += "-racecheck" if racecheck else ""
    # (the alignment check is part of the ASan and race-check builds)
    return key + "-aligncheck" if aligncheck and not (asan or racecheck) else key


class EmulatorBackend(Backend):
    """Runs the CUDA sources on the CPU, on NumPy arrays."""

    name = "cpu"

    @property
    def xp(self) -> Any:
        return np

    def device_key(self) -> str:
        return _device_key(_read_build_switches())

    def arch(self) -> str:
        return "cpu"

    def _build(self, spec: ModuleSpec) -> Module:
        asan = _env_flag("CUDNNLITE_EMU_ASAN")
        if asan:
            # The ASan runtime arrives with the first instrumented library, after
            # Python started; tell it not to insist on being first.
            opts = os.environ.get("ASAN_OPTIONS", "")
            if "verify_asan_link_order" not in opts:
                os.environ["ASAN_OPTIONS"] = (opts + ":" if opts else "") + (
                    "verify_asan_link_order=0:halt_on_error=0:detect_leaks=0"
                )
        return EmulatorModule(spec, asan, _env_flag("CUDNNLITE_EMU_RACECHECK"))

    def synchronize(self) -> None:
        """Emulator launches are synchronous."""

    def timer(self) -> Any:
        import time

        return time.perf_counter
