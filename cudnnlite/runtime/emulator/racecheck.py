"""The emulator's race check (``CUDNNLITE_EMU_RACECHECK=1``): kernel modules built with
ThreadSanitizer, each CUDA thread a TSan fiber, barriers and warp operations modelled as
release/acquire (include/emu_racecheck.h). A launch in which two threads of one block
access one memory word, at least one of them writing, with no barrier or warp
synchronization between them, raises :class:`~cudnnlite.errors.ExecutionError` naming
the kernel, both threads (block, thread), both source lines and the kind of memory, as
compute-sanitizer's racecheck does on a GPU. Warp-synchronous code without
``__syncwarp`` counts as a race. Each pair of source lines is reported once per process
(TSan's deduplication, which keeps a racy GEMM from printing one report per word): a
later launch with the same race passes.

TSan's runtime must be in the process before Python starts (it cannot be loaded later:
"cannot allocate memory in static TLS block"). Run a program or the tests with::

    python -m cudnnlite.runtime.emulator.racecheck script.py [args...]
    python -m cudnnlite.runtime.emulator.racecheck -m pytest tests/... [args...]
    python -m cudnnlite.runtime.emulator.racecheck -c "code"

which re-executes the interpreter with ``LD_PRELOAD`` set to g++'s ``libtsan``,
``TSAN_OPTIONS`` this module needs (a user's own ``TSAN_OPTIONS`` come after and win)
and ``CUDNNLITE_EMU_RACECHECK=1``. In a process without the runtime a race-check build
is refused with a message saying so.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import ExecutionError, NotSupportedError

# -O0 keeps every load and store where the source has them, and compiles about 30% faster
# than -O1 (kernels run as fast under TSan: its checks dominate); -g1's line tables are all a
# report's "file:line" needs. No shadow call stack (the TSan identity of a fiber changes
# inside emulator frames), so reports name one line.
COMPILE_FLAGS = [
    "-fsanitize=thread",
    "-O0",
    "-g1",
    "-fno-omit-frame-pointer",
    "--param=tsan-instrument-func-entry-exit=0",
    # and misaligned accesses (a GPU fault) fail, as in the AddressSanitizer build: the
    # race sweep runs every family's kernels under both checks (cuda_emu.h, EMU_ALIGNCHECK)
    "-fsanitize=alignment",
    "-fsanitize-recover=alignment",
    "-DEMU_ALIGNCHECK=1",
]

# Reports continue (every race of a launch is collected) and leave the exit status alone.
# TSan reports each pair of source lines once per process (suppress_equal_stacks: a
# racy kernel would otherwise print one report per racing word, hundreds of MB for a
# GEMM tile), but a new pair at an address already reported is still reported.
TSAN_OPTIONS = (
    "exitcode=0:halt_on_error=0:report_thread_leaks=0:report_signal_unsafe=0:"
    "suppress_equal_stacks=1:suppress_equal_addresses=0"
)


@functools.cache
def runtime_path() -> str:
    """The libtsan shared library of the emulator's compiler."""
    from .build import compiler

    cxx = shutil.which(compiler())
    if cxx is None:
        raise NotSupportedError(f"CUDNNLITE_EMU_RACECHECK: the compiler {compiler()!r} is missing")
    out = subprocess.run(
        [cxx, "-print-file-name=libtsan.so"], capture_output=True, text=True, check=False
    )
    path = out.stdout.strip()
    if out.returncode != 0 or not os.path.isabs(path) or not os.path.exists(path):
        raise NotSupportedError(
            f"CUDNNLITE_EMU_RACECHECK: {compiler()} has no ThreadSanitizer runtime (libtsan.so); "
            "install it (Debian/Ubuntu: libtsan2 or the gcc package that ships it)"
        )
    return os.path.realpath(path)


@functools.cache
def _tsan() -> ctypes.CDLL | None:
    """The process's TSan runtime, or None when it was not loaded at start."""
    lib = ctypes.CDLL(None)
    if not hasattr(lib, "__tsan_switch_to_fiber"):
        return None
    lib.__sanitizer_set_report_path.argtypes = [ctypes.c_char_p]
    lib.__sanitizer_set_report_path.restype = None
    return lib


def runtime_loaded() -> bool:
    return _tsan() is not None


def require_runtime() -> None:
    if not runtime_loaded():
        raise NotSupportedError(
            "CUDNNLITE_EMU_RACECHECK=1 needs ThreadSanitizer's runtime in the process from its "
            "start; run the program as `python -m cudnnlite.runtime.emulator.racecheck "
            "script.py` (or `... racecheck -m pytest ...`), which preloads it"
        )


