"""The ``stream=`` keyword of every public function, and DLPack imports inside it.

Every public function of :mod:`cudnnlite` is wrapped by :func:`with_stream`, which

1. adds a keyword-only ``stream=None`` argument. ``None`` means CuPy's current stream
   (``cupy.cuda.get_current_stream()``), which is what every launch, allocation and
   copy uses. Any other value is made a CuPy stream (:func:`as_cupy_stream`) and the
   whole call runs inside ``with stream:``: kernels, workspace and outputs all use it.
   Accepted: a ``cupy.cuda.Stream`` / ``ExternalStream``, an object with the CUDA stream
   protocol ``__cuda_stream__()``, an object with a ``cuda_stream`` attribute
   (``torch.cuda.Stream``) or an ``int`` ``cudaStream_t`` handle.
2. imports array arguments that are neither NumPy nor CuPy arrays (PyTorch, JAX, ...
   tensors; anything with ``__dlpack__``, ``__cuda_array_interface__`` or
   ``__array_interface__``) without a copy, *inside* the chosen stream's context. So the
   DLPack stream handshake is honoured: ``cupy.from_dlpack`` passes the consumer stream
   to the producer's ``__dlpack__(stream=...)``, and the producer makes that stream wait
   for its pending work on the tensor.

3. runs the call on the device its GPU arrays live on: when that is not CuPy's current
   device, the call runs inside ``cupy.cuda.Device(id)`` (launches, allocations, modules,
   the current stream of that device); arrays on two devices are a BadParamError naming
   them (:func:`cudnnlite.runtime.select.call_device`).

The emulator (NumPy arrays) runs synchronously on the host and has no streams: a call
that runs there accepts only ``stream=None`` and raises :class:`NotSupportedError` for
anything else.

Results are CuPy arrays (GPU) or NumPy arrays (host), ready *on the stream the call used*:
before a consumer on another stream reads them, synchronize that stream or enter it
(``with stream: torch.from_dlpack(y)``), as with any CuPy result.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import itertools
from collections.abc import Callable, Iterator
from typing import Any, TypeVar

import numpy as np

from ..errors import BadParamError, NotSupportedError
from . import graph, templates
from .select import call_device, device_scope, forced_backend

F = TypeVar("F", bound=Callable[..., Any])

_STREAM_HELP = (
    "expected None (CuPy's current stream), a cupy.cuda.Stream, a torch.cuda.Stream, an "
    "object with __cuda_stream__, or an int cudaStream_t handle"
)


_STREAM_DOC = """

    ``stream``: the CUDA stream to run on (default None: CuPy's current stream); a CuPy or
    PyTorch stream, an object with ``__cuda_stream__`` or a ``cudaStream_t`` int. The
    emulator takes only None. Arrays from PyTorch, JAX, ... are imported by DLPack without
    a copy, on that stream (see :mod:`cudnnlite.runtime.streams`).
"""


def _import_cupy(what: str) -> Any:
    try:
        import cupy
    except ImportError as exc:
        raise NotSupportedError(
            f"{what} needs CuPy: pip install 'cudnnlite[cuda13]' (or [cuda12])"
        ) from exc
    return cupy


def _stream_pointer(stream: Any) -> int | None:
    """The cudaStream_t of a non-CuPy stream object, or None when it is none we know."""
    if isinstance(stream, bool):
        return None
    if isinstance(stream, (int, np.integer)):
        return int(stream)
    protocol = getattr(stream, "__cuda_stream__", None)
    if protocol is not None:
        value = protocol() if callable(protocol) else protocol
        # The CUDA stream protocol: (version, handle).
        if isinstance(value, tuple) and len(value) == 2:
            return int(value[1])
        return None
    handle = getattr(stream, "cuda_stream", None)  # torch.cuda.Stream
    if isinstance(handle, (int, np.integer)) and not isinstance(handle, bool):
        return int(handle)
    return None


def _is_cupy_stream(stream: Any) -> bool:
    module = type(stream).__module__ or ""
    return module.startswith("cupy") and hasattr(stream, "ptr") and hasattr(stream, "use")


def as_cupy_stream(stream: Any) -> Any:
    """``stream`` as a CuPy stream object (CuPy streams are returned as they are; other
    handles are wrapped in ``cupy.cuda.ExternalStream``, which borrows, never owns)."""
    if _is_cupy_stream(stream):
        return stream
    ptr = _stream_pointer(stream)
    if ptr is None or ptr < 0:
        raise BadParamError(f"stream: {_STREAM_HELP}; got {type(stream).__name__}")
    cupy = _import_cupy("stream=")
    return cupy.cuda.ExternalStream(ptr)


def current_stream() -> Any:
    """CuPy's current stream (what ``stream=None`` means); NotSupportedError without CuPy."""
    return _import_cupy("current_stream()").cuda.get_current_stream()


@contextlib.contextmanager
def use_stream(stream: Any) -> Iterator[Any]:
    """``with use_stream(s):`` makes ``s`` (any accepted stream, see :func:`as_cupy_stream`)
    CuPy's current stream for the block; ``None`` leaves the current stream as it is."""
    if stream is None:
        yield None
        return
    cupy_stream = as_cupy_stream(stream)
    with cupy_stream:
        yield cupy_stream


# ------------------------------------------------------------------ array arguments


def _is_cupy_array(a: Any) -> bool:
    return (type(a).__module__ or "").startswith("cupy") and hasattr(a, "__cuda_array_interface__")


def _foreign_array(a: Any) -> bool:
    """True for array objects we import: neither NumPy nor CuPy, but with an interface."""
    if a is None or isinstance(a, (np.ndarray, np.generic, type, str, bytes, int, float)):
        return False
    if isinstance(a, (tuple, list, dict)) or _is_cupy_array(a):
        return False
    return (
        hasattr(a, "__dlpack__")
        or hasattr(a, "__cuda_array_interface__")
        or hasattr(a, "__array_interface__")
        or hasattr(a, "__array_struct__")
    )


# Values that are neither foreign arrays nor on a GPU: with only these (and tuples of
# them, as kernel sizes and paddings come) a call has no array to import and no device to
# enter, which a per-call type test shows faster than the checks that find out.
_PLAIN_TYPES = frozenset((np.ndarray, type(None), int, float, bool, str))


def _plain(values: Any) -> bool:
    for v in values:
        t = type(v)
        if t not in _PLAIN_TYPES and not (t is tuple and _PLAIN_TYPES.issuperset(map(type, v))):
            return False
    return True


def _runs_on_gpu(values: list[Any]) -> bool:
    forced = forced_backend()
    if forced:
        return forced == "cuda"
    from .select import array_kind

    return any(array_kind(v) == "cuda" for v in values if v is not None and not isinstance(v, type))


def _mixes_host_and_gpu(values: list[Any]) -> bool:
    from .select import array_kind

    kinds = set()
    for v in values:
        if v is not None and not isinstance(v, (type, np.generic)):
            kind = array_kind(v)
            if kind is not None:
                kinds.add(kind)
    return len(kinds) > 1


def with_stream(fn: F) -> F:
    """Adds ``stream=None`` to a public function and imports foreign arrays (see the
    module's docstring). Nested wrapped calls see ``stream=None`` and so run on the
    stream the outer call entered."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())
    positional = [
        p.name
        for p in params
        if p.kind in (inspect.Parameter.POSITIONAL_ONLY, inspect.Parameter.POSITIONAL_OR_KEYWORD)
    ]

    def label(i: int) -> str:
        return positional[i] if i < len(positional) else f"argument {i}"

    first = 1 if positional[:1] == ["self"] else 0  # a plan's method: self is no array

    @functools.wraps(fn)
    def wrapper(*args: Any, stream: Any = None, **kwargs: Any) -> Any:
        if first and stream is None and not kwargs and args:
            # a plan's repeated call: its memo replays the last template when it can
            memo = getattr(args[0], "_template_memo", None)
            if memo is not None:
                result = memo(wrapper, args)
                if result is not None:
                    return result
        if graph._active:  # a capture somewhere: check the op (graph.enter_op)
            entered = graph.enter_op(wrapper)  # marks may be set after decoration
            try:
                return _call(args, stream, kwargs)
            finally:
                if entered:
                    graph.exit_op()
        return _call(args, stream, kwargs)

    def invoke(args: tuple, kwargs: dict) -> Any:
        # An op verified to be kernel launches only goes through its launch template.
        if wrapper.__dict__.get("_graph_safe"):
            return templates.call(wrapper, fn, args, kwargs)
        return fn(*args, **kwargs)

    def _call(args: tuple, stream: Any, kwargs: dict) -> Any:
        if (stream is None and _plain(args[first:] if first else args)
                and (not kwargs or _plain(kwargs.values()))):  # fmt: skip
            return invoke(args, kwargs)  # host arrays and scalars: nothing to import or enter
        foreign = any(_foreign_array(a) for a in args) or any(
            _foreign_array(v) for v in kwargs.values()
        )
        # GPU arrays on a device that is not CuPy's current one: the call runs there
        labelled = ((label(i), a) for i, a in enumerate(args))
        scope = device_scope(call_device(itertools.chain(labelled, kwargs.items())))
        if scope is not None:
            with scope:
                return _run(args, stream, kwargs, foreign)
        return _run(args, stream, kwargs, foreign)

    def _run(args: tuple, stream: Any, kwargs: dict, foreign: bool) -> Any:
        if stream is None and not foreign:
            return invoke(args, kwargs)
        from ..ops._arrays import as_array

        if stream is not None:
            if not _runs_on_gpu([*args, *kwargs.values()]):
                raise NotSupportedError(
                    f"stream: the emulator (NumPy arrays) runs synchronously on the host and "
                    f"has no streams; pass stream=None (got {type(stream).__name__})"
                )
            context: Any = as_cupy_stream(stream)
        else:
            context = contextlib.nullcontext()
        with context:
            if foreign and not _mixes_host_and_gpu([*args, *kwargs.values()]):
                # (A mix is left to the function, whose backend check names the arrays.)
                args = tuple(
                    as_array(label(i), a) if _foreign_array(a) else a for i, a in enumerate(args)
                )
                kwargs = {k: as_array(k, v) if _foreign_array(v) else v for k, v in kwargs.items()}
            return invoke(args, kwargs)

    stream_param = inspect.Parameter("stream", inspect.Parameter.KEYWORD_ONLY, default=None)
    if params and params[-1].kind is inspect.Parameter.VAR_KEYWORD:
        new_params = [*params[:-1], stream_param, params[-1]]
    else:
        new_params = [*params, stream_param]
    wrapper.__doc__ = (fn.__doc__ or "").rstrip() + _STREAM_DOC
    wrapper.__signature__ = sig.replace(parameters=new_params)  # type: ignore[attr-defined]
    wrapper.__wrapped_stream__ = True  # type: ignore[attr-defined]
    return wrapper  # type: ignore[return-value]


__all__ = ["as_cupy_stream", "current_stream", "use_stream", "with_stream"]
