"""Cases of benchmarks/memory_bound.py for softmax, dropout and the tensor operations.

On a GPU: BERT-base attention scores (32 x 12 x 128 x 128) and vocabulary logits
(4096 x 30522) for softmax, dropout on BERT hidden states (32 x 128 x 768), a ResNet-50
bias add (32 x 256 x 56 x 56), NCHW <-> NHWC of a ResNet-50 feature map, and sum
reductions (per channel over N, H, W; per row over the last axis). On the emulator the
same calls on shapes scaled down (same channel structure, small N and spatial sizes).
Bytes moved are what a perfect kernel reads plus writes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from memory_bound import Case, Context

import cudnnlite.ops.dropout as dr
import cudnnlite.ops.reduce as rd
import cudnnlite.ops.softmax as sm
import cudnnlite.ops.tensor as tn


def _dtypes(ctx: Context) -> list[tuple[str, Any]]:
    from cudnnlite import dtypes

    out = [("fp32", np.float32), ("fp16", np.float16), ("fp64", np.float64)]
    if dtypes.BFLOAT16 is not None and ctx.target == "cuda":
        out.append(("bf16", dtypes.BFLOAT16.numpy))
    return out


def _shape(s: tuple[int, ...]) -> str:
    return "x".join(map(str, s))


def cases(ctx: Context) -> list[Case]:
    big = ctx.target == "cuda" and not ctx.small
    attn = (32, 12, 128, 128) if big else (2, 12, 16, 128)
    vocab = (4096, 30522) if big else (8, 30522)
    classes = (262144, 10) if big else (512, 10)  # short rows: 16 lanes per row (scalar)
    hidden = (32, 128, 768) if big else (2, 16, 768)
    fmap = (32, 256, 56, 56) if big else (2, 256, 7, 7)
    rows = (8192, 4096) if big else (64, 1024)
    torch = ctx.torch
    out: list[Case] = []
    for short, dt in _dtypes(ctx):
        item = np.dtype(dt).itemsize
        named = (("softmax attention", attn), ("softmax vocab logits", vocab),
                 ("softmax 10 classes", classes))  # fmt: skip
        for name, shape in named:
            x = ctx.randn(shape, dt, scale=4.0)
            y = sm.softmax(x)
            dy = ctx.randn(shape, dt)
            n = int(np.prod(shape))
            tx = ty = tdy = None
            if torch is not None:
                tx, ty, tdy = ctx.to_torch(x), ctx.to_torch(y), ctx.to_torch(dy)
            out.append(
                Case(
                    "softmax",
                    f"{name} fwd",
                    _shape(shape),
                    short,
                    2 * n * item,
                    lambda x=x: sm.softmax(x),
                    (lambda tx=tx: torch.softmax(tx, -1)) if torch else None,
                )
            )
            out.append(
                Case(
                    "softmax",
                    f"{name} bwd",
                    _shape(shape),
                    short,
                    3 * n * item,
                    lambda dy=dy, y=y: sm.softmax_backward(dy, y),
                    (
                        lambda tdy=tdy, ty=ty: torch.ops.aten._softmax_backward_data(
                            tdy, ty, -1, ty.dtype
                        )
                    )
                    if torch
                    else None,
                )
            )
        x = ctx.randn(hidden, dt)
        n = int(np.prod(hidden))
        tx = ctx.to_torch(x) if torch is not None else None
        out.append(
            Case(
                "dropout",
                "dropout p=0.1 fwd (regenerable mask)",
                _shape(hidden),
                short,
                2 * n * item,
                lambda x=x: dr.dropout(x, 0.1, 1234),
                (lambda tx=tx: torch.nn.functional.dropout(tx, 0.1, True)) if torch else None,
            )
        )
        c = ctx.randn(fmap, dt)
        bias = ctx.randn((1, fmap[1], 1, 1), dt)
        n = int(np.prod(fmap))
        tc = tb = None
        if torch is not None:
            tc, tb = ctx.to_torch(c), ctx.to_torch(bias)
        out.append(
            Case(
                "tensor",
                "add_tensor bias (in place)",
                _shape(fmap),
                short,
                2 * n * item,
                lambda c=c, bias=bias: tn.add_tensor(bias, c),
                (lambda tc=tc, tb=tb: tc.add_(tb)) if torch else None,
            )
        )
        out.append(
            Case(
                "tensor",
                "transform NCHW->NHWC",
                _shape(fmap),
                short,
                2 * n * item,
                lambda c=c: tn.nchw_to_nhwc(c),
                (lambda tc=tc: tc.permute(0, 2, 3, 1).contiguous()) if torch else None,
            )
        )
        nhwc = tn.nchw_to_nhwc(c)
        tn_ = ctx.to_torch(nhwc) if torch is not None else None
        out.append(
            Case(
                "tensor",
                "transform NHWC->NCHW",
                _shape(fmap),
                short,
                2 * n * item,
                lambda h=nhwc: tn.nhwc_to_nchw(h),
                (lambda t=tn_: t.permute(0, 3, 1, 2).contiguous()) if torch else None,
            )
        )
        out.append(
            Case(
                "tensor",
                "reduce sum over N,H,W",
                _shape(fmap),
                short,
                n * item,
                lambda c=c: rd.reduce_tensor(c, "sum", (0, 2, 3)),
                (lambda tc=tc: tc.sum(dim=(0, 2, 3))) if torch else None,
            )
        )
        nhwc_c = ctx.randn((fmap[0], fmap[2], fmap[3], fmap[1]), dt)
        bias_c = ctx.randn((fmap[1],), dt)
        tnc = tbc = None
        if torch is not None:
            tnc, tbc = ctx.to_torch(nhwc_c), ctx.to_torch(bias_c)
        out.append(
            Case(
                "tensor",
                "add_tensor bias NHWC (in place)",
                _shape(nhwc_c.shape),
                short,
                2 * n * item,
                lambda c=nhwc_c, bias=bias_c: tn.add_tensor(bias, c),
                (lambda tc=tnc, tb=tbc: tc.add_(tb)) if torch else None,
            )
        )
        out.append(
            Case(
                "tensor",
                "reduce sum of everything",
                _shape(fmap),
                short,
                n * item,
                lambda c=c: rd.reduce_tensor(c, "sum"),
                (lambda tc=tc: tc.sum()) if torch else None,
            )
        )
        r = ctx.randn(rows, dt)
        tr = ctx.to_torch(r) if torch is not None else None
        out.append(
            Case(
                "tensor",
                "reduce sum over last axis",
                _shape(rows),
                short,
                int(np.prod(rows)) * item,
                lambda r=r: rd.reduce_tensor(r, "sum", 1),
                (lambda tr=tr: tr.sum(dim=1)) if torch else None,
            )
        )
    return out
