"""README's deliberate differences from PyTorch outside OpInfo's samples (zero channels,
small 3-D average pools, padding-only max windows, one-value groups, NaNs on padding,
infinite gradients, attention without keys, NaN grid coordinates, negative-bit tensors):
each is asserted to still differ. Skipped without PyTorch or expecttest."""

from __future__ import annotations

import numpy as np
import pytest
from opinfo_support import F, torch

import cudnnlite as cl


def test_zero_channel_convolution_still_differs() -> None:
    """README's deliberate difference outside op_db: for C = 0 PyTorch returns (N, 0, P, Q),
    dropping w's K output channels and the bias (pytorch/pytorch#56998, open); cudnnlite
    returns the bias over (N, K, P, Q) (tests/test_parity_shapes.py)."""
    y = F.conv2d(torch.zeros(1, 0, 5, 5), torch.zeros(4, 0, 3, 3), torch.ones(4))
    assert tuple(y.shape) == (1, 0, 3, 3)
    mine = cl.conv2d(np.zeros((1, 0, 5, 5), np.float32), np.zeros((4, 0, 3, 3), np.float32),
                     np.ones(4, np.float32))  # fmt: skip
    assert mine.shape == (1, 4, 3, 3) and (mine == 1).all()


def test_small_input_avg_pool3d_still_differs() -> None:
    """README's deliberate difference: PyTorch's avg_pool3d refuses an input smaller than
    the kernel along a dimension even when the padding makes up the rest (its 1-D and 2-D
    average pools and max_pool3d accept it); cudnnlite averages as the 1-D/2-D pools do:
    here, with count_include_pad, the window of 3 over one value and a zero of padding on
    each side."""
    x = np.arange(16, dtype=np.float32).reshape(1, 1, 1, 4, 4) + 1
    with pytest.raises(RuntimeError, match="smaller than kernel size"):
        F.avg_pool3d(torch.from_numpy(x), (3, 1, 1), stride=1, padding=(1, 0, 0))
    mine = cl.avg_pool3d(x, (3, 1, 1), stride=1, padding=(1, 0, 0))
    np.testing.assert_allclose(mine, x / 3, rtol=1e-6)
    # the same windows in 2-D (depth as height, the 4 x 4 plane as width), which PyTorch
    # accepts, give the same
    flat = torch.from_numpy(x.reshape(1, 1, 1, 16))
    want = F.avg_pool2d(flat, (3, 1), stride=1, padding=(1, 0)).numpy()
    np.testing.assert_allclose(mine.reshape(want.shape), want, rtol=1e-6)


def test_index_of_a_padding_only_max_window_still_differs() -> None:
    """README's deliberate difference: a max-pool window of padding only (kernel 3,
    dilation 2, padding 1 and ceil_mode over one value: the second window's taps all fall
    on padding). PyTorch saves index 1, past the one-value plane; cudnnlite saves -1, which
    its backward credits nothing. Both give y = -inf there, and dx gets nothing from it."""
    x = np.array([[[5.0]]], np.float32)
    args = (3, 3, 1, 2, True, True)  # kernel, stride, padding, dilation, ceil_mode, indices
    y, i = F.max_pool1d(torch.from_numpy(x), *args)
    assert i.tolist() == [[[1]]] and y.tolist() == [[[-np.inf]]]
    mine, idx = cl.max_pool1d(x, *args)
    assert idx.tolist() == [[[-1]]] and mine.tolist() == [[[-np.inf]]]
    dx = cl.max_pool_backward(np.ones_like(mine), idx, x.shape, *args[:5], nd=1)
    np.testing.assert_array_equal(dx, np.zeros_like(x))


def test_one_value_group_norm_still_differs() -> None:
    """README's deliberate difference: PyTorch's group_norm refuses groups of one value
    ("Expected more than 1 value per channel when training"), and instance_norm one
    spatial element; cudnnlite normalizes them: x - mean is 0, so the output is the bias."""
    x = np.array([[3.0, -2.0, 7.5]], np.float32)
    w, b = np.array([2.0, 3.0, 4.0], np.float32), np.array([0.5, -1.0, 2.0], np.float32)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        F.group_norm(torch.from_numpy(x), 3, torch.from_numpy(w), torch.from_numpy(b))
    np.testing.assert_array_equal(cl.group_norm(x, 3, w, b), b[None, :])
    # instance norm from input statistics over one spatial element: the same
    x1, wt, bt = (torch.from_numpy(a) for a in (x[..., None], w, b))
    with pytest.raises(ValueError, match="more than 1 spatial element"):
        F.instance_norm(x1, weight=wt, bias=bt)
    np.testing.assert_array_equal(cl.instance_norm(x[..., None], weight=w, bias=b),
                                  b[None, :, None])  # fmt: skip


