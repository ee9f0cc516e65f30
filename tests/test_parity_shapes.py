"""PyTorch's shapes (issue 12): unbatched convolution and pooling, forward and backward;
1-tuple window arguments; 0-d softmax and reductions; empty arrays (zero strides that
alias nothing). Small float32 shapes: a few emulator modules, all shared with the
family tests."""

from __future__ import annotations

import numpy as np
import pytest

import cudnnlite as cl

RNG = np.random.default_rng(12)


def _r(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# ------------------------------------------------------------------ convolution


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_conv_unbatched_is_a_batch_of_one(nd: int) -> None:
    """Forward (fused residual written in place too) and every backward of an unbatched
    (C, *spatial) call give the batched call's results without the batch dim."""
    spatial = (5, 4, 3)[:nd]
    x, w, b = _r(3, *spatial), _r(4, 3, *(2,) * nd), _r(4)
    conv = getattr(cl, f"conv{nd}d")
    y = conv(x, w, b, padding=(1,))  # a 1-tuple broadcasts as in PyTorch
    want = conv(x[None], w, b, padding=1)[0]
    np.testing.assert_array_equal(y, want)
    z = _r(*y.shape)
    z0 = z.copy()
    r = conv(x, w, b, padding=1, z=z, out=z)
    assert r is z
    np.testing.assert_allclose(z, want + z0, rtol=1e-6, atol=1e-6)
    dy = _r(*y.shape)
    dx = getattr(cl, f"conv{nd}d_backward_data")(dy, w, x.shape, 1, 1)
    np.testing.assert_array_equal(
        dx, getattr(cl, f"conv{nd}d_backward_data")(dy[None], w, (1, *x.shape), 1, 1)[0]
    )
    dw = getattr(cl, f"conv{nd}d_backward_filter")(x, dy, w.shape, 1, 1)
    np.testing.assert_array_equal(
        dw, getattr(cl, f"conv{nd}d_backward_filter")(x[None], dy[None], w.shape, 1, 1)
    )
    np.testing.assert_array_equal(getattr(cl, f"conv{nd}d_backward_bias")(dy),
                                  getattr(cl, f"conv{nd}d_backward_bias")(dy[None]))  # fmt: skip


def test_conv_transpose_unbatched_and_empty_batch() -> None:
    x, w, b = _r(3, 4, 5), _r(3, 2, 3, 3), _r(2)
    y = cl.conv_transpose2d(x, w, b, stride=(2,), padding=(1,), output_padding=(1,))
    np.testing.assert_array_equal(
        y, cl.conv_transpose2d(x[None], w, b, stride=2, padding=1, output_padding=1)[0]
    )
    e = cl.conv_transpose2d(np.zeros((0, 3, 4, 5), np.float32), w, b, stride=2)
    assert e.shape == (0, 2, 9, 11)
    with pytest.raises(cl.BadParamError, match="bias: expected shape"):
        cl.conv_transpose2d(np.zeros((0, 3, 4, 5), np.float32), w, _r(3))


def test_conv_empty_batch_checks_like_a_batch_of_one() -> None:
    x, w = np.zeros((0, 3, 6, 6), np.float32), _r(4, 3, 3, 3)
    y = cl.conv2d(x, w, _r(4), stride=2, padding=1, activation="relu")
    assert y.shape == (0, 4, 3, 3) and y.dtype == np.float32
    out = np.empty((0, 4, 4, 4), np.float32)
    assert cl.conv2d(x, w, z=out, out=out) is out
    with pytest.raises(cl.BadParamError, match="w: has 2 channels per group"):
        cl.conv2d(x, w[:, :2])
    with pytest.raises(cl.BadParamError, match="out: expected shape"):
        cl.conv2d(x, w, out=np.empty((0, 4, 6, 6), np.float32))


def test_conv_bad_unbatched_operands() -> None:
    x, w = _r(3, 5, 5), _r(4, 3, 3, 3)
    with pytest.raises(cl.BadParamError, match=r"z: x is unbatched \(3-D\)"):
        cl.conv2d(x, w, z=_r(1, 4, 3, 3))
    with pytest.raises(cl.BadParamError, match=r"out: x is unbatched"):
        cl.conv2d(x, w, out=np.empty((1, 4, 3, 3), np.float32))
    ro = np.empty((4, 3, 3), np.float32)
    ro.flags.writeable = False
    with pytest.raises(cl.BadParamError, match="out: the array is read-only"):
        cl.conv2d(x, w, out=ro)
    with pytest.raises(cl.BadParamError, match=r"x: expected a 4-D array \(NCHW\) or an unbatched"):
        cl.conv2d(_r(5, 5), w)
    with pytest.raises(cl.BadParamError, match=r"dy: x is unbatched"):
        cl.conv2d_backward_filter(x, _r(1, 4, 3, 3), w.shape)
    with pytest.raises(cl.BadParamError, match=r"padding: expected an int, 2 ints"):
        cl.conv2d(x, w, padding=(1, 1, 1))
    with pytest.raises(cl.BadParamError, match=r"stride: expected an int or 2 ints"):
        cl.conv2d(x, w, stride=object())


# ------------------------------------------------------------------ pooling


@pytest.mark.parametrize("nd", [1, 2, 3])
def test_pooling_unbatched_forward_and_backward(nd: int) -> None:
    """The rank comes from the op (``nd`` / the 1d-3d names), never from an unbatched
    shape: (C, H, W) for a 2-d pool is not a batch of 1-d planes."""
    x = _r(2, *(6, 5, 4)[:nd])
    y, ind = getattr(cl, f"max_pool{nd}d")(x, (3,), (2,), (1,), return_indices=True)
    yb, indb = cl.max_pool(x[None], 3, 2, 1, return_indices=True)
    np.testing.assert_array_equal(y, yb[0])
    np.testing.assert_array_equal(ind, indb[0])
    dy = _r(*y.shape)
    dx = cl.max_pool_backward(dy, ind, x.shape, (3,), (2,), (1,), nd=nd, deterministic=True)
    np.testing.assert_array_equal(
        dx, cl.max_pool_backward(dy[None], indb, (1, *x.shape), 3, 2, 1, deterministic=True)[0]
    )
    a = getattr(cl, f"avg_pool{nd}d")(x, 2)
    np.testing.assert_array_equal(a, cl.avg_pool(x[None], 2)[0])
    da = cl.avg_pool_backward(_r(*a.shape), x.shape, 2, nd=nd)
    assert da.shape == x.shape
    ya, ia = getattr(cl, f"adaptive_max_pool{nd}d")(x, 2, True)
    dm = cl.adaptive_max_pool_backward(np.ones_like(ya), ia, x.shape, nd=nd)
    assert dm.shape == x.shape and dm.sum() == ya.size
    g = cl.adaptive_avg_pool_backward(np.ones((2,) + (1,) * nd, np.float32), x.shape, nd=nd)
    np.testing.assert_allclose(g, np.full(x.shape, 1 / np.prod(x.shape[1:])), rtol=1e-6)
    out = np.empty_like(a)
    assert getattr(cl, f"avg_pool{nd}d")(x, 2, out=out) is out


def test_pooling_unbatched_bad_input() -> None:
    x = _r(2, 6, 5)
    with pytest.raises(cl.BadParamError, match=r"nd: expected 1, 2, 3 or None"):
        cl.max_pool(x, 2, nd=4)
    with pytest.raises(cl.BadParamError, match=r"nd: expected"):
        cl.max_pool(x, 2, nd=True)
    with pytest.raises(cl.BadParamError, match=r"x: expected 4 dims .* or 3 \(unbatched"):
        cl.max_pool2d(_r(6, 5), 2)
    with pytest.raises(cl.BadParamError, match=r"input_shape: expected 5 dims"):
        cl.max_pool_backward(_r(2, 3, 2), np.zeros((2, 3, 2), np.int64), (2, 6), 2, nd=3)
    y, ind = cl.max_pool2d(x, 2, return_indices=True)
    with pytest.raises(cl.BadParamError, match=r"dy: the call is unbatched"):
        cl.max_pool_backward(y[None], ind, x.shape, 2, nd=2)
    with pytest.raises(cl.BadParamError, match=r"indices: the call is unbatched"):
        cl.max_pool_backward(y, ind[None], x.shape, 2, nd=2)
    with pytest.raises(cl.BadParamError, match=r"out: the call is unbatched"):
        cl.max_pool2d(x, 2, out=np.empty((1, 2, 3, 2), np.float32))
    with pytest.raises(cl.BadParamError, match=r"kernel_size: expected an int or 2 ints"):
        cl.max_pool2d(x, (2, 2, 2))


def test_pooling_one_tuples_and_empty_batch() -> None:
    x = _r(1, 2, 7, 6)
    np.testing.assert_array_equal(
        cl.max_pool2d(x, (3,), stride=(2,), padding=(1,), dilation=(1,)),
        cl.max_pool2d(x, 3, 2, 1, 1),
    )
    np.testing.assert_array_equal(cl.avg_pool2d(x, (2,), (1,)), cl.avg_pool2d(x, 2, 1))
    assert cl.max_pool2d(np.zeros((0, 2, 7, 6), np.float32), 2).shape == (0, 2, 3, 3)
    assert cl.adaptive_avg_pool2d(np.zeros((0, 2, 7, 6), np.float32), 3).shape == (0, 2, 3, 3)


# ------------------------------------------------------------------ 0-d and empty arrays


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_zero_dim_softmax_and_reductions(dtype: type) -> None:
    x = np.array(-7.5, dtype)
    s, ls = cl.softmax(x), cl.log_softmax(x, 0)
    assert s.shape == () and ls.shape == () and s == 1 and ls == 0
    assert cl.softmax(x, -1) == 1
    assert cl.softmax_backward(np.array(3.0, dtype), s) == 0  # d/dx of a constant
    assert cl.log_softmax_backward(np.array(3.0, dtype), ls, 0) == 0
    assert np.isnan(cl.softmax(np.array(np.nan, dtype)))
    for op in ("sum", "max", "avg"):
        for axes in (0, -1, None):
            r = cl.reduce_tensor(x, op, axes)
            assert r.shape == () and r == x, (op, axes)
    with pytest.raises(cl.BadParamError, match="axis: a 0-d x takes axis 0, -1 or None"):
        cl.softmax(x, 1)
    with pytest.raises(cl.BadParamError, match=r"axes: 1 is out of range for a 0-d"):
        cl.reduce_tensor(x, "sum", 1)


def test_empty_arrays_with_zero_strides_are_not_aliases() -> None:
    """NumPy may give an empty array zero strides; it holds no element, so it overlaps
    nothing and aliases nothing."""
    e = np.broadcast_to(np.float32(0), (3, 0))
    assert 0 in e.strides
    assert cl.softmax(np.zeros((0, 4), np.float32), 1).shape == (0, 4)
    out = np.empty((5, 0), np.float32)[::1]
    assert cl.relu(np.zeros((5, 0), np.float32), out=out) is out
    dst = np.lib.stride_tricks.as_strided(np.empty(1, np.float32), (4, 0), (0, 0),
                                          writeable=True)  # fmt: skip
    r = cl.reduce_tensor(np.zeros((4, 0, 3), np.float32), "sum", 2, out=dst)
    assert r.shape == (4, 0)


_R = np.random.default_rng(11)
_X = _R.standard_normal((2, 3, 4, 4)).astype(np.float32)
_W = _R.standard_normal((5, 3, 3, 3)).astype(np.float32)
# (op given out=, the result's shape)
_OUT_OPS = {
    "conv2d": (lambda out: cl.conv2d(_X, _W, padding=1, out=out), (2, 5, 4, 4)),
    "softmax": (lambda out: cl.softmax(_X, 1, out=out), (2, 3, 4, 4)),
    "max_pool2d": (lambda out: cl.max_pool2d(_X, 2, out=out), (2, 3, 2, 2)),
    "layer_norm": (lambda out: cl.layer_norm(_X, (4, 4), out=out), (2, 3, 4, 4)),
    "batch_norm": (lambda out: cl.batch_norm(_X, None, None, training=True, out=out),
                   (2, 3, 4, 4)),  # fmt: skip
    "dropout": (lambda out: cl.dropout(_X, 0.5, seed=1, out=out), (2, 3, 4, 4)),
    "attention": (lambda out: cl.scaled_dot_product_attention(_X, _X, _X, out=out),
                  (2, 3, 4, 4)),  # fmt: skip
    "relu": (lambda out: cl.relu(_X, out=out), (2, 3, 4, 4)),
    "conv2d_backward_data": (lambda out: cl.conv2d_backward_data(
        np.ones((2, 5, 4, 4), np.float32), _W, (2, 3, 4, 4), padding=1, out=out), (2, 3, 4, 4)),
    "conv_transpose2d": (lambda out: cl.conv_transpose2d(_X, _W.transpose(1, 0, 2, 3).copy(),
                                                         padding=1, out=out), (2, 5, 4, 4)),
    "transform_tensor": (lambda out: cl.transform_tensor(_X, out=out), (2, 3, 4, 4)),
}


@pytest.mark.parametrize("op", sorted(_OUT_OPS))
def test_out_whose_elements_share_memory_is_refused(op: str) -> None:
    """An expanded out (a zero stride, which PyTorch refuses too) or an as_strided one
    whose elements overlap would get every writer's value in one place: a BadParamError
    naming out, for every op (only the elementwise ones checked before)."""
    fn, shape = _OUT_OPS[op]
    row = np.zeros(shape[1:], np.float32)  # one sample's worth, repeated along the batch
    expanded = np.lib.stride_tricks.as_strided(row, shape, (0, *row.strides), writeable=True)
    with pytest.raises(cl.BadParamError, match="out: has a zero stride"):
        fn(expanded)
    buf = np.zeros(int(np.prod(shape)), np.float32)
    # channels half a plane apart: channel c's second half is channel c + 1's first
    strides = (4 * shape[1] * shape[2] * shape[3], 2 * shape[2] * shape[3], 4 * shape[3], 4)
    overlapping = np.lib.stride_tricks.as_strided(buf, shape, strides, writeable=True)
    with pytest.raises(cl.BadParamError, match="out: its elements overlap in memory"):
        fn(overlapping)
    ok = np.empty(shape, np.float32)[..., ::-1]  # distinct elements, any strides: taken
    assert fn(ok) is ok


def test_conv_transpose_out_overlapping_x_names_x() -> None:
    # (backward data's code names its input dy; conv_transpose's is x)
    x = np.zeros((1, 3, 4, 4), np.float32)
    with pytest.raises(cl.BadParamError, match="out: overlaps x;"):
        cl.conv_transpose2d(x, np.zeros((3, 3, 1, 1), np.float32), out=x)


# ------------------------------------------------------------------ zero channels


def test_conv_zero_input_channels_is_the_epilogue_of_a_zero_sum() -> None:
    """C = 0: every output is act(alpha2 * z + bias), of K channels (nothing launched for
    the convolution); groups, 1-d/3-d, channels-last and unbatched alike."""
    b, z = _r(4), _r(2, 4, 3, 3)
    y = cl.conv2d(np.zeros((2, 0, 5, 5), np.float32), _r(4, 0, 3, 3), b)
    np.testing.assert_array_equal(y, np.broadcast_to(b[:, None, None], (2, 4, 3, 3)))
    y = cl.conv2d(np.zeros((2, 0, 5, 5), np.float32), _r(4, 0, 3, 3), b, z=z, alpha2=0.5,
                  activation="relu")  # fmt: skip
    np.testing.assert_allclose(y, np.maximum(0.5 * z + b[:, None, None], 0), rtol=1e-6)
    assert not cl.conv2d(np.zeros((1, 0, 5, 5), np.float32), _r(4, 0, 3, 3), groups=2).any()
    y = cl.conv1d(np.zeros((1, 0, 6), np.float32), _r(4, 0, 3), b, stride=2, padding=1)
    assert y.shape == (1, 4, 3) and (y == b[:, None]).all()
    y = cl.conv3d(np.zeros((1, 0, 0, 4, 3), np.float32), _r(4, 0, 1, 2, 2), b, padding=1)
    assert y.shape == (1, 4, 2, 5, 4) and (y == b[:, None, None, None]).all()
    y = cl.conv2d(np.zeros((5, 5, 0), np.float32), _r(4, 3, 3, 0), b, layout="NHWC")
    assert y.shape == (3, 3, 4) and (y == b).all()


def test_conv_zero_channels_backward_and_transposed() -> None:
    """Gradients of a convolution without work are zeros or empty, nothing launched;
    K = 0 gives an empty output; an empty batch's filter and bias gradients are zeros."""
    dy = _r(2, 4, 3, 3)
    assert cl.conv2d_backward_data(dy, _r(4, 0, 3, 3), (2, 0, 5, 5)).shape == (2, 0, 5, 5)
    dw = cl.conv2d_backward_filter(np.zeros((2, 0, 5, 5), np.float32), dy, (4, 0, 3, 3))
    assert dw.shape == (4, 0, 3, 3)
    np.testing.assert_allclose(cl.conv2d_backward_bias(dy), dy.sum((0, 2, 3)), rtol=1e-5)
    x, w0 = _r(2, 3, 5, 5), np.zeros((0, 3, 3, 3), np.float32)
    assert cl.conv2d(x, w0, np.zeros(0, np.float32)).shape == (2, 0, 3, 3)
    dy0 = np.zeros((2, 0, 3, 3), np.float32)
    assert not cl.conv2d_backward_data(dy0, w0, x.shape).any()  # K = 0: no output reads x
    assert cl.conv2d_backward_filter(x, dy0, w0.shape).shape == (0, 3, 3, 3)
    assert cl.conv2d_backward_bias(dy0).shape == (0,)
    out = np.full((4, 3, 3, 3), np.nan, np.float32)
    xn, dyn = np.zeros((0, 3, 5, 5), np.float32), np.zeros((0, 4, 3, 3), np.float32)
    r = cl.conv2d_backward_filter(xn, dyn, out.shape, out=out)
    assert r is out and not out.any()
    assert not cl.conv1d_backward_bias(np.zeros((0, 4, 3), np.float32)).any()
    assert cl.conv3d_backward_data(np.zeros((0, 4, 1, 1, 1), np.float32), _r(4, 2, 3, 3, 3),
                                   (0, 2, 3, 3, 3)).shape == (0, 2, 3, 3, 3)  # fmt: skip
    b = _r(4)
    y = cl.conv_transpose2d(np.zeros((1, 0, 5, 5), np.float32), _r(0, 2, 3, 3), b, groups=2)
    assert y.shape == (1, 4, 7, 7) and (y == b[:, None, None]).all()
    assert cl.conv_transpose1d(_r(1, 3, 5), _r(3, 0, 3)).shape == (1, 0, 7)
    e = cl.conv_transpose2d(np.zeros((0, 3, 0, 5), np.float32), _r(3, 4, 3, 3), b, padding=1)
    assert e.shape == (0, 4, 0, 5)


def test_calls_without_work_still_check_algo() -> None:
    """An empty batch (attention: no keys either; RNN: B = 0) dispatches nothing, but a
    misspelt algo or another direction's solver raises as at any other size."""
    z = lambda *s: np.zeros(s, np.float32)  # noqa: E731
    q, kv = z(1, 2, 3, 4), z(1, 2, 0, 4)
    o, lse = cl.scaled_dot_product_attention(q, kv, kv, return_lse=True)
    rnn_w = {"weight_ih_l0": z(2, 3), "weight_hh_l0": z(2, 2)}  # (rnn_tanh: hidden 2)
    y, hy, res = cl.rnn(z(5, 0, 3), None, rnn_w, mode="rnn_tanh", training=True)
    calls = [
        ("sdpa_bwd_unfused", lambda a: cl.scaled_dot_product_attention(q, kv, kv, algo=a)),
        (
            "sdpa_fwd_unfused",
            lambda a: cl.scaled_dot_product_attention_backward(q, q, kv, kv, o, lse, algo=a),
        ),
        ("rnn_bwd_standard", lambda a: cl.rnn(z(5, 0, 3), None, rnn_w, mode="rnn_tanh", algo=a)),
        ("rnn_fwd_standard", lambda a: cl.rnn_backward(y, None, None, res, algo=a)),
        ("conv_bwd_data_direct", lambda a: cl.conv2d(z(0, 3, 5, 5), z(4, 3, 3, 3), algo=a)),
    ]
    for other_direction, call in calls:
        for algo, match in (
            ("no_such_solver", "algo: unknown solver"),
            (3, "algo: expected"),
            (other_direction, f"algo: {other_direction} solves"),
        ):
            with pytest.raises(cl.BadParamError, match=match):
                call(algo)
        call("auto")


def test_conv_empty_shapes_still_validated() -> None:
    """Negative or mismatched channel counts, empty filters and empty spatial dims of a
    non-empty batch with channels are BadParamErrors naming the argument (as PyTorch)."""
    z = np.zeros
    with pytest.raises(cl.BadParamError, match="w: has 1 channels per group, expected 0"):
        cl.conv2d(z((1, 0, 5, 5), np.float32), _r(4, 1, 3, 3))
    with pytest.raises(cl.BadParamError, match="w: has 0 channels per group, expected 3"):
        cl.conv2d(_r(1, 3, 5, 5), _r(4, 0, 3, 3))
    with pytest.raises(cl.BadParamError, match="groups: 3 does not divide the 4 output"):
        cl.conv2d(z((1, 0, 5, 5), np.float32), _r(4, 0, 3, 3), groups=3)
    with pytest.raises(cl.BadParamError, match="bias: expected shape"):
        cl.conv2d(z((1, 0, 5, 5), np.float32), _r(4, 0, 3, 3), _r(3))
    with pytest.raises(cl.BadParamError, match="x_shape: every size must be >= 0"):
        cl.conv2d_backward_data(_r(1, 4, 3, 3), _r(4, 3, 3, 3), (1, -3, 5, 5))
    with pytest.raises(cl.BadParamError, match="w_shape: every size must be >= 0"):
        cl.conv2d_backward_filter(_r(1, 3, 5, 5), _r(1, 4, 3, 3), (4, -3, 3, 3))
    with pytest.raises(cl.BadParamError, match="w_shape: has 1 channels per group"):
        cl.conv2d_backward_filter(z((1, 0, 5, 5), np.float32), _r(1, 4, 3, 3), (4, 1, 3, 3))
    with pytest.raises(cl.BadParamError, match=r"dy: expected shape \(1, 4, 3, 3\)"):
        cl.conv2d_backward_data(_r(1, 3, 3, 3), _r(4, 0, 3, 3), (1, 0, 5, 5))
    with pytest.raises(cl.BadParamError, match="x: empty spatial dims need N = 0 or C = 0"):
        cl.conv2d(z((1, 3, 0, 5), np.float32), _r(4, 3, 1, 3), padding=1)
    with pytest.raises(cl.BadParamError, match="x: empty spatial dims need N = 0 or C = 0"):
        cl.conv_transpose2d(z((1, 3, 0, 5), np.float32), _r(3, 4, 3, 3))
    with pytest.raises(cl.BadParamError, match="x: the padded input"):
        cl.conv2d(z((0, 3, 0, 5), np.float32), _r(4, 3, 1, 3))
    with pytest.raises(cl.BadParamError, match="must not be empty"):
        cl.conv2d(_r(1, 3, 5, 5), z((4, 3, 0, 3), np.float32))
    with pytest.raises(cl.BadParamError, match="w: expected 0 filters"):
        cl.conv_transpose2d(z((1, 0, 5, 5), np.float32), _r(3, 4, 3, 3))