def child_env() -> dict[str, str] | None:
    """The environment for the compiler: without a preloaded libtsan (an uninstrumented
    program under TSan's interceptors may crash), or None to inherit when none is set."""
    preload = os.environ.get("LD_PRELOAD")
    if not preload or "libtsan" not in preload:
        return None
    env = dict(os.environ)
    kept = [p for p in re.split(r"[:\s]+", preload) if p and "libtsan" not in p]
    if kept:
        env["LD_PRELOAD"] = ":".join(kept)
    else:
        del env["LD_PRELOAD"]
    return env


# ------------------------------------------------------------------ reports
@dataclass(frozen=True)
class Access:
    """One side of a race."""

    kind: str  # "read" or "write"
    size: int
    thread: str  # "block (x,y,z) thread (x,y,z)", or "the emulator" for its own thread
    where: str  # file:line, relative to cuda_src/ when under it

    def describe(self) -> str:
        unit = "byte" if self.size == 1 else "bytes"
        return f"{self.kind} of {self.size} {unit} at {self.where} by {self.thread}"


@dataclass
class RaceReport:
    current: Access
    previous: Access
    memory: str  # "shared memory", "dynamic shared memory" or "global memory"
    address: int
    count: int = 1  # reports of this pair of accesses in the launch

    def key(self) -> tuple[str, str, str, str]:
        return (self.current.kind, self.current.where, self.previous.kind, self.previous.where)

    def describe(self) -> str:
        more = f" ({self.count} reports of this pair)" if self.count > 1 else ""
        return (
            f"{self.memory} at {self.address:#x}{more}:\n"
            f"    {self.current.describe()}\n"
            f"    races with a previous {self.previous.describe()}"
        )


_ACCESS = re.compile(
    r"^\s+(Previous )?(?:[Aa]tomic )?(read|write) of size (\d+) at (0x[0-9a-f]+) "
    r"by (main thread|thread (T\d+))",
    re.IGNORECASE,
)
_FRAME = re.compile(r"^\s+#\d+ .*? (\S+?):(\d+)(?::\d+)? \(")
# A frame TSan could not symbolize: "#0 <null> <null> (module.so+0x1dae1)".
_RAW_FRAME = re.compile(r"^\s+#\d+ <null> <null> \(([^()+\s]+\.so)\+(0x[0-9a-f]+)\)")


@functools.lru_cache(maxsize=256)
def _addr2line(module: str, offset: str) -> tuple[tuple[str, str], ...]:
    """Source lines (innermost first) of an offset in an emulator module, by addr2line;
    TSan's own symbolizer fails on some frames (OpenMP-outlined code, say)."""
    from .build import cache_dir

    path = cache_dir() / module
    exe = shutil.which("addr2line")
    if exe is None or not path.exists():
        return ()
    # The offset TSan prints is of the next instruction's call site: step back one byte.
    addr = hex(max(0, int(offset, 16) - 1))
    out = subprocess.run(
        [exe, "-i", "-e", str(path), addr], capture_output=True, text=True, check=False,
        env=child_env(),
    )  # fmt: skip
    lines = []
    for text in out.stdout.splitlines():
        file, _, line = text.rpartition(":")
        line = line.split(" ")[0]
        if file and file != "??" and line.isdigit() and line != "0":
            lines.append((file, line))
    return tuple(lines)


_THREAD = re.compile(r"^\s+Thread (T\d+) '(.*)' \(")


def _where(file: str, line: str) -> str:
    from ..sources import cuda_src_dir

    root = str(cuda_src_dir().resolve())
    path = os.path.realpath(file)
    if path.startswith(root + os.sep):
        path = path[len(root) + 1 :]
    return f"{path}:{line}"


def _pick_frame(frames: list[tuple[str, str]]) -> str:
    """The kernel-source line of an access: the first frame outside the emulator's own
    headers (an inlined helper of cuda_src/ counts as the source)."""
    from ..sources import cuda_src_dir

    root = str(cuda_src_dir().resolve())
    for file, line in frames:
        if os.path.realpath(file).startswith(root + os.sep):
            return _where(file, line)
    for file, line in frames:
        if "/emulator/include/" not in file:
            return _where(file, line)
    return _where(*frames[0]) if frames else "?"


def _side(access: tuple, names: dict[str, str]) -> Access:
    _, kind, size, _, tid, frames = access
    # Only CUDA threads carry names; another is the emulator's (a bug of the check).
    thread = names.get(tid, f"an emulator thread ({tid})")
    return Access(kind, size, thread, _pick_frame(frames))


