"""Convolution forward and backward (data, filter): every applicable solver and the
dispatcher's choice over the layer tables of ResNet-50, VGG-16 and MobileNetV2, in
TFLOP/s, with the time ratio against cuDNN through PyTorch measured in the same run
(forward: F.conv2d; backward: torch.nn.grad.conv2d_input / conv2d_weight). 3-D rows
(I3D, C3D, R(2+1)D, 3-D U-Net layers: :data:`ROWS_3D`) run forward in fp16/bf16 NDHWC
against F.conv3d at batch 2, the dispatcher's choice and the tensor-core solver; small
mode runs one tiny C3D layer.

    python benchmarks/conv.py [--small] [--batch 32] [--suite resnet50 ...] [--dtype fp32 ...]
                              [--direction fwd|bwd_data|bwd_filter ...]

Backward directions run the ResNet-50 and ResNeXt-50 tables on a GPU unless --suite is
given (device time); the summary keys are the dtype for the forward and "<direction> <dtype>" for
the backward directions.

Method (DESIGN.md section 7): CUDA events on CuPy's current stream, a warm-up launch,
the L2 cache flushed before every repeat, the median of repeats. fp32 runs with TF32
disabled on both sides (``torch.backends.cudnn.allow_tf32 = False``); "tf32" rows are fp32
tensors with ``math="tf32"`` here and TF32 allowed in PyTorch; tf32/fp16/bf16 run
channels-last (NHWC) for the tensor cores, on both sides; fp64 rows (ResNet-50 only unless
--dtype is given) run NCHW against cuDNN's double convolutions. The ratio is PyTorch's time
over ours (> 1: we are faster). With --small or without a GPU the same code runs on
the emulator with tiny layers so the script keeps working in CI.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
from _bench import CpuClock, GpuClock, geomean, gpu_available, import_cudnnlite

GOALS = {"fp32 geo-mean": 1.0, "winograd layers": 1.3, "fp16 tensor cores": 1.0}


def _torch_conv(problem: Any, x: Any, w: Any, dy: Any = None) -> Any:
    """A callable running the same convolution (or its backward, by problem.direction:
    then x or w may be None and dy is the output gradient) with torch (cuDNN), or None."""
    try:
        import torch
        import torch.nn.functional as F  # noqa: N812
    except Exception:
        return None
    if not torch.cuda.is_available():
        return None
    tf32 = problem.math == "tf32"  # both sides on TF32 tensor cores, else neither
    torch.backends.cudnn.allow_tf32 = tf32
    torch.backends.cuda.matmul.allow_tf32 = tf32
    torch.backends.cudnn.benchmark = True

    def as_torch(a: Any) -> Any:
        if a.dtype.name == "bfloat16":
            return torch.as_tensor(a.view(np.int16), device="cuda").view(torch.bfloat16)
        return torch.as_tensor(a, device="cuda")

    def nchw(a: Any) -> Any:  # channels-last data -> a channels-last NC... view, no copy
        if a is None:
            return None
        t = as_torch(a)
        return t.permute(0, t.ndim - 1, *range(1, t.ndim - 1)) if problem.channels_last else t

    tx, tw, tdy = nchw(x), nchw(w), nchw(dy)
    if any(b != a for b, a in problem.pads):
        return None
    kwargs = dict(stride=problem.strides, padding=tuple(b for b, _ in problem.pads),
                  dilation=problem.dilations, groups=problem.groups)  # fmt: skip
    x_size = (problem.n, problem.c, *problem.spatial)
    w_size = (problem.k, problem.c_per_group, *problem.filter)
    nd = problem.ndim if problem.ndim in (2, 3) else None
    if nd is None:
        return None
    if problem.direction == "bwd_data":
        fn = getattr(torch.nn.grad, f"conv{nd}d_input")
        return lambda: fn(x_size, tw, tdy, **kwargs)
    if problem.direction == "bwd_filter":
        fn = getattr(torch.nn.grad, f"conv{nd}d_weight")
        return lambda: fn(tx, w_size, tdy, **kwargs)
    conv = F.conv3d if nd == 3 else F.conv2d
    return lambda: conv(tx, tw, None, **kwargs)


DIRECTIONS = ("fwd", "bwd_data", "bwd_filter")

# 3-D rows on a GPU (forward, fp16/bf16 NDHWC, batch BATCH_3D, the dispatcher's choice and
# the tensor-core solver only: device time): 3x3x3 layers of I3D and C3D, R(2+1)D's
# factorized 1x3x3 / 3x1x1 pair, 3-D U-Net's encoder, stride-2 and decoder layers.
ROWS_3D = {
    "i3d": ("conv3", "mix3b.3x3", "mix5b.3x3"),
    "c3d": ("conv2a", "conv3b", "conv5a"),
    "r2plus1d": ("l1.s", "l1.t", "l3.t"),
    "unet3d": ("enc2.b", "down3", "dec3"),
}
SOLVERS_3D = ("conv_fwd_tc_implicit_gemm",)
BATCH_3D = 2


def run(small: bool = False, batch: int | None = None, suites: list[str] | None = None,
        dtypes: list[str] | None = None,
        directions: list[str] | None = None) -> dict[str, Any]:  # fmt: skip
    import dataclasses

    cl = import_cudnnlite()
    from cudnnlite.dispatch import registry
    from cudnnlite.dispatch.select import select, usable
    from cudnnlite.dispatch.tuner import _TENSOR_FACTORIES
    from cudnnlite.problems.suites import SUITES, scaled
    from cudnnlite.runtime.caps import capabilities
    from cudnnlite.runtime.select import backend_by_name
    from cudnnlite.solvers.conv.common import Epilogue

    on_gpu = not small and gpu_available()
    backend = backend_by_name("cuda" if on_gpu else "cpu")
    caps = capabilities(backend)
    clock = GpuClock() if on_gpu else CpuClock(flush_bytes=16 << 20)
    # small mode (CI) times each emulator run once: it is there to keep the benchmark
    # working, and the direct backward-filter solver's runs take 0.4-2.5 s each
    warmup, repeats = (2, 10) if on_gpu else (1, 1 if small else 2)
    batch = batch or (32 if on_gpu else 1)
    explicit_suites = suites is not None
    from cudnnlite.problems.suites import SUITES_2D, SUITES_3D

    suites = suites or (list(SUITES_2D) + list(ROWS_3D) if on_gpu else ["resnet50", "c3d"])
    directions = directions or list(DIRECTIONS)
    explicit_dtypes = dtypes is not None
    # fp64 on the emulator: --dtype fp64 (CI time; the tests run every fp64 solver)
    dtypes = dtypes or (["fp32", "tf32", "fp16", "bf16", "fp64"] if on_gpu else ["fp32"])
    if not cl.dtypes.HAVE_BFLOAT16:  # (bf16 needs ml_dtypes, which the GPU box may lack)
        dtypes = [d for d in dtypes if d != "bf16"]
    by_short = {d.short: d.numpy for d in cl.dtypes.FLOAT_TYPES}
    rows: list[dict[str, Any]] = []
    for direction in directions:
        for suite in suites:
            # device time: the backward directions run ResNet-50 and ResNeXt-50 (its grouped
            # layers: the packed kernels) by default
            default_bwd = suite in ("resnet50", "resnext50")
            if direction != "fwd" and on_gpu and not explicit_suites and not default_bwd:
                continue
            is_3d = suite in SUITES_3D
            if is_3d and direction != "fwd" and not explicit_suites:
                continue
            if is_3d and on_gpu:
                suite_dtypes = [d for d in dtypes if d in ("fp16", "bf16")]
            else:
                suite_dtypes = dtypes
            if not explicit_dtypes and suite != "resnet50":
                suite_dtypes = [d for d in suite_dtypes if d != "fp64"]  # fp64: ResNet-50 only
            rows += _run_suite(
                suite,
                direction,
                suite_dtypes,
                min(batch, BATCH_3D) if is_3d and on_gpu else batch,
                on_gpu,
                backend,
                caps,
                clock,
                warmup,
                repeats,
                by_short,
                SUITES,
                scaled,
                registry,
                select,
                usable,
                _TENSOR_FACTORIES,
                Epilogue,
                dataclasses,
                # small mode (CI): ResNet-50's stem, a 1x1 and a 3x3 keep every 2-D solver
                # kind running; the next three are 1x1s again
                n_layers=3 if small else 6,
            )
    result = {"target": backend.name, "batch": batch, "rows": rows, "goals": GOALS,
              "summary": summarize(rows)}  # fmt: skip
    _print(result)
    return result


def _run_suite(suite: str, direction: str, dtypes: list[str], batch: int, on_gpu: bool,
               backend: Any, caps: Any, clock: Any, warmup: int, repeats: int, by_short: dict,
               SUITES: Any, scaled: Any, registry: Any, select: Any, usable: Any,  # noqa: N803
               factories: dict, Epilogue: Any, dataclasses: Any,  # noqa: N803
               n_layers: int = 6) -> list[dict]:  # fmt: skip
    """Rows for one suite and direction: every usable solver of the family, timed."""
    rows: list[dict[str, Any]] = []
    layers = SUITES[suite]
    is_3d = bool(layers[0].depth)
    if is_3d and on_gpu and suite in ROWS_3D:
        layers = [layer for layer in layers if layer.name in ROWS_3D[suite]]
    if not on_gpu:
        # tiny: keeps CI fast (3-D: one row, every solver's 3-D kernels compile)
        layers = [scaled(layer, 4 if is_3d else 6) for layer in layers[: 1 if is_3d else n_layers]]
    for dtype in dtypes:
        # "tf32": fp32 tensors with math="tf32" (TF32 tensor cores on both sides), NHWC.
        storage, math = ("fp32", "tf32") if dtype == "tf32" else (dtype, "default")
        if storage not in by_short:
            continue
        layout = "NCHW" if dtype in ("fp32", "fp64") else "NHWC"
        for layer in layers:
            problem = dataclasses.replace(
                layer.problem(batch, storage, layout), direction=direction, math=math
            )
            tensors, epi = factories[problem.family](problem, backend)
            try:
                chosen = select(problem, backend).solver.name
            except Exception as exc:  # measured, never asserted
                chosen = f"error: {type(exc).__name__}"
            base = {"suite": suite, "layer": layer.name, "key": problem.key(), "dtype": dtype,
                    "direction": direction, "gflop": problem.flops() / 1e9,
                    "chosen": chosen}  # fmt: skip
            torch_fn = None
            if on_gpu:
                ops = vars(tensors)
                torch_fn = _torch_conv(problem, ops.get("x"), ops.get("w"), ops.get("dy"))
            torch_ms = None
            if torch_fn is not None:
                try:
                    torch_ms = clock.time_ms(torch_fn, warmup, repeats)
                except Exception as exc:
                    base["torch_error"] = f"{type(exc).__name__}: {exc}"
            for solver in registry.solvers(f"conv_{direction}"):
                if not usable(solver, problem, caps):
                    continue
                if is_3d and on_gpu and solver.name not in (chosen, *SOLVERS_3D):
                    continue  # device time: the direct solvers on video-sized layers
                row = dict(base, solver=solver.name)
                try:
                    config = solver.default_config(problem, caps)
                    runner = solver.prepare(backend, problem, config)
                    size = solver.workspace_size(problem, config)
                    ws = backend.xp.empty(size, dtype=np.uint8) if size else None

                    def launch(
                        r: Any = runner, ws: Any = ws, t: Any = tensors, e: Any = epi
                    ) -> None:
                        r(t, e, ws)

                    ms = clock.time_ms(launch, warmup, repeats)
                except Exception as exc:
                    row["error"] = f"{type(exc).__name__}: {exc}"
                    rows.append(row)
                    continue
                row.update(ms=ms, tflops=problem.flops() / ms / 1e9)
                if torch_ms is not None:
                    row.update(torch_ms=torch_ms, torch_over_ours=torch_ms / ms)
                rows.append(row)
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Per dtype (and direction; 3-D rows apart, "3d fp16"): the geo-mean of torch/ours for
    the dispatcher's choice and for the best of our solvers; the Winograd layers' geo-mean."""
    out: dict[str, Any] = {}

    def group(r: dict[str, Any]) -> tuple[str, str, bool]:
        return r.get("direction", "fwd"), r["dtype"], r["key"].startswith("conv3d")

    for direction, dtype, is_3d in sorted({group(r) for r in rows}):
        mine = [r for r in rows if group(r) == (direction, dtype, is_3d)]
        chosen = [r for r in mine if r["solver"] == r["chosen"] and "torch_over_ours" in r]
        best: dict[str, float] = {}
        for r in mine:
            if "torch_over_ours" in r:
                best[r["key"]] = max(best.get(r["key"], 0.0), r["torch_over_ours"])
        wino = [r["torch_over_ours"] for r in chosen if "winograd" in r["solver"]]
        picked = [r for r in mine if r["solver"] == r["chosen"] and "tflops" in r]
        name = dtype if direction == "fwd" else f"{direction} {dtype}"
        out[f"3d {name}" if is_3d else name] = {
            "chosen_geomean_torch_over_ours": geomean([r["torch_over_ours"] for r in chosen]),
            "best_geomean_torch_over_ours": geomean(list(best.values())),
            "winograd_geomean_torch_over_ours": geomean(wino),
            "chosen_geomean_tflops": geomean([r["tflops"] for r in picked]),
            "layers": len({r["key"] for r in mine if "tflops" in r}),
            "layers_with_torch": len(best),
        }
    return out


