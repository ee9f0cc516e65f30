"""Activation functions, forward and backward, with cuDNN's blending.

``activation_forward(x, mode)`` computes ``y = alpha * f(x) + beta * y_prior`` and
``activation_backward(dy, x, mode)`` computes ``dx = alpha * dy * f'(x) + beta * dx_prior``,
where the prior is ``out``'s content (read only when beta != 0). The PyTorch-style
wrappers (``relu``, ``gelu``, ``softplus``, ...: ops/activation_wrappers.py) are the
forward pass without blending.
Formulas and derivative conventions: :mod:`cudnnlite.reference.activation`.

Kernels (``cuda_src/activation/activation.cu``), one module per dtype; math in float32
for float32/float16/bfloat16 and in float64 for float64 (parameters: :func:`act_params_dtype`):

- ``act_{fwd,bwd}_contig<T, MODE, VEC>``: every operand contiguous in the same order
  (C, Fortran, or any dense layout ``out`` shares with the inputs); 16-byte vector
  loads when every pointer is 16-byte aligned (VEC = 16 / itemsize), else VEC = 1;
- ``act_{fwd,bwd}_strided<T, MODE>``: anything else, up to 8 dims after dropping
  size-1 dims and merging dims that are contiguous in every operand (which variant a
  call takes: ops/activation_layout.py).

:func:`last_kernel_name` tells which kernel the calling thread launched last and
:func:`kernel_name_for` which one a call would launch, as readable names such as
``act_fwd_vec8_gelu_fp16`` (direction, variant, mode, dtype).
"""

from __future__ import annotations

import functools
import math
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError
from ..reference.activation import DEFAULT_COEF, DEFAULT_THRESHOLDS
from ..runtime.backend import Backend, Kernel
from ..runtime.graph import graph_safe, note_host_work
from ..runtime.kernel import ModuleSpec
from ..runtime.pointers import data_pointer
from ..runtime.select import backend_for
from ..runtime.streams import with_stream
from ..runtime.variants import register
from ._arrays import (
    array_module,
    as_array,
    check_out,
    empty_like,
    float_dtype,
    same_dtype,
    same_shape,
)
from ._fastpath import (
    CallCache,
    OpPlan,
    call_key,
    plan_backend,
    plan_dtype,
    plan_shape,
    scalars_key,
)
from ._kernels import LastLaunch
from .activation_layout import _plan

ACTIVATION_MODES = (
    "relu",
    "leaky_relu",
    "clipped_relu",
    "elu",
    "sigmoid",
    "tanh",
    "swish",
    "gelu",
    "gelu_tanh",
    "softplus",
    "identity",
    # appended: the numbers above stay (act::k* in the .cu, tuning keys, epilogue structs)
    "hardtanh",
    "hardswish",
    "hardsigmoid",
    "mish",
)
# The kernel's MODE template argument: the position in ACTIVATION_MODES (act::k* in the .cu).
_MODE_ID = {name: i for i, name in enumerate(ACTIVATION_MODES)}
_USES_Y = frozenset((_MODE_ID["sigmoid"], _MODE_ID["tanh"]))

# PyTorch's names for two modes with fixed parameters, accepted where a fused activation
# is named (convolution and batch-norm epilogues): (mode, coef, threshold).
FUSED_ALIASES = {"silu": ("swish", 1.0, None), "relu6": ("hardtanh", 6.0, 0.0)}


def fused_mode(activation: Any, coef: Any, threshold: Any, names: tuple[str, str]
               ) -> tuple[Any, Any, Any]:  # fmt: skip
    """(mode, coef, threshold) of a fused activation given by its mode or by a name of
    FUSED_ALIASES; an alias fixes both parameters, so giving one (named by ``names``:
    the caller's coef and threshold arguments) is a BadParamError."""
    alias = FUSED_ALIASES.get(activation) if isinstance(activation, str) else None
    if alias is None:
        return activation, coef, threshold
    for name, value in zip(names, (coef, threshold), strict=True):
        if value is not None:
            raise BadParamError(f"{name}: {activation} takes none ({alias[0]} with fixed "
                                f"parameters; name {alias[0]} to set them), got "
                                f"{value!r}")  # fmt: skip
    return alias


