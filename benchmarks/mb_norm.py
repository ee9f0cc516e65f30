"""Cases of benchmarks/memory_bound.py for normalization.

On a GPU: batch norm on a ResNet-50 feature map (32 x 256 x 56 x 56; NCHW fp32 and NHWC
fp16 as PyTorch's channels_last): training forward, inference forward, backward, and
the fused add + relu; layer norm and RMS norm on BERT-large hidden states (32*128 rows
of 1024), group norm (32 groups) on 32 x 256 x 56 x 56 and on a diffusion U-Net's
2 x 320 x 64 x 64 (NCHW, and NHWC against a channels_last tensor). On the emulator the
same calls on scaled-down shapes. Bytes moved are what a perfect kernel reads plus writes: batch
norm training reads x twice (statistics, then normalization: a feature map does not
fit in cache) and writes y; its backward reads dy and x twice and writes dx; the row
norms read each row once (it stays in cache between passes) and write once.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from memory_bound import Case, Context

import cudnnlite.ops.batch_norm as BN
import cudnnlite.ops.group_norm as GN
import cudnnlite.ops.row_norm as ROW


def _shape(s: tuple[int, ...]) -> str:
    return "x".join(map(str, s))


def _torch_nchw(ctx: Context, a: Any, layout: str) -> Any:
    t = ctx.to_torch(a)
    return t.permute(0, 3, 1, 2) if layout == "NHWC" else t


# (dtype, NumPy type, layout): fp32 NCHW, fp16 channels-last as PyTorch's AMP runs it,
# fp64 NCHW (cuDNN's double path on a GPU).
DTYPES_LAYOUTS = (
    ("fp32", np.float32, "NCHW"),
    ("fp16", np.float16, "NHWC"),
    ("fp64", np.float64, "NCHW"),
)


def _bn_cases(ctx: Context, F: Any) -> list[Case]:
    big = ctx.target == "cuda" and not ctx.small
    fmap = (32, 256, 56, 56) if big else (2, 256, 8, 8)
    xp = ctx.xp
    torch = ctx.torch
    out: list[Case] = []
    for short, dt, layout in DTYPES_LAYOUTS:
        item = np.dtype(dt).itemsize
        n, c, h, w = fmap
        shape = fmap if layout == "NCHW" else (n, h, w, c)
        nx = int(np.prod(shape))
        x, z, dy = ctx.randn(shape, dt), ctx.randn(shape, dt), ctx.randn(shape, dt)
        pdt = np.float64 if short == "fp64" else np.float32  # parameters: fp32 but for fp64
        wt, bs = xp.ones(c, pdt), xp.zeros(c, pdt)
        rm, rv = xp.zeros(c, pdt), xp.ones(c, pdt)
        _, mean, invstd = BN.batch_norm_forward_training(x, wt, bs, layout=layout)
        t = {}
        if torch is not None:
            t = {k: _torch_nchw(ctx, a, layout) for k, a in (("x", x), ("z", z), ("dy", dy))}
            t.update(
                {
                    k: torch.as_tensor(a, device="cuda")
                    for k, a in (
                        ("w", wt),
                        ("b", bs),
                        ("rm", rm),
                        ("rv", rv),
                        ("mean", mean),
                        ("invstd", invstd),
                    )
                }
            )
        label = f"{_shape(shape)} {layout}"
        out.append(
            Case(
                "batch_norm",
                "bn train fwd",
                label,
                short,
                3 * nx * item,
                lambda x=x, wt=wt, bs=bs, rm=rm, rv=rv, layout=layout: (
                    BN.batch_norm_forward_training(x, wt, bs, rm, rv, layout=layout)
                ),
                (lambda t=t: F.batch_norm(t["x"], t["rm"], t["rv"], t["w"], t["b"], True))
                if torch
                else None,
            )
        )
        out.append(
            Case(
                "batch_norm",
                "bn inference fwd",
                label,
                short,
                2 * nx * item,
                lambda x=x, wt=wt, bs=bs, rm=rm, rv=rv, layout=layout: (
                    BN.batch_norm_forward_inference(x, rm, rv, wt, bs, layout=layout)
                ),
                (lambda t=t: F.batch_norm(t["x"], t["rm"], t["rv"], t["w"], t["b"], False))
                if torch
                else None,
            )
        )
        out.append(
            Case(
                "batch_norm",
                "bn bwd",
                label,
                short,
                5 * nx * item,
                lambda dy=dy, x=x, mean=mean, invstd=invstd, wt=wt, layout=layout: (
                    BN.batch_norm_backward(dy, x, mean, invstd, wt, layout=layout)
                ),
                (
                    lambda t=t: torch.ops.aten.native_batch_norm_backward(
                        t["dy"],
                        t["x"],
                        t["w"],
                        t["rm"],
                        t["rv"],
                        t["mean"],
                        t["invstd"],
                        True,
                        1e-5,
                        [True, True, True],
                    )
                )
                if torch
                else None,
            )
        )
        out.append(
            Case(
                "batch_norm",
                "bn+add+relu train fwd",
                label,
                short,
                4 * nx * item,
                lambda x=x, z=z, wt=wt, bs=bs, layout=layout: BN.batch_norm_forward_training(
                    x, wt, bs, z=z, activation="relu", layout=layout
                ),
                (
                    lambda t=t: torch.relu(
                        F.batch_norm(t["x"], t["rm"], t["rv"], t["w"], t["b"], True) + t["z"]
                    )
                )
                if torch
                else None,
            )
        )
    return out


def _row_cases(ctx: Context, F: Any) -> list[Case]:
    big = ctx.target == "cuda" and not ctx.small
    rows = (32 * 128, 1024) if big else (64, 1024)
    gmap = (32, 256, 56, 56) if big else (2, 256, 8, 8)
    # a diffusion U-Net's group norm: 2 x 32 groups of 40960 (split statistics)
    unet = (2, 320, 64, 64) if big else (1, 32, 32, 32)
    torch = ctx.torch
    out: list[Case] = []
    for short, dt in (("fp32", np.float32), ("fp16", np.float16), ("fp64", np.float64)):
        item = np.dtype(dt).itemsize
        x, dy = ctx.randn(rows, dt), ctx.randn(rows, dt)
        w, b = ctx.randn((rows[1],), dt), ctx.randn((rows[1],), dt)
        _, mean, rstd = ROW.layer_norm_forward(x, (rows[1],), w, b)
        n = int(np.prod(rows))
        t = {}
        if torch is not None:
            t = {k: ctx.to_torch(a) for k, a in (("x", x), ("dy", dy), ("w", w), ("b", b))}
        out.append(
            Case(
                "layer_norm",
                "layer_norm fwd",
                _shape(rows),
                short,
                2 * n * item,
                lambda x=x, w=w, b=b: ROW.layer_norm(x, (rows[1],), w, b),
                (lambda t=t: F.layer_norm(t["x"], (rows[1],), t["w"], t["b"])) if torch else None,
            )
        )
        out.append(
            Case(
                "layer_norm",
                "layer_norm bwd (dx, dw, db)",
                _shape(rows),
                short,
                3 * n * item,
                lambda dy=dy, x=x, mean=mean, rstd=rstd, w=w, b=b: ROW.layer_norm_backward(
                    dy, x, (rows[1],), mean, rstd, w, b
                ),
                None,
            )
        )
        out.append(
            Case(
                "rms_norm",
                "rms_norm fwd",
                _shape(rows),
                short,
                2 * n * item,
                lambda x=x, w=w: ROW.rms_norm(x, (rows[1],), w, 1e-6),
                (lambda t=t: F.rms_norm(t["x"], (rows[1],), t["w"], 1e-6))
                if torch is not None and hasattr(F, "rms_norm")
                else None,
            )
        )
        # the U-Net's group norm also channels-last (NHWC: split along H*W at small batch;
        # PyTorch's side is the same memory as a channels_last tensor)
        for shape, groups, layout in ((gmap, 32, "NCHW"), (unet, 32 if big else 4, "NCHW"),
                                      (unet, 32 if big else 4, "NHWC")):  # fmt: skip
            n, c, h, wd = shape
            stored = shape if layout == "NCHW" else (n, h, wd, c)
            gx = ctx.randn(stored, dt)
            gw, gb = ctx.randn((c,), dt), ctx.randn((c,), dt)
            tg = (
                (_torch_nchw(ctx, gx, layout), ctx.to_torch(gw), ctx.to_torch(gb))
                if torch
                else None
            )
            out.append(
                Case(
                    "group_norm",
                    f"group_norm G={groups} fwd" + (" NHWC" if layout == "NHWC" else ""),
                    _shape(stored),
                    short,
                    2 * int(np.prod(shape)) * item,
                    lambda gx=gx, gw=gw, gb=gb, g=groups, lay=layout: GN.group_norm(
                        gx, g, gw, gb, layout=lay
                    ),
                    (lambda tg=tg, g=groups: F.group_norm(tg[0], g, tg[1], tg[2]))
                    if torch
                    else None,
                )
            )
    return out


def cases(ctx: Context) -> list[Case]:
    F = None
    if ctx.torch is not None:
        import torch.nn.functional as F  # noqa: N812
    return _bn_cases(ctx, F) + _row_cases(ctx, F)
