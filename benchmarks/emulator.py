"""Emulator benchmarks: the fiber switch, the cost of a barrier, and a tiled matmul.

    python benchmarks/emulator.py [--small]

- switch: ``EmulatorModule.measure_switch_ns`` (one fiber <-> scheduler switch); goal <= 20 ns.
- barrier: ``barrier_loop_bench`` on one OS thread (``CUDNNLITE_EMU_THREADS=1``): the time of
  a launch with ``iters`` barriers minus that of a launch with none, per thread per barrier.
- matmul: ``tiled_matmul`` (16x16 shared-memory tiles, two barriers per tile) in GFLOP/s on
  all cores, next to NumPy's float32 matmul of the same size for context.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from typing import Any

import numpy as np
from _bench import CpuClock, env, import_cudnnlite, median, print_table

SWITCH_GOAL_NS = 20.0


def selftest_module() -> Any:
    import_cudnnlite()
    from cudnnlite.runtime.select import backend_by_name
    from cudnnlite.runtime.selftest import EMULATOR_SELFTEST

    return backend_by_name("cpu").module(EMULATOR_SELFTEST)


def bench_switch(module: Any, iters: int, repeats: int) -> dict[str, Any]:
    module.measure_switch_ns(iters // 10)  # warm-up: fault in the fiber stack
    ns = median([module.measure_switch_ns(iters) for _ in range(repeats)])
    return {"switch_ns": ns, "goal_ns": SWITCH_GOAL_NS, "ratio_to_goal": ns / SWITCH_GOAL_NS}


def bench_barrier(module: Any, block_sizes: list[int], iters: int, repeats: int) -> list[dict]:
    kernel = module.get_function("barrier_loop_bench")
    out = np.zeros(1, dtype=np.int32)
    clock = CpuClock(flush_bytes=1 << 20)
    rows = []
    with env("CUDNNLITE_EMU_THREADS", "1"):
        for threads in block_sizes:

            def launch(n: int, threads: int = threads) -> None:
                kernel((1,), (threads,), (out, np.int32(n)))

            base_ms = clock.time_ms(lambda: launch(0), repeats=repeats, flush=False)
            ms = clock.time_ms(lambda: launch(iters), repeats=repeats, flush=False)
            per = (ms - base_ms) * 1e6 / (threads * iters)
            rows.append(
                {
                    "threads": threads,
                    "iters": iters,
                    "launch_ms": ms,
                    "empty_launch_ms": base_ms,
                    "ns_per_thread_barrier": per,
                    "result_ok": int(out[0]) == iters,  # printed, never asserted
                }
            )
    return rows


def bench_matmul(module: Any, sizes: list[int], repeats: int) -> list[dict]:
    kernel = module.get_function("tiled_matmul")
    rng = np.random.default_rng(0)
    clock = CpuClock()
    threads = int(os.environ.get("CUDNNLITE_EMU_THREADS") or os.cpu_count() or 1)
    rows = []
    for n in sizes:
        a = rng.standard_normal((n, n)).astype(np.float32)
        b = rng.standard_normal((n, n)).astype(np.float32)
        c = np.empty((n, n), dtype=np.float32)
        grid = ((n + 15) // 16, (n + 15) // 16)
        args = (a, b, c, np.int32(n), np.int32(n), np.int32(n))
        emu_ms = clock.time_ms(lambda g=grid, s=args: kernel(g, (16, 16), s), repeats=repeats)
        np_ms = clock.time_ms(lambda a=a, b=b: np.matmul(a, b), repeats=repeats)
        flops = 2.0 * n**3
        ref = a.astype(np.float64) @ b.astype(np.float64)
        rows.append(
            {
                "M=N=K": n,
                "emulator_ms": emu_ms,
                "emulator_gflops": flops / emu_ms / 1e6,
                "numpy_ms": np_ms,
                "numpy_gflops": flops / np_ms / 1e6,
                "numpy_over_emulator": emu_ms / np_ms,
                "max_abs_err": float(np.max(np.abs(c - ref))),
                "os_threads": threads,
            }
        )
    return rows


def run(small: bool = False) -> dict[str, Any]:
    """Runs the three benchmarks, prints their tables and returns every figure."""
    start = time.perf_counter()
    module = selftest_module()
    compile_s = time.perf_counter() - start
    repeats = 3 if small else 7
    switch = bench_switch(module, iters=200_000 if small else 1_000_000, repeats=repeats)
    barrier = bench_barrier(
        module,
        block_sizes=[32, 256, 1024],
        iters=200 if small else 2000,
        repeats=repeats,
    )
    matmul = bench_matmul(module, sizes=[64, 128] if small else [128, 256, 512], repeats=repeats)

    print_table(
        f"emulator: fiber switch (median of {repeats}; goal <= {SWITCH_GOAL_NS:g} ns)",
        ["ns per switch", "goal ns", "ratio to goal"],
        [[switch["switch_ns"], switch["goal_ns"], switch["ratio_to_goal"]]],
    )
    print_table(
        "emulator: __syncthreads cost, one OS thread (launch with N barriers minus empty launch)",
        ["threads/block", "barriers", "launch ms", "empty ms", "ns/thread/barrier", "result ok"],
        [
            [
                r["threads"],
                r["iters"],
                r["launch_ms"],
                r["empty_launch_ms"],
                r["ns_per_thread_barrier"],
                r["result_ok"],
            ]
            for r in barrier
        ],
    )
    print_table(
        f"emulator: tiled_matmul fp32 (16x16 tiles) vs NumPy matmul, OS threads: "
        f"{matmul[0]['os_threads']}",
        [
            "M=N=K",
            "emu ms",
            "emu GFLOP/s",
            "numpy ms",
            "numpy GFLOP/s",
            "numpy x faster",
            "max |err|",
        ],
        [
            [
                r["M=N=K"],
                r["emulator_ms"],
                r["emulator_gflops"],
                r["numpy_ms"],
                r["numpy_gflops"],
                r["numpy_over_emulator"],
                r["max_abs_err"],
            ]
            for r in matmul
        ],
    )
    return {
        "compile_s": compile_s,
        "switch": switch,
        "barrier": barrier,
        "matmul": matmul,
        "seconds": time.perf_counter() - start,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="fewer repeats and smaller sizes")
    args = p.parse_args(argv)
    run(args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
