"""float64 NumPy references of convolution backward (data, filter, bias) and of the
transposed convolution, N-d, groups, dilation, asymmetric padding, both layouts.

They are the adjoints of :func:`cudnnlite.reference.conv.conv_forward`:
``<conv_forward(x, w), dy> == <x, conv_backward_data(dy, w)> == <w, conv_backward_filter(x, dy)>``
(tests/test_conv_backward_reference.py checks them against finite differences of the
forward reference). Positions of x that no output reads (the gaps of a stride, the rows
a floor() drops) get a zero gradient.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np


def _to_first(a: np.ndarray, channels_last: bool) -> np.ndarray:
    a = np.asarray(a, dtype=np.float64)
    return np.moveaxis(a, -1, 1) if channels_last else a


def _tap_slices(taps: Sequence[int], out: Sequence[int], strides: Sequence[int],
                dilations: Sequence[int]) -> tuple[slice, ...]:  # fmt: skip
    """The positions of the padded input that tap ``taps`` reads, one per output."""
    return tuple(
        slice(t * d, t * d + (o - 1) * s + 1, s)
        for t, o, s, d in zip(taps, out, strides, dilations, strict=True)
    )


def conv_backward_data(
    dy: np.ndarray,
    w: np.ndarray,
    x_spatial: Sequence[int],
    pads: Sequence[tuple[int, int]],
    strides: Sequence[int],
    dilations: Sequence[int],
    groups: int = 1,
    channels_last: bool = False,
) -> np.ndarray:
    """dx = d<conv(x, w), dy>/dx: dy (N, K, *out) or (N, *out, K); w as in the forward;
    ``x_spatial`` the spatial size of x. Returns (N, C, *x_spatial) or channels-last.

    dy may have fewer outputs than the forward of x would produce (PyTorch's
    output_padding >= stride); the missing ones count as zero.
    """
    dy = _to_first(dy, channels_last)
    w = _to_first(w, channels_last)
    n, k = dy.shape[:2]
    out = dy.shape[2:]
    cg, filt = w.shape[1], w.shape[2:]
    c, kg = cg * groups, k // groups
    padded = [s + b + a for s, (b, a) in zip(x_spatial, pads, strict=True)]
    # room for every tap of every output, whatever the padding says
    geometry = zip(padded, out, strides, dilations, filt, strict=True)
    room = [max(p, (o - 1) * st + d * (f - 1) + 1) for p, o, st, d, f in geometry]
    dxp = np.zeros((n, c, *room))
    for g in range(groups):
        dyg = dy[:, g * kg : (g + 1) * kg]
        wg = w[g * kg : (g + 1) * kg]
        for taps in itertools.product(*[range(f) for f in filt]):
            index = (slice(None), slice(g * cg, (g + 1) * cg),
                     *_tap_slices(taps, out, strides, dilations))  # fmt: skip
            dxp[index] += np.einsum("nk...,kc->nc...", dyg, wg[(..., *taps)])
    crop = tuple(slice(b, b + s) for s, (b, _) in zip(x_spatial, pads, strict=True))
    dx = dxp[(slice(None), slice(None), *crop)]
    return np.ascontiguousarray(np.moveaxis(dx, 1, -1) if channels_last else dx)


def conv_backward_filter(
    x: np.ndarray,
    dy: np.ndarray,
    filter_size: Sequence[int],
    pads: Sequence[tuple[int, int]],
    strides: Sequence[int],
    dilations: Sequence[int],
    groups: int = 1,
    channels_last: bool = False,
) -> np.ndarray:
    """dw = d<conv(x, w), dy>/dw: (K, C/groups, *filter_size) or (K, *filter_size, C/groups)."""
    x = _to_first(x, channels_last)
    dy = _to_first(dy, channels_last)
    n, c = x.shape[:2]
    k, out = dy.shape[1], dy.shape[2:]
    cg, kg = c // groups, k // groups
    padded = np.pad(x, [(0, 0), (0, 0), *[tuple(p) for p in pads]])
    need = [(o - 1) * s + d * (f - 1) + 1
            for o, s, d, f in zip(out, strides, dilations, filter_size, strict=True)]  # fmt: skip
    extra = [(0, 0), (0, 0)] + [(0, max(0, nd - p)) for nd, p in zip(need, padded.shape[2:],
                                                                     strict=True)]  # fmt: skip
    padded = np.pad(padded, extra)
    dw = np.zeros((k, cg, *filter_size))
    for g in range(groups):
        xg = padded[:, g * cg : (g + 1) * cg]
        dyg = dy[:, g * kg : (g + 1) * kg]
        for taps in itertools.product(*[range(f) for f in filter_size]):
            patch = xg[(slice(None), slice(None), *_tap_slices(taps, out, strides, dilations))]
            dw[(slice(g * kg, (g + 1) * kg), slice(None), *taps)] = np.einsum(
                "nkp,ncp->kc",
                dyg.reshape(n, kg, int(np.prod(out))),
                patch.reshape(n, cg, int(np.prod(out))),
            )
    return np.ascontiguousarray(np.moveaxis(dw, 1, -1) if channels_last else dw)


def conv_backward_bias(dy: np.ndarray, channels_last: bool = False) -> np.ndarray:
    """dbias[k] = sum of dy over N and every spatial position."""
    dy = _to_first(dy, channels_last)
    return dy.sum(axis=(0, *range(2, dy.ndim)))


def transpose_output_size(
    size: int, f: int, stride: int, pad: int, dilation: int, output_padding: int
) -> int:
    """PyTorch's ConvTranspose output length."""
    return (size - 1) * stride - 2 * pad + dilation * (f - 1) + output_padding + 1


def conv_transpose(
    x: np.ndarray,
    w: np.ndarray,
    bias: np.ndarray | None = None,
    stride: Sequence[int] = (1, 1),
    padding: Sequence[int] = (0, 0),
    output_padding: Sequence[int] = (0, 0),
    groups: int = 1,
    dilation: Sequence[int] = (1, 1),
    channels_last: bool = False,
) -> np.ndarray:
    """PyTorch's conv_transpose: x (N, C_in, *in), w (C_in, C_out/groups, *filter) (or
    channels-last x and (C_in, *filter, C_out/groups)); the backward data of a
    convolution from C_out to C_in channels, plus bias (C_out,)."""
    w_first = _to_first(w, channels_last)
    filt = w_first.shape[2:]
    in_spatial = x.shape[1:-1] if channels_last else x.shape[2:]
    dims = zip(in_spatial, filt, stride, padding, dilation, output_padding, strict=True)
    out = [transpose_output_size(*d) for d in dims]
    pads = [(p, p) for p in padding]
    y = conv_backward_data(x, w, out, pads, stride, dilation, groups, channels_last)
    if bias is not None:
        b = np.asarray(bias, np.float64)
        y = y + (b if channels_last else b.reshape((-1,) + (1,) * (y.ndim - 2)))
    return y
