"""SASS instruction mix of each GEMM-like kernel's main loop, without a GPU.

    python benchmarks/sass_mix.py [--arch sm_90] [--small] [--filter TEXT] [--out DIR] [-j N]

Compiles the GEMM-like kernels (``GEMM_KERNELS``: the convolution GEMMs, WMMA and
tensor-core kernels) with NVRTC and exactly the CUDA backend's run-time options
(``cudnnlite.runtime.compile_options``), disassembles the CUBINs with ``nvdisasm`` (the
``nvidia-cuda-nvdisasm`` wheel, no GPU needed: ``pip install "cudnnlite[perf]"``), finds
each kernel's main loop and counts its instructions by class. With the registers, spills
and occupancy from ptxas (``cudnnlite.runtime.resources``), each row is checked against the
static targets of issue 11 (``TARGETS``); a row that misses one is flagged.

The main loop: every backward branch (a ``BRA`` whose target lies at or before it) closes
a loop, the instructions from the target to the branch. The main loop is the loop holding
the most MMA instructions (HMMA, IMMA, DMMA, ...) or, in a kernel without MMA, the most
FFMA (DFMA in a double CUDA-core kernel: kind "fp64"); among loops holding as many, the
shortest, i.e. the innermost (an outer loop over
filter taps holds the same MMAs as the reduction loop inside it). ptxas lays a loop's
blocks out contiguously, which the address range relies on.

Figures per kernel: instructions in the loop (NOPs left out) and on its hot path (the
cheapest pass that issues all the loop's math and cp.async refills: fast paths only, where
the loop's count holds every path; ``hot_path``), MMA, FFMA and DFMA counts,
instructions per math op (an MMA in a tensor-core kernel, an FFMA in an fp32 one, a DFMA
in an fp64 one), the FFMA (DFMA) fraction, shared loads (LDS, LDSM) per op, global loads
(LDG, LDGSTS), integer instructions (IMAD, IADD3, ISETP, LEA, SHF, LOP3, ... and their
uniform U- forms) per op, barriers (BAR). ``--out DIR`` (default ``benchmarks/results``
unless ``--small``) writes ``DIR/sass_mix_<arch>_<date>.json``. Without the disassembler
it says so and exits 0.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from _bench import REPO_ROOT, import_cudnnlite

# Kernels whose main loop is a GEMM, by name expression (regular expressions, searched).
# Extend this list when a GEMM-like kernel is added.
GEMM_KERNELS: tuple[str, ...] = (
    r"^implicit_(precomp_)?gemm<",
    r"^gemm_1x1<",
    r"^wmma_",
    r"^wino_batched_gemm",
    r"^bwd_data_igemm<",
    r"^bwd_filter_(gemm|wmma)<",
    r"mma",
    r"igemm",
    r"^tc_",
    r"^flash_fp32_(fwd|bwd_dkdv|bwd_dq)<",  # CUDA-core attention (attention/flash_fp32.cu)
    r"^flash_decode_split<",  # split-KV decoding (attention/flash_decode.cu)
    r"^sdpa_flash_fwd_tc<",
    r"^sdpa_flash_bwd_(main|dq)<",  # tensor-core attention backward (attention/flash_bwd.cu)
)
# ... except these helpers that the patterns above also catch (no GEMM main loop).
NOT_GEMM_KERNELS: tuple[str, ...] = (
    r"epilogue", r"_taps\b", r"_reduce\b", r"_to_nhwc<", r"_pad_channels<"
)
# Module sources left out: self-tests are not library kernels.
SKIP_SOURCES = ("selftest/",)
# --small: one module from each of these sources (the first spec of each), else the first.
SMALL_SOURCES = ("conv/gemm_1x1.cu", "conv/tc_implicit_gemm.cu")

TARGETS = {
    "tc_mma_fraction": 1 / 3,  # tensor-core loop: MMA >= 1/3 of the instructions
    "fp32_ffma_fraction": 0.75,  # CUDA-core loop: FFMA >= 75%
    "min_blocks_per_sm": 2,  # at least 2 blocks ...
    "min_warps_per_sm": 8,  # ... or 8 warps per SM
}

INTEGER_OPS = frozenset(
    "IMAD IMADSP IMUL IADD IADD3 IADD32I ISCADD ISETP ICMP LEA SHF SHL SHR LOP LOP3 LOP32I "
    "IMNMX VIMNMX IABS SEL PRMT BMSK SGXT POPC FLO BREV I2I IDP".split()
)
GLOBAL_LOADS = frozenset({"LDG", "LDGSTS"})
SHARED_LOADS = frozenset({"LDS", "LDSM"})


# ------------------------------------------------------------------ disassembler


def find_nvdisasm() -> Path | None:
    """``nvdisasm`` from ``CUDNNLITE_NVDISASM``, the PATH, the pip wheels, or ``CUDA_PATH``."""
    explicit = os.environ.get("CUDNNLITE_NVDISASM")
    if explicit:
        return Path(explicit) if Path(explicit).is_file() else None
    found = shutil.which("nvdisasm")
    if found:
        return Path(found)
    import site

    roots = [Path(p) for p in (*site.getsitepackages(), site.getusersitepackages(), *sys.path)]
    for root in dict.fromkeys(roots):
        for rel in ("nvidia/cu13/bin/nvdisasm", "nvidia/cuda_nvdisasm/bin/nvdisasm"):
            if (root / rel).is_file():
                return root / rel
    for var in ("CUDA_PATH", "CUDA_HOME"):
        if os.environ.get(var) and (Path(os.environ[var]) / "bin/nvdisasm").is_file():
            return Path(os.environ[var]) / "bin/nvdisasm"
    return None


MISSING = (
    "nvdisasm not found: pip install nvidia-cuda-nvdisasm (or 'cudnnlite[perf]'), "
    "or set CUDNNLITE_NVDISASM=/path/to/nvdisasm"
)


def disassemble(image: bytes, tool: Path) -> str:
    """The SASS text of every function in a CUBIN (``nvdisasm -c``)."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "module.cubin"
        path.write_bytes(image)
        done = subprocess.run(
            [str(tool), "-c", str(path)], capture_output=True, text=True, check=False
        )
    if done.returncode != 0:
        raise RuntimeError(f"nvdisasm failed ({done.returncode}): {done.stderr.strip()}")
    return done.stdout


