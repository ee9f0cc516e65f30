"""The fast path of repeated calls: a per-op cache from a cheap key to what the full
validation of a call produced (problem, plan, kernel, packed constant arguments). In
front of it, a graph-safe op's repeated call replays its launch template
(:mod:`runtime.templates`); this cache serves the calls a template does not (the first
call of a key, a refused one).

A call builds its key from what the slow path reads: the arrays' kind, device, shape,
dtype, strides and 16-byte alignment (:func:`array_key`), the scalar arguments as given,
each with its type (:func:`scalars_key`: ``1``, ``True`` and ``1.0`` are different keys,
and so are ``0.0`` and ``-0.0``), the dispatch settings and the environment switches
(:func:`settings_key`). The first call of a key runs the full validation and stores the
result; later calls skip it. A bad argument never reaches a cache, because validation
raises before anything is stored, so a cached key always describes a valid call and
every bad call still raises the slow path's error.

Only plain values are keyed (None, bool, int, float, str, NumPy scalars, and tuples or
lists of them); a call with anything else returns None from the key builders and takes
the slow path. :func:`set_enabled` (process-wide) or :func:`disabled` (a block of one
thread) turns every cache off: the slow path then runs on every call, which is how tests
compare both.
"""

from __future__ import annotations

import math
import threading
from collections import OrderedDict
from typing import Any

import numpy as np

from .. import dtypes
from ..dispatch import plans, settings
from ..errors import BadParamError
from ..runtime import template_keys, templates
from ..runtime.env import raw_reader
from ..runtime.graph import graph_safe
from ..runtime.pointers import host_pointer
from ..runtime.select import backend_by_name
from ..runtime.streams import with_stream

# Environment switches a call's result can depend on: the backend choice, the solver
# switches of the dispatcher (settings.py) and this module's own switch.
_ENV = (
    "CUDNNLITE_BACKEND",
    "CUDNNLITE_DISABLE_SOLVERS",
    "CUDNNLITE_FORCE_SOLVER",
    "CUDNNLITE_FORCE_CONFIG",
)
_PLAIN = (type(None), bool, int, str, np.integer, np.bool_)
# Raw values (runtime.env): keys only need equality, and a dict access per name is far
# cheaper than os.environ.get on every call.
_read_backend = raw_reader(_ENV[:1])
_read_dispatch_env = raw_reader(_ENV)
_FLOATS = (float, np.floating)
_FAST_TYPES = frozenset((int, bool, str, float, type(None)))


class CallCache:
    """A bounded, thread-safe LRU map from call keys to prepared launches."""

    def __init__(self, name: str, size: int = 256) -> None:
        self.name = name
        self.size = size
        self._entries: OrderedDict[tuple, Any] = OrderedDict()
        self._lock = threading.Lock()
        _CACHES.append(self)

    def get(self, key: tuple | None) -> Any:
        """The entry of ``key``, or None (a miss, an unkeyable call, or caching disabled)."""
        if key is None or not enabled():
            return None
        # No lock on the hot path: a dict read and move_to_end are each atomic under the
        # GIL; a key evicted between the two is simply not moved.
        entry = self._entries.get(key)
        if entry is not None:
            try:
                self._entries.move_to_end(key)
            except KeyError:
                pass
        return entry

    def put(self, key: tuple | None, entry: Any) -> None:
        """Stores ``entry`` (None entries are not stored: that call stays on the slow path)."""
        if key is None or entry is None or not enabled():
            return
        with self._lock:
            self._entries[key] = entry
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        return len(self._entries)


_CACHES: list[CallCache] = []


def clear_all() -> None:
    """Empties every op's cache and the launch templates (also called when the plan cache
    is cleared, so that nothing cached keeps a plan the dispatcher would no longer
    choose)."""
    for cache in _CACHES:
        cache.clear()
    templates.clear()


plans.on_clear(clear_all)
_enabled = True
# A disabled() block (one thread) turns off the ops' caches and the launch templates.
disabled = templates.disabled


def enabled() -> bool:
    """Whether the ops' call caches are on in this thread."""
    return _enabled and not templates.bypassed()


