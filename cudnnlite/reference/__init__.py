"""NumPy float64 references of every primitive (public): the ground truth the tests
compare kernels against, usable by anyone checking their own kernels.

One module per family (``activation``, ``conv``, ``pooling``, ``norm``, ``softmax``,
``dropout``, ``tensor``, ``rnn``, ``ctc``, ``spatial``); the most used functions are
re-exported here.
``softmax`` is the module, its function is ``softmax_forward``.
"""

from . import (
    activation,
    conv,
    conv_backward,
    ctc,
    dropout,
    norm,
    pooling,
    rnn,
    softmax,
    spatial,
    tensor,
)
from .activation import activation_backward, activation_forward
from .conv import conv_bias_act_forward, conv_forward
from .ctc import ctc_loss_backward, ctc_loss_forward
from .dropout import dropout_backward, dropout_forward, dropout_mask, philox4x32_10
from .rnn import rnn_backward, rnn_forward
from .softmax import log_softmax, softmax_backward, softmax_forward
from .spatial import affine_grid, affine_grid_backward, grid_sample, grid_sample_backward
from .tensor import add_tensor, op_tensor, reduce_tensor, transform_tensor

__all__ = [
    "activation",
    "activation_backward",
    "activation_forward",
    "affine_grid",
    "affine_grid_backward",
    "add_tensor",
    "conv",
    "conv_backward",
    "conv_bias_act_forward",
    "conv_forward",
    "ctc",
    "ctc_loss_backward",
    "ctc_loss_forward",
    "dropout",
    "dropout_backward",
    "dropout_forward",
    "dropout_mask",
    "grid_sample",
    "grid_sample_backward",
    "log_softmax",
    "norm",
    "op_tensor",
    "philox4x32_10",
    "pooling",
    "reduce_tensor",
    "rnn",
    "rnn_backward",
    "rnn_forward",
    "softmax",
    "softmax_backward",
    "softmax_forward",
    "spatial",
    "tensor",
    "transform_tensor",
]
