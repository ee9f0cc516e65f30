"""Reading environment switches on a hot path.

``os.environ.get`` encodes the name and decodes the value on every call (about 1 us per
name on a slow core); the per-call caches and the emulator's launches read several
switches per call. CPython's ``os.environ`` keeps its encoded items in ``_data``, where a
lookup is a dict access: :func:`raw_reader` reads there when it can (values as the
platform stores them, bytes on POSIX: fine as cache keys and for change detection; parse
them with ``os.fsdecode``) and through ``os.environ.get`` elsewhere.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence
from typing import Any


def raw_reader(names: Sequence[str]) -> Callable[[], tuple[Any, ...]]:
    """A function returning the raw values (None when unset) of ``names``, in order."""
    data = getattr(os.environ, "_data", None)
    encodekey = getattr(os.environ, "encodekey", None)
    names = tuple(names)
    if isinstance(data, dict) and encodekey is not None:
        keys = tuple(encodekey(n) for n in names)
        get = data.get
        return lambda: tuple(map(get, keys))
    return lambda: tuple([os.environ.get(n) for n in names])


def none_set(names: Sequence[str]) -> Callable[[], bool]:
    """A function answering whether none of ``names`` is set: one C-level pass over the
    names (a third of :func:`raw_reader`'s cost for a dozen names), for a hot path whose
    common case is every switch unset."""
    data = getattr(os.environ, "_data", None)
    encodekey = getattr(os.environ, "encodekey", None)
    names = tuple(names)
    if isinstance(data, dict) and encodekey is not None:
        keys = frozenset(encodekey(n) for n in names)
        return functools.partial(data.keys().isdisjoint, keys)
    return lambda: all(os.environ.get(n) is None for n in names)


def flag(raw: Any) -> bool:
    """An on/off switch's value, raw (bytes) or str; unset (None) is off."""
    text = "0" if raw is None else os.fsdecode(raw) if isinstance(raw, bytes) else raw
    return text.strip().lower() in ("1", "true", "yes", "on")


__all__ = ["flag", "none_set", "raw_reader"]
