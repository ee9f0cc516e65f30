"""Finds the kernel sources (``cuda_src/``) and the tuning DB in a wheel, an editable
install or a checkout."""

from __future__ import annotations

import functools
import hashlib
import os
from pathlib import Path

_PACKAGE_DIR = Path(__file__).resolve().parent.parent


def _find_dir(name: str) -> Path:
    # A wheel ships the folder inside the package; a checkout (editable install or
    # PYTHONPATH=.) has it next to the package.
    for candidate in (_PACKAGE_DIR / name, _PACKAGE_DIR.parent / name):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(f"cudnnlite: cannot find the {name}/ folder next to {_PACKAGE_DIR}")


@functools.cache
def cuda_src_dir() -> Path:
    """The folder holding the ``.cu`` kernel sources."""
    return _find_dir("cuda_src")


@functools.cache
def tuning_db_dir() -> Path:
    """The folder holding the shipped tuning databases."""
    return _find_dir("tuning_db")


def source_path(relative: str) -> Path:
    """Absolute path of a kernel source given relative to ``cuda_src/``."""
    path = cuda_src_dir() / relative
    if not path.is_file():
        raise FileNotFoundError(
            f"cudnnlite: kernel source {relative!r} not found in {cuda_src_dir()}"
        )
    return path


@functools.cache
def common_headers_digest() -> str:
    """Hash of every header (``*.cuh``) under ``cuda_src/``.

    Compilers' caches key on the main source only; kernels include these headers
    (``common/*.cuh``, ``conv/conv_common.cuh``, ...), so the digest goes into every
    compile key (and into NVRTC options) to keep the caches honest when a header
    changes. Kernel sources include headers only, never another ``.cu`` file.
    """
    h = hashlib.sha256()
    root = cuda_src_dir()
    for path in sorted(root.rglob("*.cuh")):
        h.update(str(path.relative_to(root)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def cache_root() -> Path:
    """Where compiled kernels are cached: ``$CUDNNLITE_CACHE_DIR``, else
    ``$XDG_CACHE_HOME/cudnnlite`` (``~/.cache/cudnnlite``); the emulator's libraries go
    in ``emu``, the CUDA backend's CUBINs in ``cubin``."""
    root = os.environ.get("CUDNNLITE_CACHE_DIR")
    if root:
        return Path(root)
    return Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "cudnnlite"
