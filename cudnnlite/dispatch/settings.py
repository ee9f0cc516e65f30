"""Global dispatch controls, like ``torch.backends.cudnn``'s.

- ``set_mode("auto" | "benchmark")``: "auto" takes the tuning DB or the heuristics;
  "benchmark" tunes every problem not in a DB at its first call and stores the result
  in the user DB (like ``torch.backends.cudnn.benchmark = True``).
- ``set_workspace_limit(bytes | None)``: solvers needing more are not chosen.
- ``set_deterministic(bool)``: only bitwise-reproducible solvers are chosen.

Environment switches for debugging and bisecting (read at each selection):
``CUDNNLITE_DISABLE_SOLVERS=a,b`` never chooses those solvers;
``CUDNNLITE_FORCE_SOLVER=name`` chooses that one (NotSupported if it does not apply);
``CUDNNLITE_FORCE_CONFIG='{"bm": 64, ...}'`` (JSON) with it, its config.
"""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

from ..errors import BadParamError

MODES = ("auto", "benchmark")
DEFAULT_WORKSPACE_LIMIT = 1 << 30  # 1 GiB


@dataclass(frozen=True)
class Settings:
    mode: str = "auto"
    workspace_limit: int | None = DEFAULT_WORKSPACE_LIMIT
    deterministic: bool = False

    def __post_init__(self) -> None:
        # Settings are part of every cache key: hashed once, not field by field per call.
        object.__setattr__(self, "_hash", hash((self.mode, self.workspace_limit,
                                                self.deterministic)))  # fmt: skip

    def __hash__(self) -> int:
        return self._hash  # type: ignore[attr-defined,no-any-return]


_current = Settings()


def current() -> Settings:
    return _current


def set_mode(mode: str) -> None:
    """``"auto"`` (DB, then heuristics) or ``"benchmark"`` (tune unseen problems)."""
    global _current
    if mode not in MODES:
        raise BadParamError(f"mode: expected one of {MODES}, got {mode!r}")
    _current = replace(_current, mode=mode)


def set_workspace_limit(limit: int | None) -> None:
    """Bytes of workspace a solver may use; None for no limit."""
    global _current
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 0):
        raise BadParamError(f"limit: expected a byte count >= 0 or None, got {limit!r}")
    _current = replace(_current, workspace_limit=limit)


def set_deterministic(flag: bool) -> None:
    """Only choose solvers whose results are bitwise reproducible."""
    global _current
    if not isinstance(flag, bool):
        raise BadParamError(f"flag: expected a bool, got {flag!r}")
    _current = replace(_current, deterministic=flag)


@contextlib.contextmanager
def settings(**changes: Any) -> Iterator[Settings]:
    """Temporarily changes settings: ``with cudnnlite.settings(deterministic=True): ...``"""
    global _current
    old = _current
    unknown = set(changes) - {"mode", "workspace_limit", "deterministic"}
    if unknown:
        raise BadParamError(f"settings: unknown setting(s) {sorted(unknown)}")
    try:
        if "mode" in changes:
            set_mode(changes["mode"])
        if "workspace_limit" in changes:
            set_workspace_limit(changes["workspace_limit"])
        if "deterministic" in changes:
            set_deterministic(changes["deterministic"])
        yield _current
    finally:
        _current = old


def disabled_solvers() -> frozenset[str]:
    raw = os.environ.get("CUDNNLITE_DISABLE_SOLVERS", "")
    return frozenset(s.strip() for s in raw.split(",") if s.strip())


def forced_solver() -> tuple[str, dict[str, Any] | None] | None:
    name = os.environ.get("CUDNNLITE_FORCE_SOLVER", "").strip()
    if not name:
        return None
    raw = os.environ.get("CUDNNLITE_FORCE_CONFIG", "").strip()
    if not raw:
        return name, None
    try:
        config = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise BadParamError(f"CUDNNLITE_FORCE_CONFIG is not JSON: {exc}") from None
    if not isinstance(config, dict):
        raise BadParamError("CUDNNLITE_FORCE_CONFIG must be a JSON object")
    return name, config
