"""cudnnlite: cuDNN's deep-learning primitives for CuPy and NumPy arrays.

CuPy arrays run on the GPU (kernels compiled by NVRTC); NumPy arrays run the same
CUDA sources on the CPU emulator. Importing this package touches no GPU and
compiles nothing.
"""

from . import reference
from .dispatch.explain import explain, explain_call
from .dispatch.settings import set_deterministic, set_mode, set_workspace_limit, settings
from .dispatch.tuner import tune
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
from .ops.conv import ConvPlan, conv1d, conv2d, conv2d_plan
from .ops.dropout import dropout, dropout_backward
from .ops.softmax import log_softmax, log_softmax_backward, softmax, softmax_backward
from .ops.tensor import (
    OP_TENSOR_OPS,
    REDUCE_OPS,
    add_tensor,
    nchw_to_nhwc,
    nhwc_to_nchw,
    op_tensor,
    reduce_tensor,
    scale_tensor,
    set_tensor,
    transform_tensor,
)
from .problems.conv import ConvProblem

__version__ = "0.1.0"

__all__ = [
    "ACTIVATION_MODES",
    "OP_TENSOR_OPS",
    "REDUCE_OPS",
    "add_tensor",
    "dropout",
    "dropout_backward",
    "log_softmax",
    "log_softmax_backward",
    "nchw_to_nhwc",
    "nhwc_to_nchw",
    "op_tensor",
    "reduce_tensor",
    "scale_tensor",
    "set_tensor",
    "softmax",
    "softmax_backward",
    "transform_tensor",
    "ConvPlan",
    "ConvProblem",
    "conv1d",
    "conv2d",
    "conv2d_plan",
    "explain",
    "explain_call",
    "set_deterministic",
    "set_mode",
    "set_workspace_limit",
    "settings",
    "tune",
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