# ------------------------------------------------------------------ parsing


@dataclass(frozen=True)
class Instr:
    addr: int
    opcode: str  # with modifiers: "HMMA.16816.F32"
    target: str | None = None  # branch target label
    predicated: bool = False  # under a guard (@P0, @!P1, ...): a branch may fall through

    @property
    def base(self) -> str:
        return self.opcode.split(".", 1)[0]


@dataclass
class Function:
    name: str  # the symbol
    instrs: list[Instr] = field(default_factory=list)
    labels: dict[str, int] = field(default_factory=dict)  # label -> address


_SECTION = re.compile(r"^\s*\.section\s+\.text\.(\S+?),")
_LABEL = re.compile(r"^(\.L\w+):")
_INSTR = re.compile(r"^\s*/\*([0-9a-f]+)\*/\s+(@!?U?P\w+\s+)?([A-Z][A-Z0-9_.x]*)([^;]*);")
_TARGET = re.compile(r"`\((\.L\w+)\)")


def parse_sass(text: str) -> dict[str, Function]:
    """Functions of an ``nvdisasm -c`` listing, by symbol, instructions in address order."""
    functions: dict[str, Function] = {}
    fn: Function | None = None
    pending: list[str] = []  # labels waiting for the next instruction's address
    for line in text.splitlines():
        if m := _SECTION.match(line):
            fn = functions.setdefault(m.group(1), Function(m.group(1)))
            pending = []
        elif fn is None:
            continue
        elif m := _LABEL.match(line):
            pending.append(m.group(1))
        elif m := _INSTR.match(line):
            addr = int(m.group(1), 16)
            for label in pending:
                fn.labels[label] = addr
            pending = []
            t = _TARGET.search(m.group(4))
            guard = m.group(2) is not None and m.group(2).strip() not in ("@PT", "@UPT")
            fn.instrs.append(Instr(addr, m.group(3), t.group(1) if t else None, guard))
    return functions


