"""Finds NVRTC and the CUDA headers it needs, without a GPU and without CuPy.

NVRTC ships only ``nvrtc.h``; kernels that use ``__half`` / ``__nv_bfloat16`` also need
``cuda_fp16.h`` / ``cuda_bf16.h`` (the CUDA runtime headers) and, for CUDA 12 before
NVRTC provided it implicitly, ``<nv/target>`` (CCCL). They come from, in this order:

1. ``CUDNNLITE_NVRTC``: an explicit path to ``libnvrtc.so*`` (it wins outright);
2. the pip wheels on ``sys.path``:

   - CUDA 13: ``nvidia-cuda-nvrtc`` / ``-runtime`` / ``-cccl`` share one tree,
     ``nvidia/cu13/lib/libnvrtc.so.13`` and ``nvidia/cu13/include`` (``nv/target``
     is there too, and again under ``include/cccl``);
   - CUDA 12: ``nvidia-cuda-nvrtc-cu12`` → ``nvidia/cuda_nvrtc/lib/libnvrtc.so.12``,
     ``nvidia-cuda-runtime-cu12`` → ``nvidia/cuda_runtime/include``,
     ``nvidia-cuda-cccl-cu12`` → ``nvidia/cuda_cccl/include``;

3. ``CUDA_PATH`` / ``CUDA_HOME``, then ``/usr/local/cuda*`` (``lib64``, ``lib``,
   ``targets/x86_64-linux/lib``; headers in ``include`` and ``include/cccl``);
4. the system loader (``ctypes.util.find_library``).

Among 2-4 the newest NVRTC wins; headers are taken from the same CUDA major version
as NVRTC when possible. Nothing happens at import; results are memoized
(:func:`clear_caches` forgets them, e.g. after changing ``CUDNNLITE_NVRTC``).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import re
import site
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import NotSupportedError

ENV_NVRTC = "CUDNNLITE_NVRTC"

INSTALL_HINT = (
    'install NVRTC and the CUDA headers with pip install "cudnnlite[cuda13]" '
    '(or "cudnnlite[cuda12]" for a CUDA 12 driver), or set '
    f"{ENV_NVRTC}=/path/to/libnvrtc.so"
)

# Headers the kernels need, grouped by the folder that must hold them together.
FP16_HEADERS = ("cuda_fp16.h", "cuda_bf16.h")
CCCL_HEADERS = ("nv/target",)

_LIB_RE = re.compile(r"^libnvrtc\.so(?:\.(\d+))?(?:\.(\d+))?(?:\.\d+)*$")


# --------------------------------------------------------------------------- data


@dataclass(frozen=True)
class NvrtcLibrary:
    """A loadable NVRTC: where it is, its version and the real archs it compiles for."""

    path: Path
    version: tuple[int, int]
    origin: str  # which search step found it, e.g. "pip wheel (nvidia/cu13)"
    supported_archs: tuple[int, ...] = ()  # e.g. (75, 80, ..., 120); empty if unknown

    @property
    def major(self) -> int:
        return self.version[0]

    def version_string(self) -> str:
        return ".".join(map(str, self.version))

    def supports(self, arch: str) -> bool:
        """Whether ``sm_XX`` (or ``sm_XXa``) is in NVRTC's list; True if the list is unknown."""
        m = re.fullmatch(r"sm_(\d+)[af]?", arch)
        if m is None:
            return False
        return not self.supported_archs or int(m.group(1)) in self.supported_archs

    def ptx_target(self, arch: str) -> str:
        """``compute_XX`` for a device ``arch`` this NVRTC has no CUBIN for (newer than it
        knows): the newest arch it supports below the device's, whose PTX the driver
        compiles for the device (what CuPy does too)."""
        m = re.fullmatch(r"sm_(\d+)[af]?", arch)
        older = [a for a in self.supported_archs if m is not None and a < int(m.group(1))]
        if not older:
            raise NotSupportedError(
                f"cudnnlite: NVRTC {self.version_string()} ({self.path}) cannot compile for "
                f"{arch}; {INSTALL_HINT}"
            )
        return f"compute_{max(older)}"


