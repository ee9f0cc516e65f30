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
keeps its own copy), except device-side state registered with
:func:`template_record.shared_state` (a :class:`~cudnnlite.ops.dropout.PhiloxState`'s
counter): a replay reads that memory as it is then, as the op itself would. Such state
belongs to an argument keyed by identity, so a template with it is only replayed while
that object lives.

The call keys are built in :mod:`runtime.template_keys`; the recording and the
:class:`Template` that replays it live in :mod:`runtime.template_record`; this module keeps
the store of templates, the call path through it and a plan's memo of its last template.
"""

from __future__ import annotations

import contextlib
import inspect
import threading
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError, ExecutionError
from . import graph, template_keys
from .env import flag
from .template_keys import _NO_SWITCHES, _SWITCHES, call_key
from .template_record import MISS, Refused, Template, record


class _ThreadState(threading.local):
    off = False  # inside disabled() (a class default: no failed lookup per call)


_state = _ThreadState()
_enabled = True
_CACHE_SIZE = 1024
# The most temporary memory (a workspace, transformed weights, an offsets table) all
# templates together keep for their replays (past it, the oldest templates leave).
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
    templated (why). Runs nothing; arguments the call could not bind (a misspelt keyword,
    one too many) raise its TypeError."""
    if getattr(type(op), "_templated_by_identity", False):
        args, op = (op, *args), type(op).__call__  # a plan: its __call__, self first
    if not callable(op):
        raise BadParamError(f"op: expected a cudnnlite function or plan, got {type(op).__name__}")
    try:
        signature = inspect.signature(op)
    except (TypeError, ValueError):
        signature = None  # a builtin without one: nothing to check
    if signature is not None:
        signature.bind(*args, **kwargs)
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
    if any(a.ndim == 0 or dtypes.lookup(a.dtype) is None for a in args[1:]):
        return  # (their contents are in the key)
    generation, nargs, context, switches = _generation, len(args), key[-2], key[-1]
    unset = all(v is None for v in switches)
    checked = switches[-1] is not None and flag(switches[-1])  # CUDNNLITE_TEMPLATE_CHECK
    host = kinds == {np.ndarray}
    run = (_host_run if host else _device_run)(template, op, fn, args, ptrs, key, checked)
    state = _state
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
        if _NO_SWITCHES() if unset else _SWITCHES() == switches:
            now = template_keys._context_key()
            if now is context or now == context:
                result = run(args, [])
                if result is not MISS:
                    return result
        other = fallback[0]
        return None if other is None else other(called, args)

    memo.generation, memo.older = generation, fallback  # type: ignore[attr-defined]
    plan._template_memo = memo


def _host_run(template: Template, op: Any, fn: Callable[..., Any], args: tuple, ptrs: list,
              key: tuple, checked: bool) -> Callable[[tuple, list], Any]:  # fmt: skip
    """A plan memo's ``run(args, ptrs)`` for NumPy arrays: :data:`MISS` unless the call's
    ``args[1:]`` have the parts of a call key ``args[1:]`` had (each one's shape, dtype,
    strides, address modulo 16 and writability: :func:`_value_key`'s, for float
    tensors; ``ptrs``: their pointers), else the template's replay on them (checked
    against the op under ``CUDNNLITE_TEMPLATE_CHECK``): :meth:`Template.host_replay`,
    check and replay in one function (a chain of closures, one per array, cost about
    0.1 us more per array)."""
    specs = tuple((i, a.shape, a.dtype, a.strides, p & 15, a.flags.writeable)
                  for i, (a, p) in enumerate(zip(args[1:], ptrs, strict=True), 1))  # fmt: skip
    then = None
    if checked:

        def then(args: tuple, arrays: list, ptrs: list) -> Any:
            return _checked_replay(template, op, fn, args, {}, arrays, ptrs)
    elif not template.plain:

        def then(args: tuple, arrays: list, ptrs: list) -> Any:
            return template.replay(arrays, ptrs)

    return template.host_replay(specs, 1, then)


def _device_run(template: Template, op: Any, fn: Callable[..., Any], args: tuple, ptrs: list,
                key: tuple, checked: bool) -> Callable[[tuple, list], Any]:  # fmt: skip
    """:func:`_host_run` for GPU arrays: each one's type, device, shape, dtype, strides
    and address modulo 16, and CuPy's current device and stream (the usual path runs a
    call on its arrays' device and current stream)."""
    specs = tuple((i, type(a), a.device.id, a.shape, a.dtype, a.strides, p & 15)
                  for i, (a, p) in enumerate(zip(args[1:], ptrs, strict=True), 1))  # fmt: skip
    stream = key[-3]  # (call_key appends the current stream's pointer)
    device = args[1].device.id
    cuda = template_keys._cupy_of(type(args[1])).cuda
    replay = template.replay_plain

    def run(args: tuple, ptrs: list) -> Any:
        for i, kind, device_id, shape, dtype, strides, align in specs:
            b = args[i]
            if type(b) is not kind:
                return MISS
            data = b.data  # (CuPy's MemoryPointer: its device without making a Device)
            p = data.ptr
            if (data.device_id != device_id or b.shape != shape or b.dtype != dtype
                    or b.strides != strides or p & 15 != align):  # fmt: skip
                return MISS
            ptrs.append(p)
        if cuda.runtime.getDevice() != device or cuda.get_current_stream().ptr != stream:
            return MISS
        if checked:
            return _checked_replay(template, op, fn, args, {}, list(args[1:]), ptrs)
        return replay(list(args[1:]), ptrs)

    return run


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
    "call",
    "clear",
    "bypassed",
    "disabled",
    "enabled",
    "keep_memo",
    "lookup",
    "set_enabled",
]