SOURCE = "activation/activation.cu"
BLOCK = 256


# Mirrors of the kernel's structs (passed by value as numpy.void).
# ActParamsT<A> (common/activation_math.cuh) in the accumulation type: float for the
# storage types computed in float (ACT_PARAMS_DTYPE), double for float64.
def _act_params_dtype(real: str) -> np.dtype:
    fields = [(f, real) for f in ("coef", "threshold", "alpha", "beta")]
    return np.dtype([*fields, ("use_y", "<i4")], align=True)


ACT_PARAMS_DTYPE = _act_params_dtype("<f4")
ACT_PARAMS_DTYPE64 = _act_params_dtype("<f8")


def act_params_dtype(dt: dtypes.DType) -> np.dtype:
    """The ActParamsT layout kernels on storage type ``dt`` take."""
    return ACT_PARAMS_DTYPE64 if dt.acc_ctype == "double" else ACT_PARAMS_DTYPE


# Grid cap for the grid-stride loops: enough blocks to fill the device a few times over.
_BLOCKS_PER_SM = 32
_EMULATOR_MAX_BLOCKS = 256


# ------------------------------------------------------------------ kernel names


def _vec(dt: dtypes.DType) -> int:
    return 16 // dt.itemsize


def _name_expression(direction: str, variant: str, mode_id: int, dt: dtypes.DType) -> str:
    if variant == "strided":
        return f"act_{direction}_strided<{dt.ctype}, {mode_id}>"
    vec = _vec(dt) if variant == "vec" else 1
    return f"act_{direction}_contig<{dt.ctype}, {mode_id}, {vec}>"


def _readable_name(direction: str, variant: str, mode_id: int, dt: dtypes.DType) -> str:
    tag = f"vec{_vec(dt)}" if variant == "vec" else variant
    return f"act_{direction}_{tag}_{ACTIVATION_MODES[mode_id]}_{dt.short}"


def module_spec(dt: dtypes.DType) -> ModuleSpec:
    """The module holding every activation kernel for storage type ``dt``."""
    names = [
        _name_expression(direction, variant, mode_id, dt)
        for direction in ("fwd", "bwd")
        for mode_id in range(len(ACTIVATION_MODES))
        for variant in ("vec", "scalar", "strided")
    ]
    return ModuleSpec.make(SOURCE, names)


@register("activation")
def module_specs() -> list[ModuleSpec]:
    return [module_spec(dt) for dt in dtypes.FLOAT_TYPES]


