"""Recurrent networks (LSTM, GRU), forward and forward+backward: the dispatcher's choice and
every applicable solver, in TFLOP/s, with the time ratio against ``torch.nn.LSTM`` /
``torch.nn.GRU`` (cuDNN) on the same weights, measured in the same run.

    python benchmarks/rnn.py [--small] [--mode lstm|gru ...] [--hidden 512 ...]
                             [--batch 64 ...] [--dtype fp32|fp16 ...]
                             [--direction fwd|fwd+bwd ...] [--no-solvers] [--budget-s S]

Table (issue 14): hidden 256/512/1024, batch 1/8/64, sequence 100, input size = hidden,
one layer, plus one 2-layer bidirectional LSTM row; fp32 (TF32 off on both sides) and
fp16. FLOPs: ``RnnProblem.flops`` (the GEMMs only); forward+backward adds the backward
problem's. The ratio is PyTorch's time over ours (> 1: we are faster). Goals on an H200:
>= 1.0x cuDNN at batch 64, >= 1.5x at batch <= 8 (there through the persistent solver).
Each row also reports the relative error of our output against PyTorch's on the same
weights (y for the forward, dx for forward+backward): a benchmark measures, it never
asserts, but a wrong kernel must not pass for a fast one.

Our side runs on one flat weight buffer (``pack_rnn_weights``: no per-call stacking);
PyTorch's forward runs under ``no_grad`` (cuDNN's inference path) against our
``training=False``; forward+backward is cuDNN's training forward and
``torch.autograd.grad`` for x and every weight against our ``training=True`` forward and
``rnn_backward``.

Method (DESIGN.md section 7): CUDA events, a warm-up, L2 flushed before each repeat, the
median. With --small or without a GPU the same code runs on the emulator with one tiny
row per mode (T=5, B=2, H=8) so the script keeps working in CI; PyTorch's figure is then
its CPU time, a reference only (no ratio is formed).
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np
from _bench import (
    array_module_and_clock,
    geomean,
    import_cudnnlite,
    print_table,
)

GOALS = {"batch 64": 1.0, "batch <= 8": 1.5}
DIRECTIONS = ("fwd", "fwd+bwd")
SEQ = 100
HIDDENS = (256, 512, 1024)
BATCHES = (1, 8, 64)
# run_all.py's run on a GPU (the device check): the whole table would not fit its step, so
# LSTM on every shape, GRU at hidden 512, the bidirectional row; rows past the budget are
# listed as skipped rather than cut by the step's timeout (which would lose them all).
QUICK_BUDGET_S = 35.0


@dataclass(frozen=True)
class Row:
    mode: str
    t: int
    b: int
    h: int
    layers: int = 1
    bidirectional: bool = False


def table(small: bool, modes: list[str], hiddens: list[int], batches: list[int],
          quick: bool) -> list[Row]:  # fmt: skip
    if small:
        # One per mode; the GRU one 2-layer bidirectional so that path runs in CI too.
        tiny = {"lstm": Row("lstm", 5, 2, 8), "gru": Row("gru", 5, 2, 8, 2, True)}
        return [tiny[m] for m in modes]
    rows = []
    for mode in modes:
        for h in hiddens:
            if quick and mode == "gru" and h != 512:
                continue
            rows += [Row(mode, SEQ, b, h) for b in batches]
    if "lstm" in modes:
        rows.append(Row("lstm", SEQ, 64, 512, 2, True))
    return rows


def problem_of(row: Row, dtype: str) -> Any:
    from cudnnlite.problems.rnn import RnnProblem

    return RnnProblem(mode=row.mode, t=row.t, b=row.b, i=row.h, h=row.h, layers=row.layers,
                      bidirectional=row.bidirectional, dtype=dtype)  # fmt: skip


def flops(row: Row, dtype: str, direction: str) -> int:
    p = problem_of(row, dtype)
    return p.flops() + (p.backward().flops() if direction == "fwd+bwd" else 0)


def _rel_err(ours: Any, ref: Any) -> float:
    """max |ours - ref| / max |ref|, in float64 on the host."""
    a = np.asarray(ours.get() if hasattr(ours, "get") else ours, dtype=np.float64)
    b = np.asarray(ref, dtype=np.float64)
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-30))


# ------------------------------------------------------------------ operands


@dataclass
class Operands:
    """One row's data on our backend, and PyTorch's side of it when torch imports."""

    flat: Any  # pack_rnn_weights of the module's weights
    x: Any
    dy: Any
    module: Any = None  # torch.nn.LSTM/GRU on the same weights (same memory through DLPack)
    tx: Any = None
    tdy: Any = None


def _torch(gpu: bool) -> Any:
    try:
        import torch
    except Exception:
        return None
    if gpu and not torch.cuda.is_available():
        return None
    if not gpu:
        # A reference time only; its thread pool would fight the emulator's OS threads for
        # the cores (a T=5 GRU took 200 ms on a busy 2-core machine). No cuDNN flags: they
        # mean nothing on the CPU, and a process that imported torch's OpInfo tables (the
        # test suite) has them frozen.
        torch.set_num_threads(1)
        return torch
    # fp32 means fp32 on both sides: cuDNN's RNN GEMMs follow cudnn.allow_tf32.
    torch.backends.cudnn.allow_tf32 = False
    torch.backends.cuda.matmul.allow_tf32 = False
    return torch


def _torch_to_host(t: Any) -> np.ndarray:
    return t.detach().float().cpu().numpy()


def _random_weights(row: Row, npdt: Any, rng: Any) -> dict[str, np.ndarray]:
    """PyTorch's names and init (uniform in +-1/sqrt(H)) without PyTorch."""
    from cudnnlite.problems.rnn import GATES

    gh, k, out = GATES[row.mode] * row.h, row.h**-0.5, {}
    dirs = 2 if row.bidirectional else 1
    for layer in range(row.layers):
        i = row.h if layer == 0 else dirs * row.h
        for sfx in ("", "_reverse")[:dirs]:
            shapes = {"weight_ih": (gh, i), "weight_hh": (gh, row.h), "bias_ih": (gh,),
                      "bias_hh": (gh,)}  # fmt: skip
            for name, shape in shapes.items():
                out[f"{name}_l{layer}{sfx}"] = rng.uniform(-k, k, shape).astype(npdt)
    return out


