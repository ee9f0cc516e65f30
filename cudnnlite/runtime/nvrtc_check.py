"""NVRTC compile check: compiles kernel modules to CUBIN on a machine without a GPU.

CuPy's compiler asks the driver for a device, so this calls NVRTC directly through
ctypes. Every ``ModuleSpec`` the library can generate (``variants.all_module_specs()``)
is compiled for real architectures (``sm_75``, ``sm_80``, ``sm_90`` by default), which
catches a kernel variant that only the CPU emulator's g++ accepts. The CUDA backend
compiles with the same function (:func:`compile_program`) and the same options
(``compile_options.runtime_options``), so ``--resources`` (registers, spills, shared
memory, occupancy per kernel: ``resources``) reports the code that runs.

    python -m cudnnlite.runtime.nvrtc_check [--arch sm_90 ...] [--jobs N] [--list]
    python -m cudnnlite.runtime.nvrtc_check --resources --arch sm_90 [--json PATH]
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os
import re
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import BadParamError, CompileError, NotSupportedError
from . import compile_options, cuda_toolkit
from .kernel import ModuleSpec
from .sources import source_path

DEFAULT_ARCHS = ("sm_75", "sm_80", "sm_90")

_ARCH_RE = re.compile(r"sm_\d+[af]?")
_VIRTUAL_RE = re.compile(r"compute_\d+[af]?")


@dataclass(frozen=True)
class CompileResult:
    """One successful NVRTC compilation."""

    source: str  # the program name given to NVRTC: the source file's path
    arch: str
    cubin: bytes = field(repr=False)
    lowered_names: dict[str, str]  # name expression -> symbol in the cubin
    log: str  # NVRTC's log (warnings); empty when clean
    options: tuple[str, ...]
    seconds: float

    @property
    def cubin_size(self) -> int:
        return len(self.cubin)


@dataclass(frozen=True)
class CheckResult:
    """Outcome of compiling one (spec, arch) pair in :func:`check_all`."""

    spec: ModuleSpec
    arch: str
    ok: bool
    seconds: float
    cubin_size: int = 0
    lowered_names: dict[str, str] = field(default_factory=dict)
    error: str | None = None  # the CompileError / NotSupportedError message on failure
    log: str = ""  # NVRTC's warnings on success


# ------------------------------------------------------------------ NVRTC calls


def _status_text(lib: ctypes.CDLL, rc: int) -> str:
    msg = lib.nvrtcGetErrorString(rc)
    return msg.decode() if msg else f"status {rc}"


def _strings(values: Sequence[str]) -> ctypes.Array:
    return (ctypes.c_char_p * len(values))(*(v.encode() for v in values))


def _program_log(lib: ctypes.CDLL, prog: ctypes.c_void_p) -> str:
    size = ctypes.c_size_t()
    if lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size)) != 0 or size.value <= 1:
        return ""
    buf = ctypes.create_string_buffer(size.value)
    if lib.nvrtcGetProgramLog(prog, buf) != 0:
        return ""
    return buf.value.decode(errors="replace").strip()


def _format_failure(
    what: str,
    program_name: str,
    arch: str,
    defines: Sequence[str],
    name_expressions: Sequence[str],
    options: Sequence[str],
    log: str,
) -> str:
    return (
        f"cudnnlite: NVRTC {what}\n"
        f"  source: {program_name}\n"
        f"  arch: {arch}\n"
        f"  defines: {' '.join(defines) or '(none)'}\n"
        f"  name expressions: {', '.join(name_expressions) or '(none)'}\n"
        f"  options: {' '.join(options)}\n"
        f"  NVRTC log:\n{log or '(empty)'}"
    )


def _check_arch(arch: str) -> None:
    if not _ARCH_RE.fullmatch(arch):
        # nvrtcGetCUBIN needs a real architecture; compute_XX would only give PTX.
        raise BadParamError(
            f"cudnnlite: arch must be a real architecture like 'sm_90', not {arch!r}"
        )


def nvrtc_options(
    arch: str, defines: Iterable[str] = (), include_dirs: Iterable[Path] | None = None
) -> list[str]:
    """The NVRTC options a module is compiled with at run time (no GPU needed to compute them):
    ``compile_options.runtime_options`` with the CUDA headers' folders found by
    ``cuda_toolkit.find_cuda_include_dirs`` (or ``include_dirs``)."""
    _check_arch(arch)
    if include_dirs is None:
        include_dirs = cuda_toolkit.find_cuda_include_dirs()
    return list(compile_options.runtime_options(arch, defines, include_dirs))


def compile_source(
    source: str,
    program_name: str,
    name_expressions: Sequence[str],
    arch: str = "sm_90",
    defines: Sequence[str] = (),
    report_options: Sequence[str] = (),
) -> CompileResult:
    """Compiles CUDA C++ text to a CUBIN for ``arch``; raises CompileError with NVRTC's log.

    ``program_name`` (normally the file's path) is how NVRTC names the source in messages;
    ``defines`` are ``-DK=V`` options; each name expression (``relu_fwd``,
    ``act_fwd<float, 2>``) is resolved to its symbol in the cubin. ``report_options`` go
    after the runtime's options and must not change the code (``--ptxas-options=-v``).
    """
    _check_arch(arch)
    options = [*nvrtc_options(arch, defines), *report_options]
    return compile_program(source, program_name, name_expressions, arch, options, defines)


def compile_program(
    source: str,
    program_name: str,
    name_expressions: Sequence[str],
    arch: str,
    options: Sequence[str],
    defines: Sequence[str] = (),
) -> CompileResult:
    """Compiles ``source`` with exactly ``options`` (which name ``-arch={arch}``) through
    the NVRTC of ``cuda_toolkit.find_nvrtc()``; ``defines`` only label error messages.
    The CUDA backend's entry point: it keys its CUBIN cache on these options.

    ``arch`` may also be virtual (``compute_90``, for a device newer than NVRTC knows):
    the result's ``cubin`` then holds PTX text, which the driver compiles at load."""
    ptx = _VIRTUAL_RE.fullmatch(arch) is not None
    if not ptx:
        _check_arch(arch)
    nvrtc = cuda_toolkit.find_nvrtc()
    if not ptx and not nvrtc.supports(arch):
        raise NotSupportedError(
            f"cudnnlite: NVRTC {nvrtc.version_string()} ({nvrtc.path}) cannot compile for {arch}; "
            f"it supports sm_{', sm_'.join(map(str, nvrtc.supported_archs))}"
        )
    lib = cuda_toolkit.open_nvrtc(nvrtc)
    options = list(options)
    start = time.perf_counter()

    def fail(what: str, log: str) -> CompileError:
        return CompileError(
            _format_failure(what, program_name, arch, defines, name_expressions, options, log)
        )

    prog = ctypes.c_void_p()
    rc = lib.nvrtcCreateProgram(
        ctypes.byref(prog), source.encode(), program_name.encode(), 0, None, None
    )
    if rc != 0:
        raise fail(f"nvrtcCreateProgram failed: {_status_text(lib, rc)}", "")
    try:
        for expr in name_expressions:
            rc = lib.nvrtcAddNameExpression(prog, expr.encode())
            if rc != 0:
                raise fail(f"nvrtcAddNameExpression({expr!r}) failed: {_status_text(lib, rc)}", "")
        # ctypes drops the GIL for the call, so threads compile in parallel.
        rc = lib.nvrtcCompileProgram(prog, len(options), _strings(options))
        log = _program_log(lib, prog)
        if rc != 0:
            raise fail(f"compilation failed ({_status_text(lib, rc)})", log)

        lowered: dict[str, str] = {}
        for expr in name_expressions:
            out = ctypes.c_char_p()
            rc = lib.nvrtcGetLoweredName(prog, expr.encode(), ctypes.byref(out))
            if rc != 0 or not out.value:
                raise fail(f"nvrtcGetLoweredName({expr!r}) failed: {_status_text(lib, rc)}", log)
            lowered[expr] = out.value.decode()  # owned by the program: copy before destroying

        what = "PTX" if ptx else "CUBIN"
        get_size, get = (
            (lib.nvrtcGetPTXSize, lib.nvrtcGetPTX)
            if ptx
            else (lib.nvrtcGetCUBINSize, lib.nvrtcGetCUBIN)
        )
        size = ctypes.c_size_t()
        rc = get_size(prog, ctypes.byref(size))
        if rc != 0 or size.value == 0:
            raise fail(f"nvrtcGet{what}Size failed: {_status_text(lib, rc)}", log)
        buf = ctypes.create_string_buffer(size.value)
        rc = get(prog, buf)
        if rc != 0:
            raise fail(f"nvrtcGet{what} failed: {_status_text(lib, rc)}", log)
        cubin = buf.raw
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))
    return CompileResult(
        program_name, arch, cubin, lowered, log, tuple(options), time.perf_counter() - start
    )


