"""cudnnlite: cuDNN's deep-learning primitives for CuPy and NumPy arrays.

CuPy arrays run on the GPU (kernels compiled by NVRTC); NumPy arrays run the same
CUDA sources on the CPU emulator. Importing this package touches no GPU and
compiles nothing.
"""

import contextlib as _contextlib
import typing as _typing

from . import reference
from .dispatch.explain import explain, explain_call
from .dispatch.settings import set_deterministic, set_mode, set_workspace_limit, settings
from .dispatch.tuner import tune
from .doctor import doctor
from .errors import (
    BadParamError,
    CompileError,
    CudnnliteError,
    ExecutionError,
    NotSupportedError,
)
from .ops import _fastpath as _fastpath
from .ops._fastpath import OpPlan
from .ops.activation import (
    ACTIVATION_MODES,
    FUSED_ALIASES,
    activation_backward,
    activation_forward,
    activation_plan,
)
from .ops.activation_wrappers import (
    clipped_relu,
    elu,
    gelu,
    hardsigmoid,
    hardswish,
    hardtanh,
    identity,
    leaky_relu,
    mish,
    relu,
    relu6,
    sigmoid,
    silu,
    softplus,
    swish,
    tanh,
)
from .ops.attention import scaled_dot_product_attention, scaled_dot_product_attention_backward
from .ops.batch_norm import (
    BN_MODES,
    batch_norm,
    batch_norm_backward,
    batch_norm_forward_inference,
    batch_norm_forward_training,
)
from .ops.conv import conv1d, conv2d, conv3d
from .ops.conv_backward import (
    conv1d_backward_bias,
    conv1d_backward_data,
    conv1d_backward_filter,
    conv2d_backward_bias,
    conv2d_backward_data,
    conv2d_backward_filter,
    conv3d_backward_bias,
    conv3d_backward_data,
    conv3d_backward_filter,
    conv_transpose1d,
    conv_transpose2d,
    conv_transpose3d,
)
from .ops.conv_plan import ConvPlan, conv2d_plan, conv3d_plan
from .ops.ctc import ctc_loss, ctc_loss_backward
from .ops.dropout import PhiloxState, dropout, dropout_backward
from .ops.group_norm import (
    group_norm,
    group_norm_backward,
    group_norm_forward,
    instance_norm,
    instance_norm_backward,
    instance_norm_forward,
)
from .ops.lrn import lrn, lrn_backward
from .ops.norm_plans import batch_norm_inference_plan
from .ops.pooling import (
    POOLING_MODES,
    adaptive_avg_pool,
    adaptive_avg_pool1d,
    adaptive_avg_pool2d,
    adaptive_avg_pool3d,
    adaptive_avg_pool_backward,
    adaptive_max_pool,
    adaptive_max_pool1d,
    adaptive_max_pool2d,
    adaptive_max_pool3d,
    adaptive_max_pool_backward,
    avg_pool,
    avg_pool1d,
    avg_pool2d,
    avg_pool3d,
    avg_pool_backward,
    global_avg_pool,
    max_pool,
    max_pool1d,
    max_pool2d,
    max_pool3d,
    max_pool_backward,
    pooling_backward,
    pooling_forward,
    pooling_plan,
)
from .ops.reduce import REDUCE_OPS, reduce_tensor
from .ops.rnn import (
    RnnPlan,
    pack_rnn_weights,
    rnn,
    rnn_backward,
    rnn_plan,
    rnn_weights_from_torch,
)
from .ops.row_norm import (
    layer_norm,
    layer_norm_backward,
    layer_norm_forward,
    rms_norm,
    rms_norm_backward,
    rms_norm_forward,
)
from .ops.softmax import (
    log_softmax,
    log_softmax_backward,
    softmax,
    softmax_backward,
    softmax_plan,
)
from .ops.spatial import affine_grid, affine_grid_backward, grid_sample, grid_sample_backward
from .ops.tensor import (
    OP_TENSOR_OPS,
    add_tensor,
    maximum,
    minimum,
    nchw_to_nhwc,
    nhwc_to_nchw,
    op_tensor,
    scale_tensor,
    set_tensor,
    transform_tensor,
)
from .problems.attention import AttentionProblem
from .problems.conv import ConvProblem
from .problems.rnn import RnnProblem
from .runtime import templates as _templates
from .runtime.graph import Graph, graph
from .runtime.streams import current_stream, use_stream

__version__ = "0.1.0"


def set_fast_paths(enabled: bool) -> None:
    """Turns the fast paths of repeated calls on or off for the whole process (on by
    default): the launch templates and the ops' call caches (README, "Per-call
    overhead"). Off, every call runs the full checks and dispatch."""
    if not isinstance(enabled, bool):
        raise BadParamError(f"enabled: expected True or False, got {enabled!r}")
    _fastpath.set_enabled(enabled)