def loops(fn: Function) -> list[tuple[int, int]]:
    """(first, last) address of every loop closed by a backward branch."""
    out = []
    for ins in fn.instrs:
        if ins.base in ("BRA", "JMP") and ins.target in fn.labels:
            start = fn.labels[ins.target]
            if start <= ins.addr:
                out.append((start, ins.addr))
    return out


def _is_mma(base: str) -> bool:
    return base.endswith("MMA")  # HMMA, IMMA, DMMA, BMMA, HGMMA, ...


# One HMMA.16816 (m16n8k16) per warp: the unit of the tensor-core target.
HMMA_16816_MACS = 16 * 8 * 16


def mma_macs(opcode: str) -> int:
    """Multiply-adds one warp's MMA instruction does, from its shape modifier:
    ``HMMA.16816`` (m16n8k16) 2048, ``HMMA.1688`` 1024, ``DMMA.884`` 256, and a warpgroup
    MMA's share of its warpgroup's (4 warps): ``HGMMA.64x128x16`` 64 * 128 * 16 / 4. 0 for
    anything else."""
    parts = opcode.split(".")
    if len(parts) < 2 or not _is_mma(parts[0]):
        return 0
    shape = parts[1]
    if "x" in shape:  # warpgroup MMA: MxNxK over 4 warps
        dims = shape.split("x")
        if len(dims) == 3 and all(d.isdigit() for d in dims):
            return int(dims[0]) * int(dims[1]) * int(dims[2]) // 4
        return 0
    if not shape.isdigit() or len(shape) < 3:
        return 0
    m, rest = (16, shape[2:]) if shape.startswith("16") else (int(shape[0]), shape[1:])
    return m * int(rest[0]) * int(rest[1:])


def kind_of(fn: Function) -> str:
    """"tensor core" (any MMA), "fp64" (CUDA-core double: more DFMA than FFMA) or "fp32"."""
    if any(_is_mma(i.base) for i in fn.instrs):
        return "tensor core"
    bases = Counter(i.base for i in fn.instrs)
    return "fp64" if bases["DFMA"] > bases["FFMA"] else "fp32"


# The math instruction a kernel kind is counted by (its "op").
_OP_OF = {"fp32": "FFMA", "fp64": "DFMA"}


def main_loop(fn: Function) -> tuple[int, int] | None:
    """The shortest loop among those holding the most MMA (else FFMA, or DFMA in a double
    CUDA-core kernel) instructions."""
    kind = kind_of(fn)

    def score(span: tuple[int, int]) -> int:
        body = (i for i in fn.instrs if span[0] <= i.addr <= span[1])
        if kind == "tensor core":
            return sum(_is_mma(i.base) for i in body)
        return sum(i.base == _OP_OF[kind] for i in body)

    best = max(loops(fn), key=lambda s: (score(s), s[0] - s[1]), default=None)
    return best if best is not None and score(best) > 0 else None


