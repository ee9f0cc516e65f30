"""Dropout with a counter-based Philox4x32-10 mask.

``dropout(x, p, seed, offset)`` keeps element e (C order) iff its Philox word is at least
``round(p * 2^32)`` and scales kept elements by ``1 / (1 - p)`` (rounded to float32 and
applied in float32 for float32/float16/bfloat16, exact in float64 for float64); dropped
elements are 0. The mask does not depend on the dtype: float64 and float32 inputs with
the same (seed, offset) drop the same elements.
The mask is a pure function of (seed, offset, e), identical on the emulator and on a GPU
and equal bit for bit to :func:`cudnnlite.reference.dropout.dropout_mask`, so backward can
regenerate it (``dropout_backward(dy, p, seed, offset)``) instead of storing it, or use a
mask saved by ``dropout(..., return_mask=True)``. ``offset`` selects an independent stream
for the same seed (e.g. the step or layer number).

:class:`PhiloxState` keeps the offset on the device: ``dropout(x, p, seed=state)`` draws
from ``(state.seed, state's counter)``, read by the kernel at each launch, and
``state.advance()`` (a kernel) moves it on. A graph or a launch template that holds both
replays with a fresh mask each time, as PyTorch's CUDA generator does in CUDA graphs:

.. code-block:: python

    state = cudnnlite.PhiloxState(seed=1234)
    with cudnnlite.graph() as g:                  # a training step
        h = cudnnlite.dropout(x, 0.1, seed=state)
        ...
        dx = cudnnlite.dropout_backward(dh, 0.1, seed=state)
        state.advance()                           # next step: the next stream
    g.replay()                                    # offsets 1, 2, ... on each replay

Kernels (``cuda_src/dropout/dropout.cu``), one module per dtype:
``dropout_fwd<T, VEC>`` and ``dropout_bwd_mask<T, VEC>`` (VEC = 4: one 4-element pack per
Philox call when the pointers are aligned to the pack, up to 16 bytes, else 1), and
``philox_raw`` (known-answer tests), ``philox_counter_add`` (:meth:`PhiloxState.advance`).
Non-contiguous inputs are copied to C order first (the element numbering is C order).
"""

from __future__ import annotations

import functools
import math
import threading
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..reference.dropout import drop_threshold, dropout_scale
from ..runtime import template_record
from ..runtime.backend import Backend, Kernel
from ..runtime.graph import graph_safe, note_host_work
from ..runtime.kernel import ModuleSpec
from ..runtime.pointers import data_pointer
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ..runtime.variants import register
from ._arrays import array_module, as_array, check_out, contiguous, float_dtype, same_shape
from ._kernels import LastLaunch

SOURCE = "dropout/dropout.cu"
BLOCK = 256
_EMULATOR_MAX_BLOCKS = 256
_BLOCKS_PER_SM = 16


# DropoutParamsT<A> (dropout.cu): the scale in the accumulation type A (float, or double
# for float64).
def _params_dtype(real: str) -> np.dtype:
    fields = [("seed", "<u8"), ("offset", "<u8"), ("threshold", "<u8")]
    return np.dtype([*fields, ("scale", real), ("save_mask", "<i4"), ("use_counter", "<i4")],
                    align=True)  # fmt: skip


_PARAMS_DTYPE = _params_dtype("<f4")
_PARAMS_DTYPE64 = _params_dtype("<f8")


def params_dtype(dt: dtypes.DType) -> np.dtype:
    """The DropoutParamsT layout kernels on storage type ``dt`` take."""
    return _PARAMS_DTYPE64 if dt.acc_ctype == "double" else _PARAMS_DTYPE


def _scale(p: float, dt: dtypes.DType) -> np.floating:
    """The kernels' scale argument: float32(1 / (1 - p)), or exact in double for float64."""
    real = np.float64 if dt.acc_ctype == "double" else np.float32
    return real(dropout_scale(p, real))


