"""Activation benchmarks: per-call overhead and bandwidth of every mode, fwd and bwd.

    python benchmarks/activation.py [--small]

On a GPU (CuPy), unless --small:
- overhead: wall time per call of ``relu`` on a tiny array over 2000 calls (goal <= 10 us);
- bandwidth: every mode x fp32/fp16/bf16/fp64 x forward/backward on a 64M-element tensor, CUDA
  events, warm-up, L2 flushed by writing 256 MB before each repeat, median of repeats, in
  GB/s of bytes that must move (fwd: read x, write y; bwd: read dy and x, write dx); against
  a device-to-device copy of the same bytes measured in the same run (goal >= 90%), and
  against PyTorch's same op on the same data when torch imports (ratio = torch time / ours).

With --small or without a GPU the same code runs on the emulator with small tensors
(so it keeps working in CI) and reports the emulator's GB/s.
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from _bench import CpuClock, GpuClock, gpu_available, import_cudnnlite, median, print_table

OVERHEAD_GOAL_US = 10.0
COPY_RATIO_GOAL = 0.90
DTYPES = ("fp32", "fp16", "bf16", "fp64")

# Only clipped_relu needs a coefficient (its ceiling); every other mode runs with the
# API's defaults, which the torch counterparts below mirror.
MODE_PARAMS: dict[str, dict[str, float]] = {"clipped_relu": {"coef": 6.0}}


@dataclass
class Setup:
    """Where the benchmark runs: the array module, its clock and its sizes."""

    target: str  # "cuda" or "emulator"
    xp: Any
    clock: Any
    n: int
    overhead_calls: int
    warmup: int
    repeats: int

    def copy(self, dst: Any, src: Any) -> Callable[[], None]:
        if self.target == "cuda":
            return lambda: dst.data.copy_from_device_async(src.data, src.nbytes)
        return lambda: np.copyto(dst, src)


def make_setup(small: bool) -> Setup:
    if not small and gpu_available():
        import cupy

        return Setup("cuda", cupy, GpuClock(), 64 << 20, 2000, 3, 10)
    n = (256 << 10) if small else (1 << 20)
    return Setup("emulator", np, CpuClock(flush_bytes=32 << 20), n, 200, 1, 3 if small else 5)


# ------------------------------------------------------------------ torch counterparts


def _torch_ops() -> tuple[Any, dict[str, Callable], dict[str, Callable]] | None:
    try:
        import torch
        import torch.nn.functional as F
    except Exception:
        return None
    aten = torch.ops.aten
    fwd = {
        "relu": torch.relu,
        "leaky_relu": lambda x: F.leaky_relu(x, 0.01),
        "clipped_relu": lambda x: F.hardtanh(x, 0.0, 6.0),
        "elu": lambda x: F.elu(x, 1.0),
        "sigmoid": torch.sigmoid,
        "tanh": torch.tanh,
        "swish": F.silu,
        "gelu": F.gelu,
        "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
        "softplus": F.softplus,
        "identity": torch.clone,
    }
    bwd = {
        "relu": lambda dy, x, y: aten.threshold_backward(dy, x, 0.0),
        "leaky_relu": lambda dy, x, y: aten.leaky_relu_backward(dy, x, 0.01, False),
        "clipped_relu": lambda dy, x, y: aten.hardtanh_backward(dy, x, 0.0, 6.0),
        "elu": lambda dy, x, y: aten.elu_backward(dy, 1.0, 1.0, 1.0, False, x),
        "sigmoid": lambda dy, x, y: aten.sigmoid_backward(dy, y),
        "tanh": lambda dy, x, y: aten.tanh_backward(dy, y),
        "swish": lambda dy, x, y: aten.silu_backward(dy, x),
        "gelu": lambda dy, x, y: aten.gelu_backward(dy, x, approximate="none"),
        "gelu_tanh": lambda dy, x, y: aten.gelu_backward(dy, x, approximate="tanh"),
        "softplus": lambda dy, x, y: aten.softplus_backward(dy, x, 1.0, 20.0),
        "identity": lambda dy, x, y: torch.clone(dy),
    }
    return torch, fwd, bwd


def _as_torch(torch: Any, a: Any, dtype: str) -> Any:
    """The same GPU memory as a torch tensor (DLPack); bf16 travels as int16 bits."""
    if dtype == "bf16":
        return torch.from_dlpack(a.view(np.int16)).view(torch.bfloat16)
    return torch.from_dlpack(a)


# ------------------------------------------------------------------ measurements


def bench_overhead(setup: Setup, cl: Any) -> dict[str, Any]:
    """Wall time per call of relu on a tiny array: the Python and launch cost. The calls
    run in 10 batches (synchronized at the end of each); the median batch is reported,
    so a stall of the machine during one batch does not count."""
    xp = setup.xp
    x = xp.ones(256, dtype=np.float32)
    y = xp.empty_like(x)
    sync = _sync(setup)
    for _ in range(10):
        cl.relu(x, out=y)
    sync()
    batch = max(1, setup.overhead_calls // 10)
    per_call = []
    for _ in range(10):
        start = time.perf_counter()
        for _ in range(batch):
            cl.relu(x, out=y)
        sync()
        per_call.append((time.perf_counter() - start) / batch * 1e6)
    return {
        "calls": batch * 10,
        "us_per_call": median(per_call),
        "us_per_call_min": min(per_call),
        "goal_us": OVERHEAD_GOAL_US,
        "elements": int(x.size),
    }


def _sync(setup: Setup) -> Callable[[], None]:
    if setup.target == "cuda":
        return lambda: setup.xp.cuda.get_current_stream().synchronize()
    return lambda: None


def _random(setup: Setup, dtype: Any, seed: int) -> Any:
    host = (np.random.default_rng(seed).standard_normal(setup.n, dtype=np.float32) * 2).astype(
        dtype
    )
    return setup.xp.asarray(host)


def bench_bandwidth(setup: Setup, cl: Any) -> list[dict[str, Any]]:
    from cudnnlite import dtypes as cl_dtypes

    torch_ops = _torch_ops() if setup.target == "cuda" else None
    by_short = {d.short: d.numpy for d in cl_dtypes.FLOAT_TYPES}
    rows = []
    for short in DTYPES:
        if short not in by_short:
            continue  # bf16 without ml_dtypes (the GPU box may lack it)
        dtype = by_short[short]
        try:
            x = _random(setup, dtype, 1)
            dy = _random(setup, dtype, 2)
            out = setup.xp.empty_like(x)
            copy_ms = setup.clock.time_ms(setup.copy(out, x), setup.warmup, setup.repeats)
        except Exception as exc:  # e.g. an array library without this dtype
            error = f"{type(exc).__name__}: {exc}"
            rows.append({"mode": "*", "dtype": short, "direction": "*", "error": error})
            continue
        item = np.dtype(dtype).itemsize
        copy_gbs = 2 * setup.n * item / copy_ms / 1e6
        tx = tdy = None
        if torch_ops is not None:
            try:
                tx, tdy = _as_torch(torch_ops[0], x, short), _as_torch(torch_ops[0], dy, short)
            except Exception:  # torch rows then say torch_error
                tx = tdy = None
        for mode in cl.ACTIVATION_MODES:
            params = MODE_PARAMS.get(mode, {})
            cases = [
                ("fwd", 2, partial(cl.activation_forward, x, mode, out=out, **params)),
                ("bwd", 3, partial(cl.activation_backward, dy, x, mode, out=out, **params)),
            ]
            for direction, operands, fn in cases:
                row: dict[str, Any] = {
                    "mode": mode,
                    "dtype": short,
                    "direction": direction,
                    "elements": setup.n,
                }
                try:
                    ms = setup.clock.time_ms(fn, setup.warmup, setup.repeats)
                except Exception as exc:  # measured, never asserted: report and go on
                    row["error"] = f"{type(exc).__name__}: {exc}"
                    rows.append(row)
                    continue
                gbs = operands * setup.n * item / ms / 1e6
                row.update(ms=ms, gbs=gbs, copy_gbs=copy_gbs, of_copy=gbs / copy_gbs)
                if tx is not None:
                    row.update(_torch_row(setup, torch_ops, mode, direction, tx, tdy, ms))
                rows.append(row)
    return rows


def _torch_row(
    setup: Setup, torch_ops: Any, mode: str, direction: str, tx: Any, tdy: Any, ours_ms: float
) -> dict[str, Any]:
    torch, fwd, bwd = torch_ops
    try:
        if direction == "fwd":

            def fn() -> Any:
                return fwd[mode](tx)
        else:
            ty = fwd[mode](tx)

            def fn() -> Any:
                return bwd[mode](tdy, tx, ty)

        with torch.no_grad():
            t_ms = setup.clock.time_ms(fn, setup.warmup, setup.repeats)
    except Exception as exc:
        return {"torch_error": f"{type(exc).__name__}: {exc}"}
    return {"torch_ms": t_ms, "torch_over_ours": t_ms / ours_ms}


def run(small: bool = False) -> dict[str, Any]:
    """Runs the activation benchmarks, prints their tables and returns every figure."""
    cl = import_cudnnlite()
    start = time.perf_counter()
    setup = make_setup(small)
    overhead = bench_overhead(setup, cl)
    print_table(
        f"activation: per-call overhead on {setup.target} (relu, {overhead['elements']} fp32, "
        f"{overhead['calls']} calls; goal <= {OVERHEAD_GOAL_US:g} us, on a GPU)",
        ["us per call", "goal us"],
        [[overhead["us_per_call"], OVERHEAD_GOAL_US]],
    )
    rows = bench_bandwidth(setup, cl)
    has_torch = any("torch_ms" in r or "torch_error" in r for r in rows)
    cols = ["mode", "dtype", "dir", "ms", "GB/s", "copy GB/s", "of copy"]
    if has_torch:
        cols += ["torch ms", "torch/ours"]
    table = []
    for r in rows:
        if "error" in r:
            table.append([r["mode"], r["dtype"], r["direction"], "ERROR: " + r["error"][:60]])
            continue
        line = [
            r["mode"],
            r["dtype"],
            r["direction"],
            r["ms"],
            r["gbs"],
            r["copy_gbs"],
            f"{r['of_copy']:.0%}",
        ]
        if has_torch:
            line += [r.get("torch_ms"), r.get("torch_over_ours")]
        table.append(line)
    goal = f"goal >= {COPY_RATIO_GOAL:.0%} of copy" if setup.target == "cuda" else "emulator"
    print_table(
        f"activation: bandwidth on {setup.target}, {setup.n} elements, {setup.clock.name}, "
        f"median of {setup.repeats} ({goal})",
        cols,
        table,
    )
    return {
        "target": setup.target,
        "elements": setup.n,
        "clock": setup.clock.name,
        "repeats": setup.repeats,
        "overhead": overhead,
        "bandwidth": rows,
        "seconds": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="emulator, small tensors")
    args = p.parse_args(argv)
    run(args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
