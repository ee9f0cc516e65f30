"""Launch templates: a call's kernel launches recorded once, replayed on new arrays.

The first call of a public op with a given key (which op; every argument's kind, shape,
dtype, strides, address modulo 16 and, for NumPy, writability; the scalars as given, each
with its type; the dispatch settings; the environment switches; on CUDA the current
stream) runs the op as usual while its kernel launches are recorded, the way
:mod:`runtime.graph` records them. The recording becomes a :class:`Template`: the
launches with their grids, blocks and constant arguments, and for each pointer argument
which of the call's arrays (an input, or an array the call returned that it allocated)
and which byte offset it is. The next call with the same key allocates the outputs as the
first call did (same shape, dtype and strides), writes the new arrays' addresses into the
recorded arguments and launches: no validation, no dispatch, no argument packing. That is
what makes a repeated call or a plan cost about a launch.

A pointer into none of the call's arrays points into a temporary the op allocated for the
call (a Winograd workspace, an offsets table a kernel fills, a plan's reused workspace):
the template keeps its own copy of that allocation, as the call left it (up to
:data:`SCRATCH_LIMIT` bytes, :data:`SCRATCH_TOTAL` for all templates: past it the oldest
leave), points the recorded launches there, and its replays use it one at a time (a lock;
on CUDA the key's stream orders them). A constant table keeps its values; a workspace is
rewritten by each replay's launches before they read it, as the recorded call's were. A
graph replay relies on the same property of graph-safe ops, and
``CUDNNLITE_TEMPLATE_CHECK=1`` (on in the test suite) checks it: every replay is followed
by the op's own call, and a result that differs by a bit raises ExecutionError.

What is templated, and what is not:

- only ops marked :func:`runtime.graph.graph_safe` (verified to be kernel launches once
  their arguments are checked, every host-side copy reported), called without ``out=``;
- a call is not templated (it runs the ops' own code every time, which is never wrong)
  when it did work a replay would skip: host work in Python or a CuPy copy
  (:func:`graph.note_host_work`), GPU work outside the library's kernels such as cuBLAS
  (:func:`graph.note_foreign_work`), a host copy of an argument; when a launch reads or
  writes memory it was not given as an array; when its temporaries pass the limit; when
  two of the call's arrays overlap; when it launched nothing, or an array is empty;
- a call that checks its arguments on the device (max pooling backward's saved indices,
  :func:`graph.check_flag`) keeps the check: a replay reads the flag after its launches,
  and when the check failed runs the op's own code, which raises the error;
- a replay whose new output is not aligned as the recorded one was (modulo 16, what the
  kernels' variants depend on), or whose inputs overlap where the op writes one of them
  (an in-place op such as add_tensor copies the other first), runs the op's own code
  instead.

Bad arguments never reach a template: validation raises before a recording completes, so
a stored key always describes a valid call, and a bad call takes the op's own path and
raises its error. Templates are per process, bounded (the oldest key leaves first),
thread-safe (a replay patches a private copy of the argument bytes under its own lock on
the emulator; on CUDA it builds a fresh argument tuple), switched by :func:`set_enabled`
(process-wide) and off in a :func:`disabled` block (one thread, together with the ops'
call caches). Clearing the plan cache clears them. A key refused once is recorded again
on its next call (a first call may tune or compile, with temporaries later calls do not
need); a second refusal is kept.

Under ``CUDNNLITE_EMU_POISON=1`` a replay fills the outputs it allocates with NaN bytes
before launching on the emulator, so a kernel that relied on zeroed memory fails tests.

Memory a launch uses that is not among the call's arrays is a temporary (the template
keeps its own copy), except device-side state registered with :func:`shared_state` (a
:class:`~cudnnlite.ops.dropout.PhiloxState`'s counter): a replay reads that memory as it
is then, as the op itself would. Such state belongs to an argument keyed by identity, so a
template with it is only replayed while that object lives.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib
import math
import threading
import weakref
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import ExecutionError
from . import graph
from .backend import launch_dims
from .env import flag, none_set, raw_reader
from .pointers import data_pointer, host_pointer

# The switches the ops' own path reads at every call (a replay skips that path): the
# backend, the dispatcher's solver switches, the emulator's launch switches and the two
# that choose which build of its modules runs.
_SWITCH_NAMES = tuple(
    f"CUDNNLITE_{n}"
    for n in (
        "BACKEND", "DISABLE_SOLVERS", "FORCE_SOLVER", "FORCE_CONFIG", "EMU_SCHEDULE",
        "EMU_POISON", "EMU_THREADS", "EMU_SEED", "EMU_STACK_KB", "EMU_RACECHECK",
        "EMU_ASAN", "TEMPLATE_CHECK",
    )
)  # fmt: skip
_SWITCHES = raw_reader(_SWITCH_NAMES)
_NO_SWITCHES = none_set(_SWITCH_NAMES)  # (whether none is set: cheaper than reading them)
_UNSET = (None,) * len(_SWITCH_NAMES)
_read_poison = raw_reader(("CUDNNLITE_EMU_POISON",))


class _ThreadState(threading.local):
    off = False  # inside disabled() (a class default: no failed lookup per call)


_state = _ThreadState()
_enabled = True
# What the dispatcher reads besides the arguments (settings); set by the ops layer.
_context_key: Callable[[], Any] = lambda: None  # noqa: E731
_CACHE_SIZE = 1024
# The most temporary memory (a workspace, transformed weights, an offsets table) one
# template keeps for its replays (a call that needs more runs the op's own code), and all
# templates together (past it, the oldest templates leave).
SCRATCH_LIMIT = 64 << 20
SCRATCH_TOTAL = 512 << 20


def enabled() -> bool:
    """Whether launch templates are on in this thread."""
    return _enabled and not bypassed()


def bypassed() -> bool:
    """Whether this thread is inside :func:`disabled` (templates and call caches off)."""
    return _state.off


def set_enabled(on: bool) -> None:
    """Turns launch templates on or off for the whole process (on by default); the ops'
    call caches have their own switch (``ops._fastpath.set_enabled`` turns off both)."""
    global _enabled
    _enabled = bool(on)
    clear()


@contextlib.contextmanager
def disabled() -> Iterator[None]:
    """Runs the block's calls (in this thread) without templates or call caches: the
    ops' own code on every call, which is how tests compare both."""
    old = _state.off
    _state.off = True
    try:
        yield
    finally:
        _state.off = old


