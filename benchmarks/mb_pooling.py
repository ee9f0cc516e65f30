"""Cases of benchmarks/memory_bound.py for pooling.

On a GPU: ResNet-50's stem max pool (3x3/2, pad 1, on 32 x 64 x 112 x 112; NCHW fp32 and
NHWC fp16 as PyTorch's channels_last), its backward from the saved indices, and its head
global average pool (32 x 2048 x 7 x 7), forward and backward. On the emulator the same
calls on scaled-down shapes (same channel counts, small N and spatial sizes). Bytes moved
are what a perfect kernel reads plus writes (indices, int64, counted where they are
written or read).
"""

from __future__ import annotations

from typing import Any

import numpy as np
from mb_norm import DTYPES_LAYOUTS
from memory_bound import Case, Context

import cudnnlite.ops.pooling as P


def _shape(s: tuple[int, ...]) -> str:
    return "x".join(map(str, s))


def _torch_nchw(ctx: Context, a: Any, layout: str) -> Any:
    t = ctx.to_torch(a)
    return t.permute(0, 3, 1, 2) if layout == "NHWC" else t  # channels_last view


def cases(ctx: Context) -> list[Case]:
    big = ctx.target == "cuda" and not ctx.small
    stem = (32, 64, 112, 112) if big else (2, 64, 16, 16)
    head = (32, 2048, 7, 7) if big else (2, 256, 7, 7)
    torch = ctx.torch
    F = None
    if torch is not None:
        import torch.nn.functional as F  # noqa: N812
    out: list[Case] = []
    for short, dt, layout in DTYPES_LAYOUTS:
        item = np.dtype(dt).itemsize
        n, c, h, w = stem
        shape = stem if layout == "NCHW" else (n, h, w, c)
        x = ctx.randn(shape, dt)
        y, ind = P.max_pool2d(x, 3, 2, 1, return_indices=True, layout=layout)
        dy = ctx.randn(tuple(y.shape), dt)
        nx, ny = int(np.prod(shape)), int(np.prod(y.shape))
        tx = tdy = tind = None
        if torch is not None:
            tx = _torch_nchw(ctx, x, layout)
            ty, tind = F.max_pool2d(tx, 3, 2, 1, return_indices=True)
            tdy = torch.randn_like(ty)
        label = f"{_shape(shape)} {layout}"
        out.append(
            Case(
                "pooling",
                "max_pool2d 3x3/2 fwd",
                label,
                short,
                (nx + ny) * item,
                lambda x=x, layout=layout: P.max_pool2d(x, 3, 2, 1, layout=layout),
                (lambda tx=tx: F.max_pool2d(tx, 3, 2, 1)) if torch else None,
            )
        )
        out.append(
            Case(
                "pooling",
                "max_pool2d 3x3/2 bwd (indices)",
                label,
                short,
                (nx + ny) * item + ny * 8,
                lambda dy=dy, ind=ind, shape=shape, layout=layout: P.max_pool_backward(
                    dy, ind, shape, 3, 2, 1, layout=layout, deterministic=True
                ),
                (
                    lambda tdy=tdy, tx=tx, tind=tind: (
                        torch.ops.aten.max_pool2d_with_indices_backward(
                            tdy, tx, [3, 3], [2, 2], [1, 1], [1, 1], False, tind
                        )
                    )
                )
                if torch
                else None,
            )
        )
        hn, hc, hh, hw = head
        hshape = head if layout == "NCHW" else (hn, hh, hw, hc)
        hx = ctx.randn(hshape, dt)
        thx = _torch_nchw(ctx, hx, layout) if torch is not None else None
        out.append(
            Case(
                "pooling",
                "global_avg_pool fwd",
                f"{_shape(hshape)} {layout}",
                short,
                (int(np.prod(hshape)) + hn * hc) * item,
                lambda hx=hx, layout=layout: P.global_avg_pool(hx, layout=layout),
                (lambda thx=thx: F.adaptive_avg_pool2d(thx, 1)) if torch else None,
            )
        )
        hdy = ctx.randn((hn, hc, 1, 1) if layout == "NCHW" else (hn, 1, 1, hc), dt)
        thdy = _torch_nchw(ctx, hdy, layout) if torch is not None else None
        out.append(
            Case(
                "pooling",
                "global_avg_pool bwd",
                f"{_shape(hshape)} {layout}",
                short,
                (int(np.prod(hshape)) + hn * hc) * item,
                lambda hdy=hdy, hshape=hshape, layout=layout: P.adaptive_avg_pool_backward(
                    hdy, hshape, layout=layout
                ),
                (lambda thdy=thdy, thx=thx: torch.ops.aten._adaptive_avg_pool2d_backward(thdy, thx))
                if torch
                else None,
            )
        )
    return out