@dataclass(frozen=True)
class HeaderDir:
    """An include folder and the headers of interest found in it."""

    path: Path
    provides: tuple[str, ...]
    cuda_version: tuple[int, ...] | None  # (13, 5) or (13,) when only the major is known
    origin: str

    @property
    def major(self) -> int | None:
        return self.cuda_version[0] if self.cuda_version else None


@dataclass(frozen=True)
class CudaHeaders:
    """The include folders chosen for NVRTC (``fp16`` also holds ``cuda_bf16.h``)."""

    fp16: HeaderDir
    cccl: HeaderDir | None  # None: not found, only acceptable when NVRTC provides nv/target

    def include_dirs(self) -> list[Path]:
        dirs = [self.fp16.path]
        if self.cccl is not None and self.cccl.path != self.fp16.path:
            dirs.append(self.cccl.path)
        return dirs


@dataclass(frozen=True)
class _LibCandidate:
    path: Path
    origin: str
    order: int  # position in the search order, the tie-breaker between equal versions
    guessed: tuple[int, ...]  # version read from file names, before loading


@dataclass
class ToolkitReport:
    """Everything discovery found, for ``cudnnlite doctor``; never raises."""

    nvrtc: NvrtcLibrary | None
    nvrtc_error: str | None
    headers: CudaHeaders | None
    headers_error: str | None
    nvrtc_candidates: list[tuple[Path, str]] = field(default_factory=list)
    header_candidates: list[HeaderDir] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.nvrtc is not None and self.headers is not None


# ------------------------------------------------------------------ search roots


def _site_dirs() -> list[Path]:
    """Folders where pip puts wheels: ``sys.path`` first (venvs, --target, PYTHONPATH)."""
    dirs: list[str] = [p for p in sys.path if p]
    try:
        dirs += site.getsitepackages()
    except AttributeError:  # some embedded interpreters lack it
        pass
    try:
        dirs.append(site.getusersitepackages())
    except AttributeError:
        pass
    seen: dict[Path, None] = {}
    for d in dirs:
        p = Path(d)
        if (p / "nvidia").is_dir():
            seen.setdefault(p.resolve(), None)
    return list(seen)


def _toolkit_roots() -> list[tuple[Path, str]]:
    """CUDA toolkit installs: CUDA_PATH, CUDA_HOME, then /usr/local/cuda* (newest name first)."""
    roots: list[tuple[Path, str]] = []
    for var in ("CUDA_PATH", "CUDA_HOME"):
        value = os.environ.get(var)
        if value:
            roots.append((Path(value), var))
    local = [Path("/usr/local/cuda")]
    local += sorted(
        Path("/usr/local").glob("cuda-*"), key=lambda p: _version_key(p.name), reverse=True
    )
    roots += [(p, str(p)) for p in local]
    seen: set[Path] = set()
    out: list[tuple[Path, str]] = []
    for path, origin in roots:
        if path.is_dir() and path.resolve() not in seen:
            seen.add(path.resolve())
            out.append((path, origin))
    return out


def _version_key(text: str) -> tuple[int, ...]:
    return tuple(int(x) for x in re.findall(r"\d+", text))


def _wheel_lib_dirs(site_dir: Path) -> Iterator[tuple[Path, str]]:
    nvidia = site_dir / "nvidia"
    # CUDA 13+ wheels: one tree per major version (nvidia/cu13, later nvidia/cu14 ...).
    for tree in sorted(nvidia.glob("cu[0-9]*"), key=lambda p: _version_key(p.name), reverse=True):
        yield tree / "lib", f"pip wheel nvidia-cuda-nvrtc (nvidia/{tree.name}) in {site_dir}"
    # CUDA 11/12 wheels: one tree per component.
    yield nvidia / "cuda_nvrtc" / "lib", f"pip wheel nvidia-cuda-nvrtc-cu12 in {site_dir}"