def set_context_key(fn: Callable[[], Any]) -> None:
    """Registers what else a call's result depends on (the dispatch settings)."""
    global _context_key
    _context_key = fn


# ------------------------------------------------------------------ keys

_FLAT = frozenset((int, bool, str, type(None)))
# The dtypes of tensors (float16, bfloat16, float32, float64): other arrays' contents are
# keyed.
_TENSOR_DTYPES = frozenset(np.dtype(d.numpy) for d in dtypes.FLOAT_TYPES)
_NUMPY_SCALARS = (np.integer, np.bool_, np.floating)


class _Unkeyable(Exception):
    pass


def _value_key(v: Any, arrays: list, ptrs: list) -> Any:
    """``v``'s part of a call key (arrays appended to ``arrays``, their data pointers to
    ``ptrs``), or raises _Unkeyable. An array's part is its shape, dtype, strides and
    address modulo 16, and for NumPy its writability (an op that updates an input, such as
    batch norm's running statistics, refuses a read-only one; a replay must not write it).
    A plan (the ``self`` of a plan's method) enters by identity."""
    t = type(v)
    if t is np.ndarray:
        ptr = host_pointer(v)
        arrays.append(v)
        ptrs.append(ptr)
        if v.ndim and v.dtype in _TENSOR_DTYPES:
            return (v.shape, v.dtype, v.strides, ptr & 15, v.flags.writeable)
        # A 0-d or non-float array may be a value the op reads on the host (padding as
        # an int array): its contents are part of the key.
        return (v.shape, v.dtype, v.strides, ptr & 15, v.flags.writeable, v.tobytes())
    if t in _FLAT:
        return (t, v)
    if t is float:
        # -0.0 == 0.0 yet can change a result's sign bit: key the sign too.
        return (t, v, math.copysign(1.0, v))
    if t is tuple or t is list:
        return (t, tuple([_value_key(e, arrays, ptrs) for e in v]))
    kind = _KINDS.get(t) or _kind(t)
    if kind == "device":
        ptr = v.data.ptr
        arrays.append(v)
        ptrs.append(ptr)
        if v.ndim and v.dtype in _TENSOR_DTYPES:
            return ("device", v.device.id, v.shape, v.dtype, v.strides, ptr & 15)
        return ("device", v.device.id, v.shape, v.dtype, v.strides, ptr & 15, v.get().tobytes())
    if kind == "identity":
        # a plan (self of a method), by identity; weakly, so that a key does not keep a
        # plan the user dropped (its workspace, kernels) alive
        return weakref.ref(v)
    if kind == "scalar":
        return (t, v.item(), math.copysign(1.0, v) if isinstance(v, np.floating) else 0)
    if kind == "value":
        return v
    raise _Unkeyable


