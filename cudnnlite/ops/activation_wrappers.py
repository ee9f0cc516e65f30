"""The PyTorch-style activation wrappers (``relu``, ``leaky_relu``, ``gelu``, ``softplus``,
...): :func:`~cudnnlite.ops.activation.activation_forward` without blending, under
PyTorch's names for the functions and their arguments.
"""

from __future__ import annotations

from typing import Any

from ..errors import BadParamError
from ..runtime.graph import graph_safe
from ..runtime.streams import with_stream
from .activation import activation_forward

# The wrappers' own with_stream already entered the stream and imported foreign arrays:
# they call the unwrapped function, which saves a second wrapper per call.
_forward = activation_forward.__wrapped__  # type: ignore[attr-defined]


def _forward_named(names: dict[str, str], x: Any, mode: str, **kwargs: Any) -> Any:
    """``_forward`` for a wrapper whose arguments PyTorch names otherwise: an error about
    ``coef`` / ``threshold`` names the wrapper's argument (``negative_slope``, ...)."""
    try:
        return _forward(x, mode, **kwargs)
    except BadParamError as e:
        message = str(e)
        for inner, outer in names.items():
            if message.startswith(f"{inner}:"):
                raise BadParamError(outer + message[len(inner) :]) from None
        raise


@with_stream
def relu(x: Any, *, out: Any = None) -> Any:
    """max(x, 0) (NaN stays NaN), as ``torch.nn.functional.relu``."""
    return _forward(x, "relu", out=out)


@with_stream
def leaky_relu(x: Any, negative_slope: float = 0.01, *, out: Any = None) -> Any:
    """x if x > 0 else negative_slope * x."""
    return _forward_named({"coef": "negative_slope"}, x, "leaky_relu", coef=negative_slope,
                          out=out)  # fmt: skip


@with_stream
def clipped_relu(x: Any, ceiling: float = 6.0, *, out: Any = None) -> Any:
    """min(max(x, 0), ceiling); ceiling 6 is relu6."""
    return _forward_named({"coef": "ceiling"}, x, "clipped_relu", coef=ceiling, out=out)


@with_stream
def elu(x: Any, alpha: float = 1.0, *, out: Any = None) -> Any:
    """x if x > 0 else alpha * (exp(x) - 1)."""
    return _forward_named({"coef": "alpha"}, x, "elu", coef=alpha, out=out)


@with_stream
def sigmoid(x: Any, *, out: Any = None) -> Any:
    """1 / (1 + exp(-x))."""
    return _forward(x, "sigmoid", out=out)


@with_stream
def tanh(x: Any, *, out: Any = None) -> Any:
    """tanh(x)."""
    return _forward(x, "tanh", out=out)


@with_stream
def silu(x: Any, *, out: Any = None) -> Any:
    """x * sigmoid(x) (swish with beta 1)."""
    return _forward(x, "swish", out=out)


@with_stream
def swish(x: Any, beta: float = 1.0, *, out: Any = None) -> Any:
    """x * sigmoid(beta * x)."""
    return _forward_named({"coef": "beta"}, x, "swish", coef=beta, out=out)


@with_stream
def gelu(x: Any, approximate: str = "none", *, out: Any = None) -> Any:
    """x * Phi(x); ``approximate="tanh"`` uses the tanh approximation (PyTorch's names)."""
    if approximate == "none":
        return _forward(x, "gelu", out=out)
    if approximate == "tanh":
        return _forward(x, "gelu_tanh", out=out)
    raise BadParamError(f"approximate: expected 'none' or 'tanh', got {approximate!r}")


@with_stream
def softplus(x: Any, beta: float = 1.0, threshold: float = 20.0, *, out: Any = None) -> Any:
    """log(1 + exp(beta x)) / beta, and x where beta * x > threshold."""
    return _forward_named({"coef": "beta"}, x, "softplus", coef=beta, threshold=threshold,
                          out=out)  # fmt: skip


@with_stream
def hardtanh(x: Any, min_val: float = -1.0, max_val: float = 1.0, *, out: Any = None) -> Any:
    """min(max(x, min_val), max_val) (NaN stays NaN), as ``torch.nn.functional.hardtanh``;
    min_val <= max_val."""
    names = {"threshold/coef": "min_val/max_val", "coef": "max_val", "threshold": "min_val"}
    return _forward_named(names, x, "hardtanh", coef=max_val, threshold=min_val, out=out)


@with_stream
def relu6(x: Any, *, out: Any = None) -> Any:
    """min(max(x, 0), 6), as ``torch.nn.functional.relu6``: hardtanh(x, 0, 6), so -0
    stays -0 (clipped_relu gives +0) and the gradient is 0 at 0 and 6."""
    return _forward(x, "hardtanh", coef=6.0, threshold=0.0, out=out)


@with_stream
def hardswish(x: Any, *, out: Any = None) -> Any:
    """x * min(max(x + 3, 0), 6) / 6, as ``torch.nn.functional.hardswish``."""
    return _forward(x, "hardswish", out=out)


@with_stream
def hardsigmoid(x: Any, *, out: Any = None) -> Any:
    """min(max(x + 3, 0), 6) / 6, as ``torch.nn.functional.hardsigmoid``."""
    return _forward(x, "hardsigmoid", out=out)


@with_stream
def mish(x: Any, *, out: Any = None) -> Any:
    """x * tanh(log(1 + exp(x))), as ``torch.nn.functional.mish``."""
    return _forward(x, "mish", out=out)


@with_stream
def identity(x: Any, *, out: Any = None) -> Any:
    """x (a copy into a new array or ``out``)."""
    return _forward(x, "identity", out=out)


__all__ = [
    "clipped_relu",
    "elu",
    "gelu",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "identity",
    "leaky_relu",
    "mish",
    "relu",
    "relu6",
    "sigmoid",
    "silu",
    "softplus",
    "swish",
    "tanh",
]


# Kernel launches only, host copies reported: an emulator graph may replay these.
graph_safe(relu, leaky_relu, clipped_relu, elu, sigmoid, tanh, silu, swish, gelu, softplus,
           identity, hardtanh, relu6, hardswish, hardsigmoid, mish)  # fmt: skip
