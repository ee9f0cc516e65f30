"""Recording a call's kernel launches into a launch template (:mod:`runtime.templates`),
and the :class:`Template` that replays them on new arrays.
"""

from __future__ import annotations

import ctypes
import threading
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np

from . import graph, template_keys
from .backend import launch_dims
from .env import flag, raw_reader
from .pointers import data_pointer, host_pointer

_read_poison = raw_reader(("CUDNNLITE_EMU_POISON",))
# The most temporary memory (a workspace, transformed weights, an offsets table) one
# template keeps for its replays (a call that needs more runs the op's own code).
SCRATCH_LIMIT = 64 << 20


# ------------------------------------------------------------------ recording


def _extent(a: Any) -> tuple[int, int, int]:
    """(first byte, one past the last byte, data pointer) of a non-empty array."""
    ptr = data_pointer(a)
    lo = hi = ptr
    for n, s in zip(a.shape, a.strides, strict=True):
        if s < 0:
            lo += (n - 1) * s
        else:
            hi += (n - 1) * s
    return lo, hi + a.itemsize, ptr


def _allocator(a: Any) -> tuple[tuple[int, ...], tuple[int, ...] | None] | None:
    """How to allocate an array laid out as ``a``: (shape to allocate C-ordered, the axes
    permutation back to ``a``'s order or None), or None when no dense layout gives
    ``a``'s strides."""
    order = sorted(range(a.ndim), key=lambda i: -a.strides[i])
    shape = tuple(a.shape[i] for i in order)
    inverse = tuple(order.index(i) for i in range(a.ndim))
    probe = np.empty(shape, dtype=a.dtype)
    if order != list(range(a.ndim)):
        probe = probe.transpose(inverse)
    if probe.strides != a.strides:
        return None
    return shape, None if order == list(range(a.ndim)) else inverse


class Refused:
    """A key whose calls are not templated, and why (kept so the reason can be read).

    ``final`` is False after a first refusal: a key's first call may do once-only work (a
    tuning run, a compilation, a table uploaded) that later calls skip, so the second
    call records again; a second refusal is final."""

    __slots__ = ("reason", "final")

    def __init__(self, reason: str, final: bool = False) -> None:
        self.reason = reason
        self.final = final

    def __repr__(self) -> str:
        return f"<not templated: {self.reason}>"


class Recording:
    """The recorder while a call runs (graph's protocol: Kernel.__call__ reports to it)."""

    backend = "template"

    def __init__(self) -> None:
        self.depth = 1  # the op being recorded is entered already; nested ops are its own
        self.refusal: str | None = None
        self.launches: list[tuple] = []
        self.lasts: list[tuple[Any, str]] = []
        self.checks: list[tuple[Any, int]] = []  # (flag, ok): graph.check_flag
        self.exact = True  # False: atomics (graph.note_nondeterministic)

    def refuse(self, why: str) -> None:
        if self.refusal is None:
            self.refusal = why

    def note_host_work(self, what: str) -> None:
        self.refuse(f"host work: {what}")

    def note_foreign_work(self, what: str) -> None:
        self.refuse(f"GPU work outside the library's kernels: {what}")

    def note_nondeterministic(self, what: str) -> None:
        self.exact = False

    def note_check(self, flag: Any, ok: int, on_bad: Any) -> None:
        self.checks.append((flag, ok))  # (a failed check reruns the op, which raises)

    def record_last(self, last: Any, name: str) -> None:
        self.lasts.append((last._local, name))  # (the thread-local LastLaunch.get reads)

    def record_emulator(self, kernel: Any, cfg: Any, args: Any, keep: list) -> None:
        if keep:
            self.refuse("a host copy of an argument")
            return
        arena, values = kernel.snapshot_arguments()
        u64 = arena.view(np.uint64)
        slots = [(i, int(u64[i])) for i in kernel.pointer_slots()]
        owners = tuple(a for a in args if type(a) is np.ndarray and a.size)
        self.launches.append(("cpu", kernel, cfg, arena, values, owners, slots))

    def record_cuda(self, kernel: Any, args: Any, **launch: Any) -> None:
        if launch.get("copies"):
            self.refuse("host arrays copied to the GPU for a launch")
            return
        # ``args``: as CuPy takes them (structs as size-one arrays); device arrays in the
        # same places as in the original arguments
        slots = [(i, data_pointer(a)) for i, a in enumerate(args) if _is_device_array(a)]
        owners = tuple(a for a in args if _is_device_array(a) and a.size)
        dims = launch_dims(launch["grid"], launch["block"])
        self.launches.append(("cuda", kernel, (*dims, launch["shared_mem"],
                              launch["cooperative"]), tuple(args), owners, slots))  # fmt: skip


