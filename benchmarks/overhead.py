"""Per-call overhead of the library's own work (issue 13), and real per-call wall time.

    python benchmarks/overhead.py [--small]

1. **Library work only**, on the emulator's NumPy arrays with the kernel launch replaced by
   a no-op (each compiled module's ``emu_launch``, and ``emu_run_list`` that runs a
   graph's launches, answer 0 at once): what a call costs in Python, from the arguments
   to the launcher's packed arguments. It runs, and means the same, on any machine. Rows: conv2d (functional, plan), relu, batch_norm (inference),
   softmax, max_pool2d, a 10-op network forward (functional calls, conv plans, graph
   replay) and an 11-call training step (conv, batch norm, relu, max pool and their
   backward: functional calls, graph replay), each against the issue's target; and each
   again with launch templates off (``runtime.templates``: a repeated call replays its
   recorded launches), which is what a call costs when its key is new or not templated.
2. **Real launches** per call on each available backend: the emulator (whose launch itself
   costs tens of microseconds), and on a GPU the same ops on CuPy arrays synchronized once
   per batch of calls, next to PyTorch's per-call time for the same ops.

Measures only; asserts nothing. Small mode (CI) stays within a few seconds.
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
from _bench import gpu_available, import_cudnnlite, median, print_table

# The targets, library work only (us per call); every plan has the conv plan's.
TARGETS_US = {"conv2d": 10.0, "conv2d plan": 3.0, "relu": 5.0, "network graph replay": 5.0}


def per_call_us(fn: Callable[[], Any], calls: int, sync: Callable[[], Any], repeats: int) -> float:
    """Median over ``repeats`` of (wall time of ``calls`` calls, synchronized) / calls."""
    fn()
    sync()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        sync()
        times.append((time.perf_counter() - start) / calls * 1e6)
    return median(times)


class _NoopLib:
    """A compiled emulator module whose launches do nothing (everything else forwarded)."""

    def __init__(self, lib: Any) -> None:
        self._lib = lib

    @staticmethod
    def emu_launch(index: Any, cfg: Any, values: Any) -> int:
        return 0

    @staticmethod
    def emu_run_list(n: int, *lists: Any) -> int:  # a graph replay's launches, one call
        return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._lib, name)


@contextlib.contextmanager
def noop_launches() -> Iterator[None]:
    """Every emulator module built so far launches nothing inside the block. The flags of
    device-side argument checks (max pooling backward's indices) are then never written:
    those checks pass unread (the eager path's, a template replay's, a graph replay's)."""
    from cudnnlite.runtime import backend_by_name, graph

    modules = list(backend_by_name("cpu")._modules.values())
    for m in modules:
        m.lib = _NoopLib(m.lib)
    saved = graph.flag_passed
    graph.flag_passed = lambda flag, ok: True
    try:
        yield
    finally:
        for m in modules:
            m.lib = m.lib._lib
        graph.flag_passed = saved


def _arrays(xp: Any) -> dict[str, Any]:
    rng = np.random.default_rng(0)

    def a(*shape: int) -> Any:
        return xp.asarray(rng.standard_normal(shape, dtype=np.float32))

    c = 8
    return {
        "x": a(1, c, 8, 8),
        "w": a(c, c, 3, 3),
        "b": a(c),
        "mean": a(c) * 0.1,
        "var": xp.abs(a(c)) + 0.5,
        "gamma": a(c),
        "beta": a(c),
        "running_mean": a(c) * 0.1,
        "running_var": xp.abs(a(c)) + 0.5,
        "dy": a(1, c, 4, 4),
    }


def op_plans(cl: Any, t: dict[str, Any], backend: str) -> dict[str, Any]:
    """Plans for the network's ops (those the library has)."""
    shape = t["x"].shape
    plans = {"conv2d": cl.conv2d_plan(shape, t["w"].shape, padding=1, backend=backend)}
    if hasattr(cl, "activation_plan"):
        plans["relu"] = cl.activation_plan(shape, "relu", backend=backend)
        plans["softmax"] = cl.softmax_plan(shape, backend=backend)
        plans["max_pool2d"] = cl.pooling_plan(shape, "max", 2, backend=backend)
        plans["max_pool2d 1x1"] = cl.pooling_plan(shape, "max", 1, backend=backend)
    if hasattr(cl, "batch_norm_inference_plan"):
        plans["batch_norm (inference)"] = cl.batch_norm_inference_plan(shape, backend=backend)
    return plans


def single_ops(cl: Any, t: dict[str, Any], plans: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    x, w = t["x"], t["w"]
    ops = {
        "conv2d": lambda: cl.conv2d(x, w, padding=1),
        "relu": lambda: cl.relu(x),
        "batch_norm (inference)": lambda: cl.batch_norm_forward_inference(
            x, t["mean"], t["var"], t["gamma"], t["beta"]
        ),
        "softmax": lambda: cl.softmax(x),
        "max_pool2d": lambda: cl.max_pool2d(x, 2),
        "conv2d plan": lambda: plans["conv2d"](x, w),
    }
    for name in ("relu", "softmax", "max_pool2d"):
        if name in plans:
            ops[f"{name} plan"] = functools.partial(plans[name], x)
    if "batch_norm (inference)" in plans:
        bn = (t["mean"], t["var"], t["gamma"], t["beta"])
        ops["batch_norm (inference) plan"] = functools.partial(
            plans["batch_norm (inference)"], x, *bn
        )
    return ops


def network(cl: Any, t: dict[str, Any], plans: dict[str, Any] | None) -> Any:
    """10 ops: conv-bn-relu, conv-bn-relu, max_pool, conv, relu, softmax; through ``plans``
    where given."""
    x, w, b = t["x"], t["w"], t["b"]
    bn = (t["mean"], t["var"], t["gamma"], t["beta"])
    p = plans or {}
    conv = p.get("conv2d") or (lambda x, w, b: cl.conv2d(x, w, b, padding=1))
    relu = p.get("relu") or cl.relu
    pool = p.get("max_pool2d 1x1") or (lambda h: cl.max_pool2d(h, 1))
    softmax = p.get("softmax") or cl.softmax
    norm = p.get("batch_norm (inference)") or cl.batch_norm_forward_inference
    h = relu(norm(conv(x, w, b), *bn))
    h = relu(norm(conv(h, w, b), *bn))
    h = pool(h)  # 1x1 keeps 8x8, so one plan serves every conv
    return softmax(relu(conv(h, w, b)))


def training_step(cl: Any, t: dict[str, Any]) -> tuple[Any, ...]:
    """11 calls: conv -> batch norm (training, updating running statistics) -> relu ->
    max pool, then max pool, relu, batch norm and conv (data, filter, bias) backward."""
    x, w, b, gamma = t["x"], t["w"], t["b"], t["gamma"]
    h = cl.conv2d(x, w, b, padding=1)
    n, mean, invstd = cl.batch_norm_forward_training(h, gamma, t["beta"], t["running_mean"],
                                                     t["running_var"])  # fmt: skip
    r = cl.relu(n)
    _, ind = cl.max_pool2d(r, 2, return_indices=True)
    dn = cl.activation_backward(cl.max_pool_backward(t["dy"], ind, r.shape, 2), n, "relu")
    dh, dgamma, dbeta, _ = cl.batch_norm_backward(dn, h, mean, invstd, gamma)
    return (cl.conv2d_backward_data(dh, w, x.shape, padding=1),
            cl.conv2d_backward_filter(x, dh, w.shape, padding=1),
            cl.conv2d_backward_bias(dh), dgamma, dbeta)  # fmt: skip


def with_replay(cl: Any, name: str, fn: Callable[[], Any], backend: str,
                variants: dict[str, Any]) -> dict[str, Any]:  # fmt: skip
    """``variants`` plus ``"<name> graph replay"``: ``fn``'s calls captured in a graph on
    ``backend`` (``fn`` has run before: compiled, and on a GPU the pool holds blocks of
    every size the capture takes); a capture CUDA refuses is said and left out."""
    try:
        with cl.graph(backend) as g:
            fn()
        variants[f"{name} graph replay"] = g.replay
    except Exception as exc:
        print(f"overhead: {name} capture on {backend} failed: {type(exc).__name__}: {exc}")
    return variants


def training_variants(cl: Any, t: dict[str, Any], backend: str) -> dict[str, Any]:
    def functional() -> Any:
        return training_step(cl, t)

    functional()
    return with_replay(cl, "training step", functional, backend,
                       {"training step functional": functional})  # fmt: skip


def network_variants(
    cl: Any, t: dict[str, Any], plans: dict[str, Any], backend: str
) -> dict[str, Any]:
    def functional() -> Any:
        return network(cl, t, None)

    def planned() -> Any:
        return network(cl, t, plans)

    planned()
    return with_replay(cl, "network", planned, backend,
                       {"network functional": functional, "network plans": planned})  # fmt: skip


def library_work(cl: Any, small: bool) -> list[dict[str, Any]]:
    t = _arrays(np)
    plans = op_plans(cl, t, "cpu")
    ops = single_ops(cl, t, plans)
    ops.update(network_variants(cl, t, plans, "cpu"))
    ops.update(training_variants(cl, t, "cpu"))
    for fn in ops.values():
        fn()  # compiles every module before the launches are stubbed
    from cudnnlite.runtime import templates

    calls, repeats = (200, 3) if small else (1000, 3)
    rows = []
    with noop_launches():
        for name, fn in ops.items():
            slow = name in ("network functional", "network plans", "training step functional")
            n = calls // 10 if slow else calls
            us = per_call_us(fn, n, lambda: None, repeats)
            with templates.disabled():
                untemplated = per_call_us(fn, n, lambda: None, repeats)
            target = TARGETS_US.get(
                name, TARGETS_US["conv2d plan"] if name.endswith(" plan") else None
            )
            rows.append({"op": name, "us": us, "untemplated_us": untemplated,
                         "target_us": target,
                         "meets": None if target is None else us <= target})  # fmt: skip
    return rows


def real_launches(cl: Any, small: bool, on_gpu: bool) -> list[dict[str, Any]]:
    if on_gpu:
        import cupy as xp

        stream = xp.cuda.Stream(non_blocking=True)
        stream.use()  # graph capture needs a stream of its own
        sync, backend, calls = stream.synchronize, "cuda", 500
    else:
        # The emulator's launches cost tens of us to ms each: a few calls tell enough.
        xp, sync, backend, calls = np, (lambda: None), "cpu", 20
    t = _arrays(xp)
    plans = op_plans(cl, t, backend)
    ops = single_ops(cl, t, plans)
    ops.update(network_variants(cl, t, plans, backend))
    ops.update(training_variants(cl, t, backend))
    torch_ops = _torch_ops(t) if on_gpu else {}
    rows = []
    for name, fn in ops.items():
        many = name.startswith(("network", "training"))
        reps = max(1, calls // 10) if many else calls
        row: dict[str, Any] = {"op": name, "backend": backend,
                               "us": per_call_us(fn, reps, sync, 3)}  # fmt: skip
        # A plan and a replay stand against PyTorch's ordinary call of the same work.
        same = (
            "network functional" if name.startswith("network")
            else "training step functional" if name.startswith("training")
            else name.replace(" plan", "")
        )  # fmt: skip
        if same in torch_ops:
            try:
                row["torch_us"] = per_call_us(torch_ops[same], reps, _torch_sync(), 3)
                row["ours_over_torch"] = row["us"] / row["torch_us"]
            except Exception as exc:  # torch missing a kernel: keep our figure
                row["torch_error"] = f"{type(exc).__name__}: {exc}"
        rows.append(row)
    if on_gpu:
        xp.cuda.Stream.null.use()
    return rows


def _torch_sync() -> Callable[[], Any]:
    import torch

    return torch.cuda.synchronize


def _torch_ops(t: dict[str, Any]) -> dict[str, Callable[[], Any]]:
    try:
        import torch
        import torch.nn.functional as F  # noqa: N812
    except Exception:
        return {}
    torch.backends.cudnn.allow_tf32 = False
    g = {k: torch.as_tensor(v, device="cuda") for k, v in t.items()}
    x, w, b = g["x"], g["w"], g["b"]
    bn = (g["mean"], g["var"], g["gamma"], g["beta"])

    def net() -> Any:
        h = F.relu(F.batch_norm(F.conv2d(x, w, b, padding=1), *bn))
        h = F.relu(F.batch_norm(F.conv2d(h, w, b, padding=1), *bn))
        h = F.max_pool2d(h, 1)
        return torch.softmax(F.relu(F.conv2d(h, w, b, padding=1)), -1)

    leaves = [a.clone().requires_grad_() for a in (x, w, b, g["gamma"], g["beta"])]

    def train() -> Any:
        xl, wl, bl, gamma, beta = leaves
        for a in leaves:
            a.grad = None
        h = F.batch_norm(F.conv2d(xl, wl, bl, padding=1), g["running_mean"],
                         g["running_var"], gamma, beta, training=True)  # fmt: skip
        F.max_pool2d(F.relu(h), 2).backward(g["dy"])
        return [a.grad for a in leaves]

    return {
        "conv2d": lambda: F.conv2d(x, w, padding=1),
        "relu": lambda: F.relu(x),
        "batch_norm (inference)": lambda: F.batch_norm(x, *bn),
        "softmax": lambda: torch.softmax(x, -1),
        "max_pool2d": lambda: F.max_pool2d(x, 2),
        "network functional": net,
        "training step functional": train,
    }


def run(small: bool = False) -> dict[str, Any]:
    cl = import_cudnnlite()
    on_gpu = not small and gpu_available()
    work = library_work(cl, small)
    print_table(
        "Library work per call (emulator arrays, launch stubbed out), us",
        ["op", "us", "templates off us", "target us", "meets"],
        [[r["op"], r["us"], r["untemplated_us"], r["target_us"], r["meets"]] for r in work],
    )
    real = real_launches(cl, small, False)
    if on_gpu:
        real += real_launches(cl, small, True)
    print_table(
        "Per call with real launches, us (GPU: one synchronize per batch of calls)",
        ["op", "backend", "us", "torch us", "ours/torch"],
        [[r["op"], r["backend"], r["us"], r.get("torch_us", r.get("torch_error")),
          r.get("ours_over_torch")] for r in real],
    )  # fmt: skip
    return {"library_work": work, "real": real, "targets_us": TARGETS_US}


def headlines(res: dict[str, Any]) -> list[str]:
    parts = [
        f"{r['op']} {r['us']:.1f} us (<= {r['target_us']:g}{'' if r['meets'] else ' MISSED'})"
        for r in res["library_work"]
        if r["target_us"] is not None
    ]
    lines = ["overhead, library work per call: " + ", ".join(parts)]
    gpu = [r for r in res["real"] if r["backend"] == "cuda" and "ours_over_torch" in r]
    if gpu:
        lines.append(
            "overhead on the GPU, ours/torch per call: "
            + ", ".join(f"{r['op']} {r['ours_over_torch']:.2f}x" for r in gpu)
        )
    return lines


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true", help="fewer calls, emulator only")
    args = p.parse_args(argv)
    print("\n".join(headlines(run(args.small))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