def _libs_in(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    # libnvrtc.so.13 / libnvrtc.so.12 / libnvrtc.so; not libnvrtc-builtins, not the ".alt" build.
    libs = [p for p in folder.iterdir() if _LIB_RE.match(p.name)]
    # A toolkit has libnvrtc.so -> .so.12 -> .so.12.9.86: keep one file per real target.
    by_target: dict[Path, Path] = {}
    for p in sorted(libs, key=lambda p: len(p.name)):
        by_target.setdefault(p.resolve(), p)
    return list(by_target.values())


def _guess_version(lib: Path) -> tuple[int, ...]:
    """Version from file names: libnvrtc.so.13 plus libnvrtc-builtins.so.13.5 beside it."""
    guess = _version_key(lib.resolve().name.split(".so", 1)[1]) if ".so" in lib.name else ()
    builtins = sorted(
        (
            _version_key(p.name.split(".so", 1)[1])
            for p in lib.parent.glob("libnvrtc-builtins.so.*")
        ),
        reverse=True,
    )
    for b in builtins:
        if not guess or b[: len(guess)] == guess[: len(b)]:
            return b if len(b) > len(guess) else guess
    return guess


def _nvrtc_candidates() -> list[_LibCandidate]:
    """Every libnvrtc found by steps 2-4, in search order (the env override is handled apart)."""
    found: list[tuple[Path, str]] = []
    for site_dir in _site_dirs():
        for folder, origin in _wheel_lib_dirs(site_dir):
            found += [(lib, origin) for lib in _libs_in(folder)]
    for root, origin in _toolkit_roots():
        for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
            found += [(lib, f"CUDA toolkit ({origin})") for lib in _libs_in(root / sub)]
    name = ctypes.util.find_library("nvrtc")
    if name:
        # The loader knows only a soname here (e.g. libnvrtc.so.12); dlopen resolves it.
        found.append((Path(name), "system library (ldconfig)"))
    seen: set[Path] = set()
    out: list[_LibCandidate] = []
    for lib, origin in found:
        key = lib.resolve() if lib.is_absolute() else lib
        if key in seen:
            continue
        seen.add(key)
        guess = (
            _guess_version(lib) if lib.is_absolute() else _version_key(lib.name.split(".so", 1)[-1])
        )
        out.append(_LibCandidate(lib, origin, len(out), guess))
    return out


# ------------------------------------------------------------------ loading NVRTC

_c_char_pp = ctypes.POINTER(ctypes.c_char_p)


def _declare(lib: ctypes.CDLL) -> None:
    """Give every NVRTC function we call its C prototype (ctypes would guess int otherwise,
    truncating the 64-bit program handle)."""
    prog = ctypes.c_void_p  # nvrtcProgram is an opaque pointer
    size_p = ctypes.POINTER(ctypes.c_size_t)
    int_p = ctypes.POINTER(ctypes.c_int)
    protos: dict[str, tuple[type, list]] = {
        "nvrtcGetErrorString": (ctypes.c_char_p, [ctypes.c_int]),
        "nvrtcVersion": (ctypes.c_int, [int_p, int_p]),
        "nvrtcGetNumSupportedArchs": (ctypes.c_int, [int_p]),
        "nvrtcGetSupportedArchs": (ctypes.c_int, [int_p]),
        "nvrtcCreateProgram": (
            ctypes.c_int,
            [
                ctypes.POINTER(prog),
                ctypes.c_char_p,
                ctypes.c_char_p,
                ctypes.c_int,
                _c_char_pp,
                _c_char_pp,
            ],
        ),
        "nvrtcDestroyProgram": (ctypes.c_int, [ctypes.POINTER(prog)]),
        "nvrtcCompileProgram": (ctypes.c_int, [prog, ctypes.c_int, _c_char_pp]),
        "nvrtcGetProgramLogSize": (ctypes.c_int, [prog, size_p]),
        "nvrtcGetProgramLog": (ctypes.c_int, [prog, ctypes.c_char_p]),
        "nvrtcGetCUBINSize": (ctypes.c_int, [prog, size_p]),
        "nvrtcGetCUBIN": (ctypes.c_int, [prog, ctypes.c_char_p]),
        "nvrtcGetPTXSize": (ctypes.c_int, [prog, size_p]),
        "nvrtcGetPTX": (ctypes.c_int, [prog, ctypes.c_char_p]),
        "nvrtcAddNameExpression": (ctypes.c_int, [prog, ctypes.c_char_p]),
        "nvrtcGetLoweredName": (ctypes.c_int, [prog, ctypes.c_char_p, _c_char_pp]),
    }
    for name, (restype, argtypes) in protos.items():
        fn = getattr(lib, name, None)
        if fn is None:
            # nvrtcGetSupportedArchs appeared in CUDA 11.2; the rest are older.
            if name in ("nvrtcGetNumSupportedArchs", "nvrtcGetSupportedArchs"):
                continue
            raise OSError(f"{lib._name} has no {name}: not an NVRTC library")
        fn.restype = restype
        fn.argtypes = argtypes


@functools.cache
def _load(path: str) -> ctypes.CDLL:
    lib = ctypes.CDLL(path)
    _declare(lib)
    return lib


def _describe_loaded(path: Path, origin: str) -> NvrtcLibrary:
    lib = _load(str(path))
    major, minor = ctypes.c_int(), ctypes.c_int()
    rc = lib.nvrtcVersion(ctypes.byref(major), ctypes.byref(minor))
    if rc != 0:
        raise OSError(f"nvrtcVersion failed with status {rc}")
    archs: tuple[int, ...] = ()
    if hasattr(lib, "nvrtcGetSupportedArchs"):
        n = ctypes.c_int()
        if lib.nvrtcGetNumSupportedArchs(ctypes.byref(n)) == 0 and n.value > 0:
            buf = (ctypes.c_int * n.value)()
            if lib.nvrtcGetSupportedArchs(buf) == 0:
                archs = tuple(buf)
    return NvrtcLibrary(path, (major.value, minor.value), origin, archs)


def open_nvrtc(library: NvrtcLibrary | None = None) -> ctypes.CDLL:
    """The loaded NVRTC (``find_nvrtc()`` by default) with its prototypes declared."""
    return _load(str((library or find_nvrtc()).path))


# ------------------------------------------------------------------- public API


@functools.cache
def find_nvrtc() -> NvrtcLibrary:
    """The NVRTC library to use; raises NotSupportedError saying what to install."""
    explicit = os.environ.get(ENV_NVRTC)
    if explicit:
        # An explicit choice must not silently fall back to another library.
        try:
            return _describe_loaded(Path(explicit), f"${ENV_NVRTC}")
        except OSError as exc:
            raise NotSupportedError(
                f"cudnnlite: {ENV_NVRTC}={explicit} is not a loadable NVRTC library ({exc}); "
                f"unset it or {INSTALL_HINT}"
            ) from exc

    candidates = _nvrtc_candidates()
    # Newest first; equal versions keep the search order.
    candidates.sort(key=lambda c: (tuple(-v for v in c.guessed) + (0,) * 3)[:3] + (c.order,))
    failures: list[str] = []
    for cand in candidates:
        try:
            return _describe_loaded(cand.path, cand.origin)
        except OSError as exc:
            failures.append(f"{cand.path}: {exc}")
    detail = ("; could not load: " + "; ".join(failures)) if failures else ""
    raise NotSupportedError(
        "cudnnlite: NVRTC (libnvrtc.so) not found in the pip wheels on sys.path, "
        f"CUDA_PATH/CUDA_HOME, /usr/local/cuda* or the system loader{detail}; {INSTALL_HINT}"
    )


def _read_define(path: Path, name: str) -> int | None:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return None
    m = re.search(rf"^\s*#\s*define\s+{name}\s+(\d+)", text, re.MULTILINE)
    return int(m.group(1)) if m else None


def _header_version(folder: Path, layout_major: int | None) -> tuple[int, ...] | None:
    # The runtime headers carry CUDART_VERSION (13050 = 13.5); include/cccl sits under a
    # toolkit's include folder that has them.
    for api in (folder / "cuda_runtime_api.h", folder.parent / "cuda_runtime_api.h"):
        v = _read_define(api, "CUDART_VERSION")
        if v:
            return (v // 1000, v % 1000 // 10)
    if layout_major is not None:
        return (layout_major,)
    # A lone CCCL tree: CCCL 2.x ships with CUDA 12, 3.x with CUDA 13.
    v = _read_define(folder / "cuda/std/__cccl/version.h", "CCCL_VERSION")
    if v:
        return (v // 1_000_000 + 10,)
    return None


def _include_candidates() -> list[HeaderDir]:
    """Include folders that hold cuda_fp16.h/cuda_bf16.h or nv/target, in search order."""
    folders: list[tuple[Path, str, int | None]] = []
    for site_dir in _site_dirs():
        nvidia = site_dir / "nvidia"
        for tree in sorted(
            nvidia.glob("cu[0-9]*"), key=lambda p: _version_key(p.name), reverse=True
        ):
            major = _version_key(tree.name)[0]
            origin = f"pip wheels nvidia-cuda-runtime/-cccl (nvidia/{tree.name}) in {site_dir}"
            folders += [
                (tree / "include", origin, major),
                (tree / "include" / "cccl", origin, major),
            ]
        folders.append(
            (
                nvidia / "cuda_runtime" / "include",
                f"pip wheel nvidia-cuda-runtime-cu12 in {site_dir}",
                None,
            )
        )
        folders.append(
            (
                nvidia / "cuda_cccl" / "include",
                f"pip wheel nvidia-cuda-cccl-cu12 in {site_dir}",
                None,
            )
        )
    for root, origin in _toolkit_roots():
        for sub in (
            "include",
            "include/cccl",
            "targets/x86_64-linux/include",
            "targets/x86_64-linux/include/cccl",
        ):
            folders.append((root / sub, f"CUDA toolkit ({origin})", None))
    out: list[HeaderDir] = []
    seen: set[Path] = set()
    for folder, origin, major in folders:
        if not folder.is_dir() or folder.resolve() in seen:
            continue
        seen.add(folder.resolve())
        provides = tuple(h for h in FP16_HEADERS + CCCL_HEADERS if (folder / h).is_file())
        if provides:
            out.append(HeaderDir(folder, provides, _header_version(folder, major), origin))
    return out


def _pick(
    candidates: list[HeaderDir], needs: tuple[str, ...], want: tuple[int, int] | None
) -> HeaderDir | None:
    usable = [c for c in candidates if all(h in c.provides for h in needs)]
    if not usable:
        return None

    def rank(item: tuple[int, HeaderDir]) -> tuple:
        order, c = item
        v = c.cuda_version or ()
        same_major = want is not None and v[:1] == want[:1]
        same_version = want is not None and v[:2] == want[:2]
        # Same major as NVRTC first (exact minor better), otherwise the newest, then search order.
        return (not same_major, not same_version, tuple(-x for x in v) + (0, 0), order)

    return min(enumerate(usable), key=rank)[1]


@functools.cache
def find_cuda_headers(nvrtc_version: tuple[int, int] | None = None) -> CudaHeaders:
    """The runtime (fp16/bf16) and CCCL include folders, matching ``nvrtc_version`` when possible.

    ``nvrtc_version`` defaults to that of :func:`find_nvrtc` (or the newest headers when
    NVRTC is not found). Raises NotSupportedError naming the wheel to install.
    """
    if nvrtc_version is None:
        try:
            nvrtc_version = find_nvrtc().version
        except NotSupportedError:
            nvrtc_version = None
    candidates = _include_candidates()
    fp16 = _pick(candidates, FP16_HEADERS, nvrtc_version)
    cccl = _pick(candidates, CCCL_HEADERS, nvrtc_version)
    want = f"CUDA {nvrtc_version[0]}" if nvrtc_version else "CUDA"
    if fp16 is None:
        raise NotSupportedError(
            f"cudnnlite: cuda_fp16.h / cuda_bf16.h not found ({want} runtime headers; NVRTC ships "
            "only nvrtc.h): pip install nvidia-cuda-runtime (CUDA 13) or nvidia-cuda-runtime-cu12, "
            f"or {INSTALL_HINT}"
        )
    # The fp16/bf16 headers of CUDA 12.2+ skip #include <nv/target> under __CUDACC_RTC__
    # (NVRTC provides it), so CCCL is required only with older NVRTC or headers.
    rtc_provides_target = (
        nvrtc_version is not None
        and nvrtc_version >= (12, 2)
        and (fp16.cuda_version or (0,)) >= (12, 2)
    )
    if cccl is None and not rtc_provides_target:
        raise NotSupportedError(
            f"cudnnlite: <nv/target> not found ({want} CCCL headers, needed by cuda_fp16.h): "
            f"pip install nvidia-cuda-cccl (CUDA 13) or nvidia-cuda-cccl-cu12, or {INSTALL_HINT}"
        )
    return CudaHeaders(fp16, cccl)


def find_cuda_include_dirs(nvrtc_version: tuple[int, int] | None = None) -> list[Path]:
    """``-I`` folders for NVRTC: the one with cuda_fp16.h/cuda_bf16.h, then CCCL's (nv/target),
    then, when the first lacks them, the folder with the ``crt/`` headers that ``mma.h``
    (tensor cores) includes: CUDA 13 wheels put them in the same tree (nvidia-cuda-crt),
    CUDA 12 wheels in nvidia-cuda-nvcc-cu12's ``nvidia/cuda_nvcc/include``.

    The headers match ``nvrtc_version`` when possible (default: :func:`find_nvrtc`'s; the
    CUDA backend passes the version of the NVRTC it compiles with, maybe CuPy's)."""
    headers = find_cuda_headers(nvrtc_version)
    dirs = headers.include_dirs()
    if not (headers.fp16.path / "crt" / "mma.h").is_file():
        crt = _find_crt_dir(headers.fp16.major)
        if crt is not None:
            dirs.append(crt)
    return dirs


def _find_crt_dir(major: int | None) -> Path | None:
    candidates: list[Path] = []
    for site_dir in _site_dirs():
        candidates.append(site_dir / "nvidia" / "cuda_nvcc" / "include")
        candidates += sorted((site_dir / "nvidia").glob("cu[0-9]*/include"), reverse=True)
    for root, _ in _toolkit_roots():
        candidates += [root / "include", root / "targets/x86_64-linux/include"]
    for folder in candidates:
        if (folder / "crt" / "mma.h").is_file():
            if (
                major is None
                or "cuda_nvcc" in str(folder)
                or f"cu{major}" in str(folder)
                or (_header_version(folder, None) or (major,))[:1] == (major,)
            ):
                return folder
    return None


def toolkit_report() -> ToolkitReport:
    """What discovery finds and why it fails, without raising (for ``cudnnlite doctor``)."""
    nvrtc: NvrtcLibrary | None = None
    headers: CudaHeaders | None = None
    nvrtc_error = headers_error = None
    try:
        nvrtc = find_nvrtc()
    except NotSupportedError as exc:
        nvrtc_error = str(exc)
    try:
        headers = find_cuda_headers(nvrtc.version if nvrtc else None)
    except NotSupportedError as exc:
        headers_error = str(exc)
    return ToolkitReport(
        nvrtc,
        nvrtc_error,
        headers,
        headers_error,
        [(c.path, c.origin) for c in _nvrtc_candidates()],
        _include_candidates(),
    )


def clear_caches() -> None:
    """Forget discovery results (loaded libraries stay loaded)."""
    find_nvrtc.cache_clear()
    find_cuda_headers.cache_clear()
