"""Bad arguments across the public functions raise the library's BadParamError naming the
argument (never a raw TypeError / ValueError / OverflowError / IndexError, never a hang),
and leave the inputs untouched. The cases are those a randomized fuzz of every public
function's arguments found raising something else; each is checked here so they stay
fixed. (Each family's own tests cover its usual bad inputs.)"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cudnnlite as cl
from cudnnlite.errors import BadParamError

X = np.arange(16, dtype=np.float32).reshape(1, 1, 4, 4)
W = np.ones((1, 1, 3, 3), np.float32)
Y, IDX = cl.max_pool2d(X, 2, return_indices=True)
RNN_W = {
    "weight_ih_l0": np.ones((16, 3)),
    "weight_hh_l0": np.ones((16, 4)),
    "bias_ih_l0": np.zeros(16),
    "bias_hh_l0": np.zeros(16),
}

CASES: list[tuple[str, Callable[[], Any], str]] = [
    ("pool float stride", lambda: cl.max_pool2d(X, 2, stride=1.5), "stride"),
    ("pool nan stride", lambda: cl.avg_pool2d(X, 2, stride=float("nan")), "stride"),
    ("pool huge stride", lambda: cl.max_pool2d(X, 2, stride=2**40), "stride"),
    ("pool huge divisor", lambda: cl.avg_pool2d(X, 2, divisor_override=2**40), "divisor_override"),
    ("adaptive huge size", lambda: cl.adaptive_max_pool1d(X[0], 2**40), "output_size"),
    ("max_pool_backward None shape", lambda: cl.max_pool_backward(Y, IDX, None, 2, nd=2),
     "input_shape"),
    ("avg_pool_backward None shape", lambda: cl.avg_pool_backward(Y, None, 2, nd=2),
     "input_shape"),
    ("adaptive avg backward None", lambda: cl.adaptive_avg_pool_backward(Y, None, nd=2),
     "input_shape"),
    ("adaptive max backward None", lambda: cl.adaptive_max_pool_backward(Y, IDX, None, nd=2),
     "input_shape"),
    ("global_avg_pool 0-d", lambda: cl.global_avg_pool(np.ones((), np.float32)), "x"),
    ("global_avg_pool 2-d", lambda: cl.global_avg_pool(np.ones((2, 3), np.float32)), "x"),
    ("conv huge stride", lambda: cl.conv2d(X, W, stride=2**40), "stride"),
    ("conv plan huge stride",
     lambda: cl.conv2d_plan(X.shape, W.shape, stride=2**40, backend="cpu"), "stride"),
    ("conv plan None x_shape", lambda: cl.conv2d_plan(None, W.shape, backend="cpu"), "x_shape"),
    ("conv plan None w_shape", lambda: cl.conv2d_plan(X.shape, None, backend="cpu"), "w_shape"),
    ("conv plan negative x_shape",
     lambda: cl.conv2d_plan((1, -3, 4, 4), W.shape, backend="cpu"), "x_shape"),
    ("conv plan float x_shape",
     lambda: cl.conv2d_plan((1, 1.5, 4, 4), W.shape, backend="cpu"), "x_shape"),
    ("conv3d plan None", lambda: cl.conv3d_plan(None, (1, 1, 3, 3, 3), backend="cpu"), "x_shape"),
    ("conv alpha2 array", lambda: cl.conv2d(X, W, padding=1, z=X, alpha2=np.ones(2)), "alpha2"),
    ("layer_norm None shape", lambda: cl.layer_norm(X, None), "normalized_shape"),
    ("rms_norm None shape", lambda: cl.rms_norm(X, None), "normalized_shape"),
    ("lrn huge size", lambda: cl.lrn(X, 2**40), "size"),
    ("dropout return_mask None", lambda: cl.dropout(X, 0.5, seed=1, return_mask=None),
     "return_mask"),
    ("dropout return_mask str", lambda: cl.dropout(X, 0.5, seed=1, return_mask="yes"),
     "return_mask"),
    ("pack_rnn_weights huge num_layers",
     lambda: cl.pack_rnn_weights(RNN_W, mode="lstm", num_layers=2**40), "weights"),
    ("leaky_relu nan slope", lambda: cl.leaky_relu(X, float("nan")), "negative_slope"),
    ("elu str alpha", lambda: cl.elu(X, "a"), "alpha"),
    ("softplus zero beta", lambda: cl.softplus(X, beta=0.0), "beta"),
    ("swish inf beta", lambda: cl.swish(X, float("inf")), "beta"),
    ("hardtanh nan min_val", lambda: cl.hardtanh(X, float("nan")), "min_val"),
    ("hardtanh min above max", lambda: cl.hardtanh(X, 2.0, 1.0), "min_val/max_val"),
    ("clipped_relu negative ceiling", lambda: cl.clipped_relu(X, -1.0), "ceiling"),
    ("conv alpha overflowing float32", lambda: cl.conv2d(X, W, alpha=1e300), "alpha"),
    ("conv plan alpha2 overflowing float32",
     lambda: cl.conv2d_plan(X.shape, W.shape, backend="cpu")(X, W, z=Y[:, :, :2, :2] * 0,
                                                             alpha2=-1e39), "alpha2"),
    ("attention float window",
     lambda: cl.scaled_dot_product_attention(X[0], X[0], X[0], window=(2.5, 1.5)), "window"),
    ("tune None", lambda: cl.tune(None, backend="cpu", progress=False, store=False),
     "problems"),
    ("tune an int", lambda: cl.tune(3, backend="cpu", progress=False, store=False), "problems"),
    ("explain_call None x", lambda: cl.explain_call(None, W), "x"),
    ("explain_call a misspelt argument", lambda: cl.explain_call(X, W, paddin=1), "conv_args"),
    ("rnn huge num_layers",
     lambda: cl.rnn(np.ones((5, 2, 3)), None, RNN_W, num_layers=2**40), "weights"),
]  # fmt: skip


@pytest.mark.parametrize("call,name", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_argument_raises_a_library_error_naming_it(call: Callable[[], Any],
                                                       name: str) -> None:  # fmt: skip
    before = [a.copy() for a in (X, W, Y, IDX)]
    with pytest.raises(BadParamError, match=rf"^{name}\b"):
        call()
    for a, b in zip((X, W, Y, IDX), before, strict=True):
        np.testing.assert_array_equal(a, b)


def test_a_numpy_integer_stride_pools_as_an_int() -> None:
    """PyTorch takes ``stride=np.int64(2)``; the pooling functions and their backward did
    not (``len`` of a NumPy integer)."""
    y = cl.max_pool2d(X, 2, stride=np.int64(2))
    np.testing.assert_array_equal(y, cl.max_pool2d(X, 2, stride=2))
    dx = cl.avg_pool_backward(np.ones((1, 1, 2, 2), np.float32), X.shape, 2, np.int32(2))
    np.testing.assert_array_equal(dx, cl.avg_pool_backward(np.ones((1, 1, 2, 2), np.float32),
                                                           X.shape, 2, 2))  # fmt: skip
