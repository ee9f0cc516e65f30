"""cudnnlite: cuDNN's deep-learning primitives for CuPy and NumPy arrays.

CuPy arrays run on the GPU (kernels compiled by NVRTC); NumPy arrays run the same
CUDA sources on the CPU emulator. Importing this package touches no GPU and
compiles nothing.
"""

from . import reference
from .dtypes import bfloat16
from .errors import (
    BadParamError,
    CompileError,
    CudnnliteError,
    ExecutionError,
    NotSupportedError,
)
from .ops.activation import (
    ACTIVATION_MODES,
    activation_backward,
    activation_forward,
    clipped_relu,
    elu,
    gelu,
    identity,
    leaky_relu,
    relu,
    sigmoid,
    silu,
    softplus,
    swish,
    tanh,
)

__version__ = "0.1.0"

__all__ = [
    "ACTIVATION_MODES",
    "BadParamError",
    "CompileError",
    "CudnnliteError",
    "ExecutionError",
    "NotSupportedError",
    "activation_backward",
    "activation_forward",
    "bfloat16",
    "clipped_relu",
    "elu",
    "gelu",
    "identity",
    "leaky_relu",
    "reference",
    "relu",
    "sigmoid",
    "silu",
    "softplus",
    "swish",
    "tanh",
]