def _is_device_array(a: Any) -> bool:
    return hasattr(a, "__cuda_array_interface__") and hasattr(a, "data")


def record(fn: Callable[..., Any], args: tuple, kwargs: dict, arrays: list) -> tuple[Any, Any]:
    """Runs ``fn(*args, **kwargs)`` recording its launches; returns (its result, a
    :class:`Template` or :class:`Refused`). An exception propagates (nothing is kept)."""
    rec = Recording()
    graph._set_recorder(rec)
    try:
        result = fn(*args, **kwargs)
    finally:
        graph._set_recorder(None)
    return result, _template(rec, result, arrays)


def _template(rec: Recording, result: Any, inputs: list) -> Any:
    if rec.refusal is not None:
        return Refused(rec.refusal)
    if not rec.launches:
        return Refused("the call launched no kernel")
    kinds = {launch[0] for launch in rec.launches}
    if len(kinds) > 1:
        return Refused("launches on both backends")
    results = result if type(result) is tuple else (result,)
    if all(r is None for r in results):
        return Refused("the call returned no array")
    bound = list(inputs)
    spec = []
    for r in results:
        if r is None:  # (an optional result the call did not make: batch norm's dz)
            spec.append(None)
            continue
        index = next((i for i, a in enumerate(bound) if a is r), None)
        if index is None:
            if type(r) is not np.ndarray and not _is_device_array(r):
                return Refused(f"the call returned a {type(r).__name__}")
            bound.append(r)
            index = len(bound) - 1
        spec.append(index)
    if any(a.size == 0 for a in bound):
        return Refused("an empty array")
    extents = [_extent(a) for a in bound]
    if _overlap(extents):
        return Refused("two of the call's arrays overlap")
    outputs = []
    for index in range(len(inputs), len(bound)):
        if not _whole(bound[index]):
            # a view of a larger buffer: the kernels may write the rest of it too
            return Refused("an output that is part of a larger allocation")
        how = _allocator(bound[index])
        if how is None:
            return Refused("an output with a layout no allocation reproduces")
        outputs.append((*how, bound[index].dtype, extents[index][2] & 15))

    def resolve(ptr: int) -> tuple[int, int] | None:
        for i, (lo, hi, base) in enumerate(extents):
            if lo <= ptr < hi:
                return i, ptr - base
        return None

    launches = []
    roots: dict[int, Any] = {}  # the temporaries' allocations, by first byte
    checks = []  # (the flag's allocation's first byte, byte offset, ok)
    for flag_array, ok in rec.checks:
        root = _root(flag_array)
        address = data_pointer(flag_array)
        if root is None or resolve(address) is not None:
            return Refused("a device-side check whose flag is not a temporary of its own")
        lo = _extent(root)[0]
        roots[lo] = root
        checks.append((lo, address - lo, ok))
    for launch in rec.launches:
        patches = []
        kept = []  # (slot, its allocation's first byte, byte offset): into a temporary
        for slot, ptr in launch[-1]:
            if ptr == 0:
                continue
            where = resolve(ptr)
            if where is not None:
                patches.append((slot, *where))
                continue
            owner = next((a for a in launch[-2] if _holds(a, ptr)), None)
            if owner is None:
                return Refused("a launch reads or writes memory it was not given as an array")
            if _is_shared(owner):
                continue  # device-side state: the recorded pointer, used in place
            root = _root(owner)
            if root is None:
                return Refused("a temporary that is not a whole array of its own")
            lo = _extent(root)[0]
            roots[lo] = root
            kept.append((slot, lo, ptr - lo))
        launches.append([*launch[:-2], tuple(patches), tuple(kept)])
    size = sum(a.nbytes for a in roots.values())
    if size > SCRATCH_LIMIT:
        return Refused(f"{size >> 20} MiB of temporaries, more than a template keeps")
    # The template's own copies of the temporaries (as the call left them: a constant
    # table keeps its values; a workspace is rewritten by each replay before it is read),
    # so that nothing else (a plan that reuses its workspace) shares them.
    private = {lo: root.copy() for lo, root in roots.items()}  # (CuPy: on the stream)
    for launch in launches:
        if not launch[-1]:
            continue
        if launch[0] == "cpu":
            words = launch[3].view(np.uint64)  # the recorded argument arena
            for slot, lo, offset in launch[-1]:
                words[slot] = host_pointer(private[lo]) + offset
        else:
            args = list(launch[3])
            for slot, lo, offset in launch[-1]:
                args[slot] = np.uint64(data_pointer(private[lo]) + offset)
            launch[3] = tuple(args)
    # each check reads one uint64 word of the template's copy of its flag
    words = tuple((_word(private[lo], offset), ok) for lo, offset, ok in checks)
    return Template(kinds.pop(), [tuple(x) for x in launches], outputs, tuple(spec),
                    type(result) is tuple, tuple(rec.lasts), _array_type(results),
                    tuple(private.values()), len(inputs), words, rec.exact)  # fmt: skip


