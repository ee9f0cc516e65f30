"""NumPy float64 reference of pooling, forward and backward (PyTorch's semantics).

Every function takes arrays of any float dtype and returns float64 (indices int64).
Layouts: ``"NCHW"`` means ``(N, C, *spatial)`` and ``"NHWC"`` means ``(N, *spatial, C)``
for 1, 2 or 3 spatial dims (the number of dims of ``kernel``).

Rules (``torch.nn.functional.{max,avg}_pool*d`` and ``adaptive_*``):

- output size ``o = floor_or_ceil((i + 2p - d (k - 1) - 1) / s) + 1``; with ``ceil_mode``
  the last window must start inside the input or the left padding, so ``o`` drops by one
  when ``(o - 1) s >= i + p``;
- max pooling ignores padded positions; NaN wins (propagates; the last NaN of the
  window gives the index); the saved index is the flat position ``((d * H) + h) * W + w``
  in the input plane of the first maximum (-1 for a window of padding only, which
  dilation and ceil_mode allow over a small input);
- average pooling divides by ``divisor_override`` if given, else by the window clipped
  to the padded input (``count_include_pad``) or to the input itself;
- adaptive windows are ``[floor(o i / O), ceil((o + 1) i / O))``.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import numpy as np


def output_size(i: int, k: int, s: int, p: int, d: int = 1, ceil_mode: bool = False) -> int:
    """One spatial output extent, as PyTorch's ``pooling_output_shape``."""
    span = i + 2 * p - d * (k - 1) - 1
    o = (-(-span // s) if ceil_mode else span // s) + 1
    if ceil_mode and (o - 1) * s >= i + p:
        o -= 1
    return o


def _to_nc(x: Any, layout: str) -> np.ndarray:
    a = np.asarray(x).astype(np.float64)
    return np.moveaxis(a, -1, 1) if layout == "NHWC" else a


def _from_nc(a: np.ndarray, layout: str) -> np.ndarray:
    return np.ascontiguousarray(np.moveaxis(a, 1, -1) if layout == "NHWC" else a)


def _windows_fixed(
    in_sp: Sequence[int],
    out_sp: Sequence[int],
    k: Sequence[int],
    s: Sequence[int],
    p: Sequence[int],
    d: Sequence[int],
) -> Any:
    """Per output position: per dim the list of input coordinates (before clipping)."""
    for o in itertools.product(*(range(n) for n in out_sp)):
        yield o, [[o[j] * s[j] - p[j] + t * d[j] for t in range(k[j])] for j in range(len(k))]


def _flat(coords: Sequence[int], in_sp: Sequence[int]) -> int:
    f = 0
    for c, n in zip(coords, in_sp, strict=True):
        f = f * n + c
    return f


def _max_over(xp: np.ndarray, lists: list[list[int]], in_sp: Sequence[int]) -> tuple:
    """Max over the valid positions of a window for every (n, c): value and flat index."""
    n, c = xp.shape[:2]
    best = np.full((n, c), -np.inf)
    idx = np.full((n, c), -1, dtype=np.int64)
    first = True
    for pos in itertools.product(*lists):
        if any(q < 0 or q >= m for q, m in zip(pos, in_sp, strict=True)):
            continue
        v = xp[(slice(None), slice(None), *pos)]
        f = _flat(pos, in_sp)
        if first:
            best, idx, first = v.copy(), np.full((n, c), f, dtype=np.int64), False
            continue
        take = (v > best) | np.isnan(v)  # a later NaN wins too, as PyTorch's kernels
        best = np.where(take, v, best)
        idx = np.where(take, f, idx)
    return best, idx


def max_pool(
    x: Any,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    dilation: Sequence[int],
    ceil_mode: bool = False,
    layout: str = "NCHW",
) -> tuple[np.ndarray, np.ndarray]:
    """Max pooling over len(kernel) spatial dims: (y, indices)."""
    a = _to_nc(x, layout)
    in_sp = a.shape[2:]
    out_sp = [
        output_size(i, k, s, p, d, ceil_mode)
        for i, k, s, p, d in zip(in_sp, kernel, stride, padding, dilation, strict=True)
    ]
    y = np.empty(a.shape[:2] + tuple(out_sp))
    ind = np.empty(y.shape, dtype=np.int64)
    for o, lists in _windows_fixed(in_sp, out_sp, kernel, stride, padding, dilation):
        y[(..., *o)], ind[(..., *o)] = _max_over(a, lists, in_sp)
    return _from_nc(y, layout), _from_nc(ind, layout)


def avg_pool(
    x: Any,
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    layout: str = "NCHW",
) -> np.ndarray:
    """Average pooling over len(kernel) spatial dims."""
    a = _to_nc(x, layout)
    in_sp = a.shape[2:]
    out_sp = [
        output_size(i, k, s, p, 1, ceil_mode)
        for i, k, s, p in zip(in_sp, kernel, stride, padding, strict=True)
    ]
    y = np.empty(a.shape[:2] + tuple(out_sp))
    for o in itertools.product(*(range(n) for n in out_sp)):
        y[(..., *o)] = _avg_window(
            a,
            o,
            in_sp,
            kernel,
            stride,
            padding,
            count_include_pad,
            divisor_override,
            sum_only=False,
        )
    return _from_nc(y, layout)


def _avg_bounds(o, in_sp, kernel, stride, padding, count_include_pad, divisor_override):
    starts, ends, pool = [], [], 1
    clipped = 1
    for j in range(len(kernel)):
        st = o[j] * stride[j] - padding[j]
        en = min(st + kernel[j], in_sp[j] + padding[j])
        pool *= en - st
        st, en = max(st, 0), min(en, in_sp[j])
        clipped *= max(en - st, 0)
        starts.append(st)
        ends.append(en)
    if divisor_override:
        div = divisor_override
    else:
        div = pool if count_include_pad else clipped
    return starts, ends, div


def _avg_window(a, o, in_sp, kernel, stride, padding, cip, dov, sum_only):
    starts, ends, div = _avg_bounds(o, in_sp, kernel, stride, padding, cip, dov)
    sl = tuple(slice(s, e) for s, e in zip(starts, ends, strict=True))
    axes = tuple(range(2, 2 + len(kernel)))
    return a[(slice(None), slice(None), *sl)].sum(axis=axes) / div


def _adaptive_range(o: int, out: int, inp: int) -> tuple[int, int]:
    return (o * inp) // out, -(-((o + 1) * inp) // out)


def adaptive_avg_pool(x: Any, output_size: Sequence[int], layout: str = "NCHW") -> np.ndarray:
    a = _to_nc(x, layout)
    in_sp = a.shape[2:]
    y = np.empty(a.shape[:2] + tuple(output_size))
    axes = tuple(range(2, 2 + len(output_size)))
    for o in itertools.product(*(range(n) for n in output_size)):
        sl = tuple(slice(*_adaptive_range(o[j], output_size[j], in_sp[j])) for j in range(len(o)))
        y[(..., *o)] = a[(slice(None), slice(None), *sl)].mean(axis=axes)
    return _from_nc(y, layout)


def adaptive_max_pool(
    x: Any, output_size: Sequence[int], layout: str = "NCHW"
) -> tuple[np.ndarray, np.ndarray]:
    a = _to_nc(x, layout)
    in_sp = a.shape[2:]
    y = np.empty(a.shape[:2] + tuple(output_size))
    ind = np.empty(y.shape, dtype=np.int64)
    for o in itertools.product(*(range(n) for n in output_size)):
        lists = [
            list(range(*_adaptive_range(o[j], output_size[j], in_sp[j]))) for j in range(len(o))
        ]
        y[(..., *o)], ind[(..., *o)] = _max_over(a, lists, in_sp)
    return _from_nc(y, layout), _from_nc(ind, layout)


def global_avg_pool(x: Any, spatial_dims: int = 2, layout: str = "NCHW") -> np.ndarray:
    return adaptive_avg_pool(x, (1,) * spatial_dims, layout)


# ------------------------------------------------------------------ backward


def max_pool_backward(
    dy: Any, indices: Any, input_shape: Sequence[int], layout: str = "NCHW"
) -> np.ndarray:
    """Scatters dy to the saved argmax positions (summing where windows share one); an
    index of -1 (a window of padding only) credits nothing."""
    g = _to_nc(dy, layout)
    ind = np.asarray(indices)
    ind = np.moveaxis(ind, -1, 1) if layout == "NHWC" else ind
    shape = list(input_shape)
    if layout == "NHWC":
        shape = [shape[0], shape[-1], *shape[1:-1]]
    n, c = shape[:2]
    plane = math.prod(shape[2:])
    dx = np.zeros((n, c, plane))
    out_plane = math.prod(g.shape[2:])  # (not -1: an empty batch has no size to infer)
    gi = g.reshape(n, c, out_plane)
    ii = ind.reshape(n, c, out_plane)
    held = ii >= 0  # (a negative index would wrap around to the plane's end)
    for b in range(n):
        for ch in range(c):
            np.add.at(dx[b, ch], ii[b, ch][held[b, ch]], gi[b, ch][held[b, ch]])
    return _from_nc(dx.reshape(shape), layout)


def avg_pool_backward(
    dy: Any,
    input_shape: Sequence[int],
    kernel: Sequence[int],
    stride: Sequence[int],
    padding: Sequence[int],
    ceil_mode: bool = False,
    count_include_pad: bool = True,
    divisor_override: int | None = None,
    layout: str = "NCHW",
) -> np.ndarray:
    g = _to_nc(dy, layout)
    shape = list(input_shape)
    if layout == "NHWC":
        shape = [shape[0], shape[-1], *shape[1:-1]]
    in_sp = shape[2:]
    dx = np.zeros(shape)
    for o in itertools.product(*(range(n) for n in g.shape[2:])):
        starts, ends, div = _avg_bounds(
            o, in_sp, kernel, stride, padding, count_include_pad, divisor_override
        )
        sl = tuple(slice(s, e) for s, e in zip(starts, ends, strict=True))
        share = g[(..., *o)] / div
        dx[(slice(None), slice(None), *sl)] += share.reshape(share.shape + (1,) * len(o))
    return _from_nc(dx, layout)


def adaptive_avg_pool_backward(
    dy: Any, input_shape: Sequence[int], layout: str = "NCHW"
) -> np.ndarray:
    g = _to_nc(dy, layout)
    shape = list(input_shape)
    if layout == "NHWC":
        shape = [shape[0], shape[-1], *shape[1:-1]]
    in_sp = shape[2:]
    out_sp = g.shape[2:]
    dx = np.zeros(shape)
    for o in itertools.product(*(range(n) for n in out_sp)):
        rng = [_adaptive_range(o[j], out_sp[j], in_sp[j]) for j in range(len(o))]
        sl = tuple(slice(*r) for r in rng)
        count = math.prod(e - s for s, e in rng)
        share = g[(..., *o)] / count
        dx[(slice(None), slice(None), *sl)] += share.reshape(share.shape + (1,) * len(o))
    return _from_nc(dx, layout)


__all__ = [
    "adaptive_avg_pool",
    "adaptive_avg_pool_backward",
    "adaptive_max_pool",
    "avg_pool",
    "avg_pool_backward",
    "global_avg_pool",
    "max_pool",
    "max_pool_backward",
    "output_size",
]