class _KernelTable:
    """The kernels of one (backend, device, dtype), resolved once each."""

    def __init__(self, backend: Backend, dt: dtypes.DType) -> None:
        self.backend = backend
        self.dt = dt
        self.spec = module_spec(dt)
        self.kernels: dict[tuple[str, str, int], tuple[Kernel, str]] = {}
        if backend.name == "cuda":
            sms = backend.multiprocessor_count()
            self.max_blocks = int(sms) * _BLOCKS_PER_SM
        else:
            self.max_blocks = _EMULATOR_MAX_BLOCKS

    def get(self, direction: str, variant: str, mode_id: int) -> tuple[Kernel, str]:
        """The kernel and its readable name."""
        key = (direction, variant, mode_id)
        entry = self.kernels.get(key)
        if entry is None:
            name = _name_expression(direction, variant, mode_id, self.dt)
            kernel = self.backend.kernel(self.spec, name)
            entry = self.kernels[key] = (
                kernel,
                _readable_name(direction, variant, mode_id, self.dt),
            )
        return entry

    def grid(self, units: int) -> int:
        return max(1, min((units + BLOCK - 1) // BLOCK, self.max_blocks))


_TABLES: dict[tuple[int, str, str], _KernelTable] = {}
_TABLES_LOCK = threading.Lock()


def _table(backend: Backend, dt: dtypes.DType) -> _KernelTable:
    key = (id(backend), backend.device_key(), dt.short)
    table = _TABLES.get(key)
    if table is None:
        with _TABLES_LOCK:
            table = _TABLES.get(key)
            if table is None:
                table = _TABLES[key] = _KernelTable(backend, dt)
    return table


_LAST = LastLaunch()


def last_kernel_name() -> str | None:
    """The readable name of the last activation kernel this thread launched, e.g.
    ``act_bwd_strided_softplus_bf16``; None before the first launch. Empty arrays
    launch nothing and leave it unchanged."""
    return _LAST.get()


# ------------------------------------------------------------------ argument checks


def _mode_id(mode: Any) -> int:
    mode_id = _MODE_ID.get(mode) if isinstance(mode, str) else None
    if mode_id is None:
        raise BadParamError(f"mode: expected one of {', '.join(ACTIVATION_MODES)}, got {mode!r}")
    return mode_id


def _real(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise BadParamError(f"{name}: expected a real number, got {value!r}")
    return float(value)


def _scalar(name: str, value: Any, wide: bool) -> float:
    """``value`` as the kernel will see it: exact for float64 (``wide``), else rounded to
    float32 (overflow gives inf, which the callers reject where it matters)."""
    v = _real(name, value)
    if wide:
        return v
    with np.errstate(over="ignore"):
        return float(np.float32(v))


def _finite(name: str, value: Any, wide: bool) -> float:
    v = _scalar(name, value, wide)
    if not math.isfinite(v):
        where = "" if wide else " (in float32)"
        raise BadParamError(f"{name}: expected a finite number{where}, got {value!r}")
    return v


def _coef(mode: str, coef: Any, wide: bool) -> float:
    if mode not in DEFAULT_COEF:
        if coef is not None:
            raise BadParamError(
                f"coef: mode {mode!r} takes no coefficient (modes with one: "
                f"{', '.join(DEFAULT_COEF)}), got {coef!r}"
            )
        return 0.0
    if coef is None:
        return DEFAULT_COEF[mode]
    if mode == "clipped_relu":
        v = _scalar("coef", coef, wide)
        if not v > 0:  # +inf is allowed: relu
            raise BadParamError(f"coef: clipped_relu's ceiling must be > 0, got {coef!r}")
        return v
    if mode == "hardtanh":  # max_val; +-inf allowed (an open side), as PyTorch
        v = _scalar("coef", coef, wide)
        if math.isnan(v):
            raise BadParamError(f"coef: hardtanh's max_val must be a number, got {coef!r}")
        return v
    v = _finite("coef", coef, wide)
    if mode == "softplus" and not v > 0:
        where = "" if wide else " (in float32)"
        raise BadParamError(f"coef: softplus's beta must be > 0{where}, got {coef!r}")
    return v


def _threshold(mode: str, threshold: Any, wide: bool) -> float:
    if mode not in DEFAULT_THRESHOLDS:
        if threshold is not None:
            raise BadParamError(
                f"threshold: only softplus (its threshold) and hardtanh (its min_val) take a "
                f"threshold, not mode {mode!r}; got {threshold!r}"
            )
        return 0.0
    if threshold is None:
        return DEFAULT_THRESHOLDS[mode]
    v = _scalar("threshold", threshold, wide)
    if math.isnan(v):
        raise BadParamError(f"threshold: expected a number, got {threshold!r}")
    return v


def _params_struct(
    coef: float, threshold: float, alpha: float, beta: float, use_y: int, wide: bool = False
) -> np.void:
    layout = ACT_PARAMS_DTYPE64 if wide else ACT_PARAMS_DTYPE
    return np.array((coef, threshold, alpha, beta, use_y), dtype=layout)[()]


def _checked_params(
    mode: str, coef: Any, threshold: Any, alpha: Any, beta: Any, use_y: bool, wide: bool,
    negative_zeros: tuple = (),
) -> tuple[np.void, float]:
    beta_k = _finite("beta", beta, wide)
    c, t = _coef(mode, coef, wide), _threshold(mode, threshold, wide)
    if mode == "hardtanh" and t > c:
        raise BadParamError(
            f"threshold/coef: hardtanh's min_val (threshold, {threshold!r}) must not exceed "
            f"its max_val (coef, {coef!r})"
        )
    struct = _params_struct(
        c,
        t,
        _finite("alpha", alpha, wide),
        beta_k,
        int(use_y),
        wide,
    )
    return struct, beta_k


# Calls repeat the same few argument sets: remember the checked struct per raw argument
# tuple (typed, so True never passes for 1.0; NaN never hits, so it is always rejected;
# 0.0 and -0.0 are one key, so the call adds which scalars are -0.0: ``negative_zeros``).
_cached_params = functools.lru_cache(maxsize=1024, typed=True)(_checked_params)
_FLOAT_TYPES = frozenset((float, np.float16, np.float32, np.float64))


def negative_zeros(values: tuple) -> tuple:
    """The positions of the -0.0 among ``values``: part of a cache key over scalars, where
    0.0 == -0.0 (yet alpha -0.0 gives -0 where 0.0 gives +0)."""
    return tuple(i for i, v in enumerate(values)
                 if type(v) in _FLOAT_TYPES and v == 0 and math.copysign(1.0, v) < 0)  # fmt: skip


def _params(
    mode: str,
    coef: Any,
    threshold: Any,
    alpha: Any,
    beta: Any,
    use_y: bool,
    dt: dtypes.DType = dtypes.FLOAT32,
) -> tuple[np.void, float]:
    """The kernel's ActParamsFor<T> for storage type ``dt`` (act_params_dtype(dt)) and
    beta as the kernel sees it: the scalars exactly for float64, rounded to float32 (and
    finite there) for the other types; BadParamError for bad values. Also used by
    ops/norm_common.py's fused activations."""
    wide = dt.acc_ctype == "double"
    try:
        signs = negative_zeros((coef, threshold, alpha, beta))
        return _cached_params(mode, coef, threshold, alpha, beta, use_y, wide, signs)
    except TypeError:  # unhashable argument: check it uncached (raises BadParamError)
        return _checked_params(mode, coef, threshold, alpha, beta, use_y, wide)


def _array(name: str, a: Any) -> Any:
    if isinstance(a, np.ndarray) or hasattr(a, "__cuda_array_interface__"):
        return a
    return as_array(name, a)


def _empty_like(backend: Backend, x: Any) -> Any:
    # Same memory order as x when x is dense (order="K"), so a transposed input takes the
    # contiguous path too; same kind as x even when CUDNNLITE_BACKEND forces the backend.
    return empty_like(x)


def _output(out: Any, x: Any, backend: Backend, beta: float, inputs: dict[str, Any]) -> Any:
    if out is None:
        if beta != 0:
            raise BadParamError(
                "beta: blending (beta != 0) reads the prior content of out; pass out="
            )
        return _empty_like(backend, x)
    check_out(out, x.shape, x.dtype, backend, inputs)  # (distinct elements too)
    return out


# ------------------------------------------------------------------ launching


def _launch(
    direction: str,
    mode_id: int,
    dt: dtypes.DType,
    backend: Backend,
    arrays: list[Any],
    params: np.void,
    run: bool = True,
) -> str:
    """Plans and (if ``run``) launches; returns the readable kernel name.

    ``arrays`` is [out, x] forward and [out, x, dy, y] backward (y = x when unused).
    """
    plan = _plan(arrays)
    if plan is None:
        # More than MAX_DIMS dims that do not collapse: run on contiguous copies
        # (out's copy carries the prior for blending).
        note_host_work("activation: contiguous copies of operands with mixed layouts")
        copies = [array_module(a).ascontiguousarray(a) for a in arrays]
        name = _launch(direction, mode_id, dt, backend, copies, params, run)
        if run:
            arrays[0][...] = copies[0]
        return name
    if not run:
        return _readable_name(direction, plan.variant, mode_id, dt)
    table = _table(backend, dt)
    kernel, name = table.get(direction, plan.variant, mode_id)
    n = arrays[0].size
    out, *inputs = plan.arrays
    if direction == "fwd":
        pointers = (inputs[0], out)  # x, y
    else:
        pointers = (inputs[1], inputs[0], inputs[2], out)  # dy, x, y, dx
    if plan.variant == "strided":
        kernel(table.grid(n), BLOCK, (*pointers, np.int64(n), plan.layout, params))
    else:
        units = n // _vec(dt) if plan.variant == "vec" else n
        kernel(table.grid(units), BLOCK, (*pointers, np.int64(n), params))
    _LAST.set(name)
    return name


# ------------------------------------------------------------------ the fast path

# Forward calls without ``out`` on contiguous inputs, by x's key and the scalars as given:
# (kernel, readable name, grid, kernel args after the pointers, whether out was 16-byte
# aligned: the variant depends on it). Strided and empty inputs always take the slow path.
_CALLS = CallCache("activation_forward")


def _fast_entry(x: Any, out: Any, mode_id: int, dt: dtypes.DType, backend: Backend,
                params: np.void) -> tuple | None:  # fmt: skip
    """What a repeat of this (just validated and launched) call needs; None if strided."""
    plan = _plan([out, x])
    if plan is None or plan.variant == "strided" or plan.arrays[0] is not out:
        return None
    table = _table(backend, dt)
    kernel, name = table.get("fwd", plan.variant, mode_id)
    n = x.size
    units = n // _vec(dt) if plan.variant == "vec" else n
    return kernel, name, table.grid(units), (np.int64(n), params), data_pointer(out) % 16 == 0


def _quick(x: Any, scalars: tuple | None) -> Any:
    """A plan's call: the cached forward of x with these scalars, or None."""
    entry = _CALLS.get(call_key(x, scalars, aligned=True))
    return None if entry is None else _fast_forward(x, entry)


def _fast_forward(x: Any, entry: tuple) -> Any:
    """A cached forward call; None when the new out's alignment differs from the entry's."""
    kernel, name, grid, tail, aligned = entry
    out = _empty_like(None, x)  # type: ignore[arg-type]
    if (data_pointer(out) % 16 == 0) != aligned:
        return None
    kernel(grid, BLOCK, (x, out, *tail))
    _LAST.set(name)
    return out


# ------------------------------------------------------------------ public API


@with_stream
def activation_forward(
    x: Any,
    mode: str,
    *,
    coef: float | None = None,
    threshold: float | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
) -> Any:
    """``y = alpha * f(x) + beta * y_prior`` for an activation ``mode``.

    Args:
        x: float32, float16, bfloat16 or float64 array (NumPy runs on the emulator, CuPy
            on the GPU), any shape and strides. float64 computes in double and takes
            the scalars below exactly; the other types compute in float32 with the
            scalars rounded to float32.
        mode: one of :data:`ACTIVATION_MODES`.
        coef: the mode's coefficient (cuDNN's ``coef``): leaky_relu's negative slope
            (default 0.01), clipped_relu's ceiling (6.0), elu's alpha (1.0), swish's
            beta (1.0), softplus's beta (1.0), hardtanh's max_val (1.0). Other modes
            take none.
        threshold: softplus's linear-region threshold (default 20: ``beta*x > 20`` gives
            x); hardtanh's min_val (default -1.0, at most max_val).
        alpha, beta: blending factors; ``beta != 0`` reads ``out``'s prior content and
            needs ``out``. With ``beta == 0`` out is never read.
        out: the result array (same shape and dtype as x; may be x itself).

    Returns:
        ``out``, or a new array of x's kind, dtype and memory order.
    """
    key = None
    if out is None:
        key = call_key(x, scalars_key(mode, coef, threshold, alpha, beta), aligned=True)
        entry = _CALLS.get(key)
        if entry is not None:
            y = _fast_forward(x, entry)
            if y is not None:
                return y
    mode_id = _mode_id(mode)
    backend = backend_for(x, out, names=("x", "out"))
    x = _array("x", x)
    dt = float_dtype("x", x)
    params, beta_k = _params(mode, coef, threshold, alpha, beta, False, dt)
    fresh = out is None
    out = _output(out, x, backend, beta_k, {"x": x})
    if x.size:
        _launch("fwd", mode_id, dt, backend, [out, x], params)
        if fresh and key is not None:
            _CALLS.put(key, _fast_entry(x, out, mode_id, dt, backend, params))
    return out


@with_stream
def activation_backward(
    dy: Any,
    x: Any,
    mode: str,
    *,
    y: Any = None,
    coef: float | None = None,
    threshold: float | None = None,
    alpha: float = 1.0,
    beta: float = 0.0,
    out: Any = None,
) -> Any:
    """``dx = alpha * dy * f'(x) + beta * dx_prior`` for an activation ``mode``.

    ``dy``, ``x`` (and ``y``, the forward output, if given) share shape and dtype. For
    sigmoid and tanh a given ``y`` is used for the derivative (y (1 - y), 1 - y^2), as
    cuDNN does; other modes ignore it. Derivatives at kinks follow PyTorch (relu'(0) = 0,
    clipped_relu' = 0 at both ends, elu'(0) = alpha); see
    :mod:`cudnnlite.reference.activation`. Other arguments as :func:`activation_forward`;
    ``out`` may be dy or x (in place).
    """
    mode_id = _mode_id(mode)
    backend = backend_for(dy, x, y, out, names=("dy", "x", "y", "out"))
    dy = _array("dy", dy)
    x = _array("x", x)
    y = None if y is None else _array("y", y)
    dt = float_dtype("x", x)
    same_dtype(("x", "dy", "y"), (x, dy, y))
    same_shape(("x", "dy", "y"), (x, dy, y))
    use_y = y is not None and mode_id in _USES_Y
    params, beta_k = _params(mode, coef, threshold, alpha, beta, use_y, dt)
    out = _output(out, x, backend, beta_k, {"dy": dy, "x": x, "y": y})
    if x.size:
        arrays = [out, x, dy, y if use_y else x]
        _launch("bwd", mode_id, dt, backend, arrays, params)
    return out


def kernel_name_for(
    x: Any,
    mode: str,
    *,
    backward: bool = False,
    dy: Any = None,
    y: Any = None,
    out: Any = None,
) -> str:
    """The readable name of the kernel a call on these arrays would launch, without
    launching or compiling anything, e.g. ``act_fwd_vec4_relu_fp32`` (aligned and
    contiguous), ``act_fwd_scalar_relu_fp32`` (contiguous but misaligned) or
    ``act_bwd_strided_gelu_bf16``. ``out`` defaults to a fresh array like x."""
    mode_id = _mode_id(mode)
    backend = backend_for(x, dy, y, out, names=("x", "dy", "y", "out"))
    x = _array("x", x)
    dt = float_dtype("x", x)
    if out is None:
        out = _empty_like(backend, x)
    if backward:
        dy = x if dy is None else _array("dy", dy)
        use_y = y is not None and mode_id in _USES_Y
        arrays = [out, x, dy, _array("y", y) if use_y else x]
    else:
        arrays = [out, x]
    direction = "bwd" if backward else "fwd"
    return _launch(
        direction, mode_id, dt, backend, arrays, _params_struct(0, 0, 1, 0, 0), run=False
    )


def activation_plan(
    shape: Sequence[int],
    mode: str,
    *,
    coef: float | None = None,
    threshold: float | None = None,
    alpha: float = 1.0,
    dtype: Any = np.float32,
    backend: str = "auto",
) -> OpPlan:
    """Plans ``activation_forward(x, mode, coef=, threshold=, alpha=)`` for arrays of
    ``shape`` and ``dtype``: the arguments are checked now; ``plan(x, out=None,
    stream=None)`` checks x's kind, shape and dtype and launches. ``backend``: "cpu"
    (emulator), "cuda", or "auto" (the GPU when CuPy sees one)."""
    _mode_id(mode)
    dims, dt = plan_shape(shape), plan_dtype(dtype)
    _params(mode, coef, threshold, alpha, 0.0, False, dtypes.lookup(dt))
    kwargs = {"mode": mode, "coef": coef, "threshold": threshold, "alpha": alpha}
    scalars = scalars_key(mode, coef, threshold, alpha, 0.0)  # as activation_forward's
    return OpPlan("activation", activation_forward, plan_backend(backend), dims, dt, kwargs,
                  _quick, scalars)  # fmt: skip


__all__ = [
    "ACTIVATION_MODES",
    "FUSED_ALIASES",
    "activation_backward",
    "activation_forward",
    "activation_plan",
    "kernel_name_for",
    "last_kernel_name",
    "module_specs",
]


# Kernel launches only, host copies reported: an emulator graph may replay these.
graph_safe(activation_forward, activation_backward)