def _names(dt: dtypes.DType) -> list[str]:
    return [
        f"{kind}<{dt.ctype}, {vec}>"
        for kind in ("dropout_fwd", "dropout_bwd_mask")
        for vec in (4, 1)
    ]


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """Every dropout kernel of storage type ``dt`` (plus the raw generator)."""
    return ModuleSpec.make(SOURCE, [*_names(dt), "philox_raw", "philox_counter_add"])


@register("dropout")
def module_specs() -> list[ModuleSpec]:
    return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]


_KERNELS: dict[tuple, Kernel] = {}
_LOCK = threading.Lock()
_LAST = LastLaunch()


def _kernel(backend: Backend, spec: ModuleSpec, name: str) -> Kernel:
    key = (id(backend), backend.device_key(), spec, name)
    k = _KERNELS.get(key)
    if k is None:
        with _LOCK:
            k = _KERNELS.setdefault(key, backend.kernel(spec, name))
    return k


def _max_blocks(backend: Backend) -> int:
    if backend.name == "cuda":
        sms = backend.multiprocessor_count()
        return int(sms) * _BLOCKS_PER_SM
    return _EMULATOR_MAX_BLOCKS


def last_kernel_name() -> str | None:
    """Readable name of the last dropout kernel this thread launched, e.g.
    ``dropout_fwd_vec4_fp16``; None before the first launch."""
    return _LAST.get()


# ------------------------------------------------------------------ checks


def _check_p(p: Any) -> float:
    if isinstance(p, bool) or not isinstance(p, (int, float, np.integer, np.floating)):
        raise BadParamError(f"p: expected a probability in [0, 1], got {p!r}")
    v = float(p)
    if not 0.0 <= v <= 1.0:  # NaN fails too
        raise BadParamError(f"p: expected a probability in [0, 1], got {p!r}")
    return v


def _check_u64(name: str, v: Any) -> int:
    if isinstance(v, bool) or not isinstance(v, (int, np.integer)):
        raise BadParamError(f"{name}: expected a non-negative integer, got {v!r}")
    v = int(v)
    if v < 0 or v >= 2**64:
        raise BadParamError(f"{name}: expected an integer in [0, 2^64), got {v}")
    return v


def _array(name: str, a: Any) -> Any:
    return as_array(name, a)


_contiguous = functools.partial(contiguous, family="dropout")


def _out(out: Any, like: Any, backend: Backend, inputs: dict[str, Any]) -> Any:
    if out is None:
        return array_module(like).empty(like.shape, like.dtype)
    check_out(out, like.shape, like.dtype, backend, inputs)
    return out


def _params(p: float, seed: int, offset: int, save_mask: bool, dt: dtypes.DType,
            use_counter: bool = False) -> np.void:  # fmt: skip
    return np.array(
        (seed, offset, drop_threshold(p), _scale(p, dt), int(save_mask), int(use_counter)),
        dtype=params_dtype(dt),
    )[()]


