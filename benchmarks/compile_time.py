"""How long a first call waits for the compiler, without a GPU.

    python benchmarks/compile_time.py [--small] [--arch sm_90] [--filter TEXT] [-j N]
                                      [--all-dtypes] [--out DIR]

First ``import cudnnlite`` in a fresh interpreter (the median of a few; ml_dtypes is
imported on first need, so it should not be); then three measurements, each with the
compile caches out of the way (a scratch ``CUDNNLITE_CACHE_DIR``, ``CUDNNLITE_CUBIN_CACHE=0``):

- **per module** (NVRTC, exactly the CUDA backend's run-time options for ``--arch``): for
  each kernel family (a source's float32 module, or every dtype with ``--all-dtypes``) the
  time of the whole family module, which a first call compiled before kernels became their
  own compile units, and of each kernel's unit (``ModuleSpec.part``), which is what a first
  call compiles now; units over the 0.5 s target are listed;
- **first call** of a network: the kernels a cold ResNet-50 forward at batch 1 needs on
  ``--arch`` (every convolution layer's plan, made by the dispatcher as on that GPU, plus
  the batch norm, ReLU, max pool and global average pool kernels), fp32 NCHW and fp16 NHWC,
  compiled as the forward pass would: each plan's kernels side by side on the build
  threads (``Backend.prefetch``), plans and the other kernels one after another (goal:
  <= 5 s each in all);
- **emulator**: g++ time of what a fresh cache builds once (the precompiled header and the
  runtime object, side by side), then of each family module.

``--small`` (CI) compiles two small families, the first ResNet-50 layer and one g++ module,
so the script keeps working; figures from a loaded machine are slower. Nothing asserts.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import _bench

UNIT_TARGET_S = 0.5  # issue 17: every module NVRTC compiles in <= 0.5 s
FIRST_CALL_GOAL_S = 5.0  # a cold ResNet-50 forward at batch 1 compiles in <= 5 s
SMALL_FAMILIES = ("tuner/spin_wait.cu", "dropout/dropout.cu")


def _timed(fn: Callable[[], Any]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def _family_modules(small: bool, all_dtypes: bool, text: str | None) -> list[Any]:
    """One module per source (its float32 one when it has one), or every dtype's."""
    from cudnnlite.runtime import variants
    from cudnnlite.runtime.nvrtc_check import code_path

    chosen: dict[tuple, Any] = {}
    for spec in variants.all_module_specs():
        if spec.source.startswith("selftest/"):
            continue
        if small and spec.source not in SMALL_FAMILIES:
            continue
        if text and text not in spec.source:
            continue
        types_ = code_path(spec)[1]
        key = (spec.source, types_) if all_dtypes else (spec.source,)
        if key not in chosen or (not all_dtypes and "float" in types_
                                 and "float" not in code_path(chosen[key])[1]):  # fmt: skip
            chosen[key] = spec
    return list(chosen.values())


def bench_modules(arch: str, specs: Sequence[Any], jobs: int) -> list[dict[str, Any]]:
    from cudnnlite.runtime.nvrtc_check import compile_to_cubin

    def measure(spec: Any) -> dict[str, Any]:
        row: dict[str, Any] = {"module": spec.label(), "kernels": len(spec.names)}
        try:
            row["module_s"] = compile_to_cubin(spec, arch).seconds
            units = {unit.names[0]: compile_to_cubin(unit, arch).seconds for unit in spec.parts()}
        except Exception as exc:  # measured, never asserted: report and go on
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
            return row
        row["unit_max_s"] = max(units.values())
        row["unit_median_s"] = _bench.median(list(units.values()))
        row["units_over_target"] = {k: v for k, v in units.items() if v > UNIT_TARGET_S}
        return row

    with ThreadPoolExecutor(max(1, jobs)) as pool:
        return list(pool.map(measure, specs))