def compile_to_cubin(
    spec: ModuleSpec,
    arch: str = "sm_90",
    *,
    source_file: str | os.PathLike | None = None,
    report_options: Sequence[str] = (),
) -> CompileResult:
    """Compiles ``spec`` for ``arch`` from ``cuda_src/<spec.source>``.

    ``source_file`` compiles another file instead (tests use it for broken sources); the
    spec's names and defines still apply.
    """
    path = Path(source_file) if source_file is not None else source_path(spec.source)
    return compile_source(
        path.read_text(), str(path), spec.names, arch, spec.define_options(), report_options
    )


# ------------------------------------------------------------------ the check


# NVRTC's fast-compile level (recent NVRTCs): the front end and ptxas in full, most
# optimizations off; 5-9x quicker on our largest modules.
FAST_COMPILE = ("--Ofast-compile=max",)


def fast_compile_options() -> tuple[str, ...]:
    """:data:`FAST_COMPILE` where this NVRTC accepts it (asked once), else nothing."""
    return _fast_compile_options(cuda_toolkit.find_nvrtc().path)


@functools.cache
def _fast_compile_options(nvrtc_path: Path) -> tuple[str, ...]:
    text = 'extern "C" __global__ void k(float* y) { y[threadIdx.x] = 1.0f; }\n'
    try:
        compile_program(text, "fast_compile_probe.cu", ["k"], "sm_75",
                        [*nvrtc_options("sm_75"), *FAST_COMPILE])  # fmt: skip
    except (CompileError, NotSupportedError):
        return ()  # NVRTC_ERROR_INVALID_OPTION: an NVRTC from before the option
    return FAST_COMPILE


