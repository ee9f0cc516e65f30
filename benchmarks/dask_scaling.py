"""Scaling of batch-sharded inference (cudnnlite.dask.sequential) over 1, 2 and 4 Dask workers.

    python benchmarks/dask_scaling.py [--small]

The network: conv 3x3 (3->16) + batch norm + relu + max pool 2, conv 3x3 (16->32) + relu,
global average pool; the batch is split in chunks of ``chunk`` images, one task each. Rows:
the workers used, wall time of one ``compute()`` (median of repeats after a warm-up that
compiles and ships the weights), images per second, speedup over one worker and parallel
efficiency (speedup / workers).

Where: with dask-cuda and GPUs, a LocalCUDACluster (one worker per GPU, CuPy blocks; rows
up to the number of GPUs); otherwise a LocalCluster of single-threaded processes on NumPy
blocks (the emulator), each worker's emulator on one OS thread (beyond the machine's cores,
workers share them). One cluster serves every row: a row's tasks are restricted to its
workers. Small mode: 16 images of 16x16 in chunks of 2,
under 10 s once the kernels are compiled.
"""

from __future__ import annotations

import argparse
import functools
import importlib.util
import os
import sys
import time
from typing import Any

import numpy as np
from _bench import gpu_available, import_cudnnlite, median, print_table

WORKERS = (1, 2, 4)


def network(xp: Any, seed: int = 0) -> list[Any]:
    """The layers, weights bound by functools.partial (as xp arrays)."""
    cl = import_cudnnlite()
    rng = np.random.default_rng(seed)

    def randn(*shape: int, scale: float = 1.0) -> Any:
        return xp.asarray(rng.standard_normal(shape, dtype=np.float32) * scale)

    mean, var = randn(16, scale=0.1), xp.abs(randn(16)) + 0.5
    return [
        functools.partial(cl.conv2d, w=randn(16, 3, 3, 3, scale=0.3), padding=1),
        functools.partial(cl.batch_norm_forward_inference, running_mean=mean, running_var=var),
        cl.relu,
        functools.partial(cl.max_pool2d, kernel_size=2),
        functools.partial(
            cl.conv2d, w=randn(32, 16, 3, 3, scale=0.1), padding=1, activation="relu"
        ),  # fmt: skip
        cl.global_avg_pool,
    ]


def _cluster(on_gpu: bool) -> tuple[Any, int]:
    """A cluster for the largest row, and how many workers it has."""
    import logging

    if on_gpu:
        from dask_cuda import LocalCUDACluster

        cluster = LocalCUDACluster(dashboard_address=":0", silence_logs=logging.ERROR)
    else:
        from distributed import LocalCluster

        # One OS thread per worker's emulator: the rows measure workers, not OpenMP.
        cluster = LocalCluster(n_workers=max(WORKERS), threads_per_worker=1, processes=True,
                               dashboard_address=":0", silence_logs=logging.ERROR,
                               env={"CUDNNLITE_EMU_THREADS": "1"})  # fmt: skip
    return cluster, len(cluster.workers)


def _skip_reason(small: bool) -> str | None:
    missing = [m for m in ("dask", "distributed") if importlib.util.find_spec(m) is None]
    if missing:
        return f"{' and '.join(missing)} not installed (pip install 'cudnnlite[dask]')"
    if not small and gpu_available() and importlib.util.find_spec("dask_cuda") is None:
        # The emulator's figures would say nothing about this machine's GPUs.
        return "a GPU without dask_cuda"
    return None


def run(small: bool = False) -> dict[str, Any]:
    import_cudnnlite()
    reason = _skip_reason(small)
    if reason:
        print(f"dask_scaling: skipped ({reason})")
        return {"skipped": reason}
    import dask.array as da
    from distributed import Client

    import cudnnlite.dask as cld

    on_gpu = not small and gpu_available()
    batch, hw, chunk, repeats = (16, 16, 2, 2) if small else (256, 32, 8, 5)
    if on_gpu:
        import cupy

        xp, target = cupy, "cuda (LocalCUDACluster)"
        batch, hw, chunk = 4096, 64, 256
    else:
        xp, target = np, "cpu (emulator, LocalCluster of processes)"
    images = np.random.default_rng(1).standard_normal((batch, 3, hw, hw), dtype=np.float32)
    x = da.from_array(images, chunks=(chunk, 3, hw, hw))
    if on_gpu:
        x = x.map_blocks(cupy.asarray)
    layers = network(xp)
    y = cld.sequential(x, layers)
    cores = os.cpu_count() or 1
    rows: list[dict[str, Any]] = []
    cluster, available = _cluster(on_gpu)
    with cluster, Client(cluster) as client:
        addresses = sorted(client.scheduler_info()["workers"])
        # Warm-up: every worker loads the kernels and receives the layers (one chunk each).
        first = y[:chunk]
        client.gather([client.compute(first, workers=[a], allow_other_workers=False)
                       for a in addresses])  # fmt: skip
        for n in (w for w in WORKERS if w <= available):
            mine = addresses[:n]
            times = []
            for _ in range(repeats):
                start = time.perf_counter()
                client.compute(y, workers=mine, allow_other_workers=False).result()
                times.append(time.perf_counter() - start)
            t = median(times)
            rows.append({"workers": n, "tasks": x.numblocks[0], "ms": t * 1e3,
                         "images_per_s": batch / t})  # fmt: skip
    for r in rows:
        r["speedup"] = rows[0]["ms"] / r["ms"]
        r["efficiency"] = r["speedup"] / r["workers"]
    print_table(
        f"cudnnlite.dask.sequential on {target}: {batch} images 3x{hw}x{hw}, chunks of {chunk}",
        ["workers", "tasks", "ms", "images/s", "speedup", "efficiency"],
        [[r["workers"], r["tasks"], r["ms"], r["images_per_s"], r["speedup"], r["efficiency"]]
         for r in rows],
    )  # fmt: skip
    return {"target": target, "batch": batch, "hw": hw, "chunk": chunk, "cores": cores,
            "rows": rows}  # fmt: skip


def headlines(res: dict[str, Any]) -> list[str]:
    if "skipped" in res:
        return [f"dask_scaling: skipped ({res['skipped']})"]
    last = res["rows"][-1]
    return [
        f"dask_scaling on {res['target']}: {last['workers']} workers "
        f"{last['speedup']:.2f}x one worker ({last['efficiency']:.0%} efficiency, "
        f"{res['cores']} cores, {res['batch']} images in chunks of {res['chunk']})"
    ]


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="emulator, 16 tiny images")
    args = p.parse_args(argv)
    run(args.small)
    return 0


if __name__ == "__main__":
    sys.exit(main())
