"""The ``cudnnlite`` command: ``cudnnlite info|demo|tune|db|doctor|resources|precompile``.

Each subcommand is a pair of functions: ``_add_<name>(subparsers)`` declares its
arguments and ``_run_<name>(args) -> int`` does the work; ``main`` wires them.
"""

from __future__ import annotations

import argparse
import importlib
import os
import platform
import sys
from collections.abc import Callable, Sequence
from typing import Any

from . import cli_tuning

Section = dict[str, str]


# ------------------------------------------------------------------ info


def _version_number(v: int) -> str:
    """CUDA's integer versions: 13000 -> "13.0", 12080 -> "12.8"."""
    return f"{v // 1000}.{v % 1000 // 10}"


def _module_version(name: str) -> str:
    try:
        mod = importlib.import_module(name)
    except Exception as exc:  # ImportError, or a broken install
        return f"not installed ({type(exc).__name__}: {exc})"
    return str(getattr(mod, "__version__", "installed"))


def _python_section() -> Section:
    return {
        "python": f"{platform.python_version()} ({sys.executable})",
        "platform": f"{platform.system()} {platform.machine()}, {os.cpu_count()} CPUs",
        "numpy": _module_version("numpy"),
        "ml_dtypes": _module_version("ml_dtypes"),
        "pyyaml": _module_version("yaml"),
    }


def _emulator_section() -> Section:
    from .runtime.emulator import build

    cxx = build.compiler()
    try:
        version = build.compiler_version(cxx)
    except Exception as exc:  # NotSupportedError: no compiler
        version = f"MISSING: {exc}"
    threads = os.environ.get("CUDNNLITE_EMU_THREADS") or f"all cores ({os.cpu_count()})"
    return {
        "compiler": f"{cxx}: {version}",
        "cache dir": str(build.cache_dir()),
        "header dir": str(build.INCLUDE_DIR),
        "OS threads": threads,
    }


def _cuda_section() -> Section:
    try:
        cupy = importlib.import_module("cupy")
    except Exception as exc:
        return {
            "cupy": f"not installed ({type(exc).__name__}); the CUDA backend needs it: "
            'pip install "cudnnlite[cuda13]" (or "cudnnlite[cuda12]")'
        }
    out: Section = {"cupy": str(cupy.__version__)}
    rt = cupy.cuda.runtime
    probes: list[tuple[str, Callable[[], str]]] = [
        ("CUDA runtime", lambda: _version_number(rt.runtimeGetVersion())),
        ("CUDA driver", lambda: _version_number(rt.driverGetVersion())),
        ("CuPy's NVRTC", lambda: ".".join(map(str, cupy.cuda.nvrtc.getVersion()))),
    ]
    for key, probe in probes:
        try:
            out[key] = probe()
        except Exception as exc:
            out[key] = f"unavailable ({type(exc).__name__}: {exc})"
    try:
        count = rt.getDeviceCount()
    except Exception as exc:
        out["GPUs"] = f"none visible ({type(exc).__name__}: {exc})"
        return out
    out["GPUs"] = str(count)
    for i in range(count):
        try:
            p = rt.getDeviceProperties(i)
            name = p["name"].decode() if isinstance(p["name"], bytes) else str(p["name"])
            mem = p["totalGlobalMem"] / 2**30
            out[f"GPU {i}"] = (
                f"{name}, sm_{p['major']}{p['minor']}, {mem:.0f} GiB, "
                f"{p['multiProcessorCount']} SMs"
            )
        except Exception as exc:
            out[f"GPU {i}"] = f"unreadable ({type(exc).__name__}: {exc})"
    return out


def _nvrtc_section() -> Section:
    from .runtime import cuda_toolkit

    report = cuda_toolkit.toolkit_report()
    out: Section = {}
    lib = report.nvrtc
    if lib is not None:
        archs = ", ".join(f"sm_{a}" for a in lib.supported_archs) or "not listed"
        out["NVRTC"] = f"{lib.version_string()}: {lib.path}"
        out["found by"] = lib.origin
        out["archs"] = archs
    else:
        out["NVRTC"] = f"NOT FOUND: {report.nvrtc_error}"
    if report.headers is not None:
        out["fp16/bf16 headers"] = str(report.headers.fp16.path)
        cccl = report.headers.cccl
        out["CCCL headers"] = str(cccl.path) if cccl else "not needed (NVRTC provides nv/target)"
    else:
        out["headers"] = f"NOT FOUND: {report.headers_error}"
    out["compile check"] = "python -m cudnnlite.runtime.nvrtc_check"
    return out


def _paths_section() -> Section:
    from .dispatch import tuning_db
    from .runtime import sources

    out: Section = {"package": os.path.dirname(os.path.abspath(__file__))}
    for key, finder in (("cuda_src", sources.cuda_src_dir), ("tuning_db", sources.tuning_db_dir)):
        try:
            out[key] = str(finder())
        except FileNotFoundError as exc:
            out[key] = f"MISSING: {exc}"
    out["user tuning DB"] = str(tuning_db.user_dir())
    return out


