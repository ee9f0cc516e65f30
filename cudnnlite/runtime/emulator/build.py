"""Building the CPU emulator's modules: a kernel source compiled with g++ after our CUDA
header (its precompiled form when it can be built) into a shared library cached on disk.
The build compiles a copy of the source (and of the headers under cuda_src/ that define
kernels) in which each kernel with ``__launch_bounds__`` checks its launch's block size
(:func:`with_launch_bound_checks`): a GPU refuses a launch past the bound.

Environment switches (read at each build):

========================  ===================================================
CUDNNLITE_EMU_OPT         g++'s optimization: ``2`` (default, -O2), ``1`` (-O1 with FMA
                          contraction: compiles sooner), ``0`` (-O0 -g): :data:`OPT_LEVELS`
CUDNNLITE_EMU_NO_PCH      ``1``: compile modules without the precompiled emulator header
CUDNNLITE_EMU_PORTABLE    ``1``: build for the baseline of the architecture instead of
                          this CPU (``-march=native``, the default)
CUDNNLITE_EMU_ALIGNCHECK  ``1``: a misaligned access (a GPU's "misaligned address" fault)
                          fails the kernel (:data:`ALIGNCHECK_FLAGS`; always in the
                          AddressSanitizer and race-check builds)
CUDNNLITE_CACHE_DIR       where compiled libraries go (default ~/.cache/cudnnlite)
CUDNNLITE_CXX             the C++ compiler (default g++)
========================  ===================================================
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from ...errors import BadParamError, CompileError, NotSupportedError
from ..env import flag
from ..kernel import ModuleSpec
from ..sources import cache_root, common_headers_digest, cuda_src_dir, source_path
from . import racecheck as racecheck_mod

INCLUDE_DIR = Path(__file__).resolve().parent / "include"


def _env_flag(name: str) -> bool:
    return flag(os.environ.get(name))


def cache_dir() -> Path:
    return cache_root() / "emu"


def compiler() -> str:
    return os.environ.get("CUDNNLITE_CXX", "g++")


@functools.cache
def compiler_version(cxx: str) -> str:
    exe = shutil.which(cxx)
    if exe is None:
        raise NotSupportedError(
            f"the CPU emulator needs a C++17 compiler; {cxx!r} was not found "
            "(install g++, or point CUDNNLITE_CXX at one)"
        )
    out = subprocess.run([exe, "--version"], capture_output=True, text=True, check=False)
    return out.stdout.splitlines()[0] if out.stdout else cxx


@functools.cache
def _cpu_signature() -> str:
    """What -march=native depends on: the cache may be shared by machines (a home on
    NFS), and a library built for another CPU could fault on this one."""
    try:
        with open("/proc/cpuinfo") as f:
            info = f.read()
    except OSError:
        import platform

        return platform.machine() + platform.processor()
    keep = [ln for ln in info.splitlines() if ln.startswith(("model name", "flags", "Features"))]
    return "\n".join(sorted(set(keep)))


def _header_digest() -> str:
    h = hashlib.sha256()
    for path in sorted(INCLUDE_DIR.iterdir()):
        if path.is_file():
            h.update(path.name.encode())
            h.update(path.read_bytes())
    return h.hexdigest()


# CUDNNLITE_EMU_OPT: g++'s optimization of emulator modules. -fexpensive-optimizations
# brings -O2's FMA contraction (a*b+c as one rounding, as a GPU computes it) to -O1.
OPT_LEVELS = {
    "2": ["-O2"],
    # compiles about 30% sooner, same numbers; GEMM-like kernels run up to 2x slower
    "1": ["-O1", "-fexpensive-optimizations"],
    "0": ["-O0", "-g"],  # for a debugger; no FMA contraction
}


def opt_flags() -> list[str]:
    """The optimization flags ``CUDNNLITE_EMU_OPT`` asks for (default ``2``)."""
    level = os.environ.get("CUDNNLITE_EMU_OPT", "2").strip() or "2"
    if level not in OPT_LEVELS:
        raise BadParamError(
            f"cudnnlite: CUDNNLITE_EMU_OPT must be one of {', '.join(sorted(OPT_LEVELS))}, "
            f"got {level!r}"
        )
    return list(OPT_LEVELS[level])


def compile_flags(asan: bool, racecheck: bool = False) -> list[str]:
    flags = [
        "-std=gnu++17",
        *opt_flags(),
        "-fPIC",
        "-shared",
        "-fopenmp",
        "-fno-strict-aliasing",
        # Kernels use `#pragma unroll` and CUDA idioms g++ warns about.
        "-Wno-unknown-pragmas",
        "-Wno-attributes",
        "-fvisibility=hidden",
    ]
    if not _env_flag("CUDNNLITE_EMU_PORTABLE"):
        # The library is built on the machine that runs it: use its instruction set
        # (F16C makes fp16 conversions hardware ones; FMA is contracted as on a GPU).
        flags.append("-march=native")
    if asan:
        # libstdc++ linked in statically so that all C++ allocations of the module
        # go through ASan's allocator (mixing it with libc's would be a bad free).
        flags += [
            "-fsanitize=address",
            "-fsanitize-recover=address",
            *ALIGNCHECK_FLAGS,
            "-fno-omit-frame-pointer",
            "-O1",
            "-static-libstdc++",
        ]
    elif _env_flag("CUDNNLITE_EMU_ALIGNCHECK") and not racecheck:
        flags += ALIGNCHECK_FLAGS
    if racecheck:
        flags += racecheck_mod.COMPILE_FLAGS
    return flags


# Misaligned accesses fault on a GPU ("misaligned address"): the module's own handler
# (cuda_emu.h, EMU_ALIGNCHECK) makes each one a kernel error. In the AddressSanitizer and
# race-check builds always, in the others with CUDNNLITE_EMU_ALIGNCHECK=1.
ALIGNCHECK_FLAGS = ["-fsanitize=alignment", "-fsanitize-recover=alignment", "-DEMU_ALIGNCHECK=1"]


_EXTERN_SHARED = re.compile(r"extern\s+__shared__")


def _check_source(spec: ModuleSpec, text: str) -> None:
    if _EXTERN_SHARED.search(text):
        raise CompileError(
            f"{spec.source}: `extern __shared__` is not supported by the emulator; declare dynamic "
            "shared memory with DYNAMIC_SHARED(T, name) from common/cudnnlite.cuh"
        )


# ---------------------------------------------------------------- launch bounds
# A GPU refuses a launch of more threads per block than the kernel's __launch_bounds__;
# the emulator's macro expands to nothing, so the build opens the body of each kernel
# defined with it with a check of the launch (EMU_LAUNCH_BOUNDS, cuda_emu.h), in the
# kernel's own scope: the bound may name its template parameters.
_BOUNDS = re.compile(r"__launch_bounds__\s*\(")
_CALLEE = re.compile(r"\s*[A-Za-z_]\w*\s*\(")  # the kernel's name and its "("
_BODY = re.compile(r"\s*\{")
BOUNDS_CHECKS = "1"  # in the build key: bump when with_launch_bound_checks changes


def _closing_paren(text: str, open_at: int) -> int | None:
    depth = 0
    for i in range(open_at, len(text)):
        if text[i] == "(":
            depth += 1
        elif text[i] == ")":
            depth -= 1
            if depth == 0:
                return i
    return None


def with_launch_bound_checks(text: str) -> str:
    """``text`` with ``EMU_LAUNCH_BOUNDS(<the attribute's arguments>);`` at the start of the
    body of every function defined as ``__launch_bounds__(...) name(...) {``, on the line
    of its ``{`` (line numbers stay). Declarations, and the attribute in a ``//`` comment,
    are left alone."""
    out, pos = [], 0
    for m in _BOUNDS.finditer(text):
        line = text[text.rfind("\n", 0, m.start()) + 1 : m.start()]
        if m.start() < pos or "//" in line:
            continue
        close = _closing_paren(text, m.end() - 1)
        callee = None if close is None else _CALLEE.match(text, close + 1)
        params = None if callee is None else _closing_paren(text, callee.end() - 1)
        body = None if params is None else _BODY.match(text, params + 1)
        if body is None:
            continue
        args = " ".join(text[m.end() : close].split())
        out += [text[pos : body.end()], f" EMU_LAUNCH_BOUNDS({args});"]
        pos = body.end()
    out.append(text[pos:])
    return "".join(out)


def _checked_sources(src: Path, text: str, into: Path) -> Path:
    """Writes ``text`` (the module's source) and every header under cuda_src/ that defines
    a bounded kernel, with their launch-bound checks, into the folder ``into`` (put
    before cuda_src/ on the include path); ``#line`` keeps messages, ``__FILE__`` and
    debug information on the originals. Returns the source's copy."""
    root = cuda_src_dir()
    for header in sorted(root.rglob("*.cuh")):
        original = header.read_text()
        checked = with_launch_bound_checks(original)
        if checked != original:
            copy = into / header.relative_to(root)
            copy.parent.mkdir(parents=True, exist_ok=True)
            copy.write_text(f'#line 1 "{header}"\n{checked}')
    main = into / src.name
    main.write_text(f'#line 1 "{src}"\n{with_launch_bound_checks(text)}')
    return main


# How long a build waits for another process building the same file (g++ takes seconds).
LOCK_TIMEOUT_S = 600.0


@contextlib.contextmanager
def _building(path: Path) -> Iterator[None]:
    """Held while this process builds ``path``: another process (a second pytest-xdist
    worker, a Dask worker on this machine) that needs the same file waits for it and then
    finds it built, instead of running g++ on it too. A lock that cannot be taken (a
    read-only cache, a timeout) only costs the duplicate build: results are written to a
    temporary name and renamed into place, so concurrent builders never clash."""
    from filelock import FileLock, Timeout

    lock = FileLock(str(path.with_name(path.name + ".lock")), timeout=LOCK_TIMEOUT_S)
    try:
        lock.acquire()
    except (OSError, Timeout):
        yield
        return
    try:
        yield
    finally:
        lock.release()


def _flags_key(cxx: str, flags: list[str]) -> str:
    """The cache key of what is built once per header content, compiler, CPU and flags."""
    key = hashlib.sha256()
    for part in (_header_digest(), compiler_version(cxx), _cpu_signature(), *flags):
        key.update(part.encode())
        key.update(b"\0")
    return key.hexdigest()[:24]


def _precompiled_header(cxx: str, flags: list[str]) -> Path | None:
    """A directory holding ``cuda_emu.h.gch``, g++'s precompiled form of the emulator's
    header for these flags (built once per header content, compiler, CPU and flags), or
    None when it cannot be built. Modules compile with ``-include cuda_emu.h`` from that
    directory: g++ takes the .gch when it is valid for the command and otherwise reads the
    header as usual, so the result is the same either way, 1-2 s sooner per module."""
    pch_dir = cache_dir().resolve() / f"pch-{_flags_key(cxx, flags)}"
    gch = pch_dir / "cuda_emu.h.gch"
    if gch.exists():
        return pch_dir
    pch_dir.mkdir(parents=True, exist_ok=True)
    with _building(gch):
        return pch_dir if gch.exists() else _build_precompiled_header(cxx, flags, pch_dir, gch)


def _build_precompiled_header(cxx: str, flags: list[str], pch_dir: Path, gch: Path) -> Path | None:
    fd, tmp = tempfile.mkstemp(suffix=".gch", dir=pch_dir)
    os.close(fd)
    header_flags = [f for f in flags if f != "-shared"]
    cmd = [cxx, *header_flags, f"-I{INCLUDE_DIR}", "-x", "c++-header",
           str(INCLUDE_DIR / "cuda_emu.h"), "-o", tmp]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        # g++ may have removed its output already.
        Path(tmp).unlink(missing_ok=True)
        return None
    os.replace(tmp, gch)  # atomic: concurrent builders are harmless
    return pch_dir


def _runtime_object(cxx: str, flags: list[str]) -> Path:
    """``emu_runtime.o``: the emulator's execution model (fibers, scheduler, rendezvous,
    launch) compiled for these flags, once per header content, compiler, CPU and flags,
    and linked into every module built with them (a second or so of each module's
    compile when every module compiled it again as inline functions of the header)."""
    obj = cache_dir().resolve() / f"runtime-{_flags_key(cxx, flags)}.o"
    if obj.exists():
        return obj
    obj.parent.mkdir(parents=True, exist_ok=True)
    with _building(obj):
        if obj.exists():  # another process built it while this one waited
            return obj
        fd, tmp = tempfile.mkstemp(suffix=".o", dir=obj.parent)
        os.close(fd)
        object_flags = [f for f in flags if f != "-shared"]
        cmd = [cxx, *object_flags, f"-I{INCLUDE_DIR}", "-c",
               str(INCLUDE_DIR / "emu_runtime.cpp"), "-o", tmp]  # fmt: skip
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False,
                              env=racecheck_mod.child_env())  # fmt: skip
        if proc.returncode != 0:
            Path(tmp).unlink(missing_ok=True)
            raise CompileError(
                "g++ failed to compile the emulator's runtime (emu_runtime.cpp)\n"
                f"  flags: {' '.join(object_flags)}\n{proc.stderr.strip()[-6000:]}"
            )
        os.replace(tmp, obj)  # atomic: concurrent builders are harmless
    return obj


def _header_and_runtime(cxx: str, flags: list[str], pch: bool) -> tuple[Path | None, Path]:
    """The precompiled header's folder (``pch``; None without) and the runtime object for
    ``flags``. A fresh cache builds the two side by side (g++ takes a core each, 4-5 s
    apiece): the first module then waits for the longer of them, not for their sum."""
    if not pch:
        return None, _runtime_object(cxx, flags)
    with ThreadPoolExecutor(1) as pool:
        runtime = pool.submit(_runtime_object, cxx, flags)
        return _precompiled_header(cxx, flags), runtime.result()


def _compile(spec: ModuleSpec, asan: bool, racecheck: bool = False) -> Path:
    src = source_path(spec.source)
    text = src.read_text()
    _check_source(spec, text)
    cxx = compiler()
    flags = compile_flags(asan, racecheck)
    kernels = " ".join(f"EMU_KERNEL({name})" for name in spec.names)
    # (the source's own define, its checked copy's path, is added by _build_module)
    defines = [f"-DCUDNNLITE_EMU_KERNELS={kernels}", *spec.define_options()]
    key = hashlib.sha256()
    for part in (
        text,
        str(src),
        _header_digest(),
        common_headers_digest(),
        compiler_version(cxx),
        _cpu_signature(),
        *flags,
        *defines,
        BOUNDS_CHECKS,
    ):
        key.update(part.encode())
        key.update(b"\0")
    out_dir = cache_dir()
    out = out_dir / f"{Path(spec.source).stem}-{key.hexdigest()[:24]}.so"
    if out.exists():
        return out
    out_dir.mkdir(parents=True, exist_ok=True)
    with _building(out):
        if out.exists():  # another process built it while this one waited
            return out
        _build_module(spec, cxx, flags, defines, out, asan, racecheck, (src, text))
    return out


def _build_module(spec: ModuleSpec, cxx: str, flags: list[str], defines: list[str], out: Path,
                  asan: bool, racecheck: bool, source: tuple[Path, str]) -> None:  # fmt: skip
    """Compiles ``source`` (its path and text), with its launch-bound checks, into ``out``;
    ``defines``: the kernels' and the module's."""
    with tempfile.TemporaryDirectory(dir=out.parent, prefix=".src-") as checked:
        main = _checked_sources(*source, Path(checked))
        # (the original's folder stays on the quoted-include path, as for the original)
        defines = [f'-DCUDNNLITE_EMU_SOURCE="{main}"', f"-iquote{source[0].parent}", *defines]
        _run_compiler(spec, cxx, flags, defines, out, asan, racecheck, Path(checked))


def _run_compiler(spec: ModuleSpec, cxx: str, flags: list[str], defines: list[str], out: Path,
                  asan: bool, racecheck: bool, checked: Path) -> None:  # fmt: skip
    out_dir = out.parent
    fd, tmp = tempfile.mkstemp(suffix=".so", dir=out_dir)
    os.close(fd)
    # The AddressSanitizer build (rarely used) skips the precompiled header; the race
    # check's (every family in CI's sweep) has its own, keyed on its flags.
    plain = not (asan or _env_flag("CUDNNLITE_EMU_NO_PCH"))
    pch, runtime = _header_and_runtime(cxx, flags, plain)
    cmd = [
        cxx,
        *flags,
        *(["-include", "cuda_emu.h"] if pch else []),
        f"-I{INCLUDE_DIR}",
        f"-I{checked}",  # the checked copies of headers with bounded kernels come first
        f"-I{cuda_src_dir()}",
        *defines,
        str(INCLUDE_DIR / "emu_entry.cpp"),
        str(runtime),
        "-o",
        str(Path(tmp).resolve()),
    ]
    # -include looks in the working directory first: there lies the .gch.
    proc = subprocess.run(
        cmd, capture_output=True, text=True, check=False, cwd=pch, env=racecheck_mod.child_env()
    )
    if proc.returncode != 0:
        Path(tmp).unlink(missing_ok=True)
        log = proc.stderr.strip()
        hint = ""
        if "EMU_INLINE_PTX_IS_NOT_EMULATED" in log:
            hint = (
                "\nhint: the source uses inline PTX (asm), which the emulator cannot run; "
                "keep a portable path under `#ifdef CUDNNLITE_EMULATOR`"
            )
        raise CompileError(
            f"g++ failed to compile {spec.source} for the emulator\n"
            f"  kernels: {', '.join(spec.names)}\n"
            f"  defines: {dict(spec.defines)}\n{log[-6000:]}{hint}"
        )
    os.replace(tmp, out)  # atomic: concurrent compiles of one key are harmless
