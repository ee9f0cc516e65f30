"""Launch templates (cudnnlite/runtime/templates.py) of every op family: a replayed call
gives the op's own result bit for bit on new arrays (convolutions and their backward,
activations, softmax, pooling, norms, tensor ops, grid_sample, attention, dropout)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from templates_support import (
    Replays,
    fresh_templates,  # noqa: F401 (autouse: a clean store)
    rand,
    replays_like_the_op,
    same_bits,
)

import cudnnlite as cl
from cudnnlite.runtime import templates
from cudnnlite.testing import to_backend, to_numpy

# ------------------------------------------------------------------ bit-identical replays


def test_convolutions_replay_bit_identical(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    replays = Replays(monkeypatch)
    xs = [to_backend(rand((2, 4, 7, 9), s), backend) for s in (1, 2, 3)]
    w, b = to_backend(rand((4, 4, 3, 3), 4), backend), to_backend(rand((4,), 5), backend)
    z = to_backend(rand((2, 4, 7, 9), 6), backend)
    replays_like_the_op(replays, lambda x: cl.conv2d(x, w, b, padding=1, activation="relu"), xs)
    replays_like_the_op(replays, lambda x: cl.conv2d(x, w, None, 1, 1, z=z, alpha2=0.5), xs)
    # the weights change too: every array of the call is patched, not just the first
    ws = [to_backend(rand((4, 4, 3, 3), s), backend) for s in (13, 14)]
    replays_like_the_op(replays, lambda v: cl.conv2d(xs[0], v, padding=1), ws)
    x1 = [to_backend(rand((2, 3, 11), s), backend) for s in (7, 8)]
    w1 = to_backend(rand((4, 3, 3), 9), backend)
    replays_like_the_op(replays, lambda x: cl.conv1d(x, w1, padding=2, dilation=2), x1)
    x3 = [to_backend(rand((1, 2, 4, 5, 6), s), backend) for s in (10, 11)]
    w3 = to_backend(rand((3, 2, 3, 3, 3), 12), backend)
    replays_like_the_op(replays, lambda x: cl.conv3d(x, w3, padding=1), x3)
    plan = cl.conv2d_plan(xs[0].shape, w.shape, padding=1, backend=backend)
    replays_like_the_op(replays, lambda x: plan(x, w, b, activation="relu"), xs)


def test_activations_softmax_pools_and_norm_replay_bit_identical(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    replays = Replays(monkeypatch)
    xs = [to_backend(rand((2, 3, 8, 8), s), backend) for s in (1, 2, 3)]
    calls: list[Callable[[Any], Any]] = [
        cl.relu,
        lambda x: cl.leaky_relu(x, 0.25),
        cl.sigmoid,
        lambda x: cl.activation_forward(x, "relu", alpha=-0.0),
        lambda x: cl.softmax(x, 1),
        lambda x: cl.log_softmax(x, 1),
        lambda x: cl.max_pool2d(x, 2),
        lambda x: cl.avg_pool2d(x, 3, 1, 1),
        cl.activation_plan(xs[0].shape, "leaky_relu", coef=0.2, backend=backend),
        cl.softmax_plan(xs[0].shape, 1, log=True, backend=backend),
        cl.pooling_plan(xs[0].shape, "max", 2, backend=backend),
    ]
    for i, call in enumerate(calls):
        replays_like_the_op(replays, call, xs, call=i)
    rm, w, b = (to_backend(rand((3,), s), backend) for s in (8, 9, 10))
    rv = to_backend(np.abs(rand((3,), 11)) + 0.5, backend)
    replays_like_the_op(
        replays, lambda x: cl.batch_norm_forward_inference(x, rm, rv, w, b, activation="relu"), xs
    )


def test_row_norms_and_tensor_ops_replay_bit_identical(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    replays = Replays(monkeypatch)
    xs = [to_backend(rand((4, 6, 10), s), backend) for s in (1, 2, 3)]
    w, b = to_backend(rand((10,), 4), backend), to_backend(rand((10,), 5), backend)
    x4 = [to_backend(rand((2, 6, 5, 5), s), backend) for s in (6, 7)]
    bias = to_backend(rand((1, 6, 1, 1), 8), backend)
    for op, inputs in [
        (lambda x: cl.layer_norm(x, (10,), w, b), xs),
        (lambda x: cl.layer_norm_forward(x, 10), xs),  # (y, mean, rstd)
        (lambda x: cl.rms_norm(x, (10,), w), xs),
        (lambda x: cl.group_norm(x, 3), x4),
        (lambda x: cl.group_norm_forward(x, 5, layout="NHWC"), x4),  # (N, H, W, C=5)
        (lambda x: cl.op_tensor("mul", x, bias), x4),
        (lambda x: cl.maximum(x, bias), x4),
        (lambda x: cl.transform_tensor(x, dtype=np.float16), xs),
        (cl.nchw_to_nhwc, x4),
        (lambda x: cl.reduce_tensor(x, "max", axes=(1,), return_indices=True), x4),
        (lambda x: cl.reduce_tensor(x, "sum"), xs),
    ]:
        replays_like_the_op(replays, op, inputs)


def test_activation_and_softmax_backward_replay_bit_identical(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    replays = Replays(monkeypatch)
    x, y = to_backend(rand((2, 3, 8, 8), 1), backend), to_backend(rand((2, 3, 8, 8), 2), backend)
    dys = [to_backend(rand((2, 3, 8, 8), s), backend) for s in (3, 4, 5)]
    for op in (
        lambda dy: cl.activation_backward(dy, x, "relu"),
        lambda dy: cl.activation_backward(dy, x, "gelu", alpha=0.5),
        lambda dy: cl.activation_backward(dy, x, "sigmoid", y=y),
        lambda dy: cl.softmax_backward(dy, y, 1),
        lambda dy: cl.log_softmax_backward(dy, y, -1),
    ):
        replays_like_the_op(replays, op, dys)


def test_grid_sample_replays_bit_identical(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    replays = Replays(monkeypatch)
    x = to_backend(rand((2, 3, 6, 7), 1), backend)
    grids = [to_backend(np.random.default_rng(s).uniform(-1.2, 1.2, (2, 4, 5, 2))
                        .astype(np.float32), backend) for s in (2, 3, 4)]  # fmt: skip
    for mode, padding in (("bilinear", "zeros"), ("nearest", "border"), ("bicubic", "reflection")):
        replays_like_the_op(
            replays, lambda g, m=mode, p=padding: cl.grid_sample(x, g, m, p, True), grids
        )
    # the backward without dx (x is data: the grid's gradient alone) is launches only
    dy = to_backend(rand((2, 3, 4, 5), 5), backend)
    replays_like_the_op(
        replays, lambda g: cl.grid_sample_backward(dy, x, g, input_requires_grad=False), grids
    )
    replays_like_the_op(  # dx by atomics into a zeroed buffer: launches only
        replays, lambda g: cl.grid_sample_backward(dy, x, g, deterministic=False), grids
    )
    thetas = [to_backend(rand((2, 2, 3), s), backend) for s in (6, 7, 8)]
    replays_like_the_op(replays, lambda t: cl.affine_grid(t, (2, 3, 4, 5), True), thetas)
    replays_like_the_op(replays, lambda g: cl.affine_grid_backward(g, (2, 3, 4, 5)), grids)
    cl.grid_sample_backward(dy, x, grids[0])  # dx by a host sort: not templated
    assert "sorted by NumPy/CuPy" in cl.fast_path(cl.grid_sample_backward, dy, x, grids[0])


def test_convolution_backward_replays_bit_identical(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The backward convolutions and transposed convolutions: kernel launches only (a
    plan's workspace, split-K partials and the bias reduction's partials are temporaries the
    template keeps), so a training step's backward pass replays too."""
    replays = Replays(monkeypatch)
    x = to_backend(rand((2, 4, 7, 9), 1), backend)
    w = to_backend(rand((6, 4, 3, 3), 2), backend)
    dys = [to_backend(rand((2, 6, 4, 5), s), backend) for s in (3, 4, 5)]
    xt = [to_backend(rand((2, 6, 4, 5), s), backend) for s in (6, 7)]
    bt = to_backend(rand((4,), 8), backend)
    dy1 = [to_backend(rand((2, 5, 11), s), backend) for s in (9, 10)]
    x1, w1 = to_backend(rand((2, 3, 11), 11), backend), to_backend(rand((5, 3, 3), 12), backend)
    dy3 = [to_backend(rand((1, 3, 4, 5, 6), s), backend) for s in (13, 14)]
    x3 = to_backend(rand((1, 2, 4, 5, 6), 15), backend)
    w3 = to_backend(rand((3, 2, 3, 3, 3), 16), backend)
    for op, inputs in [
        (lambda dy: cl.conv2d_backward_data(dy, w, x.shape, 2, 1), dys),
        (lambda dy: cl.conv2d_backward_filter(x, dy, w.shape, 2, 1), dys),
        (cl.conv2d_backward_bias, dys),
        # the same problem, transposed: output_padding gives the forward's full size
        (lambda v: cl.conv_transpose2d(v, w, bt, 2, 1, output_padding=(0, 0)), xt),
        (lambda v: cl.conv_transpose2d(v, w, bt, 2, 1, output_padding=(1, 1)), xt),
        (lambda dy: cl.conv1d_backward_data(dy, w1, x1.shape, padding=1), dy1),
        (lambda dy: cl.conv1d_backward_filter(x1, dy, w1.shape, padding=1), dy1),
        (lambda dy: cl.conv3d_backward_data(dy, w3, x3.shape, padding=1), dy3),
        (lambda dy: cl.conv3d_backward_filter(x3, dy, w3.shape, padding=1), dy3),
        (cl.conv3d_backward_bias, dy3),
    ]:
        replays_like_the_op(replays, op, inputs)