def _backends_section(sections: dict[str, Section]) -> Section:
    from .runtime.select import forced_backend

    compiler = sections["emulator"].get("compiler", "")
    cpu = "unavailable (no C++ compiler)" if "MISSING" in compiler else "available"
    cuda = sections["cuda"]
    gpus = cuda.get("GPUs", "")
    if "cupy" in cuda and cuda["cupy"].startswith("not installed"):
        cuda_state = "unavailable: CuPy is not installed"
    elif gpus.isdigit() and int(gpus) > 0:
        cuda_state = f"available ({gpus} GPU{'s' if int(gpus) > 1 else ''})"
    else:
        cuda_state = "unavailable: no GPU visible to CuPy"
    out = {"cpu (emulator)": cpu + "; runs NumPy arrays", "cuda": cuda_state}
    forced = forced_backend()
    if forced:
        out["CUDNNLITE_BACKEND"] = f"{forced} (forces every call onto this backend)"
    return out


def collect_info() -> dict[str, Section]:
    """Everything ``cudnnlite info`` prints, as sections of key -> text; never raises."""
    probes: dict[str, Callable[[], Section]] = {
        "python": _python_section,
        "emulator": _emulator_section,
        "cuda": _cuda_section,
        "nvrtc": _nvrtc_section,
        "paths": _paths_section,
    }
    sections: dict[str, Section] = {}
    for name, probe in probes.items():
        try:
            sections[name] = probe()
        except Exception as exc:  # a probe must never take `info` down
            sections[name] = {"error": f"{type(exc).__name__}: {exc}"}
    try:
        backends = _backends_section(sections)
    except Exception as exc:
        backends = {"error": f"{type(exc).__name__}: {exc}"}
    env = {k: v for k, v in sorted(os.environ.items()) if k.startswith("CUDNNLITE_")}
    from . import __version__

    return {
        "cudnnlite": {"version": __version__},
        "backends": backends,
        **sections,
        "environment": env or {"CUDNNLITE_*": "(none set)"},
    }


def _print_sections(sections: dict[str, Section]) -> None:
    width = max(len(k) for s in sections.values() for k in s)
    for title, entries in sections.items():
        print(title)
        for key, value in entries.items():
            print(f"  {key:<{width}}  {value}")
        print()


def _add_info(sub: Any) -> None:
    p = sub.add_parser(
        "info",
        help="show the backends, GPU, NVRTC, emulator compiler and paths",
        description="Show what cudnnlite finds on this machine; says what is missing and "
        "how to get it. Needs neither CuPy nor NVRTC.",
    )
    p.add_argument("--json", action="store_true", help="print the same as JSON")


def _run_info(args: argparse.Namespace) -> int:
    sections = collect_info()
    if args.json:
        import json

        print(json.dumps(sections, indent=2))
    else:
        _print_sections(sections)
    return 0


# ------------------------------------------------------------------ demo


def _add_demo(sub: Any) -> None:
    from .demo import DTYPE_CHOICES

    p = sub.add_parser(
        "demo",
        help="run a small CNN's forward pass (convolution, pooling, batch norm, activations, "
        "softmax) and check each layer against the float64 reference",
        description="Runs each layer's primitives of a small CNN on the chosen backend and "
        "checks every result against the float64 reference. Exit status 1 if any check fails.",
    )
    p.add_argument(
        "--backend",
        choices=("auto", "cpu", "cuda"),
        default="auto",
        help="auto: CuPy arrays when a GPU is visible, else NumPy on the emulator",
    )
    p.add_argument("--dtype", choices=(*DTYPE_CHOICES, "all"), default="all")
    p.add_argument("--repeats", type=cli_tuning.positive_int, default=5,
                   help="timed runs per op (after a warm-up)")  # fmt: skip


def _run_demo(args: argparse.Namespace) -> int:
    from . import demo
    from .demo import DTYPE_CHOICES

    dtypes = DTYPE_CHOICES if args.dtype == "all" else (args.dtype,)
    return demo.run(backend=args.backend, dtypes=dtypes, repeats=args.repeats)


# ------------------------------------------------------------------ doctor


def _add_doctor(sub: Any) -> None:
    p = sub.add_parser(
        "doctor",
        help="check the environment (CuPy, driver, NVRTC, headers, GPU, caches) and advise",
        description="Checks each piece cudnnlite needs and says, for each problem, what to "
        "do next. Exit status 1 if a check failed (warnings do not count).",
    )
    p.add_argument(
        "--arch",
        metavar="sm_XX",
        type=cli_tuning.arch_name,
        help="compile every kernel for this arch with NVRTC (default: the GPU's arch; "
        "none without a GPU)",
    )
    p.add_argument("--quick", action="store_true", help="skip compiling every kernel")
    p.add_argument("--json", action="store_true", help="print the report as JSON")


def _run_doctor(args: argparse.Namespace) -> int:
    from .doctor import doctor

    report = doctor(arch=args.arch, compile=not args.quick)
    if args.json:
        import json

        print(json.dumps(report.to_dict(), indent=2))
    else:
        print(report)
    return 0 if report.ok else 1