def _compile_check(spec: ModuleSpec, arch: str, quick: bool) -> CompileResult:
    """``spec`` with the run-time options of ``arch``; a virtual arch (``compute_90``) goes
    through NVRTC's front end and code generation to PTX only (no ptxas), with the options
    of its real arch. ``quick`` adds :func:`fast_compile_options`: a check that the source
    compiles for ``arch`` (every error of the front end, PTX generation and ptxas), not of
    the code the run time would get."""
    virtual = _VIRTUAL_RE.fullmatch(arch) is not None
    real = "sm_" + arch.split("_", 1)[1] if virtual else arch
    options = nvrtc_options(real, spec.define_options())
    if virtual:  # (the arch-specific target's virtual arch: compute_90a for sm_90a)
        target = "compute_" + compile_options.target(real).split("_", 1)[1]
        options = [f"-arch={target}" if o.startswith("-arch=") else o for o in options]
    if quick:
        options += fast_compile_options()
    path = source_path(spec.source)
    return compile_program(path.read_text(), str(path), spec.names, arch, options,
                           spec.define_options())  # fmt: skip


def _check_one(spec: ModuleSpec, arch: str, quick: bool) -> CheckResult:
    start = time.perf_counter()
    try:
        res = _compile_check(spec, arch, quick)
    except (CompileError, NotSupportedError, BadParamError, OSError) as exc:
        # OSError: a spec naming a missing source (FileNotFoundError) is a failure to report.
        return CheckResult(spec, arch, False, time.perf_counter() - start, error=str(exc))
    return CheckResult(
        spec, arch, True, res.seconds, res.cubin_size, res.lowered_names, log=res.log
    )


_CTYPES = ("__nv_bfloat16", "__half", "double", "float")  # longest first: "float" is in none


def code_path(spec: ModuleSpec) -> tuple[str, tuple[str, ...], tuple[str, ...]]:
    """What decides which source lines a module compiles, beyond tuning constants: its
    source, its data types, and its kernels' template names (``implicit_gemm`` and
    ``implicit_gemm_3d`` differ; the tile sizes of one kernel do not)."""
    text = " ".join([*spec.names, *(v for _, v in spec.defines)])
    ctypes_ = tuple(t for t in _CTYPES if re.search(rf"\b{t}\b", text))
    stems = tuple(sorted({n.split("<", 1)[0] for n in spec.names}))
    return spec.source, ctypes_, stems


_INCLUDE_RE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
_ARCH_TEST_RE = re.compile(r"__CUDA_ARCH__\s*(?:>=|>|<=|<|==|!=)\s*(\d+)")


def arch_thresholds(source: str) -> frozenset[int]:
    """The ``__CUDA_ARCH__`` values a source and the cuda_src headers it includes compare
    against: two archs compile the same lines of it unless one of these lies between them."""
    seen: set[str] = set()
    values: set[int] = set()
    pending = [source]
    while pending:
        rel = pending.pop()
        if rel in seen:
            continue
        seen.add(rel)
        try:
            text = source_path(rel).read_text()
        except FileNotFoundError:
            continue  # a toolkit header (cuda_fp16.h, ...): not ours
        values.update(int(v) for v in _ARCH_TEST_RE.findall(text))
        pending.extend(_INCLUDE_RE.findall(text))
    return frozenset(values)