def _array_type(results: tuple) -> type:
    """The array type of a call's results (the first that is not None)."""
    return type(next(r for r in results if r is not None))


def _word(a: Any, offset: int) -> Any:
    """The uint64 at byte ``offset`` of the C-contiguous array ``a``, as a 1-element view."""
    return a.reshape(-1).view(np.uint8)[offset : offset + 8].view(np.uint64)


def _root(a: Any) -> Any:
    """The array that owns ``a``'s memory when it is a C-contiguous array of its own,
    else None."""
    owner = _owner(a)
    return owner if owner is not None and owner.flags.c_contiguous else None


def _overlap(extents: list[tuple[int, int, int]]) -> bool:
    """Whether two of the byte ranges (first, one past the last, ...) overlap."""
    ordered = sorted(extents)
    return any(b[0] < a[1] for a, b in zip(ordered, ordered[1:], strict=False))


def _owner(a: Any) -> Any:
    """The array that owns ``a``'s memory (``a``, or the end of its chain of bases), or
    None when that memory is not an array's of ``a``'s kind (NumPy memory from a bytes
    object, an mmap: not ours to reproduce)."""
    while a.base is not None:
        if type(a.base) is not type(a):
            return None
        a = a.base
    return a


def _whole(a: Any) -> bool:
    """Whether ``a`` spans all the memory it views, so that an allocation of ``a``'s
    layout is all of it."""
    owner = _owner(a)
    return owner is a or (owner is not None and _extent(owner)[:2] == _extent(a)[:2])


# Arrays of device-side state (shared_state), by id: the template uses them in place.
# Weakly held; an array type without weak references is held for the process's life.
_SHARED: weakref.WeakValueDictionary[int, Any] = weakref.WeakValueDictionary()
_SHARED_STRONG: dict[int, Any] = {}


def shared_state(a: Any) -> Any:
    """Registers ``a`` (a whole array an op reads or writes across calls, held by an
    argument that keys templates by identity) as state that template replays use in place
    instead of copying it as a temporary. Returns ``a``."""
    try:
        _SHARED[id(a)] = a
    except TypeError:
        _SHARED_STRONG[id(a)] = a
    return a


def _is_shared(a: Any) -> bool:
    return _SHARED.get(id(a)) is a or _SHARED_STRONG.get(id(a)) is a


def _holds(a: Any, ptr: int) -> bool:
    lo, hi, _ = _extent(a)
    return lo <= ptr < hi


# ------------------------------------------------------------------ replay


#: What a memo's replay answers when a call's arrays are not those its template was
#: recorded for (None: they are, but the replay could not run; the op's own call then
#: runs).
MISS = object()