def _launch_fwd(
    backend: Backend, dt: dtypes.DType, x: Any, out: Any, mask: Any, params: np.void,
    counter: Any = None,
) -> None:
    """x contiguous; out any layout (a contiguous result is copied in when it is not)."""
    y = out if out.flags.c_contiguous else array_module(x).empty(x.shape, x.dtype)
    n = x.size
    if n:
        vec = (
            4
            if all(data_pointer(a) % _pack_align(x) == 0 for a in (x, y))
            and (mask is None or data_pointer(mask) % 4 == 0)
            else 1
        )
        kernel = _kernel(backend, module_spec(dt), f"dropout_fwd<{dt.ctype}, {vec}>")
        grid = max(1, min((n + 4 * BLOCK - 1) // (4 * BLOCK), _max_blocks(backend)))
        mask_arg = mask if mask is not None else y
        kernel(grid, BLOCK, (x, y, mask_arg, counter if counter is not None else y,
                             np.int64(n), params))  # fmt: skip
        _LAST.set(f"dropout_fwd_{'vec4' if vec == 4 else 'scalar'}_{dt.short}")
    if y is not out:
        note_host_work("dropout: a copy into a non-contiguous out=")
        out[...] = y


def _pack_align(a: Any) -> int:
    """The alignment VEC = 4 needs: the 4-element pack, at most 16 bytes (DropPack)."""
    return min(4 * a.itemsize, 16)


# ------------------------------------------------------------------ device-side offset

_MAX_STATE_OFFSET = 2**53  # whole numbers a double holds exactly


class PhiloxState:
    """A Philox stream for dropout whose offset lives on the device (module docstring).

    ``PhiloxState(seed, offset=0, backend="auto")``: ``seed`` and the starting ``offset``
    as for :func:`dropout`; the counter is a one-element float64 array on ``backend``
    ("cpu": the emulator's NumPy; "cuda": CuPy's current device; "auto": the GPU when
    CuPy sees one) holding a whole number below 2^53. Pass the state as ``seed=`` to
    :func:`dropout` and :func:`dropout_backward` (whose ``offset`` is then added to the
    counter: a per-call stream within a step); :meth:`advance` adds to the counter with a
    kernel, so graphs and launch templates that contain it move the stream on at each
    replay.
    Reading :attr:`offset` copies the counter to the host (a synchronization on a GPU).
    """

    _templated_by_identity = True  # launch templates key a call by this object

    def __init__(self, seed: int, offset: int = 0, *, backend: str = "auto") -> None:
        from ._fastpath import plan_backend

        self.seed = _check_u64("seed", seed)
        start = _check_u64("offset", offset)
        if start >= _MAX_STATE_OFFSET:
            raise BadParamError(f"offset: a PhiloxState holds offsets below 2^53, got {start}")
        self.backend = plan_backend(backend)
        # launch templates read it in place, not as a temporary of their own
        self.counter = template_record.shared_state(
            self.backend.xp.full((1,), float(start), dtype=np.float64)
        )

    @property
    def offset(self) -> int:
        """The counter's value now (copied to the host)."""
        return int(np.asarray(self.counter.get() if hasattr(self.counter, "get")
                              else self.counter)[0])  # fmt: skip

    def advance(self, n: int = 1) -> None:
        """Adds ``n`` (an integer >= 0) to the counter, with a kernel on the current stream.
        The counter is exact while it stays below 2^53 (about 9e15 steps)."""
        _advance(self.counter, n)

    def __repr__(self) -> str:
        return f"<PhiloxState seed={self.seed} on {self.backend.name}>"


@with_stream
def _advance(counter: Any, n: int) -> None:
    """``counter[0] += n`` on the device (PhiloxState.advance): a graph-safe op of its own,
    whose counter is an array argument (a template replay patches and restores it)."""
    if (isinstance(n, (bool, np.bool_)) or not isinstance(n, (int, np.integer)) or n < 0
            or n >= _MAX_STATE_OFFSET):  # fmt: skip
        raise BadParamError(f"n: expected an integer >= 0 and below 2^53, got {n!r}")
    backend = backend_for(counter, names=("counter",))
    kernel = _kernel(backend, module_spec(dtypes.FLOAT32), "philox_counter_add")
    kernel(1, 32, (counter, np.float64(n)))


def check_seed(seed: Any, backend: Backend, x: Any) -> int | PhiloxState:
    """``seed`` of a Philox stream (dropout, RNN, attention): an integer in [0, 2^64), or a
    PhiloxState living where x does; else a BadParamError naming ``seed``."""
    if isinstance(seed, PhiloxState):
        _check_place(seed, backend, x)
        return seed
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)) or not 0 <= seed < 2**64:
        raise BadParamError(f"seed: expected an integer in [0, 2^64) or a PhiloxState, got "
                            f"{seed!r}")  # fmt: skip
    return int(seed)


def stream(seed: Any, offset: Any, x: Any, backend: Backend) -> tuple[int, int, Any]:
    """(seed, offset, counter or None) of a call's Philox stream: an integer seed, or a
    PhiloxState living where x does (``offset`` is then added to its counter on the device,
    modulo 2^64: a per-call stream within a step, such as an RNN's layer)."""
    offset = _check_u64("offset", offset)
    seed = check_seed(seed, backend, x)
    if isinstance(seed, PhiloxState):
        return seed.seed, offset, seed.counter
    return seed, offset, None


