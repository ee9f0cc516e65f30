"""float64 NumPy reference of convolution forward (N-d, groups, dilation, asymmetric
padding, both layouts) and of the fused epilogue."""

from __future__ import annotations

import itertools
from collections.abc import Sequence

import numpy as np

from .activation import activation_forward


def conv_forward(
    x: np.ndarray,
    w: np.ndarray,
    pads: Sequence[tuple[int, int]],
    strides: Sequence[int],
    dilations: Sequence[int],
    groups: int = 1,
    channels_last: bool = False,
) -> np.ndarray:
    """y[n, k, o...] = sum_{c, f...} x[n, g*C/G + c, o*stride + f*dil - pad_before] * w[k, c, f...]

    x: (N, C, *spatial) or (N, *spatial, C); w: (K, C/groups, *filter) or
    (K, *filter, C/groups). Computed in float64; returns the layout of x.
    """
    x = np.asarray(x, dtype=np.float64)
    w = np.asarray(w, dtype=np.float64)
    if channels_last:
        x = np.moveaxis(x, -1, 1)
        w = np.moveaxis(w, -1, 1)
    n, c = x.shape[:2]
    k, cg = w.shape[:2]
    filt = w.shape[2:]
    nd = len(filt)
    padded = np.pad(x, [(0, 0), (0, 0), *[tuple(p) for p in pads]])
    out_spatial = [
        (padded.shape[2 + i] - dilations[i] * (filt[i] - 1) - 1) // strides[i] + 1
        for i in range(nd)
    ]
    kg = k // groups
    y = np.zeros((n, k, *out_spatial))
    for g in range(groups):
        xg = padded[:, g * cg : (g + 1) * cg]
        wg = w[g * kg : (g + 1) * kg]
        for taps in itertools.product(*[range(f) for f in filt]):
            index = tuple(
                slice(t * dilations[i], t * dilations[i] + (out_spatial[i] - 1) * strides[i] + 1,
                      strides[i])
                for i, t in enumerate(taps)
            )  # fmt: skip
            patch = xg[(slice(None), slice(None), *index)]  # (n, cg, *out)
            y[:, g * kg : (g + 1) * kg] += np.einsum("nc...,kc->nk...", patch, wg[(..., *taps)])
    return np.moveaxis(y, 1, -1) if channels_last else y


def conv_bias_act_forward(
    x: np.ndarray,
    w: np.ndarray,
    pads: Sequence[tuple[int, int]],
    strides: Sequence[int],
    dilations: Sequence[int],
    groups: int = 1,
    channels_last: bool = False,
    *,
    bias: np.ndarray | None = None,
    z: np.ndarray | None = None,
    alpha: float = 1.0,
    alpha2: float = 0.0,
    activation: str | None = None,
    coef: float | None = None,
    threshold: float | None = None,
) -> np.ndarray:
    """``act(alpha * conv(x, w) + alpha2 * z + bias)``, cuDNN's fused forward, in float64."""
    y = alpha * conv_forward(x, w, pads, strides, dilations, groups, channels_last)
    if z is not None:
        y = y + alpha2 * np.asarray(z, np.float64)
    if bias is not None:
        b = np.asarray(bias, np.float64)
        y = y + (b if channels_last else b.reshape((-1,) + (1,) * (y.ndim - 2)))
    if activation is not None:
        y = activation_forward(y, activation, coef, threshold)
    return y
