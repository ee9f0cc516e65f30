"""Per-kernel resource report: registers, spills, shared and local memory, and occupancy.

``python -m cudnnlite.runtime.nvrtc_check --resources --arch sm_90`` (or
``cudnnlite resources``) compiles every module with the runtime's options plus ptxas's
verbose flag (a reporting option: the machine code is the same, ``tests/test_resources.py``
checks it), reads the figures from ptxas's log, checks them against the CUBIN's own
records (``cubin.read_cubin``), and works out the resident blocks and warps per SM
(``occupancy``).

The block size is the kernel's ``__launch_bounds__`` when it has one (every library kernel
but the self-tests does); otherwise ``assume_threads`` if given, else it is unknown and the
report gives only the warps the registers allow (marked ``?``). Dynamic shared memory is
sized at launch and is not counted: the report's shared memory is the static part.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from ..errors import BadParamError, CompileError, NotSupportedError
from . import cubin as cubin_reader
from . import occupancy as occ
from .kernel import ModuleSpec

PTXAS_VERBOSE = "--ptxas-options=-v"


@dataclass(frozen=True)
class KernelResources:
    """One kernel of one module on one arch."""

    module: str  # ModuleSpec.label()
    name: str  # the name expression the library asks for, else the symbol
    symbol: str
    arch: str
    registers: int
    spill_stores: int  # bytes
    spill_loads: int  # bytes
    stack_frame: int  # local memory per thread, bytes
    static_shared: int  # bytes
    barriers: int
    threads: int | None  # threads per block used for occupancy
    threads_from: str  # "launch_bounds", "assumed" or "unknown"
    blocks_per_sm: int | None
    warps_per_sm: int  # resident warps (the registers' bound when the block is unknown)
    limiter: str
    mismatch: str = ""  # where ptxas's log and the CUBIN disagree (should stay empty)

    @property
    def spills(self) -> bool:
        return bool(self.spill_stores or self.spill_loads)


@dataclass(frozen=True)
class ModuleResources:
    """The outcome of one (module, arch): its kernels, or the compile error."""

    spec: ModuleSpec
    arch: str
    kernels: tuple[KernelResources, ...] = ()
    error: str | None = None


def _occupancy_fields(
    arch: str, threads: int | None, registers: int, shared: int
) -> tuple[int | None, int, str]:
    if threads is None:
        lim = occ.limits(arch)
        return None, min(occ.warps_by_registers(registers, lim), lim.max_warps), "block unknown"
    o = occ.occupancy(arch, threads, registers, shared)
    return o.blocks, o.warps, o.limiter


def _mismatch(log: cubin_reader.PtxasReport, elf: cubin_reader.CubinKernel | None) -> str:
    if elf is None:
        return "not in the CUBIN"
    diffs = [
        f"{what}: log {a}, cubin {b}"
        for what, a, b in (
            ("registers", log.registers, elf.registers),
            ("stack frame", log.stack_frame, elf.frame_bytes),
            ("shared", log.shared, elf.static_shared),
        )
        if a != b
    ]
    return "; ".join(diffs)


def kernel_resources(
    spec: ModuleSpec,
    arch: str,
    image: bytes,
    log: str,
    lowered_names: dict[str, str],
    assume_threads: int | None = None,
) -> list[KernelResources]:
    """Resources of every entry function in a module compiled with ``PTXAS_VERBOSE``."""
    from_log = cubin_reader.parse_ptxas_log(log)
    if not from_log:
        raise BadParamError(f"no ptxas report in the log of {spec.label()}: compile with -v")
    from_elf = cubin_reader.read_cubin(image)
    expression = {sym: expr for expr, sym in lowered_names.items()}
    out = []
    for symbol, rep in sorted(from_log.items(), key=lambda kv: expression.get(kv[0], kv[0])):
        elf = from_elf.get(symbol)
        threads = elf.max_threads if elf is not None else None
        source = "launch_bounds" if threads else "unknown"
        if threads is None and assume_threads:
            threads, source = assume_threads, "assumed"
        blocks, warps, limiter = _occupancy_fields(arch, threads, rep.registers, rep.shared)
        out.append(
            KernelResources(
                module=spec.label(),
                name=expression.get(symbol, symbol),
                symbol=symbol,
                arch=arch,
                registers=rep.registers,
                spill_stores=rep.spill_stores,
                spill_loads=rep.spill_loads,
                stack_frame=rep.stack_frame,
                static_shared=rep.shared,
                barriers=rep.barriers,
                threads=threads,
                threads_from=source,
                blocks_per_sm=blocks,
                warps_per_sm=warps,
                limiter=limiter,
                mismatch=_mismatch(rep, elf),
            )
        )
    return out


def module_resources(
    spec: ModuleSpec, arch: str, assume_threads: int | None = None
) -> ModuleResources:
    """Compiles one module for ``arch`` with the runtime's options and reports its kernels."""
    from .nvrtc_check import compile_to_cubin

    try:
        res = compile_to_cubin(spec, arch, report_options=(PTXAS_VERBOSE,))
    except (CompileError, NotSupportedError, BadParamError, OSError) as exc:
        return ModuleResources(spec, arch, error=str(exc))
    kernels = kernel_resources(spec, arch, res.cubin, res.log, res.lowered_names, assume_threads)
    return ModuleResources(spec, arch, tuple(kernels))


