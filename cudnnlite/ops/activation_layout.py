"""How an activation call's operands map onto its kernels: the contiguous variants
(vectorized when every pointer is 16-byte aligned) or the strided one, whose Layout (the
mirror of activation.cu's struct) holds up to MAX_DIMS dims after dropping size-1 dims and
merging those contiguous in every operand.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ..runtime.pointers import data_pointer
from ._arrays import collapse_dims

MAX_DIMS = 8
_OPERANDS = 4  # strided operand slots: out, x, dy, y

_LAYOUT_DTYPE = np.dtype(
    [
        ("size", "<i8", (MAX_DIMS,)),
        ("stride", "<i8", (_OPERANDS, MAX_DIMS)),
        ("ndim", "<i4"),
        ("reserved", "<i4"),
    ],
    align=True,
)


def _flip_negative(arrays: list[Any]) -> list[Any]:
    """Reverses every axis along which out (arrays[0]) runs backwards, in all operands
    alike: the elementwise correspondence is unchanged and out becomes ascending."""
    flips = tuple(slice(None, None, -1) if s < 0 else slice(None) for s in arrays[0].strides)
    if all(f.step is None for f in flips):
        return arrays
    return [a[flips] for a in arrays]


def _layout_struct(sizes: list[int], strides: list[list[int]]) -> np.void:
    layout = np.zeros((), dtype=_LAYOUT_DTYPE)
    nd = len(sizes)
    layout["ndim"] = nd
    layout["size"][:nd] = sizes[::-1]  # the kernel wants the innermost dim first
    for o, s in enumerate(strides):
        layout["stride"][o, :nd] = s[::-1]
    return layout[()]


class _Plan:
    """How to run one call: the variant, the (possibly flipped) operand views, and the
    strided kernel's Layout."""

    __slots__ = ("variant", "arrays", "layout")

    def __init__(self, variant: str, arrays: list[Any], layout: np.void | None = None) -> None:
        self.variant = variant
        self.arrays = arrays
        self.layout = layout


def _plan(arrays: list[Any]) -> _Plan | None:
    """arrays = [out, inputs...], all of one shape and dtype; None when more than
    MAX_DIMS dims remain after collapsing."""
    if all(a.flags.c_contiguous for a in arrays) or all(a.flags.f_contiguous for a in arrays):
        contiguous = True
    else:
        arrays = _flip_negative(arrays)
        itemsize = arrays[0].itemsize
        strides = [[s // itemsize for s in a.strides] for a in arrays]
        sizes, merged = collapse_dims(arrays[0].shape, strides)
        contiguous = len(sizes) <= 1 and all(not m or m[0] == 1 for m in merged)
        if not contiguous:
            if len(sizes) > MAX_DIMS:
                return None
            return _Plan("strided", arrays, _layout_struct(sizes, merged))
    aligned = all(data_pointer(a) % 16 == 0 for a in arrays)
    return _Plan("vec" if aligned else "scalar", arrays)