def operands(cl: Any, row: Row, dtype: str, xp: Any, torch: Any) -> Operands:
    npdt = {"fp16": np.float16, "fp32": np.float32}[dtype]
    rng = np.random.default_rng(0)
    dirs = 2 if row.bidirectional else 1
    x = xp.asarray(rng.standard_normal((row.t, row.b, row.h), dtype=np.float32).astype(npdt))
    dy = xp.asarray(
        rng.standard_normal((row.t, row.b, dirs * row.h), dtype=np.float32).astype(npdt)
    )
    kw = dict(mode=row.mode, num_layers=row.layers, bidirectional=row.bidirectional)
    if torch is None:
        flat = cl.pack_rnn_weights(_random_weights(row, npdt, rng), **kw)
        return Operands(flat, x, dy)
    cls = {"lstm": torch.nn.LSTM, "gru": torch.nn.GRU}[row.mode]
    device = "cuda" if xp.__name__ == "cupy" else "cpu"
    torch.manual_seed(0)
    module = cls(row.h, row.h, num_layers=row.layers, bidirectional=row.bidirectional)
    module = module.to(device=device, dtype={"fp16": torch.float16, "fp32": torch.float32}[dtype])
    flat = cl.pack_rnn_weights(cl.rnn_weights_from_torch(module), **kw)
    tx = torch.from_dlpack(x).detach().requires_grad_()
    return Operands(flat, x, dy, module, tx, torch.from_dlpack(dy))


def torch_fn(ops: Operands, direction: str) -> Any:
    """PyTorch's call on the same data: y (fwd) or (dx, *dweights) (fwd+bwd)."""
    import torch

    m, tx, tdy = ops.module, ops.tx, ops.tdy
    if direction == "fwd":

        def fn() -> Any:
            with torch.no_grad():
                return m(tx)[0]

        return fn
    params = list(m.parameters())

    def fn_train() -> Any:
        return torch.autograd.grad(m(tx)[0], [tx, *params], tdy)

    return fn_train


def our_fn(cl: Any, row: Row, ops: Operands, direction: str, fwd_algo: str) -> Any:
    """Our call: y (fwd) or (dx, dhx, dcx, dweights) (fwd+bwd)."""
    kw = dict(mode=row.mode, num_layers=row.layers, bidirectional=row.bidirectional)
    if direction == "fwd":
        return lambda: cl.rnn(ops.x, None, ops.flat, algo=fwd_algo, **kw)[0]

    def fn() -> Any:
        reserve = cl.rnn(ops.x, None, ops.flat, training=True, algo=fwd_algo, **kw)[-1]
        return cl.rnn_backward(ops.dy, None, None, reserve)

    return fn


