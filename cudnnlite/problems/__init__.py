"""Frozen, hashable problem descriptions with readable keys (the tuning DB's keys).

Every problem type has ``key()``, ``parse(key)`` and ``family`` (the solver family that
runs it: ``conv_fwd``, ``sdpa_bwd``, ...); ``parse_key`` reads a key of any type.
"""

from __future__ import annotations

from typing import Any

from ..errors import BadParamError
from .attention import AttentionProblem
from .conv import ConvProblem
from .rnn import RnnProblem

PROBLEM_TYPES: tuple[type, ...] = (ConvProblem, AttentionProblem, RnnProblem)
_PREFIXES = {"conv": ConvProblem, "rnn": RnnProblem, "sdpa": AttentionProblem}


def parse_key(key: str) -> Any:
    """The problem a key of any family describes; BadParamError when none reads it."""
    if not isinstance(key, str):
        raise BadParamError(f"problem key: expected a string, got {type(key).__name__}")
    head = key.strip().split("_", 1)[0]
    cls = next((c for pre, c in _PREFIXES.items() if head.startswith(pre)), None)
    if cls is None:
        raise BadParamError(
            f"not a problem key: {key!r} (keys start with {', '.join(sorted(_PREFIXES))})"
        )
    return cls.parse(key)


def is_problem(obj: Any) -> bool:
    return isinstance(obj, PROBLEM_TYPES)


__all__ = [
    "PROBLEM_TYPES",
    "AttentionProblem",
    "ConvProblem",
    "RnnProblem",
    "is_problem",
    "parse_key",
]
