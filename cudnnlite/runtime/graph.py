"""Graphs: record a sequence of cudnnlite calls once, replay it with no Python dispatch.

.. code-block:: python

    y = np.empty(...)                          # or CuPy arrays on a non-default stream
    with cudnnlite.graph() as g:
        h = cudnnlite.conv2d(x, w, padding=1)  # functional calls and plans alike
        y = cudnnlite.relu(h)
    x[...] = next_batch                        # new contents in a recorded buffer
    g.replay()                                 # y now holds the result for next_batch

What is recorded is each kernel launch, with its grid, block and arguments, at the level of
``Kernel.__call__`` of each backend (a thread-local "current recorder"):

- **cuda**: the calls run on CuPy's current stream in stream capture
  (``Stream.begin_capture()`` / ``end_capture()``); ``replay()`` launches the resulting CUDA
  graph (``cupy.cuda.graph.Graph.launch``) on the current stream. Work done through CuPy on
  that stream (allocations, copies, cuBLAS) is captured too. Capture needs a non-default
  stream: ``with cupy.cuda.Stream(non_blocking=True):``. During capture nothing runs: read
  the outputs after ``replay()``.
- **cpu (emulator)**: the calls run as usual while recorded, and each launch is kept as
  (kernel, launch config, its own copy of the converted argument bytes). ``replay()`` runs
  that list in one C call (``emulator.launcher.LaunchList``). Work a call does on the host
  in Python (NumPy GEMM in ``runtime/blas.py``, host copies of GPU arrays, ASan's copies)
  would be missed by such a replay: those places call :func:`note_host_work`, and
  ``replay()`` of such a graph raises NotSupportedError naming the work, instead of
  replaying wrongly. Conservatively, only ops marked :func:`graph_safe` (verified to be
  kernel launches, with their host copies reported) may be captured on the emulator; any
  other op makes the graph refuse to replay.

An op that checks its arguments on the device (max pooling backward's saved indices) does so
through :func:`check_flag`: the graph keeps the check, and each ``replay()`` reads its flag
after the launches (a device sync on CUDA, as the eager call's) and raises the op's error
when the new contents fail it.

Between replays the *contents* of every recorded buffer may change (write new inputs into
them in place); shapes, dtypes, arguments and the buffers themselves may not: a replay runs
on the pointers of the capture. A graph keeps every array its launches received alive, so a
recorded buffer cannot be freed or reused under it; rebinding a Python name to a new array
does not change what the graph reads. Capture inside a capture, and replay inside a capture,
raise BadParamError.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from ..errors import BadParamError, NotSupportedError

_local = threading.local()
# Captures in progress in any thread: while none is, every launch skips the thread-local
# lookup (a global read instead of about 0.5 us per launch).
_active = 0
_active_lock = threading.Lock()


def current_recorder() -> Graph | None:
    """The graph capturing on this thread, or None."""
    if not _active:
        return None
    return getattr(_local, "graph", None)


def _set_recorder(graph: Graph | None) -> None:
    global _active
    with _active_lock:
        _active += 1 if graph is not None else -1
        _local.graph = graph


def graph_safe(*fns: Any) -> Any:
    """Marks a public op whose whole work, once its arguments are checked, is kernel launches
    on buffers the graph keeps (the outputs it allocates included), with every host-side
    copy it may make reported through :func:`note_host_work`: an emulator graph may replay
    it. An op without the mark, called inside an emulator capture, makes the graph refuse
    to replay (it may do NumPy work that a launch list would silently skip). Takes the
    public functions (or methods) themselves; returns the first."""
    for fn in fns:
        fn._graph_safe = True
    return fns[0]


def enter_op(fn: Any) -> bool:
    """Called by every public op (``streams.with_stream``) while a capture is active: the
    outermost op of a call is checked for :func:`graph_safe`. True when this call entered
    (the caller then calls :func:`exit_op`)."""
    graph = current_recorder()
    if graph is None:
        return False
    if graph.depth == 0 and graph.backend == "cpu" and not getattr(fn, "_graph_safe", False):
        note_host_work(f"{getattr(fn, '__qualname__', fn)} (not known to be kernel launches only "
                       "on the emulator)")  # fmt: skip
    graph.depth += 1
    return True


def exit_op() -> None:
    graph = current_recorder()
    if graph is not None:
        graph.depth -= 1


def note_host_work(what: str) -> None:
    """Called by code that does work on the host in Python during a call (a NumPy GEMM, a
    host copy, or a CuPy copy on the GPU): an emulator graph recording now cannot replay
    it, and says so; a launch template (runtime.templates) is not made."""
    recorder = current_recorder()
    if recorder is not None:
        recorder.note_host_work(what)


def note_foreign_work(what: str) -> None:
    """Called by code that runs GPU work other than the library's kernels (cuBLAS): a CUDA
    graph captures it with the stream, a launch template could not replay it."""
    recorder = current_recorder()
    if recorder is not None:
        recorder.note_foreign_work(what)


def note_nondeterministic(what: str) -> None:
    """Called where a call launches kernels whose result depends on the order of atomic
    additions (a solver that is not deterministic, an atomic scatter): a graph or a launch
    template replays them as they are, and ``CUDNNLITE_TEMPLATE_CHECK`` then compares that
    call's replays with the op's own results within rounding instead of bit for bit."""
    recorder = current_recorder()
    if recorder is not None:
        recorder.note_nondeterministic(what)


def check_flag(flag: Any, ok: int, on_bad: Any) -> None:
    """A device-side check of the call's arguments: the launches just made left a word in
    ``flag[0]`` (a one-element array they wrote; a launch of the call set it to ``ok``
    first), and any other value means ``on_bad()`` must raise. Read now (one 8-byte read
    back, a device sync for GPU arrays), except inside a CUDA capture, where nothing has
    run yet; a capture or a launch template keeps the check, and each replay makes it again
    after its launches (:meth:`Graph.replay` calls ``on_bad``, which reads the capture's
    arrays; a template's replay runs the op's own code, which raises the same error)."""
    recorder = current_recorder()
    if recorder is not None:
        recorder.note_check(flag, ok, on_bad)
        if recorder.backend == "cuda":
            return
    if not flag_passed(flag, ok):
        on_bad()


def flag_passed(flag: Any, ok: int) -> bool:
    """Whether a device-side check's flag holds ``ok`` (the one read of every check: the
    eager call's, a graph replay's, a template replay's)."""
    return int(flag[0]) == ok