class Template:
    """A recorded call: see :mod:`runtime.templates`' docstring."""

    def __init__(self, kind: str, launches: list[tuple], outputs: list[tuple],
                 result: tuple[int, ...], is_tuple: bool, lasts: tuple, array_type: type,
                 scratch: tuple = (), inputs: int = 0, checks: tuple = (),
                 exact: bool = True) -> None:  # fmt: skip
        self.kind = kind
        # Device-side argument checks (graph.check_flag): (a word of a temporary, the
        # value that means "passed"); read after the launches, under the lock.
        self.checks = checks
        # False when the launches add with atomics in a varying order
        # (graph.note_nondeterministic): CUDNNLITE_TEMPLATE_CHECK compares within rounding.
        self.exact = exact
        # This template's copies of the recorded call's temporaries (their addresses are
        # in the recorded arguments): each replay's launches rewrite them before reading
        # them, as the recorded call's did, one replay at a time (the lock).
        self.scratch = scratch
        self.scratch_bytes = sum(a.nbytes for a in scratch)
        # (shape to allocate, axes back to the recorded order or None, dtype, address % 16)
        self.outputs = tuple(outputs)
        self.result = result
        # An op that writes one of its inputs (returns it: add_tensor's c) copies another
        # input that overlaps it first; the key cannot tell overlap, so a replay checks.
        self.inputs = inputs
        self.in_place = inputs > 1 and any(i is not None and i < inputs for i in result)
        self.is_tuple = is_tuple
        self.lasts = lasts
        self.xp = np if kind == "cpu" else template_keys._cupy_of(array_type)
        self.poison = kind == "cpu" and flag(_read_poison()[0])  # (a switch of the key)
        self._lock = threading.Lock()
        if kind == "cpu":
            # Each a function launch(ptrs) (the kernel's recorded_launcher on byref(cfg),
            # the argument array, the arena as uint64 words and the patches): the words
            # view keeps the arena alive, the byref the config.
            self._launches = tuple(
                kernel.recorded_launcher(
                    ctypes.byref(cfg), values,
                    (ctypes.c_uint64 * (arena.size // 8)).from_buffer(arena), patches)
                for _, kernel, cfg, arena, values, patches, _kept in launches
            )  # fmt: skip
        else:
            # (launch_prepared, the recorded arguments without the recorded call's own
            # arrays: a replay patches those slots, and the template does not keep that
            # call's memory alive; grid, block, shared memory, cooperative; patches)
            self._launches = tuple(
                (kernel.launch_prepared, _without(args, {slot for slot, _, _ in patches}),
                 *how, patches)
                for _, kernel, how, args, patches, _kept in launches
            )  # fmt: skip
        # One replay at a time where launches share state beyond their own arguments (the
        # temporaries, the check flags); otherwise a launch patches its own argument words
        # under its module's lock (recorded_launcher), and replays may overlap.
        self._serial = bool(scratch or checks)
        self._single = None if is_tuple else result[0]  # (the index of a lone result)
        self._empty = np.empty if kind == "cpu" else None  # (CuPy's: looked up per replay)
        self._pointer = host_pointer if kind == "cpu" else data_pointer
        # What a repeated call (templates.call, a plan's memo) replays through: replay, or
        # for the common host template (no lock, no overlap test, no poison, outputs in
        # their recorded order, one result) the same steps as one closure over its
        # constants.
        plain = kind == "cpu" and self._single is not None
        plain = plain and not (self._serial or self.in_place or self.poison)
        self.plain = plain and all(perm is None for _, perm, _, _ in self.outputs)
        self.replay_plain = self.host_replay() if self.plain else self.replay

    def __len__(self) -> int:
        return len(self._launches)

    def __repr__(self) -> str:
        return f"<Template {self.kind}: {len(self)} launches, {len(self.outputs)} outputs>"

    def replay(self, arrays: list, ptrs: list | None = None) -> Any:
        """Launches on ``arrays`` (the call's arrays, as the key found them, and their
        data pointers; the outputs are appended to both) and returns what the recorded
        call returned; None when an output could not be allocated as recorded, an op that
        writes an input got overlapping inputs, or a device-side check of the arguments
        failed (the caller then runs the op itself, which raises that check's error)."""
        empty, pointer, poison = self._empty or self.xp.empty, self._pointer, self.poison
        if ptrs is None:
            ptrs = [pointer(a) for a in arrays]
        if self.in_place and _overlap([_extent(a) for a in arrays[: self.inputs]]):
            return None
        for shape, perm, dtype, align in self.outputs:
            a = empty(shape, dtype)
            if poison:
                a.reshape(-1).view(np.uint8).fill(0xFF)  # NaN in every float type
            if perm is not None:
                a = a.transpose(perm)
            ptr = pointer(a)
            if ptr & 15 != align:
                return None
            arrays.append(a)
            ptrs.append(ptr)
        if self._serial:
            # (on CUDA the stream is part of the key: one stream's launches, in order)
            with self._lock:
                if self.kind == "cpu":
                    self._launch_cpu(ptrs)
                else:
                    self._launch_cuda(arrays, ptrs)
                if self.checks and not self._passed():
                    return None
        elif self.kind == "cpu":
            self._launch_cpu(ptrs)
        else:
            self._launch_cuda(arrays, ptrs)
        for local, name in self.lasts:
            local.name = name  # (LastLaunch.set without its recorder check)
        if self._single is not None:
            return arrays[self._single]
        return tuple([None if i is None else arrays[i] for i in self.result])

    def host_replay(self, specs: tuple = (), first: int = 0,
                    then: Callable[[Any, list, list], Any] | None = None,
                    ) -> Callable[[Any, list], Any]:  # fmt: skip
        """A host template's replay as one function ``replay(args, ptrs)`` over its
        constants, launching on ``arrays = list(args[first:])`` (``args`` itself when
        ``first`` is 0: ``replay_plain``, the call's arrays with their pointers in
        ``ptrs``). With ``specs`` (a plan's memo, :func:`templates.keep_memo`) it first
        checks ``args[i]`` against each ``(i, shape, dtype, strides, address % 16,
        writeable)``, appending its pointer to ``ptrs``, and answers :data:`MISS` at the
        first that differs. Then ``then(args, arrays, ptrs)`` when given, else the plain
        replay: the outputs and the launches with no lock, overlap test, poison or
        permuted outputs, for a template of one result where those do not arise."""
        outputs = tuple((shape, dtype, align) for shape, _, dtype, align in self.outputs)
        launches = self._launches
        lasts, single = self.lasts, self._single
        empty, pointer, ndarray = np.empty, host_pointer, np.ndarray

        def replay(args: Any, ptrs: list) -> Any:
            # (each dtype compared by identity before ==, the common case)
            for i, shape, dtype, strides, align, writeable in specs:
                b = args[i]
                if type(b) is not ndarray:
                    return MISS
                p = pointer(b)
                if (b.shape != shape or (b.dtype is not dtype and b.dtype != dtype)
                        or b.strides != strides or p & 15 != align
                        or b.flags.writeable is not writeable):  # fmt: skip
                    return MISS
                ptrs.append(p)
            arrays = list(args[first:]) if first else args
            if then is not None:
                return then(args, arrays, ptrs)
            for shape, dtype, align in outputs:
                a = empty(shape, dtype)
                ptr = pointer(a)
                if ptr & 15 != align:
                    return None
                arrays.append(a)
                ptrs.append(ptr)
            for launch in launches:
                launch(ptrs)
            for local, name in lasts:
                local.name = name
            return arrays[single]

        return replay

    def _launch_cpu(self, ptrs: list) -> None:
        for launch in self._launches:
            launch(ptrs)

    def _passed(self) -> bool:
        """Whether every device-side check passed (a device sync on CUDA, as the op's own
        call makes); when one did not, the caller runs the op, which raises its error."""
        return all(graph.flag_passed(word, ok) for word, ok in self.checks)

    def _launch_cuda(self, arrays: list, ptrs: list) -> None:
        for launch, args, grid, block, shared_mem, cooperative, patches in self._launches:
            call_args = list(args)
            for slot, index, offset in patches:
                call_args[slot] = arrays[index] if offset == 0 else np.uint64(ptrs[index] + offset)
            launch(grid, block, tuple(call_args), shared_mem, cooperative)


def _without(args: tuple, slots: set[int]) -> list:
    return [None if i in slots else a for i, a in enumerate(args)]


__all__ = ["MISS", "Recording", "Refused", "Template", "record"]
