"""CTC loss, forward and gradient, against torch.nn.functional.ctc_loss on CUDA in the same
run (the same log_probs, targets and lengths; fp32).

    python benchmarks/ctc.py [--small]

Table: shapes of real CTC users: character-level speech (DeepSpeech2-like: T = 400 frames
after striding, N = 32, C = 29 characters, S = 120), OCR lines (CRNN-like: T = 64, N = 64,
C = 97, S = 25) and word pieces (T = 400, N = 16, C = 1024, S = 100); input lengths and
target lengths vary over the batch. "fwd" is ctc_loss; "fwd+bwd" is ctc_loss then
ctc_loss_backward for us (the backward recomputes alpha: the forward saves nothing) and
the loss plus autograd's backward for PyTorch. The ratio is PyTorch's time over ours (> 1:
we are faster). The recursions are latency-bound (a barrier per frame in one block per
batch entry), so there is no roofline figure: frames per microsecond per batch entry is
the figure to watch.

Method (DESIGN.md section 7): CUDA events, a warm-up, L2 flushed before each repeat, the
median. With --small or without a GPU a tiny row runs on the emulator, so the script keeps
working in CI (under 5 s once the kernel module is compiled).
"""

from __future__ import annotations

import argparse
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


@dataclass(frozen=True)
class Row:
    name: str
    t: int
    n: int
    c: int
    s: int


ROWS = (
    Row("speech chars", 400, 32, 29, 120),
    Row("ocr lines", 64, 64, 97, 25),
    Row("word pieces", 400, 16, 1024, 100),
)
SMALL = (Row("tiny", 16, 2, 6, 4),)


def operands(row: Row) -> dict[str, np.ndarray]:
    """log_softmax'd log_probs, padded targets (no blank 0), lengths from 60% to 100%."""
    rng = np.random.default_rng(0)
    x = rng.standard_normal((row.t, row.n, row.c)).astype(np.float32)
    lp = x - np.log(np.exp(x).sum(-1, keepdims=True))
    frac = np.linspace(0.6, 1.0, row.n)
    il = np.maximum((row.t * frac).astype(np.int64), 1)
    # Keep every target feasible: at most half the frames (room for blanks between repeats).
    tl = np.minimum((row.s * frac).astype(np.int64), il // 2)
    tg = rng.integers(1, row.c, (row.n, row.s)).astype(np.int64)
    return {"lp": lp.astype(np.float32), "tg": tg, "il": il, "tl": tl}


def _torch_times(ops: dict[str, np.ndarray], clock: Any) -> dict[str, Any]:
    try:
        import torch
    except Exception as exc:
        return {"torch_error": f"{type(exc).__name__}: {exc}"}
    if not torch.cuda.is_available():
        return {}
    lp = torch.tensor(ops["lp"], device="cuda", requires_grad=True)
    tg = torch.tensor(ops["tg"], device="cuda")
    il = torch.tensor(ops["il"], device="cuda")
    tl = torch.tensor(ops["tl"], device="cuda")
    f = torch.nn.functional.ctc_loss

    def fwd() -> Any:
        with torch.no_grad():
            return f(lp, tg, il, tl)

    def fwd_bwd() -> Any:
        return torch.autograd.grad(f(lp, tg, il, tl), lp)

    out: dict[str, Any] = {}
    try:
        out["fwd"] = clock.time_ms(fwd)
        out["fwd+bwd"] = clock.time_ms(fwd_bwd)
    except Exception as exc:
        out["torch_error"] = f"{type(exc).__name__}: {str(exc)[:80]}"
    return out


def bench_row(cl: Any, row: Row, clock: Any, xp: Any) -> list[dict[str, Any]]:
    ops = operands(row)
    lp, tg = xp.asarray(ops["lp"]), xp.asarray(ops["tg"])
    il, tl = ops["il"], ops["tl"]
    torch = _torch_times(ops, clock)

    def fwd() -> Any:
        return cl.ctc_loss(lp, tg, il, tl)

    def fwd_bwd() -> Any:
        cl.ctc_loss(lp, tg, il, tl)
        return cl.ctc_loss_backward(1.0, lp, tg, il, tl)

    rows = []
    for direction, fn in (("fwd", fwd), ("fwd+bwd", fwd_bwd)):
        r: dict[str, Any] = dict(row.__dict__, direction=direction)
        ms = time_into(r, clock, fn, torch.get(direction))
        if ms is not None:
            r["frames_per_us"] = float(il.max()) / (ms * 1e3)
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
        f"CTC loss on {'the GPU' if gpu else 'the emulator'} ({clock.name}), fp32, "
        "reduction mean; ratio = PyTorch time / ours",
        ["row", "T", "N", "C", "S", "dir", "ms", "frames/us", "torch ms", "torch/ours"],
        [[r["name"], r["t"], r["n"], r["c"], r["s"], r["direction"], r.get("ms", r.get("error")),
          r.get("frames_per_us"), r.get("torch_ms"), r.get("torch_over_ours")]
         for r in rows],
    )  # fmt: skip
    summary = ratio_by_direction(rows, ("fwd", "fwd+bwd"))
    return {"target": "cuda" if gpu else "cpu", "rows": rows, "summary": summary}


def headlines(res: dict[str, Any]) -> list[str]:
    lines = [f"ctc {k} on {res['target']}: {v:.2f}x" for k, v in res["summary"].items()]
    errors = [r for r in res["rows"] if "error" in r]
    if errors:
        lines.append(f"ctc: {len(errors)} rows raised, e.g. {errors[0]['error']}")
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="emulator, a tiny row")
    args = p.parse_args(argv)
    run(args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