_KINDS: dict[type, str] = {}


def _kind(t: type) -> str:
    """How a value of type ``t`` (not a plain one) enters a key, memoized per type."""
    if (t.__module__ or "").startswith("cupy") and hasattr(t, "__cuda_array_interface__"):
        kind = "device"
    elif issubclass(t, _NUMPY_SCALARS):
        kind = "scalar"
    elif t is np.dtype or issubclass(t, (np.dtype, type)):
        kind = "value"  # a dtype, or a class (dtype=np.float16)
    elif getattr(t, "_templated_by_identity", False):
        kind = "identity"
    else:
        kind = "none"
    _KINDS[t] = kind
    return kind


def call_key(op: Any, args: tuple, kwargs: dict) -> tuple[tuple, list, list] | None:
    """The key of a call of ``op``, the arrays among its arguments (in order) and their
    data pointers, or None for a call that is not templated (``out=`` given, an argument
    of another kind)."""
    arrays: list = []
    ptrs: list = []
    try:
        parts = [_value_key(a, arrays, ptrs) for a in args]
        if kwargs:
            if kwargs.get("out") is not None:
                return None
            parts += [(k, _value_key(v, arrays, ptrs)) for k, v in sorted(kwargs.items())]
    except _Unkeyable:
        return None
    for a in arrays:
        if type(a) is not np.ndarray:
            # a GPU call: per stream (a template's temporaries are used in stream order)
            parts.append(_cupy_of(type(a)).cuda.get_current_stream().ptr)
            break
    switches = _UNSET if _NO_SWITCHES() else _SWITCHES()
    return (op, *parts, _context_key(), switches), arrays, ptrs


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