def _arch_number(arch: str) -> int:
    return int(re.sub(r"\D", "", arch)) * 10


def _uses_16bit_headers(spec: ModuleSpec) -> bool:
    """Whether a module's code path may use cuda_fp16.h / cuda_bf16.h types: it names one,
    or names no type at all (a kernel's types are then not visible from its name)."""
    types_ = code_path(spec)[1]
    return not types_ or any(t in ("__half", "__nv_bfloat16") for t in types_)


def coverage_tasks(
    specs: Iterable[ModuleSpec], archs: Sequence[str], full_arch: str, ptx_variants: bool = False
) -> list[tuple[ModuleSpec, str]]:
    """The CI check's (spec, arch) pairs, about half of every spec for every arch (most
    modules are tile-size variants of one kernel):

    - every spec for ``full_arch``;
    - for an older arch, one spec per code path (``code_path``: source, dtype, kernel
      templates), unless that arch and the next newer one in ``archs`` compile the same
      lines of our sources (no ``arch_thresholds`` value between them; sm_80 and sm_90
      differ only where a source tests for 900). The oldest arch is always compiled:
      the toolkit headers' own arch differences (16-bit types on sm_75) live there;
      except for code paths in float and double alone, which use none of those headers'
      types: they meet the oldest arch only where a source tells it from the next one
      (mma.cuh's sm_80 test: the DMMA and TF32 kernels' trap paths).

    Every line of every source thus meets every arch's compiler in each data type, and
    every tuning variant one arch's; the command line compiles everything everywhere.

    ``ptx_variants`` (the CI budget): the tuning variants beyond each code path's first go
    to PTX for ``full_arch`` (``compute_90``: NVRTC's front end and code generation, their
    template arithmetic and static_asserts, without ptxas, which the first variant of the
    same code path meets), and so do the oldest arch's code paths that meet it only for
    the toolkit headers (no arch test of ours between it and the next arch)."""
    specs = list(specs)
    seen: set[tuple] = set()
    sampled = []
    for spec in specs:
        key = code_path(spec)
        if key not in seen:
            seen.add(key)
            sampled.append(spec)
    ordered = sorted(archs, key=_arch_number)
    tasks = []
    for arch in archs:
        if arch == full_arch:
            first = {id(spec) for spec in sampled}
            virtual = "compute_" + arch.split("_", 1)[1]
            tasks.extend((spec, arch if id(spec) in first or not ptx_variants else virtual)
                         for spec in specs)  # fmt: skip
            continue
        i = ordered.index(arch)
        if i == len(ordered) - 1:
            tasks.extend((spec, arch) for spec in sampled)
            continue
        lo, hi = _arch_number(arch), _arch_number(ordered[i + 1])

        def differs(spec: ModuleSpec, lo: int = lo, hi: int = hi) -> bool:
            return any(lo < t <= hi for t in arch_thresholds(spec.source))

        if i == 0:
            virtual = "compute_" + arch.split("_", 1)[1]
            for spec in sampled:
                if differs(spec):  # our own arch tests (inline PTX): through ptxas
                    tasks.append((spec, arch))
                elif _uses_16bit_headers(spec):  # the toolkit headers' arch code paths
                    tasks.append((spec, virtual if ptx_variants else arch))
            continue
        tasks.extend((spec, arch) for spec in sampled if differs(spec))
    return tasks


def check_all(
    specs: Iterable[ModuleSpec] | None = None,
    archs: Sequence[str] = DEFAULT_ARCHS,
    jobs: int | None = None,
    tasks: Sequence[tuple[ModuleSpec, str]] | None = None,
    quick: Callable[[ModuleSpec, str], bool] | None = None,
) -> list[CheckResult]:
    """Compiles every spec for every arch (or the given ``tasks``) in parallel; results in
    task order. The tasks ``quick(spec, arch)`` is true for compile at NVRTC's fast-compile
    level (:func:`fast_compile_options`): every compile error still shows, in a fraction of
    the time.

    ``specs`` defaults to ``variants.all_module_specs()``. Compile failures are reported
    in the results; a missing NVRTC or headers raises NotSupportedError up front.
    """
    if specs is None:
        from .variants import all_module_specs  # imports the kernel providers

        specs = all_module_specs()
    specs = list(specs)
    # Fail once, clearly, rather than once per (spec, arch).
    cuda_toolkit.find_nvrtc()
    cuda_toolkit.find_cuda_include_dirs()
    if tasks is None:
        tasks = [(spec, arch) for spec in specs for arch in archs]
    if not tasks:
        return []
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="nvrtc") as pool:
        return list(pool.map(lambda t: _check_one(*t, bool(quick and quick(*t))), tasks))


