"""The dispatcher's own costs.

- DB lookup: select() on a problem found in a 10,000-entry tuning DB (goal <= 50 us),
  and the raw dictionary lookup, everywhere;
- on a GPU: a plan call's overhead over the bare kernel launch (goal <= 5 us) and a
  functional ``conv2d`` with a warm plan cache (goal <= 15 us), next to
  ``torch.nn.functional.conv2d`` on the same tiny problem (launch-bound, so the
  wall time per call is the overhead). On the emulator the same figures are printed
  for information (its launches cost far more than any of this).

    python benchmarks/dispatch.py [--small]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from typing import Any

import numpy as np
from _bench import gpu_available, import_cudnnlite

GOALS_US = {"db_select": 50.0, "plan_overhead": 5.0, "functional": 15.0}


def _per_call_us(fn: Any, calls: int, sync: Any) -> float:
    fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    sync()
    return (time.perf_counter() - t0) / calls * 1e6


def bench_db(n_entries: int = 10_000) -> dict[str, Any]:
    import_cudnnlite()
    from cudnnlite.dispatch import select, tuning_db
    from cudnnlite.dispatch.tuning_db import Entry, TuningDB
    from cudnnlite.problems.conv import ConvProblem
    from cudnnlite.runtime.select import backend_by_name

    with tempfile.TemporaryDirectory() as tmp:
        entries = {}
        for i in range(n_entries):
            p = ConvProblem(1 + i % 64, 8 + i % 97, (7 + i % 50, 7 + i % 50), 16, (3, 3),
                            ((1, 1), (1, 1)), (1, 1), (1, 1))  # fmt: skip
            entries[p.key()] = [Entry("conv_fwd_direct", {}, 10.0, 0)]
        path = os.path.join(tmp, "cpu.yaml")
        with open(path, "w") as f:
            f.write(tuning_db.dump("cpu", entries))
        t0 = time.perf_counter()
        db = TuningDB("cpu", user_directory=tmp, shipped=False)
        load_ms = (time.perf_counter() - t0) * 1e3
        keys = list(entries)
        key = keys[len(keys) // 2]
        problem = ConvProblem.parse(key)
        t0 = time.perf_counter()
        for _ in range(10_000):
            db.lookup(key)
        raw_us = (time.perf_counter() - t0) / 10_000 * 1e6
        old_env = os.environ.get("CUDNNLITE_TUNING_DIR")
        os.environ["CUDNNLITE_TUNING_DIR"] = tmp
        tuning_db.forget_databases()
        try:
            backend = backend_by_name("cpu")
            choice = select.select(problem, backend)
            t0 = time.perf_counter()
            for _ in range(2_000):
                select.select(problem, backend)
            select_us = (time.perf_counter() - t0) / 2_000 * 1e6
        finally:
            if old_env is None:
                del os.environ["CUDNNLITE_TUNING_DIR"]
            else:
                os.environ["CUDNNLITE_TUNING_DIR"] = old_env
            tuning_db.forget_databases()
    return {"entries": n_entries, "load_ms": load_ms, "raw_lookup_us": raw_us,
            "select_us": select_us, "source": choice.source,
            "goal_us": GOALS_US["db_select"]}  # fmt: skip


def bench_overhead(small: bool) -> dict[str, Any]:
    cl = import_cudnnlite()
    on_gpu = not small and gpu_available()
    if on_gpu:
        import cupy as xp

        sync = xp.cuda.get_current_stream().synchronize
    else:
        xp, sync = np, (lambda: None)
    x = xp.asarray(np.random.default_rng(0).standard_normal((1, 8, 8, 8), dtype=np.float32))
    w = xp.asarray(np.random.default_rng(1).standard_normal((8, 8, 3, 3), dtype=np.float32))
    y = xp.empty((1, 8, 8, 8), dtype=np.float32)
    plan = cl.conv2d_plan(x.shape, w.shape, padding=1, backend="cuda" if on_gpu else "cpu")
    calls = 2000 if on_gpu else 50
    from cudnnlite.solvers.conv.common import ConvTensors, Epilogue

    tensors, epi = ConvTensors(x, w, y), Epilogue()
    runner = plan._plan.runner
    bare = _per_call_us(lambda: runner(tensors, epi, None), calls, sync)
    planned = _per_call_us(lambda: plan(x, w, out=y), calls, sync)
    functional = _per_call_us(lambda: cl.conv2d(x, w, padding=1, out=y), calls, sync)
    out = {"target": "cuda" if on_gpu else "emulator", "solver": plan.solver,
           "bare_launch_us": bare, "plan_us": planned, "plan_overhead_us": planned - bare,
           "functional_us": functional, "goals_us": GOALS_US}  # fmt: skip
    if on_gpu:
        try:
            import torch
            import torch.nn.functional as F  # noqa: N812

            tx, tw = torch.as_tensor(x, device="cuda"), torch.as_tensor(w, device="cuda")
            out["torch_functional_us"] = _per_call_us(lambda: F.conv2d(tx, tw, padding=1),
                                                      calls, torch.cuda.synchronize)  # fmt: skip
        except Exception as exc:
            out["torch_error"] = f"{type(exc).__name__}: {exc}"
    return out


def run(small: bool = False) -> dict[str, Any]:
    db = bench_db(2_000 if small else 10_000)
    ov = bench_overhead(small)
    print("\n== dispatcher ==")
    print(f"tuning DB of {db['entries']} entries: load {db['load_ms']:.1f} ms, raw lookup "
          f"{db['raw_lookup_us']:.2f} us, select() with a DB hit {db['select_us']:.1f} us "
          f"(goal <= {db['goal_us']:g} us)")  # fmt: skip
    print(f"on {ov['target']} ({ov['solver']}): bare launch {ov['bare_launch_us']:.1f} us, "
          f"plan call {ov['plan_us']:.1f} us (overhead {ov['plan_overhead_us']:.1f} us, goal "
          f"<= {GOALS_US['plan_overhead']:g} on a GPU), functional conv2d "
          f"{ov['functional_us']:.1f} us (goal <= {GOALS_US['functional']:g} on a GPU)"
          + (f", torch F.conv2d {ov['torch_functional_us']:.1f} us"
             if "torch_functional_us" in ov else ""))  # fmt: skip
    return {"db": db, "overhead": ov}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true")
    args = p.parse_args(argv)
    run(args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
