"""NumPy reference of Philox4x32-10 and of dropout with a counter-based mask.

The generator is Salmon et al.'s Philox4x32-10 (SC'11, Random123). The per-element
stream convention, shared bit for bit with ``cuda_src/common/philox.cuh``:

- key = (seed mod 2^32, seed >> 32); counter = (g mod 2^32, g >> 32, offset mod 2^32,
  offset >> 32) with g = e // 4 for element e (C order); element e takes word e % 4;
- element e is kept iff its word >= round(p * 2^32) (so p = 0 keeps all, p = 1 drops all);
- kept elements are scaled by float32(1 / (1 - p)) (the 32- and 16-bit kernels) or by
  1 / (1 - p) in float64 (the float64 kernels: ``dtype=np.float64``); dropped elements
  are 0. The mask does not depend on the dtype.
"""

from __future__ import annotations

from typing import Any

import numpy as np

_M0, _M1 = np.uint64(0xD2511F53), np.uint64(0xCD9E8D57)
_W0, _W1 = 0x9E3779B9, 0xBB67AE85
_MASK32 = np.uint64(0xFFFFFFFF)


def philox4x32_10(counter: Any, key: Any) -> np.ndarray:
    """Philox4x32-10 of counters ``(..., 4)`` and keys ``(..., 2)`` (uint32, broadcast);
    returns the ``(..., 4)`` uint32 outputs."""
    c = np.asarray(counter, dtype=np.uint64) & _MASK32
    k = np.asarray(key, dtype=np.uint64) & _MASK32
    c0, c1, c2, c3 = (c[..., i] for i in range(4))
    k0, k1 = k[..., 0], k[..., 1]
    for rnd in range(10):
        if rnd:
            k0 = (k0 + np.uint64(_W0)) & _MASK32
            k1 = (k1 + np.uint64(_W1)) & _MASK32
        p0 = _M0 * c0  # < 2^64: exact in uint64
        p1 = _M1 * c2
        c0, c1, c2, c3 = (
            (p1 >> np.uint64(32)) ^ c1 ^ k0,
            p1 & _MASK32,
            (p0 >> np.uint64(32)) ^ c3 ^ k1,
            p0 & _MASK32,
        )
    return np.stack(np.broadcast_arrays(c0, c1, c2, c3), axis=-1).astype(np.uint32)


def philox_words(n: int, seed: int, offset: int = 0) -> np.ndarray:
    """The uint32 random word of each of ``n`` elements of stream (seed, offset)."""
    groups = (n + 3) // 4
    g = np.arange(groups, dtype=np.uint64)
    counter = np.stack(
        [
            g & _MASK32,
            g >> np.uint64(32),
            np.full_like(g, offset & 0xFFFFFFFF),
            np.full_like(g, offset >> 32),
        ],
        axis=-1,
    )
    key = np.array([seed & 0xFFFFFFFF, seed >> 32], dtype=np.uint64)
    return philox4x32_10(counter, key).reshape(-1)[:n]


def drop_threshold(p: float) -> int:
    """Words below this are dropped: round(p * 2^32), in [0, 2^32]."""
    return int(round(float(p) * 2.0**32))


def dropout_scale(p: float, dtype: Any = np.float32) -> float:
    """The scale the kernels of storage ``dtype`` apply to kept elements (0 when p = 1):
    1 / (1 - p) rounded to float32 (float32, float16, bfloat16 compute in float), or
    exactly as a double for float64."""
    if p >= 1.0:
        return 0.0
    scale = 1.0 / (1.0 - float(p))
    return scale if np.dtype(dtype) == np.float64 else float(np.float32(scale))


def dropout_mask(shape: Any, p: float, seed: int, offset: int = 0) -> np.ndarray:
    """The boolean keep mask of a tensor of ``shape`` (C-order element numbering)."""
    shape = tuple(shape)
    n = int(np.prod(shape, dtype=np.int64))
    words = philox_words(n, seed, offset).astype(np.uint64)
    return (words >= np.uint64(drop_threshold(p)) if p < 1 else np.zeros(n, bool)).reshape(shape)


def dropout_forward(
    x: Any, p: float, seed: int, offset: int = 0, *, dtype: Any = np.float32
) -> np.ndarray:
    """float64 ``x * where(mask, scale, 0)`` (PyTorch's ``x * mask / (1 - p)``: a dropped NaN
    or inf gives NaN) with the scale of the kernels of storage ``dtype``
    (:func:`dropout_scale`; the default float32 scale whatever x's dtype)."""
    x64 = np.asarray(x).astype(np.float64)
    mask = dropout_mask(x64.shape, p, seed, offset)
    return x64 * np.where(mask, dropout_scale(p, dtype), 0.0)


def dropout_backward(
    dy: Any, p: float, seed: int, offset: int = 0, *, dtype: Any = np.float32
) -> np.ndarray:
    """float64 gradient: the same mask and scale applied to dy."""
    return dropout_forward(dy, p, seed, offset, dtype=dtype)


__all__ = [
    "drop_threshold",
    "dropout_backward",
    "dropout_forward",
    "dropout_mask",
    "dropout_scale",
    "philox4x32_10",
    "philox_words",
]