# ------------------------------------------------------------------ command line


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m cudnnlite.runtime.nvrtc_check",
        description="Compile every cudnnlite kernel variant with NVRTC (no GPU needed).",
    )
    p.add_argument(
        "--arch",
        action="append",
        metavar="sm_XX",
        help=f"real architecture to compile for; repeatable (default: {' '.join(DEFAULT_ARCHS)})",
    )
    p.add_argument(
        "--jobs", "-j", type=int, default=None, help="parallel compilations (default: CPUs)"
    )
    p.add_argument("--list", action="store_true", help="list the module specs and exit")
    p.add_argument("--verbose", "-v", action="store_true", help="print lowered names and warnings")
    add_resource_arguments(p)
    return p.parse_args(argv)


def add_resource_arguments(p: argparse.ArgumentParser) -> None:
    """``--resources`` and its options (shared with ``cudnnlite nvrtc-check``)."""
    p.add_argument(
        "--resources",
        action="store_true",
        help="report registers, spills, shared/local memory and blocks/warps per SM per kernel",
    )
    p.add_argument("--json", metavar="PATH", help="with --resources: also write the report here")
    p.add_argument(
        "--assume-block",
        type=int,
        metavar="THREADS",
        help="with --resources: block size for kernels without __launch_bounds__",
    )
    p.add_argument(
        "--filter", metavar="TEXT", help="only modules whose label contains TEXT (e.g. conv/)"
    )


def run_resources(args: argparse.Namespace, specs: Sequence[ModuleSpec]) -> int:
    """The ``--resources`` report; returns the exit status (1 if a module failed to compile)."""
    from . import resources

    archs = tuple(args.arch or DEFAULT_ARCHS)
    try:
        results = resources.resource_report(specs, archs, args.jobs, args.assume_block)
    except (BadParamError, NotSupportedError) as exc:
        print(str(exc), file=sys.stderr)
        return 2
    resources.print_report(results)
    if args.json:
        resources.write_json(results, args.json)
        print(f"wrote {args.json}")
    failed = sum(r.error is not None for r in results)
    spilling = sum(k.spills for r in results for k in r.kernels)
    print(f"{len(results) - failed} modules reported, {failed} failed, {spilling} kernels spill")
    return 1 if failed else 0


def main(argv: Sequence[str] | None = None, specs: Iterable[ModuleSpec] | None = None) -> int:
    """Entry point; returns the exit status (0: all compiled, 1: a failure, 2: cannot run)."""
    args = _parse(argv)
    if specs is None:
        from .variants import all_module_specs

        try:
            specs = all_module_specs()
        except ImportError as exc:
            print(f"cudnnlite: cannot import the kernel providers: {exc}", file=sys.stderr)
            return 2
    specs = [s for s in specs if not args.filter or args.filter in s.label()]
    if args.list:
        for spec in specs:
            print(f"{spec.label()}  {' '.join(spec.names)}")
        return 0
    archs = tuple(args.arch or DEFAULT_ARCHS)
    try:
        nvrtc = cuda_toolkit.find_nvrtc()
        headers = cuda_toolkit.find_cuda_include_dirs()
    except NotSupportedError as exc:
        print(str(exc), file=sys.stderr)
        return 2
    print(f"NVRTC {nvrtc.version_string()}: {nvrtc.path} ({nvrtc.origin})")
    print(f"headers: {' '.join(map(str, headers))}")
    if args.resources:
        return run_resources(args, specs)

    start = time.perf_counter()
    results = check_all(specs, archs, args.jobs)
    width = max((len(r.spec.label()) for r in results), default=0)
    for r in results:
        status = "OK  " if r.ok else "FAIL"
        size = f"{r.cubin_size:>8} B" if r.ok else " " * 10
        print(
            f"{status} {r.arch:<6} {r.seconds:6.2f}s {size}  {r.spec.label():<{width}}", flush=True
        )
        if args.verbose and r.ok:
            for expr, sym in r.lowered_names.items():
                print(f"       {expr} -> {sym}")
            if r.log:
                print("\n".join("       " + line for line in r.log.splitlines()))
        if not r.ok:
            print("\n".join("       " + line for line in (r.error or "").splitlines()))
    failed = sum(not r.ok for r in results)
    print(
        f"{len(results) - failed} compiled, {failed} failed "
        f"({len(specs)} modules x {len(archs)} archs, {time.perf_counter() - start:.1f}s wall)"
    )
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