def _record_kernels(fn: Callable[[], Any]) -> list[tuple[Any, str]]:
    """The (module, kernel) pairs ``fn`` asks the emulator for, in order."""
    from cudnnlite.runtime.emulator.launcher import EmulatorBackend

    seen: list[tuple[Any, str]] = []
    original = EmulatorBackend.kernel

    def kernel(self: Any, spec: Any, name: str) -> Any:
        if (spec, name) not in seen:
            seen.append((spec, name))
        return original(self, spec, name)

    EmulatorBackend.kernel = kernel  # type: ignore[method-assign]
    try:
        fn()
    finally:
        EmulatorBackend.kernel = original  # type: ignore[method-assign]
    return seen


def _other_layers(dtype: str) -> list[tuple[Any, str]]:
    """The non-convolution kernels of a ResNet forward (batch norm in inference, ReLU,
    3x3/2 max pool, global average pool), as the emulator picks them: the choice depends
    on dtype, layout and alignment, not on the GPU."""
    import numpy as np

    import cudnnlite as cl

    np_dtype = {"fp32": np.float32, "fp16": np.float16}[dtype]
    layout = "NCHW" if dtype == "fp32" else "NHWC"  # as _suite_problems lays them out
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 64, 8, 8) if layout == "NCHW" else (1, 8, 8, 64))
    x = x.astype(np_dtype)
    stats = [(rng.random(64) + 0.5).astype(np.float32) for _ in range(4)]  # fp32 params

    def forward() -> None:
        y = cl.batch_norm(x, *stats, training=False, layout=layout)
        y = cl.relu(y)
        y = cl.max_pool2d(y, 3, 2, 1, layout=layout)
        cl.adaptive_avg_pool2d(y, 1, layout=layout)

    return _record_kernels(forward)


def bench_first_call(arch: str, suite: str, dtype: str, layers: int | None,
                     others: list[tuple[Any, str]]) -> dict[str, Any]:  # fmt: skip
    """The kernels a cold forward of ``suite`` needs on ``arch``, compiled plan by plan
    (a plan's kernels side by side, as a run builds them); ``others``: the non-convolution
    kernels (``_other_layers``), each in turn."""
    from cudnnlite.dispatch.plans import Plan
    from cudnnlite.dispatch.select import select
    from cudnnlite.precompile import _suite_problems
    from cudnnlite.runtime.cuda import AheadOfTimeBackend

    problems = _suite_problems(suite, [dtype])[:layers]
    row: dict[str, Any] = {"suite": suite, "dtype": dtype, "arch": arch,
                           "conv_layers": len(problems)}  # fmt: skip
    backend = AheadOfTimeBackend(arch)
    try:
        conv_s = sum(_timed(lambda p=p: Plan(backend, p, select(p, backend))) for p in problems)
        other_s = sum(_timed(lambda s=s, n=n: backend.kernel(s, n)) for s, n in others)
    except Exception as exc:
        row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        return row
    built = backend._modules  # every unit the forward compiled, once each
    row.update(
        conv_s=conv_s,
        other_s=other_s,
        total_s=conv_s + other_s,
        kernels=sorted(name for _, spec in built for name in spec.names),
        goal_s=FIRST_CALL_GOAL_S,
    )
    return row


def bench_gxx_once() -> dict[str, Any]:
    """What a fresh cache builds once before its first module: the precompiled header and
    the runtime object, side by side (build._header_and_runtime)."""
    from cudnnlite.runtime.emulator import build

    cxx, flags = build.compiler(), build.compile_flags(False)
    try:
        return {"seconds": _timed(lambda: build._header_and_runtime(cxx, flags, True))}
    except Exception as exc:  # measured, never asserted: report and go on
        return {"error": f"{type(exc).__name__}: {str(exc).splitlines()[0]}"}


def bench_gxx(specs: Sequence[Any]) -> list[dict[str, Any]]:
    """g++ time of each module, the header and runtime object already built."""
    from cudnnlite.runtime.emulator import build

    rows = []
    for spec in specs:
        row: dict[str, Any] = {"module": spec.label(), "kernels": len(spec.names)}
        try:
            row["seconds"] = _timed(lambda s=spec: build._compile(s, asan=False))
        except Exception as exc:
            row["error"] = f"{type(exc).__name__}: {str(exc).splitlines()[0]}"
        rows.append(row)
    return rows