def hot_path(fn: Function, span: tuple[int, int]) -> list[Instr]:
    """The instructions of the cheapest steady-state pass through a loop: among the paths
    from the loop's first instruction to its closing branch (forward branches taken or
    not; a guarded branch may fall through, an unguarded one may not; an inner loop's body
    once), those with the most math ops of the kernel's kind, then the most cp.async tile
    copies (LDGSTS: a pass that refills a stage), then the fewest instructions (NOPs left
    out). A loop with a rarely taken slow path (a pixel row's carry, a masked tile)
    counts its fast path here, where the loop's mix counts every path."""
    kind = kind_of(fn)
    body = [i for i in fn.instrs if span[0] <= i.addr <= span[1]]
    index = {ins.addr: k for k, ins in enumerate(body)}

    def key(ins: Instr) -> tuple[int, int, int]:  # what ins adds to a path's (lower: better)
        math = _is_mma(ins.base) if kind == "tensor core" else ins.base == _OP_OF[kind]
        return (-int(math), -int(ins.base == "LDGSTS"), int(ins.base != "NOP"))

    def add(a: tuple[int, int, int], b: tuple[int, int, int]) -> tuple[int, int, int]:
        return (a[0] + b[0], a[1] + b[1], a[2] + b[2])

    # best[k]: the best path's key reaching body[k], and its predecessor
    best: list[tuple[tuple[int, int, int], int] | None] = [None] * len(body)
    best[0] = (key(body[0]), -1)
    for k, ins in enumerate(body[:-1]):
        if best[k] is None:
            continue
        succ = []
        jump = fn.labels.get(ins.target) if ins.base in ("BRA", "JMP") and ins.target else None
        if jump is not None and jump > ins.addr and jump in index:
            succ.append(index[jump])
        ends = ins.base in ("EXIT", "RET", "BRA", "JMP") and not ins.predicated
        if not ends or (jump is not None and jump <= ins.addr):  # an inner loop: once
            succ.append(k + 1)
        for n in succ:
            cand = add(best[k][0], key(body[n]))
            if best[n] is None or cand < best[n][0]:
                best[n] = (cand, k)
    k = len(body) - 1
    if best[k] is None:
        return body
    path = []
    while k >= 0:
        path.append(body[k])
        k = best[k][1]
    return path[::-1]


@dataclass(frozen=True)
class Mix:
    instructions: int
    mma: int
    ffma: int
    dfma: int
    shared_loads: int  # LDS + LDSM
    ldsm: int
    shared_stores: int
    global_loads: int  # LDG + LDGSTS
    integer: int
    barriers: int
    opcodes: dict[str, int]  # every base opcode, for a closer look
    mma_macs: int = 0  # multiply-adds of its MMA instructions, per warp (mma_macs)


def mix(instrs: Iterable[Instr]) -> Mix:
    instrs = list(instrs)
    bases = Counter(i.base for i in instrs if i.base != "NOP")

    def count(names: Iterable[str]) -> int:
        return sum(bases[n] for n in names)

    integer = sum(
        n for b, n in bases.items() if b in INTEGER_OPS or (b[:1] == "U" and b[1:] in INTEGER_OPS)
    )
    return Mix(
        instructions=sum(bases.values()),
        mma=sum(n for b, n in bases.items() if _is_mma(b)),
        ffma=bases["FFMA"],
        dfma=bases["DFMA"],
        shared_loads=count(SHARED_LOADS),
        ldsm=bases["LDSM"],
        shared_stores=bases["STS"],
        global_loads=count(GLOBAL_LOADS),
        integer=integer,
        barriers=bases["BAR"],
        opcodes=dict(bases.most_common()),
        mma_macs=sum(mma_macs(i.opcode) for i in instrs),
    )


# ------------------------------------------------------------------ one kernel


@dataclass
class Row:
    module: str
    kernel: str  # name expression
    symbol: str
    kind: str  # "tensor core", "fp32" or "fp64" (CUDA-core double)
    registers: int
    spill_bytes: int
    threads: int | None
    blocks_per_sm: int | None
    warps_per_sm: int
    loop: tuple[int, int] | None  # addresses
    mix: Mix
    hot: Mix | None = None  # the loop's hot path (hot_path): fast paths only
    misses: list[str] = field(default_factory=list)

    @property
    def ops(self) -> int:
        return {"tensor core": self.mix.mma, "fp64": self.mix.dfma}.get(self.kind, self.mix.ffma)

    def per_op(self, value: int) -> float | None:
        return value / self.ops if self.ops else None

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        m = self.mix
        d["per_op"] = "MMA" if self.kind == "tensor core" else _OP_OF[self.kind]
        d["instructions_per_op"] = self.per_op(m.instructions)
        d["mma_fraction"] = m.mma / m.instructions if m.instructions else None
        # tensor work per issued instruction, comparable across MMA shapes (a loop of
        # HMMA.16816 only: 2048; a warpgroup MMA carries 16-64 times one HMMA's work)
        d["macs_per_instruction"] = m.mma_macs / m.instructions if m.instructions else None
        d["ffma_fraction"] = m.ffma / m.instructions if m.instructions else None
        d["dfma_fraction"] = m.dfma / m.instructions if m.instructions else None
        d["shared_loads_per_op"] = self.per_op(m.shared_loads)
        d["integer_per_op"] = self.per_op(m.integer)
        h = self.hot
        d["hot_instructions"] = h.instructions if h else None
        d["hot_math_fraction"] = (
            (h.mma if self.kind == "tensor core" else h.dfma if self.kind == "fp64" else h.ffma)
            / h.instructions
            if h and h.instructions
            else None
        )
        return d