def set_enabled(flag: bool) -> None:
    """Turns every op's call cache and the launch templates on or off for the whole
    process (on by default)."""
    global _enabled
    _enabled = bool(flag)
    templates.set_enabled(flag)
    clear_all()


def _scalar_key(v: Any) -> Any:
    if isinstance(v, _FLOATS):
        # -0.0 == 0.0 yet can change a result's sign bit: key the sign too.
        return (type(v), v, math.copysign(1.0, v))
    if isinstance(v, _PLAIN):
        return (type(v), v)
    if type(v) in (tuple, list):
        parts = tuple(_scalar_key(e) for e in v)
        return None if None in parts else (type(v), parts)
    return None


def scalars_key(*values: Any) -> tuple | None:
    """``values`` as an exact key (type and value of each), or None when one of them is
    not a plain value."""
    types = tuple(map(type, values))
    if _FAST_TYPES.issuperset(types):  # the common case, with no per-value Python loop
        if float in types and 0.0 in values:  # 0.0 == -0.0: add float zeros' signs
            signs = tuple(math.copysign(1.0, v) if t is float else 0.0
                          for v, t in zip(values, types, strict=True))  # fmt: skip
            return ("flat", values, types, signs)
        return ("flat", values, types)
    parts = tuple(_scalar_key(v) for v in values)
    return None if None in parts else ("nested", parts)


def array_key(a: Any, aligned: bool = False) -> tuple | None:
    """Kind, device, shape, dtype, strides and writability of a NumPy or CuPy array, and
    with ``aligned`` whether its data is 16-byte aligned (for ops whose kernel choice
    depends on it; reading a NumPy pointer costs more than the rest of the key); None
    for None; ``False`` for anything else (not keyable)."""
    if a is None:
        return None
    if type(a) is np.ndarray:
        key = ("cpu", a.shape, a.dtype, a.strides, a.flags.writeable)
        return (*key, host_pointer(a) % 16 == 0) if aligned else key
    if (type(a).__module__ or "").startswith("cupy") and hasattr(a, "data"):
        key = ("cuda", a.device.id, a.shape, a.dtype, a.strides)
        return (*key, a.data.ptr % 16 == 0) if aligned else key
    return False


def arrays_key(*arrays: Any) -> tuple | None:
    """The keys of ``arrays`` (None entries allowed; no alignment: for ops whose kernels
    check alignment at each launch), or None when one is not keyable."""
    keys = tuple(array_key(a) for a in arrays)
    return None if False in keys else keys


def call_key(x: Any, scalars: tuple | None, aligned: bool = False) -> tuple | None:
    """The key of a one-input op's call: x's key (:func:`array_key`), the scalars' key
    (:func:`scalars_key`) and the forced backend; None when either is not keyable."""
    a = array_key(x, aligned)
    if a is None or a is False or scalars is None:
        return None
    return (a, scalars, _read_backend())


def backend_key() -> tuple:
    """The environment's forced backend (raw), the one switch an op without solvers reads."""
    return _read_backend()


def settings_key() -> tuple:
    """What the dispatcher reads besides the problem: its settings and env switches."""
    return (settings.current(), *_read_dispatch_env())


template_keys.set_context_key(settings.current)  # (its env switches are in the templates' key)


# ------------------------------------------------------------------ plans of one-input ops