_IMPORT_PROBE = (
    "import sys, time\n"
    "t = time.perf_counter()\n"
    "import cudnnlite\n"
    "print(time.perf_counter() - t, 'ml_dtypes' in sys.modules, 'numpy' in sys.modules)\n"
)


def bench_import(repeats: int) -> dict[str, Any]:
    """``import cudnnlite`` in fresh interpreters (this checkout first on the path): the
    median seconds, and whether it imported ml_dtypes (about 1 s of its own on a 2-core
    machine) and NumPy."""
    import subprocess

    env = dict(os.environ, PYTHONPATH=os.pathsep.join(
        [str(_bench.REPO_ROOT), *filter(None, [os.environ.get("PYTHONPATH")])]))  # fmt: skip
    times, ml_dtypes = [], False
    for _ in range(repeats):
        done = subprocess.run([sys.executable, "-c", _IMPORT_PROBE], capture_output=True,
                              text=True, env=env, check=False)  # fmt: skip
        if done.returncode != 0:
            return {"error": done.stderr.strip().splitlines()[-1:]}
        seconds, ml, _ = done.stdout.split()
        times.append(float(seconds))
        ml_dtypes = ml_dtypes or ml == "True"
    return {"seconds": _bench.median(times), "repeats": repeats, "imports_ml_dtypes": ml_dtypes}


def run(small: bool, arch: str = "sm_90", text: str | None = None, jobs: int = 2,
        all_dtypes: bool = False) -> dict[str, Any]:  # fmt: skip
    _bench.import_cudnnlite()
    from cudnnlite.errors import NotSupportedError
    from cudnnlite.runtime import cuda_toolkit

    out: dict[str, Any] = {"arch": arch, "unit_target_s": UNIT_TARGET_S, "small": small}
    out["import"] = bench_import(1 if small else 5)
    dtypes_ = ("fp32",) if small else ("fp32", "fp16")
    # Which kernels the other layers launch, from the emulator with its usual cache (the
    # tests have compiled these modules already), before the caches are moved aside.
    others = {d: _other_layers(d) for d in dtypes_}
    scratch_dir = tempfile.TemporaryDirectory(prefix="cudnnlite-compile-time-")
    with scratch_dir as scratch, _bench.env("CUDNNLITE_CACHE_DIR", scratch), \
            _bench.env("CUDNNLITE_CUBIN_CACHE", "0"):  # fmt: skip
        specs = _family_modules(small, all_dtypes, text)
        try:
            nvrtc = cuda_toolkit.find_nvrtc()
        except NotSupportedError as exc:
            out["nvrtc"] = f"skipped: {exc}"
        else:
            out["nvrtc"] = f"NVRTC {nvrtc.version_string()}"
            out["modules"] = bench_modules(arch, specs, jobs)
            out["first_call"] = [
                bench_first_call(arch, "resnet50", d, 1 if small else None, others[d])
                for d in dtypes_
            ]
        out["gxx_once"] = bench_gxx_once()
        out["gxx"] = bench_gxx(sorted(specs, key=lambda s: len(s.names))[:1] if small else specs)
    _print(out)
    return out