def check_targets(row: Row) -> list[str]:
    """What the row misses among ``TARGETS``, in words."""
    misses = []
    m = row.mix
    if row.loop is None:
        misses.append("no main loop found")
    elif row.kind == "tensor core" and "HGMMA" in m.opcodes:
        # A warpgroup MMA is 16-64 HMMA.16816s of work in one instruction: the target in
        # work per instruction, a third of a loop of HMMA.16816s.
        want = TARGETS["tc_mma_fraction"] * HMMA_16816_MACS
        if m.mma_macs < want * m.instructions:
            per = m.mma_macs / m.instructions
            misses.append(f"{per:.0f} MMA multiply-adds per instruction < {want:.0f}")
    elif row.kind == "tensor core" and m.mma < TARGETS["tc_mma_fraction"] * m.instructions:
        misses.append(f"MMA {m.mma / m.instructions:.0%} of the loop < 33%")
    elif row.kind == "fp32" and m.ffma < TARGETS["fp32_ffma_fraction"] * m.instructions:
        misses.append(f"FFMA {m.ffma / m.instructions:.0%} of the loop < 75%")
    elif row.kind == "fp64" and m.dfma < TARGETS["fp32_ffma_fraction"] * m.instructions:
        # (the fp32 target held to the double CUDA-core loops: FMA-bound the same way)
        misses.append(f"DFMA {m.dfma / m.instructions:.0%} of the loop < 75%")
    if row.spill_bytes:
        misses.append(f"spills {row.spill_bytes} B")
    if row.blocks_per_sm is None:
        misses.append("block size unknown")
    elif (
        row.blocks_per_sm < TARGETS["min_blocks_per_sm"]
        and row.warps_per_sm < TARGETS["min_warps_per_sm"]
    ):
        misses.append(f"{row.blocks_per_sm} block(s), {row.warps_per_sm} warps per SM")
    return misses


def analyze_function(fn: Function, module: str, kernel: str, res: Any) -> Row:
    """One kernel: its main loop's mix next to ptxas's figures (``res``: KernelResources)."""
    span = main_loop(fn)
    body = [i for i in fn.instrs if span is None or span[0] <= i.addr <= span[1]]
    kind = kind_of(fn)
    row = Row(
        module=module,
        kernel=kernel,
        symbol=fn.name,
        kind=kind,
        registers=res.registers,
        spill_bytes=res.spill_stores + res.spill_loads,
        threads=res.threads,
        blocks_per_sm=res.blocks_per_sm,
        warps_per_sm=res.warps_per_sm,
        loop=span,
        mix=mix(body),
        hot=mix(hot_path(fn, span)) if span is not None else None,
    )
    row.misses = check_targets(row)
    return row


# ------------------------------------------------------------------ modules


def is_gemm_kernel(name: str, patterns: Sequence[str] = GEMM_KERNELS) -> bool:
    if any(re.search(p, name) for p in NOT_GEMM_KERNELS):
        return False
    return any(re.search(p, name) for p in patterns)


def gemm_specs(small: bool = False) -> list[Any]:
    """The module specs holding a GEMM-like kernel (for --small, one or two of them)."""
    from cudnnlite.runtime.variants import all_module_specs

    specs = [
        s
        for s in all_module_specs()
        if not s.source.startswith(SKIP_SOURCES) and any(map(is_gemm_kernel, s.names))
    ]
    if not small:
        return specs
    first_of: dict[str, Any] = {}
    for s in specs:
        first_of.setdefault(s.source, s)
    return [first_of[src] for src in SMALL_SOURCES if src in first_of] or specs[:1]