def _print(result: dict[str, Any]) -> None:
    print(f"\n== convolution on {result['target']}, batch {result['batch']} ==")
    print(f"{'layer':<14} {'dtype':<5} {'solver':<34} {'ms':>9} {'TFLOP/s':>8} {'torch/ours':>10}")
    for r in result["rows"]:
        mark = "*" if r["solver"] == r["chosen"] else " "
        lead = f"{r['layer']:<14} {r['dtype']:<5} {mark}{r['solver']:<37} "
        if "error" in r:
            print(lead + f"ERROR {r['error'][:60]}")
            continue
        ratio = f"{r['torch_over_ours']:.2f}x" if "torch_over_ours" in r else "-"
        print(lead + f"{r['ms']:9.3f} {r['tflops']:8.3f} {ratio:>10}")
    print("(* = the dispatcher's choice; torch/ours > 1 means faster than cuDNN)")
    for dtype, s in result["summary"].items():
        print(f"{dtype}: geo-mean torch/ours, dispatcher's choice "
              f"{s['chosen_geomean_torch_over_ours']}, "
              f"best solver {s['best_geomean_torch_over_ours']}, Winograd layers "
              f"{s['winograd_geomean_torch_over_ours']}")  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--small", action="store_true")
    p.add_argument("--batch", type=int)
    p.add_argument("--suite", action="append")
    p.add_argument("--dtype", action="append")
    p.add_argument("--direction", action="append", choices=DIRECTIONS)
    args = p.parse_args(argv)
    run(args.small, args.batch, args.suite, args.dtype, args.direction)
    return 0


if __name__ == "__main__":
    sys.exit(main())