class Template:
    """A recorded call: see the module docstring."""

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
        self.xp = np if kind == "cpu" else _cupy_of(array_type)
        self.poison = kind == "cpu" and flag(_read_poison()[0])  # (a switch of the key)
        self._lock = threading.Lock()
        if kind == "cpu":
            # (launch_recorded, byref(cfg), argument array, the arena as uint64 words,
            # patches, cfg): the words view keeps the arena alive, the tuple the config.
            self._launches = tuple(
                (kernel.launch_recorded, ctypes.byref(cfg), values,
                 (ctypes.c_uint64 * (arena.size // 8)).from_buffer(arena), patches, cfg)
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
        # under its module's lock (launch_recorded), and replays may overlap.
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
        if plain and all(perm is None for _, perm, _, _ in self.outputs):
            self.replay_plain = self._plain_replay()
        else:
            self.replay_plain = self.replay

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
            for launch, cfg_ref, values, words, patches, _ in self._launches:
                launch(cfg_ref, values, words, patches, ptrs)
        else:
            self._launch_cuda(arrays, ptrs)
        for local, name in self.lasts:
            local.name = name  # (LastLaunch.set without its recorder check)
        if self._single is not None:
            return arrays[self._single]
        return tuple([None if i is None else arrays[i] for i in self.result])

    def _plain_replay(self) -> Callable[[list, list], Any]:
        """:meth:`replay` for a host template of one result without a lock, an overlap
        test, poison or permuted outputs (``replay_plain``), its constants bound."""
        outputs = tuple((shape, dtype, align) for shape, _, dtype, align in self.outputs)
        launches = tuple(launch[:5] for launch in self._launches)
        lasts, single = self.lasts, self._single
        empty, pointer = np.empty, host_pointer

        def replay(arrays: list, ptrs: list) -> Any:
            for shape, dtype, align in outputs:
                a = empty(shape, dtype)
                ptr = pointer(a)
                if ptr & 15 != align:
                    return None
                arrays.append(a)
                ptrs.append(ptr)
            for launch, cfg_ref, values, words, patches in launches:
                launch(cfg_ref, values, words, patches, ptrs)
            for local, name in lasts:
                local.name = name
            return arrays[single]

        return replay

    def _launch_cpu(self, ptrs: list) -> None:
        for launch, cfg_ref, values, words, patches, _ in self._launches:
            launch(cfg_ref, values, words, patches, ptrs)

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


@functools.cache
def _cupy_of(array_type: type) -> Any:
    """The module of a GPU array type (cupy), memoized: a CUDA call asks it every time
    (the current stream is part of the key)."""
    return importlib.import_module(array_type.__module__.split(".")[0])


# ------------------------------------------------------------------ the cache


_cache: dict[tuple, Any] = {}
_cache_lock = threading.Lock()
# Bumped by clear(): a plan's memo (keep_memo) of an older generation is stale.
_generation = 0


def clear() -> None:
    global _scratch_total, _generation
    with _cache_lock:
        _cache.clear()
        _scratch_total = 0
        _generation += 1


def lookup(op: Any, args: tuple, kwargs: dict) -> Any:
    """The Template or Refused stored for this call, or None (for tests and ``explain``)."""
    keyed = call_key(op, args, kwargs)
    return None if keyed is None else _cache.get(keyed[0])


def describe(op: Any, args: tuple, kwargs: dict) -> str:
    """What a call ``op(*args, **kwargs)`` of a public op (or a plan) gets from its launch
    template now, in words: replayed (with what), refused (why), not recorded yet, or not
    templated (why). Runs nothing."""
    if getattr(type(op), "_templated_by_identity", False):
        args, op = (op, *args), type(op).__call__  # a plan: its __call__, self first
    name = getattr(op, "__qualname__", repr(op))
    if not getattr(op, "_graph_safe", False):
        return (f"not templated: {name} is not marked graph-safe (it may do work a replay "
                "would skip)")  # fmt: skip
    if not enabled():
        return "not templated: fast paths are off (cudnnlite.set_fast_paths)"
    keyed = call_key(op, args, {k: v for k, v in kwargs.items() if k != "stream"})
    if keyed is None:
        return "not templated: out= given, or an argument of a kind a key cannot hold"
    entry = _cache.get(keyed[0])
    if entry is None:
        return "not recorded yet: the next call of this key records its launches"
    if type(entry) is Refused:
        again = "" if entry.final else " (its next call records again)"
        return f"not templated: {entry.reason}{again}"
    return (f"replayed: {len(entry)} launch(es) on {entry.kind}, {len(entry.outputs)} "
            f"new output(s), {entry.scratch_bytes} bytes of temporaries")  # fmt: skip


def call(op: Any, fn: Callable[..., Any], args: tuple, kwargs: dict) -> Any:
    """``fn(*args, **kwargs)`` for the public op ``op``, through its template."""
    if graph._active or not _enabled or _state.off:
        return fn(*args, **kwargs)  # (a capture or a recording somewhere; switched off)
    keyed = call_key(op, args, kwargs)
    if keyed is None:
        return fn(*args, **kwargs)
    key, arrays, ptrs = keyed
    entry = _cache.get(key)
    if entry is not None:
        if type(entry) is Template:
            if not kwargs:
                keep_memo(key, entry, op, fn, args, ptrs)
            if key[-1][-1] is not None and flag(key[-1][-1]):  # CUDNNLITE_TEMPLATE_CHECK
                return _checked_replay(entry, op, fn, args, kwargs, arrays, ptrs)
            result = entry.replay_plain(arrays, ptrs)
            if result is not None:
                return result
            return fn(*args, **kwargs)
        if entry.final:
            return fn(*args, **kwargs)
    result, new = record(fn, args, kwargs, arrays)
    if entry is not None and type(new) is Refused:
        new.final = True
    _store(key, new)
    return result


def keep_memo(key: tuple, template: Template, op: Any, fn: Callable[..., Any], args: tuple,
              ptrs: list) -> None:  # fmt: skip
    """Leaves a memo of ``template`` on the plan ``args[0]``: a plan's last template, checked
    without building the call's key, which makes a repeated plan call cost a few attribute
    reads and a replay.

    A plan's call whose template replayed (``templates.call`` with the plan as ``self``,
    float arrays of one kind as its only other arguments, no keyword) leaves the memo: the
    key's parts that can change between the plan's calls (each array's shape, dtype,
    strides, address modulo 16 and writability, or on CUDA its device; the dispatch
    settings; the environment switches; on CUDA the current device and stream) and the
    template, as a function ``memo(op, args)`` that ``streams.with_stream`` calls first
    thing. When every part is equal, the full key would be equal too and find the same
    template, so the memo replays it; otherwise (another array, a capture, fast paths off,
    a cleared template cache: :data:`_generation`) it answers None and the call takes the
    usual path, which raises the same errors as ever. A call with ``out=``, a keyword or
    other arguments never asks the memo. A plan keeps its last two memos (the newer asks
    the older when its own check fails), so that calls alternating between two layouts
    or alignments replay without building a memo each time."""
    plan = args[0]
    if len(args) < 2 or type(plan).__dict__.get("__call__") is not op:
        return
    kinds = {type(a) for a in args[1:]}
    if len(kinds) != 1 or len(ptrs) != len(args) - 1:
        return
    if any(a.ndim == 0 or a.dtype not in _TENSOR_DTYPES for a in args[1:]):
        return  # (their contents are in the key)
    generation, nargs, context, switches = _generation, len(args), key[-2], key[-1]
    unset = all(v is None for v in switches)
    checked = switches[-1] is not None and flag(switches[-1])  # CUDNNLITE_TEMPLATE_CHECK
    host = kinds == {np.ndarray}
    check = (_host_check if host else _device_check)(args[1:], ptrs)
    stream = None if host else key[-3]  # (call_key appends the current stream's pointer)
    device = None if host else args[1].device.id
    cuda = None if host else _cupy_of(type(args[1])).cuda
    replay, state = template.replay_plain, _state
    # The older memo this one asks when its check fails (its own older one dropped).
    older = getattr(plan, "_template_memo", None)
    if older is not None:
        older.older[0] = None
        if older.generation != _generation:
            older = None
    fallback = [older]

    def memo(called: Any, args: tuple) -> Any:
        # (set_enabled clears the store, so a memo from before it is of an old generation)
        if (called is not op or len(args) != nargs or generation != _generation
                or graph._active or state.off):  # fmt: skip
            return None
        ptrs: list = []
        # (a GPU call: the usual path runs it on its arrays' device and current stream)
        if (check(args, ptrs) and (cuda is None or (cuda.runtime.getDevice() == device and
                                                    cuda.get_current_stream().ptr == stream))
                and (_NO_SWITCHES() if unset else _SWITCHES() == switches)):  # fmt: skip
            now = _context_key()
            if now is context or now == context:
                if checked:
                    return _checked_replay(template, op, fn, args, {}, list(args[1:]), ptrs)
                return replay(list(args[1:]), ptrs)
        other = fallback[0]
        return None if other is None else other(called, args)

    memo.generation, memo.older = generation, fallback  # type: ignore[attr-defined]
    plan._template_memo = memo


def _host_check(arrays: tuple, ptrs: list) -> Callable[[tuple, list], bool]:
    """A check that a call's ``args[1:]`` are NumPy arrays whose parts of a call key (each
    one's shape, dtype, strides, address modulo 16 and writability: :func:`_value_key`'s,
    for float tensors) are those of ``arrays`` (whose pointers are ``ptrs``); it appends
    their pointers to its ``ptrs`` as it goes. One loop over the arrays' specs (a chain of
    closures, one per array, cost about 0.1 us more per array), each dtype compared by
    identity before ``==`` (the common case)."""
    specs = tuple((i, a.shape, a.dtype, a.strides, p & 15, a.flags.writeable)
                  for i, (a, p) in enumerate(zip(arrays, ptrs, strict=True), 1))  # fmt: skip
    ndarray, pointer = np.ndarray, host_pointer

    def check(args: tuple, ptrs: list) -> bool:
        for i, shape, dtype, strides, align, writeable in specs:
            b = args[i]
            if type(b) is not ndarray:
                return False
            p = pointer(b)
            if (b.shape != shape or (b.dtype is not dtype and b.dtype != dtype)
                    or b.strides != strides or p & 15 != align
                    or b.flags.writeable is not writeable):  # fmt: skip
                return False
            ptrs.append(p)
        return True

    return check


def _device_check(arrays: tuple, ptrs: list) -> Callable[[tuple, list], bool]:
    """:func:`_host_check` for GPU arrays (each one's type, device, shape, dtype, strides
    and address modulo 16)."""
    specs = tuple((i, type(a), a.device.id, a.shape, a.dtype, a.strides, p & 15)
                  for i, (a, p) in enumerate(zip(arrays, ptrs, strict=True), 1))  # fmt: skip

    def check(args: tuple, ptrs: list) -> bool:
        for i, kind, device, shape, dtype, strides, align in specs:
            b = args[i]
            if type(b) is not kind:
                return False
            data = b.data  # (CuPy's MemoryPointer: its device without making a Device)
            p = data.ptr
            if (data.device_id != device or b.shape != shape or b.dtype != dtype
                    or b.strides != strides or p & 15 != align):  # fmt: skip
                return False
            ptrs.append(p)
        return True

    return check


def _checked_replay(tmpl: Template, op: Any, fn: Callable[..., Any], args: tuple,
                    kwargs: dict, arrays: list, ptrs: list) -> Any:  # fmt: skip
    """A replay, then the op's own call on the same arguments, whose results, and whatever
    it wrote into its inputs (batch norm's running statistics, add_tensor's c), must be
    the same bit for bit (``CUDNNLITE_TEMPLATE_CHECK=1``, which the test suite sets): what
    catches a template that skipped work (host work not reported, a temporary whose
    initial contents mattered). The inputs are restored between the two."""
    inputs = arrays[: tmpl.inputs]
    saved = [(a.copy(), _host_bytes(a)) for a in inputs]
    result = tmpl.replay(arrays, ptrs)
    if result is None:
        return fn(*args, **kwargs)
    written = [_host_bytes(a) for a in inputs]
    got = _results_bytes(result, tmpl.is_tuple) + written
    for a, (copy, before), after in zip(inputs, saved, written, strict=True):
        if after != before:  # (an input it wrote: never a read-only one)
            a[...] = copy
    with disabled():
        want = fn(*args, **kwargs)
    expected = _results_bytes(want, tmpl.is_tuple) + [_host_bytes(a) for a in inputs]
    if got != expected and (tmpl.exact or not all(map(_close, got, expected))):
        name = getattr(op, "__qualname__", repr(op))
        raise ExecutionError(
            f"launch template of {name}: its replay differs from the op's own result "
            f"(a template skipped work the op does; CUDNNLITE_TEMPLATE_CHECK=1 found it)"
        )
    return want


def _close(a: tuple | None, b: tuple | None) -> bool:
    """Whether two (shape, dtype, bytes) agree within the rounding that reordered atomic
    additions leave: relative 1e-2 for 16-bit types, 1e-4 for float32, 1e-9 for float64,
    of the array's largest magnitude. A replay that skipped work (garbage, zeros, a sum
    added twice) is off by far more."""
    if a is None or b is None or a[:2] != b[:2]:
        return a == b
    dtype = np.dtype(a[1])
    x = np.frombuffer(a[2], dtype).astype(np.float64)
    y = np.frombuffer(b[2], dtype).astype(np.float64)
    if dtypes.lookup(dtype) is None:  # (indices, flags: exact)
        return bool(np.array_equal(x, y))
    rtol = {2: 1e-2, 4: 1e-4}.get(dtype.itemsize, 1e-9)
    scale = float(np.nanmax(np.abs(y), initial=0.0))
    return bool(np.allclose(x, y, rtol=rtol, atol=rtol * scale, equal_nan=True))


def _results_bytes(result: Any, is_tuple: bool) -> list:
    return [None if r is None else _host_bytes(r) for r in (result if is_tuple else (result,))]


def _host_bytes(a: Any) -> tuple:
    """(shape, dtype, the bytes in C order) of a NumPy or CuPy array, for comparison."""
    host = a if isinstance(a, np.ndarray) else a.get()
    return host.shape, host.dtype, np.ascontiguousarray(host).tobytes()


_scratch_total = 0  # the bytes of every stored template's temporaries


def _store(key: tuple, entry: Any) -> None:
    """Stores ``entry`` for ``key``; the oldest keys leave while there are more than
    _CACHE_SIZE, or more temporaries than SCRATCH_TOTAL."""
    global _scratch_total
    with _cache_lock:
        old = _cache.pop(key, None)
        _scratch_total -= getattr(old, "scratch_bytes", 0)
        _cache[key] = entry
        _scratch_total += getattr(entry, "scratch_bytes", 0)
        while len(_cache) > _CACHE_SIZE or (_scratch_total > SCRATCH_TOTAL and len(_cache) > 1):
            gone = _cache.pop(next(iter(_cache)))
            _scratch_total -= getattr(gone, "scratch_bytes", 0)


__all__ = [
    "Recording",
    "Refused",
    "Template",
    "call",
    "call_key",
    "clear",
    "bypassed",
    "disabled",
    "enabled",
    "keep_memo",
    "lookup",
    "record",
    "set_context_key",
    "set_enabled",
]