class Graph:
    """A recorded sequence of launches; made by :func:`graph`, run by :meth:`replay`."""

    def __init__(self, backend: str) -> None:
        self.backend = backend
        self._state = "capturing"
        self._host_work: str | None = None
        self.depth = 0  # public ops being called (the outermost one is checked)
        # (emulator: (kernel, its launch config, its argument array), or CUDA: None; the
        # kernel's name); the arenas and arrays stay referenced in _keep
        self._launches: list[tuple[Any, str]] = []
        self._emulator_list: Any = None  # the emulator's LaunchList, made when capture ends
        self._keep: list[Any] = []
        self._cuda_graph: Any = None
        self._stream: Any = None
        self._checks: list[tuple[Any, int, Any]] = []  # (flag, ok, on_bad): check_flag
        # one replay at a time: two would write the same buffers (outputs, workspaces)
        self._replay_lock = threading.Lock()

    def __len__(self) -> int:
        """Launches recorded (the emulator's count; a CUDA graph's nodes are CUDA's)."""
        return len(self._launches)

    def __repr__(self) -> str:
        return f"<cudnnlite.Graph {self.backend} {self._state}, {len(self._launches)} launches>"

    # -- recording (called by the backends' Kernel.__call__) ---------------------------
    def note_host_work(self, what: str) -> None:
        if self.backend == "cpu" and self._host_work is None:
            self._host_work = what

    def note_foreign_work(self, what: str) -> None:
        """cuBLAS and CuPy's own kernels on the capturing stream are in the CUDA graph."""

    def note_nondeterministic(self, what: str) -> None:
        """Atomics: a replay is as reproducible as the eager call (no more, no less)."""

    def note_check(self, flag: Any, ok: int, on_bad: Any) -> None:
        """A device-side argument check (:func:`check_flag`): made again after each replay."""
        self._checks.append((flag, ok, on_bad))
        self._keep.append(flag)

    def record_last(self, last: Any, name: str) -> None:
        """A family's last-kernel name (ops._kernels.LastLaunch): a replay leaves it."""

    def record_emulator(self, kernel: Any, cfg: Any, args: Any, keep: list) -> None:
        """Keeps an emulator launch: its config, a copy of its argument bytes (taken under
        the module lock, right after conversion) and every argument object alive."""
        if self.backend != "cpu":
            raise BadParamError(
                f"a cudnnlite.graph() capturing on {self.backend} got an emulator launch of "
                f"{kernel.name}: NumPy arrays inside a GPU capture"
            )
        if keep:
            self._host_work = self._host_work or "a host copy of an argument"
        arena, values = kernel.snapshot_arguments()
        self._launches.append(((kernel, cfg, values), kernel.name))
        self._keep.append((cfg, arena, tuple(args)))

    def _end_emulator_capture(self) -> None:
        """The recorded launches as one native list (the modules' own libraries, as the
        capture's launches used them)."""
        from .emulator.launcher import LaunchList

        self._emulator_list = LaunchList([entry for entry, _ in self._launches])

    def record_cuda(self, kernel: Any, args: Any, **launch: Any) -> None:
        """Keeps the arguments of a captured CUDA launch alive: the graph replays on their
        pointers, which CuPy's pool must not hand to another array meanwhile."""
        if self.backend != "cuda":
            raise BadParamError(
                f"a cudnnlite.graph() recording on the emulator got a CUDA launch of "
                f"{kernel.name}: GPU arrays inside an emulator recording"
            )
        self._launches.append((None, kernel.name))
        self._keep.append(tuple(args))  # (``launch``: what a template keeps; not needed)

    # -- replay ------------------------------------------------------------------------
    def replay(self) -> None:
        """Runs the recorded launches again on the recorded buffers (see the module doc)."""
        if self._state != "ready":
            raise BadParamError(
                "graph.replay(): the graph is still capturing (replay after the `with` block)"
                if self._state == "capturing"
                else "graph.replay(): the capture failed; record the graph again"
            )
        if current_recorder() is not None:
            raise BadParamError("graph.replay() inside a cudnnlite.graph() capture")
        if self._cuda_graph is not None:
            self._cuda_graph.launch()
            self._check()
            return
        if self._host_work is not None:
            raise NotSupportedError(
                f"this graph is not replayable on the emulator: {self._host_work} does host "
                "work in Python, which a replay of kernel launches would skip; call the ops "
                "directly instead"
            )
        with self._replay_lock:
            self._emulator_list()  # every launch in one C call (launcher.LaunchList)
            self._check()

    def _check(self) -> None:
        """The recorded device-side argument checks, on this replay's flags: the first that
        failed raises its error (as the eager call would have, after its launches)."""
        for flag, ok, on_bad in self._checks:
            if not flag_passed(flag, ok):
                on_bad()


