"""Bad arguments found by an audit of every public function: each raises the library's
BadParamError naming the argument (they raised OverflowError, TypeError or ValueError, or
were taken silently)."""

from __future__ import annotations

import numpy as np
import pytest

import cudnnlite as cl

X = np.ones((1, 3, 6, 6), np.float32)
W = np.ones((4, 3, 3, 3), np.float32)
DY = np.ones((1, 3, 3, 3), np.float32)
Q = np.ones((1, 1, 4, 8), np.float32)

CASES = {
    # sizes past the kernels' 32/64-bit fields
    "max_pool_backward huge N": (
        lambda: cl.max_pool_backward(DY, np.zeros(DY.shape, np.int64), (2**63, 3, 7, 7), 3, 2, 1),
        "input_shape: sizes too large"),
    "avg_pool_backward huge H": (
        lambda: cl.avg_pool_backward(DY, (1, 3, 2**31, 7), 3, 2, 1),
        "input_shape: sizes too large"),
    "pooling_plan huge N": (
        lambda: cl.pooling_plan((2**63, 3, 7, 7), "max", 3), "shape: sizes too large"),
    "adaptive output of 2^93 elements": (
        lambda: cl.adaptive_avg_pool2d(X, (2**31 - 1,) * 2), "output_size: .* more than 2\\^62"),
    "ctc huge input length": (
        lambda: cl.ctc_loss(cl.log_softmax(np.ones((6, 2, 5), np.float32), axis=-1),
                            np.array([[1, 2], [2, 3]]), [2**63, 5], [2, 2]),
        "input_lengths: lengths out of range"),
    "ctc huge uint64 input length": (
        lambda: cl.ctc_loss(cl.log_softmax(np.ones((6, 2, 5), np.float32), axis=-1),
                            np.array([[1, 2], [2, 3]]), np.array([2**63, 5], np.uint64), [2, 2]),
        "input_lengths: lengths out of range"),
    # a list where a name is expected (was TypeError: unhashable)
    "conv activation list": (lambda: cl.conv2d(X, W, activation=["relu"]), "activation: expected"),
    "conv algo list": (lambda: cl.conv2d(X, W, algo=["x"]), "algo: expected"),
    "attention algo list": (
        lambda: cl.scaled_dot_product_attention(Q, Q, Q, algo=["x"]), "algo: expected"),
    "conv layout list": (lambda: cl.conv2d(X, W, layout=["NCHW"]), "layout: expected"),
    "conv1d layout list": (
        lambda: cl.conv1d(X[0], W[..., 0], layout=["NCW"]), "layout: expected"),
    "conv plan backend list": (
        lambda: cl.conv2d_plan(X.shape, W.shape, backend=["cpu"]), "backend: expected"),
    "op plan backend list": (
        lambda: cl.activation_plan((2, 2), "relu", backend=["cpu"]), "backend: expected"),
    "rnn plan backend list": (
        lambda: cl.rnn_plan((3, 2, 4), 5, backend=["cpu"]), "backend: expected"),
    # silently truncated or taken as something else
    "rnn plan fractional shape": (
        lambda: cl.rnn_plan((3.9, 2.9, 4.9), 5), "x_shape: expected a tuple of ints"),
    "rnn plan bool shape": (
        lambda: cl.rnn_plan((True, 2, 4), 5), "x_shape: expected a tuple of ints"),
    "conv plan dtype None": (
        lambda: cl.conv2d_plan(X.shape, W.shape, dtype=None), "x: expected dtype"),
    "op plan dtype None": (
        lambda: cl.activation_plan((2, 2), "relu", dtype=None), "dtype: expected"),
    "attention scale bool": (
        lambda: cl.scaled_dot_product_attention(Q, Q, Q, scale=True), "scale: expected a float"),
    "attention scale past float32": (
        lambda: cl.scaled_dot_product_attention(Q, Q, Q, scale=1e300),
        "scale: expected a float finite in float32"),
    "batch_norm_backward training eps": (
        lambda: cl.batch_norm_backward(X, X, np.zeros(3, np.float32), np.ones(3, np.float32),
                                       eps="str"), "eps"),
    "set_workspace_limit bool": (lambda: cl.set_workspace_limit(True), "limit: expected"),
    "set_fast_paths str": (lambda: cl.set_fast_paths("no"), "enabled: expected True or False"),
    "rnn_weights_from_torch of no RNN": (
        lambda: cl.rnn_weights_from_torch(pytest.importorskip("torch").nn.Linear(2, 3)),
        "module: expected a torch.nn.RNN"),
    # yes/no arguments taken by truthiness ("no" was true: training mode, running stats
    # updated)
    "batch_norm training str": (
        lambda: cl.batch_norm(X, np.zeros(3, np.float32), np.ones(3, np.float32), training="no"),
        "training: expected True or False"),
    "max_pool return_indices str": (
        lambda: cl.max_pool2d(X, 2, return_indices="yes"), "return_indices: expected"),
    "avg_pool count_include_pad list": (
        lambda: cl.avg_pool2d(X, 2, count_include_pad=[1]), "count_include_pad: expected"),
    "avg_pool count_include_pad int (as PyTorch)": (
        lambda: cl.avg_pool2d(X, 2, count_include_pad=1), "count_include_pad: expected"),
    "reduce keepdims str": (
        lambda: cl.reduce_tensor(X, "max", 1, keepdims="no"), "keepdims: expected"),
    "attention enable_gqa str": (
        lambda: cl.scaled_dot_product_attention(Q, Q, Q, enable_gqa="yes"), "enable_gqa: exp"),
    "attention return_lse None": (
        lambda: cl.scaled_dot_product_attention(Q, Q, Q, return_lse=None), "return_lse: exp"),
    "softmax log None": (lambda: cl.softmax(X, 1, log=None), "log: expected True or False"),
    "softmax mode array": (
        lambda: cl.softmax(X, mode=np.array([1, 2])), "mode: expected 'instance'"),
    "rnn batch_first str": (
        lambda: cl.rnn(np.ones((3, 2, 4), np.float32), None,
                       {"weight_ih_l0": np.ones((5, 4), np.float32),
                        "weight_hh_l0": np.ones((5, 5), np.float32)},
                       mode="rnn_tanh", batch_first="no"), "batch_first: expected"),
    "rnn_plan bidirectional str": (
        lambda: cl.rnn_plan((3, 2, 4), 5, bidirectional="no"), "bidirectional: expected"),
}  # fmt: skip