# ------------------------------------------------------------------ resources


def _add_resources(sub: Any) -> None:
    p = sub.add_parser(
        "resources",
        help="per-kernel registers, spills, shared/local memory and occupancy (no GPU needed)",
        description="Compiles every kernel with NVRTC and the CUDA backend's options and "
        "reports what ptxas gave each kernel and the blocks and warps per SM that follow. "
        "The same as python -m cudnnlite.runtime.nvrtc_check --resources.",
    )
    p.add_argument("--arch", action="append", metavar="sm_XX", type=cli_tuning.arch_name,
                   help="repeatable (default: sm_90)")  # fmt: skip
    p.add_argument("--json", metavar="PATH", help="also write the report as JSON")
    p.add_argument("--filter", metavar="TEXT", help="only modules whose label contains TEXT")
    p.add_argument(
        "--assume-block", type=cli_tuning.positive_int, metavar="THREADS",
        help="for kernels without launch bounds",
    )
    p.add_argument("--jobs", "-j", type=cli_tuning.positive_int,
                   help="parallel compilations (default: CPUs)")  # fmt: skip


def _run_resources(args: argparse.Namespace) -> int:
    from .runtime import nvrtc_check

    argv = ["--resources"]
    for arch in args.arch or ["sm_90"]:
        argv += ["--arch", arch]
    for flag, value in (
        ("--json", args.json),
        ("--filter", args.filter),
        ("--assume-block", args.assume_block),
        ("--jobs", args.jobs),
    ):
        if value is not None:
            argv += [flag, str(value)]
    return nvrtc_check.main(argv)


# ------------------------------------------------------------------ precompile


def _add_precompile(sub: Any) -> None:
    p = sub.add_parser(
        "precompile",
        help="compile kernels ahead of time (kernel families or layer suites), in parallel",
        description="Warms the compile cache so that first calls do not wait for NVRTC or "
        "g++: every module of the named kernel families, or the kernels the dispatcher picks "
        "for a layer suite's convolutions. No target: every family.",
    )
    p.add_argument("targets", nargs="*", metavar="TARGET",
                   help="a kernel family (activation, softmax, solvers, ...) or a suite "
                   "(resnet50, i3d, ...)")  # fmt: skip
    p.add_argument("--dtype", action="append", choices=("fp32", "fp16", "bf16", "fp64"),
                   help="repeatable (default: fp32)")  # fmt: skip
    p.add_argument("--backend", choices=("auto", "cpu", "cuda"), default="auto")
    p.add_argument("--arch", metavar="sm_XX", type=cli_tuning.arch_name,
                   help="compile CUBINs for this GPU arch without one (sm_80, sm_90, ...) into "
                   "the CUBIN cache a run on that GPU reads")  # fmt: skip
    p.add_argument("--jobs", "-j", type=cli_tuning.positive_int, default=8,
                   help="parallel compilations")  # fmt: skip
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def _run_precompile(args: argparse.Namespace) -> int:
    from .errors import BadParamError
    from .precompile import precompile

    try:
        report = precompile(args.targets, dtypes_=args.dtype or ["fp32"], backend=args.backend,
                            arch=args.arch, jobs=args.jobs,
                            progress=not args.no_progress)  # fmt: skip
    except BadParamError as exc:
        print(f"cudnnlite precompile: {exc}", file=sys.stderr)
        return 2
    for label, error in report.failed.items():
        print(f"FAIL {label}\n    {error}")
    print(f"{len(report.built)} built, {len(report.failed)} failed")
    return 0 if report.ok else 1


# ------------------------------------------------------------------ main

_COMMANDS: dict[str, tuple[Callable[[Any], None], Callable[[argparse.Namespace], int]]] = {
    "info": (_add_info, _run_info),
    "demo": (_add_demo, _run_demo),
    "tune": (cli_tuning.add_tune, cli_tuning.run_tune),
    "db": (cli_tuning.add_db, cli_tuning.run_db),
    "doctor": (_add_doctor, _run_doctor),
    "resources": (_add_resources, _run_resources),
    "precompile": (_add_precompile, _run_precompile),
}


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="cudnnlite",
        description="cuDNN's deep-learning primitives for CuPy and NumPy arrays.",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for add, _ in _COMMANDS.values():
        add(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``cudnnlite`` script; returns the exit status: a library error
    (a bad suite, file or size; no CuPy for --backend cuda), a file the command cannot
    read or write, or a file that is not YAML is one line on stderr and status 2."""
    import yaml

    from .errors import CudnnliteError

    args = _parser().parse_args(argv)
    try:
        return _COMMANDS[args.command][1](args)
    except (CudnnliteError, OSError, yaml.YAMLError) as exc:
        message = " ".join(str(exc).split())  # (one line: YAML errors span several)
        message = message.removeprefix(f"{args.command}: ")  # (errors that name the command)
        print(f"cudnnlite {args.command}: error: {message}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