# ------------------------------------------------------------------ one row


def bench_row(cl: Any, row: Row, dtype: str, direction: str, clock: Any, xp: Any,
              solvers: bool, torch: Any) -> list[dict[str, Any]]:  # fmt: skip
    from cudnnlite.dispatch import registry
    from cudnnlite.dispatch.select import select, usable
    from cudnnlite.runtime.caps import capabilities
    from cudnnlite.runtime.select import backend_by_name

    gpu = xp.__name__ == "cupy"
    backend = backend_by_name("cuda" if gpu else "cpu")
    fwd = problem_of(row, dtype)
    caps = capabilities(backend)
    names = ["auto"] + [s.name for s in registry.solvers(fwd.family) if usable(s, fwd, caps)]
    names = names if solvers else ["auto"]
    try:
        chosen = select(fwd, backend).solver.name
        if direction == "fwd+bwd":
            chosen += " + " + select(fwd.backward(), backend).solver.name
    except Exception as exc:  # the auto row's call raises the same and reports it
        chosen = f"auto ({type(exc).__name__})"
    base: dict[str, Any] = dict(row.__dict__, dtype=dtype, direction=direction,
                                flop=flops(row, dtype, direction))  # fmt: skip
    ops = operands(cl, row, dtype, xp, torch)
    ref = None
    if ops.module is not None:
        tfn = torch_fn(ops, direction)
        try:
            out = tfn()
            ref = _torch_to_host(out if direction == "fwd" else out[0])
            base["torch_ms"] = clock.time_ms(tfn)
            base["torch_device"] = "cuda" if gpu else "cpu"
        except Exception as exc:  # cuDNN may refuse a shape: report it, time ours anyway
            base["torch_error"] = f"{type(exc).__name__}: {str(exc)[:80]}"
    rows = []
    for name in dict.fromkeys(names):
        label = chosen if name == "auto" else name
        if name != "auto" and direction == "fwd+bwd":
            label += " + auto"
        r = dict(base, solver=label, auto=name == "auto")
        fn = our_fn(cl, row, ops, direction, name)
        try:
            if ref is not None:  # also the warm-up: the first call compiles
                out = fn()
                r["rel_err"] = _rel_err(out if direction == "fwd" else out[0], ref)
            ms = clock.time_ms(fn)
            r.update(ms=ms, tflops=base["flop"] / ms / 1e9)
            if gpu and "torch_ms" in base:  # a CPU time against the emulator means nothing
                r["torch_over_ours"] = base["torch_ms"] / ms
        except Exception as exc:  # a benchmark reports, it never stops at one failure
            r["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
        rows.append(r)
    return rows


# ------------------------------------------------------------------ summary


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per direction and goal group, torch/ours of the dispatcher's choice: geo-mean and
    worst; the largest error against PyTorch per dtype; counts of failed and skipped rows."""
    out: dict[str, Any] = {}
    groups = {"batch 64": lambda b: b == 64, "batch <= 8": lambda b: b <= 8}
    for direction in DIRECTIONS:
        for group, member in groups.items():
            vals = [r["torch_over_ours"] for r in rows if r.get("auto")
                    and r["direction"] == direction and member(r["b"])
                    and "torch_over_ours" in r]  # fmt: skip
            if vals:
                out[f"{direction} {group}"] = {"geo_mean": geomean(vals), "min": min(vals),
                                               "rows": len(vals), "goal": GOALS[group]}  # fmt: skip
    errs: dict[str, float] = {}
    for r in rows:
        if "rel_err" in r:
            errs[r["dtype"]] = max(errs.get(r["dtype"], 0.0), r["rel_err"])
    return {"ratios": out, "max_rel_err": errs,
            "errors": sum("error" in r for r in rows),
            "skipped": sum("skipped" in r for r in rows)}  # fmt: skip


def headlines(res: dict[str, Any]) -> list[str]:
    """run_all.py's lines for this benchmark."""
    summ, target = res["summary"], res["target"]
    lines = []
    for name, s in summ["ratios"].items():
        lines.append(f"rnn {name} on {target}: torch/ours geo-mean {s['geo_mean']:.2f}x, min "
                     f"{s['min']:.2f}x over {s['rows']} rows (goal >= {s['goal']}x)")  # fmt: skip
    measured = sum("ms" in r for r in res["rows"])
    errs = ", ".join(f"{dt} {e:.1e}" for dt, e in summ["max_rel_err"].items()) or "n/a"
    torch_on = res.get("torch_device") or "no torch"
    lines.append(f"rnn on {target}: {measured} timed rows, largest error against torch "
                 f"({torch_on}): {errs}")  # fmt: skip
    failed = [r for r in res["rows"] if "error" in r]
    if failed:
        lines.append(f"rnn: {len(failed)} rows raised, e.g. {failed[0]['error']}")
    if summ["skipped"]:
        lines.append(f"rnn: {summ['skipped']} rows skipped (time budget)")
    return lines


# ------------------------------------------------------------------ driver


def run(small: bool = False, dtypes: list[str] | None = None, modes: list[str] | None = None,
        hiddens: list[int] | None = None, batches: list[int] | None = None,
        directions: list[str] | None = None, solvers: bool = True, quick: bool = True,
        budget_s: float | None = QUICK_BUDGET_S) -> dict[str, Any]:  # fmt: skip
    cl = import_cudnnlite()
    gpu, xp, clock = array_module_and_clock(small)
    torch = _torch(gpu)
    dts = dtypes or (["fp32", "fp16"] if gpu else ["fp32"])
    solvers = solvers and gpu  # the emulator's small mode keeps CI short: the choice only
    grid = table(not gpu, modes or ["lstm", "gru"], hiddens or list(HIDDENS),
                 batches or list(BATCHES), quick)  # fmt: skip
    start = time.perf_counter()
    rows: list[dict[str, Any]] = []
    for row in grid:  # shapes outermost: a budget cut keeps whole shapes
        for dtype in dts:
            for direction in directions or list(DIRECTIONS):
                if budget_s is not None and gpu and time.perf_counter() - start > budget_s:
                    rows.append(dict(row.__dict__, dtype=dtype, direction=direction,
                                     solver="-", auto=True, skipped="time budget"))  # fmt: skip
                    continue
                rows += bench_row(cl, row, dtype, direction, clock, xp, solvers, torch)
    torch_device = ("cuda (cuDNN)" if gpu else "cpu, a reference time") if torch else None
    print_table(
        f"rnn on {'the GPU' if gpu else 'the emulator'} ({clock.name}); torch: "
        f"{torch_device or 'not importable'}; ratio = torch time / ours; goals: >= "
        f"{GOALS['batch 64']}x at batch 64, >= {GOALS['batch <= 8']}x at batch <= 8",
        ["dir", "dtype", "mode", "T", "B", "H", "L", "bi", "solver", "ms", "TFLOP/s",
         "torch ms", "torch/ours", "rel err"],
        [[r["direction"], r["dtype"], r["mode"], r["t"], r["b"], r["h"], r["layers"],
          r["bidirectional"], ("* " if r["auto"] else "  ") + r["solver"],
          r.get("ms", r.get("error", r.get("skipped"))), r.get("tflops"), r.get("torch_ms"),
          r.get("torch_over_ours"), r.get("rel_err")] for r in rows],
    )  # fmt: skip
    res = {"target": "cuda" if gpu else "cpu", "torch_device": torch_device, "rows": rows,
           "goals": GOALS}  # fmt: skip
    res["summary"] = summarize(rows)
    return res


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="emulator, tiny shapes")
    p.add_argument("--mode", action="append", choices=("lstm", "gru"))
    p.add_argument("--hidden", type=int, action="append")
    p.add_argument("--batch", type=int, action="append")
    p.add_argument("--dtype", action="append", choices=("fp32", "fp16"))
    p.add_argument("--direction", action="append", choices=DIRECTIONS)
    p.add_argument("--no-solvers", action="store_true", help="only the dispatcher's choice")
    p.add_argument("--budget-s", type=float, help="skip the rows left after S seconds")
    args = p.parse_args(argv)
    res = run(args.small, args.dtype, args.mode, args.hidden, args.batch, args.direction,
              not args.no_solvers, quick=False, budget_s=args.budget_s)  # fmt: skip
    print("\n".join(headlines(res)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