def test_return_indices_takes_ints_as_pytorch() -> None:
    # (PyTorch's max pooling tests return_indices in Python: 1 is accepted there)
    y, ind = cl.max_pool2d(X, 2, return_indices=1)
    assert ind.dtype == np.int64 and y.shape == ind.shape == (1, 3, 3, 3)
    assert isinstance(cl.adaptive_max_pool2d(X, 2, return_indices=np.int64(1)), tuple)


@pytest.mark.parametrize("case", sorted(CASES))
def test_bad_argument_is_a_bad_param_error(case: str) -> None:
    fn, match = CASES[case]
    with pytest.raises(cl.BadParamError, match=match):
        fn()


def test_a_window_past_any_sequence_is_no_bound() -> None:
    q = np.random.default_rng(0).standard_normal((1, 1, 5, 8)).astype(np.float32)
    far = cl.scaled_dot_product_attention(q, q, q, window=(2**63, 0))
    np.testing.assert_array_equal(far, cl.scaled_dot_product_attention(q, q, q, window=(-1, 0)))


def test_the_name_checks_keep_good_calls() -> None:
    assert cl.conv2d_plan(X.shape, W.shape, backend="cpu")(X, W).shape == (1, 4, 4, 4)
    assert cl.rnn_plan((3, 2, 4), 5, backend="cpu").problem.t == 3
    assert cl.rnn_plan((np.int64(3), 2, 4), 5).problem.i == 4
    with cl.settings(workspace_limit=None):  # (a block: the process's limit is kept)
        pass


def test_masked_arrays_are_refused_not_unmasked() -> None:
    masked = np.ma.array(X, mask=X < 0)
    lp = np.log(np.full((5, 1, 3), 1 / 3, np.float32))
    calls = {
        "x": lambda: cl.relu(masked),
        "w": lambda: cl.conv2d(X, np.ma.array(W)),
        "input_lengths": lambda: cl.ctc_loss(lp, np.array([[1, 2]]), np.ma.array([5]), [2]),
    }
    for name, call in calls.items():
        with pytest.raises(cl.BadParamError, match=rf"^{name}: a masked array.*a\.filled"):
            call()
    assert (masked.mask == (X < 0)).all()  # (untouched)
    np.testing.assert_array_equal(cl.relu(masked.filled(0)), np.maximum(X, 0))