def analyze_module(spec: Any, arch: str, tool: Path, name_filter: str | None) -> list[Row]:
    """The GEMM-like kernels of one module; raises CompileError if it does not compile."""
    from cudnnlite.runtime import nvrtc_check, resources

    res = nvrtc_check.compile_to_cubin(spec, arch, report_options=(resources.PTXAS_VERBOSE,))
    kernels = resources.kernel_resources(spec, arch, res.cubin, res.log, res.lowered_names)
    functions = parse_sass(disassemble(res.cubin, tool))
    rows = []
    for k in kernels:
        if not is_gemm_kernel(k.name) or (name_filter and name_filter not in k.name):
            continue
        if k.symbol in functions:
            rows.append(analyze_function(functions[k.symbol], spec.label(), k.name, k))
    return rows


@dataclass
class Report:
    rows: list[Row]
    errors: dict[str, str]  # module label -> why it could not be analyzed


def collect(
    arch: str = "sm_90", small: bool = False, name_filter: str | None = None, jobs: int = 0
) -> Report:
    """Every GEMM-like kernel's row; a module that fails to compile is an error, not a stop."""
    from cudnnlite.errors import CompileError

    tool = find_nvdisasm()
    if tool is None:
        raise FileNotFoundError(MISSING)
    specs = [
        s for s in gemm_specs(small) if not name_filter or any(name_filter in n for n in s.names)
    ]
    report = Report([], {})

    def one(spec: Any) -> list[Row] | str:
        try:
            return analyze_module(spec, arch, tool, name_filter)
        except (CompileError, RuntimeError) as exc:  # RuntimeError: nvdisasm failed
            return str(exc)

    workers = max(1, min(jobs or os.cpu_count() or 1, len(specs) or 1))
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for spec, out in zip(specs, pool.map(one, specs), strict=True):
            if isinstance(out, str):
                report.errors[spec.label()] = out
                continue
            for row in out:  # an extern "C" kernel shared by several modules: once
                if not any(_same(row, seen) for seen in report.rows):
                    report.rows.append(row)
    return report


def _same(a: Row, b: Row) -> bool:
    return (a.kernel, a.registers, a.mix) == (b.kernel, b.registers, b.mix)


# ------------------------------------------------------------------ output


def _num(v: float | None, fmt: str = ".1f") -> str:
    return "-" if v is None else format(v, fmt)