def fast_path(op: _typing.Any, *args: _typing.Any, **kwargs: _typing.Any) -> str:
    """What the call ``op(*args, **kwargs)`` (a public function or a plan) gets from the
    fast path of repeated calls, in words, without running it: replayed from its launch
    template, refused (and why), not recorded yet, or not templated (and why)."""
    return _templates.describe(op, args, kwargs)


def fast_paths_off() -> _contextlib.AbstractContextManager[None]:
    """A context manager: the calls of this thread inside it take the full path."""
    return _fastpath.disabled()


def __getattr__(name: str) -> _typing.Any:
    # cudnnlite.bfloat16 (ml_dtypes.bfloat16's dtype): ml_dtypes is imported on first need
    # (cudnnlite.dtypes' docstring says why)
    if name == "bfloat16":
        from . import dtypes as _dtypes

        return _dtypes.bfloat16
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "ACTIVATION_MODES",
    "FUSED_ALIASES",
    "conv1d_backward_bias",
    "conv1d_backward_data",
    "conv1d_backward_filter",
    "conv2d_backward_bias",
    "conv2d_backward_data",
    "conv2d_backward_filter",
    "conv3d_backward_bias",
    "conv3d_backward_data",
    "conv3d_backward_filter",
    "conv_transpose1d",
    "conv_transpose2d",
    "conv_transpose3d",
    "BN_MODES",
    "POOLING_MODES",
    "adaptive_avg_pool",
    "adaptive_avg_pool1d",
    "adaptive_avg_pool2d",
    "adaptive_avg_pool3d",
    "adaptive_avg_pool_backward",
    "adaptive_max_pool",
    "adaptive_max_pool1d",
    "adaptive_max_pool2d",
    "adaptive_max_pool3d",
    "adaptive_max_pool_backward",
    "avg_pool",
    "avg_pool1d",
    "avg_pool2d",
    "avg_pool3d",
    "avg_pool_backward",
    "batch_norm",
    "batch_norm_backward",
    "batch_norm_forward_inference",
    "batch_norm_forward_training",
    "global_avg_pool",
    "group_norm",
    "group_norm_backward",
    "group_norm_forward",
    "instance_norm",
    "instance_norm_backward",
    "instance_norm_forward",
    "layer_norm",
    "layer_norm_backward",
    "layer_norm_forward",
    "lrn",
    "lrn_backward",
    "max_pool",
    "max_pool1d",
    "max_pool2d",
    "max_pool3d",
    "max_pool_backward",
    "pooling_backward",
    "pooling_forward",
    "pooling_plan",
    "rms_norm",
    "rms_norm_backward",
    "rms_norm_forward",
    "OP_TENSOR_OPS",
    "REDUCE_OPS",
    "add_tensor",
    "maximum",
    "minimum",
    "ctc_loss",
    "ctc_loss_backward",
    "dropout",
    "dropout_backward",
    "PhiloxState",
    "log_softmax",
    "log_softmax_backward",
    "nchw_to_nhwc",
    "nhwc_to_nchw",
    "op_tensor",
    "reduce_tensor",
    "scale_tensor",
    "set_tensor",
    "softmax",
    "softmax_plan",
    "softmax_backward",
    "affine_grid",
    "affine_grid_backward",
    "grid_sample",
    "grid_sample_backward",
    "transform_tensor",
    "AttentionProblem",
    "scaled_dot_product_attention",
    "scaled_dot_product_attention_backward",
    "RnnProblem",
    "pack_rnn_weights",
    "rnn",
    "rnn_backward",
    "RnnPlan",
    "rnn_plan",
    "rnn_weights_from_torch",
    "ConvPlan",
    "OpPlan",
    "ConvProblem",
    "conv1d",
    "conv2d",
    "conv2d_plan",
    "conv3d",
    "conv3d_plan",
    "batch_norm_inference_plan",
    "current_stream",
    "doctor",
    "use_stream",
    "graph",
    "Graph",
    "explain",
    "explain_call",
    "fast_path",
    "fast_paths_off",
    "set_deterministic",
    "set_fast_paths",
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
    "activation_plan",
    "bfloat16",
    "clipped_relu",
    "elu",
    "gelu",
    "hardsigmoid",
    "hardswish",
    "hardtanh",
    "identity",
    "leaky_relu",
    "mish",
    "reference",
    "relu",
    "relu6",
    "sigmoid",
    "silu",
    "softplus",
    "swish",
    "tanh",
]