def _check_place(state: PhiloxState, backend: Backend, x: Any) -> None:
    """BadParamError naming ``seed`` unless ``state`` lives on ``backend`` (on a GPU: the
    device of the array ``x``)."""
    if state.backend is not backend:
        raise BadParamError(f"seed: the PhiloxState lives on {state.backend.name}, the arrays "
                            f"are for {backend.name}")  # fmt: skip
    device = getattr(getattr(x, "device", None), "id", None)
    if backend.name == "cuda" and device != state.counter.device.id:
        raise BadParamError(f"seed: the PhiloxState lives on GPU {state.counter.device.id}, "
                            f"x on GPU {device}")  # fmt: skip


# ------------------------------------------------------------------ public API


@with_stream
def dropout(
    x: Any,
    p: float,
    seed: int | None = None,
    offset: int = 0,
    *,
    training: bool = True,
    return_mask: bool = False,
    out: Any = None,
) -> Any:
    """Training-mode dropout: ``y = x / (1 - p)`` where kept, ``x * 0`` where dropped (0, or
    NaN for a NaN or inf x, as PyTorch's ``x * mask / (1 - p)``).

    Args:
        x: float32, float16, bfloat16 or float64 array, any shape and strides
            (non-contiguous inputs are copied to C order: element numbering is C order).
        p: drop probability in [0, 1]; p = 0 returns a copy of x, p = 1 drops everything.
        seed: Philox key, an integer in [0, 2^64), or a :class:`PhiloxState` (its seed,
            and its device-side counter as the offset); required when ``training``.
        offset: Philox stream (the counter's upper 64 bits), an integer in [0, 2^64);
            with a PhiloxState, added to its counter (modulo 2^64).
        training: False is PyTorch's evaluation mode: x itself is returned (no copy, as
            ``torch.nn.functional.dropout(x, p, training=False)``), or copied into
            ``out`` when one is given; the mask is then all True. p is still checked.
        return_mask: also return the boolean keep mask (uint8 storage as bool).
        out: result array (same shape and dtype as x; may be x itself).

    Returns:
        y, or (y, mask) with ``return_mask``.
    """
    p = _check_p(p)
    if not isinstance(training, (bool, np.bool_)):
        raise BadParamError(f"training: expected True or False, got {training!r}")
    if not isinstance(return_mask, (bool, np.bool_)):
        raise BadParamError(f"return_mask: expected True or False, got {return_mask!r}")
    if not training:
        return _identity(x, out, return_mask)
    if seed is None:
        raise BadParamError("seed: required in training mode (an integer in [0, 2^64))")
    backend = backend_for(x, out, names=("x", "out"))
    seed, offset, counter = stream(seed, offset, x, backend)
    x = _array("x", x)
    dt = float_dtype("x", x)
    out = _out(out, x, backend, {"x": x})
    xc = _contiguous(x)
    mask = array_module(x).empty(x.shape, np.bool_) if return_mask else None
    params = _params(p, seed, offset, return_mask, dt, counter is not None)
    _launch_fwd(backend, dt, xc, out, mask, params, counter)
    return (out, mask) if return_mask else out


def _identity(x: Any, out: Any, return_mask: bool) -> Any:
    """Evaluation-mode dropout: x itself (or x copied into out) and an all-True mask."""
    backend = backend_for(x, out, names=("x", "out"))
    x = _array("x", x)
    float_dtype("x", x)
    if out is not None:
        out = _out(out, x, backend, {"x": x})
        if out is not x:
            note_host_work("dropout (evaluation): x copied into out=")
            out[...] = x
        x = out
    if not return_mask:
        return x
    return x, array_module(x).ones(x.shape, np.bool_)


