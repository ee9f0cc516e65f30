"""grid_sample forward and backward against torch.nn.functional.grid_sample on CUDA in the
same run (the same x, grid and output gradient), in GB/s and the time ratio.

    python benchmarks/grid_sample.py [--small]

Table: spatial-transformer and flow-warping shapes: a 2-D STN on 64 x 64 feature maps
(N = 32, C = 64), optical-flow warping at 1/4 resolution of 1080p (N = 8, C = 128,
270 x 480), a channels-last fp16 variant of the warp, bicubic resampling, and a 3-D
volume registration warp (N = 2, C = 16, 64^3). "bwd" is grid_sample_backward (dx and
dgrid) for us, both gradients by autograd for PyTorch; ours runs deterministic (the
default, record + sort + gather) and atomic (``deterministic=False``: PyTorch's kind of
scatter). Bytes: x read once, grid read, output written (forward); plus dy read, dx and
dgrid written (backward) -- the compulsory traffic, so GB/s against the H200's ~4.3 TB/s
copy says how far from the roofline each row is (gathers rarely reach half of it). The
ratio is PyTorch's time over ours (> 1: we are faster); the issue 16 goal is >= 1.0x.

Method (DESIGN.md section 7): CUDA events, a warm-up, L2 flushed before each repeat, the
median. With --small or without a GPU a tiny row runs on the emulator so the script keeps
working in CI (under 5 s once the kernel module is compiled).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from typing import Any

import numpy as np
from _bench import (
    array_module_and_clock,
    import_cudnnlite,
    print_table,
    ratio_by_direction,
    time_into,
)

GOAL = 1.0


@dataclass(frozen=True)
class Row:
    name: str
    x: tuple[int, ...]  # (N, C, [D,] H, W)
    out: tuple[int, ...]  # output spatial size
    mode: str = "bilinear"
    padding: str = "zeros"
    dtype: str = "fp32"
    channels_last: bool = False


ROWS = (
    Row("stn 64x64", (32, 64, 64, 64), (64, 64)),
    Row("flow warp 1/4 1080p", (8, 128, 270, 480), (270, 480), padding="border"),
    Row(
        "flow warp NHWC fp16",
        (8, 128, 270, 480),
        (270, 480),
        padding="border",
        dtype="fp16",
        channels_last=True,
    ),  # fmt: skip
    Row("bicubic resample", (8, 32, 128, 128), (192, 192), mode="bicubic", padding="reflection"),
    Row("nearest 2x", (16, 64, 64, 64), (128, 128), mode="nearest"),
    Row("volume warp 64^3", (2, 16, 64, 64, 64), (64, 64, 64)),
)
SMALL = (Row("tiny", (2, 3, 9, 11), (7, 8)),)


def operands(row: Row) -> dict[str, np.ndarray]:
    """x, a smooth random warp of the identity grid (plus a little outside), dy."""
    rng = np.random.default_rng(0)
    nd = len(row.out)
    axes = [np.linspace(-1.05, 1.05, s) for s in row.out]
    mesh = np.meshgrid(*axes, indexing="ij")
    ident = np.stack(list(reversed(mesh)), -1)
    grid = ident[None] + 0.05 * rng.standard_normal((row.x[0], *row.out, nd))
    x = rng.standard_normal(row.x)
    dy = rng.standard_normal((row.x[0], row.x[1], *row.out))
    dt = np.float16 if row.dtype == "fp16" else np.float32
    return {"x": x.astype(dt), "grid": grid.astype(dt), "dy": dy.astype(dt)}


def traffic(row: Row, direction: str) -> int:
    """Compulsory bytes: x, grid and y (forward); plus dy, dx and dgrid (backward)."""
    item = 2 if row.dtype == "fp16" else 4
    n, c = row.x[:2]
    pts = n * math.prod(row.out)
    x = math.prod(row.x)
    fwd = (x + pts * len(row.out) + pts * c) * item
    if direction == "fwd":
        return fwd
    return (x + pts * len(row.out) + pts * c + x + pts * len(row.out)) * item


def _channels_last(xp: Any, a: Any) -> Any:
    perm = (0, *range(2, a.ndim), 1)
    back = (0, a.ndim - 1, *range(1, a.ndim - 1))
    return xp.ascontiguousarray(a.transpose(perm)).transpose(back)


def _torch_times(row: Row, ops: dict[str, np.ndarray], clock: Any) -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:
        return {"torch_error": f"{type(exc).__name__}: {exc}"}
    if not torch.cuda.is_available():
        return {}
    x = torch.tensor(ops["x"], device="cuda")
    if row.channels_last:
        fmt = torch.channels_last if x.ndim == 4 else torch.channels_last_3d
        x = x.contiguous(memory_format=fmt)
    x.requires_grad_(True)
    g = torch.tensor(ops["grid"], device="cuda", requires_grad=True)
    dy = torch.tensor(ops["dy"], device="cuda")
    f = torch.nn.functional.grid_sample
    kw = {"mode": row.mode, "padding_mode": row.padding, "align_corners": False}

    def fwd() -> Any:
        with torch.no_grad():
            return f(x, g, **kw)

    y = f(x, g, **kw)

    def bwd() -> Any:
        return torch.autograd.grad(y, (x, g), dy, retain_graph=True)

    out: dict[str, Any] = {}
    try:
        out["fwd"] = clock.time_ms(fwd)
        out["bwd"] = clock.time_ms(bwd)
    except Exception as exc:
        out["torch_error"] = f"{type(exc).__name__}: {str(exc)[:80]}"
    return out


def bench_row(cl: Any, row: Row, clock: Any, xp: Any) -> list[dict[str, Any]]:
    ops = operands(row)
    x, g, dy = (xp.asarray(ops[k]) for k in ("x", "grid", "dy"))
    if row.channels_last:
        x = _channels_last(xp, x)
    torch = _torch_times(row, ops, clock) if xp is not np else {}
    args = (row.mode, row.padding, False)
    runs = {
        "fwd": lambda: cl.grid_sample(x, g, *args),
        "bwd": lambda: cl.grid_sample_backward(dy, x, g, *args),
        "bwd atomic": lambda: cl.grid_sample_backward(dy, x, g, *args, deterministic=False),
    }
    rows = []
    for direction, fn in runs.items():
        r: dict[str, Any] = dict(row.__dict__, x=list(row.x), out=list(row.out))
        r["direction"] = direction
        ms = time_into(r, clock, fn, torch.get(direction.split()[0]))
        if ms is not None:
            r["gbs"] = traffic(row, direction.split()[0]) / (ms * 1e6)
        if "torch_error" in torch:
            r["torch_error"] = torch["torch_error"]
        rows.append(r)
    return rows


def run(small: bool = False) -> dict[str, Any]:
    cl = import_cudnnlite()
    # tiny operands on the emulator: a small flush keeps it short
    gpu, xp, clock = array_module_and_clock(small, 1 << 20)
    rows: list[dict[str, Any]] = []
    for row in ROWS if gpu else SMALL:
        rows += bench_row(cl, row, clock, xp)
    print_table(
        f"grid_sample on {'the GPU' if gpu else 'the emulator'} ({clock.name}), "
        "align_corners=False; ratio = PyTorch time / ours",
        ["row", "mode", "padding", "dtype", "dir", "ms", "GB/s", "torch ms", "torch/ours"],
        [[r["name"], r["mode"], r["padding"], r["dtype"] + " NHWC" * r["channels_last"],
          r["direction"], r.get("ms", r.get("error")), r.get("gbs"), r.get("torch_ms"),
          r.get("torch_over_ours")] for r in rows],
    )  # fmt: skip
    summary = ratio_by_direction(rows, ("fwd", "bwd", "bwd atomic"))
    return {"target": "cuda" if gpu else "cpu", "goal": GOAL, "rows": rows, "summary": summary}


def headlines(res: dict[str, Any]) -> list[str]:
    lines = [f"grid_sample {k} on {res['target']}: {v:.2f}x (goal >= {res['goal']}x)"
             for k, v in res["summary"].items()]  # fmt: skip
    errors = [r for r in res["rows"] if "error" in r]
    if errors:
        lines.append(f"grid_sample: {len(errors)} rows raised, e.g. {errors[0]['error']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="emulator, a tiny row")
    args = p.parse_args(argv)
    run(args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