def table(rows: Sequence[Row]) -> str:
    head = (
        f"{'kernel':<58} {'kind':<4} {'regs':>4} {'spill':>5} {'blk':>3} {'wrp':>3} "
        f"{'loop':>5} {'hot':>5} {'MMA':>4} {'FMA':>5} {'ins/op':>6} {'FMA%':>5} {'LDS/op':>6} "
        f"{'LDG':>4} {'int/op':>6} {'BAR':>3}  misses"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        m = r.mix
        fma = m.dfma if r.kind == "fp64" else m.ffma  # the CUDA-core math op of the kind
        fma_pct = f"{fma / m.instructions:.0%}" if m.instructions else "-"
        blocks = "?" if r.blocks_per_sm is None else str(r.blocks_per_sm)
        kind = {"tensor core": "TC"}.get(r.kind, r.kind)
        lines.append(
            f"{r.kernel[:58]:<58} {kind:<4} "
            f"{r.registers:>4} {r.spill_bytes:>5} {blocks:>3} {r.warps_per_sm:>3} "
            f"{m.instructions:>5} {r.hot.instructions if r.hot else '-':>5} {m.mma:>4} {fma:>5} "
            f"{_num(r.per_op(m.instructions)):>6} "
            f"{fma_pct:>5} {_num(r.per_op(m.shared_loads), '.2f'):>6} {m.global_loads:>4} "
            f"{_num(r.per_op(m.integer), '.2f'):>6} {m.barriers:>3}  {'; '.join(r.misses)}"
        )
    lines.append(
        "per op: per MMA in tensor-core (TC) kernels, per FFMA in fp32 ones, per DFMA in "
        "fp64 (CUDA-core double) ones (FMA: FFMA or DFMA); loop: "
        "instructions in the main loop; hot: on its hot path (fast paths only); blk/wrp: "
        "resident blocks/warps per SM (static shared memory only)"
    )
    return "\n".join(lines)


def summary(rows: Sequence[Row]) -> dict[str, Any]:
    return {
        "kernels": len(rows),
        "missing_a_target": sum(bool(r.misses) for r in rows),
        "spilling": sum(r.spill_bytes > 0 for r in rows),
        "tensor_core": sum(r.kind == "tensor core" for r in rows),
    }


def errors_text(errors: dict[str, str], lines: int = 6) -> str:
    """The modules that failed, each with the first lines of its error."""
    out = []
    for module, err in errors.items():
        head = err.strip().splitlines()
        out.append(f"NOT ANALYZED {module}:")
        out += [f"    {line}" for line in head[:lines]]
        if len(head) > lines:
            out.append(f"    ... ({len(head) - lines} more lines)")
    return "\n".join(out)


def document(report: Report, arch: str, small: bool) -> dict[str, Any]:
    from cudnnlite.runtime import compile_options, cuda_toolkit
    from cudnnlite.runtime.sources import cuda_src_dir

    options = list(compile_options.runtime_options(arch))
    return {
        "date": dt.date.today().isoformat(),
        "arch": arch,
        "small": small,
        "nvrtc": cuda_toolkit.find_nvrtc().version_string(),
        # The runtime's options less the defines and the headers' folders (paths of this
        # machine); the kernel sources' folder stands as "cuda_src".
        "options": [o.replace(str(cuda_src_dir()), "cuda_src") for o in options],
        "targets": TARGETS,
        "patterns": list(GEMM_KERNELS),
        "excluded": list(NOT_GEMM_KERNELS),
        "note": "blocks/warps per SM count static shared memory only: a kernel that sizes its "
        "shared memory at launch (cp.async stages) may hold fewer blocks",
        "summary": {**summary(report.rows), "modules_failed": len(report.errors)},
        "rows": [r.to_dict() for r in report.rows],
        "errors": report.errors,
    }


def run(small: bool = False, arch: str = "sm_90") -> dict[str, Any]:
    """For ``run_all.py``: the rows as a dict; skips with a message without nvdisasm."""
    import_cudnnlite()
    print(f"\n== SASS instruction mix of the GEMM main loops, {arch} ==")
    try:
        report = collect(arch, small)
    except FileNotFoundError as exc:
        print(f"sass_mix skipped: {exc}")
        return {"skipped": str(exc)}
    print(table(report.rows))
    if report.errors:
        print(errors_text(report.errors))
    return document(report, arch, small)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--arch", default="sm_90", help="real architecture (default sm_90)")
    p.add_argument("--small", action="store_true", help="one or two modules only (CI)")
    p.add_argument("--filter", help="only kernels whose name expression contains this")
    p.add_argument("--out", type=Path, help="write OUT/sass_mix_<arch>_<date>.json")
    p.add_argument("--jobs", "-j", type=int, default=0, help="parallel compiles")
    args = p.parse_args(argv)
    import_cudnnlite()
    try:
        report = collect(args.arch, args.small, args.filter, args.jobs)
    except FileNotFoundError as exc:
        print(f"sass_mix skipped: {exc}")
        return 0
    print(table(report.rows))
    if report.errors:
        print(errors_text(report.errors))
    out = args.out or (None if args.small or args.filter else REPO_ROOT / "benchmarks/results")
    if out is not None:
        doc = document(report, args.arch, args.small)
        path = out / f"sass_mix_{args.arch.replace('_', '')}_{doc['date']}.json"
        out.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(doc, indent=1) + "\n")
        print(f"wrote {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