def parse_reports(text: str) -> list[RaceReport]:
    """Data races of a TSan log, one per distinct pair of accesses (by kind and line)."""
    found: dict[tuple[str, str, str, str], RaceReport] = {}
    for block in text.split("WARNING: ThreadSanitizer: ")[1:]:
        if not block.startswith("data race"):
            continue
        accesses: list[tuple[bool, str, int, int, str, list[tuple[str, str]]]] = []
        names: dict[str, str] = {}
        memory = "global memory"
        section = ""
        for line in block.splitlines():
            m = _ACCESS.match(line)
            if m:
                tid = m.group(6) or "main"
                accesses.append(
                    (bool(m.group(1)), m.group(2).lower(), int(m.group(3)), int(m.group(4), 16),
                     tid, [])
                )  # fmt: skip
                section = "access"
                continue
            if line.strip().startswith("Location is"):
                section = "location"
                if "TLS" in line:
                    memory = "shared memory"
                continue
            t = _THREAD.match(line)
            if t:
                names[t.group(1)] = t.group(2)
                section = "thread"
                continue
            f = _FRAME.match(line)
            raw = _RAW_FRAME.match(line) if f is None else None
            if raw and section == "access" and accesses:
                accesses[-1][5].extend(_addr2line(raw.group(1), raw.group(2)))
            elif f and section == "access" and accesses:
                accesses[-1][5].append((f.group(1), f.group(2)))
            elif f and section == "location":
                # Static __shared__ is the module's TLS (a block the dynamic loader
                # allocates); dynamic shared memory is the emulator's per-worker buffer.
                if "dl-tls" in f.group(1):
                    memory = "shared memory"
                elif "setup_block_shape" in line and memory == "global memory":
                    memory = "dynamic shared memory"
            elif not line.strip():
                section = "" if section == "access" else section
        current = next((a for a in accesses if not a[0]), None)
        previous = next((a for a in accesses if a[0]), None)
        if current is None or previous is None:
            continue

        report = RaceReport(_side(current, names), _side(previous, names), memory, current[3])
        if report.key() in found:
            found[report.key()].count += 1
        else:
            found[report.key()] = report
    return list(found.values())


@dataclass
class _Capture:
    reports: list[RaceReport] = field(default_factory=list)


_counter = [0]


@contextlib.contextmanager
def capture() -> Iterator[_Capture]:
    """Points TSan's reports at a file for the duration, then parses them (callers hold
    the module lock; launches are serialized per module, reports per process)."""
    lib = _tsan()
    result = _Capture()
    if lib is None:
        yield result
        return
    with tempfile.TemporaryDirectory(prefix="cudnnlite-race-") as tmp:
        _counter[0] += 1
        prefix = os.path.join(tmp, f"launch{_counter[0]}")
        lib.__sanitizer_set_report_path(prefix.encode())
        try:
            yield result
        finally:
            # Closes the report file (TSan opens `prefix.<pid>` at the first report).
            lib.__sanitizer_set_report_path(b"stderr")
            text = "".join(p.read_text(errors="replace") for p in sorted(Path(tmp).iterdir()))
            result.reports = parse_reports(text)


def race_error(kernel: str, label: str, reports: list[RaceReport]) -> ExecutionError:
    n = len(reports)
    lines = [
        f"kernel {kernel} ({label}): CUDNNLITE_EMU_RACECHECK found {n} data race"
        f"{'s' * (n != 1)} between threads of a block (no barrier or warp "
        "synchronization between the two accesses):"
    ]
    for r in reports[:20]:
        lines.append("  " + r.describe())
    if n > 20:
        lines.append(f"  ... and {n - 20} more")
    err = ExecutionError("\n".join(lines))
    err.races = reports  # type: ignore[attr-defined]
    return err


# ------------------------------------------------------------------ runner
# Reports that are no kernel's: the grid barrier's condition variable, destroyed at exit
# by the main thread after the threads of a cooperative launch last woke it.
SUPPRESSIONS = "race:emu::GridBarrier::~GridBarrier\n"


def _suppressions_file() -> str | None:
    from .build import cache_dir

    try:
        path = cache_dir() / "tsan-suppressions.txt"
        if not path.exists() or path.read_text() != SUPPRESSIONS:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(SUPPRESSIONS)
            os.replace(tmp, path)
        return str(path)
    except OSError:
        return None


def _usage() -> str:
    return (
        "usage: python -m cudnnlite.runtime.emulator.racecheck "
        "(script.py | -m module | -c code) [args...]"
    )


def main(argv: list[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage() + "\n\n" + (__doc__ or ""))
        return 0 if args else 2
    if args[0] in ("-m", "-c") and len(args) < 2:
        print(_usage(), file=sys.stderr)
        return 2
    env = dict(os.environ)
    lib = runtime_path()
    preload = env.get("LD_PRELOAD", "")
    if "libtsan" not in preload:
        env["LD_PRELOAD"] = lib + (":" + preload if preload else "")
    user = env.get("TSAN_OPTIONS", "")
    options = TSAN_OPTIONS
    supp = _suppressions_file()
    if supp:
        options += f":suppressions={supp}"
    env["TSAN_OPTIONS"] = options + (":" + user if user else "")
    env["CUDNNLITE_EMU_RACECHECK"] = "1"
    sys.stdout.flush()
    sys.stderr.flush()
    os.execve(sys.executable, [sys.executable, *args], env)
    return 0  # not reached


if __name__ == "__main__":
    sys.exit(main())