@with_stream
def dropout_backward(
    dy: Any,
    p: float,
    seed: int | None = None,
    offset: int = 0,
    *,
    mask: Any = None,
    out: Any = None,
) -> Any:
    """``dx = dy / (1 - p)`` where the forward pass kept the element, else 0.

    Either regenerates the mask from (seed, offset), which must be the forward call's (a
    :class:`PhiloxState` whose counter has not moved since), or reads ``mask`` (the
    boolean array ``dropout(..., return_mask=True)`` returned); give exactly one of the
    two. ``out`` may be dy itself.
    """
    p = _check_p(p)
    if (seed is None) == (mask is None):
        raise BadParamError(
            "seed/mask: give either seed (regenerate the forward mask) or mask, not "
            + ("both" if mask is not None else "neither")
        )
    backend = backend_for(dy, mask, out, names=("dy", "mask", "out"))
    dy = _array("dy", dy)
    dt = float_dtype("dy", dy)
    if mask is None:
        seed, offset, counter = stream(seed, offset, dy, backend)
        params = _params(p, seed, offset, False, dt, counter is not None)
        out = _out(out, dy, backend, {"dy": dy})
        _launch_fwd(backend, dt, _contiguous(dy), out, None, params, counter)
        return out
    mask = _array("mask", mask)
    if mask.dtype != np.bool_ and mask.dtype != np.uint8:
        raise BadParamError(f"mask: expected a bool (or uint8) array, got dtype {mask.dtype}")
    same_shape(("dy", "mask"), (dy, mask))
    out = _out(out, dy, backend, {"dy": dy, "mask": mask})
    dyc, mc = _contiguous(dy), _contiguous(mask)
    dx = out if out.flags.c_contiguous else array_module(dy).empty(dy.shape, dy.dtype)
    n = dy.size
    if n:
        vec = (
            4
            if data_pointer(dyc) % _pack_align(dy) == 0
            and data_pointer(dx) % _pack_align(dy) == 0
            and data_pointer(mc) % 4 == 0
            else 1
        )
        kernel = _kernel(backend, module_spec(dt), f"dropout_bwd_mask<{dt.ctype}, {vec}>")
        grid = max(1, min((n + 4 * BLOCK - 1) // (4 * BLOCK), _max_blocks(backend)))
        kernel(grid, BLOCK, (dyc, mc, dx, np.int64(n), _scale(p, dt)))
        _LAST.set(f"dropout_bwd_mask_{'vec4' if vec == 4 else 'scalar'}_{dt.short}")
    if dx is not out:
        note_host_work("dropout_backward: a copy into a non-contiguous out=")
        out[...] = dx
    return out


def philox4x32_10(counter: Any, key: Any) -> np.ndarray:
    """Philox4x32-10 computed by the device code on the emulator: ``counter`` (n, 4) and
    ``key`` (n, 2) uint32 host arrays; returns (n, 4) uint32. For known-answer tests."""
    from ..runtime.select import backend_by_name

    counter = np.ascontiguousarray(counter, dtype=np.uint32).reshape(-1, 4)
    key = np.ascontiguousarray(key, dtype=np.uint32).reshape(-1, 2)
    if counter.shape[0] != key.shape[0]:
        raise BadParamError(
            f"key: expected {counter.shape[0]} keys like counter, got {key.shape[0]}"
        )
    n = counter.shape[0]
    out = np.zeros((n, 4), np.uint32)
    if n:
        backend = backend_by_name("cpu")
        kernel = _kernel(backend, module_spec(dtypes.FLOAT32), "philox_raw")
        kernel(math.ceil(n / BLOCK), BLOCK, (counter, key, out, np.int32(n)))
    return out


__all__ = ["PhiloxState", "dropout", "dropout_backward", "last_kernel_name", "module_specs",
           "philox4x32_10"]  # fmt: skip

# Kernel launches only (copies reported). The mask is a function of (seed, offset), which
# a key holds and a graph records: a replay draws the same mask, unless the offset is a
# PhiloxState's device counter (read at each launch) that the step advances.
graph_safe(dropout, dropout_backward, _advance)
