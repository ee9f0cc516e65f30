"""The tuning database: YAML files mapping readable problem keys to ranked solvers.

One file per arch (``sm_90.yaml``, ``cpu.yaml``)::

    schema: 1
    arch: sm_90
    entries:
      conv2d_fwd n32-c64-h56-w56 k64-r3-s3 p1x1-u1x1-d1x1 g1 NCHW fp32:
      - {solver: conv_fwd_winograd_f4x4_3x3, config: {}, time_us: 41.2, workspace: 1048576}
      - {solver: conv_fwd_implicit_gemm, config: {bm: 128, ...}, time_us: 55.0, workspace: 0}

The shipped files in ``tuning_db/`` are read-only defaults; the user DB
(``$CUDNNLITE_TUNING_DIR``, else ``~/.cache/cudnnlite/tuning``) overrides them key by
key. Writes take a file lock (``filelock``), re-read and merge what is on disk, write
a temporary file and rename it, so concurrent tuning processes lose nothing.

Everything read back is validated: an unknown solver, an invalid config, a corrupt
file or another schema is skipped with one warning and the library keeps working; a
corrupt file is moved aside (``<name>.corrupt-<time>``), never deleted; a read-only
directory degrades to an in-memory DB with a warning.
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from ..runtime.sources import tuning_db_dir

SCHEMA = 1


class TuningDBWarning(UserWarning):
    """A tuning DB file or entry was skipped (the library keeps working)."""


@dataclass(frozen=True)
class Entry:
    """One measured (solver, config) for a problem key."""

    solver: str
    config: dict[str, Any] = field(default_factory=dict)
    time_us: float | None = None
    workspace: int = 0

    def to_yaml(self) -> dict[str, Any]:
        d: dict[str, Any] = {"solver": self.solver, "config": dict(self.config)}
        if self.time_us is not None:
            d["time_us"] = round(float(self.time_us), 3)
        d["workspace"] = int(self.workspace)
        return d

    @classmethod
    def from_yaml(cls, d: Any) -> Entry:
        if not isinstance(d, dict) or not isinstance(d.get("solver"), str):
            raise ValueError(f"entry must be a mapping with a 'solver' name, got {d!r}")
        config = d.get("config") or {}
        if not isinstance(config, dict):
            raise ValueError(f"config must be a mapping, got {config!r}")
        t = d.get("time_us")
        return cls(d["solver"], config, None if t is None else float(t), int(d.get("workspace", 0)))


def user_dir() -> Path:
    env = os.environ.get("CUDNNLITE_TUNING_DIR")
    if env:
        return Path(env)
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache"))
    return cache / "cudnnlite" / "tuning"


def shipped_path(arch: str) -> Path | None:
    try:
        path = tuning_db_dir() / f"{arch}.yaml"
    except FileNotFoundError:
        return None
    return path if path.is_file() else None


def _warn(message: str) -> None:
    warnings.warn(message, TuningDBWarning, stacklevel=3)


def read_file(path: Path, *, move_corrupt: bool) -> dict[str, list[Entry]]:
    """The entries of one file; {} with a warning when it cannot be used."""
    try:
        text = path.read_text()
    except (FileNotFoundError, NotADirectoryError):  # no file (yet): an empty DB
        return {}
    except OSError as exc:
        _warn(f"tuning DB {path}: cannot read ({exc}); ignored")
        return {}
    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        doc = exc
    if doc is None:
        return {}
    if isinstance(doc, Exception) or not isinstance(doc, dict):
        where = ""
        if move_corrupt:
            aside = path.with_name(f"{path.name}.corrupt-{time.strftime('%Y%m%dT%H%M%S')}")
            try:
                path.replace(aside)
                where = f"; moved aside to {aside.name}"
            except OSError:
                where = "; could not move it aside"
        _warn(f"tuning DB {path} is corrupt (not a YAML mapping){where}; ignored")
        return {}
    if doc.get("schema") != SCHEMA:
        _warn(
            f"tuning DB {path} has schema {doc.get('schema')!r}, this library reads "
            f"{SCHEMA}; ignored"
        )
        return {}
    raw = doc.get("entries") or {}
    if not isinstance(raw, dict):
        _warn(f"tuning DB {path}: 'entries' is not a mapping; ignored")
        return {}
    out: dict[str, list[Entry]] = {}
    bad = 0
    for key, items in raw.items():
        try:
            if not isinstance(items, list):
                raise ValueError("not a list")
            out[str(key)] = [Entry.from_yaml(d) for d in items]
        except (ValueError, TypeError):
            bad += 1
    if bad:
        _warn(f"tuning DB {path}: {bad} malformed entries skipped")
    return out


def dump(arch: str, entries: dict[str, list[Entry]]) -> str:
    doc = {
        "schema": SCHEMA,
        "arch": arch,
        "entries": {k: [e.to_yaml() for e in entries[k]] for k in sorted(entries)},
    }
    return yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=120)


def write_atomic(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=path.name, suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


class TuningDB:
    """The shipped and user databases of one arch, merged (the user's entry wins)."""

    def __init__(self, arch: str, user_directory: Path | None = None,
                 shipped: Path | None | bool = True) -> None:  # fmt: skip
        self.arch = arch
        self.user_path = Path(user_directory or user_dir()) / f"{arch}.yaml"
        self.shipped_path = shipped_path(arch) if shipped is True else (shipped or None)
        self._lock = threading.Lock()
        self.read_only = False
        self._memory: dict[str, list[Entry]] = {}  # writes when the user dir is read-only
        self.reload()

    def reload(self) -> None:
        with self._lock:
            self.shipped = (
                read_file(self.shipped_path, move_corrupt=False) if self.shipped_path else {}
            )
            self.user = read_file(self.user_path, move_corrupt=True)
            self.user.update(self._memory)

    def lookup(self, key: str) -> tuple[list[Entry], str] | None:
        """The ranked entries for ``key`` and where they came from ("user DB" or
        "shipped DB"), or None."""
        entries = self.user.get(key)
        if entries:
            return entries, "user DB"
        entries = self.shipped.get(key)
        if entries:
            return entries, "shipped DB"
        return None

    def keys(self) -> list[str]:
        return sorted(set(self.user) | set(self.shipped))

    def record(self, key: str, entries: Iterable[Entry]) -> None:
        """Stores the ranked entries of one key in the user DB (merge-safe)."""
        self.record_many({key: list(entries)})

    def record_many(self, new: dict[str, list[Entry]]) -> None:
        # (imported here: `import cudnnlite` needs no filelock, a GPU box without it runs)
        from filelock import FileLock, Timeout

        with self._lock:
            self.user.update(new)
            if self.read_only:
                self._memory.update(new)
                return
            try:
                self.user_path.parent.mkdir(parents=True, exist_ok=True)
                with FileLock(str(self.user_path) + ".lock", timeout=60):
                    merged = read_file(self.user_path, move_corrupt=True)
                    merged.update(new)
                    write_atomic(self.user_path, dump(self.arch, merged))
                    self.user = merged
            except (OSError, Timeout) as exc:
                self.read_only = True
                self._memory.update(new)
                _warn(
                    f"tuning DB {self.user_path}: cannot write ({exc}); results are kept in "
                    "memory for this process"
                )


_DBS: dict[tuple[str, str], TuningDB] = {}
_DBS_LOCK = threading.Lock()


def database(arch: str) -> TuningDB:
    """The process-wide DB of an arch (per user directory, so tests can switch it)."""
    key = (arch, str(user_dir()))
    with _DBS_LOCK:
        db = _DBS.get(key)
        if db is None:
            db = _DBS[key] = TuningDB(arch)
        return db


def forget_databases() -> None:
    """Drops the loaded DBs (they are re-read on next use)."""
    with _DBS_LOCK:
        _DBS.clear()