def test_pooling_backward_and_adaptive_pooling_replay_bit_identical(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Pooling backward sets up its dx and its bad-index flag with a kernel (no host zero
    fill), so it replays; so do the adaptive and cuDNN-style pooling calls."""
    replays = Replays(monkeypatch)
    xs = [to_backend(rand((2, 3, 8, 8), s), backend) for s in (1, 2, 3)]
    x = xs[0]
    _, ind = cl.max_pool2d(x, 3, 2, 1, return_indices=True)
    _, aind = cl.adaptive_max_pool(x, (3, 5), True)
    dys = [to_backend(rand((2, 3, 4, 4), s), backend) for s in (4, 5, 6)]
    ady = [to_backend(rand((2, 3, 3, 5), s), backend) for s in (7, 8)]
    for op, inputs in [
        (lambda dy: cl.max_pool_backward(dy, ind, x.shape, 3, 2, 1), dys),  # scatter
        (lambda dy: cl.max_pool_backward(dy, ind, x.shape, 3, 2, 1, deterministic=True), dys),
        (lambda dy: cl.avg_pool_backward(dy, x.shape, 3, 2, 1, count_include_pad=False), dys),
        (lambda dy: cl.adaptive_avg_pool_backward(dy, x.shape), ady),
        (lambda dy: cl.adaptive_max_pool_backward(dy, aind, x.shape), ady),
        (lambda dy: cl.pooling_backward(dy, x, "max", 3, 2, 1), dys),
        (lambda v: cl.adaptive_avg_pool(v, (3, 5)), xs),
        (lambda v: cl.adaptive_max_pool(v, 3, True), xs),
        (cl.global_avg_pool, xs),
        (lambda v: cl.pooling_forward(v, "avg_exclude_pad", 3, 2, 1), xs),
    ]:
        replays_like_the_op(replays, op, inputs)


def test_norm_training_and_backward_replay_bit_identical(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Batch norm training (which updates the running statistics it is given: a replay
    updates the new call's, as the op would), every norm backward, instance norm and LRN
    replay; results of None (batch norm's dz without z) come back as None."""
    replays = Replays(monkeypatch)
    xs = [to_backend(rand((3, 4, 5, 6), s), backend) for s in (1, 2, 3)]
    x, dys = xs[0], [to_backend(rand((3, 4, 5, 6), s), backend) for s in (4, 5, 6)]
    w, b = to_backend(rand((4,), 7), backend), to_backend(rand((4,), 8), backend)
    _, mean, invstd = cl.batch_norm_forward_training(x, w, b)
    _, lmean, lrstd = cl.layer_norm_forward(x, (6,))
    _, rrstd = cl.rms_norm_forward(x, (5, 6))
    _, gmean, grstd = cl.group_norm_forward(x, 2)
    for op, inputs in [
        (lambda v: cl.batch_norm_forward_training(v, w, b, activation="relu"), xs),
        (lambda v: cl.batch_norm(v, None, None, w, b, training=True), xs),
        (lambda dy: cl.batch_norm_backward(dy, x, mean, invstd, w), dys),
        (lambda dy: cl.layer_norm_backward(dy, x, (6,), lmean, lrstd), dys),
        (lambda dy: cl.rms_norm_backward(dy, x, (5, 6), rrstd), dys),
        (lambda dy: cl.group_norm_backward(dy, x, 2, gmean, grstd, w, b), dys),
        (lambda v: cl.instance_norm_forward(v, w, b), xs),
        (lambda v: cl.lrn(v, 3), xs),
        (lambda dy: cl.lrn_backward(dy, x, 3), dys),
    ]:
        replays_like_the_op(replays, op, inputs)
    # the running statistics: a replayed call's updates are the op's own
    stats = [(to_backend(rand((4,), s), backend), to_backend(np.abs(rand((4,), s + 1)), backend))
             for s in (20, 30, 40)]  # fmt: skip
    want = [(to_numpy(rm).copy(), to_numpy(rv).copy()) for rm, rv in stats]
    count = replays.count
    for v, (rm, rv), (wm, wv) in zip(xs, stats, want, strict=True):
        cl.batch_norm_forward_training(v, w, b, rm, rv, momentum=0.25)
        with templates.disabled():
            wm, wv = to_backend(wm, backend), to_backend(wv, backend)
            cl.batch_norm_forward_training(v, w, b, wm, wv, momentum=0.25)
        same_bits(rm, wm)
        same_bits(rv, wv)
    assert replays.count == count + 2


def test_attention_forward_and_backward_replay_bit_identical(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Scaled dot-product attention (a decoding loop's repeated call) and its backward:
    grouped-query, causal, boolean and additive masks, dropout with a seed, the lse."""
    replays = Replays(monkeypatch)
    qs = [to_backend(rand((2, 4, 5, 8), s), backend) for s in (1, 2, 3)]
    k, v = to_backend(rand((2, 2, 7, 8), 4), backend), to_backend(rand((2, 2, 7, 6), 5), backend)
    keep = to_backend(np.random.default_rng(6).random((5, 7)) > 0.3, backend)
    add = to_backend(rand((2, 1, 5, 7), 7), backend)
    sdpa = functools.partial(cl.scaled_dot_product_attention, enable_gqa=True)
    for op in (
        lambda q: sdpa(q, k, v),
        lambda q: sdpa(q, k, v, is_causal=True, return_lse=True),
        lambda q: sdpa(q, k, v, keep),
        lambda q: sdpa(q, k, v, add),
        lambda q: sdpa(q, k, v, dropout_p=0.25, seed=3),
    ):
        replays_like_the_op(replays, op, qs)
    out, lse = sdpa(qs[0], k, v, add, return_lse=True)
    douts = [to_backend(rand((2, 4, 5, 6), s), backend) for s in (8, 9, 10)]
    replays_like_the_op(
        replays,
        lambda d: cl.scaled_dot_product_attention_backward(d, qs[0], k, v, out, lse, add,
                                                           enable_gqa=True),
        douts,
    )  # fmt: skip


def test_dropout_replays_bit_identical(backend: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The mask is a function of (seed, offset), both in the key: a replay draws the op's
    own mask; another offset is another key."""
    replays = Replays(monkeypatch)
    xs = [to_backend(rand((3, 5, 7), s), backend) for s in (1, 2, 3)]
    _, mask = cl.dropout(xs[0], 0.3, seed=11, return_mask=True)
    for op in (
        lambda x: cl.dropout(x, 0.3, seed=11),
        lambda x: cl.dropout(x, 0.3, seed=11, offset=2, return_mask=True),
        lambda dy: cl.dropout_backward(dy, 0.3, seed=11),
        lambda dy: cl.dropout_backward(dy, 0.3, mask=mask),
    ):
        replays_like_the_op(replays, op, xs)
    a, b = cl.dropout(xs[1], 0.5, seed=1, offset=0), cl.dropout(xs[1], 0.5, seed=1, offset=1)
    assert not np.array_equal(to_numpy(a), to_numpy(b))