def resource_report(
    specs: Iterable[ModuleSpec],
    archs: Sequence[str],
    jobs: int | None = None,
    assume_threads: int | None = None,
) -> list[ModuleResources]:
    """Every (spec, arch), compiled in parallel; results in (spec, arch) order."""
    for arch in archs:
        occ.limits(arch)  # an arch without a limits row fails before any compile
    tasks = [(spec, arch) for spec in specs for arch in archs]
    if not tasks:
        return []
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    with ThreadPoolExecutor(max_workers=workers, thread_name_prefix="ptxas") as pool:
        return list(pool.map(lambda t: module_resources(*t, assume_threads), tasks))


# ------------------------------------------------------------------ output

_HEADER = (
    f"{'regs':>4} {'spill st/ld':>11} {'stack':>5} {'smem':>6} {'bar':>3} "
    f"{'block':>6} {'blk/SM':>6} {'warps':>5}  {'limiter':<13} kernel"
)


def format_row(k: KernelResources) -> str:
    spills = f"{k.spill_stores}/{k.spill_loads}"
    block = str(k.threads) if k.threads else "?"
    if k.threads_from == "assumed":
        block += "*"
    blocks = str(k.blocks_per_sm) if k.blocks_per_sm is not None else "?"
    warps = str(k.warps_per_sm) if k.blocks_per_sm is not None else f"<={k.warps_per_sm}"
    flag = "  SPILLS" if k.spills else ""
    if k.mismatch:
        flag += f"  [log/cubin mismatch: {k.mismatch}]"
    return (
        f"{k.registers:>4} {spills:>11} {k.stack_frame:>5} {k.static_shared:>6} "
        f"{k.barriers:>3} {block:>6} {blocks:>6} {warps:>5}  {k.limiter:<13} {k.name}{flag}"
    )


def print_report(results: Sequence[ModuleResources]) -> None:
    """A table per (module, arch); errors in full."""
    print(_HEADER)
    for r in results:
        print(f"-- {r.arch} {r.spec.label()}")
        if r.error is not None:
            print("\n".join("   " + line for line in r.error.splitlines()))
            continue
        for k in r.kernels:
            print(format_row(k))
    print(
        "block: __launch_bounds__ (* assumed, ? unknown: warps are the registers' bound); "
        "smem: static bytes per block, dynamic not counted"
    )


def to_json(results: Sequence[ModuleResources]) -> dict[str, Any]:
    from . import cuda_toolkit

    nvrtc = cuda_toolkit.find_nvrtc()
    return {
        "nvrtc": nvrtc.version_string(),
        "limits": {a: asdict(occ.limits(a)) for a in dict.fromkeys(r.arch for r in results)},
        "modules": [
            {
                "module": r.spec.label(),
                "arch": r.arch,
                "error": r.error,
                "kernels": [asdict(k) for k in r.kernels],
            }
            for r in results
        ],
    }


def write_json(results: Sequence[ModuleResources], path: str | os.PathLike) -> None:
    Path(path).write_text(json.dumps(to_json(results), indent=1) + "\n")
