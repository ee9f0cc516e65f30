"""Launch templates (cudnnlite/runtime/templates.py): a replayed call gives the op's own
result bit for bit on new arrays, anything the op's own path reads is part of the key,
calls a replay could not reproduce are refused (and say why), and replays are safe
between threads (bad arguments on a templated key: tests/test_fastpath.py). The CUDA
replay's argument patching is checked with stand-in device arrays, so it runs without a
GPU. Uses modules other tests compile already (fp32 relu, sigmoid, softmax, pooling,
batch norm, the 3x3 and 1-D/3-D convolution solvers)."""

from __future__ import annotations

import functools
import types
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from fake_device import FakeDeviceArray

import cudnnlite as cl
from cudnnlite.dispatch import plans, tuning_db
from cudnnlite.errors import BadParamError, ExecutionError
from cudnnlite.ops import _fastpath
from cudnnlite.ops import activation as act_mod
from cudnnlite.runtime import graph, templates
from cudnnlite.testing import to_backend, to_numpy


def rand(shape: tuple[int, ...], seed: int = 0, dtype: Any = np.float32) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)


@pytest.fixture(autouse=True)
def fresh_templates() -> Any:
    _fastpath.clear_all()
    yield
    _fastpath.clear_all()


class Replays:
    """Counts template replays (Template.replay calls that launched)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = templates.Template.replay

        def counting(tmpl: templates.Template, *args: Any) -> Any:
            result = original(tmpl, *args)
            self.count += result is not None
            return result

        monkeypatch.setattr(templates.Template, "replay", counting)


def same_bits(a: Any, b: Any) -> None:
    if isinstance(a, tuple):
        assert isinstance(b, tuple) and len(a) == len(b)
        for x, y in zip(a, b, strict=True):
            same_bits(x, y)
        return
    if a is None or b is None:  # (an optional result: both must lack it)
        assert a is None and b is None
        return
    a, b = to_numpy(a), to_numpy(b)
    assert a.dtype == b.dtype and a.shape == b.shape and a.strides == b.strides
    assert a.tobytes() == b.tobytes()


def replays_like_the_op(
    replays: Replays, op: Callable[[Any], Any], inputs: list[Any], **how: Any
) -> None:
    """``op(inputs[0])`` records; each later input is a replay whose result must be the
    op's own, bit for bit, on that input (new data, new addresses)."""
    before = replays.count
    op(inputs[0])
    for i, x in enumerate(inputs[1:], 1):
        got = op(x)
        with templates.disabled():
            want = op(x)
        same_bits(got, want)
        assert replays.count == before + i, f"call {i} was not replayed ({how})"


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


def test_atomics_make_a_template_inexact_and_the_check_compares_within_rounding() -> None:
    """Ops whose kernels add with atomics in a varying order (a solver that is not
    deterministic, max pooling's and grid_sample's atomic scatters) say so: the template
    is not exact, and CUDNNLITE_TEMPLATE_CHECK compares its replays within rounding;
    deterministic ones stay exact (bit for bit)."""
    x, dy = rand((2, 3, 8, 8), 1), rand((2, 4, 8, 8), 2)
    atomic = "conv_bwd_filter_implicit_gemm_atomic"
    for algo, exact in ((atomic, False), ("auto", True)):
        call = (x, dy, (4, 3, 3, 3))
        cl.conv2d_backward_filter(*call, padding=1, algo=algo)
        tmpl = templates.lookup(cl.conv2d_backward_filter, call, {"padding": 1, "algo": algo})
        assert isinstance(tmpl, templates.Template) and tmpl.exact is exact, algo
    _, ind = cl.max_pool2d(x, 2, return_indices=True)
    cl.max_pool_backward(dy[:, :3, :4, :4].copy(), ind, x.shape, 2)
    inexact = [t for t in templates._cache.values() if not getattr(t, "exact", True)]
    assert [len(t) for t in inexact] == [3, 2]  # (atomic filter; pooling: prepare + scatter)
    f32 = rand((3, 5), 3)
    same = templates._host_bytes(f32)
    near = templates._host_bytes(f32 * np.float32(1 + 3e-6))
    assert templates._close(same, same) and templates._close(same, near)
    assert not templates._close(same, templates._host_bytes(f32 * 2))
    assert not templates._close(same, templates._host_bytes(np.zeros_like(f32)))
    ints = templates._host_bytes(np.arange(4))
    assert not templates._close(ints, templates._host_bytes(np.arange(4) + 1))
    half = f32.astype(np.float16)
    assert templates._close(templates._host_bytes(half),
                            templates._host_bytes(half * np.float16(1.001)))  # fmt: skip