def headlines(res: dict[str, Any]) -> list[str]:
    lines = []
    imp = res.get("import", {})
    if "seconds" in imp:
        lines.append(f"compile_time import cudnnlite: {imp['seconds']:.2f} s (median of "
                     f"{imp['repeats']}; ml_dtypes "
                     f"{'imported' if imp['imports_ml_dtypes'] else 'not imported'})")  # fmt: skip
    elif imp:
        lines.append(f"compile_time import cudnnlite: {imp.get('error')}")
    rows = [r for r in res.get("modules", []) if "unit_max_s" in r]
    if rows:
        over = sum(len(r["units_over_target"]) for r in rows)
        worst = max(rows, key=lambda r: r["unit_max_s"])
        whole = max(rows, key=lambda r: r["module_s"])
        lines.append(
            f"compile_time {res['arch']}: {len(rows)} families; slowest whole module "
            f"{whole['module_s']:.2f} s ({whole['module']}); per-kernel units: slowest "
            f"{worst['unit_max_s']:.2f} s ({worst['module']}), {over} over "
            f"{res['unit_target_s']:g} s"
        )
    for r in res.get("first_call", []):
        if "total_s" in r:
            lines.append(
                f"compile_time first {r['suite']} forward ({r['conv_layers']} conv layers) "
                f"{r['dtype']} on {r['arch']}: {r['total_s']:.2f} s for {len(r['kernels'])} "
                f"kernels (goal <= {r['goal_s']:g} s)"
            )
        else:
            lines.append(f"compile_time first {r['suite']} {r['dtype']}: {r.get('error')}")
    if isinstance(res.get("nvrtc"), str) and res["nvrtc"].startswith("skipped"):
        lines.append(f"compile_time: NVRTC {res['nvrtc']}")
    gxx = [r for r in res.get("gxx", []) if "seconds" in r]
    if gxx:
        once = res.get("gxx_once", {})
        once_text = (f"{once['seconds']:.1f} s" if "seconds" in once
                     else once.get("error", "not measured"))  # fmt: skip
        lines.append(f"compile_time g++ (emulator): {len(gxx)} modules, median "
                     f"{_bench.median([r['seconds'] for r in gxx]):.1f} s; once per cache, "
                     f"the precompiled header and runtime object: {once_text}")  # fmt: skip
    return lines


def _print(res: dict[str, Any]) -> None:
    if res.get("modules"):
        _bench.print_table(
            f"NVRTC per module and per kernel unit ({res['arch']}, seconds)",
            ["module", "kernels", "whole", "unit max", "unit median", f"units > {UNIT_TARGET_S:g}"],
            [[r["module"], r["kernels"], _bench.fmt(r.get("module_s")),
              _bench.fmt(r.get("unit_max_s")), _bench.fmt(r.get("unit_median_s")),
              len(r["units_over_target"]) if "units_over_target" in r else r.get("error")]
             for r in res["modules"]],
        )  # fmt: skip
    if res.get("first_call"):
        _bench.print_table(
            "first call: a cold forward's compiles, plan by plan (seconds)",
            ["suite", "dtype", "conv layers", "kernels", "conv", "other", "total"],
            [[r["suite"], r["dtype"], r["conv_layers"], len(r.get("kernels", [])),
              _bench.fmt(r.get("conv_s")), _bench.fmt(r.get("other_s")),
              _bench.fmt(r.get("total_s")) if "total_s" in r else r.get("error")]
             for r in res["first_call"]],
        )  # fmt: skip
    if res.get("gxx"):
        _bench.print_table(
            "g++ per module (emulator, seconds)",
            ["module", "kernels", "seconds"],
            [[r["module"], r["kernels"],
              _bench.fmt(r.get("seconds")) if "seconds" in r else r["error"]]
             for r in res["gxx"]],
        )  # fmt: skip
    print("\n".join(headlines(res)))


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--small", action="store_true", help="a few small modules (CI)")
    p.add_argument("--arch", default="sm_90")
    p.add_argument("--filter", help="only sources whose path contains TEXT")
    p.add_argument("--all-dtypes", action="store_true", help="every dtype's module per family")
    p.add_argument("-j", "--jobs", type=int, default=os.cpu_count() or 2)
    p.add_argument("--out", help="write DIR/compile_time_<arch>_<date>.json")
    args = p.parse_args(argv)
    res = run(args.small, args.arch, args.filter, args.jobs, args.all_dtypes)
    if args.out:
        import datetime as dt
        import json
        from pathlib import Path

        path = Path(args.out) / f"compile_time_{args.arch}_{dt.date.today():%Y-%m-%d}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(res, indent=2))
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
