"""Shared pieces of the benchmarks: clocks, tables, environment overrides.

Benchmarks measure and print; they never assert. Every figure is a median of
repeats after a warm-up (DESIGN.md section 7).
"""

from __future__ import annotations

import contextlib
import importlib
import math
import os
import statistics
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

REPO_ROOT = Path(__file__).resolve().parent.parent


def import_cudnnlite() -> Any:
    """``cudnnlite``, from the install or else from this checkout (``PYTHONPATH=.`` style)."""
    try:
        return importlib.import_module("cudnnlite")
    except ModuleNotFoundError as exc:
        if exc.name != "cudnnlite":
            raise
        sys.path.insert(0, str(REPO_ROOT))
        return importlib.import_module("cudnnlite")


def gpu_available() -> bool:
    import_cudnnlite()
    from cudnnlite.runtime.cuda import CudaBackend

    return CudaBackend.available()


@contextlib.contextmanager
def env(name: str, value: str) -> Iterator[None]:
    """Sets an environment variable for the block (the emulator reads its switches per launch)."""
    old = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            del os.environ[name]
        else:
            os.environ[name] = old


def median(values: Sequence[float]) -> float:
    return float(statistics.median(values))


class CpuClock:
    """Wall-clock timing of synchronous work (the emulator, NumPy), with a cache flush
    by writing a buffer bigger than the last-level cache between repeats."""

    name = "perf_counter"

    def __init__(self, flush_bytes: int = 64 << 20) -> None:
        import numpy as np

        self._flush = np.empty(flush_bytes, dtype=np.uint8)

    def flush(self) -> None:
        self._flush.fill(1)

    def time_ms(
        self, fn: Callable[[], Any], warmup: int = 1, repeats: int = 5, flush: bool = True
    ) -> float:
        for _ in range(warmup):
            fn()
        times = []
        for _ in range(repeats):
            if flush:
                self.flush()
            start = time.perf_counter()
            fn()
            times.append((time.perf_counter() - start) * 1e3)
        return median(times)


class GpuClock:
    """CUDA events on CuPy's current stream; L2 flushed by writing a 256 MB buffer
    before each repeat (outside the timed interval)."""

    name = "cuda events"

    def __init__(self, flush_bytes: int = 256 << 20) -> None:
        import cupy

        self.cupy = cupy
        self._flush = cupy.empty(flush_bytes, dtype=cupy.uint8)

    def flush(self) -> None:
        self._flush.fill(1)

    def time_ms(
        self, fn: Callable[[], Any], warmup: int = 2, repeats: int = 10, flush: bool = True
    ) -> float:
        cp = self.cupy
        for _ in range(warmup):
            fn()
        start, end = cp.cuda.Event(), cp.cuda.Event()
        times = []
        for _ in range(repeats):
            if flush:
                self.flush()
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end))
        return median(times)


def fmt(value: Any, spec: str = ".3g") -> str:
    if value is None:
        return "n/a"
    if isinstance(value, float):
        return format(value, spec)
    return str(value)


def print_table(title: str, columns: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A plain text table; floats are printed with 3 significant digits."""
    cells = [[fmt(c) for c in row] for row in rows]
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(columns)]
    print(f"\n{title}")
    print("  ".join(h.ljust(w) for h, w in zip(columns, widths, strict=True)))
    print("  ".join("-" * w for w in widths))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths, strict=False)))
    sys.stdout.flush()


def geomean(values: Sequence[float]) -> float | None:
    """The geometric mean of the positive values (ratios), None when there are none."""
    positive = [float(v) for v in values if v and v > 0]
    return math.exp(sum(math.log(v) for v in positive) / len(positive)) if positive else None


def array_module_and_clock(small: bool, cpu_flush_bytes: int = 64 << 20) -> tuple[bool, Any, Any]:
    """(on a GPU?, the array module, the clock) of a run: CuPy and CUDA events on a GPU
    unless ``small``, else NumPy on the emulator and wall-clock time."""
    if gpu_available() and not small:
        import cupy

        return True, cupy, GpuClock()
    return False, np, CpuClock(flush_bytes=cpu_flush_bytes)


def time_into(row: dict[str, Any], clock: Any, fn: Callable[[], Any],
              theirs_ms: float | None = None) -> float | None:  # fmt: skip
    """Times ``fn`` into ``row`` (``ms``, and ``torch_ms``/``torch_over_ours`` when PyTorch's
    time is given); on failure records ``error`` instead: a benchmark reports, it never stops
    at one failure. Returns the time, or None."""
    try:
        ms = clock.time_ms(fn)
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
        return None
    row["ms"] = ms
    if theirs_ms is not None:
        row.update(torch_ms=theirs_ms, torch_over_ours=theirs_ms / ms)
    return ms


def ratio_by_direction(rows: Sequence[dict[str, Any]], directions: Sequence[str]) -> dict:
    """``{"<direction> vs torch (geo-mean)": torch/ours}`` over the rows that have a ratio."""
    out = {}
    for direction in directions:
        vals = [r["torch_over_ours"] for r in rows
                if r["direction"] == direction and "torch_over_ours" in r]  # fmt: skip
        if vals:
            out[f"{direction} vs torch (geo-mean)"] = geomean(vals)
    return out
