"""Memory-bound primitives (pooling, normalization, softmax, dropout, tensor ops):
GB/s moved, the fraction of a device-to-device copy of the same bytes measured in the
same run (goal >= 90%), and the time ratio against PyTorch on the same inputs
(goal >= 1.0x: PyTorch's time over ours).

    python benchmarks/memory_bound.py [--small]

Each primitive family contributes its cases from a module listed in CASE_MODULES; a
module exposes ``cases(ctx: Context) -> list[Case]``. On a GPU (CuPy) the sizes come
from ResNet-50 and BERT layers; with --small or without a GPU the same code paths run
on the emulator with small sizes, so the benchmark keeps working in CI.
"""

from __future__ import annotations

import argparse
import importlib
import json
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from _bench import CpuClock, GpuClock, gpu_available, import_cudnnlite

COPY_RATIO_GOAL = 0.90
TORCH_RATIO_GOAL = 1.0

# Modules (in benchmarks/) contributing cases; one not present yet is skipped.
CASE_MODULES = ("mb_pooling", "mb_norm", "mb_softmax_tensor")


@dataclass
class Context:
    """Where the cases run and how big they are."""

    target: str  # "cuda" or "emulator"
    small: bool
    xp: Any  # cupy or numpy
    torch: Any | None  # torch with CUDA, on the GPU only; None otherwise
    rng: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))

    def randn(self, shape: tuple[int, ...], dtype: Any, scale: float = 1.0) -> Any:
        """Standard-normal values of `dtype` on the target (built in float32 on the host)."""
        host = (self.rng.standard_normal(shape, dtype=np.float32) * scale).astype(dtype)
        return self.xp.asarray(host)

    def to_torch(self, a: Any) -> Any:
        """A zero-copy torch view of a CuPy array (bf16 through its int16 bits)."""
        torch = self.torch
        if a.dtype in (np.float16, np.float32, np.float64):
            return torch.as_tensor(a, device="cuda")
        return torch.as_tensor(a.view(np.int16), device="cuda").view(torch.bfloat16)


@dataclass
class Case:
    """One measurement: our call and, where one exists, PyTorch's on the same data."""

    family: str  # "pooling", "batch_norm", "softmax", ...
    name: str  # what runs, e.g. "max_pool2d 3x3/2 fwd"
    shape: str  # e.g. "32x64x112x112" (a real network's layer, scaled down on the emulator)
    dtype: str  # fp32 / fp16 / bf16
    bytes_moved: int  # the bytes a perfect kernel reads plus writes
    ours: Callable[[], Any]
    torch: Callable[[], Any] | None = None


def make_context(small: bool) -> Context:
    if not small and gpu_available():
        import cupy

        try:
            import torch

            torch = torch if torch.cuda.is_available() else None
        except Exception:
            torch = None
        return Context("cuda", small, cupy, torch)
    return Context("emulator", True, np, None)


def _copy_ms(ctx: Context, clock: Any, nbytes: int, warmup: int, repeats: int) -> float:
    """The device-to-device (or host memcpy) time of nbytes/2 read + nbytes/2 written."""
    half = max(1, nbytes // 2)
    src = ctx.xp.ones(half, dtype=np.uint8)
    dst = ctx.xp.empty_like(src)
    if ctx.target == "cuda":
        fn = lambda: dst.data.copy_from_device_async(src.data, half)  # noqa: E731
    else:
        fn = lambda: np.copyto(dst, src)  # noqa: E731
    return clock.time_ms(fn, warmup, repeats)


def run(small: bool = False) -> dict[str, Any]:
    import_cudnnlite()
    ctx = make_context(small)
    if ctx.target == "cuda":
        clock, warmup, repeats = GpuClock(), 3, 10
    else:
        clock, warmup, repeats = CpuClock(flush_bytes=32 << 20), 1, 3
    rows: list[dict[str, Any]] = []
    missing: list[str] = []
    for module_name in CASE_MODULES:
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name != module_name:
                raise
            missing.append(module_name)
            continue
        for case in module.cases(ctx):
            row: dict[str, Any] = {
                "family": case.family,
                "name": case.name,
                "shape": case.shape,
                "dtype": case.dtype,
                "bytes": case.bytes_moved,
            }
            try:
                ms = clock.time_ms(case.ours, warmup, repeats)
                copy_ms = _copy_ms(ctx, clock, case.bytes_moved, warmup, repeats)
            except Exception as exc:  # measured, never asserted: report and go on
                row["error"] = f"{type(exc).__name__}: {exc}"
                rows.append(row)
                continue
            gbs = case.bytes_moved / ms / 1e6
            row.update(ms=ms, gbs=gbs, copy_gbs=case.bytes_moved / copy_ms / 1e6)
            row["of_copy"] = copy_ms / ms
            if case.torch is not None:
                try:
                    t_ms = clock.time_ms(case.torch, warmup, repeats)
                    row.update(torch_ms=t_ms, torch_over_ours=t_ms / ms)
                except Exception as exc:
                    row["torch_error"] = f"{type(exc).__name__}: {exc}"
            rows.append(row)
    _print(ctx, rows, missing)
    return {
        "target": ctx.target,
        "goals": {"of_copy": COPY_RATIO_GOAL, "torch_over_ours": TORCH_RATIO_GOAL},
        "rows": rows,
        "missing_case_modules": missing,
    }


def _print(ctx: Context, rows: list[dict[str, Any]], missing: list[str]) -> None:
    print(f"\n== memory-bound primitives on {ctx.target} ==")
    print(
        f"goals: >= {COPY_RATIO_GOAL:.0%} of a copy of the same bytes; "
        f">= {TORCH_RATIO_GOAL:.1f}x PyTorch's speed (torch ms / ours)"
    )
    head = f"{'family':<12} {'op':<34} {'shape':<18} {'dtype':<5} {'ms':>9} {'GB/s':>8} "
    print(head + f"{'of copy':>8} {'torch/ours':>10}")
    for r in rows:
        lead = f"{r['family']:<12} {r['name']:<34} {r['shape']:<18} {r['dtype']:<5} "
        if "error" in r:
            print(lead + f"ERROR {r['error']}")
            continue
        ratio = f"{r['torch_over_ours']:.2f}x" if "torch_over_ours" in r else "-"
        print(lead + f"{r['ms']:9.3f} {r['gbs']:8.2f} {r['of_copy']:8.0%} {ratio:>10}")
    for name in missing:
        print(f"(cases of {name} not present yet)")


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="emulator, small sizes")
    p.add_argument("--json", action="store_true", help="print the rows as JSON too")
    args = p.parse_args(argv)
    result = run(args.small)
    if args.json:
        print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
