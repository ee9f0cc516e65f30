"""Frozen, hashable problem descriptions with readable keys (the tuning DB's keys)."""

from .conv import ConvProblem

__all__ = ["ConvProblem"]