def test_nan_meeting_only_padding_still_differs() -> None:
    """README's deliberate difference: a NaN in w (forward) or dy (backward filter) whose
    products all fall on zero padding. PyTorch multiplies the padding's zeros (0 * NaN =
    NaN); cudnnlite skips the padding, as cuDNN's implicit GEMM does."""
    x = np.array([[[1.0, 2.0]]])
    w = np.array([[[np.nan, 1.0, 1.0]]])
    assert torch.isnan(F.conv1d(torch.from_numpy(x), torch.from_numpy(w), padding=1)).all()
    np.testing.assert_array_equal(cl.conv1d(x, w, padding=1), [[[3.0, np.nan]]])
    dy = np.array([[[np.nan, 1.0, 1.0, 1.0]]])
    xt = torch.from_numpy(x)
    wt = torch.ones(1, 1, 1, dtype=torch.float64, requires_grad=True)
    F.conv1d(xt, wt, padding=1).backward(torch.from_numpy(dy))
    assert torch.isnan(wt.grad).all()
    np.testing.assert_array_equal(cl.conv1d_backward_filter(x, dy, (1, 1, 1), padding=1),
                                  [[[3.0]]])  # fmt: skip


def test_infinite_gradients_still_differ() -> None:
    """README's deliberate differences: an infinite dy through sigmoid / tanh where the
    derivative is positive but y rounds to 1 (PyTorch's inf * y (1 - y) is NaN; cudnnlite
    gives inf), and through layer norm (PyTorch: NaN across the row; cudnnlite: NaN only
    where two infinities meet, the signed limit elsewhere)."""
    for name in ("sigmoid", "tanh"):
        xt = torch.tensor([40.0], dtype=torch.float64, requires_grad=True)
        getattr(torch, name)(xt).backward(torch.tensor([np.inf], dtype=torch.float64))
        assert torch.isnan(xt.grad).all()
        got = cl.activation_backward(np.array([np.inf]), np.array([40.0]), name)
        assert got[0] == np.inf
    x, dy = np.array([[0.0, 1.0, 3.0]]), np.array([[np.inf, 0.0, 0.0]])
    xt = torch.from_numpy(x).requires_grad_(True)
    F.layer_norm(xt, (3,)).backward(torch.from_numpy(dy))
    assert torch.isnan(xt.grad).all()
    _, mean, rstd = cl.layer_norm_forward(x, (3,))
    dx = cl.layer_norm_backward(dy, x, (3,), mean, rstd)[0]
    assert np.isnan(dx[0, 0]) and dx[0, 1] == -np.inf


def test_attention_without_keys_and_a_nan_query_still_differs() -> None:
    """README's deliberate difference: with no keys (S = 0) the output is 0 whatever the
    query; PyTorch's math path carries a NaN query into it."""
    q, kv = np.array([[np.nan, 1.0]]), np.zeros((0, 2))
    want = F.scaled_dot_product_attention(*(torch.from_numpy(a) for a in (q, kv, kv)))
    assert torch.isnan(want).all()
    np.testing.assert_array_equal(cl.scaled_dot_product_attention(q, kv, kv), [[0.0, 0.0]])


def test_nan_grid_coordinate_still_differs() -> None:
    """README's deliberate difference: a NaN grid coordinate in 2-D bilinear grid_sample
    with zeros padding is NaN on PyTorch's CPU kernels; cudnnlite follows its CUDA kernels
    (the point is out of bounds: 0). A finite point next to it agrees."""
    x = (np.arange(20, dtype=np.float32) + 1).reshape(1, 1, 4, 5)
    g = np.array([[[[np.nan, 0.0], [0.0, np.nan], [0.1, 0.2]]]], np.float32)
    want = F.grid_sample(torch.from_numpy(x), torch.from_numpy(g), align_corners=False).numpy()
    mine = cl.grid_sample(x, g, align_corners=False)
    assert np.isnan(want[..., :2]).all()
    np.testing.assert_array_equal(mine[..., :2], 0)
    np.testing.assert_allclose(mine[..., 2], want[..., 2], rtol=1e-6)


def test_negative_bit_tensor_still_differs() -> None:
    """README's deliberate difference: a tensor with PyTorch's negative bit set (a lazy
    negation) is refused; PyTorch's ops read it negated. Its DLPack export holds the stored,
    un-negated values (NumPy's from_dlpack reads those), so taking it would be wrong."""
    x = np.array([[1.5, -2.0, 3.0]], np.float32)
    t = torch.complex(torch.from_numpy(x), torch.from_numpy(x)).conj().imag
    assert t.is_neg()
    np.testing.assert_array_equal(torch.relu(t).numpy(), np.maximum(-x, 0))
    with pytest.raises(cl.BadParamError, match="x: a PyTorch tensor with its negative bit"):
        cl.relu(t)
    np.testing.assert_array_equal(cl.relu(t.resolve_neg()), np.maximum(-x, 0))
