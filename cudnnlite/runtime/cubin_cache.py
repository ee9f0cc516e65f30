"""On-disk cache of the CUDA backend's compiled modules (CUBIN + lowered kernel names).

A second process loads a module instead of compiling it again. The key is a hash of what
decides the code: the source text, the NVRTC options (the cuda_src headers' digest, the
defines and the CUDA headers' folders are among them), the name expressions, the NVRTC
version and the arch. Entries live in ``$CUDNNLITE_CACHE_DIR/cubin/<arch>/`` (default
``~/.cache/cudnnlite/cubin``, beside the emulator's ``emu``); ``CUDNNLITE_CUBIN_CACHE=0``
turns the cache off.

An entry is two files, ``<key>.cubin`` and ``<key>.json`` (the lowered names, NVRTC's log
and the CUBIN's SHA-256), each written to a temporary file and renamed, the JSON last; an
entry that fails to read back whole is compiled again and overwritten. A per-key file
lock (``filelock``) makes concurrent processes compile a module once.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from .sources import cache_root

ENV_DISABLE = "CUDNNLITE_CUBIN_CACHE"
CACHE_FORMAT = 1
# A compile of the largest module takes tens of seconds; a lock held longer is a stuck
# process: compile without the cache rather than wait for it.
LOCK_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class CompiledModule:
    """What a module needs at load time."""

    cubin: bytes = field(repr=False)
    lowered_names: dict[str, str]  # name expression -> symbol in the cubin
    log: str = ""  # NVRTC's warnings
    from_cache: bool = False


def cache_dir() -> Path:
    """``$CUDNNLITE_CACHE_DIR/cubin``, else ``$XDG_CACHE_HOME/cudnnlite/cubin``
    (``~/.cache/cudnnlite/cubin``); the emulator's libraries sit beside it in ``emu``."""
    return cache_root() / "cubin"


def enabled() -> bool:
    return os.environ.get(ENV_DISABLE, "1").strip().lower() not in ("0", "false", "no", "off")


def cache_key(
    source: str,
    name_expressions: Sequence[str],
    options: Sequence[str],
    nvrtc_version: tuple[int, ...],
    arch: str,
) -> str:
    """A hex digest of everything that decides the CUBIN and its lowered names."""
    blob = json.dumps(
        {
            "format": CACHE_FORMAT,
            "source": hashlib.sha256(source.encode()).hexdigest(),
            "names": list(name_expressions),
            "options": list(options),
            "nvrtc": list(nvrtc_version),
            "arch": arch,
        },
        sort_keys=True,
    )
    return hashlib.sha256(blob.encode()).hexdigest()[:40]


def _entry_paths(arch: str, key: str) -> tuple[Path, Path]:
    folder = cache_dir() / arch
    return folder / f"{key}.cubin", folder / f"{key}.json"


def load(arch: str, key: str, name_expressions: Sequence[str]) -> CompiledModule | None:
    """The cached module, or None when absent, incomplete or corrupt."""
    cubin_path, meta_path = _entry_paths(arch, key)
    try:
        meta = json.loads(meta_path.read_text())
        cubin = cubin_path.read_bytes()
    except (OSError, ValueError):
        return None
    if not isinstance(meta, dict) or meta.get("format") != CACHE_FORMAT:
        return None
    lowered = meta.get("lowered_names")
    if (
        meta.get("sha256") != hashlib.sha256(cubin).hexdigest()
        or not isinstance(lowered, dict)
        or set(lowered) != set(name_expressions)
    ):
        return None
    return CompiledModule(cubin, dict(lowered), str(meta.get("log", "")), from_cache=True)


def _write_atomic(path: Path, data: bytes) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(data)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def store(arch: str, key: str, module: CompiledModule) -> None:
    """Writes an entry: the CUBIN, then the JSON that makes it visible."""
    cubin_path, meta_path = _entry_paths(arch, key)
    cubin_path.parent.mkdir(parents=True, exist_ok=True)
    _write_atomic(cubin_path, module.cubin)
    meta = {
        "format": CACHE_FORMAT,
        "sha256": hashlib.sha256(module.cubin).hexdigest(),
        "lowered_names": module.lowered_names,
        "log": module.log,
    }
    _write_atomic(meta_path, json.dumps(meta, indent=1, sort_keys=True).encode())


_warned: set[str] = set()


def _warn_once(what: str, exc: BaseException) -> None:
    if what not in _warned:
        _warned.add(what)
        warnings.warn(
            f"cudnnlite: the CUBIN cache in {cache_dir()} {what} ({exc}); "
            f"compiling without it (set {ENV_DISABLE}=0 to silence this)",
            RuntimeWarning,
            stacklevel=3,
        )


def get_or_compile(
    arch: str,
    key: str,
    name_expressions: Sequence[str],
    compile_fn: Callable[[], CompiledModule],
) -> CompiledModule:
    """The cached module for ``key``, else ``compile_fn()``'s, stored for the next process.

    A cache that cannot be written (read-only folder, full disk) costs a warning, never
    the compile; compile errors propagate and nothing is stored.
    """
    if not enabled():
        return compile_fn()
    hit = load(arch, key, name_expressions)
    if hit is not None:
        return hit
    from filelock import FileLock, Timeout

    cubin_path, _ = _entry_paths(arch, key)
    try:
        cubin_path.parent.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(cubin_path.with_suffix(".lock")), timeout=LOCK_TIMEOUT_S)
        lock.acquire()
    except (OSError, Timeout) as exc:
        _warn_once("cannot be locked", exc)
        return compile_fn()
    try:
        hit = load(arch, key, name_expressions)  # another process may have finished it
        if hit is not None:
            return hit
        module = compile_fn()
        try:
            store(arch, key, module)
        except OSError as exc:
            _warn_once("cannot be written", exc)
        return module
    finally:
        lock.release()