class OpPlan:
    """A primitive (activation, softmax, pooling, batch-norm inference) prepared for
    inputs of one shape and dtype on one backend, with its arguments checked once: made
    by :func:`cudnnlite.activation_plan`, :func:`cudnnlite.softmax_plan`,
    :func:`cudnnlite.pooling_plan` or :func:`cudnnlite.batch_norm_inference_plan`.

    ``plan(x, *operands, out=None, stream=None)`` checks x's array kind, shape and dtype,
    then runs the primitive on x and the plan's other operands, if it takes any (batch
    norm's statistics and affine parameters: ``operands`` names them), which the
    primitive checks. A repeat costs a key and a launch (a launch template, or the op's
    call cache). A wrong x raises BadParamError naming what the plan expects.
    """

    _templated_by_identity = True  # its calls' launch templates key it by identity

    def __init__(self, op: str, fn: Any, backend: Any, shape: tuple[int, ...], dtype: Any,
                 kwargs: dict[str, Any], quick: Any = None,
                 scalars: tuple | None = None, operands: tuple[str, ...] = (),
                 required: int = 0) -> None:  # fmt: skip
        self.op = op
        self.operands = operands  # the names of the arrays after x; the first required ones
        self.required = required  # must be given
        self.backend = backend
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.kwargs = dict(kwargs)
        self._fn = getattr(fn, "__wrapped__", fn)  # __call__ enters the stream already
        self._array_type = backend.xp.ndarray
        # The op's cache lookup, ``quick(x, scalars) -> result or None``, with the key of
        # this plan's arguments made once (exactly as the functional call makes it).
        self._quick = quick
        self._scalars = scalars

    def __call__(self, x: Any, *operands: Any, out: Any = None) -> Any:
        if type(x) is not self._array_type:
            raise BadParamError(
                f"x: this {self.op} plan runs on {self.backend.name} and takes "
                f"{self._array_type.__module__}.ndarray arrays, got {type(x).__name__}"
            )
        if x.shape != self.shape:
            raise BadParamError(f"x: this {self.op} plan is for shape {self.shape}, got {x.shape}")
        if x.dtype != self.dtype:
            raise BadParamError(f"x: this {self.op} plan is for {self.dtype}, got {x.dtype}")
        if not self.required <= len(operands) <= len(self.operands):
            takes = ", ".join(("x", *self.operands[: self.required],
                               *(f"{n}=None" for n in self.operands[self.required :])))  # fmt: skip
            raise BadParamError(
                f"operands: this {self.op} plan takes ({takes}), got {1 + len(operands)} arrays"
            )
        if out is None and self._quick is not None and not operands:
            y = self._quick(x, self._scalars)
            if y is not None:
                return y
        return self._fn(x, *operands, out=out, **self.kwargs)  # fills the op's cache

    def __repr__(self) -> str:
        args = ", ".join(f"{k}={v!r}" for k, v in self.kwargs.items())
        return f"<OpPlan {self.op} {self.shape} {self.dtype} on {self.backend.name}: {args}>"


OpPlan.__call__ = with_stream(OpPlan.__call__)  # type: ignore[method-assign]
graph_safe(OpPlan.__call__)  # plans of graph-safe ops: kernel launches only


def plan_backend(name: str) -> Any:
    """The backend a plan's ``backend=`` names ("auto": the GPU when CuPy sees one)."""
    if not isinstance(name, str):
        raise BadParamError(f"backend: expected 'auto', 'cpu' or 'cuda', got {name!r}")
    if name == "auto":
        from ..runtime.cuda import CudaBackend

        name = "cuda" if CudaBackend.available() else "cpu"
    return backend_by_name(name)


def plan_shape(shape: Any, name: str = "shape") -> tuple[int, ...]:
    """``shape`` as a tuple of ints >= 0; BadParamError (naming ``name``) if it is not one."""
    try:
        dims = tuple(shape)
    except TypeError:
        dims = None
    if dims is None or not all(
        isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0 for d in dims
    ):
        raise BadParamError(f"{name}: expected a tuple of ints >= 0, got {shape!r}")
    return tuple(int(d) for d in dims)


def plan_dtype(dtype: Any) -> Any:
    """``dtype`` as the NumPy dtype of a float type we compute in; BadParamError if not."""
    dt = dtypes.lookup(dtype)
    if dt is None:
        raise BadParamError(f"dtype: expected {dtypes.names()}, got {dtype!r}")
    return dt.numpy


__all__ = [
    "CallCache",
    "OpPlan",
    "array_key",
    "arrays_key",
    "backend_key",
    "call_key",
    "clear_all",
    "disabled",
    "enabled",
    "plan_backend",
    "plan_dtype",
    "plan_shape",
    "set_enabled",
    "scalars_key",
    "settings_key",
]
