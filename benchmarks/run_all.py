"""Runs every benchmark, prints its tables, and writes one JSON with every figure.

    python benchmarks/run_all.py [--small] [--out DIR] [--only emulator|activation]
                                 [--report DIR]
    python benchmarks/run_all.py --summarize JSON [--report DIR]

--small runs everything on the emulator with small sizes (CI runs this, so the
benchmarks keep working). --out DIR writes DIR/benchmarks-<date>.json: the machine
(GPU, CUDA versions, CPU, compiler, library versions), then each benchmark's figures;
it is rewritten after each benchmark, so a run cut short keeps what it measured.
--summarize JSON prints the headline figures of an earlier run instead of running.
--report DIR draws the figures of this run (or of the --summarize JSON) as PNGs with a
Markdown page, DIR/README.md (benchmarks/report.py; needs matplotlib, else the page
says so).
Exit status 0 unless a benchmark crashed or the report failed: benchmarks measure,
they never assert.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

import _bench

# Cheapest first: a run cut short by the device check's timeout keeps the most figures
# (attention and rnn last: their first calls compile kernels the precompile step does not
# cover; the device check runs rnn as a step of its own).
# sass_mix needs no GPU (NVRTC and nvdisasm): static figures, kept whatever the device does.
BENCHMARKS = ("emulator", "dispatch", "overhead", "sass_mix", "compile_time", "activation",
              "memory_bound", "conv",
              "attention", "rnn", "ctc", "grid_sample", "dask_scaling")  # fmt: skip


def _cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def machine_info() -> dict[str, Any]:
    """What the figures were measured on (``cudnnlite info`` plus CPU and torch)."""
    _bench.import_cudnnlite()
    from cudnnlite.cli import collect_info

    info: dict[str, Any] = collect_info()
    load = [round(v, 2) for v in os.getloadavg()] if hasattr(os, "getloadavg") else None
    # Emulator figures on a busy machine are slower and noisier: keep the load with them.
    info["cpu"] = {"model": _cpu_model(), "cores": os.cpu_count(), "load_average": load}
    try:
        import torch

        info["torch"] = {"version": torch.__version__, "cuda": str(torch.version.cuda)}
    except Exception as exc:
        info["torch"] = {"version": f"not importable ({type(exc).__name__})"}
    return info


def _write(path: Path | None, doc: dict[str, Any]) -> None:
    if path is None:
        return
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(doc, indent=2, default=str))
    tmp.replace(path)


def _median(values: list[float]) -> float | None:
    return _bench.median(values) if values else None


def headlines(doc: dict[str, Any]) -> list[str]:
    """The figures that have goals, one line each, from a results document."""
    lines = []
    res = doc.get("results", {})
    emu = res.get("emulator")
    if emu:
        sw = emu["switch"]
        lines.append(
            f"emulator fiber switch: {sw['switch_ns']:.1f} ns (goal <= {sw['goal_ns']:g} ns, "
            f"{sw['ratio_to_goal']:.2f}x the goal)"
        )
        for b in emu["barrier"]:
            lines.append(
                f"emulator barrier, {b['threads']} threads/block: "
                f"{b['ns_per_thread_barrier']:.1f} ns per thread per barrier"
            )
        m = emu["matmul"][-1]
        lines.append(
            f"emulator tiled_matmul {m['M=N=K']}^3: {m['emulator_gflops']:.2f} GFLOP/s on "
            f"{m['os_threads']} OS thread(s) (NumPy: {m['numpy_gflops']:.1f} GFLOP/s)"
        )
    act = res.get("activation")
    if act:
        ov = act["overhead"]
        lines.append(
            f"activation overhead on {act['target']}: {ov['us_per_call']:.1f} us per call "
            f"(goal <= {ov['goal_us']:g} us on a GPU)"
        )
        rows = [r for r in act["bandwidth"] if "gbs" in r]
        for dtype in ("fp32", "fp16", "bf16", "fp64"):
            for direction in ("fwd", "bwd"):
                sel = [r for r in rows if r["dtype"] == dtype and r["direction"] == direction]
                if not sel:
                    continue
                worst = min(sel, key=lambda r: r["of_copy"])
                line = (
                    f"activation {dtype} {direction} on {act['target']}: median "
                    f"{_median([r['gbs'] for r in sel]):.1f} GB/s, "
                    f"{_median([r['of_copy'] for r in sel]):.0%} of copy "
                    f"(worst {worst['mode']} {worst['of_copy']:.0%})"
                )
                torch_ratios = [r["torch_over_ours"] for r in sel if "torch_over_ours" in r]
                if torch_ratios:
                    line += f", torch time / ours median {_median(torch_ratios):.2f}"
                lines.append(line)
        errors = [r for r in act["bandwidth"] if "error" in r]
        if errors:
            lines.append(f"activation: {len(errors)} cases raised, e.g. {errors[0]['error']}")
    att = res.get("attention")
    if att:
        for name, value in att["summary"].items():
            goal = att["goals"].get(name.split(" (")[0])
            lines.append(f"attention {name} on {att['target']}: {value:.2f}x"
                         + (f" (goal >= {goal}x)" if goal else ""))  # fmt: skip
        errors = [r for r in att["rows"] if "error" in r]
        if errors:
            lines.append(f"attention: {len(errors)} rows raised, e.g. {errors[0]['error']}")
    if res.get("overhead"):
        import overhead

        lines += overhead.headlines(res["overhead"])
    if res.get("rnn"):
        import rnn

        lines += rnn.headlines(res["rnn"])
    if res.get("ctc"):
        import ctc

        lines += ctc.headlines(res["ctc"])
    if res.get("grid_sample"):
        import grid_sample

        lines += grid_sample.headlines(res["grid_sample"])
    if res.get("compile_time"):
        import compile_time

        lines += compile_time.headlines(res["compile_time"])
    if res.get("dask_scaling"):
        import dask_scaling

        lines += dask_scaling.headlines(res["dask_scaling"])
    mb = res.get("memory_bound")
    if mb:
        measured = [r for r in mb["rows"] if "gbs" in r]
        for family in dict.fromkeys(r["family"] for r in measured):
            sel = [r for r in measured if r["family"] == family]
            worst = min(sel, key=lambda r: r["of_copy"])
            line = (
                f"{family} on {mb['target']}: median {_median([r['of_copy'] for r in sel]):.0%} "
                f"of copy (worst {worst['name']} {worst['dtype']} {worst['of_copy']:.0%})"
            )
            ratios = [r["torch_over_ours"] for r in sel if "torch_over_ours" in r]
            if ratios:
                line += f", torch time / ours median {_median(ratios):.2f}, min {min(ratios):.2f}"
            lines.append(line)
        errors = [r for r in mb["rows"] if "error" in r]
        if errors:
            lines.append(f"memory_bound: {len(errors)} cases raised, e.g. {errors[0]['error']}")
    conv = res.get("conv")
    if conv:
        for dtype, summ in conv["summary"].items():
            fmt = lambda v: "n/a" if v is None else f"{v:.2f}x"  # noqa: E731
            tflops = lambda v: "n/a" if v is None else f"{v:.4g}"  # noqa: E731
            lines.append(
                f"conv {dtype} on {conv['target']} (batch {conv['batch']}, {summ['layers']} "
                f"layers, dispatcher's choice {tflops(summ.get('chosen_geomean_tflops'))} "
                f"TFLOP/s geo-mean): torch/ours geo-mean, dispatcher "
                f"{fmt(summ['chosen_geomean_torch_over_ours'])}, best solver "
                f"{fmt(summ['best_geomean_torch_over_ours'])}, Winograd layers "
                f"{fmt(summ['winograd_geomean_torch_over_ours'])}"
            )
        errors = [r for r in conv["rows"] if "error" in r]
        if errors:
            lines.append(f"conv: {len(errors)} solver runs raised, e.g. {errors[0]['error']}")
    disp = res.get("dispatch")
    if disp:
        db, ov = disp["db"], disp["overhead"]
        lines.append(
            f"dispatch: select() with a hit in a {db['entries']}-entry DB {db['select_us']:.1f} us "
            f"(goal <= {db['goal_us']:g}); on {ov['target']}: plan overhead "
            f"{ov['plan_overhead_us']:.1f} us, functional conv2d {ov['functional_us']:.1f} us"
        )
    sass = res.get("sass_mix")
    if sass:
        lines.append(sass_mix_headline(sass))
    for name, tb in doc.get("errors", {}).items():
        lines.append(f"{name}: CRASHED: {tb.strip().splitlines()[-1]}")
    return lines


def sass_mix_headline(sass: dict[str, Any]) -> str:
    """One line for benchmarks/sass_mix.py's static figures (or why it was skipped)."""
    if "skipped" in sass:
        return f"sass_mix: skipped ({sass['skipped']})"
    summ, rows = sass["summary"], sass["rows"]
    tc = [r["mma_fraction"] for r in rows if r["kind"] == "tensor core" and r["mma_fraction"]]
    fp = [r["ffma_fraction"] for r in rows if r["kind"] == "fp32" and r["ffma_fraction"]]
    pct = lambda v: f"{max(v):.0%}" if v else "n/a"  # noqa: E731
    return (
        f"sass_mix {sass['arch']}: {summ['kernels']} GEMM kernels, "
        f"{summ['missing_a_target']} miss a static target, {summ['spilling']} spill; "
        f"best MMA share of a tensor-core loop {pct(tc)} (target 33%), "
        f"best FFMA share of an fp32 loop {pct(fp)} (target 75%)"
    )


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description="Run every cudnnlite benchmark.")
    p.add_argument("--small", action="store_true", help="emulator only, small sizes (CI)")
    p.add_argument("--out", type=Path, help="write DIR/benchmarks-<date>.json")
    p.add_argument("--only", choices=BENCHMARKS, action="append", help="run only this one")
    p.add_argument("--skip", choices=BENCHMARKS, action="append", help="leave this one out")
    p.add_argument(
        "--summarize",
        type=Path,
        metavar="JSON",
        help="print the headline figures of an earlier run and exit",
    )
    p.add_argument(
        "--report",
        type=Path,
        metavar="DIR",
        help="draw the figures of this run (or of --summarize JSON) in DIR, with DIR/README.md",
    )
    args = p.parse_args(argv)
    if args.summarize:
        doc = json.loads(args.summarize.read_text())
        print("\n".join(headlines(doc)))
        return _report(doc, args.report) if args.report else 0

    now = dt.datetime.now(dt.timezone.utc)
    path = args.out / f"benchmarks-{now:%Y-%m-%dT%H%M%SZ}.json" if args.out else None
    doc: dict[str, Any] = {
        "date": now.isoformat(timespec="seconds"),
        "small": args.small,
        "command": " ".join(sys.argv),
        "machine": machine_info(),
        "results": {},
        "errors": {},
    }
    machine = doc["machine"]
    gpu = machine.get("cuda", {}).get("GPU 0", "no GPU")
    print(f"cudnnlite benchmarks, {doc['date']}, {'small' if args.small else 'full'} mode")
    cpu = machine["cpu"]
    print(f"CPU: {cpu['model']}, {cpu['cores']} cores, load {cpu['load_average']}; GPU: {gpu}")
    _write(path, doc)

    failed = False
    for name in [b for b in args.only or BENCHMARKS if b not in (args.skip or [])]:
        module = __import__(name)
        start = time.perf_counter()
        try:
            doc["results"][name] = module.run(args.small)
        except Exception:
            failed = True
            doc["errors"][name] = traceback.format_exc()
            print(f"\nbenchmark {name} crashed:\n{doc['errors'][name]}", file=sys.stderr)
        print(f"[{name}: {time.perf_counter() - start:.1f} s]")
        _write(path, doc)
    print("\n== headline figures ==")
    print("\n".join(headlines(doc)))
    if path is not None:
        print(f"\nwrote {path}")
    if args.report and _report(doc, args.report):
        failed = True
    return 1 if failed else 0


def _report(doc: dict[str, Any], out_dir: Path) -> int:
    """Draws ``doc`` into ``out_dir`` (benchmarks/report.py); 1 when that failed."""
    try:
        import report

        written = report.render(doc, out_dir)
    except Exception:
        print(f"\nthe report failed:\n{traceback.format_exc()}", file=sys.stderr)
        return 1
    print(f"report: {', '.join(str(p) for p in written)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
