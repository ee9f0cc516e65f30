"""Convolution arguments checked and normalized, by PyTorch's rules: shapes and
hyper-parameters into a ConvProblem, or an EmptyConv when there is no work
(:func:`make_problem`), and the fused epilogue's activation and scalars into an Epilogue.
The forward calls, the plans and the backward ops (ops/conv_backward.py) share them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from .. import dtypes
from ..errors import BadParamError, NotSupportedError
from ..problems.conv import ConvProblem
from ..solvers.conv.common import IDENTITY_MODE, Epilogue
from .activation import ACTIVATION_MODES, FUSED_ALIASES, fused_mode

_LAYOUTS_2D = ("NCHW", "NHWC")
_LAYOUTS_1D = {"NCW": "NCW", "NWC": "NWC", "NCHW": "NCW", "NHWC": "NWC"}
_LAYOUTS_3D = ("NCDHW", "NDHWC")
_MODE_ID = {m: i for i, m in enumerate(ACTIVATION_MODES)}
_COEF_DEFAULTS = {
    "leaky_relu": 0.01,
    "clipped_relu": 6.0,
    "elu": 1.0,
    "swish": 1.0,
    "softplus": 1.0,
    "hardtanh": 1.0,  # max_val (its min_val: activation_threshold, default -1)
}
# activation_threshold's default: softplus's linear threshold, hardtanh's min_val
_THRESHOLD_DEFAULTS = {"softplus": 20.0, "hardtanh": -1.0}
_INDEX_LIMIT = 2**31


def _ints(name: str, value: Any, n: int, minimum: int) -> tuple[int, ...]:
    try:
        vals = (value,) * n if isinstance(value, (int, np.integer)) else tuple(value)
    except TypeError:
        raise BadParamError(f"{name}: expected an int or {n} ints, got {value!r}") from None
    if len(vals) == 1:
        vals = vals * n  # PyTorch broadcasts a 1-tuple: padding=(1,) is (1, 1) in 2-D
    if len(vals) != n or not all(isinstance(v, (int, np.integer)) and not isinstance(v, bool)
                                 for v in vals):  # fmt: skip
        raise BadParamError(f"{name}: expected an int or {n} ints, got {value!r}")
    if any(v < minimum for v in vals):
        raise BadParamError(f"{name}: every value must be >= {minimum}, got {value!r}")
    if any(v >= 2**31 for v in vals):
        raise BadParamError(f"{name}: every value must be below 2^31 (the kernels' ints), "
                            f"got {value!r}")  # fmt: skip
    return tuple(int(v) for v in vals)


def _pads(padding: Any, filt: tuple[int, ...], strides: tuple[int, ...],
          dils: tuple[int, ...]) -> tuple[tuple[int, int], ...]:  # fmt: skip
    nd = len(filt)
    if isinstance(padding, str):
        if padding == "valid":
            return ((0, 0),) * nd
        if padding == "same":
            if any(s != 1 for s in strides):
                raise BadParamError("padding: 'same' needs stride 1 (as in PyTorch)")
            pads = []
            for f, d in zip(filt, dils, strict=True):
                total = d * (f - 1)
                pads.append((total // 2, total - total // 2))  # the extra one after
            return tuple(pads)
        raise BadParamError(
            f"padding: expected an int, a tuple, 'same' or 'valid', got {padding!r}"
        )
    if isinstance(padding, (int, np.integer)) and not isinstance(padding, bool):
        p = _ints("padding", padding, 1, 0)[0]
        return ((p, p),) * nd
    try:
        vals = tuple(padding)
    except TypeError:
        raise BadParamError(
            f"padding: expected an int, a tuple, 'same' or 'valid', got {padding!r}"
        ) from None
    if len(vals) == 1:
        vals = vals * nd  # a 1-tuple broadcasts, as in PyTorch
    if len(vals) == nd:
        p = _ints("padding", vals, nd, 0)
        return tuple((v, v) for v in p)
    if len(vals) == 2 * nd:
        p = _ints("padding", vals, 2 * nd, 0)
        return tuple((p[2 * i], p[2 * i + 1]) for i in range(nd))
    raise BadParamError(
        f"padding: expected an int, {nd} ints, {2 * nd} ints (before, after per dim), "
        f"'same' or 'valid', got {padding!r}"
    )


def _finite(name: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.integer, np.floating)):
        raise BadParamError(f"{name}: expected a real number, got {value!r}")
    v = float(value)
    if not math.isfinite(v):
        raise BadParamError(f"{name}: expected a finite number, got {value!r}")
    return v


def _epilogue(activation: Any, coef: Any, threshold: Any, alpha: Any, alpha2: Any,
              has_bias: bool, has_z: bool, dtype: Any = np.float64) -> Epilogue:  # fmt: skip
    """The call's Epilogue; its scalars finite in the kernels' type (float32 unless
    ``dtype`` is float64: 1e300 would be inf there)."""
    epi = _epilogue_of(activation, coef, threshold, alpha, alpha2, has_bias, has_z)
    if np.dtype(dtype) != np.float64:
        with np.errstate(over="ignore"):
            for name, v in (("alpha", epi.alpha), ("alpha2", epi.alpha2),
                            ("activation_coef", epi.coef)):  # fmt: skip
                if not math.isfinite(np.float32(v)):
                    raise BadParamError(f"{name}: expected a finite number in float32, got {v!r}")
    return epi


def _epilogue_of(activation: Any, coef: Any, threshold: Any, alpha: Any, alpha2: Any,
                 has_bias: bool, has_z: bool) -> Epilogue:  # fmt: skip
    a = _finite("alpha", alpha)
    a2 = _finite("alpha2", (1.0 if has_z else 0.0) if alpha2 is None else alpha2)
    names = ("activation_coef", "activation_threshold")
    activation, coef, threshold = fused_mode(activation, coef, threshold, names)
    if activation is None:
        if coef is not None or threshold is not None:
            raise BadParamError("activation_coef/activation_threshold: given without an activation")
        return Epilogue(a, a2, IDENTITY_MODE, 0.0, 0.0, has_bias, has_z)
    if not isinstance(activation, str) or activation not in _MODE_ID:
        raise BadParamError(
            f"activation: expected None or one of {', '.join((*ACTIVATION_MODES, *FUSED_ALIASES))}"
            f", got {activation!r}"
        )
    if coef is not None and activation not in _COEF_DEFAULTS:
        raise BadParamError(f"activation_coef: {activation} takes no coefficient")
    if threshold is not None and activation not in _THRESHOLD_DEFAULTS:
        raise BadParamError(
            "activation_threshold: only softplus (its threshold) and hardtanh (its min_val) "
            "take a threshold"
        )
    c = (
        _finite("activation_coef", coef)
        if coef is not None
        else _COEF_DEFAULTS.get(activation, 0.0)
    )
    t = (
        _finite("activation_threshold", threshold)
        if threshold is not None
        else _THRESHOLD_DEFAULTS.get(activation, 20.0)
    )
    if activation in ("clipped_relu", "softplus") and c <= 0:
        raise BadParamError(f"activation_coef: {activation} needs a coefficient > 0, got {c}")
    if activation == "hardtanh" and t > c:
        raise BadParamError(
            f"activation_threshold: hardtanh's min_val ({t}) must not exceed its max_val "
            f"(activation_coef, {c})"
        )
    return Epilogue(a, a2, _MODE_ID[activation], c, t, has_bias, has_z)


@dataclass(frozen=True)
class EmptyConv:
    """A valid convolution with no work (N, C or K zero, or empty spatial dims with N or C
    zero): its shapes in the layout, and nothing for a kernel to do. Every output is
    ``act(alpha2 * z + bias)`` (a sum over no input channels is 0); that output is empty
    unless only C is zero."""

    x_shape: tuple[int, ...]
    w_shape: tuple[int, ...]
    y_shape: tuple[int, ...]
    k: int
    channels_last: bool


def check_math(math_mode: Any, dt: dtypes.DType) -> None:
    """``math``: "default", or "tf32" for float32 inputs."""
    if math_mode not in ("default", "tf32"):
        raise BadParamError(f"math: expected 'default' or 'tf32', got {math_mode!r}")
    if math_mode == "tf32" and dt.short != "fp32":
        raise BadParamError("math: 'tf32' applies to float32 inputs only")


def make_problem(
    x_shape: Sequence[int],
    w_shape: Sequence[int],
    dtype: Any,
    *,
    stride: Any = 1,
    padding: Any = 0,
    dilation: Any = 1,
    groups: int = 1,
    layout: str = "NCHW",
    math_mode: str = "default",
    nd: int = 2,
    allow_empty: bool = False,
) -> ConvProblem | EmptyConv:
    """Validates shapes and hyper-parameters; the ConvProblem they describe. With
    ``allow_empty``, a convolution PyTorch accepts although it has no work (N, C or K
    zero; empty spatial dims with N or C zero) is an :class:`EmptyConv`; without it,
    a BadParamError."""
    dt = dtypes.lookup(dtype)
    if dt is None:
        raise BadParamError(f"x: expected dtype {dtypes.names()}, got {dtype}")
    if not isinstance(layout, str):
        raise BadParamError(f"layout: expected a layout name, got {layout!r}")
    if nd == 2:
        if layout not in _LAYOUTS_2D:
            raise BadParamError(f"layout: expected 'NCHW' or 'NHWC', got {layout!r}")
        lay = layout
    elif nd == 3:
        if layout not in _LAYOUTS_3D:
            raise BadParamError(f"layout: expected 'NCDHW' or 'NDHWC', got {layout!r}")
        lay = layout
    else:
        if layout not in _LAYOUTS_1D:
            raise BadParamError(f"layout: expected 'NCW' or 'NWC', got {layout!r}")
        lay = _LAYOUTS_1D[layout]
    if len(x_shape) != nd + 2:
        raise BadParamError(
            f"x: expected a {nd + 2}-D array ({lay}) or an unbatched {nd + 1}-D one, got shape "
            f"{tuple(x_shape)}"
        )
    if len(w_shape) != nd + 2:
        raise BadParamError(f"w: expected a {nd + 2}-D filter array, got shape {tuple(w_shape)}")
    channels_last = lay[-1] == "C"
    if channels_last:
        n, *spatial, c = x_shape
        k, *filt, cg = w_shape
    else:
        n, c, *spatial = x_shape
        k, cg, *filt = w_shape
    if not isinstance(groups, (int, np.integer)) or isinstance(groups, bool) or groups < 1:
        raise BadParamError(f"groups: expected an int >= 1, got {groups!r}")
    if c % groups:
        raise BadParamError(f"groups: {groups} does not divide the {c} input channels")
    if k % groups:
        raise BadParamError(f"groups: {groups} does not divide the {k} output channels (w)")
    if cg * groups != c:
        raise BadParamError(
            f"w: has {cg} channels per group, expected {c // groups} (x has {c} channels, "
            f"groups={groups}); check the layout ({lay}: filters "
            f"{'K,*filter,C' if channels_last else 'K,C,*filter'})"
        )
    empty = min(n, c, k, *spatial) == 0
    if min(filt) < 1 or (empty and not allow_empty):
        raise BadParamError(f"x and w must not be empty: x {tuple(x_shape)}, w {tuple(w_shape)}")
    if min(spatial) == 0 and n and c:
        raise BadParamError(
            f"x: empty spatial dims need N = 0 or C = 0 (as PyTorch), got shape {tuple(x_shape)}"
        )
    strides = _ints("stride", stride, nd, 1)
    dils = _ints("dilation", dilation, nd, 1)
    pads = _pads(padding, tuple(filt), strides, dils)
    check_math(math_mode, dt)
    for size, f, (b, a), d in zip(spatial, filt, pads, dils, strict=True):
        if size + b + a < d * (f - 1) + 1:
            raise BadParamError(
                f"x: the padded input ({size} + {b} + {a}) is smaller than the dilated filter "
                f"({d * (f - 1) + 1}): the output would be empty"
            )
    if empty:
        out = tuple(
            (size + b + a - d * (f - 1) - 1) // s + 1
            for size, f, (b, a), d, s in zip(spatial, filt, pads, dils, strides, strict=True)
        )
        y_shape = (n, *out, k) if channels_last else (n, k, *out)
        return EmptyConv(tuple(map(int, x_shape)), tuple(map(int, w_shape)),
                         tuple(map(int, y_shape)), int(k), channels_last)  # fmt: skip
    problem = ConvProblem(
        n=int(n),
        c=int(c),
        spatial=tuple(map(int, spatial)),
        k=int(k),
        filter=tuple(map(int, filt)),
        pads=pads,
        strides=strides,
        dilations=dils,
        groups=int(groups),
        layout=lay,
        dtype=dt.short,
        math=math_mode,
    )
    for name, shape in (("x", x_shape), ("y", problem.y_shape()), ("w", w_shape)):
        if math.prod(shape) >= _INDEX_LIMIT:
            raise NotSupportedError(
                f"{name}: {math.prod(shape)} elements; convolutions are limited to tensors "
                f"of fewer than 2^31 elements (32-bit indexing in the kernels)"
            )
    return problem