def _default_backend() -> str:
    from .select import forced_backend

    forced = forced_backend()
    if forced:
        return "cpu" if forced == "emulator" else forced
    from .cuda import CudaBackend

    return "cuda" if CudaBackend.available() else "cpu"


@contextmanager
def graph(backend: str | None = None) -> Iterator[Graph]:
    """Records the cudnnlite calls of the ``with`` block into a :class:`Graph`.

    ``backend``: ``"cpu"`` (emulator, NumPy arrays) or ``"cuda"`` (CuPy's current stream,
    which must not be the legacy default stream); default: ``CUDNNLITE_BACKEND``, else
    cuda when a GPU is present, else cpu.
    """
    name = backend or _default_backend()
    if name == "emulator":
        name = "cpu"
    if name not in ("cpu", "cuda"):
        raise BadParamError(f"unknown backend {name!r}: expected 'cpu' (emulator) or 'cuda'")
    if current_recorder() is not None:
        raise BadParamError("cudnnlite.graph(): nested capture (a graph is already recording)")
    g = Graph(name)
    stream = _begin_cuda_capture() if name == "cuda" else None
    _set_recorder(g)
    try:
        yield g
    except BaseException:
        g._state = "failed"
        if stream is not None:
            try:
                stream.end_capture()
            except Exception:  # the capture may be invalid already; the user error wins
                pass
        raise
    finally:
        _set_recorder(None)
    if stream is not None:
        try:
            g._cuda_graph = stream.end_capture()
        except Exception:
            g._state = "failed"
            raise
        g._stream = stream
    else:
        g._end_emulator_capture()
    g._state = "ready"


def _begin_cuda_capture() -> Any:
    from .cuda import import_cupy

    cupy = import_cupy()
    stream = cupy.cuda.get_current_stream()
    if stream.ptr == 0:
        raise BadParamError(
            "cudnnlite.graph() on the legacy default stream: CUDA cannot capture it; run the "
            "block on a stream of its own (`with cupy.cuda.Stream(non_blocking=True):`)"
        )
    stream.begin_capture()
    return stream