def test_a_replay_checks_the_saved_indices_as_the_op_does(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Max pooling backward checks its saved indices on the device: a templated key's
    replay reads that check's flag after its launches, and bad indices raise the op's own
    error (the op's path runs again and names the entry); good ones replay again after."""
    replays = Replays(monkeypatch)
    x = to_backend(rand((1, 2, 6, 6), 1), backend)
    _, ind = cl.max_pool2d(x, 2, return_indices=True)
    dy = to_backend(rand((1, 2, 3, 3), 2), backend)
    bad = to_numpy(ind).copy()
    bad[0, 1, 2, 0] = 0  # output (2, 0)'s window holds rows 4-5: position 0 is outside it
    bad = to_backend(bad, backend)
    for deterministic in (False, True):
        call = functools.partial(cl.max_pool_backward, dy, kernel_size=2, input_shape=x.shape,
                                 deterministic=deterministic)  # fmt: skip
        call(indices=ind)
        call(indices=ind)
        count = replays.count
        assert count >= 1
        for _ in range(2):
            with pytest.raises(BadParamError, match=r"indices: entry \(0, 1, 2, 0\) is 0, a pos"):
                call(indices=bad)
        assert replays.count == count  # the replays found the flag set; the op raised
        same_bits(call(indices=ind), call(indices=ind))
        assert replays.count == count + 2


def test_in_place_ops_replay_on_their_new_arrays(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """add_tensor, scale_tensor and set_tensor write the array they are given (and return
    it); a replay writes the new one. add_tensor copies an a that overlaps c first: a
    replay of a key recorded without overlap takes the op's own path for such a call."""
    replays = Replays(monkeypatch)
    bias = to_backend(rand((1, 3, 1, 1), 1), backend)
    ops = [lambda c: cl.add_tensor(bias, c, beta=0.5), lambda y: cl.scale_tensor(y, 2.5),
           lambda y: cl.set_tensor(y, -1.25)]  # fmt: skip
    for op in ops:
        for seed in (2, 3, 4):
            c = to_backend(rand((2, 3, 4, 4), seed), backend)
            with templates.disabled():
                want = op(to_backend(to_numpy(c), backend))
            assert op(c) is c
            same_bits(c, want)
    assert replays.count == 2 * len(ops)
    buf = to_backend(np.arange(16, dtype=np.float32), backend)
    a, c = to_backend(rand((8,), 5), backend), to_backend(rand((8,), 6), backend)
    cl.add_tensor(a, c)  # recorded without overlap
    overlapping = (buf[0:8], buf[4:12])  # (same shapes, dtypes and alignment: the same key)
    assert (
        templates.call_key(cl.add_tensor, overlapping, {})[0]
        == templates.call_key(cl.add_tensor, (a, c), {})[0]
    )
    count = replays.count
    with templates.disabled():
        want = cl.add_tensor(*(to_backend(to_numpy(v), backend) for v in overlapping))
    want_buf = np.arange(16, dtype=np.float32)
    want_buf[4:12] = to_numpy(want)
    same_bits(cl.add_tensor(*overlapping), want)
    assert replays.count == count  # not replayed: the op copied a first
    same_bits(buf, want_buf)


def test_layouts_of_inputs_and_outputs_are_reproduced(monkeypatch: pytest.MonkeyPatch) -> None:
    replays = Replays(monkeypatch)
    base = [rand((2, 5, 6, 4), s) for s in (1, 2)]
    nchw_views = [b.transpose(0, 3, 1, 2) for b in base]  # channels-last memory
    replays_like_the_op(replays, cl.relu, nchw_views)  # an output laid out as its input
    strided = [rand((4, 65), s)[:, :64] for s in (3, 4)]
    replays_like_the_op(replays, cl.relu, strided)
    # pooling and softmax copy such an input on the host first: not templated
    x = nchw_views[0]
    for op, arg in ((cl.max_pool2d, 2), (cl.softmax, 1)):
        for _ in range(3):
            same_bits(op(x, arg), op(np.ascontiguousarray(x), arg))
        entry = templates.lookup(op, (x, arg), {})
        assert type(entry) is templates.Refused and "host work" in entry.reason


def test_temporaries_are_kept_and_rewritten_by_each_replay(
    backend: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Winograd (transformed filter and input in a workspace) and the precomputed implicit
    GEMM (an offsets table a kernel fills) launch on temporaries of the call."""
    replays = Replays(monkeypatch)
    xs = [to_backend(rand((1, 32, 14, 14), s), backend) for s in (1, 2, 3)]
    w = to_backend(rand((32, 32, 3, 3), 4), backend)
    replays_like_the_op(replays, lambda x: cl.conv2d(x, w, padding=1), xs)
    entry = templates.lookup(cl.conv2d, (xs[0], w), {"padding": 1})
    assert type(entry) is templates.Template and entry.scratch and len(entry) > 1
    x7 = [to_backend(rand((1, 3, 32, 32), s), backend) for s in (5, 6)]
    w7 = to_backend(rand((16, 3, 7, 7), 7), backend)
    replays_like_the_op(replays, lambda x: cl.conv2d(x, w7, stride=2, padding=3), x7)
    with ThreadPoolExecutor(4) as pool:  # one workspace, one replay at a time
        got = list(pool.map(lambda x: cl.conv2d(x, w, padding=1), xs * 4))
    with templates.disabled():
        want = [cl.conv2d(x, w, padding=1) for x in xs]
    for i, y in enumerate(got):
        same_bits(y, want[i % 3])


def test_temporaries_over_the_limit_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(templates, "SCRATCH_LIMIT", 1024)
    x, w = rand((1, 32, 14, 14), 1), rand((32, 32, 3, 3), 4)
    for _ in range(3):
        y = cl.conv2d(x, w, padding=1)
    with templates.disabled():
        same_bits(y, cl.conv2d(x, w, padding=1))
    entry = templates.lookup(cl.conv2d, (x, w), {"padding": 1})
    assert type(entry) is templates.Refused and "temporaries" in entry.reason


def test_the_store_is_bounded_in_keys_and_in_temporaries(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(templates, "_CACHE_SIZE", 3)
    xs = [rand((2, n), n) for n in range(1, 6)]
    for x in xs:
        cl.relu(x)
    assert [templates.lookup(cl.relu, (x,), {}) is None for x in xs] == [True] * 2 + [False] * 3
    # two Winograd calls whose temporaries together pass the total: the older one leaves
    w = rand((32, 32, 3, 3), 4)
    x1, x2 = rand((1, 32, 14, 14), 1), rand((1, 32, 12, 12), 2)
    cl.conv2d(x1, w, padding=1)
    first = templates.lookup(cl.conv2d, (x1, w), {"padding": 1})
    assert first.scratch_bytes > 0
    monkeypatch.setattr(templates, "SCRATCH_TOTAL", first.scratch_bytes + 1)
    cl.conv2d(x2, w, padding=1)
    assert templates.lookup(cl.conv2d, (x1, w), {"padding": 1}) is None
    second = templates.lookup(cl.conv2d, (x2, w), {"padding": 1})
    assert type(second) is templates.Template and templates._scratch_total == second.scratch_bytes
    templates.clear()
    assert templates._scratch_total == 0


def test_a_template_does_not_keep_a_dropped_plan_alive() -> None:
    import gc
    import weakref

    x = rand((2, 3, 8, 8), 1)
    plan = cl.activation_plan(x.shape, "relu", backend="cpu")
    for _ in range(2):
        same_bits(plan(x), np.maximum(x, 0))
    assert cl.fast_path(plan, x).startswith("replayed")
    gone = weakref.ref(plan)
    del plan
    gc.collect()
    assert gone() is None


def test_fast_path_says_what_a_call_gets(monkeypatch: pytest.MonkeyPatch) -> None:
    x, w = rand((1, 32, 14, 14), 1), rand((32, 32, 3, 3), 2)
    assert cl.fast_path(cl.conv2d, x, w, padding=1).startswith("not recorded yet")
    cl.conv2d(x, w, padding=1)
    said = cl.fast_path(cl.conv2d, x, w, padding=1, stream=None)
    assert said.startswith("replayed: 4 launch(es) on cpu, 1 new output(s), ")
    assert " 0 bytes" not in said  # (Winograd's workspace)
    strided = x[:, :, ::2]
    cl.max_pool2d(strided, 2)
    assert cl.fast_path(cl.max_pool2d, strided, 2) == (
        "not templated: host work: pooling: a contiguous copy of a non-contiguous operand "
        "(its next call records again)"
    )
    said = cl.fast_path(cl.ctc_loss, np.zeros((3, 1, 2), np.float32), np.array([[1]]),
                        np.array([3]), np.array([1]))  # fmt: skip
    assert "ctc_loss is not marked graph-safe" in said
    assert "out= given" in cl.fast_path(cl.relu, x, out=np.empty_like(x))
    plan = cl.activation_plan(x.shape, "relu", backend="cpu")
    plan(x)
    assert cl.fast_path(plan, x).startswith("replayed: 1 launch(es)")
    with cl.fast_paths_off():
        assert "fast paths are off" in cl.fast_path(cl.relu, x)
    # it runs nothing: no new entry for a call never made
    assert cl.fast_path(cl.relu, x[:, :3]).startswith("not recorded yet")
    assert templates.lookup(cl.relu, (x[:, :3],), {}) is None


def test_last_kernel_name_and_a_tuple_result_survive_a_replay(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    replays = Replays(monkeypatch)
    x, y = rand((3, 5, 7), 1), rand((3, 5, 7), 2)
    cl.sigmoid(x)
    recorded = act_mod.last_kernel_name()
    cl.relu(x)
    assert act_mod.last_kernel_name() != recorded
    cl.sigmoid(y)
    assert replays.count == 1
    assert act_mod.last_kernel_name() == recorded


# ------------------------------------------------------------------ keys


def test_anything_the_op_reads_is_part_of_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    x, w = rand((1, 4, 8, 8), 1), rand((4, 4, 3, 3), 2)
    buf = rand((4, 65), 3)
    variants: list[tuple[Any, tuple, dict]] = [
        (cl.conv2d, (x, w), {"padding": 1}),
        (cl.conv2d, (x, w), {"padding": (1, 1)}),  # equal meaning, another value
        (cl.conv2d, (x, w), {"padding": np.int64(1)}),  # equal value, another type
        (cl.conv2d, (x, w), {"padding": 1, "alpha": 0.0}),
        (cl.conv2d, (x, w), {"padding": 1, "alpha": -0.0}),  # -0.0 == 0.0, not its sign
        (cl.conv2d, (x[:, :, ::-1], w), {"padding": 1}),  # strides
        (cl.conv2d, (np.asfortranarray(x), w), {"padding": 1}),
        (cl.conv2d, (x[:, :, :7], w), {"padding": 1}),  # shape
        (cl.conv2d, (x.astype(np.float64), w.astype(np.float64)), {"padding": 1}),
        (cl.relu, (buf[:, :64],), {}),
        (cl.relu, (np.ascontiguousarray(buf[:, :64]),), {}),
        (cl.relu, (buf.reshape(-1)[1:257],), {}),  # contiguous, not 16-byte aligned
        (cl.leaky_relu, (x, 0.5), {}),
        (cl.leaky_relu, (x, 0.25), {}),
    ]
    keys = [templates.call_key(op, args, kw) for op, args, kw in variants]
    assert all(k is not None for k in keys)
    assert len({k[0] for k in keys}) == len(keys)
    # an int or 0-d array may be a value read on the host (padding=np.array([1, 1])): its
    # contents are keyed; a float tensor's are not
    pads = [templates.call_key(cl.conv2d, (x, w), {"padding": np.array([p, p])}) for p in (1, 2)]
    assert pads[0][0] != pads[1][0]
    zero_d = [templates.call_key(cl.relu, (np.array(v, np.float32),), {}) for v in (1, 2)]
    assert zero_d[0][0] != zero_d[1][0]
    assert templates.call_key(cl.relu, (x,), {})[0] == templates.call_key(cl.relu, (x + 1,), {})[0]
    for p in (1, 2, 1):
        same_bits(cl.conv2d(x, w, padding=np.array([p, p])), cl.conv2d(x, w, padding=p))
    readonly = x.copy()
    readonly.flags.writeable = False
    assert (
        templates.call_key(cl.relu, (readonly,), {})[0]
        != templates.call_key(cl.relu, (x.copy(),), {})[0]
    )
    # another address with the same alignment is the same key: that is what is replayed
    assert (
        templates.call_key(cl.relu, (x.copy(),), {})[0]
        == templates.call_key(cl.relu, (x + 1,), {})[0]
    )
    # the dispatch settings and every switch the op's own path reads
    base = templates.call_key(cl.relu, (x,), {})[0]
    with cl.settings(deterministic=True):
        assert templates.call_key(cl.relu, (x,), {})[0] != base
    for name in ("CUDNNLITE_FORCE_SOLVER", "CUDNNLITE_EMU_POISON", "CUDNNLITE_EMU_SCHEDULE"):
        with monkeypatch.context() as env:
            env.setenv(name, "another value")
            assert templates.call_key(cl.relu, (x,), {})[0] != base, name
    assert templates.call_key(cl.relu, (x,), {})[0] == base


def test_out_and_unkeyable_arguments_are_never_templated() -> None:
    x = rand((2, 3), 1)
    assert templates.call_key(cl.relu, (x,), {"out": np.empty_like(x)}) is None
    assert templates.call_key(cl.leaky_relu, (x, Fraction(1, 4)), {}) is None
    assert templates.call_key(cl.relu, (x,), {"out": None}) is not None
    out = np.empty_like(x)
    for _ in range(2):
        assert cl.relu(x, out=out) is out
    same_bits(out, np.maximum(x, 0))
    assert templates.lookup(cl.relu, (x,), {"out": out}) is None


# ------------------------------------------------------------------ refusals


def test_calls_a_replay_cannot_reproduce_are_refused() -> None:
    x = rand((2, 3, 8, 8), 1)
    w = rand((3, 3, 3, 3), 2)
    cl.relu(np.empty((0, 4), np.float32))
    entry = templates.lookup(cl.relu, (np.empty((0, 4), np.float32),), {})
    assert type(entry) is templates.Refused and "no kernel" in entry.reason
    # the weights are a view into the input's memory: the recording cannot tell which
    # array a pointer belongs to
    both = np.concatenate([x.reshape(-1), w.reshape(-1)])
    overlapping = (both[: x.size].reshape(x.shape), both[4 : 4 + w.size].reshape(w.shape))
    for _ in range(3):
        y = cl.conv2d(*overlapping, padding=1)
        with templates.disabled():
            same_bits(y, cl.conv2d(*overlapping, padding=1))
    entry = templates.lookup(cl.conv2d, overlapping, {"padding": 1})
    assert type(entry) is templates.Refused and "overlap" in entry.reason and entry.final


def test_an_output_that_is_part_of_a_larger_buffer_is_refused() -> None:
    """A replay allocates only the returned array's layout; an op that wrote a larger
    buffer and returned part of it must keep running its own code."""

    def sliced(x: np.ndarray) -> np.ndarray:
        buf = np.empty(x.size + 16, x.dtype)
        return cl.relu(x.reshape(-1), out=buf[: x.size])

    x = rand((3, 4), 1)
    for _ in range(3):
        same_bits(templates.call(sliced, sliced, (x,), {}), np.maximum(x, 0).reshape(-1))
    entry = templates.lookup(sliced, (x,), {})
    assert type(entry) is templates.Refused and "larger allocation" in entry.reason


class Counted:
    """An op for templates.call: relu, with host work on the calls ``busy`` names."""

    def __init__(self, busy: Callable[[int], bool]) -> None:
        self.calls = 0
        self.busy = busy

    def __call__(self, x: np.ndarray) -> Any:
        self.calls += 1
        if self.busy(self.calls):
            graph.note_host_work("a warm-up")
        return cl.relu(x)


def test_the_check_catches_a_template_that_skips_unreported_host_work(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An op breaking graph_safe's contract (NumPy work on the data, not reported) records
    a template that replays stale data; CUDNNLITE_TEMPLATE_CHECK=1 (the test suite's
    setting) compares every replay with the op's own call and says so."""

    def doubled_relu(x: np.ndarray) -> np.ndarray:
        return cl.relu(x * 2)  # x * 2: host work on the data, unreported

    x1, x2 = rand((3, 4), 1), rand((3, 4), 2)
    monkeypatch.setenv("CUDNNLITE_TEMPLATE_CHECK", "0")
    templates.call(doubled_relu, doubled_relu, (x1,), {})
    stale = templates.call(doubled_relu, doubled_relu, (x2,), {})
    same_bits(stale, np.maximum(x1 * 2, 0))  # what an unchecked replay gives: x1's result
    monkeypatch.setenv("CUDNNLITE_TEMPLATE_CHECK", "1")
    templates.call(doubled_relu, doubled_relu, (x1,), {})  # (a new key: the switch changed)
    with pytest.raises(ExecutionError, match="launch template of .*doubled_relu: its replay"):
        templates.call(doubled_relu, doubled_relu, (x2,), {})


def test_a_call_that_tunes_is_not_templated_its_next_call_is(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """In benchmark mode a key's first call times every solver: none of those launches
    may end up in a template (its replays would run them all)."""
    monkeypatch.setenv("CUDNNLITE_TUNING_DIR", str(tmp_path))  # an empty user DB
    tuning_db.forget_databases()
    plans.clear_plan_cache()
    monkeypatch.setattr(tuning_db, "shipped_path", lambda arch: None)
    replays = Replays(monkeypatch)
    xs = [rand((1, 6, 9, 9), s) for s in (1, 2, 3)]
    w = rand((6, 6, 3, 3), 4)
    try:
        with cl.settings(mode="benchmark"):
            cl.conv2d(xs[0], w, padding=1)
            entry = templates.lookup(cl.conv2d, (xs[0], w), {"padding": 1})
            assert type(entry) is templates.Refused and "tuning" in entry.reason
            replays_like_the_op(replays, lambda x: cl.conv2d(x, w, padding=1), xs[1:])
            assert len(templates.lookup(cl.conv2d, (xs[0], w), {"padding": 1})) == 1
    finally:  # later tests read the DBs their own settings name
        tuning_db.forget_databases()
        plans.clear_plan_cache()


def test_a_first_refusal_is_recorded_again_a_second_is_kept(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("CUDNNLITE_TEMPLATE_CHECK", "0")  # (its checks would call ops again)
    xs = [rand((3, 4), s) for s in range(4)]
    once = Counted(lambda n: n == 1)  # e.g. a tuning run with temporaries on the first call
    for x in xs:
        same_bits(templates.call(once, once, (x,), {}), np.maximum(x, 0))
    assert once.calls == 2  # recorded, recorded again, then replayed
    assert type(templates.lookup(once, (xs[0],), {})) is templates.Template

    always = Counted(lambda n: True)
    for x in xs:
        same_bits(templates.call(always, always, (x,), {}), np.maximum(x, 0))
    assert always.calls == len(xs)
    entry = templates.lookup(always, (xs[0],), {})
    assert type(entry) is templates.Refused and entry.final and "warm-up" in entry.reason


def test_switches_turn_templates_off(monkeypatch: pytest.MonkeyPatch) -> None:
    replays = Replays(monkeypatch)
    x = rand((3, 4), 1)
    with templates.disabled():
        cl.relu(x), cl.relu(x)
    assert templates.lookup(cl.relu, (x,), {}) is None
    templates.set_enabled(False)
    try:
        cl.relu(x), cl.relu(x)
        assert templates.lookup(cl.relu, (x,), {}) is None
    finally:
        templates.set_enabled(True)
    cl.relu(x), cl.relu(x)
    assert replays.count == 1
    # the public switches: both fast paths (templates and the ops' caches)
    cl.set_fast_paths(False)
    try:
        assert not templates.enabled() and not _fastpath.enabled()
        assert templates.lookup(cl.relu, (x,), {}) is None  # (and the store was cleared)
    finally:
        cl.set_fast_paths(True)
    with cl.fast_paths_off():
        assert not templates.enabled() and not _fastpath.enabled()
    assert templates.enabled() and _fastpath.enabled()


def test_poisoned_replays_still_give_the_ops_result(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDNNLITE_EMU_POISON", "1")
    replays = Replays(monkeypatch)
    x = rand((2, 3, 8, 8), 1)
    cl.max_pool2d(x, 2)
    entry = templates.lookup(cl.max_pool2d, (x, 2), {})
    assert type(entry) is templates.Template and entry.poison
    replays_like_the_op(replays, lambda a: cl.avg_pool2d(a, 3, 1, 1), [x, rand(x.shape, 2)])
    # 0-d outputs too (a 0-d array's value is keyed: the same value, in new arrays)
    scalars = [np.array(v, np.float32) for v in (np.nan, np.nan, np.nan)]
    replays_like_the_op(replays, cl.softmax, scalars)


# ------------------------------------------------------------------ threads (bad arguments
# after a replay: tests/test_fastpath.py, with templates on and off)


def test_eight_threads_replay_one_template() -> None:
    w = rand((4, 4, 3, 3), 2)
    inputs = [rand((1, 4, 6, 6), s) for s in range(8)]
    with templates.disabled():
        want = [(cl.conv2d(x, w, padding=1), cl.relu(x)) for x in inputs]

    def work(i: int) -> None:
        for _ in range(12):
            same_bits(cl.conv2d(inputs[i], w, padding=1), want[i][0])
            same_bits(cl.relu(inputs[i]), want[i][1])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert type(templates.lookup(cl.relu, (inputs[0],), {})) is templates.Template


# ------------------------------------------------------------------ a plan's memo


class KeyCount:
    """Counts the call keys templates.call builds (a plan's memo builds none)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.count = 0
        original = templates.call_key

        def counting(*args: Any) -> Any:
            self.count += 1
            return original(*args)

        monkeypatch.setattr(templates, "call_key", counting)


def memo_plans(backend: str) -> list[tuple[Any, Callable[[int], tuple]]]:
    """Plans of three families, each with a maker of its arguments (new data per seed)."""
    b = functools.partial(to_backend, backend=backend)
    shape, w = (2, 4, 6, 6), b(rand((4, 4, 3, 3), 9))
    stats = [b(rand((4,), s)) for s in range(4)]
    stats[1] = stats[1] * stats[1] + 0.5  # (a variance)
    name = "cuda" if backend == "cuda" else "cpu"
    return [
        (cl.conv2d_plan(shape, w.shape, padding=1, backend=name),
         lambda s: (b(rand(shape, s)), w)),
        (cl.activation_plan(shape, "sigmoid", backend=name), lambda s: (b(rand(shape, s)),)),
        (cl.batch_norm_inference_plan(shape, backend=name),
         lambda s: (b(rand(shape, s)), *stats)),
    ]  # fmt: skip


@pytest.mark.parametrize("check", [False, True], ids=["unchecked", "checked"])
def test_a_plans_repeats_replay_through_its_memo(
    backend: str, check: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """From a plan's third call on (a record, then a replay that leaves the memo), no call
    key is built, and every result is the op's own bit for bit on new data; with
    CUDNNLITE_TEMPLATE_CHECK on (the test suite's default) the memo's replays are checked
    against the op too. Unchecked, also without the emulator's poison (the suite's
    default too), as a user runs: the memo's replays of host templates are then
    Template.replay_plain's."""
    if not check:
        monkeypatch.delenv("CUDNNLITE_TEMPLATE_CHECK", raising=False)
        monkeypatch.delenv("CUDNNLITE_EMU_POISON", raising=False)
    keys = KeyCount(monkeypatch)
    for plan, make in memo_plans(backend):
        before = keys.count
        for seed in range(5):
            args = make(seed)
            got = plan(*args)
            with templates.disabled():
                same_bits(got, plan(*args))
        assert keys.count == before + 2, plan
        assert plan._template_memo is not None
    if not check and backend == "cpu":
        plain = [t for t in templates._cache.values()
                 if isinstance(t, templates.Template) and t.replay_plain != t.replay]
        assert plain, "no memo replayed through replay_plain"


def test_a_plans_memo_gives_way_to_whatever_changed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Another layout, alignment, writability, dtype or shape, a switch, a setting, a
    cleared store, a disabled() block: each call takes the usual path (a key is built)
    and gives the op's result or its error, inputs untouched."""
    keys = KeyCount(monkeypatch)
    shape = (2, 3, 5, 5)
    plan = cl.activation_plan(shape, "relu", backend="cpu")
    x = rand(shape, 1)
    plan(x), plan(x)
    before = keys.count
    plan(x)
    assert keys.count == before

    def usual(arg: np.ndarray) -> None:
        n = keys.count
        same_bits(plan(arg), np.maximum(arg, 0))
        assert keys.count > n, "the memo answered a call it cannot vouch for"

    usual(rand((2, 3, 5, 10), 2)[..., ::2])  # strided
    flat = rand((x.size + 1,), 3)
    usual(flat[1:].reshape(shape))  # off 16 bytes
    read_only = rand(shape, 4)
    read_only.setflags(write=False)
    usual(read_only)
    for bad in (x.astype(np.float64), rand((2, 3, 5, 4), 5)):
        kept = bad.copy()
        with pytest.raises(BadParamError, match="x: this activation plan is for"):
            plan(bad)
        same_bits(bad, kept)
    monkeypatch.setenv("CUDNNLITE_EMU_SEED", "3")
    usual(x)
    monkeypatch.delenv("CUDNNLITE_EMU_SEED")
    plan(x)  # (the memo of the key without the switch again)
    cl.set_deterministic(True)
    try:
        usual(x)
    finally:
        cl.set_deterministic(False)
    plan(x)
    templates.clear()
    usual(x)
    plan(x)
    replays = Replays(monkeypatch)
    with templates.disabled():  # (no template at all: not even a key)
        same_bits(plan(x), np.maximum(x, 0))
    assert replays.count == 0


def test_a_plans_memo_checks_every_operand(monkeypatch: pytest.MonkeyPatch) -> None:
    """A plan of several arrays: a change in a later one (batch norm's statistics and
    parameters: layout, alignment, writability, dtype; a conv plan's w: layout) misses
    the memo as a change in x does, and the call gives the op's own result or error."""
    keys = KeyCount(monkeypatch)
    shape, c = (2, 4, 5, 5), 4
    plan = cl.batch_norm_inference_plan(shape, backend="cpu")
    x = rand(shape, 1)
    stats = [rand((c,), s) for s in range(4)]
    stats[1] = stats[1] * stats[1] + 0.5  # (a variance)
    plan(x, *stats), plan(x, *stats)
    before = keys.count
    expected = plan(x, *stats)
    assert keys.count == before

    def usual(i: int, arg: np.ndarray) -> None:
        n = keys.count
        changed = [*stats[:i], arg, *stats[i + 1 :]]
        same_bits(plan(x, *changed), expected)
        assert keys.count > n, f"the memo answered for a changed operand {i + 1}"

    for i in range(4):
        usual(i, np.repeat(stats[i], 2)[::2])  # strided
        flat = np.empty(c + 1, np.float32)
        flat[1:] = stats[i]
        usual(i, flat[1:])  # off 16 bytes
        read_only = stats[i].copy()
        read_only.setflags(write=False)
        usual(i, read_only)
    n = keys.count
    with pytest.raises(BadParamError, match="bias"):
        plan(x, *stats[:3], stats[3].astype(np.float64))
    assert keys.count > n
    w = rand((4, 4, 3, 3), 9)
    conv = cl.conv2d_plan(shape, w.shape, padding=1, backend="cpu")
    conv(x, w), conv(x, w)
    n = keys.count
    w_t = np.ascontiguousarray(w.transpose(1, 0, 2, 3)).transpose(1, 0, 2, 3)
    same_bits(conv(x, w_t), conv(x, w))
    assert keys.count > n, "the memo answered for another layout of w"


def test_a_plan_keeps_two_memos(monkeypatch: pytest.MonkeyPatch) -> None:
    """Calls alternating between two alignments replay through the plan's two memos (no
    key after the first calls of each); a third alignment replaces the older one."""
    keys = KeyCount(monkeypatch)
    shape = (2, 3, 4, 4)
    plan = cl.activation_plan(shape, "relu", backend="cpu")
    flat = rand((np.prod(shape) + 2,), 1)
    views = [rand(shape, 2), flat[1:-1].reshape(shape), flat[2:].reshape(shape)]
    for v in views[:2]:
        plan(v), plan(v)
    before = keys.count
    for _ in range(3):
        for v in views[:2]:
            same_bits(plan(v), np.maximum(v, 0))
    assert keys.count == before
    plan(views[2]), plan(views[2])  # (a record, then a replay that leaves its memo)
    before = keys.count
    same_bits(plan(views[2]), np.maximum(views[2], 0))
    same_bits(plan(views[1]), np.maximum(views[1], 0))  # (the older of the two kept)
    assert keys.count == before
    same_bits(plan(views[0]), np.maximum(views[0], 0))  # (dropped: the usual path)
    assert keys.count == before + 1


def test_a_plans_memo_does_not_skip_a_graph_capture() -> None:
    shape = (2, 3, 4, 4)
    plan = cl.activation_plan(shape, "relu", backend="cpu")
    x = rand(shape, 1)
    plan(x), plan(x), plan(x)
    assert plan._template_memo is not None
    with cl.graph("cpu") as g:
        y = plan(x)
    assert len(g) == 1
    x[...] = rand(shape, 2)
    g.replay()
    same_bits(y, np.maximum(x, 0))


def test_eight_threads_share_a_plans_memo() -> None:
    shape = (1, 4, 6, 6)
    plans = [cl.activation_plan(shape, "relu", backend="cpu"),
             cl.conv2d_plan(shape, (4, 4, 3, 3), padding=1, backend="cpu")]  # fmt: skip
    w = rand((4, 4, 3, 3), 9)
    inputs = [rand(shape, s) for s in range(8)]
    with templates.disabled():
        want = [(plans[0](x), plans[1](x, w)) for x in inputs]

    def work(i: int) -> None:
        for _ in range(12):
            same_bits(plans[0](inputs[i]), want[i][0])
            same_bits(plans[1](inputs[i], w), want[i][1])

    with ThreadPoolExecutor(8) as pool:
        list(pool.map(work, range(8)))
    assert all(p._template_memo is not None for p in plans)


# ------------------------------------------------------------------ the CUDA replay


class FakeKernel:
    """Stands in for a CudaKernel: what a replay calls, with the arguments it got."""

    def __init__(self) -> None:
        self.calls: list[tuple] = []

    def launch_prepared(self, g: Any, b: Any, args: tuple, shared_mem: int, coop: bool) -> None:
        self.calls.append((g, b, args, shared_mem, coop))


def cuda_recording(x: Any, w: Any, y: Any, kernel: FakeKernel, **launch: Any) -> Any:
    rec = templates.Recording()
    view = FakeDeviceArray((4,), np.float32, ptr=w.data.ptr + 64)  # w[16:20], say
    args = (x, view, y, np.int32(7), None)
    rec.record_cuda(kernel, args, grid=3, block=128,
                    shared_mem=256, cooperative=False, **launch)  # fmt: skip
    return rec


def test_cuda_replays_patch_arrays_and_offset_pointers(monkeypatch: pytest.MonkeyPatch) -> None:
    fake_cupy = types.SimpleNamespace(empty=lambda shape, dtype: FakeDeviceArray(shape, dtype))
    monkeypatch.setattr(templates, "_cupy_of", lambda t: fake_cupy)
    x, w = FakeDeviceArray((2, 8), np.float32), FakeDeviceArray((64,), np.float32)
    y = FakeDeviceArray((2, 8), np.float32)
    kernel = FakeKernel()
    tmpl = templates._template(cuda_recording(x, w, y, kernel, copies=False), y, [x, w])
    assert type(tmpl) is templates.Template and tmpl.kind == "cuda" and len(tmpl) == 1
    x2, w2 = FakeDeviceArray((2, 8), np.float32), FakeDeviceArray((64,), np.float32)
    y2 = tmpl.replay([x2, w2])
    assert isinstance(y2, FakeDeviceArray) and y2.shape == (2, 8) and y2 not in (x2, y)
    grid, block, args, shared_mem, coop = kernel.calls[-1]
    assert (grid, block, shared_mem, coop) == ((3, 1, 1), (128, 1, 1), 256, False)
    assert args[0] is x2 and args[2] is y2 and args[4] is None
    assert args[1] == np.uint64(w2.data.ptr + 64) and args[3] == np.int32(7)

    assert tmpl.scratch == ()
    # the view points into none of the call's arrays: a temporary, of which the template
    # keeps a copy
    stranger = FakeDeviceArray((64,), np.float32)
    kept = templates._template(cuda_recording(x, stranger, y, kernel, copies=False), y, [x, w])
    assert type(kept) is templates.Template and len(kept.scratch) == 1
    kept.replay([x2, w2])
    args = kernel.calls[-1][2]
    # (the template's own copy of that temporary, not the call's: nothing else shares it)
    copy = kept.scratch[0]
    assert copy.shape == (4,) and copy.data.ptr != stranger.data.ptr + 64
    assert args[1] == np.uint64(copy.data.ptr)
    # a host copy is refused
    copied = templates._template(cuda_recording(x, w, y, kernel, copies=True), y, [x, w])
    assert type(copied) is templates.Refused and "copied" in copied.reason


def test_a_plans_memo_on_the_gpu_checks_device_and_stream(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The memo of a GPU plan call replays on new device arrays of the recorded layout, on
    the recorded device and stream only (stand-in arrays and CuPy: no GPU needed)."""
    monkeypatch.delenv("CUDNNLITE_TEMPLATE_CHECK", raising=False)
    current = {"device": 0, "stream": 77}
    fake_cupy = types.SimpleNamespace(
        empty=lambda shape, dtype: FakeDeviceArray(shape, dtype),
        cuda=types.SimpleNamespace(
            runtime=types.SimpleNamespace(getDevice=lambda: current["device"]),
            get_current_stream=lambda: types.SimpleNamespace(ptr=current["stream"]),
        ),
    )
    monkeypatch.setattr(templates, "_cupy_of", lambda t: fake_cupy)

    class Plan:
        def __call__(self, x: Any, w: Any) -> Any:
            raise AssertionError("only the memo runs here")

    op, plan = Plan.__dict__["__call__"], Plan()
    x, w = FakeDeviceArray((2, 8), np.float32), FakeDeviceArray((64,), np.float32)
    y, kernel = FakeDeviceArray((2, 8), np.float32), FakeKernel()
    tmpl = templates._template(cuda_recording(x, w, y, kernel, copies=False), y, [x, w])
    key = (op, "(the arrays' parts)", 77, templates._context_key(), templates._SWITCHES())
    templates.keep_memo(key, tmpl, op, None, (plan, x, w), [x.data.ptr, w.data.ptr])
    memo = plan._template_memo
    x2, w2 = FakeDeviceArray((2, 8), np.float32), FakeDeviceArray((64,), np.float32)
    y2 = memo(op, (plan, x2, w2))
    assert isinstance(y2, FakeDeviceArray) and y2.shape == (2, 8)
    args = kernel.calls[-1][2]
    assert args[0] is x2 and args[2] is y2 and args[1] == np.uint64(w2.data.ptr + 64)
    launched = len(kernel.calls)
    for what, value in (("stream", 78), ("device", 1)):
        current[what] = value
        assert memo(op, (plan, x2, w2)) is None, what
        current[what] = {"stream": 77, "device": 0}[what]
    elsewhere = FakeDeviceArray((2, 8), np.float32)
    elsewhere.device = types.SimpleNamespace(id=1)
    elsewhere.data.device_id = 1
    others = [FakeDeviceArray((2, 8), np.float64), FakeDeviceArray((4, 4), np.float32),
              FakeDeviceArray((2, 8), np.float32, ptr=x.data.ptr + 4), elsewhere,
              np.zeros((2, 8), np.float32)]  # fmt: skip
    for other in others:
        assert memo(op, (plan, other, w2)) is None
    assert memo(Plan.__init__, (plan, x2, w2)) is None
    assert memo(op, (plan, x2)) is None
    assert len(kernel.calls) == launched
    assert memo(op, (plan, x2, w2)) is not None
